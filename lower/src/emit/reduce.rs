//! Reductions at one output element: loops over the reduced dimensions (in the input's
//! physical order, so the innermost loop walks the input's most minor reduced dimension)
//! around the reducer computation inlined on accumulator locals initialized from the init
//! values. Variadic reductions carry one accumulator per input.
//!
//! A row reduction (one reducer input whose only reduced loop is its contiguous minor
//! dimension, and a reducer that is one kernel op with an identity: a sum, product, max, min
//! or bitwise op) is one loop the kernel IR reduces in lanes (`Loop::reductions`): 16
//! accumulators for 32-bit values, 8 for 64-bit ones (a 512-bit vector), element `i` in lane
//! `i % W`, the lanes folded as a tree and the init value combined last. HLO leaves the order
//! of a reduction open, so this order is as valid as the serial one; the IR fixes it, so every
//! tier and the kernel interpreter compute the same bits. The `W` independent chains are what
//! a vector unit runs side by side: the serial form waits a full add latency per element. f32
//! sums in lanes stay in f32 (each lane sees a `W`th of the row and the tree combines like
//! magnitudes), but for a whole array's sum, in 8 f64 lanes as accurate as the serial form;
//! f16/bf16 sums accumulate in f32 lanes; the serial form keeps f64 for f32.
//!
//! When the reducer's result does not depend on the order it combines elements in (a float
//! maximum or minimum, NaN-propagating and exact; integer ops, wrapping), a reduction over a
//! contiguous row and other dimensions runs the row in lanes too, inside serial loops over the
//! others, one lane reduction after another into the same accumulator (`row_of`).

use tessera_hlo::ir::AttrList;
use tessera_hlo::{CompId, InstId, Instruction, Opcode};

use super::{index, layout_map, types, Emitter, Frame};
use crate::kernel::{BinOp, CastOp, IndexExpr, Reduction, Tail, Ty, ValueId};
use crate::LowerError;

/// The (inputs, init values, reducer) of a `reduce` or `reduce-window`: both take k inputs
/// followed by their k init values.
pub(super) fn reduction_parts(inst: &Instruction) -> Result<(&[InstId], &[InstId], CompId), LowerError> {
    let k = inst.operands.len() / 2;
    if k == 0 || inst.operands.len() != 2 * k {
        return Err(LowerError::invalid(&inst.name, format!("{} needs inputs and as many init values", inst.opcode)));
    }
    let reducer = inst
        .called("to_apply")
        .ok_or_else(|| LowerError::invalid(&inst.name, format!("{} without to_apply", inst.opcode)))?;
    let (inputs, inits) = inst.operands.split_at(k);
    Ok((inputs, inits, reducer))
}

impl<'m> Emitter<'m> {
    /// The values (one per reduced input) of element `idx` of reduce `id`.
    pub(crate) fn reduce_values(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
    ) -> Result<Vec<ValueId>, LowerError> {
        let key = (f.id, id, idx.to_vec());
        if let Some(v) = self.multi_cache.get(&key) {
            return Ok(v.clone());
        }
        self.evaluate_reduce_input_rows(f, id, idx)?;
        let outer = self.mark();
        let dims = f.comp.inst(id).attr_ints("dimensions").unwrap_or_default().to_vec();
        self.staging_reduction(outer, &dims, |em| em.reduce_values_here(f, id, idx, key))
    }

