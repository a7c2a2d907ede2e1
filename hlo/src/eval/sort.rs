//! sort (any number of operands, any dimension, ordered by the comparator computation) and
//! topk.
//!
//! Sorting is a stable merge sort over element indices that asks only "is a before b?", so a
//! comparator that is not a strict weak order gives some permutation rather than a panic.
//! Comparators that are one compare of a parameter pair run as a typed comparison; others
//! are called on scalars like reducers.

use super::data_movement::{gather, row_major_strides};
use super::value::map_buf;
use super::{Arr, Buf, EvalError, Evaluator, Value};
use crate::element_type::ElementType;
use crate::ir::{
    AttrList, AttrValue, CompId, ComparisonDirection, ComparisonType, InstId, Instruction, Module, Opcode, Payload,
};
use crate::shape::Shape;
use std::cmp::Ordering;

pub(crate) fn sort(ev: &Evaluator<'_>, inst: &Instruction, ops: &[&Arr]) -> Result<Value, EvalError> {
    let Some(first) = ops.first() else {
        return Err(EvalError::invalid(inst, "sort without operands"));
    };
    let dims = first.dims.clone();
    if ops.iter().any(|a| a.dims != dims) {
        return Err(EvalError::invalid(inst, "sort operands differ in shape"));
    }
    let d = match inst.attr_ints("dimensions") {
        Some([d]) => usize::try_from(*d).ok().filter(|&d| d < dims.len()),
        _ => None,
    }
    .ok_or_else(|| EvalError::invalid(inst, "sort needs one dimension in range"))?;
    let comp = inst.called("to_apply").ok_or_else(|| EvalError::invalid(inst, "sort without to_apply"))?;
    let fast = simple_comparator(ev.module, comp, ops.len());
    let keyed = if fast.is_none() { key_comparator(ev.module, comp) } else { None };
    // Move the sorted dimension last so each line is contiguous, sort, and move it back.
    let rank = dims.len();
    let to_last: Vec<usize> = (0..rank).filter(|&i| i != d).chain(std::iter::once(d)).collect();
    let lines: Vec<Buf> = ops.iter().map(|a| permute(&a.buf, &dims, &to_last)).collect();
    let line_len = dims.get(d).copied().unwrap_or(1) as usize;
    let count = first.len().checked_div(line_len).unwrap_or(0);
    let keys = match &keyed {
        Some(k) => Some(k.keys(ev, comp, &lines, ops)?),
        None => None,
    };
    let mut order: Vec<usize> = Vec::with_capacity(first.len());
    for l in 0..count {
        let base = l * line_len;
        let perm = match (&fast, &keyed, &keys) {
            (_, Some(k), Some(keys)) => merge_sort(line_len, |a, b| Ok(k.less(keys, base + a, base + b)))?,
            (Some(f), _, _) => {
                let (keys, ty) = (&lines[f.operand], ops[f.operand].ty);
                merge_sort(line_len, |a, b| Ok(f.less(keys, ty, base + a, base + b)))?
            }
            _ => merge_sort(line_len, |a, b| {
                let mut args = Vec::with_capacity(2 * ops.len());
                for (buf, op) in lines.iter().zip(ops) {
                    args.push(Value::Arr(Arr { ty: op.ty, dims: vec![], buf: buf.element(base + a) }));
                    args.push(Value::Arr(Arr { ty: op.ty, dims: vec![], buf: buf.element(base + b) }));
                }
                match ev.run_comp(comp, args)? {
                    Value::Arr(Arr { buf: Buf::Pred(p), .. }) if p.len() == 1 => Ok(p[0]),
                    _ => Err(EvalError::invalid(inst, "sort comparator did not return a pred scalar")),
                }
            })?,
        };
        order.extend(perm.into_iter().map(|i| base + i));
    }
    let moved_dims: Vec<i64> = to_last.iter().map(|&i| dims[i]).collect();
    let mut back = vec![0usize; rank];
    for (i, &p) in to_last.iter().enumerate() {
        back[p] = i;
    }
    let results: Vec<Value> = lines
        .iter()
        .zip(ops)
        .map(|(buf, op)| {
            let sorted = buf.take(&order);
            Value::Arr(Arr { ty: op.ty, dims: dims.clone(), buf: permute(&sorted, &moved_dims, &back) })
        })
        .collect();
    match &inst.shape {
        Shape::Tuple(_) => Ok(Value::Tuple(results)),
        _ => results.into_iter().next().ok_or_else(|| EvalError::invalid(inst, "sort without operands")),
    }
}

