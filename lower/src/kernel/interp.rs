//! The kernel IR's reference interpreter: runs a [`Kernel`] (or a whole [`Program`]) on byte
//! buffers with exactly the semantics documented on each op in `kernel/mod.rs`, so the
//! lowering can be tested against `hlo::eval` without a JIT tier and the tiers can be tested
//! against it.
//!
//! Floats are computed natively in their own width (f32 in f32, never via f64), and math
//! functions call the same libm symbols [`MathFn::symbol`] names, so results match machine
//! code bit for bit. Two places where machine code may legitimately differ: the payload of a
//! NaN produced by `FMax`/`FMin` (the contract only says it is a NaN), and the runtime GEMM and
//! convolution, which here sum in order with separate multiply and add (the convolution in
//! f64) while a tuned micro-kernel blocks and fuses; float results are compared within
//! tolerance there.
//!
//! A kernel is verified first, then compiled once into a tree with every value, local and
//! variable resolved to a slot of a flat register file. Registers hold a value's bits in a
//! `u64`: integers sign-extended from their width, `Pred` as 0 or 1, floats as their bits.
//! Anything a bad kernel could do wrong at run time (an out-of-range data-dependent index,
//! integer division by zero, an oversized shift, a call the interpreter does not know) is a
//! [`KernelRunError`], never a panic or an out-of-bounds access.

use std::collections::HashMap;

#[path = "interp_conv.rs"]
mod conv;

use super::verify::{verify_kernel, KernelVerifyError};
use super::*;
use crate::program::{BufferKind, HostOp, HostValue, Program, SelectorKind, Step};
use tessera_hlo::eval::EvalOptions;
use tessera_hlo::{Literal, Shape};

/// Why a kernel or program could not run to completion.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum KernelRunError {
    #[error("{0}")]
    Verify(#[from] KernelVerifyError),
    /// The buffers handed in do not fit the kernel, or a call's arguments do not fit its
    /// function.
    #[error("kernel '{kernel}': {message}")]
    Setup { kernel: String, message: String },
    #[error("kernel '{kernel}' calls '{func}', which the interpreter does not implement")]
    UnknownFunction { kernel: String, func: String },
    /// A statement failed at run time.
    #[error("kernel '{kernel}', grid index {grid}, at `{stmt}`: {fault}")]
    Fault { kernel: String, grid: i64, stmt: String, fault: Fault },
    /// The program's buffer table, launches or arguments are inconsistent.
    #[error("program: {0}")]
    Program(String),
}

/// What went wrong at run time (see [`KernelRunError::Fault`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    #[error("index {index} is outside buffer b{buf} of {len} elements")]
    OutOfBounds { buf: u32, index: i64, len: i64 },
    #[error("index source %{value} is {x}, negative under / or %")]
    NegativeIndexSource { value: u32, x: i64 },
    #[error("index arithmetic overflows i64")]
    IndexOverflow,
    #[error("integer division by zero")]
    DivisionByZero,
    #[error("signed division overflow (MIN / -1)")]
    DivisionOverflow,
    #[error("shift by {amount} is not below the bit width {bits}")]
    ShiftOutOfRange { amount: u64, bits: u32 },
    #[error("{0}")]
    Call(String),
}

/// Runs `kernel` for every grid index, `buffers[i]` being its buffer `i` (at least as many
/// bytes as the buffer's physical size).
pub fn run_kernel(kernel: &Kernel, buffers: &mut [&mut [u8]]) -> Result<(), KernelRunError> {
    let compiled = Compiled::new(kernel)?;
    let map: Vec<usize> = (0..kernel.buffers.len()).collect();
    compiled.run(buffers, &map)
}

/// Runs `program` on `args` (entry parameters in order, each exactly its buffer's bytes) and
/// returns the result buffers' bytes. Every buffer gets its own allocation (arena offsets are
/// ignored); temps and results start zeroed. Host operations find nothing registered and no
/// infeed queued: see [`run_program_with`].
pub fn run_program(program: &Program, args: &[&[u8]]) -> Result<Vec<Vec<u8>>, KernelRunError> {
    run_program_with(program, args, &EvalOptions::default())
}

/// [`run_program`] with the host's side of host operations: custom-calls run the functions
/// of `host.custom_calls`, infeeds take from its infeed queue, outfeeds append to its outfeed
/// (the same queues and registry `hlo::eval::evaluate_with` uses).
pub fn run_program_with(program: &Program, args: &[&[u8]], host: &EvalOptions) -> Result<Vec<Vec<u8>>, KernelRunError> {
    let err = |m: String| KernelRunError::Program(m);
    if args.len() != program.parameters.len() {
        return Err(err(format!(
            "{} arguments given, the program has {} parameters",
            args.len(),
            program.parameters.len()
        )));
    }
    let mut storage: Vec<Vec<u8>> = Vec::with_capacity(program.buffers.len());
    for (i, b) in program.buffers.iter().enumerate() {
        let bytes = usize::try_from(b.bytes).map_err(|_| err(format!("buffer B{i} of {} bytes", b.bytes)))?;
        let data = match &b.kind {
            BufferKind::Parameter(n) => {
                let arg =
                    args.get(*n).ok_or_else(|| err(format!("buffer B{i} is parameter {n}, beyond the arguments")))?;
                if arg.len() != bytes {
                    return Err(err(format!(
                        "argument {n} has {} bytes, parameter buffer B{i} needs {bytes}",
                        arg.len()
                    )));
                }
                arg.to_vec()
            }
            BufferKind::Constant(data) => {
                if data.len() != bytes {
                    return Err(err(format!("constant buffer B{i} holds {} bytes but declares {bytes}", data.len())));
                }
                data.clone()
            }
            BufferKind::Result(_) | BufferKind::Temp => {
                let mut v = Vec::new();
                v.try_reserve_exact(bytes)
                    .map_err(|_| err(format!("cannot allocate {bytes} bytes for buffer B{i}")))?;
                v.resize(bytes, 0);
                v
            }
        };
        storage.push(data);
    }
    for id in program.parameters.iter().chain(&program.results) {
        check_id(program, *id)?;
    }
    let compiled: Vec<Compiled> = program.kernels.iter().map(Compiled::new).collect::<Result<_, _>>()?;
    let mut runner = ProgramRunner { program, compiled, storage, host };
    runner.steps(&program.steps)?;
    Ok(program.results.iter().map(|id| runner.storage[id.0 as usize].clone()).collect())
}

fn check_id(program: &Program, id: crate::BufferId) -> Result<usize, KernelRunError> {
    if (id.0 as usize) < program.buffers.len() {
        Ok(id.0 as usize)
    } else {
        Err(KernelRunError::Program(format!("buffer B{} does not exist", id.0)))
    }
}

fn is_read_only(program: &Program, i: usize) -> bool {
    matches!(program.buffers[i].kind, BufferKind::Parameter(_) | BufferKind::Constant(_))
}

struct ProgramRunner<'p> {
    program: &'p Program,
    compiled: Vec<Compiled<'p>>,
    storage: Vec<Vec<u8>>,
    host: &'p EvalOptions,
}

