//! The client (DESIGN.md section 8, after XLA's client model): pick a backend once, with the
//! host's options (threads, memory space capacities), then compile modules into executables.
//!
//! Compiling runs verify -> `lower_module` -> buffer assignment -> the tier's code generator
//! -> executable assembly. The interpreter backend verifies and keeps the module, so every
//! backend answers through the same [`Executable`] API.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tessera_codegen::{CompiledProgram, CpuTarget, Tier};
use tessera_hlo::ir::AttrList;
use tessera_hlo::text::parse_module;
use tessera_hlo::verify::verify;
use tessera_hlo::{Literal, Module, Opcode};
use tessera_lower::{assign_buffers, implemented_custom_call, lower_verified_module_timed, LowerOptions, Timings};
use tessera_runtime::{HostFunctions, MemorySpaces, ThreadPool};

use crate::executable::{Engine, Executable, Signature};
use crate::tiered::{PeakJob, Tiered};
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
    /// Cranelift's code at once, LLVM's (compiled on a background thread) once it is ready;
    /// the same results on either (see `Executable::active_tier`).
    Tiered,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Interp => "interp",
            Backend::Cranelift => "cranelift",
            Backend::Llvm => "llvm",
            Backend::Tiered => "tiered",
        }
    }

    /// The backend called `name` (`interp`, `cranelift`, `llvm`, `tiered`).
    pub fn from_name(name: &str) -> Option<Backend> {
        [Backend::Interp, Backend::Cranelift, Backend::Llvm, Backend::Tiered].into_iter().find(|b| b.name() == name)
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
    /// Write what the compiler makes of the module into this folder: the module after every
    /// pass (`NN-pass.hlo`), the fusion decisions (`fusion.txt`), the program with every
    /// kernel's IR (`program.txt`) and the tier's code (`llvm.ll`, `llvm-opt.ll`, `llvm.s`, or
    /// `cranelift.clif`). Overrides `lower.dump_dir`. The interpreter writes the module after
    /// each of the passes it runs (those that change values).
    pub dump_dir: Option<PathBuf>,
}

impl CompileOptions {
    /// The defaults, with bf16 excess precision on (XLA:CPU's default) or off (strict
    /// per-op rounding); see [`LowerOptions::excess_precision`].
    pub fn with_excess_precision(on: bool) -> CompileOptions {
        CompileOptions {
            lower: LowerOptions { excess_precision: on, ..LowerOptions::default() },
            ..CompileOptions::default()
        }
    }
}

pub struct Client {
    backend: Backend,
    spaces: MemorySpaces,
    pool: Arc<ThreadPool>,
    /// Host functions custom-calls run, by target; every backend uses the same ones.
    host: HostFunctions,
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
        Ok(Client { backend, spaces, pool: Arc::new(ThreadPool::new(threads)?), host: HostFunctions::new() })
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

    /// Registers the host function that `custom-call`s to `target` run (for later compiles),
    /// on every backend: the interpreter, and the JIT tiers as a host step between kernels.
    /// It receives the operands as literals (in their layouts) and returns the result (a
    /// tuple literal for a tuple-shaped custom-call); a returned message fails the run. A
    /// target Tessera implements itself (XLA's `TopK`) cannot be replaced.
    pub fn register_custom_call(
        &mut self,
        target: impl Into<String>,
        f: impl Fn(&[Literal]) -> Result<Literal, String> + Send + Sync + 'static,
    ) -> Result<(), Error> {
        let target = target.into();
        if implemented_custom_call(&target) {
            return Err(Error::CustomCall { target, message: "Tessera implements this target itself".into() });
        }
        self.host.insert(target, Arc::new(f));
        Ok(())
    }

    /// Parses HLO text and compiles it.
    /// Its compile time counts parsing too: end to end, from text to a runnable executable.
    pub fn compile_text(&self, text: &str, options: &CompileOptions) -> Result<Executable, Error> {
        let start = Instant::now();
        let module = parse_module(text)?;
        let parsed = start.elapsed();
        let mut executable = self.compile(&module, options)?;
        executable.compile_time = start.elapsed();
        let mut timings = Timings::new();
        timings.add("parse", parsed);
        timings.extend(&executable.compile_timings);
        executable.compile_timings = timings;
        Ok(executable)
    }

    /// Compiles a module (parsed or built with `tessera_hlo::builder`).
    pub fn compile(&self, module: &Module, options: &CompileOptions) -> Result<Executable, Error> {
        let start = Instant::now();
        let mut timings = Timings::new();
        timings.time("verify", || verify(module))?;
        self.check_custom_calls(module)?;
        let signature = Signature::of_module(module)?;
        let engine = match self.backend {
            Backend::Interp => {
                let mut module = module.clone();
                // The interpreter's dump is the module it evaluates, after the passes that
                // change values.
                tessera_lower::passes::numerics_pipeline(options.lower.excess_precision)
                    .dump_to(options.dump_dir.clone())
                    .run(&mut module)
                    .map_err(|source| Error::Lower { backend: self.backend.name(), source })?;
                Engine::Interp { module: Box::new(module), host: self.host.clone(), rng_seed: options.lower.rng_seed }
            }
            Backend::Cranelift | Backend::Llvm | Backend::Tiered => {
                let backend = self.backend.name();
                let mut lower = options.lower.clone();
                if options.dump_dir.is_some() {
                    lower.dump_dir.clone_from(&options.dump_dir);
                }
                let (mut program, lowering) =
                    lower_verified_module_timed(module, &lower).map_err(|source| Error::Lower { backend, source })?;
                timings.extend(&lowering);
                timings.time("buffer assignment", || assign_buffers(&mut program, &self.spaces.capacities()))?;
                let dump = options.dump_dir.as_deref();
                if let Some(dir) = dump {
                    tessera_lower::dump_program(&program, dir);
                }
                let cpu = options.target_cpu.clone().unwrap_or_else(CpuTarget::from_env);
                let tier = if self.backend == Backend::Llvm { Tier::Llvm } else { Tier::Cranelift };
                let compiled = CompiledProgram::compile(tier, &program, &cpu, dump)?;
                timings.extend(&compiled.kernels.timings);
                let executable = timings.time("assembly", || {
                    tessera_codegen::assemble_with_host(&program, compiled, &self.spaces, self.pool.clone(), &self.host)
                })?;
                signature.check_program(&program)?;
                if self.backend == Backend::Tiered {
                    let job = PeakJob {
                        program,
                        cpu,
                        spaces: self.spaces.clone(),
                        pool: self.pool.clone(),
                        host: self.host.clone(),
                    };
                    Engine::Tiered(Box::new(Tiered::start(executable, job)))
                } else {
                    Engine::Compiled(Box::new(executable))
                }
            }
        };
        Ok(Executable::new(self.backend, engine, signature, start.elapsed(), timings))
    }

    /// Every custom-call must go to a registered host function or a target Tessera
    /// implements: anything else is a compile error naming the target, on every backend.
    fn check_custom_calls(&self, module: &Module) -> Result<(), Error> {
        for comp in &module.computations {
            for inst in &comp.instructions {
                if inst.opcode != Opcode::CustomCall {
                    continue;
                }
                let target = inst.attr_word("custom_call_target").unwrap_or("");
                if !self.host.contains_key(target) && !implemented_custom_call(target) {
                    return Err(Error::CustomCall {
                        target: target.to_string(),
                        message: format!(
                            "'{}' calls it, but no host function is registered for it (Client::register_custom_call)",
                            inst.name
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}
