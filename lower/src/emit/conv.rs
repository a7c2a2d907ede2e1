//! convolution, with any dimension labels, window (strides, low/high padding including
//! negative, base and window dilation, reversal), feature groups and batch groups, as
//! `hlo::eval::convolution` defines it.
//!
//! At one output element the value is generated as loops over the kernel's spatial positions
//! and its input features around a multiply-add: each kernel position whose input position
//! falls in padding or between dilated base elements is skipped by a branch, so nothing is
//! read outside the operand. Operands are first converted to the result type (as the
//! interpreter does); float products are then summed in f64 and rounded once, integers wrap in
//! the result type, predicates or their ands.
//!
//! Large f32/f64 convolutions over plainly strided buffers are instead one call to the
//! runtime's convolution (im2col blocks times the kernel on the GEMM micro-kernels); the
//! kernel stores the geometry descriptor in a private scratch buffer of i64 (layout on
//! `tessera_rt_conv_f32` and in the kernel interpreter).

use tessera_hlo::ir::{AttrList, AttrValue, Window};
use tessera_hlo::{ElementType, InstId, Instruction, LayoutMap, Opcode};

use super::{index, scalar, Emitter, Frame};
use crate::kernel::{BinOp, CallArg, CmpOp, Const, IndexExpr, MemType, Ty, ValueId};
use crate::LowerError;

/// The roles of each operand's dimensions, the sizes, and the window of one convolution.
pub(crate) struct ConvGeometry {
    pub lhs_batch: usize,
    pub lhs_feature: usize,
    pub lhs_spatial: Vec<usize>,
    pub k_in: usize,
    pub k_out: usize,
    pub k_spatial: Vec<usize>,
    pub out_batch: usize,
    pub out_feature: usize,
    pub out_spatial: Vec<usize>,
    /// Input batch (all batch groups) and kernel input features (one feature group).
    pub batch: i64,
    pub group_in: i64,
    pub out_features: i64,
    pub fgc: i64,
    pub bgc: i64,
    pub in_sizes: Vec<i64>,
    pub k_sizes: Vec<i64>,
    pub out_sizes: Vec<i64>,
    pub window: Window,
}

impl ConvGeometry {
    pub fn groups(&self) -> i64 {
        self.fgc * self.bgc
    }
    /// Output features per group.
    pub fn group_out(&self) -> i64 {
        self.out_features / self.groups()
    }
    /// Kernel positions: a product of the kernel operand's dimensions, so at most its element
    /// count.
    pub fn taps(&self) -> i64 {
        self.k_sizes.iter().product()
    }
}

