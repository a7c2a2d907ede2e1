//! The Cranelift tier: fast compiles of kernels into one object (DESIGN.md section 6), which
//! `crate::loader` links into memory.
//!
//! Each `Kernel` becomes one function with the kernel calling convention. The translation is
//! split by job: `function` walks statements (values, locals, loops, branches, calls), `index`
//! evaluates and hoists index expressions, `ops` translates scalar operations, `memory` does
//! loads and stores, and `vector` turns eligible innermost loops into 128-bit vector loops.

pub(crate) mod aot;
pub(crate) mod entry;
mod function;
mod index;
mod inline;
mod memory;
mod ops;
mod vector;
mod vector_consts;

use cranelift_codegen::ir::{types, AbiParam, Signature};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
use cranelift_frontend::FunctionBuilderContext;
use cranelift_module::{DataDescription, DataId, FuncId, Linkage, Module, ModuleReloc};
use cranelift_object::{ObjectBuilder, ObjectModule};
use tessera_lower::kernel::Kernel;
use tessera_lower::Program;

use crate::entry::{EntryAbi, EntryPlan};
use crate::{CodegenError, CompiledKernels, CpuTarget, ObjectCode, ResolvedTarget, Timings};

pub(crate) const TIER: &str = "cranelift";

/// Why one kernel could not be translated; [`compile`] adds the kernel's name.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A construct this tier does not translate (names the op).
    Unsupported(String),
    /// The kernel breaks the IR's own rules (types, scoping, ranges) or Cranelift rejected it.
    Malformed(String),
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;

impl Failure {
    fn for_kernel(self, kernel: &str) -> CodegenError {
        match self {
            Failure::Unsupported(what) => CodegenError::Unsupported { tier: TIER, kernel: kernel.to_string(), what },
            Failure::Malformed(message) => CodegenError::Backend { tier: TIER, kernel: kernel.to_string(), message },
        }
    }
}

/// Cranelift's x86-64 flag for each feature (LLVM names) it can use.
const X86_FLAGS: [(&str, &str); 19] = [
    ("sse3", "has_sse3"),
    ("ssse3", "has_ssse3"),
    ("cx16", "has_cmpxchg16b"),
    ("sse4.1", "has_sse41"),
    ("sse4.2", "has_sse42"),
    ("popcnt", "has_popcnt"),
    ("avx", "has_avx"),
    ("avx2", "has_avx2"),
    ("fma", "has_fma"),
    ("avxvnni", "has_avx_vnni"),
    ("bmi", "has_bmi1"),
    ("bmi2", "has_bmi2"),
    ("lzcnt", "has_lzcnt"),
    ("avx512f", "has_avx512f"),
    ("avx512vl", "has_avx512vl"),
    ("avx512dq", "has_avx512dq"),
    ("avx512bitalg", "has_avx512bitalg"),
    ("avx512vbmi", "has_avx512vbmi"),
    ("avx512vnni", "has_avx512vnni"),
];

/// The ISA builder for `cpu`: the host's own detection when the target is the host, else the
/// host architecture with no extensions; then every flag set to what the target enables.
fn isa_builder(cpu: &ResolvedTarget) -> std::result::Result<cranelift_codegen::isa::Builder, CodegenError> {
    let target = |message: String| CodegenError::Target { tier: TIER, message };
    let mut builder = if cpu.is_host {
        cranelift_native::builder().map_err(|e| target(e.to_string()))?
    } else {
        cranelift_codegen::isa::lookup_by_name(&cpu.triple).map_err(|e| target(format!("{}: {e}", cpu.triple)))?
    };
    if cpu.triple.starts_with("x86_64") {
        for (feature, flag) in X86_FLAGS {
            let value = if cpu.has(feature) { "true" } else { "false" };
            builder.set(flag, value).map_err(|e| target(format!("setting {flag}: {e}")))?;
        }
    }
    Ok(builder)
}

