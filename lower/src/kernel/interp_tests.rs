//! Tests of the kernel interpreter; every expected value is worked out by hand.

use tessera_hlo::{ArrayShape, ElementType};

use super::*;
use crate::program::{Buffer, BufferId, Launch, Step};
use tessera_testkit::Rng;

const F32: MemType = MemType::Scalar(Ty::F32);

fn f32_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn int(ty: Ty, v: i64) -> Const {
    Const::Int { ty, bits: v }
}

/// Runs a kernel that stores the results of `body` (each a value of type `ty`) into an
/// `I64`/`F64`-sized output, one element per result, and returns the raw 64-bit slots.
fn eval(body: impl FnOnce(&mut KernelBuilder) -> Vec<ValueId>) -> Result<Vec<u64>, KernelRunError> {
    let mut b = KernelBuilder::new("eval", 1);
    let out = b.buffer("out", MemType::Scalar(Ty::I64), 64, true);
    let values = body(&mut b);
    let n = values.len();
    // Widen every result to 64 bits the way its type asks, so one buffer holds them all.
    let mut k = b.finish();
    let mut types = std::collections::HashMap::new();
    for s in &k.body {
        if let Stmt::Let(v, op) = s {
            let ty = match op {
                Op::Const(c) => c.ty(),
                Op::Load { mem, .. } => mem.reg(),
                Op::Index(_) => Ty::I64,
                Op::Unary { ty, .. }
                | Op::Binary { ty, .. }
                | Op::Select { ty, .. }
                | Op::Fma { ty, .. }
                | Op::Math { ty, .. } => *ty,
                Op::Cmp { .. } | Op::AnyLane { .. } => Ty::Pred,
                Op::Cast { to, .. } => *to,
                Op::GetLocal(_) => panic!("eval takes no locals"),
            };
            types.insert(*v, ty);
        }
    }
    let mut next = k.body.iter().filter(|s| matches!(s, Stmt::Let(..))).count() as u32 + 100;
    for (i, v) in values.into_iter().enumerate() {
        let ty = types[&v];
        let wide = ValueId(next);
        next += 1;
        let op = match ty {
            Ty::I64 => Op::Binary { op: BinOp::Or, ty: Ty::I64, a: v, b: v },
            Ty::F64 => Op::Cast { op: CastOp::Bitcast, from: Ty::F64, to: Ty::I64, a: v },
            Ty::F32 => {
                let bits = ValueId(next);
                next += 1;
                k.body.push(Stmt::Let(bits, Op::Cast { op: CastOp::Bitcast, from: Ty::F32, to: Ty::I32, a: v }));
                Op::Cast { op: CastOp::ZExt, from: Ty::I32, to: Ty::I64, a: bits }
            }
            _ => Op::Cast { op: CastOp::ZExt, from: ty, to: Ty::I64, a: v },
        };
        k.body.push(Stmt::Let(wide, op));
        k.body.push(Stmt::Store {
            buf: out,
            index: IndexExpr::constant(i as i64),
            mem: MemType::Scalar(Ty::I64),
            value: wide,
        });
    }
    let mut bytes = vec![0u8; 64 * 8];
    run_kernel(&k, &mut [&mut bytes])?;
    Ok(bytes.chunks(8).take(n).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect())
}

