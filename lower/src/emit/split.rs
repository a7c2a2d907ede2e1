//! Index-set splitting on a finished kernel: an innermost vector loop whose branches test its
//! own variable against constants (a pad's "inside the source?", a concatenate's "which
//! operand?") runs as consecutive loops over the ranges where every such test is constant,
//! each with the branches it no longer needs removed. A `jnp.pad` of a concatenate,
//! f32[2048,2048] to f32[2050,2052], tested each element twice and read it under a branch, so
//! neither tier vectorized its row loop: split, each row is four branch-free loops (pad,
//! first operand, second operand, pad).
//!
//! The loops visit the same iterations in the same order, so every tier and the interpreter
//! compute exactly what they computed before; only the lanes grouped together change, which a
//! plain vector loop allows (its width is a hint). Lane reductions fix their grouping, so
//! loops with them stay whole, and so do loops shorter than `coalesce::SHORT_ROW`.
//!
//! A test qualifies when one side is the loop variable plus or minus a constant (`Op::Index`
//! of it, directly or through other such values) and the other a constant, compared as signed
//! 64-bit integers; what a branch's condition combines with it (`and`, `or`, `xor`, `not` of
//! predicates) folds once it is constant.

use std::collections::{HashMap, HashSet};

use super::coalesce::SHORT_ROW;
use crate::kernel::{
    definitions, BinOp, CallArg, CmpOp, Const, IndexExpr, IndexSrc, Kernel, LocalId, Loop, Op, Stmt, Tail, Ty, UnOp,
    ValueId, VarId,
};

/// The most ranges one loop splits into: each is a copy of the body.
const MAX_PIECES: usize = 6;
/// The most statements the pieces of one loop may hold beyond the loop's own: the branches a
/// piece no longer needs go, so a concatenate's pieces hold about what its loop held however
/// large each operand's code (two operands' `sin` and `cos`, 700 statements), while a large
/// body that every piece keeps whole stays one loop.
const MAX_ADDED: usize = 256;

pub fn split_loops(kernel: &mut Kernel) {
    let mut ids = NextIds::of(kernel);
    let consts = int_constants(&kernel.body);
    let body = std::mem::take(&mut kernel.body);
    kernel.body = walk(body, &consts, &mut ids);
}

/// Fresh ids past every id the kernel uses (ids are unique kernel-wide).
struct NextIds {
    value: u32,
    local: u32,
    var: u32,
}

impl NextIds {
    fn of(kernel: &Kernel) -> NextIds {
        fn scan(stmts: &[Stmt], n: &mut NextIds) {
            for s in stmts {
                match s {
                    Stmt::Let(v, _) => n.value = n.value.max(v.0.saturating_add(1)),
                    Stmt::DeclLocal { local, .. } => n.local = n.local.max(local.0.saturating_add(1)),
                    Stmt::Loop(l) => {
                        n.var = n.var.max(l.var.0.saturating_add(1));
                        scan(&l.body, n);
                    }
                    Stmt::If { then_body, else_body, .. } => {
                        scan(then_body, n);
                        scan(else_body, n);
                    }
                    _ => {}
                }
            }
        }
        // The grid variable is v0.
        let mut n = NextIds { value: 0, local: 0, var: 1 };
        scan(&kernel.body, &mut n);
        n
    }
}

/// Every integer constant of the kernel, by value id.
fn int_constants(stmts: &[Stmt]) -> HashMap<ValueId, i64> {
    fn scan(stmts: &[Stmt], out: &mut HashMap<ValueId, i64>) {
        for s in stmts {
            match s {
                Stmt::Let(v, Op::Const(Const::Int { bits, .. })) => {
                    out.insert(*v, *bits);
                }
                Stmt::Loop(l) => scan(&l.body, out),
                Stmt::If { then_body, else_body, .. } => {
                    scan(then_body, out);
                    scan(else_body, out);
                }
                _ => {}
            }
        }
    }
    let mut out = HashMap::new();
    scan(stmts, &mut out);
    out
}

