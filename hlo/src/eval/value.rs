//! The interpreter's values: row-major arrays in one of four widened buffers, large arrays
//! packed in their element type between the instructions that use them, tuples, or tokens.

use std::borrow::Cow;

use super::{minifloat, EvalError};
use crate::element_type::ElementType;
use crate::literal::Literal;
use crate::shape::Shape;
use half::{bf16, f16};

#[derive(Clone, Debug)]
pub(crate) enum Buf {
    Pred(Vec<bool>),
    /// Signed types sign-extended, unsigned zero-extended (u64 keeps its bits).
    Int(Vec<i64>),
    /// Every value is exactly representable in the element type.
    Float(Vec<f64>),
    /// (real, imaginary), each part exactly representable in the component type.
    Complex(Vec<(f64, f64)>),
}

#[derive(Clone, Debug)]
pub(crate) struct Arr {
    pub ty: ElementType,
    pub dims: Vec<i64>,
    pub buf: Buf,
}

#[derive(Clone, Debug)]
pub(crate) enum Value {
    Arr(Arr),
    /// A large array kept in its element type's row-major bytes while it waits for the
    /// instructions that read it, and widened only while one computes with it: a bf16 weight
    /// takes 2 bytes per element instead of 8, so a model's weights fit in a small multiple of
    /// their size. Structural ops (tuples, calls, loops, copies) pass it on as it is.
    Packed(Literal),
    Tuple(Vec<Value>),
    /// Tokens carry no data; they only order side effects, which evaluation order already does.
    Token,
}

/// Applies `$e` to the vector inside any buffer, rebuilding the same kind of buffer.
macro_rules! map_buf {
    ($buf:expr, $v:ident => $e:expr) => {
        match $buf {
            $crate::eval::Buf::Pred($v) => $crate::eval::Buf::Pred($e),
            $crate::eval::Buf::Int($v) => $crate::eval::Buf::Int($e),
            $crate::eval::Buf::Float($v) => $crate::eval::Buf::Float($e),
            $crate::eval::Buf::Complex($v) => $crate::eval::Buf::Complex($e),
        }
    };
}
pub(crate) use map_buf;

/// Every array element type can be held: token, tuple and opaque are not array types.
pub(crate) fn check_type(ty: ElementType, inst: &str) -> Result<(), EvalError> {
    if ty.is_array_type() {
        Ok(())
    } else {
        Err(EvalError::UnsupportedType { element_type: ty, instruction: inst.to_string() })
    }
}

/// Wraps an integer to the width and signedness of `ty` (two's complement, as XLA defines
/// integer overflow); sub-byte types wrap to their 1, 2 or 4 bits.
pub(crate) fn wrap_int(ty: ElementType, x: i64) -> i64 {
    let w = ty.bit_width();
    if w == 0 || w >= 64 {
        return x;
    }
    let shift = 64 - w;
    if ty.is_signed_integral() {
        (x << shift) >> shift
    } else {
        ((x as u64) << shift >> shift) as i64
    }
}

/// Rounds to the float format of `ty`; f16/bf16 via f32 like XLA:CPU.
pub(crate) fn round_float(ty: ElementType, x: f64) -> f64 {
    match ty {
        ElementType::F32 => x as f32 as f64,
        ElementType::F16 => f16::from_f32(x as f32).to_f64(),
        ElementType::BF16 => bf16::from_f32(x as f32).to_f64(),
        t if minifloat::is_minifloat(t) => minifloat::round(t, x),
        _ => x,
    }
}

/// Rounds both parts of a complex number to the component type of `ty`.
pub(crate) fn round_complex(ty: ElementType, (re, im): (f64, f64)) -> (f64, f64) {
    if ty == ElementType::C64 {
        (re as f32 as f64, im as f32 as f64)
    } else {
        (re, im)
    }
}

/// The buffer class that holds values of `ty`.
pub(crate) fn empty_buf(ty: ElementType, capacity: usize) -> Buf {
    if ty == ElementType::Pred {
        Buf::Pred(Vec::with_capacity(capacity))
    } else if ty.is_float() {
        Buf::Float(Vec::with_capacity(capacity))
    } else if ty.is_complex() {
        Buf::Complex(Vec::with_capacity(capacity))
    } else {
        Buf::Int(Vec::with_capacity(capacity))
    }
}

/// A float element's value from its raw bits.
pub(crate) fn float_from_bits(ty: ElementType, bits: u64) -> f64 {
    match ty {
        ElementType::F16 => f16::from_bits(bits as u16).to_f64(),
        ElementType::BF16 => bf16::from_bits(bits as u16).to_f64(),
        ElementType::F32 => f64::from(f32::from_bits(bits as u32)),
        ElementType::F64 => f64::from_bits(bits),
        t => minifloat::decode(t, bits),
    }
}

