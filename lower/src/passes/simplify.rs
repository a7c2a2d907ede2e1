//! The simplification group, run to a fixed point as XLA iterates its simplifiers: the
//! algebraic simplifier, constant folding, the conditional and while simplifier (with call
//! inlining for the branches it turns into calls), CSE, tuple simplification and DCE,
//! repeated until a round changes nothing. The module is re-verified after every member that changed it, so
//! a broken rewrite is named at once, as between pipeline passes.

use tessera_hlo::verify::verify;
use tessera_hlo::Module;

use super::{AlgebraicSimplifier, CallInline, ConstantFolding, ControlFlowSimplifier, Cse, Dce, TupleSimplify};
use crate::pass::Pass;
use crate::LowerError;

/// Rounds before giving up on a fixed point (each round only shrinks or folds the module, so
/// this is a guard, not a tuning knob).
const MAX_ROUNDS: usize = 16;

pub struct Simplify {
    members: Vec<Box<dyn Pass>>,
    rounds: usize,
    reports: Vec<String>,
}

impl Default for Simplify {
    fn default() -> Simplify {
        Simplify {
            members: vec![
                Box::new(AlgebraicSimplifier::default()),
                Box::new(ConstantFolding::default()),
                Box::new(ControlFlowSimplifier::default()),
                Box::new(CallInline),
                Box::new(Cse::default()),
                Box::new(TupleSimplify),
                Box::new(Dce),
            ],
            rounds: 0,
            reports: Vec::new(),
        }
    }
}

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.reports.clear();
        let mut changed_any = false;
        for round in 1..=MAX_ROUNDS {
            self.rounds = round;
            let mut changed = false;
            for pass in &mut self.members {
                if pass.run(module)? {
                    verify(module)
                        .map_err(|e| LowerError::Pipeline { pass: pass.name().to_string(), message: e.to_string() })?;
                    changed = true;
                    let name = pass.name();
                    self.reports.extend(pass.report().into_iter().map(|l| format!("round {round}, {name}: {l}")));
                }
            }
            changed_any |= changed;
            if !changed {
                break;
            }
        }
        Ok(changed_any)
    }

    fn report(&self) -> Vec<String> {
        let mut lines = self.reports.clone();
        if !lines.is_empty() {
            lines.push(format!("fixed point after {} rounds", self.rounds));
        }
        lines
    }
}
