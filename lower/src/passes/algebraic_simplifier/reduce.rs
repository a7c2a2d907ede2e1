//! A reduce of a broadcast over only the dimensions the broadcast added: every reduced
//! element is the same operand element, so the reduction needs no loop.
//! - max, min, and, or with their identity as the initial value: the operand element itself
//!   (exact: these ops are idempotent);
//! - add with zero as the initial value: the operand element times the number of reduced
//!   elements, for integers (exact in wrapping arithmetic) and, as XLA's rule has it, for a
//!   broadcast float scalar (one rounding instead of a sum's).
//!
//! The result is a broadcast of the (scaled) operand onto the reduce's shape, which the
//! identity rules remove when it adds no dimension.
//!
//! A reduce that keeps as many elements as its operand has (it reduces only dimensions of
//! size 1: a batch norm's statistics of a batch of one, a gradient summed over a broadcast's
//! unit dimensions) is a reshape of its operand, as XLA's rule has it: the initial value is
//! taken to be the reducer's identity, so only the sign of a zero sum can differ.
//!
//! A reduce of a transpose reduces the transpose's operand along the dimensions the
//! permutation maps the reduced ones to, as XLA's rule does: the reduction reads the operand
//! in its own order (a sum over the rows of `transpose(x)` is a sum along `x`'s rows, one
//! kernel, not a transposed copy of `x` and a reduction of it). Where the permutation also
//! reordered the kept dimensions, the new reduce's result is transposed back, as XLA's rule
//! does when every user of the transpose is a reduce (the transpose is then gone, and the
//! added one moves fewer elements). Only the order in which the reducer combines elements
//! changes, which HLO leaves open.

use std::collections::HashMap;

use tessera_hlo::ir::{AttrList, AttrValue};
use tessera_hlo::{CompId, Computation, ElementType, InstId, Instruction, Layout, Literal, Module, Opcode, Shape};

use super::splat;
use crate::passes::rewrite::{add_constant, become_broadcast, become_op};

/// The binary op a reduction computation applies, when its root is that op of its two scalar
/// parameters (in either order).
pub(super) fn reducer_ops(module: &Module) -> HashMap<CompId, Opcode> {
    let mut ops = HashMap::new();
    for c in module.comp_ids() {
        let comp = module.comp(c);
        let root = comp.root_inst();
        let params = comp.parameters();
        let &[a, b] = root.operands.as_slice() else { continue };
        if params.len() == 2 && a != b && params.contains(&a) && params.contains(&b) {
            ops.insert(c, root.opcode);
        }
    }
    ops
}

/// The rewrite of reduce `id` when its operand is a broadcast it reduces only along added
/// dimensions; the rule's name.
pub(super) fn reduce_of_broadcast(
    comp: &mut Computation,
    id: InstId,
    reducers: &HashMap<CompId, Opcode>,
) -> Option<&'static str> {
    let inst = comp.inst(id);
    let &[operand, init] = inst.operands.as_slice() else { return None };
    let op = *reducers.get(&inst.called("to_apply")?)?;
    let reduced = inst.attr_ints("dimensions")?.to_vec();
    let b = comp.inst(operand);
    if b.opcode != Opcode::Broadcast {
        return None;
    }
    let x = b.operands[0];
    let kept_by_broadcast = b.attr_ints("dimensions")?.to_vec();
    if reduced.iter().any(|d| kept_by_broadcast.contains(d)) {
        return None;
    }
    let et = inst.shape.element_type();
    let dims = b.shape.dims();
    if reduced.iter().any(|&d| usize::try_from(d).map_or(true, |d| d >= dims.len())) {
        return None;
    }
    // Reducing nothing (a zero-sized dimension) gives the initial value, not the operand.
    let count: i64 = reduced.iter().map(|&d| dims[d as usize]).product();
    if count <= 0 {
        return None;
    }
    let init_value = splat(comp, init)?;
    let x_is_scalar = comp.inst(x).shape.rank() == 0;
    let rule = match op {
        Opcode::Maximum | Opcode::Minimum | Opcode::And | Opcode::Or
            if identity_of(op, et).is_some_and(|v| v == init_value) =>
        {
            "reduce of a broadcast by an idempotent op: the broadcast operand"
        }
        Opcode::Add if init_value == 0.0 && (et.is_integral() || et.is_float() && x_is_scalar) => {
            "reduce of a broadcast by add: the broadcast operand times the element count"
        }
        _ => return None,
    };
    // Where x's dimensions land once the reduced ones are gone.
    let new_dims: Vec<i64> =
        kept_by_broadcast.iter().map(|&d| d - reduced.iter().filter(|&&r| r < d).count() as i64).collect();
    let name = inst.name.clone();
    let count_literal = if op == Opcode::Add { Some(scalar_of(et, count)?) } else { None };
    let value = if let Some(count_literal) = count_literal {
        let x_shape = comp.inst(x).shape.clone();
        let n = add_constant(comp, &format!("{name}.count"), count_literal);
        let n = if x_is_scalar {
            n
        } else {
            comp.add(
                Instruction::new(
                    comp.unique_name(&format!("{name}.counts")),
                    Opcode::Broadcast,
                    x_shape.clone(),
                    vec![n],
                )
                .with_attr("dimensions", AttrValue::Ints(vec![])),
            )
        };
        comp.add(Instruction::new(comp.unique_name(&format!("{name}.scaled")), Opcode::Multiply, x_shape, vec![x, n]))
    } else {
        x
    };
    become_broadcast(comp, id, value, new_dims);
    Some(rule)
}

