//! reduce-window as an elemental op, and the window walk select-and-scatter shares with it.
//!
//! A window position lands on the operand at `o * stride - pad_low + k * window_dilation` in
//! the base-dilated, padded operand. Positions on padding or between dilated base elements
//! hold no element: XLA (and `hlo::eval`) skip them, so the reducer sees only real elements
//! after its initial value and the operand is never read outside its bounds. Each output
//! element loops over the window in row-major window order (the order the reducer folds in,
//! which matters for reducers that are not associative), with a branch around positions the
//! index bounds cannot prove inside the operand.

use tessera_hlo::ir::{AttrList, AttrValue, WindowDim};
use tessera_hlo::{ElementType, InstId, Instruction};

use super::{index, reduce, types, Emitter, Frame};
use crate::kernel::{BinOp, CastOp, CmpOp, Const, IndexExpr, Op, Ty, ValueId};
use crate::LowerError;

/// What runs at each element of a window: given the operand's logical index there.
pub(crate) type WindowBody<'a, 'm> = dyn FnMut(&mut Emitter<'m>, &[IndexExpr]) -> Result<(), LowerError> + 'a;

/// The window of `inst` over an operand of dimensions `in_dims` (a missing window is all
/// size-1 dimensions), checked so the index arithmetic below cannot overflow.
pub(crate) fn window_dims(inst: &Instruction, in_dims: &[i64]) -> Result<Vec<WindowDim>, LowerError> {
    let dims = match inst.attr("window") {
        Some(AttrValue::Window(w)) => w.dims.clone(),
        None => vec![WindowDim::default(); in_dims.len()],
        Some(_) => return Err(LowerError::invalid(&inst.name, "the window attribute is not a window")),
    };
    if dims.len() != in_dims.len() {
        return Err(LowerError::invalid(&inst.name, "the window rank differs from the operand rank"));
    }
    // Positions stay far below i64 overflow even after the sums the index expressions form.
    const LIMIT: i128 = 1 << 48;
    for (w, &n) in dims.iter().zip(in_dims) {
        let positive = [w.size, w.stride, w.window_dilation, w.base_dilation].iter().all(|&v| v >= 1);
        let dilated = i128::from(n.max(1) - 1) * i128::from(w.base_dilation);
        let span = i128::from(w.size - 1) * i128::from(w.window_dilation);
        let padded = dilated + i128::from(w.padding_low).abs() + i128::from(w.padding_high).abs();
        if !positive || dilated.max(span).max(padded).max(i128::from(w.stride)) >= LIMIT {
            return Err(LowerError::invalid(
                &inst.name,
                "window sizes, strides and dilations must be positive and small",
            ));
        }
    }
    Ok(dims)
}

/// Windows of at most this many positions are unrolled: with no loop left inside it, the loop
/// over the output's contiguous dimension (a pooling's channels) is a vector loop on both
/// tiers, where Cranelift ran it scalar around the window's loops (the corpus's 3x3 and 2x2 max
/// pools 23 -> 8 us on Cranelift, 5.4 -> 1.6 us on LLVM).
pub(crate) const UNROLLED_TAPS: i64 = 9;

/// The indices of position `n` of a box of `sizes`, counted in row-major order (the last
/// index fastest): the order an unrolled window or convolution visits its taps.
pub(crate) fn row_major_digits(mut n: i64, sizes: &[i64]) -> Vec<i64> {
    let mut digits = vec![0; sizes.len()];
    for (d, &size) in digits.iter_mut().zip(sizes).rev() {
        *d = n % size;
        n /= size;
    }
    digits
}

impl<'m> Emitter<'m> {
    /// The values (one per reduced operand) of element `idx` of reduce-window `id`.
    pub(crate) fn reduce_window_values(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
    ) -> Result<Vec<ValueId>, LowerError> {
        let key = (f.id, id, idx.to_vec());
        if let Some(v) = self.multi_cache.get(&key) {
            return Ok(v.clone());
        }
        let fold = WindowFold::start(self, f, id, idx.len())?;
        let window = window_dims(f.comp.inst(id), &fold.in_dims)?;
        let mut body = |em: &mut Emitter<'m>, oi: &[IndexExpr]| fold.step(em, oi);
        self.for_each_in_window(idx, &window, &fold.in_dims, &mut body)?;
        let out = fold.finish(self);
        self.multi_log.push(key.clone());
        self.multi_cache.insert(key, out.clone());
        Ok(out)
    }

    /// Calls `body` at every operand element under the window at output index `out`, in
    /// row-major window order: each position in turn for a window of at most
    /// [`UNROLLED_TAPS`], else one loop per window dimension wider than 1; and a branch around
    /// the body when some position may fall on padding or a dilation hole.
    pub(crate) fn for_each_in_window(
        &mut self,
        out: &[IndexExpr],
        window: &[WindowDim],
        in_dims: &[i64],
        body: &mut WindowBody<'_, 'm>,
    ) -> Result<(), LowerError> {
        if in_dims.contains(&0) {
            return Ok(());
        }
        // The base position of each dimension, and whether any position can hold an element.
        let mut bases = Vec::with_capacity(window.len());
        for ((w, o), &n) in window.iter().zip(out).zip(in_dims) {
            let base = index::add_const(&index::scale(o, w.stride), -w.padding_low);
            let (lo, hi) = self.bounds.range(&base);
            let hi = hi.saturating_add((w.size - 1).saturating_mul(w.window_dilation));
            let last = (n - 1) * w.base_dilation;
            if hi < 0 || lo > last {
                return Ok(());
            }
            bases.push(base);
        }
        let taps = window.iter().try_fold(1i64, |n, w| n.checked_mul(w.size)).unwrap_or(i64::MAX);
        if taps <= UNROLLED_TAPS {
            // Each position at a constant offset from the base, in the same row-major order.
            let sizes: Vec<i64> = window.iter().map(|w| w.size).collect();
            for tap in 0..taps {
                let offsets = row_major_digits(tap, &sizes);
                let positions: Vec<IndexExpr> = window
                    .iter()
                    .zip(&bases)
                    .zip(&offsets)
                    .map(|((w, base), &o)| index::add_const(base, o * w.window_dilation))
                    .collect();
                self.window_element(&positions, window, in_dims, body)?;
            }
            return Ok(());
        }
        let mark = self.mark();
        let mut opened = 0;
        let mut positions = Vec::with_capacity(window.len());
        for (w, base) in window.iter().zip(&bases) {
            let pos = if w.size > 1 {
                let v = self.open_loop(0, w.size);
                opened += 1;
                index::add(base, &index::scale(&index::var(v), w.window_dilation))
            } else {
                base.clone()
            };
            positions.push(pos);
        }
        let result = self.window_element(&positions, window, in_dims, body);
        for _ in 0..opened {
            self.b.end_loop();
        }
        self.forget_since(mark);
        result
    }

    /// The body at one window position (`positions` in the dilated, padded operand), behind
    /// the checks the bounds cannot discharge.
    fn window_element(
        &mut self,
        positions: &[IndexExpr],
        window: &[WindowDim],
        in_dims: &[i64],
        body: &mut WindowBody<'_, 'm>,
    ) -> Result<(), LowerError> {
        let mut cond: Option<ValueId> = None;
        let mut checked = Vec::with_capacity(positions.len());
        for ((pos, w), &n) in positions.iter().zip(window).zip(in_dims) {
            let bd = w.base_dilation;
            let last = (n - 1) * bd;
            let (lo, hi) = self.bounds.range(pos);
            if hi < 0 || lo > last || (bd > 1 && lo == hi && lo % bd != 0) {
                return Ok(());
            }
            let needs_low = lo < 0;
            let needs_high = hi > last;
            let needs_step = bd > 1 && lo != hi;
            let mut c = Vec::new();
            if needs_low || needs_high || needs_step {
                let pv = self.b.let_(Op::Index(pos.clone()));
                if needs_low {
                    let zero = self.b.constant(Const::Int { ty: Ty::I64, bits: 0 });
                    c.push(self.b.cmp(CmpOp::Sge, Ty::I64, pv, zero));
                }
                if needs_high {
                    let l = self.b.constant(Const::Int { ty: Ty::I64, bits: last });
                    c.push(self.b.cmp(CmpOp::Sle, Ty::I64, pv, l));
                }
                if needs_step {
                    let k = self.b.constant(Const::Int { ty: Ty::I64, bits: bd });
                    let r = self.b.binary(BinOp::SRem, Ty::I64, pv, k);
                    let zero = self.b.constant(Const::Int { ty: Ty::I64, bits: 0 });
                    c.push(self.b.cmp(CmpOp::Eq, Ty::I64, r, zero));
                }
            }
            for v in c {
                cond = Some(match cond {
                    None => v,
                    Some(a) => self.b.binary(BinOp::And, Ty::Pred, a, v),
                });
            }
            checked.push((pos.clone(), lo, hi, last, bd, needs_low || needs_high));
        }
        let mark = self.mark();
        if let Some(c) = cond {
            self.b.begin_if(c);
        }
        let mut oi = Vec::with_capacity(checked.len());
        for (pos, lo, hi, last, bd, guard) in checked {
            // Inside the branch the position is known in range: an index value carrying
            // those bounds (the kernel verifier accepts it as checked at run time).
            let pos = if guard {
                let v = self.b.let_(Op::Index(pos));
                self.bounds.set_value(v, lo.max(0), hi.min(last));
                index::value(v)
            } else {
                pos
            };
            oi.push(if bd > 1 { self.idiv(&pos, bd) } else { pos });
        }
        let r = body(self, &oi);
        if cond.is_some() {
            self.b.end_if();
        }
        self.forget_since(mark);
        r
    }
}

/// The fold of one reduce-window output element: accumulators started at the init values,
/// updated with each operand element in window order, read at the end. An f32 sum
/// accumulates in f64 and rounds once, as reduce does (see reduce.rs): a long window such as
/// a cumulative sum's stays well inside the corpus tolerances.
pub(crate) struct WindowFold<'m> {
    frame: Frame<'m>,
    inputs: Vec<InstId>,
    reducer: tessera_hlo::CompId,
    locals: Vec<crate::kernel::LocalId>,
    widest: bool,
    /// The operands' dimensions.
    pub(crate) in_dims: Vec<i64>,
}

