//! Vector loops: Cranelift has no vectorizer and its x86-64 backend has 128-bit vectors only
//! (DESIGN.md section 6), so an innermost loop whose `vector_width` asks for it runs as an
//! f32x4 / i32x4 / f64x2 main loop plus a scalar tail, when its body allows:
//!
//! - `Let`, `Store`, locals held as vectors (lane reductions' accumulators and the locals the
//!   body declares, one vector variable each), and branches on uniform conditions, which all
//!   lanes take together (`AnyLane`, one `vany_true` of a mask, makes one);
//! - every value either *uniform* (does not depend on the loop variable: computed as a scalar
//!   before the loop where it can be, and splatted where a vector needs it; in a loop using
//!   many distinct constants, those are loaded from a table instead, `vector_consts`) or
//!   *varying* of type F32, I32 or F64 (or a `Pred` mask from comparing those), all with the
//!   same lane count;
//! - varying loads and all stores contiguous: exactly one term over the loop variable, with
//!   scale 1 and no div/mod; uniform loads do not use the loop variable at all; except that
//!   loads and stores of 32- or 64-bit lanes may be strided (scale other than 0 and 1: a
//!   transpose's column, a complex result's real and imaginary parts), each lane then read
//!   or written on its own (a transpose of an f32[200,304] ran 2.7x faster than as a
//!   scalar loop);
//! - varying ops in the set Cranelift vectorizes (arithmetic, fused multiply-add, min/max,
//!   sqrt, abs, neg, rounding, comparisons, selects, bitwise ops, shifts of 32-bit lanes by a
//!   uniform amount, int<->float conversions of 32-bit lanes), and 32-bit integer divisions,
//!   remainders and shifts by varying amounts, which run lane by lane ([`lane_by_lane`]);
//!   16-bit loads and stores (f16/bf16 bits) with their extensions to and truncations from
//!   32-bit lanes; 8- and 16-bit integers, held zero-extended in 32-bit lanes, loaded,
//!   stored, selected, extended, truncated and converted to and from f32 (an int8
//!   quantization's `f32 -> s8`, saturating to the narrow range, ran scalar on this tier at 9x
//!   the LLVM tier's time); predicate bytes loaded and stored four at a time as masks of
//!   32-bit lanes; math functions are called once per lane;
//! - loads and stores through index values the body defines, which read the values'
//!   expressions instead (`crate::index_forwarding`);
//! - loads through 64-bit varying values (a table lookup by computed positions: a
//!   searchsorted's probes, an interp's knots, a take), which hold one scalar per lane: each
//!   lane extended from a 32-bit lane, computed on (arithmetic, min/max, bit ops), and loaded
//!   through on its own, or narrowed back to a 32-bit lane (`Plan`). Stores through them
//!   (scatters) stay scalar.
//!
//! Anything else stays scalar. Vector results equal scalar ones lane by lane (IEEE ops, the
//! same NaN choice for FMax/FMin), so the tail split never changes an answer.
//!
//! f32 values beside f64 ones (an f32 sum accumulated in f64: column reductions, convolution
//! loops, a whole array's sum) would need two lane counts; such a body runs two lanes per
//! iteration instead, its f32 values in the low half of an f32x4 (loaded and stored 8 bytes at
//! a time, widened by `fvpromote_low`, narrowed by `fvdemote`), and no f32 compares or selects,
//! whose masks would not fit the f64 ones.
//!
//! 16-bit lanes cost a widening per four lanes on the way in (`uload16x4`, then the shift a
//! bf16 takes) and a pack and a partial store on the way out. A body with 16-bit accesses that
//! reads no buffer the kernel writes and has no branches therefore runs as two halves per
//! iteration ([`Halves`]): the lower half loads eight lanes at once and widens its four (a bf16
//! widening is then one interleave with zeros), the upper half widens the other four, and it
//! stores both halves' lanes packed in one 16-byte store.
//!
//! A lane reduction (the kernel IR's `Loop::reductions`) fixes its lane count `W` in the IR;
//! this tier runs it as `W / n` copies of the body per iteration, copy `c` on lanes
//! `c*n .. c*n + n` with accumulator `c` (`n` the native lane count when the body vectorizes
//! as above, with the reduction locals as varying values; 1 otherwise: `W` scalar
//! accumulators), then folds the accumulators in the IR's tree order: whole vectors while the
//! tree's stride is at least `n`, then lanes.

use std::collections::HashMap;

use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::{types, Endianness, InstBuilder, InstructionData, MemFlagsData, Opcode, Type, Value};
use cranelift_frontend::Variable;
use tessera_lower::kernel::{
    BinOp, BufId, CastOp, IndexExpr, IndexSrc, LocalId, Loop, MemType, Op, Stmt, Ty, UnOp, ValueId, VarId,
};

use super::function::{cl_type, mem_flags, Translator};
use super::index::{access_form, Form};
use super::ops::{fcmp, float_cc, int_cc};
use super::{Failure, Result};

/// The translation met something the plan did not admit (a bug in this file).
fn mismatch() -> Failure {
    Failure::Malformed("the vector loop translation disagrees with its plan".into())
}

/// Lane count of a varying value of type `ty` (`None` for types with no vector form here).
fn lanes_of(ty: Ty) -> Option<i64> {
    match ty {
        // I16 lanes (f16/bf16 bits, 16-bit integers) and I8 lanes (8-bit integers) live
        // zero-extended in i32x4 registers: loaded widened, stored narrowed; only selects and
        // conversions touch them.
        Ty::F32 | Ty::I32 | Ty::I16 | Ty::I8 => Some(4),
        Ty::F64 => Some(2),
        _ => None,
    }
}

fn vector_type(ty: Ty, lanes: i64) -> Type {
    match (ty, lanes) {
        (Ty::F32, _) => types::F32X4,
        (Ty::I32 | Ty::I16 | Ty::I8, _) => types::I32X4,
        (Ty::F64, _) => types::F64X2,
        // Masks have lanes as wide as the values they select between.
        (_, 4) => types::I32X4,
        _ => types::I64X2,
    }
}

/// Lane reinterpretation between vector types (Cranelift wants an explicit byte order).
pub(crate) fn lane_cast_flags() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// Two copies of a vector body on adjacent lanes (module doc): the eight-lane loads the lower
/// half made, by the load's value, and the lanes its 16-bit stores left for the upper half, by
/// buffer and stored value.
pub(crate) struct Halves {
    upper: bool,
    loads: HashMap<ValueId, Value>,
    stores: HashMap<(u32, ValueId), Value>,
}

impl Halves {
    fn lower() -> Halves {
        Halves { upper: false, loads: HashMap::new(), stores: HashMap::new() }
    }
}

/// Whether `l`'s vector body can run as two [`Halves`]: it has 16-bit accesses to share, reads
/// no buffer the kernel writes (the lower half's loads run before the upper half's stores, and
/// the lower half's stores after the upper half's loads), and has no branches (each half must
/// make the same accesses).
fn pairs_halves(l: &Loop, plan: &Plan, writable: impl Fn(tessera_lower::kernel::BufId) -> bool) -> bool {
    // A gathered load's lanes are each their own load; its index's lanes are per copy.
    if plan.lanes != 4 || plan.varying.values().any(|&t| t == Ty::I64) {
        return false;
    }
    let mut sixteen_bit = false;
    for stmt in &l.body {
        match stmt {
            Stmt::Let(id, Op::Load { buf, mem, .. }) => {
                if writable(*buf) {
                    return false;
                }
                sixteen_bit |= *mem == MemType::Scalar(Ty::I16) && plan.varying.contains_key(id);
            }
            Stmt::Store { mem, .. } => sixteen_bit |= *mem == MemType::Scalar(Ty::I16),
            Stmt::If { .. } => return false,
            _ => {}
        }
    }
    sixteen_bit
}

