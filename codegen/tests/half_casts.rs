//! The f16 casts on every way a tier runs them: LLVM's conversion instructions (a host with
//! F16C), LLVM on a CPU without them and Cranelift (both the integer sequences of
//! `kernel::half_casts`), in vector loops, their scalar tails and straight-line code. Each
//! must give the `half` crate's bits exactly, NaN payloads included, on every f16 value and
//! around every rounding boundary of f32 values.

#[path = "llvm_common/mod.rs"]
mod common;

use tessera_codegen::{CodegenError, CompiledKernels, CpuTarget};
use tessera_lower::kernel::{CastOp, IndexExpr, Kernel, KernelBuilder, MemType, Tail, Ty};
use tessera_testkit::TempDir;

/// Converts element 0 at the top level (scalar code), then elements 1.. in a loop of 16 lanes
/// whose count leaves a scalar tail.
fn kernel(op: CastOp, from: Ty, to: Ty, n: i64) -> Kernel {
    let mut b = KernelBuilder::new("conv", 1);
    let src = b.buffer("src", MemType::Scalar(from), n, false);
    let dst = b.buffer("dst", MemType::Scalar(to), n, true);
    let x = b.load(src, IndexExpr::constant(0));
    let y = b.cast(op, from, to, x);
    b.store(dst, IndexExpr::constant(0), y);
    let i = b.begin_loop(1, n);
    let x = b.load(src, IndexExpr::var(i, 1));
    let y = b.cast(op, from, to, x);
    b.store(dst, IndexExpr::var(i, 1), y);
    b.end_loop_vectorized(16, Tail::Peel);
    b.finish()
}

type Compile = fn(&[Kernel]) -> Result<CompiledKernels, CodegenError>;

/// The three ways: LLVM on the host, LLVM for x86-64-v2 (no F16C; it runs on any x86-64
/// host), Cranelift.
fn tiers() -> Vec<(&'static str, Compile)> {
    let mut tiers: Vec<(&'static str, Compile)> = vec![
        ("llvm (host)", |k| tessera_codegen::llvm::compile_for(k, &CpuTarget::host())),
        ("cranelift", |k| tessera_codegen::cranelift::compile_for(k, &CpuTarget::host())),
    ];
    if cfg!(target_arch = "x86_64") {
        tiers.push(("llvm (x86-64-v2)", |k| tessera_codegen::llvm::compile_for(k, &CpuTarget::named("x86-64-v2"))));
    }
    tiers
}

fn run(compile: Compile, k: &Kernel, input: &[u8], out_bytes: usize) -> Vec<u8> {
    let compiled = compile(std::slice::from_ref(k)).unwrap_or_else(|e| panic!("{e}"));
    let mut bufs = vec![input.to_vec(), vec![0xAB; out_bytes]];
    common::call(compiled.functions[0], &mut bufs, &[(0, 1)]);
    bufs.pop().unwrap_or_default()
}

#[test]
fn f16_widening_gives_the_half_crates_bits_on_every_input() {
    let input: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
    let k = kernel(CastOp::F16ToF32, Ty::I16, Ty::F32, 65536);
    for (tier, compile) in tiers() {
        let out = run(compile, &k, &input, 4 * 65536);
        for (h, got) in (0..=u16::MAX).zip(out.chunks_exact(4)) {
            let want = ::half::f16::from_bits(h).to_f32().to_bits();
            let got = u32::from_le_bytes([got[0], got[1], got[2], got[3]]);
            assert_eq!(got, want, "{tier}: f16 bits {h:#06x} widened to {got:#010x}, want {want:#010x}");
        }
    }
}

#[test]
fn f32_narrowing_gives_the_half_crates_bits_around_every_boundary() {
    // Each upper half with low halves below, at and above the halfway points of the f16
    // roundings (13 dropped bits, more for subnormal results), and a stride through the rest.
    let lows = [0u32, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff];
    let mut inputs: Vec<u32> =
        (0..=u16::MAX).flat_map(|h| lows.iter().map(move |&l| (u32::from(h) << 16) | l)).collect();
    inputs.extend((0..u32::MAX).step_by(6151));
    let bytes: Vec<u8> = inputs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let k = kernel(CastOp::F32ToF16, Ty::F32, Ty::I16, inputs.len() as i64);
    for (tier, compile) in tiers() {
        let out = run(compile, &k, &bytes, 2 * inputs.len());
        for (&x, got) in inputs.iter().zip(out.chunks_exact(2)) {
            let want = ::half::f16::from_f32(f32::from_bits(x)).to_bits();
            let got = u16::from_le_bytes([got[0], got[1]]);
            assert_eq!(got, want, "{tier}: f32 bits {x:#010x} narrowed to {got:#06x}, want {want:#06x}");
        }
    }
}

/// A host with F16C gets LLVM's half type (one instruction per vector), and a CPU without it
/// gets no call to a conversion routine: the casts were expanded before LLVM saw them.
#[test]
fn llvm_converts_by_instruction_only_where_the_cpu_has_one() {
    let k = kernel(CastOp::F16ToF32, Ty::I16, Ty::F32, 64);
    let ir = |cpu: &CpuTarget| {
        let dir = TempDir::new("tessera_half_casts", "ir");
        tessera_codegen::llvm::compile_dumping(std::slice::from_ref(&k), cpu, Some(&dir))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::read_to_string(dir.join("llvm.ll")).unwrap_or_default()
    };
    #[cfg(target_arch = "x86_64")]
    let host_has_f16c = std::arch::is_x86_feature_detected!("f16c");
    #[cfg(not(target_arch = "x86_64"))]
    let host_has_f16c = cfg!(target_arch = "aarch64");
    if host_has_f16c {
        let text = ir(&CpuTarget::host());
        assert!(text.contains("fpext <16 x half>"), "no vector half conversion in:\n{text}");
    }
    if cfg!(target_arch = "x86_64") {
        let text = ir(&CpuTarget::named("x86-64-v2"));
        assert!(!text.contains("half"), "a CPU without F16C got half conversions:\n{text}");
    }
}

/// Every f32 bit pattern narrowed on every tier: `cargo test --release --test half_casts --
/// --ignored` (about four minutes on 2 cores).
#[test]
#[ignore]
fn f32_narrowing_gives_the_half_crates_bits_on_every_input() {
    const CHUNK: u64 = 1 << 24;
    for (tier, compile) in tiers() {
        let k = kernel(CastOp::F32ToF16, Ty::F32, Ty::I16, CHUNK as i64);
        let compiled = compile(std::slice::from_ref(&k)).unwrap_or_else(|e| panic!("{e}"));
        for start in (0..1u64 << 32).step_by(CHUNK as usize) {
            let input: Vec<u8> = (start..start + CHUNK).flat_map(|x| (x as u32).to_le_bytes()).collect();
            let mut bufs = vec![input, vec![0xAB; 2 * CHUNK as usize]];
            common::call(compiled.functions[0], &mut bufs, &[(0, 1)]);
            for (x, got) in (start..start + CHUNK).zip(bufs[1].chunks_exact(2)) {
                let want = ::half::f16::from_f32(f32::from_bits(x as u32)).to_bits();
                let got = u16::from_le_bytes([got[0], got[1]]);
                assert_eq!(got, want, "{tier}: f32 bits {x:#010x} narrowed to {got:#06x}, want {want:#06x}");
            }
        }
    }
}
