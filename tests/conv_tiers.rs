//! Convolutions on both JIT tiers against the reference interpreter: every module in
//! `lower/tests/conv/` (every dimension-label order, 0 to 3 spatial dimensions, strides,
//! padding including negative, dilations, reversal, feature and batch groups, integer,
//! predicate, half and mixed-precision types, tiled and column-major layouts; the `rt_`
//! modules through the runtime's convolution), on one thread and on two.

mod tier_support;

use tessera::{Backend, Client, ClientOptions, CompileOptions};
use tessera_hlo::Literal;
use tier_support::{args, compare};

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
