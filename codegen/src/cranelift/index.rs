//! Index expressions: `offset + sum of ((src / div) % modulo) * scale`, evaluated as element
//! numbers or directly as byte addresses, with the loop-invariant part computed before each
//! loop (Cranelift's own LICM does not reach through these chains).

use cranelift_codegen::ir::{types, InstBuilder, Value};
use tessera_lower::kernel::{BufId, CallArg, IndexExpr, IndexSrc, MemType, Op, Stmt, Term};

use super::function::Translator;
use super::{Failure, Result};

/// What an index expression is evaluated to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Form {
    /// The address of the element: the buffer's base plus the index times `size` bytes.
    Bytes { buf: BufId, size: i64 },
    /// The element number itself.
    Elements,
}

/// An expression evaluated in part: `value` holds the start (base and offset) plus the terms
/// marked `done`.
#[derive(Clone, Debug)]
pub(crate) struct Partial {
    value: Value,
    done: Vec<bool>,
}

fn key(expr: &IndexExpr) -> usize {
    expr as *const IndexExpr as usize
}

/// Byte size of one element of `mem`, for the accesses that address whole bytes.
pub(crate) fn element_bytes(mem: MemType) -> Result<i64> {
    match mem {
        MemType::Pred => Ok(1),
        MemType::Scalar(ty) if ty.bits() >= 8 => Ok(i64::from(ty.bits() / 8)),
        MemType::Scalar(ty) => {
            Err(Failure::Malformed(format!("memory type Scalar({ty:?}); predicates use MemType::Pred")))
        }
        MemType::Packed { bits, .. } => Err(Failure::Unsupported(format!(
            "the byte address of a {bits}-bit packed element (only loads and stores address packed buffers)"
        ))),
    }
}

/// The form a load or store of `mem` evaluates its index in (what `memory` expects).
pub(crate) fn access_form(buf: BufId, mem: MemType) -> Result<Form> {
    match mem {
        MemType::Packed { .. } => Ok(Form::Elements),
        _ => Ok(Form::Bytes { buf, size: element_bytes(mem)? }),
    }
}

impl Translator<'_, '_> {
    /// The expression's value in `form`, reusing what was hoisted for it.
    pub(crate) fn index(&mut self, expr: &IndexExpr, form: Form) -> Result<Value> {
        let (mut acc, done) = match self.hoisted.get(&key(expr)) {
            Some(p) => (p.value, p.done.clone()),
            None => (self.start(expr, form)?, vec![false; expr.terms.len()]),
        };
        let mut displacement = 0i64;
        for (term, done) in expr.terms.iter().zip(done) {
            if !done {
                let (v, d) = self.term(term, form)?;
                if let Some(v) = v {
                    acc = self.b.ins().iadd(acc, v);
                }
                displacement = displacement.wrapping_add(d);
            }
        }
        // Last, so that an address is `(base + index) + displacement`, which x86-64 addressing
        // takes whole: the copies of a lane reduction share one address register.
        if displacement != 0 {
            acc = self.b.ins().iadd_imm_s(acc, displacement);
        }
        Ok(acc)
    }

    /// The address of element `index` of `buf` (runtime call arguments).
    pub(crate) fn pointer(&mut self, buf: BufId, index: &IndexExpr) -> Result<Value> {
        let mem = self
            .kernel
            .buffers
            .get(buf.0 as usize)
            .map(|b| b.mem)
            .ok_or_else(|| Failure::Malformed(format!("buffer {} does not exist", buf.0)))?;
        let size = element_bytes(mem)?;
        self.index(index, Form::Bytes { buf, size })
    }

    fn multiplier(form: Form) -> i64 {
        match form {
            Form::Bytes { size, .. } => size,
            Form::Elements => 1,
        }
    }

    /// Base (for addresses) plus the constant offset.
    fn start(&mut self, expr: &IndexExpr, form: Form) -> Result<Value> {
        let offset = expr.offset.wrapping_mul(Self::multiplier(form));
        Ok(match form {
            Form::Bytes { buf, .. } => {
                let base = self.buffer(buf)?;
                if offset == 0 {
                    base
                } else {
                    self.b.ins().iadd_imm_s(base, offset)
                }
            }
            Form::Elements => self.b.ins().iconst(types::I64, offset),
        })
    }

