//! Tessera's HLO layer: element types, shapes, layouts (with the one implementation of layout
//! index math), literals, the HLO IR, its text format, the verifier with shape inference, the
//! builder, and shape algebra.

pub mod algebra;
pub mod element_type;
pub mod ir;
pub mod layout;
pub mod literal;
pub mod shape;
pub mod text;

pub use element_type::{ElementType, TypeClass};
pub use ir::{CompId, Computation, InstId, Instruction, Module, Opcode};
pub use layout::{Layout, Tile};
pub use literal::Literal;
pub use shape::{ArrayShape, Shape};
