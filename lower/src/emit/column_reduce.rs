//! Column reductions: a reduce whose input keeps its contiguous (minor) dimension and sums
//! over dimensions major to it (the per-channel sums of an NHWC batch norm, a bias gradient).
//! Element at a time, each output walks its column with the minor dimension's stride, a cache
//! line per element. This form keeps one accumulator per output element in scratch and sweeps
//! the input row by row: a vector loop along the kept minor dimension updates a chunk of
//! accumulators per row. Each accumulator sees its column's elements in the same order
//! (reduced dimensions major to minor) and in the same type (f32 sums in f64, f16/bf16 sums in
//! f32) as the element-at-a-time form, so the result is the same bits; only the loop order
//! changes. The grid runs over the major-most other kept dimension when there is one and a
//! chunk can span the minor dimension (the blocks of rows `tree_reduction` makes of a tall
//! column reduction: each grid index reads whole rows), else over chunks of the minor
//! dimension; either way threads own disjoint accumulators, and every chunk is whole cache
//! lines of the input's rows when it can be.
//!
//! Sibling reductions that multi-output fusion merged (a tuple of such reduces, of one input
//! shape over the same dimensions, accumulated alike) share the sweep: each element of the
//! row loop updates every reduce's accumulator, and the elements their inputs share are
//! computed and loaded once.

use tessera_hlo::ir::AttrList;
use tessera_hlo::{CompId, ElementType, InstId, LayoutMap, Opcode};

use super::reduce::{is_plain_add, reduction_parts};
use super::{index, layout_map, nest, scalar, types, Emitter};
use crate::kernel::{BinOp, CastOp, IndexExpr, MemType, Tail, Ty};
use crate::LowerError;

/// How a column reduction's accumulators add up (as `Emitter::reduce_values` does).
#[derive(Clone, Copy, PartialEq)]
enum Accumulate {
    /// f32 plain sums, in f64.
    F64Sum,
    /// f16/bf16 plain sums, in f32.
    F32Sum,
    /// Any other reducer, in the result's register type.
    Reducer,
}

/// The most elements of the minor dimension one grid index takes.
const MAX_CHUNK: i64 = 512;

/// Whether a column reduction computes its input's elements with `op` in its vector loop:
/// elementwise ops and data movement, nothing that opens loops of its own.
pub(crate) fn is_input_op(op: Opcode) -> bool {
    op.is_elementwise()
        || matches!(
            op,
            Opcode::Constant
                | Opcode::Broadcast
                | Opcode::Reshape
                | Opcode::Transpose
                | Opcode::Slice
                | Opcode::Convert
                | Opcode::Copy
                | Opcode::Iota
        )
}

/// The dimension of `map` a column reduction's vector loop runs along (the contiguous one:
/// stride 1 and more than one element, in a layout without padding or tiles), and every
/// dimension's stride. Multi-output fusion asks it too, so it merges only what this form takes.
pub(crate) fn contiguous_dim(map: &LayoutMap) -> Option<(usize, Vec<i64>)> {
    let strides = super::plain_strides(map)?;
    let minor = (0..strides.len()).find(|&d| strides[d] == 1 && map.dims()[d] > 1)?;
    Some((minor, strides))
}

/// One reduce of a column reduction kernel: its input and init value, reducer, result type
/// and how its accumulators add up.
struct ColumnRoot {
    id: InstId,
    input: InstId,
    init: InstId,
    reducer: CompId,
    et: ElementType,
    how: Accumulate,
}