    /// `((src / div) % modulo) * scale * multiplier` as a value (`None` when it is always zero)
    /// plus a constant: a loop variable bound with an offset (`bind_var_at`) and no div or
    /// modulo contributes `offset * scale * multiplier` there instead of an addition.
    fn term(&mut self, term: &Term, form: Form) -> Result<(Option<Value>, i64)> {
        if term.div < 1 || term.modulo.is_some_and(|m| m < 1) {
            return Err(Failure::Malformed(format!("index term {term:?} has a divisor or modulus below 1")));
        }
        let scale = term.scale.wrapping_mul(Self::multiplier(form));
        if scale == 0 || term.modulo == Some(1) {
            return Ok((None, 0));
        }
        let plain = term.div == 1 && term.modulo.is_none();
        let (mut v, displacement) = match term.src {
            IndexSrc::Var(var) if plain => {
                let (v, offset) = self.var_parts(var)?;
                (v, offset.wrapping_mul(scale))
            }
            IndexSrc::Var(var) => (self.var(var)?, 0),
            IndexSrc::Value(id) => (self.typed(id, tessera_lower::kernel::Ty::I64)?, 0),
        };
        // Sources are non-negative whenever div/modulo are not trivial (the IR's contract), so
        // unsigned division applies, and powers of two become shifts and masks.
        if term.div > 1 {
            v = if term.div.count_ones() == 1 {
                self.b.ins().ushr_imm_u(v, i64::from(term.div.trailing_zeros()))
            } else {
                let d = self.b.ins().iconst(types::I64, term.div);
                self.b.ins().udiv(v, d)
            };
        }
        if let Some(m) = term.modulo {
            v = if m.count_ones() == 1 {
                self.b.ins().band_imm_s(v, m - 1)
            } else {
                let m = self.b.ins().iconst(types::I64, m);
                self.b.ins().urem(v, m)
            };
        }
        if scale != 1 {
            v = if scale > 0 && scale.count_ones() == 1 {
                self.b.ins().ishl_imm_u(v, i64::from(scale.trailing_zeros()))
            } else {
                self.b.ins().imul_imm_s(v, scale)
            };
        }
        Ok((Some(v), displacement))
    }

    fn available(&self, term: &Term) -> bool {
        match term.src {
            IndexSrc::Var(var) => self.is_bound(var),
            IndexSrc::Value(id) => self.is_defined(id),
        }
    }

    /// Called where a loop is about to start (its variable not yet bound): every index
    /// expression inside `body` gets the terms computable here folded into its partial value.
    pub(crate) fn hoist(&mut self, body: &[Stmt]) -> Result<()> {
        for stmt in body {
            match stmt {
                Stmt::Let(_, Op::Load { buf, index, mem }) => self.hoist_one(index, access_form(*buf, *mem)?)?,
                Stmt::Let(_, Op::Index(index)) => self.hoist_one(index, Form::Elements)?,
                Stmt::Store { buf, index, mem, .. } => self.hoist_one(index, access_form(*buf, *mem)?)?,
                Stmt::Call { args, .. } => {
                    for arg in args {
                        if let CallArg::Ptr { buf, index } = arg {
                            if let Some(b) = self.kernel.buffers.get(buf.0 as usize) {
                                if let Ok(size) = element_bytes(b.mem) {
                                    self.hoist_one(index, Form::Bytes { buf: *buf, size })?;
                                }
                            }
                        }
                    }
                }
                Stmt::Loop(l) => self.hoist(&l.body)?,
                Stmt::If { then_body, else_body, .. } => {
                    self.hoist(then_body)?;
                    self.hoist(else_body)?;
                }
                Stmt::Let(..) | Stmt::DeclLocal { .. } | Stmt::SetLocal { .. } => {}
            }
        }
        Ok(())
    }

    fn hoist_one(&mut self, expr: &IndexExpr, form: Form) -> Result<()> {
        let k = key(expr);
        let prior = self.hoisted.get(&k).cloned();
        let done = prior.as_ref().map(|p| p.done.clone()).unwrap_or_else(|| vec![false; expr.terms.len()]);
        let ready: Vec<usize> = (0..expr.terms.len()).filter(|&i| !done[i] && self.available(&expr.terms[i])).collect();
        if prior.is_some() && ready.is_empty() {
            return Ok(());
        }
        let mut acc = match &prior {
            Some(p) => p.value,
            None => self.start(expr, form)?,
        };
        let mut done = done;
        for i in ready {
            // The part now holds this source's value: it goes when the source does.
            let keys = self.hoisted_by.entry(expr.terms[i].src).or_default();
            if !keys.contains(&k) {
                keys.push(k);
            }
            let (v, d) = self.term(&expr.terms[i], form)?;
            if let Some(v) = v {
                acc = self.b.ins().iadd(acc, v);
            }
            if d != 0 {
                acc = self.b.ins().iadd_imm_s(acc, d);
            }
            done[i] = true;
        }
        self.hoisted.insert(k, Partial { value: acc, done });
        Ok(())
    }
}
