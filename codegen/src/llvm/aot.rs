//! The LLVM tier's object files: the kernels as internal functions, the constants as private
//! read-only globals, and the entry function that runs the [`EntryPlan`] (emitted by
//! `entry.rs`, as the JIT's; see `crate::aot`), optimized together with `default<O3>` and
//! written for the target machine.

use std::collections::HashSet;

use inkwell::context::Context;
use inkwell::module::Linkage;
use inkwell::targets::FileType;
use inkwell::values::GlobalValue;
use tessera_lower::Program;

use super::{entry, function, target};
use crate::aot::AotOptions;
use crate::entry::{EntryAbi, EntryPlan};
use crate::{CodegenError, ResolvedTarget};

/// The object's bytes.
pub(crate) fn object(
    program: &Program,
    plan: &EntryPlan,
    target: &ResolvedTarget,
    options: &AotOptions,
) -> Result<Vec<u8>, CodegenError> {
    let symbol = options.symbol.as_str();
    let backend = |message: String| CodegenError::Backend { tier: "llvm", kernel: symbol.to_string(), message };
    let cpu = target::target_cpu(target)?;
    let machine = cpu.object_machine(inkwell::OptimizationLevel::Aggressive)?;
    let ctx = Context::create();
    let module = ctx.create_module(symbol);
    module.set_triple(&machine.get_triple());
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    let names: HashSet<&'static str> = tessera_runtime::abi::symbols().iter().map(|(n, _)| *n).collect();
    let mut kernels = Vec::with_capacity(program.kernels.len());
    let disjoint = super::disjoint_kernels(program, &(0..program.kernels.len()).collect::<Vec<_>>());
    for (kernel, &disjoint) in program.kernels.iter().zip(&disjoint) {
        function::translate(&ctx, &module, &cpu, kernel, &names, disjoint)?;
        let f = module
            .get_function(&crate::kernel_symbol(&kernel.name))
            .ok_or_else(|| backend(format!("kernel '{}' vanished", kernel.name)))?;
        // Internal: kernels of several objects linked into one program never clash.
        f.set_linkage(Linkage::Internal);
        kernels.push(f);
    }
    let constants = (0..plan.constants.len())
        .map(|i| {
            let bytes = plan.constant_bytes(program, i).ok_or_else(|| backend(format!("constant {i} has no bytes")))?;
            let g =
                module.add_global(ctx.i8_type().array_type(bytes.len() as u32), None, &format!("{symbol}.const{i}"));
            g.set_initializer(&ctx.const_string(bytes, false));
            g.set_constant(true);
            g.set_linkage(Linkage::Private);
            g.set_alignment(Program::ALIGNMENT as u32);
            Ok(g)
        })
        .collect::<Result<Vec<GlobalValue>, CodegenError>>()?;
    let runtime = entry::declare_runtime(&ctx, &module, EntryAbi::Object { parallel: options.parallel }, constants);
    entry::translate(&ctx, &module, &cpu, symbol, plan, &kernels, &runtime).map_err(backend)?;

    module.verify().map_err(|e| backend(format!("invalid IR: {e}")))?;
    let dump = options.dump_dir.as_deref().map(|dir| (dir, "llvm"));
    super::dump_ir(&module, dump);
    module
        .run_passes("default<O3>", &machine, super::pass_options())
        .map_err(|e| backend(format!("O3 pipeline: {e}")))?;
    super::dump_optimized(&module, &machine, dump);
    let buffer = machine
        .write_to_memory_buffer(&module, FileType::Object)
        .map_err(|e| backend(format!("writing the object: {e}")))?;
    Ok(buffer.as_slice().to_vec())
}
