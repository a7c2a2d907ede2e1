//! Register values as raw bits (masked to the type's width) and their place in buffers.

use tessera_lower::kernel::{MemType, Ty};

pub fn width_mask(ty: Ty) -> u64 {
    match ty.bits() {
        64 => u64::MAX,
        w => (1u64 << w) - 1,
    }
}

/// The bits of `v` as a signed number of `ty`'s width.
pub fn sext(ty: Ty, v: u64) -> i64 {
    let shift = 64 - ty.bits();
    ((v << shift) as i64) >> shift
}

pub fn mem_of(ty: Ty) -> MemType {
    if ty == Ty::Pred {
        MemType::Pred
    } else {
        MemType::Scalar(ty)
    }
}

/// Bytes per element of a whole-byte memory type.
pub fn bytes(ty: Ty) -> usize {
    if ty == Ty::Pred {
        1
    } else {
        ty.bits() as usize / 8
    }
}

pub fn encode(ty: Ty, values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()[..bytes(ty)].to_vec()).collect()
}

pub fn decode(ty: Ty, buf: &[u8]) -> Vec<u64> {
    buf.chunks(bytes(ty))
        .map(|c| {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect()
}

/// Edge cases of each type, as bits.
pub fn samples(ty: Ty) -> Vec<u64> {
    match ty {
        Ty::Pred => vec![0, 1],
        Ty::F32 => {
            [0.0f32, -0.0, 1.0, -1.5, 2.5, 3.7, -2.5, 0.5, 1e-40, -1e30, 65504.0, 3e9, -3e9, 1e20, 255.5, -128.7]
                .iter()
                .map(|f| u64::from(f.to_bits()))
                .chain([0x7fc0_0000, 0x7f80_0000, 0xff80_0000, 0x7fa0_0001])
                .collect()
        }
        Ty::F64 => {
            [0.0f64, -0.0, 1.0, -1.5, 2.5, 3.7, -2.5, 0.5, 1e-310, -1e300, 65504.0, 3e9, -3e19, 1e20, 255.5, -128.7]
                .iter()
                .map(|f| f.to_bits())
                .chain([0x7ff8_0000_0000_0000, 0x7ff0_0000_0000_0000, 0xfff0_0000_0000_0000])
                .collect()
        }
        _ => {
            let w = ty.bits();
            let min = 1u64 << (w - 1);
            [0, 1, 2, 3, 7, 8, 100, min, min - 1, min + 1, u64::MAX, u64::MAX - 1, u64::MAX - 6, 0x5555_5555_5555_5555]
                .iter()
                .map(|v| v & width_mask(ty))
                .collect()
        }
    }
}

/// Equal as register values: floats compare NaN-ness, not NaN payloads (the kernel IR leaves
/// payloads open, as IEEE does).
pub fn same(ty: Ty, a: u64, b: u64) -> bool {
    match ty {
        Ty::F32 => {
            let (x, y) = (f32::from_bits(a as u32), f32::from_bits(b as u32));
            (x.is_nan() && y.is_nan()) || a == b
        }
        Ty::F64 => {
            let (x, y) = (f64::from_bits(a), f64::from_bits(b));
            (x.is_nan() && y.is_nan()) || a == b
        }
        _ => a & width_mask(ty) == b & width_mask(ty),
    }
}
