//! dot (any dot_general) at one output element: loops over the contracting dimensions around
//! a multiply-add into an accumulator (f32 for f16/bf16/f32 results, rounded once at the end
//! like XLA:CPU; f64; integers wrap in the result type). f32/f64 dots whose operands view as
//! strided matrices call the runtime's GEMM instead (c64/c128 ones its complex GEMM, which
//! accumulates in the result type as Eigen's does for XLA:CPU), and so do f16/bf16 ones through
//! `tessera_rt_gemm_f32_mixed`, which reads half operands as they are and accumulates in f32;
//! a half result goes to f32 scratch and is rounded once (so a batched dot with a half result
//! keeps the loops: each batch index would round the whole scratch). Dots of 8- and 16-bit
//! integers call `tessera_rt_gemm_int`, which sums exactly and keeps the result type's low
//! bits, what the loops' wrapping arithmetic computes.

use tessera_hlo::ir::AttrList;
use tessera_hlo::{ElementType, InstId, Opcode};

use super::{half, index, scalar, types, Emitter, Frame};
use crate::kernel::{IndexExpr, MemType, Tail, Ty, ValueId};
use crate::LowerError;

pub(crate) struct DotDims {
    pub lhs_batch: Vec<usize>,
    pub rhs_batch: Vec<usize>,
    pub lhs_contract: Vec<usize>,
    pub rhs_contract: Vec<usize>,
    pub lhs_free: Vec<usize>,
    pub rhs_free: Vec<usize>,
}

pub(crate) fn dot_dims(
    inst: &tessera_hlo::Instruction,
    lhs_rank: usize,
    rhs_rank: usize,
) -> Result<DotDims, LowerError> {
    let get = |n: &str, rank: usize| -> Result<Vec<usize>, LowerError> {
        inst.attr_ints(n)
            .unwrap_or(&[])
            .iter()
            .map(|&d| {
                usize::try_from(d)
                    .ok()
                    .filter(|&d| d < rank)
                    .ok_or_else(|| LowerError::invalid(&inst.name, format!("{n} has dimension {d} out of range")))
            })
            .collect()
    };
    let lhs_batch = get("lhs_batch_dims", lhs_rank)?;
    let rhs_batch = get("rhs_batch_dims", rhs_rank)?;
    let lhs_contract = get("lhs_contracting_dims", lhs_rank)?;
    let rhs_contract = get("rhs_contracting_dims", rhs_rank)?;
    if lhs_batch.len() != rhs_batch.len() || lhs_contract.len() != rhs_contract.len() {
        return Err(LowerError::invalid(&inst.name, "dot dimension numbers do not pair up"));
    }
    let free = |rank: usize, a: &[usize], b: &[usize]| (0..rank).filter(|d| !a.contains(d) && !b.contains(d)).collect();
    Ok(DotDims {
        lhs_free: free(lhs_rank, &lhs_batch, &lhs_contract),
        rhs_free: free(rhs_rank, &rhs_batch, &rhs_contract),
        lhs_batch,
        rhs_batch,
        lhs_contract,
        rhs_contract,
    })
}

