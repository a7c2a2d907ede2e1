//! What an evaluation exchanges with its host: the rng seed, the infeed queue, the outfeed
//! literals, and the host functions custom-calls run.

use super::{EvalError, Value};
use crate::ir::{AttrList, Instruction};
use crate::literal::Literal;
use crate::shape::Shape;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

pub use crate::literal::HostFn;

/// Host functions by `custom_call_target` name.
#[derive(Default)]
pub struct CustomCallRegistry {
    targets: HashMap<String, Box<HostFn>>,
}

impl CustomCallRegistry {
    pub fn new() -> CustomCallRegistry {
        CustomCallRegistry::default()
    }

    /// Registers (or replaces) the function for `target`.
    pub fn register(
        &mut self,
        target: impl Into<String>,
        f: impl Fn(&[Literal]) -> Result<Literal, String> + Send + Sync + 'static,
    ) {
        self.targets.insert(target.into(), Box::new(f));
    }

    pub fn contains(&self, target: &str) -> bool {
        self.targets.contains_key(target)
    }

    /// The function registered for `target` (other executors of the same module call it too).
    pub fn get(&self, target: &str) -> Option<&HostFn> {
        self.targets.get(target).map(|f| &**f)
    }
}

impl std::fmt::Debug for CustomCallRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.targets.keys()).finish()
    }
}

/// Options of one evaluation. The queues sit behind locks so a shared `&EvalOptions` can feed
/// and collect; after [`super::evaluate_with`] returns, [`EvalOptions::take_outfeed`] hands
/// over what the module sent out.
#[derive(Debug, Default)]
pub struct EvalOptions {
    /// Seeds the `rng` op's generator: equal seeds give equal results.
    pub rng_seed: u64,
    pub custom_calls: CustomCallRegistry,
    infeed: Mutex<VecDeque<Literal>>,
    outfeed: Mutex<Vec<Literal>>,
}

impl EvalOptions {
    pub fn new() -> EvalOptions {
        EvalOptions::default()
    }

    pub fn with_rng_seed(mut self, seed: u64) -> EvalOptions {
        self.rng_seed = seed;
        self
    }

    pub fn with_custom_calls(mut self, registry: CustomCallRegistry) -> EvalOptions {
        self.custom_calls = registry;
        self
    }

    /// Queues literals for `infeed` instructions to read, first in first out.
    pub fn with_infeed(self, literals: impl IntoIterator<Item = Literal>) -> EvalOptions {
        for l in literals {
            self.push_infeed(l);
        }
        self
    }

    pub fn push_infeed(&self, literal: Literal) {
        lock(&self.infeed).push_back(literal);
    }

    /// The next queued infeed literal (for other executors that share these queues).
    pub fn pop_infeed(&self) -> Option<Literal> {
        lock(&self.infeed).pop_front()
    }

    /// Records an outfeed literal (for other executors that share these queues).
    pub fn push_outfeed(&self, literal: Literal) {
        lock(&self.outfeed).push(literal);
    }

    /// Literals still queued for infeed.
    pub fn infeed_len(&self) -> usize {
        lock(&self.infeed).len()
    }

    /// Everything `outfeed` instructions sent so far, in order; the list starts empty again.
    pub fn take_outfeed(&self) -> Vec<Literal> {
        std::mem::take(&mut *lock(&self.outfeed))
    }
}

/// A poisoned lock only means another thread panicked mid-push; the queue is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The shape a value has, for handing it to the host as a literal.
fn value_shape(v: &Value) -> Shape {
    match v {
        Value::Arr(a) => Shape::array(a.ty, &a.dims),
        Value::Packed(lit) => lit.shape().clone(),
        Value::Tuple(vs) => Shape::Tuple(vs.iter().map(value_shape).collect()),
        Value::Token => Shape::Token,
    }
}

fn to_literal(v: &Value) -> Result<Literal, EvalError> {
    v.to_literal(&value_shape(v))
}

/// infeed(token): (next queued literal, token). The literal must have the data shape.
pub(crate) fn infeed(opts: &EvalOptions, inst: &Instruction) -> Result<Value, EvalError> {
    let data_shape = match &inst.shape {
        Shape::Tuple(parts) if parts.len() == 2 => &parts[0],
        _ => return Err(EvalError::invalid(inst, "infeed returns a (data, token) tuple")),
    };
    // An empty tuple reads nothing, as the operation semantics say.
    if matches!(data_shape, Shape::Tuple(t) if t.is_empty()) {
        return Ok(Value::Tuple(vec![Value::Tuple(vec![]), Value::Token]));
    }
    let lit = lock(&opts.infeed)
        .pop_front()
        .ok_or_else(|| EvalError::invalid(inst, "infeed found nothing queued (EvalOptions::with_infeed)"))?;
    if !lit.shape().compatible(data_shape) {
        return Err(EvalError::invalid(
            inst,
            format!("the queued infeed literal has shape {} but infeed reads {data_shape}", lit.shape()),
        ));
    }
    Ok(Value::Tuple(vec![Value::from_literal(&lit, &inst.name)?, Value::Token]))
}

/// outfeed(data, token): records the data and returns a token.
pub(crate) fn outfeed(opts: &EvalOptions, inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
    let Some(data) = ops.first() else {
        return Err(EvalError::invalid(inst, "outfeed needs data"));
    };
    let lit = to_literal(data)?;
    lock(&opts.outfeed).push(lit);
    Ok(Value::Token)
}

/// custom-call: runs the registered host function for the target on the operands.
pub(crate) fn custom_call(opts: &EvalOptions, inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
    let target = inst.attr_word("custom_call_target").unwrap_or("");
    let Some(f) = opts.custom_calls.targets.get(target) else {
        return Err(EvalError::Unsupported { opcode: format!("custom-call to unregistered target '{target}'") });
    };
    run_host_fn(inst, target, f, ops)
}

/// Whether a custom-call goes to a registered host function (which takes precedence over the
/// targets the interpreter knows itself, such as XLA's TopK).
pub(crate) fn is_registered(opts: &EvalOptions, inst: &Instruction) -> bool {
    opts.custom_calls.contains(inst.attr_word("custom_call_target").unwrap_or(""))
}

fn run_host_fn(inst: &Instruction, target: &str, f: &HostFn, ops: &[&Value]) -> Result<Value, EvalError> {
    let args = ops.iter().map(|v| to_literal(v)).collect::<Result<Vec<_>, _>>()?;
    let out = f(&args).map_err(|m| EvalError::invalid(inst, format!("custom-call '{target}' failed: {m}")))?;
    if !out.shape().compatible(&inst.shape) {
        return Err(EvalError::invalid(
            inst,
            format!("custom-call '{target}' returned {} but the instruction is {}", out.shape(), inst.shape),
        ));
    }
    Value::from_literal(&out, &inst.name)
}
