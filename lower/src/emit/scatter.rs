//! `scatter` (variadic) as one kernel: copy every input to its output, then walk the scatter
//! positions of the start indices in row-major order and, for each position whose whole
//! update window fits in the operand (XLA skips the others entirely), combine every window
//! element of the outputs with the updates through the inlined `to_apply` computation. A
//! single-input scatter whose operand dies at it skips the copy: its output is the operand's
//! own buffer (`update_in_place`).
//!
//! Positions run sequentially on one grid index: two positions may hit the same operand
//! element, and XLA's result is the updates applied in order. Within one window the operand
//! elements are distinct, so the window's innermost loop runs in lanes where it is contiguous
//! (an embedding gradient's rows); a window is usually small, so splitting it across threads
//! would not pay for the launch.

use tessera_hlo::InstId;

use super::gather::{dims_attr, DimNumbers, StartIndices};
use super::{index, types, Emitter, Frame};
use crate::kernel::{CmpOp, Const, IndexExpr, Op, Tail, Ty, ValueId};
use crate::LowerError;

/// What the update phase needs, checked once.
struct Plan {
    inputs: Vec<InstId>,
    indices: InstId,
    updates: Vec<InstId>,
    idx: StartIndices,
    dn: DimNumbers,
    op_dims: Vec<i64>,
    upd_rank: usize,
    /// Update dimensions of the window, paired in order with `dn.window_dims`.
    window_upd: Vec<usize>,
    /// Update dimensions that walk the scatter positions, paired with the batch dimensions.
    scatter_upd: Vec<usize>,
    /// The window's extent in every operand dimension (1 where it is inserted or batching).
    extent: Vec<i64>,
    window_shape: Vec<i64>,
    to_apply: tessera_hlo::CompId,
}

impl<'m> Emitter<'m> {
    pub(crate) fn emit_scatter(&mut self) -> Result<(), LowerError> {
        self.scatter(true)
    }

    /// The scatter without its copy: the output buffer already holds the operand (it is the
    /// operand's own buffer, `update_in_place`), so only the windows are combined.
    pub(crate) fn emit_scatter_updates(&mut self) -> Result<(), LowerError> {
        self.scatter(false)
    }

    fn scatter(&mut self, copy_inputs: bool) -> Result<(), LowerError> {
        let f = self.fused_frame();
        let plan = self.scatter_plan(&f)?;
        if copy_inputs {
            for (o, &input) in plan.inputs.iter().enumerate() {
                self.copy_into_output(&f, input, o)?;
            }
        }
        // A window larger than the operand never fits: every update is skipped.
        if plan.extent.iter().zip(&plan.op_dims).any(|(&e, &d)| e > d)
            || plan.idx.batch_dims().contains(&0)
            || plan.window_shape.contains(&0)
        {
            return Ok(());
        }
        let batch = plan.idx.batch_dims();
        let mut g = Vec::with_capacity(batch.len());
        self.scatter_positions(&f, &plan, &batch, &mut g)
    }

    fn scatter_plan(&self, f: &Frame<'m>) -> Result<Plan, LowerError> {
        let inst = self.comp.root_inst();
        let name = inst.name.as_str();
        let n = inst.operands.len();
        if n < 3 || n % 2 == 0 {
            return Err(LowerError::invalid(name, "scatter takes N inputs, indices and N updates"));
        }
        let k = (n - 1) / 2;
        let (inputs, rest) = inst.operands.split_at(k);
        let (indices, updates) = (rest[0], rest[1..].to_vec());
        if self.outputs.len() != k {
            return Err(LowerError::invalid(name, "scatter has as many results as inputs"));
        }
        let shape = |id: InstId| super::array_shape(&f.comp.inst(id).shape, name).map(|a| a.clone());
        let op_dims = shape(inputs[0])?.dims;
        let upd_dims = shape(updates[0])?.dims;
        for (o, (&i, &u)) in inputs.iter().zip(&updates).enumerate() {
            let (ia, ua) = (shape(i)?, shape(u)?);
            let out = &self.outputs[o];
            if ia.dims != op_dims
                || ua.dims != upd_dims
                || ia.element_type != out.et
                || ua.element_type != out.et
                || out.map.dims() != op_dims.as_slice()
            {
                return Err(LowerError::invalid(name, "scatter inputs, updates and results differ in shape"));
            }
        }
        let idx = StartIndices::new(inst, f.comp.inst(indices))?;
        let dn = DimNumbers::new(
            inst,
            &idx,
            &op_dims,
            "inserted_window_dims",
            "scatter_dims_to_operand_dims",
            "input_batching_dims",
            "scatter_indices_batching_dims",
        )?;
        let window_upd = dims_attr(inst, "update_window_dims", upd_dims.len())?;
        let scatter_upd: Vec<usize> = (0..upd_dims.len()).filter(|d| !window_upd.contains(d)).collect();
        let batch = idx.batch_dims();
        if dn.window_dims.len() != window_upd.len()
            || scatter_upd.len() != batch.len()
            || scatter_upd.iter().zip(&batch).any(|(&u, &b)| upd_dims[u] != b)
        {
            return Err(LowerError::invalid(name, "scatter dimension numbers do not match the operands"));
        }
        let mut extent = vec![1i64; op_dims.len()];
        for (&o, &u) in dn.window_dims.iter().zip(&window_upd) {
            extent[o] = upd_dims[u];
        }
        let window_shape = window_upd.iter().map(|&u| upd_dims[u]).collect();
        let to_apply = inst.called("to_apply").ok_or_else(|| LowerError::invalid(name, "scatter without to_apply"))?;
        Ok(Plan {
            inputs: inputs.to_vec(),
            indices,
            updates,
            idx,
            dn,
            op_dims,
            upd_rank: upd_dims.len(),
            window_upd,
            scatter_upd,
            extent,
            window_shape,
            to_apply,
        })
    }

