//! Elementwise ops: unary, binary, compare, select, clamp, map and the conversions.
//!
//! HLO has no implicit broadcasting (the verifier rejects it even for scalars), so binary
//! operands must have equal dimensions; and without mixed precision their element types must
//! be equal too.

use super::{array, ash, dims_eq, is_dyn, list, plain, scalar_type, sh, with_type, Ctx, Res};
use crate::element_type::ElementType;
use crate::ir::{ComparisonDirection, ComparisonType, Opcode};
use crate::shape::{ArrayShape, Shape};

/// Which element types an elementwise op accepts, in XLA's words for the message.
fn type_ok(op: Opcode, t: ElementType) -> Result<(), &'static str> {
    use Opcode::*;
    let ok = match op {
        Abs | Sign => t.is_signed_integral() || t.is_float() || t.is_complex(),
        Negate => t.is_integral() || t.is_float() || t.is_complex(),
        Floor | Ceil | RoundNearestAfz | RoundNearestEven | IsFinite | Erf => t.is_float(),
        Cos | Sin | Tan | Exp | Expm1 | Log | Log1p | Logistic | Rsqrt | Sqrt | Cbrt | Tanh | Real | Imag => {
            t.is_floating_or_complex()
        }
        Not | And | Or | Xor => t.is_pred() || t.is_integral(),
        PopulationCount | Clz | ShiftLeft | ShiftRightArithmetic | ShiftRightLogical => t.is_integral(),
        Atan2 | Complex => t.is_float() || (op == Atan2 && t.is_complex()),
        Add | Subtract | Multiply | Divide | Remainder | Maximum | Minimum | Power => t.is_array_type(),
        _ => true,
    };
    if ok {
        return Ok(());
    }
    Err(match op {
        Abs | Sign => "signed, floating or complex",
        Negate => "integral, floating or complex",
        Floor | Ceil | RoundNearestAfz | RoundNearestEven | IsFinite | Erf => "floating",
        Not | And | Or | Xor => "pred or integral",
        PopulationCount | Clz | ShiftLeft | ShiftRightArithmetic | ShiftRightLogical => "integral",
        Complex => "f32 or f64",
        Atan2 => "floating or complex",
        _ => "floating or complex",
    })
}

fn check_type(cx: &Ctx, a: &ArrayShape) -> Res<()> {
    if let Err(want) = type_ok(cx.opcode(), a.element_type) {
        bail!("elementwise.operand_type", "{} expects {} operands but got {}", cx.opcode(), want, ash(a));
    }
    Ok(())
}

pub fn unary(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    check_type(cx, a)?;
    let et = a.element_type;
    Ok(match cx.opcode() {
        Opcode::IsFinite => with_type(a, ElementType::Pred),
        Opcode::Abs | Opcode::Real | Opcode::Imag => with_type(a, et.complex_component().unwrap_or(et)),
        _ => plain(a),
    })
}

/// `copy` copies any value, tuples included.
pub fn copy(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    Ok(cx.op(0)?.without_layout())
}

pub fn reduce_precision(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    if !a.element_type.is_float() {
        bail!("reduce_precision.operand_type", "reduce-precision expects a floating-point operand but got {}", ash(a));
    }
    let exponent = cx.int("exponent_bits")?;
    let mantissa = cx.int("mantissa_bits")?;
    if exponent < 1 {
        bail!("reduce_precision.bits", "exponent_bits={exponent} must be at least 1");
    }
    if mantissa < 0 {
        bail!("reduce_precision.bits", "mantissa_bits={mantissa} must not be negative");
    }
    Ok(plain(a))
}

pub fn convert(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    let to = cx.declared_array()?.element_type;
    if !to.is_array_type() {
        bail!("convert.type", "convert cannot produce {to}");
    }
    if a.element_type.is_complex() && !to.is_complex() {
        bail!("convert.type", "conversion from complex {} to real {} is not implemented", ash(a), to);
    }
    Ok(with_type(a, to))
}

