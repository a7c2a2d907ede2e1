//! Common-subexpression elimination, as XLA's `HloCSE`: of two instructions computing the same
//! op on the same operands with the same attributes and result shape, the later one's uses
//! move to the earlier. Operands of commutative ops are compared as a set, so `add(a, b)` and
//! `add(b, a)` merge. Equal constants merge too (up to a size, to keep the comparison cheap).
//! Ops with side effects or run-time state never merge, nor do loops, conditionals and
//! calls (their bodies would have to be compared), opt-barriers and tokens (they order work),
//! rng-bit-generators, and iotas (free to recompute in any kernel that reads them).

use std::collections::HashMap;

use tessera_hlo::ir::Payload;
use tessera_hlo::{Computation, InstId, Module, Opcode};

use super::dce::has_side_effect;
use super::rewrite::drop_forwarded;
use crate::pass::Pass;
use crate::LowerError;

/// Constants larger than this many elements are not compared.
const MAX_CONSTANT_ELEMENTS: usize = 4096;

#[derive(Default)]
pub struct Cse {
    merged: Vec<String>,
}

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.merged.clear();
        let mut changed = false;
        for c in module.comp_ids().collect::<Vec<_>>() {
            changed |= cse(module.comp_mut(c), &mut self.merged);
        }
        Ok(changed)
    }

    fn report(&self) -> Vec<String> {
        self.merged.clone()
    }
}

fn commutative(op: Opcode) -> bool {
    use Opcode::*;
    matches!(op, Add | Multiply | Maximum | Minimum | And | Or | Xor)
}

fn mergeable(op: Opcode) -> bool {
    use Opcode::*;
    !has_side_effect(op)
        && !matches!(op, While | Conditional | Call | Fusion | AfterAll | RngBitGenerator | Iota | OptimizationBarrier)
}

/// What decides whether two instructions compute the same value: op, operands (through the
/// merges already decided; as a set for commutative ops), result shape, attributes other than
/// metadata, and payload (constants compared bit for bit). `None` for instructions that never
/// merge.
fn operands_key(comp: &Computation, id: InstId, target: &[InstId]) -> Option<Vec<InstId>> {
    let inst = comp.inst(id);
    if !mergeable(inst.opcode) || !inst.control_predecessors.is_empty() {
        return None;
    }
    if let Payload::Constant(lit) = &inst.payload {
        if lit.element_count() > MAX_CONSTANT_ELEMENTS {
            return None;
        }
    }
    let mut operands: Vec<InstId> = inst.operands.iter().map(|&o| target[o.index()]).collect();
    if commutative(inst.opcode) {
        operands.sort();
    }
    Some(operands)
}

fn same_value(comp: &Computation, a: InstId, b: InstId) -> bool {
    let (a, b) = (comp.inst(a), comp.inst(b));
    let significant_a = a.attrs.iter().filter(|attr| attr.name != "metadata");
    let significant_b = b.attrs.iter().filter(|attr| attr.name != "metadata");
    a.shape == b.shape && a.payload == b.payload && significant_a.eq(significant_b)
}

pub(crate) fn cse(comp: &mut Computation, log: &mut Vec<String>) -> bool {
    // Candidates by op and resolved operands (cheap to hash); the rest is compared directly.
    let mut seen: HashMap<(Opcode, Vec<InstId>), Vec<InstId>> = HashMap::new();
    // Operands first, keyed through the merges already decided, so chains of duplicates
    // merge in one run; uses move all at once at the end.
    let mut target: Vec<InstId> = comp.ids().collect();
    let mut merged = Vec::new();
    for id in comp.post_order() {
        let Some(operands) = operands_key(comp, id, &target) else { continue };
        let candidates = seen.entry((comp.inst(id).opcode, operands)).or_default();
        match candidates.iter().copied().find(|&first| same_value(comp, first, id)) {
            Some(first) => {
                target[id.index()] = first;
                merged.push(id);
                log.push(format!("{}: the same as {}", comp.inst(id).name, comp.inst(first).name));
            }
            None => candidates.push(id),
        }
    }
    if merged.is_empty() {
        return false;
    }
    for inst in &mut comp.instructions {
        for o in inst.operands.iter_mut().chain(inst.control_predecessors.iter_mut()) {
            *o = target[o.index()];
        }
    }
    comp.root = target[comp.root.index()];
    drop_forwarded(comp, &merged);
    comp.order_operands_first();
    true
}
