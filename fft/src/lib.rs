//! `tessera_rt_fft`, the transform fft kernels call (contract: `tessera_lower::kernel::fft_call`,
//! which the runtime, which exports this function, cannot name because lowering sits above
//! it): one `[n0, n1, n2]` box of
//! interleaved complex f64 numbers, transformed in place along every axis with rustfft's
//! planned transforms (mixed radix, Rader and Bluestein for primes), so any length runs in
//! O(n log n).
//!
//! Plans are cached per thread: a kernel's grid runs on the pool's threads, each planning a
//! length once and reusing it for every batch element.

use std::cell::RefCell;
use std::sync::Arc;

use rustfft::num_complex::Complex64;
use rustfft::{Fft, FftPlanner};

/// The `kind` argument (the same numbers as `tessera_lower::kernel::fft_call::FftKind`).
pub const FFT: i64 = 0;
pub const IFFT: i64 = 1;
pub const RFFT: i64 = 2;
pub const IRFFT: i64 = 3;

thread_local! {
    static PLANNER: RefCell<FftPlanner<f64>> = RefCell::new(FftPlanner::new());
}

fn plan(len: usize, inverse: bool) -> Arc<dyn Fft<f64>> {
    PLANNER.with(|p| {
        let mut p = p.borrow_mut();
        if inverse {
            p.plan_fft_inverse(len)
        } else {
            p.plan_fft_forward(len)
        }
    })
}

/// Transforms the `[n0, n1, n2]` box at `data` in place (see the module doc for the contract).
///
/// # Safety
/// `data` must be valid for reads and writes of `2 * n0 * n1 * n2` doubles, 8-byte aligned.
#[no_mangle]
pub unsafe extern "C" fn tessera_rt_fft(kind: i64, n0: i64, n1: i64, n2: i64, data: *mut f64) {
    let (Ok(n0), Ok(n1), Ok(n2)) = (usize::try_from(n0), usize::try_from(n1), usize::try_from(n2)) else { return };
    let Some(total) = n0.checked_mul(n1).and_then(|x| x.checked_mul(n2)) else { return };
    if total == 0 || !(FFT..=IRFFT).contains(&kind) || data.is_null() {
        return;
    }
    // SAFETY: the caller guarantees `total` complex numbers at `data`; Complex64 is two
    // f64s (repr(C)) with f64's alignment.
    let v = unsafe { std::slice::from_raw_parts_mut(data.cast::<Complex64>(), total) };
    let n = [n0, n1, n2];
    match kind {
        FFT | RFFT | IFFT => {
            for axis in 0..3 {
                transform_axis(v, n, axis, n2, kind == IFFT);
            }
        }
        _ => {
            let half = n2 / 2 + 1;
            transform_axis(v, n, 0, half.min(n2), true);
            transform_axis(v, n, 1, half.min(n2), true);
            for row in v.chunks_mut(n2) {
                for j in half..n2 {
                    row[j] = row[n2 - j].conj();
                }
            }
            transform_axis(v, n, 2, n2, true);
        }
    }
}

/// Transforms every line along `axis`; along axes 0 and 1 only the first `cols` entries of
/// each row. The inverse multiplies by `1/len`, as the reference does.
fn transform_axis(v: &mut [Complex64], n: [usize; 3], axis: usize, cols: usize, inverse: bool) {
    let len = n[axis];
    if len <= 1 {
        return;
    }
    let fft = plan(len, inverse);
    let mut scratch = vec![Complex64::default(); fft.get_inplace_scratch_len()];
    let scale = 1.0 / len as f64;
    if axis == 2 {
        fft.process_with_scratch(v, &mut scratch);
        if inverse {
            v.iter_mut().for_each(|c| *c *= scale);
        }
        return;
    }
    let stride: usize = n[axis + 1..].iter().product();
    let outer: usize = n[..axis].iter().product();
    let mut line = vec![Complex64::default(); len];
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
                v[base + j * stride] = if inverse { c * scale } else { *c };
            }
        }
    }
}
