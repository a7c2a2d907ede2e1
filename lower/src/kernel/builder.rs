//! Building kernels statement by statement, with fresh ids handed out in one place so they stay
//! unique within a kernel. The lowering uses it, and so do tests of the codegen tiers, which
//! write small kernels by hand.

use super::*;

pub struct KernelBuilder {
    name: String,
    buffers: Vec<KernelBuffer>,
    grid: Grid,
    next_var: u32,
    next_value: u32,
    next_local: u32,
    /// Open statement lists: the kernel body at the bottom, then one per loop or branch being
    /// built.
    stack: Vec<Vec<Stmt>>,
    /// For each `if` opened by [`Self::begin_if`]: whether its else-branch is open.
    open_ifs: Vec<bool>,
    /// Loops opened and not yet closed.
    open_loops: u32,
    /// Narrow bit patterns the lowering recorded for values it widened from them
    /// ([`Self::note_narrow_bits`]).
    narrow_bits: std::collections::HashMap<(ValueId, u8), ValueId>,
    /// Whether generated arithmetic may use [`Op::Fma`] ([`Self::use_fused_multiply_add`]).
    fused_multiply_add: bool,
    /// What each value (by id) is known to be if it is a NaN ([`NanFacts`]).
    nan_facts: Vec<NanFacts>,
    /// The `F32` constants, which LLVM may fold arithmetic with.
    float_constants: std::collections::HashSet<ValueId>,
}

/// What an `F32` value's bits are known to be if the value is a NaN. bf16 rounding needs no
/// NaN test for a NaN known to be quiet with a zero lower half: adding the rounding bias
/// then carries nothing into the upper half, which is already the quieted bf16 NaN.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NanFacts {
    /// The lower 16 bits are zero (bf16 values widened or rounded, and arithmetic on them:
    /// a NaN result is the default NaN or one of the operands' NaNs, quieted).
    pub low_half_zero: bool,
    /// The quiet bit is set (results of IEEE arithmetic, rounded values).
    pub quiet: bool,
}

impl NanFacts {
    pub const NONE: NanFacts = NanFacts { low_half_zero: false, quiet: false };
    /// A bf16 value as widening gives it (signaling NaNs stay signaling).
    pub const BF16: NanFacts = NanFacts { low_half_zero: true, quiet: false };
    /// A bf16 value after a rounding, which quiets NaNs.
    pub const QUIET_BF16: NanFacts = NanFacts { low_half_zero: true, quiet: true };

    fn meet(self, other: NanFacts) -> NanFacts {
        NanFacts { low_half_zero: self.low_half_zero && other.low_half_zero, quiet: self.quiet && other.quiet }
    }
}

impl KernelBuilder {
    /// A kernel whose grid has `grid_extent` indices (1 when it cannot be split).
    pub fn new(name: impl Into<String>, grid_extent: i64) -> KernelBuilder {
        KernelBuilder {
            name: name.into(),
            buffers: Vec::new(),
            grid: Grid { var: VarId(0), extent: grid_extent },
            next_var: 1,
            next_value: 0,
            next_local: 0,
            stack: vec![Vec::new()],
            open_loops: 0,
            open_ifs: Vec::new(),
            narrow_bits: std::collections::HashMap::new(),
            fused_multiply_add: false,
            nan_facts: Vec::new(),
            float_constants: std::collections::HashSet::new(),
        }
    }

    /// A builder for statements to splice into an existing kernel whose value ids are all
    /// below `next_value` ([`Self::take_body`] collects them).
    pub(crate) fn continuing(next_value: u32) -> KernelBuilder {
        KernelBuilder { next_value, ..KernelBuilder::new("", 1) }
    }

    /// The statements built at the top level so far, leaving it empty.
    pub(crate) fn take_body(&mut self) -> Vec<Stmt> {
        assert_eq!(self.stack.len(), 1, "statements taken with loops or branches open");
        std::mem::take(&mut self.stack[0])
    }

