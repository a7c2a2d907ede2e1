//! Scalar operations with exactly the semantics `tessera_lower::kernel` documents: wrapping
//! integer arithmetic (no `nsw`/`nuw`), IEEE floats without fast-math flags, intrinsics where
//! LLVM has the exact operation, and libm calls for `Math`.

use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

use tessera_lower::kernel::{BinOp, CastOp, CmpOp, Const, MathFn, Op, Ty, UnOp, ValueId};

use super::function::Translator;
use crate::CodegenError;

/// The LLVM predicate of a float comparison (`None` for integer ones).
pub fn float_predicate(op: CmpOp) -> Option<FloatPredicate> {
    Some(match op {
        CmpOp::FEq => FloatPredicate::OEQ,
        CmpOp::FLt => FloatPredicate::OLT,
        CmpOp::FLe => FloatPredicate::OLE,
        CmpOp::FGt => FloatPredicate::OGT,
        CmpOp::FGe => FloatPredicate::OGE,
        CmpOp::FNe => FloatPredicate::UNE,
        _ => return None,
    })
}

/// The LLVM predicate of an integer comparison (`None` for float ones).
pub fn int_predicate(op: CmpOp) -> Option<IntPredicate> {
    Some(match op {
        CmpOp::Eq => IntPredicate::EQ,
        CmpOp::Ne => IntPredicate::NE,
        CmpOp::Slt => IntPredicate::SLT,
        CmpOp::Sle => IntPredicate::SLE,
        CmpOp::Sgt => IntPredicate::SGT,
        CmpOp::Sge => IntPredicate::SGE,
        CmpOp::Ult => IntPredicate::ULT,
        CmpOp::Ule => IntPredicate::ULE,
        CmpOp::Ugt => IntPredicate::UGT,
        CmpOp::Uge => IntPredicate::UGE,
        _ => return None,
    })
}

impl<'a, 'ctx> Translator<'a, 'ctx> {
    /// The value of the right-hand side of a `Let`, with its type.
    pub fn op(&mut self, op: &Op) -> Result<(BasicValueEnum<'ctx>, Ty), CodegenError> {
        match op {
            Op::Const(c) => Ok((self.constant(*c)?, c.ty())),
            Op::Load { buf, index, mem } => self.load(*buf, index, *mem),
            Op::Index(index) => Ok((self.index(index)?.into(), Ty::I64)),
            Op::GetLocal(local) => {
                let (slot, ty) = self.local(*local)?;
                Ok((self.builder.build_load(self.llvm_type(ty), slot, "get").map_err(self.err())?, ty))
            }
            Op::Unary { op, ty, a } => Ok((self.unary(*op, *ty, *a)?, *ty)),
            Op::Binary { op, ty, a, b } => Ok((self.binary(*op, *ty, *a, *b)?, *ty)),
            Op::Cmp { op, ty, a, b } => Ok((self.compare(*op, *ty, *a, *b)?.into(), Ty::Pred)),
            Op::Select { ty, cond, a, b } => {
                let cond = self.value(*cond, Ty::Pred)?.into_int_value();
                let (a, b) = (self.value(*a, *ty)?, self.value(*b, *ty)?);
                Ok((self.builder.build_select(cond, a, b, "sel").map_err(self.err())?, *ty))
            }
            Op::Fma { ty, a, b, c } => {
                if !ty.is_float() {
                    return Err(self.wrong_type("fma", *ty));
                }
                let lt = self.llvm_type(*ty);
                let args = [self.float(*a, *ty)?.into(), self.float(*b, *ty)?.into(), self.float(*c, *ty)?.into()];
                Ok((self.intrinsic("llvm.fma", &[lt], &args)?, *ty))
            }
            Op::Cast { op, from, to, a } => Ok((self.cast(*op, *from, *to, *a)?, *to)),
            Op::Math { func, ty, args } => Ok((self.math(*func, *ty, args)?, *ty)),
            // One element at a time, "any lane" is this one.
            Op::AnyLane { a } => Ok((self.value(*a, Ty::Pred)?, Ty::Pred)),
        }
    }