fn fault(r: Result<Vec<u64>, KernelRunError>) -> Fault {
    match r {
        Err(KernelRunError::Fault { fault, .. }) => fault,
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[test]
fn elementwise_kernel_runs_every_grid_index() {
    let mut b = KernelBuilder::new("fused_add", 3);
    let g = b.grid_var();
    let p0 = b.buffer("p0", F32, 12, false);
    let out = b.buffer("out", F32, 12, true);
    let v = b.begin_loop(0, 4);
    let mut idx = IndexExpr::var(g, 4);
    idx.terms.push(Term { src: IndexSrc::Var(v), div: 1, modulo: None, scale: 1 });
    let x = b.load(p0, idx.clone());
    let y = b.binary(BinOp::Add, Ty::F32, x, x);
    b.store(out, idx, y);
    b.end_loop_vectorized(4, Tail::None);
    let k = b.finish();
    let mut input = f32_bytes(&(0..12).map(|i| i as f32 - 0.5).collect::<Vec<_>>());
    let mut output = vec![0u8; 48];
    run_kernel(&k, &mut [&mut input, &mut output]).unwrap();
    assert_eq!(f32s(&output), (0..12).map(|i| 2.0 * i as f32 - 1.0).collect::<Vec<_>>());
}

#[test]
fn integer_arithmetic_wraps_at_its_width() {
    let r = eval(|b| {
        let max8 = b.constant(int(Ty::I8, 127));
        let one8 = b.constant(int(Ty::I8, 1));
        let min8 = b.constant(int(Ty::I8, -128));
        let m16 = b.constant(int(Ty::I8, -16));
        let two8 = b.constant(int(Ty::I8, 2));
        let x81 = b.constant(int(Ty::I8, 0x81));
        let m7 = b.constant(int(Ty::I32, -7));
        let two32 = b.constant(int(Ty::I32, 2));
        let neg1 = b.constant(int(Ty::I32, -1));
        let one32 = b.constant(int(Ty::I32, 1));
        let one16 = b.constant(int(Ty::I16, 1));
        vec![
            b.binary(BinOp::Add, Ty::I8, max8, one8),    // -128
            b.unary(UnOp::Abs, Ty::I8, min8),            // -128
            b.unary(UnOp::Neg, Ty::I8, min8),            // -128
            b.binary(BinOp::AShr, Ty::I8, m16, two8),    // -4
            b.binary(BinOp::LShr, Ty::I8, m16, two8),    // 0xf0 >> 2 = 60
            b.binary(BinOp::Shl, Ty::I8, x81, one8),     // 0x02
            b.binary(BinOp::SDiv, Ty::I32, m7, two32),   // -3
            b.binary(BinOp::SRem, Ty::I32, m7, two32),   // -1
            b.binary(BinOp::UDiv, Ty::I32, neg1, two32), // 0x7fffffff
            b.binary(BinOp::URem, Ty::I32, m7, two32),   // 0xfffffff9 is odd: 1
            b.binary(BinOp::SMax, Ty::I32, neg1, one32), // 1
            b.binary(BinOp::UMax, Ty::I32, neg1, one32), // -1
            b.binary(BinOp::UMin, Ty::I32, neg1, one32), // 1
            b.binary(BinOp::SMin, Ty::I32, neg1, one32), // -1
            b.unary(UnOp::Clz, Ty::I16, one16),          // 15
            b.unary(UnOp::Popcnt, Ty::I32, neg1),        // 32
            b.unary(UnOp::Not, Ty::I8, one8),            // -2
            b.binary(BinOp::Mul, Ty::I8, max8, max8),    // 16129 = 0x3f01: 1
            b.binary(BinOp::Xor, Ty::I32, m7, neg1),     // 6
        ]
    })
    .unwrap();
    // ZExt'ed to 64 bits by `eval`, so narrow negatives show as their unsigned bits.
    assert_eq!(
        r,
        vec![
            0x80,
            0x80,
            0x80,
            0xfc,
            60,
            2,
            0xffff_fffd,
            0xffff_ffff,
            0x7fff_ffff,
            1,
            1,
            0xffff_ffff,
            1,
            0xffff_ffff,
            15,
            32,
            0xfe,
            1,
            6
        ]
    );
}

#[test]
fn integer_preconditions_are_faults() {
    let div = |op, a, b_| {
        eval(move |b| {
            let x = b.constant(int(Ty::I32, a));
            let y = b.constant(int(Ty::I32, b_));
            vec![b.binary(op, Ty::I32, x, y)]
        })
    };
    assert_eq!(fault(div(BinOp::SDiv, 5, 0)), Fault::DivisionByZero);
    assert_eq!(fault(div(BinOp::URem, 5, 0)), Fault::DivisionByZero);
    assert_eq!(fault(div(BinOp::SDiv, i64::from(i32::MIN), -1)), Fault::DivisionOverflow);
    assert_eq!(fault(div(BinOp::SRem, i64::from(i32::MIN), -1)), Fault::DivisionOverflow);
    assert_eq!(fault(div(BinOp::Shl, 1, 32)), Fault::ShiftOutOfRange { amount: 32, bits: 32 });
    assert_eq!(fault(div(BinOp::AShr, 1, -1)), Fault::ShiftOutOfRange { amount: 0xffff_ffff, bits: 32 });
    assert_eq!(div(BinOp::Shl, 1, 31).unwrap(), vec![0x8000_0000]);
    let err = div(BinOp::SDiv, 5, 0).unwrap_err();
    assert_eq!(err.to_string(), "kernel 'eval', grid index 0, at `%2 = sdiv.i32 %0, %1`: integer division by zero");
}

#[test]
fn float_ops_follow_ieee_and_the_contract() {
    let r = eval(|b| {
        let nan = b.constant(Const::F32(f32::NAN.to_bits()));
        let one = b.constant(Const::F32(1.0f32.to_bits()));
        let pz = b.constant(Const::F32(0.0f32.to_bits()));
        let nz = b.constant(Const::F32((-0.0f32).to_bits()));
        let big = b.constant(Const::F32(16_777_216.0f32.to_bits()));
        let two_half = b.constant(Const::F32(2.5f32.to_bits()));
        vec![
            b.binary(BinOp::FMax, Ty::F32, one, pz),        // 1.0
            b.binary(BinOp::FMax, Ty::F32, nz, pz),         // +0.0
            b.binary(BinOp::FMax, Ty::F32, pz, nz),         // +0.0
            b.binary(BinOp::FMin, Ty::F32, pz, nz),         // -0.0
            b.binary(BinOp::FMin, Ty::F32, one, pz),        // 0.0
            b.binary(BinOp::Add, Ty::F32, big, one),        // 16777216 (the sum rounds to even)
            b.unary(UnOp::RoundEven, Ty::F32, two_half),    // 2.0
            b.math(MathFn::Round, Ty::F32, vec![two_half]), // 3.0
            b.unary(UnOp::Neg, Ty::F32, pz),                // -0.0
            b.unary(UnOp::Abs, Ty::F32, nz),                // +0.0
            b.binary(BinOp::FDiv, Ty::F32, one, nz),        // -inf
            b.unary(UnOp::Floor, Ty::F32, two_half),        // 2.0
            b.unary(UnOp::Ceil, Ty::F32, two_half),         // 3.0
        ]
        .into_iter()
        .chain([b.binary(BinOp::FMax, Ty::F32, nan, one), b.binary(BinOp::FMin, Ty::F32, one, nan)])
        .collect()
    })
    .unwrap();
    let bits = |x: f32| u64::from(x.to_bits());
    assert_eq!(
        r[..13],
        [
            bits(1.0),
            bits(0.0),
            bits(0.0),
            bits(-0.0),
            bits(0.0),
            bits(16_777_216.0),
            bits(2.0),
            bits(3.0),
            bits(-0.0),
            bits(0.0),
            bits(f32::NEG_INFINITY),
            bits(2.0),
            bits(3.0)
        ]
    );
    assert!(f32::from_bits(r[13] as u32).is_nan());
    assert!(f32::from_bits(r[14] as u32).is_nan());
}

#[test]
fn comparisons_are_signed_unsigned_or_ieee() {
    let r = eval(|b| {
        let m1 = b.constant(int(Ty::I8, -1));
        let one = b.constant(int(Ty::I8, 1));
        let nan = b.constant(Const::F64(f64::NAN.to_bits()));
        let x = b.constant(Const::F64(1.0f64.to_bits()));
        vec![
            b.cmp(CmpOp::Slt, Ty::I8, m1, one),   // true
            b.cmp(CmpOp::Ult, Ty::I8, m1, one),   // false
            b.cmp(CmpOp::Uge, Ty::I8, m1, one),   // true
            b.cmp(CmpOp::FEq, Ty::F64, nan, nan), // false
            b.cmp(CmpOp::FNe, Ty::F64, nan, x),   // true (unordered)
            b.cmp(CmpOp::FLt, Ty::F64, nan, x),   // false
            b.cmp(CmpOp::FGe, Ty::F64, x, x),     // true
            b.cmp(CmpOp::Ne, Ty::I8, m1, m1),     // false
        ]
    })
    .unwrap();
    assert_eq!(r, vec![1, 0, 1, 0, 1, 0, 1, 0]);
}

#[test]
fn casts_saturate_extend_and_reinterpret() {
    let r = eval(|b| {
        let big = b.constant(Const::F32(1e10f32.to_bits()));
        let nan = b.constant(Const::F32(f32::NAN.to_bits()));
        let m15 = b.constant(Const::F32((-1.5f32).to_bits()));
        let m3 = b.constant(Const::F64((-3.0f64).to_bits()));
        let f300 = b.constant(Const::F64(300.0f64.to_bits()));
        let m1_8 = b.constant(int(Ty::I8, -1));
        let t = b.constant(Const::Pred(true));
        let x = b.constant(int(Ty::I32, 0x1ff));
        let one_f = b.constant(Const::F32(1.0f32.to_bits()));
        let tenth = b.constant(Const::F64(0.1f64.to_bits()));
        let big_u = b.constant(int(Ty::I64, -1));
        vec![
            b.cast(CastOp::FPToSISat, Ty::F32, Ty::I32, big), // i32::MAX
            b.cast(CastOp::FPToSISat, Ty::F32, Ty::I32, nan), // 0
            b.cast(CastOp::FPToSISat, Ty::F32, Ty::I32, m15), // -1
            b.cast(CastOp::FPToUISat, Ty::F64, Ty::I32, m3),  // 0
            b.cast(CastOp::FPToUISat, Ty::F64, Ty::I8, f300), // 255
            b.cast(CastOp::FPToSISat, Ty::F64, Ty::I8, f300), // 127
            b.cast(CastOp::SIToFP, Ty::I8, Ty::F32, m1_8),    // -1.0
            b.cast(CastOp::UIToFP, Ty::I8, Ty::F32, m1_8),    // 255.0
            b.cast(CastOp::SExt, Ty::Pred, Ty::I32, t),       // -1
            b.cast(CastOp::ZExt, Ty::Pred, Ty::I32, t),       // 1
            b.cast(CastOp::SExt, Ty::I8, Ty::I16, m1_8),      // 0xffff
            b.cast(CastOp::ZExt, Ty::I8, Ty::I16, m1_8),      // 0xff
            b.cast(CastOp::Trunc, Ty::I32, Ty::I8, x),        // 0xff
            b.cast(CastOp::Trunc, Ty::I32, Ty::Pred, x),      // 1
            b.cast(CastOp::Bitcast, Ty::F32, Ty::I32, one_f), // 0x3f800000
            b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, tenth), // 0.1f32
            b.cast(CastOp::UIToFP, Ty::I64, Ty::F64, big_u),  // 2^64
        ]
    })
    .unwrap();
    assert_eq!(
        r,
        vec![
            0x7fff_ffff,
            0,
            0xffff_ffff,
            0,
            0xff,
            0x7f,
            u64::from((-1.0f32).to_bits()),
            u64::from(255.0f32.to_bits()),
            0xffff_ffff,
            1,
            0xffff,
            0xff,
            0xff,
            1,
            0x3f80_0000,
            u64::from(0.1f32.to_bits()),
            18_446_744_073_709_551_616.0f64.to_bits(),
        ]
    );
}

#[test]
fn math_functions_call_libm() {
    let r = eval(|b| {
        let zero = b.constant(Const::F32(0.0f32.to_bits()));
        let one = b.constant(Const::F32(1.0f32.to_bits()));
        let two = b.constant(Const::F32(2.0f32.to_bits()));
        let ten = b.constant(Const::F32(10.0f32.to_bits()));
        let m7 = b.constant(Const::F64((-7.0f64).to_bits()));
        let three = b.constant(Const::F64(3.0f64.to_bits()));
        let d27 = b.constant(Const::F64(27.0f64.to_bits()));
        vec![
            b.math(MathFn::Exp, Ty::F32, vec![zero]),       // 1
            b.math(MathFn::Erf, Ty::F32, vec![zero]),       // 0
            b.math(MathFn::Pow, Ty::F32, vec![two, ten]),   // 1024
            b.math(MathFn::Log, Ty::F32, vec![one]),        // 0
            b.math(MathFn::Atan2, Ty::F32, vec![one, one]), // pi/4 rounded to f32
            b.math(MathFn::Fmod, Ty::F64, vec![m7, three]), // -1
            b.math(MathFn::Cbrt, Ty::F64, vec![d27]),       // 3
            b.math(MathFn::Tanh, Ty::F32, vec![zero]),      // 0
        ]
    })
    .unwrap();
    assert_eq!(
        r,
        vec![
            u64::from(1.0f32.to_bits()),
            0,
            u64::from(1024.0f32.to_bits()),
            0,
            u64::from(std::f32::consts::FRAC_PI_4.to_bits()),
            (-1.0f64).to_bits(),
            3.0f64.to_bits(),
            0
        ]
    );
}

#[test]
fn packed_and_pred_memory() {
    let mut b = KernelBuilder::new("bits", 1);
    let nib = b.buffer("nib", MemType::Packed { bits: 4, pred: false }, 4, true);
    let bools = b.buffer("bools", MemType::Pred, 2, true);
    let flags = b.buffer("flags", MemType::Packed { bits: 1, pred: true }, 10, true);
    let out = b.buffer("out", MemType::Scalar(Ty::I8), 4, true);
    let v = b.begin_loop(0, 4);
    let x = b.load(nib, IndexExpr::var(v, 1));
    b.store(out, IndexExpr::var(v, 1), x);
    b.end_loop();
    let f = b.constant(int(Ty::I8, 0x1f)); // only the low four bits land
    b.store(nib, IndexExpr::constant(1), f);
    let p = b.load(bools, IndexExpr::constant(0));
    b.store(bools, IndexExpr::constant(1), p);
    let q = b.load(flags, IndexExpr::constant(9));
    let nq = b.unary(UnOp::Not, Ty::Pred, q);
    b.store(flags, IndexExpr::constant(8), nq);
    b.store(flags, IndexExpr::constant(3), q);
    let k = b.finish();
    let mut nib_bytes = vec![0x21, 0x43];
    let mut bool_bytes = vec![0x02, 0x07];
    let mut flag_bytes = vec![0x00, 0b10];
    let mut out_bytes = vec![0u8; 4];
    run_kernel(&k, &mut [&mut nib_bytes, &mut bool_bytes, &mut flag_bytes, &mut out_bytes]).unwrap();
    assert_eq!(out_bytes, vec![1, 2, 3, 4]);
    assert_eq!(nib_bytes, vec![0xf1, 0x43]);
    assert_eq!(bool_bytes, vec![0x02, 0x01]);
    assert_eq!(flag_bytes, vec![0b1000, 0b10]);
}

#[test]
fn locals_loops_and_branches() {
    // sum over v in 0..10 of (v even ? v : -v) = (0+2+4+6+8) - (1+3+5+7+9) = -5
    let mut b = KernelBuilder::new("acc", 1);
    let out = b.buffer("out", MemType::Scalar(Ty::I64), 2, true);
    let zero = b.constant(int(Ty::I64, 0));
    let acc = b.local(Ty::I64, zero);
    let count = b.local(Ty::I64, zero);
    let v = b.begin_loop(0, 10);
    let i = b.let_(Op::Index(IndexExpr::var(v, 1)));
    let two = b.constant(int(Ty::I64, 2));
    let r = b.binary(BinOp::SRem, Ty::I64, i, two);
    let even = b.cmp(CmpOp::Eq, Ty::I64, r, zero);
    let neg = b.unary(UnOp::Neg, Ty::I64, i);
    let term = b.select(Ty::I64, even, i, neg);
    let old = b.get_local(acc);
    let new = b.binary(BinOp::Add, Ty::I64, old, term);
    b.set_local(acc, new);
    b.if_else(
        even,
        |b| {
            let c = b.get_local(count);
            let one = b.constant(int(Ty::I64, 1));
            let c1 = b.binary(BinOp::Add, Ty::I64, c, one);
            b.set_local(count, c1);
        },
        |_| {},
    );
    b.end_loop();
    let total = b.get_local(acc);
    b.store(out, IndexExpr::constant(0), total);
    let c = b.get_local(count);
    b.store(out, IndexExpr::constant(1), c);
    let k = b.finish();
    let mut bytes = vec![0u8; 16];
    run_kernel(&k, &mut [&mut bytes]).unwrap();
    assert_eq!(i64::from_le_bytes(bytes[..8].try_into().unwrap()), -5);
    assert_eq!(i64::from_le_bytes(bytes[8..].try_into().unwrap()), 5);
}

/// `out[0] = src[index(%0)]` with `%0 = x`, over a 4-element source.
fn gather(x: i64, modulo: Option<i64>) -> (Kernel, Result<(), KernelRunError>) {
    let mut b = KernelBuilder::new("gather", 1);
    let src = b.buffer("src", F32, 4, false);
    let out = b.buffer("out", F32, 1, true);
    let i = b.constant(int(Ty::I64, x));
    let e = IndexExpr { terms: vec![Term { src: IndexSrc::Value(i), div: 1, modulo, scale: 1 }], offset: 0 };
    let y = b.load(src, e);
    b.store(out, IndexExpr::constant(0), y);
    let k = b.finish();
    let mut s = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let mut o = vec![0u8; 4];
    let r = run_kernel(&k, &mut [&mut s, &mut o]).map(|()| assert_eq!(f32s(&o)[0], x.rem_euclid(4) as f32 + 1.0));
    (k, r)
}

#[test]
fn data_dependent_indices_are_checked_at_run_time() {
    assert_eq!(gather(2, None).1, Ok(()));
    assert_eq!(gather(6, Some(4)).1, Ok(()));
    match gather(4, None).1 {
        Err(KernelRunError::Fault { fault, stmt, .. }) => {
            assert_eq!(fault, Fault::OutOfBounds { buf: 0, index: 4, len: 4 });
            assert_eq!(stmt, "%1 = load.f32 b0[%0]");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        gather(-1, None).1,
        Err(KernelRunError::Fault { fault: Fault::OutOfBounds { index: -1, .. }, .. })
    ));
    assert!(matches!(
        gather(-1, Some(4)).1,
        Err(KernelRunError::Fault { fault: Fault::NegativeIndexSource { value: 0, x: -1 }, .. })
    ));
}

#[test]
fn bad_kernels_and_buffers_are_errors() {
    let (k, _) = gather(0, None);
    let mut s = vec![0u8; 16];
    let mut short = vec![0u8; 3];
    assert!(matches!(run_kernel(&k, &mut [&mut s, &mut short]), Err(KernelRunError::Setup { .. })));
    assert!(matches!(run_kernel(&k, &mut [&mut s]), Err(KernelRunError::Setup { .. })));

    let mut bad = k.clone();
    bad.buffers[0].len = 5;
    bad.buffers[1].writable = false;
    let mut o = vec![0u8; 4];
    let mut s = vec![0u8; 20];
    assert!(matches!(run_kernel(&bad, &mut [&mut s, &mut o]), Err(KernelRunError::Verify(_))));

    let mut b = KernelBuilder::new("calls", 1);
    b.call("tessera_rt_nonexistent", vec![]);
    assert_eq!(
        run_kernel(&b.finish(), &mut []).unwrap_err().to_string(),
        "kernel 'calls' calls 'tessera_rt_nonexistent', which the interpreter does not implement"
    );
    let mut b = KernelBuilder::new("calls", 1);
    b.call("tessera_rt_fft", vec![]);
    assert_eq!(
        run_kernel(&b.finish(), &mut []).unwrap_err().to_string(),
        "kernel 'calls': `call tessera_rt_fft()`: tessera_rt_fft takes 5 arguments, given 0"
    );
}

fn gemm_kernel(k_dim: i64, c_len: i64, c_writable: bool, a_rs: i64) -> Kernel {
    let mut b = KernelBuilder::new("gemm", 1);
    let a = b.buffer("a", F32, 6, false);
    let bb = b.buffer("b", F32, 6, false);
    let c = b.buffer("c", F32, c_len, c_writable);
    let n = b.constant(int(Ty::I64, 2));
    let ptr = |buf| CallArg::Ptr { buf, index: IndexExpr::constant(0) };
    b.call(
        "tessera_rt_gemm_f32",
        vec![
            CallArg::I64(2),
            CallArg::Value(n),
            CallArg::I64(k_dim),
            ptr(a),
            CallArg::I64(a_rs),
            CallArg::I64(1),
            ptr(bb),
            CallArg::I64(1), // B is stored transposed: B[p][j] at p + 3*j
            CallArg::I64(3),
            ptr(c),
            CallArg::I64(2),
            CallArg::I64(1),
        ],
    );
    b.finish()
}

#[test]
fn gemm_follows_the_runtime_contract() {
    // A = [[1,2,3],[4,5,6]], B = [[7,8],[9,10],[11,12]] (stored transposed: 7,9,11,8,10,12).
    // C = [[58,64],[139,154]].
    let k = gemm_kernel(3, 4, true, 3);
    let mut a = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let mut b = f32_bytes(&[7.0, 9.0, 11.0, 8.0, 10.0, 12.0]);
    let mut c = f32_bytes(&[-1.0; 4]);
    run_kernel(&k, &mut [&mut a, &mut b, &mut c]).unwrap();
    assert_eq!(f32s(&c), vec![58.0, 64.0, 139.0, 154.0]);

    // k = 0 overwrites C with zeros.
    run_kernel(&gemm_kernel(0, 4, true, 3), &mut [&mut a, &mut b, &mut c]).unwrap();
    assert_eq!(f32s(&c), vec![0.0; 4]);

    // A row stride of 4 makes A's last element 7, past its 6.
    match run_kernel(&gemm_kernel(3, 4, true, 4), &mut [&mut a, &mut b, &mut c]) {
        Err(KernelRunError::Fault { fault: Fault::Call(m), .. }) => {
            assert_eq!(m, "tessera_rt_gemm_f32: A spans elements 0..=6 of buffer b0 with 6 elements")
        }
        other => panic!("{other:?}"),
    }
    let mut small = vec![0u8; 12];
    assert!(matches!(
        run_kernel(&gemm_kernel(3, 3, true, 3), &mut [&mut a, &mut b, &mut small]),
        Err(KernelRunError::Fault { fault: Fault::Call(_), .. })
    ));
    assert!(matches!(
        run_kernel(&gemm_kernel(3, 4, false, 3), &mut [&mut a, &mut b, &mut c]),
        Err(KernelRunError::Setup { .. })
    ));
}

/// `tessera_rt_gemm_c64` of a 2x2 `A` (row stride `a_rs` pairs) and a 2x1 `B`.
fn complex_gemm_kernel(a_rs: i64) -> Kernel {
    let mut b = KernelBuilder::new("gemm", 1);
    let a = b.buffer("a", F32, 8, false);
    let bb = b.buffer("b", F32, 4, false);
    let c = b.buffer("c", F32, 4, true);
    let ptr = |buf| CallArg::Ptr { buf, index: IndexExpr::constant(0) };
    let args = [2, 1, 2].map(CallArg::I64).into_iter();
    let args = args.chain([ptr(a), CallArg::I64(a_rs), CallArg::I64(1), ptr(bb), CallArg::I64(1), CallArg::I64(1)]);
    b.call("tessera_rt_gemm_c64", args.chain([ptr(c), CallArg::I64(1), CallArg::I64(1)]).collect());
    b.finish()
}

#[test]
fn complex_gemm_reads_interleaved_pairs() {
    // A = [[1+2i, 3-i], [i, 2]], B = [[1+i], [2-i]]: C = [[4-2i], [3-i]].
    let mut a = f32_bytes(&[1.0, 2.0, 3.0, -1.0, 0.0, 1.0, 2.0, 0.0]);
    let mut b = f32_bytes(&[1.0, 1.0, 2.0, -1.0]);
    let mut c = f32_bytes(&[f32::NAN; 4]);
    run_kernel(&complex_gemm_kernel(2), &mut [&mut a, &mut b, &mut c]).unwrap();
    assert_eq!(f32s(&c), vec![4.0, -2.0, 3.0, -1.0]);
    // A row stride of 3 pairs puts A's last imaginary part at float 9, past its 8.
    match run_kernel(&complex_gemm_kernel(3), &mut [&mut a, &mut b, &mut c]) {
        Err(KernelRunError::Fault { fault: Fault::Call(m), .. }) => {
            assert_eq!(m, "tessera_rt_gemm_c64: A spans elements 0..=9 of buffer b0 with 8 elements")
        }
        other => panic!("{other:?}"),
    }
}

/// `tessera_rt_gemm_f32_mixed` of a bf16 `A` (2x3) and an f16 `B` (3x2, row-major), with the
/// type codes given (`A`'s as a computed value when `None`).
fn mixed_gemm_kernel(a_type: Option<i64>, b_type: i64) -> Kernel {
    let mut b = KernelBuilder::new("mixed", 1);
    let a_type = match a_type {
        Some(code) => CallArg::I64(code),
        None => CallArg::Value(b.constant(int(Ty::I64, 1))),
    };
    let a = b.buffer("a", MemType::Scalar(Ty::I16), 6, false);
    let bb = b.buffer("b", MemType::Scalar(Ty::I16), 6, false);
    let c = b.buffer("c", F32, 4, true);
    let ptr = |buf| CallArg::Ptr { buf, index: IndexExpr::constant(0) };
    let i = CallArg::I64;
    b.call(
        "tessera_rt_gemm_f32_mixed",
        vec![i(2), i(2), i(3), ptr(a), i(3), i(1), a_type, ptr(bb), i(2), i(1), i(b_type), ptr(c), i(2), i(1)],
    );
    b.finish()
}

#[test]
fn mixed_gemm_widens_halves_and_checks_its_type_codes() {
    // A = [[1,2,3],[4,5,6]] in bf16, B = [[7,8],[9,10],[11,12]] in f16: C = [[58,64],[139,154]].
    let bits = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut a = bits(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].map(|x| half::bf16::from_f32(x).to_bits()));
    let mut b = bits(&[7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0].map(|x| half::f16::from_f32(x).to_bits()));
    let mut c = f32_bytes(&[-1.0; 4]);
    run_kernel(&mixed_gemm_kernel(Some(1), 2), &mut [&mut a, &mut b, &mut c]).unwrap();
    assert_eq!(f32s(&c), vec![58.0, 64.0, 139.0, 154.0]);

    // Code 0 says A is f32, which its i16 buffer is not.
    let err = run_kernel(&mixed_gemm_kernel(Some(0), 2), &mut [&mut a, &mut b, &mut c]).unwrap_err();
    assert!(err.to_string().contains("argument 3 points into b0 of i16, expected f32"), "{err}");
    // Codes are immediates from 0 to 2.
    let err = run_kernel(&mixed_gemm_kernel(Some(1), 3), &mut [&mut a, &mut b, &mut c]).unwrap_err();
    assert!(err.to_string().contains("argument 10 must be a type code in 0..=2"), "{err}");
    let k = mixed_gemm_kernel(None, 2);
    let err = run_kernel(&k, &mut [&mut a, &mut b, &mut c]).unwrap_err();
    assert!(err.to_string().contains("argument 6 must be a type code in 0..=2"), "{err}");
}

