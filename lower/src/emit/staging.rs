//! Staging: a value too costly to compute twice (expensive, or deep) that a kernel's row
//! reduction reads and that its other users read again at the same index (softmax's
//! `exp(x - max)`, summed and then divided by the sum) is computed once per element. The
//! reduction's loop, running before the loop over the row (`emit::rows`), stores each value
//! it computes into the kernel's output at that element;
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
//!
//! A kernel may stage a chain of values, each computed from the one before (a masked
//! softmax's scaled, biased and masked scores, read by its max, and their `exp(s - max)`, read
//! by its sum): a later reduction over the same dimensions loads the value the buffer holds and
//! stores the next one over it, so each is computed once. The buffer holds one value at a
//! time, so a reduction stores at most one, never one earlier in the chain than the one held,
//! and loads the held one only before it stores.

use tessera_hlo::{Computation, ElementType, InstId, LayoutMap, Opcode};

use super::{Emitter, Frame, Mark};
use crate::emit::types;
use crate::kernel::{BufId, IndexExpr, ValueId};
use crate::passes::fusion::{not_duplicable, reduces_input, walk_index_uses, Use};
use crate::LowerError;

/// The instructions of `comp` to stage (module doc), in post order: those fusion would not
/// duplicate into several users (`fusion::not_duplicable`: expensive, or deep), that have
/// the root's exact shape, are read by a reduction, and reach the root only through
/// elementwise ops over their dimensions.
pub(crate) fn candidates(comp: &Computation) -> Vec<InstId> {
    let root = comp.root_inst();
    if root.shape.as_array().is_none() {
        return Vec::new();
    }
    let users = comp.users();
    let costly = not_duplicable(comp);
    comp.post_order()
        .into_iter()
        .filter(|&p| {
            let inst = comp.inst(p);
            p != comp.root
                && inst.shape == root.shape
                && costly[p.index()]
                && users[p.index()].iter().any(|&u| reduces_input(comp.inst(u), p))
                && walk_index_uses(
                    comp,
                    &users,
                    p,
                    |_, u| if u.opcode == Opcode::Reduce { Use::Stop } else { Use::Through },
                )
        })
        .collect()
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
        let held = self.staging.held.as_ref().filter(|h| h.value == id);
        if self.staging.reducing > 0 {
            // In a serial reduction's loop the value would be computed an element at a time;
            // fusion stages only where the lane form runs (`reduce::has_lane_form`).
            let one_grid_index = self.staging.in_grid || !self.staging.grid_allowed;
            if !(self.staging.lane && self.staging.evaluating_rows && one_grid_index) {
                return Ok(None);
            }
            // Once this reduction stored a value, the buffer no longer holds the one before.
            if self.staging.stored.is_some() {
                return Ok(None);
            }
            // The held value covers the rows of the reduction that stored it: this one reads
            // the same elements when it reduces the same dimensions.
            if held.is_some_and(|h| Some(&h.dims) == self.staging.reducing_dims.as_ref()) {
                return Ok(Some(self.load_staged(buf, &map, et, idx)));
            }
            let order = |x: InstId| self.staging.staged.iter().position(|&s| s == x);
            if self.staging.held.as_ref().is_some_and(|h| order(h.value) >= order(id)) {
                return Ok(None);
            }
            let v = self.elem_uncached(f, id, idx)?;
            if self.staging.stored.is_some() {
                return Ok(Some(v));
            }
            let addr = self.layout_offset(&map, idx);
            let m = types::to_mem(&mut self.b, et, v);
            self.b.store(buf, addr, m);
            self.staging.stored = Some(id);
            return Ok(Some(v));
        }
        if held.is_none() {
            return Ok(None);
        }
        Ok(Some(self.load_staged(buf, &map, et, idx)))
    }

    fn load_staged(&mut self, buf: BufId, map: &LayoutMap, et: ElementType, idx: &[IndexExpr]) -> ValueId {
        let addr = self.layout_offset(map, idx);
        let v = self.b.load(buf, addr);
        types::from_mem(&mut self.b, et, v)
    }

    /// Runs `reduce` (generating the loops of a reduction over `dims`), noting what it
    /// staged: that value is then readable in the scope the reduction began in, `outer`.
    pub(crate) fn staging_reduction<T>(
        &mut self,
        outer: Mark,
        dims: &[i64],
        reduce: impl FnOnce(&mut Self) -> Result<T, LowerError>,
    ) -> Result<T, LowerError> {
        // Reductions nested in one share its store.
        if self.staging.reducing == 0 {
            self.staging.stored = None;
            self.staging.reducing_dims = Some(dims.to_vec());
        }
        self.staging.reducing += 1;
        let result = reduce(self);
        self.staging.reducing -= 1;
        if self.staging.reducing == 0 {
            let dims = self.staging.reducing_dims.take().unwrap_or_default();
            if let Some(value) = self.staging.stored.take() {
                self.staging.held = Some(Held { value, dims, since: outer });
            }
        }
        result
    }

    /// Called as the scope that began at `m` ends: staged values stored in it are no longer
    /// known to be there for the code that follows.
    pub(crate) fn staging_forget(&mut self, m: Mark) {
        if self.staging.held.as_ref().is_some_and(|h| m.0 <= h.since.0 && m.1 <= h.since.1) {
            self.staging.held = None;
        }
    }
}

/// The staging state of a kernel's emission (module doc).
#[derive(Default)]
pub(crate) struct Staging {
    /// The fused computation's instructions that may be staged, in post order.
    pub staged: Vec<InstId>,
    /// Reductions whose loops are being generated, and whether the innermost of them runs in
    /// the lane form (a vector loop along its row).
    pub reducing: usize,
    pub lane: bool,
    /// Whether row values are being evaluated before a loop over rows (`evaluate_rows_before`).
    pub evaluating_rows: bool,
    /// Whether the output nest may use a grid, and whether its grid index is fixed here.
    pub grid_allowed: bool,
    pub in_grid: bool,
    /// The dimensions the outermost reduction being generated reduces, and the staged value
    /// it stored, if any.
    pub reducing_dims: Option<Vec<i64>>,
    pub stored: Option<InstId>,
    /// The staged value the output holds, if any.
    pub held: Option<Held>,
}

/// A staged value the kernel's output holds: which one, the dimensions of the reduction that
/// stored it (the rows it covers), and where it became readable: the start of the scope of
/// that reduction, which it stays readable in.
pub(crate) struct Held {
    pub value: InstId,
    pub dims: Vec<i64>,
    pub since: Mark,
}
