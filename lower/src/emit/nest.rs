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
pub(crate) const MIN_GRID: i64 = 16;

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

/// Moves dimension `p`'s least significant digit to just above the innermost loop, when that
/// loop is another dimension's contiguous lanes: a transposed read then walks square blocks
/// (`transposed`). The digits of each dimension keep their order, so the limits of jagged
/// dimensions and the affine addresses are unchanged.
pub fn block_transposed(digits: &mut Vec<Digit>, p: usize) {
    let Some(lane) = digits.iter().rposition(|g| g.extent > 1) else { return };
    if digits[lane].dim == p || digits[lane].coef != 1 {
        return;
    }
    let Some(k) = digits.iter().rposition(|g| g.dim == p) else { return };
    if k > lane || digits[k].weight != 1 {
        return;
    }
    let d = digits.remove(k);
    digits.insert(lane - 1, d);
}

/// The most elements one grid index of a strip-mined nest covers.
pub(crate) const MAX_STRIP: i64 = 2048;

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

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::Shape;

    fn map(shape: &str) -> LayoutMap {
        LayoutMap::new(shape.parse::<Shape>().unwrap().as_array().unwrap()).unwrap()
    }

    /// (dim, weight, extent, coef) of each digit, outermost first.
    fn digits(ds: &[Digit]) -> Vec<(usize, i64, i64, i64)> {
        ds.iter().map(|g| (g.dim, g.weight, g.extent, g.coef)).collect()
    }

    #[test]
    fn a_transposed_read_walks_blocks_of_rows() {
        // f32[16384,300] read from an x[300,16384]: rows split at 512 and the lanes at 16,
        // then the rows' in-block loop under the lanes' block loop. 300 = 18 x 16 + 12 is
        // jagged: the lanes' block digit covers 19 blocks and the nest peels the last.
        let m = map("f32[16384,300]{1,0}");
        let mut ds = plan(&m, &[vec![512], vec![16]]).unwrap();
        assert_eq!(digits(&ds), [(0, 512, 32, 153600), (0, 1, 512, 300), (1, 16, 19, 16), (1, 1, 16, 1)]);
        block_transposed(&mut ds, 0);
        assert_eq!(digits(&ds), [(0, 512, 32, 153600), (1, 16, 19, 16), (0, 1, 512, 300), (1, 1, 16, 1)]);
        // With too few rows to split and still feed the threads (4096 / 512 < MIN_GRID), the
        // rows move whole and the lanes' blocks become the grid.
        let m = map("f32[4096,300]{1,0}");
        let mut ds = plan(&m, &[vec![512], vec![16]]).unwrap();
        block_transposed(&mut ds, 0);
        assert_eq!(digits(&ds), [(1, 16, 19, 16), (0, 1, 4096, 300), (1, 1, 16, 1)]);
    }

    #[test]
    fn a_tiled_output_moves_its_in_tile_row_loop() {
        // f32[300,200]{1,0:T(8,128)} split at the 8-row tiles of the transposed parameter:
        // the in-tile row digit (dim 0, weight 1) goes under the 8-column blocks.
        let m = map("f32[300,200]{1,0:T(8,128)}");
        let mut ds = plan(&m, &[vec![], vec![8]]).unwrap();
        assert_eq!(digits(&ds), [(0, 8, 38, 2048), (1, 128, 2, 1024), (0, 1, 8, 128), (1, 8, 16, 8), (1, 1, 8, 1)]);
        block_transposed(&mut ds, 0);
        assert_eq!(digits(&ds), [(0, 8, 38, 2048), (1, 128, 2, 1024), (1, 8, 16, 8), (0, 1, 8, 128), (1, 1, 8, 1)]);
    }

    #[test]
    fn nests_without_a_distinct_lane_dimension_stay_as_planned() {
        let m = map("f32[64,300]{1,0}");
        let planned = plan(&m, &[]).unwrap();
        // The lanes are dimension 1 itself.
        let mut ds = planned.clone();
        block_transposed(&mut ds, 1);
        assert_eq!(ds, planned);
        // A column-major output: the innermost loop runs down dimension 0 with coefficient 1,
        // and dimension 1's only digit lies above it already.
        let m = map("f32[64,300]{0,1}");
        let planned = plan(&m, &[]).unwrap();
        let mut ds = planned.clone();
        block_transposed(&mut ds, 1);
        assert_eq!(ds, planned);
    }
}
