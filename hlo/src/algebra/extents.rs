//! An abstract shape (`shape.type` in MLIR's shape dialect): unranked, ranked with known or
//! unknown extents, or invalid.

use std::fmt;
use std::str::FromStr;

use super::size::{Dim, Reason, Size};
use super::ParseError;

/// An abstract shape.
///
/// Printed as the dialect prints it: `[*]` unranked, `[?, 2]` ranked with one unknown extent,
/// `[]` a scalar, `[invalid]` invalid. [`FromStr`] reads the same text except `[invalid]`,
/// which (like `shape.constant`) has no literal form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Extents {
    /// Rank not known (`[*]`).
    Unranked,
    /// Rank known; each extent known or unknown.
    Ranked(Vec<Dim>),
    /// A contradiction was found; the reason names the first one.
    Invalid(Reason),
}

impl Extents {
    /// A rank-0 shape, `[]`.
    pub fn scalar() -> Self {
        Extents::Ranked(Vec::new())
    }

    /// A ranked shape whose extents are all statically known.
    pub fn known(extents: &[u64]) -> Self {
        Extents::Ranked(extents.iter().copied().map(Dim::Known).collect())
    }

    /// A ranked shape from sizes. An invalid size makes the whole shape invalid with that
    /// size's reason, because a ranked shape cannot hold an invalid extent.
    pub fn from_sizes<I>(sizes: I) -> Self
    where
        I: IntoIterator<Item = Size>,
    {
        let dims: Result<Vec<Dim>, Reason> = sizes.into_iter().map(|s| s.to_dim()).collect();
        match dims {
            Ok(dims) => Extents::Ranked(dims),
            Err(reason) => Extents::Invalid(reason),
        }
    }

    /// An invalid shape with the given reason.
    pub fn invalid(reason: impl Into<Reason>) -> Self {
        Extents::Invalid(reason.into())
    }

    /// The rank as a size: known for ranked shapes, unknown for `[*]`, invalid for invalid.
    pub fn rank(&self) -> Size {
        match self {
            Extents::Ranked(dims) => Size::Known(dims.len() as u64),
            Extents::Unranked => Size::Unknown,
            Extents::Invalid(reason) => Size::Invalid(reason.clone()),
        }
    }

    /// The extents if the shape is ranked.
    pub fn dims(&self) -> Option<&[Dim]> {
        match self {
            Extents::Ranked(dims) => Some(dims),
            Extents::Unranked | Extents::Invalid(_) => None,
        }
    }

    /// The extents if the shape is ranked and every extent is known.
    pub fn to_static(&self) -> Option<Vec<u64>> {
        self.dims()?.iter().map(|d| d.known()).collect()
    }

    /// Whether this shape is invalid.
    pub fn is_invalid(&self) -> bool {
        matches!(self, Extents::Invalid(_))
    }

    /// The reason, if this shape is invalid.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Extents::Invalid(reason) => Some(reason),
            Extents::Unranked | Extents::Ranked(_) => None,
        }
    }
}

impl fmt::Display for Extents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Extents::Unranked => f.write_str("[*]"),
            Extents::Invalid(_) => f.write_str("[invalid]"),
            Extents::Ranked(dims) => {
                f.write_str("[")?;
                for (i, dim) in dims.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{dim}")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl FromStr for Extents {
    type Err = ParseError;

    /// Parses `[*]`, `[]` or a bracketed comma-separated list of `?` and integers.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let inner = text
            .trim()
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .ok_or_else(|| ParseError::MissingBrackets(text.to_owned()))?;
        let inner = inner.trim();
        if inner == "*" {
            return Ok(Extents::Unranked);
        }
        if inner.is_empty() {
            return Ok(Extents::scalar());
        }
        inner.split(',').map(str::parse::<Dim>).collect::<Result<Vec<_>, _>>().map(Extents::Ranked)
    }
}
