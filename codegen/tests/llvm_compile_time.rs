//! Reports (never asserts) how long the tier takes per small kernel; run with --nocapture.

#[path = "llvm_common/mod.rs"]
mod common;

use std::time::Duration;

use tessera_lower::kernel::random::random_kernel;
use tessera_lower::kernel::*;

/// CPU time this thread has run (Linux `schedstat`, nanoseconds): wall time on a shared
/// machine mostly measures the other processes.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(text.split_whitespace().next()?.parse().ok()?))
}

/// Wall and CPU time of one compile.
fn timed(kernel: &Kernel) -> (Duration, Option<Duration>) {
    let before = thread_cpu();
    let wall = common::compile(std::slice::from_ref(kernel)).compile_time();
    let cpu = before.and_then(|b| Some(thread_cpu()? - b));
    (wall, cpu)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn compile_time_per_small_kernel() {
    let k = common::muladd(4096);
    let (walls, cpus): (Vec<_>, Vec<_>) = (0..15).map(|_| timed(&k)).unzip();
    let cpus: Option<Vec<Duration>> = cpus.into_iter().collect();
    eprintln!(
        "muladd kernel alone: wall median {:?}, cpu median {:?}",
        median(walls.clone()),
        cpus.clone().map(median)
    );
    let (rwalls, rcpus): (Vec<_>, Vec<_>) = (0..40).map(|s| timed(&random_kernel(s))).unzip();
    let rcpus: Option<Vec<Duration>> = rcpus.into_iter().collect();
    eprintln!(
        "random kernels, one per module: wall median {:?}, cpu median {:?}, cpu max {:?}",
        median(rwalls),
        rcpus.clone().map(median),
        rcpus.and_then(|v| v.into_iter().max())
    );
    let times = walls;
    assert!(times.iter().all(|t| !t.is_zero()), "compile_time is measured");
}
