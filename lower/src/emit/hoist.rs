//! Loop-invariant code motion on a finished kernel: pure statements in a loop body whose
//! inputs are all defined outside the loop move in front of it, innermost loops first, so an
//! index value, a broadcast scalar's load or a constant is computed once per enclosing
//! iteration rather than once per element (Cranelift has no pass of its own for this).
//!
//! Nothing leaves an `if` branch (a guard may be what makes a statement safe), loads move only
//! from read-only buffers, and loops here always run at least once, so a moved statement never
//! executes where the original would not have been meaningful.

use std::collections::{HashMap, HashSet};

use crate::kernel::{CallArg, Const, IndexExpr, IndexSrc, Kernel, Op, Stmt, ValueId, VarId};

pub fn hoist(kernel: &mut Kernel) {
    let read_only: HashSet<u32> =
        kernel.buffers.iter().enumerate().filter(|(_, b)| !b.writable).map(|(i, _)| i as u32).collect();
    let body = std::mem::take(&mut kernel.body);
    kernel.body = walk(body, &read_only);
}

fn walk(stmts: Vec<Stmt>, read_only: &HashSet<u32>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::Loop(mut l) => {
                l.body = walk(std::mem::take(&mut l.body), read_only);
                if l.end <= l.start {
                    out.push(Stmt::Loop(l));
                    continue;
                }
                // Values and variables the body defines: what a hoisted statement may not read.
                let mut inner_values: HashSet<ValueId> = HashSet::new();
                let mut inner_vars: HashSet<VarId> = HashSet::from([l.var]);
                collect_defs(&l.body, &mut inner_values, &mut inner_vars);
                let mut kept = Vec::with_capacity(l.body.len());
                for st in std::mem::take(&mut l.body) {
                    match st {
                        Stmt::Let(v, op) if movable(&op, read_only, &inner_values, &inner_vars) => {
                            inner_values.remove(&v);
                            out.push(Stmt::Let(v, op));
                        }
                        st => kept.push(st),
                    }
                }
                l.body = kept;
                out.push(Stmt::Loop(l));
            }
            Stmt::If { cond, then_body, else_body } => out.push(Stmt::If {
                cond,
                then_body: walk(then_body, read_only),
                else_body: walk(else_body, read_only),
            }),
            s => out.push(s),
        }
    }
    out
}

fn collect_defs(stmts: &[Stmt], values: &mut HashSet<ValueId>, vars: &mut HashSet<VarId>) {
    for s in stmts {
        match s {
            Stmt::Let(v, _) => {
                values.insert(*v);
            }
            Stmt::Loop(l) => {
                vars.insert(l.var);
                collect_defs(&l.body, values, vars);
            }
            Stmt::If { then_body, else_body, .. } => {
                collect_defs(then_body, values, vars);
                collect_defs(else_body, values, vars);
            }
            _ => {}
        }
    }
}

fn index_free(e: &IndexExpr, values: &HashSet<ValueId>, vars: &HashSet<VarId>) -> bool {
    e.terms.iter().all(|t| match t.src {
        IndexSrc::Var(v) => !vars.contains(&v),
        IndexSrc::Value(v) => !values.contains(&v),
    })
}

fn movable(op: &Op, read_only: &HashSet<u32>, values: &HashSet<ValueId>, vars: &HashSet<VarId>) -> bool {
    let free = |v: &ValueId| !values.contains(v);
    match op {
        Op::Const(_) => true,
        Op::Index(e) => index_free(e, values, vars),
        Op::Load { buf, index, .. } => read_only.contains(&buf.0) && index_free(index, values, vars),
        Op::GetLocal(_) => false,
        Op::Unary { a, .. } | Op::Cast { a, .. } | Op::AnyLane { a } => free(a),
        Op::Binary { a, b, .. } | Op::Cmp { a, b, .. } => free(a) && free(b),
        Op::Select { cond: a, a: b, b: c, .. } | Op::Fma { a, b, c, .. } => free(a) && free(b) && free(c),
        Op::Math { args, .. } => args.iter().all(free),
    }
}

/// Moves every constant to the top of the kernel, one definition per distinct constant:
/// constants are pure and cheap, and the element generators create the same ones in many
/// places (f16/bf16 conversions, guards), which would otherwise repeat in the text form.
pub fn pool_constants(kernel: &mut Kernel) {
    let mut first: HashMap<Const, ValueId> = HashMap::new();
    let mut order: Vec<(ValueId, Const)> = Vec::new();
    let mut rename: HashMap<ValueId, ValueId> = HashMap::new();
    let body = std::mem::take(&mut kernel.body);
    let mut rest = take_consts(body, &mut first, &mut order, &mut rename);
    rename_all(&mut rest, &rename);
    let mut out: Vec<Stmt> = order.into_iter().map(|(v, c)| Stmt::Let(v, Op::Const(c))).collect();
    out.extend(rest);
    kernel.body = out;
}

