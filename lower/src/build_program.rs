//! Turns a module the pass pipeline has prepared (calls inlined, layouts set, fusions formed)
//! into a [`Program`]: one buffer per array value that needs storage, one kernel per
//! instruction that computes, and a step tree that runs them in each computation's post order.
//!
//! - Parameters are `Parameter(n)` buffers, tuple parameters flattened depth-first.
//! - Constants are `Constant` buffers holding their physical bytes, made only when something
//!   reads them as a buffer; a scalar constant feeding a single-op kernel is folded into it.
//! - `tuple`, `get-tuple-element`, `opt-barrier` and `add-dependency` only alias: they build,
//!   take apart or pass on lists of buffers. Tokens have no storage.
//! - Every other array instruction becomes one kernel through [`crate::emit_kernel`]: a fusion lowers
//!   its fused computation; a single op is wrapped in a computation whose parameters are its
//!   operands. Its arrays get `Temp` buffers.
//! - `while` gets one state buffer per array leaf of its shape, in its layouts. The initial
//!   value is copied in; the condition and the body are lowered as nested step lists reading
//!   the state; after the body, its result is copied back into the state (a leaf the body
//!   passes through unchanged costs nothing; a leaf that moves to another position goes
//!   through a temporary first, so no copy reads state an earlier copy overwrote). A leaf the
//!   loop never writes is no buffer of its own: the loop reads the initial value's buffer.
//! - `conditional` lowers each branch as a nested step list ending in copies of the branch's
//!   result into the conditional's own buffers.
//! - A `call` that is still there is lowered in place, its computation's steps inlined.
//! - `custom-call` (except targets in [`crate::NATIVE_CUSTOM_CALLS`]), `infeed` and `outfeed`
//!   are host operations on the buffers of their operands and results.
//! - A value crossing into a computation whose parameter states another layout is relaid out
//!   by a copy kernel first.
//! - Results are `Result(n)` buffers, flattened depth-first, each distinct and aliasing
//!   nothing: the caller may pass any memory. A result that would be a parameter, a constant
//!   or a buffer already returned gets a copy of its own.

use std::collections::{HashMap, HashSet};

use tessera_hlo::ir::AttrList;
use tessera_hlo::ir::{AttrValue, Payload};
use tessera_hlo::{ArrayShape, CompId, Computation, InstId, Instruction, LayoutMap, Module, Opcode, Shape};

use crate::emit::emit_kernel_with;
use crate::emit::rng;
use crate::kernel::{verify_kernel, Kernel};
use crate::kernel_memo::{KernelKind, KernelMemo};
use crate::program::{Buffer, BufferId, BufferKind, HostOp, HostValue, Launch, Program, SelectorKind, Step};
use crate::LowerError;

/// The most bytes a copy kernel may move to become a byte copy step: the runtime splits a
/// launch across threads only from two of its 64 KiB chunks (`runtime::thread_pool`), so a
/// kernel this small runs on one thread, as the copy does.
const SMALL_COPY_BYTES: u64 = 64 * 1024;

/// What a value is, in terms of buffers.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Array(BufferId),
    Tuple(Vec<Value>),
    /// Orders side effects; holds no data.
    Token,
}

impl Value {
    fn leaves(&self, out: &mut Vec<BufferId>) {
        match self {
            Value::Array(b) => out.push(*b),
            Value::Tuple(elems) => elems.iter().for_each(|e| e.leaves(out)),
            Value::Token => {}
        }
    }

    fn rename_buffer(&mut self, from: BufferId, to: BufferId) {
        match self {
            Value::Array(b) if *b == from => *b = to,
            Value::Tuple(elems) => elems.iter_mut().for_each(|e| e.rename_buffer(from, to)),
            Value::Array(_) | Value::Token => {}
        }
    }

    fn leaf_list(&self) -> Vec<BufferId> {
        let mut out = Vec::new();
        self.leaves(&mut out);
        out
    }
}

pub(crate) fn build_program(module: &Module, rng_seed: u64, fma: bool) -> Result<Program, LowerError> {
    let mut b = Builder {
        module,
        fma,
        program: Program::default(),
        kernel_names: HashSet::new(),
        memo: KernelMemo::new(module),
        donated: HashSet::new(),
        steps: Vec::new(),
        rng_seed,
        rng_state: None,
        loop_body: None,
    };
    let entry = module.entry_comp();
    let mut args = Vec::new();
    for id in entry.parameters() {
        let inst = entry.inst(id);
        args.push(b.parameter_value(&inst.name, &inst.shape)?);
    }
    let declared = declared_aliases(module);
    b.donated = declared.iter().filter_map(|&(_, p)| b.program.parameters.get(p).copied()).collect();
    let root = b.lower_computation(entry, args)?;
    let leaves = root.leaf_list();
    b.init_rng_state();
    let mut returned: HashSet<BufferId> = HashSet::new();
    for (n, leaf) in leaves.into_iter().enumerate() {
        let buf = &b.program.buffers[leaf.0 as usize];
        let own_temp = buf.kind == BufferKind::Temp && !returned.contains(&leaf);
        let result = if own_temp { leaf } else { b.copy_kernel_of(leaf)? };
        b.program.buffers[result.0 as usize].kind = BufferKind::Result(n);
        returned.insert(result);
        b.program.results.push(result);
    }
    b.program.steps = std::mem::take(&mut b.steps);
    coalesce_copies(&mut b.program);
    let ranges = touch_ranges(&b.program.steps);
    b.program.aliases = declared.into_iter().filter(|&(r, p)| may_share(&b.program, &ranges, r, p)).collect();
    Ok(b.program)
}

struct Builder<'m> {
    module: &'m Module,
    /// Kernels' math may fuse multiply-adds ([`crate::LowerOptions::fma`]).
    fma: bool,
    program: Program,
    kernel_names: HashSet<String>,
    /// Kernels already lowered, for the computations that repeat.
    memo: KernelMemo,
    /// Buffers of the parameter leaves the module lets a result share memory with
    /// (`input_output_alias`).
    donated: HashSet<BufferId>,
    /// The step list being filled: the entry's, or a nested one while a loop or branch is
    /// lowered.
    steps: Vec<Step>,
    /// Seeds the generator state of the `rng` op.
    rng_seed: u64,
    /// The generator state `rng` draws from, once something draws.
    rng_state: Option<BufferId>,
    /// The while body being lowered (not the computations it calls): its parameter's leaves
    /// are the loop state, which the body may update in place.
    loop_body: Option<*const Computation>,
}

/// Ops that are not data-parallel array computations: control flow, side effects, tokens
/// and communication. They never reach the kernel emitter.
fn not_a_kernel(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        While
            | Conditional
            | Call
            | CustomCall
            | Infeed
            | Outfeed
            | Send
            | SendDone
            | Recv
            | RecvDone
            | AfterAll
            | AddDependency
            | AsyncStart
            | AsyncUpdate
            | AsyncDone
            | CopyStart
            | CopyDone
            | AllGather
            | AllGatherStart
            | AllGatherDone
            | AllReduce
            | AllReduceStart
            | AllReduceDone
            | AllToAll
            | RaggedAllToAll
            | CollectiveBroadcast
            | CollectivePermute
            | CollectivePermuteStart
            | CollectivePermuteDone
            | ReduceScatter
            | Domain
            | OptimizationBarrier
            | PartitionId
            | ReplicaId
            | GetDimensionSize
            | SetDimensionSize
            | DynamicReshape
    )
}

