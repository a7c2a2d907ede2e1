//! stochastic-convert on register values, as `hlo::eval` (eval/stochastic.rs) defines it:
//! a float to a signed integer, rounding the magnitude up when the random bits fall below its
//! fractional part read as a fraction of the random type's range; values at or beyond the
//! integer range's ends (as the operand type holds them) saturate, NaN becomes 0.
//!
//! Everything is computed in f64, where every operand value, its floor and its fraction are
//! exact, and the fraction scaled by 2^bits (< 2^64) is an exact integer bound.

use tessera_hlo::ElementType;

use super::{minifloat, narrow_int, types};
use crate::kernel::{BinOp, CastOp, CmpOp, Const, KernelBuilder, Ty, UnOp, ValueId};
use crate::LowerError;

/// `x` as the element type `et` holds it (round to nearest even), for the saturation bounds.
fn as_type(et: ElementType, x: f64) -> f64 {
    match et {
        ElementType::F32 => x as f32 as f64,
        ElementType::F16 => ::half::f16::from_f32(x as f32).to_f64(),
        ElementType::BF16 => ::half::bf16::from_f32(x as f32).to_f64(),
        t if minifloat::is_minifloat(t) => minifloat::bits_value(t, tessera_hlo::eval::minifloat_encode(t, x)),
        _ => x,
    }
}

fn f64_const(b: &mut KernelBuilder, v: f64) -> ValueId {
    b.constant(Const::F64(v.to_bits()))
}

fn i64_const(b: &mut KernelBuilder, v: i64) -> ValueId {
    b.constant(Const::Int { ty: Ty::I64, bits: v })
}

/// `x` of float type `x_et`, random bits `r` of unsigned type `r_et`, to signed `out_et`.
pub fn stochastic_convert(
    b: &mut KernelBuilder,
    x_et: ElementType,
    r_et: ElementType,
    out_et: ElementType,
    x: ValueId,
    r: ValueId,
    inst: &str,
) -> Result<ValueId, LowerError> {
    if !out_et.is_signed_integral() {
        return Err(LowerError::unsupported(inst, format!("stochastic-convert to {}", out_et.name())));
    }
    if !x_et.is_float() || !r_et.is_unsigned_integral() {
        return Err(LowerError::invalid(inst, "stochastic-convert takes floats and unsigned random bits"));
    }
    let x_ty = types::reg(x_et, inst)?;
    let r_ty = types::reg(r_et, inst)?;
    let out_ty = types::reg(out_et, inst)?;
    let x = if x_ty == Ty::F32 { b.cast(CastOp::FPExt, Ty::F32, Ty::F64, x) } else { x };
    let rand = if r_ty == Ty::I64 { r } else { b.cast(CastOp::ZExt, r_ty, Ty::I64, r) };
    let w = out_et.bit_width();
    let (min, max) = if w >= 64 { (i64::MIN, i64::MAX) } else { (-(1i64 << (w - 1)), (1i64 << (w - 1)) - 1) };
    let bits = r_et.bit_width();
    let random_max = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };

    let a = b.unary(UnOp::Abs, Ty::F64, x);
    let t = b.unary(UnOp::Floor, Ty::F64, a);
    let frac = b.binary(BinOp::Sub, Ty::F64, a, t);
    let scale = f64_const(b, (bits as f64).exp2());
    let scaled = b.binary(BinOp::Mul, Ty::F64, frac, scale);
    let cap = f64_const(b, random_max as f64);
    let scaled = b.binary(BinOp::FMin, Ty::F64, scaled, cap);
    let fixed = b.cast(CastOp::FPToUISat, Ty::F64, Ty::I64, scaled);
    let i = b.cast(CastOp::FPToSISat, Ty::F64, Ty::I64, t);
    let up = b.cmp(CmpOp::Ult, Ty::I64, rand, fixed);
    let one = i64_const(b, 1);
    let i_up = b.binary(BinOp::Add, Ty::I64, i, one);
    let i = b.select(Ty::I64, up, i_up, i);
    let zero_f = f64_const(b, 0.0);
    let neg = b.cmp(CmpOp::FLt, Ty::F64, x, zero_f);
    let minus = b.unary(UnOp::Neg, Ty::I64, i);
    let mut v = b.select(Ty::I64, neg, minus, i);
    let is_nan = b.cmp(CmpOp::FNe, Ty::F64, x, x);
    let zero = i64_const(b, 0);
    v = b.select(Ty::I64, is_nan, zero, v);
    let fmax = f64_const(b, as_type(x_et, max as f64));
    let hi = b.cmp(CmpOp::FGe, Ty::F64, x, fmax);
    let maxv = i64_const(b, max);
    v = b.select(Ty::I64, hi, maxv, v);
    let fmin = f64_const(b, as_type(x_et, min as f64));
    let lo = b.cmp(CmpOp::FLe, Ty::F64, x, fmin);
    let minv = i64_const(b, min);
    v = b.select(Ty::I64, lo, minv, v);
    let v = if out_ty == Ty::I64 { v } else { b.cast(CastOp::Trunc, Ty::I64, out_ty, v) };
    Ok(narrow_int::wrap(b, out_et, v))
}
