//! Every scalar op on every type it accepts, run by the LLVM tier on edge-case inputs and
//! compared with the semantics `tessera_lower::kernel` documents (computed here in Rust).

#[path = "llvm_common/mod.rs"]
mod common;

use common::values::{same, samples, sext, width_mask};
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

/// Rounds an f64 result to `ty` and returns its bits (exact for the f32 ops tested: each is
/// computed in f32 by the callers that need it).
fn fbits(ty: Ty, v: f64) -> u64 {
    if ty == Ty::F32 {
        u64::from((v as f32).to_bits())
    } else {
        v.to_bits()
    }
}

fn pairs(ty: Ty) -> (Vec<u64>, Vec<u64>) {
    let s = samples(ty);
    let mut a = Vec::new();
    let mut b = Vec::new();
    for x in &s {
        for y in &s {
            a.push(*x);
            b.push(*y);
        }
    }
    (a, b)
}

fn check(what: &str, ty: Ty, inputs: &[&[u64]], got: &[u64], want: &[Option<u64>]) {
    for i in 0..got.len() {
        if let Some(w) = want[i] {
            let args: Vec<String> = inputs.iter().map(|c| format!("{:#x}", c[i])).collect();
            assert!(same(ty, got[i], w), "{what} on {ty:?} ({}): got {:#x}, want {w:#x}", args.join(", "), got[i]);
        }
    }
}

fn int_binary(op: BinOp, ty: Ty, a: u64, b: u64) -> Option<u64> {
    let w = ty.bits();
    let m = width_mask(ty);
    let (sa, sb) = (sext(ty, a), sext(ty, b));
    let min = i64::MIN >> (64 - w);
    let r = match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::SDiv | BinOp::SRem if b == 0 || (sa == min && sb == -1) => return None,
        BinOp::SDiv => (sa / sb) as u64,
        BinOp::SRem => (sa % sb) as u64,
        BinOp::UDiv | BinOp::URem if b == 0 => return None,
        BinOp::UDiv => a / b,
        BinOp::URem => a % b,
        BinOp::And => a & b,
        BinOp::Or => a | b,
        BinOp::Xor => a ^ b,
        BinOp::Shl | BinOp::LShr | BinOp::AShr if b >= u64::from(w) => return None,
        BinOp::Shl => a << b,
        BinOp::LShr => a >> b,
        BinOp::AShr => (sa >> b) as u64,
        BinOp::SMax => sa.max(sb) as u64,
        BinOp::SMin => sa.min(sb) as u64,
        BinOp::UMax => a.max(b),
        BinOp::UMin => a.min(b),
        _ => unreachable!(),
    };
    Some(r & m)
}

fn float_binary(op: BinOp, ty: Ty, a: u64, b: u64) -> u64 {
    let (x, y) = (f(ty, a), f(ty, b));
    let sign = if ty == Ty::F32 { 1u64 << 31 } else { 1u64 << 63 };
    match op {
        // f32 +, -, *, / computed in f64 and rounded to f32 give the correctly rounded f32
        // result (f64 has more than twice f32's precision, so double rounding is innocuous).
        BinOp::Add => fbits(ty, x + y),
        BinOp::Sub => fbits(ty, x - y),
        BinOp::Mul => fbits(ty, x * y),
        BinOp::FDiv => fbits(ty, x / y),
        BinOp::FMax | BinOp::FMin => {
            if x.is_nan() || y.is_nan() {
                fbits(ty, f64::NAN)
            } else if x == y {
                // Equal (including +0/-0): max takes the sign bit clear if either has it clear.
                if op == BinOp::FMax {
                    a & b | (a & !sign)
                } else {
                    a | b & sign
                }
            } else if (x > y) == (op == BinOp::FMax) {
                a
            } else {
                b
            }
        }
        _ => unreachable!(),
    }
}

