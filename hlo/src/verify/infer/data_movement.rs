//! Ops that move or re-view data: broadcast, reshape, transpose, slices, concatenate, pad,
//! reverse, iota, tuples, and the dynamic-dimension ops.

use super::{
    array, ash, checked_add, checked_mul, dim_index, is_dyn, list, plain, sh, size_eq, unique_dims, with_type, Ctx, Res,
};
use crate::element_type::ElementType;
use crate::ir::AttrValue;
use crate::shape::{ArrayShape, Shape, UNBOUNDED};

/// `broadcast(x), dimensions={..}`: operand dimension i becomes output dimension
/// `dimensions[i]`, of the same size, in increasing order; the output sizes are declared.
pub fn broadcast(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    let out = cx.declared_array()?;
    let dims = cx.ints("dimensions")?;
    if dims.len() != a.rank() {
        bail!(
            "broadcast.dimensions_count",
            "broadcast dimensions {} must name one output dimension per operand dimension of {}",
            list(dims),
            ash(a)
        );
    }
    let mut prev: Option<usize> = None;
    for (i, &d) in dims.iter().enumerate() {
        let o = dim_index(d, out.rank(), "broadcast.dimension_out_of_range", "broadcast output")?;
        if prev.is_some_and(|p| p >= o) {
            bail!("broadcast.dimensions_order", "broadcast dimensions {} must be strictly increasing", list(dims));
        }
        prev = Some(o);
        if !size_eq(a.dims[i], out.dims[o]) {
            bail!(
                "broadcast.dimension_size",
                "broadcast maps operand dimension {i} of size {} to output dimension {o} of size {} ({} to {})",
                a.dims[i],
                out.dims[o],
                ash(a),
                ash(out)
            );
        }
    }
    Ok(with_type(out, a.element_type))
}

/// The element count of a shape whose sizes are all known; `None` when one is unbounded.
fn known_count(a: &ArrayShape) -> Res<Option<i64>> {
    let mut n: i64 = 1;
    for &d in &a.dims {
        if d == UNBOUNDED {
            return Ok(None);
        }
        n = checked_mul(n, d)?;
    }
    Ok(Some(n))
}

pub fn reshape(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    let out = cx.declared_array()?;
    if let (Some(n), Some(m)) = (known_count(a)?, known_count(out)?) {
        // Bounded dynamic shapes reshape at their bounds; only fully static ones must agree
        // exactly.
        if n != m && a.is_static() && out.is_static() {
            bail!(
                "reshape.element_count",
                "reshape from {} ({} elements) to {} ({} elements) changes the element count",
                ash(a),
                n,
                ash(out),
                m
            );
        }
    }
    Ok(with_type(out, a.element_type))
}

pub fn dynamic_reshape(cx: &Ctx) -> Res<Shape> {
    cx.expect_at_least(1)?;
    let a = cx.arr(0)?;
    let out = cx.declared_array()?;
    if cx.ops.len() != out.rank() + 1 {
        bail!(
            "operands.count",
            "dynamic-reshape to rank {} needs {} size operands but has {}",
            out.rank(),
            out.rank(),
            cx.ops.len() - 1
        );
    }
    for i in 1..cx.ops.len() {
        let s = cx.arr(i)?;
        if !s.dims.is_empty() || !s.element_type.is_integral() {
            bail!(
                "dynamic_reshape.size_type",
                "dynamic-reshape size operand {i} must be an integer scalar but is {}",
                ash(s)
            );
        }
    }
    Ok(with_type(out, a.element_type))
}

