//! gather and scatter with XLA's general dimension numbers, batching dimensions included.
//!
//! Both walk the "batch" positions of the start indices (every indices dimension except
//! `index_vector_dim`, which is implicit and of size 1 when it equals the indices' rank). Each
//! position gives a start in the operand; gather clamps it so the whole slice fits, scatter
//! skips the position's whole update window when it does not fit (XLA's behaviour for both).

use super::data_movement::row_major_strides;
use super::scalar_fn::{self, call, combiner, scalar, store};
use super::window::next_index;
use super::{result_array, Arr, Buf, EvalError, Evaluator, Value};
use crate::element_type::ElementType;
use crate::ir::{AttrList, Instruction};

/// The start indices viewed as batch positions of index vectors.
struct StartIndices<'a> {
    values: &'a [i64],
    ty: ElementType,
    /// The indices' dimensions without the index vector dimension.
    batch_dims: Vec<i64>,
    /// Row-major strides into `values` of those dimensions.
    batch_strides: Vec<i64>,
    /// Stride between the components of one index vector.
    vector_stride: i64,
    /// How many components an index vector has.
    components: usize,
    ivd: usize,
}

impl<'a> StartIndices<'a> {
    fn new(inst: &Instruction, indices: &'a Arr) -> Result<StartIndices<'a>, EvalError> {
        let Buf::Int(values) = &indices.buf else {
            return Err(EvalError::invalid(inst, "start indices must be integers"));
        };
        let ivd = attr_dim(inst, "index_vector_dim", indices.dims.len() + 1)?;
        let mut dims = indices.dims.clone();
        if ivd == dims.len() {
            dims.push(1);
        }
        let strides = row_major_strides(&dims);
        let keep = |v: &[i64]| v.iter().enumerate().filter(|&(d, _)| d != ivd).map(|(_, &x)| x).collect();
        Ok(StartIndices {
            values,
            ty: indices.ty,
            batch_dims: keep(&dims),
            batch_strides: keep(&strides),
            vector_stride: strides[ivd],
            components: dims[ivd] as usize,
            ivd,
        })
    }

    /// Component `k` of the index vector at batch position `g`.
    fn component(&self, g: &[i64], k: usize) -> i64 {
        let off: i64 =
            g.iter().zip(&self.batch_strides).map(|(a, b)| a * b).sum::<i64>() + k as i64 * self.vector_stride;
        let v = self.values[off as usize];
        // u64 indices are stored as their bits: a huge one must not read as negative.
        if self.ty == ElementType::U64 && v < 0 {
            i64::MAX
        } else {
            v
        }
    }

    /// The position in a batch index of indices dimension `d` (which is not the vector one).
    fn batch_position(&self, d: usize) -> usize {
        if d > self.ivd {
            d - 1
        } else {
            d
        }
    }
}

fn attr_dim(inst: &Instruction, name: &str, bound: usize) -> Result<usize, EvalError> {
    let v = inst.attr_int(name).ok_or_else(|| EvalError::invalid(inst, format!("missing {name}")))?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v < bound)
        .ok_or_else(|| EvalError::invalid(inst, format!("{name}={v} out of range")))
}

/// A list attribute of dimension numbers, each below `bound`; absent means empty.
fn dims_attr(inst: &Instruction, name: &str, bound: usize) -> Result<Vec<usize>, EvalError> {
    inst.attr_ints(name)
        .unwrap_or(&[])
        .iter()
        .map(|&d| {
            usize::try_from(d)
                .ok()
                .filter(|&d| d < bound)
                .ok_or_else(|| EvalError::invalid(inst, format!("{name} dimension {d} out of range")))
        })
        .collect()
}

/// The operand start of batch position `g`: the mapped index components, and the batch
/// position itself in the operand's batching dimensions.
fn operand_start(
    idx: &StartIndices<'_>,
    g: &[i64],
    rank: usize,
    index_map: &[usize],
    operand_batching: &[usize],
    indices_batching: &[usize],
) -> Vec<i64> {
    let mut start = vec![0i64; rank];
    for (k, &d) in index_map.iter().enumerate() {
        start[d] = idx.component(g, k);
    }
    for (&od, &id) in operand_batching.iter().zip(indices_batching) {
        start[od] = g[idx.batch_position(id)];
    }
    start
}

