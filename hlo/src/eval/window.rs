//! reduce-window and select-and-scatter: a window slides over the operand with strides,
//! padding, base dilation and window dilation. Window positions that fall on padding or
//! between dilated base elements hold no element and are skipped, as XLA skips them: a
//! reducer sees only real elements (after its initial value), and select never picks padding.

use super::data_movement::row_major_strides;
use super::scalar_fn::{self, call, combiner, comparison, scalar, splat, store, zeros};
use super::{Arr, Buf, EvalError, Evaluator, Value};
use crate::ir::{AttrList, AttrValue, Instruction, Window};

/// Where a window lands in the operand, per output position.
pub(crate) struct WindowMap {
    pub out_dims: Vec<i64>,
    /// `valid[d][o]`: the operand offsets (coordinate times row-major stride) along dimension
    /// `d` covered by the window at output coordinate `o`, in window order. The window's
    /// elements are the sums over the cartesian product of these lists, in row-major order.
    valid: Vec<Vec<Vec<usize>>>,
}

impl WindowMap {
    pub(crate) fn new(inst: &Instruction, dims: &[i64], window: &Window) -> Result<WindowMap, EvalError> {
        if window.dims.len() != dims.len() {
            return Err(EvalError::invalid(inst, "the window rank differs from the operand rank"));
        }
        let strides = row_major_strides(dims);
        let mut out_dims = Vec::with_capacity(dims.len());
        let mut valid = Vec::with_capacity(dims.len());
        for ((w, &n), &stride) in window.dims.iter().zip(dims).zip(&strides) {
            if w.size <= 0 || w.stride <= 0 || w.window_dilation <= 0 || w.base_dilation <= 0 {
                return Err(EvalError::invalid(inst, "window sizes, strides and dilations must be positive"));
            }
            // i128 keeps hostile window attributes from overflowing.
            let (n128, bd) = (i128::from(n), i128::from(w.base_dilation));
            let dilated = if n == 0 { 0 } else { (n128 - 1) * bd + 1 };
            let padded = dilated + i128::from(w.padding_low) + i128::from(w.padding_high);
            let span = (i128::from(w.size) - 1) * i128::from(w.window_dilation) + 1;
            let out = if padded < span { 0 } else { (padded - span) / i128::from(w.stride) + 1 };
            let out = i64::try_from(out).map_err(|_| EvalError::invalid(inst, "window output too large"))?;
            let mut per_out = Vec::with_capacity(out as usize);
            for o in 0..out {
                let mut list = Vec::new();
                for k in 0..w.size {
                    let pos = i128::from(o) * i128::from(w.stride) - i128::from(w.padding_low)
                        + i128::from(k) * i128::from(w.window_dilation);
                    if pos < 0 || pos % bd != 0 || pos / bd >= n128 {
                        continue;
                    }
                    list.push((pos / bd) as usize * stride as usize);
                }
                per_out.push(list);
            }
            out_dims.push(out);
            valid.push(per_out);
        }
        Ok(WindowMap { out_dims, valid })
    }

    pub(crate) fn out_len(&self) -> usize {
        self.out_dims.iter().product::<i64>() as usize
    }

    /// The operand offsets under the window at output index `o`, in row-major window order,
    /// left in `cur` (`next` is scratch space).
    pub(crate) fn sources(&self, o: &[i64], cur: &mut Vec<usize>, next: &mut Vec<usize>) {
        cur.clear();
        cur.push(0);
        for (d, &od) in o.iter().enumerate() {
            let list = &self.valid[d][od as usize];
            next.clear();
            for &a in cur.iter() {
                next.extend(list.iter().map(|&b| a + b));
            }
            std::mem::swap(cur, next);
        }
    }
}

/// Advances a row-major multi-index; false once it wraps around.
pub(crate) fn next_index(idx: &mut [i64], dims: &[i64]) -> bool {
    for d in (0..dims.len()).rev() {
        idx[d] += 1;
        if idx[d] < dims[d] {
            return true;
        }
        idx[d] = 0;
    }
    false
}