fn walk(stmts: Vec<Stmt>, consts: &HashMap<ValueId, i64>, ids: &mut NextIds) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::Loop(mut l) => {
                l.body = walk(std::mem::take(&mut l.body), consts, ids);
                match split(&l, consts, ids) {
                    Some(pieces) => out.extend(pieces.into_iter().map(Stmt::Loop)),
                    None => out.push(Stmt::Loop(l)),
                }
            }
            Stmt::If { cond, then_body, else_body } => out.push(Stmt::If {
                cond,
                then_body: walk(then_body, consts, ids),
                else_body: walk(else_body, consts, ids),
            }),
            s => out.push(s),
        }
    }
    out
}

/// A test of the loop variable `v`: `sign * v + offset  op  constant`.
#[derive(Clone, Copy)]
struct Test {
    sign: i64,
    offset: i64,
    op: CmpOp,
    constant: i64,
}

impl Test {
    /// The test's answer at `v`, as the interpreter compares.
    fn holds(self, v: i64) -> bool {
        let x = self.sign.saturating_mul(v).saturating_add(self.offset);
        crate::kernel::interp::cmp(self.op, Ty::I64, x as u64, self.constant as u64)
    }

    /// Where the test changes its answer: each `v` with `holds(v) != holds(v - 1)` (one for
    /// an ordering, two for an equality).
    fn breaks(self) -> impl Iterator<Item = i64> {
        // sign is 1 or -1, so v = sign * (constant - offset) solves x = constant; the answer
        // changes there or next to it.
        let at = self.sign.saturating_mul(self.constant.saturating_sub(self.offset));
        (-1..=2).map(move |d| at.saturating_add(d)).filter(move |&v| self.holds(v) != self.holds(v.saturating_sub(1)))
    }
}

/// Loop `l` as consecutive loops over the ranges where each test of its variable that a
/// branch condition reads is constant (module doc), or `None` when it stays whole.
fn split(l: &Loop, consts: &HashMap<ValueId, i64>, ids: &mut NextIds) -> Option<Vec<Loop>> {
    // A loop shorter than a short row may run several rows as one loop instead
    // (`coalesce::into_grid`), which pieces would prevent, and its pieces would be a vector or
    // two each.
    if l.vector_width < 2 || !l.reductions.is_empty() || l.end - l.start < SHORT_ROW {
        return None;
    }
    if !innermost(&l.body) {
        return None;
    }
    let mut defs: HashMap<ValueId, &Op> = HashMap::new();
    definitions(&l.body, &mut defs);
    let mut affine: HashMap<ValueId, Option<(i64, i64)>> = HashMap::new();
    let mut tests: HashMap<ValueId, Test> = HashMap::new();
    for (&id, op) in &defs {
        if let Op::Cmp { op, ty: Ty::I64, a, b } = op {
            if !matches!(op, CmpOp::Eq | CmpOp::Ne | CmpOp::Slt | CmpOp::Sle | CmpOp::Sgt | CmpOp::Sge) {
                continue;
            }
            let lin =
                |x: ValueId, memo: &mut HashMap<ValueId, Option<(i64, i64)>>| linear(x, l.var, &defs, consts, memo);
            let test = match (lin(*a, &mut affine), consts.get(b), lin(*b, &mut affine), consts.get(a)) {
                (Some((sign, offset)), Some(&k), _, _) if matches!(sign, 1 | -1) => {
                    Some(Test { sign, offset, op: *op, constant: k })
                }
                (_, _, Some((sign, offset)), Some(&k)) if matches!(sign, 1 | -1) => {
                    Some(Test { sign, offset, op: swapped(*op), constant: k })
                }
                _ => None,
            };
            if let Some(t) = test {
                tests.insert(id, t);
            }
        }
    }
    // Only tests that decide a branch split the loop.
    let mut used = HashSet::new();
    branch_tests(&l.body, &defs, &tests, &mut used);
    if used.is_empty() {
        return None;
    }
    let mut cuts: Vec<i64> =
        used.iter().flat_map(|id| tests[id].breaks()).filter(|&b| b > l.start && b < l.end).collect();
    cuts.sort_unstable();
    cuts.dedup();
    if cuts.is_empty() || cuts.len() >= MAX_PIECES {
        return None;
    }
    let mut bounds = vec![l.start];
    bounds.extend(cuts);
    bounds.push(l.end);
    let before = NextIds { value: ids.value, local: ids.local, var: ids.var };
    let pieces: Vec<Loop> = bounds
        .windows(2)
        .map(|w| {
            let answers: HashMap<ValueId, bool> = used.iter().map(|&id| (id, tests[&id].holds(w[0]))).collect();
            let mut copy = Renumber::new(ids);
            let var = copy.var(l.var);
            let body = copy.stmts(&l.body, &answers);
            ids.value = copy.next.value;
            ids.local = copy.next.local;
            ids.var = copy.next.var;
            Loop {
                var,
                start: w[0],
                end: w[1],
                vector_width: l.vector_width,
                tail: Tail::Peel,
                body: fold(body, &mut HashMap::new()),
                reductions: Vec::new(),
            }
        })
        .collect();
    let size: usize = pieces.iter().map(|p| count(&p.body)).sum();
    if size > count(&l.body) + MAX_ADDED {
        *ids = before;
        return None;
    }
    Some(pieces)
}

