//! Common-subexpression elimination, as XLA's `HloCSE`: of two instructions computing the same
//! op on the same operands with the same attributes and result shape, the later one's uses
//! move to the earlier. Operands of commutative ops are compared as a set, so `add(a, b)` and
//! `add(b, a)` merge. Equal constants merge too (up to a size, to keep the comparison cheap).
//! Ops with side effects or run-time state never merge, nor do loops, conditionals and
//! calls (their bodies would have to be compared), opt-barriers and tokens (they order work),
//! rng-bit-generators, and iotas (free to recompute in any kernel that reads them).
//!
//! The computations an op applies (a reduce's reducer, a sort's comparator) are compared by
//! what they compute, as XLA's CSE compares them, not by name: JAX emits a reducer per
//! `jnp.sum`, so the mean a `jnp.var` computes inside its own jit and the mean the caller
//! computes are two reduces of one operand through `region_0` and `region_1`, both `add`.

use std::collections::HashMap;

use tessera_hlo::ir::{AttrValue, Attribute, Payload};
use tessera_hlo::{CompId, Computation, InstId, Instruction, Module, Opcode};

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
        let classes = computation_classes(module);
        for c in module.comp_ids().collect::<Vec<_>>() {
            changed |= cse(module.comp_mut(c), &classes, &mut self.merged);
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

fn same_value(comp: &Computation, a: InstId, b: InstId, classes: &Classes) -> bool {
    let (a, b) = (comp.inst(a), comp.inst(b));
    let class = |c: CompId| classes.get(&c).copied().unwrap_or(c);
    a.shape == b.shape && a.payload == b.payload && same_attrs(a, b, &mut |p, q| class(p) == class(q))
}

/// Each computation that computes what an earlier one (in module order) computes, mapped to
/// that earlier one; computations missing from the map are their own class.
pub(crate) type Classes = HashMap<CompId, CompId>;

/// The module's computations grouped by what they compute: the same instructions in the same
/// order, names aside, calling computations that are the same in turn (see [`same_computation`]).
pub(crate) fn computation_classes(module: &Module) -> Classes {
    // Candidates by size, root and opcodes (cheap to hash); the rest is compared directly.
    let mut groups: HashMap<(usize, usize, Vec<Opcode>), Vec<CompId>> = HashMap::new();
    let mut memo = HashMap::new();
    let mut classes = Classes::new();
    for c in module.comp_ids() {
        let comp = module.comp(c);
        let key = (comp.instructions.len(), comp.root.index(), comp.instructions.iter().map(|i| i.opcode).collect());
        let firsts = groups.entry(key).or_default();
        match firsts.iter().copied().find(|&f| same_computation(module, f, c, &mut memo)) {
            Some(first) => {
                classes.insert(c, first);
            }
            None => firsts.push(c),
        }
    }
    classes
}

/// Whether computations `a` and `b` hold the same instructions in the same order (op, shape,
/// operands by position, payload, attributes other than metadata), names aside, with the
/// computations they call the same in turn. HLO computations never call themselves, so the
/// recursion ends.
fn same_computation(module: &Module, a: CompId, b: CompId, memo: &mut HashMap<(CompId, CompId), bool>) -> bool {
    if a == b {
        return true;
    }
    if let Some(&same) = memo.get(&(a, b)) {
        return same;
    }
    let same = same_instructions(module.comp(a), module.comp(b), &mut |p, q| same_computation(module, p, q, memo));
    memo.insert((a, b), same);
    same
}

/// Whether `ca` and `cb` hold the same instructions in the same order (op, shape, operands by
/// position, payload, attributes other than metadata), names aside, the computations they
/// call compared by `same_comp`.
pub(crate) fn same_instructions(
    ca: &Computation,
    cb: &Computation,
    same_comp: &mut dyn FnMut(CompId, CompId) -> bool,
) -> bool {
    ca.instructions.len() == cb.instructions.len()
        && ca.root == cb.root
        && ca.execution_thread == cb.execution_thread
        && ca.instructions.iter().zip(&cb.instructions).all(|(x, y)| {
            x.opcode == y.opcode
                && x.shape == y.shape
                && x.operands == y.operands
                && x.control_predecessors == y.control_predecessors
                && x.payload == y.payload
                && same_attrs(x, y, same_comp)
        })
}

/// Whether `a` and `b` carry the same attributes other than metadata, computations compared
/// by `same_comp`.
fn same_attrs(a: &Instruction, b: &Instruction, same_comp: &mut dyn FnMut(CompId, CompId) -> bool) -> bool {
    let mut sa = a.attrs.iter().filter(|attr| attr.name != "metadata");
    let mut sb = b.attrs.iter().filter(|attr| attr.name != "metadata");
    loop {
        let (x, y): (&Attribute, &Attribute) = match (sa.next(), sb.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) => (x, y),
            _ => return false,
        };
        let same = x.name == y.name
            && match (&x.value, &y.value) {
                (AttrValue::Computation(p), AttrValue::Computation(q)) => same_comp(*p, *q),
                (AttrValue::Computations(ps), AttrValue::Computations(qs)) => {
                    ps.len() == qs.len() && ps.iter().zip(qs).all(|(p, q)| same_comp(*p, *q))
                }
                (p, q) => p == q,
            };
        if !same {
            return false;
        }
    }
}

pub(crate) fn cse(comp: &mut Computation, classes: &Classes, log: &mut Vec<String>) -> bool {
    // Candidates by op and resolved operands (cheap to hash); the rest is compared directly.
    let mut seen: HashMap<(Opcode, Vec<InstId>), Vec<InstId>> = HashMap::new();
    // Operands first, keyed through the merges already decided, so chains of duplicates
    // merge in one run; uses move all at once at the end.
    let mut target: Vec<InstId> = comp.ids().collect();
    let mut merged = Vec::new();
    for id in comp.post_order() {
        let Some(operands) = operands_key(comp, id, &target) else { continue };
        let candidates = seen.entry((comp.inst(id).opcode, operands)).or_default();
        match candidates.iter().copied().find(|&first| same_value(comp, first, id, classes)) {
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
