//! dot (dot_general): operands are transposed to [batch, free, contracting] and
//! [batch, contracting, free], then multiplied with an i-k-j loop (blocked and split over
//! threads for floats). Floats accumulate in f64 and round once to the result type; integers
//! wrap.

use std::borrow::Cow;

use super::data_movement::{gather, row_major_strides};
use super::elementwise::convert;
use super::kernels::{accumulate_rows, par_rows};
use super::value::{round_float, wrap_int};
use super::{result_array, Arr, Buf, EvalError};
use crate::element_type::ElementType;
use crate::ir::{AttrList, Instruction};
use crate::layout::Layout;
use crate::literal::Literal;
use crate::shape::Shape;

/// An operand of a dot: widened, or packed in its element type (a large weight), which is
/// laid out for the product while still packed and widened only then, so it is never held
/// widened in two orders at once.
#[derive(Clone, Copy)]
pub(crate) enum Operand<'a> {
    Wide(&'a Arr),
    Packed(&'a Literal),
}

impl Operand<'_> {
    fn dims(&self) -> &[i64] {
        match self {
            Operand::Wide(a) => &a.dims,
            Operand::Packed(l) => l.array_shape().map_or(&[], |s| &s.dims),
        }
    }

    /// The operand converted to `to` and laid out in `order`, borrowed when it already is.
    fn arranged(&self, to: ElementType, order: &[usize], inst: &Instruction) -> Result<Cow<'_, Buf>, EvalError> {
        let identity = order.iter().enumerate().all(|(i, &d)| i == d);
        let (ty, buf) = match self {
            Operand::Wide(a) => {
                let converted =
                    if already(a.ty, to) { Cow::Borrowed(&a.buf) } else { Cow::Owned(convert(&a.buf, a.ty, to)) };
                if identity {
                    return Ok(converted);
                }
                return Ok(Cow::Owned(permuted(&converted, &a.dims, order)));
            }
            Operand::Packed(lit) if identity => (lit.element_type(), Arr::from_literal(lit, &inst.name)?.buf),
            Operand::Packed(lit) => {
                // The packed bytes in `order`: relaid out so that the physical order is the
                // arranged one, then read as a row-major array of the arranged dimensions.
                let ty = lit.element_type();
                let minor_to_major: Vec<i64> = order.iter().rev().map(|&d| d as i64).collect();
                let relaid = lit.relayout(&Layout::new(&minor_to_major))?;
                let dims: Vec<i64> = order.iter().map(|&d| self.dims()[d]).collect();
                let bytes = relaid.physical_bytes()?.to_vec();
                drop(relaid);
                let arranged = Literal::from_physical_bytes(Shape::array(ty, &dims), bytes)?;
                (ty, Arr::from_literal(&arranged, &inst.name)?.buf)
            }
        };
        Ok(Cow::Owned(if already(ty, to) { buf } else { convert(&buf, ty, to) }))
    }
}

pub(crate) fn dot(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    let [lhs, rhs] = ops else {
        return Err(EvalError::invalid(inst, "dot needs two operands"));
    };
    dot_of(inst, Operand::Wide(lhs), Operand::Wide(rhs))
}

pub(crate) fn dot_of(inst: &Instruction, lhs: Operand<'_>, rhs: Operand<'_>) -> Result<Arr, EvalError> {
    let (ty, dims) = result_array(inst)?;
    let get = |name: &str| inst.attr_ints(name).unwrap_or(&[]).to_vec();
    let (lb, lc, rb, rc) =
        (get("lhs_batch_dims"), get("lhs_contracting_dims"), get("rhs_batch_dims"), get("rhs_contracting_dims"));
    if lb.len() != rb.len() || lc.len() != rc.len() {
        return Err(EvalError::invalid(inst, "batch or contracting dimension lists differ in length"));
    }
    let (l_order, m) = arrange(inst, lhs.dims(), &lb, &lc, false)?;
    let (r_order, n) = arrange(inst, rhs.dims(), &rb, &rc, true)?;
    let mut batch = 1i64;
    for (&a, &b) in lb.iter().zip(&rb) {
        if lhs.dims()[a as usize] != rhs.dims()[b as usize] {
            return Err(EvalError::invalid(inst, "batch dimension sizes differ"));
        }
        batch *= lhs.dims()[a as usize];
    }
    let mut k = 1i64;
    for (&a, &b) in lc.iter().zip(&rc) {
        if lhs.dims()[a as usize] != rhs.dims()[b as usize] {
            return Err(EvalError::invalid(inst, "contracting dimension sizes differ"));
        }
        k *= lhs.dims()[a as usize];
    }
    if batch * m * n != dims.iter().product::<i64>() {
        return Err(EvalError::invalid(inst, "dot result shape does not match its operands"));
    }
    let lbuf = lhs.arranged(ty, &l_order, inst)?;
    let rbuf = rhs.arranged(ty, &r_order, inst)?;
    let (b, m, n, k) = (batch as usize, m as usize, n as usize, k as usize);
    let buf = match (lbuf.as_ref(), rbuf.as_ref()) {
        (Buf::Float(l), Buf::Float(r)) => {
            let mut out = vec![0f64; b * m * n];
            float_matmul(l, r, &mut out, m, n, k);
            Buf::Float(out.into_iter().map(|x| round_float(ty, x)).collect())
        }
        (Buf::Int(l), Buf::Int(r)) => {
            let mut out = vec![0i64; b * m * n];
            matmul(l, r, &mut out, b, m, n, k, |acc, x, y| *acc = acc.wrapping_add(x.wrapping_mul(y)));
            Buf::Int(out.into_iter().map(|x| wrap_int(ty, x)).collect())
        }
        (Buf::Pred(l), Buf::Pred(r)) => {
            let mut out = vec![false; b * m * n];
            matmul(l, r, &mut out, b, m, n, k, |acc, x, y| *acc |= x & y);
            Buf::Pred(out)
        }
        _ => return Err(EvalError::invalid(inst, "dot operands of different element types")),
    };
    Ok(Arr { ty, dims, buf })
}

