//! batch-norm-inference, batch-norm-training and batch-norm-grad with XLA's formulas: the
//! statistics of each feature are taken over every other dimension, the variance is the
//! biased one, and everything is computed in f64 and rounded once.

use super::value::round_float;
use super::{Arr, Buf, EvalError, Value};
use crate::element_type::ElementType;
use crate::ir::{AttrList, Instruction};

struct Layout {
    features: usize,
    /// Elements between consecutive features (the product of the dimensions after it).
    inner: usize,
    /// Elements per feature.
    count: usize,
}

impl Layout {
    fn feature_of(&self, i: usize) -> usize {
        (i / self.inner) % self.features
    }
}

fn layout(inst: &Instruction, x: &Arr) -> Result<Layout, EvalError> {
    let f = inst.attr_int("feature_index").ok_or_else(|| EvalError::invalid(inst, "missing feature_index"))?;
    let f = usize::try_from(f)
        .ok()
        .filter(|&f| f < x.dims.len())
        .ok_or_else(|| EvalError::invalid(inst, "feature_index out of range"))?;
    let features = x.dims[f] as usize;
    let inner = x.dims[f + 1..].iter().product::<i64>() as usize;
    let count = x.len().checked_div(features).unwrap_or(0);
    Ok(Layout { features, inner: inner.max(1), count })
}

fn floats<'a>(inst: &Instruction, a: &'a Arr, len: Option<usize>) -> Result<&'a [f64], EvalError> {
    match &a.buf {
        Buf::Float(v) if len.is_none_or(|l| v.len() == l) => Ok(v),
        Buf::Float(_) => Err(EvalError::invalid(inst, "per-feature operand has the wrong size")),
        _ => Err(EvalError::invalid(inst, "batch norm operands must be floating-point")),
    }
}

fn epsilon(inst: &Instruction) -> f64 {
    // XLA computes with the f32 epsilon attribute.
    inst.attr_float("epsilon").map_or(0.0, |e| e as f32 as f64)
}

fn array(ty: ElementType, dims: &[i64], v: Vec<f64>) -> Value {
    Value::Arr(Arr { ty, dims: dims.to_vec(), buf: Buf::Float(v.into_iter().map(|x| round_float(ty, x)).collect()) })
}

/// Per-feature mean and biased variance.
fn moments(x: &[f64], l: &Layout) -> (Vec<f64>, Vec<f64>) {
    let mut mean = vec![0.0; l.features];
    for (i, &v) in x.iter().enumerate() {
        mean[l.feature_of(i)] += v;
    }
    mean.iter_mut().for_each(|m| *m /= l.count as f64);
    let mut var = vec![0.0; l.features];
    for (i, &v) in x.iter().enumerate() {
        let f = l.feature_of(i);
        var[f] += (v - mean[f]) * (v - mean[f]);
    }
    var.iter_mut().for_each(|v| *v /= l.count as f64);
    (mean, var)
}

pub(crate) fn inference(inst: &Instruction, ops: &[&Arr]) -> Result<Value, EvalError> {
    let [x, scale, offset, mean, var] = ops else {
        return Err(EvalError::invalid(inst, "batch-norm-inference needs five operands"));
    };
    let l = layout(inst, x)?;
    let n = Some(l.features);
    let (xv, s, o, m, v) = (
        floats(inst, x, None)?,
        floats(inst, scale, n)?,
        floats(inst, offset, n)?,
        floats(inst, mean, n)?,
        floats(inst, var, n)?,
    );
    let eps = epsilon(inst);
    let out = xv
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let f = l.feature_of(i);
            (a - m[f]) / (v[f] + eps).sqrt() * s[f] + o[f]
        })
        .collect();
    Ok(array(x.ty, &x.dims, out))
}

pub(crate) fn training(inst: &Instruction, ops: &[&Arr]) -> Result<Value, EvalError> {
    let [x, scale, offset] = ops else {
        return Err(EvalError::invalid(inst, "batch-norm-training needs three operands"));
    };
    let l = layout(inst, x)?;
    let n = Some(l.features);
    let (xv, s, o) = (floats(inst, x, None)?, floats(inst, scale, n)?, floats(inst, offset, n)?);
    let (mean, var) = moments(xv, &l);
    let eps = epsilon(inst);
    let out = xv
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let f = l.feature_of(i);
            (a - mean[f]) / (var[f] + eps).sqrt() * s[f] + o[f]
        })
        .collect();
    let fdims = [l.features as i64];
    Ok(Value::Tuple(vec![array(x.ty, &x.dims, out), array(scale.ty, &fdims, mean), array(scale.ty, &fdims, var)]))
}

/// With N elements per feature and r = 1/sqrt(var + eps):
/// grad_offset = sum(dy), grad_scale = r * sum(dy * (x - mean)),
/// grad_operand = scale * r / N * (N * dy - sum(dy) - (x - mean) * r^2 * sum(dy * (x - mean))).
pub(crate) fn grad(inst: &Instruction, ops: &[&Arr]) -> Result<Value, EvalError> {
    let [x, scale, mean, var, dy] = ops else {
        return Err(EvalError::invalid(inst, "batch-norm-grad needs five operands"));
    };
    let l = layout(inst, x)?;
    let n = Some(l.features);
    let (xv, s, m, v, dyv) = (
        floats(inst, x, None)?,
        floats(inst, scale, n)?,
        floats(inst, mean, n)?,
        floats(inst, var, n)?,
        floats(inst, dy, Some(x.len()))?,
    );
    let eps = epsilon(inst);
    let mut sum_dy = vec![0.0; l.features];
    let mut sum_dy_xc = vec![0.0; l.features];
    for (i, (&a, &d)) in xv.iter().zip(dyv).enumerate() {
        let f = l.feature_of(i);
        sum_dy[f] += d;
        sum_dy_xc[f] += d * (a - m[f]);
    }
    let r: Vec<f64> = v.iter().map(|&v| 1.0 / (v + eps).sqrt()).collect();
    let count = l.count as f64;
    let gx = xv
        .iter()
        .zip(dyv)
        .enumerate()
        .map(|(i, (&a, &d))| {
            let f = l.feature_of(i);
            s[f] * r[f] / count * (count * d - sum_dy[f] - (a - m[f]) * r[f] * r[f] * sum_dy_xc[f])
        })
        .collect();
    let gs = sum_dy_xc.iter().zip(&r).map(|(a, r)| a * r).collect();
    let fdims = [l.features as i64];
    Ok(Value::Tuple(vec![array(x.ty, &x.dims, gx), array(scale.ty, &fdims, gs), array(scale.ty, &fdims, sum_dy)]))
}