impl ProgramRunner<'_> {
    fn steps(&mut self, steps: &[Step]) -> Result<(), KernelRunError> {
        steps.iter().try_for_each(|s| self.step(s))
    }

    fn step(&mut self, step: &Step) -> Result<(), KernelRunError> {
        let err = |m: String| KernelRunError::Program(m);
        let program = self.program;
        match step {
            Step::Launch(launch) => {
                let c = self
                    .compiled
                    .get(launch.kernel)
                    .ok_or_else(|| err(format!("a launch names kernel {}", launch.kernel)))?;
                let k = c.kernel;
                if launch.args.len() != k.buffers.len() {
                    return Err(err(format!(
                        "a launch binds {} buffers to kernel '{}' of {}",
                        launch.args.len(),
                        k.name,
                        k.buffers.len()
                    )));
                }
                let mut map = Vec::with_capacity(launch.args.len());
                for (kb, id) in k.buffers.iter().zip(&launch.args) {
                    let pi = check_id(program, *id)?;
                    if kb.writable && is_read_only(program, pi) {
                        return Err(err(format!(
                            "a launch binds read-only buffer B{pi} to writable buffer '{}' of kernel '{}'",
                            kb.name, k.name
                        )));
                    }
                    map.push(pi);
                }
                let mut views: Vec<&mut [u8]> = self.storage.iter_mut().map(|v| v.as_mut_slice()).collect();
                c.run(&mut views, &map)
            }
            Step::Copy { src, dst } => {
                let (s, d) = (check_id(program, *src)?, check_id(program, *dst)?);
                if is_read_only(program, d) || self.storage[s].len() != self.storage[d].len() {
                    return Err(err(format!("copy B{s} -> B{d}: read-only destination or different sizes")));
                }
                if s != d {
                    let data = std::mem::take(&mut self.storage[s]);
                    self.storage[d].copy_from_slice(&data);
                    self.storage[s] = data;
                }
                Ok(())
            }
            Step::While { cond, pred, body } => {
                let p = check_id(program, *pred)?;
                loop {
                    self.steps(cond)?;
                    match self.storage[p].first() {
                        Some(&b) if b != 0 => self.steps(body)?,
                        Some(_) => return Ok(()),
                        None => return Err(err(format!("while predicate B{p} is empty"))),
                    }
                }
            }
            Step::Conditional { selector, branches } => {
                let i = check_id(program, *selector)?;
                let kind = SelectorKind::of(&program.buffers[i].shape)
                    .ok_or_else(|| err(format!("conditional selector B{i} is not a scalar pred or s32")))?;
                let bytes = &self.storage[i];
                let index = match kind {
                    SelectorKind::Pred => usize::from(bytes.first().is_none_or(|&b| b == 0)),
                    SelectorKind::S32 => {
                        let v = bytes.get(..4).map_or(-1, |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                        usize::try_from(v)
                            .ok()
                            .filter(|&v| v < branches.len())
                            .unwrap_or(branches.len().saturating_sub(1))
                    }
                };
                match branches.get(index) {
                    Some(b) => self.steps(b),
                    None => Err(err("a conditional without branches".into())),
                }
            }
            Step::Host(op) => self.host_op(op),
            Step::Check { value, equals, message } => {
                let i = check_id(program, *value)?;
                match self.storage[i].get(..4) {
                    Some(b) if i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])) == *equals => Ok(()),
                    Some(_) => Err(err(message.clone())),
                    None => Err(err(format!("check of B{i}: not an s32 scalar"))),
                }
            }
        }
    }

    fn host_op(&mut self, op: &HostOp) -> Result<(), KernelRunError> {
        let fail = |m: String| KernelRunError::Program(format!("{} '{}': {m}", host_op_kind(op), op.name()));
        match op {
            HostOp::CustomCall { target, operands, result, .. } => {
                let f = self
                    .host
                    .custom_calls
                    .get(target)
                    .ok_or_else(|| fail(format!("no function is registered for target '{target}'")))?;
                let args = operands.iter().map(|o| self.literal(o)).collect::<Result<Vec<_>, _>>().map_err(fail)?;
                let out = f(&args).map_err(|m| fail(format!("the host function failed: {m}")))?;
                self.store(result, &out).map_err(fail)
            }
            HostOp::Infeed { result, .. } => {
                let lit = self.host.pop_infeed().ok_or_else(|| fail("nothing is queued".into()))?;
                self.store(result, &lit).map_err(fail)
            }
            HostOp::Outfeed { operand, .. } => {
                let lit = self.literal(operand).map_err(fail)?;
                self.host.push_outfeed(lit);
                Ok(())
            }
        }
    }

    /// The literal a host value's buffers hold.
    fn literal(&self, value: &HostValue) -> Result<Literal, String> {
        let mut ids = value.buffers.iter();
        let lit = self.literal_of(&value.shape, &mut ids)?;
        if ids.next().is_some() {
            return Err("more buffers than the shape has arrays".into());
        }
        Ok(lit)
    }

    fn literal_of(&self, shape: &Shape, ids: &mut std::slice::Iter<'_, crate::BufferId>) -> Result<Literal, String> {
        match shape {
            Shape::Tuple(elems) => {
                Ok(Literal::tuple(elems.iter().map(|e| self.literal_of(e, ids)).collect::<Result<_, _>>()?))
            }
            _ => {
                let id = ids.next().ok_or("fewer buffers than the shape has arrays")?;
                let i = check_id(self.program, *id).map_err(|e| e.to_string())?;
                Literal::from_physical_bytes(shape.clone(), self.storage[i].clone()).map_err(|e| e.to_string())
            }
        }
    }

    /// Lays `literal` out into a host value's buffers (in their layouts).
    fn store(&mut self, value: &HostValue, literal: &Literal) -> Result<(), String> {
        if !literal.shape().compatible(&value.shape) {
            return Err(format!(
                "the host gave {} where {} is expected",
                literal.shape(),
                value.shape.without_layout()
            ));
        }
        let mut leaves = Vec::new();
        host_leaves(literal, &mut leaves);
        if leaves.len() != value.buffers.len() {
            return Err("the literal's arrays do not match the buffers".into());
        }
        for (lit, id) in leaves.into_iter().zip(&value.buffers) {
            let i = check_id(self.program, *id).map_err(|e| e.to_string())?;
            if is_read_only(self.program, i) {
                return Err(format!("buffer B{i} is read-only"));
            }
            let shape = Shape::Array(self.program.buffers[i].shape.clone());
            let laid = lit.relayout_like(&shape).map_err(|e| e.to_string())?;
            let bytes = laid.physical_bytes().map_err(|e| e.to_string())?;
            if bytes.len() != self.storage[i].len() {
                return Err(format!("buffer B{i} has {} bytes, the value {}", self.storage[i].len(), bytes.len()));
            }
            self.storage[i].copy_from_slice(bytes);
        }
        Ok(())
    }
}

fn host_op_kind(op: &HostOp) -> &'static str {
    match op {
        HostOp::CustomCall { .. } => "custom-call",
        HostOp::Infeed { .. } => "infeed",
        HostOp::Outfeed { .. } => "outfeed",
    }
}

/// Array leaves of a literal, depth-first.
fn host_leaves<'a>(literal: &'a Literal, out: &mut Vec<&'a Literal>) {
    match literal.tuple_elements() {
        Some(elems) => elems.iter().for_each(|e| host_leaves(e, out)),
        None => out.push(literal),
    }
}

type Slot = u32;

/// An index term with its source resolved; `modulo == 0` means none.
struct CTerm {
    slot: Slot,
    /// The source is a data value: its sign is checked at run time.
    value: Option<ValueId>,
    div: i64,
    modulo: i64,
    scale: i64,
}

struct CIndex {
    terms: Vec<CTerm>,
    offset: i64,
}

enum COp {
    Const(u64),
    Load { buf: usize, index: CIndex, mem: MemType },
    Index(CIndex),
    Copy(Slot),
    Unary { op: UnOp, ty: Ty, a: Slot },
    Binary { op: BinOp, ty: Ty, a: Slot, b: Slot },
    Cmp { op: CmpOp, ty: Ty, a: Slot, b: Slot },
    Select { cond: Slot, a: Slot, b: Slot },
    Fma { ty: Ty, a: Slot, b: Slot, c: Slot },
    Cast { op: CastOp, from: Ty, to: Ty, a: Slot },
    Math { func: MathFn, ty: Ty, a: Slot, b: Slot },
}

enum CArg {
    Imm(i64),
    Reg(Slot),
    Ptr { buf: usize, index: CIndex },
}

enum CStmt<'k> {
    Let {
        dst: Slot,
        op: COp,
        src: &'k Stmt,
    },
    Loop {
        var: Slot,
        start: i64,
        end: i64,
        body: Vec<CStmt<'k>>,
        /// A lane reduction's width and its locals: `(slot, op, type, identity bits)`.
        lanes: i64,
        reductions: Vec<(Slot, BinOp, Ty, u64)>,
        src: &'k Stmt,
    },
    Set {
        dst: Slot,
        value: Slot,
    },
    Store {
        buf: usize,
        index: CIndex,
        mem: MemType,
        value: Slot,
        src: &'k Stmt,
    },
    If {
        cond: Slot,
        then_body: Vec<CStmt<'k>>,
        else_body: Vec<CStmt<'k>>,
    },
    /// `tessera_rt_gemm_f32`/`_f64`/`_c64`/`_c128` with its 12 arguments in contract order, or
    /// `tessera_rt_gemm_f32_mixed`/`_int` with their type codes taken out into `kind`.
    Gemm {
        kind: GemmKind,
        args: Vec<CArg>,
        src: &'k Stmt,
    },
    /// `tessera_rt_fft`/`_f32` with its 5 arguments in contract order.
    Fft {
        f32: bool,
        args: Vec<CArg>,
        src: &'k Stmt,
    },
    /// `tessera_rt_conv_f32`/`_f64`: descriptor, input, kernel and output pointers.
    Conv {
        f64: bool,
        ptrs: Vec<(usize, CIndex)>,
        src: &'k Stmt,
    },
}

