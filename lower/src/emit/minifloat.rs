//! The 8- and 4-bit float formats (f8e5m2, f8e4m3fn, ..., f4e2m1fn, f8e8m0fnu) as integer IR.
//!
//! Their elements are `I8` bits in memory (4-bit ones zero-extended, or packed by an `E(4)`
//! layout) and `F64` values in registers. The interpreter computes every op on them in f64
//! and rounds the result once to the format, so computing in f64 registers and rounding with
//! [`round`] after each op gives its results bit for bit (f32 registers would round twice
//! for transcendental functions). Each format's special values follow ml_dtypes, as
//! `hlo::eval::minifloat` does; the unit tests check every pattern against it.

use tessera_hlo::eval::minifloat::{format, Format, Nan};
use tessera_hlo::ElementType;

use crate::kernel::{BinOp, CastOp, CmpOp, Const, KernelBuilder, Ty, UnOp, ValueId};

/// True for the formats this module handles.
pub fn is_minifloat(et: ElementType) -> bool {
    format(et).is_some()
}

/// What the kernel conversions need of a format, in the `I64` arithmetic they run in.
trait KernelFormat {
    fn top_field(self) -> i64;
    fn min_normal(self) -> i64;
    /// The magnitude bits of the largest finite value.
    fn max_magnitude(self) -> i64;
    fn nan_bits(self) -> i64;
}

impl KernelFormat for Format {
    fn top_field(self) -> i64 {
        (1 << self.exp_bits) - 1
    }

    fn min_normal(self) -> i64 {
        1 - i64::from(self.bias)
    }

    fn max_magnitude(self) -> i64 {
        let (top, full) = (self.top_field(), (1i64 << self.mant_bits) - 1);
        match self.nan {
            Nan::Ieee => ((top - 1) << self.mant_bits) | full,
            Nan::AllOnes => (top << self.mant_bits) | (full - 1),
            Nan::NegZero | Nan::None => (top << self.mant_bits) | full,
        }
    }

    fn nan_bits(self) -> i64 {
        let w = self.width();
        match self.nan {
            Nan::Ieee => (self.top_field() << self.mant_bits) | (1i64 << self.mant_bits.saturating_sub(1)),
            Nan::AllOnes => ((1i64 << w) - 1) >> u32::from(self.signed),
            // f4e2m1fn has no NaN: ml_dtypes gives negative zero.
            Nan::NegZero | Nan::None => 1i64 << (w - 1),
        }
    }
}

fn c64(b: &mut KernelBuilder, v: i64) -> ValueId {
    b.constant(Const::Int { ty: Ty::I64, bits: v })
}

fn bin(b: &mut KernelBuilder, op: BinOp, x: ValueId, y: i64) -> ValueId {
    let c = c64(b, y);
    b.binary(op, Ty::I64, x, c)
}

fn cmp(b: &mut KernelBuilder, op: CmpOp, x: ValueId, y: i64) -> ValueId {
    let c = c64(b, y);
    b.cmp(op, Ty::I64, x, c)
}

/// 2^e as an `F64` built from its exponent field (`e` an `I64` value inside f64's normal range).
fn pow2(b: &mut KernelBuilder, e: ValueId) -> ValueId {
    let field = bin(b, BinOp::Add, e, 1023);
    let bits = bin(b, BinOp::Shl, field, 52);
    b.cast(CastOp::Bitcast, Ty::I64, Ty::F64, bits)
}