    /// [`Emitter::reduce_values`] once the row values of its inputs are evaluated.
    fn reduce_values_here(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
        key: super::CacheKey,
    ) -> Result<Vec<ValueId>, LowerError> {
        let inst = f.comp.inst(id);
        let name = inst.name.clone();
        let (inputs, inits, reducer) = reduction_parts(inst)?;
        let k = inputs.len();
        // Float sums accumulate wider and round once at the end: f16/bf16 in f32, as the
        // reference interpreter (and XLA:CPU's float normalization of reductions) does, and f32
        // in f64 in the serial form. A sequential f32 sum over tens of thousands of elements
        // drifts past the corpus tolerances (set by XLA's vectorized, reassociated sums); f64
        // stays well inside, and so do the lane form's f32 lanes.
        let first_et = match &inst.shape {
            tessera_hlo::Shape::Tuple(_) => None,
            s => Some(s.element_type()),
        };
        let plain_add = k == 1 && is_plain_add(self.module, reducer);
        let wide = plain_add && first_et.is_some_and(|e| types::is_half(e) || types::is_minifloat(e));
        let f64_lanes = k == 1 && sums_in_f64_lanes(self.module, inst, reducer);
        if k == 1 {
            if let Some(row) = self.lane_row(f, id, first_et, reducer, wide, f64_lanes)? {
                // Staging runs along plain rows only (`has_lane_form`).
                let lane = std::mem::replace(&mut self.staging.lane, row.outer.is_empty());
                let out = self.lane_reduce(f, id, idx, row, reducer, wide || f64_lanes);
                self.staging.lane = lane;
                let mut out = out?;
                if let (true, Some(et)) = (wide, first_et) {
                    out = super::scalar::round(&mut self.b, et, out);
                }
                if f64_lanes {
                    out = self.b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, out);
                }
                let out = vec![out];
                self.multi_log.push(key.clone());
                self.multi_cache.insert(key, out.clone());
                return Ok(out);
            }
        }
        if k == 2 {
            if let Some(row) = super::arg_reduce::arg_row(self.module, f.comp, id) {
                // As the serial form: its loops are no staging row reduction's.
                let lane = std::mem::replace(&mut self.staging.lane, false);
                let out = self.arg_reduce(f, id, idx, row);
                self.staging.lane = lane;
                let out = out?;
                self.multi_log.push(key.clone());
                self.multi_cache.insert(key, out.clone());
                return Ok(out);
            }
        }
        let widest = plain_add && first_et == Some(tessera_hlo::ElementType::F32);
        let mut locals = Vec::with_capacity(k);
        for (i, &init) in inits.iter().enumerate() {
            let et = match &inst.shape {
                tessera_hlo::Shape::Tuple(s) => s.get(i).map(|s| s.element_type()),
                s => Some(s.element_type()),
            }
            .ok_or_else(|| LowerError::invalid(&name, "reduce result shape"))?;
            let ty = types::reg(et, &name)?;
            let v = self.elem(f, init, &[])?;
            if widest {
                let v = self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, v);
                locals.push(self.b.local(Ty::F64, v));
            } else {
                locals.push(self.b.local(ty, v));
            }
        }
        {
            let inputs = inputs.to_vec();
            let locals_c = locals.clone();
            let frame = f.clone();
            let mut step = move |em: &mut Emitter<'m>, full: &[IndexExpr]| {
                if wide || widest {
                    em.wide_add_step(&frame, inputs[0], full, locals_c[0], widest)
                } else {
                    em.reduce_step(&frame, &inputs, full, &locals_c, reducer)
                }
            };
            let lane = std::mem::replace(&mut self.staging.lane, false);
            let result = self.reduce_nest(f, id, idx, &mut step);
            self.staging.lane = lane;
            result?;
        }
        let mut out: Vec<ValueId> = locals.iter().map(|&l| self.b.get_local(l)).collect();
        if let (true, Some(et)) = (wide, first_et) {
            out[0] = super::scalar::round(&mut self.b, et, out[0]);
        }
        if widest {
            out[0] = self.b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, out[0]);
        }
        self.multi_log.push(key.clone());
        self.multi_cache.insert(key, out.clone());
        Ok(out)
    }

    /// The lane form's row (module doc) of reduce `id`, when it has one.
    fn lane_row(
        &self,
        f: &Frame<'m>,
        id: InstId,
        et: Option<tessera_hlo::ElementType>,
        reducer: CompId,
        wide: bool,
        f64_lanes: bool,
    ) -> Result<Option<LaneRow>, LowerError> {
        lane_row_of(self.module, f.comp, f.comp.inst(id), et, reducer, wide, f64_lanes)
    }

    /// Reduce `id` at output element `idx` in the lane form (module doc): one loop over the
    /// row whose accumulator the kernel IR reduces in lanes; `wide` adds plain sums in the
    /// wider accumulation type `wide_add_step` uses (f64 for f32 when the row's lanes are f64).
    fn lane_reduce(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
        row: LaneRow,
        reducer: CompId,
        wide: bool,
    ) -> Result<ValueId, LowerError> {
        let inst = f.comp.inst(id);
        let name = inst.name.clone();
        let (inputs, inits, _) = reduction_parts(inst)?;
        let (input, init) = (inputs[0], inits[0]);
        let reduced: Vec<i64> = inst.attr_ints("dimensions").map(<[i64]>::to_vec).unwrap_or_default();
        let in_rank = layout_map(&f.comp.inst(input).shape, &name)?.dims().len();
        let mut full = vec![IndexExpr::default(); in_rank];
        let mut kept = idx.iter();
        for (d, slot) in full.iter_mut().enumerate() {
            // Reduced dimensions other than the row's have extent 1: index 0.
            if !reduced.contains(&(d as i64)) {
                *slot = kept.next().cloned().ok_or_else(|| LowerError::invalid(&name, "index rank mismatch"))?;
            }
        }
        let mut init = self.elem(f, init, &[])?;
        let in_f64 = row.ty == Ty::F64 && f.comp.inst(input).shape.element_type() == tessera_hlo::ElementType::F32;
        if in_f64 {
            init = self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, init);
        }
        let acc = self.b.local(row.ty, init);
        let mark = self.mark();
        for &(d, n) in &row.outer {
            let v = self.open_loop(0, n);
            full[d] = index::var(v);
        }
        let v = self.open_loop(0, row.extent);
        full[row.dim] = index::var(v);
        if wide {
            self.wide_add_step(f, input, &full, acc, in_f64)?;
        } else {
            self.reduce_step(f, &[input], &full, &[acc], reducer)?;
        }
        let tail = if row.extent % row.lanes == 0 { Tail::None } else { Tail::Peel };
        self.b.end_loop_reducing(row.lanes as u32, tail, vec![Reduction { local: acc, op: row.op, ty: row.ty }]);
        for _ in &row.outer {
            self.b.end_loop();
        }
        self.forget_since(mark);
        Ok(self.b.get_local(acc))
    }

    /// Loops over the reduced dimensions of reduce `id`'s input for output element `idx`,
    /// calling `step` with the full input index at each (not at all when a reduced dimension
    /// is empty).
    pub(crate) fn reduce_nest(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
        step: &mut dyn FnMut(&mut Emitter<'m>, &[IndexExpr]) -> Result<(), LowerError>,
    ) -> Result<(), LowerError> {
        let inst = f.comp.inst(id);
        let name = inst.name.clone();
        let input = *inst.operands.first().ok_or_else(|| LowerError::invalid(&name, "reduce without inputs"))?;
        let in_map = layout_map(&f.comp.inst(input).shape, &name)?;
        let in_dims = in_map.dims().to_vec();
        let rdims = inst.attr_ints("dimensions").ok_or_else(|| LowerError::invalid(&name, "missing dimensions"))?;
        let mut reduced = vec![false; in_dims.len()];
        for &d in rdims {
            match usize::try_from(d).ok().and_then(|d| reduced.get_mut(d)) {
                Some(r) => *r = true,
                None => return Err(LowerError::invalid(&name, format!("dimension {d} out of range"))),
            }
        }
        let mut full = vec![IndexExpr::default(); in_dims.len()];
        let mut kept = idx.iter();
        for d in 0..in_dims.len() {
            if !reduced[d] {
                full[d] = kept.next().cloned().ok_or_else(|| LowerError::invalid(&name, "index rank mismatch"))?;
            }
        }
        if rdims.iter().any(|&d| in_dims[d as usize] == 0) {
            return Ok(());
        }
        // The reduced dimensions loop over the input's physical digits (tile by tile for a
        // tiled input, so its addresses stay affine), falling back to logical order for
        // layouts without a digit decomposition.
        let digits = super::nest::plan(&in_map, &[]).map(|ds| {
            ds.into_iter().filter(|g| reduced[g.dim]).map(|g| super::nest::Digit { coef: 0, ..g }).collect::<Vec<_>>()
        });
        let digits = digits.unwrap_or_else(|| {
            in_map
                .layout()
                .major_to_minor()
                .filter_map(|d| usize::try_from(d).ok())
                .filter(|&d| reduced[d])
                .map(|d| super::nest::Digit { dim: d, weight: 1, extent: in_dims[d], coef: 0 })
                .collect()
        });
        let mut body = move |em: &mut Emitter<'m>, ridx: &[IndexExpr], _: &IndexExpr| {
            let mut full = full.clone();
            for (d, e) in ridx.iter().enumerate() {
                if reduced[d] {
                    full[d] = e.clone();
                }
            }
            step(em, &full)
        };
        let limits: Vec<Option<i64>> = in_dims.iter().map(|&n| Some(n)).collect();
        self.reduce_loops(&digits, limits, &mut body)
    }

    fn wide_add_step(
        &mut self,
        f: &Frame<'m>,
        input: InstId,
        full: &[IndexExpr],
        local: crate::kernel::LocalId,
        in_f64: bool,
    ) -> Result<(), LowerError> {
        let acc = self.b.get_local(local);
        let mut x = self.elem(f, input, full)?;
        // f8/f4 values are already f64 registers; f16/bf16 ones f32.
        let ty = if in_f64 {
            x = self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, x);
            Ty::F64
        } else {
            let et = f.comp.inst(input).shape.element_type();
            types::reg_ty(et).unwrap_or(Ty::F32)
        };
        let s = self.b.binary(crate::kernel::BinOp::Add, ty, acc, x);
        self.b.set_local(local, s);
        Ok(())
    }

    fn reduce_step(
        &mut self,
        f: &Frame<'m>,
        inputs: &[InstId],
        full: &[IndexExpr],
        locals: &[crate::kernel::LocalId],
        reducer: CompId,
    ) -> Result<(), LowerError> {
        let mut args: Vec<ValueId> = locals.iter().map(|&l| self.b.get_local(l)).collect();
        for &i in inputs {
            args.push(self.elem(f, i, full)?);
        }
        let results = self.call_scalar(reducer, args)?;
        if results.len() != locals.len() {
            return Err(LowerError::invalid(
                &f.comp.inst(inputs[0]).name,
                "reducer returns the wrong number of values",
            ));
        }
        for (&l, v) in locals.iter().zip(results) {
            self.b.set_local(l, v);
        }
        Ok(())
    }

    /// Inlines a computation over scalars (a reducer) on `args`; a tuple root gives one value
    /// per element.
    pub(crate) fn call_scalar(&mut self, comp: CompId, args: Vec<ValueId>) -> Result<Vec<ValueId>, LowerError> {
        let module = self.module;
        let c = module.get(comp).ok_or_else(|| LowerError::invalid("reduce", "reducer computation missing"))?;
        let frame = self.new_frame(c, args);
        let root = c.root_inst();
        if root.opcode == Opcode::Tuple {
            let ops = root.operands.clone();
            ops.into_iter().map(|o| self.elem(&frame, o, &[])).collect()
        } else {
            Ok(vec![self.elem(&frame, c.root, &[])?])
        }
    }
}