/// What a runtime GEMM call's matrices hold.
#[derive(Clone, Copy)]
enum GemmKind {
    F64,
    /// Interleaved (real, imaginary) pairs of f32 (`tessera_rt_gemm_c64`) or of f64
    /// (`tessera_rt_gemm_c128`); sizes and strides count pairs.
    Complex {
        f64: bool,
    },
    /// f32 products: `A`'s and `B`'s element types as the mixed call's codes (0 f32, 1 bf16,
    /// 2 f16; both 0 for `tessera_rt_gemm_f32`).
    F32([i64; 2]),
    /// `tessera_rt_gemm_int`'s codes for `A`, `B` and `C` (1 s8, 2 u8, 3 s16, 4 u16, 5 s32,
    /// 6 u32, 7 s64, 8 u64).
    Int([i64; 3]),
}

impl GemmKind {
    fn name(self) -> &'static str {
        match self {
            GemmKind::F64 => "tessera_rt_gemm_f64",
            GemmKind::Complex { f64: false } => "tessera_rt_gemm_c64",
            GemmKind::Complex { f64: true } => "tessera_rt_gemm_c128",
            GemmKind::F32([0, 0]) => "tessera_rt_gemm_f32",
            GemmKind::F32(_) => "tessera_rt_gemm_f32_mixed",
            GemmKind::Int(_) => "tessera_rt_gemm_int",
        }
    }

    /// The element type the call reads or writes for matrix `which` (0 A, 1 B, 2 C).
    fn mem(self, which: usize) -> MemType {
        let int = |code: i64| match code {
            1 | 2 => Ty::I8,
            3 | 4 => Ty::I16,
            5 | 6 => Ty::I32,
            _ => Ty::I64,
        };
        MemType::Scalar(match self {
            GemmKind::F64 | GemmKind::Complex { f64: true } => Ty::F64,
            GemmKind::Complex { f64: false } => Ty::F32,
            GemmKind::F32(types) => match types.get(which) {
                Some(1 | 2) => Ty::I16,
                _ => Ty::F32,
            },
            GemmKind::Int(types) => int(types[which]),
        })
    }
}

struct Compiled<'k> {
    kernel: &'k Kernel,
    body: Vec<CStmt<'k>>,
    slots: usize,
    grid: Slot,
}

/// Slot assignment and the types needed to check call arguments, built in one walk.
struct Resolver<'k> {
    kernel: &'k Kernel,
    values: HashMap<ValueId, (Slot, Ty)>,
    locals: HashMap<LocalId, (Slot, Ty)>,
    vars: HashMap<VarId, Slot>,
    next: Slot,
}

impl<'k> Compiled<'k> {
    fn new(kernel: &'k Kernel) -> Result<Compiled<'k>, KernelRunError> {
        verify_kernel(kernel)?;
        let mut r = Resolver { kernel, values: HashMap::new(), locals: HashMap::new(), vars: HashMap::new(), next: 0 };
        let grid = r.fresh();
        r.vars.insert(kernel.grid.var, grid);
        let body = r.body(&kernel.body)?;
        Ok(Compiled { kernel, body, slots: r.next as usize, grid })
    }

    fn run(&self, buffers: &mut [&mut [u8]], map: &[usize]) -> Result<(), KernelRunError> {
        let k = self.kernel;
        let setup = |message: String| KernelRunError::Setup { kernel: k.name.clone(), message };
        if map.len() != k.buffers.len() {
            return Err(setup(format!("{} buffers given, the kernel has {}", map.len(), k.buffers.len())));
        }
        let mut lens = Vec::with_capacity(map.len());
        for (i, (b, &m)) in k.buffers.iter().zip(map).enumerate() {
            let needed = byte_len(b.mem, b.len).ok_or_else(|| setup(format!("buffer b{i} is too large")))?;
            let given = buffers.get(m).map(|s| s.len()).ok_or_else(|| setup(format!("buffer b{i} is not given")))?;
            if (given as u128) < needed {
                return Err(setup(format!("buffer b{i} ('{}') needs {needed} bytes, {given} given", b.name)));
            }
            lens.push(b.len);
        }
        let mut m = Machine { regs: vec![0; self.slots], bufs: buffers, map, lens, kernel: k, grid: 0 };
        for g in 0..k.grid.extent {
            m.grid = g;
            m.regs[self.grid as usize] = g as u64;
            m.body(&self.body)?;
        }
        Ok(())
    }
}

/// Bytes holding `len` elements of `mem`, if that fits in memory at all.
fn byte_len(mem: MemType, len: i64) -> Option<u128> {
    let len = u128::try_from(len).ok()?;
    let bits = len * u128::from(mem.bits());
    Some(bits.div_ceil(8))
}

impl<'k> Resolver<'k> {
    fn fresh(&mut self) -> Slot {
        self.next += 1;
        self.next - 1
    }

    fn setup(&self, message: String) -> KernelRunError {
        KernelRunError::Setup { kernel: self.kernel.name.clone(), message }
    }

    // The verifier has checked that every id used is defined, so lookups cannot miss; a miss
    // would be a verifier bug and is reported rather than panicking.
    fn value(&self, v: ValueId) -> Result<(Slot, Ty), KernelRunError> {
        self.values.get(&v).copied().ok_or_else(|| self.setup(format!("internal: %{} unresolved", v.0)))
    }

    fn slot(&self, v: ValueId) -> Result<Slot, KernelRunError> {
        Ok(self.value(v)?.0)
    }

    fn index(&self, e: &IndexExpr) -> Result<CIndex, KernelRunError> {
        let mut terms = Vec::with_capacity(e.terms.len());
        for t in &e.terms {
            let (slot, value) = match t.src {
                IndexSrc::Var(v) => {
                    (*self.vars.get(&v).ok_or_else(|| self.setup(format!("internal: v{} unresolved", v.0)))?, None)
                }
                IndexSrc::Value(v) => (self.slot(v)?, Some(v)),
            };
            terms.push(CTerm { slot, value, div: t.div, modulo: t.modulo.unwrap_or(0), scale: t.scale });
        }
        Ok(CIndex { terms, offset: e.offset })
    }

