//! What the lower crate's integration tests share: the shared folder, literal values as f64
//! (through `hlo::corpus`) and an elementwise tolerance check.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tessera_hlo::Literal;

/// The shared folder (corpus, parser suite, seeds): `$TESSERA_SHARED`, else `shared/` beside
/// the checkout. Conformance cannot be judged without it, so a missing folder fails the test
/// instead of letting it pass unchecked.
pub fn shared_dir() -> PathBuf {
    let dir = std::env::var_os("TESSERA_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    assert!(
        dir.join("corpus").is_dir(),
        "the shared folder (corpus) is not at {}: put it beside the checkout or set TESSERA_SHARED",
        dir.display()
    );
    dir
}

pub fn values(lit: &Literal) -> Vec<f64> {
    tessera_hlo::corpus::tolerance::values(lit).expect("array literal")
}

/// Whether `got` matches `expected` elementwise within `rtol`/`atol` (NaN matches NaN, an
/// infinity only itself); the first mismatch otherwise.
pub fn compare(got: &[f64], expected: &[f64], rtol: f64, atol: f64) -> Result<(), String> {
    if got.len() != expected.len() {
        return Err(format!("{} elements, expected {}", got.len(), expected.len()));
    }
    for (j, (&a, &e)) in got.iter().zip(expected).enumerate() {
        let ok = if e.is_nan() {
            a.is_nan()
        } else if e.is_infinite() {
            a == e
        } else {
            (a - e).abs() <= atol + rtol * e.abs()
        };
        if !ok {
            return Err(format!("[{j}]: got {a}, expected {e} (rtol {rtol}, atol {atol})"));
        }
    }
    Ok(())
}
