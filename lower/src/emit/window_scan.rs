//! A reduce-window whose window along one dimension reaches back over every earlier element
//! (JAX's `cumsum`, `cumprod`, `cummax`: size at least the dimension, padded below by size - 1,
//! stride 1) as a running fold: one pass along each row, writing every prefix as it goes; and
//! one reaching forward over every later element (`reverse=True`) as a fold from the row's end.
//!
//! The window form folds element i's window (padding skipped, as XLA does) from the init value
//! through elements 0..=i in order; the running fold applies the same operations in the same
//! order and reads its accumulator after each, so the bits are the window form's (an f32 sum
//! widened to f64 alike) for O(n) work per row instead of O(n²): the corpus's two cumsums of
//! [8,64] took 20 us as windows, 0.5 us as folds. A window reaching forward folds i, i+1, ...
//! in that order, which a fold from the end reverses: only reducers whose result does not
//! depend on the order take it (integer ops exact in any order, and an f32 sum, whose f64
//! accumulator rounds to the same f32 but where the two f64 sums straddle an f32 rounding
//! boundary, as reductions reorder f32 sums too; the corpus's reverse cumsum 60 -> 1 us).

use tessera_hlo::ir::WindowDim;
use tessera_hlo::{Computation, InstId, Instruction, Opcode};

use super::window::{window_dims, WindowFold};
use super::{index, reduce, types, Emitter};
use crate::kernel::MemType;
use crate::LowerError;

/// The dimension reduce-window `inst` scans along, and whether it scans from the end, when its
/// window is a prefix (or a suffix) along one dimension and a single element along the others.
/// Fusion keeps such a reduce-window the root of its kernel, where it can run as a fold.
pub(crate) fn scan_dim(comp: &Computation, inst: &Instruction) -> Option<(usize, bool)> {
    if inst.opcode != Opcode::ReduceWindow {
        return None;
    }
    let [input, _] = inst.operands.as_slice() else { return None };
    let dims = comp.inst(*input).shape.dims().to_vec();
    let window = window_dims(inst, &dims).ok()?;
    let single = |w: &WindowDim| {
        w.size == 1 && w.stride == 1 && w.padding_low == 0 && w.padding_high == 0 && w.window_dilation == 1
    };
    let covering = |w: &WindowDim, n: i64| n > 1 && w.size >= n && w.stride == 1 && w.window_dilation == 1;
    let prefix = |w: &WindowDim| w.padding_low == w.size - 1 && w.padding_high == 0;
    let suffix = |w: &WindowDim| w.padding_low == 0 && w.padding_high == w.size - 1;
    let undilated = window.iter().all(|w| w.base_dilation == 1);
    let mut scans = window.iter().zip(&dims).enumerate().filter(|(_, (w, _))| !single(w));
    let (d, (w, &n)) = scans.next()?;
    if !undilated || scans.next().is_some() || !covering(w, n) {
        return None;
    }
    if prefix(w) {
        Some((d, false))
    } else if suffix(w) {
        Some((d, true))
    } else {
        None
    }
}

/// Whether reduce-window `id`'s fold gives the same result in any order (see the module
/// documentation).
fn reorderable(em: &Emitter<'_>, id: InstId) -> bool {
    use tessera_hlo::ElementType as E;
    let inst = em.comp.inst(id);
    let Ok((_, _, reducer)) = reduce::reduction_parts(inst) else { return false };
    let et = inst.shape.element_type();
    let integer = matches!(et, E::S32 | E::S64 | E::U32 | E::U64);
    (integer && reduce::lane_op(em.module, reducer, et).is_some())
        || (et == E::F32 && reduce::is_plain_add(em.module, reducer))
}

impl<'m> Emitter<'m> {
    /// Emits the kernel of a root reduce-window `id` as running folds along its scanned
    /// dimension, one row per grid index; false when its window is neither a prefix nor a
    /// suffix it may fold from the end (the caller emits windows).
    pub(crate) fn try_window_scan(&mut self, id: InstId) -> Result<bool, LowerError> {
        let inst = self.comp.inst(id);
        let plain = self.outputs.len() == 1 && matches!(self.outputs[0].mem, MemType::Scalar(_));
        if inst.opcode != Opcode::ReduceWindow || !plain || inst.shape.is_tuple() {
            return Ok(false);
        }
        let Some((d, from_end)) = scan_dim(self.comp, inst) else { return Ok(false) };
        if from_end && !reorderable(self, id) {
            return Ok(false);
        }
        let f = self.fused_frame();
        let (buf, et, map) = (self.outputs[0].buf, self.outputs[0].et, self.outputs[0].map.clone());
        let dims = map.dims().to_vec();
        let rows: i64 = dims.iter().enumerate().filter(|&(i, _)| i != d).map(|(_, &e)| e).product();
        if rows == 0 {
            return Ok(true);
        }
        self.grid_extent = rows;
        let g = self.b.grid_var();
        self.bounds.set_var(g, 0, rows - 1);
        let mut at = self.row_position(&dims, d, &index::var(g));
        let fold = WindowFold::start(self, &f, id, dims.len())?;
        let mark = self.mark();
        let i = self.open_loop(0, dims[d]);
        at[d] = if from_end { index::add_const(&index::scale(&index::var(i), -1), dims[d] - 1) } else { index::var(i) };
        let r = fold.step(self, &at).map(|()| {
            let v = fold.finish(self)[0];
            let m = types::to_mem(&mut self.b, et, v);
            let addr = self.layout_offset(&map, &at);
            self.b.store(buf, addr, m);
        });
        self.b.end_loop();
        self.forget_since(mark);
        r.map(|()| true)
    }
}