    fn body(&mut self, body: &'k [Stmt]) -> Result<Vec<CStmt<'k>>, KernelRunError> {
        body.iter().map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, stmt: &'k Stmt) -> Result<CStmt<'k>, KernelRunError> {
        Ok(match stmt {
            Stmt::Let(v, op) => {
                let (op, ty) = self.op(op)?;
                let dst = self.fresh();
                self.values.insert(*v, (dst, ty));
                CStmt::Let { dst, op, src: stmt }
            }
            Stmt::Loop(l) => {
                let var = self.fresh();
                self.vars.insert(l.var, var);
                let mut reductions = Vec::with_capacity(l.reductions.len());
                for r in &l.reductions {
                    let (slot, _) = *self
                        .locals
                        .get(&r.local)
                        .ok_or_else(|| self.setup(format!("internal: l{} unresolved", r.local.0)))?;
                    let identity = match r.identity() {
                        Some(Const::Pred(b)) => u64::from(b),
                        Some(Const::Int { ty, bits }) => norm(ty, bits as u64),
                        Some(Const::F32(b)) => u64::from(b),
                        Some(Const::F64(b)) => b,
                        None => {
                            return Err(self.setup(format!("internal: reduction of l{} has no identity", r.local.0)))
                        }
                    };
                    reductions.push((slot, r.op, r.ty, identity));
                }
                let body = self.body(&l.body)?;
                let lanes = i64::from(l.vector_width);
                CStmt::Loop { var, start: l.start, end: l.end, body, lanes, reductions, src: stmt }
            }
            Stmt::DeclLocal { local, ty, init } => {
                let dst = self.fresh();
                self.locals.insert(*local, (dst, *ty));
                CStmt::Set { dst, value: self.slot(*init)? }
            }
            Stmt::SetLocal { local, value } => {
                let (dst, _) =
                    *self.locals.get(local).ok_or_else(|| self.setup(format!("internal: l{} unresolved", local.0)))?;
                CStmt::Set { dst, value: self.slot(*value)? }
            }
            Stmt::Store { buf, index, mem, value } => CStmt::Store {
                buf: buf.0 as usize,
                index: self.index(index)?,
                mem: *mem,
                value: self.slot(*value)?,
                src: stmt,
            },
            Stmt::If { cond, then_body, else_body } => CStmt::If {
                cond: self.slot(*cond)?,
                then_body: self.body(then_body)?,
                else_body: self.body(else_body)?,
            },
            Stmt::Call { func, args } => self.call(stmt, func, args)?,
        })
    }

    fn op(&mut self, op: &Op) -> Result<(COp, Ty), KernelRunError> {
        Ok(match op {
            Op::Const(c) => {
                let bits = match *c {
                    Const::Pred(b) => u64::from(b),
                    Const::Int { ty, bits } => norm(ty, bits as u64),
                    Const::F32(b) => u64::from(b),
                    Const::F64(b) => b,
                };
                (COp::Const(bits), c.ty())
            }
            Op::Load { buf, index, mem } => {
                (COp::Load { buf: buf.0 as usize, index: self.index(index)?, mem: *mem }, mem.reg())
            }
            Op::Index(e) => (COp::Index(self.index(e)?), Ty::I64),
            Op::GetLocal(l) => {
                let (slot, ty) =
                    *self.locals.get(l).ok_or_else(|| self.setup(format!("internal: l{} unresolved", l.0)))?;
                (COp::Copy(slot), ty)
            }
            Op::Unary { op, ty, a } => (COp::Unary { op: *op, ty: *ty, a: self.slot(*a)? }, *ty),
            // One element at a time, "any lane" is this one.
            Op::AnyLane { a } => (COp::Copy(self.slot(*a)?), Ty::Pred),
            Op::Binary { op, ty, a, b } => {
                (COp::Binary { op: *op, ty: *ty, a: self.slot(*a)?, b: self.slot(*b)? }, *ty)
            }
            Op::Cmp { op, ty, a, b } => (COp::Cmp { op: *op, ty: *ty, a: self.slot(*a)?, b: self.slot(*b)? }, Ty::Pred),
            Op::Select { ty, cond, a, b } => {
                (COp::Select { cond: self.slot(*cond)?, a: self.slot(*a)?, b: self.slot(*b)? }, *ty)
            }
            Op::Fma { ty, a, b, c } => {
                (COp::Fma { ty: *ty, a: self.slot(*a)?, b: self.slot(*b)?, c: self.slot(*c)? }, *ty)
            }
            Op::Cast { op, from, to, a } => (COp::Cast { op: *op, from: *from, to: *to, a: self.slot(*a)? }, *to),
            Op::Math { func, ty, args } => {
                let a = self.slot(args[0])?;
                let b = match args.get(1) {
                    Some(v) => self.slot(*v)?,
                    None => a,
                };
                (COp::Math { func: *func, ty: *ty, a, b }, *ty)
            }
        })
    }

    /// Checks a call against the contract of the runtime function it names: the GEMMs, the
    /// convolutions and the FFT are known here.
    fn call(&mut self, stmt: &'k Stmt, func: &str, args: &[CallArg]) -> Result<CStmt<'k>, KernelRunError> {
        if func == super::fft_call::SYMBOL || func == super::fft_call::SYMBOL_F32 {
            return self.fft_call(stmt, func == super::fft_call::SYMBOL_F32, args);
        }
        // The type codes of the mixed and the integer calls follow a matrix's strides, at
        // these argument positions, with these values.
        let (mut kind, codes, range): (GemmKind, &[usize], std::ops::RangeInclusive<i64>) = match func {
            "tessera_rt_gemm_f32" => (GemmKind::F32([0, 0]), &[], 0..=0),
            "tessera_rt_gemm_f32_mixed" => (GemmKind::F32([0, 0]), &[6, 10], 0..=2),
            "tessera_rt_gemm_int" => (GemmKind::Int([0; 3]), &[6, 10, 14], 1..=8),
            "tessera_rt_gemm_f64" => (GemmKind::F64, &[], 0..=0),
            "tessera_rt_gemm_c64" => (GemmKind::Complex { f64: false }, &[], 0..=0),
            "tessera_rt_gemm_c128" => (GemmKind::Complex { f64: true }, &[], 0..=0),
            "tessera_rt_conv_f32" => return self.conv_call(stmt, false, args),
            "tessera_rt_conv_f64" => return self.conv_call(stmt, true, args),
            _ => return Err(KernelRunError::UnknownFunction { kernel: self.kernel.name.clone(), func: func.into() }),
        };
        let bad = |m: String| self.setup(format!("`{}`: {m}", self.kernel.stmt_head(stmt)));
        let count = 12 + codes.len();
        if args.len() != count {
            return Err(bad(format!("{func} takes {count} arguments, given {}", args.len())));
        }
        // The codes must be immediates, since they fix what the pointers point to.
        let mut types = [0i64; 3];
        let mut plain = Vec::with_capacity(12);
        for (i, a) in args.iter().enumerate() {
            match codes.iter().position(|&c| c == i) {
                Some(t) => match a {
                    CallArg::I64(code) if range.contains(code) => types[t] = *code,
                    _ => return Err(bad(format!("argument {i} must be a type code in {range:?}"))),
                },
                None => plain.push(a),
            }
        }
        match &mut kind {
            GemmKind::F32(t) => *t = [types[0], types[1]],
            GemmKind::Int(t) => {
                if types[0] > 4 || types[1] > 4 {
                    return Err(bad("the operands' type codes must name 8- or 16-bit integers".into()));
                }
                *t = types;
            }
            GemmKind::F64 | GemmKind::Complex { .. } => {}
        }
        let mut out = Vec::with_capacity(12);
        for (i, a) in plain.into_iter().enumerate() {
            let pointer = matches!(i, 3 | 6 | 9);
            out.push(match (a, pointer) {
                (CallArg::Ptr { buf, index }, true) => {
                    let b = &self.kernel.buffers[buf.0 as usize];
                    let elem = kind.mem(i / 3 - 1);
                    if b.mem != elem {
                        return Err(bad(format!("argument {i} points into b{} of {}, expected {elem}", buf.0, b.mem)));
                    }
                    if i == 9 && !b.writable {
                        return Err(bad(format!("the result matrix points into read-only buffer b{}", buf.0)));
                    }
                    CArg::Ptr { buf: buf.0 as usize, index: self.index(index)? }
                }
                (CallArg::I64(n), false) => CArg::Imm(*n),
                (CallArg::Value(v), false) => {
                    let (slot, ty) = self.value(*v)?;
                    if ty != Ty::I64 {
                        return Err(bad(format!("argument {i} is {ty}, expected i64")));
                    }
                    CArg::Reg(slot)
                }
                (_, true) => return Err(bad(format!("argument {i} must be a buffer pointer"))),
                (_, false) => return Err(bad(format!("argument {i} must be an i64"))),
            });
        }
        Ok(CStmt::Gemm { kind, args: out, src: stmt })
    }

    fn fft_call(&mut self, stmt: &'k Stmt, f32: bool, args: &[CallArg]) -> Result<CStmt<'k>, KernelRunError> {
        let bad = |m: String| self.setup(format!("`{}`: {m}", self.kernel.stmt_head(stmt)));
        let (symbol, ty) =
            if f32 { (super::fft_call::SYMBOL_F32, Ty::F32) } else { (super::fft_call::SYMBOL, Ty::F64) };
        if args.len() != 5 {
            return Err(bad(format!("{symbol} takes 5 arguments, given {}", args.len())));
        }
        let mut out = Vec::with_capacity(5);
        for (i, a) in args.iter().enumerate() {
            out.push(match (a, i == 4) {
                (CallArg::Ptr { buf, index }, true) => {
                    let b = &self.kernel.buffers[buf.0 as usize];
                    if b.mem != MemType::Scalar(ty) || !b.writable {
                        return Err(bad(format!("the data must point into a writable {ty} buffer, not b{}", buf.0)));
                    }
                    CArg::Ptr { buf: buf.0 as usize, index: self.index(index)? }
                }
                (CallArg::I64(n), false) => CArg::Imm(*n),
                (CallArg::Value(v), false) => {
                    let (slot, ty) = self.value(*v)?;
                    if ty != Ty::I64 {
                        return Err(bad(format!("argument {i} is {ty}, expected i64")));
                    }
                    CArg::Reg(slot)
                }
                (_, true) => return Err(bad("argument 4 must be a buffer pointer".into())),
                (_, false) => return Err(bad(format!("argument {i} must be an i64"))),
            });
        }
        Ok(CStmt::Fft { f32, args: out, src: stmt })
    }
}

impl<'k> Resolver<'k> {
    /// Checks a runtime convolution call's arguments: four pointers, into an i64 descriptor
    /// and three buffers of the element type (the last writable).
    fn conv_call(&mut self, stmt: &'k Stmt, f64: bool, args: &[CallArg]) -> Result<CStmt<'k>, KernelRunError> {
        let bad = |m: String| self.setup(format!("`{}`: {m}", self.kernel.stmt_head(stmt)));
        if args.len() != 4 {
            return Err(bad(format!("a runtime convolution takes 4 arguments, given {}", args.len())));
        }
        let elem = MemType::Scalar(if f64 { Ty::F64 } else { Ty::F32 });
        let mut ptrs = Vec::with_capacity(4);
        for (i, a) in args.iter().enumerate() {
            let CallArg::Ptr { buf, index } = a else {
                return Err(bad(format!("argument {i} must be a buffer pointer")));
            };
            let b = &self.kernel.buffers[buf.0 as usize];
            let want = if i == 0 { MemType::Scalar(Ty::I64) } else { elem };
            if b.mem != want {
                return Err(bad(format!("argument {i} points into b{} of {}, expected {want}", buf.0, b.mem)));
            }
            if i == 3 && !b.writable {
                return Err(bad(format!("the output points into read-only buffer b{}", buf.0)));
            }
            ptrs.push((buf.0 as usize, self.index(index)?));
        }
        Ok(CStmt::Conv { f64, ptrs, src: stmt })
    }
}

impl Machine<'_, '_, '_> {
    fn conv(&mut self, f64: bool, ptrs: &[(usize, CIndex)]) -> Result<(), Fault> {
        let call = |m: String| Fault::Call(format!("tessera_rt_conv_{}: {m}", if f64 { "f64" } else { "f32" }));
        let mut at = Vec::with_capacity(4);
        for (buf, index) in ptrs {
            at.push((*buf, self.index(index)?));
        }
        let (dbuf, dbase) = at[0];
        let raw = conv::read_desc(&self.bufs[self.map[dbuf]], dbase, self.lens[dbuf])?;
        let desc = conv::parse(&raw).map_err(call)?;
        let spans = [1, 2, 3].map(|i| (at[i].1, self.lens[at[i].0]));
        conv::check_spans(&desc, spans).map_err(call)?;
        let width = if f64 { 8 } else { 4 };
        // Operands are copied out first, so the output may share a buffer with them.
        let load = |s: &Self, (buf, base): (usize, i64)| -> Vec<f64> {
            let data = &s.bufs[s.map[buf]];
            let first = (base.max(0) as usize) * width;
            data[first..]
                .chunks_exact(width)
                .map(|c| {
                    if f64 {
                        f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))
                    } else {
                        f64::from(f32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
                    }
                })
                .collect()
        };
        let (lhs, rhs) = (load(self, at[1]), load(self, at[2]));
        let (obuf, obase) = at[3];
        let data = &mut self.bufs[self.map[obuf]];
        let first = obase.max(0) as usize;
        conv::run(&desc, &|i| lhs[i as usize], &|i| rhs[i as usize], &mut |i, x| {
            let e = (first + i as usize) * width;
            if f64 {
                data[e..e + 8].copy_from_slice(&x.to_le_bytes());
            } else {
                data[e..e + 4].copy_from_slice(&(x as f32).to_le_bytes());
            }
        });
        Ok(())
    }
}

/// A value of type `ty` in canonical register form.
fn norm(ty: Ty, x: u64) -> u64 {
    match ty {
        Ty::Pred => x & 1,
        Ty::I8 | Ty::I16 | Ty::I32 | Ty::I64 => sext(x, ty.bits()),
        Ty::F32 => x & 0xffff_ffff,
        Ty::F64 => x,
    }
}

fn sext(x: u64, bits: u32) -> u64 {
    let s = 64 - bits;
    (((x << s) as i64) >> s) as u64
}

fn zext(x: u64, bits: u32) -> u64 {
    if bits >= 64 {
        x
    } else {
        x & ((1u64 << bits) - 1)
    }
}

fn f32_of(x: u64) -> f32 {
    f32::from_bits(x as u32)
}

fn f64_of(x: u64) -> f64 {
    f64::from_bits(x)
}

fn of_f32(x: f32) -> u64 {
    u64::from(x.to_bits())
}

fn of_f64(x: f64) -> u64 {
    x.to_bits()
}

// The same C symbols the tiers call (`MathFn::symbol`, `runtime::abi::symbols`).
extern "C" {
    fn expf(x: f32) -> f32;
    fn exp(x: f64) -> f64;
    fn expm1f(x: f32) -> f32;
    fn expm1(x: f64) -> f64;
    fn logf(x: f32) -> f32;
    fn log(x: f64) -> f64;
    fn log1pf(x: f32) -> f32;
    fn log1p(x: f64) -> f64;
    fn sinf(x: f32) -> f32;
    fn sin(x: f64) -> f64;
    fn cosf(x: f32) -> f32;
    fn cos(x: f64) -> f64;
    fn tanf(x: f32) -> f32;
    fn tan(x: f64) -> f64;
    fn tanhf(x: f32) -> f32;
    fn tanh(x: f64) -> f64;
    fn atan2f(y: f32, x: f32) -> f32;
    fn atan2(y: f64, x: f64) -> f64;
    fn powf(x: f32, y: f32) -> f32;
    fn pow(x: f64, y: f64) -> f64;
    fn cbrtf(x: f32) -> f32;
    fn cbrt(x: f64) -> f64;
    fn erff(x: f32) -> f32;
    fn erf(x: f64) -> f64;
    fn roundf(x: f32) -> f32;
    fn round(x: f64) -> f64;
    fn fmodf(x: f32, y: f32) -> f32;
    fn fmod(x: f64, y: f64) -> f64;
    fn hypotf(x: f32, y: f32) -> f32;
    fn hypot(x: f64, y: f64) -> f64;
    fn sinhf(x: f32) -> f32;
    fn sinh(x: f64) -> f64;
    fn coshf(x: f32) -> f32;
    fn cosh(x: f64) -> f64;
}

fn math32(func: MathFn, a: f32, b: f32) -> f32 {
    // SAFETY: pure libm functions of plain floats, defined for every input.
    unsafe {
        match func {
            MathFn::Exp => expf(a),
            MathFn::Expm1 => expm1f(a),
            MathFn::Log => logf(a),
            MathFn::Log1p => log1pf(a),
            MathFn::Sin => sinf(a),
            MathFn::Cos => cosf(a),
            MathFn::Tan => tanf(a),
            MathFn::Tanh => tanhf(a),
            MathFn::Atan2 => atan2f(a, b),
            MathFn::Pow => powf(a, b),
            MathFn::Cbrt => cbrtf(a),
            MathFn::Erf => erff(a),
            MathFn::Round => roundf(a),
            MathFn::Fmod => fmodf(a, b),
            MathFn::Hypot => hypotf(a, b),
            MathFn::Sinh => sinhf(a),
            MathFn::Cosh => coshf(a),
        }
    }
}

fn math64(func: MathFn, a: f64, b: f64) -> f64 {
    // SAFETY: pure libm functions of plain floats, defined for every input.
    unsafe {
        match func {
            MathFn::Exp => exp(a),
            MathFn::Expm1 => expm1(a),
            MathFn::Log => log(a),
            MathFn::Log1p => log1p(a),
            MathFn::Sin => sin(a),
            MathFn::Cos => cos(a),
            MathFn::Tan => tan(a),
            MathFn::Tanh => tanh(a),
            MathFn::Atan2 => atan2(a, b),
            MathFn::Pow => pow(a, b),
            MathFn::Cbrt => cbrt(a),
            MathFn::Erf => erf(a),
            MathFn::Round => round(a),
            MathFn::Fmod => fmod(a, b),
            MathFn::Hypot => hypot(a, b),
            MathFn::Sinh => sinh(a),
            MathFn::Cosh => cosh(a),
        }
    }
}

/// IEEE-754 2019 `maximum`/`minimum`: NaN if either side is NaN, and -0.0 < +0.0.
macro_rules! fmaxmin {
    ($name:ident, $t:ty, $bits:ty, $max:expr) => {
        fn $name(a: $t, b: $t) -> $t {
            if a.is_nan() || b.is_nan() {
                a + b
            } else if a == b {
                // Equal values differ only for zeros: max keeps +0.0 (sign bits ANDed), min
                // keeps -0.0 (ORed).
                let (x, y) = (a.to_bits(), b.to_bits());
                <$t>::from_bits(if $max { x & y } else { x | y })
            } else if (a > b) == $max {
                a
            } else {
                b
            }
        }
    };
}
fmaxmin!(fmax32, f32, u32, true);
fmaxmin!(fmin32, f32, u32, false);
fmaxmin!(fmax64, f64, u64, true);
fmaxmin!(fmin64, f64, u64, false);

struct Machine<'a, 'b, 'k> {
    regs: Vec<u64>,
    bufs: &'a mut [&'b mut [u8]],
    map: &'a [usize],
    /// Kernel buffer lengths in elements; the byte slices were checked to hold them.
    lens: Vec<i64>,
    kernel: &'k Kernel,
    grid: i64,
}

impl Machine<'_, '_, '_> {
    fn fault(&self, src: &Stmt, fault: Fault) -> KernelRunError {
        KernelRunError::Fault {
            kernel: self.kernel.name.clone(),
            grid: self.grid,
            stmt: self.kernel.stmt_head(src),
            fault,
        }
    }

