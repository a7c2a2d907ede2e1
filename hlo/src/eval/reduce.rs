//! reduce: any dimensions, any number of operands. Reducers that are a single add, multiply,
//! maximum, minimum, and or or of the two parameters run as a typed loop; anything else calls
//! the computation once per element.

use super::data_movement::{gather, row_major_strides};
use super::value::{round_float, wrap_int};
use super::{Arr, Buf, EvalError, Evaluator, Value};
use crate::ir::{AttrList, Instruction, Module, Opcode, Payload};
use crate::shape::Shape;

pub(crate) fn reduce(ev: &Evaluator<'_>, inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
    let k = ops.len() / 2;
    if k == 0 || ops.len() != 2 * k {
        return Err(EvalError::invalid(inst, "reduce needs operands and as many initial values"));
    }
    let mut inputs = Vec::with_capacity(k);
    let mut inits = Vec::with_capacity(k);
    for (i, v) in ops.iter().enumerate() {
        let Value::Arr(a) = v else {
            return Err(EvalError::invalid(inst, "reduce operand is a tuple"));
        };
        if i < k {
            inputs.push(a);
        } else {
            if a.len() != 1 {
                return Err(EvalError::invalid(inst, "reduce initial value is not a scalar"));
            }
            inits.push(a);
        }
    }
    let in_dims = inputs[0].dims.clone();
    if inputs.iter().any(|a| a.dims != in_dims) {
        return Err(EvalError::invalid(inst, "reduce operands differ in shape"));
    }
    let rdims = inst.attr_ints("dimensions").ok_or_else(|| EvalError::invalid(inst, "missing dimensions"))?;
    let mut reduced = vec![false; in_dims.len()];
    for &d in rdims {
        match usize::try_from(d).ok().and_then(|d| reduced.get_mut(d)) {
            Some(r) => *r = true,
            None => return Err(EvalError::invalid(inst, format!("dimension {d} out of range"))),
        }
    }
    let out_dims: Vec<i64> = in_dims.iter().zip(&reduced).filter(|(_, &r)| !r).map(|(&d, _)| d).collect();
    let out_n: i64 = out_dims.iter().product();
    // Reorder the input so kept dimensions come first and reduced ones last: each output
    // element then owns one contiguous run of `run` inputs, in row-major order of the
    // reduced dimensions.
    let src_strides = row_major_strides(&in_dims);
    let order: Vec<usize> =
        (0..in_dims.len()).filter(|&d| !reduced[d]).chain(rdims.iter().map(|&d| d as usize)).collect();
    let mut sorted_rdims: Vec<usize> = rdims.iter().map(|&d| d as usize).collect();
    sorted_rdims.sort_unstable();
    sorted_rdims.dedup();
    let order: Vec<usize> = order[..out_dims.len()].iter().copied().chain(sorted_rdims).collect();
    let perm_dims: Vec<i64> = order.iter().map(|&d| in_dims[d]).collect();
    let perm_strides: Vec<i64> = order.iter().map(|&d| src_strides[d]).collect();
    let run: i64 = order[out_dims.len()..].iter().map(|&d| in_dims[d]).product();
    let identity = order.iter().enumerate().all(|(i, &d)| i == d);
    let bufs: Vec<Buf> = inputs
        .iter()
        .map(|a| {
            if identity {
                a.buf.clone()
            } else {
                super::value::map_buf!(&a.buf, v => gather(v, &perm_dims, &perm_strides, 0))
            }
        })
        .collect();
    let comp = inst.called("to_apply").ok_or_else(|| EvalError::invalid(inst, "reduce without to_apply"))?;
    let result_types: Vec<_> = inputs.iter().map(|a| a.ty).collect();
    if k == 1 {
        if let Some(op) = simple_reducer(ev.module, comp) {
            let ty = inits[0].ty;
            let buf = fast(op, &bufs[0], &inits[0].buf, out_n as usize, run as usize, ty);
            if let Some(buf) = buf {
                return Ok(Value::Arr(Arr { ty, dims: out_dims, buf }));
            }
        }
    }
    // General path: fold each run through the computation on scalars.
    let mut outs: Vec<Vec<Value>> = vec![Vec::with_capacity(out_n as usize); k];
    for o in 0..out_n as usize {
        let mut acc: Vec<Value> = inits.iter().map(|a| Value::Arr((*a).clone())).collect();
        for j in 0..run as usize {
            let i = o * run as usize + j;
            let mut args = acc.clone();
            for (b, a) in bufs.iter().zip(&inputs) {
                args.push(Value::Arr(Arr { ty: a.ty, dims: vec![], buf: element(b, i) }));
            }
            let r = ev.run_comp(comp, args)?;
            acc = match r {
                Value::Tuple(vs) if vs.len() == k => vs,
                Value::Arr(a) if k == 1 => vec![Value::Arr(a)],
                _ => return Err(EvalError::invalid(inst, "reducer result does not match the operands")),
            };
        }
        for (slot, v) in outs.iter_mut().zip(acc) {
            slot.push(v);
        }
    }
    let mut results = Vec::with_capacity(k);
    for (vals, ty) in outs.into_iter().zip(result_types) {
        let ty = match vals.first() {
            Some(Value::Arr(a)) => a.ty,
            _ => ty,
        };
        let mut buf = super::value::empty_buf(ty, vals.len());
        for v in vals {
            let Value::Arr(a) = v else {
                return Err(EvalError::invalid(inst, "reducer returned a tuple element"));
            };
            if !buf.extend_from(&a.buf) {
                return Err(EvalError::invalid(inst, "reducer changed the element type"));
            }
        }
        results.push(Value::Arr(Arr { ty, dims: out_dims.clone(), buf }));
    }
    if results.len() == 1 && !matches!(inst.shape, Shape::Tuple(_)) {
        return Ok(results.remove(0));
    }
    Ok(Value::Tuple(results))
}

