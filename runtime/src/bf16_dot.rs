//! bf16 x bf16 -> f32 products on AVX-512 BF16 (`vdpbf16ps`): a bf16 model's matmuls (JAX's
//! `x @ w` of bf16 operands, computed in f32 as XLA:CPU computes them) at twice the multiply-adds
//! per instruction of widening to f32 first, and without the f32 copy of `B` that widening makes.
//!
//! `vdpbf16ps` multiplies two pairs of bf16 values in each 32-bit lane and adds both products to
//! the lane's f32 sum, one after the other, each addition rounded to nearest even. A product of
//! two bf16 values is exact in f32 (8-bit significands), so every step is an f32 multiply-add
//! as a fused one computes it; only the order of the sum differs from a loop's, which HLO's
//! `dot` leaves open. What differs from IEEE arithmetic is that the instruction reads subnormal
//! inputs as zero and flushes subnormal results: an f32 sum that falls below 2^-126 (an error
//! under 2^-126) is harmless, but a subnormal operand times a large one loses a term of any
//! size. So `A` is checked while it is packed (a subnormal sends the whole product back to the
//! caller's path) and `B` as it is read (a part holding one is computed again by a plain f32
//! loop before anything of it is written).
//!
//! More than 16 rows ([`gemm()`]): `A` is packed in tiles of 8 rows, `k` padded to even with
//! zeros; `B` in parts of 256 columns by 512 rows, as panels of 16 columns with rows `q` and
//! `q + 1` of a column in one 32-bit lane (`q` in the low half), so one 64-byte load is a
//! panel's pair of rows for its 16 columns. A tile is 8 rows by 32 columns, 16 accumulators;
//! each pair of rows of `B` costs one broadcast of `A` per row and two `vdpbf16ps` per row.
//! Threads split the columns, each packing its own parts. Up to 16 rows ([`few_rows`]) read
//! `B` where it lies: contiguous rows paired in registers as they load, or contiguous columns,
//! whose pairs along `k` are adjacent already.

use crate::gemm::published_pool;
use crate::skinny_gemm::{in_column_tasks, Bf16, Elem};
use crate::thread_pool::{chunk_bounds, Rows, ThreadPool};

/// Rows and columns of a tile.
const MR: usize = 8;
const NR: usize = 32;

/// Below this many products one thread does all of it.
const PARALLEL_MIN_PRODUCTS: usize = 1 << 21;

/// Whether this CPU runs the kernel.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A matrix of bf16 bit patterns: element `(i, j)` at `ptr + i*rs + j*cs` (elements).
#[derive(Clone, Copy)]
pub(crate) struct Halves {
    pub ptr: *const u16,
    pub rs: isize,
    pub cs: isize,
}

// SAFETY: read only, inside the call the caller waits for.
unsafe impl Send for Halves {}
unsafe impl Sync for Halves {}

/// The f32 result: element `(i, j)` at `ptr + i*rs + j*cs`.
#[derive(Clone, Copy)]
pub(crate) struct Dest {
    pub ptr: *mut f32,
    pub rs: isize,
    pub cs: isize,
}

// SAFETY: chunks write disjoint columns, inside the call the caller waits for.
unsafe impl Send for Dest {}
unsafe impl Sync for Dest {}

impl Dest {
    /// Element `(i, j)` (a method, so closures capture the whole `Dest`, which is `Sync`).
    fn at(&self, i: usize, j: usize) -> *mut f32 {
        self.ptr.wrapping_offset(i as isize * self.rs + j as isize * self.cs)
    }
}

/// The f32 of bf16 bits `x` (exact), for the fallbacks' plain multiply-adds.
fn widen(x: u16) -> f32 {
    Bf16(x).widen()
}

/// Whether bf16 bits `x` encode a subnormal (zero exponent, nonzero significand).
fn subnormal(x: u16) -> bool {
    x & 0x7f80 == 0 && x & 0x007f != 0
}

/// Whether any of `xs` is subnormal, without stopping at the first (so the loop vectorizes:
/// packing an attention block's `A` element by element took a tenth of its products' time).
fn any_subnormal(xs: &[u16]) -> bool {
    xs.iter().fold(false, |any, &x| any | subnormal(x))
}

