//! One kernel to one LLVM function: the calling convention, the grid loop and the walk over
//! the statement tree (values, locals, loops, branches, calls).

use std::collections::{HashMap, HashSet};

use inkwell::attributes::AttributeLoc;
use inkwell::builder::{Builder, BuilderError};
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValueEnum, FunctionValue, InstructionValue, IntValue, PointerValue,
};
use inkwell::IntPredicate;

use tessera_lower::kernel::{
    verify_kernel, CallArg, IndexExpr, IndexSrc, Kernel, LocalId, Loop, Op, Stmt, Ty, ValueId, VarId,
};

use super::target::TargetCpu;
use crate::CodegenError;

/// Translation state for one kernel.
pub struct Translator<'a, 'ctx> {
    pub ctx: &'ctx Context,
    pub module: &'a Module<'ctx>,
    pub builder: Builder<'ctx>,
    pub function: FunctionValue<'ctx>,
    pub kernel: &'a Kernel,
    /// Base address of every buffer, loaded once in the entry block.
    pub bases: Vec<PointerValue<'ctx>>,
    /// Values in scope, with their kernel type (checked at every use).
    pub values: HashMap<ValueId, (BasicValueEnum<'ctx>, Ty)>,
    pub locals: HashMap<LocalId, (PointerValue<'ctx>, Ty)>,
    pub vars: HashMap<VarId, IntValue<'ctx>>,
    /// Every id defined so far: the IR promises uniqueness, and a repeated id would otherwise
    /// silently shadow.
    defined: HashSet<(u8, u32)>,
    /// The entry block's terminator: allocas go before it so mem2reg promotes them.
    alloca_point: inkwell::values::InstructionValue<'ctx>,
    symbols: &'a HashSet<&'static str>,
    /// Per buffer: whether vector stores into it bypass the cache (`streaming.rs`).
    pub streamed: Vec<bool>,
    /// The alignment a streaming store's address needs: the widest vector register's size.
    pub stream_align: u32,
    /// Whether any store bypassed the cache (the kernel then ends with a fence).
    pub streamed_any: std::cell::Cell<bool>,
    /// No launch passes a buffer it writes that shares bytes with another (`translate`).
    pub disjoint: bool,
    /// Values of strided loads a block of a transposed loop serves from registers
    /// (`transpose.rs`), for the body copy being translated.
    pub transposed: HashMap<ValueId, BasicValueEnum<'ctx>>,
}

/// What a scope (one statement list) defined, to be forgotten when the list ends.
#[derive(Default)]
struct Scope {
    values: Vec<ValueId>,
    locals: Vec<LocalId>,
}

pub fn builder_error(kernel: &str) -> impl Fn(BuilderError) -> CodegenError + '_ {
    move |e| CodegenError::Backend { tier: "llvm", kernel: kernel.to_string(), message: format!("IR builder: {e}") }
}

/// Adds `kernel` to `module` as `void name(ptr buffers, i64 grid_lo, i64 grid_hi)`.
///
/// With `disjoint` (the caller's promise that no launch of this function passes a buffer it
/// writes that shares bytes with another of its buffers: `Program::disjoint_launches`), the
/// code goes into an always-inlined `name.body` that takes each buffer as a `noalias`
/// parameter, which the inliner turns into alias scopes: LLVM then knows the buffers apart,
/// needs no run-time overlap checks before vectorizing, and moves loads across stores.
pub fn translate<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    target: &TargetCpu,
    kernel: &Kernel,
    symbols: &HashSet<&'static str>,
    disjoint: bool,
) -> Result<(), CodegenError> {
    let unsupported = |what: String| CodegenError::Unsupported { tier: "llvm", kernel: kernel.name.clone(), what };
    // The verifier proves the contract the translation relies on, bounds included: compiled
    // code does not check indices, so a kernel whose accesses cannot be shown in bounds is
    // refused here rather than left to corrupt memory at run time. The checks below stay as
    // a second line so nothing in this tier can panic on a kernel the verifier missed.
    verify_kernel(kernel).map_err(|e| unsupported(format!("the kernel does not verify: {e}")))?;
    // Without conversion instructions LLVM would call a runtime routine per element.
    use tessera_lower::kernel::half_casts::{expand, Keep};
    let keep = if target.half_conversions { Keep::MemoryConversions } else { Keep::Nothing };
    let expanded = expand(kernel, keep);
    let kernel = expanded.as_ref().unwrap_or(kernel);
    let forwarded = crate::index_forwarding::forward_kernel_indices(kernel);
    let kernel = forwarded.as_ref().unwrap_or(kernel);
    if kernel.name.is_empty() || kernel.name.contains('\0') {
        return Err(unsupported(format!("kernel name {:?} is not a symbol", kernel.name)));
    }
    let symbol = crate::kernel_symbol(&kernel.name);
    if module.get_function(&symbol).is_some() {
        return Err(unsupported(format!("kernel name '{}' is already taken in this compile", kernel.name)));
    }
    let i64t = ctx.i64_type();
    let ptr = ctx.ptr_type(Default::default());
    let fn_type = ctx.void_type().fn_type(&[ptr.into(), i64t.into(), i64t.into()], false);
    let function = module.add_function(&symbol, fn_type, Some(Linkage::External));
    code_attributes(ctx, function, target);
    // The buffer table is only read, and nothing else accesses it during the call.
    add_enum_attributes(ctx, function, AttributeLoc::Param(0), &["noalias", "readonly"]);

    let builder = ctx.create_builder();
    let err = builder_error(&kernel.name);
    let entry = ctx.append_basic_block(function, "entry");
    builder.position_at_end(entry);
    let table =
        function.get_nth_param(0).ok_or_else(|| unsupported("no buffer parameter".into()))?.into_pointer_value();
    let lo = function.get_nth_param(1).map(|p| p.into_int_value());
    let hi = function.get_nth_param(2).map(|p| p.into_int_value());
    let (Some(mut lo), Some(mut hi)) = (lo, hi) else { return Err(unsupported("missing grid parameters".into())) };
    // All base pointers are loaded up front: loaded inside loops, each load would have to be
    // repeated after every store (LLVM cannot tell the table from the data), which blocks
    // vectorization. Without `disjoint` the bases may overlap as far as LLVM knows, and the
    // vectorizer's run-time overlap checks (a few compares per loop entry) keep it correct.
    let mut bases = Vec::with_capacity(kernel.buffers.len());
    for i in 0..kernel.buffers.len() {
        // SAFETY: `i` is below the table's length, which is the kernel's buffer count.
        let slot = unsafe { builder.build_in_bounds_gep(ptr, table, &[i64t.const_int(i as u64, false)], "slot") }
            .map_err(&err)?;
        bases.push(builder.build_load(ptr, slot, &format!("buf{i}")).map_err(&err)?.into_pointer_value());
    }
    let mut code = function;
    if disjoint {
        let mut params: Vec<BasicMetadataTypeEnum> = vec![ptr.into(); bases.len()];
        params.extend([BasicMetadataTypeEnum::from(i64t), i64t.into()]);
        code = module.add_function(
            &format!("{symbol}.body"),
            ctx.void_type().fn_type(&params, false),
            Some(Linkage::Internal),
        );
        code_attributes(ctx, code, target);
        add_enum_attributes(ctx, code, AttributeLoc::Function, &["alwaysinline"]);
        for i in 0..bases.len() {
            add_enum_attributes(ctx, code, AttributeLoc::Param(i as u32), &["noalias"]);
        }
        let mut args: Vec<BasicMetadataValueEnum> = bases.iter().map(|&b| b.into()).collect();
        args.extend([BasicMetadataValueEnum::from(lo), hi.into()]);
        builder.build_call(code, &args, "").map_err(&err)?;
        builder.build_return(None).map_err(&err)?;
        builder.position_at_end(ctx.append_basic_block(code, "entry"));
        let param =
            |i: usize| code.get_nth_param(i as u32).ok_or_else(|| unsupported("a body parameter is missing".into()));
        bases = (0..bases.len()).map(|i| param(i).map(|p| p.into_pointer_value())).collect::<Result<_, _>>()?;
        lo = param(bases.len())?.into_int_value();
        hi = param(bases.len() + 1)?.into_int_value();
    }
    let body = ctx.append_basic_block(code, "body");
    let alloca_point = builder.build_unconditional_branch(body).map_err(&err)?;
    builder.position_at_end(body);

    let mut t = Translator {
        ctx,
        module,
        builder,
        function: code,
        kernel,
        bases,
        values: HashMap::new(),
        locals: HashMap::new(),
        vars: HashMap::new(),
        defined: HashSet::new(),
        alloca_point,
        symbols,
        streamed: super::streaming::streamed_buffers(kernel, target),
        streamed_any: std::cell::Cell::new(false),
        stream_align: target.vector_bytes,
        disjoint,
        transposed: HashMap::new(),
    };
    t.define_var(kernel.grid.var)?;
    let latch = t.counted_loop(kernel.grid.var, lo, hi, |t| t.block(&kernel.body))?;
    t.hint_loop(latch, LoopHints::grid(kernel.grid.var, &kernel.body));
    if t.streamed_any.get() {
        t.fence_streams()?;
    }
    t.builder.build_return(None).map_err(&err)?;
    Ok(())
}

