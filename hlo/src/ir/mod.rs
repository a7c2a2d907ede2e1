//! The HLO IR: a [`Module`] owns [`Computation`]s, a computation owns [`Instruction`]s. Both
//! are referenced by index ([`CompId`], [`InstId`]), so the IR is plain data: cloneable,
//! comparable, and free of reference cycles.

mod attr;
mod computation;
mod enums;
mod instruction;
mod module;
mod names;
mod opcode;

pub use attr::{
    AttrList, AttrValue, Attribute, ConvDimensionNumbers, IoAlias, PaddingDim, ProgramShape, SliceRange, Window,
    WindowDim,
};
pub use computation::Computation;
pub use enums::{
    ComparisonDirection, ComparisonType, FftType, FusionKind, RandomAlgorithm, RandomDistribution, TriangularTranspose,
};
pub use instruction::{Instruction, Payload};
pub use module::Module;
pub use names::UniqueNames;
pub use opcode::Opcode;

/// Custom-call targets that only annotate how values are split across devices (JAX emits
/// them into single-device modules too). On the one device an executable runs on, each is its
/// operand: a `Sharding` annotation places nothing, and a full array split into one shard is
/// that array.
pub const SHARDING_ANNOTATIONS: &[&str] = &["Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"];

/// A computation's index in [`Module::computations`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CompId(pub u32);

/// An instruction's index in [`Computation::instructions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstId(pub u32);

impl CompId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl InstId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

#[cfg(test)]
mod mutate_tests;
