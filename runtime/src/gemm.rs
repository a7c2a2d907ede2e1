//! The GEMM runtime functions kernels call for large dots (DESIGN.md section 6):
//! `C = A·B`, overwriting `C`, with arbitrary strides in elements, on the `gemm` crate's
//! AVX-512 kernels; `tessera_rt_gemm_f32_mixed` takes bf16 and f16 operands too, and
//! `tessera_rt_gemm_c64`/`_c128` complex ones (interleaved pairs, the crate's c32/c64). Products
//! with few rows or few columns whose long operand has a unit stride run on
//! [`crate::skinny_gemm`] instead, which reads that operand once in its own type (a small one
//! with contiguous columns is first copied by rows).
//!
//! Threading: a kernel call carries no thread count, so the executable publishes its pool
//! for the duration of a run in a thread-local ([`GemmThreads::enter`]) on the thread that
//! runs the launches. A call from that thread uses the pool's threads; a call from a pool
//! worker (a kernel whose grid the pool already split) or from outside any run stays on its
//! own thread, so parallelism never nests.

use std::cell::Cell;

use gemm::Parallelism;

use crate::bf16_dot;
use crate::skinny_gemm::{self, Bf16, Elem, Problem, F16};
use crate::thread_pool::ThreadPool;

/// Below this many multiply-adds a GEMM stays on one thread: moving it into the pool costs
/// more than it saves.
const PARALLEL_MIN_FLOPS: u128 = 64 * 64 * 64;

thread_local! {
    static POOL: Cell<*const ThreadPool> = const { Cell::new(std::ptr::null()) };
}

/// While alive, GEMM calls on this thread use `pool`'s threads.
pub struct GemmThreads {
    previous: *const ThreadPool,
}

impl GemmThreads {
    /// Publishes `pool` to GEMM calls on this thread until the guard drops. The guard borrows
    /// nothing, so the caller must keep the pool alive while it lives (the executable holds
    /// both for the duration of one run).
    pub fn enter(pool: &ThreadPool) -> GemmThreads {
        let previous = POOL.with(|p| p.replace(pool as *const ThreadPool));
        GemmThreads { previous }
    }
}

impl Drop for GemmThreads {
    fn drop(&mut self) {
        POOL.with(|p| p.set(self.previous));
    }
}

/// The pool a live [`GemmThreads`] guard published on this thread, else the one
/// `tessera_rt_set_threads` set for ahead-of-time code (null if neither): GEMM and the
/// convolution runtime split their work on it.
pub(crate) fn published_pool() -> *const ThreadPool {
    let own = POOL.with(Cell::get);
    if own.is_null() {
        crate::aot::pool()
    } else {
        own
    }
}

