//! `tessera compare`: compile one module on every backend, run each on the same arguments,
//! check every JIT tier against the interpreter, and print one table of compile time, run
//! time, speed-up and agreement.
//!
//! Arguments come from `--args DIR` (as for `tessera run`) or are generated per parameter
//! leaf from a fixed seed, so two runs of the command see the same values: floats uniform in
//! [-1, 1), signed integers in [-8, 8), unsigned ones in [0, 8), preds 0 or 1. Small
//! integers keep shifts, divisions and narrowing converts inside their defined ranges.
//!
//! Run times exclude compilation: arguments are transferred once into resident buffers and
//! every timed run is one `execute_into` (after one untimed run, whose results are checked).

use std::path::PathBuf;
use std::time::Duration;

use tessera::conformance::bench_args::{generate, Dist};
use tessera::conformance::case::{Expected, Output};
use tessera::conformance::{classify, tolerance, Outcome};
use tessera::table::Table;
use tessera::{Backend, CacheOutcome, Client, ClientOptions, CompileOptions, DeviceBuffer, Error, Executable};
use tessera_hlo::text::parse_module;
use tessera_hlo::{ArrayShape, ElementType, Literal, Shape};

use crate::progress::Progress;
use crate::run_command::{read_arguments, time_runs, transfer_arguments};

pub struct CompareArgs {
    pub module: PathBuf,
    pub args: Option<PathBuf>,
    pub runs: usize,
    pub threads: Option<usize>,
    pub strict_precision: bool,
    pub dump: Option<PathBuf>,
}

const BACKENDS: [Backend; 3] = [Backend::Interp, Backend::Cranelift, Backend::Llvm];

/// Seed of generated argument `i` is `SEED + i`.
const SEED: u64 = 0x7e55_e7a0;

/// How one backend did.
enum Row {
    Ran {
        compile: Duration,
        /// Loaded from the compile cache rather than compiled.
        cached: bool,
        median: Duration,
        outputs: Vec<Literal>,
    },
    /// It refused the module (an unsupported op or type, named in the message).
    Refused(String),
    /// Any other compile or run error.
    Failed(String),
}

/// Returns whether every tier that ran agrees with the interpreter; `Err` for errors that
/// stop the whole comparison (unreadable module or arguments).
pub fn compare(a: &CompareArgs) -> Result<bool, String> {
    let text = std::fs::read_to_string(&a.module).map_err(|e| format!("{}: {e}", a.module.display()))?;
    let module = parse_module(&text).map_err(|e| format!("{}:{e}", a.module.display()))?;
    let options = ClientOptions { threads: a.threads, ..ClientOptions::default() };

    let mut arguments: Option<Vec<Literal>> = None;
    let mut rows = Vec::new();
    let mut threads = 0;
    for backend in BACKENDS {
        let client = Client::with_options(backend, &options).map_err(|e| e.to_string())?;
        if backend != Backend::Interp {
            threads = client.threads();
        }
        let compiled = {
            let _progress = Progress::after_a_second(format!("compiling {} with {backend}", a.module.display()));
            let options = CompileOptions {
                dump_dir: a.dump.as_ref().map(|d| d.join(backend.name())),
                ..CompileOptions::with_excess_precision(!a.strict_precision)
            };
            client.compile(&module, &options)
        };
        let exe = match compiled {
            Ok(exe) => exe,
            Err(e) => {
                rows.push((backend, error_row(e)));
                continue;
            }
        };
        // Arguments are made once, from the first executable's signature (every backend's
        // is the module's), so all tiers see the same values.
        if arguments.is_none() {
            arguments = Some(match &a.args {
                Some(dir) => read_arguments(&exe, dir, false)?,
                None => random_arguments(&exe)?,
            });
        }
        let literals = arguments.as_deref().unwrap_or_default();
        rows.push((backend, run_tier(&exe, literals, a.runs)?));
    }

    let source = match &a.args {
        Some(dir) => format!("arguments from {}", dir.display()),
        None => "generated arguments (seeded)".to_string(),
    };
    println!("{}: {source}, median of {} runs, {threads} threads", a.module.display(), a.runs);
    let (table, agree) = render(&rows, a.runs);
    print!("{table}");
    Ok(agree)
}

fn error_row(e: Error) -> Row {
    match classify(e) {
        Outcome::Unsupported(m) => Row::Refused(m),
        Outcome::Failed(m) | Outcome::Mismatch(m) => Row::Failed(m),
        Outcome::Pass { .. } => Row::Failed("an error classified as a pass".into()),
    }
}