impl<'m> Builder<'m> {
    fn add_buffer(&mut self, name: &str, shape: &Shape, kind: BufferKind) -> Result<BufferId, LowerError> {
        let array = array_of(shape, name)?;
        let map = LayoutMap::new(array)?;
        let bytes = u64::try_from(map.physical_byte_size())
            .map_err(|_| LowerError::invalid(name, format!("negative byte size for {shape}")))?;
        let memory_space = array.layout.as_ref().map_or(0, |l| l.memory_space);
        let id = BufferId(self.program.buffers.len() as u32);
        self.program.buffers.push(Buffer {
            name: name.to_string(),
            shape: array.clone(),
            bytes,
            memory_space,
            kind,
            offset: None,
        });
        Ok(id)
    }

    fn parameter_value(&mut self, name: &str, shape: &Shape) -> Result<Value, LowerError> {
        match shape {
            Shape::Tuple(elems) => {
                let mut out = Vec::with_capacity(elems.len());
                for (i, e) in elems.iter().enumerate() {
                    out.push(self.parameter_value(&format!("{name}.{i}"), e)?);
                }
                Ok(Value::Tuple(out))
            }
            Shape::Token => Ok(Value::Token),
            _ => {
                let n = self.program.parameters.len();
                let id = self.add_buffer(name, shape, BufferKind::Parameter(n))?;
                self.program.parameters.push(id);
                Ok(Value::Array(id))
            }
        }
    }

    /// Fresh temp buffers for every array leaf of `shape`.
    fn fresh_value(&mut self, name: &str, shape: &Shape) -> Result<Value, LowerError> {
        match shape {
            Shape::Tuple(elems) => {
                let mut out = Vec::with_capacity(elems.len());
                for (i, e) in elems.iter().enumerate() {
                    out.push(self.fresh_value(&format!("{name}.{i}"), e)?);
                }
                Ok(Value::Tuple(out))
            }
            Shape::Token => Ok(Value::Token),
            _ => Ok(Value::Array(self.add_buffer(name, shape, BufferKind::Temp)?)),
        }
    }

    /// Lowers `comp` with its parameters bound to `args` (relaid out where the parameter
    /// states other layouts), appending its steps to the current list; returns its root.
    fn lower_computation(&mut self, comp: &'m Computation, args: Vec<Value>) -> Result<Value, LowerError> {
        let mut values: HashMap<InstId, Value> = HashMap::new();
        for id in comp.parameters() {
            let inst = comp.inst(id);
            let n = inst.parameter_number().and_then(|n| usize::try_from(n).ok());
            let arg = n.and_then(|n| args.get(n)).ok_or_else(|| {
                LowerError::invalid(&inst.name, format!("parameter {n:?} of '{}' has no argument", comp.name))
            })?;
            let value = self.conform(arg, &inst.shape, &inst.name)?;
            values.insert(id, value);
        }
        for id in comp.post_order() {
            let inst = comp.inst(id);
            let value = match inst.opcode {
                Opcode::Parameter => continue,
                // Made on first use as a buffer: a folded scalar constant needs none.
                Opcode::Constant => continue,
                Opcode::Tuple => {
                    let elems =
                        inst.operands.iter().map(|&o| self.value(comp, &mut values, o)).collect::<Result<_, _>>()?;
                    self.conform(&Value::Tuple(elems), &inst.shape, &inst.name)?
                }
                // An optimization barrier only orders work, which a sequential program already
                // does: its value is its operand's. So is add-dependency's (the token only
                // orders).
                Opcode::OptimizationBarrier | Opcode::AddDependency if !inst.operands.is_empty() => {
                    let value = self.value(comp, &mut values, inst.operands[0])?;
                    self.conform(&value, &inst.shape, &inst.name)?
                }
                Opcode::AfterAll => Value::Token,
                Opcode::GetTupleElement => {
                    let tuple = self.value(comp, &mut values, inst.operands[0])?;
                    let index = inst.attr_int("index").and_then(|i| usize::try_from(i).ok());
                    let elem = match (&tuple, index) {
                        (Value::Tuple(elems), Some(i)) => elems.get(i).cloned(),
                        _ => None,
                    };
                    let elem = elem.ok_or_else(|| LowerError::invalid(&inst.name, "get-tuple-element out of range"))?;
                    self.conform(&elem, &inst.shape, &inst.name)?
                }
                Opcode::While => self.lower_while(comp, &mut values, inst)?,
                Opcode::Conditional => self.lower_conditional(comp, &mut values, inst)?,
                Opcode::Call => {
                    let callee = inst
                        .called("to_apply")
                        .ok_or_else(|| LowerError::invalid(&inst.name, "call without to_apply"))?;
                    let args = self.operand_values(comp, &mut values, inst)?;
                    let callee = self.computation(callee, &inst.name)?;
                    let result = self.lower_computation(callee, args)?;
                    self.conform(&result, &inst.shape, &inst.name)?
                }
                Opcode::CustomCall if !is_native_custom_call(inst) => {
                    self.lower_custom_call(comp, &mut values, inst)?
                }
                Opcode::SetDimensionSize => self.lower_set_dimension_size(comp, &mut values, inst)?,
                Opcode::Infeed => self.lower_infeed(inst)?,
                Opcode::Outfeed => self.lower_outfeed(comp, &mut values, inst)?,
                _ => self.kernel_for(comp, &mut values, id)?,
            };
            values.insert(id, value);
        }
        self.value(comp, &mut values, comp.root)
    }

    /// `set-dimension-size(x, n)` with `n` known only at run time (`passes::unwrap` folds a
    /// constant one): its value is `x`'s, after a step that fails the run unless `n` is the
    /// static size, since shapes here are static (bounded dimensions at their bounds), as
    /// `hlo::eval` runs them.
    fn lower_set_dimension_size(
        &mut self,
        comp: &Computation,
        values: &mut HashMap<InstId, Value>,
        inst: &Instruction,
    ) -> Result<Value, LowerError> {
        let [x, n] = inst.operands[..] else {
            return Err(LowerError::invalid(&inst.name, "set-dimension-size takes an array and a size"));
        };
        let dims = comp.inst(x).shape.dims().to_vec();
        let d = match inst.attr_ints("dimensions") {
            Some([d]) => usize::try_from(*d).ok().filter(|&d| d < dims.len()),
            _ => None,
        }
        .ok_or_else(|| LowerError::invalid(&inst.name, "set-dimension-size needs one dimension in range"))?;
        let size = dims[d];
        if i32::try_from(size).is_err() {
            return Err(LowerError::invalid(&inst.name, "the dimension size does not fit in s32"));
        }
        let Value::Array(size_buffer) = self.value(comp, values, n)? else {
            return Err(LowerError::invalid(&inst.name, "the size is not an s32 scalar"));
        };
        self.steps.push(Step::Check {
            value: size_buffer,
            equals: size,
            message: format!(
                "set-dimension-size '{}': the size of dimension {d} must be {size}, the static size (dynamic shapes are not supported)",
                inst.name
            ),
        });
        let value = self.value(comp, values, x)?;
        self.conform(&value, &inst.shape, &inst.name)
    }