/// Shared body of both entry points.
///
/// # Safety
/// The contract of [`tessera_rt_gemm_f32`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_impl<T: 'static + Copy + Send + Sync>(
    m: i64,
    n: i64,
    k: i64,
    a: *const T,
    a_rs: i64,
    a_cs: i64,
    b: *const T,
    b_rs: i64,
    b_cs: i64,
    c: *mut T,
    c_rs: i64,
    c_cs: i64,
    zero: T,
    one: T,
) {
    // Negative sizes cannot come from a valid kernel; there is no error channel across the C
    // ABI, so they do nothing rather than reach `as usize`.
    let (Ok(m), Ok(n), Ok(k)) = (usize::try_from(m), usize::try_from(n), usize::try_from(k)) else { return };
    let stride = |s: i64| s as isize;
    let flops = m as u128 * n as u128 * k as u128;
    let pool = published_pool();
    // SAFETY: the pointer was set by a live `GemmThreads` guard on this thread or is the AOT
    // pool, which is never freed.
    let pool = if pool.is_null() || flops < PARALLEL_MIN_FLOPS { None } else { Some(unsafe { &*pool }) };
    let threads = pool.map_or(1, ThreadPool::threads);
    let (c, a, b) = (SendPtr(c), SendPtr(a as *mut T), SendPtr(b as *mut T));
    // `C[rows x cols] = A[rows x k] * B[k x cols]` for a block of the matrices.
    let block = move |rows: usize, cols: usize, a: SendPtr<T>, b: SendPtr<T>, c: SendPtr<T>| {
        // SAFETY: the caller guarantees the matrices are valid for the given sizes and
        // strides. With `read_dst = false`, gemm computes `dst = beta * lhs * rhs`, ignoring
        // what `C` held (and `alpha`).
        unsafe {
            gemm::gemm(
                rows,
                cols,
                k,
                c.0,
                stride(c_cs),
                stride(c_rs),
                false,
                a.0,
                stride(a_cs),
                stride(a_rs),
                b.0,
                stride(b_cs),
                stride(b_rs),
                zero,
                one,
                false,
                false,
                false,
                Parallelism::None,
            )
        }
    };
    match pool {
        Some(pool) if threads > 1 => {
            // One block of rows or of columns per thread, each a single-threaded GEMM run on
            // the pool like a launch's chunks: the gemm crate's own threading is rayon's, whose
            // wake-ups cost 20-40 us per call on a virtual machine. Each block packs the whole
            // of the operand it does not split, so the split is along the longer of m and n:
            // an f32 64x1024 by 1024x4096 product split by rows packed all 16 MB of B on both
            // threads (10.3 ms; 8.2 split by columns, each packing half of it).
            let by_rows = m >= threads * 32 && (m >= n || n < threads * 32);
            let (extent, chunks) = if by_rows { (m, threads) } else { (n, threads.min(n.div_ceil(32)).max(1)) };
            pool.run_chunks(chunks, |i| {
                let (lo, hi) = crate::thread_pool::chunk_bounds(extent as i64, chunks, i);
                let (lo, hi) = (lo as usize, hi as usize);
                let (mut a, mut b, mut c) = (a, b, c);
                let (mut rows, mut cols) = (m, n);
                if by_rows {
                    a = SendPtr(a.0.wrapping_offset(lo as isize * stride(a_rs)));
                    c = SendPtr(c.0.wrapping_offset(lo as isize * stride(c_rs)));
                    rows = hi - lo;
                } else {
                    b = SendPtr(b.0.wrapping_offset(lo as isize * stride(b_cs)));
                    c = SendPtr(c.0.wrapping_offset(lo as isize * stride(c_cs)));
                    cols = hi - lo;
                }
                // The block lies inside the caller's matrices; blocks write disjoint parts of C.
                block(rows, cols, a, b, c)
            });
        }
        _ => block(m, n, a, b, c),
    }
}

#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: the pointers are used only inside the GEMM call the current thread waits for.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// `C = A·B` for f32: `A` is `m×k`, `B` is `k×n`, `C` is `m×n`; element `(i, j)` of a matrix
/// `X` is at `x + i*x_rs + j*x_cs` (strides in elements, any sign). `C` must not overlap `A`
/// or `B`.
///
/// # Safety
/// Every element the sizes and strides address must be valid (readable for `A` and `B`,
/// writable for `C`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tessera_rt_gemm_f32(
    m: i64,
    n: i64,
    k: i64,
    a: *const f32,
    a_rs: i64,
    a_cs: i64,
    b: *const f32,
    b_rs: i64,
    b_cs: i64,
    c: *mut f32,
    c_rs: i64,
    c_cs: i64,
) {
    if let (Ok(mu), Ok(nu), Ok(ku)) = (usize::try_from(m), usize::try_from(n), usize::try_from(k)) {
        let s = |x: i64| x as isize;
        let skinny =
            unsafe { try_skinny((mu, nu, ku), (a, s(a_rs), s(a_cs)), (b, s(b_rs), s(b_cs)), (c, s(c_rs), s(c_cs))) };
        if skinny {
            return;
        }
    }
    unsafe { gemm_impl(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, 0.0f32, 1.0f32) }
}

/// [`tessera_rt_gemm_f32`] for f64.
///
/// # Safety
/// As for [`tessera_rt_gemm_f32`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tessera_rt_gemm_f64(
    m: i64,
    n: i64,
    k: i64,
    a: *const f64,
    a_rs: i64,
    a_cs: i64,
    b: *const f64,
    b_rs: i64,
    b_cs: i64,
    c: *mut f64,
    c_rs: i64,
    c_cs: i64,
) {
    unsafe { gemm_impl(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, 0.0f64, 1.0f64) }
}

