//! What the integration tests share.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The shared folder (corpus, parser suite, seeds): `$TESSERA_SHARED`, else `shared/` beside
/// the checkout. Conformance cannot be judged without it, so a missing folder fails the test
/// instead of letting it pass unchecked.
pub fn shared_dir() -> PathBuf {
    let dir = std::env::var_os("TESSERA_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    assert!(
        dir.join("corpus").is_dir() && dir.join("parser-suite").is_dir(),
        "the shared folder (corpus, parser-suite) is not at {}: put it beside the checkout or set TESSERA_SHARED",
        dir.display()
    );
    dir
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

    /// An index into something of length `n` (0 when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The corpus's counter-based generator for benchmark arguments (corpus README, "Benchmark
/// cases and generated arguments"): splitmix64 of the flat index, so every element is
/// independent of the others.
pub fn bench_bits(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How a generated argument's values are drawn.
#[derive(Clone, Copy, Debug)]
pub enum BenchDist {
    /// `lo + (hi - lo) * u` in f64 with `u` the top 24 bits as a fraction, then rounded to the
    /// element type.
    Uniform { lo: f64, hi: f64 },
    /// `lo + (bits >> 32) % (hi - lo)`.
    RandInt { lo: i64, hi: i64 },
}

/// A generated argument of `n` elements of the numpy dtype `dtype`, as little-endian
/// row-major bytes (what a row-major literal holds).
pub fn bench_bytes(dtype: &str, n: usize, seed: u64, dist: BenchDist) -> Result<Vec<u8>, String> {
    let width = match dtype {
        "float64" | "int64" | "uint64" => 8,
        "float32" | "int32" | "uint32" => 4,
        "float16" | "bfloat16" | "int16" | "uint16" => 2,
        "int8" | "uint8" => 1,
        other => return Err(format!("generated arguments of dtype {other} are not supported")),
    };
    let mut out = Vec::with_capacity(n * width);
    for i in 0..n as u64 {
        let z = bench_bits(seed, i);
        // Integers keep their value (wrapped to the width below); floats go through f64.
        let (f, int) = match dist {
            BenchDist::Uniform { lo, hi } => {
                let f = lo + (hi - lo) * ((z >> 40) as f64 / (1u64 << 24) as f64);
                (f, f as i64)
            }
            BenchDist::RandInt { lo, hi } => {
                let v = lo.wrapping_add(((z >> 32) % (hi.wrapping_sub(lo).max(1) as u64)) as i64);
                (v as f64, v)
            }
        };
        match dtype {
            "float64" => out.extend_from_slice(&f.to_le_bytes()),
            "float32" => out.extend_from_slice(&(f as f32).to_le_bytes()),
            "float16" => out.extend_from_slice(&half::f16::from_f64(f).to_le_bytes()),
            "bfloat16" => out.extend_from_slice(&half::bf16::from_f64(f).to_le_bytes()),
            _ => out.extend_from_slice(&int.to_le_bytes()[..width]),
        }
    }
    Ok(out)
}