#[test]
fn integer_binary_ops() {
    use BinOp::*;
    for ty in INTS {
        let (a, b) = pairs(ty);
        for op in [Add, Sub, Mul, SDiv, UDiv, SRem, URem, And, Or, Xor, Shl, LShr, AShr, SMax, SMin, UMax, UMin] {
            let want: Vec<Option<u64>> = a.iter().zip(&b).map(|(x, y)| int_binary(op, ty, *x, *y)).collect();
            // Inputs that break an op's precondition (the lowering guards them) are replaced
            // by 1s, which are valid for every op.
            let a2: Vec<u64> = a.iter().zip(&want).map(|(x, w)| if w.is_some() { *x } else { 1 }).collect();
            let b2: Vec<u64> = b.iter().zip(&want).map(|(y, w)| if w.is_some() { *y } else { 1 }).collect();
            let got = common::elementwise("bin", &[(ty, a2.clone()), (ty, b2.clone())], ty, |k, v| {
                k.binary(op, ty, v[0], v[1])
            });
            check(&format!("{op:?}"), ty, &[&a2, &b2], &got, &want);
        }
    }
}

#[test]
fn float_binary_ops() {
    use BinOp::*;
    for ty in FLOATS {
        let (a, b) = pairs(ty);
        for op in [Add, Sub, Mul, FDiv, FMax, FMin] {
            let want: Vec<Option<u64>> = a.iter().zip(&b).map(|(x, y)| Some(float_binary(op, ty, *x, *y))).collect();
            let got = common::elementwise("fbin", &[(ty, a.clone()), (ty, b.clone())], ty, |k, v| {
                k.binary(op, ty, v[0], v[1])
            });
            check(&format!("{op:?}"), ty, &[&a, &b], &got, &want);
        }
    }
}

#[test]
fn predicate_logic() {
    for op in [BinOp::And, BinOp::Or, BinOp::Xor] {
        let (a, b) = pairs(Ty::Pred);
        let want: Vec<Option<u64>> = a.iter().zip(&b).map(|(x, y)| int_binary(op, Ty::I8, *x, *y)).collect();
        let got = common::elementwise("plogic", &[(Ty::Pred, a.clone()), (Ty::Pred, b.clone())], Ty::Pred, |k, v| {
            k.binary(op, Ty::Pred, v[0], v[1])
        });
        check(&format!("{op:?}"), Ty::Pred, &[&a, &b], &got, &want);
    }
    let a = samples(Ty::Pred);
    let got =
        common::elementwise("pnot", &[(Ty::Pred, a.clone())], Ty::Pred, |k, v| k.unary(UnOp::Not, Ty::Pred, v[0]));
    assert_eq!(got, vec![1, 0]);
}

fn int_unary(op: UnOp, ty: Ty, a: u64) -> u64 {
    let m = width_mask(ty);
    let w = ty.bits();
    let r = match op {
        UnOp::Neg => a.wrapping_neg(),
        UnOp::Abs => sext(ty, a).wrapping_abs() as u64,
        UnOp::Not => !a,
        UnOp::Popcnt => u64::from((a & m).count_ones()),
        UnOp::Clz => u64::from((a & m).leading_zeros() - (64 - w)),
        _ => unreachable!(),
    };
    r & m
}

fn float_unary(op: UnOp, ty: Ty, a: u64) -> u64 {
    let sign = if ty == Ty::F32 { 1u64 << 31 } else { 1u64 << 63 };
    if ty == Ty::F32 {
        let x = f32::from_bits(a as u32);
        let r = match op {
            UnOp::Neg => return a ^ sign,
            UnOp::Abs => return a & !sign,
            UnOp::Sqrt => x.sqrt(),
            UnOp::Floor => x.floor(),
            UnOp::Ceil => x.ceil(),
            UnOp::Trunc => x.trunc(),
            UnOp::RoundEven => x.round_ties_even(),
            _ => unreachable!(),
        };
        u64::from(r.to_bits())
    } else {
        let x = f64::from_bits(a);
        let r = match op {
            UnOp::Neg => return a ^ sign,
            UnOp::Abs => return a & !sign,
            UnOp::Sqrt => x.sqrt(),
            UnOp::Floor => x.floor(),
            UnOp::Ceil => x.ceil(),
            UnOp::Trunc => x.trunc(),
            UnOp::RoundEven => x.round_ties_even(),
            _ => unreachable!(),
        };
        r.to_bits()
    }
}

