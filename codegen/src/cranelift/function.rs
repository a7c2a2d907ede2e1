//! One kernel to one Cranelift function: the walk over statements, with SSA values, locals,
//! loop variables, loops, branches and calls. Index expressions, scalar ops, memory accesses
//! and vector loops are translated by the sibling modules through [`Translator`].

use std::collections::HashMap;

use cranelift_codegen::ir::{types, AbiParam, Block, FuncRef, InstBuilder, MemFlagsData, Type, Value};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::{Linkage, Module};
use tessera_lower::kernel::{BufId, CallArg, IndexSrc, Kernel, LocalId, Loop, Op, Stmt, Ty, ValueId, VarId};

use super::index::{Form, Partial};
use super::{Failure, Result};

/// Ids index dense tables; a kernel with ids beyond this is refused rather than allocating
/// gigabytes for one hostile id.
const MAX_ID: u32 = 1 << 24;

/// The Cranelift type holding a register type (`Pred` is an `i8` that is 0 or 1, which is what
/// `icmp`/`fcmp` produce).
pub(crate) fn cl_type(ty: Ty) -> Type {
    match ty {
        Ty::Pred | Ty::I8 => types::I8,
        Ty::I16 => types::I16,
        Ty::I32 => types::I32,
        Ty::I64 => types::I64,
        Ty::F32 => types::F32,
        Ty::F64 => types::F64,
    }
}

/// Every access the tier emits: kernels own their buffers' bytes (no traps: the lowering keeps
/// every index in bounds), but nothing promises alignment to the access size for vectors.
pub(crate) fn mem_flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

pub(crate) struct Translator<'a, 'f> {
    pub b: &'a mut FunctionBuilder<'f>,
    pub kernel: &'a Kernel,
    pub(crate) module: &'a mut dyn Module,
    symbols: &'a [&'static str],
    values: Vec<Option<(Value, Ty)>>,
    locals: Vec<Option<(Variable, Ty)>>,
    /// Each bound loop variable: its Cranelift variable and a constant added to it (a lane
    /// reduction's copy `c` runs the body at `i + c * lanes`; index expressions fold that into
    /// their address's displacement instead of computing the sum).
    vars: Vec<Option<(Variable, i64)>>,
    /// `buffers[i]`, loaded once in the entry block.
    pub bases: Vec<Value>,
    /// Parts of index expressions computed before the loops they sit in, keyed by the
    /// expression's address in the kernel (each occurrence is translated where it stands).
    pub hoisted: HashMap<usize, Partial>,
    /// For each loop variable and value folded into a part of `hoisted`, the keys of those
    /// parts: they hold that binding's value, so they go when it does (`forget_hoisted`).
    pub hoisted_by: HashMap<IndexSrc, Vec<usize>>,
    imports: HashMap<String, FuncRef>,
    /// Set while a vector body is translated as one of two halves sharing 16-bit accesses
    /// (`vector::Halves`).
    pub(crate) halves: Option<super::vector::Halves>,
    /// In a vector body: the 64-bit varying values, one scalar per lane (`vector::Plan`).
    pub(crate) wide: HashMap<ValueId, Vec<Value>>,
    /// The function's vector constants loaded from memory (`vector_consts`).
    pub(crate) consts: super::vector_consts::ConstTable,
    /// By buffer: the caller's variable that holds the buffer's one element instead of memory,
    /// and the variable's type, for a kernel translated into an entry ([`translate_inline`]).
    promoted: Vec<Option<(Variable, Type)>>,
}

fn slot<'t, T>(table: &'t mut Vec<Option<T>>, id: u32, what: &str) -> Result<&'t mut Option<T>> {
    if id >= MAX_ID {
        return Err(Failure::Unsupported(format!("{what} id {id} is beyond the tier's limit of {MAX_ID}")));
    }
    let i = id as usize;
    if i >= table.len() {
        table.resize_with(i + 1, || None);
    }
    Ok(&mut table[i])
}

