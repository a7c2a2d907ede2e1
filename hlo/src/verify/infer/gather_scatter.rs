//! Gather and scatter with XLA's dimension numbers, batching dimensions included.
//!
//! Both view the indices as if `index_vector_dim` existed: when it equals the indices' rank,
//! the indices get an implicit trailing dimension of size 1.

use super::{array, ash, check_reducer, dims_eq, is_dyn, list, plain, size_eq, sorted_dims, unique_dims, Ctx, Res};
use crate::element_type::ElementType;
use crate::shape::{ArrayShape, Shape, UNBOUNDED};

/// The indices' dimensions with the implicit index vector dimension made explicit, and that
/// dimension's position.
fn expanded_indices(cx: &Ctx, indices: &ArrayShape, op: &str) -> Res<(Vec<i64>, usize)> {
    if !indices.element_type.is_integral() {
        bail!(
            if op == "gather" { "gather.indices_type" } else { "scatter.indices_type" },
            "{op} indices must be integers but are {}",
            ash(indices)
        );
    }
    let ivd = cx.int("index_vector_dim")?;
    let ivd = match usize::try_from(ivd) {
        Ok(v) if v <= indices.rank() => v,
        _ => bail!(
            if op == "gather" { "gather.index_vector_dim" } else { "scatter.index_vector_dim" },
            "index_vector_dim={ivd} is out of range for indices {}",
            ash(indices)
        ),
    };
    let mut dims = indices.dims.clone();
    if ivd == indices.rank() {
        dims.push(1);
    }
    Ok((dims, ivd))
}

/// Batching dimensions of the operand and of the indices: paired one to one, of equal
/// sizes, the indices' never the index vector dimension.
fn check_batching(
    operand: &ArrayShape,
    operand_batching: &[usize],
    indices: &ArrayShape,
    indices_batching_raw: &[i64],
    ivd: usize,
    rule: &'static str,
) -> Res<()> {
    let ib = unique_dims(indices_batching_raw, indices.rank(), rule, "indices batching")?;
    if ib.len() != operand_batching.len() {
        bail!(
            rule,
            "{} operand batching dimensions but {} indices batching dimensions {}",
            operand_batching.len(),
            ib.len(),
            list(indices_batching_raw)
        );
    }
    for (&o, &i) in operand_batching.iter().zip(&ib) {
        if i == ivd {
            bail!(rule, "indices batching dimension {i} cannot be the index vector dimension");
        }
        if !size_eq(operand.dims[o], indices.dims[i]) {
            bail!(
                rule,
                "operand batching dimension {o} of {} and indices batching dimension {i} of {} differ in size",
                ash(operand),
                ash(indices)
            );
        }
    }
    Ok(())
}

