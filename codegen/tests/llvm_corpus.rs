//! Kernels the lowering makes from real modules: the entry computation of every corpus case
//! that `emit_kernel` lowers is compiled by the LLVM tier and must leave the same buffers as
//! the kernel interpreter on random contents (NaNs compared as NaNs).

#[path = "llvm_common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use tessera_codegen::CodegenError;
use tessera_hlo::{ElementType, Literal, Module, Shape};
use tessera_lower::kernel::random::random_buffers;
use tessera_lower::kernel::{run_kernel, Kernel, KernelRunError, Stmt, VerifyErrorKind};

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
    let mut against_eval_only = Vec::new();
    let mut unsupported = Vec::new();
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
                unsupported.push(format!("{name}: {e}"));
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
        match run_kernel(&kernel, &mut views) {
            Ok(()) => {}
            // The interpreter verifies first and refuses what the bounds proof cannot show
            // (see the tier's note on `verify_kernel`): these kernels are checked against the
            // HLO interpreter instead.
            Err(KernelRunError::Verify(e)) if matches!(e.kind, VerifyErrorKind::OutOfBounds { .. }) => {
                against_eval(&name, &module, &kernel, compiled.functions[0]);
                against_eval_only.push(name);
                continue;
            }
            Err(e) => panic!("{name}: interpreter: {e}"),
        }
        let mut got = initial.clone();
        common::call(compiled.functions[0], &mut got, &[(0, kernel.grid.extent)]);
        if let Err(e) = common::same_buffers_as(&elems(&module, &kernel), &got, &want) {
            panic!("{name}: LLVM tier and interpreter differ: {e}\n{kernel}");
        }
        compared.push(name);
    }
    eprintln!(
        "corpus: {} lowered kernels match ({}); {} kernels the interpreter refuses match hlo::eval ({against_eval_only:?}); {not_lowered} not lowered by emit_kernel; {too_big} compiled but too large to interpret; {} unsupported by the tier: {unsupported:#?}",
        compared.len(),
        compared.join(", "),
        against_eval_only.len(),
        unsupported.len()
    );
    assert!(unsupported.is_empty(), "the LLVM tier refused lowered kernels: {unsupported:#?}");
    assert!(compared.len() >= 5, "too few corpus kernels compared: {compared:?}");
}

/// Random bits for one element: small floats (f16/bf16 from a table of exact values),
/// integers of every magnitude.
fn random_bits(et: ElementType, x: u64) -> u128 {
    let small = ((x % 4001) as f64 - 2000.0) / 256.0;
    match et {
        ElementType::Pred => u128::from(x & 1),
        ElementType::F16 => {
            u128::from([0x3c00u16, 0xc100, 0x3800, 0x4200, 0x0000, 0x8000, 0x4d00, 0xb400][(x % 8) as usize])
        }
        ElementType::BF16 => {
            u128::from([0x3f80u16, 0xc020, 0x3f00, 0x4040, 0x0000, 0x8000, 0x41a0, 0xbe80][(x % 8) as usize])
        }
        ElementType::F32 => u128::from((small as f32).to_bits()),
        ElementType::F64 => u128::from(small.to_bits()),
        _ => {
            let w = et.bit_width();
            u128::from(if w >= 64 { x } else { x & ((1u64 << w) - 1) })
        }
    }
}

fn float_of(et: ElementType, bits: u128) -> f64 {
    match et {
        ElementType::F16 => {
            let b = bits as u32;
            let (sign, exp, man) = ((b >> 15) & 1, (b >> 10) & 0x1f, b & 0x3ff);
            let v = match exp {
                0 => f64::from(man) * 2f64.powi(-24),
                31 => {
                    if man == 0 {
                        f64::INFINITY
                    } else {
                        f64::NAN
                    }
                }
                e => (1.0 + f64::from(man) / 1024.0) * 2f64.powi(e as i32 - 15),
            };
            if sign == 1 {
                -v
            } else {
                v
            }
        }
        ElementType::BF16 => f64::from(f32::from_bits((bits as u32) << 16)),
        ElementType::F32 => f64::from(f32::from_bits(bits as u32)),
        _ => f64::from_bits(bits as u64),
    }
}

/// Runs the compiled kernel on random arguments laid out physically and compares its results
/// with `hlo::eval` (floats within a relative 1e-5, or 1e-2 for 16-bit floats).
fn against_eval(name: &str, module: &Module, kernel: &Kernel, f: tessera_codegen::KernelFn) {
    let comp = module.entry_comp();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let args: Vec<Literal> = comp
        .parameter_shapes()
        .iter()
        .map(|s| {
            let a = s.as_array().expect("array parameter");
            let n = a.dims.iter().product::<i64>() as usize;
            Literal::from_bits_vec(s.clone(), (0..n).map(|_| random_bits(a.element_type, next())).collect())
                .expect("literal")
        })
        .collect();
    let want = tessera_hlo::eval::evaluate(module, &args).unwrap_or_else(|e| panic!("{name}: eval: {e}"));
    let wants: Vec<Literal> = match want.tuple_elements() {
        Some(e) => e.to_vec(),
        None => vec![want],
    };
    let outs: Vec<Shape> = match &comp.root_inst().shape {
        Shape::Tuple(leaves) => leaves.clone(),
        s => vec![s.clone()],
    };
    let mut bufs: Vec<Vec<u8>> = args.iter().map(|a| a.physical_bytes().expect("bytes").to_vec()).collect();
    for s in &outs {
        let size = tessera_hlo::layout_index::physical_byte_size(s.as_array().expect("array result")).expect("size");
        bufs.push(vec![0xA5; size as usize]);
    }
    assert_eq!(bufs.len(), kernel.buffers.len(), "{name}: kernel buffers");
    common::call(f, &mut bufs, &[(0, kernel.grid.extent)]);
    let n = args.len();
    for (i, (s, w)) in outs.iter().zip(&wants).enumerate() {
        let got = Literal::from_physical_bytes(s.clone(), bufs[n + i].clone()).expect("result");
        let et = w.element_type();
        for e in 0..w.element_count() {
            let (g, v) = (got.get_bits(e).unwrap_or(u128::MAX), w.get_bits(e).unwrap_or(0));
            let ok = if et.is_float() {
                let (a, b) = (float_of(et, g), float_of(et, v));
                let tol = if matches!(et, ElementType::F16 | ElementType::BF16) { 1e-2 } else { 1e-5 };
                (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * a.abs().max(b.abs()).max(1e-3)
            } else {
                g == v
            };
            assert!(ok, "{name}: output {i} element {e}: got bits {g:#x}, want {v:#x}\n{kernel}");
        }
    }
}
