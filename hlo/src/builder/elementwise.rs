//! Element-wise ops: unary and binary arithmetic with XLA's builder broadcasting (seed 003's
//! "Broadcasting semantics"), comparisons, select, clamp, conversions, and the operator
//! overloads on [`XlaOp`].

use std::ops;

use super::types::*;
use super::{Builder, OpResult, Spec, XlaOp};
use crate::element_type::ElementType;
use crate::ir::{AttrValue, Opcode};
use crate::shape::{ArrayShape, Shape};

/// The result dimensions of a broadcasting binary op (seed 003, "Broadcasting semantics"):
/// a scalar goes with anything; arrays of different ranks need `broadcast_dimensions`
/// mapping each dimension of the lower-rank one to a dimension of the higher-rank one, in
/// strictly increasing order; then same-rank dimensions must be equal or one of them 1.
fn broadcast_result_dims(lhs: &[i64], rhs: &[i64], broadcast_dimensions: &[i64]) -> OpResult<Vec<i64>> {
    let degenerate = |a: &[i64], b: &[i64]| -> OpResult<Vec<i64>> {
        a.iter()
            .zip(b)
            .enumerate()
            .map(|(i, (&x, &y))| match (x, y) {
                _ if x == y => Ok(x),
                (1, _) => Ok(y),
                (_, 1) => Ok(x),
                _ => Err(format!(
                    "dimension {i} has sizes {x} and {y}, which are incompatible (neither is 1) in {a:?} and {b:?}"
                )),
            })
            .collect()
    };
    if lhs.len() == rhs.len() {
        if !broadcast_dimensions.is_empty() && broadcast_dimensions != iota_dims(lhs.len()).as_slice() {
            return Err(format!(
                "broadcast_dimensions {broadcast_dimensions:?} must be empty or the identity for operands of the same \
                 rank {}",
                lhs.len()
            ));
        }
        return degenerate(lhs, rhs);
    }
    let (small, large) = if lhs.len() < rhs.len() { (lhs, rhs) } else { (rhs, lhs) };
    if small.is_empty() {
        if !broadcast_dimensions.is_empty() {
            return Err(format!("broadcast_dimensions {broadcast_dimensions:?} given for a scalar operand"));
        }
        return Ok(large.to_vec());
    }
    if broadcast_dimensions.is_empty() {
        return Err(format!(
            "operands of shapes {lhs:?} and {rhs:?} have different ranks; broadcast_dimensions must say which \
             dimensions of the higher-rank one the lower-rank one maps to"
        ));
    }
    if broadcast_dimensions.len() != small.len() {
        return Err(format!(
            "broadcast_dimensions {broadcast_dimensions:?} has {} entries for the rank-{} operand",
            broadcast_dimensions.len(),
            small.len()
        ));
    }
    if let Some(&d) = broadcast_dimensions.iter().find(|&&d| d < 0 || d as usize >= large.len()) {
        return Err(format!("broadcast dimension {d} is out of range for rank {}", large.len()));
    }
    if broadcast_dimensions.windows(2).any(|w| w[1] <= w[0]) {
        return Err(format!("broadcast_dimensions {broadcast_dimensions:?} must be strictly increasing"));
    }
    let mut expanded = vec![1; large.len()];
    for (i, (&d, &size)) in broadcast_dimensions.iter().zip(small).enumerate() {
        let slot = d as usize;
        if size != large[slot] && size != 1 && large[slot] != 1 {
            return Err(format!(
                "broadcast dimension {i} (size {size}) does not match dimension {d} (size {}) of {large:?}",
                large[slot]
            ));
        }
        expanded[slot] = size;
    }
    degenerate(&expanded, large)
}

