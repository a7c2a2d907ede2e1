//! Instruction and module attributes, with typed values.
//!
//! An instruction keeps its attributes as an ordered list of `name = value` pairs: the order is
//! the order the text gave (XLA's printer order for XLA-printed text), which makes printing
//! byte-exact without a per-opcode order table, and a builder appends attributes in XLA's
//! order. Values are typed by attribute name when parsed (a window is a [`Window`], a
//! `dim_labels` a [`ConvDimensionNumbers`]), so later stages never re-parse text; attributes
//! no stage interprets (metadata, sharding, backend_config, ...) are kept verbatim as
//! [`AttrValue::Raw`].

use crate::ir::CompId;
use crate::shape::Shape;

#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    pub name: String,
    pub value: AttrValue,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    /// A quoted string, unescaped.
    Str(String),
    /// A bare word: `kLoop`, `LT`, `TOTALORDER`, `FFT`, `rng_default`, ...
    Enum(String),
    /// `{1,0,2}`
    Ints(Vec<i64>),
    /// `{{0,1},{2,3}}`
    IntLists(Vec<Vec<i64>>),
    /// `{default,highest}`
    Enums(Vec<String>),
    Shape(Shape),
    Shapes(Vec<Shape>),
    Window(Window),
    ConvDims(ConvDimensionNumbers),
    Slice(Vec<SliceRange>),
    Padding(Vec<PaddingDim>),
    Computation(CompId),
    Computations(Vec<CompId>),
    ProgramShape(ProgramShape),
    IoAliases(Vec<IoAlias>),
    /// Kept exactly as written (without the `name=`): attributes no stage interprets.
    Raw(String),
}

/// One dimension of a `window={size=3x3 stride=2x2 pad=0_1x0_1 lhs_dilate=.. rhs_dilate=..
/// rhs_reversal=..}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowDim {
    pub size: i64,
    pub stride: i64,
    pub padding_low: i64,
    pub padding_high: i64,
    /// `rhs_dilate`: dilation of the window.
    pub window_dilation: i64,
    /// `lhs_dilate`: dilation of the base (the operand).
    pub base_dilation: i64,
    pub window_reversal: bool,
}

impl Default for WindowDim {
    fn default() -> WindowDim {
        WindowDim {
            size: 1,
            stride: 1,
            padding_low: 0,
            padding_high: 0,
            window_dilation: 1,
            base_dilation: 1,
            window_reversal: false,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub dims: Vec<WindowDim>,
}

impl Window {
    /// The dimension along which this window, over an operand of extents `dims`, covers every
    /// element before each position (a prefix: `false`) or every element after it (a suffix:
    /// `true`), taking one element along every other dimension: a cumulative reduction
    /// (JAX's `cumsum`, `cumprod`, `cummax`, and their reversed forms). Stride 1, no dilation
    /// or reversal, a size at least the dimension's (more only adds padding), padded by
    /// `size - 1` on one side.
    pub fn scan_dimension(&self, dims: &[i64]) -> Option<(usize, bool)> {
        if self.dims.len() != dims.len() {
            return None;
        }
        let plain =
            |w: &WindowDim| w.stride == 1 && w.window_dilation == 1 && w.base_dilation == 1 && !w.window_reversal;
        let single = |w: &WindowDim| plain(w) && w.size == 1 && w.padding_low == 0 && w.padding_high == 0;
        if !self.dims.iter().all(plain) {
            return None;
        }
        let mut scans = self.dims.iter().zip(dims).enumerate().filter(|(_, (w, _))| !single(w));
        let (d, (w, &n)) = scans.next()?;
        if scans.next().is_some() || n <= 1 || w.size < n {
            return None;
        }
        if w.padding_low == w.size - 1 && w.padding_high == 0 {
            Some((d, false))
        } else if w.padding_low == 0 && w.padding_high == w.size - 1 {
            Some((d, true))
        } else {
            None
        }
    }
}

/// `dim_labels=b01f_01io->b01f`: which dimension of input, kernel and output plays which role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvDimensionNumbers {
    pub input_batch: i64,
    pub input_feature: i64,
    pub input_spatial: Vec<i64>,
    pub kernel_input_feature: i64,
    pub kernel_output_feature: i64,
    pub kernel_spatial: Vec<i64>,
    pub output_batch: i64,
    pub output_feature: i64,
    pub output_spatial: Vec<i64>,
}

/// One dimension of `slice={[start:limit:stride], ...}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceRange {
    pub start: i64,
    pub limit: i64,
    pub stride: i64,
}

/// One dimension of `padding=lo_hi_interior x ...` (interior may be left out when 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaddingDim {
    pub low: i64,
    pub high: i64,
    pub interior: i64,
}

/// `(f32[2]{0}, s32[])->f32[2]{0}`: an entry computation's parameter and result shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramShape {
    pub parameters: Vec<Shape>,
    pub result: Shape,
}

/// One entry of `input_output_alias={ {0}: (1, {}, may-alias) }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoAlias {
    pub output_index: Vec<i64>,
    pub parameter: i64,
    pub parameter_index: Vec<i64>,
    /// `may-alias` or `must-alias` when written.
    pub kind: Option<String>,
}

/// Lookup helpers over an ordered attribute list.
pub trait AttrList {
    fn attrs(&self) -> &[Attribute];

    fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs().iter().find(|a| a.name == name).map(|a| &a.value)
    }

    fn attr_ints(&self, name: &str) -> Option<&[i64]> {
        match self.attr(name)? {
            AttrValue::Ints(v) => Some(v),
            _ => None,
        }
    }

    fn attr_int(&self, name: &str) -> Option<i64> {
        match self.attr(name)? {
            AttrValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    fn attr_bool(&self, name: &str) -> Option<bool> {
        match self.attr(name)? {
            AttrValue::Bool(v) => Some(*v),
            _ => None,
        }
    }

    fn attr_float(&self, name: &str) -> Option<f64> {
        match self.attr(name)? {
            AttrValue::Float(v) => Some(*v),
            AttrValue::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    /// A bare-word or quoted-string attribute's text.
    fn attr_word(&self, name: &str) -> Option<&str> {
        match self.attr(name)? {
            AttrValue::Enum(s) | AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }
}