    fn computation(&self, id: CompId, user: &str) -> Result<&'m Computation, LowerError> {
        self.module.get(id).ok_or_else(|| LowerError::invalid(user, "calls a computation that does not exist"))
    }

    fn operand_values(
        &mut self,
        comp: &Computation,
        values: &mut HashMap<InstId, Value>,
        inst: &Instruction,
    ) -> Result<Vec<Value>, LowerError> {
        inst.operands.iter().map(|&o| self.value(comp, values, o)).collect()
    }

    /// The buffers of a value of `comp`; constants get their buffer on first use.
    fn value(
        &mut self,
        comp: &Computation,
        values: &mut HashMap<InstId, Value>,
        id: InstId,
    ) -> Result<Value, LowerError> {
        if let Some(v) = values.get(&id) {
            return Ok(v.clone());
        }
        let inst = comp.inst(id);
        let value = match &inst.payload {
            Payload::Constant(lit) if inst.opcode == Opcode::Constant => self.constant_value(&inst.name, lit)?,
            _ => return Err(LowerError::invalid(&inst.name, "used before it is computed")),
        };
        values.insert(id, value.clone());
        Ok(value)
    }

    fn constant_value(&mut self, name: &str, lit: &tessera_hlo::Literal) -> Result<Value, LowerError> {
        if let Some(elems) = lit.tuple_elements() {
            let mut out = Vec::with_capacity(elems.len());
            for (i, e) in elems.iter().enumerate() {
                out.push(self.constant_value(&format!("{name}.{i}"), e)?);
            }
            return Ok(Value::Tuple(out));
        }
        let bytes = lit.physical_bytes().map_err(|e| LowerError::invalid(name, format!("constant: {e}")))?.to_vec();
        Ok(Value::Array(self.add_buffer(name, lit.shape(), BufferKind::Constant(bytes))?))
    }

    fn kernel_name(&mut self, base: &str) -> String {
        let clean: String = base.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
        let clean = if clean.starts_with(|c: char| c.is_ascii_digit()) { format!("k_{clean}") } else { clean };
        // A kernel is a symbol beside the C functions kernels call; an instruction named `log`
        // must not become a second `log`.
        let reserved = clean.starts_with("tessera_rt")
            || crate::kernel::MathFn::ALL
                .iter()
                .any(|f| f.symbol(crate::kernel::Ty::F32) == clean || f.symbol(crate::kernel::Ty::F64) == clean);
        let clean = if reserved { format!("k_{clean}") } else { clean };
        let mut name = clean.clone();
        let mut k = 1;
        while !self.kernel_names.insert(name.clone()) {
            name = format!("{clean}_{k}");
            k += 1;
        }
        name
    }

    /// The kernel of `comp`, named `name`: lowered and verified, or copied from a computation
    /// lowered before with the same instructions.
    fn emit(&mut self, comp: &Computation, kind: KernelKind, name: &str) -> Result<Kernel, LowerError> {
        if let Some(kernel) = self.memo.get(comp, kind, name) {
            // The copy is right only if lowering never reads a name: debug builds (the tests)
            // check it against a fresh lowering.
            #[cfg(debug_assertions)]
            {
                let fresh = self.lower(comp, kind, name)?;
                assert!(fresh == kernel, "kernel {name}: its copy differs from its fresh lowering");
            }
            return Ok(kernel);
        }
        let kernel = self.lower(comp, kind, name)?;
        self.memo.insert(comp, kind, &kernel);
        Ok(kernel)
    }

    fn lower(&self, comp: &Computation, kind: KernelKind, name: &str) -> Result<Kernel, LowerError> {
        checked(match kind {
            KernelKind::Fresh => emit_kernel_with(self.module, comp, name, self.fma)?,
            KernelKind::InPlace => crate::emit::emit_in_place_kernel(self.module, comp, name, self.fma)?,
        })
    }

    /// Lowers one computing instruction to a kernel and its launch.
    fn kernel_for(
        &mut self,
        comp: &Computation,
        values: &mut HashMap<InstId, Value>,
        id: InstId,
    ) -> Result<Value, LowerError> {
        let inst = comp.inst(id);
        if matches!(inst.opcode, Opcode::Rng | Opcode::RngGetAndUpdateState) {
            return self.rng_kernels(comp, values, id);
        }
        // XLA:CPU's TopK custom-call is a sort the lowering compiles like `topk`.
        if not_a_kernel(inst.opcode) && !crate::emit::is_topk_custom_call(inst) {
            return Err(LowerError::unsupported(
                &inst.name,
                format!("{} (side effects and communication are not lowered to kernels)", inst.opcode),
            ));
        }
        let (kernel_comp, inputs) = if inst.opcode == Opcode::Fusion {
            let called = inst.called("calls").ok_or_else(|| LowerError::invalid(&inst.name, "fusion without calls"))?;
            (self.module.comp(called).clone(), inst.operands.clone())
        } else {
            wrap_single_op(comp, id)
        };
        let mut args = Vec::with_capacity(inputs.len() + 1);
        for &o in &inputs {
            match self.value(comp, values, o)? {
                Value::Array(b) => args.push(b),
                Value::Tuple(_) | Value::Token => {
                    return Err(LowerError::unsupported(&inst.name, "a tuple- or token-shaped operand of a kernel"));
                }
            }
        }
        let name = self.kernel_name(&inst.name);
        // A dynamic-update-slice whose operand dies here writes its window into the
        // operand's buffer, which becomes its result.
        if let Some(k) = crate::emit::in_place_operand(&kernel_comp) {
            // The operand must reach the kernel only as the updated parameter: read through
            // another one, its elements would change under the kernel's feet.
            let sole = |o: InstId| inputs.iter().filter(|&&i| i == o).count() == 1;
            if inputs.get(k).is_some_and(|&o| sole(o) && self.may_overwrite(comp, values, o)) {
                let kernel = self.emit(&kernel_comp, KernelKind::InPlace, &name)?;
                let target = args[k];
                args.push(target);
                self.launch(kernel, args);
                return Ok(Value::Array(target));
            }
            // A parameter the caller may donate to a result: a copy of it is updated in place.
            // Where the result is that copy and nothing reads the parameter after it, the copy
            // is the result's first step, and a donated call (parameter and result in one
            // memory) skips it, writing just the window (`may_share`).
            if let Some(target) =
                inputs.get(k).filter(|&&o| sole(o)).and_then(|&o| self.donated_copy(comp, values, o, inst))
            {
                let target = target?;
                let kernel = self.emit(&kernel_comp, KernelKind::InPlace, &name)?;
                args[k] = target;
                args.push(target);
                self.launch(kernel, args);
                return Ok(Value::Array(target));
            }
        }
        let kernel = self.emit(&kernel_comp, KernelKind::Fresh, &name)?;
        let value = match &inst.shape {
            Shape::Tuple(elems) => {
                let mut out = Vec::with_capacity(elems.len());
                for (i, e) in elems.iter().enumerate() {
                    if e.is_tuple() {
                        return Err(LowerError::unsupported(&inst.name, "a nested tuple result of a kernel"));
                    }
                    let b = self.add_buffer(&format!("{}.{i}", inst.name), e, BufferKind::Temp)?;
                    args.push(b);
                    out.push(Value::Array(b));
                }
                Value::Tuple(out)
            }
            shape => {
                let b = self.add_buffer(&inst.name, shape, BufferKind::Temp)?;
                args.push(b);
                Value::Array(b)
            }
        };
        // Buffers past the outputs are the kernel's private scratch (see `emit_kernel`).
        for (i, kb) in kernel.buffers.iter().enumerate().skip(args.len()) {
            let shape = scratch_shape(kb.mem, kb.len);
            let b = self.add_buffer(&format!("{}.scratch{}", inst.name, i - args.len()), &shape, BufferKind::Temp)?;
            args.push(b);
        }
        if self.is_small_byte_copy(&kernel, &args) {
            self.steps.push(Step::Copy { src: args[0], dst: args[1] });
            return Ok(value);
        }
        self.launch(kernel, args);
        Ok(value)
    }

    /// Whether `kernel`, launched on `args`, only copies one buffer's bytes into another of
    /// the same memory space (a transpose or reshape whose layouts keep every byte in place),
    /// and few enough that the kernel would run on one thread: a byte copy then does its work
    /// with nothing to compile (a module of such transposes compiled 5 kernels for nothing).
    /// Larger copies keep their kernel, which the pool splits.
    fn is_small_byte_copy(&self, kernel: &crate::kernel::Kernel, args: &[BufferId]) -> bool {
        let [src, dst] = args else { return false };
        let (src, dst) = (&self.program.buffers[src.0 as usize], &self.program.buffers[dst.0 as usize]);
        src.bytes == dst.bytes
            && src.bytes <= SMALL_COPY_BYTES
            && src.memory_space == dst.memory_space
            && crate::kernel::is_byte_copy(kernel)
    }

    /// For an entry's in-place update of `operand`, a parameter the module lets a result
    /// share memory with: a temp holding a copy of it (the copy step pushed), or `None`.
    fn donated_copy(
        &mut self,
        comp: &Computation,
        values: &HashMap<InstId, Value>,
        operand: InstId,
        inst: &Instruction,
    ) -> Option<Result<BufferId, LowerError>> {
        let Some(Value::Array(param)) = values.get(&operand) else { return None };
        let in_entry = std::ptr::eq(comp, self.module.entry_comp()) && self.loop_body.is_none();
        if !in_entry || !self.donated.contains(param) || comp.root == operand {
            return None;
        }
        if inst.shape.as_array() != Some(&self.program.buffers[param.0 as usize].shape) {
            return None;
        }
        let param = *param;
        Some(self.add_buffer(&inst.name, &inst.shape, BufferKind::Temp).map(|copy| {
            self.steps.push(Step::Copy { src: param, dst: copy });
            copy
        }))
    }

    /// Whether the user of `operand` (an instruction of `comp`, already lowered) being lowered
    /// now may overwrite its buffer: a temp nothing else reads afterwards. That holds for the
    /// result of a kernel (an element of a multi-output kernel's results included), and, in a
    /// while body, for a loop-state element (the body's result replaces the state anyway),
    /// when every other user of it is lowered already (its steps come before this one) and
    /// holds no view of the buffer: a decode step's key cache, sliced for one layer's
    /// attention and then updated for the next layer's, is updated in place both times.
    /// Parameters of other computations (calls, branches) alias their caller's values, so
    /// they never qualify.
    fn may_overwrite(&self, comp: &Computation, values: &HashMap<InstId, Value>, operand: InstId) -> bool {
        let Some(&Value::Array(b)) = values.get(&operand) else { return false };
        if self.program.buffers[b.0 as usize].kind != BufferKind::Temp || comp.root == operand {
            return false;
        }
        let users: Vec<InstId> = comp.ids().filter(|&i| comp.inst(i).operands.contains(&operand)).collect();
        let done = |u: &InstId| values.get(u).is_some_and(|v| !v.leaf_list().contains(&b));
        if users.iter().filter(|u| !done(u)).count() != 1 {
            return false;
        }
        let inst = comp.inst(operand);
        match inst.opcode {
            Opcode::GetTupleElement => {
                let in_body = self.loop_body.is_some_and(|body| std::ptr::eq(body, comp));
                let Some(&tuple) = inst.operands.first() else { return false };
                let index = inst.attr_int("index");
                // The tuple (a while body's state, or a multi-output kernel's results, each in
                // a buffer the kernel wrote) is only taken apart, and element `index` is read
                // here alone.
                let source = comp.inst(tuple).opcode;
                (source == Opcode::Fusion || (in_body && source == Opcode::Parameter))
                    && comp.root != tuple
                    && comp.instructions.iter().filter(|i| i.operands.contains(&tuple)).all(|i| {
                        i.opcode == Opcode::GetTupleElement && (i.attr_int("index") != index || std::ptr::eq(i, inst))
                    })
            }
            // Values that alias another computation's (parameters, calls, branches, loops,
            // tuples) or that the host writes.
            Opcode::Parameter
            | Opcode::Constant
            | Opcode::Tuple
            | Opcode::OptimizationBarrier
            | Opcode::AddDependency
            | Opcode::While
            | Opcode::Conditional
            | Opcode::Call
            | Opcode::CustomCall
            | Opcode::SetDimensionSize
            | Opcode::Infeed => false,
            _ => true,
        }
    }

    /// The program's `rng` generator state (key, counter): one `u64[2]` temp for the whole
    /// run, so every draw, in any loop or branch, continues the same stream.
    fn rng_state(&mut self) -> Result<BufferId, LowerError> {
        if let Some(s) = self.rng_state {
            return Ok(s);
        }
        let shape = Shape::array(tessera_hlo::ElementType::U64, &[rng::STATE_WORDS]);
        let s = self.add_buffer("rng_state", &shape, BufferKind::Temp)?;
        self.rng_state = Some(s);
        Ok(s)
    }

    /// `rng` (a draw kernel reading the state, then one advancing its counter) and
    /// `rng-get-and-update-state` (one kernel reading and advancing it).
    fn rng_kernels(
        &mut self,
        entry: &Computation,
        values: &mut HashMap<InstId, Value>,
        id: InstId,
    ) -> Result<Value, LowerError> {
        let inst = entry.inst(id);
        let state = self.rng_state()?;
        let out = self.add_buffer(&inst.name, &inst.shape, BufferKind::Temp)?;
        let name = self.kernel_name(&inst.name);
        if inst.opcode == Opcode::RngGetAndUpdateState {
            let delta = inst.attr_int("delta").ok_or_else(|| LowerError::invalid(&inst.name, "missing delta"))?;
            let map = LayoutMap::new(array_of(&inst.shape, &inst.name)?)?;
            let kernel = checked(rng::get_and_update_state_kernel(&name, &map, delta)?)?;
            self.launch(kernel, vec![state, out]);
            return Ok(Value::Array(out));
        }
        let (mut comp, inputs) = wrap_single_op(entry, id);
        let state_shape = self.program.buffers[state.0 as usize].shape.clone();
        let mut param = Instruction::new("rng_state", Opcode::Parameter, Shape::Array(state_shape), vec![]);
        param.payload = Payload::Parameter(inputs.len() as i64);
        comp.add(param);
        let mut args = Vec::with_capacity(inputs.len() + 2);
        for &o in &inputs {
            match self.value(entry, values, o)? {
                Value::Array(b) => args.push(b),
                Value::Tuple(_) | Value::Token => {
                    return Err(LowerError::invalid(&inst.name, "a tuple- or token-shaped rng operand"))
                }
            }
        }
        args.extend([state, out]);
        let kernel = checked(emit_kernel_with(self.module, &comp, &name, self.fma)?)?;
        self.launch(kernel, args);
        let blocks = (rng::draw_words(inst)? + 3) / 4;
        let advance = self.kernel_name(&format!("{}_advance", inst.name));
        self.launch(checked(rng::state_advance_kernel(&advance, blocks))?, vec![state]);
        Ok(Value::Array(out))
    }

    /// Puts the launch that seeds the generator state first, when the program draws.
    fn init_rng_state(&mut self) {
        if let Some(state) = self.rng_state {
            let name = self.kernel_name("rng_state_init");
            self.program.kernels.push(rng::state_init_kernel(&name, self.rng_seed));
            // Every run starts the stream afresh, before anything (loops included) draws.
            let launch = Launch { kernel: self.program.kernels.len() - 1, args: vec![state] };
            self.steps.insert(0, Step::Launch(launch));
        }
    }

    fn launch(&mut self, kernel: crate::kernel::Kernel, args: Vec<BufferId>) {
        self.program.kernels.push(kernel);
        self.steps.push(Step::Launch(Launch { kernel: self.program.kernels.len() - 1, args }));
    }

    /// A fresh buffer holding a copy of `src` (same shape and layout).
    fn copy_of(&mut self, src: BufferId) -> Result<BufferId, LowerError> {
        let buf = self.program.buffers[src.0 as usize].clone();
        let dst = self.add_buffer(&format!("{}.copy", buf.name), &Shape::Array(buf.shape), BufferKind::Temp)?;
        self.steps.push(Step::Copy { src, dst });
        Ok(dst)
    }

    /// A fresh buffer holding a copy of `src` written by a copy kernel, as results always were
    /// (a kernel copies values, so a constant's NaN comes out as every other kernel writes it).
    fn copy_kernel_of(&mut self, src: BufferId) -> Result<BufferId, LowerError> {
        let buf = self.program.buffers[src.0 as usize].clone();
        let shape = Shape::Array(buf.shape.clone());
        let dst = self.add_buffer(&format!("{}.copy", buf.name), &shape, BufferKind::Temp)?;
        let kernel = self.relayout_kernel(src, &shape, "copy")?;
        self.launch(kernel, vec![src, dst]);
        Ok(dst)
    }

    /// Writes `src`'s array values into `dst`'s buffers (same shapes, layouts may differ):
    /// a byte copy where the layouts agree, a relayout kernel where they do not.
    fn assign(&mut self, src: &Value, dst: &Value, name: &str) -> Result<(), LowerError> {
        let (s, d) = (src.leaf_list(), dst.leaf_list());
        if s.len() != d.len() {
            return Err(LowerError::invalid(name, "a value and its destination have different tuple shapes"));
        }
        for (s, d) in s.into_iter().zip(d) {
            if s == d {
                continue;
            }
            if self.same_layout(s, d) {
                self.steps.push(Step::Copy { src: s, dst: d });
            } else {
                let shape = Shape::Array(self.program.buffers[d.0 as usize].shape.clone());
                let kernel = self.relayout_kernel(s, &shape, "relayout")?;
                self.launch(kernel, vec![s, d]);
            }
        }
        Ok(())
    }

    fn same_layout(&self, a: BufferId, b: BufferId) -> bool {
        let (x, y) = (&self.program.buffers[a.0 as usize], &self.program.buffers[b.0 as usize]);
        x.bytes == y.bytes
            && x.shape.same_dims_and_type(&y.shape)
            && match (LayoutMap::new(&x.shape), LayoutMap::new(&y.shape)) {
                (Ok(p), Ok(q)) => p == q,
                _ => false,
            }
    }

    /// A kernel copying a buffer into one of `shape` (same dimensions, another layout).
    /// `what` names the kernel (`<buffer>_<what>`).
    fn relayout_kernel(
        &mut self,
        src: BufferId,
        shape: &Shape,
        what: &str,
    ) -> Result<crate::kernel::Kernel, LowerError> {
        let buf = self.program.buffers[src.0 as usize].clone();
        let mut comp = Computation::new(format!("{what}_{}", buf.name));
        let mut param = Instruction::new("src", Opcode::Parameter, Shape::Array(buf.shape.clone()), vec![]);
        param.payload = Payload::Parameter(0);
        let p = comp.add(param);
        comp.root = comp.add(Instruction::new(format!("{}.{what}", buf.name), Opcode::Copy, shape.clone(), vec![p]));
        let name = self.kernel_name(&format!("{}_{what}", buf.name));
        checked(emit_kernel_with(self.module, &comp, &name, self.fma)?)
    }

    /// `value` in the layouts `want` states: itself where they agree, relaid-out copies
    /// where they do not.
    fn conform(&mut self, value: &Value, want: &Shape, name: &str) -> Result<Value, LowerError> {
        match (value, want) {
            (Value::Array(b), Shape::Array(a)) => {
                let map = LayoutMap::new(a)?;
                let have = &self.program.buffers[b.0 as usize].shape;
                if LayoutMap::new(have).is_ok_and(|m| m == map) {
                    return Ok(value.clone());
                }
                let dst = self.add_buffer(&format!("{name}.relayout"), want, BufferKind::Temp)?;
                let kernel = self.relayout_kernel(*b, want, "relayout")?;
                self.launch(kernel, vec![*b, dst]);
                Ok(Value::Array(dst))
            }
            (Value::Tuple(vs), Shape::Tuple(ss)) if vs.len() == ss.len() => {
                let mut out = Vec::with_capacity(vs.len());
                for (i, (v, s)) in vs.iter().zip(ss).enumerate() {
                    out.push(self.conform(v, s, &format!("{name}.{i}"))?);
                }
                Ok(Value::Tuple(out))
            }
            (Value::Token, Shape::Token) => Ok(Value::Token),
            _ => Err(LowerError::invalid(name, format!("a value does not have the shape {want}"))),
        }
    }

    /// Runs `f` with an empty step list and returns what it appended.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, LowerError>) -> Result<(Vec<Step>, T), LowerError> {
        let outer = std::mem::take(&mut self.steps);
        let result = f(self);
        let inner = std::mem::replace(&mut self.steps, outer);
        Ok((inner, result?))
    }

    fn lower_while(
        &mut self,
        comp: &Computation,
        values: &mut HashMap<InstId, Value>,
        inst: &Instruction,
    ) -> Result<Value, LowerError> {
        let (Some(cond), Some(body), [operand]) = (inst.called("condition"), inst.called("body"), &inst.operands[..])
        else {
            return Err(LowerError::invalid(&inst.name, "while needs a condition, a body and one operand"));
        };
        let (cond, body) = (self.computation(cond, &inst.name)?, self.computation(body, &inst.name)?);
        let init = self.value(comp, values, *operand)?;
        let mut state = self.fresh_value(&inst.name, &inst.shape)?;
        let init_copies = self.steps.len();
        self.assign(&init, &state, &inst.name)?;
        let (mut cond_steps, pred) = self.nested(|b| b.lower_computation(cond, vec![state.clone()]))?;
        let mut pred = match pred {
            Value::Array(p) if self.program.buffers[p.0 as usize].shape.rank() == 0 => p,
            _ => return Err(LowerError::invalid(&inst.name, "the while condition does not return a scalar")),
        };
        let (mut body_steps, ()) = self.nested(|b| {
            let outer = b.loop_body.replace(body as *const Computation);
            let next = b.lower_computation(body, vec![state.clone()]);
            b.loop_body = outer;
            b.write_back(&next?, &state, &inst.name)
        })?;
        update_state_in_place(&self.program, &mut body_steps, &state.leaf_list());
        for (from, to) in self.read_only_state(init_copies, &cond_steps, &body_steps, &state.leaf_list()) {
            cond_steps.iter_mut().chain(body_steps.iter_mut()).for_each(|s| s.rename_buffer(from, to));
            state.rename_buffer(from, to);
            if pred == from {
                pred = to;
            }
        }
        self.steps.push(Step::While { cond: cond_steps, pred, body: body_steps });
        Ok(state)
    }

    /// The state leaves that need no buffer of their own, each with the initial value's buffer
    /// the loop reads instead; their copies in (at `init_copies..` of the current steps) are
    /// removed. As XLA's copy insertion copies only the loop-state elements the loop changes:
    /// a leaf that neither the condition nor the body writes (the body passes it through, as a
    /// scan's weights or a search's table) keeps its initial value, so the loop may read that
    /// value where it is, provided the loop does not write that buffer either. Its value after
    /// the loop is then the initial buffer too. Nothing overwrites that buffer while the loop's
    /// result is live: `may_overwrite` never hands a loop's result to an in-place update, nor
    /// the initial value, whose user is the loop; an enclosing loop's copies back and in-place
    /// updates see the reads under the initial buffer's own id (`write_back` and
    /// `update_state_in_place` check what touches it).
    fn read_only_state(
        &mut self,
        init_copies: usize,
        cond: &[Step],
        body: &[Step],
        state: &[BufferId],
    ) -> Vec<(BufferId, BufferId)> {
        let mut written = HashSet::new();
        let kernels = &self.program.kernels;
        crate::program::walk_steps(cond, &mut |s| written.extend(s.own_writes(kernels)));
        crate::program::walk_steps(body, &mut |s| written.extend(s.own_writes(kernels)));
        let mut renames: Vec<(BufferId, BufferId)> = Vec::new();
        let mut i = init_copies;
        while i < self.steps.len() {
            match self.steps[i] {
                Step::Copy { src, dst }
                    if state.contains(&dst)
                        && !written.contains(&dst)
                        && !written.contains(&src)
                        && !renames.iter().any(|&(from, _)| from == dst) =>
                {
                    renames.push((dst, src));
                    self.steps.remove(i);
                }
                _ => i += 1,
            }
        }
        renames
    }

    /// Copies the body's result `next` into the loop state. A result leaf that is another
    /// state leaf is saved to a temporary before any state is overwritten.
    fn write_back(&mut self, next: &Value, state: &Value, name: &str) -> Result<(), LowerError> {
        let state_leaves = state.leaf_list();
        let mut sources = next.leaf_list();
        if sources.len() != state_leaves.len() {
            return Err(LowerError::invalid(name, "the while body returns another shape than its state"));
        }
        for (i, src) in sources.iter_mut().enumerate() {
            if *src != state_leaves[i] && state_leaves.contains(src) {
                *src = self.copy_of(*src)?;
            }
        }
        for (src, dst) in sources.into_iter().zip(state_leaves) {
            self.assign(&Value::Array(src), &Value::Array(dst), name)?;
        }
        Ok(())
    }

    fn lower_conditional(
        &mut self,
        comp: &Computation,
        values: &mut HashMap<InstId, Value>,
        inst: &Instruction,
    ) -> Result<Value, LowerError> {
        let branches: Vec<CompId> = match (inst.called("true_computation"), inst.called("false_computation")) {
            (Some(t), Some(f)) => vec![t, f],
            _ => match inst.attr("branch_computations") {
                Some(AttrValue::Computations(cs)) => cs.clone(),
                _ => return Err(LowerError::invalid(&inst.name, "conditional without branches")),
            },
        };
        let operands = self.operand_values(comp, values, inst)?;
        let Some((selector, branch_args)) = operands.split_first() else {
            return Err(LowerError::invalid(&inst.name, "conditional without operands"));
        };
        if branches.is_empty() || branch_args.len() != branches.len() {
            return Err(LowerError::invalid(&inst.name, "a conditional needs one operand per branch"));
        }
        let selector = match selector {
            Value::Array(s) if SelectorKind::of(&self.program.buffers[s.0 as usize].shape).is_some() => *s,
            _ => return Err(LowerError::invalid(&inst.name, "the conditional's selector is not a scalar pred or s32")),
        };
        let result = self.fresh_value(&inst.name, &inst.shape)?;
        let mut lowered = Vec::with_capacity(branches.len());
        for (&branch, arg) in branches.iter().zip(branch_args) {
            let branch = self.computation(branch, &inst.name)?;
            let (steps, ()) = self.nested(|b| {
                let out = b.lower_computation(branch, vec![arg.clone()])?;
                b.assign(&out, &result, &inst.name)
            })?;
            lowered.push(steps);
        }
        self.steps.push(Step::Conditional { selector, branches: lowered });
        Ok(result)
    }

    /// A value as the host sees it: its shape, with every array leaf's buffer.
    fn host_value(&self, value: &Value, name: &str) -> Result<HostValue, LowerError> {
        fn shape_of(b: &Builder<'_>, v: &Value, name: &str) -> Result<Shape, LowerError> {
            match v {
                Value::Array(id) => Ok(Shape::Array(b.program.buffers[id.0 as usize].shape.clone())),
                Value::Tuple(vs) => {
                    Ok(Shape::Tuple(vs.iter().map(|v| shape_of(b, v, name)).collect::<Result<_, _>>()?))
                }
                Value::Token => Err(LowerError::unsupported(name, "a token passed to or from the host")),
            }
        }
        Ok(HostValue { shape: shape_of(self, value, name)?, buffers: value.leaf_list() })
    }

    fn lower_custom_call(
        &mut self,
        comp: &Computation,
        values: &mut HashMap<InstId, Value>,
        inst: &Instruction,
    ) -> Result<Value, LowerError> {
        let target = inst.attr_word("custom_call_target").unwrap_or("").to_string();
        let operands = self.operand_values(comp, values, inst)?;
        let operands = operands.iter().map(|v| self.host_value(v, &inst.name)).collect::<Result<Vec<_>, _>>()?;
        let value = self.fresh_value(&inst.name, &inst.shape)?;
        let result = self.host_value(&value, &inst.name)?;
        self.steps.push(Step::Host(HostOp::CustomCall { name: inst.name.clone(), target, operands, result }));
        Ok(value)
    }

    fn lower_infeed(&mut self, inst: &Instruction) -> Result<Value, LowerError> {
        let data_shape = match &inst.shape {
            Shape::Tuple(parts) if parts.len() == 2 => &parts[0],
            _ => return Err(LowerError::invalid(&inst.name, "infeed returns a (data, token) tuple")),
        };
        let data = self.fresh_value(&format!("{}.data", inst.name), data_shape)?;
        // An empty tuple reads nothing, as the operation semantics say.
        if !matches!(data_shape, Shape::Tuple(t) if t.is_empty()) {
            let result = self.host_value(&data, &inst.name)?;
            self.steps.push(Step::Host(HostOp::Infeed { name: inst.name.clone(), result }));
        }
        Ok(Value::Tuple(vec![data, Value::Token]))
    }

    fn lower_outfeed(
        &mut self,
        comp: &Computation,
        values: &mut HashMap<InstId, Value>,
        inst: &Instruction,
    ) -> Result<Value, LowerError> {
        let Some(&data) = inst.operands.first() else {
            return Err(LowerError::invalid(&inst.name, "outfeed needs data"));
        };
        let data = self.value(comp, values, data)?;
        let operand = self.host_value(&data, &inst.name)?;
        self.steps.push(Step::Host(HostOp::Outfeed { name: inst.name.clone(), operand }));
        Ok(Value::Token)
    }
}