#[test]
fn unary_ops() {
    for ty in INTS {
        let a = samples(ty);
        for op in [UnOp::Neg, UnOp::Abs, UnOp::Not, UnOp::Popcnt, UnOp::Clz] {
            let want: Vec<Option<u64>> = a.iter().map(|x| Some(int_unary(op, ty, *x))).collect();
            let got = common::elementwise("un", &[(ty, a.clone())], ty, |k, v| k.unary(op, ty, v[0]));
            check(&format!("{op:?}"), ty, &[&a], &got, &want);
        }
    }
    for ty in FLOATS {
        let a = samples(ty);
        for op in [UnOp::Neg, UnOp::Abs, UnOp::Sqrt, UnOp::Floor, UnOp::Ceil, UnOp::Trunc, UnOp::RoundEven] {
            let want: Vec<Option<u64>> = a.iter().map(|x| Some(float_unary(op, ty, *x))).collect();
            let got = common::elementwise("fun", &[(ty, a.clone())], ty, |k, v| k.unary(op, ty, v[0]));
            // Neg and Abs are sign-bit operations: exact bits even for NaN.
            if matches!(op, UnOp::Neg | UnOp::Abs) {
                assert_eq!(got, want.iter().map(|w| w.unwrap()).collect::<Vec<_>>(), "{op:?} on {ty:?}");
            }
            check(&format!("{op:?}"), ty, &[&a], &got, &want);
        }
    }
}

#[test]
fn comparisons() {
    use CmpOp::*;
    for ty in INTS {
        let (a, b) = pairs(ty);
        for op in [Eq, Ne, Slt, Sle, Sgt, Sge, Ult, Ule, Ugt, Uge] {
            let want: Vec<Option<u64>> = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| {
                    let (sx, sy) = (sext(ty, x), sext(ty, y));
                    Some(u64::from(match op {
                        Eq => x == y,
                        Ne => x != y,
                        Slt => sx < sy,
                        Sle => sx <= sy,
                        Sgt => sx > sy,
                        Sge => sx >= sy,
                        Ult => x < y,
                        Ule => x <= y,
                        Ugt => x > y,
                        _ => x >= y,
                    }))
                })
                .collect();
            let got = common::elementwise("cmp", &[(ty, a.clone()), (ty, b.clone())], Ty::Pred, |k, v| {
                k.cmp(op, ty, v[0], v[1])
            });
            check(&format!("{op:?}"), Ty::Pred, &[&a, &b], &got, &want);
        }
    }
    for ty in FLOATS {
        let (a, b) = pairs(ty);
        for op in [FEq, FNe, FLt, FLe, FGt, FGe] {
            let want: Vec<Option<u64>> = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| {
                    let (x, y) = (f(ty, x), f(ty, y));
                    Some(u64::from(match op {
                        FEq => x == y,
                        FNe => x != y,
                        FLt => x < y,
                        FLe => x <= y,
                        FGt => x > y,
                        _ => x >= y,
                    }))
                })
                .collect();
            let got = common::elementwise("fcmp", &[(ty, a.clone()), (ty, b.clone())], Ty::Pred, |k, v| {
                k.cmp(op, ty, v[0], v[1])
            });
            check(&format!("{op:?}"), Ty::Pred, &[&a, &b], &got, &want);
        }
    }
}

