//! Constant folding, as XLA's `HloConstantFolding`: an instruction whose operands are all
//! constants becomes the constant the interpreter computes for it, so compiled code and the
//! reference agree on it by construction. Broadcasts and iotas are left alone (folding them
//! only makes a large constant of a cheap op), as are ops with side effects or run-time
//! state, and anything whose result or operands exceed a size limit, so folding never bloats
//! a module or its compile time.

use tessera_hlo::eval::evaluate_instruction;
use tessera_hlo::{Literal, Module, Opcode};

use super::dce::has_side_effect;
use super::rewrite::become_constant;
use crate::pass::Pass;
use crate::LowerError;

/// Largest result folded, in elements.
const MAX_RESULT_ELEMENTS: usize = 1 << 16;
/// Largest total operand size folded, in elements (bounds the interpreter's work).
const MAX_OPERAND_ELEMENTS: usize = 1 << 20;

#[derive(Default)]
pub struct ConstantFolding {
    folded: Vec<String>,
}

impl Pass for ConstantFolding {
    fn name(&self) -> &'static str {
        "constant_folding"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.folded.clear();
        let mut changed = false;
        for c in module.comp_ids().collect::<Vec<_>>() {
            for id in module.comp(c).post_order() {
                let Some(lit) = fold(module, c, id) else { continue };
                let comp = module.comp_mut(c);
                self.folded.push(format!("{}: {} folded", comp.inst(id).name, comp.inst(id).opcode));
                become_constant(comp, id, lit);
                changed = true;
            }
        }
        Ok(changed)
    }

    fn report(&self) -> Vec<String> {
        self.folded.clone()
    }
}

fn foldable(op: Opcode) -> bool {
    use Opcode::*;
    !has_side_effect(op)
        && !matches!(
            op,
            Constant
                | Broadcast
                | Iota
                | Bitcast
                | Tuple
                | GetTupleElement
                | Call
                | While
                | Conditional
                | Fusion
                | AfterAll
                | AddDependency
                | RngBitGenerator
                | OptimizationBarrier
                | Domain
        )
}

/// The folded value of instruction `id` of computation `c`, when it folds. An op the
/// interpreter cannot evaluate is simply not folded: the compiled code still runs it.
fn fold(module: &Module, c: tessera_hlo::CompId, id: tessera_hlo::InstId) -> Option<Literal> {
    let comp = module.comp(c);
    let inst = comp.inst(id);
    if inst.operands.is_empty() || !foldable(inst.opcode) || !inst.control_predecessors.is_empty() {
        return None;
    }
    let result = inst.shape.as_array()?;
    if result.element_count()? as usize > MAX_RESULT_ELEMENTS {
        return None;
    }
    let mut operands = Vec::with_capacity(inst.operands.len());
    let mut total = 0usize;
    for &o in &inst.operands {
        let lit = comp.inst(o).literal()?;
        total += lit.element_count();
        operands.push(lit.clone());
    }
    if total > MAX_OPERAND_ELEMENTS {
        return None;
    }
    evaluate_instruction(module, inst, &operands).ok()
}
