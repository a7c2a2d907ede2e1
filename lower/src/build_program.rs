//! Turns a module the pass pipeline has prepared (calls inlined, layouts set, fusions formed)
//! into a [`Program`]: one buffer per array value that needs storage, one kernel per
//! instruction that computes, launched in the entry's post order.
//!
//! - Parameters are `Parameter(n)` buffers, tuple parameters flattened depth-first.
//! - Constants are `Constant` buffers holding their physical bytes, made only when something
//!   reads them as a buffer; a scalar constant feeding a single-op kernel is folded into it.
//! - `tuple`, `get-tuple-element` and `opt-barrier` only alias: they build, take apart or
//!   pass on lists of buffers.
//! - Every other instruction becomes one kernel through [`emit_kernel`]: a fusion lowers its
//!   fused computation; a single op is wrapped in a computation whose parameters are its
//!   operands. Its arrays get `Temp` buffers.
//! - Results are `Result(n)` buffers, flattened depth-first, each distinct and aliasing
//!   nothing: the caller may pass any memory. A result that would be a parameter, a constant
//!   or a buffer already returned gets a copy kernel of its own.

use std::collections::{HashMap, HashSet};

use tessera_hlo::ir::AttrList;
use tessera_hlo::ir::Payload;
use tessera_hlo::{ArrayShape, Computation, InstId, Instruction, LayoutMap, Module, Opcode, Shape};

use crate::emit::rng;
use crate::emit_kernel;
use crate::kernel::verify_kernel;
use crate::program::{Buffer, BufferId, BufferKind, Launch, Program};
use crate::LowerError;

/// What an entry value is, in terms of buffers.
#[derive(Clone, Debug)]
enum Value {
    Array(BufferId),
    Tuple(Vec<Value>),
}

impl Value {
    fn leaves(&self, out: &mut Vec<BufferId>) {
        match self {
            Value::Array(b) => out.push(*b),
            Value::Tuple(elems) => elems.iter().for_each(|e| e.leaves(out)),
        }
    }
}

pub(crate) fn build_program(module: &Module, rng_seed: u64) -> Result<Program, LowerError> {
    let mut b = Builder {
        module,
        program: Program::default(),
        values: HashMap::new(),
        kernel_names: HashSet::new(),
        rng_seed,
        rng_state: None,
    };
    let entry = module.entry_comp();
    for id in entry.parameters() {
        let inst = entry.inst(id);
        let value = b.parameter_value(&inst.name, &inst.shape)?;
        b.values.insert(id, value);
    }
    for id in entry.post_order() {
        let inst = entry.inst(id);
        match inst.opcode {
            Opcode::Parameter => {}
            // Made on first use as a buffer: a folded scalar constant needs none.
            Opcode::Constant => {}
            Opcode::Tuple => {
                let elems = inst.operands.iter().map(|&o| b.value(entry, o)).collect::<Result<_, _>>()?;
                b.values.insert(id, Value::Tuple(elems));
            }
            // An optimization barrier only orders work, which a sequential program already
            // does: its value is its operand's.
            Opcode::OptimizationBarrier if inst.operands.len() == 1 => {
                let value = b.value(entry, inst.operands[0])?;
                b.values.insert(id, value);
            }
            Opcode::GetTupleElement => {
                let tuple = b.value(entry, inst.operands[0])?;
                let index = inst.attr_int("index").and_then(|i| usize::try_from(i).ok());
                let elem = match (&tuple, index) {
                    (Value::Tuple(elems), Some(i)) => elems.get(i).cloned(),
                    _ => None,
                };
                let elem = elem.ok_or_else(|| LowerError::invalid(&inst.name, "get-tuple-element out of range"))?;
                b.values.insert(id, elem);
            }
            _ => {
                let value = b.kernel_for(entry, id)?;
                b.values.insert(id, value);
            }
        }
    }
    b.init_rng_state();
    let root = b.value(entry, entry.root)?;
    let mut leaves = Vec::new();
    root.leaves(&mut leaves);
    let mut returned: HashSet<BufferId> = HashSet::new();
    for (n, leaf) in leaves.into_iter().enumerate() {
        let buf = &b.program.buffers[leaf.0 as usize];
        let own_temp = buf.kind == BufferKind::Temp && !returned.contains(&leaf);
        let result = if own_temp { leaf } else { b.copy_of(leaf)? };
        b.program.buffers[result.0 as usize].kind = BufferKind::Result(n);
        returned.insert(result);
        b.program.results.push(result);
    }
    Ok(b.program)
}

struct Builder<'m> {
    module: &'m Module,
    program: Program,
    values: HashMap<InstId, Value>,
    kernel_names: HashSet<String>,
    /// Seeds the generator state of the `rng` op.
    rng_seed: u64,
    /// The generator state `rng` draws from, once something draws.
    rng_state: Option<BufferId>,
}

