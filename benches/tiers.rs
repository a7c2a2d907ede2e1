//! Compile and run time of each tier on four workloads that stress different parts of the
//! code generators: a 16M-element elementwise chain (bandwidth, transcendentals), row softmax
//! (reductions), a 1024 matmul (dots) and a tiled-to-row-major relayout (layout index math).
//!
//! `compile/<workload>` times `Client::compile` (passes, lowering, codegen, assembly);
//! `run/<workload>` times `execute_into` on resident buffers, compile excluded. The
//! interpreter takes seconds per run, so it is measured with flat sampling (ten single runs)
//! and only under `cargo bench`: in `cargo test --all-targets` (criterion's test mode, one
//! run per benchmark) it would dominate the suite.
//!
//! The corpus is found at `$TESSERA_SHARED/corpus` or `CARGO_MANIFEST_DIR/../shared/corpus`.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use tessera::conformance::bench_args::{generate, Dist};
use tessera::conformance::Case;
use tessera::{Backend, Client, CompileOptions, DeviceBuffer};
use tessera_hlo::text::parse_module;
use tessera_hlo::{Literal, Module};

const CORPUS_WORKLOADS: [&str; 3] = ["bench_elementwise_16m", "bench_softmax_4096", "bench_matmul_1024"];

struct Workload {
    name: String,
    module: Module,
    arguments: Vec<Literal>,
}

fn shared() -> PathBuf {
    match std::env::var_os("TESSERA_SHARED") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    }
}

fn workloads() -> Vec<Workload> {
    let corpus = shared().join("corpus");
    let mut out = Vec::new();
    for name in CORPUS_WORKLOADS {
        let dir = corpus.join(name);
        if !dir.is_dir() {
            // Benchmarks of what is present beat no benchmarks; the corpus test asserts
            // the corpus itself.
            eprintln!("tiers: skipping {name}: {} is missing (set TESSERA_SHARED)", dir.display());
            continue;
        }
        let case = Case::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let arguments = case.arguments().unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push(Workload { name: name.trim_start_matches("bench_").to_string(), module: case.module, arguments });
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/modules/relayout_tiled_4096.hlo");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let module = parse_module(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let logical = tessera_hlo::Shape::array(tessera_hlo::ElementType::F32, &[4096, 4096]);
    let argument = generate(&logical, "float32", 4096, Dist::Uniform { lo: -1.0, hi: 1.0 }).unwrap();
    out.push(Workload { name: "relayout_tiled_4096".into(), module, arguments: vec![argument] });
    out
}

/// Criterion runs a harness-less bench binary in test mode (each benchmark once) unless
/// cargo passes `--bench`.
fn benchmarking() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn bench(c: &mut Criterion) {
    let options = CompileOptions::default();
    let clients: Vec<Client> =
        [Backend::Interp, Backend::Cranelift, Backend::Llvm].into_iter().map(|b| Client::new(b).unwrap()).collect();
    for w in workloads() {
        let mut group = c.benchmark_group(format!("compile/{}", w.name));
        group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
        for client in &clients[1..] {
            group.bench_function(client.backend().name(), |b| b.iter(|| client.compile(&w.module, &options).unwrap()));
        }
        group.finish();

        let mut group = c.benchmark_group(format!("run/{}", w.name));
        group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
        for client in &clients {
            let interp = client.backend() == Backend::Interp;
            if interp {
                if !benchmarking() {
                    continue;
                }
                group.sampling_mode(SamplingMode::Flat);
            }
            let exe = client.compile(&w.module, &options).unwrap();
            let args: Vec<DeviceBuffer> =
                w.arguments.iter().enumerate().map(|(i, l)| exe.transfer_argument(i, l).unwrap()).collect();
            let arg_refs: Vec<&DeviceBuffer> = args.iter().collect();
            let mut results = exe.new_results().unwrap();
            group.bench_function(client.backend().name(), |b| {
                b.iter(|| exe.execute_into(&arg_refs, &mut results).unwrap())
            });
            group.sampling_mode(SamplingMode::Auto);
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
