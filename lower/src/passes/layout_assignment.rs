//! Chooses the layouts of intermediate values, as XLA's layout assignment does: a layout the
//! front end wrote on an intermediate is a hint, not a constraint (only the entry's parameters
//! and result have layouts the caller sees, DESIGN.md section 3). JAX writes permuted layouts
//! on transposes (`transpose(dot) {0,1}`, a training step's weight gradient), and an
//! elementwise kernel writing row-major then reads that value across its rows, a cache line
//! per element.
//!
//! An array value whose layout is a plain permutation (no tiles, element size, memory space
//! or padding: those are physical requests, kept) becomes row-major, the order kernels write
//! and GEMM reads best, when its layout is free: it is computed by an op that reads its
//! operands logically and can write any layout, it is not a computation's parameter or root
//! (those layouts are shared with a caller), and every user reads it logically too (not a
//! tuple, control flow, bitcast or custom-call, whose meaning or callee depends on the
//! bytes). Transposes then fold into the ops around them: `transpose(dot)` is a dot of the
//! swapped operands (`algebraic_simplifier`), and a copy that only changed the layout has
//! nothing left to do. A dot read only by a transpose the simplifier cannot fold (attention's
//! heads moved back beside the sequence) is laid out in that transpose's physical order:
//! GEMM writes any strides, and the transpose then reads it in order.

use tessera_hlo::ir::AttrList;
use tessera_hlo::{Computation, InstId, Instruction, Layout, Module, Opcode, Shape};

use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct LayoutAssignment {
    /// One line per value whose layout changed.
    changes: Vec<String>,
}

impl Pass for LayoutAssignment {
    fn name(&self) -> &'static str {
        "layout_assignment"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.changes.clear();
        for comp in &mut module.computations {
            let users = comp.users();
            let free: Vec<InstId> = (0..comp.instructions.len())
                .map(|i| InstId(i as u32))
                .filter(|&id| id != comp.root && layout_free(comp, id, &users[id.index()]))
                .collect();
            for id in free {
                let Shape::Array(a) = &mut comp.inst_mut(id).shape else { continue };
                let rank = a.rank();
                let Some(layout) = a.layout.as_mut() else { continue };
                let stated = layout.minor_to_major.clone();
                *layout = Layout::row_major(rank);
                let name = &comp.inst(id).name;
                self.changes.push(format!(
                    "layout_assignment: %{name}: {} -> row-major (no user needs the stated order)",
                    braces(&stated)
                ));
            }
            // Then a dot read only by a transpose is laid out in the transpose's physical
            // order: GEMM writes any strides, and the transpose (fused into its users)
            // reads it contiguously instead of across its rows.
            let users = comp.users();
            for i in 0..comp.instructions.len() {
                let id = InstId(i as u32);
                let Some(want) = transposed_dot_layout(comp, id, &users[i]) else { continue };
                let Shape::Array(a) = &mut comp.inst_mut(id).shape else { continue };
                let Some(layout) = a.layout.as_mut() else { continue };
                let stated = std::mem::replace(&mut layout.minor_to_major, want.clone());
                let name = &comp.inst(id).name;
                self.changes.push(format!(
                    "layout_assignment: %{name}: {} -> {} (its transpose reads it in order)",
                    braces(&stated),
                    braces(&want)
                ));
            }
        }
        Ok(!self.changes.is_empty())
    }

    fn report(&self) -> Vec<String> {
        self.changes.clone()
    }
}

fn braces(mtm: &[i64]) -> String {
    format!("{{{}}}", mtm.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
}

/// For a dot whose one user is a transpose, the minor-to-major order that makes the
/// transpose's physical order the dot's, when it differs from the dot's own and GEMM writes it.
fn transposed_dot_layout(comp: &Computation, id: InstId, users: &[InstId]) -> Option<Vec<i64>> {
    let inst = comp.inst(id);
    let [t] = users else { return None };
    let t = comp.inst(*t);
    if inst.opcode != Opcode::Dot || t.opcode != Opcode::Transpose || id == comp.root {
        return None;
    }
    let plain = |s: &Shape| {
        let a = s.as_array()?;
        let l = a.layout.as_ref()?;
        (a.is_static() && *l == Layout::new(&l.minor_to_major)).then(|| l.minor_to_major.clone())
    };
    let (mine, theirs) = (plain(&inst.shape)?, plain(&t.shape)?);
    let perm = t.attr_ints("dimensions")?;
    let want: Vec<i64> =
        theirs.iter().map(|&d| usize::try_from(d).ok().and_then(|d| perm.get(d).copied())).collect::<Option<_>>()?;
    if want == mine || want.len() != mine.len() {
        return None;
    }
    // Unless the GEMM call could not write it so: `dot_layout` would then undo it with a copy.
    let mut shape = inst.shape.clone();
    shape.as_array_mut()?.layout = Some(Layout::new(&want));
    super::dot_layout::gemm_can_write(comp, id, &shape).then_some(want)
}

/// Whether instruction `id` has a permuted layout nothing depends on (module doc).
fn layout_free(comp: &Computation, id: InstId, users: &[InstId]) -> bool {
    let inst = comp.inst(id);
    let Shape::Array(a) = &inst.shape else { return false };
    let Some(layout) = &a.layout else { return false };
    let plain = *layout == Layout::new(&layout.minor_to_major);
    plain
        && *layout != Layout::row_major(a.rank())
        && a.is_static()
        && writes_any_layout(inst)
        && !users.is_empty()
        && users.iter().all(|&u| reads_logically(comp.inst(u)))
}

/// Ops the kernel lowering computes at any output layout from operands in any layout.
fn writes_any_layout(inst: &Instruction) -> bool {
    use Opcode::*;
    inst.opcode.is_elementwise()
        || matches!(
            inst.opcode,
            Broadcast
                | Reshape
                | Transpose
                | Slice
                | Reverse
                | Pad
                | Concatenate
                | Iota
                | Convert
                | Copy
                | Dot
                | Reduce
                | Gather
                | DynamicSlice
                | DynamicUpdateSlice
        )
}

/// Users whose result does not depend on how an operand's elements are laid out.
fn reads_logically(user: &Instruction) -> bool {
    writes_any_layout(user) || matches!(user.opcode, Opcode::Convolution | Opcode::ReduceWindow | Opcode::Scatter)
}