pub fn gather(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    let operand = cx.arr(0)?;
    let indices = cx.arr(1)?;
    let (expanded, ivd) = expanded_indices(cx, indices, "gather")?;
    let rank = operand.rank();
    let offset_dims = cx.ints("offset_dims")?;
    let collapsed_raw = cx.ints_or_empty("collapsed_slice_dims")?;
    let start_index_map = cx.ints("start_index_map")?;
    let batching_raw = cx.ints_or_empty("operand_batching_dims")?;
    let slice_sizes = cx.ints("slice_sizes")?;

    if slice_sizes.len() != rank {
        bail!(
            "gather.slice_sizes",
            "slice_sizes {} must have one entry per dimension of the operand {}",
            list(slice_sizes),
            ash(operand)
        );
    }
    for (i, &s) in slice_sizes.iter().enumerate() {
        if s < 0 || (operand.dims[i] != UNBOUNDED && s > operand.dims[i]) {
            bail!("gather.slice_sizes", "slice size {s} in dimension {i} does not fit the operand {}", ash(operand));
        }
    }
    let collapsed = sorted_dims(collapsed_raw, rank, "gather.collapsed_slice_dims", "collapsed slice")?;
    let batching = sorted_dims(batching_raw, rank, "gather.batching_dims", "operand batching")?;
    for &d in collapsed.iter().chain(&batching) {
        if slice_sizes[d] > 1 {
            bail!(
                "gather.collapsed_slice_dims",
                "collapsed or batching dimension {d} must have slice size at most 1 but has {}",
                slice_sizes[d]
            );
        }
    }
    if let Some(d) = collapsed.iter().find(|d| batching.contains(d)) {
        bail!("gather.batching_dims", "dimension {d} is both collapsed and a batching dimension");
    }
    check_batching(
        operand,
        &batching,
        indices,
        cx.ints_or_empty("start_indices_batching_dims")?,
        ivd,
        "gather.batching_dims",
    )?;

    let components = expanded[ivd];
    if components != start_index_map.len() as i64 {
        bail!(
            "gather.start_index_map",
            "start_index_map {} has {} entries but the index vector (dimension {ivd} of indices {}) has {components}",
            list(start_index_map),
            start_index_map.len(),
            ash(indices)
        );
    }
    let sim = unique_dims(start_index_map, rank, "gather.start_index_map", "start_index_map")?;
    if let Some(d) = sim.iter().find(|d| batching.contains(d)) {
        bail!("gather.start_index_map", "start_index_map names batching dimension {d}");
    }

    let kept = rank - collapsed.len() - batching.len();
    if offset_dims.len() != kept {
        bail!(
            "gather.offset_dims",
            "offset_dims {} must have {kept} entries (operand rank {rank} minus {} collapsed and {} batching dimensions)",
            list(offset_dims),
            collapsed.len(),
            batching.len()
        );
    }
    let out_rank = offset_dims.len() + expanded.len() - 1;
    let offsets = sorted_dims(offset_dims, out_rank, "gather.offset_dims", "offset")?;

    let window: Vec<i64> =
        (0..rank).filter(|d| !collapsed.contains(d) && !batching.contains(d)).map(|d| slice_sizes[d]).collect();
    let batch: Vec<(i64, bool)> =
        (0..expanded.len()).filter(|&d| d != ivd).map(|d| (expanded[d], is_dyn(indices, d))).collect();
    let (mut w, mut b) = (window.iter(), batch.iter());
    let mut dims = Vec::with_capacity(out_rank);
    let mut dynamic = Vec::with_capacity(out_rank);
    for i in 0..out_rank {
        let (size, dy) = if offsets.contains(&i) {
            (w.next().copied().unwrap_or(0), false)
        } else {
            b.next().copied().unwrap_or((0, false))
        };
        dims.push(size);
        dynamic.push(dy);
    }
    Ok(array(operand.element_type, dims, dynamic))
}

