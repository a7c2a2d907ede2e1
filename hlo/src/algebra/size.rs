//! A single extent (`shape.size` in MLIR's shape dialect): a known non-negative integer, an
//! unknown value `?`, or an invalid value that remembers why it became invalid.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::ParseError;

/// Why a size or shape is invalid. Shared rather than copied because one failure is carried
/// unchanged through every function downstream of it.
pub type Reason = Arc<str>;

/// One extent of a shape, or a size computed from extents.
///
/// Arithmetic on sizes never turns an unknown into a known value, and an invalid operand makes
/// the result invalid with the operand's reason, so one failure is reported once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    /// A statically known value.
    Known(u64),
    /// A value only known at run time (`?`).
    Unknown,
    /// The result of a contradiction; the reason names the first failure.
    Invalid(Reason),
}

/// An extent as it may appear inside a ranked shape: known or unknown, never invalid.
///
/// A separate type from [`Size`] so that "a ranked shape with one invalid extent" cannot be
/// represented: a contradiction makes the whole shape invalid instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A statically known extent.
    Known(u64),
    /// An extent only known at run time (`?`).
    Unknown,
}

impl Size {
    /// An invalid size with the given reason.
    pub fn invalid(reason: impl Into<Reason>) -> Self {
        Size::Invalid(reason.into())
    }

    /// The value if it is statically known.
    pub fn known(&self) -> Option<u64> {
        match self {
            Size::Known(n) => Some(*n),
            Size::Unknown | Size::Invalid(_) => None,
        }
    }

    /// Whether this size is invalid.
    pub fn is_invalid(&self) -> bool {
        matches!(self, Size::Invalid(_))
    }

    /// The reason, if this size is invalid.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Size::Invalid(reason) => Some(reason),
            Size::Known(_) | Size::Unknown => None,
        }
    }

    /// The size as an extent of a ranked shape, or the reason it cannot be one.
    pub fn to_dim(&self) -> Result<Dim, Reason> {
        match self {
            Size::Known(n) => Ok(Dim::Known(*n)),
            Size::Unknown => Ok(Dim::Unknown),
            Size::Invalid(reason) => Err(reason.clone()),
        }
    }
}

impl Dim {
    /// The extent if it is statically known.
    pub fn known(self) -> Option<u64> {
        match self {
            Dim::Known(n) => Some(n),
            Dim::Unknown => None,
        }
    }
}

impl From<Dim> for Size {
    fn from(dim: Dim) -> Self {
        match dim {
            Dim::Known(n) => Size::Known(n),
            Dim::Unknown => Size::Unknown,
        }
    }
}

impl From<u64> for Size {
    fn from(n: u64) -> Self {
        Size::Known(n)
    }
}

impl From<u64> for Dim {
    fn from(n: u64) -> Self {
        Dim::Known(n)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Size::Known(n) => write!(f, "{n}"),
            Size::Unknown => f.write_str("?"),
            Size::Invalid(_) => f.write_str("invalid"),
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

impl FromStr for Dim {
    type Err = ParseError;

    /// Parses `?` or a non-negative decimal integer, surrounding whitespace allowed.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let token = text.trim();
        if token == "?" {
            return Ok(Dim::Unknown);
        }
        // `u64::from_str` accepts a leading `+`; the dialect's syntax does not.
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ParseError::BadExtent(token.to_owned()));
        }
        token.parse::<u64>().map(Dim::Known).map_err(|_| ParseError::BadExtent(token.to_owned()))
    }
}

impl FromStr for Size {
    type Err = ParseError;

    /// Parses what `shape.constant` accepts for a size: `?` or a non-negative integer. There
    /// is no literal for an invalid size; invalid sizes only arise from contradictions.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.parse::<Dim>().map(Size::from)
    }
}
