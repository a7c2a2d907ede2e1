//! XLA's elementwise semantics on register values, spelled out with the kernel IR's plain
//! machine operations: integer division and remainder guarded for zero and `MIN / -1`,
//! shifts saturating at the bit width, NaN-propagating maximum and minimum, `TOTALORDER`
//! comparisons, saturating float-to-integer conversions, and f16/bf16 rounded after every
//! operation (computed in f32, like XLA:CPU); the f8/f4 formats computed in f64 and rounded
//! after every operation (as the interpreter does), sub-byte integers wrapped after every one.

use tessera_hlo::ir::{ComparisonDirection, ComparisonType};
use tessera_hlo::{ElementType, Opcode};

use super::math;
use super::math_ir::IrMath;
use super::types::{is_half, is_minifloat, is_unsigned, reg};
use super::{half, minifloat, narrow_int};
use crate::kernel::{BinOp, CastOp, CmpOp, Const, KernelBuilder, MathFn, Ty, UnOp, ValueId};
use crate::LowerError;

fn unsupported(inst: &str, op: Opcode, et: ElementType) -> LowerError {
    LowerError::unsupported(inst, format!("{} on {}", op.name(), et.name()))
}

pub fn int_const(b: &mut KernelBuilder, ty: Ty, v: i64) -> ValueId {
    if ty == Ty::Pred {
        return b.constant(Const::Pred(v != 0));
    }
    b.constant(Const::Int { ty, bits: v })
}

pub fn float_const(b: &mut KernelBuilder, ty: Ty, v: f64) -> ValueId {
    match ty {
        Ty::F32 => b.constant(Const::F32((v as f32).to_bits())),
        _ => b.constant(Const::F64(v.to_bits())),
    }
}

/// `x` (F32 or F64) rounded to the nearest integer, halves away from zero, in IR the vector
/// loops of both tiers take (not a `roundf` call per lane): the largest float below one half,
/// with `x`'s sign, added to `x`, then truncated, as LLVM lowers `llvm.round` on x86. The sum
/// reaches the next integer exactly when the fraction is at least one half (a fraction of one
/// half makes a tie, which rounds to the even, larger, magnitude); from 2^(p-1) on (p the
/// mantissa's bits) every float is an integer and the addend is under half an ulp, so the sum
/// is `x`; truncation keeps the sign of a zero result.
pub fn round_half_away(b: &mut KernelBuilder, ty: Ty, x: ValueId) -> ValueId {
    let (ity, sign_bit, below_half) = match ty {
        Ty::F32 => (Ty::I32, i64::from(i32::MIN), i64::from(0.5f32.to_bits() - 1)),
        _ => (Ty::I64, i64::MIN, (0.5f64.to_bits() - 1) as i64),
    };
    let bits = b.cast(CastOp::Bitcast, ty, ity, x);
    let mask = int_const(b, ity, sign_bit);
    let sign = b.binary(BinOp::And, ity, bits, mask);
    let magnitude = int_const(b, ity, below_half);
    let addend = b.binary(BinOp::Or, ity, sign, magnitude);
    let addend = b.cast(CastOp::Bitcast, ity, ty, addend);
    let sum = b.binary(BinOp::Add, ty, x, addend);
    b.unary(UnOp::Trunc, ty, sum)
}

/// Rounds a float register value to `et` when `et` is narrower than its register (an f32
/// register for f16/bf16, an f64 one for the f8/f4 formats).
pub fn round(b: &mut KernelBuilder, et: ElementType, v: ValueId) -> ValueId {
    match et {
        ElementType::F16 => half::round_f32_to(b, v, false),
        ElementType::BF16 => half::round_f32_to(b, v, true),
        t if is_minifloat(t) => minifloat::round(b, t, v),
        _ => v,
    }
}

fn min_value(ty: Ty) -> i64 {
    match ty {
        Ty::I8 => i64::from(i8::MIN),
        Ty::I16 => i64::from(i16::MIN),
        Ty::I32 => i64::from(i32::MIN),
        _ => i64::MIN,
    }
}

