//! The convolution runtime functions kernels call for large f32/f64 convolutions (DESIGN.md
//! section 6), as im2col blocks times the packed kernel on the `gemm` crate's micro-kernels.
//!
//! Contract of `tessera_rt_conv_f32(desc, lhs, rhs, out)` (and `_f64`): `desc` points at
//! i64s, a header — spatial rank N, input batch, input batch stride, input feature stride,
//! kernel input features (one group), kernel input-feature stride, output features (all
//! groups), kernel output-feature stride, output batch, output batch stride, output feature
//! stride, feature group count, batch group count — then per spatial dimension: input size,
//! input stride, kernel size, kernel stride, output size, output stride, window stride, low
//! padding, base (lhs) dilation, window (rhs) dilation, reversal (0/1). Strides are in
//! elements. Every logical output element is overwritten with XLA's convolution; the output
//! must not overlap the operands. (The kernel interpreter runs the same contract directly.)
//!
//! Work: the kernel is packed once per call as one `[taps * in, out]` matrix per group, rows
//! in window-position order (reversal applied while packing). The output points are cut into
//! blocks of rows; for each block the input patches are gathered (zeros where the window
//! falls in padding or between dilated input elements), a run of points along the last
//! spatial dimension at a time, so each window position of the leading dimensions is located
//! once per run, and multiplied by the packed kernel.
//! A block whose output rows are one strided run is written in place; otherwise it goes
//! through a small buffer. An input whose batch dimension is the contiguous one (the
//! forward pass's channels, in a weight gradient) is gathered by columns instead: a block is
//! a run of batch indices at one output position, and each window position and input feature
//! is one contiguous copy into a column-major patch. Blocks are handed to the executable's pool threads (the one
//! [`crate::gemm::GemmThreads`] published) from a shared counter. Scratch memory is
//! thread-local and only grows, so warmed-up calls do not allocate.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use gemm::Parallelism;

const HEADER: usize = 13;
const PER_DIM: usize = 11;

/// Patch blocks aim at this many bytes (they stay in L2 while the GEMM reads them).
const BLOCK_BYTES: usize = 512 * 1024;
/// Below this much work a call stays on one thread: multiply-adds, plus `GATHER_WEIGHT` for
/// each patch element gathered. A gathered element (index tables, padding checks, a scattered
/// load) costs about as much as 16 multiply-adds in the micro-kernels: LeNet's first
/// convolution (one input feature, 25 taps, 6 outputs; 0.47M multiply-adds) spent 124 of its
/// 170 us gathering, on one thread.
const PARALLEL_MIN_WORK: u128 = 1 << 20;
const GATHER_WEIGHT: u128 = 16;

thread_local! {
    /// The calling thread's packed kernel and index tables.
    static SHARED: RefCell<(Vec<f64>, Vec<i64>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// Each working thread's patch block and output block.
    static WORK: RefCell<(Vec<f64>, Vec<f64>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

#[derive(Clone)]
struct Dim {
    in_size: i64,
    in_stride: i64,
    k_size: i64,
    k_stride: i64,
    out_size: i64,
    out_stride: i64,
    stride: i64,
    pad_low: i64,
    lhs_dil: i64,
    rhs_dil: i64,
    reverse: bool,
}

#[derive(Clone)]
struct Desc {
    batch: i64,
    in_batch_stride: i64,
    in_feature_stride: i64,
    group_in: i64,
    k_in_stride: i64,
    out_features: i64,
    k_out_stride: i64,
    out_batch: i64,
    out_batch_stride: i64,
    out_feature_stride: i64,
    fgc: i64,
    bgc: i64,
    dims: Vec<Dim>,
}

/// Reads a descriptor; `None` when it is inconsistent (there is no error channel across the C
/// ABI, and a valid kernel never passes one).
///
/// # Safety
/// `d` must point at a whole descriptor.
unsafe fn read_desc(d: *const i64) -> Option<Desc> {
    // SAFETY: the caller's contract covers the header and the records its rank announces.
    let n = usize::try_from(unsafe { *d }).ok().filter(|&n| n <= 64)?;
    let d = unsafe { std::slice::from_raw_parts(d, HEADER + n * PER_DIM) };
    let dims: Vec<Dim> = d[HEADER..]
        .chunks_exact(PER_DIM)
        .map(|r| Dim {
            in_size: r[0],
            in_stride: r[1],
            k_size: r[2],
            k_stride: r[3],
            out_size: r[4],
            out_stride: r[5],
            stride: r[6],
            pad_low: r[7],
            lhs_dil: r[8],
            rhs_dil: r[9],
            reverse: r[10] != 0,
        })
        .collect();
    let desc = Desc {
        batch: d[1],
        in_batch_stride: d[2],
        in_feature_stride: d[3],
        group_in: d[4],
        k_in_stride: d[5],
        out_features: d[6],
        k_out_stride: d[7],
        out_batch: d[8],
        out_batch_stride: d[9],
        out_feature_stride: d[10],
        fgc: d[11],
        bgc: d[12],
        dims,
    };
    let small = |x: i64| (0..1i64 << 40).contains(&x);
    let ok = small(desc.batch)
        && small(desc.group_in)
        && small(desc.out_features)
        && (1..1 << 20).contains(&desc.fgc)
        && (1..1 << 20).contains(&desc.bgc)
        && (desc.fgc == 1 || desc.bgc == 1)
        && desc.out_features % (desc.fgc * desc.bgc) == 0
        && desc.batch % desc.bgc == 0
        && desc.out_batch == desc.batch / desc.bgc
        && desc.dims.iter().all(|x| {
            small(x.in_size)
                && small(x.k_size)
                && small(x.out_size)
                && [x.stride, x.lhs_dil, x.rhs_dil].iter().all(|&v| (1..=1 << 30).contains(&v))
                && x.pad_low.abs() <= 1 << 30
        });
    ok.then_some(desc)
}

/// f32 and f64, the element types the GEMM micro-kernels take.
trait Elem: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn is_finite(self) -> bool;
    fn to_f64(self) -> f64;
    fn from_f64(x: f64) -> Self;
}
impl Elem for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
}
impl Elem for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> f64 {
        x
    }
}