/// Same bit width keeps the dimensions; a narrower target adds a minor dimension of the width
/// ratio, a wider target consumes one.
pub fn bitcast_convert(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let a = cx.arr(0)?;
    let d = cx.declared_array()?;
    let (from, to) = (a.element_type, d.element_type);
    let (fb, tb) = (from.bit_width(), to.bit_width());
    if fb == 0 || tb == 0 {
        bail!("bitcast_convert.type", "bitcast-convert between {} and {} is not defined", from, to);
    }
    if from.is_pred() != to.is_pred() && fb != tb {
        bail!("bitcast_convert.type", "bitcast-convert between {} and {} is not defined", from, to);
    }
    if fb == tb {
        return Ok(with_type(a, to));
    }
    if fb > tb {
        if fb % tb != 0 {
            bail!("bitcast_convert.type", "bit width {fb} of {from} is not a multiple of {tb} of {to}");
        }
        let mut dims = a.dims.clone();
        let mut dynamic = a.dynamic.clone();
        dims.push(i64::from(fb / tb));
        dynamic.push(false);
        return Ok(array(to, dims, dynamic));
    }
    if tb % fb != 0 {
        bail!("bitcast_convert.type", "bit width {tb} of {to} is not a multiple of {fb} of {from}");
    }
    let ratio = i64::from(tb / fb);
    match a.dims.last() {
        Some(&last) if last == ratio => {
            let n = a.dims.len() - 1;
            Ok(array(to, a.dims[..n].to_vec(), a.dynamic.get(..n).map(<[bool]>::to_vec).unwrap_or_default()))
        }
        _ => bail!(
            "bitcast_convert.shape",
            "bitcast-convert from {} to wider {} needs a last dimension of size {}",
            ash(a),
            to,
            ratio
        ),
    }
}

pub fn stochastic_convert(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    let a = cx.arr(0)?;
    let r = cx.arr(1)?;
    if !a.element_type.is_float() {
        bail!("stochastic_convert.type", "stochastic-convert expects a floating-point operand but got {}", ash(a));
    }
    if !r.element_type.is_unsigned_integral() || r.element_type.bit_width() != a.element_type.bit_width() {
        bail!(
            "stochastic_convert.type",
            "stochastic-convert random bits {} must be unsigned of the operand's width ({})",
            ash(r),
            ash(a)
        );
    }
    if !dims_eq(&a.dims, &r.dims) {
        bail!("elementwise.dims_mismatch", "stochastic-convert operand {} and random bits {} differ", ash(a), ash(r));
    }
    Ok(with_type(a, cx.declared_array()?.element_type))
}

/// Two operands of equal dimensions; the dynamic flags of the result join both.
fn same_dims(cx: &Ctx, a: &ArrayShape, b: &ArrayShape) -> Res<Vec<bool>> {
    if !dims_eq(&a.dims, &b.dims) {
        bail!(
            "elementwise.dims_mismatch",
            "{} operands must have equal dimensions (HLO has no implicit broadcast): {} vs {}",
            cx.opcode(),
            ash(a),
            ash(b)
        );
    }
    Ok((0..a.dims.len()).map(|i| is_dyn(a, i) || is_dyn(b, i)).collect())
}

pub fn binary(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    let a = cx.arr(0)?;
    let b = cx.arr(1)?;
    if a.element_type != b.element_type {
        bail!(
            "elementwise.type_mismatch",
            "{} operands must have the same element type: {} vs {}",
            cx.opcode(),
            ash(a),
            ash(b)
        );
    }
    check_type(cx, a)?;
    let dynamic = same_dims(cx, a, b)?;
    let et = match cx.opcode() {
        Opcode::Complex => match a.element_type {
            ElementType::F32 => ElementType::C64,
            _ => ElementType::C128,
        },
        _ => a.element_type,
    };
    if cx.opcode() == Opcode::Complex && !matches!(a.element_type, ElementType::F32 | ElementType::F64) {
        bail!("elementwise.operand_type", "complex expects f32 or f64 operands but got {}", ash(a));
    }
    Ok(array(et, a.dims.clone(), dynamic))
}

pub fn compare(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    let a = cx.arr(0)?;
    let b = cx.arr(1)?;
    cx.word("direction", ComparisonDirection::parse)?;
    if cx.attr("type").is_some() {
        let ty = cx.word("type", ComparisonType::parse)?;
        let fits = match ty {
            ComparisonType::Float | ComparisonType::TotalOrder => a.element_type.is_floating_or_complex(),
            ComparisonType::Signed => a.element_type.is_signed_integral(),
            ComparisonType::Unsigned => a.element_type.is_unsigned_integral() || a.element_type.is_pred(),
        };
        if !fits {
            bail!("compare.type", "comparison type {} does not fit operands {}", ty, ash(a));
        }
    }
    if a.element_type != b.element_type {
        bail!(
            "elementwise.type_mismatch",
            "compare operands must have the same element type: {} vs {}",
            ash(a),
            ash(b)
        );
    }
    let dynamic = same_dims(cx, a, b)?;
    Ok(array(ElementType::Pred, a.dims.clone(), dynamic))
}

