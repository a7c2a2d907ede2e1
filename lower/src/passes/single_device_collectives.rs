//! Collectives on the one device an executable runs on (one replica, one partition), as
//! `hlo::eval` (eval/collectives.rs) defines them: `replica-id` and `partition-id` are 0, and
//! a reduction, gather, scatter, exchange or broadcast among one participant is that
//! participant's own data (a reduction of one value is the value). A collective-permute
//! delivers the operand only along a `0 -> 0` pair and zeros otherwise. Groups or pairs that
//! name any other device are a clear error, as they are in the interpreter.

use tessera_hlo::ir::{AttrList, AttrValue};
use tessera_hlo::{Computation, InstId, Instruction, Literal, Module, Opcode, Shape};

use super::rewrite::{become_constant, become_op, forward, rewrite_each, Forwards};
use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct SingleDeviceCollectives;

impl Pass for SingleDeviceCollectives {
    fn name(&self) -> &'static str {
        "single_device_collectives"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        rewrite_each(module, rewrite)
    }
}

/// Fails when the op's groups (or pairs) name a device other than 0. No attribute means every
/// replica, which is this one.
fn check_single_device(inst: &Instruction, attr: &str) -> Result<(), LowerError> {
    let ok = match inst.attr(attr) {
        None => true,
        Some(AttrValue::IntLists(gs)) => gs.iter().flatten().all(|&id| id == 0),
        Some(AttrValue::Ints(ids)) => ids.iter().all(|&id| id == 0),
        Some(AttrValue::Raw(r)) => r.chars().all(|c| matches!(c, '{' | '}' | ',' | ' ' | '0')),
        Some(_) => false,
    };
    if ok {
        Ok(())
    } else {
        Err(LowerError::unsupported(
            &inst.name,
            format!("{} across several devices (an executable runs on one device)", inst.opcode),
        ))
    }
}

fn rewrite(comp: &mut Computation, id: InstId, forwarded: &mut Forwards) -> Result<bool, LowerError> {
    use Opcode as O;
    let inst = comp.inst(id).clone();
    match inst.opcode {
        O::ReplicaId | O::PartitionId => become_constant(comp, id, Literal::scalar(0u32)),
        O::AllReduce
        | O::AllReduceStart
        | O::AllGather
        | O::AllGatherStart
        | O::AllToAll
        | O::ReduceScatter
        | O::CollectiveBroadcast => {
            check_single_device(&inst, "replica_groups")?;
            own_data(comp, id, &inst, forwarded)?;
        }
        O::AllReduceDone | O::AllGatherDone => {
            let x = first_operand(&inst)?;
            match (&comp.inst(x).shape.clone(), &inst.shape) {
                // A start that carried (operand, result): the result is the last element.
                (Shape::Tuple(parts), Shape::Array(_)) if !parts.is_empty() => {
                    become_op(comp, id, Opcode::GetTupleElement, vec![x]);
                    comp.inst_mut(id).set_attr("index", AttrValue::Int(parts.len() as i64 - 1));
                }
                _ => forward(comp, id, x, forwarded),
            }
        }
        O::CollectivePermute => {
            let pairs = match inst.attr("source_target_pairs") {
                Some(AttrValue::IntLists(p)) => p.clone(),
                None => vec![],
                Some(_) => return Err(LowerError::invalid(&inst.name, "unreadable source_target_pairs")),
            };
            if pairs.iter().any(|p| p.iter().any(|&d| d != 0)) {
                check_single_device(&inst, "source_target_pairs")?;
            }
            if inst.operands.len() != 1 || inst.shape.as_array().is_none() {
                return Err(LowerError::unsupported(&inst.name, "collective-permute of several or tuple operands"));
            }
            if pairs.iter().any(|p| p == &[0, 0]) {
                own_data(comp, id, &inst, forwarded)?;
            } else {
                let lit =
                    Literal::zeros(inst.shape.clone()).map_err(|e| LowerError::invalid(&inst.name, e.to_string()))?;
                become_constant(comp, id, lit);
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn first_operand(inst: &Instruction) -> Result<InstId, LowerError> {
    inst.operands.first().copied().ok_or_else(|| LowerError::invalid(&inst.name, "missing operand"))
}

/// The instruction becomes its operands: a copy into its own array shape (which may differ
/// from the operand's only in layout), the operand itself when both are tuples, a tuple of
/// the operands for several, and `(operand, operand)` for a start carrying both.
fn own_data(
    comp: &mut Computation,
    id: InstId,
    inst: &Instruction,
    forwarded: &mut Forwards,
) -> Result<(), LowerError> {
    let ops = inst.operands.clone();
    check_one_participant(comp, inst)?;
    let tuple_operand = ops.len() == 1 && matches!(comp.inst(ops[0]).shape, Shape::Tuple(_));
    match (&inst.shape, ops.as_slice()) {
        (Shape::Array(_), [x]) => become_op(comp, id, Opcode::Copy, vec![*x]),
        (Shape::Tuple(_), [x]) if tuple_operand => forward(comp, id, *x, forwarded),
        (Shape::Tuple(parts), [x])
            if parts.len() == 2 && matches!(inst.opcode, Opcode::AllReduceStart | Opcode::AllGatherStart) =>
        {
            become_op(comp, id, Opcode::Tuple, vec![*x, *x])
        }
        (Shape::Tuple(parts), _) if parts.len() == ops.len() => become_op(comp, id, Opcode::Tuple, ops),
        _ => return Err(LowerError::invalid(&inst.name, format!("{} operands do not match its result", inst.opcode))),
    }
    Ok(())
}

/// Fails when a result array is not the size of its operand: a gather, scatter or exchange
/// whose shapes imply more participants than the one device.
fn check_one_participant(comp: &Computation, inst: &Instruction) -> Result<(), LowerError> {
    let dims = |s: &Shape| s.as_array().map(|a| a.dims.clone());
    let start = matches!(inst.opcode, Opcode::AllReduceStart | Opcode::AllGatherStart);
    let results: Vec<Option<Vec<i64>>> = match &inst.shape {
        Shape::Tuple(parts) if start && inst.operands.len() == 1 => parts.iter().skip(1).map(dims).collect(),
        Shape::Tuple(parts) if parts.len() == inst.operands.len() => parts.iter().map(dims).collect(),
        s => vec![dims(s)],
    };
    let mismatch = inst.operands.iter().zip(&results).any(|(&o, r)| match (dims(&comp.inst(o).shape), r) {
        (Some(a), Some(r)) => &a != r,
        _ => false,
    });
    if mismatch {
        return Err(LowerError::unsupported(
            &inst.name,
            format!(
                "{} across several devices (its result shape implies more participants than the one device)",
                inst.opcode
            ),
        ));
    }
    Ok(())
}
