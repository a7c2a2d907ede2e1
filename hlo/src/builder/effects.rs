//! Random numbers, tokens, infeed/outfeed and custom calls.

use super::types::*;
use super::{Builder, OpResult, Spec, XlaOp};
use crate::element_type::ElementType;
use crate::ir::{AttrValue, Opcode};
use crate::shape::Shape;

impl Builder {
    // ---- Random numbers ---------------------------------------------------------------------

    fn rng<'b>(&'b self, dist: RandomDistribution, a: XlaOp<'b>, b: XlaOp<'b>, shape: &Shape) -> OpResult<XlaOp<'b>> {
        let spec = Spec::new(Opcode::Rng).declared(shape.clone()).attr("distribution", enum_attr(dist.name()));
        self.emit(spec, &[a, b])
    }

    /// Numbers drawn uniformly from `[a, b)`, of `shape`.
    pub fn rng_uniform<'b>(&'b self, a: XlaOp<'b>, b: XlaOp<'b>, shape: &Shape) -> XlaOp<'b> {
        self.op("rng", || self.rng(RandomDistribution::Uniform, a, b, shape))
    }

    /// Numbers drawn from `N(mu, sigma)`, of `shape`.
    pub fn rng_normal<'b>(&'b self, mu: XlaOp<'b>, sigma: XlaOp<'b>, shape: &Shape) -> XlaOp<'b> {
        self.op("rng", || self.rng(RandomDistribution::Normal, mu, sigma, shape))
    }

    /// 1 with probability `mean` (an f32 scalar), else 0, of `shape` (seed 003's
    /// `RngBernoulli`); HLO has no such distribution, so it is a uniform draw compared with
    /// the mean.
    pub fn rng_bernoulli<'b>(&'b self, mean: XlaOp<'b>, shape: &Shape) -> XlaOp<'b> {
        self.op("rng_bernoulli", || {
            let target = shape.as_array().ok_or_else(|| format!("shape {shape} is not an array"))?;
            let mean_shape = self.array(mean, "the mean")?;
            if mean_shape.rank() != 0 || mean_shape.element_type != ElementType::F32 {
                return Err(format!("the mean must be an f32 scalar, not {}", Shape::Array(mean_shape)));
            }
            let (zero, one) = (self.zero(ElementType::F32), self.one(ElementType::F32));
            let uniform =
                self.rng(RandomDistribution::Uniform, zero, one, &Shape::array(ElementType::F32, &target.dims))?;
            let (u, m) = self.broadcast_operands(uniform, mean, &[])?;
            let spec = Spec::new(Opcode::Compare).attr("direction", enum_attr(ComparisonDirection::Lt.name()));
            let hit = self.emit(spec, &[u, m])?;
            self.emit(Spec::new(Opcode::Convert).declared(shape.clone()), &[hit])
        })
    }

    // ---- Side effects and escapes ------------------------------------------------------------

    /// A fresh token (`after-all()`), to order side effects.
    pub fn create_token(&self) -> XlaOp<'_> {
        self.op("after-all", || self.emit(Spec::new(Opcode::AfterAll), &[]))
    }

    /// A token that follows all of `tokens`.
    pub fn after_all<'b>(&'b self, tokens: &[XlaOp<'b>]) -> XlaOp<'b> {
        self.op("after-all", || self.emit(Spec::new(Opcode::AfterAll), tokens))
    }

    /// Reads a value of `shape` from the infeed (XLA's `Infeed`: a fresh token, an `infeed`
    /// of `(shape, token[])`, and its element 0).
    pub fn infeed<'b>(&'b self, shape: &Shape, config: &str) -> XlaOp<'b> {
        self.op("infeed", || {
            let token = self.emit(Spec::new(Opcode::AfterAll), &[])?;
            let infeed = self.infeed_inner(token, shape, config)?;
            self.gte(infeed, 0)
        })
    }

    /// Reads a value of `shape` after `token`; the result is the tuple `(value, token)`.
    pub fn infeed_with_token<'b>(&'b self, token: XlaOp<'b>, shape: &Shape, config: &str) -> XlaOp<'b> {
        self.op("infeed", || self.infeed_inner(token, shape, config))
    }

    fn infeed_inner<'b>(&'b self, token: XlaOp<'b>, shape: &Shape, config: &str) -> OpResult<XlaOp<'b>> {
        let mut spec = Spec::new(Opcode::Infeed).declared(Shape::Tuple(vec![shape.clone(), Shape::Token]));
        if !config.is_empty() {
            spec = spec.attr("infeed_config", AttrValue::Str(config.to_string()));
        }
        self.emit(spec, &[token])
    }

    /// Writes `operand` to the outfeed after a fresh token; returns the outfeed's token.
    pub fn outfeed<'b>(&'b self, operand: XlaOp<'b>, config: &str) -> XlaOp<'b> {
        self.op("outfeed", || {
            let token = self.emit(Spec::new(Opcode::AfterAll), &[])?;
            self.outfeed_inner(operand, token, config)
        })
    }

    /// Writes `operand` to the outfeed after `token`; returns the outfeed's token.
    pub fn outfeed_with_token<'b>(&'b self, operand: XlaOp<'b>, token: XlaOp<'b>, config: &str) -> XlaOp<'b> {
        self.op("outfeed", || self.outfeed_inner(operand, token, config))
    }

    fn outfeed_inner<'b>(&'b self, operand: XlaOp<'b>, token: XlaOp<'b>, config: &str) -> OpResult<XlaOp<'b>> {
        let shape = self.shape(operand)?;
        let mut spec = Spec::new(Opcode::Outfeed).declared(Shape::Token).attr("outfeed_shape", AttrValue::Shape(shape));
        if !config.is_empty() {
            spec = spec.attr("outfeed_config", AttrValue::Str(config.to_string()));
        }
        self.emit(spec, &[operand, token])
    }

    /// A call to the external function `target` returning `shape`.
    pub fn custom_call<'b>(&'b self, target: &str, operands: &[XlaOp<'b>], shape: &Shape) -> XlaOp<'b> {
        self.custom_call_with_config(target, operands, shape, "")
    }

    /// [`Builder::custom_call`] with an opaque `backend_config` string for the target.
    pub fn custom_call_with_config<'b>(
        &'b self,
        target: &str,
        operands: &[XlaOp<'b>],
        shape: &Shape,
        backend_config: &str,
    ) -> XlaOp<'b> {
        self.op("custom-call", || {
            let mut spec = Spec::new(Opcode::CustomCall)
                .declared(shape.clone())
                .attr("custom_call_target", AttrValue::Str(target.to_string()));
            if !backend_config.is_empty() {
                spec = spec.attr("backend_config", AttrValue::Str(backend_config.to_string()));
            }
            self.emit(spec, operands)
        })
    }
}
