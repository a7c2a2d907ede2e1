//! The one implementation of layout index math (DESIGN.md section 4): where each logical
//! element of an array sits in its physical buffer, and which physical slots are padding.
//!
//! A [`LayoutMap`] is built once per array shape and then answers offset queries cheaply. It
//! follows XLA's tiled-layout document: dimensions are listed major to minor, XLA's
//! `padded_dimensions` widen them, and each tile in turn splits the most minor dimensions
//! into a tile-count part and an in-tile part (after its `*` entries have merged dimensions
//! into their more minor neighbours); the result is linearized row-major and rounded up to
//! the `L(n)` tail-padding alignment. The physical dimension list stays visible
//! ([`LayoutMap::physical_dims`]) so the kernel lowering can compose its index maps with it
//! instead of re-deriving any of this.

use std::fmt;
use std::sync::OnceLock;

use crate::element_type::ElementType;
use crate::layout::{DimLevelKind, Layout, COMBINE_DIM};
use crate::shape::{ArrayShape, UNBOUNDED};

/// Lookup tables for the fast offset path are built only while their total size stays below
/// this many entries; beyond it (huge `*`-combined dimensions) offsets are computed from the
/// index expressions instead, so a size query on a huge shape never allocates much.
const TABLE_LIMIT: i64 = 1 << 20;

/// Why a layout cannot describe a shape, or an index is not in it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("element type {0} has no array layout")]
    NotArrayType(ElementType),
    #[error("dimension {dim} is dynamic; layout index math needs static dimensions")]
    DynamicDimension { dim: usize },
    #[error("dimension {dim} is unbounded (`?`); it has no physical size")]
    UnboundedDimension { dim: usize },
    #[error("dimension {dim} has negative size {size}")]
    NegativeDimension { dim: usize, size: i64 },
    #[error("layout {layout} does not fit {shape}: {reason}")]
    Invalid { shape: String, layout: String, reason: String },
    #[error("the physical size of {0} overflows 64 bits")]
    Overflow(String),
    #[error("index has {got} coordinates but the shape has rank {rank}")]
    IndexRank { got: usize, rank: usize },
    #[error("index {index} is out of bounds for dimension {dim} of size {size}")]
    IndexOutOfBounds { dim: usize, index: i64, size: i64 },
    #[error("linear index {index} is out of bounds for {count} elements")]
    LinearOutOfBounds { index: i64, count: i64 },
}

/// How one physical dimension's index follows from the logical index. Every value an
/// expression takes for an in-bounds logical index is non-negative.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IndexExpr {
    /// Always 0: a size-1 dimension a tile adds, or a part a tile makes trivial.
    Zero,
    /// The index along logical dimension `n` (dimension number, not layout position).
    Logical(usize),
    /// `major * minor_extent + minor`: two dimensions merged by a `*` tile entry.
    Combine { major: Box<IndexExpr>, minor: Box<IndexExpr>, minor_extent: i64 },
    /// `floor(x / t)`, the tile-count part of a tiled dimension.
    Div(Box<IndexExpr>, i64),
    /// `x mod t`, the in-tile part of a tiled dimension.
    Mod(Box<IndexExpr>, i64),
}

impl IndexExpr {
    /// The value for a logical index (indexed by dimension number).
    pub fn eval(&self, index: &[i64]) -> i64 {
        match self {
            IndexExpr::Zero => 0,
            IndexExpr::Logical(d) => index.get(*d).copied().unwrap_or(0),
            IndexExpr::Combine { major, minor, minor_extent } => {
                major.eval(index).wrapping_mul(*minor_extent).wrapping_add(minor.eval(index))
            }
            // Divisors are positive by construction; the fallbacks only keep this total.
            IndexExpr::Div(x, t) => x.eval(index).checked_div(*t).unwrap_or(0),
            IndexExpr::Mod(x, t) => x.eval(index).checked_rem(*t).unwrap_or(0),
        }
    }

