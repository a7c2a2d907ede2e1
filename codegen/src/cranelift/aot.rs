//! The Cranelift tier's object files: the kernels as local functions of an `ObjectModule`,
//! the constants as local read-only data, and the entry function that runs the
//! [`EntryPlan`] (see `crate::aot`).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, Block, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Value};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Switch};
use cranelift_module::{DataDescription, DataId, FuncId, Linkage, Module};
use cranelift_object::{ObjectBuilder, ObjectModule};
use tessera_lower::{Program, SelectorKind};

use super::{define, function, isa_builder, kernel_signature, TIER};
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
    let target_err = |message: String| CodegenError::Target { tier: TIER, message };
    let mut flags = settings::builder();
    for (name, value) in [("opt_level", "speed"), ("is_pic", "true"), ("enable_verifier", "true")] {
        flags.set(name, value).map_err(|e| target_err(format!("setting {name}={value}: {e}")))?;
    }
    let isa = isa_builder(target)?.finish(settings::Flags::new(flags)).map_err(|e| target_err(e.to_string()))?;
    let builder = ObjectBuilder::new(isa, symbol.as_bytes().to_vec(), cranelift_module::default_libcall_names())
        .map_err(|e| target_err(e.to_string()))?;
    let mut module = ObjectModule::new(builder);
    let backend = |kernel: &str, message: String| CodegenError::Backend { tier: TIER, kernel: kernel.into(), message };

    let symbols = tessera_runtime::abi::symbols().into_iter().map(|(name, _)| name).collect::<Vec<_>>();
    let sig = kernel_signature(&module);
    let mut ctx = module.make_context();
    let mut builder_ctx = FunctionBuilderContext::new();
    let mut kernels = Vec::with_capacity(program.kernels.len());
    let mut dump = options.dump_dir.as_ref().map(|dir| (dir.join("cranelift.clif"), String::new()));
    for kernel in &program.kernels {
        // Anonymous: local to the object, so kernels of several objects never clash.
        let id = module.declare_anonymous_function(&sig).map_err(|e| backend(&kernel.name, e.to_string()))?;
        module.clear_context(&mut ctx);
        ctx.func.signature = sig.clone();
        function::translate(kernel, &mut module, &mut ctx, &mut builder_ctx, &symbols)
            .map_err(|f| f.for_kernel(&kernel.name))?;
        ctx.set_disasm(dump.is_some());
        define(&mut module, id, &mut ctx).map_err(|m| backend(&kernel.name, m))?;
        if let Some((_, text)) = dump.as_mut() {
            let asm = ctx.compiled_code().and_then(|c| c.vcode.clone()).unwrap_or_default();
            text.push_str(&format!("; kernel {}\n{}\n; machine code\n{asm}\n", kernel.name, ctx.func.display()));
        }
        kernels.push(id);
    }
    if let Some((path, text)) = dump {
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("tessera: dump {}: {e}", path.display());
        }
    }

    let mut constants = Vec::with_capacity(plan.constants.len());
    for (i, bytes) in plan.constants.iter().enumerate() {
        let id = module
            .declare_data(&format!("{symbol}.const{i}"), Linkage::Local, false, false)
            .map_err(|e| backend(symbol, e.to_string()))?;
        let mut data = DataDescription::new();
        data.define(bytes.clone().into_boxed_slice());
        data.set_align(Program::ALIGNMENT);
        module.define_data(id, &data).map_err(|e| backend(symbol, e.to_string()))?;
        constants.push(id);
    }

    module.clear_context(&mut ctx);
    let ptr = module.target_config().pointer_type();
    ctx.func.signature.params.extend([AbiParam::new(ptr); 3]);
    ctx.func.signature.returns.push(AbiParam::new(types::I32));
    let entry_id = module
        .declare_function(symbol, Linkage::Export, &ctx.func.signature)
        .map_err(|e| backend(symbol, e.to_string()))?;
    // `void tessera_rt_launch(kernel, table, extent, work_bytes)` from libtessera_rt.a.
    let launcher = if options.parallel {
        let mut sig = module.make_signature();
        sig.params.extend([
            AbiParam::new(ptr),
            AbiParam::new(ptr),
            AbiParam::new(types::I64),
            AbiParam::new(types::I64),
        ]);
        let id = module
            .declare_function("tessera_rt_launch", Linkage::Import, &sig)
            .map_err(|e| backend(symbol, e.to_string()))?;
        Some(id)
    } else {
        None
    };
    {
        let b = FunctionBuilder::new(&mut ctx.func, &mut builder_ctx);
        let mut e = Entry {
            b,
            module: &mut module,
            kernels: &kernels,
            launcher,
            constants: &constants,
            args: vec![],
            results: vec![],
            temp: None,
            table: None,
        };
        e.emit(plan).map_err(|m| backend(symbol, m))?;
        let config = e.module.target_config();
        e.b.finalize(config);
    }
    define(&mut module, entry_id, &mut ctx).map_err(|m| backend(symbol, m))?;
    module.finish().emit().map_err(|e| backend(symbol, format!("writing the object: {e}")))
}

/// The entry function under construction.
struct Entry<'a, 'f> {
    b: FunctionBuilder<'f>,
    module: &'a mut ObjectModule,
    kernels: &'a [FuncId],
    /// `tessera_rt_launch`, through which a parallel entry runs every kernel.
    launcher: Option<FuncId>,
    constants: &'a [DataId],
    args: Vec<Value>,
    results: Vec<Value>,
    temp: Option<Value>,
    /// The stack slot every launch's buffer table is built in (calls are sequential).
    table: Option<cranelift_codegen::ir::StackSlot>,
}

