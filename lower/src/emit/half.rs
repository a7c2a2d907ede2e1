//! f16 and bf16 in kernels: the kernel IR has no half-precision register type, so halves live
//! as `I16` bits in memory and as exactly representable `F32` values in registers. f16 converts
//! by the IR's own casts ([`CastOp::F16ToF32`], [`CastOp::F32ToF16`]: F16C and AArch64 have
//! instructions for them; `kernel::half_casts` spells them out for tiers without). bf16 has no
//! such cast, since AVX-512 BF16's narrowing flushes subnormals: it converts by integer IR
//! sequences here, rounding to nearest even, keeping infinities, quieting NaNs (keeping their
//! upper payload bits, as the `half` crate does), keeping subnormals. bf16 widens by placing
//! its bits in the upper half of an f32, NaNs included (what LLVM's `fpext bfloat` and so
//! XLA:CPU do): the exact value in two ops, where quieting a signaling NaN on the way took four
//! more per element of every bf16 load.

use crate::kernel::half_casts::bin;
use crate::kernel::{BinOp, CastOp, CmpOp, KernelBuilder, NanFacts, Ty, ValueId};

/// `I16` bf16 bits to the `F32` of the same value.
pub fn bf16_to_f32(b: &mut KernelBuilder, h: ValueId) -> ValueId {
    let x = b.cast(CastOp::ZExt, Ty::I16, Ty::I32, h);
    let bits = bin(b, BinOp::Shl, x, 16);
    let v = b.cast(CastOp::Bitcast, Ty::I32, Ty::F32, bits);
    b.note_nan_facts(v, NanFacts::BF16);
    v
}

/// `F32` to `I16` bf16 bits, rounding to nearest even.
pub fn f32_to_bf16(b: &mut KernelBuilder, f: ValueId) -> ValueId {
    let r = match b.narrow_bits(f, BF16_IN_F32) {
        Some(r) => r,
        None => bf16_rounded_bits(b, f),
    };
    let hi = bin(b, BinOp::LShr, r, 16);
    b.cast(CastOp::Trunc, Ty::I32, Ty::I16, hi)
}

/// `f`'s bits with their upper half rounded to bf16 (nearest even, NaNs quieted) and their
/// lower half meaningless.
fn bf16_rounded_bits(b: &mut KernelBuilder, f: ValueId) -> ValueId {
    let x = b.cast(CastOp::Bitcast, Ty::F32, Ty::I32, f);
    // Adding 0x7fff plus the kept lowest bit rounds half to even; a carry moves into the
    // exponent, which is exactly the rounding to the next binade or to infinity.
    let hi = bin(b, BinOp::LShr, x, 16);
    let odd = bin(b, BinOp::And, hi, 1);
    let bias = bin(b, BinOp::Add, odd, 0x7fff);
    let sum = b.binary(BinOp::Add, Ty::I32, x, bias);
    // A quiet NaN with a zero lower half (bf16 arithmetic's NaNs) carries nothing into its
    // upper half, which the sum then keeps as it is: already the quieted bf16 NaN. The test
    // and select cost a third of a vector rounding's operations.
    let facts = b.nan_facts(f);
    if facts.quiet && facts.low_half_zero {
        return sum;
    }
    // One unordered compare finds NaNs, where testing the magnitude's bits took two ops.
    // Masking the bias and the quiet bit instead of selecting between two results saves
    // Cranelift's vectors a blend (a bf16 layer norm ran 5% faster) but costs scalar code two
    // conditional moves (a tiled bf16 loop ran 20% slower), so the one select stays.
    let is_nan = b.cmp(CmpOp::FNe, Ty::F32, f, f);
    let nan = bin(b, BinOp::Or, x, 0x40 << 16);
    b.select(Ty::I32, is_nan, nan, sum)
}

/// `I16` f16 bits to the `F32` of the same value: one [`CastOp::F16ToF32`], which tiers with
/// a conversion instruction (F16C, AArch64) run as one and others as the integer sequence of
/// `kernel::half_casts`.
pub fn f16_to_f32(b: &mut KernelBuilder, h: ValueId) -> ValueId {
    b.cast(CastOp::F16ToF32, Ty::I16, Ty::F32, h)
}

/// `F32` to `I16` f16 bits, rounding to nearest even: one [`CastOp::F32ToF16`] (see
/// [`f16_to_f32`]), unless `f` is a rounded f16 value whose bits are at hand.
pub fn f32_to_f16(b: &mut KernelBuilder, f: ValueId) -> ValueId {
    if let Some(h) = b.narrow_bits(f, F16_BITS) {
        return h;
    }
    b.cast(CastOp::F32ToF16, Ty::F32, Ty::I16, f)
}

