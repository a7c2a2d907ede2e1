//! Judging an output by the corpus rule (corpus README, "Tolerances"): elementwise
//! `|a - e| <= atol + rtol * |e|`, NaN matching NaN, infinities matching exactly; for outputs
//! known only by statistics, every sample by that rule, sums within `rtol * sum_abs + atol * n`
//! and min/max by the rule.

use crate::{ElementType, Literal};

use super::case::{Expected, Output, Stats};

/// Logical values widened to f64 (exact for every type up to 32 bits and for f64; 64-bit
/// integers beyond 2^53 would lose bits, and none of the corpus' do). A complex element gives
/// two values, real then imaginary.
pub fn values(lit: &Literal) -> Result<Vec<f64>, String> {
    let ty = lit.element_type();
    let bits = lit.to_bits_vec().map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(bits.len());
    for b in bits {
        match ty {
            ElementType::F16 => out.push(half::f16::from_bits(b as u16).to_f64()),
            ElementType::BF16 => out.push(half::bf16::from_bits(b as u16).to_f64()),
            ElementType::F32 => out.push(f64::from(f32::from_bits(b as u32))),
            ElementType::F64 => out.push(f64::from_bits(b as u64)),
            ElementType::C64 => {
                out.push(f64::from(f32::from_bits(b as u32)));
                out.push(f64::from(f32::from_bits((b >> 32) as u32)));
            }
            ElementType::C128 => {
                out.push(f64::from_bits(b as u64));
                out.push(f64::from_bits((b >> 64) as u64));
            }
            t if t.is_signed_integral() => {
                let w = t.bit_width();
                out.push((((b as u64) << (64 - w)) as i64 >> (64 - w)) as f64)
            }
            _ => out.push(b as f64),
        }
    }
    Ok(out)
}

fn close(a: f64, e: f64, rtol: f64, atol: f64) -> bool {
    if e.is_nan() {
        a.is_nan()
    } else if e.is_infinite() {
        a == e
    } else {
        (a - e).abs() <= atol + rtol * e.abs()
    }
}

/// `Ok` when `got` is what `want` allows; otherwise the first disagreement.
pub fn check(got: &Literal, want: &Output) -> Result<(), String> {
    let (rtol, atol) = (want.rtol, want.atol);
    match &want.expected {
        Expected::Unchecked => Ok(()),
        Expected::Values(e) => {
            if got.element_type() != e.element_type() {
                return Err(format!("element type {}, expected {}", got.element_type(), e.element_type()));
            }
            let (a, e) = (values(got)?, values(e)?);
            if a.len() != e.len() {
                return Err(format!("{} elements, expected {}", a.len(), e.len()));
            }
            match a.iter().zip(&e).position(|(&a, &e)| !close(a, e, rtol, atol)) {
                None => Ok(()),
                Some(j) => Err(format!("[{j}] is {}, expected {} (rtol {rtol}, atol {atol})", a[j], e[j])),
            }
        }
        Expected::Stats(s) => check_stats(&values(got)?, s, rtol, atol),
    }
}

fn check_stats(a: &[f64], s: &Stats, rtol: f64, atol: f64) -> Result<(), String> {
    if a.len() != s.n {
        return Err(format!("{} elements, expected {}", a.len(), s.n));
    }
    for &(j, e) in &s.samples {
        let got = *a.get(j).ok_or_else(|| format!("sample index {j} out of range"))?;
        if !close(got, e, rtol, atol) {
            return Err(format!("[{j}] is {got}, expected {e} (rtol {rtol}, atol {atol})"));
        }
    }
    let sum: f64 = a.iter().sum();
    let sum_abs: f64 = a.iter().map(|x| x.abs()).sum();
    let (min, max) = a.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    let bound = rtol * s.sum_abs + atol * s.n as f64;
    for (what, got, want) in [("sum", sum, s.sum), ("sum_abs", sum_abs, s.sum_abs)] {
        if (got - want).abs() > bound {
            return Err(format!("{what} is {got}, expected {want} within {bound}"));
        }
    }
    for (what, got, want) in [("min", min, s.min), ("max", max, s.max)] {
        if !close(got, want, rtol, atol) {
            return Err(format!("{what} is {got}, expected {want} (rtol {rtol}, atol {atol})"));
        }
    }
    Ok(())
}
