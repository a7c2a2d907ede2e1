//! stochastic-convert: float to signed integer, rounding the magnitude up when the caller's
//! random bits fall below its fractional part (read as a fraction of the random type's range),
//! as XLA's stochastic-convert decomposer defines it. Other target types are what XLA also
//! refuses.

use super::value::{round_float, wrap_int};
use super::{result_array, Arr, Buf, EvalError};
use crate::ir::Instruction;

pub(crate) fn stochastic_convert(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    let (ty, dims) = result_array(inst)?;
    let [x, r] = ops else {
        return Err(EvalError::invalid(inst, "stochastic-convert needs an operand and random bits"));
    };
    if !ty.is_signed_integral() {
        return Err(EvalError::Unsupported { opcode: format!("stochastic-convert to {ty}") });
    }
    let (Buf::Float(xs), Buf::Int(rs)) = (&x.buf, &r.buf) else {
        return Err(EvalError::invalid(inst, "stochastic-convert takes floats and unsigned random bits"));
    };
    if xs.len() != rs.len() || !r.ty.is_unsigned_integral() {
        return Err(EvalError::invalid(inst, "stochastic-convert random bits must be unsigned, one per element"));
    }
    let bits = r.ty.bit_width();
    let w = ty.bit_width();
    let (min, max) = if w >= 64 { (i64::MIN, i64::MAX) } else { (-(1i64 << (w - 1)), (1i64 << (w - 1)) - 1) };
    // The bounds as the operand type holds them (XLA compares in the operand's type).
    let (fmin, fmax) = (round_float(x.ty, min as f64), round_float(x.ty, max as f64));
    let random_max = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
    let out = xs
        .iter()
        .zip(rs)
        .map(|(&v, &rand)| {
            if v <= fmin {
                return min;
            }
            if v >= fmax {
                return max;
            }
            if v.is_nan() {
                return 0;
            }
            let a = v.abs();
            let t = a.floor();
            // frac < 1, so scaling by 2^bits stays below the random type's range and is exact.
            let fixed = ((a - t) * (bits as f64).exp2()).min(random_max as f64) as u64;
            let mut i = t as i64;
            if (rand as u64) < fixed {
                i += 1;
            }
            wrap_int(ty, if v < 0.0 { -i } else { i })
        })
        .collect();
    Ok(Arr { ty, dims, buf: Buf::Int(out) })
}
