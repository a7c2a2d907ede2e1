//! Elementwise ops: unary, binary, compare, select, clamp, convert and bitcast-convert, as
//! whole-array kernels over the widened buffers.

use super::value::{is_unsigned, round_float, wrap_int};
use super::{result_array, Arr, Buf, EvalError};
use crate::element_type::ElementType;
use crate::ir::{AttrList, ComparisonDirection, ComparisonType, Instruction, Opcode};

pub(crate) fn handles(op: Opcode) -> bool {
    use Opcode as O;
    matches!(
        op,
        O::Abs
            | O::Negate
            | O::Exp
            | O::Expm1
            | O::Log
            | O::Log1p
            | O::Sqrt
            | O::Rsqrt
            | O::Cbrt
            | O::Sin
            | O::Cos
            | O::Tan
            | O::Tanh
            | O::Floor
            | O::Ceil
            | O::RoundNearestAfz
            | O::RoundNearestEven
            | O::Sign
            | O::IsFinite
            | O::Logistic
            | O::Erf
            | O::Not
            | O::PopulationCount
            | O::Clz
            | O::Add
            | O::Subtract
            | O::Multiply
            | O::Divide
            | O::Remainder
            | O::Maximum
            | O::Minimum
            | O::Power
            | O::Atan2
            | O::And
            | O::Or
            | O::Xor
            | O::ShiftLeft
            | O::ShiftRightArithmetic
            | O::ShiftRightLogical
            | O::Compare
            | O::Select
            | O::Clamp
            | O::Convert
            | O::BitcastConvert
            | O::ReducePrecision
    )
}

/// XLA's float `maximum`: NaN propagates and +0.0 is above -0.0 (XLA:CPU gives
/// `maximum(-0, +0) = +0` in either order; Rust's `f64::max` may return either zero).
pub(crate) fn float_maximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if a.is_sign_negative() {
            b
        } else {
            a
        }
    } else {
        a.max(b)
    }
}

/// XLA's float `minimum`: NaN propagates and -0.0 is below +0.0.
pub(crate) fn float_minimum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if a.is_sign_negative() {
            a
        } else {
            b
        }
    } else {
        a.min(b)
    }
}

fn unsupported(inst: &Instruction, what: &str) -> EvalError {
    EvalError::Unsupported { opcode: format!("{} on {what}", inst.opcode.name()) }
}

pub(crate) fn eval(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    use Opcode as O;
    let (ty, dims) = result_array(inst)?;
    let n: usize = dims.iter().product::<i64>() as usize;
    let need = |k: usize| -> Result<(), EvalError> {
        if ops.len() != k {
            return Err(EvalError::invalid(inst, format!("expected {k} operands, found {}", ops.len())));
        }
        for o in ops {
            if o.len() != n && o.len() != 1 {
                return Err(EvalError::invalid(inst, "operand element count differs from the result's"));
            }
        }
        Ok(())
    };
    let buf = match inst.opcode {
        O::Convert => {
            need(1)?;
            convert(&ops[0].buf, ops[0].ty, ty)
        }
        O::BitcastConvert => {
            if ops.iter().any(|o| o.ty == ElementType::C128) || ty == ElementType::C128 {
                return Err(unsupported(inst, "c128"));
            }
            // Checked first: a width change reshapes, so the element counts differ.
            if ops.len() == 1 && ops[0].ty.bit_width() != ty.bit_width() {
                return Ok(Arr { ty, buf: bitcast_resize(inst, ops[0], ty, n)?, dims });
            }
            need(1)?;
            bitcast(&ops[0].buf, ops[0].ty, ty)
        }
        O::ReducePrecision => {
            need(1)?;
            let (e, m) = (inst.attr_int("exponent_bits"), inst.attr_int("mantissa_bits"));
            let (Some(e), Some(m), Buf::Float(v)) = (e, m, &ops[0].buf) else {
                return Err(EvalError::invalid(inst, "reduce-precision needs a float operand and bit counts"));
            };
            if !(1..=11).contains(&e) || !(0..=52).contains(&m) {
                return Err(EvalError::invalid(inst, "reduce-precision bit counts out of range"));
            }
            Buf::Float(v.iter().map(|&x| round_float(ty, reduce_precision(x, ty, e as u32, m as u32))).collect())
        }
        O::Compare => {
            need(2)?;
            Buf::Pred(compare(inst, ops[0], ops[1])?)
        }
        O::Select => {
            need(3)?;
            select(inst, ops[0], ops[1], ops[2], n)?
        }
        O::Clamp => {
            need(3)?;
            let lo = broadcast_to(ops[0], n);
            let x = broadcast_to(ops[1], n);
            let hi = broadcast_to(ops[2], n);
            let t = binary(inst, O::Maximum, &x, &lo, ty)?;
            binary(inst, O::Minimum, &Arr { ty, dims: dims.clone(), buf: t }, &hi, ty)?
        }
        op if op.is_elementwise_binary() => {
            need(2)?;
            let a = broadcast_to(ops[0], n);
            let b = broadcast_to(ops[1], n);
            binary(inst, op, &a, &b, ty)?
        }
        op => {
            need(1)?;
            unary(inst, op, ops[0], ty)?
        }
    };
    Ok(Arr { ty, dims, buf })
}

