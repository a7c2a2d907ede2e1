//! The kernel verifier: checks the contract documented in `kernel/mod.rs` so codegen tiers and
//! the interpreter can translate a kernel without defensive checks of their own.
//!
//! Checked: ids are unique and every value, local and variable is defined before use and in
//! scope; every operand has the type its op asks for and every op is defined on its type;
//! buffers have valid memory types, loads and stores use their buffer's memory type, stores go
//! to writable buffers; loop bounds and vector widths are sane; and every load and store index
//! is in bounds.
//!
//! Bounds are proven by interval arithmetic over the variables' ranges (the grid variable
//! ranges over `0..extent`). A term whose source is a `Value` is unbounded unless a `% modulo`
//! bounds it: such terms come from data-dependent indices (dynamic slices, gathers) that the
//! lowering clamps at run time, so the verifier cannot prove them and accepts them as
//! runtime-checked, and only requires the rest of the index (its bounded terms and offset) to
//! stay below the buffer's length. The interpreter checks every index it computes; compiled
//! code relies on the lowering's clamping.
//!
//! Code inside a loop that never runs (an empty range, or a grid of extent 0) is still type
//! checked, but its indices are not bounds checked: there is no variable value to check.

use std::collections::{HashMap, HashSet};
use std::fmt;

use super::*;

/// What is wrong, without the kernel and statement (see [`KernelVerifyError`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerifyErrorKind {
    /// An id (`%N`, `lN` or `vN`) defined twice in the kernel.
    Duplicate(String),
    /// A value, local or variable used where it is not defined (or out of scope).
    Undefined(String),
    UnknownBuffer(BufId),
    /// A buffer's declaration is invalid (memory type, length).
    BadBuffer {
        buf: BufId,
        message: String,
    },
    /// An operand or result type disagrees with the op, or the op is not defined on its type.
    Type(String),
    /// A load or store whose memory type is not its buffer's.
    MemMismatch {
        buf: BufId,
        used: MemType,
        declared: MemType,
    },
    ReadOnly(BufId),
    /// An index term that is malformed (div or modulo below 1, a negative variable range under
    /// `/` or `%`).
    BadIndex(String),
    /// An index whose proven range `min..=max` leaves `0..len`.
    OutOfBounds {
        buf: BufId,
        min: i128,
        max: i128,
        len: i64,
    },
    BadLoop(String),
    BadGrid(String),
}

impl fmt::Display for VerifyErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyErrorKind::Duplicate(id) => write!(f, "{id} is defined twice"),
            VerifyErrorKind::Undefined(id) => write!(f, "{id} is not defined here"),
            VerifyErrorKind::UnknownBuffer(b) => write!(f, "buffer b{} does not exist", b.0),
            VerifyErrorKind::BadBuffer { buf, message } => write!(f, "buffer b{}: {message}", buf.0),
            VerifyErrorKind::Type(m) => write!(f, "type error: {m}"),
            VerifyErrorKind::MemMismatch { buf, used, declared } => {
                write!(f, "accesses buffer b{} as {used} but it holds {declared}", buf.0)
            }
            VerifyErrorKind::ReadOnly(b) => write!(f, "stores to read-only buffer b{}", b.0),
            VerifyErrorKind::BadIndex(m) => write!(f, "bad index: {m}"),
            VerifyErrorKind::OutOfBounds { buf, min, max, len } => {
                write!(f, "index ranges over {min}..={max} but buffer b{} has {len} elements", buf.0)
            }
            VerifyErrorKind::BadLoop(m) => write!(f, "bad loop: {m}"),
            VerifyErrorKind::BadGrid(m) => write!(f, "bad grid: {m}"),
        }
    }
}

/// A contract violation in kernel `kernel`, at statement `stmt` (its first line in the text
/// form) when it is about one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelVerifyError {
    pub kernel: String,
    pub stmt: Option<String>,
    pub kind: VerifyErrorKind,
}

impl fmt::Display for KernelVerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel '{}'", self.kernel)?;
        if let Some(s) = &self.stmt {
            write!(f, " at `{s}`")?;
        }
        write!(f, ": {}", self.kind)
    }
}

impl std::error::Error for KernelVerifyError {}

/// Checks `kernel` against the IR contract (module doc).
pub fn verify_kernel(kernel: &Kernel) -> Result<(), KernelVerifyError> {
    let mut v = Verifier {
        kernel,
        values: HashMap::new(),
        locals: HashMap::new(),
        vars: HashMap::new(),
        seen_values: HashSet::new(),
        seen_locals: HashSet::new(),
        seen_vars: HashSet::new(),
        dead: 0,
    };
    let fail = |kind| KernelVerifyError { kernel: kernel.name.clone(), stmt: None, kind };
    for (i, b) in kernel.buffers.iter().enumerate() {
        let buf = BufId(i as u32);
        if let Err(message) = check_mem(b.mem) {
            return Err(fail(VerifyErrorKind::BadBuffer { buf, message }));
        }
        if b.len < 0 {
            return Err(fail(VerifyErrorKind::BadBuffer { buf, message: format!("negative length {}", b.len) }));
        }
    }
    if kernel.grid.extent < 0 {
        return Err(fail(VerifyErrorKind::BadGrid(format!("negative extent {}", kernel.grid.extent))));
    }
    v.seen_vars.insert(kernel.grid.var);
    if kernel.grid.extent == 0 {
        v.dead += 1;
    }
    v.vars.insert(kernel.grid.var, (0, kernel.grid.extent - 1));
    v.body(&kernel.body)
}