fn window_attr(inst: &Instruction) -> Result<Window, EvalError> {
    match inst.attr("window") {
        Some(AttrValue::Window(w)) => Ok(w.clone()),
        None => Ok(Window::default()),
        Some(_) => Err(EvalError::invalid(inst, "window attribute is not a window")),
    }
}

fn arr<'a>(inst: &Instruction, v: &'a Value) -> Result<&'a Arr, EvalError> {
    match v {
        Value::Arr(a) => Ok(a),
        _ => Err(EvalError::invalid(inst, "expected an array operand")),
    }
}

pub(crate) fn reduce_window(ev: &Evaluator<'_>, inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
    let k = ops.len() / 2;
    if k == 0 || ops.len() != 2 * k {
        return Err(EvalError::invalid(inst, "reduce-window needs operands and as many initial values"));
    }
    let ops: Vec<&Arr> = ops.iter().map(|v| arr(inst, v)).collect::<Result<_, _>>()?;
    let (inputs, inits) = ops.split_at(k);
    if inputs.iter().any(|a| a.dims != inputs[0].dims) || inits.iter().any(|a| a.len() != 1) {
        return Err(EvalError::invalid(
            inst,
            "reduce-window operands differ in shape or an initial value is not a scalar",
        ));
    }
    let window = window_attr(inst)?;
    let comp = inst.called("to_apply").ok_or_else(|| EvalError::invalid(inst, "reduce-window without to_apply"))?;
    let types = scalar_fn::result_types(inst)?;
    if types.len() != k {
        return Err(EvalError::invalid(inst, "reduce-window result count differs from its operands"));
    }
    let fast = match combiner(ev.module, comp) {
        // Complex values have no typed fold: they take the general path below.
        Some(c) if k == 1 && inputs[0].ty == types[0] && inits[0].ty == types[0] && !types[0].is_complex() => Some(c),
        _ => None,
    };
    if let Some((d, false)) = window.scan_dimension(&inputs[0].dims) {
        let dims = inputs[0].dims.clone();
        let outs = prefix_scan(ev, inst, comp, (inputs, inits), &types, fast, d)?;
        let arrs = types.into_iter().zip(outs).map(|(ty, buf)| Arr { ty, dims: dims.clone(), buf }).collect();
        return Ok(scalar_fn::wrap_results(inst, arrs));
    }
    let map = WindowMap::new(inst, &inputs[0].dims, &window)?;
    let n = map.out_len();
    let mut outs: Vec<Buf> = types.iter().map(|&t| zeros(t, n)).collect();
    let mut o = vec![0i64; map.out_dims.len()];
    let (mut cur, mut next) = (Vec::new(), Vec::new());
    if let Some(c) = fast {
        let ty = types[0];
        // One typed fold per window, in window order, starting from the initial value.
        let mut fold = |f: &mut dyn FnMut(usize, &[usize])| {
            for i in 0..n {
                map.sources(&o, &mut cur, &mut next);
                f(i, &cur);
                next_index(&mut o, &map.out_dims);
            }
        };
        match (&mut outs[0], &inputs[0].buf, &inits[0].buf) {
            (Buf::Float(out), Buf::Float(v), Buf::Float(init)) => {
                let f = scalar_fn::float_fn(c, ty)
                    .ok_or_else(|| EvalError::invalid(inst, "reducer does not apply to floats"))?;
                fold(&mut |i, src| out[i] = src.iter().fold(init[0], |acc, &s| f(acc, v[s])));
            }
            (Buf::Int(out), Buf::Int(v), Buf::Int(init)) => {
                let f = scalar_fn::int_fn(c, ty);
                fold(&mut |i, src| out[i] = src.iter().fold(init[0], |acc, &s| f(acc, v[s])));
            }
            (Buf::Pred(out), Buf::Pred(v), Buf::Pred(init)) => {
                let f = scalar_fn::pred_fn(c);
                fold(&mut |i, src| out[i] = src.iter().fold(init[0], |acc, &s| f(acc, v[s])));
            }
            _ => return Err(EvalError::invalid(inst, "reduce-window operand and result types differ")),
        }
    } else {
        for i in 0..n {
            map.sources(&o, &mut cur, &mut next);
            let mut acc: Vec<Value> = inits.iter().map(|a| Value::Arr((*a).clone())).collect();
            for &s in &cur {
                let mut args = acc;
                args.extend(inputs.iter().map(|a| scalar(a, s)));
                acc = call(ev, inst, comp, args, k)?;
            }
            for (out, v) in outs.iter_mut().zip(&acc) {
                store(inst, out, i, v)?;
            }
            next_index(&mut o, &map.out_dims);
        }
    }
    let arrs = types.into_iter().zip(outs).map(|(ty, buf)| Arr { ty, dims: map.out_dims.clone(), buf }).collect();
    Ok(scalar_fn::wrap_results(inst, arrs))
}