/// Scalars stand for arrays of any size (select's predicate, clamp's bounds).
pub(crate) fn broadcast_to(a: &Arr, n: usize) -> std::borrow::Cow<'_, Arr> {
    if a.len() == n || a.len() == 0 {
        return std::borrow::Cow::Borrowed(a);
    }
    let buf = super::value::map_buf!(&a.buf, v => vec![v[0]; n]);
    std::borrow::Cow::Owned(Arr { ty: a.ty, dims: a.dims.clone(), buf })
}

fn int_mask(ty: ElementType) -> u64 {
    let w = ty.bit_width();
    if w >= 64 {
        u64::MAX
    } else {
        (1u64 << w) - 1
    }
}

fn unary(inst: &Instruction, op: Opcode, a: &Arr, ty: ElementType) -> Result<Buf, EvalError> {
    use Opcode as O;
    Ok(match &a.buf {
        Buf::Float(v) => {
            if op == O::IsFinite {
                return Ok(Buf::Pred(v.iter().map(|x| x.is_finite()).collect()));
            }
            let f: fn(f64) -> f64 = match op {
                O::Abs => f64::abs,
                O::Negate => |x| -x,
                O::Exp => f64::exp,
                O::Expm1 => f64::exp_m1,
                O::Log => f64::ln,
                O::Log1p => f64::ln_1p,
                O::Sqrt => f64::sqrt,
                O::Rsqrt => |x| 1.0 / x.sqrt(),
                O::Cbrt => f64::cbrt,
                O::Sin => f64::sin,
                O::Cos => f64::cos,
                O::Tan => f64::tan,
                O::Tanh => f64::tanh,
                O::Floor => f64::floor,
                O::Ceil => f64::ceil,
                O::RoundNearestAfz => f64::round,
                O::RoundNearestEven => f64::round_ties_even,
                O::Sign => |x| if x.is_nan() || x == 0.0 { x } else { x.signum() },
                O::Logistic => |x| 1.0 / (1.0 + (-x).exp()),
                O::Erf => erf,
                _ => return Err(unsupported(inst, "floats")),
            };
            Buf::Float(v.iter().map(|&x| round_float(ty, f(x))).collect())
        }
        Buf::Int(v) => {
            let mask = int_mask(ty);
            let w = ty.bit_width();
            let unsigned = is_unsigned(ty);
            let f = |x: i64| -> Option<i64> {
                Some(match op {
                    O::Abs => x.wrapping_abs(),
                    O::Negate => x.wrapping_neg(),
                    O::Sign if unsigned => i64::from(x != 0),
                    O::Sign => x.signum(),
                    O::Not => !x,
                    O::PopulationCount => i64::from(((x as u64) & mask).count_ones()),
                    O::Clz => i64::from(((x as u64) & mask).leading_zeros() - (64 - w)),
                    _ => return None,
                })
            };
            let mut out = Vec::with_capacity(v.len());
            for &x in v {
                out.push(wrap_int(ty, f(x).ok_or_else(|| unsupported(inst, "integers"))?));
            }
            Buf::Int(out)
        }
        Buf::Pred(v) => match op {
            O::Not => Buf::Pred(v.iter().map(|x| !x).collect()),
            _ => return Err(unsupported(inst, "predicates")),
        },
        Buf::Complex(_) => return Err(unsupported(inst, "complex numbers")),
    })
}

