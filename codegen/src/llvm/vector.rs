//! Vector loops in explicit LLVM vector types (DESIGN.md section 5: nothing relies on a tier's
//! auto-vectorizer). An innermost loop whose `vector_width` is `W > 1` runs as a main loop
//! stepping by `W` over `<W x T>` values plus a scalar remainder, when its body allows:
//!
//! - `Let`, `Store`, locals held in lanes (the loop's lane reductions and non-`Pred` locals the
//!   body declares: one `<W x T>` slot each), and branches on uniform conditions, which all
//!   lanes take together (`AnyLane`, one `llvm.vector.reduce.or` of a mask, makes one);
//! - each value either *uniform* (independent of the loop variable: computed as a scalar once
//!   per vector iteration and splatted where a vector needs it) or *varying* (`W` lanes of any
//!   register type; LLVM legalizes `<16 x float>` to one zmm register, two ymm, or four xmm);
//! - varying loads, stores and indices contiguous: one term over the loop variable with scale
//!   1 and no div/mod; loads and stores of whole-byte
//!   scalars and of predicate bytes (`<W x i8>`, compared with zero or widened from `<W x i1>`),
//!   not of packed elements; loads of scalars may also be strided, their lanes a cache line or
//!   more apart (a transpose's column), each lane then read on its own, or in a loop with
//!   uniform branches a few elements apart or reversed (a complex number's parts, a flipped
//!   row), read as one load spanning the lanes and a shuffle; stores of scalars strided by any
//!   amount (a complex result's real and imaginary parts), each lane written on its own;
//! - loads (not stores) whose index holds a varying value, a table lookup: one
//!   `llvm.masked.gather` (`vgatherdps` on AVX-512), each lane's index computed in an `i64`
//!   lane (a jnp.searchsorted's probes and a jnp.interp's knots kept whole loops scalar);
//! - math functions run once per lane (a call each).
//!
//! Anything else stays a scalar loop (LLVM's own vectorizer may still take it), and a lane
//! reduction that does not vectorize runs its lanes as `W` scalar accumulators. Vector ops are
//! the scalar ops lane by lane (the same instructions and intrinsics on vector types), so the
//! split into vector part and remainder never changes an answer.
//!
//! A lane reduction's accumulator is one `<W x T>` value, which is exactly the kernel IR's `W`
//! lanes; its fold halves the vector `log2(W)` times (lane `j` with lane `j + h`), the IR's
//! tree order.

use std::collections::HashMap;

use inkwell::types::{BasicType, BasicTypeEnum, VectorType};
use inkwell::values::{BasicMetadataValueEnum, BasicValue, BasicValueEnum, VectorValue};
use inkwell::FloatPredicate;

use tessera_lower::kernel::{
    BinOp, BufId, CastOp, IndexExpr, IndexSrc, LocalId, Loop, MathFn, MemType, Op, Stmt, Term, Ty, UnOp, ValueId, VarId,
};

use super::function::Translator;
use super::ops::{float_predicate, int_predicate};
use crate::CodegenError;

/// Which values of a loop body vary with the loop variable, with their types, and the locals
/// held as vectors: the lane reductions' and those the body declares.
struct Plan {
    varying: HashMap<ValueId, Ty>,
    vector_locals: HashMap<LocalId, Ty>,
    /// The loads whose lanes lie a constant number of elements apart (their stride), each
    /// lane read on its own.
    strided: HashMap<ValueId, i64>,
    /// The loads whose lanes lie closer than [`STRIDED_LANE_BYTES`] apart, or in reverse order
    /// (their stride), read as one vector spanning every lane and shuffled: only in loops
    /// with uniform branches ([`plan`]).
    shuffled: HashMap<ValueId, i64>,
    /// The loads whose index holds a varying value (a table lookup, a binary search's probe),
    /// read with `llvm.masked.gather`.
    gathered: std::collections::HashSet<ValueId>,
    /// Whether the body branches on a uniform condition.
    branches: bool,
    /// The loop variable (stores find their stride from it).
    var: VarId,
}

enum Access {
    Uniform,
    Contiguous,
    /// Consecutive lanes this many elements apart.
    Strided(i64),
    /// Lanes anywhere: the index holds a varying value.
    Gathered,
}

/// The fewest bytes apart the lanes of a strided load must lie for it to be read lane by lane:
/// a cache line, so that no wider load could have served two lanes. Closer lanes (a complex
/// number's parts, a reversed row) are left to LLVM's loop vectorizer, whose interleaved and
/// reversed accesses load whole vectors and shuffle them, unless the loop branches ([`plan`]).
const STRIDED_LANE_BYTES: i64 = 64;

/// The largest stride (in elements, either sign) of a load read as one vector spanning its
/// lanes and shuffled: the span is `(W - 1) * |stride| + 1` elements.
const MAX_SHUFFLED_STRIDE: u64 = 4;

/// How `index` uses the loop variable `var`; `None` when a vector cannot follow it.
fn access(index: &IndexExpr, var: VarId, varying: &HashMap<ValueId, Ty>) -> Option<Access> {
    // Each lane's index computed on its own (`vector_index`), whatever the other terms are.
    let gathered = |t: &Term| matches!(t.src, IndexSrc::Value(id) if varying.contains_key(&id));
    if index.terms.iter().any(gathered) {
        return Some(Access::Gathered);
    }
    let mut scale = None;
    for t in &index.terms {
        match t.src {
            IndexSrc::Var(v) if v == var => {
                if t.div != 1 || t.modulo.is_some() || scale.is_some() {
                    return None;
                }
                scale = Some(t.scale);
            }
            IndexSrc::Var(_) | IndexSrc::Value(_) => {}
        }
    }
    Some(match scale {
        None | Some(0) => Access::Uniform,
        Some(1) => Access::Contiguous,
        Some(s) => Access::Strided(s),
    })
}