/// Ops that are not data-parallel array computations: control flow, side effects, tokens
/// and communication. They never reach the kernel emitter.
fn not_a_kernel(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        While
            | Conditional
            | Call
            | CustomCall
            | Infeed
            | Outfeed
            | Send
            | SendDone
            | Recv
            | RecvDone
            | AfterAll
            | AddDependency
            | AsyncStart
            | AsyncUpdate
            | AsyncDone
            | CopyStart
            | CopyDone
            | AllGather
            | AllGatherStart
            | AllGatherDone
            | AllReduce
            | AllReduceStart
            | AllReduceDone
            | AllToAll
            | RaggedAllToAll
            | CollectiveBroadcast
            | CollectivePermute
            | CollectivePermuteStart
            | CollectivePermuteDone
            | ReduceScatter
            | Domain
            | OptimizationBarrier
            | PartitionId
            | ReplicaId
            | GetDimensionSize
            | SetDimensionSize
            | DynamicReshape
    )
}

impl Builder<'_> {
    fn add_buffer(&mut self, name: &str, shape: &Shape, kind: BufferKind) -> Result<BufferId, LowerError> {
        let array = array_of(shape, name)?;
        let map = LayoutMap::new(array)?;
        let bytes = u64::try_from(map.physical_byte_size())
            .map_err(|_| LowerError::invalid(name, format!("negative byte size for {shape}")))?;
        let memory_space = array.layout.as_ref().map_or(0, |l| l.memory_space);
        let id = BufferId(self.program.buffers.len() as u32);
        self.program.buffers.push(Buffer {
            name: name.to_string(),
            shape: array.clone(),
            bytes,
            memory_space,
            kind,
            offset: None,
        });
        Ok(id)
    }

    fn parameter_value(&mut self, name: &str, shape: &Shape) -> Result<Value, LowerError> {
        match shape {
            Shape::Tuple(elems) => {
                let mut out = Vec::with_capacity(elems.len());
                for (i, e) in elems.iter().enumerate() {
                    out.push(self.parameter_value(&format!("{name}.{i}"), e)?);
                }
                Ok(Value::Tuple(out))
            }
            _ => {
                let n = self.program.parameters.len();
                let id = self.add_buffer(name, shape, BufferKind::Parameter(n))?;
                self.program.parameters.push(id);
                Ok(Value::Array(id))
            }
        }
    }

    /// The buffers of an entry value; constants get their buffer on first use.
    fn value(&mut self, comp: &Computation, id: InstId) -> Result<Value, LowerError> {
        if let Some(v) = self.values.get(&id) {
            return Ok(v.clone());
        }
        let inst = comp.inst(id);
        let value = match &inst.payload {
            Payload::Constant(lit) if inst.opcode == Opcode::Constant => self.constant_value(&inst.name, lit)?,
            _ => return Err(LowerError::invalid(&inst.name, "used before it is computed")),
        };
        self.values.insert(id, value.clone());
        Ok(value)
    }

    fn constant_value(&mut self, name: &str, lit: &tessera_hlo::Literal) -> Result<Value, LowerError> {
        if let Some(elems) = lit.tuple_elements() {
            let mut out = Vec::with_capacity(elems.len());
            for (i, e) in elems.iter().enumerate() {
                out.push(self.constant_value(&format!("{name}.{i}"), e)?);
            }
            return Ok(Value::Tuple(out));
        }
        let bytes = lit.physical_bytes().map_err(|e| LowerError::invalid(name, format!("constant: {e}")))?.to_vec();
        Ok(Value::Array(self.add_buffer(name, lit.shape(), BufferKind::Constant(bytes))?))
    }

    fn kernel_name(&mut self, base: &str) -> String {
        let clean: String = base.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
        let clean = if clean.starts_with(|c: char| c.is_ascii_digit()) { format!("k_{clean}") } else { clean };
        let mut name = clean.clone();
        let mut k = 1;
        while !self.kernel_names.insert(name.clone()) {
            name = format!("{clean}_{k}");
            k += 1;
        }
        name
    }

    /// Lowers one computing instruction of the entry to a kernel and its launch.
    fn kernel_for(&mut self, entry: &Computation, id: InstId) -> Result<Value, LowerError> {
        let inst = entry.inst(id);
        if matches!(inst.opcode, Opcode::Rng | Opcode::RngGetAndUpdateState) {
            return self.rng_kernels(entry, id);
        }
        if not_a_kernel(inst.opcode) {
            return Err(LowerError::unsupported(
                &inst.name,
                format!("{} (control flow, side effects and communication are not lowered to kernels)", inst.opcode),
            ));
        }
        let (comp, inputs) = if inst.opcode == Opcode::Fusion {
            let called = inst.called("calls").ok_or_else(|| LowerError::invalid(&inst.name, "fusion without calls"))?;
            (self.module.comp(called).clone(), inst.operands.clone())
        } else {
            wrap_single_op(entry, id)
        };
        let mut args = Vec::with_capacity(inputs.len() + 1);
        for &o in &inputs {
            match self.value(entry, o)? {
                Value::Array(b) => args.push(b),
                Value::Tuple(_) => {
                    return Err(LowerError::unsupported(&inst.name, "a tuple-shaped operand of a kernel"));
                }
            }
        }
        let name = self.kernel_name(&inst.name);
        let kernel = checked(emit_kernel(self.module, &comp, &name)?)?;
        let value = match &inst.shape {
            Shape::Tuple(elems) => {
                let mut out = Vec::with_capacity(elems.len());
                for (i, e) in elems.iter().enumerate() {
                    if e.is_tuple() {
                        return Err(LowerError::unsupported(&inst.name, "a nested tuple result of a kernel"));
                    }
                    let b = self.add_buffer(&format!("{}.{i}", inst.name), e, BufferKind::Temp)?;
                    args.push(b);
                    out.push(Value::Array(b));
                }
                Value::Tuple(out)
            }
            shape => {
                let b = self.add_buffer(&inst.name, shape, BufferKind::Temp)?;
                args.push(b);
                Value::Array(b)
            }
        };
        // Buffers past the outputs are the kernel's private scratch (see `emit_kernel`).
        for (i, kb) in kernel.buffers.iter().enumerate().skip(args.len()) {
            let shape = scratch_shape(kb.mem, kb.len);
            let b = self.add_buffer(&format!("{}.scratch{}", inst.name, i - args.len()), &shape, BufferKind::Temp)?;
            args.push(b);
        }
        self.launch(kernel, args);
        Ok(value)
    }

    /// The program's `rng` generator state (key, counter): one `u64[2]` temp for the whole
    /// run, so every draw, in any loop or branch, continues the same stream.
    fn rng_state(&mut self) -> Result<BufferId, LowerError> {
        if let Some(s) = self.rng_state {
            return Ok(s);
        }
        let shape = Shape::array(tessera_hlo::ElementType::U64, &[rng::STATE_WORDS]);
        let s = self.add_buffer("rng_state", &shape, BufferKind::Temp)?;
        self.rng_state = Some(s);
        Ok(s)
    }

    /// `rng` (a draw kernel reading the state, then one advancing its counter) and
    /// `rng-get-and-update-state` (one kernel reading and advancing it).
    fn rng_kernels(&mut self, entry: &Computation, id: InstId) -> Result<Value, LowerError> {
        let inst = entry.inst(id);
        let state = self.rng_state()?;
        let out = self.add_buffer(&inst.name, &inst.shape, BufferKind::Temp)?;
        let name = self.kernel_name(&inst.name);
        if inst.opcode == Opcode::RngGetAndUpdateState {
            let delta = inst.attr_int("delta").ok_or_else(|| LowerError::invalid(&inst.name, "missing delta"))?;
            let map = LayoutMap::new(array_of(&inst.shape, &inst.name)?)?;
            let kernel = checked(rng::get_and_update_state_kernel(&name, &map, delta)?)?;
            self.launch(kernel, vec![state, out]);
            return Ok(Value::Array(out));
        }
        let (mut comp, inputs) = wrap_single_op(entry, id);
        let state_shape = self.program.buffers[state.0 as usize].shape.clone();
        let mut param = Instruction::new("rng_state", Opcode::Parameter, Shape::Array(state_shape), vec![]);
        param.payload = Payload::Parameter(inputs.len() as i64);
        comp.add(param);
        let mut args = Vec::with_capacity(inputs.len() + 2);
        for &o in &inputs {
            match self.value(entry, o)? {
                Value::Array(b) => args.push(b),
                Value::Tuple(_) => return Err(LowerError::invalid(&inst.name, "a tuple-shaped rng operand")),
            }
        }
        args.extend([state, out]);
        let kernel = checked(emit_kernel(self.module, &comp, &name)?)?;
        self.launch(kernel, args);
        let blocks = (rng::draw_words(inst)? + 3) / 4;
        let advance = self.kernel_name(&format!("{}_advance", inst.name));
        self.launch(checked(rng::state_advance_kernel(&advance, blocks))?, vec![state]);
        Ok(Value::Array(out))
    }

    /// Puts the launch that seeds the generator state first, when the program draws.
    fn init_rng_state(&mut self) {
        if let Some(state) = self.rng_state {
            let name = self.kernel_name("rng_state_init");
            self.program.kernels.push(rng::state_init_kernel(&name, self.rng_seed));
            let launch = Launch { kernel: self.program.kernels.len() - 1, args: vec![state] };
            self.program.launches.insert(0, launch);
        }
    }

    fn launch(&mut self, kernel: crate::kernel::Kernel, args: Vec<BufferId>) {
        self.program.kernels.push(kernel);
        self.program.launches.push(Launch { kernel: self.program.kernels.len() - 1, args });
    }

    /// A fresh buffer holding a copy of `src` (same shape and layout), written by a kernel.
    fn copy_of(&mut self, src: BufferId) -> Result<BufferId, LowerError> {
        let buf = self.program.buffers[src.0 as usize].clone();
        let shape = Shape::Array(buf.shape.clone());
        let mut comp = Computation::new(format!("copy_{}", buf.name));
        let mut param = Instruction::new("src", Opcode::Parameter, shape.clone(), vec![]);
        param.payload = Payload::Parameter(0);
        let p = comp.add(param);
        comp.root = comp.add(Instruction::new(format!("{}.copy", buf.name), Opcode::Copy, shape.clone(), vec![p]));
        let name = self.kernel_name(&format!("{}_copy", buf.name));
        let kernel = checked(emit_kernel(self.module, &comp, &name)?)?;
        let dst = self.add_buffer(&format!("{}.copy", buf.name), &shape, BufferKind::Temp)?;
        self.launch(kernel, vec![src, dst]);
        Ok(dst)
    }
}

