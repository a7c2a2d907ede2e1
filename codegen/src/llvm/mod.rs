//! The LLVM tier (DESIGN.md section 6): kernels become LLVM functions tuned for the target CPU
//! (the host unless a [`CpuTarget`] says otherwise), optimized with the `default<O3>` pipeline
//! and written as relocatable objects, which `crate::loader` links into memory.
//!
//! Compile time: a program's kernels are split into one module per available core (balanced by
//! their size in kernel IR), each optimized and compiled on its own thread in its own LLVM
//! context. LLVM's loop unroller only fully unrolls loops with small constant trip counts
//! (`target::limit_unrolling`): its partial and runtime unrolling tripled the code of the
//! kernel IR's explicitly vectorized loops (6.2K lines of IR became 18.5K on a GPT-2 training
//! step) and the time to compile it, without a run-time gain we could measure.

pub(crate) mod aot;
pub(crate) mod entry;
mod function;
mod index;
mod memory;
mod ops;
mod streaming;
mod target;
mod transpose;
mod vector;

pub(crate) use target::initialize_native;

use std::collections::HashSet;
use std::path::Path;

use inkwell::context::Context;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{FileType, TargetMachine};
use inkwell::AddressSpace;
use inkwell::OptimizationLevel;
use tessera_lower::kernel::Kernel;
use tessera_lower::Program;

use crate::entry::{EntryAbi, EntryPlan};
use crate::{CodegenError, CompiledKernels, CpuTarget, ObjectCode, Timings};

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
    // Without their program, how often the kernels run is unknown.
    let light: Vec<bool> = kernels.iter().map(|k| light(k, u64::MAX)).collect();
    let groups = module_groups(kernels, &(0..kernels.len()).collect::<Vec<_>>(), &light, dump.is_some());
    // Without their program, nothing is known about how the kernels' buffers overlap.
    let disjoint = vec![false; kernels.len()];
    let (objects, slowest) = compile_groups(&host, kernels, &disjoint, &groups, dump)?;
    timings.extend(&slowest);
    let code =
        ObjectCode { objects, kernels: kernels.iter().map(|k| crate::kernel_symbol(&k.name)).collect(), entry: None };
    let (mut compiled, _) = code.load(&mut timings)?;
    compiled.timings = timings;
    Ok(compiled)
}

