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

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn compile_time_per_small_kernel() {
    let k = muladd();
    let times: Vec<Duration> = (0..15).map(|_| common::compile(std::slice::from_ref(&k)).compile_time).collect();
    let random: Vec<Duration> =
        (0..40).map(|s| common::compile(std::slice::from_ref(&random_kernel(s))).compile_time).collect();
    eprintln!("muladd kernel alone: median {:?} (min {:?})", median(times.clone()), times.iter().min().unwrap());
    eprintln!(
        "random kernels, one per module: median {:?}, max {:?}",
        median(random.clone()),
        random.iter().max().unwrap()
    );
    assert!(times.iter().all(|t| !t.is_zero()), "compile_time is measured");
}
