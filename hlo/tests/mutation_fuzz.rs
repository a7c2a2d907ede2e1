//! A bounded mutation fuzzer over the parser, printer and verifier, seeded with every module
//! of the corpus and XLA's parser suite. No input may panic or take more than a moment, and
//! any module that verifies must print to text that parses back and prints identically.
//!
//! `./x test` runs a fixed number of inputs; `TESSERA_FUZZ_SECS=600` runs for that long
//! instead and reports the executions. A failing input is written to
//! `target/fuzz-failures/` so it can become a regression test.

mod common;

use common::shared_dir;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tessera_testkit::Rng;

use tessera_hlo::text::{parse_module, print_module, PrintOptions};
use tessera_hlo::verify::verify;

const DEFAULT_EXECUTIONS: u64 = 200_000;
/// Seeds larger than this slow every execution without adding grammar the small ones lack.
const MAX_SEED_BYTES: u64 = 24 * 1024;
const SLOW_INPUT: Duration = Duration::from_secs(2);

/// Tokens that steer mutations towards the grammar's corners.
const DICTIONARY: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ",",
    "=",
    ":",
    "%",
    "*",
    "?",
    "<=",
    "->",
    "/*",
    "*/",
    "//",
    "\"",
    "-1",
    "0",
    "1",
    "2147483648",
    "-9223372036854775808",
    "99999999999999999999",
    "1e999",
    "nan",
    "-nan",
    "nan(0x1)",
    "inf",
    "f32",
    "bf16",
    "pred",
    "s4",
    "u64",
    "c64",
    "token[]",
    "()",
    "T(",
    "T(*,2)",
    "E(1)",
    "S(1)",
    "L(8)",
    "ROOT ",
    "ENTRY ",
    "HloModule m\n",
    "parameter(0)",
    "constant(",
    "dimensions={",
    "to_apply=",
    "calls=",
    "window={size=2x2}",
    "dim_labels=b01f_01io->b01f",
    "slice={[0:2]}",
    "padding=0_0",
    "lhs_contracting_dims={1}",
    "index=",
    "{0,1}",
    "f32[2,2]{0,1}",
    "s32[<=4]",
    "f32[?]",
    "sharding={replicated}",
    "metadata={op_name=\"x\"}",
];

fn collect_seeds(dir: &Path, out: &mut Vec<Vec<u8>>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            collect_seeds(&path, out);
        } else if path.extension().is_some_and(|e| e == "hlo")
            && path.metadata().is_ok_and(|m| m.len() <= MAX_SEED_BYTES)
        {
            if let Ok(bytes) = std::fs::read(&path) {
                out.push(bytes);
            }
        }
    }
}

/// Words (names, numbers) of a text, for mutations that swap one for another: they make
/// the semantic errors (wrong operand, wrong type, wrong dimension) a byte flip rarely does.
fn words(text: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        if text[i].is_ascii_alphanumeric() || text[i] == b'%' {
            let start = i;
            while i < text.len() && (text[i].is_ascii_alphanumeric() || b"%_.-".contains(&text[i])) {
                i += 1;
            }
            out.push((start, i));
        } else {
            i += 1;
        }
    }
    out
}

fn mutate(rng: &mut Rng, input: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = input.to_vec();
    for _ in 0..1 + rng.index(4) {
        let len = data.len();
        match rng.index(7) {
            0 if len > 0 => {
                let i = rng.index(len);
                data[i] = b" \n{}()[],=:%*?<>-.0123456789abcdefxyzT_\"/"[rng.index(40)];
            }
            1 if len > 0 => {
                let start = rng.index(len);
                let end = (start + 1 + rng.index(24)).min(len);
                data.drain(start..end);
            }
            2 if len > 0 => {
                let start = rng.index(len);
                let end = (start + 1 + rng.index(64)).min(len);
                let span = data[start..end].to_vec();
                let at = rng.index(len + 1);
                data.splice(at..at, span);
            }
            3 => {
                let token = DICTIONARY[rng.index(DICTIONARY.len())].as_bytes();
                let at = rng.index(len + 1);
                data.splice(at..at, token.iter().copied());
            }
            4 => {
                let w = words(&data);
                if w.len() >= 2 {
                    let (a0, a1) = w[rng.index(w.len())];
                    let (b0, b1) = w[rng.index(w.len())];
                    let replacement = data[b0..b1].to_vec();
                    data.splice(a0..a1, replacement);
                }
            }
            5 => {
                let other = &seeds[rng.index(seeds.len())];
                if !other.is_empty() {
                    let start = rng.index(other.len());
                    let end = (start + 1 + rng.index(200)).min(other.len());
                    let at = rng.index(len + 1);
                    data.splice(at..at, other[start..end].iter().copied());
                }
            }
            _ => {
                // Lines carry whole instructions: dropping or repeating one breaks references.
                let lines: Vec<usize> = data.iter().enumerate().filter(|(_, &b)| b == b'\n').map(|(i, _)| i).collect();
                if lines.len() >= 2 {
                    let k = rng.index(lines.len() - 1);
                    let (s, e) = (lines[k] + 1, lines[k + 1] + 1);
                    if rng.index(2) == 0 {
                        data.drain(s..e);
                    } else {
                        let line = data[s..e].to_vec();
                        data.splice(s..s, line);
                    }
                }
            }
        }
    }
    data
}

