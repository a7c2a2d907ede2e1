//! The shape functions of MLIR's shape dialect over [`Size`] and [`Extents`].
//!
//! Every function that takes a size or shape returns the invalid value when an operand is
//! invalid, keeping that operand's reason (the left one's if both are invalid). A caller thus
//! reports one failure however many functions it flowed through, and never a cascade of
//! follow-on errors.

use super::extents::Extents;
use super::size::{Dim, Reason, Size};

/// The first invalid reason among sizes, in operand order.
fn first_invalid_size(operands: [&Size; 2]) -> Option<Reason> {
    operands.into_iter().find_map(|s| match s {
        Size::Invalid(reason) => Some(reason.clone()),
        Size::Known(_) | Size::Unknown => None,
    })
}

/// A size arithmetic operation: unknown stays unknown, overflow is a contradiction.
fn arith(lhs: &Size, rhs: &Size, op: &str, apply: fn(u64, u64) -> Option<u64>) -> Size {
    if let Some(reason) = first_invalid_size([lhs, rhs]) {
        return Size::Invalid(reason);
    }
    match (lhs, rhs) {
        (Size::Known(a), Size::Known(b)) => match apply(*a, *b) {
            Some(n) => Size::Known(n),
            None => Size::invalid(format!("size overflow: {a} {op} {b}")),
        },
        _ => Size::Unknown,
    }
}

/// `shape.add`: the sum of two sizes; unknown if either is unknown.
///
/// A sum that does not fit in `u64` is invalid rather than wrapped, since a wrapped extent
/// would silently describe a different shape.
pub fn add(lhs: &Size, rhs: &Size) -> Size {
    arith(lhs, rhs, "+", u64::checked_add)
}

/// `shape.mul`: the product of two sizes; unknown if either is unknown.
///
/// `0 * ?` is still unknown: the dialect defines the result from the operands' kinds, not from
/// what the unknown value could be.
pub fn mul(lhs: &Size, rhs: &Size) -> Size {
    arith(lhs, rhs, "*", u64::checked_mul)
}

/// The join of two extents, or `None` on a contradiction.
fn join_dim(lhs: Dim, rhs: Dim) -> Option<Dim> {
    match (lhs, rhs) {
        (Dim::Known(a), Dim::Known(b)) => (a == b).then_some(Dim::Known(a)),
        (Dim::Known(a), Dim::Unknown) | (Dim::Unknown, Dim::Known(a)) => Some(Dim::Known(a)),
        (Dim::Unknown, Dim::Unknown) => Some(Dim::Unknown),
    }
}

/// `shape.join` on sizes: the most specific size both operands allow.
///
/// Known beats unknown; two different known sizes are a contradiction.
pub fn join_size(lhs: &Size, rhs: &Size) -> Size {
    join_size_impl(lhs, rhs, None)
}

/// [`join_size`] with the op's `error` attribute: on a contradiction the invalid result
/// carries `error` instead of the default reason.
pub fn join_size_with_error(lhs: &Size, rhs: &Size, error: &str) -> Size {
    join_size_impl(lhs, rhs, Some(error))
}

fn join_size_impl(lhs: &Size, rhs: &Size, error: Option<&str>) -> Size {
    match (lhs.to_dim(), rhs.to_dim()) {
        (Err(reason), _) | (_, Err(reason)) => Size::Invalid(reason),
        (Ok(a), Ok(b)) => match join_dim(a, b) {
            Some(dim) => dim.into(),
            None => Size::invalid(error.map_or_else(|| format!("join: sizes {lhs} and {rhs} differ"), str::to_owned)),
        },
    }
}

/// `shape.join` on shapes: the least general shape that satisfies both operands.
///
/// `[*]` joined with anything is the other operand; two ranked shapes must have the same rank
/// and their extents are joined pairwise. The seed's table:
///
/// | lhs | rhs | result |
/// | --- | --- | --- |
/// | `[*]` | `[*]` | `[*]` |
/// | `[*]` | `[1, ?]` | `[1, ?]` |
/// | `[1, 2]` | `[1, ?]` | `[1, 2]` |
/// | `[*]` | `[1, 2]` | `[1, 2]` |
/// | `[]` | `[]` | `[]` |
/// | `[]` | `[*]` | `[]` |
/// | `[]` | `[?, ?]` | `[invalid]` |
/// | `[1, ?]` | `[2, ?, ?]` | `[invalid]` |
pub fn join(lhs: &Extents, rhs: &Extents) -> Extents {
    join_impl(lhs, rhs, None)
}

