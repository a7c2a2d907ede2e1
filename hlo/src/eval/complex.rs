//! Elementwise ops on complex numbers (c64, c128), and `complex`, `real`, `imag`.
//!
//! Values are (real, imaginary) pairs in f64; each result is rounded part by part to the
//! component type, so c64 arithmetic is computed in f64 and rounded once.

use super::elementwise::{broadcast_to, convert};
use super::value::{round_complex, round_float};
use super::{result_array, Arr, Buf, EvalError};
use crate::ir::{AttrList, ComparisonDirection, Instruction, Opcode};

type C = (f64, f64);

/// Whether `inst` is one this module evaluates: the complex-only opcodes, and any elementwise
/// op with a complex operand or result.
pub(crate) fn handles(inst: &Instruction, ops: &[&Arr]) -> bool {
    matches!(inst.opcode, Opcode::Complex | Opcode::Real | Opcode::Imag)
        || (inst.opcode.is_elementwise()
            && inst.opcode != Opcode::BitcastConvert
            && (ops.iter().any(|o| o.ty.is_complex())
                || inst.shape.as_array().is_some_and(|a| a.element_type.is_complex())))
}

fn unsupported(inst: &Instruction) -> EvalError {
    EvalError::Unsupported { opcode: format!("{} on complex numbers", inst.opcode.name()) }
}

/// The operand as complex values (real operands get a zero imaginary part), one per result
/// element (scalars are broadcast).
fn as_complex(inst: &Instruction, a: &Arr, n: usize) -> Result<Vec<C>, EvalError> {
    let a = broadcast_to(a, n);
    match &a.buf {
        Buf::Complex(v) => Ok(v.clone()),
        Buf::Float(v) => Ok(v.iter().map(|&x| (x, 0.0)).collect()),
        _ => Err(EvalError::invalid(inst, "expected a complex or floating-point operand")),
    }
}

pub(crate) fn eval(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    use Opcode as O;
    let (ty, dims) = result_array(inst)?;
    let n: usize = dims.iter().product::<i64>() as usize;
    for o in ops {
        if o.len() != n && o.len() != 1 {
            return Err(EvalError::invalid(inst, "operand element count differs from the result's"));
        }
    }
    let arity = |k: usize| -> Result<(), EvalError> {
        if ops.len() == k {
            Ok(())
        } else {
            Err(EvalError::invalid(inst, format!("expected {k} operands, found {}", ops.len())))
        }
    };
    let buf = match inst.opcode {
        O::Complex => {
            arity(2)?;
            let (Buf::Float(re), Buf::Float(im)) = (&broadcast_to(ops[0], n).buf, &broadcast_to(ops[1], n).buf) else {
                return Err(EvalError::invalid(inst, "complex needs floating-point parts"));
            };
            Buf::Complex(re.iter().zip(im).map(|(&r, &i)| round_complex(ty, (r, i))).collect())
        }
        O::Real | O::Imag => {
            arity(1)?;
            let v = as_complex(inst, ops[0], n)?;
            let pick = if inst.opcode == O::Real { |c: &C| c.0 } else { |c: &C| c.1 };
            Buf::Float(v.iter().map(|c| round_float(ty, pick(c))).collect())
        }
        O::Convert => {
            arity(1)?;
            convert(&ops[0].buf, ops[0].ty, ty)
        }
        O::Select => {
            arity(3)?;
            let Buf::Pred(p) = &broadcast_to(ops[0], n).buf else {
                return Err(EvalError::invalid(inst, "select predicate is not pred"));
            };
            let (t, f) = (as_complex(inst, ops[1], n)?, as_complex(inst, ops[2], n)?);
            Buf::Complex(p.iter().zip(t.iter().zip(&f)).map(|(&c, (&a, &b))| if c { a } else { b }).collect())
        }
        O::Compare => {
            arity(2)?;
            let (a, b) = (as_complex(inst, ops[0], n)?, as_complex(inst, ops[1], n)?);
            let eq = match inst.attr_word("direction").and_then(ComparisonDirection::parse) {
                Some(ComparisonDirection::Eq) => true,
                Some(ComparisonDirection::Ne) => false,
                _ => return Err(unsupported(inst)),
            };
            // IEEE equality per part: NaN parts are unequal.
            Buf::Pred(a.iter().zip(&b).map(|(x, y)| (x.0 == y.0 && x.1 == y.1) == eq).collect())
        }
        O::Abs => {
            arity(1)?;
            let v = as_complex(inst, ops[0], n)?;
            Buf::Float(v.iter().map(|c| round_float(ty, c.0.hypot(c.1))).collect())
        }
        O::IsFinite => return Err(unsupported(inst)),
        op if op.is_elementwise_binary() => {
            arity(2)?;
            let (a, b) = (as_complex(inst, ops[0], n)?, as_complex(inst, ops[1], n)?);
            let f: fn(C, C) -> C = match op {
                O::Add => |a, b| (a.0 + b.0, a.1 + b.1),
                O::Subtract => |a, b| (a.0 - b.0, a.1 - b.1),
                O::Multiply => mul,
                O::Divide => div,
                O::Power => pow,
                _ => return Err(unsupported(inst)),
            };
            Buf::Complex(a.iter().zip(&b).map(|(&x, &y)| round_complex(ty, f(x, y))).collect())
        }
        op => {
            arity(1)?;
            let v = as_complex(inst, ops[0], n)?;
            let f: fn(C) -> C = match op {
                O::Negate => |a| (-a.0, -a.1),
                O::Exp => exp,
                O::Log => log,
                O::Sqrt => sqrt,
                O::Rsqrt => |a| div((1.0, 0.0), sqrt(a)),
                O::Expm1 => |a| {
                    let e = exp(a);
                    (e.0 - 1.0, e.1)
                },
                O::Log1p => |a| log((a.0 + 1.0, a.1)),
                O::Sign => |a| {
                    let r = a.0.hypot(a.1);
                    if r == 0.0 || r.is_nan() {
                        a
                    } else {
                        (a.0 / r, a.1 / r)
                    }
                },
                O::Sin => |a| (a.0.sin() * a.1.cosh(), a.0.cos() * a.1.sinh()),
                O::Cos => |a| (a.0.cos() * a.1.cosh(), -a.0.sin() * a.1.sinh()),
                O::Tanh => |a| {
                    let (e, m) = (exp(a), exp((-a.0, -a.1)));
                    div((e.0 - m.0, e.1 - m.1), (e.0 + m.0, e.1 + m.1))
                },
                _ => return Err(unsupported(inst)),
            };
            Buf::Complex(v.iter().map(|&x| round_complex(ty, f(x))).collect())
        }
    };
    Ok(Arr { ty, dims, buf })
}

