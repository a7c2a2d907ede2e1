//! The LLVM tier (DESIGN.md section 6): kernels become LLVM functions tuned for the target CPU
//! (the host unless a [`CpuTarget`] says otherwise), optimized with the `default<O3>` pipeline
//! and JIT-compiled with MCJIT.
//!
//! Compile time: a program's kernels are split into one module per available core (balanced by
//! their size in kernel IR), each optimized and compiled on its own thread in its own LLVM
//! context. LLVM's loop unroller only fully unrolls loops with small constant trip counts
//! (`target::limit_unrolling`): its partial and runtime unrolling tripled the code of the
//! kernel IR's explicitly vectorized loops (6.2K lines of IR became 18.5K on a GPT-2 training
//! step) and the time to compile it, without a run-time gain we could measure.

pub(crate) mod aot;
mod engine;
pub(crate) mod entry;
mod function;
mod index;
mod memory;
mod ops;
mod target;
mod vector;

use std::collections::HashSet;
use std::path::Path;

use inkwell::context::Context;
use inkwell::passes::PassBuilderOptions;
use inkwell::OptimizationLevel;

use inkwell::module::Linkage;
use inkwell::AddressSpace;
use tessera_lower::kernel::Kernel;
use tessera_lower::Program;
use tessera_runtime::EntryFn;

pub use engine::LlvmCode;

use crate::entry::{EntryAbi, EntryPlan};
use crate::{CodegenError, CompiledKernels, CompiledProgram, CpuTarget, Timings};

/// Compiles `kernels` into one module for the CPU of [`CpuTarget::from_env`] (the host unless
/// `TESSERA_CPU` names another); `functions[i]` of the result runs `kernels[i]`.
pub fn compile(kernels: &[Kernel]) -> Result<CompiledKernels, CodegenError> {
    compile_for(kernels, &CpuTarget::from_env())
}

/// [`compile`] for the CPU `cpu` (which the host must support: the code runs here).
pub fn compile_for(kernels: &[Kernel], cpu: &CpuTarget) -> Result<CompiledKernels, CodegenError> {
    compile_dumping(kernels, cpu, None)
}

/// [`compile_for`], writing the module's IR before and after optimization and its assembly
/// into `dump` (`llvm.ll`, `llvm-opt.ll`, `llvm.s`) when given.
pub fn compile_dumping(
    kernels: &[Kernel],
    cpu: &CpuTarget,
    dump: Option<&Path>,
) -> Result<CompiledKernels, CodegenError> {
    let mut timings = Timings::new();
    let host = timings.time("llvm: target setup", || target::target_cpu(&cpu.resolve("llvm")?))?;
    unique_names(kernels)?;
    let groups = match dump {
        // A dump is one module's IR and assembly.
        Some(_) => vec![(Effort::Full, (0..kernels.len()).collect())],
        None => module_groups(kernels, false),
    };
    let (functions, code, slowest) = compile_groups(&host, kernels, &groups, dump)?;
    timings.extend(&slowest);
    let functions = functions.into_iter().collect::<Option<Vec<_>>>().ok_or_else(no_module)?;
    Ok(CompiledKernels { functions, code: Box::new(code), timings })
}

