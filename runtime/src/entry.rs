//! The native entry of a JIT-compiled program (DESIGN.md section 7): each tier compiles the
//! program's step tree (launches, copies, while loops, conditionals, checks, host operations)
//! into one function of type [`EntryFn`], and a run is one call of it. The runtime keeps what
//! compiled code cannot own: buffers and arenas, the thread pool, the host's custom-call
//! functions and infeed/outfeed queues, profiles. Compiled code reaches them through the
//! [`RunContext`] it is given and the three functions of [`entry_symbols`].
//!
//! Ahead-of-time objects have an entry of their own calling convention (`codegen::aot`); both
//! are emitted by the same code per tier, from the same plan.

use std::any::Any;
use std::mem::offset_of;
use std::time::Instant;

use crate::error::RuntimeError;
use crate::executable::{Executable, Profile};

/// A program's entry: runs the program once on `args[n]` (parameter `n`'s buffer) and
/// `results[n]` (result `n`'s), both 64-byte aligned, with the run's temps and the
/// executable's constants as `ctx` gives them. Returns [`OK`] or an error code.
pub type EntryFn = unsafe extern "C" fn(args: *const *mut u8, results: *const *mut u8, ctx: *mut RunContext) -> i32;

/// The entry ran to the end.
pub const OK: i32 = 0;
/// (Object entries only) an argument pointer is null or unaligned.
pub const BAD_ARGUMENT: i32 = 1;
/// (Object entries only) a result pointer is null or unaligned.
pub const BAD_RESULT: i32 = 2;
/// (Object entries only) the temp block is null or unaligned.
pub const BAD_TEMP: i32 = 3;
/// A set-dimension-size got a size other than the static one; a JIT entry stores the check's
/// index in [`RunContext::failed`] first.
pub const BAD_DIMENSION_SIZE: i32 = 4;
/// (JIT entries only) a host operation failed; the runtime holds the reason.
pub const HOST_FAILED: i32 = 5;

/// What one run of a JIT entry reads and updates, laid out for compiled code (the offsets
/// below are the ABI; the tiers load and store at them).
#[repr(C)]
pub struct RunContext {
    /// The base of each memory space's arena of this run, in the program's arena order.
    pub temps: *const *mut u8,
    /// The address of each constant buffer, in buffer order.
    pub constants: *const *mut u8,
    /// Nonzero while profiling: every launch and copy then goes through the runtime, which
    /// times it.
    pub profiling: u64,
    /// Kernel launches of this run: [`tessera_rt_launch_ctx`] adds its own, and the entry
    /// adds those it called directly before it returns.
    pub launches: u64,
    /// The index of the check that failed, when the entry returns [`BAD_DIMENSION_SIZE`].
    pub failed: u64,
    /// The runtime's side of the run (opaque to compiled code).
    run: *mut RunHooks<'static>,
}

/// Byte offsets of [`RunContext`]'s fields, for the code generators.
pub mod offsets {
    use super::*;
    pub const TEMPS: i32 = offset_of!(RunContext, temps) as i32;
    pub const CONSTANTS: i32 = offset_of!(RunContext, constants) as i32;
    pub const PROFILING: i32 = offset_of!(RunContext, profiling) as i32;
    pub const LAUNCHES: i32 = offset_of!(RunContext, launches) as i32;
    pub const FAILED: i32 = offset_of!(RunContext, failed) as i32;
}

/// The runtime's side of one run: the executable and what the callbacks leave for `run`.
pub(crate) struct RunHooks<'a> {
    pub exe: &'a Executable,
    pub profile: Option<&'a mut Profile>,
    /// Why a host operation failed, or the panic of its host function (resumed once the entry
    /// has returned: a panic may not unwind through compiled code).
    pub host_failure: Option<HostFailure>,
}

pub(crate) enum HostFailure {
    Error(RuntimeError),
    Panic(Box<dyn Any + Send>),
}

