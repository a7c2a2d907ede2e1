//! A test utility: random valid kernels from a seed, and random contents for their buffers,
//! so the codegen tiers can be diffed against the interpreter on code no one wrote by hand.
//!
//! Every generated kernel passes [`verify_kernel`](super::verify_kernel) and runs without a
//! fault on any buffer contents: integer division and shifts carry the guards the lowering
//! puts around them, data-dependent indices are bounded by a `% len` term, and every loop
//! nest covers its buffers exactly. The kernels are deterministic whatever the execution
//! order a tier picks: every output element is written by one iteration only, loops carrying
//! an accumulator have vector width 1, the grid never splits a packed byte between grid
//! indices, and no kernel reads what it writes. What tiers may still legitimately disagree on
//! is the payload of a NaN (`FMax`/`FMin` of a NaN): compare NaNs as NaNs.
//!
//! Shapes generated: a grid of 1 to 3 indices around 0 to 3 loops of 1 to 6 iterations (some
//! starting at a nonzero index), 1 to 3 input buffers read through permuted, broadcast or
//! div/mod-split index expressions, 1 or 2 outputs, and either an elementwise body (possibly
//! storing through an `if`) or a reduction into a local declared some loops up. The memory
//! types cover every scalar type, byte predicates and packed 1/2/4-bit elements.

use super::*;

/// SplitMix64: small, seedable, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

const TYPES: [Ty; 7] = [Ty::Pred, Ty::I8, Ty::I16, Ty::I32, Ty::I64, Ty::F32, Ty::F64];

fn random_mem(r: &mut Rng) -> MemType {
    match r.below(10) {
        0 => MemType::Pred,
        1 => MemType::Packed { bits: r.pick(&[1, 2, 4]), pred: false },
        2 => MemType::Packed { bits: 1, pred: true },
        _ => MemType::Scalar(r.pick(&[Ty::I8, Ty::I16, Ty::I32, Ty::I64, Ty::F32, Ty::F32, Ty::F64])),
    }
}

/// One iteration dimension: the grid or a loop.
#[derive(Clone, Copy)]
struct Dim {
    var: VarId,
    start: i64,
    trip: i64,
}

/// Builds `sum of (var - start) * stride` over a random selection and order of `dims`
/// (splitting some zero-based dims into `/` and `%` parts), returning the index and the
/// number of elements it spans. With `all`, every dim is kept, so the index is injective.
/// `grid_first` puts the grid outermost with a stride rounded up to `align` elements.
fn random_index(r: &mut Rng, dims: &[Dim], all: bool, grid_first: Option<i64>) -> (IndexExpr, i64) {
    // Parts: (var, div, modulo, extent, start).
    let mut parts: Vec<(VarId, i64, Option<i64>, i64, i64)> = Vec::new();
    for d in dims {
        if !all && r.chance(30) {
            continue; // broadcast along this dim
        }
        let factor = [2, 3].into_iter().find(|f| d.trip % f == 0 && d.trip > *f);
        match factor {
            Some(f) if d.start == 0 && r.chance(40) => {
                let inner = d.trip / f;
                let outer_mod = if r.chance(50) { Some(f) } else { None };
                parts.push((d.var, inner, outer_mod, f, 0));
                parts.push((d.var, 1, Some(inner), inner, 0));
            }
            _ => parts.push((d.var, 1, None, d.trip, d.start)),
        }
    }
    let grid_var = dims.first().map(|d| d.var);
    let mut order: Vec<usize> = (0..parts.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, r.below(i + 1));
    }
    if grid_first.is_some() {
        // Move the grid's (unsplit) part to the front, so it is the most major.
        if let Some(pos) = order.iter().position(|&p| Some(parts[p].0) == grid_var) {
            let p = order.remove(pos);
            order.insert(0, p);
        }
    }
    let mut expr = IndexExpr::default();
    let mut stride = 1i64;
    for (n, &p) in order.iter().enumerate().rev() {
        let (var, div, modulo, extent, start) = parts[p];
        if n == 0 && grid_first.is_some() && Some(var) == grid_var {
            let align = grid_first.unwrap_or(1);
            stride = (stride + align - 1) / align * align;
        }
        expr.terms.push(Term { src: IndexSrc::Var(var), div, modulo, scale: stride });
        expr.offset -= start * stride;
        stride *= extent;
    }
    expr.terms.reverse();
    (expr, stride)
}

