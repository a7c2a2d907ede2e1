//! Bad or unusual input never panics the lowering: every module of the parser suite (and the
//! corpus) that parses goes through `lower_module`, with fusion on and off, and must come
//! back as a program or an error. A pipeline error (a pass broke the module) is a bug too.

mod common;

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use common::shared_dir;
use tessera_hlo::text::parse_module;
use tessera_lower::{lower_module, LowerError, LowerOptions};

fn hlo_files(dir: PathBuf, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(&dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            hlo_files(p, out);
        } else if p.extension().is_some_and(|x| x == "hlo") {
            out.push(p);
        }
    }
}

#[test]
fn lowering_never_panics_on_the_parser_suite_and_corpus() {
    let shared = shared_dir();
    let mut files = Vec::new();
    hlo_files(shared.join("parser-suite"), &mut files);
    hlo_files(shared.join("corpus"), &mut files);
    files.sort();
    let (mut lowered, mut refused, mut panics, mut broken) = (0, 0, Vec::new(), Vec::new());
    for f in &files {
        let Ok(text) = fs::read_to_string(f) else { continue };
        let Ok(module) = parse_module(&text) else { continue };
        for fusion in [true, false] {
            let options = LowerOptions { fusion, dump_dir: None, ..LowerOptions::default() };
            match catch_unwind(AssertUnwindSafe(|| lower_module(&module, &options))) {
                Ok(Ok(_)) => lowered += 1,
                Ok(Err(e @ LowerError::Pipeline { .. })) => broken.push(format!("{}: {e}", f.display())),
                Ok(Err(e)) => {
                    refused += 1;
                    if !matches!(e, LowerError::Unsupported { .. } | LowerError::Verify(_)) {
                        println!("{}: {e}", f.display());
                    }
                }
                Err(_) => panics.push(format!("{} (fusion {fusion})", f.display())),
            }
        }
    }
    println!("{} files: {lowered} lowerings, {refused} errors, {} panics", files.len(), panics.len());
    assert!(lowered > 0);
    assert!(panics.is_empty(), "lower_module panicked on:\n{}", panics.join("\n"));
    assert!(broken.is_empty(), "a pass broke the module:\n{}", broken.join("\n"));
}
