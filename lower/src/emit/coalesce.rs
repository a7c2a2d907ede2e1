//! Loop coalescing on a finished kernel: a plain loop whose whole body is a vector loop, where
//! every address and index value moves by the inner loop's extent times as much per outer step
//! as per inner step, becomes one vector loop over both. The nest follows the output's
//! physical dimensions, so the minor dimensions of a row-major `f32[4,16,40]` are two loops, 16
//! rows of 40 lanes that each end in a scalar remainder; coalesced they are one loop of 640
//! lanes with none. A tiled layout's in-tile loops (bf16 in `T(8,128)(2,1)`: 128 columns of
//! two-lane pairs) become the tile's run of contiguous elements, vectorized at full width.
//! The grid coalesces with a kernel's only loop the same way, a few of its indices at a time:
//! an `f32[N,3]` runs strips of rows as one loop rather than one 3-element loop per grid index.
//!
//! The coalesced loop visits the same iterations in the same order (m = B·a + b), so every
//! tier and the interpreter compute exactly what they computed before; only the lanes grouped
//! together change, which a plain vector loop allows (its width is a hint). That requires the
//! iterations of different outer steps to be as independent as the inner loop's: no lane
//! reductions, no local carried across iterations, and each buffer the body writes accessed
//! at a single index.

use std::collections::HashSet;

use super::nest;
use crate::kernel::{CallArg, IndexExpr, IndexSrc, Kernel, LocalId, Loop, MemType, Op, Stmt, Tail, ValueId, VarId};

pub fn coalesce(kernel: &mut Kernel) {
    let body = std::mem::take(&mut kernel.body);
    kernel.body = walk(body);
    into_grid(kernel);
}

/// A grid whose every index runs one plain vector loop of a few elements (an `f32[N,3]`: a
/// grid of N rows of 3) takes `k` of its indices into that loop, `k` dividing its extent: the
/// loop covers `k` rows as one run of up to [`nest::MAX_STRIP`] elements, and the grid keeps
/// at least [`nest::MIN_GRID`] indices for the threads. The grid variable's terms scale by `k`.
/// Only rows shorter than [`SHORT_ROW`] elements: in longer ones the remainder and the loop's
/// set-up are a small share of a row.
fn into_grid(kernel: &mut Kernel) {
    let grid = kernel.grid.extent;
    let mut loops = kernel.body.iter_mut().filter(|s| !matches!(s, Stmt::Let(_, Op::Const(_))));
    let (Some(Stmt::Loop(inner)), None) = (loops.next(), loops.next()) else { return };
    let rows = inner.end - inner.start;
    if rows >= SHORT_ROW {
        return;
    }
    let Some(bits) = qualifies(kernel.grid.var, 0, grid, inner) else { return };
    let most = (nest::MAX_STRIP / rows).min(grid / nest::MIN_GRID);
    let Some(k) = (2..=most).rev().find(|k| grid % k == 0) else { return };
    scale_var(&mut inner.body, kernel.grid.var, k);
    stretch(inner, rows * k, bits);
    kernel.grid.extent = grid / k;
}

/// The longest loop [`into_grid`] coalesces with the grid.
pub(crate) const SHORT_ROW: i64 = 128;

fn walk(stmts: Vec<Stmt>) -> Vec<Stmt> {
    stmts
        .into_iter()
        .map(|s| match s {
            Stmt::Loop(mut l) => {
                l.body = walk(std::mem::take(&mut l.body));
                Stmt::Loop(merged(l))
            }
            Stmt::If { cond, then_body, else_body } => {
                Stmt::If { cond, then_body: walk(then_body), else_body: walk(else_body) }
            }
            s => s,
        })
        .collect()
}

/// `outer` with its inner loop coalesced into it, when it qualifies (module doc); else as is.
fn merged(mut outer: Loop) -> Loop {
    let plan = match outer.body.as_slice() {
        [Stmt::Loop(inner)] if outer.vector_width == 1 && outer.reductions.is_empty() => {
            let bits = qualifies(outer.var, outer.start, outer.end, inner);
            bits.zip((outer.end - outer.start).checked_mul(inner.end - inner.start))
        }
        _ => None,
    };
    let Some((bits, trips)) = plan else { return outer };
    let Some(Stmt::Loop(mut inner)) = outer.body.pop() else { return outer };
    scale_var(&mut inner.body, outer.var, 0);
    stretch(&mut inner, trips, bits);
    inner
}

