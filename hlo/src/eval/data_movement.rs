//! Data movement: broadcast, reshape, transpose, slice, reverse, pad, concatenate, iota.
//!
//! Most of these read the operand through an affine map (a base offset and one stride per
//! result dimension), so one strided-gather kernel serves them all.

use super::value::map_buf;
use super::{result_array, Arr, Buf, EvalError};
use crate::ir::{AttrList, AttrValue, Instruction, Opcode};

pub(crate) fn row_major_strides(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// `out[idx] = src[base + sum(idx[d] * strides[d])]` over `dims` in row-major order.
pub(crate) fn gather<T: Copy>(src: &[T], dims: &[i64], strides: &[i64], base: i64) -> Vec<T> {
    let n: i64 = dims.iter().product();
    let mut out = Vec::with_capacity(n as usize);
    if n == 0 {
        return out;
    }
    let rank = dims.len();
    if rank == 0 {
        out.push(src[base as usize]);
        return out;
    }
    let inner = dims[rank - 1];
    let inner_stride = strides[rank - 1];
    let mut idx = vec![0i64; rank];
    let mut off = base;
    loop {
        if inner_stride == 1 {
            out.extend_from_slice(&src[off as usize..(off + inner) as usize]);
        } else {
            let mut o = off;
            for _ in 0..inner {
                out.push(src[o as usize]);
                o += inner_stride;
            }
        }
        // Advance the outer dimensions like an odometer.
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            off += strides[d];
            if idx[d] < dims[d] {
                break;
            }
            off -= strides[d] * dims[d];
            idx[d] = 0;
        }
    }
}

/// `dst[base + sum(idx[d] * strides[d])] = src[idx]` for `src` in row-major order over `dims`.
fn scatter<T: Copy>(dst: &mut [T], src: &[T], dims: &[i64], strides: &[i64], base: i64) {
    let rank = dims.len();
    let mut idx = vec![0i64; rank];
    let mut off = base;
    for &v in src {
        dst[off as usize] = v;
        let mut d = rank;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            off += strides[d];
            if idx[d] < dims[d] {
                break;
            }
            off -= strides[d] * dims[d];
            idx[d] = 0;
        }
    }
}

fn ints<'a>(inst: &'a Instruction, name: &str) -> Result<&'a [i64], EvalError> {
    inst.attr_ints(name).ok_or_else(|| EvalError::invalid(inst, format!("missing attribute {name}")))
}

fn one<'a>(inst: &Instruction, ops: &[&'a Arr]) -> Result<&'a Arr, EvalError> {
    match ops {
        [a] => Ok(a),
        _ => Err(EvalError::invalid(inst, format!("expected 1 operand, found {}", ops.len()))),
    }
}

fn check_dim(inst: &Instruction, d: i64, rank: usize) -> Result<usize, EvalError> {
    usize::try_from(d)
        .ok()
        .filter(|&d| d < rank)
        .ok_or_else(|| EvalError::invalid(inst, format!("dimension {d} out of range")))
}