/// Whether `l` translates as a vector loop (module doc) rather than a scalar one.
pub(crate) fn vectorizes(l: &Loop) -> bool {
    l.vector_width > 1 && plan(l).is_some()
}

/// The loads of `l` that a vector translation reads lane by lane (lanes at least a cache
/// line apart), with their strides; `None` when `l` does not translate as a vector loop.
pub(super) fn strided_loads(l: &Loop) -> Option<HashMap<ValueId, i64>> {
    (l.vector_width > 1).then(|| plan(l)).flatten().map(|p| p.strided)
}

fn plan(l: &Loop) -> Option<Plan> {
    let mut plan = Plan {
        varying: HashMap::new(),
        vector_locals: l.reductions.iter().map(|r| (r.local, r.ty)).collect(),
        strided: HashMap::new(),
        shuffled: HashMap::new(),
        gathered: Default::default(),
        branches: false,
        var: l.var,
    };
    plan_stmts(&l.body, l.var, &mut plan)?;
    // Close or reversed lanes are otherwise left to LLVM's loop vectorizer, whose interleaved
    // and reversed accesses share one wide load among a complex number's parts; but it
    // if-converts a branch, running every path for every lane: a math routine's rare slow
    // path (`sin`'s Payne-Hanek reduction) then runs always, which made `sin` of a reversed
    // row 6x slower than of a row in order.
    if !plan.shuffled.is_empty() && !plan.branches {
        return None;
    }
    Some(plan)
}

/// Plans `body` (the loop's, or a branch's in it) into `plan`; `None` when it keeps the loop
/// scalar.
fn plan_stmts(body: &[Stmt], var: VarId, plan: &mut Plan) -> Option<()> {
    for stmt in body {
        match stmt {
            Stmt::Let(id, op) => {
                let varying = &plan.varying;
                let ty = match op {
                    Op::Const(_) => None,
                    Op::GetLocal(local) => plan.vector_locals.get(local).copied(),
                    Op::Index(index) => match access(index, var, varying)? {
                        Access::Uniform => None,
                        Access::Contiguous | Access::Gathered => Some(Ty::I64),
                        Access::Strided(_) => return None,
                    },
                    Op::Load { index, mem, .. } => match access(index, var, varying)? {
                        Access::Uniform => None,
                        Access::Contiguous => match mem {
                            MemType::Scalar(t) if *t != Ty::Pred => Some(*t),
                            MemType::Pred => Some(Ty::Pred),
                            _ => return None,
                        },
                        Access::Strided(stride) => match mem {
                            MemType::Scalar(t)
                                if *t != Ty::Pred
                                    && stride.unsigned_abs().saturating_mul(u64::from(t.bits() / 8))
                                        >= STRIDED_LANE_BYTES as u64 =>
                            {
                                plan.strided.insert(*id, stride);
                                Some(*t)
                            }
                            MemType::Scalar(t) if *t != Ty::Pred && stride.unsigned_abs() <= MAX_SHUFFLED_STRIDE => {
                                plan.shuffled.insert(*id, stride);
                                Some(*t)
                            }
                            _ => return None,
                        },
                        Access::Gathered => match mem {
                            MemType::Scalar(t) if *t != Ty::Pred => {
                                plan.gathered.insert(*id);
                                Some(*t)
                            }
                            MemType::Pred => {
                                plan.gathered.insert(*id);
                                Some(Ty::Pred)
                            }
                            _ => return None,
                        },
                    },
                    // One answer per vector iteration: a uniform value.
                    Op::AnyLane { .. } => None,
                    _ if !op.operands().iter().any(|v| varying.contains_key(v)) => None,
                    Op::Unary { ty, .. }
                    | Op::Binary { ty, .. }
                    | Op::Select { ty, .. }
                    | Op::Fma { ty, .. }
                    | Op::Math { ty, .. } => Some(*ty),
                    Op::Cmp { .. } => Some(Ty::Pred),
                    Op::Cast { to, .. } => Some(*to),
                };
                if let Some(ty) = ty {
                    plan.varying.insert(*id, ty);
                }
            }
            Stmt::Store { index, mem, .. } => {
                let contiguous = match access(index, var, &plan.varying)? {
                    Access::Contiguous => true,
                    // Written lane by lane (`strided_store`): a complex result's parts.
                    Access::Strided(_) => false,
                    // Lanes may name one element (a scatter), whose last write must win.
                    Access::Uniform | Access::Gathered => return None,
                };
                let scalar = matches!(mem, MemType::Scalar(t) if *t != Ty::Pred);
                if !scalar && !(contiguous && *mem == MemType::Pred) {
                    return None;
                }
            }
            // A local the body declares lives in lanes, like a reduction's.
            Stmt::DeclLocal { local, ty, .. } if *ty != Ty::Pred => {
                plan.vector_locals.insert(*local, *ty);
            }
            Stmt::SetLocal { local, .. } if plan.vector_locals.contains_key(local) => {}
            // A branch on a uniform condition (an `AnyLane`) is taken by all lanes at once.
            Stmt::If { cond, then_body, else_body } if !plan.varying.contains_key(cond) => {
                plan.branches = true;
                plan_stmts(then_body, var, plan)?;
                plan_stmts(else_body, var, plan)?;
            }
            _ => return None,
        }
    }
    Some(())
}

