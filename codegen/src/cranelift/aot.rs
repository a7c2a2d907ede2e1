//! The Cranelift tier's object files: the kernels as local functions of an `ObjectModule`,
//! the constants as local read-only data, and the entry function that runs the
//! [`EntryPlan`] (emitted by `entry.rs`, as the JIT's; see `crate::aot`).

use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::FunctionBuilderContext;
use cranelift_module::{DataDescription, Linkage, Module};
use cranelift_object::{ObjectBuilder, ObjectModule};
use tessera_lower::Program;

use super::{define, entry, function, isa_builder, kernel_signature, TIER};
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
    let target_err = |message: String| CodegenError::Target { tier: TIER, message };
    let mut flags = settings::builder();
    for (name, value) in [("opt_level", "speed"), ("is_pic", "true"), ("enable_verifier", "true")] {
        flags.set(name, value).map_err(|e| target_err(format!("setting {name}={value}: {e}")))?;
    }
    let isa = isa_builder(target)?.finish(settings::Flags::new(flags)).map_err(|e| target_err(e.to_string()))?;
    let builder = ObjectBuilder::new(isa, symbol.as_bytes().to_vec(), cranelift_module::default_libcall_names())
        .map_err(|e| target_err(e.to_string()))?;
    let mut module = ObjectModule::new(builder);
    let backend = |kernel: &str, message: String| CodegenError::Backend { tier: TIER, kernel: kernel.into(), message };

    let symbols = tessera_runtime::abi::symbols().into_iter().map(|(name, _)| name).collect::<Vec<_>>();
    let sig = kernel_signature(&module);
    let mut ctx = module.make_context();
    let mut builder_ctx = FunctionBuilderContext::new();
    let mut kernels = Vec::with_capacity(program.kernels.len());
    let mut dump = options.dump_dir.as_ref().map(|dir| (dir.join("cranelift.clif"), String::new()));
    for kernel in &program.kernels {
        // Anonymous: local to the object, so kernels of several objects never clash.
        let id = module.declare_anonymous_function(&sig).map_err(|e| backend(&kernel.name, e.to_string()))?;
        module.clear_context(&mut ctx);
        ctx.func.signature = sig.clone();
        function::translate(kernel, &mut module, &mut ctx, &mut builder_ctx, &symbols)
            .map_err(|f| f.for_kernel(&kernel.name))?;
        ctx.set_disasm(dump.is_some());
        define(&mut module, id, &mut ctx).map_err(|m| backend(&kernel.name, m))?;
        if let Some((_, text)) = dump.as_mut() {
            let asm = ctx.compiled_code().and_then(|c| c.vcode.clone()).unwrap_or_default();
            text.push_str(&format!("; kernel {}\n{}\n; machine code\n{asm}\n", kernel.name, ctx.func.display()));
        }
        kernels.push(id);
    }
    if let Some((path, text)) = dump {
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("tessera: dump {}: {e}", path.display());
        }
    }

    let mut constants = Vec::with_capacity(plan.constants.len());
    for i in 0..plan.constants.len() {
        let bytes =
            plan.constant_bytes(program, i).ok_or_else(|| backend(symbol, format!("constant {i} has no bytes")))?;
        let id = module
            .declare_data(&format!("{symbol}.const{i}"), Linkage::Local, false, false)
            .map_err(|e| backend(symbol, e.to_string()))?;
        let mut data = DataDescription::new();
        data.define(bytes.to_vec().into_boxed_slice());
        data.set_align(Program::ALIGNMENT);
        module.define_data(id, &data).map_err(|e| backend(symbol, e.to_string()))?;
        constants.push(id);
    }

    module.clear_context(&mut ctx);
    let entry_id = module
        .declare_function(symbol, Linkage::Export, &entry::entry_signature(&module))
        .map_err(|e| backend(symbol, e.to_string()))?;
    let runtime = entry::declare_runtime(&mut module, EntryAbi::Object { parallel: options.parallel }, constants)
        .map_err(|m| backend(symbol, m))?;
    let kernels = entry::Kernels { functions: &kernels, ir: &program.kernels, symbols: &symbols };
    entry::translate(plan, &mut module, &kernels, &runtime, &mut ctx, &mut builder_ctx)
        .map_err(|m| backend(symbol, m))?;
    define(&mut module, entry_id, &mut ctx).map_err(|m| backend(symbol, m))?;
    module.finish().emit().map_err(|e| backend(symbol, format!("writing the object: {e}")))
}
