//! The corpus format of `../shared/corpus` (its README): a case's module, its arguments (stored,
//! or regenerated from `arg_gen` by the corpus's counter-based generator), what each output
//! must be, and the tolerance rule that judges an output. Every conformance test (the
//! interpreter's, the lowering's through the kernel interpreter, and the facade's over every
//! backend) reads cases through this one module.

pub mod bench_args;
pub mod case;
pub mod tolerance;

pub use case::{Case, Expected, Output, Stats};
