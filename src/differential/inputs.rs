//! Arguments for a generated program: every entry parameter drawn from the distribution its
//! header names, from a stream seeded by the program's seed, so a saved file regenerates the
//! very arguments it failed on.

use tessera_hlo::{ElementType, Literal, Module};

use super::generate::{ArgDist, Header};
use super::rng::Rng;

/// Logical arguments (no layout: the executable lays them out) for `module`'s entry.
pub fn arguments(module: &Module, header: &Header) -> Result<Vec<Literal>, String> {
    let shapes = module.entry_comp().parameter_shapes();
    if shapes.len() != header.args.len() {
        return Err(format!("{} parameters but the header describes {}", shapes.len(), header.args.len()));
    }
    let mut rng = Rng::new(header.seed ^ 0xA5A5_5A5A_0F0F_F0F0);
    shapes
        .iter()
        .zip(&header.args)
        .enumerate()
        .map(|(i, (shape, dist))| {
            let a = shape.as_array().ok_or_else(|| format!("parameter {i} is not an array"))?;
            let n = a.element_count().ok_or_else(|| format!("parameter {i} has a dynamic shape"))?;
            let mut stream = rng.fork();
            let bits = (0..n).map(|_| element(a.element_type, *dist, &mut stream)).collect::<Result<Vec<_>, _>>()?;
            Literal::from_bits_vec(shape.without_layout(), bits).map_err(|e| format!("parameter {i}: {e}"))
        })
        .collect()
}

fn element(ty: ElementType, dist: ArgDist, rng: &mut Rng) -> Result<u128, String> {
    Ok(match dist {
        ArgDist::Uniform { lo, hi } => {
            let x = lo + (hi - lo) * rng.unit();
            match ty {
                ElementType::F64 => u128::from(x.to_bits()),
                ElementType::F32 => u128::from((x as f32).to_bits()),
                ElementType::F16 => u128::from(half::f16::from_f64(x).to_bits()),
                ElementType::BF16 => u128::from(half::bf16::from_f64(x).to_bits()),
                other => return Err(format!("a float distribution for {other}")),
            }
        }
        ArgDist::Int { lo, hi } => {
            if !ty.is_integral() {
                return Err(format!("an integer distribution for {ty}"));
            }
            let span = (i128::from(hi) - i128::from(lo) + 1) as u128;
            let v = i128::from(lo) + (u128::from(rng.next_u64()) % span) as i128;
            let w = ty.bit_width();
            (v as u128) & ((1u128 << w) - 1)
        }
        ArgDist::Pred => u128::from(rng.below(2) == 1),
    })
}