/// The dimension order [batch, free, contracting] (lhs) or [batch, contracting, free] (rhs),
/// and the product of the free dimensions.
fn arrange(
    inst: &Instruction,
    dims: &[i64],
    batch: &[i64],
    contract: &[i64],
    contracting_first: bool,
) -> Result<(Vec<usize>, i64), EvalError> {
    let mut used = vec![false; dims.len()];
    for &d in batch.iter().chain(contract) {
        match usize::try_from(d).ok().and_then(|d| used.get_mut(d)) {
            Some(u) if !*u => *u = true,
            _ => return Err(EvalError::invalid(inst, format!("bad dot dimension {d}"))),
        }
    }
    let free: Vec<usize> = (0..dims.len()).filter(|&d| !used[d]).collect();
    let free_size = free.iter().map(|&d| dims[d]).product();
    let b = batch.iter().map(|&d| d as usize);
    let c = contract.iter().map(|&d| d as usize);
    let order = if contracting_first { b.chain(c).chain(free).collect() } else { b.chain(free).chain(c).collect() };
    Ok((order, free_size))
}

/// Whether the widened values of type `from` are already values of type `to`: the same type,
/// or a float format that `to` holds exactly.
fn already(from: ElementType, to: ElementType) -> bool {
    use ElementType as E;
    from == to || matches!((from, to), (E::BF16 | E::F16, E::F32 | E::F64) | (E::F32, E::F64))
}

fn permuted(buf: &Buf, dims: &[i64], order: &[usize]) -> Buf {
    let s = row_major_strides(dims);
    let pd: Vec<i64> = order.iter().map(|&d| dims[d]).collect();
    let ps: Vec<i64> = order.iter().map(|&d| s[d]).collect();
    super::value::map_buf!(buf, v => gather(v, &pd, &ps, 0))
}

/// `out[b] = l[b] x r[b]` for row-major [batch, m, k] and [batch, k, n] operands. Blocked so a
/// panel of `r` (`KC` rows of `NC` columns) stays in cache while every row of `l` handled by the
/// thread passes over it.
fn float_matmul(l: &[f64], r: &[f64], out: &mut [f64], m: usize, n: usize, k: usize) {
    const KC: usize = 256;
    const NC: usize = 512;
    par_rows(out, n, k * n, |first, rows| {
        for jb in (0..n).step_by(NC) {
            let je = (jb + NC).min(n);
            for kb in (0..k).step_by(KC) {
                let ke = (kb + KC).min(k);
                for (t, row) in rows.chunks_mut(n).enumerate() {
                    let gi = first + t;
                    let bi = gi / m;
                    accumulate_rows(&mut row[jb..je], &l[gi * k + kb..gi * k + ke], &r[(bi * k + kb) * n + jb..], n);
                }
            }
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn matmul<T: Copy>(
    l: &[T],
    r: &[T],
    out: &mut [T],
    b: usize,
    m: usize,
    n: usize,
    k: usize,
    fma: impl Fn(&mut T, T, T),
) {
    for bi in 0..b {
        for i in 0..m {
            let row = &mut out[(bi * m + i) * n..(bi * m + i + 1) * n];
            for kk in 0..k {
                let x = l[(bi * m + i) * k + kk];
                let rr = &r[(bi * k + kk) * n..(bi * k + kk + 1) * n];
                for (o, &y) in row.iter_mut().zip(rr) {
                    fma(o, x, y);
                }
            }
        }
    }
}