    /// The logical dimensions this expression reads, ascending.
    pub fn logical_dims(&self) -> Vec<usize> {
        fn walk(e: &IndexExpr, out: &mut Vec<usize>) {
            match e {
                IndexExpr::Zero => {}
                IndexExpr::Logical(d) => out.push(*d),
                IndexExpr::Combine { major, minor, .. } => {
                    walk(major, out);
                    walk(minor, out);
                }
                IndexExpr::Div(x, _) | IndexExpr::Mod(x, _) => walk(x, out),
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out.sort_unstable();
        out.dedup();
        out
    }

    /// `floor(x / t)` for an `x` in `[0, extent)`, folded where the bounds make it trivial so
    /// later consumers see fewer div/mod terms.
    fn div(x: IndexExpr, t: i64, extent: i64) -> IndexExpr {
        if t == 1 {
            return x;
        }
        if extent <= t || x == IndexExpr::Zero {
            return IndexExpr::Zero;
        }
        match x {
            IndexExpr::Div(inner, a) => match a.checked_mul(t) {
                Some(at) => IndexExpr::Div(inner, at),
                None => IndexExpr::Div(Box::new(IndexExpr::Div(inner, a)), t),
            },
            x => IndexExpr::Div(Box::new(x), t),
        }
    }

    /// `x mod t` for an `x` in `[0, extent)`, folded like [`IndexExpr::div`].
    fn rem(x: IndexExpr, t: i64, extent: i64) -> IndexExpr {
        if t == 1 || x == IndexExpr::Zero {
            return IndexExpr::Zero;
        }
        if extent <= t {
            return x;
        }
        match x {
            IndexExpr::Mod(inner, a) if a % t == 0 => IndexExpr::Mod(inner, t),
            x => IndexExpr::Mod(Box::new(x), t),
        }
    }

    fn combine(major: IndexExpr, minor: IndexExpr, minor_extent: i64) -> IndexExpr {
        match (major, minor) {
            (IndexExpr::Zero, minor) => minor,
            (major, IndexExpr::Zero) if minor_extent == 1 => major,
            (major, minor) => IndexExpr::Combine { major: Box::new(major), minor: Box::new(minor), minor_extent },
        }
    }
}

impl fmt::Display for IndexExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexExpr::Zero => f.write_str("0"),
            IndexExpr::Logical(d) => write!(f, "i{d}"),
            IndexExpr::Combine { major, minor, minor_extent } => write!(f, "({major}*{minor_extent}+{minor})"),
            IndexExpr::Div(x, t) => write!(f, "({x}/{t})"),
            IndexExpr::Mod(x, t) => write!(f, "({x}%{t})"),
        }
    }
}

/// Which step of the layout made a physical dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DimOrigin {
    /// A logical dimension (possibly several merged by `*`) that no tile split.
    Untiled,
    /// The tile-count part, `ceil(d / t)`, made by tile number `tile` (0-based, layout order).
    TileCount { tile: usize },
    /// The in-tile part, of extent `t`, made by tile number `tile`.
    InTile { tile: usize },
    /// A leading size-1 dimension added because tile `tile` has more dimensions than the
    /// array had at that point (as XLA sizes such shapes).
    Implicit { tile: usize },
}

/// One dimension of the physical (tiled) array, listed major to minor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PhysicalDim {
    /// Number of positions along this dimension, padding included.
    pub extent: i64,
    /// Elements between neighbouring positions: the product of all more minor extents.
    pub stride: i64,
    /// The position along this dimension as a function of the logical index.
    pub index: IndexExpr,
    pub origin: DimOrigin,
}

impl PhysicalDim {
    /// The logical dimensions whose indices decide this dimension's position.
    pub fn logical_dims(&self) -> Vec<usize> {
        self.index.logical_dims()
    }
}

/// The inverse of one construction step, undone in reverse order by
/// [`LayoutMap::logical_index`].
#[derive(Clone, Debug, PartialEq, Eq)]
enum Stage {
    /// `n` leading size-1 dimensions were added.
    Prepend(usize),
    /// Dimensions `pos` and `pos + 1` were merged into `pos`.
    Combine { pos: usize, minor_extent: i64 },
    /// Dimensions `start..` with the given extents were tiled by `sizes`.
    Tile { start: usize, sizes: Vec<i64>, extents: Vec<i64> },
}

/// Logical dimensions whose indices jointly decide some physical dimensions (more than one
/// only when `*` merged them), with the offsets those physical dimensions contribute,
/// tabulated over the row-major combination of the member indices.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Component {
    dims: Vec<usize>,
    table: Vec<i64>,
}

#[derive(Clone, Debug)]
struct Tables {
    /// For each logical dimension: its component and its weight within that component.
    dim_slot: Vec<(usize, i64)>,
    components: Vec<Component>,
}

