//! Small scalar kernels copied into the entry at the sites that call them directly: a step of
//! a scalar loop (a binary search's compare and selects) then runs in the loop's own code,
//! without a call, a buffer table and a grid loop per step. The LLVM tier does the same by
//! compiling such kernels into the entry's module (`llvm::program_objects`); here Cranelift's
//! inliner copies a translation of the kernel into the entry before the entry compiles.
//!
//! That translation takes its buffers' addresses as parameters ([`BufferAbi::Addresses`]), and
//! the entry calls it with the addresses as arguments: inlined, each buffer access then uses
//! the address the entry computed. Through the table instead, each access would load the
//! address back from the stack slot the entry had just written, because Cranelift forwards a
//! store to a load only when it is the latest store.
//!
//! The kernel still compiles on its own, with the table: launches through the runtime
//! (threaded or profiled ones) call it by address.

use std::borrow::Cow;
use std::collections::HashMap;

use cranelift_codegen::inline::{Inline, InlineCommand};
use cranelift_codegen::ir::{
    types, AbiParam, ExtFuncData, ExternalName, FuncRef, Function, Inst, Opcode, Signature, UserExternalName, Value,
};
use cranelift_codegen::Context;
use cranelift_frontend::FunctionBuilderContext;
use cranelift_module::Module;
use tessera_lower::kernel::Kernel;

use super::function::{self, BufferAbi};
use crate::partition;

/// The most kernel-IR statements a scalar kernel may have to be copied into the entry: the
/// bound LLVM's entry module uses for the kernels it may inline (`INLINED_STATEMENTS`).
const INLINED_STATEMENTS: usize = 100;

/// The namespace of the names the entry calls the copies by. cranelift-module names the
/// functions it declares in namespace 0; these names are never declared there, so a call the
/// inliner left would fail to compile rather than call something else.
const NAMESPACE: u32 = 1;

/// Whether `kernel` is copied into the entry where the entry calls it directly.
pub(crate) fn inlinable(kernel: &Kernel) -> bool {
    partition::is_scalar(kernel) && partition::statements(&kernel.body) <= INLINED_STATEMENTS
}

/// The [`BufferAbi::Addresses`] translations of a program's inlinable kernels, by the index
/// of the kernel in the program (kernels with the same code share one).
#[derive(Default)]
pub(crate) struct ScalarKernels {
    bodies: Vec<Function>,
    by_kernel: HashMap<u32, usize>,
}

impl ScalarKernels {
    /// Translates `kernel`, the program's kernel `index`, when it is inlinable.
    pub(crate) fn add(
        &mut self,
        index: usize,
        kernel: &Kernel,
        module: &mut dyn Module,
        builder_ctx: &mut FunctionBuilderContext,
        symbols: &[&'static str],
    ) -> Result<(), String> {
        if !inlinable(kernel) {
            return Ok(());
        }
        let index = u32::try_from(index).map_err(|_| "more than 2^32 kernels")?;
        let mut ctx = Context::new();
        ctx.func.signature = signature(kernel, module);
        function::translate(kernel, BufferAbi::Addresses, module, &mut ctx, builder_ctx, symbols)
            .map_err(|f| f.for_kernel(&kernel.name).to_string())?;
        self.by_kernel.insert(index, self.bodies.len());
        self.bodies.push(ctx.func);
        Ok(())
    }

    /// Kernel `index` runs the same code as kernel `of`: it shares `of`'s copy, if any.
    pub(crate) fn share(&mut self, index: usize, of: usize) {
        let (Ok(index), Ok(of)) = (u32::try_from(index), u32::try_from(of)) else { return };
        if let Some(&body) = self.by_kernel.get(&of) {
            self.by_kernel.insert(index, body);
        }
    }

    fn body(&self, index: u32) -> Option<&Function> {
        self.by_kernel.get(&index).map(|&b| &self.bodies[b])
    }

    /// The function `caller` calls kernel `index`'s copy by (with the buffers' addresses and
    /// the grid range), when it has one.
    pub(crate) fn callee(&self, caller: &mut Function, index: usize) -> Option<FuncRef> {
        let index = u32::try_from(index).ok()?;
        let body = self.body(index)?;
        let name = caller.declare_imported_user_function(UserExternalName::new(NAMESPACE, index));
        let signature = caller.import_signature(body.signature.clone());
        Some(caller.import_function(ExtFuncData {
            name: ExternalName::User(name),
            signature,
            colocated: true,
            patchable: false,
        }))
    }

    /// Copies the kernels into `entry` at each call of one.
    pub(crate) fn inline_into(&self, entry: &mut Context) -> Result<(), String> {
        if self.bodies.is_empty() {
            return Ok(());
        }
        entry.inline(self).map(|_| ()).map_err(|e| format!("inlining scalar kernels: {e}"))
    }
}

/// `(buffer 0, ..., buffer n-1, grid_lo, grid_hi)`.
fn signature(kernel: &Kernel, module: &dyn Module) -> Signature {
    let mut sig = module.make_signature();
    let ptr = module.target_config().pointer_type();
    sig.params.extend(kernel.buffers.iter().map(|_| AbiParam::new(ptr)));
    sig.params.extend([AbiParam::new(types::I64), AbiParam::new(types::I64)]);
    sig
}

impl Inline for &ScalarKernels {
    fn inline(
        &mut self,
        caller: &Function,
        _inst: Inst,
        _opcode: Opcode,
        callee: FuncRef,
        _args: &[Value],
    ) -> InlineCommand<'_> {
        let ExternalName::User(name) = caller.dfg.ext_funcs[callee].name else {
            return InlineCommand::KeepCall;
        };
        let name = &caller.params.user_named_funcs()[name];
        match self.body(name.index) {
            Some(body) if name.namespace == NAMESPACE => {
                InlineCommand::Inline { callee: Cow::Borrowed(body), visit_callee: false }
            }
            _ => InlineCommand::KeepCall,
        }
    }
}

