//! Kernel IR to machine code: the Cranelift tier (fast compile), the LLVM tier (inkwell,
//! LLVM 22; peak speed) and ahead-of-time emission of an object file plus a C header.
//!
//! Both tiers take the same `tessera_lower::kernel::Kernel`s and write their machine code as
//! relocatable objects ([`ObjectCode`]), which `loader` links into memory: [`CompiledKernels`]
//! holds one [`KernelFn`] per kernel, plus the owner of the machine code, which must outlive
//! every call through those pointers (the runtime executable keeps it). A whole program
//! compiles to a [`CompiledProgram`]: its kernels plus its entry, the step tree as one native
//! function (`entry`), which the JIT runs as an object's entry is run. The objects are what
//! the compile cache stores (`image`), so a cached program loads through the same path.

pub mod aot;
pub mod assemble;
pub mod cranelift;
pub mod entry;
pub mod image;
mod index_forwarding;
pub mod llvm;
pub mod loader;
mod partition;
pub mod target;

use std::any::Any;
use std::time::Duration;

pub use assemble::{assemble, assemble_with_host};
pub use target::{CpuTarget, ResolvedTarget};
pub use tessera_lower::Timings;
pub use tessera_runtime::{EntryFn, KernelFn};

/// The code generator that compiles kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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

/// The symbol of kernel `name` in a tier's objects. Kernel names never hold a dot, so no
/// kernel's symbol is a runtime function's, a C library function's or the entry's.
pub(crate) fn kernel_symbol(name: &str) -> String {
    format!("tessera.kernel.{name}")
}

/// Machine code as a tier writes it: relocatable objects for the host, with the symbol of
/// each kernel and of the program's entry. [`ObjectCode::load`] links it into memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectCode {
    pub objects: Vec<Vec<u8>>,
    /// `kernels[i]` is the symbol of kernel `i`.
    pub kernels: Vec<String>,
    /// The symbol of the program's entry (`EntryFn`), if the code has one.
    pub entry: Option<String>,
}

impl ObjectCode {
    /// Links the objects into executable memory (binding the runtime's symbols) and finds each
    /// kernel and the entry; `timings` gets the time it took.
    pub fn load(&self, timings: &mut Timings) -> Result<(CompiledKernels, Option<EntryFn>), CodegenError> {
        self.load_with(&[], timings)
    }

    /// [`ObjectCode::load`] of a program's code (compiled by `tier`), whose entry it must define.
    pub fn load_program(&self, tier: Tier, timings: &mut Timings) -> Result<(CompiledKernels, EntryFn), CodegenError> {
        let (kernels, entry) = self.load(timings)?;
        let entry = entry.ok_or_else(|| CodegenError::Backend {
            tier: tier.name(),
            kernel: "(entry)".into(),
            message: "the objects define no entry".into(),
        })?;
        Ok((kernels, entry))
    }

    /// [`ObjectCode::load`], binding `extra` symbols too (tests link hand-written kernels).
    pub(crate) fn load_with(
        &self,
        extra: &[(&str, *const u8)],
        timings: &mut Timings,
    ) -> Result<(CompiledKernels, Option<EntryFn>), CodegenError> {
        let failed = |message: String| CodegenError::Backend { tier: "loader", kernel: "(link)".into(), message };
        let (code, functions, entry) = timings.time("link", || -> Result<_, CodegenError> {
            let mut symbols = tessera_runtime::abi::symbols();
            symbols.extend(tessera_runtime::entry_symbols());
            symbols.extend_from_slice(extra);
            let objects: Vec<&[u8]> = self.objects.iter().map(Vec::as_slice).collect();
            let code = loader::LoadedCode::load(&objects, &symbols).map_err(failed)?;
            // One lookup links every object, in one session (the entry calls the kernels).
            let mut names: Vec<&str> = self.kernels.iter().map(String::as_str).collect();
            names.extend(self.entry.as_deref());
            let mut addresses = code.addresses(&names).map_err(failed)?;
            // SAFETY: the tiers define the entry symbol with `EntryFn`'s signature, and each
            // kernel symbol with `KernelFn`'s.
            let entry = match self.entry {
                Some(_) => addresses.pop().map(|a| unsafe { std::mem::transmute::<*const u8, EntryFn>(a) }),
                None => None,
            };
            let functions: Vec<KernelFn> =
                addresses.into_iter().map(|a| unsafe { std::mem::transmute::<*const u8, KernelFn>(a) }).collect();
            Ok((code, functions, entry))
        })?;
        Ok((CompiledKernels { functions, code: Box::new(code), timings: Timings::new() }, entry))
    }
}

/// Machine code for a whole program: its kernels and its entry (the step tree compiled,
/// calling them: `crate::entry`), with the plan the entry was made from and the objects it
/// was loaded from.
pub struct CompiledProgram {
    /// The kernels; their `code` owns the entry's machine code too.
    pub kernels: CompiledKernels,
    pub entry: EntryFn,
    pub plan: entry::EntryPlan,
    pub objects: ObjectCode,
    pub tier: Tier,
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
        let (plan, objects, mut timings) = match tier {
            Tier::Cranelift => cranelift::program_objects(program, cpu, dump)?,
            Tier::Llvm => llvm::program_objects(program, cpu, dump)?,
        };
        let (mut kernels, entry) = objects.load_program(tier, &mut timings)?;
        kernels.timings = timings;
        Ok(CompiledProgram { kernels, entry, plan, objects, tier })
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