impl<'m> WindowFold<'m> {
    /// The fold of reduce-window `id` (in frame `f`) for a result of rank `rank`.
    pub(crate) fn start(em: &mut Emitter<'m>, f: &Frame<'m>, id: InstId, rank: usize) -> Result<Self, LowerError> {
        Self::start_from(em, f, id, rank, None)
    }

    /// The fold of reduce-window `id` carried on from accumulators `accs` (values of
    /// [`Self::accumulator_types`], as [`Self::accumulators`] read them), instead of the init
    /// values: a fold whose accumulators wait in memory between elements.
    pub(crate) fn resume(
        em: &mut Emitter<'m>,
        f: &Frame<'m>,
        id: InstId,
        rank: usize,
        accs: &[ValueId],
    ) -> Result<Self, LowerError> {
        Self::start_from(em, f, id, rank, Some(accs))
    }

    /// The register types of reduce-window `inst`'s accumulators, one per operand: an f32 sum
    /// accumulates in f64.
    pub(crate) fn accumulator_types(em: &Emitter<'m>, inst: &Instruction) -> Result<Vec<Ty>, LowerError> {
        let (inputs, _, _) = reduce::reduction_parts(inst)?;
        let out_types: Vec<ElementType> = match &inst.shape {
            tessera_hlo::Shape::Tuple(s) => s.iter().map(|s| s.element_type()).collect(),
            s => vec![s.element_type()],
        };
        if out_types.len() != inputs.len() {
            return Err(LowerError::invalid(&inst.name, "reduce-window result count differs from its operands"));
        }
        if Self::widens(em, inst) {
            return Ok(vec![Ty::F64]);
        }
        out_types.iter().map(|&et| types::reg(et, &inst.name)).collect()
    }

