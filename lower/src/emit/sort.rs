//! `sort` (any number of operands, any dimension, ordered by an inlined comparator
//! computation) and `topk` (the k largest or smallest of each last-dimension row, with their
//! indices).
//!
//! Every index of the dimensions not sorted is an independent row, one grid index each. A row
//! is sorted by a stable bottom-up merge sort in private scratch buffers: the operands the
//! comparator reads travel through the passes as values (so comparisons read contiguous
//! memory), together with each element's original position when the results need it (to
//! gather the operands the comparator ignores, or as topk's indices). The merge is
//! `hlo::eval`'s exactly (runs of width 1, 2, 4, ...; an element of the right run goes first
//! only when it is ordered before the left run's current element), so even a comparator that
//! is not a strict weak order yields the interpreter's permutation. Each pass is one loop over
//! output positions with the run cursors in locals, which keeps the comparator inlined once
//! however long the rows are. A `topk` of at most [`SELECT_MAX_KEEP`] positions under XLA's
//! total order instead keeps the best so far by insertion in one pass over the row
//! (`select_row`), which gives the same elements in the same order.

use tessera_hlo::ir::{AttrList, AttrValue, ComparisonDirection, ComparisonType};
use tessera_hlo::{CompId, Computation, ElementType, InstId, Opcode, Shape};

use super::{index, scalar, types, Emitter};
use crate::kernel::{BinOp, BufId, CastOp, CmpOp, Const, IndexExpr, LocalId, MemType, Op, Ty, UnOp, ValueId};
use crate::LowerError;

