//! The 8- and 4-bit float formats (f8e5m2, f8e4m3fn, ..., f4e2m1fn): decoding their bits and
//! rounding to them, the way ml_dtypes (and so XLA) defines each format's special values.
//!
//! The interpreter keeps these values widened to f64 like every other float; rounding a value
//! to one of these formats is "encode then decode", and encoding rounds to nearest even once
//! from the exact f64 value.

use crate::element_type::ElementType;

/// Where a format keeps NaN, if anywhere.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nan {
    /// IEEE: all-ones exponent with a nonzero mantissa (and all-ones exponent, zero mantissa
    /// is infinity).
    Ieee,
    /// The "fn" formats: only the all-ones pattern (either sign) is NaN; no infinity.
    AllOnes,
    /// The "fnuz" formats: the negative-zero pattern 0x80 is the only NaN; no infinity, no -0.
    NegZero,
    /// f4e2m1fn has no NaN and no infinity.
    None,
}

/// A format's layout and special values: the one table of them (the kernel lowering's
/// conversions read it too).
#[derive(Clone, Copy)]
pub struct Format {
    pub exp_bits: u32,
    pub mant_bits: u32,
    pub bias: i32,
    pub nan: Nan,
    /// f8e8m0fnu has no sign bit.
    pub signed: bool,
}

/// The format of an 8- or 4-bit float type (`None` for every other type).
pub fn format(ty: ElementType) -> Option<Format> {
    use ElementType as E;
    let f = |exp_bits, mant_bits, bias, nan| Format { exp_bits, mant_bits, bias, nan, signed: true };
    Some(match ty {
        E::F8E5M2 => f(5, 2, 15, Nan::Ieee),
        E::F8E4M3 => f(4, 3, 7, Nan::Ieee),
        E::F8E3M4 => f(3, 4, 3, Nan::Ieee),
        E::F8E4M3FN => f(4, 3, 7, Nan::AllOnes),
        E::F8E4M3FNUZ => f(4, 3, 8, Nan::NegZero),
        E::F8E4M3B11FNUZ => f(4, 3, 11, Nan::NegZero),
        E::F8E5M2FNUZ => f(5, 2, 16, Nan::NegZero),
        E::F4E2M1FN => f(2, 1, 1, Nan::None),
        E::F8E8M0FNU => Format { exp_bits: 8, mant_bits: 0, bias: 127, nan: Nan::AllOnes, signed: false },
        _ => return None,
    })
}

/// True for the types this module handles.
pub(crate) fn is_minifloat(ty: ElementType) -> bool {
    format(ty).is_some()
}

impl Format {
    /// Bits per element, sign included.
    pub fn width(self) -> u32 {
        self.exp_bits + self.mant_bits + u32::from(self.signed)
    }

    fn max_exp_field(self) -> u32 {
        (1 << self.exp_bits) - 1
    }

    /// The largest finite value.
    fn max_finite(self) -> f64 {
        let top = self.max_exp_field() as i32;
        let full = (1u64 << self.mant_bits) - 1;
        let (exp_field, mant) = match self.nan {
            // The all-ones exponent is reserved for infinity and NaN.
            Nan::Ieee => (top - 1, full),
            // Only the all-ones mantissa of the top exponent is NaN.
            Nan::AllOnes if self.mant_bits > 0 => (top, full - 1),
            // e8m0: 0xFF is NaN, so 0xFE is the largest.
            Nan::AllOnes => (top - 1, 0),
            Nan::NegZero | Nan::None => (top, full),
        };
        self.value(exp_field as u32, mant)
    }

    fn min_normal_exp(self) -> i32 {
        1 - self.bias
    }

    /// The magnitude an exponent field and mantissa encode (subnormal when the field is 0;
    /// e8m0 has no subnormals).
    fn value(self, exp_field: u32, mant: u64) -> f64 {
        let m = self.mant_bits as i32;
        if self.mant_bits == 0 {
            return pow2(exp_field as i32 - self.bias);
        }
        if exp_field == 0 {
            mant as f64 * pow2(self.min_normal_exp() - m)
        } else {
            (1.0 + mant as f64 * pow2(-m)) * pow2(exp_field as i32 - self.bias)
        }
    }