/// The `F64` value of an element's bits (an `I8` register; bits above the format's width are
/// ignored).
pub fn to_f64(b: &mut KernelBuilder, et: ElementType, bits: ValueId) -> ValueId {
    let Some(f) = format(et) else { return bits };
    let w = f.width();
    let m = f.mant_bits;
    let x = b.cast(CastOp::ZExt, Ty::I8, Ty::I64, bits);
    let x = bin(b, BinOp::And, x, (1i64 << w) - 1);
    let mag_mask = (1i64 << (w - u32::from(f.signed))) - 1;
    let mag = bin(b, BinOp::And, x, mag_mask);
    let e = bin(b, BinOp::LShr, mag, i64::from(m));
    let mant = bin(b, BinOp::And, mag, (1i64 << m) - 1);
    // Normal values: rebias the exponent into f64's and move the mantissa to its top bits.
    let ef = bin(b, BinOp::Add, e, 1023 - i64::from(f.bias));
    let ef = bin(b, BinOp::Shl, ef, 52);
    let mf = bin(b, BinOp::Shl, mant, 52 - i64::from(m));
    let mut v = b.binary(BinOp::Or, Ty::I64, ef, mf);
    if m > 0 {
        // Subnormals (exponent field 0): mant * 2^(min_normal - m), exact in f64.
        let mant_f = b.cast(CastOp::SIToFP, Ty::I64, Ty::F64, mant);
        let scale = b.constant(Const::F64(2f64.powi((f.min_normal() - i64::from(m)) as i32).to_bits()));
        let sub = b.binary(BinOp::Mul, Ty::F64, mant_f, scale);
        let sub = b.cast(CastOp::Bitcast, Ty::F64, Ty::I64, sub);
        let is_sub = cmp(b, CmpOp::Eq, e, 0);
        v = b.select(Ty::I64, is_sub, sub, v);
    }
    let nan = c64(b, f64::NAN.to_bits() as i64);
    if f.nan == Nan::Ieee {
        let inf = c64(b, f64::INFINITY.to_bits() as i64);
        let mant_zero = cmp(b, CmpOp::Eq, mant, 0);
        let special = b.select(Ty::I64, mant_zero, inf, nan);
        let is_special = cmp(b, CmpOp::Eq, e, f.top_field());
        v = b.select(Ty::I64, is_special, special, v);
    }
    if f.signed {
        // The sign goes onto infinities and IEEE NaNs too, as the interpreter's negation does.
        let s = bin(b, BinOp::LShr, x, i64::from(w - 1));
        let s = bin(b, BinOp::Shl, s, 63);
        v = b.binary(BinOp::Or, Ty::I64, v, s);
    }
    match f.nan {
        Nan::AllOnes => {
            let is_nan = cmp(b, CmpOp::Eq, mag, mag_mask);
            v = b.select(Ty::I64, is_nan, nan, v);
        }
        Nan::NegZero => {
            let is_nan = cmp(b, CmpOp::Eq, x, 1i64 << (w - 1));
            v = b.select(Ty::I64, is_nan, nan, v);
        }
        Nan::Ieee | Nan::None => {}
    }
    b.cast(CastOp::Bitcast, Ty::I64, Ty::F64, v)
}

/// The bits (an `I8`, zero-extended for 4-bit formats) of an `F64` rounded to nearest even:
/// overflow gives infinity where the format has one, NaN where it has only NaN, and the
/// largest value for f4e2m1fn.
pub fn from_f64(b: &mut KernelBuilder, et: ElementType, x: ValueId) -> ValueId {
    let Some(f) = format(et) else { return x };
    let r = if f.mant_bits == 0 { encode_exponent_only(b, f, x) } else { encode(b, f, x) };
    b.cast(CastOp::Trunc, Ty::I64, Ty::I8, r)
}

