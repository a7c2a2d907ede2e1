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

/// A small deterministic generator (splitmix64), so random tests reproduce from their seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}