/// `v` grown to hold `n` elements of `T`, viewed as them.
fn view<T: Elem>(v: &mut Vec<f64>, n: usize) -> &mut [T] {
    let words = (n * std::mem::size_of::<T>()).div_ceil(8);
    if v.len() < words {
        v.resize(words, 0.0);
    }
    // SAFETY: f64 storage is aligned for f32 and f64, and holds at least `n` elements of `T`
    // (every bit pattern is a valid float).
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<T>(), n) }
}

#[derive(Clone, Copy)]
struct Ptr<T>(*mut T);
// SAFETY: shared with the pool threads only for the duration of a call the caller waits for;
// the threads write disjoint output rows.
unsafe impl<T> Send for Ptr<T> {}
unsafe impl<T> Sync for Ptr<T> {}

/// What every block needs, shared by the threads of one call.
struct Plan<T> {
    lhs: Ptr<T>,
    out: Ptr<T>,
    /// Packed kernel: `groups` matrices of `k x kg`.
    w: Ptr<T>,
    /// Per spatial dimension, `out_size * k_size` input offsets (or -1: no input element).
    tables: Vec<Ptr<i64>>,
    k: usize,
    kg: usize,
    points: usize,
    block: usize,
    /// Output rows within a run of this many points are `row_stride` apart.
    run: usize,
    row_stride: i64,
    /// Runs are too short for in-place blocks.
    scatter: bool,
    /// Blocks are runs of this many consecutive batch indices at one spatial output position
    /// (`run_batch_block`), or 0 for blocks of points in point order (`run_block`).
    batch_rows: usize,
}

/// The convolution `desc` describes.
///
/// # Safety
/// The contract in the module doc.
unsafe fn conv<T: Elem>(desc: *const i64, lhs: *const T, rhs: *const T, out: *mut T) {
    let Some(d) = (unsafe { read_desc(desc) }) else { return };
    // SAFETY: the call's contract.
    unsafe { conv_phases(&d, lhs, rhs, out) }
}

/// The convolution `d`, a dimension with base (lhs) dilation `n` and window stride 1 (a
/// transposed convolution: the gradient of a strided one with respect to its input) taken as
/// `n` convolutions of the undilated input, one per phase of the output positions: output
/// position `o = q + n*j` meets input elements only at the window positions `t` with
/// `o - pad_low + t = n*i`, that is `t = t0 + n*m` for the one `t0 < n` that makes it so, at
/// input element `i = j + m + c` (`c = (q - pad_low + t0) / n`). So phase `q` is a plain
/// convolution over every `n`-th output position, with every `n`-th window position from
/// `t0` and padding `-c`. The blocks would otherwise gather and multiply the zeros between
/// the dilated elements: with a dilation of 2 in two dimensions, three quarters of the work.
/// Each phase is one convolution, threaded as any other; a phase whose window is empty gets
/// zeros.
///
/// # Safety
/// The call's contract, for `d`.
unsafe fn conv_phases<T: Elem>(d: &Desc, lhs: *const T, rhs: *const T, out: *mut T) {
    let Some(s) = d.dims.iter().position(|x| x.lhs_dil > 1 && x.stride == 1 && x.rhs_dil == 1 && !x.reverse) else {
        // SAFETY: the call's contract.
        return unsafe { conv_desc(d, lhs, rhs, out) };
    };
    let x = &d.dims[s];
    let n = x.lhs_dil;
    for q in 0..n.min(x.out_size) {
        let t0 = (x.pad_low - q).rem_euclid(n);
        let mut phase = d.clone();
        phase.dims[s] = Dim {
            k_size: if t0 < x.k_size { (x.k_size - t0 + n - 1) / n } else { 0 },
            k_stride: x.k_stride * n,
            out_size: (x.out_size - q + n - 1) / n,
            out_stride: x.out_stride * n,
            pad_low: -((q - x.pad_low + t0) / n),
            lhs_dil: 1,
            ..x.clone()
        };
        // SAFETY: the phase's kernel and output elements are the call's (window position t0
        // on, output position q on), so its contract holds.
        unsafe {
            conv_phases(
                &phase,
                lhs,
                rhs.wrapping_offset((t0 * x.k_stride) as isize),
                out.wrapping_offset((q * x.out_stride) as isize),
            )
        };
    }
}