/// Compiles a buffer-assigned program into objects: its kernels (as [`compile_dumping`] does)
/// and its entry (the step tree as one function, `crate::entry`). The entry's module also
/// holds the small scalar kernels (`Effort::Light`), so LLVM inlines them into the loops that
/// launch them: a scalar loop step becomes straight-line code. The other kernels' modules
/// compile side by side with it, and so does one object of Cranelift's for the sequential and
/// scalar kernels with little work in a run ([`handed_over`]); the entry calls their kernels
/// by symbol, and linking the objects binds those calls. An entry into which no kernel is
/// inlined is Cranelift's (`cranelift::entry_object`, `cranelift-entry.clif` in a dump): a
/// sequence of launches, copies and branches, the same calls either way, which LLVM's entry
/// pipeline and code generation took 3-9 ms of a fresh process to compile (a module of one
/// small kernel 24 -> 20 ms, XLA:CPU 15-18; one of copies alone 11 -> 2 ms).
pub fn program_objects(
    program: &Program,
    cpu: &CpuTarget,
    dump: Option<&Path>,
) -> Result<(EntryPlan, ObjectCode, Timings), CodegenError> {
    let entry_error = |message: String| CodegenError::Backend { tier: "llvm", kernel: "(entry)".into(), message };
    let plan = EntryPlan::new(program).map_err(entry_error)?;
    let kernels = &program.kernels;
    let mut timings = Timings::new();
    let host = timings.time("llvm: target setup", || target::target_cpu(&cpu.resolve("llvm")?))?;
    unique_names(kernels)?;
    // Kernels with the same code share one function: only the distinct ones compile.
    let representative = crate::partition::representatives(kernels);
    let distinct = crate::partition::distinct(&representative);
    let disjoint = disjoint_kernels(program, &representative);
    let run_work = run_work(program, &representative);
    // Only the distinct kernels compile, so only theirs is asked.
    let light: Vec<bool> =
        (0..kernels.len()).map(|k| representative[k] == k && light(&kernels[k], run_work[k])).collect();
    let mut groups = module_groups(kernels, &distinct, &light, dump.is_some());
    // Small scalar kernels join the entry's module, and so do those launched in a while loop
    // (`partition::HOT_INLINED_STATEMENTS`), always inlined. Larger ones (a scalar `sin` with its range
    // reduction, run once) LLVM would not inline anyway, so they compile in a module of their
    // own, beside the entry's instead of after it, as do the sequential ones, whose loops need
    // the loop passes the entry's pipeline does not run.
    // Each function's launch sites: an always-inlined kernel is copied into every one.
    let mut sites = vec![0usize; kernels.len()];
    for &(k, _) in &plan.launches {
        if let Some(site) = representative.get(k).and_then(|&r| sites.get_mut(r)) {
            *site += 1;
        }
    }
    let mut inlined = Vec::new();
    let mut always_inlined = vec![false; kernels.len()];
    for (_, group) in groups.iter_mut().filter(|(effort, _)| *effort == Effort::Light) {
        group.retain(|&k| {
            let statements = crate::partition::statements(&kernels[k].body);
            let hot = run_work[k] == u64::MAX
                && statements.saturating_mul(sites[k].max(1)) <= crate::partition::HOT_INLINED_STATEMENTS;
            let small =
                crate::partition::is_scalar(&kernels[k]) && (statements <= crate::partition::INLINED_STATEMENTS || hot);
            if small {
                inlined.push(k);
                always_inlined[k] = hot;
            }
            !small
        });
    }
    // The sequential and scalar kernels left, when a run does little of their work, compile
    // with Cranelift (`handed_over`). So do the always-inlined kernels' own functions: the fast
    // copy of the steps runs their code inlined, and only the profiled copy (`--profile`) calls
    // them, through the runtime. Compiled beside the inlined code, that second copy of a hot
    // `sin` step doubled the entry's code generation (scalar_while_10k's entry 60 -> 25 ms in
    // `llc`), for profiles alone.
    let mut handed: Vec<Kernel> = inlined.iter().filter(|&&k| always_inlined[k]).map(|&k| kernels[k].clone()).collect();
    for (_, group) in groups.iter_mut().filter(|(effort, _)| *effort != Effort::Full) {
        group.retain(|&k| {
            let hand = handed_over(&kernels[k], run_work[k]);
            if hand {
                handed.push(kernels[k].clone());
            }
            !hand
        });
    }
    groups.retain(|(_, group)| !group.is_empty());
    let names: Vec<String> = representative.iter().map(|&r| crate::kernel_symbol(&kernels[r].name)).collect();
    let (separate, entry_object, cranelift) = std::thread::scope(|s| {
        let (host, groups) = (&host, &groups);
        let disjoint = &disjoint;
        let separate =
            (!groups.is_empty()).then(|| s.spawn(move || compile_groups(host, kernels, disjoint, groups, dump)));
        let handed = &handed;
        let cranelift =
            (!handed.is_empty()).then(|| s.spawn(move || crate::cranelift::kernels_object(handed, cpu, dump)));
        // With no kernel to inline, the entry is a sequence of launches, copies and branches,
        // which Cranelift compiles as well as LLVM's light pipeline does, in a fraction of its
        // time; LLVM's takes over should Cranelift fail.
        let cranelift_entry = if inlined.is_empty() {
            crate::cranelift::entry_object(&plan, kernels, &names, cpu, dump).ok()
        } else {
            None
        };
        let entry_object = match cranelift_entry {
            Some(compiled) => Ok(compiled),
            None => {
                let mut entry_timings = Timings::new();
                entry_object(host, &plan, kernels, &names, &inlined, &always_inlined, dump, &mut entry_timings)
                    .map(|object| (object, entry_timings))
            }
        };
        let separate = match separate {
            Some(handle) => handle.join().unwrap_or_else(|_| Err(panicked())),
            None => Ok((Vec::new(), Timings::new())),
        };
        let cranelift = cranelift.map(|handle| handle.join().unwrap_or_else(|_| Err(panicked())));
        (separate, entry_object, cranelift)
    });
    let (mut objects, slowest) = separate?;
    let (entry_object, entry_timings) = entry_object?;
    objects.push(entry_object);
    // The modules compile side by side: the slowest one's phases are the wall time.
    let mut wall = if slowest.total() > entry_timings.total() { slowest } else { entry_timings };
    match cranelift {
        Some(Ok((object, cranelift_timings))) => {
            objects.push(object);
            if cranelift_timings.total() > wall.total() {
                wall = cranelift_timings;
            }
        }
        // A target Cranelift cannot compile for (or a kernel it refuses) leaves them to LLVM.
        Some(Err(_)) => {
            let indices: Vec<usize> = (0..handed.len()).collect();
            let all_light = vec![true; handed.len()];
            let groups = module_groups(&handed, &indices, &all_light, dump.is_some());
            let no_disjoint = vec![false; handed.len()];
            let (more, more_timings) = compile_groups(&host, &handed, &no_disjoint, &groups, dump)?;
            objects.extend(more);
            timings.extend(&more_timings);
        }
        None => {}
    }
    timings.extend(&wall);
    Ok((plan, ObjectCode { objects, kernels: names, entry: Some(ENTRY_NAME.to_string()) }, timings))
}

/// Whether the LLVM tier compiles `kernel` with Cranelift: a sequential kernel (a sort's
/// merges, a scan) or a scalar one, doing at most [`LIGHT_WORK`] statements in a run
/// (`run_work`). LLVM's passes and instruction selection spent 10-25 ms on one such kernel
/// (top_k's: 15 ms optimizing and 10 ms in code generation, for 300 lines of assembly), where
/// XLA:CPU compiles the whole module in 15 to 90 and Cranelift compiles it in about 2 (the
/// modules' LLVM compile, 3 alternating rounds: top_k 24.5 -> 7.1 ms, sort_1d_2d 33.6 -> 7.8,
/// argsort 43.9 -> 21.9; XLA:CPU 14.8, 33.6 and 86.6). Its code for them runs about as fast,
/// since neither tier vectorizes a sequential loop (3 alternating rounds of 1,000 runs:
/// sort_1d_2d 33.6 against 33.9 us, argsort 13.0 against 12.2), but for top_k's test of a
/// block of 16 in one vector, 4 lanes wide on Cranelift (3.8 against 4.8 us). Vectorized
/// kernels stay with LLVM, however small: Cranelift's 128-bit code made tiny elementwise
/// programs 30-70% slower (a convert of a few hundred elements 0.9 -> 1.3 us), which a few
/// milliseconds less of compile time did not repay.
fn handed_over(kernel: &Kernel, run_work: u64) -> bool {
    run_work <= LIGHT_WORK && (crate::partition::is_sequential(kernel) || crate::partition::is_scalar(kernel))
}

/// The LLVM library's version (`22.1.x`): the compile cache keys entries by it, as code
/// generation may change with it.
pub fn version() -> String {
    let (mut major, mut minor, mut patch) = (0, 0, 0);
    // SAFETY: LLVMGetVersion only writes the three integers.
    unsafe { llvm_sys::core::LLVMGetVersion(&mut major, &mut minor, &mut patch) };
    format!("{major}.{minor}.{patch}")
}