/// The stride of an access's lanes, in elements, when it is strided (`Access::Strided`).
fn lane_stride(index: &IndexExpr, var: VarId) -> Option<i64> {
    let mut over = index.terms.iter().filter(|t| t.src == IndexSrc::Var(var));
    match (over.next(), over.next()) {
        (Some(t), None) if t.scale != 0 && t.scale != 1 => Some(t.scale),
        _ => None,
    }
}

/// The loop variable's scale in `index` (0 when it has no plain term over `var`).
fn var_scale(index: &IndexExpr, var: VarId) -> i64 {
    index.terms.iter().filter(|t| t.src == IndexSrc::Var(var)).map(|t| t.scale).sum()
}

/// How an index expression uses the loop variable `var`.
enum Access {
    Uniform,
    Contiguous,
    /// Consecutive lanes a constant number of elements apart: loaded and stored lane by lane
    /// (a transpose's reads, a complex result's parts).
    Strided,
    /// Through a 64-bit varying value (a table lookup by computed positions): each lane's
    /// index computed and loaded on its own.
    Gathered,
}

/// The loop's vectorizability: which values vary, the locals held as vectors, and the lane
/// count. `None`: stay scalar. A varying value of type I64 is *wide*: it has no vector form
/// (x86-64 has no 64-bit lanes to match four 32-bit ones), so each lane is a scalar
/// (`Translator::wide`); such values come from extending 32-bit lanes and only feed 64-bit
/// arithmetic, narrowing back to 32 bits, and the indices of gathered loads.
struct Plan {
    lanes: i64,
    /// The loop variable (strided stores find their stride from it).
    var: VarId,
    varying: HashMap<ValueId, Ty>,
    vector_locals: HashMap<LocalId, Ty>,
}

struct Planner<'t, 'a, 'f> {
    t: &'t Translator<'a, 'f>,
    var: VarId,
    /// Locals read and written as vectors: the loop's lane reductions (accumulators) and the
    /// locals its body declares.
    vector_locals: HashMap<LocalId, Ty>,
    varying: HashMap<ValueId, Ty>,
    uniform: HashMap<ValueId, Ty>,
    lanes: Option<i64>,
    /// Whether f32 values take two lanes, to match f64 ones (module doc).
    mixed: bool,
}

impl Planner<'_, '_, '_> {
    fn ty_of(&self, id: ValueId) -> Option<(Ty, bool)> {
        if let Some(&t) = self.varying.get(&id) {
            return Some((t, true));
        }
        if let Some(&t) = self.uniform.get(&id) {
            return Some((t, false));
        }
        self.t.value(id).ok().map(|(_, t)| (t, false))
    }

    /// Records that a varying value of `ty` exists: its lane count must match the others.
    fn lanes(&mut self, ty: Ty) -> Option<()> {
        let n = if self.mixed && ty == Ty::F32 { 2 } else { lanes_of(ty)? };
        match self.lanes {
            Some(l) if l != n => None,
            _ => {
                self.lanes = Some(n);
                Some(())
            }
        }
    }

    fn access(&self, index: &IndexExpr) -> Option<Access> {
        let mut scale = None;
        let mut gathered = false;
        for term in &index.terms {
            match term.src {
                IndexSrc::Var(v) if v == self.var => {
                    if term.div != 1 || term.modulo.is_some() || scale.is_some() {
                        return None;
                    }
                    scale = Some(term.scale);
                }
                IndexSrc::Var(_) => {}
                IndexSrc::Value(id) => match self.varying.get(&id) {
                    Some(Ty::I64) => gathered = true,
                    Some(_) => return None,
                    None => {}
                },
            }
        }
        if gathered {
            return Some(Access::Gathered);
        }
        Some(match scale {
            None | Some(0) => Access::Uniform,
            Some(1) => Access::Contiguous,
            Some(_) => Access::Strided,
        })
    }

    /// Classifies `op`: `Some(Some(ty))` varying of `ty`, `Some(None)` uniform, `None` not
    /// vectorizable.
    fn op(&mut self, op: &Op) -> Option<Option<Ty>> {
        let vary = |p: &Self, ids: &[ValueId]| -> Option<bool> {
            let mut any = false;
            for &id in ids {
                any |= p.ty_of(id)?.1;
            }
            Some(any)
        };
        match op {
            Op::GetLocal(l) if self.vector_locals.contains_key(l) => {
                let ty = self.vector_locals[l];
                self.lanes(ty)?;
                Some(Some(ty))
            }
            // One answer per vector iteration: a uniform value (computed in the loop, never
            // before it: `hoist_uniform` keeps values of varying operands in place).
            Op::AnyLane { a } => {
                self.ty_of(*a)?;
                Some(None)
            }
            Op::Const(_) | Op::GetLocal(_) => Some(None),
            Op::Index(index) => match self.access(index)? {
                Access::Uniform => Some(None),
                // The loop variable's lanes (an iota: argmax's positions, a causal mask's
                // columns) as 32-bit lanes, which only a narrowing to I32 may read: every
                // other op on an I64 has no vector form here, so its loop stays scalar.
                Access::Contiguous => {
                    self.lanes(Ty::I32)?;
                    Some(Some(Ty::I32))
                }
                Access::Gathered => Some(Some(Ty::I64)),
                Access::Strided => None,
            },
            Op::Load { index, mem, .. } => {
                let ty = match (self.access(index)?, mem) {
                    (Access::Uniform, _) => return Some(None),
                    (Access::Contiguous, MemType::Scalar(t @ (Ty::F32 | Ty::I32 | Ty::F64 | Ty::I16 | Ty::I8)))
                    | (Access::Strided, MemType::Scalar(t @ (Ty::F32 | Ty::I32 | Ty::F64)))
                    | (Access::Gathered, MemType::Scalar(t @ (Ty::F32 | Ty::I32 | Ty::I16 | Ty::I8))) => *t,
                    // Four predicate bytes become a mask of four 32-bit lanes.
                    (Access::Contiguous | Access::Gathered, MemType::Pred) => Ty::Pred,
                    _ => return None,
                };
                self.lanes(if ty == Ty::Pred { Ty::I32 } else { ty })?;
                Some(Some(ty))
            }
            Op::Unary { op, ty, a } => {
                if !vary(self, &[*a])? {
                    return Some(None);
                }
                let ok = match ty {
                    Ty::F32 | Ty::F64 => matches!(
                        op,
                        UnOp::Neg | UnOp::Abs | UnOp::Sqrt | UnOp::Floor | UnOp::Ceil | UnOp::Trunc | UnOp::RoundEven
                    ),
                    Ty::I32 => matches!(op, UnOp::Neg | UnOp::Abs | UnOp::Not),
                    Ty::Pred => matches!(op, UnOp::Not),
                    _ => false,
                };
                ok.then_some(Some(*ty))
            }
            Op::Binary { op, ty, a, b } => {
                if !vary(self, &[*a, *b])? {
                    return Some(None);
                }
                use BinOp::*;
                if *ty == Ty::I64 {
                    // Wide lanes (Plan), each operand wide or uniform: not the loop
                    // variable's iota, whose lanes are 32-bit.
                    let wide_or_uniform = |id: &ValueId| self.ty_of(*id).is_some_and(|(t, v)| !v || t == Ty::I64);
                    let ok = [a, b].into_iter().all(wide_or_uniform)
                        && matches!(op, Add | Sub | Mul | And | Or | Xor | SMax | SMin | UMax | UMin);
                    return ok.then_some(Some(Ty::I64));
                }
                // Divisions, remainders and shifts by amounts that vary run lane by lane
                // ([`lane_by_lane`]); the rest of the body stays in vectors.
                let ok = match ty {
                    Ty::F32 | Ty::F64 => matches!(op, Add | Sub | Mul | FDiv | FMax | FMin),
                    Ty::I32 => {
                        lane_by_lane(*op, *ty)
                            || matches!(op, Add | Sub | Mul | And | Or | Xor | SMax | SMin | UMax | UMin)
                    }
                    Ty::Pred => matches!(op, And | Or | Xor),
                    _ => false,
                };
                if *ty != Ty::Pred {
                    self.lanes(*ty)?;
                }
                ok.then_some(Some(*ty))
            }
            Op::Cmp { op, ty, a, b } => {
                if !vary(self, &[*a, *b])? {
                    return Some(None);
                }
                // Two f32 lanes would make a mask of a width no f64 select reads.
                if self.mixed && *ty == Ty::F32 {
                    return None;
                }
                self.lanes(*ty)?;
                let ok = match ty {
                    Ty::F32 | Ty::F64 => float_cc(*op).is_some(),
                    Ty::I32 => int_cc(*op).is_some(),
                    _ => false,
                };
                ok.then_some(Some(Ty::Pred))
            }
            Op::Select { ty, cond, a, b } => {
                if !vary(self, &[*cond, *a, *b])? {
                    return Some(None);
                }
                if self.mixed && *ty == Ty::F32 {
                    return None;
                }
                if *ty != Ty::Pred {
                    self.lanes(*ty)?;
                }
                Some(Some(*ty))
            }
            Op::Fma { ty, a, b, c } => {
                if !vary(self, &[*a, *b, *c])? {
                    return Some(None);
                }
                if !ty.is_float() {
                    return None;
                }
                self.lanes(*ty)?;
                Some(Some(*ty))
            }
            Op::Cast { op, from, to, a } => {
                if !vary(self, &[*a])? {
                    return Some(None);
                }
                let widening =
                    matches!((op, from, to), (CastOp::FPExt, Ty::F32, Ty::F64) | (CastOp::FPTrunc, Ty::F64, Ty::F32));
                if widening {
                    return self.mixed.then_some(Some(*to));
                }
                // To and from wide lanes (Plan); 16- and 8-bit lanes are held zero-extended.
                let extends = matches!(
                    (op, from, to),
                    (CastOp::ZExt | CastOp::SExt, Ty::I32, Ty::I64) | (CastOp::ZExt, Ty::I16 | Ty::I8, Ty::I64)
                );
                if extends {
                    self.lanes(Ty::I32)?;
                    return Some(Some(Ty::I64));
                }
                let ok = matches!(
                    (op, from, to),
                    (CastOp::Bitcast, Ty::F32, Ty::I32)
                        | (CastOp::Bitcast, Ty::I32, Ty::F32)
                        | (CastOp::ZExt | CastOp::SExt, Ty::I16 | Ty::I8, Ty::I32)
                        | (CastOp::Trunc, Ty::I32, Ty::I16 | Ty::I8)
                        | (CastOp::Trunc, Ty::I64, Ty::I32)
                        | (CastOp::SIToFP, Ty::I32 | Ty::I16 | Ty::I8, Ty::F32)
                        | (CastOp::UIToFP, Ty::I16 | Ty::I8, Ty::F32)
                        | (CastOp::FPToSISat, Ty::F32, Ty::I32 | Ty::I16 | Ty::I8)
                        | (CastOp::FPToUISat, Ty::F32, Ty::I16 | Ty::I8)
                );
                ok.then_some(Some(*to))
            }
            Op::Math { ty, args, .. } => {
                if !vary(self, args)? {
                    return Some(None);
                }
                // One call per lane: the loads, stores and arithmetic around it stay vectors.
                self.lanes(*ty)?;
                Some(Some(*ty))
            }
        }
    }

    fn plan(mut self, l: &Loop) -> Option<Plan> {
        self.stmts(&l.body)?;
        let lanes = self.lanes?;
        // Masks take their width from the lane count: every varying Pred must come from
        // values of that count, which `lanes` already enforced.
        Some(Plan { lanes, var: self.var, varying: self.varying, vector_locals: self.vector_locals })
    }

    /// Plans the loop's body or a branch in it.
    fn stmts(&mut self, body: &[Stmt]) -> Option<()> {
        for stmt in body {
            match stmt {
                Stmt::Let(id, op) => match self.op(op)? {
                    Some(ty) => {
                        self.varying.insert(*id, ty);
                    }
                    None => {
                        let ty = uniform_type(self.t, op)?;
                        self.uniform.insert(*id, ty);
                    }
                },
                Stmt::Store { index, mem, value, .. } => {
                    match (self.access(index)?, mem) {
                        (Access::Contiguous, MemType::Scalar(t @ (Ty::F32 | Ty::I32 | Ty::F64 | Ty::I16 | Ty::I8)))
                        | (Access::Strided, MemType::Scalar(t @ (Ty::F32 | Ty::I32 | Ty::F64))) => self.lanes(*t)?,
                        (Access::Contiguous, MemType::Pred) => self.lanes(Ty::I32)?,
                        _ => return None,
                    }
                    self.ty_of(*value)?;
                }
                Stmt::SetLocal { local, value } if self.vector_locals.contains_key(local) => {
                    let ty = self.vector_locals[local];
                    self.lanes(ty)?;
                    if self.ty_of(*value)?.0 != ty {
                        return None;
                    }
                }
                Stmt::DeclLocal { local, ty, init } => {
                    self.lanes(*ty)?;
                    if self.ty_of(*init)?.0 != *ty {
                        return None;
                    }
                    self.vector_locals.insert(*local, *ty);
                }
                // A branch on a uniform condition (an `AnyLane`) is taken by all lanes at once.
                Stmt::If { cond, then_body, else_body } => {
                    if self.ty_of(*cond)?.1 {
                        return None;
                    }
                    self.stmts(then_body)?;
                    self.stmts(else_body)?;
                }
                _ => return None,
            }
        }
        Some(())
    }
}

