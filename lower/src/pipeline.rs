//! Runs passes in order. With `verify_each` (the default of [`Pipeline::new`], and of the
//! standard pipeline in builds with debug assertions or under `TESSERA_VERIFY_PASSES=1`) it
//! re-verifies the module after every pass that changed it, so a pass that breaks the IR is
//! named at once; otherwise it verifies once at the end, which keeps compile time linear in
//! the module instead of proportional to passes x module.

use std::path::PathBuf;
use std::time::Instant;

use tessera_hlo::text::{print_module, PrintOptions};
use tessera_hlo::verify::verify;
use tessera_hlo::Module;

use crate::pass::Pass;
use crate::timings::Timings;
use crate::LowerError;

pub struct Pipeline {
    passes: Vec<Box<dyn Pass>>,
    verify_each: bool,
    timings: Timings,
    /// When set, the module is written to `NN-<pass>.hlo` there after every pass (with the
    /// pass's report as trailing comments), and before the first as `00-input.hlo`.
    dump_dir: Option<PathBuf>,
}

impl Default for Pipeline {
    fn default() -> Pipeline {
        Pipeline { passes: Vec::new(), verify_each: true, timings: Timings::new(), dump_dir: None }
    }
}

/// Whether compiles re-verify the module after every pass by default: in builds with debug
/// assertions (the test suite's), or when `TESSERA_VERIFY_PASSES` is set to anything but `0`.
pub fn verify_each_by_default() -> bool {
    cfg!(debug_assertions) || std::env::var("TESSERA_VERIFY_PASSES").is_ok_and(|v| v != "0")
}

impl Pipeline {
    pub fn new() -> Pipeline {
        Pipeline::default()
    }

    /// Re-verify after every changing pass (true), or once after the last pass (false).
    pub fn verify_each(&mut self, on: bool) -> &mut Pipeline {
        self.verify_each = on;
        self
    }

    /// Time per pass (a group's members by their own names) and verification, of the runs so
    /// far.
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    pub fn add(&mut self, pass: impl Pass + 'static) -> &mut Pipeline {
        self.passes.push(Box::new(pass));
        self
    }

    pub fn add_boxed(&mut self, pass: Box<dyn Pass>) -> &mut Pipeline {
        self.passes.push(pass);
        self
    }

    pub fn dump_to(&mut self, dir: Option<PathBuf>) -> &mut Pipeline {
        self.dump_dir = dir;
        self
    }

    pub fn pass_names(&self) -> Vec<&'static str> {
        self.passes.iter().map(|p| p.name()).collect()
    }

    /// Every pass's report, in pipeline order, as `(pass name, lines)`.
    pub fn reports(&self) -> Vec<(&'static str, Vec<String>)> {
        self.passes.iter().map(|p| (p.name(), p.report())).collect()
    }

    /// Runs every pass once, in order. Returns whether any pass changed the module.
    pub fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.dump(0, "input", module, &[]);
        let mut changed_any = false;
        for (i, pass) in self.passes.iter_mut().enumerate() {
            let start = Instant::now();
            let changed = pass.run(module)?;
            let members = pass.timings();
            if members.phases().is_empty() {
                self.timings.add(pass.name(), start.elapsed());
            } else {
                self.timings.extend(&members);
            }
            if changed && self.verify_each {
                self.timings
                    .time("verify", || verify(module))
                    .map_err(|e| LowerError::Pipeline { pass: pass.name().to_string(), message: e.to_string() })?;
            }
            changed_any |= changed;
            let report = pass.report();
            let name = pass.name();
            Self::dump_with(&self.dump_dir, i + 1, name, module, &report);
        }
        if changed_any && !self.verify_each {
            self.timings.time("verify", || verify(module)).map_err(|e| LowerError::Pipeline {
                pass: "(one of the pipeline's passes; TESSERA_VERIFY_PASSES=1 names it)".to_string(),
                message: e.to_string(),
            })?;
        }
        Ok(changed_any)
    }

    fn dump(&self, index: usize, name: &str, module: &Module, report: &[String]) {
        Self::dump_with(&self.dump_dir, index, name, module, report);
    }

    /// Dumps are a debugging aid: a dump that cannot be written must not fail the compile.
    fn dump_with(dir: &Option<PathBuf>, index: usize, name: &str, module: &Module, report: &[String]) {
        let Some(dir) = dir else { return };
        let mut text = print_module(module, &PrintOptions::short());
        for line in report {
            text.push_str("// ");
            text.push_str(line);
            text.push('\n');
        }
        if std::fs::create_dir_all(dir).is_ok() {
            let _ = std::fs::write(dir.join(format!("{index:02}-{name}.hlo")), text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::text::parse_module;
    use tessera_hlo::InstId;

    /// Points the root at an operand index that does not exist: a broken pass.
    struct Breaker;

    impl Pass for Breaker {
        fn name(&self) -> &'static str {
            "breaker"
        }
        fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
            let entry = module.entry;
            module.comp_mut(entry).inst_mut(InstId(1)).operands = vec![InstId(7)];
            Ok(true)
        }
    }

    struct Nothing;

    impl Pass for Nothing {
        fn name(&self) -> &'static str {
            "nothing"
        }
        fn run(&mut self, _: &mut Module) -> Result<bool, LowerError> {
            Ok(false)
        }
    }

    const TEXT: &str = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n";

    #[test]
    fn a_pass_that_breaks_the_module_is_named() {
        let mut m = parse_module(TEXT).unwrap();
        let mut p = Pipeline::new();
        p.add(Nothing).add(Breaker);
        match p.run(&mut m) {
            Err(LowerError::Pipeline { pass, message }) => {
                assert_eq!(pass, "breaker");
                assert!(message.contains("operand"), "{message}");
            }
            other => panic!("expected a pipeline error, got {other:?}"),
        }
    }

    #[test]
    fn unchanged_runs_report_no_change_and_dumps_are_written() {
        let mut m = parse_module(TEXT).unwrap();
        let dir = std::env::temp_dir().join(format!("tessera-pipeline-dump-{}", std::process::id()));
        let mut p = Pipeline::new();
        p.add(Nothing).dump_to(Some(dir.clone()));
        assert_eq!(p.run(&mut m), Ok(false));
        assert_eq!(p.pass_names(), vec!["nothing"]);
        let dumped = std::fs::read_to_string(dir.join("01-nothing.hlo")).unwrap();
        assert!(dumped.contains("negate(p)"), "{dumped}");
        assert!(dir.join("00-input.hlo").exists());
        let _ = std::fs::remove_dir_all(dir);
    }
}