/// Whether the first element goes before the second (a `Pred` value), given each one's values
/// of the carried operands and, when the rows keep them, their positions along the row.
type Before<'a, 'm> =
    dyn FnMut(&mut Emitter<'m>, &[ValueId], &[ValueId], Option<Positions>) -> Result<ValueId, LowerError> + 'a;

/// The two elements' positions along the row, of type `ty`.
#[derive(Clone, Copy)]
struct Positions {
    first: ValueId,
    second: ValueId,
    ty: Ty,
}

/// How topk ranks a row.
#[derive(Clone, Copy)]
enum TopkOrder {
    /// XLA's total order, largest or smallest first.
    Total { largest: bool },
    /// A comparator computation on (a, b) or (a, b, index of a, index of b).
    Comparator { comp: CompId, with_indices: bool },
}

/// Writes output position `dst` (a logical index of the outputs) from the element that sorted
/// there: its values of the carried operands, its logical index `src` in the operands and, when
/// [`Rows::positions`] asks for them, its position along the row.
type Write<'a, 'm> =
    dyn FnMut(&mut Emitter<'m>, &[ValueId], &[IndexExpr], &[IndexExpr], Option<ValueId>) -> Result<(), LowerError> + 'a;

/// The rows of an array sorted along one dimension.
struct Rows<'a> {
    /// The operands' logical dimensions.
    dims: &'a [i64],
    /// The sorted dimension.
    d: usize,
    /// How many sorted positions each row writes (`dims[d]` for sort, k for topk).
    keep: i64,
    /// The operands (instructions of the fused computation) whose elements the order reads,
    /// a complex operand as its real part (`Some(0)`) and its imaginary part (`Some(1)`).
    /// They travel through the merge passes with the positions, so comparisons read
    /// contiguous scratch instead of gathering from the operands.
    carried: Vec<(InstId, Option<usize>)>,
    /// Whether the writes need each element's original position (to gather operands that are
    /// not carried, or as topk's indices).
    positions: bool,
    /// Whether the order is a strict weak order and `keep` at most [`SELECT_MAX_KEEP`], so that
    /// one pass of insertions into the best `keep` so far gives the merge sort's first `keep`
    /// (`select_row`).
    select: bool,
}

/// The most positions a row keeps by insertion (`select_row`) instead of the merge sort. An
/// insertion shifts at most this many kept elements, and on rows in random order few
/// elements are inserted at all: the corpus's top-5 of 16 rows of 100 ran in 69 us with the
/// merge sort, 7 us by insertion. Rows in the opposite order insert every element, at `keep`
/// steps each, which stays within the merge sort's log2(n) passes for rows of 64K and more.
const SELECT_MAX_KEEP: i64 = 16;

/// The elements `select_row` tests at once, in one vector loop, for going before the last
/// kept element: a top-16 of an f32[1024,4096] tested each element on its own, 20 scalar
/// instructions and two branches an element.
const SELECT_BLOCK: i64 = 16;

impl<'m> Emitter<'m> {
    /// The kernel of a computation whose root is a `sort`.
    pub(crate) fn emit_sort(&mut self) -> Result<(), LowerError> {
        let module = self.module;
        let comp = self.comp;
        let inst = comp.root_inst();
        let name = inst.name.as_str();
        let operands = inst.operands.clone();
        if operands.is_empty() || operands.len() != self.outputs.len() {
            return Err(LowerError::invalid(name, "sort needs one output per operand"));
        }
        let dims = super::array_shape(&comp.inst(operands[0]).shape, name)?.dims.clone();
        for (k, &o) in operands.iter().enumerate() {
            let a = super::array_shape(&comp.inst(o).shape, name)?;
            if a.dims != dims || a.element_type != self.outputs[k].et || self.outputs[k].map.dims() != dims.as_slice() {
                return Err(LowerError::invalid(name, "sort operands and results differ in shape"));
            }
        }
        let d = match inst.attr_ints("dimensions") {
            Some([d]) => usize::try_from(*d).ok().filter(|&d| d < dims.len()),
            _ => None,
        }
        .ok_or_else(|| LowerError::invalid(name, "sort needs one dimension in range"))?;
        let comparator = inst.called("to_apply").ok_or_else(|| LowerError::invalid(name, "sort without to_apply"))?;
        let cmp_comp =
            module.get(comparator).ok_or_else(|| LowerError::invalid(name, "sort comparator computation missing"))?;
        let used = parameters_used(cmp_comp);
        // Operand k's first slot among the carried lanes, when the comparator reads it (a
        // complex operand takes two: real, imaginary), and its register count.
        let mut slot = Vec::with_capacity(operands.len());
        let mut carried = Vec::new();
        let mut regs = Vec::with_capacity(operands.len());
        for (k, &o) in operands.iter().enumerate() {
            let et = self.comp.inst(o).shape.element_type();
            let read = (2 * k..2 * k + 2).any(|p| used.get(p).copied().unwrap_or(false));
            let (reg, parts) = match types::complex_part(et) {
                Some((_, part)) => (part, 2),
                None => (types::reg(et, name)?, 1),
            };
            regs.push((reg, parts));
            slot.push(read.then_some(carried.len()));
            if read {
                match parts {
                    2 => carried.extend([(o, Some(0)), (o, Some(1))]),
                    _ => carried.push((o, None)),
                }
            }
        }
        let mut before = |em: &mut Emitter<'m>, first: &[ValueId], second: &[ValueId], _| {
            // Parameters 2k and 2k+1 are operand k's elements of the candidate for going first
            // and of the one it is tested against, as the interpreter calls the comparator.
            // A complex parameter takes its (real, imaginary) registers (`scalar_offset`).
            let mut args = Vec::with_capacity(4 * operands.len());
            for (k, s) in slot.iter().enumerate() {
                let (reg, parts) = regs[k];
                match *s {
                    Some(s) => {
                        args.extend(&first[s..s + parts]);
                        args.extend(&second[s..s + parts]);
                    }
                    // Never read by the comparator: any value of the right type.
                    None => {
                        let z = zero(em, reg);
                        args.extend(std::iter::repeat_n(z, 2 * parts));
                    }
                }
            }
            match em.call_scalar(comparator, args)?.as_slice() {
                [v] => Ok(*v),
                _ => Err(LowerError::invalid(name, "the sort comparator does not return one pred")),
            }
        };
        let f = self.fused_frame();
        let mut write = |em: &mut Emitter<'m>, vals: &[ValueId], src: &[IndexExpr], dst: &[IndexExpr], _| {
            for (k, &o) in operands.iter().enumerate() {
                let (buf, et, map) = (em.outputs[k].buf, em.outputs[k].et, em.outputs[k].map.clone());
                let addr = em.layout_offset(&map, dst);
                if et.is_complex() {
                    match slot[k] {
                        Some(s) => {
                            let at = index::scale(&addr, 2);
                            em.b.store(buf, at.clone(), vals[s]);
                            em.b.store(buf, index::add_const(&at, 1), vals[s + 1]);
                        }
                        None => em.store_complex(&f, o, src, k, &addr)?,
                    }
                    continue;
                }
                let v = match slot[k] {
                    Some(s) => vals[s],
                    None => em.elem(&f, o, src)?,
                };
                let m = types::to_mem(&mut em.b, et, v);
                em.b.store(buf, addr, m);
            }
            Ok(())
        };
        let positions = slot.iter().any(Option::is_none);
        let rows = Rows { dims: &dims, d, keep: dims[d], carried, positions, select: false };
        self.sort_rows(name, &rows, &mut before, &mut write)
    }

    /// The kernel of a computation whose root is a `topk`: values and indices of the k
    /// largest (or, with `largest=false`, smallest) elements of each last-dimension row under
    /// XLA's total order, equal elements in index order.
    pub(crate) fn emit_topk(&mut self) -> Result<(), LowerError> {
        let inst = self.comp.root_inst();
        let k = inst.attr_int("k").ok_or_else(|| LowerError::invalid(&inst.name, "topk without k"))?;
        let largest = inst.attr_bool("largest").unwrap_or(true);
        self.topk_rows(k, TopkOrder::Total { largest })
    }

    /// The kernel of a computation whose root is XLA:CPU's `TopK` custom-call: k is the result's
    /// last dimension, and its comparator computation ("does a go before b?", on the values
    /// or on values and s32 indices) orders each row; without one, the largest come first.
    pub(crate) fn emit_topk_custom_call(&mut self) -> Result<(), LowerError> {
        let module = self.module;
        let inst = self.comp.root_inst();
        let name = inst.name.as_str();
        let k = match &inst.shape {
            Shape::Tuple(parts) => parts.first().and_then(|p| p.as_array()).and_then(|a| a.dims.last().copied()),
            _ => None,
        }
        .ok_or_else(|| LowerError::invalid(name, "TopK returns a (values, indices) tuple"))?;
        let comp = match inst.attr("called_computations") {
            Some(AttrValue::Computations(cs)) => cs.first().copied(),
            Some(AttrValue::Computation(c)) => Some(*c),
            _ => None,
        };
        let Some(comp) = comp else {
            return self.topk_rows(k, TopkOrder::Total { largest: true });
        };
        let c = module.get(comp).ok_or_else(|| LowerError::invalid(name, "TopK comparator computation missing"))?;
        let with_indices = match c.parameters().len() {
            2 => false,
            4 => true,
            n => {
                return Err(LowerError::unsupported(name, format!("a TopK comparator with {n} parameters")));
            }
        };
        if with_indices {
            for id in c.parameters().into_iter().skip(2) {
                if c.inst(id).shape.as_array().map(|a| a.element_type) != Some(ElementType::S32) {
                    return Err(LowerError::invalid(name, "TopK comparator indices must be s32"));
                }
            }
        }
        self.topk_rows(k, TopkOrder::Comparator { comp, with_indices })
    }

    /// The k first elements of each last-dimension row of the root's only operand under
    /// `order`, as (values, indices) outputs.
    fn topk_rows(&mut self, k: i64, order: TopkOrder) -> Result<(), LowerError> {
        let comp = self.comp;
        let inst = comp.root_inst();
        let name = inst.name.as_str();
        let [x] = inst.operands.as_slice() else {
            return Err(LowerError::invalid(name, "topk needs one operand"));
        };
        let x = *x;
        let a = super::array_shape(&comp.inst(x).shape, name)?;
        let dims = a.dims.clone();
        let et = a.element_type;
        let Some(&n) = dims.last() else {
            return Err(LowerError::invalid(name, "topk needs an operand of rank at least 1"));
        };
        if !(0..=n).contains(&k) {
            return Err(LowerError::invalid(name, "topk k is out of range"));
        }
        let mut out_dims = dims.clone();
        out_dims[dims.len() - 1] = k;
        let [values, indices] = self.outputs.as_slice() else {
            return Err(LowerError::invalid(name, "topk returns a (values, indices) tuple"));
        };
        if values.map.dims() != out_dims.as_slice() || indices.map.dims() != out_dims.as_slice() || values.et != et {
            return Err(LowerError::invalid(name, "topk results do not match its operand"));
        }
        if !indices.et.is_integral() {
            return Err(LowerError::invalid(name, "topk indices must be integers"));
        }
        types::reg(et, name)?;
        let index_ty = types::reg(indices.et, name)?;
        let mut before =
            |em: &mut Emitter<'m>, first: &[ValueId], second: &[ValueId], pos: Option<Positions>| match order {
                TopkOrder::Total { largest } => {
                    let dir = if largest { ComparisonDirection::Gt } else { ComparisonDirection::Lt };
                    scalar::compare(&mut em.b, dir, Some(ComparisonType::TotalOrder), et, first[0], second[0], name)
                }
                TopkOrder::Comparator { comp, with_indices } => {
                    let mut args = vec![first[0], second[0]];
                    if with_indices {
                        let p = pos.ok_or_else(|| LowerError::invalid(name, "TopK comparator needs the positions"))?;
                        args.push(to_i32(em, p.first, p.ty));
                        args.push(to_i32(em, p.second, p.ty));
                    }
                    match em.call_scalar(comp, args)?.as_slice() {
                        [v] => Ok(*v),
                        _ => Err(LowerError::invalid(name, "the TopK comparator does not return one pred")),
                    }
                }
            };
        let mut write = |em: &mut Emitter<'m>, vals: &[ValueId], _: &[IndexExpr], dst: &[IndexExpr], pos| {
            let [values, indices] = em.outputs.as_slice() else {
                return Err(LowerError::invalid(name, "topk returns a (values, indices) tuple"));
            };
            let Some(pos) = pos else {
                return Err(LowerError::invalid(name, "topk indices need the sorted positions"));
            };
            let (vbuf, vmap, ibuf, imap) = (values.buf, values.map.clone(), indices.buf, indices.map.clone());
            let m = types::to_mem(&mut em.b, et, vals[0]);
            let addr = em.layout_offset(&vmap, dst);
            em.b.store(vbuf, addr, m);
            let i = if index_ty == Ty::I64 { pos } else { em.b.cast(CastOp::Trunc, Ty::I64, index_ty, pos) };
            let addr = em.layout_offset(&imap, dst);
            em.b.store(ibuf, addr, i);
            Ok(())
        };
        // XLA's total order is a strict weak order; a comparator computation need not be, and
        // then only the merge reproduces the interpreter's permutation.
        let select = matches!(order, TopkOrder::Total { .. }) && k <= SELECT_MAX_KEEP;
        let rows = Rows { dims: &dims, d: dims.len() - 1, keep: k, carried: vec![(x, None)], positions: true, select };
        self.sort_rows(name, &rows, &mut before, &mut write)
    }

    /// Sorts every row of `rows` under `before` and writes its first `keep` positions.
    fn sort_rows(
        &mut self,
        name: &str,
        rows: &Rows<'_>,
        before: &mut Before<'_, 'm>,
        write: &mut Write<'_, 'm>,
    ) -> Result<(), LowerError> {
        let n = rows.dims[rows.d];
        let count = rows
            .dims
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != rows.d)
            .try_fold(1i64, |acc, (_, &e)| acc.checked_mul(e))
            .ok_or_else(|| LowerError::invalid(name, "too many rows"))?;
        if n == 0 || count == 0 || rows.keep == 0 {
            return Ok(());
        }
        // Each scratch holds two halves of n slots per row (a merge pass reads one, writes the
        // other), or the `keep` best so far when the row is selected.
        let slots = if rows.select { rows.keep } else { n.checked_mul(2).unwrap_or(i64::MAX) };
        let len = slots.checked_mul(count);
        let len = len.ok_or_else(|| LowerError::invalid(name, "sort scratch size overflows"))?;
        let mut lanes = Vec::new();
        if rows.positions {
            let ty = if n <= i64::from(i32::MAX) { Ty::I32 } else { Ty::I64 };
            let buf = self.b.buffer(format!("{name}.order"), MemType::Scalar(ty), len, true);
            lanes.push(Lane { buf, ty, operand: None });
        }
        let f = self.fused_frame();
        for (c, &(o, part)) in rows.carried.iter().enumerate() {
            let et = self.comp.inst(o).shape.element_type();
            let ty = match (part, types::complex_part(et)) {
                (Some(_), Some((_, t))) => t,
                _ => types::reg(et, name)?,
            };
            let mem = MemType::holding(ty);
            let buf = self.b.buffer(format!("{name}.keys{c}"), mem, len, true);
            lanes.push(Lane { buf, ty, operand: Some((o, part)) });
        }
        let scratch = Scratch { lanes, n, slots, frame: f };
        // Packed sub-byte outputs are written read-modify-write, so rows sharing a byte must
        // not run on different threads: they then loop inside one grid index.
        let packed = self.outputs.iter().any(|o| matches!(o.mem, MemType::Packed { .. }));
        if packed {
            let mark = self.mark();
            let r = self.open_loop(0, count);
            let result = self.row(rows, &scratch, &index::var(r), before, write);
            self.b.end_loop();
            self.forget_since(mark);
            result
        } else {
            self.grid_extent = count;
            let g = self.b.grid_var();
            self.bounds.set_var(g, 0, count - 1);
            self.row(rows, &scratch, &index::var(g), before, write)
        }
    }

    /// One row, by insertion or by the merge sort.
    fn row(
        &mut self,
        rows: &Rows<'_>,
        scratch: &Scratch<'m>,
        row: &IndexExpr,
        before: &mut Before<'_, 'm>,
        write: &mut Write<'_, 'm>,
    ) -> Result<(), LowerError> {
        if rows.select {
            self.select_row(rows, scratch, row, before, write)
        } else {
            self.sort_row(rows, scratch, row, before, write)
        }
    }

    /// One row: positions and carried values copied in, the merge passes, then the writes.
    fn sort_row(
        &mut self,
        rows: &Rows<'_>,
        scratch: &Scratch<'m>,
        row: &IndexExpr,
        before: &mut Before<'_, 'm>,
        write: &mut Write<'_, 'm>,
    ) -> Result<(), LowerError> {
        let n = scratch.n;
        let at = self.row_position(rows.dims, rows.d, row);
        let base = index::scale(row, scratch.slots);

        let mark = self.mark();
        let k = self.open_loop(0, n);
        let src = with_dim(&at, rows.d, index::var(k));
        let slot = index::add(&base, &index::var(k));
        let r = self.fill_lanes(scratch, k, &src, &slot);
        self.b.end_loop();
        self.forget_since(mark);
        r?;

        let passes = if n > 1 { i64::from(64 - (n as u64 - 1).leading_zeros()) } else { 0 };
        if passes > 0 {
            self.merge_passes(scratch, &base, passes, before)?;
        }

        // After an odd number of passes the order is in the second half of the row's scratch.
        let last = if passes % 2 == 1 { n } else { 0 };
        self.write_kept(rows, scratch, &at, &index::add_const(&base, last), write)
    }

    /// Writes the row's first `keep` elements in order from the lanes' slots at `from`; `at` is
    /// the row's logical index.
    fn write_kept(
        &mut self,
        rows: &Rows<'_>,
        scratch: &Scratch<'m>,
        at: &[IndexExpr],
        from: &IndexExpr,
        write: &mut Write<'_, 'm>,
    ) -> Result<(), LowerError> {
        let mark = self.mark();
        let i = self.open_loop(0, rows.keep);
        let at_i = index::add(from, &index::var(i));
        let mut pos = None;
        let mut vals = Vec::new();
        for lane in &scratch.lanes {
            let v = self.b.load(lane.buf, at_i.clone());
            match lane.operand {
                None => pos = Some(self.order_index(v, lane.ty, scratch.n)),
                Some(_) => vals.push(v),
            }
        }
        // Without positions every operand is carried, so `src` is never read.
        let src = with_dim(at, rows.d, pos.map_or_else(IndexExpr::default, index::value));
        let dst = with_dim(at, rows.d, index::var(i));
        let r = write(self, &vals, &src, &dst, pos);
        self.b.end_loop();
        self.forget_since(mark);
        r
    }

    /// One row by insertion: a pass over the row keeps the best `keep` elements so far in the
    /// row's scratch, in order. An element enters when fewer are kept or when it goes before
    /// the last kept one, which it then displaces; it moves up past every kept element it goes
    /// before and stops at the first it does not. Under a strict weak order an element that
    /// ties stays after the earlier ones, as in the stable merge, so the kept elements are the
    /// merge sort's first `keep`.
    fn select_row(
        &mut self,
        rows: &Rows<'_>,
        scratch: &Scratch<'m>,
        row: &IndexExpr,
        before: &mut Before<'_, 'm>,
        write: &mut Write<'_, 'm>,
    ) -> Result<(), LowerError> {
        let at = self.row_position(rows.dims, rows.d, row);
        let kept = Kept { base: index::scale(row, scratch.slots), keep: rows.keep };
        let zero = self.b.constant(Const::Int { ty: Ty::I64, bits: 0 });
        let count = self.b.local(Ty::I64, zero);
        let blocks = scratch.n / SELECT_BLOCK;
        let filtered = if blocks >= 2 { blocks * SELECT_BLOCK } else { 0 };
        if filtered > 0 {
            let mark = self.mark();
            let blk = self.open_loop(0, blocks);
            let first = index::scale(&index::var(blk), SELECT_BLOCK);
            let r = self.offer_block(scratch, &kept, count, &at, rows.d, &first, before);
            self.b.end_loop();
            self.forget_since(mark);
            r?;
        }
        if filtered == scratch.n {
            return self.write_kept(rows, scratch, &at, &kept.base, write);
        }
        let mark = self.mark();
        let e = self.open_loop(filtered, scratch.n);
        let pos = index::var(e);
        let src = with_dim(&at, rows.d, pos.clone());
        let r = self.element_lanes(scratch, &pos, &src).and_then(|x| self.offer(scratch, &kept, count, &x, before));
        self.b.end_loop();
        self.forget_since(mark);
        r?;
        self.write_kept(rows, scratch, &at, &kept.base, write)
    }

    /// Offers the [`SELECT_BLOCK`] elements of the row from position `first` on (the row at
    /// logical index `at`, along dimension `d`). When all `keep` are kept, a vector loop first
    /// asks whether any of them goes before the last kept one (an `or` over its lanes of the
    /// order itself): where none does, as for nearly every block of a row in random order
    /// once the best have been seen, none would enter, and the block costs that one test.
    /// Else each is offered in turn, as the element-by-element pass does.
    #[allow(clippy::too_many_arguments)]
    fn offer_block(
        &mut self,
        scratch: &Scratch<'m>,
        kept: &Kept,
        count: LocalId,
        at: &[IndexExpr],
        d: usize,
        first: &IndexExpr,
        before: &mut Before<'_, 'm>,
    ) -> Result<(), LowerError> {
        let n = self.b.get_local(count);
        let keep = self.b.constant(Const::Int { ty: Ty::I64, bits: kept.keep });
        let full = self.b.cmp(CmpOp::Eq, Ty::I64, n, keep);
        let yes = self.b.constant(Const::Pred(true));
        let enters = self.b.local(Ty::Pred, yes);
        let inner = self.mark();
        self.b.begin_if(full);
        let last = self.load_lanes(scratch, &index::add_const(&kept.base, kept.keep - 1));
        let none = self.b.constant(Const::Int { ty: Ty::I32, bits: 0 });
        let any = self.b.local(Ty::I32, none);
        let lanes = self.mark();
        let j = self.open_loop(0, SELECT_BLOCK);
        let pos = index::add(first, &index::var(j));
        let src = with_dim(at, d, pos.clone());
        let r = self.element_lanes(scratch, &pos, &src).and_then(|x| self.goes_before(scratch, before, &x, &last));
        if let Ok(goes) = r {
            // A select rather than a zero-extension: both tiers vectorize it.
            let one = self.b.constant(Const::Int { ty: Ty::I32, bits: 1 });
            let bit = self.b.select(Ty::I32, goes, one, none);
            let so_far = self.b.get_local(any);
            let or = self.b.binary(BinOp::Or, Ty::I32, so_far, bit);
            self.b.set_local(any, or);
        }
        self.b.end_loop_reducing(
            SELECT_BLOCK as u32,
            crate::kernel::Tail::None,
            vec![crate::kernel::Reduction { local: any, op: BinOp::Or, ty: Ty::I32 }],
        );
        self.forget_since(lanes);
        r?;
        let found = self.b.get_local(any);
        let some = self.b.cmp(CmpOp::Ne, Ty::I32, found, none);
        self.b.set_local(enters, some);
        self.b.end_if();
        self.forget_since(inner);
        let go = self.b.get_local(enters);
        self.b.begin_if(go);
        let each = self.mark();
        let j = self.open_loop(0, SELECT_BLOCK);
        let pos = index::add(first, &index::var(j));
        let src = with_dim(at, d, pos.clone());
        let r = self.element_lanes(scratch, &pos, &src).and_then(|x| self.offer(scratch, kept, count, &x, before));
        self.b.end_loop();
        self.forget_since(each);
        self.b.end_if();
        r
    }

    /// Inserts element `x` (its lanes' values) among the kept ones (`count` of them so far)
    /// when fewer are kept or it goes before the last.
    fn offer(
        &mut self,
        scratch: &Scratch<'m>,
        kept: &Kept,
        count: LocalId,
        x: &[ValueId],
        before: &mut Before<'_, 'm>,
    ) -> Result<(), LowerError> {
        let n = self.b.get_local(count);
        let keep = self.b.constant(Const::Int { ty: Ty::I64, bits: kept.keep });
        let full = self.b.cmp(CmpOp::Eq, Ty::I64, n, keep);
        let yes = self.b.constant(Const::Pred(true));
        let enters = self.b.local(Ty::Pred, yes);
        let inner = self.mark();
        self.b.begin_if(full);
        let last = self.load_lanes(scratch, &index::add_const(&kept.base, kept.keep - 1));
        let r = self.goes_before(scratch, before, x, &last);
        if let Ok(v) = r {
            self.b.set_local(enters, v);
        }
        self.b.end_if();
        self.forget_since(inner);
        r?;
        let enters = self.b.get_local(enters);
        let inner = self.mark();
        self.b.begin_if(enters);
        let r = self.insert(scratch, kept, n, x, before);
        if r.is_ok() {
            let one = self.b.constant(Const::Int { ty: Ty::I64, bits: 1 });
            let more = self.b.binary(BinOp::Add, Ty::I64, n, one);
            let more = self.b.binary(BinOp::SMin, Ty::I64, more, keep);
            self.b.set_local(count, more);
        }
        self.b.end_if();
        self.forget_since(inner);
        r
    }

    /// Moves `x` up from the free slot (after the `n` kept elements, or the last one's when all
    /// are kept) past every kept element it goes before, shifting each down, and stores it.
    fn insert(
        &mut self,
        scratch: &Scratch<'m>,
        kept: &Kept,
        n: ValueId,
        x: &[ValueId],
        before: &mut Before<'_, 'm>,
    ) -> Result<(), LowerError> {
        let top = self.b.constant(Const::Int { ty: Ty::I64, bits: kept.keep - 1 });
        let start = self.b.binary(BinOp::SMin, Ty::I64, n, top);
        let hole = self.b.local(Ty::I64, start);
        let yes = self.b.constant(Const::Pred(true));
        let moving = self.b.local(Ty::Pred, yes);
        if kept.keep > 1 {
            let scan = self.mark();
            self.open_loop(0, kept.keep - 1);
            let h = self.b.get_local(hole);
            let go = self.b.get_local(moving);
            let zero = self.b.constant(Const::Int { ty: Ty::I64, bits: 0 });
            let has_above = self.b.cmp(CmpOp::Sgt, Ty::I64, h, zero);
            let step = self.b.binary(BinOp::And, Ty::Pred, go, has_above);
            self.b.begin_if(step);
            let one = self.b.constant(Const::Int { ty: Ty::I64, bits: 1 });
            let above = self.b.binary(BinOp::Sub, Ty::I64, h, one);
            let above_at = kept.slot(self, above);
            let y = self.load_lanes(scratch, &above_at);
            let r = self.goes_before(scratch, before, x, &y);
            if let Ok(first) = r {
                self.b.begin_if(first);
                let at = kept.slot(self, h);
                self.store_lanes(scratch, &at, &y);
                self.b.set_local(hole, above);
                self.b.begin_else();
                let no = self.b.constant(Const::Pred(false));
                self.b.set_local(moving, no);
                self.b.end_if();
            }
            self.b.end_if();
            self.b.end_loop();
            self.forget_since(scan);
            r?;
        }
        let h = self.b.get_local(hole);
        let at = kept.slot(self, h);
        self.store_lanes(scratch, &at, x);
        Ok(())
    }

    /// Whether the element whose lanes hold `first` goes before the one whose lanes hold
    /// `second` (a `Pred`).
    fn goes_before(
        &mut self,
        scratch: &Scratch<'m>,
        before: &mut Before<'_, 'm>,
        first: &[ValueId],
        second: &[ValueId],
    ) -> Result<ValueId, LowerError> {
        let position = scratch.lanes.first().filter(|l| l.operand.is_none());
        let positions = position.map(|l| Positions { first: first[0], second: second[0], ty: l.ty });
        let keys = usize::from(position.is_some());
        before(self, &first[keys..], &second[keys..], positions)
    }

    fn load_lanes(&mut self, scratch: &Scratch<'m>, at: &IndexExpr) -> Vec<ValueId> {
        scratch.lanes.iter().map(|l| self.b.load(l.buf, at.clone())).collect()
    }

    fn store_lanes(&mut self, scratch: &Scratch<'m>, at: &IndexExpr, values: &[ValueId]) {
        for (lane, &v) in scratch.lanes.iter().zip(values) {
            self.b.store(lane.buf, at.clone(), v);
        }
    }

    /// Writes element `k` of the row (at logical index `src`) into every lane at `slot`.
    fn fill_lanes(
        &mut self,
        scratch: &Scratch<'m>,
        k: crate::kernel::VarId,
        src: &[IndexExpr],
        slot: &IndexExpr,
    ) -> Result<(), LowerError> {
        for (lane, v) in scratch.lanes.iter().zip(self.element_lanes(scratch, &index::var(k), src)?) {
            self.b.store(lane.buf, slot.clone(), v);
        }
        Ok(())
    }

    /// The element at position `pos` of the row (at logical index `src`) as every lane holds
    /// it: its position, its carried values.
    fn element_lanes(
        &mut self,
        scratch: &Scratch<'m>,
        pos: &IndexExpr,
        src: &[IndexExpr],
    ) -> Result<Vec<ValueId>, LowerError> {
        let mut values = Vec::with_capacity(scratch.lanes.len());
        for lane in &scratch.lanes {
            let v = match lane.operand {
                None => {
                    let kv = self.b.let_(Op::Index(pos.clone()));
                    if lane.ty == Ty::I64 {
                        kv
                    } else {
                        self.b.cast(CastOp::Trunc, Ty::I64, lane.ty, kv)
                    }
                }
                Some((o, None)) => self.elem(&scratch.frame, o, src)?,
                Some((o, Some(part))) => {
                    let (re, im) = self.celem(&scratch.frame, o, src)?;
                    if part == 0 {
                        re
                    } else {
                        im
                    }
                }
            };
            values.push(v);
        }
        Ok(values)
    }

    /// `passes` merge passes over one row: pass p merges runs of width 2^p from one half of
    /// the row's scratch into the other.
    fn merge_passes(
        &mut self,
        scratch: &Scratch<'m>,
        base: &IndexExpr,
        passes: i64,
        before: &mut Before<'_, 'm>,
    ) -> Result<(), LowerError> {
        let n = scratch.n;
        let i64c = |em: &mut Emitter<'m>, v: i64| em.b.constant(Const::Int { ty: Ty::I64, bits: v });
        let mark = self.mark();
        let p = self.open_loop(0, passes);
        let pv = self.b.let_(Op::Index(index::var(p)));
        let one = i64c(self, 1);
        let width = self.b.binary(BinOp::Shl, Ty::I64, one, pv);
        let double = self.b.binary(BinOp::Add, Ty::I64, width, width);
        let parity = self.b.binary(BinOp::And, Ty::I64, pv, one);
        let nv = i64c(self, n);
        let src_off = self.b.binary(BinOp::Mul, Ty::I64, parity, nv);
        let dst_off = self.b.binary(BinOp::Sub, Ty::I64, nv, src_off);
        let zero = i64c(self, 0);
        // Cursors into the left run [i, mid) and the right run [j, end); `end` also marks
        // where the next pair of runs starts.
        let li = self.b.local(Ty::I64, zero);
        let lj = self.b.local(Ty::I64, zero);
        let lmid = self.b.local(Ty::I64, zero);
        let lend = self.b.local(Ty::I64, zero);

        let k = self.open_loop(0, n);
        let kv = self.b.let_(Op::Index(index::var(k)));
        let end = self.b.get_local(lend);
        let fresh = self.b.cmp(CmpOp::Eq, Ty::I64, kv, end);
        self.b.begin_if(fresh);
        let mid = self.b.binary(BinOp::Add, Ty::I64, kv, width);
        let mid = self.b.binary(BinOp::SMin, Ty::I64, mid, nv);
        let end = self.b.binary(BinOp::Add, Ty::I64, kv, double);
        let end = self.b.binary(BinOp::SMin, Ty::I64, end, nv);
        self.b.set_local(li, kv);
        self.b.set_local(lj, mid);
        self.b.set_local(lmid, mid);
        self.b.set_local(lend, end);
        self.b.end_if();

        let i = self.b.get_local(li);
        let j = self.b.get_local(lj);
        let mid = self.b.get_local(lmid);
        let end = self.b.get_local(lend);
        let has_left = self.b.cmp(CmpOp::Slt, Ty::I64, i, mid);
        let has_right = self.b.cmp(CmpOp::Slt, Ty::I64, j, end);
        // An exhausted cursor may point past the row: clamp it; its element is not taken.
        let top = i64c(self, n - 1);
        let ic = self.b.binary(BinOp::UMin, Ty::I64, i, top);
        let jc = self.b.binary(BinOp::UMin, Ty::I64, j, top);
        let src = index::add(base, &index::value(src_off));
        let (mut lefts, mut rights) = (Vec::new(), Vec::new());
        for lane in &scratch.lanes {
            lefts.push(self.b.load(lane.buf, index::add(&src, &index::value(ic))));
            rights.push(self.b.load(lane.buf, index::add(&src, &index::value(jc))));
        }

        let no = self.b.constant(Const::Pred(false));
        let lfirst = self.b.local(Ty::Pred, no);
        let both = self.b.binary(BinOp::And, Ty::Pred, has_left, has_right);
        let inner = self.mark();
        self.b.begin_if(both);
        let r = self.goes_before(scratch, before, &rights, &lefts);
        if let Ok(v) = r {
            self.b.set_local(lfirst, v);
        }
        self.b.end_if();
        self.forget_since(inner);
        r?;
        let right_first = self.b.get_local(lfirst);
        let left_done = self.b.unary(UnOp::Not, Ty::Pred, has_left);
        let pick = self.b.binary(BinOp::Or, Ty::Pred, left_done, right_first);
        let take_right = self.b.binary(BinOp::And, Ty::Pred, has_right, pick);
        let dst = index::add(&index::add(base, &index::value(dst_off)), &index::var(k));
        for (c, lane) in scratch.lanes.iter().enumerate() {
            let taken = self.b.select(lane.ty, take_right, rights[c], lefts[c]);
            self.b.store(lane.buf, dst.clone(), taken);
        }
        let step_right = self.b.cast(CastOp::ZExt, Ty::Pred, Ty::I64, take_right);
        let j2 = self.b.binary(BinOp::Add, Ty::I64, j, step_right);
        self.b.set_local(lj, j2);
        let take_left = self.b.unary(UnOp::Not, Ty::Pred, take_right);
        let step_left = self.b.cast(CastOp::ZExt, Ty::Pred, Ty::I64, take_left);
        let i2 = self.b.binary(BinOp::Add, Ty::I64, i, step_left);
        self.b.set_local(li, i2);
        self.b.end_loop();

        self.b.end_loop();
        self.forget_since(mark);
        Ok(())
    }

    /// A position read back from the order scratch, as a clamped `I64` index whose bounds the
    /// index simplifier knows (the verifier trusts data-dependent indices; the clamp is what
    /// makes that trust safe).
    fn order_index(&mut self, raw: ValueId, ty: Ty, n: i64) -> ValueId {
        let wide = if ty == Ty::I64 { raw } else { self.b.cast(CastOp::SExt, ty, Ty::I64, raw) };
        let top = self.b.constant(Const::Int { ty: Ty::I64, bits: n - 1 });
        // Unsigned: a negative value is huge, so it clamps to the top too.
        let v = self.b.binary(BinOp::UMin, Ty::I64, wide, top);
        self.bounds.set_value(v, 0, n - 1);
        v
    }
}

