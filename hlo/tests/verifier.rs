//! Verifier conformance: every module under `tests/verifier/invalid/` is rejected for the
//! stated reason at the stated instruction, and every corpus module verifies.
//!
//! Each invalid module starts with two comment lines:
//!
//! ```text
//! // expect: <substring of the error's Display>
//! // instruction: <name of the instruction the error names, or - for none>
//! ```

mod common;

use common::shared_dir;
use std::fs;
use std::path::{Path, PathBuf};

use tessera_hlo::text::parse_module;
use tessera_hlo::verify::{verify, verify_all};

/// The value of a `// key: value` header line.
fn header<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().map_while(|l| l.strip_prefix("//")).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

fn hlo_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "hlo"))
        .collect();
    files.sort();
    files
}

#[test]
fn invalid_modules_are_rejected() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/verifier/invalid");
    let files = hlo_files(&dir);
    assert!(files.len() >= 60, "expected at least 60 invalid modules, found {}", files.len());
    let mut failures = Vec::new();
    let mut rules = std::collections::BTreeSet::new();
    for path in &files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {name}: {e}"));
        let Some(expect) = header(&text, "expect") else {
            failures.push(format!("{name}: no `// expect:` header"));
            continue;
        };
        let instruction = header(&text, "instruction").unwrap_or("-");
        let module = match parse_module(&text) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{name}: does not parse: {e}"));
                continue;
            }
        };
        match verify(&module) {
            Ok(()) => failures.push(format!("{name}: accepted, expected `{expect}`")),
            Err(e) => {
                rules.insert(e.rule);
                let shown = e.to_string();
                if !shown.contains(expect) {
                    failures.push(format!("{name}: error `{shown}` does not contain `{expect}`"));
                }
                if instruction != "-" && e.instruction.as_deref() != Some(instruction) {
                    failures.push(format!("{name}: error `{shown}` does not name instruction %{instruction}"));
                }
            }
        }
        // Collecting every finding must agree with the first one and must not panic.
        assert!(!verify_all(&module).is_empty(), "{name}: verify_all found nothing");
    }
    assert!(
        failures.is_empty(),
        "{} of {} invalid modules misbehaved:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    println!("{} invalid modules rejected as expected, by {} distinct rules", files.len(), rules.len());
}

#[test]
fn corpus_modules_verify() {
    let corpus = shared_dir().join("corpus");
    let entries = fs::read_dir(&corpus).expect("readable corpus folder");
    let mut cases: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect();
    cases.sort();
    let mut failures = Vec::new();
    let mut verified = 0;
    let mut parse_failures = 0;
    for case in &cases {
        for file in ["module.hlo", "xla_optimized.hlo"] {
            let path = case.join(file);
            let Ok(text) = fs::read_to_string(&path) else { continue };
            let module = match parse_module(&text) {
                Ok(m) => m,
                Err(e) => {
                    parse_failures += 1;
                    failures.push(format!("{}: does not parse: {e}", path.display()));
                    continue;
                }
            };
            let errors = verify_all(&module);
            if errors.is_empty() {
                verified += 1;
            } else {
                let shown: Vec<String> = errors.iter().take(3).map(ToString::to_string).collect();
                failures.push(format!("{}: {}", path.display(), shown.join("; ")));
            }
        }
    }
    println!(
        "corpus: {verified} modules verified, {} rejected, {parse_failures} unparsed",
        failures.len() - parse_failures
    );
    assert!(verified > 0, "no corpus module found under {}", corpus.display());
    assert!(failures.is_empty(), "{} corpus modules failed:\n{}", failures.len(), failures.join("\n"));
}

/// The parser suite's round-trip modules come from XLA's own parser tests. All are valid HLO
/// except these, which XLA's verifier rejects too (after-all takes only tokens).
const PARSER_SUITE_INVALID: &[&str] = &["171_AfterAllWithMultipleOperands.hlo", "172_AddDependency.hlo"];

#[test]
fn parser_suite_modules_verify() {
    let dir = shared_dir().join("parser-suite/roundtrip");
    let mut verified = 0;
    let mut failures = Vec::new();
    let mut rejected = Vec::new();
    for path in hlo_files(&dir) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let Ok(text) = fs::read_to_string(&path) else { continue };
        let Ok(module) = parse_module(&text) else { continue };
        let known_invalid = PARSER_SUITE_INVALID.contains(&name.as_str());
        match verify(&module) {
            Ok(()) if known_invalid => {
                failures.push(format!("{name}: accepted, but after-all of a non-token is invalid"))
            }
            Ok(()) => verified += 1,
            Err(e) if known_invalid && e.rule == "token.operand" => rejected.push(name),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    println!("parser suite: {verified} modules verified, {} rejected as expected", rejected.len());
    assert!(failures.is_empty(), "{} parser-suite modules misbehaved:\n{}", failures.len(), failures.join("\n"));
}
