//! Differential testing on random programs: a generator of random valid HLO modules
//! (`generate`), their arguments (`inputs`), and a harness that runs each on the reference
//! interpreter and both JIT tiers and compares (`run`, `compare`). `tessera fuzz` and
//! `tests/differential.rs` drive it.
//!
//! It lives in the facade crate because it needs every backend end to end, and the facade
//! is the one crate that has them all (DESIGN.md section 2: dependencies point one way).

pub mod compare;
pub mod generate;
pub mod inputs;
pub mod kernel_kinds;
pub mod rng;
pub mod run;

pub use generate::{generate, Check, Header, Options, Program};
pub use run::{Backends, Report, Verdict, NOT_YET_SUPPORTED};