    /// Whether reduce-window `inst` is an f32 sum, which accumulates in f64.
    fn widens(em: &Emitter<'m>, inst: &Instruction) -> bool {
        let f32_sum = |inputs: &[InstId], reducer| {
            inputs.len() == 1
                && !inst.shape.is_tuple()
                && inst.shape.element_type() == ElementType::F32
                && reduce::is_plain_add(em.module, reducer)
        };
        reduce::reduction_parts(inst).is_ok_and(|(inputs, _, reducer)| f32_sum(inputs, reducer))
    }

    fn start_from(
        em: &mut Emitter<'m>,
        f: &Frame<'m>,
        id: InstId,
        rank: usize,
        accs: Option<&[ValueId]>,
    ) -> Result<Self, LowerError> {
        let inst = f.comp.inst(id);
        let name = inst.name.clone();
        let (inputs, inits, reducer) = reduce::reduction_parts(inst)?;
        let in_dims = f.comp.inst(inputs[0]).shape.dims().to_vec();
        if inputs.iter().any(|&i| f.comp.inst(i).shape.dims() != in_dims.as_slice()) || rank != in_dims.len() {
            return Err(LowerError::invalid(
                &name,
                "reduce-window operands differ in shape from each other or the result",
            ));
        }
        let tys = Self::accumulator_types(em, inst)?;
        let widest = Self::widens(em, inst);
        let mut locals = Vec::with_capacity(tys.len());
        for (k, (&init, &ty)) in inits.iter().zip(&tys).enumerate() {
            let v = match accs {
                Some(accs) => *accs.get(k).ok_or_else(|| LowerError::invalid(&name, "too few accumulators"))?,
                None => {
                    let v = em.elem(f, init, &[])?;
                    if widest {
                        em.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, v)
                    } else {
                        v
                    }
                }
            };
            locals.push(em.b.local(ty, v));
        }
        Ok(WindowFold { frame: f.clone(), inputs: inputs.to_vec(), reducer, locals, widest, in_dims })
    }

    /// Folds in the operands' elements at `oi`.
    pub(crate) fn step(&self, em: &mut Emitter<'m>, oi: &[IndexExpr]) -> Result<(), LowerError> {
        if self.widest {
            let acc = em.b.get_local(self.locals[0]);
            let x = em.elem(&self.frame, self.inputs[0], oi)?;
            let x = em.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, x);
            let s = em.b.binary(BinOp::Add, Ty::F64, acc, x);
            em.b.set_local(self.locals[0], s);
            return Ok(());
        }
        let mut args: Vec<ValueId> = self.locals.iter().map(|&l| em.b.get_local(l)).collect();
        for &i in &self.inputs {
            args.push(em.elem(&self.frame, i, oi)?);
        }
        let results = em.call_scalar(self.reducer, args)?;
        if results.len() != self.locals.len() {
            return Err(LowerError::invalid(
                &self.frame.comp.inst(self.inputs[0]).name,
                "reducer returns the wrong number of values",
            ));
        }
        for (&l, v) in self.locals.iter().zip(results) {
            em.b.set_local(l, v);
        }
        Ok(())
    }

    /// The accumulators as they stand, in [`Self::accumulator_types`].
    pub(crate) fn accumulators(&self, em: &mut Emitter<'m>) -> Vec<ValueId> {
        self.locals.iter().map(|&l| em.b.get_local(l)).collect()
    }

    /// The folded values, one per operand, in the result types.
    pub(crate) fn finish(&self, em: &mut Emitter<'m>) -> Vec<ValueId> {
        let mut out: Vec<ValueId> = self.locals.iter().map(|&l| em.b.get_local(l)).collect();
        if self.widest {
            out[0] = em.b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, out[0]);
        }
        out
    }
}