pub fn unary(
    b: &mut KernelBuilder,
    op: Opcode,
    et: ElementType,
    x: ValueId,
    inst: &str,
) -> Result<ValueId, LowerError> {
    use Opcode as O;
    let ty = reg(et, inst)?;
    if is_minifloat(et) && op != O::IsFinite {
        // Even abs, negate and floor can leave these formats (-0 in the fnuz ones, negatives
        // and zero in f8e8m0fnu), so every result is rounded, as the interpreter does.
        let r = unary(b, op, ElementType::F64, x, inst)?;
        return Ok(minifloat::round(b, et, r));
    }
    if narrow_int::is_narrow_int(et) {
        let r = match op {
            O::PopulationCount => {
                let low = narrow_int::low_bits(b, et, x);
                b.unary(UnOp::Popcnt, ty, low)
            }
            O::Clz => {
                let low = narrow_int::low_bits(b, et, x);
                let n = b.unary(UnOp::Clz, ty, low);
                let pad = int_const(b, ty, 8 - i64::from(et.bit_width()));
                b.binary(BinOp::Sub, ty, n, pad)
            }
            _ => unary(b, op, ElementType::S8, x, inst)?,
        };
        return Ok(narrow_int::wrap(b, et, r));
    }
    if et == ElementType::Pred {
        return match op {
            O::Not => Ok(b.unary(UnOp::Not, Ty::Pred, x)),
            _ => Err(unsupported(inst, op, et)),
        };
    }
    if et.is_float() && ty == Ty::F32 {
        if let Some(r) = inline_unary(b, op, x) {
            return Ok(round(b, et, r));
        }
    }
    if et.is_float() {
        let math = |b: &mut KernelBuilder, f: MathFn| b.math(f, ty, vec![x]);
        let r = match op {
            O::Abs => return Ok(b.unary(UnOp::Abs, ty, x)),
            O::Negate => return Ok(b.unary(UnOp::Neg, ty, x)),
            O::Floor => return Ok(b.unary(UnOp::Floor, ty, x)),
            O::Ceil => return Ok(b.unary(UnOp::Ceil, ty, x)),
            O::RoundNearestEven => return Ok(b.unary(UnOp::RoundEven, ty, x)),
            O::RoundNearestAfz => return Ok(round_half_away(b, ty, x)),
            O::Sign => {
                // NaN and zeros pass through; everything else becomes +-1.
                let zero = float_const(b, ty, 0.0);
                let one = float_const(b, ty, 1.0);
                let minus = float_const(b, ty, -1.0);
                let pos = b.cmp(CmpOp::FGt, ty, x, zero);
                let neg = b.cmp(CmpOp::FLt, ty, x, zero);
                let r = b.select(ty, neg, minus, x);
                return Ok(b.select(ty, pos, one, r));
            }
            O::IsFinite => {
                let a = b.unary(UnOp::Abs, ty, x);
                let inf = float_const(b, ty, f64::INFINITY);
                return Ok(b.cmp(CmpOp::FLt, ty, a, inf));
            }
            O::Sqrt => b.unary(UnOp::Sqrt, ty, x),
            O::Rsqrt => {
                let s = b.unary(UnOp::Sqrt, ty, x);
                let one = float_const(b, ty, 1.0);
                b.binary(BinOp::FDiv, ty, one, s)
            }
            O::Cbrt => math(b, MathFn::Cbrt),
            O::Exp => math(b, MathFn::Exp),
            O::Expm1 => math(b, MathFn::Expm1),
            O::Log => math(b, MathFn::Log),
            O::Log1p => math(b, MathFn::Log1p),
            O::Sin => math(b, MathFn::Sin),
            O::Cos => math(b, MathFn::Cos),
            O::Tan => math(b, MathFn::Tan),
            O::Tanh => math(b, MathFn::Tanh),
            O::Erf => math(b, MathFn::Erf),
            O::Logistic => {
                let n = b.unary(UnOp::Neg, ty, x);
                let e = b.math(MathFn::Exp, ty, vec![n]);
                let one = float_const(b, ty, 1.0);
                let d = b.binary(BinOp::Add, ty, one, e);
                b.binary(BinOp::FDiv, ty, one, d)
            }
            _ => return Err(unsupported(inst, op, et)),
        };
        return Ok(round(b, et, r));
    }
    if !et.is_integral() {
        return Err(unsupported(inst, op, et));
    }
    Ok(match op {
        O::Abs => b.unary(UnOp::Abs, ty, x),
        O::Negate => b.unary(UnOp::Neg, ty, x),
        O::Not => b.unary(UnOp::Not, ty, x),
        O::PopulationCount => b.unary(UnOp::Popcnt, ty, x),
        O::Clz => b.unary(UnOp::Clz, ty, x),
        O::Sign => {
            let zero = int_const(b, ty, 0);
            let one = int_const(b, ty, 1);
            if is_unsigned(et) {
                let nz = b.cmp(CmpOp::Ne, ty, x, zero);
                b.select(ty, nz, one, zero)
            } else {
                let minus = int_const(b, ty, -1);
                let pos = b.cmp(CmpOp::Sgt, ty, x, zero);
                let neg = b.cmp(CmpOp::Slt, ty, x, zero);
                let r = b.select(ty, neg, minus, zero);
                b.select(ty, pos, one, r)
            }
        }
        _ => return Err(unsupported(inst, op, et)),
    })
}

