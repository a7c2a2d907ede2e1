//! 8-bit integer products on AVX-512 VNNI (`vpdpbusd`): the `s8 x s8 -> s32` dot of a
//! quantized model in 32-bit integer lanes, 64 products per instruction.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed bytes, four per 32-bit lane, and adds the
//! four products to the lane, wrapping. Operands of either signedness are moved into those
//! ranges by an offset (`a' = a + oa`, `oa = 128` for signed `A`; `b' = b - ob`, `ob = 128` for
//! unsigned `B`), and since `a·b = a'·b' + ob·a' - oa·b' - oa·ob`, each result is the sum of
//! `a'·b'` corrected by `A'`'s row sum, `B'`'s column sum and `k·oa·ob`. Every term is an
//! integer and every addition wraps modulo 2^32, so the result is the exact sum of products
//! modulo 2^32: the low bits of any result type of at most 32 bits, and of a 64-bit one while
//! the exact sum cannot leave the `i32` range (the caller's check).
//!
//! `A'` is packed row by row (`k` padded to a multiple of 4 with zeros, which add nothing);
//! `B'` in panels of 16 columns, four consecutive `k` of a column in one 32-bit lane, so one
//! 64-byte load is a panel's four `k` for its 16 columns. A tile is 8 rows by 32 columns, 16
//! accumulators, each `k` quadruple one broadcast of `A'` per row and two `vpdpbusd` per row.
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
            && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// One 8-bit operand: `value(i, j)` is element `(i, j)` of a matrix at `ptr + i*rs + j*cs`
/// (elements), signed or not.
#[derive(Clone, Copy)]
pub(crate) struct Bytes {
    pub ptr: *const u8,
    pub rs: isize,
    pub cs: isize,
    pub signed: bool,
}

// SAFETY: read only, inside the call the caller waits for.
unsafe impl Send for Bytes {}
unsafe impl Sync for Bytes {}

impl Bytes {
    /// The bit pattern that moves this operand's bytes into `vpdpbusd`'s range by xor: for
    /// `A` (unsigned bytes) `a + 128` of a signed value, for `B` (signed bytes) `b - 128` of
    /// an unsigned one.
    fn flip(&self, want_signed: bool) -> u8 {
        if self.signed == want_signed {
            0
        } else {
            0x80
        }
    }

    /// Row `i`'s elements `j0..j0 + out.len()`, xor `flip`, into `out`.
    ///
    /// # Safety
    /// The elements lie inside the matrix the caller described.
    #[inline(always)]
    unsafe fn read_row(&self, i: usize, j0: usize, flip: u8, out: &mut [u8]) {
        let row = unsafe { self.ptr.offset(i as isize * self.rs + j0 as isize * self.cs) };
        if self.cs == 1 {
            let src = unsafe { std::slice::from_raw_parts(row, out.len()) };
            for (o, &x) in out.iter_mut().zip(src) {
                *o = x ^ flip;
            }
        } else {
            for (j, o) in out.iter_mut().enumerate() {
                *o = unsafe { *row.offset(j as isize * self.cs) } ^ flip;
            }
        }
    }
}

/// The result matrix: element `(i, j)` at byte `ptr + (i*rs + j*cs) * width`, the low `width`
/// bytes (1, 2, 4 or 8; 8 sign-extends) of each 32-bit sum.
#[derive(Clone, Copy)]
pub(crate) struct Dest {
    pub ptr: *mut u8,
    pub rs: isize,
    pub cs: isize,
    pub width: usize,
}

// SAFETY: chunks write disjoint columns, inside the call the caller waits for.
unsafe impl Send for Dest {}
unsafe impl Sync for Dest {}

impl Dest {
    /// Row `i`'s elements `j0..j0 + v.len()`.
    ///
    /// # Safety
    /// The elements lie inside the matrix the caller described.
    #[inline(always)]
    unsafe fn write_row(&self, i: usize, j0: usize, v: &[i32]) {
        let at = |j: usize| unsafe {
            self.ptr.offset((i as isize * self.rs + (j0 + j) as isize * self.cs) * self.width as isize)
        };
        match self.width {
            4 if self.cs == 1 => unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), at(0) as *mut i32, v.len()) },
            4 => v.iter().enumerate().for_each(|(j, &x)| unsafe { (at(j) as *mut i32).write_unaligned(x) }),
            8 => v.iter().enumerate().for_each(|(j, &x)| unsafe { (at(j) as *mut i64).write_unaligned(i64::from(x)) }),
            2 => v.iter().enumerate().for_each(|(j, &x)| unsafe { (at(j) as *mut i16).write_unaligned(x as i16) }),
            _ => v.iter().enumerate().for_each(|(j, &x)| unsafe { *at(j) = x as u8 }),
        }
    }
}

