//! `gather` as an elemental op: an output index splits into a batch position (the output
//! dimensions that are not `offset_dims`, walking the start indices' dimensions other than
//! `index_vector_dim`) and an offset inside the slice. The batch position reads the index
//! vector from the start indices (through `elem`, so indices may be any fused producer, laid
//! out any way), each component is widened to `I64` and clamped as XLA does so the whole slice
//! fits in the operand; the operand is then read at start + offset through its own layout.
//!
//! Shared with `scatter`: the dimension numbers (`DimNumbers`) and the widening of an index
//! element to `I64`.

use tessera_hlo::ir::AttrList;
use tessera_hlo::{ElementType, InstId, Instruction};

use super::{index, types, Emitter, Frame};
use crate::kernel::{BinOp, CastOp, Const, IndexExpr, Ty, ValueId};
use crate::LowerError;

/// The start indices of a gather or scatter, seen as batch positions of index vectors.
pub(crate) struct StartIndices {
    /// The indices' dimensions (a trailing 1 appended when `index_vector_dim` is the rank).
    pub dims: Vec<i64>,
    pub ivd: usize,
    /// Whether `index_vector_dim` names a real dimension of the indices array.
    pub ivd_real: bool,
    pub et: ElementType,
}

impl StartIndices {
    pub fn new(inst: &Instruction, indices: &Instruction) -> Result<StartIndices, LowerError> {
        let a = super::array_shape(&indices.shape, &inst.name)?;
        if !a.element_type.is_integral() {
            return Err(LowerError::invalid(&inst.name, "start indices must be integers"));
        }
        let rank = a.dims.len();
        let ivd = dim_attr(inst, "index_vector_dim", rank + 1)?;
        let mut dims = a.dims.clone();
        if ivd == rank {
            dims.push(1);
        }
        Ok(StartIndices { dims, ivd, ivd_real: ivd < rank, et: a.element_type })
    }

    /// The batch dimensions' extents (every dimension but the index vector one).
    pub fn batch_dims(&self) -> Vec<i64> {
        self.dims.iter().enumerate().filter(|&(d, _)| d != self.ivd).map(|(_, &n)| n).collect()
    }

    pub fn components(&self) -> usize {
        self.dims[self.ivd] as usize
    }

    /// Position among the batch dimensions of indices dimension `d` (not the vector one).
    pub fn batch_position(&self, d: usize) -> usize {
        if d > self.ivd {
            d - 1
        } else {
            d
        }
    }

    /// The index of component `k` of the index vector at batch position `g`, in the indices
    /// array's own dimensions.
    pub fn component_index(&self, g: &[IndexExpr], k: usize) -> Vec<IndexExpr> {
        let mut out = Vec::with_capacity(self.dims.len());
        let mut it = g.iter();
        for d in 0..self.dims.len() {
            if d == self.ivd {
                if self.ivd_real {
                    out.push(index::constant(k as i64));
                }
            } else {
                out.push(it.next().cloned().unwrap_or_default());
            }
        }
        out
    }
}

/// The dimension numbers gather and scatter share, named as scatter names them: operand
/// dimensions that the index vector addresses (`index_map`), that are batch positions
/// themselves (`operand_batching` paired with `indices_batching`), and the window dimensions
/// (every other operand dimension).
pub(crate) struct DimNumbers {
    pub index_map: Vec<usize>,
    pub operand_batching: Vec<usize>,
    pub indices_batching: Vec<usize>,
    pub window_dims: Vec<usize>,
}

/// A dimension-number attribute: one dimension below `bound`.
pub(crate) fn dim_attr(inst: &Instruction, name: &str, bound: usize) -> Result<usize, LowerError> {
    let v = inst.attr_int(name).ok_or_else(|| LowerError::invalid(&inst.name, format!("missing {name}")))?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v < bound)
        .ok_or_else(|| LowerError::invalid(&inst.name, format!("{name}={v} out of range")))
}

/// A list of dimension numbers, each below `bound`; absent means empty.
pub(crate) fn dims_attr(inst: &Instruction, name: &str, bound: usize) -> Result<Vec<usize>, LowerError> {
    inst.attr_ints(name)
        .unwrap_or(&[])
        .iter()
        .map(|&d| {
            usize::try_from(d)
                .ok()
                .filter(|&d| d < bound)
                .ok_or_else(|| LowerError::invalid(&inst.name, format!("{name} dimension {d} out of range")))
        })
        .collect()
}

impl DimNumbers {
    /// Reads and checks the dimension numbers; `inserted` is `collapsed_slice_dims` or
    /// `inserted_window_dims`, the other names follow the op.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        inst: &Instruction,
        idx: &StartIndices,
        op_dims: &[i64],
        inserted: &str,
        index_map: &str,
        operand_batching: &str,
        indices_batching: &str,
    ) -> Result<DimNumbers, LowerError> {
        let rank = op_dims.len();
        let inserted = dims_attr(inst, inserted, rank)?;
        let index_map = dims_attr(inst, index_map, rank)?;
        let operand_batching = dims_attr(inst, operand_batching, rank)?;
        let indices_batching = dims_attr(inst, indices_batching, idx.dims.len())?;
        let window_dims: Vec<usize> =
            (0..rank).filter(|d| !inserted.contains(d) && !operand_batching.contains(d)).collect();
        let bad = index_map.len() != idx.components()
            || indices_batching.len() != operand_batching.len()
            || indices_batching.contains(&idx.ivd)
            || operand_batching.iter().zip(&indices_batching).any(|(&o, &i)| op_dims[o] != idx.dims[i]);
        if bad {
            return Err(LowerError::invalid(&inst.name, "dimension numbers do not match the operands"));
        }
        Ok(DimNumbers { index_map, operand_batching, indices_batching, window_dims })
    }
}

