//! Which kernels a compile makes code for, and on which thread: kernels that compute the same
//! thing (a model's layers lower to the same kernels over different buffers) share one
//! function, and both tiers compile the distinct kernels side by side on the available cores,
//! in groups of similar size.

use tessera_lower::kernel::{Kernel, Stmt};

/// Threads a compile may use: the cores this process may run on.
pub(crate) fn compile_threads() -> usize {
    tessera_runtime::thread_pool::available_cores()
}

/// Splits kernel indices into at most `groups` non-empty groups of similar total size (longest
/// first, each into the lightest group so far), each ascending; one empty group when there are
/// no kernels.
#[cfg(test)]
pub(crate) fn partition(kernels: &[Kernel], groups: usize) -> Vec<Vec<usize>> {
    let all: Vec<usize> = (0..kernels.len()).collect();
    partition_of(kernels, &all, groups)
}

/// [`partition`] of the kernels `subset` names (indices into `kernels`).
pub(crate) fn partition_of(kernels: &[Kernel], subset: &[usize], groups: usize) -> Vec<Vec<usize>> {
    let groups = groups.clamp(1, subset.len().max(1));
    let size = |i: usize| statements(&kernels[i].body);
    let mut order = subset.to_vec();
    order.sort_by_key(|&i| std::cmp::Reverse(size(i)));
    let mut out: Vec<(usize, Vec<usize>)> = vec![(0, Vec::new()); groups];
    for i in order {
        let lightest = out.iter_mut().min_by_key(|(total, _)| *total).expect("groups >= 1");
        lightest.0 += size(i);
        lightest.1.push(i);
    }
    let mut out: Vec<Vec<usize>> = out
        .into_iter()
        .map(|(_, mut g)| {
            g.sort_unstable();
            g
        })
        .filter(|g| !g.is_empty())
        .collect();
    if out.is_empty() {
        out.push(Vec::new());
    }
    out
}

/// For each kernel, the first kernel with the same code: the same grid, body and buffer types,
/// names aside (names are for diagnostics; the code never reads them). A tier compiles only
/// the kernels that are their own representative, and a kernel's symbol is its
/// representative's. A 26-layer decoder lowers to 783 kernels of 25 distinct bodies.
pub(crate) fn representatives(kernels: &[Kernel]) -> Vec<usize> {
    let same_code = |a: &Kernel, b: &Kernel| {
        a.grid == b.grid
            && a.buffers.len() == b.buffers.len()
            && a.buffers
                .iter()
                .zip(&b.buffers)
                .all(|(x, y)| x.mem == y.mem && x.len == y.len && x.writable == y.writable)
            && a.body == b.body
    };
    // Buckets by a cheap key, so only likely duplicates are compared in full.
    let mut buckets: std::collections::HashMap<(usize, usize, i64), Vec<usize>> = Default::default();
    let mut representative = Vec::with_capacity(kernels.len());
    for (i, kernel) in kernels.iter().enumerate() {
        let bucket = buckets.entry((kernel.buffers.len(), statements(&kernel.body), kernel.grid.extent)).or_default();
        match bucket.iter().find(|&&r| same_code(&kernels[r], kernel)) {
            Some(&r) => representative.push(r),
            None => {
                bucket.push(i);
                representative.push(i);
            }
        }
    }
    representative
}

/// The kernels that are their own representative (of [`representatives`]), ascending: those a
/// tier compiles.
pub(crate) fn distinct(representative: &[usize]) -> Vec<usize> {
    (0..representative.len()).filter(|&k| representative[k] == k).collect()
}

/// Whether a kernel is scalar work: one grid index and no loop, so a few hundred operations
/// at most, where optimizing harder buys nothing measurable.
pub(crate) fn is_scalar(kernel: &Kernel) -> bool {
    fn loopless(body: &[Stmt]) -> bool {
        body.iter().all(|s| match s {
            Stmt::Loop(_) => false,
            Stmt::If { then_body, else_body, .. } => loopless(then_body) && loopless(else_body),
            _ => true,
        })
    }
    kernel.grid.extent <= 1 && loopless(&kernel.body)
}