/// The result type of a uniform op (the scalar translation checks operand types again).
fn uniform_type(t: &Translator, op: &Op) -> Option<Ty> {
    Some(match op {
        Op::Const(c) => c.ty(),
        Op::Load { mem, .. } => mem.reg(),
        Op::Index(_) => Ty::I64,
        Op::GetLocal(local) => t.local_type(*local)?,
        Op::Unary { ty, .. }
        | Op::Binary { ty, .. }
        | Op::Select { ty, .. }
        | Op::Fma { ty, .. }
        | Op::Math { ty, .. } => *ty,
        Op::Cmp { .. } | Op::AnyLane { .. } => Ty::Pred,
        Op::Cast { to, .. } => *to,
    })
}

/// Whether a varying `op` on `ty` runs lane by lane in a vector loop: x86 has no vector integer
/// division, and Cranelift shifts every lane of a vector by one amount (a shift whose amount
/// is uniform stays a vector shift). Each lane's operation is the scalar one, on a divisor the
/// lowering has already guarded, so the loop computes what the scalar loop did; the ops around
/// it keep their vector form (JAX's `(a * 7 + b) // b % 13 ^ (a >> 3)` over s32[4194304],
/// whose loop ran scalar for its divisions, 19.2 -> 9.7 ms on this tier; XLA:CPU 19.6).
fn lane_by_lane(op: BinOp, ty: Ty) -> bool {
    ty == Ty::I32
        && matches!(op, BinOp::SDiv | BinOp::UDiv | BinOp::SRem | BinOp::URem | BinOp::Shl | BinOp::LShr | BinOp::AShr)
}

/// The lane bits of the mask a float negation (the sign bit, xored) or absolute value (every
/// other bit, anded) takes as one bit op; `None` for other ops and types.
pub(crate) fn sign_mask(op: UnOp, ty: Ty) -> Option<u64> {
    let sign = match ty {
        Ty::F64 => 1u64 << 63,
        Ty::F32 => 1 << 31,
        _ => return None,
    };
    match op {
        UnOp::Neg => Some(sign),
        UnOp::Abs => Some(sign - 1),
        _ => None,
    }
}

/// Every value `op` reads, index sources included.
pub(crate) fn operands(op: &Op) -> Vec<ValueId> {
    let sources = |index: &IndexExpr| {
        index
            .terms
            .iter()
            .filter_map(|t| match t.src {
                IndexSrc::Value(v) => Some(v),
                IndexSrc::Var(_) => None,
            })
            .collect::<Vec<_>>()
    };
    match op {
        Op::Load { index, .. } | Op::Index(index) => sources(index),
        _ => op.operands(),
    }
}

