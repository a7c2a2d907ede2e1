//! The ops of XLA's Operation Semantics, as [`Builder`] methods.
//!
//! Each public method is a deferred-error wrapper ([`Builder::op`]) around code that checks
//! what HLO cannot express (builder-level broadcasting, convenience forms) and emits plain HLO
//! instructions; whether those are well-formed is left to the verifier's shape inference.

use std::ops;

use super::{Builder, OpResult, Spec, XlaOp};
use crate::element_type::ElementType;
use crate::ir::{AttrValue, CompId, Module, Opcode, PaddingDim, SliceRange, Window, WindowDim};
use crate::shape::{ArrayShape, Shape};

pub use crate::ir::{
    ComparisonDirection, ComparisonType, ConvDimensionNumbers, FftType, RandomDistribution, TriangularTranspose,
};

/// The comparison type a comparison of `ty` gets when none is given; XLA prints `type=` only
/// for others.
fn default_comparison_type(ty: ElementType) -> ComparisonType {
    if ty.is_floating_or_complex() {
        ComparisonType::Float
    } else if ty.is_signed_integral() {
        ComparisonType::Signed
    } else {
        ComparisonType::Unsigned
    }
}

/// Per-operand precision of a dot or convolution (`operand_precision={..}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    #[default]
    Default,
    High,
    Highest,
}

impl Precision {
    fn name(self) -> &'static str {
        match self {
            Precision::Default => "default",
            Precision::High => "high",
            Precision::Highest => "highest",
        }
    }
}

/// The dimension numbers of `dot_general`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DotDimensionNumbers {
    pub lhs_batch_dims: Vec<i64>,
    pub rhs_batch_dims: Vec<i64>,
    pub lhs_contracting_dims: Vec<i64>,
    pub rhs_contracting_dims: Vec<i64>,
}

/// Window padding chosen by name, as XLA's `Padding::kSame`/`kValid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Padding {
    /// No padding: only windows that fit entirely.
    Valid,
    /// Pads so that the output has `ceil(input / stride)` elements, the extra half (rounded
    /// down) at the low end.
    Same,
}

impl Padding {
    /// (low, high) padding per dimension for windows of `window` elements moving by
    /// `strides` over `input` (XLA's `MakePadding`).
    pub fn low_high(self, input: &[i64], window: &[i64], strides: &[i64]) -> Vec<(i64, i64)> {
        match self {
            Padding::Valid => vec![(0, 0); input.len()],
            Padding::Same => input
                .iter()
                .zip(window)
                .zip(strides)
                .map(|((&n, &w), &s)| {
                    // Saturating: a dynamic (negative) size must not overflow.
                    let s = s.max(1);
                    let out = n.saturating_add(s - 1) / s;
                    let total = out.saturating_sub(1).saturating_mul(s).saturating_add(w).saturating_sub(n).max(0);
                    (total / 2, total - total / 2)
                })
                .collect(),
        }
    }
}

/// The dimension numbers of `gather`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GatherDimensionNumbers {
    pub offset_dims: Vec<i64>,
    pub collapsed_slice_dims: Vec<i64>,
    pub start_index_map: Vec<i64>,
    pub operand_batching_dims: Vec<i64>,
    pub start_indices_batching_dims: Vec<i64>,
    pub index_vector_dim: i64,
}

/// The dimension numbers of `scatter`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScatterDimensionNumbers {
    pub update_window_dims: Vec<i64>,
    pub inserted_window_dims: Vec<i64>,
    pub scatter_dims_to_operand_dims: Vec<i64>,
    pub input_batching_dims: Vec<i64>,
    pub scatter_indices_batching_dims: Vec<i64>,
    pub index_vector_dim: i64,
}

/// Everything a general convolution takes besides its operands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvOptions {
    /// One per spatial dimension; empty means all 1.
    pub window_strides: Vec<i64>,
    /// (low, high) per spatial dimension; empty means none.
    pub padding: Vec<(i64, i64)>,
    /// Base (input) dilation per spatial dimension; empty means all 1.
    pub lhs_dilation: Vec<i64>,
    /// Window (kernel) dilation per spatial dimension; empty means all 1.
    pub rhs_dilation: Vec<i64>,
    /// `None`: XLA's default, batch and feature first then the spatial dimensions, for the
    /// input, kernel (`o`, `i`, spatial) and output alike.
    pub dimension_numbers: Option<ConvDimensionNumbers>,
    /// 0 or 1 mean none.
    pub feature_group_count: i64,
    /// 0 or 1 mean none.
    pub batch_group_count: i64,
    pub precision: Option<[Precision; 2]>,
    pub preferred_element_type: Option<ElementType>,
}

/// XLA's default convolution dimension numbers for `spatial` spatial dimensions:
/// `bf01.._oi01..->bf01..`.
pub fn default_conv_dimension_numbers(spatial: usize) -> ConvDimensionNumbers {
    let spatial: Vec<i64> = (2..2 + spatial as i64).collect();
    ConvDimensionNumbers {
        input_batch: 0,
        input_feature: 1,
        input_spatial: spatial.clone(),
        kernel_output_feature: 0,
        kernel_input_feature: 1,
        kernel_spatial: spatial.clone(),
        output_batch: 0,
        output_feature: 1,
        output_spatial: spatial,
    }
}

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

fn enum_attr(s: &str) -> AttrValue {
    AttrValue::Enum(s.to_string())
}

fn precision_attr(spec: Spec, precision: Option<[Precision; 2]>) -> Spec {
    match precision {
        Some(p) if p.iter().any(|&p| p != Precision::Default) => {
            spec.attr("operand_precision", AttrValue::Enums(p.iter().map(|p| p.name().to_string()).collect()))
        }
        _ => spec,
    }
}

/// Dimensions `0..n` as `i64`s.
fn iota_dims(n: usize) -> Vec<i64> {
    (0..n as i64).collect()
}