/// An object module for `cpu`, named `name`.
fn object_module(cpu: &ResolvedTarget, name: &str) -> std::result::Result<ObjectModule, CodegenError> {
    let target = |message: String| CodegenError::Target { tier: TIER, message };
    let mut flags = settings::builder();
    let set = |flags: &mut settings::Builder, name: &str, value: &str| {
        flags.set(name, value).map_err(|e| target(format!("setting {name}={value}: {e}")))
    };
    set(&mut flags, "opt_level", "speed")?;
    // Position-independent: the loader places the object anywhere in the address space, and
    // reaches the runtime's symbols (far from it) through the global offset table.
    set(&mut flags, "is_pic", "true")?;
    // The verifier turns a translation bug into an error instead of bad code; release builds
    // skip it for compile speed (the tests run with debug assertions, so with the verifier).
    set(&mut flags, "enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" })?;
    // The target's features (by default the host's: SSE4.1 rounding, AVX, FMA...): the
    // kernel IR's fused multiply-adds, which lowering writes only for FMA targets, become FMA
    // instructions through them.
    let isa = isa_builder(cpu)?.finish(settings::Flags::new(flags)).map_err(|e| target(e.to_string()))?;
    let builder = ObjectBuilder::new(isa, name.as_bytes().to_vec(), cranelift_module::default_libcall_names())
        .map_err(|e| target(e.to_string()))?;
    Ok(ObjectModule::new(builder))
}

/// The kernel signature: `extern "C" fn(buffers: *const *mut u8, grid_lo: i64, grid_hi: i64)`.
fn kernel_signature(module: &dyn Module) -> Signature {
    let mut sig = module.make_signature();
    let ptr = module.target_config().pointer_type();
    sig.params.push(AbiParam::new(ptr));
    sig.params.push(AbiParam::new(types::I64));
    sig.params.push(AbiParam::new(types::I64));
    sig
}

/// Compiles `kernels` into one JIT module for the CPU of [`CpuTarget::from_env`] (the host
/// unless `TESSERA_CPU` names another); `functions[i]` runs `kernels[i]`.
pub fn compile(kernels: &[Kernel]) -> std::result::Result<CompiledKernels, CodegenError> {
    compile_for(kernels, &CpuTarget::from_env())
}

/// [`compile`] for the CPU `cpu` (which the host must support: the code runs here).
pub fn compile_for(kernels: &[Kernel], cpu: &CpuTarget) -> std::result::Result<CompiledKernels, CodegenError> {
    compile_dumping(kernels, cpu, None)
}

/// [`compile_for`], writing every kernel's optimized Cranelift IR and machine code into
/// `dump/cranelift.clif` when given (or, with no folder and `TESSERA_DUMP_CLIF=FILE` set, into
/// FILE).
pub fn compile_dumping(
    kernels: &[Kernel],
    cpu: &CpuTarget,
    dump: Option<&std::path::Path>,
) -> std::result::Result<CompiledKernels, CodegenError> {
    let (code, mut timings) = compile_object(kernels, None, cpu, dump)?;
    let (mut compiled, _) = code.load(&mut timings)?;
    compiled.timings = timings;
    Ok(compiled)
}

/// Compiles a buffer-assigned program into one object: its kernels and its entry (the step
/// tree as one function, `crate::entry`), for the CPU `cpu`, dumping as [`compile_dumping`]
/// does.
pub fn program_objects(
    program: &Program,
    cpu: &CpuTarget,
    dump: Option<&std::path::Path>,
) -> std::result::Result<(EntryPlan, ObjectCode, Timings), CodegenError> {
    let plan = EntryPlan::new(program).map_err(|message| CodegenError::Backend {
        tier: TIER,
        kernel: "(entry)".into(),
        message,
    })?;
    let (code, timings) = compile_object(&program.kernels, Some(&plan), cpu, dump)?;
    Ok((plan, code, timings))
}

