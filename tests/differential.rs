//! Differential testing in CI: a bounded number of generated programs (fixed seeds) and every
//! saved regression run on the interpreter and both JIT tiers, in logical and physical I/O,
//! and must agree (`tessera::differential`). `tessera fuzz` runs the same harness at scale.

use std::path::{Path, PathBuf};

use tessera::differential::{generate, Backends, Header, Options};
use tessera::ClientOptions;
use tessera_hlo::text::parse_module;
use tessera_lower::passes::AlgebraicSimplifier;
use tessera_lower::Pass;

/// Programs per CI run; `TESSERA_FUZZ_COUNT` overrides it (and `TESSERA_FUZZ_SEED` the first
/// seed) for a longer local run.
const COUNT: u64 = 120;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn backends() -> Backends {
    // One thread: the cases are small, and CI runs test binaries side by side.
    Backends::new(&ClientOptions { threads: Some(1), ..Default::default() }).expect("clients")
}

#[test]
fn generated_programs_agree_on_every_backend() {
    let (count, first) = (env_u64("TESSERA_FUZZ_COUNT", COUNT), env_u64("TESSERA_FUZZ_SEED", 0x5eed));
    let backends = backends();
    let mut failures = Vec::new();
    for seed in first..first + count {
        let program = match generate(seed, &Options::default()) {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("seed {seed}: {e}"));
                continue;
            }
        };
        let report = backends.run(&program.module, &program.header);
        if report.is_failure() {
            failures.push(format!("seed {seed}:\n  {}\n{}", report.problems().join("\n  "), program.text));
        }
    }
    println!("{count} generated programs from seed {first}: {} failing", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn regressions() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential/regressions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "hlo"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_regression_agrees_on_every_backend() {
    let files = regressions();
    assert!(!files.is_empty(), "no regression files found");
    let backends = backends();
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let header = Header::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let module = parse_module(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let report = backends.run(&module, &header);
        assert_eq!(report.tiers.len(), 2, "{}: both JIT tiers ran", path.display());
        if report.is_failure() {
            failures.push(format!("{}:\n  {}", path.display(), report.problems().join("\n  ")));
        }
    }
    println!("{} regressions", files.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The generator makes the patterns the passes and the lowering rewrite; this one, a scan
/// writing its loop state in place, must keep turning up in the seeds CI runs.
#[test]
fn generated_programs_include_scans_of_loop_state() {
    let first = env_u64("TESSERA_FUZZ_SEED", 0x5eed);
    let scans = (first..first + COUNT)
        .filter_map(|seed| generate(seed, &Options::default()).ok())
        // A while body's name ends in its scan flag (`while_..._{scan}_body`).
        .filter(|p| p.text.contains("_true_body"))
        .count();
    eprintln!("{scans} of {COUNT} generated programs have a scan loop");
    assert!(scans > 0, "no generated program of {COUNT} has a scan loop");
}

/// Integer divisions and remainders by constant powers of two, which the simplifier turns into
/// shifts and masks (where the interpreter divides), must keep turning up too.
#[test]
fn generated_programs_include_integer_divisions_by_powers_of_two() {
    let first = env_u64("TESSERA_FUZZ_SEED", 0x5eed);
    let divisions = (first..first + COUNT)
        .filter_map(|seed| generate(seed, &Options::default()).ok())
        .filter(|p| {
            let Ok(mut module) = parse_module(&p.text) else { return false };
            let mut pass = AlgebraicSimplifier::default();
            pass.run(&mut module).is_ok() && pass.report().iter().any(|r| r.contains(">> k") || r.contains("% 2^k"))
        })
        .count();
    eprintln!("{divisions} of {COUNT} generated programs divide an integer by a power of two");
    assert!(divisions > 0, "no generated program of {COUNT} divides an integer by a power of two");
}
