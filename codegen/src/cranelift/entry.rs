//! The Cranelift tier's entry functions (see `crate::entry`): one emitter for the JIT's entry
//! and an object's, from the same [`EntryPlan`].

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, Block, FuncRef, InstBuilder, MemFlagsData, Signature, StackSlotData};
use cranelift_codegen::ir::{StackSlotKind, Value};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Switch, Variable};
use cranelift_module::{DataId, FuncId, Linkage, Module};
use tessera_lower::{Program, SelectorKind};
use tessera_runtime::entry::offsets;
use tessera_runtime::thread_pool::may_split;

use super::inline::ScalarKernels;
use crate::entry::plan::{self, Addr, EntryPlan, EntryStep};
use crate::entry::EntryAbi;

/// How the entry reaches what is not its own code.
pub(crate) enum Runtime {
    /// The runtime's `tessera_rt_launch_ctx`, `tessera_rt_copy_ctx` and `tessera_rt_host`.
    Jit { launch: FuncId, copy: FuncId, host: FuncId },
    /// The object's constants and, for a parallel entry, `tessera_rt_launch`.
    Object { launcher: Option<FuncId>, constants: Vec<DataId> },
}

/// `int32_t (void*, void*, void*)`: both calling conventions' shape.
pub(crate) fn entry_signature(module: &dyn Module) -> Signature {
    let mut sig = module.make_signature();
    let ptr = module.target_config().pointer_type();
    sig.params.extend([AbiParam::new(ptr); 3]);
    sig.returns.push(AbiParam::new(types::I32));
    sig
}

/// Declares the runtime functions an entry of `abi` calls (`constants`: an object's data).
pub(crate) fn declare_runtime(
    module: &mut dyn Module,
    abi: EntryAbi,
    constants: Vec<DataId>,
) -> Result<Runtime, String> {
    let ptr = module.target_config().pointer_type();
    let mut declare = |name: &str, params: &[types::Type], returns: Option<types::Type>| {
        let mut sig = module.make_signature();
        sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        sig.returns.extend(returns.map(AbiParam::new));
        module.declare_function(name, Linkage::Import, &sig).map_err(|e| e.to_string())
    };
    Ok(match abi {
        EntryAbi::Jit => Runtime::Jit {
            launch: declare("tessera_rt_launch_ctx", &[ptr, types::I64, ptr], None)?,
            copy: declare("tessera_rt_copy_ctx", &[ptr, ptr, ptr, types::I64], None)?,
            host: declare("tessera_rt_host", &[ptr, types::I64, ptr], Some(types::I32))?,
        },
        EntryAbi::Object { parallel } => {
            // `void tessera_rt_launch(kernel, table, extent, work_bytes)` from libtessera_rt.a.
            let launcher = if parallel {
                Some(declare("tessera_rt_launch", &[ptr, ptr, types::I64, types::I64], None)?)
            } else {
                None
            };
            Runtime::Object { launcher, constants }
        }
    })
}

/// Builds the entry function of `plan` in `ctx` (signature included); `kernels[k]` is kernel
/// `k`'s function in `module`.
pub(crate) fn translate(
    plan: &EntryPlan,
    module: &mut dyn Module,
    kernels: &[FuncId],
    inlined: &ScalarKernels,
    runtime: &Runtime,
    ctx: &mut Context,
    builder_ctx: &mut FunctionBuilderContext,
) -> Result<(), String> {
    ctx.func.signature = entry_signature(module);
    let b = FunctionBuilder::new(&mut ctx.func, builder_ctx);
    let mut e = Entry {
        b,
        module,
        kernels,
        inlined,
        runtime,
        args: None,
        results: None,
        checked: (Vec::new(), Vec::new()),
        temps: Vec::new(),
        constants: None,
        run: None,
        table: None,
        profiled: false,
        counted: None,
    };
    e.emit(plan)?;
    let config = e.module.target_config();
    e.b.finalize(config);
    Ok(())
}

