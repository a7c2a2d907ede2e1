//! Every scalar op of the kernel IR on every type it applies to, on edge-case operands, against
//! a reference written here from the IR's documented semantics.

mod common;

use common::*;
use tessera_lower::kernel::*;

const INTS: [Ty; 4] = [Ty::I8, Ty::I16, Ty::I32, Ty::I64];
const FLOATS: [Ty; 2] = [Ty::F32, Ty::F64];

fn f(ty: Ty, v: u64) -> f64 {
    if ty == Ty::F32 {
        f64::from(f32::from_bits(v as u32))
    } else {
        f64::from_bits(v)
    }
}

/// A float result of type `ty` from an f64 computed exactly (or from an f32 computation).
fn fbits(ty: Ty, v: f64) -> u64 {
    if ty == Ty::F32 {
        u64::from((v as f32).to_bits())
    } else {
        v.to_bits()
    }
}

/// Runs `out[g] = op(a[g], b[g])` (or unary, with `b` unused) for every sample pair.
fn run_pointwise(
    name: &str,
    in_ty: Ty,
    out_ty: Ty,
    pairs: &[(u64, u64)],
    build: impl Fn(&mut KernelBuilder, ValueId, ValueId) -> ValueId,
) -> Vec<u64> {
    let n = pairs.len() as i64;
    let mut k = KernelBuilder::new(name, n);
    let mem = |t: Ty| if t == Ty::Pred { MemType::Pred } else { MemType::Scalar(t) };
    let a = k.buffer("a", mem(in_ty), n, false);
    let b = k.buffer("b", mem(in_ty), n, false);
    let out = k.buffer("out", mem(out_ty), n, true);
    let g = k.grid_var();
    let x = k.load(a, IndexExpr::var(g, 1));
    let y = k.load(b, IndexExpr::var(g, 1));
    let r = build(&mut k, x, y);
    k.store(out, IndexExpr::var(g, 1), r);
    let kernel = k.finish();
    let mut bufs = vec![
        encode(in_ty, &pairs.iter().map(|p| p.0).collect::<Vec<_>>()),
        encode(in_ty, &pairs.iter().map(|p| p.1).collect::<Vec<_>>()),
        vec![0xcc; pairs.len() * bytes(out_ty)],
    ];
    run(&kernel, &mut bufs);
    decode(out_ty, &bufs[2])
}

fn all_pairs(ty: Ty) -> Vec<(u64, u64)> {
    let s = samples(ty);
    s.iter().flat_map(|&a| s.iter().map(move |&b| (a, b))).collect()
}

fn check(what: &str, ty: Ty, pairs: &[(u64, u64)], got: &[u64], expect: impl Fn(u64, u64) -> u64) {
    for (&(a, b), &g) in pairs.iter().zip(got) {
        let e = expect(a, b);
        assert!(same(ty, g, e), "{what} on {ty:?}: ({a:#x}, {b:#x}) gave {g:#x}, expected {e:#x}");
    }
}

fn int_binary(op: BinOp, ty: Ty, a: u64, b: u64) -> Option<u64> {
    let bits = ty.bits();
    let (sa, sb) = (sext(ty, a), sext(ty, b));
    let (ua, ub) = (mask(ty, a), mask(ty, b));
    let min = sext(ty, 1 << (bits - 1));
    Some(match op {
        BinOp::Add => ua.wrapping_add(ub),
        BinOp::Sub => ua.wrapping_sub(ub),
        BinOp::Mul => ua.wrapping_mul(ub),
        BinOp::SDiv | BinOp::SRem if sb == 0 || (sa == min && sb == -1) => return None,
        BinOp::UDiv | BinOp::URem if ub == 0 => return None,
        BinOp::SDiv => (sa / sb) as u64,
        BinOp::SRem => (sa % sb) as u64,
        BinOp::UDiv => ua / ub,
        BinOp::URem => ua % ub,
        BinOp::And => a & b,
        BinOp::Or => a | b,
        BinOp::Xor => a ^ b,
        BinOp::Shl | BinOp::LShr | BinOp::AShr if ub >= u64::from(bits) => return None,
        BinOp::Shl => ua << ub,
        BinOp::LShr => ua >> ub,
        BinOp::AShr => (sa >> ub) as u64,
        BinOp::SMax => sa.max(sb) as u64,
        BinOp::SMin => sa.min(sb) as u64,
        BinOp::UMax => ua.max(ub),
        BinOp::UMin => ua.min(ub),
        _ => return None,
    })
}