/// What every function holding kernel code carries: the target CPU and its features (the
/// code is specialized to them), 512-bit vectors where the CPU has AVX-512, and no unwinding.
fn code_attributes<'ctx>(ctx: &'ctx Context, f: FunctionValue<'ctx>, target: &TargetCpu) {
    for (key, value) in [("target-cpu", target.cpu.as_str()), ("target-features", target.features.as_str())] {
        f.add_attribute(AttributeLoc::Function, ctx.create_string_attribute(key, value));
    }
    if target.avx512 {
        f.add_attribute(AttributeLoc::Function, ctx.create_string_attribute("prefer-vector-width", "512"));
    }
    add_enum_attributes(ctx, f, AttributeLoc::Function, &["nounwind"]);
}

pub(crate) fn add_enum_attributes<'ctx>(ctx: &'ctx Context, f: FunctionValue<'ctx>, at: AttributeLoc, names: &[&str]) {
    for name in names {
        let kind = inkwell::attributes::Attribute::get_named_enum_kind_id(name);
        if kind != 0 {
            f.add_attribute(at, ctx.create_enum_attribute(kind, 0));
        }
    }
}

impl<'a, 'ctx> Translator<'a, 'ctx> {
    pub fn unsupported(&self, what: impl Into<String>) -> CodegenError {
        CodegenError::Unsupported { tier: "llvm", kernel: self.kernel.name.clone(), what: what.into() }
    }

