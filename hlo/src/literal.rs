//! Literals: typed N-d arrays (or tuples of them) that carry a shape with a layout.
//!
//! An array literal's bytes are its physical buffer: elements sit where the shape's layout
//! puts them (row-major when the shape has no layout), tile and tail padding included and
//! zero unless the bytes came from outside, sub-byte elements packed low bits first when the
//! layout says `E(bits)`. Element accessors take logical indices, so callers never see the
//! layout unless they ask for the physical bytes.

use crate::element_type::ElementType;
use crate::layout::Layout;
use crate::layout_index::{LayoutError, LayoutMap};
use crate::shape::{ArrayShape, Shape};

/// A host function a `custom-call` runs: operands in, result (or a message) out. The
/// interpreter and the runtime both call such functions, so the type lives with literals.
pub type HostFn = dyn Fn(&[Literal]) -> Result<Literal, String> + Send + Sync;

#[derive(Clone, Debug)]
pub struct Literal {
    /// Boxed to keep literals small where the IR embeds them.
    shape: Box<Shape>,
    data: Data,
}

#[derive(Clone, Debug)]
enum Data {
    /// Boxed: the layout map is large and tuples hold many literals.
    Array(Box<ArrayData>),
    Tuple(Vec<Literal>),
    Token,
}

#[derive(Clone, Debug)]
struct ArrayData {
    map: LayoutMap,
    /// Exactly `map.physical_byte_size()` bytes.
    bytes: Vec<u8>,
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
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("{0} is not an array literal")]
    NotArray(String),
    #[error("the literal holds {found} elements, not {requested}")]
    TypeMismatch { requested: ElementType, found: ElementType },
    #[error("shape {shape} has {expected} elements but {found} values were given")]
    CountMismatch { shape: String, expected: usize, found: usize },
    #[error("shape {shape} needs {expected} physical bytes but {found} were given")]
    ByteCountMismatch { shape: String, expected: usize, found: usize },
    #[error("shape {to} is not compatible with the literal's shape {from}")]
    Incompatible { from: String, to: String },
}

/// Rust types that hold one element of an HLO element type, with the element's raw bits.
pub trait NativeType: Copy {
    const ELEMENT_TYPE: ElementType;
    /// The raw bits, little-endian order, zero-extended.
    fn to_bits(self) -> u128;
    /// The value from raw bits; bits above the type's width are ignored.
    fn from_bits(bits: u128) -> Self;
}

macro_rules! native_ints {
    ($($t:ty => $unsigned:ty, $et:ident;)*) => {$(
        impl NativeType for $t {
            const ELEMENT_TYPE: ElementType = ElementType::$et;
            fn to_bits(self) -> u128 {
                u128::from(self as $unsigned)
            }
            fn from_bits(bits: u128) -> Self {
                bits as $unsigned as $t
            }
        }
    )*};
}

native_ints! {
    i8 => u8, S8;
    i16 => u16, S16;
    i32 => u32, S32;
    i64 => u64, S64;
    u8 => u8, U8;
    u16 => u16, U16;
    u32 => u32, U32;
    u64 => u64, U64;
}

impl NativeType for bool {
    const ELEMENT_TYPE: ElementType = ElementType::Pred;
    fn to_bits(self) -> u128 {
        u128::from(self)
    }
    fn from_bits(bits: u128) -> Self {
        bits as u8 != 0
    }
}

impl NativeType for f32 {
    const ELEMENT_TYPE: ElementType = ElementType::F32;
    fn to_bits(self) -> u128 {
        u128::from(f32::to_bits(self))
    }
    fn from_bits(bits: u128) -> Self {
        f32::from_bits(bits as u32)
    }
}

impl NativeType for f64 {
    const ELEMENT_TYPE: ElementType = ElementType::F64;
    fn to_bits(self) -> u128 {
        u128::from(f64::to_bits(self))
    }
    fn from_bits(bits: u128) -> Self {
        f64::from_bits(bits as u64)
    }
}

