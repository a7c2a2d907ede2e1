//! A compiled module behind one API for every backend: run it on literals (any layout in,
//! the module's layouts out), on resident [`DeviceBuffer`]s (no copies, no relayouts), or on
//! caller-owned raw physical buffers.
//!
//! Parameters and results are addressed as the program flattens them: entry parameters
//! depth-first through tuples ("parameter leaves"), and the result tuple depth-first. For a
//! module without tuple parameters, parameter leaf `i` is entry parameter `i`.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tessera_hlo::eval::{evaluate_with, CustomCallRegistry, EvalOptions};
use tessera_hlo::{ArrayShape, LayoutMap, Literal, LiteralError, Module, Shape};
use tessera_lower::{Program, Timings};
use tessera_runtime::{HostFunctions, Parameter, RuntimeError};

use crate::cache::CacheOutcome;
use crate::device_buffer::{physical_bytes, shape_text};
use crate::tiered::Tiered;
use crate::{Backend, DeviceBuffer, Error};

/// An argument of [`Executable::execute_donating`]: a buffer the caller gives up, which a
/// result may come back in, or one it lends, which the run only reads.
#[derive(Debug)]
// A call holds one per parameter, moved in once: boxing the buffer would only add an
// allocation per donated argument.
#[allow(clippy::large_enum_variant)]
pub enum Argument<'a> {
    Donated(DeviceBuffer),
    Lent(&'a DeviceBuffer),
}

impl Argument<'_> {
    /// The argument's buffer.
    pub fn buffer(&self) -> &DeviceBuffer {
        match self {
            Argument::Donated(b) => b,
            Argument::Lent(b) => b,
        }
    }
}

/// The entry computation's parameters and result, with the layouts callers see.
pub(crate) struct Signature {
    /// Entry parameters with their declared layouts.
    parameters: Vec<Shape>,
    /// Array leaves of the parameters, depth-first, every one with an explicit layout.
    parameter_leaves: Vec<Leaf>,
    result: Shape,
    result_leaves: Vec<Leaf>,
}

struct Leaf {
    shape: ArrayShape,
    map: LayoutMap,
    bytes: usize,
}

impl Leaf {
    fn new(shape: &ArrayShape) -> Result<Leaf, Error> {
        let mut shape = shape.clone();
        shape.layout = Some(shape.layout_or_default());
        // Values always have their bounds' sizes (the lowering's `static_bounds` pass and the
        // interpreter agree), so a bounded dynamic dimension crosses the API at its bound.
        let map = LayoutMap::at_bounds(&shape).map_err(LiteralError::from)?;
        shape.dynamic.fill(false);
        let bytes = physical_bytes(&shape)?;
        Ok(Leaf { shape, map, bytes })
    }
}

fn leaves(shape: &Shape) -> Result<Vec<Leaf>, Error> {
    shape.leaves().into_iter().filter_map(|(_, s)| s.as_array()).map(Leaf::new).collect()
}

impl Signature {
    /// The signature of entry parameters and a result of these shapes (with their layouts).
    pub(crate) fn from_shapes(parameters: Vec<Shape>, result: Shape) -> Result<Signature, Error> {
        let parameter_leaves = parameters.iter().map(leaves).collect::<Result<Vec<_>, _>>()?.into_iter().flatten();
        Ok(Signature {
            parameter_leaves: parameter_leaves.collect(),
            result_leaves: leaves(&result)?,
            parameters,
            result,
        })
    }

    /// The entry parameters' and the result's shapes, with their layouts.
    pub(crate) fn shapes(&self) -> (Vec<Shape>, Shape) {
        (self.parameters.clone(), self.result.clone())
    }

