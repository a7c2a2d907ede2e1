//! The parts of XLA's `ConditionalSimplifier` and `WhileLoopSimplifier` that need no loop
//! analysis beyond constants:
//! - a conditional whose branch index (or predicate) is a constant, or that has one branch,
//!   becomes a `call` of the branch that runs (an out-of-range index runs the last branch),
//!   which `call_inline` then dissolves;
//! - a while loop whose condition is false on entry is its initial state, and one whose
//!   condition is true on entry and false after one run of the body is a `call` of the body
//!   on the initial state. The condition is evaluated on scalar elements of the state that
//!   start as constants (a counter and its bound), through the body's scalar elementwise
//!   arithmetic on them for the second test.

use tessera_hlo::eval::evaluate_instruction;
use tessera_hlo::ir::{AttrList, AttrValue};
use tessera_hlo::{CompId, Computation, InstId, Literal, Module, Opcode};

use super::dce::has_side_effect;
use super::rewrite::{become_op, forward, Forwards};
use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct ControlFlowSimplifier {
    rewrites: Vec<String>,
}

impl Pass for ControlFlowSimplifier {
    fn name(&self) -> &'static str {
        "control_flow_simplifier"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.rewrites.clear();
        let mut changed = false;
        for c in module.comp_ids().collect::<Vec<_>>() {
            let mut forwarded = Forwards::default();
            for id in module.comp(c).post_order() {
                forwarded.update_operands(module.comp_mut(c), id);
                let inst = module.comp(c).inst(id);
                let name = inst.name.clone();
                match inst.opcode {
                    Opcode::Conditional => {
                        if let Some((branch, operand, why)) = taken_branch(module.comp(c), id) {
                            become_call(module.comp_mut(c), id, branch, operand);
                            self.rewrites.push(format!("{name}: a call of its branch ({why})"));
                        }
                    }
                    Opcode::While => match short_trip_count(module, c, id) {
                        Some(0) => {
                            let comp = module.comp_mut(c);
                            let init = comp.inst(id).operands[0];
                            forward(comp, id, init, &mut forwarded);
                            self.rewrites.push(format!("{name}: its condition is false on entry: the initial state"));
                        }
                        Some(_) => {
                            let Some(body) = module.comp(c).inst(id).called("body") else { continue };
                            let comp = module.comp_mut(c);
                            let init = comp.inst(id).operands[0];
                            become_call(comp, id, body, init);
                            self.rewrites.push(format!("{name}: runs its body once: a call of the body"));
                        }
                        None => continue,
                    },
                    _ => continue,
                }
                changed = true;
            }
            if !forwarded.is_empty() {
                let comp = module.comp_mut(c);
                forwarded.finish(comp);
                comp.order_operands_first();
            }
        }
        Ok(changed)
    }

    fn report(&self) -> Vec<String> {
        self.rewrites.clone()
    }
}

/// Turns instruction `id` into `call(operand), to_apply=callee` (its control edges stay).
fn become_call(comp: &mut Computation, id: InstId, callee: CompId, operand: InstId) {
    become_op(comp, id, Opcode::Call, vec![operand]);
    comp.inst_mut(id).set_attr("to_apply", AttrValue::Computation(callee));
}

/// The branch a conditional always takes, its operand, and why, when that is known.
fn taken_branch(comp: &Computation, id: InstId) -> Option<(CompId, InstId, &'static str)> {
    let inst = comp.inst(id);
    let branches: Vec<CompId> = match (inst.called("true_computation"), inst.called("false_computation")) {
        (Some(t), Some(f)) => vec![t, f],
        _ => match inst.attr("branch_computations")? {
            AttrValue::Computations(b) => b.clone(),
            _ => return None,
        },
    };
    if branches.is_empty() || inst.operands.len() != branches.len() + 1 {
        return None;
    }
    let pick = |k: usize| Some((branches[k], inst.operands[k + 1]));
    if branches.len() == 1 {
        let (b, o) = pick(0)?;
        return Some((b, o, "its only branch"));
    }
    let selector = comp.inst(inst.operands[0]).literal()?;
    let bits = selector.to_bits_vec().ok()?;
    let &[value] = bits.as_slice() else { return None };
    let k = if selector.element_type() == tessera_hlo::ElementType::Pred {
        // true runs the first (true) computation.
        usize::from(value == 0)
    } else {
        let index = selector.to_vec::<i32>().ok()?.first().copied()?;
        usize::try_from(index).ok().filter(|&i| i < branches.len()).unwrap_or(branches.len() - 1)
    };
    let (b, o) = pick(k)?;
    Some((b, o, "a constant selector"))
}

/// How many times while loop `id` of computation `c` runs its body, when that is 0 or 1 and
/// follows from constants: the condition false on entry, or true on entry and false on the
/// state after one iteration.
fn short_trip_count(module: &Module, c: CompId, id: InstId) -> Option<u8> {
    let inst = module.comp(c).inst(id);
    let (cond, body) = (module.get(inst.called("condition")?)?, module.get(inst.called("body")?)?);
    // Skipping a condition run must not skip a side effect.
    if cond.instructions.iter().any(|i| i.opcode != Opcode::Parameter && has_side_effect(i.opcode)) {
        return None;
    }
    let comp = module.comp(c);
    let state = comp.inst(*inst.operands.first()?);
    // Elements that start as constants.
    let entry = |i: usize| -> Option<Literal> {
        (state.opcode == Opcode::Tuple).then_some(())?;
        comp.inst(*state.operands.get(i)?).literal().cloned()
    };
    if !truth(&scalar_value(module, cond, cond.root, &entry, 0)?)? {
        return Some(0);
    }
    let root = body.root_inst();
    if root.opcode != Opcode::Tuple {
        return None;
    }
    let next = |i: usize| scalar_value(module, body, *root.operands.get(i)?, &entry, 0);
    (!truth(&scalar_value(module, cond, cond.root, &next, 0)?)?).then_some(1)
}

/// How deep [`scalar_value`] follows operands: a counter's update and a bound's compare are a
/// step or two, and the bound keeps the walk cheap on large computations.
const MAX_DEPTH: usize = 6;

/// The value of scalar instruction `id` of loop computation `comp` (a condition or body) when
/// its state's element `i` holds `element(i)`: constants, reads of the state parameter, and
/// scalar elementwise ops of those.
fn scalar_value(
    module: &Module,
    comp: &Computation,
    id: InstId,
    element: &dyn Fn(usize) -> Option<Literal>,
    depth: usize,
) -> Option<Literal> {
    let inst = comp.inst(id);
    if inst.shape.as_array()?.element_count()? != 1 {
        return None;
    }
    if let Some(lit) = inst.literal() {
        return Some(lit.clone());
    }
    if inst.opcode == Opcode::GetTupleElement && comp.inst(*inst.operands.first()?).opcode == Opcode::Parameter {
        return element(usize::try_from(inst.attr_int("index")?).ok()?);
    }
    if depth >= MAX_DEPTH || !(inst.opcode.is_elementwise() || inst.opcode == Opcode::Compare) {
        return None;
    }
    let operands: Vec<Literal> =
        inst.operands.iter().map(|&o| scalar_value(module, comp, o, element, depth + 1)).collect::<Option<_>>()?;
    evaluate_instruction(module, inst, &operands).ok()
}

/// A scalar predicate's truth.
fn truth(lit: &Literal) -> Option<bool> {
    match lit.to_bits_vec().ok()?.as_slice() {
        &[v] => Some(v != 0),
        _ => None,
    }
}
