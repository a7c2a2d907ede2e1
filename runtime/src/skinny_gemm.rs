//! Products with few rows: `C = A·B` where `A` has at most [`MAX_ROWS`] rows (the runtime
//! transposes a product with few columns into this form). This is a decode step's shape: a
//! handful of token rows times every weight matrix of a model. `B` is read once, in its own
//! element type (f32, bf16 or f16), and widened in registers; accumulation is in f32.
//!
//! Why not the `gemm` crate: it has no bf16, it packs `B` for a large product, and at 11 rows
//! it reached 30-40 GFLOP/s on f32 here, where these tiles reach 50-110 (the few rows make
//! each element of `B` worth only a few multiply-adds, so reading `B` once is what counts).
//!
//! `B` must have a unit stride along `n` (its rows contiguous: `x·W` with `W` row-major) or
//! along `k` (its columns contiguous: `x·Wᵀ`, as tied embeddings compute logits). Each
//! layout has its own register tile: AVX2/FMA intrinsics on x86-64 CPUs that have them
//! (`x86`), AVX-512 ones for contiguous rows of `B` where the CPU has those (`x86_512`: 8 rows
//! of `A` per tile, so up to 8 rows read `B` once, and masked partial tiles at the right edge),
//! and a portable version in plain array code (other CPUs, and the AVX2 tiles' partial ones).
//! Columns are split into tasks on the published pool.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::gemm::published_pool;

/// The most rows `A` may have: 16 rows keep `A` (widened to f32) in a small copy and the
/// register tiles re-read each slice of `B` at most three times, from cache.
pub(crate) const MAX_ROWS: usize = 16;

/// Below this many bytes of `B` per task, splitting costs more than it saves.
const MIN_TASK_BYTES: usize = 64 << 10;

/// An element `B` may hold.
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    fn widen(self) -> f32;
}

impl Elem for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

/// bf16 bits: the f32 with the same upper half (exact; a NaN stays a NaN).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct Bf16(pub u16);

impl Elem for Bf16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

/// f16 bits, widened without branches so the tiles stay vector code.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct F16(pub u16);

impl Elem for F16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        let x = u32::from(self.0);
        let sign = (x & 0x8000) << 16;
        let em = x & 0x7fff;
        // Exponent and mantissa moved into f32's fields read as the value times 2^-112, for
        // normal and subnormal halves alike (an f16 subnormal lands on an f32 subnormal), so
        // one exact multiplication by 2^112 rebiases both; infinities and NaNs keep their
        // mantissa under an all-ones exponent.
        let finite = f32::from_bits(em << 13) * f32::from_bits(0x7780_0000);
        let special = f32::from_bits((em << 13) | 0x7f80_0000);
        let v = if em >= 0x7c00 { special } else { finite };
        f32::from_bits(v.to_bits() | sign)
    }
}

/// How a tile multiplies and adds: fused where the instruction set has FMA.
trait Madd {
    fn madd(a: f32, b: f32, c: f32) -> f32;
}

struct Fused;
impl Madd for Fused {
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

struct Unfused;
impl Madd for Unfused {
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// One product. `a` is `m×k` f32, row-major and contiguous; `B`'s element `(q, j)` is at
/// `b + q*b_rs + j*b_cs` with `b_cs == 1` or `b_rs == 1`; `C`'s element `(i, j)` at
/// `c + i*c_rs + j*c_cs`.
#[derive(Clone, Copy)]
pub(crate) struct Problem<E> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: *const f32,
    pub b: *const E,
    pub b_rs: isize,
    pub b_cs: isize,
    pub c: *mut f32,
    pub c_rs: isize,
    pub c_cs: isize,
}

// SAFETY: shared with pool threads only for a call the caller waits for; tasks write
// disjoint columns of `C` and only read `A` and `B`.
unsafe impl<E> Send for Problem<E> {}
unsafe impl<E> Sync for Problem<E> {}

/// Columns of one tile when `B`'s rows are contiguous.
const ROW_TILE: usize = 16;
/// Rows of `A` one such tile keeps: 6 x 16 accumulators are 12 AVX2 registers.
const ROW_TILE_ROWS: usize = 6;
/// Columns and rows of one tile when `B`'s columns are contiguous: 3 x 4 accumulators of 8
/// lanes, summed across lanes at the end.
const COL_TILE: usize = 4;
const COL_TILE_ROWS: usize = 3;
const COL_LANES: usize = 8;

impl<E: Elem> Problem<E> {
    fn rows_contiguous(&self) -> bool {
        self.b_cs == 1
    }

