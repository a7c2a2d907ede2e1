//! Shared by the tier tests: running a compiled kernel on byte buffers.

#![allow(dead_code)]

use tessera_codegen::{CompiledKernels, KernelFn};
use tessera_lower::kernel::Kernel;

/// Byte buffers copied into 64-byte aligned storage for the call (as the runtime's arenas
/// align them), then copied back.
pub fn call(f: KernelFn, bufs: &mut [Vec<u8>], ranges: &[(i64, i64)]) {
    #[repr(align(64))]
    #[derive(Clone, Copy)]
    struct Line([u8; 64]);
    let mut storage: Vec<Vec<Line>> = bufs
        .iter()
        .map(|b| {
            let mut s = vec![Line([0; 64]); b.len().div_ceil(64).max(1)];
            for (i, byte) in b.iter().enumerate() {
                s[i / 64].0[i % 64] = *byte;
            }
            s
        })
        .collect();
    let table: Vec<*mut u8> = storage.iter_mut().map(|s| s.as_mut_ptr() as *mut u8).collect();
    for &(lo, hi) in ranges {
        // SAFETY: every buffer is as long as the kernel's declared length (the tests build
        // both from the same numbers), and the table has one entry per kernel buffer.
        unsafe { f(table.as_ptr(), lo, hi) };
    }
    for (b, s) in bufs.iter_mut().zip(&storage) {
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = s[i / 64].0[i % 64];
        }
    }
}

pub fn compile(kernels: &[Kernel]) -> CompiledKernels {
    match tessera_codegen::llvm::compile(kernels) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// Compiles `kernel` alone and runs its whole grid over `bufs`.
pub fn run(kernel: &Kernel, bufs: &mut [Vec<u8>]) {
    let compiled = compile(std::slice::from_ref(kernel));
    call(compiled.functions[0], bufs, &[(0, kernel.grid.extent)]);
}