/// One checked run, then `runs` timed ones on the same resident buffers.
fn run_tier(exe: &Executable, literals: &[Literal], runs: usize) -> Result<Row, String> {
    let args = transfer_arguments(exe, literals)?;
    let arg_refs: Vec<&DeviceBuffer> = args.iter().collect();
    let mut results = exe.new_results().map_err(|e| e.to_string())?;
    let first = {
        let _progress = Progress::after_a_second(format!("running with {}", exe.backend()));
        exe.execute_into(&arg_refs, &mut results)
    };
    if let Err(e) = first {
        return Ok(error_row(e));
    }
    let outputs = results.iter().map(DeviceBuffer::to_literal).collect::<Result<Vec<_>, _>>();
    let outputs = match outputs {
        Ok(o) => o,
        Err(e) => return Ok(Row::Failed(e.to_string())),
    };
    match time_runs(exe, &arg_refs, &mut results, runs) {
        Ok(times) => Ok(Row::Ran {
            compile: exe.compile_time(),
            cached: *exe.cache_outcome() == CacheOutcome::Hit,
            median: median(times),
            outputs,
        }),
        Err(m) => Ok(Row::Failed(m)),
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    match times.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => times[n / 2],
        n => (times[n / 2 - 1] + times[n / 2]) / 2,
    }
}

/// The table, and whether every JIT tier that ran agrees with the interpreter.
fn render(rows: &[(Backend, Row)], runs: usize) -> (String, bool) {
    let run_header = format!("run (median of {runs})");
    let mut table =
        Table::new(&["tier", "compile", &run_header, "speed-up vs interp", "agrees"]).align_right(&[1, 2, 3]);
    let reference = rows.iter().find_map(|(b, r)| match r {
        Row::Ran { median, outputs, .. } if *b == Backend::Interp => Some((*median, outputs)),
        _ => None,
    });
    let mut agree = true;
    for (backend, row) in rows {
        let cells = match row {
            Row::Ran { compile, cached, median, outputs } => {
                let (speedup, verdict) = match (&reference, *backend) {
                    (_, Backend::Interp) => ("1.0x".to_string(), "reference".to_string()),
                    (Some((interp, expected)), _) => {
                        let verdict = match agreement(outputs, expected) {
                            Ok(()) => "yes".to_string(),
                            Err(m) => {
                                agree = false;
                                format!("NO: {m}")
                            }
                        };
                        (speedup(*interp, *median), verdict)
                    }
                    (None, _) => ("-".to_string(), "unchecked (no interp result)".to_string()),
                };
                let compile = match (*backend, *cached) {
                    (Backend::Interp, _) => "-".to_string(),
                    (_, true) => format!("{} (cached)", duration(*compile)),
                    (_, false) => duration(*compile),
                };
                vec![backend.name().to_string(), compile, duration(*median), speedup, verdict]
            }
            Row::Refused(m) => vec![backend.name().into(), "-".into(), "-".into(), "-".into(), format!("refused: {m}")],
            Row::Failed(m) => {
                agree = false;
                vec![backend.name().into(), "-".into(), "-".into(), "-".into(), format!("FAILED: {m}")]
            }
        };
        table.row(cells);
    }
    (table.render(), agree)
}

fn speedup(interp: Duration, tier: Duration) -> String {
    if tier.is_zero() {
        return "-".into();
    }
    let x = interp.as_secs_f64() / tier.as_secs_f64();
    if x >= 100.0 {
        format!("{x:.0}x")
    } else {
        format!("{x:.1}x")
    }
}

fn duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1e3 {
        format!("{us:.1} us")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// `(rtol, atol)` for outputs of type `ty`: room for sums the JIT tiers reassociate
/// (vectorized and threaded reductions), scaled to each float type's precision; everything
/// else must match exactly.
fn tolerance_for(ty: ElementType) -> Option<(f64, f64)> {
    match ty {
        ElementType::F32 | ElementType::C64 => Some((1e-4, 1e-5)),
        ElementType::F64 | ElementType::C128 => Some((1e-9, 1e-12)),
        ElementType::F16 => Some((1e-2, 1e-3)),
        ElementType::BF16 => Some((2e-2, 1e-2)),
        _ => None,
    }
}

fn agreement(got: &[Literal], expected: &[Literal]) -> Result<(), String> {
    if got.len() != expected.len() {
        return Err(format!("{} outputs, the interpreter gives {}", got.len(), expected.len()));
    }
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        let verdict = match tolerance_for(e.element_type()) {
            Some((rtol, atol)) => tolerance::check(g, &Output { expected: Expected::Values(e.clone()), rtol, atol }),
            None => exact(g, e),
        };
        verdict.map_err(|m| format!("output {i}: {m}"))?;
    }
    Ok(())
}

