//! Updates that write into their operand's buffer in place: when the program binds the
//! kernel's output to the operand's own buffer (the operand dies at the update; see
//! `build_program`), a `dynamic-update-slice` writes only the update window, over the update's
//! elements, and a `scatter` only combines its windows, instead of first copying the whole
//! operand around them. This is what makes a scan's per-step output write cost the step's
//! slice rather than the whole sequence, and an `x.at[i].add(u)` of a large `x` cost its
//! updates (the fresh scatter kernel copies its operand on one thread first).
//!
//! The root is the update (a lone op or a fusion's root) whose operand is a parameter used by
//! nothing else, so the kernel reads the buffer it writes only where the update combines
//! with what is there (a scatter's `to_apply`); the update's own producers fuse as usual.

use tessera_hlo::ir::Payload;
use tessera_hlo::{ArrayShape, Computation, ElementType, Layout, LayoutMap, Module, Opcode};

use super::{index, types, Emitter};
use crate::kernel::{IndexExpr, Kernel};
use crate::LowerError;

/// The parameter number of the operand `comp`'s root updates in place, when the root is a
/// `dynamic-update-slice` or a single-input `scatter`: its operand a parameter nothing else
/// uses, laid out as the result, an untiled output of a byte-addressed element type (not
/// complex: those are interleaved pairs).
pub fn in_place_operand(comp: &Computation) -> Option<usize> {
    let root = comp.root_inst();
    let updates = match root.opcode {
        Opcode::DynamicUpdateSlice => true,
        // Operand, indices, updates: one result.
        Opcode::Scatter => root.operands.len() == 3,
        _ => false,
    };
    if !updates {
        return None;
    }
    let &operand = root.operands.first()?;
    let param = comp.inst(operand);
    let Payload::Parameter(n) = param.payload else { return None };
    let uses = comp.instructions.iter().flat_map(|i| &i.operands).filter(|&&o| o == operand).count();
    let shape = root.shape.as_array()?;
    // The operand's buffer becomes the result's only if it places every element alike.
    let same_placement = match (LayoutMap::new(shape), param.shape.as_array().map(LayoutMap::new)) {
        (Ok(out), Some(Ok(operand))) => out == operand,
        _ => false,
    };
    if !same_placement {
        return None;
    }
    let layout = shape.layout.as_ref()?;
    let plain = layout.tiles.is_empty() && layout.element_size_bits == 0;
    let et = shape.element_type;
    let byte_addressed = et.bit_width() as usize == et.byte_size() * 8 && et != ElementType::Pred;
    (uses == 1 && plain && byte_addressed && !et.is_complex()).then_some(n as usize).filter(|_| comp.root != operand)
}

/// The kernel of `comp` (whose root [`in_place_operand`] accepts) writing only the update
/// window into its output buffer, which the program binds to the operand's buffer.
pub fn emit_in_place_kernel(module: &Module, comp: &Computation, name: &str, fma: bool) -> Result<Kernel, LowerError> {
    if in_place_operand(comp).is_none() {
        return Err(LowerError::invalid(&comp.root_inst().name, "not an update in place"));
    }
    let mut em = Emitter::new(module, comp, name)?;
    em.b.use_fused_multiply_add(fma);
    match comp.root_inst().opcode {
        Opcode::Scatter => em.emit_scatter_updates()?,
        _ => em.emit_update_window()?,
    }
    Ok(em.into_kernel())
}

impl<'m> Emitter<'m> {
    /// Loops over the update's elements in the output's dimension order and stores each at
    /// the clamped start plus its index.
    fn emit_update_window(&mut self) -> Result<(), LowerError> {
        let f = self.fused_frame();
        let root = self.comp.root;
        let inst = self.comp.inst(root);
        let update = inst.operands[1];
        let dims = inst.shape.dims().to_vec();
        let sizes = self.comp.inst(update).shape.dims().to_vec();
        if sizes.contains(&0) {
            return Ok(());
        }
        let starts = self.clamped_starts(&f, root, 2, &dims, &sizes)?;
        let out = self.outputs[0].clone();
        // The window walks the output's dimension order, so the innermost loop writes
        // consecutive addresses.
        let order = out.map.layout().minor_to_major.clone();
        let mut window = ArrayShape::new(out.et, &sizes);
        window.layout = Some(Layout::new(&order));
        let window_map = LayoutMap::new(&window)?;
        let splits = self.splits(&[update], &window_map);
        let frame = f.clone();
        let mut body = move |em: &mut Emitter<'m>, idx: &[IndexExpr], _: &IndexExpr| {
            let v = em.elem(&frame, update, idx)?;
            let at: Vec<IndexExpr> = idx.iter().zip(&starts).map(|(i, &s)| index::add(i, &index::value(s))).collect();
            let addr = em.layout_offset(&out.map, &at);
            let m = types::to_mem(&mut em.b, out.et, v);
            em.b.store(out.buf, addr, m);
            Ok(())
        };
        let mark = self.mark();
        let r = self.emit_nest(&window_map, &splits, false, out.mem.bits(), &mut body);
        self.forget_since(mark);
        r
    }
}
