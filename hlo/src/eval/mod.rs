//! The reference interpreter: runs a module's entry computation on literals.
//!
//! Intermediate values are row-major arrays widened to one of four buffers (predicates,
//! integers as i64, floats as f64, complex numbers as f64 pairs) so each op is written once per
//! class as a whole-array kernel. Every op re-narrows its result to the element type (integers
//! wrap to their width, sub-byte ones included; floats round to their format, f8 and f4 ones
//! included), so the values seen are exactly those of the narrow type: f32 add/sub/mul/div/sqrt
//! computed in f64 and rounded once are correctly rounded, and f16/bf16 go through f32 first
//! because that is how XLA:CPU computes them.
//!
//! Host-side state (the `rng` seed, infeed and outfeed queues, custom-call functions) comes in
//! through [`EvalOptions`]; the interpreter is one device, so replica and partition ids are 0.

mod batch_norm;
mod collectives;
mod complex;
mod convolution;
mod data_movement;
mod dot;
mod elementwise;
mod fft;
mod gather_scatter;
mod host_io;
mod kernels;
mod linalg;
pub mod minifloat;
mod reduce;
mod rng;
mod scalar_fn;
mod sort;
mod stochastic;
mod value;
mod window;
mod wrappers;

use crate::element_type::ElementType;
use crate::ir::{AttrList, CompId, Computation, Instruction, Module, Opcode, Payload};
use crate::literal::{Literal, LiteralError};
use crate::shape::Shape;

pub use host_io::{CustomCallRegistry, EvalOptions, HostFn};

/// The value of a mini-float element's bits (f8 and f4 formats), as the interpreter decodes
/// them: the compiled tiers fold constants and check their conversions against this.
pub fn minifloat_decode(ty: ElementType, bits: u64) -> f64 {
    minifloat::decode(ty, bits)
}

/// The bits of `x` rounded (to nearest even) to a mini-float format, as the interpreter
/// rounds every result of that type.
pub fn minifloat_encode(ty: ElementType, x: f64) -> u64 {
    minifloat::encode(ty, x)
}
pub(crate) use value::{Arr, Buf, Value};

/// Why a module could not be evaluated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    #[error("the interpreter does not support opcode '{opcode}'")]
    Unsupported { opcode: String },
    #[error("the interpreter does not support element type {element_type} (in '{instruction}')")]
    UnsupportedType { element_type: ElementType, instruction: String },
    #[error("argument error: {0}")]
    Argument(String),
    #[error("instruction '{instruction}': {message}")]
    Invalid { instruction: String, message: String },
    #[error(transparent)]
    Literal(#[from] LiteralError),
    #[error("the module does not verify: {0}")]
    NotVerified(#[from] crate::verify::VerifyError),
}

impl EvalError {
    pub(crate) fn invalid(inst: &Instruction, message: impl Into<String>) -> EvalError {
        EvalError::Invalid { instruction: inst.name.clone(), message: message.into() }
    }
}

/// Runs the entry computation of `module` on `args` (one literal per entry parameter, in any
/// layout) and returns its result in the layout the module declares for it.
pub fn evaluate(module: &Module, args: &[Literal]) -> Result<Literal, EvalError> {
    evaluate_with(module, args, &EvalOptions::default())
}

/// [`evaluate`] with a seed for `rng`, an infeed queue, an outfeed collector and custom-call
/// host functions.
pub fn evaluate_with(module: &Module, args: &[Literal], options: &EvalOptions) -> Result<Literal, EvalError> {
    // The evaluator indexes by the shapes the module declares; verification is what makes
    // those shapes agree, so an unverified module never reaches it.
    crate::verify::verify(module)?;
    let entry = module.entry_comp();
    let params = entry.parameter_shapes();
    if params.len() != args.len() {
        return Err(EvalError::Argument(format!(
            "the entry computation takes {} arguments but {} were given",
            params.len(),
            args.len()
        )));
    }
    let declared = module.entry_computation_layout();
    let mut values = Vec::with_capacity(args.len());
    for (i, (arg, shape)) in args.iter().zip(&params).enumerate() {
        if !arg.shape().compatible(shape) {
            return Err(EvalError::Argument(format!(
                "argument {i} has shape {} but parameter {i} is {shape}",
                arg.shape()
            )));
        }
        values.push(Value::from_literal(arg, "parameter")?.packed());
    }
    let evaluator = Evaluator { module, options, rng: rng::RngStream::new(options.rng_seed) };
    let result = evaluator.run(entry, values)?;
    let root_shape = match declared {
        Some(ps) if ps.result.compatible(&entry.root_inst().shape) => ps.result.clone(),
        _ => entry.root_inst().shape.clone(),
    };
    result.to_literal(&root_shape)
}

/// Evaluates one instruction of a verified `module` on constant operands (one literal per
/// operand, in any layout) and returns its value in the instruction's shape: what constant
/// folding needs. Computations the instruction calls are `module`'s.
pub fn evaluate_instruction(module: &Module, inst: &Instruction, operands: &[Literal]) -> Result<Literal, EvalError> {
    if inst.operands.len() != operands.len() {
        return Err(EvalError::invalid(inst, format!("{} operands given", operands.len())));
    }
    let options = EvalOptions::default();
    let evaluator = Evaluator { module, options: &options, rng: rng::RngStream::new(options.rng_seed) };
    let values = operands.iter().map(|l| Value::from_literal(l, &inst.name)).collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&Value> = values.iter().collect();
    evaluator.eval_inst(inst, &refs, &[])?.to_literal(&inst.shape)
}

pub(crate) struct Evaluator<'m> {
    pub(crate) module: &'m Module,
    options: &'m EvalOptions,
    rng: rng::RngStream,
}

