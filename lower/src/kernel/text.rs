//! The kernel IR's text form: what filetests compare byte for byte and what diagnostics quote.
//!
//! The syntax follows Cranelift's CLIF in spirit: one statement per line, two-space
//! indentation, `%N` for values, `vN` for loop variables, `gN` for the grid variable, `lN` for
//! locals and `bN` for buffers. Operations print as `name.type operands`; casts as
//! `name.from.to`. Index expressions print their terms in stored order as
//! `((src / div) % modulo)*scale`, leaving out a div of 1, a missing modulo and a scale of 1;
//! negative scales and offsets print as subtraction, and the offset comes last.
//!
//! ```text
//! kernel fused_add(b0: f32[1200] ro "p0", b1: f32[1200] rw "out") grid g0 in 0..2 {
//!   for v1 in 0..1024 vector(16) {
//!     %0 = load.f32 b0[g0*1024 + v1]
//!     %1 = fadd.f32 %0, %0
//!     store.f32 b1[g0*1024 + v1], %1
//!   }
//! }
//! ```

use std::fmt::{self, Write};

use super::*;

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ty::Pred => "pred",
            Ty::I8 => "i8",
            Ty::I16 => "i16",
            Ty::I32 => "i32",
            Ty::I64 => "i64",
            Ty::F32 => "f32",
            Ty::F64 => "f64",
        })
    }
}

/// `pred` is one byte per predicate; packed sub-byte elements print as `uN` (zero-extended
/// integers) or `predN` (packed predicates). `Scalar(Pred)` is not a valid memory type (the
/// verifier rejects it) but still prints, as `scalar.pred`, so diagnostics can show it.
impl fmt::Display for MemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemType::Pred => f.write_str("pred"),
            MemType::Scalar(Ty::Pred) => f.write_str("scalar.pred"),
            MemType::Scalar(t) => write!(f, "{t}"),
            MemType::Packed { bits, pred: false } => write!(f, "u{bits}"),
            MemType::Packed { bits, pred: true } => write!(f, "pred{bits}"),
        }
    }
}

/// The name a variable prints under: the grid variable is `gN`, every other one `vN`. The
/// printer only knows which one is the grid through the kernel, so free-standing index
/// expressions print every variable as `vN`.
#[derive(Clone, Copy)]
struct Names {
    grid: Option<VarId>,
}

impl Names {
    fn var(self, f: &mut dyn Write, v: VarId) -> fmt::Result {
        if Some(v) == self.grid {
            write!(f, "g{}", v.0)
        } else {
            write!(f, "v{}", v.0)
        }
    }

    fn src(self, f: &mut dyn Write, s: IndexSrc) -> fmt::Result {
        match s {
            IndexSrc::Var(v) => self.var(f, v),
            IndexSrc::Value(v) => write!(f, "%{}", v.0),
        }
    }

    fn index(self, f: &mut dyn Write, e: &IndexExpr) -> fmt::Result {
        for (i, t) in e.terms.iter().enumerate() {
            let negative = t.scale < 0;
            match (i, negative) {
                (0, false) => {}
                (0, true) => f.write_char('-')?,
                (_, false) => f.write_str(" + ")?,
                (_, true) => f.write_str(" - ")?,
            }
            let compound = t.div != 1 || t.modulo.is_some();
            let scaled = t.scale.unsigned_abs() != 1;
            if compound && scaled {
                f.write_char('(')?;
            }
            if t.modulo.is_some() && t.div != 1 {
                f.write_char('(')?;
            }
            self.src(f, t.src)?;
            if t.div != 1 {
                write!(f, " / {}", t.div)?;
            }
            if let Some(m) = t.modulo {
                if t.div != 1 {
                    f.write_char(')')?;
                }
                write!(f, " % {m}")?;
            }
            if compound && scaled {
                f.write_char(')')?;
            }
            if scaled {
                write!(f, "*{}", t.scale.unsigned_abs())?;
            }
        }
        if e.terms.is_empty() {
            write!(f, "{}", e.offset)
        } else if e.offset > 0 {
            write!(f, " + {}", e.offset)
        } else if e.offset < 0 {
            write!(f, " - {}", e.offset.unsigned_abs())
        } else {
            Ok(())
        }
    }

