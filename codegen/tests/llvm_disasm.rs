//! The requirement: the JIT-compiled code of an elementwise kernel uses the host's
//! widest vectors (zmm on AVX-512, ymm on AVX2), which only happens when every function
//! carries the host CPU and features (MCJIT otherwise emits SSE).

#[path = "llvm_common/mod.rs"]
mod common;

use std::ffi::{c_char, CStr, CString};

use inkwell::llvm_sys::disassembler::{LLVMCreateDisasmCPUFeatures, LLVMDisasmDispose, LLVMDisasmInstruction};
use inkwell::targets::TargetMachine;

/// Disassembles the function at `start`. MCJIT does not report function sizes, so this
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
    let compiled = common::compile(&[common::muladd(4096)]);
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