/// Rounds an `F32` to the nearest f16 or bf16 value (`bf16` selects which), staying `F32`.
pub fn round_f32_to(b: &mut KernelBuilder, f: ValueId, bf16: bool) -> ValueId {
    if bf16 {
        return round_f32_to_bf16(b, f);
    }
    let h = f32_to_f16(b, f);
    let v = f16_to_f32(b, h);
    // Narrowing `v` again (to store it) gives back `h` exactly: `h` came from a narrowing, so
    // it is no signaling NaN, and every other half value round-trips.
    b.note_narrow_bits(v, F16_BITS, h);
    v
}

/// [`f32_to_bf16`]'s rounding kept in the upper half of an f32's bits: where the rounded value
/// is used as an f32 (every bf16 op's result), no narrowing to `I16` and widening back.
fn round_f32_to_bf16(b: &mut KernelBuilder, f: ValueId) -> ValueId {
    let r = bf16_rounded_bits(b, f);
    let masked = bin(b, BinOp::And, r, 0xffff_0000);
    let v = b.cast(CastOp::Bitcast, Ty::I32, Ty::F32, masked);
    b.note_nan_facts(v, NanFacts::QUIET_BF16);
    // Narrowing `v` (to store it) is `r`'s upper half: `v` is no signaling NaN, and every
    // other bf16 value round-trips. `r` unmasked, so a value only stored needs no mask.
    b.note_narrow_bits(v, BF16_IN_F32, r);
    v
}

/// The `narrow_bits` keys: a rounded f16 value's `I16` bits ([`round_f32_to`]), and I32 bits
/// whose upper half is a rounded bf16 value's, the lower half meaningless
/// ([`round_f32_to_bf16`]; [`f32_to_bf16`] reads only the upper half).
const F16_BITS: u8 = 2;
const BF16_IN_F32: u8 = 3;

/// The value of f16 bits, for constants folded at lowering time.
pub fn f16_bits_value(bits: u16) -> f32 {
    ::half::f16::from_bits(bits).to_f32()
}

