//! Reductions and their relatives: reduce, reduce-window, select-and-scatter, sort, topk and
//! the batch-norm ops.

use super::{
    array, ash, check_reducer, dim_index, dims_eq, is_dyn, plain, scalar_type, sh, unique_dims, window_output_size,
    Ctx, Res,
};
use crate::element_type::ElementType;
use crate::ir::Window;
use crate::shape::{ArrayShape, Shape};

/// Splits `N inputs ++ N inits`, checking the inputs share dimensions and the inits are
/// scalars.
fn inputs_and_inits<'a>(cx: &Ctx<'a>) -> Res<(Vec<&'a ArrayShape>, Vec<&'a Shape>)> {
    let n = cx.ops.len() / 2;
    if cx.ops.is_empty() || !cx.ops.len().is_multiple_of(2) {
        bail!("operands.count", "{} takes N inputs and N init values but has {} operands", cx.opcode(), cx.ops.len());
    }
    let mut inputs: Vec<&'a ArrayShape> = Vec::with_capacity(n);
    for i in 0..n {
        let a = cx.arr(i)?;
        if let Some(&first) = inputs.first() {
            if !dims_eq(&first.dims, &a.dims) {
                bail!(
                    "reduce.inputs_dims_mismatch",
                    "{} inputs differ in dimensions: {} vs {}",
                    cx.opcode(),
                    ash(first),
                    ash(a)
                );
            }
        }
        inputs.push(a);
    }
    let mut inits = Vec::with_capacity(n);
    for i in n..2 * n {
        let s = cx.op(i)?;
        if scalar_type(s).is_none() {
            bail!("reduce.init_not_scalar", "{} init value {} must be a scalar but is {}", cx.opcode(), i - n, sh(s));
        }
        inits.push(s);
    }
    Ok((inputs, inits))
}

fn results(types: &[ElementType], dims: Vec<i64>, dynamic: Vec<bool>) -> Shape {
    if types.len() == 1 {
        return array(types[0], dims, dynamic);
    }
    Shape::Tuple(types.iter().map(|&t| array(t, dims.clone(), dynamic.clone())).collect())
}

pub fn reduce(cx: &Ctx) -> Res<Shape> {
    let (inputs, inits) = inputs_and_inits(cx)?;
    let first = inputs[0];
    let reduced = unique_dims(cx.ints("dimensions")?, first.rank(), "reduce.dimensions", "reduce")?;
    let f = cx.comp("to_apply")?;
    let in_types: Vec<ElementType> = inputs.iter().map(|a| a.element_type).collect();
    let types = check_reducer(&f, &inits, &in_types, "reduce.computation_signature", "reduce")?;
    let keep: Vec<usize> = (0..first.rank()).filter(|i| !reduced.contains(i)).collect();
    Ok(results(&types, keep.iter().map(|&i| first.dims[i]).collect(), keep.iter().map(|&i| is_dyn(first, i)).collect()))
}

/// Output dimensions of sliding `window` over `base`.
fn windowed(base: &ArrayShape, window: &Window, op: &str) -> Res<(Vec<i64>, Vec<bool>)> {
    if window.dims.len() != base.rank() {
        bail!(
            "window.rank",
            "{op} window has {} dimensions but the operand {} has rank {}",
            window.dims.len(),
            ash(base),
            base.rank()
        );
    }
    let mut dims = Vec::with_capacity(base.rank());
    for (i, w) in window.dims.iter().enumerate() {
        dims.push(window_output_size(base.dims[i], w, op)?);
    }
    Ok((dims, base.dynamic.clone()))
}

pub fn reduce_window(cx: &Ctx) -> Res<Shape> {
    let (inputs, inits) = inputs_and_inits(cx)?;
    let (dims, dynamic) = windowed(inputs[0], &cx.window()?, "reduce-window")?;
    let f = cx.comp("to_apply")?;
    let in_types: Vec<ElementType> = inputs.iter().map(|a| a.element_type).collect();
    let types = check_reducer(&f, &inits, &in_types, "reduce_window.computation_signature", "reduce-window")?;
    Ok(results(&types, dims, dynamic))
}

/// `select-and-scatter(operand, source, init)`: `select` is `(T, T) -> pred[]`, `scatter` a
/// binary reduction over the source type, and the source is shaped like the reduce-window of
/// the operand.
pub fn select_and_scatter(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(3)?;
    let a = cx.arr(0)?;
    let src = cx.arr(1)?;
    let init = cx.op(2)?;
    if scalar_type(init) != Some(a.element_type) {
        bail!("select_and_scatter.init", "init value {} must be a scalar of the operand's type ({})", sh(init), ash(a));
    }
    let select = cx.comp("select")?;
    let t = Shape::scalar(a.element_type);
    let params_ok = select.parameters.len() == 2 && select.parameters.iter().all(|p| p.compatible(&t));
    if !params_ok || scalar_type(&select.result) != Some(ElementType::Pred) {
        bail!(
            "select_and_scatter.select_signature",
            "select computation must be ({0}, {0}) -> pred[] but is ({1}) -> {2}",
            sh(&t),
            select.parameters.iter().map(sh).collect::<Vec<_>>().join(", "),
            sh(&select.result)
        );
    }
    let scatter = cx.comp("scatter")?;
    check_reducer(&scatter, &[init], &[src.element_type], "select_and_scatter.scatter_signature", "scatter")?;
    let (dims, _) = windowed(a, &cx.window()?, "select-and-scatter")?;
    if !dims_eq(&dims, &src.dims) {
        bail!(
            "select_and_scatter.source_shape",
            "source {} must have the windowed operand's dimensions {}",
            ash(src),
            sh(&array(src.element_type, dims, vec![]))
        );
    }
    Ok(plain(a))
}

