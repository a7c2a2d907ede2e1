//! The LLVM tier (DESIGN.md section 6): kernels become LLVM functions tuned for the target CPU
//! (the host unless a [`CpuTarget`] says otherwise), optimized with the `default<O3>` pipeline and JIT-compiled with MCJIT.

pub(crate) mod aot;
mod engine;
mod function;
mod index;
mod memory;
mod ops;
mod target;
mod vector;

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use inkwell::context::Context;
use inkwell::passes::PassBuilderOptions;

use tessera_lower::kernel::Kernel;

pub use engine::LlvmCode;

use crate::{CodegenError, CompiledKernels, CpuTarget};

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
    let start = Instant::now();
    let host = target::target_cpu(&cpu.resolve("llvm")?)?;
    let context = Box::new(Context::create());
    // SAFETY: the reference outlives every use: `build` drops all it creates from the context
    // except the engine, which `LlvmCode` disposes of before the context.
    let ctx: &'static Context = unsafe { &*(&*context as *const Context) };
    let (engine, functions) = build(ctx, &host, kernels, dump)?;
    // SAFETY: `engine` comes from a module of `context`, and `build` returned nothing else
    // made from it.
    let code = unsafe { LlvmCode::new(engine, context) };
    Ok(CompiledKernels { functions, code: Box::new(code), compile_time: start.elapsed() })
}

fn build(
    ctx: &'static Context,
    host: &target::TargetCpu,
    kernels: &[Kernel],
    dump: Option<&Path>,
) -> Result<(inkwell::execution_engine::ExecutionEngine<'static>, Vec<crate::KernelFn>), CodegenError> {
    let backend = |message: String| CodegenError::Backend { tier: "llvm", kernel: "(module)".into(), message };
    let symbols = tessera_runtime::abi::symbols();
    let names: HashSet<&'static str> = symbols.iter().map(|(n, _)| *n).collect();
    let machine = host.machine()?;
    let module = ctx.create_module("tessera");
    module.set_triple(&machine.get_triple());
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    for kernel in kernels {
        function::translate(ctx, &module, host, kernel, &names)?;
    }
    module.verify().map_err(|e| backend(format!("invalid IR: {e}")))?;
    dump_ir(&module, dump);
    module
        .run_passes("default<O3>", &machine, PassBuilderOptions::create())
        .map_err(|e| backend(format!("O3 pipeline: {e}")))?;
    dump_optimized(&module, &machine, dump);
    let kernel_names: Vec<String> = kernels.iter().map(|k| k.name.clone()).collect();
    let (engine, functions) = engine::jit(&module, &kernel_names, &symbols)?;
    // The module's own clone of the engine goes with it, leaving `engine` the only one.
    drop(module);
    Ok((engine, functions))
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
