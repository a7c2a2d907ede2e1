//! Copies a dot's operands and result into layouts the GEMM call reads and writes, as XLA's
//! dot decomposition canonicalizes a `dot_general` with transposes before its GEMM.
//!
//! The kernel lowering calls GEMM for a dot whose element types it takes
//! ([`crate::emit::dot::gemm_element_types`]) when each operand's free dimensions and
//! contracting dimensions, and the result's two groups of free dimensions, are each one
//! strided run of memory (batch dimensions may lie anywhere); any other dot runs as loops
//! around a scalar multiply-add, which cost 76 ms for a 256x1536x128 f32 product (GEMM: 1.6
//! ms). JAX writes such dots: `jax.image.resize` contracts the middle dimension of an image
//! (`[4,128,128,3]`), leaving free dimensions on both sides of it.
//!
//! So an operand that does not view as a matrix is read through a `copy` laid out batch
//! dimensions first, then (for the left operand) the free and the contracting dimensions,
//! or (for the right one) the contracting and the free dimensions, each group in the order
//! the dot pairs or prints it; a result that GEMM cannot write is computed row-major and
//! copied to the layout its users read. The copy is one pass over the operand, which
//! fusion may merge into the operand's producer. It runs after the layouts are final
//! (`layout_normalize`) and before fusion.

use std::collections::HashMap;

use tessera_hlo::ir::UniqueNames;
use tessera_hlo::{Computation, InstId, Instruction, Layout, LayoutMap, Module, Opcode, Shape};

use crate::emit::dot::{collapse, dot_dims, gemm_element_types, DotDims};
use crate::emit::plain_strides;
use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct DotLayout {
    decisions: Vec<String>,
}

impl Pass for DotLayout {
    fn name(&self) -> &'static str {
        "dot_layout"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.decisions.clear();
        for comp in &mut module.computations {
            let dots: Vec<InstId> = comp.ids().filter(|&id| is_gemm_dot(comp, id)).collect();
            if dots.is_empty() {
                continue;
            }
            let mut names = UniqueNames::of_instructions(comp);
            // One copy per operand and layout, however many dots read it.
            let mut copies: HashMap<(InstId, Vec<i64>), InstId> = HashMap::new();
            let mut changed = false;
            for dot in dots {
                let inst = comp.inst(dot);
                let (lhs, rhs) = (inst.operands[0], inst.operands[1]);
                let dd = dot_dims(inst, comp.inst(lhs).shape.rank(), comp.inst(rhs).shape.rank())?;
                let sides = [
                    (0, lhs, [dd.lhs_batch.clone(), dd.lhs_free.clone(), dd.lhs_contract.clone()]),
                    (1, rhs, [dd.rhs_batch.clone(), dd.rhs_contract.clone(), dd.rhs_free.clone()]),
                ];
                for (slot, operand, [batch, major, minor]) in sides {
                    if views_as_matrix(&comp.inst(operand).shape, [&major, &minor]) {
                        continue;
                    }
                    let order: Vec<usize> = batch.iter().chain(&major).chain(&minor).copied().collect();
                    let minor_to_major: Vec<i64> = order.iter().rev().map(|&d| d as i64).collect();
                    let copy = *copies.entry((operand, minor_to_major.clone())).or_insert_with(|| {
                        let source = comp.inst(operand);
                        let mut shape = source.shape.clone();
                        set_plain_layout(&mut shape, &minor_to_major);
                        let name = names.fresh(&format!("{}.gemm", source.name));
                        comp.add(Instruction::new(name, Opcode::Copy, shape, vec![operand]))
                    });
                    comp.inst_mut(dot).operands[slot] = copy;
                    self.decisions.push(format!(
                        "dot_layout: %{}: operand {slot} %{} read through %{} (its dimensions do not view as a \
                         matrix GEMM reads)",
                        comp.inst(dot).name,
                        comp.inst(operand).name,
                        comp.inst(copy).name
                    ));
                    changed = true;
                }
                let shape = comp.inst(dot).shape.clone();
                if gemm_writes(&dd, &shape) {
                    continue;
                }
                let mut row_major = shape.clone();
                set_plain_layout(&mut row_major, &Layout::row_major(shape.rank()).minor_to_major);
                comp.inst_mut(dot).shape = row_major;
                let name = names.fresh(&format!("{}.relayout", comp.inst(dot).name));
                let copy = comp.add(Instruction::new(name, Opcode::Copy, shape, vec![dot]));
                comp.replace_all_uses(dot, copy);
                self.decisions.push(format!(
                    "dot_layout: %{}: computed row-major and copied to %{} (GEMM cannot write its layout)",
                    comp.inst(dot).name,
                    comp.inst(copy).name
                ));
                changed = true;
            }
            if changed {
                comp.order_operands_first();
            }
        }
        Ok(!self.decisions.is_empty())
    }

    fn report(&self) -> Vec<String> {
        self.decisions.clone()
    }
}