/// A bitcast re-views the bytes: the declared shape is the result, and when both sides are
/// plain static arrays it must hold as many bits as the operand.
pub fn bitcast(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let declared = cx.declared();
    if let (Shape::Array(a), Shape::Array(out)) = (cx.op(0)?, &cx.inst.shape) {
        let untiled = |s: &ArrayShape| s.layout.as_ref().is_none_or(|l| l.tiles.is_empty() && l.element_size_bits == 0);
        if a.is_static() && out.is_static() && untiled(a) && untiled(out) {
            if let (Some(n), Some(m)) = (known_count(a)?, known_count(out)?) {
                let bits_in = checked_mul(n, i64::from(a.element_type.bit_width()))?;
                let bits_out = checked_mul(m, i64::from(out.element_type.bit_width()))?;
                if bits_in != bits_out {
                    bail!("bitcast.size_mismatch", "bitcast from {} to {} changes the size in bits", ash(a), ash(out));
                }
            }
        }
    }
    Ok(declared)
}

pub fn transpose(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    let perm = cx.ints("dimensions")?;
    if perm.len() != a.rank() {
        bail!(
            "transpose.permutation",
            "transpose dimensions {} are not a permutation of the dimensions of {}",
            list(perm),
            ash(a)
        );
    }
    let idx = unique_dims(perm, a.rank(), "transpose.permutation", "transpose")?;
    Ok(array(a.element_type, idx.iter().map(|&i| a.dims[i]).collect(), idx.iter().map(|&i| is_dyn(a, i)).collect()))
}

pub fn slice(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    let ranges = match cx.attr("slice") {
        Some(AttrValue::Slice(r)) => r,
        Some(_) => bail!("attr.kind", "slice attribute slice must be [start:limit:stride] ranges"),
        None => bail!("attr.missing", "slice needs a slice attribute"),
    };
    if ranges.len() != a.rank() {
        bail!("slice.rank", "slice gives {} ranges for {} of rank {}", ranges.len(), ash(a), a.rank());
    }
    let mut dims = Vec::with_capacity(ranges.len());
    for (i, r) in ranges.iter().enumerate() {
        if r.stride <= 0 {
            bail!("slice.bounds", "slice stride {} in dimension {i} must be positive", r.stride);
        }
        let size = a.dims[i];
        if r.start < 0 || r.limit < r.start || (size != UNBOUNDED && r.limit > size) {
            bail!("slice.bounds", "slice [{}:{}] in dimension {i} is out of bounds for {}", r.start, r.limit, ash(a));
        }
        let len = r.limit - r.start;
        dims.push(len / r.stride + i64::from(len % r.stride != 0));
    }
    Ok(array(a.element_type, dims, vec![false; a.rank()]))
}

/// Start indices of dynamic-slice and dynamic-update-slice: one integer scalar per dimension
/// (or, in the old form, a single vector of them), all of one type.
fn check_start_indices(cx: &Ctx, first: usize, rank: usize) -> Res<()> {
    let starts = cx.ops.len().saturating_sub(first);
    if starts == 1 && rank != 1 {
        let s = cx.arr(first)?;
        if s.rank() == 1 && s.dims[0] == rank as i64 && s.element_type.is_integral() {
            return Ok(());
        }
    }
    if starts != rank {
        bail!(
            "dynamic_slice.start_indices",
            "{} of rank {} needs {} start indices but has {}",
            cx.opcode(),
            rank,
            rank,
            starts
        );
    }
    let mut ty: Option<ElementType> = None;
    for i in first..cx.ops.len() {
        let s = cx.arr(i)?;
        if !s.dims.is_empty() || !s.element_type.is_integral() {
            bail!(
                "dynamic_slice.start_indices",
                "{} start index {} must be an integer scalar but is {}",
                cx.opcode(),
                i - first,
                ash(s)
            );
        }
        if ty.is_some_and(|t| t != s.element_type) {
            bail!("dynamic_slice.start_indices", "{} start indices must all have one type", cx.opcode());
        }
        ty = Some(s.element_type);
    }
    Ok(())
}

