//! Column reductions: a reduce whose input keeps its contiguous (minor) dimension and sums
//! over dimensions major to it (the per-channel sums of an NHWC batch norm, a bias gradient).
//! Element at a time, each output walks its column with the minor dimension's stride, a cache
//! line per element. This form keeps one accumulator per output element in scratch and sweeps
//! the input row by row: a vector loop along the kept minor dimension updates a chunk of
//! accumulators per row. Each accumulator sees its column's elements in the same order as
//! the element-at-a-time form (reduced dimensions major to minor) and, but for f32 sums, in
//! the same type (f16/bf16 sums in f32, other reducers in their own), so those give its bits;
//! only the loop order changes. Any real element type takes this form: a predicate's
//! accumulator (a `jnp.all` over rows) is a byte in scratch; jnp.all over the rows of an
//! f32[4096,4096] had walked its columns in 61 ms, where XLA:CPU takes 16.
//! f32 sums, which that form adds in f64, add in f64 here too when
//! they have more than [`MAX_F32_RUN`] elements per output, and in f32 when they have at most
//! that many.
//! The grid runs over the major-most other kept dimension when there is one and a
//! chunk can span the minor dimension (the blocks of rows `tree_reduction` makes of a tall
//! column reduction: each grid index reads whole rows), else over chunks of the minor
//! dimension; either way threads own disjoint accumulators, and every chunk is whole cache
//! lines of the input's rows when it can be.
//!
//! Sibling reductions that multi-output fusion merged (a tuple of such reduces, of one input
//! shape over the same dimensions, accumulated alike) share the sweep: each element of the
//! row loop updates every reduce's accumulator, and the elements their inputs share are
//! computed and loaded once. A variadic reduce (an argmax over a column: values and
//! positions) keeps an accumulator per input and updates them together by its reducer, in the
//! element-at-a-time form's order, so it gives that form's bits whatever the reducer; it may
//! store all its outputs or one (`passes::narrow_reduce_fusions`).

use tessera_hlo::ir::AttrList;
use tessera_hlo::{CompId, ElementType, InstId, LayoutMap, Opcode};

use super::reduce::{is_plain_add, reduction_parts};
use super::{index, layout_map, nest, scalar, types, Emitter};
use crate::kernel::{BinOp, CastOp, IndexExpr, MemType, Tail, Ty};
use crate::LowerError;

/// How a column reduction's accumulators add up (as `Emitter::reduce_values` does).
#[derive(Clone, Copy, PartialEq)]
enum Accumulate {
    /// f32 plain sums of more than [`MAX_F32_RUN`] elements, in f64.
    F64Sum,
    /// f16/bf16 plain sums, and f32 ones of at most [`MAX_F32_RUN`] elements, in f32.
    F32Sum,
    /// Any other reducer, in the result's register type.
    Reducer,
}

/// The most elements an f32 column sum adds in f32 (its output's accumulator, element by
/// element); longer sums add in f64. A row reduction's lanes each add up to a 16th of a row in
/// f32; a column sum's blocks (`tree_reduction`'s partials of 16 or more rows, then the sum of
/// the partials) are mostly this short. f64 accumulators take half the lanes and a conversion
/// per element, and on Cranelift two f32 lanes per iteration: the two sweeps of a `jnp.var`
/// over the rows of an f32[4096,1024] took 3.5-4 ms there, 2.2 ms in f32 (XLA:CPU 2.3-2.4).
pub(crate) const MAX_F32_RUN: i64 = 1024;

/// Whether a plain sum (`plain_add`) of `input` over `dims` accumulates in f64: an f32 one
/// adding more than [`MAX_F32_RUN`] elements per output. Multi-output fusion asks it too, since
/// what computes beside f64 accumulators must fit their lane count.
pub(crate) fn sums_in_f64(input: &tessera_hlo::Shape, dims: &[i64], plain_add: bool) -> bool {
    let Some(array) = input.as_array() else { return false };
    let run: i64 = dims.iter().filter_map(|&d| usize::try_from(d).ok().and_then(|d| array.dims.get(d))).product();
    plain_add && array.element_type == ElementType::F32 && run > MAX_F32_RUN
}

