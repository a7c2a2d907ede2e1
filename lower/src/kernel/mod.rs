//! The kernel IR: one [`Kernel`] is a loop nest over physical buffers (DESIGN.md section 5).
//!
//! It is the contract between the lowering (which owns every layout and semantics decision)
//! and the codegen tiers (which translate it without re-deriving either). So the IR is small
//! and total: scalar SSA values defined by [`Stmt::Let`], mutable locals for accumulators,
//! counted loops with constant bounds, loads and stores at [`IndexExpr`] element offsets, and
//! calls to named runtime functions. Everything XLA defines specially (integer division by
//! zero, shifts past the bit width, f16/bf16 rounding, float-to-int saturation) is spelled out
//! by the lowering with these primitives, whose own semantics are the plain machine ones
//! documented on each variant; a tier never needs to know HLO.
//!
//! ## Calling convention of a compiled kernel
//! `extern "C" fn(buffers: *const *mut u8, grid_lo: i64, grid_hi: i64)`: `buffers[i]` is the
//! base address of the kernel's buffer `i` (see [`Kernel::buffers`]); the kernel runs its
//! body once for every grid index in `grid_lo..grid_hi` (a sub-range of `0..grid.extent`),
//! with [`Grid::var`] bound to that index. The runtime's thread pool splits the grid; a kernel
//! whose work cannot be split has a grid of extent 1.
//!
//! ## Lane reductions
//! A loop with [`Loop::reductions`] accumulates those locals in `vector_width` (`W`) lanes,
//! the order a vector unit adds in, spelled out so every tier and the interpreter compute the
//! same bits. With `trip = end - start` and `main = trip - trip % W`: each reduction's `W`
//! lanes start at its op's identity ([`Reduction::identity`]); iteration `k < main` runs the
//! body with `GetLocal`/`SetLocal` of the local reading and writing lane `k % W`; then the
//! lanes fold as a tree (lane `j` becomes `op(lane j, lane j + h)` for `h = W/2, W/4, .., 1`)
//! and the local becomes `op(local, lane 0)`; the remaining `trip % W` iterations run on the
//! local itself. (With `main = 0` nothing but those iterations runs.) A tier maps lanes onto
//! its vector registers however it likes, as long as each lane's sequence is this one.
//!
//! ## Scoping
//! A value is visible from its `Let` to the end of the statement list holding it (including
//! nested loops and branches). Loop variables are visible inside their loop's body; the grid
//! variable everywhere. Locals are declared by [`Stmt::DeclLocal`] and visible to the end of
//! the enclosing list; the lowering keeps ids unique within a kernel.

mod builder;
mod byte_copy;
/// The runtime FFT's calling contract and its reference implementation.
pub mod fft_call;
/// The f16 casts as integer sequences, for tiers without conversion instructions.
pub mod half_casts;
mod in_place;
/// The reference interpreter (kernels and whole programs).
pub mod interp;
/// Random valid kernels for differential tests of the tiers.
pub mod random;
/// The text form (`Display` for kernels, statements, ops and index expressions).
mod text;
mod traffic;
pub use traffic::BufferTraffic;
/// The verifier of this module's contract.
pub mod verify;

pub use builder::{KernelBuilder, NanFacts};
pub use byte_copy::is_byte_copy;
pub use in_place::updates_in_place;
pub use interp::{run_kernel, run_program, run_program_with, Fault, KernelRunError};
pub use verify::{verify_kernel, KernelVerifyError, VerifyErrorKind};

/// A loop induction variable (or the grid variable). Unique within a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

/// An SSA scalar value. Unique within a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// A mutable scalar local (accumulators). Unique within a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalId(pub u32);

/// Index of a buffer in [`Kernel::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u32);

/// Register types. Integers carry no sign: signedness lives in the operations, as in LLVM and
/// Cranelift. f16 and bf16 are not register types: they are loaded as `I16` bits and the
/// lowering converts them explicitly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// A boolean (what comparisons produce and selects consume).
    Pred,
    I8,
    I16,
    I32,
    I64,
    F32,
    F64,
}