fn array_of<'s>(shape: &'s Shape, name: &str) -> Result<&'s ArrayShape, LowerError> {
    match shape {
        Shape::Array(a) if a.is_static() => Ok(a),
        Shape::Array(_) => Err(LowerError::unsupported(name, format!("the dynamic shape {shape}"))),
        _ => Err(LowerError::unsupported(name, format!("a buffer of shape {shape}"))),
    }
}

/// A flat array that holds `len` elements of `mem`, for a kernel's scratch buffer.
fn scratch_shape(mem: crate::kernel::MemType, len: i64) -> Shape {
    use crate::kernel::{MemType, Ty};
    use tessera_hlo::ElementType as E;
    let (et, len) = match mem {
        MemType::Pred => (E::Pred, len),
        MemType::Scalar(Ty::Pred | Ty::I8) => (E::U8, len),
        MemType::Scalar(Ty::I16) => (E::U16, len),
        MemType::Scalar(Ty::I32) => (E::U32, len),
        MemType::Scalar(Ty::I64) => (E::U64, len),
        MemType::Scalar(Ty::F32) => (E::F32, len),
        MemType::Scalar(Ty::F64) => (E::F64, len),
        MemType::Packed { bits, .. } => (E::U8, (len * i64::from(bits) + 7) / 8),
    };
    Shape::array(et, &[len])
}