    /// `C[i0..i0+R, j0..j0+cols] = A[i0..i0+R, :] · B[:, j0..j0+cols]` for contiguous rows of
    /// `B`; `FULL` tiles have all `ROW_TILE` columns.
    ///
    /// # Safety
    /// The product's contract; the tile lies inside `C`.
    #[inline(always)]
    unsafe fn row_tile<F: Madd, const R: usize, const FULL: bool>(&self, i0: usize, j0: usize, cols: usize) {
        let mut acc = [[0f32; ROW_TILE]; R];
        let a = unsafe { self.a.add(i0 * self.k) };
        for q in 0..self.k {
            let row = unsafe { self.b.offset(q as isize * self.b_rs + j0 as isize) };
            let mut bv = [0f32; ROW_TILE];
            for (j, x) in bv.iter_mut().enumerate() {
                if FULL || j < cols {
                    *x = unsafe { *row.add(j) }.widen();
                }
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let av = unsafe { *a.add(i * self.k + q) };
                for (s, &x) in acc.iter_mut().zip(&bv) {
                    *s = F::madd(av, x, *s);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            for (j, &s) in acc.iter().enumerate().take(cols) {
                unsafe { *self.c.offset((i0 + i) as isize * self.c_rs + (j0 + j) as isize * self.c_cs) = s };
            }
        }
    }

    /// `C[i0..i0+R, j0..j0+N]` for contiguous columns of `B`: lanes run along `k`.
    ///
    /// # Safety
    /// As for `row_tile`.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // three arrays indexed alike read clearer by index
    unsafe fn col_tile<F: Madd, const R: usize, const N: usize>(&self, i0: usize, j0: usize) {
        let mut acc = [[[0f32; COL_LANES]; N]; R];
        let a = unsafe { self.a.add(i0 * self.k) };
        let col = |j: usize| unsafe { self.b.offset((j0 + j) as isize * self.b_cs) };
        let body = self.k / COL_LANES * COL_LANES;
        let mut q = 0;
        while q < body {
            let mut av = [[0f32; COL_LANES]; R];
            for (i, v) in av.iter_mut().enumerate() {
                for (l, x) in v.iter_mut().enumerate() {
                    *x = unsafe { *a.add(i * self.k + q + l) };
                }
            }
            for j in 0..N {
                let mut bv = [0f32; COL_LANES];
                for (l, x) in bv.iter_mut().enumerate() {
                    *x = unsafe { *col(j).add(q + l) }.widen();
                }
                for i in 0..R {
                    for l in 0..COL_LANES {
                        acc[i][j][l] = F::madd(av[i][l], bv[l], acc[i][j][l]);
                    }
                }
            }
            q += COL_LANES;
        }
        for i in 0..R {
            for j in 0..N {
                let v = &acc[i][j];
                let mut s = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
                for q in body..self.k {
                    s = F::madd(unsafe { *a.add(i * self.k + q) }, unsafe { *col(j).add(q) }.widen(), s);
                }
                unsafe { *self.c.offset((i0 + i) as isize * self.c_rs + (j0 + j) as isize * self.c_cs) = s };
            }
        }
    }

    /// Columns `lo..hi` of `C`, every row.
    ///
    /// # Safety
    /// The product's contract.
    #[inline(always)]
    unsafe fn columns<F: Madd>(&self, lo: usize, hi: usize) {
        if self.rows_contiguous() {
            let mut j0 = lo;
            while j0 < hi {
                let cols = (hi - j0).min(ROW_TILE);
                let mut i0 = 0;
                while i0 < self.m {
                    let rows = (self.m - i0).min(ROW_TILE_ROWS);
                    macro_rules! tile {
                        ($($r:literal)*) => {
                            match (rows, cols == ROW_TILE) {
                                $(($r, true) => unsafe { self.row_tile::<F, $r, true>(i0, j0, cols) },
                                  ($r, false) => unsafe { self.row_tile::<F, $r, false>(i0, j0, cols) },)*
                                _ => unreachable!("at most {ROW_TILE_ROWS} rows"),
                            }
                        };
                    }
                    tile!(1 2 3 4 5 6);
                    i0 += rows;
                }
                j0 += cols;
            }
        } else {
            let mut j0 = lo;
            while j0 < hi {
                let cols = (hi - j0).min(COL_TILE);
                let mut i0 = 0;
                while i0 < self.m {
                    let rows = (self.m - i0).min(COL_TILE_ROWS);
                    macro_rules! tile {
                        ($(($r:literal, $n:literal))*) => {
                            match (rows, cols) {
                                $(($r, $n) => unsafe { self.col_tile::<F, $r, $n>(i0, j0) },)*
                                _ => unreachable!("at most {COL_TILE_ROWS} rows and {COL_TILE} columns"),
                            }
                        };
                    }
                    tile!((1, 1)(1, 2)(1, 3)(1, 4)(2, 1)(2, 2)(2, 3)(2, 4)(3, 1)(3, 2)(3, 3)(3, 4));
                    i0 += rows;
                }
                j0 += cols;
            }
        }
    }
}

type ColumnsFn<E> = unsafe fn(&Problem<E>, usize, usize);

unsafe fn columns_baseline<E: Elem>(p: &Problem<E>, lo: usize, hi: usize) {
    unsafe { p.columns::<Unfused>(lo, hi) }
}

/// The instance of a module's generic `columns` for element type `$e` as a `ColumnsFn<$e>`:
/// its tile traits are implemented for exactly f32, bf16 and f16, so dispatch is on the type.
#[cfg(target_arch = "x86_64")]
macro_rules! typed_columns {
    ($columns:ident, $e:ty) => {{
        use std::any::TypeId;
        let id = TypeId::of::<$e>();
        if id == TypeId::of::<f32>() {
            // SAFETY: $e is f32 (resp. Bf16, F16 below); the function pointer types are identical.
            Some(unsafe { std::mem::transmute::<ColumnsFn<f32>, ColumnsFn<$e>>($columns::<f32>) })
        } else if id == TypeId::of::<Bf16>() {
            Some(unsafe { std::mem::transmute::<ColumnsFn<Bf16>, ColumnsFn<$e>>($columns::<Bf16>) })
        } else if id == TypeId::of::<F16>() {
            Some(unsafe { std::mem::transmute::<ColumnsFn<F16>, ColumnsFn<$e>>($columns::<F16>) })
        } else {
            None
        }
    }};
}

/// The best version this CPU runs.
fn columns_fn<E: Elem>() -> ColumnsFn<E> {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86_512::columns_fn::<E>() {
        return f;
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::columns_fn::<E>() {
        return f;
    }
    columns_baseline::<E>
}

/// AVX-512 tiles for `B` with contiguous rows: 16 lanes per register and 32 registers, so
/// one tile keeps 8 rows of `A` against 32 columns (16 accumulators) and a product with up
/// to 8 rows (a decode step's, an LSTM step's) reads each slice of `B` once, where the AVX2
/// tile of 6 rows reads it twice. The columns past the last full tile take the same tiles
/// with masked loads and stores: in the portable code, a product as small as an attention
/// head's 16x16 ran at scalar speed. `B` with contiguous columns takes the AVX2 tiles.
#[cfg(target_arch = "x86_64")]
mod x86_512 {
    use std::arch::x86_64::*;

    use super::x86::Lanes;
    use super::{Bf16, ColumnsFn, Elem, Problem, F16};

    /// Sixteen consecutive elements widened into one register.
    pub(super) trait Lanes16: Lanes {
        /// # Safety
        /// Sixteen elements from `p` are readable; AVX-512F is available.
        unsafe fn load16(p: *const Self) -> __m512;

        /// The lanes `mask` selects from `p` (zero in the others), reading only those.
        ///
        /// # Safety
        /// The selected elements are readable; AVX-512F, BW and VL are available.
        unsafe fn load16_masked(p: *const Self, mask: __mmask16) -> __m512;
    }

    impl Lanes16 for f32 {
        #[inline(always)]
        unsafe fn load16(p: *const f32) -> __m512 {
            unsafe { _mm512_loadu_ps(p) }
        }

        #[inline(always)]
        unsafe fn load16_masked(p: *const f32, mask: __mmask16) -> __m512 {
            unsafe { _mm512_maskz_loadu_ps(mask, p) }
        }
    }

    /// bf16 bits in the upper halves of f32 lanes: the f32 of the same value.
    #[inline(always)]
    unsafe fn widen_bf16(h: __m256i) -> __m512 {
        unsafe { _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h))) }
    }