/// A row's kept elements (`select_row`): `keep` slots of each lane from `base`.
struct Kept {
    base: IndexExpr,
    keep: i64,
}

impl Kept {
    /// The slot of data-dependent position `v`, clamped to the kept ones (the verifier trusts
    /// data-dependent indices; the clamp is what makes that trust safe).
    fn slot(&self, em: &mut Emitter<'_>, v: ValueId) -> IndexExpr {
        let top = em.b.constant(Const::Int { ty: Ty::I64, bits: self.keep - 1 });
        let v = em.b.binary(BinOp::UMin, Ty::I64, v, top);
        em.bounds.set_value(v, 0, self.keep - 1);
        index::add(&self.base, &index::value(v))
    }
}

/// One array of per-row scratch travelling through the merge: the original positions
/// (`operand` None, always first when present) or a carried operand's register values (one
/// part of a complex operand's).
struct Lane {
    buf: BufId,
    ty: Ty,
    operand: Option<(InstId, Option<usize>)>,
}

struct Scratch<'m> {
    lanes: Vec<Lane>,
    n: i64,
    /// Slots of every lane per row.
    slots: i64,
    /// The frame the carried operands are read in.
    frame: super::Frame<'m>,
}

/// Whether `inst` is XLA:CPU's `TopK` custom-call, which the lowering compiles itself.
pub(crate) fn is_topk_custom_call(inst: &tessera_hlo::Instruction) -> bool {
    inst.opcode == Opcode::CustomCall && inst.attr_word("custom_call_target") == Some("TopK")
}