/// The convolution `d` (any dilations) by blocks, or the direct loops.
///
/// # Safety
/// The call's contract, for `d`.
unsafe fn conv_desc<T: Elem>(d: &Desc, lhs: *const T, rhs: *const T, out: *mut T) {
    let groups = (d.fgc * d.bgc) as usize;
    let kg = d.out_features as usize / groups;
    let gi = d.group_in as usize;
    let taps: usize = d.dims.iter().map(|x| x.k_size as usize).product();
    let k = taps * gi;
    let points = d.dims.iter().map(|x| x.out_size as usize).product::<usize>() * d.out_batch as usize;
    if points == 0 || kg == 0 {
        return;
    }
    if k == 0 {
        // An empty window (a phase of a transposed convolution that no window position
        // meets) sums nothing.
        for p in 0..points {
            for of in 0..d.out_features {
                // SAFETY: a logical output element by the contract.
                unsafe { *out.offset((point_offset(d, p) + of * d.out_feature_stride) as isize) = T::ZERO };
            }
        }
        return;
    }
    SHARED.with(|shared| {
        let mut shared = shared.borrow_mut();
        let (wbuf, ibuf) = &mut *shared;
        let w = view::<T>(wbuf, groups * k * kg);
        // Packed kernel row `t * gi + i` holds window position `t` (row-major over the spatial
        // dimensions) and input feature `i`.
        let mut pos = vec![0i64; d.dims.len()];
        for t in 0..taps {
            let mut rest = t as i64;
            let mut koff = 0;
            for (s, x) in d.dims.iter().enumerate().rev() {
                pos[s] = rest % x.k_size;
                rest /= x.k_size;
                let kr = if x.reverse { x.k_size - 1 - pos[s] } else { pos[s] };
                koff += kr * x.k_stride;
            }
            for i in 0..gi {
                for g in 0..groups {
                    let row = &mut w[(g * k + t * gi + i) * kg..][..kg];
                    for (o, slot) in row.iter_mut().enumerate() {
                        let e = koff + i as i64 * d.k_in_stride + (g * kg + o) as i64 * d.k_out_stride;
                        // SAFETY: inside the kernel operand by the contract.
                        *slot = unsafe { *rhs.offset(e as isize) };
                    }
                }
            }
        }
        // The blocks multiply padding zeros by every kernel value, where the reference skips
        // the padding: with an infinite or NaN kernel value that would be NaN instead of a
        // number, so such kernels take the direct loops.
        if w.iter().any(|x| !x.is_finite()) {
            // SAFETY: the call's contract.
            unsafe { direct(d, lhs, rhs, out) };
            return;
        }
        let table_len: usize = d.dims.iter().map(|x| (x.out_size * x.k_size) as usize).sum();
        if ibuf.len() < table_len {
            ibuf.resize(table_len, 0);
        }
        let mut tables = Vec::with_capacity(d.dims.len());
        let mut at = 0;
        for x in &d.dims {
            let n = (x.out_size * x.k_size) as usize;
            let t = &mut ibuf[at..at + n];
            for o in 0..x.out_size {
                for kk in 0..x.k_size {
                    let p = o * x.stride - x.pad_low + kk * x.rhs_dil;
                    let valid = p >= 0 && p % x.lhs_dil == 0 && p / x.lhs_dil < x.in_size;
                    t[(o * x.k_size + kk) as usize] = if valid { p / x.lhs_dil * x.in_stride } else { -1 };
                }
            }
            tables.push(Ptr(t.as_mut_ptr()));
            at += n;
        }
        // Runs of output points with one row stride: the longest suffix of (batch, spatial..)
        // whose strides nest.
        let mut order = vec![(d.out_batch, d.out_batch_stride)];
        order.extend(d.dims.iter().map(|x| (x.out_size, x.out_stride)));
        let mut run = 1usize;
        let mut row_stride = 0i64;
        for &(size, stride) in order.iter().rev() {
            if size == 1 {
                continue;
            }
            if run == 1 {
                row_stride = stride;
            } else if stride != row_stride * run as i64 {
                break;
            }
            run *= size as usize;
        }
        let block = (BLOCK_BYTES / (k.max(1) * std::mem::size_of::<T>())).clamp(16, 1024);
        // An input whose batch dimension is its contiguous one (a weight gradient: the
        // forward pass's channels are this convolution's batch) gathers whole runs of batch
        // indices per window position, one contiguous copy each, where point-order patch rows
        // would read a cache line per element.
        let batch_rows = if d.in_batch_stride == 1 && d.in_feature_stride != 1 && d.out_batch >= 16 {
            block.clamp(32, 128).min(d.out_batch as usize)
        } else {
            0
        };
        let plan = Plan {
            lhs: Ptr(lhs as *mut T),
            out: Ptr(out),
            w: Ptr(w.as_mut_ptr()),
            tables,
            k,
            kg,
            points,
            block,
            run,
            row_stride,
            scatter: run < block / 4,
            batch_rows,
        };
        let blocks = if batch_rows > 0 { batch_blocks(d, batch_rows) } else { blocks(&plan) };
        let tasks = blocks.len() * groups;
        let next = AtomicUsize::new(0);
        let work = || {
            WORK.with(|work| {
                let mut work = work.borrow_mut();
                let (pbuf, cbuf) = &mut *work;
                loop {
                    let task = next.fetch_add(1, Ordering::Relaxed);
                    if task >= tasks {
                        break;
                    }
                    let (g, (p0, p1)) = (task / blocks.len(), blocks[task % blocks.len()]);
                    // SAFETY: the call's contract; tasks write disjoint output elements.
                    unsafe {
                        if plan.batch_rows > 0 {
                            run_batch_block(d, &plan, g, p0, p1, pbuf)
                        } else {
                            run_block(d, &plan, g, p0, p1, pbuf, cbuf)
                        }
                    };
                }
            })
        };
        let gathered = points as u128 * k as u128 * groups as u128;
        let macs = points as u128 * k as u128 * d.out_features as u128;
        let pool = crate::gemm::published_pool();
        // SAFETY: a published pool outlives the run that published it.
        let pool = if pool.is_null() || macs + GATHER_WEIGHT * gathered < PARALLEL_MIN_WORK {
            None
        } else {
            Some(unsafe { &*pool })
        };
        match pool {
            Some(pool) if pool.threads() > 1 && tasks > 1 => pool.run_chunks(pool.threads().min(tasks), |_| work()),
            _ => work(),
        }
    });
}

