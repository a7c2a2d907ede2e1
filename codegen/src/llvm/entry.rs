//! The LLVM tier's entry functions (see `crate::entry`): one emitter for the JIT's entry and
//! an object's, from the same [`EntryPlan`].

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::{Builder, BuilderError};
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::values::{FunctionValue, GlobalValue, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};
use tessera_lower::{Program, SelectorKind};
use tessera_runtime::entry::offsets;
use tessera_runtime::thread_pool::may_split;

use super::target::TargetCpu;
use crate::entry::plan::{self, Addr, EntryPlan, EntryStep};
use crate::entry::EntryAbi;

/// How the entry reaches what is not its own code.
pub(crate) enum Runtime<'ctx> {
    /// The runtime's `tessera_rt_launch_ctx`, `tessera_rt_copy_ctx` and `tessera_rt_host`.
    Jit { launch: FunctionValue<'ctx>, copy: FunctionValue<'ctx>, host: FunctionValue<'ctx> },
    /// The object's constants and, for a parallel entry, `tessera_rt_launch`.
    Object { launcher: Option<FunctionValue<'ctx>>, constants: Vec<GlobalValue<'ctx>> },
}

/// Declares the runtime functions an entry of `abi` calls (`constants`: an object's globals).
pub(crate) fn declare_runtime<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    abi: EntryAbi,
    constants: Vec<GlobalValue<'ctx>>,
) -> Runtime<'ctx> {
    let ptr = ctx.ptr_type(AddressSpace::default());
    let i64t = ctx.i64_type();
    let void = ctx.void_type();
    match abi {
        EntryAbi::Jit => Runtime::Jit {
            launch: module.add_function(
                "tessera_rt_launch_ctx",
                void.fn_type(&[ptr.into(), i64t.into(), ptr.into()], false),
                Some(Linkage::External),
            ),
            copy: module.add_function(
                "tessera_rt_copy_ctx",
                void.fn_type(&[ptr.into(), ptr.into(), ptr.into(), i64t.into()], false),
                Some(Linkage::External),
            ),
            host: module.add_function(
                "tessera_rt_host",
                ctx.i32_type().fn_type(&[ptr.into(), i64t.into(), ptr.into()], false),
                Some(Linkage::External),
            ),
        },
        EntryAbi::Object { parallel } => {
            // `void tessera_rt_launch(kernel, table, extent, work_bytes)` from libtessera_rt.a.
            let launcher = parallel.then(|| {
                let ty = void.fn_type(&[ptr.into(), ptr.into(), i64t.into(), i64t.into()], false);
                module.add_function("tessera_rt_launch", ty, Some(Linkage::External))
            });
            Runtime::Object { launcher, constants }
        }
    }
}

/// Adds the entry function `name` of `plan` to `module`, exported; `kernels[k]` is kernel `k`'s
/// function (defined in the module, or declared and mapped by the JIT).
pub(crate) fn translate<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    cpu: &TargetCpu,
    name: &str,
    plan: &EntryPlan,
    kernels: &[FunctionValue<'ctx>],
    runtime: &Runtime<'ctx>,
) -> Result<FunctionValue<'ctx>, String> {
    if module.get_function(name).is_some() {
        return Err(format!("the entry symbol '{name}' is taken by a kernel"));
    }
    // A JIT entry's profiled copy of the steps is a function of its own, left unoptimized:
    // it only calls into the runtime, which times each step, so optimizing it would double
    // the entry's compile time for nothing.
    let profiled = match runtime {
        Runtime::Jit { .. } => {
            let f = entry_function(ctx, module, cpu, &format!("{name}.profiled"), Linkage::Internal);
            for attr in ["noinline", "optnone"] {
                let kind = Attribute::get_named_enum_kind_id(attr);
                f.add_attribute(AttributeLoc::Function, ctx.create_enum_attribute(kind, 0));
            }
            Entry::new(ctx, runtime, f, kernels).emit(plan, Copy::Profiled)?;
            Some(f)
        }
        Runtime::Object { .. } => None,
    };
    let function = entry_function(ctx, module, cpu, name, Linkage::External);
    Entry::new(ctx, runtime, function, kernels).emit(plan, Copy::Fast { profiled })?;
    Ok(function)
}

