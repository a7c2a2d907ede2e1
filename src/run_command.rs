//! `tessera run` (DESIGN.md section 8): compile a module, read its arguments from
//! `DIR/0.npy ...`, run it, write the results, and optionally time it.
//!
//! Arguments are transferred once into resident buffers laid out for their parameters, so
//! `--time` measures executions only: no reading, relayout or allocation per run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera::{Backend, CacheOutcome, Client, ClientOptions, CompileOptions, DeviceBuffer, Error, Executable};
use tessera_hlo::npy::{read_npy, read_npy_physical, write_npy, write_npy_physical};
use tessera_hlo::{Literal, Shape};

use crate::progress::Progress;
use tessera::table::Table;

pub struct RunArgs {
    pub module: PathBuf,
    pub args: PathBuf,
    pub out: Option<PathBuf>,
    pub backend: Backend,
    pub time: Option<usize>,
    pub profile: bool,
    pub threads: Option<usize>,
    pub physical: bool,
    pub strict_precision: bool,
    pub dump: Option<PathBuf>,
}

pub fn run(a: &RunArgs) -> Result<(), String> {
    if a.profile && a.backend == Backend::Interp {
        return Err("--profile needs a compiled backend (cranelift or llvm), not interp".into());
    }
    let text = std::fs::read_to_string(&a.module).map_err(|e| format!("{}: {e}", a.module.display()))?;
    let options = ClientOptions { threads: a.threads, ..ClientOptions::default() };
    let client = Client::with_options(a.backend, &options).map_err(|e| e.to_string())?;
    let exe = {
        let _progress = Progress::after_a_second(format!("compiling {} with {}", a.module.display(), a.backend));
        let options =
            CompileOptions { dump_dir: a.dump.clone(), ..CompileOptions::with_excess_precision(!a.strict_precision) };
        client.compile_text(&text, &options).map_err(|e| format!("{}: {e}", a.module.display()))?
    };
    match exe.cache_outcome() {
        CacheOutcome::Rejected { reason, stored } => {
            eprintln!("tessera: compile cache: rejected {reason}; compiled anew");
            if let Err(e) = stored {
                eprintln!("tessera: compile cache: {e}");
            }
        }
        CacheOutcome::Miss { stored: Err(e) } => eprintln!("tessera: compile cache: {e}"),
        _ => {}
    }

    let args = transfer_arguments(&exe, &read_arguments(&exe, &a.args, a.physical)?)?;
    let arg_refs: Vec<&DeviceBuffer> = args.iter().collect();
    let mut results = exe.new_results().map_err(|e| e.to_string())?;
    exe.execute_into(&arg_refs, &mut results).map_err(|e| e.to_string())?;
    if let Some(out) = &a.out {
        write_results(&results, out, a.physical)?;
    }

    if let Some(runs) = a.time {
        let (times, tiers) = time_runs_on_tiers(&exe, &arg_refs, &mut results, runs)?;
        let counts = exe.kernel_count().zip(exe.last_run_launches());
        let mut line = timing_json(a.backend, exe.compile_time(), &times, counts);
        line.pop();
        line.push_str(&format!(",\"cache\":\"{}\"}}", exe.cache_outcome().name()));
        if a.backend == Backend::Tiered {
            line.pop();
            line.push_str(&tiers_json(&tiers, exe.peak_compile_time()));
        }
        println!("{line}");
    }
    if a.profile {
        // The tiered backend profiles the code it settles on: LLVM's, or Cranelift's if LLVM
        // failed (the runs above were correct either way).
        if let Err(e) = exe.wait_for_peak_tier() {
            eprintln!("tessera: {e}; profiling Cranelift's code");
        }
        let runtime = exe.runtime().ok_or("--profile needs a compiled backend")?;
        runtime.set_profiling(true);
        time_runs(&exe, &arg_refs, &mut results, a.time.unwrap_or(1))?;
        let profile = runtime.profile().unwrap_or_default();
        runtime.set_profiling(false);
        eprintln!("compile time by phase:\n{}\n", exe.compile_timings());
        eprint!("{}", profile_table(runtime, &profile));
    }
    Ok(())
}