pub fn dynamic_slice(cx: &Ctx) -> Res<Shape> {
    cx.expect_at_least(1)?;
    let a = cx.arr(0)?;
    check_start_indices(cx, 1, a.rank())?;
    let sizes = cx.ints("dynamic_slice_sizes")?;
    if sizes.len() != a.rank() {
        bail!(
            "dynamic_slice.sizes",
            "dynamic_slice_sizes {} must have one size per dimension of {}",
            list(sizes),
            ash(a)
        );
    }
    for (i, &s) in sizes.iter().enumerate() {
        if s < 0 || (a.dims[i] != UNBOUNDED && s > a.dims[i]) {
            bail!("dynamic_slice.sizes", "dynamic slice size {s} in dimension {i} does not fit {}", ash(a));
        }
    }
    Ok(array(a.element_type, sizes.to_vec(), vec![false; sizes.len()]))
}

pub fn dynamic_update_slice(cx: &Ctx) -> Res<Shape> {
    cx.expect_at_least(2)?;
    let a = cx.arr(0)?;
    let u = cx.arr(1)?;
    if u.element_type != a.element_type {
        bail!("dynamic_update_slice.type", "update {} must have the element type of the operand {}", ash(u), ash(a));
    }
    if u.rank() != a.rank() {
        bail!("dynamic_update_slice.rank", "update {} must have the rank of the operand {}", ash(u), ash(a));
    }
    check_start_indices(cx, 2, a.rank())?;
    for i in 0..a.rank() {
        if u.dims[i] < 0 || (a.dims[i] != UNBOUNDED && u.dims[i] != UNBOUNDED && u.dims[i] > a.dims[i]) {
            bail!(
                "dynamic_update_slice.bounds",
                "update {} does not fit in operand {} in dimension {i}",
                ash(u),
                ash(a)
            );
        }
    }
    Ok(plain(a))
}

pub fn concatenate(cx: &Ctx) -> Res<Shape> {
    cx.expect_at_least(1)?;
    let first = cx.arr(0)?;
    let dims = cx.ints("dimensions")?;
    let [d] = dims else {
        bail!("concatenate.dimension", "concatenate needs exactly one dimension but has {}", list(dims));
    };
    if first.rank() == 0 {
        bail!("concatenate.dimension", "scalars {} cannot be concatenated", ash(first));
    }
    let d = dim_index(*d, first.rank(), "concatenate.dimension", "concatenate")?;
    let mut out = first.dims.clone();
    let mut dynamic = first.dynamic.clone();
    for i in 1..cx.ops.len() {
        let a = cx.arr(i)?;
        if a.element_type != first.element_type {
            bail!(
                "concatenate.type_mismatch",
                "concatenate operands differ in element type: {} vs {}",
                ash(first),
                ash(a)
            );
        }
        if a.rank() != first.rank() {
            bail!("concatenate.rank_mismatch", "concatenate operands differ in rank: {} vs {}", ash(first), ash(a));
        }
        for (j, size) in out.iter_mut().enumerate() {
            if j == d {
                *size = if *size == UNBOUNDED || a.dims[j] == UNBOUNDED {
                    UNBOUNDED
                } else {
                    checked_add(*size, a.dims[j])?
                };
                if let Some(slot) = dynamic.get_mut(j) {
                    *slot |= is_dyn(a, j);
                }
            } else if !size_eq(a.dims[j], first.dims[j]) {
                bail!(
                    "concatenate.dims_mismatch",
                    "concatenate operands {} and {} differ in dimension {j}, which is not the concatenated dimension {d}",
                    ash(first),
                    ash(a)
                );
            }
        }
    }
    Ok(array(first.element_type, out, dynamic))
}