struct Gen<'r> {
    r: &'r mut Rng,
    b: KernelBuilder,
    /// Values usable in the current body, with their types, oldest first.
    pool: Vec<(ValueId, Ty)>,
    /// Loads not used by any operation yet: the next operands.
    pending: Vec<(ValueId, Ty)>,
}

impl Gen<'_> {
    fn add(&mut self, v: ValueId, ty: Ty) -> ValueId {
        self.pool.push((v, ty));
        v
    }

    fn constant(&mut self, ty: Ty) -> ValueId {
        let r = &mut *self.r;
        let c = match ty {
            Ty::Pred => Const::Pred(r.chance(50)),
            Ty::F32 => {
                let specials =
                    [0.0, -0.0, 1.0, -1.5, 0.1, 3.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e30, 1e-40];
                let x = if r.chance(50) { r.pick(&specials) } else { r.range(-4000, 4000) as f32 / 1000.0 };
                Const::F32(x.to_bits())
            }
            Ty::F64 => {
                let specials = [0.0, -0.0, 1.0, -2.5, 0.1, 7.0, f64::INFINITY, f64::NAN, 1e300, 5e-324];
                let x = if r.chance(50) { r.pick(&specials) } else { r.range(-4000, 4000) as f64 / 1000.0 };
                Const::F64(x.to_bits())
            }
            _ => {
                let bits = ty.bits();
                let min = -(1i64 << (bits - 1).min(62)) * if bits == 64 { 2 } else { 1 };
                let specials = [0, 1, -1, 2, 3, 7, min, !min];
                let x = if r.chance(60) { r.pick(&specials) } else { r.next() as i64 };
                Const::Int { ty, bits: x }
            }
        };
        let v = self.b.constant(c);
        self.add(v, ty)
    }

    /// A value of type `ty` (converted if need be): a leaf not used yet, else mostly one of
    /// the newest values, so expressions grow deep and what is stored depends on most of
    /// what was computed (a tier cannot drop it as dead code).
    fn operand(&mut self, ty: Ty) -> ValueId {
        if let Some((v, from)) = self.pending.pop() {
            return self.convert(v, from, ty);
        }
        if self.pool.is_empty() || self.r.chance(10) {
            return self.constant(ty);
        }
        let n = self.pool.len();
        let (v, from) = if self.r.chance(60) {
            self.pool[n - 1 - self.r.below(n.min(3))]
        } else {
            let same: Vec<(ValueId, Ty)> = self.pool.iter().copied().filter(|(_, t)| *t == ty).collect();
            if !same.is_empty() && self.r.chance(60) {
                self.r.pick(&same)
            } else {
                self.pool[self.r.below(n)]
            }
        };
        self.convert(v, from, ty)
    }

    /// Converts `v` from `from` to `to` through a random valid cast chain.
    fn convert(&mut self, v: ValueId, from: Ty, to: Ty) -> ValueId {
        if from == to {
            return v;
        }
        let out = match (from, to) {
            (Ty::Pred, _) if to.is_int() => {
                let op = if self.r.chance(50) { CastOp::SExt } else { CastOp::ZExt };
                self.b.cast(op, Ty::Pred, to, v)
            }
            (Ty::Pred, _) => {
                let i = self.convert(v, Ty::Pred, Ty::I32);
                return self.convert(i, Ty::I32, to);
            }
            (_, Ty::Pred) if from.is_int() => {
                if self.r.chance(50) {
                    self.b.cast(CastOp::Trunc, from, Ty::Pred, v)
                } else {
                    let z = self.b.constant(Const::Int { ty: from, bits: 0 });
                    self.b.cmp(CmpOp::Ne, from, v, z)
                }
            }
            (_, Ty::Pred) => {
                let z = self.constant(from);
                let op = self.r.pick(&[CmpOp::FLt, CmpOp::FGe, CmpOp::FNe, CmpOp::FEq]);
                self.b.cmp(op, from, v, z)
            }
            _ if from.is_int() && to.is_int() => {
                if to.bits() > from.bits() {
                    let op = if self.r.chance(50) { CastOp::SExt } else { CastOp::ZExt };
                    self.b.cast(op, from, to, v)
                } else {
                    self.b.cast(CastOp::Trunc, from, to, v)
                }
            }
            (Ty::I16, Ty::F32) if self.r.chance(40) => self.b.cast(CastOp::F16ToF32, from, to, v),
            (Ty::F32, Ty::I16) if self.r.chance(40) => self.b.cast(CastOp::F32ToF16, from, to, v),
            _ if from.is_int() => {
                if from.bits() == to.bits() && self.r.chance(30) {
                    self.b.cast(CastOp::Bitcast, from, to, v)
                } else {
                    let op = if self.r.chance(50) { CastOp::SIToFP } else { CastOp::UIToFP };
                    self.b.cast(op, from, to, v)
                }
            }
            _ if to.is_int() => {
                if from.bits() == to.bits() && self.r.chance(30) {
                    self.b.cast(CastOp::Bitcast, from, to, v)
                } else {
                    let op = if self.r.chance(50) { CastOp::FPToSISat } else { CastOp::FPToUISat };
                    self.b.cast(op, from, to, v)
                }
            }
            (Ty::F32, Ty::F64) => self.b.cast(CastOp::FPExt, from, to, v),
            _ => self.b.cast(CastOp::FPTrunc, from, to, v),
        };
        self.add(out, to)
    }

    fn int_const(&mut self, ty: Ty, x: i64) -> ValueId {
        self.b.constant(Const::Int { ty, bits: x })
    }

    /// One random operation on values from the pool.
    fn step(&mut self) {
        let ty = self.r.pick(&TYPES);
        match self.r.below(7) {
            0 => self.unary(ty),
            1 | 2 => self.binary(ty),
            3 => {
                let a = self.operand(ty);
                let b = self.operand(ty);
                let op = if ty.is_float() {
                    self.r.pick(&[CmpOp::FEq, CmpOp::FNe, CmpOp::FLt, CmpOp::FLe, CmpOp::FGt, CmpOp::FGe])
                } else if ty == Ty::Pred {
                    self.r.pick(&[CmpOp::Eq, CmpOp::Ne])
                } else {
                    self.r.pick(&[
                        CmpOp::Eq,
                        CmpOp::Ne,
                        CmpOp::Slt,
                        CmpOp::Sle,
                        CmpOp::Sgt,
                        CmpOp::Sge,
                        CmpOp::Ult,
                        CmpOp::Ule,
                        CmpOp::Ugt,
                        CmpOp::Uge,
                    ])
                };
                let v = self.b.cmp(op, ty, a, b);
                self.add(v, Ty::Pred);
            }
            4 => {
                let c = self.operand(Ty::Pred);
                let a = self.operand(ty);
                let b = self.operand(ty);
                let v = self.b.select(ty, c, a, b);
                self.add(v, ty);
            }
            6 => {
                let ty = self.r.pick(&[Ty::F32, Ty::F32, Ty::F64]);
                let (a, b, c) = (self.operand(ty), self.operand(ty), self.operand(ty));
                let v = self.b.fma(ty, a, b, c);
                self.add(v, ty);
            }
            _ => {
                let ty = self.r.pick(&[Ty::F32, Ty::F32, Ty::F64]);
                let func = self.r.pick(&MathFn::ALL);
                let args = (0..func.arity()).map(|_| self.operand(ty)).collect();
                let v = self.b.math(func, ty, args);
                self.add(v, ty);
            }
        }
    }

    fn unary(&mut self, ty: Ty) {
        let ops: &[UnOp] = match ty {
            Ty::Pred => &[UnOp::Not],
            Ty::F32 | Ty::F64 => {
                &[UnOp::Neg, UnOp::Abs, UnOp::Sqrt, UnOp::Floor, UnOp::Ceil, UnOp::Trunc, UnOp::RoundEven]
            }
            _ => &[UnOp::Neg, UnOp::Abs, UnOp::Not, UnOp::Popcnt, UnOp::Clz],
        };
        let op = self.r.pick(ops);
        let a = self.operand(ty);
        let v = self.b.unary(op, ty, a);
        self.add(v, ty);
    }

    fn binary(&mut self, ty: Ty) {
        let a = self.operand(ty);
        let mut b = self.operand(ty);
        let op = match ty {
            Ty::Pred => self.r.pick(&[BinOp::And, BinOp::Or, BinOp::Xor]),
            Ty::F32 | Ty::F64 => {
                self.r.pick(&[BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::FDiv, BinOp::FMax, BinOp::FMin])
            }
            _ => {
                let op = self.r.pick(&[
                    BinOp::Add,
                    BinOp::Sub,
                    BinOp::Mul,
                    BinOp::SDiv,
                    BinOp::UDiv,
                    BinOp::SRem,
                    BinOp::URem,
                    BinOp::And,
                    BinOp::Or,
                    BinOp::Xor,
                    BinOp::Shl,
                    BinOp::LShr,
                    BinOp::AShr,
                    BinOp::SMax,
                    BinOp::SMin,
                    BinOp::UMax,
                    BinOp::UMin,
                ]);
                b = self.guard(op, ty, a, b);
                op
            }
        };
        let v = self.b.binary(op, ty, a, b);
        self.add(v, ty);
    }

    /// The divisor or shift amount made safe the way the lowering does: a zero divisor (and
    /// -1 under a MIN dividend) becomes 1; a shift amount is masked below the bit width.
    fn guard(&mut self, op: BinOp, ty: Ty, a: ValueId, b: ValueId) -> ValueId {
        match op {
            BinOp::SDiv | BinOp::SRem | BinOp::UDiv | BinOp::URem => {
                let zero = self.int_const(ty, 0);
                let one = self.int_const(ty, 1);
                let mut bad = self.b.cmp(CmpOp::Eq, ty, b, zero);
                if matches!(op, BinOp::SDiv | BinOp::SRem) {
                    let min = self.int_const(ty, i64::MIN >> (64 - ty.bits()));
                    let m1 = self.int_const(ty, -1);
                    let is_min = self.b.cmp(CmpOp::Eq, ty, a, min);
                    let is_m1 = self.b.cmp(CmpOp::Eq, ty, b, m1);
                    let overflow = self.b.binary(BinOp::And, Ty::Pred, is_min, is_m1);
                    bad = self.b.binary(BinOp::Or, Ty::Pred, bad, overflow);
                }
                self.b.select(ty, bad, one, b)
            }
            BinOp::Shl | BinOp::LShr | BinOp::AShr => {
                let mask = self.int_const(ty, i64::from(ty.bits()) - 1);
                self.b.binary(BinOp::And, ty, b, mask)
            }
            _ => b,
        }
    }

    /// The value `back` places from the newest in the pool, as a `ty`: what a store writes,
    /// so the end of the expression chain is live.
    fn sink(&mut self, ty: Ty, back: usize) -> ValueId {
        match self.pool.len().checked_sub(1 + back).map(|i| self.pool[i]) {
            Some((v, from)) => self.convert(v, from, ty),
            None => self.operand(ty),
        }
    }

    /// A value chosen per element under `AnyLane`, the shape `MathOps::choose` emits: a local
    /// starts at one value, and a branch taken when any lane's predicate holds computes another
    /// and selects by that predicate, so it computes the same however often it runs.
    fn choose(&mut self) {
        let ty = self.r.pick(&[Ty::F32, Ty::I32, Ty::F64, Ty::I64]);
        let a = self.sink(ty, 0);
        let local = self.b.local(ty, a);
        let c = self.sink(Ty::Pred, 1);
        let any = self.b.let_(Op::AnyLane { a: c });
        let pool = self.pool.clone();
        self.b.begin_if(any);
        for _ in 0..self.r.range(1, 3) {
            self.step();
        }
        let b = self.sink(ty, 0);
        let v = self.b.select(ty, c, b, a);
        self.b.set_local(local, v);
        self.b.end_if();
        self.pool = pool;
        let v = self.b.get_local(local);
        self.add(v, ty);
    }

    /// A load whose index comes from data: `(%x & MAX) % len` into `buf`.
    fn gather(&mut self, buf: BufId, mem: MemType, len: i64) {
        let x = self.operand(Ty::I64);
        let max = self.int_const(Ty::I64, i64::MAX);
        let nonneg = self.b.binary(BinOp::And, Ty::I64, x, max);
        let index = IndexExpr {
            terms: vec![Term { src: IndexSrc::Value(nonneg), div: 1, modulo: Some(len), scale: 1 }],
            offset: 0,
        };
        let v = self.b.load(buf, index);
        self.add(v, mem.reg());
        self.pending.push((v, mem.reg()));
    }
}