/// Reads and checks a convolution's attributes against its operand and result dimensions,
/// with the rules the interpreter applies.
pub(crate) fn geometry(
    inst: &Instruction,
    lhs_dims: &[i64],
    rhs_dims: &[i64],
    out_dims: &[i64],
) -> Result<ConvGeometry, LowerError> {
    let bad = |m: &str| LowerError::invalid(&inst.name, m.to_string());
    let Some(AttrValue::ConvDims(dn)) = inst.attr("dim_labels") else {
        return Err(bad("convolution without dim_labels"));
    };
    let window = match inst.attr("window") {
        Some(AttrValue::Window(w)) => w.clone(),
        None => Window::default(),
        Some(_) => return Err(bad("window attribute is not a window")),
    };
    let rank = lhs_dims.len();
    let spatial = rank.saturating_sub(2);
    if rank < 2 || rhs_dims.len() != rank || out_dims.len() != rank {
        return Err(bad("convolution operands and result need the same rank, at least 2"));
    }
    let perm = |dims: Vec<i64>| -> Result<Vec<usize>, LowerError> {
        let mut seen = vec![false; rank];
        let mut out = Vec::with_capacity(rank);
        for d in dims {
            match usize::try_from(d).ok().filter(|&d| d < rank) {
                Some(d) if !seen[d] => {
                    seen[d] = true;
                    out.push(d);
                }
                _ => return Err(bad("dim_labels do not name each dimension once")),
            }
        }
        if out.len() != rank {
            return Err(bad("dim_labels do not match the operand ranks"));
        }
        Ok(out)
    };
    let mut l = vec![dn.input_batch, dn.input_feature];
    l.extend(&dn.input_spatial);
    let mut r = vec![dn.kernel_input_feature, dn.kernel_output_feature];
    r.extend(&dn.kernel_spatial);
    let mut o = vec![dn.output_batch, dn.output_feature];
    o.extend(&dn.output_spatial);
    let (l, r, o) = (perm(l)?, perm(r)?, perm(o)?);
    if window.dims.len() != spatial {
        return Err(bad("the window does not have one dimension per spatial dimension"));
    }
    let fgc = inst.attr_int("feature_group_count").unwrap_or(1);
    let bgc = inst.attr_int("batch_group_count").unwrap_or(1);
    if fgc < 1 || bgc < 1 || (fgc > 1 && bgc > 1) {
        return Err(bad("group counts must be positive and not both above 1"));
    }
    let g = ConvGeometry {
        lhs_batch: l[0],
        lhs_feature: l[1],
        lhs_spatial: l[2..].to_vec(),
        k_in: r[0],
        k_out: r[1],
        k_spatial: r[2..].to_vec(),
        out_batch: o[0],
        out_feature: o[1],
        out_spatial: o[2..].to_vec(),
        batch: lhs_dims[l[0]],
        group_in: rhs_dims[r[0]],
        out_features: rhs_dims[r[1]],
        fgc,
        bgc,
        in_sizes: l[2..].iter().map(|&d| lhs_dims[d]).collect(),
        k_sizes: r[2..].iter().map(|&d| rhs_dims[d]).collect(),
        out_sizes: o[2..].iter().map(|&d| out_dims[d]).collect(),
        window,
    };
    let groups = fgc * bgc;
    if lhs_dims[g.lhs_feature] != g.group_in * fgc
        || g.out_features % groups != 0
        || g.batch % bgc != 0
        || out_dims[g.out_batch] != g.batch / bgc
        || out_dims[g.out_feature] != g.out_features
    {
        return Err(bad("convolution feature, batch or group sizes do not match"));
    }
    for (s, w) in g.window.dims.iter().enumerate() {
        if w.size != g.k_sizes[s] || w.stride <= 0 || w.window_dilation <= 0 || w.base_dilation <= 0 {
            return Err(bad("window size differs from the kernel, or a stride or dilation is not positive"));
        }
        // Index arithmetic below stays far from overflow.
        let big = [w.stride, w.window_dilation, w.base_dilation, w.padding_low.abs(), w.padding_high.abs()];
        if big.iter().any(|&x| x > 1 << 30) {
            return Err(LowerError::unsupported(&inst.name, "window strides, dilations or padding above 2^30"));
        }
    }
    Ok(g)
}

/// Element strides of each logical dimension of a layout without tiles or combined
/// dimensions (tail padding allowed).
fn strides(map: &LayoutMap) -> Option<Vec<i64>> {
    let mut out = vec![0i64; map.dims().len()];
    for p in map.physical_dims() {
        match p.index {
            tessera_hlo::IndexExpr::Logical(d) => *out.get_mut(d)? = p.stride,
            tessera_hlo::IndexExpr::Zero => {}
            _ => return None,
        }
    }
    Some(out)
}

/// Below this many multiply-adds a convolution with base (input) dilation is emitted as loops:
/// the runtime's im2col blocks hold the holes between dilated elements, which made a small
/// transposed convolution (conv2d_grad's input gradient) 10x slower than its loops. Others
/// call the runtime whatever their size: as loops, LLVM spent 20-40 ms unrolling and
/// vectorizing even a small one (more than XLA:CPU's whole compile of the module), and
/// Cranelift ran it scalar.
const DILATED_MIN_MACS: i64 = 1 << 16;