impl<'m> Evaluator<'m> {
    pub(crate) fn run_comp(&self, comp: CompId, args: Vec<Value>) -> Result<Value, EvalError> {
        let c = self
            .module
            .get(comp)
            .ok_or_else(|| EvalError::Argument(format!("computation #{} does not exist", comp.index())))?;
        self.run(c, args)
    }

    /// Evaluates `comp` on `args`. Each value is dropped after its last use and each argument
    /// moves into its parameter, so a large module holds only its live values.
    fn run(&self, comp: &Computation, args: Vec<Value>) -> Result<Value, EvalError> {
        let mut values: Vec<Option<Value>> = vec![None; comp.instructions.len()];
        let mut args: Vec<Option<Value>> = args.into_iter().map(Some).collect();
        // The root is not always last: dead instructions (a pass's leftovers) may follow it.
        let order = comp.post_order();
        let root = comp.get(comp.root).map(|_| comp.root);
        let mut uses_left = vec![0usize; comp.instructions.len()];
        let distinct = |inst: &Instruction| {
            let mut ops = inst.operands.clone();
            ops.sort();
            ops.dedup();
            ops
        };
        for &id in &order {
            for o in distinct(comp.inst(id)) {
                if let Some(n) = uses_left.get_mut(o.index()) {
                    *n += 1;
                }
            }
        }
        for id in order {
            let inst = comp.inst(id);
            let v = if let (Opcode::Parameter, Payload::Parameter(n)) = (inst.opcode, &inst.payload) {
                usize::try_from(*n)
                    .ok()
                    .and_then(|n| args.get_mut(n))
                    .and_then(Option::take)
                    .ok_or_else(|| EvalError::invalid(inst, format!("parameter {n} was not given")))?
            } else {
                let mut ops = Vec::with_capacity(inst.operands.len());
                for o in &inst.operands {
                    match values.get(o.index()).and_then(Option::as_ref) {
                        Some(v) => ops.push(v),
                        None => return Err(EvalError::invalid(inst, "operand evaluated out of order")),
                    }
                }
                // bitcast reads the operand's physical buffer, so it needs the operand's layout.
                match (inst.opcode, inst.operands.first(), ops.first()) {
                    (Opcode::Bitcast, Some(&o), Some(v)) => {
                        wrappers::bitcast(inst, &comp.inst(o).shape, v.widened(&inst.name)?.as_ref())?
                    }
                    _ => self.eval_inst(inst, &ops, &[])?,
                }
            };
            values[id.index()] = Some(v.packed());
            for o in distinct(inst) {
                let left = &mut uses_left[o.index()];
                *left -= 1;
                if *left == 0 && Some(o) != root {
                    values[o.index()] = None;
                }
            }
        }
        let root = root.ok_or_else(|| EvalError::Argument(format!("computation {} is empty", comp.name)))?;
        values[root.index()].take().ok_or_else(|| EvalError::Argument(format!("computation {} has no root", comp.name)))
    }