/// The precomputed layout map of one array shape.
#[derive(Clone, Debug)]
pub struct LayoutMap {
    element_type: ElementType,
    dims: Vec<i64>,
    layout: Layout,
    physical: Vec<PhysicalDim>,
    stages: Vec<Stage>,
    /// Extents of the dimensions before tiling, major to minor (padded dimensions applied).
    base_extents: Vec<i64>,
    /// Logical dimension numbers, major to minor.
    major_to_minor: Vec<usize>,
    element_count: i64,
    tiled_count: i64,
    physical_count: i64,
    element_bits: u32,
    byte_size: i64,
    identity: bool,
    /// Row-major strides of the logical shape, to decode linear indices.
    row_major_strides: Vec<i64>,
    /// Built on first use; `None` when they would exceed [`TABLE_LIMIT`].
    tables: OnceLock<Option<Tables>>,
}

/// Maps are equal when they describe the same array; whether lookup tables were built yet
/// does not matter.
impl PartialEq for LayoutMap {
    fn eq(&self, other: &LayoutMap) -> bool {
        self.element_type == other.element_type && self.dims == other.dims && self.layout == other.layout
    }
}

impl Eq for LayoutMap {}

struct Node {
    extent: i64,
    expr: IndexExpr,
    origin: DimOrigin,
}

impl LayoutMap {
    /// The map of a static array shape under its layout (row-major when it has none).
    pub fn new(shape: &ArrayShape) -> Result<LayoutMap, LayoutError> {
        if let Some(dim) = shape.dynamic.iter().position(|&d| d) {
            return Err(LayoutError::DynamicDimension { dim });
        }
        Self::from_parts(shape.element_type, &shape.dims, &shape.layout_or_default())
    }

    /// The map of an array shape with bounded dynamic dimensions taken at their bounds: the
    /// storage a buffer for any runtime size of the shape needs.
    pub fn at_bounds(shape: &ArrayShape) -> Result<LayoutMap, LayoutError> {
        if let Some(dim) = shape.dims.iter().position(|&d| d == UNBOUNDED) {
            return Err(LayoutError::UnboundedDimension { dim });
        }
        Self::from_parts(shape.element_type, &shape.dims, &shape.layout_or_default())
    }