    pub fn err(&self) -> impl Fn(BuilderError) -> CodegenError + '_ {
        builder_error(&self.kernel.name)
    }

    pub fn llvm_type(&self, ty: Ty) -> BasicTypeEnum<'ctx> {
        match ty {
            Ty::Pred => self.ctx.bool_type().into(),
            Ty::I8 => self.ctx.i8_type().into(),
            Ty::I16 => self.ctx.i16_type().into(),
            Ty::I32 => self.ctx.i32_type().into(),
            Ty::I64 => self.ctx.i64_type().into(),
            Ty::F32 => self.ctx.f32_type().into(),
            Ty::F64 => self.ctx.f64_type().into(),
        }
    }

    /// The value `id`, which must be in scope and of type `ty`.
    pub fn value(&self, id: ValueId, ty: Ty) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        match self.values.get(&id) {
            Some(&(v, t)) if t == ty => Ok(v),
            Some(&(_, t)) => Err(self.unsupported(format!("value %{} is {t:?} but is used as {ty:?}", id.0))),
            None => Err(self.unsupported(format!("value %{} is used outside its scope", id.0))),
        }
    }

    /// The value `id` and its type, which must be in scope.
    pub fn value_any(&self, id: ValueId) -> Result<(BasicValueEnum<'ctx>, Ty), CodegenError> {
        self.values
            .get(&id)
            .copied()
            .ok_or_else(|| self.unsupported(format!("value %{} is used outside its scope", id.0)))
    }

    pub fn var(&self, var: VarId) -> Result<IntValue<'ctx>, CodegenError> {
        self.vars
            .get(&var)
            .copied()
            .ok_or_else(|| self.unsupported(format!("loop variable v{} is not in scope", var.0)))
    }

    pub(super) fn define_var(&mut self, var: VarId) -> Result<(), CodegenError> {
        if !self.defined.insert((0, var.0)) {
            return Err(self.unsupported(format!("loop variable v{} is defined twice", var.0)));
        }
        Ok(())
    }

    /// Runs a statement list in its own scope.
    pub fn block(&mut self, stmts: &[Stmt]) -> Result<(), CodegenError> {
        let mut scope = Scope::default();
        let result = stmts.iter().try_for_each(|s| self.stmt(s, &mut scope));
        for v in scope.values {
            self.values.remove(&v);
        }
        for l in scope.locals {
            self.locals.remove(&l);
        }
        result
    }

    fn stmt(&mut self, stmt: &Stmt, scope: &mut Scope) -> Result<(), CodegenError> {
        match stmt {
            Stmt::Let(id, op) => {
                if !self.defined.insert((1, id.0)) {
                    return Err(self.unsupported(format!("value %{} is defined twice", id.0)));
                }
                let value = self.op(op)?;
                self.values.insert(*id, value);
                scope.values.push(*id);
            }
            Stmt::Loop(l) => self.loop_stmt(l)?,
            Stmt::DeclLocal { local, ty, init } => {
                if !self.defined.insert((2, local.0)) {
                    return Err(self.unsupported(format!("local l{} is declared twice", local.0)));
                }
                let init = self.value(*init, *ty)?;
                let slot = self.entry_alloca(*ty, &format!("l{}", local.0))?;
                self.builder.build_store(slot, init).map_err(self.err())?;
                self.locals.insert(*local, (slot, *ty));
                scope.locals.push(*local);
            }
            Stmt::SetLocal { local, value } => {
                let (slot, ty) = self.local(*local)?;
                let value = self.value(*value, ty)?;
                self.builder.build_store(slot, value).map_err(self.err())?;
            }
            Stmt::Store { buf, index, mem, value } => self.store(*buf, index, *mem, *value)?,
            Stmt::If { cond, then_body, else_body } => self.branch(*cond, then_body, else_body, |t, b| t.block(b))?,
            Stmt::Call { func, args } => self.call(func, args)?,
        }
        Ok(())
    }

    /// `if cond { then_body } else { else_body }`, each branch translated by `body` (scalar
    /// statements, or a vector loop's).
    pub fn branch(
        &mut self,
        cond: ValueId,
        then_body: &[Stmt],
        else_body: &[Stmt],
        mut body: impl FnMut(&mut Self, &[Stmt]) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let cond = self.value(cond, Ty::Pred)?.into_int_value();
        let then_bb = self.ctx.append_basic_block(self.function, "then");
        let else_bb = self.ctx.append_basic_block(self.function, "else");
        let join = self.ctx.append_basic_block(self.function, "join");
        self.builder.build_conditional_branch(cond, then_bb, else_bb).map_err(self.err())?;
        for (bb, stmts) in [(then_bb, then_body), (else_bb, else_body)] {
            self.builder.position_at_end(bb);
            body(self, stmts)?;
            self.builder.build_unconditional_branch(join).map_err(self.err())?;
        }
        self.builder.position_at_end(join);
        Ok(())
    }

    pub fn local(&self, local: LocalId) -> Result<(PointerValue<'ctx>, Ty), CodegenError> {
        self.locals.get(&local).copied().ok_or_else(|| self.unsupported(format!("local l{} is not in scope", local.0)))
    }

    /// Locals are entry-block allocas of their register type, which mem2reg turns into SSA
    /// values (an alloca anywhere else would stay in memory).
    fn entry_alloca(&self, ty: Ty, name: &str) -> Result<PointerValue<'ctx>, CodegenError> {
        self.entry_alloca_of(self.llvm_type(ty), name)
    }

    pub fn entry_alloca_of(&self, ty: BasicTypeEnum<'ctx>, name: &str) -> Result<PointerValue<'ctx>, CodegenError> {
        let b = self.ctx.create_builder();
        b.position_before(&self.alloca_point);
        b.build_alloca(ty, name).map_err(self.err())
    }

    fn loop_stmt(&mut self, l: &Loop) -> Result<(), CodegenError> {
        self.define_var(l.var)?;
        if l.end <= l.start {
            return Ok(());
        }
        if l.vector_width > 1 && self.vector_loop(l)? {
            return Ok(());
        }
        if !l.reductions.is_empty() {
            return self.scalar_lanes(l);
        }
        if self.transposed_loop(l)? {
            return Ok(());
        }
        let i64t = self.ctx.i64_type();
        let (start, end) = (i64t.const_int(l.start as u64, true), i64t.const_int(l.end as u64, true));
        let latch = self.counted_loop(l.var, start, end, |t| t.block(&l.body))?;
        self.hint_loop(latch, LoopHints::inner(&l.body));
        Ok(())
    }

    /// A lane reduction whose body does not vectorize: `W` scalar accumulators, the body
    /// repeated for each per step of `W` iterations (copy `c` on lane `c`), the IR's tree
    /// fold, then the remainder on the local.
    fn scalar_lanes(&mut self, l: &Loop) -> Result<(), CodegenError> {
        let w = i64::from(l.vector_width);
        let trip = l.end - l.start;
        let main_end = l.start + (trip - trip % w);
        let i64t = self.ctx.i64_type();
        let kernel = self.kernel;
        let err = builder_error(&kernel.name);
        if main_end > l.start {
            let mut lanes: Vec<Vec<PointerValue<'ctx>>> = Vec::new();
            for r in &l.reductions {
                let identity = r.identity().ok_or_else(|| self.unsupported("a reduction without identity"))?;
                let (v, _) = self.op(&tessera_lower::kernel::Op::Const(identity))?;
                let mut slots = Vec::new();
                for _ in 0..w {
                    let slot = self.entry_alloca(r.ty, "lane")?;
                    self.builder.build_store(slot, v).map_err(&err)?;
                    slots.push(slot);
                }
                lanes.push(slots);
            }
            let (start, end) = (i64t.const_int(l.start as u64, true), i64t.const_int(main_end as u64, true));
            self.counted_loop_by(l.var, start, end, w, |t| {
                let iv = t.var(l.var)?;
                for c in 0..w {
                    let at = t.builder.build_int_nsw_add(iv, i64t.const_int(c as u64, false), "lane_iv");
                    t.vars.insert(l.var, at.map_err(t.err())?);
                    let saved: Vec<_> = l
                        .reductions
                        .iter()
                        .zip(&lanes)
                        .map(|(r, s)| t.locals.insert(r.local, (s[c as usize], r.ty)))
                        .collect();
                    t.forget_defined(&l.body);
                    let result = t.block(&l.body);
                    for (r, old) in l.reductions.iter().zip(saved) {
                        if let Some(old) = old {
                            t.locals.insert(r.local, old);
                        }
                    }
                    result?;
                }
                t.vars.insert(l.var, iv);
                Ok(())
            })?;
            for (r, slots) in l.reductions.iter().zip(&lanes) {
                let lt = self.llvm_type(r.ty);
                let mut vals = Vec::with_capacity(slots.len());
                for &slot in slots {
                    vals.push(self.builder.build_load(lt, slot, "lane").map_err(&err)?);
                }
                while vals.len() > 1 {
                    let half = vals.len() / 2;
                    for j in 0..half {
                        vals[j] = self.fold_scalars(r.op, r.ty, vals[j], vals[j + half])?;
                    }
                    vals.truncate(half);
                }
                let (slot, _) = self.local(r.local)?;
                let before = self.builder.build_load(lt, slot, "before").map_err(&err)?;
                let total = self.fold_scalars(r.op, r.ty, before, vals[0])?;
                self.builder.build_store(slot, total).map_err(&err)?;
            }
        }
        if l.end > main_end {
            self.forget_defined(&l.body);
            let (start, end) = (i64t.const_int(main_end as u64, true), i64t.const_int(l.end as u64, true));
            self.counted_loop_by(l.var, start, end, 1, |t| t.block(&l.body))?;
        }
        Ok(())
    }

    /// `op(x, y)` on two scalars (as one-lane vectors, through the vector op).
    pub fn fold_scalars(
        &self,
        op: tessera_lower::kernel::BinOp,
        ty: Ty,
        x: BasicValueEnum<'ctx>,
        y: BasicValueEnum<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let zero = self.ctx.i32_type().const_zero();
        let one = |v: BasicValueEnum<'ctx>| -> Result<BasicValueEnum<'ctx>, CodegenError> {
            let vt = match v.get_type() {
                BasicTypeEnum::FloatType(t) => t.vec_type(1),
                BasicTypeEnum::IntType(t) => t.vec_type(1),
                _ => return Err(self.unsupported("a fold of a non-scalar value")),
            };
            Ok(self.builder.build_insert_element(vt.get_poison(), v, zero, "one").map_err(&err)?.into())
        };
        let r = self.vector_binary(op, ty, one(x)?, one(y)?)?;
        self.builder.build_extract_element(r.into_vector_value(), zero, "fold").map_err(&err)
    }

    /// Lets the ids a body defines be defined again (a body translated more than once:
    /// vector part, copies, remainder).
    pub fn forget_defined(&mut self, body: &[Stmt]) {
        for s in body {
            match s {
                Stmt::Let(id, _) => {
                    self.defined.remove(&(1, id.0));
                }
                Stmt::DeclLocal { local, .. } => {
                    self.defined.remove(&(2, local.0));
                }
                Stmt::Loop(l) => {
                    self.defined.remove(&(0, l.var.0));
                    self.forget_defined(&l.body);
                }
                Stmt::If { then_body, else_body, .. } => {
                    self.forget_defined(then_body);
                    self.forget_defined(else_body);
                }
                _ => {}
            }
        }
    }

    pub fn block_of(&mut self, body: &[Stmt]) -> Result<(), CodegenError> {
        self.forget_defined(body);
        self.block(body)
    }

    /// Attaches `hints` to the loop whose backward branch is `latch` (its `llvm.loop` ID).
    fn hint_loop(&self, latch: InstructionValue<'ctx>, hints: LoopHints) {
        let mut options: Vec<(&str, Option<bool>)> = Vec::new();
        if hints.keep_rolled {
            options.push(("llvm.loop.unroll.disable", None));
        }
        if hints.no_vectorize {
            options.push(("llvm.loop.vectorize.enable", Some(false)));
        }
        if options.is_empty() {
            return;
        }
        // SAFETY: plain LLVM-C calls on this context and an instruction of it. The temporary
        // node is replaced by the node that holds it, which makes that node refer to itself
        // (what LLVM requires of a loop ID) and frees the temporary.
        unsafe {
            use inkwell::values::AsValueRef;
            use llvm_sys::core::{LLVMGetMDKindIDInContext, LLVMMDNodeInContext2, LLVMMDStringInContext2};
            use llvm_sys::core::{LLVMMetadataAsValue, LLVMSetMetadata, LLVMValueAsMetadata};
            use llvm_sys::debuginfo::{LLVMMetadataReplaceAllUsesWith, LLVMTemporaryMDNode};
            let ctx = self.ctx.raw();
            let temp = LLVMTemporaryMDNode(ctx, std::ptr::null_mut(), 0);
            let mut ops = vec![temp];
            for (option, flag) in options {
                let name = LLVMMDStringInContext2(ctx, option.as_ptr().cast(), option.len());
                let mut parts = vec![name];
                // `unroll.disable` is a bare name; the others carry an i1.
                if let Some(flag) = flag {
                    let value = self.ctx.bool_type().const_int(u64::from(flag), false);
                    parts.push(LLVMValueAsMetadata(value.as_value_ref()));
                }
                ops.push(LLVMMDNodeInContext2(ctx, parts.as_mut_ptr(), parts.len()));
            }
            let id = LLVMMDNodeInContext2(ctx, ops.as_mut_ptr(), ops.len());
            LLVMMetadataReplaceAllUsesWith(temp, id);
            let kind = "llvm.loop";
            let kind = LLVMGetMDKindIDInContext(ctx, kind.as_ptr().cast(), kind.len() as u32);
            LLVMSetMetadata(latch.as_value_ref(), kind, LLVMMetadataAsValue(ctx, id));
        }
    }

    /// `for var in lo..hi { body }` in the shape LLVM's loop passes expect: a guard, a header
    /// with the induction variable's phi, and a latch that increments by one and compares
    /// with `hi`.
    fn counted_loop(
        &mut self,
        var: VarId,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        body: impl FnOnce(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<InstructionValue<'ctx>, CodegenError> {
        self.counted_loop_by(var, lo, hi, 1, body)
    }

    /// [`Self::counted_loop`] stepping by `step`; `hi - lo` must be a multiple of it.
    pub fn counted_loop_by(
        &mut self,
        var: VarId,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        step: i64,
        body: impl FnOnce(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<InstructionValue<'ctx>, CodegenError> {
        let i64t = self.ctx.i64_type();
        let guard = self.builder.get_insert_block().ok_or_else(|| self.unsupported("no insertion block"))?;
        let header = self.ctx.append_basic_block(self.function, &format!("loop{}", var.0));
        let exit = self.ctx.append_basic_block(self.function, &format!("exit{}", var.0));
        let nonempty = self.builder.build_int_compare(IntPredicate::SLT, lo, hi, "nonempty").map_err(self.err())?;
        self.builder.build_conditional_branch(nonempty, header, exit).map_err(self.err())?;
        self.builder.position_at_end(header);
        let phi = self.builder.build_phi(i64t, &format!("v{}", var.0)).map_err(self.err())?;
        let iv = phi.as_basic_value().into_int_value();
        self.vars.insert(var, iv);
        let result = body(self);
        self.vars.remove(&var);
        result?;
        // The increment cannot overflow: `iv + step <= hi <= i64::MAX`.
        let next =
            self.builder.build_int_nsw_add(iv, i64t.const_int(step as u64, false), "next").map_err(self.err())?;
        let more = self.builder.build_int_compare(IntPredicate::SLT, next, hi, "more").map_err(self.err())?;
        let latch = self.builder.get_insert_block().ok_or_else(|| self.unsupported("no insertion block"))?;
        let branch = self.builder.build_conditional_branch(more, header, exit).map_err(self.err())?;
        phi.add_incoming(&[(&lo, guard), (&next, latch)]);
        self.builder.position_at_end(exit);
        Ok(branch)
    }

    /// Declares (once per module) an external function, which must be a runtime symbol.
    pub fn external(
        &self,
        name: &str,
        ret: Option<BasicTypeEnum<'ctx>>,
        params: &[BasicMetadataTypeEnum<'ctx>],
    ) -> Result<FunctionValue<'ctx>, CodegenError> {
        if !self.symbols.contains(name) {
            return Err(self.unsupported(format!("call to '{name}', which is not a runtime symbol")));
        }
        let fn_type = match ret {
            Some(r) => r.fn_type(params, false),
            None => self.ctx.void_type().fn_type(params, false),
        };
        match self.module.get_function(name) {
            Some(f) if f.get_type() == fn_type => Ok(f),
            Some(_) => Err(self.unsupported(format!("'{name}' is called with two different signatures"))),
            None => {
                let f = self.module.add_function(name, fn_type, Some(Linkage::External));
                let nounwind = inkwell::attributes::Attribute::get_named_enum_kind_id("nounwind");
                f.add_attribute(AttributeLoc::Function, self.ctx.create_enum_attribute(nounwind, 0));
                Ok(f)
            }
        }
    }

    /// `Stmt::Call`: a runtime function returning nothing. Integers and floats pass with their
    /// register type; a `Pred` passes as a 0/1 byte (a C `bool`).
    fn call(&mut self, func: &str, args: &[CallArg]) -> Result<(), CodegenError> {
        let mut values: Vec<BasicMetadataValueEnum<'ctx>> = Vec::with_capacity(args.len());
        let mut types: Vec<BasicMetadataTypeEnum<'ctx>> = Vec::with_capacity(args.len());
        for arg in args {
            let v: BasicValueEnum<'ctx> = match arg {
                CallArg::Ptr { buf, index } => self.element_ptr(*buf, index)?.into(),
                CallArg::I64(c) => self.ctx.i64_type().const_int(*c as u64, true).into(),
                CallArg::Value(id) => {
                    let (v, ty) = self.value_any(*id)?;
                    if ty == Ty::Pred {
                        self.builder
                            .build_int_z_extend(v.into_int_value(), self.ctx.i8_type(), "bool")
                            .map_err(self.err())?
                            .into()
                    } else {
                        v
                    }
                }
            };
            types.push(v.get_type().into());
            values.push(v.into());
        }
        let f = self.external(func, None, &types)?;
        self.builder.build_call(f, &values, "").map_err(self.err())?;
        Ok(())
    }
}

/// What LLVM's loop passes may do with a scalar loop of the kernel IR.
#[derive(Clone, Copy, Debug, Default)]
struct LoopHints {
    /// `llvm.loop.unroll.disable`. A loop carrying several dependent values (an argmin's value
    /// and index, a complex accumulator) that LLVM fully unrolls becomes one long chain of
    /// compares and selects, which LLVM 22's loop vectorizer then analyses in time exponential
    /// in the chain's length (`vputils::isSingleScalar`: a 33-element argmin over a tiled
    /// layout never finished). Kept rolled, the chain is one iteration long.
    keep_rolled: bool,
    /// `llvm.loop.vectorize.enable = false`, for a grid loop that holds loops and that memory
    /// is not contiguous along. The grid loop becomes innermost to LLVM once it has fully
    /// unrolled the loops inside, and its loop vectorizer may then run the unrolled body once
    /// per grid index and lane, scalarizing every access strided by a row: a 32x40 compare
    /// kernel's grid loop became 3,000 lines of IR and half a second of compilation, for a
    /// loop that runs in microseconds. Inner loops are left to LLVM's judgement: there it
    /// finds transposes (gathers feeding contiguous stores, 1.6x faster on a tiled transpose)
    /// and small dots vectorized across their output columns (2x).
    no_vectorize: bool,
}

impl LoopHints {
    /// The hints for the grid loop over `var` of a kernel with `body`.
    fn grid(var: VarId, body: &[Stmt]) -> LoopHints {
        LoopHints {
            keep_rolled: carried_locals(body) >= 2,
            no_vectorize: holds_loop(body) && !contiguous_along(var, body),
        }
    }

    /// The hints for a scalar loop (not the grid loop) with `body`.
    fn inner(body: &[Stmt]) -> LoopHints {
        LoopHints { keep_rolled: carried_locals(body) >= 2 || divides_index(body), no_vectorize: false }
    }
}

/// Whether some load or store in `body` steps through memory by one element along `var`, and
/// none depends on `var` any other way (a stride, a division, a value computed from it).
fn contiguous_along(var: VarId, body: &[Stmt]) -> bool {
    /// Counts an access contiguous along `var` into `unit`; `None` when it depends on `var`
    /// otherwise.
    fn access(var: VarId, index: &IndexExpr, derived: &HashSet<ValueId>, unit: &mut usize) -> Option<()> {
        for t in &index.terms {
            match t.src {
                IndexSrc::Var(v) if v == var => {
                    if t.scale != 1 || t.div != 1 || t.modulo.is_some() {
                        return None;
                    }
                    *unit += 1;
                }
                IndexSrc::Value(id) if derived.contains(&id) => return None,
                _ => {}
            }
        }
        Some(())
    }
    /// Counts accesses contiguous along `var`; `None` when one depends on it otherwise.
    fn walk(var: VarId, body: &[Stmt], derived: &mut HashSet<ValueId>, unit: &mut usize) -> Option<()> {
        for s in body {
            match s {
                Stmt::Let(id, op) => {
                    let depends = match op {
                        Op::Index(index) => index.terms.iter().any(|t| match t.src {
                            IndexSrc::Var(v) => v == var,
                            IndexSrc::Value(v) => derived.contains(&v),
                        }),
                        Op::Load { index, .. } => {
                            access(var, index, derived, unit)?;
                            false
                        }
                        _ => op.operands().iter().any(|v| derived.contains(v)),
                    };
                    if depends {
                        derived.insert(*id);
                    }
                }
                Stmt::Store { index, .. } => access(var, index, derived, unit)?,
                Stmt::Loop(l) => walk(var, &l.body, derived, unit)?,
                Stmt::If { then_body, else_body, .. } => {
                    walk(var, then_body, derived, unit)?;
                    walk(var, else_body, derived, unit)?;
                }
                _ => {}
            }
        }
        Some(())
    }
    let mut unit = 0;
    walk(var, body, &mut HashSet::new(), &mut unit).is_some() && unit > 0
}

/// Whether `body` holds a loop, at any depth.
pub(super) fn holds_loop(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Loop(_) => true,
        Stmt::If { then_body, else_body, .. } => holds_loop(then_body) || holds_loop(else_body),
        _ => false,
    })
}

