//! Loop-invariant code motion on a finished kernel: pure statements in a loop body whose
//! inputs are all defined outside the loop move in front of it, innermost loops first, so an
//! index value, a broadcast scalar's load or a constant is computed once per enclosing
//! iteration rather than once per element (Cranelift has no pass of its own for this).
//!
//! Nothing leaves an `if` branch (a guard may be what makes a statement safe), loads move only
//! from read-only buffers, and loops here always run at least once, so a moved statement never
//! executes where the original would not have been meaningful.

use std::collections::HashSet;

use crate::kernel::{IndexExpr, IndexSrc, Kernel, Op, Stmt, ValueId, VarId};

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
        Op::Unary { a, .. } | Op::Cast { a, .. } => free(a),
        Op::Binary { a, b, .. } | Op::Cmp { a, b, .. } => free(a) && free(b),
        Op::Select { cond, a, b, .. } => free(cond) && free(a) && free(b),
        Op::Math { args, .. } => args.iter().all(free),
    }
}