    fn constant(&self, c: Const) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        // Floats go through their bits, so NaN payloads and -0.0 survive (the builder folds
        // the bitcast into a float constant).
        let (bits, float) = match c {
            Const::Pred(b) => return Ok(self.ctx.bool_type().const_int(u64::from(b), false).into()),
            // `const_int` keeps the low bits of the type's width, which is the contract.
            Const::Int { ty, .. } if ty.is_float() => {
                return Err(self.unsupported(format!("integer constant of type {ty:?}")))
            }
            Const::Int { ty, bits } => {
                return Ok(self.llvm_type(ty).into_int_type().const_int(bits as u64, false).into())
            }
            Const::F32(bits) => (self.ctx.i32_type().const_int(u64::from(bits), false), self.ctx.f32_type()),
            Const::F64(bits) => (self.ctx.i64_type().const_int(bits, false), self.ctx.f64_type()),
        };
        self.builder.build_bit_cast(bits, float, "fconst").map_err(self.err())
    }

    fn int(&self, id: ValueId, ty: Ty) -> Result<IntValue<'ctx>, CodegenError> {
        Ok(self.value(id, ty)?.into_int_value())
    }

    fn float(&self, id: ValueId, ty: Ty) -> Result<FloatValue<'ctx>, CodegenError> {
        Ok(self.value(id, ty)?.into_float_value())
    }

    /// Calls the intrinsic `name` overloaded on `types`.
    pub fn intrinsic(
        &self,
        name: &str,
        types: &[BasicTypeEnum<'ctx>],
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let backend =
            |message: String| CodegenError::Backend { tier: "llvm", kernel: self.kernel.name.clone(), message };
        let intrinsic =
            inkwell::intrinsics::Intrinsic::find(name).ok_or_else(|| backend(format!("no intrinsic {name}")))?;
        let f = intrinsic
            .get_declaration(self.module, types)
            .ok_or_else(|| backend(format!("no declaration of {name} for {types:?}")))?;
        let call = self.builder.build_call(f, args, "r").map_err(self.err())?;
        call.try_as_basic_value().basic().ok_or_else(|| backend(format!("{name} returned nothing")))
    }

    fn wrong_type(&self, what: impl std::fmt::Debug, ty: Ty) -> CodegenError {
        self.unsupported(format!("{what:?} on {ty:?}"))
    }

    fn unary(&self, op: UnOp, ty: Ty, a: ValueId) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let lt = self.llvm_type(ty);
        let float_intrinsic = |name: &str| -> Result<BasicValueEnum<'ctx>, CodegenError> {
            if !ty.is_float() {
                return Err(self.wrong_type(op, ty));
            }
            self.intrinsic(name, &[lt], &[self.float(a, ty)?.into()])
        };
        match op {
            UnOp::Neg if ty.is_int() => Ok(self.builder.build_int_neg(self.int(a, ty)?, "neg").map_err(&err)?.into()),
            UnOp::Neg if ty.is_float() => {
                Ok(self.builder.build_float_neg(self.float(a, ty)?, "fneg").map_err(&err)?.into())
            }
            UnOp::Abs if ty.is_int() => {
                // `false`: abs(MIN) is MIN, not poison.
                let no_poison = self.ctx.bool_type().const_zero();
                self.intrinsic("llvm.abs", &[lt], &[self.int(a, ty)?.into(), no_poison.into()])
            }
            UnOp::Abs if ty.is_float() => float_intrinsic("llvm.fabs"),
            UnOp::Not if ty.is_int() || ty == Ty::Pred => {
                Ok(self.builder.build_not(self.int(a, ty)?, "not").map_err(&err)?.into())
            }
            UnOp::Sqrt => float_intrinsic("llvm.sqrt"),
            UnOp::Floor => float_intrinsic("llvm.floor"),
            UnOp::Ceil => float_intrinsic("llvm.ceil"),
            UnOp::Trunc => float_intrinsic("llvm.trunc"),
            UnOp::RoundEven => float_intrinsic("llvm.roundeven"),
            UnOp::Popcnt if ty.is_int() => self.intrinsic("llvm.ctpop", &[lt], &[self.int(a, ty)?.into()]),
            UnOp::Clz if ty.is_int() => {
                // `false`: clz(0) is the bit width, not poison.
                let no_poison = self.ctx.bool_type().const_zero();
                self.intrinsic("llvm.ctlz", &[lt], &[self.int(a, ty)?.into(), no_poison.into()])
            }
            _ => Err(self.wrong_type(op, ty)),
        }
    }

    fn binary(&self, op: BinOp, ty: Ty, a: ValueId, b: ValueId) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let bld = &self.builder;
        let lt = self.llvm_type(ty);
        if ty.is_float() {
            let (x, y) = (self.float(a, ty)?, self.float(b, ty)?);
            let v = match op {
                BinOp::Add => bld.build_float_add(x, y, "fadd"),
                BinOp::Sub => bld.build_float_sub(x, y, "fsub"),
                BinOp::Mul => bld.build_float_mul(x, y, "fmul"),
                BinOp::FDiv => bld.build_float_div(x, y, "fdiv"),
                BinOp::FMax => return self.intrinsic("llvm.maximum", &[lt], &[x.into(), y.into()]),
                BinOp::FMin => return self.intrinsic("llvm.minimum", &[lt], &[x.into(), y.into()]),
                _ => return Err(self.wrong_type(op, ty)),
            };
            return Ok(v.map_err(&err)?.into());
        }
        let bitwise = matches!(op, BinOp::And | BinOp::Or | BinOp::Xor);
        if !(ty.is_int() || (ty == Ty::Pred && bitwise)) {
            return Err(self.wrong_type(op, ty));
        }
        let (x, y) = (self.int(a, ty)?, self.int(b, ty)?);
        let minmax = |name: &str| self.intrinsic(name, &[lt], &[x.into(), y.into()]);
        let v = match op {
            BinOp::Add => bld.build_int_add(x, y, "add"),
            BinOp::Sub => bld.build_int_sub(x, y, "sub"),
            BinOp::Mul => bld.build_int_mul(x, y, "mul"),
            BinOp::SDiv => bld.build_int_signed_div(x, y, "sdiv"),
            BinOp::UDiv => bld.build_int_unsigned_div(x, y, "udiv"),
            BinOp::SRem => bld.build_int_signed_rem(x, y, "srem"),
            BinOp::URem => bld.build_int_unsigned_rem(x, y, "urem"),
            BinOp::And => bld.build_and(x, y, "and"),
            BinOp::Or => bld.build_or(x, y, "or"),
            BinOp::Xor => bld.build_xor(x, y, "xor"),
            BinOp::Shl => bld.build_left_shift(x, y, "shl"),
            BinOp::LShr => bld.build_right_shift(x, y, false, "lshr"),
            BinOp::AShr => bld.build_right_shift(x, y, true, "ashr"),
            BinOp::SMax => return minmax("llvm.smax"),
            BinOp::SMin => return minmax("llvm.smin"),
            BinOp::UMax => return minmax("llvm.umax"),
            BinOp::UMin => return minmax("llvm.umin"),
            BinOp::FDiv | BinOp::FMax | BinOp::FMin => return Err(self.wrong_type(op, ty)),
        };
        Ok(v.map_err(&err)?.into())
    }

    fn compare(&self, op: CmpOp, ty: Ty, a: ValueId, b: ValueId) -> Result<IntValue<'ctx>, CodegenError> {
        let err = self.err();
        let fpred = float_predicate(op);
        if let Some(p) = fpred {
            if !ty.is_float() {
                return Err(self.wrong_type(op, ty));
            }
            return self.builder.build_float_compare(p, self.float(a, ty)?, self.float(b, ty)?, "fcmp").map_err(&err);
        }
        let ipred = int_predicate(op).ok_or_else(|| self.wrong_type(op, ty))?;
        // Predicates compare as the integers 0 and 1 (`true` is the greater, as unsigned).
        let pred_ok =
            ty == Ty::Pred && matches!(op, CmpOp::Eq | CmpOp::Ne | CmpOp::Ult | CmpOp::Ule | CmpOp::Ugt | CmpOp::Uge);
        if !(ty.is_int() || pred_ok) {
            return Err(self.wrong_type(op, ty));
        }
        self.builder.build_int_compare(ipred, self.int(a, ty)?, self.int(b, ty)?, "icmp").map_err(&err)
    }

    fn cast(&self, op: CastOp, from: Ty, to: Ty, a: ValueId) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let err = self.err();
        let bld = &self.builder;
        let bad = || self.unsupported(format!("cast {op:?} from {from:?} to {to:?}"));
        let int_like = |t: Ty| t.is_int() || t == Ty::Pred;
        let tt = self.llvm_type(to);
        let v: BasicValueEnum<'ctx> = match op {
            CastOp::SExt | CastOp::ZExt if int_like(from) && to.is_int() && to.bits() > from.bits() => {
                let x = self.int(a, from)?;
                let t = tt.into_int_type();
                if op == CastOp::SExt {
                    bld.build_int_s_extend(x, t, "sext")
                } else {
                    bld.build_int_z_extend(x, t, "zext")
                }
                .map_err(&err)?
                .into()
            }
            CastOp::Trunc if from.is_int() && int_like(to) && to.bits() < from.bits() => {
                bld.build_int_truncate(self.int(a, from)?, tt.into_int_type(), "trunc").map_err(&err)?.into()
            }
            CastOp::SIToFP if from.is_int() && to.is_float() => {
                bld.build_signed_int_to_float(self.int(a, from)?, tt.into_float_type(), "sitofp").map_err(&err)?.into()
            }
            CastOp::UIToFP if from.is_int() && to.is_float() => bld
                .build_unsigned_int_to_float(self.int(a, from)?, tt.into_float_type(), "uitofp")
                .map_err(&err)?
                .into(),
            CastOp::FPToSISat | CastOp::FPToUISat if from.is_float() && to.is_int() => {
                let name = if op == CastOp::FPToSISat { "llvm.fptosi.sat" } else { "llvm.fptoui.sat" };
                self.intrinsic(name, &[tt, self.llvm_type(from)], &[self.float(a, from)?.into()])?
            }
            CastOp::FPExt if from == Ty::F32 && to == Ty::F64 => {
                bld.build_float_ext(self.float(a, from)?, tt.into_float_type(), "fpext").map_err(&err)?.into()
            }
            CastOp::FPTrunc if from == Ty::F64 && to == Ty::F32 => {
                bld.build_float_trunc(self.float(a, from)?, tt.into_float_type(), "fptrunc").map_err(&err)?.into()
            }
            CastOp::Bitcast if from.bits() == to.bits() && from != Ty::Pred && to != Ty::Pred => {
                bld.build_bit_cast(self.value(a, from)?, tt, "bitcast").map_err(&err)?
            }
            // Only reached where the target converts in one instruction, and only for
            // conversions from and to memory (`translate` expands the others): LLVM's half
            // type, which F16C and AArch64 convert exactly.
            CastOp::F16ToF32 if from == Ty::I16 && to == Ty::F32 => {
                let h = bld.build_bit_cast(self.int(a, from)?, self.ctx.f16_type(), "f16").map_err(&err)?;
                bld.build_float_ext(h.into_float_value(), tt.into_float_type(), "f16ext").map_err(&err)?.into()
            }
            CastOp::F32ToF16 if from == Ty::F32 && to == Ty::I16 => {
                let h = bld.build_float_trunc(self.float(a, from)?, self.ctx.f16_type(), "f16trunc").map_err(&err)?;
                bld.build_bit_cast(h, tt, "f16bits").map_err(&err)?
            }
            _ => return Err(bad()),
        };
        Ok(v)
    }

    /// A call to the libm symbol itself (not an LLVM intrinsic): the JIT maps it to the
    /// runtime's table, and AOT objects link the same name.
    fn math(&self, func: MathFn, ty: Ty, args: &[ValueId]) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        if !ty.is_float() {
            return Err(self.wrong_type(func, ty));
        }
        if args.len() != func.arity() {
            return Err(self.unsupported(format!("{func:?} takes {} arguments, given {}", func.arity(), args.len())));
        }
        let lt = self.llvm_type(ty);
        let values = args.iter().map(|a| Ok(self.value(*a, ty)?.into())).collect::<Result<Vec<_>, CodegenError>>()?;
        if func == MathFn::Round {
            // LLVM's own round (half away from zero, exact as libm's) becomes a few
            // instructions on x86 (SSE4.1 and later), where a call stays a call.
            return self.intrinsic("llvm.round", &[lt], &values);
        }
        let types = vec![lt.into(); args.len()];
        let f = self.external(func.symbol(ty), Some(lt), &types)?;
        let call = self.builder.build_call(f, &values, "math").map_err(self.err())?;
        call.try_as_basic_value().basic().ok_or_else(|| self.unsupported(format!("{func:?} returned nothing")))
    }
}