/// `buf` (row-major over `dims`) with its dimensions reordered so result dimension i is
/// source dimension `order[i]`.
fn permute(buf: &Buf, dims: &[i64], order: &[usize]) -> Buf {
    if order.iter().enumerate().all(|(i, &o)| i == o) {
        return buf.clone();
    }
    let strides = row_major_strides(dims);
    let new_dims: Vec<i64> = order.iter().map(|&o| dims[o]).collect();
    let new_strides: Vec<i64> = order.iter().map(|&o| strides[o]).collect();
    map_buf!(buf, v => gather(v, &new_dims, &new_strides, 0))
}

/// A stable bottom-up merge sort of `0..n`: an element of the right run goes first only when
/// `less(right, left)`.
fn merge_sort(
    n: usize,
    mut less: impl FnMut(usize, usize) -> Result<bool, EvalError>,
) -> Result<Vec<usize>, EvalError> {
    let mut a: Vec<usize> = (0..n).collect();
    let mut b = vec![0usize; n];
    let mut width = 1;
    while width < n {
        let mut start = 0;
        while start < n {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut i, mut j, mut k) = (start, mid, start);
            while i < mid && j < end {
                if less(a[j], a[i])? {
                    b[k] = a[j];
                    j += 1;
                } else {
                    b[k] = a[i];
                    i += 1;
                }
                k += 1;
            }
            b[k..k + (mid - i)].copy_from_slice(&a[i..mid]);
            k += mid - i;
            b[k..k + (end - j)].copy_from_slice(&a[j..end]);
            start = end;
        }
        std::mem::swap(&mut a, &mut b);
        width *= 2;
    }
    Ok(a)
}

/// A comparator that is one compare of parameters 2m and 2m+1 (in either order).
struct SimpleCompare {
    operand: usize,
    /// True when the compare reads the right-hand element first (compare(p1, p0)).
    swapped: bool,
    direction: ComparisonDirection,
    total: bool,
}

fn simple_comparator(module: &Module, comp: CompId, operands: usize) -> Option<SimpleCompare> {
    let c = module.get(comp)?;
    let root = c.root_inst();
    if root.opcode != Opcode::Compare || c.instructions.len() != 2 * operands + 1 || root.operands.len() != 2 {
        return None;
    }
    let param = |i: usize| match c.get(root.operands[i])?.payload {
        Payload::Parameter(n) => usize::try_from(n).ok(),
        _ => None,
    };
    let (p, q) = (param(0)?, param(1)?);
    if p / 2 != q / 2 || p == q || p / 2 >= operands {
        return None;
    }
    let direction = root.attr_word("direction").and_then(ComparisonDirection::parse)?;
    let total = root.attr_word("type").and_then(ComparisonType::parse) == Some(ComparisonType::TotalOrder);
    Some(SimpleCompare { operand: p / 2, swapped: p % 2 == 1, direction, total })
}

impl SimpleCompare {
    fn less(&self, buf: &Buf, ty: ElementType, a: usize, b: usize) -> bool {
        let (x, y) = if self.swapped { (b, a) } else { (a, b) };
        let ord = match buf {
            Buf::Float(v) if self.total => Some(v[x].total_cmp(&v[y])),
            Buf::Float(v) => v[x].partial_cmp(&v[y]),
            Buf::Int(v) if ty == ElementType::U64 => Some((v[x] as u64).cmp(&(v[y] as u64))),
            Buf::Int(v) => Some(v[x].cmp(&v[y])),
            Buf::Pred(v) => Some(v[x].cmp(&v[y])),
            Buf::Complex(_) => None,
        };
        test(self.direction, ord)
    }
}