impl<'m> Emitter<'m> {
    /// Element `idx` of convolution `id`.
    pub(crate) fn elem_conv(&mut self, f: &Frame<'m>, id: InstId, idx: &[IndexExpr]) -> Result<ValueId, LowerError> {
        let inst = f.comp.inst(id);
        let name = inst.name.clone();
        let [lhs, rhs] = inst.operands[..] else {
            return Err(LowerError::invalid(&name, "convolution needs an input and a kernel"));
        };
        let (lhs_shape, rhs_shape) = (&f.comp.inst(lhs).shape, &f.comp.inst(rhs).shape);
        let g = geometry(inst, lhs_shape.dims(), rhs_shape.dims(), inst.shape.dims())?;
        let out_et = inst.shape.element_type();
        let (lhs_et, rhs_et) = (lhs_shape.element_type(), rhs_shape.element_type());
        if out_et.is_complex() || lhs_et.is_complex() || rhs_et.is_complex() {
            return Err(LowerError::unsupported(&name, "a complex convolution"));
        }
        let acc_et = if out_et.is_float() { ElementType::F64 } else { out_et };
        let acc_ty = super::types::reg(acc_et, &name)?;
        let zero = match acc_ty {
            Ty::Pred => self.b.constant(Const::Pred(false)),
            Ty::F32 | Ty::F64 => scalar::float_const(&mut self.b, acc_ty, 0.0),
            t => scalar::int_const(&mut self.b, t, 0),
        };
        let acc = self.b.local(acc_ty, zero);
        let empty = g.group_in == 0 || g.k_sizes.contains(&0) || g.in_sizes.contains(&0) || g.batch == 0;
        if !empty {
            let mark = self.mark();
            let r = self.conv_taps(f, &g, lhs, rhs, idx, acc, [lhs_et, rhs_et, out_et, acc_et], &name);
            self.forget_since(mark);
            r?;
        }
        let v = self.b.get_local(acc);
        scalar::convert(&mut self.b, acc_et, out_et, v, &name)
    }

    /// The loops and branches over the kernel positions and input features of one output
    /// element, accumulating into `acc`.
    #[allow(clippy::too_many_arguments)]
    fn conv_taps(
        &mut self,
        f: &Frame<'m>,
        g: &ConvGeometry,
        lhs: InstId,
        rhs: InstId,
        idx: &[IndexExpr],
        acc: crate::kernel::LocalId,
        ets: [ElementType; 4],
        name: &str,
    ) -> Result<(), LowerError> {
        let rank = idx.len();
        let of = idx[g.out_feature].clone();
        let ob = idx[g.out_batch].clone();
        let kg = g.group_out();
        let grp = if g.groups() == 1 { index::constant(0) } else { self.idiv(&of, kg) };
        let mut li = vec![IndexExpr::default(); rank];
        let mut ri = vec![IndexExpr::default(); rank];
        ri[g.k_out] = of;
        li[g.lhs_batch] = if g.bgc > 1 { index::add(&index::scale(&grp, g.batch / g.bgc), &ob) } else { ob };
        let taps = g.taps();
        if g.group_in == 1 && taps <= super::window::UNROLLED_TAPS {
            // A depthwise convolution's few taps, each at constant kernel indices in the
            // loops' row-major order (the same sum in the same order): the loop over the
            // output's contiguous dimension (its channels) then holds no loop, so it
            // vectorizes, as a small pooling window's does.
            for tap in 0..taps {
                let fixed = super::window::row_major_digits(tap, &g.k_sizes);
                let (li, ri) = (li.clone(), ri.clone());
                // A tap's values live in its own branches: the next tap must not find them in
                // the element cache.
                let mark = self.mark();
                let walked = self.conv_tap_walk(f, g, lhs, rhs, idx, acc, &grp, li, ri, Some(&fixed), ets, name);
                self.forget_since(mark);
                walked?;
            }
            return Ok(());
        }
        self.conv_tap_walk(f, g, lhs, rhs, idx, acc, &grp, li, ri, None, ets, name)
    }

