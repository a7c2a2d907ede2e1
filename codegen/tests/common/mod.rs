//! Helpers shared by the tier tests: compile kernels, run them on byte buffers, encode and
//! decode register-type values.

#![allow(dead_code)]

use tessera_codegen::{CodegenError, CompiledKernels};
use tessera_lower::kernel::{run_kernel, Kernel, MemType, Ty};

pub fn compile(kernels: &[Kernel]) -> CompiledKernels {
    match tessera_codegen::cranelift::compile(kernels) {
        Ok(c) => c,
        Err(e) => panic!("compile failed: {e}"),
    }
}

pub fn compile_err(kernel: &Kernel) -> CodegenError {
    match tessera_codegen::cranelift::compile(std::slice::from_ref(kernel)) {
        Ok(_) => panic!("kernel {} compiled but should not", kernel.name),
        Err(e) => e,
    }
}

/// Runs compiled kernel `i` over grid indices `lo..hi` on `buffers`.
pub fn call(compiled: &CompiledKernels, i: usize, buffers: &mut [Vec<u8>], lo: i64, hi: i64) {
    let ptrs: Vec<*mut u8> = buffers.iter_mut().map(|b| b.as_mut_ptr()).collect();
    // SAFETY: the test kernels only touch their buffers within the lengths the tests allocate.
    unsafe { (compiled.functions[i])(ptrs.as_ptr(), lo, hi) };
}

/// Compiles one kernel and runs its whole grid, then checks that the kernel IR interpreter
/// gives the same buffers from the same starting contents.
pub fn run(kernel: &Kernel, buffers: &mut [Vec<u8>]) {
    let compiled = compile(std::slice::from_ref(kernel));
    let mut expect = buffers.to_vec();
    call(&compiled, 0, buffers, 0, kernel.grid.extent);
    let mut refs: Vec<&mut [u8]> = expect.iter_mut().map(|b| b.as_mut_slice()).collect();
    if let Err(e) = run_kernel(kernel, &mut refs) {
        panic!("the interpreter refuses kernel {}: {e}", kernel.name);
    }
    if let Err(e) = same_buffers(kernel, &expect, buffers) {
        panic!("kernel {}: the interpreter and the tier disagree: {e}", kernel.name);
    }
}

/// Byte-identical buffers, except that float NaNs compare as NaNs (their payloads are not
/// specified for FMax/FMin).
pub fn same_buffers(kernel: &Kernel, expect: &[Vec<u8>], got: &[Vec<u8>]) -> Result<(), String> {
    for (i, (e, g)) in expect.iter().zip(got).enumerate() {
        let ty = match kernel.buffers.get(i).map(|b| b.mem) {
            Some(MemType::Scalar(t)) if t.is_float() => t,
            _ => Ty::I8,
        };
        let width = bytes(ty);
        for (j, (a, b)) in e.chunks(width).zip(g.chunks(width)).enumerate() {
            let (a, b) = (decode(ty, a)[0], decode(ty, b)[0]);
            if !same(ty, a, b) {
                return Err(format!(
                    "buffer {i} ({:?}) element {j}: interpreter {a:#x}, tier {b:#x}",
                    kernel.buffers[i].mem
                ));
            }
        }
        if e.len() != g.len() {
            return Err(format!("buffer {i} changed length"));
        }
    }
    Ok(())
}

pub fn bytes(ty: Ty) -> usize {
    match ty {
        Ty::Pred => 1,
        t => t.bits() as usize / 8,
    }
}

/// Little-endian bytes of `values` (each given as bits, low `ty` bits used).
pub fn encode(ty: Ty, values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()[..bytes(ty)].to_vec()).collect()
}

pub fn decode(ty: Ty, data: &[u8]) -> Vec<u64> {
    data.chunks(bytes(ty))
        .map(|c| {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect()
}

/// Bits of a register value, masked to the type's width.
pub fn mask(ty: Ty, v: u64) -> u64 {
    match ty {
        Ty::Pred => v & 1,
        t if t.bits() == 64 => v,
        t => v & ((1u64 << t.bits()) - 1),
    }
}

/// Sign-extends the low bits of `v` as an integer of type `ty`.
pub fn sext(ty: Ty, v: u64) -> i64 {
    let shift = 64 - ty.bits();
    ((v << shift) as i64) >> shift
}

/// Equal bits, or both NaN of the float type (payloads of generated NaNs are not specified).
pub fn same(ty: Ty, a: u64, b: u64) -> bool {
    match ty {
        Ty::F32 => a == b || (f32::from_bits(a as u32).is_nan() && f32::from_bits(b as u32).is_nan()),
        Ty::F64 => a == b || (f64::from_bits(a).is_nan() && f64::from_bits(b).is_nan()),
        t => mask(t, a) == mask(t, b),
    }
}

/// Values worth testing for each type, as bits.
pub fn samples(ty: Ty) -> Vec<u64> {
    match ty {
        Ty::Pred => vec![0, 1],
        Ty::F32 => [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            0.5,
            1.5,
            2.5,
            -2.5,
            3.7,
            -3.7,
            1e10,
            -1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE / 4.0,
            f32::MAX,
            2147483648.0,
            -2147483904.0,
            4294967296.0,
            255.5,
            -129.0,
            65535.9,
        ]
        .iter()
        .map(|f| u64::from(f.to_bits()))
        .collect(),
        Ty::F64 => [
            0.0f64,
            -0.0,
            1.0,
            -1.0,
            0.5,
            1.5,
            2.5,
            -2.5,
            3.7,
            -3.7,
            1e10,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE / 4.0,
            f64::MAX,
            9.3e18,
            -9.3e18,
            1.9e19,
            2147483648.5,
            -129.0,
            16777217.0,
        ]
        .iter()
        .map(|f| f.to_bits())
        .collect(),
        t => {
            let bits = t.bits();
            let min = 1u64 << (bits - 1);
            let all = mask(t, u64::MAX);
            let mut v = vec![
                0,
                1,
                2,
                3,
                7,
                5,
                all,
                all - 1,
                min,
                min - 1,
                min + 1,
                0x5a5a_5a5a_5a5a_5a5a,
                0x1234_5678_9abc_def1,
                bits as u64 - 1,
            ];
            v.iter_mut().for_each(|x| *x = mask(t, *x));
            v.sort();
            v.dedup();
            v
        }
    }
}