/// Bit-exact logical values (64-bit integers included, which f64 would round).
fn exact(got: &Literal, expected: &Literal) -> Result<(), String> {
    if got.element_type() != expected.element_type() {
        return Err(format!("element type {}, expected {}", got.element_type(), expected.element_type()));
    }
    let (g, e) = (got.to_bits_vec().map_err(|e| e.to_string())?, expected.to_bits_vec().map_err(|e| e.to_string())?);
    if g.len() != e.len() {
        return Err(format!("{} elements, expected {}", g.len(), e.len()));
    }
    match g.iter().zip(&e).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(j) => {
            let show = |l: &Literal| {
                tolerance::values(l)
                    .ok()
                    .and_then(|v| v.get(j).copied())
                    .map_or_else(|| "?".to_string(), |x| x.to_string())
            };
            Err(format!("[{j}] is {}, expected {}", show(got), show(expected)))
        }
    }
}

/// Seeded arguments for every parameter leaf (see the module comment for the ranges).
fn random_arguments(exe: &Executable) -> Result<Vec<Literal>, String> {
    exe.parameter_leaves().enumerate().map(|(i, leaf)| random_argument(leaf, SEED + i as u64)).collect()
}

fn random_argument(leaf: &ArrayShape, seed: u64) -> Result<Literal, String> {
    let ty = leaf.element_type;
    let (dtype, dist) = match ty {
        ElementType::F16 => ("float16", Dist::Uniform { lo: -1.0, hi: 1.0 }),
        ElementType::BF16 => ("bfloat16", Dist::Uniform { lo: -1.0, hi: 1.0 }),
        ElementType::F32 => ("float32", Dist::Uniform { lo: -1.0, hi: 1.0 }),
        ElementType::F64 => ("float64", Dist::Uniform { lo: -1.0, hi: 1.0 }),
        ElementType::S8 => ("int8", Dist::RandInt { lo: -8, hi: 8 }),
        ElementType::S16 => ("int16", Dist::RandInt { lo: -8, hi: 8 }),
        ElementType::S32 => ("int32", Dist::RandInt { lo: -8, hi: 8 }),
        ElementType::S64 => ("int64", Dist::RandInt { lo: -8, hi: 8 }),
        ElementType::U8 => ("uint8", Dist::RandInt { lo: 0, hi: 8 }),
        ElementType::U16 => ("uint16", Dist::RandInt { lo: 0, hi: 8 }),
        ElementType::U32 => ("uint32", Dist::RandInt { lo: 0, hi: 8 }),
        ElementType::U64 => ("uint64", Dist::RandInt { lo: 0, hi: 8 }),
        // One byte per pred, 0 or 1: the bytes a pred literal holds.
        ElementType::Pred => ("uint8", Dist::RandInt { lo: 0, hi: 2 }),
        other => {
            return Err(format!("cannot generate arguments of type {other}; pass them with --args DIR"));
        }
    };
    let shape = Shape::Array(leaf.clone()).without_layout();
    generate(&shape, dtype, seed, dist)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(v: Vec<f32>) -> Literal {
        Literal::from_vec(&[v.len() as i64], v).unwrap()
    }

    #[test]
    fn reassociation_sized_differences_agree_and_larger_ones_do_not() {
        assert!(agreement(&[lit(vec![1000.0, 0.0])], &[lit(vec![1000.05, 0.000005])]).is_ok());
        let err = agreement(&[lit(vec![1000.0, 1.0])], &[lit(vec![1000.0, 1.001])]).unwrap_err();
        assert!(err.starts_with("output 0: [1]"), "{err}");
    }

    #[test]
    fn integers_must_match_exactly() {
        let a = Literal::from_vec(&[2], vec![i64::MAX, 3]).unwrap();
        let b = Literal::from_vec(&[2], vec![i64::MAX - 1, 3]).unwrap();
        assert!(exact(&a, &a).is_ok());
        assert!(exact(&a, &b).unwrap_err().starts_with("[0]"));
    }

    #[test]
    fn generated_arguments_are_seeded_and_in_range() {
        let shape = |ty| Shape::array(ty, &[64]).as_array().unwrap().clone();
        let f = random_argument(&shape(ElementType::F32), 1).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(f, random_argument(&shape(ElementType::F32), 1).unwrap().to_vec::<f32>().unwrap());
        assert!(f.iter().all(|x| (-1.0..1.0).contains(x)));
        let s = random_argument(&shape(ElementType::S32), 2).unwrap().to_vec::<i32>().unwrap();
        assert!(s.iter().all(|x| (-8..8).contains(x)) && s.iter().any(|&x| x < 0));
        let p = random_argument(&shape(ElementType::Pred), 3).unwrap();
        let bits = p.to_bits_vec().unwrap();
        assert!(bits.iter().all(|&b| b <= 1) && bits.contains(&0) && bits.contains(&1));
    }

    #[test]
    fn durations_read_in_the_unit_that_fits() {
        assert_eq!(duration(Duration::from_nanos(12_340)), "12.3 us");
        assert_eq!(duration(Duration::from_micros(4_560)), "4.56 ms");
        assert_eq!(duration(Duration::from_millis(2_500)), "2.50 s");
    }
}
