//! The LLVM tier's object files: the kernels as internal functions, the constants as private
//! read-only globals, and the entry function that runs the [`EntryPlan`] (see `crate::aot`),
//! optimized together with `default<O3>` and written for the target machine.

use std::collections::HashSet;

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::Linkage;
use inkwell::targets::FileType;
use inkwell::values::{FunctionValue, GlobalValue, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};
use tessera_lower::{Program, SelectorKind};

use super::{function, target};
use crate::aot::plan::{self, Addr, EntryPlan, EntryStep};
use crate::aot::AotOptions;
use crate::{CodegenError, ResolvedTarget};

/// The object's bytes.
pub(crate) fn object(
    program: &Program,
    plan: &EntryPlan,
    target: &ResolvedTarget,
    options: &AotOptions,
) -> Result<Vec<u8>, CodegenError> {
    let symbol = options.symbol.as_str();
    let backend = |message: String| CodegenError::Backend { tier: "llvm", kernel: symbol.to_string(), message };
    let cpu = target::target_cpu(target)?;
    let machine = cpu.object_machine()?;
    let ctx = Context::create();
    let module = ctx.create_module(symbol);
    module.set_triple(&machine.get_triple());
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    let names: HashSet<&'static str> = tessera_runtime::abi::symbols().iter().map(|(n, _)| *n).collect();
    let mut kernels = Vec::with_capacity(program.kernels.len());
    for kernel in &program.kernels {
        function::translate(&ctx, &module, &cpu, kernel, &names)?;
        let f =
            module.get_function(&kernel.name).ok_or_else(|| backend(format!("kernel '{}' vanished", kernel.name)))?;
        // Internal: kernels of several objects linked into one program never clash.
        f.set_linkage(Linkage::Internal);
        kernels.push(f);
    }
    let constants = plan
        .constants
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let g =
                module.add_global(ctx.i8_type().array_type(bytes.len() as u32), None, &format!("{symbol}.const{i}"));
            g.set_initializer(&ctx.const_string(bytes, false));
            g.set_constant(true);
            g.set_linkage(Linkage::Private);
            g.set_alignment(Program::ALIGNMENT as u32);
            g
        })
        .collect::<Vec<GlobalValue>>();

    let ptr = ctx.ptr_type(AddressSpace::default());
    let fn_type = ctx.i32_type().fn_type(&[ptr.into(), ptr.into(), ptr.into()], false);
    if module.get_function(symbol).is_some() {
        return Err(backend(format!("the entry symbol '{symbol}' is taken by a kernel")));
    }
    let function = module.add_function(symbol, fn_type, Some(Linkage::External));
    for (key, value) in [("target-cpu", cpu.cpu.as_str()), ("target-features", cpu.features.as_str())] {
        function.add_attribute(AttributeLoc::Function, ctx.create_string_attribute(key, value));
    }
    let nounwind = Attribute::get_named_enum_kind_id("nounwind");
    function.add_attribute(AttributeLoc::Function, ctx.create_enum_attribute(nounwind, 0));
    // `void tessera_rt_launch(kernel, table, extent, work_bytes)` from libtessera_rt.a.
    let launcher = options.parallel.then(|| {
        let i64t = ctx.i64_type();
        let ty = ctx.void_type().fn_type(&[ptr.into(), ptr.into(), i64t.into(), i64t.into()], false);
        module.add_function("tessera_rt_launch", ty, Some(Linkage::External))
    });
    let mut entry = Entry {
        ctx: &ctx,
        launcher,
        builder: ctx.create_builder(),
        function,
        kernels: &kernels,
        constants: &constants,
        args: Vec::new(),
        results: Vec::new(),
        temp: None,
        table: None,
    };
    entry.emit(plan).map_err(backend)?;

    module.verify().map_err(|e| backend(format!("invalid IR: {e}")))?;
    let dump = options.dump_dir.as_deref();
    super::dump_ir(&module, dump);
    module
        .run_passes("default<O3>", &machine, super::pass_options())
        .map_err(|e| backend(format!("O3 pipeline: {e}")))?;
    super::dump_optimized(&module, &machine, dump);
    let buffer = machine
        .write_to_memory_buffer(&module, FileType::Object)
        .map_err(|e| backend(format!("writing the object: {e}")))?;
    Ok(buffer.as_slice().to_vec())
}

