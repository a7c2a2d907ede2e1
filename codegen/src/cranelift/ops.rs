//! Scalar operations with the semantics documented on the kernel IR's `UnOp`, `BinOp`,
//! `CmpOp` and `CastOp`: wrapping integers, IEEE floats, `Pred` as an `i8` holding 0 or 1.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;
use tessera_lower::kernel::{BinOp, CastOp, CmpOp, Const, Ty, UnOp, ValueId};

use super::function::{cl_type, Translator};
use super::{Failure, Result};

pub(crate) fn int_cc(op: CmpOp) -> Option<IntCC> {
    Some(match op {
        CmpOp::Eq => IntCC::Equal,
        CmpOp::Ne => IntCC::NotEqual,
        CmpOp::Slt => IntCC::SignedLessThan,
        CmpOp::Sle => IntCC::SignedLessThanOrEqual,
        CmpOp::Sgt => IntCC::SignedGreaterThan,
        CmpOp::Sge => IntCC::SignedGreaterThanOrEqual,
        CmpOp::Ult => IntCC::UnsignedLessThan,
        CmpOp::Ule => IntCC::UnsignedLessThanOrEqual,
        CmpOp::Ugt => IntCC::UnsignedGreaterThan,
        CmpOp::Uge => IntCC::UnsignedGreaterThanOrEqual,
        _ => return None,
    })
}

pub(crate) fn float_cc(op: CmpOp) -> Option<FloatCC> {
    Some(match op {
        CmpOp::FEq => FloatCC::Equal,
        CmpOp::FLt => FloatCC::LessThan,
        CmpOp::FLe => FloatCC::LessThanOrEqual,
        CmpOp::FGt => FloatCC::GreaterThan,
        CmpOp::FGe => FloatCC::GreaterThanOrEqual,
        // Cranelift's `ne` is "unordered or not equal", IEEE `!=`.
        CmpOp::FNe => FloatCC::NotEqual,
        _ => return None,
    })
}

/// `fcmp cc x y`, with `>` and `>=` asked as `<` and `<=` of the swapped operands (the same
/// predicate, NaN included): x64 lowers a select between x and y on `x < y` to one `minps` or
/// `maxps` (a clamp is such a select), and only matches the `<` form. `x != x` is asked as
/// "unordered" (the same predicate): a scalar select on it is one `cmovp`, where `!=` takes
/// two conditional moves.
pub(crate) fn fcmp(b: &mut FunctionBuilder, cc: FloatCC, x: Value, y: Value) -> Value {
    match cc {
        FloatCC::GreaterThan => b.ins().fcmp(FloatCC::LessThan, y, x),
        FloatCC::GreaterThanOrEqual => b.ins().fcmp(FloatCC::LessThanOrEqual, y, x),
        FloatCC::NotEqual if x == y => b.ins().fcmp(FloatCC::Unordered, x, x),
        _ => b.ins().fcmp(cc, x, y),
    }
}

fn unsupported<T>(what: impl std::fmt::Display) -> Result<T> {
    Err(Failure::Unsupported(what.to_string()))
}

impl Translator<'_, '_> {
    pub(crate) fn constant(&mut self, c: Const) -> (Value, Ty) {
        let v = match c {
            Const::Pred(p) => self.b.ins().iconst(types::I8, i64::from(p)),
            Const::Int { ty, bits } => {
                // Cranelift wants narrow immediates zero-extended.
                let n = ty.bits();
                let bits = if n >= 64 { bits } else { bits & ((1i64 << n) - 1) };
                self.b.ins().iconst(cl_type(ty), bits)
            }
            Const::F32(bits) => self.b.ins().f32const(f32::from_bits(bits)),
            Const::F64(bits) => self.b.ins().f64const(f64::from_bits(bits)),
        };
        (v, c.ty())
    }

    pub(crate) fn unary(&mut self, op: UnOp, ty: Ty, a: ValueId) -> Result<(Value, Ty)> {
        let x = self.typed(a, ty)?;
        let ins = self.b.ins();
        let v = match (op, ty) {
            (UnOp::Not, Ty::Pred) => ins.bxor_imm_s(x, 1),
            (UnOp::Not, t) if t.is_int() => ins.bnot(x),
            (UnOp::Neg, t) if t.is_int() => ins.ineg(x),
            (UnOp::Neg, _) if ty.is_float() => ins.fneg(x),
            (UnOp::Abs, t) if t.is_int() => ins.iabs(x),
            (UnOp::Abs, _) if ty.is_float() => ins.fabs(x),
            (UnOp::Sqrt, _) if ty.is_float() => ins.sqrt(x),
            (UnOp::Floor, _) if ty.is_float() => ins.floor(x),
            (UnOp::Ceil, _) if ty.is_float() => ins.ceil(x),
            (UnOp::Trunc, _) if ty.is_float() => ins.trunc(x),
            (UnOp::RoundEven, _) if ty.is_float() => ins.nearest(x),
            (UnOp::Popcnt, t) if t.is_int() => ins.popcnt(x),
            (UnOp::Clz, t) if t.is_int() => ins.clz(x),
            _ => return unsupported(format!("unary {op:?} on {ty:?}")),
        };
        Ok((v, ty))
    }

