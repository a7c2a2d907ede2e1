//! Runs a module on the interpreter and on both JIT tiers with seeded random arguments and
//! compares every result element (floats within a relative-plus-absolute tolerance, NaN equal
//! to NaN; everything else bit for bit). Shared by the window-op and batch-norm tier tests.

#![allow(dead_code)]

use tessera::{Backend, Client, CompileOptions};
use tessera_hlo::text::parse_module;
use tessera_hlo::{ElementType, Literal, Shape};
use tessera_testkit::Rng;

/// How argument values are drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Floats in [-4, 4] with ties (values on a coarse grid) and, when `specials`, some
    /// infinities and NaNs; integers small with edge values mixed in.
    Mixed { specials: bool },
    /// Floats in [0.5, 2.5]: well-conditioned statistics (batch norm).
    Positive,
}

fn random_bits(et: ElementType, rng: &mut Rng, values: Values) -> u128 {
    use ElementType as E;
    let f: f64 = match values {
        Values::Positive => rng.uniform(0.5, 2.5),
        Values::Mixed { specials } => {
            if specials && rng.below(24) == 0 {
                [f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -0.0][rng.below(4) as usize]
            } else if rng.below(3) == 0 {
                // Coarse values repeat, so windows see ties (select's first-in-window rule).
                (rng.below(9) as f64 - 4.0) * 0.5
            } else {
                rng.uniform(-4.0, 4.0)
            }
        }
    };
    match et {
        E::Pred => u128::from(rng.below(2) == 1),
        E::F16 => u128::from(half::f16::from_f64(f).to_bits()),
        E::BF16 => u128::from(half::bf16::from_f64(f).to_bits()),
        E::F32 => u128::from((f as f32).to_bits()),
        E::F64 => u128::from(f.to_bits()),
        _ => {
            let w = et.bit_width();
            let mask: u64 = if w >= 64 { u64::MAX } else { (1u64 << w) - 1 };
            let v: i64 = match rng.below(8) {
                0 => rng.next_u64() as i64,
                _ => rng.below(41) as i64 - 20,
            };
            u128::from(v as u64 & mask)
        }
    }
}

fn random_literal(shape: &Shape, rng: &mut Rng, values: Values) -> Literal {
    let a = shape.as_array().expect("array parameter");
    let n = a.dims.iter().product::<i64>() as usize;
    let bits: Vec<u128> = (0..n).map(|_| random_bits(a.element_type, rng, values)).collect();
    let mut row_major = a.clone();
    row_major.layout = None;
    Literal::from_bits_vec(Shape::Array(row_major), bits).expect("literal")
}

fn float_of(et: ElementType, bits: u128) -> f64 {
    match et {
        ElementType::F16 => half::f16::from_bits(bits as u16).to_f64(),
        ElementType::BF16 => half::bf16::from_bits(bits as u16).to_f64(),
        ElementType::F32 => f64::from(f32::from_bits(bits as u32)),
        _ => f64::from_bits(bits as u64),
    }
}

/// Relative tolerance per float type; the absolute one is `atol`.
fn rtol(et: ElementType) -> f64 {
    match et {
        ElementType::F16 => 2e-3,
        ElementType::BF16 => 1.6e-2,
        ElementType::F32 => 2e-5,
        _ => 1e-12,
    }
}

fn compare(got: &Literal, want: &Literal, atol: f64) -> Result<(), String> {
    let et = want.element_type();
    if got.element_type() != et || got.element_count() != want.element_count() {
        return Err(format!("got {}, want {}", got.shape(), want.shape()));
    }
    let n = want.element_count();
    let mut bad = Vec::new();
    for i in 0..n {
        let (g, w) = (got.get_bits(i).unwrap_or(u128::MAX), want.get_bits(i).unwrap_or(0));
        let ok = if et.is_float() {
            let (a, b) = (float_of(et, g), float_of(et, w));
            (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rtol(et) * a.abs().max(b.abs()) + atol
        } else {
            g == w
        };
        if !ok {
            let show = |bits| if et.is_float() { format!("{}", float_of(et, bits)) } else { format!("{bits:#x}") };
            bad.push(format!("element {i}: got {}, want {}", show(g), show(w)));
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("{} of {n} elements differ; first: {}", bad.len(), bad[0]))
    }
}

/// Runs `text` on every backend with random arguments from `seeds`, and checks the JIT tiers'
/// results against the interpreter's. Panics with the module and the first difference.
pub fn check_tiers(text: &str, seeds: &[u64], values: Values, atol: f64) {
    let module = parse_module(text).unwrap_or_else(|e| panic!("parse: {e}\n{text}"));
    let interp = Client::new(Backend::Interp).unwrap().compile(&module, &CompileOptions::default()).unwrap();
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let exe = Client::new(backend)
            .unwrap()
            .compile(&module, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{backend}: compile: {e}\n{text}"));
        for &seed in seeds {
            let mut rng = Rng::new(seed);
            let args: Vec<Literal> =
                module.entry_comp().parameter_shapes().iter().map(|s| random_literal(s, &mut rng, values)).collect();
            let want = interp.run(&args).unwrap_or_else(|e| panic!("interp: {e}\n{text}"));
            let got = exe.run(&args).unwrap_or_else(|e| panic!("{backend}: run: {e}\n{text}"));
            assert_eq!(got.len(), want.len(), "{backend}: result count\n{text}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.shape(), w.shape(), "{backend}: result {i} shape\n{text}");
                if let Err(e) = compare(g, w, atol) {
                    panic!("{backend}, seed {seed}, result {i}: {e}\n{text}");
                }
            }
        }
    }
}
