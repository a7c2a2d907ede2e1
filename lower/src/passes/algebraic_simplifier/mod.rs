//! The core of XLA's `AlgebraicSimplifier`: rewrites that never change a result beyond what
//! XLA's own rule would, one instruction at a time, operands first. Each rule is a small
//! function; `simplify` tries them in turn.
//!
//! Identities (the instruction becomes its operand when the shapes agree, layout included):
//! `x + 0`, `0 + x`, `x - 0`, `x * 1`, `1 * x`, `x / 1` (XLA applies these to floats too: only
//! the sign of a zero sum can differ), `x * 0` for integers, `max(x, x)`, `min(x, x)`,
//! `and(x, x)`, `or(x, x)`, `negate(negate(x))`,
//! `not(not(x))`, a convert to its operand's type, a copy, reshape, bitcast or transpose that
//! changes nothing, a broadcast onto the same dimensions, a full slice, a zero pad, a
//! concatenate or reverse of nothing, a select on a constant predicate.
//!
//! An integer `x / 2^k` becomes shifts, and an unsigned `x % 2^k` a mask (exact, as in XLA).
//! `x / c` becomes `x * (1 / c)` for a constant power of two whose reciprocal the type holds:
//! the same bits (both round one exact quotient), a multiply instead of a divide. Divisors
//! constant from the start are inverted before this pass, as XLA inverts them
//! (`divide_by_constant`, which changes values and so runs for the interpreter too); this
//! rule serves those that simplification reveals, where only the exact case keeps the
//! interpreter's bits.
//!
//! Chains merged: reshape of reshape, transpose of transpose, broadcast of broadcast, slice of
//! slice, and convert of an exact widening convert (`convert(convert(x: bf16 -> f32) -> f64)`
//! is `convert(x -> f64)`; a narrowing inner convert rounds, so it stays, and an integer
//! through a float to an integer stays, since float-to-integer saturates where integer
//! conversion wraps). A dot of a
//! transpose reads the transpose's operand with its dimension numbers remapped when that keeps
//! the dot's result order; a transpose that swaps a dot's free dimensions is the dot with its
//! operands swapped.
//!
//! Beyond these, each in its own file: reduces of broadcasts, reduces of transposes and
//! reduces that keep every element (`reduce`), slice, pad and
//! concatenate folding (`data_movement`), and compare and select canonical forms
//! (`compare_select`). A select of x and x is x.

use std::collections::HashMap;

use tessera_hlo::corpus::tolerance::values;
use tessera_hlo::ir::{AttrList, AttrValue, SliceRange};
use tessera_hlo::{CompId, Computation, ElementType, InstId, Literal, Module, Opcode, Shape};

use super::rewrite::{add_splat, become_op, forward, rewrite_each, Forwards};
use crate::pass::Pass;
use crate::LowerError;

mod compare_select;
mod data_movement;
mod reduce;
mod vector_dot;

#[derive(Default)]
pub struct AlgebraicSimplifier {
    /// What the last run rewrote, one line per rule application.
    rewrites: Vec<String>,
}

impl Pass for AlgebraicSimplifier {
    fn name(&self) -> &'static str {
        "algebraic_simplifier"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.rewrites.clear();
        let log = &mut self.rewrites;
        let reducers = reduce::reducer_ops(module);
        let adders = vector_dot::adders(module, &reducers);
        rewrite_each(module, |comp, id, forwarded| {
            let Some(rule) = simplify(comp, id, forwarded, &reducers, &adders) else { return Ok(false) };
            log.push(format!("{}: {rule}", comp.inst(id).name));
            Ok(true)
        })
    }

    fn report(&self) -> Vec<String> {
        self.rewrites.clone()
    }
}

