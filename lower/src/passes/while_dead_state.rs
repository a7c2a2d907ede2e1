//! Dead loop-state elements, as XLA's `WhileLoopSimplifier` removes them: an element that no
//! user of the loop reads, that the condition does not read, and that no other live element's
//! new value (nor a side effect of the body) depends on is dropped from the loop, its
//! condition and its body. An element that only feeds itself (a counter nobody looks at, a
//! carried value whose result is discarded) is dead; so is a chain of such elements.

use tessera_hlo::ir::AttrList;
use tessera_hlo::{CompId, InstId, Module, Opcode};

use super::dce::live_instructions;
use super::while_loop_state::{element_read, rewrite_loops, rewrite_state, side_effects, Loop};
use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct WhileDeadState {
    rewrites: Vec<String>,
}

impl Pass for WhileDeadState {
    fn name(&self) -> &'static str {
        "while_dead_state"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.rewrites = rewrite_loops(module, |module, c, w, lp| {
            let live = live_elements(module, c, w, lp);
            let keep: Vec<usize> = (0..lp.arity).filter(|&i| live[i]).collect();
            // Nothing dead, or nothing live: a loop none of whose results matter is DCE's.
            if keep.len() == lp.arity || keep.is_empty() {
                return Ok(None);
            }
            let dead: Vec<String> = (0..lp.arity).filter(|&i| !live[i]).map(|i| i.to_string()).collect();
            rewrite_state(module, c, w, lp, &keep, &[])?;
            Ok(Some(format!("dropped dead loop-state elements {{{}}}", dead.join(","))))
        })?;
        Ok(!self.rewrites.is_empty())
    }

    fn report(&self) -> Vec<String> {
        self.rewrites.clone()
    }
}

/// Which elements of loop `w`'s state are needed: read after the loop or by the condition,
/// or needed (through the body) to compute a needed element or a side effect of the body.
fn live_elements(module: &Module, c: CompId, w: InstId, lp: &Loop) -> Vec<bool> {
    let mut live = vec![false; lp.arity];
    let comp = module.comp(c);
    let users = comp.users();
    let reads_after = |u: InstId| !users[u.index()].is_empty() || comp.root == u;
    for &u in &users[w.index()] {
        let user = comp.inst(u);
        match user.attr_int("index").and_then(|i| usize::try_from(i).ok()) {
            Some(i) if user.opcode == Opcode::GetTupleElement && i < lp.arity => live[i] |= reads_after(u),
            // The whole state is read.
            _ => return vec![true; lp.arity],
        }
    }
    if comp.root == w {
        return vec![true; lp.arity];
    }
    let cond = module.comp(lp.cond);
    let cond_live = live_instructions(cond);
    for id in cond.ids().filter(|id| cond_live[id.index()]) {
        if let Some(i) = element_read(cond, id) {
            live[i] = true;
        }
    }
    // Walk the body back from the new values of live elements and from its side effects;
    // reaching a read of element i makes i live, which adds its new value to the walk.
    let body = module.comp(lp.body);
    let root = body.root_inst();
    let mut seen = vec![false; body.instructions.len()];
    let mut stack = side_effects(body);
    stack.extend((0..lp.arity).filter(|&i| live[i]).map(|i| root.operands[i]));
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut seen[id.index()], true) {
            continue;
        }
        if let Some(i) = element_read(body, id) {
            if i < lp.arity && !std::mem::replace(&mut live[i], true) {
                stack.push(root.operands[i]);
            }
        }
        let inst = body.inst(id);
        stack.extend(inst.operands.iter().chain(&inst.control_predecessors).copied());
    }
    live
}