/// Memory types that exist: `Scalar` of a non-`Pred` type, and packed elements of 1, 2 or 4
/// bits.
fn check_mem(mem: MemType) -> Result<(), String> {
    match mem {
        MemType::Scalar(Ty::Pred) => Err("scalar.pred is not a memory type (predicates are stored as pred)".into()),
        MemType::Packed { bits, .. } if !matches!(bits, 1 | 2 | 4) => {
            Err(format!("packed elements of {bits} bits (only 1, 2 and 4 pack into bytes)"))
        }
        _ => Ok(()),
    }
}

struct Verifier<'k> {
    kernel: &'k Kernel,
    /// What is in scope now.
    values: HashMap<ValueId, Ty>,
    locals: HashMap<LocalId, Ty>,
    /// Inclusive ranges; empty ranges only occur under `dead > 0`.
    vars: HashMap<VarId, (i64, i64)>,
    /// Every id defined so far (uniqueness is kernel-wide).
    seen_values: HashSet<ValueId>,
    seen_locals: HashSet<LocalId>,
    seen_vars: HashSet<VarId>,
    /// How many enclosing loops (or the grid) never run.
    dead: usize,
}

type Check<T = ()> = Result<T, VerifyErrorKind>;

fn type_err<T>(msg: impl Into<String>) -> Check<T> {
    Err(VerifyErrorKind::Type(msg.into()))
}

