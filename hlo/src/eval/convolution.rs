//! convolution with any dimension labels, window (stride, padding, base and window
//! dilation, reversal), feature groups and batch groups.
//!
//! The operands are first rearranged so features are innermost: input [batch, spatial..,
//! feature], kernel [spatial.., input feature, output feature]. The result is built as
//! [batch, spatial.., output feature] and rearranged to the output labels at the end. Every
//! output point is then a sum, over the kernel positions that land on a real input element, of
//! kernel rows scaled by input features: one contiguous loop over output features.
//!
//! Groups follow XLA: with `feature_group_count` G the input features and the output features
//! split into G consecutive groups that convolve pairwise; with `batch_group_count` G the input
//! batch splits into G consecutive groups and output feature group g reads batch group g.

use std::borrow::Cow;

use super::data_movement::{gather, row_major_strides};
use super::elementwise::convert;
use super::kernels::{accumulate_rows, accumulate_rows_int, par_rows};
use super::value::{round_float, wrap_int};
use super::{result_array, Arr, Buf, EvalError};
use crate::element_type::ElementType;
use crate::ir::{AttrList, AttrValue, ConvDimensionNumbers, Instruction, Window};

/// The shape of one convolution in canonical order.
struct Geometry {
    /// Input batch size.
    batch: usize,
    /// Kernel input features per group and output features (all groups).
    group_in: usize,
    out_features: usize,
    groups: usize,
    feature_groups: bool,
    out_batch: usize,
    out_spatial: Vec<usize>,
    /// `valid[s][o]`: for output coordinate `o` of spatial dimension `s`, the (input offset,
    /// kernel offset) pairs of the kernel positions that land on an input element.
    valid: Vec<Vec<Vec<(usize, usize)>>>,
    /// Stride of the input batch in the canonical input.
    batch_stride: usize,
}

pub(crate) fn convolution(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    let (ty, out_dims) = result_array(inst)?;
    let [lhs, rhs] = ops else {
        return Err(EvalError::invalid(inst, "convolution needs an input and a kernel"));
    };
    let dn = match inst.attr("dim_labels") {
        Some(AttrValue::ConvDims(d)) => d,
        _ => return Err(EvalError::invalid(inst, "convolution without dim_labels")),
    };
    let window = match inst.attr("window") {
        Some(AttrValue::Window(w)) => w.clone(),
        None => Window::default(),
        Some(_) => return Err(EvalError::invalid(inst, "window attribute is not a window")),
    };
    let [lhs_order, rhs_order, out_order] = orders(inst, dn, lhs.dims.len(), rhs.dims.len(), out_dims.len())?;
    let geo = geometry(inst, lhs, rhs, &out_dims, &window, &lhs_order, &rhs_order, &out_order)?;
    let (lcast, rcast) = (cast(&lhs.buf, lhs.ty, ty), cast(&rhs.buf, rhs.ty, ty));
    let lbuf = permuted(&lcast, &lhs.dims, &lhs_order);
    let rbuf = permuted(&rcast, &rhs.dims, &rhs_order);
    let canon = match (lbuf.as_ref(), rbuf.as_ref()) {
        (Buf::Float(l), Buf::Float(r)) => {
            Buf::Float(run(&geo, l, r, accumulate_rows).into_iter().map(|x| round_float(ty, x)).collect())
        }
        (Buf::Int(l), Buf::Int(r)) => {
            Buf::Int(run(&geo, l, r, accumulate_rows_int).into_iter().map(|x| wrap_int(ty, x)).collect())
        }
        (Buf::Pred(l), Buf::Pred(r)) => {
            // A predicate convolution is an or of ands: count the true products.
            let widen = |v: &[bool]| v.iter().map(|&b| i64::from(b)).collect::<Vec<_>>();
            let counts = run(&geo, &widen(l), &widen(r), accumulate_rows_int);
            Buf::Pred(counts.into_iter().map(|c| c != 0).collect())
        }
        (Buf::Complex(_), _) | (_, Buf::Complex(_)) => {
            return Err(EvalError::Unsupported { opcode: "convolution on complex numbers".into() })
        }
        _ => return Err(EvalError::invalid(inst, "convolution operands of different element types")),
    };
    // Canonical [batch, spatial.., feature] back to the output labels.
    let mut canon_dims = vec![geo.out_batch as i64];
    canon_dims.extend(geo.out_spatial.iter().map(|&d| d as i64));
    canon_dims.push(geo.out_features as i64);
    let canon_strides = row_major_strides(&canon_dims);
    let mut strides = vec![0i64; out_dims.len()];
    for (pos, &d) in out_order.iter().enumerate() {
        strides[d] = canon_strides[pos];
    }
    if strides == row_major_strides(&out_dims) {
        return Ok(Arr { ty, dims: out_dims, buf: canon });
    }
    let buf = super::value::map_buf!(&canon, v => gather(v, &out_dims, &strides, 0));
    Ok(Arr { ty, dims: out_dims, buf })
}

