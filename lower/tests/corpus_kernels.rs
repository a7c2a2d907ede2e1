//! Every corpus module through `lower_module` and the kernel interpreter: arguments go in as
//! physical bytes in the entry layouts, results come back decoded and are compared with
//! XLA:CPU's outputs within the case's tolerances. Modules the lowering does not support are
//! counted by reason; a lowering that fails otherwise, a kernel that faults or a wrong value
//! fails the test. Bench cases are skipped (large).

mod common;

use std::collections::BTreeMap;

use common::shared_dir;
use tessera_hlo::corpus::{tolerance, Case};
use tessera_hlo::{Literal, Shape};
use tessera_lower::kernel::interp::run_program;
use tessera_lower::{lower_module, LowerError, LowerOptions};

/// Raise this when the lowering learns more; a drop means a regression.
const EXPECTED_PASSING: usize = 61;

/// Cases known to fail for reasons outside the pass pipeline and program construction, with
/// the reason. A failure not listed here fails the test, and so does a listed case that
/// passes (delete its line then).
const KNOWN_FAILURES: &[(&str, &str)] = &[];

enum Outcome {
    Pass(usize),
    Skipped(String),
    Unsupported(String),
    Failed(String),
}

fn run_case(case: &Case, fusion: bool) -> Outcome {
    let program = match lower_module(&case.module, &LowerOptions { fusion, dump_dir: None, ..LowerOptions::default() })
    {
        Ok(p) => p,
        Err(LowerError::Unsupported { what, .. }) => return Outcome::Unsupported(what),
        Err(e) => return Outcome::Failed(format!("lowering: {e}")),
    };
    if case.module.entry_comp().parameter_shapes().iter().any(Shape::is_tuple) {
        return Outcome::Skipped("tuple parameter (no per-element arguments stored)".into());
    }
    let logical = case.arguments().expect("corpus arguments");
    let mut args: Vec<Vec<u8>> = Vec::new();
    for (arg, &buf) in logical.iter().zip(&program.parameters) {
        let layout = program.buffers[buf.0 as usize].shape.layout_or_default();
        let physical = arg.relayout(&layout).expect("relayout argument");
        args.push(physical.physical_bytes().expect("array argument").to_vec());
    }
    let arg_refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let outputs = match run_program(&program, &arg_refs) {
        Ok(o) => o,
        Err(e) => return Outcome::Failed(format!("kernel interpreter: {e}")),
    };
    let wants = case.outputs().expect("corpus outputs");
    for (i, ((bytes, &buf), want)) in outputs.iter().zip(&program.results).zip(&wants).enumerate() {
        let shape = program.buffers[buf.0 as usize].shape.clone();
        let got = Literal::from_physical_bytes(Shape::Array(shape), bytes.clone()).expect("decode result");
        if let Err(m) = tolerance::check(&got, want) {
            return Outcome::Failed(format!("output {i} {m}"));
        }
    }
    Outcome::Pass(program.kernels.len())
}

#[test]
fn corpus_lowers_and_matches_xla_through_the_kernel_interpreter() {
    let (cases, selected) = Case::list_selected(&shared_dir().join("corpus")).expect("corpus dir");
    let (mut pass, mut skipped, mut failures) = (0, 0, Vec::new());
    let mut unsupported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for dir in &cases {
        let case = &Case::load(dir).expect("corpus case loads");
        let name = case.name.clone();
        let shown = if name.starts_with("bench_") {
            skipped += 1;
            "skipped (bench)".to_string()
        } else {
            match run_case(case, true) {
                Outcome::Pass(kernels) => {
                    pass += 1;
                    // Without fusion every op is its own kernel: the same answers, so a
                    // fusion bug shows as a disagreement.
                    match run_case(case, false) {
                        Outcome::Pass(unfused) => format!("pass ({kernels} kernels; unfused {unfused})"),
                        Outcome::Failed(m) | Outcome::Unsupported(m) | Outcome::Skipped(m) => {
                            failures.push(format!("{name}: passes fused but not unfused: {m}"));
                            format!("FAILED unfused: {m}")
                        }
                    }
                }
                Outcome::Skipped(why) => {
                    skipped += 1;
                    format!("skipped ({why})")
                }
                Outcome::Unsupported(what) => {
                    unsupported.entry(what.clone()).or_default().push(name.clone());
                    format!("unsupported ({what})")
                }
                Outcome::Failed(m) => {
                    failures.push(format!("{name}: {m}"));
                    format!("FAILED {m}")
                }
            }
        };
        println!("{name:40} {shown}");
    }
    let n_unsupported: usize = unsupported.values().map(Vec::len).sum();
    println!("\npass {pass}, unsupported {n_unsupported}, skipped {skipped}, failed {}", failures.len());
    for (what, cases) in &unsupported {
        println!("  unsupported {what}: {}", cases.join(", "));
    }
    let known = |name: &str| KNOWN_FAILURES.iter().any(|(k, _)| *k == name);
    let unexpected: Vec<&String> = failures.iter().filter(|f| !known(f.split(':').next().unwrap_or(""))).collect();
    let failed_names: Vec<&str> = failures.iter().filter_map(|f| f.split(':').next()).collect();
    let stale: Vec<&str> = KNOWN_FAILURES.iter().map(|(k, _)| *k).filter(|k| !failed_names.contains(k)).collect();
    for (name, why) in KNOWN_FAILURES {
        println!("  known failure {name}: {why}");
    }
    assert!(
        unexpected.is_empty(),
        "unexpected failures:\n{}",
        unexpected.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
    if selected {
        println!("TESSERA_CASES selects {} cases: pass counts and known failures not checked", cases.len());
        return;
    }
    assert!(stale.is_empty(), "known failures that no longer fail (remove them from KNOWN_FAILURES): {stale:?}");
    assert!(pass >= EXPECTED_PASSING, "{pass} cases pass, fewer than the {EXPECTED_PASSING} that passed before");
}