fn swapped(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Slt => CmpOp::Sgt,
        CmpOp::Sle => CmpOp::Sge,
        CmpOp::Sgt => CmpOp::Slt,
        CmpOp::Sge => CmpOp::Sle,
        other => other,
    }
}

fn count(stmts: &[Stmt]) -> usize {
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Loop(l) => 1 + count(&l.body),
            Stmt::If { then_body, else_body, .. } => 1 + count(then_body) + count(else_body),
            _ => 1,
        })
        .sum()
}

fn innermost(stmts: &[Stmt]) -> bool {
    stmts.iter().all(|s| match s {
        Stmt::Loop(_) => false,
        Stmt::If { then_body, else_body, .. } => innermost(then_body) && innermost(else_body),
        _ => true,
    })
}

/// `x` as `sign * var + offset` when it is an index of the loop variable, constants and other
/// such values (terms without division or modulo), else `None`.
fn linear(
    x: ValueId,
    var: VarId,
    defs: &HashMap<ValueId, &Op>,
    consts: &HashMap<ValueId, i64>,
    memo: &mut HashMap<ValueId, Option<(i64, i64)>>,
) -> Option<(i64, i64)> {
    if let Some(&known) = memo.get(&x) {
        return known;
    }
    // Cut cycles (there are none in a verified kernel) and repeated work alike.
    memo.insert(x, None);
    let result = match defs.get(&x) {
        Some(Op::Index(e)) => linear_index(e, var, defs, consts, memo),
        _ => None,
    };
    memo.insert(x, result);
    result
}

fn linear_index(
    e: &IndexExpr,
    var: VarId,
    defs: &HashMap<ValueId, &Op>,
    consts: &HashMap<ValueId, i64>,
    memo: &mut HashMap<ValueId, Option<(i64, i64)>>,
) -> Option<(i64, i64)> {
    let (mut sign, mut offset) = (0i64, e.offset);
    for t in &e.terms {
        if t.div != 1 || t.modulo.is_some() {
            return None;
        }
        let (s, o) = match t.src {
            IndexSrc::Var(v) if v == var => (1, 0),
            IndexSrc::Var(_) => return None,
            IndexSrc::Value(x) => match consts.get(&x) {
                Some(&k) => (0, k),
                None => linear(x, var, defs, consts, memo)?,
            },
        };
        sign = sign.checked_add(s.checked_mul(t.scale)?)?;
        offset = offset.checked_add(o.checked_mul(t.scale)?)?;
    }
    Some((sign, offset))
}