fn binary(inst: &Instruction, op: Opcode, a: &Arr, b: &Arr, ty: ElementType) -> Result<Buf, EvalError> {
    use Opcode as O;
    Ok(match (&a.buf, &b.buf) {
        (Buf::Float(x), Buf::Float(y)) => {
            let f: fn(f64, f64) -> f64 = match op {
                O::Add => |a, b| a + b,
                O::Subtract => |a, b| a - b,
                O::Multiply => |a, b| a * b,
                O::Divide => |a, b| a / b,
                O::Remainder => |a, b| a % b,
                O::Maximum => float_maximum,
                O::Minimum => float_minimum,
                O::Power => f64::powf,
                O::Atan2 => f64::atan2,
                _ => return Err(unsupported(inst, "floats")),
            };
            Buf::Float(x.iter().zip(y).map(|(&a, &b)| round_float(ty, f(a, b))).collect())
        }
        (Buf::Int(x), Buf::Int(y)) => {
            let w = i64::from(ty.bit_width());
            let mask = int_mask(ty);
            let unsigned = is_unsigned(ty);
            // Unsigned values are stored zero-extended, so only u64 needs unsigned arithmetic
            // for ordering and division; the rest compare correctly as i64.
            let u64_like = ty == ElementType::U64;
            let f = |a: i64, b: i64| -> Option<i64> {
                Some(match op {
                    O::Add => a.wrapping_add(b),
                    O::Subtract => a.wrapping_sub(b),
                    O::Multiply => a.wrapping_mul(b),
                    O::Divide if b == 0 => -1,
                    O::Divide if u64_like => ((a as u64) / (b as u64)) as i64,
                    O::Divide => a.wrapping_div(b),
                    O::Remainder if b == 0 => a,
                    O::Remainder if u64_like => ((a as u64) % (b as u64)) as i64,
                    O::Remainder => a.wrapping_rem(b),
                    O::Maximum if u64_like => (a as u64).max(b as u64) as i64,
                    O::Maximum => a.max(b),
                    O::Minimum if u64_like => (a as u64).min(b as u64) as i64,
                    O::Minimum => a.min(b),
                    O::And => a & b,
                    O::Or => a | b,
                    O::Xor => a ^ b,
                    O::ShiftLeft => {
                        if (b as u64) >= w as u64 {
                            0
                        } else {
                            a.wrapping_shl(b as u32)
                        }
                    }
                    O::ShiftRightArithmetic => {
                        // The sign bit of the narrow type, whatever its signedness.
                        let s = if w == 64 { a } else { (a << (64 - w)) >> (64 - w) };
                        if (b as u64) >= w as u64 {
                            if s < 0 {
                                -1
                            } else {
                                0
                            }
                        } else {
                            s >> b
                        }
                    }
                    O::ShiftRightLogical => {
                        if (b as u64) >= w as u64 {
                            0
                        } else {
                            (((a as u64) & mask) >> b) as i64
                        }
                    }
                    O::Power => int_pow(a, b, unsigned),
                    _ => return None,
                })
            };
            let mut out = Vec::with_capacity(x.len());
            for (&a, &b) in x.iter().zip(y) {
                out.push(wrap_int(ty, f(a, b).ok_or_else(|| unsupported(inst, "integers"))?));
            }
            Buf::Int(out)
        }
        (Buf::Pred(x), Buf::Pred(y)) => {
            let f: fn(bool, bool) -> bool = match op {
                O::And | O::Minimum | O::Multiply => |a, b| a & b,
                O::Or | O::Maximum | O::Add => |a, b| a | b,
                O::Xor | O::Subtract => |a, b| a ^ b,
                _ => return Err(unsupported(inst, "predicates")),
            };
            Buf::Pred(x.iter().zip(y).map(|(&a, &b)| f(a, b)).collect())
        }
        _ => return Err(EvalError::invalid(inst, "operands of different element types")),
    })
}

