//! Producer-consumer multi-output fusion, after XLA's multi-output fusion of a producer into
//! its consumer: a loop kernel whose value a column reduction reads, and other kernels read
//! too, is computed by the column reduction's sweep, which writes it as one more result. A
//! bias gradient's `dy` is the usual case: the kernel computing it fed the dots of the
//! backward pass and the reduction summing its columns, so it was written to memory and then
//! read back by the reduction. The merged kernel reads the producer's operands instead and
//! writes the value as it reduces it (`emit::column_reduce`), one pass over memory fewer; the
//! other users read the value from its new place.
//!
//! A pair merges when the producer is a loop kernel (as sibling fusion means it) of the
//! reduction's input shape, layout included, whose ops the sweep computes in its vector loop
//! (`column_reduce::is_input_op`); when it has users besides the reduction (with none,
//! fusion would have inlined it); when the reduction is a column reduction kernel (one
//! reduce, or the sibling reductions merged before, with values merged by this step) of at
//! most [`MAX_OUTPUTS`] - 1 results, not both of them running a math sequence; and when no
//! other operand of the reduction depends on the producer (the merged kernel would read its
//! own result). Neither may be its computation's root or carry control dependencies.
//!
//! The merged fusion keeps the reduction's name when the reduction already had several
//! results (its `get-tuple-element` users stay as they are), else it is named after it plus
//! `.multi_output` and the reduction becomes its first `get-tuple-element`; the producer
//! becomes its last, under the producer's name.

use std::collections::HashMap;

use tessera_hlo::ir::{AttrValue, UniqueNames};
use tessera_hlo::{CompId, Computation, InstId, Instruction, Module, Opcode, Shape};

use super::{column_kernel, kernel_kind, may_reach, movable, runs_math, FusionDecision, Kind, Merged, MAX_OUTPUTS};
use crate::emit::column_reduce;

const REASON: &str = "producer-consumer: the column reduction's sweep computes it and writes it as one more result, instead of reading it back from memory";

/// Merges every producer-consumer pair of `comp_id` (module doc), one at a time (each merge
/// changes the users the next one looks at); true when any merged.
pub(super) fn merge_producers(
    module: &mut Module,
    names: &mut UniqueNames,
    comp_id: CompId,
    decisions: &mut Vec<FusionDecision>,
) -> bool {
    let mut changed = false;
    while let Some((reduction, producer)) = find_pair(module, module.comp(comp_id)) {
        let merged = merge_pair(module, names, comp_id, reduction, producer);
        decisions.push(FusionDecision {
            producer: module.comp(comp_id).inst(producer).name.clone(),
            consumer: merged,
            fused: true,
            reason: REASON,
        });
        module.comp_mut(comp_id).order_operands_first();
        changed = true;
    }
    changed
}

/// Whether arrays of shapes `a` and `b` (of any element types) have their elements at the same
/// places, as the column sweep's stores of a value at its input's index need.
fn same_places(a: &Shape, b: &Shape) -> bool {
    match (crate::emit::layout_map(a, "value"), crate::emit::layout_map(b, "input")) {
        (Ok(a), Ok(b)) => column_reduce::same_places(&a, &b),
        _ => false,
    }
}

/// Whether loop kernel `inst` (a fusion, or a lone op) computes with ops the column sweep's
/// vector loop computes; with `sums_f32`, only f32 arithmetic and data movement, which it
/// computes in lanes beside f64 accumulators. The Cranelift tier runs such a loop two lanes
/// at a time, f32 values in the low half of a vector, and vectorizes no f32 compares or
/// selects there (their masks would not fit the f64 ones) nor 32-bit integer lanes (the
/// math sequences' bit operations, bf16 widening): a relu gradient's select merged into
/// batch norm's sums made that sweep scalar, 1.0 to 7.3 ms for an f32[8,32,32,64].
///
/// Beside f64 accumulators the value is also computed at half the lanes its own kernel had,
/// so only a light one merges there (at most [`MAX_DEPTH_BESIDE_F64`] ops deep): a GELU
/// gradient (ten ops deep) merged into its bias gradient's sums made a kernel of 4.4 ms, where
/// the gradient's own kernel had taken 2.4 and the sums under 2 (f32[512,3072], one thread,
/// LLVM), while a multiply merged into batch norm's sums saved 0.4 ms of 0.9 (Cranelift).
fn sweepable(module: &Module, inst: &Instruction, sums_f32: bool) -> bool {
    let beside_f64 = |op: Opcode| {
        use Opcode::*;
        matches!(
            op,
            Add | Subtract
                | Multiply
                | Divide
                | Negate
                | Abs
                | Maximum
                | Minimum
                | Sqrt
                | Constant
                | Broadcast
                | Reshape
                | Transpose
                | Slice
                | Copy
        )
    };
    let fits = |op: Opcode| column_reduce::is_input_op(op) && (!sums_f32 || beside_f64(op));
    match inst.called("calls").and_then(|c| module.get(c)) {
        Some(body) if inst.opcode == Opcode::Fusion => {
            body.instructions.iter().all(|i| i.opcode == Opcode::Parameter || fits(i.opcode))
                && (!sums_f32 || depth(body) <= MAX_DEPTH_BESIDE_F64)
        }
        _ => fits(inst.opcode),
    }
}