    /// The signature `entry_computation_layout` declares (the parameter instructions' shapes
    /// where it says nothing).
    pub(crate) fn of_module(module: &Module) -> Result<Signature, Error> {
        let entry = module.entry_comp();
        let declared = module.entry_computation_layout();
        let pick = |own: Shape, declared: Option<&Shape>| match declared {
            Some(d) if d.compatible(&own) => d.clone(),
            _ => own,
        };
        let parameters: Vec<Shape> = entry
            .parameter_shapes()
            .into_iter()
            .enumerate()
            .map(|(i, s)| pick(s, declared.and_then(|d| d.parameters.get(i))))
            .collect();
        let result = pick(entry.root_inst().shape.clone(), declared.map(|d| &d.result));
        Signature::from_shapes(parameters, result)
    }

    /// The lowering must lay out parameters and results exactly as the module declares them;
    /// anything else is a lowering bug, reported rather than run.
    pub(crate) fn check_program(&self, program: &Program) -> Result<(), Error> {
        let check = |what: &str, ids: &[tessera_lower::BufferId], leaves: &[Leaf]| -> Result<(), Error> {
            if ids.len() != leaves.len() {
                return Err(RuntimeError::Invalid(format!(
                    "the program has {} {what}s but the module {}",
                    ids.len(),
                    leaves.len()
                ))
                .into());
            }
            for (i, (id, leaf)) in ids.iter().zip(leaves).enumerate() {
                let buffer = &program.buffers[id.0 as usize];
                let same = LayoutMap::new(&buffer.shape).is_ok_and(|m| m == leaf.map);
                if !same || buffer.bytes != leaf.bytes as u64 {
                    return Err(RuntimeError::Invalid(format!(
                        "{what} {i} is laid out as {} but the module declares {}",
                        shape_text(&buffer.shape),
                        shape_text(&leaf.shape)
                    ))
                    .into());
                }
            }
            Ok(())
        };
        check("parameter", &program.parameters, &self.parameter_leaves)?;
        check("result", &program.results, &self.result_leaves)
    }
}

/// What runs the module.
pub(crate) enum Engine {
    /// The interpreter, with the host functions its custom-calls run and the seed its `rng`
    /// ops draw with.
    Interp {
        module: Box<Module>,
        host: HostFunctions,
        rng_seed: u64,
    },
    /// A compiled program, and the tier that compiled it.
    Compiled(Box<tessera_runtime::Executable>, Backend),
    Tiered(Box<Tiered>),
}

impl Engine {
    /// The runtime executable runs use now, and the tier whose code it holds (`None` for the
    /// interpreter).
    fn compiled(&self) -> Option<(&tessera_runtime::Executable, Backend)> {
        match self {
            Engine::Interp { .. } => None,
            Engine::Compiled(exe, tier) => Some((exe, *tier)),
            Engine::Tiered(tiered) => Some(tiered.current()),
        }
    }
}

/// The interpreter's infeed and outfeed queues (a compiled executable keeps its own).
#[derive(Default)]
struct InterpQueues {
    infeed: Mutex<VecDeque<Literal>>,
    outfeed: Mutex<VecDeque<Literal>>,
}

/// A poisoned lock only means another thread panicked mid-push; the queue is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Executable {
    backend: Backend,
    engine: Engine,
    signature: Signature,
    pub(crate) compile_time: Duration,
    pub(crate) compile_timings: Timings,
    queues: InterpQueues,
    /// Kernel launches of the last run to finish (on whichever tier ran it).
    last_run_launches: AtomicU64,
    /// What the compile cache did for this executable's compile.
    pub(crate) cache: CacheOutcome,
}

impl Executable {
    pub(crate) fn new(
        backend: Backend,
        engine: Engine,
        signature: Signature,
        compile_time: Duration,
        compile_timings: Timings,
    ) -> Executable {
        Executable {
            backend,
            engine,
            signature,
            compile_time,
            compile_timings,
            queues: InterpQueues::default(),
            last_run_launches: AtomicU64::new(0),
            cache: CacheOutcome::Off,
        }
    }

    /// What the compile cache did for this executable: loaded it, compiled and stored it,
    /// rejected a damaged entry, or nothing.
    pub fn cache_outcome(&self) -> &CacheOutcome {
        &self.cache
    }

