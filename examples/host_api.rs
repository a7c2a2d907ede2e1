//! A host program on Tessera's Rust API: build a dense layer `relu(x·W + b)` with the HLO
//! builder, JIT-compile it with both tiers, run it on literals, then transfer the arguments
//! once into resident buffers and execute repeatedly without copies.
//!
//! `cargo run --release --example host_api`

use std::time::Instant;

use tessera::{Backend, Client, CompileOptions, Error};
use tessera_hlo::builder::Builder;
use tessera_hlo::{ElementType, Literal, Shape};

const BATCH: i64 = 64;
const IN: i64 = 256;
const OUT: i64 = 128;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let b = Builder::new("dense_relu");
    let x = b.parameter(0, &Shape::array(ElementType::F32, &[BATCH, IN]), "x");
    let w = b.parameter(1, &Shape::array(ElementType::F32, &[IN, OUT]), "w");
    let bias = b.parameter(2, &Shape::array(ElementType::F32, &[OUT]), "b");
    // The bias row is broadcast along the batch dimension (its dimension 0 is the output's 1).
    let pre = b.add_broadcast(b.dot(x, w), bias, &[1]);
    let y = b.max(pre, b.broadcast(b.zero(ElementType::F32), &[BATCH, OUT]));
    let module = b.build(y)?;

    let x_val = Literal::from_vec(&[BATCH, IN], pattern(BATCH * IN, 0.01))?;
    let w_val = Literal::from_vec(&[IN, OUT], pattern(IN * OUT, 0.02))?;
    let b_val = Literal::from_vec(&[OUT], pattern(OUT, 0.5))?;
    let reference = reference(&x_val, &w_val, &b_val)?;

    for backend in [Backend::Cranelift, Backend::Llvm] {
        let client = Client::new(backend)?;
        let exe = client.compile(&module, &CompileOptions::default())?;
        println!("{backend}: compiled in {:.2} ms on {} threads", ms(exe.compile_time()), client.threads());
        if let Some(runtime) = exe.runtime() {
            let launches: Vec<String> =
                runtime.launches().iter().map(|l| format!("{} (grid {})", l.name, l.extent)).collect();
            println!("  kernels: {}", launches.join(", "));
        }

        // Literals in, literals out (any layout in; the module's layouts out).
        let out = exe.run(&[x_val.clone(), w_val.clone(), b_val.clone()])?;
        let y = out[0].to_vec::<f32>()?;
        println!("  run: y[0][0..4] = {:?}, max |y - reference| = {:.2e}", &y[..4], max_diff(&y, &reference));

        // Resident buffers: transfer once, execute many times into the same result buffers.
        let args =
            [exe.transfer_argument(0, &x_val)?, exe.transfer_argument(1, &w_val)?, exe.transfer_argument(2, &b_val)?];
        let arg_refs: Vec<_> = args.iter().collect();
        let mut results = exe.new_results()?;
        let runs = 200;
        let start = Instant::now();
        for _ in 0..runs {
            exe.execute_into(&arg_refs, &mut results)?;
        }
        let per_run = start.elapsed().as_secs_f64() * 1e6 / runs as f64;
        let y = results[0].to_literal()?.to_vec::<f32>()?;
        println!("  execute x{runs}: {per_run:.1} us per run, max |y - reference| = {:.2e}", max_diff(&y, &reference));

        // Mistakes are errors that name the argument, not crashes.
        match exe.run(&[x_val.clone(), b_val.clone(), b_val.clone()]) {
            Err(e @ Error::Argument { .. }) => println!("  wrong argument: {e}"),
            other => return Err(format!("expected an argument error, got {:?}", other.map(|_| ())).into()),
        }
    }
    Ok(())
}

/// Deterministic values in [-scale, scale).
fn pattern(n: i64, scale: f32) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * scale).collect()
}

/// `relu(x·W + b)` computed directly in f64.
fn reference(x: &Literal, w: &Literal, b: &Literal) -> Result<Vec<f32>, Error> {
    let (x, w, b) = (x.to_vec::<f32>()?, w.to_vec::<f32>()?, b.to_vec::<f32>()?);
    let (n, k, m) = (BATCH as usize, IN as usize, OUT as usize);
    let mut y = vec![0f32; n * m];
    for i in 0..n {
        for j in 0..m {
            let dot: f64 = (0..k).map(|p| f64::from(x[i * k + p]) * f64::from(w[p * m + j])).sum();
            y[i * m + j] = (dot + f64::from(b[j])).max(0.0) as f32;
        }
    }
    Ok(y)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
