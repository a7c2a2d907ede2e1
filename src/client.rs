//! The client (DESIGN.md section 8, after XLA's client model): pick a backend once, with the
//! host's options (threads, memory space capacities), then compile modules into executables.
//!
//! Compiling runs verify -> `lower_module` -> buffer assignment -> the tier's code generator
//! -> executable assembly. The interpreter backend verifies and keeps the module, so every
//! backend answers through the same [`Executable`] API.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use tessera_codegen::{CompiledKernels, CpuTarget};
use tessera_hlo::text::parse_module;
use tessera_hlo::verify::verify;
use tessera_hlo::Module;
use tessera_lower::{assign_buffers, lower_module, LowerOptions};
use tessera_runtime::{MemorySpaces, ThreadPool};

use crate::executable::{Engine, Executable, Signature};
use crate::Error;

/// Which engine runs compiled modules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The reference interpreter (`hlo::eval`): no compilation, slow, the semantics oracle.
    Interp,
    /// Cranelift JIT: fast compile.
    Cranelift,
    /// LLVM JIT: peak speed.
    Llvm,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Interp => "interp",
            Backend::Cranelift => "cranelift",
            Backend::Llvm => "llvm",
        }
    }

    /// The backend called `name` (`interp`, `cranelift`, `llvm`).
    pub fn from_name(name: &str) -> Option<Backend> {
        [Backend::Interp, Backend::Cranelift, Backend::Llvm].into_iter().find(|b| b.name() == name)
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a client runs what it compiles.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// Threads kernels run on; `None`: one per core.
    pub threads: Option<usize>,
    /// Capacity in bytes of each memory space `S(n)` the host has; spaces not listed are
    /// unbounded host memory.
    pub memory_spaces: BTreeMap<i64, u64>,
}

/// How one module is compiled.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// The HLO pass pipeline and kernel lowering (and the `rng` seed, which the interpreter
    /// backend uses too).
    pub lower: LowerOptions,
    /// The CPU the JIT tiers generate code for; `None`: `TESSERA_CPU` /
    /// `TESSERA_CPU_FEATURES` when set, else the host ([`CpuTarget::from_env`]). A target
    /// needing a feature the host lacks fails to compile with an unsupported-target-feature
    /// error.
    pub target_cpu: Option<CpuTarget>,
}

pub struct Client {
    backend: Backend,
    spaces: MemorySpaces,
    pool: Arc<ThreadPool>,
}

impl Client {
    /// A client with default options: all cores, unbounded host memory.
    pub fn new(backend: Backend) -> Result<Client, Error> {
        Client::with_options(backend, &ClientOptions::default())
    }

    pub fn with_options(backend: Backend, options: &ClientOptions) -> Result<Client, Error> {
        let mut spaces = MemorySpaces::new();
        for (&space, &capacity) in &options.memory_spaces {
            spaces.register(space, capacity);
        }
        // The interpreter runs no kernels, so it needs no worker threads.
        let threads = if backend == Backend::Interp { Some(1) } else { options.threads };
        Ok(Client { backend, spaces, pool: Arc::new(ThreadPool::new(threads)?) })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Threads kernels run on.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Registers memory space `S(space)` with a capacity in bytes (for later compiles).
    pub fn register_memory_space(&mut self, space: i64, capacity: u64) {
        self.spaces.register(space, capacity);
    }

    /// Parses HLO text and compiles it.
    pub fn compile_text(&self, text: &str, options: &CompileOptions) -> Result<Executable, Error> {
        self.compile(&parse_module(text)?, options)
    }

    /// Compiles a module (parsed or built with `tessera_hlo::builder`).
    pub fn compile(&self, module: &Module, options: &CompileOptions) -> Result<Executable, Error> {
        let start = Instant::now();
        verify(module)?;
        let signature = Signature::of_module(module)?;
        let engine = match self.backend {
            Backend::Interp => Engine::Interp(Box::new(module.clone()), options.lower.rng_seed),
            Backend::Cranelift | Backend::Llvm => {
                let backend = self.backend.name();
                let mut program =
                    lower_module(module, &options.lower).map_err(|source| Error::Lower { backend, source })?;
                assign_buffers(&mut program, &self.spaces.capacities())?;
                let cpu = options.target_cpu.clone().unwrap_or_else(CpuTarget::from_env);
                let compiled: CompiledKernels = match self.backend {
                    Backend::Cranelift => tessera_codegen::cranelift::compile_for(&program.kernels, &cpu)?,
                    _ => tessera_codegen::llvm::compile_for(&program.kernels, &cpu)?,
                };
                let executable = tessera_codegen::assemble(&program, compiled, &self.spaces, self.pool.clone())?;
                signature.check_program(&program)?;
                Engine::Compiled(Box::new(executable))
            }
        };
        Ok(Executable::new(self.backend, engine, signature, start.elapsed()))
    }
}