/// Whether a variable `a` over `start..end` (a plain loop's or the grid's) and the plain vector
/// loop `inner` it runs coalesce (module doc): the widest element `inner` stores, in bits.
fn qualifies(a: VarId, start: i64, end: i64, inner: &Loop) -> Option<u32> {
    let inner_trips = inner.end - inner.start;
    if start != 0 || end - start < 2 || inner.start != 0 || inner_trips < 1 {
        return None;
    }
    if inner.vector_width <= 1 || !inner.reductions.is_empty() {
        return None;
    }
    // A padded tail (a trip count the width does not divide, with no remainder loop) would
    // land inside the coalesced loop.
    if inner.tail == Tail::None && inner_trips % i64::from(inner.vector_width) != 0 {
        return None;
    }
    let mut scan = Scan {
        a,
        b: inner.var,
        extent: inner_trips,
        ok: true,
        store_bits: None,
        accesses: Vec::new(),
        declared: HashSet::new(),
        set: HashSet::new(),
        defined: HashSet::new(),
    };
    scan.body(&inner.body);
    if !scan.ok || !scan.independent() {
        return None;
    }
    scan.store_bits
}

/// `inner` as the coalesced loop of `trips` iterations, as wide as the nest would have made a
/// loop of that length storing `bits`-bit elements (never narrower than it was).
fn stretch(inner: &mut Loop, trips: i64, bits: u32) {
    inner.end = trips;
    inner.vector_width = inner.vector_width.max(nest::vector_width(bits, trips));
    inner.tail = if trips % i64::from(inner.vector_width) == 0 { Tail::None } else { Tail::Peel };
}

/// What the inner body does with the two loop variables, its buffers and its locals.
struct Scan {
    a: VarId,
    b: VarId,
    extent: i64,
    ok: bool,
    /// The widest element the body stores, in bits: what the nest chose the width by.
    store_bits: Option<u32>,
    /// Every buffer access: (buffer, index, whether it writes).
    accesses: Vec<(u32, IndexExpr, bool)>,
    declared: HashSet<LocalId>,
    set: HashSet<LocalId>,
    /// The values the body defines: an index term reading one may differ between iterations.
    defined: HashSet<ValueId>,
}

impl Scan {
    fn body(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            match s {
                Stmt::Let(v, op) => {
                    match op {
                        Op::Load { buf, index, mem } => self.access(buf.0, index, *mem, false),
                        Op::Index(index) => self.index(index),
                        _ => {}
                    }
                    self.defined.insert(*v);
                }
                Stmt::Store { buf, index, mem, .. } => {
                    self.access(buf.0, index, *mem, true);
                    let bits = match mem {
                        MemType::Scalar(t) => t.bits(),
                        _ => 8,
                    };
                    self.store_bits = Some(self.store_bits.unwrap_or(0).max(bits));
                }
                Stmt::Loop(l) => {
                    if !l.reductions.is_empty() {
                        self.ok = false;
                    }
                    self.body(&l.body);
                }
                Stmt::If { then_body, else_body, .. } => {
                    self.body(then_body);
                    self.body(else_body);
                }
                Stmt::DeclLocal { local, .. } => {
                    self.declared.insert(*local);
                }
                Stmt::SetLocal { local, .. } => {
                    self.set.insert(*local);
                }
                // A runtime call's pointers may reach anything.
                Stmt::Call { args, .. } => {
                    if args.iter().any(|c| matches!(c, CallArg::Ptr { .. })) {
                        self.ok = false;
                    }
                }
            }
        }
    }

    fn access(&mut self, buf: u32, index: &IndexExpr, mem: MemType, write: bool) {
        // Sub-byte elements share bytes, which only whole iterations of the nest keep apart.
        if matches!(mem, MemType::Packed { .. }) {
            self.ok = false;
        }
        self.index(index);
        self.accesses.push((buf, index.clone(), write));
    }

    /// Whether `e` moves by `extent` times as much per step of `a` as per step of `b`, both
    /// without division or remainder: then it is affine in `extent·a + b`.
    fn index(&mut self, e: &IndexExpr) {
        let (mut ca, mut cb) = (0i64, 0i64);
        for t in &e.terms {
            let IndexSrc::Var(v) = t.src else { continue };
            if v != self.a && v != self.b {
                continue;
            }
            if t.div != 1 || t.modulo.is_some() {
                self.ok = false;
                return;
            }
            if v == self.a {
                ca += t.scale;
            } else {
                cb += t.scale;
            }
        }
        if cb.checked_mul(self.extent) != Some(ca) {
            self.ok = false;
        }
    }

    /// No local carries a value from one iteration to the next, and each buffer the body
    /// writes is read and written at one index only, affine in the coalesced variable with an
    /// offset the same for every iteration (no term reads a value the body computes, such as a
    /// scatter's row from an index array): then no iteration touches an element another one
    /// writes.
    fn independent(&self) -> bool {
        if !self.set.is_subset(&self.declared) {
            return false;
        }
        let written: HashSet<u32> = self.accesses.iter().filter(|x| x.2).map(|x| x.0).collect();
        let uniform =
            |e: &IndexExpr| e.terms.iter().all(|t| !matches!(t.src, IndexSrc::Value(v) if self.defined.contains(&v)));
        written.iter().all(|&w| {
            let mut at = self.accesses.iter().filter(|x| x.0 == w).map(|x| &x.1);
            let first = at.next();
            first.is_none_or(uniform) && at.all(|i| Some(i) == first)
        })
    }
}