    /// The loops (or, at `fixed` kernel indices, the one position) and branches of
    /// [`Self::conv_taps`], with `li` and `ri` holding the batch and output-feature indices.
    #[allow(clippy::too_many_arguments)]
    fn conv_tap_walk(
        &mut self,
        f: &Frame<'m>,
        g: &ConvGeometry,
        lhs: InstId,
        rhs: InstId,
        idx: &[IndexExpr],
        acc: crate::kernel::LocalId,
        grp: &IndexExpr,
        mut li: Vec<IndexExpr>,
        mut ri: Vec<IndexExpr>,
        fixed: Option<&[i64]>,
        [lhs_et, rhs_et, out_et, acc_et]: [ElementType; 4],
        name: &str,
    ) -> Result<(), LowerError> {
        // Open scopes, innermost last: true for a loop, false for a branch.
        let mut open: Vec<bool> = Vec::new();
        let mut never = false;
        for s in 0..g.k_sizes.len() {
            let w = &g.window.dims[s];
            let k = g.k_sizes[s];
            let kv = match fixed {
                Some(fixed) => index::constant(fixed[s]),
                None if k == 1 => index::constant(0),
                None => {
                    open.push(true);
                    index::var(self.open_loop(0, k))
                }
            };
            ri[g.k_spatial[s]] = kv.clone();
            // Reversal reads the kernel back to front at the same window position.
            let tap = if w.window_reversal { index::add_const(&index::scale(&kv, -1), k - 1) } else { kv };
            let os = &idx[g.out_spatial[s]];
            let pos = index::add(
                &index::scale(os, w.stride),
                &index::add_const(&index::scale(&tap, w.window_dilation), -w.padding_low),
            );
            let bd = w.base_dilation;
            let last = (g.in_sizes[s] - 1) * bd;
            let (lo, hi) = self.bounds.range(&pos);
            if hi < 0 || lo > last || (bd > 1 && lo == hi && lo % bd != 0) {
                never = true;
                break;
            }
            let needs_step = bd > 1 && !(lo == hi && lo % bd == 0);
            if lo < 0 || hi > last || needs_step {
                let pv = self.b.let_(crate::kernel::Op::Index(pos.clone()));
                let mut cond: Option<ValueId> = None;
                let mut and = |em: &mut Self, c: ValueId| {
                    cond = Some(match cond {
                        None => c,
                        Some(a) => em.b.binary(BinOp::And, Ty::Pred, a, c),
                    })
                };
                if lo < 0 {
                    let zero = self.b.constant(Const::Int { ty: Ty::I64, bits: 0 });
                    let c = self.b.cmp(CmpOp::Sge, Ty::I64, pv, zero);
                    and(self, c);
                }
                if hi > last {
                    let l = self.b.constant(Const::Int { ty: Ty::I64, bits: last });
                    let c = self.b.cmp(CmpOp::Sle, Ty::I64, pv, l);
                    and(self, c);
                }
                if needs_step {
                    let kv = self.b.constant(Const::Int { ty: Ty::I64, bits: bd });
                    let r = self.b.binary(BinOp::SRem, Ty::I64, pv, kv);
                    let zero = self.b.constant(Const::Int { ty: Ty::I64, bits: 0 });
                    let c = self.b.cmp(CmpOp::Eq, Ty::I64, r, zero);
                    and(self, c);
                }
                if let Some(c) = cond {
                    self.b.begin_if(c);
                    open.push(false);
                }
            }
            let pos = self.guarded_index(&pos, last + 1);
            li[g.lhs_spatial[s]] = self.idiv(&pos, bd);
        }
        let mut result = Ok(());
        if !never {
            let iv = if g.group_in == 1 {
                index::constant(0)
            } else {
                open.push(true);
                index::var(self.open_loop(0, g.group_in))
            };
            li[g.lhs_feature] = if g.fgc > 1 { index::add(&index::scale(grp, g.group_in), &iv) } else { iv.clone() };
            ri[g.k_in] = iv;
            result = (|| -> Result<(), LowerError> {
                let a = self.elem(f, lhs, &li)?;
                let b = self.elem(f, rhs, &ri)?;
                let a = self.conv_operand(a, lhs_et, out_et, acc_et, name)?;
                let b = self.conv_operand(b, rhs_et, out_et, acc_et, name)?;
                let cur = self.b.get_local(acc);
                let ty = super::types::reg(acc_et, name)?;
                let s = if ty == Ty::Pred {
                    let p = self.b.binary(BinOp::And, Ty::Pred, a, b);
                    self.b.binary(BinOp::Or, Ty::Pred, cur, p)
                } else {
                    let p = self.b.binary(BinOp::Mul, ty, a, b);
                    self.b.binary(BinOp::Add, ty, cur, p)
                };
                self.b.set_local(acc, s);
                Ok(())
            })();
        }
        for is_loop in open.into_iter().rev() {
            if is_loop {
                self.b.end_loop();
            } else {
                self.b.end_if();
            }
        }
        result
    }