/// `C = A·B` modulo 2^32 into `c`, `A` `m x k`, `B` `k x n`.
///
/// # Safety
/// [`available`] returned true; every element the sizes and strides of `a` and `b` address is
/// readable, every one of `c` writable and not overlapping them.
pub(crate) unsafe fn gemm(m: usize, n: usize, k: usize, a: Bytes, b: Bytes, c: Dest) {
    if m == 0 || n == 0 {
        return;
    }
    let kp = k.div_ceil(4) * 4;
    let oa: i32 = if a.signed { 128 } else { 0 };
    let ob: i32 = if b.signed { 0 } else { 128 };
    let (flip_a, flip_b) = (a.flip(false), b.flip(true));
    let pool = published_pool();
    let pool = if pool.is_null() || m.saturating_mul(n).saturating_mul(k) < PARALLEL_MIN_PRODUCTS {
        None
    } else {
        Some(unsafe { &*pool })
    };
    let threads = pool.map_or(1, ThreadPool::threads);
    // A' by rows, and its row sums (the `ob·a'` term), packed in row blocks by the threads.
    let mut packed_a = vec![0u8; m * kp];
    let mut row_sums = vec![0i32; m];
    {
        let (pa, rsum) = (Rows(packed_a.as_mut_ptr()), Rows(row_sums.as_mut_ptr()));
        let chunks = threads.min(m);
        let pack = |t: usize| {
            let (lo, hi) = chunk_bounds(m as i64, chunks, t);
            for i in lo as usize..hi as usize {
                // SAFETY: rows lo..hi of the buffers belong to this chunk alone.
                let row = unsafe { std::slice::from_raw_parts_mut(pa.at(i * kp), k) };
                unsafe { a.read_row(i, 0, flip_a, row) };
                let sum = row.iter().fold(0u32, |s, &x| s.wrapping_add(u32::from(x)));
                unsafe { *rsum.at(i) = sum as i32 };
            }
        };
        match pool {
            Some(p) if chunks > 1 => p.run_chunks(chunks, pack),
            _ => pack(0),
        }
    }
    let kterm = (k as i32).wrapping_mul(oa).wrapping_mul(ob);
    let packed_a = &packed_a;
    // Row i's `ob·a' - k·oa·ob` terms.
    let fix = |i: usize| ob.wrapping_mul(row_sums[i]).wrapping_sub(kterm);
    if m <= FEW_ROWS && b.cs == 1 {
        // SAFETY: the caller's contract; `packed_a` holds m rows of kp bytes.
        unsafe { few_rows(m, n, k, packed_a, &b, flip_b, oa, &fix, c, pool) };
        return;
    }
    let tiles = n.div_ceil(NR);
    let chunks = threads.min(tiles);
    let work = |t: usize| {
        let (lo, hi) = chunk_bounds(tiles as i64, chunks, t);
        // Two panels of B' (the tile's 32 columns).
        let mut panel = vec![0u8; NR * kp];
        let mut acc = [[0i32; NR]; MR];
        let mut fixed = [0i32; NR];
        for tile in lo as usize..hi as usize {
            let j0 = tile * NR;
            let cols = NR.min(n - j0);
            // SAFETY: `available` held; the panel holds NR * kp bytes.
            let sums = unsafe { pack_panels(&b, j0, cols, k, kp, flip_b, &mut panel) };
            // Each column's sum of B' times -oa, the `-oa·b'` term.
            let col_terms = sums.map(|x| x.wrapping_mul(-oa));
            let mut i0 = 0;
            while i0 < m {
                let rows = MR.min(m - i0);
                // SAFETY: `available` held; the packed buffers hold `rows` rows and two panels.
                unsafe { tile_kernel(&packed_a[i0 * kp..], kp, &panel, rows, &mut acc) };
                for (r, sums) in acc.iter().enumerate().take(rows) {
                    let row_term = fix(i0 + r);
                    for ((f, &s), &ct) in fixed.iter_mut().zip(sums).zip(&col_terms) {
                        *f = s.wrapping_add(row_term).wrapping_add(ct);
                    }
                    // SAFETY: row i0 + r, columns j0.. of C, which belong to this chunk.
                    unsafe { c.write_row(i0 + r, j0, &fixed[..cols]) };
                }
                i0 += rows;
            }
        }
    };
    match pool {
        Some(p) if chunks > 1 => p.run_chunks(chunks, work),
        _ => work(0),
    }
}