impl Ty {
    /// Width in bits (`Pred` counts as 1).
    pub fn bits(self) -> u32 {
        match self {
            Ty::Pred => 1,
            Ty::I8 => 8,
            Ty::I16 => 16,
            Ty::I32 | Ty::F32 => 32,
            Ty::I64 | Ty::F64 => 64,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }
    pub fn is_int(self) -> bool {
        matches!(self, Ty::I8 | Ty::I16 | Ty::I32 | Ty::I64)
    }
}

/// How a buffer's elements sit in memory, and the register type a load gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemType {
    /// One byte per predicate; a load gives `Pred` (any nonzero byte is true), a store writes
    /// 0 or 1.
    Pred,
    /// Plain little-endian scalars of the register type (`I16` also holds f16/bf16 bits).
    Scalar(Ty),
    /// Sub-byte elements packed low bits first (`E(1)`/`E(2)`/`E(4)` layouts and s4/u4/s2/u2
    /// types): element `i` is bits `(i % (8/bits)) * bits ..` of byte `i / (8/bits)`. A load
    /// gives the bits zero-extended in an `I8` (or a `Pred` when `pred` is set); a store
    /// replaces only those bits (read-modify-write: the lowering never lets two grid
    /// indices store into one byte).
    Packed { bits: u8, pred: bool },
}

impl MemType {
    /// The memory type that holds registers of type `ty` as they are (a byte per predicate):
    /// the type of a kernel's own scratch.
    pub fn holding(ty: Ty) -> MemType {
        if ty == Ty::Pred {
            MemType::Pred
        } else {
            MemType::Scalar(ty)
        }
    }
    /// The register type loads produce and stores consume.
    pub fn reg(self) -> Ty {
        match self {
            MemType::Pred | MemType::Packed { pred: true, .. } => Ty::Pred,
            MemType::Scalar(t) => t,
            MemType::Packed { .. } => Ty::I8,
        }
    }
    /// Size of one element in bits.
    pub fn bits(self) -> u32 {
        match self {
            MemType::Pred => 8,
            MemType::Scalar(t) => t.bits(),
            MemType::Packed { bits, .. } => u32::from(bits),
        }
    }
}

/// What one term of an index expression reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IndexSrc {
    /// A loop or grid variable.
    Var(VarId),
    /// An `I64` value computed in the kernel (data-dependent indices: dynamic slices, gathers).
    /// It must be non-negative when `div` or `modulo` is not 1/None.
    Value(ValueId),
}

/// `((src / div) % modulo) * scale`, with `div >= 1`, `modulo >= 1` when present, and integer
/// division and remainder of non-negative numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Term {
    pub src: IndexSrc,
    pub div: i64,
    pub modulo: Option<i64>,
    pub scale: i64,
}

/// An element offset: `offset + sum of terms`, in the normal form of DESIGN.md section 5. The
/// lowering simplifies it (drops div/mod that variable bounds make trivial, merges terms); a
/// tier only evaluates it, and should hoist terms whose sources are defined outside the loop
/// it is in (LLVM does that itself; Cranelift relies on the tier).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct IndexExpr {
    pub terms: Vec<Term>,
    pub offset: i64,
}

impl IndexExpr {
    pub fn constant(offset: i64) -> IndexExpr {
        IndexExpr { terms: Vec::new(), offset }
    }
    /// `var * scale`.
    pub fn var(var: VarId, scale: i64) -> IndexExpr {
        IndexExpr { terms: vec![Term { src: IndexSrc::Var(var), div: 1, modulo: None, scale }], offset: 0 }
    }
    /// True when no term divides or takes a remainder.
    pub fn is_affine(&self) -> bool {
        self.terms.iter().all(|t| t.div == 1 && t.modulo.is_none())
    }
}

/// A typed constant. Floats are held as bits so NaN payloads and -0.0 survive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Const {
    Pred(bool),
    /// An integer of type `ty`, given as its bits sign-extended to 64 (only the low
    /// `ty.bits()` bits matter).
    Int {
        ty: Ty,
        bits: i64,
    },
    F32(u32),
    F64(u64),
}

impl Const {
    pub fn ty(self) -> Ty {
        match self {
            Const::Pred(_) => Ty::Pred,
            Const::Int { ty, .. } => ty,
            Const::F32(_) => Ty::F32,
            Const::F64(_) => Ty::F64,
        }
    }
}

/// Unary operations; the operand and result have the op's `ty` unless noted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// Integer two's complement negation (wrapping) or float sign flip.
    Neg,
    /// Integer: wrapping absolute value (`abs(MIN) = MIN`). Float: clears the sign bit.
    Abs,
    /// Bitwise not (integers and `Pred`).
    Not,
    /// Float only, IEEE correctly rounded.
    Sqrt,
    Floor,
    Ceil,
    /// Round toward zero.
    Trunc,
    /// Round half to even.
    RoundEven,
    /// Integer only.
    Popcnt,
    /// Integer only; `clz(0)` is the bit width.
    Clz,
}

