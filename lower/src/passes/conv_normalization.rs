//! Half-precision convolutions computed in f32, as XLA:CPU computes them: its float
//! normalization widens what its convolution runtime does not take (bf16 and f16 operands) to
//! f32 and rounds the result once, a convert on each side. Here the same rewrite hands the
//! convolution to the runtime's f32 convolution (im2col blocks on the GEMM micro-kernels),
//! where a half-precision one ran as loops summing in f64: a bf16 3x3 convolution of
//! 16x56x56x64 took 768 ms on LLVM, XLA:CPU 29.
//!
//! For a convolution with an f16 or bf16 operand: each such operand is read through a
//! `convert` to f32 (one per operand, however many convolutions read it), and a half result
//! is computed as f32 and converted back under the convolution's name. Products of half
//! values are exact in f32, so what changes is the accumulation (f32, as on XLA:CPU, where
//! the loops summed in f64) and, for a half result, one extra rounding (to f32 first); the
//! interpreter runs this pass too.

use std::collections::HashMap;

use tessera_hlo::ir::UniqueNames;
use tessera_hlo::{Computation, ElementType, InstId, Instruction, Module, Opcode};

use super::rewrite::{become_op, with_type};
use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct ConvNormalization;

impl Pass for ConvNormalization {
    fn name(&self) -> &'static str {
        "conv_normalization"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        let mut changed = false;
        for c in module.comp_ids().collect::<Vec<_>>() {
            changed |= normalize(module.comp_mut(c));
        }
        Ok(changed)
    }
}

fn is_half(et: ElementType) -> bool {
    matches!(et, ElementType::BF16 | ElementType::F16)
}

fn normalize(comp: &mut Computation) -> bool {
    let mut widened: HashMap<InstId, InstId> = HashMap::new();
    let mut names = UniqueNames::of_instructions(comp);
    let mut changed = false;
    for id in comp.post_order() {
        let inst = comp.inst(id);
        if inst.opcode != Opcode::Convolution
            || !inst.shape.is_array()
            || !inst
                .operands
                .iter()
                .any(|&o| comp.inst(o).shape.is_array() && is_half(comp.inst(o).shape.element_type()))
        {
            continue;
        }
        let inst = inst.clone();
        let operands: Vec<InstId> = inst
            .operands
            .iter()
            .map(|&o| {
                let shape = &comp.inst(o).shape;
                if !is_half(shape.element_type()) {
                    return o;
                }
                let wide = with_type(shape, ElementType::F32);
                *widened.entry(o).or_insert_with(|| {
                    let name = names.fresh(&format!("{}.f32", comp.inst(o).name));
                    comp.add(Instruction::new(name, Opcode::Convert, wide, vec![o]))
                })
            })
            .collect();
        if is_half(inst.shape.element_type()) {
            let mut wide = inst.clone();
            wide.name = names.fresh(&format!("{}.f32", inst.name));
            wide.shape = with_type(&inst.shape, ElementType::F32);
            wide.operands = operands;
            wide.control_predecessors.clear();
            let wide = comp.add(wide);
            become_op(comp, id, Opcode::Convert, vec![wide]);
        } else {
            comp.inst_mut(id).operands = operands;
        }
        changed = true;
    }
    if changed {
        comp.order_operands_first();
    }
    changed
}