/// The JIT entry of `plan` calling `functions[k]` for kernel `k`, for the host CPU (tests
/// assemble programs over hand-written kernels with it).
#[cfg(test)]
pub(crate) fn entry_calling(
    plan: &EntryPlan,
    functions: &[crate::KernelFn],
) -> Result<(CompiledKernels, tessera_runtime::EntryFn, ObjectCode), CodegenError> {
    let host = target::target_cpu(&CpuTarget::from_env().resolve("llvm")?)?;
    let names: Vec<String> = (0..functions.len()).map(|k| format!("test.kernel.{k}")).collect();
    let object = entry_object(&host, plan, &[], &names, &[], &[], None, &mut Timings::new())?;
    let extra: Vec<(&str, *const u8)> =
        names.iter().zip(functions).map(|(name, &f)| (name.as_str(), f as *const u8)).collect();
    let code = ObjectCode { objects: vec![object], kernels: names.clone(), entry: Some(ENTRY_NAME.to_string()) };
    let (compiled, entry) = code.load_with(&extra, &mut Timings::new())?;
    let missing = || CodegenError::Backend { tier: "llvm", kernel: "(entry)".into(), message: "no entry".into() };
    Ok((compiled, entry.ok_or_else(missing)?, code))
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

fn panicked() -> CodegenError {
    CodegenError::Backend { tier: "llvm", kernel: "(module)".into(), message: "a compile thread panicked".into() }
}

/// Compiles each group of kernels as a module of its own, side by side (the first on the
/// calling thread), dumping each into `dump` when asked (`dump_stems` names the files); returns
/// each module's object and the slowest module's phases (the wall time).
fn compile_groups(
    host: &target::TargetCpu,
    kernels: &[Kernel],
    disjoint: &[bool],
    groups: &[(Effort, Vec<usize>)],
    dump: Option<&Path>,
) -> Result<(Vec<Vec<u8>>, Timings), CodegenError> {
    let stems = dump_stems(groups);
    let compiled: Vec<Result<(Vec<u8>, Timings), CodegenError>> = std::thread::scope(|s| {
        let stems = &stems;
        let module_dump = |g: usize| dump.map(|dir| (dir, stems[g].as_str()));
        let handles: Vec<_> = (1..groups.len())
            .map(|g| {
                let (effort, group) = &groups[g];
                let dump = module_dump(g);
                s.spawn(move || compile_module(host, &pick(kernels, disjoint, group), *effort, dump))
            })
            .collect();
        let mut results = Vec::with_capacity(groups.len());
        if let Some((effort, first)) = groups.first() {
            results.push(compile_module(host, &pick(kernels, disjoint, first), *effort, module_dump(0)));
        }
        for handle in handles {
            results.push(handle.join().unwrap_or_else(|_| Err(panicked())));
        }
        results
    });
    let mut objects = Vec::with_capacity(groups.len());
    let mut slowest = Timings::new();
    for result in compiled {
        let (object, module_timings) = result?;
        objects.push(object);
        // The modules compile side by side: the slowest one's phases are the wall time.
        if module_timings.total() > slowest.total() {
            slowest = module_timings;
        }
    }
    Ok((objects, slowest))
}

/// The stem of each group's dump files: `llvm` for the first full-effort module and
/// `llvm-light` for the first light one (a dump compiles one of each), with the group's rank
/// within its effort appended to any further ones.
fn dump_stems(groups: &[(Effort, Vec<usize>)]) -> Vec<String> {
    let mut seen = [0usize; 2];
    groups
        .iter()
        .map(|(effort, _)| {
            let (slot, stem) = match effort {
                Effort::Full => (0, "llvm"),
                Effort::Light | Effort::Sequential => (1, "llvm-light"),
            };
            seen[slot] += 1;
            if seen[slot] == 1 {
                stem.to_string()
            } else {
                format!("{stem}-{}", seen[slot] - 1)
            }
        })
        .collect()
}

/// The entry module's optimization: scalar replacement, CSE and CFG cleanup around the
/// inliner, and instruction combining once inlined. `default<O1>` also ran its loop passes on
/// the step tree's loops, which doubled the module's machine code (1,929 lines of assembly
/// against 1,048 for binary_search_loop) and its code-generation time, for no measured gain.
/// The always-inlined kernels' bodies, available externally, are dropped once inlined.
const ENTRY_PIPELINE: &str = "function(sroa,early-cse,simplifycfg),cgscc(inline),function(sroa,early-cse<memssa>,instcombine<no-verify-fixpoint>,simplifycfg),elim-avail-extern";

/// The entry function's symbol (never a kernel's: `crate::kernel_symbol`).
const ENTRY_NAME: &str = "tessera.entry";

/// The object of the entry's module: the entry of `plan` and the kernels `inlined` (indices
/// into `kernels`), optimized at light effort; kernel `k` is the function `names[k]` (its
/// symbol), defined in the module if inlined (available externally if always inlined: its
/// symbol is Cranelift's copy), else declared (another object defines it).
fn entry_object(
    host: &target::TargetCpu,
    plan: &EntryPlan,
    kernels: &[Kernel],
    names: &[String],
    inlined: &[usize],
    always_inlined: &[bool],
    dump: Option<&Path>,
    timings: &mut Timings,
) -> Result<Vec<u8>, CodegenError> {
    let backend = |message: String| CodegenError::Backend { tier: "llvm", kernel: "(entry)".into(), message };
    let ctx = Context::create();
    let machine = host.object_machine(OptimizationLevel::Less)?;
    let module = ctx.create_module("tessera_entry");
    module.set_triple(&machine.get_triple());
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    let symbols: HashSet<&'static str> = tessera_runtime::abi::symbols().iter().map(|(n, _)| *n).collect();
    let count = plan.launches.iter().map(|(k, _)| k + 1).max().unwrap_or(0).max(kernels.len());
    if names.len() < count {
        return Err(backend(format!("{} kernel names for {count} kernels", names.len())));
    }
    timings.time("llvm: translate entry", || {
        inlined.iter().try_for_each(|&k| {
            function::translate(&ctx, &module, host, &kernels[k], &symbols, false)?;
            if always_inlined.get(k).copied().unwrap_or(false) {
                if let Some(f) = module.get_function(&crate::kernel_symbol(&kernels[k].name)) {
                    function::add_enum_attributes(
                        &ctx,
                        f,
                        inkwell::attributes::AttributeLoc::Function,
                        &["alwaysinline"],
                    );
                    // Its body is here to be inlined; its symbol is Cranelift's copy.
                    f.set_linkage(inkwell::module::Linkage::AvailableExternally);
                }
            }
            Ok(())
        })
    })?;
    let ptr = ctx.ptr_type(AddressSpace::default());
    let i64t = ctx.i64_type();
    let kernel_type = ctx.void_type().fn_type(&[ptr.into(), i64t.into(), i64t.into()], false);
    let callees: Vec<_> = names[..count]
        .iter()
        .map(|name| module.get_function(name).unwrap_or_else(|| module.add_function(name, kernel_type, None)))
        .collect();
    let runtime = entry::declare_runtime(&ctx, &module, EntryAbi::Jit, Vec::new());
    timings
        .time("llvm: translate entry", || entry::translate(&ctx, &module, host, ENTRY_NAME, plan, &callees, &runtime))
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
    timings.time("llvm: entry machine code", || object_of(&module, &machine)).map_err(backend)
}

/// The module's machine code as a relocatable object.
fn object_of(module: &inkwell::module::Module<'_>, machine: &TargetMachine) -> Result<Vec<u8>, String> {
    let buffer = machine.write_to_memory_buffer(module, FileType::Object).map_err(|e| format!("machine code: {e}"))?;
    Ok(buffer.as_slice().to_vec())
}

/// How hard a module is optimized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effort {
    /// `default<O3>` and aggressive instruction selection.
    Full,
    /// [`LIGHT_PIPELINE`] and cheaper code generation: for scalar kernels (one grid index, no
    /// loop), such as a loop's counter update or a scalar step of a search, where the O3
    /// pipeline spent tens of milliseconds (a scalar `sin` with its range reduction: 25 ms
    /// optimizing, 33 ms in code generation) on code that runs a few hundred instructions; and
    /// for small vectorized ones (`light`). It has no unroller: in the vectorized kernels
    /// unrolling would unroll the vector loops' scalar remainders, which doubled some
    /// modules' compile time (hand_tiled_small_tile_s8 47 -> 87 ms, model_softmax 36 -> 52 ms)
    /// for no faster code.
    Light,
    /// `default<O1>` without loop unrolling and cheaper code generation, for sequential
    /// kernels (`light`), whose loops its loop passes serve; they (top_k, argsort, sort) ran
    /// as fast without unrolling, within the noise of 3-4 alternating rounds.
    Sequential,
}

