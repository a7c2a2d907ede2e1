//! The target CPU option on both tiers: every x86-64 level the host supports compiles and
//! runs a kernel to the interpreter's answer, and a target asking for a feature the host lacks
//! is refused with an "unsupported target feature" error naming it, never run.

#[path = "llvm_common/mod.rs"]
mod common;

use tessera_codegen::{CodegenError, CompiledKernels, CpuTarget};
use tessera_lower::kernel::{BinOp, IndexExpr, Kernel, KernelBuilder, MemType, Ty, UnOp};

type CompileFor = fn(&[Kernel], &CpuTarget) -> Result<CompiledKernels, CodegenError>;

const TIERS: [(&str, CompileFor); 2] =
    [("cranelift", tessera_codegen::cranelift::compile_for), ("llvm", tessera_codegen::llvm::compile_for)];

/// `out[i] = floor(a[i] * b[i]) + popcnt(k[i])`: rounding and popcount are instructions only
/// from SSE4.1 / POPCNT on, so the levels take different code paths.
fn kernel() -> Kernel {
    let n = 1000;
    let mut b = KernelBuilder::new("level_kernel", 1);
    let f32m = MemType::Scalar(Ty::F32);
    let a = b.buffer("a", f32m, n, false);
    let bb = b.buffer("b", f32m, n, false);
    let k = b.buffer("k", MemType::Scalar(Ty::I32), n, false);
    let out = b.buffer("out", f32m, n, true);
    let i = b.begin_loop(0, n);
    let x = b.load(a, IndexExpr::var(i, 1));
    let y = b.load(bb, IndexExpr::var(i, 1));
    let m = b.binary(BinOp::Mul, Ty::F32, x, y);
    let f = b.unary(UnOp::Floor, Ty::F32, m);
    let kv = b.load(k, IndexExpr::var(i, 1));
    let pc = b.unary(UnOp::Popcnt, Ty::I32, kv);
    let pf = b.cast(tessera_lower::kernel::CastOp::SIToFP, Ty::I32, Ty::F32, pc);
    let s = b.binary(BinOp::Add, Ty::F32, f, pf);
    b.store(out, IndexExpr::var(i, 1), s);
    b.end_loop();
    b.finish()
}

fn buffers() -> Vec<Vec<u8>> {
    let n = 1000usize;
    let a: Vec<u8> = (0..n).flat_map(|j| (j as f32 * 0.37 - 100.0).to_le_bytes()).collect();
    let b: Vec<u8> = (0..n).flat_map(|j| (1.5 - j as f32 * 0.01).to_le_bytes()).collect();
    let k: Vec<u8> = (0..n).flat_map(|j| ((j as u32).wrapping_mul(2_654_435_761)).to_le_bytes()).collect();
    vec![a, b, k, vec![0; 4 * n]]
}

fn host_has(feature: &str) -> bool {
    inkwell::targets::TargetMachine::get_host_cpu_features()
        .to_string()
        .split(',')
        .any(|x| x.strip_prefix('+') == Some(feature))
}

#[test]
#[cfg(target_arch = "x86_64")]
fn every_supported_level_compiles_and_runs_on_both_tiers() {
    let k = kernel();
    let mut want = buffers();
    let mut views: Vec<&mut [u8]> = want.iter_mut().map(|b| b.as_mut_slice()).collect();
    tessera_lower::kernel::run_kernel(&k, &mut views).unwrap();
    let mut levels = vec!["host", "x86-64", "x86-64-v2"];
    if host_has("avx2") && host_has("bmi2") && host_has("fma") {
        levels.push("x86-64-v3");
    }
    if host_has("avx512f") && host_has("avx512vl") && host_has("avx512bw") {
        levels.push("x86-64-v4");
    }
    for (tier, compile_for) in TIERS {
        for level in &levels {
            let target = CpuTarget::named(level);
            let compiled =
                compile_for(std::slice::from_ref(&k), &target).unwrap_or_else(|e| panic!("{tier} {level}: {e}"));
            let mut got = buffers();
            common::call(compiled.functions[0], &mut got, &[(0, 1)]);
            common::same_buffers(&k, &got, &want).unwrap_or_else(|e| panic!("{tier} {level}: {e}"));
        }
        // Taking a feature away is always possible.
        let fewer = CpuTarget::host().with_features(&["-popcnt", "-sse4.1"]);
        let compiled = compile_for(std::slice::from_ref(&k), &fewer).unwrap_or_else(|e| panic!("{tier}: {e}"));
        let mut got = buffers();
        common::call(compiled.functions[0], &mut got, &[(0, 1)]);
        common::same_buffers(&k, &got, &want).unwrap_or_else(|e| panic!("{tier} without popcnt: {e}"));
    }
}

#[test]
fn a_feature_the_host_lacks_is_an_unsupported_target_feature_error() {
    let k = kernel();
    let mut asks = vec![(CpuTarget::host().with_features(&["+no-such-feature"]), "no-such-feature".to_string())];
    if cfg!(target_arch = "x86_64") && !host_has("avx512f") {
        // Whichever AVX-512 feature the check meets first (avx512f or avx512bw, by host).
        asks.push((CpuTarget::named("x86-64-v4"), "avx512".into()));
    }
    for (tier, compile_for) in TIERS {
        for (target, feature) in &asks {
            match compile_for(std::slice::from_ref(&k), target) {
                Err(e @ CodegenError::UnsupportedFeature { .. }) => {
                    let text = e.to_string();
                    assert!(text.contains(&format!("unsupported target feature '{feature}")), "{tier}: {text}");
                    assert!(text.contains(tier), "{text}");
                }
                Err(e) => panic!("{tier}: wrong error {e}"),
                Ok(_) => panic!("{tier} compiled for {} on a host without {feature}", target.describe()),
            }
        }
        let e = compile_for(std::slice::from_ref(&k), &CpuTarget::named("no-such-cpu")).err().expect("refused");
        assert!(e.to_string().contains("unknown target CPU 'no-such-cpu'"), "{tier}: {e}");
    }
}
