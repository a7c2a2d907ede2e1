//! Row values evaluated once per row. A broadcast that expands a value over trailing
//! dimensions (a row reduction's result, as softmax and layer norm divide by it) has the same
//! value along a whole row; evaluated where it is used, inside the loop over the row's
//! elements, a fused reduction would run once per element. So before a loop opens, every
//! such broadcast the kernel's expression reaches through ops that pass their index on
//! unchanged (elementwise ops, converts) has its operand evaluated at the current position,
//! for the index the enclosing loops fix; the element cache then hands that value to every
//! use inside the loop. The output nest does this before each loop over a dimension the
//! outer loops have not fixed (`digit_loops`), and a reduction before its reduced loops
//! (`reduce_values`), so a row reduction fused into a consumer's kernel, or into another row
//! reduction's input, runs once per row, reading the row from cache after the first pass.
//!
//! This is a kernel-shape decision the fusion pass relies on (`passes::fusion`'s `Rows`): it
//! only inlines a row reduction where its expansion reaches the kernel's root this way.

use std::collections::HashSet;

use tessera_hlo::ir::AttrList;
use tessera_hlo::{InstId, Opcode};

use super::{Emitter, Frame};
use crate::kernel::IndexExpr;
use crate::LowerError;

impl<'m> Emitter<'m> {
    /// Evaluates, here, the operand of every broadcast that `id` at `idx` reaches through
    /// index-preserving ops and that depends only on the dimensions marked `known` (whose
    /// entries of `idx` the enclosing loops fix; the others are placeholders never read).
    pub(crate) fn evaluate_row_values(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
        known: &[bool],
    ) -> Result<(), LowerError> {
        let mut seen = HashSet::new();
        self.row_values_walk(f, id, idx, known, &mut seen)
    }

    /// Before reduce `id`'s loops for output element `idx`: the row values of its inputs that
    /// the kept dimensions fix.
    pub(crate) fn evaluate_reduce_input_rows(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
    ) -> Result<(), LowerError> {
        let inst = f.comp.inst(id);
        let Some(dims) = inst.attr_ints("dimensions") else { return Ok(()) };
        let inputs = &inst.operands[..inst.operands.len() / 2];
        for &input in inputs {
            let rank = f.comp.inst(input).shape.rank();
            let known: Vec<bool> = (0..rank).map(|d| !dims.contains(&(d as i64))).collect();
            if known.iter().all(|&k| k) || known.iter().all(|&k| !k) {
                continue;
            }
            // The input's index as the reduce's loops build it: kept dimensions in order.
            let mut kept = idx.iter();
            let full: Vec<IndexExpr> = known
                .iter()
                .map(|&k| if k { kept.next().cloned().unwrap_or_default() } else { IndexExpr::default() })
                .collect();
            self.evaluate_row_values(f, input, &full, &known)?;
        }
        Ok(())
    }

    fn row_values_walk(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
        known: &[bool],
        seen: &mut HashSet<InstId>,
    ) -> Result<(), LowerError> {
        if !seen.insert(id) {
            return Ok(());
        }
        let inst = f.comp.inst(id);
        let rank = inst.shape.rank();
        // Complex values are evaluated part by part in twin frames (`complex.rs`), not here.
        if rank != idx.len() || inst.shape.as_array().is_none_or(|a| a.element_type.is_complex()) {
            return Ok(());
        }
        match inst.opcode {
            Opcode::Broadcast => {
                let Some(dims) = inst.attr_ints("dimensions") else { return Ok(()) };
                let mapped: Option<Vec<usize>> =
                    dims.iter().map(|&d| usize::try_from(d).ok().filter(|&d| d < rank)).collect();
                // Only a broadcast that leaves some dimension free varies less than its uses.
                if let Some(mapped) = mapped.filter(|m| !m.is_empty() && m.len() < rank && m.iter().all(|&d| known[d]))
                {
                    let oi: Vec<IndexExpr> = mapped.iter().map(|&d| idx[d].clone()).collect();
                    self.elem(f, inst.operands[0], &oi)?;
                }
            }
            op if op.is_elementwise() || matches!(op, Opcode::Convert | Opcode::Copy) => {
                for &o in &inst.operands {
                    self.row_values_walk(f, o, idx, known, seen)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}
