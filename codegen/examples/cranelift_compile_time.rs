//! Measures how long the Cranelift tier takes per kernel (DESIGN.md section 6 promises well
//! under a millisecond for a small one). Run with an optimized profile:
//! `cargo run -p tessera-codegen --profile ci --example cranelift_compile_time`.

use std::time::{Duration, Instant};

use tessera_lower::kernel::random::random_kernel;
use tessera_lower::kernel::*;

fn saxpy() -> Kernel {
    let mut k = KernelBuilder::new("saxpy", 64);
    let a = k.buffer("a", MemType::Scalar(Ty::F32), 1, false);
    let x = k.buffer("x", MemType::Scalar(Ty::F32), 64 * 1024, false);
    let y = k.buffer("y", MemType::Scalar(Ty::F32), 64 * 1024, true);
    let g = k.grid_var();
    let i = k.begin_loop(0, 1024);
    let at = IndexExpr {
        terms: vec![
            Term { src: IndexSrc::Var(g), div: 1, modulo: None, scale: 1024 },
            Term { src: IndexSrc::Var(i), div: 1, modulo: None, scale: 1 },
        ],
        offset: 0,
    };
    let av = k.load(a, IndexExpr::constant(0));
    let xv = k.load(x, at.clone());
    let yv = k.load(y, at.clone());
    let p = k.binary(BinOp::Mul, Ty::F32, av, xv);
    let s = k.binary(BinOp::Add, Ty::F32, p, yv);
    k.store(y, at, s);
    k.end_loop_vectorized(8, Tail::None);
    k.finish()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // Warm up (first-use costs: page faults, lazy statics).
    let _ = tessera_codegen::cranelift::compile(&[saxpy()]);
    let k = saxpy();
    let times: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            let c = tessera_codegen::cranelift::compile(std::slice::from_ref(&k)).expect("compiles");
            let e = t.elapsed();
            drop(c);
            e
        })
        .collect();
    println!("saxpy (vector loop + tail), one kernel per module: median {:?}", median(times));

    let kernels: Vec<Kernel> = (0..500).map(random_kernel).collect();
    let single: Vec<Duration> = kernels
        .iter()
        .map(|k| {
            let t = Instant::now();
            let c = tessera_codegen::cranelift::compile(std::slice::from_ref(k)).expect("compiles");
            let e = t.elapsed();
            drop(c);
            e
        })
        .collect();
    let stmts: usize = kernels.iter().map(|k| count(&k.body)).sum();
    println!(
        "500 random kernels (avg {} statements), one per module: median {:?}, max {:?}",
        stmts / kernels.len(),
        median(single.clone()),
        single.iter().max().unwrap()
    );
    let t = Instant::now();
    let c = tessera_codegen::cranelift::compile(&kernels).expect("compiles");
    let all = t.elapsed();
    println!("the same 500 in one module: {:?} total, {:?} per kernel", all, all / 500);
    drop(c);
}

fn count(body: &[Stmt]) -> usize {
    body.iter()
        .map(|s| match s {
            Stmt::Loop(l) => 1 + count(&l.body),
            Stmt::If { then_body, else_body, .. } => 1 + count(then_body) + count(else_body),
            _ => 1,
        })
        .sum()
}