impl<'m> Emitter<'m> {
    pub(crate) fn elem_dot(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr]) -> Result<ValueId, LowerError> {
        let inst = f.comp.inst(id);
        let name = inst.name.clone();
        let (lhs, rhs) = (inst.operands[0], inst.operands[1]);
        let out_et = inst.shape.element_type();
        let lhs_et = f.comp.inst(lhs).shape.element_type();
        let rhs_et = f.comp.inst(rhs).shape.element_type();
        // f8/f4 results accumulate unrounded in f64 and round once, as the interpreter's dot does.
        let acc_et = if types::is_half(out_et) {
            ElementType::F32
        } else if types::is_minifloat(out_et) {
            ElementType::F64
        } else {
            out_et
        };
        let acc_ty = types::reg(acc_et, &name)?;
        let zero = match acc_ty {
            crate::kernel::Ty::F32 | crate::kernel::Ty::F64 => scalar::float_const(&mut self.b, acc_ty, 0.0),
            t => scalar::int_const(&mut self.b, t, 0),
        };
        let acc = self.b.local(acc_ty, zero);
        let frame = f.clone();
        let mut step = |em: &mut Emitter<'m>, li: &[IndexExpr], ri: &[IndexExpr]| {
            let a = em.elem(&frame, lhs, li)?;
            let b = em.elem(&frame, rhs, ri)?;
            let a = scalar::convert(&mut em.b, lhs_et, acc_et, a, &name)?;
            let b = scalar::convert(&mut em.b, rhs_et, acc_et, b, &name)?;
            let p = scalar::binary(&mut em.b, Opcode::Multiply, acc_et, a, b, &name)?;
            let cur = em.b.get_local(acc);
            let s = scalar::binary(&mut em.b, Opcode::Add, acc_et, cur, p, &name)?;
            em.b.set_local(acc, s);
            Ok(())
        };
        self.dot_loops(f, id, idx, &mut step)?;
        let v = self.b.get_local(acc);
        scalar::convert(&mut self.b, acc_et, out_et, v, &inst.name)
    }

    /// Loops over the contracting dimensions of dot `id` for output element `idx`, calling
    /// `step` with the lhs and rhs indices at each (not at all when one is empty).
    pub(crate) fn dot_loops(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
        step: &mut dyn FnMut(&mut Emitter<'m>, &[IndexExpr], &[IndexExpr]) -> Result<(), LowerError>,
    ) -> Result<(), LowerError> {
        let inst = f.comp.inst(id);
        let name = inst.name.clone();
        let (lhs, rhs) = (inst.operands[0], inst.operands[1]);
        let lhs_dims = f.comp.inst(lhs).shape.dims().to_vec();
        let rhs_dims = f.comp.inst(rhs).shape.dims().to_vec();
        let dd = dot_dims(inst, lhs_dims.len(), rhs_dims.len())?;
        let mut li = vec![IndexExpr::default(); lhs_dims.len()];
        let mut ri = vec![IndexExpr::default(); rhs_dims.len()];
        let nb = dd.lhs_batch.len();
        let nl = dd.lhs_free.len();
        if idx.len() != nb + nl + dd.rhs_free.len() {
            return Err(LowerError::invalid(&name, "dot result rank does not match its operands"));
        }
        for (i, (&l, &r)) in dd.lhs_batch.iter().zip(&dd.rhs_batch).enumerate() {
            li[l] = idx[i].clone();
            ri[r] = idx[i].clone();
        }
        for (j, &l) in dd.lhs_free.iter().enumerate() {
            li[l] = idx[nb + j].clone();
        }
        for (j, &r) in dd.rhs_free.iter().enumerate() {
            ri[r] = idx[nb + nl + j].clone();
        }
        if dd.lhs_contract.iter().all(|&d| lhs_dims[d] > 0) {
            let mark = self.mark();
            let mut opened = 0;
            for (&l, &r) in dd.lhs_contract.iter().zip(&dd.rhs_contract) {
                let e = if lhs_dims[l] == 1 {
                    IndexExpr::constant(0)
                } else {
                    opened += 1;
                    IndexExpr::var(self.open_loop(0, lhs_dims[l]), 1)
                };
                li[l] = e.clone();
                ri[r] = e;
            }
            let r = step(self, &li, &ri);
            for _ in 0..opened {
                self.b.end_loop();
            }
            self.forget_since(mark);
            r?;
        }
        Ok(())
    }

    /// Emits the whole output of dot `id` as runtime GEMM calls when its operands and result
    /// view as strided matrices; false when it does not qualify (the caller emits loops).
    pub(crate) fn try_gemm(&mut self, id: InstId) -> Result<bool, LowerError> {
        let inst = self.comp.inst(id);
        let et = |o: usize| self.comp.inst(inst.operands[o]).shape.element_type();
        if inst.operands.len() != 2 || !gemm_element_types(et(0), et(1), inst.shape.element_type()) {
            return Ok(false);
        }
        // Which call takes the product follows from the types alone.
        let out_et = inst.shape.element_type();
        let int = int_type_code(out_et).is_some();
        let half = types::is_half(et(0)) || types::is_half(et(1));
        let f32 = out_et != ElementType::F64;
        let Some((ln, rn)) = self.parameter_operands(id) else { return Ok(false) };
        let complex = out_et.is_complex();
        let func = match (int, half, f32) {
            _ if complex => {
                if out_et == ElementType::C64 {
                    "tessera_rt_gemm_c64"
                } else {
                    "tessera_rt_gemm_c128"
                }
            }
            (true, ..) => "tessera_rt_gemm_int",
            (false, true, _) => "tessera_rt_gemm_f32_mixed",
            (false, false, true) => "tessera_rt_gemm_f32",
            (false, false, false) => "tessera_rt_gemm_f64",
        };
        let (lp, rp) = (&self.params[ln], &self.params[rn]);
        let out = &self.outputs[0];
        let (Some(ls), Some(rs), Some(os)) =
            (super::plain_strides(&lp.map), super::plain_strides(&rp.map), super::plain_strides(&out.map))
        else {
            return Ok(false);
        };
        let (ld, rd, od) = (lp.map.dims().to_vec(), rp.map.dims().to_vec(), out.map.dims().to_vec());
        let dd = dot_dims(inst, ld.len(), rd.len())?;
        let nb = dd.lhs_batch.len();
        let (nl, nr) = (dd.lhs_free.len(), dd.rhs_free.len());
        let out_m: Vec<usize> = (nb..nb + nl).collect();
        let out_n: Vec<usize> = (nb + nl..nb + nl + nr).collect();
        let group = |dims: &[usize], sizes: &[i64], strides: &[i64]| collapse(dims, sizes, strides);
        let (Some((m, a_rs)), Some((k, a_cs))) = (group(&dd.lhs_free, &ld, &ls), group(&dd.lhs_contract, &ld, &ls))
        else {
            return Ok(false);
        };
        let (Some((k2, b_rs)), Some((n, b_cs))) = (group(&dd.rhs_contract, &rd, &rs), group(&dd.rhs_free, &rd, &rs))
        else {
            return Ok(false);
        };
        let (Some((m2, c_rs)), Some((n2, c_cs))) = (group(&out_m, &od, &os), group(&out_n, &od, &os)) else {
            return Ok(false);
        };
        // Whatever its size: as loops, even a 4x4x4 product cost LLVM 10-25 ms of unrolling and
        // vectorizing (more than XLA:CPU's whole compile of such a module) and ran scalar on
        // Cranelift, where the runtime's small-product tiles take 0.1-0.3 us up to 16x16x16.
        if k != k2 || m != m2 || n != n2 || m == 0 || n == 0 || k == 0 {
            return Ok(false);
        }
        // The contracting groups must pair element for element: same sizes in the same order.
        let ksizes = |ds: &[usize], sz: &[i64]| ds.iter().map(|&d| sz[d]).filter(|&x| x != 1).collect::<Vec<_>>();
        if ksizes(&dd.lhs_contract, &ld) != ksizes(&dd.rhs_contract, &rd) {
            return Ok(false);
        }
        let (abuf, bbuf, mut cbuf) = (lp.buf, rp.buf, out.buf);
        let type_code = |et: ElementType| match et {
            _ if int => int_type_code(et).unwrap_or(0),
            ElementType::BF16 => 1,
            ElementType::F16 => 2,
            _ => 0,
        };
        let (a_type, b_type, c_type) = (type_code(lp.et), type_code(rp.et), type_code(out.et));
        let batch: Vec<(i64, i64, i64, i64)> =
            (0..nb).map(|i| (od[i], ls[dd.lhs_batch[i]], rs[dd.rhs_batch[i]], os[i])).filter(|b| b.0 != 1).collect();
        let half_out =
            half.then(|| (out.et, out.buf, out.map.physical_element_count())).filter(|h| types::is_half(h.0));
        // A half result is computed into f32 scratch (laid out as the result) and rounded once:
        // in one pass after the call, or with batches, each batch's block right after its
        // call, so grid indices never round one another's blocks.
        if batch.iter().any(|b| b.0 == 0) {
            return Ok(true);
        }
        if let Some((_, _, len)) = half_out {
            let name = self.comp.inst(id).name.clone();
            cbuf = self.b.buffer(format!("{name}.out_f32"), MemType::Scalar(Ty::F32), len, true);
        }
        let mut bases = (index::constant(0), index::constant(0), index::constant(0));
        let mut opened = 0;
        for (i, &(extent, sa, sb, sc)) in batch.iter().enumerate() {
            let v = if i == 0 {
                self.grid_extent = extent;
                let g = self.b.grid_var();
                self.bounds.set_var(g, 0, extent - 1);
                g
            } else {
                opened += 1;
                self.open_loop(0, extent)
            };
            let iv = index::var(v);
            bases.0 = index::add(&bases.0, &index::scale(&iv, sa));
            bases.1 = index::add(&bases.1, &index::scale(&iv, sb));
            bases.2 = index::add(&bases.2, &index::scale(&iv, sc));
        }
        // A complex buffer holds (real, imaginary) float pairs: its matrices' elements start at
        // twice their offsets (the call's strides count complex elements).
        if complex {
            bases = (index::scale(&bases.0, 2), index::scale(&bases.1, 2), index::scale(&bases.2, 2));
        }
        use crate::kernel::CallArg as A;
        let a = [A::Ptr { buf: abuf, index: bases.0 }, A::I64(a_rs), A::I64(a_cs)];
        let b = [A::Ptr { buf: bbuf, index: bases.1 }, A::I64(b_rs), A::I64(b_cs)];
        let mut args = vec![A::I64(m), A::I64(n), A::I64(k)];
        args.extend(a);
        if half || int {
            args.push(A::I64(a_type));
        }
        args.extend(b);
        if half || int {
            args.push(A::I64(b_type));
        }
        args.extend([A::Ptr { buf: cbuf, index: bases.2.clone() }, A::I64(c_rs), A::I64(c_cs)]);
        if int {
            args.push(A::I64(c_type));
        }
        self.b.call(func, args);
        if let Some((et, obuf, _)) = half_out.filter(|_| !batch.is_empty()) {
            let i = self.open_loop(0, m);
            let j = self.open_loop(0, n);
            let within = index::add(&index::scale(&index::var(i), c_rs), &index::scale(&index::var(j), c_cs));
            let at = index::add(&bases.2, &within);
            let x = self.b.load(cbuf, at.clone());
            let h = if et == ElementType::BF16 {
                half::f32_to_bf16(&mut self.b, x)
            } else {
                half::f32_to_f16(&mut self.b, x)
            };
            self.b.store(obuf, at, h);
            if c_cs == 1 {
                self.end_conversion_loop(n);
            } else {
                self.b.end_loop();
            }
            self.b.end_loop();
        }
        for _ in 0..opened {
            self.b.end_loop();
        }
        if let Some((et, obuf, len)) = half_out.filter(|_| batch.is_empty()) {
            // The f32 product rounds once to the half result, as the looped dot does.
            let v = self.open_loop(0, len);
            let x = self.b.load(cbuf, index::var(v));
            let h = if et == ElementType::BF16 {
                half::f32_to_bf16(&mut self.b, x)
            } else {
                half::f32_to_f16(&mut self.b, x)
            };
            self.b.store(obuf, index::var(v), h);
            self.end_conversion_loop(len);
        }
        Ok(true)
    }

    /// The parameter indices of dot `id`'s operands, when both are kernel parameters (GEMM
    /// reads buffers, not values computed in the kernel).
    fn parameter_operands(&self, id: InstId) -> Option<(usize, usize)> {
        let [l, r] = self.comp.inst(id).operands.as_slice() else { return None };
        let param = |o: InstId| {
            let op = self.comp.inst(o);
            let n = usize::try_from(op.parameter_number()?).ok()?;
            (op.opcode == Opcode::Parameter && n < self.params.len()).then_some(n)
        };
        Some((param(*l)?, param(*r)?))
    }

    fn end_conversion_loop(&mut self, len: i64) {
        let width = super::nest::vector_width(16, len);
        let tail = if len % i64::from(width) == 0 { Tail::None } else { Tail::Peel };
        self.b.end_loop_vectorized(width, tail);
    }
}

