//! Sub-byte integers (s1/s2/s4, u1/u2/u4) in `I8` registers.
//!
//! A register always holds the value itself: sign-extended for signed types, zero-extended
//! for unsigned ones (which is also what an unpacked byte of a literal holds). Machine
//! operations on the `I8` can leave that form (a sum past the range, a logical shift of the
//! sign-extended bits), so every integer op on these types ends with [`wrap`], which gives
//! the interpreter's two's-complement wrap to the type's width.

use tessera_hlo::ElementType;

use crate::kernel::{BinOp, Const, KernelBuilder, Ty, ValueId};

/// True for integer types narrower than a byte.
pub fn is_narrow_int(et: ElementType) -> bool {
    et.is_integral() && et.bit_width() < 8
}

fn c8(b: &mut KernelBuilder, v: i64) -> ValueId {
    b.constant(Const::Int { ty: Ty::I8, bits: v })
}

/// Wraps an `I8` to the width of `et` (a no-op for other types).
pub fn wrap(b: &mut KernelBuilder, et: ElementType, v: ValueId) -> ValueId {
    if !is_narrow_int(et) {
        return v;
    }
    if et.is_signed_integral() {
        sign_extend(b, et, v)
    } else {
        let w = i64::from(et.bit_width());
        let mask = c8(b, (1 << w) - 1);
        b.binary(BinOp::And, Ty::I8, v, mask)
    }
}

/// The type's bits of an `I8` sign-extended from its top bit.
pub fn sign_extend(b: &mut KernelBuilder, et: ElementType, v: ValueId) -> ValueId {
    let sh = c8(b, 8 - i64::from(et.bit_width()));
    let up = b.binary(BinOp::Shl, Ty::I8, v, sh);
    b.binary(BinOp::AShr, Ty::I8, up, sh)
}

/// Only the type's own bits of an `I8` (what logical shifts, popcount and clz look at).
pub fn low_bits(b: &mut KernelBuilder, et: ElementType, v: ValueId) -> ValueId {
    let mask = c8(b, (1 << et.bit_width()) - 1);
    b.binary(BinOp::And, Ty::I8, v, mask)
}

/// The smallest and largest value of a narrow type.
pub fn range(et: ElementType) -> (i64, i64) {
    let w = et.bit_width();
    if et.is_signed_integral() {
        (-(1i64 << (w - 1)), (1i64 << (w - 1)) - 1)
    } else {
        (0, (1i64 << w) - 1)
    }
}

/// Clamps an `I8` (from a saturating float conversion to 8 bits) to the narrow type's range,
/// as the interpreter's float-to-integer conversion saturates.
pub fn saturate(b: &mut KernelBuilder, et: ElementType, v: ValueId) -> ValueId {
    let (lo, hi) = range(et);
    let (lo, hi) = (c8(b, lo), c8(b, hi));
    if et.is_signed_integral() {
        let t = b.binary(BinOp::SMax, Ty::I8, v, lo);
        b.binary(BinOp::SMin, Ty::I8, t, hi)
    } else {
        b.binary(BinOp::UMin, Ty::I8, v, hi)
    }
}