/// Applies the first rule that matches instruction `id`; the rule's name when one did.
fn simplify(
    comp: &mut Computation,
    id: InstId,
    forwarded: &mut Forwards,
    reducers: &HashMap<CompId, Opcode>,
    adders: &HashMap<ElementType, CompId>,
) -> Option<&'static str> {
    let inst = comp.inst(id);
    if inst.shape.as_array().is_none() || !inst.control_predecessors.is_empty() {
        return None;
    }
    if let Some((to, rule)) = identity(comp, id).or_else(|| compare_select::identity(comp, id)) {
        if same_shape(&comp.inst(to).shape, &comp.inst(id).shape) {
            forward(comp, id, to, forwarded);
            return Some(rule);
        }
    }
    merge_chain(comp, id)
        .or_else(|| divide_by_power_of_two(comp, id))
        .or_else(|| integer_divide_by_power_of_two(comp, id))
        .or_else(|| data_movement::fold(comp, id))
        .or_else(|| compare_select::canonical(comp, id))
        .or_else(|| match comp.inst(id).opcode {
            Opcode::Reduce => reduce::reduce_to_reshape(comp, id)
                .or_else(|| reduce::reduce_of_broadcast(comp, id, reducers))
                .or_else(|| reduce::reduce_of_transpose(comp, id)),
            Opcode::Dot => vector_dot::to_reduce(comp, id, adders),
            _ => None,
        })
}

/// Same dimensions, type and physical layout (a missing layout is the row-major default).
fn same_shape(a: &Shape, b: &Shape) -> bool {
    match (a, b) {
        (Shape::Array(x), Shape::Array(y)) => x.same_dims_and_type(y) && x.layout_or_default() == y.layout_or_default(),
        _ => false,
    }
}

/// The one value every element of `id` has (a constant with equal elements, or a broadcast
/// of a scalar constant), as f64, for real element types.
fn splat(comp: &Computation, id: InstId) -> Option<f64> {
    let inst = comp.inst(id);
    match inst.opcode {
        Opcode::Broadcast => {
            let x = *inst.operands.first()?;
            if comp.inst(x).shape.rank() != 0 {
                return None;
            }
            splat(comp, x)
        }
        Opcode::Constant => {
            let lit = inst.literal()?;
            let et = lit.element_type();
            if et.is_complex() || et == ElementType::Token || lit.element_count() == 0 {
                return None;
            }
            // Element by element, so a large constant (a weight) costs no copy and usually
            // only a few reads before two elements differ.
            let first = lit.get_bits(0)?;
            if (1..lit.element_count()).any(|i| lit.get_bits(i) != Some(first)) {
                return None;
            }
            let one = Literal::from_bits_vec(Shape::scalar(et), vec![first]).ok()?;
            values(&one).ok()?.first().copied()
        }
        _ => None,
    }
}

fn is_value(comp: &Computation, id: InstId, v: f64) -> bool {
    splat(comp, id) == Some(v)
}

/// The operand instruction `id` equals, if a rule says so, and the rule's name.
fn identity(comp: &Computation, id: InstId) -> Option<(InstId, &'static str)> {
    use Opcode as O;
    let inst = comp.inst(id);
    let ops = &inst.operands;
    let et = inst.shape.element_type();
    let int = et.is_integral();
    Some(match (inst.opcode, ops.as_slice()) {
        (O::Add, &[a, b]) if is_value(comp, b, 0.0) => (a, "x + 0 = x"),
        (O::Add, &[a, b]) if is_value(comp, a, 0.0) => (b, "0 + x = x"),
        (O::Subtract, &[a, b]) if is_value(comp, b, 0.0) => (a, "x - 0 = x"),
        (O::Multiply, &[a, b]) if is_value(comp, b, 1.0) => (a, "x * 1 = x"),
        (O::Multiply, &[a, b]) if is_value(comp, a, 1.0) => (b, "1 * x = x"),
        (O::Multiply, &[_, b]) if int && is_value(comp, b, 0.0) => (b, "integer x * 0 = 0"),
        (O::Multiply, &[a, _]) if int && is_value(comp, a, 0.0) => (a, "integer 0 * x = 0"),
        (O::Divide, &[a, b]) if is_value(comp, b, 1.0) => (a, "x / 1 = x"),
        (O::Maximum | O::Minimum | O::And | O::Or, &[a, b]) if a == b => (a, "an idempotent op of x and x is x"),
        (O::Negate, &[a]) if comp.inst(a).opcode == O::Negate => (comp.inst(a).operands[0], "-(-x) = x"),
        (O::Not, &[a]) if comp.inst(a).opcode == O::Not => (comp.inst(a).operands[0], "not(not(x)) = x"),
        (O::Convert | O::Copy | O::Reshape | O::Bitcast, &[a]) => (a, "a no-op conversion"),
        (O::Transpose, &[a]) if inst.attr_ints("dimensions")?.iter().enumerate().all(|(i, &d)| d == i as i64) => {
            (a, "identity transpose")
        }
        (O::Broadcast, &[a])
            if comp.inst(a).shape.rank() == inst.shape.rank()
                && inst.attr_ints("dimensions")?.iter().enumerate().all(|(i, &d)| d == i as i64) =>
        {
            (a, "broadcast onto the same dimensions")
        }
        (O::Slice, &[a]) => {
            let full = match inst.attr("slice")? {
                AttrValue::Slice(r) => {
                    r.iter().zip(comp.inst(a).shape.dims()).all(|(r, &n)| r.start == 0 && r.limit == n && r.stride == 1)
                }
                _ => false,
            };
            if !full {
                return None;
            }
            (a, "full slice")
        }
        (O::Pad, &[a, _]) => match inst.attr("padding")? {
            AttrValue::Padding(p) if p.iter().all(|d| d.low == 0 && d.high == 0 && d.interior == 0) => (a, "zero pad"),
            _ => return None,
        },
        (O::Concatenate, &[a]) => (a, "concatenate of one operand"),
        (O::Reverse, &[a]) if inst.attr_ints("dimensions").is_none_or(|d| d.is_empty()) => (a, "reverse of nothing"),
        (O::Select, &[_, a, b]) if a == b => (a, "a select of x and x is x"),
        (O::Select, &[p, a, b]) => match splat(comp, p)? {
            v if v != 0.0 => (a, "select on a true constant"),
            _ => (b, "select on a false constant"),
        },
        _ => return None,
    })
}

