//! XLA's HLO parser conformance suite (`shared/parser-suite`): round trips byte for byte,
//! non-round-trip inputs printing to their expected text, and inputs that must be rejected.

mod common;

use common::shared_dir;
use std::fs;
use std::path::{Path, PathBuf};

use tessera_hlo::text::{parse_module, print_module, PrintOptions};

fn suite_dir() -> PathBuf {
    shared_dir().join("parser-suite")
}

fn index_rows(dir: &Path) -> Vec<Vec<String>> {
    let text = fs::read_to_string(dir.join("INDEX.tsv")).expect("INDEX.tsv");
    text.lines().skip(1).filter(|l| !l.is_empty()).map(|l| l.split('\t').map(str::to_string).collect()).collect()
}

/// Prints, re-parses and prints again: the second printout must equal the first.
fn stable(text: &str, options: &PrintOptions) -> Result<String, String> {
    let module = parse_module(text).map_err(|e| format!("parse: {e}"))?;
    let printed = print_module(&module, options);
    let again = parse_module(&printed).map_err(|e| format!("reparse: {e}\n{printed}"))?;
    let reprinted = print_module(&again, options);
    if reprinted != printed {
        return Err(format!("unstable print:\n{printed}\n---\n{reprinted}"));
    }
    Ok(printed)
}

#[test]
fn roundtrip() {
    let dir = suite_dir();
    let dir = dir.join("roundtrip");
    let rows = index_rows(&dir);
    let (mut parsed, mut identical, mut failures) = (0, 0, Vec::new());
    for row in &rows {
        let text = fs::read_to_string(dir.join(&row[0])).expect("case file");
        let options = if row[1] == "long" { PrintOptions::long() } else { PrintOptions::short() };
        match stable(&text, &PrintOptions::long()).and_then(|_| stable(&text, &options)) {
            Ok(printed) => {
                parsed += 1;
                if printed == text {
                    identical += 1;
                } else {
                    failures.push(format!("{}: differs\n--- expected\n{text}--- printed\n{printed}", row[0]));
                }
            }
            Err(e) => failures.push(format!("{}: {e}", row[0])),
        }
    }
    for f in &failures {
        eprintln!("{f}");
    }
    println!("roundtrip parsed and print-stable: {parsed}/{}", rows.len());
    println!("roundtrip byte-identical: {identical}/{}", rows.len());
    assert_eq!(parsed, rows.len());
    assert!(identical >= 175, "regression in byte-identical round trips");
}

#[test]
fn nonroundtrip() {
    let dir = suite_dir();
    let dir = dir.join("nonroundtrip");
    let rows = index_rows(&dir);
    let (mut parsed, mut matching, mut failures) = (0, 0, Vec::new());
    for row in &rows {
        let input = fs::read_to_string(dir.join(&row[0])).expect("input file");
        let expected = fs::read_to_string(dir.join(&row[1])).expect("expected file");
        let mut all_parse = true;
        if let Err(e) = stable(&expected, &PrintOptions::short()) {
            failures.push(format!("{} (expected file): {e}", row[1]));
            all_parse = false;
        }
        match stable(&input, &PrintOptions::short()) {
            Ok(printed) => {
                if all_parse {
                    parsed += 1;
                }
                if printed.trim() == expected.trim() {
                    matching += 1;
                } else {
                    failures.push(format!("{}: differs\n--- expected\n{expected}\n--- printed\n{printed}", row[0]));
                }
            }
            Err(e) => failures.push(format!("{}: {e}", row[0])),
        }
    }
    for f in &failures {
        eprintln!("{f}");
    }
    println!("nonroundtrip parsed and print-stable: {parsed}/{}", rows.len());
    println!("nonroundtrip printing as expected: {matching}/{}", rows.len());
    assert_eq!(parsed, rows.len());
    assert!(matching >= 11, "regression in non-round-trip printing");
}

#[test]
fn errors() {
    let dir = suite_dir();
    let dir = dir.join("errors");
    let rows = index_rows(&dir);
    let (mut rejected, mut worded) = (0, 0);
    for row in &rows {
        let text = fs::read_to_string(dir.join(&row[0])).expect("case file");
        match parse_module(&text) {
            Err(e) => {
                rejected += 1;
                let expected = row.get(2).map_or("", String::as_str);
                // XLA's substrings use `\n` for newlines; ours names the same problem.
                let message = e.to_string();
                if !expected.is_empty()
                    && expected.split(" && ").all(|part| message.contains(&part.replace("\\n", "\n")))
                {
                    worded += 1;
                }
                if std::env::var_os("TESSERA_VERBOSE").is_some() {
                    eprintln!("{}: rejected: {e}   [XLA: {expected}]", row[0]);
                }
            }
            Ok(_) => {
                eprintln!("{}: ACCEPTED but must be rejected [XLA: {}]", row[0], row.get(2).map_or("", String::as_str))
            }
        }
    }
    let with_substring = rows.iter().filter(|r| r.get(2).is_some_and(|s| !s.is_empty())).count();
    println!("errors rejected: {rejected}/{}", rows.len());
    println!("errors whose message contains XLA's expected text: {worded}/{with_substring}");
    assert_eq!(rejected, rows.len(), "regression in rejected inputs");
    // The three left want XLA's full status text: the source line under the message
    // (UnterminatedComment), "was parsing L:C: error:" (CrossComputationLookup) and
    // "error: " before the message (TranscendentalAccuracyInvalidOp).
    assert_eq!(worded, 85, "expected-substring matches changed; update the count");
}
