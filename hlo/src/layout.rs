//! Layouts: how an array's elements sit in memory. The fields follow XLA's `Layout` and its
//! text suffixes, in the order XLA prints them: `D(..)` dimension level types, `T(..)(..)`
//! tiles, `L(n)` tail-padding alignment, `#(..)` index and `*(..)` pointer primitive types,
//! `E(n)` element size in bits, `S(n)` memory space, `SC(..)` split configs, `P(..)` physical
//! shape and `M(n)` dynamic-shape metadata prefix bytes.
//!
//! The index math that turns a logical index into a physical offset lives in
//! [`crate::layout_index`] and nowhere else.

use crate::element_type::ElementType;
use crate::shape::Shape;

/// A tile dimension of `*`: combine this dimension into the next more minor one. XLA stores it
/// as the same sentinel.
pub const COMBINE_DIM: i64 = i64::MIN;

/// One tile, `(8,128)`: sizes of the most minor dimensions, [`COMBINE_DIM`] for `*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tile {
    pub dims: Vec<i64>,
}

/// Sparse-storage level type of one dimension (`D`, `C`, `S`, `H`), with XLA's
/// uniqueness (`+` when not unique) and ordering (`~` when not ordered) properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DimLevel {
    pub kind: DimLevelKind,
    pub unique: bool,
    pub ordered: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DimLevelKind {
    Dense,
    Compressed,
    Singleton,
    LooseCompressed,
}

/// `SC(dim:i,j,..)`: where a dimension is split (XLA's `SplitConfig`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SplitConfig {
    pub dimension: i64,
    pub split_indices: Vec<i64>,
}

/// A layout. `Layout::default()` is the empty layout of a scalar, `{}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    pub minor_to_major: Vec<i64>,
    pub dim_levels: Vec<DimLevel>,
    pub tiles: Vec<Tile>,
    /// `L(n)`: the physical element count is rounded up to a multiple of this (1 = none).
    pub tail_padding_alignment: i64,
    pub index_type: Option<ElementType>,
    pub pointer_type: Option<ElementType>,
    /// `E(bits)`: storage bits per element, 0 meaning the type's natural size.
    pub element_size_bits: i64,
    /// `S(n)`: the memory space; 0 is host memory.
    pub memory_space: i64,
    pub split_configs: Vec<SplitConfig>,
    pub physical_shape: Option<Box<Shape>>,
    /// `M(n)`: bytes of dynamic-shape metadata before the data.
    pub dynamic_metadata_prefix_bytes: i64,
    /// XLA's `padded_dimensions`: the width each dimension (in dimension-number order) is
    /// padded to before tiling, empty for none. It has no text syntax; only code sets it.
    pub padded_dimensions: Vec<i64>,
}

impl Default for Layout {
    fn default() -> Layout {
        Layout {
            minor_to_major: Vec::new(),
            dim_levels: Vec::new(),
            tiles: Vec::new(),
            tail_padding_alignment: 1,
            index_type: None,
            pointer_type: None,
            element_size_bits: 0,
            memory_space: 0,
            split_configs: Vec::new(),
            physical_shape: None,
            dynamic_metadata_prefix_bytes: 0,
            padded_dimensions: Vec::new(),
        }
    }
}

impl Layout {
    /// The layout with only a minor-to-major order.
    pub fn new(minor_to_major: &[i64]) -> Layout {
        Layout { minor_to_major: minor_to_major.to_vec(), ..Layout::default() }
    }

    /// Row-major (`{rank-1,...,1,0}`), XLA's default.
    pub fn row_major(rank: usize) -> Layout {
        Layout::new(&(0..rank as i64).rev().collect::<Vec<_>>())
    }

    pub fn with_tiles(mut self, tiles: &[&[i64]]) -> Layout {
        self.tiles = tiles.iter().map(|t| Tile { dims: t.to_vec() }).collect();
        self
    }

    pub fn with_memory_space(mut self, space: i64) -> Layout {
        self.memory_space = space;
        self
    }

    pub fn with_element_size_bits(mut self, bits: i64) -> Layout {
        self.element_size_bits = bits;
        self
    }

    pub fn with_tail_padding_alignment(mut self, elements: i64) -> Layout {
        self.tail_padding_alignment = elements;
        self
    }

    pub fn with_padded_dimensions(mut self, padded: &[i64]) -> Layout {
        self.padded_dimensions = padded.to_vec();
        self
    }

    /// Dimensions listed from most major to most minor.
    pub fn major_to_minor(&self) -> impl Iterator<Item = i64> + '_ {
        self.minor_to_major.iter().rev().copied()
    }

    /// Checks that this layout can describe an array of the given rank: `minor_to_major` is
    /// a permutation of `0..rank`, tiles are non-empty with positive sizes, and the scalar
    /// fields are in range. The message names what is wrong, in XLA's words where it has them.
    pub fn validate_for_rank(&self, rank: usize) -> Result<(), String> {
        if self.minor_to_major.len() != rank {
            return Err(format!(
                "Dimensions size is {}, but minor to major size is {}.",
                rank,
                self.minor_to_major.len()
            ));
        }
        let mut seen = vec![false; rank];
        for &d in &self.minor_to_major {
            let Some(slot) = usize::try_from(d).ok().and_then(|d| seen.get_mut(d)) else {
                return Err(format!("layout minor_to_major field contains an invalid dimension {d} for rank {rank}"));
            };
            if *slot {
                return Err(format!("layout minor_to_major field has duplicate values: dimension {d}"));
            }
            *slot = true;
        }
        if !self.dim_levels.is_empty() && self.dim_levels.len() != rank {
            return Err(format!("layout has {} dimension level types for rank {}", self.dim_levels.len(), rank));
        }
        for tile in &self.tiles {
            if tile.dims.is_empty() {
                return Err("layout has an empty tile".to_string());
            }
            if let Some(&bad) = tile.dims.iter().find(|&&t| t != COMBINE_DIM && t <= 0) {
                return Err(format!("tile dimension {bad} must be positive or '*'"));
            }
        }
        if self.tail_padding_alignment < 1 {
            return Err(format!("tail padding alignment {} must be at least 1", self.tail_padding_alignment));
        }
        if self.element_size_bits < 0 {
            return Err(format!("element size {} must not be negative", self.element_size_bits));
        }
        if self.memory_space < 0 {
            return Err(format!("memory space {} must not be negative", self.memory_space));
        }
        Ok(())
    }
}