fn encode(b: &mut KernelBuilder, f: Format, x: ValueId) -> ValueId {
    let w = f.width();
    let m = i64::from(f.mant_bits);
    let xb = b.cast(CastOp::Bitcast, Ty::F64, Ty::I64, x);
    let sign = bin(b, BinOp::LShr, xb, 63);
    let sign = bin(b, BinOp::Shl, sign, i64::from(w - 1));
    let a = b.unary(UnOp::Abs, Ty::F64, x);
    let ab = b.cast(CastOp::Bitcast, Ty::F64, Ty::I64, a);
    // The quantum of a's binade (or of the subnormal range): a / quantum rounded to an
    // integer k, and the magnitude bits are ((e - min_normal) << m) + k. That sum also covers
    // a carry into the next binade and subnormal results, since the exponent field counts
    // from the smallest normal.
    let e = bin(b, BinOp::LShr, ab, 52);
    let e = bin(b, BinOp::Sub, e, 1023);
    let min_e = c64(b, f.min_normal());
    let e = b.binary(BinOp::SMax, Ty::I64, e, min_e);
    let neg_q = bin(b, BinOp::Sub, e, m);
    let zero = c64(b, 0);
    let neg_q = b.binary(BinOp::Sub, Ty::I64, zero, neg_q);
    let inv_quantum = pow2(b, neg_q);
    let scaled = b.binary(BinOp::Mul, Ty::F64, a, inv_quantum);
    let k = b.unary(UnOp::RoundEven, Ty::F64, scaled);
    let k = b.cast(CastOp::FPToSISat, Ty::F64, Ty::I64, k);
    let base = bin(b, BinOp::Sub, e, f.min_normal());
    let base = bin(b, BinOp::Shl, base, m);
    let mag = b.binary(BinOp::Add, Ty::I64, base, k);
    let signed_mag = b.binary(BinOp::Or, Ty::I64, sign, mag);
    let is_zero = cmp(b, CmpOp::Eq, mag, 0);
    let zero_bits = if f.nan == Nan::NegZero { zero } else { sign };
    let mut r = b.select(Ty::I64, is_zero, zero_bits, signed_mag);
    let overflow = match f.nan {
        Nan::Ieee => {
            let inf = c64(b, f.top_field() << m);
            b.binary(BinOp::Or, Ty::I64, sign, inf)
        }
        Nan::None => {
            let max = c64(b, (1i64 << (w - 1)) - 1);
            b.binary(BinOp::Or, Ty::I64, sign, max)
        }
        Nan::AllOnes | Nan::NegZero => c64(b, f.nan_bits()),
    };
    let too_big = cmp(b, CmpOp::Sgt, mag, f.max_magnitude());
    let inf = b.constant(Const::F64(f64::INFINITY.to_bits()));
    let is_inf = b.cmp(CmpOp::FEq, Ty::F64, a, inf);
    let over = b.binary(BinOp::Or, Ty::Pred, too_big, is_inf);
    r = b.select(Ty::I64, over, overflow, r);
    let is_nan = b.cmp(CmpOp::FNe, Ty::F64, x, x);
    let nan = c64(b, f.nan_bits());
    b.select(Ty::I64, is_nan, nan, r)
}

/// f8e8m0fnu (ml_dtypes' rules): the nearest power of two with ties (1.5 * 2^e) rounding up;
/// negatives, zero, infinity, NaN and values above the range are NaN, values below it the
/// smallest power.
fn encode_exponent_only(b: &mut KernelBuilder, f: Format, x: ValueId) -> ValueId {
    let nan = c64(b, f.nan_bits());
    let xb = b.cast(CastOp::Bitcast, Ty::F64, Ty::I64, x);
    let e = bin(b, BinOp::LShr, xb, 52);
    let e = bin(b, BinOp::And, e, 0x7ff);
    let e = bin(b, BinOp::Sub, e, 1023);
    let half_up = bin(b, BinOp::LShr, xb, 51);
    let half_up = bin(b, BinOp::And, half_up, 1);
    let e = b.binary(BinOp::Add, Ty::I64, e, half_up);
    let field = bin(b, BinOp::Add, e, i64::from(f.bias));
    let too_big = cmp(b, CmpOp::Sge, field, f.top_field());
    let mut r = b.select(Ty::I64, too_big, nan, field);
    // Below the range (before the tie adjustment) is the smallest power, field 0.
    let raw = b.binary(BinOp::Sub, Ty::I64, field, half_up);
    let below = cmp(b, CmpOp::Slt, raw, 0);
    let zero = c64(b, 0);
    r = b.select(Ty::I64, below, zero, r);
    let fzero = b.constant(Const::F64(0f64.to_bits()));
    let not_pos = b.cmp(CmpOp::FLe, Ty::F64, x, fzero);
    let inf = b.constant(Const::F64(f64::INFINITY.to_bits()));
    let is_inf = b.cmp(CmpOp::FEq, Ty::F64, x, inf);
    let is_nan = b.cmp(CmpOp::FNe, Ty::F64, x, x);
    let bad = b.binary(BinOp::Or, Ty::Pred, not_pos, is_inf);
    let bad = b.binary(BinOp::Or, Ty::Pred, bad, is_nan);
    b.select(Ty::I64, bad, nan, r)
}

