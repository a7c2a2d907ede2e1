//! The thread pool that runs kernel grids (DESIGN.md section 7): `threads - 1` worker threads
//! plus the calling thread (default: all cores). A launch's grid `0..extent` is split into at
//! most one contiguous chunk per thread, and the kernel is called once per chunk.
//!
//! Splitting costs a hand-off to the workers, so a launch is split only when it is big enough
//! to pay for it. The measure is the bytes the kernel's buffers span (what an elementwise or
//! copy kernel moves): every chunk must get at least [`MIN_CHUNK_BYTES`] (at ~10 GB/s per
//! core, 64 KiB is ~6 us of work), and never more chunks than grid indices. Compute-heavy
//! kernels on small buffers (a dot with a long contraction) are thereby underestimated; those
//! go through the GEMM runtime call, which splits its own work on this pool.
//!
//! Why not rayon: a rayon pool's caller blocks on a condition variable while workers run the
//! job, and idle workers sleep soon after; on a virtual machine each of those wake-ups takes
//! 20-40 us, so a split 64K-element negate took 33-47 us on two threads against 8 us on one.
//! Here the caller runs chunk 0 itself and spins until the others are done, and workers spin
//! for [`SPIN`] after their last chunk before they park, so the launches of a run (and runs
//! in a row) find them awake. A pool runs one split job at a time: a launch from another
//! thread (concurrent runs) or from inside a chunk (a GEMM in a kernel) while a job is under
//! way runs its chunks on its own thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::error::RuntimeError;
use crate::KernelFn;

/// Smallest share of a launch's bytes worth handing to another thread.
pub const MIN_CHUNK_BYTES: u64 = 64 * 1024;

/// How long an idle worker waits for the next job, spinning, before it parks: longer than the
/// single-threaded stretches between a run's split launches, and than a host loop's gap
/// between runs, so those do not pay a wake-up. It costs a core only while runs come.
const SPIN: Duration = Duration::from_micros(300);

/// Whether a launch of `extent` grid indices moving `work_bytes` bytes could run as more than
/// one chunk on some pool: what a compiled entry asks to call a kernel directly instead.
pub const fn may_split(extent: i64, work_bytes: u64) -> bool {
    extent > 1 && work_bytes / MIN_CHUNK_BYTES > 1
}

/// Runs kernels on a fixed number of threads.
pub struct ThreadPool {
    threads: usize,
    /// `None` when running on one thread: launches then run on the caller's thread and no
    /// worker threads exist.
    shared: Option<Arc<Shared>>,
    workers: Vec<JoinHandle<()>>,
}

/// The job a pool runs: `f(i)` for every chunk `i`.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
}

/// What the calling thread and the workers share.
struct Shared {
    /// The current job's epoch (24 bits, wrapping), chunk count (20 bits) and next unclaimed
    /// chunk (20 bits), in one word so that claiming a chunk checks all three at once: a
    /// worker that arrives after its job ended cannot claim a chunk of the next one with a
    /// stale view of it.
    state: AtomicU64,
    /// The current job (a `Job` on the publishing thread's stack). Read only by a thread that
    /// has claimed a chunk of the current epoch: the publisher waits for every chunk, so the
    /// job outlives every read.
    job: AtomicPtr<()>,
    /// Chunks of the current job that have finished.
    done: AtomicUsize,
    /// A chunk of the current job panicked (the caller panics in turn).
    panicked: AtomicBool,
    /// A job is under way.
    busy: AtomicBool,
    /// Per worker: parked, or about to be (the publisher unparks it).
    parked: Vec<AtomicBool>,
    /// The workers' handles, to unpark them.
    handles: std::sync::OnceLock<Vec<Thread>>,
    shutdown: AtomicBool,
}

const EPOCH_SHIFT: u32 = 40;
const CHUNKS_SHIFT: u32 = 20;
const FIELD: u64 = (1 << 20) - 1;

fn unpack(v: u64) -> (u64, usize, usize) {
    (v >> EPOCH_SHIFT, ((v >> CHUNKS_SHIFT) & FIELD) as usize, (v & FIELD) as usize)
}

