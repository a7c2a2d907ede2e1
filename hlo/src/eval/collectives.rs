//! Collectives on the interpreter's single device: one replica and one partition, so
//! replica-id and partition-id are 0, and every collective whose groups hold only that device
//! sees its own data alone. Groups naming more devices are refused rather than guessed at.

use super::{EvalError, Value};
use crate::ir::{AttrList, AttrValue, Instruction, Opcode};
use crate::literal::Literal;
use crate::shape::Shape;

/// The ids (replica or partition, whichever the groups mean) the op's groups name beyond
/// device 0, as an error.
fn check_single_device(inst: &Instruction, attr: &str) -> Result<(), EvalError> {
    let groups_ok = match inst.attr(attr) {
        None => true,
        Some(AttrValue::IntLists(gs)) => gs.iter().flatten().all(|&id| id == 0),
        Some(AttrValue::Ints(ids)) => ids.iter().all(|&id| id == 0),
        Some(AttrValue::Raw(r)) => r.chars().all(|c| matches!(c, '{' | '}' | ',' | ' ' | '0')),
        Some(_) => false,
    };
    if groups_ok {
        Ok(())
    } else {
        Err(EvalError::Unsupported {
            opcode: format!("{} across several devices (the interpreter is one device)", inst.opcode.name()),
        })
    }
}

/// Fails when a result array is not the size of its operand: a gather, scatter or exchange
/// whose shapes imply more participants than this one device.
fn check_one_participant(inst: &Instruction, ops: &[&Value]) -> Result<(), EvalError> {
    let dims = |s: &Shape| s.as_array().map(|a| a.dims.clone());
    let results: Vec<Option<Vec<i64>>> = match &inst.shape {
        Shape::Tuple(parts) if is_start(inst) && ops.len() == 1 => parts.iter().skip(1).map(dims).collect(),
        Shape::Tuple(parts) if parts.len() == ops.len() => parts.iter().map(dims).collect(),
        s => vec![dims(s)],
    };
    let mismatch = ops.iter().zip(&results).any(|(v, r)| match (v, r) {
        (Value::Arr(a), Some(r)) => &a.dims != r,
        _ => false,
    });
    if mismatch {
        return Err(EvalError::Unsupported {
            opcode: format!(
                "{} across several devices (its result shape implies more participants than the interpreter's one device)",
                inst.opcode.name()
            ),
        });
    }
    Ok(())
}

fn operands_as_result(inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
    check_one_participant(inst, ops)?;
    match (ops, &inst.shape) {
        // The start of an asynchronous pair that carries (operand, result).
        ([one], Shape::Tuple(parts)) if parts.len() == 2 && !matches!(one, Value::Tuple(_)) && is_start(inst) => {
            Ok(Value::Tuple(vec![(*one).clone(), (*one).clone()]))
        }
        ([one], _) if !matches!(inst.shape, Shape::Tuple(_)) || matches!(one, Value::Tuple(_)) => Ok((*one).clone()),
        _ => Ok(Value::Tuple(ops.iter().map(|v| (*v).clone()).collect())),
    }
}

fn is_start(inst: &Instruction) -> bool {
    matches!(inst.opcode, Opcode::AllGatherStart | Opcode::AllReduceStart)
}

/// The scalar u32 that replica-id and partition-id return.
fn zero_id() -> Result<Value, EvalError> {
    Value::from_literal(&Literal::scalar(0u32), "id")
}

pub(crate) fn eval(inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
    use Opcode as O;
    match inst.opcode {
        O::ReplicaId | O::PartitionId => zero_id(),
        // A reduction, gather, scatter or exchange among one participant is that participant's
        // own data.
        O::AllReduce | O::AllReduceStart | O::AllGather | O::AllGatherStart | O::AllToAll | O::ReduceScatter => {
            check_single_device(inst, "replica_groups")?;
            operands_as_result(inst, ops)
        }
        O::CollectiveBroadcast => {
            check_single_device(inst, "replica_groups")?;
            operands_as_result(inst, ops)
        }
        O::AllReduceDone | O::AllGatherDone => match (ops.first(), &inst.shape) {
            (Some(Value::Tuple(vs)), Shape::Array(_)) => {
                vs.last().cloned().ok_or_else(|| EvalError::invalid(inst, "empty start tuple"))
            }
            (Some(v), _) => Ok((*v).clone()),
            (None, _) => Err(EvalError::invalid(inst, "missing operand")),
        },
        O::CollectivePermute => {
            // A device no pair sends to receives zeros; with one device, only a 0 -> 0 pair
            // delivers anything.
            let pairs = match inst.attr("source_target_pairs") {
                Some(AttrValue::IntLists(p)) => p.clone(),
                None => vec![],
                Some(_) => return Err(EvalError::invalid(inst, "unreadable source_target_pairs")),
            };
            if pairs.iter().any(|p| p.iter().any(|&id| id != 0)) {
                check_single_device(inst, "source_target_pairs")?;
            }
            if pairs.iter().any(|p| p == &[0, 0]) {
                operands_as_result(inst, ops)
            } else {
                zeros(&inst.shape)
            }
        }
        op => Err(EvalError::Unsupported { opcode: op.name().to_string() }),
    }
}

pub(crate) fn handles(op: Opcode) -> bool {
    use Opcode as O;
    matches!(
        op,
        O::ReplicaId
            | O::PartitionId
            | O::AllReduce
            | O::AllReduceStart
            | O::AllReduceDone
            | O::AllGather
            | O::AllGatherStart
            | O::AllGatherDone
            | O::AllToAll
            | O::ReduceScatter
            | O::CollectiveBroadcast
            | O::CollectivePermute
    )
}

/// A value of `shape` with every element zero.
pub(crate) fn zeros(shape: &Shape) -> Result<Value, EvalError> {
    Value::from_literal(&Literal::zeros(shape.without_layout())?, "zeros")
}
