//! Lowering one fused HLO computation to one [`Kernel`] (DESIGN.md section 5).
//!
//! The kernel loops over the output in its physical order ([`nest`]) and, at each output
//! element, generates the element's value by walking the fused DAG backwards
//! ([`elemental`]): each op maps the output index to its operands' indices, and parameters
//! load at the composition of those maps with their own layouts, simplified by [`index`].
//! Reductions and dots generate inner loops with accumulators at the element they produce.

mod arg_reduce;
mod coalesce;
pub(crate) mod column_reduce;
mod complex;
mod conv;
pub(crate) mod dot;
mod elemental;
mod fft;
mod gather;
pub mod half;
mod hoist;
pub mod index;
mod linalg;
pub mod math;
pub mod math_ir;
pub mod minifloat;
mod narrow_int;
mod nest;
pub(crate) mod reduce;
pub mod rng;
mod rows;
mod scalar;
mod scatter;
mod select_and_scatter;
mod sort;
mod split;
mod staging;
mod stochastic;
mod transposed;
mod types;
mod update_in_place;
mod window;
pub(crate) mod window_scan;

use std::collections::HashMap;

use tessera_hlo::ir::Payload;
use tessera_hlo::{ArrayShape, Computation, ElementType, InstId, LayoutMap, Module, Opcode, Shape};

use crate::kernel::{BufId, CmpOp, Const, IndexExpr, Kernel, KernelBuilder, MemType, Op, Tail, ValueId};
use crate::LowerError;
use column_reduce::ColumnResult;
use index::Bounds;
use nest::Digit;
pub(crate) use reduce::has_lane_form;
pub(crate) use sort::is_topk_custom_call;
pub use update_in_place::{emit_in_place_kernel, in_place_operand};

/// Lowers one fused computation to a kernel. `comp`'s parameters become the kernel's input
/// buffers 0..n (in parameter-number order, read-only) and its root's value is written to
/// buffer n (a tuple root of k arrays: buffers n..n+k). Every shape carries its layout, the
/// physical truth of the buffer. `comp` may call other computations of `module` (reducers).
///
/// A kernel may declare more buffers after its outputs: private scratch (sorting's merge
/// buffer, for instance), writable, uninitialized when the kernel starts and dead when it
/// ends. The program gives each one a temp buffer of `len` elements of its `mem`.
pub fn emit_kernel(module: &Module, comp: &Computation, name: &str) -> Result<Kernel, LowerError> {
    emit_kernel_with(module, comp, name, false)
}

/// [`emit_kernel`], with the math sequences fusing products into sums when `fma`
/// ([`crate::LowerOptions::fma`]).
pub fn emit_kernel_with(module: &Module, comp: &Computation, name: &str, fma: bool) -> Result<Kernel, LowerError> {
    let mut em = Emitter::new(module, comp, name)?;
    em.b.use_fused_multiply_add(fma);
    em.emit_root()?;
    Ok(em.into_kernel())
}

/// A buffer the kernel reads or writes, with the layout that places its elements.
#[derive(Clone)]
pub(crate) struct ArrayBuf {
    pub buf: BufId,
    pub map: LayoutMap,
    pub mem: MemType,
    pub et: ElementType,
}

/// The computation an element is generated in: the fused computation (parameters are
/// buffers) or an inlined scalar computation such as a reducer (parameters are values).
#[derive(Clone)]
pub(crate) struct Frame<'m> {
    pub comp: &'m Computation,
    pub id: usize,
    pub params: Params<'m>,
}

/// Where a frame's parameters come from.
#[derive(Clone)]
pub(crate) enum Params<'m> {
    /// The kernel's input buffers (the fused computation).
    Buffers,
    /// Scalar values (an inlined reducer).
    Scalars(Vec<ValueId>),
    /// The operands of a `call` in the caller's frame, at the same index.
    Caller(Box<Frame<'m>>, Vec<InstId>),
}