pub(crate) fn gather(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    let (ty, out_dims) = result_array(inst)?;
    let [operand, indices] = ops else {
        return Err(EvalError::invalid(inst, "gather needs an operand and start indices"));
    };
    let rank = operand.dims.len();
    let idx = StartIndices::new(inst, indices)?;
    let offset_dims = dims_attr(inst, "offset_dims", out_dims.len())?;
    let collapsed = dims_attr(inst, "collapsed_slice_dims", rank)?;
    let index_map = dims_attr(inst, "start_index_map", rank)?;
    let operand_batching = dims_attr(inst, "operand_batching_dims", rank)?;
    let indices_batching = dims_attr(inst, "start_indices_batching_dims", indices.dims.len())?;
    let slice_sizes = inst.attr_ints("slice_sizes").ok_or_else(|| EvalError::invalid(inst, "missing slice_sizes"))?;
    let window_dims: Vec<usize> =
        (0..rank).filter(|d| !collapsed.contains(d) && !operand_batching.contains(d)).collect();
    let batch_out: Vec<usize> = (0..out_dims.len()).filter(|d| !offset_dims.contains(d)).collect();
    if slice_sizes.len() != rank
        || window_dims.len() != offset_dims.len()
        || batch_out.len() != idx.batch_dims.len()
        || indices_batching.len() != operand_batching.len()
        || index_map.len() != idx.components
        || indices_batching.contains(&idx.ivd)
        || slice_sizes.iter().zip(&operand.dims).any(|(&s, &d)| s < 0 || s > d)
    {
        return Err(EvalError::invalid(inst, "gather dimension numbers do not match the operands"));
    }
    // Base operand offset of every batch position, start clamped so the slice fits.
    let op_strides = row_major_strides(&operand.dims);
    let n_batch: i64 = idx.batch_dims.iter().product();
    let mut bases = Vec::with_capacity(n_batch as usize);
    let mut g = vec![0i64; idx.batch_dims.len()];
    for _ in 0..n_batch {
        let start = operand_start(&idx, &g, rank, &index_map, &operand_batching, &indices_batching);
        let mut base = 0i64;
        for d in 0..rank {
            let s = start[d].clamp(0, (operand.dims[d] - slice_sizes[d]).max(0));
            base += s * op_strides[d];
        }
        bases.push(base);
        next_index(&mut g, &idx.batch_dims);
    }
    // Each result dimension steps either through the batch positions or through the slice.
    let batch_strides = row_major_strides(&idx.batch_dims);
    let mut bstride = vec![0i64; out_dims.len()];
    let mut ostride = vec![0i64; out_dims.len()];
    for (t, &d) in batch_out.iter().enumerate() {
        if out_dims[d] != idx.batch_dims[t] {
            return Err(EvalError::invalid(inst, "gather result batch dimensions differ from the indices"));
        }
        bstride[d] = batch_strides[t];
    }
    for (t, &d) in offset_dims.iter().enumerate() {
        if out_dims[d] > slice_sizes[window_dims[t]] {
            return Err(EvalError::invalid(inst, "gather result is larger than its slice"));
        }
        ostride[d] = op_strides[window_dims[t]];
    }
    let n: i64 = out_dims.iter().product();
    let mut sources = Vec::with_capacity(n as usize);
    let mut o = vec![0i64; out_dims.len()];
    for _ in 0..n {
        let (mut b, mut s) = (0i64, 0i64);
        for d in 0..o.len() {
            b += o[d] * bstride[d];
            s += o[d] * ostride[d];
        }
        // Only a zero-sized collapsed slice can point past the operand; XLA leaves that
        // undefined, so it is an error here.
        let src = (bases[b as usize] + s) as usize;
        if src >= operand.len() {
            return Err(EvalError::invalid(inst, "gather slice of size 0 in a collapsed dimension"));
        }
        sources.push(src);
        next_index(&mut o, &out_dims);
    }
    let buf = super::value::map_buf!(&operand.buf, v => sources.iter().map(|&i| v[i]).collect());
    Ok(Arr { ty, dims: out_dims, buf })
}

