//! Complex numbers (c64, c128) in kernels. The kernel IR has no complex type: a complex
//! element is a pair of float registers (real, imaginary), and a complex buffer holds the
//! parts interleaved: the element at physical offset `p` (layouts count complex elements)
//! has its real part in float slot `2p` and its imaginary part in `2p + 1`, so the kernel
//! buffer has twice as many float slots as the layout has elements.
//!
//! Element generation stays one value per element: each part of a complex instruction is
//! generated in a *part frame*, a twin of the frame the instruction lives in. Data-movement
//! ops (broadcast, transpose, reshape, slice, pad, concatenate, select, dynamic slices, gather) need
//! nothing complex: they run their ordinary code in a part frame on the part's register type.
//! Everything else computes both parts at once ([`Emitter::complex_pair`]) and leaves the
//! other part in the element cache under the twin frame, so a pair is computed once.
//!
//! Arithmetic follows the reference interpreter (hlo/src/eval/complex.rs) formula for formula,
//! in f64 for both types, rounding c64 results once per instruction as it does.

use std::collections::HashMap;

use tessera_hlo::ir::{AttrList, ComparisonDirection, Payload};
use tessera_hlo::{Computation, ElementType, InstId, Opcode};

use super::{scalar, types, Emitter, Frame, Params};
use crate::kernel::{BinOp, CastOp, CmpOp, Const, IndexExpr, KernelBuilder, MathFn, Ty, UnOp, ValueId};
use crate::LowerError;

/// (real, imaginary) registers of one complex element.
pub(crate) type Pair = (ValueId, ValueId);

/// The part frames made so far: each one's base frame and part, and each base's twins.
#[derive(Default)]
pub(crate) struct PartFrames<'m> {
    base: HashMap<usize, (Frame<'m>, usize)>,
    twin: HashMap<(usize, usize), usize>,
}

/// How the ordinary element code goes on for an instruction (see [`Emitter::complex_route`]).
pub(crate) enum Route {
    /// The element is this value: nothing more to do.
    Value(ValueId),
    /// A data-movement op on one part: run the ordinary code on this register type.
    Part(Ty),
    /// No complex number involved.
    Real,
}

/// Ops whose element is some operand element (or a choice between them): in a part frame
/// they move that part.
fn moves_data(op: Opcode) -> bool {
    use Opcode as O;
    matches!(
        op,
        O::Broadcast
            | O::Transpose
            | O::Reshape
            | O::Bitcast
            | O::Slice
            | O::Reverse
            | O::Copy
            | O::Pad
            | O::Concatenate
            | O::DynamicSlice
            | O::DynamicUpdateSlice
            | O::Gather
            | O::Select
    )
}

fn is_complex(c: &Computation, id: InstId) -> bool {
    c.inst(id).shape.as_array().is_some_and(|a| a.element_type.is_complex())
}

fn unsupported(inst: &tessera_hlo::Instruction, what: &str) -> LowerError {
    LowerError::unsupported(&inst.name, format!("{} {what}", inst.opcode.name()))
}

fn part_of(et: ElementType, inst: &str) -> Result<(ElementType, Ty), LowerError> {
    types::complex_part(et).ok_or_else(|| LowerError::invalid(inst, format!("{} is not a complex type", et.name())))
}

