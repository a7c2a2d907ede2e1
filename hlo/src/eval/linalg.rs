//! cholesky and triangular-solve on real matrices with any batch dimensions, in f64 and
//! rounded once to the result type.

use super::value::round_float;
use super::{result_array, Arr, Buf, EvalError};
use crate::ir::{AttrList, Instruction, TriangularTranspose};

fn unsupported(inst: &Instruction) -> EvalError {
    EvalError::Unsupported { opcode: format!("{} on complex numbers", inst.opcode.name()) }
}

fn floats<'a>(inst: &Instruction, a: &'a Arr) -> Result<&'a [f64], EvalError> {
    match &a.buf {
        Buf::Float(v) => Ok(v),
        Buf::Complex(_) => Err(unsupported(inst)),
        _ => Err(EvalError::invalid(inst, "expected a floating-point operand")),
    }
}

/// The trailing two dimensions and the number of matrices in the batch.
fn matrices(inst: &Instruction, dims: &[i64]) -> Result<(usize, usize, usize), EvalError> {
    let [.., r, c] = dims else {
        return Err(EvalError::invalid(inst, "expected an operand of rank 2 or more"));
    };
    let batch: i64 = dims[..dims.len() - 2].iter().product();
    Ok((batch as usize, *r as usize, *c as usize))
}

/// cholesky: L with A = L L^T read from A's lower triangle (or U with A = U^T U from the
/// upper one). The other triangle of the result is zero. A matrix that is not positive
/// definite is not an error, as in XLA: the square root of a non-positive pivot gives NaN,
/// which spreads through the rest of the factor.
pub(crate) fn cholesky(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    let (ty, dims) = result_array(inst)?;
    let [a] = ops else {
        return Err(EvalError::invalid(inst, "cholesky needs one operand"));
    };
    let v = floats(inst, a)?;
    let (batch, n, c) = matrices(inst, &a.dims)?;
    if n != c || a.dims != dims {
        return Err(EvalError::invalid(inst, "cholesky needs square matrices and a result of the same shape"));
    }
    let lower = inst.attr_bool("lower").unwrap_or(false);
    let mut out = vec![0.0; v.len()];
    for b in 0..batch {
        let m = &v[b * n * n..(b + 1) * n * n];
        // Read the lower form; for upper, A[i][j] of the lower form is the upper A[j][i].
        let at = |i: usize, j: usize| if lower { m[i * n + j] } else { m[j * n + i] };
        let mut l = vec![0.0f64; n * n];
        for j in 0..n {
            let mut d = at(j, j);
            for k in 0..j {
                d -= l[j * n + k] * l[j * n + k];
            }
            let d = d.sqrt();
            l[j * n + j] = d;
            for i in j + 1..n {
                let mut s = at(i, j);
                for k in 0..j {
                    s -= l[i * n + k] * l[j * n + k];
                }
                l[i * n + j] = s / d;
            }
        }
        let o = &mut out[b * n * n..(b + 1) * n * n];
        for i in 0..n {
            for j in 0..=i {
                let x = round_float(ty, l[i * n + j]);
                if lower {
                    o[i * n + j] = x;
                } else {
                    o[j * n + i] = x;
                }
            }
        }
    }
    Ok(Arr { ty, dims, buf: Buf::Float(out) })
}

/// triangular-solve: X with op(A) X = B (`left_side`) or X op(A) = B, where A is read from
/// its lower or upper triangle only, with ones on the diagonal when `unit_diagonal`, and op
/// is the identity, the transpose or (for reals, the same) the adjoint.
pub(crate) fn triangular_solve(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    let (ty, dims) = result_array(inst)?;
    let [a, b] = ops else {
        return Err(EvalError::invalid(inst, "triangular-solve needs two operands"));
    };
    let (av, bv) = (floats(inst, a)?, floats(inst, b)?);
    let (batch, m, mc) = matrices(inst, &a.dims)?;
    let (bbatch, rows, cols) = matrices(inst, &b.dims)?;
    let left = inst.attr_bool("left_side").unwrap_or(false);
    let lower = inst.attr_bool("lower").unwrap_or(false);
    let unit = inst.attr_bool("unit_diagonal").unwrap_or(false);
    let transpose = match inst.attr_word("transpose_a") {
        None => false,
        Some(w) => match TriangularTranspose::parse(w) {
            Some(TriangularTranspose::NoTranspose) => false,
            Some(_) => true,
            None => return Err(EvalError::invalid(inst, format!("unknown transpose_a {w}"))),
        },
    };
    let fits = m == mc && batch == bbatch && if left { rows == m } else { cols == m };
    if !fits || b.dims != dims || a.dims[..a.dims.len() - 2] != b.dims[..b.dims.len() - 2] {
        return Err(EvalError::invalid(inst, "triangular-solve operand shapes do not fit"));
    }
    let mut out = vec![0.0; bv.len()];
    for k in 0..batch {
        let am = &av[k * m * m..(k + 1) * m * m];
        // T = op(A) restricted to its triangle, as a dense matrix: after a transpose the
        // lower triangle becomes the upper one.
        let mut t = vec![0.0f64; m * m];
        for i in 0..m {
            for j in 0..m {
                let in_triangle = if lower { j <= i } else { j >= i };
                if !in_triangle {
                    continue;
                }
                let x = if i == j && unit { 1.0 } else { am[i * m + j] };
                if transpose {
                    t[j * m + i] = x;
                } else {
                    t[i * m + j] = x;
                }
            }
        }
        let t_lower = lower != transpose;
        let bm = &bv[k * rows * cols..(k + 1) * rows * cols];
        let x = if left {
            solve_left(&t, t_lower, m, bm, cols)
        } else {
            // X T = B is T^T X^T = B^T: solve with the transpose on the transposed right side.
            let mut tt = vec![0.0; m * m];
            let mut bt = vec![0.0; rows * cols];
            for i in 0..m {
                for j in 0..m {
                    tt[j * m + i] = t[i * m + j];
                }
            }
            for i in 0..rows {
                for j in 0..cols {
                    bt[j * rows + i] = bm[i * cols + j];
                }
            }
            let xt = solve_left(&tt, !t_lower, m, &bt, rows);
            let mut x = vec![0.0; rows * cols];
            for i in 0..rows {
                for j in 0..cols {
                    x[i * cols + j] = xt[j * rows + i];
                }
            }
            x
        };
        for (o, v) in out[k * rows * cols..(k + 1) * rows * cols].iter_mut().zip(x) {
            *o = round_float(ty, v);
        }
    }
    Ok(Arr { ty, dims, buf: Buf::Float(out) })
}

/// Solves T X = B for a triangular m x m T and an m x n B by substitution.
fn solve_left(t: &[f64], lower: bool, m: usize, b: &[f64], n: usize) -> Vec<f64> {
    let mut x = b.to_vec();
    let order: Vec<usize> = if lower { (0..m).collect() } else { (0..m).rev().collect() };
    for c in 0..n {
        for &i in &order {
            let mut s = x[i * n + c];
            let range = if lower { 0..i } else { i + 1..m };
            for j in range {
                s -= t[i * m + j] * x[j * n + c];
            }
            x[i * n + c] = s / t[i * m + i];
        }
    }
    x
}
