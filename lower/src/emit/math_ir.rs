//! The math functions of `math.rs` emitted as kernel IR: each trait operation is one kernel
//! op with the same IEEE semantics, so the kernel interpreter, both tiers and `math::Eval`
//! compute the same bits, and a vector loop holding them stays a vector loop.

use std::collections::HashMap;

use super::math::MathOps;
use crate::kernel::{BinOp, CastOp, CmpOp, Const, KernelBuilder, LocalId, Op, Ty, UnOp, ValueId};

/// A [`MathOps`] that appends to a kernel. Constants and negations are made once per
/// instance: one instance serves one function call, whose statements land in one scope but for
/// the branch of [`MathOps::choose`], which forgets what it made when it closes.
pub struct IrMath<'b> {
    b: &'b mut KernelBuilder,
    consts: HashMap<Const, ValueId>,
    /// Each predicate negated so far and its negation, both ways: `choose` negates its
    /// predicate for the branch, which is often a negation already.
    negations: HashMap<ValueId, ValueId>,
}

impl<'b> IrMath<'b> {
    pub fn new(b: &'b mut KernelBuilder) -> IrMath<'b> {
        IrMath { b, consts: HashMap::new(), negations: HashMap::new() }
    }

    fn constant(&mut self, c: Const) -> ValueId {
        if let Some(&v) = self.consts.get(&c) {
            return v;
        }
        let v = self.b.constant(c);
        self.consts.insert(c, v);
        v
    }

    fn fbin(&mut self, op: BinOp, a: ValueId, b: ValueId) -> ValueId {
        self.b.binary(op, Ty::F32, a, b)
    }

    fn ibin(&mut self, op: BinOp, a: ValueId, b: ValueId) -> ValueId {
        self.b.binary(op, Ty::I32, a, b)
    }

    fn shift(&mut self, op: BinOp, a: ValueId, bits: u32) -> ValueId {
        let n = self.constant(Const::Int { ty: Ty::I32, bits: i64::from(bits) });
        self.ibin(op, a, n)
    }
}

impl MathOps for IrMath<'_> {
    type F = ValueId;
    type I = ValueId;
    type P = ValueId;