    /// Queues a literal for the module's next `infeed` (first in, first out), on every
    /// backend. An `infeed` that runs with nothing queued fails the run with an error naming
    /// the instruction; the queue persists across runs.
    pub fn push_infeed(&self, literal: Literal) {
        match self.engine.compiled() {
            Some((exe, _)) => exe.push_infeed(literal),
            None => lock(&self.queues.infeed).push_back(literal),
        }
    }

    /// Literals queued for infeed and not read yet.
    pub fn infeed_len(&self) -> usize {
        match self.engine.compiled() {
            Some((exe, _)) => exe.infeed_len(),
            None => lock(&self.queues.infeed).len(),
        }
    }

    /// The oldest value an `outfeed` sent and nobody took yet (in the layout the outfeed's
    /// operand has).
    pub fn pop_outfeed(&self) -> Option<Literal> {
        match self.engine.compiled() {
            Some((exe, _)) => exe.pop_outfeed(),
            None => lock(&self.queues.outfeed).pop_front(),
        }
    }

    /// Runs the interpreter (with the client's host functions, its rng seed and this
    /// executable's queues) on entry arguments.
    fn evaluate(&self, args: &[Literal]) -> Result<Literal, Error> {
        let Engine::Interp { module, host, rng_seed } = &self.engine else {
            return Err(RuntimeError::Invalid("only the interpreter evaluates a module".into()).into());
        };
        let rng_seed = *rng_seed;
        let mut registry = CustomCallRegistry::new();
        for (target, f) in host {
            let f = f.clone();
            registry.register(target.clone(), move |args: &[Literal]| f(args));
        }
        let queued: Vec<Literal> = lock(&self.queues.infeed).drain(..).collect();
        let options = EvalOptions::new().with_custom_calls(registry).with_infeed(queued).with_rng_seed(rng_seed);
        let result = evaluate_with(module, args, &options);
        // What the run did not read stays queued, ahead of anything queued meanwhile.
        let mut infeed = lock(&self.queues.infeed);
        let mut rest = Vec::new();
        while let Some(l) = options.pop_infeed() {
            rest.push(l);
        }
        for l in rest.into_iter().rev() {
            infeed.push_front(l);
        }
        lock(&self.queues.outfeed).extend(options.take_outfeed());
        Ok(result?)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Wall time of `Client::compile` (verification through assembly), and of parsing too when
    /// compiled from text (`Client::compile_text`).
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Where the compile time went, phase by phase (parsing, verification, each pass,
    /// lowering, code generation, assembly).
    pub fn compile_timings(&self) -> &Timings {
        &self.compile_timings
    }

    /// Entry parameter shapes with their layouts.
    pub fn parameter_shapes(&self) -> &[Shape] {
        &self.signature.parameters
    }

    /// The result shape with its layout.
    pub fn result_shape(&self) -> &Shape {
        &self.signature.result
    }

    /// Array leaves of the parameters, depth-first, with explicit layouts: what
    /// [`Executable::transfer_argument`], [`Executable::execute`] and [`Executable::run_raw`]
    /// index.
    pub fn parameter_leaves(&self) -> impl ExactSizeIterator<Item = &ArrayShape> {
        self.signature.parameter_leaves.iter().map(|l| &l.shape)
    }

    /// Array leaves of the result, depth-first, with explicit layouts.
    pub fn result_leaves(&self) -> impl ExactSizeIterator<Item = &ArrayShape> {
        self.signature.result_leaves.iter().map(|l| &l.shape)
    }

    /// The runtime executable of a compiled backend (`None` for the interpreter); for the
    /// tiered backend, the one runs use now.
    pub fn runtime(&self) -> Option<&tessera_runtime::Executable> {
        self.engine.compiled().map(|(exe, _)| exe)
    }

    /// The backend whose code runs now: the executable's own, except for the tiered backend,
    /// where it is Cranelift until LLVM's code is ready and LLVM from then on.
    pub fn active_tier(&self) -> Backend {
        self.engine.compiled().map_or(self.backend, |(_, tier)| tier)
    }

    /// For the tiered backend, waits until LLVM's code is ready (every later run uses it) and
    /// returns the background compile's error if it failed (runs then stay on Cranelift's
    /// code). Returns at once on every other backend.
    pub fn wait_for_peak_tier(&self) -> Result<(), Error> {
        match &self.engine {
            Engine::Tiered(tiered) => tiered.wait().map_err(Error::PeakTier),
            _ => Ok(()),
        }
    }

    /// Kernels in the compiled program (`None` for the interpreter).
    pub fn kernel_count(&self) -> Option<usize> {
        self.runtime().map(|exe| exe.launches().len())
    }

    /// Kernel launches the last run to finish made (`None` for the interpreter, which runs
    /// no kernels).
    pub fn last_run_launches(&self) -> Option<u64> {
        self.runtime().map(|_| self.last_run_launches.load(Ordering::Relaxed))
    }

    /// For the tiered backend, how long LLVM took on its background thread, once it is done.
    pub fn peak_compile_time(&self) -> Option<Duration> {
        match &self.engine {
            Engine::Tiered(tiered) => tiered.peak_compile_time(),
            _ => None,
        }
    }

    /// Runs on one literal per entry parameter, in any layout; returns the result's array
    /// leaves (a tuple flattened depth-first) in the module's result layouts.
    pub fn run(&self, args: &[Literal]) -> Result<Vec<Literal>, Error> {
        let params = &self.signature.parameters;
        if args.len() != params.len() {
            return Err(RuntimeError::Count { what: "arguments", expected: params.len(), found: args.len() }.into());
        }
        for (i, (arg, shape)) in args.iter().zip(params).enumerate() {
            if !arg.shape().compatible(shape) {
                return Err(Error::argument(i, format!("expected {}, got {}", shape.without_layout(), arg.shape())));
            }
        }
        let Some((exe, _)) = self.engine.compiled() else {
            let result = self.evaluate(args)?;
            let mut out = Vec::new();
            flatten_owned(result, &mut out);
            return Ok(out);
        };
        let mut leaves = Vec::new();
        args.iter().for_each(|a| flatten(a, &mut leaves));
        let bytes = leaves
            .iter()
            .zip(&self.signature.parameter_leaves)
            .map(|(lit, leaf)| leaf_bytes(lit, leaf))
            .collect::<Result<Vec<_>, _>>()?;
        let inputs: Vec<&[u8]> = bytes.iter().map(|b| b.as_ref()).collect();
        let mut results = self.new_results()?;
        let mut outputs: Vec<&mut [u8]> = results.iter_mut().map(|r| r.bytes_mut()).collect();
        exe.run(&inputs, &mut outputs)?;
        self.last_run_launches.store(exe.last_run_launches(), Ordering::Relaxed);
        results.iter().map(DeviceBuffer::to_literal).collect()
    }

    /// Lays `literal` out for parameter leaf `index` (its layout and memory space) in a
    /// resident buffer that [`Executable::execute`] uses as it is.
    pub fn transfer_argument(&self, index: usize, literal: &Literal) -> Result<DeviceBuffer, Error> {
        let leaves = &self.signature.parameter_leaves;
        let leaf = leaves
            .get(index)
            .ok_or_else(|| Error::argument(index, format!("the executable takes {} parameters", leaves.len())))?;
        let target = Shape::Array(leaf.shape.clone());
        if !literal.shape().compatible(&target) {
            return Err(Error::argument(
                index,
                format!("expected {}, got {}", target.without_layout(), literal.shape()),
            ));
        }
        let mut buffer = DeviceBuffer::zeroed(&leaf.shape)?;
        buffer.bytes_mut().copy_from_slice(&leaf_bytes(literal, leaf)?);
        Ok(buffer)
    }

    /// Runs on resident buffers (one per parameter leaf, laid out by
    /// [`Executable::transfer_argument`]) and returns the result leaves as new buffers.
    pub fn execute(&self, args: &[&DeviceBuffer]) -> Result<Vec<DeviceBuffer>, Error> {
        let mut results = self.new_results()?;
        self.execute_into(args, &mut results)?;
        Ok(results)
    }

    /// [`Executable::execute`] into result buffers the caller keeps (made once with
    /// [`Executable::new_results`]): a warmed-up call allocates nothing.
    pub fn execute_into(&self, args: &[&DeviceBuffer], results: &mut [DeviceBuffer]) -> Result<(), Error> {
        self.execute_into_tier(args, results).map(|_| ())
    }

    /// [`Executable::execute_into`], returning the backend whose code ran (for the tiered
    /// backend, Cranelift or LLVM; see [`Executable::active_tier`]).
    pub fn execute_into_tier(&self, args: &[&DeviceBuffer], results: &mut [DeviceBuffer]) -> Result<Backend, Error> {
        self.check_arguments(args.iter().copied())?;
        let results_leaves = &self.signature.result_leaves;
        if results.len() != results_leaves.len() {
            let found = results.len();
            return Err(RuntimeError::Count { what: "results", expected: results_leaves.len(), found }.into());
        }
        for (i, (r, leaf)) in results.iter().zip(results_leaves).enumerate() {
            if !same_layout(r.shape(), leaf) {
                return Err(Error::Result {
                    index: i,
                    message: format!("the buffer holds {}, not {}", shape_text(r.shape()), shape_text(&leaf.shape)),
                });
            }
        }
        let inputs: Vec<&[u8]> = args.iter().map(|a| a.bytes()).collect();
        let mut outputs: Vec<&mut [u8]> = results.iter_mut().map(|r| r.bytes_mut()).collect();
        self.run_raw_on_tier(&inputs, &mut outputs)
    }

    /// [`Executable::execute`] on buffers the caller gives up (donates), with the module's
    /// `input_output_alias` applied: a result the program writes into a parameter's memory
    /// ([`Executable::donated_results`]) comes back in that parameter's buffer, updated in
    /// place, so a `dynamic-update-slice` of a donated cache writes only its window instead of
    /// copying the cache, and an optimizer's update needs no second copy of the weights. The
    /// other results are new buffers; the other arguments are dropped. The interpreter shares
    /// no memory: there every result is a new buffer.
    pub fn execute_donated(&self, args: Vec<DeviceBuffer>) -> Result<Vec<DeviceBuffer>, Error> {
        self.execute_donating(args.into_iter().map(Argument::Donated).collect())
    }

    /// [`Executable::execute_donated`] with only some arguments given up, as JAX's
    /// `donate_argnums` (a training step donates its weights and optimizer state and lends its
    /// batch): a result paired with a lent argument is a new buffer, and lent arguments stay
    /// the caller's, unchanged.
    pub fn execute_donating(&self, mut args: Vec<Argument<'_>>) -> Result<Vec<DeviceBuffer>, Error> {
        self.check_arguments(args.iter().map(Argument::buffer))?;
        let Some((exe, _)) = self.engine.compiled() else {
            return self.execute(&args.iter().map(Argument::buffer).collect::<Vec<_>>());
        };
        let donated = |p: usize| matches!(args.get(p), Some(Argument::Donated(_)));
        let shared: Vec<Option<usize>> = (0..self.signature.result_leaves.len())
            .map(|n| exe.aliases().iter().find(|&&(r, p)| r == n && donated(p)).map(|&(_, p)| p))
            .collect();
        let mut results: Vec<Option<DeviceBuffer>> = Vec::with_capacity(shared.len());
        for (leaf, shared) in self.signature.result_leaves.iter().zip(&shared) {
            results.push(match shared {
                Some(_) => None,
                None => Some(DeviceBuffer::zeroed(&leaf.shape)?),
            });
        }
        {
            let mut inputs: Vec<Parameter<'_>> = args
                .iter_mut()
                .map(|a| match a {
                    Argument::Donated(b) => Parameter::Donated(b.bytes_mut()),
                    Argument::Lent(b) => Parameter::Lent(b.bytes()),
                })
                .collect();
            let mut outputs: Vec<&mut [u8]> = results
                .iter_mut()
                .map(|r| match r {
                    Some(b) => b.bytes_mut(),
                    None => &mut [],
                })
                .collect();
            exe.run_donated(&mut inputs, &mut outputs)?;
        }
        self.last_run_launches.store(exe.last_run_launches(), Ordering::Relaxed);
        let mut args: Vec<Option<DeviceBuffer>> = args
            .into_iter()
            .map(|a| match a {
                Argument::Donated(b) => Some(b),
                Argument::Lent(_) => None,
            })
            .collect();
        let mut out = Vec::with_capacity(results.len());
        for (n, r) in results.into_iter().enumerate() {
            let buffer = match r {
                Some(b) => Some(b),
                None => shared[n].and_then(|p| args[p].take()),
            };
            out.push(buffer.ok_or_else(|| RuntimeError::Invalid(format!("result {n} has no buffer")))?);
        }
        Ok(out)
    }

    /// The `(result, parameter)` leaf pairs [`Executable::execute_donated`] returns in one
    /// buffer: those of the module's `input_output_alias` the program can honor (it reads the
    /// parameter only before it writes the result, or copies it into the result first).
    /// Empty for the interpreter.
    pub fn donated_results(&self) -> Vec<(usize, usize)> {
        self.engine.compiled().map(|(exe, _)| exe.aliases().to_vec()).unwrap_or_default()
    }

    /// Checks one resident buffer per parameter leaf, laid out as the leaf.
    fn check_arguments<'b>(&self, args: impl ExactSizeIterator<Item = &'b DeviceBuffer>) -> Result<(), Error> {
        let leaves = &self.signature.parameter_leaves;
        if args.len() != leaves.len() {
            return Err(RuntimeError::Count { what: "parameters", expected: leaves.len(), found: args.len() }.into());
        }
        for (i, (arg, leaf)) in args.zip(leaves).enumerate() {
            if !same_layout(arg.shape(), leaf) {
                return Err(Error::argument(
                    i,
                    format!(
                        "the buffer holds {} but the parameter is {} (transfer_argument lays it out)",
                        shape_text(arg.shape()),
                        shape_text(&leaf.shape)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Zeroed result buffers in the result layouts.
    pub fn new_results(&self) -> Result<Vec<DeviceBuffer>, Error> {
        self.signature.result_leaves.iter().map(|l| DeviceBuffer::zeroed(&l.shape)).collect()
    }

    /// Runs on caller-owned physical buffers: `args[i]` holds parameter leaf `i` laid out in
    /// its layout, `results[i]` receives result leaf `i`. Sizes must match exactly.
    pub fn run_raw(&self, args: &[&[u8]], results: &mut [&mut [u8]]) -> Result<(), Error> {
        self.run_raw_on_tier(args, results).map(|_| ())
    }

    /// [`Executable::run_raw`] with some parameters donated ([`Parameter::Donated`]): a result
    /// [`Executable::donated_results`] pairs with a donated parameter is written into that
    /// parameter's memory, and its slot in `results` must be empty; the others are written
    /// into their slots. Donated memory must be 64-byte aligned. The interpreter shares no
    /// memory, so it refuses donated parameters.
    pub fn run_raw_donating(&self, args: &mut [Parameter<'_>], results: &mut [&mut [u8]]) -> Result<(), Error> {
        let Some((exe, _)) = self.engine.compiled() else {
            if args.iter().any(|a| matches!(a, Parameter::Donated(_))) {
                return Err(RuntimeError::Invalid("the interpreter takes no donated parameters".into()).into());
            }
            let lent: Vec<&[u8]> = args.iter().map(Parameter::bytes).collect();
            return self.run_raw(&lent, results);
        };
        exe.run_donated(args, results)?;
        self.last_run_launches.store(exe.last_run_launches(), Ordering::Relaxed);
        Ok(())
    }

    fn run_raw_on_tier(&self, args: &[&[u8]], results: &mut [&mut [u8]]) -> Result<Backend, Error> {
        let leaves = &self.signature.parameter_leaves;
        if args.len() != leaves.len() {
            return Err(RuntimeError::Count { what: "parameters", expected: leaves.len(), found: args.len() }.into());
        }
        for (i, (arg, leaf)) in args.iter().zip(leaves).enumerate() {
            if arg.len() != leaf.bytes {
                let message =
                    format!("{} needs {} bytes but the buffer has {}", shape_text(&leaf.shape), leaf.bytes, arg.len());
                return Err(Error::argument(i, message));
            }
        }
        let result_leaves = &self.signature.result_leaves;
        if results.len() != result_leaves.len() {
            let found = results.len();
            return Err(RuntimeError::Count { what: "results", expected: result_leaves.len(), found }.into());
        }
        for (i, (r, leaf)) in results.iter().zip(result_leaves).enumerate() {
            if r.len() != leaf.bytes {
                let message =
                    format!("{} needs {} bytes but the buffer has {}", shape_text(&leaf.shape), leaf.bytes, r.len());
                return Err(Error::Result { index: i, message });
            }
        }
        if let Some((exe, tier)) = self.engine.compiled() {
            exe.run(args, results)?;
            self.last_run_launches.store(exe.last_run_launches(), Ordering::Relaxed);
            return Ok(tier);
        }
        let mut literals = args
            .iter()
            .zip(leaves)
            .map(|(bytes, leaf)| Literal::from_physical_bytes(Shape::Array(leaf.shape.clone()), *bytes))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter();
        let entry_args: Vec<Literal> =
            self.signature.parameters.iter().map(|shape| regroup(shape, &mut literals)).collect();
        let mut out = Vec::new();
        flatten_owned(self.evaluate(&entry_args)?, &mut out);
        for (i, (lit, r)) in out.iter().zip(results.iter_mut()).enumerate() {
            let bytes = leaf_bytes(lit, &result_leaves[i])?;
            r.copy_from_slice(&bytes);
        }
        Ok(Backend::Interp)
    }
}

/// Same dimensions, element type and physical placement.
fn same_layout(shape: &ArrayShape, leaf: &Leaf) -> bool {
    // The buffers `transfer_argument` and `new_results` make carry the leaf's own shape; only
    // other spellings of a layout need the (allocating) layout map to compare.
    *shape == leaf.shape
        || (shape.same_dims_and_type(&leaf.shape) && LayoutMap::new(shape).is_ok_and(|m| m == leaf.map))
}

/// The literal's physical bytes in the leaf's layout, copied only when the layouts differ.
fn leaf_bytes<'a>(literal: &'a Literal, leaf: &Leaf) -> Result<Cow<'a, [u8]>, Error> {
    if literal.layout_map() == Some(&leaf.map) {
        return Ok(Cow::Borrowed(literal.physical_bytes()?));
    }
    let moved = literal.relayout_like(&Shape::Array(leaf.shape.clone()))?;
    Ok(Cow::Owned(moved.physical_bytes()?.to_vec()))
}

/// Array leaves of a literal, depth-first.
fn flatten<'a>(literal: &'a Literal, out: &mut Vec<&'a Literal>) {
    match literal.tuple_elements() {
        Some(elems) => elems.iter().for_each(|e| flatten(e, out)),
        None if literal.array_shape().is_some() => out.push(literal),
        None => {}
    }
}

fn flatten_owned(literal: Literal, out: &mut Vec<Literal>) {
    match literal.tuple_elements() {
        Some(elems) => elems.iter().cloned().for_each(|e| flatten_owned(e, out)),
        None if literal.array_shape().is_some() => out.push(literal),
        None => {}
    }
}

/// Rebuilds one entry argument of `shape` from the flattened leaves.
fn regroup(shape: &Shape, leaves: &mut impl Iterator<Item = Literal>) -> Literal {
    match shape {
        Shape::Tuple(elems) => Literal::tuple(elems.iter().map(|e| regroup(e, leaves)).collect()),
        Shape::Array(_) => leaves.next().unwrap_or_else(|| Literal::tuple(Vec::new())),
        _ => Literal::tuple(Vec::new()),
    }
}
