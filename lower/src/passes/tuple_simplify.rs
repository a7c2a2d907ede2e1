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
            for id in comp.post_order() {
                let Some(target) = forwarded(comp, id) else { continue };
                let uses = comp.root == id
                    || comp
                        .instructions
                        .iter()
                        .any(|i| i.operands.contains(&id) || i.control_predecessors.contains(&id));
                if uses {
                    comp.replace_all_uses(id, target);
                    changed = true;
                }
            }
        }
        Ok(changed)
    }
}

/// The tuple operand a get-tuple-element reads, when its operand is a `tuple` instruction.
fn forwarded(comp: &tessera_hlo::Computation, id: InstId) -> Option<InstId> {
    let inst = comp.inst(id);
    if inst.opcode != Opcode::GetTupleElement {
        return None;
    }
    let tuple = comp.get(*inst.operands.first()?)?;
    if tuple.opcode != Opcode::Tuple {
        return None;
    }
    let index = usize::try_from(inst.attr_int("index")?).ok()?;
    tuple.operands.get(index).copied()
}