impl Verifier<'_> {
    fn body(&mut self, body: &[Stmt]) -> Result<(), KernelVerifyError> {
        let mut defined_values = Vec::new();
        let mut defined_locals = Vec::new();
        let mut result = Ok(());
        for stmt in body {
            result = self.stmt(stmt, &mut defined_values, &mut defined_locals);
            if result.is_err() {
                break;
            }
        }
        for v in defined_values {
            self.values.remove(&v);
        }
        for l in defined_locals {
            self.locals.remove(&l);
        }
        result
    }

    fn error(&self, stmt: &Stmt, kind: VerifyErrorKind) -> KernelVerifyError {
        KernelVerifyError { kernel: self.kernel.name.clone(), stmt: Some(self.kernel.stmt_head(stmt)), kind }
    }

    fn stmt(
        &mut self,
        stmt: &Stmt,
        defined_values: &mut Vec<ValueId>,
        defined_locals: &mut Vec<LocalId>,
    ) -> Result<(), KernelVerifyError> {
        match stmt {
            Stmt::Loop(l) => return self.loop_(stmt, l),
            Stmt::If { cond, then_body, else_body } => {
                self.operand(*cond, Ty::Pred, "if condition").map_err(|k| self.error(stmt, k))?;
                self.body(then_body)?;
                return self.body(else_body);
            }
            _ => {}
        }
        self.simple(stmt, defined_values, defined_locals).map_err(|k| self.error(stmt, k))
    }

    fn simple(&mut self, stmt: &Stmt, defined_values: &mut Vec<ValueId>, defined_locals: &mut Vec<LocalId>) -> Check {
        match stmt {
            Stmt::Let(v, op) => {
                let ty = self.op(op)?;
                if !self.seen_values.insert(*v) {
                    return Err(VerifyErrorKind::Duplicate(format!("%{}", v.0)));
                }
                self.values.insert(*v, ty);
                defined_values.push(*v);
            }
            Stmt::DeclLocal { local, ty, init } => {
                self.operand(*init, *ty, "local initializer")?;
                if !self.seen_locals.insert(*local) {
                    return Err(VerifyErrorKind::Duplicate(format!("l{}", local.0)));
                }
                self.locals.insert(*local, *ty);
                defined_locals.push(*local);
            }
            Stmt::SetLocal { local, value } => {
                let ty = self.local(*local)?;
                self.operand(*value, ty, "stored local value")?;
            }
            Stmt::Store { buf, index, mem, value } => {
                let b = self.buffer(*buf, *mem)?;
                if !b.writable {
                    return Err(VerifyErrorKind::ReadOnly(*buf));
                }
                self.operand(*value, mem.reg(), "stored value")?;
                self.in_bounds(*buf, index, false)?;
            }
            Stmt::Call { args, .. } => {
                for a in args {
                    match a {
                        CallArg::Ptr { buf, index } => {
                            self.buffer_exists(*buf)?;
                            self.in_bounds(*buf, index, true)?;
                        }
                        CallArg::I64(_) => {}
                        CallArg::Value(v) => {
                            self.value(*v)?;
                        }
                    }
                }
            }
            Stmt::Loop(_) | Stmt::If { .. } => unreachable!("handled by stmt"),
        }
        Ok(())
    }

    fn loop_(&mut self, stmt: &Stmt, l: &Loop) -> Result<(), KernelVerifyError> {
        let bad = |m: String| self.error(stmt, VerifyErrorKind::BadLoop(m));
        let Some(trip) = l.end.checked_sub(l.start) else {
            return Err(bad(format!("the trip count of {}..{} overflows", l.start, l.end)));
        };
        let w = l.vector_width;
        if !w.is_power_of_two() || w > 64 {
            return Err(bad(format!("vector width {w} is not a power of two from 1 to 64")));
        }
        if w > 1 {
            if l.tail == Tail::None && trip > 0 && trip % i64::from(w) != 0 {
                return Err(bad(format!(
                    "trip count {trip} is not a multiple of vector width {w} and the tail is not peeled"
                )));
            }
            // A lane reduction fixes an order rather than hinting at vectors, so its body may
            // hold loops (tiers then run its lanes as scalar accumulators).
            if contains_loop(&l.body) && l.reductions.is_empty() {
                return Err(bad(format!("vector width {w} on a loop that is not innermost")));
            }
        }
        if !l.reductions.is_empty() && w < 2 {
            return Err(bad("a lane reduction needs a vector width of at least 2".into()));
        }
        for (i, r) in l.reductions.iter().enumerate() {
            match self.locals.get(&r.local) {
                Some(&ty) if ty == r.ty => {}
                Some(&ty) => return Err(bad(format!("reduction of l{} as {} but it is {ty}", r.local.0, r.ty))),
                None => return Err(bad(format!("reduction of l{}, which is not declared before the loop", r.local.0))),
            }
            if r.identity().is_none() {
                return Err(bad(format!("{:?} on {} has no identity to start lanes from", r.op, r.ty)));
            }
            if l.reductions[..i].iter().any(|o| o.local == r.local) {
                return Err(bad(format!("l{} is reduced twice", r.local.0)));
            }
        }
        if !self.seen_vars.insert(l.var) {
            return Err(self.error(stmt, VerifyErrorKind::Duplicate(var_name(self.kernel, l.var))));
        }
        let empty = trip <= 0;
        if empty {
            self.dead += 1;
        }
        self.vars.insert(l.var, (l.start, l.end.wrapping_sub(1)));
        let result = self.body(&l.body);
        self.vars.remove(&l.var);
        if empty {
            self.dead -= 1;
        }
        result
    }

    fn value(&self, v: ValueId) -> Check<Ty> {
        self.values.get(&v).copied().ok_or_else(|| VerifyErrorKind::Undefined(format!("%{}", v.0)))
    }

    fn local(&self, l: LocalId) -> Check<Ty> {
        self.locals.get(&l).copied().ok_or_else(|| VerifyErrorKind::Undefined(format!("l{}", l.0)))
    }

    /// `v` must be defined and of type `ty`; `what` names its role for the message.
    fn operand(&self, v: ValueId, ty: Ty, what: &str) -> Check {
        let found = self.value(v)?;
        if found != ty {
            return type_err(format!("{what} %{} is {found}, expected {ty}", v.0));
        }
        Ok(())
    }

    fn buffer_exists(&self, buf: BufId) -> Check<&KernelBuffer> {
        self.kernel.buffers.get(buf.0 as usize).ok_or(VerifyErrorKind::UnknownBuffer(buf))
    }

    fn buffer(&self, buf: BufId, mem: MemType) -> Check<&KernelBuffer> {
        let b = self.buffer_exists(buf)?;
        if b.mem != mem {
            return Err(VerifyErrorKind::MemMismatch { buf, used: mem, declared: b.mem });
        }
        Ok(b)
    }

    fn op(&self, op: &Op) -> Check<Ty> {
        match op {
            Op::Const(c) => {
                if let Const::Int { ty, .. } = c {
                    if !ty.is_int() {
                        return type_err(format!("integer constant of type {ty}"));
                    }
                }
                Ok(c.ty())
            }
            Op::Load { buf, index, mem } => {
                self.buffer(*buf, *mem)?;
                self.in_bounds(*buf, index, false)?;
                Ok(mem.reg())
            }
            Op::Index(e) => {
                self.index_range(e)?;
                Ok(Ty::I64)
            }
            Op::GetLocal(l) => self.local(*l),
            Op::AnyLane { a } => {
                self.operand(*a, Ty::Pred, "operand")?;
                Ok(Ty::Pred)
            }
            Op::Unary { op, ty, a } => {
                let ok = match op {
                    UnOp::Neg | UnOp::Abs => ty.is_int() || ty.is_float(),
                    UnOp::Not => ty.is_int() || *ty == Ty::Pred,
                    UnOp::Sqrt | UnOp::Floor | UnOp::Ceil | UnOp::Trunc | UnOp::RoundEven => ty.is_float(),
                    UnOp::Popcnt | UnOp::Clz => ty.is_int(),
                };
                if !ok {
                    return type_err(format!("{op:?} is not defined on {ty}"));
                }
                self.operand(*a, *ty, "operand")?;
                Ok(*ty)
            }
            Op::Binary { op, ty, a, b } => {
                let ok = match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul => ty.is_int() || ty.is_float(),
                    BinOp::FDiv | BinOp::FMax | BinOp::FMin => ty.is_float(),
                    BinOp::And | BinOp::Or | BinOp::Xor => ty.is_int() || *ty == Ty::Pred,
                    _ => ty.is_int(),
                };
                if !ok {
                    return type_err(format!("{op:?} is not defined on {ty}"));
                }
                self.operand(*a, *ty, "first operand")?;
                self.operand(*b, *ty, "second operand")?;
                Ok(*ty)
            }
            Op::Cmp { op, ty, a, b } => {
                let ok = match op {
                    CmpOp::Eq | CmpOp::Ne => ty.is_int() || *ty == Ty::Pred,
                    CmpOp::FEq | CmpOp::FNe | CmpOp::FLt | CmpOp::FLe | CmpOp::FGt | CmpOp::FGe => ty.is_float(),
                    _ => ty.is_int(),
                };
                if !ok {
                    return type_err(format!("comparison {op:?} is not defined on {ty}"));
                }
                self.operand(*a, *ty, "first operand")?;
                self.operand(*b, *ty, "second operand")?;
                Ok(Ty::Pred)
            }
            Op::Fma { ty, a, b, c } => {
                if !ty.is_float() {
                    return type_err(format!("fma is not defined on {ty}"));
                }
                self.operand(*a, *ty, "first factor")?;
                self.operand(*b, *ty, "second factor")?;
                self.operand(*c, *ty, "addend")?;
                Ok(*ty)
            }
            Op::Select { ty, cond, a, b } => {
                self.operand(*cond, Ty::Pred, "select condition")?;
                self.operand(*a, *ty, "first choice")?;
                self.operand(*b, *ty, "second choice")?;
                Ok(*ty)
            }
            Op::Cast { op, from, to, a } => {
                if !cast_ok(*op, *from, *to) {
                    return type_err(format!("cast {op:?} from {from} to {to}"));
                }
                self.operand(*a, *from, "cast operand")?;
                Ok(*to)
            }
            Op::Math { func, ty, args } => {
                if !ty.is_float() {
                    return type_err(format!("math function {func:?} on {ty}"));
                }
                if args.len() != func.arity() {
                    return type_err(format!("{func:?} takes {} arguments, given {}", func.arity(), args.len()));
                }
                for a in args {
                    self.operand(*a, *ty, "math argument")?;
                }
                Ok(*ty)
            }
        }
    }

    /// The proven range of `e`'s bounded part (`None` when nothing constrains it because the
    /// code never runs), and whether it has an unbounded (`Value`) term. Also checks that its
    /// sources are in scope and well formed.
    fn index_range(&self, e: &IndexExpr) -> Check<(Option<(i128, i128)>, bool)> {
        let mut lo = i128::from(e.offset);
        let mut hi = lo;
        let mut unbounded = false;
        for t in &e.terms {
            if t.div < 1 {
                return Err(VerifyErrorKind::BadIndex(format!("divisor {} below 1", t.div)));
            }
            if let Some(m) = t.modulo {
                if m < 1 {
                    return Err(VerifyErrorKind::BadIndex(format!("modulo {m} below 1")));
                }
            }
            let reduced = t.div != 1 || t.modulo.is_some();
            let (a, b) = match t.src {
                IndexSrc::Var(v) => {
                    let Some(&(a, b)) = self.vars.get(&v) else {
                        return Err(VerifyErrorKind::Undefined(var_name(self.kernel, v)));
                    };
                    if self.dead > 0 {
                        continue;
                    }
                    if reduced && a < 0 {
                        return Err(VerifyErrorKind::BadIndex(format!(
                            "{} takes negative values under / or %",
                            var_name(self.kernel, v)
                        )));
                    }
                    let (mut a, mut b) = (a / t.div, b / t.div);
                    if let Some(m) = t.modulo {
                        if a / m == b / m {
                            (a, b) = (a % m, b % m);
                        } else {
                            (a, b) = (0, m - 1);
                        }
                    }
                    (a, b)
                }
                IndexSrc::Value(v) => {
                    let ty = self.value(v)?;
                    if ty != Ty::I64 {
                        return type_err(format!("index source %{} is {ty}, expected i64", v.0));
                    }
                    match t.modulo {
                        Some(m) => (0, m - 1),
                        None => {
                            unbounded = true;
                            continue;
                        }
                    }
                }
            };
            let (x, y) = (i128::from(a) * i128::from(t.scale), i128::from(b) * i128::from(t.scale));
            lo = lo.saturating_add(x.min(y));
            hi = hi.saturating_add(x.max(y));
        }
        Ok((if self.dead > 0 { None } else { Some((lo, hi)) }, unbounded))
    }

    /// `e` indexes buffer `buf` in bounds: `min >= 0` and `max < len` (`max <= len` for a call's
    /// pointer, which may point one past the end). With an unbounded term only the bounded
    /// part's maximum is checked (module doc).
    fn in_bounds(&self, buf: BufId, e: &IndexExpr, pointer: bool) -> Check {
        let len = self.buffer_exists(buf)?.len;
        let (range, unbounded) = self.index_range(e)?;
        let Some((min, max)) = range else { return Ok(()) };
        let limit = if pointer { i128::from(len) } else { i128::from(len) - 1 };
        if (!unbounded && min < 0) || max > limit {
            return Err(VerifyErrorKind::OutOfBounds { buf, min, max, len });
        }
        Ok(())
    }
}

