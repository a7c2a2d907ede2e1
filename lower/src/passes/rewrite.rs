//! In-place rewrites of instructions that passes share: forwarding an instruction's uses to
//! another (then dropping it), and turning an instruction into another op or a constant while
//! it keeps its name and control edges.

use tessera_hlo::ir::{AttrValue, Payload};
use tessera_hlo::{Computation, InstId, Instruction, Literal, Module, Opcode};

use crate::LowerError;

/// Runs `rewrite` on every instruction of every computation, operands first; it returns
/// whether it changed the instruction and lists instructions whose uses it forwarded, which
/// are then removed. Whether anything changed.
pub(crate) fn rewrite_each(
    module: &mut Module,
    mut rewrite: impl FnMut(&mut Computation, InstId, &mut Vec<InstId>) -> Result<bool, LowerError>,
) -> Result<bool, LowerError> {
    let mut changed = false;
    let comps: Vec<_> = module.comp_ids().collect();
    for c in comps {
        let comp = module.comp_mut(c);
        let mut touched = false;
        let mut forwarded = Vec::new();
        for id in comp.post_order() {
            touched |= rewrite(comp, id, &mut forwarded)?;
        }
        if touched {
            drop_forwarded(comp, &forwarded);
            comp.order_operands_first();
            changed = true;
        }
    }
    Ok(changed)
}

/// Moves every use of `id` to `to`. The instruction itself is removed afterwards rather than
/// left to DCE, which keeps collectives and async ops even when unused.
pub(crate) fn forward(comp: &mut Computation, id: InstId, to: InstId, forwarded: &mut Vec<InstId>) {
    comp.replace_all_uses(id, to);
    forwarded.push(id);
}

pub(crate) fn drop_forwarded(comp: &mut Computation, forwarded: &[InstId]) {
    if forwarded.is_empty() {
        return;
    }
    let mut keep = vec![true; comp.instructions.len()];
    for id in forwarded {
        keep[id.index()] = false;
    }
    comp.retain_instructions(&keep);
}

/// Turns instruction `id` into `op(operands)`, keeping its name, shape and control edges.
pub(crate) fn become_op(comp: &mut Computation, id: InstId, op: Opcode, operands: Vec<InstId>) {
    let inst = comp.inst_mut(id);
    inst.opcode = op;
    inst.operands = operands;
    inst.attrs.clear();
    inst.payload = Payload::None;
}

/// Turns instruction `id` into `broadcast(operand), dimensions=dims`, keeping its shape.
pub(crate) fn become_broadcast(comp: &mut Computation, id: InstId, operand: InstId, dims: Vec<i64>) {
    become_op(comp, id, Opcode::Broadcast, vec![operand]);
    comp.inst_mut(id).set_attr("dimensions", AttrValue::Ints(dims));
}

/// Adds `name = constant(lit)` to `comp` (a unique name built from `name`).
pub(crate) fn add_constant(comp: &mut Computation, name: &str, lit: Literal) -> InstId {
    let mut inst = Instruction::new(comp.unique_name(name), Opcode::Constant, lit.shape().clone(), vec![]);
    inst.payload = Payload::Constant(lit);
    comp.add(inst)
}

pub(crate) fn become_constant(comp: &mut Computation, id: InstId, lit: Literal) {
    become_op(comp, id, Opcode::Constant, vec![]);
    let inst = comp.inst_mut(id);
    inst.shape = lit.shape().clone();
    inst.payload = Payload::Constant(lit);
}
