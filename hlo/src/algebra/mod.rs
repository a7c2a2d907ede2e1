//! Shape algebra: abstract shapes and the functions that combine them, independent of element
//! types, layouts and the HLO IR.
//!
//! Two views of a shape live here:
//!
//! * Abstract shapes, after MLIR's `shape` dialect: a [`Size`] is a known extent, unknown
//!   (`?`) or invalid; an [`Extents`] is ranked, unranked (`[*]`) or invalid. The [`functions`]
//!   (`add`, `mul`, `broadcast`, `join`, `reduce`, `num_elements`, ...) propagate an invalid
//!   operand unchanged, so one contradiction is reported once, with the reason it was first
//!   found.
//! * Static shapes with names and positions: an [`IndexSpace`] has an origin, sub-shapes
//!   (slices keep the rank, chips drop it) and lexicographic iteration over its indices; an
//!   [`IndexedShape`] labels modes with an index string like `"i,j,k"` so permutations,
//!   element-wise compositions, contractions and direct products can work out their result
//!   shapes. [`plan_einsum`] turns that into `dot_general` dimension numbers.
//!
//! HLO [`Shape`](crate::Shape)s and [`ArrayShape`](crate::ArrayShape)s implement [`Shaped`],
//! so [`shape_of`] gives their abstract shape (dynamic dimensions, bounded or not, unknown).

pub mod extents;
pub mod functions;
mod hlo_shape;
pub mod index_space;
pub mod index_string;
pub mod size;

pub use extents::Extents;
pub use functions::{
    add, broadcast, broadcast_with_error, create_shape, join, join_size, join_size_with_error, join_with_error, mul,
    num_elements, reduce, shape_of, Reduction, Shaped, ValueShape,
};
pub use index_space::{IndexSpace, IndexSpaceError, Indices};
pub use index_string::{
    contraction, elementwise, permutation, permute, plan_einsum, product, BatchLabel, ContractingLabel, Contraction,
    FreeLabel, IndexString, IndexStringError, IndexedShape, Operand,
};
pub use size::{Dim, Reason, Size};

/// Why the text of a size or shape could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A shape not enclosed in `[` and `]`.
    #[error("shape {0:?} is not enclosed in brackets")]
    MissingBrackets(String),
    /// An extent that is neither `?` nor a non-negative integer that fits in `u64`.
    #[error("extent {0:?} is neither '?' nor a non-negative integer")]
    BadExtent(String),
}