/// The lane form's row (module doc) of reduce `inst` of `comp`, when it has one: the reduced
/// input dimension, its extent, the lane count and the reducer as a kernel op. `et` is the
/// result's element type and `wide` whether a plain sum accumulates wider (`reduce_values`).
fn lane_row_of(
    module: &tessera_hlo::Module,
    comp: &tessera_hlo::Computation,
    inst: &Instruction,
    et: Option<tessera_hlo::ElementType>,
    reducer: CompId,
    wide: bool,
    f64_lanes: bool,
) -> Result<Option<LaneRow>, LowerError> {
    let Some(et) = et else { return Ok(None) };
    let op = if wide || f64_lanes { Some(BinOp::Add) } else { lane_op(module, reducer, et) };
    let Some(op) = op else { return Ok(None) };
    // Accumulators live in registers of the result type (f16/bf16 in f32), or in f64.
    let lanes = match types::reg_ty(et) {
        _ if f64_lanes => 8,
        Some(Ty::F32 | Ty::I32) if !types::is_minifloat(et) => 16,
        Some(Ty::F64 | Ty::I64) if !types::is_minifloat(et) => 8,
        _ => return Ok(None),
    };
    let ty = if f64_lanes { Ty::F64 } else { types::reg(et, &inst.name)? };
    let Some((dim, extent, outer)) = row_of(comp, inst, lanes)? else { return Ok(None) };
    // Other reduced dimensions loop around the row, serially, only when the op's result does
    // not depend on the order it combines elements in.
    let order_free = !wide && !f64_lanes && !(matches!(ty, Ty::F32 | Ty::F64) && matches!(op, BinOp::Add | BinOp::Mul));
    if !outer.is_empty() && !order_free {
        return Ok(None);
    }
    Ok(Some(LaneRow { dim, extent, lanes, ty, op, outer }))
}