/// `C = A·B` for complex64: each matrix holds interleaved (real, imaginary) f32 pairs, and
/// sizes and strides count complex elements (element `(i, j)` of `X` has its real part at
/// `x + 2*(i*x_rs + j*x_cs)`), otherwise as for [`tessera_rt_gemm_f32`]. The gemm crate's
/// complex kernels accumulate each product in complex64, as Eigen does for XLA:CPU.
///
/// # Safety
/// As for [`tessera_rt_gemm_f32`], for pairs of floats.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tessera_rt_gemm_c64(
    m: i64,
    n: i64,
    k: i64,
    a: *const f32,
    a_rs: i64,
    a_cs: i64,
    b: *const f32,
    b_rs: i64,
    b_cs: i64,
    c: *mut f32,
    c_rs: i64,
    c_cs: i64,
) {
    // `gemm::c32` is `num_complex::Complex32`, `#[repr(C)]` (re, im): one interleaved pair.
    let (a, b, c) = (a.cast::<gemm::c32>(), b.cast::<gemm::c32>(), c.cast::<gemm::c32>());
    let (zero, one) = (gemm::c32::new(0.0, 0.0), gemm::c32::new(1.0, 0.0));
    unsafe { gemm_impl(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, zero, one) }
}

/// [`tessera_rt_gemm_c64`] for complex128 (f64 pairs).
///
/// # Safety
/// As for [`tessera_rt_gemm_c64`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tessera_rt_gemm_c128(
    m: i64,
    n: i64,
    k: i64,
    a: *const f64,
    a_rs: i64,
    a_cs: i64,
    b: *const f64,
    b_rs: i64,
    b_cs: i64,
    c: *mut f64,
    c_rs: i64,
    c_cs: i64,
) {
    let (a, b, c) = (a.cast::<gemm::c64>(), b.cast::<gemm::c64>(), c.cast::<gemm::c64>());
    let (zero, one) = (gemm::c64::new(0.0, 0.0), gemm::c64::new(1.0, 0.0));
    unsafe { gemm_impl(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, zero, one) }
}

/// Operand element types of [`tessera_rt_gemm_f32_mixed`], as its `a_type`/`b_type` codes.
pub const GEMM_F32: i64 = 0;
pub const GEMM_BF16: i64 = 1;
pub const GEMM_F16: i64 = 2;

/// Runs `$body` with `$E` the element type that code `$code` names (nothing for others).
macro_rules! with_elem {
    ($code:expr, $E:ident => $body:expr) => {
        match $code {
            GEMM_F32 => {
                type $E = f32;
                $body
            }
            GEMM_BF16 => {
                type $E = Bf16;
                $body
            }
            GEMM_F16 => {
                type $E = F16;
                $body
            }
            _ => {}
        }
    };
}

/// Matrix `X` (`rows×cols`, element `(i, j)` at `x + i*rs + j*cs`) widened into a row-major
/// f32 copy.
///
/// # Safety
/// Every element the sizes and strides address is readable.
unsafe fn widened<E: Elem>(x: *const E, rows: usize, cols: usize, rs: isize, cs: isize) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        let row = unsafe { x.offset(i as isize * rs) };
        if cs == 1 {
            out.extend((0..cols).map(|j| unsafe { *row.add(j) }.widen()));
        } else {
            out.extend((0..cols).map(|j| unsafe { *row.offset(j as isize * cs) }.widen()));
        }
    }
    out
}

/// Matrix `X` (`rows×cols`, element `(i, j)` at `x + i*rs + j*cs`) as the row-major f32 rows
/// the skinny tiles read: `X` itself where it is f32 laid out so already, else a widened copy
/// (returned beside the pointer, which points into it). Copying a small `A` took a fifth of a
/// batch of 8x16x8 products' time, its allocation included.
///
/// # Safety
/// Every element the sizes and strides address is readable.
unsafe fn f32_rows<E: Elem>(x: *const E, rows: usize, cols: usize, rs: isize, cs: isize) -> (Vec<f32>, *const f32) {
    if is_f32::<E>() && (cs == 1 || cols <= 1) && (rs == cols as isize || rows <= 1) {
        return (Vec::new(), x as *const f32);
    }
    let copy = unsafe { widened(x, rows, cols, rs, cs) };
    let p = copy.as_ptr();
    (copy, p)
}

/// The most elements of a `B` with contiguous columns that the skinny product first copies
/// by rows (16 KiB of f32, which stays in L1 for the tiles that read it).
const SMALL_B: usize = 64 * 64;