fn take_consts(
    stmts: Vec<Stmt>,
    first: &mut HashMap<Const, ValueId>,
    order: &mut Vec<(ValueId, Const)>,
    rename: &mut HashMap<ValueId, ValueId>,
) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::Let(v, Op::Const(c)) => match first.get(&c) {
                Some(&f) => {
                    rename.insert(v, f);
                }
                None => {
                    first.insert(c, v);
                    order.push((v, c));
                }
            },
            Stmt::Loop(mut l) => {
                l.body = take_consts(std::mem::take(&mut l.body), first, order, rename);
                out.push(Stmt::Loop(l));
            }
            Stmt::If { cond, then_body, else_body } => out.push(Stmt::If {
                cond,
                then_body: take_consts(then_body, first, order, rename),
                else_body: take_consts(else_body, first, order, rename),
            }),
            s => out.push(s),
        }
    }
    out
}

fn rename_all(stmts: &mut [Stmt], map: &HashMap<ValueId, ValueId>) {
    let r = |v: &mut ValueId| {
        if let Some(&n) = map.get(v) {
            *v = n;
        }
    };
    let ri = |e: &mut IndexExpr| {
        for t in &mut e.terms {
            if let IndexSrc::Value(v) = &mut t.src {
                if let Some(&n) = map.get(v) {
                    *v = n;
                }
            }
        }
    };
    for s in stmts {
        match s {
            Stmt::Let(_, op) => match op {
                Op::Const(_) | Op::GetLocal(_) => {}
                Op::Load { index, .. } | Op::Index(index) => ri(index),
                Op::Unary { a, .. } | Op::Cast { a, .. } | Op::AnyLane { a } => r(a),
                Op::Binary { a, b, .. } | Op::Cmp { a, b, .. } => {
                    r(a);
                    r(b);
                }
                Op::Select { cond: a, a: b, b: c, .. } | Op::Fma { a, b, c, .. } => {
                    r(a);
                    r(b);
                    r(c);
                }
                Op::Math { args, .. } => args.iter_mut().for_each(r),
            },
            Stmt::Loop(l) => rename_all(&mut l.body, map),
            Stmt::DeclLocal { init, .. } => r(init),
            Stmt::SetLocal { value, .. } => r(value),
            Stmt::Store { index, value, .. } => {
                ri(index);
                r(value);
            }
            Stmt::If { cond, then_body, else_body } => {
                r(cond);
                rename_all(then_body, map);
                rename_all(else_body, map);
            }
            Stmt::Call { args, .. } => {
                for a in args {
                    match a {
                        CallArg::Ptr { index, .. } => ri(index),
                        CallArg::Value(v) => r(v),
                        CallArg::I64(_) => {}
                    }
                }
            }
        }
    }
}

/// Drops an `index` statement whose expression an earlier visible `index` statement already
/// computes (the simplifier materializes the same sum for a division and a remainder).
pub fn share_indices(kernel: &mut Kernel) {
    let mut rename = HashMap::new();
    let body = std::mem::take(&mut kernel.body);
    let mut body = dedupe(body, &mut Vec::new(), &mut rename);
    rename_all(&mut body, &rename);
    kernel.body = body;
}

fn dedupe(
    stmts: Vec<Stmt>,
    visible: &mut Vec<(IndexExpr, ValueId)>,
    rename: &mut HashMap<ValueId, ValueId>,
) -> Vec<Stmt> {
    let scope = visible.len();
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::Let(v, Op::Index(mut e)) => {
                rename_index(&mut e, rename);
                match visible.iter().find(|(x, _)| *x == e) {
                    Some(&(_, w)) => {
                        rename.insert(v, w);
                    }
                    None => {
                        visible.push((e.clone(), v));
                        out.push(Stmt::Let(v, Op::Index(e)));
                    }
                }
            }
            Stmt::Loop(mut l) => {
                l.body = dedupe(std::mem::take(&mut l.body), visible, rename);
                out.push(Stmt::Loop(l));
            }
            Stmt::If { cond, then_body, else_body } => out.push(Stmt::If {
                cond,
                then_body: dedupe(then_body, visible, rename),
                else_body: dedupe(else_body, visible, rename),
            }),
            s => out.push(s),
        }
    }
    visible.truncate(scope);
    out
}

fn rename_index(e: &mut IndexExpr, map: &HashMap<ValueId, ValueId>) {
    for t in &mut e.terms {
        if let IndexSrc::Value(v) = &mut t.src {
            if let Some(&n) = map.get(v) {
                *v = n;
            }
        }
    }
}