fn f32_buffer(name: &str, n: i64, kind: BufferKind) -> Buffer {
    let mut shape = ArrayShape::new(ElementType::F32, &[n]);
    shape.layout = Some(shape.layout_or_default());
    Buffer { name: name.into(), shape, bytes: 4 * n as u64, memory_space: 0, kind, offset: None }
}

/// `dst[i] = a[i] op b[i]` over 3 elements.
fn zip(name: &str, op: BinOp) -> Kernel {
    let mut b = KernelBuilder::new(name, 1);
    let x = b.buffer("a", F32, 3, false);
    let y = b.buffer("b", F32, 3, false);
    let dst = b.buffer("dst", F32, 3, true);
    let v = b.begin_loop(0, 3);
    let l = b.load(x, IndexExpr::var(v, 1));
    let r = b.load(y, IndexExpr::var(v, 1));
    let s = b.binary(op, Ty::F32, l, r);
    b.store(dst, IndexExpr::var(v, 1), s);
    b.end_loop();
    b.finish()
}

fn two_launch_program() -> Program {
    // t = p0 * p0 (temp); out = t + c (constant [10, 20, 30]).
    Program {
        buffers: vec![
            f32_buffer("p0", 3, BufferKind::Parameter(0)),
            f32_buffer("t", 3, BufferKind::Temp),
            f32_buffer("c", 3, BufferKind::Constant(f32_bytes(&[10.0, 20.0, 30.0]))),
            f32_buffer("out", 3, BufferKind::Result(0)),
        ],
        kernels: vec![zip("square", BinOp::Mul), zip("add", BinOp::Add)],
        steps: vec![
            Step::Launch(Launch { kernel: 0, args: vec![BufferId(0), BufferId(0), BufferId(1)] }),
            Step::Launch(Launch { kernel: 1, args: vec![BufferId(1), BufferId(2), BufferId(3)] }),
        ],
        parameters: vec![BufferId(0)],
        results: vec![BufferId(3)],
        arenas: vec![(0, 64)],
        aliases: vec![],
    }
}