struct Entry<'a, 'ctx> {
    ctx: &'ctx Context,
    /// `tessera_rt_launch`, through which a parallel entry runs every kernel.
    launcher: Option<FunctionValue<'ctx>>,
    builder: Builder<'ctx>,
    function: FunctionValue<'ctx>,
    kernels: &'a [FunctionValue<'ctx>],
    constants: &'a [GlobalValue<'ctx>],
    args: Vec<PointerValue<'ctx>>,
    results: Vec<PointerValue<'ctx>>,
    temp: Option<PointerValue<'ctx>>,
    /// The buffer table every launch fills (launches run one after another).
    table: Option<PointerValue<'ctx>>,
}

impl<'ctx> Entry<'_, 'ctx> {
    fn emit(&mut self, plan: &EntryPlan) -> Result<(), String> {
        let e = |err: inkwell::builder::BuilderError| err.to_string();
        let block = self.ctx.append_basic_block(self.function, "entry");
        self.builder.position_at_end(block);
        let param = |i: u32| self.function.get_nth_param(i).map(|p| p.into_pointer_value()).ok_or("missing parameter");
        let (args, results, temp) = (param(0)?, param(1)?, param(2)?);
        let arity = plan::max_arity(&plan.steps);
        if arity > 0 {
            let ptr = self.ctx.ptr_type(AddressSpace::default());
            let table = self.builder.build_array_alloca(ptr, self.i64(arity as i64), "table").map_err(e)?;
            self.table = Some(table);
        }
        // Every pointer is checked before anything runs: a bad one returns its code.
        self.args = self.load_checked(args, plan.arg_bytes.len(), plan::BAD_ARGUMENT)?;
        self.results = self.load_checked(results, plan.result_bytes.len(), plan::BAD_RESULT)?;
        if plan.temp_bytes > 0 {
            self.check(temp, plan::BAD_TEMP)?;
            self.temp = Some(temp);
        }
        self.steps(&plan.steps)?;
        let ok = self.ctx.i32_type().const_int(plan::OK as u64, false);
        self.builder.build_return(Some(&ok)).map_err(e)?;
        Ok(())
    }

    fn i64(&self, v: i64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v as u64, true)
    }

    fn load_checked(
        &mut self,
        array: PointerValue<'ctx>,
        count: usize,
        code: i32,
    ) -> Result<Vec<PointerValue<'ctx>>, String> {
        let e = |err: inkwell::builder::BuilderError| err.to_string();
        let ptr = self.ctx.ptr_type(AddressSpace::default());
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: the caller passes an array of `count` pointers (the header's contract).
            let slot =
                unsafe { self.builder.build_in_bounds_gep(ptr, array, &[self.i64(i as i64)], "slot") }.map_err(e)?;
            let p = self.builder.build_load(ptr, slot, "buffer").map_err(e)?.into_pointer_value();
            self.check(p, code)?;
            out.push(p);
        }
        Ok(out)
    }

    /// Returns `code` unless `p` is a non-null pointer aligned to [`Program::ALIGNMENT`].
    fn check(&mut self, p: PointerValue<'ctx>, code: i32) -> Result<(), String> {
        let e = |err: inkwell::builder::BuilderError| err.to_string();
        let b = &self.builder;
        let i64t = self.ctx.i64_type();
        let bits = b.build_ptr_to_int(p, i64t, "bits").map_err(e)?;
        let low = b.build_and(bits, i64t.const_int(Program::ALIGNMENT - 1, false), "low").map_err(e)?;
        let misaligned = b.build_int_compare(IntPredicate::NE, low, i64t.const_zero(), "misaligned").map_err(e)?;
        let null = b.build_int_compare(IntPredicate::EQ, bits, i64t.const_zero(), "null").map_err(e)?;
        let bad = b.build_or(misaligned, null, "bad").map_err(e)?;
        let fail = self.ctx.append_basic_block(self.function, "bad_pointer");
        let ok = self.ctx.append_basic_block(self.function, "checked");
        b.build_conditional_branch(bad, fail, ok).map_err(e)?;
        b.position_at_end(fail);
        b.build_return(Some(&self.ctx.i32_type().const_int(code as u64, false))).map_err(e)?;
        b.position_at_end(ok);
        Ok(())
    }

    fn addr(&self, a: Addr) -> Result<PointerValue<'ctx>, String> {
        Ok(match a {
            Addr::Arg(n) => *self.args.get(n).ok_or("no such argument")?,
            Addr::Result(n) => *self.results.get(n).ok_or("no such result")?,
            Addr::Temp(offset) => {
                let temp = self.temp.ok_or("a temp buffer in a module without temp bytes")?;
                let offset = i64::try_from(offset).map_err(|_| "temp offset overflows")?;
                // SAFETY: the offset lies inside the caller's TEMP_BYTES block (the plan).
                unsafe { self.builder.build_in_bounds_gep(self.ctx.i8_type(), temp, &[self.i64(offset)], "temp") }
                    .map_err(|e| e.to_string())?
            }
            Addr::Constant(i) => self.constants.get(i).ok_or("no such constant")?.as_pointer_value(),
        })
    }

    fn steps(&mut self, steps: &[EntryStep]) -> Result<(), String> {
        steps.iter().try_for_each(|s| self.step(s))
    }

    fn step(&mut self, step: &EntryStep) -> Result<(), String> {
        let e = |err: inkwell::builder::BuilderError| err.to_string();
        let ptr = self.ctx.ptr_type(AddressSpace::default());
        match step {
            EntryStep::Launch { kernel, buffers, extent, work_bytes } => {
                let table = match self.table {
                    Some(t) => t,
                    None => ptr.const_null(),
                };
                for (i, &a) in buffers.iter().enumerate() {
                    let p = self.addr(a)?;
                    // SAFETY: `i` is below the table's length (the most buffers any launch binds).
                    let slot = unsafe { self.builder.build_in_bounds_gep(ptr, table, &[self.i64(i as i64)], "slot") }
                        .map_err(e)?;
                    self.builder.build_store(slot, p).map_err(e)?;
                }
                let f = *self.kernels.get(*kernel).ok_or("no such kernel")?;
                match self.launcher {
                    Some(launch) => {
                        let work = i64::try_from(*work_bytes).unwrap_or(i64::MAX);
                        let kernel = f.as_global_value().as_pointer_value();
                        let args = [kernel.into(), table.into(), self.i64(*extent).into(), self.i64(work).into()];
                        self.builder.build_call(launch, &args, "").map_err(e)?;
                    }
                    None => {
                        let args = [table.into(), self.i64(0).into(), self.i64(*extent).into()];
                        self.builder.build_call(f, &args, "").map_err(e)?;
                    }
                }
            }
            EntryStep::Copy { src, dst, bytes } => {
                let (s, d) = (self.addr(*src)?, self.addr(*dst)?);
                let n = self.i64(i64::try_from(*bytes).map_err(|_| "copy size overflows")?);
                let align = Program::ALIGNMENT as u32;
                self.builder.build_memcpy(d, align, s, align, n).map_err(|m| m.to_string())?;
            }
            EntryStep::Check { value, equals } => {
                let p = self.addr(*value)?;
                let i32t = self.ctx.i32_type();
                let v = self.builder.build_load(i32t, p, "size").map_err(e)?.into_int_value();
                let want = i32t.const_int(*equals as u64, true);
                let ok = self.builder.build_int_compare(IntPredicate::EQ, v, want, "size_ok").map_err(e)?;
                let (pass, fail) = (
                    self.ctx.append_basic_block(self.function, "checked"),
                    self.ctx.append_basic_block(self.function, "bad_size"),
                );
                self.builder.build_conditional_branch(ok, pass, fail).map_err(e)?;
                self.builder.position_at_end(fail);
                let code = i32t.const_int(plan::BAD_DIMENSION_SIZE as u64, false);
                self.builder.build_return(Some(&code)).map_err(e)?;
                self.builder.position_at_end(pass);
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
