//! Folding slices, pads and concatenates into one another, as XLA's simplifier does:
//! - a concatenate drops operands with no elements, and merges neighbouring slices of one
//!   array that continue each other along the concatenated dimension into one slice;
//! - a slice that reads inside one operand of a concatenate slices that operand;
//! - a slice that reads only the operand of a pad (no interior padding) slices the operand;
//! - a pad of a broadcast scalar with that same scalar is a broadcast of it.

use tessera_hlo::ir::{AttrList, AttrValue, PaddingDim, SliceRange};
use tessera_hlo::{Computation, InstId, Instruction, Opcode};

use super::become_op;
use crate::passes::rewrite::become_broadcast;

pub(super) fn fold(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    match comp.inst(id).opcode {
        Opcode::Concatenate => concatenate(comp, id),
        Opcode::Slice => match comp.inst(comp.inst(id).operands[0]).opcode {
            Opcode::Concatenate => slice_of_concatenate(comp, id),
            Opcode::Pad => slice_of_pad(comp, id),
            _ => None,
        },
        Opcode::Pad => pad_of_broadcast(comp, id),
        _ => None,
    }
}

fn slice_ranges(comp: &Computation, id: InstId) -> Option<Vec<SliceRange>> {
    match comp.inst(id).attr("slice")? {
        AttrValue::Slice(r) => Some(r.clone()),
        _ => None,
    }
}

/// How many elements a slice range reads.
fn count(r: &SliceRange) -> i64 {
    if r.limit > r.start && r.stride > 0 {
        (r.limit - r.start + r.stride - 1) / r.stride
    } else {
        0
    }
}

fn concatenate(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let inst = comp.inst(id);
    let dim = usize::try_from(inst.attr_ints("dimensions")?.first().copied()?).ok()?;
    let ops = inst.operands.clone();
    let empty = |o: InstId| comp.inst(o).shape.as_array().and_then(|a| a.element_count()) == Some(0);
    if ops.iter().any(|&o| empty(o)) && ops.iter().any(|&o| !empty(o)) {
        let kept: Vec<InstId> = ops.into_iter().filter(|&o| !empty(o)).collect();
        comp.inst_mut(id).operands = kept;
        return Some("concatenate without its empty operands");
    }
    for k in 0..ops.len().saturating_sub(1) {
        let (a, b) = (comp.inst(ops[k]), comp.inst(ops[k + 1]));
        if a.opcode != Opcode::Slice || b.opcode != Opcode::Slice || a.operands != b.operands {
            continue;
        }
        let (ra, rb) = (slice_ranges(comp, ops[k])?, slice_ranges(comp, ops[k + 1])?);
        let continues = ra.len() == rb.len()
            && dim < ra.len()
            && ra.iter().zip(&rb).enumerate().all(|(d, (x, y))| {
                if d == dim {
                    x.stride == 1 && y.stride == 1 && x.limit == y.start
                } else {
                    x == y
                }
            });
        if !continues {
            continue;
        }
        let mut merged = ra.clone();
        merged[dim].limit = rb[dim].limit;
        let mut shape = a.shape.clone();
        shape.as_array_mut()?.dims[dim] = count(&merged[dim]);
        let name = comp.unique_name(&a.name);
        let slice = comp.add(
            Instruction::new(name, Opcode::Slice, shape, a.operands.clone())
                .with_attr("slice", AttrValue::Slice(merged)),
        );
        let concat = comp.inst_mut(id);
        concat.operands.splice(k..k + 2, [slice]);
        return Some("concatenate of continuing slices: one slice");
    }
    None
}

fn slice_of_concatenate(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let concat = comp.inst(comp.inst(id).operands[0]);
    let dim = usize::try_from(concat.attr_ints("dimensions")?.first().copied()?).ok()?;
    let mut ranges = slice_ranges(comp, id)?;
    let r = *ranges.get(dim)?;
    let n = count(&r);
    if n == 0 {
        return None;
    }
    let last = r.start + (n - 1) * r.stride;
    let mut offset = 0;
    for &o in &concat.operands {
        let size = *comp.inst(o).shape.dims().get(dim)?;
        if r.start >= offset && last < offset + size {
            ranges[dim] = SliceRange { start: r.start - offset, limit: last - offset + 1, stride: r.stride };
            become_op(comp, id, Opcode::Slice, vec![o]);
            comp.inst_mut(id).set_attr("slice", AttrValue::Slice(ranges));
            return Some("slice inside one operand of a concatenate");
        }
        offset += size;
    }
    None
}

fn slice_of_pad(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let pad = comp.inst(comp.inst(id).operands[0]);
    let AttrValue::Padding(padding) = pad.attr("padding")? else { return None };
    let padding: Vec<PaddingDim> = padding.clone();
    let x = pad.operands[0];
    let dims = comp.inst(x).shape.dims().to_vec();
    let ranges = slice_ranges(comp, id)?;
    if ranges.len() != dims.len() || padding.len() != dims.len() {
        return None;
    }
    let mut inner = Vec::with_capacity(ranges.len());
    for ((r, p), &n) in ranges.iter().zip(&padding).zip(&dims) {
        let k = count(r);
        // Operand element j sits at low + j when nothing is interleaved.
        if p.interior != 0 || k == 0 {
            return None;
        }
        let (first, last) = (r.start - p.low, r.start + (k - 1) * r.stride - p.low);
        if first < 0 || last >= n {
            return None;
        }
        inner.push(SliceRange { start: first, limit: last + 1, stride: r.stride });
    }
    become_op(comp, id, Opcode::Slice, vec![x]);
    comp.inst_mut(id).set_attr("slice", AttrValue::Slice(inner));
    Some("slice inside the operand of a pad")
}

fn pad_of_broadcast(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let pad = comp.inst(id);
    let &[x, value] = pad.operands.as_slice() else { return None };
    let b = comp.inst(x);
    if b.opcode != Opcode::Broadcast || comp.inst(b.operands[0]).shape.rank() != 0 {
        return None;
    }
    let s = b.operands[0];
    // The same scalar, or two constants of the same bits (-0 is not 0 here).
    let bits = |i: InstId| comp.inst(i).literal().and_then(|l| l.to_bits_vec().ok().map(|b| (l.element_type(), b)));
    let same = s == value || bits(s).is_some_and(|b| bits(value) == Some(b));
    if !same {
        return None;
    }
    become_broadcast(comp, id, s, vec![]);
    Some("pad of a broadcast scalar with itself: a broadcast")
}