/// A float element's raw bits (the value is already exact in `ty`).
pub(crate) fn float_to_bits(ty: ElementType, x: f64) -> u64 {
    match ty {
        ElementType::F16 => u64::from(f16::from_f64(x).to_bits()),
        ElementType::BF16 => u64::from(bf16::from_f64(x).to_bits()),
        ElementType::F32 => u64::from((x as f32).to_bits()),
        ElementType::F64 => x.to_bits(),
        t => minifloat::encode(t, x),
    }
}

pub(crate) fn is_unsigned(ty: ElementType) -> bool {
    ty.class() == crate::element_type::TypeClass::Unsigned
}

impl Buf {
    pub fn len(&self) -> usize {
        match self {
            Buf::Pred(v) => v.len(),
            Buf::Int(v) => v.len(),
            Buf::Float(v) => v.len(),
            Buf::Complex(v) => v.len(),
        }
    }

    /// The one-element buffer of element `i`.
    pub fn element(&self, i: usize) -> Buf {
        map_buf!(self, v => vec![v[i]])
    }

    /// The elements at `indices`, in that order.
    pub fn take(&self, indices: &[usize]) -> Buf {
        map_buf!(self, v => indices.iter().map(|&i| v[i]).collect())
    }

    /// Appends `other` when both are the same class; false otherwise.
    pub fn extend_from(&mut self, other: &Buf) -> bool {
        match (self, other) {
            (Buf::Pred(d), Buf::Pred(s)) => d.extend_from_slice(s),
            (Buf::Int(d), Buf::Int(s)) => d.extend_from_slice(s),
            (Buf::Float(d), Buf::Float(s)) => d.extend_from_slice(s),
            (Buf::Complex(d), Buf::Complex(s)) => d.extend_from_slice(s),
            _ => return false,
        }
        true
    }
}