/// A comparator whose root compares X and Y, where X reads only the left-hand parameters
/// (0, 2, 4, ...) and Y only the right-hand ones (or the reverse, `swapped`). Then X and Y are
/// keys of single elements: each is computed once per element, and "a before b" is
/// compare(X(a), Y(b)). JAX's comparators (NaN and -0 canonicalization, then a total-order
/// compare) have this form.
struct KeyCompare {
    x: InstId,
    y: InstId,
    swapped: bool,
    direction: ComparisonDirection,
    total: bool,
}

fn key_comparator(module: &Module, comp: CompId) -> Option<KeyCompare> {
    let c = module.get(comp)?;
    let root = c.root_inst();
    if root.opcode != Opcode::Compare || root.operands.len() != 2 {
        return None;
    }
    let (x, y) = (root.operands[0], root.operands[1]);
    let (px, py) = (params_reaching(c, x)?, params_reaching(c, y)?);
    let all = |ps: &[usize], parity: usize| ps.iter().all(|p| p % 2 == parity);
    let swapped = if all(&px, 0) && all(&py, 1) {
        false
    } else if all(&px, 1) && all(&py, 0) {
        true
    } else {
        return None;
    };
    let direction = root.attr_word("direction").and_then(ComparisonDirection::parse)?;
    let total = root.attr_word("type").and_then(ComparisonType::parse) == Some(ComparisonType::TotalOrder);
    Some(KeyCompare { x, y, swapped, direction, total })
}

/// The parameter numbers `id` depends on; None when it reaches anything whose value is not a
/// pure function of its operands (so computing it once per element would change the result).
fn params_reaching(c: &crate::ir::Computation, id: InstId) -> Option<Vec<usize>> {
    let mut seen = vec![false; c.instructions.len()];
    let mut stack = vec![id];
    let mut params = Vec::new();
    while let Some(cur) = stack.pop() {
        let slot = seen.get_mut(cur.index())?;
        if *slot {
            continue;
        }
        *slot = true;
        let inst = c.get(cur)?;
        match (&inst.payload, inst.opcode) {
            (Payload::Parameter(n), _) => params.push(usize::try_from(*n).ok()?),
            (_, Opcode::Rng | Opcode::RngBitGenerator | Opcode::Infeed | Opcode::Outfeed | Opcode::CustomCall) => {
                return None
            }
            _ => {}
        }
        if !inst.called_computations().is_empty() {
            return None;
        }
        stack.extend(inst.operands.iter().copied());
    }
    Some(params)
}

struct Keys {
    x: Buf,
    y: Buf,
    unsigned64: bool,
}

impl KeyCompare {
    /// X and Y of every element: one evaluation of the comparator's key instructions per
    /// element, with every parameter bound to that element of its operand.
    fn keys(&self, ev: &Evaluator<'_>, comp: CompId, lines: &[Buf], ops: &[&Arr]) -> Result<Keys, EvalError> {
        let c = ev.module.get(comp).ok_or_else(|| EvalError::Argument("missing comparator".into()))?;
        let mut needed = vec![false; c.instructions.len()];
        let mut stack = vec![self.x, self.y];
        while let Some(cur) = stack.pop() {
            if let Some(slot) = needed.get_mut(cur.index()) {
                if !*slot {
                    *slot = true;
                    stack.extend(c.inst(cur).operands.iter().copied());
                }
            }
        }
        let order: Vec<InstId> = c.post_order().into_iter().filter(|id| needed[id.index()]).collect();
        let n = ops.first().map_or(0, |a| a.len());
        let (mut xs, mut ys): (Option<Buf>, Option<Buf>) = (None, None);
        let mut unsigned64 = false;
        let mut values: Vec<Option<Value>> = vec![None; c.instructions.len()];
        for i in 0..n {
            let args: Vec<Value> = lines
                .iter()
                .zip(ops)
                .flat_map(|(b, a)| {
                    let v = Value::Arr(Arr { ty: a.ty, dims: vec![], buf: b.element(i) });
                    [v.clone(), v]
                })
                .collect();
            for &id in &order {
                let inst = c.inst(id);
                let mut operands = Vec::with_capacity(inst.operands.len());
                for o in &inst.operands {
                    match values.get(o.index()).and_then(Option::as_ref) {
                        Some(v) => operands.push(v),
                        None => return Err(EvalError::invalid(inst, "operand evaluated out of order")),
                    }
                }
                let v = ev.eval_inst(inst, &operands, &args)?;
                values[id.index()] = Some(v);
            }
            for (id, out) in [(self.x, &mut xs), (self.y, &mut ys)] {
                let Some(Value::Arr(a)) = &values[id.index()] else {
                    return Err(EvalError::Argument("a sort comparator key is not an array".into()));
                };
                match out {
                    Some(b) => {
                        if a.len() != 1 || !b.extend_from(&a.buf) {
                            return Err(EvalError::Argument("sort comparator keys change type".into()));
                        }
                    }
                    None => {
                        unsigned64 |= a.ty == ElementType::U64;
                        *out = Some(a.buf.clone());
                    }
                }
            }
        }
        let empty = || Buf::Int(Vec::new());
        Ok(Keys { x: xs.unwrap_or_else(empty), y: ys.unwrap_or_else(empty), unsigned64 })
    }