    pub(crate) fn binary(&mut self, op: BinOp, ty: Ty, a: ValueId, b: ValueId) -> Result<(Value, Ty)> {
        let x = self.typed(a, ty)?;
        let y = self.typed(b, ty)?;
        Ok((self.binary_values(op, ty, x, y)?, ty))
    }

    /// `op` on two Cranelift values of kernel type `ty`: scalars, or vectors of its lanes.
    pub(crate) fn binary_values(&mut self, op: BinOp, ty: Ty, x: Value, y: Value) -> Result<Value> {
        let int = ty.is_int();
        let float = ty.is_float();
        let bits = ty == Ty::Pred || int;
        let ins = self.b.ins();
        let v = match op {
            BinOp::And if bits => ins.band(x, y),
            BinOp::Or if bits => ins.bor(x, y),
            BinOp::Xor if bits => ins.bxor(x, y),
            BinOp::Add if int => ins.iadd(x, y),
            BinOp::Sub if int => ins.isub(x, y),
            BinOp::Mul if int => ins.imul(x, y),
            BinOp::Add if float => ins.fadd(x, y),
            BinOp::Sub if float => ins.fsub(x, y),
            BinOp::Mul if float => ins.fmul(x, y),
            BinOp::FDiv if float => ins.fdiv(x, y),
            // The lowering guards zero divisors and MIN / -1; Cranelift traps on both, which
            // the contract allows.
            BinOp::SDiv if int => ins.sdiv(x, y),
            BinOp::UDiv if int => ins.udiv(x, y),
            BinOp::SRem if int => ins.srem(x, y),
            BinOp::URem if int => ins.urem(x, y),
            BinOp::Shl if int => ins.ishl(x, y),
            BinOp::LShr if int => ins.ushr(x, y),
            BinOp::AShr if int => ins.sshr(x, y),
            BinOp::SMax if int => ins.smax(x, y),
            BinOp::SMin if int => ins.smin(x, y),
            BinOp::UMax if int => ins.umax(x, y),
            BinOp::UMin if int => ins.umin(x, y),
            BinOp::FMax | BinOp::FMin if float => return Ok(self.fmaxmin(op == BinOp::FMax, x, y)),
            _ => return unsupported(format!("binary {op:?} on {ty:?}")),
        };
        Ok(v)
    }