/// How a column reduction of element type `et` by a reducer that is a plain add or not
/// (`plain_add`) over `dims` of `input` accumulates.
fn accumulation(et: ElementType, input: &tessera_hlo::Shape, dims: &[i64], plain_add: bool) -> Accumulate {
    use ElementType as E;
    match et {
        E::F32 if sums_in_f64(input, dims, plain_add) => Accumulate::F64Sum,
        E::F32 | E::F16 | E::BF16 if plain_add => Accumulate::F32Sum,
        _ => Accumulate::Reducer,
    }
}

/// The register type of an accumulator of element type `et` that adds up `how`; `None` for a
/// type no kernel holds.
fn accumulator_of(how: Accumulate, et: ElementType) -> Option<Ty> {
    match how {
        Accumulate::F64Sum => Some(Ty::F64),
        Accumulate::F32Sum => Some(Ty::F32),
        Accumulate::Reducer => types::reg_ty(et),
    }
}

/// The register type of a column reduction's accumulators (the first result's, element type
/// `et`; `accumulation`'s other arguments as there). Reductions whose accumulators have one
/// type share a sweep, whatever their reducers: a sum and a maximum of one f32 input both
/// accumulate in f32 lanes.
pub(crate) fn accumulator_type(
    et: ElementType,
    input: &tessera_hlo::Shape,
    dims: &[i64],
    plain_add: bool,
) -> Option<Ty> {
    accumulator_of(accumulation(et, input, dims, plain_add), et)
}

/// The most elements of the minor dimension one grid index takes.
const MAX_CHUNK: i64 = 512;

/// The most accumulator bytes a grid index over whole rows keeps (an L1's worth): the blocks
/// `tree_reduction` makes of a wide column reduction's rows sweep rows this long whole.
const MAX_ROW_ACC_BYTES: i64 = 32 << 10;

/// The fewest indices a grid over whole rows needs when its rows pass [`MAX_CHUNK`]: fewer
/// would leave threads idle where chunks of the rows would not.
const MIN_ROW_GRID: i64 = 8;

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

/// Whether two arrays (of any element types) have their elements at the same places: the
/// same dimensions and plain strides, so one index expression addresses both.
pub(crate) fn same_places(a: &LayoutMap, b: &LayoutMap) -> bool {
    a.dims() == b.dims() && super::plain_strides(a).is_some_and(|s| super::plain_strides(b) == Some(s))
}

/// One reduce of a column reduction kernel: its inputs and init values, reducer, result types
/// (one per input), how its accumulators add up, and their register types (one per input).
struct ColumnRoot {
    id: InstId,
    inputs: Vec<InstId>,
    inits: Vec<InstId>,
    reducer: CompId,
    ets: Vec<ElementType>,
    how: Accumulate,
    acc_tys: Vec<Ty>,
}

/// One result of a column reduction kernel.
#[derive(Clone, Copy)]
pub(crate) enum ColumnResult {
    /// Output `.1` of reduce `.0`.
    Reduce(InstId, usize),
    /// A value over the reduced input's dimensions, which the sweep computes and stores as it
    /// goes (a producer multi-output fusion merged into the reduction).
    Value(InstId),
}