    fn decode(self, bits: u64) -> f64 {
        let w = self.width();
        let bits = bits & ((1u64 << w) - 1);
        let sign_bit = if self.signed { (bits >> (w - 1)) & 1 } else { 0 };
        let exp_field = ((bits >> self.mant_bits) & u64::from(self.max_exp_field())) as u32;
        let mant = bits & ((1u64 << self.mant_bits) - 1);
        let mag_bits = bits & ((1u64 << (w - u32::from(self.signed))) - 1);
        match self.nan {
            Nan::Ieee if exp_field == self.max_exp_field() => {
                let v = if mant == 0 { f64::INFINITY } else { f64::NAN };
                return if sign_bit == 1 { -v } else { v };
            }
            Nan::AllOnes if mag_bits == (1u64 << (w - u32::from(self.signed))) - 1 => return f64::NAN,
            Nan::NegZero if bits == 1u64 << (w - 1) => return f64::NAN,
            _ => {}
        }
        let v = self.value(exp_field, mant);
        if sign_bit == 1 {
            -v
        } else {
            v
        }
    }

    fn nan_bits(self) -> u64 {
        let w = self.width();
        match self.nan {
            Nan::Ieee => {
                (u64::from(self.max_exp_field()) << self.mant_bits) | (1u64 << self.mant_bits.saturating_sub(1))
            }
            Nan::AllOnes => ((1u64 << w) - 1) >> u32::from(self.signed),
            Nan::NegZero | Nan::None => 1u64 << (w - 1),
        }
    }

    /// Rounds `x` to nearest even and encodes it; overflow gives infinity where the format
    /// has one, NaN where it has only NaN, and the largest value for f4e2m1fn.
    fn encode(self, x: f64) -> u64 {
        let w = self.width();
        let sign = if self.signed && x.is_sign_negative() { 1u64 << (w - 1) } else { 0 };
        if x.is_nan() {
            return match self.nan {
                // ml_dtypes turns NaN into negative zero here, having nothing better.
                Nan::None => 1u64 << (w - 1),
                _ => self.nan_bits(),
            };
        }
        if !self.signed && x < 0.0 {
            return self.nan_bits();
        }
        let a = x.abs();
        if self.mant_bits == 0 {
            return self.encode_exponent_only(a);
        }
        let max = self.max_finite();
        let overflow = |sign: u64| -> u64 {
            match self.nan {
                Nan::Ieee => sign | (u64::from(self.max_exp_field()) << self.mant_bits),
                Nan::None => sign | ((1u64 << (w - 1)) - 1),
                _ => self.nan_bits(),
            }
        };
        if a.is_infinite() {
            return overflow(sign);
        }
        if a == 0.0 {
            return if self.nan == Nan::NegZero { 0 } else { sign };
        }
        let e = exponent_of(a).max(self.min_normal_exp());
        let quantum = pow2(e - self.mant_bits as i32);
        let r = (a / quantum).round_ties_even() * quantum;
        if r > max {
            return overflow(sign);
        }
        if r == 0.0 {
            return if self.nan == Nan::NegZero { 0 } else { sign };
        }
        let re = exponent_of(r);
        let (exp_field, mant) = if re < self.min_normal_exp() {
            (0u64, (r / pow2(self.min_normal_exp() - self.mant_bits as i32)) as u64)
        } else {
            let scaled = r / pow2(re - self.mant_bits as i32);
            ((re + self.bias) as u64, scaled as u64 - (1u64 << self.mant_bits))
        };
        sign | (exp_field << self.mant_bits) | mant
    }

    /// e8m0 (ml_dtypes' rules): the nearest power of two with ties (1.5 * 2^e) rounding up;
    /// zero, infinity and values above the range are NaN, values below it the smallest power.
    fn encode_exponent_only(self, a: f64) -> u64 {
        if a.is_infinite() || a == 0.0 {
            return self.nan_bits();
        }
        let min_e = -self.bias;
        if exponent_of(a) < min_e {
            return 0;
        }
        let e = exponent_of(a);
        let e = if a / pow2(e) >= 1.5 { e + 1 } else { e };
        let field = (e + self.bias).max(0);
        if field as u64 >= u64::from(self.max_exp_field()) {
            return self.nan_bits();
        }
        field as u64
    }
}

/// 2^e for exponents well inside f64's range (these formats never leave it).
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// floor(log2(a)) for a positive finite normal-or-subnormal f64.
fn exponent_of(a: f64) -> i32 {
    let bits = a.to_bits();
    let field = ((bits >> 52) & 0x7ff) as i32;
    if field == 0 {
        // Subnormal f64: far below every format's range.
        -1100
    } else {
        field - 1023
    }
}

/// The value of the bits of a mini-float element.
pub(crate) fn decode(ty: ElementType, bits: u64) -> f64 {
    format(ty).map_or(f64::NAN, |f| f.decode(bits))
}

/// The bits of `x` rounded to the format (round to nearest even).
pub(crate) fn encode(ty: ElementType, x: f64) -> u64 {
    format(ty).map_or(0, |f| f.encode(x))
}