impl Translator<'_, '_> {
    /// Computes the uniform values of a vector loop's body before the loop (it runs at least
    /// once, so this is safe): Cranelift does not move calls or loads out of loops, and a
    /// uniform `pow` per vector iteration costs more than the whole vector body. Loads from
    /// buffers the kernel writes stay in the loop, and so does everything computed from them.
    fn hoist_uniform(&mut self, l: &Loop, plan: &Plan) -> Result<()> {
        let mut pinned: Vec<ValueId> = Vec::new();
        for stmt in &l.body {
            let Stmt::Let(id, op) = stmt else { continue };
            if plan.varying.contains_key(id) {
                continue;
            }
            let writable_load = match op {
                Op::Load { buf, .. } => self.writable(*buf),
                _ => false,
            };
            let reads_lanes = operands(op).iter().any(|v| pinned.contains(v) || plan.varying.contains_key(v));
            if writable_load || reads_lanes {
                pinned.push(*id);
                continue;
            }
            let (v, ty) = self.op(op)?;
            self.define(*id, v, ty)?;
        }
        Ok(())
    }

    /// Translates `l` as a vector loop plus scalar tail if its body allows it (module doc);
    /// false if it stays scalar (nothing was emitted then).
    pub(crate) fn vector_loop(&mut self, l: &Loop) -> Result<bool> {
        let Some(plan) = self.plan(l, HashMap::new()) else { return Ok(false) };
        let Some(trip) = l.end.checked_sub(l.start) else { return Ok(false) };
        if i64::from(l.vector_width) < plan.lanes || trip < plan.lanes {
            return Ok(false);
        }
        let main_end = l.start + trip / plan.lanes * plan.lanes;
        let pair = 2 * plan.lanes;
        let paired_end = if i64::from(l.vector_width) >= pair && pairs_halves(l, &plan, |b| self.writable(b)) {
            l.start + trip / pair * pair
        } else {
            l.start
        };
        // One preheader for all loops, so the hoisted index parts dominate the tail too.
        self.hoist(&l.body)?;
        self.hoist_uniform(l, &plan)?;
        let is_varying = |id: ValueId| plan.varying.contains_key(&id);
        let consts = self.constants_before(&l.body, &is_varying)?;
        if paired_end > l.start {
            let (var, body, exit) = self.open_rotated_loop(l.start);
            self.constants_enter(consts);
            for upper in [false, true] {
                self.bind_var_at(l.var, var, if upper { plan.lanes } else { 0 })?;
                self.enter_half(upper);
                let done = self.vector_body(l, &plan, &HashMap::new());
                self.unbind_var(l.var);
                done.inspect_err(|_| self.halves = None)?;
            }
            self.halves = None;
            self.constants_latch();
            self.latch(var, pair, paired_end, body, exit);
            self.undefine_lets(l);
        }
        // The four lanes left over from the pairs (at most one iteration), or the whole loop.
        if main_end > paired_end {
            let (var, body, exit) = self.open_rotated_loop(paired_end);
            self.constants_enter(consts);
            self.bind_var(l.var, var)?;
            self.vector_body(l, &plan, &HashMap::new())?;
            self.unbind_var(l.var);
            self.constants_latch();
            self.latch(var, plan.lanes, main_end, body, exit);
            self.undefine_lets(l);
        }
        self.scalar_loop(l, main_end, l.end)?;
        Ok(true)
    }

    /// Starts translating the lower or the upper of two [`Halves`] (the upper one after the
    /// lower, whose accesses it completes).
    fn enter_half(&mut self, upper: bool) {
        self.consts.next_copy();
        let lower = if upper { self.halves.take() } else { None };
        self.halves = Some(match lower {
            Some(h) => Halves { upper: true, ..h },
            None => Halves::lower(),
        });
    }

    /// The vector plan of `l` (its lane reductions' locals in `reductions`): f32 values four to
    /// a vector, or, when f64 values are there too, two (module doc).
    fn plan(&self, l: &Loop, reductions: HashMap<LocalId, Ty>) -> Option<Plan> {
        let planner = |mixed| Planner {
            t: self,
            var: l.var,
            vector_locals: reductions.clone(),
            varying: HashMap::new(),
            uniform: HashMap::new(),
            lanes: None,
            mixed,
        };
        planner(false).plan(l).or_else(|| planner(true).plan(l).filter(|p| p.lanes == 2))
    }

    /// Whether the kernel writes buffer `buf` (an unknown buffer counts as written).
    fn writable(&self, buf: tessera_lower::kernel::BufId) -> bool {
        self.kernel.buffers.get(buf.0 as usize).is_none_or(|b| b.writable)
    }

    fn undefine_lets(&mut self, l: &Loop) {
        for stmt in &l.body {
            if let Stmt::Let(id, _) = stmt {
                self.undefine(*id);
            }
        }
    }

    /// A loop with lane reductions (module doc): its lane part, then the plain remainder.
    pub(crate) fn lane_reduction_loop(&mut self, l: &Loop) -> Result<()> {
        let w = i64::from(l.vector_width);
        let trip = l.end - l.start;
        let main_end = l.start + (trip - trip % w);
        self.hoist(&l.body)?;
        if main_end > l.start {
            let reductions: HashMap<LocalId, Ty> = l.reductions.iter().map(|r| (r.local, r.ty)).collect();
            let plan = self.plan(l, reductions).filter(|p| w % p.lanes == 0);
            let native = plan.as_ref().map_or(1, |p| p.lanes);
            let copies = w / native;
            // accs[r][c]: reduction r's accumulator for lanes c*native ..
            let mut accs: Vec<Vec<Variable>> = Vec::new();
            for r in &l.reductions {
                let identity = r.identity().ok_or_else(|| Failure::Malformed("a reduction without identity".into()))?;
                let (mut init, _) = self.constant(identity);
                let vt = if native > 1 { vector_type(r.ty, native) } else { cl_type(r.ty) };
                if native > 1 {
                    init = self.b.ins().splat(vt, init);
                }
                let vars: Vec<Variable> = (0..copies)
                    .map(|_| {
                        let v = self.b.declare_var(vt);
                        self.b.def_var(v, init);
                        v
                    })
                    .collect();
                accs.push(vars);
            }
            if let Some(plan) = &plan {
                self.hoist_uniform(l, plan)?;
            }
            let paired = copies % 2 == 0 && plan.as_ref().is_some_and(|p| pairs_halves(l, p, |b| self.writable(b)));
            let consts = match &plan {
                Some(plan) => self.constants_before(&l.body, &|id| plan.varying.contains_key(&id))?,
                None => None,
            };
            let (var, body, exit) = self.open_rotated_loop(l.start);
            self.constants_enter(consts);
            for c in 0..copies {
                self.bind_var_at(l.var, var, c * native)?;
                match &plan {
                    Some(plan) => {
                        let map = l.reductions.iter().zip(&accs).map(|(r, a)| (r.local, a[c as usize])).collect();
                        if paired {
                            self.enter_half(c % 2 == 1);
                        }
                        let done = self.vector_body(l, plan, &map);
                        if done.is_err() || c % 2 == 1 {
                            self.halves = None;
                        }
                        done?;
                    }
                    None => {
                        let mut saved = Vec::new();
                        for (r, a) in l.reductions.iter().zip(&accs) {
                            saved.push(self.rebind_local(r.local, a[c as usize])?);
                        }
                        self.stmts(&l.body)?;
                        for (r, old) in l.reductions.iter().zip(saved) {
                            self.rebind_local(r.local, old)?;
                        }
                    }
                }
                self.unbind_var(l.var);
            }
            self.constants_latch();
            self.latch(var, w, main_end, body, exit);
            self.undefine_lets(l);
            for (r, a) in l.reductions.iter().zip(&accs) {
                let mut parts: Vec<Value> = a.iter().map(|&v| self.b.use_var(v)).collect();
                while parts.len() > 1 {
                    let half = parts.len() / 2;
                    for c in 0..half {
                        parts[c] = self.binary_values(r.op, r.ty, parts[c], parts[c + half])?;
                    }
                    parts.truncate(half);
                }
                let mut lanes: Vec<Value> = if native > 1 {
                    (0..native as u8).map(|j| self.b.ins().extractlane(parts[0], j)).collect()
                } else {
                    parts
                };
                while lanes.len() > 1 {
                    let half = lanes.len() / 2;
                    for j in 0..half {
                        lanes[j] = self.binary_values(r.op, r.ty, lanes[j], lanes[j + half])?;
                    }
                    lanes.truncate(half);
                }
                let (local, _) = self.local(r.local)?;
                let before = self.b.use_var(local);
                let total = self.binary_values(r.op, r.ty, before, lanes[0])?;
                self.b.def_var(local, total);
            }
        }
        self.scalar_loop(l, main_end, l.end)
    }

