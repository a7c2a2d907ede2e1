//! The thread pool that runs kernel grids (DESIGN.md section 7): a rayon pool with a
//! configurable thread count (default: all cores). A launch's grid `0..extent` is split into
//! at most one contiguous chunk per thread, and the kernel is called once per chunk.
//!
//! Splitting costs a fork/join (a few microseconds), so a launch is split only when it is big
//! enough to pay for it. The measure is the bytes the kernel's buffers span (what an
//! elementwise or copy kernel moves): every chunk must get at least [`MIN_CHUNK_BYTES`]
//! (at ~10 GB/s per core, 64 KiB is ~6 us of work), and never more chunks than grid indices.
//! Compute-heavy kernels on small buffers (a dot with a long contraction) are thereby
//! underestimated; those go through the GEMM runtime call, which has its own threading.

use crate::error::RuntimeError;
use crate::KernelFn;

/// Smallest share of a launch's bytes worth handing to another thread.
pub const MIN_CHUNK_BYTES: u64 = 64 * 1024;

/// Whether a launch of `extent` grid indices moving `work_bytes` bytes could run as more than
/// one chunk on some pool: what a compiled entry asks to call a kernel directly instead.
pub const fn may_split(extent: i64, work_bytes: u64) -> bool {
    extent > 1 && work_bytes / MIN_CHUNK_BYTES > 1
}

/// Runs kernels on a fixed number of threads.
pub struct ThreadPool {
    /// `None` when running on one thread: launches then run on the caller's thread and no
    /// worker threads exist.
    pool: Option<rayon::ThreadPool>,
    threads: usize,
}

/// The kernel's buffer table, shared by every chunk of one launch.
#[derive(Clone, Copy)]
struct Buffers(*const *mut u8);
// SAFETY: the table and the buffers it points to outlive the launch (the launching thread
// waits for every chunk), and chunks write disjoint grid indices by the kernel contract.
unsafe impl Send for Buffers {}
unsafe impl Sync for Buffers {}

impl ThreadPool {
    /// A pool of `threads` threads (`None`: one per core).
    pub fn new(threads: Option<usize>) -> Result<ThreadPool, RuntimeError> {
        let threads = match threads {
            Some(0) => return Err(RuntimeError::ThreadPool("the thread count must be at least 1".into())),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let pool = if threads > 1 {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("tessera-worker-{i}"))
                .build()
                .map_err(|e| RuntimeError::ThreadPool(e.to_string()))?;
            Some(pool)
        } else {
            None
        };
        Ok(ThreadPool { pool, threads })
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// How many chunks a launch of `extent` grid indices over `work_bytes` bytes runs as.
    pub fn chunks(&self, extent: i64, work_bytes: u64) -> usize {
        let by_bytes = usize::try_from(work_bytes / MIN_CHUNK_BYTES).unwrap_or(usize::MAX);
        let by_extent = usize::try_from(extent).unwrap_or(0);
        self.threads.min(by_bytes).min(by_extent).max(1)
    }

    /// Runs `kernel` over the grid `0..extent`.
    ///
    /// # Safety
    /// `buffers` must be the kernel's buffer table: every pointer valid for the whole access
    /// range the kernel makes, for the duration of the call.
    pub unsafe fn launch(&self, kernel: KernelFn, buffers: *const *mut u8, extent: i64, work_bytes: u64) {
        if extent <= 0 {
            return;
        }
        let chunks = self.chunks(extent, work_bytes);
        match &self.pool {
            Some(pool) if chunks > 1 => {
                let table = Buffers(buffers);
                pool.scope(|scope| {
                    for i in 1..chunks {
                        let (lo, hi) = chunk_bounds(extent, chunks, i);
                        scope.spawn(move |_| {
                            let table = table;
                            // SAFETY: the caller's contract; chunks cover disjoint indices.
                            unsafe { kernel(table.0, lo, hi) }
                        });
                    }
                    let (lo, hi) = chunk_bounds(extent, chunks, 0);
                    // SAFETY: as above.
                    unsafe { kernel(table.0, lo, hi) }
                });
            }
            // SAFETY: the caller's contract.
            _ => unsafe { kernel(buffers, 0, extent) },
        }
    }

    /// Runs `f` inside the pool (so rayon work it starts uses this pool's threads).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(pool) => pool.install(f),
            None => f(),
        }
    }

    /// True when called from one of this pool's worker threads.
    pub fn is_worker_thread(&self) -> bool {
        self.pool.as_ref().is_some_and(|p| p.current_thread_index().is_some())
    }
}