    fn eval_inst(&self, inst: &Instruction, ops: &[&Value], args: &[Value]) -> Result<Value, EvalError> {
        use Opcode as O;
        // Ops that only pass values on take packed arrays as they are, and a dot reads them
        // itself; the others compute on widened copies, made here and dropped when the op is
        // done.
        let passes_on = matches!(
            inst.opcode,
            O::Parameter
                | O::Constant
                | O::Tuple
                | O::GetTupleElement
                | O::Call
                | O::While
                | O::Conditional
                | O::Copy
                | O::OptimizationBarrier
                | O::Dot
        );
        let widened: Vec<std::borrow::Cow<'_, Value>>;
        let refs: Vec<&Value>;
        let ops: &[&Value] = if passes_on || !ops.iter().any(|v| v.has_packed()) {
            ops
        } else {
            widened = ops.iter().map(|v| v.widened(&inst.name)).collect::<Result<_, _>>()?;
            refs = widened.iter().map(|c| c.as_ref()).collect();
            &refs
        };
        match inst.opcode {
            O::Parameter => match inst.payload {
                Payload::Parameter(n) => usize::try_from(n)
                    .ok()
                    .and_then(|n| args.get(n))
                    .cloned()
                    .ok_or_else(|| EvalError::invalid(inst, format!("parameter {n} was not given"))),
                _ => Err(EvalError::invalid(inst, "parameter without a number")),
            },
            O::Constant => match &inst.payload {
                Payload::Constant(l) => Value::from_literal(l, &inst.name),
                _ => Err(EvalError::invalid(inst, "constant without a value")),
            },
            O::Tuple => Ok(Value::Tuple(ops.iter().map(|v| (*v).clone()).collect())),
            O::GetTupleElement => {
                let index = inst.attr_int("index").ok_or_else(|| EvalError::invalid(inst, "missing index"))?;
                match ops.first() {
                    Some(Value::Tuple(elems)) => usize::try_from(index)
                        .ok()
                        .and_then(|i| elems.get(i))
                        .cloned()
                        .ok_or_else(|| EvalError::invalid(inst, format!("tuple index {index} out of range"))),
                    _ => Err(EvalError::invalid(inst, "operand is not a tuple")),
                }
            }
            O::Call => {
                let callee =
                    inst.called("to_apply").ok_or_else(|| EvalError::invalid(inst, "call without to_apply"))?;
                self.run_comp(callee, ops.iter().map(|v| (*v).clone()).collect())
            }
            O::Copy | O::OptimizationBarrier => {
                let v = ops.first().ok_or_else(|| EvalError::invalid(inst, "missing operand"))?;
                Ok((*v).clone())
            }
            O::Reduce => reduce::reduce(self, inst, ops),
            O::While => self.eval_while(inst, ops),
            O::Conditional => self.eval_conditional(inst, ops),
            O::Map => self.eval_map(inst, &arrays(inst, ops)?),
            O::Dot => match ops {
                // Real operands may stay packed: the dot lays them out before widening.
                [l, r] if !ops.iter().any(|v| matches!(v, Value::Arr(a) if a.ty.is_complex())) => {
                    dot::dot_of(inst, dot_operand(inst, l)?, dot_operand(inst, r)?).map(Value::Arr)
                }
                _ => complex::dot(inst, &arrays(inst, ops)?).map(Value::Arr),
            },
            O::Sort => sort::sort(self, inst, &arrays(inst, ops)?),
            O::TopK => sort::topk(inst, &arrays(inst, ops)?),
            O::Fft => fft::fft(inst, &arrays(inst, ops)?).map(Value::Arr),
            O::StochasticConvert => stochastic::stochastic_convert(inst, &arrays(inst, ops)?).map(Value::Arr),
            O::Rng => rng::rng(inst, &arrays(inst, ops)?, &self.rng).map(Value::Arr),
            O::RngBitGenerator => rng::bit_generator(inst, &arrays(inst, ops)?),
            O::Infeed => host_io::infeed(self.options, inst),
            O::Outfeed => host_io::outfeed(self.options, inst, ops),
            O::CustomCall
                if inst.attr_word("custom_call_target") == Some("TopK")
                    && !host_io::is_registered(self.options, inst) =>
            {
                sort::topk_custom_call(self, inst, &arrays(inst, ops)?)
            }
            O::CustomCall
                if crate::ir::SHARDING_ANNOTATIONS.contains(&inst.attr_word("custom_call_target").unwrap_or(""))
                    && !host_io::is_registered(self.options, inst) =>
            {
                wrappers::sharding_annotation(inst, ops)
            }
            O::CustomCall => host_io::custom_call(self.options, inst, ops),
            O::AfterAll => Ok(Value::Token),
            O::RngGetAndUpdateState => rng::get_and_update_state(inst, &self.rng),
            op if collectives::handles(op) => collectives::eval(inst, ops),
            op if wrappers::handles(op) => self.eval_wrapper(inst, ops),
            O::Cholesky => linalg::cholesky(inst, &arrays(inst, ops)?).map(Value::Arr),
            O::TriangularSolve => linalg::triangular_solve(inst, &arrays(inst, ops)?).map(Value::Arr),
            O::BatchNormInference => batch_norm::inference(inst, &arrays(inst, ops)?),
            O::BatchNormTraining => batch_norm::training(inst, &arrays(inst, ops)?),
            O::BatchNormGrad => batch_norm::grad(inst, &arrays(inst, ops)?),
            O::Complex | O::Real | O::Imag => complex::eval(inst, &arrays(inst, ops)?).map(Value::Arr),
            O::Convolution => convolution::convolution(inst, &arrays(inst, ops)?).map(Value::Arr),
            O::ReduceWindow => window::reduce_window(self, inst, ops),
            O::SelectAndScatter => window::select_and_scatter(self, inst, ops),
            O::Gather => gather_scatter::gather(inst, &arrays(inst, ops)?).map(Value::Arr),
            O::Scatter => gather_scatter::scatter(self, inst, ops),
            O::Broadcast
            | O::Reshape
            | O::Transpose
            | O::Slice
            | O::Reverse
            | O::Pad
            | O::Concatenate
            | O::Iota
            | O::DynamicSlice
            | O::DynamicUpdateSlice => data_movement::eval(inst, &arrays(inst, ops)?).map(Value::Arr),
            op if elementwise::handles(op) => {
                let ops = arrays(inst, ops)?;
                if complex::handles(inst, &ops) {
                    complex::eval(inst, &ops).map(Value::Arr)
                } else {
                    elementwise::eval(inst, &ops).map(Value::Arr)
                }
            }
            op => Err(EvalError::Unsupported { opcode: op.name().to_string() }),
        }
    }
}

