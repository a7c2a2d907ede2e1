//! Small scalar kernels copied into the entry at the sites that call them directly: a step of
//! a scalar loop (a binary search's compare and selects) then runs in the loop's own code,
//! without a call, a buffer table read back through memory and a grid loop per step. The
//! LLVM tier does the same by compiling such kernels into the entry's module
//! (`llvm::program_objects`); here Cranelift's inliner copies the kernel's IR, translated but
//! not yet compiled, into the entry before the entry compiles.
//!
//! The kernel still compiles on its own: launches through the runtime (threaded or profiled
//! ones) call it by address.

use std::borrow::Cow;
use std::collections::HashMap;

use cranelift_codegen::inline::{Inline, InlineCommand};
use cranelift_codegen::ir::{ExternalName, FuncRef, Function, Inst, Opcode, Value};
use cranelift_codegen::Context;
use cranelift_module::FuncId;
use tessera_lower::kernel::Kernel;

use crate::partition;

/// The most kernel-IR statements a scalar kernel may have to be copied into the entry: the
/// bound LLVM's entry module uses for the kernels it may inline (`INLINED_STATEMENTS`).
const INLINED_STATEMENTS: usize = 100;

/// Whether `kernel` is copied into the entry where the entry calls it directly.
pub(crate) fn inlinable(kernel: &Kernel) -> bool {
    partition::is_scalar(kernel) && partition::statements(&kernel.body) <= INLINED_STATEMENTS
}

/// The translated bodies of the inlinable kernels, by function.
#[derive(Default)]
pub(crate) struct ScalarKernels<'a> {
    bodies: HashMap<u32, &'a Function>,
}

impl<'a> ScalarKernels<'a> {
    pub(crate) fn add(&mut self, id: FuncId, body: &'a Function) {
        self.bodies.insert(id.as_u32(), body);
    }

    /// Copies the kernels into `entry` at each direct call of one.
    pub(crate) fn inline_into(&mut self, entry: &mut Context) -> Result<(), String> {
        if self.bodies.is_empty() {
            return Ok(());
        }
        entry.inline(self).map(|_| ()).map_err(|e| format!("inlining scalar kernels: {e}"))
    }
}

impl Inline for &mut ScalarKernels<'_> {
    fn inline(
        &mut self,
        caller: &Function,
        _inst: Inst,
        _opcode: Opcode,
        callee: FuncRef,
        _args: &[Value],
    ) -> InlineCommand<'_> {
        // cranelift-module names a declared function as user name (0, its FuncId).
        let ExternalName::User(name) = caller.dfg.ext_funcs[callee].name else {
            return InlineCommand::KeepCall;
        };
        let name = &caller.params.user_named_funcs()[name];
        match self.bodies.get(&name.index) {
            Some(body) if name.namespace == 0 => {
                InlineCommand::Inline { callee: Cow::Borrowed(*body), visit_callee: false }
            }
            _ => InlineCommand::KeepCall,
        }
    }
}