/// The product on [`skinny_gemm`] when one side has few rows (or `B` few columns) and the
/// other a unit stride; false when it does not qualify.
///
/// # Safety
/// The contract of [`tessera_rt_gemm_f32_mixed`], sizes already checked non-negative.
unsafe fn try_skinny<A: Elem, B: Elem>(
    (m, n, k): (usize, usize, usize),
    (a, a_rs, a_cs): (*const A, isize, isize),
    (b, b_rs, b_cs): (*const B, isize, isize),
    (c, c_rs, c_cs): (*mut f32, isize, isize),
) -> bool {
    if m <= skinny_gemm::MAX_ROWS && (b_cs == 1 || b_rs == 1) && m <= n {
        let (_copy, a32) = unsafe { f32_rows(a, m, k, a_rs, a_cs) };
        let small_b = n.checked_mul(k).is_some_and(|elems| elems <= SMALL_B);
        if b_cs != 1 && small_b {
            // Tiles along `k` sum across lanes for every element of `C`, which costs a small
            // `B` more than laying it out by rows once: a 16x16x16 product took 490-660 ns
            // that way, 320 ns on the copy.
            let b32 = unsafe { widened(b, k, n, b_rs, b_cs) };
            let p = Problem { m, n, k, a: a32, b: b32.as_ptr(), b_rs: n as isize, b_cs: 1, c, c_rs, c_cs };
            unsafe { skinny_gemm::run(&p) };
        } else {
            let p = Problem { m, n, k, a: a32, b, b_rs, b_cs, c, c_rs, c_cs };
            unsafe { skinny_gemm::run(&p) };
        }
        true
    } else if n <= skinny_gemm::MAX_ROWS && (a_rs == 1 || a_cs == 1) {
        // Cᵀ = Bᵀ·Aᵀ: B's few columns become the rows.
        let (_copy, bt32) = unsafe { f32_rows(b, n, k, b_cs, b_rs) };
        let p = Problem { m: n, n: m, k, a: bt32, b: a, b_rs: a_cs, b_cs: a_rs, c, c_rs: c_cs, c_cs: c_rs };
        unsafe { skinny_gemm::run(&p) };
        true
    } else {
        false
    }
}

/// Columns of `B` one f32 GEMM call of the mixed product converts at a time: blocks of
/// about 4 MiB of f32, so the conversion stays in cache for the GEMM that packs it.
const MIXED_BLOCK_ELEMS: usize = 1 << 20;

/// Shared body of the mixed entry for one pair of element types.
///
/// # Safety
/// The contract of [`tessera_rt_gemm_f32_mixed`], sizes already checked non-negative.
pub(crate) unsafe fn mixed_impl<A: Elem, B: Elem>(
    (m, n, k): (usize, usize, usize),
    (a, a_rs, a_cs): (*const A, isize, isize),
    (b, b_rs, b_cs): (*const B, isize, isize),
    (c, c_rs, c_cs): (*mut f32, isize, isize),
) {
    if m == 0 || n == 0 {
        return;
    }
    if is::<A, Bf16>() && is::<B, Bf16>() && bf16_dot::available() {
        let (ha, hb) = (a as *const u16, b as *const u16);
        let ha = bf16_dot::Halves { ptr: ha, rs: a_rs, cs: a_cs };
        let hb = bf16_dot::Halves { ptr: hb, rs: b_rs, cs: b_cs };
        let hc = bf16_dot::Dest { ptr: c, rs: c_rs, cs: c_cs };
        // SAFETY: `available` held; the caller's contract covers the operands.
        let done = unsafe {
            match m {
                // One row reads B's rows fastest as skinny_gemm's 64-column tiles do, a line
                // per visit to a row where these tiles take 32 columns for up to 8 rows.
                1 if b_cs == 1 => false,
                ..=bf16_dot::FEW_ROWS => bf16_dot::few_rows(m, n, k, ha, hb, hc),
                _ => bf16_dot::gemm(m, n, k, ha, hb, hc),
            }
        };
        if done {
            return;
        }
    }
    if unsafe { try_skinny((m, n, k), (a, a_rs, a_cs), (b, b_rs, b_cs), (c, c_rs, c_cs)) } {
        return;
    }
    let i = |x: usize| x as i64;
    // An f32 operand goes to the GEMM as it is; a half one is widened (B in column blocks).
    let a32 = if is_f32::<A>() { None } else { Some(unsafe { widened(a, m, k, a_rs, a_cs) }) };
    let (a_ptr, a_rs, a_cs) = match &a32 {
        Some(w) => (w.as_ptr(), i(k), 1),
        None => (a as *const f32, a_rs as i64, a_cs as i64),
    };
    if is_f32::<B>() {
        let (b, b_rs, b_cs) = (b as *const f32, b_rs as i64, b_cs as i64);
        unsafe { gemm_impl(i(m), i(n), i(k), a_ptr, a_rs, a_cs, b, b_rs, b_cs, c, c_rs as i64, c_cs as i64, 0.0, 1.0) };
        return;
    }
    // At least 16 columns a block, or all of them when there are fewer.
    let block = (MIXED_BLOCK_ELEMS / k.max(1)).max(16).min(n);
    // One buffer for every block, widened by the pool's threads: allocated per block, a 4 MB
    // block faulted its pages in every time, and one thread widening while the other waited
    // took a [32,4096] x bf16[4096,11008] product to 27.7 ms, now 14-17 (XLA:CPU 10).
    let mut blk = vec![0f32; block * k];
    let pool = published_pool();
    // SAFETY: as in gemm_impl.
    let pool = if pool.is_null() { None } else { Some(unsafe { &*pool }) };
    let mut j0 = 0;
    while j0 < n {
        let w = block.min(n - j0);
        // B's columns j0..j0+w, widened in B's own order (rows or columns contiguous).
        let bj = unsafe { b.offset(j0 as isize * b_cs) };
        let (blk_rs, blk_cs) = if b_cs == 1 {
            unsafe { widen_into(&mut blk[..k * w], bj, k, w, b_rs, 1, pool) };
            (w, 1)
        } else {
            unsafe { widen_into(&mut blk[..k * w], bj, w, k, b_cs, b_rs, pool) };
            (1, k)
        };
        let cj = unsafe { c.offset(j0 as isize * c_cs) };
        unsafe {
            gemm_impl(
                i(m),
                i(w),
                i(k),
                a_ptr,
                a_rs,
                a_cs,
                blk.as_ptr(),
                i(blk_rs),
                i(blk_cs),
                cj,
                c_rs as i64,
                c_cs as i64,
                0.0f32,
                1.0f32,
            )
        };
        j0 += w;
    }
}

