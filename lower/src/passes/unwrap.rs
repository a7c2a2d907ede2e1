//! Rewrites the ops that only wrap or order other work into the ordinary ops they amount to
//! on one device running kernels in order, as `hlo::eval` (eval/wrappers.rs) defines them:
//! - `add-dependency(x, token)`, `domain(x)` and `async-update(s)` are their first operand;
//! - `async-start(ops...), calls=c` is `tuple(tuple(ops...), call(ops...), zeros...)` (the
//!   wrapped work runs at the start) and `async-done(s)` is element 1 of that tuple;
//! - `copy-start(x)` is `tuple(copy(x), x, zero)` (the copy takes the destination's layout and
//!   memory space) and `copy-done(s)` is element 0;
//! - `get-dimension-size(x)` of a static dimension is that size as an `s32` constant;
//! - `set-dimension-size(x, n)` with `n` a constant equal to the (static) size is `x`; with `n`
//!   known only at run time it stays, and `build_program` makes it `x` plus a run-time check.
//!
//! - a sharding annotation (`custom-call` to `Sharding`, `SPMDFullToShardShape` or
//!   `SPMDShardToFullShape`) is its operand (a copy when the layouts differ).
//!
//! `call_inline` and `tuple_simplify` then dissolve the calls and tuples this leaves.

use tessera_hlo::ir::{AttrList, AttrValue, Payload, SHARDING_ANNOTATIONS};
use tessera_hlo::{Computation, InstId, Instruction, Literal, Module, Opcode, Shape};

use super::rewrite::{become_constant, become_op, forward, rewrite_each, Forwards};
use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct Unwrap;

impl Pass for Unwrap {
    fn name(&self) -> &'static str {
        "unwrap"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        rewrite_each(module, rewrite)
    }
}

fn first_operand(inst: &Instruction) -> Result<InstId, LowerError> {
    inst.operands.first().copied().ok_or_else(|| LowerError::invalid(&inst.name, "missing operand"))
}

