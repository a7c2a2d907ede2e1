//! JIT compilation with MCJIT and the owner of the resulting machine code.

use std::mem::ManuallyDrop;

use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::module::Module;
use inkwell::OptimizationLevel;

use crate::{CodegenError, KernelFn};

/// Owns the LLVM context and the execution engine (which owns the module and the machine code
/// the kernel pointers point into). Dropping it frees the code.
pub struct LlvmCode {
    /// Holds the context's lifetime erased to `'static`: the engine only refers to the context
    /// through LLVM's own pointers, and `Drop` disposes of it before the context.
    engine: ManuallyDrop<ExecutionEngine<'static>>,
    context: ManuallyDrop<Box<Context>>,
}

// SAFETY: LLVM contexts and engines may be used from any thread as long as no two threads use
// them at once. After `compile` returns, nothing calls into either again: the kernels run
// machine code that touches neither, and the only remaining use is `Drop`, which takes
// `&mut self` (so no other reference can exist). The inkwell engine's internal `Rc` has no
// other clone alive: the module that held one is dropped before `LlvmCode` is built.
unsafe impl Send for LlvmCode {}
// SAFETY: a shared `&LlvmCode` exposes no method at all, so sharing it cannot race.
unsafe impl Sync for LlvmCode {}

impl Drop for LlvmCode {
    fn drop(&mut self) {
        // SAFETY: both fields are dropped exactly once, here, engine (and with it the module
        // and the code) first, because it was created inside the context.
        unsafe {
            ManuallyDrop::drop(&mut self.engine);
            ManuallyDrop::drop(&mut self.context);
        }
    }
}

impl LlvmCode {
    /// Packages an engine with the context it was created in.
    ///
    /// # Safety
    /// `engine` must have been created from a module of `context`, and nothing else created
    /// from `context` (modules, builders, values, other engine clones) may still be alive.
    pub unsafe fn new(engine: ExecutionEngine<'static>, context: Box<Context>) -> LlvmCode {
        LlvmCode { engine: ManuallyDrop::new(engine), context: ManuallyDrop::new(context) }
    }
}

/// JIT-compiles an optimized module at code-generation `level`: maps every runtime symbol the module still declares to
/// its address, then returns the engine and the address of each named function.
pub fn jit<'ctx>(
    module: &Module<'ctx>,
    names: &[String],
    symbols: &[(&str, *const u8)],
    level: OptimizationLevel,
) -> Result<(ExecutionEngine<'ctx>, Vec<KernelFn>), CodegenError> {
    let backend =
        |kernel: &str, message: String| CodegenError::Backend { tier: "llvm", kernel: kernel.to_string(), message };
    let engine = module.create_jit_execution_engine(level).map_err(|e| backend("(module)", format!("MCJIT: {e}")))?;
    // Looked up after optimization: passes delete declarations that became unused, and a
    // mapping of a deleted function would dangle.
    for (name, address) in symbols {
        if let Some(function) = module.get_function(name) {
            engine.add_global_mapping(&function, *address as usize);
        }
    }
    let mut functions = Vec::with_capacity(names.len());
    for name in names {
        let address = engine.get_function_address(name).map_err(|e| backend(name, format!("no machine code: {e}")))?;
        if address == 0 {
            return Err(backend(name, "MCJIT returned a null function address".to_string()));
        }
        // SAFETY: the function was generated with exactly the `KernelFn` signature
        // (`void(ptr, i64, i64)`, C calling convention).
        functions.push(unsafe { std::mem::transmute::<usize, KernelFn>(address) });
    }
    Ok((engine, functions))
}