fn is_native_custom_call(inst: &Instruction) -> bool {
    inst.attr_word("custom_call_target").is_some_and(|t| crate::NATIVE_CUSTOM_CALLS.contains(&t))
}

fn array_of<'s>(shape: &'s Shape, name: &str) -> Result<&'s ArrayShape, LowerError> {
    match shape {
        Shape::Array(a) if a.is_static() => Ok(a),
        Shape::Array(_) => Err(LowerError::unsupported(name, format!("the dynamic shape {shape}"))),
        _ => Err(LowerError::unsupported(name, format!("a buffer of shape {shape}"))),
    }
}

/// A flat array that holds `len` elements of `mem`, for a kernel's scratch buffer.
fn scratch_shape(mem: crate::kernel::MemType, len: i64) -> Shape {
    use crate::kernel::{MemType, Ty};
    use tessera_hlo::ElementType as E;
    let (et, len) = match mem {
        MemType::Pred => (E::Pred, len),
        MemType::Scalar(Ty::Pred | Ty::I8) => (E::U8, len),
        MemType::Scalar(Ty::I16) => (E::U16, len),
        MemType::Scalar(Ty::I32) => (E::U32, len),
        MemType::Scalar(Ty::I64) => (E::U64, len),
        MemType::Scalar(Ty::F32) => (E::F32, len),
        MemType::Scalar(Ty::F64) => (E::F64, len),
        MemType::Packed { bits, .. } => (E::U8, (len * i64::from(bits) + 7) / 8),
    };
    Shape::array(et, &[len])
}