/// Rewrites instruction `id` in place when it is a wrapper; says whether it was one.
fn rewrite(comp: &mut Computation, id: InstId, forwarded: &mut Forwards) -> Result<bool, LowerError> {
    use Opcode as O;
    let inst = comp.inst(id).clone();
    match inst.opcode {
        O::AddDependency | O::Domain | O::AsyncUpdate => {
            let x = first_operand(&inst)?;
            forward(comp, id, x, forwarded);
        }
        O::CustomCall if SHARDING_ANNOTATIONS.contains(&inst.attr_word("custom_call_target").unwrap_or("")) => {
            let [x] = inst.operands[..] else {
                return Err(LowerError::invalid(&inst.name, "a sharding annotation takes one operand"));
            };
            let operand = &comp.inst(x).shape;
            let same_array = match (operand, &inst.shape) {
                (Shape::Array(a), Shape::Array(r)) => a.same_dims_and_type(r),
                _ => false,
            };
            if !same_array {
                return Err(LowerError::invalid(
                    &inst.name,
                    "on one device a sharding annotation's result has its operand's dimensions and type",
                ));
            }
            if *operand == inst.shape {
                forward(comp, id, x, forwarded);
            } else {
                become_op(comp, id, Opcode::Copy, vec![x]);
            }
        }
        O::AsyncStart => {
            let callee =
                inst.called("calls").ok_or_else(|| LowerError::invalid(&inst.name, "async-start without calls"))?;
            let Shape::Tuple(parts) = &inst.shape else {
                return Err(LowerError::invalid(&inst.name, "async-start must return a tuple"));
            };
            let (Some(args_shape), Some(result_shape)) = (parts.first(), parts.get(1)) else {
                return Err(LowerError::invalid(&inst.name, "async-start returns (operands, result, context...)"));
            };
            let args = add(comp, &inst.name, "operands", Opcode::Tuple, args_shape.clone(), inst.operands.clone());
            let mut call = Instruction::new("", Opcode::Call, result_shape.clone(), inst.operands.clone());
            call.set_attr("to_apply", AttrValue::Computation(callee));
            let call = add_inst(comp, &inst.name, "call", call);
            let mut elems = vec![args, call];
            for s in &parts[2..] {
                elems.push(zero(comp, &inst.name, s)?);
            }
            become_op(comp, id, Opcode::Tuple, elems);
        }
        O::AsyncDone | O::CopyDone => {
            let index = if inst.opcode == O::AsyncDone { 1 } else { 0 };
            let s = first_operand(&inst)?;
            become_op(comp, id, Opcode::GetTupleElement, vec![s]);
            comp.inst_mut(id).set_attr("index", AttrValue::Int(index));
        }
        O::CopyStart => {
            let x = first_operand(&inst)?;
            let parts = match &inst.shape {
                Shape::Tuple(p) if p.len() == 3 => p.clone(),
                _ => return Err(LowerError::invalid(&inst.name, "copy-start returns (destination, source, context)")),
            };
            let dest = add(comp, &inst.name, "copy", Opcode::Copy, parts[0].clone(), vec![x]);
            let context = zero(comp, &inst.name, &parts[2])?;
            become_op(comp, id, Opcode::Tuple, vec![dest, x, context]);
        }
        O::GetDimensionSize => {
            let x = first_operand(&inst)?;
            let size = static_dim(comp, &inst, x)?;
            let size = i32::try_from(size)
                .map_err(|_| LowerError::invalid(&inst.name, "the dimension size does not fit in s32"))?;
            become_constant(comp, id, Literal::scalar(size));
        }
        O::SetDimensionSize => {
            let (x, n) = match inst.operands[..] {
                [x, n] => (x, n),
                _ => return Err(LowerError::invalid(&inst.name, "set-dimension-size takes an array and a size")),
            };
            let size = static_dim(comp, &inst, x)?;
            if comp.inst(n).opcode != Opcode::Constant {
                // Known only at run time: the program checks it (build_program).
                return Ok(false);
            }
            let given = comp.inst(n).literal().and_then(|l| l.get_bits(0)).map(|b| b as u32 as i32 as i64);
            if given != Some(size) {
                return Err(LowerError::unsupported(
                    &inst.name,
                    format!("set-dimension-size to {given:?}, below the static size {size} (dynamic shapes)"),
                ));
            }
            forward(comp, id, x, forwarded);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The size of the dimension `dimensions={d}` of `x`, which must be static.
fn static_dim(comp: &Computation, inst: &Instruction, x: InstId) -> Result<i64, LowerError> {
    let shape = &comp.inst(x).shape;
    let a = shape.as_array().ok_or_else(|| LowerError::invalid(&inst.name, "the operand is not an array"))?;
    let d = match inst.attr_ints("dimensions") {
        Some([d]) => usize::try_from(*d).ok().filter(|&d| d < a.dims.len()),
        _ => None,
    }
    .ok_or_else(|| LowerError::invalid(&inst.name, "needs one dimension in range"))?;
    if !a.is_static() {
        return Err(LowerError::unsupported(&inst.name, format!("{} of a dynamic dimension", inst.opcode)));
    }
    Ok(a.dims[d])
}

fn add_inst(comp: &mut Computation, base: &str, suffix: &str, mut inst: Instruction) -> InstId {
    inst.name = comp.unique_name(&format!("{base}.{suffix}"));
    comp.add(inst)
}

fn add(comp: &mut Computation, base: &str, suffix: &str, op: Opcode, shape: Shape, operands: Vec<InstId>) -> InstId {
    add_inst(comp, base, suffix, Instruction::new("", op, shape, operands))
}

/// A zero of an async context's shape (arrays), or a fresh token.
fn zero(comp: &mut Computation, base: &str, shape: &Shape) -> Result<InstId, LowerError> {
    if matches!(shape, Shape::Token) {
        return Ok(add(comp, base, "token", Opcode::AfterAll, shape.clone(), vec![]));
    }
    if shape.as_array().is_none() {
        return Err(LowerError::unsupported(base, format!("an asynchronous context of shape {shape}")));
    }
    let lit = Literal::zeros(shape.clone()).map_err(|e| LowerError::invalid(base, e.to_string()))?;
    let mut c = Instruction::new("", Opcode::Constant, shape.clone(), vec![]);
    c.payload = Payload::Constant(lit);
    Ok(add_inst(comp, base, "context", c))
}
