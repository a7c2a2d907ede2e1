//! Stores that go around the cache: a vector loop's contiguous stores into an output larger
//! than the last-level cache are non-temporal (`!nontemporal`, `vmovntps` on x86-64).
//!
//! An ordinary store to a line not in cache first reads the line from memory (a
//! read-for-ownership), so a kernel streaming one output from two inputs moves four arrays'
//! bytes, not three. An output larger than the last-level cache is evicted before any later
//! kernel reads it anyway, so keeping it in cache gains nothing. On this project's Zen 3 host a
//! triad over 64 MiB arrays ran at 19.7 GB/s with ordinary stores and 24.5 GB/s with streaming
//! ones (C, two threads).
//!
//! Which buffers: those a kernel never reads (loads, or runtime calls taking their address)
//! and into which one launch stores at least [`TargetCpu::streaming_min_bytes`]. A buffer the
//! kernel reads back (softmax's staged values, an accumulator) must stay in cache. Which
//! stores: contiguous vector stores of at least 16 bytes whose address is a multiple of the
//! vector register's size; x86 has no unaligned streaming vector store, so each store tests
//! its address (the test is the same for every iteration of a contiguous loop, so the branch
//! is always predicted) and misaligned rows store as usual. Streaming stores are weakly
//! ordered, so a kernel that has any ends with an `sfence`, before the thread pool's release of
//! the chunk makes its writes visible to others.

use inkwell::values::{PointerValue, VectorValue};
use inkwell::IntPredicate;

use tessera_lower::kernel::{Kernel, MemType};

use super::function::Translator;
use super::target::TargetCpu;
use crate::CodegenError;

/// Whether each of `kernel`'s buffers takes streaming stores on `target`: it is never read,
/// and one launch over the whole grid stores at least the target's threshold into it (a
/// buffer's size would also stream a scan step's one row into its large result, whose partial
/// lines written around the cache cost a read at the memory controller each).
pub(crate) fn streamed_buffers(kernel: &Kernel, target: &TargetCpu) -> Vec<bool> {
    let Some(min_bytes) = target.streaming_min_bytes else { return vec![false; kernel.buffers.len()] };
    kernel
        .buffers
        .iter()
        .zip(kernel.buffer_traffic())
        .map(|(b, t)| {
            let read = t.loaded_bits > 0 || t.called;
            b.writable && !read && !matches!(b.mem, MemType::Packed { .. }) && t.stored_bits / 8 >= min_bytes
        })
        .collect()
}

/// The smallest store worth streaming: one whole 16-byte register.
const MIN_STREAMED_STORE_BYTES: u32 = 16;

impl<'a, 'ctx> Translator<'a, 'ctx> {
    /// Stores the vector `v` of `bytes` bytes at `ptr` (a contiguous store of a vector loop
    /// into a streamed buffer): non-temporally where `ptr` is a multiple of `bytes` (or of the
    /// widest register's size, if smaller), else as an ordinary store of elements aligned to
    /// `elem_bytes`. `false` (nothing stored) when the vector is too small to stream.
    pub(crate) fn streaming_store(
        &self,
        ptr: PointerValue<'ctx>,
        v: VectorValue<'ctx>,
        bytes: u32,
        elem_bytes: u32,
    ) -> Result<bool, CodegenError> {
        if bytes < MIN_STREAMED_STORE_BYTES || !bytes.is_power_of_two() {
            return Ok(false);
        }
        // LLVM splits a vector wider than a register into register-sized stores, each of which
        // streams when aligned to its own size.
        let align = bytes.min(self.stream_align);
        let err = self.err();
        let i64t = self.ctx.i64_type();
        let address = self.builder.build_ptr_to_int(ptr, i64t, "addr").map_err(&err)?;
        let low = self.builder.build_and(address, i64t.const_int(u64::from(align - 1), false), "low").map_err(&err)?;
        let aligned =
            self.builder.build_int_compare(IntPredicate::EQ, low, i64t.const_zero(), "aligned").map_err(&err)?;
        let stream = self.ctx.append_basic_block(self.function, "stream");
        let plain = self.ctx.append_basic_block(self.function, "plain");
        let join = self.ctx.append_basic_block(self.function, "stored");
        self.builder.build_conditional_branch(aligned, stream, plain).map_err(&err)?;
        let set_alignment = |st: inkwell::values::InstructionValue<'ctx>, align: u32| {
            st.set_alignment(align).map_err(|e| self.unsupported(e.to_string()))
        };

        self.builder.position_at_end(stream);
        let st = self.builder.build_store(ptr, v).map_err(&err)?;
        set_alignment(st, align)?;
        let one = self.ctx.i32_type().const_int(1, false);
        let node = self.ctx.metadata_node(&[one.into()]);
        st.set_metadata(node, self.ctx.get_kind_id("nontemporal"))
            .map_err(|e| self.unsupported(format!("nontemporal metadata: {e}")))?;
        self.builder.build_unconditional_branch(join).map_err(&err)?;

        self.builder.position_at_end(plain);
        let st = self.builder.build_store(ptr, v).map_err(&err)?;
        set_alignment(st, elem_bytes)?;
        self.builder.build_unconditional_branch(join).map_err(&err)?;

        self.builder.position_at_end(join);
        self.streamed_any.set(true);
        Ok(true)
    }

    /// Orders the kernel's streaming stores before whatever follows its return (x86's `sfence`;
    /// only x86 targets stream).
    pub(crate) fn fence_streams(&self) -> Result<(), CodegenError> {
        let intrinsic = inkwell::intrinsics::Intrinsic::find("llvm.x86.sse.sfence")
            .ok_or_else(|| self.unsupported("LLVM has no llvm.x86.sse.sfence"))?;
        let f = intrinsic
            .get_declaration(self.module, &[])
            .ok_or_else(|| self.unsupported("llvm.x86.sse.sfence has no declaration"))?;
        self.builder.build_call(f, &[], "").map_err(self.err())?;
        Ok(())
    }
}