    fn less(&self, keys: &Keys, a: usize, b: usize) -> bool {
        let (a, b) = if self.swapped { (b, a) } else { (a, b) };
        let ord = match (&keys.x, &keys.y) {
            (Buf::Int(x), Buf::Int(y)) if keys.unsigned64 => Some((x[a] as u64).cmp(&(y[b] as u64))),
            (Buf::Float(x), Buf::Float(y)) if self.total => Some(x[a].total_cmp(&y[b])),
            (Buf::Float(x), Buf::Float(y)) => x[a].partial_cmp(&y[b]),
            (Buf::Int(x), Buf::Int(y)) => Some(x[a].cmp(&y[b])),
            (Buf::Pred(x), Buf::Pred(y)) => Some(x[a].cmp(&y[b])),
            _ => None,
        };
        test(self.direction, ord)
    }
}

/// A compare's result from the ordering of its operands (None when unordered: NaN).
fn test(dir: ComparisonDirection, o: Option<Ordering>) -> bool {
    use ComparisonDirection as D;
    match (dir, o) {
        (D::Ne, None) => true,
        (_, None) => false,
        (D::Eq, Some(o)) => o == Ordering::Equal,
        (D::Ne, Some(o)) => o != Ordering::Equal,
        (D::Lt, Some(o)) => o == Ordering::Less,
        (D::Le, Some(o)) => o != Ordering::Greater,
        (D::Gt, Some(o)) => o == Ordering::Greater,
        (D::Ge, Some(o)) => o != Ordering::Less,
    }
}

/// topk: the k largest (or smallest) entries of each row of the last dimension, in order,
/// with their s32 indices; equal values keep the lower index first.
pub(crate) fn topk(inst: &Instruction, ops: &[&Arr]) -> Result<Value, EvalError> {
    let k = inst.attr_int("k").ok_or_else(|| EvalError::invalid(inst, "topk without k"))?;
    let largest = inst.attr_bool("largest").unwrap_or(true);
    top_k(inst, ops, k, |a, x, y| {
        let o = cmp_elems(&a.buf, a.ty, x, y);
        Ok(if largest { o == Ordering::Greater } else { o == Ordering::Less })
    })
}