    /// The map of an array of `element_type` with static `dims` under `layout`.
    pub fn from_parts(element_type: ElementType, dims: &[i64], layout: &Layout) -> Result<LayoutMap, LayoutError> {
        let describe = || {
            let mut shape = ArrayShape::new(element_type, dims);
            shape.layout = Some(layout.clone());
            crate::shape::Shape::Array(shape).to_string()
        };
        let invalid = |reason: String| LayoutError::Invalid { shape: describe(), layout: layout.to_string(), reason };

        if !element_type.is_array_type() {
            return Err(LayoutError::NotArrayType(element_type));
        }
        for (dim, &size) in dims.iter().enumerate() {
            if size == UNBOUNDED {
                return Err(LayoutError::UnboundedDimension { dim });
            }
            if size < 0 {
                return Err(LayoutError::NegativeDimension { dim, size });
            }
        }
        let rank = dims.len();
        layout.validate_for_rank(rank).map_err(invalid)?;
        if layout.dim_levels.iter().any(|l| l.kind != DimLevelKind::Dense) {
            return Err(invalid("sparse dimension level types have no dense index map".to_string()));
        }
        if !layout.padded_dimensions.is_empty() {
            if layout.padded_dimensions.len() != rank {
                return Err(invalid(format!(
                    "padded_dimensions has {} entries for rank {rank}",
                    layout.padded_dimensions.len()
                )));
            }
            if let Some((d, (&p, &size))) =
                layout.padded_dimensions.iter().zip(dims).enumerate().find(|(_, (&p, &size))| p < size)
            {
                return Err(invalid(format!("dimension {d} of size {size} cannot be padded to {p}")));
            }
        }
        let element_bits = storage_bits(element_type, layout.element_size_bits).map_err(invalid)?;
        let overflow = || LayoutError::Overflow(describe());

        // validate_for_rank made minor_to_major a permutation of 0..rank.
        let major_to_minor: Vec<usize> = layout.major_to_minor().filter_map(|d| usize::try_from(d).ok()).collect();
        let mut nodes: Vec<Node> = major_to_minor
            .iter()
            .map(|&d| Node {
                extent: layout.padded_dimensions.get(d).or(dims.get(d)).copied().unwrap_or(0),
                expr: IndexExpr::Logical(d),
                origin: DimOrigin::Untiled,
            })
            .collect();
        let base_extents: Vec<i64> = nodes.iter().map(|n| n.extent).collect();
        let mut stages = Vec::new();

        for (k, tile) in layout.tiles.iter().enumerate() {
            let r = tile.dims.len();
            if r > nodes.len() {
                let extra = r - nodes.len();
                let implicit = (0..extra).map(|_| Node {
                    extent: 1,
                    expr: IndexExpr::Zero,
                    origin: DimOrigin::Implicit { tile: k },
                });
                nodes.splice(0..0, implicit);
                stages.push(Stage::Prepend(extra));
            }
            let start = nodes.len() - r;
            let mut pos = start;
            let mut sizes = Vec::with_capacity(r);
            for (j, &t) in tile.dims.iter().enumerate() {
                if t != COMBINE_DIM {
                    sizes.push(t);
                    pos += 1;
                    continue;
                }
                if j + 1 == r {
                    return Err(invalid(format!(
                        "tile {k} ends in '*', which has no more minor dimension to combine with"
                    )));
                }
                let (Some(minor), true) = (nodes.get(pos + 1), pos < nodes.len()) else {
                    return Err(invalid(format!("tile {k} combines past the last dimension")));
                };
                let minor_extent = minor.extent;
                let minor = nodes.remove(pos + 1);
                let Some(major) = nodes.get_mut(pos) else {
                    return Err(invalid(format!("tile {k} combines past the last dimension")));
                };
                let expr = std::mem::replace(&mut major.expr, IndexExpr::Zero);
                major.expr = IndexExpr::combine(expr, minor.expr, minor_extent);
                major.extent = major.extent.checked_mul(minor_extent).ok_or_else(overflow)?;
                major.origin = minor.origin;
                stages.push(Stage::Combine { pos, minor_extent });
            }
            if sizes.is_empty() {
                // A tile made only of `*` merges dimensions and tiles nothing.
                continue;
            }
            let tiled: Vec<Node> = nodes.split_off(start);
            let extents: Vec<i64> = tiled.iter().map(|n| n.extent).collect();
            let mut inner = Vec::with_capacity(tiled.len());
            for (node, &t) in tiled.into_iter().zip(&sizes) {
                let count = node.extent / t + i64::from(node.extent % t != 0);
                nodes.push(Node {
                    extent: count,
                    expr: IndexExpr::div(node.expr.clone(), t, node.extent),
                    origin: DimOrigin::TileCount { tile: k },
                });
                inner.push(Node {
                    extent: t,
                    expr: IndexExpr::rem(node.expr, t, node.extent),
                    origin: DimOrigin::InTile { tile: k },
                });
            }
            nodes.extend(inner);
            stages.push(Stage::Tile { start, sizes, extents });
        }

        let mut physical: Vec<PhysicalDim> = Vec::with_capacity(nodes.len());
        let mut stride = 1i64;
        for node in nodes.into_iter().rev() {
            physical.push(PhysicalDim { extent: node.extent, stride, index: node.expr, origin: node.origin });
            stride = stride.checked_mul(node.extent).ok_or_else(overflow)?;
        }
        physical.reverse();
        let tiled_count = stride;
        let align = layout.tail_padding_alignment;
        let physical_count = tiled_count.checked_add(align - 1).map(|n| n / align * align).ok_or_else(overflow)?;
        let bits = i128::from(physical_count) * i128::from(element_bits);
        let byte_size = i64::try_from((bits + 7) / 8).map_err(|_| overflow())?;
        let element_count = dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d)).ok_or_else(overflow)?;

        let mut row_major_strides = vec![1i64; rank];
        let mut acc = 1i64;
        for d in (0..rank).rev() {
            if let Some(s) = row_major_strides.get_mut(d) {
                *s = acc;
            }
            acc = acc.saturating_mul(dims.get(d).copied().unwrap_or(1));
        }

        let identity = {
            let live: Vec<&PhysicalDim> = physical.iter().filter(|p| p.index != IndexExpr::Zero).collect();
            live.len() == rank
                && live.iter().enumerate().all(|(d, p)| {
                    p.index == IndexExpr::Logical(d)
                        && Some(&p.extent) == dims.get(d)
                        && Some(&p.stride) == row_major_strides.get(d)
                })
        };

        Ok(LayoutMap {
            element_type,
            dims: dims.to_vec(),
            layout: layout.clone(),
            physical,
            stages,
            base_extents,
            major_to_minor,
            element_count,
            tiled_count,
            physical_count,
            element_bits,
            byte_size,
            identity,
            row_major_strides,
            tables: OnceLock::new(),
        })
    }

    /// The map of a scalar of an array type in its natural size: one slot at offset 0.
    pub(crate) fn scalar(element_type: ElementType) -> LayoutMap {
        let element_bits = u32::try_from(element_type.byte_size() * 8).unwrap_or(0);
        LayoutMap {
            element_type,
            dims: Vec::new(),
            layout: Layout::default(),
            physical: Vec::new(),
            stages: Vec::new(),
            base_extents: Vec::new(),
            major_to_minor: Vec::new(),
            element_count: 1,
            tiled_count: 1,
            physical_count: 1,
            element_bits,
            byte_size: i64::from(element_bits / 8),
            identity: true,
            row_major_strides: Vec::new(),
            tables: OnceLock::new(),
        }
    }

    fn tables(&self) -> Option<&Tables> {
        self.tables.get_or_init(|| self.build_tables()).as_ref()
    }

    /// Groups logical dimensions that share physical dimensions and tabulates their offset
    /// contributions, so an offset is a handful of table lookups and adds.
    fn build_tables(&self) -> Option<Tables> {
        let rank = self.dims.len();
        let mut parent: Vec<usize> = (0..rank).collect();
        fn find(parent: &mut [usize], mut x: usize) -> usize {
            while let Some(&p) = parent.get(x) {
                if p == x {
                    break;
                }
                x = p;
            }
            x
        }
        for p in &self.physical {
            let ds = p.logical_dims();
            if let Some(&first) = ds.first() {
                let root = find(&mut parent, first);
                for &d in &ds[1..] {
                    let other = find(&mut parent, d);
                    if let Some(slot) = parent.get_mut(other) {
                        *slot = root;
                    }
                }
            }
        }
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_of_root = vec![usize::MAX; rank];
        for d in 0..rank {
            let root = find(&mut parent, d);
            let Some(g) = group_of_root.get_mut(root) else { continue };
            if *g == usize::MAX {
                *g = groups.len();
                groups.push(Vec::new());
            }
            if let Some(members) = groups.get_mut(*g) {
                members.push(d);
            }
        }
        let mut total = 0i64;
        for members in &groups {
            let size = members.iter().try_fold(1i64, |acc, &d| acc.checked_mul(self.dims.get(d).copied().unwrap_or(1)));
            match size.and_then(|s| total.checked_add(s)) {
                Some(t) if t <= TABLE_LIMIT => total = t,
                _ => return None,
            }
        }
        let mut dim_slot = vec![(0usize, 0i64); rank];
        let mut components = Vec::with_capacity(groups.len());
        for (c, members) in groups.into_iter().enumerate() {
            let mut weight = 1i64;
            for &d in members.iter().rev() {
                if let Some(slot) = dim_slot.get_mut(d) {
                    *slot = (c, weight);
                }
                weight *= self.dims.get(d).copied().unwrap_or(1);
            }
            let contributing: Vec<&PhysicalDim> = self
                .physical
                .iter()
                .filter(|p| p.logical_dims().first().is_some_and(|d| members.contains(d)))
                .collect();
            let mut index = vec![0i64; rank];
            let mut table = Vec::with_capacity(usize::try_from(weight).unwrap_or(0));
            for g in 0..weight {
                let mut rest = g;
                for &d in members.iter().rev() {
                    let size = self.dims.get(d).copied().unwrap_or(1).max(1);
                    if let Some(i) = index.get_mut(d) {
                        *i = rest % size;
                    }
                    rest /= size;
                }
                table.push(contributing.iter().map(|p| p.index.eval(&index) * p.stride).sum());
            }
            components.push(Component { dims: members, table });
        }
        Some(Tables { dim_slot, components })
    }

    pub fn element_type(&self) -> ElementType {
        self.element_type
    }

    /// The logical dimensions.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The layout the map follows (the row-major default when the shape had none).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The physical dimensions, major to minor.
    pub fn physical_dims(&self) -> &[PhysicalDim] {
        &self.physical
    }

    /// Logical elements.
    pub fn element_count(&self) -> i64 {
        self.element_count
    }

    /// Physical element slots before tail padding: the product of the physical extents.
    pub fn tiled_element_count(&self) -> i64 {
        self.tiled_count
    }

    /// Physical element slots, tile and tail padding included.
    pub fn physical_element_count(&self) -> i64 {
        self.physical_count
    }

    /// Storage bits per element slot: `E(bits)`, or the type's unpacked byte size.
    pub fn element_size_bits(&self) -> u32 {
        self.element_bits
    }

    /// Bytes of the physical buffer; sub-byte elements are packed, low bits first.
    pub fn physical_byte_size(&self) -> i64 {
        self.byte_size
    }

    /// True when every element's offset is its logical row-major index (a row-major layout
    /// without tiling effect or padded dimensions; tail padding may follow).
    pub fn is_identity(&self) -> bool {
        self.identity
    }

    /// The physical offset (in element slots) of a logical index.
    pub fn offset(&self, index: &[i64]) -> Result<i64, LayoutError> {
        if index.len() != self.dims.len() {
            return Err(LayoutError::IndexRank { got: index.len(), rank: self.dims.len() });
        }
        for (dim, (&i, &size)) in index.iter().zip(&self.dims).enumerate() {
            if i < 0 || i >= size {
                return Err(LayoutError::IndexOutOfBounds { dim, index: i, size });
            }
        }
        if self.identity {
            return Ok(index.iter().zip(&self.row_major_strides).map(|(i, s)| i * s).sum());
        }
        Ok(match self.tables() {
            Some(tables) => tables.lookup(|d| index.get(d).copied().unwrap_or(0)),
            None => self.physical.iter().map(|p| p.index.eval(index) * p.stride).sum(),
        })
    }

    /// The physical offset of the element with logical row-major index `linear`.
    pub fn offset_of_linear(&self, linear: i64) -> Result<i64, LayoutError> {
        if linear < 0 || linear >= self.element_count {
            return Err(LayoutError::LinearOutOfBounds { index: linear, count: self.element_count });
        }
        if self.identity {
            return Ok(linear);
        }
        let coord = |d: usize| {
            let size = self.dims.get(d).copied().unwrap_or(1).max(1);
            linear / self.row_major_strides.get(d).copied().unwrap_or(1).max(1) % size
        };
        match self.tables() {
            Some(tables) => Ok(tables.lookup(coord)),
            None => {
                let index: Vec<i64> = (0..self.dims.len()).map(coord).collect();
                Ok(self.physical.iter().map(|p| p.index.eval(&index) * p.stride).sum())
            }
        }
    }

    /// The logical index stored at physical slot `offset`, or `None` when the slot is padding
    /// (tile, padded-dimension or tail padding) or outside the buffer.
    pub fn logical_index(&self, offset: i64) -> Option<Vec<i64>> {
        if offset < 0 || offset >= self.tiled_count {
            return None;
        }
        let mut v: Vec<i64> = self.physical.iter().map(|p| offset / p.stride.max(1) % p.extent.max(1)).collect();
        for stage in self.stages.iter().rev() {
            match stage {
                Stage::Tile { start, sizes, extents } => {
                    let r = sizes.len();
                    let (outer, inner) = v.get(*start..)?.split_at_checked(r)?;
                    let mut restored = Vec::with_capacity(r);
                    for ((&q, &rem), (&t, &extent)) in outer.iter().zip(inner).zip(sizes.iter().zip(extents)) {
                        let x = q * t + rem;
                        if x >= extent {
                            return None;
                        }
                        restored.push(x);
                    }
                    v.truncate(*start);
                    v.extend(restored);
                }
                Stage::Combine { pos, minor_extent } => {
                    let m = *v.get(*pos)?;
                    let major = m.checked_div(*minor_extent)?;
                    let minor = m.checked_rem(*minor_extent)?;
                    *v.get_mut(*pos)? = major;
                    v.insert(pos + 1, minor);
                }
                Stage::Prepend(n) => {
                    if v.get(..*n)?.iter().any(|&x| x != 0) {
                        return None;
                    }
                    v.drain(..*n);
                }
            }
        }
        if v.len() != self.major_to_minor.len() {
            return None;
        }
        let mut index = vec![0i64; self.dims.len()];
        for (&x, &d) in v.iter().zip(&self.major_to_minor) {
            if x >= *self.dims.get(d)? {
                return None;
            }
            *index.get_mut(d)? = x;
        }
        debug_assert_eq!(self.base_extents.len(), v.len());
        Some(index)
    }

    /// Physical offsets of all elements in logical row-major order.
    pub fn offsets(&self) -> Offsets<'_> {
        let tables = if self.identity { None } else { self.tables() };
        let slots = tables.map_or(0, |t| t.components.len());
        Offsets { map: self, tables, index: vec![0; self.dims.len()], sums: vec![0; slots], next_linear: 0 }
    }
}