/// Compiles a buffer-assigned program: its kernels (as [`compile_dumping`] does) and its entry
/// (the step tree as one function, `crate::entry`). The entry's module also holds the small
/// scalar kernels (`Effort::Light`), so LLVM inlines them into the loops that launch them: a
/// scalar loop step becomes straight-line code. The other kernels' modules compile side by
/// side with it, and the entry calls their kernels through a table of their addresses.
pub fn compile_program(
    program: &Program,
    cpu: &CpuTarget,
    dump: Option<&Path>,
) -> Result<CompiledProgram, CodegenError> {
    let entry_error = |message: String| CodegenError::Backend { tier: "llvm", kernel: "(entry)".into(), message };
    let plan = EntryPlan::new(program).map_err(entry_error)?;
    let kernels = &program.kernels;
    let mut timings = Timings::new();
    let host = timings.time("llvm: target setup", || target::target_cpu(&cpu.resolve("llvm")?))?;
    unique_names(kernels)?;
    let mut groups = module_groups(kernels, dump.is_some());
    // Small scalar kernels join the entry's module; larger ones (a scalar `sin` with its range
    // reduction) LLVM would not inline anyway, so they compile in a module of their own, beside
    // the entry's instead of after it.
    let mut inlined = Vec::new();
    if let Some(i) = groups.iter().position(|(effort, _)| *effort == Effort::Light) {
        let (small, large): (Vec<usize>, Vec<usize>) = groups
            .remove(i)
            .1
            .into_iter()
            .partition(|&k| crate::partition::statements(&kernels[k].body) <= INLINED_STATEMENTS);
        inlined = small;
        if !large.is_empty() {
            groups.push((Effort::Light, large));
        }
    }
    let (separate, entry_code) = std::thread::scope(|s| {
        let (host, groups) = (&host, &groups);
        let separate = (!groups.is_empty()).then(|| s.spawn(move || compile_groups(host, kernels, groups, dump)));
        let mut entry_timings = Timings::new();
        let entry_code = EntryCode::compile(host, &plan, kernels, &inlined, dump, &mut entry_timings);
        let separate = match separate {
            Some(handle) => handle.join().unwrap_or_else(|_| Err(panicked())),
            None => Ok((vec![None; kernels.len()], Vec::new(), Timings::new())),
        };
        (separate, entry_code.map(|c| (c, entry_timings)))
    });
    let (mut functions, code, slowest) = separate?;
    let (entry_code, entry_timings) = entry_code?;
    // The entry's module compiled beside the others; now it learns where their kernels are.
    entry_code.link(&functions)?;
    for (&k, &f) in inlined.iter().zip(&entry_code.defined) {
        functions[k] = Some(f);
    }
    let functions = functions.into_iter().collect::<Option<Vec<_>>>().ok_or_else(no_module)?;
    // The modules compile side by side: the slowest one's phases are the wall time.
    timings.extend(if slowest.total() > entry_timings.total() { &slowest } else { &entry_timings });
    let entry = entry_code.entry;
    // The entry's code goes first: it calls into the kernels' code, so it is freed before them.
    let kernels = CompiledKernels { functions, code: Box::new((entry_code.code, code)), timings };
    Ok(CompiledProgram { kernels, entry, plan })
}

/// The most kernel-IR statements a scalar kernel may have to be compiled into the entry's
/// module, where LLVM may inline it (its inliner's threshold is a few hundred instructions).
const INLINED_STATEMENTS: usize = 100;

/// The JIT entry of `plan` calling `functions[k]` for kernel `k`, for the host CPU (tests
/// assemble programs over hand-written kernels with it).
#[cfg(test)]
pub(crate) fn entry_calling(
    plan: &EntryPlan,
    functions: &[crate::KernelFn],
) -> Result<(LlvmCode, EntryFn), CodegenError> {
    let host = target::target_cpu(&CpuTarget::from_env().resolve("llvm")?)?;
    let code = EntryCode::compile(&host, plan, &[], &[], None, &mut Timings::new())?;
    code.link(&functions.iter().map(|&f| Some(f)).collect::<Vec<_>>())?;
    Ok((code.code, code.entry))
}

/// Kernel names must be unique in the whole compile, not only within each module.
fn unique_names(kernels: &[Kernel]) -> Result<(), CodegenError> {
    let mut names = HashSet::new();
    if let Some(k) = kernels.iter().find(|k| !names.insert(k.name.as_str())) {
        let what = format!("kernel name '{}' is already taken in this compile", k.name);
        return Err(CodegenError::Unsupported { tier: "llvm", kernel: k.name.clone(), what });
    }
    Ok(())
}