pub(crate) fn mul(a: C, b: C) -> C {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

/// Smith's algorithm: scales by the larger part of the divisor so neither overflows early.
pub(crate) fn div(a: C, b: C) -> C {
    if b.1 == 0.0 {
        return (a.0 / b.0, a.1 / b.0);
    }
    if b.0.abs() >= b.1.abs() {
        let r = b.1 / b.0;
        let d = b.0 + b.1 * r;
        ((a.0 + a.1 * r) / d, (a.1 - a.0 * r) / d)
    } else {
        let r = b.0 / b.1;
        let d = b.0 * r + b.1;
        ((a.0 * r + a.1) / d, (a.1 * r - a.0) / d)
    }
}

fn exp(a: C) -> C {
    let m = a.0.exp();
    // exp(x + 0i) stays real even when exp(x) is infinite (inf * sin(0) would be NaN).
    if a.1 == 0.0 {
        return (m, a.1);
    }
    (m * a.1.cos(), m * a.1.sin())
}

fn log(a: C) -> C {
    (a.0.hypot(a.1).ln(), a.1.atan2(a.0))
}

/// The principal square root, computed without cancellation.
fn sqrt(a: C) -> C {
    let (x, y) = a;
    if x == 0.0 && y == 0.0 {
        return (0.0, y);
    }
    let t = ((x.abs() + x.hypot(y)) / 2.0).sqrt();
    if x >= 0.0 {
        (t, y / (2.0 * t))
    } else {
        (y.abs() / (2.0 * t), t.copysign(y))
    }
}

/// a^b = exp(b log a); for a = 0, XLA:CPU gives 1 for b = 0, 0 for a positive real b and
/// NaN otherwise.
fn pow(a: C, b: C) -> C {
    if a == (0.0, 0.0) {
        return if b == (0.0, 0.0) {
            (1.0, 0.0)
        } else if b.1 == 0.0 && b.0 > 0.0 {
            (0.0, 0.0)
        } else {
            (f64::NAN, f64::NAN)
        };
    }
    exp(mul(b, log(a)))
}

/// dot on complex operands as four real dots in f64: (a + bi)(c + di) = (ac - bd) + (ad + bc)i.
pub(crate) fn dot(inst: &Instruction, ops: &[&Arr]) -> Result<Arr, EvalError> {
    let (ty, dims) = result_array(inst)?;
    let [lhs, rhs] = ops else {
        return Err(EvalError::invalid(inst, "dot needs two operands"));
    };
    let mut real = inst.clone();
    real.shape = crate::shape::Shape::array(crate::element_type::ElementType::F64, &dims);
    let parts = |a: &Arr| -> Result<(Arr, Arr), EvalError> {
        let v = as_complex(inst, a, a.len())?;
        let mk = |f: fn(&C) -> f64| Arr {
            ty: crate::element_type::ElementType::F64,
            dims: a.dims.clone(),
            buf: Buf::Float(v.iter().map(f).collect()),
        };
        Ok((mk(|c| c.0), mk(|c| c.1)))
    };
    let ((a, b), (c, d)) = (parts(lhs)?, parts(rhs)?);
    let prod = |x: &Arr, y: &Arr| -> Result<Vec<f64>, EvalError> {
        match super::dot::dot(&real, &[x, y])?.buf {
            Buf::Float(v) => Ok(v),
            _ => Err(EvalError::invalid(inst, "real dot did not give floats")),
        }
    };
    let (ac, bd, ad, bc) = (prod(&a, &c)?, prod(&b, &d)?, prod(&a, &d)?, prod(&b, &c)?);
    let out = (0..ac.len()).map(|i| round_complex(ty, (ac[i] - bd[i], ad[i] + bc[i]))).collect();
    Ok(Arr { ty, dims, buf: Buf::Complex(out) })
}