impl<'a, 'ctx> Translator<'a, 'ctx> {
    pub(super) fn vector_type(&self, ty: Ty, lanes: u32) -> VectorType<'ctx> {
        match self.llvm_type(ty) {
            BasicTypeEnum::FloatType(t) => t.vec_type(lanes),
            BasicTypeEnum::IntType(t) => t.vec_type(lanes),
            // Register types are ints and floats only.
            _ => self.ctx.i8_type().vec_type(lanes),
        }
    }

    /// `x` in every lane.
    fn splat(&self, x: BasicValueEnum<'ctx>, ty: Ty, lanes: u32) -> Result<VectorValue<'ctx>, CodegenError> {
        let err = self.err();
        let vt = self.vector_type(ty, lanes);
        let i32t = self.ctx.i32_type();
        let one = self.builder.build_insert_element(vt.get_poison(), x, i32t.const_zero(), "one").map_err(&err)?;
        let zeros = i32t.vec_type(lanes).const_zero();
        self.builder.build_shuffle_vector(one, vt.get_poison(), zeros, "splat").map_err(&err)
    }

    /// Translates `l` as a vector loop plus scalar remainder (module doc); false when its body
    /// does not allow it (nothing was emitted then).
    pub fn vector_loop(&mut self, l: &Loop) -> Result<bool, CodegenError> {
        let Some(plan) = plan(l) else { return Ok(false) };
        let w = l.vector_width;
        let trip = l.end - l.start;
        let main_end = l.start + (trip - trip % i64::from(w));
        let i64t = self.ctx.i64_type();
        let kernel = self.kernel;
        let err = super::function::builder_error(&kernel.name);
        let mut accs: HashMap<LocalId, inkwell::values::PointerValue<'ctx>> = HashMap::new();
        if main_end > l.start {
            for r in &l.reductions {
                let identity = r.identity().ok_or_else(|| self.unsupported("a reduction without identity"))?;
                let (id_value, _) = self.op(&Op::Const(identity))?;
                let init = self.splat(id_value, r.ty, w)?;
                let slot = self.entry_alloca_of(self.vector_type(r.ty, w).as_basic_type_enum(), "lanes")?;
                self.builder.build_store(slot, init).map_err(&err)?;
                accs.insert(r.local, slot);
            }
            let (start, end) = (i64t.const_int(l.start as u64, true), i64t.const_int(main_end as u64, true));
            self.counted_loop_by(l.var, start, end, i64::from(w), |t| t.vector_body(l, &plan, &accs))?;
            for r in &l.reductions {
                let vt = self.vector_type(r.ty, w);
                let mut v = self.builder.build_load(vt, accs[&r.local], "lanes").map_err(&err)?.into_vector_value();
                let mut h = w / 2;
                while h >= 1 {
                    let i32t = self.ctx.i32_type();
                    let mask = |from: u32| {
                        let idx: Vec<_> = (from..from + h).map(|i| i32t.const_int(u64::from(i), false)).collect();
                        VectorType::const_vector(&idx)
                    };
                    let lo = self.builder.build_shuffle_vector(v, v, mask(0), "lo").map_err(&err)?;
                    let hi = self.builder.build_shuffle_vector(v, v, mask(h), "hi").map_err(&err)?;
                    v = self.vector_binary(r.op, r.ty, lo.into(), hi.into())?.into_vector_value();
                    h /= 2;
                }
                let total =
                    self.builder.build_extract_element(v, self.ctx.i32_type().const_zero(), "total").map_err(&err)?;
                let (slot, _) = self.local(r.local)?;
                let before = self.builder.build_load(self.llvm_type(r.ty), slot, "before").map_err(&err)?;
                let folded = self.fold_scalars(r.op, r.ty, before, total)?;
                self.builder.build_store(slot, folded).map_err(&err)?;
            }
        }
        if l.end > main_end {
            let (start, end) = (i64t.const_int(main_end as u64, true), i64t.const_int(l.end as u64, true));
            self.counted_loop_by(l.var, start, end, 1, |t| t.block_of(&l.body))?;
        }
        Ok(true)
    }

    /// One vector iteration of `l` (a loop `vectorizes` takes, without lane reductions) at
    /// the current value of its variable: a block copy of `transpose.rs`.
    pub(super) fn inner_vector_body(&mut self, l: &Loop) -> Result<(), CodegenError> {
        let plan = plan(l).ok_or_else(|| self.unsupported("a block's inner loop does not vectorize"))?;
        self.vector_body(l, &plan, &HashMap::new())
    }

    fn vector_body(
        &mut self,
        l: &Loop,
        plan: &Plan,
        accs: &HashMap<LocalId, inkwell::values::PointerValue<'ctx>>,
    ) -> Result<(), CodegenError> {
        let mut vectors: HashMap<ValueId, (BasicValueEnum<'ctx>, Ty)> = HashMap::new();
        let mut scalars = Vec::new();
        let mut slots = accs.clone();
        let result = self.vector_stmts(&l.body, l.vector_width, plan, &mut slots, &mut vectors, &mut scalars);
        for id in scalars {
            self.values.remove(&id);
        }
        result
    }

    /// The statements of a vector loop's body or of a branch in it. `slots` holds the vector
    /// locals' slots, `vectors` the varying values; uniform values go to the scalar table and
    /// their ids to `scalars`, which the caller clears.
    fn vector_stmts(
        &mut self,
        body: &[Stmt],
        w: u32,
        plan: &Plan,
        slots: &mut HashMap<LocalId, inkwell::values::PointerValue<'ctx>>,
        vectors: &mut HashMap<ValueId, (BasicValueEnum<'ctx>, Ty)>,
        scalars: &mut Vec<ValueId>,
    ) -> Result<(), CodegenError> {
        let kernel = self.kernel;
        let err = super::function::builder_error(&kernel.name);
        for stmt in body {
            match stmt {
                Stmt::Let(id, op) => match plan.varying.get(id) {
                    None => {
                        let v = match op {
                            // Whether any lane holds: one branch serves the whole vector.
                            Op::AnyLane { a } if vectors.contains_key(a) => {
                                let mask = self.vector_operand(*a, Ty::Pred, w, vectors)?;
                                let bt = mask.get_type();
                                let any = self.intrinsic("llvm.vector.reduce.or", &[bt], &[mask.into()])?;
                                (any, Ty::Pred)
                            }
                            _ => self.op(op)?,
                        };
                        self.values.insert(*id, v);
                        scalars.push(*id);
                    }
                    Some(&ty) => {
                        let v = match op {
                            Op::GetLocal(local) => {
                                let slot = *slots
                                    .get(local)
                                    .ok_or_else(|| self.unsupported("a read of a local not held in lanes"))?;
                                self.builder.build_load(self.vector_type(ty, w), slot, "acc").map_err(&err)?
                            }
                            Op::Load { .. } if self.transposed.contains_key(id) => self.transposed[id],
                            Op::Load { buf, index, .. } if plan.strided.contains_key(id) => {
                                self.strided_load(*buf, index, ty, w, plan.strided[id])?
                            }
                            Op::Load { buf, index, .. } if plan.shuffled.contains_key(id) => {
                                self.shuffled_load(*buf, index, ty, w, plan.shuffled[id])?
                            }
                            Op::Load { buf, index, mem } if plan.gathered.contains(id) => {
                                let at = self.vector_index(index, plan.var, w, vectors)?;
                                self.gathered_load(*buf, at, *mem, w)?
                            }
                            Op::Index(index) => self.vector_index(index, plan.var, w, vectors)?.into(),
                            _ => self.vector_op(op, ty, w, vectors)?,
                        };
                        vectors.insert(*id, (v, ty));
                    }
                },
                Stmt::Store { buf, index, mem, value } => {
                    let mut v = self.vector_operand(*value, mem.reg(), w, vectors)?;
                    if let Some(Access::Strided(stride)) = access(index, plan.var, &plan.varying) {
                        self.strided_store(*buf, index, mem.reg(), v.into_vector_value(), stride)?;
                        continue;
                    }
                    if *mem == MemType::Pred {
                        // One byte per predicate, 0 or 1.
                        let bytes = self.ctx.i8_type().vec_type(w);
                        v = self
                            .builder
                            .build_int_z_extend(v.into_vector_value(), bytes, "pbytes")
                            .map_err(&err)?
                            .into();
                    }
                    let ptr = self.element_ptr(*buf, index)?;
                    let elem_bytes = mem.bits() / 8;
                    if self.streamed.get(buf.0 as usize).copied().unwrap_or(false)
                        && self.streaming_store(ptr, v.into_vector_value(), w * elem_bytes, elem_bytes)?
                    {
                        continue;
                    }
                    let st = self.builder.build_store(ptr, v).map_err(&err)?;
                    st.set_alignment(elem_bytes).map_err(|e| self.unsupported(e.to_string()))?;
                }
                Stmt::DeclLocal { local, ty, init } => {
                    let slot = self.entry_alloca_of(self.vector_type(*ty, w).as_basic_type_enum(), "lanes")?;
                    let v = self.vector_operand(*init, *ty, w, vectors)?;
                    self.builder.build_store(slot, v).map_err(&err)?;
                    slots.insert(*local, slot);
                }
                Stmt::SetLocal { local, value } => {
                    let slot =
                        *slots.get(local).ok_or_else(|| self.unsupported("a set of a local not held in lanes"))?;
                    let ty = *plan.vector_locals.get(local).ok_or_else(|| self.unsupported("an unplanned local"))?;
                    let v = self.vector_operand(*value, ty, w, vectors)?;
                    self.builder.build_store(slot, v).map_err(&err)?;
                }
                Stmt::If { cond, then_body, else_body } => self
                    .branch(*cond, then_body, else_body, |t, b| t.vector_stmts(b, w, plan, slots, vectors, scalars))?,
                _ => return Err(self.unsupported("the vector loop translation disagrees with its plan")),
            }
        }
        Ok(())
    }

    /// `w` lanes of `ty` from buffer `buf`, lane `i` the element `stride * i` after the one
    /// `index` names: each lane a load of its own, put into the vector in order (every lane is
    /// an element the scalar loop would read, so none is out of bounds).
    fn strided_load(
        &self,
        buf: BufId,
        index: &IndexExpr,
        ty: Ty,
        w: u32,
        stride: i64,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let base = self.element_ptr(buf, index)?;
        let et = self.llvm_type(ty);
        let (i64t, i32t) = (self.ctx.i64_type(), self.ctx.i32_type());
        let mut out = self.vector_type(ty, w).get_poison();
        for lane in 0..w {
            let offset = i64t.const_int((stride * i64::from(lane)) as u64, true);
            // SAFETY: the offset stays inside the buffer: the scalar loop reads the same element.
            let ptr = unsafe { self.builder.build_in_bounds_gep(et, base, &[offset], "lane") }.map_err(&err)?;
            let v = self.builder.build_load(et, ptr, "sld").map_err(&err)?;
            if let Some(inst) = v.as_instruction_value() {
                inst.set_alignment(ty.bits() / 8).map_err(|e| self.unsupported(e.to_string()))?;
            }
            let at = i32t.const_int(u64::from(lane), false);
            out = self.builder.build_insert_element(out, v, at, "lanes").map_err(&err)?;
        }
        Ok(out.into())
    }

    /// `index` in each of `w` lanes of the loop over `var`: the terms that are the same in
    /// every lane summed once as a scalar and splatted, the loop variable's and varying
    /// values' terms lane by lane (unsigned division and remainder, as in `index`).
    fn vector_index(
        &self,
        index: &IndexExpr,
        var: VarId,
        w: u32,
        vectors: &HashMap<ValueId, (BasicValueEnum<'ctx>, Ty)>,
    ) -> Result<VectorValue<'ctx>, CodegenError> {
        let err = self.err();
        let i64t = self.ctx.i64_type();
        let in_lanes = |t: &Term| match t.src {
            IndexSrc::Var(v) => v == var,
            IndexSrc::Value(id) => vectors.contains_key(&id),
        };
        let uniform =
            IndexExpr { terms: index.terms.iter().filter(|t| !in_lanes(t)).cloned().collect(), offset: index.offset };
        let mut sum = self.splat(self.index(&uniform)?.into(), Ty::I64, w)?;
        let constant = |c: i64| -> Result<VectorValue<'ctx>, CodegenError> {
            Ok(self.splat(i64t.const_int(c as u64, true).into(), Ty::I64, w)?)
        };
        for t in index.terms.iter().filter(|t| in_lanes(t)) {
            let v = match t.src {
                IndexSrc::Var(v) => {
                    let steps: Vec<_> = (0..w).map(|i| i64t.const_int(u64::from(i), false)).collect();
                    let at = self.splat(self.var(v)?.into(), Ty::I64, w)?;
                    self.builder.build_int_add(at, VectorType::const_vector(&steps), "iota").map_err(&err)?
                }
                IndexSrc::Value(id) => self.vector_operand(id, Ty::I64, w, vectors)?.into_vector_value(),
            };
            let v = self.term(t, v, constant)?;
            sum = self.builder.build_int_add(sum, v, "idx").map_err(&err)?;
        }
        Ok(sum)
    }

    /// The elements of `buf` at the `w` lanes of `at`, as `mem`'s register type: one
    /// `llvm.masked.gather` with every lane on (each lane an element the scalar loop would
    /// read, so in bounds), which LLVM emits as a gather instruction or as lane loads,
    /// whichever the target prefers.
    fn gathered_load(
        &self,
        buf: BufId,
        at: VectorValue<'ctx>,
        mem: MemType,
        w: u32,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        use inkwell::types::AsTypeRef;
        use inkwell::values::AsValueRef;
        let err = self.err();
        let et = self.slot_type(mem)?;
        let base = self.base(buf)?;
        let mut indices = [at.as_value_ref()];
        // SAFETY: a GEP of one pointer by a vector of indices gives a vector of pointers (LLVM's
        // vector GEP); the values are live and of the types LLVM expects, and every lane is in
        // bounds as the scalar loop's element is.
        let ptrs = unsafe {
            let name = c"gptr";
            let v = llvm_sys::core::LLVMBuildInBoundsGEP2(
                self.builder.as_mut_ptr(),
                et.as_type_ref(),
                base.as_value_ref(),
                indices.as_mut_ptr(),
                1,
                name.as_ptr(),
            );
            VectorValue::new(v)
        };
        let all: Vec<_> = (0..w).map(|_| self.ctx.bool_type().const_int(1, false)).collect();
        let loaded = match et {
            BasicTypeEnum::FloatType(t) => t.vec_type(w),
            BasicTypeEnum::IntType(t) => t.vec_type(w),
            _ => return Err(self.unsupported("a gather of an element that is not a number")),
        };
        let v = self.intrinsic(
            "llvm.masked.gather",
            &[loaded.into(), ptrs.get_type().into()],
            &[ptrs.into(), VectorType::const_vector(&all).into(), loaded.get_poison().into()],
        )?;
        if mem != MemType::Pred {
            return Ok(v);
        }
        // A predicate is a byte in memory: true when it is not zero.
        let bytes = v.into_vector_value();
        Ok(self
            .builder
            .build_int_compare(inkwell::IntPredicate::NE, bytes, loaded.const_zero(), "vpred")
            .map_err(&err)?
            .into())
    }

    /// `w` lanes of `ty` from buffer `buf`, lane `i` the element `stride * i` after the one
    /// `index` names, for a small stride of either sign: one load of the elements from the
    /// lowest lane's to the highest's, then a shuffle picking the lanes (every element loaded
    /// lies between two the scalar loop reads, so none is out of bounds).
    fn shuffled_load(
        &self,
        buf: BufId,
        index: &IndexExpr,
        ty: Ty,
        w: u32,
        stride: i64,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let base = self.element_ptr(buf, index)?;
        let et = self.llvm_type(ty);
        let (i64t, i32t) = (self.ctx.i64_type(), self.ctx.i32_type());
        let last = stride * i64::from(w - 1);
        let low = last.min(0);
        let span = last.unsigned_abs() as u32 + 1;
        // SAFETY: the lowest lane's element, which the scalar loop reads.
        let start = unsafe { self.builder.build_in_bounds_gep(et, base, &[i64t.const_int(low as u64, true)], "low") }
            .map_err(&err)?;
        let wide = self.vector_type(ty, span);
        let v = self.builder.build_load(wide, start, "span").map_err(&err)?;
        if let Some(inst) = v.as_instruction_value() {
            inst.set_alignment(ty.bits() / 8).map_err(|e| self.unsupported(e.to_string()))?;
        }
        let picks: Vec<_> = (0..i64::from(w)).map(|lane| i32t.const_int((stride * lane - low) as u64, false)).collect();
        let v = v.into_vector_value();
        let lanes = self.builder.build_shuffle_vector(v, v, VectorType::const_vector(&picks), "lanes").map_err(&err)?;
        Ok(lanes.into())
    }

    /// Stores the lanes of `v` (of `ty`) one by one, `stride` elements apart from where
    /// `index` puts lane 0: a store whose lanes are interleaved with another's (a complex
    /// number's parts) keeps the loop's vector form, and with it the branches that only its
    /// rare lanes take, where LLVM's loop vectorizer would run every branch for every lane.
    fn strided_store(
        &mut self,
        buf: BufId,
        index: &IndexExpr,
        ty: Ty,
        v: VectorValue<'ctx>,
        stride: i64,
    ) -> Result<(), CodegenError> {
        let err = self.err();
        let base = self.element_ptr(buf, index)?;
        let et = self.llvm_type(ty);
        let (i64t, i32t) = (self.ctx.i64_type(), self.ctx.i32_type());
        for lane in 0..v.get_type().get_size() {
            let offset = i64t.const_int((stride * i64::from(lane)) as u64, true);
            // SAFETY: the offset stays inside the buffer: the scalar loop writes the same element.
            let ptr = unsafe { self.builder.build_in_bounds_gep(et, base, &[offset], "lane") }.map_err(&err)?;
            let x = self.builder.build_extract_element(v, i32t.const_int(u64::from(lane), false), "x").map_err(&err)?;
            let st = self.builder.build_store(ptr, x).map_err(&err)?;
            st.set_alignment(ty.bits() / 8).map_err(|e| self.unsupported(e.to_string()))?;
        }
        Ok(())
    }

    /// `id` as a vector of `ty`: a varying value as is, a uniform one splatted.
    fn vector_operand(
        &self,
        id: ValueId,
        ty: Ty,
        lanes: u32,
        vectors: &HashMap<ValueId, (BasicValueEnum<'ctx>, Ty)>,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        match vectors.get(&id) {
            Some(&(v, t)) if t == ty => Ok(v),
            Some(&(_, t)) => Err(self.unsupported(format!("value %{} is {t:?} but is used as {ty:?}", id.0))),
            None => Ok(self.splat(self.value(id, ty)?, ty, lanes)?.into()),
        }
    }

    fn vector_op(
        &mut self,
        op: &Op,
        ty: Ty,
        w: u32,
        vectors: &HashMap<ValueId, (BasicValueEnum<'ctx>, Ty)>,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let vt = self.vector_type(ty, w);
        let operand = |t: &Self, id: ValueId, ty: Ty| t.vector_operand(id, ty, w, vectors);
        Ok(match op {
            Op::GetLocal(_) | Op::Const(_) | Op::AnyLane { .. } | Op::Index(_) => {
                return Err(self.unsupported("the vector loop translation disagrees with its plan"))
            }
            Op::Load { buf, index, mem } => {
                let ptr = self.element_ptr(*buf, index)?;
                let pred = *mem == MemType::Pred;
                // A predicate is a byte in memory: true when it is not zero.
                let loaded = if pred { self.ctx.i8_type().vec_type(w) } else { vt };
                let v = self.builder.build_load(loaded, ptr, "vld").map_err(&err)?;
                if let Some(inst) = v.as_instruction_value() {
                    inst.set_alignment(mem.bits() / 8).map_err(|e| self.unsupported(e.to_string()))?;
                }
                if pred {
                    let bytes = v.into_vector_value();
                    let zero = loaded.const_zero();
                    self.builder
                        .build_int_compare(inkwell::IntPredicate::NE, bytes, zero, "vpred")
                        .map_err(&err)?
                        .into()
                } else {
                    v
                }
            }
            Op::Unary { op, ty, a } => {
                let x = operand(self, *a, *ty)?;
                self.vector_unary(*op, *ty, x)?
            }
            Op::Binary { op, ty, a, b } => {
                let (x, y) = (operand(self, *a, *ty)?, operand(self, *b, *ty)?);
                self.vector_binary(*op, *ty, x, y)?
            }
            Op::Cmp { op, ty, a, b } => {
                let (x, y) = (operand(self, *a, *ty)?.into_vector_value(), operand(self, *b, *ty)?.into_vector_value());
                match (float_predicate(*op), int_predicate(*op)) {
                    (Some(p), _) if ty.is_float() => self.builder.build_float_compare(p, x, y, "vfcmp"),
                    (_, Some(p)) if !ty.is_float() => self.builder.build_int_compare(p, x, y, "vicmp"),
                    _ => return Err(self.unsupported(format!("{op:?} on {ty:?}"))),
                }
                .map_err(&err)?
                .into()
            }
            Op::Select { ty, cond, a, b } => {
                let (x, y) = (operand(self, *a, *ty)?, operand(self, *b, *ty)?);
                if vectors.contains_key(cond) {
                    let c = operand(self, *cond, Ty::Pred)?.into_vector_value();
                    self.builder.build_select(c, x, y, "vsel").map_err(&err)?
                } else {
                    let c = self.value(*cond, Ty::Pred)?.into_int_value();
                    self.builder.build_select(c, x, y, "vsel").map_err(&err)?
                }
            }
            Op::Fma { ty, a, b, c } => {
                if !ty.is_float() {
                    return Err(self.unsupported(format!("fma on {ty:?}")));
                }
                let (x, y, z) = (operand(self, *a, *ty)?, operand(self, *b, *ty)?, operand(self, *c, *ty)?);
                self.intrinsic("llvm.fma", &[vt.into()], &[x.into(), y.into(), z.into()])?
            }
            Op::Cast { op, from, to, a } => {
                let x = operand(self, *a, *from)?.into_vector_value();
                self.vector_cast(*op, *from, *to, x, w)?
            }
            Op::Math { func: MathFn::Round, ty, args } if ty.is_float() => {
                let [a] = args.as_slice() else {
                    return Err(self.unsupported(format!("round takes 1 argument, given {}", args.len())));
                };
                // As in the scalar form (`ops.rs`): LLVM's round is exact and inline on x86.
                self.intrinsic("llvm.round", &[vt.into()], &[operand(self, *a, *ty)?.into()])?
            }
            Op::Math { func, ty, args } => {
                let lt = self.llvm_type(*ty);
                let f = self.external(func.symbol(*ty), Some(lt), &vec![lt.into(); args.len()])?;
                let ins = args.iter().map(|&a| operand(self, a, *ty)).collect::<Result<Vec<_>, _>>()?;
                let mut out = vt.get_poison();
                for lane in 0..w {
                    let i = self.ctx.i32_type().const_int(u64::from(lane), false);
                    let mut lane_args: Vec<BasicMetadataValueEnum<'ctx>> = Vec::with_capacity(ins.len());
                    for v in &ins {
                        lane_args.push(
                            self.builder.build_extract_element(v.into_vector_value(), i, "lane").map_err(&err)?.into(),
                        );
                    }
                    let call = self.builder.build_call(f, &lane_args, "math").map_err(&err)?;
                    let r = call
                        .try_as_basic_value()
                        .basic()
                        .ok_or_else(|| self.unsupported(format!("{func:?} returned nothing")))?;
                    out = self.builder.build_insert_element(out, r, i, "math").map_err(&err)?;
                }
                out.into()
            }
        })
    }

    fn vector_unary(&self, op: UnOp, ty: Ty, x: BasicValueEnum<'ctx>) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let t = x.get_type();
        let v = x.into_vector_value();
        let no_poison = self.ctx.bool_type().const_zero();
        Ok(match op {
            UnOp::Neg if ty.is_float() => self.builder.build_float_neg(v, "vfneg").map_err(&err)?.into(),
            UnOp::Neg => self.builder.build_int_neg(v, "vneg").map_err(&err)?.into(),
            UnOp::Abs if ty.is_float() => self.intrinsic("llvm.fabs", &[t], &[x.into()])?,
            UnOp::Abs => self.intrinsic("llvm.abs", &[t], &[x.into(), no_poison.into()])?,
            UnOp::Not => self.builder.build_not(v, "vnot").map_err(&err)?.into(),
            UnOp::Sqrt => self.intrinsic("llvm.sqrt", &[t], &[x.into()])?,
            UnOp::Floor => self.intrinsic("llvm.floor", &[t], &[x.into()])?,
            UnOp::Ceil => self.intrinsic("llvm.ceil", &[t], &[x.into()])?,
            UnOp::Trunc => self.intrinsic("llvm.trunc", &[t], &[x.into()])?,
            UnOp::RoundEven => self.intrinsic("llvm.roundeven", &[t], &[x.into()])?,
            UnOp::Popcnt => self.intrinsic("llvm.ctpop", &[t], &[x.into()])?,
            UnOp::Clz => self.intrinsic("llvm.ctlz", &[t], &[x.into(), no_poison.into()])?,
        })
    }

    /// `op` lane by lane on two vectors of `ty` (the scalar op's instruction or intrinsic).
    pub fn vector_binary(
        &self,
        op: BinOp,
        ty: Ty,
        x: BasicValueEnum<'ctx>,
        y: BasicValueEnum<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let t = x.get_type();
        let (a, b) = (x.into_vector_value(), y.into_vector_value());
        let bld = &self.builder;
        let r = if ty.is_float() {
            match op {
                BinOp::Add => bld.build_float_add(a, b, "vfadd"),
                BinOp::Sub => bld.build_float_sub(a, b, "vfsub"),
                BinOp::Mul => bld.build_float_mul(a, b, "vfmul"),
                BinOp::FDiv => bld.build_float_div(a, b, "vfdiv"),
                BinOp::FMax => return self.intrinsic("llvm.maximum", &[t], &[x.into(), y.into()]),
                BinOp::FMin => return self.intrinsic("llvm.minimum", &[t], &[x.into(), y.into()]),
                _ => return Err(self.unsupported(format!("{op:?} on {ty:?}"))),
            }
        } else {
            match op {
                BinOp::Add => bld.build_int_add(a, b, "vadd"),
                BinOp::Sub => bld.build_int_sub(a, b, "vsub"),
                BinOp::Mul => bld.build_int_mul(a, b, "vmul"),
                BinOp::SDiv => bld.build_int_signed_div(a, b, "vsdiv"),
                BinOp::UDiv => bld.build_int_unsigned_div(a, b, "vudiv"),
                BinOp::SRem => bld.build_int_signed_rem(a, b, "vsrem"),
                BinOp::URem => bld.build_int_unsigned_rem(a, b, "vurem"),
                BinOp::And => bld.build_and(a, b, "vand"),
                BinOp::Or => bld.build_or(a, b, "vor"),
                BinOp::Xor => bld.build_xor(a, b, "vxor"),
                BinOp::Shl => bld.build_left_shift(a, b, "vshl"),
                BinOp::LShr => bld.build_right_shift(a, b, false, "vlshr"),
                BinOp::AShr => bld.build_right_shift(a, b, true, "vashr"),
                BinOp::SMax => return self.intrinsic("llvm.smax", &[t], &[x.into(), y.into()]),
                BinOp::SMin => return self.intrinsic("llvm.smin", &[t], &[x.into(), y.into()]),
                BinOp::UMax => return self.intrinsic("llvm.umax", &[t], &[x.into(), y.into()]),
                BinOp::UMin => return self.intrinsic("llvm.umin", &[t], &[x.into(), y.into()]),
                BinOp::FDiv | BinOp::FMax | BinOp::FMin => return Err(self.unsupported(format!("{op:?} on {ty:?}"))),
            }
        };
        Ok(r.map_err(&err)?.into())
    }

    /// `fptosi.sat`/`fptoui.sat` on vectors, spelled out: x86 without AVX-512 has no vector
    /// lowering for the intrinsics and LLVM splits them into one scalar conversion (with its
    /// compares and moves) per lane. The plain conversion of a value clamped into range (NaN
    /// replaced by 0) is defined, and two selects put the saturated ends back; the result is
    /// the intrinsic's, lane for lane.
    fn vector_saturating_cast(
        &self,
        signed: bool,
        from: Ty,
        to: Ty,
        x: VectorValue<'ctx>,
        w: u32,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let bld = &self.builder;
        let ft = self.vector_type(from, w);
        let it = self.vector_type(to, w);
        let bits = to.bits();
        let fconst = |v: f64| -> Result<VectorValue<'ctx>, CodegenError> {
            let scalar = match self.llvm_type(from) {
                BasicTypeEnum::FloatType(t) => t.const_float(v),
                _ => return Err(self.unsupported("a float cast from a non-float")),
            };
            self.splat(scalar.into(), from, w)
        };
        let iconst = |v: u64| -> Result<VectorValue<'ctx>, CodegenError> {
            let scalar = match self.llvm_type(to) {
                BasicTypeEnum::IntType(t) => t.const_int(v, false),
                _ => return Err(self.unsupported("an int cast to a non-int")),
            };
            self.splat(scalar.into(), to, w)
        };
        // The first value too large for the result, and the last too small (exclusive).
        let (hi, lo) = if signed {
            (2f64.powi(bits as i32 - 1), -(2f64.powi(bits as i32 - 1)))
        } else {
            (2f64.powi(bits as i32), -1.0)
        };
        let (hi_v, lo_v) = (fconst(hi)?, fconst(lo)?);
        let below_hi = bld.build_float_compare(FloatPredicate::OLT, x, hi_v, "below_hi").map_err(&err)?;
        let in_range = if signed {
            let above = bld.build_float_compare(FloatPredicate::OGE, x, lo_v, "above_lo").map_err(&err)?;
            bld.build_and(below_hi, above, "in_range").map_err(&err)?
        } else {
            let above = bld.build_float_compare(FloatPredicate::OGT, x, lo_v, "above_lo").map_err(&err)?;
            bld.build_and(below_hi, above, "in_range").map_err(&err)?
        };
        let zero = ft.const_zero();
        let safe = bld.build_select(in_range, x, zero, "safe").map_err(&err)?.into_vector_value();
        let r = if signed {
            bld.build_float_to_signed_int(safe, it, "cvt").map_err(&err)?
        } else {
            bld.build_float_to_unsigned_int(safe, it, "cvt").map_err(&err)?
        };
        let max = if signed { (1u64 << (bits - 1)) - 1 } else { u64::MAX >> (64 - bits) };
        let too_big = bld.build_float_compare(FloatPredicate::OGE, x, hi_v, "too_big").map_err(&err)?;
        let r = bld.build_select(too_big, iconst(max)?, r, "sat_hi").map_err(&err)?;
        if !signed {
            // Too small (or NaN) already gave 0 through `safe`.
            return Ok(r);
        }
        let too_small = bld.build_float_compare(FloatPredicate::OLT, x, lo_v, "too_small").map_err(&err)?;
        let min = 1u64 << (bits - 1);
        Ok(bld.build_select(too_small, iconst(min)?, r.into_vector_value(), "sat_lo").map_err(&err)?)
    }

    fn vector_cast(
        &self,
        op: CastOp,
        from: Ty,
        to: Ty,
        x: VectorValue<'ctx>,
        w: u32,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let bld = &self.builder;
        let tt = self.vector_type(to, w);
        let bad = || self.unsupported(format!("cast {op:?} from {from:?} to {to:?}"));
        Ok(match op {
            CastOp::SExt => bld.build_int_s_extend(x, tt, "vsext").map_err(&err)?.into(),
            CastOp::ZExt => bld.build_int_z_extend(x, tt, "vzext").map_err(&err)?.into(),
            CastOp::Trunc => bld.build_int_truncate(x, tt, "vtrunc").map_err(&err)?.into(),
            CastOp::SIToFP => bld.build_signed_int_to_float(x, tt, "vsitofp").map_err(&err)?.into(),
            CastOp::UIToFP => bld.build_unsigned_int_to_float(x, tt, "vuitofp").map_err(&err)?.into(),
            CastOp::FPToSISat | CastOp::FPToUISat => {
                self.vector_saturating_cast(op == CastOp::FPToSISat, from, to, x, w)?
            }
            CastOp::FPExt => bld.build_float_ext(x, tt, "vfpext").map_err(&err)?.into(),
            CastOp::FPTrunc => bld.build_float_trunc(x, tt, "vfptrunc").map_err(&err)?.into(),
            CastOp::Bitcast if from.bits() == to.bits() => bld.build_bit_cast(x, tt, "vbitcast").map_err(&err)?,
            CastOp::Bitcast => return Err(bad()),
            CastOp::F16ToF32 => {
                let ht = self.ctx.f16_type().vec_type(w);
                let h = bld.build_bit_cast(x, ht, "vf16").map_err(&err)?.into_vector_value();
                bld.build_float_ext(h, tt, "vf16ext").map_err(&err)?.into()
            }
            CastOp::F32ToF16 => {
                let ht = self.ctx.f16_type().vec_type(w);
                let h = bld.build_float_trunc(x, ht, "vf16trunc").map_err(&err)?;
                bld.build_bit_cast(h, tt, "vf16bits").map_err(&err)?
            }
        })
    }
}