/// One object defining `kernels`, each under its kernel symbol, and no entry: the LLVM tier's
/// kernels whose LLVM compile would not pay (`llvm::program_objects`). Its machine code goes
/// into `dump/cranelift.clif` when given.
pub(crate) fn kernels_object(
    kernels: &[Kernel],
    cpu: &CpuTarget,
    dump: Option<&std::path::Path>,
) -> std::result::Result<(Vec<u8>, Timings), CodegenError> {
    let (mut code, timings) = compile_object(kernels, None, cpu, dump)?;
    Ok((code.objects.pop().unwrap_or_default(), timings))
}

/// The symbol of a program's entry (never a kernel's: `crate::kernel_symbol`).
const ENTRY_NAME: &str = "tessera.entry";

/// The kernels and, given a plan, the JIT entry that runs it, in one object.
fn compile_object(
    kernels: &[Kernel],
    plan: Option<&EntryPlan>,
    cpu: &CpuTarget,
    dump: Option<&std::path::Path>,
) -> std::result::Result<(ObjectCode, Timings), CodegenError> {
    let entry = plan.map(|plan| (plan, EntryKind::Jit));
    compile_object_with(kernels, KernelCode::Here, entry, &cpu.resolve(TIER)?, dump)
}

/// Which program an object's entry belongs to.
#[derive(Clone, Copy)]
pub(crate) enum EntryKind<'a> {
    /// A JIT program's: the entry is [`ENTRY_NAME`] and the kernels are exported under their
    /// kernel symbols, for the loader; constants come from the runtime at each run.
    Jit,
    /// An ahead-of-time object's (`crate::aot`): the entry is exported as `symbol`, the
    /// kernels are local to the object (so those of several objects never clash), and the
    /// constants are the object's own read-only data.
    Object { symbol: &'a str, parallel: bool, constants: &'a [&'a [u8]] },
}

impl<'a> EntryKind<'a> {
    /// The symbol the entry is exported under.
    fn symbol(self) -> &'a str {
        match self {
            EntryKind::Jit => ENTRY_NAME,
            EntryKind::Object { symbol, .. } => symbol,
        }
    }
}

/// Where the code of the kernels an object's entry launches is.
#[derive(Clone, Copy)]
pub(crate) enum KernelCode<'a> {
    /// In the object: each distinct kernel compiles into it.
    Here,
    /// In other objects, kernel `k` under the symbol `names[k]`: the object holds the entry
    /// alone, which calls them by symbol.
    Elsewhere(&'a [String]),
}

/// An object holding only the JIT entry of `plan`, which calls kernel `k` of `kernels` by the
/// symbol `names[k]` that other objects define: the LLVM tier's entry when LLVM would inline
/// no kernel into it (`llvm::program_objects`). Its machine code goes into
/// `dump/cranelift-entry.clif` when given.
pub(crate) fn entry_object(
    plan: &EntryPlan,
    kernels: &[Kernel],
    names: &[String],
    cpu: &CpuTarget,
    dump: Option<&std::path::Path>,
) -> std::result::Result<(Vec<u8>, Timings), CodegenError> {
    let entry = Some((plan, EntryKind::Jit));
    let (mut code, timings) =
        compile_object_with(kernels, KernelCode::Elsewhere(names), entry, &cpu.resolve(TIER)?, dump)?;
    Ok((code.objects.pop().unwrap_or_default(), timings))
}