/// The most statements ([`crate::partition::work`]) one run of a program may execute in an
/// explicitly vectorized kernel's function ([`vectorized`]) for it to compile at light
/// effort: a few tens of microseconds of work, which O3's code ran at most 1-3 us a run faster
/// on the corpus (model_logsumexp 16 -> 19 us), for 10-220 ms more compile time per module
/// (hand_tiled_small_tile_s8's exponential and convert: 272 -> 47 ms). Kernels with scalar
/// loops stay at full effort whatever their size: O3's unrolling and vectorizers made a small
/// dot 5x and a serial max 14x faster.
const LIGHT_WORK: u64 = 1 << 19;

/// Whether `kernel` compiles at light effort: scalar work; sequential loops (a sort's
/// merges), where O3's vectorizers find nothing to do and spent three quarters of a sort
/// module's 100 ms (its merge ran as fast after `default<O1>`); or explicitly vectorized
/// loops with little work in a run (`run_work` statements in all, [`run_work`]).
fn light(kernel: &Kernel, run_work: u64) -> bool {
    crate::partition::is_scalar(kernel)
        || crate::partition::is_sequential(kernel)
        || (run_work <= LIGHT_WORK && vectorized(kernel))
}

/// Whether every innermost loop of `kernel` that iterates more than once translates as an
/// explicit vector loop (`vector.rs`): what is left for LLVM's unroller and vectorizers are
/// remainders. Its scalar loops (a small dot's or a window's, a serial reduction, a tiled
/// copy) are where O3's full unrolling and vectorizers made kernels several times faster.
fn vectorized(kernel: &Kernel) -> bool {
    use tessera_lower::kernel::Stmt;
    fn all(body: &[Stmt]) -> bool {
        body.iter().all(|s| match s {
            Stmt::Loop(l) if function::holds_loop(&l.body) => all(&l.body),
            Stmt::Loop(l) => l.end - l.start <= 1 || vector::vectorizes(l),
            Stmt::If { then_body, else_body, .. } => all(then_body) && all(else_body),
            _ => true,
        })
    }
    all(&kernel.body)
}

/// For each kernel, the statements its function executes in one run of `program`: the work of
/// one launch (the same for every kernel sharing the function: `representative`) times the
/// launches of all of them, and `u64::MAX` when one of them launches in a while loop (it may
/// run any number of times).
fn run_work(program: &Program, representative: &[usize]) -> Vec<u64> {
    let launches = program.launches_per_run();
    let mut runs: Vec<Option<u64>> = vec![Some(0); program.kernels.len()];
    for (k, &r) in representative.iter().enumerate() {
        if let Some(total) = runs.get_mut(r) {
            *total = total.zip(launches.get(k).copied().flatten()).map(|(a, b)| a.saturating_add(b));
        }
    }
    let per_function: Vec<u64> = runs
        .iter()
        .enumerate()
        .map(|(r, n)| match n {
            Some(n) if representative.get(r) == Some(&r) => {
                crate::partition::work(&program.kernels[r]).saturating_mul(*n)
            }
            _ => u64::MAX,
        })
        .collect();
    representative.iter().map(|&r| per_function.get(r).copied().unwrap_or(u64::MAX)).collect()
}

