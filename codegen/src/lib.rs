//! Kernel IR to machine code: the Cranelift tier (fast compile), the LLVM tier (inkwell,
//! LLVM 22; peak speed) and ahead-of-time emission of an object file plus a C header.
//!
//! Both tiers take the same `tessera_lower::kernel::Kernel`s and return [`CompiledKernels`]:
//! one [`KernelFn`] per kernel, plus the owner of the machine code, which must outlive every
//! call through those pointers (the runtime executable keeps it). A whole program compiles to
//! a [`CompiledProgram`]: its kernels plus its entry, the step tree as one native function
//! (`entry`), which the JIT runs as an object's entry is run.

pub mod aot;
pub mod assemble;
pub mod cranelift;
pub mod entry;
pub mod llvm;
mod partition;
pub mod target;

use std::any::Any;
use std::time::Duration;

pub use assemble::{assemble, assemble_with_host};
pub use target::{CpuTarget, ResolvedTarget};
pub use tessera_lower::Timings;
pub use tessera_runtime::{EntryFn, KernelFn};

/// The code generator that compiles kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    Cranelift,
    Llvm,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Cranelift => "cranelift",
            Tier::Llvm => "llvm",
        }
    }
}

/// Machine code for a list of kernels.
pub struct CompiledKernels {
    /// `functions[i]` runs kernel `i` of the list given to the tier.
    pub functions: Vec<KernelFn>,
    /// Owns the executable memory behind `functions`; dropping it frees the code.
    pub code: Box<dyn Any + Send + Sync>,
    /// Where the tier's time went (IR translation, optimization, machine code), by phase.
    pub timings: Timings,
}

impl CompiledKernels {
    /// Wall time spent in the tier.
    pub fn compile_time(&self) -> Duration {
        self.timings.total()
    }
}

/// Machine code for a whole program: its kernels and its entry (the step tree compiled,
/// calling them: `crate::entry`), with the plan the entry was made from.
pub struct CompiledProgram {
    /// The kernels; their `code` owns the entry's machine code too.
    pub kernels: CompiledKernels,
    pub entry: EntryFn,
    pub plan: entry::EntryPlan,
}

impl CompiledProgram {
    /// Compiles a buffer-assigned program on `tier` for `cpu`, dumping the tier's code into
    /// `dump` when given.
    pub fn compile(
        tier: Tier,
        program: &tessera_lower::Program,
        cpu: &CpuTarget,
        dump: Option<&std::path::Path>,
    ) -> Result<CompiledProgram, CodegenError> {
        match tier {
            Tier::Cranelift => cranelift::compile_program(program, cpu, dump),
            Tier::Llvm => llvm::compile_program(program, cpu, dump),
        }
    }
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CodegenError {
    /// The kernel uses something this tier does not translate (yet).
    #[error("the {tier} tier cannot compile kernel '{kernel}': {what}")]
    Unsupported { tier: &'static str, kernel: String, what: String },
    /// The backend rejected what we gave it (a bug in the tier, reported instead of a crash).
    #[error("the {tier} tier failed on kernel '{kernel}': {message}")]
    Backend { tier: &'static str, kernel: String, message: String },
    /// The target (triple, CPU, features, symbol) is unknown or unusable.
    #[error("the {tier} tier cannot generate code for this target: {message}")]
    Target { tier: &'static str, message: String },
    /// The target CPU asks for a feature this host does not have: JIT code using it would die
    /// of an illegal instruction.
    #[error("unsupported target feature '{feature}': the {tier} tier was asked to target {target}, but the host CPU ({host}) lacks it")]
    UnsupportedFeature { tier: &'static str, feature: String, target: String, host: String },
}