/// [`join`] with the op's `error` attribute: on a contradiction the invalid result carries
/// `error` instead of the default reason.
pub fn join_with_error(lhs: &Extents, rhs: &Extents, error: &str) -> Extents {
    join_impl(lhs, rhs, Some(error))
}

fn join_impl(lhs: &Extents, rhs: &Extents, error: Option<&str>) -> Extents {
    let fail = |default: String| Extents::invalid(error.map_or(default, str::to_owned));
    match (lhs, rhs) {
        // Tried first so that an invalid operand wins over an unranked one.
        (Extents::Invalid(reason), _) | (_, Extents::Invalid(reason)) => Extents::Invalid(reason.clone()),
        (Extents::Unranked, other) | (other, Extents::Unranked) => other.clone(),
        (Extents::Ranked(a), Extents::Ranked(b)) => {
            if a.len() != b.len() {
                return fail(format!("join: ranks differ: {lhs} has rank {}, {rhs} has rank {}", a.len(), b.len()));
            }
            let mut dims = Vec::with_capacity(a.len());
            for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
                match join_dim(x, y) {
                    Some(dim) => dims.push(dim),
                    None => {
                        return fail(format!("join: extents {x} and {y} differ at dimension {i} of {lhs} and {rhs}"))
                    }
                }
            }
            Extents::Ranked(dims)
        }
    }
}

/// `shape.broadcast`: the shape two operands broadcast to.
///
/// Unranked in, unranked out. Otherwise the shorter shape gets 1s prepended, and each output
/// extent is the first rule that applies:
///
/// 1. `lhs` if `lhs == rhs`;
/// 2. `rhs` if `lhs == 1`;
/// 3. `lhs` if `rhs == 1`;
/// 4. `lhs` if `rhs` is unknown;
/// 5. `rhs` if `lhs` is unknown;
/// 6. otherwise a contradiction.
///
/// This is the dialect's table with the `1` rules moved ahead of the unknown ones. In the
/// dialect's order, `1` against `?` gives `1` (and `?` against `1` gives `1`), but the `?`
/// may be 5 at run time, making the true result 5: a static 1 would be a wrong shape, not a
/// less specific one. Moving the rules changes only those two cases, to `?`; every other
/// result, and every contradiction, is the dialect's. Prepended 1s are what make this
/// matter: `[]` against `[?, 2]` must stay `[?, 2]`.
pub fn broadcast(lhs: &Extents, rhs: &Extents) -> Extents {
    broadcast_impl(lhs, rhs, None)
}

/// [`broadcast`] with the op's `error` attribute: when no broadcast shape exists the invalid
/// result carries `error` instead of the default reason.
pub fn broadcast_with_error(lhs: &Extents, rhs: &Extents, error: &str) -> Extents {
    broadcast_impl(lhs, rhs, Some(error))
}

fn broadcast_dim(lhs: Dim, rhs: Dim) -> Option<Dim> {
    match (lhs, rhs) {
        (l, r) if l == r => Some(l),
        (Dim::Known(1), r) => Some(r),
        (l, Dim::Known(1)) => Some(l),
        (l, Dim::Unknown) => Some(l),
        (Dim::Unknown, r) => Some(r),
        (Dim::Known(_), Dim::Known(_)) => None,
    }
}