/// The profile as two tables: kernels by kind (their names without the instruction number:
/// where a model's time goes) and the kernels that took longest (the top 20), each row with
/// its share of the profiled time; copies and host steps last.
fn profile_table(exe: &tessera_runtime::Executable, p: &tessera_runtime::Profile) -> String {
    let kernels: Vec<(String, u64, Duration)> =
        exe.launches().iter().zip(&p.launches).map(|(l, &(n, t))| (l.name.clone(), n, t)).filter(|r| r.1 > 0).collect();
    let total: Duration = kernels.iter().map(|r| r.2).sum::<Duration>() + p.copies.1 + p.host.1;
    let others = [("(copies)", p.copies), ("(host steps)", p.host)]
        .into_iter()
        .filter(|r| r.1 .0 > 0)
        .map(|(name, (n, t))| (name.to_string(), n, t));

    let mut kinds: Vec<(String, u64, Duration)> = Vec::new();
    for (name, n, t) in &kernels {
        let kind = name.trim_end_matches(|c: char| c.is_ascii_digit()).trim_end_matches(['_', '.']);
        match kinds.iter_mut().find(|k| k.0 == kind) {
            Some(k) => (k.1, k.2) = (k.1 + n, k.2 + *t),
            None => kinds.push((kind.to_string(), *n, *t)),
        }
    }
    kinds.sort_by_key(|k| std::cmp::Reverse(k.2));
    let mut top = kernels;
    top.sort_by_key(|k| std::cmp::Reverse(k.2));
    const SHOWN: usize = 20;
    if top.len() > SHOWN {
        let rest = top.split_off(SHOWN);
        let (n, t) = rest.iter().fold((0, Duration::ZERO), |(n, t), r| (n + r.1, t + r.2));
        top.push((format!("({} more kernels)", rest.len()), n, t));
    }
    let render = |first: &str, rows: Vec<(String, u64, Duration)>| {
        let mut table = Table::new(&[first, "runs", "total ms", "us per run", "share"]).align_right(&[1, 2, 3, 4]);
        for (name, n, t) in rows {
            let share = if total.is_zero() { 0.0 } else { t.as_secs_f64() / total.as_secs_f64() * 100.0 };
            table.row(vec![
                name,
                n.to_string(),
                format!("{:.2}", t.as_secs_f64() * 1e3),
                format!("{:.1}", t.as_secs_f64() * 1e6 / n as f64),
                format!("{share:.1}%"),
            ]);
        }
        table.render()
    };
    let others: Vec<_> = others.collect();
    format!(
        "{}\n{}",
        render("kind", kinds.into_iter().chain(others.clone()).collect()),
        render("kernel", top.into_iter().chain(others).collect())
    )
}

/// Reads `dir/i.npy` for every parameter leaf of `exe`.
pub fn read_arguments(exe: &Executable, dir: &Path, physical: bool) -> Result<Vec<Literal>, String> {
    let expected = exe.parameter_leaves().len();
    let present = numbered_npy_files(dir)?;
    if present != expected {
        return Err(format!(
            "{}: the module takes {expected} arguments but the folder holds {present} (0.npy ...)",
            dir.display()
        ));
    }
    let mut literals = Vec::with_capacity(expected);
    for (i, leaf) in exe.parameter_leaves().enumerate() {
        let path = dir.join(format!("{i}.npy"));
        let shape = Shape::Array(leaf.clone());
        let literal = if physical { read_npy_physical(&path, &shape) } else { read_npy(&path, &shape) };
        literals.push(literal.map_err(|e| format!("argument {i}: {e}"))?);
    }
    Ok(literals)
}

/// One resident buffer per parameter leaf, laid out for it.
pub fn transfer_arguments(exe: &Executable, literals: &[Literal]) -> Result<Vec<DeviceBuffer>, String> {
    literals.iter().enumerate().map(|(i, l)| exe.transfer_argument(i, l).map_err(|e| e.to_string())).collect()
}

/// How many of `0.npy, 1.npy, ...` exist without a gap.
fn numbered_npy_files(dir: &Path) -> Result<usize, String> {
    if !dir.exists() {
        // A module without parameters needs no argument folder (corpus cases have none).
        return Ok(0);
    }
    if !dir.is_dir() {
        return Err(format!("{}: not a folder", dir.display()));
    }
    Ok((0..).take_while(|i| dir.join(format!("{i}.npy")).is_file()).count())
}

fn write_results(results: &[DeviceBuffer], out: &Path, physical: bool) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for (i, r) in results.iter().enumerate() {
        let literal = r.to_literal().map_err(|e| e.to_string())?;
        let path = out.join(format!("{i}.npy"));
        let written = if physical { write_npy_physical(&literal, &path) } else { write_npy(&literal, &path) };
        written.map_err(|e| Error::from(e).to_string())?;
    }
    Ok(())
}

/// `runs` timed executions (after the warm-up the caller did).
pub fn time_runs(
    exe: &Executable,
    args: &[&DeviceBuffer],
    results: &mut [DeviceBuffer],
    runs: usize,
) -> Result<Vec<Duration>, String> {
    time_runs_on_tiers(exe, args, results, runs).map(|(times, _)| times)
}

