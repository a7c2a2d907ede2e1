//! Merges adjacent reduced dimensions of a reduction into one, as XLA's
//! `ReductionDimensionGrouper` does: `reduce(x[8,64,300], dimensions={1,2})` becomes a reduce
//! of `reshape(x)[8,19200]` over dimension 1.
//!
//! Why: the kernel lowering reduces a row in vector lanes when the reduction has one reduced
//! loop, its input's contiguous minor dimension (`emit::reduce`); with two or more reduced
//! dimensions it walks them as nested loops around a serial accumulator (in f64 for f32 sums).
//! Grouped, a full reduction of a small 2-D array is one lane loop: on the LLVM tier the
//! kernel is then explicitly vectorized, so it compiles at light effort, and it runs
//! `W` chains where the serial form waited an add latency per element.
//!
//! Only the reduced dimensions that end a row-major input are merged (the row a lane loop
//! walks), and only when the reduce reads its input in memory order once fused: a buffer (a
//! parameter, a dot's or a custom-call's result...), scalars, and elementwise ops of those.
//! The reshape is then free: it changes no byte's place, and the merged dimension is one
//! contiguous stretch. Through a slice, a transpose or a broadcast, the merged index would be
//! split again by division and remainder, and the row would not vectorize. Leading reduced
//! dimensions (a column reduction) stay as they are: the column form walks them as an outer
//! loop anyway, and `tree_reduction`, which runs first, blocks large ones by them. The kept
//! dimensions and the result are unchanged, and HLO leaves the order in which a reduction
//! combines its elements open, so grouping changes no contract.

use tessera_hlo::ir::{AttrList, AttrValue};
use tessera_hlo::{ArrayShape, Computation, InstId, Instruction, Layout, Module, Opcode, Shape};

use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct ReductionDimensionGrouper {
    decisions: Vec<String>,
}

impl Pass for ReductionDimensionGrouper {
    fn name(&self) -> &'static str {
        "reduction_dimension_grouper"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.decisions.clear();
        let mut changed = false;
        for c in module.comp_ids().collect::<Vec<_>>() {
            let comp = module.comp_mut(c);
            let mut touched = false;
            for id in comp.ids().collect::<Vec<_>>() {
                let Some(groups) = plan(comp, comp.inst(id)) else { continue };
                let decision = group(comp, id, &groups);
                self.decisions.push(decision);
                touched = true;
            }
            if touched {
                comp.order_operands_first();
                changed = true;
            }
        }
        Ok(changed)
    }

    fn report(&self) -> Vec<String> {
        self.decisions.clone()
    }
}

/// The input's dimensions as runs `(first, count, reduced)` of dimensions merged into one,
/// when `inst` is a reduce with two or more adjacent reduced dimensions in static row-major
/// inputs of one shape.
fn plan(comp: &Computation, inst: &Instruction) -> Option<Vec<(usize, usize, bool)>> {
    if inst.opcode != Opcode::Reduce || inst.operands.len() < 2 || inst.operands.len() % 2 != 0 {
        return None;
    }
    let inputs = &inst.operands[..inst.operands.len() / 2];
    let first = comp.get(inputs[0])?.shape.as_array()?;
    let rank = first.dims.len();
    for &input in inputs {
        let shape = comp.get(input)?.shape.as_array()?;
        let row_major = *shape.layout.as_ref()? == Layout::row_major(rank);
        if shape.dims != first.dims || !shape.is_static() || !row_major {
            return None;
        }
    }
    let reduced = inst.attr_ints("dimensions")?;
    let mut is_reduced = vec![false; rank];
    for &d in reduced {
        *is_reduced.get_mut(usize::try_from(d).ok()?)? = true;
    }
    let mut runs: Vec<(usize, usize, bool)> = Vec::new();
    for (d, &r) in is_reduced.iter().enumerate() {
        match runs.last_mut() {
            Some((_, count, true)) if r => *count += 1,
            _ => runs.push((d, 1, r)),
        }
    }
    // The minor run merges; every other run stays a dimension of its own.
    let &(minor, count, true) = runs.last()? else { return None };
    if count < 2 || !inputs.iter().all(|&i| reads_in_order(comp, i, MAX_DEPTH)) {
        return None;
    }
    let mut groups: Vec<(usize, usize, bool)> = (0..minor).map(|d| (d, 1, is_reduced[d])).collect();
    groups.push((minor, count, true));
    Some(groups)
}

/// How deep [`reads_in_order`] follows elementwise operands (it stays linear in module size).
const MAX_DEPTH: usize = 8;

/// Whether a fused read of `id` in row-major order walks memory in order: a buffer (what
/// fusion never inlines into its users' index maps), a scalar, a broadcast scalar, or an
/// elementwise op of those.
fn reads_in_order(comp: &Computation, id: InstId, depth: usize) -> bool {
    let Some(inst) = comp.get(id) else { return false };
    if inst.shape.as_array().is_some_and(|a| a.dims.is_empty()) {
        return true;
    }
    match inst.opcode {
        Opcode::Parameter | Opcode::Dot | Opcode::Convolution | Opcode::CustomCall | Opcode::GetTupleElement => true,
        Opcode::Broadcast => inst
            .operands
            .iter()
            .all(|&o| comp.get(o).and_then(|o| o.shape.as_array()).is_some_and(|a| a.dims.is_empty())),
        op if op.is_elementwise() => depth > 0 && inst.operands.iter().all(|&o| reads_in_order(comp, o, depth - 1)),
        _ => false,
    }
}

/// Rewrites reduce `id`: each input through a reshape that merges the reduced runs of
/// `groups`, and the reduce over the merged dimensions. Returns the decision's line.
fn group(comp: &mut Computation, id: InstId, groups: &[(usize, usize, bool)]) -> String {
    let inst = comp.inst(id).clone();
    let k = inst.operands.len() / 2;
    let mut merged_dims = Vec::with_capacity(groups.len());
    let mut reduced = Vec::new();
    let before = comp.inst(inst.operands[0]).shape.dims().to_vec();
    for (i, &(first, count, r)) in groups.iter().enumerate() {
        // A product of a static array's dimensions: at most its element count.
        merged_dims.push(before[first..first + count].iter().product::<i64>());
        if r {
            reduced.push(i as i64);
        }
    }
    let mut operands = Vec::with_capacity(inst.operands.len());
    for &input in &inst.operands[..k] {
        let et = comp.inst(input).shape.element_type();
        let mut shape = ArrayShape::new(et, &merged_dims);
        shape.layout = Some(Layout::row_major(merged_dims.len()));
        let mut reshape = Instruction::new("", Opcode::Reshape, Shape::Array(shape), vec![input]);
        reshape.name = comp.unique_name(&format!("{}.grouped", comp.inst(input).name));
        operands.push(comp.add(reshape));
    }
    operands.extend_from_slice(&inst.operands[k..]);
    let whole = comp.inst_mut(id);
    whole.operands = operands;
    whole.set_attr("dimensions", AttrValue::Ints(reduced.clone()));
    format!(
        "{}: reduced dimensions {:?} of {:?} grouped: reduces {:?} over {:?}",
        inst.name,
        inst.attr_ints("dimensions").unwrap_or(&[]),
        before,
        merged_dims,
        reduced
    )
}