    /// One copy of a vector loop's body; `accs` holds the variables of the lane-reduction
    /// locals for this copy. Values it computes go out of scope at its end, but for the
    /// uniform ones hoisted before the loop (the caller ends their scope).
    fn vector_body(&mut self, l: &Loop, plan: &Plan, accs: &HashMap<LocalId, Variable>) -> Result<()> {
        let mut vectors: HashMap<ValueId, (Value, Ty)> = HashMap::new();
        let mut defined = Vec::new();
        let mut locals = accs.clone();
        let result = self.vector_stmts(&l.body, plan, &mut locals, &mut vectors, &mut defined);
        for id in defined {
            self.undefine(id);
        }
        self.wide.clear();
        result
    }

    /// The statements of a vector loop's body or of a branch in it: `locals` holds the
    /// variables of the locals held as vectors, `vectors` the varying values; the uniform
    /// values it defines go to `defined`, whose scope the caller ends.
    fn vector_stmts(
        &mut self,
        body: &[Stmt],
        plan: &Plan,
        locals: &mut HashMap<LocalId, Variable>,
        vectors: &mut HashMap<ValueId, (Value, Ty)>,
        defined: &mut Vec<ValueId>,
    ) -> Result<()> {
        for stmt in body {
            match stmt {
                Stmt::Let(id, _) if !plan.varying.contains_key(id) && self.is_defined(*id) => {}
                Stmt::Let(id, op) => match plan.varying.get(id) {
                    None => {
                        let (v, ty) = match op {
                            // Whether any lane holds: one branch serves the whole vector.
                            Op::AnyLane { a } if vectors.contains_key(a) => {
                                let mask = self.vector_operand(*a, Ty::Pred, plan.lanes, vectors)?;
                                (self.b.ins().vany_true(mask), Ty::Pred)
                            }
                            _ => self.op(op)?,
                        };
                        self.define(*id, v, ty)?;
                        defined.push(*id);
                    }
                    Some(&Ty::I64) => {
                        let lanes = self.wide_op(op, plan, vectors)?;
                        self.wide.insert(*id, lanes);
                    }
                    Some(&ty) => {
                        let v = match op {
                            Op::Load { buf, index, mem } if self.reads_wide(index) => {
                                self.gathered_load(*buf, index, *mem, ty, plan)?
                            }
                            Op::Cast { op: CastOp::Trunc, a, .. } if self.wide.contains_key(a) => {
                                let lanes = self.wide.get(a).cloned().ok_or_else(mismatch)?;
                                self.from_lanes(types::I32X4, plan.lanes, |t, j| {
                                    Ok(t.b.ins().ireduce(types::I32, lanes[j as usize]))
                                })?
                            }
                            Op::GetLocal(local) => {
                                let var = *locals.get(local).ok_or_else(mismatch)?;
                                self.b.use_var(var)
                            }
                            Op::Load { buf, index, mem } if ty == Ty::I16 && self.halves.is_some() => {
                                let addr = self.index(index, access_form(*buf, *mem)?)?;
                                self.half_load(*id, addr)?
                            }
                            Op::Load { buf, index, mem } if lane_stride(index, plan.var).is_some() => {
                                let stride = lane_stride(index, plan.var).ok_or_else(mismatch)?;
                                let addr = self.index(index, access_form(*buf, *mem)?)?;
                                self.gather(ty, plan.lanes, addr, stride)?
                            }
                            _ => self.vector_op(op, ty, plan.lanes, vectors)?,
                        };
                        vectors.insert(*id, (v, ty));
                    }
                },
                Stmt::DeclLocal { local, ty, init } => {
                    let v = self.vector_operand(*init, *ty, plan.lanes, vectors)?;
                    let var = self.b.declare_var(vector_type(*ty, plan.lanes));
                    self.b.def_var(var, v);
                    locals.insert(*local, var);
                }
                Stmt::SetLocal { local, value } => {
                    let var = *locals.get(local).ok_or_else(mismatch)?;
                    let ty = *plan.vector_locals.get(local).ok_or_else(mismatch)?;
                    let v = self.vector_operand(*value, ty, plan.lanes, vectors)?;
                    self.b.def_var(var, v);
                }
                Stmt::If { cond, then_body, else_body } => {
                    self.branch(*cond, then_body, else_body, |t, b| t.vector_stmts(b, plan, locals, vectors, defined))?
                }
                Stmt::Store { buf, index, mem, value } => {
                    let ty = mem.reg();
                    let v = self.vector_operand(*value, ty, plan.lanes, vectors)?;
                    let addr = self.index(index, access_form(*buf, *mem)?)?;
                    if let Some(stride) = lane_stride(index, plan.var) {
                        // Lane by lane, `stride` elements apart: a complex result's parts.
                        let bytes = i64::from(cl_type(ty).bytes());
                        for lane in 0..plan.lanes {
                            let x = self.b.ins().extractlane(v, lane as u8);
                            let offset = i32::try_from(stride * lane * bytes).map_err(|_| mismatch())?;
                            self.b.ins().store(mem_flags(), x, addr, offset);
                        }
                    } else if ty == Ty::I16 && self.halves.is_some() {
                        self.half_store((buf.0, *value), v, addr)?;
                    } else if ty == Ty::Pred || ty == Ty::I8 {
                        // Four zero-extended lanes packed to bytes (exact: each is below 2^8; a
                        // mask's lanes become bytes 0 or 1), and only those 4 bytes written.
                        let v = if ty == Ty::Pred {
                            let one = self.b.ins().iconst(types::I32, 1);
                            let one = self.b.ins().splat(types::I32X4, one);
                            self.b.ins().band(v, one)
                        } else {
                            v
                        };
                        let halves = self.b.ins().unarrow(v, v);
                        let bytes = self.b.ins().unarrow(halves, halves);
                        let words = self.b.ins().bitcast(types::I32X4, lane_cast_flags(), bytes);
                        let word = self.b.ins().extractlane(words, 0);
                        self.b.ins().store(mem_flags(), word, addr, 0);
                    } else if ty == Ty::F32 && plan.lanes == 2 {
                        // Two f32 lanes (beside f64 ones): only their 8 bytes are written.
                        let wide = self.b.ins().bitcast(types::I64X2, lane_cast_flags(), v);
                        let pair = self.b.ins().extractlane(wide, 0);
                        self.b.ins().store(mem_flags(), pair, addr, 0);
                    } else if ty == Ty::I16 {
                        // Four zero-extended lanes packed to 16 bits (exact: each is below
                        // 2^16), and only those 8 bytes written.
                        let packed = self.b.ins().unarrow(v, v);
                        let wide = self.b.ins().bitcast(types::I64X2, lane_cast_flags(), packed);
                        let low = self.b.ins().extractlane(wide, 0);
                        self.b.ins().store(mem_flags(), low, addr, 0);
                    } else {
                        self.b.ins().store(mem_flags(), v, addr, 0);
                    }
                }
                _ => return Err(mismatch()),
            }
        }
        Ok(())
    }