/// The value of bf16 bits, for constants folded at lowering time.
pub fn bf16_bits_value(bits: u16) -> f32 {
    ::half::bf16::from_bits(bits).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{run_kernel, IndexExpr, MemType};

    /// Runs `convert` over every element of `input` (of `from` memory) into `to` memory.
    fn run(input: &[u8], n: i64, from: Ty, to: Ty, convert: fn(&mut KernelBuilder, ValueId) -> ValueId) -> Vec<u8> {
        let mut b = KernelBuilder::new("conv", 1);
        let src = b.buffer("src", MemType::Scalar(from), n, false);
        let dst = b.buffer("dst", MemType::Scalar(to), n, true);
        let i = b.begin_loop(0, n);
        let x = b.load(src, IndexExpr::var(i, 1));
        let y = convert(&mut b, x);
        b.store(dst, IndexExpr::var(i, 1), y);
        b.end_loop();
        let k = b.finish();
        let mut inp = input.to_vec();
        let mut out = vec![0u8; n as usize * (to.bits() / 8) as usize];
        run_kernel(&k, &mut [&mut inp, &mut out]).expect("conversion kernel runs");
        out
    }

    fn all_halves() -> Vec<u8> {
        (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect()
    }

    /// f32 inputs around every f16/bf16 rounding boundary: each upper half with low halves
    /// below, at and above the halfway points of both formats.
    fn f32_inputs() -> Vec<u32> {
        let lows = [0u32, 1, 0x0fff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff];
        (0..=u16::MAX).flat_map(|h| lows.iter().map(move |&l| (u32::from(h) << 16) | l)).collect()
    }

    fn u16s(bytes: &[u8]) -> Vec<u16> {
        bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
    }

    fn u32s(bytes: &[u8]) -> Vec<u32> {
        bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    #[test]
    fn bf16_to_f32_is_the_bit_extension_on_all_inputs() {
        let out = u32s(&run(&all_halves(), 65536, Ty::I16, Ty::F32, bf16_to_f32));
        for (h, got) in (0..=u16::MAX).zip(out) {
            assert_eq!(got, u32::from(h) << 16, "bf16 bits {h:#06x}");
            // The value the `half` crate gives, up to its quieting of signaling NaNs.
            let want = ::half::bf16::from_bits(h).to_f32();
            assert!(f32::from_bits(got) == want || want.is_nan() && f32::from_bits(got).is_nan(), "{h:#06x}");
        }
    }

    #[test]
    fn f32_to_bf16_matches_half() {
        let inputs = f32_inputs();
        let bytes: Vec<u8> = inputs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let out = u16s(&run(&bytes, inputs.len() as i64, Ty::F32, Ty::I16, f32_to_bf16));
        for (x, got) in inputs.into_iter().zip(out) {
            assert_eq!(got, ::half::bf16::from_f32(f32::from_bits(x)).to_bits(), "f32 bits {x:#010x}");
        }
    }

    #[test]
    fn rounding_to_bf16_in_f32_matches_half() {
        // The rounded f32 value, and its narrowing (which reuses the rounding's bits), against
        // the half crate's rounding, around every bf16 rounding boundary.
        let inputs = f32_inputs();
        let bytes: Vec<u8> = inputs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let n = inputs.len() as i64;
        let rounded = u32s(&run(&bytes, n, Ty::F32, Ty::F32, |b, x| round_f32_to(b, x, true)));
        let narrow = |b: &mut KernelBuilder, x: ValueId| {
            let v = round_f32_to(b, x, true);
            f32_to_bf16(b, v)
        };
        let narrowed = u16s(&run(&bytes, n, Ty::F32, Ty::I16, narrow));
        for ((x, r), h) in inputs.into_iter().zip(rounded).zip(narrowed) {
            let want = ::half::bf16::from_f32(f32::from_bits(x));
            assert_eq!(r, want.to_f32().to_bits(), "f32 bits {x:#010x}");
            assert_eq!(h, want.to_bits(), "f32 bits {x:#010x}");
        }
    }

    #[test]
    fn bf16_arithmetic_rounds_without_a_nan_test() {
        // Every bf16 value against special operands (NaNs signaling and quiet, with every
        // payload shape, infinities, zeros, subnormals, ordinary values), in both orders: the
        // rounding of `a op b` skips its NaN test (the operands are widened bf16 values) and
        // still gives the half crate's bits, NaNs included.
        let specials: [u16; 14] =
            [0, 0x8000, 0x0001, 0x3f80, 0xbf80, 0x4049, 0x7f7f, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0xffff, 0x7fbf];
        let n = 65536 * specials.len();
        let lhs: Vec<u16> = specials.iter().flat_map(|_| 0..=u16::MAX).collect();
        let rhs: Vec<u16> = specials.iter().flat_map(|&s| std::iter::repeat_n(s, 65536)).collect();
        let ops: [(BinOp, fn(f32, f32) -> f32); 4] = [
            (BinOp::Add, |x, y| x + y),
            (BinOp::Sub, |x, y| x - y),
            (BinOp::Mul, |x, y| x * y),
            (BinOp::FDiv, |x, y| x / y),
        ];
        for (op, f) in ops {
            for (a, c) in [(&lhs, &rhs), (&rhs, &lhs)] {
                let mut b = KernelBuilder::new("bf16_op", 1);
                let x = b.buffer("x", MemType::Scalar(Ty::I16), n as i64, false);
                let y = b.buffer("y", MemType::Scalar(Ty::I16), n as i64, false);
                let out = b.buffer("out", MemType::Scalar(Ty::I16), n as i64, true);
                let i = b.begin_loop(0, n as i64);
                let xv = b.load(x, IndexExpr::var(i, 1));
                let xv = bf16_to_f32(&mut b, xv);
                let yv = b.load(y, IndexExpr::var(i, 1));
                let yv = bf16_to_f32(&mut b, yv);
                let v = b.binary(op, Ty::F32, xv, yv);
                let v = round_f32_to(&mut b, v, true);
                let h = f32_to_bf16(&mut b, v);
                b.store(out, IndexExpr::var(i, 1), h);
                b.end_loop();
                let k = b.finish();
                assert!(!k.to_string().contains("cmp."), "{op:?}: the rounding kept its NaN test:\n{k}");
                let mut xs: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
                let mut ys: Vec<u8> = c.iter().flat_map(|v| v.to_le_bytes()).collect();
                let mut got = vec![0u8; 2 * n];
                run_kernel(&k, &mut [&mut xs, &mut ys, &mut got]).expect("kernel runs");
                for ((&p, &q), got) in a.iter().zip(c).zip(u16s(&got)) {
                    let bf = ::half::bf16::from_bits;
                    let want = ::half::bf16::from_f32(f(bf(p).to_f32(), bf(q).to_f32())).to_bits();
                    assert_eq!(got, want, "{op:?} of bf16 {p:#06x} and {q:#06x}");
                }
            }
        }
    }

    #[test]
    fn half_round_trips_are_exact_on_all_inputs() {
        // Every f16/bf16 value widened and narrowed again gives back its bits (NaNs quieted).
        let to_f16 = |b: &mut KernelBuilder, x: ValueId| {
            let f = f16_to_f32(b, x);
            f32_to_f16(b, f)
        };
        let out = u16s(&run(&all_halves(), 65536, Ty::I16, Ty::I16, to_f16));
        for (h, got) in (0..=u16::MAX).zip(out) {
            let want = ::half::f16::from_f32(::half::f16::from_bits(h).to_f32()).to_bits();
            assert_eq!(got, want, "f16 bits {h:#06x}");
        }
        let to_bf16 = |b: &mut KernelBuilder, x: ValueId| {
            let f = bf16_to_f32(b, x);
            f32_to_bf16(b, f)
        };
        let out = u16s(&run(&all_halves(), 65536, Ty::I16, Ty::I16, to_bf16));
        for (h, got) in (0..=u16::MAX).zip(out) {
            let want = ::half::bf16::from_f32(::half::bf16::from_bits(h).to_f32()).to_bits();
            assert_eq!(got, want, "bf16 bits {h:#06x}");
        }
    }
}