/// One object of `kernels` for `target`, with the kernels' code where `code` says and, given
/// one, the entry that runs a plan: the one path by which this tier makes a JIT program's
/// object and an ahead-of-time one.
pub(crate) fn compile_object_with(
    kernels: &[Kernel],
    code: KernelCode<'_>,
    entry: Option<(&EntryPlan, EntryKind<'_>)>,
    target: &ResolvedTarget,
    dump: Option<&std::path::Path>,
) -> std::result::Result<(ObjectCode, Timings), CodegenError> {
    let mut timings = Timings::new();
    let name = match entry {
        Some((_, EntryKind::Object { symbol, .. })) => symbol,
        _ => "tessera",
    };
    let local_kernels = matches!(entry, Some((_, EntryKind::Object { .. })));
    let mut module = timings.time("cranelift: module setup", || object_module(target, name))?;
    if module.target_config().pointer_type() != types::I64 {
        return Err(CodegenError::Target { tier: TIER, message: "the kernel ABI needs 64-bit pointers".into() });
    }
    let symbols = tessera_runtime::abi::symbols().into_iter().map(|(name, _)| name).collect::<Vec<_>>();
    let sig = kernel_signature(&module);
    let mut builder_ctx = FunctionBuilderContext::new();
    let dump_path = match (dump, code) {
        (Some(dir), KernelCode::Here) => Some(dir.join("cranelift.clif").into_os_string()),
        (Some(dir), KernelCode::Elsewhere(_)) => Some(dir.join("cranelift-entry.clif").into_os_string()),
        (None, KernelCode::Here) => std::env::var_os("TESSERA_DUMP_CLIF"),
        (None, KernelCode::Elsewhere(_)) => None,
    };
    // Translation declares runtime functions in the module, so it runs here, kernel by kernel;
    // machine code needs only the ISA, so the translated functions compile side by side.
    // Kernels with the same code share one function: only the distinct ones compile.
    let representative = crate::partition::representatives(kernels);
    let distinct = match code {
        KernelCode::Here => crate::partition::distinct(&representative),
        KernelCode::Elsewhere(_) => Vec::new(),
    };
    let mut translated: Vec<(FuncId, Context)> = Vec::with_capacity(distinct.len());
    for kernel in distinct.iter().map(|&k| &kernels[k]) {
        let backend = |message: String| CodegenError::Backend { tier: TIER, kernel: kernel.name.clone(), message };
        let id = if local_kernels {
            module.declare_anonymous_function(&sig)
        } else {
            // Exported, for the loader to find.
            module.declare_function(&crate::kernel_symbol(&kernel.name), Linkage::Export, &sig)
        }
        .map_err(|e| backend(e.to_string()))?;
        let mut ctx = module.make_context();
        ctx.func.signature = sig.clone();
        timings
            .time("cranelift: translate", || {
                function::translate(kernel, &mut module, &mut ctx, &mut builder_ctx, &symbols)
            })
            .map_err(|f| f.for_kernel(&kernel.name))?;
        ctx.set_disasm(dump_path.is_some());
        translated.push((id, ctx));
    }
    // Groups of positions in `translated` (that is, in `distinct`).
    let position: std::collections::HashMap<usize, usize> = distinct.iter().enumerate().map(|(p, &k)| (k, p)).collect();
    let mut groups: Vec<Vec<usize>> =
        crate::partition::partition_of(kernels, &distinct, crate::partition::compile_threads())
            .into_iter()
            .map(|g| g.iter().map(|k| position[k]).collect::<Vec<usize>>())
            .filter(|g| !g.is_empty())
            .collect();
    if let Some((plan, kind)) = entry {
        let backend = |message: String| CodegenError::Backend { tier: TIER, kernel: "(entry)".into(), message };
        let kernel_ids: Vec<FuncId> = match code {
            KernelCode::Here => representative.iter().map(|r| translated[position[r]].0).collect(),
            KernelCode::Elsewhere(names) if names.len() == kernels.len() => names
                .iter()
                .map(|name| module.declare_function(name, Linkage::Import, &sig))
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| backend(e.to_string()))?,
            KernelCode::Elsewhere(names) => {
                return Err(backend(format!("{} kernel symbols for {} kernels", names.len(), kernels.len())))
            }
        };
        let (abi, constants) = match kind {
            EntryKind::Jit => (EntryAbi::Jit, Vec::new()),
            EntryKind::Object { symbol, parallel, constants } => {
                (EntryAbi::Object { parallel }, object_constants(&mut module, symbol, constants).map_err(backend)?)
            }
        };
        let mut ctx = module.make_context();
        timings
            .time("cranelift: translate entry", || {
                let runtime = entry::declare_runtime(&mut module, abi, constants)?;
                let kernels = entry::Kernels { functions: &kernel_ids, ir: kernels, symbols: &symbols };
                entry::translate(plan, &mut module, &kernels, &runtime, &mut ctx, &mut builder_ctx)
            })
            .map_err(backend)?;
        let id = module
            .declare_function(kind.symbol(), Linkage::Export, &ctx.func.signature)
            .map_err(|e| backend(e.to_string()))?;
        ctx.set_disasm(dump_path.is_some());
        // The entry compiles beside the kernels, on a thread of its own.
        groups.push(vec![translated.len()]);
        translated.push((id, ctx));
    }
    let machine_code =
        timings.time("cranelift: machine code", || machine_code_in_parallel(module.isa(), &mut translated, &groups));
    let mut listing = String::new();
    let names = distinct.iter().map(|&k| format!("kernel {}", kernels[k].name)).chain(["entry".to_string()]);
    for ((name, (id, ctx)), code) in names.zip(&translated).zip(machine_code) {
        let backend = |message: String| CodegenError::Backend { tier: TIER, kernel: name.clone(), message };
        let code = code.map_err(backend)?;
        module
            .define_function_bytes(*id, code.alignment, &code.bytes, &code.relocs)
            .map_err(|e| backend(e.to_string()))?;
        if dump_path.is_some() {
            let asm = code.disasm.as_deref().unwrap_or_default();
            listing.push_str(&format!("; {name}\n{}\n; machine code\n{asm}\n", ctx.func.display()));
        }
    }
    if let Some(path) = dump_path {
        if let Err(e) = std::fs::write(&path, listing) {
            eprintln!("tessera: dump {}: {e}", std::path::Path::new(&path).display());
        }
    }
    let object = timings.time("cranelift: object", || {
        module.finish().emit().map_err(|e| CodegenError::Backend {
            tier: TIER,
            kernel: "(module)".into(),
            message: format!("writing the object: {e}"),
        })
    })?;
    let kernels = match code {
        _ if local_kernels => Vec::new(),
        KernelCode::Here => representative.iter().map(|&r| crate::kernel_symbol(&kernels[r].name)).collect(),
        KernelCode::Elsewhere(names) => names.to_vec(),
    };
    let entry = entry.map(|(_, kind)| kind.symbol().to_string());
    Ok((ObjectCode { objects: vec![object], kernels, entry }, timings))
}