/// Whether a dot of these operand and result types runs as GEMM calls when its operands
/// are kernel parameters that view as matrices: f32, f64, c64 or c128 throughout; f32 products of f32,
/// bf16 and f16 operands, at least one half, with an f32, bf16 or f16 result; or 8- and
/// 16-bit integer operands with any integer result of 8 to 64 bits.
pub(crate) fn gemm_element_types(lhs: ElementType, rhs: ElementType, out: ElementType) -> bool {
    let mixed = |et: ElementType| matches!(et, ElementType::F32 | ElementType::BF16 | ElementType::F16);
    let narrow = |et: ElementType| int_type_code(et).is_some_and(|c| c <= 4);
    (matches!(out, ElementType::F32 | ElementType::F64 | ElementType::C64 | ElementType::C128)
        && lhs == out
        && rhs == out)
        || (mixed(lhs) && mixed(rhs) && mixed(out) && (types::is_half(lhs) || types::is_half(rhs)))
        || (narrow(lhs) && narrow(rhs) && int_type_code(out).is_some())
}

/// `tessera_rt_gemm_int`'s code for an integer type of 8 to 64 bits (the operands take the
/// codes up to 4, the 8- and 16-bit types).
fn int_type_code(et: ElementType) -> Option<i64> {
    use ElementType::*;
    Some(match et {
        S8 => 1,
        U8 => 2,
        S16 => 3,
        U16 => 4,
        S32 => 5,
        U32 => 6,
        S64 => 7,
        U64 => 8,
        _ => return None,
    })
}

/// The (count, element stride) of dimensions `dims` (major first) collapsed into one, when
/// their strides nest (each dimension's stride is the next one's times its size).
pub(crate) fn collapse(dims: &[usize], sizes: &[i64], strides: &[i64]) -> Option<(i64, i64)> {
    let live: Vec<usize> = dims.iter().copied().filter(|&d| sizes[d] != 1).collect();
    let count = live.iter().map(|&d| sizes[d]).product();
    let Some(&last) = live.last() else { return Some((1, 1)) };
    for w in live.windows(2) {
        if strides[w[0]] != strides[w[1]] * sizes[w[1]] {
            return None;
        }
    }
    Some((count, strides[last]))
}
