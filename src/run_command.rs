//! `tessera run` (DESIGN.md section 8): compile a module, read its arguments from
//! `DIR/0.npy ...`, run it, write the results, and optionally time it.
//!
//! Arguments are transferred once into resident buffers laid out for their parameters, so
//! `--time` measures executions only: no reading, relayout or allocation per run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera::{Backend, Client, ClientOptions, CompileOptions, DeviceBuffer, Error, Executable};
use tessera_hlo::npy::{read_npy, read_npy_physical, write_npy, write_npy_physical};
use tessera_hlo::{Literal, Shape};

use crate::progress::Progress;

pub struct RunArgs {
    pub module: PathBuf,
    pub args: PathBuf,
    pub out: Option<PathBuf>,
    pub backend: Backend,
    pub time: Option<usize>,
    pub threads: Option<usize>,
    pub physical: bool,
}

pub fn run(a: &RunArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(&a.module).map_err(|e| format!("{}: {e}", a.module.display()))?;
    let options = ClientOptions { threads: a.threads, ..ClientOptions::default() };
    let client = Client::with_options(a.backend, &options).map_err(|e| e.to_string())?;
    let exe = {
        let _progress = Progress::after_a_second(format!("compiling {} with {}", a.module.display(), a.backend));
        client.compile_text(&text, &CompileOptions::default()).map_err(|e| format!("{}: {e}", a.module.display()))?
    };

    let args = transfer_arguments(&exe, &read_arguments(&exe, &a.args, a.physical)?)?;
    let arg_refs: Vec<&DeviceBuffer> = args.iter().collect();
    let mut results = exe.new_results().map_err(|e| e.to_string())?;
    exe.execute_into(&arg_refs, &mut results).map_err(|e| e.to_string())?;
    if let Some(out) = &a.out {
        write_results(&results, out, a.physical)?;
    }

    if let Some(runs) = a.time {
        let times = time_runs(&exe, &arg_refs, &mut results, runs)?;
        println!("{}", timing_json(a.backend, exe.compile_time(), &times));
    }
    Ok(())
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
    let done = Arc::new(AtomicUsize::new(0));
    let _progress = {
        let done = done.clone();
        Progress::periodic(move || format!("timing: {}/{runs} runs", done.load(Ordering::Relaxed)))
    };
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        exe.execute_into(args, results).map_err(|e| e.to_string())?;
        times.push(start.elapsed());
        done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(times)
}

/// The one JSON line `--time` prints (same keys as `xla_run.py --time`, plus backend and
/// compile time).
pub fn timing_json(backend: Backend, compile: Duration, times: &[Duration]) -> String {
    let mut us: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e6).collect();
    us.sort_by(f64::total_cmp);
    let median = match us.len() {
        0 => 0.0,
        n if n % 2 == 1 => us[n / 2],
        n => (us[n / 2 - 1] + us[n / 2]) / 2.0,
    };
    let min = us.first().copied().unwrap_or(0.0);
    format!(
        "{{\"backend\":\"{}\",\"compile_us\":{:.1},\"median_us\":{median:.1},\"min_us\":{min:.1},\"runs\":{}}}",
        backend.name(),
        compile.as_secs_f64() * 1e6,
        us.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_json_has_the_contract_keys_and_a_true_median() {
        let us = |v: &[u64]| v.iter().map(|&x| Duration::from_micros(x)).collect::<Vec<_>>();
        let line = timing_json(Backend::Llvm, Duration::from_micros(1500), &us(&[30, 10, 20]));
        assert_eq!(line, r#"{"backend":"llvm","compile_us":1500.0,"median_us":20.0,"min_us":10.0,"runs":3}"#);
        let line = timing_json(Backend::Cranelift, Duration::ZERO, &us(&[40, 10, 20, 30]));
        assert_eq!(line, r#"{"backend":"cranelift","compile_us":0.0,"median_us":25.0,"min_us":10.0,"runs":4}"#);
    }
}