/// `sort(x0..xn-1), dimensions={d}, to_apply=cmp`: cmp is `(T0, T0, T1, T1, ...) -> pred[]`.
pub fn sort(cx: &Ctx) -> Res<Shape> {
    cx.expect_at_least(1)?;
    let first = cx.arr(0)?;
    let mut arrays = Vec::with_capacity(cx.ops.len());
    for i in 0..cx.ops.len() {
        let a = cx.arr(i)?;
        if !dims_eq(&a.dims, &first.dims) {
            bail!("sort.dims_mismatch", "sort operands differ in dimensions: {} vs {}", ash(first), ash(a));
        }
        arrays.push(a);
    }
    let dims = cx.ints("dimensions")?;
    let [d] = dims else {
        bail!("sort.dimension", "sort needs exactly one dimension");
    };
    if first.rank() > 0 {
        dim_index(*d, first.rank(), "sort.dimension", "sort")?;
    }
    cx.bool_or("is_stable", false)?;
    let cmp = cx.comp("to_apply")?;
    let mut ok = cmp.parameters.len() == 2 * arrays.len();
    for (i, a) in arrays.iter().enumerate() {
        let t = Shape::scalar(a.element_type);
        for p in [2 * i, 2 * i + 1] {
            ok &= cmp.parameters.get(p).is_some_and(|s| s.compatible(&t));
        }
    }
    if !ok || scalar_type(&cmp.result) != Some(ElementType::Pred) {
        let want: Vec<String> =
            arrays.iter().flat_map(|a| [a.element_type, a.element_type]).map(|t| format!("{t}[]")).collect();
        bail!(
            "sort.comparator_signature",
            "sort comparator must be ({}) -> pred[] but is ({}) -> {}",
            want.join(", "),
            cmp.parameters.iter().map(sh).collect::<Vec<_>>().join(", "),
            sh(&cmp.result)
        );
    }
    if arrays.len() == 1 {
        return Ok(plain(first));
    }
    Ok(Shape::Tuple(arrays.iter().map(|a| plain(a)).collect()))
}

pub fn topk(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    if a.rank() == 0 {
        bail!("topk.rank", "topk needs an operand of rank at least 1 but got {}", ash(a));
    }
    let k = cx.int("k")?;
    let last = a.dims[a.rank() - 1];
    if k < 0 || (last >= 0 && k > last) {
        bail!("topk.k", "k={k} must be between 0 and the last dimension of {}", ash(a));
    }
    cx.bool_or("largest", true)?;
    let mut dims = a.dims.clone();
    dims[a.rank() - 1] = k;
    Ok(Shape::Tuple(vec![
        array(a.element_type, dims.clone(), a.dynamic.clone()),
        array(ElementType::S32, dims, a.dynamic.clone()),
    ]))
}

/// The operand and its feature dimension's size, checking `feature_index` and `epsilon`.
fn batch_norm_operand<'a>(cx: &Ctx<'a>) -> Res<(&'a ArrayShape, i64)> {
    let a = cx.arr(0)?;
    if !a.element_type.is_float() {
        bail!("batch_norm.operand_type", "{} needs a floating-point operand but got {}", cx.opcode(), ash(a));
    }
    let f = dim_index(cx.int("feature_index")?, a.rank(), "batch_norm.feature_index", "feature_index")?;
    match cx.attr("epsilon") {
        Some(crate::ir::AttrValue::Float(_)) | Some(crate::ir::AttrValue::Int(_)) => {}
        Some(_) => bail!("attr.kind", "{} attribute epsilon must be a number", cx.opcode()),
        None => bail!("attr.missing", "{} needs an epsilon attribute", cx.opcode()),
    }
    Ok((a, a.dims[f]))
}

/// Checks that operand `i` is a vector of `features` elements of the operand's type.
fn feature_vector(cx: &Ctx, i: usize, what: &str, a: &ArrayShape, features: i64) -> Res<Shape> {
    let v = cx.arr(i)?;
    if v.element_type != a.element_type || v.rank() != 1 || !super::size_eq(v.dims[0], features) {
        bail!(
            "batch_norm.feature_vector",
            "{} {what} must be {}[{features}] for operand {} but is {}",
            cx.opcode(),
            a.element_type,
            ash(a),
            ash(v)
        );
    }
    Ok(plain(v))
}

pub fn batch_norm_training(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(3)?;
    let (a, f) = batch_norm_operand(cx)?;
    let scale = feature_vector(cx, 1, "scale", a, f)?;
    feature_vector(cx, 2, "offset", a, f)?;
    Ok(Shape::Tuple(vec![plain(a), scale.clone(), scale]))
}

pub fn batch_norm_inference(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(5)?;
    let (a, f) = batch_norm_operand(cx)?;
    for (i, what) in [(1, "scale"), (2, "offset"), (3, "mean"), (4, "variance")] {
        feature_vector(cx, i, what, a, f)?;
    }
    Ok(plain(a))
}

pub fn batch_norm_grad(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(5)?;
    let (a, f) = batch_norm_operand(cx)?;
    let scale = feature_vector(cx, 1, "scale", a, f)?;
    feature_vector(cx, 2, "mean", a, f)?;
    feature_vector(cx, 3, "variance", a, f)?;
    let g = cx.arr(4)?;
    if g.element_type != a.element_type || !dims_eq(&g.dims, &a.dims) {
        bail!("batch_norm.grad_output", "batch-norm-grad output gradient {} must match the operand {}", ash(g), ash(a));
    }
    Ok(Shape::Tuple(vec![plain(a), scale.clone(), scale]))
}