    fn body(&mut self, body: &[CStmt]) -> Result<(), KernelRunError> {
        for s in body {
            match s {
                CStmt::Let { dst, op, src } => {
                    let x = self.op(op).map_err(|f| self.fault(src, f))?;
                    self.regs[*dst as usize] = x;
                }
                CStmt::Loop { var, start, end, body, lanes, reductions, src } => {
                    let mut first = *start;
                    if !reductions.is_empty() {
                        first = self.lane_reduction(*var, *start, *end, body, *lanes, reductions, src)?;
                    }
                    for i in first..*end {
                        self.regs[*var as usize] = i as u64;
                        self.body(body)?;
                    }
                }
                CStmt::Set { dst, value } => self.regs[*dst as usize] = self.regs[*value as usize],
                CStmt::Store { buf, index, mem, value, src } => {
                    let x = self.regs[*value as usize];
                    self.store(*buf, index, *mem, x).map_err(|f| self.fault(src, f))?;
                }
                CStmt::If { cond, then_body, else_body } => {
                    if self.regs[*cond as usize] != 0 {
                        self.body(then_body)?;
                    } else {
                        self.body(else_body)?;
                    }
                }
                CStmt::Gemm { kind, args, src } => self.gemm(*kind, args).map_err(|f| self.fault(src, f))?,
                CStmt::Fft { f32, args, src } => self.fft(*f32, args).map_err(|f| self.fault(src, f))?,
                CStmt::Conv { f64, ptrs, src } => self.conv(*f64, ptrs).map_err(|f| self.fault(src, f))?,
            }
        }
        Ok(())
    }