fn no_module() -> CodegenError {
    CodegenError::Backend {
        tier: "llvm",
        kernel: "(module)".into(),
        message: "a kernel was compiled by no module".into(),
    }
}

fn panicked() -> CodegenError {
    CodegenError::Backend { tier: "llvm", kernel: "(module)".into(), message: "a compile thread panicked".into() }
}

/// Each kernel's function (`None` for kernels in no group), the code's owners, and the slowest
/// module's phases.
type CompiledGroups = (Vec<Option<crate::KernelFn>>, Vec<LlvmCode>, Timings);

/// Compiles each group of kernels as a module of its own, side by side (the first on the
/// calling thread, dumping when asked); returns each kernel's function (`None` for kernels in
/// no group), the code's owners, and the slowest module's phases (the wall time).
fn compile_groups(
    host: &target::TargetCpu,
    kernels: &[Kernel],
    groups: &[(Effort, Vec<usize>)],
    dump: Option<&Path>,
) -> Result<CompiledGroups, CodegenError> {
    let compiled: Vec<Result<CompiledModule, CodegenError>> = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .iter()
            .skip(1)
            .map(|(effort, group)| s.spawn(move || compile_module(host, &pick(kernels, group), *effort, None)))
            .collect();
        let mut results = Vec::with_capacity(groups.len());
        if let Some((effort, first)) = groups.first() {
            results.push(compile_module(host, &pick(kernels, first), *effort, dump));
        }
        for handle in handles {
            results.push(handle.join().unwrap_or_else(|_| Err(panicked())));
        }
        results
    });
    let mut functions: Vec<Option<crate::KernelFn>> = vec![None; kernels.len()];
    let mut code = Vec::with_capacity(groups.len());
    let mut slowest = Timings::new();
    for ((_, group), result) in groups.iter().zip(compiled) {
        let (owner, group_functions, group_timings) = result?;
        for (&k, f) in group.iter().zip(group_functions) {
            functions[k] = Some(f);
        }
        code.push(owner);
        // The modules compile side by side: the slowest one's phases are the wall time.
        if group_timings.total() > slowest.total() {
            slowest = group_timings;
        }
    }
    Ok((functions, code, slowest))
}

/// The entry's module compiled: the entry, the scalar kernels it defines (so LLVM could
/// inline them), and the table through which it calls every other kernel, which
/// [`EntryCode::link`] fills once their modules are compiled.
struct EntryCode {
    code: LlvmCode,
    entry: EntryFn,
    /// The functions of the kernels the module defines, in the order given.
    defined: Vec<crate::KernelFn>,
    /// `table[slot]` is kernel `external[slot]`'s address.
    table: *mut crate::KernelFn,
    external: Vec<usize>,
}

/// The entry module's optimization: scalar replacement, CSE and CFG cleanup around the
/// inliner, and instruction combining once inlined. `default<O1>` also ran its loop passes on
/// the step tree's loops, which doubled the module's machine code (1,929 lines of assembly
/// against 1,048 for binary_search_loop) and its code-generation time, for no measured gain.
const ENTRY_PIPELINE: &str = "function(sroa,early-cse,simplifycfg),cgscc(inline),function(sroa,early-cse<memssa>,instcombine<no-verify-fixpoint>,simplifycfg)";

/// The entry function's name: kernel names never hold a dot, so it is never a kernel's.
const ENTRY_NAME: &str = "tessera.entry";
/// A function of the entry's module returning the address of its kernel table.
const TABLE_GETTER: &str = "tessera.kernel_table";