    /// Cranelift's fmax/fmin follow WebAssembly: NaN if either side is NaN, and -0.0 < +0.0,
    /// which is the IR's definition. The NaN's payload is left open there and in the IR; this
    /// tier returns `x + y` for it (the first NaN operand, quieted), as the interpreter does,
    /// so the two agree bit for bit even when the NaN is later bitcast to an integer. Works on
    /// scalars and vectors alike.
    ///
    /// On x86-64 vectors the non-NaN part is `maxps`/`minps` both ways round, combined bitwise:
    /// each returns its second operand for equal values, so the two differ only on a pair of
    /// zeros, where `and` keeps +0.0 (max) and `or` keeps -0.0 (min). That is 3 instructions
    /// where Cranelift's `fmax` takes 7 (and canonicalizes the NaN the select then replaces):
    /// in a max-reduction's loop (softmax's first pass) the shorter chain lets the loop keep
    /// more of its cache-line loads in flight.
    pub(crate) fn fmaxmin(&mut self, max: bool, x: Value, y: Value) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let r = if ty.is_vector() && self.is_x86_64() {
            let a = self.x86_maxmin(max, x, y);
            let b = self.x86_maxmin(max, y, x);
            if max {
                self.b.ins().band(a, b)
            } else {
                self.b.ins().bor(a, b)
            }
        } else if max {
            self.b.ins().fmax(x, y)
        } else {
            self.b.ins().fmin(x, y)
        };
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, y);
        let sum = self.b.ins().fadd(x, y);
        if ty.is_vector() {
            let nan = self.b.ins().bitcast(ty, super::vector::lane_cast_flags(), nan);
            self.b.ins().bitselect(nan, sum, r)
        } else {
            self.b.ins().select(nan, sum, r)
        }
    }

    /// x86's `maxps x, y` (`y < x ? x : y`) or `minps x, y` (`x < y ? x : y`): `y` for a NaN
    /// or equal values. Written as the compare and select Cranelift's x86-64 backend matches
    /// to the one instruction.
    fn x86_maxmin(&mut self, max: bool, x: Value, y: Value) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let picks_x =
            if max { self.b.ins().fcmp(FloatCC::LessThan, y, x) } else { self.b.ins().fcmp(FloatCC::LessThan, x, y) };
        let mask = self.b.ins().bitcast(ty, super::vector::lane_cast_flags(), picks_x);
        self.b.ins().bitselect(mask, x, y)
    }

    pub(crate) fn compare(&mut self, op: CmpOp, ty: Ty, a: ValueId, b: ValueId) -> Result<(Value, Ty)> {
        let x = self.typed(a, ty)?;
        let y = self.typed(b, ty)?;
        let v = if ty.is_float() {
            match float_cc(op) {
                Some(cc) => fcmp(&mut self.b, cc, x, y),
                None => return unsupported(format!("comparison {op:?} on {ty:?}")),
            }
        } else {
            match int_cc(op) {
                Some(cc) => self.b.ins().icmp(cc, x, y),
                None => return unsupported(format!("comparison {op:?} on {ty:?}")),
            }
        };
        Ok((v, Ty::Pred))
    }

    pub(crate) fn select(&mut self, ty: Ty, cond: ValueId, a: ValueId, b: ValueId) -> Result<(Value, Ty)> {
        let c = self.typed(cond, Ty::Pred)?;
        let x = self.typed(a, ty)?;
        let y = self.typed(b, ty)?;
        Ok((self.b.ins().select(c, x, y), ty))
    }

    pub(crate) fn cast(&mut self, op: CastOp, from: Ty, to: Ty, a: ValueId) -> Result<(Value, Ty)> {
        let x = self.typed(a, from)?;
        let bad = || unsupported(format!("cast {op:?} from {from:?} to {to:?}"));
        let int_like = |t: Ty| t.is_int() || t == Ty::Pred;
        let to_t = cl_type(to);
        let ins = self.b.ins();
        let v = match op {
            CastOp::SExt | CastOp::ZExt if int_like(from) && to.is_int() && to.bits() > from.bits() => {
                match (op, from) {
                    // A true `Pred` is one bit set: sign-extended, all bits.
                    (CastOp::SExt, Ty::Pred) => {
                        let w = if to_t == types::I8 { x } else { ins.uextend(to_t, x) };
                        self.b.ins().ineg(w)
                    }
                    (CastOp::SExt, _) => ins.sextend(to_t, x),
                    _ if to_t == types::I8 => x,
                    _ => ins.uextend(to_t, x),
                }
            }
            CastOp::Trunc if from.is_int() && to == Ty::Pred => {
                let low = if from == Ty::I8 { x } else { ins.ireduce(types::I8, x) };
                self.b.ins().band_imm_s(low, 1)
            }
            CastOp::Trunc if from.is_int() && to.is_int() && to.bits() < from.bits() => ins.ireduce(to_t, x),
            CastOp::SIToFP | CastOp::UIToFP if from.is_int() && to.is_float() => {
                let signed = op == CastOp::SIToFP;
                let x = match from {
                    Ty::I8 | Ty::I16 if signed => ins.sextend(types::I32, x),
                    // Every u8/u16/u32 is a non-negative i64, so the signed conversion of the
                    // widened value is exact and cheaper than an unsigned one.
                    Ty::I8 | Ty::I16 | Ty::I32 if !signed => ins.uextend(types::I64, x),
                    _ => x,
                };
                let ins = self.b.ins();
                if signed || from != Ty::I64 {
                    ins.fcvt_from_sint(to_t, x)
                } else {
                    ins.fcvt_from_uint(to_t, x)
                }
            }
            CastOp::FPToSISat | CastOp::FPToUISat if from.is_float() && to.is_int() => {
                let signed = op == CastOp::FPToSISat;
                match (to, signed) {
                    (Ty::I32 | Ty::I64, true) => ins.fcvt_to_sint_sat(to_t, x),
                    (Ty::I32 | Ty::I64, false) => ins.fcvt_to_uint_sat(to_t, x),
                    // Narrow targets: saturate to i32, then clamp to the target's range (both
                    // steps are monotone, so the composition saturates exactly; NaN stays 0).
                    (_, true) => {
                        let w = ins.fcvt_to_sint_sat(types::I32, x);
                        let (lo, hi) = if to == Ty::I8 { (-128, 127) } else { (-32768, 32767) };
                        let lo = self.b.ins().iconst(types::I32, lo);
                        let hi = self.b.ins().iconst(types::I32, hi);
                        let w = self.b.ins().smax(w, lo);
                        let w = self.b.ins().smin(w, hi);
                        self.b.ins().ireduce(to_t, w)
                    }
                    (_, false) => {
                        let w = ins.fcvt_to_uint_sat(types::I32, x);
                        let hi = if to == Ty::I8 { 255 } else { 65535 };
                        let hi = self.b.ins().iconst(types::I32, hi);
                        let w = self.b.ins().umin(w, hi);
                        self.b.ins().ireduce(to_t, w)
                    }
                }
            }
            CastOp::FPExt if from == Ty::F32 && to == Ty::F64 => ins.fpromote(types::F64, x),
            CastOp::FPTrunc if from == Ty::F64 && to == Ty::F32 => ins.fdemote(types::F32, x),
            CastOp::Bitcast
                if from != to
                    && from != Ty::Pred
                    && to != Ty::Pred
                    && from.bits() == to.bits()
                    && from.bits() >= 32 =>
            {
                ins.bitcast(to_t, MemFlagsData::new(), x)
            }
            _ => return bad(),
        };
        Ok((v, to))
    }
}