impl<'m> Emitter<'m> {
    /// The hook of element generation (`elem`): decides how instruction `id` of frame `f`,
    /// with result element type `et`, involves complex numbers.
    pub(crate) fn complex_route(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
        et: ElementType,
    ) -> Result<Route, LowerError> {
        let inst = f.comp.inst(id);
        if let Some((base, part)) = self.parts.base.get(&f.id).cloned() {
            if !et.is_complex() {
                // Real values are the same in both parts: generate them once, in the base.
                return Ok(Route::Value(self.elem(&base, id, idx)?));
            }
            if moves_data(inst.opcode) {
                return Ok(Route::Part(part_of(et, &inst.name)?.1));
            }
            let pair = self.complex_pair(&base, id, idx)?;
            let twin = self.part_frame(&base, 1 - part);
            let key = (twin.id, id, idx.to_vec());
            if !self.cache.contains_key(&key) {
                self.cache_log.push(key.clone());
                self.cache.insert(key, if part == 0 { pair.1 } else { pair.0 });
            }
            return Ok(Route::Value(if part == 0 { pair.0 } else { pair.1 }));
        }
        if et.is_complex() {
            // Only the complex code asks for complex elements (through part frames); an op
            // reaching one otherwise does not handle complex operands.
            return Err(LowerError::unsupported(&inst.name, format!("{} of complex numbers", inst.opcode.name())));
        }
        let reads_complex = inst.operands.iter().any(|&o| is_complex(f.comp, o));
        if reads_complex || matches!(inst.opcode, Opcode::Real | Opcode::Imag) {
            return Ok(Route::Value(self.real_from_complex(f, id, idx)?));
        }
        Ok(Route::Real)
    }

    /// The twin of frame `base` that generates part `part` (0 real, 1 imaginary).
    fn part_frame(&mut self, base: &Frame<'m>, part: usize) -> Frame<'m> {
        let id = match self.parts.twin.get(&(base.id, part)) {
            Some(&id) => id,
            None => {
                self.next_frame += 1;
                let id = self.next_frame;
                self.parts.twin.insert((base.id, part), id);
                self.parts.base.insert(id, (base.clone(), part));
                id
            }
        };
        Frame { comp: base.comp, id, params: base.params.clone() }
    }

    /// Element `idx` of complex instruction `id` of frame `f` as (real, imaginary) registers of
    /// the part type.
    pub(crate) fn celem(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr]) -> Result<Pair, LowerError> {
        let re = self.part_frame(f, 0);
        let im = self.part_frame(f, 1);
        Ok((self.elem(&re, id, idx)?, self.elem(&im, id, idx)?))
    }

    /// Stores element `idx` of complex root `id` as output `o`'s element at `addr`.
    pub(crate) fn store_complex(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
        o: usize,
        addr: &IndexExpr,
    ) -> Result<(), LowerError> {
        let (re, im) = self.celem(f, id, idx)?;
        let buf = self.outputs[o].buf;
        let at = super::index::scale(addr, 2);
        self.b.store(buf, at.clone(), re);
        self.b.store(buf, super::index::add_const(&at, 1), im);
        Ok(())
    }

    /// An operand's element as a pair (real operands get a zero imaginary part), rank-0
    /// operands at the empty index as elementwise ops broadcast them.
    fn operand_pair(&mut self, f: &Frame<'m>, o: InstId, idx: &[IndexExpr]) -> Result<Pair, LowerError> {
        let oi: &[IndexExpr] = if f.comp.inst(o).shape.rank() == 0 { &[] } else { idx };
        if is_complex(f.comp, o) {
            return self.celem(f, o, oi);
        }
        let inst = f.comp.inst(o);
        let et = inst.shape.element_type();
        let ty = types::reg(et, &inst.name)?;
        if !ty.is_float() {
            return Err(LowerError::invalid(&inst.name, "a complex op's operand is neither complex nor float"));
        }
        let v = self.elem(f, o, oi)?;
        let zero = scalar::float_const(&mut self.b, ty, 0.0);
        Ok((v, zero))
    }

    /// An operand pair widened to f64 (where complex arithmetic runs).
    fn wide_operand(&mut self, f: &Frame<'m>, o: InstId, idx: &[IndexExpr]) -> Result<Pair, LowerError> {
        let inst = f.comp.inst(o);
        let et = inst.shape.element_type();
        let ty = match types::complex_part(et) {
            Some((_, t)) => t,
            None => types::reg(et, &inst.name)?,
        };
        let (re, im) = self.operand_pair(f, o, idx)?;
        Ok((widen(&mut self.b, ty, re), widen(&mut self.b, ty, im)))
    }