impl Arr {
    /// A scalar of `ty` holding element `i` of this array.
    pub fn scalar_at(&self, i: usize) -> Arr {
        Arr { ty: self.ty, dims: vec![], buf: self.buf.element(i) }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn from_literal(lit: &Literal, inst: &str) -> Result<Arr, EvalError> {
        use ElementType as E;
        let shape = lit.array_shape().ok_or_else(|| EvalError::Argument(format!("{inst}: expected an array")))?;
        let ty = shape.element_type;
        check_type(ty, inst)?;
        // Dense row-major bytes are the logical values already: decode them directly rather
        // than through the per-element layout map.
        if lit.is_dense_row_major() && matches!(ty, E::F32 | E::S32 | E::F64) {
            let bytes = lit.physical_bytes()?;
            let buf = match ty {
                E::F32 => Buf::Float(
                    bytes.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
                ),
                E::S32 => Buf::Int(
                    bytes.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
                ),
                _ => Buf::Float(
                    bytes
                        .chunks_exact(8)
                        .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                        .collect(),
                ),
            };
            return Ok(Arr { ty, dims: shape.dims.clone(), buf });
        }
        let buf = match ty {
            E::Pred => Buf::Pred(lit.to_vec::<bool>()?),
            E::S8 => Buf::Int(lit.to_vec::<i8>()?.into_iter().map(i64::from).collect()),
            E::S16 => Buf::Int(lit.to_vec::<i16>()?.into_iter().map(i64::from).collect()),
            E::S32 => Buf::Int(lit.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
            E::S64 => Buf::Int(lit.to_vec::<i64>()?),
            E::U8 => Buf::Int(lit.to_vec::<u8>()?.into_iter().map(i64::from).collect()),
            E::U16 => Buf::Int(lit.to_vec::<u16>()?.into_iter().map(i64::from).collect()),
            E::U32 => Buf::Int(lit.to_vec::<u32>()?.into_iter().map(i64::from).collect()),
            E::U64 => Buf::Int(lit.to_vec::<u64>()?.into_iter().map(|x| x as i64).collect()),
            E::F16 => Buf::Float(lit.to_vec::<f16>()?.into_iter().map(f16::to_f64).collect()),
            E::BF16 => Buf::Float(lit.to_vec::<bf16>()?.into_iter().map(bf16::to_f64).collect()),
            E::F32 => Buf::Float(lit.to_vec::<f32>()?.into_iter().map(f64::from).collect()),
            E::F64 => Buf::Float(lit.to_vec::<f64>()?),
            E::C64 => Buf::Complex(
                lit.to_vec::<(f32, f32)>()?.into_iter().map(|(r, i)| (f64::from(r), f64::from(i))).collect(),
            ),
            E::C128 => Buf::Complex(lit.to_vec::<(f64, f64)>()?),
            t if t.is_float() => {
                Buf::Float(lit.to_bits_vec()?.into_iter().map(|b| float_from_bits(t, b as u64)).collect())
            }
            t if t.is_integral() => Buf::Int(lit.to_bits_vec()?.into_iter().map(|b| wrap_int(t, b as i64)).collect()),
            _ => return Err(EvalError::UnsupportedType { element_type: ty, instruction: inst.to_string() }),
        };
        Ok(Arr { ty, dims: shape.dims.clone(), buf })
    }

    /// The literal of `shape` (its layout included) holding these values; bounded dynamic
    /// dimensions are at their bounds (see `result_array`).
    pub fn to_literal(&self, shape: &Shape) -> Result<Literal, EvalError> {
        use ElementType as E;
        let mut s = shape.clone();
        if let Shape::Array(a) = &mut s {
            a.dynamic.fill(false);
        }
        let lit = match (&self.buf, self.ty) {
            (Buf::Pred(v), _) => Literal::from_vec_with_shape(s, v.clone()),
            (Buf::Int(v), E::S8) => Literal::from_vec_with_shape(s, v.iter().map(|&x| x as i8).collect()),
            (Buf::Int(v), E::S16) => Literal::from_vec_with_shape(s, v.iter().map(|&x| x as i16).collect()),
            (Buf::Int(v), E::S32) => Literal::from_vec_with_shape(s, v.iter().map(|&x| x as i32).collect()),
            (Buf::Int(v), E::S64) => Literal::from_vec_with_shape(s, v.clone()),
            (Buf::Int(v), E::U8) => Literal::from_vec_with_shape(s, v.iter().map(|&x| x as u8).collect()),
            (Buf::Int(v), E::U16) => Literal::from_vec_with_shape(s, v.iter().map(|&x| x as u16).collect()),
            (Buf::Int(v), E::U32) => Literal::from_vec_with_shape(s, v.iter().map(|&x| x as u32).collect()),
            (Buf::Int(v), E::U64) => Literal::from_vec_with_shape(s, v.iter().map(|&x| x as u64).collect()),
            (Buf::Float(v), E::F16) => Literal::from_vec_with_shape(s, v.iter().map(|&x| f16::from_f64(x)).collect()),
            (Buf::Float(v), E::BF16) => Literal::from_vec_with_shape(s, v.iter().map(|&x| bf16::from_f64(x)).collect()),
            (Buf::Float(v), E::F32) if is_row_major(shape) => {
                let mut bytes = Vec::with_capacity(v.len() * 4);
                for &x in v {
                    bytes.extend_from_slice(&(x as f32).to_le_bytes());
                }
                Literal::from_physical_bytes(s, bytes)
            }
            (Buf::Float(v), E::F32) => Literal::from_vec_with_shape(s, v.iter().map(|&x| x as f32).collect()),
            (Buf::Float(v), E::F64) => Literal::from_vec_with_shape(s, v.clone()),
            (Buf::Float(v), t) if t.is_float() => {
                Literal::from_bits_vec(s, v.iter().map(|&x| u128::from(float_to_bits(t, x))).collect())
            }
            // Sub-byte integers: the literal keeps the low bits.
            (Buf::Int(v), t) if t.is_integral() => {
                Literal::from_bits_vec(s, v.iter().map(|&x| x as u64 as u128).collect())
            }
            (Buf::Complex(v), E::C64) => {
                Literal::from_vec_with_shape(s, v.iter().map(|&(r, i)| (r as f32, i as f32)).collect())
            }
            (Buf::Complex(v), E::C128) => Literal::from_vec_with_shape(s, v.clone()),
            _ => return Err(EvalError::UnsupportedType { element_type: self.ty, instruction: "result".to_string() }),
        };
        Ok(lit?)
    }
}

/// Arrays of at least this many elements are packed between instructions; smaller ones are
/// not worth the conversions.
const PACK_MIN_ELEMENTS: usize = 1 << 16;

impl Value {
    /// The value with its large arrays packed (when their type is narrower than its widened
    /// buffer and converts back exactly).
    pub(crate) fn packed(self) -> Value {
        use ElementType as E;
        match self {
            Value::Arr(a)
                if a.buf.len() >= PACK_MIN_ELEMENTS
                    && matches!(
                        a.ty,
                        E::F32 | E::F16 | E::BF16 | E::S8 | E::S16 | E::S32 | E::U8 | E::U16 | E::U32
                    ) =>
            {
                match a.to_literal(&Shape::array(a.ty, &a.dims)) {
                    Ok(lit) => Value::Packed(lit),
                    Err(_) => Value::Arr(a),
                }
            }
            Value::Tuple(vs) => Value::Tuple(vs.into_iter().map(Value::packed).collect()),
            v => v,
        }
    }

    pub(crate) fn has_packed(&self) -> bool {
        match self {
            Value::Packed(_) => true,
            Value::Tuple(vs) => vs.iter().any(Value::has_packed),
            _ => false,
        }
    }

    /// The value with every packed array widened (borrowed when there is none).
    pub(crate) fn widened(&self, inst: &str) -> Result<Cow<'_, Value>, EvalError> {
        Ok(match self {
            Value::Packed(lit) => Cow::Owned(Value::Arr(Arr::from_literal(lit, inst)?)),
            Value::Tuple(vs) if self.has_packed() => Cow::Owned(Value::Tuple(
                vs.iter().map(|v| v.widened(inst).map(Cow::into_owned)).collect::<Result<_, _>>()?,
            )),
            v => Cow::Borrowed(v),
        })
    }

    pub fn from_literal(lit: &Literal, inst: &str) -> Result<Value, EvalError> {
        if matches!(lit.shape(), Shape::Token) {
            return Ok(Value::Token);
        }
        match lit.tuple_elements() {
            Some(elems) => {
                Ok(Value::Tuple(elems.iter().map(|e| Value::from_literal(e, inst)).collect::<Result<_, _>>()?))
            }
            None => Ok(Value::Arr(Arr::from_literal(lit, inst)?)),
        }
    }

    pub fn to_literal(&self, shape: &Shape) -> Result<Literal, EvalError> {
        match (self, shape) {
            (Value::Arr(a), Shape::Array(_)) => a.to_literal(shape),
            (Value::Packed(lit), Shape::Array(_)) => Arr::from_literal(lit, "result")?.to_literal(shape),
            (Value::Token, Shape::Token) => Ok(Literal::zeros(Shape::Token)?),
            (Value::Tuple(vs), Shape::Tuple(ss)) if vs.len() == ss.len() => {
                Ok(Literal::tuple(vs.iter().zip(ss).map(|(v, s)| v.to_literal(s)).collect::<Result<_, _>>()?))
            }
            _ => Err(EvalError::Argument(format!("the result does not have the declared shape {shape}"))),
        }
    }
}

/// True when the shape's physical buffer is plain row-major with no tiles or padding.
fn is_row_major(shape: &Shape) -> bool {
    match shape.as_array() {
        Some(a) => match &a.layout {
            None => true,
            Some(l) => *l == crate::layout::Layout::row_major(a.rank()),
        },
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packing a large array and widening it again gives back every element bit for bit, in
    /// every packable type, special values included; small arrays stay widened.
    #[test]
    fn packed_arrays_widen_to_the_same_values() {
        use ElementType as E;
        let n = PACK_MIN_ELEMENTS + 3;
        for ty in [E::F32, E::F16, E::BF16, E::S8, E::S16, E::S32, E::U8, E::U16, E::U32] {
            let buf = if ty.is_float() {
                let specials = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1.0e-40, 65504.0, -3.5];
                Buf::Float(
                    (0..n)
                        .map(|i| round_float(ty, specials.get(i).copied().unwrap_or(i as f64 * 0.37 - 999.0)))
                        .collect(),
                )
            } else {
                Buf::Int((0..n).map(|i| wrap_int(ty, i as i64 * 7919 - 40_000)).collect())
            };
            let arr = Arr { ty, dims: vec![n as i64], buf };
            let want = arr.to_literal(&Shape::array(ty, &[n as i64])).unwrap();
            let packed = Value::Arr(arr).packed();
            assert!(matches!(packed, Value::Packed(_)), "{ty:?} was not packed");
            let Value::Arr(back) = packed.widened("test").unwrap().into_owned() else { panic!("{ty:?}: not an array") };
            let got = back.to_literal(&Shape::array(ty, &[n as i64])).unwrap();
            assert_eq!(got.to_bits_vec().unwrap(), want.to_bits_vec().unwrap(), "{ty:?}");
        }
        let small = Value::Arr(Arr { ty: E::F32, dims: vec![4], buf: Buf::Float(vec![1.0; 4]) });
        assert!(matches!(small.packed(), Value::Arr(_)));
    }
}
