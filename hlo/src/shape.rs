//! Shapes: arrays (static, bounded-dynamic `<=N` and unbounded-dynamic `?` dimensions, with
//! an optional layout), nested tuples, token and opaque.

use crate::element_type::ElementType;
use crate::layout::Layout;

/// The stored size of an unbounded dynamic dimension (`?`), as XLA stores it.
pub const UNBOUNDED: i64 = i64::MIN;

/// An array shape. `dims[i]` is the static size, or the bound of a `<=N` dimension, or
/// [`UNBOUNDED`] for `?`; `dynamic[i]` says whether dimension `i` is dynamic at all.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArrayShape {
    pub element_type: ElementType,
    pub dims: Vec<i64>,
    pub dynamic: Vec<bool>,
    pub layout: Option<Layout>,
}

/// Any HLO value's shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    Array(ArrayShape),
    Tuple(Vec<Shape>),
    Token,
    Opaque,
}

impl ArrayShape {
    /// A static array shape without a layout.
    pub fn new(element_type: ElementType, dims: &[i64]) -> ArrayShape {
        ArrayShape { element_type, dims: dims.to_vec(), dynamic: vec![false; dims.len()], layout: None }
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    pub fn is_static(&self) -> bool {
        !self.dynamic.iter().any(|&d| d)
    }

    /// Element count of a static shape (bounded dimensions count at their bound). `None` for
    /// a shape with an unbounded dimension or whose count overflows.
    pub fn element_count(&self) -> Option<i64> {
        self.dims.iter().try_fold(1i64, |acc, &d| if d < 0 { None } else { acc.checked_mul(d) })
    }

    /// The layout, or the default row-major layout when none is set.
    pub fn layout_or_default(&self) -> Layout {
        self.layout.clone().unwrap_or_else(|| Layout::row_major(self.rank()))
    }

    /// Same element type and dimensions (layouts ignored), as XLA's `ShapeUtil::Compatible`.
    pub fn same_dims_and_type(&self, other: &ArrayShape) -> bool {
        self.element_type == other.element_type && self.dims == other.dims && self.dynamic == other.dynamic
    }
}

impl Shape {
    /// A static array shape without a layout.
    pub fn array(element_type: ElementType, dims: &[i64]) -> Shape {
        Shape::Array(ArrayShape::new(element_type, dims))
    }

    /// A scalar of the given type.
    pub fn scalar(element_type: ElementType) -> Shape {
        Shape::array(element_type, &[])
    }

    /// An array shape with the default row-major layout (what XLA's parser assigns when a
    /// layout is left out of an entry signature).
    pub fn array_with_layout(element_type: ElementType, dims: &[i64], layout: Layout) -> Shape {
        let mut a = ArrayShape::new(element_type, dims);
        a.layout = Some(layout);
        Shape::Array(a)
    }

    pub fn as_array(&self) -> Option<&ArrayShape> {
        match self {
            Shape::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_array_mut(&mut self) -> Option<&mut ArrayShape> {
        match self {
            Shape::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn tuple_elements(&self) -> Option<&[Shape]> {
        match self {
            Shape::Tuple(e) => Some(e),
            _ => None,
        }
    }

    pub fn is_array(&self) -> bool {
        matches!(self, Shape::Array(_))
    }

    pub fn is_tuple(&self) -> bool {
        matches!(self, Shape::Tuple(_))
    }

    pub fn is_token(&self) -> bool {
        matches!(self, Shape::Token)
    }

    /// The element type of an array shape; `Tuple`, `Token` or `Opaque` otherwise.
    pub fn element_type(&self) -> ElementType {
        match self {
            Shape::Array(a) => a.element_type,
            Shape::Tuple(_) => ElementType::Tuple,
            Shape::Token => ElementType::Token,
            Shape::Opaque => ElementType::Opaque,
        }
    }

    /// Dimensions of an array shape (empty for non-arrays).
    pub fn dims(&self) -> &[i64] {
        match self {
            Shape::Array(a) => &a.dims,
            _ => &[],
        }
    }

    /// Rank of an array shape (0 for non-arrays).
    pub fn rank(&self) -> usize {
        self.dims().len()
    }

    /// The sub-shape at a tuple index path (`{}` is the shape itself).
    pub fn subshape(&self, index: &[i64]) -> Option<&Shape> {
        let mut s = self;
        for &i in index {
            s = s.tuple_elements()?.get(usize::try_from(i).ok()?)?;
        }
        Some(s)
    }

    /// The array leaves of a (possibly nested) tuple shape, depth first, with their index paths.
    pub fn leaves(&self) -> Vec<(Vec<i64>, &Shape)> {
        fn walk<'a>(s: &'a Shape, path: &mut Vec<i64>, out: &mut Vec<(Vec<i64>, &'a Shape)>) {
            match s {
                Shape::Tuple(elems) => {
                    for (i, e) in elems.iter().enumerate() {
                        path.push(i as i64);
                        walk(e, path, out);
                        path.pop();
                    }
                }
                _ => out.push((path.clone(), s)),
            }
        }
        let mut out = Vec::new();
        walk(self, &mut Vec::new(), &mut out);
        out
    }

    /// The same shape with every layout removed, recursively.
    pub fn without_layout(&self) -> Shape {
        match self {
            Shape::Array(a) => Shape::Array(ArrayShape { layout: None, ..a.clone() }),
            Shape::Tuple(e) => Shape::Tuple(e.iter().map(Shape::without_layout).collect()),
            other => other.clone(),
        }
    }

    /// Equal up to layouts, as XLA's `ShapeUtil::Compatible`.
    pub fn compatible(&self, other: &Shape) -> bool {
        match (self, other) {
            (Shape::Array(a), Shape::Array(b)) => a.same_dims_and_type(b),
            (Shape::Tuple(a), Shape::Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.compatible(y)),
            (Shape::Token, Shape::Token) | (Shape::Opaque, Shape::Opaque) => true,
            _ => false,
        }
    }
}