fn element(b: &Buf, i: usize) -> Buf {
    b.element(i)
}

/// The opcode of a reducer whose root is that binary op applied to its two parameters.
pub(crate) fn simple_reducer(module: &Module, comp: crate::ir::CompId) -> Option<Opcode> {
    let c = module.get(comp)?;
    let root = c.root_inst();
    if !matches!(
        root.opcode,
        Opcode::Add | Opcode::Multiply | Opcode::Maximum | Opcode::Minimum | Opcode::And | Opcode::Or
    ) || root.operands.len() != 2
        || c.instructions.len() != 3
    {
        return None;
    }
    let mut params: Vec<i64> = root
        .operands
        .iter()
        .filter_map(|&o| match c.get(o)?.payload {
            Payload::Parameter(n) => Some(n),
            _ => None,
        })
        .collect();
    params.sort_unstable();
    (params == [0, 1]).then_some(root.opcode)
}

/// Folds runs left to right; f32 and narrower sums are accumulated in f64 and rounded once,
/// which is at least as accurate as XLA's own order.
fn fast(
    op: Opcode,
    input: &Buf,
    init: &Buf,
    out_n: usize,
    run: usize,
    ty: crate::element_type::ElementType,
) -> Option<Buf> {
    Some(match (input, init) {
        (Buf::Float(v), Buf::Float(i)) => {
            let f: fn(f64, f64) -> f64 = match op {
                Opcode::Add => |a, b| a + b,
                Opcode::Multiply => |a, b| a * b,
                Opcode::Maximum => super::elementwise::float_maximum,
                Opcode::Minimum => super::elementwise::float_minimum,
                _ => return None,
            };
            let exact_order = op == Opcode::Multiply;
            Buf::Float(
                (0..out_n)
                    .map(|o| {
                        let r = &v[o * run..(o + 1) * run];
                        let mut acc = i[0];
                        for &x in r {
                            acc = f(acc, x);
                            if exact_order {
                                acc = round_float(ty, acc);
                            }
                        }
                        round_float(ty, acc)
                    })
                    .collect(),
            )
        }
        (Buf::Int(v), Buf::Int(i)) => {
            let unsigned64 = ty == crate::element_type::ElementType::U64;
            let f = |a: i64, b: i64| -> i64 {
                match op {
                    Opcode::Add => a.wrapping_add(b),
                    Opcode::Multiply => a.wrapping_mul(b),
                    Opcode::Maximum if unsigned64 => (a as u64).max(b as u64) as i64,
                    Opcode::Minimum if unsigned64 => (a as u64).min(b as u64) as i64,
                    Opcode::Maximum => a.max(b),
                    Opcode::Minimum => a.min(b),
                    Opcode::And => a & b,
                    _ => a | b,
                }
            };
            Buf::Int(
                (0..out_n)
                    .map(|o| wrap_int(ty, v[o * run..(o + 1) * run].iter().fold(i[0], |a, &x| f(a, x))))
                    .collect(),
            )
        }
        (Buf::Pred(v), Buf::Pred(i)) => {
            let f: fn(bool, bool) -> bool = match op {
                Opcode::And | Opcode::Minimum | Opcode::Multiply => |a, b| a & b,
                _ => |a, b| a | b,
            };
            Buf::Pred((0..out_n).map(|o| v[o * run..(o + 1) * run].iter().fold(i[0], |a, &x| f(a, x))).collect())
        }
        _ => return None,
    })
}
