//! Ops that move data without computing on it: broadcast, reshape, transpose, slices,
//! concatenation, padding, iota and tuples.

use super::types::*;
use super::{Builder, OpResult, Spec, XlaOp};
use crate::element_type::ElementType;
use crate::ir::{AttrValue, Opcode, PaddingDim, SliceRange};
use crate::shape::Shape;

impl Builder {
    // ---- Shape manipulation ---------------------------------------------------------------

    /// Adds dimensions of sizes `sizes` in front: `output[i.., j..] = operand[j..]`.
    pub fn broadcast<'b>(&'b self, operand: XlaOp<'b>, sizes: &[i64]) -> XlaOp<'b> {
        self.op("broadcast", || {
            let shape = self.array(operand, "the operand")?;
            let out: Vec<i64> = sizes.iter().chain(&shape.dims).copied().collect();
            let dims: Vec<i64> = (sizes.len() as i64..out.len() as i64).collect();
            self.in_dim_broadcast(operand, shape.element_type, &out, &dims)
        })
    }

    /// Broadcasts to dimensions `out_dims`, operand dimension `i` becoming dimension
    /// `broadcast_dimensions[i]`. Operand dimensions of size 1 may map to larger ones: they
    /// are reshaped away first, since HLO `broadcast` needs equal sizes.
    pub fn broadcast_in_dim<'b>(
        &'b self,
        operand: XlaOp<'b>,
        out_dims: &[i64],
        broadcast_dimensions: &[i64],
    ) -> XlaOp<'b> {
        self.op("broadcast_in_dim", || {
            let shape = self.array(operand, "the operand")?;
            if broadcast_dimensions.len() != shape.rank() {
                return Err(format!(
                    "broadcast_dimensions {broadcast_dimensions:?} has {} entries for an operand of rank {}",
                    broadcast_dimensions.len(),
                    shape.rank()
                ));
            }
            check_dims(broadcast_dimensions, out_dims.len(), "broadcast dimension")?;
            let mut kept = Vec::new();
            let mut kept_sizes = Vec::new();
            for (i, (&d, &size)) in broadcast_dimensions.iter().zip(&shape.dims).enumerate() {
                let want = out_dims[d as usize];
                if size == want {
                    kept.push(d);
                    kept_sizes.push(size);
                } else if size != 1 {
                    return Err(format!(
                        "operand dimension {i} has size {size} but output dimension {d} has size {want}"
                    ));
                }
            }
            let ty = shape.element_type;
            if kept.len() == shape.rank() {
                return self.in_dim_broadcast(operand, ty, out_dims, broadcast_dimensions);
            }
            let reshaped = self.emit(Spec::new(Opcode::Reshape).declared(Shape::array(ty, &kept_sizes)), &[operand])?;
            self.in_dim_broadcast(reshaped, ty, out_dims, &kept)
        })
    }

    /// The same elements in row-major order, with dimensions `new_sizes`.
    pub fn reshape<'b>(&'b self, operand: XlaOp<'b>, new_sizes: &[i64]) -> XlaOp<'b> {
        self.op("reshape", || self.reshape_inner(operand, new_sizes))
    }

    fn reshape_inner<'b>(&'b self, operand: XlaOp<'b>, new_sizes: &[i64]) -> OpResult<XlaOp<'b>> {
        let shape = self.array(operand, "the operand")?;
        let spec = Spec::new(Opcode::Reshape).declared(Shape::array(shape.element_type, new_sizes));
        self.emit(spec, &[operand])
    }

    /// Seed 003's `Reshape(operand, dimensions, new_sizes)`: the operand is flattened in the
    /// dimension order `dimensions` (a transpose when that is not the identity), then
    /// reshaped to `new_sizes`.
    pub fn reshape_with_order<'b>(&'b self, operand: XlaOp<'b>, dimensions: &[i64], new_sizes: &[i64]) -> XlaOp<'b> {
        self.op("reshape", || {
            let shape = self.array(operand, "the operand")?;
            if dimensions.len() != shape.rank() {
                return Err(format!("dimensions {dimensions:?} is not a permutation of rank {}", shape.rank()));
            }
            check_dims(dimensions, shape.rank(), "dimension")?;
            let operand = if dimensions == iota_dims(shape.rank()).as_slice() {
                operand
            } else {
                self.transpose_inner(operand, dimensions)?
            };
            self.reshape_inner(operand, new_sizes)
        })
    }

    /// Replaces the consecutive, increasing dimensions `dimensions` by one of their product.
    pub fn collapse<'b>(&'b self, operand: XlaOp<'b>, dimensions: &[i64]) -> XlaOp<'b> {
        self.op("collapse", || {
            let shape = self.array(operand, "the operand")?;
            check_dims(dimensions, shape.rank(), "dimension")?;
            if dimensions.windows(2).any(|w| w[1] != w[0] + 1) {
                return Err(format!("dimensions {dimensions:?} are not consecutive and in order"));
            }
            let Some(&first) = dimensions.first() else {
                return Ok(operand);
            };
            let (first, last) = (first as usize, first as usize + dimensions.len());
            let merged = shape.dims[first..last]
                .iter()
                .try_fold(1i64, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| "collapsed size overflows".to_string())?;
            let sizes: Vec<i64> =
                shape.dims[..first].iter().copied().chain([merged]).chain(shape.dims[last..].iter().copied()).collect();
            self.reshape_inner(operand, &sizes)
        })
    }

    /// Permutes dimensions: result dimension `i` is operand dimension `permutation[i]`.
    pub fn transpose<'b>(&'b self, operand: XlaOp<'b>, permutation: &[i64]) -> XlaOp<'b> {
        self.op("transpose", || self.transpose_inner(operand, permutation))
    }

    pub(super) fn transpose_inner<'b>(&'b self, operand: XlaOp<'b>, permutation: &[i64]) -> OpResult<XlaOp<'b>> {
        self.emit(Spec::new(Opcode::Transpose).attr("dimensions", ints(permutation)), &[operand])
    }

    /// The transpose of a matrix (seed 003's `Trans`).
    pub fn trans<'b>(&'b self, operand: XlaOp<'b>) -> XlaOp<'b> {
        self.op("transpose", || {
            let shape = self.array(operand, "the operand")?;
            if shape.rank() != 2 {
                return Err(format!("Trans needs a matrix, but the operand has rank {}", shape.rank()));
            }
            self.transpose_inner(operand, &[1, 0])
        })
    }

    /// Reverses the order of elements along `dimensions`.
    pub fn rev<'b>(&'b self, operand: XlaOp<'b>, dimensions: &[i64]) -> XlaOp<'b> {
        self.op("reverse", || self.emit(Spec::new(Opcode::Reverse).attr("dimensions", ints(dimensions)), &[operand]))
    }

    /// The elements from `start` (inclusive) to `limit` (exclusive) by `strides` in each
    /// dimension; empty `strides` means all 1.
    pub fn slice<'b>(&'b self, operand: XlaOp<'b>, start: &[i64], limit: &[i64], strides: &[i64]) -> XlaOp<'b> {
        self.op("slice", || self.slice_inner(operand, start, limit, strides))
    }

    fn slice_inner<'b>(
        &'b self,
        operand: XlaOp<'b>,
        start: &[i64],
        limit: &[i64],
        strides: &[i64],
    ) -> OpResult<XlaOp<'b>> {
        let strides = if strides.is_empty() { vec![1; start.len()] } else { strides.to_vec() };
        if start.len() != limit.len() || start.len() != strides.len() {
            return Err(format!(
                "{} start indices, {} limit indices and {} strides differ in number",
                start.len(),
                limit.len(),
                strides.len()
            ));
        }
        let ranges = start
            .iter()
            .zip(limit)
            .zip(&strides)
            .map(|((&start, &limit), &stride)| SliceRange { start, limit, stride })
            .collect();
        self.emit(Spec::new(Opcode::Slice).attr("slice", AttrValue::Slice(ranges)), &[operand])
    }

    /// A slice of one dimension, the others whole.
    pub fn slice_in_dim<'b>(
        &'b self,
        operand: XlaOp<'b>,
        start: i64,
        limit: i64,
        stride: i64,
        dimension: i64,
    ) -> XlaOp<'b> {
        self.op("slice", || {
            let shape = self.array(operand, "the operand")?;
            check_dims(&[dimension], shape.rank(), "dimension")?;
            let mut starts = vec![0; shape.rank()];
            let mut limits = shape.dims.clone();
            let mut strides = vec![1; shape.rank()];
            starts[dimension as usize] = start;
            limits[dimension as usize] = limit;
            strides[dimension as usize] = stride;
            self.slice_inner(operand, &starts, &limits, &strides)
        })
    }

    /// A slice of sizes `sizes` starting at run-time indices (one scalar per dimension).
    pub fn dynamic_slice<'b>(&'b self, operand: XlaOp<'b>, start_indices: &[XlaOp<'b>], sizes: &[i64]) -> XlaOp<'b> {
        self.op("dynamic-slice", || {
            let operands: Vec<XlaOp<'b>> = std::iter::once(operand).chain(start_indices.iter().copied()).collect();
            self.emit(Spec::new(Opcode::DynamicSlice).attr("dynamic_slice_sizes", ints(sizes)), &operands)
        })
    }

    /// `operand` with `update` written at run-time indices (one scalar per dimension).
    pub fn dynamic_update_slice<'b>(
        &'b self,
        operand: XlaOp<'b>,
        update: XlaOp<'b>,
        start_indices: &[XlaOp<'b>],
    ) -> XlaOp<'b> {
        self.op("dynamic-update-slice", || {
            let operands: Vec<XlaOp<'b>> = [operand, update].into_iter().chain(start_indices.iter().copied()).collect();
            self.emit(Spec::new(Opcode::DynamicUpdateSlice), &operands)
        })
    }

    /// Joins arrays along `dimension`.
    pub fn concat_in_dim<'b>(&'b self, operands: &[XlaOp<'b>], dimension: i64) -> XlaOp<'b> {
        self.op("concatenate", || {
            if operands.is_empty() {
                return Err("nothing to concatenate".to_string());
            }
            self.emit(Spec::new(Opcode::Concatenate).attr("dimensions", ints(&[dimension])), operands)
        })
    }

    /// Pads with `value` at the edges (negative amounts cut) and between elements.
    pub fn pad<'b>(&'b self, operand: XlaOp<'b>, value: XlaOp<'b>, config: &[PaddingDim]) -> XlaOp<'b> {
        self.op("pad", || {
            self.emit(Spec::new(Opcode::Pad).attr("padding", AttrValue::Padding(config.to_vec())), &[operand, value])
        })
    }

    /// Pads one dimension at its edges, the others not at all.
    pub fn pad_in_dim<'b>(
        &'b self,
        operand: XlaOp<'b>,
        value: XlaOp<'b>,
        dimension: i64,
        low: i64,
        high: i64,
    ) -> XlaOp<'b> {
        self.op("pad", || {
            let shape = self.array(operand, "the operand")?;
            check_dims(&[dimension], shape.rank(), "dimension")?;
            let mut config = vec![PaddingDim::default(); shape.rank()];
            config[dimension as usize] = PaddingDim { low, high, interior: 0 };
            self.emit(Spec::new(Opcode::Pad).attr("padding", AttrValue::Padding(config)), &[operand, value])
        })
    }

    /// An array of `shape` counting up from 0 along `iota_dimension`.
    pub fn iota(&self, shape: &Shape, iota_dimension: i64) -> XlaOp<'_> {
        self.op("iota", || {
            let spec =
                Spec::new(Opcode::Iota).declared(shape.clone()).attr("iota_dimension", AttrValue::Int(iota_dimension));
            self.emit(spec, &[])
        })
    }

    /// `0, 1, ..., size-1` of type `ty`.
    pub fn iota_1d(&self, ty: ElementType, size: i64) -> XlaOp<'_> {
        self.iota(&Shape::array(ty, &[size]), 0)
    }

    // ---- Tuples ---------------------------------------------------------------------------

    pub fn tuple<'b>(&'b self, elements: &[XlaOp<'b>]) -> XlaOp<'b> {
        self.op("tuple", || self.emit(Spec::new(Opcode::Tuple), elements))
    }

    pub fn get_tuple_element<'b>(&'b self, tuple: XlaOp<'b>, index: i64) -> XlaOp<'b> {
        self.op("get-tuple-element", || self.gte(tuple, index))
    }

    pub(super) fn gte<'b>(&'b self, tuple: XlaOp<'b>, index: i64) -> OpResult<XlaOp<'b>> {
        self.emit(Spec::new(Opcode::GetTupleElement).attr("index", AttrValue::Int(index)), &[tuple])
    }
}
