//! Convolutions on both JIT tiers against the reference interpreter: every module in
//! `lower/tests/conv/` (every dimension-label order, 0 to 3 spatial dimensions, strides,
//! padding including negative, dilations, reversal, feature and batch groups, integer,
//! predicate, half and mixed-precision types, tiled and column-major layouts; the `rt_`
//! modules through the runtime's convolution), on one thread and on two.

use tessera::{Backend, Client, ClientOptions, CompileOptions};
use tessera_hlo::{ElementType, Literal, Shape};

fn modules() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lower/tests/conv");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "hlo"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    out.sort();
    assert!(out.len() >= 30, "the convolution modules are missing from {}", dir.display());
    out
}

/// splitmix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Floats in [-2, 2); integers with arbitrary bits (so sums wrap); predicates.
fn args(shapes: &[Shape], seed: u64) -> Vec<Literal> {
    let mut rng = Rng(seed);
    shapes
        .iter()
        .map(|s| {
            let a = s.as_array().unwrap();
            let n = a.dims.iter().product::<i64>() as usize;
            let et = a.element_type;
            let bits = (0..n)
                .map(|_| {
                    let f = rng.unit() * 4.0 - 2.0;
                    let r = rng.next();
                    match et {
                        ElementType::F32 => u128::from((f as f32).to_bits()),
                        ElementType::F64 => u128::from(f.to_bits()),
                        ElementType::BF16 => u128::from(half::bf16::from_f64(f).to_bits()),
                        ElementType::F16 => u128::from(half::f16::from_f64(f).to_bits()),
                        ElementType::Pred => u128::from(r % 4 == 0),
                        _ => u128::from(r & ((1u128 << et.bit_width()) - 1) as u64),
                    }
                })
                .collect();
            Literal::from_bits_vec(s.clone(), bits).unwrap()
        })
        .collect()
}

fn float_of(et: ElementType, bits: u128) -> f64 {
    match et {
        ElementType::F16 => half::f16::from_bits(bits as u16).to_f64(),
        ElementType::BF16 => half::bf16::from_bits(bits as u16).to_f64(),
        ElementType::F32 => f64::from(f32::from_bits(bits as u32)),
        _ => f64::from_bits(bits as u64),
    }
}

/// Integers and predicates exactly; floats within a relative tolerance of the type plus an
/// absolute slack for cancellation in sums of a few hundred products.
fn compare(got: &Literal, want: &Literal) -> Result<(), String> {
    let et = want.element_type();
    let (rel, abs) = match et {
        ElementType::F16 => (2e-3, 1e-2),
        ElementType::BF16 => (1.6e-2, 8e-2),
        ElementType::F32 => (2e-5, 2e-4),
        _ => (1e-12, 1e-11),
    };
    if got.element_count() != want.element_count() {
        return Err(format!("{} elements, want {}", got.element_count(), want.element_count()));
    }
    for i in 0..want.element_count() {
        let (g, w) = (got.get_bits(i).unwrap(), want.get_bits(i).unwrap());
        let ok = if et.is_float() {
            let (a, b) = (float_of(et, g), float_of(et, w));
            (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rel * a.abs().max(b.abs()) + abs
        } else {
            g == w
        };
        if !ok {
            return Err(format!("element {i}: got bits {g:#x}, want {w:#x}"));
        }
    }
    Ok(())
}

#[test]
fn convolutions_on_both_tiers_match_the_interpreter() {
    let interp = Client::new(Backend::Interp).unwrap();
    let mut tiers = Vec::new();
    for backend in [Backend::Cranelift, Backend::Llvm] {
        for threads in [1, 2] {
            let client = Client::with_options(backend, &ClientOptions { threads: Some(threads), ..Default::default() });
            tiers.push((format!("{backend} x{threads}"), client.unwrap()));
        }
    }
    let opts = CompileOptions::default();
    let mut failures = Vec::new();
    for (name, text) in modules() {
        let reference = interp.compile_text(&text, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        let a = args(reference.parameter_shapes(), name.len() as u64 * 7919);
        let want = reference.run(&a).unwrap_or_else(|e| panic!("{name}: interp: {e}"));
        for (tier, client) in &tiers {
            let result = client.compile_text(&text, &opts).and_then(|exe| exe.run(&a));
            match result {
                Ok(got) => {
                    if let Err(e) = compare(&got[0], &want[0]) {
                        failures.push(format!("{name} on {tier}: {e}"));
                    }
                }
                Err(e) => failures.push(format!("{name} on {tier}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_infinite_kernel_value_leaves_padded_outputs_finite_on_both_tiers() {
    // The runtime's blocks multiply padding zeros by the kernel; the reference skips padding,
    // so 0 * inf must not turn those outputs into NaN.
    let (_, text) = modules().into_iter().find(|(n, _)| n == "rt_nhwc_same").unwrap();
    let interp = Client::new(Backend::Interp).unwrap();
    let opts = CompileOptions::default();
    let reference = interp.compile_text(&text, &opts).unwrap();
    let mut a = args(reference.parameter_shapes(), 11);
    let w = &a[1];
    let mut bits: Vec<u128> = (0..w.element_count()).map(|i| w.get_bits(i).unwrap()).collect();
    bits[0] = u128::from(f32::INFINITY.to_bits());
    a[1] = Literal::from_bits_vec(w.shape().clone(), bits).unwrap();
    let want = reference.run(&a).unwrap();
    let finite = |l: &Literal| {
        (0..l.element_count()).filter(|&i| f32::from_bits(l.get_bits(i).unwrap() as u32).is_finite()).count()
    };
    assert!(finite(&want[0]) > 0 && finite(&want[0]) < want[0].element_count());
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let got = Client::new(backend).unwrap().compile_text(&text, &opts).unwrap().run(&a).unwrap();
        assert_eq!(finite(&got[0]), finite(&want[0]), "{backend}");
        compare(&got[0], &want[0]).unwrap_or_else(|e| panic!("{backend}: {e}"));
    }
}