/// The (dimension, extent) of reduce `inst`'s row when it reduces one contiguous row of its
/// first input (the only reduced dimension of extent above 1, walked with unit stride) of at
/// least two vectors of `lanes` elements: what a lane reduction runs along.
pub(super) fn contiguous_row(
    comp: &tessera_hlo::Computation,
    inst: &Instruction,
    lanes: i64,
) -> Result<Option<(usize, i64)>, LowerError> {
    Ok(row_of(comp, inst, lanes)?.filter(|(_, _, outer)| outer.is_empty()).map(|(dim, extent, _)| (dim, extent)))
}

/// The row of reduce `inst`, as [`contiguous_row`]'s, and the other reduced dimensions of
/// extent above 1, with their extents, major to minor: the loops a reduction over more than
/// the row runs around it (module doc). The row is the first input's most
/// minor reduced dimension, walked with unit stride; every reduced dimension is one digit of
/// its layout. A maximum over a slice's rows (`max(x[:, :40])`) ran serially, which LLVM's
/// O3 unrolled and vectorized for 190 ms of its pipeline.
fn row_of(
    comp: &tessera_hlo::Computation,
    inst: &Instruction,
    lanes: i64,
) -> Result<Option<(usize, i64, Vec<(usize, i64)>)>, LowerError> {
    let Some(&input) = inst.operands.first() else { return Ok(None) };
    let in_map = layout_map(&comp.inst(input).shape, &inst.name)?;
    let Some(rdims) = inst.attr_ints("dimensions") else { return Ok(None) };
    let dims = in_map.dims();
    // Reduced dimensions of extent 1 loop nowhere.
    let busy = |d: usize| rdims.contains(&(d as i64)) && dims.get(d).is_some_and(|&n| n > 1);
    let Some(digits) = super::nest::plan(&in_map, &[]) else { return Ok(None) };
    // Major to minor.
    let mine: Vec<&super::nest::Digit> = digits.iter().filter(|g| busy(g.dim)).collect();
    let Some((row, outer)) = mine.split_last() else { return Ok(None) };
    let mut seen = std::collections::HashSet::new();
    if !mine.iter().all(|g| seen.insert(g.dim) && g.weight == 1) {
        return Ok(None);
    }
    let extent = dims[row.dim];
    if row.coef != 1 || extent < 2 * lanes {
        return Ok(None);
    }
    Ok(Some((row.dim, extent, outer.iter().map(|g| (g.dim, dims[g.dim])).collect())))
}