/// `C = A·B` for `A` `m x k` and `B` `k x n` with contiguous rows (`b.cs == 1`), or false with
/// nothing written when this kernel does not apply: `B`'s rows not contiguous, or a subnormal
/// in `A` (see the module's documentation).
///
/// # Safety
/// [`available`] returned true; every element the sizes and strides of `a` and `b` address is
/// readable, every one of `c` writable and not overlapping them.
pub(crate) unsafe fn gemm(m: usize, n: usize, k: usize, a: Halves, b: Halves, c: Dest) -> bool {
    if b.cs != 1 {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    let kp = k.div_ceil(2) * 2;
    let pool = published_pool();
    let pool = if pool.is_null() || m.saturating_mul(n).saturating_mul(k) < PARALLEL_MIN_PRODUCTS {
        None
    } else {
        Some(unsafe { &*pool })
    };
    // SAFETY: the caller's contract.
    let Some(packed_a) = (unsafe { pack_a(m, k, kp, &a, pool) }) else { return false };
    let threads = pool.map_or(1, ThreadPool::threads);
    // Blocks of whole tiles, at most NB columns, and at least one per thread.
    let nb = NB.min(n.div_ceil(threads).div_ceil(NR) * NR);
    let blocks = n.div_ceil(nb);
    let chunks = threads.min(blocks);
    let packed_a = &packed_a;
    let work = |t: usize| {
        let (lo, hi) = chunk_bounds(blocks as i64, chunks, t);
        let mut panels = vec![0u16; nb * KC.min(kp)];
        // Row i's sums for the block's columns at `i * nb`.
        let mut sums = vec![0f32; m * nb];
        for block in lo as usize..hi as usize {
            let j0 = block * nb;
            let cols = nb.min(n - j0);
            let mut q0 = 0;
            while q0 < kp {
                let kc = KC.min(kp - q0);
                let part = Part { q0, kc, init: q0 == 0 };
                // SAFETY: `available` held; columns j0..j0 + cols of rows q0..q0 + kc (those below
                // k) lie in B; `panels` holds cols rounded up to NR columns of kc rows.
                let clean = unsafe { pack_panels(&b, j0, cols, &part, k, &mut panels) };
                // Rows of A outside, so a tile's slice of A stays in L1 across the block's
                // tiles, which read the packed part from L2.
                let mut i0 = 0;
                while i0 < m {
                    let rows = MR.min(m - i0);
                    let a_tile = &packed_a[i0 * kp..(i0 + MR) * kp];
                    for tile in 0..cols.div_ceil(NR) {
                        let panel = &panels[tile * NR * kc..][..NR * kc];
                        let acc = &mut sums[i0 * nb + tile * NR..];
                        if clean {
                            // SAFETY: `available` held; the slices hold what `tile_kernel` reads.
                            unsafe { tile_kernel(a_tile, panel, &part, rows, acc, nb) };
                        } else {
                            exact_tile(a_tile, panel, &part, rows, acc, nb);
                        }
                    }
                    i0 += rows;
                }
                q0 += kc;
            }
            for i in 0..m {
                let row = &sums[i * nb..][..cols];
                if c.cs == 1 {
                    // SAFETY: row i, columns j0..j0 + cols of C, which belong to this chunk.
                    unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), c.at(i, j0), cols) };
                } else {
                    for (j, &s) in row.iter().enumerate() {
                        // SAFETY: as above.
                        unsafe { *c.at(i, j0 + j) = s };
                    }
                }
            }
        }
    };
    match pool {
        Some(p) if chunks > 1 => p.run_chunks(chunks, work),
        _ => work(0),
    }
    true
}

/// The most rows [`few_rows`] takes: up to 16 rows of `A` read `B` where it lies, each row pair
/// interleaved in registers as it is loaded, since packing it (work per element of `B`) is not
/// repaid by so few rows.
pub(crate) const FEW_ROWS: usize = 16;

/// `C = A·B` for `m <= FEW_ROWS` and `B` with contiguous rows or columns, or false with
/// nothing written as for [`gemm()`] (`B` with neither, or a subnormal in `A`).
///
/// Contiguous rows (`x·W`): `B`'s columns `32` at a time in `k` blocks of `FEW_K` rows (so that
/// the row groups after the first read the block from cache), 8 rows of `A` against 32 columns
/// per tile, each pair of rows of `B` paired in registers. Contiguous columns (`x·Wᵀ`, as tied
/// embeddings compute logits, or a weight stored `[out, in]`): a column's pairs along `k` are
/// already adjacent, so 4 rows of `A` against 4 columns take 32 of `k` per load and
/// instruction, summed across lanes at the end. A tile whose part of `B` holds a subnormal is
/// computed again by f32 multiply-adds before anything is written.
///
/// # Safety
/// As for [`gemm()`].
pub(crate) unsafe fn few_rows(m: usize, n: usize, k: usize, a: Halves, b: Halves, c: Dest) -> bool {
    let by_columns = b.cs != 1;
    if (by_columns && b.rs != 1) || m > FEW_ROWS {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    // Columns load 32 of k at a time from A's rows, whose padding is zero.
    let kp = if by_columns { k.div_ceil(32) * 32 } else { k.div_ceil(2) * 2 };
    let mut packed_a = vec![0u16; m * kp];
    for (i, row) in packed_a.chunks_exact_mut(kp).enumerate() {
        for (q, out) in row[..k].iter_mut().enumerate() {
            // SAFETY: (i, q) lies in A.
            *out = unsafe { *a.ptr.offset(i as isize * a.rs + q as isize * a.cs) };
        }
    }
    if any_subnormal(&packed_a) {
        return false;
    }
    let rows = FewRows { a: &packed_a, m, k, kp, b, c };
    // SAFETY: `available` held; tasks write disjoint columns of C.
    if by_columns {
        in_column_tasks(n, COL_N, n * k * 2, |lo, hi| unsafe { few_rows_by_columns(&rows, lo, hi) });
    } else {
        in_column_tasks(n, 2 * NR, n * k * 2, |lo, hi| unsafe { few_rows_columns(&rows, lo, hi) });
    }
    true
}

/// A product [`few_rows`] runs: `a` is `m` rows of `kp` (A's rows, `k` padded with zeros to
/// even, or for `B` by columns to a multiple of 32).
struct FewRows<'a> {
    a: &'a [u16],
    m: usize,
    k: usize,
    kp: usize,
    b: Halves,
    c: Dest,
}

/// Rows of `A` and columns of `B` (by columns) in one tile of [`few_rows`]: 16 accumulators.
const COL_R: usize = 4;
const COL_N: usize = 4;