/// The convolution as direct loops over the window positions that land on input elements,
/// summed in f64 (the reference's order and skipping), on the calling thread.
///
/// # Safety
/// The call's contract.
unsafe fn direct<T: Elem>(d: &Desc, lhs: *const T, rhs: *const T, out: *mut T) {
    let groups = d.fgc * d.bgc;
    let kg = d.out_features / groups;
    let n = d.dims.len();
    let points: i64 = d.dims.iter().map(|x| x.out_size).product::<i64>() * d.out_batch;
    let taps: i64 = d.dims.iter().map(|x| x.k_size).product();
    let (mut os, mut kr) = (vec![0i64; n], vec![0i64; n]);
    for p in 0..points {
        let mut rest = p;
        for s in (0..n).rev() {
            os[s] = rest % d.dims[s].out_size;
            rest /= d.dims[s].out_size;
        }
        let ob = rest;
        let out_base = point_offset(d, p as usize);
        for of in 0..d.out_features {
            let grp = of / kg;
            let (b, f0) = if d.fgc > 1 { (ob, grp * d.group_in) } else { (grp * (d.batch / d.bgc) + ob, 0) };
            let mut acc = 0.0f64;
            for t in 0..taps {
                let mut rest = t;
                let (mut in_off, mut k_off, mut valid) = (b * d.in_batch_stride, of * d.k_out_stride, true);
                for s in (0..n).rev() {
                    let x = &d.dims[s];
                    kr[s] = rest % x.k_size;
                    rest /= x.k_size;
                    let tap = if x.reverse { x.k_size - 1 - kr[s] } else { kr[s] };
                    let pos = os[s] * x.stride - x.pad_low + tap * x.rhs_dil;
                    if pos < 0 || pos % x.lhs_dil != 0 || pos / x.lhs_dil >= x.in_size {
                        valid = false;
                        break;
                    }
                    in_off += pos / x.lhs_dil * x.in_stride;
                    k_off += kr[s] * x.k_stride;
                }
                if !valid {
                    continue;
                }
                for i in 0..d.group_in {
                    // SAFETY: operand elements by the contract.
                    let (a, w) = unsafe {
                        (
                            *lhs.offset((in_off + (f0 + i) * d.in_feature_stride) as isize),
                            *rhs.offset((k_off + i * d.k_in_stride) as isize),
                        )
                    };
                    acc += a.to_f64() * w.to_f64();
                }
            }
            // SAFETY: a logical output element by the contract.
            unsafe { *out.offset((out_base + of * d.out_feature_stride) as isize) = T::from_f64(acc) };
        }
    }
}

/// Point ranges of the blocks: within one run unless the runs are short.
fn blocks<T>(plan: &Plan<T>) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(plan.points / plan.block + 1);
    let mut p = 0;
    while p < plan.points {
        let end = if plan.scatter { p + plan.block } else { (p + plan.block).min((p / plan.run + 1) * plan.run) };
        let end = end.min(plan.points);
        out.push((p, end));
        p = end;
    }
    out
}

