//! Kernels that may write a buffer in the memory of one they read: an optimizer's `p - lr * g`
//! writing its result over the donated `p`. That is safe when every element of the read
//! buffer is read only by the iteration that writes the same element, before it writes it:
//! then no read ever sees a written value, however the grid is split across threads, however
//! a tier vectorizes or unrolls the loops, as long as it does not assume the two buffers
//! apart (`Program::disjoint_launches` then says they may share bytes).

use super::{BufId, CallArg, IndexExpr, IndexSrc, Kernel, MemType, Op, Stmt, VarId};

/// Whether `kernel` computes the same when its buffer `write` lies in the memory of its
/// buffers `reads` (each of them, as the caller passes them) as when it does not.
///
/// The rule, a sufficient one: the kernel stores into `write` in exactly one statement, at an
/// index that visits each element once over the loops enclosing it and the grid (affine in
/// those loop variables, each scaled past the span of the smaller ones); it never loads from
/// `write`; and every load from `reads` is at that same index, in the same iteration of the
/// store's innermost loop, before the store. Runtime calls may not touch any of them.
pub fn updates_in_place(kernel: &Kernel, reads: &[BufId], write: BufId) -> bool {
    let Some(out) = kernel.buffers.get(write.0 as usize) else { return false };
    // A packed store rewrites a whole byte, other elements' bits included.
    if !out.writable || matches!(out.mem, MemType::Packed { .. }) {
        return false;
    }
    let same_buffer = |b: BufId| kernel.buffers.get(b.0 as usize).is_some_and(|k| k.mem == out.mem && k.len == out.len);
    if reads.contains(&write) || !reads.iter().all(|&b| same_buffer(b)) {
        return false;
    }
    let mut walk =
        Walk { reads, write, order: 0, loops: Vec::new(), store: None, stores: 0, loads: Vec::new(), bad: false };
    walk.stmts(&kernel.body);
    let Some(store) = walk.store.filter(|_| walk.stores == 1 && !walk.bad) else { return false };
    let before_store =
        |load: &Access| load.order < store.order && load.index == store.index && load.loops.starts_with(&store.loops);
    if !walk.loads.iter().all(before_store) {
        return false;
    }
    let mut extents = vec![(kernel.grid.var, kernel.grid.extent)];
    extents.extend(store.loops.iter().map(|l| (l.var, l.trip)));
    visits_each_once(&store.index, &extents)
}

/// A loop around an access: its variable and trip count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Enclosing {
    var: VarId,
    trip: i64,
}

/// A load or store: its index, its rank in the statements' pre-order, and its loops,
/// outermost first.
struct Access {
    index: IndexExpr,
    order: usize,
    loops: Vec<Enclosing>,
}

struct Walk<'a> {
    reads: &'a [BufId],
    write: BufId,
    order: usize,
    loops: Vec<Enclosing>,
    store: Option<Access>,
    stores: usize,
    loads: Vec<Access>,
    /// Something the rule refuses: a load of `write`, a call touching the buffers, a store
    /// inside a lane reduction.
    bad: bool,
}

impl Walk<'_> {
    fn access(&self, index: &IndexExpr) -> Access {
        Access { index: index.clone(), order: self.order, loops: self.loops.clone() }
    }

    fn stmts(&mut self, body: &[Stmt]) {
        for stmt in body {
            self.order += 1;
            match stmt {
                Stmt::Let(_, Op::Load { buf, index, .. }) => {
                    if *buf == self.write {
                        self.bad = true;
                    } else if self.reads.contains(buf) {
                        self.loads.push(self.access(index));
                    }
                }
                Stmt::Store { buf, index, .. } if *buf == self.write => {
                    self.stores += 1;
                    self.store = Some(self.access(index));
                }
                Stmt::Call { args, .. } => {
                    let touches = |a: &CallArg| matches!(a, CallArg::Ptr { buf, .. } if *buf == self.write || self.reads.contains(buf));
                    self.bad |= args.iter().any(touches);
                }
                Stmt::Loop(l) => {
                    let depth = self.loops.len();
                    self.loops.push(Enclosing { var: l.var, trip: (l.end - l.start).max(0) });
                    let stores = self.stores;
                    self.stmts(&l.body);
                    // Lanes of a reduction loop run out of iteration order.
                    self.bad |= !l.reductions.is_empty() && self.stores != stores;
                    self.loops.truncate(depth);
                }
                Stmt::If { then_body, else_body, .. } => {
                    self.stmts(then_body);
                    self.stmts(else_body);
                }
                Stmt::Let(..) | Stmt::DeclLocal { .. } | Stmt::SetLocal { .. } | Stmt::Store { .. } => {}
            }
        }
    }
}

