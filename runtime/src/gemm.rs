//! The GEMM runtime functions kernels call for large dots (DESIGN.md section 6):
//! `C = A·B`, overwriting `C`, with arbitrary strides in elements, on the `gemm` crate's
//! AVX-512 kernels.
//!
//! Threading: a kernel call carries no thread count, so the executable publishes its pool
//! for the duration of a run in a thread-local ([`GemmThreads::enter`]) on the thread that
//! runs the launches. A call from that thread uses the pool's threads; a call from a pool
//! worker (a kernel whose grid the pool already split) or from outside any run stays on its
//! own thread, so parallelism never nests.

use std::cell::Cell;

use gemm::Parallelism;

use crate::thread_pool::ThreadPool;

/// Below this many multiply-adds a GEMM stays on one thread: moving it into the pool costs
/// more than it saves.
const PARALLEL_MIN_FLOPS: u128 = 64 * 64 * 64;

thread_local! {
    static POOL: Cell<*const ThreadPool> = const { Cell::new(std::ptr::null()) };
}

/// While alive, GEMM calls on this thread use `pool`'s threads.
pub struct GemmThreads {
    previous: *const ThreadPool,
}

impl GemmThreads {
    /// Publishes `pool` to GEMM calls on this thread until the guard drops. The guard borrows
    /// nothing, so the caller must keep the pool alive while it lives (the executable holds
    /// both for the duration of one run).
    pub fn enter(pool: &ThreadPool) -> GemmThreads {
        let previous = POOL.with(|p| p.replace(pool as *const ThreadPool));
        GemmThreads { previous }
    }
}

impl Drop for GemmThreads {
    fn drop(&mut self) {
        POOL.with(|p| p.set(self.previous));
    }
}

/// The pool a live [`GemmThreads`] guard published on this thread, else the one
/// `tessera_rt_set_threads` set for ahead-of-time code (null if neither): GEMM and the
/// convolution runtime split their work on it.
pub(crate) fn published_pool() -> *const ThreadPool {
    let own = POOL.with(Cell::get);
    if own.is_null() {
        crate::aot::pool()
    } else {
        own
    }
}

/// Shared body of both entry points.
///
/// # Safety
/// The contract of [`tessera_rt_gemm_f32`].
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_impl<T: 'static + Copy + Send + Sync>(
    m: i64,
    n: i64,
    k: i64,
    a: *const T,
    a_rs: i64,
    a_cs: i64,
    b: *const T,
    b_rs: i64,
    b_cs: i64,
    c: *mut T,
    c_rs: i64,
    c_cs: i64,
    zero: T,
    one: T,
) {
    // Negative sizes cannot come from a valid kernel; there is no error channel across the C
    // ABI, so they do nothing rather than reach `as usize`.
    let (Ok(m), Ok(n), Ok(k)) = (usize::try_from(m), usize::try_from(n), usize::try_from(k)) else { return };
    let stride = |s: i64| s as isize;
    let flops = m as u128 * n as u128 * k as u128;
    let pool = published_pool();
    // SAFETY: the pointer was set by a live `GemmThreads` guard on this thread or is the AOT
    // pool, which is never freed.
    let pool = if pool.is_null() || flops < PARALLEL_MIN_FLOPS { None } else { Some(unsafe { &*pool }) };
    let threads = pool.map_or(1, ThreadPool::threads);
    let (c, a, b) = (SendPtr(c), SendPtr(a as *mut T), SendPtr(b as *mut T));
    let call = move |parallelism: Parallelism| {
        let (c, a, b) = (c, a, b);
        // SAFETY: the caller guarantees the matrices are valid for the given sizes and
        // strides. With `read_dst = false`, gemm computes `dst = beta * lhs * rhs`, ignoring
        // what `C` held (and `alpha`).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.0,
                stride(c_cs),
                stride(c_rs),
                false,
                a.0,
                stride(a_cs),
                stride(a_rs),
                b.0,
                stride(b_cs),
                stride(b_rs),
                zero,
                one,
                false,
                false,
                false,
                parallelism,
            )
        }
    };
    match pool {
        Some(pool) if threads > 1 => {
            if pool.is_worker_thread() {
                call(Parallelism::Rayon(threads))
            } else {
                pool.install(|| call(Parallelism::Rayon(threads)))
            }
        }
        _ => call(Parallelism::None),
    }
}