/// Gathers the patches of output points `p0..p1` for group `g` and multiplies them by the
/// group's packed kernel into the output.
///
/// # Safety
/// The call's contract; no other thread writes these output rows of this group.
#[allow(clippy::too_many_arguments)]
unsafe fn run_block<T: Elem>(
    d: &Desc,
    plan: &Plan<T>,
    g: usize,
    p0: usize,
    p1: usize,
    pbuf: &mut Vec<f64>,
    cbuf: &mut Vec<f64>,
) {
    let (k, kg, rows) = (plan.k, plan.kg, p1 - p0);
    let gi = d.group_in as usize;
    let n = d.dims.len();
    let patch = view::<T>(pbuf, rows * k);
    let mut os = [0i64; 8];
    let mut os_heap = Vec::new();
    let os: &mut [i64] = if n <= 8 {
        &mut os[..n]
    } else {
        os_heap.resize(n, 0);
        &mut os_heap
    };
    let mut rest = p0 as i64;
    for s in (0..n).rev() {
        os[s] = rest % d.dims[s].out_size;
        rest /= d.dims[s].out_size;
    }
    let mut ob = rest;
    let mut out_off = Vec::with_capacity(if plan.scatter { rows } else { 0 });
    let mut r = 0;
    while r < rows {
        // A run of rows that differ only in the last spatial output position.
        let len = match n {
            0 => 1,
            _ => ((d.dims[n - 1].out_size - os[n - 1]) as usize).min(rows - r),
        };
        let b = if d.fgc > 1 { ob } else { g as i64 * (d.batch / d.bgc) + ob };
        let f0 = if d.fgc > 1 { (g * gi) as i64 } else { 0 };
        let base = b * d.in_batch_stride + f0 * d.in_feature_stride;
        if plan.scatter {
            let o = ob * d.out_batch_stride + os.iter().zip(&d.dims).map(|(&o, x)| o * x.out_stride).sum::<i64>();
            let step = d.dims.last().map_or(0, |x| x.out_stride);
            out_off.extend((0..len as i64).map(|i| o + i * step));
        }
        gather_run(d, plan, os, base, &mut patch[r * k..(r + len) * k]);
        r += len;
        // Next output point, the last spatial dimension fastest.
        let mut s = n;
        let mut carry = len as i64;
        loop {
            if s == 0 {
                ob += carry;
                break;
            }
            s -= 1;
            os[s] += carry;
            if os[s] < d.dims[s].out_size {
                break;
            }
            carry = os[s] / d.dims[s].out_size;
            os[s] %= d.dims[s].out_size;
        }
    }
    let fo = (g * kg) as i64 * d.out_feature_stride;
    let w = plan.w.0.wrapping_add(g * k * kg);
    if plan.scatter {
        let c = view::<T>(cbuf, rows * kg);
        // SAFETY: all three matrices are in bounds (scratch sized above, packed kernel).
        unsafe { gemm_into(rows, kg, k, (patch.as_ptr(), k as isize, 1), w, c.as_mut_ptr(), kg as isize, 1) };
        for (r, &o) in out_off.iter().enumerate() {
            for j in 0..kg {
                // SAFETY: a logical output element by the contract.
                unsafe { *plan.out.0.offset((o + fo + j as i64 * d.out_feature_stride) as isize) = c[r * kg + j] };
            }
        }
    } else {
        let first = point_offset(d, p0) + fo;
        let c = plan.out.0.wrapping_offset(first as isize);
        // SAFETY: the rows form one strided run of logical output elements.
        unsafe {
            gemm_into(
                rows,
                kg,
                k,
                (patch.as_ptr(), k as isize, 1),
                w,
                c,
                plan.row_stride as isize,
                d.out_feature_stride as isize,
            )
        };
    }
}

/// The blocks of the batch-run form: for each spatial output position (the last spatial
/// dimension fastest), runs of `rows` batch indices, as (position * out_batch + first batch,
/// same + rows).
fn batch_blocks(d: &Desc, rows: usize) -> Vec<(usize, usize)> {
    let positions: usize = d.dims.iter().map(|x| x.out_size as usize).product();
    let batch = d.out_batch as usize;
    let mut out = Vec::with_capacity(positions * batch.div_ceil(rows));
    for p in 0..positions {
        let mut b = 0;
        while b < batch {
            let end = (b + rows).min(batch);
            out.push((p * batch + b, p * batch + end));
            b = end;
        }
    }
    out
}