/// Products with at most this many rows read `B` where it lies (rows of contiguous columns)
/// instead of packing it: packing is work per element of `B`, which few rows of `A` do not
/// repay (4 rows by 4096x4096 took 3.2 ms packed, most of it packing).
const FEW_ROWS: usize = 4;

/// Columns a block of [`few_rows`] covers (four 16-lane accumulators), and the rows of `B`
/// it consumes per visit (its accumulators then go back to memory while the next block runs,
/// so that `B` is read along its rows).
const FEW_COLS: usize = 64;
const FEW_K: usize = 16;

/// `C = A·B` for `m <= FEW_ROWS` rows of packed `A'` (pitch `kp = k` rounded up to 4) and a
/// `B` of contiguous rows, each group of 4 of its rows interleaved in registers as it is read;
/// `fix(i)` is row `i`'s correction beside `-oa` times each column's sum of `B'`.
///
/// # Safety
/// [`available`] returned true; `B`'s rows `0..k` hold columns `0..n` contiguously; `c` as for
/// [`gemm`].
#[allow(clippy::too_many_arguments)]
unsafe fn few_rows(
    m: usize,
    n: usize,
    k: usize,
    packed_a: &[u8],
    b: &Bytes,
    flip_b: u8,
    oa: i32,
    fix: &(dyn Fn(usize) -> i32 + Sync),
    c: Dest,
    pool: Option<&ThreadPool>,
) {
    let kp = k.div_ceil(4) * 4;
    let blocks = n.div_ceil(FEW_COLS);
    let chunks = pool.map_or(1, ThreadPool::threads).min(blocks);
    let work = |t: usize| {
        let (lo, hi) = chunk_bounds(blocks as i64, chunks, t);
        let (lo, hi) = (lo as usize, hi as usize);
        // Per block: m rows of 64 sums, then the 64 column sums of B'; lane order as
        // `x86::few_rows_block` leaves it.
        let stride = (m + 1) * FEW_COLS;
        let mut acc = vec![0i32; (hi - lo) * stride];
        let mut q0 = 0;
        while q0 < kp {
            let q1 = (q0 + FEW_K).min(kp);
            for blk in lo..hi {
                let j0 = blk * FEW_COLS;
                let cols = FEW_COLS.min(n - j0);
                let sums = &mut acc[(blk - lo) * stride..][..stride];
                // SAFETY: `available` held; rows q0..q1 (those below k) of columns j0..j0+cols lie
                // in B; A' holds m rows of kp bytes.
                unsafe { few_rows_block(m, packed_a, kp, b, flip_b, (q0, q1, k), (j0, cols), oa != 0, sums) };
            }
            q0 = q1;
        }
        let mut row = [0i32; FEW_COLS];
        for blk in lo..hi {
            let j0 = blk * FEW_COLS;
            let cols = FEW_COLS.min(n - j0);
            let sums = &acc[(blk - lo) * stride..][..stride];
            let col_sums = &sums[m * FEW_COLS..];
            for i in 0..m {
                let f = fix(i);
                for (j, out) in row.iter_mut().enumerate().take(cols) {
                    // Column 16L + 4v + e sits in vector v, lane 4L + e.
                    let lane = (j % 4 + (j / 16) * 4) + (j / 4 % 4) * 16;
                    *out = sums[i * FEW_COLS + lane].wrapping_add(f).wrapping_sub(oa.wrapping_mul(col_sums[lane]));
                }
                // SAFETY: row i, columns j0.. of C, which belong to this chunk.
                unsafe { c.write_row(i, j0, &row[..cols]) };
            }
        }
    };
    match pool {
        Some(p) if chunks > 1 => p.run_chunks(chunks, work),
        _ => work(0),
    }
}