/// The f32 transcendental functions as inline IR (`math.rs`, defined once for every tier and
/// the kernel interpreter); `None` for ops that are not one of them.
fn inline_unary(b: &mut KernelBuilder, op: Opcode, x: ValueId) -> Option<ValueId> {
    use Opcode as O;
    let in_loop = b.in_loop();
    let m = &mut IrMath::new(b);
    Some(match op {
        O::Exp => math::exp(m, x),
        O::Expm1 => math::expm1(m, x),
        O::Log => math::log(m, x),
        O::Log1p => math::log1p(m, x),
        O::Tanh => math::tanh(m, x),
        O::Logistic => math::logistic(m, x),
        O::Erf => math::erf(m, x),
        O::Cbrt => math::cbrt(m, x),
        // Outside loops a chain of scalar steps (a while loop's) waits on each result, and the
        // f64 routines' chain is the shorter; in a loop, lanes count.
        O::Sin if !in_loop => math::sin_wide(m, x),
        O::Cos if !in_loop => math::cos_wide(m, x),
        O::Sin => math::sin(m, x),
        O::Cos => math::cos(m, x),
        O::Tan => math::tan(m, x),
        _ => return None,
    })
}

pub fn binary(
    b: &mut KernelBuilder,
    op: Opcode,
    et: ElementType,
    x: ValueId,
    y: ValueId,
    inst: &str,
) -> Result<ValueId, LowerError> {
    use Opcode as O;
    let ty = reg(et, inst)?;
    if is_minifloat(et) {
        let r = binary(b, op, ElementType::F64, x, y, inst)?;
        return Ok(minifloat::round(b, et, r));
    }
    if narrow_int::is_narrow_int(et) {
        // Logical shifts see only the type's bits; the wide type has the same signedness so
        // min/max/div/compare order the wrapped values alike.
        let x = match op {
            O::ShiftRightLogical => narrow_int::low_bits(b, et, x),
            // An arithmetic shift copies the type's top bit, whatever its signedness.
            O::ShiftRightArithmetic => narrow_int::sign_extend(b, et, x),
            _ => x,
        };
        let wide = if et.is_signed_integral() { ElementType::S8 } else { ElementType::U8 };
        let r = binary_int(b, op, wide, ty, i64::from(et.bit_width()), x, y, inst)?;
        return Ok(narrow_int::wrap(b, et, r));
    }
    if et == ElementType::Pred {
        let bop = match op {
            O::And | O::Minimum | O::Multiply => BinOp::And,
            O::Or | O::Maximum | O::Add => BinOp::Or,
            O::Xor | O::Subtract => BinOp::Xor,
            _ => return Err(unsupported(inst, op, et)),
        };
        return Ok(b.binary(bop, Ty::Pred, x, y));
    }
    if et.is_float() && ty == Ty::F32 {
        let r = match op {
            O::Power => Some(math::pow(&mut IrMath::new(b), x, y)),
            O::Atan2 => Some(math::atan2(&mut IrMath::new(b), x, y)),
            _ => None,
        };
        if let Some(r) = r {
            return Ok(round(b, et, r));
        }
    }
    if et.is_float() {
        let r = match op {
            O::Add => b.binary(BinOp::Add, ty, x, y),
            O::Subtract => b.binary(BinOp::Sub, ty, x, y),
            O::Multiply => b.binary(BinOp::Mul, ty, x, y),
            O::Divide => b.binary(BinOp::FDiv, ty, x, y),
            // Exact in any format: the result is representable, so it needs no rounding.
            O::Maximum => return Ok(b.binary(BinOp::FMax, ty, x, y)),
            O::Minimum => return Ok(b.binary(BinOp::FMin, ty, x, y)),
            O::Remainder => b.math(MathFn::Fmod, ty, vec![x, y]),
            O::Power => b.math(MathFn::Pow, ty, vec![x, y]),
            O::Atan2 => b.math(MathFn::Atan2, ty, vec![x, y]),
            _ => return Err(unsupported(inst, op, et)),
        };
        return Ok(round(b, et, r));
    }
    if !et.is_integral() {
        return Err(unsupported(inst, op, et));
    }
    binary_int(b, op, et, ty, i64::from(ty.bits()), x, y, inst)
}