pub(crate) fn eval(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    let (ty, dims) = result_array(inst)?;
    let n: i64 = dims.iter().product();
    let buf = match inst.opcode {
        Opcode::Reshape => {
            let a = one(inst, ops)?;
            if a.len() as i64 != n {
                return Err(EvalError::invalid(inst, "reshape changes the element count"));
            }
            a.buf.clone()
        }
        Opcode::Broadcast => {
            let a = one(inst, ops)?;
            let map = ints(inst, "dimensions")?;
            if map.len() != a.dims.len() {
                return Err(EvalError::invalid(inst, "broadcast dimensions do not match the operand rank"));
            }
            let src_strides = row_major_strides(&a.dims);
            let mut strides = vec![0i64; dims.len()];
            for (i, &d) in map.iter().enumerate() {
                let d = check_dim(inst, d, dims.len())?;
                if a.dims[i] != dims[d] && a.dims[i] != 1 {
                    return Err(EvalError::invalid(inst, "broadcast dimension sizes differ"));
                }
                if a.dims[i] == dims[d] {
                    strides[d] = src_strides[i];
                }
            }
            map_buf!(&a.buf, v => gather(v, &dims, &strides, 0))
        }
        Opcode::Transpose => {
            let a = one(inst, ops)?;
            let perm = ints(inst, "dimensions")?;
            if perm.len() != a.dims.len() {
                return Err(EvalError::invalid(inst, "permutation does not match the operand rank"));
            }
            let src_strides = row_major_strides(&a.dims);
            let mut strides = Vec::with_capacity(perm.len());
            for (i, &p) in perm.iter().enumerate() {
                let p = check_dim(inst, p, a.dims.len())?;
                if a.dims[p] != dims[i] {
                    return Err(EvalError::invalid(inst, "transpose result dimensions differ"));
                }
                strides.push(src_strides[p]);
            }
            map_buf!(&a.buf, v => gather(v, &dims, &strides, 0))
        }
        Opcode::Slice => {
            let a = one(inst, ops)?;
            let Some(AttrValue::Slice(ranges)) = inst.attr("slice") else {
                return Err(EvalError::invalid(inst, "missing slice attribute"));
            };
            if ranges.len() != a.dims.len() {
                return Err(EvalError::invalid(inst, "slice does not match the operand rank"));
            }
            let src_strides = row_major_strides(&a.dims);
            let mut base = 0;
            let mut strides = Vec::with_capacity(ranges.len());
            for (d, r) in ranges.iter().enumerate() {
                let count =
                    if r.stride > 0 && r.limit > r.start { (r.limit - r.start + r.stride - 1) / r.stride } else { 0 };
                if r.start < 0 || r.limit > a.dims[d] || r.stride <= 0 || count != dims[d] {
                    return Err(EvalError::invalid(inst, "slice out of range"));
                }
                base += r.start * src_strides[d];
                strides.push(r.stride * src_strides[d]);
            }
            map_buf!(&a.buf, v => gather(v, &dims, &strides, base))
        }
        Opcode::Reverse => {
            let a = one(inst, ops)?;
            let rev = ints(inst, "dimensions")?;
            let mut strides = row_major_strides(&a.dims);
            let mut base = 0;
            for &d in rev {
                let d = check_dim(inst, d, a.dims.len())?;
                if dims[d] > 0 {
                    base += (dims[d] - 1) * strides[d];
                }
                strides[d] = -strides[d];
            }
            map_buf!(&a.buf, v => gather(v, &dims, &strides, base))
        }
        Opcode::Pad => pad(inst, ops, &dims)?,
        Opcode::DynamicSlice => {
            let Some((a, idx)) = ops.split_first() else {
                return Err(EvalError::invalid(inst, "dynamic-slice without operands"));
            };
            let starts = clamped_starts(inst, &a.dims, idx, &dims)?;
            let strides = row_major_strides(&a.dims);
            let base = starts.iter().zip(&strides).map(|(s, t)| s * t).sum();
            map_buf!(&a.buf, v => gather(v, &dims, &strides, base))
        }
        Opcode::DynamicUpdateSlice => {
            let [a, upd, idx @ ..] = ops else {
                return Err(EvalError::invalid(inst, "dynamic-update-slice needs an operand and an update"));
            };
            if a.dims != dims {
                return Err(EvalError::invalid(inst, "dynamic-update-slice result differs from its operand"));
            }
            let starts = clamped_starts(inst, &a.dims, idx, &upd.dims)?;
            let strides = row_major_strides(&a.dims);
            let base = starts.iter().zip(&strides).map(|(s, t)| s * t).sum();
            let mut out = a.buf.clone();
            place(inst, &mut out, &upd.buf, &upd.dims, &strides, base)?;
            out
        }
        Opcode::Concatenate => {
            let dim = match ints(inst, "dimensions")? {
                [d] => check_dim(inst, *d, dims.len())?,
                _ => return Err(EvalError::invalid(inst, "concatenate needs one dimension")),
            };
            let Some(first) = ops.first() else {
                return Err(EvalError::invalid(inst, "concatenate without operands"));
            };
            let out_strides = row_major_strides(&dims);
            let mut out = map_buf!(&first.buf, v => vec![v.first().copied().unwrap_or_default(); n as usize]);
            let mut at = 0i64;
            for a in ops {
                let fits = a.dims.len() == dims.len()
                    && a.dims.iter().zip(&dims).enumerate().all(|(d, (x, y))| d == dim || x == y)
                    && at + a.dims[dim] <= dims[dim];
                if !fits {
                    return Err(EvalError::invalid(inst, "concatenate operand shapes do not fit the result"));
                }
                place(inst, &mut out, &a.buf, &a.dims, &out_strides, at * out_strides[dim])?;
                at += a.dims[dim];
            }
            out
        }
        Opcode::Iota => {
            let d = check_dim(inst, inst.attr_int("iota_dimension").unwrap_or(0), dims.len().max(1))?;
            let strides = row_major_strides(&dims);
            let (size, stride) = (dims.get(d).copied().unwrap_or(1), strides.get(d).copied().unwrap_or(1));
            let index = |i: i64| (i / stride) % size.max(1);
            if ty.is_float() {
                Buf::Float((0..n).map(|i| super::value::round_float(ty, index(i) as f64)).collect())
            } else if ty.is_complex() {
                Buf::Complex((0..n).map(|i| (index(i) as f64, 0.0)).collect())
            } else if ty == crate::element_type::ElementType::Pred {
                Buf::Pred((0..n).map(|i| index(i) != 0).collect())
            } else {
                Buf::Int((0..n).map(|i| super::value::wrap_int(ty, index(i))).collect())
            }
        }
        op => return Err(EvalError::Unsupported { opcode: op.name().to_string() }),
    };
    Ok(Arr { ty, dims, buf })
}