/// Whether a kernel is sequential work: some loop's iterations choose their path by state the
/// earlier ones left (it branches on a value computed from a local it reads, and sets a local
/// declared outside it under that branch: the cursors of a merge, a search's bounds). Neither
/// lowering nor LLVM's vectorizers can run such iterations side by side, and such a loop is
/// where the kernel spends its time.
pub(crate) fn is_sequential(kernel: &Kernel) -> bool {
    use std::collections::HashSet;
    use tessera_lower::kernel::{IndexSrc, LocalId, Op, ValueId};
    /// The state of one loop's walk: locals it declares, values computed from locals.
    struct Walk {
        inner: HashSet<LocalId>,
        stateful: HashSet<ValueId>,
    }
    /// Whether `body` sets a local declared outside the loop under a branch on state.
    fn walk(body: &[Stmt], w: &mut Walk, under_state: bool) -> bool {
        for s in body {
            match s {
                Stmt::Let(id, op) => {
                    let from_index = |index: &tessera_lower::kernel::IndexExpr| {
                        index.terms.iter().any(|t| matches!(t.src, IndexSrc::Value(v) if w.stateful.contains(&v)))
                    };
                    let stateful = match op {
                        Op::GetLocal(_) => true,
                        Op::Load { index, .. } | Op::Index(index) => from_index(index),
                        _ => op.operands().iter().any(|v| w.stateful.contains(v)),
                    };
                    if stateful {
                        w.stateful.insert(*id);
                    }
                }
                Stmt::DeclLocal { local, .. } => {
                    w.inner.insert(*local);
                }
                Stmt::SetLocal { local, .. } if under_state && !w.inner.contains(local) => return true,
                Stmt::If { cond, then_body, else_body } => {
                    let on_state = under_state || w.stateful.contains(cond);
                    if walk(then_body, w, on_state) || walk(else_body, w, on_state) {
                        return true;
                    }
                }
                Stmt::Loop(l) if walk(&l.body, w, under_state) => return true,
                _ => {}
            }
        }
        false
    }
    fn any_loop(body: &[Stmt]) -> bool {
        body.iter().any(|s| match s {
            Stmt::Loop(l) => {
                let mut w = Walk { inner: HashSet::new(), stateful: HashSet::new() };
                walk(&l.body, &mut w, false) || any_loop(&l.body)
            }
            Stmt::If { then_body, else_body, .. } => any_loop(then_body) || any_loop(else_body),
            _ => false,
        })
    }
    any_loop(&kernel.body)
}

/// Statements a kernel executes in one launch, its whole grid and every loop iteration
/// counted (an `if` as its larger branch, a runtime call as one statement): how much work
/// its code does, as a run-time estimate. Saturates rather than overflows.
pub(crate) fn work(kernel: &Kernel) -> u64 {
    fn body_work(body: &[Stmt]) -> u64 {
        body.iter().fold(0u64, |sum, s| {
            let here = match s {
                Stmt::Loop(l) => {
                    let trips = u64::try_from(l.end.saturating_sub(l.start)).unwrap_or(0);
                    trips.saturating_mul(body_work(&l.body)).saturating_add(1)
                }
                Stmt::If { then_body, else_body, .. } => 1 + body_work(then_body).max(body_work(else_body)),
                _ => 1,
            };
            sum.saturating_add(here)
        })
    }
    u64::try_from(kernel.grid.extent.max(1)).unwrap_or(1).saturating_mul(body_work(&kernel.body))
}

/// The most kernel-IR statements a scalar kernel may have to be inlined into an entry (LLVM
/// compiles it into the entry's module, where its inliner, whose threshold is a few hundred
/// instructions, may inline it; Cranelift translates it into the entry at each direct launch).
pub(crate) const INLINED_STATEMENTS: usize = 100;

/// The most statements a scalar kernel launched in a while loop may bring into the entry,
/// over all its launch sites, to be inlined whatever its own size: a step of a scalar loop (a
/// `sin` with its range reductions) then runs in the loop's own code, without a call and a
/// buffer table per step, and its results reach the next step without a trip through memory.
/// The bound keeps the copies from growing the entry without limit (a kernel launched from
/// many steps stays a call).
pub(crate) const HOT_INLINED_STATEMENTS: usize = 2000;