/// Integer binary ops on registers of `ty`; shifts saturate at `width` bits.
#[allow(clippy::too_many_arguments)]
fn binary_int(
    b: &mut KernelBuilder,
    op: Opcode,
    et: ElementType,
    ty: Ty,
    width: i64,
    x: ValueId,
    y: ValueId,
    inst: &str,
) -> Result<ValueId, LowerError> {
    use Opcode as O;
    let unsigned = is_unsigned(et);
    Ok(match op {
        O::Add => b.binary(BinOp::Add, ty, x, y),
        O::Subtract => b.binary(BinOp::Sub, ty, x, y),
        O::Multiply => b.binary(BinOp::Mul, ty, x, y),
        O::And => b.binary(BinOp::And, ty, x, y),
        O::Or => b.binary(BinOp::Or, ty, x, y),
        O::Xor => b.binary(BinOp::Xor, ty, x, y),
        O::Maximum => b.binary(if unsigned { BinOp::UMax } else { BinOp::SMax }, ty, x, y),
        O::Minimum => b.binary(if unsigned { BinOp::UMin } else { BinOp::SMin }, ty, x, y),
        O::Divide | O::Remainder => {
            let zero = int_const(b, ty, 0);
            let one = int_const(b, ty, 1);
            let by_zero = b.cmp(CmpOp::Eq, ty, y, zero);
            // x / 0 = -1 and x % 0 = x; signed MIN / -1 = MIN and MIN % -1 = 0, which a
            // divisor of 1 gives for both (x % -1 is 0 for every x, so -1 is replaced always).
            let unsafe_div = if unsigned {
                by_zero
            } else {
                let minus = int_const(b, ty, -1);
                let by_minus = b.cmp(CmpOp::Eq, ty, y, minus);
                if op == O::Divide {
                    let min = int_const(b, ty, min_value(ty));
                    let is_min = b.cmp(CmpOp::Eq, ty, x, min);
                    let ovf = b.binary(BinOp::And, Ty::Pred, is_min, by_minus);
                    b.binary(BinOp::Or, Ty::Pred, by_zero, ovf)
                } else {
                    b.binary(BinOp::Or, Ty::Pred, by_zero, by_minus)
                }
            };
            let safe = b.select(ty, unsafe_div, one, y);
            let bop = match (op, unsigned) {
                (O::Divide, false) => BinOp::SDiv,
                (O::Divide, true) => BinOp::UDiv,
                (_, false) => BinOp::SRem,
                (_, true) => BinOp::URem,
            };
            let q = b.binary(bop, ty, x, safe);
            let on_zero = if op == O::Divide { int_const(b, ty, -1) } else { x };
            b.select(ty, by_zero, on_zero, q)
        }
        O::ShiftLeft | O::ShiftRightLogical | O::ShiftRightArithmetic => {
            let w = int_const(b, ty, width);
            let too_far = b.cmp(CmpOp::Uge, ty, y, w);
            let zero = int_const(b, ty, 0);
            let amount = b.select(ty, too_far, zero, y);
            let bop = match op {
                O::ShiftLeft => BinOp::Shl,
                O::ShiftRightLogical => BinOp::LShr,
                _ => BinOp::AShr,
            };
            let shifted = b.binary(bop, ty, x, amount);
            let saturated = if op == O::ShiftRightArithmetic {
                let top = int_const(b, ty, width - 1);
                b.binary(BinOp::AShr, ty, x, top)
            } else {
                zero
            };
            b.select(ty, too_far, saturated, shifted)
        }
        O::Power => int_pow(b, ty, unsigned, x, y),
        _ => return Err(unsupported(inst, op, et)),
    })
}