/// An entry-shaped function, `i32(ptr, ptr, ptr)`, for the target CPU.
fn entry_function<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    cpu: &TargetCpu,
    name: &str,
    linkage: Linkage,
) -> FunctionValue<'ctx> {
    let ptr = ctx.ptr_type(AddressSpace::default());
    let fn_type = ctx.i32_type().fn_type(&[ptr.into(), ptr.into(), ptr.into()], false);
    let function = module.add_function(name, fn_type, Some(linkage));
    for (key, value) in [("target-cpu", cpu.cpu.as_str()), ("target-features", cpu.features.as_str())] {
        function.add_attribute(AttributeLoc::Function, ctx.create_string_attribute(key, value));
    }
    // Nothing the entry calls unwinds: kernels are compiled code, and `tessera_rt_host` catches
    // the host functions' panics.
    let nounwind = Attribute::get_named_enum_kind_id("nounwind");
    function.add_attribute(AttributeLoc::Function, ctx.create_enum_attribute(nounwind, 0));
    function
}

/// Which copy of the steps a function holds.
#[derive(Clone, Copy)]
enum Copy<'ctx> {
    /// Every launch and copy through the runtime, which times them (a JIT entry while
    /// profiling).
    Profiled,
    /// Launches that cannot be split called directly; `profiled`: the function a JIT entry
    /// hands a profiled run to.
    Fast { profiled: Option<FunctionValue<'ctx>> },
}

struct Entry<'a, 'ctx> {
    ctx: &'ctx Context,
    runtime: &'a Runtime<'ctx>,
    builder: Builder<'ctx>,
    function: FunctionValue<'ctx>,
    kernels: &'a [FunctionValue<'ctx>],
    /// The `args` and `results` arrays (a JIT entry loads a pointer where it uses it).
    args: Option<PointerValue<'ctx>>,
    results: Option<PointerValue<'ctx>>,
    /// An object entry's checked argument and result pointers, loaded once.
    checked: (Vec<PointerValue<'ctx>>, Vec<PointerValue<'ctx>>),
    /// Each arena's base address.
    temps: Vec<PointerValue<'ctx>>,
    /// A JIT entry's table of constant addresses.
    constants: Option<PointerValue<'ctx>>,
    /// A JIT entry's run context.
    run: Option<PointerValue<'ctx>>,
    /// The buffer table every launch and host operation fills (they run one after another).
    table: Option<PointerValue<'ctx>>,
    /// Whether the steps being emitted are the JIT entry's profiled copy (every launch and
    /// copy through the runtime, which times them).
    profiled: bool,
    /// The direct launches the fast copy has made (an i64 slot LLVM keeps in a register),
    /// added to `ctx.launches` when it returns.
    counted: Option<PointerValue<'ctx>>,
}

fn e(err: BuilderError) -> String {
    err.to_string()
}