    fn op(self, f: &mut dyn Write, op: &Op) -> fmt::Result {
        match op {
            Op::Const(c) => write_const(f, *c),
            Op::Load { buf, index, mem } => {
                write!(f, "load.{mem} b{}[", buf.0)?;
                self.index(f, index)?;
                f.write_char(']')
            }
            Op::Index(e) => {
                f.write_str("index ")?;
                self.index(f, e)
            }
            Op::GetLocal(l) => write!(f, "get l{}", l.0),
            Op::AnyLane { a } => write!(f, "any_lane %{}", a.0),
            Op::Unary { op, ty, a } => write!(f, "{}.{ty} %{}", unary_name(*op), a.0),
            Op::Binary { op, ty, a, b } => write!(f, "{}.{ty} %{}, %{}", binary_name(*op, *ty), a.0, b.0),
            Op::Cmp { op, ty, a, b } => write!(f, "cmp.{}.{ty} %{}, %{}", cmp_name(*op), a.0, b.0),
            Op::Select { ty, cond, a, b } => write!(f, "select.{ty} %{}, %{}, %{}", cond.0, a.0, b.0),
            Op::Fma { ty, a, b, c } => write!(f, "fma.{ty} %{}, %{}, %{}", a.0, b.0, c.0),
            Op::Cast { op, from, to, a } => write!(f, "{}.{from}.{to} %{}", cast_name(*op), a.0),
            Op::Math { func, ty, args } => {
                write!(f, "{}.{ty}", math_name(*func))?;
                for (i, a) in args.iter().enumerate() {
                    f.write_str(if i == 0 { " " } else { ", " })?;
                    write!(f, "%{}", a.0)?;
                }
                Ok(())
            }
        }
    }

    /// The first line of a statement (a loop or branch ends with `{`), without indentation or
    /// newline.
    fn head(self, f: &mut dyn Write, stmt: &Stmt) -> fmt::Result {
        match stmt {
            Stmt::Let(v, op) => {
                write!(f, "%{} = ", v.0)?;
                self.op(f, op)
            }
            Stmt::Loop(l) => {
                f.write_str("for ")?;
                self.var(f, l.var)?;
                write!(f, " in {}..{}", l.start, l.end)?;
                if l.vector_width != 1 {
                    write!(f, " vector({})", l.vector_width)?;
                }
                if l.tail == Tail::Peel {
                    f.write_str(" peel")?;
                }
                for r in &l.reductions {
                    write!(f, " reduce({} l{})", binary_name(r.op, r.ty), r.local.0)?;
                }
                f.write_str(" {")
            }
            Stmt::DeclLocal { local, ty, init } => write!(f, "local l{}: {ty} = %{}", local.0, init.0),
            Stmt::SetLocal { local, value } => write!(f, "set l{} = %{}", local.0, value.0),
            Stmt::Store { buf, index, mem, value } => {
                write!(f, "store.{mem} b{}[", buf.0)?;
                self.index(f, index)?;
                write!(f, "], %{}", value.0)
            }
            Stmt::If { cond, .. } => write!(f, "if %{} {{", cond.0),
            Stmt::Call { func, args } => {
                write!(f, "call {func}(")?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    match a {
                        CallArg::Ptr { buf, index } => {
                            write!(f, "&b{}[", buf.0)?;
                            self.index(f, index)?;
                            f.write_char(']')?;
                        }
                        CallArg::I64(n) => write!(f, "{n}")?,
                        CallArg::Value(v) => write!(f, "%{}", v.0)?,
                    }
                }
                f.write_char(')')
            }
        }
    }

    fn stmt(self, f: &mut dyn Write, stmt: &Stmt, depth: usize) -> fmt::Result {
        indent(f, depth)?;
        self.head(f, stmt)?;
        f.write_char('\n')?;
        match stmt {
            Stmt::Loop(l) => {
                self.body(f, &l.body, depth + 1)?;
                indent(f, depth)?;
                f.write_str("}\n")
            }
            Stmt::If { then_body, else_body, .. } => {
                self.body(f, then_body, depth + 1)?;
                indent(f, depth)?;
                if else_body.is_empty() {
                    f.write_str("}\n")
                } else {
                    f.write_str("} else {\n")?;
                    self.body(f, else_body, depth + 1)?;
                    indent(f, depth)?;
                    f.write_str("}\n")
                }
            }
            _ => Ok(()),
        }
    }

    fn body(self, f: &mut dyn Write, body: &[Stmt], depth: usize) -> fmt::Result {
        body.iter().try_for_each(|s| self.stmt(f, s, depth))
    }
}