/// One visit of [`few_rows`] to a block: `B`'s rows `q0..q1` (zero past `k`) of columns
/// `j0..j0 + cols` added into `sums` (`m` rows of four vectors, then the column sums when
/// `col_sums`).
///
/// # Safety
/// As for [`few_rows`]; `sums` holds `(m + 1) * 64` elements.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn few_rows_block(
    m: usize,
    a: &[u8],
    kp: usize,
    b: &Bytes,
    flip: u8,
    rows: (usize, usize, usize),
    cols: (usize, usize),
    col_sums: bool,
    sums: &mut [i32],
) {
    assert!(a.len() >= m * kp && sums.len() >= (m + 1) * FEW_COLS && rows.1 <= kp && cols.1 <= FEW_COLS);
    unsafe {
        with_rows!(m, [4, 3, 2], x86::few_rows_block(a.as_ptr(), kp, b, flip, rows, cols, col_sums, sums.as_mut_ptr()))
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn few_rows_block(
    _: usize,
    _: &[u8],
    _: usize,
    _: &Bytes,
    _: u8,
    _: (usize, usize, usize),
    _: (usize, usize),
    _: bool,
    _: &mut [i32],
) {
    unreachable!("int8_vnni::available is false off x86-64")
}

/// `acc[r][j] = Σ_q A'[r][q]·B'[q][j]` for `rows` rows of `a` (pitch `kp` bytes) and the 32
/// columns of `panel` (two 16-column panels of `kp / 4` 64-byte groups each).
///
/// # Safety
/// [`available`] returned true; `a` holds `rows` rows of `kp` bytes, `panel` `NR * kp` bytes.
#[cfg(target_arch = "x86_64")]
unsafe fn tile_kernel(a: &[u8], kp: usize, panel: &[u8], rows: usize, acc: &mut [[i32; NR]; MR]) {
    debug_assert!(a.len() >= (rows - 1) * kp + kp && panel.len() >= NR * kp);
    unsafe { with_rows!(rows, [8, 7, 6, 5, 4, 3, 2], x86::tile(a.as_ptr(), kp, panel.as_ptr(), acc)) }
}

/// Columns `j0..j0 + cols` of `B'` (`b` xor `flip`) as the two 16-column panels `tile_kernel`
/// reads (columns past `cols` and `k` past the last row zero); returns each column's sum.
///
/// # Safety
/// [`available`] returned true; the columns lie inside `b`'s matrix; `panel` holds `NR * kp`.
#[cfg(target_arch = "x86_64")]
unsafe fn pack_panels(b: &Bytes, j0: usize, cols: usize, k: usize, kp: usize, flip: u8, panel: &mut [u8]) -> [i32; NR] {
    assert!(panel.len() >= NR * kp && cols <= NR && kp >= k);
    unsafe { x86::pack_panels(b, j0, cols, k, kp, flip, panel.as_mut_ptr()) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn pack_panels(_: &Bytes, _: usize, _: usize, _: usize, _: usize, _: u8, _: &mut [u8]) -> [i32; NR] {
    unreachable!("int8_vnni::available is false off x86-64")
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile_kernel(_: &[u8], _: usize, _: &[u8], _: usize, _: &mut [[i32; NR]; MR]) {
    unreachable!("int8_vnni::available is false off x86-64")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Bytes, MR, NR};
    use std::arch::x86_64::*;

    /// See `super::few_rows_block`. Four rows of 64 columns interleave in registers as
    /// `pack_panels` interleaves them in memory, each 128-bit lane on its own: vector `v`'s
    /// lane `4L + e` is column `16L + 4v + e`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn few_rows_block<const R: usize>(
        a: *const u8,
        kp: usize,
        b: &Bytes,
        flip: u8,
        (q0, q1, k): (usize, usize, usize),
        (j0, cols): (usize, usize),
        col_sums: bool,
        sums: *mut i32,
    ) {
        let mask: __mmask64 = if cols >= 64 { !0 } else { (1u64 << cols) - 1 };
        let flip = _mm512_set1_epi8(flip as i8);
        let ones = _mm512_set1_epi8(1);
        let at = |r: usize, v: usize| unsafe { sums.add(r * 64 + v * 16) as *mut __m512i };
        let mut acc = [[_mm512_setzero_si512(); 4]; R];
        let mut cs = [_mm512_setzero_si512(); 4];
        for (r, row) in acc.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate() {
                *x = unsafe { _mm512_loadu_si512(at(r, v)) };
            }
        }
        if col_sums {
            for (v, x) in cs.iter_mut().enumerate() {
                *x = unsafe { _mm512_loadu_si512(at(R, v)) };
            }
        }
        let mut q = q0;
        while q < q1 {
            let row = |t: usize| {
                if q + t < k {
                    // SAFETY: row q + t < k, the masked columns lie in B.
                    let p = unsafe { b.ptr.offset((q + t) as isize * b.rs + j0 as isize) };
                    _mm512_xor_si512(unsafe { _mm512_maskz_loadu_epi8(mask, p as *const i8) }, flip)
                } else {
                    _mm512_setzero_si512()
                }
            };
            let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
            let (t0, t1) = (_mm512_unpacklo_epi8(r0, r1), _mm512_unpackhi_epi8(r0, r1));
            let (t2, t3) = (_mm512_unpacklo_epi8(r2, r3), _mm512_unpackhi_epi8(r2, r3));
            let o = [
                _mm512_unpacklo_epi16(t0, t2),
                _mm512_unpackhi_epi16(t0, t2),
                _mm512_unpacklo_epi16(t1, t3),
                _mm512_unpackhi_epi16(t1, t3),
            ];
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: q < kp, so the word lies in row r of A'.
                let w = _mm512_set1_epi32(unsafe { (a.add(r * kp + q) as *const i32).read_unaligned() });
                for (x, &ov) in row.iter_mut().zip(&o) {
                    *x = _mm512_dpbusd_epi32(*x, w, ov);
                }
            }
            if col_sums {
                for (x, &ov) in cs.iter_mut().zip(&o) {
                    *x = _mm512_dpbusd_epi32(*x, ones, ov);
                }
            }
            q += 4;
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, &x) in row.iter().enumerate() {
                unsafe { _mm512_storeu_si512(at(r, v), x) };
            }
        }
        if col_sums {
            for (v, &x) in cs.iter().enumerate() {
                unsafe { _mm512_storeu_si512(at(R, v), x) };
            }
        }
    }

    /// See `super::pack_panels`. Four rows of 16 columns interleave into one 64-byte group
    /// (each column's four bytes adjacent) by two rounds of unpacks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn pack_panels(
        b: &Bytes,
        j0: usize,
        cols: usize,
        k: usize,
        kp: usize,
        flip: u8,
        panel: *mut u8,
    ) -> [i32; NR] {
        let mut rows = [[0u8; NR]; 4];
        let mut sums = [_mm512_setzero_si512(); 2];
        let mut q = 0;
        while q < kp {
            for (t, row) in rows.iter_mut().enumerate() {
                if q + t < k {
                    // SAFETY: row q + t, columns j0..j0 + cols lie in B.
                    unsafe { b.read_row(q + t, j0, flip, &mut row[..cols]) };
                } else {
                    *row = [0; NR];
                }
            }
            for (half, sum) in sums.iter_mut().enumerate() {
                // SAFETY: each row holds 32 bytes; the group lies inside the panel.
                unsafe {
                    let r = |t: usize| _mm_loadu_si128(rows[t].as_ptr().add(half * 16) as *const __m128i);
                    let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
                    for x in [r0, r1, r2, r3] {
                        *sum = _mm512_add_epi32(*sum, _mm512_cvtepi8_epi32(x));
                    }
                    let (t0, t1) = (_mm_unpacklo_epi8(r0, r1), _mm_unpackhi_epi8(r0, r1));
                    let (t2, t3) = (_mm_unpacklo_epi8(r2, r3), _mm_unpackhi_epi8(r2, r3));
                    let dst = panel.add(half * 16 * kp + q * 16) as *mut __m128i;
                    _mm_storeu_si128(dst, _mm_unpacklo_epi16(t0, t2));
                    _mm_storeu_si128(dst.add(1), _mm_unpackhi_epi16(t0, t2));
                    _mm_storeu_si128(dst.add(2), _mm_unpacklo_epi16(t1, t3));
                    _mm_storeu_si128(dst.add(3), _mm_unpackhi_epi16(t1, t3));
                }
            }
            q += 4;
        }
        let mut out = [0i32; NR];
        // SAFETY: `out` holds two vectors.
        unsafe {
            _mm512_storeu_si512(out.as_mut_ptr() as *mut __m512i, sums[0]);
            _mm512_storeu_si512(out.as_mut_ptr().add(16) as *mut __m512i, sums[1]);
        }
        out
    }

    /// The tile of `R` rows (see `tile_kernel`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn tile<const R: usize>(a: *const u8, kp: usize, panel: *const u8, acc: &mut [[i32; NR]; MR]) {
        let mut lo = [_mm512_setzero_si512(); R];
        let mut hi = [_mm512_setzero_si512(); R];
        let second = unsafe { panel.add(16 * kp) };
        let mut q = 0;
        while q < kp {
            // SAFETY: q < kp, so each 64-byte group and 4-byte word lies in its buffer.
            let (b0, b1) = unsafe {
                (
                    _mm512_loadu_si512(panel.add(q * 16) as *const __m512i),
                    _mm512_loadu_si512(second.add(q * 16) as *const __m512i),
                )
            };
            for r in 0..R {
                let w = unsafe { (a.add(r * kp + q) as *const i32).read_unaligned() };
                let x = _mm512_set1_epi32(w);
                lo[r] = _mm512_dpbusd_epi32(lo[r], x, b0);
                hi[r] = _mm512_dpbusd_epi32(hi[r], x, b1);
            }
            q += 4;
        }
        for r in 0..R {
            unsafe {
                _mm512_storeu_si512(acc[r].as_mut_ptr() as *mut __m512i, lo[r]);
                _mm512_storeu_si512(acc[r].as_mut_ptr().add(16) as *mut __m512i, hi[r]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::GemmThreads;
    use tessera_testkit::Rng;

    /// Every signedness pair, shapes with partial tiles in both directions and `k` not a
    /// multiple of 4 (up to 4 rows: `few_rows`, partial blocks of 64 columns and of 16 `k`),
    /// strided and transposed operands, on one thread and two: against the exact
    /// sums modulo 2^32. Runs only where the CPU has the instructions (the caller falls back on
    /// the float GEMM elsewhere, which `int_gemm`'s tests cover).
    #[test]
    fn sums_are_exact_modulo_2_32() {
        if !available() {
            eprintln!("int8_vnni: this CPU has no AVX-512 VNNI; the kernel is not exercised here");
            return;
        }
        let pool = ThreadPool::new(Some(2)).unwrap();
        let mut rng = Rng::new(9);
        for threaded in [false, true] {
            let _threads = threaded.then(|| GemmThreads::enter(&pool));
            for (m, n, k) in [
                (1, 1, 1),
                (3, 17, 5),
                (4, 130, 37),
                (2, 200, 1031),
                (9, 33, 64),
                (8, 32, 7),
                (70, 100, 300),
                (130, 70, 1031),
            ] {
                for (sa, sb) in [(true, true), (true, false), (false, true), (false, false)] {
                    let av: Vec<u8> =
                        (0..m * k).map(|i| if i % 5 == 0 { 0x80 } else { rng.range(0, 255) as u8 }).collect();
                    let bv: Vec<u8> =
                        (0..k * n).map(|i| if i % 7 == 0 { 0xff } else { rng.range(0, 255) as u8 }).collect();
                    // A transposed (its (i, q) at q*m + i), B row-major with a pitch of n + 3.
                    let mut at = vec![0u8; m * k];
                    for i in 0..m {
                        for q in 0..k {
                            at[q * m + i] = av[i * k + q];
                        }
                    }
                    let pitch = n + 3;
                    let mut bp = vec![0u8; k * pitch];
                    for q in 0..k {
                        bp[q * pitch..q * pitch + n].copy_from_slice(&bv[q * n..q * n + n]);
                    }
                    let a = Bytes { ptr: at.as_ptr(), rs: 1, cs: m as isize, signed: sa };
                    let b = Bytes { ptr: bp.as_ptr(), rs: pitch as isize, cs: 1, signed: sb };
                    let mut c = vec![0x5a5a5a5ai32; m * n];
                    let dest = Dest { ptr: c.as_mut_ptr() as *mut u8, rs: n as isize, cs: 1, width: 4 };
                    unsafe { gemm(m, n, k, a, b, dest) };
                    let val = |x: u8, s: bool| if s { i64::from(x as i8) } else { i64::from(x) };
                    for i in 0..m {
                        for j in 0..n {
                            let exact: i64 = (0..k).map(|q| val(av[i * k + q], sa) * val(bv[q * n + j], sb)).sum();
                            assert_eq!(
                                c[i * n + j],
                                exact as i32,
                                "{m}x{n}x{k} signed {sa},{sb} threaded {threaded} at ({i},{j})"
                            );
                        }
                    }
                }
            }
        }
    }
}