/// A random kernel that verifies and runs without faults on any buffer contents (module doc).
pub fn random_kernel(seed: u64) -> Kernel {
    let mut rng = Rng(seed ^ 0x5eed_0f7e_55e4_a11c);
    let r = &mut rng;
    let grid = r.range(1, 3);
    let depth = r.below(4);
    let b = KernelBuilder::new(format!("random_{seed}"), grid);
    let mut dims = vec![Dim { var: b.grid_var(), start: 0, trip: grid }];
    // Reductions keep the loops from `reduce_from` on out of the output's index.
    let reduce_from = if depth > 0 && r.chance(35) { Some(r.below(depth)) } else { None };
    let outputs_mem: Vec<MemType> = (0..r.range(1, 2)).map(|_| random_mem(r)).collect();
    let packed_out = outputs_mem.iter().any(|m| matches!(m, MemType::Packed { .. }));
    let mut acc = None;
    let mut g = Gen { r, b, pool: Vec::new(), pending: Vec::new() };
    for level in 0..depth {
        if reduce_from == Some(level) {
            let ty = g.r.pick(&TYPES);
            let init = g.constant(ty);
            g.pool.clear();
            acc = Some((g.b.local(ty, init), ty, dims.clone()));
        }
        let start = if g.r.chance(20) { g.r.range(-2, 2) } else { 0 };
        // A reduction over the innermost loop alone gets trips long enough to fill lanes.
        let long = level + 1 == depth && reduce_from == Some(level);
        let trip = if long { g.r.range(1, 40) } else { g.r.range(1, 6) };
        let var = g.b.begin_loop(start, start + trip);
        dims.push(Dim { var, start, trip });
    }

    let mut loads = Vec::new();
    for i in 0..g.r.range(1, 3) {
        let mem = random_mem(g.r);
        let (index, span) = random_index(g.r, &dims, false, None);
        let len = span + g.r.range(0, 2);
        let buf = g.b.buffer(format!("in{i}"), mem, len, false);
        loads.push((buf, index, mem, len));
    }
    for (buf, index, mem, _) in &loads {
        let v = g.b.load(*buf, index.clone());
        g.add(v, mem.reg());
        g.pending.push((v, mem.reg()));
    }
    if g.r.chance(30) {
        let v = g.b.let_(Op::Index(random_index(g.r, &dims, false, None).0));
        g.add(v, Ty::I64);
    }
    for _ in 0..g.r.range(2, 14) {
        g.step();
    }
    if g.r.chance(30) {
        g.choose();
        g.step();
    }
    if g.r.chance(25) {
        let (buf, _, mem, len) = loads[g.r.below(loads.len())];
        g.gather(buf, mem, len);
        g.step();
    }

    // Where each output's element per iteration lives: all dims for elementwise outputs,
    // the dims outside the reduction for the reduction's output.
    let elementwise = acc.is_none() || g.r.chance(30);
    let mut stores = Vec::new();
    for (i, mem) in outputs_mem.iter().enumerate() {
        let reduction_output = i == 0 && acc.is_some();
        if !reduction_output && !elementwise {
            continue;
        }
        let over = if reduction_output { acc.as_ref().map(|a| a.2.clone()).unwrap_or_default() } else { dims.clone() };
        let align = match mem {
            MemType::Packed { bits, .. } => 8 / i64::from(*bits),
            _ => 1,
        };
        let (index, span) = random_index(g.r, &over, true, Some(align));
        let buf = g.b.buffer(format!("out{i}"), *mem, span + g.r.range(0, 2), true);
        stores.push((buf, index, *mem, reduction_output));
    }
    for (n, (buf, index, mem, reduction_output)) in stores.iter().enumerate() {
        if *reduction_output {
            continue;
        }
        let x = g.sink(mem.reg(), n);
        if g.r.chance(20) {
            let c = g.sink(Ty::Pred, n + 1);
            let (buf, index, reg) = (*buf, index.clone(), mem.reg());
            let y = g.sink(reg, n + 2);
            let pool = g.pool.clone();
            g.b.if_else(
                c,
                |b| b.store(buf, index.clone(), x),
                |b| {
                    let z = b.unary(if reg == Ty::Pred { UnOp::Not } else { UnOp::Abs }, reg, y);
                    b.store(buf, index.clone(), z)
                },
            );
            g.pool = pool;
        } else {
            g.b.store(*buf, index.clone(), x);
        }
    }
    let mut reducer = None;
    if let Some((local, ty, _)) = acc.clone() {
        let x = g.sink(ty, 0);
        let old = g.b.get_local(local);
        let op = match ty {
            Ty::Pred => g.r.pick(&[BinOp::And, BinOp::Or, BinOp::Xor]),
            Ty::F32 | Ty::F64 => g.r.pick(&[BinOp::Add, BinOp::Mul, BinOp::FMax, BinOp::FMin]),
            _ => g.r.pick(&[BinOp::Add, BinOp::Xor, BinOp::SMax, BinOp::UMin, BinOp::Mul]),
        };
        let new = g.b.binary(op, ty, old, x);
        g.b.set_local(local, new);
        reducer = Some(Reduction { local, op, ty });
    }

    // Close the loops, innermost first; only an innermost loop without an accumulator or a
    // packed store gets a vector width.
    for level in (0..depth).rev() {
        let innermost = level + 1 == depth;
        let carries = reduce_from.is_some_and(|k| level >= k);
        // A reduction over the innermost loop alone may run in lanes.
        let lanes = innermost && reduce_from == Some(level) && !packed_out;
        if innermost && !carries && !packed_out && g.r.chance(60) {
            let w = g.r.pick(&[2u32, 4, 8, 16]);
            let trip = dims[level + 1].trip;
            let tail = if trip % i64::from(w) == 0 { Tail::None } else { Tail::Peel };
            g.b.end_loop_vectorized(w, tail);
        } else if let (true, Some(red)) = (lanes && g.r.chance(80), reducer) {
            let w = g.r.pick(&[2u32, 4, 8, 16]);
            let trip = dims[level + 1].trip;
            let tail = if trip % i64::from(w) == 0 { Tail::None } else { Tail::Peel };
            g.b.end_loop_reducing(w, tail, vec![red]);
        } else {
            g.b.end_loop();
        }
        if reduce_from == Some(level) {
            let (buf, index, mem, _) = stores.iter().find(|s| s.3).cloned().expect("the reduction has an output");
            let (local, ty, _) = acc.clone().expect("a reduction declares its local");
            let total = g.b.get_local(local);
            g.pool = vec![(total, ty)];
            let v = g.convert(total, ty, mem.reg());
            g.b.store(buf, index, v);
        }
    }
    g.b.finish()
}