/// Validates a list of dimension numbers against a rank: each in range, none twice.
fn check_dims(dims: &[i64], rank: usize, what: &str) -> OpResult<()> {
    let mut seen = vec![false; rank];
    for &d in dims {
        let slot = usize::try_from(d).ok().and_then(|d| seen.get_mut(d));
        match slot {
            None => return Err(format!("{what} {d} is out of range for rank {rank}")),
            Some(s) if *s => return Err(format!("{what} {d} appears twice")),
            Some(s) => *s = true,
        }
    }
    Ok(())
}

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
    fn broadcast_operands<'b>(
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
    fn in_dim_broadcast<'b>(
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

    // ---- Shape manipulation ---------------------------------------------------------------

    /// Adds dimensions of sizes `sizes` in front: `output[i.., j..] = operand[j..]`.
    pub fn broadcast<'b>(&'b self, operand: XlaOp<'b>, sizes: &[i64]) -> XlaOp<'b> {
        self.op("broadcast", || {
            let shape = self.array(operand, "the operand")?;
            let out: Vec<i64> = sizes.iter().chain(&shape.dims).copied().collect();
            let dims: Vec<i64> = (sizes.len() as i64..out.len() as i64).collect();
            self.in_dim_broadcast(operand, shape.element_type, &out, &dims)
        })
    }

    /// Broadcasts to dimensions `out_dims`, operand dimension `i` becoming dimension
    /// `broadcast_dimensions[i]`. Operand dimensions of size 1 may map to larger ones: they
    /// are reshaped away first, since HLO `broadcast` needs equal sizes.
    pub fn broadcast_in_dim<'b>(
        &'b self,
        operand: XlaOp<'b>,
        out_dims: &[i64],
        broadcast_dimensions: &[i64],
    ) -> XlaOp<'b> {
        self.op("broadcast_in_dim", || {
            let shape = self.array(operand, "the operand")?;
            if broadcast_dimensions.len() != shape.rank() {
                return Err(format!(
                    "broadcast_dimensions {broadcast_dimensions:?} has {} entries for an operand of rank {}",
                    broadcast_dimensions.len(),
                    shape.rank()
                ));
            }
            check_dims(broadcast_dimensions, out_dims.len(), "broadcast dimension")?;
            let mut kept = Vec::new();
            let mut kept_sizes = Vec::new();
            for (i, (&d, &size)) in broadcast_dimensions.iter().zip(&shape.dims).enumerate() {
                let want = out_dims[d as usize];
                if size == want {
                    kept.push(d);
                    kept_sizes.push(size);
                } else if size != 1 {
                    return Err(format!(
                        "operand dimension {i} has size {size} but output dimension {d} has size {want}"
                    ));
                }
            }
            let ty = shape.element_type;
            if kept.len() == shape.rank() {
                return self.in_dim_broadcast(operand, ty, out_dims, broadcast_dimensions);
            }
            let reshaped = self.emit(Spec::new(Opcode::Reshape).declared(Shape::array(ty, &kept_sizes)), &[operand])?;
            self.in_dim_broadcast(reshaped, ty, out_dims, &kept)
        })
    }

    /// The same elements in row-major order, with dimensions `new_sizes`.
    pub fn reshape<'b>(&'b self, operand: XlaOp<'b>, new_sizes: &[i64]) -> XlaOp<'b> {
        self.op("reshape", || self.reshape_inner(operand, new_sizes))
    }

    fn reshape_inner<'b>(&'b self, operand: XlaOp<'b>, new_sizes: &[i64]) -> OpResult<XlaOp<'b>> {
        let shape = self.array(operand, "the operand")?;
        let spec = Spec::new(Opcode::Reshape).declared(Shape::array(shape.element_type, new_sizes));
        self.emit(spec, &[operand])
    }

    /// Seed 003's `Reshape(operand, dimensions, new_sizes)`: the operand is flattened in the
    /// dimension order `dimensions` (a transpose when that is not the identity), then
    /// reshaped to `new_sizes`.
    pub fn reshape_with_order<'b>(&'b self, operand: XlaOp<'b>, dimensions: &[i64], new_sizes: &[i64]) -> XlaOp<'b> {
        self.op("reshape", || {
            let shape = self.array(operand, "the operand")?;
            if dimensions.len() != shape.rank() {
                return Err(format!("dimensions {dimensions:?} is not a permutation of rank {}", shape.rank()));
            }
            check_dims(dimensions, shape.rank(), "dimension")?;
            let operand = if dimensions == iota_dims(shape.rank()).as_slice() {
                operand
            } else {
                self.transpose_inner(operand, dimensions)?
            };
            self.reshape_inner(operand, new_sizes)
        })
    }

    /// Replaces the consecutive, increasing dimensions `dimensions` by one of their product.
    pub fn collapse<'b>(&'b self, operand: XlaOp<'b>, dimensions: &[i64]) -> XlaOp<'b> {
        self.op("collapse", || {
            let shape = self.array(operand, "the operand")?;
            check_dims(dimensions, shape.rank(), "dimension")?;
            if dimensions.windows(2).any(|w| w[1] != w[0] + 1) {
                return Err(format!("dimensions {dimensions:?} are not consecutive and in order"));
            }
            let Some(&first) = dimensions.first() else {
                return Ok(operand);
            };
            let (first, last) = (first as usize, first as usize + dimensions.len());
            let merged = shape.dims[first..last]
                .iter()
                .try_fold(1i64, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| "collapsed size overflows".to_string())?;
            let sizes: Vec<i64> =
                shape.dims[..first].iter().copied().chain([merged]).chain(shape.dims[last..].iter().copied()).collect();
            self.reshape_inner(operand, &sizes)
        })
    }

    /// Permutes dimensions: result dimension `i` is operand dimension `permutation[i]`.
    pub fn transpose<'b>(&'b self, operand: XlaOp<'b>, permutation: &[i64]) -> XlaOp<'b> {
        self.op("transpose", || self.transpose_inner(operand, permutation))
    }

    pub(super) fn transpose_inner<'b>(&'b self, operand: XlaOp<'b>, permutation: &[i64]) -> OpResult<XlaOp<'b>> {
        self.emit(Spec::new(Opcode::Transpose).attr("dimensions", ints(permutation)), &[operand])
    }

    /// The transpose of a matrix (seed 003's `Trans`).
    pub fn trans<'b>(&'b self, operand: XlaOp<'b>) -> XlaOp<'b> {
        self.op("transpose", || {
            let shape = self.array(operand, "the operand")?;
            if shape.rank() != 2 {
                return Err(format!("Trans needs a matrix, but the operand has rank {}", shape.rank()));
            }
            self.transpose_inner(operand, &[1, 0])
        })
    }

    /// Reverses the order of elements along `dimensions`.
    pub fn rev<'b>(&'b self, operand: XlaOp<'b>, dimensions: &[i64]) -> XlaOp<'b> {
        self.op("reverse", || self.emit(Spec::new(Opcode::Reverse).attr("dimensions", ints(dimensions)), &[operand]))
    }

    /// The elements from `start` (inclusive) to `limit` (exclusive) by `strides` in each
    /// dimension; empty `strides` means all 1.
    pub fn slice<'b>(&'b self, operand: XlaOp<'b>, start: &[i64], limit: &[i64], strides: &[i64]) -> XlaOp<'b> {
        self.op("slice", || self.slice_inner(operand, start, limit, strides))
    }

    fn slice_inner<'b>(
        &'b self,
        operand: XlaOp<'b>,
        start: &[i64],
        limit: &[i64],
        strides: &[i64],
    ) -> OpResult<XlaOp<'b>> {
        let strides = if strides.is_empty() { vec![1; start.len()] } else { strides.to_vec() };
        if start.len() != limit.len() || start.len() != strides.len() {
            return Err(format!(
                "{} start indices, {} limit indices and {} strides differ in number",
                start.len(),
                limit.len(),
                strides.len()
            ));
        }
        let ranges = start
            .iter()
            .zip(limit)
            .zip(&strides)
            .map(|((&start, &limit), &stride)| SliceRange { start, limit, stride })
            .collect();
        self.emit(Spec::new(Opcode::Slice).attr("slice", AttrValue::Slice(ranges)), &[operand])
    }

    /// A slice of one dimension, the others whole.
    pub fn slice_in_dim<'b>(
        &'b self,
        operand: XlaOp<'b>,
        start: i64,
        limit: i64,
        stride: i64,
        dimension: i64,
    ) -> XlaOp<'b> {
        self.op("slice", || {
            let shape = self.array(operand, "the operand")?;
            check_dims(&[dimension], shape.rank(), "dimension")?;
            let mut starts = vec![0; shape.rank()];
            let mut limits = shape.dims.clone();
            let mut strides = vec![1; shape.rank()];
            starts[dimension as usize] = start;
            limits[dimension as usize] = limit;
            strides[dimension as usize] = stride;
            self.slice_inner(operand, &starts, &limits, &strides)
        })
    }

    /// A slice of sizes `sizes` starting at run-time indices (one scalar per dimension).
    pub fn dynamic_slice<'b>(&'b self, operand: XlaOp<'b>, start_indices: &[XlaOp<'b>], sizes: &[i64]) -> XlaOp<'b> {
        self.op("dynamic-slice", || {
            let operands: Vec<XlaOp<'b>> = std::iter::once(operand).chain(start_indices.iter().copied()).collect();
            self.emit(Spec::new(Opcode::DynamicSlice).attr("dynamic_slice_sizes", ints(sizes)), &operands)
        })
    }

    /// `operand` with `update` written at run-time indices (one scalar per dimension).
    pub fn dynamic_update_slice<'b>(
        &'b self,
        operand: XlaOp<'b>,
        update: XlaOp<'b>,
        start_indices: &[XlaOp<'b>],
    ) -> XlaOp<'b> {
        self.op("dynamic-update-slice", || {
            let operands: Vec<XlaOp<'b>> = [operand, update].into_iter().chain(start_indices.iter().copied()).collect();
            self.emit(Spec::new(Opcode::DynamicUpdateSlice), &operands)
        })
    }

    /// Joins arrays along `dimension`.
    pub fn concat_in_dim<'b>(&'b self, operands: &[XlaOp<'b>], dimension: i64) -> XlaOp<'b> {
        self.op("concatenate", || {
            if operands.is_empty() {
                return Err("nothing to concatenate".to_string());
            }
            self.emit(Spec::new(Opcode::Concatenate).attr("dimensions", ints(&[dimension])), operands)
        })
    }

    /// Pads with `value` at the edges (negative amounts cut) and between elements.
    pub fn pad<'b>(&'b self, operand: XlaOp<'b>, value: XlaOp<'b>, config: &[PaddingDim]) -> XlaOp<'b> {
        self.op("pad", || {
            self.emit(Spec::new(Opcode::Pad).attr("padding", AttrValue::Padding(config.to_vec())), &[operand, value])
        })
    }

    /// Pads one dimension at its edges, the others not at all.
    pub fn pad_in_dim<'b>(
        &'b self,
        operand: XlaOp<'b>,
        value: XlaOp<'b>,
        dimension: i64,
        low: i64,
        high: i64,
    ) -> XlaOp<'b> {
        self.op("pad", || {
            let shape = self.array(operand, "the operand")?;
            check_dims(&[dimension], shape.rank(), "dimension")?;
            let mut config = vec![PaddingDim::default(); shape.rank()];
            config[dimension as usize] = PaddingDim { low, high, interior: 0 };
            self.emit(Spec::new(Opcode::Pad).attr("padding", AttrValue::Padding(config)), &[operand, value])
        })
    }

    /// An array of `shape` counting up from 0 along `iota_dimension`.
    pub fn iota(&self, shape: &Shape, iota_dimension: i64) -> XlaOp<'_> {
        self.op("iota", || {
            let spec =
                Spec::new(Opcode::Iota).declared(shape.clone()).attr("iota_dimension", AttrValue::Int(iota_dimension));
            self.emit(spec, &[])
        })
    }

    /// `0, 1, ..., size-1` of type `ty`.
    pub fn iota_1d(&self, ty: ElementType, size: i64) -> XlaOp<'_> {
        self.iota(&Shape::array(ty, &[size]), 0)
    }

    // ---- Tuples ---------------------------------------------------------------------------

    pub fn tuple<'b>(&'b self, elements: &[XlaOp<'b>]) -> XlaOp<'b> {
        self.op("tuple", || self.emit(Spec::new(Opcode::Tuple), elements))
    }

    pub fn get_tuple_element<'b>(&'b self, tuple: XlaOp<'b>, index: i64) -> XlaOp<'b> {
        self.op("get-tuple-element", || self.gte(tuple, index))
    }

    fn gte<'b>(&'b self, tuple: XlaOp<'b>, index: i64) -> OpResult<XlaOp<'b>> {
        self.emit(Spec::new(Opcode::GetTupleElement).attr("index", AttrValue::Int(index)), &[tuple])
    }

    // ---- Linear algebra -------------------------------------------------------------------

    /// Seed 003's `Dot`, like `numpy.dot`: scalars multiply; otherwise the last dimension of
    /// `lhs` is contracted with the only dimension of a vector `rhs`, or with the
    /// second-to-last of a higher-rank one (so `[m,k]·[k,n] -> [m,n]`,
    /// `[p,q,r]·[s,r,t] -> [p,q,s,t]`).
    pub fn dot<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>) -> XlaOp<'b> {
        self.op("dot", || {
            let (l, r) = (self.array(lhs, "lhs")?, self.array(rhs, "rhs")?);
            if l.rank() == 0 || r.rank() == 0 {
                let (lhs, rhs) = self.broadcast_operands(lhs, rhs, &[])?;
                return self.emit(Spec::new(Opcode::Multiply), &[lhs, rhs]);
            }
            let dnums = DotDimensionNumbers {
                lhs_contracting_dims: vec![l.rank() as i64 - 1],
                rhs_contracting_dims: vec![if r.rank() == 1 { 0 } else { r.rank() as i64 - 2 }],
                ..DotDimensionNumbers::default()
            };
            self.dot_general_inner(lhs, rhs, &dnums, None, None)
        })
    }

    /// `dot` with explicit batch and contracting dimensions. The result has the batch
    /// dimensions, then the free dimensions of `lhs`, then those of `rhs`.
    pub fn dot_general<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>, dnums: &DotDimensionNumbers) -> XlaOp<'b> {
        self.dot_general_with(lhs, rhs, dnums, None, None)
    }

    /// [`Builder::dot_general`] with operand precisions and a result element type other than
    /// the operands' (mixed precision).
    pub fn dot_general_with<'b>(
        &'b self,
        lhs: XlaOp<'b>,
        rhs: XlaOp<'b>,
        dnums: &DotDimensionNumbers,
        precision: Option<[Precision; 2]>,
        preferred_element_type: Option<ElementType>,
    ) -> XlaOp<'b> {
        self.op("dot", || self.dot_general_inner(lhs, rhs, dnums, precision, preferred_element_type))
    }

    pub(super) fn dot_general_inner<'b>(
        &'b self,
        lhs: XlaOp<'b>,
        rhs: XlaOp<'b>,
        dnums: &DotDimensionNumbers,
        precision: Option<[Precision; 2]>,
        preferred: Option<ElementType>,
    ) -> OpResult<XlaOp<'b>> {
        let mut spec = Spec::new(Opcode::Dot);
        if !dnums.lhs_batch_dims.is_empty() {
            spec = spec.attr("lhs_batch_dims", ints(&dnums.lhs_batch_dims));
        }
        spec = spec.attr("lhs_contracting_dims", ints(&dnums.lhs_contracting_dims));
        if !dnums.rhs_batch_dims.is_empty() {
            spec = spec.attr("rhs_batch_dims", ints(&dnums.rhs_batch_dims));
        }
        spec = spec.attr("rhs_contracting_dims", ints(&dnums.rhs_contracting_dims));
        spec = precision_attr(spec, precision);
        self.emit_with_preferred_type(spec, &[lhs, rhs], preferred)
    }

    /// Emits an op whose result type may be chosen (dot, convolution): the dimensions come
    /// from the shape inference, the element type from the caller.
    fn emit_with_preferred_type<'b>(
        &'b self,
        mut spec: Spec,
        operands: &[XlaOp<'b>],
        preferred: Option<ElementType>,
    ) -> OpResult<XlaOp<'b>> {
        let Some(ty) = preferred else {
            return self.emit(spec, operands);
        };
        let mut shape = self.infer(&spec, operands)?;
        if let Shape::Array(a) = &mut shape {
            a.element_type = ty;
        }
        spec.declared = shape;
        self.emit(spec, operands)
    }

    /// A convolution with XLA's default dimension numbers (`bf01_oi01->bf01`), unit
    /// dilations and padding chosen by name.
    pub fn conv<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>, window_strides: &[i64], padding: Padding) -> XlaOp<'b> {
        self.conv_with_general_dimensions(lhs, rhs, window_strides, padding, None)
    }

    /// A convolution with explicit (low, high) padding per spatial dimension.
    pub fn conv_with_general_padding<'b>(
        &'b self,
        lhs: XlaOp<'b>,
        rhs: XlaOp<'b>,
        window_strides: &[i64],
        padding: &[(i64, i64)],
    ) -> XlaOp<'b> {
        let options = ConvOptions {
            window_strides: window_strides.to_vec(),
            padding: padding.to_vec(),
            ..ConvOptions::default()
        };
        self.conv_general_dilated(lhs, rhs, &options)
    }

    /// A convolution with explicit dimension numbers (`None`: the default) and padding chosen
    /// by name.
    pub fn conv_with_general_dimensions<'b>(
        &'b self,
        lhs: XlaOp<'b>,
        rhs: XlaOp<'b>,
        window_strides: &[i64],
        padding: Padding,
        dimension_numbers: Option<ConvDimensionNumbers>,
    ) -> XlaOp<'b> {
        self.op("convolution", || {
            let (l, r) = (self.array(lhs, "lhs")?, self.array(rhs, "rhs")?);
            let dnums = dimension_numbers.unwrap_or_else(|| default_conv_dimension_numbers(l.rank().saturating_sub(2)));
            let input = spatial_sizes(&l, &dnums.input_spatial, "input")?;
            let window = spatial_sizes(&r, &dnums.kernel_spatial, "kernel")?;
            let strides = if window_strides.is_empty() { vec![1; window.len()] } else { window_strides.to_vec() };
            let options = ConvOptions {
                padding: padding.low_high(&input, &window, &strides),
                window_strides: strides,
                dimension_numbers: Some(dnums),
                ..ConvOptions::default()
            };
            self.conv_inner(lhs, rhs, &options)
        })
    }

    /// The general convolution: strides, padding, base and window dilation, dimension
    /// numbers, feature and batch groups, precision and result type.
    pub fn conv_general_dilated<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>, options: &ConvOptions) -> XlaOp<'b> {
        self.op("convolution", || self.conv_inner(lhs, rhs, options))
    }

    fn conv_inner<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>, o: &ConvOptions) -> OpResult<XlaOp<'b>> {
        let (l, r) = (self.array(lhs, "lhs")?, self.array(rhs, "rhs")?);
        let dnums =
            o.dimension_numbers.clone().unwrap_or_else(|| default_conv_dimension_numbers(l.rank().saturating_sub(2)));
        let sizes = spatial_sizes(&r, &dnums.kernel_spatial, "kernel")?;
        let n = sizes.len();
        let per_dim = |v: &[i64], what: &str, default: i64| -> OpResult<Vec<i64>> {
            match v.len() {
                0 => Ok(vec![default; n]),
                len if len == n => Ok(v.to_vec()),
                len => Err(format!("{len} {what} for {n} spatial dimensions")),
            }
        };
        let strides = per_dim(&o.window_strides, "window strides", 1)?;
        let lhs_dilation = per_dim(&o.lhs_dilation, "lhs dilations", 1)?;
        let rhs_dilation = per_dim(&o.rhs_dilation, "rhs dilations", 1)?;
        let padding = match o.padding.len() {
            0 => vec![(0, 0); n],
            len if len == n => o.padding.clone(),
            len => return Err(format!("{len} paddings for {n} spatial dimensions")),
        };
        let window = make_window(&sizes, &strides, &padding, &lhs_dilation, &rhs_dilation);
        let mut spec = Spec::new(Opcode::Convolution)
            .attr("window", AttrValue::Window(window))
            .attr("dim_labels", AttrValue::ConvDims(dnums));
        if o.feature_group_count > 1 {
            spec = spec.attr("feature_group_count", AttrValue::Int(o.feature_group_count));
        }
        if o.batch_group_count > 1 {
            spec = spec.attr("batch_group_count", AttrValue::Int(o.batch_group_count));
        }
        spec = precision_attr(spec, o.precision);
        self.emit_with_preferred_type(spec, &[lhs, rhs], o.preferred_element_type)
    }

    /// A Fourier transform over the last `fft_length.len()` dimensions.
    pub fn fft<'b>(&'b self, operand: XlaOp<'b>, fft_type: FftType, fft_length: &[i64]) -> XlaOp<'b> {
        self.op("fft", || {
            let spec = Spec::new(Opcode::Fft)
                .attr("fft_type", enum_attr(fft_type.name()))
                .attr("fft_length", ints(fft_length));
            self.emit(spec, &[operand])
        })
    }

    /// The Cholesky factor of (a batch of) symmetric positive-definite matrices: lower
    /// (`a = l·lᵀ`) or upper triangular.
    pub fn cholesky<'b>(&'b self, a: XlaOp<'b>, lower: bool) -> XlaOp<'b> {
        self.op("cholesky", || self.emit(Spec::new(Opcode::Cholesky).attr("lower", AttrValue::Bool(lower)), &[a]))
    }

    /// Solves `op(a)·x = b` (`left_side`) or `x·op(a) = b` for a triangular `a`.
    pub fn triangular_solve<'b>(
        &'b self,
        a: XlaOp<'b>,
        b: XlaOp<'b>,
        left_side: bool,
        lower: bool,
        unit_diagonal: bool,
        transpose_a: TriangularTranspose,
    ) -> XlaOp<'b> {
        self.op("triangular-solve", || {
            let spec = Spec::new(Opcode::TriangularSolve)
                .attr("left_side", AttrValue::Bool(left_side))
                .attr("lower", AttrValue::Bool(lower))
                .attr("unit_diagonal", AttrValue::Bool(unit_diagonal))
                .attr("transpose_a", enum_attr(transpose_a.name()));
            self.emit(spec, &[a, b])
        })
    }

    fn batch_norm_spec(opcode: Opcode, epsilon: f32, feature_index: i64) -> Spec {
        Spec::new(opcode)
            .attr("epsilon", AttrValue::Float(f64::from(epsilon)))
            .attr("feature_index", AttrValue::Int(feature_index))
    }

    /// Normalizes over all dimensions but `feature_index`; the result is the tuple
    /// (normalized, batch mean, batch variance).
    pub fn batch_norm_training<'b>(
        &'b self,
        operand: XlaOp<'b>,
        scale: XlaOp<'b>,
        offset: XlaOp<'b>,
        epsilon: f32,
        feature_index: i64,
    ) -> XlaOp<'b> {
        self.op("batch-norm-training", || {
            self.emit(
                Self::batch_norm_spec(Opcode::BatchNormTraining, epsilon, feature_index),
                &[operand, scale, offset],
            )
        })
    }

    /// Normalizes with a given mean and variance.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_inference<'b>(
        &'b self,
        operand: XlaOp<'b>,
        scale: XlaOp<'b>,
        offset: XlaOp<'b>,
        mean: XlaOp<'b>,
        variance: XlaOp<'b>,
        epsilon: f32,
        feature_index: i64,
    ) -> XlaOp<'b> {
        self.op("batch-norm-inference", || {
            let spec = Self::batch_norm_spec(Opcode::BatchNormInference, epsilon, feature_index);
            self.emit(spec, &[operand, scale, offset, mean, variance])
        })
    }

    /// Gradients of batch normalization: the tuple (grad operand, grad scale, grad offset).
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_grad<'b>(
        &'b self,
        operand: XlaOp<'b>,
        scale: XlaOp<'b>,
        mean: XlaOp<'b>,
        variance: XlaOp<'b>,
        grad_output: XlaOp<'b>,
        epsilon: f32,
        feature_index: i64,
    ) -> XlaOp<'b> {
        self.op("batch-norm-grad", || {
            let spec = Self::batch_norm_spec(Opcode::BatchNormGrad, epsilon, feature_index);
            self.emit(spec, &[operand, scale, mean, variance, grad_output])
        })
    }

    /// The `k` largest (or smallest) elements along the last dimension and their indices, as
    /// a tuple (values, s32 indices).
    pub fn top_k<'b>(&'b self, operand: XlaOp<'b>, k: i64, largest: bool) -> XlaOp<'b> {
        self.op("topk", || {
            let spec = Spec::new(Opcode::TopK).attr("k", AttrValue::Int(k)).attr("largest", AttrValue::Bool(largest));
            self.emit(spec, &[operand])
        })
    }

    // ---- Computations: reductions, control flow, calls --------------------------------------

    /// Reduces `dimensions` of `operand` with `computation` (`T, T -> T`) from `init`.
    pub fn reduce<'b>(
        &'b self,
        operand: XlaOp<'b>,
        init: XlaOp<'b>,
        computation: &Module,
        dimensions: &[i64],
    ) -> XlaOp<'b> {
        self.reduce_multi(&[operand], &[init], computation, dimensions)
    }

    /// Reduces several operands together (e.g. value and index for an argmax); the
    /// computation takes and returns tuples of their element types, and so does the result.
    pub fn reduce_multi<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        inits: &[XlaOp<'b>],
        computation: &Module,
        dimensions: &[i64],
    ) -> XlaOp<'b> {
        self.op("reduce", || self.reduce_inner(operands, inits, computation, dimensions))
    }

    pub(super) fn reduce_inner<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        inits: &[XlaOp<'b>],
        computation: &Module,
        dimensions: &[i64],
    ) -> OpResult<XlaOp<'b>> {
        if operands.len() != inits.len() {
            return Err(format!("{} operands but {} init values", operands.len(), inits.len()));
        }
        let comp = self.import(computation)?;
        let spec = Spec::new(Opcode::Reduce)
            .attr("dimensions", ints(dimensions))
            .attr("to_apply", AttrValue::Computation(comp));
        let all: Vec<XlaOp<'b>> = operands.iter().chain(inits).copied().collect();
        self.emit(spec, &all)
    }

    /// Reduces every dimension.
    pub fn reduce_all<'b>(&'b self, operand: XlaOp<'b>, init: XlaOp<'b>, computation: &Module) -> XlaOp<'b> {
        self.op("reduce", || {
            let rank = self.array(operand, "the operand")?.rank();
            self.reduce_inner(&[operand], &[init], computation, &iota_dims(rank))
        })
    }

    /// Reduces each window of `window_dimensions` elements, moved by `window_strides`.
    pub fn reduce_window<'b>(
        &'b self,
        operand: XlaOp<'b>,
        init: XlaOp<'b>,
        computation: &Module,
        window_dimensions: &[i64],
        window_strides: &[i64],
        padding: Padding,
    ) -> XlaOp<'b> {
        self.op("reduce-window", || {
            let shape = self.array(operand, "the operand")?;
            let pads = padding.low_high(&shape.dims, window_dimensions, window_strides);
            let window = make_window(window_dimensions, window_strides, &pads, &[], &[]);
            self.reduce_window_inner(&[operand], &[init], computation, window)
        })
    }

    /// Reduce-window over several operands with explicit padding and dilations (empty
    /// dilations mean 1).
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_window_general<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        inits: &[XlaOp<'b>],
        computation: &Module,
        window_dimensions: &[i64],
        window_strides: &[i64],
        base_dilations: &[i64],
        window_dilations: &[i64],
        padding: &[(i64, i64)],
    ) -> XlaOp<'b> {
        self.op("reduce-window", || {
            let window = make_window(window_dimensions, window_strides, padding, base_dilations, window_dilations);
            self.reduce_window_inner(operands, inits, computation, window)
        })
    }

    fn reduce_window_inner<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        inits: &[XlaOp<'b>],
        computation: &Module,
        window: Window,
    ) -> OpResult<XlaOp<'b>> {
        if operands.len() != inits.len() {
            return Err(format!("{} operands but {} init values", operands.len(), inits.len()));
        }
        let comp = self.import(computation)?;
        let spec = Spec::new(Opcode::ReduceWindow)
            .attr("window", AttrValue::Window(window))
            .attr("to_apply", AttrValue::Computation(comp));
        let all: Vec<XlaOp<'b>> = operands.iter().chain(inits).copied().collect();
        self.emit(spec, &all)
    }

    /// Selects one element per window of `operand` with `select` (`T, T -> pred`) and
    /// scatters the matching `source` element there with `scatter`, from `init`.
    #[allow(clippy::too_many_arguments)]
    pub fn select_and_scatter<'b>(
        &'b self,
        operand: XlaOp<'b>,
        select: &Module,
        window_dimensions: &[i64],
        window_strides: &[i64],
        padding: Padding,
        source: XlaOp<'b>,
        init: XlaOp<'b>,
        scatter: &Module,
    ) -> XlaOp<'b> {
        self.op("select-and-scatter", || {
            let shape = self.array(operand, "the operand")?;
            let pads = padding.low_high(&shape.dims, window_dimensions, window_strides);
            self.select_and_scatter_inner(
                operand,
                select,
                window_dimensions,
                window_strides,
                &pads,
                source,
                init,
                scatter,
            )
        })
    }

    /// [`Builder::select_and_scatter`] with explicit (low, high) padding.
    #[allow(clippy::too_many_arguments)]
    pub fn select_and_scatter_with_general_padding<'b>(
        &'b self,
        operand: XlaOp<'b>,
        select: &Module,
        window_dimensions: &[i64],
        window_strides: &[i64],
        padding: &[(i64, i64)],
        source: XlaOp<'b>,
        init: XlaOp<'b>,
        scatter: &Module,
    ) -> XlaOp<'b> {
        self.op("select-and-scatter", || {
            self.select_and_scatter_inner(
                operand,
                select,
                window_dimensions,
                window_strides,
                padding,
                source,
                init,
                scatter,
            )
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn select_and_scatter_inner<'b>(
        &'b self,
        operand: XlaOp<'b>,
        select: &Module,
        window_dimensions: &[i64],
        window_strides: &[i64],
        padding: &[(i64, i64)],
        source: XlaOp<'b>,
        init: XlaOp<'b>,
        scatter: &Module,
    ) -> OpResult<XlaOp<'b>> {
        let window = make_window(window_dimensions, window_strides, padding, &[], &[]);
        let select = self.import(select)?;
        let scatter = self.import(scatter)?;
        let spec = Spec::new(Opcode::SelectAndScatter)
            .attr("window", AttrValue::Window(window))
            .attr("select", AttrValue::Computation(select))
            .attr("scatter", AttrValue::Computation(scatter));
        self.emit(spec, &[operand, source, init])
    }

    /// Applies a scalar computation element-wise across operands of equal dimensions.
    pub fn map<'b>(&'b self, operands: &[XlaOp<'b>], computation: &Module) -> XlaOp<'b> {
        self.op("map", || {
            let first = operands.first().ok_or_else(|| "map needs at least one operand".to_string())?;
            let rank = self.array(*first, "the first operand")?.rank();
            let comp = self.import(computation)?;
            let spec = Spec::new(Opcode::Map)
                .attr("dimensions", ints(&iota_dims(rank)))
                .attr("to_apply", AttrValue::Computation(comp));
            self.emit(spec, operands)
        })
    }

    /// Sorts operands of equal dimensions together along `dimension`; `comparator` takes two
    /// scalars per operand (`lhs_0, rhs_0, lhs_1, rhs_1, ...`) and says whether lhs goes first.
    /// Several operands give a tuple.
    pub fn sort<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        comparator: &Module,
        dimension: i64,
        is_stable: bool,
    ) -> XlaOp<'b> {
        self.op("sort", || self.sort_inner(operands, comparator, dimension, is_stable))
    }

    fn sort_inner<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        comparator: &Module,
        dimension: i64,
        is_stable: bool,
    ) -> OpResult<XlaOp<'b>> {
        let comp = self.import(comparator)?;
        let mut spec = Spec::new(Opcode::Sort).attr("dimensions", ints(&[dimension]));
        if is_stable {
            spec = spec.attr("is_stable", AttrValue::Bool(true));
        }
        self.emit(spec.attr("to_apply", AttrValue::Computation(comp)), operands)
    }

    /// Sorts one operand in increasing order along `dimension` (seed 003's `Sort`), with a
    /// `lt` comparator built here.
    pub fn sort_ascending<'b>(&'b self, operand: XlaOp<'b>, dimension: i64) -> XlaOp<'b> {
        self.op("sort", || {
            let ty = self.array(operand, "the operand")?.element_type;
            let comparator = self.scalar_computation("compare", ty, |s, x, y| s.lt(x, y));
            self.sort_inner(&[operand], &comparator, dimension, false)
        })
    }

    /// Runs `body` (`T -> T`) from `init` while `condition` (`T -> pred`) holds.
    pub fn while_loop<'b>(&'b self, condition: &Module, body: &Module, init: XlaOp<'b>) -> XlaOp<'b> {
        self.op("while", || {
            let condition = self.import(condition)?;
            let body = self.import(body)?;
            let spec = Spec::new(Opcode::While)
                .attr("condition", AttrValue::Computation(condition))
                .attr("body", AttrValue::Computation(body));
            self.emit(spec, &[init])
        })
    }

    /// `true_computation(true_operand)` if `pred`, else `false_computation(false_operand)`.
    pub fn conditional<'b>(
        &'b self,
        pred: XlaOp<'b>,
        true_operand: XlaOp<'b>,
        true_computation: &Module,
        false_operand: XlaOp<'b>,
        false_computation: &Module,
    ) -> XlaOp<'b> {
        self.op("conditional", || {
            let t = self.import(true_computation)?;
            let f = self.import(false_computation)?;
            let spec = Spec::new(Opcode::Conditional)
                .attr("true_computation", AttrValue::Computation(t))
                .attr("false_computation", AttrValue::Computation(f));
            self.emit(spec, &[pred, true_operand, false_operand])
        })
    }

    /// `branches[index](operands[index])`; an out-of-range index runs the last branch.
    pub fn conditional_indexed<'b>(
        &'b self,
        index: XlaOp<'b>,
        branches: &[&Module],
        operands: &[XlaOp<'b>],
    ) -> XlaOp<'b> {
        self.op("conditional", || {
            if branches.len() != operands.len() {
                return Err(format!("{} branches but {} branch operands", branches.len(), operands.len()));
            }
            let comps = branches.iter().map(|m| self.import(m)).collect::<OpResult<Vec<CompId>>>()?;
            let spec = Spec::new(Opcode::Conditional).attr("branch_computations", AttrValue::Computations(comps));
            let all: Vec<XlaOp<'b>> = std::iter::once(index).chain(operands.iter().copied()).collect();
            self.emit(spec, &all)
        })
    }

    /// Calls `computation` with `operands`.
    pub fn call<'b>(&'b self, computation: &Module, operands: &[XlaOp<'b>]) -> XlaOp<'b> {
        self.op("call", || {
            let comp = self.import(computation)?;
            self.emit(Spec::new(Opcode::Call).attr("to_apply", AttrValue::Computation(comp)), operands)
        })
    }

    /// Gathers slices of `slice_sizes` from `operand` at the indices in `start_indices`.
    pub fn gather<'b>(
        &'b self,
        operand: XlaOp<'b>,
        start_indices: XlaOp<'b>,
        dnums: &GatherDimensionNumbers,
        slice_sizes: &[i64],
        indices_are_sorted: bool,
    ) -> XlaOp<'b> {
        self.op("gather", || {
            let mut spec = Spec::new(Opcode::Gather)
                .attr("offset_dims", ints(&dnums.offset_dims))
                .attr("collapsed_slice_dims", ints(&dnums.collapsed_slice_dims))
                .attr("start_index_map", ints(&dnums.start_index_map));
            if !dnums.operand_batching_dims.is_empty() {
                spec = spec.attr("operand_batching_dims", ints(&dnums.operand_batching_dims));
            }
            if !dnums.start_indices_batching_dims.is_empty() {
                spec = spec.attr("start_indices_batching_dims", ints(&dnums.start_indices_batching_dims));
            }
            spec = spec
                .attr("index_vector_dim", AttrValue::Int(dnums.index_vector_dim))
                .attr("slice_sizes", ints(slice_sizes));
            if indices_are_sorted {
                spec = spec.attr("indices_are_sorted", AttrValue::Bool(true));
            }
            self.emit(spec, &[operand, start_indices])
        })
    }

    /// Combines `updates` into `operands` at the indices in `scatter_indices` with
    /// `computation`. Several operands give a tuple.
    #[allow(clippy::too_many_arguments)]
    pub fn scatter<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        scatter_indices: XlaOp<'b>,
        updates: &[XlaOp<'b>],
        computation: &Module,
        dnums: &ScatterDimensionNumbers,
        indices_are_sorted: bool,
        unique_indices: bool,
    ) -> XlaOp<'b> {
        self.op("scatter", || {
            let comp = self.import(computation)?;
            let mut spec = Spec::new(Opcode::Scatter)
                .attr("update_window_dims", ints(&dnums.update_window_dims))
                .attr("inserted_window_dims", ints(&dnums.inserted_window_dims))
                .attr("scatter_dims_to_operand_dims", ints(&dnums.scatter_dims_to_operand_dims));
            if !dnums.input_batching_dims.is_empty() {
                spec = spec.attr("input_batching_dims", ints(&dnums.input_batching_dims));
            }
            if !dnums.scatter_indices_batching_dims.is_empty() {
                spec = spec.attr("scatter_indices_batching_dims", ints(&dnums.scatter_indices_batching_dims));
            }
            spec = spec.attr("index_vector_dim", AttrValue::Int(dnums.index_vector_dim));
            if indices_are_sorted {
                spec = spec.attr("indices_are_sorted", AttrValue::Bool(true));
            }
            if unique_indices {
                spec = spec.attr("unique_indices", AttrValue::Bool(true));
            }
            spec = spec.attr("to_apply", AttrValue::Computation(comp));
            let all: Vec<XlaOp<'b>> = operands
                .iter()
                .copied()
                .chain(std::iter::once(scatter_indices))
                .chain(updates.iter().copied())
                .collect();
            self.emit(spec, &all)
        })
    }

    // ---- Random numbers ---------------------------------------------------------------------

    fn rng<'b>(&'b self, dist: RandomDistribution, a: XlaOp<'b>, b: XlaOp<'b>, shape: &Shape) -> OpResult<XlaOp<'b>> {
        let spec = Spec::new(Opcode::Rng).declared(shape.clone()).attr("distribution", enum_attr(dist.name()));
        self.emit(spec, &[a, b])
    }

    /// Numbers drawn uniformly from `[a, b)`, of `shape`.
    pub fn rng_uniform<'b>(&'b self, a: XlaOp<'b>, b: XlaOp<'b>, shape: &Shape) -> XlaOp<'b> {
        self.op("rng", || self.rng(RandomDistribution::Uniform, a, b, shape))
    }

    /// Numbers drawn from `N(mu, sigma)`, of `shape`.
    pub fn rng_normal<'b>(&'b self, mu: XlaOp<'b>, sigma: XlaOp<'b>, shape: &Shape) -> XlaOp<'b> {
        self.op("rng", || self.rng(RandomDistribution::Normal, mu, sigma, shape))
    }

    /// 1 with probability `mean` (an f32 scalar), else 0, of `shape` (seed 003's
    /// `RngBernoulli`); HLO has no such distribution, so it is a uniform draw compared with
    /// the mean.
    pub fn rng_bernoulli<'b>(&'b self, mean: XlaOp<'b>, shape: &Shape) -> XlaOp<'b> {
        self.op("rng_bernoulli", || {
            let target = shape.as_array().ok_or_else(|| format!("shape {shape} is not an array"))?;
            let mean_shape = self.array(mean, "the mean")?;
            if mean_shape.rank() != 0 || mean_shape.element_type != ElementType::F32 {
                return Err(format!("the mean must be an f32 scalar, not {}", Shape::Array(mean_shape)));
            }
            let (zero, one) = (self.zero(ElementType::F32), self.one(ElementType::F32));
            let uniform =
                self.rng(RandomDistribution::Uniform, zero, one, &Shape::array(ElementType::F32, &target.dims))?;
            let (u, m) = self.broadcast_operands(uniform, mean, &[])?;
            let spec = Spec::new(Opcode::Compare).attr("direction", enum_attr(ComparisonDirection::Lt.name()));
            let hit = self.emit(spec, &[u, m])?;
            self.emit(Spec::new(Opcode::Convert).declared(shape.clone()), &[hit])
        })
    }

    // ---- Side effects and escapes ------------------------------------------------------------

    /// A fresh token (`after-all()`), to order side effects.
    pub fn create_token(&self) -> XlaOp<'_> {
        self.op("after-all", || self.emit(Spec::new(Opcode::AfterAll), &[]))
    }

    /// A token that follows all of `tokens`.
    pub fn after_all<'b>(&'b self, tokens: &[XlaOp<'b>]) -> XlaOp<'b> {
        self.op("after-all", || self.emit(Spec::new(Opcode::AfterAll), tokens))
    }

    /// Reads a value of `shape` from the infeed (XLA's `Infeed`: a fresh token, an `infeed`
    /// of `(shape, token[])`, and its element 0).
    pub fn infeed<'b>(&'b self, shape: &Shape, config: &str) -> XlaOp<'b> {
        self.op("infeed", || {
            let token = self.emit(Spec::new(Opcode::AfterAll), &[])?;
            let infeed = self.infeed_inner(token, shape, config)?;
            self.gte(infeed, 0)
        })
    }

    /// Reads a value of `shape` after `token`; the result is the tuple `(value, token)`.
    pub fn infeed_with_token<'b>(&'b self, token: XlaOp<'b>, shape: &Shape, config: &str) -> XlaOp<'b> {
        self.op("infeed", || self.infeed_inner(token, shape, config))
    }

    fn infeed_inner<'b>(&'b self, token: XlaOp<'b>, shape: &Shape, config: &str) -> OpResult<XlaOp<'b>> {
        let mut spec = Spec::new(Opcode::Infeed).declared(Shape::Tuple(vec![shape.clone(), Shape::Token]));
        if !config.is_empty() {
            spec = spec.attr("infeed_config", AttrValue::Str(config.to_string()));
        }
        self.emit(spec, &[token])
    }

    /// Writes `operand` to the outfeed after a fresh token; returns the outfeed's token.
    pub fn outfeed<'b>(&'b self, operand: XlaOp<'b>, config: &str) -> XlaOp<'b> {
        self.op("outfeed", || {
            let token = self.emit(Spec::new(Opcode::AfterAll), &[])?;
            self.outfeed_inner(operand, token, config)
        })
    }

    /// Writes `operand` to the outfeed after `token`; returns the outfeed's token.
    pub fn outfeed_with_token<'b>(&'b self, operand: XlaOp<'b>, token: XlaOp<'b>, config: &str) -> XlaOp<'b> {
        self.op("outfeed", || self.outfeed_inner(operand, token, config))
    }

    fn outfeed_inner<'b>(&'b self, operand: XlaOp<'b>, token: XlaOp<'b>, config: &str) -> OpResult<XlaOp<'b>> {
        let shape = self.shape(operand)?;
        let mut spec = Spec::new(Opcode::Outfeed).declared(Shape::Token).attr("outfeed_shape", AttrValue::Shape(shape));
        if !config.is_empty() {
            spec = spec.attr("outfeed_config", AttrValue::Str(config.to_string()));
        }
        self.emit(spec, &[operand, token])
    }

    /// A call to the external function `target` returning `shape`.
    pub fn custom_call<'b>(&'b self, target: &str, operands: &[XlaOp<'b>], shape: &Shape) -> XlaOp<'b> {
        self.custom_call_with_config(target, operands, shape, "")
    }

    /// [`Builder::custom_call`] with an opaque `backend_config` string for the target.
    pub fn custom_call_with_config<'b>(
        &'b self,
        target: &str,
        operands: &[XlaOp<'b>],
        shape: &Shape,
        backend_config: &str,
    ) -> XlaOp<'b> {
        self.op("custom-call", || {
            let mut spec = Spec::new(Opcode::CustomCall)
                .declared(shape.clone())
                .attr("custom_call_target", AttrValue::Str(target.to_string()));
            if !backend_config.is_empty() {
                spec = spec.attr("backend_config", AttrValue::Str(backend_config.to_string()));
            }
            self.emit(spec, operands)
        })
    }
}

/// The sizes of the spatial dimensions `dims` of `shape`.
fn spatial_sizes(shape: &ArrayShape, dims: &[i64], what: &str) -> OpResult<Vec<i64>> {
    dims.iter()
        .map(|&d| {
            usize::try_from(d)
                .ok()
                .and_then(|d| shape.dims.get(d).copied())
                .ok_or_else(|| format!("{what} spatial dimension {d} is out of range for rank {}", shape.rank()))
        })
        .collect()
}

/// A window from per-dimension lists; missing entries take the defaults (stride and
/// dilations 1, no padding).
fn make_window(
    sizes: &[i64],
    strides: &[i64],
    padding: &[(i64, i64)],
    base_dilations: &[i64],
    window_dilations: &[i64],
) -> Window {
    let dims = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let (padding_low, padding_high) = padding.get(i).copied().unwrap_or((0, 0));
            WindowDim {
                size,
                stride: strides.get(i).copied().unwrap_or(1),
                padding_low,
                padding_high,
                window_dilation: window_dilations.get(i).copied().unwrap_or(1),
                base_dilation: base_dilations.get(i).copied().unwrap_or(1),
                window_reversal: false,
            }
        })
        .collect();
    Window { dims }
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