/// The entry function under construction.
struct Entry<'a, 'f> {
    b: FunctionBuilder<'f>,
    module: &'a mut dyn Module,
    kernels: &'a [FuncId],
    /// The copies of small scalar kernels direct calls run instead (`inline`).
    inlined: &'a ScalarKernels,
    runtime: &'a Runtime,
    /// The `args` and `results` arrays (a JIT entry loads a pointer where it uses it).
    args: Option<Value>,
    results: Option<Value>,
    /// An object entry's checked argument and result pointers, loaded once.
    checked: (Vec<Value>, Vec<Value>),
    /// Each arena's base address.
    temps: Vec<Value>,
    /// A JIT entry's table of constant addresses.
    constants: Option<Value>,
    /// A JIT entry's run context.
    run: Option<Value>,
    /// The stack slot every launch's and host operation's buffer table is built in (they run
    /// one after another).
    table: Option<cranelift_codegen::ir::StackSlot>,
    /// Whether the steps being emitted are the JIT entry's profiled copy (every launch and
    /// copy through the runtime, which times them).
    profiled: bool,
    /// The direct launches the fast copy has made, added to `ctx.launches` when it returns.
    counted: Option<Variable>,
}

fn trusted() -> MemFlagsData {
    MemFlagsData::trusted()
}