impl EntryCode {
    /// Translates `inlined` (indices into `kernels`) and the entry of `plan` into one module,
    /// optimized at light effort, and makes its machine code; every other kernel is called
    /// through the table.
    fn compile(
        host: &target::TargetCpu,
        plan: &EntryPlan,
        kernels: &[Kernel],
        inlined: &[usize],
        dump: Option<&Path>,
        timings: &mut Timings,
    ) -> Result<EntryCode, CodegenError> {
        let backend = |message: String| CodegenError::Backend { tier: "llvm", kernel: "(entry)".into(), message };
        let context = Box::new(Context::create());
        // SAFETY: as in `compile_module`: everything made from the context but the engine is
        // dropped before it, and `LlvmCode` disposes of the engine first.
        let ctx: &'static Context = unsafe { &*(&*context as *const Context) };
        let machine = host.machine()?;
        let module = ctx.create_module("tessera_entry");
        module.set_triple(&machine.get_triple());
        module.set_data_layout(&machine.get_target_data().get_data_layout());
        let symbols = tessera_runtime::abi::symbols();
        let names: HashSet<&'static str> = symbols.iter().map(|(n, _)| *n).collect();
        let count = plan.launches.iter().map(|(k, _)| k + 1).max().unwrap_or(0).max(kernels.len());
        let mut callees: Vec<Option<entry::Callee>> = vec![None; count];
        let mut defined = Vec::with_capacity(inlined.len());
        timings.time("llvm: translate entry", || -> Result<(), CodegenError> {
            for &k in inlined {
                let kernel = &kernels[k];
                function::translate(ctx, &module, host, kernel, &names)?;
                callees[k] = module.get_function(&kernel.name).map(entry::Callee::Function);
                defined.push(kernel.name.clone());
            }
            Ok(())
        })?;
        let ptr = ctx.ptr_type(AddressSpace::default());
        let external: Vec<usize> = (0..count).filter(|&k| callees[k].is_none()).collect();
        let slots = u32::try_from(external.len()).map_err(|_| backend("too many kernels".into()))?;
        let table = module.add_global(ptr.array_type(slots), None, "tessera.kernels");
        table.set_initializer(&ptr.array_type(slots).const_zero());
        for (slot, &k) in external.iter().enumerate() {
            callees[k] = Some(entry::Callee::Slot { table, index: slot as u32 });
        }
        let getter = module.add_function(TABLE_GETTER, ptr.fn_type(&[], false), Some(Linkage::External));
        let builder = ctx.create_builder();
        builder.position_at_end(ctx.append_basic_block(getter, "entry"));
        builder.build_return(Some(&table.as_pointer_value())).map_err(|e| backend(e.to_string()))?;
        drop(builder);
        let callees: Vec<_> = callees.into_iter().map(|c| c.expect("filled above")).collect();
        let runtime = entry::declare_runtime(ctx, &module, EntryAbi::Jit, Vec::new());
        timings
            .time("llvm: translate entry", || {
                entry::translate(ctx, &module, host, ENTRY_NAME, plan, &callees, &runtime)
            })
            .map_err(backend)?;
        module.verify().map_err(|e| backend(format!("invalid IR: {e}")))?;
        if let Some(dir) = dump {
            let path = dir.join("llvm-entry.ll");
            if let Err(e) = module.print_to_file(&path) {
                eprintln!("tessera: dump {}: {e}", path.display());
            }
        }
        timings
            .time("llvm: optimize entry", || module.run_passes(ENTRY_PIPELINE, &machine, pass_options()))
            .map_err(|e| backend(format!("the entry pipeline: {e}")))?;
        if let Some(dir) = dump {
            let path = dir.join("llvm-entry-opt.ll");
            if let Err(e) = module.print_to_file(&path) {
                eprintln!("tessera: dump {}: {e}", path.display());
            }
        }
        let mut symbols: Vec<(&str, *const u8)> = symbols;
        symbols.extend(tessera_runtime::entry_symbols());
        let mut names = defined;
        names.extend([TABLE_GETTER.to_string(), ENTRY_NAME.to_string()]);
        let (engine, mut found) = timings
            .time("llvm: entry machine code", || engine::jit(&module, &names, &symbols, OptimizationLevel::Less))?;
        drop(module);
        // SAFETY: the engine comes from the module of `context`, and nothing else made from it
        // lives.
        let code = unsafe { LlvmCode::new(engine, context) };
        let (Some(entry), Some(getter)) = (found.pop(), found.pop()) else {
            return Err(backend("the entry module lost its functions".into()));
        };
        // SAFETY: the entry was built with the signature `EntryFn` describes (`i32(ptr, ptr,
        // ptr)`, C calling convention), the getter as `ptr()`; `jit` typed them as kernels
        // only to find them.
        let entry = unsafe { std::mem::transmute::<crate::KernelFn, EntryFn>(entry) };
        let getter = unsafe { std::mem::transmute::<crate::KernelFn, extern "C" fn() -> *mut crate::KernelFn>(getter) };
        let table = getter();
        Ok(EntryCode { code, entry, defined: found, table, external })
    }