/// Adds to `used` the tests that branch conditions in `stmts` read, directly or through
/// predicate `and`, `or`, `xor` and `not`.
fn branch_tests(
    stmts: &[Stmt],
    defs: &HashMap<ValueId, &Op>,
    tests: &HashMap<ValueId, Test>,
    used: &mut HashSet<ValueId>,
) {
    fn reach(x: ValueId, defs: &HashMap<ValueId, &Op>, tests: &HashMap<ValueId, Test>, used: &mut HashSet<ValueId>) {
        if tests.contains_key(&x) {
            used.insert(x);
            return;
        }
        match defs.get(&x) {
            Some(Op::Binary { op: BinOp::And | BinOp::Or | BinOp::Xor, ty: Ty::Pred, a, b }) => {
                reach(*a, defs, tests, used);
                reach(*b, defs, tests, used);
            }
            Some(Op::Unary { op: UnOp::Not, ty: Ty::Pred, a }) => reach(*a, defs, tests, used),
            _ => {}
        }
    }
    for s in stmts {
        if let Stmt::If { cond, then_body, else_body } = s {
            reach(*cond, defs, tests, used);
            branch_tests(then_body, defs, tests, used);
            branch_tests(else_body, defs, tests, used);
        }
    }
}

/// A copy of a loop body with fresh ids for everything it defines.
struct Renumber {
    next: NextIds,
    values: HashMap<ValueId, ValueId>,
    locals: HashMap<LocalId, LocalId>,
    vars: HashMap<VarId, VarId>,
}

impl Renumber {
    fn new(ids: &NextIds) -> Renumber {
        Renumber {
            next: NextIds { value: ids.value, local: ids.local, var: ids.var },
            values: HashMap::new(),
            locals: HashMap::new(),
            vars: HashMap::new(),
        }
    }

    fn var(&mut self, v: VarId) -> VarId {
        let fresh = VarId(self.next.var);
        self.next.var += 1;
        self.vars.insert(v, fresh);
        fresh
    }

    fn value(&self, v: ValueId) -> ValueId {
        self.values.get(&v).copied().unwrap_or(v)
    }

    fn local(&self, l: LocalId) -> LocalId {
        self.locals.get(&l).copied().unwrap_or(l)
    }

    fn index(&self, e: &IndexExpr) -> IndexExpr {
        let mut e = e.clone();
        for t in &mut e.terms {
            t.src = match t.src {
                IndexSrc::Var(v) => IndexSrc::Var(self.vars.get(&v).copied().unwrap_or(v)),
                IndexSrc::Value(x) => IndexSrc::Value(self.value(x)),
            };
        }
        e
    }

    fn op(&self, op: &Op) -> Op {
        let v = |x: &ValueId| self.value(*x);
        match op {
            Op::Const(c) => Op::Const(*c),
            Op::Load { buf, index, mem } => Op::Load { buf: *buf, index: self.index(index), mem: *mem },
            Op::Index(e) => Op::Index(self.index(e)),
            Op::GetLocal(l) => Op::GetLocal(self.local(*l)),
            Op::Unary { op, ty, a } => Op::Unary { op: *op, ty: *ty, a: v(a) },
            Op::Binary { op, ty, a, b } => Op::Binary { op: *op, ty: *ty, a: v(a), b: v(b) },
            Op::Cmp { op, ty, a, b } => Op::Cmp { op: *op, ty: *ty, a: v(a), b: v(b) },
            Op::Select { ty, cond, a, b } => Op::Select { ty: *ty, cond: v(cond), a: v(a), b: v(b) },
            Op::Cast { op, from, to, a } => Op::Cast { op: *op, from: *from, to: *to, a: v(a) },
            Op::Fma { ty, a, b, c } => Op::Fma { ty: *ty, a: v(a), b: v(b), c: v(c) },
            Op::Math { func, ty, args } => Op::Math { func: *func, ty: *ty, args: args.iter().map(v).collect() },
            Op::AnyLane { a } => Op::AnyLane { a: v(a) },
        }
    }