fn cast(buf: &Buf, from: ElementType, to: ElementType) -> Cow<'_, Buf> {
    if from == to {
        Cow::Borrowed(buf)
    } else {
        Cow::Owned(convert(buf, from, to))
    }
}

fn permuted<'a>(buf: &'a Buf, dims: &[i64], order: &[usize]) -> Cow<'a, Buf> {
    if order.iter().enumerate().all(|(i, &d)| i == d) {
        return Cow::Borrowed(buf);
    }
    let s = row_major_strides(dims);
    let pd: Vec<i64> = order.iter().map(|&d| dims[d]).collect();
    let ps: Vec<i64> = order.iter().map(|&d| s[d]).collect();
    Cow::Owned(super::value::map_buf!(buf, v => gather(v, &pd, &ps, 0)))
}

/// The canonical dimension orders of input, kernel and output, each checked to be a
/// permutation of its operand's dimensions.
fn orders(
    inst: &Instruction,
    dn: &ConvDimensionNumbers,
    lhs_rank: usize,
    rhs_rank: usize,
    out_rank: usize,
) -> Result<[Vec<usize>; 3], EvalError> {
    let perm = |dims: Vec<i64>, rank: usize| -> Result<Vec<usize>, EvalError> {
        let mut seen = vec![false; rank];
        let mut out = Vec::with_capacity(rank);
        for d in dims {
            match usize::try_from(d).ok().filter(|&d| d < rank) {
                Some(d) if !seen[d] => {
                    seen[d] = true;
                    out.push(d);
                }
                _ => return Err(EvalError::invalid(inst, "dim_labels do not name each dimension once")),
            }
        }
        if out.len() != rank {
            return Err(EvalError::invalid(inst, "dim_labels do not match the operand ranks"));
        }
        Ok(out)
    };
    let mut l = vec![dn.input_batch];
    l.extend(&dn.input_spatial);
    l.push(dn.input_feature);
    let mut r = dn.kernel_spatial.clone();
    r.extend([dn.kernel_input_feature, dn.kernel_output_feature]);
    let mut o = vec![dn.output_batch];
    o.extend(&dn.output_spatial);
    o.push(dn.output_feature);
    Ok([perm(l, lhs_rank)?, perm(r, rhs_rank)?, perm(o, out_rank)?])
}

