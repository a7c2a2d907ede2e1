//! Calling scalar computations (reducers, select and scatter functions) element by element.
//!
//! Ops such as reduce-window, select-and-scatter and scatter apply a computation to single
//! elements. The common computations are one instruction (an add, a max, a compare, or just
//! one parameter); those are recognised once and applied as typed Rust code, because calling
//! the computation through the evaluator costs a few allocations per element. Anything else
//! goes through the evaluator on scalar values.

use super::value::{map_buf, round_float, wrap_int};
use super::{Arr, Buf, EvalError, Evaluator, Value};
use crate::element_type::ElementType;
use crate::ir::{AttrList, CompId, ComparisonDirection, ComparisonType, Instruction, Module, Opcode, Payload};
use crate::shape::Shape;

/// A two-argument computation recognised as one typed operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Combiner {
    /// `op(p0, p1)` for add, multiply, maximum, minimum, and, or.
    Op(Opcode),
    /// Returns its first parameter (the current value is kept).
    First,
    /// Returns its second parameter (the update overwrites).
    Second,
}

/// The parameter numbers a computation's root reads, if the root is `op(param a, param b)`
/// and the computation holds nothing else.
fn root_params(module: &Module, comp: CompId) -> Option<(&Instruction, Vec<i64>)> {
    let c = module.get(comp)?;
    let root = c.root_inst();
    if root.operands.len() != 2 || c.instructions.len() != 3 {
        return None;
    }
    let params: Option<Vec<i64>> = root
        .operands
        .iter()
        .map(|&o| match c.get(o)?.payload {
            Payload::Parameter(n) => Some(n),
            _ => None,
        })
        .collect();
    Some((root, params?))
}

/// Recognises a binary scalar computation: one of reduce's single-instruction reducers, or a
/// computation that returns one of its two parameters (scatter's overwrite).
pub(crate) fn combiner(module: &Module, comp: CompId) -> Option<Combiner> {
    let c = module.get(comp)?;
    let root = c.root_inst();
    if let Payload::Parameter(n) = root.payload {
        if c.parameters().len() != 2 {
            return None;
        }
        return match n {
            0 => Some(Combiner::First),
            1 => Some(Combiner::Second),
            _ => None,
        };
    }
    super::reduce::simple_reducer(module, comp).map(Combiner::Op)
}

/// `combine(a, b)` for floats of type `ty`, rounded as the computation would round it.
pub(crate) fn float_fn(c: Combiner, ty: ElementType) -> Option<impl Fn(f64, f64) -> f64> {
    if matches!(c, Combiner::Op(op) if !matches!(op, Opcode::Add | Opcode::Multiply | Opcode::Maximum | Opcode::Minimum))
    {
        return None;
    }
    Some(move |a: f64, b: f64| match c {
        Combiner::First => a,
        Combiner::Second => b,
        Combiner::Op(Opcode::Add) => round_float(ty, a + b),
        Combiner::Op(Opcode::Multiply) => round_float(ty, a * b),
        Combiner::Op(Opcode::Maximum) => super::elementwise::float_maximum(a, b),
        Combiner::Op(_) => super::elementwise::float_minimum(a, b),
    })
}

/// `combine(a, b)` for integers of type `ty` (wrapping; u64 compares unsigned).
pub(crate) fn int_fn(c: Combiner, ty: ElementType) -> impl Fn(i64, i64) -> i64 {
    let unsigned64 = ty == ElementType::U64;
    move |a: i64, b: i64| match c {
        Combiner::First => a,
        Combiner::Second => b,
        Combiner::Op(Opcode::Add) => wrap_int(ty, a.wrapping_add(b)),
        Combiner::Op(Opcode::Multiply) => wrap_int(ty, a.wrapping_mul(b)),
        Combiner::Op(Opcode::Maximum) if unsigned64 => (a as u64).max(b as u64) as i64,
        Combiner::Op(Opcode::Minimum) if unsigned64 => (a as u64).min(b as u64) as i64,
        Combiner::Op(Opcode::Maximum) => a.max(b),
        Combiner::Op(Opcode::Minimum) => a.min(b),
        Combiner::Op(Opcode::And) => a & b,
        Combiner::Op(_) => a | b,
    }
}

/// `combine(a, b)` for predicates: add and maximum are or, multiply and minimum are and.
pub(crate) fn pred_fn(c: Combiner) -> impl Fn(bool, bool) -> bool {
    move |a: bool, b: bool| match c {
        Combiner::First => a,
        Combiner::Second => b,
        Combiner::Op(Opcode::And | Opcode::Multiply | Opcode::Minimum) => a & b,
        Combiner::Op(_) => a | b,
    }
}

/// A select function recognised as `compare(p0, p1)` (or with the parameters swapped),
/// applied to two elements of one buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Comparison {
    direction: ComparisonDirection,
    swapped: bool,
}

