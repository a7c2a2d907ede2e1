//! A static shape with an origin: its sub-shapes (slices keep the rank, chips drop it) and the
//! iteration over all of its indices in lexicographic order.

use super::extents::Extents;
use super::functions::Shaped;

/// Why a slice, chip or origin was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexSpaceError {
    /// A coordinate list does not have one entry per mode.
    #[error("expected {expected} coordinates (one per mode), got {found}")]
    RankMismatch {
        /// The rank of the shape.
        expected: usize,
        /// The number of coordinates given.
        found: usize,
    },
    /// A range ends before it begins.
    #[error("mode {mode}: range {begin}..{end} ends before it begins")]
    ReversedRange {
        /// The mode of the range.
        mode: usize,
        /// First index in the range.
        begin: u64,
        /// First index past the range.
        end: u64,
    },
    /// A range reaches past the extent of its mode.
    #[error("mode {mode}: range {begin}..{end} exceeds the extent {extent}")]
    OutOfBounds {
        /// The mode of the range.
        mode: usize,
        /// First index in the range.
        begin: u64,
        /// First index past the range.
        end: u64,
        /// The extent of the mode.
        extent: u64,
    },
    /// More modes pinned than the shape has.
    #[error("{pins} pinned indices for a rank-{rank} shape")]
    TooManyPins {
        /// The number of pinned indices.
        pins: usize,
        /// The rank of the shape.
        rank: usize,
    },
    /// The last index of a mode would not fit in `u64` with this origin.
    #[error("mode {mode}: origin {origin} plus extent {extent} overflows u64")]
    OriginOverflow {
        /// The mode.
        mode: usize,
        /// The requested origin of the mode.
        origin: u64,
        /// The extent of the mode.
        extent: u64,
    },
}

/// A hyper-rectangle of indices: an extent per mode and an origin, the index of its first
/// element.
///
/// A fresh shape has the zero origin. A slice or chip has the index of its first element in
/// the shape it was cut from, so iterating over a sub-shape names the same elements as
/// iterating over the whole would. Equality compares both extents and origin.
///
/// Invariant: `origin[m] + extents[m]` fits in `u64` for every mode, so every index the shape
/// contains is representable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexSpace {
    extents: Vec<u64>,
    origin: Vec<u64>,
}

/// Checks a coordinate list's length against the rank.
fn check_rank(rank: usize, found: usize) -> Result<(), IndexSpaceError> {
    if rank == found {
        Ok(())
    } else {
        Err(IndexSpaceError::RankMismatch { expected: rank, found })
    }
}

/// Checks that an origin keeps every index of the shape representable.
fn check_origin(extents: &[u64], origin: &[u64]) -> Result<(), IndexSpaceError> {
    check_rank(extents.len(), origin.len())?;
    for (mode, (&extent, &start)) in extents.iter().zip(origin).enumerate() {
        if start.checked_add(extent).is_none() {
            return Err(IndexSpaceError::OriginOverflow { mode, origin: start, extent });
        }
    }
    Ok(())
}

impl IndexSpace {
    /// A shape with the given extents and the zero origin.
    pub fn new(extents: Vec<u64>) -> Self {
        let origin = vec![0; extents.len()];
        IndexSpace { extents, origin }
    }

    /// A shape with the given extents whose first element has index `origin`.
    pub fn with_origin(extents: Vec<u64>, origin: Vec<u64>) -> Result<Self, IndexSpaceError> {
        check_origin(&extents, &origin)?;
        Ok(IndexSpace { extents, origin })
    }

    /// The number of modes.
    pub fn rank(&self) -> usize {
        self.extents.len()
    }

    /// The extent of each mode.
    pub fn extents(&self) -> &[u64] {
        &self.extents
    }

    /// The index of the first element.
    pub fn origin(&self) -> &[u64] {
        &self.origin
    }

    /// The number of elements (1 for rank 0), or `None` if it does not fit in `u64`.
    pub fn size(&self) -> Option<u64> {
        self.extents.iter().try_fold(1u64, |acc, &e| acc.checked_mul(e))
    }

    /// Moves the origin, keeping the extents; the shape is unchanged on error.
    pub fn set_origin(&mut self, origin: Vec<u64>) -> Result<(), IndexSpaceError> {
        check_origin(&self.extents, &origin)?;
        self.origin = origin;
        Ok(())
    }

    /// Validates a `begin..end` box (offsets from this shape's origin) and returns, per mode,
    /// the extent of the box and its origin in this shape's indices.
    fn sub_box(&self, begin: &[u64], end: &[u64]) -> Result<Vec<(u64, u64)>, IndexSpaceError> {
        check_rank(self.rank(), begin.len())?;
        check_rank(self.rank(), end.len())?;
        let modes = self.extents.iter().zip(&self.origin).zip(begin.iter().zip(end));
        modes
            .enumerate()
            .map(|(mode, ((&extent, &origin), (&b, &e)))| {
                if b > e {
                    return Err(IndexSpaceError::ReversedRange { mode, begin: b, end: e });
                }
                if e > extent {
                    return Err(IndexSpaceError::OutOfBounds { mode, begin: b, end: e, extent });
                }
                // Cannot overflow: b <= extent and origin + extent fits (the invariant).
                Ok((e - b, origin + b))
            })
            .collect()
    }