/// Integer power by squaring over every exponent bit (straight-line code); a negative signed
/// exponent gives 0 except for bases 1 and -1.
fn int_pow(b: &mut KernelBuilder, ty: Ty, unsigned: bool, base: ValueId, exp: ValueId) -> ValueId {
    let one = int_const(b, ty, 1);
    let zero = int_const(b, ty, 0);
    let mut acc = one;
    let mut sq = base;
    for bit in 0..ty.bits() {
        let k = int_const(b, ty, i64::from(bit));
        let shifted = b.binary(BinOp::LShr, ty, exp, k);
        let low = b.binary(BinOp::And, ty, shifted, one);
        let set = b.cmp(CmpOp::Ne, ty, low, zero);
        let prod = b.binary(BinOp::Mul, ty, acc, sq);
        acc = b.select(ty, set, prod, acc);
        if bit + 1 < ty.bits() {
            sq = b.binary(BinOp::Mul, ty, sq, sq);
        }
    }
    if unsigned {
        return acc;
    }
    let minus = int_const(b, ty, -1);
    let neg_exp = b.cmp(CmpOp::Slt, ty, exp, zero);
    let odd_bit = b.binary(BinOp::And, ty, exp, one);
    let odd = b.cmp(CmpOp::Ne, ty, odd_bit, zero);
    let minus_pow = b.select(ty, odd, minus, one);
    let is_one = b.cmp(CmpOp::Eq, ty, base, one);
    let is_minus = b.cmp(CmpOp::Eq, ty, base, minus);
    let r = b.select(ty, is_minus, minus_pow, zero);
    let neg_result = b.select(ty, is_one, one, r);
    b.select(ty, neg_exp, neg_result, acc)
}

/// The integer key whose signed order is IEEE totalOrder on the float's bits.
fn total_order_key(b: &mut KernelBuilder, ty: Ty, x: ValueId) -> (Ty, ValueId) {
    let ity = if ty == Ty::F64 { Ty::I64 } else { Ty::I32 };
    let bits = b.cast(CastOp::Bitcast, ty, ity, x);
    let sh = int_const(b, ity, i64::from(ity.bits() - 1));
    let sign = b.binary(BinOp::AShr, ity, bits, sh);
    let one = int_const(b, ity, 1);
    let mask = b.binary(BinOp::LShr, ity, sign, one);
    (ity, b.binary(BinOp::Xor, ity, bits, mask))
}

pub fn compare(
    b: &mut KernelBuilder,
    dir: ComparisonDirection,
    cmp_type: Option<ComparisonType>,
    et: ElementType,
    x: ValueId,
    y: ValueId,
    inst: &str,
) -> Result<ValueId, LowerError> {
    use ComparisonDirection as D;
    let ty = reg(et, inst)?;
    if et.is_float() {
        if cmp_type == Some(ComparisonType::TotalOrder) {
            let (ity, kx) = total_order_key(b, ty, x);
            let (_, ky) = total_order_key(b, ty, y);
            let op = match dir {
                D::Eq => CmpOp::Eq,
                D::Ne => CmpOp::Ne,
                D::Lt => CmpOp::Slt,
                D::Le => CmpOp::Sle,
                D::Gt => CmpOp::Sgt,
                D::Ge => CmpOp::Sge,
            };
            return Ok(b.cmp(op, ity, kx, ky));
        }
        let op = match dir {
            D::Eq => CmpOp::FEq,
            D::Ne => CmpOp::FNe,
            D::Lt => CmpOp::FLt,
            D::Le => CmpOp::FLe,
            D::Gt => CmpOp::FGt,
            D::Ge => CmpOp::FGe,
        };
        return Ok(b.cmp(op, ty, x, y));
    }
    let (ty, x, y, unsigned) = if et == ElementType::Pred {
        let xi = b.cast(CastOp::ZExt, Ty::Pred, Ty::I8, x);
        let yi = b.cast(CastOp::ZExt, Ty::Pred, Ty::I8, y);
        (Ty::I8, xi, yi, true)
    } else if et.is_integral() {
        (ty, x, y, is_unsigned(et))
    } else {
        return Err(LowerError::unsupported(inst, format!("compare on {}", et.name())));
    };
    let op = match (dir, unsigned) {
        (D::Eq, _) => CmpOp::Eq,
        (D::Ne, _) => CmpOp::Ne,
        (D::Lt, false) => CmpOp::Slt,
        (D::Le, false) => CmpOp::Sle,
        (D::Gt, false) => CmpOp::Sgt,
        (D::Ge, false) => CmpOp::Sge,
        (D::Lt, true) => CmpOp::Ult,
        (D::Le, true) => CmpOp::Ule,
        (D::Gt, true) => CmpOp::Ugt,
        (D::Ge, true) => CmpOp::Uge,
    };
    Ok(b.cmp(op, ty, x, y))
}