/// `x` rounded to the format and widened back.
pub(crate) fn round(ty: ElementType, x: f64) -> f64 {
    match format(ty) {
        Some(f) => f.decode(f.encode(x)),
        None => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ElementType as E;

    #[test]
    fn largest_values() {
        assert_eq!(format(E::F8E4M3FN).unwrap().max_finite(), 448.0);
        assert_eq!(format(E::F8E5M2).unwrap().max_finite(), 57344.0);
        assert_eq!(format(E::F8E4M3FNUZ).unwrap().max_finite(), 240.0);
        assert_eq!(format(E::F8E5M2FNUZ).unwrap().max_finite(), 57344.0);
        assert_eq!(format(E::F8E4M3B11FNUZ).unwrap().max_finite(), 30.0);
        assert_eq!(format(E::F8E4M3).unwrap().max_finite(), 240.0);
        assert_eq!(format(E::F8E3M4).unwrap().max_finite(), 15.5);
        assert_eq!(format(E::F4E2M1FN).unwrap().max_finite(), 6.0);
        assert_eq!(format(E::F8E8M0FNU).unwrap().max_finite(), 2f64.powi(127));
    }

    #[test]
    fn every_pattern_round_trips() {
        for ty in [
            E::F8E5M2,
            E::F8E4M3,
            E::F8E3M4,
            E::F8E4M3FN,
            E::F8E4M3FNUZ,
            E::F8E4M3B11FNUZ,
            E::F8E5M2FNUZ,
            E::F4E2M1FN,
            E::F8E8M0FNU,
        ] {
            let w = ty.bit_width();
            for bits in 0..(1u64 << w) {
                let v = decode(ty, bits);
                if v.is_nan() {
                    assert!(decode(ty, encode(ty, v)).is_nan(), "{ty} {bits:#x}");
                } else {
                    assert_eq!(encode(ty, v), bits, "{ty} {bits:#x} = {v}");
                }
            }
        }
    }

    #[test]
    fn rounding_and_overflow() {
        // Halfway between 448 (mantissa 110) and 480 (which is NaN's pattern): to even, 448.
        assert_eq!(round(E::F8E4M3FN, 464.0), 448.0);
        assert!(round(E::F8E4M3FN, 465.0).is_nan());
        assert!(round(E::F8E4M3FN, f64::INFINITY).is_nan());
        // e5m2 has infinity: 61440 is the tie between 57344 (odd mantissa) and 2^16 (even),
        // so it rounds up and overflows.
        assert_eq!(round(E::F8E5M2, 61439.0), 57344.0);
        assert_eq!(round(E::F8E5M2, 61440.0), f64::INFINITY);
        assert_eq!(round(E::F8E5M2, -1e9), f64::NEG_INFINITY);
        // 1 + 1/16 lies halfway between 1 and 1.125 in e4m3: to even (1).
        assert_eq!(round(E::F8E4M3FN, 1.0625), 1.0);
        assert_eq!(round(E::F8E4M3FN, 1.1875), 1.25);
        // Subnormals: e4m3fn's smallest is 2^-9; half of it ties to zero, more rounds up.
        assert_eq!(round(E::F8E4M3FN, 2f64.powi(-10)), 0.0);
        assert_eq!(round(E::F8E4M3FN, 1.5 * 2f64.powi(-10)), 2f64.powi(-9));
        // fnuz formats have no negative zero: -0 and tiny negatives become +0.
        assert_eq!(encode(E::F8E4M3FNUZ, -0.0), 0);
        assert_eq!(encode(E::F8E5M2FNUZ, -1e-30), 0);
        assert!(decode(E::F8E4M3FNUZ, 0x80).is_nan());
        // f4e2m1fn saturates and has no NaN (ml_dtypes gives -0 for NaN).
        assert_eq!(round(E::F4E2M1FN, 100.0), 6.0);
        assert_eq!(round(E::F4E2M1FN, -7.0), -6.0);
        assert_eq!(round(E::F4E2M1FN, 2.5), 2.0);
        assert_eq!(round(E::F4E2M1FN, 0.25), 0.0);
        assert_eq!(round(E::F4E2M1FN, 0.26), 0.5);
        // e8m0: powers of two only.
        assert_eq!(round(E::F8E8M0FNU, 3.0), 4.0);
        assert_eq!(round(E::F8E8M0FNU, 2.9), 2.0);
        assert_eq!(round(E::F8E8M0FNU, 1.5), 2.0);
        assert_eq!(round(E::F8E8M0FNU, 2f64.powi(-140)), 2f64.powi(-127));
        assert!(round(E::F8E8M0FNU, -1.0).is_nan());
        assert!(round(E::F8E8M0FNU, 0.0).is_nan());
        assert_eq!(encode(E::F4E2M1FN, f64::NAN), 0x8);
    }
}
