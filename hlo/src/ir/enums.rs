//! Typed views of the bare-word attributes whose values later stages branch on
//! (`comparison_direction=LT`, `fft_type=RFFT`, `distribution=rng_normal`, ...).
//!
//! The IR keeps these attributes as [`AttrValue::Enum`](super::AttrValue::Enum) text so that
//! printing stays byte-exact; these enums are what the verifier and the interpreter parse that
//! text into. Each `parse` accepts exactly the spelling XLA prints.

use std::fmt;

macro_rules! word_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($variant,)* }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The word XLA prints for this value.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }

            /// Parses the word XLA prints; `None` for anything else.
            pub fn parse(text: &str) -> Option<$name> {
                match text { $($text => Some($name::$variant),)* _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

word_enum! {
    /// `direction=` of `compare`.
    ComparisonDirection {
        Eq => "EQ",
        Ne => "NE",
        Ge => "GE",
        Gt => "GT",
        Le => "LE",
        Lt => "LT",
    }
}

word_enum! {
    /// `type=` of `compare`: which ordering the comparison uses.
    ComparisonType {
        Float => "FLOAT",
        TotalOrder => "TOTALORDER",
        Signed => "SIGNED",
        Unsigned => "UNSIGNED",
    }
}

word_enum! {
    /// `fft_type=` of `fft`.
    FftType {
        Fft => "FFT",
        Ifft => "IFFT",
        Rfft => "RFFT",
        Irfft => "IRFFT",
    }
}

word_enum! {
    /// `distribution=` of `rng`.
    RandomDistribution {
        Uniform => "rng_uniform",
        Normal => "rng_normal",
    }
}

word_enum! {
    /// `algorithm=` of `rng-bit-generator`.
    RandomAlgorithm {
        Default => "rng_default",
        ThreeFry => "rng_three_fry",
        Philox => "rng_philox",
    }
}

word_enum! {
    /// `transpose_a=` of `triangular-solve`.
    TriangularTranspose {
        NoTranspose => "NO_TRANSPOSE",
        Transpose => "TRANSPOSE",
        Adjoint => "ADJOINT",
    }
}

word_enum! {
    /// `kind=` of `fusion`.
    FusionKind {
        Loop => "kLoop",
        Input => "kInput",
        Output => "kOutput",
        Custom => "kCustom",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &d in ComparisonDirection::ALL {
            assert_eq!(ComparisonDirection::parse(d.name()), Some(d));
        }
        for &t in FftType::ALL {
            assert_eq!(FftType::parse(&t.to_string()), Some(t));
        }
        assert_eq!(RandomDistribution::parse("rng_normal"), Some(RandomDistribution::Normal));
        assert_eq!(ComparisonDirection::parse("lt"), None);
        assert_eq!(FusionKind::parse("kLoop"), Some(FusionKind::Loop));
    }
}
