//! Splitting a program's kernels among compile threads: both tiers compile kernels side by
//! side on the available cores, in groups of similar size.

use tessera_lower::kernel::{Kernel, Stmt};

/// Threads a compile may use: the cores this process may run on.
pub(crate) fn compile_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Splits kernel indices into at most `groups` non-empty groups of similar total size (longest
/// first, each into the lightest group so far), each ascending; one empty group when there are
/// no kernels.
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
}
