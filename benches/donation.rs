//! What donation saves (`input_output_alias`): a decoder step's KV-cache update, one row of an
//! f32[4096,1024] cache (16 MiB) replaced. `shared nothing` runs on resident buffers with
//! `execute_into`, so the update copies the whole cache into the result; `donated` gives the
//! cache up with `execute_donated`, which returns it updated in place: only the row is written.

use criterion::{criterion_group, criterion_main, Criterion};
use tessera::{Backend, Client, CompileOptions, DeviceBuffer};
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

fn bench(c: &mut Criterion) {
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
                let mut results =
                    exe.execute_donated(vec![cache, args[1].clone(), args[2].clone()]).expect("the run succeeds");
                donated = results.pop();
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