/// XLA's convert between any two of pred, the integers, and the real float types.
pub fn convert(
    b: &mut KernelBuilder,
    from: ElementType,
    to: ElementType,
    x: ValueId,
    inst: &str,
) -> Result<ValueId, LowerError> {
    let fty = reg(from, inst)?;
    let tty = reg(to, inst)?;
    if from == to {
        return Ok(x);
    }
    if from == ElementType::Pred {
        return Ok(if to.is_float() {
            let one = float_const(b, tty, 1.0);
            let zero = float_const(b, tty, 0.0);
            b.select(tty, x, one, zero)
        } else {
            let v = b.cast(CastOp::ZExt, Ty::Pred, tty, x);
            narrow_int::wrap(b, to, v)
        });
    }
    if to == ElementType::Pred {
        return Ok(if from.is_float() {
            let zero = float_const(b, fty, 0.0);
            b.cmp(CmpOp::FNe, fty, x, zero)
        } else {
            let zero = int_const(b, fty, 0);
            b.cmp(CmpOp::Ne, fty, x, zero)
        });
    }
    match (from.is_float(), to.is_float()) {
        (false, false) => {
            let v = if fty == tty {
                x
            } else if fty.bits() < tty.bits() {
                b.cast(if is_unsigned(from) { CastOp::ZExt } else { CastOp::SExt }, fty, tty, x)
            } else {
                b.cast(CastOp::Trunc, fty, tty, x)
            };
            Ok(narrow_int::wrap(b, to, v))
        }
        (false, true) => {
            // Integers convert to f32 once and then to a narrower format, as XLA does.
            let op = if is_unsigned(from) { CastOp::UIToFP } else { CastOp::SIToFP };
            if is_minifloat(to) {
                let f = b.cast(op, fty, Ty::F32, x);
                let f = b.cast(CastOp::FPExt, Ty::F32, Ty::F64, f);
                return Ok(round(b, to, f));
            }
            let f = b.cast(op, fty, tty, x);
            Ok(round(b, to, f))
        }
        (true, false) => {
            let op = if is_unsigned(to) { CastOp::FPToUISat } else { CastOp::FPToSISat };
            let v = b.cast(op, fty, tty, x);
            Ok(if narrow_int::is_narrow_int(to) { narrow_int::saturate(b, to, v) } else { v })
        }
        (true, true) => {
            let f = match (fty, tty) {
                (Ty::F32, Ty::F64) => b.cast(CastOp::FPExt, fty, tty, x),
                (Ty::F64, Ty::F32) => b.cast(CastOp::FPTrunc, fty, tty, x),
                _ => x,
            };
            Ok(if is_half(to) || is_minifloat(to) { round(b, to, f) } else { f })
        }
    }
}

/// The raw bits of a register value of `et` as an integer register.
fn raw_bits(b: &mut KernelBuilder, et: ElementType, x: ValueId) -> ValueId {
    match et {
        ElementType::F16 => half::f32_to_f16(b, x),
        ElementType::BF16 => half::f32_to_bf16(b, x),
        ElementType::F32 => b.cast(CastOp::Bitcast, Ty::F32, Ty::I32, x),
        ElementType::F64 => b.cast(CastOp::Bitcast, Ty::F64, Ty::I64, x),
        ElementType::Pred => b.cast(CastOp::ZExt, Ty::Pred, Ty::I8, x),
        t if is_minifloat(t) => minifloat::from_f64(b, t, x),
        t if narrow_int::is_narrow_int(t) => narrow_int::low_bits(b, t, x),
        _ => x,
    }
}

