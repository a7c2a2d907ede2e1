//! fft: FFT, IFFT, RFFT and IRFFT over the last one to three dimensions, one axis at a time
//! in f64 (radix-2 for power-of-two lengths, a direct DFT otherwise), rounded once at the end.

use super::value::{round_complex, round_float};
use super::{result_array, Arr, Buf, EvalError};
use crate::ir::{AttrList, FftType, Instruction};
use std::f64::consts::PI;

type C = (f64, f64);

pub(crate) fn fft(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    let (ty, dims) = result_array(inst)?;
    let [a] = ops else {
        return Err(EvalError::invalid(inst, "fft needs one operand"));
    };
    let kind = inst
        .attr_word("fft_type")
        .and_then(FftType::parse)
        .ok_or_else(|| EvalError::invalid(inst, "fft without a valid fft_type"))?;
    let lengths = inst.attr_ints("fft_length").ok_or_else(|| EvalError::invalid(inst, "fft without fft_length"))?;
    let rank = a.dims.len();
    let k = lengths.len();
    if k == 0 || k > 3 || k > rank || dims.len() != rank {
        return Err(EvalError::invalid(inst, "fft_length must name one to three trailing dimensions"));
    }
    let first = rank - k;
    let last_len = lengths[k - 1];
    // The operand's and result's sizes of the transformed dimensions, as each type defines them.
    let half = last_len / 2 + 1;
    for (i, &len) in lengths.iter().enumerate() {
        let d = first + i;
        let (want_in, want_out) = match kind {
            FftType::Rfft if i == k - 1 => (len, half),
            FftType::Irfft if i == k - 1 => (half, len),
            _ => (len, len),
        };
        if len < 0 || a.dims[d] != want_in || dims[d] != want_out {
            return Err(EvalError::invalid(inst, "fft_length does not match the operand and result shapes"));
        }
    }
    if a.dims[..first] != dims[..first] {
        return Err(EvalError::invalid(inst, "fft batch dimensions differ between operand and result"));
    }
    let mut data: Vec<C> = match &a.buf {
        Buf::Complex(v) => v.clone(),
        Buf::Float(v) => v.iter().map(|&x| (x, 0.0)).collect(),
        _ => return Err(EvalError::invalid(inst, "fft operand is neither complex nor floating-point")),
    };
    let mut cur = a.dims.clone();
    let inverse = matches!(kind, FftType::Ifft | FftType::Irfft);
    match kind {
        FftType::Fft | FftType::Ifft | FftType::Rfft => {
            for d in first..rank {
                transform_axis(&mut data, &cur, d, inverse);
            }
            if kind == FftType::Rfft {
                data = truncate_last(&data, &cur, half);
                cur[rank - 1] = half;
            }
        }
        FftType::Irfft => {
            for d in first..rank - 1 {
                transform_axis(&mut data, &cur, d, true);
            }
            // The last axis holds the non-redundant half of a Hermitian spectrum: rebuild the
            // rest by conjugate symmetry, then invert.
            data = hermitian_extend(&data, &cur, last_len);
            cur[rank - 1] = last_len;
            transform_axis(&mut data, &cur, rank - 1, true);
        }
    }
    let buf = if ty.is_complex() {
        Buf::Complex(data.into_iter().map(|c| round_complex(ty, c)).collect())
    } else if ty.is_float() && kind == FftType::Irfft {
        Buf::Float(data.into_iter().map(|c| round_float(ty, c.0)).collect())
    } else {
        return Err(EvalError::invalid(inst, format!("fft result type {ty} does not fit the fft_type")));
    };
    Ok(Arr { ty, dims, buf })
}

/// The last dimension cut to its first `keep` entries.
fn truncate_last(data: &[C], dims: &[i64], keep: i64) -> Vec<C> {
    let n = *dims.last().unwrap_or(&1) as usize;
    if n == 0 {
        return Vec::new();
    }
    data.chunks(n).flat_map(|row| row[..keep as usize].iter().copied()).collect()
}

/// Each row of `n/2 + 1` entries extended to `n` by X[n-k] = conj(X[k]).
fn hermitian_extend(data: &[C], dims: &[i64], n: i64) -> Vec<C> {
    let have = *dims.last().unwrap_or(&1) as usize;
    let n = n as usize;
    if have == 0 {
        return vec![(0.0, 0.0); 0];
    }
    let mut out = Vec::with_capacity(data.len() / have * n);
    for row in data.chunks(have) {
        for j in 0..n {
            out.push(if j < have { row[j] } else { (row[n - j].0, -row[n - j].1) });
        }
    }
    out
}

