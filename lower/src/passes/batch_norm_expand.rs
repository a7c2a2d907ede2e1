//! Rewrites batch-norm-training, batch-norm-inference and batch-norm-grad into reduces,
//! broadcasts and elementwise ops (the job of XLA's BatchNormExpander), so fusion and the
//! kernel lowering need nothing special for them.
//!
//! Statistics of feature `f` are taken over every dimension but `feature_index`, with N
//! elements per feature and `r = rsqrt(var + epsilon)`:
//! - training: `mean = sum(x) / N`, `var = sum((x - mean)^2) / N` (the biased variance; two
//!   passes rather than `E[x^2] - mean^2`, which cancels badly when the mean is large against
//!   the deviation), `y = (x - mean) * (scale * r) + offset`;
//! - inference: `y` the same from the given mean and variance;
//! - grad: `grad_offset = sum(dy)`, `grad_scale = r * sum(dy * (x - mean))` and
//!   `grad_x = scale * r * (dy - sum(dy) / N - (x - mean) * r^2 * sum(dy * (x - mean)) / N)`.
//!
//! f16 and bf16 operands compute in f32 and round once at the end, as `hlo::eval` (which
//! computes in f64) and XLA:CPU's float normalization do; f32 sums accumulate in f64 in the
//! reduce kernels. The rewritten instruction keeps its name: a tuple of the results for
//! training and grad, the result itself for inference.

use std::collections::HashMap;

use tessera_hlo::ir::{AttrList, AttrValue, Payload};
use tessera_hlo::{
    ArrayShape, CompId, Computation, ElementType, InstId, Instruction, Layout, Literal, Module, Opcode, Shape,
};

use super::rewrite::add_computation;
use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct BatchNormExpand;

impl Pass for BatchNormExpand {
    fn name(&self) -> &'static str {
        "batch_norm_expand"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        let mut found = Vec::new();
        for c in module.comp_ids() {
            for id in module.comp(c).ids() {
                if is_batch_norm(module.comp(c).inst(id).opcode) {
                    found.push((c, id));
                }
            }
        }
        let mut adders: HashMap<ElementType, CompId> = HashMap::new();
        let mut touched = Vec::new();
        for (c, id) in found {
            let inst = module.comp(c).inst(id).clone();
            let x = module.comp(c).inst(*inst.operands.first().unwrap_or(&id)).shape.clone();
            let ct = compute_type(&inst, &x)?;
            let adder = match adders.get(&ct) {
                Some(&a) => a,
                None => {
                    let a = add_computation(module, &format!("batch_norm_add_{}", ct.name()), ct);
                    adders.insert(ct, a);
                    a
                }
            };
            let mut e = Expander::new(module.comp_mut(c), &inst, &x, ct, adder)?;
            let replacement = match inst.opcode {
                Opcode::BatchNormTraining => e.training()?,
                Opcode::BatchNormInference => e.inference()?,
                _ => e.grad()?,
            };
            let comp = module.comp_mut(c);
            let mut new = comp.inst(replacement).clone();
            new.name = inst.name.clone();
            new.control_predecessors = inst.control_predecessors.clone();
            *comp.inst_mut(id) = new;
            // The replacement's own slot is now a duplicate nothing uses; DCE drops it.
            touched.push(c);
        }
        for &c in &touched {
            module.comp_mut(c).order_operands_first();
        }
        Ok(!touched.is_empty())
    }
}

fn is_batch_norm(op: Opcode) -> bool {
    matches!(op, Opcode::BatchNormTraining | Opcode::BatchNormInference | Opcode::BatchNormGrad)
}

/// f32 for f32 and the half types, f64 for f64.
fn compute_type(inst: &Instruction, x: &Shape) -> Result<ElementType, LowerError> {
    match x.as_array().map(|a| a.element_type) {
        Some(ElementType::F16 | ElementType::BF16 | ElementType::F32) => Ok(ElementType::F32),
        Some(ElementType::F64) => Ok(ElementType::F64),
        _ => Err(LowerError::unsupported(&inst.name, format!("{} of {x}", inst.opcode))),
    }
}

/// Builds the expansion of one batch-norm instruction inside its computation.
struct Expander<'c> {
    comp: &'c mut Computation,
    name: String,
    operands: Vec<InstId>,
    /// The operand's dimensions, its feature dimension, and the other dimensions.
    dims: Vec<i64>,
    feature: usize,
    others: Vec<i64>,
    /// The operand's minor-to-major order, for the arrays of its shape (when it has a layout).
    order: Option<Vec<i64>>,
    ct: ElementType,
    adder: CompId,
    epsilon: f64,
    /// Elements per feature.
    count: f64,
    /// The instruction's declared results (one array, or the tuple's arrays).
    results: Vec<ArrayShape>,
}