impl Evaluator<'_> {
    fn eval_while(&self, inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
        let (Some(cond), Some(body), [init]) = (inst.called("condition"), inst.called("body"), ops) else {
            return Err(EvalError::invalid(inst, "while needs a condition, a body and one operand"));
        };
        let mut state = (*init).clone();
        // No iteration limit: a module that loops forever does so under XLA too.
        loop {
            match self.run_comp(cond, vec![state.clone()])? {
                Value::Arr(Arr { buf: Buf::Pred(p), .. }) if p.len() == 1 => {
                    if !p[0] {
                        return Ok(state);
                    }
                }
                _ => return Err(EvalError::invalid(inst, "while condition did not return a pred scalar")),
            }
            state = self.run_comp(body, vec![state])?;
        }
    }

    fn eval_conditional(&self, inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
        let Some((selector, branch_args)) = ops.split_first() else {
            return Err(EvalError::invalid(inst, "conditional without operands"));
        };
        let branches: Vec<CompId> = match (inst.called("true_computation"), inst.called("false_computation")) {
            // The pred form's operands are (pred, true operand, false operand).
            (Some(t), Some(f)) => vec![t, f],
            _ => match inst.attr("branch_computations") {
                Some(crate::ir::AttrValue::Computations(cs)) => cs.clone(),
                _ => return Err(EvalError::invalid(inst, "conditional without branches")),
            },
        };
        let index = match selector {
            Value::Arr(Arr { buf: Buf::Pred(p), .. }) if p.len() == 1 => usize::from(!p[0]),
            Value::Arr(Arr { buf: Buf::Int(v), .. }) if v.len() == 1 => {
                // XLA runs the last branch for an out-of-range index.
                usize::try_from(v[0]).ok().filter(|&i| i < branches.len()).unwrap_or(branches.len().saturating_sub(1))
            }
            _ => return Err(EvalError::invalid(inst, "conditional selector is not a scalar pred or s32")),
        };
        let (Some(&branch), Some(arg)) = (branches.get(index), branch_args.get(index)) else {
            return Err(EvalError::invalid(inst, "conditional branch has no operand"));
        };
        self.run_comp(branch, vec![(*arg).clone()])
    }

    /// map calls its computation once per element: it is rare enough not to need a fast path.
    fn eval_map(&self, inst: &Instruction, ops: &[&Arr]) -> Result<Value, EvalError> {
        let (ty, dims) = result_array(inst)?;
        let comp = inst.called("to_apply").ok_or_else(|| EvalError::invalid(inst, "map without to_apply"))?;
        let n: usize = dims.iter().product::<i64>() as usize;
        if ops.iter().any(|a| a.len() != n) {
            return Err(EvalError::invalid(inst, "map operands differ from the result in size"));
        }
        let mut out = value::empty_buf(ty, n);
        for i in 0..n {
            let args = ops.iter().map(|a| Value::Arr(a.scalar_at(i))).collect();
            let Value::Arr(r) = self.run_comp(comp, args)? else {
                return Err(EvalError::invalid(inst, "map computation returned a tuple"));
            };
            if r.len() != 1 || !out.extend_from(&r.buf) {
                return Err(EvalError::invalid(inst, "map computation result does not match the map's type"));
            }
        }
        Ok(Value::Arr(Arr { ty, dims, buf: out }))
    }
}