impl Shared {
    /// Claims and runs chunks of epoch `epoch`'s job until none is left.
    fn run_chunks_of(&self, epoch: u64) {
        loop {
            let v = self.state.load(Ordering::Acquire);
            let (e, chunks, next) = unpack(v);
            if e != epoch || next >= chunks {
                return;
            }
            if self.state.compare_exchange_weak(v, v + 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            // SAFETY: chunk `next` of this epoch is claimed and not done, so the job it
            // belongs to is still published and alive (see `job`).
            let job = unsafe { &*(self.job.load(Ordering::Acquire) as *const Job<'_>) };
            if catch_unwind(AssertUnwindSafe(|| (job.f)(next))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }

    fn worker(&self, me: usize) {
        // The pool starts at epoch 0 and its first job is epoch 1: a worker that starts after
        // that job was published still joins it.
        let mut seen = 0;
        loop {
            let mut idle_since = Instant::now();
            let mut spins = 0u32;
            loop {
                let epoch = self.state.load(Ordering::Acquire) >> EPOCH_SHIFT;
                if epoch != seen {
                    seen = epoch;
                    break;
                }
                if self.shutdown.load(Ordering::Acquire) {
                    return;
                }
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(256) && idle_since.elapsed() > SPIN {
                    // Parked, then a last look: a publisher either sees the flag (and
                    // unparks) or published before the look (and this sees its epoch).
                    self.parked[me].store(true, Ordering::SeqCst);
                    if self.state.load(Ordering::SeqCst) >> EPOCH_SHIFT == seen && !self.shutdown.load(Ordering::SeqCst)
                    {
                        std::thread::park();
                    }
                    self.parked[me].store(false, Ordering::SeqCst);
                    idle_since = Instant::now();
                } else {
                    relax(spins);
                }
            }
            self.run_chunks_of(seen);
        }
    }

    fn wake_parked(&self) {
        let Some(handles) = self.handles.get() else { return };
        for (flag, thread) in self.parked.iter().zip(handles) {
            if flag.load(Ordering::SeqCst) && flag.swap(false, Ordering::SeqCst) {
                thread.unpark();
            }
        }
    }
}

/// One step of a spin wait: a pause, and now and then a yield, so that other runnable threads
/// (several host threads running one executable on few cores) get the core.
fn relax(spins: u32) {
    if spins.is_multiple_of(64) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// The cores this process may run on. The standard library reads the process's cgroup limits
/// on every call (about 20 us here), and compiles ask several times, so the answer is kept.
pub fn available_cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl ThreadPool {
    /// A pool of `threads` threads (`None`: one per core).
    pub fn new(threads: Option<usize>) -> Result<ThreadPool, RuntimeError> {
        let threads = match threads {
            Some(0) => return Err(RuntimeError::ThreadPool("the thread count must be at least 1".into())),
            Some(n) => n,
            None => available_cores(),
        };
        if threads == 1 {
            return Ok(ThreadPool { threads, shared: None, workers: Vec::new() });
        }
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            parked: (1..threads).map(|_| AtomicBool::new(false)).collect(),
            handles: std::sync::OnceLock::new(),
            shutdown: AtomicBool::new(false),
        });
        let mut workers = Vec::with_capacity(threads - 1);
        for me in 0..threads - 1 {
            let mine = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("tessera-worker-{me}"))
                .spawn(move || mine.worker(me))
                .map_err(|e| RuntimeError::ThreadPool(e.to_string()));
            match handle {
                Ok(h) => workers.push(h),
                Err(e) => {
                    // The pool is not made: stop the workers already started.
                    let _ = shared.handles.set(workers.iter().map(|w| w.thread().clone()).collect());
                    let pool = ThreadPool { threads, shared: Some(shared), workers };
                    drop(pool);
                    return Err(e);
                }
            }
        }
        let _ = shared.handles.set(workers.iter().map(|w| w.thread().clone()).collect());
        Ok(ThreadPool { threads, shared: Some(shared), workers })
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
        if chunks == 1 {
            // SAFETY: the caller's contract.
            unsafe { kernel(buffers, 0, extent) };
            return;
        }
        let table = Buffers(buffers);
        self.run_chunks(chunks, move |i| {
            let table = table;
            let (lo, hi) = chunk_bounds(extent, chunks, i);
            // SAFETY: the caller's contract; chunks cover disjoint indices.
            unsafe { kernel(table.0, lo, hi) }
        });
    }

    /// Runs `f(0)`, ..., `f(chunks - 1)`, on the pool's threads when it is free (the caller
    /// runs chunks too), and returns when all have run. A panic in a chunk panics here.
    pub fn run_chunks(&self, chunks: usize, f: impl Fn(usize) + Sync) {
        let shared = match &self.shared {
            Some(s) if chunks > 1 && chunks as u64 <= FIELD => s,
            _ => return (0..chunks).for_each(f),
        };
        if shared.busy.swap(true, Ordering::Acquire) {
            // Another job is under way (a concurrent run, or this is inside one of its chunks).
            return (0..chunks).for_each(f);
        }
        let job = Job { f: &f };
        shared.job.store(&job as *const Job<'_> as *mut (), Ordering::Release);
        shared.done.store(0, Ordering::Relaxed);
        shared.panicked.store(false, Ordering::Relaxed);
        // Epochs wrap at 24 bits, skipping 0 (the epoch before the first job).
        let epoch = ((shared.state.load(Ordering::Relaxed) >> EPOCH_SHIFT) + 1) & ((1 << 24) - 1);
        let epoch = epoch.max(1);
        shared.state.store(epoch << EPOCH_SHIFT | (chunks as u64) << CHUNKS_SHIFT, Ordering::SeqCst);
        shared.wake_parked();
        shared.run_chunks_of(epoch);
        let mut spins = 0u32;
        while shared.done.load(Ordering::Acquire) < chunks {
            spins = spins.wrapping_add(1);
            relax(spins);
        }
        let panicked = shared.panicked.load(Ordering::Relaxed);
        shared.busy.store(false, Ordering::Release);
        if panicked {
            panic!("a chunk of a thread-pool job panicked");
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            shared.shutdown.store(true, Ordering::SeqCst);
            if let Some(handles) = shared.handles.get() {
                handles.iter().for_each(Thread::unpark);
            }
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// The kernel's buffer table, shared by every chunk of one launch.
#[derive(Clone, Copy)]
struct Buffers(*const *mut u8);
// SAFETY: the table and the buffers it points to outlive the launch (the launching thread
// waits for every chunk), and chunks write disjoint grid indices by the kernel contract.
unsafe impl Send for Buffers {}
unsafe impl Sync for Buffers {}

/// A buffer the chunks of one `run_chunks` call write, each its own disjoint part (packing
/// routines fill their operands' packed copies this way).
#[derive(Clone, Copy)]
pub(crate) struct Rows<T>(pub(crate) *mut T);
// SAFETY: chunks write disjoint parts, inside the call the caller waits for.
unsafe impl<T> Send for Rows<T> {}
unsafe impl<T> Sync for Rows<T> {}

impl<T> Rows<T> {
    /// Element `i` (a method, so closures capture the whole `Rows`, which is `Sync`).
    pub(crate) fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
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
    }

    /// Every chunk of a job waits until all have started: it ends only if the job's chunks
    /// really run on different threads at once, before and after the workers park.
    #[test]
    fn chunks_run_at_once_on_awake_and_parked_workers() {
        use std::sync::atomic::AtomicUsize;
        let pool = ThreadPool::new(Some(3)).unwrap();
        for round in 0..4 {
            let started = AtomicUsize::new(0);
            let deadline = Instant::now() + Duration::from_secs(20);
            pool.run_chunks(3, |_| {
                started.fetch_add(1, Ordering::SeqCst);
                while started.load(Ordering::SeqCst) < 3 {
                    assert!(Instant::now() < deadline, "round {round}: the chunks did not run at once");
                    std::hint::spin_loop();
                }
            });
            if round % 2 == 1 {
                // Long enough for the workers to park.
                std::thread::sleep(SPIN * 10);
            }
        }
    }

    /// A job started inside a chunk, or by another thread while a job is under way, runs on
    /// its own thread; every chunk of every job runs exactly once, and a panicking chunk
    /// panics the caller and leaves the pool usable.
    #[test]
    fn nested_concurrent_and_panicking_jobs() {
        use std::sync::atomic::AtomicUsize;
        let pool = ThreadPool::new(Some(2)).unwrap();
        let inner = AtomicUsize::new(0);
        pool.run_chunks(2, |_| pool.run_chunks(3, |_| _ = inner.fetch_add(1, Ordering::SeqCst)));
        assert_eq!(inner.load(Ordering::SeqCst), 6);
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..500 {
                        pool.run_chunks(2, |i| _ = total.fetch_add(i + 1, Ordering::SeqCst));
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::SeqCst), 4 * 500 * 3);
        let caught = std::panic::catch_unwind(AssertUnwindSafe(|| pool.run_chunks(2, |i| assert!(i != 1))));
        assert!(caught.is_err());
        let (out, calls) = run(&pool, 100, u64::MAX);
        assert_eq!(calls, 2);
        assert!(out.iter().all(|&x| x == 1));
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
