//! `tessera_rt_gemm_int`: integer products of 8- and 16-bit operands (a quantized model's
//! `s8 x s8 -> s32` dot) on the float GEMM, exactly.
//!
//! HLO multiplies and adds an integer dot in its result type, wrapping; since converting the
//! operands to that type and wrapping are both taken modulo `2^bits`, the result is the
//! exact sum of products reduced modulo `2^bits`, whatever the types. A float GEMM computes
//! that sum exactly while every partial sum is an integer the float holds: at most
//! `2^24` for f32, `2^53` for f64, which a block of the contraction of at most
//! `2^24 / (max|a| * max|b|)` terms (1,024 for `s8 x s8`, 258 for `u8 x u8`) respects, in
//! any order of additions. So the contraction runs in such blocks, on f32 where a block
//! holds at least [`MIN_F32_BLOCK`] terms (8-bit operands) and on f64 otherwise (16-bit
//! ones), each block's exact sums added into 64-bit integers when there are several; the
//! result keeps their low bits. As loops, an `s8[512,1024] x s8[1024,1024]` product took
//! 440 ms, a scalar multiply-add per term.

use crate::gemm::{gemm_impl, mixed_impl};
use crate::int8_vnni;
use crate::skinny_gemm::Elem;

/// Element types of [`tessera_rt_gemm_int`]'s `a_type`, `b_type` and `c_type` codes; the
/// operands take the 8- and 16-bit ones.
pub const GEMM_S8: i64 = 1;
pub const GEMM_U8: i64 = 2;
pub const GEMM_S16: i64 = 3;
pub const GEMM_U16: i64 = 4;
pub const GEMM_S32: i64 = 5;
pub const GEMM_U32: i64 = 6;
pub const GEMM_S64: i64 = 7;
pub const GEMM_U64: i64 = 8;

/// Below this many terms a block exact in f32 would be, the blocks run on f64.
const MIN_F32_BLOCK: usize = 64;

/// An operand element type.
trait IntElem: Elem {
    /// The largest magnitude a value takes.
    const MAX_ABS: u64;
    /// Whether the type is signed, and its width in bytes.
    const SIGNED: bool;
    const BYTES: usize;
    fn value(self) -> i64;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn widen(self) -> f32 {
                // Exact: every 8- or 16-bit integer is an f32.
                self as f32
            }
        }
        impl IntElem for $t {
            const MAX_ABS: u64 = if <$t>::MIN == 0 { <$t>::MAX as u64 } else { (<$t>::MAX as u64) + 1 };
            const SIGNED: bool = <$t>::MIN != 0;
            const BYTES: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn value(self) -> i64 {
                i64::from(self)
            }
        }
    )*};
}
int_elem!(i8, u8, i16, u16);

/// Runs `$body` with `$E` the operand type that code `$code` names (nothing for others).
macro_rules! with_int {
    ($code:expr, $E:ident => $body:expr) => {
        match $code {
            GEMM_S8 => {
                type $E = i8;
                $body
            }
            GEMM_U8 => {
                type $E = u8;
                $body
            }
            GEMM_S16 => {
                type $E = i16;
                $body
            }
            GEMM_U16 => {
                type $E = u16;
                $body
            }
            _ => {}
        }
    };
}

/// Bytes of an element of result type `code` (`None` for codes that name none).
fn result_width(code: i64) -> Option<usize> {
    Some(match code {
        GEMM_S8 | GEMM_U8 => 1,
        GEMM_S16 | GEMM_U16 => 2,
        GEMM_S32 | GEMM_U32 => 4,
        GEMM_S64 | GEMM_U64 => 8,
        _ => return None,
    })
}

/// Matrix `X` (`rows×cols`, element `(i, j)` at `x + i*rs + j*cs`) as a row-major f64 copy.
///
/// # Safety
/// Every element the sizes and strides address is readable.
unsafe fn widened_f64<E: IntElem>(x: *const E, rows: usize, cols: usize, rs: isize, cs: isize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        let row = unsafe { x.offset(i as isize * rs) };
        out.extend((0..cols).map(|j| unsafe { *row.offset(j as isize * cs) }.value() as f64));
    }
    out
}

