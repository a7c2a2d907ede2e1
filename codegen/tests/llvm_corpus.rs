//! Kernels the lowering makes from real modules: the entry computation of every corpus case
//! that `emit_kernel` lowers is compiled by the LLVM tier and must leave the same buffers as
//! the kernel interpreter on random contents (NaNs compared as NaNs).

#[path = "llvm_common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use tessera_codegen::CodegenError;
use tessera_hlo::{ElementType, Module, Shape};
use tessera_lower::kernel::random::random_buffers;
use tessera_lower::kernel::{run_kernel, Kernel, Stmt};

/// The shared folder: `$TESSERA_SHARED`, else `shared/` beside the checkout (as the hlo
/// tests find it). Missing, the test fails rather than passing unchecked.
fn corpus_dir() -> PathBuf {
    let dir = std::env::var_os("TESSERA_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
        .join("corpus");
    assert!(dir.is_dir(), "no corpus at {}: set TESSERA_SHARED", dir.display());
    dir
}

/// How to compare each kernel buffer: by the HLO element type of the parameter or result it
/// holds (f16/bf16 live in `I16` buffers, and their NaN payloads are as open as f32's).
fn elems(module: &Module, kernel: &Kernel) -> Vec<common::Elem> {
    let comp = module.entry_comp();
    let mut shapes: Vec<Shape> = comp.parameter_shapes().to_vec();
    match &comp.root_inst().shape {
        Shape::Tuple(leaves) => shapes.extend(leaves.iter().cloned()),
        s => shapes.push(s.clone()),
    }
    let mut out = common::elems_of(kernel);
    for (e, s) in out.iter_mut().zip(&shapes) {
        match s.as_array().map(|a| a.element_type) {
            Some(ElementType::F16) => *e = common::Elem::F16,
            Some(ElementType::BF16) => *e = common::Elem::BF16,
            _ => {}
        }
    }
    out
}

/// Kernels whose buffers or statement executions exceed these are left out: the interpreter
/// would take minutes.
const MAX_BYTES: i64 = 4 << 20;
const MAX_WORK: i64 = 20_000_000;

/// The runtime functions a statement list calls.
fn calls(body: &[Stmt]) -> Vec<String> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Call { func, .. } => out.push(func.clone()),
            Stmt::Loop(l) => out.extend(calls(&l.body)),
            Stmt::If { then_body, else_body, .. } => {
                out.extend(calls(then_body));
                out.extend(calls(else_body));
            }
            _ => {}
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Like `same_buffers_as`, but f32/f64 elements may differ by a relative 1e-4 (of the larger
/// magnitude, at least 1).
fn close_buffers(elems: &[common::Elem], got: &[Vec<u8>], want: &[Vec<u8>]) -> Result<(), String> {
    let exact: Vec<common::Elem> = elems
        .iter()
        .map(|e| match e {
            common::Elem::F32 | common::Elem::F64 => common::Elem::Bytes,
            e => *e,
        })
        .collect();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        // Equal first: infinities are close to themselves, though their difference is NaN.
        let close = |a: f64, b: f64| {
            a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-4 * a.abs().max(b.abs()).max(1.0)
        };
        let ok = match elems.get(i) {
            Some(common::Elem::F32) => g.chunks(4).zip(w.chunks(4)).all(|(a, b)| {
                close(
                    f64::from(f32::from_le_bytes(a.try_into().unwrap())),
                    f64::from(f32::from_le_bytes(b.try_into().unwrap())),
                )
            }),
            Some(common::Elem::F64) => g.chunks(8).zip(w.chunks(8)).all(|(a, b)| {
                close(f64::from_le_bytes(a.try_into().unwrap()), f64::from_le_bytes(b.try_into().unwrap()))
            }),
            _ => common::same_buffers_as(&exact[i..=i], &got[i..=i], &want[i..=i]).is_ok(),
        };
        if !ok || g.len() != w.len() {
            return Err(format!("buffer {i} differs beyond rounding"));
        }
    }
    Ok(())
}

/// Statements executed per grid index.
fn work(body: &[Stmt]) -> i64 {
    body.iter()
        .map(|s| match s {
            Stmt::Loop(l) => (l.end - l.start).max(0).saturating_mul(work(&l.body)).saturating_add(1),
            Stmt::If { then_body, else_body, .. } => work(then_body).max(work(else_body)).saturating_add(1),
            _ => 1,
        })
        .fold(0i64, i64::saturating_add)
}

#[test]
fn lowered_corpus_kernels_match_the_interpreter() {
    let mut cases: Vec<PathBuf> =
        std::fs::read_dir(corpus_dir()).expect("corpus").flatten().map(|e| e.path()).collect();
    cases.sort();
    let (mut compared, mut not_lowered, mut too_big) = (Vec::new(), 0, 0);
    let mut unsupported = Vec::new();
    let mut awaiting = Vec::new();
    for case in cases.iter().filter(|c| c.join("module.hlo").is_file()) {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(case.join("module.hlo")).expect("read");
        let Ok(module) = tessera_hlo::text::parse_module(&text) else { continue };
        let Ok(kernel) = tessera_lower::emit_kernel(&module, module.entry_comp(), "k") else {
            not_lowered += 1;
            continue;
        };
        let compiled = match tessera_codegen::llvm::compile(std::slice::from_ref(&kernel)) {
            Ok(c) => c,
            Err(e @ CodegenError::Unsupported { .. }) => {
                // A call to a runtime function this build's symbol table lacks yet (the GEMM
                // lands with the runtime's branch) is the one refusal expected here.
                let table = tessera_runtime::abi::symbols();
                let missing: Vec<String> =
                    calls(&kernel.body).into_iter().filter(|f| !table.iter().any(|(n, _)| n == f)).collect();
                if missing.is_empty() {
                    unsupported.push(format!("{name}: {e}"));
                } else {
                    awaiting.push(format!("{name} ({})", missing.join(", ")));
                }
                continue;
            }
            Err(e) => panic!("{name}: {e}\n{kernel}"),
        };
        // Compiled whatever their size; run only when the interpreter can keep up.
        let bytes: i64 = kernel.buffers.iter().map(|b| (b.len.saturating_mul(i64::from(b.mem.bits())) + 7) / 8).sum();
        if bytes > MAX_BYTES || work(&kernel.body).saturating_mul(kernel.grid.extent) > MAX_WORK {
            too_big += 1;
            continue;
        }
        let initial = random_buffers(&kernel, 17);
        let mut want = initial.clone();
        let mut views: Vec<&mut [u8]> = want.iter_mut().map(|b| b.as_mut_slice()).collect();
        run_kernel(&kernel, &mut views).unwrap_or_else(|e| panic!("{name}: interpreter: {e}"));
        let mut got = initial.clone();
        common::call(compiled.functions[0], &mut got, &[(0, kernel.grid.extent)]);
        // Runtime GEMMs block and fuse where the interpreter sums in order: their float
        // results agree within rounding, not bit for bit.
        let result = if calls(&kernel.body).is_empty() {
            common::same_buffers_as(&elems(&module, &kernel), &got, &want)
        } else {
            close_buffers(&elems(&module, &kernel), &got, &want)
        };
        if let Err(e) = result {
            panic!("{name}: LLVM tier and interpreter differ: {e}\n{kernel}");
        }
        compared.push(name);
    }
    eprintln!(
        "corpus: {} lowered kernels match ({}); {not_lowered} not lowered by emit_kernel; {too_big} compiled but too large to interpret; {} call runtime functions this build lacks: {awaiting:?}; {} unsupported by the tier: {unsupported:#?}",
        compared.len(),
        compared.join(", "),
        awaiting.len(),
        unsupported.len()
    );
    assert!(unsupported.is_empty(), "the LLVM tier refused lowered kernels: {unsupported:#?}");
    assert!(compared.len() >= 5, "too few corpus kernels compared: {compared:?}");
}