    fn f(&mut self, x: f32) -> ValueId {
        self.constant(Const::F32(x.to_bits()))
    }
    fn i(&mut self, x: i32) -> ValueId {
        self.constant(Const::Int { ty: Ty::I32, bits: i64::from(x) })
    }
    fn add(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.fbin(BinOp::Add, a, b)
    }
    fn sub(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.fbin(BinOp::Sub, a, b)
    }
    fn mul(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.fbin(BinOp::Mul, a, b)
    }
    fn mul_add(&mut self, a: ValueId, b: ValueId, c: ValueId) -> ValueId {
        if self.b.fused_multiply_add() {
            self.b.fma(Ty::F32, a, b, c)
        } else {
            let t = self.fbin(BinOp::Mul, a, b);
            self.fbin(BinOp::Add, t, c)
        }
    }
    fn div(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.fbin(BinOp::FDiv, a, b)
    }
    fn sqrt(&mut self, a: ValueId) -> ValueId {
        self.b.unary(UnOp::Sqrt, Ty::F32, a)
    }
    fn neg(&mut self, a: ValueId) -> ValueId {
        self.b.unary(UnOp::Neg, Ty::F32, a)
    }
    fn abs(&mut self, a: ValueId) -> ValueId {
        self.b.unary(UnOp::Abs, Ty::F32, a)
    }
    fn floor(&mut self, a: ValueId) -> ValueId {
        self.b.unary(UnOp::Floor, Ty::F32, a)
    }
    fn round_even(&mut self, a: ValueId) -> ValueId {
        self.b.unary(UnOp::RoundEven, Ty::F32, a)
    }
    fn trunc(&mut self, a: ValueId) -> ValueId {
        self.b.unary(UnOp::Trunc, Ty::F32, a)
    }
    fn max(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.fbin(BinOp::FMax, a, b)
    }
    fn min(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.fbin(BinOp::FMin, a, b)
    }
    fn lt(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.cmp(CmpOp::FLt, Ty::F32, a, b)
    }
    fn le(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.cmp(CmpOp::FLe, Ty::F32, a, b)
    }
    fn gt(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.cmp(CmpOp::FGt, Ty::F32, a, b)
    }
    fn ge(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.cmp(CmpOp::FGe, Ty::F32, a, b)
    }
    fn eq(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.cmp(CmpOp::FEq, Ty::F32, a, b)
    }
    fn ne(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.cmp(CmpOp::FNe, Ty::F32, a, b)
    }
    fn select(&mut self, p: ValueId, a: ValueId, b: ValueId) -> ValueId {
        self.b.select(Ty::F32, p, a, b)
    }
    fn select_i(&mut self, p: ValueId, a: ValueId, b: ValueId) -> ValueId {
        self.b.select(Ty::I32, p, a, b)
    }
    fn and_p(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.binary(BinOp::And, Ty::Pred, a, b)
    }
    fn or_p(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.binary(BinOp::Or, Ty::Pred, a, b)
    }
    fn not_p(&mut self, a: ValueId) -> ValueId {
        if let Some(&n) = self.negations.get(&a) {
            return n;
        }
        let n = self.b.unary(UnOp::Not, Ty::Pred, a);
        self.negations.insert(a, n);
        self.negations.insert(n, a);
        n
    }
    fn to_bits(&mut self, a: ValueId) -> ValueId {
        self.b.cast(CastOp::Bitcast, Ty::F32, Ty::I32, a)
    }
    fn from_bits(&mut self, a: ValueId) -> ValueId {
        self.b.cast(CastOp::Bitcast, Ty::I32, Ty::F32, a)
    }
    fn to_int(&mut self, a: ValueId) -> ValueId {
        self.b.cast(CastOp::FPToSISat, Ty::F32, Ty::I32, a)
    }
    fn to_float(&mut self, a: ValueId) -> ValueId {
        self.b.cast(CastOp::SIToFP, Ty::I32, Ty::F32, a)
    }
    fn iadd(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.ibin(BinOp::Add, a, b)
    }
    fn isub(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.ibin(BinOp::Sub, a, b)
    }
    fn iand(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.ibin(BinOp::And, a, b)
    }
    fn ior(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.ibin(BinOp::Or, a, b)
    }
    fn ixor(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.ibin(BinOp::Xor, a, b)
    }
    fn shl(&mut self, a: ValueId, bits: u32) -> ValueId {
        self.shift(BinOp::Shl, a, bits)
    }
    fn shr_arith(&mut self, a: ValueId, bits: u32) -> ValueId {
        self.shift(BinOp::AShr, a, bits)
    }
    fn shr_logic(&mut self, a: ValueId, bits: u32) -> ValueId {
        self.shift(BinOp::LShr, a, bits)
    }
    fn ilt(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.cmp(CmpOp::Slt, Ty::I32, a, b)
    }
    fn ieq(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.cmp(CmpOp::Eq, Ty::I32, a, b)
    }
    /// The fast routine always, the slow one under a branch taken when any lane needs it
    /// (`Op::AnyLane`), selecting per lane: a scalar kernel pays for the slow routine only
    /// where it is needed, a vector loop only in iterations where some lane needs it, and the
    /// loop stays a vector loop.
    fn choose<const N: usize>(
        &mut self,
        p: ValueId,
        fast: impl FnOnce(&mut Self) -> [ValueId; N],
        slow: impl FnOnce(&mut Self) -> [ValueId; N],
    ) -> [ValueId; N] {
        let a = fast(self);
        let locals: [LocalId; N] = std::array::from_fn(|i| self.b.local(Ty::F32, a[i]));
        let not_p = self.not_p(p);
        let any = self.b.let_(Op::AnyLane { a: not_p });
        // Constants and negations made inside the branch are not visible after it.
        let outer = (self.consts.clone(), self.negations.clone());
        self.b.begin_if(any);
        let b = slow(self);
        for (i, &l) in locals.iter().enumerate() {
            let v = self.b.select(Ty::F32, p, a[i], b[i]);
            self.b.set_local(l, v);
        }
        self.b.end_if();
        (self.consts, self.negations) = outer;
        locals.map(|l| self.b.get_local(l))
    }
    type D = ValueId;
    fn d(&mut self, x: f64) -> ValueId {
        self.constant(Const::F64(x.to_bits()))
    }
    fn widen(&mut self, a: ValueId) -> ValueId {
        self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, a)
    }
    fn narrow(&mut self, a: ValueId) -> ValueId {
        self.b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, a)
    }
    fn dmul(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.b.binary(BinOp::Mul, Ty::F64, a, b)
    }
    fn dmul_add(&mut self, a: ValueId, b: ValueId, c: ValueId) -> ValueId {
        if self.b.fused_multiply_add() {
            self.b.fma(Ty::F64, a, b, c)
        } else {
            let t = self.b.binary(BinOp::Mul, Ty::F64, a, b);
            self.b.binary(BinOp::Add, Ty::F64, t, c)
        }
    }
    fn dround_even(&mut self, a: ValueId) -> ValueId {
        self.b.unary(UnOp::RoundEven, Ty::F64, a)
    }
    fn dto_int(&mut self, a: ValueId) -> ValueId {
        self.b.cast(CastOp::FPToSISat, Ty::F64, Ty::I32, a)
    }
}