    impl Lanes16 for Bf16 {
        #[inline(always)]
        unsafe fn load16(p: *const Bf16) -> __m512 {
            unsafe { widen_bf16(_mm256_loadu_si256(p as *const __m256i)) }
        }

        #[inline(always)]
        unsafe fn load16_masked(p: *const Bf16, mask: __mmask16) -> __m512 {
            unsafe { widen_bf16(_mm256_maskz_loadu_epi16(mask, p as *const i16)) }
        }
    }

    impl Lanes16 for F16 {
        #[inline(always)]
        unsafe fn load16(p: *const F16) -> __m512 {
            unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
        }

        #[inline(always)]
        unsafe fn load16_masked(p: *const F16, mask: __mmask16) -> __m512 {
            unsafe { _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p as *const i16)) }
        }
    }

    pub(super) fn columns_fn<E: Elem>() -> Option<ColumnsFn<E>> {
        // The AVX2 tiles this version falls back on need their own features too.
        let features = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        if !features {
            return None;
        }
        typed_columns!(columns, E)
    }

    /// Columns `lo..hi` (the AVX2 version's structure: `k` in blocks of rows swept across the
    /// columns), the last partial tile masked.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn columns<E: Lanes16>(p: &Problem<E>, lo: usize, hi: usize) {
        if !p.rows_contiguous() {
            return unsafe { super::x86::columns::<E>(p, lo, hi) };
        }
        const K_BLOCK: usize = 256;
        const ROWS: usize = 8;
        let tile = if p.m == 1 { 64 } else { 32 };
        let full_end = lo + (hi - lo) / tile * tile;
        let k_blocks = p.k.div_ceil(K_BLOCK).max(1);
        for kb in 0..k_blocks {
            let (q0, q1) = (kb * K_BLOCK, ((kb + 1) * K_BLOCK).min(p.k));
            let q1 = q1.max(q0);
            let first = kb == 0;
            let mut j0 = lo;
            while j0 < hi {
                // Past the full tiles, up to 32 columns at a time in one or two masked vectors.
                let cols = if j0 < full_end { tile } else { (hi - j0).min(32) };
                let mut i0 = 0;
                while i0 < p.m {
                    let r = (p.m - i0).min(ROWS);
                    macro_rules! rows {
                        ($v:literal, $masked:literal; $($r:literal)*) => {
                            match r {
                                $($r => unsafe { row_tile::<E, $r, $v, $masked>(p, i0, j0, cols, q0, q1, first) },)*
                                _ => unreachable!(),
                            }
                        };
                    }
                    match (j0 < full_end, tile, cols > 16) {
                        (true, 64, _) => unsafe { row_tile::<E, 1, 4, false>(p, i0, j0, cols, q0, q1, first) },
                        (true, _, _) => rows!(2, false; 1 2 3 4 5 6 7 8),
                        (false, _, true) => rows!(2, true; 1 2 3 4 5 6 7 8),
                        (false, _, false) => rows!(1, true; 1 2 3 4 5 6 7 8),
                    }
                    i0 += r;
                }
                j0 += cols;
            }
        }
    }

    /// `C[i0..i0+R, j0..j0+cols] (+)= A[i0..i0+R, q0..q1] · B[q0..q1, j0..j0+cols]`, as the
    /// AVX2 `row_tile` with 16 lanes: `cols` is `16V` unless `MASKED`, where it may be fewer
    /// (more than `16(V-1)`) and only those columns are read and written.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn row_tile<E: Lanes16, const R: usize, const V: usize, const MASKED: bool>(
        p: &Problem<E>,
        i0: usize,
        j0: usize,
        cols: usize,
        q0: usize,
        q1: usize,
        first: bool,
    ) {
        unsafe {
            // Lanes of vector `v` inside the tile.
            let lanes = |v: usize| cols.saturating_sub(16 * v).min(16);
            let masks: [__mmask16; V] = std::array::from_fn(|v| ((1u32 << lanes(v)) - 1) as __mmask16);
            let c_at = |i: usize| p.c.offset((i0 + i) as isize * p.c_rs + j0 as isize * p.c_cs);
            let mut acc = [[_mm512_setzero_ps(); V]; R];
            if !first {
                for (i, acc) in acc.iter_mut().enumerate() {
                    let c = c_at(i);
                    for (v, a) in acc.iter_mut().enumerate() {
                        *a = if p.c_cs == 1 && MASKED {
                            _mm512_maskz_loadu_ps(masks[v], c.add(16 * v))
                        } else if p.c_cs == 1 {
                            _mm512_loadu_ps(c.add(16 * v))
                        } else {
                            let mut x = [0f32; 16];
                            for (j, x) in x.iter_mut().enumerate().take(lanes(v)) {
                                *x = *c.offset((16 * v + j) as isize * p.c_cs);
                            }
                            _mm512_loadu_ps(x.as_ptr())
                        };
                    }
                }
            }
            let a = p.a.add(i0 * p.k);
            let row_bytes = 16 * V * std::mem::size_of::<E>();
            let mut row = p.b.offset(q0 as isize * p.b_rs + j0 as isize);
            for q in q0..q1 {
                if !MASKED {
                    let ahead = row.offset(super::x86::PREFETCH_ROWS * p.b_rs) as *const i8;
                    for line in (0..row_bytes).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.add(line));
                    }
                }
                let mut b = [_mm512_setzero_ps(); V];
                for (v, x) in b.iter_mut().enumerate() {
                    *x = if MASKED { E::load16_masked(row.add(16 * v), masks[v]) } else { E::load16(row.add(16 * v)) };
                }
                for (i, acc) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*a.add(i * p.k + q));
                    for (s, &x) in acc.iter_mut().zip(&b) {
                        *s = _mm512_fmadd_ps(av, x, *s);
                    }
                }
                row = row.offset(p.b_rs);
            }
            for (i, acc) in acc.iter().enumerate() {
                let c = c_at(i);
                for (v, a) in acc.iter().enumerate() {
                    if p.c_cs == 1 && MASKED {
                        _mm512_mask_storeu_ps(c.add(16 * v), masks[v], *a);
                    } else if p.c_cs == 1 {
                        _mm512_storeu_ps(c.add(16 * v), *a);
                    } else {
                        let mut x = [0f32; 16];
                        _mm512_storeu_ps(x.as_mut_ptr(), *a);
                        for (j, y) in x.iter().enumerate().take(lanes(v)) {
                            *c.offset((16 * v + j) as isize * p.c_cs) = *y;
                        }
                    }
                }
            }
        }
    }
}