    /// An operand element converted to the result type (the interpreter's cast), then to the
    /// accumulator's.
    fn conv_operand(
        &mut self,
        v: ValueId,
        et: ElementType,
        out_et: ElementType,
        acc_et: ElementType,
        name: &str,
    ) -> Result<ValueId, LowerError> {
        let v = scalar::convert(&mut self.b, et, out_et, v, name)?;
        scalar::convert(&mut self.b, out_et, acc_et, v, name)
    }

    /// `e` as an index known (from the enclosing branch) to lie in `0..n`.
    fn guarded_index(&mut self, e: &IndexExpr, n: i64) -> IndexExpr {
        let (lo, hi) = self.bounds.range(e);
        if lo >= 0 && hi < n {
            return e.clone();
        }
        let v = self.b.let_(crate::kernel::Op::Index(e.clone()));
        self.bounds.set_value(v, 0, n - 1);
        index::value(v)
    }

    /// Emits the whole output of convolution `id` (the fused computation's root) as one call
    /// to the runtime's convolution when it qualifies: f32 or f64 throughout, operands that
    /// are parameters, layouts without tiles, and enough work. False otherwise (the caller
    /// emits loops).
    pub(crate) fn try_conv_call(&mut self, id: InstId) -> Result<bool, LowerError> {
        let inst = self.comp.inst(id);
        if inst.opcode != Opcode::Convolution {
            return Ok(false);
        }
        let Some((f32, ln, rn)) = self.float_parameter_operands(id) else { return Ok(false) };
        let func = if f32 { "tessera_rt_conv_f32" } else { "tessera_rt_conv_f64" };
        let (lp, rp) = (&self.params[ln], &self.params[rn]);
        let out = &self.outputs[0];
        let (Some(ls), Some(rs), Some(os)) = (strides(&lp.map), strides(&rp.map), strides(&out.map)) else {
            return Ok(false);
        };
        let g = geometry(inst, lp.map.dims(), rp.map.dims(), out.map.dims())?;
        let points: i64 = g.out_sizes.iter().product::<i64>() * (g.batch / g.bgc);
        let k = g.taps() * g.group_in;
        let macs = points.saturating_mul(k).saturating_mul(g.out_features);
        // Tiny contractions or few output features per group (depthwise) make poor GEMMs.
        let dilated = g.window.dims.iter().any(|w| w.base_dilation > 1);
        if (dilated && macs < DILATED_MIN_MACS) || k < 8 || g.group_out() < 4 {
            return Ok(false);
        }
        let mut desc = vec![
            g.k_sizes.len() as i64,
            g.batch,
            ls[g.lhs_batch],
            ls[g.lhs_feature],
            g.group_in,
            rs[g.k_in],
            g.out_features,
            rs[g.k_out],
            g.batch / g.bgc,
            os[g.out_batch],
            os[g.out_feature],
            g.fgc,
            g.bgc,
        ];
        debug_assert_eq!(desc.len(), crate::kernel::CONV_DESC_HEADER);
        for (s, w) in g.window.dims.iter().enumerate() {
            desc.extend([
                g.in_sizes[s],
                ls[g.lhs_spatial[s]],
                g.k_sizes[s],
                rs[g.k_spatial[s]],
                g.out_sizes[s],
                os[g.out_spatial[s]],
                w.stride,
                w.padding_low,
                w.base_dilation,
                w.window_dilation,
                i64::from(w.window_reversal),
            ]);
        }
        let (lbuf, rbuf, obuf) = (lp.buf, rp.buf, out.buf);
        let dbuf = self.b.buffer(format!("{}.desc", inst.name), MemType::Scalar(Ty::I64), desc.len() as i64, true);
        for (i, &x) in desc.iter().enumerate() {
            let v = self.b.constant(Const::Int { ty: Ty::I64, bits: x });
            self.b.store(dbuf, IndexExpr::constant(i as i64), v);
        }
        self.b.call(
            func,
            vec![
                CallArg::Ptr { buf: dbuf, index: IndexExpr::constant(0) },
                CallArg::Ptr { buf: lbuf, index: IndexExpr::constant(0) },
                CallArg::Ptr { buf: rbuf, index: IndexExpr::constant(0) },
                CallArg::Ptr { buf: obuf, index: IndexExpr::constant(0) },
            ],
        );
        Ok(true)
    }
}