fn is_scalar_constant(inst: &Instruction) -> bool {
    inst.opcode == Opcode::Constant && matches!(&inst.shape, Shape::Array(a) if a.rank() == 0)
}

/// A one-instruction computation for `id`: each distinct operand is a parameter (in operand
/// order), except scalar constants, which are copied in. Returns it with the entry values
/// its parameters read.
pub(crate) fn wrap_single_op(entry: &Computation, id: InstId) -> (Computation, Vec<InstId>) {
    let inst = entry.inst(id);
    let mut comp = Computation::new(format!("{}_computation", inst.name));
    let mut map: HashMap<InstId, InstId> = HashMap::new();
    let mut inputs = Vec::new();
    for &o in &inst.operands {
        if map.contains_key(&o) {
            continue;
        }
        let operand = entry.inst(o);
        let new = if is_scalar_constant(operand) {
            let mut c = operand.clone();
            c.control_predecessors.clear();
            comp.add(c)
        } else {
            let mut p =
                Instruction::new(format!("param_{}", inputs.len()), Opcode::Parameter, operand.shape.clone(), vec![]);
            p.payload = Payload::Parameter(inputs.len() as i64);
            inputs.push(o);
            comp.add(p)
        };
        map.insert(o, new);
    }
    let mut clone = inst.clone();
    clone.operands = inst.operands.iter().map(|o| map[o]).collect();
    clone.control_predecessors.clear();
    // A parameter may carry the op's own name; the op is the root either way.
    if comp.find(&clone.name).is_some() {
        clone.name = comp.unique_name(&clone.name);
    }
    comp.root = comp.add(clone);
    (comp, inputs)
}