fn float_binary(op: BinOp, ty: Ty, a: u64, b: u64) -> u64 {
    let (x, y) = (f(ty, a), f(ty, b));
    let nan = if ty == Ty::F32 { u64::from(f32::NAN.to_bits()) } else { f64::NAN.to_bits() };
    let ordered = |pick_first: bool| {
        if x.is_nan() || y.is_nan() {
            nan
        } else if pick_first {
            fbits(ty, x)
        } else {
            fbits(ty, y)
        }
    };
    // In f32, compute in f32 so the rounding is the single-precision one.
    if ty == Ty::F32 {
        let (x, y) = (x as f32, y as f32);
        let r = match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::FDiv => x / y,
            BinOp::FMax => return ordered(x > y || (x == y && x.is_sign_positive())),
            BinOp::FMin => return ordered(x < y || (x == y && x.is_sign_negative())),
            _ => unreachable!(),
        };
        return u64::from(r.to_bits());
    }
    match op {
        BinOp::Add => (x + y).to_bits(),
        BinOp::Sub => (x - y).to_bits(),
        BinOp::Mul => (x * y).to_bits(),
        BinOp::FDiv => (x / y).to_bits(),
        BinOp::FMax => ordered(x > y || (x == y && x.is_sign_positive())),
        BinOp::FMin => ordered(x < y || (x == y && x.is_sign_negative())),
        _ => unreachable!(),
    }
}

#[test]
fn integer_binary_ops() {
    use BinOp::*;
    for op in [Add, Sub, Mul, SDiv, UDiv, SRem, URem, And, Or, Xor, Shl, LShr, AShr, SMax, SMin, UMax, UMin] {
        for ty in INTS {
            let pairs: Vec<_> =
                all_pairs(ty).into_iter().filter(|&(a, b)| int_binary(op, ty, a, b).is_some()).collect();
            assert!(pairs.len() > 20, "{op:?} {ty:?} has too few valid samples");
            let got = run_pointwise("ibin", ty, ty, &pairs, |k, x, y| k.binary(op, ty, x, y));
            check(&format!("{op:?}"), ty, &pairs, &got, |a, b| int_binary(op, ty, a, b).unwrap_or_default());
        }
    }
}

#[test]
fn float_binary_ops() {
    use BinOp::*;
    for op in [Add, Sub, Mul, FDiv, FMax, FMin] {
        for ty in FLOATS {
            let pairs = all_pairs(ty);
            let got = run_pointwise("fbin", ty, ty, &pairs, |k, x, y| k.binary(op, ty, x, y));
            check(&format!("{op:?}"), ty, &pairs, &got, |a, b| float_binary(op, ty, a, b));
        }
    }
}

#[test]
fn fmax_fmin_order_signed_zeros_and_propagate_nan() {
    for ty in FLOATS {
        let z = fbits(ty, 0.0);
        let nz = fbits(ty, -0.0);
        let one = fbits(ty, 1.0);
        let nan = fbits(ty, f64::NAN);
        let pairs = [(z, nz), (nz, z), (nan, one), (one, nan)];
        let max = run_pointwise("fmax", ty, ty, &pairs, |k, x, y| k.binary(BinOp::FMax, ty, x, y));
        let min = run_pointwise("fmin", ty, ty, &pairs, |k, x, y| k.binary(BinOp::FMin, ty, x, y));
        assert_eq!(&max[..2], &[z, z]);
        assert_eq!(&min[..2], &[nz, nz]);
        for v in max[2..].iter().chain(&min[2..]) {
            assert!(f(ty, *v).is_nan(), "{ty:?}: NaN must propagate, got {v:#x}");
        }
    }
}