/// Binary operations; both operands and the result have the op's `ty`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// Integers wrap; floats are IEEE.
    Add,
    Sub,
    Mul,
    /// Float division (IEEE).
    FDiv,
    /// Integer division rounding toward zero. The divisor must be nonzero and the pair must not
    /// be (MIN, -1): the lowering guards both (a tier may trap otherwise).
    SDiv,
    UDiv,
    /// Remainder with the dividend's sign; same preconditions as `SDiv`.
    SRem,
    URem,
    /// Bitwise (integers and `Pred`).
    And,
    Or,
    Xor,
    /// Shifts: the amount must be below the bit width (the lowering guards it).
    Shl,
    LShr,
    AShr,
    SMax,
    SMin,
    UMax,
    UMin,
    /// Float maximum/minimum propagating NaN (`llvm.maximum`, Cranelift `fmax`); -0.0 < +0.0.
    FMax,
    FMin,
}

/// Comparison conditions; the result is `Pred`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Slt,
    Sle,
    Sgt,
    Sge,
    Ult,
    Ule,
    Ugt,
    Uge,
    /// Ordered float comparisons (false when either side is NaN) ...
    FEq,
    FLt,
    FLe,
    FGt,
    FGe,
    /// ... except `FNe`, which is unordered (true when either side is NaN), as IEEE `!=`.
    FNe,
}

/// Conversions between register types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CastOp {
    /// Integer (or `Pred`) to a wider integer, sign-extending (`Pred` true becomes -1).
    SExt,
    /// Integer (or `Pred`) to a wider integer, zero-extending (`Pred` true becomes 1).
    ZExt,
    /// Integer to a narrower integer, keeping the low bits; to `Pred`: the low bit.
    Trunc,
    SIToFP,
    UIToFP,
    /// Float to integer rounding toward zero and saturating; NaN becomes 0.
    FPToSISat,
    FPToUISat,
    /// f32 to f64 (exact) and f64 to f32 (round to nearest even).
    FPExt,
    FPTrunc,
    /// Same-width reinterpretation (I32 <-> F32, I64 <-> F64).
    Bitcast,
    /// `I16` f16 bits to the `F32` of the same value (exact), a NaN quieted with its payload
    /// kept in the upper bits: x86's `vcvtph2ps`, AArch64's `fcvt`, the `half` crate.
    F16ToF32,
    /// `F32` to `I16` f16 bits rounding to nearest even (overflow to infinity, subnormals
    /// kept), a NaN quieted with the upper 10 bits of its payload: `vcvtps2ph`, `fcvt`.
    /// Tiers without such an instruction run `half_casts::expand`'s integer sequence.
    F32ToF16,
}

/// Scalar math functions that tiers call: each maps to a C symbol, so the same name resolves
/// in the JIT (runtime symbol table) and in AOT objects (libm or the runtime library). The
/// lowering spells f32 transcendental functions out as inline IR instead (`emit::math`), so
/// loops holding them vectorize; these calls remain for f64 and the functions without an
/// inline form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathFn {
    Exp,
    Expm1,
    Log,
    Log1p,
    Sin,
    Cos,
    Tan,
    Tanh,
    Atan2,
    Pow,
    Cbrt,
    Erf,
    /// Round half away from zero (C `round`).
    Round,
    /// C `fmod`: remainder with the dividend's sign.
    Fmod,
    /// C `hypot`: `sqrt(x*x + y*y)` without overflow or underflow in between; infinite when
    /// either side is, even if the other is NaN.
    Hypot,
    Sinh,
    Cosh,
}

impl MathFn {
    pub const ALL: [MathFn; 17] = [
        MathFn::Exp,
        MathFn::Expm1,
        MathFn::Log,
        MathFn::Log1p,
        MathFn::Sin,
        MathFn::Cos,
        MathFn::Tan,
        MathFn::Tanh,
        MathFn::Atan2,
        MathFn::Pow,
        MathFn::Cbrt,
        MathFn::Erf,
        MathFn::Round,
        MathFn::Fmod,
        MathFn::Hypot,
        MathFn::Sinh,
        MathFn::Cosh,
    ];

