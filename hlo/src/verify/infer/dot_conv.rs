//! Contractions and linear algebra: dot, convolution, fft, cholesky, triangular-solve.

use super::{array, ash, is_dyn, list, plain, size_eq, unique_dims, window_output_size, Ctx, Res};
use crate::element_type::ElementType;
use crate::ir::{AttrValue, FftType, TriangularTranspose, WindowDim};
use crate::shape::{ArrayShape, Shape};

/// Operand types a contraction accepts together: equal, or of one class (mixed float
/// precisions, mixed integer widths), as XLA allows with a preferred result type.
fn contraction_types(op: &str, lhs: &ArrayShape, rhs: &ArrayShape) -> Res<()> {
    let (l, r) = (lhs.element_type, rhs.element_type);
    let same_class = l == r
        || (l.is_float() && r.is_float())
        || (l.is_integral() && r.is_integral())
        || (l.is_complex() && r.is_complex());
    if !same_class {
        bail!(format_rule(op), "{op} operands have incompatible element types: {} vs {}", ash(lhs), ash(rhs));
    }
    Ok(())
}

fn format_rule(op: &str) -> &'static str {
    if op == "dot" {
        "dot.element_type_mismatch"
    } else {
        "convolution.element_type_mismatch"
    }
}

/// The result element type: the declared one (XLA's `preferred_element_type`) when the
/// declared shape is an array of a type the operands may accumulate into, else the lhs type.
fn result_type(cx: &Ctx, lhs: &ArrayShape) -> ElementType {
    match &cx.inst.shape {
        Shape::Array(d) if d.element_type.is_array_type() => d.element_type,
        _ => lhs.element_type,
    }
}

/// `dot(lhs, rhs)` with general dimension numbers: the result is the batch dimensions, then
/// lhs's free dimensions, then rhs's free dimensions.
pub fn dot(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    let lhs = cx.arr(0)?;
    let rhs = cx.arr(1)?;
    contraction_types("dot", lhs, rhs)?;
    let lb = cx.ints_or_empty("lhs_batch_dims")?;
    let rb = cx.ints_or_empty("rhs_batch_dims")?;
    let lc = cx.ints_or_empty("lhs_contracting_dims")?;
    let rc = cx.ints_or_empty("rhs_contracting_dims")?;
    if lb.len() != rb.len() {
        bail!(
            "dot.batch_dims_count",
            "dot has {} lhs batch dimensions {} but {} rhs batch dimensions {}",
            lb.len(),
            list(lb),
            rb.len(),
            list(rb)
        );
    }
    if lc.len() != rc.len() {
        bail!(
            "dot.contracting_dims_count",
            "dot has {} lhs contracting dimensions {} but {} rhs contracting dimensions {}",
            lc.len(),
            list(lc),
            rc.len(),
            list(rc)
        );
    }
    let lhs_used: Vec<i64> = lb.iter().chain(lc).copied().collect();
    let rhs_used: Vec<i64> = rb.iter().chain(rc).copied().collect();
    unique_dims(&lhs_used, lhs.rank(), "dot.dimension_numbers", "dot lhs batch/contracting")?;
    unique_dims(&rhs_used, rhs.rank(), "dot.dimension_numbers", "dot rhs batch/contracting")?;
    for (&l, &r) in lc.iter().zip(rc) {
        let (ls, rs) = (lhs.dims[l as usize], rhs.dims[r as usize]);
        if !size_eq(ls, rs) {
            bail!(
                "dot.contracting_dims_mismatch",
                "lhs contracting dimension {l} has size {ls} but rhs contracting dimension {r} has size {rs} ({} dot {})",
                ash(lhs),
                ash(rhs)
            );
        }
    }
    let mut dims = Vec::new();
    let mut dynamic = Vec::new();
    for (&l, &r) in lb.iter().zip(rb) {
        let (ls, rs) = (lhs.dims[l as usize], rhs.dims[r as usize]);
        if !size_eq(ls, rs) {
            bail!(
                "dot.batch_dims_mismatch",
                "lhs batch dimension {l} has size {ls} but rhs batch dimension {r} has size {rs} ({} dot {})",
                ash(lhs),
                ash(rhs)
            );
        }
        dims.push(ls);
        dynamic.push(is_dyn(lhs, l as usize));
    }
    for (side, used) in [(lhs, &lhs_used), (rhs, &rhs_used)] {
        for i in 0..side.rank() {
            if !used.contains(&(i as i64)) {
                dims.push(side.dims[i]);
                dynamic.push(is_dyn(side, i));
            }
        }
    }
    Ok(array(result_type(cx, lhs), dims, dynamic))
}

/// `ragged-dot(lhs, rhs, group_sizes)`: the grouping lives in dimension numbers no later
/// stage interprets yet, so only operand kinds are checked and the declared shape stands.
pub fn ragged_dot(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(3)?;
    let lhs = cx.arr(0)?;
    let rhs = cx.arr(1)?;
    contraction_types("dot", lhs, rhs)?;
    let g = cx.arr(2)?;
    if !g.element_type.is_integral() {
        bail!("ragged_dot.group_sizes", "ragged-dot group sizes {} must be integers", ash(g));
    }
    cx.declared_array()?;
    Ok(cx.declared())
}

