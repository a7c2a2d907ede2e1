//! Shared by tier tests: seeded arguments, a comparison within each float type's tolerance, a
//! bit-for-bit agreement of the tiers with the interpreter, and where a corpus case lives.

#![allow(dead_code)]

use std::path::PathBuf;

use tessera::{Backend, Client, ClientOptions, CompileOptions};
use tessera_hlo::{ElementType, Literal, Shape};
use tessera_testkit::Rng;

/// Runs `text` on the interpreter and both JIT tiers; every result leaf must agree bit for bit
/// (and come out in the same layout). Returns the interpreter's results.
pub fn agree(text: &str, args: &[Literal]) -> Vec<Literal> {
    let compile = |b: Backend| {
        Client::new(b)
            .unwrap()
            .compile_text(text, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{b}: {e}\n{text}"))
    };
    let reference = compile(Backend::Interp).run(args).unwrap();
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let out = compile(backend).run(args).unwrap_or_else(|e| panic!("{backend}: {e}\n{text}"));
        assert_eq!(out.len(), reference.len(), "{backend}");
        for (i, (o, r)) in out.iter().zip(&reference).enumerate() {
            assert_eq!(o.shape(), r.shape(), "{backend}: result {i}\n{text}");
            let (ob, rb) = (o.to_bits_vec().unwrap(), r.to_bits_vec().unwrap());
            if let Some(at) = (0..ob.len()).find(|&k| ob[k] != rb[k]) {
                panic!(
                    "{backend}: result {i} differs from the interpreter at element {at}: {:#x} vs {:#x}\n{text}",
                    ob[at], rb[at]
                );
            }
        }
    }
    reference
}

/// Runs each `(name, text)` module on the interpreter and on both JIT tiers with one thread
/// and two, on the same seeded arguments (seed: the name's length times `seed`), and compares
/// the first result ([`compare`]); one line per failure.
pub fn failures_against_interpreter<T: AsRef<str>>(modules: &[(&str, T)], seed: u64) -> Vec<String> {
    let interp = Client::new(Backend::Interp).unwrap();
    let opts = CompileOptions::default();
    let mut failures = Vec::new();
    for (name, text) in modules {
        let text = text.as_ref();
        let reference = interp.compile_text(text, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        let a = args(reference.parameter_shapes(), name.len() as u64 * seed);
        let want = reference.run(&a).unwrap_or_else(|e| panic!("{name}: interp: {e}"));
        for backend in [Backend::Cranelift, Backend::Llvm] {
            for threads in [1, 2] {
                let client =
                    Client::with_options(backend, &ClientOptions { threads: Some(threads), ..Default::default() })
                        .unwrap();
                match client.compile_text(text, &opts).and_then(|exe| exe.run(&a)) {
                    Ok(got) => {
                        if let Err(e) = compare(&got[0], &want[0]) {
                            failures.push(format!("{name} on {backend} x{threads}: {e}"));
                        }
                    }
                    Err(e) => failures.push(format!("{name} on {backend} x{threads}: {e}")),
                }
            }
        }
    }
    failures
}

/// The folder of corpus case `name` in `$TESSERA_SHARED` (default `../shared` beside the
/// repository); a missing corpus fails the test, never skips it.
pub fn corpus_case(name: &str) -> PathBuf {
    let shared = match std::env::var_os("TESSERA_SHARED") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    let dir = shared.join("corpus").join(name);
    assert!(dir.is_dir(), "the shared corpus is missing at {} (set TESSERA_SHARED)", dir.display());
    dir
}

/// Floats (and both parts of complex numbers) in [-2, 2); integers with arbitrary bits (so sums
/// wrap); predicates.
pub fn args(shapes: &[Shape], seed: u64) -> Vec<Literal> {
    let mut rng = Rng::new(seed);
    shapes
        .iter()
        .map(|s| {
            let a = s.as_array().unwrap();
            let n = a.dims.iter().product::<i64>() as usize;
            let et = a.element_type;
            let bits = (0..n)
                .map(|_| {
                    let f = rng.uniform(-2.0, 2.0);
                    let r = rng.next_u64();
                    // A complex element's bits: the real part's low, the imaginary part's high.
                    let g = rng.uniform(-2.0, 2.0);
                    match et {
                        ElementType::C64 => u128::from((f as f32).to_bits()) | u128::from((g as f32).to_bits()) << 32,
                        ElementType::C128 => u128::from(f.to_bits()) | u128::from(g.to_bits()) << 64,
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

pub fn float_of(et: ElementType, bits: u128) -> f64 {
    match et {
        ElementType::F16 => half::f16::from_bits(bits as u16).to_f64(),
        ElementType::BF16 => half::bf16::from_bits(bits as u16).to_f64(),
        ElementType::F32 => f64::from(f32::from_bits(bits as u32)),
        _ => f64::from_bits(bits as u64),
    }
}

/// Integers and predicates exactly; floats (each part of a complex number) within a relative
/// tolerance of the type plus an absolute slack for cancellation in sums of a few hundred
/// products.
pub fn compare(got: &Literal, want: &Literal) -> Result<(), String> {
    let et = want.element_type();
    let (rel, abs) = match et {
        ElementType::F16 => (2e-3, 1e-2),
        ElementType::BF16 => (1.6e-2, 8e-2),
        ElementType::F32 | ElementType::C64 => (2e-5, 2e-4),
        _ => (1e-12, 1e-11),
    };
    let close = |et: ElementType, g: u128, w: u128| {
        let (a, b) = (float_of(et, g), float_of(et, w));
        (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rel * a.abs().max(b.abs()) + abs
    };
    if got.element_count() != want.element_count() {
        return Err(format!("{} elements, want {}", got.element_count(), want.element_count()));
    }
    for i in 0..want.element_count() {
        let (g, w) = (got.get_bits(i).unwrap(), want.get_bits(i).unwrap());
        let ok = if et.is_float() {
            close(et, g, w)
        } else if et.is_complex() {
            let (part, bits) = if et == ElementType::C64 { (ElementType::F32, 32) } else { (ElementType::F64, 64) };
            let mask = (1u128 << bits) - 1;
            close(part, g & mask, w & mask) && close(part, g >> bits, w >> bits)
        } else {
            g == w
        };
        if !ok {
            return Err(format!("element {i}: got bits {g:#x}, want {w:#x}"));
        }
    }
    Ok(())
}
