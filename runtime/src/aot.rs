//! What ahead-of-time objects and their hosts call besides the kernels' own routines:
//! `tessera_rt_set_threads`, the thread count of everything below, and `tessera_rt_launch`,
//! through which the entry function of an object compiled with `--parallel` runs each kernel
//! (its grid split across those threads as the JIT executable splits it).

use std::sync::atomic::{AtomicPtr, Ordering};

use crate::abi::KernelFn;
use crate::thread_pool::ThreadPool;

/// The pool ahead-of-time code uses (null: the calling thread only).
static POOL: AtomicPtr<ThreadPool> = AtomicPtr::new(std::ptr::null_mut());

/// The pool [`tessera_rt_set_threads`] set, or null.
pub(crate) fn pool() -> *const ThreadPool {
    POOL.load(Ordering::Acquire)
}

/// Sets how many threads ahead-of-time code uses: the kernel grids of objects compiled with
/// `--parallel`, and the GEMM and convolution routines of this library (default 1: everything
/// on the calling thread). Returns 0, or -1 if the threads cannot be started. Meant for
/// start-up: each call with `threads > 1` starts a new pool, and the previous one's threads
/// stay parked for the life of the process (a concurrent call may still be using it).
#[no_mangle]
pub extern "C" fn tessera_rt_set_threads(threads: i32) -> i32 {
    let pool = match usize::try_from(threads) {
        Ok(n) if n > 1 => match ThreadPool::new(Some(n)) {
            Ok(pool) => Box::into_raw(Box::new(pool)),
            Err(_) => return -1,
        },
        _ => std::ptr::null_mut(),
    };
    POOL.store(pool, Ordering::Release);
    0
}

/// Runs `kernel` over the grid `0..extent` on the pool [`tessera_rt_set_threads`] set (on
/// the calling thread when there is none, or when `work_bytes` is too little to share).
///
/// # Safety
/// `buffers` is `kernel`'s buffer table, every pointer valid for everything the kernel
/// accesses, for the duration of the call (what an entry function passes).
#[no_mangle]
pub unsafe extern "C" fn tessera_rt_launch(kernel: KernelFn, buffers: *const *mut u8, extent: i64, work_bytes: u64) {
    let pool = pool();
    if pool.is_null() {
        // SAFETY: the caller's contract.
        unsafe { kernel(buffers, 0, extent.max(0)) }
    } else {
        // SAFETY: the pool is never freed; the table is the caller's contract.
        unsafe { (*pool).launch(kernel, buffers, extent, work_bytes) }
    }
}
