//! Kernel counts: for every corpus case with XLA:CPU's optimized module (`xla_optimized.hlo`),
//! the kernels Tessera compiles beside the kernels XLA:CPU runs (the fusions, custom-calls and
//! unfused ops of its entry computation, while and conditional computations counted once), as
//! a table with totals. What fusion leaves unfused shows here first.

use std::collections::HashSet;
use std::path::PathBuf;

use tessera::{Backend, Client, CompileOptions};
use tessera_hlo::text::parse_module;
use tessera_hlo::{Module, Opcode};

fn corpus_dir() -> PathBuf {
    let dir = match std::env::var_os("TESSERA_SHARED") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    let corpus = dir.join("corpus");
    assert!(corpus.is_dir(), "the shared corpus is missing at {} (set TESSERA_SHARED)", corpus.display());
    corpus
}

/// The kernels XLA:CPU runs for `module` (its optimized form): every instruction of the entry
/// and of the computations its while loops and conditionals run, except those that compute
/// nothing (parameters, constants, tuples, bitcasts, tokens) and the control flow itself.
fn xla_kernels(module: &Module) -> usize {
    let mut seen = HashSet::new();
    let mut stack = vec![module.entry];
    let mut kernels = 0;
    while let Some(c) = stack.pop() {
        if !seen.insert(c) {
            continue;
        }
        for inst in &module.comp(c).instructions {
            use Opcode::*;
            match inst.opcode {
                Parameter | Constant | Tuple | GetTupleElement | Bitcast | AfterAll | AddDependency
                | OptimizationBarrier => {}
                While | Conditional | Call => stack.extend(inst.called_computations()),
                _ => kernels += 1,
            }
        }
    }
    kernels
}

#[test]
fn kernel_counts_beside_xla() {
    let client = Client::new(Backend::Cranelift).expect("client");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("corpus")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("xla_optimized.hlo").is_file())
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no corpus case has an xla_optimized.hlo");
    let mut rows = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let read = |f: &str| std::fs::read_to_string(case.join(f)).unwrap_or_else(|e| panic!("{name}/{f}: {e}"));
        let xla = parse_module(&read("xla_optimized.hlo")).unwrap_or_else(|e| panic!("{name}: xla_optimized.hlo: {e}"));
        let exe = client
            .compile_text(&read("module.hlo"), &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let ours = exe.runtime().expect("a compiled backend").launches().len();
        rows.push((name, ours, xla_kernels(&xla)));
    }

    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(4).max(4);
    println!("{:<width$}  {:>7}  {:>7}", "case", "tessera", "xla:cpu");
    println!("{}  {}  {}", "-".repeat(width), "-".repeat(7), "-".repeat(7));
    for (name, ours, xla) in &rows {
        let mark = if ours > xla { "  more" } else { "" };
        println!("{name:<width$}  {ours:>7}  {xla:>7}{mark}");
    }
    let (ours, xla): (usize, usize) = rows.iter().fold((0, 0), |(a, b), r| (a + r.1, b + r.2));
    let at_most = rows.iter().filter(|r| r.1 <= r.2).count();
    println!("{:<width$}  {ours:>7}  {xla:>7}", "total");
    println!("kernel counts: at most XLA:CPU's on {at_most} of {} cases", rows.len());

    // Issue 12's targets, kept: fewer kernels than XLA:CPU in total, and at most its count on
    // at least 90% of the cases.
    assert!(ours < xla, "{ours} kernels in total, XLA:CPU {xla}");
    assert!(at_most * 10 >= rows.len() * 9, "at most XLA:CPU's count on only {at_most} of {} cases", rows.len());

    // Row reductions fuse into their consumers: softmax in two kernels, layer norm in one.
    for (case, most) in [("bench_softmax_4096", 2), ("bench_layernorm_8192x1024", 1), ("model_softmax", 2)] {
        if let Some(r) = rows.iter().find(|r| r.0 == case) {
            assert!(r.1 <= most, "{case}: {} kernels, expected at most {most}", r.1);
        }
    }
}