    /// Turns pinned indices for the leading modes into a box: each pinned mode gets a
    /// one-element range, the rest their full span.
    fn pinned_box(&self, pins: &[u64]) -> Result<(Vec<u64>, Vec<u64>), IndexSpaceError> {
        if pins.len() > self.rank() {
            return Err(IndexSpaceError::TooManyPins { pins: pins.len(), rank: self.rank() });
        }
        let mut begin = vec![0; self.rank()];
        let mut end = self.extents.clone();
        for (mode, &pin) in pins.iter().enumerate() {
            begin[mode] = pin;
            // A pin of u64::MAX can never be inside an extent; report it as out of bounds.
            end[mode] = pin.saturating_add(1);
        }
        Ok((begin, end))
    }

    /// The rank-preserving sub-shape of elements `begin..end` per mode, where `begin` and
    /// `end` are offsets from this shape's origin. Its origin is the index of its first
    /// element, so it iterates over the indices it had in `self`.
    pub fn slice(&self, begin: &[u64], end: &[u64]) -> Result<IndexSpace, IndexSpaceError> {
        let (extents, origin) = self.sub_box(begin, end)?.into_iter().unzip();
        Ok(IndexSpace { extents, origin })
    }

    /// The slice that pins mode `i` to offset `pins[i]` for the leading modes and keeps the
    /// full span of the rest; the pinned modes stay, with extent 1.
    pub fn slice_pinned(&self, pins: &[u64]) -> Result<IndexSpace, IndexSpaceError> {
        let (begin, end) = self.pinned_box(pins)?;
        self.slice(&begin, &end)
    }

    /// The sub-shape of elements `begin..end` per mode with every mode that selects exactly
    /// one element removed: a chip selects a single element along the modes it drops.
    pub fn chip(&self, begin: &[u64], end: &[u64]) -> Result<IndexSpace, IndexSpaceError> {
        let (extents, origin) = self.sub_box(begin, end)?.into_iter().filter(|&(extent, _)| extent != 1).unzip();
        Ok(IndexSpace { extents, origin })
    }

    /// The chip that pins the leading modes to `pins` and drops exactly those modes.
    ///
    /// Unlike [`IndexSpace::chip`], an unpinned mode of extent 1 is kept: the caller said
    /// which modes to drop.
    pub fn chip_pinned(&self, pins: &[u64]) -> Result<IndexSpace, IndexSpaceError> {
        let (begin, end) = self.pinned_box(pins)?;
        let kept = self.sub_box(&begin, &end)?.into_iter().skip(pins.len());
        let (extents, origin) = kept.unzip();
        Ok(IndexSpace { extents, origin })
    }

    /// Every index of the shape (origin plus offset) in lexicographic order, last mode
    /// fastest. A rank-0 shape has one index, `[]`; a shape with a zero extent has none.
    pub fn indices(&self) -> Indices {
        Indices::new(self.extents.clone(), self.origin.clone())
    }

    /// Every offset from the origin in lexicographic order: the indices of the same shape
    /// moved to the zero origin.
    pub fn offsets(&self) -> Indices {
        Indices::new(self.extents.clone(), vec![0; self.rank()])
    }
}

impl IntoIterator for &IndexSpace {
    type Item = Vec<u64>;
    type IntoIter = Indices;

    fn into_iter(self) -> Indices {
        self.indices()
    }
}

impl Shaped for IndexSpace {
    fn extents(&self) -> Extents {
        Extents::known(&self.extents)
    }
}

/// Iterator over the indices of an [`IndexSpace`]; see [`IndexSpace::indices`].
#[derive(Clone, Debug)]
pub struct Indices {
    extents: Vec<u64>,
    base: Vec<u64>,
    /// The next offset to yield, `None` once exhausted.
    next: Option<Vec<u64>>,
}

impl Indices {
    fn new(extents: Vec<u64>, base: Vec<u64>) -> Self {
        let next = (!extents.contains(&0)).then(|| vec![0; extents.len()]);
        Indices { extents, base, next }
    }

    /// Advances `offset` to its lexicographic successor; `false` past the last one.
    fn advance(&self, offset: &mut [u64]) -> bool {
        for (digit, &extent) in offset.iter_mut().zip(&self.extents).rev() {
            *digit += 1;
            if *digit < extent {
                return true;
            }
            *digit = 0;
        }
        false
    }
}

impl Iterator for Indices {
    type Item = Vec<u64>;

    fn next(&mut self) -> Option<Vec<u64>> {
        let mut offset = self.next.take()?;
        // Cannot overflow: offset < extent and base + extent fits (the IndexSpace invariant).
        let index = offset.iter().zip(&self.base).map(|(o, b)| o + b).collect();
        if self.advance(&mut offset) {
            self.next = Some(offset);
        }
        Some(index)
    }
}

impl std::iter::FusedIterator for Indices {}