/// Whether reduce `inst` is an f32 sum of a whole array (a rank-0 result), which its lanes
/// accumulate in f64, where f32 lanes would lose what the serial form's f64 keeps (an
/// f32[64,300] sum, grouped into one row, missed the corpus's rtol of 1e-6 by 5x in f32
/// lanes). Large row-major arrays are split into rows by `tree_reduction` first, so for them
/// this is the combine of the row results; only other layouts run a large one this way.
fn sums_in_f64_lanes(module: &tessera_hlo::Module, inst: &Instruction, reducer: CompId) -> bool {
    let whole = matches!(&inst.shape, tessera_hlo::Shape::Array(a) if a.dims.is_empty());
    whole && inst.shape.element_type() == tessera_hlo::ElementType::F32 && is_plain_add(module, reducer)
}

/// Whether reduce `inst` of `comp` runs in the lane form (module doc): a vector loop along its
/// row, where what it reads is computed a vector at a time (what staging an expensive input
/// needs: `passes::fusion`).
pub(crate) fn has_lane_form(module: &tessera_hlo::Module, comp: &tessera_hlo::Computation, inst: &Instruction) -> bool {
    let Ok((inputs, _, reducer)) = reduction_parts(inst) else { return false };
    let et = match &inst.shape {
        tessera_hlo::Shape::Array(a) if inputs.len() == 1 => a.element_type,
        _ => return false,
    };
    let wide = is_plain_add(module, reducer) && (types::is_half(et) || types::is_minifloat(et));
    let f64_lanes = sums_in_f64_lanes(module, inst, reducer);
    matches!(lane_row_of(module, comp, inst, Some(et), reducer, wide, f64_lanes), Ok(Some(row)) if row.outer.is_empty())
}

