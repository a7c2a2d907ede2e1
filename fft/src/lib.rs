//! `tessera_rt_fft` and `tessera_rt_fft_f32`, the transforms fft kernels call (contract:
//! `tessera_lower::kernel::fft_call`, which the runtime, which exports these functions, cannot
//! name because lowering sits above it): one `[n0, n1, n2]` box of interleaved complex f64 (or
//! f32) numbers, transformed in place along every axis with rustfft's planned transforms
//! (mixed radix, Rader and Bluestein for primes), so any length runs in O(n log n). A real
//! transform's rows (the last axis of `Rfft`'s input and `Irfft`'s output) run on realfft's
//! half-length complex transforms: half the work of a complex transform of the row.
//!
//! Plans are cached per thread: a kernel's grid runs on the pool's threads, each planning a
//! length once and reusing it for every batch element.

use std::cell::RefCell;
use std::sync::Arc;

use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use rustfft::num_complex::Complex;
use rustfft::{Fft, FftNum, FftPlanner};

/// The `kind` argument (the same numbers as `tessera_lower::kernel::fft_call::FftKind`).
pub const FFT: i64 = 0;
pub const IFFT: i64 = 1;
pub const RFFT: i64 = 2;
pub const IRFFT: i64 = 3;

/// A precision with its per-thread planners.
trait Float: FftNum + Default {
    fn with_planners<R>(f: impl FnOnce(&mut FftPlanner<Self>, &mut RealFftPlanner<Self>) -> R) -> R;
}

macro_rules! float {
    ($t:ty, $complex:ident, $real:ident) => {
        thread_local! {
            static $complex: RefCell<FftPlanner<$t>> = RefCell::new(FftPlanner::new());
            static $real: RefCell<RealFftPlanner<$t>> = RefCell::new(RealFftPlanner::new());
        }
        impl Float for $t {
            fn with_planners<R>(f: impl FnOnce(&mut FftPlanner<Self>, &mut RealFftPlanner<Self>) -> R) -> R {
                $complex.with(|c| $real.with(|r| f(&mut c.borrow_mut(), &mut r.borrow_mut())))
            }
        }
    };
}
float!(f64, COMPLEX_F64, REAL_F64);
float!(f32, COMPLEX_F32, REAL_F32);

fn plan<T: Float>(len: usize, inverse: bool) -> Arc<dyn Fft<T>> {
    T::with_planners(|p, _| if inverse { p.plan_fft_inverse(len) } else { p.plan_fft_forward(len) })
}

fn plan_r2c<T: Float>(len: usize) -> Arc<dyn RealToComplex<T>> {
    T::with_planners(|_, p| p.plan_fft_forward(len))
}

fn plan_c2r<T: Float>(len: usize) -> Arc<dyn ComplexToReal<T>> {
    T::with_planners(|_, p| p.plan_fft_inverse(len))
}

/// Transforms the `[n0, n1, n2]` box of complex f64 numbers at `data` in place (see the module
/// doc for the contract).
///
/// # Safety
/// `data` must be valid for reads and writes of `2 * n0 * n1 * n2` doubles, 8-byte aligned.
#[no_mangle]
pub unsafe extern "C" fn tessera_rt_fft(kind: i64, n0: i64, n1: i64, n2: i64, data: *mut f64) {
    unsafe { transform(kind, [n0, n1, n2], data) }
}

/// [`tessera_rt_fft`] on a box of complex f32 numbers, computed in f32 (as XLA:CPU computes an
/// f32 or c64 transform).
///
/// # Safety
/// `data` must be valid for reads and writes of `2 * n0 * n1 * n2` floats, 4-byte aligned.
#[no_mangle]
pub unsafe extern "C" fn tessera_rt_fft_f32(kind: i64, n0: i64, n1: i64, n2: i64, data: *mut f32) {
    unsafe { transform(kind, [n0, n1, n2], data) }
}