/// A reduce-window whose windows are prefixes along dimension `d` ([`Window::scan_dimension`]), as
/// one running fold along each row: element i's window is the row's elements 0..=i in order
/// (padding skipped), so folding them in turn from the initial value and reading the
/// accumulator after each gives every window's result by the same operations in the same
/// order. The window form is quadratic in the row's length, in time and in the window lists it
/// builds: a `jnp.cumsum` of 4M elements did not finish.
fn prefix_scan(
    ev: &Evaluator<'_>,
    inst: &Instruction,
    comp: crate::CompId,
    (inputs, inits): (&[&Arr], &[&Arr]),
    types: &[crate::ElementType],
    fast: Option<scalar_fn::Combiner>,
    d: usize,
) -> Result<Vec<Buf>, EvalError> {
    let dims = &inputs[0].dims;
    let strides = row_major_strides(dims);
    let (n, step) = (dims[d] as usize, strides[d] as usize);
    let total = dims.iter().product::<i64>() as usize;
    let mut outs: Vec<Buf> = types.iter().map(|&t| zeros(t, total)).collect();
    // Each row starts where the scanned coordinate is 0 and visits its elements `step` apart.
    let rows = (0..total).filter(|&b| (b / step) % n == 0);
    if let Some(c) = fast {
        let ty = types[0];
        match (&mut outs[0], &inputs[0].buf, &inits[0].buf) {
            (Buf::Float(out), Buf::Float(v), Buf::Float(init)) => {
                let f = scalar_fn::float_fn(c, ty)
                    .ok_or_else(|| EvalError::invalid(inst, "reducer does not apply to floats"))?;
                fold_rows(rows, n, step, (out, v, init[0]), f);
            }
            (Buf::Int(out), Buf::Int(v), Buf::Int(init)) => {
                fold_rows(rows, n, step, (out, v, init[0]), scalar_fn::int_fn(c, ty))
            }
            (Buf::Pred(out), Buf::Pred(v), Buf::Pred(init)) => {
                fold_rows(rows, n, step, (out, v, init[0]), scalar_fn::pred_fn(c))
            }
            _ => return Err(EvalError::invalid(inst, "reduce-window operand and result types differ")),
        }
        return Ok(outs);
    }
    let k = inputs.len();
    for base in rows {
        let mut acc: Vec<Value> = inits.iter().map(|a| Value::Arr((*a).clone())).collect();
        for s in (0..n).map(|i| base + i * step) {
            let mut args = acc;
            args.extend(inputs.iter().map(|a| scalar(a, s)));
            acc = call(ev, inst, comp, args, k)?;
            for (out, v) in outs.iter_mut().zip(&acc) {
                store(inst, out, s, v)?;
            }
        }
    }
    Ok(outs)
}

/// [`prefix_scan`]'s typed fold: along each row (starting at `rows`, `n` elements `step`
/// apart) `out` receives the running fold of `v` from `init`.
fn fold_rows<T: Copy>(
    rows: impl Iterator<Item = usize>,
    n: usize,
    step: usize,
    io: (&mut [T], &[T], T),
    f: impl Fn(T, T) -> T,
) {
    let (out, v, init) = io;
    for base in rows {
        let mut acc = init;
        for s in (0..n).map(|i| base + i * step) {
            acc = f(acc, v[s]);
            out[s] = acc;
        }
    }
}

