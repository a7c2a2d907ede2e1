//! The parts of XLA's `ConditionalSimplifier` and `WhileLoopSimplifier` that need no loop
//! analysis beyond constants:
//! - a conditional whose branch index (or predicate) is a constant, or that has one branch,
//!   becomes a `call` of the branch that runs (an out-of-range index runs the last branch),
//!   which `call_inline` then dissolves;
//! - a while loop whose condition is false on entry (a constant-false condition, or a compare
//!   of a loop-state element that starts as a constant with a constant) is its initial state.

use tessera_hlo::eval::evaluate_instruction;
use tessera_hlo::ir::{AttrList, AttrValue};
use tessera_hlo::{CompId, Computation, InstId, Literal, Module, Opcode};

use super::rewrite::{become_op, drop_forwarded, forward};
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
            let mut forwarded = Vec::new();
            for id in module.comp(c).post_order() {
                let inst = module.comp(c).inst(id);
                let name = inst.name.clone();
                match inst.opcode {
                    Opcode::Conditional => {
                        if let Some((branch, operand, why)) = taken_branch(module.comp(c), id) {
                            let comp = module.comp_mut(c);
                            let preds = comp.inst(id).control_predecessors.clone();
                            become_op(comp, id, Opcode::Call, vec![operand]);
                            let call = comp.inst_mut(id);
                            call.set_attr("to_apply", AttrValue::Computation(branch));
                            call.control_predecessors = preds;
                            self.rewrites.push(format!("{name}: a call of its branch ({why})"));
                        }
                    }
                    Opcode::While if runs_zero_times(module, c, id) => {
                        let comp = module.comp_mut(c);
                        let init = comp.inst(id).operands[0];
                        forward(comp, id, init, &mut forwarded);
                        self.rewrites.push(format!("{name}: its condition is false on entry: the initial state"));
                    }
                    _ => continue,
                }
                changed = true;
            }
            if !forwarded.is_empty() {
                let comp = module.comp_mut(c);
                drop_forwarded(comp, &forwarded);
                comp.order_operands_first();
            }
        }
        Ok(changed)
    }

    fn report(&self) -> Vec<String> {
        self.rewrites.clone()
    }
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

/// Whether while loop `id` of computation `c` never runs its body: its condition's root is a
/// constant false, or compares a loop-state element whose initial value is a constant with a
/// constant, and that compare is false.
fn runs_zero_times(module: &Module, c: CompId, id: InstId) -> bool {
    let comp = module.comp(c);
    let inst = comp.inst(id);
    let (Some(cond), Some(&init)) = (inst.called("condition"), inst.operands.first()) else { return false };
    let Some(cond) = module.get(cond) else { return false };
    let root = cond.root_inst();
    if let Some(lit) = root.literal() {
        return lit.to_bits_vec().ok().as_deref() == Some(&[0]);
    }
    if root.opcode != Opcode::Compare || root.operands.len() != 2 {
        return false;
    }
    // Each side's value on entry: a constant in the condition, or an element of the initial
    // state tuple that is a constant.
    let on_entry = |o: InstId| -> Option<Literal> {
        let i = cond.inst(o);
        if let Some(l) = i.literal() {
            return Some(l.clone());
        }
        if i.opcode != Opcode::GetTupleElement || cond.inst(*i.operands.first()?).opcode != Opcode::Parameter {
            return None;
        }
        let index = usize::try_from(i.attr_int("index")?).ok()?;
        let state = comp.inst(init);
        if state.opcode != Opcode::Tuple {
            return None;
        }
        comp.inst(*state.operands.get(index)?).literal().cloned()
    };
    let (Some(a), Some(b)) = (on_entry(root.operands[0]), on_entry(root.operands[1])) else { return false };
    evaluate_instruction(module, root, &[a, b]).is_ok_and(|v| v.to_bits_vec().ok().as_deref() == Some(&[0]))
}