/// Start indices clamped so the window of `sizes` fits, as XLA defines out-of-range starts.
fn clamped_starts(inst: &Instruction, dims: &[i64], idx: &[&Arr], sizes: &[i64]) -> Result<Vec<i64>, EvalError> {
    if idx.len() != dims.len() || sizes.len() != dims.len() {
        return Err(EvalError::invalid(inst, "one start index per dimension is needed"));
    }
    let mut starts = Vec::with_capacity(dims.len());
    for ((i, &d), &size) in idx.iter().zip(dims).zip(sizes) {
        let Buf::Int(v) = &i.buf else {
            return Err(EvalError::invalid(inst, "start indices must be integers"));
        };
        if v.len() != 1 || size > d || size < 0 {
            return Err(EvalError::invalid(inst, "start index is not a scalar or the window does not fit"));
        }
        let s = if i.ty == crate::element_type::ElementType::U64 && v[0] < 0 { i64::MAX } else { v[0] };
        starts.push(s.clamp(0, d - size));
    }
    Ok(starts)
}

/// Copies `src` (of `dims`) into `dst` at `base` with the destination's `strides`.
fn place(
    inst: &Instruction,
    dst: &mut Buf,
    src: &Buf,
    dims: &[i64],
    strides: &[i64],
    base: i64,
) -> Result<(), EvalError> {
    match (dst, src) {
        (Buf::Pred(d), Buf::Pred(s)) => scatter(d, s, dims, strides, base),
        (Buf::Int(d), Buf::Int(s)) => scatter(d, s, dims, strides, base),
        (Buf::Float(d), Buf::Float(s)) => scatter(d, s, dims, strides, base),
        (Buf::Complex(d), Buf::Complex(s)) => scatter(d, s, dims, strides, base),
        _ => return Err(EvalError::invalid(inst, "operands of different element types")),
    }
    Ok(())
}

fn pad(inst: &Instruction, ops: &[&Arr], dims: &[i64]) -> Result<Buf, EvalError> {
    let [a, value] = ops else {
        return Err(EvalError::invalid(inst, "pad needs an operand and a padding value"));
    };
    let Some(AttrValue::Padding(cfg)) = inst.attr("padding") else {
        return Err(EvalError::invalid(inst, "missing padding attribute"));
    };
    if cfg.len() != a.dims.len() || value.len() != 1 {
        return Err(EvalError::invalid(inst, "padding does not match the operand"));
    }
    let n: i64 = dims.iter().product();
    let mut out = map_buf!(&value.buf, v => vec![v[0]; n as usize]);
    let out_strides = row_major_strides(dims);
    // Negative low/high padding crops: slice the operand to the part that lands inside.
    let mut src_lo = vec![0i64; cfg.len()];
    let mut src_dims = a.dims.clone();
    let mut base = 0i64;
    let mut strides = Vec::with_capacity(cfg.len());
    for (d, p) in cfg.iter().enumerate() {
        if p.interior < 0 {
            return Err(EvalError::invalid(inst, "negative interior padding"));
        }
        let step = p.interior + 1;
        let expect = p.low + p.high + if a.dims[d] > 0 { (a.dims[d] - 1) * step + 1 } else { 0 };
        if expect != dims[d] {
            return Err(EvalError::invalid(inst, "padding does not produce the result shape"));
        }
        // First source index whose position low + i*step is >= 0, last one < dims[d].
        let first = if p.low >= 0 { 0 } else { (-p.low + step - 1) / step };
        let last = if a.dims[d] == 0 { -1 } else { (a.dims[d] - 1).min((dims[d] - 1 - p.low).div_euclid(step)) };
        src_lo[d] = first;
        src_dims[d] = (last - first + 1).max(0);
        base += (p.low + first * step) * out_strides[d];
        strides.push(step * out_strides[d]);
    }
    if src_dims.contains(&0) {
        return Ok(out);
    }
    let src_strides = row_major_strides(&a.dims);
    let src_base: i64 = src_lo.iter().zip(&src_strides).map(|(l, s)| l * s).sum();
    let src = map_buf!(&a.buf, v => gather(v, &src_dims, &src_strides, src_base));
    place(inst, &mut out, &src, &src_dims, &strides, base)?;
    Ok(out)
}
