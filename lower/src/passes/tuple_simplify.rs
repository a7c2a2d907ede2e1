//! `get-tuple-element(tuple(a, b, ...), i)` is `a`/`b`/...: every use of such an element moves
//! to the tuple's operand, leaving the get-tuple-element dead (DCE removes it). Chains through
//! nested tuples resolve in one run.

use tessera_hlo::ir::AttrList;
use tessera_hlo::{InstId, Module, Opcode};

use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct TupleSimplify;

impl Pass for TupleSimplify {
    fn name(&self) -> &'static str {
        "tuple_simplify"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        let mut changed = false;
        for comp in &mut module.computations {
            // Operands come first in post order, so a get-tuple-element whose tuple operand
            // is itself forwarded resolves through the already-known target.
            let mut target: Vec<Option<InstId>> = vec![None; comp.instructions.len()];
            for id in comp.post_order() {
                let resolve = |t: InstId| target.get(t.index()).copied().flatten().unwrap_or(t);
                if let Some(t) = forwarded(comp, id, &resolve) {
                    target[id.index()] = Some(resolve(t));
                }
            }
            let resolve = |t: InstId| target.get(t.index()).copied().flatten().unwrap_or(t);
            for inst in &mut comp.instructions {
                for o in inst.operands.iter_mut().chain(inst.control_predecessors.iter_mut()) {
                    let r = resolve(*o);
                    changed |= r != *o;
                    *o = r;
                }
            }
            let root = resolve(comp.root);
            changed |= root != comp.root;
            comp.root = root;
        }
        Ok(changed)
    }
}

/// The tuple operand a get-tuple-element reads, when its operand is (after forwarding) a
/// `tuple` instruction.
fn forwarded(comp: &tessera_hlo::Computation, id: InstId, resolve: &impl Fn(InstId) -> InstId) -> Option<InstId> {
    let inst = comp.inst(id);
    if inst.opcode != Opcode::GetTupleElement {
        return None;
    }
    let tuple = comp.get(resolve(*inst.operands.first()?))?;
    if tuple.opcode != Opcode::Tuple {
        return None;
    }
    let index = usize::try_from(inst.attr_int("index")?).ok()?;
    tuple.operands.get(index).copied()
}
