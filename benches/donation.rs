//! What donation saves (`input_output_alias`), on resident buffers: `shared nothing` runs with
//! `execute_into`, writing results of their own; `donated` gives the aliased parameters up
//! with `execute_donating` (lending the others), which returns the results in their memory.
//! - A decoder step's KV-cache update, one row of an f32[4096,1024] cache (16 MiB) replaced:
//!   sharing nothing, the update copies the whole cache into the result; donated, only the
//!   row is written.
//! - A step of gradient descent with momentum on f32[4096,1024] weights and velocity: the same
//!   arithmetic either way, written over the donated weights and velocity instead of into
//!   two more 16 MiB buffers.

use criterion::{criterion_group, criterion_main, Criterion};
use tessera::{Argument, Backend, Client, CompileOptions, DeviceBuffer};
use tessera_hlo::Literal;

const ROWS: usize = 4096;
const WIDTH: usize = 1024;

fn module() -> String {
    format!(
        r#"HloModule cache_update, input_output_alias={{ {{}}: (0, {{}}, may-alias) }}

ENTRY main {{
  cache = f32[{ROWS},{WIDTH}] parameter(0)
  row = f32[1,{WIDTH}] parameter(1)
  pos = s32[] parameter(2)
  zero = s32[] constant(0)
  ROOT updated = f32[{ROWS},{WIDTH}] dynamic-update-slice(cache, row, pos, zero)
}}
"#
    )
}

/// `v' = 0.9 v + g`, `w' = w - 0.125 v'`, donating `w` and `v`.
fn sgd_module() -> String {
    let shape = format!("f32[{ROWS},{WIDTH}]");
    format!(
        r#"HloModule sgd, input_output_alias={{ {{0}}: (0, {{}}, may-alias), {{1}}: (1, {{}}, may-alias) }}

ENTRY main {{
  w = {shape} parameter(0)
  v = {shape} parameter(1)
  g = {shape} parameter(2)
  mu = f32[] constant(0.9)
  mus = {shape} broadcast(mu), dimensions={{}}
  lr = f32[] constant(0.125)
  lrs = {shape} broadcast(lr), dimensions={{}}
  kept = {shape} multiply(v, mus)
  v2 = {shape} add(kept, g)
  step = {shape} multiply(v2, lrs)
  w2 = {shape} subtract(w, step)
  ROOT out = ({shape}, {shape}) tuple(w2, v2)
}}
"#
    )
}

fn bench(c: &mut Criterion) {
    cache_update(c);
    sgd(c);
}

fn sgd(c: &mut Criterion) {
    let fill = |x: f32| Literal::from_vec(&[ROWS as i64, WIDTH as i64], vec![x; ROWS * WIDTH]).expect("an array");
    let (w, v, g) = (fill(1.0), fill(0.5), fill(0.001));
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let client = Client::new(backend).expect("a client");
        let exe = client.compile_text(&sgd_module(), &CompileOptions::default()).expect("the module compiles");
        assert_eq!(exe.donated_results(), vec![(0, 0), (1, 1)], "both updates are honored");
        let args: Vec<DeviceBuffer> =
            [&w, &v, &g].iter().enumerate().map(|(i, l)| exe.transfer_argument(i, l).expect("an argument")).collect();
        let mut out = exe.new_results().expect("result buffers");
        c.bench_function(&format!("sgd step/{}/shared nothing", backend.name()), |b| {
            b.iter(|| exe.execute_into(&[&args[0], &args[1], &args[2]], &mut out).expect("the run succeeds"))
        });
        let mut state = Some((args[0].clone(), args[1].clone()));
        c.bench_function(&format!("sgd step/{}/donated", backend.name()), |b| {
            b.iter(|| {
                let (w, v) = state.take().expect("the state is back");
                let step = vec![Argument::Donated(w), Argument::Donated(v), Argument::Lent(&args[2])];
                let mut results = exe.execute_donating(step).expect("the run succeeds");
                let v = results.pop().expect("v");
                let w = results.pop().expect("w");
                state = Some((w, v));
            })
        });
    }
}

fn cache_update(c: &mut Criterion) {
    let cache = Literal::from_vec(&[ROWS as i64, WIDTH as i64], vec![1.0f32; ROWS * WIDTH]).expect("the cache");
    let row = Literal::from_vec(&[1, WIDTH as i64], vec![2.0f32; WIDTH]).expect("a row");
    let pos = Literal::scalar(17i32);
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let client = Client::new(backend).expect("a client");
        let exe = client.compile_text(&module(), &CompileOptions::default()).expect("the module compiles");
        assert_eq!(exe.donated_results(), vec![(0, 0)], "the update is honored");
        let args: Vec<DeviceBuffer> = [&cache, &row, &pos]
            .iter()
            .enumerate()
            .map(|(i, l)| exe.transfer_argument(i, l).expect("an argument"))
            .collect();
        let mut out = exe.new_results().expect("result buffers");
        c.bench_function(&format!("cache update/{}/shared nothing", backend.name()), |b| {
            b.iter(|| exe.execute_into(&[&args[0], &args[1], &args[2]], &mut out).expect("the run succeeds"))
        });
        let mut donated = Some(args[0].clone());
        c.bench_function(&format!("cache update/{}/donated", backend.name()), |b| {
            b.iter(|| {
                let cache = donated.take().expect("the cache is back");
                let step = vec![Argument::Donated(cache), Argument::Lent(&args[1]), Argument::Lent(&args[2])];
                let mut results = exe.execute_donating(step).expect("the run succeeds");
                donated = results.pop();
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