/// See [`sweepable`].
const MAX_DEPTH_BESIDE_F64: usize = 3;

/// The longest chain of computing ops in `body` (parameters, constants and broadcasts, which
/// the loop reads or hoists, not counted).
fn depth(body: &Computation) -> usize {
    let mut depth = vec![0usize; body.instructions.len()];
    for id in body.post_order() {
        let i = body.inst(id);
        let below = i.operands.iter().map(|o| depth[o.index()]).max().unwrap_or(0);
        let counts = !matches!(i.opcode, Opcode::Parameter | Opcode::Constant | Opcode::Broadcast);
        depth[id.index()] = below + usize::from(counts);
    }
    depth[body.root.index()]
}

/// The first (column reduction, producer) pair of `comp` to merge, in post order.
fn find_pair(module: &Module, comp: &Computation) -> Option<(InstId, InstId)> {
    let order = comp.post_order();
    let position: HashMap<InstId, usize> = order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let movable = movable(comp);
    let users = comp.users();
    for &r in &order {
        let reduction = comp.inst(r);
        if !movable(r) {
            continue;
        }
        let Some(column) = column_kernel(module, reduction) else { continue };
        if column.results >= MAX_OUTPUTS {
            continue;
        }
        // Long f32 sums accumulate in f64 (`sweepable`).
        let sums_f32 = column_reduce::sums_in_f64(column.input, column.dims, column.plain_add);
        let math = runs_math(module, reduction);
        for &p in &reduction.operands {
            let producer = comp.inst(p);
            let fits = movable(p)
                && users[p.index()].iter().any(|&u| u != r)
                && matches!(kernel_kind(module, comp, producer), Some(Kind::Loop(_)))
                && same_places(&producer.shape, column.input)
                && sweepable(module, producer, sums_f32)
                && !(math && runs_math(module, producer))
                && reduction.operands.iter().all(|&o| o == p || !may_reach(comp, &position, p, o));
            if fits {
                return Some((r, p));
            }
        }
    }
    None
}

/// Merges `producer`, a kernel of one result, into the kernel `reduction` that reads it (the
/// column reduction of the module doc, or the row kernel of a row value `fusion` materialized
/// for a sparse reader): the merged kernel computes the producer's value inside and writes it
/// as its last result. Returns the merged fusion's name.
pub(crate) fn merge_pair(
    module: &mut Module,
    names: &mut UniqueNames,
    comp_id: CompId,
    reduction: InstId,
    producer: InstId,
) -> String {
    let comp = module.comp(comp_id);
    let mut m = Merged::new(names.fresh("fused_computation"));
    let [value] = m.copy(module, comp, producer, &HashMap::new())[..] else {
        unreachable!("find_pair merges loop kernels, which have one result")
    };
    // The reduction's results, then the value.
    let mut results = m.copy(module, comp, reduction, &HashMap::from([(producer, value)]));
    results.push(value);
    let shapes: Vec<Shape> = results.iter().map(|&r| m.fused.inst(r).shape.clone()).collect();
    let tuple = Instruction::new(m.name("tuple"), Opcode::Tuple, Shape::Tuple(shapes.clone()), results);
    m.fused.root = m.fused.add(tuple);
    // The reduction held copies of the cheap producers the value holds too.
    crate::passes::cse::cse(&mut m.fused, &crate::passes::cse::Classes::new(), &mut Vec::new());
    let fused_id = module.add_computation(m.fused);
    let comp = module.comp_mut(comp_id);
    let had_tuple = comp.inst(reduction).shape.is_tuple();
    let name = if had_tuple {
        comp.inst(reduction).name.clone()
    } else {
        comp.unique_name(&format!("{}.multi_output", comp.inst(reduction).name))
    };
    let fusion = Instruction::new(name.clone(), Opcode::Fusion, Shape::Tuple(shapes.clone()), m.outside)
        .with_attr("kind", AttrValue::Enum("kInput".to_string()))
        .with_attr("calls", AttrValue::Computation(fused_id));
    let fusion = if had_tuple {
        *comp.inst_mut(reduction) = fusion;
        reduction
    } else {
        let id = comp.add(fusion);
        let gte =
            Instruction::new(comp.inst(reduction).name.clone(), Opcode::GetTupleElement, shapes[0].clone(), vec![id])
                .with_attr("index", AttrValue::Int(0));
        *comp.inst_mut(reduction) = gte;
        id
    };
    let last = shapes.len() - 1;
    let gte =
        Instruction::new(comp.inst(producer).name.clone(), Opcode::GetTupleElement, shapes[last].clone(), vec![fusion])
            .with_attr("index", AttrValue::Int(last as i64));
    *comp.inst_mut(producer) = gte;
    name
}
