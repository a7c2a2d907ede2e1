//! The requirement: the JIT-compiled code of an elementwise kernel uses the host's
//! widest vectors (zmm on AVX-512, ymm on AVX2), which only happens when every function
//! carries the host CPU and features (LLVM otherwise emits SSE); and a named target CPU
//! (an x86-64 level) gets that level's vectors and no wider.

#[path = "llvm_common/mod.rs"]
mod common;

use std::ffi::{c_char, CStr, CString};

use inkwell::llvm_sys::disassembler::{LLVMCreateDisasmCPUFeatures, LLVMDisasmDispose, LLVMDisasmInstruction};
use inkwell::targets::TargetMachine;
use tessera_codegen::CpuTarget;

/// Disassembles the function at `start`. The JIT linker does not report function sizes, so this
/// walks instructions linearly and stops at a return or unconditional jump once no branch
/// seen so far targets a later address (compiler output has no jump tables here).
fn disassemble(start: *const u8) -> Vec<String> {
    let triple = CString::new(TargetMachine::get_default_triple().as_str().to_bytes()).unwrap();
    let cpu = CString::new(TargetMachine::get_host_cpu_name().to_string()).unwrap();
    let features = CString::new(TargetMachine::get_host_cpu_features().to_string()).unwrap();
    // SAFETY: valid C strings; no callbacks.
    let dc = unsafe {
        LLVMCreateDisasmCPUFeatures(
            triple.as_ptr(),
            cpu.as_ptr(),
            features.as_ptr(),
            std::ptr::null_mut(),
            0,
            None,
            None,
        )
    };
    assert!(!dc.is_null(), "no disassembler for this host");
    let mut lines = Vec::new();
    let mut pc = start as u64;
    let mut frontier = pc;
    let limit = pc + (1 << 16);
    let mut text = [0 as c_char; 256];
    while pc < limit {
        // SAFETY: `pc` is inside the JIT-compiled function (the walk ends at its last
        // instruction), whose code pages are mapped readable; the decoder reads only the bytes
        // of the one instruction it decodes (at most 15).
        let len = unsafe { LLVMDisasmInstruction(dc, pc as *mut u8, 15, pc, text.as_mut_ptr(), text.len()) };
        assert!(len > 0, "undecodable instruction at +{:#x}", pc - start as u64);
        // SAFETY: LLVM wrote a NUL-terminated string into `text`.
        let line = unsafe { CStr::from_ptr(text.as_ptr()) }.to_string_lossy().trim().to_string();
        let next = pc + len as u64;
        let mut words = line.split_whitespace();
        let mnemonic = words.next().unwrap_or("").to_string();
        if mnemonic.starts_with('j') {
            if let Some(target) = words.next().and_then(|w| parse_int(w)) {
                frontier = frontier.max(next.wrapping_add(target as u64));
            }
        }
        lines.push(format!("{:5x}: {line}", pc - start as u64));
        pc = next;
        if matches!(mnemonic.as_str(), "ret" | "retq" | "jmp" | "jmpq") && pc > frontier {
            break;
        }
    }
    // SAFETY: created above, disposed once.
    unsafe { LLVMDisasmDispose(dc) };
    lines
}

fn parse_int(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let v = match s.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h, 16).ok()?,
        None => s.parse().ok()?,
    };
    Some(if neg { -v } else { v })
}

#[test]
fn elementwise_kernel_uses_the_widest_host_vectors() {
    // The host explicitly: `TESSERA_CPU` (valgrind runs) must not change what this checks.
    let compiled = tessera_codegen::llvm::compile_for(&[common::muladd(4096)], &CpuTarget::host()).unwrap();
    let lines = disassemble(compiled.functions[0] as *const u8);
    let all = lines.join("\n");
    // Shown with --nocapture; the report quotes it.
    eprintln!("{all}");
    let features = TargetMachine::get_host_cpu_features().to_string();
    let has = |f: &str| features.split(',').any(|x| x == f);
    let register = if has("+avx512f") {
        "%zmm"
    } else if has("+avx2") {
        "%ymm"
    } else {
        "%xmm"
    };
    for op in ["vmulps", "vaddps"] {
        let wide = lines.iter().filter(|l| l.contains(op) && l.contains(register)).count();
        assert!(wide > 0, "no {op} on {register} registers in the JIT-compiled kernel:\n{all}");
    }
    // Unfused, as the kernel asked (no contraction without fast-math flags).
    assert!(!all.contains("vfmadd"), "mul and add were fused:\n{all}");
    assert!(
        lines.last().is_some_and(|l| l.ends_with("retq") || l.ends_with("ret")),
        "the walk stopped before the return"
    );
}

fn host_has(feature: &str) -> bool {
    TargetMachine::get_host_cpu_features().to_string().split(',').any(|x| x.strip_prefix('+') == Some(feature))
}

/// The lines of `muladd` compiled for `cpu`.
fn muladd_for(cpu: &CpuTarget) -> Vec<String> {
    let compiled = tessera_codegen::llvm::compile_for(&[common::muladd(4096)], cpu).unwrap();
    let mut bufs = vec![vec![0u8; 4 * 4096]; 4];
    for (i, b) in bufs.iter_mut().take(3).enumerate() {
        for (j, chunk) in b.chunks_mut(4).enumerate() {
            chunk.copy_from_slice(&((i * 7 + j) as f32 * 0.25).to_le_bytes());
        }
    }
    common::call(compiled.functions[0], &mut bufs, &[(0, 1)]);
    for j in 0..4096 {
        let v = |i: usize| f32::from_le_bytes(bufs[i][4 * j..4 * j + 4].try_into().unwrap());
        assert_eq!(v(3), v(0) * v(1) + v(2), "element {j} for {}", cpu.describe());
    }
    disassemble(compiled.functions[0] as *const u8)
}

#[test]
#[cfg(target_arch = "x86_64")]
fn x86_64_levels_get_their_own_vector_width() {
    let base = muladd_for(&CpuTarget::named("x86-64")).join("\n");
    assert!(base.contains("mulps") && !base.contains("%ymm") && !base.contains("%zmm"), "{base}");
    assert!(!base.contains("vmulps"), "SSE2 code has no VEX encodings:\n{base}");
    if host_has("avx2") {
        let v3 = muladd_for(&CpuTarget::named("x86-64-v3")).join("\n");
        assert!(v3.contains("vmulps") && v3.contains("%ymm"), "{v3}");
        assert!(!v3.contains("%zmm"), "x86-64-v3 has no AVX-512:\n{v3}");
        // A level plus a toggle: AVX-512 on top of v3 (when the host has it).
        if host_has("avx512f") {
            let v3_512 = CpuTarget::named("x86-64-v3").with_features(&["+avx512f"]);
            assert!(muladd_for(&v3_512).join("\n").contains("%zmm"));
        }
    }
}