/// Whether `index` takes a different value at every point of the box of `extents` (variable,
/// trip count): affine in those variables alone, every variable that runs more than once
/// present, and each scale larger than the span the smaller ones cover.
fn visits_each_once(index: &IndexExpr, extents: &[(VarId, i64)]) -> bool {
    let mut scales: Vec<(i64, i64)> = Vec::with_capacity(extents.len());
    for &(var, trip) in extents {
        let mut scale: i64 = 0;
        for term in &index.terms {
            if term.src == IndexSrc::Var(var) {
                if term.div != 1 || term.modulo.is_some() {
                    return false;
                }
                scale = match scale.checked_add(term.scale) {
                    Some(s) => s,
                    None => return false,
                };
            }
        }
        if trip > 1 {
            scales.push((scale.checked_abs().unwrap_or(0), trip));
        }
    }
    let known = |src: &IndexSrc| matches!(src, IndexSrc::Var(v) if extents.iter().any(|(e, _)| e == v));
    if !index.terms.iter().all(|t| known(&t.src)) {
        return false;
    }
    scales.sort_unstable();
    let mut span: i64 = 0;
    for (scale, trip) in scales {
        if scale <= span {
            return false;
        }
        let Some(reach) = scale.checked_mul(trip - 1).and_then(|r| r.checked_add(span)) else { return false };
        span = reach;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{BinOp, KernelBuilder, Term, Ty};

    fn term(v: VarId, scale: i64) -> Term {
        Term { src: IndexSrc::Var(v), div: 1, modulo: None, scale }
    }

    fn at(terms: &[(VarId, i64)], offset: i64) -> IndexExpr {
        IndexExpr { terms: terms.iter().map(|&(v, s)| term(v, s)).collect(), offset }
    }

    /// `out[g*8 + i] = p[load(g, i)] - g2[g*8 + i]` over a 4x8 grid and loop; `load` gives the
    /// index `p` is read at, `store_first` stores before loading `p`.
    fn update(load: impl Fn(VarId, VarId) -> IndexExpr, store_first: bool) -> (Kernel, BufId, BufId) {
        let mut b = KernelBuilder::new("update", 4);
        let p = b.buffer("p", MemType::Scalar(Ty::F32), 32, false);
        let g2 = b.buffer("g", MemType::Scalar(Ty::F32), 32, false);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), 32, true);
        let g = b.grid_var();
        let i = b.begin_loop(0, 8);
        let here = at(&[(g, 8), (i, 1)], 0);
        let grad = b.load(g2, here.clone());
        if store_first {
            b.store(out, here.clone(), grad);
        }
        let old = b.load(p, load(g, i));
        let new = b.binary(BinOp::Sub, Ty::F32, old, grad);
        if !store_first {
            b.store(out, here, new);
        }
        b.end_loop();
        (b.finish(), p, out)
    }

    #[test]
    fn an_elementwise_update_may_write_over_what_it_reads() {
        let (k, p, out) = update(|g, i| at(&[(g, 8), (i, 1)], 0), false);
        assert!(updates_in_place(&k, &[p], out));
    }

    #[test]
    fn reading_another_element_or_after_the_store_is_refused() {
        let (k, p, out) = update(|g, i| at(&[(g, 8), (i, 1)], 1), false);
        assert!(!updates_in_place(&k, &[p], out), "p[x + 1] may already be written");
        let (k, p, out) = update(|g, i| at(&[(i, 4), (g, 1)], 0), false);
        assert!(!updates_in_place(&k, &[p], out), "a transposed read");
        let (k, p, out) = update(|g, i| at(&[(g, 8), (i, 1)], 0), true);
        assert!(!updates_in_place(&k, &[p], out), "the load comes after the store");
    }

    #[test]
    fn indices_visit_each_element_once_only_when_each_scale_passes_the_smaller_spans() {
        let (g, i) = (VarId(0), VarId(1));
        let box_ = [(g, 4), (i, 8)];
        assert!(visits_each_once(&at(&[(g, 8), (i, 1)], 0), &box_));
        assert!(visits_each_once(&at(&[(g, 1), (i, 4)], 3), &box_), "column order");
        assert!(visits_each_once(&at(&[(g, 9), (i, 1)], 0), &box_), "a padded row");
        assert!(!visits_each_once(&at(&[(g, 7), (i, 1)], 0), &box_), "rows overlap");
        assert!(!visits_each_once(&at(&[(g, 8)], 0), &box_), "every i writes one element");
        assert!(visits_each_once(&at(&[(g, 8)], 0), &[(g, 4), (i, 1)]), "a loop that runs once");
        assert!(!visits_each_once(&at(&[(g, 8), (VarId(7), 1)], 0), &box_), "a variable of another loop");
    }
}