    /// Writes the address of every kernel the entry calls through its table.
    fn link(&self, functions: &[Option<crate::KernelFn>]) -> Result<(), CodegenError> {
        for (slot, &k) in self.external.iter().enumerate() {
            let f = functions.get(k).copied().flatten().ok_or_else(|| CodegenError::Backend {
                tier: "llvm",
                kernel: "(entry)".into(),
                message: format!("kernel {k} has no code"),
            })?;
            // SAFETY: the table is the module's array of `external.len()` pointers, alive with
            // `code`; nothing runs the entry before it is linked.
            unsafe { self.table.add(slot).write(f) };
        }
        Ok(())
    }
}

/// How hard a module is optimized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effort {
    /// `default<O3>` and aggressive instruction selection.
    Full,
    /// `default<O1>` and cheaper code generation: for scalar kernels (one grid index, no
    /// loop), such as a loop's counter update or a scalar step of a search, where the O3
    /// pipeline spent tens of milliseconds (a scalar `sin` with its range reduction: 25 ms
    /// optimizing, 33 ms in code generation) on code that runs a few hundred instructions.
    Light,
}

/// The modules to compile side by side: the kernels that loop, split into one group per core
/// of similar size, at full effort; the scalar ones together, at light effort. A dump is one
/// module's IR and assembly, so with one the looping kernels are one module.
fn module_groups(kernels: &[Kernel], dumping: bool) -> Vec<(Effort, Vec<usize>)> {
    let (light, full): (Vec<usize>, Vec<usize>) =
        (0..kernels.len()).partition(|&i| crate::partition::is_scalar(&kernels[i]));
    let mut groups: Vec<(Effort, Vec<usize>)> = Vec::new();
    if !full.is_empty() || light.is_empty() {
        let threads = if dumping { 1 } else { crate::partition::compile_threads() };
        groups.extend(crate::partition::partition_of(kernels, &full, threads).into_iter().map(|g| (Effort::Full, g)));
    }
    if !light.is_empty() {
        groups.push((Effort::Light, light));
    }
    groups
}

/// One module's machine code, its kernels' entry points (in the group's order) and where its
/// time went.
type CompiledModule = (LlvmCode, Vec<crate::KernelFn>, Timings);

/// `kernels[i]` for each `i` of `group`, in order.
fn pick<'k>(kernels: &'k [Kernel], group: &[usize]) -> Vec<&'k Kernel> {
    group.iter().map(|&i| &kernels[i]).collect()
}

/// One LLVM module of `kernels`, in a context of its own (so modules compile on separate
/// threads), optimized and JIT-compiled.
fn compile_module(
    host: &target::TargetCpu,
    kernels: &[&Kernel],
    effort: Effort,
    dump: Option<&Path>,
) -> Result<CompiledModule, CodegenError> {
    let mut timings = Timings::new();
    let context = Box::new(Context::create());
    // SAFETY: the reference outlives every use: `build` drops all it creates from the context
    // except the engine, which `LlvmCode` disposes of before the context.
    let ctx: &'static Context = unsafe { &*(&*context as *const Context) };
    let (engine, functions) = build(ctx, host, kernels, effort, dump, &mut timings)?;
    // SAFETY: `engine` comes from a module of `context`, and `build` returned nothing else
    // made from it.
    let code = unsafe { LlvmCode::new(engine, context) };
    Ok((code, functions, timings))
}