pub(crate) fn comparison(module: &Module, comp: CompId, ty: ElementType) -> Option<Comparison> {
    let (root, params) = root_params(module, comp)?;
    // TOTALORDER orders NaNs and signed zeros, and u64 values are stored as their bits: both
    // are left to the evaluator.
    let plain = root.attr_word("type").and_then(ComparisonType::parse) != Some(ComparisonType::TotalOrder);
    if root.opcode != Opcode::Compare || !plain || ty == ElementType::U64 || ty == ElementType::Pred {
        return None;
    }
    let direction = root.attr_word("direction").and_then(ComparisonDirection::parse)?;
    let swapped = match params.as_slice() {
        [0, 1] => false,
        [1, 0] => true,
        _ => return None,
    };
    Some(Comparison { direction, swapped })
}

impl Comparison {
    /// The comparison of elements `i` and `j` of `buf` (the first and second argument).
    pub(crate) fn test(&self, buf: &Buf, i: usize, j: usize) -> Option<bool> {
        let (i, j) = if self.swapped { (j, i) } else { (i, j) };
        let ord = match buf {
            Buf::Float(v) => v[i].partial_cmp(&v[j]),
            Buf::Int(v) => Some(v[i].cmp(&v[j])),
            _ => return None,
        };
        use std::cmp::Ordering as O;
        use ComparisonDirection as D;
        Some(match (self.direction, ord) {
            (D::Ne, None) => true,
            (_, None) => false,
            (D::Eq, Some(o)) => o == O::Equal,
            (D::Ne, Some(o)) => o != O::Equal,
            (D::Lt, Some(o)) => o == O::Less,
            (D::Le, Some(o)) => o != O::Greater,
            (D::Gt, Some(o)) => o == O::Greater,
            (D::Ge, Some(o)) => o != O::Less,
        })
    }
}

/// Element `i` of `a` as a scalar value.
pub(crate) fn scalar(a: &Arr, i: usize) -> Value {
    Value::Arr(Arr { ty: a.ty, dims: vec![], buf: map_buf!(&a.buf, v => vec![v[i]]) })
}

/// Writes the scalar `v` into element `i` of `dst`.
pub(crate) fn store(inst: &Instruction, dst: &mut Buf, i: usize, v: &Value) -> Result<(), EvalError> {
    match (dst, v) {
        (Buf::Pred(d), Value::Arr(Arr { buf: Buf::Pred(s), .. })) if s.len() == 1 => d[i] = s[0],
        (Buf::Int(d), Value::Arr(Arr { buf: Buf::Int(s), .. })) if s.len() == 1 => d[i] = s[0],
        (Buf::Float(d), Value::Arr(Arr { buf: Buf::Float(s), .. })) if s.len() == 1 => d[i] = s[0],
        (Buf::Complex(d), Value::Arr(Arr { buf: Buf::Complex(s), .. })) if s.len() == 1 => d[i] = s[0],
        _ => return Err(EvalError::invalid(inst, "a called computation returned a value of the wrong type")),
    }
    Ok(())
}

/// A buffer of `n` zeros for element type `ty`.
pub(crate) fn zeros(ty: ElementType, n: usize) -> Buf {
    if ty == ElementType::Pred {
        Buf::Pred(vec![false; n])
    } else if ty.is_complex() {
        Buf::Complex(vec![(0.0, 0.0); n])
    } else if ty.is_float() {
        Buf::Float(vec![0.0; n])
    } else {
        Buf::Int(vec![0; n])
    }
}

/// A buffer of `n` copies of the scalar `a`.
pub(crate) fn splat(a: &Arr, n: usize) -> Buf {
    map_buf!(&a.buf, v => vec![v[0]; n])
}

/// Calls `comp` on scalar arguments and returns its `k` scalar results.
pub(crate) fn call(
    ev: &Evaluator<'_>,
    inst: &Instruction,
    comp: CompId,
    args: Vec<Value>,
    k: usize,
) -> Result<Vec<Value>, EvalError> {
    match ev.run_comp(comp, args)? {
        Value::Tuple(vs) if vs.len() == k => Ok(vs),
        Value::Arr(a) if k == 1 => Ok(vec![Value::Arr(a)]),
        _ => Err(EvalError::invalid(inst, format!("the called computation does not return {k} scalars"))),
    }
}

/// The element types of an instruction's result: one per array of a tuple, or the array's.
pub(crate) fn result_types(inst: &Instruction) -> Result<Vec<ElementType>, EvalError> {
    let one = |s: &Shape| match s {
        Shape::Array(a) => {
            super::value::check_type(a.element_type, &inst.name)?;
            Ok(a.element_type)
        }
        _ => Err(EvalError::invalid(inst, "expected array results")),
    };
    match &inst.shape {
        Shape::Tuple(ts) => ts.iter().map(one).collect(),
        s => Ok(vec![one(s)?]),
    }
}

/// Wraps per-operand results as the instruction's value: an array, or a tuple of them.
pub(crate) fn wrap_results(inst: &Instruction, mut arrs: Vec<Arr>) -> Value {
    if arrs.len() == 1 && !matches!(inst.shape, Shape::Tuple(_)) {
        return Value::Arr(arrs.remove(0));
    }
    Value::Tuple(arrs.into_iter().map(Value::Arr).collect())
}