macro_rules! unary_ops {
    ($($(#[$doc:meta])* $name:ident => $opcode:ident;)*) => {
        impl Builder {
            $($(#[$doc])*
            pub fn $name<'b>(&'b self, operand: XlaOp<'b>) -> XlaOp<'b> {
                self.op(stringify!($name), || self.emit(Spec::new(Opcode::$opcode), &[operand]))
            })*
        }
    };
}

unary_ops! {
    /// `|x|`; for complex numbers the modulus.
    abs => Abs;
    cbrt => Cbrt;
    ceil => Ceil;
    /// Count of leading zero bits.
    clz => Clz;
    cos => Cos;
    erf => Erf;
    exp => Exp;
    /// `e^x - 1`.
    expm1 => Expm1;
    floor => Floor;
    /// Imaginary part of a complex number.
    imag => Imag;
    is_finite => IsFinite;
    log => Log;
    /// `ln(1 + x)`.
    log1p => Log1p;
    /// `1 / (1 + e^-x)`.
    logistic => Logistic;
    neg => Negate;
    /// Logical not of a pred, bitwise not of an integer.
    not => Not;
    /// Count of set bits.
    population_count => PopulationCount;
    /// Real part of a complex number.
    real => Real;
    /// Rounds half away from zero.
    round => RoundNearestAfz;
    /// Rounds half to even.
    round_nearest_even => RoundNearestEven;
    rsqrt => Rsqrt;
    sign => Sign;
    sin => Sin;
    sqrt => Sqrt;
    tan => Tan;
    tanh => Tanh;
    copy => Copy;
}

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident, $bcast:ident => $opcode:ident;)*) => {
        impl Builder {
            $($(#[$doc])*
            ///
            /// Operands of the same shape, or a scalar with an array, or arrays that differ
            /// only in size-1 dimensions; use the `_broadcast` variant for different ranks.
            pub fn $name<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>) -> XlaOp<'b> {
                self.binary(stringify!($name), Spec::new(Opcode::$opcode), lhs, rhs, &[])
            }

            $(#[$doc])*
            ///
            /// `broadcast_dimensions` maps each dimension of the lower-rank operand to a
            /// dimension of the higher-rank one (seed 003's broadcasting semantics).
            pub fn $bcast<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>, broadcast_dimensions: &[i64]) -> XlaOp<'b> {
                self.binary(stringify!($name), Spec::new(Opcode::$opcode), lhs, rhs, broadcast_dimensions)
            })*
        }
    };
}

binary_ops! {
    /// Element-wise `lhs + rhs`.
    add, add_broadcast => Add;
    /// Element-wise `lhs - rhs`.
    sub, sub_broadcast => Subtract;
    /// Element-wise `lhs * rhs`.
    mul, mul_broadcast => Multiply;
    /// Element-wise `lhs / rhs`.
    div, div_broadcast => Divide;
    /// Element-wise remainder, with the sign of the dividend.
    rem, rem_broadcast => Remainder;
    /// Element-wise maximum (NaN-propagating).
    max, max_broadcast => Maximum;
    /// Element-wise minimum (NaN-propagating).
    min, min_broadcast => Minimum;
    /// Element-wise `lhs ^ rhs`.
    pow, pow_broadcast => Power;
    /// Element-wise `atan2(lhs, rhs)`.
    atan2, atan2_broadcast => Atan2;
    /// Element-wise logical/bitwise and.
    and, and_broadcast => And;
    /// Element-wise logical/bitwise or.
    or, or_broadcast => Or;
    /// Element-wise logical/bitwise xor.
    xor, xor_broadcast => Xor;
    /// Element-wise `lhs << rhs`.
    shift_left, shift_left_broadcast => ShiftLeft;
    /// Element-wise arithmetic `lhs >> rhs`.
    shift_right_arithmetic, shift_right_arithmetic_broadcast => ShiftRightArithmetic;
    /// Element-wise logical `lhs >> rhs`.
    shift_right_logical, shift_right_logical_broadcast => ShiftRightLogical;
    /// The complex number `lhs + i*rhs`.
    complex, complex_broadcast => Complex;
}

macro_rules! compare_ops {
    ($($name:ident => $dir:ident;)*) => {
        impl Builder {
            $(#[doc = concat!("Element-wise comparison with `direction=", stringify!($dir), "`.")]
            pub fn $name<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>) -> XlaOp<'b> {
                self.compare(lhs, rhs, ComparisonDirection::$dir)
            })*
        }
    };
}

compare_ops! {
    eq => Eq;
    ne => Ne;
    ge => Ge;
    gt => Gt;
    le => Le;
    lt => Lt;
}

impl Builder {
    // ---- Element-wise ---------------------------------------------------------------------