impl Entry<'_, '_> {
    fn emit(&mut self, plan: &EntryPlan) -> Result<(), String> {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        self.b.seal_block(entry);
        let params = self.b.block_params(entry).to_vec();
        let (args, results, temp) = (params[0], params[1], params[2]);
        let arity = plan::max_arity(&plan.steps);
        if arity > 0 {
            let bytes = u32::try_from(arity * 8).map_err(|_| "a launch with too many buffers")?;
            self.table =
                Some(self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 3)));
        }
        // Every pointer is checked before anything runs: a bad one returns its code.
        self.args = self.load_checked(args, &plan.arg_bytes, plan::BAD_ARGUMENT)?;
        self.results = self.load_checked(results, &plan.result_bytes, plan::BAD_RESULT)?;
        if plan.temp_bytes > 0 {
            self.check(temp, plan::BAD_TEMP);
            self.temp = Some(temp);
        }
        self.steps(&plan.steps)?;
        let zero = self.b.ins().iconst(types::I32, i64::from(plan::OK));
        self.b.ins().return_(&[zero]);
        self.b.seal_all_blocks();
        Ok(())
    }

    /// Loads `count` pointers from the array at `array`, each checked.
    fn load_checked(&mut self, array: Value, sizes: &[u64], code: i32) -> Result<Vec<Value>, String> {
        let mut out = Vec::with_capacity(sizes.len());
        for i in 0..sizes.len() {
            let offset = i32::try_from(i * 8).map_err(|_| "too many arguments")?;
            let p = self.b.ins().load(types::I64, MemFlagsData::trusted(), array, offset);
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

    fn addr(&mut self, a: Addr) -> Result<Value, String> {
        Ok(match a {
            Addr::Arg(n) => *self.args.get(n).ok_or("no such argument")?,
            Addr::Result(n) => *self.results.get(n).ok_or("no such result")?,
            Addr::Temp(offset) => {
                let temp = self.temp.ok_or("a temp buffer in a module without temp bytes")?;
                let offset = i64::try_from(offset).map_err(|_| "temp offset overflows")?;
                self.b.ins().iadd_imm_s(temp, offset)
            }
            Addr::Constant(i) => {
                let id = *self.constants.get(i).ok_or("no such constant")?;
                let gv = self.module.declare_data_in_func(id, self.b.func);
                self.b.ins().symbol_value(types::I64, gv)
            }
        })
    }

    fn steps(&mut self, steps: &[EntryStep]) -> Result<(), String> {
        for s in steps {
            self.step(s)?;
        }
        Ok(())
    }

    fn step(&mut self, step: &EntryStep) -> Result<(), String> {
        match step {
            EntryStep::Launch { kernel, buffers, extent, work_bytes } => {
                let slot = self.table;
                for (i, &a) in buffers.iter().enumerate() {
                    let p = self.addr(a)?;
                    let slot = slot.ok_or("no buffer table")?;
                    let offset = i32::try_from(i * 8).map_err(|_| "too many buffers")?;
                    self.b.ins().stack_store(types::I64, p, slot, offset);
                }
                let table = match slot {
                    Some(s) => self.b.ins().stack_addr(types::I64, s, 0),
                    None => self.b.ins().iconst(types::I64, 0),
                };
                let id = *self.kernels.get(*kernel).ok_or("no such kernel")?;
                let f = self.module.declare_func_in_func(id, self.b.func);
                let hi = self.b.ins().iconst(types::I64, *extent);
                match self.launcher {
                    Some(launch) => {
                        let launch = self.module.declare_func_in_func(launch, self.b.func);
                        let kernel = self.b.ins().func_addr(types::I64, f);
                        let work = self.b.ins().iconst(types::I64, i64::try_from(*work_bytes).unwrap_or(i64::MAX));
                        self.b.ins().call(launch, &[kernel, table, hi, work]);
                    }
                    None => {
                        let lo = self.b.ins().iconst(types::I64, 0);
                        self.b.ins().call(f, &[table, lo, hi]);
                    }
                }
            }
            EntryStep::Copy { src, dst, bytes } => {
                let (s, d) = (self.addr(*src)?, self.addr(*dst)?);
                let n = self.b.ins().iconst(types::I64, i64::try_from(*bytes).map_err(|_| "copy size overflows")?);
                let config = self.module.target_config();
                self.b.call_memcpy(config, d, s, n);
            }
            EntryStep::Check { value, equals } => {
                let p = self.addr(*value)?;
                let v = self.b.ins().load(types::I32, MemFlagsData::trusted(), p, 0);
                let bad = self.b.ins().icmp_imm_s(IntCC::NotEqual, v, *equals);
                let fail = self.b.create_block();
                let ok = self.b.create_block();
                self.b.ins().brif(bad, fail, &[], ok, &[]);
                self.b.switch_to_block(fail);
                let c = self.b.ins().iconst(types::I32, i64::from(plan::BAD_DIMENSION_SIZE));
                self.b.ins().return_(&[c]);
                self.b.switch_to_block(ok);
            }
            EntryStep::While { cond, pred, body } => {
                let head = self.b.create_block();
                let body_block = self.b.create_block();
                let exit = self.b.create_block();
                self.b.ins().jump(head, &[]);
                self.b.switch_to_block(head);
                self.steps(cond)?;
                let p = self.addr(*pred)?;
                let v = self.b.ins().load(types::I8, MemFlagsData::trusted(), p, 0);
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
                        let v = self.b.ins().load(types::I8, MemFlagsData::trusted(), p, 0);
                        self.b.ins().brif(v, first, &[], second, &[]);
                    }
                    SelectorKind::S32 => {
                        let v = self.b.ins().load(types::I32, MemFlagsData::trusted(), p, 0);
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
