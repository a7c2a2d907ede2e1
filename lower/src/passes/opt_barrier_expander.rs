//! `opt-barrier(x)` is `x`: every use of the barrier moves to its operand (XLA's
//! `OptimizationBarrierExpander`). A barrier only orders work and keeps the simplifiers,
//! CSE above all, from merging a rematerialized value with the one it recomputes; so, as in
//! XLA:CPU, it runs after the simplification group and before fusion, which may then fuse
//! across where the barrier was instead of materializing every value passing through it. A
//! barrier whose shape (layouts included) is not its operand's stays.

use tessera_hlo::{Module, Opcode};

use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct OptBarrierExpander {
    decisions: Vec<String>,
}

impl Pass for OptBarrierExpander {
    fn name(&self) -> &'static str {
        "opt_barrier_expander"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.decisions.clear();
        for comp in &mut module.computations {
            let barriers: Vec<_> = comp
                .post_order()
                .into_iter()
                .filter(|&id| {
                    let inst = comp.inst(id);
                    inst.opcode == Opcode::OptimizationBarrier
                        && matches!(inst.operands.as_slice(), [x] if comp.inst(*x).shape == inst.shape)
                })
                .collect();
            for id in barriers {
                let operand = comp.inst(id).operands[0];
                comp.replace_all_uses(id, operand);
                self.decisions.push(format!(
                    "%{}: uses read %{} (a barrier only orders work, and the simplifiers ran)",
                    comp.inst(id).name,
                    comp.inst(operand).name
                ));
            }
        }
        Ok(!self.decisions.is_empty())
    }

    fn report(&self) -> Vec<String> {
        self.decisions.clone()
    }
}