    /// A binary element-wise op with XLA's builder broadcasting, lowered to explicit HLO.
    fn binary<'b>(&'b self, name: &str, spec: Spec, lhs: XlaOp<'b>, rhs: XlaOp<'b>, dims: &[i64]) -> XlaOp<'b> {
        self.op(name, || {
            let (lhs, rhs) = self.broadcast_operands(lhs, rhs, dims)?;
            self.emit(spec, &[lhs, rhs])
        })
    }

    /// Makes two operands the same shape as seed 003's broadcasting semantics say (XLA's
    /// `BinaryOp`): the lower-rank operand is broadcast in-dim to the higher rank keeping its
    /// own sizes, then every operand whose dimensions still differ from the result is
    /// reshaped to drop its size-1 dimensions and broadcast to the result.
    pub(super) fn broadcast_operands<'b>(
        &'b self,
        lhs: XlaOp<'b>,
        rhs: XlaOp<'b>,
        dims: &[i64],
    ) -> OpResult<(XlaOp<'b>, XlaOp<'b>)> {
        let (Shape::Array(la), Shape::Array(ra)) = (self.shape(lhs)?, self.shape(rhs)?) else {
            // Tuples and tokens do not broadcast; the shape inference judges them.
            if !dims.is_empty() {
                return Err("broadcast_dimensions given for non-array operands".to_string());
            }
            return Ok((lhs, rhs));
        };
        let out = broadcast_result_dims(&la.dims, &ra.dims, dims)?;
        let mut operands = [(lhs, la), (rhs, ra)];
        for (op, shape) in &mut operands {
            if shape.rank() > 0 && shape.rank() < out.len() {
                let mut sizes = out.clone();
                for (&d, &size) in dims.iter().zip(&shape.dims) {
                    sizes[d as usize] = size;
                }
                *op = self.in_dim_broadcast(*op, shape.element_type, &sizes, dims)?;
                *shape = ArrayShape::new(shape.element_type, &sizes);
            }
            if shape.dims != out {
                *op = self.broadcast_sequence(*op, shape, &out)?;
            }
        }
        let [(lhs, _), (rhs, _)] = operands;
        Ok((lhs, rhs))
    }

    /// An HLO `broadcast` whose operand dimension `i` becomes result dimension `dims[i]`.
    pub(super) fn in_dim_broadcast<'b>(
        &'b self,
        op: XlaOp<'b>,
        ty: ElementType,
        out: &[i64],
        dims: &[i64],
    ) -> OpResult<XlaOp<'b>> {
        let spec = Spec::new(Opcode::Broadcast).declared(Shape::array(ty, out)).attr("dimensions", ints(dims));
        self.emit(spec, &[op])
    }

    /// Broadcasts a scalar, or an array of the result's rank with size-1 dimensions where the
    /// result has others, to the result dimensions (XLA's `AddBroadcastSequence`).
    fn broadcast_sequence<'b>(&'b self, op: XlaOp<'b>, shape: &ArrayShape, out: &[i64]) -> OpResult<XlaOp<'b>> {
        let ty = shape.element_type;
        if shape.rank() == 0 {
            return self.in_dim_broadcast(op, ty, out, &[]);
        }
        let mut kept = Vec::new();
        let mut kept_sizes = Vec::new();
        for (i, (&have, &want)) in shape.dims.iter().zip(out).enumerate() {
            if have == want {
                kept.push(i as i64);
                kept_sizes.push(have);
            } else if have != 1 {
                return Err(format!("cannot broadcast dimension {i} of size {have} to size {want}"));
            }
        }
        let reshaped = self.emit(Spec::new(Opcode::Reshape).declared(Shape::array(ty, &kept_sizes)), &[op])?;
        self.in_dim_broadcast(reshaped, ty, out, &kept)
    }

    /// Broadcasts scalar operands among `ops` to the dimensions of the first array operand
    /// that is not a scalar, as XLA's builder does for `select` and `clamp`.
    fn broadcast_scalars<'b>(&'b self, ops: &mut [XlaOp<'b>]) -> OpResult<()> {
        let shapes = ops.iter().map(|&o| self.shape(o)).collect::<OpResult<Vec<_>>>()?;
        let Some(target) = shapes.iter().filter_map(Shape::as_array).find(|a| a.rank() > 0).map(|a| a.dims.clone())
        else {
            return Ok(());
        };
        for (op, shape) in ops.iter_mut().zip(&shapes) {
            if let Shape::Array(a) = shape {
                if a.rank() == 0 {
                    *op = self.in_dim_broadcast(*op, a.element_type, &target, &[])?;
                }
            }
        }
        Ok(())
    }

    /// Element-wise comparison (`compare(lhs, rhs), direction=..`).
    pub fn compare<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>, direction: ComparisonDirection) -> XlaOp<'b> {
        self.compare_full(lhs, rhs, &[], direction, None)
    }

    /// Element-wise comparison with broadcasting and an explicit comparison type (printed
    /// as `type=` when it is not the element type's default, e.g. `TOTALORDER` for floats).
    pub fn compare_full<'b>(
        &'b self,
        lhs: XlaOp<'b>,
        rhs: XlaOp<'b>,
        broadcast_dimensions: &[i64],
        direction: ComparisonDirection,
        comparison_type: Option<ComparisonType>,
    ) -> XlaOp<'b> {
        self.op("compare", || {
            let mut spec = Spec::new(Opcode::Compare).attr("direction", enum_attr(direction.name()));
            if let Some(t) = comparison_type {
                let ty = self.shape(lhs)?.element_type();
                if t != default_comparison_type(ty) {
                    spec = spec.attr("type", enum_attr(t.name()));
                }
            }
            let (lhs, rhs) = self.broadcast_operands(lhs, rhs, broadcast_dimensions)?;
            self.emit(spec, &[lhs, rhs])
        })
    }

    /// `on_true` where `pred` holds, `on_false` elsewhere; a scalar `pred` (or branch) is
    /// broadcast to the others' shape.
    pub fn select<'b>(&'b self, pred: XlaOp<'b>, on_true: XlaOp<'b>, on_false: XlaOp<'b>) -> XlaOp<'b> {
        self.op("select", || {
            let mut ops = [pred, on_true, on_false];
            self.broadcast_scalars(&mut ops)?;
            self.emit(Spec::new(Opcode::Select), &ops)
        })
    }

    /// `operand` limited to `[min, max]`; scalar bounds are broadcast.
    pub fn clamp<'b>(&'b self, min: XlaOp<'b>, operand: XlaOp<'b>, max: XlaOp<'b>) -> XlaOp<'b> {
        self.op("clamp", || {
            let mut ops = [min, operand, max];
            self.broadcast_scalars(&mut ops)?;
            self.emit(Spec::new(Opcode::Clamp), &ops)
        })
    }

    /// `x * x`.
    pub fn square<'b>(&'b self, operand: XlaOp<'b>) -> XlaOp<'b> {
        self.mul(operand, operand)
    }

    /// `1 / x`.
    pub fn reciprocal<'b>(&'b self, operand: XlaOp<'b>) -> XlaOp<'b> {
        self.op("reciprocal", || {
            let ty = self.shape(operand)?.element_type();
            let one = self.constant_inner(super::one_literal(ty)?)?;
            let (one, operand) = self.broadcast_operands(one, operand, &[])?;
            self.emit(Spec::new(Opcode::Divide), &[one, operand])
        })
    }

    /// Element-wise conversion to another element type (`convert`).
    pub fn convert_element_type<'b>(&'b self, operand: XlaOp<'b>, ty: ElementType) -> XlaOp<'b> {
        self.op("convert", || {
            let mut shape = self.array(operand, "the operand")?;
            shape.element_type = ty;
            self.emit(Spec::new(Opcode::Convert).declared(Shape::Array(shape)), &[operand])
        })
    }

    /// Reinterprets the bits as another element type (`bitcast-convert`). Between types of
    /// different widths the last dimension absorbs or provides the width ratio.
    pub fn bitcast_convert_type<'b>(&'b self, operand: XlaOp<'b>, ty: ElementType) -> XlaOp<'b> {
        self.op("bitcast-convert", || {
            let shape = self.array(operand, "the operand")?;
            let (from, to) = (shape.element_type.bit_width(), ty.bit_width());
            let mut dims = shape.dims.clone();
            if to == 0 || from == 0 {
                return Err(format!("cannot bitcast-convert {} to {ty}", shape.element_type));
            }
            if from > to {
                if from % to != 0 {
                    return Err(format!("{} is not a whole number of {ty} elements", shape.element_type));
                }
                dims.push(i64::from(from / to));
            } else if from < to {
                if to % from != 0 || dims.last() != Some(&i64::from(to / from)) {
                    return Err(format!(
                        "bitcast-convert from {} to {ty} needs a last dimension of size {}",
                        shape.element_type,
                        to / from.max(1)
                    ));
                }
                dims.pop();
            }
            self.emit(Spec::new(Opcode::BitcastConvert).declared(Shape::array(ty, &dims)), &[operand])
        })
    }

    /// Rounds to a float format with fewer exponent and mantissa bits, keeping the type.
    pub fn reduce_precision<'b>(&'b self, operand: XlaOp<'b>, exponent_bits: i64, mantissa_bits: i64) -> XlaOp<'b> {
        self.op("reduce-precision", || {
            let spec = Spec::new(Opcode::ReducePrecision)
                .attr("exponent_bits", AttrValue::Int(exponent_bits))
                .attr("mantissa_bits", AttrValue::Int(mantissa_bits));
            self.emit(spec, &[operand])
        })
    }
}

macro_rules! operator {
    ($trait:ident, $method:ident, $op:ident) => {
        impl<'b> ops::$trait for XlaOp<'b> {
            type Output = XlaOp<'b>;
            fn $method(self, rhs: XlaOp<'b>) -> XlaOp<'b> {
                self.builder.$op(self, rhs)
            }
        }
    };
}

operator!(Add, add, add);
operator!(Sub, sub, sub);
operator!(Mul, mul, mul);
operator!(Div, div, div);
operator!(Rem, rem, rem);
operator!(BitAnd, bitand, and);
operator!(BitOr, bitor, or);
operator!(BitXor, bitxor, xor);

impl<'b> ops::Neg for XlaOp<'b> {
    type Output = XlaOp<'b>;
    fn neg(self) -> XlaOp<'b> {
        self.builder.neg(self)
    }
}

impl<'b> ops::Not for XlaOp<'b> {
    type Output = XlaOp<'b>;
    fn not(self) -> XlaOp<'b> {
        self.builder.not(self)
    }
}