    /// Lets the sequences lowering writes for this kernel (the math functions) fuse products
    /// into sums ([`Op::Fma`]): for targets with FMA instructions, where it saves an operation
    /// and a rounding per polynomial step.
    pub fn use_fused_multiply_add(&mut self, on: bool) {
        self.fused_multiply_add = on;
    }

    pub fn fused_multiply_add(&self) -> bool {
        self.fused_multiply_add
    }

    /// Records that `value` is the widening of the narrow bits `bits` of format `format` (a
    /// caller's tag, e.g. bf16), so narrowing `value` again can reuse `bits`. `bits` must be
    /// defined before `value` in the same statement list, so it is visible wherever `value` is.
    pub fn note_narrow_bits(&mut self, value: ValueId, format: u8, bits: ValueId) {
        self.narrow_bits.insert((value, format), bits);
    }

    /// The bits recorded for `value` in `format`, if any.
    pub fn narrow_bits(&self, value: ValueId, format: u8) -> Option<ValueId> {
        self.narrow_bits.get(&(value, format)).copied()
    }

    pub fn grid_var(&self) -> VarId {
        self.grid.var
    }

    pub fn buffer(&mut self, name: impl Into<String>, mem: MemType, len: i64, writable: bool) -> BufId {
        self.buffers.push(KernelBuffer { name: name.into(), mem, len, writable });
        BufId(self.buffers.len() as u32 - 1)
    }

    pub fn push(&mut self, stmt: Stmt) {
        self.stack.last_mut().expect("the body list is never popped").push(stmt);
    }

    pub fn let_(&mut self, op: Op) -> ValueId {
        let v = ValueId(self.next_value);
        self.next_value += 1;
        let facts = self.derive_nan_facts(&op);
        self.set_nan_facts(v, facts);
        if matches!(op, Op::Const(Const::F32(_))) {
            self.float_constants.insert(v);
        }
        self.push(Stmt::Let(v, op));
        v
    }

    /// What `value` is known to be if it is a NaN: derived for each op as it is built, or
    /// recorded by the lowering ([`Self::note_nan_facts`]).
    pub fn nan_facts(&self, value: ValueId) -> NanFacts {
        self.nan_facts.get(value.0 as usize).copied().unwrap_or_default()
    }

    /// Records what the lowering knows of `value` if it is a NaN (a bf16 widening or
    /// rounding, whose bit operations the derivation does not follow).
    pub fn note_nan_facts(&mut self, value: ValueId, facts: NanFacts) {
        self.set_nan_facts(value, facts);
    }

    fn set_nan_facts(&mut self, value: ValueId, facts: NanFacts) {
        let i = value.0 as usize;
        if facts == NanFacts::NONE && i >= self.nan_facts.len() {
            return;
        }
        if i >= self.nan_facts.len() {
            self.nan_facts.resize(i + 1, NanFacts::NONE);
        }
        self.nan_facts[i] = facts;
    }

    /// The facts an `F32` op's result inherits. IEEE arithmetic returns the default NaN or one
    /// of its NaN operands, quieted (x86, AArch64, and LLVM's NaN rules); with a constant
    /// operand LLVM may fold an identity (`x * 1.0`) and hand a signaling operand on
    /// unquieted, so only arithmetic on non-constants is known quiet. Sign operations and
    /// selects keep their operands' bits. Anything else (min/max, rounding to integers, the
    /// math functions, locals) is unknown.
    fn derive_nan_facts(&self, op: &Op) -> NanFacts {
        let constant = |v: &ValueId| self.float_constants.contains(v);
        let arithmetic = |operands: &[&ValueId]| {
            let low_half_zero = operands.iter().all(|v| self.nan_facts(**v).low_half_zero);
            NanFacts { low_half_zero, quiet: !operands.iter().any(|v| constant(v)) }
        };
        match op {
            Op::Const(Const::F32(bits)) => {
                let x = f32::from_bits(*bits);
                if !x.is_nan() {
                    NanFacts::QUIET_BF16
                } else {
                    NanFacts { low_half_zero: bits & 0xffff == 0, quiet: bits & 0x40_0000 != 0 }
                }
            }
            Op::Binary { op: BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::FDiv, ty: Ty::F32, a, b } => {
                arithmetic(&[a, b])
            }
            Op::Fma { ty: Ty::F32, a, b, c } => arithmetic(&[a, b, c]),
            Op::Unary { op: UnOp::Sqrt, ty: Ty::F32, a } => arithmetic(&[a]),
            Op::Unary { op: UnOp::Neg | UnOp::Abs, ty: Ty::F32, a } => self.nan_facts(*a),
            Op::Select { ty: Ty::F32, a, b, .. } => self.nan_facts(*a).meet(self.nan_facts(*b)),
            _ => NanFacts::NONE,
        }
    }