#[cfg(test)]
mod tests {
    use cranelift_codegen::ir::{InstBuilder, InstructionData, StackSlotData, StackSlotKind};
    use cranelift_frontend::FunctionBuilder;
    use tessera_lower::kernel::{BinOp, CmpOp, IndexExpr, KernelBuilder, MemType, Ty};

    use super::*;
    use crate::target::CpuTarget;

    /// `y[0] = a[0] < b[0] ? a[0] + b[0] : b[0]`: a binary search's kind of step.
    fn step() -> Kernel {
        let mut k = KernelBuilder::new("step", 1);
        let a = k.buffer("a", MemType::Scalar(Ty::I32), 1, false);
        let b = k.buffer("b", MemType::Scalar(Ty::I32), 1, false);
        let y = k.buffer("y", MemType::Scalar(Ty::I32), 1, true);
        let x = k.load(a, IndexExpr::constant(0));
        let z = k.load(b, IndexExpr::constant(0));
        let lt = k.cmp(CmpOp::Slt, Ty::I32, x, z);
        let s = k.binary(BinOp::Add, Ty::I32, x, z);
        let r = k.select(Ty::I32, lt, s, z);
        k.store(y, IndexExpr::constant(0), r);
        k.finish()
    }

    /// A caller that passes the three addresses of a stack slot's words to kernel 0's copy,
    /// after inlining, has no call left and reads no address from memory: the copy's
    /// accesses use the caller's addresses.
    #[test]
    fn copies_use_the_callers_addresses() {
        let kernel = step();
        assert!(inlinable(&kernel));
        let cpu = CpuTarget::host().resolve(super::super::TIER).expect("host target");
        let mut module = super::super::object_module(&cpu, "inline_test").expect("module");
        let mut builder_ctx = FunctionBuilderContext::new();
        let mut scalar = ScalarKernels::default();
        scalar.add(0, &kernel, &mut module, &mut builder_ctx, &[]).expect("translates");

        let mut ctx = Context::new();
        ctx.func.signature = module.make_signature();
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut builder_ctx);
        let block = b.create_block();
        b.switch_to_block(block);
        b.seal_block(block);
        let slot = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 12, 2));
        let mut args: Vec<_> = (0..3).map(|i| b.ins().stack_addr(types::I64, slot, i * 4)).collect();
        args.extend([b.ins().iconst(types::I64, 0), b.ins().iconst(types::I64, 1)]);
        let copy = scalar.callee(b.func, 0).expect("kernel 0 has a copy");
        assert!(scalar.callee(b.func, 1).is_none(), "kernel 1 has none");
        b.ins().call(copy, &args);
        b.ins().return_(&[]);
        b.finalize(module.target_config());
        scalar.inline_into(&mut ctx).expect("inlines");

        let dfg = &ctx.func.dfg;
        let insts: Vec<_> = ctx.func.layout.blocks().flat_map(|bl| ctx.func.layout.block_insts(bl)).collect();
        assert!(!insts.iter().any(|&i| dfg.insts[i].opcode().is_call()), "a call is left:\n{}", ctx.func.display());
        let loads: Vec<_> = insts.iter().filter(|&&i| dfg.insts[i].opcode() == Opcode::Load).collect();
        assert_eq!(loads.len(), 2, "the copy loads a and b, nothing else:\n{}", ctx.func.display());
        for &&i in &loads {
            let InstructionData::Load { arg, .. } = dfg.insts[i] else { unreachable!() };
            assert!(args[..2].contains(&arg), "a load not at a passed address:\n{}", ctx.func.display());
        }
    }
}