/// The batch-run form's block `q0..q1` (`batch_blocks`) for group `g`: the patches of batch
/// indices `b0..b1` at one spatial output position, gathered column by column (for each
/// window position and input feature, the run of batch indices is one contiguous copy) into a
/// column-major matrix, multiplied by the packed kernel straight into the output, whose rows
/// are the batch indices' output points, `out_batch_stride` apart.
///
/// # Safety
/// The call's contract; no other thread writes these output points of this group.
unsafe fn run_batch_block<T: Elem>(d: &Desc, plan: &Plan<T>, g: usize, q0: usize, q1: usize, pbuf: &mut Vec<f64>) {
    let (k, kg) = (plan.k, plan.kg);
    let batch = d.out_batch as usize;
    let (position, b0, rows) = (q0 / batch, (q0 % batch) as i64, q1 - q0);
    let gi = d.group_in as usize;
    let n = d.dims.len();
    let patch = view::<T>(pbuf, rows * k);
    let mut os = vec![0i64; n];
    let mut rest = position as i64;
    for s in (0..n).rev() {
        os[s] = rest % d.dims[s].out_size;
        rest /= d.dims[s].out_size;
    }
    let first_b = if d.fgc > 1 { b0 } else { g as i64 * (d.batch / d.bgc) + b0 };
    let f0 = if d.fgc > 1 { (g * gi) as i64 } else { 0 };
    let base = first_b * d.in_batch_stride + f0 * d.in_feature_stride;
    let taps = k / gi.max(1);
    let mut kk = vec![0i64; n];
    for t in 0..taps {
        let mut off = Some(base);
        for s in 0..n {
            let x = &d.dims[s];
            // SAFETY: the table holds out_size * k_size entries.
            let e = unsafe { *plan.tables[s].0.add((os[s] * x.k_size + kk[s]) as usize) };
            off = off.filter(|_| e >= 0).map(|o| o + e);
        }
        for i in 0..gi {
            let col = &mut patch[(t * gi + i) * rows..][..rows];
            match off {
                Some(o) => {
                    let src = plan.lhs.0.wrapping_offset((o + i as i64 * d.in_feature_stride) as isize);
                    // SAFETY: `rows` consecutive batch indices of one input point and feature,
                    // inside the input by the contract and the tables' validity checks.
                    col.copy_from_slice(unsafe { std::slice::from_raw_parts(src, rows) });
                }
                None => col.fill(T::ZERO),
            }
        }
        // Next window position, the last spatial dimension fastest (the packed kernel's order).
        let mut s = n;
        while s > 0 {
            s -= 1;
            kk[s] += 1;
            if kk[s] < d.dims[s].k_size {
                break;
            }
            kk[s] = 0;
        }
    }
    let spatial: i64 = os.iter().zip(&d.dims).map(|(&o, x)| o * x.out_stride).sum();
    let first = b0 * d.out_batch_stride + spatial + (g * kg) as i64 * d.out_feature_stride;
    let w = plan.w.0.wrapping_add(g * k * kg);
    let c = plan.out.0.wrapping_offset(first as isize);
    // SAFETY: the patch (column-major, `rows` apart), the packed kernel and the block's output
    // points are all in bounds.
    unsafe {
        gemm_into(
            rows,
            kg,
            k,
            (patch.as_ptr(), 1, rows as isize),
            w,
            c,
            d.out_batch_stride as isize,
            d.out_feature_stride as isize,
        )
    }
}

/// Element offset of output point `p` (batch-major, last spatial dimension fastest).
fn point_offset(d: &Desc, p: usize) -> i64 {
    let mut rest = p as i64;
    let mut off = 0;
    for x in d.dims.iter().rev() {
        off += rest % x.out_size * x.out_stride;
        rest /= x.out_size;
    }
    off + rest * d.out_batch_stride
}

/// Patch rows for a run of output points that differ only in their last spatial position
/// (`os` is the first's; `rows` holds one patch row per point): for each window position
/// (row-major), the group's input features at the input element it lands on, or zeros. A
/// window position of the leading dimensions is worked out once per run (its offset and
/// whether it lands inside), then its positions along the last dimension are copied into
/// every row of the run (with one input feature, a position is one load).
fn gather_run<T: Elem>(d: &Desc, plan: &Plan<T>, os: &[i64], base: i64, rows: &mut [T]) {
    let gi = d.group_in as usize;
    let n = d.dims.len();
    let fs = d.in_feature_stride as isize;
    let k = plan.k;
    if gi == 0 || k == 0 || rows.is_empty() {
        return;
    }
    if n == 0 {
        // SAFETY: the input point's features by the contract.
        unsafe { copy_features(rows, plan.lhs.0.offset(base as isize), fs) };
        return;
    }
    let last = &d.dims[n - 1];
    let kl = last.k_size as usize;
    let seg = kl * gi;
    let mut kk = [0i64; 8];
    let mut kk_heap = Vec::new();
    let kk: &mut [i64] = if n <= 9 {
        &mut kk[..n - 1]
    } else {
        kk_heap.resize(n - 1, 0);
        &mut kk_heap
    };
    for j in 0..k / seg {
        let mut off = base;
        let mut valid = true;
        for s in 0..n - 1 {
            let x = &d.dims[s];
            // SAFETY: the table holds out_size * k_size entries.
            let e = unsafe { *plan.tables[s].0.add((os[s] * x.k_size + kk[s]) as usize) };
            if e < 0 {
                valid = false;
                break;
            }
            off += e;
        }
        let src = plan.lhs.0.wrapping_offset(off as isize);
        for (i, row) in rows.chunks_exact_mut(k).enumerate() {
            let dst = &mut row[j * seg..(j + 1) * seg];
            if !valid {
                dst.fill(T::ZERO);
                continue;
            }
            // SAFETY: the table holds out_size * k_size entries; this is the run's i-th output
            // position's.
            let inner = unsafe {
                std::slice::from_raw_parts(
                    plan.tables[n - 1].0.add(((os[n - 1] + i as i64) * last.k_size) as usize),
                    kl,
                )
            };
            if gi == 1 {
                for (v, &e) in dst.iter_mut().zip(inner) {
                    // SAFETY: an input element by the contract and the tables' validity checks.
                    *v = if e < 0 { T::ZERO } else { unsafe { *src.offset(e as isize) } };
                }
            } else {
                for (v, &e) in dst.chunks_exact_mut(gi).zip(inner) {
                    if e < 0 {
                        v.fill(T::ZERO);
                    } else {
                        // SAFETY: an input element by the contract and the tables' validity checks.
                        unsafe { copy_features(v, src.offset(e as isize), fs) };
                    }
                }
            }
        }
        // Next window position of the leading dimensions, the last of them fastest.
        let mut s = n - 1;
        while s > 0 {
            s -= 1;
            kk[s] += 1;
            if kk[s] < d.dims[s].k_size {
                break;
            }
            kk[s] = 0;
        }
    }
}