    /// Whether `index` takes a wide value (`Access::Gathered`).
    fn reads_wide(&self, index: &IndexExpr) -> bool {
        index.terms.iter().any(|t| matches!(t.src, IndexSrc::Value(v) if self.wide.contains_key(&v)))
    }

    /// `f` run with `index`'s wide values defined as their lane `lane` (scalars), so that
    /// `index` evaluates to that lane's index but for the loop variable's lane offset.
    fn at_lane<R>(&mut self, index: &IndexExpr, lane: usize, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        let mut ids: Vec<ValueId> = Vec::new();
        for t in &index.terms {
            if let IndexSrc::Value(v) = t.src {
                if let Some(lanes) = self.wide.get(&v) {
                    if !ids.contains(&v) {
                        let x = *lanes.get(lane).ok_or_else(mismatch)?;
                        self.define(v, x, Ty::I64)?;
                        ids.push(v);
                    }
                }
            }
        }
        let result = f(self);
        for id in ids {
            self.undefine(id);
        }
        result
    }

    /// The lanes of a wide `op` (Plan): one scalar each.
    fn wide_op(&mut self, op: &Op, plan: &Plan, vectors: &HashMap<ValueId, (Value, Ty)>) -> Result<Vec<Value>> {
        let lanes = plan.lanes as usize;
        let mut out = Vec::with_capacity(lanes);
        match op {
            Op::Cast { op, from, a, .. } => {
                let x = self.vector_operand(*a, *from, plan.lanes, vectors)?;
                for j in 0..lanes {
                    let lane = self.b.ins().extractlane(x, j as u8);
                    out.push(match op {
                        CastOp::SExt => self.b.ins().sextend(types::I64, lane),
                        _ => self.b.ins().uextend(types::I64, lane),
                    });
                }
            }
            Op::Binary { op, a, b, .. } => {
                let operand = |t: &mut Self, id: ValueId, j: usize| match t.wide.get(&id) {
                    Some(lanes) => lanes.get(j).copied().ok_or_else(mismatch),
                    None => t.typed(id, Ty::I64),
                };
                for j in 0..lanes {
                    let (x, y) = (operand(self, *a, j)?, operand(self, *b, j)?);
                    out.push(self.binary_values(*op, Ty::I64, x, y)?);
                }
            }
            Op::Index(index) => {
                let step = var_scale(index, plan.var);
                for j in 0..lanes {
                    let v = self.at_lane(index, j, |t| t.index(index, Form::Elements))?;
                    out.push(self.b.ins().iadd_imm_s(v, step * j as i64));
                }
            }
            _ => return Err(mismatch()),
        }
        Ok(out)
    }

    /// A load through wide values (`Access::Gathered`): each lane's element loaded on its own,
    /// 16- and 8-bit ones zero-extended to their 32-bit lanes, predicate bytes compared with 0.
    fn gathered_load(&mut self, buf: BufId, index: &IndexExpr, mem: MemType, ty: Ty, plan: &Plan) -> Result<Value> {
        let form = access_form(buf, mem)?;
        let bytes = super::index::element_bytes(mem)?;
        let step = var_scale(index, plan.var) * bytes;
        let vt = vector_type(if ty == Ty::Pred { Ty::I32 } else { ty }, plan.lanes);
        let v = self.from_lanes(vt, plan.lanes, |t, j| {
            let addr = t.at_lane(index, j as usize, |t| t.index(index, form))?;
            let offset = i32::try_from(step * i64::from(j)).map_err(|_| mismatch())?;
            let ins = t.b.ins();
            Ok(match mem {
                MemType::Scalar(Ty::F32) => ins.load(types::F32, mem_flags(), addr, offset),
                MemType::Scalar(Ty::I32) => ins.load(types::I32, mem_flags(), addr, offset),
                MemType::Scalar(Ty::I16) => ins.uload16(types::I32, mem_flags(), addr, offset),
                MemType::Scalar(Ty::I8) | MemType::Pred => ins.uload8(types::I32, mem_flags(), addr, offset),
                _ => return Err(mismatch()),
            })
        })?;
        if ty != Ty::Pred {
            return Ok(v);
        }
        let zero = self.b.ins().iconst(types::I32, 0);
        let zero = self.b.ins().splat(types::I32X4, zero);
        Ok(self.b.ins().icmp(cranelift_codegen::ir::condcodes::IntCC::NotEqual, v, zero))
    }

    /// The `lanes` elements of `ty` at `addr` and every `stride` elements on, one load each.
    fn gather(&mut self, ty: Ty, lanes: i64, addr: Value, stride: i64) -> Result<Value> {
        let lane_ty = cl_type(ty);
        let bytes = i64::from(lane_ty.bytes());
        let first = self.b.ins().load(lane_ty, mem_flags(), addr, 0);
        let mut v = self.b.ins().scalar_to_vector(vector_type(ty, lanes), first);
        for lane in 1..lanes {
            let offset = i32::try_from(stride * lane * bytes).map_err(|_| mismatch())?;
            let x = self.b.ins().load(lane_ty, mem_flags(), addr, offset);
            v = self.b.ins().insertlane(v, x, lane as u8);
        }
        Ok(v)
    }

    /// A 16-bit load `id` at `addr` in one of two [`Halves`]: the lower half loads both
    /// halves' lanes and keeps them for the upper half (the same statement, four lanes on).
    fn half_load(&mut self, id: ValueId, addr: Value) -> Result<Value> {
        let halves = self.halves.as_mut().ok_or_else(mismatch)?;
        if halves.upper {
            let eight = halves.loads.remove(&id).ok_or_else(mismatch)?;
            return Ok(self.b.ins().uwiden_high(eight));
        }
        let eight = self.b.ins().load(types::I16X8, mem_flags(), addr, 0);
        halves.loads.insert(id, eight);
        Ok(self.b.ins().uwiden_low(eight))
    }

    /// A 16-bit store of the zero-extended lanes `v` at `addr` in one of two [`Halves`]: the
    /// lower half leaves its lanes to the upper half, which packs both (exact: every lane is
    /// below 2^16) and stores them at the lower half's address, 8 bytes before its own.
    fn half_store(&mut self, key: (u32, ValueId), v: Value, addr: Value) -> Result<()> {
        let halves = self.halves.as_mut().ok_or_else(mismatch)?;
        if !halves.upper {
            halves.stores.insert(key, v);
            return Ok(());
        }
        let low = halves.stores.remove(&key).ok_or_else(mismatch)?;
        let packed = self.b.ins().unarrow(low, v);
        self.b.ins().store(mem_flags(), packed, addr, -8);
        Ok(())
    }

    /// `id` as a vector of `ty`: a varying value as is, a uniform one splatted (a `Pred` as
    /// an all-ones or all-zeros mask).
    fn vector_operand(
        &mut self,
        id: ValueId,
        ty: Ty,
        lanes: i64,
        vectors: &HashMap<ValueId, (Value, Ty)>,
    ) -> Result<Value> {
        if let Some(&(v, have)) = vectors.get(&id) {
            if have != ty {
                return Err(Failure::Malformed(format!("value %{} has type {have:?} where {ty:?} is expected", id.0)));
            }
            return Ok(v);
        }
        let s = self.typed(id, ty)?;
        let vt = vector_type(ty, lanes);
        let lane = if ty == Ty::Pred {
            let all = self.b.ins().ineg(s);
            self.b.ins().sextend(vt.lane_type(), all)
        } else if ty == Ty::I16 || ty == Ty::I8 {
            self.b.ins().uextend(types::I32, s)
        } else {
            s
        };
        Ok(self.splat_lanes(vt, lane))
    }