impl<'m> Emitter<'m> {
    /// Emits the kernel's results `results` (in output order: one reduce, all or one output
    /// of a variadic one, or the sibling reductions multi-output fusion merged, which share
    /// one input shape and reduced dimensions; and values over that input's dimensions) as a
    /// column reduction (module doc): one sweep over the rows updates every reduce's
    /// accumulators and stores every value, so inputs they share are read once. False when
    /// they are not one.
    pub(crate) fn try_column_reduce(&mut self, results: &[ColumnResult]) -> Result<bool, LowerError> {
        let comp = self.comp;
        let reduce_results: Vec<(usize, InstId, usize)> = results
            .iter()
            .enumerate()
            .filter_map(|(k, r)| match *r {
                ColumnResult::Reduce(id, output) => Some((k, id, output)),
                ColumnResult::Value(_) => None,
            })
            .collect();
        let Some(&(first_k, first, _)) = reduce_results.first() else { return Ok(false) };
        let name = comp.inst(first).name.clone();
        let mut ids: Vec<InstId> = reduce_results.iter().map(|r| r.1).collect();
        ids.dedup();
        let mut roots = Vec::with_capacity(ids.len());
        for &id in &ids {
            let inst = comp.inst(id);
            if inst.opcode != Opcode::Reduce {
                return Ok(false);
            }
            let (inputs, inits, reducer) = reduction_parts(inst)?;
            // A variadic reduce takes the sweep alone.
            if inputs.len() > 1 && ids.len() > 1 {
                return Ok(false);
            }
            let ets: Vec<ElementType> = match &inst.shape {
                tessera_hlo::Shape::Tuple(s) => s.iter().map(tessera_hlo::Shape::element_type).collect(),
                s => vec![s.element_type()],
            };
            use ElementType as E;
            let supported = |et: &E| {
                matches!(
                    et,
                    E::F32
                        | E::F64
                        | E::F16
                        | E::BF16
                        | E::Pred
                        | E::S8
                        | E::U8
                        | E::S16
                        | E::U16
                        | E::S32
                        | E::S64
                        | E::U32
                        | E::U64
                )
            };
            if ets.len() != inputs.len() || !ets.iter().all(supported) {
                return Ok(false);
            }
            let plain_add = inputs.len() == 1 && is_plain_add(self.module, reducer);
            let reduced = inst.attr_ints("dimensions").unwrap_or(&[]);
            let how = accumulation(ets[0], &comp.inst(inputs[0]).shape, reduced, plain_add);
            let acc_tys = ets
                .iter()
                .map(|&et| accumulator_of(how, et).map_or_else(|| types::reg(et, &name), Ok))
                .collect::<Result<Vec<Ty>, LowerError>>()?;
            roots.push(ColumnRoot { id, inputs: inputs.to_vec(), inits: inits.to_vec(), reducer, ets, how, acc_tys });
        }
        // The inputs' elements come from elementwise ops and data movement only: nothing that
        // opens loops of its own inside the vector loop.
        let is_root = |i: usize| ids.iter().any(|r| r.index() == i);
        let simple = comp.instructions.iter().enumerate().all(|(i, x)| {
            is_root(i)
                || (results.len() > 1 && i == comp.root.index() && x.opcode == Opcode::Tuple)
                || (i == comp.root.index() && x.opcode == Opcode::GetTupleElement)
                || x.opcode == Opcode::Parameter
                || is_input_op(x.opcode)
        });
        if !simple {
            return Ok(false);
        }
        let in_map = layout_map(&comp.inst(roots[0].inputs[0]).shape, &name)?;
        let Some(out_map) = self.outputs.get(first_k).map(|o| o.map.clone()) else { return Ok(false) };
        let reduced_attr = comp.inst(first).attr_ints("dimensions").unwrap_or(&[]).to_vec();
        for r in &roots {
            // Accumulators of one type share the vector loop's lanes, whatever adds them up.
            let alike = r.ets == roots[0].ets
                && r.acc_tys == roots[0].acc_tys
                && comp.inst(r.id).attr_ints("dimensions").unwrap_or(&[]) == reduced_attr.as_slice();
            for &input in &r.inputs {
                if !same_places(&layout_map(&comp.inst(input).shape, &name)?, &in_map) {
                    return Ok(false);
                }
            }
            if !alike {
                return Ok(false);
            }
        }
        // Reduce results are laid out alike; values have their elements where the input has.
        let places_fit = self.outputs.iter().zip(results).all(|(o, r)| match r {
            ColumnResult::Reduce(..) => same_places(&o.map, &out_map),
            ColumnResult::Value(_) => same_places(&o.map, &in_map),
        });
        if self.outputs.len() != results.len() || !places_fit {
            return Ok(false);
        }
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
        // Each input's accumulator type (alike for every reduce); the widest sets the vector
        // width.
        let acc_tys = &roots[0].acc_tys;
        let acc_ty = acc_tys.iter().copied().max_by_key(|t| t.bits()).unwrap_or(Ty::F32);
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
        // or a wide column reduction's rows into such blocks; rows past MAX_CHUNK need their
        // accumulators to fit L1 and enough blocks for the threads); else chunks of the minor
        // dimension, whole vectors each, at least four when the dimension allows (two per
        // thread on two cores), else two, else one.
        let lanes = i64::from(width_of(acc_ty));
        let fits = |c: i64, n: i64| c % lanes == 0 && extent % c == 0 && extent / c >= n;
        let whole_rows = |d: &usize| {
            extent <= MAX_CHUNK
                || extent * i64::from(acc_ty.bits() / 8) <= MAX_ROW_ACC_BYTES && dims[*d] >= MIN_ROW_GRID
        };
        let grid_outer = outer.first().copied().filter(whole_rows);
        let chunk = if grid_outer.is_some() {
            extent
        } else {
            [4, 2].iter().find_map(|&n| (0..7).map(|k| MAX_CHUNK >> k).find(|&c| fits(c, n))).unwrap_or(extent)
        };
        let chunks = extent / chunk;
        let scratch_len = out_map.physical_element_count();
        let f = self.fused_frame();
        // scratch[r][i] and inits[r][i]: reduce r's accumulator of its input i.
        let mut scratch = Vec::with_capacity(roots.len());
        let mut inits = Vec::with_capacity(roots.len());
        for r in &roots {
            let (mut bufs, mut values) = (Vec::new(), Vec::new());
            for (i, &init) in r.inits.iter().enumerate() {
                let suffix = if r.inits.len() > 1 { format!(".{i}") } else { String::new() };
                let acc_name = format!("{}.acc{suffix}", comp.inst(r.id).name);
                bufs.push(self.b.buffer(acc_name, MemType::holding(acc_tys[i]), scratch_len, true));
                let v = self.elem(&f, init, &[])?;
                values.push(if r.how == Accumulate::F64Sum {
                    self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, v)
                } else {
                    v
                });
            }
            scratch.push(bufs);
            inits.push(values);
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
        // A predicate accumulator is a byte in scratch.
        let width = nest::vector_width(MemType::holding(acc_ty).bits(), chunk);
        let tail = if chunk % i64::from(width) == 0 { Tail::None } else { Tail::Peel };
        let out_at = |em: &mut Emitter<'m>, full: &[IndexExpr], map: &LayoutMap| {
            let idx: Vec<IndexExpr> = kept.iter().map(|&d| full[d].clone()).collect();
            em.layout_offset(map, &idx)
        };