/// AVX2 tiles with FMA (and F16C for f16), written with intrinsics: the array code above
/// is not reliably kept in registers by the compiler once it is inlined into many tiles.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Bf16, ColumnsFn, Elem, Fused, Problem, COL_TILE, COL_TILE_ROWS, F16, ROW_TILE, ROW_TILE_ROWS};

    /// Eight consecutive elements widened into one register.
    pub(super) trait Lanes: Elem {
        /// # Safety
        /// Eight elements from `p` are readable; AVX2 and F16C are available.
        unsafe fn load8(p: *const Self) -> __m256;
    }

    impl Lanes for f32 {
        #[inline(always)]
        unsafe fn load8(p: *const f32) -> __m256 {
            unsafe { _mm256_loadu_ps(p) }
        }
    }

    impl Lanes for Bf16 {
        #[inline(always)]
        unsafe fn load8(p: *const Bf16) -> __m256 {
            unsafe {
                let h = _mm_loadu_si128(p as *const __m128i);
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
            }
        }
    }

    impl Lanes for F16 {
        #[inline(always)]
        unsafe fn load8(p: *const F16) -> __m256 {
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
        }
    }

    pub(super) fn columns_fn<E: Elem>() -> Option<ColumnsFn<E>> {
        // `columns` is compiled for all three (every AVX2 CPU has F16C); it must not run where
        // one is missing.
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")) {
            return None;
        }
        typed_columns!(columns, E)
    }

    /// Columns `lo..hi`: full tiles in AVX2, the partial tiles at the right edge in the
    /// portable code (compiled here with FMA too). With `B`'s rows contiguous, `k` runs in
    /// blocks of `K_BLOCK` rows, each swept across all the columns: a tile walking down all of
    /// `k` would touch a new page of `B` on every row. A large `B` with three or more rows of
    /// `A` streams instead ([`stream`]).
    ///
    /// With an f32 `B` these tiles do not prefetch: on Zen 3, asking for the row 16 ahead (as
    /// the AVX-512 tiles do) made an 8x256x1024 product 15-20% slower. AMD's prefetch hints all
    /// fill L1, and rows 4 KiB apart share one L1 set, so the prefetched lines evict the ones
    /// in use. A half-precision `B` (half the bytes per row of the tile) keeps both the
    /// prefetch and the k-blocked tiles: streamed, and without the prefetch, a 1B-parameter
    /// bf16 model's forward over 11 tokens ran 569-620 ms where these tiles took 478-495.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn columns<E: Lanes>(p: &Problem<E>, lo: usize, hi: usize) {
        let f32_b = std::mem::size_of::<E>() == 4;
        if f32_b && p.rows_contiguous() && p.m > 2 && p.k * p.n * 4 >= STREAM_MIN_BYTES {
            return unsafe { stream(p, lo, hi) };
        }
        const K_BLOCK: usize = 256;
        // With one or two rows a tile of 16 columns does too little per row of B to keep
        // enough of it in flight: such products take 64 or 32 columns at a time.
        let (tile, rows) = match (p.rows_contiguous(), p.m) {
            (true, 1) => (64, 1),
            (true, 2) => (32, 2),
            (true, _) => (ROW_TILE, ROW_TILE_ROWS),
            (false, _) => (COL_TILE, COL_TILE_ROWS),
        };
        let full_end = lo + (hi - lo) / tile * tile;
        // With `B`'s rows contiguous, the columns past the last full tile take tiles of one
        // vector (8 columns) before the portable code takes the rest: a batch of 8x16x8
        // products, each narrower than a tile, ran in the portable code at 640 ns a product.
        let eight_end = if p.rows_contiguous() { full_end + (hi - full_end) / 8 * 8 } else { full_end };
        let k_blocks = if p.rows_contiguous() { p.k.div_ceil(K_BLOCK).max(1) } else { 1 };
        for kb in 0..k_blocks {
            let (q0, q1) = (kb * K_BLOCK, ((kb + 1) * K_BLOCK).min(p.k));
            let q1 = q1.max(q0);
            let first = kb == 0;
            let mut j0 = lo;
            while j0 < full_end {
                let mut i0 = 0;
                while i0 < p.m {
                    let r = (p.m - i0).min(rows);
                    macro_rules! cols {
                        ($($r:literal)*) => {
                            match r {
                                $($r => unsafe { col_tile::<E, $r>(p, i0, j0) },)*
                                _ => unreachable!(),
                            }
                        };
                    }
                    match (p.rows_contiguous(), tile) {
                        (true, 64) => unsafe { row_tile::<E, 1, 8>(p, i0, j0, q0, q1, first) },
                        (true, 32) => unsafe { row_tile::<E, 2, 4>(p, i0, j0, q0, q1, first) },
                        (true, _) => unsafe { row_tile_of::<E, 2>(r, p, i0, j0, q0, q1, first) },
                        (false, _) => cols!(1 2 3),
                    }
                    i0 += r;
                }
                j0 += tile;
            }
            while j0 < eight_end {
                let mut i0 = 0;
                while i0 < p.m {
                    let r = (p.m - i0).min(ROW_TILE_ROWS);
                    unsafe { row_tile_of::<E, 1>(r, p, i0, j0, q0, q1, first) };
                    i0 += r;
                }
                j0 += 8;
            }
        }
        if eight_end < hi {
            unsafe { p.columns::<Fused>(eight_end, hi) };
        }
    }

    /// How many rows of `B` ahead a row tile prefetches (the AVX-512 tiles, and these for a
    /// half-precision `B`).
    pub(super) const PREFETCH_ROWS: isize = 16;

    /// The smallest f32 `B` (in bytes) that [`stream`] reads: below it `B` stays in a core's L2
    /// between calls, and the tiles that walk down 256 rows at a time do as well.
    const STREAM_MIN_BYTES: usize = 512 << 10;

    /// Rows of `B` one streaming pass reads before moving to the next columns.
    const STREAM_ROWS: usize = 8;

    /// Accumulators one streaming task keeps (f32): 16 KiB, half of L1.
    const STREAM_ACC: usize = 4096;

    /// Columns `lo..hi` for an f32 `B` too large for L2, with contiguous rows, read as a stream.
    ///
    /// A tile walking down a 16-column strip of `B` touches one line per row, each on its own
    /// page and all in one L1 set; from DRAM such a walk read 3-6 GB/s on Zen 3, where 8 rows
    /// at a time swept across every column read 19-26 GB/s (sequential reading: 29). So this
    /// pass takes `STREAM_ROWS` rows of `B` across all the columns of a chunk, tile by tile,
    /// and keeps each tile's accumulators between passes in a buffer in L1 (`STREAM_ACC`
    /// floats, which sets the chunk's width). `A`'s rows are split into tiles of at most 6
    /// as evenly as possible: 8 rows as 4 + 4 keep 8 accumulators busy in each tile, where
    /// 6 + 2 leaves the second tile waiting on FMA latency.
    ///
    /// Measured on Zen 3 (one thread, 7 alternating rounds): 8x2048x2048 f32 7.5 -> 3.2 ms,
    /// 8x256x1024 (1 MiB, from L3) 167 -> 116 us; with one or two rows of `A` it was no
    /// faster than the wide tiles, which those keep.
    ///
    /// A task's chunk is narrow (a few hundred columns: each row's run is a handful of lines),
    /// too short for the hardware prefetchers to follow, so the walk asks for the lines
    /// [`PREFETCH_TILES`] tiles ahead itself, running on into the next pass's rows at the
    /// chunk's end. Lines of the next pass are never asked for before the current pass has
    /// finished with the L1 set they fall in (rows 4 KiB apart share one). On Zen 3 (two
    /// threads, 5 alternating rounds): 8x2048x2048 f32 from DRAM 2.70 -> 1.77 ms, 16 rows
    /// 4.95 -> 3.69 ms; an LSTM scan whose 1 MiB and 512 KiB weights come from L3 unchanged.
    ///
    /// # Safety
    /// The product's contract, with `B`'s rows contiguous and `2 < p.m <= MAX_ROWS`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn stream<E: Lanes>(p: &Problem<E>, lo: usize, hi: usize) {
        const TILE: usize = ROW_TILE;
        let full_end = lo + (hi - lo) / TILE * TILE;
        let tiles = p.m.div_ceil(ROW_TILE_ROWS);
        let rows_of = |t: usize| p.m / tiles + usize::from(t < p.m % tiles);
        let chunk = (STREAM_ACC / p.m / TILE * TILE).max(TILE);
        let mut acc = [0f32; STREAM_ACC];
        let mut c0 = lo;
        while c0 < full_end {
            let c1 = (c0 + chunk).min(full_end);
            let mut q0 = 0;
            while q0 < p.k {
                let q1 = (q0 + STREAM_ROWS).min(p.k);
                let (first, last) = (q0 == 0, q1 == p.k);
                let mut slot = acc.as_mut_ptr();
                let mut j0 = c0;
                while j0 < c1 {
                    let mut i0 = 0;
                    for t in 0..tiles {
                        let r = rows_of(t);
                        let pass = Pass { i0, j0, q0, q1, first, last, acc: slot };
                        macro_rules! rows {
                            ($($r:literal)*) => {
                                match r {
                                    $($r => unsafe { stream_tile::<E, $r>(p, pass) },)*
                                    _ => unreachable!("at most {ROW_TILE_ROWS} rows"),
                                }
                            };
                        }
                        rows!(1 2 3 4 5 6);
                        // SAFETY: the chunk's tiles take m * (c1 - c0) <= STREAM_ACC floats.
                        slot = unsafe { slot.add(r * TILE) };
                        i0 += r;
                    }
                    // The tile `PREFETCH_TILES` ahead in this walk, in this pass or (past the
                    // chunk's end) in the next one.
                    let ahead = j0 + PREFETCH_TILES * TILE;
                    if ahead < c1 {
                        unsafe { prefetch_rows(p, q0, q1, ahead) };
                    } else if q1 < p.k && c0 + (ahead - c1) < c1 {
                        unsafe { prefetch_rows(p, q1, (q1 + STREAM_ROWS).min(p.k), c0 + (ahead - c1)) };
                    }
                    j0 += TILE;
                }
                q0 = q1;
            }
            c0 = c1;
        }
        if full_end < hi {
            unsafe { p.columns::<Fused>(full_end, hi) };
        }
    }

    /// How many tiles ahead [`stream`] asks for `B`'s lines.
    const PREFETCH_TILES: usize = 4;

    /// Asks for rows `q0..q1` of `B` at the tile from column `j`: the line each row's tile
    /// starts in (a tile straddling two lines ends in the line the next tile starts in).
    #[inline(always)]
    unsafe fn prefetch_rows<E: Lanes>(p: &Problem<E>, q0: usize, q1: usize, j: usize) {
        for r in q0..q1 {
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.b.offset(r as isize * p.b_rs + j as isize) as *const i8) };
        }
    }

    /// One tile's share of a streaming pass: rows `i0..` of `A` against columns `j0..j0+16`
    /// of rows `q0..q1` of `B`, its accumulators kept at `acc` between passes.
    #[derive(Clone, Copy)]
    struct Pass {
        i0: usize,
        j0: usize,
        q0: usize,
        q1: usize,
        /// The first pass starts from zero, not from `acc`.
        first: bool,
        /// The last pass writes `C`, not `acc`.
        last: bool,
        acc: *mut f32,
    }

    /// `R` rows by 16 columns for [`stream`]: the `row_tile` of 2 vectors, with its
    /// accumulators read from and written to the pass's slot instead of `C`.
    #[inline(always)]
    unsafe fn stream_tile<E: Lanes, const R: usize>(p: &Problem<E>, pass: Pass) {
        const V: usize = ROW_TILE / 8;
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); V]; R];
            if !pass.first {
                for (i, acc) in acc.iter_mut().enumerate() {
                    for (v, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_loadu_ps(pass.acc.add((i * V + v) * 8));
                    }
                }
            }
            sweep(p, pass.i0, pass.j0, pass.q0, pass.q1, &mut acc);
            for (i, acc) in acc.iter().enumerate() {
                if pass.last {
                    store_row(p, pass.i0 + i, pass.j0, acc);
                } else {
                    for (v, a) in acc.iter().enumerate() {
                        _mm256_storeu_ps(pass.acc.add((i * V + v) * 8), *a);
                    }
                }
            }
        }
    }

    /// Writes `C[i, j0..j0+8V]` from `V` vectors.
    #[inline(always)]
    unsafe fn store_row<E, const V: usize>(p: &Problem<E>, i: usize, j0: usize, acc: &[__m256; V]) {
        unsafe {
            let c = p.c.offset(i as isize * p.c_rs + j0 as isize * p.c_cs);
            for (v, a) in acc.iter().enumerate() {
                if p.c_cs == 1 {
                    _mm256_storeu_ps(c.add(8 * v), *a);
                } else {
                    let mut x = [0f32; 8];
                    _mm256_storeu_ps(x.as_mut_ptr(), *a);
                    for (j, y) in x.iter().enumerate() {
                        *c.offset((8 * v + j) as isize * p.c_cs) = *y;
                    }
                }
            }
        }
    }

    /// [`row_tile`] for the `r` rows (1 to [`ROW_TILE_ROWS`]) from `i0`, `r` made the tile's
    /// constant row count.
    #[inline(always)]
    unsafe fn row_tile_of<E: Lanes, const V: usize>(
        r: usize,
        p: &Problem<E>,
        i0: usize,
        j0: usize,
        q0: usize,
        q1: usize,
        first: bool,
    ) {
        unsafe {
            match r {
                1 => row_tile::<E, 1, V>(p, i0, j0, q0, q1, first),
                2 => row_tile::<E, 2, V>(p, i0, j0, q0, q1, first),
                3 => row_tile::<E, 3, V>(p, i0, j0, q0, q1, first),
                4 => row_tile::<E, 4, V>(p, i0, j0, q0, q1, first),
                5 => row_tile::<E, 5, V>(p, i0, j0, q0, q1, first),
                6 => row_tile::<E, 6, V>(p, i0, j0, q0, q1, first),
                _ => unreachable!("at most {ROW_TILE_ROWS} rows"),
            }
        }
    }

    /// `C[i0..i0+R, j0..j0+8V] (+)= A[i0..i0+R, q0..q1] · B[q0..q1, j0..j0+8V]` with `B`'s rows
    /// contiguous, starting from zero when `first` (else from what `C` holds).
    #[inline(always)]
    unsafe fn row_tile<E: Lanes, const R: usize, const V: usize>(
        p: &Problem<E>,
        i0: usize,
        j0: usize,
        q0: usize,
        q1: usize,
        first: bool,
    ) {
        unsafe {
            let c_at = |i: usize| p.c.offset((i0 + i) as isize * p.c_rs + j0 as isize * p.c_cs);
            let mut acc = [[_mm256_setzero_ps(); V]; R];
            if !first {
                for (i, acc) in acc.iter_mut().enumerate() {
                    let c = c_at(i);
                    for (v, a) in acc.iter_mut().enumerate() {
                        *a = if p.c_cs == 1 {
                            _mm256_loadu_ps(c.add(8 * v))
                        } else {
                            let x: [f32; 8] = std::array::from_fn(|j| *c.offset((8 * v + j) as isize * p.c_cs));
                            _mm256_loadu_ps(x.as_ptr())
                        };
                    }
                }
            }
            sweep(p, i0, j0, q0, q1, &mut acc);
            for (i, acc) in acc.iter().enumerate() {
                store_row(p, i0 + i, j0, acc);
            }
        }
    }

    /// `acc += A[i0..i0+R, q0..q1] · B[q0..q1, j0..j0+8V]` with `B`'s rows contiguous: per row
    /// of `B`, `V` vectors of it and `R` broadcasts of `A` feed `R·V` accumulators.
    #[inline(always)]
    unsafe fn sweep<E: Lanes, const R: usize, const V: usize>(
        p: &Problem<E>,
        i0: usize,
        j0: usize,
        q0: usize,
        q1: usize,
        acc: &mut [[__m256; V]; R],
    ) {
        unsafe {
            let a = p.a.add(i0 * p.k);
            let mut row = p.b.offset(q0 as isize * p.b_rs + j0 as isize);
            for q in q0..q1 {
                if std::mem::size_of::<E>() < 4 {
                    // Rows of B lie a page or more apart, which hardware prefetchers do not
                    // cross: ask for the row a few iterations ahead.
                    let ahead = row.offset(PREFETCH_ROWS * p.b_rs) as *const i8;
                    for line in (0..8 * V * std::mem::size_of::<E>()).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.add(line));
                    }
                }
                let b: [__m256; V] = std::array::from_fn(|v| E::load8(row.add(8 * v)));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let av = _mm256_broadcast_ss(&*a.add(i * p.k + q));
                    for (s, &x) in acc.iter_mut().zip(&b) {
                        *s = _mm256_fmadd_ps(av, x, *s);
                    }
                }
                row = row.offset(p.b_rs);
            }
        }
    }

    /// `C[i0..i0+R, j0..j0+4]` with `B`'s columns contiguous: lanes run along `k`, each of
    /// the `4R` accumulators summed across its lanes at the end.
    #[inline(always)]
    unsafe fn col_tile<E: Lanes, const R: usize>(p: &Problem<E>, i0: usize, j0: usize) {
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); COL_TILE]; R];
            let a = p.a.add(i0 * p.k);
            let col = |j: usize| p.b.offset((j0 + j) as isize * p.b_cs);
            let cols = [col(0), col(1), col(2), col(3)];
            let body = p.k / 8 * 8;
            let mut q = 0;
            while q < body {
                let mut av = [_mm256_setzero_ps(); R];
                for (i, v) in av.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(a.add(i * p.k + q));
                }
                for (j, c) in cols.iter().enumerate() {
                    let bv = E::load8(c.add(q));
                    for i in 0..R {
                        acc[i][j] = _mm256_fmadd_ps(av[i], bv, acc[i][j]);
                    }
                }
                q += 8;
            }
            for (i, acc) in acc.iter().enumerate() {
                for (j, &v) in acc.iter().enumerate() {
                    let mut s = hsum(v);
                    for q in body..p.k {
                        s = (*a.add(i * p.k + q)).mul_add((*cols[j].add(q)).widen(), s);
                    }
                    *p.c.offset((i0 + i) as isize * p.c_rs + (j0 + j) as isize * p.c_cs) = s;
                }
            }
        }
    }

    /// The lanes' sum, as the portable tile pairs them: ((0+4)+(2+6))+((1+5)+(3+7)).
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
            _mm_cvtss_f32(s)
        }
    }
}