/// The modules to compile side by side, of the kernels `subset` names: those at full effort
/// split into one group per core of similar size, and those `light` names split the same way,
/// at light effort, sequential ones apart from the others (`Effort::Sequential`).
/// When dumping, each of the three kinds is one module, so that a dump holds every kernel in
/// three modules at most (`llvm`, `llvm-light`, `llvm-light-1`).
fn module_groups(kernels: &[Kernel], subset: &[usize], light: &[bool], dumping: bool) -> Vec<(Effort, Vec<usize>)> {
    let (light, full): (Vec<usize>, Vec<usize>) = subset.iter().partition(|&&i| light.get(i).copied().unwrap_or(false));
    let threads = if dumping { 1 } else { crate::partition::compile_threads() };
    let mut groups: Vec<(Effort, Vec<usize>)> = Vec::new();
    if !full.is_empty() || light.is_empty() {
        groups.extend(crate::partition::partition_of(kernels, &full, threads).into_iter().map(|g| (Effort::Full, g)));
    }
    let (sequential, light): (Vec<usize>, Vec<usize>) =
        light.iter().partition(|&&i| crate::partition::is_sequential(&kernels[i]));
    for (effort, part) in [(Effort::Light, light), (Effort::Sequential, sequential)] {
        if !part.is_empty() {
            groups.extend(crate::partition::partition_of(kernels, &part, threads).into_iter().map(|g| (effort, g)));
        }
    }
    groups
}

/// `kernels[i]` with `disjoint[i]` (false where missing) for each `i` of `group`, in order.
fn pick<'k>(kernels: &'k [Kernel], disjoint: &[bool], group: &[usize]) -> Vec<(&'k Kernel, bool)> {
    group.iter().map(|&i| (&kernels[i], disjoint.get(i).copied().unwrap_or(false))).collect()
}

/// Which kernels compile with their buffers known apart (`function::translate`'s `disjoint`):
/// those that loop and whose function (`representative`) no kernel sharing it launches with
/// buffers that overlap (`Program::disjoint_launches`). A scalar kernel has no loop for that
/// to help, and inlined into the entry's loops the scope declarations it leaves behind cost: a
/// 10,000-step scalar while loop ran 2x slower with them.
pub(crate) fn disjoint_kernels(program: &Program, representative: &[usize]) -> Vec<bool> {
    let launches = program.disjoint_launches();
    let mut per_function: Vec<bool> = program.kernels.iter().map(|k| !crate::partition::is_scalar(k)).collect();
    for (k, &r) in representative.iter().enumerate() {
        if let Some(d) = per_function.get_mut(r) {
            *d &= launches.get(k).copied().unwrap_or(false);
        }
    }
    representative.iter().map(|&r| per_function.get(r).copied().unwrap_or(false)).collect()
}

/// One LLVM module of `kernels`, in a context of its own (so modules compile on separate
/// threads), optimized and written as an object; with where its time went.
fn compile_module(
    host: &target::TargetCpu,
    kernels: &[(&Kernel, bool)],
    effort: Effort,
    dump: Option<(&Path, &str)>,
) -> Result<(Vec<u8>, Timings), CodegenError> {
    let backend = |message: String| CodegenError::Backend { tier: "llvm", kernel: "(module)".into(), message };
    let mut timings = Timings::new();
    let ctx = Context::create();
    let symbols: HashSet<&'static str> = tessera_runtime::abi::symbols().iter().map(|(n, _)| *n).collect();
    let (pipeline, level) = match effort {
        Effort::Full => ("default<O3>", OptimizationLevel::Aggressive),
        Effort::Light => (LIGHT_PIPELINE, OptimizationLevel::Less),
        Effort::Sequential => ("default<O1>", OptimizationLevel::Less),
    };
    let machine = host.object_machine(level)?;
    let module = ctx.create_module("tessera");
    module.set_triple(&machine.get_triple());
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    timings.time("llvm: translate", || {
        kernels
            .iter()
            .try_for_each(|&(kernel, disjoint)| function::translate(&ctx, &module, host, kernel, &symbols, disjoint))
    })?;
    timings.time("llvm: verify", || module.verify()).map_err(|e| backend(format!("invalid IR: {e}")))?;
    dump_ir(&module, dump);
    let options = pass_options();
    if effort == Effort::Sequential {
        options.set_loop_unrolling(false);
    }
    timings
        .time("llvm: optimize", || module.run_passes(pipeline, &machine, options))
        .map_err(|e| backend(format!("{pipeline} pipeline: {e}")))?;
    dump_optimized(&module, &machine, dump);
    let object = timings.time("llvm: machine code", || object_of(&module, &machine)).map_err(backend)?;
    Ok((object, timings))
}

/// The optimization pipeline's tuning (the unroller's limits are process-wide options set with
/// the target: see the module documentation).
pub(crate) fn pass_options() -> PassBuilderOptions {
    PassBuilderOptions::create()
}

/// Writes the module's IR before optimization to `dir/STEM.ll` for `dump = (dir, STEM)`, or
/// with no folder given and `TESSERA_DUMP_LLVM=FILE` set, to FILE (to reproduce an LLVM
/// problem with `opt-22 -passes='default<O3>'`). A dump that cannot be written is reported,
/// never fatal.
pub(crate) fn dump_ir(module: &inkwell::module::Module<'_>, dump: Option<(&Path, &str)>) {
    let path = match dump {
        Some((dir, stem)) => dir.join(format!("{stem}.ll")),
        None => match std::env::var_os("TESSERA_DUMP_LLVM") {
            Some(file) => file.into(),
            None => return,
        },
    };
    if let Err(e) = module.print_to_file(&path) {
        eprintln!("tessera: dump {}: {e}", path.display());
    }
}