/// `dst.len()` input features starting at `src`, `fs` elements apart.
///
/// # Safety
/// Every addressed element must be readable.
#[inline(always)]
unsafe fn copy_features<T: Elem>(dst: &mut [T], src: *const T, fs: isize) {
    match dst {
        // SAFETY: the caller's contract, for every arm.
        [one] => *one = unsafe { *src },
        _ if fs == 1 => dst.copy_from_slice(unsafe { std::slice::from_raw_parts(src, dst.len()) }),
        _ => {
            for (i, v) in dst.iter_mut().enumerate() {
                *v = unsafe { *src.offset(i as isize * fs) };
            }
        }
    }
}

/// `C = A·B` with `A` an `m×k` patch block (element `(i, q)` at `a + i*a_rs + q*a_cs`) and `B`
/// a row-major `k×n` packed kernel, on the current thread.
///
/// # Safety
/// Every addressed element must be valid.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_into<T: Elem>(
    m: usize,
    n: usize,
    k: usize,
    (a, a_rs, a_cs): (*const T, isize, isize),
    b: *const T,
    c: *mut T,
    c_rs: isize,
    c_cs: isize,
) {
    // SAFETY: the caller's contract. With `read_dst = false` gemm computes `C = 1 * A·B`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            c_cs,
            c_rs,
            false,
            a,
            a_cs,
            a_rs,
            b,
            1,
            n as isize,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}

/// The f32 convolution (contract in the module doc).
///
/// # Safety
/// `desc` must hold a whole descriptor; every element it addresses through `lhs` and `rhs`
/// must be readable and every logical output element through `out` writable, not overlapping
/// the operands.
#[no_mangle]
pub unsafe extern "C" fn tessera_rt_conv_f32(desc: *const i64, lhs: *const f32, rhs: *const f32, out: *mut f32) {
    unsafe { conv(desc, lhs, rhs, out) }
}