/// Iterator over physical offsets in logical row-major order ([`LayoutMap::offsets`]). It
/// keeps an odometer so each step is a few adds and table lookups.
#[derive(Clone, Debug)]
pub struct Offsets<'a> {
    map: &'a LayoutMap,
    tables: Option<&'a Tables>,
    index: Vec<i64>,
    /// Per component, the row-major combination of its members' current indices.
    sums: Vec<i64>,
    next_linear: i64,
}

impl Iterator for Offsets<'_> {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        let map = self.map;
        if self.next_linear >= map.element_count {
            return None;
        }
        let linear = self.next_linear;
        self.next_linear += 1;
        if map.identity {
            return Some(linear);
        }
        let offset = match self.tables {
            Some(tables) => tables
                .components
                .iter()
                .zip(&self.sums)
                .map(|(c, &g)| usize::try_from(g).ok().and_then(|g| c.table.get(g)).copied().unwrap_or(0))
                .sum(),
            None => map.physical.iter().map(|p| p.index.eval(&self.index) * p.stride).sum(),
        };
        for d in (0..self.index.len()).rev() {
            let (c, w) = self.tables.and_then(|t| t.dim_slot.get(d)).copied().unwrap_or((usize::MAX, 0));
            let (Some(i), Some(&size)) = (self.index.get_mut(d), map.dims.get(d)) else {
                break;
            };
            *i += 1;
            let sum = self.sums.get_mut(c);
            if *i < size {
                if let Some(s) = sum {
                    *s += w;
                }
                break;
            }
            if let Some(s) = sum {
                *s -= w * (size - 1);
            }
            *i = 0;
        }
        Some(offset)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.map.element_count - self.next_linear).unwrap_or(0);
        (left, Some(left))
    }
}

