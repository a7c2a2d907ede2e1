//! `tessera run` (DESIGN.md section 8): compile a module, read its arguments from
//! `DIR/0.npy ...`, run it, write the results, and optionally time it.
//!
//! Arguments are transferred once into resident buffers laid out for their parameters, so
//! `--time` measures executions only: no reading, relayout or allocation per run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera::{Backend, Client, ClientOptions, CompileOptions, DeviceBuffer, Error, Executable};
use tessera_hlo::npy::{read_npy, read_npy_physical, write_npy, write_npy_physical};
use tessera_hlo::Shape;

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

    let args = read_arguments(&exe, &a.args, a.physical)?;
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

/// Reads `dir/i.npy` for every parameter leaf into a buffer laid out for it.
fn read_arguments(exe: &Executable, dir: &Path, physical: bool) -> Result<Vec<DeviceBuffer>, String> {
    let expected = exe.parameter_leaves().len();
    let present = numbered_npy_files(dir)?;
    if present != expected {
        return Err(format!(
            "{}: the module takes {expected} arguments but the folder holds {present} (0.npy ...)",
            dir.display()
        ));
    }
    let mut buffers = Vec::with_capacity(expected);
    for (i, leaf) in exe.parameter_leaves().enumerate() {
        let path = dir.join(format!("{i}.npy"));
        let shape = Shape::Array(leaf.clone());
        let literal = if physical { read_npy_physical(&path, &shape) } else { read_npy(&path, &shape) };
        let literal = literal.map_err(|e| format!("argument {i}: {e}"))?;
        buffers.push(exe.transfer_argument(i, &literal).map_err(|e| e.to_string())?);
    }
    Ok(buffers)
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
fn time_runs(
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

/// Progress on stderr for work that takes longer than a second; silent otherwise, so quick
/// runs and stdout stay clean.
struct Progress {
    stop: Arc<AtomicBool>,
    /// Set once something was printed.
    shown: Arc<AtomicBool>,
    start: Instant,
    /// Print the total time on drop if anything was shown.
    report_done: bool,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Prints `label` once if the guard lives longer than a second, and the total time when
    /// it drops.
    fn after_a_second(label: String) -> Progress {
        Progress::spawn(true, move |first| first.then(|| label.clone()))
    }

    /// Prints `message()` every second while the guard lives (starting after one second).
    fn periodic(message: impl Fn() -> String + Send + 'static) -> Progress {
        Progress::spawn(false, move |_| Some(message()))
    }

    /// Every second the guard lives, prints what `tick(first)` returns (nothing for `None`).
    fn spawn(report_done: bool, tick: impl Fn(bool) -> Option<String> + Send + 'static) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let shown = Arc::new(AtomicBool::new(false));
        let (stop2, shown2) = (stop.clone(), shown.clone());
        let thread = std::thread::spawn(move || {
            let mut first = true;
            loop {
                // Sleep in slices so dropping the guard is not held up for a second.
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(50));
                    if stop2.load(Ordering::Relaxed) {
                        return;
                    }
                }
                if let Some(message) = tick(first) {
                    eprintln!("tessera: {message}");
                    shown2.store(true, Ordering::Relaxed);
                }
                first = false;
            }
        });
        Progress { stop, shown, start: Instant::now(), report_done, thread: Some(thread) }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if self.report_done && self.shown.load(Ordering::Relaxed) {
            eprintln!("tessera: done in {:.1} s", self.start.elapsed().as_secs_f64());
        }
    }
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
