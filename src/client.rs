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

use crate::cache::{CacheOutcome, CacheSetting, CachedProgram, CompileCache, Key};
use crate::executable::{Engine, Executable, Signature};
use crate::tiered::{PeakJob, Tiered};
use crate::Error;

/// Whether a compile with `options` may use the cache: a dump shows what a compile does, so
/// it compiles.
fn cacheable(options: &CompileOptions) -> bool {
    options.dump_dir.is_none() && options.lower.dump_dir.is_none()
}

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
    /// The persistent compile cache (`crate::cache`): by default as the environment says
    /// (`TESSERA_CACHE_DIR`, `TESSERA_CACHE=off`), else in the user's cache directory.
    pub cache: CacheSetting,
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
    cache: Option<CompileCache>,
    /// The thread making the process's JIT linker, joined when the client drops: a process
    /// that exits while it is inside LLVM crashes in LLVM's static destructors.
    linker: Option<std::thread::JoinHandle<()>>,
}

/// Where a compile's program is stored in the cache once compiled.
#[derive(Clone)]
pub(crate) struct CacheSlot {
    pub cache: CompileCache,
    pub key: Key,
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(linker) = self.linker.take() {
            let _ = linker.join();
        }
    }
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
        // The JIT linker takes about a millisecond to create: it is made while the first module
        // is parsed and lowered.
        let linker = (backend != Backend::Interp)
            .then(|| std::thread::Builder::new().name("tessera-linker".into()).spawn(tessera_codegen::loader::prepare))
            .and_then(Result::ok);
        let cache = if backend == Backend::Interp { None } else { CompileCache::open(&options.cache) };
        let pool = Arc::new(ThreadPool::new(threads)?);
        Ok(Client { backend, spaces, pool, host: HostFunctions::new(), cache, linker })
    }

    /// The directory of the client's compile cache, if it has one.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.cache.as_ref().map(CompileCache::dir)
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

    /// Parses HLO text and compiles it, or loads what an earlier compile of the same text (on
    /// this machine, with the same options and build of Tessera) left in the compile cache.
    /// Its compile time counts parsing too: end to end, from text to a runnable executable.
    pub fn compile_text(&self, text: &str, options: &CompileOptions) -> Result<Executable, Error> {
        let start = Instant::now();
        let slot = self.cache_slot(text, options);
        let rejected = match self.load_cached(slot.as_ref(), start)? {
            Ok(hit) => return Ok(hit),
            Err(rejected) => rejected,
        };
        let module = parse_module(text)?;
        let parsed = start.elapsed();
        let mut executable = self.compile_uncached(&module, options, slot, rejected)?;
        executable.compile_time = start.elapsed();
        let mut timings = Timings::new();
        timings.add("parse", parsed);
        timings.extend(&executable.compile_timings);
        executable.compile_timings = timings;
        Ok(executable)
    }

    /// Compiles a module (parsed or built with `tessera_hlo::builder`), through the compile
    /// cache as [`Client::compile_text`] does (its key is the module's printed text).
    pub fn compile(&self, module: &Module, options: &CompileOptions) -> Result<Executable, Error> {
        let start = Instant::now();
        // Printing the module costs time only a cache can repay.
        let slot = if self.cache.is_some() && cacheable(options) {
            self.cache_slot(&module.to_string(), options)
        } else {
            None
        };
        let rejected = match self.load_cached(slot.as_ref(), start)? {
            Ok(hit) => return Ok(hit),
            Err(rejected) => rejected,
        };
        let mut executable = self.compile_uncached(module, options, slot, rejected)?;
        executable.compile_time = start.elapsed();
        Ok(executable)
    }

    /// The tier whose code the cache holds for this client's backend: LLVM's for the tiered
    /// backend (a cached program needs no warm-up tier).
    fn cached_tier(&self) -> Option<Tier> {
        match self.backend {
            Backend::Interp => None,
            Backend::Cranelift => Some(Tier::Cranelift),
            Backend::Llvm | Backend::Tiered => Some(Tier::Llvm),
        }
    }

    /// Where `module_text` compiled with `options` is cached, if it can be.
    fn cache_slot(&self, module_text: &str, options: &CompileOptions) -> Option<CacheSlot> {
        let cache = self.cache.as_ref().filter(|_| cacheable(options))?;
        let tier = self.cached_tier()?;
        let cpu = options.target_cpu.clone().unwrap_or_else(CpuTarget::from_env);
        // A target the host cannot run fails the compile, which reports it.
        let target = cpu.resolve(tier.name()).ok()?;
        let context = [
            tier.name().to_string(),
            format!("{target:?}"),
            format!("{:?}", options.lower),
            format!("{:?}", self.spaces.capacities()),
            tessera_codegen::llvm::version(),
        ];
        let context: Vec<&str> = context.iter().map(String::as_str).collect();
        Some(CacheSlot { cache: cache.clone(), key: CompileCache::key(module_text, &context) })
    }

    /// The executable the cache holds under `slot` (`Ok(Ok(..))`), or why there is none: no
    /// entry (`Ok(Err(None))`) or an entry that failed its checks or to load, which is then
    /// compiled anew (`Ok(Err(Some(reason)))`). A custom-call to a target with no host function
    /// is the compile error it would be uncached.
    fn load_cached(
        &self,
        slot: Option<&CacheSlot>,
        start: Instant,
    ) -> Result<Result<Executable, Option<String>>, Error> {
        let Some(slot) = slot else { return Ok(Err(None)) };
        let entry = match slot.cache.load(slot.key) {
            Ok(Some(entry)) => entry,
            Ok(None) => return Ok(Err(None)),
            Err(reason) => return Ok(Err(Some(reason))),
        };
        let tier = self.cached_tier();
        if Some(entry.image.tier) != tier {
            return Ok(Err(Some(format!("the entry holds {} code", entry.image.tier.name()))));
        }
        for (name, target) in entry.image.custom_call_targets() {
            if !self.host.contains_key(target) {
                return Err(Error::CustomCall {
                    target: target.to_string(),
                    message: format!(
                        "'{name}' calls it, but no host function is registered for it (Client::register_custom_call)"
                    ),
                });
            }
        }
        let mut timings = Timings::new();
        timings.add("cache: read", start.elapsed());
        let signature = Signature::from_shapes(entry.parameters, entry.result)?;
        let executable = entry.image.load(&mut timings).map_err(|e| e.to_string()).and_then(|(kernels, code)| {
            entry
                .image
                .instantiate(kernels, code, &self.spaces, self.pool.clone(), &self.host)
                .map_err(|e| e.to_string())
        });
        let executable = match executable {
            Ok(executable) => executable,
            Err(reason) => return Ok(Err(Some(format!("loading the cached program: {reason}")))),
        };
        let tier = if entry.image.tier == Tier::Llvm { Backend::Llvm } else { Backend::Cranelift };
        let engine = Engine::Compiled(Box::new(executable), tier);
        let mut executable = Executable::new(self.backend, engine, signature, start.elapsed(), timings);
        executable.cache = CacheOutcome::Hit;
        Ok(Ok(executable))
    }

    /// Compiles a module (no cache lookup), storing the program under `slot` when given;
    /// `rejected` is why a cached entry was not used.
    fn compile_uncached(
        &self,
        module: &Module,
        options: &CompileOptions,
        slot: Option<CacheSlot>,
        rejected: Option<String>,
    ) -> Result<Executable, Error> {
        let start = Instant::now();
        let mut timings = Timings::new();
        timings.time("verify", || verify(module))?;
        self.check_custom_calls(module)?;
        let signature = Signature::of_module(module)?;
        let mut stored = None;
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
                let cpu = options.target_cpu.clone().unwrap_or_else(CpuTarget::from_env);
                let tier = if self.backend == Backend::Llvm { Tier::Llvm } else { Tier::Cranelift };
                let mut lower = options.lower.clone();
                if options.dump_dir.is_some() {
                    lower.dump_dir.clone_from(&options.dump_dir);
                }
                // A target the host cannot run fails in code generation, which names it.
                lower.fma = cpu.resolve(tier.name()).is_ok_and(|t| t.has_fma());
                let (mut program, lowering) =
                    lower_verified_module_timed(module, &lower).map_err(|source| Error::Lower { backend, source })?;
                timings.extend(&lowering);
                timings.time("buffer assignment", || assign_buffers(&mut program, &self.spaces.capacities()))?;
                let dump = options.dump_dir.as_deref();
                if let Some(dir) = dump {
                    tessera_lower::dump_program(&program, dir);
                }
                let compiled = CompiledProgram::compile(tier, &program, &cpu, dump)?;
                timings.extend(&compiled.kernels.timings);
                let (executable, image) = timings.time("assembly", || {
                    tessera_codegen::assemble::assemble_image(
                        &program,
                        compiled,
                        &self.spaces,
                        self.pool.clone(),
                        &self.host,
                    )
                })?;
                signature.check_program(&program)?;
                if self.backend == Backend::Tiered {
                    // The tiered backend caches LLVM's program, once its background compile
                    // is done.
                    let job = PeakJob {
                        program,
                        cpu,
                        spaces: self.spaces.clone(),
                        pool: self.pool.clone(),
                        host: self.host.clone(),
                        cache: slot.clone().map(|slot| (slot, signature.shapes())),
                    };
                    Engine::Tiered(Box::new(Tiered::start(executable, job)))
                } else {
                    if let Some(slot) = &slot {
                        let (parameters, result) = signature.shapes();
                        let program = CachedProgram { parameters, result, image };
                        stored = Some(timings.time("cache: store", || slot.cache.store(slot.key, &program)));
                    }
                    Engine::Compiled(Box::new(executable), self.backend)
                }
            }
        };
        let mut executable = Executable::new(self.backend, engine, signature, start.elapsed(), timings);
        executable.cache = match (slot, rejected) {
            (None, _) => CacheOutcome::Off,
            (Some(_), None) => CacheOutcome::Miss { stored: stored.unwrap_or(Ok(())) },
            (Some(_), Some(reason)) => CacheOutcome::Rejected { reason, stored: stored.unwrap_or(Ok(())) },
        };
        Ok(executable)
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