impl<'m> Emitter<'m> {
    /// Component `k` of the index vector at batch position `g`, widened to `I64` (unsigned
    /// types zero-extended, so a u64 index above `i64::MAX` reads as negative: callers compare
    /// it unsigned or clamp it with `UMin`).
    pub(crate) fn index_component(
        &mut self,
        f: &Frame<'m>,
        indices: InstId,
        idx: &StartIndices,
        g: &[IndexExpr],
        k: usize,
        name: &str,
    ) -> Result<ValueId, LowerError> {
        let at = idx.component_index(g, k);
        let v = self.elem(f, indices, &at)?;
        let ty = types::reg(idx.et, name)?;
        Ok(if ty == Ty::I64 {
            v
        } else {
            let op = if idx.et.is_unsigned_integral() { CastOp::ZExt } else { CastOp::SExt };
            self.b.cast(op, ty, Ty::I64, v)
        })
    }

    pub(crate) fn elem_gather(&mut self, f: &Frame<'m>, id: InstId, out: &[IndexExpr]) -> Result<ValueId, LowerError> {
        let inst = f.comp.inst(id);
        let name = inst.name.as_str();
        let [operand, indices] = inst.operands[..] else {
            return Err(LowerError::invalid(name, "gather needs an operand and start indices"));
        };
        let op_dims = f.comp.inst(operand).shape.dims().to_vec();
        let idx = StartIndices::new(inst, f.comp.inst(indices))?;
        let dn = DimNumbers::new(
            inst,
            &idx,
            &op_dims,
            "collapsed_slice_dims",
            "start_index_map",
            "operand_batching_dims",
            "start_indices_batching_dims",
        )?;
        let offset_dims = dims_attr(inst, "offset_dims", out.len())?;
        let sizes = inst.attr_ints("slice_sizes").ok_or_else(|| LowerError::invalid(name, "missing slice_sizes"))?;
        let out_dims = inst.shape.dims();
        let batch_out: Vec<usize> = (0..out.len()).filter(|d| !offset_dims.contains(d)).collect();
        let batch_dims = idx.batch_dims();
        let bad = sizes.len() != op_dims.len()
            || dn.window_dims.len() != offset_dims.len()
            || batch_out.len() != batch_dims.len()
            || batch_out.iter().zip(&batch_dims).any(|(&o, &b)| out_dims[o] != b)
            || sizes.iter().zip(&op_dims).any(|(&s, &d)| s < 0 || s > d)
            || offset_dims.iter().zip(&dn.window_dims).any(|(&o, &w)| out_dims[o] > sizes[w]);
        if bad {
            return Err(LowerError::invalid(name, "gather dimension numbers do not match the operands"));
        }
        // Only a zero-sized collapsed or batching slice could point past the operand (the
        // output then still has elements); XLA leaves that undefined and so does the reference
        // interpreter, which refuses it.
        if (0..op_dims.len()).any(|d| !dn.window_dims.contains(&d) && sizes[d] == 0) {
            return Err(LowerError::unsupported(name, "a gather slice of size 0 in a collapsed dimension"));
        }
        let g: Vec<IndexExpr> = batch_out.iter().map(|&d| out[d].clone()).collect();
        let mut oi = vec![index::constant(0); op_dims.len()];
        for (t, &d) in offset_dims.iter().enumerate() {
            oi[dn.window_dims[t]] = out[d].clone();
        }
        for (&od, &id) in dn.operand_batching.iter().zip(&dn.indices_batching) {
            oi[od] = g[idx.batch_position(id)].clone();
        }
        for (k, &d) in dn.index_map.iter().enumerate() {
            let v = self.index_component(f, indices, &idx, &g, k, name)?;
            let hi = op_dims[d] - sizes[d];
            let hi_v = self.b.constant(Const::Int { ty: Ty::I64, bits: hi });
            // XLA clamps the start so the whole slice fits; an unsigned index is never below 0
            // (and a u64 one above i64::MAX, negative as I64, is large as unsigned).
            let c = if idx.et.is_unsigned_integral() {
                self.b.binary(BinOp::UMin, Ty::I64, v, hi_v)
            } else {
                let zero = self.b.constant(Const::Int { ty: Ty::I64, bits: 0 });
                let lo = self.b.binary(BinOp::SMax, Ty::I64, v, zero);
                self.b.binary(BinOp::SMin, Ty::I64, lo, hi_v)
            };
            self.bounds.set_value(c, 0, hi);
            oi[d] = index::add(&oi[d], &index::value(c));
        }
        self.elem(f, operand, &oi)
    }
}