    /// `stmts` renumbered, the tests in `answers` replaced by their constant answers.
    fn stmts(&mut self, stmts: &[Stmt], answers: &HashMap<ValueId, bool>) -> Vec<Stmt> {
        stmts
            .iter()
            .map(|s| match s {
                Stmt::Let(id, op) => {
                    let op = match answers.get(id) {
                        Some(&b) => Op::Const(Const::Pred(b)),
                        None => self.op(op),
                    };
                    let fresh = ValueId(self.next.value);
                    self.next.value += 1;
                    self.values.insert(*id, fresh);
                    Stmt::Let(fresh, op)
                }
                Stmt::DeclLocal { local, ty, init } => {
                    let init = self.value(*init);
                    let fresh = LocalId(self.next.local);
                    self.next.local += 1;
                    self.locals.insert(*local, fresh);
                    Stmt::DeclLocal { local: fresh, ty: *ty, init }
                }
                Stmt::SetLocal { local, value } => {
                    Stmt::SetLocal { local: self.local(*local), value: self.value(*value) }
                }
                Stmt::Store { buf, index, mem, value } => {
                    Stmt::Store { buf: *buf, index: self.index(index), mem: *mem, value: self.value(*value) }
                }
                Stmt::If { cond, then_body, else_body } => Stmt::If {
                    cond: self.value(*cond),
                    then_body: self.stmts(then_body, answers),
                    else_body: self.stmts(else_body, answers),
                },
                Stmt::Call { func, args } => Stmt::Call {
                    func: func.clone(),
                    args: args
                        .iter()
                        .map(|a| match a {
                            CallArg::Ptr { buf, index } => CallArg::Ptr { buf: *buf, index: self.index(index) },
                            CallArg::I64(n) => CallArg::I64(*n),
                            CallArg::Value(x) => CallArg::Value(self.value(*x)),
                        })
                        .collect(),
                },
                // Innermost loops only (`innermost`).
                Stmt::Loop(l) => Stmt::Loop(l.clone()),
            })
            .collect()
    }
}

/// `stmts` with predicates of known answers folded and branches on them replaced by the
/// branch taken (its statements in the branch's place: ids are unique, so nothing clashes).
fn fold(stmts: Vec<Stmt>, known: &mut HashMap<ValueId, bool>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::Let(id, op) => {
                let answer = match &op {
                    Op::Const(Const::Pred(b)) => Some(*b),
                    Op::Binary { op: bop, ty: Ty::Pred, a, b } => {
                        match (known.get(a).copied(), known.get(b).copied(), bop) {
                            (Some(x), Some(y), BinOp::And) => Some(x && y),
                            (Some(x), Some(y), BinOp::Or) => Some(x || y),
                            (Some(x), Some(y), BinOp::Xor) => Some(x != y),
                            (Some(false), _, BinOp::And) | (_, Some(false), BinOp::And) => Some(false),
                            (Some(true), _, BinOp::Or) | (_, Some(true), BinOp::Or) => Some(true),
                            _ => None,
                        }
                    }
                    Op::Unary { op: UnOp::Not, ty: Ty::Pred, a } => known.get(a).map(|x| !x),
                    _ => None,
                };
                match answer {
                    Some(b) => {
                        known.insert(id, b);
                        out.push(Stmt::Let(id, Op::Const(Const::Pred(b))));
                    }
                    None => out.push(Stmt::Let(id, op)),
                }
            }
            Stmt::If { cond, then_body, else_body } => match known.get(&cond).copied() {
                Some(true) => out.extend(fold(then_body, known)),
                Some(false) => out.extend(fold(else_body, known)),
                None => {
                    out.push(Stmt::If { cond, then_body: fold(then_body, known), else_body: fold(else_body, known) })
                }
            },
            s => out.push(s),
        }
    }
    out
}