/// `scaled-dot(lhs, lhs_scale, rhs, rhs_scale)`: the declared shape stands.
pub fn scaled_dot(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(4)?;
    for i in 0..4 {
        cx.arr(i)?;
    }
    cx.declared_array()?;
    Ok(cx.declared())
}

pub fn convolution(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    let lhs = cx.arr(0)?;
    let rhs = cx.arr(1)?;
    contraction_types("convolution", lhs, rhs)?;
    let dn = match cx.attr("dim_labels") {
        Some(AttrValue::ConvDims(d)) => d,
        Some(_) => bail!("attr.kind", "convolution attribute dim_labels is not a dimension labelling"),
        None => bail!("attr.missing", "convolution needs a dim_labels attribute"),
    };
    let window = cx.window()?;
    let spatial = dn.input_spatial.len();
    if dn.kernel_spatial.len() != spatial || dn.output_spatial.len() != spatial {
        bail!("convolution.dim_labels", "dim_labels give different spatial counts for input, kernel and output");
    }
    let rank = spatial + 2;
    if lhs.rank() != rank || rhs.rank() != rank {
        bail!(
            "convolution.rank",
            "convolution with {spatial} spatial dimensions needs rank-{rank} operands but got {} and {}",
            ash(lhs),
            ash(rhs)
        );
    }
    if window.dims.len() != spatial {
        bail!(
            "convolution.window_rank",
            "convolution window has {} dimensions but there are {spatial} spatial dimensions",
            window.dims.len()
        );
    }
    let input: Vec<i64> = [dn.input_batch, dn.input_feature].iter().chain(&dn.input_spatial).copied().collect();
    let kernel: Vec<i64> =
        [dn.kernel_input_feature, dn.kernel_output_feature].iter().chain(&dn.kernel_spatial).copied().collect();
    let output: Vec<i64> = [dn.output_batch, dn.output_feature].iter().chain(&dn.output_spatial).copied().collect();
    let input = unique_dims(&input, rank, "convolution.dim_labels", "convolution input")?;
    let kernel = unique_dims(&kernel, rank, "convolution.dim_labels", "convolution kernel")?;
    let output = unique_dims(&output, rank, "convolution.dim_labels", "convolution output")?;

    let fgc = cx.int_or("feature_group_count", 1)?;
    let bgc = cx.int_or("batch_group_count", 1)?;
    if fgc <= 0 || bgc <= 0 {
        bail!("convolution.group_count", "feature_group_count={fgc} and batch_group_count={bgc} must be positive");
    }
    if fgc > 1 && bgc > 1 {
        bail!("convolution.group_count", "feature_group_count={fgc} and batch_group_count={bgc} cannot both exceed 1");
    }
    let batch = lhs.dims[input[0]];
    let in_features = lhs.dims[input[1]];
    let kernel_in = rhs.dims[kernel[0]];
    let kernel_out = rhs.dims[kernel[1]];
    if in_features % fgc != 0 {
        bail!(
            "convolution.feature_group_count",
            "input features {in_features} are not divisible by feature_group_count={fgc}"
        );
    }
    if !size_eq(in_features / fgc, kernel_in) {
        bail!(
            "convolution.feature_mismatch",
            "input feature dimension has size {in_features} (feature_group_count={fgc}) but kernel input feature dimension has size {kernel_in} ({} conv {})",
            ash(lhs),
            ash(rhs)
        );
    }
    if kernel_out % fgc != 0 {
        bail!(
            "convolution.feature_group_count",
            "kernel output features {kernel_out} are not divisible by feature_group_count={fgc}"
        );
    }
    if batch % bgc != 0 {
        bail!("convolution.batch_group_count", "input batch {batch} is not divisible by batch_group_count={bgc}");
    }
    if kernel_out % bgc != 0 {
        bail!(
            "convolution.batch_group_count",
            "kernel output features {kernel_out} are not divisible by batch_group_count={bgc}"
        );
    }
    let mut dims = vec![0i64; rank];
    let mut dynamic = vec![false; rank];
    dims[output[0]] = batch / bgc;
    dynamic[output[0]] = is_dyn(lhs, input[0]);
    dims[output[1]] = kernel_out;
    for s in 0..spatial {
        let w: &WindowDim = &window.dims[s];
        let ks = rhs.dims[kernel[2 + s]];
        if !size_eq(w.size, ks) {
            bail!(
                "convolution.window_size_mismatch",
                "window size {} in spatial dimension {s} differs from the kernel's size {ks} ({})",
                w.size,
                ash(rhs)
            );
        }
        dims[output[2 + s]] = window_output_size(lhs.dims[input[2 + s]], w, "convolution")?;
        dynamic[output[2 + s]] = is_dyn(lhs, input[2 + s]);
    }
    Ok(array(result_type(cx, lhs), dims, dynamic))
}