/// Shared body of [`tessera_rt_gemm_int`] for one pair of operand types.
///
/// # Safety
/// The contract of [`tessera_rt_gemm_int`], sizes checked non-negative and `width` the
/// result type's.
unsafe fn int_impl<A: IntElem, B: IntElem>(
    (m, n, k): (usize, usize, usize),
    (a, a_rs, a_cs): (*const A, isize, isize),
    (b, b_rs, b_cs): (*const B, isize, isize),
    (c, c_rs, c_cs, width): (*mut u8, isize, isize, usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    let bound = A::MAX_ABS * B::MAX_ABS;
    // 32-bit lanes hold the sum modulo 2^32: all a result of at most 32 bits keeps, and a
    // 64-bit result's exact value while no sum can leave the i32 range.
    let fits_i32 = (k as u128) * u128::from(bound) < 1 << 31;
    if A::BYTES == 1 && B::BYTES == 1 && (width <= 4 || fits_i32) && int8_vnni::available() {
        let bytes = |p: *const u8, rs: isize, cs: isize, signed: bool| int8_vnni::Bytes { ptr: p, rs, cs, signed };
        let dest = int8_vnni::Dest { ptr: c, rs: c_rs, cs: c_cs, width };
        unsafe {
            int8_vnni::gemm(
                m,
                n,
                k,
                bytes(a as *const u8, a_rs, a_cs, A::SIGNED),
                bytes(b as *const u8, b_rs, b_cs, B::SIGNED),
                dest,
            )
        };
        return;
    }
    let f32_block = ((1u64 << 24) / bound) as usize;
    let (on_f32, block) =
        if f32_block >= MIN_F32_BLOCK { (true, f32_block) } else { (false, ((1u64 << 53) / bound) as usize) };
    let blocks = k.div_ceil(block).max(1);
    // Each block's exact sums, row-major; added up in `acc` when there are several.
    let mut sums32 = if on_f32 { vec![0f32; m * n] } else { Vec::new() };
    let mut sums64 = if on_f32 { Vec::new() } else { vec![0f64; m * n] };
    let mut acc = if blocks > 1 { vec![0i64; m * n] } else { Vec::new() };
    for blk in 0..blocks {
        let k0 = blk * block;
        let kk = block.min(k - k0);
        let (ak, bk) = unsafe { (a.offset(k0 as isize * a_cs), b.offset(k0 as isize * b_rs)) };
        if kk == 0 {
            // An empty contraction: the sums stay zero.
        } else if on_f32 {
            let c32 = (sums32.as_mut_ptr(), n as isize, 1);
            unsafe { mixed_impl::<A, B>((m, n, kk), (ak, a_rs, a_cs), (bk, b_rs, b_cs), c32) };
        } else {
            let (aw, bw) = unsafe { (widened_f64(ak, m, kk, a_rs, a_cs), widened_f64(bk, kk, n, b_rs, b_cs)) };
            let (i, kk, n) = (m as i64, kk as i64, n as i64);
            unsafe {
                gemm_impl(i, n, kk, aw.as_ptr(), kk, 1, bw.as_ptr(), n, 1, sums64.as_mut_ptr(), n, 1, 0.0f64, 1.0f64)
            };
        }
        if blocks > 1 {
            for (s, x) in acc.iter_mut().enumerate() {
                let v = if on_f32 { sums32[s] as i64 } else { sums64[s] as i64 };
                *x = x.wrapping_add(v);
            }
        }
    }
    for i in 0..m {
        for j in 0..n {
            let s = i * n + j;
            let v = match (blocks > 1, on_f32) {
                (true, _) => acc[s],
                (false, true) => sums32[s] as i64,
                (false, false) => sums64[s] as i64,
            };
            let at = (i as isize * c_rs + j as isize * c_cs) * width as isize;
            // Little-endian low bytes: the sum modulo 2^(8 * width).
            unsafe { std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), c.offset(at), width) };
        }
    }
}

