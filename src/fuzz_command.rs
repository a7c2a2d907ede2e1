//! `tessera fuzz`: generate random programs, run each on the interpreter and both JIT tiers
//! (logical and physical I/O), and count every disagreement, refusal and error. Program `i`
//! of a run with `--seed S` has seed `S + i`, so `--seed S+i --count 1` re-runs it; with
//! `--save DIR` every failing program is written to `DIR/seed-<seed>.hlo` (its header
//! carries the seed, argument distributions and checks; the problems follow as comments),
//! and the program about to run is always in `DIR/current.hlo`, so even a crash leaves it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tessera::differential::{generate, Backends, Options, Verdict};
use tessera::table::Table;
use tessera::{Backend, ClientOptions};

use crate::progress::Progress;

pub struct FuzzArgs {
    pub count: u64,
    pub seed: u64,
    pub save: Option<PathBuf>,
    pub threads: Option<usize>,
}

#[derive(Default, Clone, Copy)]
struct Tally {
    pass: u64,
    mismatch: u64,
    known: u64,
    refused: u64,
    failed: u64,
}

/// Returns whether every program passed.
pub fn fuzz(a: &FuzzArgs) -> Result<bool, String> {
    if let Some(dir) = &a.save {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let backends =
        Backends::new(&ClientOptions { threads: a.threads, ..Default::default() }).map_err(|e| e.to_string())?;
    let done = Arc::new(AtomicU64::new(0));
    let failing = Arc::new(AtomicU64::new(0));
    let _progress = {
        let (done, failing, count) = (done.clone(), failing.clone(), a.count);
        Progress::periodic(move || {
            format!(
                "fuzz: {} of {count} programs, {} failing",
                done.load(Ordering::Relaxed),
                failing.load(Ordering::Relaxed)
            )
        })
    };
    let mut tallies = [(Backend::Cranelift, Tally::default()), (Backend::Llvm, Tally::default())];
    let mut generator_errors = 0u64;
    for i in 0..a.count {
        let seed = a.seed.wrapping_add(i);
        let program = match generate(seed, &Options::default()) {
            Ok(p) => p,
            Err(e) => {
                generator_errors += 1;
                failing.fetch_add(1, Ordering::Relaxed);
                eprintln!("tessera: fuzz seed {seed}: {}", e.lines().next().unwrap_or_default());
                save(a, seed, &format!("// {e}\n"), &[])?;
                continue;
            }
        };
        if let Some(dir) = &a.save {
            let path = dir.join("current.hlo");
            std::fs::write(&path, &program.text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let report = backends.run(&program.module, &program.header);
        if report.reference.is_err() {
            generator_errors += 1;
        }
        for (backend, verdict) in &report.tiers {
            let Some((_, t)) = tallies.iter_mut().find(|(b, _)| b == backend) else { continue };
            match verdict {
                Verdict::Pass => t.pass += 1,
                Verdict::Mismatch(_) => t.mismatch += 1,
                Verdict::KnownRefusal(_) => t.known += 1,
                Verdict::Refused(_) => t.refused += 1,
                Verdict::Failed(_) => t.failed += 1,
            }
        }
        if report.is_failure() {
            failing.fetch_add(1, Ordering::Relaxed);
            let problems = report.problems();
            for p in &problems {
                eprintln!("tessera: fuzz seed {seed}: {}", first_line(p));
            }
            save(a, seed, &program.text, &problems)?;
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
    drop(_progress);
    if let Some(dir) = &a.save {
        let _ = std::fs::remove_file(dir.join("current.hlo"));
    }
    let mut table = Table::new(&["backend", "programs", "pass", "mismatch", "refused", "refused (known)", "errors"])
        .align_right(&[1, 2, 3, 4, 5, 6]);
    for (backend, t) in &tallies {
        let programs = t.pass + t.mismatch + t.known + t.refused + t.failed;
        table.row(vec![
            backend.name().to_string(),
            programs.to_string(),
            t.pass.to_string(),
            t.mismatch.to_string(),
            t.refused.to_string(),
            t.known.to_string(),
            t.failed.to_string(),
        ]);
    }
    println!(
        "fuzz: {} programs from seed {} ({} the generator or interpreter could not run)",
        a.count, a.seed, generator_errors
    );
    print!("{}", table.render());
    let ok = generator_errors == 0 && tallies.iter().all(|(_, t)| t.mismatch + t.refused + t.failed == 0);
    Ok(ok)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

fn save(a: &FuzzArgs, seed: u64, text: &str, problems: &[String]) -> Result<(), String> {
    let Some(dir) = &a.save else { return Ok(()) };
    let path = dir.join(format!("seed-{seed}.hlo"));
    let mut body = String::new();
    for p in problems {
        for l in p.lines() {
            body.push_str("// problem: ");
            body.push_str(l);
            body.push('\n');
        }
    }
    body.push_str(text);
    std::fs::write(&path, body).map_err(|e| format!("{}: {e}", path.display()))
}