/// `pad(x, v), padding=lo_hi_interior x ..`: edges may be negative (cropping), interior may
/// not; the result is `lo + hi + n + (n-1)*interior` and must not be negative.
pub fn pad(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    let a = cx.arr(0)?;
    let v = cx.arr(1)?;
    if !v.dims.is_empty() || v.element_type != a.element_type {
        bail!("pad.value", "padding value {} must be a scalar of the operand's type ({})", ash(v), ash(a));
    }
    let config = match cx.attr("padding") {
        Some(AttrValue::Padding(p)) => p,
        Some(_) => bail!("attr.kind", "pad attribute padding must be lo_hi_interior per dimension"),
        None => bail!("attr.missing", "pad needs a padding attribute"),
    };
    if config.len() != a.rank() {
        bail!("pad.rank", "padding has {} dimensions but operand {} has rank {}", config.len(), ash(a), a.rank());
    }
    let mut dims = Vec::with_capacity(config.len());
    for (i, p) in config.iter().enumerate() {
        if p.interior < 0 {
            bail!("pad.interior", "interior padding {} in dimension {i} must not be negative", p.interior);
        }
        let n = a.dims[i];
        if n == UNBOUNDED {
            dims.push(UNBOUNDED);
            continue;
        }
        let interior = checked_mul((n - 1).max(0), p.interior)?;
        let size = checked_add(checked_add(checked_add(n, p.low)?, p.high)?, interior)?;
        if size < 0 {
            bail!(
                "pad.negative_size",
                "padding {}_{}_{} makes dimension {i} of {} negative ({size})",
                p.low,
                p.high,
                p.interior,
                ash(a)
            );
        }
        dims.push(size);
    }
    Ok(array(a.element_type, dims, a.dynamic.clone()))
}

pub fn reverse(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    unique_dims(cx.ints("dimensions")?, a.rank(), "reverse.dimensions", "reverse")?;
    Ok(plain(a))
}

pub fn iota(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(0)?;
    let out = cx.declared_array()?;
    if out.rank() == 0 {
        bail!("iota.rank", "iota must produce an array of rank at least 1 but is declared {}", ash(out));
    }
    if out.element_type.is_pred() {
        bail!("iota.type", "iota cannot produce pred values");
    }
    dim_index(cx.int("iota_dimension")?, out.rank(), "iota.dimension", "iota")?;
    Ok(plain(out))
}

pub fn get_tuple_element(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let t = cx.op(0)?;
    let Shape::Tuple(elems) = t else {
        bail!("get_tuple_element.not_tuple", "get-tuple-element operand must be a tuple but is {}", sh(t));
    };
    let index = cx.int("index")?;
    match usize::try_from(index).ok().and_then(|i| elems.get(i)) {
        Some(e) => Ok(e.without_layout()),
        None => {
            bail!("get_tuple_element.index", "index {index} is out of range for {} of {} elements", sh(t), elems.len())
        }
    }
}

pub fn tuple(cx: &Ctx) -> Res<Shape> {
    Ok(Shape::Tuple(cx.ops.iter().map(|s| s.without_layout()).collect()))
}

pub fn get_dimension_size(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    let dims = cx.ints("dimensions")?;
    let [d] = dims else {
        bail!("get_dimension_size.dimension", "get-dimension-size needs one dimension but has {}", list(dims));
    };
    dim_index(*d, a.rank(), "get_dimension_size.dimension", "get-dimension-size")?;
    Ok(Shape::scalar(ElementType::S32))
}

pub fn set_dimension_size(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    let a = cx.arr(0)?;
    let s = cx.arr(1)?;
    if !s.dims.is_empty() || s.element_type != ElementType::S32 {
        bail!("set_dimension_size.size_type", "set-dimension-size size must be s32[] but is {}", ash(s));
    }
    let dims = cx.ints("dimensions")?;
    let [d] = dims else {
        bail!("set_dimension_size.dimension", "set-dimension-size needs one dimension but has {}", list(dims));
    };
    let d = dim_index(*d, a.rank(), "set_dimension_size.dimension", "set-dimension-size")?;
    let mut dynamic = a.dynamic.clone();
    dynamic.resize(a.rank(), false);
    dynamic[d] = true;
    Ok(array(a.element_type, a.dims.clone(), dynamic))
}
