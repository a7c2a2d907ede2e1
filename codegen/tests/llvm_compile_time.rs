//! Reports (never asserts) how long the tier takes per small kernel; run with --nocapture.

#[path = "llvm_common/mod.rs"]
mod common;

use std::time::Duration;

use tessera_lower::kernel::random::random_kernel;
use tessera_lower::kernel::*;

fn muladd() -> Kernel {
    let n = 4096;
    let mut b = KernelBuilder::new("muladd", 1);
    let f32m = MemType::Scalar(Ty::F32);
    let a = b.buffer("a", f32m, n, false);
    let bb = b.buffer("b", f32m, n, false);
    let c = b.buffer("c", f32m, n, false);
    let out = b.buffer("out", f32m, n, true);
    let i = b.begin_loop(0, n);
    let x = b.load(a, IndexExpr::var(i, 1));
    let y = b.load(bb, IndexExpr::var(i, 1));
    let z = b.load(c, IndexExpr::var(i, 1));
    let m = b.binary(BinOp::Mul, Ty::F32, x, y);
    let s = b.binary(BinOp::Add, Ty::F32, m, z);
    b.store(out, IndexExpr::var(i, 1), s);
    b.end_loop_vectorized(16, Tail::None);
    b.finish()
}

/// CPU time this thread has run (Linux `schedstat`, nanoseconds): wall time on a shared
/// machine mostly measures the other processes.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(text.split_whitespace().next()?.parse().ok()?))
}

/// Wall and CPU time of one compile.
fn timed(kernel: &Kernel) -> (Duration, Option<Duration>) {
    let before = thread_cpu();
    let wall = common::compile(std::slice::from_ref(kernel)).compile_time;
    let cpu = before.and_then(|b| Some(thread_cpu()? - b));
    (wall, cpu)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn compile_time_per_small_kernel() {
    let k = muladd();
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