/// Writes the optimized IR (`STEM-opt.ll`) and the assembly the target machine makes of it
/// (`STEM.s`) into `dir`, for `dump = (dir, STEM)` when given.
pub(crate) fn dump_optimized(
    module: &inkwell::module::Module<'_>,
    machine: &inkwell::targets::TargetMachine,
    dump: Option<(&Path, &str)>,
) {
    let Some((dir, stem)) = dump else { return };
    let ir = dir.join(format!("{stem}-opt.ll"));
    if let Err(e) = module.print_to_file(&ir) {
        eprintln!("tessera: dump {}: {e}", ir.display());
    }
    let asm = dir.join(format!("{stem}.s"));
    if let Err(e) = machine.write_to_file(module, inkwell::targets::FileType::Assembly, &asm) {
        eprintln!("tessera: dump {}: {e}", asm.display());
    }
}

#[cfg(test)]
mod tests {
    use tessera_hlo::{ArrayShape, ElementType};
    use tessera_lower::kernel::{IndexExpr, Kernel, KernelBuilder, MemType, Tail, Ty};
    use tessera_lower::program::{Buffer, BufferId, BufferKind, Launch, Step};
    use tessera_lower::Program;

    /// `out[i] = in[i]` over 64 elements, in a loop (`looping`, vectorized) or as one scalar
    /// step.
    fn copy(name: &str, looping: bool) -> Kernel {
        copy_of(name, 64, looping.then_some(16))
    }