        // Accumulators start at the init values.
        let j = self.open_loop(0, chunk);
        full[minor] = index::add(&base, &index::var(j));
        let at = out_at(self, &full, &out_map);
        for (bufs, values) in scratch.iter().zip(&inits) {
            for (&acc, &v) in bufs.iter().zip(values) {
                self.b.store(acc, at.clone(), v);
            }
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
        for (r, bufs) in roots.iter().zip(&scratch) {
            let accs: Vec<_> = bufs.iter().map(|&buf| self.b.load(buf, at.clone())).collect();
            let xs = r.inputs.iter().map(|&input| self.elem(&f, input, &full)).collect::<Result<Vec<_>, _>>()?;
            let next = match r.how {
                Accumulate::F64Sum => {
                    let x = self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, xs[0]);
                    vec![self.b.binary(BinOp::Add, Ty::F64, accs[0], x)]
                }
                Accumulate::F32Sum => vec![self.b.binary(BinOp::Add, Ty::F32, accs[0], xs[0])],
                Accumulate::Reducer => {
                    let out = self.call_scalar(r.reducer, accs.into_iter().chain(xs).collect())?;
                    if out.len() != bufs.len() {
                        return Err(LowerError::invalid(&name, "reducer returns the wrong number of values"));
                    }
                    out
                }
            };
            for (&buf, v) in bufs.iter().zip(next) {
                self.b.store(buf, at.clone(), v);
            }
        }
        for (k, r) in results.iter().enumerate() {
            let &ColumnResult::Value(id) = r else { continue };
            let v = self.elem(&f, id, &full)?;
            let (buf, et, map) = (self.outputs[k].buf, self.outputs[k].et, self.outputs[k].map.clone());
            let m = types::to_mem(&mut self.b, et, v);
            let addr = self.layout_offset(&map, &full);
            self.b.store(buf, addr, m);
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
        for &(k, id, output) in &reduce_results {
            let r = ids.iter().position(|&x| x == id).ok_or_else(|| LowerError::invalid(&name, "column result"))?;
            let (buf, et) = match (scratch[r].get(output), roots[r].ets.get(output)) {
                (Some(&buf), Some(&et)) => (buf, et),
                _ => return Err(LowerError::invalid(&name, "reduce output out of range")),
            };
            let mut v = self.b.load(buf, at.clone());
            v = match roots[r].how {
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