impl RunContext {
    pub(crate) fn new(temps: &[*mut u8], constants: &[*mut u8], hooks: &mut RunHooks) -> RunContext {
        RunContext {
            temps: temps.as_ptr(),
            constants: constants.as_ptr(),
            profiling: u64::from(hooks.profile.is_some()),
            launches: 0,
            failed: 0,
            run: (hooks as *mut RunHooks).cast(),
        }
    }
}

/// Runs launch `launch` of the executable (its kernel over its whole grid, split across the
/// executable's pool when the work pays for it) with the buffer table `table`.
///
/// # Safety
/// `ctx` is the context the runtime passed to the entry; `table` holds the launch's buffers,
/// each valid for everything its kernel accesses.
pub unsafe extern "C" fn tessera_rt_launch_ctx(ctx: *mut RunContext, launch: i64, table: *const *mut u8) {
    // SAFETY: the caller's contract: `ctx` is live for the entry's call, and its hooks too.
    let (ctx, hooks) = unsafe { (&mut *ctx, &mut *(*ctx).run) };
    ctx.launches += 1;
    let Some(entry) = usize::try_from(launch).ok().and_then(|j| hooks.exe.launch_entry(j)) else {
        // Compiled code names only the launches it was compiled with (checked at assembly).
        return;
    };
    let start = hooks.profile.is_some().then(Instant::now);
    // SAFETY: the caller's contract.
    unsafe { hooks.exe.pool().launch(entry.function, table, entry.extent, entry.work_bytes) };
    if let (Some(p), Some(start)) = (hooks.profile.as_deref_mut(), start) {
        if let Some(slot) = p.launches.get_mut(launch as usize) {
            slot.0 += 1;
            slot.1 += start.elapsed();
        }
    }
}

/// Copies `bytes` bytes from `src` to `dst`, timed (a profiling run's copies come here).
///
/// # Safety
/// As `memcpy`, with `ctx` the entry's context.
pub unsafe extern "C" fn tessera_rt_copy_ctx(ctx: *mut RunContext, dst: *mut u8, src: *const u8, bytes: u64) {
    // SAFETY: the caller's contract.
    let hooks = unsafe { &mut *(*ctx).run };
    let start = Instant::now();
    // SAFETY: the caller's contract (distinct live buffers never overlap).
    unsafe { std::ptr::copy(src, dst, bytes as usize) };
    if let Some(p) = hooks.profile.as_deref_mut() {
        p.copies.0 += 1;
        p.copies.1 += start.elapsed();
    }
}

/// Performs host operation `index` of the executable on the buffers of `table` (its values'
/// leaves: operands first, then the result). Returns 0, or [`HOST_FAILED`] with the reason
/// (or the host function's panic) kept for the run.
///
/// # Safety
/// `ctx` is the entry's context; `table` holds one valid buffer per leaf.
pub unsafe extern "C" fn tessera_rt_host(ctx: *mut RunContext, index: i64, table: *const *mut u8) -> i32 {
    // SAFETY: the caller's contract.
    let hooks = unsafe { &mut *(*ctx).run };
    let exe = hooks.exe;
    let start = hooks.profile.is_some().then(Instant::now);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        unsafe { exe.host_step(index, table) }
    }));
    if let (Some(p), Some(start)) = (hooks.profile.as_deref_mut(), start) {
        p.host.0 += 1;
        p.host.1 += start.elapsed();
    }
    let failure = match outcome {
        Ok(Ok(())) => return OK,
        Ok(Err(e)) => HostFailure::Error(e),
        Err(panic) => HostFailure::Panic(panic),
    };
    hooks.host_failure = Some(failure);
    HOST_FAILED
}

/// The functions a JIT entry calls besides its kernels (and `memcpy`), with their addresses.
pub fn entry_symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("tessera_rt_launch_ctx", tessera_rt_launch_ctx as *const u8),
        ("tessera_rt_copy_ctx", tessera_rt_copy_ctx as *const u8),
        ("tessera_rt_host", tessera_rt_host as *const u8),
    ]
}