    /// `out[i] = in[i]` over `n` elements: a loop of vector width `width`, or one scalar step.
    fn copy_of(name: &str, n: i64, width: Option<u32>) -> Kernel {
        let mut b = KernelBuilder::new(name, 1);
        let input = b.buffer("in", MemType::Scalar(Ty::F32), n, false);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), n, true);
        if let Some(width) = width {
            let v = b.begin_loop(0, n);
            let x = b.load(input, IndexExpr::var(v, 1));
            b.store(out, IndexExpr::var(v, 1), x);
            b.end_loop_vectorized(width, Tail::None);
        } else {
            let x = b.load(input, IndexExpr::constant(0));
            b.store(out, IndexExpr::constant(0), x);
        }
        b.finish()
    }

    fn program(launches: &[(usize, [u32; 2])]) -> Program {
        let buffer = |name: &str, kind| Buffer {
            name: name.into(),
            shape: ArrayShape::new(ElementType::F32, &[64]),
            bytes: 256,
            memory_space: 0,
            kind,
            offset: None,
        };
        Program {
            buffers: vec![buffer("p", BufferKind::Parameter(0)), buffer("r", BufferKind::Result(0))],
            // Kernels 0 and 1 have the same code, so they share kernel 0's function.
            kernels: vec![copy("a", true), copy("b", true), copy("c", false)],
            steps: launches
                .iter()
                .map(|&(kernel, args)| Step::Launch(Launch { kernel, args: args.map(BufferId).to_vec() }))
                .collect(),
            parameters: vec![BufferId(0)],
            results: vec![BufferId(1)],
            ..Default::default()
        }
    }

    #[test]
    fn buffers_are_known_apart_in_looping_kernels_whose_every_launch_is_disjoint() {
        let p = program(&[(0, [0, 1]), (1, [0, 1]), (2, [0, 1])]);
        let representative = crate::partition::representatives(&p.kernels);
        assert_eq!(representative, vec![0, 0, 2]);
        assert_eq!(super::disjoint_kernels(&p, &representative), vec![true, true, false], "a scalar kernel never");
        // Kernel 1 writing the buffer it reads spoils the function it shares with kernel 0.
        let p = program(&[(0, [0, 1]), (1, [1, 1]), (2, [0, 1])]);
        assert_eq!(super::disjoint_kernels(&p, &representative), vec![false, false, false]);
        let identity: Vec<usize> = (0..3).collect();
        assert_eq!(super::disjoint_kernels(&p, &identity), vec![true, false, false]);
    }

    /// `out[i + at] = in[i] * 3` (`accumulate`: `out[i + at] += in[i] * 3`) over `n` elements
    /// in a vector loop of 16 lanes, `out` holding `n + at` elements.
    fn scale(name: &str, n: i64, at: i64, accumulate: bool) -> Kernel {
        use tessera_lower::kernel::{BinOp, Const};
        let mut b = KernelBuilder::new(name, 1);
        let input = b.buffer("in", MemType::Scalar(Ty::F32), n, false);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), n + at, true);
        let v = b.begin_loop(0, n);
        let x = b.load(input, IndexExpr::var(v, 1));
        let three = b.constant(Const::F32(3f32.to_bits()));
        let mut y = b.binary(BinOp::Mul, Ty::F32, x, three);
        let at_index = tessera_lower::emit::index::add(&IndexExpr::var(v, 1), &IndexExpr::constant(at));
        if accumulate {
            let old = b.load(out, at_index.clone());
            y = b.binary(BinOp::Add, Ty::F32, old, y);
        }
        b.store(out, at_index, y);
        b.end_loop_vectorized(16, Tail::Peel);
        b.finish()
    }

    #[test]
    fn large_outputs_a_kernel_never_reads_are_stored_around_the_cache() {
        use super::streaming::streamed_buffers;
        let mut host = super::target::target_cpu(&crate::CpuTarget::host().resolve("llvm").unwrap()).unwrap();
        if !host.triple.starts_with("x86_64") {
            assert_eq!(host.streaming_min_bytes, None, "only x86-64 streams");
            return;
        }
        assert!(host.streaming_min_bytes.unwrap() >= 1 << 20, "at least a cache's size");
        // 4 KiB stands in for the last-level cache, so the test stays small.
        host.streaming_min_bytes = Some(4096);
        let n = 4099; // a scalar remainder of 3
        let kernels =
            vec![scale("aligned", n, 0, false), scale("shifted", n, 1, false), scale("read_back", n, 0, true)];
        assert_eq!(streamed_buffers(&kernels[0], &host), vec![false, true]);
        assert_eq!(streamed_buffers(&kernels[1], &host), vec![false, true]);
        assert_eq!(streamed_buffers(&kernels[2], &host), vec![false, false], "a buffer the kernel reads stays cached");
        assert_eq!(streamed_buffers(&scale("small", 1000, 0, false), &host), vec![false, false]);

        let dir = std::env::temp_dir().join(format!("tessera-streaming-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let groups = vec![(super::Effort::Full, vec![0, 1, 2])];
        let (objects, _) = super::compile_groups(&host, &kernels, &[true; 3], &groups, Some(&dir)).unwrap();
        let asm = std::fs::read_to_string(dir.join("llvm.s")).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        let function = |name: &str| {
            let start = asm.find(&format!("{}:", crate::kernel_symbol(name))).unwrap();
            let end = asm[start..].find(".Lfunc_end").map_or(asm.len(), |e| start + e);
            asm[start..end].to_string()
        };
        for name in ["aligned", "shifted"] {
            let code = function(name);
            assert!(code.contains("vmovntps") && code.contains("sfence"), "{name} streams and fences:\n{code}");
        }
        let code = function("read_back");
        assert!(!code.contains("vmovnt") && !code.contains("sfence"), "read_back stores as usual:\n{code}");

        let code = super::ObjectCode {
            objects,
            kernels: kernels.iter().map(|k| crate::kernel_symbol(&k.name)).collect(),
            entry: None,
        };
        let (compiled, _) = code.load(&mut crate::Timings::new()).unwrap();
        let input: Vec<f32> = (0..n).map(|i| i as f32 - 7.5).collect();
        // Outputs start on a cache line, as the runtime's buffers do, so "aligned" takes the
        // streaming path at run time (where a misaligned streaming store would fault) and
        // "shifted", one element on, never does.
        #[derive(Clone, Copy)]
        #[repr(align(64))]
        // Only its size and alignment matter: the kernel writes the floats through a pointer.
        #[allow(dead_code)]
        struct Line([f32; 16]);
        for (k, at) in [(0, 0usize), (1, 1), (2, 0)] {
            let len = n as usize + at;
            let mut lines = vec![Line([1.0; 16]); len.div_ceil(16)];
            let out = lines.as_mut_ptr() as *mut f32;
            let table = [input.as_ptr() as *mut u8, out as *mut u8];
            // SAFETY: the table holds the kernel's two buffers at (at least) their declared sizes.
            unsafe { (compiled.functions[k])(table.as_ptr(), 0, 1) };
            // SAFETY: `lines` holds at least `len` floats.
            let out = unsafe { std::slice::from_raw_parts(out, len) };
            let base = if k == 2 { 1.0 } else { 0.0 };
            let want: Vec<f32> = (0..at).map(|_| 1.0).chain(input.iter().map(|x| base + x * 3.0)).collect();
            assert_eq!(out, &want[..], "{}", kernels[k].name);
        }
    }

    #[test]
    fn kernels_with_little_work_a_run_compile_light_unless_a_loop_launches_them() {
        let mut p = program(&[(0, [0, 1]), (1, [0, 1]), (2, [0, 1])]);
        let representative = crate::partition::representatives(&p.kernels);
        // A copy of 64 elements: its loop and 64 iterations of a load and a store.
        let copy_work = 1 + 64 * 2;
        assert_eq!(super::run_work(&p, &representative), vec![2 * copy_work, 2 * copy_work, 2]);
        let light = |p: &Program, k: usize, w: u64| super::light(&p.kernels[k], w);
        assert!(light(&p, 0, 2 * copy_work));
        // Launched in a while loop, a kernel (and the one sharing its function) may run any
        // number of times a run.
        p.buffers.push(Buffer {
            name: "pred".into(),
            shape: ArrayShape::new(ElementType::Pred, &[]),
            bytes: 1,
            memory_space: 0,
            kind: BufferKind::Temp,
            offset: Some(0),
        });
        let launch = |kernel| Step::Launch(Launch { kernel, args: vec![BufferId(0), BufferId(1)] });
        p.steps = vec![launch(0), Step::While { cond: vec![], pred: BufferId(2), body: vec![launch(1)] }, launch(2)];
        assert_eq!(p.launches_per_run(), vec![Some(1), None, Some(1)]);
        assert_eq!(super::run_work(&p, &representative), vec![u64::MAX, u64::MAX, 2]);
        assert!(!light(&p, 0, u64::MAX));
        assert!(light(&p, 2, u64::MAX), "a scalar kernel is light however often it runs");
        // A copy of 2^19 elements has more work than a light kernel's in one launch.
        let big = copy_of("big", 1 << 19, Some(16));
        let work = crate::partition::work(&big);
        assert!(super::vectorized(&big) && work > super::LIGHT_WORK && !super::light(&big, work));
        // A small scalar loop is left to O3's unroller and vectorizers.
        let scalar_loop = copy_of("scalar_loop", 64, Some(1));
        assert!(!super::vectorized(&scalar_loop) && !super::light(&scalar_loop, copy_work));
    }

    /// `out[0] = in[0] + 1 + 1 + ...` (`adds` additions): a scalar kernel too large to inline.
    fn scalar_chain(name: &str, adds: usize) -> Kernel {
        use tessera_lower::kernel::{BinOp, Const};
        let mut b = KernelBuilder::new(name, 1);
        let input = b.buffer("in", MemType::Scalar(Ty::F32), 64, false);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), 64, true);
        let mut x = b.load(input, IndexExpr::constant(0));
        let one = b.constant(Const::F32(1f32.to_bits()));
        for _ in 0..adds {
            x = b.binary(BinOp::Add, Ty::F32, x, one);
        }
        b.store(out, IndexExpr::constant(0), x);
        b.finish()
    }

    #[test]
    fn small_sequential_and_scalar_kernels_compile_with_cranelift() {
        let chain = scalar_chain("chain", 150);
        let work = crate::partition::work(&chain);
        assert!(crate::partition::statements(&chain.body) > crate::partition::INLINED_STATEMENTS);
        assert!(super::handed_over(&chain, work));
        assert!(!super::handed_over(&chain, u64::MAX), "not when a while loop launches it");
        assert!(!super::handed_over(&copy("a", true), 2 * 129), "a vectorized kernel stays with LLVM");

        let mut p = program(&[(0, [0, 1]), (3, [0, 1])]);
        p.kernels.push(chain);
        let dir = std::env::temp_dir().join(format!("tessera-handed-over-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (_, objects, _) = super::program_objects(&p, &crate::CpuTarget::host(), Some(&dir)).unwrap();
        let clif = std::fs::read_to_string(dir.join("cranelift.clif")).unwrap();
        let llvm: String = ["llvm.ll", "llvm-light.ll", "llvm-entry.ll"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
            .collect();
        std::fs::remove_dir_all(&dir).ok();
        assert!(clif.contains("; kernel chain\n") && !clif.contains("; kernel a\n"), "{clif}");
        assert!(
            llvm.contains("define void @tessera.kernel.a(") && !llvm.contains("define void @tessera.kernel.chain(")
        );
        // The objects link together: the entry's calls and every kernel's symbol resolve, and
        // Cranelift's kernel runs.
        let (compiled, _) = objects.load_program(crate::Tier::Llvm, &mut crate::Timings::new()).unwrap();
        let input = [2.5f32; 64];
        let mut out = [0f32; 64];
        let table = [input.as_ptr() as *mut u8, out.as_mut_ptr() as *mut u8];
        // SAFETY: the table holds the kernel's two buffers at their declared sizes.
        unsafe { (compiled.functions[3])(table.as_ptr(), 0, 1) };
        assert_eq!(out[0], 152.5);
    }

    /// A blocked transpose's rows go through registers (`transpose.rs`) when its launches are
    /// disjoint, and are read lane by lane otherwise; both give the permutation, including the
    /// outer loop's remainder (67 rows: eight blocks of 8 and 3 more) and the jagged last block
    /// of lanes (1000 = 62 x 16 + 8), which keeps the lane-by-lane form.
    #[test]
    fn transposes_move_rows_through_registers() {
        let text = "HloModule t, entry_computation_layout={(f32[1000,67]{1,0})->f32[67,1000]{1,0}}\n\n\
                    ENTRY main {\n  x = f32[1000,67]{1,0} parameter(0)\n  \
                    ROOT t = f32[67,1000]{1,0} transpose(x), dimensions={1,0}\n}\n";
        let module = tessera_hlo::text::parse_module(text).unwrap();
        let program = tessera_lower::lower_module(&module, &tessera_lower::LowerOptions::default()).unwrap();
        let kernels = program.kernels.clone();
        assert_eq!(kernels.len(), 1);
        let host = super::target::target_cpu(&crate::CpuTarget::host().resolve("llvm").unwrap()).unwrap();
        let input: Vec<f32> = (0..67_000).map(|i| i as f32 * 0.5 - 3.0).collect();
        for disjoint in [true, false] {
            let dir = std::env::temp_dir().join(format!("tessera-transpose-{}-{disjoint}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let groups = vec![(super::Effort::Full, vec![0])];
            let (objects, _) = super::compile_groups(&host, &kernels, &[disjoint], &groups, Some(&dir)).unwrap();
            let asm = std::fs::read_to_string(dir.join("llvm.s")).unwrap();
            std::fs::remove_dir_all(&dir).ok();
            if host.triple.starts_with("x86_64") && host.vector_bytes >= 32 {
                assert_eq!(asm.contains("vunpcklps"), disjoint, "rows in registers only when disjoint:\n{asm}");
            }
            let code = super::ObjectCode {
                objects,
                kernels: kernels.iter().map(|k| crate::kernel_symbol(&k.name)).collect(),
                entry: None,
            };
            let (compiled, _) = code.load(&mut crate::Timings::new()).unwrap();
            let mut out = vec![0f32; 67_000];
            let table = [input.as_ptr() as *mut u8, out.as_mut_ptr() as *mut u8];
            // SAFETY: the table holds the kernel's two buffers at their declared sizes.
            unsafe { (compiled.functions[0])(table.as_ptr(), 0, kernels[0].grid.extent) };
            for i in 0..67 {
                for j in 0..1000 {
                    assert_eq!(out[i * 1000 + j], input[j * 67 + i], "t[{i}, {j}] (disjoint {disjoint})");
                }
            }
        }
    }
}

/// The optimization of a light module (scalar kernels and small explicitly vectorized ones):
/// what their code needs of `default<O1>`: the always-inliner (each kernel's `noalias` body),
/// scalar replacement, CSE, instruction combining, CFG cleanup, and on loops rotation,
/// invariant code motion (the vector loops' address arithmetic), induction variable
/// simplification and deletion (tiny loops of a padded copy). `default<O1>` spent 5.3 ms on
/// hand_tiled_relayout_copy's one copy kernel in steady state, this 3.1 ms, for the same
/// machine code; over the corpus the compile time geomean fell 7% and the run time geomean
/// stayed (0.999). Without the loop passes (1.4 ms) a padded copy's tiny loops kept their
/// control flow and ran 30% slower.
const LIGHT_PIPELINE: &str = "always-inline,function(sroa,early-cse<memssa>,instcombine<no-verify-fixpoint>,\
    simplifycfg,loop(loop-rotate),loop-mssa(licm),simplifycfg,loop(indvars,loop-deletion),\
    instcombine<no-verify-fixpoint>,simplifycfg)";