impl NativeType for half::f16 {
    const ELEMENT_TYPE: ElementType = ElementType::F16;
    fn to_bits(self) -> u128 {
        u128::from(half::f16::to_bits(self))
    }
    fn from_bits(bits: u128) -> Self {
        half::f16::from_bits(bits as u16)
    }
}

impl NativeType for half::bf16 {
    const ELEMENT_TYPE: ElementType = ElementType::BF16;
    fn to_bits(self) -> u128 {
        u128::from(half::bf16::to_bits(self))
    }
    fn from_bits(bits: u128) -> Self {
        half::bf16::from_bits(bits as u16)
    }
}

/// c64 as (real, imaginary); in memory the real part comes first.
impl NativeType for (f32, f32) {
    const ELEMENT_TYPE: ElementType = ElementType::C64;
    fn to_bits(self) -> u128 {
        u128::from(self.0.to_bits()) | (u128::from(self.1.to_bits()) << 32)
    }
    fn from_bits(bits: u128) -> Self {
        (f32::from_bits(bits as u32), f32::from_bits((bits >> 32) as u32))
    }
}

/// c128 as (real, imaginary).
impl NativeType for (f64, f64) {
    const ELEMENT_TYPE: ElementType = ElementType::C128;
    fn to_bits(self) -> u128 {
        u128::from(self.0.to_bits()) | (u128::from(self.1.to_bits()) << 64)
    }
    fn from_bits(bits: u128) -> Self {
        (f64::from_bits(bits as u64), f64::from_bits((bits >> 64) as u64))
    }
}

