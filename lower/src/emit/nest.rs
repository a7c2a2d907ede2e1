//! The loop nest over an output array, in the output's physical order (DESIGN.md section 5).
//!
//! Each physical dimension of a (tiled) layout is a *digit* of one logical index: the
//! logical index is the sum of its digits times their weights (a tile-count part has weight
//! `t`, the in-tile part weight 1). Loops run over digits, major to minor, so the output
//! address is affine in the loop variables. A digit may be split further at the tile
//! boundaries of the operands it reads (a row-major output read from a `T(8,128)` operand
//! loops over the operand's tiles), which makes the operands' div/mod fold away too.
//!
//! Logical indices past the shape's end (jagged tilings) are never iterated: the last value
//! of a dimension's leading digit is peeled into its own nest whose inner digits run only up
//! to the remainder. The outermost loop with more than one iteration becomes the grid.

use tessera_hlo::{IndexExpr as LayoutExpr, LayoutMap};

use super::index;
use crate::kernel::IndexExpr;

/// One loop of the nest: digit `weight` of logical dimension `dim`, taking `extent` values,
/// moving the output address by `coef` elements per step.
#[derive(Clone, Debug, PartialEq)]
pub struct Digit {
    pub dim: usize,
    pub weight: i64,
    pub extent: i64,
    pub coef: i64,
}

/// The smallest grid a split of the outermost loop may leave.
const MIN_GRID: i64 = 16;

/// `(dim, weight, modulus)` when a layout expression is digit `(x / weight) % modulus` of a
/// logical index; `None` for the combining (`*`) layouts, and `Some(None)` for a zero.
pub fn as_digit(e: &LayoutExpr) -> Option<Option<(usize, i64, Option<i64>)>> {
    Some(Some(match e {
        LayoutExpr::Zero => return Some(None),
        LayoutExpr::Logical(d) => (*d, 1, None),
        LayoutExpr::Div(x, t) => {
            let (d, a, b) = as_digit(x)??;
            let b = match b {
                None => None,
                Some(b) if b % t == 0 => Some(b / t),
                Some(_) => return None,
            };
            (d, a.checked_mul(*t)?, b)
        }
        LayoutExpr::Mod(x, t) => {
            let (d, a, b) = as_digit(x)??;
            match b {
                Some(b) if b % t != 0 && *t < b => return None,
                Some(b) if *t >= b => (d, a, Some(b)),
                _ => (d, a, Some(*t)),
            }
        }
        LayoutExpr::Combine { .. } => return None,
    }))
}

/// The digit boundaries (weights) an operand layout has for each of its logical dimensions.
pub fn boundaries(map: &LayoutMap) -> Vec<Vec<i64>> {
    let mut out = vec![Vec::new(); map.dims().len()];
    for p in map.physical_dims() {
        if let Some(Some((d, a, b))) = as_digit(&p.index) {
            if let Some(list) = out.get_mut(d) {
                list.push(a);
                if let Some(b) = b {
                    list.push(a * b);
                }
            }
        }
    }
    for l in &mut out {
        l.retain(|&w| w > 1);
        l.sort_unstable();
        l.dedup();
    }
    out
}