/// The module's `input_output_alias` pairs as (result leaf, parameter leaf) indices, each a
/// result and a parameter array of the same shape and layout; entries naming no such leaves
/// are left out (they only allow sharing, so leaving one out is always correct).
fn declared_aliases(module: &Module) -> Vec<(usize, usize)> {
    let Some(AttrValue::IoAliases(aliases)) = module.attr("input_output_alias") else { return Vec::new() };
    let entry = module.entry_comp();
    let params: Vec<&Shape> = entry.parameters().into_iter().map(|id| &entry.inst(id).shape).collect();
    let root = &entry.root_inst().shape;
    let mut out = Vec::new();
    for alias in aliases {
        let Some(p) = usize::try_from(alias.parameter).ok().filter(|&p| p < params.len()) else { continue };
        let first_leaf: usize = params[..p].iter().map(|s| array_leaves(s).len()).sum();
        let (Some((pi, pshape)), Some((ri, rshape))) =
            (array_leaf(params[p], &alias.parameter_index), array_leaf(root, &alias.output_index))
        else {
            continue;
        };
        let pair = (ri, first_leaf + pi);
        if pshape == rshape && !out.iter().any(|&(r, q)| r == pair.0 || q == pair.1) {
            out.push(pair);
        }
    }
    out
}