impl Entry<'_, '_> {
    fn emit(&mut self, plan: &EntryPlan) -> Result<(), String> {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        self.b.seal_block(entry);
        let params = self.b.block_params(entry).to_vec();
        let (args, results, third) = (params[0], params[1], params[2]);
        let arity = plan::max_arity(&plan.steps);
        if arity > 0 {
            let bytes = u32::try_from(arity * 8).map_err(|_| "a launch with too many buffers")?;
            self.table =
                Some(self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 3)));
        }
        match self.runtime {
            Runtime::Jit { .. } => {
                // The runtime passes aligned, live buffers: nothing to check.
                self.args = Some(args);
                self.results = Some(results);
                self.run = Some(third);
                let temps = self.b.ins().load(types::I64, trusted(), third, offsets::TEMPS);
                for arena in 0..plan.arena_offsets.len() {
                    let offset = i32::try_from(arena * 8).map_err(|_| "too many arenas")?;
                    self.temps.push(self.b.ins().load(types::I64, trusted(), temps, offset));
                }
                if !plan.constants.is_empty() {
                    self.constants = Some(self.b.ins().load(types::I64, trusted(), third, offsets::CONSTANTS));
                }
                // Profiling is fixed for a run, so the step tree is emitted twice and chosen
                // once: the fast copy has no runtime call or check a launch does not need.
                let profiling = self.b.ins().load(types::I64, trusted(), third, offsets::PROFILING);
                let (profiled, fast) = (self.b.create_block(), self.b.create_block());
                self.b.ins().brif(profiling, profiled, &[], fast, &[]);
                self.b.switch_to_block(profiled);
                self.profiled = true;
                self.steps(&plan.steps)?;
                self.return_code(plan::OK);
                self.b.switch_to_block(fast);
                self.profiled = false;
                let counted = self.b.declare_var(types::I64);
                let zero = self.b.ins().iconst(types::I64, 0);
                self.b.def_var(counted, zero);
                self.counted = Some(counted);
                self.steps(&plan.steps)?;
                self.return_code(plan::OK);
                self.b.seal_all_blocks();
                return Ok(());
            }
            Runtime::Object { .. } => {
                // Every pointer is checked before anything runs: a bad one returns its code.
                let args = self.load_checked(args, plan.arg_bytes.len(), plan::BAD_ARGUMENT)?;
                let results = self.load_checked(results, plan.result_bytes.len(), plan::BAD_RESULT)?;
                self.checked = (args, results);
                if plan.temp_bytes > 0 {
                    self.check(third, plan::BAD_TEMP);
                    for &offset in &plan.arena_offsets {
                        let offset = i64::try_from(offset).map_err(|_| "temp offset overflows")?;
                        self.temps.push(self.b.ins().iadd_imm_s(third, offset));
                    }
                }
            }
        }
        self.steps(&plan.steps)?;
        self.return_code(plan::OK);
        self.b.seal_all_blocks();
        Ok(())
    }

    /// Returns `code`, first adding the fast copy's direct launches to `ctx.launches`.
    fn return_code(&mut self, code: i32) {
        let c = self.b.ins().iconst(types::I32, i64::from(code));
        self.return_value(c);
    }

    fn return_value(&mut self, code: Value) {
        if let (Some(counted), Some(run), false) = (self.counted, self.run, self.profiled) {
            let n = self.b.use_var(counted);
            let total = self.b.ins().load(types::I64, trusted(), run, offsets::LAUNCHES);
            let total = self.b.ins().iadd(total, n);
            self.b.ins().store(trusted(), total, run, offsets::LAUNCHES);
        }
        self.b.ins().return_(&[code]);
    }

    /// Loads `count` pointers from the array at `array`, each checked.
    fn load_checked(&mut self, array: Value, count: usize, code: i32) -> Result<Vec<Value>, String> {
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let offset = i32::try_from(i * 8).map_err(|_| "too many arguments")?;
            let p = self.b.ins().load(types::I64, trusted(), array, offset);
            self.check(p, code);
            out.push(p);
        }
        Ok(out)
    }

    /// Returns `code` unless `p` is a non-null pointer aligned to [`Program::ALIGNMENT`].
    fn check(&mut self, p: Value, code: i32) {
        let mask = self.b.ins().band_imm_u(p, (Program::ALIGNMENT - 1) as i64);
        let misaligned = self.b.ins().icmp_imm_u(IntCC::NotEqual, mask, 0);
        let null = self.b.ins().icmp_imm_u(IntCC::Equal, p, 0);
        let bad = self.b.ins().bor(misaligned, null);
        let fail = self.b.create_block();
        let ok = self.b.create_block();
        self.b.ins().brif(bad, fail, &[], ok, &[]);
        self.b.switch_to_block(fail);
        let c = self.b.ins().iconst(types::I32, i64::from(code));
        self.b.ins().return_(&[c]);
        self.b.switch_to_block(ok);
    }

    /// Pointer `n` of a JIT entry's `array`.
    fn load_at(&mut self, array: Option<Value>, n: usize) -> Result<Value, String> {
        let array = array.ok_or("no pointer array")?;
        let offset = i32::try_from(n * 8).map_err(|_| "too many buffers")?;
        Ok(self.b.ins().load(types::I64, trusted(), array, offset))
    }

    fn addr(&mut self, a: Addr) -> Result<Value, String> {
        let jit = matches!(self.runtime, Runtime::Jit { .. });
        Ok(match a {
            Addr::Arg(n) if jit => self.load_at(self.args, n)?,
            Addr::Result(n) if jit => self.load_at(self.results, n)?,
            Addr::Arg(n) => *self.checked.0.get(n).ok_or("no such argument")?,
            Addr::Result(n) => *self.checked.1.get(n).ok_or("no such result")?,
            Addr::Temp { arena, offset } => {
                let base = *self.temps.get(arena).ok_or("a temp buffer in an arena the entry does not have")?;
                let offset = i64::try_from(offset).map_err(|_| "temp offset overflows")?;
                self.b.ins().iadd_imm_s(base, offset)
            }
            Addr::Constant(i) => match self.runtime {
                Runtime::Jit { .. } => self.load_at(self.constants, i)?,
                Runtime::Object { constants, .. } => {
                    let id = *constants.get(i).ok_or("no such constant")?;
                    let gv = self.module.declare_data_in_func(id, self.b.func);
                    self.b.ins().symbol_value(types::I64, gv)
                }
            },
        })
    }

    /// Stores `buffers`' addresses into the table and returns its address.
    fn table(&mut self, buffers: &[Addr]) -> Result<Value, String> {
        for (i, &a) in buffers.iter().enumerate() {
            let p = self.addr(a)?;
            let slot = self.table.ok_or("no buffer table")?;
            let offset = i32::try_from(i * 8).map_err(|_| "too many buffers")?;
            self.b.ins().stack_store(types::I64, p, slot, offset);
        }
        Ok(match self.table {
            Some(s) => self.b.ins().stack_addr(types::I64, s, 0),
            None => self.b.ins().iconst(types::I64, 0),
        })
    }

    fn kernel(&mut self, kernel: usize) -> Result<FuncRef, String> {
        let id = *self.kernels.get(kernel).ok_or("no such kernel")?;
        Ok(self.module.declare_func_in_func(id, self.b.func))
    }

    /// Runs kernel `kernel`'s whole grid here: its inlinable copy with the buffers' addresses
    /// (`inline`), or the kernel with a table of them.
    fn call(&mut self, kernel: usize, buffers: &[Addr], extent: i64) -> Result<(), String> {
        let lo = self.b.ins().iconst(types::I64, 0);
        let hi = self.b.ins().iconst(types::I64, extent);
        if let Some(copy) = self.inlined.callee(self.b.func, kernel) {
            let mut args = buffers.iter().map(|&a| self.addr(a)).collect::<Result<Vec<_>, _>>()?;
            args.extend([lo, hi]);
            self.b.ins().call(copy, &args);
        } else {
            let table = self.table(buffers)?;
            let f = self.kernel(kernel)?;
            self.b.ins().call(f, &[table, lo, hi]);
        }
        Ok(())
    }

    /// Returns `code` from the entry when `cond` is nonzero.
    fn return_if(&mut self, cond: Value, code: Value) {
        let (fail, ok) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(cond, fail, &[], ok, &[]);
        self.b.switch_to_block(fail);
        self.return_value(code);
        self.b.switch_to_block(ok);
    }

    fn steps(&mut self, steps: &[EntryStep]) -> Result<(), String> {
        steps.iter().try_for_each(|s| self.step(s))
    }

    fn step(&mut self, step: &EntryStep) -> Result<(), String> {
        match step {
            EntryStep::Launch { launch, kernel, buffers, extent, work_bytes } => {
                let launch = i64::try_from(*launch).map_err(|_| "too many launches")?;
                match *self.runtime {
                    Runtime::Jit { launch: through_runtime, .. } => {
                        let run = self.run.ok_or("no run context")?;
                        if self.profiled || may_split(*extent, *work_bytes) {
                            let table = self.table(buffers)?;
                            let callee = self.module.declare_func_in_func(through_runtime, self.b.func);
                            let j = self.b.ins().iconst(types::I64, launch);
                            self.b.ins().call(callee, &[run, j, table]);
                        } else {
                            // Too small for threads: called here, counted here.
                            let counted = self.counted.ok_or("no launch counter")?;
                            let n = self.b.use_var(counted);
                            let n = self.b.ins().iadd_imm_s(n, 1);
                            self.b.def_var(counted, n);
                            self.call(*kernel, buffers, *extent)?;
                        }
                    }
                    Runtime::Object { launcher: Some(launcher), .. } => {
                        let table = self.table(buffers)?;
                        let f = self.kernel(*kernel)?;
                        let hi = self.b.ins().iconst(types::I64, *extent);
                        let callee = self.module.declare_func_in_func(launcher, self.b.func);
                        let kernel = self.b.ins().func_addr(types::I64, f);
                        let work = self.b.ins().iconst(types::I64, i64::try_from(*work_bytes).unwrap_or(i64::MAX));
                        self.b.ins().call(callee, &[kernel, table, hi, work]);
                    }
                    Runtime::Object { launcher: None, .. } => self.call(*kernel, buffers, *extent)?,
                }
            }
            EntryStep::Copy { src, dst, bytes } => {
                if *bytes == 0 {
                    return Ok(());
                }
                let (s, d) = (self.addr(*src)?, self.addr(*dst)?);
                let n = self.b.ins().iconst(types::I64, i64::try_from(*bytes).map_err(|_| "copy size overflows")?);
                // A parameter copied into a result may be the result's own memory (donation).
                let done = match (src, dst) {
                    (Addr::Arg(_), Addr::Result(_)) => {
                        let (copy, done) = (self.b.create_block(), self.b.create_block());
                        let same = self.b.ins().icmp(IntCC::Equal, s, d);
                        self.b.ins().brif(same, done, &[], copy, &[]);
                        self.b.switch_to_block(copy);
                        Some(done)
                    }
                    _ => None,
                };
                match *self.runtime {
                    Runtime::Jit { copy, .. } if self.profiled => {
                        let run = self.run.ok_or("no run context")?;
                        let callee = self.module.declare_func_in_func(copy, self.b.func);
                        self.b.ins().call(callee, &[run, d, s, n]);
                    }
                    _ => {
                        let config = self.module.target_config();
                        self.b.call_memcpy(config, d, s, n);
                    }
                }
                if let Some(done) = done {
                    self.b.ins().jump(done, &[]);
                    self.b.switch_to_block(done);
                }
            }
            EntryStep::Check { check, value, equals } => {
                let p = self.addr(*value)?;
                let v = self.b.ins().load(types::I32, trusted(), p, 0);
                let bad = self.b.ins().icmp_imm_s(IntCC::NotEqual, v, *equals);
                let (fail, ok) = (self.b.create_block(), self.b.create_block());
                self.b.ins().brif(bad, fail, &[], ok, &[]);
                self.b.switch_to_block(fail);
                if let Some(run) = self.run {
                    let index = self.b.ins().iconst(types::I64, i64::try_from(*check).map_err(|_| "too many checks")?);
                    self.b.ins().store(trusted(), index, run, offsets::FAILED);
                }
                self.return_code(plan::BAD_DIMENSION_SIZE);
                self.b.switch_to_block(ok);
            }
            EntryStep::Host { host, buffers } => {
                let Runtime::Jit { host: callee, .. } = *self.runtime else {
                    return Err("a host operation in an entry without a host".into());
                };
                let run = self.run.ok_or("no run context")?;
                let table = self.table(buffers)?;
                let callee = self.module.declare_func_in_func(callee, self.b.func);
                let index = self.b.ins().iconst(types::I64, i64::try_from(*host).map_err(|_| "too many host steps")?);
                let call = self.b.ins().call(callee, &[run, index, table]);
                let code = self.b.inst_results(call)[0];
                self.return_if(code, code);
            }
            EntryStep::While { cond, pred, body } => {
                let head = self.b.create_block();
                let body_block = self.b.create_block();
                let exit = self.b.create_block();
                self.b.ins().jump(head, &[]);
                self.b.switch_to_block(head);
                self.steps(cond)?;
                let p = self.addr(*pred)?;
                let v = self.b.ins().load(types::I8, trusted(), p, 0);
                self.b.ins().brif(v, body_block, &[], exit, &[]);
                self.b.switch_to_block(body_block);
                self.steps(body)?;
                self.b.ins().jump(head, &[]);
                self.b.switch_to_block(exit);
            }
            EntryStep::Conditional { selector, kind, branches } => {
                let p = self.addr(*selector)?;
                let join = self.b.create_block();
                let blocks: Vec<Block> = branches.iter().map(|_| self.b.create_block()).collect();
                match kind {
                    SelectorKind::Pred => {
                        let [first, second] = blocks[..] else {
                            return Err("a pred conditional needs two branches".into());
                        };
                        let v = self.b.ins().load(types::I8, trusted(), p, 0);
                        self.b.ins().brif(v, first, &[], second, &[]);
                    }
                    SelectorKind::S32 => {
                        let v = self.b.ins().load(types::I32, trusted(), p, 0);
                        let last = *blocks.last().ok_or("a conditional without branches")?;
                        // Out of range, negative included, runs the last branch.
                        let mut switch = Switch::new();
                        for (i, &block) in blocks.iter().enumerate().take(blocks.len() - 1) {
                            switch.set_entry(i as u128, block);
                        }
                        let v = self.b.ins().uextend(types::I64, v);
                        switch.emit(&mut self.b, v, last);
                    }
                }
                for (block, steps) in blocks.iter().zip(branches) {
                    self.b.switch_to_block(*block);
                    self.steps(steps)?;
                    self.b.ins().jump(join, &[]);
                }
                self.b.switch_to_block(join);
            }
        }
        Ok(())
    }
}