fn broadcast_impl(lhs: &Extents, rhs: &Extents, error: Option<&str>) -> Extents {
    let (a, b) = match (lhs, rhs) {
        // Tried first so that an invalid operand wins over an unranked one.
        (Extents::Invalid(reason), _) | (_, Extents::Invalid(reason)) => return Extents::Invalid(reason.clone()),
        (Extents::Unranked, _) | (_, Extents::Unranked) => return Extents::Unranked,
        (Extents::Ranked(a), Extents::Ranked(b)) => (a, b),
    };
    let rank = a.len().max(b.len());
    let one = Dim::Known(1);
    let padded =
        |dims: &[Dim], i: usize| (i + dims.len()).checked_sub(rank).and_then(|j| dims.get(j).copied()).unwrap_or(one);
    let mut dims = Vec::with_capacity(rank);
    for i in 0..rank {
        let (x, y) = (padded(a, i), padded(b, i));
        match broadcast_dim(x, y) {
            Some(dim) => dims.push(dim),
            None => {
                return Extents::invalid(error.map_or_else(
                    || {
                        format!(
                            "broadcast: extents {x} and {y} are incompatible at output \
                             dimension {i} of {lhs} and {rhs}"
                        )
                    },
                    str::to_owned,
                ))
            }
        }
    }
    Extents::Ranked(dims)
}

/// The outcome of [`reduce`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reduction<T> {
    /// The last value the reduction function returned (the initial value for rank 0).
    Value(T),
    /// The shape was unranked, so there was nothing to iterate over.
    Unranked,
    /// The shape was invalid.
    Invalid(Reason),
}

/// `shape.reduce`: folds `step(index, extent, accumulator)` over the extents of a ranked shape
/// in order, starting from `init`.
///
/// An unranked shape yields [`Reduction::Unranked`] (the dialect's "the result is also
/// unranked") and an invalid one yields its reason; `step` is not called in either case.
pub fn reduce<T, F>(shape: &Extents, init: T, mut step: F) -> Reduction<T>
where
    F: FnMut(usize, Dim, T) -> T,
{
    match shape {
        Extents::Ranked(dims) => {
            Reduction::Value(dims.iter().enumerate().fold(init, |acc, (i, &dim)| step(i, dim, acc)))
        }
        Extents::Unranked => Reduction::Unranked,
        Extents::Invalid(reason) => Reduction::Invalid(reason.clone()),
    }
}

/// The number of elements of a shape, computed as the dialect's example does: `reduce` with
/// `mul`, starting from 1.
///
/// An unranked shape has an unknown element count. A known zero extent does not make an
/// unknown count known, consistent with [`mul`].
pub fn num_elements(shape: &Extents) -> Size {
    match reduce(shape, Size::Known(1), |_, dim, acc| mul(&acc, &dim.into())) {
        Reduction::Value(size) => size,
        Reduction::Unranked => Size::Unknown,
        Reduction::Invalid(reason) => Size::Invalid(reason),
    }
}

/// `shape.create_shape`: a shape from a 1-D tensor of `i32` extents.
///
/// The rank is the number of values. A negative value is not an extent, so it makes the
/// shape invalid (naming the first such value) instead of being reinterpreted.
pub fn create_shape(values: &[i32]) -> Extents {
    let mut dims = Vec::with_capacity(values.len());
    for (i, &v) in values.iter().enumerate() {
        match u64::try_from(v) {
            Ok(n) => dims.push(Dim::Known(n)),
            Err(_) => return Extents::invalid(format!("create_shape: extent {v} at dimension {i} is negative")),
        }
    }
    Extents::Ranked(dims)
}

/// A value paired with its shape (`shape.value_shape`); either may be unknown.
///
/// When both are known, the value conforms to the shape; constructing one is the caller's
/// promise of that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueShape<V> {
    /// The value, if known.
    pub value: Option<V>,
    /// The shape; [`Extents::Unranked`] when nothing is known about it.
    pub shape: Extents,
}

/// Anything with an abstract shape: the operand type of [`shape_of`].
pub trait Shaped {
    /// The abstract shape of `self`.
    fn extents(&self) -> Extents;
}

impl<V> Shaped for ValueShape<V> {
    fn extents(&self) -> Extents {
        self.shape.clone()
    }
}

impl Shaped for Extents {
    fn extents(&self) -> Extents {
        self.clone()
    }
}

/// `shape.shape_of`: the shape of a value-shape or shaped operand.
pub fn shape_of<T: Shaped + ?Sized>(operand: &T) -> Extents {
    operand.extents()
}