impl<'m> Emitter<'m> {
    /// Emits reduces `ids` (the kernel's results, in output order: one reduce, or the sibling
    /// reductions multi-output fusion merged, which share one input shape and reduced
    /// dimensions) as a column reduction (module doc): one sweep over the rows updates every
    /// result's accumulators, so inputs they share are read once. False when they are not one.
    pub(crate) fn try_column_reduce(&mut self, ids: &[InstId]) -> Result<bool, LowerError> {
        let comp = self.comp;
        let Some(&first) = ids.first() else { return Ok(false) };
        let name = comp.inst(first).name.clone();
        let mut roots = Vec::with_capacity(ids.len());
        for &id in ids {
            let inst = comp.inst(id);
            if inst.opcode != Opcode::Reduce {
                return Ok(false);
            }
            let (inputs, inits, reducer) = reduction_parts(inst)?;
            let ([input], [init]) = (inputs, inits) else { return Ok(false) };
            let Some(out_shape) = inst.shape.as_array() else { return Ok(false) };
            let et = out_shape.element_type;
            use ElementType as E;
            if !matches!(et, E::F32 | E::F64 | E::F16 | E::BF16 | E::S32 | E::S64 | E::U32 | E::U64) {
                return Ok(false);
            }
            let plain_add = is_plain_add(self.module, reducer);
            let how = match et {
                E::F32 if plain_add => Accumulate::F64Sum,
                E::F16 | E::BF16 if plain_add => Accumulate::F32Sum,
                _ => Accumulate::Reducer,
            };
            roots.push(ColumnRoot { id, input: *input, init: *init, reducer, et, how });
        }
        // The inputs' elements come from elementwise ops and data movement only: nothing that
        // opens loops of its own inside the vector loop.
        let is_root = |i: usize| ids.iter().any(|r| r.index() == i);
        let simple = comp.instructions.iter().enumerate().all(|(i, x)| {
            is_root(i)
                || (ids.len() > 1 && i == comp.root.index() && x.opcode == Opcode::Tuple)
                || x.opcode == Opcode::Parameter
                || is_input_op(x.opcode)
        });
        if !simple {
            return Ok(false);
        }
        let in_map = layout_map(&comp.inst(roots[0].input).shape, &name)?;
        let out_map = self.outputs[0].map.clone();
        let reduced_attr = comp.inst(first).attr_ints("dimensions").unwrap_or(&[]).to_vec();
        for (k, r) in roots.iter().enumerate().skip(1) {
            let alike = r.et == roots[0].et
                && r.how == roots[0].how
                && layout_map(&comp.inst(r.input).shape, &name)? == in_map
                && self.outputs[k].map == out_map
                && comp.inst(r.id).attr_ints("dimensions").unwrap_or(&[]) == reduced_attr.as_slice();
            if !alike {
                return Ok(false);
            }
        }
        let (et, how) = (roots[0].et, roots[0].how);
        // The minor dimension: contiguous in the input (kept, and the output's contiguous
        // dimension too, as checked below).
        let (Some((minor, in_strides)), Some(out_strides)) = (contiguous_dim(&in_map), super::plain_strides(&out_map))
        else {
            return Ok(false);
        };
        let dims = in_map.dims().to_vec();
        let mut reduced = vec![false; dims.len()];
        for &d in &reduced_attr {
            match usize::try_from(d).ok().and_then(|d| reduced.get_mut(d)) {
                Some(r) => *r = true,
                None => return Ok(false),
            }
        }
        if dims.contains(&0) || !reduced.iter().zip(&dims).any(|(&r, &n)| r && n > 1) {
            return Ok(false);
        }
        let kept: Vec<usize> = (0..dims.len()).filter(|&d| !reduced[d]).collect();
        let Some(out_minor) = kept.iter().position(|&d| d == minor) else { return Ok(false) };
        let width_of = |ty: Ty| if matches!(ty, Ty::F64 | Ty::I64) { 8 } else { 16 };
        let acc_ty = match how {
            Accumulate::F64Sum => Ty::F64,
            Accumulate::F32Sum => Ty::F32,
            Accumulate::Reducer => types::reg(et, &name)?,
        };
        let extent = dims[minor];
        if out_strides[out_minor] != 1 || extent < i64::from(width_of(acc_ty)) {
            return Ok(false);
        }

        // Kept dimensions other than the minor one, in physical order.
        let by_stride = |ds: Vec<usize>| {
            let mut ds = ds;
            ds.sort_by_key(|&d| std::cmp::Reverse(in_strides[d]));
            ds
        };
        let outer = by_stride(kept.iter().copied().filter(|&d| d != minor && dims[d] > 1).collect());
        // The grid: the major-most of those, when there is one and a chunk can span the minor
        // dimension (each grid index then sweeps whole rows: `tree_reduction` splits a tall
        // column reduction's rows into such blocks); else chunks of the minor dimension,
        // whole vectors each, at least four when the dimension allows (two per thread on two
        // cores), else two, else one.
        let lanes = i64::from(width_of(acc_ty));
        let fits = |c: i64, n: i64| c % lanes == 0 && extent % c == 0 && extent / c >= n;
        let grid_outer = outer.first().copied().filter(|_| extent <= MAX_CHUNK);
        let chunk = if grid_outer.is_some() {
            extent
        } else {
            [4, 2].iter().find_map(|&n| (0..7).map(|k| MAX_CHUNK >> k).find(|&c| fits(c, n))).unwrap_or(extent)
        };
        let chunks = extent / chunk;
        let scratch_len = out_map.physical_element_count();
        let f = self.fused_frame();
        let mut scratch = Vec::with_capacity(roots.len());
        let mut inits = Vec::with_capacity(roots.len());
        for r in &roots {
            let acc_name = format!("{}.acc", comp.inst(r.id).name);
            scratch.push(self.b.buffer(acc_name, MemType::Scalar(acc_ty), scratch_len, true));
            let v = self.elem(&f, r.init, &[])?;
            inits.push(if how == Accumulate::F64Sum { self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, v) } else { v });
        }
        let mut full = vec![index::constant(0); dims.len()];
        let base = if let Some(d) = grid_outer {
            self.grid_extent = dims[d];
            let g = self.b.grid_var();
            self.bounds.set_var(g, 0, dims[d] - 1);
            full[d] = index::var(g);
            index::constant(0)
        } else if chunks > 1 {
            self.grid_extent = chunks;
            let g = self.b.grid_var();
            self.bounds.set_var(g, 0, chunks - 1);
            index::scale(&index::var(g), chunk)
        } else {
            index::constant(0)
        };
        let mut opened = 0;
        for &d in outer.iter().filter(|&&d| Some(d) != grid_outer) {
            full[d] = index::var(self.open_loop(0, dims[d]));
            opened += 1;
        }
        let width = nest::vector_width(acc_ty.bits(), chunk);
        let tail = if chunk % i64::from(width) == 0 { Tail::None } else { Tail::Peel };
        let out_at = |em: &mut Emitter<'m>, full: &[IndexExpr], map: &LayoutMap| {
            let idx: Vec<IndexExpr> = kept.iter().map(|&d| full[d].clone()).collect();
            em.layout_offset(map, &idx)
        };

        // Accumulators start at the init values.
        let j = self.open_loop(0, chunk);
        full[minor] = index::add(&base, &index::var(j));
        let at = out_at(self, &full, &out_map);
        for (k, &acc) in scratch.iter().enumerate() {
            self.b.store(acc, at.clone(), inits[k]);
        }
        self.b.end_loop_vectorized(width, tail);

        // Rows: every reduced index, major to minor, then the chunk of the minor dimension.
        let mark = self.mark();
        let mut rows_opened = 0;
        for d in by_stride((0..dims.len()).filter(|&d| reduced[d]).collect()) {
            if dims[d] > 1 {
                full[d] = index::var(self.open_loop(0, dims[d]));
                rows_opened += 1;
            }
        }
        let j = self.open_loop(0, chunk);
        full[minor] = index::add(&base, &index::var(j));
        let at = out_at(self, &full, &out_map);
        for (r, &buf) in roots.iter().zip(&scratch) {
            let acc = self.b.load(buf, at.clone());
            let x = self.elem(&f, r.input, &full)?;
            let next = match how {
                Accumulate::F64Sum => {
                    let x = self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, x);
                    self.b.binary(BinOp::Add, Ty::F64, acc, x)
                }
                Accumulate::F32Sum => self.b.binary(BinOp::Add, Ty::F32, acc, x),
                Accumulate::Reducer => {
                    let out = self.call_scalar(r.reducer, vec![acc, x])?;
                    let [v] = out.as_slice() else {
                        return Err(LowerError::invalid(&name, "reducer returns the wrong number of values"));
                    };
                    *v
                }
            };
            self.b.store(buf, at.clone(), next);
        }
        self.b.end_loop_vectorized(width, tail);
        for _ in 0..rows_opened {
            self.b.end_loop();
        }
        self.forget_since(mark);

        // Results: each accumulator rounded once to the result type.
        let j = self.open_loop(0, chunk);
        full[minor] = index::add(&base, &index::var(j));
        let at = out_at(self, &full, &out_map);
        for (k, &buf) in scratch.iter().enumerate() {
            let mut v = self.b.load(buf, at.clone());
            v = match how {
                Accumulate::F64Sum => self.b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, v),
                Accumulate::F32Sum => scalar::round(&mut self.b, et, v),
                Accumulate::Reducer => v,
            };
            let m = types::to_mem(&mut self.b, et, v);
            let out_buf = self.outputs[k].buf;
            self.b.store(out_buf, at.clone(), m);
        }
        self.b.end_loop_vectorized(width, tail);
        for _ in 0..opened {
            self.b.end_loop();
        }
        Ok(true)
    }
}
