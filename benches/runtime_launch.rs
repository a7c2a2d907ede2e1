//! What a run and a launch cost beyond the kernels' own work (DESIGN.md section 7): a
//! program whose step tree is a 10,000-iteration while loop of one-instruction scalar kernels
//! (a counter compared and incremented, two launches and a copy per iteration), compiled on
//! each tier and run from resident buffers on one thread. The step tree runs as the
//! program's compiled entry, so a launch is a direct call; `run/<tier>/<N> iterations` divided
//! by the launches it makes (2N+1) is the per-launch cost. `run/<tier>/empty` is a program
//! with no launch at all: the cost of a call.

use criterion::{criterion_group, criterion_main, Criterion};
use tessera::{Backend, Client, ClientOptions, CompileOptions, DeviceBuffer, Executable};
use tessera_hlo::Literal;

fn counter_loop(iterations: i32) -> String {
    format!(
        r#"HloModule counter, entry_computation_layout={{(s32[])->s32[]}}

cond {{
  s = s32[] parameter(0)
  limit = s32[] constant({iterations})
  ROOT lt = pred[] compare(s, limit), direction=LT
}}

body {{
  s = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT next = s32[] add(s, one)
}}

ENTRY main {{
  start = s32[] parameter(0)
  ROOT loop = s32[] while(start), condition=cond, body=body
}}
"#
    )
}

const EMPTY: &str = r#"HloModule empty, entry_computation_layout={(s32[])->s32[]}

ENTRY main {
  ROOT p = s32[] parameter(0)
}
"#;

fn compile(text: &str, backend: Backend) -> Executable {
    let options = ClientOptions { threads: Some(1), ..ClientOptions::default() };
    let client = Client::with_options(backend, &options).expect("a one-thread client");
    client.compile_text(text, &CompileOptions::default()).expect("the benchmark's module compiles")
}

fn bench(c: &mut Criterion) {
    let start = Literal::scalar(0i32);
    for backend in [Backend::Cranelift, Backend::Llvm] {
        for (label, text) in
            [("empty".to_string(), EMPTY.to_string()), ("10000 iterations".into(), counter_loop(10_000))]
        {
            let exe = compile(&text, backend);
            let input = exe.transfer_argument(0, &start).expect("an s32 argument");
            let mut out: Vec<DeviceBuffer> = exe.new_results().expect("result buffers");
            c.bench_function(&format!("run/{}/{label}", backend.name()), |b| {
                b.iter(|| exe.execute_into(&[&input], &mut out).expect("the run succeeds"))
            });
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