pub(crate) fn scatter(ev: &Evaluator<'_>, inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
    let ops: Vec<&Arr> = ops
        .iter()
        .map(|v| match v {
            Value::Arr(a) => Ok(a),
            _ => Err(EvalError::invalid(inst, "scatter operand is not an array")),
        })
        .collect::<Result<_, _>>()?;
    if ops.len() < 3 || ops.len().is_multiple_of(2) {
        return Err(EvalError::invalid(inst, "scatter takes N inputs, indices and N updates"));
    }
    let k = (ops.len() - 1) / 2;
    let (inputs, rest) = ops.split_at(k);
    let (indices, updates) = (rest[0], &rest[1..]);
    let op_dims = inputs[0].dims.clone();
    let upd_dims = updates[0].dims.clone();
    if inputs.iter().any(|a| a.dims != op_dims) || updates.iter().any(|a| a.dims != upd_dims) {
        return Err(EvalError::invalid(inst, "scatter inputs or updates differ in shape"));
    }
    let rank = op_dims.len();
    let idx = StartIndices::new(inst, indices)?;
    let window_upd = dims_attr(inst, "update_window_dims", upd_dims.len())?;
    let inserted = dims_attr(inst, "inserted_window_dims", rank)?;
    let index_map = dims_attr(inst, "scatter_dims_to_operand_dims", rank)?;
    let operand_batching = dims_attr(inst, "input_batching_dims", rank)?;
    let indices_batching = dims_attr(inst, "scatter_indices_batching_dims", indices.dims.len())?;
    let window_op: Vec<usize> = (0..rank).filter(|d| !inserted.contains(d) && !operand_batching.contains(d)).collect();
    let scatter_upd: Vec<usize> = (0..upd_dims.len()).filter(|d| !window_upd.contains(d)).collect();
    if window_op.len() != window_upd.len()
        || scatter_upd.len() != idx.batch_dims.len()
        || scatter_upd.iter().zip(&idx.batch_dims).any(|(&u, &b)| upd_dims[u] != b)
        || indices_batching.len() != operand_batching.len()
        || index_map.len() != idx.components
        || indices_batching.contains(&idx.ivd)
    {
        return Err(EvalError::invalid(inst, "scatter dimension numbers do not match the operands"));
    }
    let types = scalar_fn::result_types(inst)?;
    if types.len() != k || inputs.iter().zip(&types).any(|(a, &t)| a.ty != t) {
        return Err(EvalError::invalid(inst, "scatter result types differ from its inputs"));
    }
    // The update window's extent in every operand dimension (1 where the window is inserted).
    let mut extent = vec![1i64; rank];
    for (&o, &u) in window_op.iter().zip(&window_upd) {
        extent[o] = upd_dims[u];
    }
    let window_shape: Vec<i64> = window_upd.iter().map(|&u| upd_dims[u]).collect();
    let op_strides = row_major_strides(&op_dims);
    let upd_strides = row_major_strides(&upd_dims);
    let win_op_strides: Vec<i64> = window_op.iter().map(|&d| op_strides[d]).collect();
    let win_upd_strides: Vec<i64> = window_upd.iter().map(|&d| upd_strides[d]).collect();
    let n_window: i64 = window_shape.iter().product();

    let comp = inst.called("to_apply").ok_or_else(|| EvalError::invalid(inst, "scatter without to_apply"))?;
    let fast = combiner(ev.module, comp).filter(|_| k == 1);
    let mut results: Vec<Buf> = inputs.iter().map(|a| a.buf.clone()).collect();
    let n_batch: i64 = idx.batch_dims.iter().product();
    let mut g = vec![0i64; idx.batch_dims.len()];
    let mut w = vec![0i64; window_shape.len()];
    // XLA's order: scatter positions in row-major order, each one's window in row-major order.
    for _ in 0..n_batch {
        let start = operand_start(&idx, &g, rank, &index_map, &operand_batching, &indices_batching);
        let fits = (0..rank).all(|d| start[d] >= 0 && start[d] <= op_dims[d] - extent[d]);
        let upd_base: i64 = scatter_upd.iter().zip(&g).map(|(&u, &x)| x * upd_strides[u]).sum();
        next_index(&mut g, &idx.batch_dims);
        if !fits {
            continue;
        }
        let op_base: i64 = start.iter().zip(&op_strides).map(|(s, t)| s * t).sum();
        w.iter_mut().for_each(|x| *x = 0);
        for _ in 0..n_window {
            let (mut oi, mut ui) = (op_base, upd_base);
            for (t, &x) in w.iter().enumerate() {
                oi += x * win_op_strides[t];
                ui += x * win_upd_strides[t];
            }
            let (oi, ui) = (oi as usize, ui as usize);
            next_index(&mut w, &window_shape);
            let done = match (fast, &mut results[0], &updates[0].buf) {
                (Some(c), Buf::Float(r), Buf::Float(u)) => match scalar_fn::float_fn(c, types[0]) {
                    Some(f) => {
                        r[oi] = f(r[oi], u[ui]);
                        true
                    }
                    None => false,
                },
                (Some(c), Buf::Int(r), Buf::Int(u)) => {
                    r[oi] = scalar_fn::int_fn(c, types[0])(r[oi], u[ui]);
                    true
                }
                (Some(c), Buf::Pred(r), Buf::Pred(u)) => {
                    r[oi] = scalar_fn::pred_fn(c)(r[oi], u[ui]);
                    true
                }
                _ => false,
            };
            if done {
                continue;
            }
            let mut args: Vec<Value> = results
                .iter()
                .zip(&types)
                .map(|(b, &ty)| Value::Arr(Arr { ty, dims: vec![], buf: super::value::map_buf!(b, v => vec![v[oi]]) }))
                .collect();
            args.extend(updates.iter().map(|u| scalar(u, ui)));
            let r = call(ev, inst, comp, args, k)?;
            for (buf, v) in results.iter_mut().zip(&r) {
                store(inst, buf, oi, v)?;
            }
        }
    }
    let arrs = types.into_iter().zip(results).map(|(ty, buf)| Arr { ty, dims: op_dims.clone(), buf }).collect();
    Ok(scalar_fn::wrap_results(inst, arrs))
}
