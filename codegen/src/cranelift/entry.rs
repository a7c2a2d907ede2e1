//! The Cranelift tier's entry functions (see `crate::entry`): one emitter for the JIT's entry
//! and an object's, from the same [`EntryPlan`].

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, Block, FuncRef, InstBuilder, MemFlagsData, Signature, StackSlotData};
use cranelift_codegen::ir::{StackSlotKind, Type, Value};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Switch, Variable};
use cranelift_module::{DataId, FuncId, Linkage, Module};
use std::collections::{BTreeMap, HashMap};

use tessera_lower::kernel::{Kernel, KernelBuffer, MemType};
use tessera_lower::{Program, SelectorKind};
use tessera_runtime::entry::offsets;
use tessera_runtime::thread_pool::may_split;

use super::function::{self, element_bytes, value_buffers};
use super::inline::inlinable;
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

/// The program's kernels as the entry sees them.
pub(crate) struct Kernels<'a> {
    /// `functions[k]`: kernel `k`'s function in the module.
    pub functions: &'a [FuncId],
    /// `ir[k]`: kernel `k`, which the entry translates into itself where it runs a small
    /// scalar kernel directly (`inline`).
    pub ir: &'a [Kernel],
    /// The runtime's symbols, which kernels may call.
    pub symbols: &'a [&'static str],
}

