//! How HLO element types live in kernels: their memory form and their register form.
//!
//! f16 and bf16 are `I16` bits in memory and exactly representable `F32` values in registers
//! (every operation on them computes in f32 and rounds back, as XLA:CPU does), so values are
//! converted once at loads and stores rather than around every operation. The f8 and f4
//! formats are `I8` bits in memory and `F64` values in registers (see `minifloat.rs`);
//! sub-byte integers are `I8` registers kept wrapped to their width (see `narrow_int.rs`).

use tessera_hlo::{ElementType, LayoutMap};

use super::{half, minifloat, narrow_int};
use crate::kernel::{KernelBuilder, MemType, Ty, ValueId};
use crate::LowerError;

/// The register type values of `et` have, or `None` for types the lowering does not handle.
pub fn reg_ty(et: ElementType) -> Option<Ty> {
    use ElementType as E;
    Some(match et {
        E::Pred => Ty::Pred,
        E::S8 | E::U8 => Ty::I8,
        t if narrow_int::is_narrow_int(t) => Ty::I8,
        t if minifloat::is_minifloat(t) => Ty::F64,
        E::S16 | E::U16 => Ty::I16,
        E::S32 | E::U32 => Ty::I32,
        E::S64 | E::U64 => Ty::I64,
        E::F16 | E::BF16 | E::F32 => Ty::F32,
        E::F64 => Ty::F64,
        _ => return None,
    })
}

pub fn reg(et: ElementType, inst: &str) -> Result<Ty, LowerError> {
    reg_ty(et).ok_or_else(|| {
        let why = if et.is_complex() {
            " here (complex values are register pairs only where emit::complex handles them)"
        } else {
            ""
        };
        LowerError::unsupported(inst, format!("element type {}{why}", et.name()))
    })
}

/// The element type and register type of each part of a complex type (`None` for others).
pub fn complex_part(et: ElementType) -> Option<(ElementType, Ty)> {
    let part = et.complex_component()?;
    Some((part, reg_ty(part)?))
}

/// Fails for element types no kernel can hold (neither a register type nor a complex pair).
pub fn check_supported(et: ElementType, inst: &str) -> Result<(), LowerError> {
    if complex_part(et).is_some() {
        return Ok(());
    }
    reg(et, inst).map(|_| ())
}

/// Memory slots per element: complex elements are two floats (real part first), everything
/// else one slot of its memory type.
pub fn slots(et: ElementType) -> i64 {
    if et.is_complex() {
        2
    } else {
        1
    }
}

pub fn is_half(et: ElementType) -> bool {
    matches!(et, ElementType::F16 | ElementType::BF16)
}

pub fn is_minifloat(et: ElementType) -> bool {
    minifloat::is_minifloat(et)
}

pub fn is_unsigned(et: ElementType) -> bool {
    et.is_unsigned_integral()
}

/// The memory form of an array with this layout map.
pub fn mem_type(map: &LayoutMap, inst: &str) -> Result<MemType, LowerError> {
    use ElementType as E;
    let et = map.element_type();
    let bits = map.element_size_bits();
    let natural = u32::try_from(et.byte_size() * 8).unwrap_or(0);
    if let Some((_, part)) = complex_part(et) {
        if bits != natural {
            return Err(LowerError::unsupported(inst, format!("element size E({bits}) for {}", et.name())));
        }
        return Ok(MemType::Scalar(part));
    }
    let ty = reg(et, inst)?;
    if et == E::Pred {
        return Ok(if bits >= 8 { MemType::Pred } else { MemType::Packed { bits: bits as u8, pred: true } });
    }
    let sub_byte = et.bit_width() < 8;
    if sub_byte && bits < 8 && bits >= et.bit_width() {
        return Ok(MemType::Packed { bits: bits as u8, pred: false });
    }
    if bits != natural {
        return Err(LowerError::unsupported(inst, format!("element size E({bits}) for {}", et.name())));
    }
    Ok(match et {
        E::F16 | E::BF16 => MemType::Scalar(Ty::I16),
        t if minifloat::is_minifloat(t) => MemType::Scalar(Ty::I8),
        _ => MemType::Scalar(ty),
    })
}

/// Turns a loaded element into its register form.
pub fn from_mem(b: &mut KernelBuilder, et: ElementType, v: ValueId) -> ValueId {
    match et {
        ElementType::F16 => half::f16_to_f32(b, v),
        ElementType::BF16 => half::bf16_to_f32(b, v),
        t if minifloat::is_minifloat(t) => minifloat::to_f64(b, t, v),
        // Packed loads zero-extend, and memory written by others may hold any upper bits.
        t if narrow_int::is_narrow_int(t) => narrow_int::wrap(b, t, v),
        _ => v,
    }
}

/// Turns a register value into what a store of `et` writes.
pub fn to_mem(b: &mut KernelBuilder, et: ElementType, v: ValueId) -> ValueId {
    match et {
        ElementType::F16 => half::f32_to_f16(b, v),
        ElementType::BF16 => half::f32_to_bf16(b, v),
        t if minifloat::is_minifloat(t) => minifloat::from_f64(b, t, v),
        _ => v,
    }
}