fn build(
    ctx: &'static Context,
    host: &target::TargetCpu,
    kernels: &[&Kernel],
    effort: Effort,
    dump: Option<&Path>,
    timings: &mut Timings,
) -> Result<(inkwell::execution_engine::ExecutionEngine<'static>, Vec<crate::KernelFn>), CodegenError> {
    let backend = |message: String| CodegenError::Backend { tier: "llvm", kernel: "(module)".into(), message };
    let symbols = tessera_runtime::abi::symbols();
    let names: HashSet<&'static str> = symbols.iter().map(|(n, _)| *n).collect();
    let machine = host.machine()?;
    let module = ctx.create_module("tessera");
    module.set_triple(&machine.get_triple());
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    timings.time("llvm: translate", || {
        kernels.iter().try_for_each(|kernel| function::translate(ctx, &module, host, kernel, &names))
    })?;
    timings.time("llvm: verify", || module.verify()).map_err(|e| backend(format!("invalid IR: {e}")))?;
    dump_ir(&module, dump);
    let (pipeline, codegen) = match effort {
        Effort::Full => ("default<O3>", OptimizationLevel::Aggressive),
        Effort::Light => ("default<O1>", OptimizationLevel::Less),
    };
    timings
        .time("llvm: optimize", || module.run_passes(pipeline, &machine, pass_options()))
        .map_err(|e| backend(format!("{pipeline} pipeline: {e}")))?;
    dump_optimized(&module, &machine, dump);
    let kernel_names: Vec<String> = kernels.iter().map(|k| k.name.clone()).collect();
    let (engine, functions) =
        timings.time("llvm: machine code", || engine::jit(&module, &kernel_names, &symbols, codegen))?;
    // The module's own clone of the engine goes with it, leaving `engine` the only one.
    drop(module);
    Ok((engine, functions))
}

/// The optimization pipeline's tuning (the unroller's limits are process-wide options set with
/// the target: see the module documentation).
pub(crate) fn pass_options() -> PassBuilderOptions {
    PassBuilderOptions::create()
}

/// Writes the module's IR before optimization to `dump/llvm.ll`, or with no folder given and
/// `TESSERA_DUMP_LLVM=FILE` set, to FILE (to reproduce an LLVM problem with
/// `opt-22 -passes='default<O3>'`). A dump that cannot be written is reported, never fatal.
pub(crate) fn dump_ir(module: &inkwell::module::Module<'_>, dump: Option<&Path>) {
    let path = match dump {
        Some(dir) => dir.join("llvm.ll"),
        None => match std::env::var_os("TESSERA_DUMP_LLVM") {
            Some(file) => file.into(),
            None => return,
        },
    };
    if let Err(e) = module.print_to_file(&path) {
        eprintln!("tessera: dump {}: {e}", path.display());
    }
}

/// Writes the optimized IR (`llvm-opt.ll`) and the assembly the target machine makes of it
/// (`llvm.s`) into `dump`, when given.
pub(crate) fn dump_optimized(
    module: &inkwell::module::Module<'_>,
    machine: &inkwell::targets::TargetMachine,
    dump: Option<&Path>,
) {
    let Some(dir) = dump else { return };
    let ir = dir.join("llvm-opt.ll");
    if let Err(e) = module.print_to_file(&ir) {
        eprintln!("tessera: dump {}: {e}", ir.display());
    }
    let asm = dir.join("llvm.s");
    if let Err(e) = machine.write_to_file(module, inkwell::targets::FileType::Assembly, &asm) {
        eprintln!("tessera: dump {}: {e}", asm.display());
    }
}
