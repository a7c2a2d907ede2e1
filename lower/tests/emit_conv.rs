//! Convolutions through emit_kernel + the kernel interpreter against `hlo::eval`: every module
//! in `tests/conv/` (dimension labels in any order, 0 to 3 spatial dimensions, strides, low and
//! high padding including negative, base and window dilation, reversal, feature and batch
//! groups, integer, predicate, f16/bf16 and mixed-precision types, tiled and column-major
//! layouts), on the emitted loops and on the runtime call, which the `rt_` modules take.

mod support;

use support::{check_module_slack, Rng};
use tessera_hlo::{ElementType, Literal, Module, Shape};
use tessera_lower::kernel::Stmt;

fn modules() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conv");
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

/// Finite random arguments (a sum of products of specials would be NaN almost everywhere):
/// floats in [-2, 2), integers over their whole range or small, predicates mostly false.
fn args(module: &Module, seed: u64) -> Vec<Literal> {
    let mut rng = Rng::new(seed);
    module
        .entry_comp()
        .parameter_shapes()
        .iter()
        .map(|s: &Shape| {
            let a = s.as_array().unwrap();
            let n = a.dims.iter().product::<i64>() as usize;
            let et = a.element_type;
            let bits = (0..n)
                .map(|_| {
                    let f = rng.uniform(-2.0, 2.0);
                    match et {
                        ElementType::F32 => u128::from((f as f32).to_bits()),
                        ElementType::F64 => u128::from(f.to_bits()),
                        ElementType::BF16 => u128::from(half::bf16::from_f64(f).to_bits()),
                        ElementType::F16 => u128::from(half::f16::from_f64(f).to_bits()),
                        ElementType::Pred => u128::from(rng.below(4) == 0),
                        _ => support::random_bits(et, &mut rng),
                    }
                })
                .collect();
            Literal::from_bits_vec(s.clone(), bits).unwrap()
        })
        .collect()
}

fn calls_runtime(stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Call { func, .. } => func.starts_with("tessera_rt_conv_"),
        Stmt::Loop(l) => calls_runtime(&l.body),
        Stmt::If { then_body, else_body, .. } => calls_runtime(then_body) || calls_runtime(else_body),
        _ => false,
    })
}

#[test]
fn every_convolution_form_matches_the_reference() {
    let mut failures = Vec::new();
    for (name, text) in modules() {
        let module = tessera_hlo::text::parse_module(&text).unwrap_or_else(|e| panic!("{name}: parse: {e}"));
        for seed in [1, 2] {
            match check_module_slack(&module, &args(&module, seed), 4.0) {
                Ok(kernel) => {
                    assert_eq!(calls_runtime(&kernel.body), name.starts_with("rt_"), "{name}: which path\n{kernel}");
                }
                Err(e) => failures.push(format!("{name} (seed {seed}): {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_runtime_call_skips_padding_when_the_kernel_is_not_finite() {
    // An infinite kernel value: padding positions must contribute nothing (not 0 * inf = NaN).
    let (_, text) = modules().into_iter().find(|(n, _)| n == "rt_nhwc_same").unwrap();
    let module = tessera_hlo::text::parse_module(&text).unwrap();
    let mut a = args(&module, 3);
    let w = a[1].clone();
    let mut bits: Vec<u128> = (0..w.element_count()).map(|i| w.get_bits(i).unwrap()).collect();
    bits[5] = u128::from(f32::INFINITY.to_bits());
    a[1] = Literal::from_bits_vec(w.shape().clone(), bits).unwrap();
    let want = tessera_hlo::eval::evaluate(&module, &a).unwrap();
    let finite =
        (0..want.element_count()).filter(|&i| f32::from_bits(want.get_bits(i).unwrap() as u32).is_finite()).count();
    assert!(finite > 0, "the reference has finite results next to the padding");
    check_module_slack(&module, &a, 4.0).unwrap();
}

#[test]
fn malformed_convolutions_are_errors_not_panics() {
    let bad = [
        // Window size differs from the kernel.
        "HloModule m\nENTRY e {\n  x = f32[1,4,4,2]{3,2,1,0} parameter(0)\n  w = f32[3,3,2,2]{3,2,1,0} parameter(1)\n  ROOT c = f32[1,3,3,2]{3,2,1,0} convolution(x, w), window={size=2x2}, dim_labels=b01f_01io->b01f\n}\n",
    ];
    for text in bad {
        let module = match tessera_hlo::text::parse_module(text) {
            Ok(m) => m,
            Err(e) => panic!("the parser should leave this to the verifier: {e}"),
        };
        let err = tessera_lower::emit_kernel(&module, module.entry_comp(), "k").unwrap_err();
        assert!(err.to_string().contains("window size differs"), "{err}");
    }
}
