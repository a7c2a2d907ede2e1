//! Generating the value of one element of an instruction at a logical index: elementwise ops
//! apply their scalar semantics to their operands' elements at the same index; data-movement
//! ops map the index to their operand's index (broadcast drops dimensions, transpose permutes,
//! reshape linearizes and de-linearizes, slice offsets and strides, reverse mirrors, pad and
//! concatenate pick an operand under a condition and never read outside it); parameters load
//! at the address their layout gives that index.

use tessera_hlo::ir::{AttrList, AttrValue, ComparisonDirection, ComparisonType};
use tessera_hlo::{InstId, Opcode};

use super::{index, scalar, types, Emitter, Frame, Params};
use crate::kernel::{BinOp, CastOp, CmpOp, Const, IndexExpr, Op, Ty, ValueId};
use crate::LowerError;

fn ints<'a>(inst: &'a tessera_hlo::Instruction, name: &str) -> Result<&'a [i64], LowerError> {
    inst.attr_ints(name).ok_or_else(|| LowerError::invalid(&inst.name, format!("missing attribute {name}")))
}

fn dim(inst: &tessera_hlo::Instruction, d: i64, rank: usize) -> Result<usize, LowerError> {
    usize::try_from(d)
        .ok()
        .filter(|&d| d < rank)
        .ok_or_else(|| LowerError::invalid(&inst.name, format!("dimension {d} out of range")))
}

/// Element generation inlines each use of an instruction at its own index, so a DAG whose
/// reductions feed reductions grows multiplicatively; beyond this many generated elements the
/// computation is refused rather than emitted as a huge kernel.
const GENERATED_LIMIT: usize = 20_000;

