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

/// Compiles `kernel` alone and runs its whole grid over `bufs`, checking that the kernel
/// interpreter leaves identical buffers.
pub fn run(kernel: &Kernel, bufs: &mut [Vec<u8>]) {
    let mut reference = bufs.to_vec();
    let mut views: Vec<&mut [u8]> = reference.iter_mut().map(|b| b.as_mut_slice()).collect();
    if let Err(e) = tessera_lower::kernel::run_kernel(kernel, &mut views) {
        panic!("the interpreter cannot run the test kernel: {e}\n{kernel}");
    }
    let compiled = compile(std::slice::from_ref(kernel));
    call(compiled.functions[0], bufs, &[(0, kernel.grid.extent)]);
    if let Err(e) = same_buffers(kernel, bufs, &reference) {
        panic!("LLVM tier and interpreter differ: {e}\n{kernel}");
    }
}

/// How to compare a buffer's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    Bytes,
    /// 16-bit floats held as `I16` bits (f16: 5 exponent bits; bf16: 8).
    F16,
    BF16,
    F32,
    F64,
}

/// The comparison each buffer's memory type implies (f16/bf16 look like `I16` here).
pub fn elems_of(kernel: &Kernel) -> Vec<Elem> {
    use tessera_lower::kernel::{MemType, Ty};
    kernel
        .buffers
        .iter()
        .map(|b| match b.mem {
            MemType::Scalar(Ty::F32) => Elem::F32,
            MemType::Scalar(Ty::F64) => Elem::F64,
            _ => Elem::Bytes,
        })
        .collect()
}

/// Buffers equal byte for byte, except that float elements compare NaN-ness rather than NaN
/// payloads (which the kernel IR leaves open for FMax/FMin).
pub fn same_buffers(kernel: &Kernel, got: &[Vec<u8>], want: &[Vec<u8>]) -> Result<(), String> {
    same_buffers_as(&elems_of(kernel), got, want)
}

pub fn same_buffers_as(elems: &[Elem], got: &[Vec<u8>], want: &[Vec<u8>]) -> Result<(), String> {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let elem = elems.get(i).copied().unwrap_or(Elem::Bytes);
        let size = match elem {
            Elem::Bytes => 1,
            Elem::F16 | Elem::BF16 => 2,
            Elem::F32 => 4,
            Elem::F64 => 8,
        };
        if g.len() != w.len() || g.len() % size != 0 {
            return Err(format!("buffer {i}: {} bytes vs {}", g.len(), w.len()));
        }
        let nan = |x: u64| match elem {
            Elem::Bytes => false,
            Elem::F16 => x & 0x7c00 == 0x7c00 && x & 0x03ff != 0,
            Elem::BF16 => x & 0x7f80 == 0x7f80 && x & 0x007f != 0,
            Elem::F32 => f32::from_bits(x as u32).is_nan(),
            Elem::F64 => f64::from_bits(x).is_nan(),
        };
        for (e, (a, b)) in g.chunks(size).zip(w.chunks(size)).enumerate() {
            let word = |c: &[u8]| c.iter().rev().fold(0u64, |acc, byte| acc << 8 | u64::from(*byte));
            let (a, b) = (word(a), word(b));
            if a != b && !(nan(a) && nan(b)) {
                return Err(format!("buffer {i} ({elem:?}) element {e}: got {a:#x}, want {b:#x}"));
            }
        }
    }
    Ok(())
}

pub mod values;

use tessera_lower::kernel::{IndexExpr, KernelBuilder, Ty, ValueId};

/// Runs `f` over columns of inputs: element `i` of the result is `f` applied to element `i`
/// of every input, inside a loop over a 1-element grid (so LLVM sees and vectorizes a loop).
pub fn elementwise(
    name: &str,
    inputs: &[(Ty, Vec<u64>)],
    out: Ty,
    f: impl FnOnce(&mut KernelBuilder, &[ValueId]) -> ValueId,
) -> Vec<u64> {
    let n = inputs.first().map_or(0, |(_, v)| v.len());
    let mut b = KernelBuilder::new(name, 1);
    let bufs: Vec<_> = inputs.iter().map(|(t, _)| b.buffer("in", values::mem_of(*t), n as i64, false)).collect();
    let o = b.buffer("out", values::mem_of(out), n as i64, true);
    let i = b.begin_loop(0, n as i64);
    let args: Vec<ValueId> = bufs.iter().map(|buf| b.load(*buf, IndexExpr::var(i, 1))).collect();
    let r = f(&mut b, &args);
    b.store(o, IndexExpr::var(i, 1), r);
    b.end_loop_vectorized(8, tessera_lower::kernel::Tail::Peel);
    let kernel = b.finish();
    let mut data: Vec<Vec<u8>> = inputs.iter().map(|(t, v)| values::encode(*t, v)).collect();
    data.push(vec![0xAB; n * values::bytes(out)]);
    run(&kernel, &mut data);
    values::decode(out, &data[inputs.len()])
}

/// `out[i] = a[i] * b[i] + c[i]` over `n` f32 elements with a 16-lane hint: the elementwise
/// kernel the smoke, disassembly and compile-time tests share.
pub fn muladd(n: i64) -> Kernel {
    use tessera_lower::kernel::{BinOp, KernelBuilder, MemType, Tail};
    let mut b = KernelBuilder::new("muladd", 1);
    let f32m = MemType::Scalar(Ty::F32);
    let a = b.buffer("a", f32m, n, false);
    let bb = b.buffer("b", f32m, n, false);
    let c = b.buffer("c", f32m, n, false);
    let out = b.buffer("out", f32m, n, true);
    let i = b.begin_loop(0, n);
    let x = b.load(a, IndexExpr::var(i, 1));
    let y = b.load(bb, IndexExpr::var(i, 1));
    let z = b.load(c, IndexExpr::var(i, 1));
    let m = b.binary(BinOp::Mul, Ty::F32, x, y);
    let s = b.binary(BinOp::Add, Ty::F32, m, z);
    b.store(out, IndexExpr::var(i, 1), s);
    b.end_loop_vectorized(16, Tail::None);
    b.finish()
}