fn indent(f: &mut dyn Write, depth: usize) -> fmt::Result {
    for _ in 0..depth {
        f.write_str("  ")?;
    }
    Ok(())
}

/// Floats print as Rust's shortest round-trip decimal, which keeps -0.0 and infinities; NaNs
/// print their bits so payloads survive the text form.
fn write_const(f: &mut dyn Write, c: Const) -> fmt::Result {
    match c {
        Const::Pred(b) => write!(f, "const.pred {b}"),
        Const::Int { ty, bits } => {
            // Only the low bits matter: print them sign-extended so equal constants print alike.
            let shift = 64 - ty.bits().clamp(1, 64);
            write!(f, "const.{ty} {}", (bits << shift) >> shift)
        }
        Const::F32(b) => {
            let x = f32::from_bits(b);
            if x.is_nan() {
                write!(f, "const.f32 nan:0x{b:08x}")
            } else {
                write!(f, "const.f32 {x:?}")
            }
        }
        Const::F64(b) => {
            let x = f64::from_bits(b);
            if x.is_nan() {
                write!(f, "const.f64 nan:0x{b:016x}")
            } else {
                write!(f, "const.f64 {x:?}")
            }
        }
    }
}

fn unary_name(op: UnOp) -> &'static str {
    match op {
        UnOp::Neg => "neg",
        UnOp::Abs => "abs",
        UnOp::Not => "not",
        UnOp::Sqrt => "sqrt",
        UnOp::Floor => "floor",
        UnOp::Ceil => "ceil",
        UnOp::Trunc => "trunc",
        UnOp::RoundEven => "roundeven",
        UnOp::Popcnt => "popcnt",
        UnOp::Clz => "clz",
    }
}

/// Add, Sub and Mul serve integers and floats; the `i`/`f` prefix makes the text say which.
fn binary_name(op: BinOp, ty: Ty) -> &'static str {
    let float = ty.is_float();
    match op {
        BinOp::Add if float => "fadd",
        BinOp::Add => "iadd",
        BinOp::Sub if float => "fsub",
        BinOp::Sub => "isub",
        BinOp::Mul if float => "fmul",
        BinOp::Mul => "imul",
        BinOp::FDiv => "fdiv",
        BinOp::SDiv => "sdiv",
        BinOp::UDiv => "udiv",
        BinOp::SRem => "srem",
        BinOp::URem => "urem",
        BinOp::And => "and",
        BinOp::Or => "or",
        BinOp::Xor => "xor",
        BinOp::Shl => "shl",
        BinOp::LShr => "lshr",
        BinOp::AShr => "ashr",
        BinOp::SMax => "smax",
        BinOp::SMin => "smin",
        BinOp::UMax => "umax",
        BinOp::UMin => "umin",
        BinOp::FMax => "fmax",
        BinOp::FMin => "fmin",
    }
}

fn cmp_name(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "eq",
        CmpOp::Ne => "ne",
        CmpOp::Slt => "slt",
        CmpOp::Sle => "sle",
        CmpOp::Sgt => "sgt",
        CmpOp::Sge => "sge",
        CmpOp::Ult => "ult",
        CmpOp::Ule => "ule",
        CmpOp::Ugt => "ugt",
        CmpOp::Uge => "uge",
        CmpOp::FEq => "feq",
        CmpOp::FLt => "flt",
        CmpOp::FLe => "fle",
        CmpOp::FGt => "fgt",
        CmpOp::FGe => "fge",
        CmpOp::FNe => "fne",
    }
}

/// The integer truncation prints as `itrunc` so it never reads like the float rounding
/// `trunc.f32`.
fn cast_name(op: CastOp) -> &'static str {
    match op {
        CastOp::SExt => "sext",
        CastOp::ZExt => "zext",
        CastOp::Trunc => "itrunc",
        CastOp::SIToFP => "sitofp",
        CastOp::UIToFP => "uitofp",
        CastOp::FPToSISat => "fptosi_sat",
        CastOp::FPToUISat => "fptoui_sat",
        CastOp::FPExt => "fpext",
        CastOp::FPTrunc => "fptrunc",
        CastOp::Bitcast => "bitcast",
        CastOp::F16ToF32 => "f16_to_f32",
        CastOp::F32ToF16 => "f32_to_f16",
    }
}

