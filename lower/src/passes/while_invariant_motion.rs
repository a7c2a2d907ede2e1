//! Loop-invariant code motion, as XLA's `WhileLoopInvariantCodeMotion`: an instruction of a
//! loop body that computes the same value in every iteration (its operands are constants,
//! elements the body passes through unchanged, or other such instructions, and it has no side
//! effect) is computed once before the loop, and the body reads the result as a new state
//! element it passes through. The state grows by one buffer per hoisted value; passing an
//! element through costs nothing per iteration.
//!
//! As in XLA, ops that are cheap or only move data (constants, broadcasts, iotas, reshapes,
//! bitcasts, slices, reverses, transposes, tuples) are not worth a state element on their
//! own: they move only as operands of an instruction that is, and stay in the body as long
//! as other body instructions use them (fusion makes them free there).

use tessera_hlo::{CompId, Computation, InstId, Module, Opcode};

use super::dce::has_side_effect;
use super::while_loop_state::{element_of, element_read, rewrite_loops, rewrite_state, side_effects, Loop};
use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct WhileInvariantMotion {
    rewrites: Vec<String>,
}

impl Pass for WhileInvariantMotion {
    fn name(&self) -> &'static str {
        "while_invariant_motion"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.rewrites = rewrite_loops(module, |module, c, w, lp| {
            let frontier = hoisted_values(module.comp(lp.body), lp);
            if frontier.is_empty() {
                return Ok(None);
            }
            let names: Vec<String> = frontier.iter().map(|&id| module.comp(lp.body).inst(id).name.clone()).collect();
            let outer = clone_before_loop(module, c, w, lp, &frontier);
            let append: Vec<(InstId, InstId)> = outer.into_iter().zip(frontier).collect();
            rewrite_state(module, c, w, lp, &(0..lp.arity).collect::<Vec<_>>(), &append)?;
            Ok(Some(format!("hoisted {} out of the loop", names.join(", "))))
        })?;
        Ok(!self.rewrites.is_empty())
    }

    fn report(&self) -> Vec<String> {
        self.rewrites.clone()
    }
}

fn not_worth_hoisting_alone(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        Constant
            | GetTupleElement
            | Tuple
            | Broadcast
            | Iota
            | Reshape
            | Bitcast
            | Slice
            | Reverse
            | Transpose
            | Parameter
    )
}

/// Which body instructions are invariant: reads of elements the body passes through, and
/// side-effect-free array instructions (no loops, calls or control edges) of invariant
/// operands.
fn invariant_instructions(body: &Computation, lp: &Loop) -> Vec<bool> {
    let root = body.root_inst();
    let passed_through = |i: usize| element_read(body, root.operands[i]) == Some(i);
    let mut invariant = vec![false; body.instructions.len()];
    for id in body.post_order() {
        let inst = body.inst(id);
        invariant[id.index()] = match element_read(body, id) {
            Some(i) => i < lp.arity && passed_through(i),
            None => {
                !has_side_effect(inst.opcode)
                    && !matches!(
                        inst.opcode,
                        Opcode::While
                            | Opcode::Conditional
                            | Opcode::Call
                            | Opcode::RngBitGenerator
                            | Opcode::OptimizationBarrier
                            | Opcode::AddDependency
                    )
                    && inst.shape.as_array().is_some()
                    && inst.control_predecessors.is_empty()
                    && inst.operands.iter().all(|o| invariant[o.index()])
            }
        };
    }
    invariant
}

/// The body instructions to compute before the loop and read as new state elements: the
/// invariant instructions worth hoisting that what stays in the body still uses, in post
/// order. What they are computed from is hoisted with them; an invariant instruction not
/// worth hoisting alone stays in the body wherever the body still uses it.
fn hoisted_values(body: &Computation, lp: &Loop) -> Vec<InstId> {
    let invariant = invariant_instructions(body, lp);
    let worth = |id: InstId| invariant[id.index()] && !not_worth_hoisting_alone(body.inst(id).opcode);
    // Walk back from what the body must compute (its root and side effects), stopping at
    // values worth hoisting: those are the ones the body reads from its state instead.
    let mut frontier = vec![false; body.instructions.len()];
    let mut seen = vec![false; body.instructions.len()];
    let mut stack = side_effects(body);
    stack.push(body.root);
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut seen[id.index()], true) {
            continue;
        }
        if worth(id) {
            frontier[id.index()] = true;
            continue;
        }
        let inst = body.inst(id);
        stack.extend(inst.operands.iter().chain(&inst.control_predecessors).copied());
    }
    body.post_order().into_iter().filter(|id| frontier[id.index()]).collect()
}

/// Clones the hoisted values of `frontier` and what they are computed from into computation
/// `c`, before loop `w`: reads of passed-through elements become the loop's initial values.
/// The clones of the frontier, in its order.
fn clone_before_loop(module: &mut Module, c: CompId, w: InstId, lp: &Loop, frontier: &[InstId]) -> Vec<InstId> {
    let body = module.comp(lp.body).clone();
    let comp = module.comp_mut(c);
    let init = comp.inst(w).operands[0];
    let mut map: Vec<Option<InstId>> = vec![None; body.instructions.len()];
    let mut out = Vec::new();
    for &f in frontier {
        // Depth-first over operands; every operand of a hoisted instruction is invariant, so
        // the walk ends at constants and reads of passed-through elements.
        let mut stack = vec![(f, false)];
        while let Some((id, expanded)) = stack.pop() {
            if map[id.index()].is_some() {
                continue;
            }
            let inst = body.inst(id);
            if let Some(i) = element_read(&body, id) {
                map[id.index()] = Some(element_of(comp, init, i, &inst.shape));
                continue;
            }
            if !expanded {
                stack.push((id, true));
                stack.extend(inst.operands.iter().filter(|o| map[o.index()].is_none()).map(|&o| (o, false)));
                continue;
            }
            let mut clone = inst.clone();
            clone.name = comp.unique_name(&inst.name);
            clone.operands = inst.operands.iter().map(|o| map[o.index()].expect("operands cloned first")).collect();
            map[id.index()] = Some(comp.add(clone));
        }
        out.push(map[f.index()].expect("the frontier is cloned"));
    }
    out
}