    /// The lane part of a lane reduction (the kernel IR's module doc): runs the iterations
    /// that fill whole groups of lanes, folds the lanes into the locals, and returns the first
    /// iteration left to run plainly.
    #[allow(clippy::too_many_arguments)]
    fn lane_reduction(
        &mut self,
        var: Slot,
        start: i64,
        end: i64,
        body: &[CStmt],
        lanes: i64,
        reductions: &[(Slot, BinOp, Ty, u64)],
        src: &Stmt,
    ) -> Result<i64, KernelRunError> {
        let trip = end.saturating_sub(start).max(0);
        let main = trip - trip % lanes;
        if main == 0 {
            return Ok(start);
        }
        let outer: Vec<u64> = reductions.iter().map(|r| self.regs[r.0 as usize]).collect();
        let mut acc: Vec<Vec<u64>> = reductions.iter().map(|r| vec![r.3; lanes as usize]).collect();
        for k in 0..main {
            let lane = (k % lanes) as usize;
            for (r, a) in reductions.iter().zip(&acc) {
                self.regs[r.0 as usize] = a[lane];
            }
            self.regs[var as usize] = (start + k) as u64;
            self.body(body)?;
            for (r, a) in reductions.iter().zip(&mut acc) {
                a[lane] = self.regs[r.0 as usize];
            }
        }
        for ((r, a), before) in reductions.iter().zip(&mut acc).zip(outer) {
            let (slot, op, ty, _) = *r;
            let mut h = a.len() / 2;
            while h >= 1 {
                for j in 0..h {
                    a[j] = binary(op, ty, a[j], a[j + h]).map_err(|f| self.fault(src, f))?;
                }
                h /= 2;
            }
            let total = binary(op, ty, before, a[0]).map_err(|f| self.fault(src, f))?;
            self.regs[slot as usize] = total;
        }
        Ok(start + main)
    }

    fn index(&self, e: &CIndex) -> Result<i64, Fault> {
        let mut acc = e.offset;
        for t in &e.terms {
            let mut x = self.regs[t.slot as usize] as i64;
            if t.div != 1 || t.modulo != 0 {
                if let Some(v) = t.value {
                    if x < 0 {
                        return Err(Fault::NegativeIndexSource { value: v.0, x });
                    }
                }
                // The verifier rejects negative variables under / and %, and div, modulo >= 1.
                x /= t.div;
                if t.modulo != 0 {
                    x %= t.modulo;
                }
            }
            acc = x.checked_mul(t.scale).and_then(|y| acc.checked_add(y)).ok_or(Fault::IndexOverflow)?;
        }
        Ok(acc)
    }

    /// The element index `e` gives in kernel buffer `buf`, checked against its length.
    fn element(&self, buf: usize, e: &CIndex) -> Result<usize, Fault> {
        let index = self.index(e)?;
        let len = self.lens[buf];
        if index < 0 || index >= len {
            return Err(Fault::OutOfBounds { buf: buf as u32, index, len });
        }
        Ok(index as usize)
    }

    fn bytes(&self, buf: usize, at: usize, n: usize) -> &[u8] {
        // In range: `element` checked the index against the length, and `run` checked that
        // the slice holds that many elements.
        &self.bufs[self.map[buf]][at..at + n]
    }

    fn load(&self, buf: usize, e: &CIndex, mem: MemType) -> Result<u64, Fault> {
        let i = self.element(buf, e)?;
        Ok(match mem {
            MemType::Pred => u64::from(self.bytes(buf, i, 1)[0] != 0),
            MemType::Scalar(t) => {
                // Fixed-width reads: a runtime-length copy would cost a memmove call per load.
                let data = &self.bufs[self.map[buf]];
                let x = match t.bits() {
                    8 => u64::from(data[i]),
                    16 => u64::from(u16::from_le_bytes([data[2 * i], data[2 * i + 1]])),
                    32 => u64::from(u32::from_le_bytes(data[4 * i..4 * i + 4].try_into().unwrap_or_default())),
                    _ => u64::from_le_bytes(data[8 * i..8 * i + 8].try_into().unwrap_or_default()),
                };
                norm(t, x)
            }
            MemType::Packed { bits, pred } => {
                let (byte, shift, mask) = packed_pos(i, bits);
                let x = (self.bytes(buf, byte, 1)[0] >> shift) & mask;
                if pred {
                    u64::from(x != 0)
                } else {
                    u64::from(x)
                }
            }
        })
    }

    fn store(&mut self, buf: usize, e: &CIndex, mem: MemType, x: u64) -> Result<(), Fault> {
        let i = self.element(buf, e)?;
        let data = &mut self.bufs[self.map[buf]];
        match mem {
            MemType::Pred => data[i] = (x & 1) as u8,
            MemType::Scalar(t) => match t.bits() {
                8 => data[i] = x as u8,
                16 => data[2 * i..2 * i + 2].copy_from_slice(&(x as u16).to_le_bytes()),
                32 => data[4 * i..4 * i + 4].copy_from_slice(&(x as u32).to_le_bytes()),
                _ => data[8 * i..8 * i + 8].copy_from_slice(&x.to_le_bytes()),
            },
            MemType::Packed { bits, .. } => {
                let (byte, shift, mask) = packed_pos(i, bits);
                data[byte] = (data[byte] & !(mask << shift)) | (((x as u8) & mask) << shift);
            }
        }
        Ok(())
    }

    fn op(&self, op: &COp) -> Result<u64, Fault> {
        let r = |s: &Slot| self.regs[*s as usize];
        Ok(match op {
            COp::Const(x) => *x,
            COp::Load { buf, index, mem } => self.load(*buf, index, *mem)?,
            COp::Index(e) => self.index(e)? as u64,
            COp::Copy(s) => r(s),
            COp::Unary { op, ty, a } => unary(*op, *ty, r(a)),
            COp::Binary { op, ty, a, b } => binary(*op, *ty, r(a), r(b))?,
            COp::Cmp { op, ty, a, b } => u64::from(cmp(*op, *ty, r(a), r(b))),
            COp::Select { cond, a, b } => {
                if r(cond) != 0 {
                    r(a)
                } else {
                    r(b)
                }
            }
            // std's mul_add is the correctly rounded fma (the hardware's, or libm's fma/fmaf).
            COp::Fma { ty, a, b, c } => match ty {
                Ty::F32 => of_f32(f32_of(r(a)).mul_add(f32_of(r(b)), f32_of(r(c)))),
                _ => of_f64(f64_of(r(a)).mul_add(f64_of(r(b)), f64_of(r(c)))),
            },
            COp::Cast { op, from, to, a } => cast(*op, *from, *to, r(a)),
            COp::Math { func, ty, a, b } => match ty {
                Ty::F32 => of_f32(math32(*func, f32_of(r(a)), f32_of(r(b)))),
                _ => of_f64(math64(*func, f64_of(r(a)), f64_of(r(b)))),
            },
        })
    }

