//! Filetests, as in cranelift: each `filetests/*.hlo` file holds a directive line, an HLO
//! module, a marker line and the blessed output. The test runs the directive on the module
//! and compares the output exactly; `TESSERA_BLESS=1` rewrites the expected part instead.
//!
//! Directives:
//! - `// RUN: passes` runs the standard pipeline; `// RUN: passes dce,fusion` runs the named
//!   passes in order. Output: the module in XLA's short form, then each pass's report (fusion
//!   decisions with their reasons) as `//` lines.
//! - `// RUN: kernels` lowers the module (`lower_module`, fusion on; `kernels nofusion` turns
//!   it off) and prints the kernels, then any kernel verifier finding as a `//` line.
//! - `// RUN: program` prints the whole program (buffers, kernels, launches).

use std::fs;
use std::path::{Path, PathBuf};

use tessera_hlo::text::{parse_module, print_module, PrintOptions};
use tessera_hlo::verify::verify;
use tessera_lower::kernel::verify_kernel;
use tessera_lower::passes;
use tessera_lower::{lower_module, LowerOptions, Pipeline};

const MARKER: &str = "// ----- expected output -----";

fn run_directive(directive: &str, hlo: &str) -> Result<String, String> {
    let mut words = directive.split_whitespace();
    let mode = words.next().unwrap_or("");
    let args: Vec<&str> = words.collect();
    let mut module = parse_module(hlo).map_err(|e| format!("parse: {e}"))?;
    match mode {
        "passes" => {
            let mut pipeline = match args.first() {
                None => passes::standard_pipeline(true, true),
                Some(list) => {
                    let mut p = Pipeline::new();
                    for name in list.split(',') {
                        p.add_boxed(passes::by_name(name).ok_or_else(|| format!("unknown pass {name}"))?);
                    }
                    p
                }
            };
            let outcome = pipeline.run(&mut module);
            let mut out = match outcome {
                Ok(_) => {
                    let printed = print_module(&module, &PrintOptions::short());
                    round_trip(&printed)?;
                    printed
                }
                Err(e) => format!("error: {e}\n"),
            };
            for (_, lines) in pipeline.reports() {
                for l in lines {
                    out.push_str(&format!("// {l}\n"));
                }
            }
            Ok(out)
        }
        "kernels" | "program" => {
            let options =
                LowerOptions { fusion: !args.contains(&"nofusion"), dump_dir: None, ..LowerOptions::default() };
            let program = match lower_module(&module, &options) {
                Ok(p) => p,
                Err(e) => return Ok(format!("error: {e}\n")),
            };
            let mut out = if mode == "program" {
                format!("{program}")
            } else {
                program.kernels.iter().map(|k| format!("{k}\n")).collect()
            };
            // A verifier finding is part of the output: it is blessed only knowingly, and
            // the file changes when the kernel or the verifier does.
            for k in &program.kernels {
                if let Err(e) = verify_kernel(k) {
                    out.push_str(&format!("// kernel verifier: {e}\n"));
                }
            }
            Ok(out)
        }
        other => Err(format!("unknown directive '{other}'")),
    }
}

/// What a pass prints must parse back (fusions included), verify, and print the same.
fn round_trip(printed: &str) -> Result<(), String> {
    let again = parse_module(printed).map_err(|e| format!("the output does not parse back: {e}"))?;
    verify(&again).map_err(|e| format!("the output does not verify: {e}"))?;
    let reprinted = print_module(&again, &PrintOptions::short());
    if reprinted != printed {
        return Err(format!("the output prints differently after parsing:\n{reprinted}"));
    }
    Ok(())
}

fn check_file(path: &Path, bless: bool) -> Result<(), String> {
    let text = fs::read_to_string(path).map_err(|e| e.to_string())?;
    let (input, expected) = match text.split_once(MARKER) {
        Some((i, e)) => (i.to_string(), e.strip_prefix('\n').unwrap_or(e).to_string()),
        None => (text.clone(), String::new()),
    };
    let directive =
        input.lines().find_map(|l| l.trim().strip_prefix("// RUN:")).ok_or("no '// RUN:' line")?.trim().to_string();
    let hlo: String = input.lines().filter(|l| !l.trim_start().starts_with("// RUN:")).collect::<Vec<_>>().join("\n");
    let actual = run_directive(&directive, &hlo)?;
    if actual == expected {
        return Ok(());
    }
    if bless {
        let mut new = input.trim_end().to_string();
        new.push('\n');
        new.push_str(MARKER);
        new.push('\n');
        new.push_str(&actual);
        fs::write(path, new).map_err(|e| e.to_string())?;
        return Ok(());
    }
    Err(format!("output differs (TESSERA_BLESS=1 rewrites it)\n--- expected\n{expected}\n--- actual\n{actual}"))
}

#[test]
fn filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let bless = std::env::var_os("TESSERA_BLESS").is_some_and(|v| v == "1");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("filetests folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "hlo"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no filetests in {}", dir.display());
    let mut failures = Vec::new();
    for f in &files {
        if let Err(e) = check_file(f, bless) {
            failures.push(format!("{}: {e}", f.display()));
        }
    }
    println!("{} filetests, {} failed", files.len(), failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
