//! Staging: an expensive value that a kernel's row reduction reads and that its other users
//! read again at the same index (softmax's `exp(x - max)`, summed and then divided by the sum)
//! is computed once per element. The reduction's loop, running before the loop over the row
//! (`emit::rows`), stores each value it computes into the kernel's output at that element;
//! the loop over the row then loads it back instead of computing it again, and overwrites it
//! with the output's own value. So the whole computation stays one kernel that reads its
//! input rows from memory once, with no intermediate array (`passes::fusion` inlines such a
//! value only where this applies: `staged_kernel`).
//!
//! What makes it sound: the staged value has the output's exact shape (element type and
//! layout), and every path from it to the root is elementwise over its dimensions, so the
//! loop over the row reads each staged element only at the element it then writes; the
//! reduction covers the whole row (the dimensions the loop over the row walks), and it runs
//! before that loop, inside one grid index (the grid never splits a row here), so no other
//! thread writes those elements meanwhile. The reduction runs in the lane form, a vector loop
//! along the row, so the staged value is computed a vector at a time. A value the kernel
//! cannot stage this way is computed where it is used, as any inlined value.

use tessera_hlo::{Computation, InstId, Opcode};

use super::{Emitter, Frame, Mark};
use crate::emit::types;
use crate::kernel::{IndexExpr, ValueId};
use crate::passes::fusion::{is_expensive, reduces_input, walk_index_uses, Use};
use crate::LowerError;

/// The instruction of `comp` to stage, if one qualifies (module doc): the first, in post
/// order, that is expensive, has the root's exact shape, is read by a reduction, and reaches
/// the root only through elementwise ops over its dimensions.
pub(crate) fn candidate(comp: &Computation) -> Option<InstId> {
    let root = comp.root_inst();
    root.shape.as_array()?;
    let users = comp.users();
    comp.post_order().into_iter().find(|&p| {
        let inst = comp.inst(p);
        p != comp.root
            && inst.shape == root.shape
            && expensive(comp, p)
            && users[p.index()].iter().any(|&u| reduces_input(comp.inst(u), p))
            && walk_index_uses(
                comp,
                &users,
                p,
                |_, u| if u.opcode == Opcode::Reduce { Use::Stop } else { Use::Through },
            )
    })
}

/// Whether `p` holds an expensive op, up to the row values it reads (broadcasts) and the
/// reductions and parameters it starts from.
fn expensive(comp: &Computation, p: InstId) -> bool {
    let mut stack = vec![p];
    let mut seen = std::collections::HashSet::new();
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        let inst = comp.inst(n);
        if is_expensive(inst.opcode) {
            return true;
        }
        if !matches!(inst.opcode, Opcode::Broadcast | Opcode::Reduce | Opcode::Parameter) {
            stack.extend(inst.operands.iter().copied());
        }
    }
    false
}

impl<'m> Emitter<'m> {
    /// Element `idx` of the staged instruction `id` (in the fused frame), when staging applies
    /// here: computed and stored into the output inside a reduction that evaluates a row value
    /// within one grid index; loaded back after such a reduction stored it, in the scope it
    /// ran in. `None`: compute it as any other value.
    pub(crate) fn staged_elem(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
    ) -> Result<Option<ValueId>, LowerError> {
        let Some(out) = self.outputs.first() else { return Ok(None) };
        let (buf, map, et) = (out.buf, out.map.clone(), out.et);
        if self.staging.reducing > 0 {
            // In a serial reduction's loop the value would be computed an element at a time;
            // fusion stages only where the lane form runs (`reduce::has_lane_form`).
            let one_grid_index = self.staging.in_grid || !self.staging.grid_allowed;
            if !(self.staging.lane && self.staging.evaluating_rows && one_grid_index) {
                return Ok(None);
            }
            let v = self.elem_uncached(f, id, idx)?;
            let addr = self.layout_offset(&map, idx);
            let m = types::to_mem(&mut self.b, et, v);
            self.b.store(buf, addr, m);
            self.staging.stored = true;
            return Ok(Some(v));
        }
        if self.staging.ready.is_none() {
            return Ok(None);
        }
        let addr = self.layout_offset(&map, idx);
        let v = self.b.load(buf, addr);
        Ok(Some(types::from_mem(&mut self.b, et, v)))
    }

    /// Runs `reduce` (generating a reduction's loops), noting whether it staged values: then
    /// they are readable in the scope the reduction began in, `outer`.
    pub(crate) fn staging_reduction<T>(
        &mut self,
        outer: Mark,
        reduce: impl FnOnce(&mut Self) -> Result<T, LowerError>,
    ) -> Result<T, LowerError> {
        let stored_before = std::mem::replace(&mut self.staging.stored, false);
        self.staging.reducing += 1;
        let result = reduce(self);
        self.staging.reducing -= 1;
        if self.staging.stored && self.staging.reducing == 0 {
            self.staging.ready = Some(outer);
        }
        self.staging.stored |= stored_before;
        result
    }

    /// Called as the scope that began at `m` ends: staged values stored in it are no longer
    /// known to be there for the code that follows.
    pub(crate) fn staging_forget(&mut self, m: Mark) {
        if self.staging.ready.is_some_and(|r| m.0 <= r.0 && m.1 <= r.1) {
            self.staging.ready = None;
        }
    }
}

/// The staging state of a kernel's emission (module doc).
#[derive(Default)]
pub(crate) struct Staging {
    /// The fused computation's instruction being staged, if any.
    pub staged: Option<InstId>,
    /// Reductions whose loops are being generated, and whether the innermost of them runs in
    /// the lane form (a vector loop along its row).
    pub reducing: usize,
    pub lane: bool,
    /// Whether row values are being evaluated before a loop over rows (`evaluate_rows_before`).
    pub evaluating_rows: bool,
    /// Whether the output nest may use a grid, and whether its grid index is fixed here.
    pub grid_allowed: bool,
    pub in_grid: bool,
    /// Whether the reduction being generated stored staged values.
    pub stored: bool,
    /// Where stored staged values became readable: the start of the scope of the reduction
    /// that stored them.
    pub ready: Option<Mark>,
}