/// Random contents for every buffer of `kernel` (outputs too, so a tier that skips a store
/// shows): floats mix specials (zeros, infinities, NaN, subnormals) with small values,
/// integers mix edge values with random bits, predicates are mostly 0/1 bytes.
pub fn random_buffers(kernel: &Kernel, seed: u64) -> Vec<Vec<u8>> {
    let mut r = Rng(seed ^ 0xb0ff_e250);
    kernel
        .buffers
        .iter()
        .map(|b| {
            let n = usize::try_from(b.len).unwrap_or(0);
            match b.mem {
                MemType::Pred => (0..n).map(|_| r.pick(&[0u8, 1, 1, 0, 2])).collect(),
                MemType::Packed { bits, .. } => {
                    (0..(n * usize::from(bits)).div_ceil(8)).map(|_| r.next() as u8).collect()
                }
                MemType::Scalar(Ty::F32) => (0..n)
                    .flat_map(|_| {
                        let specials = [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-40, 1.0, -1.0];
                        let x = if r.chance(20) { r.pick(&specials) } else { r.range(-8000, 8000) as f32 / 997.0 };
                        x.to_le_bytes()
                    })
                    .collect(),
                MemType::Scalar(Ty::F64) => (0..n)
                    .flat_map(|_| {
                        let specials = [0.0, -0.0, f64::INFINITY, f64::NAN, 5e-324, 1.0, -1.0];
                        let x = if r.chance(20) { r.pick(&specials) } else { r.range(-8000, 8000) as f64 / 997.0 };
                        x.to_le_bytes()
                    })
                    .collect(),
                MemType::Scalar(t) => {
                    let w = (t.bits() / 8) as usize;
                    (0..n)
                        .flat_map(|_| {
                            let x: i64 =
                                if r.chance(30) { r.pick(&[0, 1, -1, i64::MIN, i64::MAX, 2]) } else { r.next() as i64 };
                            x.to_le_bytes().into_iter().take(w).collect::<Vec<_>>()
                        })
                        .collect()
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(kernel: &Kernel, pred: &dyn Fn(&Stmt) -> bool) -> usize {
        fn walk(body: &[Stmt], pred: &dyn Fn(&Stmt) -> bool) -> usize {
            body.iter()
                .map(|s| {
                    usize::from(pred(s))
                        + match s {
                            Stmt::Loop(l) => walk(&l.body, pred),
                            Stmt::If { then_body, else_body, .. } => walk(then_body, pred) + walk(else_body, pred),
                            _ => 0,
                        }
                })
                .sum()
        }
        walk(&kernel.body, pred)
    }

    #[test]
    fn generated_kernels_verify_and_run() {
        for seed in 0..1000 {
            let k = random_kernel(seed);
            if let Err(e) = verify_kernel(&k) {
                panic!("seed {seed}: {e}\n{k}");
            }
            let mut data = random_buffers(&k, seed);
            let mut views: Vec<&mut [u8]> = data.iter_mut().map(|v| v.as_mut_slice()).collect();
            if let Err(e) = run_kernel(&k, &mut views) {
                panic!("seed {seed}: {e}\n{k}");
            }
        }
    }

    #[test]
    fn generation_is_deterministic_and_varied() {
        assert_eq!(random_kernel(7).to_string(), random_kernel(7).to_string());
        assert_eq!(random_buffers(&random_kernel(7), 3), random_buffers(&random_kernel(7), 3));
        assert_ne!(random_kernel(7).to_string(), random_kernel(8).to_string());
        // Each feature the tiers must handle shows up in a good share of 300 kernels.
        let kernels: Vec<Kernel> = (0..300).map(random_kernel).collect();
        let share = |f: &dyn Fn(&Kernel) -> bool| kernels.iter().filter(|k| f(k)).count();
        let has = |p: &'static dyn Fn(&Stmt) -> bool| move |k: &Kernel| count(k, p) > 0;
        let features: Vec<(&str, usize)> = vec![
            ("packed", share(&|k| k.buffers.iter().any(|b| matches!(b.mem, MemType::Packed { .. })))),
            ("pred memory", share(&|k| k.buffers.iter().any(|b| b.mem == MemType::Pred))),
            ("local", share(&has(&|s| matches!(s, Stmt::DeclLocal { .. })))),
            ("if", share(&has(&|s| matches!(s, Stmt::If { .. })))),
            ("any lane", share(&has(&|s| matches!(s, Stmt::Let(_, Op::AnyLane { .. }))))),
            ("vector", share(&has(&|s| matches!(s, Stmt::Loop(l) if l.vector_width > 1)))),
            ("lane reduction", share(&has(&|s| matches!(s, Stmt::Loop(l) if !l.reductions.is_empty())))),
            ("peel", share(&has(&|s| matches!(s, Stmt::Loop(l) if l.tail == Tail::Peel)))),
            ("depth 3", share(&|k| k.to_string().contains("      for "))),
            ("math", share(&has(&|s| matches!(s, Stmt::Let(_, Op::Math { .. }))))),
            ("fma", share(&has(&|s| matches!(s, Stmt::Let(_, Op::Fma { .. }))))),
            ("sdiv", share(&has(&|s| matches!(s, Stmt::Let(_, Op::Binary { op: BinOp::SDiv | BinOp::SRem, .. }))))),
            (
                "shift",
                share(&has(&|s| {
                    matches!(s, Stmt::Let(_, Op::Binary { op: BinOp::Shl | BinOp::AShr | BinOp::LShr, .. }))
                })),
            ),
            ("select", share(&has(&|s| matches!(s, Stmt::Let(_, Op::Select { .. }))))),
            ("cast", share(&has(&|s| matches!(s, Stmt::Let(_, Op::Cast { .. }))))),
            ("div/mod index", share(&|k| k.to_string().lines().any(|l| l.contains(" / ") || l.contains(" % ")))),
            ("gather", share(&|k| k.to_string().contains("[%"))),
            ("negative offset", share(&|k| k.to_string().contains("] -") || k.to_string().contains(" - "))),
        ];
        for (name, n) in features {
            assert!(n >= 15, "only {n} of 300 kernels have {name}");
        }
    }

    /// (buffer, element) per store; (buffer, byte, grid index) per packed store.
    type Stores = (Vec<(u32, i64)>, Vec<(u32, i64, i64)>);

    /// Every (buffer, element) stored to, once per iteration that stores it, and for packed
    /// buffers which grid index wrote each byte. A `then` and `else` pair count as one store.
    fn stores(k: &Kernel) -> Stores {
        fn walk(body: &[Stmt], env: &mut Vec<(VarId, i64)>, out: &mut Stores) {
            for s in body {
                match s {
                    Stmt::Loop(l) => {
                        for i in l.start..l.end {
                            env.push((l.var, i));
                            walk(&l.body, env, out);
                            env.pop();
                        }
                    }
                    Stmt::If { then_body, .. } => walk(then_body, env, out),
                    Stmt::Store { buf, index, mem, .. } => {
                        let mut at = index.offset;
                        for t in &index.terms {
                            let IndexSrc::Var(v) = t.src else { panic!("outputs use variable indices") };
                            let mut x = env.iter().rev().find(|(w, _)| *w == v).unwrap().1 / t.div;
                            if let Some(m) = t.modulo {
                                x %= m;
                            }
                            at += x * t.scale;
                        }
                        out.0.push((buf.0, at));
                        if let MemType::Packed { bits, .. } = mem {
                            out.1.push((buf.0, at / (8 / i64::from(*bits)), env[0].1));
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut out = (Vec::new(), Vec::new());
        for g in 0..k.grid.extent {
            walk(&k.body, &mut vec![(k.grid.var, g)], &mut out);
        }
        out
    }

    #[test]
    fn results_do_not_depend_on_execution_order() {
        let mut packed = 0;
        for seed in 0..1000 {
            let k = random_kernel(seed);
            let (mut elements, bytes) = stores(&k);
            let n = elements.len();
            elements.sort();
            elements.dedup();
            assert_eq!(elements.len(), n, "seed {seed} stores an element twice\n{k}");
            let mut owners = std::collections::HashMap::new();
            for (buf, byte, grid) in bytes {
                packed += 1;
                let owner = *owners.entry((buf, byte)).or_insert(grid);
                assert_eq!(
                    owner, grid,
                    "seed {seed}: grid indices {owner} and {grid} share byte {byte} of b{buf}\n{k}"
                );
            }
        }
        assert!(packed > 0);
    }
}
