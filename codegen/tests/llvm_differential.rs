//! The LLVM tier against the kernel interpreter on kernels no one wrote by hand: random
//! kernels from `kernel::random`, compiled a hundred to a module, run with the grid split in
//! pieces, must leave the same buffers as the interpreter (NaNs compared as NaNs).

#[path = "llvm_common/mod.rs"]
mod common;

use tessera_lower::kernel::random::{random_buffers, random_kernel};
use tessera_lower::kernel::run_kernel;

const KERNELS: u64 = 1200;
const PER_MODULE: u64 = 100;

#[test]
fn random_kernels_match_the_interpreter() {
    let mut compile_time = std::time::Duration::ZERO;
    for batch in 0..KERNELS / PER_MODULE {
        let seeds: Vec<u64> = (batch * PER_MODULE..(batch + 1) * PER_MODULE).collect();
        let kernels: Vec<_> = seeds.iter().map(|s| random_kernel(*s)).collect();
        let compiled = common::compile(&kernels);
        compile_time += compiled.compile_time();
        for ((seed, kernel), f) in seeds.iter().zip(&kernels).zip(&compiled.functions) {
            let initial = random_buffers(kernel, seed.wrapping_mul(31));
            let mut want = initial.clone();
            let mut views: Vec<&mut [u8]> = want.iter_mut().map(|b| b.as_mut_slice()).collect();
            run_kernel(kernel, &mut views).unwrap_or_else(|e| panic!("interpreter, seed {seed}: {e}\n{kernel}"));
            // Whole grid, then one grid index per call in reverse order.
            let extent = kernel.grid.extent;
            let reversed: Vec<(i64, i64)> = (0..extent).rev().map(|g| (g, g + 1)).collect();
            for ranges in [vec![(0, extent)], reversed] {
                let mut got = initial.clone();
                common::call(*f, &mut got, &ranges);
                if let Err(e) = common::same_buffers(kernel, &got, &want) {
                    panic!("seed {seed}, grid ranges {ranges:?}: {e}\n{kernel}");
                }
            }
        }
    }
    eprintln!(
        "{KERNELS} random kernels in {} modules: {:?} compile time, {:?} per kernel",
        KERNELS / PER_MODULE,
        compile_time,
        compile_time / KERNELS as u32
    );
}