/// The digits of `map` in physical order, each split at the compatible weights of `splits`
/// (per logical dimension); `None` when the layout is not a digit decomposition the peeling
/// can follow (combined dimensions, digits of one dimension out of order).
pub fn plan(map: &LayoutMap, splits: &[Vec<i64>]) -> Option<Vec<Digit>> {
    let dims = map.dims();
    let mut raw: Vec<(usize, i64, i64, i64, bool)> = Vec::new();
    for p in map.physical_dims() {
        match as_digit(&p.index)? {
            None => {}
            Some((d, a, b)) => raw.push((d, a, p.extent, p.stride, b.is_none())),
        }
    }
    // Each dimension's digits must run from the most significant down to weight 1, each
    // weight the product of the next one's weight and extent.
    for (d, &size) in dims.iter().enumerate() {
        let ds: Vec<&(usize, i64, i64, i64, bool)> = raw.iter().filter(|r| r.0 == d).collect();
        if ds.is_empty() {
            if size > 1 {
                return None;
            }
            continue;
        }
        if ds.last().map(|r| r.1) != Some(1) {
            return None;
        }
        for w in ds.windows(2) {
            if w[0].1 != w[1].1 * w[1].2 || w[1].4 {
                return None;
            }
        }
    }
    let mut out = Vec::new();
    let mut outermost = true;
    for &(d, a, extent, stride, top) in &raw {
        let hi = a.saturating_mul(extent);
        let mut cuts: Vec<i64> = Vec::new();
        // The outermost loop becomes the grid: splitting it may not starve the thread pool
        // (div/mod on the grid variable stays outside the inner loops anyway).
        let grid_digit = outermost && extent > 1;
        if extent > 1 {
            outermost = false;
        }
        for &c in splits.get(d).map(Vec::as_slice).unwrap_or(&[]) {
            let fits = c > a && c < hi && c % a == 0 && (top || hi % c == 0);
            let fits = fits && !(grid_digit && (hi + c - 1) / c < MIN_GRID);
            let chained = cuts.last().is_none_or(|&last| c % last == 0);
            if fits && chained {
                cuts.push(c);
            }
        }
        // Sub-digits from the most significant: weights cuts (descending) then a.
        let mut weights: Vec<i64> = cuts.iter().rev().copied().collect();
        weights.push(a);
        for (i, &w) in weights.iter().enumerate() {
            let sub_extent = if i == 0 {
                if top {
                    (extent * a + w - 1) / w
                } else {
                    hi / w
                }
            } else {
                weights[i - 1] / w
            };
            out.push(Digit { dim: d, weight: w, extent: sub_extent, coef: stride * (w / a) });
        }
    }
    Some(out)
}

/// The most elements one grid index of a strip-mined nest covers.
const MAX_STRIP: i64 = 2048;

/// Splits the only loop of a nest whose one non-trivial digit is contiguous (a 1-D output, or
/// `f32[1,n]`) into a grid of strips and an inner loop over each strip: otherwise that digit
/// becomes the grid itself, each grid index one element, and no loop is left to vectorize.
/// Strips are as long as possible (up to [`MAX_STRIP`], a power of two) while leaving the grid
/// [`MIN_GRID`] indices to share among threads; tiny outputs keep their single loop.
pub fn strip_mine(map: &LayoutMap, splits: &mut [Vec<i64>]) {
    let Some(digits) = plan(map, splits) else { return };
    let mut busy = digits.iter().filter(|g| g.extent > 1);
    let (Some(g), None) = (busy.next(), busy.next()) else { return };
    if g.coef != 1 || g.weight != 1 {
        return;
    }
    let mut strip = MAX_STRIP;
    while strip > 16 && (g.extent + strip - 1) / strip < MIN_GRID {
        strip /= 2;
    }
    if let Some(list) = splits.get_mut(g.dim) {
        if (g.extent + strip - 1) / strip >= MIN_GRID && !list.contains(&strip) {
            list.push(strip);
            list.sort_unstable();
        }
    }
}

/// The logical index of each dimension from the digit values.
pub fn logical_index(digits: &[Digit], values: &[IndexExpr], rank: usize) -> Vec<IndexExpr> {
    let mut idx = vec![index::constant(0); rank];
    for (g, v) in digits.iter().zip(values) {
        idx[g.dim] = index::add(&idx[g.dim], &index::scale(v, g.weight));
    }
    idx
}

/// The output address from the digit values.
pub fn address(digits: &[Digit], values: &[IndexExpr]) -> IndexExpr {
    let parts: Vec<(IndexExpr, i64)> = values.iter().cloned().zip(digits.iter().map(|g| g.coef)).collect();
    index::linear(&parts)
}

/// The vector width a contiguous innermost loop of `trip` iterations over elements of `bits`
/// asks for: a 512-bit vector, or the largest power of two the trip count fills.
pub fn vector_width(bits: u32, trip: i64) -> u32 {
    let full: u32 = match bits {
        64 => 8,
        32 => 16,
        16 => 32,
        8 => 64,
        _ => 1,
    };
    let mut w = full;
    while w > 1 && i64::from(w) > trip {
        w /= 2;
    }
    w
}