/// An ahead-of-time entry's constants as read-only data local to its object, each aligned as
/// every buffer is.
fn object_constants(
    module: &mut ObjectModule,
    symbol: &str,
    constants: &[&[u8]],
) -> std::result::Result<Vec<DataId>, String> {
    let mut ids = Vec::with_capacity(constants.len());
    for (i, bytes) in constants.iter().enumerate() {
        let id = module
            .declare_data(&format!("{symbol}.const{i}"), Linkage::Local, false, false)
            .map_err(|e| e.to_string())?;
        let mut data = DataDescription::new();
        data.define(bytes.to_vec().into_boxed_slice());
        data.set_align(Program::ALIGNMENT);
        module.define_data(id, &data).map_err(|e| e.to_string())?;
        ids.push(id);
    }
    Ok(ids)
}

/// The Cranelift IR the tier makes of `kernel` before code generation (for diagnostics and for
/// tests that check what shape of code a kernel gets, e.g. vector loops).
pub fn clif(kernel: &Kernel) -> std::result::Result<String, CodegenError> {
    let mut module = object_module(&CpuTarget::from_env().resolve(TIER)?, "tessera")?;
    let symbols = tessera_runtime::abi::symbols().into_iter().map(|(name, _)| name).collect::<Vec<_>>();
    let mut ctx = module.make_context();
    ctx.func.signature = kernel_signature(&module);
    function::translate(kernel, &mut module, &mut ctx, &mut FunctionBuilderContext::new(), &symbols)
        .map_err(|f| f.for_kernel(&kernel.name))?;
    Ok(ctx.func.display().to_string())
}