/// The array leaves of `shape` with their index paths, depth-first: the order in which the
/// program flattens parameters and results (tokens have no buffer).
fn array_leaves(shape: &Shape) -> Vec<(Vec<i64>, &ArrayShape)> {
    shape.leaves().into_iter().filter_map(|(path, s)| Some((path, s.as_array()?))).collect()
}

/// The number among `shape`'s array leaves of the array at `index`, and its shape.
fn array_leaf<'s>(shape: &'s Shape, index: &[i64]) -> Option<(usize, &'s ArrayShape)> {
    array_leaves(shape).into_iter().enumerate().find(|(_, (path, _))| path == index).map(|(n, (_, a))| (n, a))
}

/// Whether result leaf `result` may live in parameter leaf `parameter`'s memory: their
/// buffers alike, and in the entry's step list no step after the first one touching the
/// result touches the parameter, and that first step touches the parameter only as a
/// `Copy` of it into the result, or as a launch that reads each element of the parameter
/// only where and before it writes the result's (`kernel::updates_in_place`: an optimizer's
/// `p - lr * g`). Then every read of the parameter sees the caller's values whether or not
/// the two share memory. `ranges` are the steps' [`touch_ranges`].
fn may_share(program: &Program, ranges: &HashMap<BufferId, (usize, usize)>, result: usize, parameter: usize) -> bool {
    let (Some(&r), Some(&p)) = (program.results.get(result), program.parameters.get(parameter)) else {
        return false;
    };
    let (rb, pb) = (&program.buffers[r.0 as usize], &program.buffers[p.0 as usize]);
    if rb.shape != pb.shape || rb.bytes != pb.bytes || rb.memory_space != pb.memory_space {
        return false;
    }
    let Some(&(first, _)) = ranges.get(&r) else { return false };
    let Some(&(_, last_p)) = ranges.get(&p) else { return true };
    let in_place = match &program.steps[first] {
        Step::Copy { src, dst } => *src == p && *dst == r,
        Step::Launch(launch) => updates_in_place(program, launch, p, r),
        _ => false,
    };
    last_p < first || (last_p == first && in_place)
}

