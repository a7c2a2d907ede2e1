//! Loads and stores: plain scalars, predicates (one byte each, any nonzero byte true) and
//! sub-byte elements packed low bits first (stores read-modify-write their byte).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Type, Value};
use tessera_lower::kernel::{BufId, IndexExpr, MemType, Ty, ValueId};

use super::function::{cl_type, mem_flags, Translator};
use super::index::access_form;
use super::{Failure, Result};

/// Where a packed element sits: the address of its byte and its bit position in it.
struct PackedSlot {
    addr: Value,
    shift: Value,
    mask: i64,
}

fn packed_bits(bits: u8) -> Result<u32> {
    match bits {
        1 | 2 | 4 => Ok(u32::from(bits)),
        _ => Err(Failure::Unsupported(format!("packed elements of {bits} bits (1, 2 and 4 are packed)"))),
    }
}

impl Translator<'_, '_> {
    /// `v`'s bits as type `to` (of the same size).
    pub(crate) fn reinterpret(&mut self, v: Value, from: Type, to: Type) -> Value {
        if from == to {
            v
        } else {
            self.b.ins().bitcast(to, MemFlagsData::new(), v)
        }
    }

    fn packed_slot(&mut self, buf: BufId, index: &IndexExpr, mem: MemType, bits: u8) -> Result<PackedSlot> {
        let bits = packed_bits(bits)?;
        let per_byte = 8 / bits;
        let idx = self.index(index, access_form(buf, mem)?)?;
        let base = self.buffer(buf)?;
        let ins = self.b.ins();
        let byte = ins.ushr_imm_u(idx, i64::from(per_byte.trailing_zeros()));
        let addr = self.b.ins().iadd(base, byte);
        let lane = self.b.ins().band_imm_u(idx, i64::from(per_byte - 1));
        let shift = self.b.ins().ishl_imm_u(lane, i64::from(bits.trailing_zeros()));
        let shift = self.b.ins().ireduce(types::I8, shift);
        Ok(PackedSlot { addr, shift, mask: (1i64 << bits) - 1 })
    }

    pub(crate) fn load(&mut self, buf: BufId, index: &IndexExpr, mem: MemType) -> Result<(Value, Ty)> {
        if let Some((var, var_type)) = self.promoted(buf) {
            // The one element, whatever the index says (it is in bounds, so it is 0).
            let v = self.b.use_var(var);
            return match mem {
                MemType::Pred => Ok((self.b.ins().icmp_imm_u(IntCC::NotEqual, v, 0), Ty::Pred)),
                MemType::Scalar(ty) => Ok((self.reinterpret(v, var_type, cl_type(ty)), ty)),
                MemType::Packed { .. } => Err(Failure::Malformed(format!("packed buffer {} in a variable", buf.0))),
            };
        }
        match mem {
            MemType::Scalar(ty) => {
                let addr = self.index(index, access_form(buf, mem)?)?;
                Ok((self.b.ins().load(cl_type(ty), mem_flags(), addr, 0), ty))
            }
            MemType::Pred => {
                let addr = self.index(index, access_form(buf, mem)?)?;
                let byte = self.b.ins().load(types::I8, mem_flags(), addr, 0);
                Ok((self.b.ins().icmp_imm_u(IntCC::NotEqual, byte, 0), Ty::Pred))
            }
            MemType::Packed { bits, pred } => {
                let slot = self.packed_slot(buf, index, mem, bits)?;
                let byte = self.b.ins().load(types::I8, mem_flags(), slot.addr, 0);
                let shifted = self.b.ins().ushr(byte, slot.shift);
                let v = self.b.ins().band_imm_u(shifted, slot.mask);
                if pred {
                    Ok((self.b.ins().icmp_imm_u(IntCC::NotEqual, v, 0), Ty::Pred))
                } else {
                    Ok((v, Ty::I8))
                }
            }
        }
    }

    pub(crate) fn store(&mut self, buf: BufId, index: &IndexExpr, mem: MemType, value: ValueId) -> Result<()> {
        let v = self.typed(value, mem.reg())?;
        if let Some((var, var_type)) = self.promoted(buf) {
            let v = match mem {
                // A `Pred` register already holds 0 or 1, the byte a predicate store writes.
                MemType::Pred => v,
                MemType::Scalar(ty) => self.reinterpret(v, cl_type(ty), var_type),
                MemType::Packed { .. } => {
                    return Err(Failure::Malformed(format!("packed buffer {} in a variable", buf.0)))
                }
            };
            self.b.def_var(var, v);
            return Ok(());
        }
        match mem {
            MemType::Scalar(_) | MemType::Pred => {
                // A `Pred` register already holds 0 or 1, the byte a predicate store writes.
                let addr = self.index(index, access_form(buf, mem)?)?;
                self.b.ins().store(mem_flags(), v, addr, 0);
            }
            MemType::Packed { bits, .. } => {
                let slot = self.packed_slot(buf, index, mem, bits)?;
                let old = self.b.ins().load(types::I8, mem_flags(), slot.addr, 0);
                let mask = self.b.ins().iconst(types::I8, slot.mask);
                let mask = self.b.ins().ishl(mask, slot.shift);
                let kept = self.b.ins().band_not(old, mask);
                let bits = self.b.ins().ishl(v, slot.shift);
                let bits = self.b.ins().band(bits, mask);
                let new = self.b.ins().bor(kept, bits);
                self.b.ins().store(mem_flags(), new, slot.addr, 0);
            }
        }
        Ok(())
    }
}