/// Matrix `X` (`rows×cols`, element `(i, j)` at `x + i*rs + j*cs`) widened into `out`
/// (row-major, `rows * cols` elements), its rows split among the pool's threads.
///
/// # Safety
/// Every element the sizes and strides address is readable.
unsafe fn widen_into<E: Elem>(
    out: &mut [f32],
    x: *const E,
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
    pool: Option<&ThreadPool>,
) {
    assert_eq!(out.len(), rows * cols);
    let (dst, src) = (SendPtr(out.as_mut_ptr()), SendPtr(x as *mut E));
    let chunks = pool.map_or(1, ThreadPool::threads).min(rows).max(1);
    let widen = |t: usize| {
        // Whole wrappers (closures would capture the bare pointer fields, which are not Sync).
        let (dst, src) = (&dst, &src);
        let (lo, hi) = crate::thread_pool::chunk_bounds(rows as i64, chunks, t);
        for i in lo as usize..hi as usize {
            // SAFETY: row i of `out` belongs to this chunk; the caller's contract covers `x`.
            let (row, to) = unsafe {
                (src.0.offset(i as isize * rs) as *const E, std::slice::from_raw_parts_mut(dst.0.add(i * cols), cols))
            };
            if cs == 1 {
                to.iter_mut().enumerate().for_each(|(j, o)| *o = unsafe { *row.add(j) }.widen());
            } else {
                to.iter_mut().enumerate().for_each(|(j, o)| *o = unsafe { *row.offset(j as isize * cs) }.widen());
            }
        }
    };
    match pool {
        Some(p) if chunks > 1 => p.run_chunks(chunks, widen),
        _ => widen(0),
    }
}

/// Whether `E` is f32 itself (then a pointer to it is an f32 pointer).
fn is_f32<E: Elem>() -> bool {
    is::<E, f32>()
}

/// Whether `E` is `T`.
fn is<E: Elem, T: Elem>() -> bool {
    std::any::TypeId::of::<E>() == std::any::TypeId::of::<T>()
}