/// `scatter(inputs.., indices, updates..)`: N inputs of one dimension list, N updates of
/// another, and a reducer over N scalars.
pub fn scatter(cx: &Ctx) -> Res<Shape> {
    if cx.ops.len() < 3 || cx.ops.len().is_multiple_of(2) {
        bail!("operands.count", "scatter takes N inputs, indices and N updates but has {} operands", cx.ops.len());
    }
    let n = (cx.ops.len() - 1) / 2;
    let operand = cx.arr(0)?;
    let mut inputs = Vec::with_capacity(n);
    for i in 0..n {
        let a = cx.arr(i)?;
        if !dims_eq(&a.dims, &operand.dims) {
            bail!(
                "scatter.inputs_dims_mismatch",
                "scatter inputs differ in dimensions: {} vs {}",
                ash(operand),
                ash(a)
            );
        }
        inputs.push(a);
    }
    let indices = cx.arr(n)?;
    let first_update = cx.arr(n + 1)?;
    let mut updates = Vec::with_capacity(n);
    for (i, input) in inputs.iter().enumerate() {
        let u = cx.arr(n + 1 + i)?;
        if !dims_eq(&u.dims, &first_update.dims) {
            bail!(
                "scatter.updates_dims_mismatch",
                "scatter updates differ in dimensions: {} vs {}",
                ash(first_update),
                ash(u)
            );
        }
        if u.element_type != input.element_type {
            bail!(
                "scatter.update_type",
                "scatter update {} must have the element type of input {}",
                ash(u),
                ash(input)
            );
        }
        updates.push(u);
    }
    let (expanded, ivd) = expanded_indices(cx, indices, "scatter")?;
    let rank = operand.rank();
    let uwd_raw = cx.ints("update_window_dims")?;
    let inserted_raw = cx.ints_or_empty("inserted_window_dims")?;
    let sdod = cx.ints("scatter_dims_to_operand_dims")?;
    let batching_raw = cx.ints_or_empty("input_batching_dims")?;

    let uwd = sorted_dims(uwd_raw, first_update.rank(), "scatter.update_window_dims", "update window")?;
    let inserted = sorted_dims(inserted_raw, rank, "scatter.inserted_window_dims", "inserted window")?;
    let batching = sorted_dims(batching_raw, rank, "scatter.batching_dims", "input batching")?;
    if let Some(d) = inserted.iter().find(|d| batching.contains(d)) {
        bail!("scatter.batching_dims", "dimension {d} is both an inserted window and a batching dimension");
    }
    check_batching(
        operand,
        &batching,
        indices,
        cx.ints_or_empty("scatter_indices_batching_dims")?,
        ivd,
        "scatter.batching_dims",
    )?;
    if uwd.len() + inserted.len() + batching.len() != rank {
        bail!(
            "scatter.window_rank",
            "{} update window dimensions plus {} inserted and {} batching dimensions must equal the operand rank {rank}",
            uwd.len(),
            inserted.len(),
            batching.len()
        );
    }
    let components = expanded[ivd];
    if components != sdod.len() as i64 {
        bail!(
            "scatter.scatter_dims_to_operand_dims",
            "scatter_dims_to_operand_dims {} has {} entries but the index vector (dimension {ivd} of indices {}) has {components}",
            list(sdod),
            sdod.len(),
            ash(indices)
        );
    }
    let mapped = unique_dims(sdod, rank, "scatter.scatter_dims_to_operand_dims", "scatter_dims_to_operand_dims")?;
    if let Some(d) = mapped.iter().find(|d| batching.contains(d)) {
        bail!("scatter.scatter_dims_to_operand_dims", "scatter_dims_to_operand_dims names batching dimension {d}");
    }
    let scatter_dims = expanded.len() - 1;
    if first_update.rank() != uwd.len() + scatter_dims {
        bail!(
            "scatter.updates_rank",
            "updates {} must have rank {} ({} window dimensions plus {scatter_dims} scatter dimensions)",
            ash(first_update),
            uwd.len() + scatter_dims,
            uwd.len()
        );
    }
    // Window dimensions of the updates fit, in order, into the operand's non-inserted,
    // non-batching dimensions.
    let window_operand_dims: Vec<usize> =
        (0..rank).filter(|d| !inserted.contains(d) && !batching.contains(d)).collect();
    for (&u, &o) in uwd.iter().zip(&window_operand_dims) {
        let (us, os) = (first_update.dims[u], operand.dims[o]);
        if us != UNBOUNDED && os != UNBOUNDED && (us < 0 || us > os) {
            bail!(
                "scatter.window_bounds",
                "update window dimension {u} of size {us} exceeds operand dimension {o} of size {os} ({} into {})",
                ash(first_update),
                ash(operand)
            );
        }
    }
    // The other update dimensions are the scatter dimensions and follow the indices.
    let index_dims: Vec<usize> = (0..expanded.len()).filter(|&d| d != ivd).collect();
    let update_scatter: Vec<usize> = (0..first_update.rank()).filter(|d| !uwd.contains(d)).collect();
    for (&u, &i) in update_scatter.iter().zip(&index_dims) {
        if !size_eq(first_update.dims[u], expanded[i]) {
            bail!(
                "scatter.scatter_dims",
                "update scatter dimension {u} of {} must have size {} like indices dimension {i} of {}",
                ash(first_update),
                expanded[i],
                ash(indices)
            );
        }
    }
    let f = cx.comp("to_apply")?;
    let init_shapes: Vec<Shape> = inputs.iter().map(|a| Shape::scalar(a.element_type)).collect();
    let init_refs: Vec<&Shape> = init_shapes.iter().collect();
    let types: Vec<ElementType> = updates.iter().map(|u| u.element_type).collect();
    check_reducer(&f, &init_refs, &types, "scatter.computation_signature", "scatter")?;
    if n == 1 {
        return Ok(plain(operand));
    }
    Ok(Shape::Tuple(inputs.iter().map(|a| plain(a)).collect()))
}