/// Whether `body` computes an index by a division or a remainder (`Op::Index`: a tiled
/// layout's digits of a sum of loop variables). Fully unrolled, each copy's quotient and
/// remainder is an address expression of its own, and LLVM's loop strength reduction searched
/// their combinations for 242 ms on a reduction over a tiled layout whose 7x11 inner loops it
/// had unrolled (hand_tiled_combine_reduce: 200-300 ms of compile time); kept rolled, the
/// module compiles in 17-22 ms, and the kernel runs 7.8 -> 11.4 us.
fn divides_index(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Let(_, Op::Index(index)) => index.terms.iter().any(|t| t.div != 1 || t.modulo.is_some()),
        Stmt::Loop(l) => divides_index(&l.body),
        Stmt::If { then_body, else_body, .. } => divides_index(then_body) || divides_index(else_body),
        _ => false,
    })
}

/// How many locals declared outside `body` it sets (its own loops and branches included).
fn carried_locals(body: &[Stmt]) -> usize {
    fn walk(body: &[Stmt], set: &mut HashSet<LocalId>, declared: &mut HashSet<LocalId>) {
        for s in body {
            match s {
                Stmt::SetLocal { local, .. } => {
                    set.insert(*local);
                }
                Stmt::DeclLocal { local, .. } => {
                    declared.insert(*local);
                }
                Stmt::Loop(l) => walk(&l.body, set, declared),
                Stmt::If { then_body, else_body, .. } => {
                    walk(then_body, set, declared);
                    walk(else_body, set, declared);
                }
                _ => {}
            }
        }
    }
    let (mut set, mut declared) = (HashSet::new(), HashSet::new());
    walk(body, &mut set, &mut declared);
    set.difference(&declared).count()
}