/// `x / c` as `x * (1 / c)` where `c` is a constant power of two whose reciprocal the type
/// holds exactly. Both compute the same exact quotient and round it once, so the bits are the
/// same for every `x`, and a multiply costs a fraction of a divide. XLA's rule inverts every
/// constant divisor, rounding the reciprocal: `divide_by_constant` does that for divisors
/// constant before the simplifiers run; one they reveal keeps only this exact case, since the
/// interpreter, which does not run them, still divides.
fn divide_by_power_of_two(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let inst = comp.inst(id);
    let (Opcode::Divide, &[x, c]) = (inst.opcode, inst.operands.as_slice()) else { return None };
    let et = inst.shape.element_type();
    let v = splat(comp, c)?;
    // A normal f64 with no fraction bits is a power of two; every narrower float's is normal
    // as an f64.
    if !v.is_normal() || v.to_bits() & ((1u64 << 52) - 1) != 0 {
        return None;
    }
    let reciprocal = exact_float(et, 1.0 / v)?;
    let (name, c_shape) = (inst.name.clone(), comp.inst(c).shape.clone());
    let r = add_splat(comp, &name, "reciprocal", reciprocal, c_shape);
    become_op(comp, id, Opcode::Multiply, vec![x, r]);
    Some("x / 2^k = x * 2^-k (the reciprocal exact)")
}

