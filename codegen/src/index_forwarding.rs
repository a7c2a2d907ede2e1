//! Loads and stores of a kernel's vector loops that read an index value the loop defines
//! read that value's expression instead, before either tier translates the kernel.
//!
//! Lowering names some indices as values: a reduce-window along the contiguous dimension reads
//! its input at `v - 1`, `v`, `v + 1` through index values (`emit/window.rs` bounds them for
//! the verifier), and a concatenate's operand is read at `v - offset` once index-set splitting
//! has given it its own loop. As value sources those vary with the lanes, which kept a loop
//! scalar on both tiers (and LLVM's own vectorizer then ran its math for every lane on every
//! path), where the expressions they name are contiguous: the same addresses, computed from
//! the loop variable. The rewrite runs after the kernel verifier, whose bounds proofs read
//! the values.

use std::collections::HashMap;

use tessera_lower::kernel::{IndexExpr, IndexSrc, Kernel, Loop, Op, Stmt, Term, ValueId};

/// `kernel` with [`forward_index_values`] applied to each of its vector loops, or `None` when
/// it changes none: the tier translates that kernel in its place, which lives as long as the
/// translation (the index hoisting keys its parts by the expressions' addresses).
pub(crate) fn forward_kernel_indices(kernel: &Kernel) -> Option<Kernel> {
    fn walk(body: &[Stmt], changed: &mut bool) -> Vec<Stmt> {
        body.iter()
            .map(|stmt| match stmt {
                Stmt::Loop(l) if l.vector_width > 1 => match forward_index_values(l) {
                    Some(rewritten) => {
                        *changed = true;
                        Stmt::Loop(rewritten)
                    }
                    None => stmt.clone(),
                },
                Stmt::Loop(l) => Stmt::Loop(Loop { body: walk(&l.body, changed), ..l.clone() }),
                Stmt::If { cond, then_body, else_body } => {
                    Stmt::If { cond: *cond, then_body: walk(then_body, changed), else_body: walk(else_body, changed) }
                }
                _ => stmt.clone(),
            })
            .collect()
    }
    let mut changed = false;
    let body = walk(&kernel.body, &mut changed);
    changed.then(|| Kernel { body, ..kernel.clone() })
}

/// `l` with each load and store index that reads an `Op::Index` value its body defines (as a
/// plain term: no division or remainder) reading that value's expression instead, or `None`
/// when none does (a 1-D max pool of f32[2,4099] 57 -> 6 us on Cranelift). Terms over one
/// source are merged.
fn forward_index_values(l: &Loop) -> Option<Loop> {
    fn defs(body: &[Stmt], out: &mut HashMap<ValueId, IndexExpr>) {
        for stmt in body {
            match stmt {
                Stmt::Let(id, Op::Index(e)) => {
                    let e = substitute(e, out).unwrap_or_else(|| e.clone());
                    out.insert(*id, e);
                }
                Stmt::If { then_body, else_body, .. } => {
                    defs(then_body, out);
                    defs(else_body, out);
                }
                _ => {}
            }
        }
    }
    // `e` with the index values of `map` substituted, or `None` if it reads none of them.
    fn substitute(e: &IndexExpr, map: &HashMap<ValueId, IndexExpr>) -> Option<IndexExpr> {
        let mut changed = false;
        let mut out = IndexExpr { terms: Vec::new(), offset: e.offset };
        for t in &e.terms {
            let inner = match t.src {
                IndexSrc::Value(v) if t.div == 1 && t.modulo.is_none() => map.get(&v),
                _ => None,
            };
            let Some(inner) = inner else {
                out.terms.push(*t);
                continue;
            };
            out.offset = out.offset.checked_add(inner.offset.checked_mul(t.scale)?)?;
            for it in &inner.terms {
                out.terms.push(Term { scale: it.scale.checked_mul(t.scale)?, ..*it });
            }
            changed = true;
        }
        if !changed {
            return None;
        }
        let mut merged: Vec<Term> = Vec::with_capacity(out.terms.len());
        for t in out.terms {
            match merged.iter_mut().find(|m| (m.src, m.div, m.modulo) == (t.src, t.div, t.modulo)) {
                Some(m) => m.scale = m.scale.checked_add(t.scale)?,
                None => merged.push(t),
            }
        }
        merged.retain(|t| t.scale != 0);
        Some(IndexExpr { terms: merged, offset: out.offset })
    }
    fn rewrite(body: &[Stmt], map: &HashMap<ValueId, IndexExpr>, changed: &mut bool) -> Vec<Stmt> {
        body.iter()
            .map(|stmt| match stmt {
                Stmt::Let(id, Op::Load { buf, index, mem }) => match substitute(index, map) {
                    Some(index) => {
                        *changed = true;
                        Stmt::Let(*id, Op::Load { buf: *buf, index, mem: *mem })
                    }
                    None => stmt.clone(),
                },
                Stmt::Store { buf, index, mem, value } => match substitute(index, map) {
                    Some(index) => {
                        *changed = true;
                        Stmt::Store { buf: *buf, index, mem: *mem, value: *value }
                    }
                    None => stmt.clone(),
                },
                Stmt::If { cond, then_body, else_body } => Stmt::If {
                    cond: *cond,
                    then_body: rewrite(then_body, map, changed),
                    else_body: rewrite(else_body, map, changed),
                },
                _ => stmt.clone(),
            })
            .collect()
    }
    let mut map = HashMap::new();
    defs(&l.body, &mut map);
    if map.is_empty() {
        return None;
    }
    let mut changed = false;
    let body = rewrite(&l.body, &map, &mut changed);
    changed.then(|| Loop { body, ..l.clone() })
}
