//! Blocked loops for transposed reads: an output nest whose lane loop reads a parameter across
//! its physical rows (a transpose, or a relayout between two orders) walks the output in
//! blocks instead of whole rows.
//!
//! In physical order, the lane loop of `t = transpose(x)` reads one element from each of `W`
//! rows of `x`, and the next output row reads the element beside it in each of those lines.
//! A whole output row between those two visits touches a line in every row of `x`: for
//! `f32[4096,4096]` that is 4096 lines 16 KiB apart, which share a few cache sets, so every
//! element came from memory again (87 ms on LLVM, where moving the bytes takes about 6).
//!
//! So the lane dimension is split at a cache line of elements, the dimension along the
//! parameter's rows at 2 KiB of them, and that dimension's in-block loop moves just above the
//! lanes (`nest::block_transposed`): a block's lanes read a line from each of their rows of
//! `x`, and the loop above them uses up those lines before the next block (f32[4096,4096]
//! 87 -> 17 ms; 16 x 16 blocks took twice as long as 16 x 512, whose runs along `x`'s rows
//! are long enough for the prefetcher). The block is a reordering of the nest's digits: the
//! addresses stay affine, jagged edges peel as before, and both tiers and the kernel
//! interpreter run the same loops.

use std::collections::HashSet;

use tessera_hlo::{InstId, LayoutMap, Opcode};

use super::{layout_map, nest, operand_dims, Emitter};

/// Outputs smaller than this stay in cache whatever their loop order.
const MIN_ELEMENTS: i64 = 1 << 12;

/// A cache line: lanes at least this far apart in a parameter each read a line of their own.
const LINE_BYTES: i64 = 64;

impl<'m> Emitter<'m> {
    /// The output dimension `p` whose block loop the nest of `map` moves inward (after adding
    /// the block splits to `splits`), when a parameter the roots read through transposes,
    /// broadcasts and elementwise ops has its physically minor dimension on `p` while the
    /// output's lane dimension is another of that parameter's dimensions. `None` where the
    /// roots compute anything but element-for-element values (a reduction's row values are
    /// evaluated between the nest's loops in their physical order).
    pub(super) fn transposed_read(
        &self,
        roots: &[InstId],
        map: &LayoutMap,
        bits: u32,
        splits: &mut [Vec<i64>],
    ) -> Option<usize> {
        if map.dims().iter().product::<i64>() < MIN_ELEMENTS {
            return None;
        }
        let digits = nest::plan(map, splits)?;
        let lane = digits.iter().rev().find(|g| g.extent > 1)?;
        if lane.coef != 1 {
            return None;
        }
        let q = lane.dim;
        let mut reads = Vec::new();
        let mut seen = HashSet::new();
        let rank = map.dims().len();
        for &r in roots {
            let dims: Vec<Option<usize>> = (0..rank).map(Some).collect();
            if !self.plain_reads(r, &dims, &mut reads, &mut seen) {
                return None;
            }
        }
        let p = reads.iter().find_map(|(param, dims): &(InstId, Vec<Option<usize>>)| {
            let inst = self.comp.inst(*param);
            let pmap = layout_map(&inst.shape, &inst.name).ok()?;
            let minor = pmap.physical_dims().iter().rev().find(|d| d.extent > 1)?;
            let (d, weight, _) = nest::as_digit(&minor.index)??;
            let p = (*dims.get(d)?)?;
            // The lanes' distance in the parameter: its stride along the dimension on `q`.
            // Lanes within a cache line (a sub-tiled `s8`'s four rows) read it whole anyway.
            let lanes = dims.iter().position(|&o| o == Some(q))?;
            let stride = pmap
                .physical_dims()
                .iter()
                .filter_map(|pd| Some((nest::as_digit(&pd.index)??, pd.stride)))
                .find(|&((dim, w, _), _)| dim == lanes && w == 1)?
                .1;
            let bytes = stride.saturating_mul(i64::from(pmap.element_size_bits())) / 8;
            (weight == 1 && p != q && bytes >= LINE_BYTES).then_some(p)
        })?;
        // The lanes take a cache line of each of their rows of the parameter, and the block
        // walks 2 KiB along those rows (the module doc). A dimension already split finer by
        // a tile keeps its tile.
        let bits = i64::from(bits.max(8));
        let lowest = |dim: usize| digits.iter().rev().find(|g| g.dim == dim).map_or(1, |g| g.extent);
        for (dim, block) in [(p, (1 << 14) / bits), (q, (512 / bits).clamp(8, 64))] {
            if lowest(dim) > block && !splits[dim].contains(&block) {
                splits[dim].push(block);
                splits[dim].sort_unstable();
            }
        }
        Some(p)
    }

    /// Whether `id` (read at output dimensions `dims`, per its own dimension) computes its
    /// elements from its operands' elements alone, collecting the parameters it reads with
    /// their dimension maps into `reads`.
    fn plain_reads(
        &self,
        id: InstId,
        dims: &[Option<usize>],
        reads: &mut Vec<(InstId, Vec<Option<usize>>)>,
        seen: &mut HashSet<(InstId, Vec<Option<usize>>)>,
    ) -> bool {
        if !seen.insert((id, dims.to_vec())) {
            return true;
        }
        let inst = self.comp.inst(id);
        match inst.opcode {
            Opcode::Parameter => {
                reads.push((id, dims.to_vec()));
                true
            }
            Opcode::Constant | Opcode::Iota => true,
            Opcode::Transpose | Opcode::Broadcast => {
                let Some(od) = operand_dims(inst, dims) else { return false };
                self.plain_reads(inst.operands[0], &od, reads, seen)
            }
            op if op.is_elementwise() => inst.operands.iter().all(|&o| {
                let same = self.comp.inst(o).shape.rank() == dims.len();
                let od = if same { dims.to_vec() } else { vec![None; self.comp.inst(o).shape.rank()] };
                self.plain_reads(o, &od, reads, seen)
            }),
            _ => false,
        }
    }
}
