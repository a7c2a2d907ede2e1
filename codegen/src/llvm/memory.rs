//! Loads and stores of buffer elements: plain scalars, predicates as 0/1 bytes, and sub-byte
//! elements packed low bits first (read-modify-write stores).

use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use inkwell::IntPredicate;

use tessera_lower::kernel::{BufId, IndexExpr, MemType, Ty, ValueId};

use super::function::Translator;
use crate::CodegenError;

/// Where a packed element sits: its byte's address, its bit position in that byte, and a mask
/// of its width (both `i8`).
struct PackedSlot<'ctx> {
    byte: PointerValue<'ctx>,
    shift: IntValue<'ctx>,
    mask: IntValue<'ctx>,
}

impl<'a, 'ctx> Translator<'a, 'ctx> {
    pub(super) fn base(&self, buf: BufId) -> Result<PointerValue<'ctx>, CodegenError> {
        self.bases.get(buf.0 as usize).copied().ok_or_else(|| {
            self.unsupported(format!("buffer b{} does not exist ({} buffers)", buf.0, self.kernel.buffers.len()))
        })
    }

    /// The in-memory type of a whole-byte element.
    pub(super) fn slot_type(&self, mem: MemType) -> Result<BasicTypeEnum<'ctx>, CodegenError> {
        match mem {
            MemType::Pred => Ok(self.ctx.i8_type().into()),
            MemType::Scalar(Ty::Pred) => {
                Err(self.unsupported("memory type Scalar(Pred) (predicates are MemType::Pred)"))
            }
            MemType::Scalar(ty) => Ok(self.llvm_type(ty)),
            MemType::Packed { .. } => Err(self.unsupported("a packed element has no address of its own")),
        }
    }

    /// Address of element `index` of a whole-byte element buffer.
    fn slot(&self, buf: BufId, index: &IndexExpr, mem: MemType) -> Result<PointerValue<'ctx>, CodegenError> {
        let ty = self.slot_type(mem)?;
        let base = self.base(buf)?;
        let idx = self.index(index)?;
        // SAFETY (of the IR): every access is inside the buffer (`KernelBuffer::len`), which
        // is what `inbounds` promises.
        unsafe { self.builder.build_in_bounds_gep(ty, base, &[idx], "elt") }.map_err(self.err())
    }

    fn packed_slot(&self, buf: BufId, index: &IndexExpr, bits: u8) -> Result<PackedSlot<'ctx>, CodegenError> {
        if !matches!(bits, 1 | 2 | 4) {
            return Err(self.unsupported(format!("packed elements of {bits} bits (1, 2 or 4 fit a byte evenly)")));
        }
        let (i8t, i64t) = (self.ctx.i8_type(), self.ctx.i64_type());
        let err = self.err();
        let per_byte = i64t.const_int(u64::from(8 / bits), false);
        let base = self.base(buf)?;
        let idx = self.index(index)?;
        let byte_idx = self.builder.build_int_unsigned_div(idx, per_byte, "byte").map_err(&err)?;
        let lane = self.builder.build_int_unsigned_rem(idx, per_byte, "lane").map_err(&err)?;
        let lane = self.builder.build_int_truncate(lane, i8t, "lane8").map_err(&err)?;
        let shift = self.builder.build_int_mul(lane, i8t.const_int(u64::from(bits), false), "shift").map_err(&err)?;
        // SAFETY (of the IR): the element, hence its byte, is inside the buffer.
        let byte = unsafe { self.builder.build_in_bounds_gep(i8t, base, &[byte_idx], "pbyte") }.map_err(&err)?;
        Ok(PackedSlot { byte, shift, mask: i8t.const_int((1u64 << bits) - 1, false) })
    }

    /// `Op::Load`: the register value of type `mem.reg()`.
    pub fn load(
        &self,
        buf: BufId,
        index: &IndexExpr,
        mem: MemType,
    ) -> Result<(BasicValueEnum<'ctx>, Ty), CodegenError> {
        let err = self.err();
        let i8t = self.ctx.i8_type();
        match mem {
            MemType::Pred => {
                let ptr = self.slot(buf, index, mem)?;
                let byte = self.builder.build_load(i8t, ptr, "pbyte").map_err(&err)?.into_int_value();
                let p =
                    self.builder.build_int_compare(IntPredicate::NE, byte, i8t.const_zero(), "pred").map_err(&err)?;
                Ok((p.into(), Ty::Pred))
            }
            MemType::Scalar(ty) => {
                let ptr = self.slot(buf, index, mem)?;
                Ok((self.builder.build_load(self.llvm_type(ty), ptr, "ld").map_err(&err)?, ty))
            }
            MemType::Packed { bits, pred } => {
                let slot = self.packed_slot(buf, index, bits)?;
                let byte = self.builder.build_load(i8t, slot.byte, "pbyte").map_err(&err)?.into_int_value();
                let v = self.builder.build_right_shift(byte, slot.shift, false, "bits").map_err(&err)?;
                let v = self.builder.build_and(v, slot.mask, "elem").map_err(&err)?;
                if pred {
                    let p =
                        self.builder.build_int_compare(IntPredicate::NE, v, i8t.const_zero(), "pred").map_err(&err)?;
                    Ok((p.into(), Ty::Pred))
                } else {
                    Ok((v.into(), Ty::I8))
                }
            }
        }
    }

    /// `Stmt::Store`.
    pub fn store(&self, buf: BufId, index: &IndexExpr, mem: MemType, value: ValueId) -> Result<(), CodegenError> {
        let err = self.err();
        let i8t = self.ctx.i8_type();
        let v = self.value(value, mem.reg())?;
        match mem {
            MemType::Pred => {
                let ptr = self.slot(buf, index, mem)?;
                let byte = self.builder.build_int_z_extend(v.into_int_value(), i8t, "pbyte").map_err(&err)?;
                self.builder.build_store(ptr, byte).map_err(&err)?;
            }
            MemType::Scalar(_) => {
                let ptr = self.slot(buf, index, mem)?;
                self.builder.build_store(ptr, v).map_err(&err)?;
            }
            MemType::Packed { bits, pred } => {
                let slot = self.packed_slot(buf, index, bits)?;
                let v = if pred {
                    self.builder.build_int_z_extend(v.into_int_value(), i8t, "pbits").map_err(&err)?
                } else {
                    v.into_int_value()
                };
                let v = self.builder.build_and(v, slot.mask, "bits").map_err(&err)?;
                let v = self.builder.build_left_shift(v, slot.shift, "placed").map_err(&err)?;
                let hole = self.builder.build_left_shift(slot.mask, slot.shift, "hole").map_err(&err)?;
                let keep = self.builder.build_not(hole, "keep").map_err(&err)?;
                let old = self.builder.build_load(i8t, slot.byte, "old").map_err(&err)?.into_int_value();
                let kept = self.builder.build_and(old, keep, "kept").map_err(&err)?;
                let new = self.builder.build_or(kept, v, "new").map_err(&err)?;
                self.builder.build_store(slot.byte, new).map_err(&err)?;
            }
        }
        Ok(())
    }

    /// The address of element `index` of `buf` in the buffer's own element type; for packed
    /// buffers, the address of the byte holding the element.
    pub fn element_ptr(&self, buf: BufId, index: &IndexExpr) -> Result<PointerValue<'ctx>, CodegenError> {
        let mem = self
            .kernel
            .buffers
            .get(buf.0 as usize)
            .map(|b| b.mem)
            .ok_or_else(|| self.unsupported(format!("buffer b{} does not exist", buf.0)))?;
        match mem {
            MemType::Packed { bits, .. } => Ok(self.packed_slot(buf, index, bits)?.byte),
            _ => self.slot(buf, index, mem),
        }
    }
}