fn launch_mut(p: &mut Program, i: usize) -> &mut Launch {
    match &mut p.steps[i] {
        Step::Launch(l) => l,
        _ => panic!("step {i} is not a launch"),
    }
}

#[test]
fn programs_run_their_launches_in_order() {
    let p = two_launch_program();
    let arg = f32_bytes(&[1.0, 2.0, -3.0]);
    let out = run_program(&p, &[&arg]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(f32s(&out[0]), vec![11.0, 24.0, 39.0]);
}

#[test]
fn inconsistent_programs_are_errors() {
    let p = two_launch_program();
    let arg = f32_bytes(&[1.0, 2.0, -3.0]);
    let program_err = |p: &Program, args: &[&[u8]]| matches!(run_program(p, args), Err(KernelRunError::Program(_)));
    assert!(program_err(&p, &[]));
    assert!(program_err(&p, &[&arg[..8]]));
    let mut q = p.clone();
    launch_mut(&mut q, 1).args[2] = BufferId(0); // writes the parameter
    assert!(program_err(&q, &[&arg]));
    let mut q = p.clone();
    launch_mut(&mut q, 1).kernel = 7;
    assert!(program_err(&q, &[&arg]));
    let mut q = p.clone();
    launch_mut(&mut q, 1).args.pop();
    assert!(program_err(&q, &[&arg]));
    let mut q = p.clone();
    q.results.push(BufferId(9));
    assert!(program_err(&q, &[&arg]));
    let mut q = p.clone();
    q.buffers[2].kind = BufferKind::Constant(vec![0; 4]);
    assert!(program_err(&q, &[&arg]));
    let mut q = p;
    q.buffers[1].bytes = 8; // the temp is smaller than the kernel's buffer
    assert!(matches!(run_program(&q, &[&arg]), Err(KernelRunError::Setup { .. })));
}

/// A small offset, length or factor: the edges where index math breaks.
fn small(r: &mut Rng) -> i64 {
    *r.pick(&[-3, -1, 0, 1, 2, 5, 64])
}

const TYS: [Ty; 7] = [Ty::Pred, Ty::I8, Ty::I16, Ty::I32, Ty::I64, Ty::F32, Ty::F64];

fn mutate_index(r: &mut Rng, e: &mut IndexExpr) {
    if r.chance(20) {
        e.offset += small(r);
    }
    for t in &mut e.terms {
        if r.chance(10) {
            t.div = small(r);
        }
        if r.chance(10) {
            t.modulo = Some(small(r));
        }
        if r.chance(10) {
            t.scale = small(r);
        }
        if r.chance(10) {
            t.src = if r.chance(50) {
                IndexSrc::Var(VarId(r.below(5) as u32))
            } else {
                IndexSrc::Value(ValueId(r.below(40) as u32))
            };
        }
    }
}

fn mutate_body(r: &mut Rng, body: &mut [Stmt]) {
    let id = |r: &mut Rng| ValueId(r.below(40) as u32);
    for s in body {
        if !r.chance(3) {
            if let Stmt::Loop(l) = s {
                mutate_body(r, &mut l.body);
            } else if let Stmt::If { then_body, else_body, .. } = s {
                mutate_body(r, then_body);
                mutate_body(r, else_body);
            }
            continue;
        }
        match s {
            Stmt::Let(v, op) => match op {
                Op::Load { index, mem, .. } => {
                    mutate_index(r, index);
                    if r.chance(20) {
                        *mem = MemType::Scalar(*r.pick(&TYS));
                    }
                }
                Op::Index(e) => mutate_index(r, e),
                Op::Unary { ty, a, .. } => {
                    *ty = *r.pick(&TYS);
                    *a = id(r);
                }
                Op::Binary { ty, b, .. } | Op::Cmp { ty, b, .. } => {
                    if r.chance(50) {
                        *ty = *r.pick(&TYS);
                    } else {
                        *b = id(r);
                    }
                }
                Op::Cast { from, to, .. } => {
                    *from = *r.pick(&TYS);
                    *to = *r.pick(&TYS);
                }
                Op::Math { args, .. } => {
                    args.pop();
                }
                _ => *v = id(r),
            },
            Stmt::Loop(l) => {
                l.start += small(r);
                l.end += small(r);
                l.vector_width = *r.pick(&[0, 1, 3, 4, 128]);
            }
            Stmt::Store { index, value, .. } => {
                mutate_index(r, index);
                if r.chance(30) {
                    *value = id(r);
                }
            }
            Stmt::DeclLocal { ty, .. } => *ty = *r.pick(&TYS),
            Stmt::SetLocal { local, .. } => *local = LocalId(r.below(3) as u32),
            Stmt::If { cond, .. } => *cond = id(r),
            Stmt::Call { .. } => {}
        }
    }
}

#[test]
fn mutated_kernels_are_errors_never_panics() {
    let mut r = Rng::new(42);
    let (mut verified, mut rejected, mut faulted) = (0, 0, 0);
    for seed in 0..2000 {
        let mut k = random::random_kernel(seed);
        mutate_body(&mut r, &mut k.body);
        for b in &mut k.buffers {
            if r.chance(5) {
                b.len += small(&mut r);
            }
            if r.chance(3) {
                b.mem = MemType::Packed { bits: r.below(9) as u8, pred: r.chance(50) };
            }
            if r.chance(3) {
                b.writable = !b.writable;
            }
        }
        if r.chance(3) {
            k.grid.extent = small(&mut r);
        }
        let _ = k.to_string();
        match verify_kernel(&k) {
            Ok(()) => verified += 1,
            Err(_) => rejected += 1,
        }
        let mut data = random::random_buffers(&k, seed);
        if r.chance(10) {
            for d in &mut data {
                d.truncate(d.len() / 2);
            }
        }
        let mut views: Vec<&mut [u8]> = data.iter_mut().map(|v| v.as_mut_slice()).collect();
        if let Err(KernelRunError::Fault { .. }) = run_kernel(&k, &mut views) {
            faulted += 1;
        }
    }
    // The mutations must exercise both sides of the verifier.
    assert!(verified > 100 && rejected > 100, "verified {verified}, rejected {rejected}, faulted {faulted}");
}
