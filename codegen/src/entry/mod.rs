//! A program's entry function: its step tree (launches, copies, while loops, conditionals,
//! checks, host operations) compiled into one native function per program. Each tier has one
//! emitter (`cranelift/entry.rs`, `llvm/entry.rs`) that turns an [`EntryPlan`] into an entry of
//! either calling convention:
//!
//! - [`EntryAbi::Jit`]: `int32_t entry(void* const* args, void* const* results, RunContext* ctx)`,
//!   what the runtime calls for every run (`tessera_runtime::entry`). Temps and constants come
//!   from `ctx`; launches that could use more than one thread, every launch and copy while
//!   profiling, and host operations go through the runtime (`tessera_rt_launch_ctx`,
//!   `tessera_rt_copy_ctx`, `tessera_rt_host`); the other launches are direct calls of the
//!   kernel, which add one to `ctx.launches` themselves.
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