    /// A vector of type `vt` assembled from `lanes` scalars, lane `j` computed by `lane(self, j)`
    /// (operations with no vector form here, run once per lane).
    fn from_lanes(
        &mut self,
        vt: Type,
        lanes: i64,
        mut lane: impl FnMut(&mut Self, u8) -> Result<Value>,
    ) -> Result<Value> {
        let mut result = None;
        for j in 0..lanes as u8 {
            let r = lane(self, j)?;
            result = Some(match result {
                None => self.b.ins().splat(vt, r),
                Some(v) => self.b.ins().insertlane(v, r, j),
            });
        }
        result.ok_or_else(mismatch)
    }

    /// Whether `v` is a splat of a zero constant (all bits clear).
    fn is_zero_splat(&self, v: Value) -> bool {
        let dfg = &self.b.func.dfg;
        let Some(inst) = dfg.value_def(v).inst() else { return false };
        let InstructionData::Unary { opcode: Opcode::Splat, arg } = dfg.insts[inst] else { return false };
        super::vector_consts::constant_bits(self, arg) == Some(0)
    }

    /// The value of the integer constant `v`, if it is one.
    fn iconst_of(&self, v: Value) -> Option<i64> {
        let dfg = &self.b.func.dfg;
        match dfg.insts[dfg.value_def(v).inst()?] {
            InstructionData::UnaryImm { opcode: Opcode::Iconst, imm } => Some(imm.bits()),
            _ => None,
        }
    }

    /// `x << 16` in one interleave, when `x` zero-extends half of a 16-bit vector (a half's
    /// bf16 lanes, widened): the 16-bit lanes interleaved above zeros are the shifted lanes.
    fn interleaved_high(&mut self, x: Value) -> Option<Value> {
        let dfg = &self.b.func.dfg;
        let InstructionData::Unary { opcode, arg } = dfg.insts[dfg.value_def(x).inst()?] else { return None };
        if dfg.value_type(arg) != types::I16X8 {
            return None;
        }
        // Byte indices into (zeros, arg): each 32-bit lane takes two zero bytes, then the
        // two bytes of one of arg's lower (or upper) four 16-bit lanes. x64 does this as one
        // punpcklwd (punpckhwd).
        let first = match opcode {
            Opcode::UwidenLow => 0u8,
            Opcode::UwidenHigh => 8,
            _ => return None,
        };
        let mask: Vec<u8> =
            (0..4u8).flat_map(|k| [2 * k + first, 2 * k + first + 1, 16 + 2 * k + first, 17 + 2 * k + first]).collect();
        let mask = self.b.func.dfg.immediates.push(cranelift_codegen::ir::ConstantData::from(mask));
        let zero = self.b.ins().iconst(types::I8, 0);
        let zeros = self.b.ins().splat(types::I8X16, zero);
        let bytes = self.b.ins().bitcast(types::I8X16, lane_cast_flags(), arg);
        let shuffled = self.b.ins().shuffle(zeros, bytes, mask);
        Some(self.b.ins().bitcast(types::I32X4, lane_cast_flags(), shuffled))
    }

    /// 32-bit lanes holding `bits`-bit integers (zero-extended, or wrapped), sign-extended.
    fn sign_extend(&mut self, x: Value, bits: i64) -> Value {
        if bits >= 32 {
            return x;
        }
        let amount = self.b.ins().iconst(types::I32, 32 - bits);
        let up = self.b.ins().ishl(x, amount);
        self.b.ins().sshr(up, amount)
    }

    /// The low `bits` bits of 32-bit lanes: a narrow integer's zero-extended form.
    fn low_bits(&mut self, x: Value, bits: i64) -> Value {
        let mask = self.b.ins().iconst(types::I32, (1i64 << bits) - 1);
        let mask = self.splat_lanes(types::I32X4, mask);
        self.b.ins().band(x, mask)
    }

    /// The constant amount of the logical right shift that defines `v`, if one does.
    fn shifted_right_by(&self, v: Value) -> Option<i64> {
        let dfg = &self.b.func.dfg;
        let InstructionData::Binary { opcode: Opcode::Ushr, args: [_, amount] } = dfg.insts[dfg.value_def(v).inst()?]
        else {
            return None;
        };
        self.iconst_of(amount)
    }

