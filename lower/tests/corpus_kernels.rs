//! Every corpus module through `lower_module` and the kernel interpreter: arguments go in as
//! physical bytes in the entry layouts, results come back decoded and are compared with
//! XLA:CPU's outputs within the case's tolerances. Modules the lowering does not support are
//! counted by reason; a lowering that fails otherwise, a kernel that faults or a wrong value
//! fails the test. Bench cases are skipped (large).

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common::{compare, parse_json, shared_dir, values, Json};
use tessera_hlo::npy::read_npy;
use tessera_hlo::text::parse_module;
use tessera_hlo::{Layout, Literal, Shape};
use tessera_lower::kernel::interp::run_program;
use tessera_lower::{lower_module, LowerError, LowerOptions};

/// Raise this when the lowering learns more; a drop means a regression.
const EXPECTED_PASSING: usize = 59;

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

fn run_case(case: &Path, fusion: bool) -> Outcome {
    let meta = fs::read(case.join("case.json")).expect("case.json");
    let meta = parse_json(&meta, &mut 0);
    let Ok(text) = fs::read_to_string(case.join("module.hlo")) else {
        return Outcome::Skipped("no module.hlo".into());
    };
    let module = parse_module(&text).expect("corpus modules parse");
    let program = match lower_module(&module, &LowerOptions { fusion, dump_dir: None }) {
        Ok(p) => p,
        Err(LowerError::Unsupported { what, .. }) => return Outcome::Unsupported(what),
        Err(e) => return Outcome::Failed(format!("lowering: {e}")),
    };
    let params = module.entry_comp().parameter_shapes();
    if params.iter().any(Shape::is_tuple) {
        return Outcome::Skipped("tuple parameter (no per-element arguments stored)".into());
    }
    let mut args: Vec<Vec<u8>> = Vec::new();
    for (i, (shape, &buf)) in params.iter().zip(&program.parameters).enumerate() {
        let path = case.join(format!("args/{i}.npy"));
        if !path.exists() {
            return Outcome::Skipped("arguments not stored".into());
        }
        let logical = read_npy(&path, &shape.without_layout()).expect("argument npy");
        let layout = program.buffers[buf.0 as usize].shape.layout_or_default();
        let physical = logical.relayout(&layout).expect("relayout argument");
        args.push(physical.physical_bytes().expect("array argument").to_vec());
    }
    let arg_refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let outputs = match run_program(&program, &arg_refs) {
        Ok(o) => o,
        Err(e) => return Outcome::Failed(format!("kernel interpreter: {e}")),
    };
    let tolerances = match meta.get("outputs") {
        Some(Json::Arr(o)) => o.clone(),
        _ => Vec::new(),
    };
    let mut checked = 0;
    for (i, (bytes, &buf)) in outputs.iter().zip(&program.results).enumerate() {
        let path = case.join(format!("expected/{i}.npy"));
        if !path.exists() {
            continue;
        }
        let shape = program.buffers[buf.0 as usize].shape.clone();
        let rank = shape.rank();
        let got = Literal::from_physical_bytes(Shape::Array(shape.clone()), bytes.clone())
            .and_then(|l| l.relayout(&Layout::row_major(rank)))
            .expect("decode result");
        let mut logical = shape.clone();
        logical.layout = None;
        let expected = read_npy(&path, &Shape::Array(logical)).expect("expected npy");
        let o = tolerances.get(i);
        let tol = |k: &str| o.and_then(|o| o.get(k)).and_then(Json::num).or_else(|| meta.get(k).and_then(Json::num));
        let (rtol, atol) = (tol("rtol").unwrap_or(0.0), tol("atol").unwrap_or(0.0));
        if let Err(m) = compare(&values(&got), &values(&expected), rtol, atol) {
            return Outcome::Failed(format!("output {i} {m}"));
        }
        checked += 1;
    }
    if checked == 0 {
        return Outcome::Skipped("no stored outputs".into());
    }
    Outcome::Pass(program.kernels.len())
}

#[test]
fn corpus_lowers_and_matches_xla_through_the_kernel_interpreter() {
    let dir = shared_dir().join("corpus");
    let mut cases: Vec<_> = fs::read_dir(&dir).expect("corpus dir").flatten().map(|e| e.path()).collect();
    cases.sort();
    let (mut pass, mut skipped, mut failures) = (0, 0, Vec::new());
    let mut unsupported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for case in cases.iter().filter(|p| p.join("case.json").exists()) {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
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
    assert!(stale.is_empty(), "known failures that no longer fail (remove them from KNOWN_FAILURES): {stale:?}");
    assert!(pass >= EXPECTED_PASSING, "{pass} cases pass, fewer than the {EXPECTED_PASSING} that passed before");
}