    fn fft(&mut self, f32: bool, args: &[CArg]) -> Result<(), Fault> {
        use super::fft_call::{reference, FftKind, SYMBOL, SYMBOL_F32};
        let symbol = if f32 { SYMBOL_F32 } else { SYMBOL };
        let call = |m: String| Fault::Call(format!("{symbol}: {m}"));
        let mut ints = [0i64; 4];
        let mut ptr = (0usize, 0i64);
        for (i, a) in args.iter().enumerate() {
            match a {
                CArg::Imm(n) => ints[i] = *n,
                CArg::Reg(s) => ints[i] = self.regs[*s as usize] as i64,
                CArg::Ptr { buf, index } => ptr = (*buf, self.index(index)?),
            }
        }
        let kind = FftKind::from_i64(ints[0]).ok_or_else(|| call(format!("unknown kind {}", ints[0])))?;
        let n: Vec<usize> = ints[1..]
            .iter()
            .map(|&x| usize::try_from(x))
            .collect::<Result<_, _>>()
            .map_err(|_| call(format!("negative length in {:?}", &ints[1..])))?;
        let floats = n.iter().try_fold(2usize, |a, &x| a.checked_mul(x)).ok_or_else(|| call("size overflow".into()))?;
        let (buf, at) = ptr;
        if at < 0 || (at as u64).saturating_add(floats as u64) > self.lens[buf] as u64 {
            return Err(call(format!("{floats} floats at {at} overrun buffer b{buf} of {}", self.lens[buf])));
        }
        let width = if f32 { 4 } else { 8 };
        let bytes = &mut self.bufs[self.map[buf]][width * at as usize..width * (at as usize + floats)];
        // The f32 form's reference: the f64 transform of the widened box, rounded once.
        let mut data: Vec<f64> = bytes
            .chunks(width)
            .map(|c| {
                if f32 {
                    f64::from(f32::from_le_bytes(c.try_into().unwrap_or_default()))
                } else {
                    f64::from_le_bytes(c.try_into().unwrap_or_default())
                }
            })
            .collect();
        reference(kind, [n[0], n[1], n[2]], &mut data);
        for (c, x) in bytes.chunks_mut(width).zip(data) {
            if f32 {
                c.copy_from_slice(&(x as f32).to_le_bytes());
            } else {
                c.copy_from_slice(&x.to_le_bytes());
            }
        }
        Ok(())
    }

    fn gemm(&mut self, kind: GemmKind, args: &[CArg]) -> Result<(), Fault> {
        let call = |m: String| Fault::Call(format!("{}: {m}", kind.name()));
        let mut ints = [0i64; 12];
        let mut ptrs = [(0usize, 0i64); 3];
        for (i, a) in args.iter().enumerate() {
            match a {
                CArg::Imm(n) => ints[i] = *n,
                CArg::Reg(s) => ints[i] = self.regs[*s as usize] as i64,
                CArg::Ptr { buf, index } => ptrs[i / 3 - 1] = (*buf, self.index(index)?),
            }
        }
        let (m, n, k) = (ints[0], ints[1], ints[2]);
        if m < 0 || n < 0 || k < 0 {
            return Err(call(format!("negative size m={m} n={n} k={k}")));
        }
        // Distinct result elements: an m x n product cannot fit in fewer (and the scratch
        // matrix below stays as small as the buffer).
        // A complex element is two floats: offsets and strides count pairs.
        let parts: i64 = if matches!(kind, GemmKind::Complex { .. }) { 2 } else { 1 };
        if m.checked_mul(n).and_then(|mn| mn.checked_mul(parts)).is_none_or(|mn| mn > self.lens[ptrs[2].0]) {
            return Err(call(format!("an {m} x {n} result does not fit buffer b{}", ptrs[2].0)));
        }
        let strides = [(ints[4], ints[5]), (ints[7], ints[8]), (ints[10], ints[11])];
        let extents = [(m, k), (k, n), (m, n)];
        // The affine element index reaches its extremes at the corners of the index box.
        for (w, ((buf, base), ((rows, cols), (rs, cs)))) in ptrs.iter().zip(extents.iter().zip(strides)).enumerate() {
            if *rows == 0 || *cols == 0 {
                continue;
            }
            let (r, c) = (i128::from(rows - 1) * i128::from(rs), i128::from(cols - 1) * i128::from(cs));
            let p = i128::from(parts);
            let lo = i128::from(*base) + p * (r.min(0) + c.min(0));
            let hi = i128::from(*base) + p * (r.max(0) + c.max(0)) + p - 1;
            if lo < 0 || hi >= i128::from(self.lens[*buf]) {
                let which = ["A", "B", "C"][w];
                return Err(call(format!(
                    "{which} spans elements {lo}..={hi} of buffer b{buf} with {} elements",
                    self.lens[*buf]
                )));
            }
        }
        let at = |base: i64, i: i64, rs: i64, j: i64, cs: i64| (base + parts * (i * rs + j * cs)) as usize;
        let ((a, ab), (b, bb), (c, cb)) = (ptrs[0], ptrs[1], ptrs[2]);
        let [(ars, acs), (brs, bcs), (crs, ccs)] = strides;
        // Computed into a scratch matrix first, so C may overlap A or B.
        let mut out = Vec::with_capacity((m * n * parts) as usize);
        let read_n = |s: &Self, buf: usize, e: usize, width: usize| {
            let raw = s.bytes(buf, e * width, width);
            let mut x = [0u8; 8];
            x[..width].copy_from_slice(raw);
            u64::from_le_bytes(x)
        };
        // An f32 operand's element, or a half one's widened exactly.
        let operand = |s: &Self, code: i64, buf: usize, e: usize| match code {
            0 => f32_of(read_n(s, buf, e, 4)),
            1 => f32::from_bits((read_n(s, buf, e, 2) as u32) << 16),
            _ => half::f16::from_bits(read_n(s, buf, e, 2) as u16).to_f32(),
        };
        // An integer operand's value, by its code.
        let integer = |s: &Self, code: i64, buf: usize, e: usize| match code {
            1 => i64::from(read_n(s, buf, e, 1) as u8 as i8),
            2 => read_n(s, buf, e, 1) as i64,
            3 => i64::from(read_n(s, buf, e, 2) as u16 as i16),
            _ => read_n(s, buf, e, 2) as i64,
        };
        for i in 0..m {
            for j in 0..n {
                let bits = match kind {
                    GemmKind::F64 => {
                        let mut acc = 0.0f64;
                        for p in 0..k {
                            acc += f64_of(read_n(self, a, at(ab, i, ars, p, acs), 8))
                                * f64_of(read_n(self, b, at(bb, p, brs, j, bcs), 8));
                        }
                        of_f64(acc)
                    }
                    // Each pair's product added in the element type, as the runtime's
                    // complex kernels do; the real part is pushed here, the imaginary below.
                    GemmKind::Complex { f64: wide } => {
                        let (mut re, mut im) = (0.0f64, 0.0f64);
                        let round = |x: f64| if wide { x } else { f64::from(x as f32) };
                        let part = |s: &Self, buf: usize, e: usize| {
                            if wide {
                                f64_of(read_n(s, buf, e, 8))
                            } else {
                                f64::from(f32_of(read_n(s, buf, e, 4)))
                            }
                        };
                        for p in 0..k {
                            let (ea, eb) = (at(ab, i, ars, p, acs), at(bb, p, brs, j, bcs));
                            let (xr, xi) = (part(self, a, ea), part(self, a, ea + 1));
                            let (yr, yi) = (part(self, b, eb), part(self, b, eb + 1));
                            re = round(re + round(round(xr * yr) - round(xi * yi)));
                            im = round(im + round(round(xr * yi) + round(xi * yr)));
                        }
                        let bits = |x: f64| if wide { of_f64(x) } else { of_f32(x as f32) };
                        out.push(bits(re));
                        bits(im)
                    }
                    GemmKind::F32(types) => {
                        let mut acc = 0.0f32;
                        for p in 0..k {
                            acc += operand(self, types[0], a, at(ab, i, ars, p, acs))
                                * operand(self, types[1], b, at(bb, p, brs, j, bcs));
                        }
                        of_f32(acc)
                    }
                    // The exact sum's low bits, as the runtime's blocks of exact float sums give.
                    GemmKind::Int(types) => {
                        let mut acc = 0i64;
                        for p in 0..k {
                            let x = integer(self, types[0], a, at(ab, i, ars, p, acs));
                            let y = integer(self, types[1], b, at(bb, p, brs, j, bcs));
                            acc = acc.wrapping_add(x * y);
                        }
                        acc as u64
                    }
                };
                out.push(bits);
            }
        }
        let width = (kind.mem(2).bits() / 8) as usize;
        let data = &mut self.bufs[self.map[c]];
        for i in 0..m {
            for j in 0..n {
                for p in 0..parts {
                    let e = (at(cb, i, crs, j, ccs) + p as usize) * width;
                    let x = out[((i * n + j) * parts + p) as usize];
                    data[e..e + width].copy_from_slice(&x.to_le_bytes()[..width]);
                }
            }
        }
        Ok(())
    }
}

/// Byte, bit shift and mask of packed element `i` of `bits` bits (low bits first).
fn packed_pos(i: usize, bits: u8) -> (usize, u32, u8) {
    let per = 8 / usize::from(bits);
    (i / per, ((i % per) * usize::from(bits)) as u32, ((1u16 << bits) - 1) as u8)
}

fn unary(op: UnOp, ty: Ty, x: u64) -> u64 {
    match ty {
        Ty::F32 => {
            let f = f32_of(x);
            let y = match op {
                UnOp::Neg => -f,
                UnOp::Abs => f.abs(),
                UnOp::Sqrt => f.sqrt(),
                UnOp::Floor => f.floor(),
                UnOp::Ceil => f.ceil(),
                UnOp::Trunc => f.trunc(),
                // The verifier allows no other op on floats.
                _ => f.round_ties_even(),
            };
            of_f32(y)
        }
        Ty::F64 => {
            let f = f64_of(x);
            let y = match op {
                UnOp::Neg => -f,
                UnOp::Abs => f.abs(),
                UnOp::Sqrt => f.sqrt(),
                UnOp::Floor => f.floor(),
                UnOp::Ceil => f.ceil(),
                UnOp::Trunc => f.trunc(),
                _ => f.round_ties_even(),
            };
            of_f64(y)
        }
        _ => {
            let bits = ty.bits();
            let y = match op {
                UnOp::Neg => (x as i64).wrapping_neg() as u64,
                UnOp::Abs => (x as i64).wrapping_abs() as u64,
                UnOp::Not => !x,
                UnOp::Popcnt => u64::from(zext(x, bits).count_ones()),
                _ => u64::from(zext(x, bits).leading_zeros() - (64 - bits)),
            };
            norm(ty, y)
        }
    }
}

fn binary(op: BinOp, ty: Ty, a: u64, b: u64) -> Result<u64, Fault> {
    if ty == Ty::F32 {
        let (x, y) = (f32_of(a), f32_of(b));
        return Ok(of_f32(match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::FDiv => x / y,
            BinOp::FMax => fmax32(x, y),
            _ => fmin32(x, y),
        }));
    }
    if ty == Ty::F64 {
        let (x, y) = (f64_of(a), f64_of(b));
        return Ok(of_f64(match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::FDiv => x / y,
            BinOp::FMax => fmax64(x, y),
            _ => fmin64(x, y),
        }));
    }
    let bits = ty.bits();
    let (sa, sb) = (a as i64, b as i64);
    let (ua, ub) = (zext(a, bits), zext(b, bits));
    let min = sext(1u64 << (bits - 1), bits) as i64;
    let shift = || if ub < u64::from(bits) { Ok(ub as u32) } else { Err(Fault::ShiftOutOfRange { amount: ub, bits }) };
    let sdiv_ok = || {
        if sb == 0 {
            Err(Fault::DivisionByZero)
        } else if sa == min && sb == -1 {
            Err(Fault::DivisionOverflow)
        } else {
            Ok(())
        }
    };
    let y = match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::SDiv => {
            sdiv_ok()?;
            (sa / sb) as u64
        }
        BinOp::SRem => {
            sdiv_ok()?;
            (sa % sb) as u64
        }
        BinOp::UDiv | BinOp::URem if ub == 0 => return Err(Fault::DivisionByZero),
        BinOp::UDiv => ua / ub,
        BinOp::URem => ua % ub,
        BinOp::And => a & b,
        BinOp::Or => a | b,
        BinOp::Xor => a ^ b,
        BinOp::Shl => ua << shift()?,
        BinOp::LShr => ua >> shift()?,
        BinOp::AShr => (sa >> shift()?) as u64,
        BinOp::SMax => sa.max(sb) as u64,
        BinOp::SMin => sa.min(sb) as u64,
        BinOp::UMax => ua.max(ub),
        BinOp::UMin => ua.min(ub),
        // Float-only ops; the verifier keeps them off integers.
        BinOp::FDiv | BinOp::FMax | BinOp::FMin => a,
    };
    Ok(norm(ty, y))
}

