//! The interpreter's values: row-major arrays in one of three widened buffers, or tuples.

use super::EvalError;
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
    Tuple(Vec<Value>),
}

/// Applies `$e` to the vector inside any buffer, rebuilding the same kind of buffer.
macro_rules! map_buf {
    ($buf:expr, $v:ident => $e:expr) => {
        match $buf {
            $crate::eval::Buf::Pred($v) => $crate::eval::Buf::Pred($e),
            $crate::eval::Buf::Int($v) => $crate::eval::Buf::Int($e),
            $crate::eval::Buf::Float($v) => $crate::eval::Buf::Float($e),
        }
    };
}
pub(crate) use map_buf;

pub(crate) fn check_type(ty: ElementType, inst: &str) -> Result<(), EvalError> {
    use ElementType as E;
    match ty {
        E::Pred | E::S8 | E::S16 | E::S32 | E::S64 | E::U8 | E::U16 | E::U32 | E::U64 => Ok(()),
        E::F16 | E::BF16 | E::F32 | E::F64 => Ok(()),
        _ => Err(EvalError::UnsupportedType { element_type: ty, instruction: inst.to_string() }),
    }
}

/// Wraps an integer to the width and signedness of `ty` (two's complement, as XLA defines
/// integer overflow).
pub(crate) fn wrap_int(ty: ElementType, x: i64) -> i64 {
    use ElementType as E;
    match ty {
        E::S8 => x as i8 as i64,
        E::S16 => x as i16 as i64,
        E::S32 => x as i32 as i64,
        E::U8 => x as u8 as i64,
        E::U16 => x as u16 as i64,
        E::U32 => x as u32 as i64,
        _ => x,
    }
}

/// Rounds to the float format of `ty`; f16/bf16 via f32 like XLA:CPU.
pub(crate) fn round_float(ty: ElementType, x: f64) -> f64 {
    match ty {
        ElementType::F32 => x as f32 as f64,
        ElementType::F16 => f16::from_f32(x as f32).to_f64(),
        ElementType::BF16 => bf16::from_f32(x as f32).to_f64(),
        _ => x,
    }
}

pub(crate) fn is_unsigned(ty: ElementType) -> bool {
    ty.class() == crate::element_type::TypeClass::Unsigned
}

impl Arr {
    pub fn len(&self) -> usize {
        match &self.buf {
            Buf::Pred(v) => v.len(),
            Buf::Int(v) => v.len(),
            Buf::Float(v) => v.len(),
        }
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
            _ => return Err(EvalError::UnsupportedType { element_type: ty, instruction: inst.to_string() }),
        };
        Ok(Arr { ty, dims: shape.dims.clone(), buf })
    }

    /// The literal of `shape` (its layout included) holding these values.
    pub fn to_literal(&self, shape: &Shape) -> Result<Literal, EvalError> {
        use ElementType as E;
        let s = shape.clone();
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
            _ => return Err(EvalError::UnsupportedType { element_type: self.ty, instruction: "result".to_string() }),
        };
        Ok(lit?)
    }
}

impl Value {
    pub fn from_literal(lit: &Literal, inst: &str) -> Result<Value, EvalError> {
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