/// Columns `lo..hi` of a [`few_rows`] product whose `B` has contiguous columns: each group of
/// `COL_N` columns against every row of `A`, so the row groups after the first read the
/// columns from cache.
///
/// # Safety
/// [`available`] returned true; the product's contract.
unsafe fn few_rows_by_columns(p: &FewRows, lo: usize, hi: usize) {
    let mut j0 = lo;
    while j0 < hi {
        let cols = (hi - j0).min(COL_N);
        let mut i0 = 0;
        while i0 < p.m {
            let rows = (p.m - i0).min(COL_R);
            // SAFETY: `available` held; the tile lies inside the product.
            if !unsafe { column_tile(p, i0, rows, j0, cols) } {
                exact_column_tile(p, i0, rows, j0, cols);
            }
            i0 += rows;
        }
        j0 += cols;
    }
}

#[cfg(target_arch = "x86_64")]
unsafe fn column_tile(p: &FewRows, i0: usize, rows: usize, j0: usize, cols: usize) -> bool {
    assert!(rows <= COL_R && cols <= COL_N && i0 + rows <= p.m && p.kp.is_multiple_of(32) && p.b.rs == 1);
    macro_rules! tiles {
        ($(($r:literal, $n:literal))*) => {
            match (rows, cols) {
                $(($r, $n) => unsafe { x86::column_tile::<$r, $n>(p, i0, j0) },)*
                _ => unreachable!("at most {COL_R} rows and {COL_N} columns"),
            }
        };
    }
    tiles!((1, 1)(1, 2)(1, 3)(1, 4)(2, 1)(2, 2)(2, 3)(2, 4)(3, 1)(3, 2)(3, 3)(3, 4)(4, 1)(4, 2)(4, 3)(4, 4))
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn column_tile(_: &FewRows, _: usize, _: usize, _: usize, _: usize) -> bool {
    unreachable!("bf16_dot::available is false off x86-64")
}

/// [`column_tile`] by f32 multiply-adds in `k` order, for columns holding a subnormal.
fn exact_column_tile(p: &FewRows, i0: usize, rows: usize, j0: usize, cols: usize) {
    for i in i0..i0 + rows {
        for j in j0..j0 + cols {
            // SAFETY: (q, j) lies in B for q < k; (i, j) in C, in the caller's columns.
            let column = unsafe { p.b.ptr.offset(j as isize * p.b.cs) };
            let s = (0..p.k).fold(0f32, |s, q| widen(p.a[i * p.kp + q]).mul_add(widen(unsafe { *column.add(q) }), s));
            unsafe { *p.c.at(i, j) = s };
        }
    }
}

/// Rows of `B` a visit of [`few_rows`] to a tile covers.
const FEW_K: usize = 256;

/// Columns `lo..hi` of a [`few_rows`] product.
///
/// # Safety
/// [`available`] returned true; the product's contract.
unsafe fn few_rows_columns(p: &FewRows, lo: usize, hi: usize) {
    let mut q0 = 0;
    while q0 < p.kp {
        let q1 = (q0 + FEW_K).min(p.kp);
        let mut j0 = lo;
        while j0 < hi {
            let cols = (hi - j0).min(NR);
            let mut i0 = 0;
            while i0 < p.m {
                let rows = (p.m - i0).min(MR);
                let t = FewTile { i0, j0, cols, q0, q1, first: q0 == 0, prefetch: i0 == 0 };
                // SAFETY: `available` held; the tile lies inside the product.
                if !unsafe { few_tile(p, &t, rows) } {
                    exact_few_tile(p, &t, rows);
                }
                i0 += rows;
            }
            j0 += cols;
        }
        q0 = q1;
    }
}

/// One visit to a tile: `C[i0.., j0..j0 + cols] (+)= A[i0.., q0..q1] · B[q0..q1, j0..j0 + cols]`
/// (`first`: `=`), the rows of `A` the caller's; `prefetch` asks for rows of `B` ahead (the
/// first row group, the one that reads them from memory).
struct FewTile {
    i0: usize,
    j0: usize,
    cols: usize,
    q0: usize,
    q1: usize,
    first: bool,
    prefetch: bool,
}

#[cfg(target_arch = "x86_64")]
unsafe fn few_tile(p: &FewRows, t: &FewTile, rows: usize) -> bool {
    assert!(rows <= MR && t.i0 + rows <= p.m && t.q1 <= p.kp && t.cols <= NR);
    unsafe { with_rows!(rows, [8, 7, 6, 5, 4, 3, 2], x86::few_tile(p, t)) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn few_tile(_: &FewRows, _: &FewTile, _: usize) -> bool {
    unreachable!("bf16_dot::available is false off x86-64")
}

/// [`few_tile`] by f32 multiply-adds in `k` order, for rows of `B` holding a subnormal.
fn exact_few_tile(p: &FewRows, t: &FewTile, rows: usize) {
    for r in 0..rows {
        let i = t.i0 + r;
        for j in t.j0..t.j0 + t.cols {
            // SAFETY: (i, j) lies in C, in the caller's columns; (q, j) lies in B for q < k.
            let out = p.c.at(i, j);
            let mut s = if t.first { 0.0 } else { unsafe { *out } };
            for q in t.q0..t.q1.min(p.k) {
                let bq = unsafe { *p.b.ptr.offset(q as isize * p.b.rs + j as isize) };
                s = widen(p.a[i * p.kp + q]).mul_add(widen(bq), s);
            }
            unsafe { *out = s };
        }
    }
}

/// `A` in tiles of `MR` rows (zero rows past `m`), each pair of `k` of a tile's rows side by
/// side (see [`a_index`]), so that a step of the tile kernel broadcasts from one cache line at
/// fixed offsets (with `A` by rows, a tile's 8 rows, 8 KiB apart at k = 4096, shared one set of
/// the L1 cache), packed by the pool's threads a tile each; None when it holds a subnormal.
///
/// # Safety
/// Every element of `a`'s `m x k` matrix is readable.
unsafe fn pack_a(m: usize, k: usize, kp: usize, a: &Halves, pool: Option<&ThreadPool>) -> Option<Vec<u16>> {
    let tiles = m.div_ceil(MR);
    let mut packed = vec![0u16; tiles * MR * kp];
    let out = Rows(packed.as_mut_ptr());
    let chunks = pool.map_or(1, ThreadPool::threads).min(tiles);
    let found = std::sync::atomic::AtomicBool::new(false);
    let pack = |t: usize| {
        let (lo, hi) = chunk_bounds(tiles as i64, chunks, t);
        let mut any = false;
        for tile in lo as usize..hi as usize {
            // SAFETY: tile `tile` of the buffer belongs to this chunk alone.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.at(tile * MR * kp), MR * kp) };
            for r in 0..MR.min(m - tile * MR) {
                let i = tile * MR + r;
                if a.cs == 1 {
                    // SAFETY: row i lies in A, its k elements contiguous.
                    let row = unsafe { std::slice::from_raw_parts(a.ptr.offset(i as isize * a.rs), k) };
                    any |= any_subnormal(row);
                    for (pair, x) in row.chunks(2).enumerate() {
                        dst[a_index(r, 2 * pair)..][..x.len()].copy_from_slice(x);
                    }
                } else {
                    for q in 0..k {
                        // SAFETY: (i, q) lies in A.
                        let x = unsafe { *a.ptr.offset(i as isize * a.rs + q as isize * a.cs) };
                        any |= subnormal(x);
                        dst[a_index(r, q)] = x;
                    }
                }
            }
        }
        if any {
            found.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    };
    match pool {
        Some(p) if chunks > 1 => p.run_chunks(chunks, pack),
        _ => pack(0),
    }
    (!found.into_inner()).then_some(packed)
}

/// Columns of `B` a thread packs together (8 tiles), each row's 512 bytes one run.
const NB: usize = 256;

/// Rows of `B` packed at a time: 512 rows of 256 columns are 256 KiB, which the tiles read from
/// L2 once per 8 rows of `A`.
const KC: usize = 512;

/// Rows `q0..q0 + kc` of `B` (`kc` even; rows past `k` zero), the part of `k` one packing
/// covers; `init` for the first, whose products start the sums where later ones add to them.
struct Part {
    q0: usize,
    kc: usize,
    init: bool,
}

/// Where `B`'s element `(q0 + q, j)` of a tile lies in its packed panels (see the module's
/// documentation): panel `j / 16`, pair `q / 2`, lane `j % 16`, half `q % 2`.
fn panel_index(q: usize, j: usize, kc: usize) -> usize {
    (j / 16) * 16 * kc + (q / 2) * 32 + (j % 16) * 2 + q % 2
}

/// Where element `(r, q)` of a tile of `A` lies in it: pair `q / 2` of all its rows, then row
/// `r`, then half `q % 2`.
fn a_index(r: usize, q: usize) -> usize {
    (q / 2) * MR * 2 + r * 2 + q % 2
}

/// The tile of a packing holding a subnormal: each sum in f32 by fused multiply-adds in `k`
/// order, subnormals and all. `acc` holds `rows` rows of 32 sums, `pitch` apart.
fn exact_tile(a: &[u16], panel: &[u16], part: &Part, rows: usize, acc: &mut [f32], pitch: usize) {
    for r in 0..rows {
        for j in 0..NR {
            let s = &mut acc[r * pitch + j];
            let start = if part.init { 0.0 } else { *s };
            *s = (0..part.kc).fold(start, |s, q| {
                widen(a[a_index(r, part.q0 + q)]).mul_add(widen(panel[panel_index(q, j, part.kc)]), s)
            });
        }
    }
}

/// `acc[r][j] (+)= Σ_q A[r][q0 + q]·B[q0 + q][j]` over the part's rows for `rows` rows of the
/// tile of `A` `a` and the 32 columns of `panel` (two 16-column panels of `kc / 2` 64-byte pairs),
/// `acc`'s rows `pitch` apart.
///
/// # Safety
/// [`available`] returned true.
#[cfg(target_arch = "x86_64")]
unsafe fn tile_kernel(a: &[u16], panel: &[u16], part: &Part, rows: usize, acc: &mut [f32], pitch: usize) {
    assert!(rows <= MR && a.len() >= (part.q0 + part.kc) * MR && panel.len() >= NR * part.kc);
    assert!(acc.len() >= (rows - 1) * pitch + NR);
    let a = unsafe { a.as_ptr().add(a_index(0, part.q0)) };
    let (p, kc, acc, init) = (panel.as_ptr(), part.kc, acc.as_mut_ptr(), part.init);
    unsafe { with_rows!(rows, [8, 7, 6, 5, 4, 3, 2], x86::tile(a, p, kc, acc, pitch, init)) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile_kernel(_: &[u16], _: &[u16], _: &Part, _: usize, _: &mut [f32], _: usize) {
    unreachable!("bf16_dot::available is false off x86-64")
}

/// Columns `j0..j0 + cols` of the part's rows of `B` (rows contiguous) as the 16-column
/// panels `tile_kernel` reads, one after another, columns past `cols` up to a whole tile and
/// rows past `k` zero; false when one of the elements is subnormal.
///
/// # Safety
/// [`available`] returned true; the columns lie inside `b`'s matrix, whose `cs` is 1.
#[cfg(target_arch = "x86_64")]
unsafe fn pack_panels(b: &Halves, j0: usize, cols: usize, part: &Part, k: usize, panels: &mut [u16]) -> bool {
    assert!(panels.len() >= cols.div_ceil(NR) * NR * part.kc && part.kc.is_multiple_of(2) && b.cs == 1);
    unsafe { x86::pack_panels(b, j0, cols, (part.q0, part.kc), k, panels.as_mut_ptr()) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn pack_panels(_: &Halves, _: usize, _: usize, _: &Part, _: usize, _: &mut [u16]) -> bool {
    unreachable!("bf16_dot::available is false off x86-64")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Halves, MR, NR};

    /// How far below the two rows it reads `pack_panels` (or `few_tile`) prefetches.
    const PREFETCH_ROWS: usize = 16;

    /// A running check for subnormal bf16 values, in vector registers: each lane keeps the
    /// least `(x & 0x7fff) - 1` (wrapping) of the values it saw, which is below 0x7f exactly
    /// when one of them was subnormal (zero wraps to 0xffff). Three vector operations a vector,
    /// where testing into mask registers and or-ing the masks made a chain through the mask
    /// unit that stalled the loads around it.
    #[derive(Clone, Copy)]
    struct Subnormals(__m512i);

    impl Subnormals {
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw")]
        fn new() -> Self {
            Subnormals(_mm512_set1_epi16(-1))
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw")]
        fn see(&mut self, x: __m512i) {
            let magnitude = _mm512_and_si512(x, _mm512_set1_epi16(0x7fff));
            let below = _mm512_sub_epi16(magnitude, _mm512_set1_epi16(1));
            self.0 = _mm512_min_epu16(self.0, below);
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw")]
        fn any(self) -> bool {
            _mm512_cmplt_epu16_mask(self.0, _mm512_set1_epi16(0x7f)) != 0
        }
    }

    use std::arch::x86_64::*;

    /// See `super::pack_panels`. Rows `q` and `q + 1` of each 32 columns load as two masked
    /// vectors; each 16-column half pairs them by widening row `q` into the low halves of 32-bit
    /// lanes and row `q + 1` into the high halves.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn pack_panels(
        b: &Halves,
        j0: usize,
        cols: usize,
        (q0, kc): (usize, usize),
        k: usize,
        panels: *mut u16,
    ) -> bool {
        let mut subnormals = Subnormals::new();
        let row = |q: usize, c0: usize, mask: __mmask32| {
            if q < k {
                // SAFETY: row q < k, the masked columns lie in B.
                let p = unsafe { b.ptr.offset(q as isize * b.rs + (j0 + c0) as isize) };
                unsafe { _mm512_maskz_loadu_epi16(mask, p as *const i16) }
            } else {
                _mm512_setzero_si512()
            }
        };
        for q in (0..kc).step_by(2) {
            // B's rows lie a page or more apart, where the hardware's prefetchers do not follow
            // them: the lines of rows further down are asked for ahead of their loads.
            let ahead = q0 + q + PREFETCH_ROWS;
            if ahead + 1 < k {
                for r in [ahead, ahead + 1] {
                    for line in (0..cols).step_by(NR) {
                        // SAFETY: the address lies in B's row r; a prefetch never faults.
                        let p = unsafe { b.ptr.offset(r as isize * b.rs + (j0 + line) as isize) };
                        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
                    }
                }
            }
            for tile in 0..cols.div_ceil(NR) {
                let c0 = tile * NR;
                let left = cols - c0;
                let mask: __mmask32 = if left >= NR { !0 } else { (1u32 << left) - 1 };
                let (r0, r1) = (row(q0 + q, c0, mask), row(q0 + q + 1, c0, mask));
                subnormals.see(r0);
                subnormals.see(r1);
                let halves = [
                    (_mm512_extracti64x4_epi64::<0>(r0), _mm512_extracti64x4_epi64::<0>(r1)),
                    (_mm512_extracti64x4_epi64::<1>(r0), _mm512_extracti64x4_epi64::<1>(r1)),
                ];
                for (half, (lo, hi)) in halves.into_iter().enumerate() {
                    let pair =
                        _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(hi)));
                    // SAFETY: panel 2 * tile + half's pair q / 2 lies inside `panels`.
                    let at = unsafe { panels.add((2 * tile + half) * 16 * kc + q * 16) };
                    unsafe { _mm512_storeu_si512(at as *mut __m512i, pair) };
                }
            }
        }
        !subnormals.any()
    }

    /// The tile of `R` rows (see `super::tile_kernel`).
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn tile<const R: usize>(
        a: *const u16,
        panel: *const u16,
        kc: usize,
        acc: *mut f32,
        pitch: usize,
        init: bool,
    ) {
        let mut lo = [_mm512_setzero_ps(); R];
        let mut hi = [_mm512_setzero_ps(); R];
        if !init {
            for r in 0..R {
                // SAFETY: row r's 32 sums lie in `acc`.
                unsafe {
                    lo[r] = _mm512_loadu_ps(acc.add(r * pitch));
                    hi[r] = _mm512_loadu_ps(acc.add(r * pitch + 16));
                }
            }
        }
        let second = unsafe { panel.add(16 * kc) };
        let mut q = 0;
        while q < kc {
            // SAFETY: q < kc, so each 64-byte pair of rows and each 4-byte pair of A lies in its
            // buffer; __m512bh is the same 512 bits as __m512i.
            let (b0, b1): (__m512bh, __m512bh) = unsafe {
                (
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(panel.add(q * 16) as *const __m512i)),
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(second.add(q * 16) as *const __m512i)),
                )
            };
            for r in 0..R {
                let w = unsafe { (a.add(q * MR + r * 2) as *const i32).read_unaligned() };
                let x: __m512bh = unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(w)) };
                lo[r] = _mm512_dpbf16_ps(lo[r], x, b0);
                hi[r] = _mm512_dpbf16_ps(hi[r], x, b1);
            }
            q += 2;
        }
        for r in 0..R {
            // SAFETY: as above.
            unsafe {
                _mm512_storeu_ps(acc.add(r * pitch), lo[r]);
                _mm512_storeu_ps(acc.add(r * pitch + 16), hi[r]);
            }
        }
    }

    /// See `super::few_tile`: rows `q` and `q + 1` of the tile's 32 columns load as two
    /// (masked) vectors and pair up by two word permutes, in column order; returns false,
    /// writing nothing, when one of them holds a subnormal.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn few_tile<const R: usize>(p: &super::FewRows, t: &super::FewTile) -> bool {
        let mask: __mmask32 = if t.cols >= NR { !0 } else { (1u32 << t.cols) - 1 };
        let (mask_lo, mask_hi) = (mask as __mmask16, (mask >> 16) as __mmask16);
        let c_at = |r: usize| p.c.at(t.i0 + r, t.j0);
        let mut lo = [_mm512_setzero_ps(); R];
        let mut hi = [_mm512_setzero_ps(); R];
        if !t.first {
            for r in 0..R {
                // SAFETY: the tile's columns of row r lie in C.
                unsafe {
                    lo[r] = load_c(c_at(r), p.c.cs, 0, mask_lo);
                    hi[r] = load_c(c_at(r), p.c.cs, 1, mask_hi);
                }
            }
        }
        // Word 2c of a pair vector is row q's column c, word 2c + 1 row q + 1's.
        let (idx_lo, idx_hi) = (pair_index(0), pair_index(16));
        let mut subnormals = Subnormals::new();
        let a = unsafe { p.a.as_ptr().add(t.i0 * p.kp) };
        let kp = p.kp;
        let mut b_row = unsafe { p.b.ptr.offset(t.q0 as isize * p.b.rs + t.j0 as isize) };
        let step = 2 * p.b.rs;
        // Pairs whose rows both lie in B; a last odd row pairs with zeros.
        let full = t.q1.min(p.k / 2 * 2);
        let mut q = t.q0;
        while q < t.q1 {
            if t.prefetch && q + PREFETCH_ROWS + 1 < p.k {
                // SAFETY: the addresses lie in B's rows below k; a prefetch never faults.
                let ahead = unsafe { b_row.offset(PREFETCH_ROWS as isize * p.b.rs) };
                _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(unsafe { ahead.offset(p.b.rs) } as *const i8);
            }
            // SAFETY: rows q (and q + 1 where q < full) lie in B, the masked columns in them.
            let (r0, r1) = unsafe {
                let r0 = _mm512_maskz_loadu_epi16(mask, b_row as *const i16);
                let r1 = if q < full {
                    _mm512_maskz_loadu_epi16(mask, b_row.offset(p.b.rs) as *const i16)
                } else {
                    _mm512_setzero_si512()
                };
                (r0, r1)
            };
            subnormals.see(r0);
            subnormals.see(r1);
            // SAFETY: __m512bh is the same 512 bits as __m512i.
            let (b0, b1): (__m512bh, __m512bh) = unsafe {
                (
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_permutex2var_epi16(r0, idx_lo, r1)),
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_permutex2var_epi16(r0, idx_hi, r1)),
                )
            };
            for r in 0..R {
                // SAFETY: q + 1 < kp, so the pair lies in row r of A.
                let w = unsafe { (a.add(r * kp + q) as *const i32).read_unaligned() };
                let x: __m512bh = unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(w)) };
                lo[r] = _mm512_dpbf16_ps(lo[r], x, b0);
                hi[r] = _mm512_dpbf16_ps(hi[r], x, b1);
            }
            b_row = b_row.wrapping_offset(step);
            q += 2;
        }
        if subnormals.any() {
            return false;
        }
        for r in 0..R {
            // SAFETY: as above.
            unsafe {
                store_c(c_at(r), p.c.cs, 0, mask_lo, lo[r]);
                store_c(c_at(r), p.c.cs, 1, mask_hi, hi[r]);
            }
        }
        true
    }

    /// The word permute that pairs rows `q` and `q + 1` (the first and second operand) for the
    /// 16 columns from `base`: word `2c` from the first's column `base + c`, `2c + 1` from the
    /// second's.
    #[inline(always)]
    fn pair_index(base: i16) -> __m512i {
        let idx: [i16; 32] = std::array::from_fn(|w| base + (w / 2) as i16 + if w % 2 == 1 { 32 } else { 0 });
        // SAFETY: the array holds 64 bytes.
        unsafe { _mm512_loadu_si512(idx.as_ptr() as *const __m512i) }
    }

    /// Half `h` (16 columns) of a tile's row of C at `c` (columns `cs` apart), the lanes of
    /// `mask`, zero in the others.
    ///
    /// # Safety
    /// Those columns lie in C.
    #[inline(always)]
    unsafe fn load_c(c: *mut f32, cs: isize, h: usize, mask: __mmask16) -> __m512 {
        if cs == 1 {
            return unsafe { _mm512_maskz_loadu_ps(mask, c.add(16 * h)) };
        }
        let mut x = [0f32; 16];
        for (j, x) in x.iter_mut().enumerate().filter(|(j, _)| mask >> j & 1 == 1) {
            *x = unsafe { *c.offset((16 * h + j) as isize * cs) };
        }
        unsafe { _mm512_loadu_ps(x.as_ptr()) }
    }

    /// Stores what [`load_c`] loads.
    ///
    /// # Safety
    /// As for [`load_c`].
    #[inline(always)]
    unsafe fn store_c(c: *mut f32, cs: isize, h: usize, mask: __mmask16, v: __m512) {
        if cs == 1 {
            return unsafe { _mm512_mask_storeu_ps(c.add(16 * h), mask, v) };
        }
        let mut x = [0f32; 16];
        unsafe { _mm512_storeu_ps(x.as_mut_ptr(), v) };
        for (j, &x) in x.iter().enumerate().filter(|(j, _)| mask >> j & 1 == 1) {
            unsafe { *c.offset((16 * h + j) as isize * cs) = x };
        }
    }

    /// See `super::column_tile`: `R` rows of `A` against `N` columns of `B`, 32 of `k` per
    /// load (the last masked), one accumulator per pair summed across lanes at the end; false,
    /// writing nothing, when a column holds a subnormal.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    // Indexed loops over the accumulators: written with iterators and closures, the few-row
    // tile's accumulators went to the stack every step.
    #[allow(clippy::needless_range_loop)]
    pub(super) unsafe fn column_tile<const R: usize, const N: usize>(p: &super::FewRows, i0: usize, j0: usize) -> bool {
        // The first row group reads the columns from memory: it asks for the next group's
        // (the columns after these, contiguous with them) as it goes.
        let prefetch = i0 == 0;
        let mut acc = [[_mm512_setzero_ps(); N]; R];
        let mut subnormals = Subnormals::new();
        let a = unsafe { p.a.as_ptr().add(i0 * p.kp) };
        let columns: [*const u16; N] = std::array::from_fn(|n| p.b.ptr.wrapping_offset((j0 + n) as isize * p.b.cs));
        let mut q = 0;
        while q < p.k {
            let mask: __mmask32 = if p.k - q >= 32 { !0 } else { (1u32 << (p.k - q)) - 1 };
            let mut b = [_mm512_setzero_si512(); N];
            if prefetch {
                for column in columns {
                    // SAFETY: only an address is formed; a prefetch never faults.
                    let ahead = column.wrapping_add(q).wrapping_offset(super::COL_N as isize * p.b.cs);
                    _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                }
            }
            for n in 0..N {
                // SAFETY: the masked elements q.. lie below k in column j0 + n.
                b[n] = unsafe { _mm512_maskz_loadu_epi16(mask, columns[n].add(q) as *const i16) };
                subnormals.see(b[n]);
            }
            for r in 0..R {
                // SAFETY: q + 32 <= kp, so the 32 elements lie in row r of A; __m512bh is the
                // same 512 bits as __m512i.
                let x: __m512bh = unsafe {
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(a.add(r * p.kp + q) as *const __m512i))
                };
                for n in 0..N {
                    let y: __m512bh = unsafe { std::mem::transmute::<__m512i, __m512bh>(b[n]) };
                    acc[r][n] = _mm512_dpbf16_ps(acc[r][n], x, y);
                }
            }
            q += 32;
        }
        if subnormals.any() {
            return false;
        }
        for r in 0..R {
            for n in 0..N {
                // SAFETY: (i0 + r, j0 + n) lies in C, in the caller's columns.
                unsafe { *p.c.at(i0 + r, j0 + n) = _mm512_reduce_add_ps(acc[r][n]) };
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::GemmThreads;
    use tessera_testkit::Rng;

    fn widen(x: u16) -> f64 {
        f64::from(f32::from_bits(u32::from(x) << 16))
    }

    fn bf16(x: f64) -> u16 {
        half::bf16::from_f64(x).to_bits()
    }

    /// `C` (its `(i, j)` at `i * c_rs + j * c_cs`) against the exact sums of `A` (its `(i, q)`
    /// at `i * a_rs + q * a_cs`) and `B` (its `(q, j)` at `q * b_rs + j * b_cs`): within f32
    /// rounding of the terms' magnitudes.
    fn check(
        (m, n, k): (usize, usize, usize),
        (a, a_rs, a_cs): (&[u16], usize, usize),
        (b, b_rs, b_cs): (&[u16], usize, usize),
        (c, c_rs, c_cs): (&[f32], usize, usize),
        what: &str,
    ) {
        for i in 0..m {
            for j in 0..n {
                let terms = (0..k).map(|q| widen(a[i * a_rs + q * a_cs]) * widen(b[q * b_rs + j * b_cs]));
                let (exact, size) = terms.fold((0.0, 0.0), |(s, z), t| (s + t, z + f64::abs(t)));
                let got = f64::from(c[i * c_rs + j * c_cs]);
                assert!((got - exact).abs() <= 1e-6 * size, "{what} {m}x{n}x{k} ({i},{j}): {got} vs {exact}");
            }
        }
    }

    /// Both entries (`few_rows` for up to 16 rows, with `B` by rows or by columns), on shapes
    /// with partial tiles in both directions, odd `k`, `k` over several parts of `KC` (and
    /// visits of `FEW_K`) rows and `n` over several blocks of `NB` columns, `A` by rows or
    /// transposed, `B` with a pitch wider than its rows or columns, `C` by rows and by columns,
    /// on one thread and two; a subnormal in `B` (its part, visit or tile computed exactly, here a term of
    /// 2^-4 that the instruction would drop) and in `A` (the product refused). Runs only where
    /// the CPU has the instructions (the caller falls back on the f32 GEMM elsewhere, which
    /// `gemm`'s tests cover).
    #[test]
    fn sums_match_the_exact_ones_and_subnormals_count() {
        if !available() {
            eprintln!("bf16_dot: this CPU has no AVX-512 BF16; the kernel is not exercised here");
            return;
        }
        let pool = ThreadPool::new(Some(2)).unwrap();
        let mut rng = Rng::new(17);
        let shapes = [
            (1, 1, 1),
            (3, 17, 5),
            (9, 33, 64),
            (8, 32, 7),
            (70, 300, 1031),
            (17, 600, 40),
            (16, 70, 601),
            (11, 1000, 300),
            (5, 9, 33),
        ];
        // (entry, A by rows, B by rows, C by rows)
        let variants = [
            ("gemm", false, true, true),
            ("gemm", true, true, false),
            ("few_rows", true, true, true),
            ("few_rows", false, true, false),
            ("few_rows", false, false, true),
        ];
        for threaded in [false, true] {
            let _threads = threaded.then(|| GemmThreads::enter(&pool));
            for (m, n, k) in shapes {
                for subnormal_in in [None, Some('b'), Some('a')] {
                    for (entry, a_by_rows, b_by_rows, c_by_rows) in variants {
                        if entry == "few_rows" && m > FEW_ROWS {
                            continue;
                        }
                        let (a_rs, a_cs) = if a_by_rows { (k, 1) } else { (1, m) };
                        let mut a: Vec<u16> = (0..m * k).map(|_| bf16(rng.uniform(-1.0, 1.0))).collect();
                        let (b_rs, b_cs, b_len) =
                            if b_by_rows { (n + 3, 1, k * (n + 3)) } else { (1, k + 5, n * (k + 5)) };
                        let mut b: Vec<u16> = (0..b_len).map(|_| bf16(rng.uniform(-1.0, 1.0))).collect();
                        match subnormal_in {
                            Some('b') => {
                                // B's last row zero but for a subnormal, which A's large element
                                // brings to 2^-4: a term larger than the rest's rounding.
                                a[(k - 1) * a_cs] = bf16(2f64.powi(126));
                                for j in 0..n {
                                    b[(k - 1) * b_rs + j * b_cs] = 0;
                                }
                                b[(k - 1) * b_rs] = bf16(2f64.powi(-130));
                            }
                            Some(_) => a[m * k / 2] = bf16(2f64.powi(-128)),
                            None => {}
                        }
                        let mut c = vec![f32::NAN; m * n];
                        let (c_rs, c_cs) = if c_by_rows { (n, 1) } else { (1, m) };
                        let ha = Halves { ptr: a.as_ptr(), rs: a_rs as isize, cs: a_cs as isize };
                        let hb = Halves { ptr: b.as_ptr(), rs: b_rs as isize, cs: b_cs as isize };
                        let dest = Dest { ptr: c.as_mut_ptr(), rs: c_rs as isize, cs: c_cs as isize };
                        let done = unsafe {
                            if entry == "gemm" {
                                gemm(m, n, k, ha, hb, dest)
                            } else {
                                few_rows(m, n, k, ha, hb, dest)
                            }
                        };
                        let what = format!(
                            "{entry}, A by rows {a_by_rows}, B by rows {b_by_rows}, C by rows {c_by_rows}, \
                             threaded {threaded}, subnormal in {subnormal_in:?}"
                        );
                        if subnormal_in == Some('a') {
                            assert!(!done, "{what}: a subnormal in A must send the product back");
                            assert!(c.iter().all(|x| x.is_nan()), "{what}: wrote C");
                            continue;
                        }
                        assert!(done, "{what}");
                        check((m, n, k), (&a, a_rs, a_cs), (&b, b_rs, b_cs), (&c, c_rs, c_cs), &what);
                    }
                }
            }
        }
        // B by columns is not the packed kernel's, and B with no unit stride neither's.
        let x = [bf16(1.0); 8];
        let (by_columns, neither) =
            (Halves { ptr: x.as_ptr(), rs: 1, cs: 2 }, Halves { ptr: x.as_ptr(), rs: 2, cs: 4 });
        let mut c = [0f32; 4];
        assert!(!unsafe { gemm(2, 2, 2, by_columns, by_columns, Dest { ptr: c.as_mut_ptr(), rs: 2, cs: 1 }) });
        assert!(!unsafe { few_rows(2, 2, 2, by_columns, neither, Dest { ptr: c.as_mut_ptr(), rs: 2, cs: 1 }) });
    }
}
