//! The simplification group, run to a fixed point as XLA iterates its simplifiers: the
//! algebraic simplifier, constant folding, the conditional and while simplifier (with call
//! inlining for the branches and bodies it turns into calls), dead loop-state elements,
//! loop-invariant code motion, CSE, tuple simplification and DCE,
//! repeated until a round changes nothing. With `verify_each` the module is re-verified after
//! every member that changed it, so a broken rewrite is named at once, as between pipeline
//! passes; otherwise the enclosing pipeline verifies once at its end.

use std::time::Instant;

use tessera_hlo::verify::verify;
use tessera_hlo::Module;

use super::{
    AlgebraicSimplifier, CallInline, ConstantFolding, ControlFlowSimplifier, Cse, Dce, TupleSimplify, WhileDeadState,
    WhileInvariantMotion,
};
use crate::pass::Pass;
use crate::timings::Timings;
use crate::LowerError;

/// Rounds before giving up on a fixed point (each round only shrinks or folds the module, so
/// this is a guard, not a tuning knob).
const MAX_ROUNDS: usize = 16;

pub struct Simplify {
    members: Vec<Box<dyn Pass>>,
    rounds: usize,
    reports: Vec<String>,
    verify_each: bool,
    timings: Timings,
}

impl Default for Simplify {
    /// Verifying after every member that changed the module.
    fn default() -> Simplify {
        Simplify::new(true)
    }
}

impl Simplify {
    pub fn new(verify_each: bool) -> Simplify {
        Simplify {
            members: vec![
                Box::new(AlgebraicSimplifier::default()),
                Box::new(ConstantFolding::default()),
                Box::new(ControlFlowSimplifier::default()),
                Box::new(CallInline),
                Box::new(WhileDeadState::default()),
                Box::new(WhileInvariantMotion::default()),
                Box::new(Cse::default()),
                Box::new(TupleSimplify),
                Box::new(Dce),
            ],
            rounds: 0,
            reports: Vec::new(),
            verify_each,
            timings: Timings::new(),
        }
    }
}

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.reports.clear();
        self.timings = Timings::new();
        let mut changed_any = false;
        for round in 1..=MAX_ROUNDS {
            self.rounds = round;
            let mut changed = false;
            for pass in &mut self.members {
                let start = Instant::now();
                let member_changed = pass.run(module)?;
                self.timings.add(pass.name(), start.elapsed());
                if member_changed {
                    if self.verify_each {
                        self.timings.time("verify", || verify(module)).map_err(|e| LowerError::Pipeline {
                            pass: pass.name().to_string(),
                            message: e.to_string(),
                        })?;
                    }
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

    fn timings(&self) -> Timings {
        self.timings.clone()
    }

    fn report(&self) -> Vec<String> {
        let mut lines = self.reports.clone();
        if !lines.is_empty() {
            lines.push(format!("fixed point after {} rounds", self.rounds));
        }
        lines
    }
}