#[test]
fn selects() {
    for ty in INTS.iter().chain(&FLOATS).chain(&[Ty::Pred]) {
        let ty = *ty;
        let s = samples(ty);
        let a: Vec<u64> = s.clone();
        let b: Vec<u64> = s.iter().rev().copied().collect();
        let c: Vec<u64> = (0..s.len() as u64).map(|i| (i * 7 / 3) % 2).collect();
        let want: Vec<Option<u64>> = (0..s.len()).map(|i| Some(if c[i] == 1 { a[i] } else { b[i] })).collect();
        let got = common::elementwise("sel", &[(Ty::Pred, c.clone()), (ty, a.clone()), (ty, b.clone())], ty, |k, v| {
            k.select(ty, v[0], v[1], v[2])
        });
        // Exact bits: a select moves values, NaN payloads included.
        assert_eq!(got, want.iter().map(|w| w.unwrap()).collect::<Vec<_>>(), "select on {ty:?}");
    }
}

fn cast_ref(op: CastOp, from: Ty, to: Ty, a: u64) -> u64 {
    let m = width_mask(to);
    let fv = || f(from, a);
    let r = match op {
        CastOp::SExt => {
            if from == Ty::Pred {
                (a & 1).wrapping_neg()
            } else {
                sext(from, a) as u64
            }
        }
        CastOp::ZExt => a & width_mask(from),
        CastOp::Trunc => a,
        CastOp::SIToFP => match to {
            Ty::F32 => u64::from((sext(from, a) as f32).to_bits()),
            _ => (sext(from, a) as f64).to_bits(),
        },
        CastOp::UIToFP => match to {
            Ty::F32 => u64::from(((a & width_mask(from)) as f32).to_bits()),
            _ => ((a & width_mask(from)) as f64).to_bits(),
        },
        // Rust's float-to-int `as` saturates and sends NaN to 0, exactly the op's contract.
        CastOp::FPToSISat => {
            let x = fv();
            match to {
                Ty::I8 => x as i8 as u64,
                Ty::I16 => x as i16 as u64,
                Ty::I32 => x as i32 as u64,
                _ => x as i64 as u64,
            }
        }
        CastOp::FPToUISat => {
            let x = fv();
            match to {
                Ty::I8 => u64::from(x as u8),
                Ty::I16 => u64::from(x as u16),
                Ty::I32 => u64::from(x as u32),
                _ => x as u64,
            }
        }
        CastOp::FPExt => f64::from(f32::from_bits(a as u32)).to_bits(),
        CastOp::FPTrunc => u64::from((f64::from_bits(a) as f32).to_bits()),
        CastOp::Bitcast => a,
        CastOp::F16ToF32 => u64::from(half::f16::from_bits(a as u16).to_f32().to_bits()),
        CastOp::F32ToF16 => u64::from(half::f16::from_f32(f32::from_bits(a as u32)).to_bits()),
    };
    r & m
}

#[test]
fn casts() {
    let mut cases: Vec<(CastOp, Ty, Ty)> = Vec::new();
    let int_like = [Ty::Pred, Ty::I8, Ty::I16, Ty::I32, Ty::I64];
    for from in int_like {
        for to in INTS {
            if to.bits() > from.bits() {
                cases.push((CastOp::SExt, from, to));
                cases.push((CastOp::ZExt, from, to));
            }
        }
    }
    for from in INTS {
        for to in int_like {
            if to.bits() < from.bits() {
                cases.push((CastOp::Trunc, from, to));
            }
        }
        for to in FLOATS {
            cases.push((CastOp::SIToFP, from, to));
            cases.push((CastOp::UIToFP, from, to));
            cases.push((CastOp::FPToSISat, to, from));
            cases.push((CastOp::FPToUISat, to, from));
        }
    }
    cases.extend([
        (CastOp::FPExt, Ty::F32, Ty::F64),
        (CastOp::FPTrunc, Ty::F64, Ty::F32),
        (CastOp::Bitcast, Ty::I32, Ty::F32),
        (CastOp::Bitcast, Ty::F32, Ty::I32),
        (CastOp::Bitcast, Ty::I64, Ty::F64),
        (CastOp::Bitcast, Ty::F64, Ty::I64),
        (CastOp::F16ToF32, Ty::I16, Ty::F32),
        (CastOp::F32ToF16, Ty::F32, Ty::I16),
    ]);
    for (op, from, to) in cases {
        let a = samples(from);
        let want: Vec<Option<u64>> = a.iter().map(|x| Some(cast_ref(op, from, to, *x))).collect();
        let got = common::elementwise("cast", &[(from, a.clone())], to, |k, v| k.cast(op, from, to, v[0]));
        if op == CastOp::Bitcast {
            assert_eq!(got, want.iter().map(|w| w.unwrap()).collect::<Vec<_>>(), "bitcast {from:?} -> {to:?}");
        }
        check(&format!("{op:?} from {from:?}"), to, &[&a], &got, &want);
    }
}