/// How far an input got.
#[derive(Clone, Copy, PartialEq)]
enum Reached {
    Rejected,
    Parsed,
    Verified,
}

/// Runs one input through every stage; says how far it got, or which property broke.
fn check(input: &[u8]) -> Result<Reached, String> {
    let Ok(text) = std::str::from_utf8(input) else {
        return Ok(Reached::Rejected);
    };
    let Ok(module) = parse_module(text) else {
        return Ok(Reached::Rejected);
    };
    let verified = verify(&module).is_ok();
    let long = print_module(&module, &PrintOptions::long());
    let short = print_module(&module, &PrintOptions::short());
    // Whatever the parser accepted, it must accept again in printed form.
    for printed in [&long, &short] {
        parse_module(printed).map_err(|e| format!("printed module does not parse: {e}\n{printed}"))?;
    }
    if verified {
        // Each form must be a fixed point of parse-then-print in that same form (the short
        // form drops metadata, so it is compared with itself, not with the long form).
        for (printed, options) in [(&long, PrintOptions::long()), (&short, PrintOptions::short())] {
            let again = parse_module(printed).map_err(|e| format!("printed module does not parse: {e}\n{printed}"))?;
            let reprinted = print_module(&again, &options);
            if &reprinted != printed {
                return Err(format!("printing is not stable:\n{printed}\n---\n{reprinted}"));
            }
        }
    }
    Ok(if verified { Reached::Verified } else { Reached::Parsed })
}

fn save_failure(input: &[u8], n: u64) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("failure-{n}.hlo"));
    let _ = std::fs::write(&path, input);
    path
}

#[test]
fn mutated_modules_never_panic_or_hang() {
    let mut seeds = Vec::new();
    collect_seeds(&shared_dir(), &mut seeds);
    assert!(!seeds.is_empty(), "no seed modules under {}", shared_dir().display());
    let budget = std::env::var("TESSERA_FUZZ_SECS").ok().and_then(|s| s.parse::<u64>().ok()).map(Duration::from_secs);
    let executions =
        std::env::var("TESSERA_FUZZ_EXECUTIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_EXECUTIONS);
    let seed = std::env::var("TESSERA_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x7E55E4A);
    let mut rng = Rng::new(seed);
    // A quiet hook: the panic is reported below with the input that caused it.
    let default_hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let start = Instant::now();
    let mut n = 0u64;
    let (mut parsed, mut verified) = (0u64, 0u64);
    let mut failure = None;
    while budget.map_or(n < executions, |b| start.elapsed() < b) {
        let base = &seeds[rng.index(seeds.len())];
        let input = mutate(&mut rng, base, &seeds);
        let t = Instant::now();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| check(&input)));
        let took = t.elapsed();
        n += 1;
        let problem = match outcome {
            Err(payload) => Some(format!(
                "panic: {}",
                payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or(payload.downcast_ref::<&str>().copied())
                    .unwrap_or("?")
            )),
            Ok(Err(e)) => Some(e),
            Ok(Ok(_)) if took > SLOW_INPUT => Some(format!("took {took:?}")),
            Ok(Ok(reached)) => {
                parsed += u64::from(reached != Reached::Rejected);
                verified += u64::from(reached == Reached::Verified);
                None
            }
        };
        if let Some(problem) = problem {
            failure = Some((problem, save_failure(&input, n)));
            break;
        }
    }
    panic::set_hook(default_hook);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "mutation fuzz: {n} executions in {secs:.1} s ({:.0}/s), {parsed} parsed, {verified} verified, {} seeds",
        n as f64 / secs.max(1e-9),
        seeds.len()
    );
    if let Some((problem, path)) = failure {
        panic!("input {} broke a property: {problem}", path.display());
    }
}