impl ExactSizeIterator for Offsets<'_> {}

impl Tables {
    /// The offset of the logical index whose coordinate along dimension `d` is `coord(d)`.
    fn lookup(&self, coord: impl Fn(usize) -> i64) -> i64 {
        self.components
            .iter()
            .map(|c| {
                let g: i64 = c.dims.iter().map(|&d| coord(d) * self.dim_slot.get(d).map_or(0, |&(_, w)| w)).sum();
                usize::try_from(g).ok().and_then(|g| c.table.get(g)).copied().unwrap_or(0)
            })
            .sum()
    }
}

/// Storage bits per element: `E(bits)` when set, else the type's unpacked size. Packed sizes
/// must divide a byte or be whole bytes, and hold every value of the type (pred needs 1 bit).
fn storage_bits(element_type: ElementType, layout_bits: i64) -> Result<u32, String> {
    let natural = u32::try_from(element_type.byte_size() * 8).unwrap_or(u32::MAX);
    if layout_bits == 0 {
        return Ok(natural);
    }
    let value_bits = if element_type.is_pred() { 1 } else { i64::from(element_type.bit_width()) };
    let shape_ok = matches!(layout_bits, 1 | 2 | 4) || (layout_bits % 8 == 0 && (8..=128).contains(&layout_bits));
    if !shape_ok {
        return Err(format!("element size E({layout_bits}) must be 1, 2, 4 or a whole number of bytes up to 16"));
    }
    if layout_bits < value_bits {
        return Err(format!("element size E({layout_bits}) cannot hold {element_type} values ({value_bits} bits)"));
    }
    u32::try_from(layout_bits).map_err(|_| format!("element size E({layout_bits}) is out of range"))
}

/// Physical element slots of a static array shape under its layout.
pub fn physical_element_count(shape: &ArrayShape) -> Result<i64, LayoutError> {
    LayoutMap::new(shape).map(|m| m.physical_element_count())
}

/// Bytes of a static array shape's physical buffer under its layout.
pub fn physical_byte_size(shape: &ArrayShape) -> Result<i64, LayoutError> {
    LayoutMap::new(shape).map(|m| m.physical_byte_size())
}
