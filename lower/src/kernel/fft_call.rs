//! The runtime's FFT as kernels call it, and the kernel interpreter's reference for it.
//!
//! `tessera_rt_fft(kind: i64, n0: i64, n1: i64, n2: i64, data: *mut f64)` transforms one
//! `[n0, n1, n2]` box of complex f64 numbers in place: `data` holds them row-major, real and
//! imaginary parts interleaved (`2 * n0 * n1 * n2` doubles). Transforms of fewer dimensions
//! use leading lengths of 1. `tessera_rt_fft_f32` ([`SYMBOL_F32`]) does the same on a box of
//! complex f32 numbers, computing in f32 (f32 and c64 transforms, as XLA:CPU computes them;
//! the reference here computes in f64 and rounds once). By [`FftKind`]:
//!
//! - `Fft` / `Ifft`: the forward / inverse DFT along every axis; the inverse scales each axis
//!   by `1/n` (multiplying by the reciprocal).
//! - `Rfft`: as `Fft` (the caller stores real inputs with zero imaginary parts and reads the
//!   first `n2/2 + 1` entries of each row; the rest of each row is undefined on return).
//! - `Irfft`: on entry the first `n2/2 + 1` entries of each row hold the input and the rest
//!   are ignored. The inverse runs along axes 0 and 1 on those columns, each row is extended
//!   by `X[n2 - j] = conj(X[j])`, and the inverse runs along the rows; the caller reads the
//!   real parts (the imaginary parts are undefined on return).
//!
//! A kind outside these or a negative length does nothing (no error channel crosses the C
//! ABI; the lowering never emits one).

/// The C symbol.
pub const SYMBOL: &str = "tessera_rt_fft";
/// The C symbol of the f32 form.
pub const SYMBOL_F32: &str = "tessera_rt_fft_f32";

/// The `kind` argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub enum FftKind {
    Fft = 0,
    Ifft = 1,
    Rfft = 2,
    Irfft = 3,
}

impl FftKind {
    pub fn from_i64(k: i64) -> Option<FftKind> {
        Some(match k {
            0 => FftKind::Fft,
            1 => FftKind::Ifft,
            2 => FftKind::Rfft,
            3 => FftKind::Irfft,
            _ => return None,
        })
    }
}

type C = (f64, f64);

/// The contract above as a direct DFT (exact-angle twiddles, f64 sums in index order): plain
/// enough to trust, quadratic per line.
pub fn reference(kind: FftKind, n: [usize; 3], data: &mut [f64]) {
    let total = n[0] * n[1] * n[2];
    if total == 0 || data.len() < 2 * total {
        return;
    }
    let mut v: Vec<C> = data[..2 * total].chunks(2).map(|p| (p[0], p[1])).collect();
    match kind {
        FftKind::Fft | FftKind::Rfft | FftKind::Ifft => {
            let inverse = kind == FftKind::Ifft;
            for axis in 0..3 {
                transform_axis(&mut v, n, axis, n[2], inverse);
            }
        }
        FftKind::Irfft => {
            let half = n[2] / 2 + 1;
            transform_axis(&mut v, n, 0, half.min(n[2]), true);
            transform_axis(&mut v, n, 1, half.min(n[2]), true);
            for row in v.chunks_mut(n[2]) {
                for j in half..n[2] {
                    let (re, im) = row[n[2] - j];
                    row[j] = (re, -im);
                }
            }
            transform_axis(&mut v, n, 2, n[2], true);
        }
    }
    for (p, c) in data.chunks_mut(2).zip(v) {
        p[0] = c.0;
        p[1] = c.1;
    }
}

/// Transforms every line along `axis` of the `n` box; along axes 0 and 1 only the first
/// `cols` entries of each row are touched.
fn transform_axis(v: &mut [C], n: [usize; 3], axis: usize, cols: usize, inverse: bool) {
    let len = n[axis];
    if len <= 1 {
        return;
    }
    let stride: usize = n[axis + 1..].iter().product();
    let sign = if inverse { 1.0 } else { -1.0 };
    let twiddle: Vec<C> = (0..len)
        .map(|j| {
            let angle = sign * 2.0 * std::f64::consts::PI * j as f64 / len as f64;
            (angle.cos(), angle.sin())
        })
        .collect();
    let scale = if inverse { 1.0 / len as f64 } else { 1.0 };
    let outer: usize = n[..axis].iter().product();
    let mut line = vec![(0.0, 0.0); len];
    for o in 0..outer {
        for i in 0..stride {
            if axis < 2 && i % n[2] >= cols {
                continue;
            }
            let base = o * len * stride + i;
            for (j, slot) in line.iter_mut().enumerate() {
                *slot = v[base + j * stride];
            }
            for k in 0..len {
                let mut acc = (0.0, 0.0);
                for (j, x) in line.iter().enumerate() {
                    let w = twiddle[(j * k) % len];
                    acc.0 += x.0 * w.0 - x.1 * w.1;
                    acc.1 += x.0 * w.1 + x.1 * w.0;
                }
                v[base + k * stride] = (acc.0 * scale, acc.1 * scale);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dft_of_three_points() {
        let mut d = vec![1.0, 0.0, 2.0, 0.0, 3.0, 0.0];
        reference(FftKind::Fft, [1, 1, 3], &mut d);
        let h = 3f64.sqrt() / 2.0;
        let want = [6.0, 0.0, -1.5, h, -1.5, -h];
        assert!(d.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12), "{d:?}");
    }

    #[test]
    fn irfft_inverts_rfft_in_two_dimensions() {
        let n = [1, 3, 5];
        let x: Vec<f64> = (0..15).map(|i| (i as f64 * 0.7).sin()).collect();
        let mut d: Vec<f64> = x.iter().flat_map(|&r| [r, 0.0]).collect();
        reference(FftKind::Rfft, n, &mut d);
        // Garbage in the ignored columns must not matter.
        for row in d.chunks_mut(10) {
            row[6..].fill(f64::NAN);
        }
        reference(FftKind::Irfft, n, &mut d);
        for (i, &r) in x.iter().enumerate() {
            assert!((d[2 * i] - r).abs() < 1e-12, "{i}: {} vs {r}", d[2 * i]);
        }
    }
}