/// The `TopK` custom-call XLA:CPU's optimizer emits: k comes from the result shape and the
/// order from its comparator computation ("a goes before b").
pub(crate) fn topk_custom_call(ev: &Evaluator<'_>, inst: &Instruction, ops: &[&Arr]) -> Result<Value, EvalError> {
    let k = match &inst.shape {
        Shape::Tuple(parts) => parts.first().and_then(|p| p.as_array()).and_then(|a| a.dims.last().copied()),
        _ => None,
    }
    .ok_or_else(|| EvalError::invalid(inst, "TopK returns a (values, indices) tuple"))?;
    let comp = match inst.attr("called_computations") {
        Some(AttrValue::Computations(cs)) => cs.first().copied(),
        Some(AttrValue::Computation(c)) => Some(*c),
        _ => None,
    };
    let Some(comp) = comp else {
        return top_k(inst, ops, k, |a, x, y| Ok(cmp_elems(&a.buf, a.ty, x, y) == Ordering::Greater));
    };
    // The comparator is a sort comparator over (values) or (values, s32 indices).
    let params = ev.module.get(comp).map_or(0, |c| c.parameter_shapes().len());
    if let Some(f) = simple_comparator(ev.module, comp, params / 2) {
        if f.operand == 0 {
            return top_k(inst, ops, k, |a, x, y| Ok(f.less(&a.buf, a.ty, x, y)));
        }
    }
    let n = ops.first().and_then(|a| a.dims.last().copied()).unwrap_or(1).max(1) as usize;
    top_k(inst, ops, k, |a, x, y| {
        let mut args = vec![Value::Arr(a.scalar_at(x)), Value::Arr(a.scalar_at(y))];
        if params == 4 {
            let index =
                |i: usize| Value::Arr(Arr { ty: ElementType::S32, dims: vec![], buf: Buf::Int(vec![(i % n) as i64]) });
            args.extend([index(x), index(y)]);
        }
        match ev.run_comp(comp, args)? {
            Value::Arr(Arr { buf: Buf::Pred(p), .. }) if p.len() == 1 => Ok(p[0]),
            _ => Err(EvalError::invalid(inst, "TopK comparator did not return a pred scalar")),
        }
    })
}

/// The first k entries of each last-dimension row under `before` (stable), with indices.
fn top_k(
    inst: &Instruction,
    ops: &[&Arr],
    k: i64,
    mut before: impl FnMut(&Arr, usize, usize) -> Result<bool, EvalError>,
) -> Result<Value, EvalError> {
    let [a] = ops else {
        return Err(EvalError::invalid(inst, "topk needs one operand"));
    };
    if a.ty.is_complex() {
        return Err(EvalError::Unsupported { opcode: format!("{} on complex numbers", inst.opcode.name()) });
    }
    let n = a.dims.last().copied().unwrap_or(1);
    if k < 0 || k > n {
        return Err(EvalError::invalid(inst, "topk k is out of range"));
    }
    let Shape::Tuple(parts) = &inst.shape else {
        return Err(EvalError::invalid(inst, "topk returns a (values, indices) tuple"));
    };
    let (Some(Shape::Array(vs)), Some(Shape::Array(is))) = (parts.first(), parts.get(1)) else {
        return Err(EvalError::invalid(inst, "topk returns a (values, indices) tuple"));
    };
    let (n, k) = (n as usize, k as usize);
    let rows = a.len().checked_div(n).unwrap_or(0);
    let mut picked = Vec::with_capacity(rows * k);
    for r in 0..rows {
        let base = r * n;
        let perm = merge_sort(n, |x, y| before(a, base + x, base + y))?;
        picked.extend(perm[..k].iter().map(|&i| (base + i, i)));
    }
    let positions: Vec<usize> = picked.iter().map(|p| p.0).collect();
    let values = Arr { ty: a.ty, dims: vs.dims.clone(), buf: a.buf.take(&positions) };
    let index_ty = is.element_type;
    if !index_ty.is_integral() {
        return Err(EvalError::invalid(inst, "topk indices must be integers"));
    }
    let indices = Arr {
        ty: index_ty,
        dims: is.dims.clone(),
        buf: Buf::Int(picked.iter().map(|p| super::value::wrap_int(index_ty, p.1 as i64)).collect()),
    };
    Ok(Value::Tuple(vec![Value::Arr(values), Value::Arr(indices)]))
}

/// The order topk ranks by, XLA's total order: -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN.
fn cmp_elems(buf: &Buf, ty: ElementType, i: usize, j: usize) -> Ordering {
    match buf {
        Buf::Float(v) => v[i].total_cmp(&v[j]),
        Buf::Int(v) if ty == ElementType::U64 => (v[i] as u64).cmp(&(v[j] as u64)),
        Buf::Int(v) => v[i].cmp(&v[j]),
        Buf::Pred(v) => v[i].cmp(&v[j]),
        Buf::Complex(_) => Ordering::Equal,
    }
}