/// `select(pred, on_true, on_false)`: the predicate has the branches' dimensions or is a
/// scalar (the restricted broadcast the operation semantics allow).
pub fn select(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(3)?;
    let p = cx.arr(0)?;
    let t = cx.op(1)?;
    let f = cx.op(2)?;
    if !p.element_type.is_pred() {
        bail!("select.pred_type", "select predicate must be pred but is {}", ash(p));
    }
    if !t.compatible(f) {
        bail!("select.branch_mismatch", "select branches differ: on_true {} vs on_false {}", sh(t), sh(f));
    }
    match t {
        Shape::Array(ta) => {
            if !p.dims.is_empty() && !dims_eq(&p.dims, &ta.dims) {
                bail!(
                    "select.pred_dims",
                    "select predicate {} must be a scalar or match the branches {}",
                    ash(p),
                    ash(ta)
                );
            }
        }
        Shape::Tuple(_) => {
            if !p.dims.is_empty() {
                bail!("select.pred_dims", "select between tuples needs a scalar predicate but got {}", ash(p));
            }
        }
        other => bail!("select.branch_mismatch", "select cannot choose between {} values", sh(other)),
    }
    Ok(t.without_layout())
}

/// `clamp(min, operand, max)`: min and max are scalars or shaped like the operand.
pub fn clamp(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(3)?;
    let lo = cx.arr(0)?;
    let x = cx.arr(1)?;
    let hi = cx.arr(2)?;
    for (what, bound) in [("min", lo), ("max", hi)] {
        if bound.element_type != x.element_type {
            bail!(
                "clamp.type_mismatch",
                "clamp {} {} must have the operand's element type ({})",
                what,
                ash(bound),
                ash(x)
            );
        }
        if !bound.dims.is_empty() && !dims_eq(&bound.dims, &x.dims) {
            bail!(
                "clamp.dims_mismatch",
                "clamp {} {} must be a scalar or match the operand {}",
                what,
                ash(bound),
                ash(x)
            );
        }
    }
    if x.element_type.is_complex() {
        bail!("clamp.type", "clamp is not defined on complex values ({})", ash(x));
    }
    Ok(plain(x))
}

/// `map(operands..), to_apply=f`: f takes one scalar per operand, of that operand's element
/// type, and returns a scalar; the result has the operands' dimensions and f's result type.
pub fn map(cx: &Ctx) -> Res<Shape> {
    cx.expect_at_least(1)?;
    let first = cx.arr(0)?;
    for i in 1..cx.ops.len() {
        let a = cx.arr(i)?;
        if !dims_eq(&a.dims, &first.dims) {
            bail!("map.dims_mismatch", "map operands must have equal dimensions: {} vs {}", ash(first), ash(a));
        }
    }
    if let Some(dims) = cx.attr("dimensions").map(|_| cx.ints("dimensions")).transpose()? {
        let identity: Vec<i64> = (0..first.dims.len() as i64).collect();
        if dims != identity.as_slice() {
            bail!("map.dimensions", "map dimensions {} must be all operand dimensions in order", list(dims));
        }
    }
    let f = cx.comp("to_apply")?;
    if f.parameters.len() != cx.ops.len() {
        bail!(
            "map.computation_signature",
            "map applies a computation of {} parameters to {} operands",
            f.parameters.len(),
            cx.ops.len()
        );
    }
    for (i, p) in f.parameters.iter().enumerate() {
        let want = cx.arr(i)?.element_type;
        if scalar_type(p) != Some(want) {
            bail!("map.computation_signature", "map computation parameter {i} is {} but must be {}[]", sh(p), want);
        }
    }
    let Some(out) = scalar_type(&f.result) else {
        bail!("map.computation_signature", "map computation must return a scalar but returns {}", sh(&f.result));
    };
    Ok(with_type(first, out))
}