/// XLA's shifts for an integer divided by a constant power of two `2^k` (`k >= 1`): an unsigned
/// `x / 2^k` is `x >> k` and `x % 2^k` is `x & (2^k - 1)`; a signed `x / 2^k`, which truncates
/// toward zero, adds `2^k - 1` to a negative `x` first (`(x >> (n-1)) >>> (n-k)`: all ones
/// shifted down to `k` ones, zero for `x >= 0`) and shifts arithmetically. Exact for every
/// `x`, and elementwise ops fusion duplicates freely where a divide counts as expensive: a
/// binary search's midpoint `lo + (hi - lo) // 2` (jnp.searchsorted) had its own kernel.
fn integer_divide_by_power_of_two(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let inst = comp.inst(id);
    let (op @ (Opcode::Divide | Opcode::Remainder), &[x, c]) = (inst.opcode, inst.operands.as_slice()) else {
        return None;
    };
    let et = inst.shape.element_type();
    if !et.is_integral() || et == ElementType::Pred {
        return None;
    }
    let v = splat(comp, c)?;
    if !(2.0..=9.0e18).contains(&v) || v.fract() != 0.0 || !(v as u64).is_power_of_two() {
        return None;
    }
    let k = (v as u64).trailing_zeros();
    let bits = et.bit_width();
    let signed = et.is_signed_integral();
    if k >= bits || (signed && op == Opcode::Remainder) {
        return None;
    }
    let (name, shape, c_shape) = (inst.name.clone(), inst.shape.clone(), comp.inst(c).shape.clone());
    let int = |n: u64| Literal::from_bits_vec(Shape::scalar(et), vec![u128::from(n)]).ok();
    if op == Opcode::Remainder {
        let mask = add_splat(comp, &name, "mask", int((1u64 << k) - 1)?, c_shape);
        become_op(comp, id, Opcode::And, vec![x, mask]);
        return Some("unsigned x % 2^k = x & (2^k - 1)");
    }
    let shift = add_splat(comp, &name, "shift", int(u64::from(k))?, c_shape.clone());
    if !signed {
        become_op(comp, id, Opcode::ShiftRightLogical, vec![x, shift]);
        return Some("unsigned x / 2^k = x >> k");
    }
    let op_of = |comp: &mut Computation, what: &str, op: Opcode, operands: Vec<InstId>| {
        let i = tessera_hlo::Instruction::new(comp.unique_name(&format!("{name}.{what}")), op, shape.clone(), operands);
        comp.add(i)
    };
    let sign_shift = add_splat(comp, &name, "sign_shift", int(u64::from(bits - 1))?, c_shape.clone());
    let sign = op_of(comp, "sign", Opcode::ShiftRightArithmetic, vec![x, sign_shift]);
    let bias_shift = add_splat(comp, &name, "bias_shift", int(u64::from(bits - k))?, c_shape);
    let bias = op_of(comp, "bias", Opcode::ShiftRightLogical, vec![sign, bias_shift]);
    let biased = op_of(comp, "biased", Opcode::Add, vec![x, bias]);
    become_op(comp, id, Opcode::ShiftRightArithmetic, vec![biased, shift]);
    Some("signed x / 2^k = (x + (x < 0 ? 2^k - 1 : 0)) >> k")
}

/// `v` as a scalar float literal of type `et`, if `et` holds it exactly.
fn exact_float(et: ElementType, v: f64) -> Option<Literal> {
    let bits: u128 = match et {
        ElementType::F64 => u128::from(v.to_bits()),
        ElementType::F32 => u128::from((v as f32).to_bits()),
        ElementType::F16 => u128::from(half::f16::from_f64(v).to_bits()),
        ElementType::BF16 => u128::from(half::bf16::from_f64(v).to_bits()),
        _ => return None,
    };
    let lit = Literal::from_bits_vec(Shape::scalar(et), vec![bits]).ok()?;
    (values(&lit).ok()?.first() == Some(&v)).then_some(lit)
}

/// Merges `id` with its operand when both are of one kind, in place.
fn merge_chain(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    use Opcode as O;
    // Only these ops have a rule; nothing else (a large constant above all) is cloned.
    if !matches!(comp.inst(id).opcode, O::Reshape | O::Transpose | O::Broadcast | O::Slice | O::Convert | O::Dot) {
        return None;
    }
    let inst = comp.inst(id).clone();
    let &[x] = inst.operands.as_slice() else {
        return dot_of_transpose(comp, id).or_else(|| dot_of_int_converts(comp, id));
    };
    let inner = comp.inst(x).clone();
    if inst.opcode == O::Transpose && inner.opcode == O::Dot {
        return transpose_of_dot(comp, id, x);
    }
    if inner.opcode != inst.opcode || inner.operands.len() != 1 {
        return None;
    }
    let y = inner.operands[0];
    match inst.opcode {
        O::Reshape => {
            become_op(comp, id, O::Reshape, vec![y]);
            Some("reshape of a reshape")
        }
        O::Transpose => {
            let (outer, first) = (inst.attr_ints("dimensions")?, inner.attr_ints("dimensions")?);
            let perm: Vec<i64> = outer.iter().map(|&d| first.get(d as usize).copied()).collect::<Option<_>>()?;
            become_op(comp, id, O::Transpose, vec![y]);
            comp.inst_mut(id).set_attr("dimensions", AttrValue::Ints(perm));
            Some("transpose of a transpose")
        }
        O::Broadcast => {
            let (outer, first) = (inst.attr_ints("dimensions")?, inner.attr_ints("dimensions")?);
            let dims: Vec<i64> = first.iter().map(|&d| outer.get(d as usize).copied()).collect::<Option<_>>()?;
            become_op(comp, id, O::Broadcast, vec![y]);
            comp.inst_mut(id).set_attr("dimensions", AttrValue::Ints(dims));
            Some("broadcast of a broadcast")
        }
        O::Slice => {
            let (AttrValue::Slice(outer), AttrValue::Slice(first)) = (inst.attr("slice")?, inner.attr("slice")?) else {
                return None;
            };
            let ranges: Vec<SliceRange> = outer
                .iter()
                .zip(first)
                .map(|(o, f)| {
                    let n = if o.limit > o.start { (o.limit - o.start + o.stride - 1) / o.stride } else { 0 };
                    let start = f.start + o.start * f.stride;
                    let stride = f.stride * o.stride;
                    SliceRange { start, limit: if n == 0 { start } else { start + (n - 1) * stride + 1 }, stride }
                })
                .collect();
            become_op(comp, id, O::Slice, vec![y]);
            comp.inst_mut(id).set_attr("slice", AttrValue::Slice(ranges));
            Some("slice of a slice")
        }
        O::Convert
            if widens_exactly(comp.inst(y).shape.element_type(), inner.shape.element_type())
                // An integer through a float to an integer would saturate; straight it wraps.
                && !(comp.inst(y).shape.element_type().is_integral()
                    && inner.shape.element_type().is_float()
                    && inst.shape.element_type().is_integral()) =>
        {
            become_op(comp, id, O::Convert, vec![y]);
            Some("convert of an exact widening convert")
        }
        _ => None,
    }
}