/// Runs the product, its columns split into tasks on the published pool (when called from
/// the thread that runs an executable's launches and the product is large enough).
///
/// # Safety
/// Every element the sizes and strides address must be valid: `A` and `B` readable, `C`
/// writable and overlapping neither; `p.m <= MAX_ROWS`; `B` has a unit stride along one
/// of its dimensions as `Problem` says.
pub(crate) unsafe fn run<E: Elem>(p: &Problem<E>) {
    debug_assert!(p.m <= MAX_ROWS && (p.b_cs == 1 || p.b_rs == 1));
    if p.m == 0 || p.n == 0 {
        return;
    }
    let f = columns_fn::<E>();
    let unit = if p.rows_contiguous() { 64 } else { COL_TILE };
    // SAFETY: the caller's contract; tasks write disjoint columns.
    in_column_tasks(p.n, unit, p.n * p.k * std::mem::size_of::<E>(), |lo, hi| unsafe { f(p, lo, hi) });
}

/// Runs `f(lo, hi)` over columns `0..n` split into tasks at multiples of `unit` (so only the
/// last holds a partial tile) on the published pool, a few tasks per thread (threads that the
/// machine slows unequally even out), none reading less than `MIN_TASK_BYTES` of the `bytes`
/// the product reads.
pub(crate) fn in_column_tasks(n: usize, unit: usize, bytes: usize, f: impl Fn(usize, usize) + Sync) {
    let units = n.div_ceil(unit);
    let pool = published_pool();
    // SAFETY: a published pool outlives the run that published it.
    let pool = (!pool.is_null()).then(|| unsafe { &*pool });
    let threads = pool.map_or(1, |p| p.threads());
    let tasks = (threads * 4).min(units).min(bytes / MIN_TASK_BYTES).max(1);
    let bounds = |t: usize| ((units * t / tasks * unit).min(n), (units * (t + 1) / tasks * unit).min(n));
    let next = AtomicUsize::new(0);
    let work = || loop {
        let t = next.fetch_add(1, Ordering::Relaxed);
        if t >= tasks {
            break;
        }
        let (lo, hi) = bounds(t);
        f(lo, hi);
    };
    match pool {
        Some(pool) if tasks > 1 && threads > 1 => pool.run_chunks(threads.min(tasks), |_| work()),
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_testkit::Rng;

    /// A deterministic pseudo-random sequence in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| rng.unit_f32() * 2.0 - 1.0).collect()
    }

    /// Each product of the given shapes in both layouts, against f64 sums, with `C` strided so
    /// that writes outside the product would show; split into tasks by `run`, and whole by
    /// this CPU's best version and by the portable one.
    fn check_shapes(ms: &[usize], ns: &[usize], ks: &[usize]) {
        let versions: [(&str, ColumnsFn<f32>); 2] =
            [("best", columns_fn::<f32>()), ("baseline", columns_baseline::<f32>)];
        for (&m, &n, &k) in ms.iter().flat_map(|m| ns.iter().flat_map(move |n| ks.iter().map(move |k| (m, n, k)))) {
            for rows_contiguous in [true, false] {
                let a = values(m * k, 1);
                let b = values(k * n, 2);
                let (b_rs, b_cs) = if rows_contiguous { (n as isize, 1) } else { (1, k as isize) };
                let want: Vec<f64> = (0..m * n)
                    .map(|e| {
                        let (i, j) = (e / n, e % n);
                        (0..k)
                            .map(|q| {
                                let bq = b[(q as isize * b_rs + j as isize * b_cs) as usize];
                                f64::from(a[i * k + q]) * f64::from(bq)
                            })
                            .sum()
                    })
                    .collect();
                let mut c = vec![f32::NAN; m * (n + 1)];
                let c_ptr = c.as_mut_ptr();
                let p = Problem {
                    m,
                    n,
                    k,
                    a: a.as_ptr(),
                    b: b.as_ptr(),
                    b_rs,
                    b_cs,
                    c: c_ptr,
                    c_rs: (n + 1) as isize,
                    c_cs: 1,
                };
                for (version, f) in [("run", None)].into_iter().chain(versions.map(|(v, f)| (v, Some(f)))) {
                    c.fill(f32::NAN);
                    match f {
                        None => unsafe { run(&p) },
                        Some(f) => unsafe { f(&p, 0, n) },
                    }
                    let at = |i: usize, j: usize| c[i * (n + 1) + j];
                    for (e, &w) in want.iter().enumerate() {
                        let (i, j) = (e / n, e % n);
                        assert!(
                            (f64::from(at(i, j)) - w).abs() <= 1e-5 * (k as f64),
                            "{version}: m={m} n={n} k={k} rows_contiguous={rows_contiguous} ({i},{j}): {} vs {w}",
                            at(i, j)
                        );
                    }
                    for i in 0..m {
                        assert!(at(i, n).is_nan(), "{version}: m={m} n={n} k={k}: wrote past row {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_tile_shape_matches_the_reference() {
        check_shapes(&[1, 2, 3, 5, 6, 7, 8, 9, 11, 16], &[1, 3, 4, 15, 16, 17, 37, 70], &[1, 7, 8, 9, 33]);
    }

    /// The wide tiles of one and two rows (64 and 32 columns) with partial tiles after them,
    /// and contractions longer than a k-block (256), so tiles resume from what `C` holds.
    #[test]
    fn wide_tiles_and_k_blocks_match_the_reference() {
        check_shapes(&[1, 2, 3, 7], &[64, 100, 130], &[256, 300, 600]);
    }

    /// Products whose `B` is large enough to stream (at least 512 KiB): chunk boundaries
    /// (3 rows take 1360 columns per chunk), partial tiles, a last pass of fewer rows than
    /// `STREAM_ROWS`, and row splits 3, 4 + 3, 4 + 4 and 6 + 5 + 5.
    #[test]
    fn streamed_products_match_the_reference() {
        check_shapes(&[3, 7, 8, 16], &[1000, 1500], &[131, 300]);
    }

    /// A product with a bf16 `B` as large as the streamed f32 ones (which bf16 does not
    /// stream: the prefetching tiles), against f64 sums of the widened values.
    #[test]
    fn large_bf16_products_match_the_reference() {
        let (m, n, k) = (8, 1030, 300);
        let a = values(m * k, 3);
        let b: Vec<Bf16> = values(k * n, 4).iter().map(|x| Bf16((x.to_bits() >> 16) as u16)).collect();
        let mut c = vec![f32::NAN; m * n];
        let p = Problem {
            m,
            n,
            k,
            a: a.as_ptr(),
            b: b.as_ptr(),
            b_rs: n as isize,
            b_cs: 1,
            c: c.as_mut_ptr(),
            c_rs: n as isize,
            c_cs: 1,
        };
        unsafe { columns_fn::<Bf16>()(&p, 0, n) };
        for (e, &got) in c.iter().enumerate() {
            let (i, j) = (e / n, e % n);
            let want: f64 = (0..k).map(|q| f64::from(a[i * k + q]) * f64::from(b[q * n + j].widen())).sum();
            assert!((f64::from(got) - want).abs() <= 1e-5 * k as f64, "({i},{j}): {got} vs {want}");
        }
    }

    #[test]
    fn halves_widen_exactly() {
        for bits in 0..=u16::MAX {
            let want = half::f16::from_bits(bits).to_f32();
            let got = F16(bits).widen();
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "f16 {bits:#06x}: {got} vs {want}"
            );
            let want = half::bf16::from_bits(bits).to_f32();
            let got = Bf16(bits).widen();
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "bf16 {bits:#06x}: {got} vs {want}"
            );
        }
    }
}