/// Builds the entry function of `plan` in `ctx` (signature included).
pub(crate) fn translate(
    plan: &EntryPlan,
    module: &mut dyn Module,
    kernels: &Kernels<'_>,
    runtime: &Runtime,
    ctx: &mut Context,
    builder_ctx: &mut FunctionBuilderContext,
) -> Result<(), String> {
    if kernels.functions.len() != kernels.ir.len() {
        return Err("the entry's kernel functions and kernels differ in number".into());
    }
    ctx.func.signature = entry_signature(module);
    let b = FunctionBuilder::new(&mut ctx.func, builder_ctx);
    let mut e = Entry {
        b,
        module,
        kernels,
        value_buffers: vec![None; kernels.ir.len()],
        slots: BTreeMap::new(),
        promote: false,
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

/// A buffer of one scalar (a temp or a result) that the entry keeps in a variable
/// (`Entry::promote_slots`).
#[derive(Clone, Copy)]
struct Slot {
    var: Variable,
    ty: Type,
    bytes: u64,
}

/// The entry function under construction.
struct Entry<'a, 'f> {
    b: FunctionBuilder<'f>,
    module: &'a mut dyn Module,
    kernels: &'a Kernels<'a>,
    /// `value_buffers` of each kernel, computed at its first inlined launch.
    value_buffers: Vec<Option<Vec<bool>>>,
    /// The slots kept in variables where `promote` is set.
    slots: BTreeMap<Addr, Slot>,
    /// Whether the steps being emitted keep `slots` in variables (the memory at such a slot
    /// is stale but for the steps that read memory, which get it written first).
    promote: bool,
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

impl<'a> Entry<'a, '_> {
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
                self.return_code(plan::OK)?;
                self.b.switch_to_block(fast);
                self.profiled = false;
                self.promote_slots(&plan.steps);
                let counted = self.b.declare_var(types::I64);
                let zero = self.b.ins().iconst(types::I64, 0);
                self.b.def_var(counted, zero);
                self.counted = Some(counted);
                self.steps(&plan.steps)?;
                self.return_code(plan::OK)?;
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
        self.promote_slots(&plan.steps);
        self.steps(&plan.steps)?;
        self.return_code(plan::OK)?;
        self.b.seal_all_blocks();
        Ok(())
    }

    /// Returns `code`, first storing the results kept in variables and adding the fast copy's
    /// direct launches to `ctx.launches`.
    fn return_code(&mut self, code: i32) -> Result<(), String> {
        let c = self.b.ins().iconst(types::I32, i64::from(code));
        self.return_value(c)
    }

    fn return_value(&mut self, code: Value) -> Result<(), String> {
        // Results kept in variables go to the caller's memory.
        let results: Vec<Addr> = self.slots.keys().copied().filter(|a| matches!(a, Addr::Result(_))).collect();
        results.into_iter().try_for_each(|a| self.spill(a))?;
        if let (Some(counted), Some(run), false) = (self.counted, self.run, self.profiled) {
            let n = self.b.use_var(counted);
            let total = self.b.ins().load(types::I64, trusted(), run, offsets::LAUNCHES);
            let total = self.b.ins().iadd(total, n);
            self.b.ins().store(trusted(), total, run, offsets::LAUNCHES);
        }
        self.b.ins().return_(&[code]);
        Ok(())
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
        let id = *self.kernels.functions.get(kernel).ok_or("no such kernel")?;
        Ok(self.module.declare_func_in_func(id, self.b.func))
    }

    fn kernel_ir(&self, kernel: usize) -> Result<&'a Kernel, String> {
        self.kernels.ir.get(kernel).ok_or_else(|| "no such kernel".to_string())
    }

    /// Whether launches of `extent` moving `work_bytes` run here, on this thread, rather than
    /// through the runtime (which may split them across threads or time them).
    fn runs_here(&self, extent: i64, work_bytes: u64) -> bool {
        match self.runtime {
            Runtime::Jit { .. } => !self.profiled && !may_split(extent, work_bytes),
            Runtime::Object { launcher, .. } => launcher.is_none(),
        }
    }

    /// Runs kernel `kernel`'s whole grid here: translated into the entry when it is a small
    /// scalar kernel (`inline`), else a call of its function with a table of the buffers.
    fn call(&mut self, kernel: usize, buffers: &[Addr], extent: i64) -> Result<(), String> {
        let ir = self.kernel_ir(kernel)?;
        if inlinable(ir) {
            return self.inline(kernel, ir, buffers);
        }
        let lo = self.b.ins().iconst(types::I64, 0);
        let hi = self.b.ins().iconst(types::I64, extent);
        self.through_memory(ir, buffers, |e| {
            let table = e.table(buffers)?;
            let f = e.kernel(kernel)?;
            e.b.ins().call(f, &[table, lo, hi]);
            Ok(())
        })
    }

    /// `kernel`'s code here, its buffers at `buffers`: a slot kept in a variable stays there
    /// where the kernel accesses it as one scalar, and goes through memory where it does not.
    fn inline(&mut self, index: usize, kernel: &'a Kernel, buffers: &[Addr]) -> Result<(), String> {
        if self.value_buffers[index].is_none() {
            self.value_buffers[index] = Some(value_buffers(kernel));
        }
        let values = self.value_buffers[index].clone().unwrap_or_default();
        // A slot bound to several buffers of the kernel stays in its variable only if each of
        // them is a value buffer (else a store to one would not be seen by a load of another).
        let in_memory: Vec<Addr> =
            buffers.iter().enumerate().filter(|&(i, _)| values.get(i) != Some(&true)).map(|(_, &a)| a).collect();
        let mut promoted = Vec::with_capacity(buffers.len());
        let mut reload = Vec::new();
        for (i, &a) in buffers.iter().enumerate() {
            let slot = self.slot(a);
            promoted.push(match slot {
                Some(s) if !in_memory.contains(&a) => Some((s.var, s.ty)),
                Some(_) => {
                    self.spill(a)?;
                    if kernel.buffers.get(i).is_none_or(|b| b.writable) {
                        reload.push(a);
                    }
                    None
                }
                None => None,
            });
        }
        let bases = buffers.iter().map(|&a| self.addr(a)).collect::<Result<Vec<_>, _>>()?;
        function::translate_inline(kernel, &mut self.b, &mut *self.module, self.kernels.symbols, bases, promoted)
            .map_err(|f| f.for_kernel(&kernel.name).to_string())?;
        reload.into_iter().try_for_each(|a| self.reload(a))
    }

    /// Runs `step`, which reads and writes `kernel`'s buffers at `buffers` in memory: the
    /// slots among them kept in variables are stored before, and those it may write loaded
    /// after.
    fn through_memory(
        &mut self,
        kernel: &Kernel,
        buffers: &[Addr],
        step: impl FnOnce(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        buffers.iter().try_for_each(|&a| self.spill(a))?;
        step(self)?;
        for (i, &a) in buffers.iter().enumerate() {
            if kernel.buffers.get(i).is_none_or(|b| b.writable) {
                self.reload(a)?;
            }
        }
        Ok(())
    }

    /// The slot at `a`, when the steps being emitted keep it in a variable.
    fn slot(&self, a: Addr) -> Option<Slot> {
        if self.promote {
            self.slots.get(&a).copied()
        } else {
            None
        }
    }

    /// Writes the variable of the slot at `a` (if kept in one) to its memory.
    fn spill(&mut self, a: Addr) -> Result<(), String> {
        if let Some(s) = self.slot(a) {
            let v = self.b.use_var(s.var);
            let p = self.addr(a)?;
            self.b.ins().store(trusted(), v, p, 0);
        }
        Ok(())
    }

    /// Loads the slot at `a` (if kept in a variable) from its memory into the variable.
    fn reload(&mut self, a: Addr) -> Result<(), String> {
        if let Some(s) = self.slot(a) {
            let p = self.addr(a)?;
            let v = self.b.ins().load(s.ty, trusted(), p, 0);
            self.b.def_var(s.var, v);
        }
        Ok(())
    }

    /// A copy of `bytes` bytes from `src` to `dst` where either is a slot kept in a variable:
    /// a definition, a store or a load. False where neither is, for a byte copy.
    fn copy_slots(&mut self, src: Addr, dst: Addr, bytes: u64) -> Result<bool, String> {
        let (s, d) = (self.slot(src).filter(|s| s.bytes == bytes), self.slot(dst).filter(|d| d.bytes == bytes));
        match (s, d) {
            (None, None) => return Ok(false),
            (Some(s), Some(d)) => {
                let v = self.b.use_var(s.var);
                let v = if s.ty == d.ty { v } else { self.b.ins().bitcast(d.ty, MemFlagsData::new(), v) };
                self.b.def_var(d.var, v);
            }
            (Some(s), None) => {
                let v = self.b.use_var(s.var);
                let p = self.addr(dst)?;
                self.b.ins().store(trusted(), v, p, 0);
            }
            (None, Some(d)) => {
                let p = self.addr(src)?;
                let v = self.b.ins().load(d.ty, trusted(), p, 0);
                self.b.def_var(d.var, v);
            }
        }
        Ok(true)
    }

    /// The scalar of `ty` at `a`: its slot's variable, or a load.
    fn read_scalar(&mut self, a: Addr, ty: Type) -> Result<Value, String> {
        match self.slot(a) {
            Some(s) if s.bytes == u64::from(ty.bytes()) => {
                let v = self.b.use_var(s.var);
                Ok(if s.ty == ty { v } else { self.b.ins().bitcast(ty, MemFlagsData::new(), v) })
            }
            _ => {
                self.spill(a)?;
                let p = self.addr(a)?;
                Ok(self.b.ins().load(ty, trusted(), p, 0))
            }
        }
    }

    /// Chooses the slots the steps keep in variables, and declares those variables: scalars
    /// that kernels translated into the entry read or write whole, at an address every step
    /// uses with one size, which no host operation touches, and that is a result or a temp no
    /// other buffer of the steps overlaps. Kernels translated into a loop then pass its state
    /// from one to the next in registers; Cranelift does not forward a store to a load across
    /// the loop's back edge, so in memory each step would wait for the last one's store.
    fn promote_slots(&mut self, steps: &[EntryStep]) {
        let mut uses = SlotUses::default();
        self.slot_uses(steps, &mut uses);
        // Per arena, every accessed range by start: the widest access there.
        let mut ranges: Vec<(usize, u64, u64)> = Vec::new();
        for (&a, sizes) in &uses.sizes {
            if let Addr::Temp { arena, offset } = a {
                let widest = sizes.iter().copied().max().unwrap_or(0);
                ranges.push((arena, offset, offset.saturating_add(widest)));
            }
        }
        // A host operation's buffer may run to the arena's end, for all the plan says.
        for &a in &uses.host {
            if let Addr::Temp { arena, offset } = a {
                if !uses.sizes.contains_key(&a) {
                    ranges.push((arena, offset, u64::MAX));
                }
            }
        }
        ranges.sort_unstable();
        // Temp addresses another access overlaps (buffer assignment shares bytes between
        // buffers that are never live at once; a slot must be one buffer's alone).
        let mut overlapped = std::collections::HashSet::new();
        // The furthest end of the ranges before this one in its arena.
        let mut reach: Option<(usize, u64)> = None;
        for (i, &(arena, offset, end)) in ranges.iter().enumerate() {
            let reaches_in = reach.is_some_and(|(ar, e)| ar == arena && e > offset);
            reach = Some(match reach {
                Some((ar, e)) if ar == arena => (arena, e.max(end)),
                _ => (arena, end),
            });
            // Ranges are sorted by start, and starts in an arena differ: only the next can.
            let starts_inside = ranges.get(i + 1).is_some_and(|&(ar, start, _)| ar == arena && start < end);
            if reaches_in || starts_inside {
                overlapped.insert(Addr::Temp { arena, offset });
            }
        }
        let mut slots = BTreeMap::new();
        for (&a, types) in &uses.types {
            // A result is the caller's memory, apart from any other; it is stored before
            // the entry returns (`return_value`).
            let own = match a {
                Addr::Temp { .. } => !overlapped.contains(&a),
                Addr::Result(_) => true,
                Addr::Arg(_) | Addr::Constant(_) => false,
            };
            let Some([bytes]) = uses.sizes.get(&a).map(Vec::as_slice) else { continue };
            if !own || uses.host.contains(&a) {
                continue;
            }
            let Some(int) = Type::int(u16::try_from(bytes * 8).unwrap_or(0)) else { continue };
            let ty = match types.as_slice() {
                [one] if u64::from(one.bytes()) == *bytes => *one,
                _ => int,
            };
            let var = self.b.declare_var(ty);
            slots.insert(a, Slot { var, ty, bytes: *bytes });
        }
        self.slots = slots;
        self.promote = true;
    }

    /// Records how `steps`, as this entry runs them, use temps and results.
    fn slot_uses(&mut self, steps: &[EntryStep], uses: &mut SlotUses) {
        for step in steps {
            match step {
                EntryStep::Launch { kernel, buffers, extent, work_bytes, .. } => {
                    let Ok(ir) = self.kernel_ir(*kernel) else { continue };
                    let inlined = self.runs_here(*extent, *work_bytes) && inlinable(ir);
                    if inlined && self.value_buffers[*kernel].is_none() {
                        self.value_buffers[*kernel] = Some(value_buffers(ir));
                    }
                    let values = if inlined { self.value_buffers[*kernel].as_deref() } else { None };
                    for (i, (&a, b)) in buffers.iter().zip(&ir.buffers).enumerate() {
                        uses.size(a, buffer_bytes(b));
                        if values.is_some_and(|v| v.get(i) == Some(&true)) {
                            if let Some((_, ty)) = element_bytes(b.mem) {
                                uses.typed(a, ty);
                            }
                        }
                    }
                }
                EntryStep::Copy { src, dst, bytes } => {
                    uses.size(*src, *bytes);
                    uses.size(*dst, *bytes);
                }
                EntryStep::Check { value, .. } => uses.size(*value, 4),
                EntryStep::While { cond, pred, body } => {
                    uses.size(*pred, 1);
                    self.slot_uses(cond, uses);
                    self.slot_uses(body, uses);
                }
                EntryStep::Conditional { selector, kind, branches } => {
                    uses.size(*selector, if *kind == SelectorKind::Pred { 1 } else { 4 });
                    branches.iter().for_each(|b| self.slot_uses(b, uses));
                }
                EntryStep::Host { buffers, .. } => uses.host.extend(buffers.iter().copied()),
            }
        }
    }

    /// Returns `code` from the entry when `cond` is nonzero.
    fn return_if(&mut self, cond: Value, code: Value) -> Result<(), String> {
        let (fail, ok) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(cond, fail, &[], ok, &[]);
        self.b.switch_to_block(fail);
        self.return_value(code)?;
        self.b.switch_to_block(ok);
        Ok(())
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
                        if !self.runs_here(*extent, *work_bytes) {
                            let ir = self.kernel_ir(*kernel)?;
                            self.through_memory(ir, buffers, |e| {
                                let table = e.table(buffers)?;
                                let callee = e.module.declare_func_in_func(through_runtime, e.b.func);
                                let j = e.b.ins().iconst(types::I64, launch);
                                e.b.ins().call(callee, &[run, j, table]);
                                Ok(())
                            })?;
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
                if self.copy_slots(*src, *dst, *bytes)? {
                    return Ok(());
                }
                self.spill(*src)?;
                let (s, d) = (self.addr(*src)?, self.addr(*dst)?);
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
                        let n = i64::try_from(*bytes).map_err(|_| "copy size overflows")?;
                        let n = self.b.ins().iconst(types::I64, n);
                        self.b.ins().call(callee, &[run, d, s, n]);
                    }
                    _ => {
                        // Up to 32 bytes (a scalar of loop state kept in memory) move with a
                        // few loads and stores, not the memcpy call `call_memcpy` makes for
                        // any size.
                        let config = self.module.target_config();
                        let flags = MemFlagsData::new().with_notrap();
                        self.b.emit_small_memory_copy(config, d, s, *bytes, 1, 1, true, flags);
                    }
                }
                if let Some(done) = done {
                    self.b.ins().jump(done, &[]);
                    self.b.switch_to_block(done);
                }
                self.reload(*dst)?;
            }
            EntryStep::Check { check, value, equals } => {
                let v = self.read_scalar(*value, types::I32)?;
                let bad = self.b.ins().icmp_imm_s(IntCC::NotEqual, v, *equals);
                let (fail, ok) = (self.b.create_block(), self.b.create_block());
                self.b.ins().brif(bad, fail, &[], ok, &[]);
                self.b.switch_to_block(fail);
                if let Some(run) = self.run {
                    let index = self.b.ins().iconst(types::I64, i64::try_from(*check).map_err(|_| "too many checks")?);
                    self.b.ins().store(trusted(), index, run, offsets::FAILED);
                }
                self.return_code(plan::BAD_DIMENSION_SIZE)?;
                self.b.switch_to_block(ok);
            }
            EntryStep::Host { host, buffers } => {
                let Runtime::Jit { host: callee, .. } = *self.runtime else {
                    return Err("a host operation in an entry without a host".into());
                };
                let run = self.run.ok_or("no run context")?;
                // (No slot a host operation touches is kept in a variable.)
                let table = self.table(buffers)?;
                let callee = self.module.declare_func_in_func(callee, self.b.func);
                let index = self.b.ins().iconst(types::I64, i64::try_from(*host).map_err(|_| "too many host steps")?);
                let call = self.b.ins().call(callee, &[run, index, table]);
                let code = self.b.inst_results(call)[0];
                self.return_if(code, code)?;
            }
            EntryStep::While { cond, pred, body } => {
                let head = self.b.create_block();
                let body_block = self.b.create_block();
                let exit = self.b.create_block();
                self.b.ins().jump(head, &[]);
                self.b.switch_to_block(head);
                self.steps(cond)?;
                let v = self.read_scalar(*pred, types::I8)?;
                self.b.ins().brif(v, body_block, &[], exit, &[]);
                self.b.switch_to_block(body_block);
                self.steps(body)?;
                self.b.ins().jump(head, &[]);
                self.b.switch_to_block(exit);
            }
            EntryStep::Conditional { selector, kind, branches } => {
                let join = self.b.create_block();
                let blocks: Vec<Block> = branches.iter().map(|_| self.b.create_block()).collect();
                match kind {
                    SelectorKind::Pred => {
                        let [first, second] = blocks[..] else {
                            return Err("a pred conditional needs two branches".into());
                        };
                        let v = self.read_scalar(*selector, types::I8)?;
                        self.b.ins().brif(v, first, &[], second, &[]);
                    }
                    SelectorKind::S32 => {
                        let v = self.read_scalar(*selector, types::I32)?;
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

/// How a plan's steps use temp and result addresses (`Entry::promote_slots`).
#[derive(Default)]
struct SlotUses {
    /// The sizes each address is accessed with.
    sizes: HashMap<Addr, Vec<u64>>,
    /// The types kernels translated into the entry load and store whole at each address (in
    /// address order, so that variables are declared in the same order every compile).
    types: BTreeMap<Addr, Vec<Type>>,
    /// Addresses a host operation touches.
    host: std::collections::HashSet<Addr>,
}

impl SlotUses {
    fn size(&mut self, a: Addr, bytes: u64) {
        if matches!(a, Addr::Temp { .. } | Addr::Result(_)) {
            let sizes = self.sizes.entry(a).or_default();
            if !sizes.contains(&bytes) {
                sizes.push(bytes);
            }
        }
    }

    fn typed(&mut self, a: Addr, ty: Type) {
        if matches!(a, Addr::Temp { .. } | Addr::Result(_)) {
            let types = self.types.entry(a).or_default();
            if !types.contains(&ty) {
                types.push(ty);
            }
        }
    }
}

/// The bytes of a kernel's buffer.
fn buffer_bytes(b: &KernelBuffer) -> u64 {
    let len = u64::try_from(b.len).unwrap_or(0);
    match b.mem {
        MemType::Pred => len,
        MemType::Scalar(ty) => len.saturating_mul(u64::from(super::function::cl_type(ty).bytes())),
        MemType::Packed { bits, .. } => len.saturating_mul(u64::from(bits)).div_ceil(8),
    }
}