    pub fn constant(&mut self, c: Const) -> ValueId {
        self.let_(Op::Const(c))
    }

    pub fn load(&mut self, buf: BufId, index: IndexExpr) -> ValueId {
        let mem = self.buffers[buf.0 as usize].mem;
        self.let_(Op::Load { buf, index, mem })
    }

    pub fn store(&mut self, buf: BufId, index: IndexExpr, value: ValueId) {
        let mem = self.buffers[buf.0 as usize].mem;
        self.push(Stmt::Store { buf, index, mem, value });
    }

    pub fn unary(&mut self, op: UnOp, ty: Ty, a: ValueId) -> ValueId {
        self.let_(Op::Unary { op, ty, a })
    }

    pub fn binary(&mut self, op: BinOp, ty: Ty, a: ValueId, b: ValueId) -> ValueId {
        self.let_(Op::Binary { op, ty, a, b })
    }

    pub fn cmp(&mut self, op: CmpOp, ty: Ty, a: ValueId, b: ValueId) -> ValueId {
        self.let_(Op::Cmp { op, ty, a, b })
    }

    pub fn select(&mut self, ty: Ty, cond: ValueId, a: ValueId, b: ValueId) -> ValueId {
        self.let_(Op::Select { ty, cond, a, b })
    }

    pub fn fma(&mut self, ty: Ty, a: ValueId, b: ValueId, c: ValueId) -> ValueId {
        self.let_(Op::Fma { ty, a, b, c })
    }

    pub fn cast(&mut self, op: CastOp, from: Ty, to: Ty, a: ValueId) -> ValueId {
        self.let_(Op::Cast { op, from, to, a })
    }

    pub fn math(&mut self, func: MathFn, ty: Ty, args: Vec<ValueId>) -> ValueId {
        self.let_(Op::Math { func, ty, args })
    }

    pub fn local(&mut self, ty: Ty, init: ValueId) -> LocalId {
        let local = LocalId(self.next_local);
        self.next_local += 1;
        self.push(Stmt::DeclLocal { local, ty, init });
        local
    }

    pub fn get_local(&mut self, local: LocalId) -> ValueId {
        self.let_(Op::GetLocal(local))
    }

    pub fn set_local(&mut self, local: LocalId, value: ValueId) {
        self.push(Stmt::SetLocal { local, value });
    }

    pub fn fresh_var(&mut self) -> VarId {
        let v = VarId(self.next_var);
        self.next_var += 1;
        v
    }

    /// Opens `for var in start..end`; statements go into its body until [`Self::end_loop`].
    pub fn begin_loop(&mut self, start: i64, end: i64) -> VarId {
        let var = self.fresh_var();
        self.stack.push(vec![Stmt::Loop(Loop {
            var,
            start,
            end,
            vector_width: 1,
            tail: Tail::None,
            body: Vec::new(),
            reductions: Vec::new(),
        })]);
        self.stack.push(Vec::new());
        self.open_loops += 1;
        var
    }

    /// Whether statements go into a loop's body now (rather than once per grid index).
    pub fn in_loop(&self) -> bool {
        self.open_loops > 0
    }