fn math_name(func: MathFn) -> &'static str {
    match func {
        MathFn::Exp => "exp",
        MathFn::Expm1 => "expm1",
        MathFn::Log => "log",
        MathFn::Log1p => "log1p",
        MathFn::Sin => "sin",
        MathFn::Cos => "cos",
        MathFn::Tan => "tan",
        MathFn::Tanh => "tanh",
        MathFn::Atan2 => "atan2",
        MathFn::Pow => "pow",
        MathFn::Cbrt => "cbrt",
        MathFn::Erf => "erf",
        MathFn::Round => "round",
        MathFn::Fmod => "fmod",
        MathFn::Hypot => "hypot",
        MathFn::Sinh => "sinh",
        MathFn::Cosh => "cosh",
    }
}

/// Prints every variable as `vN` (no kernel is at hand to say which one is the grid).
impl fmt::Display for IndexExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Names { grid: None }.index(f, self)
    }
}

/// The right-hand side of a `Let`; variables print as `vN`.
impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Names { grid: None }.op(f, self)
    }
}

/// The whole statement, nested bodies included; variables print as `vN`.
impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Names { grid: None }.stmt(f, self, 0)
    }
}

impl Kernel {
    /// One line naming `stmt` for diagnostics: the statement itself, or a loop's or branch's
    /// first line, with the grid variable named as in the kernel's text.
    pub fn stmt_head(&self, stmt: &Stmt) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = Names { grid: Some(self.grid.var) }.head(&mut s, stmt);
        s
    }

    /// An index expression as it prints inside this kernel.
    pub fn index_text(&self, e: &IndexExpr) -> String {
        let mut s = String::new();
        let _ = Names { grid: Some(self.grid.var) }.index(&mut s, e);
        s
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel {}(", self.name)?;
        for (i, b) in self.buffers.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            let access = if b.writable { "rw" } else { "ro" };
            write!(f, "b{i}: {}[{}] {access} {:?}", b.mem, b.len, b.name)?;
        }
        let names = Names { grid: Some(self.grid.var) };
        f.write_str(") grid ")?;
        names.var(f, self.grid.var)?;
        writeln!(f, " in 0..{} {{", self.grid.extent)?;
        names.body(f, &self.body, 1)?;
        f.write_str("}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(src: IndexSrc, div: i64, modulo: Option<i64>, scale: i64) -> Term {
        Term { src, div, modulo, scale }
    }

    #[test]
    fn elementwise_kernel_prints_as_in_the_design() {
        let mut b = KernelBuilder::new("fused_add", 38);
        let g = b.grid_var();
        let p0 = b.buffer("p0", MemType::Scalar(Ty::F32), 1200, false);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), 1200, true);
        let v1 = b.begin_loop(0, 8);
        let v2 = b.begin_loop(0, 128);
        let mut idx = IndexExpr::var(g, 1024);
        idx.terms.push(term(IndexSrc::Var(v1), 1, None, 128));
        idx.terms.push(term(IndexSrc::Var(v2), 1, None, 1));
        let x = b.load(p0, idx.clone());
        let y = b.binary(BinOp::Add, Ty::F32, x, x);
        b.store(out, idx, y);
        b.end_loop_vectorized(16, Tail::None);
        b.end_loop();
        let k = b.finish();
        assert_eq!(
            k.to_string(),
            "kernel fused_add(b0: f32[1200] ro \"p0\", b1: f32[1200] rw \"out\") grid g0 in 0..38 {\n\
             \x20 for v1 in 0..8 {\n\
             \x20   for v2 in 0..128 vector(16) {\n\
             \x20     %0 = load.f32 b0[g0*1024 + v1*128 + v2]\n\
             \x20     %1 = fadd.f32 %0, %0\n\
             \x20     store.f32 b1[g0*1024 + v1*128 + v2], %1\n\
             \x20   }\n\
             \x20 }\n\
             }\n"
        );
    }

    #[test]
    fn index_terms_leave_out_trivial_parts() {
        let v = IndexSrc::Var(VarId(1));
        let e = IndexExpr {
            terms: vec![
                term(v, 4, Some(8), 128),
                term(v, 4, None, 2),
                term(v, 1, Some(8), 1),
                term(v, 4, Some(8), 1),
                term(IndexSrc::Value(ValueId(3)), 1, Some(5), -3),
                term(v, 1, None, -1),
            ],
            offset: -7,
        };
        assert_eq!(e.to_string(), "((v1 / 4) % 8)*128 + (v1 / 4)*2 + v1 % 8 + (v1 / 4) % 8 - (%3 % 5)*3 - v1 - 7");
        assert_eq!(IndexExpr::constant(0).to_string(), "0");
        assert_eq!(IndexExpr::constant(-4).to_string(), "-4");
        let lead_negative = IndexExpr { terms: vec![term(v, 1, None, -2)], offset: 9 };
        assert_eq!(lead_negative.to_string(), "-v1*2 + 9");
        let extreme = IndexExpr { terms: vec![term(v, 1, None, i64::MIN)], offset: i64::MIN };
        assert_eq!(extreme.to_string(), "-v1*9223372036854775808 - 9223372036854775808");
    }

    #[test]
    fn every_statement_kind_prints() {
        let mut b = KernelBuilder::new("all", 1);
        let a = b.buffer("a", MemType::Packed { bits: 4, pred: false }, 16, false);
        let p = b.buffer("p", MemType::Pred, 4, true);
        let q = b.buffer("q", MemType::Packed { bits: 1, pred: true }, 8, true);
        let c = b.buffer("c", MemType::Scalar(Ty::F64), 4, true);
        let zero = b.constant(Const::F64(0.0f64.to_bits()));
        let acc = b.local(Ty::F64, zero);
        let v1 = b.begin_loop(0, 16);
        let x = b.load(a, IndexExpr::var(v1, 1));
        let xi = b.cast(CastOp::ZExt, Ty::I8, Ty::I32, x);
        let xf = b.cast(CastOp::SIToFP, Ty::I32, Ty::F64, xi);
        let e = b.math(MathFn::Exp, Ty::F64, vec![xf]);
        let w = b.math(MathFn::Pow, Ty::F64, vec![e, xf]);
        let old = b.get_local(acc);
        let sum = b.binary(BinOp::Add, Ty::F64, old, w);
        b.set_local(acc, sum);
        b.end_loop_vectorized(4, Tail::Peel);
        let total = b.get_local(acc);
        let nz = b.cmp(CmpOp::FNe, Ty::F64, total, zero);
        b.if_else(
            nz,
            |b| {
                let t = b.constant(Const::Pred(true));
                b.store(p, IndexExpr::constant(1), t);
            },
            |b| {
                let i = b.let_(Op::Index(IndexExpr::constant(3)));
                let n = b.unary(UnOp::Neg, Ty::I64, i);
                let t = b.cast(CastOp::Trunc, Ty::I64, Ty::Pred, n);
                b.store(q, IndexExpr::constant(2), t);
            },
        );
        let s = b.select(Ty::F64, nz, total, zero);
        b.store(c, IndexExpr::constant(0), s);
        b.if_else(nz, |b| b.store(c, IndexExpr::constant(1), s), |_| {});
        b.call(
            "tessera_rt_gemm_f64",
            vec![CallArg::I64(1), CallArg::Ptr { buf: c, index: IndexExpr::constant(2) }, CallArg::Value(s)],
        );
        let k = b.finish();
        let expected = r#"kernel all(b0: u4[16] ro "a", b1: pred[4] rw "p", b2: pred1[8] rw "q", b3: f64[4] rw "c") grid g0 in 0..1 {
  %0 = const.f64 0.0
  local l0: f64 = %0
  for v1 in 0..16 vector(4) peel {
    %1 = load.u4 b0[v1]
    %2 = zext.i8.i32 %1
    %3 = sitofp.i32.f64 %2
    %4 = exp.f64 %3
    %5 = pow.f64 %4, %3
    %6 = get l0
    %7 = fadd.f64 %6, %5
    set l0 = %7
  }
  %8 = get l0
  %9 = cmp.fne.f64 %8, %0
  if %9 {
    %10 = const.pred true
    store.pred b1[1], %10
  } else {
    %11 = index 3
    %12 = neg.i64 %11
    %13 = itrunc.i64.pred %12
    store.pred1 b2[2], %13
  }
  %14 = select.f64 %9, %8, %0
  store.f64 b3[0], %14
  if %9 {
    store.f64 b3[1], %14
  }
  call tessera_rt_gemm_f64(1, &b3[2], %14)
}
"#;
        assert_eq!(k.to_string(), expected);
    }

    #[test]
    fn constants_keep_their_bits() {
        let show = |c: Const| Op::Const(c).to_string();
        assert_eq!(show(Const::F32((-0.0f32).to_bits())), "const.f32 -0.0");
        assert_eq!(show(Const::F32(f32::INFINITY.to_bits())), "const.f32 inf");
        assert_eq!(show(Const::F32(0x7fc0_0001)), "const.f32 nan:0x7fc00001");
        assert_eq!(show(Const::F64(0xfff8_0000_0000_0000)), "const.f64 nan:0xfff8000000000000");
        assert_eq!(show(Const::F32(1e30f32.to_bits())), "const.f32 1e30");
        assert_eq!(show(Const::F64(0.1f64.to_bits())), "const.f64 0.1");
        assert_eq!(show(Const::Int { ty: Ty::I8, bits: 255 }), "const.i8 -1");
        assert_eq!(show(Const::Int { ty: Ty::I32, bits: 0x8000_0000 }), "const.i32 -2147483648");
        assert_eq!(show(Const::Int { ty: Ty::I64, bits: i64::MIN }), "const.i64 -9223372036854775808");
        assert_eq!(show(Const::Pred(false)), "const.pred false");
    }

    #[test]
    fn op_names_say_int_or_float() {
        let (a, b) = (ValueId(0), ValueId(1));
        let bin = |op, ty| Op::Binary { op, ty, a, b }.to_string();
        assert_eq!(bin(BinOp::Add, Ty::I32), "iadd.i32 %0, %1");
        assert_eq!(bin(BinOp::Mul, Ty::F64), "fmul.f64 %0, %1");
        assert_eq!(bin(BinOp::Sub, Ty::I8), "isub.i8 %0, %1");
        assert_eq!(bin(BinOp::FMax, Ty::F32), "fmax.f32 %0, %1");
        assert_eq!(bin(BinOp::AShr, Ty::I16), "ashr.i16 %0, %1");
        assert_eq!(Op::Unary { op: UnOp::Trunc, ty: Ty::F32, a }.to_string(), "trunc.f32 %0");
        assert_eq!(
            Op::Cast { op: CastOp::FPToSISat, from: Ty::F32, to: Ty::I32, a }.to_string(),
            "fptosi_sat.f32.i32 %0"
        );
        assert_eq!(Op::Cmp { op: CmpOp::Ult, ty: Ty::I64, a, b }.to_string(), "cmp.ult.i64 %0, %1");
        assert_eq!(Op::Math { func: MathFn::Atan2, ty: Ty::F32, args: vec![a, b] }.to_string(), "atan2.f32 %0, %1");
    }

    #[test]
    fn buffer_names_are_quoted_and_escaped() {
        let k = Kernel {
            name: "k".into(),
            buffers: vec![KernelBuffer {
                name: "a \"b\"".into(),
                mem: MemType::Scalar(Ty::I64),
                len: 2,
                writable: true,
            }],
            grid: Grid { var: VarId(7), extent: 3 },
            body: vec![Stmt::Loop(Loop {
                reductions: vec![],
                var: VarId(8),
                start: -2,
                end: 5,
                vector_width: 1,
                tail: Tail::Peel,
                body: vec![],
            })],
        };
        assert_eq!(
            k.to_string(),
            "kernel k(b0: i64[2] rw \"a \\\"b\\\"\") grid g7 in 0..3 {\n  for v8 in -2..5 peel {\n  }\n}\n"
        );
        assert_eq!(k.stmt_head(&k.body[0]), "for v8 in -2..5 peel {");
        assert_eq!(k.index_text(&IndexExpr::var(VarId(7), 3)), "g7*3");
    }
}
