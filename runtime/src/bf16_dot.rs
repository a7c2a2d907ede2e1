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
//! caller's path) and each panel of `B` while it is packed (a panel holding one is computed by
//! a plain f32 loop instead).
//!
//! `A` is packed by rows, `k` padded to even with zeros; `B` in panels of 16 columns, rows `q`
//! and `q + 1` of a column in one 32-bit lane (`q` in the low half), so one 64-byte load is a
//! panel's pair of rows for its 16 columns. A tile is 8 rows by 32 columns, 16 accumulators;
//! each pair of rows of `B` costs one broadcast of `A` per row and two `vdpbf16ps` per row.
//! Threads split the columns, each packing its own panels.

use crate::gemm::published_pool;
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

/// Whether bf16 bits `x` encode a subnormal (zero exponent, nonzero significand).
fn subnormal(x: u16) -> bool {
    x & 0x7f80 == 0 && x & 0x007f != 0
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
                for q in 0..k {
                    // SAFETY: (i, q) lies in A.
                    let x = unsafe { *a.ptr.offset(i as isize * a.rs + q as isize * a.cs) };
                    any |= subnormal(x);
                    dst[a_index(r, q)] = x;
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

/// Columns of `B` a thread packs together, each of its rows read as one run of 512 bytes:
/// packed one tile (32 columns, one cache line of a row) at a time, walking down `k` one
/// line per row of `B`, the packing took as long as the products (a [32,4096] x [4096,11008]
/// product 13.9 ms, 30% of it packing).
const NB: usize = 8192;

/// Rows of `B` packed at a time: 512 rows of 256 columns are 256 KiB, which the tiles then read
/// from L2 once per 8 rows of `A`.
const KC: usize = 32;

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
    let widen = |x: u16| f32::from_bits(u32::from(x) << 16);
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
    unsafe {
        match rows {
            8 => x86::tile::<8>(a, p, kc, acc, pitch, init),
            7 => x86::tile::<7>(a, p, kc, acc, pitch, init),
            6 => x86::tile::<6>(a, p, kc, acc, pitch, init),
            5 => x86::tile::<5>(a, p, kc, acc, pitch, init),
            4 => x86::tile::<4>(a, p, kc, acc, pitch, init),
            3 => x86::tile::<3>(a, p, kc, acc, pitch, init),
            2 => x86::tile::<2>(a, p, kc, acc, pitch, init),
            _ => x86::tile::<1>(a, p, kc, acc, pitch, init),
        }
    }
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
    assert!(panels.len() >= cols.div_ceil(NR) * NR * part.kc && part.kc % 2 == 0 && b.cs == 1);
    unsafe { x86::pack_panels(b, j0, cols, (part.q0, part.kc), k, panels.as_mut_ptr()) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn pack_panels(_: &Halves, _: usize, _: usize, _: &Part, _: usize, _: &mut [u16]) -> bool {
    unreachable!("bf16_dot::available is false off x86-64")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Halves, MR, NR};

    /// How far below the two rows it packs `pack_panels` prefetches.
    const PREFETCH_ROWS: usize = 16;

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
        let (exponent, significand) = (_mm512_set1_epi16(0x7f80), _mm512_set1_epi16(0x007f));
        let mut subnormal: __mmask32 = 0;
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
                for r in [r0, r1] {
                    subnormal |= _mm512_test_epi16_mask(r, significand) & !_mm512_test_epi16_mask(r, exponent);
                }
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
        subnormal == 0
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
                    std::mem::transmute(_mm512_loadu_si512(panel.add(q * 16) as *const __m512i)),
                    std::mem::transmute(_mm512_loadu_si512(second.add(q * 16) as *const __m512i)),
                )
            };
            for r in 0..R {
                let w = unsafe { (a.add(q * MR + r * 2) as *const i32).read_unaligned() };
                let x: __m512bh = unsafe { std::mem::transmute(_mm512_set1_epi32(w)) };
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

    /// `C` against the exact sums: within f32 rounding of the terms' magnitudes.
    #[allow(clippy::too_many_arguments)]
    fn check(m: usize, n: usize, k: usize, a: &[u16], b: &[u16], b_pitch: usize, c: &[f32], what: &str) {
        for i in 0..m {
            for j in 0..n {
                let terms = (0..k).map(|q| widen(a[q * m + i]) * widen(b[q * b_pitch + j]));
                let (exact, size) = terms.fold((0.0, 0.0), |(s, z), t| (s + t, z + f64::abs(t)));
                let got = f64::from(c[i * n + j]);
                assert!((got - exact).abs() <= 1e-6 * size, "{what} {m}x{n}x{k} ({i},{j}): {got} vs {exact}");
            }
        }
    }

    /// Shapes with partial tiles in both directions, odd `k`, `k` over several parts of `KC`
    /// rows and `n` over several blocks of `NB` columns, `A` transposed and `B` with a pitch
    /// wider than `n`, on one thread and two; a subnormal in `B` (its part computed exactly,
    /// here a term of 2^-30 that the instruction would drop) and in `A` (the product refused).
    /// Runs only where the CPU has the instructions (the caller falls back on the f32 GEMM
    /// elsewhere, which `gemm`'s tests cover).
    #[test]
    fn sums_match_the_exact_ones_and_subnormals_count() {
        if !available() {
            eprintln!("bf16_dot: this CPU has no AVX-512 BF16; the kernel is not exercised here");
            return;
        }
        let pool = ThreadPool::new(Some(2)).unwrap();
        let mut rng = Rng::new(17);
        for threaded in [false, true] {
            let _threads = threaded.then(|| GemmThreads::enter(&pool));
            for (m, n, k) in [(1, 1, 1), (3, 17, 5), (9, 33, 64), (8, 32, 7), (70, 300, 1031), (17, 600, 40)] {
                for subnormal_in in [None, Some('b'), Some('a')] {
                    // A transposed: its (i, q) at q * m + i.
                    let mut a: Vec<u16> = (0..m * k).map(|_| bf16(rng.uniform(-1.0, 1.0))).collect();
                    let pitch = n + 3;
                    let mut b: Vec<u16> = (0..k * pitch).map(|_| bf16(rng.uniform(-1.0, 1.0))).collect();
                    match subnormal_in {
                        Some('b') => {
                            // B's last row zero but for a subnormal, which A's large element
                            // brings to 2^-4: a term larger than the rest's rounding.
                            a[(k - 1) * m] = bf16(2f64.powi(126));
                            b[(k - 1) * pitch..k * pitch].fill(0);
                            b[(k - 1) * pitch] = bf16(2f64.powi(-130));
                        }
                        Some(_) => a[m * k / 2] = bf16(2f64.powi(-128)),
                        None => {}
                    }
                    let mut c = vec![f32::NAN; m * n];
                    let ha = Halves { ptr: a.as_ptr(), rs: 1, cs: m as isize };
                    let hb = Halves { ptr: b.as_ptr(), rs: pitch as isize, cs: 1 };
                    let dest = Dest { ptr: c.as_mut_ptr(), rs: n as isize, cs: 1 };
                    let done = unsafe { gemm(m, n, k, ha, hb, dest) };
                    let what = format!("threaded {threaded}, subnormal in {subnormal_in:?}");
                    if subnormal_in == Some('a') {
                        assert!(!done, "{what}: a subnormal in A must send the product back");
                        assert!(c.iter().all(|x| x.is_nan()), "{what}: wrote C");
                        continue;
                    }
                    assert!(done, "{what}");
                    check(m, n, k, &a, &b, pitch, &c, &what);
                }
            }
        }
        // B by columns is not this kernel's.
        let x = [bf16(1.0); 4];
        let h = Halves { ptr: x.as_ptr(), rs: 1, cs: 2 };
        let mut c = [0f32; 4];
        assert!(!unsafe { gemm(2, 2, 2, h, h, Dest { ptr: c.as_mut_ptr(), rs: 2, cs: 1 }) });
    }
}