/// Whether every value of type `from` is exactly a value of type `to`, so a convert to `to`
/// and on equals a convert straight on.
fn widens_exactly(from: ElementType, to: ElementType) -> bool {
    use ElementType as E;
    if from == to {
        return true;
    }
    let float_bits = |t: E| match t {
        E::F16 => Some((11, 5)),
        E::BF16 => Some((8, 8)),
        E::F32 => Some((24, 8)),
        E::F64 => Some((53, 11)),
        _ => None,
    };
    match (float_bits(from), float_bits(to)) {
        // Significand and exponent range both at least as wide.
        (Some((fm, fe)), Some((tm, te))) => tm >= fm && te >= fe,
        (None, Some((tm, _))) if from.is_integral() && from != E::U64 && from != E::S64 => {
            let bits = from.bit_width() - u32::from(from.is_signed_integral());
            bits <= tm
        }
        (None, None) if from.is_integral() && to.is_integral() => {
            let signed = (from.is_signed_integral(), to.is_signed_integral());
            match signed {
                (false, false) | (true, true) => to.bit_width() >= from.bit_width(),
                (false, true) => to.bit_width() > from.bit_width(),
                (true, false) => false,
            }
        }
        _ => false,
    }
}

/// `transpose(dot(a, b))` is `dot(b, a)` when the transpose keeps the batch dimensions in
/// front and swaps the two groups of free dimensions, each in its order (XLA's rule): the
/// product is computed in the transposed order directly instead of being written and then
/// read back across its rows. Only a dot the transpose alone uses, so no product is computed
/// twice.
fn transpose_of_dot(comp: &mut Computation, id: InstId, dot: InstId) -> Option<&'static str> {
    let d = comp.inst(dot).clone();
    if d.operands.len() != 2 || dot == comp.root || d.attr("sparsity").is_some() || !d.control_predecessors.is_empty() {
        return None;
    }
    let users = comp.instructions.iter().flat_map(|i| &i.operands).filter(|&&o| o == dot).count();
    if users != 1 {
        return None;
    }
    let ints = |n: &str| d.attr_ints(n).unwrap_or(&[]).to_vec();
    let rank = |o: InstId| comp.inst(o).shape.as_array().map(|a| a.rank());
    let (lr, rr) = (rank(d.operands[0])?, rank(d.operands[1])?);
    let nb = ints("lhs_batch_dims").len();
    let nl = lr.checked_sub(nb + ints("lhs_contracting_dims").len())?;
    let nr = rr.checked_sub(nb + ints("rhs_contracting_dims").len())?;
    let swapped: Vec<i64> = (0..nb).chain(nb + nl..nb + nl + nr).chain(nb..nb + nl).map(|x| x as i64).collect();
    if comp.inst(id).attr_ints("dimensions")? != swapped.as_slice() {
        return None;
    }
    let precision = match d.attr("operand_precision") {
        Some(AttrValue::Enums(p)) => Some(AttrValue::Enums(p.iter().rev().cloned().collect())),
        _ => None,
    };
    let mut swapped_dot = d.clone();
    // Values swap between the names, which stay where they are: the printer keeps XLA's order.
    for (l, r) in [("lhs_batch_dims", "rhs_batch_dims"), ("lhs_contracting_dims", "rhs_contracting_dims")] {
        if d.attr(l).is_some() || d.attr(r).is_some() {
            swapped_dot.set_attr(l, AttrValue::Ints(ints(r)));
            swapped_dot.set_attr(r, AttrValue::Ints(ints(l)));
        }
    }
    if let Some(p) = precision {
        swapped_dot.set_attr("operand_precision", p);
    }
    let attrs = swapped_dot.attrs;
    become_op(comp, id, Opcode::Dot, vec![d.operands[1], d.operands[0]]);
    comp.inst_mut(id).attrs = attrs;
    Some("transpose of a dot")
}