/// Translates `kernel` into `ctx.func`, whose signature the caller has set to
/// `(table, grid_lo, grid_hi)`, the table holding the buffers' addresses: how the runtime and
/// every launch call a kernel (`kernel_signature`).
pub(crate) fn translate(
    kernel: &Kernel,
    module: &mut dyn Module,
    ctx: &mut Context,
    builder_ctx: &mut FunctionBuilderContext,
    symbols: &[&'static str],
) -> Result<()> {
    let expanded = expand_half_casts(kernel);
    let kernel = expanded.as_ref().unwrap_or(kernel);
    let forwarded = crate::index_forwarding::forward_kernel_indices(kernel);
    let kernel = forwarded.as_ref().unwrap_or(kernel);
    let mut b = FunctionBuilder::new(&mut ctx.func, builder_ctx);
    let mut t = Translator::new(&mut b, kernel, module, symbols);
    t.entry()?;
    let consts = std::mem::take(&mut t.consts);
    b.finalize(module.target_config());
    consts.define(module)
}

/// The kernel the tier translates in place of `kernel`, if not itself: Cranelift has no f16
/// conversion instructions (no F16C lowering on x86-64), so they become integer sequences.
pub(crate) fn expand_half_casts(kernel: &Kernel) -> Option<Kernel> {
    tessera_lower::kernel::half_casts::expand(kernel, tessera_lower::kernel::half_casts::Keep::Nothing)
}

/// Translates `kernel`, a scalar kernel (`partition::is_scalar`), into the function `b` is
/// building, at its current block, which the code continues in: the kernel's one grid point
/// runs there, on the buffers at `bases`, except that a buffer `promoted` names is the
/// caller's variable (its loads use the variable, its stores define it). The caller promotes
/// only buffers of one element that the kernel reads and writes whole, as one scalar of the
/// variable's size ([`value_buffers`]).
pub(crate) fn translate_inline(
    kernel: &Kernel,
    b: &mut FunctionBuilder<'_>,
    module: &mut dyn Module,
    symbols: &[&'static str],
    bases: Vec<Value>,
    promoted: Vec<Option<(Variable, Type)>>,
) -> Result<()> {
    let expanded = expand_half_casts(kernel);
    let kernel = expanded.as_ref().unwrap_or(kernel);
    if !crate::partition::is_scalar(kernel) {
        return Err(Failure::Malformed(format!("kernel {} is not scalar: it cannot run inline", kernel.name)));
    }
    if bases.len() != kernel.buffers.len() || promoted.len() != kernel.buffers.len() {
        return Err(Failure::Malformed(format!(
            "kernel {} has {} buffers where its caller binds {}",
            kernel.name,
            kernel.buffers.len(),
            bases.len()
        )));
    }
    if kernel.grid.extent < 1 {
        return Ok(());
    }
    let mut t = Translator::new(b, kernel, module, symbols);
    t.bases = bases;
    t.promoted = promoted;
    let var = t.b.declare_var(types::I64);
    let zero = t.b.ins().iconst(types::I64, 0);
    t.b.def_var(var, zero);
    t.bind_var(kernel.grid.var, var)?;
    t.hoist(&kernel.body)?;
    t.stmts(&kernel.body)?;
    let consts = std::mem::take(&mut t.consts);
    consts.define(module)
}

/// For each buffer of `kernel`: whether it holds one element that every access of the kernel
/// loads or stores whole, as the scalar (or predicate byte) its declaration states, and that
/// no call gets the address of. Such a buffer can live in a variable of the caller
/// ([`translate_inline`]); its size is [`element_bytes`].
pub(crate) fn value_buffers(kernel: &Kernel) -> Vec<bool> {
    fn scan(body: &[Stmt], kernel: &Kernel, ok: &mut [bool]) {
        for stmt in body {
            match stmt {
                Stmt::Let(_, Op::Load { buf, mem, .. }) | Stmt::Store { buf, mem, .. } => {
                    if let Some(k) = ok.get_mut(buf.0 as usize) {
                        *k &= kernel.buffers.get(buf.0 as usize).is_some_and(|b| b.mem == *mem);
                    }
                }
                Stmt::Call { args, .. } => {
                    for arg in args {
                        if let CallArg::Ptr { buf, .. } = arg {
                            if let Some(k) = ok.get_mut(buf.0 as usize) {
                                *k = false;
                            }
                        }
                    }
                }
                Stmt::If { then_body, else_body, .. } => {
                    scan(then_body, kernel, ok);
                    scan(else_body, kernel, ok);
                }
                Stmt::Loop(l) => scan(&l.body, kernel, ok),
                _ => {}
            }
        }
    }
    let expanded = expand_half_casts(kernel);
    let kernel = expanded.as_ref().unwrap_or(kernel);
    let mut ok: Vec<bool> = kernel.buffers.iter().map(|b| b.len == 1 && element_bytes(b.mem).is_some()).collect();
    scan(&kernel.body, kernel, &mut ok);
    ok
}

/// The bytes of one element of `mem` and the Cranelift type a load of it gives, for the
/// element types a variable can stand for.
pub(crate) fn element_bytes(mem: tessera_lower::kernel::MemType) -> Option<(u64, Type)> {
    match mem {
        tessera_lower::kernel::MemType::Pred => Some((1, types::I8)),
        tessera_lower::kernel::MemType::Scalar(ty) if ty != Ty::Pred => {
            let t = cl_type(ty);
            Some((u64::from(t.bytes()), t))
        }
        _ => None,
    }
}

impl<'a, 'f> Translator<'a, 'f> {
    fn new(
        b: &'a mut FunctionBuilder<'f>,
        kernel: &'a Kernel,
        module: &'a mut dyn Module,
        symbols: &'a [&'static str],
    ) -> Self {
        Translator {
            b,
            kernel,
            module,
            symbols,
            values: Vec::new(),
            locals: Vec::new(),
            vars: Vec::new(),
            bases: Vec::new(),
            hoisted: HashMap::new(),
            hoisted_by: HashMap::new(),
            imports: HashMap::new(),
            halves: None,
            wide: HashMap::new(),
            consts: Default::default(),
            promoted: Vec::new(),
        }
    }

    /// The variable standing for buffer `buf`, if the caller promoted it.
    pub(crate) fn promoted(&self, buf: BufId) -> Option<(Variable, Type)> {
        self.promoted.get(buf.0 as usize).copied().flatten()
    }
}

impl Translator<'_, '_> {
    /// Whether the code is for x86-64 (whose backend has instruction-level rules some
    /// translations are written for).
    pub(crate) fn is_x86_64(&self) -> bool {
        self.module.isa().name() == "x64"
    }

    fn entry(&mut self) -> Result<()> {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        self.b.seal_block(entry);
        let params = self.b.block_params(entry).to_vec();
        let [table, lo, hi] = params[..] else {
            return Err(Failure::Malformed(format!("the function has {} parameters, not 3", params.len())));
        };
        for i in 0..self.kernel.buffers.len() {
            let offset = i32::try_from(i * 8).map_err(|_| Failure::Unsupported("more than 2^28 buffers".into()))?;
            let flags = MemFlagsData::trusted().with_readonly();
            let base = self.b.ins().load(types::I64, flags, table, offset);
            self.bases.push(base);
        }
        // The grid loop: `for grid in grid_lo..grid_hi { body }`, rotated so each iteration
        // takes one branch.
        self.hoist(&self.kernel.body)?;
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let var = self.b.declare_var(types::I64);
        self.b.def_var(var, lo);
        let nonempty = self.b.ins().icmp(cranelift_codegen::ir::condcodes::IntCC::SignedLessThan, lo, hi);
        self.b.ins().brif(nonempty, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        self.bind_var(self.kernel.grid.var, var)?;
        self.stmts(&self.kernel.body)?;
        if self.kernel.grid.extent <= 1 {
            // One point at most: no back edge.
            self.b.ins().jump(exit, &[]);
        } else {
            let i = self.b.use_var(var);
            let next = self.b.ins().iadd_imm_s(i, 1);
            self.b.def_var(var, next);
            let more = self.b.ins().icmp(cranelift_codegen::ir::condcodes::IntCC::SignedLessThan, next, hi);
            self.b.ins().brif(more, body, &[], exit, &[]);
        }
        self.b.seal_block(body);
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
        self.b.ins().return_(&[]);
        Ok(())
    }

    pub(crate) fn value(&self, id: ValueId) -> Result<(Value, Ty)> {
        self.values
            .get(id.0 as usize)
            .copied()
            .flatten()
            .ok_or_else(|| Failure::Malformed(format!("value %{} is used where it is not defined", id.0)))
    }

    /// A value that must have type `ty`.
    pub(crate) fn typed(&self, id: ValueId, ty: Ty) -> Result<Value> {
        let (v, have) = self.value(id)?;
        if have != ty {
            return Err(Failure::Malformed(format!("value %{} has type {have:?} where {ty:?} is expected", id.0)));
        }
        Ok(v)
    }

    pub(crate) fn is_defined(&self, id: ValueId) -> bool {
        matches!(self.values.get(id.0 as usize), Some(Some(_)))
    }

    pub(crate) fn define(&mut self, id: ValueId, value: Value, ty: Ty) -> Result<()> {
        let s = slot(&mut self.values, id.0, "value")?;
        if s.is_some() {
            return Err(Failure::Malformed(format!("value %{} is defined twice", id.0)));
        }
        *s = Some((value, ty));
        Ok(())
    }

    pub(crate) fn undefine(&mut self, id: ValueId) {
        if let Some(s) = self.values.get_mut(id.0 as usize) {
            *s = None;
        }
        self.forget_hoisted(IndexSrc::Value(id));
    }

    /// Drops the hoisted index parts holding `src`'s value, which goes out of scope. A body
    /// translated again (a lane reduction's next copy, a loop's scalar tail) binds it anew,
    /// and a part computed for the old binding would read the old lane: the copies of a row
    /// maximum over a windowed sum all summed lane 0's window.
    pub(crate) fn forget_hoisted(&mut self, src: IndexSrc) {
        if let Some(keys) = self.hoisted_by.remove(&src) {
            for k in keys {
                self.hoisted.remove(&k);
            }
        }
    }

    pub(crate) fn var(&mut self, id: VarId) -> Result<Value> {
        let (v, offset) = self.var_parts(id)?;
        Ok(if offset == 0 { v } else { self.b.ins().iadd_imm_s(v, offset) })
    }

    /// The loop variable `id` as a value and a constant to add to it.
    pub(crate) fn var_parts(&mut self, id: VarId) -> Result<(Value, i64)> {
        match self.vars.get(id.0 as usize).copied().flatten() {
            Some((var, offset)) => Ok((self.b.use_var(var), offset)),
            None => Err(Failure::Malformed(format!("loop variable v{} is used outside its loop", id.0))),
        }
    }

    pub(crate) fn is_bound(&self, id: VarId) -> bool {
        matches!(self.vars.get(id.0 as usize), Some(Some(_)))
    }

    pub(crate) fn bind_var(&mut self, id: VarId, var: Variable) -> Result<()> {
        self.bind_var_at(id, var, 0)
    }

    /// Binds loop variable `id` to `var + offset`.
    pub(crate) fn bind_var_at(&mut self, id: VarId, var: Variable, offset: i64) -> Result<()> {
        let s = slot(&mut self.vars, id.0, "loop variable")?;
        if s.is_some() {
            return Err(Failure::Malformed(format!("loop variable v{} is bound by two enclosing loops", id.0)));
        }
        *s = Some((var, offset));
        Ok(())
    }

    pub(crate) fn unbind_var(&mut self, id: VarId) {
        if let Some(s) = self.vars.get_mut(id.0 as usize) {
            *s = None;
        }
        self.forget_hoisted(IndexSrc::Var(id));
    }

    pub(crate) fn buffer(&self, buf: BufId) -> Result<Value> {
        self.bases.get(buf.0 as usize).copied().ok_or_else(|| {
            Failure::Malformed(format!("buffer {} does not exist (the kernel has {})", buf.0, self.bases.len()))
        })
    }

    /// Translates a statement list, then ends the scope of what it declared.
    pub(crate) fn stmts(&mut self, list: &[Stmt]) -> Result<()> {
        for stmt in list {
            self.stmt(stmt)?;
        }
        for stmt in list {
            match stmt {
                Stmt::Let(id, _) => self.undefine(*id),
                Stmt::DeclLocal { local, .. } => {
                    if let Some(s) = self.locals.get_mut(local.0 as usize) {
                        *s = None;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn stmt(&mut self, stmt: &Stmt) -> Result<()> {
        match stmt {
            Stmt::Let(id, op) => {
                let (value, ty) = self.op(op)?;
                self.define(*id, value, ty)
            }
            Stmt::Loop(l) => self.translate_loop(l),
            Stmt::DeclLocal { local, ty, init } => {
                let init = self.typed(*init, *ty)?;
                let var = self.b.declare_var(cl_type(*ty));
                self.b.def_var(var, init);
                let s = slot(&mut self.locals, local.0, "local")?;
                if s.is_some() {
                    return Err(Failure::Malformed(format!("local l{} is declared twice", local.0)));
                }
                *s = Some((var, *ty));
                Ok(())
            }
            Stmt::SetLocal { local, value } => {
                let (var, ty) = self.local(*local)?;
                let v = self.typed(*value, ty)?;
                self.b.def_var(var, v);
                Ok(())
            }
            Stmt::Store { buf, index, mem, value } => self.store(*buf, index, *mem, *value),
            Stmt::If { cond, then_body, else_body } => self.branch(*cond, then_body, else_body, |t, b| t.stmts(b)),
            Stmt::Call { func, args } => self.call(func, args),
        }
    }

    pub(crate) fn local_type(&self, id: LocalId) -> Option<Ty> {
        self.locals.get(id.0 as usize).copied().flatten().map(|(_, ty)| ty)
    }

    /// Makes local `id` (declared) live in `var` from here on; returns the variable it had.
    pub(crate) fn rebind_local(&mut self, id: LocalId, var: Variable) -> Result<Variable> {
        let s = slot(&mut self.locals, id.0, "local")?;
        match s {
            Some((old, _)) => Ok(std::mem::replace(old, var)),
            None => Err(Failure::Malformed(format!("local l{} is used where it is not declared", id.0))),
        }
    }

    pub(crate) fn local(&self, id: LocalId) -> Result<(Variable, Ty)> {
        self.locals
            .get(id.0 as usize)
            .copied()
            .flatten()
            .ok_or_else(|| Failure::Malformed(format!("local l{} is used where it is not declared", id.0)))
    }

    pub(crate) fn op(&mut self, op: &Op) -> Result<(Value, Ty)> {
        match op {
            Op::Const(c) => Ok(self.constant(*c)),
            Op::Load { buf, index, mem } => self.load(*buf, index, *mem),
            Op::Index(expr) => Ok((self.index(expr, Form::Elements)?, Ty::I64)),
            Op::GetLocal(local) => {
                let (var, ty) = self.local(*local)?;
                Ok((self.b.use_var(var), ty))
            }
            Op::Unary { op, ty, a } => self.unary(*op, *ty, *a),
            Op::Binary { op, ty, a, b } => self.binary(*op, *ty, *a, *b),
            Op::Cmp { op, ty, a, b } => self.compare(*op, *ty, *a, *b),
            Op::Select { ty, cond, a, b } => self.select(*ty, *cond, *a, *b),
            Op::Fma { ty, a, b, c } => {
                if !ty.is_float() {
                    return Err(Failure::Malformed(format!("fma on {ty:?}")));
                }
                let (x, y, z) = (self.typed(*a, *ty)?, self.typed(*b, *ty)?, self.typed(*c, *ty)?);
                // A native instruction where the ISA has FMA, else Cranelift's fmaf/fma call.
                Ok((self.b.ins().fma(x, y, z), *ty))
            }
            Op::Cast { op, from, to, a } => self.cast(*op, *from, *to, *a),
            // One element at a time, "any lane" is this one.
            Op::AnyLane { a } => Ok((self.typed(*a, Ty::Pred)?, Ty::Pred)),
            Op::Math { func, ty, args } => {
                if !ty.is_float() {
                    return Err(Failure::Malformed(format!("math function {func:?} on {ty:?}")));
                }
                if args.len() != func.arity() {
                    return Err(Failure::Malformed(format!(
                        "math function {func:?} takes {} arguments, not {}",
                        func.arity(),
                        args.len()
                    )));
                }
                let args = args.iter().map(|&a| self.typed(a, *ty)).collect::<Result<Vec<_>>>()?;
                let t = cl_type(*ty);
                let results = self.call_symbol(func.symbol(*ty), &args, &vec![t; args.len()], Some(t))?;
                let value =
                    results.ok_or_else(|| Failure::Malformed(format!("the call to {func:?} returned nothing")))?;
                Ok((value, *ty))
            }
        }
    }

    fn translate_loop(&mut self, l: &Loop) -> Result<()> {
        if l.end <= l.start {
            return Ok(());
        }
        if !l.reductions.is_empty() {
            return self.lane_reduction_loop(l);
        }
        if l.vector_width > 1 && self.vector_loop(l)? {
            return Ok(());
        }
        self.hoist(&l.body)?;
        self.scalar_loop(l, l.start, l.end)
    }

    /// `for var in start..end` (non-empty, constant bounds) as a rotated loop: the body, the
    /// increment and one conditional branch back. Hoisting is the caller's job.
    pub(crate) fn scalar_loop(&mut self, l: &Loop, start: i64, end: i64) -> Result<()> {
        if end <= start {
            return Ok(());
        }
        let (var, body, exit) = self.open_rotated_loop(start);
        self.bind_var(l.var, var)?;
        self.stmts(&l.body)?;
        self.unbind_var(l.var);
        self.latch(var, 1, end, body, exit);
        Ok(())
    }

    /// Starts a rotated loop whose counter begins at `start`: returns the counter, the body
    /// block (current from here on) and the exit block [`Self::latch`] ends it with.
    pub(crate) fn open_rotated_loop(&mut self, start: i64) -> (Variable, Block, Block) {
        let var = self.b.declare_var(types::I64);
        let first = self.b.ins().iconst(types::I64, start);
        self.b.def_var(var, first);
        let body = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(body, &[]);
        self.b.switch_to_block(body);
        (var, body, exit)
    }

    /// Ends a loop body: `var += step; if var < end goto body else exit`, then continues in
    /// `exit`.
    pub(crate) fn latch(&mut self, var: Variable, step: i64, end: i64, body: Block, exit: Block) {
        let i = self.b.use_var(var);
        let next = self.b.ins().iadd_imm_s(i, step);
        self.b.def_var(var, next);
        let more = self.b.ins().icmp_imm_s(cranelift_codegen::ir::condcodes::IntCC::SignedLessThan, next, end);
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.seal_block(body);
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
    }

    /// `if cond { then_body } else { else_body }`, each branch translated by `body` (scalar
    /// statements, or a vector loop's).
    pub(crate) fn branch(
        &mut self,
        cond: ValueId,
        then_body: &[Stmt],
        else_body: &[Stmt],
        mut body: impl FnMut(&mut Self, &[Stmt]) -> Result<()>,
    ) -> Result<()> {
        let cond = self.typed(cond, Ty::Pred)?;
        let then_block = self.b.create_block();
        let merge = self.b.create_block();
        let else_block = if else_body.is_empty() { merge } else { self.b.create_block() };
        self.b.ins().brif(cond, then_block, &[], else_block, &[]);
        self.b.switch_to_block(then_block);
        self.b.seal_block(then_block);
        body(self, then_body)?;
        self.b.ins().jump(merge, &[]);
        if !else_body.is_empty() {
            self.b.switch_to_block(else_block);
            self.b.seal_block(else_block);
            body(self, else_body)?;
            self.b.ins().jump(merge, &[]);
        }
        self.b.switch_to_block(merge);
        self.b.seal_block(merge);
        Ok(())
    }

    fn call(&mut self, func: &str, args: &[CallArg]) -> Result<()> {
        let Some(&symbol) = self.symbols.iter().find(|s| **s == func) else {
            return Err(Failure::Unsupported(format!("call to '{func}', which is not a runtime symbol")));
        };
        let mut values = Vec::with_capacity(args.len());
        let mut types = Vec::with_capacity(args.len());
        for arg in args {
            let (v, t) = match arg {
                CallArg::Ptr { buf, index } => (self.pointer(*buf, index)?, types::I64),
                CallArg::I64(n) => (self.b.ins().iconst(types::I64, *n), types::I64),
                CallArg::Value(id) => {
                    let (v, ty) = self.value(*id)?;
                    (v, cl_type(ty))
                }
            };
            values.push(v);
            types.push(t);
        }
        self.call_symbol(symbol, &values, &types, None)?;
        Ok(())
    }

    /// Calls runtime symbol `name`; its Cranelift declaration follows the first use, and a
    /// later use with other types is refused rather than calling with the wrong ABI.
    pub(crate) fn call_symbol(
        &mut self,
        name: &str,
        args: &[Value],
        params: &[Type],
        ret: Option<Type>,
    ) -> Result<Option<Value>> {
        let func_ref = match self.imports.get(name) {
            Some(f) => *f,
            None => {
                let mut sig = self.module.make_signature();
                sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
                sig.returns.extend(ret.map(AbiParam::new));
                let id = self.module.declare_function(name, Linkage::Import, &sig).map_err(|e| {
                    Failure::Malformed(format!("runtime symbol '{name}' is called with two different signatures: {e}"))
                })?;
                let f = self.module.declare_func_in_func(id, self.b.func);
                self.imports.insert(name.to_string(), f);
                f
            }
        };
        let sig = self.b.func.dfg.ext_funcs[func_ref].signature;
        let declared = &self.b.func.dfg.signatures[sig];
        let same = declared.params.iter().map(|p| p.value_type).eq(params.iter().copied())
            && declared.returns.iter().map(|p| p.value_type).eq(ret.iter().copied());
        if !same {
            return Err(Failure::Malformed(format!("runtime symbol '{name}' is called with two different signatures")));
        }
        let inst = self.b.ins().call(func_ref, args);
        Ok(self.b.inst_results(inst).first().copied())
    }
}