    /// Both parts of a complex instruction that is not pure data movement, in the part type.
    fn complex_pair(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr]) -> Result<Pair, LowerError> {
        use Opcode as O;
        let inst = f.comp.inst(id);
        let name = inst.name.as_str();
        let et = inst.shape.element_type();
        let (_, pty) = part_of(et, name)?;
        let narrow2 = |b: &mut KernelBuilder, (re, im): Pair| (narrow(b, pty, re), narrow(b, pty, im));
        match inst.opcode {
            O::Parameter => {
                let n = inst.parameter_number().and_then(|n| usize::try_from(n).ok());
                let bad = || LowerError::invalid(name, "bad parameter");
                match &f.params {
                    Params::Buffers => {
                        let p = n.and_then(|n| self.params.get(n)).ok_or_else(bad)?;
                        let (buf, map) = (p.buf, p.map.clone());
                        let at = super::index::scale(&self.layout_offset(&map, idx), 2);
                        let re = self.b.load(buf, at.clone());
                        let im = self.b.load(buf, super::index::add_const(&at, 1));
                        Ok((re, im))
                    }
                    // A complex parameter's scalars: its real and imaginary parts.
                    Params::Scalars(s) => {
                        let at = super::scalar_offset(f.comp, n.ok_or_else(bad)?);
                        match (s.get(at), s.get(at + 1)) {
                            (Some(&re), Some(&im)) => Ok((re, im)),
                            _ => Err(bad()),
                        }
                    }
                    Params::Caller(caller, operands) => {
                        let o = n.and_then(|n| operands.get(n).copied()).ok_or_else(bad)?;
                        let caller = (**caller).clone();
                        self.celem(&caller, o, idx)
                    }
                }
            }
            O::Constant => self.complex_constant(f, id, pty),
            O::Iota => {
                let d = inst.attr_int("iota_dimension").and_then(|d| usize::try_from(d).ok());
                let i = d.and_then(|d| idx.get(d)).ok_or_else(|| LowerError::invalid(name, "bad iota dimension"))?;
                let i = self.b.let_(crate::kernel::Op::Index(i.clone()));
                let re = self.b.cast(CastOp::SIToFP, Ty::I64, Ty::F64, i);
                let re = narrow(&mut self.b, pty, re);
                let im = scalar::float_const(&mut self.b, pty, 0.0);
                Ok((re, im))
            }
            O::Complex => {
                let [a, b] = inst.operands[..] else {
                    return Err(LowerError::invalid(name, "complex needs two operands"));
                };
                let re = self.operand_pair(f, a, idx)?.0;
                let im = self.operand_pair(f, b, idx)?.0;
                Ok((re, im))
            }
            O::Convert => {
                let o = inst.operands[0];
                let from = f.comp.inst(o).shape.element_type();
                if from.is_complex() {
                    let w = self.wide_operand(f, o, idx)?;
                    return Ok(narrow2(&mut self.b, w));
                }
                // Real to complex goes through f64, as the interpreter converts.
                let oi: &[IndexExpr] = if f.comp.inst(o).shape.rank() == 0 { &[] } else { idx };
                let v = self.elem(f, o, oi)?;
                let w = scalar::convert(&mut self.b, from, ElementType::F64, v, name)?;
                let re = narrow(&mut self.b, pty, w);
                let im = scalar::float_const(&mut self.b, pty, 0.0);
                Ok((re, im))
            }
            O::Call => {
                let callee = self.call_frame(f, id)?;
                let root = callee.comp.root;
                self.celem(&callee, root, idx)
            }
            O::GetTupleElement if f.comp.inst(inst.operands[0]).opcode == O::Call => {
                let callee = self.call_frame(f, inst.operands[0])?;
                let root = callee.comp.root_inst();
                let i = inst.attr_int("index").and_then(|i| usize::try_from(i).ok());
                match (root.opcode, i.and_then(|i| root.operands.get(i))) {
                    (O::Tuple, Some(&o)) => self.celem(&callee, o, idx),
                    _ => Err(unsupported(inst, "of a call without a tuple root holding that element")),
                }
            }
            O::Reduce | O::ReduceWindow => self.complex_reduce(f, id, idx),
            O::Dot => {
                let w = self.complex_dot(f, id, idx)?;
                Ok(narrow2(&mut self.b, w))
            }
            O::Negate => {
                let (re, im) = self.operand_pair(f, inst.operands[0], idx)?;
                Ok((self.b.unary(UnOp::Neg, pty, re), self.b.unary(UnOp::Neg, pty, im)))
            }
            op if op.is_elementwise_binary() => {
                let a = self.wide_operand(f, inst.operands[0], idx)?;
                let b = self.wide_operand(f, inst.operands[1], idx)?;
                let mut m = Math(&mut self.b);
                let r = match op {
                    O::Add => (m.add(a.0, b.0), m.add(a.1, b.1)),
                    O::Subtract => (m.sub(a.0, b.0), m.sub(a.1, b.1)),
                    O::Multiply => m.cmul(a, b),
                    O::Divide => m.cdiv(a, b),
                    O::Power => m.cpow(a, b),
                    _ => return Err(unsupported(inst, "on complex numbers")),
                };
                Ok(narrow2(&mut self.b, r))
            }
            op if op.is_elementwise_unary() => {
                let a = self.wide_operand(f, inst.operands[0], idx)?;
                let mut m = Math(&mut self.b);
                let r = match op {
                    O::Exp => m.cexp(a),
                    O::Log => m.clog(a),
                    O::Sqrt => m.csqrt(a),
                    O::Rsqrt => {
                        let s = m.csqrt(a);
                        let (one, zero) = (m.c(1.0), m.c(0.0));
                        m.cdiv((one, zero), s)
                    }
                    O::Expm1 => {
                        let e = m.cexp(a);
                        let one = m.c(1.0);
                        (m.sub(e.0, one), e.1)
                    }
                    O::Log1p => {
                        let one = m.c(1.0);
                        let re = m.add(a.0, one);
                        m.clog((re, a.1))
                    }
                    O::Sign => m.csign(a),
                    O::Sin => {
                        let (s, c) = (m.call(MathFn::Sin, &[a.0]), m.call(MathFn::Cos, &[a.0]));
                        let (ch, sh) = (m.call(MathFn::Cosh, &[a.1]), m.call(MathFn::Sinh, &[a.1]));
                        (m.mul(s, ch), m.mul(c, sh))
                    }
                    O::Cos => {
                        let (s, c) = (m.call(MathFn::Sin, &[a.0]), m.call(MathFn::Cos, &[a.0]));
                        let (ch, sh) = (m.call(MathFn::Cosh, &[a.1]), m.call(MathFn::Sinh, &[a.1]));
                        let ns = m.neg(s);
                        (m.mul(c, ch), m.mul(ns, sh))
                    }
                    O::Tanh => {
                        let e = m.cexp(a);
                        let (n0, n1) = (m.neg(a.0), m.neg(a.1));
                        let r = m.cexp((n0, n1));
                        let num = (m.sub(e.0, r.0), m.sub(e.1, r.1));
                        let den = (m.add(e.0, r.0), m.add(e.1, r.1));
                        m.cdiv(num, den)
                    }
                    _ => return Err(unsupported(inst, "on complex numbers")),
                };
                Ok(narrow2(&mut self.b, r))
            }
            O::Fft => Err(unsupported(inst, "inside a fused computation (an fft is a kernel of its own)")),
            _ => Err(unsupported(inst, "on complex numbers")),
        }
    }

    /// Real-valued instructions with complex operands: real, imag, abs, compare EQ/NE, and
    /// convert to a real type (which keeps the real part).
    fn real_from_complex(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr]) -> Result<ValueId, LowerError> {
        use Opcode as O;
        let inst = f.comp.inst(id);
        let name = inst.name.as_str();
        let et = inst.shape.element_type();
        let ty = types::reg(et, name)?;
        match inst.opcode {
            O::Real | O::Imag => {
                let (re, im) = self.operand_pair(f, inst.operands[0], idx)?;
                Ok(if inst.opcode == O::Real { re } else { im })
            }
            O::Abs => {
                let (re, im) = self.wide_operand(f, inst.operands[0], idx)?;
                let mut m = Math(&mut self.b);
                let h = if ty == Ty::F32 {
                    // f32 parts: their squares are exact in f64 and cannot overflow or
                    // underflow there, so the root of their sum is hypot within an f64 ulp or
                    // two, which rounds to the same f32 but where it lies that close to a
                    // rounding boundary; and it vectorizes, where a `hypot` call per element
                    // cost 23 ns (an rfft's magnitudes, f32[256,2049]: 12 ms). An infinite
                    // part makes it infinite, as hypot does, even beside a NaN.
                    let (rr, ii) = (m.mul(re, re), m.mul(im, im));
                    let sum = m.add(rr, ii);
                    let root = m.0.unary(UnOp::Sqrt, Ty::F64, sum);
                    let (ar, ai) = (m.abs(re), m.abs(im));
                    let inf = m.c(f64::INFINITY);
                    let (r_inf, i_inf) = (m.cmp(CmpOp::FEq, ar, inf), m.cmp(CmpOp::FEq, ai, inf));
                    let any_inf = m.0.binary(BinOp::Or, Ty::Pred, r_inf, i_inf);
                    m.sel(any_inf, inf, root)
                } else {
                    m.call(MathFn::Hypot, &[re, im])
                };
                Ok(narrow(&mut self.b, ty, h))
            }
            O::Compare => {
                let eq = match inst.attr_word("direction").and_then(ComparisonDirection::parse) {
                    Some(ComparisonDirection::Eq) => true,
                    Some(ComparisonDirection::Ne) => false,
                    _ => return Err(unsupported(inst, "on complex numbers other than EQ and NE")),
                };
                let o = inst.operands[0];
                let (_, pty) = part_of(f.comp.inst(o).shape.element_type(), name)?;
                let a = self.operand_pair(f, o, idx)?;
                let b = self.operand_pair(f, inst.operands[1], idx)?;
                // IEEE per part: a NaN part makes the numbers unequal.
                let (op, join) = if eq { (CmpOp::FEq, BinOp::And) } else { (CmpOp::FNe, BinOp::Or) };
                let re = self.b.cmp(op, pty, a.0, b.0);
                let im = self.b.cmp(op, pty, a.1, b.1);
                Ok(self.b.binary(join, Ty::Pred, re, im))
            }
            O::Convert => {
                let o = inst.operands[0];
                let (part, _) = part_of(f.comp.inst(o).shape.element_type(), name)?;
                let (re, _) = self.operand_pair(f, o, idx)?;
                scalar::convert(&mut self.b, part, et, re, name)
            }
            _ => Err(unsupported(inst, "with complex operands")),
        }
    }

    /// A complex constant with one value (array constants reach kernels as parameters).
    fn complex_constant(&mut self, f: &Frame<'m>, id: InstId, pty: Ty) -> Result<Pair, LowerError> {
        let inst = f.comp.inst(id);
        let Payload::Constant(lit) = &inst.payload else {
            return Err(LowerError::invalid(&inst.name, "constant without a value"));
        };
        let first = lit.get_bits(0).unwrap_or(0);
        if (1..lit.element_count()).any(|i| lit.get_bits(i) != Some(first)) {
            return Err(LowerError::unsupported(
                &inst.name,
                "an array constant inside a fused computation (fusion passes them as parameters)",
            ));
        }
        let (re, im) = match pty {
            Ty::F32 => (Const::F32(first as u32), Const::F32((first >> 32) as u32)),
            _ => (Const::F64(first as u64), Const::F64((first >> 64) as u64)),
        };
        Ok((self.b.constant(re), self.b.constant(im)))
    }

    /// reduce and reduce-window on complex numbers: the reducer inlined on (real, imaginary)
    /// accumulators, its result rounded to the element type at every step as the
    /// interpreter's is.
    fn complex_reduce(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr]) -> Result<Pair, LowerError> {
        let inst = f.comp.inst(id);
        let name = inst.name.clone();
        let [input, init] = inst.operands[..] else {
            return Err(unsupported(inst, "of several complex inputs"));
        };
        let window = match inst.opcode {
            Opcode::ReduceWindow => {
                let in_dims = f.comp.inst(input).shape.dims().to_vec();
                if idx.len() != in_dims.len() {
                    return Err(LowerError::invalid(&name, "reduce-window operand and result ranks differ"));
                }
                Some((super::window::window_dims(inst, &in_dims)?, in_dims))
            }
            _ => None,
        };
        let module = self.module;
        let reducer = inst
            .called("to_apply")
            .and_then(|c| module.get(c))
            .ok_or_else(|| LowerError::invalid(&name, "reduce without its reducer"))?;
        let params = reducer.parameters();
        if params.len() != 2 || !params.iter().all(|&p| is_complex(reducer, p)) {
            return Err(LowerError::invalid(&name, "a complex reducer takes two complex parameters"));
        }
        if !is_complex(reducer, reducer.root) {
            return Err(unsupported(inst, "whose reducer does not return one complex value"));
        }
        let (_, pty) = part_of(inst.shape.element_type(), &name)?;
        let (i0, i1) = self.celem(f, init, &[])?;
        let (re, im) = (self.b.local(pty, i0), self.b.local(pty, i1));
        let frame = f.clone();
        let mut step = |em: &mut Emitter<'m>, full: &[IndexExpr]| {
            let (x0, x1) = em.celem(&frame, input, full)?;
            let (a0, a1) = (em.b.get_local(re), em.b.get_local(im));
            let rf = em.new_frame(reducer, vec![a0, a1, x0, x1]);
            let (r0, r1) = em.celem(&rf, reducer.root, &[])?;
            em.b.set_local(re, r0);
            em.b.set_local(im, r1);
            Ok(())
        };
        match &window {
            Some((window, in_dims)) => self.for_each_in_window(idx, window, in_dims, &mut step)?,
            None => self.reduce_nest(f, id, idx, &mut step)?,
        }
        Ok((self.b.get_local(re), self.b.get_local(im)))
    }

    /// dot with complex operands as the interpreter computes it: four real dots in f64
    /// (ac, bd, ad, bc), combined at the end. The result stays in f64.
    fn complex_dot(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr]) -> Result<Pair, LowerError> {
        let inst = f.comp.inst(id);
        let (lhs, rhs) = (inst.operands[0], inst.operands[1]);
        let zero = scalar::float_const(&mut self.b, Ty::F64, 0.0);
        let acc: Vec<_> = (0..4).map(|_| self.b.local(Ty::F64, zero)).collect();
        let frame = f.clone();
        let accs = acc.clone();
        let mut step = |em: &mut Emitter<'m>, li: &[IndexExpr], ri: &[IndexExpr]| {
            let (a, b) = em.wide_operand(&frame, lhs, li)?;
            let (c, d) = em.wide_operand(&frame, rhs, ri)?;
            for (&l, (x, y)) in accs.iter().zip([(a, c), (b, d), (a, d), (b, c)]) {
                let p = em.b.binary(BinOp::Mul, Ty::F64, x, y);
                let cur = em.b.get_local(l);
                let s = em.b.binary(BinOp::Add, Ty::F64, cur, p);
                em.b.set_local(l, s);
            }
            Ok(())
        };
        self.dot_loops(f, id, idx, &mut step)?;
        let v: Vec<ValueId> = acc.iter().map(|&l| self.b.get_local(l)).collect();
        let re = self.b.binary(BinOp::Sub, Ty::F64, v[0], v[1]);
        let im = self.b.binary(BinOp::Add, Ty::F64, v[2], v[3]);
        Ok((re, im))
    }
}

