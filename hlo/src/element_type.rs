//! Element types: every primitive type XLA's HLO text prints, with its name, bit width and
//! class. The f8/f4 variants and the sub-byte integers are storage types here; later stages
//! decide which ones they compute with.

use std::fmt;

macro_rules! element_types {
    ($($variant:ident => $name:literal, $bits:expr, $class:ident;)*) => {
        /// A primitive (element) type. Tuple, token and opaque are shapes of their own
        /// ([`crate::Shape`]), but the names exist here too so the text parser can recognize them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ElementType { $($variant,)* }

        impl ElementType {
            /// Every element type, in declaration order.
            pub const ALL: &'static [ElementType] = &[$(ElementType::$variant,)*];

            /// The name XLA prints (`f32`, `bf16`, `f8e4m3fn`, `token`, ...).
            pub fn name(self) -> &'static str {
                match self { $(ElementType::$variant => $name,)* }
            }

            /// Bits one element occupies when densely packed (0 for token, tuple and opaque).
            pub fn bit_width(self) -> u32 {
                match self { $(ElementType::$variant => $bits,)* }
            }

            /// The broad class of the type, which decides what arithmetic means for it.
            pub fn class(self) -> TypeClass {
                match self { $(ElementType::$variant => TypeClass::$class,)* }
            }

            /// Parses an element-type name as XLA prints it.
            pub fn from_name(name: &str) -> Option<ElementType> {
                match name { $($name => Some(ElementType::$variant),)* _ => None }
            }
        }
    };
}

element_types! {
    Pred => "pred", 8, Pred;
    S1 => "s1", 1, Signed;
    S2 => "s2", 2, Signed;
    S4 => "s4", 4, Signed;
    S8 => "s8", 8, Signed;
    S16 => "s16", 16, Signed;
    S32 => "s32", 32, Signed;
    S64 => "s64", 64, Signed;
    U1 => "u1", 1, Unsigned;
    U2 => "u2", 2, Unsigned;
    U4 => "u4", 4, Unsigned;
    U8 => "u8", 8, Unsigned;
    U16 => "u16", 16, Unsigned;
    U32 => "u32", 32, Unsigned;
    U64 => "u64", 64, Unsigned;
    F16 => "f16", 16, Float;
    BF16 => "bf16", 16, Float;
    F32 => "f32", 32, Float;
    F64 => "f64", 64, Float;
    C64 => "c64", 64, Complex;
    C128 => "c128", 128, Complex;
    F4E2M1FN => "f4e2m1fn", 4, Float;
    F8E3M4 => "f8e3m4", 8, Float;
    F8E4M3 => "f8e4m3", 8, Float;
    F8E4M3FN => "f8e4m3fn", 8, Float;
    F8E4M3B11FNUZ => "f8e4m3b11fnuz", 8, Float;
    F8E4M3FNUZ => "f8e4m3fnuz", 8, Float;
    F8E5M2 => "f8e5m2", 8, Float;
    F8E5M2FNUZ => "f8e5m2fnuz", 8, Float;
    F8E8M0FNU => "f8e8m0fnu", 8, Float;
    Token => "token", 0, Token;
    Tuple => "tuple", 0, Tuple;
    Opaque => "opaque", 0, Opaque;
}

/// What kind of values an element type holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TypeClass {
    Pred,
    Signed,
    Unsigned,
    Float,
    Complex,
    Token,
    Tuple,
    Opaque,
}

impl ElementType {
    /// True for types an array can hold (everything but token, tuple and opaque).
    pub fn is_array_type(self) -> bool {
        !matches!(self.class(), TypeClass::Token | TypeClass::Tuple | TypeClass::Opaque)
    }

    pub fn is_integral(self) -> bool {
        matches!(self.class(), TypeClass::Signed | TypeClass::Unsigned)
    }

    pub fn is_signed_integral(self) -> bool {
        self.class() == TypeClass::Signed
    }

    pub fn is_unsigned_integral(self) -> bool {
        self.class() == TypeClass::Unsigned
    }

    pub fn is_float(self) -> bool {
        self.class() == TypeClass::Float
    }

    pub fn is_complex(self) -> bool {
        self.class() == TypeClass::Complex
    }

    pub fn is_pred(self) -> bool {
        self == ElementType::Pred
    }

    /// Floats and complex numbers: the types `exp`, `log`, `sqrt`... accept.
    pub fn is_floating_or_complex(self) -> bool {
        self.is_float() || self.is_complex()
    }

    /// Bytes one element takes when stored unpacked (sub-byte types take one byte each
    /// unless a layout's `E(bits)` packs them).
    pub fn byte_size(self) -> usize {
        (self.bit_width() as usize).div_ceil(8)
    }

    /// For complex types, the type of the real and imaginary parts.
    pub fn complex_component(self) -> Option<ElementType> {
        match self {
            ElementType::C64 => Some(ElementType::F32),
            ElementType::C128 => Some(ElementType::F64),
            _ => None,
        }
    }

    /// Exponent and mantissa bit counts of a floating-point type (as `reduce-precision` and
    /// the literal printer need them).
    pub fn float_format(self) -> Option<(u32, u32)> {
        Some(match self {
            ElementType::F16 => (5, 10),
            ElementType::BF16 => (8, 7),
            ElementType::F32 => (8, 23),
            ElementType::F64 => (11, 52),
            ElementType::F4E2M1FN => (2, 1),
            ElementType::F8E3M4 => (3, 4),
            ElementType::F8E4M3 | ElementType::F8E4M3FN | ElementType::F8E4M3FNUZ => (4, 3),
            ElementType::F8E4M3B11FNUZ => (4, 3),
            ElementType::F8E5M2 | ElementType::F8E5M2FNUZ => (5, 2),
            ElementType::F8E8M0FNU => (8, 0),
            _ => return None,
        })
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &t in ElementType::ALL {
            assert_eq!(ElementType::from_name(t.name()), Some(t));
        }
        assert_eq!(ElementType::from_name("f31"), None);
    }

    #[test]
    fn widths() {
        assert_eq!(ElementType::BF16.bit_width(), 16);
        assert_eq!(ElementType::S4.byte_size(), 1);
        assert_eq!(ElementType::C128.byte_size(), 16);
        assert_eq!(ElementType::Pred.byte_size(), 1);
    }
}