/// Integer power by squaring; a negative exponent gives 0 except for bases 1 and -1, as
/// XLA's integer pow does.
fn int_pow(base: i64, exp: i64, unsigned: bool) -> i64 {
    if exp < 0 && !unsigned {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut b, mut e, mut acc) = (base, exp as u64, 1i64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    acc
}

fn compare(inst: &Instruction, a: &Arr, b: &Arr) -> Result<Vec<bool>, EvalError> {
    use std::cmp::Ordering;
    let dir = inst
        .attr_word("direction")
        .and_then(ComparisonDirection::parse)
        .ok_or_else(|| EvalError::invalid(inst, "compare without a valid direction"))?;
    let total = inst.attr_word("type").and_then(ComparisonType::parse) == Some(ComparisonType::TotalOrder);
    let test = move |o: Option<Ordering>| -> bool {
        match (dir, o) {
            (ComparisonDirection::Ne, None) => true,
            (_, None) => false,
            (ComparisonDirection::Eq, Some(o)) => o == Ordering::Equal,
            (ComparisonDirection::Ne, Some(o)) => o != Ordering::Equal,
            (ComparisonDirection::Lt, Some(o)) => o == Ordering::Less,
            (ComparisonDirection::Le, Some(o)) => o != Ordering::Greater,
            (ComparisonDirection::Gt, Some(o)) => o == Ordering::Greater,
            (ComparisonDirection::Ge, Some(o)) => o != Ordering::Less,
        }
    };
    let n = a.len().max(b.len());
    let (a, b) = (broadcast_to(a, n), broadcast_to(b, n));
    Ok(match (&a.buf, &b.buf) {
        (Buf::Float(x), Buf::Float(y)) if total => x.iter().zip(y).map(|(p, q)| test(Some(p.total_cmp(q)))).collect(),
        (Buf::Float(x), Buf::Float(y)) => x.iter().zip(y).map(|(p, q)| test(p.partial_cmp(q))).collect(),
        (Buf::Int(x), Buf::Int(y)) if a.ty == ElementType::U64 => {
            x.iter().zip(y).map(|(&p, &q)| test(Some((p as u64).cmp(&(q as u64))))).collect()
        }
        (Buf::Int(x), Buf::Int(y)) => x.iter().zip(y).map(|(p, q)| test(Some(p.cmp(q)))).collect(),
        (Buf::Pred(x), Buf::Pred(y)) => x.iter().zip(y).map(|(p, q)| test(Some(p.cmp(q)))).collect(),
        _ => return Err(EvalError::invalid(inst, "compare of different element types")),
    })
}

fn select(inst: &Instruction, p: &Arr, t: &Arr, f: &Arr, n: usize) -> Result<Buf, EvalError> {
    let Buf::Pred(p) = &broadcast_to(p, n).buf else {
        return Err(EvalError::invalid(inst, "select predicate is not pred"));
    };
    let (t, f) = (broadcast_to(t, n), broadcast_to(f, n));
    fn pick<T: Copy>(p: &[bool], t: &[T], f: &[T]) -> Vec<T> {
        p.iter().zip(t.iter().zip(f)).map(|(&c, (&a, &b))| if c { a } else { b }).collect()
    }
    Ok(match (&t.buf, &f.buf) {
        (Buf::Pred(a), Buf::Pred(b)) => Buf::Pred(pick(p, a, b)),
        (Buf::Int(a), Buf::Int(b)) => Buf::Int(pick(p, a, b)),
        (Buf::Float(a), Buf::Float(b)) => Buf::Float(pick(p, a, b)),
        _ => return Err(EvalError::invalid(inst, "select branches of different element types")),
    })
}

/// XLA's convert: floats to integers truncate toward zero and saturate, NaN becomes 0.
pub(crate) fn convert(buf: &Buf, from: ElementType, to: ElementType) -> Buf {
    use ElementType as E;
    let to_class = if to == E::Pred {
        0
    } else if to.is_float() {
        2
    } else if to.is_complex() {
        3
    } else {
        1
    };
    match (buf, to_class) {
        (Buf::Pred(_) | Buf::Int(_), 3) => match convert(buf, from, E::F64) {
            Buf::Float(v) => Buf::Complex(v.iter().map(|&x| super::value::round_complex(to, (x, 0.0))).collect()),
            other => other,
        },
        (Buf::Pred(v), 0) => Buf::Pred(v.clone()),
        (Buf::Pred(v), 1) => Buf::Int(v.iter().map(|&b| i64::from(b)).collect()),
        (Buf::Pred(v), _) => Buf::Float(v.iter().map(|&b| if b { 1.0 } else { 0.0 }).collect()),
        (Buf::Int(v), 0) => Buf::Pred(v.iter().map(|&x| x != 0).collect()),
        (Buf::Int(v), 1) => Buf::Int(v.iter().map(|&x| wrap_int(to, x)).collect()),
        (Buf::Int(v), _) => {
            let unsigned64 = from == E::U64;
            Buf::Float(
                v.iter()
                    .map(|&x| match to {
                        E::F64 => {
                            if unsigned64 {
                                (x as u64) as f64
                            } else {
                                x as f64
                            }
                        }
                        // Converting straight to f32 rounds once, as XLA does; narrower
                        // formats round from that f32.
                        _ => {
                            let f = if unsigned64 { (x as u64) as f32 } else { x as f32 };
                            round_float(to, f64::from(f))
                        }
                    })
                    .collect(),
            )
        }
        (Buf::Float(v), 0) => Buf::Pred(v.iter().map(|&x| x != 0.0).collect()),
        (Buf::Float(v), 1) => Buf::Int(
            v.iter()
                .map(|&x| match to {
                    E::S8 => x as i8 as i64,
                    E::S16 => x as i16 as i64,
                    E::S32 => x as i32 as i64,
                    E::U8 => x as u8 as i64,
                    E::U16 => x as u16 as i64,
                    E::U32 => x as u32 as i64,
                    E::U64 => x as u64 as i64,
                    E::S64 => x as i64,
                    // Sub-byte integers saturate to their range like the wider ones.
                    t => {
                        let (lo, hi) = int_range(t);
                        if x.is_nan() {
                            0
                        } else {
                            (x as i64).clamp(lo, hi)
                        }
                    }
                })
                .collect(),
        ),
        (Buf::Float(v), 3) => Buf::Complex(v.iter().map(|&x| super::value::round_complex(to, (x, 0.0))).collect()),
        (Buf::Float(v), _) => Buf::Float(v.iter().map(|&x| round_float(to, x)).collect()),
        (Buf::Complex(v), 3) => Buf::Complex(v.iter().map(|&c| super::value::round_complex(to, c)).collect()),
        // Complex to real keeps the real part.
        (Buf::Complex(v), _) => {
            let part = from.complex_component().unwrap_or(E::F64);
            convert(&Buf::Float(v.iter().map(|c| c.0).collect()), part, to)
        }
    }
}

/// The smallest and largest value of an integer type up to 32 bits wide.
fn int_range(ty: ElementType) -> (i64, i64) {
    let w = ty.bit_width().clamp(1, 63);
    if ty.is_signed_integral() {
        (-(1i64 << (w - 1)), (1i64 << (w - 1)) - 1)
    } else {
        (0, (1i64 << w) - 1)
    }
}

fn to_raw_bits(buf: &Buf, ty: ElementType) -> Vec<u64> {
    match buf {
        Buf::Pred(v) => v.iter().map(|&b| u64::from(b)).collect(),
        Buf::Int(v) => {
            let m = int_mask(ty);
            v.iter().map(|&x| (x as u64) & m).collect()
        }
        Buf::Float(v) => v.iter().map(|&x| super::value::float_to_bits(ty, x)).collect(),
        // Only c64 fits; the caller refuses c128.
        Buf::Complex(v) => {
            v.iter().map(|&(r, i)| u64::from((r as f32).to_bits()) | (u64::from((i as f32).to_bits()) << 32)).collect()
        }
    }
}

fn bitcast(buf: &Buf, from: ElementType, to: ElementType) -> Buf {
    use ElementType as E;
    let bits = to_raw_bits(buf, from);
    match to {
        E::Pred => Buf::Pred(bits.iter().map(|&b| b != 0).collect()),
        E::F16 => Buf::Float(bits.iter().map(|&b| half::f16::from_bits(b as u16).to_f64()).collect()),
        E::BF16 => Buf::Float(bits.iter().map(|&b| half::bf16::from_bits(b as u16).to_f64()).collect()),
        E::F32 => Buf::Float(bits.iter().map(|&b| f64::from(f32::from_bits(b as u32))).collect()),
        E::F64 => Buf::Float(bits.iter().map(|&b| f64::from_bits(b)).collect()),
        E::C64 => Buf::Complex(
            bits.iter()
                .map(|&b| (f64::from(f32::from_bits(b as u32)), f64::from(f32::from_bits((b >> 32) as u32))))
                .collect(),
        ),
        t if t.is_float() => Buf::Float(bits.iter().map(|&b| super::value::float_from_bits(t, b)).collect()),
        _ => Buf::Int(bits.iter().map(|&b| wrap_int(to, b as i64)).collect()),
    }
}

/// erf in f64: the Maclaurin series where it converges quickly, the continued fraction for
/// erfc beyond, so f32 results are correctly rounded or nearly so.
fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        let x2 = a * a;
        let (mut term, mut sum, mut k) = (a, a, 0.0f64);
        loop {
            k += 1.0;
            term *= -x2 / k;
            let add = term / (2.0 * k + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() || k > 200.0 {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else if a < 6.0 {
        // erfc(a) = exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + 2/(a + ...))))).
        let mut f = a;
        for k in (1..80).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (f * std::f64::consts::PI.sqrt())
    } else {
        1.0
    };
    r.copysign(x)
}

/// Bitcast-convert between widths: a narrower result splits each element into a new minor
/// dimension, lowest bits first (little-endian memory order); a wider one joins that dimension.
fn bitcast_resize(inst: &Instruction, a: &Arr, to: ElementType, n: usize) -> Result<Buf, EvalError> {
    let (from_w, to_w) = (u64::from(a.ty.bit_width()), u64::from(to.bit_width()));
    if from_w == 0 || to_w == 0 || from_w > 64 || to_w > 64 {
        return Err(unsupported(inst, "these types"));
    }
    let bits = to_raw_bits(&a.buf, a.ty);
    let out: Vec<u64> = if from_w > to_w {
        let ratio = from_w / to_w;
        let m = int_mask_bits(to_w);
        bits.iter().flat_map(|&b| (0..ratio).map(move |i| (b >> (i * to_w)) & m)).collect()
    } else {
        let ratio = (to_w / from_w) as usize;
        bits.chunks(ratio)
            .map(|c| c.iter().enumerate().fold(0u64, |acc, (i, &b)| acc | (b << (i as u64 * from_w))))
            .collect()
    };
    if out.len() != n {
        return Err(EvalError::invalid(inst, "bitcast-convert result shape does not match its operand"));
    }
    let as_int = Buf::Int(out.into_iter().map(|b| b as i64).collect());
    let carrier = match to_w {
        8 => ElementType::U8,
        16 => ElementType::U16,
        32 => ElementType::U32,
        _ => ElementType::U64,
    };
    Ok(bitcast(&as_int, carrier, to))
}

fn int_mask_bits(w: u64) -> u64 {
    if w >= 64 {
        u64::MAX
    } else {
        (1u64 << w) - 1
    }
}

/// XLA's reduce-precision: round the mantissa to nearest even, then flush exponents out of
/// the reduced range to zero or infinity; NaN stays NaN unless no mantissa bits remain.
fn reduce_precision(x: f64, ty: ElementType, exp_bits: u32, mant_bits: u32) -> f64 {
    let (src_exp, src_mant, total): (u32, u32, u32) = if ty == ElementType::F64 { (11, 52, 64) } else { (8, 23, 32) };
    let mut v: u64 = if total == 64 { x.to_bits() } else { u64::from((x as f32).to_bits()) };
    if mant_bits < src_mant {
        let last = 1u64 << (src_mant - mant_bits);
        let bias = (last >> 1).wrapping_sub(1);
        let lsb = (v & last) >> (src_mant - mant_bits);
        v = v.wrapping_add(lsb + bias) & !(last - 1);
    }
    if exp_bits < src_exp {
        let sign = 1u64 << (total - 1);
        let exp_mask = ((1u64 << src_exp) - 1) << src_mant;
        let exp_bias = (1u64 << (src_exp - 1)) - 1;
        let reduced_bias = (1u64 << (exp_bits - 1)) - 1;
        let (max_e, min_e) = (exp_bias + reduced_bias, exp_bias - reduced_bias);
        let e = v & exp_mask;
        if e > (max_e << src_mant) {
            v = (v & sign) | exp_mask;
        } else if e <= (min_e << src_mant) {
            v &= sign;
        }
    }
    let r = if total == 64 { f64::from_bits(v) } else { f64::from(f32::from_bits(v as u32)) };
    if x.is_nan() {
        if mant_bits > 0 {
            x
        } else {
            f64::INFINITY.copysign(x)
        }
    } else {
        r
    }
}

#[cfg(test)]
mod signed_zero_tests {
    use super::{float_maximum, float_minimum};

    #[test]
    fn minimum_and_maximum_order_negative_zero_below_positive_zero() {
        for (a, b) in [(0.0, -0.0), (-0.0, 0.0)] {
            assert!(float_minimum(a, b).is_sign_negative(), "minimum({a}, {b})");
            assert!(float_maximum(a, b).is_sign_positive(), "maximum({a}, {b})");
        }
        assert!(float_minimum(f64::NAN, 1.0).is_nan() && float_maximum(1.0, f64::NAN).is_nan());
        assert_eq!((float_minimum(1.0, 2.0), float_maximum(1.0, 2.0)), (1.0, 2.0));
    }
}