    /// Writes every element of `input` to output `o`, in the output's physical order.
    fn copy_into_output(&mut self, f: &Frame<'m>, input: InstId, o: usize) -> Result<(), LowerError> {
        let map = self.outputs[o].map.clone();
        let splits = self.splits(&[input], &map);
        let bits = self.outputs[o].mem.bits();
        let frame = f.clone();
        let mut body = move |em: &mut Emitter<'m>, idx: &[IndexExpr], addr: &IndexExpr| {
            let v = em.elem(&frame, input, idx)?;
            let et = em.outputs[o].et;
            let m = types::to_mem(&mut em.b, et, v);
            let buf = em.outputs[o].buf;
            em.b.store(buf, addr.clone(), m);
            Ok(())
        };
        let mark = self.mark();
        let r = self.emit_nest(&map, &splits, false, bits, &mut body);
        self.forget_since(mark);
        r
    }

    /// Loops over the scatter positions (batch dimension `g.len()` onwards).
    fn scatter_positions(
        &mut self,
        f: &Frame<'m>,
        plan: &Plan,
        batch: &[i64],
        g: &mut Vec<IndexExpr>,
    ) -> Result<(), LowerError> {
        let Some(&n) = batch.get(g.len()) else {
            return self.scatter_one_position(f, plan, g);
        };
        if n == 1 {
            g.push(index::constant(0));
            let r = self.scatter_positions(f, plan, batch, g);
            g.pop();
            return r;
        }
        let mark = self.mark();
        let v = self.open_loop(0, n);
        g.push(index::var(v));
        let r = self.scatter_positions(f, plan, batch, g);
        g.pop();
        self.b.end_loop();
        self.forget_since(mark);
        r
    }

    /// The update window of scatter position `g`, applied when it fits.
    fn scatter_one_position(&mut self, f: &Frame<'m>, plan: &Plan, g: &[IndexExpr]) -> Result<(), LowerError> {
        let name = self.comp.root_inst().name.clone();
        let mut starts = Vec::with_capacity(plan.dn.index_map.len());
        let mut cond: Option<ValueId> = None;
        for (k, &d) in plan.dn.index_map.iter().enumerate() {
            let v = self.index_component(f, plan.indices, &plan.idx, g, k, &name)?;
            // One unsigned comparison covers both ends: a negative start reads as huge.
            let hi = self.b.constant(Const::Int { ty: Ty::I64, bits: plan.op_dims[d] - plan.extent[d] });
            let fits = self.b.cmp(CmpOp::Ule, Ty::I64, v, hi);
            cond = Some(match cond {
                None => fits,
                Some(c) => self.b.binary(crate::kernel::BinOp::And, Ty::Pred, c, fits),
            });
            starts.push((d, v));
        }
        let mark = self.mark();
        if let Some(c) = cond {
            self.b.begin_if(c);
        }
        let mut base = vec![index::constant(0); plan.op_dims.len()];
        for &(d, v) in &starts {
            // Only read under the guard above, which proved the range.
            let s = self.b.let_(Op::Index(index::value(v)));
            self.bounds.set_value(s, 0, plan.op_dims[d] - plan.extent[d]);
            base[d] = index::add(&base[d], &index::value(s));
        }
        for (&od, &id) in plan.dn.operand_batching.iter().zip(&plan.dn.indices_batching) {
            base[od] = index::add(&base[od], &g[plan.idx.batch_position(id)]);
        }
        let mut ui = vec![index::constant(0); plan.upd_rank];
        for (t, &u) in plan.scatter_upd.iter().enumerate() {
            ui[u] = g[t].clone();
        }
        let mut w = Vec::with_capacity(plan.window_shape.len());
        let r = self.scatter_window(f, plan, &base, &mut ui, &mut w);
        if cond.is_some() {
            self.b.end_if();
        }
        self.forget_since(mark);
        r
    }

    /// Loops over the window dimensions (`w.len()` onwards), then combines one element.
    fn scatter_window(
        &mut self,
        f: &Frame<'m>,
        plan: &Plan,
        base: &[IndexExpr],
        ui: &mut Vec<IndexExpr>,
        w: &mut Vec<IndexExpr>,
    ) -> Result<(), LowerError> {
        let t = w.len();
        let Some(&n) = plan.window_shape.get(t) else {
            return self.scatter_element(f, plan, base, ui, w);
        };
        let u = plan.window_upd[t];
        if n == 1 {
            w.push(index::constant(0));
            ui[u] = index::constant(0);
            let r = self.scatter_window(f, plan, base, ui, w);
            w.pop();
            return r;
        }
        let mark = self.mark();
        let v = self.open_loop(0, n);
        w.push(index::var(v));
        ui[u] = index::var(v);
        let r = self.scatter_window(f, plan, base, ui, w);
        w.pop();
        // A window's elements are distinct operand elements, so its innermost loop may run in
        // lanes; along the outputs' contiguous dimension (an embedding row) it does.
        let width = if t + 1 == plan.window_shape.len() { self.window_lanes(plan, n) } else { 1 };
        let tail = if width > 1 && n % i64::from(width) != 0 { Tail::Peel } else { Tail::None };
        self.b.end_loop_vectorized(width, tail);
        self.forget_since(mark);
        r
    }

    /// The vector width of the innermost window loop (`n` iterations over the last window
    /// dimension): 1 unless that dimension is contiguous in every output (row-major, untiled,
    /// and the operand's last dimension).
    fn window_lanes(&self, plan: &Plan, n: i64) -> u32 {
        let Some(&d) = plan.dn.window_dims.last() else { return 1 };
        let contiguous = self.outputs.iter().all(|o| o.map.is_identity() && d + 1 == o.map.dims().len());
        if !contiguous {
            return 1;
        }
        let update_bits =
            plan.updates.iter().filter_map(|&u| self.comp.inst(u).shape.as_array()).map(|a| a.element_type.bit_width());
        let bits = self.outputs.iter().map(|o| o.mem.bits()).chain(update_bits).max().unwrap_or(0);
        super::nest::vector_width(bits, n)
    }

    fn scatter_element(
        &mut self,
        f: &Frame<'m>,
        plan: &Plan,
        base: &[IndexExpr],
        ui: &[IndexExpr],
        w: &[IndexExpr],
    ) -> Result<(), LowerError> {
        let mut oi = base.to_vec();
        for (t, &d) in plan.dn.window_dims.iter().enumerate() {
            oi[d] = index::add(&oi[d], &w[t]);
        }
        let mut args = Vec::with_capacity(2 * plan.inputs.len());
        let mut addrs = Vec::with_capacity(plan.inputs.len());
        for o in 0..plan.inputs.len() {
            let map = self.outputs[o].map.clone();
            let addr = self.layout_offset(&map, &oi);
            let (buf, et) = (self.outputs[o].buf, self.outputs[o].et);
            let v = self.b.load(buf, addr.clone());
            args.push(types::from_mem(&mut self.b, et, v));
            addrs.push(addr);
        }
        for &u in &plan.updates {
            args.push(self.elem(f, u, ui)?);
        }
        let results = self.call_scalar(plan.to_apply, args)?;
        if results.len() != plan.inputs.len() {
            return Err(LowerError::invalid(
                &self.comp.root_inst().name,
                "the update computation returns the wrong number of values",
            ));
        }
        for (o, (v, addr)) in results.into_iter().zip(addrs).enumerate() {
            let (buf, et) = (self.outputs[o].buf, self.outputs[o].et);
            let m = types::to_mem(&mut self.b, et, v);
            self.b.store(buf, addr, m);
        }
        Ok(())
    }
}