pub fn fft(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    let ty = cx.word("fft_type", FftType::parse)?;
    let len = cx.ints("fft_length")?;
    if len.is_empty() || len.len() > 3 {
        bail!("fft.length", "fft_length {} must have 1 to 3 entries", list(len));
    }
    if a.rank() < len.len() {
        bail!(
            "fft.rank",
            "fft of {} dimensions needs an operand of rank at least {} but got {}",
            len.len(),
            len.len(),
            ash(a)
        );
    }
    let first = a.rank() - len.len();
    let mut dims = a.dims.clone();
    let last = len[len.len() - 1];
    let et = match ty {
        FftType::Fft | FftType::Ifft => {
            if !a.element_type.is_complex() {
                bail!("fft.operand_type", "{ty} needs a complex operand but got {}", ash(a));
            }
            for (i, &l) in len.iter().enumerate() {
                if !size_eq(a.dims[first + i], l) {
                    bail!(
                        "fft.length",
                        "{ty} fft_length {} does not match the minor dimensions of {}",
                        list(len),
                        ash(a)
                    );
                }
            }
            a.element_type
        }
        FftType::Rfft => {
            let out = match a.element_type {
                ElementType::F32 => ElementType::C64,
                ElementType::F64 => ElementType::C128,
                _ => bail!("fft.operand_type", "RFFT needs an f32 or f64 operand but got {}", ash(a)),
            };
            for (i, &l) in len.iter().enumerate() {
                if !size_eq(a.dims[first + i], l) {
                    bail!(
                        "fft.length",
                        "RFFT fft_length {} does not match the minor dimensions of {}",
                        list(len),
                        ash(a)
                    );
                }
            }
            dims[a.rank() - 1] = if last == 0 { 0 } else { last / 2 + 1 };
            out
        }
        FftType::Irfft => {
            let Some(out) = a.element_type.complex_component() else {
                bail!("fft.operand_type", "IRFFT needs a complex operand but got {}", ash(a));
            };
            for (i, &l) in len[..len.len() - 1].iter().enumerate() {
                if !size_eq(a.dims[first + i], l) {
                    bail!(
                        "fft.length",
                        "IRFFT fft_length {} does not match the minor dimensions of {}",
                        list(len),
                        ash(a)
                    );
                }
            }
            let want = if last == 0 { 0 } else { last / 2 + 1 };
            if !size_eq(a.dims[a.rank() - 1], want) {
                bail!(
                    "fft.length",
                    "IRFFT with fft_length {} needs a last dimension of {want} but got {}",
                    list(len),
                    ash(a)
                );
            }
            dims[a.rank() - 1] = last;
            out
        }
    };
    Ok(array(et, dims, a.dynamic.clone()))
}

/// The two minor dimensions of a batched matrix, which must be square.
fn square_minor(a: &ArrayShape, op: &str, rule: &'static str) -> Res<i64> {
    if a.rank() < 2 {
        bail!(rule, "{op} needs an operand of rank at least 2 but got {}", ash(a));
    }
    let (r, c) = (a.dims[a.rank() - 2], a.dims[a.rank() - 1]);
    if !size_eq(r, c) {
        bail!(rule, "{op} needs square matrices but got {}", ash(a));
    }
    Ok(r)
}

pub fn cholesky(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    if !a.element_type.is_floating_or_complex() {
        bail!("cholesky.operand_type", "cholesky needs a floating or complex operand but got {}", ash(a));
    }
    square_minor(a, "cholesky", "cholesky.not_square")?;
    cx.bool_or("lower", false)?;
    Ok(plain(a))
}

pub fn triangular_solve(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    let a = cx.arr(0)?;
    let b = cx.arr(1)?;
    if a.element_type != b.element_type || !a.element_type.is_floating_or_complex() {
        bail!(
            "triangular_solve.type",
            "triangular-solve needs floating or complex operands of one type but got {} and {}",
            ash(a),
            ash(b)
        );
    }
    let n = square_minor(a, "triangular-solve", "triangular_solve.a_not_square")?;
    if b.rank() != a.rank() {
        bail!("triangular_solve.rank", "triangular-solve operands differ in rank: {} and {}", ash(a), ash(b));
    }
    let batch = a.rank() - 2;
    if !super::dims_eq(&a.dims[..batch], &b.dims[..batch]) {
        bail!("triangular_solve.batch_mismatch", "triangular-solve batch dimensions differ: {} and {}", ash(a), ash(b));
    }
    let left = cx.bool_or("left_side", false)?;
    let solved = if left { b.dims[b.rank() - 2] } else { b.dims[b.rank() - 1] };
    if !size_eq(n, solved) {
        bail!(
            "triangular_solve.dims_mismatch",
            "triangular-solve with left_side={left}: a {} does not fit b {}",
            ash(a),
            ash(b)
        );
    }
    if cx.attr("transpose_a").is_some() {
        cx.word("transpose_a", TriangularTranspose::parse)?;
    }
    Ok(plain(b))
}
