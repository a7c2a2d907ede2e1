//! A program's entry function: its step tree (launches, copies, while loops, conditionals,
//! checks, host operations) compiled into one native function per program. Each tier has one
//! emitter (`cranelift/entry.rs`, `llvm/entry.rs`) that turns an [`EntryPlan`] into an entry of
//! either calling convention:
//!
//! - [`EntryAbi::Jit`]: `int32_t entry(void* const* args, void* const* results, RunContext* ctx)`,
//!   what the runtime calls for every run (`tessera_runtime::entry`). Temps and constants come
//!   from `ctx`. The steps are emitted twice, and `ctx.profiling` picks a copy once per run:
//!   the profiled copy sends every launch and copy through the runtime, which times them
//!   (`tessera_rt_launch_ctx`, `tessera_rt_copy_ctx`); the fast copy does so only for launches
//!   that could use more than one thread, calls the others directly and counts them itself
//!   (adding the count to `ctx.launches` when it returns). Both call `tessera_rt_host` for
//!   host operations.
//! - [`EntryAbi::Object`]: `int32_t SYMBOL(const void* const* args, void* const* results, void*
//!   temp)`, the ahead-of-time object's exported function (`crate::aot`): pointers checked
//!   first, temps at fixed offsets in one caller block, constants in the object, kernels
//!   called directly or (`parallel`) through `tessera_rt_launch`; host operations refused.

pub mod plan;

pub use plan::{Addr, EntryPlan, EntryStep};

/// The calling convention an entry is emitted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryAbi {
    Jit,
    Object { parallel: bool },
}