/// Multiplies `var`'s terms in every index in `stmts` by `k`: by 0, what is left moves by
/// the coalesced loop's variable (the inner one) exactly as the two did together.
fn scale_var(stmts: &mut [Stmt], var: VarId, k: i64) {
    let scale = |e: &mut IndexExpr| {
        for t in &mut e.terms {
            if t.src == IndexSrc::Var(var) {
                t.scale *= k;
            }
        }
        e.terms.retain(|t| t.src != IndexSrc::Var(var) || t.scale != 0);
    };
    for s in stmts {
        match s {
            Stmt::Let(_, Op::Load { index, .. }) | Stmt::Let(_, Op::Index(index)) => scale(index),
            Stmt::Store { index, .. } => scale(index),
            Stmt::Loop(l) => scale_var(&mut l.body, var, k),
            Stmt::If { then_body, else_body, .. } => {
                scale_var(then_body, var, k);
                scale_var(else_body, var, k);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{BinOp, KernelBuilder, Ty};

    /// `for a in 0..6 { for b in 0..5 vector(4) peel { out[a*5 + b] = f(in[idx(a, b)]) } }`,
    /// with `f` adding a local when `carry` (declared outside the nest), as text after
    /// coalescing.
    fn nest(idx: impl Fn(VarId, VarId) -> IndexExpr, out_idx: Option<IndexExpr>, carry: bool) -> String {
        let mut b = KernelBuilder::new("k", 1);
        let input = b.buffer("in", MemType::Scalar(Ty::F32), 64, false);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), 64, true);
        let zero = b.constant(crate::kernel::Const::F32(0));
        let acc = b.local(Ty::F32, zero);
        let va = b.begin_loop(0, 6);
        let vb = b.begin_loop(0, 5);
        let x = b.load(input, idx(va, vb));
        let x = if carry {
            let s = b.get_local(acc);
            let s = b.binary(BinOp::Add, Ty::F32, s, x);
            b.set_local(acc, s);
            s
        } else {
            x
        };
        let at = out_idx.clone().unwrap_or_else(|| lin(&[(va, 5), (vb, 1)], 0));
        b.store(out, at, x);
        b.end_loop_vectorized(4, Tail::Peel);
        b.end_loop();
        let mut k = b.finish();
        coalesce(&mut k);
        k.to_string()
    }

    fn lin(terms: &[(VarId, i64)], offset: i64) -> IndexExpr {
        let mut e = IndexExpr::constant(offset);
        for &(v, s) in terms {
            e.terms.extend(IndexExpr::var(v, s).terms);
        }
        e
    }

    fn loops(text: &str) -> Vec<String> {
        text.lines().filter(|l| l.trim_start().starts_with("for ")).map(|l| l.trim().to_string()).collect()
    }

    #[test]
    fn contiguous_nests_become_one_vector_loop() {
        // Read at the written index, or shifted by a constant: affine in 5a + b.
        for offset in [0, 7] {
            let text = nest(|a, b| lin(&[(a, 5), (b, 1)], offset), None, false);
            assert_eq!(loops(&text), ["for v2 in 0..30 vector(16) peel {"], "{text}");
            assert!(text.contains(&format!("load.f32 b0[v2{}]", if offset == 0 { "" } else { " + 7" })), "{text}");
            assert!(text.contains("store.f32 b1[v2]"), "{text}");
        }
        // A load strided by 2 (a complex part, every other element) is affine in 5a + b too.
        let text = nest(|a, b| lin(&[(a, 10), (b, 2)], 0), None, false);
        assert_eq!(loops(&text), ["for v2 in 0..30 vector(16) peel {"], "{text}");
        assert!(text.contains("load.f32 b0[v2*2]"), "{text}");
    }

    #[test]
    fn nests_that_are_not_one_run_stay_nested() {
        let kept = ["for v1 in 0..6 {", "for v2 in 0..5 vector(4) peel {"];
        // A row broadcast (index by b only), a column broadcast (by a only), a padded row
        // (a moves by 8, not 5), and a division.
        let cases: Vec<Box<dyn Fn(VarId, VarId) -> IndexExpr>> = vec![
            Box::new(|_, b| lin(&[(b, 1)], 0)),
            Box::new(|a, _| lin(&[(a, 1)], 0)),
            Box::new(|a, b| lin(&[(a, 8), (b, 1)], 0)),
            Box::new(|a, b| {
                let mut e = lin(&[(a, 5), (b, 1)], 0);
                e.terms[1].div = 2;
                e
            }),
        ];
        for idx in cases {
            assert_eq!(loops(&nest(idx, None, false)), kept);
        }
        // A local carried from iteration to iteration.
        assert_eq!(loops(&nest(|a, b| lin(&[(a, 5), (b, 1)], 0), None, true)), kept);
    }

    #[test]
    fn a_buffer_read_where_another_iteration_writes_stays_nested() {
        // out[5a + b] = out[5a + b - 2]-style recurrences: the written buffer read at a second
        // index, which lanes of one wide vector would read before they are written.
        let mut b = KernelBuilder::new("k", 1);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), 64, true);
        let va = b.begin_loop(0, 6);
        let vb = b.begin_loop(0, 5);
        let x = b.load(out, lin(&[(va, 5), (vb, 1)], 2));
        b.store(out, lin(&[(va, 5), (vb, 1)], 0), x);
        b.end_loop_vectorized(4, Tail::Peel);
        b.end_loop();
        let mut k = b.finish();
        coalesce(&mut k);
        assert_eq!(loops(&k.to_string()), ["for v1 in 0..6 {", "for v2 in 0..5 vector(4) peel {"]);
    }

    #[test]
    fn a_write_at_a_row_the_body_reads_from_memory_stays_nested() {
        // out[rows[5a + b] + 5a + b] += 1: the offset read per iteration may send two
        // iterations to one element, as a scatter's duplicate indices do.
        let mut b = KernelBuilder::new("k", 1);
        let rows = b.buffer("rows", MemType::Scalar(Ty::I64), 30, false);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), 64, true);
        let one = b.constant(crate::kernel::Const::F32(1f32.to_bits()));
        let va = b.begin_loop(0, 6);
        let vb = b.begin_loop(0, 5);
        let row = b.load(rows, lin(&[(va, 5), (vb, 1)], 0));
        let mut at = lin(&[(va, 5), (vb, 1)], 0);
        at.terms.push(crate::kernel::Term { src: IndexSrc::Value(row), div: 1, modulo: None, scale: 1 });
        let x = b.load(out, at.clone());
        let x = b.binary(BinOp::Add, Ty::F32, x, one);
        b.store(out, at, x);
        b.end_loop_vectorized(4, Tail::Peel);
        b.end_loop();
        let mut k = b.finish();
        coalesce(&mut k);
        assert_eq!(loops(&k.to_string()), ["for v1 in 0..6 {", "for v2 in 0..5 vector(4) peel {"]);
    }

    /// A grid of `rows` indices, each copying its row of 3 (`in` read at `in_scale` per row),
    /// as text after coalescing.
    fn rows(rows: i64, in_scale: i64) -> String {
        let mut b = KernelBuilder::new("k", rows);
        let input = b.buffer("in", MemType::Scalar(Ty::F32), rows * 3, false);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), rows * 3, true);
        let g = b.grid_var();
        let v = b.begin_loop(0, 3);
        let x = b.load(input, lin(&[(g, in_scale), (v, 1)], 0));
        b.store(out, lin(&[(g, 3), (v, 1)], 0), x);
        b.end_loop_vectorized(2, Tail::Peel);
        let mut k = b.finish();
        coalesce(&mut k);
        k.to_string()
    }

    #[test]
    fn a_grid_of_short_rows_runs_strips_of_rows() {
        // 4096 rows of 3: 256 rows a grid index (768 elements; 4096 / 256 = 16 indices left).
        let text = rows(4096, 3);
        assert!(text.contains("grid g0 in 0..16"), "{text}");
        assert!(text.contains("for v1 in 0..768 vector(16) {"), "{text}");
        assert!(text.contains("load.f32 b0[g0*768 + v1]"), "{text}");
        // 262144 rows: at most 2048 elements a strip, so 512 rows (1536 elements).
        let text = rows(262_144, 3);
        assert!(text.contains("grid g0 in 0..512"), "{text}");
        assert!(text.contains("for v1 in 0..1536 vector(16) {"), "{text}");
        // A prime number of rows has no strip that divides it; a row read at another stride
        // is not one run with the others.
        for (n, scale) in [(4099, 3), (4096, 4)] {
            let text = rows(n, scale);
            assert!(text.contains(&format!("grid g0 in 0..{n}")), "{text}");
            assert!(text.contains("for v1 in 0..3 vector(2) peel {"), "{text}");
        }
    }

    #[test]
    fn empty_loops_are_left_alone() {
        let mut b = KernelBuilder::new("k", 64);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), 64, true);
        let zero = b.constant(crate::kernel::Const::F32(0));
        let v = b.begin_loop(0, 0);
        b.store(out, IndexExpr::var(v, 1), zero);
        b.end_loop_vectorized(4, Tail::None);
        let mut k = b.finish();
        let before = k.to_string();
        coalesce(&mut k);
        assert_eq!(k.to_string(), before);
    }
}