impl<'m> Emitter<'m> {
    /// The register value of element `idx` of instruction `id` (cached within the scope).
    pub(crate) fn elem(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr]) -> Result<ValueId, LowerError> {
        let key = (f.id, id, idx.to_vec());
        if let Some(&v) = self.cache.get(&key) {
            return Ok(v);
        }
        self.generated += 1;
        if self.generated > GENERATED_LIMIT {
            return Err(LowerError::unsupported(
                &f.comp.inst(id).name,
                format!("a fused computation needing more than {GENERATED_LIMIT} inlined element computations (fusion should split it)"),
            ));
        }
        let staged = if f.id == 0 && self.staging.staged.contains(&id) { self.staged_elem(f, id, idx)? } else { None };
        let v = match staged {
            Some(v) => v,
            None => self.elem_uncached(f, id, idx)?,
        };
        self.cache_log.push(key.clone());
        self.cache.insert(key, v);
        Ok(v)
    }

    /// The element type of instruction `id`'s array result.
    fn et(&self, f: &Frame<'m>, id: InstId) -> Result<tessera_hlo::ElementType, LowerError> {
        let inst = f.comp.inst(id);
        match inst.shape.as_array() {
            Some(a) => Ok(a.element_type),
            None => Err(LowerError::unsupported(&inst.name, format!("a {} of tuple shape here", inst.opcode))),
        }
    }

    /// Register values of the same-index elements of all operands (rank-0 operands of a
    /// ranked op, as select and clamp allow, at the empty index).
    fn operand_values(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
    ) -> Result<Vec<(ValueId, tessera_hlo::ElementType)>, LowerError> {
        let inst = f.comp.inst(id);
        let mut out = Vec::with_capacity(inst.operands.len());
        for &o in &inst.operands {
            let et = self.et(f, o)?;
            let oi: &[IndexExpr] = if f.comp.inst(o).shape.rank() == 0 { &[] } else { idx };
            out.push((self.elem(f, o, oi)?, et));
        }
        Ok(out)
    }

    pub(super) fn elem_uncached(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
    ) -> Result<ValueId, LowerError> {
        use Opcode as O;
        let inst = f.comp.inst(id);
        let name = inst.name.as_str();
        if idx.len() != inst.shape.rank() {
            return Err(LowerError::invalid(
                name,
                format!("indexed with {} coordinates at rank {}", idx.len(), inst.shape.rank()),
            ));
        }
        if inst.operands.iter().any(|o| f.comp.get(*o).is_none()) {
            return Err(LowerError::invalid(name, "an operand does not exist"));
        }
        let arity = match inst.opcode {
            O::Parameter | O::Constant | O::Iota => 0,
            O::Select | O::Clamp => 3,
            O::Pad | O::Dot => 2,
            op if op.is_elementwise_binary() => 2,
            O::Concatenate | O::Reduce | O::Call | O::Map => 1,
            op if op.is_elementwise_unary() => 1,
            O::Broadcast | O::Transpose | O::Reshape | O::Bitcast | O::Slice | O::Reverse | O::GetTupleElement => 1,
            // Opcodes the lowering does not handle are reported as such below.
            _ => 0,
        };
        let exact = arity > 0 && !matches!(inst.opcode, O::Concatenate | O::Reduce | O::Call | O::Map);
        if inst.operands.len() < arity || (exact && inst.operands.len() != arity) {
            return Err(LowerError::invalid(name, format!("{} operands for {}", inst.operands.len(), inst.opcode)));
        }
        let et = self.et(f, id)?;
        let ty = match self.complex_route(f, id, idx, et)? {
            super::complex::Route::Value(v) => return Ok(v),
            super::complex::Route::Part(ty) => ty,
            super::complex::Route::Real => types::reg(et, name)?,
        };
        match inst.opcode {
            O::Parameter => {
                let n = inst.parameter_number().and_then(|n| usize::try_from(n).ok());
                match &f.params {
                    Params::Scalars(s) => {
                        return n
                            .and_then(|n| s.get(super::scalar_offset(f.comp, n)).copied())
                            .ok_or_else(|| LowerError::invalid(name, "bad parameter"))
                    }
                    Params::Caller(caller, operands) => {
                        let o = n.and_then(|n| operands.get(n).copied());
                        let o = o.ok_or_else(|| LowerError::invalid(name, "bad parameter"))?;
                        let caller = (**caller).clone();
                        return self.elem(&caller, o, idx);
                    }
                    Params::Buffers => {}
                }
                let p = n.and_then(|n| self.params.get(n)).ok_or_else(|| LowerError::invalid(name, "bad parameter"))?;
                let (buf, map) = (p.buf, p.map.clone());
                let addr = self.layout_offset(&map, idx);
                let v = self.b.load(buf, addr);
                Ok(types::from_mem(&mut self.b, et, v))
            }
            O::Constant => self.splat_constant(f, id),
            O::Iota => {
                let d = dim(inst, inst.attr_int("iota_dimension").unwrap_or(0), idx.len())?;
                let i = self.b.let_(Op::Index(idx[d].clone()));
                Ok(match ty {
                    Ty::Pred => {
                        let zero = self.b.constant(Const::Int { ty: Ty::I64, bits: 0 });
                        self.b.cmp(CmpOp::Ne, Ty::I64, i, zero)
                    }
                    Ty::I64 => i,
                    Ty::F32 | Ty::F64 => {
                        let v = self.b.cast(CastOp::SIToFP, Ty::I64, ty, i);
                        scalar::round(&mut self.b, et, v)
                    }
                    _ => {
                        let v = self.b.cast(CastOp::Trunc, Ty::I64, ty, i);
                        super::narrow_int::wrap(&mut self.b, et, v)
                    }
                })
            }
            O::Copy => self.elem(f, inst.operands[0], idx),
            O::Convert | O::BitcastConvert => {
                let from = self.et(f, inst.operands[0])?;
                if inst.opcode == O::BitcastConvert && from.bit_width() != et.bit_width() {
                    return self.bitcast_between_widths(f, inst.operands[0], from, et, idx, name);
                }
                let ops = self.operand_values(f, id, idx)?;
                let (v, from) = ops[0];
                if inst.opcode == O::Convert {
                    scalar::convert(&mut self.b, from, et, v, name)
                } else {
                    scalar::bitcast_convert(&mut self.b, from, et, v, name)
                }
            }
            O::Compare => {
                let ops = self.operand_values(f, id, idx)?;
                let dir = inst
                    .attr_word("direction")
                    .and_then(ComparisonDirection::parse)
                    .ok_or_else(|| LowerError::invalid(name, "compare without a direction"))?;
                let ct = inst.attr_word("type").and_then(ComparisonType::parse);
                scalar::compare(&mut self.b, dir, ct, ops[0].1, ops[0].0, ops[1].0, name)
            }
            O::Select => {
                let ops = self.operand_values(f, id, idx)?;
                Ok(self.b.select(ty, ops[0].0, ops[1].0, ops[2].0))
            }
            O::Clamp => {
                let ops = self.operand_values(f, id, idx)?;
                let lo = scalar::binary(&mut self.b, O::Maximum, et, ops[1].0, ops[0].0, name)?;
                scalar::binary(&mut self.b, O::Minimum, et, lo, ops[2].0, name)
            }
            O::ReducePrecision => {
                let (e, m) = (inst.attr_int("exponent_bits"), inst.attr_int("mantissa_bits"));
                let (Some(e), Some(m)) = (e, m) else {
                    return Err(LowerError::invalid(name, "reduce-precision without bit counts"));
                };
                if !(1..=11).contains(&e) || !(0..=52).contains(&m) || !et.is_float() {
                    return Err(LowerError::invalid(name, "reduce-precision bit counts out of range"));
                }
                let ops = self.operand_values(f, id, idx)?;
                Ok(scalar::reduce_precision(&mut self.b, et, ops[0].0, e as u32, m as u32))
            }
            op if op.is_elementwise_unary() => {
                let ops = self.operand_values(f, id, idx)?;
                let (v, oet) = ops[0];
                let r = scalar::unary(&mut self.b, op, oet, v, name)?;
                Ok(r)
            }
            O::StochasticConvert => {
                let ops = self.operand_values(f, id, idx)?;
                super::stochastic::stochastic_convert(&mut self.b, ops[0].1, ops[1].1, et, ops[0].0, ops[1].0, name)
            }
            op if op.is_elementwise_binary() => {
                let ops = self.operand_values(f, id, idx)?;
                scalar::binary(&mut self.b, op, et, ops[0].0, ops[1].0, name)
            }
            O::Broadcast => {
                let map = ints(inst, "dimensions")?;
                let oi: Vec<IndexExpr> =
                    map.iter().map(|&d| dim(inst, d, idx.len()).map(|d| idx[d].clone())).collect::<Result<_, _>>()?;
                self.elem(f, inst.operands[0], &oi)
            }
            O::Transpose => {
                let perm = ints(inst, "dimensions")?;
                if perm.len() != idx.len() {
                    return Err(LowerError::invalid(name, "transpose permutation does not match the rank"));
                }
                let mut oi = vec![IndexExpr::default(); perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    let p = dim(inst, p, perm.len())?;
                    oi[p] = idx[i].clone();
                }
                self.elem(f, inst.operands[0], &oi)
            }
            O::Reshape => {
                let oi = self.reshape_index(f, id, idx)?;
                self.elem(f, inst.operands[0], &oi)
            }
            O::Bitcast => {
                let oi = self.bitcast_index(f, id, idx)?;
                let v = self.elem(f, inst.operands[0], &oi)?;
                let from = self.et(f, inst.operands[0])?;
                if from == et {
                    Ok(v)
                } else {
                    scalar::bitcast_convert(&mut self.b, from, et, v, name)
                }
            }
            O::Slice => {
                let Some(AttrValue::Slice(ranges)) = inst.attr("slice") else {
                    return Err(LowerError::invalid(name, "slice without ranges"));
                };
                let oi: Vec<IndexExpr> = ranges
                    .iter()
                    .zip(idx)
                    .map(|(r, i)| index::add_const(&index::scale(i, r.stride), r.start))
                    .collect();
                self.elem(f, inst.operands[0], &oi)
            }
            O::Reverse => {
                let rev = ints(inst, "dimensions")?;
                let dims = inst.shape.dims().to_vec();
                let mut oi = idx.to_vec();
                for &d in rev {
                    let d = dim(inst, d, dims.len())?;
                    oi[d] = index::add_const(&index::scale(&idx[d], -1), dims[d] - 1);
                }
                self.elem(f, inst.operands[0], &oi)
            }
            O::Pad => self.elem_pad(f, id, idx, ty),
            O::Concatenate => self.elem_concat(f, id, idx, ty),
            O::Reduce => Ok(self.reduce_values(f, id, idx)?[0]),
            O::ReduceWindow => Ok(self.reduce_window_values(f, id, idx)?[0]),
            O::Call => {
                let callee = self.call_frame(f, id)?;
                let root = callee.comp.root;
                self.elem(&callee, root, idx)
            }
            O::GetTupleElement => {
                let src = inst.operands[0];
                let i = inst.attr_int("index").and_then(|i| usize::try_from(i).ok()).unwrap_or(0);
                if f.comp.inst(src).opcode == O::Call {
                    let callee = self.call_frame(f, src)?;
                    let root = callee.comp.root_inst();
                    if root.opcode != O::Tuple {
                        return Err(LowerError::unsupported(name, "get-tuple-element of a call without a tuple root"));
                    }
                    let o = root
                        .operands
                        .get(i)
                        .copied()
                        .ok_or_else(|| LowerError::invalid(name, "tuple index out of range"))?;
                    return self.elem(&callee, o, idx);
                }
                let vals = match f.comp.inst(src).opcode {
                    O::Reduce => self.reduce_values(f, src, idx)?,
                    O::ReduceWindow => self.reduce_window_values(f, src, idx)?,
                    _ => {
                        return Err(LowerError::unsupported(
                            name,
                            "get-tuple-element of anything but a variadic reduce or reduce-window",
                        ))
                    }
                };
                vals.get(i).copied().ok_or_else(|| LowerError::invalid(name, "tuple index out of range"))
            }
            O::Dot => self.elem_dot(f, id, idx),
            O::Convolution => self.elem_conv(f, id, idx),
            O::DynamicSlice => {
                let op = inst.operands[0];
                let op_dims = f.comp.inst(op).shape.dims().to_vec();
                let sizes = inst.shape.dims().to_vec();
                let starts = self.clamped_starts(f, id, 1, &op_dims, &sizes)?;
                let oi: Vec<IndexExpr> =
                    starts.iter().zip(idx).map(|(&s, i)| index::add(&index::value(s), i)).collect();
                self.elem(f, op, &oi)
            }
            O::DynamicUpdateSlice => self.elem_dus(f, id, idx, ty),
            O::Gather => self.elem_gather(f, id, idx),
            O::Map => {
                let comp = inst.called("to_apply").ok_or_else(|| LowerError::invalid(name, "map without to_apply"))?;
                let ops = self.operand_values(f, id, idx)?;
                let vals = self.call_scalar(comp, ops.into_iter().map(|(v, _)| v).collect())?;
                match vals.as_slice() {
                    [v] => Ok(*v),
                    _ => Err(LowerError::unsupported(name, "a map computation returning a tuple")),
                }
            }
            op => Err(LowerError::unsupported(name, format!("opcode {}", op.name()))),
        }
    }

    fn reshape_index(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr]) -> Result<Vec<IndexExpr>, LowerError> {
        let inst = f.comp.inst(id);
        let out_dims = inst.shape.dims().to_vec();
        let op_dims = f.comp.inst(inst.operands[0]).shape.dims().to_vec();
        let mut parts = Vec::new();
        let mut stride = 1i64;
        for d in (0..out_dims.len()).rev() {
            parts.push((idx[d].clone(), stride));
            stride *= out_dims[d];
        }
        let linear = index::linear(&parts);
        let mut oi = vec![IndexExpr::default(); op_dims.len()];
        let mut stride = 1i64;
        for d in (0..op_dims.len()).rev() {
            let q = self.idiv(&linear, stride);
            oi[d] = if d == 0 { q } else { self.irem(&q, op_dims[d]) };
            stride *= op_dims[d];
        }
        Ok(oi)
    }

    /// A bitcast that only reinterprets: the same physical element order on both sides.
    fn bitcast_index(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr]) -> Result<Vec<IndexExpr>, LowerError> {
        let inst = f.comp.inst(id);
        let op = f.comp.inst(inst.operands[0]);
        let out_map = super::layout_map(&inst.shape, &inst.name)?;
        let op_map = super::layout_map(&op.shape, &op.name)?;
        // Same-width types reinterpret each element in place (the caller converts the bits);
        // other widths would regroup elements.
        let (to, from) = (out_map.element_type(), op_map.element_type());
        if to != from
            && (to.bit_width() != from.bit_width() || out_map.element_size_bits() != op_map.element_size_bits())
        {
            return Err(LowerError::unsupported(&inst.name, "a bitcast that changes the element width"));
        }
        if out_map.dims() == op_map.dims() && out_map.physical_dims() == op_map.physical_dims() {
            return Ok(idx.to_vec());
        }
        let plain = |m: &tessera_hlo::LayoutMap| {
            m.physical_element_count() == m.element_count()
                && m.physical_dims()
                    .iter()
                    .all(|p| matches!(p.index, tessera_hlo::IndexExpr::Logical(_) | tessera_hlo::IndexExpr::Zero))
        };
        if !plain(&out_map) || !plain(&op_map) {
            return Err(LowerError::unsupported(&inst.name, "a bitcast between tiled or padded layouts"));
        }
        let offset = self.layout_offset(&out_map, idx);
        let mut oi = vec![index::constant(0); op_map.dims().len()];
        for p in op_map.physical_dims() {
            if let tessera_hlo::IndexExpr::Logical(d) = p.index {
                let q = self.idiv(&offset, p.stride);
                oi[d] = self.irem(&q, p.extent);
            }
        }
        Ok(oi)
    }

    /// `e` as an operand index known (from an enclosing branch condition) to lie in `0..n`:
    /// kept as is when its bounds already say so, otherwise held in an index value with those
    /// bounds, which the kernel verifier accepts as checked at run time.
    fn guarded(&mut self, e: &IndexExpr, n: i64) -> IndexExpr {
        let (lo, hi) = self.bounds.range(e);
        if lo >= 0 && hi < n {
            return e.clone();
        }
        let v = self.b.let_(Op::Index(e.clone()));
        self.bounds.set_value(v, 0, n - 1);
        index::value(v)
    }

    /// XLA's start indices of a dynamic slice or update (operands `first..` of `id`), each
    /// clamped so the window of `sizes` fits `dims`, as `I64` index values.
    pub(super) fn clamped_starts(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        first: usize,
        dims: &[i64],
        sizes: &[i64],
    ) -> Result<Vec<ValueId>, LowerError> {
        let inst = f.comp.inst(id);
        let starts = inst.operands.get(first..).unwrap_or(&[]).to_vec();
        if starts.len() != dims.len() || sizes.len() != dims.len() {
            return Err(LowerError::invalid(&inst.name, "one scalar start index per dimension is needed"));
        }
        let mut out = Vec::with_capacity(dims.len());
        for ((&s, &d), &size) in starts.iter().zip(dims).zip(sizes) {
            let et = self.et(f, s)?;
            if !et.is_integral() || f.comp.inst(s).shape.rank() != 0 || size > d || size < 0 {
                return Err(LowerError::invalid(
                    &inst.name,
                    "start indices must be integer scalars and the window must fit",
                ));
            }
            let ty = types::reg(et, &inst.name)?;
            let v = self.elem(f, s, &[])?;
            let unsigned = et.is_unsigned_integral();
            let wide = if ty == Ty::I64 {
                v
            } else {
                self.b.cast(if unsigned { CastOp::ZExt } else { CastOp::SExt }, ty, Ty::I64, v)
            };
            let hi = self.i64_const(d - size);
            let c = if unsigned {
                self.b.binary(BinOp::UMin, Ty::I64, wide, hi)
            } else {
                let zero = self.i64_const(0);
                let lo = self.b.binary(BinOp::SMax, Ty::I64, wide, zero);
                self.b.binary(BinOp::SMin, Ty::I64, lo, hi)
            };
            self.bounds.set_value(c, 0, d - size);
            out.push(c);
        }
        Ok(out)
    }

    fn elem_dus(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr], ty: Ty) -> Result<ValueId, LowerError> {
        let inst = f.comp.inst(id);
        let (op, upd) = (inst.operands[0], inst.operands[1]);
        let dims = inst.shape.dims().to_vec();
        let sizes = f.comp.inst(upd).shape.dims().to_vec();
        let starts = self.clamped_starts(f, id, 2, &dims, &sizes)?;
        let base = self.elem(f, op, idx)?;
        if sizes.contains(&0) {
            return Ok(base);
        }
        let local = self.b.local(ty, base);
        let mut cond: Option<ValueId> = None;
        let mut rel = Vec::with_capacity(dims.len());
        for ((&s, i), &u) in starts.iter().zip(idx).zip(&sizes) {
            let r = index::add(i, &index::scale(&index::value(s), -1));
            let rv = self.index_value(&r);
            let zero = self.i64_const(0);
            let lim = self.i64_const(u);
            let ge = self.b.cmp(CmpOp::Sge, Ty::I64, rv, zero);
            let lt = self.b.cmp(CmpOp::Slt, Ty::I64, rv, lim);
            let both = self.b.binary(BinOp::And, Ty::Pred, ge, lt);
            cond = Some(self.and(cond, both));
            self.bounds.set_value(rv, 0, u - 1);
            rel.push(index::value(rv));
        }
        let Some(cond) = cond else {
            return self.elem(f, upd, &[]);
        };
        let mark = self.mark();
        self.b.begin_if(cond);
        let r = self.elem(f, upd, &rel);
        if let Ok(v) = r {
            self.b.set_local(local, v);
        }
        self.b.end_if();
        self.forget_since(mark);
        r?;
        Ok(self.b.get_local(local))
    }

    /// A scalar `I64` register holding `e`.
    fn index_value(&mut self, e: &IndexExpr) -> ValueId {
        self.b.let_(Op::Index(e.clone()))
    }

    fn i64_const(&mut self, v: i64) -> ValueId {
        self.b.constant(Const::Int { ty: Ty::I64, bits: v })
    }

    fn and(&mut self, a: Option<ValueId>, b: ValueId) -> ValueId {
        match a {
            None => b,
            Some(a) => self.b.binary(BinOp::And, Ty::Pred, a, b),
        }
    }

    fn elem_pad(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr], ty: Ty) -> Result<ValueId, LowerError> {
        let inst = f.comp.inst(id);
        let Some(AttrValue::Padding(cfg)) = inst.attr("padding") else {
            return Err(LowerError::invalid(&inst.name, "pad without a padding configuration"));
        };
        let cfg = cfg.clone();
        let op = inst.operands[0];
        let op_dims = f.comp.inst(op).shape.dims().to_vec();
        if cfg.len() != idx.len() || op_dims.len() != idx.len() {
            return Err(LowerError::invalid(&inst.name, "padding configuration does not match the rank"));
        }
        let mut cond: Option<ValueId> = None;
        let mut never = op_dims.contains(&0);
        let mut pos = Vec::with_capacity(idx.len());
        for (d, p) in cfg.iter().enumerate() {
            let k = p.interior + 1;
            let t = index::add_const(&idx[d], -p.low);
            let last = (op_dims[d] - 1) * k;
            let (lo, hi) = self.bounds.range(&t);
            if hi < 0 || lo > last || (k > 1 && lo == hi && lo % k != 0) {
                never = true;
            }
            let needs_low = lo < 0;
            let needs_high = hi > last;
            let needs_step = k > 1 && !(lo == hi && lo % k == 0);
            if needs_low || needs_high || needs_step {
                let tv = self.index_value(&t);
                if needs_low {
                    let zero = self.i64_const(0);
                    let c = self.b.cmp(CmpOp::Sge, Ty::I64, tv, zero);
                    cond = Some(self.and(cond, c));
                }
                if needs_high {
                    let l = self.i64_const(last);
                    let c = self.b.cmp(CmpOp::Sle, Ty::I64, tv, l);
                    cond = Some(self.and(cond, c));
                }
                if needs_step {
                    let kv = self.i64_const(k);
                    let r = self.b.binary(BinOp::SRem, Ty::I64, tv, kv);
                    let zero = self.i64_const(0);
                    let c = self.b.cmp(CmpOp::Eq, Ty::I64, r, zero);
                    cond = Some(self.and(cond, c));
                }
            }
            pos.push((t, k));
        }
        let pad_value = inst.operands[1];
        if never {
            return self.elem(f, pad_value, &[]);
        }
        let Some(cond) = cond else {
            let oi: Vec<IndexExpr> = pos.iter().map(|(t, k)| self.idiv(t, *k)).collect();
            return self.elem(f, op, &oi);
        };
        let pv = self.elem(f, pad_value, &[])?;
        let local = self.b.local(ty, pv);
        let mark = self.mark();
        self.b.begin_if(cond);
        let oi: Vec<IndexExpr> = pos
            .iter()
            .zip(&op_dims)
            .map(|((t, k), &n)| {
                let t = self.guarded(t, (n - 1) * k + 1);
                self.idiv(&t, *k)
            })
            .collect();
        let r = self.elem(f, op, &oi);
        if let Ok(v) = r {
            self.b.set_local(local, v);
        }
        self.b.end_if();
        self.forget_since(mark);
        r?;
        Ok(self.b.get_local(local))
    }

    fn elem_concat(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr], ty: Ty) -> Result<ValueId, LowerError> {
        let inst = f.comp.inst(id);
        let d = match ints(inst, "dimensions")? {
            [d] => dim(inst, *d, idx.len())?,
            _ => return Err(LowerError::invalid(&inst.name, "concatenate needs one dimension")),
        };
        let (lo, hi) = self.bounds.range(&idx[d]);
        let mut pieces = Vec::new();
        let mut start = 0i64;
        for &o in &inst.operands {
            let n = f.comp.inst(o).shape.dims().get(d).copied().unwrap_or(0);
            if n > 0 && start <= hi && start + n > lo {
                pieces.push((o, start, n));
            }
            start += n;
        }
        let at = |em: &mut Self, idx: &[IndexExpr], start: i64, n: i64| {
            let mut oi = idx.to_vec();
            oi[d] = em.guarded(&index::add_const(&idx[d], -start), n);
            oi
        };
        match pieces.as_slice() {
            [] => Err(LowerError::invalid(&inst.name, "concatenate index outside every operand")),
            [(o, s, n)] => {
                let (o, s, n) = (*o, *s, *n);
                let oi = at(self, idx, s, n);
                self.elem(f, o, &oi)
            }
            _ => {
                let zero = match ty {
                    Ty::F32 | Ty::F64 => scalar::float_const(&mut self.b, ty, 0.0),
                    _ => scalar::int_const(&mut self.b, ty, 0),
                };
                let local = self.b.local(ty, zero);
                let iv = self.index_value(&idx[d]);
                let mark = self.mark();
                let mut opened = 0;
                let mut result = Ok(());
                for (i, &(o, s, n)) in pieces.iter().enumerate() {
                    let last = i + 1 == pieces.len();
                    if !last {
                        let lim = self.i64_const(s + n);
                        let c = self.b.cmp(CmpOp::Slt, Ty::I64, iv, lim);
                        self.b.begin_if(c);
                        opened += 1;
                    }
                    let oi = at(self, idx, s, n);
                    match self.elem(f, o, &oi) {
                        Ok(v) => self.b.set_local(local, v),
                        Err(e) => result = Err(e),
                    }
                    self.forget_since(mark);
                    if !last {
                        self.b.begin_else();
                    }
                }
                for _ in 0..opened {
                    self.b.end_if();
                }
                result?;
                Ok(self.b.get_local(local))
            }
        }
    }
}

