//! The dense inner loops of dot and convolution, and the split of their rows over threads.
//!
//! Floats are accumulated in f64 (a product of two f32 values is exact in f64, so only the
//! additions round) and rounded once to the result type by the caller.

/// `acc[j] += sum over i of x[i] * w[i * stride + j]`, for every `j < acc.len()`.
///
/// Four rows of `w` are folded per pass so the accumulator is loaded and stored a quarter as
/// often; the loop body has no bounds checks, so it vectorises.
pub(crate) fn accumulate_rows(acc: &mut [f64], x: &[f64], w: &[f64], stride: usize) {
    let n = acc.len();
    let mut rows = x.chunks_exact(4);
    let mut i = 0;
    for xs in rows.by_ref() {
        let (x0, x1, x2, x3) = (xs[0], xs[1], xs[2], xs[3]);
        let w0 = &w[i * stride..][..n];
        let w1 = &w[(i + 1) * stride..][..n];
        let w2 = &w[(i + 2) * stride..][..n];
        let w3 = &w[(i + 3) * stride..][..n];
        for ((((a, &a0), &a1), &a2), &a3) in acc.iter_mut().zip(w0).zip(w1).zip(w2).zip(w3) {
            *a += x0 * a0 + x1 * a1 + x2 * a2 + x3 * a3;
        }
        i += 4;
    }
    for &x0 in rows.remainder() {
        let w0 = &w[i * stride..][..n];
        for (a, &a0) in acc.iter_mut().zip(w0) {
            *a += x0 * a0;
        }
        i += 1;
    }
}

/// The integer form of [`accumulate_rows`], wrapping like two's complement hardware.
pub(crate) fn accumulate_rows_int(acc: &mut [i64], x: &[i64], w: &[i64], stride: usize) {
    let n = acc.len();
    for (i, &x0) in x.iter().enumerate() {
        let w0 = &w[i * stride..][..n];
        for (a, &a0) in acc.iter_mut().zip(w0) {
            *a = a.wrapping_add(x0.wrapping_mul(a0));
        }
    }
}

/// Below this many multiply-adds a second thread costs more than it saves.
const PARALLEL_WORK: usize = 1 << 20;

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(8)
}

/// Calls `f(first_row, rows)` on `out` cut into runs of whole rows of `row_len` elements, one
/// run per thread when `work_per_row` times the row count is large enough to pay for them.
pub(crate) fn par_rows<T: Send>(
    out: &mut [T],
    row_len: usize,
    work_per_row: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    if row_len == 0 || out.is_empty() {
        return;
    }
    let rows = out.len() / row_len;
    let n = threads().min(rows).max(1);
    if n == 1 || rows.saturating_mul(work_per_row) < PARALLEL_WORK {
        f(0, out);
        return;
    }
    let per = rows.div_ceil(n);
    std::thread::scope(|s| {
        for (t, chunk) in out.chunks_mut(per * row_len).enumerate() {
            let f = &f;
            s.spawn(move || f(t * per, chunk));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulate_rows_matches_the_definition() {
        let x: Vec<f64> = (0..7).map(|i| i as f64 - 2.5).collect();
        let stride = 5;
        let w: Vec<f64> = (0..7 * stride).map(|i| (i * 7 % 11) as f64).collect();
        let mut acc = vec![1.0; 3];
        accumulate_rows(&mut acc, &x, &w, stride);
        let want: Vec<f64> = (0..3).map(|j| 1.0 + (0..7).map(|i| x[i] * w[i * stride + j]).sum::<f64>()).collect();
        assert_eq!(acc, want);
        let (xi, wi): (Vec<i64>, Vec<i64>) = (vec![i64::MAX, 2], vec![2, 3, 5, 7]);
        let mut acc = vec![0i64; 2];
        accumulate_rows_int(&mut acc, &xi, &wi, 2);
        assert_eq!(acc, vec![i64::MAX.wrapping_mul(2).wrapping_add(10), i64::MAX.wrapping_mul(3).wrapping_add(14)]);
    }

    #[test]
    fn par_rows_covers_every_row_once() {
        let mut out = vec![0usize; 3 * 1000];
        par_rows(&mut out, 3, PARALLEL_WORK, |first, rows| {
            for (r, row) in rows.chunks_mut(3).enumerate() {
                row.iter_mut().for_each(|x| *x += first + r);
            }
        });
        assert!(out.chunks(3).enumerate().all(|(r, row)| row.iter().all(|&x| x == r)));
    }
}