fn var_name(kernel: &Kernel, v: VarId) -> String {
    if v == kernel.grid.var {
        format!("g{}", v.0)
    } else {
        format!("v{}", v.0)
    }
}

fn contains_loop(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Loop(_) => true,
        Stmt::If { then_body, else_body, .. } => contains_loop(then_body) || contains_loop(else_body),
        _ => false,
    })
}

/// The (op, from, to) triples the IR defines (see [`CastOp`]).
pub(crate) fn cast_ok(op: CastOp, from: Ty, to: Ty) -> bool {
    let int_or_pred = |t: Ty| t.is_int() || t == Ty::Pred;
    match op {
        CastOp::SExt | CastOp::ZExt => int_or_pred(from) && to.is_int() && to.bits() > from.bits(),
        CastOp::Trunc => from.is_int() && int_or_pred(to) && to.bits() < from.bits(),
        CastOp::SIToFP | CastOp::UIToFP => from.is_int() && to.is_float(),
        CastOp::FPToSISat | CastOp::FPToUISat => from.is_float() && to.is_int(),
        CastOp::FPExt => from == Ty::F32 && to == Ty::F64,
        CastOp::FPTrunc => from == Ty::F64 && to == Ty::F32,
        CastOp::Bitcast => {
            matches!((from, to), (Ty::I32, Ty::F32) | (Ty::F32, Ty::I32) | (Ty::I64, Ty::F64) | (Ty::F64, Ty::I64))
        }
        CastOp::F16ToF32 => from == Ty::I16 && to == Ty::F32,
        CastOp::F32ToF16 => from == Ty::F32 && to == Ty::I16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F32: MemType = MemType::Scalar(Ty::F32);

    fn term(src: IndexSrc, div: i64, modulo: Option<i64>, scale: i64) -> Term {
        Term { src, div, modulo, scale }
    }

    /// `for v1 in 0..n { out[index(g0, v1)] = in[index(g0, v1)] }` over `grid` x `n` with
    /// buffers of `len` elements.
    fn copy(grid: i64, n: i64, len: i64, index: impl Fn(VarId, VarId) -> IndexExpr) -> Kernel {
        let mut b = KernelBuilder::new("copy", grid);
        let g = b.grid_var();
        let src = b.buffer("src", F32, len, false);
        let dst = b.buffer("dst", F32, len, true);
        let v = b.begin_loop(0, n);
        let x = b.load(src, index(g, v));
        b.store(dst, index(g, v), x);
        b.end_loop();
        b.finish()
    }

    fn kind(k: &Kernel) -> VerifyErrorKind {
        verify_kernel(k).expect_err("the kernel must not verify").kind
    }

    fn tiled(g: VarId, v: VarId) -> IndexExpr {
        IndexExpr { terms: vec![term(IndexSrc::Var(g), 1, None, 128), term(IndexSrc::Var(v), 1, None, 1)], offset: 0 }
    }

    #[test]
    fn in_bounds_copy_verifies_and_one_past_fails() {
        assert_eq!(verify_kernel(&copy(4, 128, 512, tiled)), Ok(()));
        let err = verify_kernel(&copy(4, 128, 511, tiled)).unwrap_err();
        assert_eq!(err.kind, VerifyErrorKind::OutOfBounds { buf: BufId(0), min: 0, max: 511, len: 511 });
        assert_eq!(
            err.to_string(),
            "kernel 'copy' at `%0 = load.f32 b0[g0*128 + v1]`: index ranges over 0..=511 but buffer b0 has 511 elements"
        );
        let shifted = |g, v| {
            let mut e = tiled(g, v);
            e.offset = -1;
            e
        };
        assert_eq!(
            kind(&copy(4, 128, 512, shifted)),
            VerifyErrorKind::OutOfBounds { buf: BufId(0), min: -1, max: 510, len: 512 }
        );
    }

    #[test]
    fn div_and_mod_bounds_are_tight() {
        // ((v1 / 4) % 8) * 16 + v1 % 4 over v1 in 0..64: max = 7*16 + 3 = 115.
        let e = |_: VarId, v: VarId| IndexExpr {
            terms: vec![term(IndexSrc::Var(v), 4, Some(8), 16), term(IndexSrc::Var(v), 1, Some(4), 1)],
            offset: 0,
        };
        assert_eq!(verify_kernel(&copy(1, 64, 116, e)), Ok(()));
        assert_eq!(
            kind(&copy(1, 64, 115, e)),
            VerifyErrorKind::OutOfBounds { buf: BufId(0), min: 0, max: 115, len: 115 }
        );
        // A modulo that never wraps keeps the range: v1 % 100 over 0..64 reaches 63, not 99.
        let m = |_: VarId, v: VarId| IndexExpr { terms: vec![term(IndexSrc::Var(v), 1, Some(100), 1)], offset: 0 };
        assert_eq!(verify_kernel(&copy(1, 64, 64, m)), Ok(()));
        // Negative scales: 63 - v1.
        let rev = |_: VarId, v: VarId| IndexExpr { terms: vec![term(IndexSrc::Var(v), 1, None, -1)], offset: 63 };
        assert_eq!(verify_kernel(&copy(1, 64, 64, rev)), Ok(()));
    }

    #[test]
    fn value_terms_are_runtime_checked_unless_the_rest_already_overflows() {
        let build = |len: i64, modulo: Option<i64>| {
            let mut b = KernelBuilder::new("dyn", 1);
            let src = b.buffer("src", F32, len, false);
            let start = b.constant(Const::Int { ty: Ty::I64, bits: 3 });
            let v = b.begin_loop(0, 10);
            let e = IndexExpr {
                terms: vec![term(IndexSrc::Value(start), 1, modulo, 10), term(IndexSrc::Var(v), 1, None, 1)],
                offset: 0,
            };
            b.load(src, e);
            b.end_loop();
            b.finish()
        };
        assert_eq!(verify_kernel(&build(10, None)), Ok(()));
        assert_eq!(kind(&build(9, None)), VerifyErrorKind::OutOfBounds { buf: BufId(0), min: 0, max: 9, len: 9 });
        // With a modulo the term is bounded: (%0 % 4)*10 + v1 reaches 39.
        assert_eq!(verify_kernel(&build(40, Some(4))), Ok(()));
        assert_eq!(kind(&build(39, Some(4))), VerifyErrorKind::OutOfBounds { buf: BufId(0), min: 0, max: 39, len: 39 });
    }

    #[test]
    fn index_sources_must_be_i64_and_terms_well_formed() {
        let mut b = KernelBuilder::new("k", 1);
        let src = b.buffer("src", F32, 10, false);
        let i = b.constant(Const::Int { ty: Ty::I32, bits: 1 });
        b.load(src, IndexExpr { terms: vec![term(IndexSrc::Value(i), 1, Some(2), 1)], offset: 0 });
        assert!(matches!(kind(&b.finish()), VerifyErrorKind::Type(_)));

        let e = |_: VarId, v: VarId| IndexExpr { terms: vec![term(IndexSrc::Var(v), 0, None, 1)], offset: 0 };
        assert!(matches!(kind(&copy(1, 4, 4, e)), VerifyErrorKind::BadIndex(_)));
        let e = |_: VarId, v: VarId| IndexExpr { terms: vec![term(IndexSrc::Var(v), 1, Some(0), 1)], offset: 0 };
        assert!(matches!(kind(&copy(1, 4, 4, e)), VerifyErrorKind::BadIndex(_)));

        let mut b = KernelBuilder::new("neg", 1);
        let src = b.buffer("src", F32, 10, false);
        let v = b.begin_loop(-2, 2);
        b.load(src, IndexExpr { terms: vec![term(IndexSrc::Var(v), 2, None, 1)], offset: 2 });
        b.end_loop();
        assert!(matches!(kind(&b.finish()), VerifyErrorKind::BadIndex(_)));
    }

    #[test]
    fn undefined_and_out_of_scope_ids_fail() {
        let mut b = KernelBuilder::new("k", 1);
        let out = b.buffer("out", F32, 1, true);
        b.begin_loop(0, 1);
        let x = b.constant(Const::F32(0));
        b.end_loop();
        b.store(out, IndexExpr::constant(0), x);
        let err = verify_kernel(&b.finish()).unwrap_err();
        assert_eq!(err.kind, VerifyErrorKind::Undefined("%0".into()));
        assert_eq!(err.stmt.as_deref(), Some("store.f32 b0[0], %0"));

        // A loop variable used after its loop.
        let mut b = KernelBuilder::new("k", 1);
        let out = b.buffer("out", F32, 4, true);
        let v = b.begin_loop(0, 4);
        b.end_loop();
        let x = b.constant(Const::F32(0));
        b.store(out, IndexExpr::var(v, 1), x);
        assert_eq!(kind(&b.finish()), VerifyErrorKind::Undefined("v1".into()));

        // A local declared in one branch used in the other.
        let mut b = KernelBuilder::new("k", 1);
        let c = b.constant(Const::Pred(true));
        let z = b.constant(Const::F32(0));
        let mut local = None;
        b.if_else(c, |b| local = Some(b.local(Ty::F32, z)), |_| {});
        b.if_else(c, |_| {}, |b| b.set_local(local.unwrap(), z));
        assert_eq!(kind(&b.finish()), VerifyErrorKind::Undefined("l0".into()));

        // A value used before its definition.
        let k = Kernel {
            name: "k".into(),
            buffers: vec![],
            grid: Grid { var: VarId(0), extent: 1 },
            body: vec![
                Stmt::Let(ValueId(0), Op::Unary { op: UnOp::Neg, ty: Ty::I32, a: ValueId(1) }),
                Stmt::Let(ValueId(1), Op::Const(Const::Int { ty: Ty::I32, bits: 1 })),
            ],
        };
        assert_eq!(kind(&k), VerifyErrorKind::Undefined("%1".into()));
    }

    #[test]
    fn duplicate_ids_fail() {
        let c = Op::Const(Const::Pred(true));
        let base = Kernel { name: "k".into(), buffers: vec![], grid: Grid { var: VarId(0), extent: 1 }, body: vec![] };
        // Even when the first definition is out of scope.
        let mut k = base.clone();
        k.body = vec![
            Stmt::Let(ValueId(9), c.clone()),
            Stmt::If { cond: ValueId(9), then_body: vec![Stmt::Let(ValueId(1), c.clone())], else_body: vec![] },
            Stmt::Let(ValueId(1), c.clone()),
        ];
        assert_eq!(kind(&k), VerifyErrorKind::Duplicate("%1".into()));

        let mut k = base.clone();
        let lp = |var| {
            Stmt::Loop(Loop {
                var,
                start: 0,
                end: 1,
                vector_width: 1,
                tail: Tail::None,
                body: vec![],
                reductions: vec![],
            })
        };
        k.body = vec![lp(VarId(1)), lp(VarId(1))];
        assert_eq!(kind(&k), VerifyErrorKind::Duplicate("v1".into()));
        k.body = vec![lp(VarId(0))];
        assert_eq!(kind(&k), VerifyErrorKind::Duplicate("g0".into()));

        let mut k = base;
        let decl = Stmt::DeclLocal { local: LocalId(0), ty: Ty::Pred, init: ValueId(0) };
        k.body = vec![Stmt::Let(ValueId(0), c), decl.clone(), decl];
        assert_eq!(kind(&k), VerifyErrorKind::Duplicate("l0".into()));
    }

    /// A kernel with one `Let` of `op` after constants `%0: f32`, `%1: i32`, `%2: pred`,
    /// `%3: i64`.
    fn with_op(op: Op) -> Kernel {
        let mut b = KernelBuilder::new("k", 1);
        b.constant(Const::F32(0));
        b.constant(Const::Int { ty: Ty::I32, bits: 0 });
        b.constant(Const::Pred(false));
        b.constant(Const::Int { ty: Ty::I64, bits: 0 });
        b.let_(op);
        b.finish()
    }

    #[test]
    fn operand_types_must_match_the_op() {
        let (f, i, p, l) = (ValueId(0), ValueId(1), ValueId(2), ValueId(3));
        let good = [
            Op::Binary { op: BinOp::Add, ty: Ty::F32, a: f, b: f },
            Op::Binary { op: BinOp::SDiv, ty: Ty::I32, a: i, b: i },
            Op::Binary { op: BinOp::Xor, ty: Ty::Pred, a: p, b: p },
            Op::Cmp { op: CmpOp::Eq, ty: Ty::Pred, a: p, b: p },
            Op::Cmp { op: CmpOp::FLt, ty: Ty::F32, a: f, b: f },
            Op::Select { ty: Ty::I32, cond: p, a: i, b: i },
            Op::Unary { op: UnOp::Not, ty: Ty::Pred, a: p },
            Op::Unary { op: UnOp::Abs, ty: Ty::F32, a: f },
            Op::Cast { op: CastOp::SExt, from: Ty::Pred, to: Ty::I32, a: p },
            Op::Cast { op: CastOp::Trunc, from: Ty::I32, to: Ty::Pred, a: i },
            Op::Cast { op: CastOp::Bitcast, from: Ty::F32, to: Ty::I32, a: f },
            Op::Cast { op: CastOp::FPToUISat, from: Ty::F32, to: Ty::I64, a: f },
            Op::Cast { op: CastOp::FPExt, from: Ty::F32, to: Ty::F64, a: f },
            Op::Math { func: MathFn::Pow, ty: Ty::F32, args: vec![f, f] },
            Op::Index(IndexExpr { terms: vec![term(IndexSrc::Value(l), 1, None, 2)], offset: 1 }),
        ];
        for op in good {
            assert_eq!(verify_kernel(&with_op(op.clone())), Ok(()), "{op}");
        }
        let bad = [
            Op::Binary { op: BinOp::Add, ty: Ty::F32, a: f, b: i },
            Op::Binary { op: BinOp::Add, ty: Ty::Pred, a: p, b: p },
            Op::Binary { op: BinOp::FDiv, ty: Ty::I32, a: i, b: i },
            Op::Binary { op: BinOp::SDiv, ty: Ty::F32, a: f, b: f },
            Op::Binary { op: BinOp::Shl, ty: Ty::I64, a: l, b: i },
            Op::Cmp { op: CmpOp::Slt, ty: Ty::F32, a: f, b: f },
            Op::Cmp { op: CmpOp::FEq, ty: Ty::I32, a: i, b: i },
            Op::Cmp { op: CmpOp::Eq, ty: Ty::I32, a: i, b: l },
            Op::Select { ty: Ty::I32, cond: i, a: i, b: i },
            Op::Select { ty: Ty::I32, cond: p, a: i, b: f },
            Op::Unary { op: UnOp::Sqrt, ty: Ty::I32, a: i },
            Op::Unary { op: UnOp::Popcnt, ty: Ty::F32, a: f },
            Op::Unary { op: UnOp::Not, ty: Ty::F32, a: f },
            Op::Unary { op: UnOp::Neg, ty: Ty::I64, a: i },
            Op::Cast { op: CastOp::SExt, from: Ty::I64, to: Ty::I32, a: l },
            Op::Cast { op: CastOp::ZExt, from: Ty::I32, to: Ty::I32, a: i },
            Op::Cast { op: CastOp::Trunc, from: Ty::I32, to: Ty::I64, a: i },
            Op::Cast { op: CastOp::Bitcast, from: Ty::I32, to: Ty::F64, a: i },
            Op::Cast { op: CastOp::FPTrunc, from: Ty::F32, to: Ty::F32, a: f },
            Op::Cast { op: CastOp::SIToFP, from: Ty::Pred, to: Ty::F32, a: p },
            Op::Cast { op: CastOp::SIToFP, from: Ty::I64, to: Ty::F32, a: i },
            Op::Math { func: MathFn::Exp, ty: Ty::I32, args: vec![i] },
            Op::Math { func: MathFn::Exp, ty: Ty::F32, args: vec![f, f] },
            Op::Math { func: MathFn::Atan2, ty: Ty::F32, args: vec![f] },
            Op::Math { func: MathFn::Exp, ty: Ty::F64, args: vec![f] },
            Op::Const(Const::Int { ty: Ty::F32, bits: 0 }),
        ];
        for op in bad {
            assert!(matches!(kind(&with_op(op.clone())), VerifyErrorKind::Type(_)), "{op}");
        }
    }

    #[test]
    fn memory_types_and_writability() {
        let mut b = KernelBuilder::new("k", 1);
        let ro = b.buffer("ro", F32, 1, false);
        let x = b.load(ro, IndexExpr::constant(0));
        b.store(ro, IndexExpr::constant(0), x);
        let err = verify_kernel(&b.finish()).unwrap_err();
        assert_eq!(err.kind, VerifyErrorKind::ReadOnly(BufId(0)));
        assert_eq!(err.to_string(), "kernel 'k' at `store.f32 b0[0], %0`: stores to read-only buffer b0");

        let mut b = KernelBuilder::new("k", 1);
        let buf = b.buffer("buf", F32, 1, true);
        b.let_(Op::Load { buf, index: IndexExpr::constant(0), mem: MemType::Scalar(Ty::I32) });
        assert_eq!(
            kind(&b.finish()),
            VerifyErrorKind::MemMismatch { buf, used: MemType::Scalar(Ty::I32), declared: F32 }
        );

        let mut b = KernelBuilder::new("k", 1);
        let buf = b.buffer("bits", MemType::Packed { bits: 1, pred: true }, 8, true);
        let x = b.constant(Const::Int { ty: Ty::I8, bits: 1 });
        b.store(buf, IndexExpr::constant(7), x);
        assert!(matches!(kind(&b.finish()), VerifyErrorKind::Type(_)));

        for mem in [MemType::Scalar(Ty::Pred), MemType::Packed { bits: 3, pred: false }] {
            let mut b = KernelBuilder::new("k", 1);
            b.buffer("b", mem, 1, true);
            assert!(matches!(kind(&b.finish()), VerifyErrorKind::BadBuffer { .. }));
        }
        let mut b = KernelBuilder::new("k", 1);
        b.buffer("b", F32, -1, true);
        assert!(matches!(kind(&b.finish()), VerifyErrorKind::BadBuffer { .. }));
    }

    #[test]
    fn unknown_buffers_fail() {
        let k = Kernel {
            name: "k".into(),
            buffers: vec![],
            grid: Grid { var: VarId(0), extent: 1 },
            body: vec![Stmt::Let(ValueId(0), Op::Load { buf: BufId(3), index: IndexExpr::constant(0), mem: F32 })],
        };
        assert_eq!(kind(&k), VerifyErrorKind::UnknownBuffer(BufId(3)));
    }

    #[test]
    fn loops_and_grid_are_sane() {
        let lp = |start, end, vector_width, tail, body| {
            Stmt::Loop(Loop { var: VarId(1), start, end, vector_width, tail, body, reductions: vec![] })
        };
        let k = |body: Vec<Stmt>, extent| Kernel {
            name: "k".into(),
            buffers: vec![],
            grid: Grid { var: VarId(0), extent },
            body,
        };
        assert_eq!(verify_kernel(&k(vec![lp(0, 32, 16, Tail::None, vec![])], 1)), Ok(()));
        assert_eq!(verify_kernel(&k(vec![lp(0, 30, 16, Tail::Peel, vec![])], 1)), Ok(()));
        assert_eq!(verify_kernel(&k(vec![lp(5, 0, 1, Tail::None, vec![])], 1)), Ok(()));
        for bad in [
            lp(0, 30, 16, Tail::None, vec![]),
            lp(0, 32, 12, Tail::None, vec![]),
            lp(0, 32, 0, Tail::None, vec![]),
            lp(0, 256, 128, Tail::None, vec![]),
            lp(i64::MIN, i64::MAX, 1, Tail::None, vec![]),
            lp(
                0,
                32,
                4,
                Tail::None,
                vec![Stmt::Loop(Loop {
                    reductions: vec![],
                    var: VarId(2),
                    start: 0,
                    end: 2,
                    vector_width: 1,
                    tail: Tail::None,
                    body: vec![],
                })],
            ),
        ] {
            assert!(matches!(kind(&k(vec![bad.clone()], 1)), VerifyErrorKind::BadLoop(_)), "{bad}");
        }
        assert!(matches!(kind(&k(vec![], -1)), VerifyErrorKind::BadGrid(_)));
    }

    #[test]
    fn code_that_never_runs_is_not_bounds_checked() {
        assert_eq!(verify_kernel(&copy(0, 4, 0, tiled)), Ok(()));
        assert_eq!(verify_kernel(&copy(3, 0, 0, tiled)), Ok(()));
        assert!(matches!(kind(&copy(1, 1, 0, tiled)), VerifyErrorKind::OutOfBounds { .. }));
    }

    #[test]
    fn call_pointers_may_point_one_past_the_end() {
        let call = |index: i64| {
            let mut b = KernelBuilder::new("k", 1);
            let buf = b.buffer("c", F32, 4, true);
            b.call("f", vec![CallArg::Ptr { buf, index: IndexExpr::constant(index) }, CallArg::I64(1)]);
            b.finish()
        };
        assert_eq!(verify_kernel(&call(4)), Ok(()));
        assert!(matches!(kind(&call(5)), VerifyErrorKind::OutOfBounds { .. }));
        assert!(matches!(kind(&call(-1)), VerifyErrorKind::OutOfBounds { .. }));
    }
}