impl<'m> Emitter<'m> {
    /// `bitcast-convert` to a narrower type adds a minor dimension of `wide / narrow` parts
    /// (part `j` is bits `j*narrow..` of the wide value: little-endian, as XLA defines it); to a
    /// wider type it consumes that dimension, OR-ing the parts back together.
    fn bitcast_between_widths(
        &mut self,
        f: &Frame<'m>,
        operand: InstId,
        from: tessera_hlo::ElementType,
        to: tessera_hlo::ElementType,
        idx: &[IndexExpr],
        name: &str,
    ) -> Result<ValueId, LowerError> {
        let (fw, tw) = (from.bit_width(), to.bit_width());
        let unsigned = |w: u32| match w {
            8 => Ok(tessera_hlo::ElementType::U8),
            16 => Ok(tessera_hlo::ElementType::U16),
            32 => Ok(tessera_hlo::ElementType::U32),
            64 => Ok(tessera_hlo::ElementType::U64),
            _ => Err(LowerError::unsupported(name, format!("bitcast-convert of {}-bit elements", w))),
        };
        let (fu, tu) = (unsigned(fw)?, unsigned(tw)?);
        let (fty, tty) = (types::reg(fu, name)?, types::reg(tu, name)?);
        if fw > tw {
            let (outer, part) = idx.split_at(idx.len().saturating_sub(1));
            let part = part.first().cloned().ok_or_else(|| LowerError::invalid(name, "missing part dimension"))?;
            let v = self.elem(f, operand, outer)?;
            let bits = scalar::bitcast_convert(&mut self.b, from, fu, v, name)?;
            let j = self.b.let_(Op::Index(part));
            let j = if fty == Ty::I64 { j } else { self.b.cast(CastOp::Trunc, Ty::I64, fty, j) };
            let width = self.b.constant(Const::Int { ty: fty, bits: i64::from(tw) });
            let shift = self.b.binary(BinOp::Mul, fty, j, width);
            let shifted = self.b.binary(BinOp::LShr, fty, bits, shift);
            let narrow = self.b.cast(CastOp::Trunc, fty, tty, shifted);
            scalar::bitcast_convert(&mut self.b, tu, to, narrow, name)
        } else {
            let parts = i64::from(tw / fw);
            let mut acc: Option<ValueId> = None;
            for j in 0..parts {
                let mut sub = idx.to_vec();
                sub.push(IndexExpr::constant(j));
                let v = self.elem(f, operand, &sub)?;
                let bits = scalar::bitcast_convert(&mut self.b, from, fu, v, name)?;
                let wide = self.b.cast(CastOp::ZExt, fty, tty, bits);
                let amount = self.b.constant(Const::Int { ty: tty, bits: j * i64::from(fw) });
                let placed = self.b.binary(BinOp::Shl, tty, wide, amount);
                acc = Some(match acc {
                    None => placed,
                    Some(a) => self.b.binary(BinOp::Or, tty, a, placed),
                });
            }
            let bits = acc.ok_or_else(|| LowerError::invalid(name, "bitcast-convert without parts"))?;
            scalar::bitcast_convert(&mut self.b, tu, to, bits, name)
        }
    }
}