    fn vector_op(&mut self, op: &Op, ty: Ty, lanes: i64, vectors: &HashMap<ValueId, (Value, Ty)>) -> Result<Value> {
        let vt = vector_type(ty, lanes);
        Ok(match op {
            Op::Load { buf, index, mem } => {
                let addr = self.index(index, access_form(*buf, *mem)?)?;
                if ty == Ty::I16 {
                    self.b.ins().uload16x4(mem_flags(), addr, 0)
                } else if ty == Ty::I8 || ty == Ty::Pred {
                    // Four bytes, zero-extended to 32-bit lanes; a mask's (any nonzero byte is
                    // true) then compared with 0.
                    let word = self.b.ins().load(types::I32, mem_flags(), addr, 0);
                    let v = self.b.ins().scalar_to_vector(types::I32X4, word);
                    let bytes = self.b.ins().bitcast(types::I8X16, lane_cast_flags(), v);
                    let halves = self.b.ins().uwiden_low(bytes);
                    let words = self.b.ins().uwiden_low(halves);
                    if ty == Ty::I8 {
                        return Ok(words);
                    }
                    let zero = self.b.ins().iconst(types::I32, 0);
                    let zero = self.b.ins().splat(types::I32X4, zero);
                    self.b.ins().icmp(cranelift_codegen::ir::condcodes::IntCC::NotEqual, words, zero)
                } else if ty == Ty::F32 && lanes == 2 {
                    // Two f32 lanes (beside f64 ones): only their 8 bytes are read.
                    let pair = self.b.ins().load(types::I64, mem_flags(), addr, 0);
                    let v = self.b.ins().scalar_to_vector(types::I64X2, pair);
                    self.b.ins().bitcast(types::F32X4, lane_cast_flags(), v)
                } else {
                    self.b.ins().load(vt, mem_flags(), addr, 0)
                }
            }
            Op::Unary { op, ty, a } => {
                let x = self.vector_operand(*a, *ty, lanes, vectors)?;
                // x64 lowers a vector fneg or fabs to three ops, making the sign mask from all
                // ones each time; one bit op with the mask as a (loop-invariant) constant
                // does the same.
                if let Some(bits) = sign_mask(*op, *ty) {
                    let lane = if *ty == Ty::F64 {
                        self.b.ins().f64const(Ieee64::with_bits(bits))
                    } else {
                        self.b.ins().f32const(Ieee32::with_bits(bits as u32))
                    };
                    let mask = self.splat_lanes(vt, lane);
                    return Ok(if *op == UnOp::Neg { self.b.ins().bxor(x, mask) } else { self.b.ins().band(x, mask) });
                }
                let ins = self.b.ins();
                match (op, ty.is_float()) {
                    (UnOp::Sqrt, _) => ins.sqrt(x),
                    (UnOp::Floor, _) => ins.floor(x),
                    (UnOp::Ceil, _) => ins.ceil(x),
                    (UnOp::Trunc, _) => ins.trunc(x),
                    (UnOp::RoundEven, _) => ins.nearest(x),
                    (UnOp::Neg, false) => ins.ineg(x),
                    (UnOp::Abs, false) => ins.iabs(x),
                    _ => ins.bnot(x),
                }
            }
            Op::Binary { op: op @ (BinOp::Shl | BinOp::LShr | BinOp::AShr), ty, a, b } if !vectors.contains_key(b) => {
                let x = self.vector_operand(*a, *ty, lanes, vectors)?;
                let amount = self.typed(*b, *ty)?;
                if *op == BinOp::Shl && self.iconst_of(amount) == Some(16) {
                    if let Some(v) = self.interleaved_high(x) {
                        return Ok(v);
                    }
                }
                match op {
                    BinOp::Shl => self.b.ins().ishl(x, amount),
                    BinOp::LShr => self.b.ins().ushr(x, amount),
                    _ => self.b.ins().sshr(x, amount),
                }
            }
            Op::Binary { op, ty, a, b } if lane_by_lane(*op, *ty) => {
                let x = self.vector_operand(*a, *ty, lanes, vectors)?;
                // A uniform operand (a constant divisor) stays scalar, for Cranelift to
                // strength-reduce: (value, whether it is a vector).
                let y = match vectors.contains_key(b) {
                    true => (self.vector_operand(*b, *ty, lanes, vectors)?, true),
                    false => (self.typed(*b, *ty)?, false),
                };
                self.from_lanes(vt, lanes, |t, lane| {
                    let xl = t.b.ins().extractlane(x, lane);
                    let yl = if y.1 { t.b.ins().extractlane(y.0, lane) } else { y.0 };
                    t.binary_values(*op, *ty, xl, yl)
                })?
            }
            Op::Binary { op, ty, a, b } => {
                let x = self.vector_operand(*a, *ty, lanes, vectors)?;
                let y = self.vector_operand(*b, *ty, lanes, vectors)?;
                if matches!(op, BinOp::FMax | BinOp::FMin) {
                    return Ok(self.fmaxmin(*op == BinOp::FMax, x, y));
                }
                let ins = self.b.ins();
                match (op, ty.is_float()) {
                    (BinOp::Add, true) => ins.fadd(x, y),
                    (BinOp::Sub, true) => ins.fsub(x, y),
                    (BinOp::Mul, true) => ins.fmul(x, y),
                    (BinOp::FDiv, _) => ins.fdiv(x, y),
                    (BinOp::Add, false) => ins.iadd(x, y),
                    (BinOp::Sub, false) => ins.isub(x, y),
                    (BinOp::Mul, false) => ins.imul(x, y),
                    (BinOp::And, _) => ins.band(x, y),
                    (BinOp::Or, _) => ins.bor(x, y),
                    (BinOp::Xor, _) => ins.bxor(x, y),
                    (BinOp::SMax, _) => ins.smax(x, y),
                    (BinOp::SMin, _) => ins.smin(x, y),
                    (BinOp::UMax, _) => ins.umax(x, y),
                    _ => ins.umin(x, y),
                }
            }
            Op::Cmp { op, ty, a, b } => {
                let x = self.vector_operand(*a, *ty, lanes, vectors)?;
                let y = self.vector_operand(*b, *ty, lanes, vectors)?;
                match (float_cc(*op), int_cc(*op)) {
                    (Some(cc), _) if ty.is_float() => fcmp(&mut self.b, cc, x, y),
                    (_, Some(cc)) if !ty.is_float() => self.b.ins().icmp(cc, x, y),
                    _ => return Err(mismatch()),
                }
            }
            Op::Select { ty, cond, a, b } => {
                let x = self.vector_operand(*a, *ty, lanes, vectors)?;
                let y = self.vector_operand(*b, *ty, lanes, vectors)?;
                if vectors.contains_key(cond) {
                    let mask = self.vector_operand(*cond, Ty::Pred, lanes, vectors)?;
                    let mask = if vt == vector_type(Ty::Pred, lanes) {
                        mask
                    } else {
                        self.b.ins().bitcast(vt, lane_cast_flags(), mask)
                    };
                    // A select against zero is one bit op (x64 blends a general one in two or
                    // three); the lanes of a mask are all ones or all zeros.
                    if self.is_zero_splat(x) {
                        self.b.ins().band_not(y, mask)
                    } else if self.is_zero_splat(y) {
                        self.b.ins().band(x, mask)
                    } else {
                        self.b.ins().bitselect(mask, x, y)
                    }
                } else {
                    let c = self.typed(*cond, Ty::Pred)?;
                    self.b.ins().select(c, x, y)
                }
            }
            Op::Fma { ty, a, b, c } => {
                let x = self.vector_operand(*a, *ty, lanes, vectors)?;
                let y = self.vector_operand(*b, *ty, lanes, vectors)?;
                let z = self.vector_operand(*c, *ty, lanes, vectors)?;
                self.b.ins().fma(x, y, z)
            }
            // Lane k is the index at the vector's first lane plus k, in 32 bits (`Planner::op`).
            Op::Index(index) => {
                let first = self.index(index, Form::Elements)?;
                let first = self.b.ins().ireduce(types::I32, first);
                let first = self.b.ins().splat(types::I32X4, first);
                let steps: Vec<u8> = (0..4u32).flat_map(u32::to_le_bytes).collect();
                let steps = self.b.func.dfg.constants.insert(cranelift_codegen::ir::ConstantData::from(steps));
                let steps = self.b.ins().vconst(types::I32X4, steps);
                self.b.ins().iadd(first, steps)
            }
            // The index's lanes are 32-bit already.
            Op::Cast { op: CastOp::Trunc, from: Ty::I64, a, .. } => self.vector_operand(*a, Ty::I32, lanes, vectors)?,
            Op::Cast { op, from, to, a } => {
                let x = self.vector_operand(*a, *from, lanes, vectors)?;
                // Bits of the narrow integer side (I16 and I8 lanes are zero-extended 32-bit
                // lanes), 32 for the rest.
                let narrow = |t: Ty| i64::from(t.bits().min(32));
                match op {
                    CastOp::ZExt => return Ok(x),
                    CastOp::SExt => return Ok(self.sign_extend(x, narrow(*from))),
                    CastOp::Trunc => {
                        let bits = narrow(*to);
                        // A logical shift right by 32 - bits or more (a bf16's bits, narrowed)
                        // leaves nothing above the low bits to clear.
                        if self.shifted_right_by(x).is_some_and(|k| (32 - bits..32).contains(&k)) {
                            return Ok(x);
                        }
                        return Ok(self.low_bits(x, bits));
                    }
                    CastOp::SIToFP | CastOp::UIToFP => {
                        // Zero-extended lanes are already the unsigned value, which an i32
                        // conversion reads exactly; signed ones are sign-extended first.
                        let x = if *op == CastOp::SIToFP { self.sign_extend(x, narrow(*from)) } else { x };
                        return Ok(self.b.ins().fcvt_from_sint(vt, x));
                    }
                    CastOp::FPToSISat | CastOp::FPToUISat if *to != Ty::I32 => {
                        // Saturated to i32 (NaN to 0), then to the narrow type's range: the
                        // same value as saturating to that range at once.
                        let bits = narrow(*to);
                        let wide = self.b.ins().fcvt_to_sint_sat(types::I32X4, x);
                        let (lo, hi) = if *op == CastOp::FPToSISat {
                            (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
                        } else {
                            (0, (1i64 << bits) - 1)
                        };
                        let lo = self.b.ins().iconst(types::I32, lo);
                        let lo = self.splat_lanes(types::I32X4, lo);
                        let hi = self.b.ins().iconst(types::I32, hi);
                        let hi = self.splat_lanes(types::I32X4, hi);
                        let clamped = self.b.ins().smax(wide, lo);
                        let clamped = self.b.ins().smin(clamped, hi);
                        return Ok(if *op == CastOp::FPToSISat { self.low_bits(clamped, bits) } else { clamped });
                    }
                    _ => {}
                }
                let ins = self.b.ins();
                match op {
                    // Two f32 lanes to two f64 ones and back (`Plan` in mixed form).
                    CastOp::FPExt => ins.fvpromote_low(x),
                    CastOp::FPTrunc => ins.fvdemote(x),
                    CastOp::Bitcast => ins.bitcast(vt, lane_cast_flags(), x),
                    _ => ins.fcvt_to_sint_sat(vt, x),
                }
            }
            Op::Math { func, ty, args } => {
                let vectors_in =
                    args.iter().map(|&a| self.vector_operand(a, *ty, lanes, vectors)).collect::<Result<Vec<_>>>()?;
                let t = cl_type(*ty);
                self.from_lanes(vt, lanes, |tr, lane| {
                    let lane_args: Vec<Value> = vectors_in.iter().map(|&v| tr.b.ins().extractlane(v, lane)).collect();
                    tr.call_symbol(func.symbol(*ty), &lane_args, &vec![t; lane_args.len()], Some(t))?
                        .ok_or_else(mismatch)
                })?
            }
            _ => return Err(mismatch()),
        })
    }
}