/// One output value of the root: an instruction's element, or one value of a variadic
/// reduce.
#[derive(Clone)]
enum OutVal<'m> {
    Inst(Frame<'m>, InstId),
    ReduceElem(Frame<'m>, InstId, usize),
    WindowElem(Frame<'m>, InstId, usize),
}

pub(crate) struct Emitter<'m> {
    pub module: &'m Module,
    pub comp: &'m Computation,
    pub b: KernelBuilder,
    pub bounds: Bounds,
    pub params: Vec<ArrayBuf>,
    pub outputs: Vec<ArrayBuf>,
    /// Element values already generated in the current scope, by (frame, instruction, index).
    pub cache: HashMap<CacheKey, ValueId>,
    /// The same for instructions with several values (variadic reduces).
    pub multi_cache: HashMap<CacheKey, Vec<ValueId>>,
    /// Frame ids of inlined calls, by (caller frame, call instruction).
    call_frames: HashMap<(usize, InstId), usize>,
    next_frame: usize,
    grid_extent: i64,
    /// Loops opened so far; a loop whose body opened none is innermost.
    loops_opened: usize,
    /// Cache keys in insertion order, so leaving a scope forgets what was generated in it.
    cache_log: Vec<CacheKey>,
    multi_log: Vec<CacheKey>,
    /// The roots the next output nest evaluates, for its row values (`rows`).
    row_roots: Vec<(Frame<'m>, InstId)>,
    /// Element computations generated so far (a guard against exponential inlining).
    pub generated: usize,
    /// The twin frames complex parts are generated in (see [`complex`]).
    parts: complex::PartFrames<'m>,
    /// What the kernel stages in its output ([`staging`]).
    staging: staging::Staging,
    /// The dimension whose block loop the next output nest moves inward ([`transposed`]).
    nest_block: Option<usize>,
}

/// An element of an instruction in a frame: (frame, instruction, logical index).
pub(crate) type CacheKey = (usize, InstId, Vec<IndexExpr>);

/// Where a scope began in the cache logs.
#[derive(Clone, Copy)]
pub(crate) struct Mark(usize, usize);

/// For a transpose or broadcast `inst` read at output dimensions `dims` (per its own
/// dimension), the output dimension each of its operand's dimensions follows, if any.
pub(crate) fn operand_dims(inst: &tessera_hlo::Instruction, dims: &[Option<usize>]) -> Option<Vec<Option<usize>>> {
    use tessera_hlo::ir::AttrList;
    let map = inst.attr_ints("dimensions")?;
    let at = |d: i64| usize::try_from(d).ok().and_then(|d| dims.get(d).copied()).flatten();
    match inst.opcode {
        // Operand dimension map[i] is result dimension i.
        Opcode::Transpose => {
            let mut od = vec![None; map.len()];
            for (i, &p) in map.iter().enumerate() {
                if let Some(slot) = usize::try_from(p).ok().and_then(|p| od.get_mut(p)) {
                    *slot = at(i as i64);
                }
            }
            Some(od)
        }
        // Operand dimension i is result dimension map[i].
        Opcode::Broadcast => Some(map.iter().map(|&m| at(m)).collect()),
        _ => None,
    }
}

pub(crate) fn array_shape<'a>(shape: &'a Shape, inst: &str) -> Result<&'a ArrayShape, LowerError> {
    shape.as_array().ok_or_else(|| LowerError::unsupported(inst, format!("a value of shape {shape} here")))
}

pub(crate) fn layout_map(shape: &Shape, inst: &str) -> Result<LayoutMap, LowerError> {
    let a = array_shape(shape, inst)?;
    types::check_supported(a.element_type, inst)?;
    Ok(LayoutMap::new(a)?)
}

