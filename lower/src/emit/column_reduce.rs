//! Column reductions: a reduce whose input keeps its contiguous (minor) dimension and sums
//! over dimensions major to it (the per-channel sums of an NHWC batch norm, a bias gradient).
//! Element at a time, each output walks its column with the minor dimension's stride, a cache
//! line per element. This form keeps one accumulator per output element in scratch and sweeps
//! the input row by row: a vector loop along the kept minor dimension updates a chunk of
//! accumulators per row. Each accumulator sees its column's elements in the same order
//! (reduced dimensions major to minor) and in the same type (f32 sums in f64, f16/bf16 sums in
//! f32) as the element-at-a-time form, so the result is the same bits; only the loop order
//! changes. The grid runs over chunks of the minor dimension, so threads own disjoint
//! accumulators, and every chunk is whole cache lines of the input's rows when it can be.

use tessera_hlo::ir::AttrList;
use tessera_hlo::{ElementType, InstId, LayoutMap, Opcode};

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

impl<'m> Emitter<'m> {
    /// Emits reduce `id` (the kernel's root) as a column reduction (module doc); false when it
    /// is not one.
    pub(crate) fn try_column_reduce(&mut self, id: InstId) -> Result<bool, LowerError> {
        let comp = self.comp;
        let inst = comp.inst(id);
        let name = inst.name.clone();
        let (inputs, inits, reducer) = reduction_parts(inst)?;
        let ([input], [init]) = (inputs, inits) else { return Ok(false) };
        let (input, init) = (*input, *init);
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
        // The input's elements come from elementwise ops and data movement only: nothing that
        // opens loops of its own inside the vector loop.
        let simple = comp.instructions.iter().enumerate().all(|(i, x)| {
            i == id.index()
                || x.opcode.is_elementwise()
                || matches!(
                    x.opcode,
                    Opcode::Parameter
                        | Opcode::Constant
                        | Opcode::Broadcast
                        | Opcode::Reshape
                        | Opcode::Transpose
                        | Opcode::Slice
                        | Opcode::Convert
                        | Opcode::Copy
                        | Opcode::Iota
                )
        });
        if !simple {
            return Ok(false);
        }
        let in_map = layout_map(&comp.inst(input).shape, &name)?;
        let out_map = self.outputs[0].map.clone();
        let (Some(in_strides), Some(out_strides)) = (super::plain_strides(&in_map), super::plain_strides(&out_map))
        else {
            return Ok(false);
        };
        let dims = in_map.dims().to_vec();
        let mut reduced = vec![false; dims.len()];
        for &d in inst.attr_ints("dimensions").unwrap_or(&[]) {
            match usize::try_from(d).ok().and_then(|d| reduced.get_mut(d)) {
                Some(r) => *r = true,
                None => return Ok(false),
            }
        }
        if dims.contains(&0) || !reduced.iter().zip(&dims).any(|(&r, &n)| r && n > 1) {
            return Ok(false);
        }
        // The minor dimension: kept, contiguous, and the output's contiguous dimension too.
        let Some(minor) = (0..dims.len()).find(|&d| in_strides[d] == 1 && dims[d] > 1) else { return Ok(false) };
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

        // The grid: chunks of the minor dimension, whole vectors each, at least four when
        // the dimension allows (two per thread on two cores), else two, else one.
        let lanes = i64::from(width_of(acc_ty));
        let fits = |c: i64, n: i64| c % lanes == 0 && extent % c == 0 && extent / c >= n;
        let chunk = [4, 2].iter().find_map(|&n| (0..7).map(|k| MAX_CHUNK >> k).find(|&c| fits(c, n))).unwrap_or(extent);
        let chunks = extent / chunk;
        let scratch_len = out_map.physical_element_count();
        let scratch = self.b.buffer(format!("{name}.acc"), MemType::Scalar(acc_ty), scratch_len, true);
        let out_buf = self.outputs[0].buf;
        let f = self.fused_frame();
        let init_v = self.elem(&f, init, &[])?;
        let init_v =
            if how == Accumulate::F64Sum { self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, init_v) } else { init_v };
        let base = if chunks > 1 {
            self.grid_extent = chunks;
            let g = self.b.grid_var();
            self.bounds.set_var(g, 0, chunks - 1);
            index::scale(&index::var(g), chunk)
        } else {
            index::constant(0)
        };

        // Loops over the kept dimensions other than the minor one, in physical order.
        let by_stride = |ds: Vec<usize>| {
            let mut ds = ds;
            ds.sort_by_key(|&d| std::cmp::Reverse(in_strides[d]));
            ds
        };
        let mut full = vec![index::constant(0); dims.len()];
        let mut opened = 0;
        for d in by_stride(kept.iter().copied().filter(|&d| d != minor && dims[d] > 1).collect()) {
            full[d] = index::var(self.open_loop(0, dims[d]));
            opened += 1;
        }
        let width = nest::vector_width(acc_ty.bits(), chunk);
        let tail = if chunk % i64::from(width) == 0 { Tail::None } else { Tail::Peel };
        let out_at = |em: &mut Emitter<'m>, full: &[IndexExpr], map: &LayoutMap| {
            let idx: Vec<IndexExpr> = kept.iter().map(|&d| full[d].clone()).collect();
            em.layout_offset(map, &idx)
        };

        // Accumulators start at the init value.
        let j = self.open_loop(0, chunk);
        full[minor] = index::add(&base, &index::var(j));
        let at = out_at(self, &full, &out_map);
        self.b.store(scratch, at, init_v);
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
        let acc = self.b.load(scratch, at.clone());
        let x = self.elem(&f, input, &full)?;
        let next = match how {
            Accumulate::F64Sum => {
                let x = self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, x);
                self.b.binary(BinOp::Add, Ty::F64, acc, x)
            }
            Accumulate::F32Sum => self.b.binary(BinOp::Add, Ty::F32, acc, x),
            Accumulate::Reducer => {
                let r = self.call_scalar(reducer, vec![acc, x])?;
                let [v] = r.as_slice() else {
                    return Err(LowerError::invalid(&name, "reducer returns the wrong number of values"));
                };
                *v
            }
        };
        self.b.store(scratch, at, next);
        self.b.end_loop_vectorized(width, tail);
        for _ in 0..rows_opened {
            self.b.end_loop();
        }
        self.forget_since(mark);

        // Results: each accumulator rounded once to the result type.
        let j = self.open_loop(0, chunk);
        full[minor] = index::add(&base, &index::var(j));
        let at = out_at(self, &full, &out_map);
        let mut v = self.b.load(scratch, at.clone());
        v = match how {
            Accumulate::F64Sum => self.b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, v),
            Accumulate::F32Sum => scalar::round(&mut self.b, et, v),
            Accumulate::Reducer => v,
        };
        let m = types::to_mem(&mut self.b, et, v);
        self.b.store(out_buf, at, m);
        self.b.end_loop_vectorized(width, tail);
        for _ in 0..opened {
            self.b.end_loop();
        }
        Ok(true)
    }
}
