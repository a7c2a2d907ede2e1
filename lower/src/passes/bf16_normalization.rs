//! bf16 arithmetic with XLA:CPU's excess precision (`xla_allow_excess_precision`, on by
//! default in XLA): where a bf16 op that rounds its result feeds an explicit `convert` to f32,
//! that convert reads the op's f32 result before it was rounded to bf16.
//!
//! Why only this much: XLA:CPU normalizes every bf16 op to f32 (`FloatNormalization`): the op
//! computes in f32 and a convert rounds its result back to bf16. While it does so it hands
//! users that are themselves `convert`s to f32 the unrounded f32 value, and that is the only
//! place the normalization changes a result. Round trips between two normalized bf16 ops stay
//! (`subtract(multiply(x, x), z)` in bf16 rounds the product; XLA:CPU's optimized module keeps
//! the `f32 -> bf16 -> f32` pair, measured with jax 0.10), reductions round their accumulator
//! after every step as their bf16 computation says, and f16 is not normalized at all: its ops
//! round per op on XLA:CPU too. Tessera computes every bf16 op in f32 and rounds it, so this
//! pass is all it takes to compute bf16 as XLA:CPU does. A model that reads an activation as
//! f32 (`x.astype(f32)` after a bf16 multiply, as norms do) therefore sees more precision than
//! its bf16 type promises, exactly as on XLA:CPU.
//!
//! The rewrite, for such an op `y = op(a, b)`: `y.f32 = op(a', b')` in f32 (operands converted
//! to f32; dots and convolutions keep their operands and only widen their result type), `y`
//! becomes `convert(y.f32)`, and each f32 convert user of `y` becomes `y.f32` (a copy when its
//! layout differs). Strict per-op rounding is this pass left out of the pipeline.

use std::collections::HashMap;

use tessera_hlo::ir::UniqueNames;
use tessera_hlo::{Computation, ElementType, InstId, Instruction, Module, Opcode};

use super::rewrite::{become_op, forward, with_type, Forwards};
use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct Bf16Normalization;

impl Pass for Bf16Normalization {
    fn name(&self) -> &'static str {
        "bf16_normalization"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        let mut changed = false;
        for c in module.comp_ids().collect::<Vec<_>>() {
            changed |= normalize(module.comp_mut(c));
        }
        Ok(changed)
    }
}

/// Ops whose f32 result is not in general a bf16 value, so that handing it on unrounded
/// changes what a convert user sees. Exact ops (negate, abs, max, select, data movement...)
/// would give the same value either way; reductions and other ops with a bf16 computation
/// round inside it.
fn rounds(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        Add | Subtract
            | Multiply
            | Divide
            | Power
            | Atan2
            | Exp
            | Expm1
            | Log
            | Log1p
            | Logistic
            | Tanh
            | Sqrt
            | Rsqrt
            | Cbrt
            | Sin
            | Cos
            | Tan
            | Erf
            | Iota
            | Dot
            | Convolution
    )
}

fn is_f32_convert(inst: &Instruction) -> bool {
    inst.opcode == Opcode::Convert && inst.shape.is_array() && inst.shape.element_type() == ElementType::F32
}

fn normalize(comp: &mut Computation) -> bool {
    let users = comp.users();
    let mut forwarded = Forwards::default();
    // One f32 convert per bf16 operand, however many rewritten ops read it.
    let mut widened: HashMap<InstId, InstId> = HashMap::new();
    let mut names = UniqueNames::of_instructions(comp);
    for id in comp.post_order() {
        forwarded.update_operands(comp, id);
        let inst = comp.inst(id);
        let bf16 = inst.shape.is_array() && inst.shape.element_type() == ElementType::BF16;
        if !bf16 || !rounds(inst.opcode) {
            continue;
        }
        let converts: Vec<InstId> =
            users[id.index()].iter().copied().filter(|&u| is_f32_convert(comp.inst(u))).collect();
        if converts.is_empty() {
            continue;
        }
        let inst = inst.clone();
        let keeps_operands = matches!(inst.opcode, Opcode::Dot | Opcode::Convolution);
        let operands: Vec<InstId> = inst
            .operands
            .iter()
            .map(|&o| {
                let shape = &comp.inst(o).shape;
                if keeps_operands || shape.element_type() != ElementType::BF16 {
                    return o;
                }
                let wide = with_type(shape, ElementType::F32);
                *widened.entry(o).or_insert_with(|| {
                    let name = names.fresh(&format!("{}.f32", comp.inst(o).name));
                    comp.add(Instruction::new(name, Opcode::Convert, wide, vec![o]))
                })
            })
            .collect();
        let mut wide = inst.clone();
        wide.name = names.fresh(&format!("{}.f32", inst.name));
        wide.shape = with_type(&inst.shape, ElementType::F32);
        wide.operands = operands;
        wide.control_predecessors.clear();
        let wide_shape = wide.shape.clone();
        let wide = comp.add(wide);
        become_op(comp, id, Opcode::Convert, vec![wide]);
        for u in converts {
            if comp.inst(u).shape == wide_shape {
                forward(comp, u, wide, &mut forwarded);
            } else {
                // Same values in another layout.
                become_op(comp, u, Opcode::Copy, vec![wide]);
            }
        }
    }
    let changed = !forwarded.is_empty() || comp.instructions.len() > users.len();
    if changed {
        forwarded.finish(comp);
        comp.order_operands_first();
    }
    changed
}