/// Rounds an `F64` to the nearest value of the format, staying `F64`.
pub fn round(b: &mut KernelBuilder, et: ElementType, x: ValueId) -> ValueId {
    if !is_minifloat(et) {
        return x;
    }
    let bits = from_f64(b, et, x);
    to_f64(b, et, bits)
}

/// The value of an element's bits, for constants folded at lowering time.
pub fn bits_value(et: ElementType, bits: u64) -> f64 {
    tessera_hlo::eval::minifloat_decode(et, bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{run_kernel, IndexExpr, MemType};
    use ElementType as E;

    const ALL: [ElementType; 9] = [
        E::F8E5M2,
        E::F8E4M3,
        E::F8E3M4,
        E::F8E4M3FN,
        E::F8E4M3FNUZ,
        E::F8E4M3B11FNUZ,
        E::F8E5M2FNUZ,
        E::F4E2M1FN,
        E::F8E8M0FNU,
    ];

    fn run(
        input: Vec<u8>,
        n: i64,
        from: Ty,
        to: Ty,
        convert: &dyn Fn(&mut KernelBuilder, ValueId) -> ValueId,
    ) -> Vec<u8> {
        let mut b = KernelBuilder::new("conv", 1);
        let src = b.buffer("src", MemType::Scalar(from), n, false);
        let dst = b.buffer("dst", MemType::Scalar(to), n, true);
        let i = b.begin_loop(0, n);
        let x = b.load(src, IndexExpr::var(i, 1));
        let y = convert(&mut b, x);
        b.store(dst, IndexExpr::var(i, 1), y);
        b.end_loop();
        let k = b.finish();
        let mut inp = input;
        let mut out = vec![0u8; n as usize * (to.bits() / 8) as usize];
        run_kernel(&k, &mut [&mut inp, &mut out]).expect("conversion kernel runs");
        out
    }

    #[test]
    fn decoding_matches_the_interpreter_on_every_pattern() {
        for et in ALL {
            let out = run((0..=255u8).collect(), 256, Ty::I8, Ty::F64, &|b, x| to_f64(b, et, x));
            for (bits, got) in (0..256u64).zip(out.chunks_exact(8)) {
                let got = f64::from_le_bytes(got.try_into().unwrap());
                let want = bits_value(et, bits);
                assert_eq!(got.to_bits(), want.to_bits(), "{et} bits {bits:#04x}: {got} vs {want}");
            }
        }
    }

    /// Every value of every format, the midpoints between neighbours and values just off
    /// them, powers of two across f64's range, zeros, infinities and NaN.
    fn f64_inputs() -> Vec<f64> {
        let mut xs =
            vec![0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -f64::NAN, f64::MAX, f64::MIN_POSITIVE];
        xs.push(f64::from_bits(1));
        for e in -1074..1024 {
            let p = 2f64.powi(e);
            xs.extend([p, -p, p * 1.5, p * 1.25, p * 1.75]);
        }
        for et in ALL {
            let mut vals: Vec<f64> = (0..256u64).map(|b| bits_value(et, b)).filter(|v| v.is_finite()).collect();
            vals.sort_by(f64::total_cmp);
            for w in vals.windows(2) {
                let mid = (w[0] + w[1]) / 2.0;
                xs.extend([
                    w[0],
                    mid,
                    f64::from_bits(mid.to_bits() + 1),
                    f64::from_bits(mid.to_bits().wrapping_sub(1)),
                ]);
            }
            if let Some(&top) = vals.last() {
                xs.extend([top * 1.0625, top * 1.125, top * 1.2, top * 2.0]);
            }
        }
        let more: Vec<f64> = xs.iter().map(|x| -x).collect();
        xs.extend(more);
        xs
    }

    #[test]
    fn rounding_matches_the_interpreter() {
        let xs = f64_inputs();
        let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        for et in ALL {
            let out = run(bytes.clone(), xs.len() as i64, Ty::F64, Ty::I8, &|b, x| from_f64(b, et, x));
            for (x, got) in xs.iter().zip(out) {
                let want = tessera_hlo::eval::minifloat_encode(et, *x);
                assert_eq!(u64::from(got), want, "{et} from {x:e} ({:#018x})", x.to_bits());
            }
        }
    }
}
