//! Small scalar kernels translated into the entry at the sites that run them directly: a step
//! of a scalar loop (a binary search's compare and selects) then runs in the loop's own code,
//! without a call, a buffer table and a grid loop per step. The LLVM tier does the same by
//! compiling such kernels into the entry's module (`llvm::program_objects`).
//!
//! The entry translates the kernel's statements in place (`function::translate_inline`), with
//! the buffers' addresses it computed, and keeps the scalars such kernels pass each other
//! (temp slots of one element, `entry::Entry::promote_slots`) in variables: a loop's state
//! then stays in registers from one step to the next instead of making a round trip through
//! memory per step, which Cranelift would not forward across the loop's back edge.
//!
//! The kernel still compiles on its own, with the table: launches through the runtime
//! (threaded or profiled ones) call it by address.

use tessera_lower::kernel::Kernel;

use crate::partition;

/// Whether a direct launch of `kernel` is translated into the entry: a scalar kernel of at
/// most `partition::INLINED_STATEMENTS` statements, as the LLVM tier's entry module takes. (The
/// LLVM tier also inlines larger scalar kernels launched in a while loop; here that measured
/// no faster on a 10,000-step `sin` loop, whose time is the `sin`'s dependent chain, and
/// cost compile time.)
pub(crate) fn inlinable(kernel: &Kernel) -> bool {
    partition::is_scalar(kernel) && partition::statements(&kernel.body) <= partition::INLINED_STATEMENTS
}

#[cfg(test)]
mod tests {
    use cranelift_codegen::ir::{types, InstBuilder, Opcode, StackSlotData, StackSlotKind};
    use cranelift_codegen::Context;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
    use cranelift_module::Module;
    use tessera_lower::kernel::{BinOp, CmpOp, Const, IndexExpr, KernelBuilder, MemType, Ty};

    use super::*;
    use crate::cranelift::function::{translate_inline, value_buffers};
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

    /// Two steps translated in place, the second reading the first's result, with `a` and
    /// `y` in variables: no call is left, the only load reads `b` (in memory) and nothing is
    /// stored. A variable of another type than the element's is read through a bitcast.
    #[test]
    fn promoted_buffers_live_in_variables() {
        let kernel = step();
        assert!(inlinable(&kernel));
        assert_eq!(value_buffers(&kernel), [true, true, true]);
        let cpu = CpuTarget::host().resolve(super::super::TIER).expect("host target");
        let mut module = super::super::object_module(&cpu, "inline_test").expect("module");
        let mut builder_ctx = FunctionBuilderContext::new();
        let mut ctx = Context::new();
        ctx.func.signature = module.make_signature();
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut builder_ctx);
        let block = b.create_block();
        b.switch_to_block(block);
        b.seal_block(block);
        let slot = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 12, 2));
        let addrs: Vec<_> = (0..3).map(|i| b.ins().stack_addr(types::I64, slot, i * 4)).collect();
        let (a, y) = (b.declare_var(types::F32), b.declare_var(types::I32));
        let one = b.ins().f32const(1.5);
        b.def_var(a, one);
        let promoted = vec![Some((a, types::F32)), None, Some((y, types::I32))];
        translate_inline(&kernel, &mut b, &mut module, &[], addrs.clone(), promoted).expect("translates");
        // The second step reads the first's result (y) as its `a`.
        let promoted = vec![Some((y, types::I32)), None, Some((y, types::I32))];
        translate_inline(&kernel, &mut b, &mut module, &[], addrs.clone(), promoted).expect("translates");
        b.ins().return_(&[]);
        b.finalize(module.target_config());

        let func = &ctx.func;
        let insts: Vec<_> = func.layout.blocks().flat_map(|bl| func.layout.block_insts(bl)).collect();
        let count = |op: Opcode| insts.iter().filter(|&&i| func.dfg.insts[i].opcode() == op).count();
        assert!(!insts.iter().any(|&i| func.dfg.insts[i].opcode().is_call()), "a call:\n{}", func.display());
        assert_eq!(count(Opcode::Store), 0, "a store:\n{}", func.display());
        assert_eq!(count(Opcode::Load), 2, "each step loads b, nothing else:\n{}", func.display());
        assert_eq!(count(Opcode::Bitcast), 1, "a's f32 variable read as i32:\n{}", func.display());
    }

    /// A buffer of several elements, or one whose address a call gets, stays in memory.
    #[test]
    fn only_whole_scalars_are_value_buffers() {
        let mut k = KernelBuilder::new("pair", 1);
        let a = k.buffer("a", MemType::Scalar(Ty::F32), 2, false);
        let y = k.buffer("y", MemType::Pred, 1, true);
        let x = k.load(a, IndexExpr::constant(1));
        let zero = k.constant(Const::F32(0));
        let p = k.cmp(CmpOp::FLt, Ty::F32, x, zero);
        k.store(y, IndexExpr::constant(0), p);
        assert_eq!(value_buffers(&k.finish()), [false, true]);
    }
}
