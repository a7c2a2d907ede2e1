//! Judging a backend's output against the interpreter's.
//!
//! Outputs the generator proved exact (`generate/facts.rs`: integer, predicate and data
//! movement results, and IEEE-correctly-rounded float arithmetic) must match bit for bit, a
//! float zero's sign aside. Noisy float outputs (downstream of a transcendental, a float sum
//! or a dot) pass when `|got - want| <= rtol * |want| + atol`, with `rtol` a per-type budget
//! of a few hundred ulps (f32, f64; the sums' reassociation) or a few ulps (f16, bf16, whose
//! only noise is a rare double rounding), and `atol = rtol * M` for `M` the largest
//! magnitude a noisy value may reach ([`facts::noisy_mag`]): the generator keeps noisy
//! values within `M` and away from singularities, so an error of a few ulps of `M` is all
//! reassociation and libm differences can produce, even after a cancellation.

use tessera_hlo::corpus::tolerance;
use tessera_hlo::{ElementType, Literal};

use super::generate::facts;
use super::generate::Check;

/// `rtol` for noisy outputs of `ty`.
pub fn rtol(ty: ElementType) -> Option<f64> {
    match ty {
        ElementType::F64 => Some(1e-12),
        ElementType::F32 => Some(2e-5),
        ElementType::F16 => Some(4e-3),
        ElementType::BF16 => Some(3e-2),
        _ => None,
    }
}

/// `Ok` when `got` agrees with the interpreter's `want` under `check`; else the first
/// disagreement.
pub fn agree(got: &Literal, want: &Literal, check: Check) -> Result<(), String> {
    if got.element_type() != want.element_type() {
        return Err(format!("element type {}, expected {}", got.element_type(), want.element_type()));
    }
    let (gs, ws) = (got.shape().without_layout(), want.shape().without_layout());
    if gs != ws {
        return Err(format!("shape {gs}, expected {ws}"));
    }
    let ty = want.element_type();
    let (g, w) = (values(got)?, values(want)?);
    let bits = |l: &Literal| l.to_bits_vec().map_err(|e| e.to_string());
    let (gb, wb) = (bits(got)?, bits(want)?);
    let close = match (check, rtol(ty)) {
        (Check::Close, Some(rtol)) => Some((rtol, rtol * facts::noisy_mag(ty.bit_width()))),
        _ => None,
    };
    for j in 0..gb.len() {
        let ok = match close {
            Some((rtol, atol)) => {
                (g[j].is_nan() && w[j].is_nan()) || g[j] == w[j] || (g[j] - w[j]).abs() <= atol + rtol * w[j].abs()
            }
            // Exact: the same bits; for floats a zero's sign aside (XLA leaves max(-0, +0)
            // open) and any NaN for any NaN.
            None if ty.is_float() => gb[j] == wb[j] || g[j] == w[j] || (g[j].is_nan() && w[j].is_nan()),
            None => gb[j] == wb[j],
        };
        if !ok {
            let how = match close {
                Some((rtol, atol)) => format!(" (rtol {rtol:e}, atol {atol:e})"),
                None => " (bit-exact)".to_string(),
            };
            return Err(format!("[{j}] is {}, expected {}{how}", show(ty, g[j], gb[j]), show(ty, w[j], wb[j])));
        }
    }
    Ok(())
}

fn values(l: &Literal) -> Result<Vec<f64>, String> {
    tolerance::values(l)
}

fn show(ty: ElementType, v: f64, bits: u128) -> String {
    if ty.is_float() {
        format!("{v:e} ({bits:#x})")
    } else if ty.bit_width() == 64 {
        // f64 would round 64-bit integers.
        if ty.is_signed_integral() {
            (bits as u64 as i64).to_string()
        } else {
            (bits as u64).to_string()
        }
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: Vec<f32>) -> Literal {
        Literal::from_vec(&[v.len() as i64], v).unwrap()
    }

    #[test]
    fn exact_outputs_match_bits_but_not_zero_signs() {
        assert!(agree(&f32s(vec![1.0, 0.0]), &f32s(vec![1.0, -0.0]), Check::Exact).is_ok());
        let one_ulp = f32::from_bits(1.0f32.to_bits() + 1);
        let e = agree(&f32s(vec![1.0, one_ulp]), &f32s(vec![1.0, 1.0]), Check::Exact).unwrap_err();
        assert!(e.starts_with("[1]"), "{e}");
        assert!(agree(&f32s(vec![one_ulp]), &f32s(vec![1.0]), Check::Close).is_ok());
    }

    #[test]
    fn close_outputs_allow_ulps_of_the_noisy_magnitude() {
        // A cancellation left 1e-3 of values near 64: ten ulps of 64 off is fine, a wrong
        // element is not.
        assert!(agree(&f32s(vec![1e-3 + 7.6e-5]), &f32s(vec![1e-3]), Check::Close).is_ok());
        assert!(agree(&f32s(vec![0.5]), &f32s(vec![0.25]), Check::Close).is_err());
    }

    #[test]
    fn sixty_four_bit_integers_compare_exactly() {
        let a = Literal::from_vec(&[1], vec![i64::MAX]).unwrap();
        let b = Literal::from_vec(&[1], vec![i64::MAX - 1]).unwrap();
        let e = agree(&a, &b, Check::Exact).unwrap_err();
        assert!(e.contains("9223372036854775806"), "{e}");
    }
}
