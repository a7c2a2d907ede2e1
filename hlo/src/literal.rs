//! Literals: typed N-d arrays (or tuples of them) that carry a shape with a layout.
//!
//! Elements are addressed by their logical row-major linear index; how they are stored is
//! this module's business.

use crate::shape::Shape;

#[derive(Clone, Debug, PartialEq)]
pub struct Literal {
    shape: Shape,
    data: Data,
}

#[derive(Clone, Debug, PartialEq)]
enum Data {
    /// One element per `element_type().byte_size()` bytes, little-endian, logical row-major.
    Array(Vec<u8>),
    Tuple(Vec<Literal>),
    Token,
}

/// Why a literal could not be made or accessed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LiteralError {
    #[error("literal shape {0} is not static")]
    NotStatic(String),
    #[error("literal of shape {0} is too large")]
    TooLarge(String),
    #[error("opaque shapes have no literal values")]
    Opaque,
}

impl Literal {
    /// A literal of the given shape with every element zero (bits all clear).
    pub fn zeros(shape: Shape) -> Result<Literal, LiteralError> {
        let data = match &shape {
            Shape::Array(a) => {
                if !a.is_static() {
                    return Err(LiteralError::NotStatic(shape.to_string()));
                }
                let bytes = a
                    .element_count()
                    .and_then(|n| usize::try_from(n).ok())
                    .and_then(|n| n.checked_mul(a.element_type.byte_size()))
                    .ok_or_else(|| LiteralError::TooLarge(shape.to_string()))?;
                Data::Array(vec![0; bytes])
            }
            Shape::Tuple(elems) => Data::Tuple(elems.iter().cloned().map(Literal::zeros).collect::<Result<_, _>>()?),
            Shape::Token => Data::Token,
            Shape::Opaque => return Err(LiteralError::Opaque),
        };
        Ok(Literal { shape, data })
    }

    /// A tuple of literals.
    pub fn tuple(elements: Vec<Literal>) -> Literal {
        let shape = Shape::Tuple(elements.iter().map(|e| e.shape.clone()).collect());
        Literal { shape, data: Data::Tuple(elements) }
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Elements of an array literal (0 for tuples and tokens).
    pub fn element_count(&self) -> usize {
        match &self.data {
            Data::Array(bytes) => bytes.len() / self.shape.element_type().byte_size().max(1),
            _ => 0,
        }
    }

    pub fn tuple_elements(&self) -> Option<&[Literal]> {
        match &self.data {
            Data::Tuple(e) => Some(e),
            _ => None,
        }
    }

    /// Raw bits of element `index` (logical row-major), zero-extended. `None` when out of range
    /// or not an array.
    pub fn get_bits(&self, index: usize) -> Option<u128> {
        let Data::Array(bytes) = &self.data else { return None };
        let size = self.shape.element_type().byte_size();
        let chunk = bytes.get(index.checked_mul(size)?..(index + 1).checked_mul(size)?)?;
        let mut buf = [0u8; 16];
        buf[..size].copy_from_slice(chunk);
        Some(u128::from_le_bytes(buf))
    }

    /// Sets the raw bits of element `index`; bits above the element's width are dropped.
    /// Returns false when out of range or not an array.
    pub fn set_bits(&mut self, index: usize, bits: u128) -> bool {
        let size = self.shape.element_type().byte_size();
        let Data::Array(bytes) = &mut self.data else { return false };
        let Some(chunk) = index
            .checked_mul(size)
            .and_then(|start| Some(start..start.checked_add(size)?))
            .and_then(|r| bytes.get_mut(r))
        else {
            return false;
        };
        chunk.copy_from_slice(&bits.to_le_bytes()[..size]);
        true
    }
}