/// select-and-scatter(operand, source, init): every window of the operand selects one
/// element (the first in window order that `select` prefers over all later ones), and the
/// source value of that window is scattered onto it with `scatter`.
pub(crate) fn select_and_scatter(ev: &Evaluator<'_>, inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
    let [operand, source, init] = ops else {
        return Err(EvalError::invalid(inst, "select-and-scatter needs an operand, a source and an initial value"));
    };
    let (operand, source, init) = (arr(inst, operand)?, arr(inst, source)?, arr(inst, init)?);
    if init.len() != 1 || init.ty != operand.ty || source.ty != operand.ty {
        return Err(EvalError::invalid(inst, "select-and-scatter types differ or the initial value is not a scalar"));
    }
    let map = WindowMap::new(inst, &operand.dims, &window_attr(inst)?)?;
    if map.out_dims != source.dims {
        return Err(EvalError::invalid(inst, "the source does not have the shape of the windowed operand"));
    }
    let select = inst.called("select").ok_or_else(|| EvalError::invalid(inst, "missing select computation"))?;
    let scatter = inst.called("scatter").ok_or_else(|| EvalError::invalid(inst, "missing scatter computation"))?;
    let fast_select = comparison(ev.module, select, operand.ty);
    let fast_scatter = combiner(ev.module, scatter);
    let ty = operand.ty;
    let mut result = splat(init, operand.len());
    let mut o = vec![0i64; map.out_dims.len()];
    let (mut cur, mut next) = (Vec::new(), Vec::new());
    for si in 0..map.out_len() {
        map.sources(&o, &mut cur, &mut next);
        next_index(&mut o, &map.out_dims);
        let mut selected: Option<usize> = None;
        for &c in &cur {
            let keep = match selected {
                None => false,
                Some(s) => match fast_select.and_then(|f| f.test(&operand.buf, s, c)) {
                    Some(keep) => keep,
                    None => {
                        let r = call(ev, inst, select, vec![scalar(operand, s), scalar(operand, c)], 1)?;
                        match r.first() {
                            Some(Value::Arr(Arr { buf: Buf::Pred(p), .. })) if p.len() == 1 => p[0],
                            _ => return Err(EvalError::invalid(inst, "select did not return a pred scalar")),
                        }
                    }
                },
            };
            if !keep {
                selected = Some(c);
            }
        }
        let Some(s) = selected else { continue };
        let done = match (fast_scatter, &mut result, &source.buf) {
            (Some(c), Buf::Float(r), Buf::Float(src)) => match scalar_fn::float_fn(c, ty) {
                Some(f) => {
                    r[s] = f(r[s], src[si]);
                    true
                }
                None => false,
            },
            (Some(c), Buf::Int(r), Buf::Int(src)) => {
                r[s] = scalar_fn::int_fn(c, ty)(r[s], src[si]);
                true
            }
            (Some(c), Buf::Pred(r), Buf::Pred(src)) => {
                r[s] = scalar_fn::pred_fn(c)(r[s], src[si]);
                true
            }
            _ => false,
        };
        if !done {
            let current = Arr { ty, dims: vec![], buf: super::value::map_buf!(&result, v => vec![v[s]]) };
            let r = call(ev, inst, scatter, vec![Value::Arr(current), scalar(source, si)], 1)?;
            store(inst, &mut result, s, &r[0])?;
        }
    }
    Ok(Value::Arr(Arr { ty, dims: operand.dims.clone(), buf: result }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_dilation_and_padding_skip_holes() {
        // [a, _, b, _, c] padded by 1 low: window 2 stride 2 sees {pad, a}, {_, b}, {_, c}.
        let w = Window {
            dims: vec![crate::ir::WindowDim {
                size: 2,
                stride: 2,
                padding_low: 1,
                padding_high: 0,
                base_dilation: 2,
                ..Default::default()
            }],
        };
        let inst = Instruction::new("w", crate::ir::Opcode::ReduceWindow, crate::shape::Shape::Tuple(vec![]), vec![]);
        let m = WindowMap::new(&inst, &[3], &w).unwrap();
        assert_eq!(m.out_dims, vec![3]);
        let (mut cur, mut next) = (Vec::new(), Vec::new());
        let got: Vec<Vec<usize>> = (0..3)
            .map(|o| {
                m.sources(&[o], &mut cur, &mut next);
                cur.clone()
            })
            .collect();
        assert_eq!(got, vec![vec![0], vec![1], vec![2]]);
    }
}