fn mask(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// The stored bits of physical slot `slot` in a buffer of `w`-bit slots.
fn read_slot(bytes: &[u8], w: u32, slot: i64) -> Option<u128> {
    let slot = usize::try_from(slot).ok()?;
    if w.is_multiple_of(8) {
        let n = (w / 8) as usize;
        let start = slot.checked_mul(n)?;
        let chunk = bytes.get(start..start.checked_add(n)?)?;
        let mut buf = [0u8; 16];
        buf.get_mut(..n)?.copy_from_slice(chunk);
        Some(u128::from_le_bytes(buf))
    } else {
        let bit = slot.checked_mul(w as usize)?;
        let byte = *bytes.get(bit / 8)?;
        Some(u128::from(byte >> (bit % 8)) & mask(w))
    }
}

/// Stores the low `w` bits of `value` in slot `slot`; sub-byte slots pack low bits first.
fn write_slot(bytes: &mut [u8], w: u32, slot: i64, value: u128) -> bool {
    let Ok(slot) = usize::try_from(slot) else { return false };
    if w.is_multiple_of(8) {
        let n = (w / 8) as usize;
        let Some(chunk) =
            slot.checked_mul(n).and_then(|start| Some(start..start.checked_add(n)?)).and_then(|r| bytes.get_mut(r))
        else {
            return false;
        };
        chunk.copy_from_slice(&value.to_le_bytes()[..n]);
        true
    } else {
        let Some(bit) = slot.checked_mul(w as usize) else { return false };
        let Some(byte) = bytes.get_mut(bit / 8) else { return false };
        let shift = bit % 8;
        let m = (mask(w) as u8) << shift;
        *byte = (*byte & !m) | (((value as u8) << shift) & m);
        true
    }
}

/// An element's value bits from its stored bits: cut to the type's width.
fn decode(element_type: ElementType, raw: u128) -> u128 {
    raw & mask(element_type.bit_width())
}

/// The bits to store for an element value in a `w`-bit slot: cut to the type's width (pred
/// becomes 0 or 1), and sign-extended across a wider slot for signed sub-byte types, the way
/// an unpacked `s4` byte holds its value.
fn encode(element_type: ElementType, w: u32, bits: u128) -> u128 {
    let width = element_type.bit_width();
    let mut v = if element_type.is_pred() { u128::from(bits & 0xFF != 0) } else { bits & mask(width) };
    if element_type.is_signed_integral() && w > width && width > 0 && (v >> (width - 1)) & 1 == 1 {
        v |= mask(w) & !mask(width);
    }
    v
}

impl ArrayData {
    fn new(map: LayoutMap, shape: &Shape) -> Result<ArrayData, LiteralError> {
        let len = usize::try_from(map.physical_byte_size()).map_err(|_| LiteralError::TooLarge(shape.to_string()))?;
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(len).map_err(|_| LiteralError::TooLarge(shape.to_string()))?;
        bytes.resize(len, 0);
        Ok(ArrayData { map, bytes })
    }

    fn slot_bits(&self) -> u32 {
        self.map.element_size_bits()
    }

    /// The element's value bits at a slot.
    fn get(&self, slot: i64) -> Option<u128> {
        read_slot(&self.bytes, self.slot_bits(), slot).map(|raw| decode(self.map.element_type(), raw))
    }

    fn put(&mut self, slot: i64, bits: u128) -> bool {
        let w = self.slot_bits();
        write_slot(&mut self.bytes, w, slot, encode(self.map.element_type(), w, bits))
    }

    /// Whether the bytes are exactly the natural-width elements in row-major order.
    fn is_dense_row_major(&self) -> bool {
        self.map.is_identity()
            && self.map.physical_element_count() == self.map.element_count()
            && self.slot_bits() as usize == self.map.element_type().byte_size() * 8
    }

    /// Copies every element of `src` (same dims and type) into this buffer's layout.
    fn copy_from(&mut self, src: &ArrayData) {
        let (ws, wd) = (src.slot_bits(), self.slot_bits());
        if ws == wd && ws.is_multiple_of(8) {
            let n = (ws / 8) as usize;
            if src.map.layout() == self.map.layout() || (src.is_dense_row_major() && self.is_dense_row_major()) {
                let len = self.bytes.len().min(src.bytes.len());
                if let (Some(d), Some(s)) = (self.bytes.get_mut(..len), src.bytes.get(..len)) {
                    d.copy_from_slice(s);
                }
                return;
            }
            for (so, d_off) in src.map.offsets().zip(self.map.offsets()) {
                let (Ok(so), Ok(d_off)) = (usize::try_from(so), usize::try_from(d_off)) else { continue };
                let (Some(s), Some(d)) =
                    (src.bytes.get(so * n..(so + 1) * n), self.bytes.get_mut(d_off * n..(d_off + 1) * n))
                else {
                    continue;
                };
                d.copy_from_slice(s);
            }
            return;
        }
        let et = self.map.element_type();
        let ArrayData { map, bytes } = self;
        for (so, d_off) in src.map.offsets().zip(map.offsets()) {
            if let Some(v) = src.get(so) {
                write_slot(bytes, wd, d_off, encode(et, wd, v));
            }
        }
    }

    fn values_equal(&self, other: &ArrayData) -> bool {
        if self.map.dims() != other.map.dims() || self.map.element_type() != other.map.element_type() {
            return false;
        }
        let et = self.map.element_type();
        let full_width = et.bit_width() as usize == et.byte_size() * 8;
        if full_width && self.map.layout() == other.map.layout() && self.is_dense_row_major() {
            return self.bytes == other.bytes;
        }
        self.map.offsets().zip(other.map.offsets()).all(|(a, b)| self.get(a) == other.get(b))
    }
}

impl Literal {
    /// A literal of the given shape with every element zero (bits all clear).
    pub fn zeros(shape: Shape) -> Result<Literal, LiteralError> {
        let data = match &shape {
            Shape::Array(a) => {
                if !a.is_static() {
                    return Err(LiteralError::NotStatic(shape.to_string()));
                }
                let map = LayoutMap::new(a).map_err(|e| match e {
                    LayoutError::Overflow(_) => LiteralError::TooLarge(shape.to_string()),
                    e => LiteralError::Layout(e),
                })?;
                Data::Array(Box::new(ArrayData::new(map, &shape)?))
            }
            Shape::Tuple(elems) => Data::Tuple(elems.iter().cloned().map(Literal::zeros).collect::<Result<_, _>>()?),
            Shape::Token => Data::Token,
            Shape::Opaque => return Err(LiteralError::Opaque),
        };
        Ok(Literal { shape: Box::new(shape), data })
    }

    /// A tuple of literals.
    pub fn tuple(elements: Vec<Literal>) -> Literal {
        let shape = Shape::Tuple(elements.iter().map(|e| (*e.shape).clone()).collect());
        Literal { shape: Box::new(shape), data: Data::Tuple(elements) }
    }

    /// A scalar.
    pub fn scalar<T: NativeType>(value: T) -> Literal {
        let et = T::ELEMENT_TYPE;
        let map = LayoutMap::scalar(et);
        let w = map.element_size_bits();
        let mut bytes = vec![0u8; et.byte_size()];
        write_slot(&mut bytes, w, 0, encode(et, w, value.to_bits()));
        Literal { shape: Box::new(Shape::scalar(et)), data: Data::Array(Box::new(ArrayData { map, bytes })) }
    }

    /// A row-major array of `dims` holding `values` in row-major order.
    pub fn from_vec<T: NativeType>(dims: &[i64], values: Vec<T>) -> Result<Literal, LiteralError> {
        Literal::from_vec_with_shape(Shape::array(T::ELEMENT_TYPE, dims), values)
    }

    /// An array of `shape` (stored in its layout) holding `values` in logical row-major order.
    pub fn from_vec_with_shape<T: NativeType>(shape: Shape, values: Vec<T>) -> Result<Literal, LiteralError> {
        Literal::from_bits_iter(shape, values.len(), T::ELEMENT_TYPE, values.into_iter().map(T::to_bits))
    }

    /// An array of `shape` from each element's raw bits in logical row-major order.
    pub fn from_bits_vec(shape: Shape, bits: Vec<u128>) -> Result<Literal, LiteralError> {
        let et = shape.element_type();
        Literal::from_bits_iter(shape, bits.len(), et, bits.into_iter())
    }

    fn from_bits_iter(
        shape: Shape,
        count: usize,
        element_type: ElementType,
        bits: impl Iterator<Item = u128>,
    ) -> Result<Literal, LiteralError> {
        let Shape::Array(a) = &shape else { return Err(LiteralError::NotArray(shape.to_string())) };
        if a.element_type != element_type {
            return Err(LiteralError::TypeMismatch { requested: element_type, found: a.element_type });
        }
        let mut lit = Literal::zeros(shape)?;
        let Data::Array(data) = &mut lit.data else { return Err(LiteralError::NotArray(lit.shape.to_string())) };
        let expected = usize::try_from(data.map.element_count()).unwrap_or(usize::MAX);
        if count != expected {
            return Err(LiteralError::CountMismatch { shape: lit.shape.to_string(), expected, found: count });
        }
        let w = data.slot_bits();
        let ArrayData { map, bytes } = &mut **data;
        for (slot, b) in map.offsets().zip(bits) {
            write_slot(bytes, w, slot, encode(element_type, w, b));
        }
        Ok(lit)
    }

    /// An array whose physical buffer is `bytes`, exactly as the shape's layout lays it out
    /// (padding may hold anything; it is never read as data).
    pub fn from_physical_bytes(shape: Shape, bytes: impl Into<Vec<u8>>) -> Result<Literal, LiteralError> {
        let bytes = bytes.into();
        let Shape::Array(a) = &shape else { return Err(LiteralError::NotArray(shape.to_string())) };
        if !a.is_static() {
            return Err(LiteralError::NotStatic(shape.to_string()));
        }
        let map = LayoutMap::new(a)?;
        let expected = usize::try_from(map.physical_byte_size()).unwrap_or(usize::MAX);
        if bytes.len() != expected {
            return Err(LiteralError::ByteCountMismatch { shape: shape.to_string(), expected, found: bytes.len() });
        }
        Ok(Literal { shape: Box::new(shape), data: Data::Array(Box::new(ArrayData { map, bytes })) })
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The array shape of an array literal.
    pub fn array_shape(&self) -> Option<&ArrayShape> {
        self.shape.as_array()
    }

    pub fn element_type(&self) -> ElementType {
        self.shape.element_type()
    }

    /// The layout map of an array literal.
    pub fn layout_map(&self) -> Option<&LayoutMap> {
        match &self.data {
            Data::Array(a) => Some(&a.map),
            _ => None,
        }
    }

    /// Elements of an array literal (0 for tuples and tokens).
    pub fn element_count(&self) -> usize {
        match &self.data {
            Data::Array(a) => usize::try_from(a.map.element_count()).unwrap_or(0),
            _ => 0,
        }
    }

    pub fn tuple_elements(&self) -> Option<&[Literal]> {
        match &self.data {
            Data::Tuple(e) => Some(e),
            _ => None,
        }
    }

    /// Raw bits of element `index` (logical row-major), zero-extended and cut to the type's
    /// width. `None` when out of range or not an array.
    pub fn get_bits(&self, index: usize) -> Option<u128> {
        let Data::Array(a) = &self.data else { return None };
        let slot = a.map.offset_of_linear(i64::try_from(index).ok()?).ok()?;
        a.get(slot)
    }

    /// Sets the raw bits of element `index` (logical row-major); bits above the element's
    /// width are dropped and a pred stores any nonzero value as 1. Returns false when out of
    /// range or not an array.
    pub fn set_bits(&mut self, index: usize, bits: u128) -> bool {
        let Data::Array(a) = &mut self.data else { return false };
        let Some(slot) = i64::try_from(index).ok().and_then(|i| a.map.offset_of_linear(i).ok()) else {
            return false;
        };
        a.put(slot, bits)
    }

    /// Raw bits of the element at a multi-index.
    pub fn get_bits_at(&self, index: &[i64]) -> Option<u128> {
        let Data::Array(a) = &self.data else { return None };
        a.get(a.map.offset(index).ok()?)
    }

    /// Sets the raw bits of the element at a multi-index, as [`Literal::set_bits`].
    pub fn set_bits_at(&mut self, index: &[i64], bits: u128) -> bool {
        let Data::Array(a) = &mut self.data else { return false };
        let Ok(slot) = a.map.offset(index) else { return false };
        a.put(slot, bits)
    }

    /// The element at a multi-index as a Rust value of the literal's element type.
    pub fn get<T: NativeType>(&self, index: &[i64]) -> Result<T, LiteralError> {
        let a = self.typed_array::<T>()?;
        let slot = a.map.offset(index)?;
        a.get(slot).map(T::from_bits).ok_or_else(|| LiteralError::NotArray(self.shape.to_string()))
    }

    /// Sets the element at a multi-index.
    pub fn set<T: NativeType>(&mut self, index: &[i64], value: T) -> Result<(), LiteralError> {
        self.typed_array::<T>()?;
        let shape = self.shape.to_string();
        let Data::Array(a) = &mut self.data else { return Err(LiteralError::NotArray(shape)) };
        let slot = a.map.offset(index)?;
        if a.put(slot, value.to_bits()) {
            Ok(())
        } else {
            Err(LiteralError::NotArray(shape))
        }
    }

    /// All elements in logical row-major order.
    pub fn to_vec<T: NativeType>(&self) -> Result<Vec<T>, LiteralError> {
        let a = self.typed_array::<T>()?;
        Ok(a.map.offsets().map(|slot| T::from_bits(a.get(slot).unwrap_or(0))).collect())
    }

    /// Every element's raw bits in logical row-major order.
    pub fn to_bits_vec(&self) -> Result<Vec<u128>, LiteralError> {
        let a = self.array()?;
        Ok(a.map.offsets().map(|slot| a.get(slot).unwrap_or(0)).collect())
    }

    /// The physical buffer, exactly as the layout lays it out.
    pub fn physical_bytes(&self) -> Result<&[u8], LiteralError> {
        Ok(&self.array()?.bytes)
    }

    /// The same values under another layout of the same array shape (padding zeroed).
    pub fn relayout(&self, layout: &Layout) -> Result<Literal, LiteralError> {
        let a = self.array()?;
        let mut shape = (*self.shape).clone();
        if let Some(s) = shape.as_array_mut() {
            s.layout = Some(layout.clone());
        }
        let mut out = Literal::zeros(shape)?;
        if let Data::Array(dst) = &mut out.data {
            dst.copy_from(a);
        }
        Ok(out)
    }

    /// The same values with every array leaf in the layout `shape` gives it; `shape` must be
    /// compatible (same tuple structure, types and dimensions). Leaves without a layout in
    /// `shape` become row-major.
    pub fn relayout_like(&self, shape: &Shape) -> Result<Literal, LiteralError> {
        if !self.shape.compatible(shape) {
            return Err(LiteralError::Incompatible { from: self.shape.to_string(), to: shape.to_string() });
        }
        match (&self.data, shape) {
            (Data::Array(_), Shape::Array(target)) => {
                let mut out = self.relayout(&target.layout_or_default())?;
                // A shape without a layout means row-major; keep it spelled the caller's way.
                out.shape = Box::new(shape.clone());
                Ok(out)
            }
            (Data::Tuple(elems), Shape::Tuple(targets)) => Ok(Literal::tuple(
                elems.iter().zip(targets).map(|(e, t)| e.relayout_like(t)).collect::<Result<_, _>>()?,
            )),
            _ => Ok(self.clone()),
        }
    }

    /// This literal moved into the layouts `shape` gives it, as [`Literal::relayout_like`], but
    /// without copying when the layouts already agree.
    pub fn into_layout_of(mut self, shape: &Shape) -> Result<Literal, LiteralError> {
        if let (Data::Array(a), Shape::Array(target)) = (&self.data, shape) {
            if self.shape.compatible(shape) && *a.map.layout() == target.layout_or_default() {
                self.shape = Box::new(shape.clone());
                return Ok(self);
            }
        }
        self.relayout_like(shape)
    }

    /// True when the bytes are the natural-width elements in row-major order with no
    /// padding, so they can be handed out as logical data as they are.
    pub fn is_dense_row_major(&self) -> bool {
        matches!(&self.data, Data::Array(a) if a.is_dense_row_major())
    }

    /// Same element types, dimensions and values, whatever the layouts.
    pub fn eq_ignoring_layout(&self, other: &Literal) -> bool {
        match (&self.data, &other.data) {
            (Data::Array(a), Data::Array(b)) => a.values_equal(b),
            (Data::Tuple(a), Data::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.eq_ignoring_layout(y))
            }
            (Data::Token, Data::Token) => true,
            _ => false,
        }
    }

    fn array(&self) -> Result<&ArrayData, LiteralError> {
        match &self.data {
            Data::Array(a) => Ok(a),
            _ => Err(LiteralError::NotArray(self.shape.to_string())),
        }
    }

    fn typed_array<T: NativeType>(&self) -> Result<&ArrayData, LiteralError> {
        let a = self.array()?;
        if a.map.element_type() != T::ELEMENT_TYPE {
            return Err(LiteralError::TypeMismatch { requested: T::ELEMENT_TYPE, found: a.map.element_type() });
        }
        Ok(a)
    }
}

/// Equal shapes, layouts included, and equal element values; padding is not compared since
/// it holds no data.
impl PartialEq for Literal {
    fn eq(&self, other: &Literal) -> bool {
        self.shape == other.shape && self.eq_ignoring_layout(other)
    }
}