#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: the pointers are used only inside the GEMM call the current thread waits for.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// `C = A·B` for f32: `A` is `m×k`, `B` is `k×n`, `C` is `m×n`; element `(i, j)` of a matrix
/// `X` is at `x + i*x_rs + j*x_cs` (strides in elements, any sign). `C` must not overlap `A`
/// or `B`.
///
/// # Safety
/// Every element the sizes and strides address must be valid (readable for `A` and `B`,
/// writable for `C`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tessera_rt_gemm_f32(
    m: i64,
    n: i64,
    k: i64,
    a: *const f32,
    a_rs: i64,
    a_cs: i64,
    b: *const f32,
    b_rs: i64,
    b_cs: i64,
    c: *mut f32,
    c_rs: i64,
    c_cs: i64,
) {
    unsafe { gemm_impl(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, 0.0f32, 1.0f32) }
}

/// [`tessera_rt_gemm_f32`] for f64.
///
/// # Safety
/// As for [`tessera_rt_gemm_f32`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tessera_rt_gemm_f64(
    m: i64,
    n: i64,
    k: i64,
    a: *const f64,
    a_rs: i64,
    a_cs: i64,
    b: *const f64,
    b_rs: i64,
    b_cs: i64,
    c: *mut f64,
    c_rs: i64,
    c_cs: i64,
) {
    unsafe { gemm_impl(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, 0.0f64, 1.0f64) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random sequence in [-1, 1) (splitmix64).
    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut z = seed;
        (0..n)
            .map(|_| {
                z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut x = z;
                x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                x ^= x >> 31;
                (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
            })
            .collect()
    }

    fn reference(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn f64_row_major_matches_the_reference_and_overwrites_c() {
        let (m, n, k) = (17, 9, 33);
        let a = values(m * k, 1);
        let b = values(k * n, 2);
        let mut c = vec![f64::NAN; m * n];
        unsafe {
            tessera_rt_gemm_f64(
                m as i64,
                n as i64,
                k as i64,
                a.as_ptr(),
                k as i64,
                1,
                b.as_ptr(),
                n as i64,
                1,
                c.as_mut_ptr(),
                n as i64,
                1,
            )
        };
        for (x, y) in c.iter().zip(reference(m, n, k, &a, &b)) {
            assert!((x - y).abs() <= 1e-12, "{x} vs {y}");
        }
    }

    #[test]
    fn f32_transposed_strides() {
        // A given column-major (a_rs = 1, a_cs = m), C written column-major.
        let (m, n, k) = (5, 7, 3);
        let a64 = values(m * k, 3);
        let b64 = values(k * n, 4);
        let expected = reference(m, n, k, &a64, &b64);
        let mut a_cm = vec![0f32; m * k];
        for i in 0..m {
            for p in 0..k {
                a_cm[p * m + i] = a64[i * k + p] as f32;
            }
        }
        let b: Vec<f32> = b64.iter().map(|&x| x as f32).collect();
        let mut c = vec![f32::NAN; m * n];
        unsafe {
            tessera_rt_gemm_f32(
                m as i64,
                n as i64,
                k as i64,
                a_cm.as_ptr(),
                1,
                m as i64,
                b.as_ptr(),
                n as i64,
                1,
                c.as_mut_ptr(),
                1,
                m as i64,
            )
        };
        for i in 0..m {
            for j in 0..n {
                let got = c[j * m + i] as f64;
                assert!((got - expected[i * n + j]).abs() <= 1e-5, "({i},{j}): {got}");
            }
        }
    }

    #[test]
    fn empty_contraction_gives_zeros_and_negative_sizes_do_nothing() {
        let mut c = vec![f32::NAN; 6];
        let one = [1f32];
        unsafe { tessera_rt_gemm_f32(2, 3, 0, one.as_ptr(), 0, 1, one.as_ptr(), 3, 1, c.as_mut_ptr(), 3, 1) };
        assert!(c.iter().all(|&x| x == 0.0), "{c:?}");
        let mut d = vec![7f32; 4];
        unsafe { tessera_rt_gemm_f32(-1, 2, 2, one.as_ptr(), 2, 1, one.as_ptr(), 2, 1, d.as_mut_ptr(), 2, 1) };
        assert_eq!(d, vec![7.0; 4]);
    }

    #[test]
    fn large_gemm_uses_the_published_pool() {
        let pool = ThreadPool::new(Some(2)).unwrap();
        let (m, n, k) = (96, 80, 128);
        let a = values(m * k, 5);
        let b = values(k * n, 6);
        let mut c = vec![0.0; m * n];
        {
            let _threads = GemmThreads::enter(&pool);
            unsafe {
                tessera_rt_gemm_f64(
                    m as i64,
                    n as i64,
                    k as i64,
                    a.as_ptr(),
                    k as i64,
                    1,
                    b.as_ptr(),
                    n as i64,
                    1,
                    c.as_mut_ptr(),
                    n as i64,
                    1,
                )
            };
        }
        assert!(POOL.with(Cell::get).is_null());
        for (x, y) in c.iter().zip(reference(m, n, k, &a, &b)) {
            assert!((x - y).abs() <= 1e-11, "{x} vs {y}");
        }
    }
}