/// Removes the entry's copies from a temp that nothing touches afterwards into a buffer that
/// nothing touched before: the steps before the copy write and read the destination instead.
/// Such a copy is how a top-level while loop gets its initial state (`assign` into the fresh
/// state buffers), so the kernels computing that state now write the loop's own buffers: the
/// 16 MB halves of a `jax.random.normal` of 4M values were computed, then copied into the
/// state of its ThreeFry loop (5-7 ms of a 30 ms run). Only the entry's own step list: a step
/// list in a loop runs again, and a buffer touched "before" the copy there may be read again
/// after it in the next iteration.
fn coalesce_copies(program: &mut Program) {
    // One pass with the steps' touch ranges (a buffer merged into another lends it its first
    // touch), then one renaming pass: linear in the steps, however many copies go.
    let mut ranges = touch_ranges(&program.steps);
    let mut into: HashMap<BufferId, BufferId> = HashMap::new();
    let mut gone = vec![false; program.steps.len()];
    for (c, step) in program.steps.iter().enumerate() {
        let Step::Copy { src, dst } = *step else { continue };
        let (from, to) = (&program.buffers[src.0 as usize], &program.buffers[dst.0 as usize]);
        let (Some(&(src_first, src_last)), Some(&(dst_first, _))) = (ranges.get(&src), ranges.get(&dst)) else {
            continue;
        };
        let joins = src != dst
            && from.kind == BufferKind::Temp
            && matches!(to.kind, BufferKind::Temp | BufferKind::Result(_))
            && from.shape == to.shape
            && from.bytes == to.bytes
            && from.memory_space == to.memory_space
            && src_last == c
            && dst_first == c;
        if joins {
            into.insert(src, dst);
            ranges.entry(dst).and_modify(|r| r.0 = src_first);
            gone[c] = true;
        }
    }
    if into.is_empty() {
        return;
    }
    let mut c = 0;
    program.steps.retain(|_| {
        c += 1;
        !gone[c - 1]
    });
    let name = |mut b: BufferId| {
        while let Some(&next) = into.get(&b) {
            b = next;
        }
        b
    };
    program.steps.iter_mut().for_each(|step| step.map_buffers(&name));
}

/// Folds a while body's copies back into the loop state (`state`, its leaves' buffers) into
/// the launches computing them, where a launch may write the new value over the old one: the
/// first step touching the copy's source writes it and reads the state leaf only element by
/// element, where and before it writes (`updates_in_place`), and no step after it but the
/// copy touches either buffer. The launch then writes the state leaf and the copy goes: an
/// elementwise update of a large loop state no longer costs a second pass over it per
/// iteration. A state leaf the body reads after computing its new value (a swap) keeps its
/// copy.
fn update_state_in_place(program: &Program, body: &mut Vec<Step>, state: &[BufferId]) {
    // A body holds a few dozen steps: each copy back scans it.
    let mut c = 0;
    while c < body.len() {
        let Step::Copy { src: t, dst: s } = body[c] else {
            c += 1;
            continue;
        };
        let first = body.iter().position(|step| touches(step, t));
        let folded = first.filter(|&l| {
            l < c
                && state.contains(&s)
                && matches!(&body[l], Step::Launch(launch) if updates_in_place(program, launch, s, t))
                && !body[l + 1..c].iter().any(|step| touches(step, s) || touches(step, t))
                && !body[c + 1..].iter().any(|step| touches(step, t))
        });
        match folded {
            Some(l) => {
                if let Step::Launch(launch) = &mut body[l] {
                    launch.args.iter_mut().filter(|a| **a == t).for_each(|a| *a = s);
                }
                body.remove(c);
            }
            None => c += 1,
        }
    }
}

/// Whether `step` (or a step nested in it) reads or writes buffer `id`.
fn touches(step: &Step, id: BufferId) -> bool {
    let mut found = false;
    crate::program::walk_steps(std::slice::from_ref(step), &mut |s| found |= s.own_buffers().contains(&id));
    found
}

/// For each buffer the steps touch (read or write, nested steps included), the first and the
/// last index in `steps` of a step touching it.
fn touch_ranges(steps: &[Step]) -> HashMap<BufferId, (usize, usize)> {
    let mut ranges: HashMap<BufferId, (usize, usize)> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        crate::program::walk_steps(std::slice::from_ref(step), &mut |s| {
            for id in s.own_buffers() {
                ranges.entry(id).and_modify(|r| r.1 = i).or_insert((i, i));
            }
        });
    }
    ranges
}

/// Whether `launch` may write buffer `r` in the memory of buffer `p`, which it reads: `r` is
/// one writable buffer of the kernel, `p` only read, and the kernel updates in place
/// (`kernel::updates_in_place`).
fn updates_in_place(program: &Program, launch: &Launch, p: BufferId, r: BufferId) -> bool {
    let Some(kernel) = program.kernels.get(launch.kernel) else { return false };
    let slots = |id: BufferId| {
        launch.args.iter().enumerate().filter(move |(_, &a)| a == id).map(|(i, _)| crate::kernel::BufId(i as u32))
    };
    let reads: Vec<_> = slots(p).collect();
    let writes: Vec<_> = slots(r).collect();
    let read_only = reads.iter().all(|b| kernel.buffers.get(b.0 as usize).is_some_and(|k| !k.writable));
    match writes.as_slice() {
        [write] if read_only && launch.args.len() == kernel.buffers.len() => {
            crate::kernel::updates_in_place(kernel, &reads, *write)
        }
        _ => false,
    }
}

/// Every kernel leaves the lowering verified (ids, types, and indices proved inside their
/// buffers), so no tier ever compiles an access it cannot trust; a failure here is a lowering
/// bug, reported instead of run.
fn checked(kernel: crate::kernel::Kernel) -> Result<crate::kernel::Kernel, LowerError> {
    verify_kernel(&kernel).map_err(|e| LowerError::Pipeline { pass: "emit".into(), message: e.to_string() })?;
    Ok(kernel)
}