    /// The C symbol for this function on `ty` (F32 or F64).
    pub fn symbol(self, ty: Ty) -> &'static str {
        let f32 = ty == Ty::F32;
        macro_rules! pick {
            ($f:literal, $d:literal) => {
                if f32 {
                    $f
                } else {
                    $d
                }
            };
        }
        match self {
            MathFn::Exp => pick!("expf", "exp"),
            MathFn::Expm1 => pick!("expm1f", "expm1"),
            MathFn::Log => pick!("logf", "log"),
            MathFn::Log1p => pick!("log1pf", "log1p"),
            MathFn::Sin => pick!("sinf", "sin"),
            MathFn::Cos => pick!("cosf", "cos"),
            MathFn::Tan => pick!("tanf", "tan"),
            MathFn::Tanh => pick!("tanhf", "tanh"),
            MathFn::Atan2 => pick!("atan2f", "atan2"),
            MathFn::Pow => pick!("powf", "pow"),
            MathFn::Cbrt => pick!("cbrtf", "cbrt"),
            MathFn::Erf => pick!("erff", "erf"),
            MathFn::Round => pick!("roundf", "round"),
            MathFn::Fmod => pick!("fmodf", "fmod"),
            MathFn::Hypot => pick!("hypotf", "hypot"),
            MathFn::Sinh => pick!("sinhf", "sinh"),
            MathFn::Cosh => pick!("coshf", "cosh"),
        }
    }
    /// Number of arguments (all of the same float type as the result).
    pub fn arity(self) -> usize {
        match self {
            MathFn::Atan2 | MathFn::Pow | MathFn::Fmod | MathFn::Hypot => 2,
            _ => 1,
        }
    }
}

/// The right-hand side of a [`Stmt::Let`].
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Const(Const),
    /// Element `index` of buffer `buf`, read as `mem`; the result type is `mem.reg()`.
    Load {
        buf: BufId,
        index: IndexExpr,
        mem: MemType,
    },
    /// The value of an index expression as an `I64` (iota, data-dependent index math).
    Index(IndexExpr),
    /// The current value of a local.
    GetLocal(LocalId),
    Unary {
        op: UnOp,
        ty: Ty,
        a: ValueId,
    },
    Binary {
        op: BinOp,
        ty: Ty,
        a: ValueId,
        b: ValueId,
    },
    /// Compares two values of type `ty`; the result is `Pred`.
    Cmp {
        op: CmpOp,
        ty: Ty,
        a: ValueId,
        b: ValueId,
    },
    /// `cond ? a : b`, all of type `ty` (`cond` is `Pred`).
    Select {
        ty: Ty,
        cond: ValueId,
        a: ValueId,
        b: ValueId,
    },
    Cast {
        op: CastOp,
        from: Ty,
        to: Ty,
        a: ValueId,
    },
    /// `a * b + c` rounded once (IEEE fusedMultiplyAdd), all floats of type `ty`. Lowering
    /// emits it only for targets with fused multiply-add instructions
    /// ([`crate::LowerOptions::fma`]); elsewhere a tier may call `fma`/`fmaf`.
    Fma {
        ty: Ty,
        a: ValueId,
        b: ValueId,
        c: ValueId,
    },
    /// A scalar math function on floats of type `ty`.
    Math {
        func: MathFn,
        ty: Ty,
        args: Vec<ValueId>,
    },
    /// The predicate `a`, or true: a vector loop gives true for every lane of an iteration in
    /// which any lane's `a` holds, so it can branch once per vector. Code run under it must
    /// therefore compute the same whether or not it runs where `a` is false (it only selects,
    /// by `a`, between what it computes and what was there). Everywhere else it is `a`.
    AnyLane {
        a: ValueId,
    },
}

/// Adds every `Let` of `body` (in its loops and branches too) to `defs`, by the value it
/// defines (ids are unique kernel-wide).
pub(crate) fn definitions<'k>(body: &'k [Stmt], defs: &mut std::collections::HashMap<ValueId, &'k Op>) {
    for s in body {
        match s {
            Stmt::Let(v, op) => {
                defs.insert(*v, op);
            }
            Stmt::Loop(l) => definitions(&l.body, defs),
            Stmt::If { then_body, else_body, .. } => {
                definitions(then_body, defs);
                definitions(else_body, defs);
            }
            _ => {}
        }
    }
}

impl Op {
    /// The values `op` computes from (an index's value sources are not among them).
    pub fn operands(&self) -> Vec<ValueId> {
        match self {
            Op::Const(_) | Op::GetLocal(_) | Op::Load { .. } | Op::Index(_) => Vec::new(),
            Op::Unary { a, .. } | Op::Cast { a, .. } | Op::AnyLane { a } => vec![*a],
            Op::Binary { a, b, .. } | Op::Cmp { a, b, .. } => vec![*a, *b],
            Op::Select { cond, a, b, .. } => vec![*cond, *a, *b],
            Op::Fma { a, b, c, .. } => vec![*a, *b, *c],
            Op::Math { args, .. } => args.clone(),
        }
    }
}

/// An argument of a runtime call.
#[derive(Clone, Debug, PartialEq)]
pub enum CallArg {
    /// The address of element `index` of buffer `buf` (in `mem` elements of that buffer).
    Ptr { buf: BufId, index: IndexExpr },
    /// A 64-bit integer constant.
    I64(i64),
    /// A value (passed with its register type).
    Value(ValueId),
}

