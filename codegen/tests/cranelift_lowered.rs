//! Kernels the lowering makes from real HLO: each corpus module's entry computation through
//! `emit_kernel`, run on the corpus arguments in the kernel IR interpreter and in the
//! Cranelift tier (the grid split in two), bit for bit.

mod common;

use std::path::Path;

use common::*;
use tessera_hlo::{LayoutMap, Shape};
use tessera_lower::kernel::{run_kernel, Kernel, MemType, Stmt, Ty};

/// The shared folder beside the checkout, or `TESSERA_SHARED` (as the hlo tests find it).
fn corpus() -> std::path::PathBuf {
    std::env::var_os("TESSERA_SHARED")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
        .join("corpus")
}

fn physical(shape: &Shape, path: &Path) -> Option<Vec<u8>> {
    let lit = tessera_hlo::npy::read_npy(path, shape).ok()?;
    Some(lit.relayout_like(shape).ok()?.physical_bytes().ok()?.to_vec())
}

const MAX_BYTES: usize = 1 << 20;
const MAX_WORK: f64 = 2e6;

/// Statements the kernel executes (loop trips multiplied out).
fn work(kernel: &Kernel) -> f64 {
    fn body(stmts: &[Stmt]) -> f64 {
        stmts
            .iter()
            .map(|s| match s {
                Stmt::Loop(l) => (l.end - l.start).max(0) as f64 * body(&l.body),
                Stmt::If { then_body, else_body, .. } => 1.0 + body(then_body).max(body(else_body)),
                _ => 1.0,
            })
            .sum()
    }
    kernel.grid.extent as f64 * body(&kernel.body)
}

#[test]
fn lowered_corpus_kernels_match_the_interpreter() {
    let root = corpus();
    let Ok(dir) = std::fs::read_dir(&root) else {
        panic!(
            "the corpus is not at {}: put the shared folder beside the checkout or set TESSERA_SHARED",
            root.display()
        );
    };
    let mut cases: Vec<_> = dir.flatten().map(|e| e.path()).filter(|p| p.join("module.hlo").exists()).collect();
    cases.sort();
    let (mut compared, mut not_lowered, mut no_args, mut too_big) = (Vec::new(), 0, 0, 0);
    let mut failures = Vec::new();
    let mut refused = Vec::new();
    let mut unsupported = Vec::new();
    let mut compile_us = Vec::new();
    for case in cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("bench_") {
            continue;
        }
        let text = std::fs::read_to_string(case.join("module.hlo")).unwrap();
        let Ok(module) = tessera_hlo::text::parse_module(&text) else { continue };
        let comp = module.entry_comp();
        let Ok(kernel) = tessera_lower::emit_kernel(&module, comp, &name.replace(['-', '.'], "_")) else {
            not_lowered += 1;
            continue;
        };
        let params = comp.parameter_shapes();
        let args: Option<Vec<Vec<u8>>> =
            params.iter().enumerate().map(|(i, s)| physical(s, &case.join(format!("args/{i}.npy")))).collect();
        let Some(mut bufs) = args else {
            no_args += 1;
            continue;
        };
        let outs: Vec<Shape> = match &comp.root_inst().shape {
            Shape::Tuple(s) => s.clone(),
            s => vec![s.clone()],
        };
        for s in &outs {
            let map = LayoutMap::new(s.as_array().unwrap()).unwrap();
            bufs.push(vec![0xA5; map.physical_byte_size() as usize]);
        }
        // The interpreter takes about a microsecond per statement: big modules (convolutions,
        // models) are left to the benchmarks.
        if bufs.iter().map(Vec::len).sum::<usize>() > MAX_BYTES || work(&kernel) > MAX_WORK {
            too_big += 1;
            continue;
        }
        let mut expect = bufs.clone();
        let mut views: Vec<&mut [u8]> = expect.iter_mut().map(|b| b.as_mut_slice()).collect();
        // A kernel the interpreter refuses is the lowering's problem, not this tier's.
        if let Err(e) = run_kernel(&kernel, &mut views) {
            refused.push(format!("{name}: {e}"));
            continue;
        }
        let compiled = match tessera_codegen::cranelift::compile(std::slice::from_ref(&kernel)) {
            Ok(c) => c,
            // A clear refusal (e.g. a call to a runtime function this build's symbol table does
            // not have yet) is allowed; a backend failure is not.
            Err(e @ tessera_codegen::CodegenError::Unsupported { .. }) => {
                unsupported.push(e.to_string());
                continue;
            }
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        compile_us.push((name.clone(), compiled.compile_time().as_micros()));
        let mid = kernel.grid.extent / 2;
        call(&compiled, 0, &mut bufs, mid, kernel.grid.extent);
        call(&compiled, 0, &mut bufs, 0, mid);
        // The runtime GEMM blocks and vectorizes its sums, the interpreter's does not: kernels
        // that call it agree within rounding, everything else bit for bit.
        let calls_gemm = kernel.body.iter().any(|s| matches!(s, Stmt::Call { .. }));
        if calls_gemm {
            if let Err(e) = close_floats(&kernel, &expect, &bufs) {
                failures.push(format!("{name}: {e}\n{kernel}"));
            }
        } else if bufs != expect {
            let e = same_buffers(&kernel, &expect, &bufs).err().unwrap_or_else(|| "NaN payloads differ".into());
            failures.push(format!("{name}: {e}\n{kernel}"));
        }
        compared.push(name);
    }
    eprintln!(
        "lowered and compared {} corpus modules ({not_lowered} not lowered by emit_kernel yet, {no_args} without readable args, {too_big} too big for the interpreter): {}",
        compared.len(),
        compared.join(" ")
    );
    eprintln!("kernels the interpreter refuses (lowering issues): {refused:#?}");
    eprintln!("kernels the tier refuses: {unsupported:#?}");
    eprintln!("compile time per kernel (us, whole compile() call): {compile_us:?}");
    assert!(failures.is_empty(), "{} modules differ; first:\n{}", failures.len(), failures[0]);
    assert!(compared.len() >= 5, "only {} corpus modules lowered and compared", compared.len());
}

/// Float buffers within a relative 1e-5 of the interpreter's (GEMM reassociates its sums),
/// every other buffer identical.
fn close_floats(kernel: &Kernel, expect: &[Vec<u8>], got: &[Vec<u8>]) -> Result<(), String> {
    for (i, ((e, g), b)) in expect.iter().zip(got).zip(&kernel.buffers).enumerate() {
        let pairs: Vec<(f64, f64)> = match b.mem {
            MemType::Scalar(Ty::F32) => e
                .chunks_exact(4)
                .zip(g.chunks_exact(4))
                .map(|(x, y)| {
                    let f = |c: &[u8]| f64::from(f32::from_le_bytes(c.try_into().unwrap()));
                    (f(x), f(y))
                })
                .collect(),
            MemType::Scalar(Ty::F64) => e
                .chunks_exact(8)
                .zip(g.chunks_exact(8))
                .map(|(x, y)| {
                    let f = |c: &[u8]| f64::from_le_bytes(c.try_into().unwrap());
                    (f(x), f(y))
                })
                .collect(),
            _ if e == g => continue,
            _ => return Err(format!("buffer {i} differs")),
        };
        for (j, (x, y)) in pairs.into_iter().enumerate() {
            if !((x - y).abs() <= 1e-5 * (x.abs() + 1.0) || (x.is_nan() && y.is_nan())) {
                return Err(format!("buffer {i} element {j}: interpreter {x}, tier {y}"));
            }
        }
    }
    Ok(())
}