/// Whether the GEMM call can write a dot's result (its batch dimensions, then the left and
/// the right operand's free dimensions) laid out as `shape` says.
fn gemm_writes(dd: &DotDims, shape: &Shape) -> bool {
    let nb = dd.lhs_batch.len();
    let (nl, nr) = (dd.lhs_free.len(), dd.rhs_free.len());
    let (m, n): (Vec<usize>, Vec<usize>) = ((nb..nb + nl).collect(), (nb + nl..nb + nl + nr).collect());
    views_as_matrix(shape, [&m, &n])
}

/// For layout assignment: whether dot `id`, laid out as `shape`, keeps the GEMM call (a dot
/// that is not a GEMM product keeps its loops whatever its layout).
pub(crate) fn gemm_can_write(comp: &Computation, id: InstId, shape: &Shape) -> bool {
    if !is_gemm_dot(comp, id) {
        return true;
    }
    let inst = comp.inst(id);
    let rank = |o: usize| comp.inst(inst.operands[o]).shape.rank();
    dot_dims(inst, rank(0), rank(1)).is_ok_and(|dd| gemm_writes(&dd, shape))
}

/// Whether `id` is a dot the kernel lowering can run as GEMM calls, given layouts it reads.
fn is_gemm_dot(comp: &Computation, id: InstId) -> bool {
    let inst = comp.inst(id);
    let [l, r] = inst.operands.as_slice() else { return false };
    let static_array = |s: &Shape| s.as_array().is_some_and(|a| a.is_static());
    let (ls, rs) = (&comp.inst(*l).shape, &comp.inst(*r).shape);
    inst.opcode == Opcode::Dot
        && static_array(&inst.shape)
        && static_array(ls)
        && static_array(rs)
        && gemm_element_types(ls.element_type(), rs.element_type(), inst.shape.element_type())
}

/// Whether `shape`'s layout is plain strides under which each group of dimensions is one
/// strided run (what the GEMM call needs of a matrix's rows and columns).
fn views_as_matrix(shape: &Shape, groups: [&[usize]; 2]) -> bool {
    let Some(a) = shape.as_array() else { return false };
    let Some(strides) = LayoutMap::new(a).ok().as_ref().and_then(plain_strides) else { return false };
    groups.iter().all(|g| collapse(g, &a.dims, &strides).is_some())
}

/// Gives `shape` the plain layout `minor_to_major`, keeping its memory space (a copy stays
/// where its operand lives).
fn set_plain_layout(shape: &mut Shape, minor_to_major: &[i64]) {
    if let Some(a) = shape.as_array_mut() {
        let space = a.layout.as_ref().map_or(0, |l| l.memory_space);
        let mut layout = Layout::new(minor_to_major);
        if space != 0 {
            layout = layout.with_memory_space(space);
        }
        a.layout = Some(layout);
    }
}