/// bitcast-convert between types of the same width.
pub fn bitcast_convert(
    b: &mut KernelBuilder,
    from: ElementType,
    to: ElementType,
    x: ValueId,
    inst: &str,
) -> Result<ValueId, LowerError> {
    reg(from, inst)?;
    reg(to, inst)?;
    if from.bit_width() != to.bit_width() {
        return Err(LowerError::unsupported(
            inst,
            format!("bitcast-convert between widths ({} to {})", from.name(), to.name()),
        ));
    }
    let bits = raw_bits(b, from, x);
    Ok(match to {
        ElementType::F16 => half::f16_to_f32(b, bits),
        ElementType::BF16 => half::bf16_to_f32(b, bits),
        ElementType::F32 => b.cast(CastOp::Bitcast, Ty::I32, Ty::F32, bits),
        ElementType::F64 => b.cast(CastOp::Bitcast, Ty::I64, Ty::F64, bits),
        ElementType::Pred => {
            let zero = int_const(b, Ty::I8, 0);
            b.cmp(CmpOp::Ne, Ty::I8, bits, zero)
        }
        t if is_minifloat(t) => minifloat::to_f64(b, t, bits),
        t => narrow_int::wrap(b, t, bits),
    })
}

/// XLA's reduce-precision on a float register value: round the mantissa to `mant_bits` bits
/// (nearest even), then flush exponents outside an `exp_bits` range to infinity or zero; a NaN
/// stays itself unless no mantissa bits remain (then it becomes an infinity of its sign).
/// f16/bf16 values are reduced in f32 and rounded back, as the reference does.
pub fn reduce_precision(b: &mut KernelBuilder, et: ElementType, x: ValueId, exp_bits: u32, mant_bits: u32) -> ValueId {
    if is_minifloat(et) {
        // The reference reduces these in f32 (exact for their values) and rounds back.
        let f = b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, x);
        let r = reduce_precision(b, ElementType::F32, f, exp_bits, mant_bits);
        let r = b.cast(CastOp::FPExt, Ty::F32, Ty::F64, r);
        return minifloat::round(b, et, r);
    }
    let f64_src = et == ElementType::F64;
    let (fty, ity, src_exp, src_mant, total) =
        if f64_src { (Ty::F64, Ty::I64, 11u32, 52u32, 64u32) } else { (Ty::F32, Ty::I32, 8, 23, 32) };
    let c = |b: &mut KernelBuilder, v: u64| int_const(b, ity, v as i64);
    let mut v = b.cast(CastOp::Bitcast, fty, ity, x);
    if mant_bits < src_mant {
        let shift = src_mant - mant_bits;
        let last = 1u64 << shift;
        let lastv = c(b, last);
        let and = b.binary(BinOp::And, ity, v, lastv);
        let sh = c(b, u64::from(shift));
        let lsb = b.binary(BinOp::LShr, ity, and, sh);
        let bias = c(b, (last >> 1).wrapping_sub(1));
        let inc = b.binary(BinOp::Add, ity, lsb, bias);
        let sum = b.binary(BinOp::Add, ity, v, inc);
        let mask = c(b, !(last - 1));
        v = b.binary(BinOp::And, ity, sum, mask);
    }
    if exp_bits < src_exp {
        let sign = 1u64 << (total - 1);
        let exp_mask = ((1u64 << src_exp) - 1) << src_mant;
        let exp_bias = (1u64 << (src_exp - 1)) - 1;
        let reduced_bias = (1u64 << (exp_bits - 1)) - 1;
        let (max_e, min_e) = (exp_bias + reduced_bias, exp_bias - reduced_bias);
        let em = c(b, exp_mask);
        let e = b.binary(BinOp::And, ity, v, em);
        let signv = c(b, sign);
        let s = b.binary(BinOp::And, ity, v, signv);
        let inf = b.binary(BinOp::Or, ity, s, em);
        let hi = c(b, max_e << src_mant);
        let lo = c(b, min_e << src_mant);
        let over = b.cmp(CmpOp::Ugt, ity, e, hi);
        let under = b.cmp(CmpOp::Ule, ity, e, lo);
        let t = b.select(ity, under, s, v);
        v = b.select(ity, over, inf, t);
    }
    let r = b.cast(CastOp::Bitcast, ity, fty, v);
    let is_nan = b.cmp(CmpOp::FNe, fty, x, x);
    let nan = if mant_bits > 0 {
        x
    } else {
        let ix = b.cast(CastOp::Bitcast, fty, ity, x);
        let signv = c(b, 1u64 << (total - 1));
        let s = b.binary(BinOp::And, ity, ix, signv);
        let em = c(b, ((1u64 << src_exp) - 1) << src_mant);
        let inf = b.binary(BinOp::Or, ity, s, em);
        b.cast(CastOp::Bitcast, ity, fty, inf)
    };
    let r = b.select(fty, is_nan, nan, r);
    round(b, et, r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{run_kernel, IndexExpr, MemType};

    /// `round_half_away` over `inputs` (bits of `ty`) in a kernel, run by the interpreter.
    fn rounded(ty: Ty, inputs: &[u64]) -> Vec<u64> {
        let n = inputs.len() as i64;
        let bytes = (ty.bits() / 8) as usize;
        let mut b = KernelBuilder::new("round", 1);
        let src = b.buffer("src", MemType::Scalar(ty), n, false);
        let dst = b.buffer("dst", MemType::Scalar(ty), n, true);
        let i = b.begin_loop(0, n);
        let x = b.load(src, IndexExpr::var(i, 1));
        let r = round_half_away(&mut b, ty, x);
        b.store(dst, IndexExpr::var(i, 1), r);
        b.end_loop();
        let k = b.finish();
        let mut input: Vec<u8> = inputs.iter().flat_map(|x| x.to_le_bytes()[..bytes].to_vec()).collect();
        let mut out = vec![0u8; inputs.len() * bytes];
        run_kernel(&k, &mut [&mut input, &mut out]).expect("the rounding kernel runs");
        out.chunks_exact(bytes).map(|c| c.iter().rev().fold(0u64, |v, &byte| v << 8 | u64::from(byte))).collect()
    }

    /// Integers and halves from 0 to 2^12 and around 2^(p-2) .. 2^p, each with its
    /// neighbours one and two ulps either side, both signs; specials; and a stride through all
    /// bit patterns.
    fn inputs(next: fn(u64, i64) -> u64, from_f64: fn(f64) -> u64, stride: u64, all: u64) -> Vec<u64> {
        let mut centres: Vec<f64> = (0..8192).map(|k| k as f64 * 0.5).collect();
        for p in [22, 23, 24, 51, 52, 53] {
            let base = (p as f64).exp2();
            centres.extend([-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5].map(|d| base + d));
        }
        centres.extend([f64::INFINITY, f64::MAX, f64::MIN_POSITIVE, 1e-45, f64::NAN]);
        let mut out = Vec::new();
        for c in centres {
            for s in [1.0, -1.0] {
                let bits = from_f64(s * c);
                out.extend((-2..=2).map(|d| next(bits, d)));
            }
        }
        out.extend((0..all).step_by(stride as usize));
        out
    }

    fn same(ty: Ty, got: u64, want: u64) -> bool {
        let nan = |v: u64| match ty {
            Ty::F32 => f32::from_bits(v as u32).is_nan(),
            _ => f64::from_bits(v).is_nan(),
        };
        got == want || (nan(got) && nan(want))
    }

    #[test]
    fn round_half_away_matches_round_on_f32_boundaries() {
        let next = |bits: u64, d: i64| u64::from((bits as u32).wrapping_add(d as u32));
        let xs = inputs(next, |v| u64::from((v as f32).to_bits()), 65_521, 1 << 32);
        for (x, got) in xs.iter().zip(rounded(Ty::F32, &xs)) {
            let want = u64::from(f32::from_bits(*x as u32).round().to_bits());
            assert!(same(Ty::F32, got, want), "round of f32 bits {x:#010x}: {got:#010x}, want {want:#010x}");
        }
    }

    #[test]
    fn round_half_away_matches_round_on_f64_boundaries() {
        let next = |bits: u64, d: i64| bits.wrapping_add(d as u64);
        let xs = inputs(next, f64::to_bits, 0x0000_6f3e_0000_0001, u64::MAX);
        for (x, got) in xs.iter().zip(rounded(Ty::F64, &xs)) {
            let want = f64::from_bits(*x).round().to_bits();
            assert!(same(Ty::F64, got, want), "round of f64 bits {x:#018x}: {got:#018x}, want {want:#018x}");
        }
    }
}
