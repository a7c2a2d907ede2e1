//! The corpus's counter-based generator for benchmark arguments that are too large to store
//! (corpus README, "Benchmark cases and generated arguments"): splitmix64 of the flat index,
//! so every element is independent of the others and any slice can be regenerated.

use crate::{Literal, Shape};

fn bits(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How a generated argument's values are drawn (`arg_gen`'s `dist`).
#[derive(Clone, Copy, Debug)]
pub enum Dist {
    /// `lo + (hi - lo) * u` in f64 with `u` the top 24 bits as a fraction, then rounded to the
    /// element type.
    Uniform { lo: f64, hi: f64 },
    /// `lo + (bits >> 32) % (hi - lo)` (what `make_args.py` does for integer arguments).
    RandInt { lo: i64, hi: i64 },
}

/// A generated argument of logical shape `shape` (row-major) from numpy dtype `dtype`.
pub fn generate(shape: &Shape, dtype: &str, seed: u64, dist: Dist) -> Result<Literal, String> {
    let n: i64 = shape.as_array().ok_or("a generated argument must be an array")?.dims.iter().product();
    let width = match dtype {
        "float64" | "int64" | "uint64" => 8,
        "float32" | "int32" | "uint32" => 4,
        "float16" | "bfloat16" | "int16" | "uint16" => 2,
        "int8" | "uint8" => 1,
        other => return Err(format!("generated arguments of dtype {other} are not supported")),
    };
    let mut out = Vec::with_capacity(n as usize * width);
    for i in 0..n as u64 {
        let z = bits(seed, i);
        let (f, int) = match dist {
            Dist::Uniform { lo, hi } => {
                let f = lo + (hi - lo) * ((z >> 40) as f64 / (1u64 << 24) as f64);
                (f, f as i64)
            }
            Dist::RandInt { lo, hi } => {
                let v = lo.wrapping_add(((z >> 32) % (hi.wrapping_sub(lo).max(1) as u64)) as i64);
                (v as f64, v)
            }
        };
        match dtype {
            "float64" => out.extend_from_slice(&f.to_le_bytes()),
            "float32" => out.extend_from_slice(&(f as f32).to_le_bytes()),
            "float16" => out.extend_from_slice(&half::f16::from_f64(f).to_le_bytes()),
            "bfloat16" => out.extend_from_slice(&half::bf16::from_f64(f).to_le_bytes()),
            _ => out.extend_from_slice(&int.to_le_bytes()[..width]),
        }
    }
    Literal::from_physical_bytes(shape.without_layout(), out).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ElementType;

    /// Golden values printed by the corpus's `make_args.py` `generate()` for the same specs.
    #[test]
    fn first_values_match_make_args() {
        let shape = Shape::array(ElementType::F32, &[3]);
        let lit = generate(&shape, "float32", 123, Dist::Uniform { lo: -1.0, hi: 1.0 }).unwrap();
        let got: Vec<u32> = lit.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect();
        assert_eq!(got, [0x3ed3726c, 0x3f740478, 0x3f3825a6]);

        let shape = Shape::array(ElementType::S32, &[3]);
        let lit = generate(&shape, "int32", 9, Dist::RandInt { lo: -5, hi: 7 }).unwrap();
        assert_eq!(lit.to_vec::<i32>().unwrap(), [5, 5, 0]);
    }
}
