//! Tessera's HLO layer: element types, shapes, layouts (with the one implementation of layout
//! index math), literals, the HLO IR, its text format, the verifier with shape inference, the
//! builder, and shape algebra.

pub mod algebra;
pub mod builder;
pub mod corpus;
pub mod element_type;
pub mod eval;
pub mod ir;
pub mod layout;
pub mod layout_index;
pub mod literal;
pub mod npy;
pub mod shape;
pub mod text;
pub mod verify;

pub use element_type::{ElementType, TypeClass};
pub use ir::{CompId, Computation, InstId, Instruction, Module, Opcode};
pub use layout::{Layout, Tile};
pub use layout_index::{DimOrigin, IndexExpr, LayoutError, LayoutMap, PhysicalDim};
pub use literal::{HostFn, Literal, LiteralError, NativeType};
pub use npy::NpyError;
pub use shape::{ArrayShape, Shape};