#[test]
fn fmax_fmin_nan_payloads_are_the_first_nan_operand_quieted() {
    // The interpreter's choice (x + y on x86), kept by the tier so NaNs agree bit for bit.
    let (qa, qb, sig) = (0x7fc0_0abcu64, 0xffc0_0123u64, 0x7f80_0005u64);
    let one = u64::from(1f32.to_bits());
    let pairs = [(qa, one), (one, qa), (qa, qb), (qb, qa), (one, sig), (sig, qa)];
    let expect = [qa, qa, qa, qb, sig | 0x0040_0000, sig | 0x0040_0000];
    for op in [BinOp::FMax, BinOp::FMin] {
        let got = run_pointwise("nan", Ty::F32, Ty::F32, &pairs, |k, x, y| k.binary(op, Ty::F32, x, y));
        assert_eq!(got, expect, "{op:?}");
    }
}

#[test]
fn predicate_logic() {
    let pairs = all_pairs(Ty::Pred);
    for (op, e) in
        [(BinOp::And, (|a, b| a & b) as fn(u64, u64) -> u64), (BinOp::Or, |a, b| a | b), (BinOp::Xor, |a, b| a ^ b)]
    {
        let got = run_pointwise("pred", Ty::Pred, Ty::Pred, &pairs, |k, x, y| k.binary(op, Ty::Pred, x, y));
        check(&format!("{op:?}"), Ty::Pred, &pairs, &got, e);
    }
    let got = run_pointwise("pnot", Ty::Pred, Ty::Pred, &pairs, |k, x, _| k.unary(UnOp::Not, Ty::Pred, x));
    check("Not", Ty::Pred, &pairs, &got, |a, _| a ^ 1);
    // A stored predicate is exactly 0 or 1, never another nonzero byte.
    assert!(got.iter().all(|&v| v <= 1));
}

fn int_unary(op: UnOp, ty: Ty, a: u64) -> u64 {
    let bits = ty.bits();
    let ua = mask(ty, a);
    match op {
        UnOp::Neg => ua.wrapping_neg(),
        UnOp::Abs => sext(ty, a).wrapping_abs() as u64,
        UnOp::Not => !ua,
        UnOp::Popcnt => u64::from(ua.count_ones()),
        UnOp::Clz => u64::from(ua.leading_zeros() - (64 - bits)),
        _ => unreachable!(),
    }
}

