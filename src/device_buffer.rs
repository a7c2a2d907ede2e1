//! Resident buffers: an array's physical bytes, laid out for the parameter (or result) they
//! belong to, in 64-byte-aligned memory that executions read and write without copies.

use tessera_hlo::{ArrayShape, LayoutMap, Literal, Shape};
use tessera_runtime::AlignedBuffer;

use crate::Error;

#[derive(Clone, Debug)]
pub struct DeviceBuffer {
    /// An array shape with its layout (the physical truth of `memory`).
    shape: ArrayShape,
    memory: AlignedBuffer,
}

impl DeviceBuffer {
    /// A zeroed buffer for `shape` (a static array shape; its layout decides the size).
    pub fn zeroed(shape: &ArrayShape) -> Result<DeviceBuffer, Error> {
        let bytes = physical_bytes(shape)?;
        Ok(DeviceBuffer { shape: shape.clone(), memory: AlignedBuffer::zeroed(bytes)? })
    }

    /// The literal's physical bytes, in the literal's own layout.
    pub fn from_literal(literal: &Literal) -> Result<DeviceBuffer, Error> {
        let Some(shape) = literal.array_shape() else {
            return Err(tessera_hlo::LiteralError::NotArray(literal.shape().to_string()).into());
        };
        Ok(DeviceBuffer { shape: shape.clone(), memory: AlignedBuffer::from_bytes(literal.physical_bytes()?)? })
    }

    /// The array shape, with the layout the bytes follow.
    pub fn shape(&self) -> &ArrayShape {
        &self.shape
    }

    /// The memory space its layout names (`S(n)`; 0 is host memory).
    pub fn memory_space(&self) -> i64 {
        self.shape.layout.as_ref().map_or(0, |l| l.memory_space)
    }

    /// The physical bytes (padding included).
    pub fn bytes(&self) -> &[u8] {
        self.memory.as_slice()
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.memory.as_mut_slice()
    }

    /// The values as a literal in the buffer's layout.
    pub fn to_literal(&self) -> Result<Literal, Error> {
        Ok(Literal::from_physical_bytes(Shape::Array(self.shape.clone()), self.memory.as_slice())?)
    }
}

/// Physical byte size of a static array shape.
pub(crate) fn physical_bytes(shape: &ArrayShape) -> Result<usize, Error> {
    if !shape.is_static() {
        return Err(tessera_hlo::LiteralError::NotStatic(shape_text(shape)).into());
    }
    let map = LayoutMap::new(shape).map_err(tessera_hlo::LiteralError::from)?;
    usize::try_from(map.physical_byte_size()).map_err(|_| tessera_hlo::LiteralError::TooLarge(shape_text(shape)).into())
}

/// An array shape in HLO text, e.g. `f32[2,3]{0,1}`.
pub(crate) fn shape_text(shape: &ArrayShape) -> String {
    Shape::Array(shape.clone()).to_string()
}