/// A dot operand, packed or widened.
fn dot_operand<'a>(inst: &Instruction, v: &'a Value) -> Result<dot::Operand<'a>, EvalError> {
    match v {
        Value::Arr(a) => Ok(dot::Operand::Wide(a)),
        Value::Packed(lit) => Ok(dot::Operand::Packed(lit)),
        _ => Err(EvalError::invalid(inst, "a dot operand is not an array")),
    }
}

/// The operands as arrays; tuples are an error for ops that take arrays.
fn arrays<'a>(inst: &Instruction, ops: &[&'a Value]) -> Result<Vec<&'a Arr>, EvalError> {
    ops.iter()
        .map(|v| match v {
            Value::Arr(a) => Ok(a),
            Value::Tuple(_) => Err(EvalError::invalid(inst, "expected an array operand, found a tuple")),
            Value::Token => Err(EvalError::invalid(inst, "expected an array operand, found a token")),
            // Operands are widened before an op computes with them.
            Value::Packed(_) => Err(EvalError::invalid(inst, "a packed operand reached an op unwidened")),
        })
        .collect()
}

/// The array shape of an instruction's result, with its element type checked. A bounded
/// dynamic dimension counts at its bound: every value has its bound's size, since
/// `set-dimension-size` to anything smaller is refused.
pub(crate) fn result_array(inst: &Instruction) -> Result<(ElementType, Vec<i64>), EvalError> {
    match &inst.shape {
        Shape::Array(a) => {
            value::check_type(a.element_type, &inst.name)?;
            if a.dims.iter().any(|&d| d < 0) {
                return Err(EvalError::invalid(inst, "dynamic shapes are not supported"));
            }
            Ok((a.element_type, a.dims.clone()))
        }
        _ => Err(EvalError::invalid(inst, "expected an array result")),
    }
}

#[cfg(test)]
mod tests;