fn is_scalar_constant(inst: &Instruction) -> bool {
    inst.opcode == Opcode::Constant && matches!(&inst.shape, Shape::Array(a) if a.rank() == 0)
}

/// A one-instruction computation for `id`: each distinct operand is a parameter (in operand
/// order), except scalar constants, which are copied in. Returns it with the entry values
/// its parameters read.
fn wrap_single_op(entry: &Computation, id: InstId) -> (Computation, Vec<InstId>) {
    let inst = entry.inst(id);
    let mut comp = Computation::new(format!("{}_computation", inst.name));
    let mut map: HashMap<InstId, InstId> = HashMap::new();
    let mut inputs = Vec::new();
    for &o in &inst.operands {
        if map.contains_key(&o) {
            continue;
        }
        let operand = entry.inst(o);
        let new = if is_scalar_constant(operand) {
            let mut c = operand.clone();
            c.control_predecessors.clear();
            comp.add(c)
        } else {
            let mut p =
                Instruction::new(format!("param_{}", inputs.len()), Opcode::Parameter, operand.shape.clone(), vec![]);
            p.payload = Payload::Parameter(inputs.len() as i64);
            inputs.push(o);
            comp.add(p)
        };
        map.insert(o, new);
    }
    let mut clone = inst.clone();
    clone.operands = inst.operands.iter().map(|o| map[o]).collect();
    clone.control_predecessors.clear();
    // A parameter may carry the op's own name; the op is the root either way.
    if comp.find(&clone.name).is_some() {
        clone.name = comp.unique_name(&clone.name);
    }
    comp.root = comp.add(clone);
    (comp, inputs)
}

/// Every kernel leaves the lowering verified (ids, types, and indices proved inside their
/// buffers), so no tier ever compiles an access it cannot trust; a failure here is a lowering
/// bug, reported instead of run.
fn checked(kernel: crate::kernel::Kernel) -> Result<crate::kernel::Kernel, LowerError> {
    verify_kernel(&kernel).map_err(|e| LowerError::Pipeline { pass: "emit".into(), message: e.to_string() })?;
    Ok(kernel)
}