/// Statements in a body, nested ones included: a kernel's size, as a compile-cost estimate.
pub(crate) fn statements(body: &[Stmt]) -> usize {
    body.iter()
        .map(|s| {
            1 + match s {
                Stmt::Loop(l) => statements(&l.body),
                Stmt::If { then_body, else_body, .. } => statements(then_body) + statements(else_body),
                _ => 0,
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernels_with_the_same_code_share_a_representative() {
        use tessera_lower::kernel::{IndexExpr, KernelBuilder, MemType, Ty};
        // `copy(n, offset)`: out[0] = in[offset], over buffers of `n` elements.
        let copy = |name: &str, n: i64, offset: i64| {
            let mut b = KernelBuilder::new(name, 1);
            let input = b.buffer(&format!("{name}_in"), MemType::Scalar(Ty::F32), n, false);
            let out = b.buffer(&format!("{name}_out"), MemType::Scalar(Ty::F32), n, true);
            let v = b.load(input, IndexExpr::constant(offset));
            b.store(out, IndexExpr::constant(0), v);
            b.finish()
        };
        let kernels = [copy("a", 4, 1), copy("b", 4, 1), copy("c", 4, 2), copy("d", 8, 1), copy("e", 4, 2)];
        // Names differ everywhere; only the offset and the buffer sizes make code differ.
        assert_eq!(super::representatives(&kernels), vec![0, 0, 2, 3, 2]);
        assert!(super::representatives(&[]).is_empty());
    }

    use super::*;
    use tessera_lower::kernel::random::random_kernel;

    #[test]
    fn every_kernel_lands_in_exactly_one_balanced_group() {
        let kernels: Vec<Kernel> = (0..9).map(random_kernel).collect();
        for groups in [1, 2, 3, 16] {
            let parts = partition(&kernels, groups);
            assert_eq!(parts.len(), groups.min(kernels.len()));
            let mut seen: Vec<usize> = parts.iter().flatten().copied().collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..kernels.len()).collect::<Vec<_>>());
            assert!(parts.iter().all(|g| !g.is_empty() && g.windows(2).all(|w| w[0] < w[1])));
            // Longest-first greedy: no group exceeds the lightest by more than the largest kernel.
            let size = |g: &Vec<usize>| g.iter().map(|&i| statements(&kernels[i].body)).sum::<usize>();
            let largest = kernels.iter().map(|k| statements(&k.body)).max().unwrap();
            let (lo, hi) = (parts.iter().map(size).min().unwrap(), parts.iter().map(size).max().unwrap());
            assert!(hi - lo <= largest, "{groups} groups: sizes {lo}..{hi}, largest kernel {largest}");
        }
        assert_eq!(partition(&[], 4), vec![Vec::<usize>::new()]);
    }

    #[test]
    fn sequential_kernels_branch_on_state_their_loops_carry() {
        use tessera_lower::kernel::{CmpOp, Const, IndexExpr, KernelBuilder, MemType, Ty};
        // `for v in 0..n { if cond(v, state) { state = v } }; out[0] = state`, where the
        // condition reads the carried state (a merge's cursor) or only the index (a window
        // inside its padding, accumulating under the branch).
        let kernel = |reads_state: bool| {
            let mut b = KernelBuilder::new("k", 1);
            let input = b.buffer("in", MemType::Scalar(Ty::I64), 64, false);
            let out = b.buffer("out", MemType::Scalar(Ty::I64), 1, true);
            let zero = b.constant(Const::Int { ty: Ty::I64, bits: 0 });
            let state = b.local(Ty::I64, zero);
            let v = b.begin_loop(0, 64);
            let x = b.load(input, IndexExpr::var(v, 1));
            let against = if reads_state { b.get_local(state) } else { zero };
            let cond = b.cmp(CmpOp::Slt, Ty::I64, against, x);
            b.if_else(cond, |b| b.set_local(state, x), |_| {});
            b.end_loop();
            let last = b.get_local(state);
            b.store(out, IndexExpr::constant(0), last);
            b.finish()
        };
        assert!(super::is_sequential(&kernel(true)));
        assert!(!super::is_sequential(&kernel(false)));
    }

    #[test]
    fn work_counts_every_statement_a_launch_executes() {
        use tessera_lower::kernel::{CmpOp, Const, IndexExpr, KernelBuilder, MemType, Ty};
        // Over a grid of 4: a constant, a local, `for v in 0..10 { load; compare; if { set } }`,
        // a read of the local and a store.
        let mut b = KernelBuilder::new("k", 4);
        let input = b.buffer("in", MemType::Scalar(Ty::I64), 10, false);
        let out = b.buffer("out", MemType::Scalar(Ty::I64), 4, true);
        let zero = b.constant(Const::Int { ty: Ty::I64, bits: 0 });
        let state = b.local(Ty::I64, zero);
        let v = b.begin_loop(0, 10);
        let x = b.load(input, IndexExpr::var(v, 1));
        let cond = b.cmp(CmpOp::Slt, Ty::I64, zero, x);
        b.if_else(cond, |b| b.set_local(state, x), |_| {});
        b.end_loop();
        let last = b.get_local(state);
        let g = b.grid_var();
        b.store(out, IndexExpr::var(g, 1), last);
        // Each launch: 2 + (1 + 10 * (1 + 1 + (1 + 1))) + 2 = 45 statements.
        assert_eq!(super::work(&b.finish()), 4 * 45);
    }
}