impl<'a, 'ctx> Entry<'a, 'ctx> {
    fn new(
        ctx: &'ctx Context,
        runtime: &'a Runtime<'ctx>,
        function: FunctionValue<'ctx>,
        kernels: &'a [FunctionValue<'ctx>],
    ) -> Self {
        Entry {
            ctx,
            runtime,
            builder: ctx.create_builder(),
            function,
            kernels,
            args: None,
            results: None,
            checked: (Vec::new(), Vec::new()),
            temps: Vec::new(),
            constants: None,
            run: None,
            table: None,
            profiled: false,
            counted: None,
        }
    }

    fn emit(mut self, plan: &EntryPlan, copy: Copy<'ctx>) -> Result<(), String> {
        let block = self.ctx.append_basic_block(self.function, "entry");
        self.builder.position_at_end(block);
        let param = |i: u32| self.function.get_nth_param(i).map(|p| p.into_pointer_value()).ok_or("missing parameter");
        let (args, results, third) = (param(0)?, param(1)?, param(2)?);
        let ptr = self.ptr();
        let arity = plan::max_arity(&plan.steps);
        if arity > 0 {
            let table = self.builder.build_array_alloca(ptr, self.i64(arity as i64), "table").map_err(e)?;
            self.table = Some(table);
        }
        match self.runtime {
            Runtime::Jit { .. } => {
                // The runtime passes aligned, live buffers: nothing to check.
                self.args = Some(args);
                self.results = Some(results);
                self.run = Some(third);
                let temps = self.load_ptr(third, offsets::TEMPS as i64 / 8, "temps")?;
                for arena in 0..plan.arena_offsets.len() {
                    let base = self.load_ptr(temps, arena as i64, "arena")?;
                    self.temps.push(base);
                }
                if !plan.constants.is_empty() {
                    self.constants = Some(self.load_ptr(third, offsets::CONSTANTS as i64 / 8, "constants")?);
                }
                match copy {
                    Copy::Profiled => {
                        self.profiled = true;
                        self.steps(&plan.steps)?;
                    }
                    Copy::Fast { profiled } => {
                        // In the entry block, where LLVM promotes it to a register.
                        let i64t = self.ctx.i64_type();
                        let counted = self.builder.build_alloca(i64t, "counted").map_err(e)?;
                        self.builder.build_store(counted, i64t.const_zero()).map_err(e)?;
                        // Profiling is fixed for a run: chosen once, here.
                        if let Some(profiled) = profiled {
                            let i64t = self.ctx.i64_type();
                            let flag = self.field(third, offsets::PROFILING)?;
                            let flag = self.builder.build_load(i64t, flag, "profiling").map_err(e)?.into_int_value();
                            let on = self
                                .builder
                                .build_int_compare(IntPredicate::NE, flag, i64t.const_zero(), "on")
                                .map_err(e)?;
                            let (slow, fast) = (
                                self.ctx.append_basic_block(self.function, "profiled"),
                                self.ctx.append_basic_block(self.function, "fast"),
                            );
                            self.builder.build_conditional_branch(on, slow, fast).map_err(e)?;
                            self.builder.position_at_end(slow);
                            let code = self
                                .builder
                                .build_call(profiled, &[args.into(), results.into(), third.into()], "code")
                                .map_err(e)?
                                .try_as_basic_value()
                                .basic()
                                .ok_or("the profiled entry returns nothing")?;
                            self.builder.build_return(Some(&code)).map_err(e)?;
                            self.builder.position_at_end(fast);
                        }
                        self.counted = Some(counted);
                        self.steps(&plan.steps)?;
                    }
                }
                return self.return_code(plan::OK);
            }
            Runtime::Object { .. } => {
                // Every pointer is checked before anything runs: a bad one returns its code.
                let args = self.load_checked(args, plan.arg_bytes.len(), plan::BAD_ARGUMENT)?;
                let results = self.load_checked(results, plan.result_bytes.len(), plan::BAD_RESULT)?;
                self.checked = (args, results);
                if plan.temp_bytes > 0 {
                    self.check(third, plan::BAD_TEMP)?;
                    for &offset in &plan.arena_offsets {
                        let offset = i64::try_from(offset).map_err(|_| "temp offset overflows")?;
                        self.temps.push(self.byte_offset(third, offset)?);
                    }
                }
            }
        }
        self.steps(&plan.steps)?;
        self.return_code(plan::OK)
    }

    /// Returns `code`, first adding the fast copy's direct launches to `ctx.launches`.
    fn return_code(&mut self, code: i32) -> Result<(), String> {
        self.return_value(self.ctx.i32_type().const_int(code as u64, false))
    }

    fn return_value(&mut self, code: IntValue<'ctx>) -> Result<(), String> {
        if let (Some(counted), Some(run), false) = (self.counted, self.run, self.profiled) {
            let i64t = self.ctx.i64_type();
            let n = self.builder.build_load(i64t, counted, "counted").map_err(e)?.into_int_value();
            let field = self.field(run, offsets::LAUNCHES)?;
            let total = self.builder.build_load(i64t, field, "launches").map_err(e)?.into_int_value();
            let total = self.builder.build_int_add(total, n, "launches").map_err(e)?;
            self.builder.build_store(field, total).map_err(e)?;
        }
        self.builder.build_return(Some(&code)).map_err(e)?;
        Ok(())
    }

    fn ptr(&self) -> inkwell::types::PointerType<'ctx> {
        self.ctx.ptr_type(AddressSpace::default())
    }

    fn i64(&self, v: i64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v as u64, true)
    }

    /// The pointer at index `i` of the pointer array `array`.
    fn load_ptr(&self, array: PointerValue<'ctx>, i: i64, name: &str) -> Result<PointerValue<'ctx>, String> {
        // SAFETY: every array the entry indexes holds the index (the plan's counts; the
        // run context's layout).
        let slot = unsafe { self.builder.build_in_bounds_gep(self.ptr(), array, &[self.i64(i)], "slot") }.map_err(e)?;
        Ok(self.builder.build_load(self.ptr(), slot, name).map_err(e)?.into_pointer_value())
    }

    /// The i64 field at byte `offset` of the run context.
    fn field(&self, run: PointerValue<'ctx>, offset: i32) -> Result<PointerValue<'ctx>, String> {
        self.byte_offset(run, i64::from(offset))
    }

    fn byte_offset(&self, base: PointerValue<'ctx>, offset: i64) -> Result<PointerValue<'ctx>, String> {
        // SAFETY: the offset lies inside the object the base points to (the plan's temps, the
        // run context's fields).
        unsafe { self.builder.build_in_bounds_gep(self.ctx.i8_type(), base, &[self.i64(offset)], "at") }.map_err(e)
    }

    fn load_checked(
        &mut self,
        array: PointerValue<'ctx>,
        count: usize,
        code: i32,
    ) -> Result<Vec<PointerValue<'ctx>>, String> {
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            // The caller passes an array of `count` pointers (the header's contract).
            let p = self.load_ptr(array, i as i64, "buffer")?;
            self.check(p, code)?;
            out.push(p);
        }
        Ok(out)
    }

    /// Returns `code` unless `p` is a non-null pointer aligned to [`Program::ALIGNMENT`].
    fn check(&mut self, p: PointerValue<'ctx>, code: i32) -> Result<(), String> {
        let b = &self.builder;
        let i64t = self.ctx.i64_type();
        let bits = b.build_ptr_to_int(p, i64t, "bits").map_err(e)?;
        let low = b.build_and(bits, i64t.const_int(Program::ALIGNMENT - 1, false), "low").map_err(e)?;
        let misaligned = b.build_int_compare(IntPredicate::NE, low, i64t.const_zero(), "misaligned").map_err(e)?;
        let null = b.build_int_compare(IntPredicate::EQ, bits, i64t.const_zero(), "null").map_err(e)?;
        let bad = b.build_or(misaligned, null, "bad").map_err(e)?;
        self.return_if(bad, self.ctx.i32_type().const_int(code as u64, false))
    }

    /// Returns `code` from the entry when `cond` (an i1) holds.
    fn return_if(&mut self, cond: IntValue<'ctx>, code: IntValue<'ctx>) -> Result<(), String> {
        let fail = self.ctx.append_basic_block(self.function, "fail");
        let ok = self.ctx.append_basic_block(self.function, "ok");
        self.builder.build_conditional_branch(cond, fail, ok).map_err(e)?;
        self.builder.position_at_end(fail);
        self.return_value(code)?;
        self.builder.position_at_end(ok);
        Ok(())
    }

    fn addr(&self, a: Addr) -> Result<PointerValue<'ctx>, String> {
        let jit = matches!(self.runtime, Runtime::Jit { .. });
        Ok(match a {
            Addr::Arg(n) if jit => self.load_ptr(self.args.ok_or("no arguments")?, n as i64, "arg")?,
            Addr::Result(n) if jit => self.load_ptr(self.results.ok_or("no results")?, n as i64, "result")?,
            Addr::Arg(n) => *self.checked.0.get(n).ok_or("no such argument")?,
            Addr::Result(n) => *self.checked.1.get(n).ok_or("no such result")?,
            Addr::Temp { arena, offset } => {
                let base = *self.temps.get(arena).ok_or("a temp buffer in an arena the entry does not have")?;
                self.byte_offset(base, i64::try_from(offset).map_err(|_| "temp offset overflows")?)?
            }
            Addr::Constant(i) => match self.runtime {
                Runtime::Jit { .. } => self.load_ptr(self.constants.ok_or("no constants")?, i as i64, "constant")?,
                Runtime::Object { constants, .. } => constants.get(i).ok_or("no such constant")?.as_pointer_value(),
            },
        })
    }

    /// Stores `buffers`' addresses into the table and returns it.
    fn table(&self, buffers: &[Addr]) -> Result<PointerValue<'ctx>, String> {
        let table = self.table.unwrap_or_else(|| self.ptr().const_null());
        for (i, &a) in buffers.iter().enumerate() {
            let p = self.addr(a)?;
            // SAFETY: `i` is below the table's length (the most buffers any step binds).
            let slot = unsafe { self.builder.build_in_bounds_gep(self.ptr(), table, &[self.i64(i as i64)], "slot") }
                .map_err(e)?;
            self.builder.build_store(slot, p).map_err(e)?;
        }
        Ok(table)
    }

    fn steps(&mut self, steps: &[EntryStep]) -> Result<(), String> {
        steps.iter().try_for_each(|s| self.step(s))
    }

    /// Calls kernel `f` on `table` over the grid `0..extent`.
    fn call_kernel(&self, f: FunctionValue<'ctx>, table: PointerValue<'ctx>, extent: i64) -> Result<(), String> {
        let args = [table.into(), self.i64(0).into(), self.i64(extent).into()];
        self.builder.build_call(f, &args, "").map_err(e)?;
        Ok(())
    }

    fn step(&mut self, step: &EntryStep) -> Result<(), String> {
        match step {
            EntryStep::Launch { launch, kernel, buffers, extent, work_bytes } => {
                let table = self.table(buffers)?;
                let f = *self.kernels.get(*kernel).ok_or("no such kernel")?;
                match *self.runtime {
                    Runtime::Jit { launch: through_runtime, .. } => {
                        let run = self.run.ok_or("no run context")?;
                        if self.profiled || may_split(*extent, *work_bytes) {
                            let j = self.i64(i64::try_from(*launch).map_err(|_| "too many launches")?);
                            let args = [run.into(), j.into(), table.into()];
                            self.builder.build_call(through_runtime, &args, "").map_err(e)?;
                        } else {
                            // Too small for threads: called here, counted here.
                            let counted = self.counted.ok_or("no launch counter")?;
                            let i64t = self.ctx.i64_type();
                            let n = self.builder.build_load(i64t, counted, "counted").map_err(e)?.into_int_value();
                            let n = self.builder.build_int_add(n, i64t.const_int(1, false), "plus_one").map_err(e)?;
                            self.builder.build_store(counted, n).map_err(e)?;
                            self.call_kernel(f, table, *extent)?;
                        }
                    }
                    Runtime::Object { launcher: Some(launch), .. } => {
                        let work = i64::try_from(*work_bytes).unwrap_or(i64::MAX);
                        let kernel = f.as_global_value().as_pointer_value();
                        let args = [kernel.into(), table.into(), self.i64(*extent).into(), self.i64(work).into()];
                        self.builder.build_call(launch, &args, "").map_err(e)?;
                    }
                    Runtime::Object { launcher: None, .. } => self.call_kernel(f, table, *extent)?,
                }
            }
            EntryStep::Copy { src, dst, bytes } => {
                if *bytes == 0 {
                    return Ok(());
                }
                let (s, d) = (self.addr(*src)?, self.addr(*dst)?);
                let n = self.i64(i64::try_from(*bytes).map_err(|_| "copy size overflows")?);
                let align = Program::ALIGNMENT as u32;
                // A parameter copied into a result may be the result's own memory (donation).
                let done = match (src, dst) {
                    (Addr::Arg(_), Addr::Result(_)) => {
                        let copy = self.ctx.append_basic_block(self.function, "copy");
                        let done = self.ctx.append_basic_block(self.function, "copied");
                        let same = self.builder.build_int_compare(IntPredicate::EQ, s, d, "same").map_err(e)?;
                        self.builder.build_conditional_branch(same, done, copy).map_err(e)?;
                        self.builder.position_at_end(copy);
                        Some(done)
                    }
                    _ => None,
                };
                match *self.runtime {
                    Runtime::Jit { copy, .. } if self.profiled => {
                        let run = self.run.ok_or("no run context")?;
                        self.builder.build_call(copy, &[run.into(), d.into(), s.into(), n.into()], "").map_err(e)?;
                    }
                    _ => {
                        self.builder.build_memcpy(d, align, s, align, n).map_err(|m| m.to_string())?;
                    }
                }
                if let Some(done) = done {
                    self.builder.build_unconditional_branch(done).map_err(e)?;
                    self.builder.position_at_end(done);
                }
            }
            EntryStep::Check { check, value, equals } => {
                let p = self.addr(*value)?;
                let i32t = self.ctx.i32_type();
                let v = self.builder.build_load(i32t, p, "size").map_err(e)?.into_int_value();
                let want = i32t.const_int(*equals as u64, true);
                let bad = self.builder.build_int_compare(IntPredicate::NE, v, want, "bad_size").map_err(e)?;
                let (fail, pass) = (
                    self.ctx.append_basic_block(self.function, "bad_size"),
                    self.ctx.append_basic_block(self.function, "checked"),
                );
                self.builder.build_conditional_branch(bad, fail, pass).map_err(e)?;
                self.builder.position_at_end(fail);
                if let Some(run) = self.run {
                    let index = self.i64(i64::try_from(*check).map_err(|_| "too many checks")?);
                    self.builder.build_store(self.field(run, offsets::FAILED)?, index).map_err(e)?;
                }
                self.return_code(plan::BAD_DIMENSION_SIZE)?;
                self.builder.position_at_end(pass);
            }
            EntryStep::Host { host, buffers } => {
                let Runtime::Jit { host: callee, .. } = *self.runtime else {
                    return Err("a host operation in an entry without a host".into());
                };
                let run = self.run.ok_or("no run context")?;
                let table = self.table(buffers)?;
                let index = self.i64(i64::try_from(*host).map_err(|_| "too many host steps")?);
                let code = self
                    .builder
                    .build_call(callee, &[run.into(), index.into(), table.into()], "code")
                    .map_err(e)?
                    .try_as_basic_value()
                    .basic()
                    .ok_or("tessera_rt_host returns nothing")?
                    .into_int_value();
                let failed = self
                    .builder
                    .build_int_compare(IntPredicate::NE, code, code.get_type().const_zero(), "failed")
                    .map_err(e)?;
                self.return_if(failed, code)?;
            }
            EntryStep::While { cond, pred, body } => {
                let head = self.ctx.append_basic_block(self.function, "while_cond");
                let body_block = self.ctx.append_basic_block(self.function, "while_body");
                let exit = self.ctx.append_basic_block(self.function, "while_exit");
                self.builder.build_unconditional_branch(head).map_err(e)?;
                self.builder.position_at_end(head);
                self.steps(cond)?;
                let p = self.addr(*pred)?;
                let v = self.builder.build_load(self.ctx.i8_type(), p, "pred").map_err(e)?.into_int_value();
                let go =
                    self.builder.build_int_compare(IntPredicate::NE, v, v.get_type().const_zero(), "go").map_err(e)?;
                self.builder.build_conditional_branch(go, body_block, exit).map_err(e)?;
                self.builder.position_at_end(body_block);
                self.steps(body)?;
                self.builder.build_unconditional_branch(head).map_err(e)?;
                self.builder.position_at_end(exit);
            }
            EntryStep::Conditional { selector, kind, branches } => {
                let p = self.addr(*selector)?;
                let join = self.ctx.append_basic_block(self.function, "cond_join");
                let blocks: Vec<_> =
                    branches.iter().map(|_| self.ctx.append_basic_block(self.function, "branch")).collect();
                match kind {
                    SelectorKind::Pred => {
                        let [first, second] = blocks[..] else {
                            return Err("a pred conditional needs two branches".into());
                        };
                        let v = self.builder.build_load(self.ctx.i8_type(), p, "pred").map_err(e)?.into_int_value();
                        let c = self
                            .builder
                            .build_int_compare(IntPredicate::NE, v, v.get_type().const_zero(), "c")
                            .map_err(e)?;
                        self.builder.build_conditional_branch(c, first, second).map_err(e)?;
                    }
                    SelectorKind::S32 => {
                        let i32t = self.ctx.i32_type();
                        let v = self.builder.build_load(i32t, p, "index").map_err(e)?.into_int_value();
                        let last = *blocks.last().ok_or("a conditional without branches")?;
                        // Out of range, negative included, runs the last branch (the default).
                        let cases: Vec<_> = blocks[..blocks.len() - 1]
                            .iter()
                            .enumerate()
                            .map(|(i, &b)| (i32t.const_int(i as u64, false), b))
                            .collect();
                        self.builder.build_switch(v, last, &cases).map_err(e)?;
                    }
                }
                for (block, steps) in blocks.iter().zip(branches) {
                    self.builder.position_at_end(*block);
                    self.steps(steps)?;
                    self.builder.build_unconditional_branch(join).map_err(e)?;
                }
                self.builder.position_at_end(join);
            }
        }
        Ok(())
    }
}
