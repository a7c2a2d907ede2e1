//! The HLO-to-HLO pass interface, shaped like XLA's `HloModulePass`.

use tessera_hlo::Module;

use crate::timings::Timings;

use crate::LowerError;

pub trait Pass {
    /// A short stable name (`fusion`, `dce`): used in pipeline errors, dumps and filetests.
    fn name(&self) -> &'static str;

    /// Rewrites the module in place and says whether anything changed.
    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError>;

    /// What the last run decided and why, one line per decision (empty for passes with no
    /// choices to explain). Dumps and filetests print it.
    fn report(&self) -> Vec<String> {
        Vec::new()
    }

    /// For a pass that runs other passes (a group), the time of each member (and of
    /// verification) in its last run; the pipeline then shows those instead of the group's
    /// total. Empty for ordinary passes.
    fn timings(&self) -> Timings {
        Timings::new()
    }
}