/// The body of both entries.
///
/// # Safety
/// As theirs, for `T`.
unsafe fn transform<T: Float>(kind: i64, n: [i64; 3], data: *mut T) {
    let (Ok(n0), Ok(n1), Ok(n2)) = (usize::try_from(n[0]), usize::try_from(n[1]), usize::try_from(n[2])) else {
        return;
    };
    let Some(total) = n0.checked_mul(n1).and_then(|x| x.checked_mul(n2)) else { return };
    if total == 0 || !(FFT..=IRFFT).contains(&kind) || data.is_null() {
        return;
    }
    // SAFETY: the caller guarantees `total` complex numbers at `data`; Complex<T> is two Ts
    // (repr(C)) with T's alignment.
    let v = unsafe { std::slice::from_raw_parts_mut(data.cast::<Complex<T>>(), total) };
    let n = [n0, n1, n2];
    let half = n2 / 2 + 1;
    match kind {
        FFT | IFFT => {
            for axis in 0..3 {
                transform_axis(v, n, axis, n2, kind == IFFT);
            }
        }
        RFFT => {
            real_rows_forward(v, n2);
            transform_axis(v, n, 0, half.min(n2), false);
            transform_axis(v, n, 1, half.min(n2), false);
        }
        _ => {
            transform_axis(v, n, 0, half.min(n2), true);
            transform_axis(v, n, 1, half.min(n2), true);
            real_rows_inverse(v, n2);
        }
    }
}

/// Each row's real parts transformed, the first `n2 / 2 + 1` entries taking the spectrum (the
/// rest are left as they were: the caller does not read them).
fn real_rows_forward<T: Float>(v: &mut [Complex<T>], n2: usize) {
    if n2 <= 1 {
        return;
    }
    let r2c = plan_r2c::<T>(n2);
    let mut input = r2c.make_input_vec();
    let mut output = r2c.make_output_vec();
    let mut scratch = r2c.make_scratch_vec();
    for row in v.chunks_mut(n2) {
        for (x, c) in input.iter_mut().zip(row.iter()) {
            *x = c.re;
        }
        // Lengths come from the plan, so the call cannot fail.
        let _ = r2c.process_with_scratch(&mut input, &mut output, &mut scratch);
        row[..output.len()].copy_from_slice(&output);
    }
}

/// Each row's first `n2 / 2 + 1` entries, a real sequence's spectrum, inverted into the row's
/// real parts (imaginary parts zero), scaled by `1/n2`. The imaginary parts of the first entry
/// and (for even `n2`) the middle one contribute only imaginary parts to the inverse, which a
/// real result drops, so they are ignored.
fn real_rows_inverse<T: Float>(v: &mut [Complex<T>], n2: usize) {
    if n2 <= 1 {
        v.iter_mut().for_each(|c| c.im = T::zero());
        return;
    }
    let c2r = plan_c2r::<T>(n2);
    let mut input = c2r.make_input_vec();
    let mut output = c2r.make_output_vec();
    let mut scratch = c2r.make_scratch_vec();
    let scale = T::one() / T::from_usize(n2).unwrap_or_else(T::one);
    let last = input.len() - 1;
    let width = input.len();
    for row in v.chunks_mut(n2) {
        input.copy_from_slice(&row[..width]);
        input[0].im = T::zero();
        if n2 % 2 == 0 {
            input[last].im = T::zero();
        }
        let _ = c2r.process_with_scratch(&mut input, &mut output, &mut scratch);
        for (c, &x) in row.iter_mut().zip(&output) {
            *c = Complex::new(x * scale, T::zero());
        }
    }
}

/// Transforms every line along `axis`; along axes 0 and 1 only the first `cols` entries of
/// each row. The inverse multiplies by `1/len`, as the reference does.
fn transform_axis<T: Float>(v: &mut [Complex<T>], n: [usize; 3], axis: usize, cols: usize, inverse: bool) {
    let len = n[axis];
    if len <= 1 {
        return;
    }
    let fft = plan::<T>(len, inverse);
    let mut scratch = vec![Complex::default(); fft.get_inplace_scratch_len()];
    let scale = T::one() / T::from_usize(len).unwrap_or_else(T::one);
    if axis == 2 {
        fft.process_with_scratch(v, &mut scratch);
        if inverse {
            v.iter_mut().for_each(|c| *c = *c * scale);
        }
        return;
    }
    let stride: usize = n[axis + 1..].iter().product();
    let outer: usize = n[..axis].iter().product();
    let mut line = vec![Complex::default(); len];
    for o in 0..outer {
        for i in 0..stride {
            if i % n[2] >= cols {
                continue;
            }
            let base = o * len * stride + i;
            for (j, slot) in line.iter_mut().enumerate() {
                *slot = v[base + j * stride];
            }
            fft.process_with_scratch(&mut line, &mut scratch);
            for (j, c) in line.iter().enumerate() {
                v[base + j * stride] = if inverse { *c * scale } else { *c };
            }
        }
    }
}