impl<'c> Expander<'c> {
    fn new(
        comp: &'c mut Computation,
        inst: &Instruction,
        x: &Shape,
        ct: ElementType,
        adder: CompId,
    ) -> Result<Expander<'c>, LowerError> {
        let xa = x.as_array().ok_or_else(|| LowerError::invalid(&inst.name, "the operand is not an array"))?;
        let rank = xa.dims.len();
        let feature = inst
            .attr_int("feature_index")
            .and_then(|f| usize::try_from(f).ok())
            .filter(|&f| f < rank)
            .ok_or_else(|| LowerError::invalid(&inst.name, "feature_index missing or out of range"))?;
        let elements: i64 = xa.dims.iter().product();
        let features = xa.dims[feature];
        let count = if features == 0 { 0.0 } else { (elements / features) as f64 };
        let results = match &inst.shape {
            Shape::Tuple(elems) => elems.iter().map(|s| s.as_array().cloned()).collect::<Option<Vec<_>>>(),
            s => s.as_array().map(|a| vec![a.clone()]),
        }
        .ok_or_else(|| LowerError::invalid(&inst.name, "batch-norm results must be arrays"))?;
        let want = if inst.opcode == Opcode::BatchNormInference { 1 } else { 3 };
        let operands = if inst.opcode == Opcode::BatchNormTraining { 3 } else { 5 };
        if results.len() != want || inst.operands.len() != operands {
            return Err(LowerError::invalid(&inst.name, "batch-norm operand or result count"));
        }
        Ok(Expander {
            comp,
            name: inst.name.clone(),
            operands: inst.operands.clone(),
            dims: xa.dims.clone(),
            feature,
            others: (0..rank as i64).filter(|&d| d != feature as i64).collect(),
            order: xa.layout.as_ref().map(|l| l.minor_to_major.clone()),
            ct,
            adder,
            // The attribute is an f32 in XLA.
            epsilon: inst.attr_float("epsilon").map_or(0.0, |e| e as f32 as f64),
            count,
            results,
        })
    }

    /// A shape of the compute type: the operand's (`full`) or one value per feature.
    fn shape(&self, full: bool) -> Shape {
        let dims = if full { self.dims.clone() } else { vec![self.dims[self.feature]] };
        let mut a = ArrayShape::new(self.ct, &dims);
        if let Some(order) = &self.order {
            a.layout = Some(if full { Layout::new(order) } else { Layout::row_major(1) });
        }
        Shape::Array(a)
    }

    fn add(&mut self, suffix: &str, inst: Instruction) -> InstId {
        let mut inst = inst;
        inst.name = self.comp.unique_name(&format!("{}.{suffix}", self.name));
        self.comp.add(inst)
    }

    fn op(&mut self, suffix: &str, opcode: Opcode, full: bool, operands: Vec<InstId>) -> InstId {
        let shape = self.shape(full);
        self.add(suffix, Instruction::new("", opcode, shape, operands))
    }

    /// Operand `i` in the compute type.
    fn operand(&mut self, i: usize, full: bool) -> InstId {
        let id = self.operands[i];
        if self.comp.inst(id).shape.element_type() == self.ct {
            return id;
        }
        self.op("convert", Opcode::Convert, full, vec![id])
    }

    fn scalar(&mut self, suffix: &str, v: f64) -> InstId {
        let (lit, mut shape) = match self.ct {
            ElementType::F64 => (Literal::scalar(v), Shape::scalar(ElementType::F64)),
            _ => (Literal::scalar(v as f32), Shape::scalar(ElementType::F32)),
        };
        if self.order.is_some() {
            if let Some(a) = shape.as_array_mut() {
                a.layout = Some(Layout::row_major(0));
            }
        }
        let mut c = Instruction::new("", Opcode::Constant, shape, vec![]);
        c.payload = Payload::Constant(lit);
        self.add(suffix, c)
    }

    /// A per-feature value spread over the operand's shape.
    fn spread(&mut self, v: InstId) -> InstId {
        let shape = self.shape(true);
        let b = Instruction::new("", Opcode::Broadcast, shape, vec![v])
            .with_attr("dimensions", AttrValue::Ints(vec![self.feature as i64]));
        self.add("broadcast", b)
    }

    /// A scalar constant as one value per feature.
    fn per_feature(&mut self, suffix: &str, v: f64) -> InstId {
        let c = self.scalar(suffix, v);
        let shape = self.shape(false);
        self.add(
            suffix,
            Instruction::new("", Opcode::Broadcast, shape, vec![c]).with_attr("dimensions", AttrValue::Ints(vec![])),
        )
    }

    /// The sum of each feature of an operand-shaped value.
    fn sum(&mut self, v: InstId) -> InstId {
        let zero = self.scalar("zero", 0.0);
        let shape = self.shape(false);
        let r = Instruction::new("", Opcode::Reduce, shape, vec![v, zero])
            .with_attr("dimensions", AttrValue::Ints(self.others.clone()))
            .with_attr("to_apply", AttrValue::Computation(self.adder));
        self.add("sum", r)
    }

    /// `rsqrt(var + epsilon)` per feature.
    fn rstd(&mut self, var: InstId) -> InstId {
        let eps = self.per_feature("epsilon", self.epsilon);
        let ve = self.op("var_eps", Opcode::Add, false, vec![var, eps]);
        self.op("rstd", Opcode::Rsqrt, false, vec![ve])
    }

    /// `(x - mean) * (scale * r) + offset` over the operand's shape.
    fn normalize(&mut self, xc: InstId, scale: InstId, rstd: InstId, offset: InstId) -> InstId {
        let g = self.op("gain", Opcode::Multiply, false, vec![scale, rstd]);
        let gx = self.spread(g);
        let ox = self.spread(offset);
        let scaled = self.op("scaled", Opcode::Multiply, true, vec![xc, gx]);
        self.op("shifted", Opcode::Add, true, vec![scaled, ox])
    }

    /// `v` converted to declared result `i` (its type and layout).
    fn result(&mut self, i: usize, v: InstId) -> InstId {
        let want = Shape::Array(self.results[i].clone());
        let have = &self.comp.inst(v).shape;
        if have.element_type() == want.element_type()
            && have.as_array().map(|a| &a.layout) == want.as_array().map(|a| &a.layout)
        {
            return v;
        }
        let op = if have.element_type() == want.element_type() { Opcode::Copy } else { Opcode::Convert };
        self.add("result", Instruction::new("", op, want, vec![v]))
    }

    fn tuple(&mut self, parts: Vec<InstId>) -> InstId {
        let shape = Shape::Tuple(self.results.iter().cloned().map(Shape::Array).collect());
        self.add("tuple", Instruction::new("", Opcode::Tuple, shape, parts))
    }

    /// `x - mean` for operand `x` and per-feature `mean` (both in the compute type).
    fn centered(&mut self, x: InstId, mean: InstId) -> InstId {
        let mx = self.spread(mean);
        self.op("centered", Opcode::Subtract, true, vec![x, mx])
    }

    fn training(&mut self) -> Result<InstId, LowerError> {
        let x = self.operand(0, true);
        let scale = self.operand(1, false);
        let offset = self.operand(2, false);
        let n = self.per_feature("count", self.count);
        let sum = self.sum(x);
        let mean = self.op("mean", Opcode::Divide, false, vec![sum, n]);
        let xc = self.centered(x, mean);
        let sq = self.op("square", Opcode::Multiply, true, vec![xc, xc]);
        let ssq = self.sum(sq);
        let var = self.op("var", Opcode::Divide, false, vec![ssq, n]);
        let rstd = self.rstd(var);
        let y = self.normalize(xc, scale, rstd, offset);
        let parts = vec![self.result(0, y), self.result(1, mean), self.result(2, var)];
        Ok(self.tuple(parts))
    }

    fn inference(&mut self) -> Result<InstId, LowerError> {
        let x = self.operand(0, true);
        let scale = self.operand(1, false);
        let offset = self.operand(2, false);
        let mean = self.operand(3, false);
        let var = self.operand(4, false);
        let rstd = self.rstd(var);
        let xc = self.centered(x, mean);
        let y = self.normalize(xc, scale, rstd, offset);
        Ok(self.result(0, y))
    }

    fn grad(&mut self) -> Result<InstId, LowerError> {
        let x = self.operand(0, true);
        let scale = self.operand(1, false);
        let mean = self.operand(2, false);
        let var = self.operand(3, false);
        let dy = self.operand(4, true);
        let n = self.per_feature("count", self.count);
        let rstd = self.rstd(var);
        let xc = self.centered(x, mean);
        let sum_dy = self.sum(dy);
        let dy_xc = self.op("dy_centered", Opcode::Multiply, true, vec![dy, xc]);
        let sum_dy_xc = self.sum(dy_xc);
        let grad_scale = self.op("grad_scale", Opcode::Multiply, false, vec![sum_dy_xc, rstd]);
        // grad_x = scale * r * (dy - sum_dy / N - xc * (r^2 * sum_dy_xc / N))
        let mean_dy = self.op("mean_dy", Opcode::Divide, false, vec![sum_dy, n]);
        let r2 = self.op("rstd_squared", Opcode::Multiply, false, vec![rstd, rstd]);
        let r2s = self.op("rstd_squared_sum", Opcode::Multiply, false, vec![r2, sum_dy_xc]);
        let slope = self.op("slope", Opcode::Divide, false, vec![r2s, n]);
        let gain = self.op("gain", Opcode::Multiply, false, vec![scale, rstd]);
        let mean_dy_x = self.spread(mean_dy);
        let slope_x = self.spread(slope);
        let gain_x = self.spread(gain);
        let d1 = self.op("dy_less_mean", Opcode::Subtract, true, vec![dy, mean_dy_x]);
        let d2 = self.op("projection", Opcode::Multiply, true, vec![xc, slope_x]);
        let d3 = self.op("residual", Opcode::Subtract, true, vec![d1, d2]);
        let gx = self.op("grad_x", Opcode::Multiply, true, vec![gain_x, d3]);
        let parts = vec![self.result(0, gx), self.result(1, grad_scale), self.result(2, sum_dy)];
        Ok(self.tuple(parts))
    }
}