/// [`tessera_rt_conv_f32`] for f64.
///
/// # Safety
/// As for [`tessera_rt_conv_f32`].
#[no_mangle]
pub unsafe extern "C" fn tessera_rt_conv_f64(desc: *const i64, lhs: *const f64, rhs: *const f64, out: *mut f64) {
    unsafe { conv(desc, lhs, rhs, out) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::GemmThreads;
    use crate::ThreadPool;
    use tessera_testkit::Rng;

    /// A deterministic pseudo-random sequence in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| rng.unit_f32() * 2.0 - 1.0).collect()
    }

    /// NHWC input, HWIO kernel, NHWC output; `fgc` feature groups; window per spatial dim:
    /// (stride, pad_low, pad_high, lhs_dil, rhs_dil, reverse).
    fn nhwc(
        b: i64,
        hw: [i64; 2],
        c: i64,
        k: [i64; 2],
        o: i64,
        fgc: i64,
        win: [(i64, i64, i64, i64, i64, bool); 2],
    ) -> (Vec<i64>, usize, usize, usize) {
        let gi = c / fgc;
        let out: Vec<i64> = (0..2)
            .map(|s| {
                let (st, lo, hi, ld, rd, _) = win[s];
                let padded = (hw[s] - 1) * ld + 1 + lo + hi;
                let dk = (k[s] - 1) * rd + 1;
                if padded < dk {
                    0
                } else {
                    (padded - dk) / st + 1
                }
            })
            .collect();
        let mut d = vec![2, b, hw[0] * hw[1] * c, 1, gi, o, o, 1, b, out[0] * out[1] * o, 1, fgc, 1];
        let kstr = [k[1] * gi * o, gi * o];
        let istr = [hw[1] * c, c];
        let ostr = [out[1] * o, o];
        for s in 0..2 {
            let (st, lo, _, ld, rd, rev) = win[s];
            d.extend([hw[s], istr[s], k[s], kstr[s], out[s], ostr[s], st, lo, ld, rd, i64::from(rev)]);
        }
        let n_in = (b * hw[0] * hw[1] * c) as usize;
        let n_k = (k[0] * k[1] * gi * o) as usize;
        let n_out = (b * out[0] * out[1] * o) as usize;
        (d, n_in, n_k, n_out)
    }

    #[test]
    fn blocks_match_the_direct_loops_on_one_and_two_threads() {
        let pool = ThreadPool::new(Some(2)).unwrap();
        let cases = [
            nhwc(2, [9, 8], 8, [3, 3], 16, 1, [(1, 1, 1, 1, 1, false), (2, 0, 2, 1, 2, true)]),
            nhwc(3, [7, 7], 12, [2, 3], 8, 2, [(2, -1, 2, 2, 1, false), (1, 2, 1, 1, 1, false)]),
            nhwc(4, [20, 20], 16, [3, 3], 32, 1, [(1, 1, 1, 1, 1, false), (1, 1, 1, 1, 1, false)]),
            // One input feature per group (the one-load gather): LeNet's first layer, and a
            // depthwise convolution with dilation, reversal and padding on both sides.
            nhwc(4, [28, 28], 1, [5, 5], 6, 1, [(1, 2, 2, 1, 1, false); 2]),
            nhwc(2, [9, 9], 4, [3, 3], 4, 4, [(1, 1, 1, 1, 1, false), (2, 1, 0, 2, 2, true)]),
            // Transposed convolutions (base dilation, window stride 1), taken by phases: JAX's
            // conv_transpose with stride 2 and SAME padding; a dilation of 3 with windows
            // shorter than it (phases no window position meets get zeros) and a negative
            // padding; grouped, with a dilation of 2 in one dimension only.
            nhwc(2, [7, 6], 8, [3, 3], 16, 1, [(1, 2, 1, 2, 1, false); 2]),
            nhwc(1, [5, 4], 4, [2, 1], 8, 1, [(1, 0, 0, 3, 1, false), (1, -1, 1, 2, 1, false)]),
            nhwc(2, [6, 5], 6, [3, 2], 4, 2, [(1, 1, 1, 2, 1, false), (1, 1, 0, 1, 1, false)]),
        ];
        for (desc, n_in, n_k, n_out) in cases {
            let x = values(n_in, 1);
            let w = values(n_k, 2);
            let mut want = vec![f32::NAN; n_out];
            let d = unsafe { read_desc(desc.as_ptr()) }.unwrap();
            unsafe { direct(&d, x.as_ptr(), w.as_ptr(), want.as_mut_ptr()) };
            for threads in [false, true] {
                let _guard = threads.then(|| GemmThreads::enter(&pool));
                let mut got = vec![f32::NAN; n_out];
                unsafe { tessera_rt_conv_f32(desc.as_ptr(), x.as_ptr(), w.as_ptr(), got.as_mut_ptr()) };
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "element {i}: {a} vs {b} (threads: {threads})");
                }
            }
        }
    }

    /// `nhwc`'s convolution reading its input laid out feature-major with the batch
    /// contiguous (`f01b`, a weight gradient's input), which takes the batch-run form.
    fn batch_minor(b: i64, hw: [i64; 2], c: i64, k: [i64; 2], o: i64, fgc: i64) -> (Vec<i64>, usize, usize, usize) {
        let (mut d, n_in, n_k, n_out) = nhwc(b, hw, c, k, o, fgc, [(1, 1, 1, 1, 1, false), (2, 0, 1, 1, 1, false)]);
        d[2] = 1;
        d[3] = hw[0] * hw[1] * b;
        d[HEADER + 1] = hw[1] * b;
        d[HEADER + PER_DIM + 1] = b;
        (d, n_in, n_k, n_out)
    }

    #[test]
    fn batch_runs_match_the_direct_loops_on_one_and_two_threads() {
        let pool = ThreadPool::new(Some(2)).unwrap();
        // 16 and 40 batch indices (one run, and runs of 32 and 8), grouped features.
        for (desc, n_in, n_k, n_out) in
            [batch_minor(16, [6, 5], 3, [3, 2], 8, 1), batch_minor(40, [5, 7], 4, [2, 3], 6, 2)]
        {
            let d = unsafe { read_desc(desc.as_ptr()) }.unwrap();
            assert!(d.in_batch_stride == 1 && d.out_batch >= 16);
            let x = values(n_in, 5);
            let w = values(n_k, 6);
            let mut want = vec![f32::NAN; n_out];
            unsafe { direct(&d, x.as_ptr(), w.as_ptr(), want.as_mut_ptr()) };
            for threads in [false, true] {
                let _guard = threads.then(|| GemmThreads::enter(&pool));
                let mut got = vec![f32::NAN; n_out];
                unsafe { tessera_rt_conv_f32(desc.as_ptr(), x.as_ptr(), w.as_ptr(), got.as_mut_ptr()) };
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "element {i}: {a} vs {b} (threads: {threads})");
                }
            }
        }
    }

    #[test]
    fn inconsistent_descriptors_do_nothing() {
        let (mut desc, n_in, n_k, n_out) = nhwc(1, [4, 4], 2, [3, 3], 2, 1, [(1, 1, 1, 1, 1, false); 2]);
        // Three output features cannot split into two feature groups.
        desc[6] = 3;
        desc[11] = 2;
        let (x, w) = (values(n_in, 3), values(n_k.max(64), 4));
        let mut out = vec![7.0f32; n_out];
        unsafe { tessera_rt_conv_f32(desc.as_ptr(), x.as_ptr(), w.as_ptr(), out.as_mut_ptr()) };
        assert!(out.iter().all(|&v| v == 7.0));
    }
}