#[test]
fn math_functions_call_the_runtime_symbols() {
    use MathFn::*;
    let table = tessera_runtime::abi::symbols();
    let address = |name: &str| table.iter().find(|(n, _)| *n == name).map(|(_, a)| *a).unwrap();
    for func in [Exp, Expm1, Log, Log1p, Sin, Cos, Tan, Tanh, Atan2, Pow, Cbrt, Erf, Round, Fmod, Hypot, Sinh, Cosh] {
        for ty in FLOATS {
            let s = samples(ty);
            let (a, b) = if func.arity() == 2 { pairs(ty) } else { (s.clone(), s.clone()) };
            let p = address(func.symbol(ty));
            let want: Vec<Option<u64>> = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| {
                    // SAFETY: the table's symbols have exactly these C signatures.
                    Some(unsafe {
                        match (ty, func.arity()) {
                            (Ty::F32, 1) => u64::from(
                                std::mem::transmute::<*const u8, extern "C" fn(f32) -> f32>(p)(f32::from_bits(
                                    x as u32,
                                ))
                                .to_bits(),
                            ),
                            (Ty::F32, _) => u64::from(
                                std::mem::transmute::<*const u8, extern "C" fn(f32, f32) -> f32>(p)(
                                    f32::from_bits(x as u32),
                                    f32::from_bits(y as u32),
                                )
                                .to_bits(),
                            ),
                            (_, 1) => std::mem::transmute::<*const u8, extern "C" fn(f64) -> f64>(p)(f64::from_bits(x))
                                .to_bits(),
                            _ => std::mem::transmute::<*const u8, extern "C" fn(f64, f64) -> f64>(p)(
                                f64::from_bits(x),
                                f64::from_bits(y),
                            )
                            .to_bits(),
                        }
                    })
                })
                .collect();
            let inputs: Vec<(Ty, Vec<u64>)> =
                if func.arity() == 2 { vec![(ty, a.clone()), (ty, b.clone())] } else { vec![(ty, a.clone())] };
            let got = common::elementwise("math", &inputs, ty, |k, v| k.math(func, ty, v.to_vec()));
            check(&format!("{func:?}"), ty, &[&a, &b], &got, &want);
        }
    }
}

#[test]
fn constants_keep_their_bits() {
    let consts = [
        Const::Pred(true),
        Const::Int { ty: Ty::I8, bits: -1 },
        Const::Int { ty: Ty::I16, bits: 0x1234 },
        Const::Int { ty: Ty::I32, bits: i64::from(i32::MIN) },
        Const::Int { ty: Ty::I64, bits: i64::MIN + 5 },
        Const::F32(0x7fa0_0001),
        Const::F32(0x8000_0000),
        Const::F64(0x7ff4_0000_0000_0001),
        Const::F64(0x8000_0000_0000_0000),
    ];
    for c in consts {
        let ty = c.ty();
        let got = common::elementwise("const", &[(Ty::I8, vec![0; 3])], ty, |k, _| k.constant(c));
        let want = match c {
            Const::Pred(b) => u64::from(b),
            Const::Int { ty, bits } => bits as u64 & width_mask(ty),
            Const::F32(b) => u64::from(b),
            Const::F64(b) => b,
        };
        // Exact bits: a constant stored unchanged keeps a signalling NaN's payload.
        assert_eq!(got, vec![want; 3], "{c:?}");
    }
}