fn float_unary(op: UnOp, ty: Ty, a: u64) -> u64 {
    if ty == Ty::F32 {
        let x = f32::from_bits(a as u32);
        let r = match op {
            UnOp::Neg => -x,
            UnOp::Abs => x.abs(),
            UnOp::Sqrt => x.sqrt(),
            UnOp::Floor => x.floor(),
            UnOp::Ceil => x.ceil(),
            UnOp::Trunc => x.trunc(),
            UnOp::RoundEven => x.round_ties_even(),
            _ => unreachable!(),
        };
        return u64::from(r.to_bits());
    }
    let x = f64::from_bits(a);
    let r = match op {
        UnOp::Neg => -x,
        UnOp::Abs => x.abs(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Floor => x.floor(),
        UnOp::Ceil => x.ceil(),
        UnOp::Trunc => x.trunc(),
        UnOp::RoundEven => x.round_ties_even(),
        _ => unreachable!(),
    };
    r.to_bits()
}

#[test]
fn unary_ops() {
    use UnOp::*;
    for ty in INTS {
        let pairs: Vec<_> = samples(ty).into_iter().map(|a| (a, 0)).collect();
        for op in [Neg, Abs, Not, Popcnt, Clz] {
            let got = run_pointwise("iun", ty, ty, &pairs, |k, x, _| k.unary(op, ty, x));
            check(&format!("{op:?}"), ty, &pairs, &got, |a, _| int_unary(op, ty, a));
        }
    }
    for ty in FLOATS {
        let pairs: Vec<_> = samples(ty).into_iter().map(|a| (a, 0)).collect();
        for op in [Neg, Abs, Sqrt, Floor, Ceil, Trunc, RoundEven] {
            let got = run_pointwise("fun", ty, ty, &pairs, |k, x, _| k.unary(op, ty, x));
            // Sign flips and clears keep NaN payloads: compare those bit for bit.
            for (&(a, _), &g) in pairs.iter().zip(&got) {
                let e = float_unary(op, ty, a);
                let exact = matches!(op, Neg | Abs);
                assert!(if exact { g == e } else { same(ty, g, e) }, "{op:?} {ty:?} on {a:#x}: {g:#x} vs {e:#x}");
            }
        }
    }
}

fn compare_ref(op: CmpOp, ty: Ty, a: u64, b: u64) -> Option<bool> {
    use CmpOp::*;
    if ty.is_float() {
        let (x, y) = (f(ty, a), f(ty, b));
        return Some(match op {
            FEq => x == y,
            FNe => x != y,
            FLt => x < y,
            FLe => x <= y,
            FGt => x > y,
            FGe => x >= y,
            _ => return None,
        });
    }
    let (sa, sb) = (sext(ty, a), sext(ty, b));
    let (ua, ub) = (mask(ty, a), mask(ty, b));
    Some(match op {
        Eq => ua == ub,
        Ne => ua != ub,
        Slt => sa < sb,
        Sle => sa <= sb,
        Sgt => sa > sb,
        Sge => sa >= sb,
        Ult => ua < ub,
        Ule => ua <= ub,
        Ugt => ua > ub,
        Uge => ua >= ub,
        _ => return None,
    })
}

#[test]
fn comparisons() {
    use CmpOp::*;
    for ty in [Ty::Pred, Ty::I8, Ty::I16, Ty::I32, Ty::I64, Ty::F32, Ty::F64] {
        let pairs = all_pairs(ty);
        for op in [Eq, Ne, Slt, Sle, Sgt, Sge, Ult, Ule, Ugt, Uge, FEq, FNe, FLt, FLe, FGt, FGe] {
            if compare_ref(op, ty, 0, 0).is_none() || (ty == Ty::Pred && !matches!(op, Eq | Ne)) {
                continue;
            }
            let got = run_pointwise("cmp", ty, Ty::Pred, &pairs, |k, x, y| k.cmp(op, ty, x, y));
            let pred_ty = if ty == Ty::Pred { Ty::I8 } else { ty };
            check(&format!("{op:?}"), Ty::I8, &pairs, &got, |a, b| {
                u64::from(compare_ref(op, pred_ty, a, b).unwrap_or_default())
            });
        }
    }
}

#[test]
fn select_on_every_type() {
    for ty in [Ty::Pred, Ty::I8, Ty::I16, Ty::I32, Ty::I64, Ty::F32, Ty::F64] {
        let pairs = all_pairs(ty);
        // out = (a < b or a != b for preds/floats) ? a : b, with a comparison that differs per pair.
        let op = if ty.is_float() {
            CmpOp::FLt
        } else if ty == Ty::Pred {
            CmpOp::Ne
        } else {
            CmpOp::Ult
        };
        let got = run_pointwise("select", ty, ty, &pairs, |k, x, y| {
            let c = k.cmp(op, ty, x, y);
            k.select(ty, c, x, y)
        });
        let pred_ty = if ty == Ty::Pred { Ty::I8 } else { ty };
        check("select", ty, &pairs, &got, |a, b| if compare_ref(op, pred_ty, a, b).unwrap() { a } else { b });
    }
}

#[test]
fn constants_of_every_type() {
    let consts = [
        Const::Pred(true),
        Const::Pred(false),
        Const::Int { ty: Ty::I8, bits: -1 },
        Const::Int { ty: Ty::I8, bits: 0x7f },
        Const::Int { ty: Ty::I16, bits: -32768 },
        Const::Int { ty: Ty::I32, bits: -2 },
        Const::Int { ty: Ty::I64, bits: i64::MIN },
        Const::F32(0x7fc0_0123),
        Const::F32((-0.0f32).to_bits()),
        Const::F64(0x7ff8_0000_0000_0abc),
        Const::F64(1.25f64.to_bits()),
    ];
    for c in consts {
        let ty = c.ty();
        let got = run_pointwise("const", ty, ty, &[(0, 0)], |k, _, _| k.constant(c));
        let expect = match c {
            Const::Pred(p) => u64::from(p),
            Const::Int { bits, .. } => mask(ty, bits as u64),
            Const::F32(b) => u64::from(b),
            Const::F64(b) => b,
        };
        assert_eq!(got[0], expect, "{c:?}");
    }
}

fn cast_ref(op: CastOp, from: Ty, to: Ty, a: u64) -> Option<u64> {
    use CastOp::*;
    let int_like = |t: Ty| t.is_int() || t == Ty::Pred;
    let sval = |a: u64| if from == Ty::Pred { -((a & 1) as i64) } else { sext(from, a) };
    let uval = |a: u64| mask(from, a);
    let sat = |x: f64, signed: bool| -> u64 {
        if x.is_nan() {
            return 0;
        }
        let bits = to.bits();
        if signed {
            let lo = -(2f64.powi(bits as i32 - 1));
            let hi = 2f64.powi(bits as i32 - 1);
            if x < lo {
                mask(to, 1 << (bits - 1))
            } else if x >= hi {
                mask(to, (1 << (bits - 1)) - 1)
            } else {
                mask(to, x.trunc() as i64 as u64)
            }
        } else if x <= -1.0 || x.trunc() == 0.0 {
            0
        } else if x >= 2f64.powi(bits as i32) {
            mask(to, u64::MAX)
        } else {
            x.trunc() as u64
        }
    };
    Some(match op {
        SExt if int_like(from) && to.is_int() && to.bits() > from.bits() => mask(to, sval(a) as u64),
        ZExt if int_like(from) && to.is_int() && to.bits() > from.bits() => uval(a),
        Trunc if from.is_int() && (to == Ty::Pred || (to.is_int() && to.bits() < from.bits())) => mask(to, a),
        SIToFP if from.is_int() && to.is_float() => {
            let v = sval(a);
            if to == Ty::F32 {
                u64::from((v as f32).to_bits())
            } else {
                (v as f64).to_bits()
            }
        }
        UIToFP if from.is_int() && to.is_float() => {
            let v = uval(a);
            if to == Ty::F32 {
                u64::from((v as f32).to_bits())
            } else {
                (v as f64).to_bits()
            }
        }
        FPToSISat if from.is_float() && to.is_int() => sat(f(from, a), true),
        FPToUISat if from.is_float() && to.is_int() => sat(f(from, a), false),
        FPExt if from == Ty::F32 && to == Ty::F64 => (f32::from_bits(a as u32) as f64).to_bits(),
        FPTrunc if from == Ty::F64 && to == Ty::F32 => u64::from((f64::from_bits(a) as f32).to_bits()),
        Bitcast if from != to && from.bits() == to.bits() && from.bits() >= 32 => a,
        F16ToF32 if from == Ty::I16 && to == Ty::F32 => u64::from(half::f16::from_bits(a as u16).to_f32().to_bits()),
        F32ToF16 if from == Ty::F32 && to == Ty::I16 => {
            mask(to, u64::from(half::f16::from_f32(f32::from_bits(a as u32)).to_bits()))
        }
        _ => return None,
    })
}

#[test]
fn casts() {
    use CastOp::*;
    let tys = [Ty::Pred, Ty::I8, Ty::I16, Ty::I32, Ty::I64, Ty::F32, Ty::F64];
    let mut checked = 0;
    for op in [SExt, ZExt, Trunc, SIToFP, UIToFP, FPToSISat, FPToUISat, FPExt, FPTrunc, Bitcast, F16ToF32, F32ToF16] {
        for from in tys {
            for to in tys {
                if cast_ref(op, from, to, 0).is_none() {
                    continue;
                }
                let pairs: Vec<_> = samples(from).into_iter().map(|a| (a, 0)).collect();
                let got = run_pointwise("cast", from, to, &pairs, |k, x, _| k.cast(op, from, to, x));
                check(&format!("{op:?} {from:?}->{to:?}"), to, &pairs, &got, |a, _| cast_ref(op, from, to, a).unwrap());
                checked += 1;
            }
        }
    }
    assert!(checked >= 40, "only {checked} casts checked");
}

#[test]
fn unsupported_type_combinations_are_errors() {
    let mut k = KernelBuilder::new("bad", 1);
    let out = k.buffer("out", MemType::Scalar(Ty::I32), 1, true);
    let x = k.constant(Const::Int { ty: Ty::I32, bits: 4 });
    let y = k.unary(UnOp::Sqrt, Ty::I32, x);
    k.store(out, IndexExpr::constant(0), y);
    let e = compile_err(&k.finish());
    assert!(matches!(&e, tessera_codegen::CodegenError::Unsupported { what, .. } if what.contains("Sqrt")), "{e}");

    let mut k = KernelBuilder::new("mistyped", 1);
    let out = k.buffer("out", MemType::Scalar(Ty::F32), 1, true);
    let x = k.constant(Const::Int { ty: Ty::I32, bits: 4 });
    let y = k.binary(BinOp::Add, Ty::F32, x, x);
    k.store(out, IndexExpr::constant(0), y);
    let e = compile_err(&k.finish());
    assert!(matches!(&e, tessera_codegen::CodegenError::Backend { message, .. } if message.contains("type")), "{e}");
}

#[test]
fn math_functions_call_the_runtime_symbols() {
    let table = tessera_runtime::abi::symbols();
    let lookup = |name: &str| table.iter().find(|(n, _)| *n == name).map(|(_, p)| *p).unwrap();
    use MathFn::*;
    for func in [Exp, Expm1, Log, Log1p, Sin, Cos, Tan, Tanh, Atan2, Pow, Cbrt, Erf, Round, Fmod, Hypot, Sinh, Cosh] {
        for ty in FLOATS {
            let pairs = all_pairs(ty);
            let got = run_pointwise("math", ty, ty, &pairs, |k, x, y| {
                let args = if func.arity() == 2 { vec![x, y] } else { vec![x] };
                k.math(func, ty, args)
            });
            let p = lookup(func.symbol(ty));
            for (&(a, b), &g) in pairs.iter().zip(&got) {
                // SAFETY: the symbol table pairs each name with the libm function of that C type.
                let e = unsafe {
                    match (ty, func.arity()) {
                        (Ty::F32, 1) => u64::from(
                            std::mem::transmute::<*const u8, extern "C" fn(f32) -> f32>(p)(f32::from_bits(a as u32))
                                .to_bits(),
                        ),
                        (Ty::F32, _) => u64::from(
                            std::mem::transmute::<*const u8, extern "C" fn(f32, f32) -> f32>(p)(
                                f32::from_bits(a as u32),
                                f32::from_bits(b as u32),
                            )
                            .to_bits(),
                        ),
                        (_, 1) => {
                            std::mem::transmute::<*const u8, extern "C" fn(f64) -> f64>(p)(f64::from_bits(a)).to_bits()
                        }
                        _ => std::mem::transmute::<*const u8, extern "C" fn(f64, f64) -> f64>(p)(
                            f64::from_bits(a),
                            f64::from_bits(b),
                        )
                        .to_bits(),
                    }
                };
                assert!(same(ty, g, e), "{func:?} {ty:?} ({a:#x}, {b:#x}): {g:#x} vs {e:#x}");
            }
        }
    }
}