    /// Closes the innermost open loop, giving it a vectorization hint.
    pub fn end_loop_vectorized(&mut self, vector_width: u32, tail: Tail) {
        let body = self.stack.pop().expect("end_loop without begin_loop");
        let mut holder = self.stack.pop().expect("end_loop without begin_loop");
        self.open_loops = self.open_loops.saturating_sub(1);
        match holder.pop() {
            Some(Stmt::Loop(mut l)) => {
                l.body = body;
                l.vector_width = vector_width;
                l.tail = tail;
                self.push(Stmt::Loop(l));
            }
            _ => panic!("end_loop does not close a loop"),
        }
    }

    pub fn end_loop(&mut self) {
        self.end_loop_vectorized(1, Tail::None);
    }

    /// Closes the innermost open loop as a lane reduction of `reductions` over
    /// `vector_width` lanes (see the kernel IR's module doc).
    pub fn end_loop_reducing(&mut self, vector_width: u32, tail: Tail, reductions: Vec<Reduction>) {
        self.end_loop_vectorized(vector_width, tail);
        if let Some(Stmt::Loop(l)) = self.stack.last_mut().and_then(|list| list.last_mut()) {
            l.reductions = reductions;
        }
    }

    /// Builds `if cond { then } else { else }` from two closures.
    pub fn if_else(&mut self, cond: ValueId, then: impl FnOnce(&mut Self), otherwise: impl FnOnce(&mut Self)) {
        self.stack.push(Vec::new());
        then(self);
        let then_body = self.stack.pop().expect("then branch");
        self.stack.push(Vec::new());
        otherwise(self);
        let else_body = self.stack.pop().expect("else branch");
        self.push(Stmt::If { cond, then_body, else_body });
    }

    /// Opens `if cond { ... }`: statements go into the then-branch until [`Self::begin_else`]
    /// or [`Self::end_if`]. For callers that cannot give [`Self::if_else`] closures (the
    /// lowering's recursive emitters hold more state than the builder).
    pub fn begin_if(&mut self, cond: ValueId) {
        self.stack.push(vec![Stmt::If { cond, then_body: Vec::new(), else_body: Vec::new() }]);
        self.stack.push(Vec::new());
        self.open_ifs.push(false);
    }

    /// Closes the then-branch of the innermost open `if`; statements go into its else-branch.
    pub fn begin_else(&mut self) {
        let body = self.stack.pop().expect("begin_else without begin_if");
        match self.stack.last_mut().and_then(|h| h.last_mut()) {
            Some(Stmt::If { then_body, .. }) => *then_body = body,
            _ => panic!("begin_else does not follow begin_if"),
        }
        self.stack.push(Vec::new());
        if let Some(in_else) = self.open_ifs.last_mut() {
            *in_else = true;
        }
    }

    /// Closes the innermost open `if` (with or without an else-branch).
    pub fn end_if(&mut self) {
        let body = self.stack.pop().expect("end_if without begin_if");
        let in_else = self.open_ifs.pop().expect("end_if without begin_if");
        let mut holder = self.stack.pop().expect("end_if without begin_if");
        match holder.pop() {
            Some(Stmt::If { cond, then_body, .. }) if in_else => {
                self.push(Stmt::If { cond, then_body, else_body: body })
            }
            Some(Stmt::If { cond, .. }) => self.push(Stmt::If { cond, then_body: body, else_body: Vec::new() }),
            _ => panic!("end_if does not close an if"),
        }
    }

    pub fn call(&mut self, func: impl Into<String>, args: Vec<CallArg>) {
        self.push(Stmt::Call { func: func.into(), args });
    }

    pub fn finish(mut self) -> Kernel {
        assert_eq!(self.stack.len(), 1, "kernel {} has unclosed loops or branches", self.name);
        Kernel { name: self.name, buffers: self.buffers, grid: self.grid, body: self.stack.pop().unwrap_or_default() }
    }
}