/// A position from the order scratch as the s32 a comparator's index parameter takes.
fn to_i32(em: &mut Emitter<'_>, v: ValueId, ty: Ty) -> ValueId {
    match ty {
        Ty::I32 => v,
        _ => em.b.cast(CastOp::Trunc, ty, Ty::I32, v),
    }
}

fn with_dim(at: &[IndexExpr], d: usize, e: IndexExpr) -> Vec<IndexExpr> {
    let mut v = at.to_vec();
    v[d] = e;
    v
}

fn zero(em: &mut Emitter<'_>, ty: Ty) -> ValueId {
    match ty {
        Ty::F32 | Ty::F64 => scalar::float_const(&mut em.b, ty, 0.0),
        _ => scalar::int_const(&mut em.b, ty, 0),
    }
}

/// Which parameters of a scalar computation its root depends on.
fn parameters_used(c: &Computation) -> Vec<bool> {
    let mut used = vec![false; c.parameters().len()];
    let mut seen = vec![false; c.instructions.len()];
    let mut stack: Vec<InstId> = vec![c.root];
    while let Some(id) = stack.pop() {
        let Some(slot) = seen.get_mut(id.index()) else { continue };
        if std::mem::replace(slot, true) {
            continue;
        }
        let Some(inst) = c.get(id) else { continue };
        if inst.opcode == Opcode::Parameter {
            if let Some(u) = inst.parameter_number().and_then(|p| usize::try_from(p).ok()).and_then(|p| used.get_mut(p))
            {
                *u = true;
            }
        }
        stack.extend(inst.operands.iter().copied());
    }
    used
}