/// `a op b` on values of `ty` held as their bits (integers sign-extended to 64).
pub(crate) fn cmp(op: CmpOp, ty: Ty, a: u64, b: u64) -> bool {
    let (fa, fb) = match ty {
        Ty::F32 => (f64::from(f32_of(a)), f64::from(f32_of(b))),
        Ty::F64 => (f64_of(a), f64_of(b)),
        _ => (0.0, 0.0),
    };
    let (ua, ub) = (zext(a, ty.bits()), zext(b, ty.bits()));
    let (sa, sb) = (a as i64, b as i64);
    match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Slt => sa < sb,
        CmpOp::Sle => sa <= sb,
        CmpOp::Sgt => sa > sb,
        CmpOp::Sge => sa >= sb,
        CmpOp::Ult => ua < ub,
        CmpOp::Ule => ua <= ub,
        CmpOp::Ugt => ua > ub,
        CmpOp::Uge => ua >= ub,
        // Widening f32 to f64 is exact, so comparing in f64 gives the f32 answer.
        CmpOp::FEq => fa == fb,
        CmpOp::FLt => fa < fb,
        CmpOp::FLe => fa <= fb,
        CmpOp::FGt => fa > fb,
        CmpOp::FGe => fa >= fb,
        CmpOp::FNe => fa != fb,
    }
}

fn cast(op: CastOp, from: Ty, to: Ty, x: u64) -> u64 {
    match op {
        CastOp::SExt => {
            if from == Ty::Pred {
                norm(to, 0u64.wrapping_sub(x))
            } else {
                norm(to, x)
            }
        }
        CastOp::ZExt => norm(to, zext(x, from.bits())),
        CastOp::Trunc => norm(to, x),
        CastOp::SIToFP => match to {
            Ty::F32 => of_f32(x as i64 as f32),
            _ => of_f64(x as i64 as f64),
        },
        CastOp::UIToFP => match to {
            Ty::F32 => of_f32(zext(x, from.bits()) as f32),
            _ => of_f64(zext(x, from.bits()) as f64),
        },
        // Rust's float-to-int `as` saturates and maps NaN to 0, as the contract asks.
        CastOp::FPToSISat => {
            let f = if from == Ty::F32 { f64::from(f32_of(x)) } else { f64_of(x) };
            let y = match to {
                Ty::I8 => i64::from(f as i8),
                Ty::I16 => i64::from(f as i16),
                Ty::I32 => i64::from(f as i32),
                _ => f as i64,
            };
            y as u64
        }
        CastOp::FPToUISat => {
            let f = if from == Ty::F32 { f64::from(f32_of(x)) } else { f64_of(x) };
            let y = match to {
                Ty::I8 => u64::from(f as u8),
                Ty::I16 => u64::from(f as u16),
                Ty::I32 => u64::from(f as u32),
                _ => f as u64,
            };
            norm(to, y)
        }
        CastOp::FPExt => of_f64(f64::from(f32_of(x))),
        CastOp::FPTrunc => of_f32(f64_of(x) as f32),
        CastOp::Bitcast => norm(to, x),
        CastOp::F16ToF32 => of_f32(half::f16::from_bits(x as u16).to_f32()),
        CastOp::F32ToF16 => norm(Ty::I16, u64::from(half::f16::from_f32(f32_of(x)).to_bits())),
    }
}

#[cfg(test)]
#[path = "interp_tests.rs"]
mod tests;