/// `C = A·B` for integers: `A` (`m×k`) and `B` (`k×n`) of 8- or 16-bit types, `C` (`m×n`) of
/// any of the integer types the codes name ([`GEMM_S8`] .. [`GEMM_U64`]); each element of
/// `C` is the exact sum of its products modulo `2^bits` (HLO's wrapping arithmetic in the
/// result type). Sizes and strides (in elements) as for [`crate::gemm::tessera_rt_gemm_f32`];
/// unknown type codes or negative sizes do nothing.
///
/// # Safety
/// Every element the sizes and strides address must be valid (readable for `A` and `B`,
/// writable for `C`), of the type its code names; `C` must not overlap `A` or `B`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tessera_rt_gemm_int(
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
    c: *mut u8,
    c_rs: i64,
    c_cs: i64,
    c_type: i64,
) {
    let (Ok(m), Ok(n), Ok(k)) = (usize::try_from(m), usize::try_from(n), usize::try_from(k)) else { return };
    let Some(width) = result_width(c_type) else { return };
    let s = |x: i64| x as isize;
    with_int!(a_type, EA => with_int!(b_type, EB => unsafe {
        int_impl::<EA, EB>(
            (m, n, k),
            (a as *const EA, s(a_rs), s(a_cs)),
            (b as *const EB, s(b_rs), s(b_cs)),
            (c, s(c_rs), s(c_cs), width),
        )
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::GemmThreads;
    use crate::thread_pool::ThreadPool;
    use tessera_testkit::Rng;

    /// Random values of operand type `code` as (little-endian bytes, values), extremes first.
    fn operand(code: i64, count: usize, rng: &mut Rng) -> (Vec<u8>, Vec<i64>) {
        let (lo, hi, width) = match code {
            GEMM_S8 => (-128, 127, 1),
            GEMM_U8 => (0, 255, 1),
            GEMM_S16 => (-32768, 32767, 2),
            _ => (0, 65535, 2),
        };
        let values: Vec<i64> = (0..count)
            .map(|i| match i % 7 {
                0 => lo,
                1 => hi,
                _ => rng.range(lo, hi),
            })
            .collect();
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()[..width].to_vec()).collect();
        (bytes, values)
    }

    /// Every operand pair, result widths that wrap and that do not, contractions of one and
    /// of several blocks (u8 x u8 blocks hold 258 terms, s16 x s16 ones run on f64), a
    /// transposed `A`, and a result written with a row pitch, against exact sums.
    #[test]
    fn sums_are_exact_modulo_the_result_width() {
        let pool = ThreadPool::new(Some(2)).unwrap();
        let _threads = GemmThreads::enter(&pool);
        let mut rng = Rng::new(5);
        let shapes = [(3, 5, 0), (1, 40, 7), (7, 9, 600), (20, 3, 1100), (33, 70, 300)];
        for (m, n, k) in shapes {
            for a_type in [GEMM_S8, GEMM_U8, GEMM_S16, GEMM_U16] {
                for b_type in [GEMM_S8, GEMM_U8, GEMM_S16, GEMM_U16] {
                    for c_type in [GEMM_S8, GEMM_U16, GEMM_S32, GEMM_U64] {
                        let (a, av) = operand(a_type, m * k, &mut rng);
                        let (b, bv) = operand(b_type, k * n, &mut rng);
                        let width = result_width(c_type).unwrap();
                        let pitch = n + 2;
                        let mut c = vec![0xa5u8; m * pitch * width];
                        // A is stored transposed: its (i, q) at q * m + i.
                        let mut at = vec![0u8; a.len()];
                        let aw = a.len() / (m * k).max(1);
                        for i in 0..m {
                            for q in 0..k {
                                let (from, to) = ((i * k + q) * aw, (q * m + i) * aw);
                                at[to..to + aw].copy_from_slice(&a[from..from + aw]);
                            }
                        }
                        unsafe {
                            tessera_rt_gemm_int(
                                m as i64,
                                n as i64,
                                k as i64,
                                at.as_ptr(),
                                1,
                                m as i64,
                                a_type,
                                b.as_ptr(),
                                n as i64,
                                1,
                                b_type,
                                c.as_mut_ptr(),
                                pitch as i64,
                                1,
                                c_type,
                            )
                        };
                        for i in 0..m {
                            for j in 0..n {
                                let exact: i128 = (0..k).map(|q| i128::from(av[i * k + q] * bv[q * n + j])).sum();
                                let want = &exact.to_le_bytes()[..width];
                                let e = (i * pitch + j) * width;
                                assert_eq!(
                                    &c[e..e + width],
                                    want,
                                    "{m}x{n}x{k} types {a_type},{b_type}->{c_type} at ({i},{j}): exact sum {exact}"
                                );
                            }
                            let pad = (i * pitch + n) * width;
                            assert!(c[pad..pad + 2 * width].iter().all(|&x| x == 0xa5), "wrote past row {i}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn unknown_codes_and_negative_sizes_do_nothing() {
        let (a, b) = ([1u8; 4], [1u8; 4]);
        let mut c = [7u8; 16];
        for (m, a_type, c_type) in [(-1, GEMM_S8, GEMM_S32), (2, GEMM_S32, GEMM_S32), (2, GEMM_S8, 9)] {
            unsafe {
                tessera_rt_gemm_int(
                    m,
                    2,
                    2,
                    a.as_ptr(),
                    2,
                    1,
                    a_type,
                    b.as_ptr(),
                    2,
                    1,
                    GEMM_S8,
                    c.as_mut_ptr(),
                    2,
                    1,
                    c_type,
                )
            };
            assert_eq!(c, [7u8; 16]);
        }
    }
}