/// Grid indices of chunk `i` of `chunks` equal contiguous parts of `0..extent`.
pub fn chunk_bounds(extent: i64, chunks: usize, i: usize) -> (i64, i64) {
    let at = |j: usize| (i128::from(extent) * j as i128 / chunks as i128) as i64;
    (at(i), at(i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Buffer 0: a u32 array; each grid index adds 1 to its element (so double coverage
    /// shows). Buffer 1: a u64 counter of calls.
    unsafe extern "C" fn mark(buffers: *const *mut u8, lo: i64, hi: i64) {
        unsafe {
            let out = *buffers as *mut u32;
            let calls = &*(*buffers.add(1) as *const AtomicU64);
            calls.fetch_add(1, Ordering::SeqCst);
            for i in lo..hi {
                *out.add(i as usize) += 1;
            }
        }
    }

    fn run(pool: &ThreadPool, extent: i64, work_bytes: u64) -> (Vec<u32>, u64) {
        let mut out = vec![0u32; extent.max(0) as usize];
        let calls = AtomicU64::new(0);
        let table = [out.as_mut_ptr() as *mut u8, &calls as *const AtomicU64 as *mut u8];
        unsafe { pool.launch(mark, table.as_ptr(), extent, work_bytes) };
        (out, calls.load(Ordering::SeqCst))
    }

    #[test]
    fn every_grid_index_runs_exactly_once() {
        let pool = ThreadPool::new(Some(4)).unwrap();
        for extent in [0, 1, 2, 3, 7, 100, 1001] {
            let (out, calls) = run(&pool, extent, u64::MAX);
            assert!(out.iter().all(|&x| x == 1), "extent {extent}");
            assert_eq!(calls, (extent as u64).min(4));
        }
    }

    #[test]
    fn small_launches_are_not_split() {
        let many = ThreadPool::new(Some(64)).unwrap();
        for (extent, work) in [(0, 1 << 30), (1, 1 << 30), (1 << 20, 2 * MIN_CHUNK_BYTES - 1), (2, 2 * MIN_CHUNK_BYTES)]
        {
            assert_eq!(many.chunks(extent, work) > 1, may_split(extent, work), "extent {extent}, {work} bytes");
        }
        let pool = ThreadPool::new(Some(4)).unwrap();
        assert_eq!(pool.chunks(1000, 1000), 1);
        assert_eq!(pool.chunks(1000, MIN_CHUNK_BYTES * 2), 2);
        assert_eq!(pool.chunks(1000, MIN_CHUNK_BYTES * 100), 4);
        assert_eq!(pool.chunks(3, MIN_CHUNK_BYTES * 100), 3);
        assert_eq!(pool.chunks(0, MIN_CHUNK_BYTES * 100), 1);
        let (out, calls) = run(&pool, 500, 4000);
        assert_eq!(calls, 1);
        assert!(out.iter().all(|&x| x == 1));
    }

    #[test]
    fn one_thread_runs_on_the_caller() {
        let pool = ThreadPool::new(Some(1)).unwrap();
        assert_eq!(pool.threads(), 1);
        assert_eq!(pool.chunks(1 << 20, u64::MAX), 1);
        let (out, calls) = run(&pool, 64, u64::MAX);
        assert_eq!(calls, 1);
        assert!(out.iter().all(|&x| x == 1));
        assert!(!pool.is_worker_thread());
    }

    #[test]
    fn default_uses_every_core_and_zero_threads_is_an_error() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(ThreadPool::new(None).unwrap().threads(), cores);
        assert!(ThreadPool::new(Some(0)).is_err());
    }

    #[test]
    fn chunks_are_contiguous_and_cover_the_grid() {
        for (extent, chunks) in [(10, 3), (7, 7), (1 << 40, 5), (i64::MAX, 2)] {
            let mut next = 0;
            for i in 0..chunks {
                let (lo, hi) = chunk_bounds(extent, chunks, i);
                assert_eq!(lo, next);
                assert!(hi > lo);
                next = hi;
            }
            assert_eq!(next, extent);
        }
    }
}