/// The rewrite of single-operand reduce `id` into a reshape of its operand when it keeps
/// every element (module doc); the rule's name.
pub(super) fn reduce_to_reshape(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let inst = comp.inst(id);
    let &[operand, _init] = inst.operands.as_slice() else { return None };
    let (out, arg) = (inst.shape.as_array()?, comp.inst(operand).shape.as_array()?);
    let kept = out.is_static() && arg.is_static() && out.element_count()? == arg.element_count()?;
    if !kept || out.element_type != arg.element_type {
        return None;
    }
    become_op(comp, id, Opcode::Reshape, vec![operand]);
    Some("reduce keeping every element: a reshape of its operand")
}

/// The rewrite of single-operand reduce `id` of a transpose into a reduce of the transpose's
/// operand (module doc); the rule's name.
pub(super) fn reduce_of_transpose(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let inst = comp.inst(id);
    let &[operand, init] = inst.operands.as_slice() else { return None };
    let t = comp.inst(operand);
    if t.opcode != Opcode::Transpose {
        return None;
    }
    let x = t.operands[0];
    let perm = t.attr_ints("dimensions")?.to_vec();
    let reduced = inst.attr_ints("dimensions")?.to_vec();
    let rank = perm.len();
    let perm: Vec<usize> =
        perm.iter().map(|&p| usize::try_from(p).ok().filter(|&p| p < rank)).collect::<Option<_>>()?;
    let reduced: Vec<usize> =
        reduced.iter().map(|&d| usize::try_from(d).ok().filter(|&d| d < rank)).collect::<Option<_>>()?;
    let mut new_reduced: Vec<i64> = reduced.iter().map(|&d| perm[d] as i64).collect();
    new_reduced.sort_unstable();
    // The operand dimension each result dimension comes from, in the result's order; the new
    // reduce keeps them in the operand's order.
    let kept: Vec<usize> = (0..rank).filter(|d| !reduced.contains(d)).map(|d| perm[d]).collect();
    let mut sorted = kept.clone();
    sorted.sort_unstable();
    let back: Vec<i64> = kept.iter().map(|k| sorted.iter().position(|s| s == k).unwrap_or(0) as i64).collect();
    let reordered = back.iter().enumerate().any(|(i, &b)| b != i as i64);
    if reordered {
        let mut users = comp.instructions.iter().filter(|i| i.operands.contains(&operand));
        if !users.all(|u| u.opcode == Opcode::Reduce) {
            return None;
        }
        let out = inst.shape.as_array()?;
        let x_dims = comp.inst(x).shape.dims().to_vec();
        let dims: Vec<i64> = sorted.iter().map(|&d| x_dims[d]).collect();
        let shape = Shape::array_with_layout(out.element_type, &dims, Layout::row_major(dims.len()));
        let mut r = inst.clone();
        r.name = comp.unique_name(&format!("{}.untransposed", inst.name));
        r.shape = shape;
        r.operands = vec![x, init];
        r.control_predecessors.clear();
        r.set_attr("dimensions", AttrValue::Ints(new_reduced));
        let r = comp.add(r);
        become_op(comp, id, Opcode::Transpose, vec![r]);
        comp.inst_mut(id).set_attr("dimensions", AttrValue::Ints(back));
        Some("reduce of a transpose: a transpose of the reduce of its operand")
    } else {
        let inst = comp.inst_mut(id);
        inst.operands[0] = x;
        inst.set_attr("dimensions", AttrValue::Ints(new_reduced));
        Some("reduce of a transpose: the reduce of its operand")
    }
}

/// The value `op` leaves unchanged, as [`splat`] reads constants: infinities for float max
/// and min, the type's bounds for integers, all ones for and, zero for or.
fn identity_of(op: Opcode, et: ElementType) -> Option<f64> {
    let (lo, hi) = if et == ElementType::Pred {
        (0.0, 1.0)
    } else if et.is_float() {
        (f64::NEG_INFINITY, f64::INFINITY)
    } else if et.is_integral() && et.bit_width() <= 32 {
        let w = et.bit_width() as i32;
        if et.is_signed_integral() {
            (-(2f64.powi(w - 1)), 2f64.powi(w - 1) - 1.0)
        } else {
            (0.0, 2f64.powi(w) - 1.0)
        }
    } else {
        return None;
    };
    match op {
        Opcode::Maximum => Some(lo),
        Opcode::Minimum => Some(hi),
        // All bits set: true, or -1 / the maximum as a signed / unsigned integer.
        Opcode::And if et == ElementType::Pred || et.is_unsigned_integral() => Some(hi),
        Opcode::And if et.is_signed_integral() => Some(-1.0),
        Opcode::Or if !et.is_float() => Some(0.0),
        _ => None,
    }
}

/// `n` as a scalar of type `et` (integers wrap, as repeated addition does).
fn scalar_of(et: ElementType, n: i64) -> Option<Literal> {
    use ElementType as E;
    let bits: u128 = match et {
        E::F32 => u128::from((n as f32).to_bits()),
        E::F64 => u128::from((n as f64).to_bits()),
        E::F16 => u128::from(half::f16::from_f64(n as f64).to_bits()),
        E::BF16 => u128::from(half::bf16::from_f64(n as f64).to_bits()),
        _ if et.is_integral() && et != E::Pred => {
            let w = et.bit_width();
            (n as i128 as u128) & if w >= 128 { u128::MAX } else { (1u128 << w) - 1 }
        }
        _ => return None,
    };
    let lit = Literal::from_bits_vec(Shape::scalar(et), vec![bits]).ok()?;
    // A float count must be exact (bf16 has 8 significant bits): a rounded count would scale
    // by another number than the reduction adds up.
    if et.is_float() && tessera_hlo::corpus::tolerance::values(&lit).ok()?.first() != Some(&(n as f64)) {
        return None;
    }
    Some(lit)
}