/// A part register as f64.
pub(crate) fn widen(b: &mut KernelBuilder, ty: Ty, v: ValueId) -> ValueId {
    if ty == Ty::F32 {
        b.cast(CastOp::FPExt, Ty::F32, Ty::F64, v)
    } else {
        v
    }
}

/// An f64 result rounded to a part register of type `ty`.
pub(crate) fn narrow(b: &mut KernelBuilder, ty: Ty, v: ValueId) -> ValueId {
    if ty == Ty::F32 {
        b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, v)
    } else {
        v
    }
}

/// f64 arithmetic, spelled like the interpreter's formulas. Branches become selects: every
/// candidate is computed and the interpreter's condition picks one (float ops never trap).
struct Math<'b>(&'b mut KernelBuilder);

impl Math<'_> {
    fn c(&mut self, v: f64) -> ValueId {
        scalar::float_const(self.0, Ty::F64, v)
    }
    fn bin(&mut self, op: BinOp, a: ValueId, b: ValueId) -> ValueId {
        self.0.binary(op, Ty::F64, a, b)
    }
    fn add(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.bin(BinOp::Add, a, b)
    }
    fn sub(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.bin(BinOp::Sub, a, b)
    }
    fn mul(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.bin(BinOp::Mul, a, b)
    }
    fn div(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.bin(BinOp::FDiv, a, b)
    }
    fn neg(&mut self, a: ValueId) -> ValueId {
        self.0.unary(UnOp::Neg, Ty::F64, a)
    }
    fn abs(&mut self, a: ValueId) -> ValueId {
        self.0.unary(UnOp::Abs, Ty::F64, a)
    }
    fn call(&mut self, f: MathFn, args: &[ValueId]) -> ValueId {
        self.0.math(f, Ty::F64, args.to_vec())
    }
    fn cmp(&mut self, op: CmpOp, a: ValueId, b: ValueId) -> ValueId {
        self.0.cmp(op, Ty::F64, a, b)
    }
    fn is_zero(&mut self, a: ValueId) -> ValueId {
        let zero = self.c(0.0);
        self.cmp(CmpOp::FEq, a, zero)
    }
    fn and(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.0.binary(BinOp::And, Ty::Pred, a, b)
    }
    fn sel(&mut self, c: ValueId, a: ValueId, b: ValueId) -> ValueId {
        self.0.select(Ty::F64, c, a, b)
    }
    fn sel2(&mut self, c: ValueId, a: Pair, b: Pair) -> Pair {
        (self.sel(c, a.0, b.0), self.sel(c, a.1, b.1))
    }
    /// `mag` with the sign bit of `sign`.
    fn copysign(&mut self, mag: ValueId, sign: ValueId) -> ValueId {
        let b = &mut *self.0;
        let m = b.cast(CastOp::Bitcast, Ty::F64, Ty::I64, mag);
        let s = b.cast(CastOp::Bitcast, Ty::F64, Ty::I64, sign);
        let low = b.constant(Const::Int { ty: Ty::I64, bits: i64::MAX });
        let high = b.constant(Const::Int { ty: Ty::I64, bits: i64::MIN });
        let m = b.binary(BinOp::And, Ty::I64, m, low);
        let s = b.binary(BinOp::And, Ty::I64, s, high);
        let r = b.binary(BinOp::Or, Ty::I64, m, s);
        b.cast(CastOp::Bitcast, Ty::I64, Ty::F64, r)
    }

    fn cmul(&mut self, a: Pair, b: Pair) -> Pair {
        let (ac, bd) = (self.mul(a.0, b.0), self.mul(a.1, b.1));
        let (ad, bc) = (self.mul(a.0, b.1), self.mul(a.1, b.0));
        (self.sub(ac, bd), self.add(ad, bc))
    }

    /// Smith's algorithm, with the interpreter's shortcut for a real divisor.
    fn cdiv(&mut self, a: Pair, b: Pair) -> Pair {
        let by_real = (self.div(a.0, b.0), self.div(a.1, b.0));
        let r = self.div(b.1, b.0);
        let t = self.mul(b.1, r);
        let d = self.add(b.0, t);
        let (t0, t1) = (self.mul(a.1, r), self.mul(a.0, r));
        let (n0, n1) = (self.add(a.0, t0), self.sub(a.1, t1));
        let wide_re = (self.div(n0, d), self.div(n1, d));
        let r = self.div(b.0, b.1);
        let t = self.mul(b.0, r);
        let d = self.add(t, b.1);
        let (t0, t1) = (self.mul(a.0, r), self.mul(a.1, r));
        let (n0, n1) = (self.add(t0, a.1), self.sub(t1, a.0));
        let wide_im = (self.div(n0, d), self.div(n1, d));
        let real = self.is_zero(b.1);
        let (m0, m1) = (self.abs(b.0), self.abs(b.1));
        let re_wins = self.cmp(CmpOp::FGe, m0, m1);
        let smith = self.sel2(re_wins, wide_re, wide_im);
        self.sel2(real, by_real, smith)
    }

    /// exp(x + 0i) stays real even when exp(x) is infinite.
    fn cexp(&mut self, a: Pair) -> Pair {
        let m = self.call(MathFn::Exp, &[a.0]);
        let (c, s) = (self.call(MathFn::Cos, &[a.1]), self.call(MathFn::Sin, &[a.1]));
        let (re, im) = (self.mul(m, c), self.mul(m, s));
        let real = self.is_zero(a.1);
        (self.sel(real, m, re), self.sel(real, a.1, im))
    }

    fn clog(&mut self, a: Pair) -> Pair {
        let h = self.call(MathFn::Hypot, &[a.0, a.1]);
        (self.call(MathFn::Log, &[h]), self.call(MathFn::Atan2, &[a.1, a.0]))
    }

    /// The principal square root, without cancellation.
    fn csqrt(&mut self, (x, y): Pair) -> Pair {
        let h = self.call(MathFn::Hypot, &[x, y]);
        let ax = self.abs(x);
        let s = self.add(ax, h);
        let two = self.c(2.0);
        let half = self.div(s, two);
        let t = self.0.unary(UnOp::Sqrt, Ty::F64, half);
        let two_t = self.mul(two, t);
        let ay = self.abs(y);
        let neg_re = self.div(ay, two_t);
        let pos_im = self.div(y, two_t);
        let neg_im = self.copysign(t, y);
        let zero = self.c(0.0);
        let pos = self.cmp(CmpOp::FGe, x, zero);
        let general = self.sel2(pos, (t, pos_im), (neg_re, neg_im));
        let (zx, zy) = (self.is_zero(x), self.is_zero(y));
        let origin = self.and(zx, zy);
        self.sel2(origin, (zero, y), general)
    }

    fn csign(&mut self, a: Pair) -> Pair {
        let r = self.call(MathFn::Hypot, &[a.0, a.1]);
        let z = self.is_zero(r);
        let nan = self.cmp(CmpOp::FNe, r, r);
        let keep = self.0.binary(BinOp::Or, Ty::Pred, z, nan);
        let scaled = (self.div(a.0, r), self.div(a.1, r));
        self.sel2(keep, a, scaled)
    }

    /// a^b = exp(b log a), with XLA:CPU's values at a = 0.
    fn cpow(&mut self, a: Pair, b: Pair) -> Pair {
        let l = self.clog(a);
        let p = self.cmul(b, l);
        let general = self.cexp(p);
        let (one, zero, nan) = (self.c(1.0), self.c(0.0), self.c(f64::NAN));
        let (b0z, b1z) = (self.is_zero(b.0), self.is_zero(b.1));
        let b_zero = self.and(b0z, b1z);
        let b_pos = self.cmp(CmpOp::FGt, b.0, zero);
        let b_pos_real = self.and(b1z, b_pos);
        let at_zero = self.sel2(b_pos_real, (zero, zero), (nan, nan));
        let at_zero = self.sel2(b_zero, (one, zero), at_zero);
        let (a0z, a1z) = (self.is_zero(a.0), self.is_zero(a.1));
        let a_zero = self.and(a0z, a1z);
        self.sel2(a_zero, at_zero, general)
    }
}