/// [`time_runs`], with the backend whose code ran each run (they differ on the tiered
/// backend, which switches from Cranelift to LLVM when LLVM's code is ready).
pub fn time_runs_on_tiers(
    exe: &Executable,
    args: &[&DeviceBuffer],
    results: &mut [DeviceBuffer],
    runs: usize,
) -> Result<(Vec<Duration>, Vec<Backend>), String> {
    let done = Arc::new(AtomicUsize::new(0));
    let _progress = {
        let done = done.clone();
        Progress::periodic(move || format!("timing: {}/{runs} runs", done.load(Ordering::Relaxed)))
    };
    let mut times = Vec::with_capacity(runs);
    let mut tiers = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let tier = exe.execute_into_tier(args, results).map_err(|e| e.to_string())?;
        times.push(start.elapsed());
        tiers.push(tier);
        done.fetch_add(1, Ordering::Relaxed);
    }
    Ok((times, tiers))
}

/// The tiered backend's extra keys (a JSON object's tail, from the comma to the closing
/// brace): which tier ran the timed runs, in order, as runs of one tier
/// (`"tiers":[["cranelift",3],["llvm",17]]`), and how long LLVM's background compile took
/// (null while it is still compiling).
pub fn tiers_json(tiers: &[Backend], peak_compile: Option<Duration>) -> String {
    let mut spans: Vec<(Backend, usize)> = Vec::new();
    for &t in tiers {
        match spans.last_mut() {
            Some((last, n)) if *last == t => *n += 1,
            _ => spans.push((t, 1)),
        }
    }
    let spans: Vec<String> = spans.iter().map(|(t, n)| format!("[\"{}\",{n}]", t.name())).collect();
    let peak = peak_compile.map_or("null".to_string(), |d| format!("{:.1}", d.as_secs_f64() * 1e6));
    format!(",\"tiers\":[{}],\"llvm_compile_us\":{peak}}}", spans.join(","))
}

/// The one JSON line `--time` prints (same keys as `xla_run.py --time`, plus backend, compile
/// time, and the kernels of the compiled program and the launches of one run: `counts`, null
/// for the interpreter, which runs no kernels).
pub fn timing_json(backend: Backend, compile: Duration, times: &[Duration], counts: Option<(usize, u64)>) -> String {
    let mut us: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e6).collect();
    us.sort_by(f64::total_cmp);
    let median = match us.len() {
        0 => 0.0,
        n if n % 2 == 1 => us[n / 2],
        n => (us[n / 2 - 1] + us[n / 2]) / 2.0,
    };
    let min = us.first().copied().unwrap_or(0.0);
    let (kernels, launches) = match counts {
        Some((k, l)) => (k.to_string(), l.to_string()),
        None => ("null".to_string(), "null".to_string()),
    };
    format!(
        "{{\"backend\":\"{}\",\"compile_us\":{:.1},\"median_us\":{median:.1},\"min_us\":{min:.1},\"runs\":{},\"kernels\":{kernels},\"launches\":{launches}}}",
        backend.name(),
        compile.as_secs_f64() * 1e6,
        us.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiered_runs_are_reported_as_spans_of_one_tier() {
        let tiers = [Backend::Cranelift, Backend::Cranelift, Backend::Llvm, Backend::Llvm, Backend::Llvm];
        assert_eq!(
            tiers_json(&tiers, Some(Duration::from_micros(2500))),
            r#","tiers":[["cranelift",2],["llvm",3]],"llvm_compile_us":2500.0}"#
        );
        assert_eq!(tiers_json(&[Backend::Cranelift], None), r#","tiers":[["cranelift",1]],"llvm_compile_us":null}"#);
    }

    #[test]
    fn timing_json_has_the_contract_keys_and_a_true_median() {
        let us = |v: &[u64]| v.iter().map(|&x| Duration::from_micros(x)).collect::<Vec<_>>();
        let line = timing_json(Backend::Llvm, Duration::from_micros(1500), &us(&[30, 10, 20]), Some((4, 9)));
        assert_eq!(
            line,
            r#"{"backend":"llvm","compile_us":1500.0,"median_us":20.0,"min_us":10.0,"runs":3,"kernels":4,"launches":9}"#
        );
        let line = timing_json(Backend::Interp, Duration::ZERO, &us(&[40, 10, 20, 30]), None);
        assert_eq!(
            line,
            r#"{"backend":"interp","compile_us":0.0,"median_us":25.0,"min_us":10.0,"runs":4,"kernels":null,"launches":null}"#
        );
    }
}
