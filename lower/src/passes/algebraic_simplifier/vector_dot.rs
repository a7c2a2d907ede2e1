//! A dot of two vectors (each operand only batch and contracting dimensions) as a reduce of
//! their product, XLA's dot strength reduction: `dot(a: s32[32], b: s32[32])` becomes
//! `reduce(multiply(a, b), 0, dimensions={0}, to_apply=add)`. A dot is a kernel of its own
//! whose operands are materialized; the multiply and the reduce fuse with what produces the
//! operands (a row sliced out of a matrix, a column), as XLA:CPU runs it.
//!
//! Only where the rewrite computes what the dot does: operands and result of one type, an
//! integer type (wrapping sums in any order) or f32/f64 (a sum in another order, as XLA's
//! rule makes, within a dot's rounding: `emit::reduce` sums in lanes of the result's type or
//! wider); batch dimensions leading and contracting dimensions trailing on both operands in
//! the same order, so the product needs no transpose.

use std::collections::HashMap;

use tessera_hlo::ir::{AttrList, AttrValue};
use tessera_hlo::{CompId, Computation, ElementType, InstId, Instruction, Literal, Module, Opcode, Shape};

use crate::passes::rewrite::{add_computation, add_constant, become_op};

/// The element type of dot `inst` when [`to_reduce`] rewrites it.
fn reducible(comp: &Computation, inst: &Instruction) -> Option<ElementType> {
    // An `algorithm` may ask for rounded operands or another accumulation: left to the dot.
    if inst.opcode != Opcode::Dot
        || inst.operands.len() != 2
        || inst.attr("sparsity").is_some()
        || inst.attr("algorithm").is_some()
    {
        return None;
    }
    let out = inst.shape.as_array()?;
    let (a, b) = (comp.inst(inst.operands[0]).shape.as_array()?, comp.inst(inst.operands[1]).shape.as_array()?);
    let et = out.element_type;
    let exact = et.is_integral() || matches!(et, ElementType::F32 | ElementType::F64);
    if !exact || a.element_type != et || b.element_type != et || a.dims != b.dims {
        return None;
    }
    let ints = |n: &str| inst.attr_ints(n).unwrap_or(&[]).to_vec();
    let rank = a.dims.len() as i64;
    let nb = ints("lhs_batch_dims").len() as i64;
    let (batch, contracting): (Vec<i64>, Vec<i64>) = ((0..nb).collect(), (nb..rank).collect());
    let aligned = ints("lhs_batch_dims") == batch
        && ints("rhs_batch_dims") == batch
        && ints("lhs_contracting_dims") == contracting
        && ints("rhs_contracting_dims") == contracting;
    (aligned && !contracting.is_empty() && out.dims == a.dims[..nb as usize]).then_some(et)
}

/// `add` reducers on the scalars of each type a reducible dot in `module` has: existing ones
/// (`reducers`, the binary op each two-parameter computation applies) or new ones.
pub(super) fn adders(module: &mut Module, reducers: &HashMap<CompId, Opcode>) -> HashMap<ElementType, CompId> {
    let mut needed: Vec<ElementType> = Vec::new();
    for c in module.comp_ids() {
        let comp = module.comp(c);
        for inst in &comp.instructions {
            if let Some(et) = reducible(comp, inst).filter(|et| !needed.contains(et)) {
                needed.push(et);
            }
        }
    }
    let mut adders = HashMap::new();
    for et in needed {
        let existing = reducers
            .iter()
            .filter(|&(c, &op)| op == Opcode::Add && module.comp(*c).root_inst().shape == Shape::scalar(et))
            .map(|(&c, _)| c)
            .min();
        let adder = existing.unwrap_or_else(|| add_computation(module, &format!("add_{}", et.name()), et));
        adders.insert(et, adder);
    }
    adders
}

/// Rewrites dot `id` of two vectors as a reduce of their product (see the module doc).
pub(super) fn to_reduce(
    comp: &mut Computation,
    id: InstId,
    adders: &HashMap<ElementType, CompId>,
) -> Option<&'static str> {
    let inst = comp.inst(id);
    let et = reducible(comp, inst)?;
    let adder = *adders.get(&et)?;
    let (a, b) = (inst.operands[0], inst.operands[1]);
    // The product is laid out as `a` is (and has its type).
    let shape = comp.inst(a).shape.clone();
    let rank = shape.as_array()?.dims.len() as i64;
    let nb = inst.attr_ints("lhs_batch_dims").unwrap_or(&[]).len() as i64;
    let name = comp.unique_name(&format!("{}.product", inst.name));
    let product = comp.add(Instruction::new(name, Opcode::Multiply, shape, vec![a, b]));
    let zero = add_constant(comp, "zero", Literal::zeros(Shape::scalar(et)).ok()?);
    become_op(comp, id, Opcode::Reduce, vec![product, zero]);
    let reduce = comp.inst_mut(id);
    reduce.set_attr("dimensions", AttrValue::Ints((nb..rank).collect()));
    reduce.set_attr("to_apply", AttrValue::Computation(adder));
    Some("a dot of vectors as a reduce of their product")
}