/// Where a row reduction's lanes run (`Emitter::lane_row`).
#[derive(Clone)]
struct LaneRow {
    dim: usize,
    extent: i64,
    lanes: i64,
    /// The accumulators' register type (the result's: f16/bf16 sum in f32).
    ty: Ty,
    op: BinOp,
    /// Other reduced dimensions (with their extents), looped serially around the row, major
    /// to minor (`row_of`); empty for a row reduction.
    outer: Vec<(usize, i64)>,
}

/// The kernel op a reducer is, when it is one op on its two parameters whose scalar lowering
/// is that op alone (no rounding after it), so the lanes' fold computes what the loop does:
/// f32/f64 and 32/64-bit integer arithmetic, and f16/bf16 max/min (exact in any format).
pub(crate) fn lane_op(module: &tessera_hlo::Module, comp: CompId, et: tessera_hlo::ElementType) -> Option<BinOp> {
    use tessera_hlo::ElementType as E;
    let c = module.get(comp)?;
    let root = c.root_inst();
    let mut params: Vec<i64> =
        root.operands.iter().filter_map(|&o| c.get(o).and_then(|i| i.parameter_number())).collect();
    params.sort_unstable();
    if c.instructions.len() != 3 || params != [0, 1] {
        return None;
    }
    let float = matches!(et, E::F32 | E::F64);
    let half = types::is_half(et);
    let signed = matches!(et, E::S32 | E::S64);
    let unsigned = matches!(et, E::U32 | E::U64);
    Some(match root.opcode {
        Opcode::Maximum if float || half => BinOp::FMax,
        Opcode::Minimum if float || half => BinOp::FMin,
        _ if half => return None,
        Opcode::Add if float || signed || unsigned => BinOp::Add,
        Opcode::Multiply if float || signed || unsigned => BinOp::Mul,
        Opcode::Maximum if signed => BinOp::SMax,
        Opcode::Minimum if signed => BinOp::SMin,
        Opcode::Maximum if unsigned => BinOp::UMax,
        Opcode::Minimum if unsigned => BinOp::UMin,
        Opcode::And if signed || unsigned => BinOp::And,
        Opcode::Or if signed || unsigned => BinOp::Or,
        Opcode::Xor if signed || unsigned => BinOp::Xor,
        _ => return None,
    })
}

/// True when `comp` is `add(parameter 0, parameter 1)` and nothing else.
pub(crate) fn is_plain_add(module: &tessera_hlo::Module, comp: CompId) -> bool {
    let Some(c) = module.get(comp) else { return false };
    let root = c.root_inst();
    let mut params: Vec<i64> =
        root.operands.iter().filter_map(|&o| c.get(o).and_then(|i| i.parameter_number())).collect();
    params.sort_unstable();
    root.opcode == Opcode::Add && c.instructions.len() == 3 && params == [0, 1]
}