#[allow(clippy::too_many_arguments)]
fn geometry(
    inst: &Instruction,
    lhs: &Arr,
    rhs: &Arr,
    out_dims: &[i64],
    window: &Window,
    lhs_order: &[usize],
    rhs_order: &[usize],
    out_order: &[usize],
) -> Result<Geometry, EvalError> {
    let bad = |m: &str| EvalError::invalid(inst, m.to_string());
    let spatial = lhs_order.len() - 2;
    if window.dims.len() != spatial || rhs_order.len() != spatial + 2 || out_order.len() != spatial + 2 {
        return Err(bad("the window does not have one dimension per spatial dimension"));
    }
    let fgc = usize::try_from(inst.attr_int("feature_group_count").unwrap_or(1)).unwrap_or(0);
    let bgc = usize::try_from(inst.attr_int("batch_group_count").unwrap_or(1)).unwrap_or(0);
    if fgc == 0 || bgc == 0 || (fgc > 1 && bgc > 1) {
        return Err(bad("group counts must be positive and not both above 1"));
    }
    let ld = |i: usize| lhs.dims[lhs_order[i]] as usize;
    let rd = |i: usize| rhs.dims[rhs_order[i]] as usize;
    let od = |i: usize| out_dims[out_order[i]] as usize;
    let (batch, features) = (ld(0), ld(spatial + 1));
    let (group_in, out_features) = (rd(spatial), rd(spatial + 1));
    let groups = fgc * bgc;
    if features != group_in * fgc
        || out_features % groups != 0
        || batch % bgc != 0
        || od(0) != batch / bgc
        || od(spatial + 1) != out_features
    {
        return Err(bad("convolution feature, batch or group sizes do not match"));
    }
    let in_spatial: Vec<usize> = (1..=spatial).map(ld).collect();
    let k_spatial: Vec<usize> = (0..spatial).map(rd).collect();
    let out_spatial: Vec<usize> = (1..=spatial).map(od).collect();
    // Canonical strides: input [batch, spatial.., feature], kernel [spatial.., in, out].
    let mut lstride = vec![features; spatial];
    for s in (0..spatial.saturating_sub(1)).rev() {
        lstride[s] = lstride[s + 1] * in_spatial[s + 1];
    }
    let batch_stride = if spatial == 0 { features } else { lstride[0] * in_spatial[0] };
    let mut rstride = vec![group_in * out_features; spatial];
    for s in (0..spatial.saturating_sub(1)).rev() {
        rstride[s] = rstride[s + 1] * k_spatial[s + 1];
    }
    let mut valid = Vec::with_capacity(spatial);
    for s in 0..spatial {
        let w = &window.dims[s];
        if w.size != k_spatial[s] as i64 || w.stride <= 0 || w.window_dilation <= 0 || w.base_dilation <= 0 {
            return Err(bad("window size differs from the kernel, or a stride or dilation is not positive"));
        }
        let bd = i128::from(w.base_dilation);
        let mut per_out = Vec::with_capacity(out_spatial[s]);
        for o in 0..out_spatial[s] {
            let mut list = Vec::new();
            for kr in 0..k_spatial[s] {
                // Reversal reads the kernel back to front at the same window position.
                let k = if w.window_reversal { k_spatial[s] - 1 - kr } else { kr };
                let pos = o as i128 * i128::from(w.stride) - i128::from(w.padding_low)
                    + k as i128 * i128::from(w.window_dilation);
                if pos < 0 || pos % bd != 0 || pos / bd >= in_spatial[s] as i128 {
                    continue;
                }
                list.push(((pos / bd) as usize * lstride[s], kr * rstride[s]));
            }
            per_out.push(list);
        }
        valid.push(per_out);
    }
    Ok(Geometry {
        batch,
        group_in,
        out_features,
        groups,
        feature_groups: fgc > 1,
        out_batch: batch / bgc,
        out_spatial,
        valid,
        batch_stride,
    })
}

/// The canonical result: one row of output features per (batch, spatial..) point.
fn run<T: Copy + Default + Send + Sync>(
    g: &Geometry,
    lhs: &[T],
    rhs: &[T],
    kernel: impl Fn(&mut [T], &[T], &[T], usize) + Sync,
) -> Vec<T> {
    let k = g.out_features;
    let points = g.out_batch * g.out_spatial.iter().product::<usize>();
    let mut out = vec![T::default(); points * k];
    let kernel_points: usize = g.valid.iter().map(|v| v.first().map_or(0, Vec::len)).product();
    let kg = k / g.groups;
    par_rows(&mut out, k, kernel_points * g.group_in * kg, |first, rows| {
        let mut o = vec![0usize; g.out_spatial.len()];
        let mut rest = first;
        for s in (0..o.len()).rev() {
            o[s] = rest % g.out_spatial[s];
            rest /= g.out_spatial[s];
        }
        let mut b = rest;
        let mut cur: Vec<(usize, usize)> = Vec::new();
        let mut next = Vec::new();
        for row in rows.chunks_mut(k) {
            cur.clear();
            cur.push((0, 0));
            for (s, &os) in o.iter().enumerate() {
                next.clear();
                for &(la, ra) in &cur {
                    next.extend(g.valid[s][os].iter().map(|&(lb, rb)| (la + lb, ra + rb)));
                }
                std::mem::swap(&mut cur, &mut next);
            }
            for grp in 0..g.groups {
                let (in_batch, in_feature) =
                    if g.feature_groups { (b, grp * g.group_in) } else { (grp * (g.batch / g.groups) + b, 0) };
                let acc = &mut row[grp * kg..(grp + 1) * kg];
                for &(lo, ro) in &cur {
                    let base = in_batch * g.batch_stride + lo + in_feature;
                    kernel(acc, &lhs[base..base + g.group_in], &rhs[ro + grp * kg..], k);
                }
            }
            // Next output point, spatial coordinates fastest.
            let mut s = o.len();
            loop {
                if s == 0 {
                    b += 1;
                    break;
                }
                s -= 1;
                o[s] += 1;
                if o[s] < g.out_spatial[s] {
                    break;
                }
                o[s] = 0;
            }
        }
    });
    out
}