/// `C = A·B` with f32 `C` and each of `A`, `B` f32, bf16 or f16 (`a_type`, `b_type`: one of
/// [`GEMM_F32`], [`GEMM_BF16`], [`GEMM_F16`]; half operands point to their 16-bit patterns).
/// Products are accumulated in f32. Sizes and strides as for [`tessera_rt_gemm_f32`];
/// unknown type codes or negative sizes do nothing.
///
/// # Safety
/// Every element the sizes and strides address must be valid (readable for `A` and `B`,
/// writable for `C`), of the type its code names; `C` must not overlap `A` or `B`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tessera_rt_gemm_f32_mixed(
    m: i64,
    n: i64,
    k: i64,
    a: *const u8,
    a_rs: i64,
    a_cs: i64,
    a_type: i64,
    b: *const u8,
    b_rs: i64,
    b_cs: i64,
    b_type: i64,
    c: *mut f32,
    c_rs: i64,
    c_cs: i64,
) {
    let (Ok(m), Ok(n), Ok(k)) = (usize::try_from(m), usize::try_from(n), usize::try_from(k)) else { return };
    let s = |x: i64| x as isize;
    with_elem!(a_type, EA => with_elem!(b_type, EB => unsafe {
        mixed_impl::<EA, EB>(
            (m, n, k),
            (a as *const EA, s(a_rs), s(a_cs)),
            (b as *const EB, s(b_rs), s(b_cs)),
            (c, s(c_rs), s(c_cs)),
        )
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_testkit::Rng;

    /// A deterministic pseudo-random sequence in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()
    }

    fn reference(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn f64_row_major_matches_the_reference_and_overwrites_c() {
        let (m, n, k) = (17, 9, 33);
        let a = values(m * k, 1);
        let b = values(k * n, 2);
        let mut c = vec![f64::NAN; m * n];
        unsafe {
            tessera_rt_gemm_f64(
                m as i64,
                n as i64,
                k as i64,
                a.as_ptr(),
                k as i64,
                1,
                b.as_ptr(),
                n as i64,
                1,
                c.as_mut_ptr(),
                n as i64,
                1,
            )
        };
        for (x, y) in c.iter().zip(reference(m, n, k, &a, &b)) {
            assert!((x - y).abs() <= 1e-12, "{x} vs {y}");
        }
    }

    #[test]
    fn f32_transposed_strides() {
        // A given column-major (a_rs = 1, a_cs = m), C written column-major.
        let (m, n, k) = (5, 7, 3);
        let a64 = values(m * k, 3);
        let b64 = values(k * n, 4);
        let expected = reference(m, n, k, &a64, &b64);
        let mut a_cm = vec![0f32; m * k];
        for i in 0..m {
            for p in 0..k {
                a_cm[p * m + i] = a64[i * k + p] as f32;
            }
        }
        let b: Vec<f32> = b64.iter().map(|&x| x as f32).collect();
        let mut c = vec![f32::NAN; m * n];
        unsafe {
            tessera_rt_gemm_f32(
                m as i64,
                n as i64,
                k as i64,
                a_cm.as_ptr(),
                1,
                m as i64,
                b.as_ptr(),
                n as i64,
                1,
                c.as_mut_ptr(),
                1,
                m as i64,
            )
        };
        for i in 0..m {
            for j in 0..n {
                let got = c[j * m + i] as f64;
                assert!((got - expected[i * n + j]).abs() <= 1e-5, "({i},{j}): {got}");
            }
        }
    }

    /// `v` rounded to the element type of `code`, as the bits the mixed entry reads, and the
    /// value those bits hold.
    fn encoded(v: &[f64], code: i64) -> (Vec<u8>, Vec<f64>) {
        let mut bytes = Vec::new();
        let mut exact = Vec::new();
        for &x in v {
            match code {
                GEMM_F32 => {
                    bytes.extend((x as f32).to_le_bytes());
                    exact.push(f64::from(x as f32));
                }
                GEMM_BF16 => {
                    let h = half::bf16::from_f64(x);
                    bytes.extend(h.to_bits().to_le_bytes());
                    exact.push(h.to_f64());
                }
                _ => {
                    let h = half::f16::from_f64(x);
                    bytes.extend(h.to_bits().to_le_bytes());
                    exact.push(h.to_f64());
                }
            }
        }
        (bytes, exact)
    }

    /// Every pair of operand types, on each path the mixed entry takes: few rows with `B`'s
    /// rows contiguous (full and masked tiles, or masked ones only), or its columns (a large
    /// `B` in place, a small one copied by rows), few columns (transposed onto few rows), and
    /// neither (the blocked conversion onto the f32 GEMM); `C` with a row pitch wider than `n`.
    /// An `A` with no unit stride (a batched dot's operand may have none) takes no skinny path
    /// however few its columns: the blocked conversion of fewer columns than its 16-column
    /// block, whose size was `clamp(16, n)`, which panics for n < 16 and so aborted the process
    /// (`tessera fuzz --seed 420214`).
    #[test]
    fn mixed_types_on_every_path_match_the_reference() {
        let pool = ThreadPool::new(Some(2)).unwrap();
        let _threads = GemmThreads::enter(&pool);
        // (m, n, k, B's columns contiguous, A's element step: its (i, q) at step * (i * k + q))
        let shapes = [
            (11, 70, 37, false, 1),
            (16, 16, 16, false, 1),
            (4, 90, 120, true, 1),
            (11, 70, 37, true, 1),
            (5, 3, 64, false, 1),
            (40, 33, 20, false, 1),
            (40, 33, 20, true, 1),
            (5, 2, 3, false, 3),
            (40, 15, 9, false, 3),
            (40, 1, 1, true, 3),
        ];
        for (m, n, k, cols, step) in shapes {
            for a_type in [GEMM_F32, GEMM_BF16, GEMM_F16] {
                for b_type in [GEMM_F32, GEMM_BF16, GEMM_F16] {
                    let (a, a_exact) = encoded(&values(step * m * k, 7), a_type);
                    let (b, b_exact) = encoded(&values(k * n, 8), b_type);
                    let (b_rs, b_cs) = if cols { (1, k as i64) } else { (n as i64, 1) };
                    let pitch = n + 3;
                    let mut c = vec![f32::NAN; m * pitch];
                    unsafe {
                        tessera_rt_gemm_f32_mixed(
                            m as i64,
                            n as i64,
                            k as i64,
                            a.as_ptr(),
                            (step * k) as i64,
                            step as i64,
                            a_type,
                            b.as_ptr(),
                            b_rs,
                            b_cs,
                            b_type,
                            c.as_mut_ptr(),
                            pitch as i64,
                            1,
                        )
                    };
                    for i in 0..m {
                        for j in 0..n {
                            let want: f64 = (0..k)
                                .map(|q| {
                                    a_exact[step * (i * k + q)] * b_exact[(q as i64 * b_rs + j as i64 * b_cs) as usize]
                                })
                                .sum();
                            let got = f64::from(c[i * pitch + j]);
                            assert!(
                                (got - want).abs() <= 1e-5 * k as f64,
                                "{m}x{n}x{k} cols={cols} types {a_type},{b_type} ({i},{j}): {got} vs {want}"
                            );
                        }
                        assert!(c[i * pitch + n].is_nan(), "wrote past row {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn empty_contraction_gives_zeros_and_negative_sizes_do_nothing() {
        let mut c = vec![f32::NAN; 6];
        let one = [1f32];
        unsafe { tessera_rt_gemm_f32(2, 3, 0, one.as_ptr(), 0, 1, one.as_ptr(), 3, 1, c.as_mut_ptr(), 3, 1) };
        assert!(c.iter().all(|&x| x == 0.0), "{c:?}");
        let mut d = vec![7f32; 4];
        unsafe { tessera_rt_gemm_f32(-1, 2, 2, one.as_ptr(), 2, 1, one.as_ptr(), 2, 1, d.as_mut_ptr(), 2, 1) };
        assert_eq!(d, vec![7.0; 4]);
    }

    #[test]
    fn large_gemm_uses_the_published_pool() {
        let pool = ThreadPool::new(Some(2)).unwrap();
        let (m, n, k) = (96, 80, 128);
        let a = values(m * k, 5);
        let b = values(k * n, 6);
        let mut c = vec![0.0; m * n];
        {
            let _threads = GemmThreads::enter(&pool);
            unsafe {
                tessera_rt_gemm_f64(
                    m as i64,
                    n as i64,
                    k as i64,
                    a.as_ptr(),
                    k as i64,
                    1,
                    b.as_ptr(),
                    n as i64,
                    1,
                    c.as_mut_ptr(),
                    n as i64,
                    1,
                )
            };
        }
        assert!(POOL.with(Cell::get).is_null());
        for (x, y) in c.iter().zip(reference(m, n, k, &a, &b)) {
            assert!((x - y).abs() <= 1e-11, "{x} vs {y}");
        }
    }
}