/// Transforms every line along dimension `d` in place; the inverse includes the 1/n scale.
fn transform_axis(data: &mut [C], dims: &[i64], d: usize, inverse: bool) {
    let n = dims[d] as usize;
    if n <= 1 {
        return;
    }
    let inner: usize = dims[d + 1..].iter().product::<i64>() as usize;
    let outer: usize = dims[..d].iter().product::<i64>() as usize;
    let plan = Plan::new(n, inverse);
    let mut line = vec![(0.0, 0.0); n];
    for o in 0..outer {
        for i in 0..inner {
            let base = o * n * inner + i;
            for (j, slot) in line.iter_mut().enumerate() {
                *slot = data[base + j * inner];
            }
            plan.run(&mut line);
            let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
            for (j, v) in line.iter().enumerate() {
                data[base + j * inner] = (v.0 * scale, v.1 * scale);
            }
        }
    }
}

struct Plan {
    n: usize,
    /// twiddle[j] = exp(sign * 2 pi i j / n), computed from the exact angle for each j.
    twiddle: Vec<C>,
}

impl Plan {
    fn new(n: usize, inverse: bool) -> Plan {
        let sign = if inverse { 1.0 } else { -1.0 };
        let twiddle = (0..n)
            .map(|j| {
                let angle = sign * 2.0 * PI * j as f64 / n as f64;
                (angle.cos(), angle.sin())
            })
            .collect();
        Plan { n, twiddle }
    }

    fn run(&self, x: &mut [C]) {
        if self.n.is_power_of_two() {
            self.radix2(x);
        } else {
            self.direct(x);
        }
    }

    fn direct(&self, x: &mut [C]) {
        let n = self.n;
        let input = x.to_vec();
        for (k, out) in x.iter_mut().enumerate() {
            let mut acc = (0.0, 0.0);
            for (j, v) in input.iter().enumerate() {
                let w = self.twiddle[(j * k) % n];
                acc.0 += v.0 * w.0 - v.1 * w.1;
                acc.1 += v.0 * w.1 + v.1 * w.0;
            }
            *out = acc;
        }
    }

    /// Iterative Cooley-Tukey: bit-reversal permutation, then butterflies of doubling span.
    fn radix2(&self, x: &mut [C]) {
        let n = self.n;
        let bits = n.trailing_zeros();
        for i in 0..n {
            let j = i.reverse_bits() >> (usize::BITS - bits);
            if i < j {
                x.swap(i, j);
            }
        }
        let mut len = 2;
        while len <= n {
            let step = n / len;
            for start in (0..n).step_by(len) {
                for k in 0..len / 2 {
                    let w = self.twiddle[k * step];
                    let (a, b) = (x[start + k], x[start + k + len / 2]);
                    let t = (b.0 * w.0 - b.1 * w.1, b.0 * w.1 + b.1 * w.0);
                    x[start + k] = (a.0 + t.0, a.1 + t.1);
                    x[start + k + len / 2] = (a.0 - t.0, a.1 - t.1);
                }
            }
            len *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[C], b: &[C]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x.0 - y.0).abs() < 1e-9 && (x.1 - y.1).abs() < 1e-9)
    }

    #[test]
    fn radix2_matches_direct() {
        for n in [2usize, 4, 8, 16] {
            let x: Vec<C> = (0..n).map(|i| (i as f64 * 0.5 - 1.0, (i * i) as f64 * 0.25)).collect();
            let plan = Plan::new(n, false);
            let (mut a, mut b) = (x.clone(), x.clone());
            plan.radix2(&mut a);
            plan.direct(&mut b);
            assert!(close(&a, &b), "n={n}");
        }
    }

    #[test]
    fn known_transform() {
        // DFT of [1, 2, 3] = [6, -1.5 + 0.866i, -1.5 - 0.866i].
        let mut x = vec![(1.0, 0.0), (2.0, 0.0), (3.0, 0.0)];
        Plan::new(3, false).run(&mut x);
        let h = 3f64.sqrt() / 2.0;
        assert!(close(&x, &[(6.0, 0.0), (-1.5, h), (-1.5, -h)]));
    }
}