/// An integer dot of operands widened from narrower integers reads the narrow operands: HLO
/// converts a dot's operands to its result type, and a widening that keeps every value
/// (`u8 -> s32`, `s8 -> s16`) composed with that conversion is the conversion of the narrow
/// value, so every product and sum is the same (JAX widens a `u8 x s8` product to `s32` on
/// both sides). As XLA's simplifier drops such converts for backends that take mixed-type
/// dots; here the narrow operands reach the 8-bit GEMM (a batched `u8 x s8 -> s32` of 8 x
/// 128x256x128 ran as `s32` loops).
fn dot_of_int_converts(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let inst = comp.inst(id).clone();
    if inst.opcode != Opcode::Dot || inst.operands.len() != 2 || !inst.shape.element_type().is_integral() {
        return None;
    }
    let lossless = |from: ElementType, to: ElementType| {
        from.is_integral()
            && to.is_integral()
            && if from.is_signed_integral() == to.is_signed_integral() {
                to.bit_width() >= from.bit_width()
            } else {
                from.is_unsigned_integral() && to.bit_width() > from.bit_width()
            }
    };
    let mut changed = false;
    for side in 0..2 {
        let c = comp.inst(inst.operands[side]);
        if c.opcode != Opcode::Convert {
            continue;
        }
        let x = c.operands[0];
        if lossless(comp.inst(x).shape.element_type(), c.shape.element_type()) {
            comp.inst_mut(id).operands[side] = x;
            changed = true;
        }
    }
    changed.then_some("dot of widened integers")
}

/// `dot(transpose(a), b)` reads `a` directly, its dimension numbers mapped through the
/// permutation, when `a`'s free dimensions keep their order (the dot's result lists free
/// dimensions in operand order, so another order would permute the result). Likewise for the
/// right operand.
fn dot_of_transpose(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let inst = comp.inst(id).clone();
    if inst.opcode != Opcode::Dot || inst.operands.len() != 2 {
        return None;
    }
    for (side, batch, contracting) in
        [(0, "lhs_batch_dims", "lhs_contracting_dims"), (1, "rhs_batch_dims", "rhs_contracting_dims")]
    {
        let t = inst.operands[side];
        let tinst = comp.inst(t);
        if tinst.opcode != Opcode::Transpose {
            continue;
        }
        let perm = tinst.attr_ints("dimensions")?.to_vec();
        let a = tinst.operands[0];
        let b: Vec<i64> = inst.attr_ints(batch).unwrap_or(&[]).to_vec();
        let c: Vec<i64> = inst.attr_ints(contracting).unwrap_or(&[]).to_vec();
        let free: Vec<i64> = (0..perm.len() as i64).filter(|d| !b.contains(d) && !c.contains(d)).collect();
        let mapped_free: Vec<i64> = free.iter().map(|&d| perm[d as usize]).collect();
        if mapped_free.windows(2).any(|w| w[0] > w[1]) {
            continue;
        }
        let map = |dims: &[i64]| AttrValue::Ints(dims.iter().map(|&d| perm[d as usize]).collect());
        let (new_b, new_c) = (map(&b), map(&c));
        let i = comp.inst_mut(id);
        i.operands[side] = a;
        if !b.is_empty() {
            i.set_attr(batch, new_b);
        }
        if !c.is_empty() {
            i.set_attr(contracting, new_c);
        }
        return Some("dot of a transpose");
    }
    None
}