/// One function's machine code, ready for `Module::define_function_bytes`.
struct MachineCode {
    alignment: u64,
    bytes: Vec<u8>,
    relocs: Vec<ModuleReloc>,
    /// The machine code as text, when the function asked for it (`Context::set_disasm`).
    disasm: Option<String>,
}

/// Compiles every translated function, the groups (indices into `functions`) on threads of
/// their own; result `i` is function `i`'s code or the error that stopped it.
fn machine_code_in_parallel(
    isa: &dyn TargetIsa,
    functions: &mut [(FuncId, Context)],
    groups: &[Vec<usize>],
) -> Vec<std::result::Result<MachineCode, String>> {
    type Job<'f> = Vec<(usize, &'f mut (FuncId, Context))>;
    let count = functions.len();
    let mut slots: Vec<Option<&mut (FuncId, Context)>> = functions.iter_mut().map(Some).collect();
    let jobs: Vec<Job> = groups
        .iter()
        .map(|group| group.iter().filter_map(|&i| Some((i, slots.get_mut(i)?.take()?))).collect())
        .collect();
    let run = |job: Job| {
        // One context per thread serves all its functions, so the allocations a compile makes
        // (the register allocator's above all) are made once per thread, not per function.
        let mut worker = Context::new();
        job.into_iter().map(|(i, (id, ctx))| (i, machine_code(isa, *id, ctx, &mut worker))).collect::<Vec<_>>()
    };
    let finished = std::thread::scope(|s| {
        let mut jobs = jobs.into_iter();
        let first = jobs.next();
        let handles: Vec<_> = jobs.map(|job| s.spawn(move || run(job))).collect();
        let mut finished = first.map(run).unwrap_or_default();
        for handle in handles {
            // A panicking compile thread leaves its functions "not compiled" (an error below).
            finished.extend(handle.join().unwrap_or_default());
        }
        finished
    });
    let mut results: Vec<std::result::Result<MachineCode, String>> =
        (0..count).map(|_| Err("not compiled (a compile thread failed)".to_string())).collect();
    for (i, result) in finished {
        results[i] = result;
    }
    results
}

/// One translated function's machine code (what `Module::define_function` does before it
/// places the code in the module), compiled in `worker`; `ctx` gets the optimized function
/// back.
fn machine_code(
    isa: &dyn TargetIsa,
    id: FuncId,
    ctx: &mut Context,
    worker: &mut Context,
) -> std::result::Result<MachineCode, String> {
    worker.clear();
    worker.set_disasm(ctx.want_disasm);
    std::mem::swap(&mut worker.func, &mut ctx.func);
    let code = compile_in(isa, id, worker);
    std::mem::swap(&mut worker.func, &mut ctx.func);
    code
}

fn compile_in(isa: &dyn TargetIsa, id: FuncId, ctx: &mut Context) -> std::result::Result<MachineCode, String> {
    ctx.compile(isa, &mut Default::default()).map_err(|e| rejected(e.func, e.inner))?;
    let compiled = ctx.compiled_code().ok_or("Cranelift returned no code")?;
    let alignment = compiled.buffer.alignment as u64;
    let bytes = compiled.code_buffer().to_vec();
    let relocs = compiled.buffer.relocs().iter().map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, id)).collect();
    let disasm = if ctx.want_disasm { compiled.vcode.clone() } else { None };
    Ok(MachineCode { alignment, bytes, relocs, disasm })
}

/// Why Cranelift refused `func`: its verifier's errors shown on the function, or the error.
fn rejected(func: &cranelift_codegen::ir::Function, error: cranelift_codegen::CodegenError) -> String {
    match error {
        cranelift_codegen::CodegenError::Verifier(errors) => format!(
            "Cranelift rejected the function:\n{}",
            cranelift_codegen::print_errors::pretty_verifier_error(func, None, errors)
        ),
        other => other.to_string(),
    }
}