/// Statements.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Let(ValueId, Op),
    /// `for var in start..end { body }` (step 1; empty when `end <= start`).
    Loop(Loop),
    DeclLocal {
        local: LocalId,
        ty: Ty,
        init: ValueId,
    },
    SetLocal {
        local: LocalId,
        value: ValueId,
    },
    /// Writes `value` (of type `mem.reg()`) as element `index` of `buf`.
    Store {
        buf: BufId,
        index: IndexExpr,
        mem: MemType,
        value: ValueId,
    },
    If {
        cond: ValueId,
        then_body: Vec<Stmt>,
        else_body: Vec<Stmt>,
    },
    /// Calls runtime function `func` (a C symbol of the runtime library, e.g.
    /// `tessera_rt_gemm_f32`), returning nothing.
    Call {
        func: String,
        args: Vec<CallArg>,
    },
}

/// How a loop's trip count relates to the vector width it asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tail {
    /// The trip count is a multiple of the vector width (tile-aligned, or padded to the tile
    /// with padding slots the kernel may write but never reads as data).
    None,
    /// The last `trip % width` iterations run scalar.
    Peel,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    pub var: VarId,
    pub start: i64,
    pub end: i64,
    /// A hint: iterations are independent (but for `reductions`) and `vector_width` lanes may
    /// run together (1 = scalar). Only innermost loops carry a width above 1, but for lane
    /// reductions, where it is the lane count.
    pub vector_width: u32,
    pub tail: Tail,
    pub body: Vec<Stmt>,
    /// Locals accumulated in lanes (module doc, "Lane reductions"); empty for plain loops.
    /// Not a hint: it fixes the order of the accumulation.
    pub reductions: Vec<Reduction>,
}

/// A local that a loop accumulates in lanes with `op` on values of `ty`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reduction {
    pub local: LocalId,
    pub op: BinOp,
    pub ty: Ty,
}

impl Reduction {
    /// The value lanes start from: `op(x, identity) == x` bit for bit, for every `x` (-0.0
    /// for a float sum, so that a sum of -0.0s stays -0.0). `None` for ops without one.
    pub fn identity(self) -> Option<Const> {
        let (op, ty) = (self.op, self.ty);
        let int = |bits: i64| Some(Const::Int { ty, bits });
        let float = |x: f64| match ty {
            Ty::F32 => Some(Const::F32((x as f32).to_bits())),
            _ => Some(Const::F64(x.to_bits())),
        };
        let ones = match ty {
            Ty::Pred => {
                return match op {
                    BinOp::And => Some(Const::Pred(true)),
                    BinOp::Or | BinOp::Xor => Some(Const::Pred(false)),
                    _ => None,
                }
            }
            _ => -1,
        };
        if ty.is_float() {
            return match op {
                BinOp::Add => float(-0.0),
                BinOp::Mul => float(1.0),
                BinOp::FMax => float(f64::NEG_INFINITY),
                BinOp::FMin => float(f64::INFINITY),
                _ => None,
            };
        }
        let bits = i64::from(ty.bits());
        let (min, max) = (-1i64 << (bits - 1), !(-1i64 << (bits - 1)));
        match op {
            BinOp::Add | BinOp::Or | BinOp::Xor | BinOp::UMax => int(0),
            BinOp::Mul => int(1),
            BinOp::And | BinOp::UMin => int(ones),
            BinOp::SMax => int(min),
            BinOp::SMin => int(max),
            _ => None,
        }
    }
}

/// The parallel outer dimension of a kernel (see the module doc's calling convention).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub var: VarId,
    pub extent: i64,
}

/// One buffer parameter of a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelBuffer {
    /// For the text form and diagnostics (the HLO buffer's name).
    pub name: String,
    pub mem: MemType,
    /// Physical size in elements of `mem` (padding included): every access is below it.
    pub len: i64,
    /// False for buffers the kernel only reads.
    pub writable: bool,
}

/// Entries of the geometry descriptor `tessera_rt_conv_f32`/`_f64` read before the records of
/// the spatial dimensions (the full layout is documented on the runtime function and in the
/// interpreter, which runs the same contract).
pub const CONV_DESC_HEADER: usize = 13;
/// Entries per spatial dimension in a convolution descriptor.
pub const CONV_DESC_PER_DIM: usize = 11;

/// A compiled unit: a loop nest over physical buffers.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// A symbol-safe name, unique within a program.
    pub name: String,
    pub buffers: Vec<KernelBuffer>,
    pub grid: Grid,
    pub body: Vec<Stmt>,
}
