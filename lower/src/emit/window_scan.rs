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
//!
//! A scan along a dimension other than the contiguous one (`jnp.cumsum(x, 0)` of a row-major
//! array) takes the column form instead: each grid index owns a block of the contiguous
//! dimension's columns, whose accumulators wait in a scratch buffer, and sweeps the scanned
//! dimension, folding one row of its columns per step in a vector loop. The row form walked
//! each column alone, one element per cache line, its fold a serial chain: a cumsum over the
//! rows of an f32[4096,1024] took 29 ms. Each element's fold is the same operations in the
//! same order either way.

use tessera_hlo::ir::Window;
use tessera_hlo::{Computation, InstId, Instruction, Opcode};

use super::column_reduce::contiguous_dim;
use super::window::{window_dims, WindowFold};
use super::{index, nest, reduce, types, Emitter};
use crate::kernel::{MemType, Tail, Ty};
use crate::LowerError;

/// The column form's fewest columns: below this a block is too short for a vector.
const MIN_COLUMNS: i64 = 8;
/// The column form halves its blocks of columns until there are this many grid indices, so
/// the pool has work to share (two per thread on two cores: 8, blocks of 128 columns of an
/// f32[4096,1024], ran 10% slower), keeping blocks of at least [`MIN_BLOCK`] columns.
const MIN_GRID: i64 = 4;
const MIN_BLOCK: i64 = 64;

/// The dimension reduce-window `inst` scans along, and whether it scans from the end, when its
/// window is a prefix (or a suffix) along one dimension and a single element along the others.
/// Fusion keeps such a reduce-window the root of its kernel, where it can run as a fold.
pub(crate) fn scan_dim(comp: &Computation, inst: &Instruction) -> Option<(usize, bool)> {
    if inst.opcode != Opcode::ReduceWindow {
        return None;
    }
    let [input, _] = inst.operands.as_slice() else { return None };
    let dims = comp.inst(*input).shape.dims().to_vec();
    Window { dims: window_dims(inst, &dims).ok()? }.scan_dimension(&dims)
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
        if self.try_column_scan(id, d, from_end)? {
            return Ok(true);
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

    /// The column form of the scan of root reduce-window `id` along dimension `d` (module
    /// doc); false when the output has no contiguous dimension other than `d` with enough
    /// columns, or its accumulators no plain register type (nothing is emitted then).
    fn try_column_scan(&mut self, id: InstId, d: usize, from_end: bool) -> Result<bool, LowerError> {
        let (buf, et, map) = (self.outputs[0].buf, self.outputs[0].et, self.outputs[0].map.clone());
        let Some((minor, _)) = contiguous_dim(&map) else { return Ok(false) };
        let dims = map.dims().to_vec();
        let cols = dims[minor];
        let inst = self.comp.inst(id);
        let tys = WindowFold::accumulator_types(self, inst)?;
        let acc_ty = match tys.as_slice() {
            [t @ (Ty::F32 | Ty::F64 | Ty::I32 | Ty::I64)] => *t,
            _ => return Ok(false),
        };
        if minor == d || cols < MIN_COLUMNS || dims.contains(&0) {
            return Ok(false);
        }
        let name = inst.name.clone();
        let others: Vec<usize> = (0..dims.len()).filter(|&x| x != d && x != minor).collect();
        let planes: i64 = others.iter().map(|&x| dims[x]).product();
        let mut block = cols;
        while planes * (cols / block) < MIN_GRID && block % 32 == 0 && block / 2 >= MIN_BLOCK {
            block /= 2;
        }
        let blocks = cols / block;
        let grid = planes * blocks;
        self.grid_extent = grid;
        let g = self.b.grid_var();
        self.bounds.set_var(g, 0, grid - 1);
        let gv = index::var(g);
        let mut at = vec![index::constant(0); dims.len()];
        let plane = self.idiv(&gv, blocks);
        let first_col = index::scale(&self.irem(&gv, blocks), block);
        let mut stride = 1i64;
        for &x in others.iter().rev() {
            let q = self.idiv(&plane, stride);
            at[x] = self.irem(&q, dims[x]);
            stride = stride.saturating_mul(dims[x]);
        }
        let len = grid.checked_mul(block).ok_or_else(|| LowerError::invalid(&name, "scan scratch size overflows"))?;
        let scratch = self.b.buffer(format!("{name}.acc"), MemType::holding(acc_ty), len, true);
        let slot = |j| index::add(&index::scale(&gv, block), &index::var(j));
        let width = nest::vector_width(acc_ty.bits(), block);
        let tail = if block % i64::from(width) == 0 { Tail::None } else { Tail::Peel };
        let f = self.fused_frame();
        let rank = dims.len();

        // The accumulators start at the init values.
        let j = self.open_loop(0, block);
        let fold = WindowFold::start(self, &f, id, rank)?;
        let accs = fold.accumulators(self);
        self.b.store(scratch, slot(j), accs[0]);
        self.b.end_loop_vectorized(width, tail);

        // One row of the block's columns per step along `d`.
        let mark = self.mark();
        let i = self.open_loop(0, dims[d]);
        at[d] = if from_end { index::add_const(&index::scale(&index::var(i), -1), dims[d] - 1) } else { index::var(i) };
        let j = self.open_loop(0, block);
        at[minor] = index::add(&first_col, &index::var(j));
        let r = (|| {
            let acc = self.b.load(scratch, slot(j));
            let fold = WindowFold::resume(self, &f, id, rank, &[acc])?;
            fold.step(self, &at)?;
            let accs = fold.accumulators(self);
            self.b.store(scratch, slot(j), accs[0]);
            let v = fold.finish(self)[0];
            let m = types::to_mem(&mut self.b, et, v);
            let addr = self.layout_offset(&map, &at);
            self.b.store(buf, addr, m);
            Ok::<(), LowerError>(())
        })();
        self.b.end_loop_vectorized(width, tail);
        self.b.end_loop();
        self.forget_since(mark);
        r.map(|()| true)
    }
}