impl<'m> Emitter<'m> {
    fn new(module: &'m Module, comp: &'m Computation, name: &str) -> Result<Emitter<'m>, LowerError> {
        let mut b = KernelBuilder::new(name, 1);
        let mut params = Vec::new();
        for (n, id) in comp.parameters().into_iter().enumerate() {
            let inst = comp.inst(id);
            if inst.parameter_number() != Some(n as i64) {
                return Err(LowerError::invalid(&inst.name, format!("parameter numbers are not 0..{n}")));
            }
            params.push(Self::array_buf(&mut b, &inst.shape, &inst.name, false)?);
        }
        let root = comp.root_inst();
        let mut outputs = Vec::new();
        match &root.shape {
            Shape::Tuple(elems) => {
                for (i, s) in elems.iter().enumerate() {
                    outputs.push(Self::array_buf(&mut b, s, &format!("{}.{i}", root.name), true)?);
                }
            }
            s => outputs.push(Self::array_buf(&mut b, s, &root.name, true)?),
        }
        Ok(Emitter {
            module,
            comp,
            b,
            bounds: Bounds::default(),
            params,
            outputs,
            cache: HashMap::new(),
            multi_cache: HashMap::new(),
            call_frames: HashMap::new(),
            next_frame: 1,
            grid_extent: 1,
            loops_opened: 0,
            generated: 0,
            cache_log: Vec::new(),
            multi_log: Vec::new(),
            row_roots: Vec::new(),
            parts: complex::PartFrames::default(),
            staging: staging::Staging::default(),
            nest_block: None,
        })
    }

    fn array_buf(b: &mut KernelBuilder, shape: &Shape, name: &str, writable: bool) -> Result<ArrayBuf, LowerError> {
        let map = layout_map(shape, name)?;
        let mem = types::mem_type(&map, name)?;
        let len = map.physical_element_count() * types::slots(map.element_type());
        let buf = b.buffer(name, mem, len, writable);
        Ok(ArrayBuf { buf, et: map.element_type(), map, mem })
    }

    /// The kernel emitted so far, with its grid and the loop splitting, coalescing and
    /// hoisting every kernel gets.
    pub(crate) fn into_kernel(self) -> Kernel {
        let grid = self.grid_extent;
        let mut kernel = self.b.finish();
        kernel.grid.extent = grid;
        split::split_loops(&mut kernel);
        coalesce::coalesce(&mut kernel);
        hoist::hoist(&mut kernel);
        hoist::share_indices(&mut kernel);
        hoist::pool_constants(&mut kernel);
        kernel
    }

    pub(crate) fn fused_frame(&self) -> Frame<'m> {
        Frame { comp: self.comp, id: 0, params: Params::Buffers }
    }

    /// A frame of `comp` whose parameters are scalar registers: in parameter order, one per
    /// real parameter and two (real, imaginary) per complex one (see [`scalar_offset`]).
    pub(crate) fn new_frame(&mut self, comp: &'m Computation, scalars: Vec<ValueId>) -> Frame<'m> {
        self.next_frame += 1;
        Frame { comp, id: self.next_frame, params: Params::Scalars(scalars) }
    }

    /// The frame of the computation `call` instruction `id` of frame `f` calls; one per call
    /// site, so its elements are cached across uses.
    pub(crate) fn call_frame(&mut self, f: &Frame<'m>, id: InstId) -> Result<Frame<'m>, LowerError> {
        let inst = f.comp.inst(id);
        let callee = inst.called("to_apply").ok_or_else(|| LowerError::invalid(&inst.name, "call without to_apply"))?;
        let module = self.module;
        let comp = module.get(callee).ok_or_else(|| LowerError::invalid(&inst.name, "called computation missing"))?;
        let next = self.next_frame + 1;
        let fid = *self.call_frames.entry((f.id, id)).or_insert(next);
        if fid == next {
            self.next_frame = next;
        }
        Ok(Frame { comp, id: fid, params: Params::Caller(Box::new(f.clone()), inst.operands.clone()) })
    }

    /// The root's output values, looking through a root `call` and into tuple roots.
    fn out_values(&mut self) -> Result<Vec<OutVal<'m>>, LowerError> {
        let mut frame = self.fused_frame();
        let mut id = self.comp.root;
        while frame.comp.inst(id).opcode == Opcode::Call {
            frame = self.call_frame(&frame, id)?;
            id = frame.comp.root;
        }
        let inst = frame.comp.inst(id);
        Ok(match (&inst.shape, inst.opcode) {
            (Shape::Tuple(_), Opcode::Tuple) => inst.operands.iter().map(|&o| OutVal::Inst(frame.clone(), o)).collect(),
            (Shape::Tuple(s), Opcode::Reduce) => {
                (0..s.len()).map(|i| OutVal::ReduceElem(frame.clone(), id, i)).collect()
            }
            (Shape::Tuple(s), Opcode::ReduceWindow) => {
                (0..s.len()).map(|i| OutVal::WindowElem(frame.clone(), id, i)).collect()
            }
            (Shape::Tuple(_), op) => {
                return Err(LowerError::unsupported(&inst.name, format!("a tuple-shaped {op} root")));
            }
            _ => vec![OutVal::Inst(frame, id)],
        })
    }

    fn emit_root(&mut self) -> Result<(), LowerError> {
        // Ops whose kernels are not one value per output element.
        match self.comp.root_inst().opcode {
            Opcode::RngBitGenerator => return self.emit_bit_generator(self.comp.root),
            Opcode::Rng => return self.emit_rng(self.comp.root).map(|_| ()),
            Opcode::Sort => return self.emit_sort(),
            Opcode::TopK => return self.emit_topk(),
            Opcode::Scatter => return self.emit_scatter(),
            Opcode::Cholesky => return self.emit_cholesky(),
            Opcode::TriangularSolve => return self.emit_triangular_solve(),
            Opcode::CustomCall if sort::is_topk_custom_call(self.comp.root_inst()) => {
                return self.emit_topk_custom_call()
            }
            _ => {}
        }
        let values = self.out_values()?;
        if values.len() != self.outputs.len() {
            return Err(LowerError::invalid(&self.comp.root_inst().name, "the root's outputs do not match its shape"));
        }
        if let [OutVal::Inst(f, id)] = values.as_slice() {
            let plain = !self.outputs[0].et.is_complex() && !matches!(self.outputs[0].mem, MemType::Packed { .. });
            if f.id == 0 && *id == self.comp.root && plain {
                self.staging.staged = staging::candidates(self.comp);
            }
            if f.id == 0 && self.comp.inst(*id).opcode == Opcode::Dot && self.try_gemm(*id)? {
                return Ok(());
            }
            if f.id == 0 && self.try_window_scan(*id)? {
                return Ok(());
            }
            if f.id == 0 && self.comp.inst(*id).opcode == Opcode::Fft {
                return self.emit_fft(*id);
            }
            if f.id == 0 && self.comp.inst(*id).opcode == Opcode::SelectAndScatter {
                return self.emit_select_and_scatter(*id);
            }
            if f.id == 0 && self.try_conv_call(*id)? {
                return Ok(());
            }
            if f.id == 0
                && self.comp.inst(*id).opcode == Opcode::Reduce
                && self.try_column_reduce(&[ColumnResult::Reduce(*id, 0)])?
            {
                return Ok(());
            }
            // One output of a variadic reduce (`passes::narrow_reduce_fusions`).
            let inst = self.comp.inst(*id);
            let of = inst.operands.first().map(|&o| (o, self.comp.inst(o).opcode));
            if let (true, Opcode::GetTupleElement, Some((reduce, Opcode::Reduce)), Some(Ok(i))) =
                (f.id == 0, inst.opcode, of, tessera_hlo::ir::AttrList::attr_int(inst, "index").map(usize::try_from))
            {
                if self.try_column_reduce(&[ColumnResult::Reduce(reduce, i)])? {
                    return Ok(());
                }
            }
        }
        // Sibling reductions multi-output fusion merged (with the values of producers merged
        // into them), or a variadic reduce's outputs: one sweep when they are columns.
        let columns: Vec<ColumnResult> = values
            .iter()
            .filter_map(|v| match v {
                OutVal::Inst(f, id) if f.id == 0 && self.comp.inst(*id).opcode == Opcode::Reduce => {
                    Some(ColumnResult::Reduce(*id, 0))
                }
                OutVal::Inst(f, id) if f.id == 0 => Some(ColumnResult::Value(*id)),
                OutVal::ReduceElem(f, id, i) if f.id == 0 => Some(ColumnResult::Reduce(*id, *i)),
                _ => None,
            })
            .collect();
        if values.len() > 1 && columns.len() == values.len() && self.try_column_reduce(&columns)? {
            return Ok(());
        }
        let same = self.outputs.iter().all(|o| o.map == self.outputs[0].map);
        let packed = self.outputs.iter().any(|o| matches!(o.mem, MemType::Packed { .. }));
        let groups: Vec<Vec<usize>> =
            if same { vec![(0..values.len()).collect()] } else { (0..values.len()).map(|i| vec![i]).collect() };
        let use_grid = groups.len() == 1 && !packed;
        self.staging.grid_allowed = use_grid;
        for group in groups {
            let map = self.outputs[group[0]].map.clone();
            let roots: Vec<InstId> = group
                .iter()
                .filter_map(|&o| match &values[o] {
                    OutVal::Inst(f, id) if f.id == 0 => Some(*id),
                    _ => None,
                })
                .collect();
            let mut splits = self.splits(&roots, &map);
            if use_grid {
                nest::strip_mine(&map, &mut splits);
            }
            let bits = self.outputs[group[0]].mem.bits();
            self.nest_block = self.transposed_read(&roots, &map, bits, &mut splits);
            self.row_roots = group
                .iter()
                .filter_map(|&o| match &values[o] {
                    OutVal::Inst(f, id) | OutVal::ReduceElem(f, id, _) => Some((f.clone(), *id)),
                    OutVal::WindowElem(..) => None,
                })
                .collect();
            let vals = values.clone();
            let mut body = move |em: &mut Emitter<'m>, idx: &[IndexExpr], addr: &IndexExpr| {
                for &o in &group {
                    let v = match &vals[o] {
                        OutVal::Inst(f, id) if em.outputs[o].et.is_complex() => {
                            em.store_complex(f, *id, idx, o, addr)?;
                            continue;
                        }
                        OutVal::Inst(f, id) => em.elem(f, *id, idx)?,
                        OutVal::ReduceElem(f, id, i) => em.reduce_values(f, *id, idx)?[*i],
                        OutVal::WindowElem(f, id, i) => em.reduce_window_values(f, *id, idx)?[*i],
                    };
                    let et = em.outputs[o].et;
                    let m = types::to_mem(&mut em.b, et, v);
                    let buf = em.outputs[o].buf;
                    em.b.store(buf, addr.clone(), m);
                }
                Ok(())
            };
            self.emit_nest(&map, &splits, use_grid, bits, &mut body)?;
        }
        Ok(())
    }

    /// For a two-operand op whose operands are both kernel parameters of its own f32 or f64
    /// element type (what the runtime's GEMM and convolution take): whether that type is f32,
    /// and the operands' parameter indices.
    pub(crate) fn float_parameter_operands(&self, id: InstId) -> Option<(bool, usize, usize)> {
        let inst = self.comp.inst(id);
        let [l, r] = inst.operands.as_slice() else { return None };
        let et = inst.shape.as_array()?.element_type;
        if !matches!(et, ElementType::F32 | ElementType::F64) {
            return None;
        }
        let param = |o: InstId| {
            let op = self.comp.inst(o);
            let n = usize::try_from(op.parameter_number()?).ok()?;
            (op.opcode == Opcode::Parameter && op.shape.as_array()?.element_type == et && n < self.params.len())
                .then_some(n)
        };
        Some((et == ElementType::F32, param(*l)?, param(*r)?))
    }

    /// Tile boundaries of the parameters the outputs read through index-preserving maps, per
    /// output dimension, so the nest can loop over their tiles.
    fn splits(&self, roots: &[InstId], map: &LayoutMap) -> Vec<Vec<i64>> {
        let rank = map.dims().len();
        let mut out = vec![Vec::new(); rank];
        let mut seen = std::collections::HashSet::new();
        for &r in roots {
            let dims: Vec<Option<usize>> = (0..rank).map(Some).collect();
            self.collect_splits(r, &dims, &mut out, &mut seen);
        }
        for l in &mut out {
            l.sort_unstable();
            l.dedup();
        }
        out
    }

    /// `dims[i]` is the output dimension operand dimension `i` of `id` follows, if any.
    fn collect_splits(
        &self,
        id: InstId,
        dims: &[Option<usize>],
        out: &mut [Vec<i64>],
        seen: &mut std::collections::HashSet<(InstId, Vec<Option<usize>>)>,
    ) {
        if !seen.insert((id, dims.to_vec())) {
            return;
        }
        let inst = self.comp.inst(id);
        match inst.opcode {
            Opcode::Parameter => {
                let Ok(map) = layout_map(&inst.shape, &inst.name) else { return };
                for (d, ws) in nest::boundaries(&map).into_iter().enumerate() {
                    if let Some(Some(o)) = dims.get(d) {
                        out[*o].extend(ws);
                    }
                }
            }
            Opcode::Transpose | Opcode::Broadcast => {
                let Some(od) = operand_dims(inst, dims) else { return };
                self.collect_splits(inst.operands[0], &od, out, seen);
            }
            op if op.is_elementwise() || op == Opcode::Copy => {
                for &o in &inst.operands {
                    if self.comp.inst(o).shape.rank() == dims.len() {
                        self.collect_splits(o, dims, out, seen);
                    }
                }
            }
            _ => {}
        }
    }

    /// Emits the loops visiting every logical index of `map` once, in its physical order,
    /// calling `body` with the logical index and the physical address at each.
    pub(crate) fn emit_nest(
        &mut self,
        map: &LayoutMap,
        splits: &[Vec<i64>],
        use_grid: bool,
        bits: u32,
        body: &mut NestBody<'_, 'm>,
    ) -> Result<(), LowerError> {
        let dims = map.dims().to_vec();
        // Taken, so that a nest emitted inside this one's body does not see them.
        let rows = std::mem::take(&mut self.row_roots);
        if dims.contains(&0) {
            return Ok(());
        }
        let block = self.nest_block.take();
        match nest::plan(map, splits) {
            Some(mut digits) => {
                if let Some(p) = block {
                    nest::block_transposed(&mut digits, p);
                }
                let mut limits: Vec<Option<i64>> = dims.iter().map(|&n| Some(n)).collect();
                let mut vals = Vec::new();
                let ctx = NestCtx { digits: &digits, rank: dims.len(), bits, rows: &rows };
                self.digit_loops(&ctx, 0, &mut limits, &mut vals, use_grid, body)
            }
            None => {
                // Combined (`*`) layouts: loop over logical indices and let the layout
                // expressions (with their div/mod) place each element.
                let digits: Vec<Digit> =
                    dims.iter().enumerate().map(|(d, &n)| Digit { dim: d, weight: 1, extent: n, coef: 0 }).collect();
                let mut limits = vec![None; dims.len()];
                let mut vals = Vec::new();
                let ctx = NestCtx { digits: &digits, rank: dims.len(), bits: 0, rows: &rows };
                let map = map.clone();
                let mut wrapped = |em: &mut Emitter<'m>, idx: &[IndexExpr], _: &IndexExpr| {
                    let addr = em.layout_offset(&map, idx);
                    body(em, idx, &addr)
                };
                self.digit_loops(&ctx, 0, &mut limits, &mut vals, use_grid, &mut wrapped)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn digit_loops(
        &mut self,
        ctx: &NestCtx<'_, 'm>,
        k: usize,
        limits: &mut Vec<Option<i64>>,
        vals: &mut Vec<IndexExpr>,
        grid_free: bool,
        body: &mut NestBody<'_, 'm>,
    ) -> Result<(), LowerError> {
        if !ctx.rows.is_empty() && k > 0 && k < ctx.digits.len() {
            self.evaluate_rows_before(ctx, k, vals)?;
        }
        let Some(g) = ctx.digits.get(k) else {
            let idx = nest::logical_index(ctx.digits, vals, ctx.rank);
            let addr = nest::address(ctx.digits, vals);
            return body(self, &idx, &addr);
        };
        let saved = limits[g.dim];
        let (full, partial) = match saved {
            Some(l) if l < g.weight.saturating_mul(g.extent) => (l / g.weight, Some(l % g.weight).filter(|&r| r > 0)),
            _ => (g.extent, None),
        };
        let count = full + i64::from(partial.is_some());
        let result = if grid_free && count > 1 {
            self.grid_extent = count;
            let gv = self.b.grid_var();
            let in_grid = std::mem::replace(&mut self.staging.in_grid, true);
            let mark = self.mark();
            let r = match partial {
                // The last grid index also runs the peeled partial nest, so every index in
                // the full nest stays provably inside the buffers with the grid's bounds.
                Some(r) if full > 0 => {
                    self.grid_extent = full;
                    self.bounds.set_var(gv, 0, full - 1);
                    limits[g.dim] = None;
                    vals.push(index::var(gv));
                    let r1 = self.digit_loops(ctx, k + 1, limits, vals, false, body);
                    vals.pop();
                    self.forget_since(mark);
                    let gi = self.b.let_(Op::Index(index::var(gv)));
                    let last = self.b.constant(Const::Int { ty: crate::kernel::Ty::I64, bits: full - 1 });
                    let cond = self.b.cmp(CmpOp::Eq, crate::kernel::Ty::I64, gi, last);
                    self.b.begin_if(cond);
                    limits[g.dim] = Some(r);
                    vals.push(index::constant(full));
                    let r2 = self.digit_loops(ctx, k + 1, limits, vals, false, body);
                    vals.pop();
                    self.b.end_if();
                    self.forget_since(mark);
                    r1.and(r2)
                }
                // (A partial digit with no full part has one value: never the grid.)
                _ => {
                    self.bounds.set_var(gv, 0, full - 1);
                    limits[g.dim] = None;
                    vals.push(index::var(gv));
                    let r = self.digit_loops(ctx, k + 1, limits, vals, false, body);
                    vals.pop();
                    r
                }
            };
            self.staging.in_grid = in_grid;
            r
        } else {
            let mut r = Ok(());
            let grid_free = grid_free && count <= 1;
            if full == 1 {
                limits[g.dim] = None;
                vals.push(index::constant(0));
                r = self.digit_loops(ctx, k + 1, limits, vals, grid_free, body);
                vals.pop();
            } else if full > 1 {
                let mark = self.mark();
                let before = self.loops_opened;
                let v = self.open_loop(0, full);
                limits[g.dim] = None;
                vals.push(index::var(v));
                r = self.digit_loops(ctx, k + 1, limits, vals, grid_free, body);
                vals.pop();
                let innermost = self.loops_opened == before + 1;
                let width = if innermost && g.coef == 1 { nest::vector_width(ctx.bits, full) } else { 1 };
                let tail = if width > 1 && full % i64::from(width) != 0 { Tail::Peel } else { Tail::None };
                self.b.end_loop_vectorized(width, tail);
                self.forget_since(mark);
            }
            if let (Some(rem), Ok(())) = (partial, &r) {
                limits[g.dim] = Some(rem);
                vals.push(index::constant(full));
                r = self.digit_loops(ctx, k + 1, limits, vals, grid_free, body);
                vals.pop();
            }
            r
        };
        limits[g.dim] = saved;
        result
    }

    /// Before the loop of digit `k`: when digit `k - 1` completed a dimension, evaluates the
    /// row values of the nest's roots that the dimensions completed so far fix (`rows`).
    fn evaluate_rows_before(&mut self, ctx: &NestCtx<'_, 'm>, k: usize, vals: &[IndexExpr]) -> Result<(), LowerError> {
        let completed = ctx.digits[k - 1].dim;
        if ctx.digits[k..].iter().any(|g| g.dim == completed) {
            return Ok(());
        }
        let known: Vec<bool> = (0..ctx.rank).map(|d| ctx.digits[k..].iter().all(|g| g.dim != d)).collect();
        let idx = nest::logical_index(&ctx.digits[..k], vals, ctx.rank);
        let evaluating = std::mem::replace(&mut self.staging.evaluating_rows, true);
        let result = ctx.rows.iter().try_for_each(|(f, root)| self.evaluate_row_values(f, *root, &idx, &known));
        self.staging.evaluating_rows = evaluating;
        result
    }

    /// Loops over `digits` (of an array with logical bounds `limits`) on the current grid
    /// index, calling `body` at each logical index: the inner loops of reductions.
    pub(crate) fn reduce_loops(
        &mut self,
        digits: &[Digit],
        mut limits: Vec<Option<i64>>,
        body: &mut NestBody<'_, 'm>,
    ) -> Result<(), LowerError> {
        let ctx = NestCtx { digits, rank: limits.len(), bits: 0, rows: &[] };
        let mut vals = Vec::new();
        self.digit_loops(&ctx, 0, &mut limits, &mut vals, false, body)
    }

    /// The start of a scope (a loop body or branch): values generated after it are not
    /// visible once the scope is closed.
    pub(crate) fn mark(&self) -> Mark {
        Mark(self.cache_log.len(), self.multi_log.len())
    }

    /// Forgets the cached elements generated since `m` (their values went out of scope).
    pub(crate) fn forget_since(&mut self, m: Mark) {
        self.staging_forget(m);
        for k in self.cache_log.drain(m.0..) {
            self.cache.remove(&k);
        }
        for k in self.multi_log.drain(m.1..) {
            self.multi_cache.remove(&k);
        }
    }

    /// Opens a loop over `start..end` whose variable's bounds the simplifier knows.
    pub(crate) fn open_loop(&mut self, start: i64, end: i64) -> crate::kernel::VarId {
        self.loops_opened += 1;
        let v = self.b.begin_loop(start, end);
        self.bounds.set_var(v, start, end - 1);
        v
    }

    /// The physical address of logical index `idx` in an array laid out by `map`.
    pub(crate) fn layout_offset(&mut self, map: &LayoutMap, idx: &[IndexExpr]) -> IndexExpr {
        let mut parts = Vec::new();
        for p in map.physical_dims() {
            let e = self.layout_expr(&p.index, idx);
            parts.push((e, p.stride));
        }
        index::linear(&parts)
    }

    fn layout_expr(&mut self, e: &tessera_hlo::IndexExpr, idx: &[IndexExpr]) -> IndexExpr {
        use tessera_hlo::IndexExpr as L;
        match e {
            L::Zero => index::constant(0),
            L::Logical(d) => idx.get(*d).cloned().unwrap_or_default(),
            L::Combine { major, minor, minor_extent } => {
                let a = self.layout_expr(major, idx);
                let b = self.layout_expr(minor, idx);
                index::add(&index::scale(&a, *minor_extent), &b)
            }
            L::Div(x, t) => {
                let x = self.layout_expr(x, idx);
                self.idiv(&x, *t)
            }
            L::Mod(x, t) => {
                let x = self.layout_expr(x, idx);
                self.irem(&x, *t)
            }
        }
    }

    /// Replaces each div/mod term of an index value by an index value of its own, so the
    /// expression is affine and the quotient is computed once where the value is (the
    /// hoisting pass then moves it out of the loops it does not depend on).
    fn settle_value_terms(&mut self, mut e: IndexExpr) -> IndexExpr {
        for t in &mut e.terms {
            if matches!(t.src, crate::kernel::IndexSrc::Value(_)) && (t.div != 1 || t.modulo.is_some()) {
                let unit = crate::kernel::Term { scale: 1, ..*t };
                let (lo, hi) = self.bounds.term_range(&unit);
                let w = self.b.let_(Op::Index(IndexExpr { terms: vec![unit], offset: 0 }));
                self.bounds.set_value(w, lo, hi);
                *t = crate::kernel::Term {
                    src: crate::kernel::IndexSrc::Value(w),
                    div: 1,
                    modulo: None,
                    scale: t.scale,
                };
            }
        }
        e
    }

    /// Row `row` (counted row-major over every dimension of `dims` but `along`) as a logical
    /// index; the entry of `along` is left for the caller to fill in per element.
    pub(crate) fn row_position(&mut self, dims: &[i64], along: usize, row: &IndexExpr) -> Vec<IndexExpr> {
        let mut at = vec![IndexExpr::default(); dims.len()];
        let mut stride = 1i64;
        for dim in (0..dims.len()).rev().filter(|&i| i != along) {
            let q = self.idiv(row, stride);
            at[dim] = self.irem(&q, dims[dim]);
            stride = stride.saturating_mul(dims[dim]);
        }
        at
    }

    pub(crate) fn idiv(&mut self, e: &IndexExpr, d: i64) -> IndexExpr {
        let mut made = Vec::new();
        let Emitter { b, bounds, .. } = self;
        let r = index::div(e, d, bounds, &mut |x: &IndexExpr| {
            let v = b.let_(Op::Index(x.clone()));
            made.push((v, bounds.range(x)));
            v
        });
        for (v, (lo, hi)) in made {
            self.bounds.set_value(v, lo.max(0), hi.max(0));
        }
        self.settle_value_terms(r)
    }

    pub(crate) fn irem(&mut self, e: &IndexExpr, m: i64) -> IndexExpr {
        let mut made = Vec::new();
        let Emitter { b, bounds, .. } = self;
        let r = index::rem(e, m, bounds, &mut |x: &IndexExpr| {
            let v = b.let_(Op::Index(x.clone()));
            made.push((v, bounds.range(x)));
            v
        });
        for (v, (lo, hi)) in made {
            self.bounds.set_value(v, lo.max(0), hi.max(0));
        }
        self.settle_value_terms(r)
    }

    /// The literal of a constant instruction as one register value, when it has one value.
    pub(crate) fn splat_constant(&mut self, frame: &Frame<'m>, id: InstId) -> Result<ValueId, LowerError> {
        let inst = frame.comp.inst(id);
        let Payload::Constant(lit) = &inst.payload else {
            return Err(LowerError::invalid(&inst.name, "constant without a value"));
        };
        let et = lit.element_type();
        let ty = types::reg(et, &inst.name)?;
        let n = lit.element_count();
        let first = lit.get_bits(0).unwrap_or(0);
        if (1..n).any(|i| lit.get_bits(i) != Some(first)) {
            return Err(LowerError::unsupported(
                &inst.name,
                "an array constant inside a fused computation (fusion passes them as parameters)",
            ));
        }
        let c = match et {
            ElementType::Pred => Const::Pred(first != 0),
            ElementType::F16 => Const::F32(half::f16_bits_value(first as u16).to_bits()),
            ElementType::BF16 => Const::F32(half::bf16_bits_value(first as u16).to_bits()),
            ElementType::F32 => Const::F32(first as u32),
            ElementType::F64 => Const::F64(first as u64),
            t if types::is_minifloat(t) => Const::F64(minifloat::bits_value(t, first as u64).to_bits()),
            // Unsigned sub-byte values live zero-extended in their I8 registers.
            t if t.is_unsigned_integral() && t.bit_width() < 8 => Const::Int { ty, bits: first as i64 },
            _ => {
                let w = et.bit_width();
                let bits = if w >= 64 { first as u64 as i64 } else { ((first as u64) << (64 - w)) as i64 >> (64 - w) };
                Const::Int { ty, bits }
            }
        };
        Ok(self.b.constant(c))
    }
}

/// What a nest runs at each logical index: given the index and the output address.
pub(crate) type NestBody<'a, 'm> = dyn FnMut(&mut Emitter<'m>, &[IndexExpr], &IndexExpr) -> Result<(), LowerError> + 'a;

struct NestCtx<'a, 'm> {
    digits: &'a [Digit],
    rank: usize,
    bits: u32,
    /// The expressions whose row values the nest evaluates before each loop over a new
    /// dimension (empty for reduction loops).
    rows: &'a [(Frame<'m>, InstId)],
}

/// Where parameter `n`'s register(s) start among a scalar frame's values: complex parameters
/// take two, every other one.
pub(crate) fn scalar_offset(comp: &Computation, n: usize) -> usize {
    comp.parameters()
        .iter()
        .filter_map(|&p| {
            let inst = comp.inst(p);
            let k = usize::try_from(inst.parameter_number()?).ok()?;
            let complex = inst.shape.as_array().is_some_and(|a| a.element_type.is_complex());
            (k < n).then_some(if complex { 2 } else { 1 })
        })
        .sum()
}

/// Element strides of each logical dimension of an untiled, unpadded layout.
pub(crate) fn plain_strides(map: &tessera_hlo::LayoutMap) -> Option<Vec<i64>> {
    if map.physical_element_count() != map.element_count() {
        return None;
    }
    let mut strides = vec![0i64; map.dims().len()];
    for p in map.physical_dims() {
        match p.index {
            tessera_hlo::IndexExpr::Logical(d) => strides[d] = p.stride,
            tessera_hlo::IndexExpr::Zero => {}
            _ => return None,
        }
    }
    Some(strides)
}
