//! select-and-scatter as one sequential kernel: the output starts as the initial value
//! everywhere; then, for every source element in row-major order, the window over the
//! operand picks one element (the first in window order that `select` prefers over every
//! later one, as XLA and `hlo::eval` do) and the source value is combined into the output
//! there with `scatter`. Windows overlap, so two source elements may land on one output
//! element: the kernel runs as a single grid index, and the row-major order keeps a
//! non-associative scatter (a float sum) rounding exactly as the reference does.

use tessera_hlo::InstId;

use super::{index, nest, types, Emitter};
use crate::kernel::{BinOp, Const, IndexExpr, Op, Ty, UnOp};
use crate::LowerError;

impl<'m> Emitter<'m> {
    /// Emits the whole kernel of a select-and-scatter root (`id` in the fused computation).
    pub(crate) fn emit_select_and_scatter(&mut self, id: InstId) -> Result<(), LowerError> {
        let f = self.fused_frame();
        let inst = self.comp.inst(id);
        let name = inst.name.clone();
        let [operand, source, init] = inst.operands[..] else {
            return Err(LowerError::invalid(
                &name,
                "select-and-scatter needs an operand, a source and an initial value",
            ));
        };
        let select = inst.called("select").ok_or_else(|| LowerError::invalid(&name, "missing select computation"))?;
        let scatter =
            inst.called("scatter").ok_or_else(|| LowerError::invalid(&name, "missing scatter computation"))?;
        let in_dims = self.comp.inst(operand).shape.dims().to_vec();
        let src_dims = self.comp.inst(source).shape.dims().to_vec();
        let window = super::window::window_dims(inst, &in_dims)?;
        let Some(out) = self.outputs.first() else {
            return Err(LowerError::invalid(&name, "select-and-scatter without an output"));
        };
        let (out_buf, out_map, out_et, out_bits) = (out.buf, out.map.clone(), out.et, out.mem.bits());
        if self.outputs.len() != 1 || out_map.dims() != in_dims.as_slice() {
            return Err(LowerError::invalid(&name, "the result does not have the operand's shape"));
        }
        let et = self.et_of(operand, &name)?;
        let ty = types::reg(et, &name)?;
        if self.et_of(source, &name)? != et || self.et_of(init, &name)? != et || out_et != et {
            return Err(LowerError::invalid(&name, "select-and-scatter operand, source, init and result types differ"));
        }

        let init_v = self.elem(&f, init, &[])?;
        let init_m = types::to_mem(&mut self.b, et, init_v);
        let mut fill = |em: &mut Emitter<'m>, _: &[IndexExpr], addr: &IndexExpr| {
            em.b.store(out_buf, addr.clone(), init_m);
            Ok(())
        };
        self.emit_nest(&out_map, &[], false, out_bits, &mut fill)?;
        if src_dims.contains(&0) || in_dims.contains(&0) {
            return Ok(());
        }

        // The source in row-major order: the order the scatter combines in.
        let digits: Vec<nest::Digit> =
            src_dims.iter().enumerate().map(|(d, &n)| nest::Digit { dim: d, weight: 1, extent: n, coef: 0 }).collect();
        let limits: Vec<Option<i64>> = src_dims.iter().map(|&n| Some(n)).collect();
        let rank = in_dims.len();
        let mut at_source = move |em: &mut Emitter<'m>, sidx: &[IndexExpr], _: &IndexExpr| {
            let no = em.b.constant(Const::Pred(false));
            let have = em.b.local(Ty::Pred, no);
            let best = em.b.local(ty, init_v);
            let zero = em.b.constant(Const::Int { ty: Ty::I64, bits: 0 });
            let at: Vec<_> = (0..rank).map(|_| em.b.local(Ty::I64, zero)).collect();
            let at_c = at.clone();
            let frame = em.fused_frame();
            let mut consider = |em: &mut Emitter<'m>, oi: &[IndexExpr]| {
                let v = em.elem(&frame, operand, oi)?;
                let cur = em.b.get_local(best);
                let had = em.b.get_local(have);
                // Keep the current pick when there is one and select prefers it; select is
                // pure, so evaluating it on the placeholder before the first pick is harmless.
                let prefers = match em.call_scalar(select, vec![cur, v])?.as_slice() {
                    [p] => *p,
                    _ => {
                        return Err(LowerError::invalid(&frame.comp.inst(operand).name, "select must return one pred"))
                    }
                };
                let keep = em.b.binary(BinOp::And, Ty::Pred, had, prefers);
                let take = em.b.unary(UnOp::Not, Ty::Pred, keep);
                let picked = em.b.select(ty, take, v, cur);
                em.b.set_local(best, picked);
                for (&l, e) in at_c.iter().zip(oi) {
                    let p = em.b.let_(Op::Index(e.clone()));
                    let old = em.b.get_local(l);
                    let n = em.b.select(Ty::I64, take, p, old);
                    em.b.set_local(l, n);
                }
                let yes = em.b.constant(Const::Pred(true));
                em.b.set_local(have, yes);
                Ok(())
            };
            em.for_each_in_window(sidx, &window, &in_dims, &mut consider)?;
            let had = em.b.get_local(have);
            let mark = em.mark();
            em.b.begin_if(had);
            let mut picked = Vec::with_capacity(rank);
            for (&l, &n) in at.iter().zip(&in_dims) {
                let v = em.b.get_local(l);
                // Only window positions inside the operand are ever recorded.
                em.bounds.set_value(v, 0, n - 1);
                picked.push(index::value(v));
            }
            let addr = em.layout_offset(&out_map, &picked);
            let old = em.b.load(out_buf, addr.clone());
            let old = types::from_mem(&mut em.b, et, old);
            let s = em.elem(&frame, source, sidx);
            let r = s.and_then(|s| em.call_scalar(scatter, vec![old, s]));
            if let Ok([v]) = r.as_deref() {
                let m = types::to_mem(&mut em.b, et, *v);
                em.b.store(out_buf, addr, m);
            }
            em.b.end_if();
            em.forget_since(mark);
            match r {
                Ok(v) if v.len() == 1 => Ok(()),
                Ok(_) => Err(LowerError::invalid(&frame.comp.inst(source).name, "scatter must return one value")),
                Err(e) => Err(e),
            }
        };
        self.reduce_loops(&digits, limits, &mut at_source)
    }

    fn et_of(&self, id: InstId, name: &str) -> Result<tessera_hlo::ElementType, LowerError> {
        match self.comp.inst(id).shape.as_array() {
            Some(a) => Ok(a.element_type),
            None => Err(LowerError::unsupported(name, "a tuple-shaped select-and-scatter operand")),
        }
    }
}
