//! What the lower crate's integration tests share: the shared folder, a minimal case.json
//! reader and the corpus tolerance check (the same rules as `hlo/tests/eval_corpus.rs`).

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tessera_hlo::{ElementType, Literal};

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

#[derive(Debug, Clone)]
pub enum Json {
    Null,
    Bool,
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    pub fn num(&self) -> Option<f64> {
        match self {
            Json::Num(x) => Some(*x),
            _ => None,
        }
    }
}

/// Just enough JSON for case.json (no external crates in this workspace's tests).
pub fn parse_json(s: &[u8], i: &mut usize) -> Json {
    while s[*i].is_ascii_whitespace() {
        *i += 1;
    }
    match s[*i] {
        b'{' => {
            *i += 1;
            let mut kv = Vec::new();
            loop {
                while s[*i].is_ascii_whitespace() || s[*i] == b',' {
                    *i += 1;
                }
                if s[*i] == b'}' {
                    *i += 1;
                    return Json::Obj(kv);
                }
                let Json::Str(k) = parse_json(s, i) else { panic!("bad json key") };
                while s[*i].is_ascii_whitespace() || s[*i] == b':' {
                    *i += 1;
                }
                kv.push((k, parse_json(s, i)));
            }
        }
        b'[' => {
            *i += 1;
            let mut v = Vec::new();
            loop {
                while s[*i].is_ascii_whitespace() || s[*i] == b',' {
                    *i += 1;
                }
                if s[*i] == b']' {
                    *i += 1;
                    return Json::Arr(v);
                }
                v.push(parse_json(s, i));
            }
        }
        b'"' => {
            *i += 1;
            let mut out = String::new();
            while s[*i] != b'"' {
                if s[*i] == b'\\' {
                    *i += 1;
                    out.push(match s[*i] {
                        b'n' => '\n',
                        b't' => '\t',
                        b'u' => {
                            *i += 4;
                            '?'
                        }
                        c => c as char,
                    });
                } else {
                    out.push(s[*i] as char);
                }
                *i += 1;
            }
            *i += 1;
            Json::Str(out)
        }
        b't' => {
            *i += 4;
            Json::Bool
        }
        b'f' => {
            *i += 5;
            Json::Bool
        }
        b'n' => {
            *i += 4;
            Json::Null
        }
        _ => {
            let start = *i;
            while *i < s.len() && (s[*i].is_ascii_digit() || b"+-.eEInfinityNaN".contains(&s[*i])) {
                *i += 1;
            }
            Json::Num(std::str::from_utf8(&s[start..*i]).unwrap().parse().unwrap_or(f64::NAN))
        }
    }
}

pub fn values(lit: &Literal) -> Vec<f64> {
    let ty = lit.element_type();
    lit.to_bits_vec()
        .expect("array")
        .into_iter()
        .map(|b| match ty {
            ElementType::F16 => half::f16::from_bits(b as u16).to_f64(),
            ElementType::BF16 => half::bf16::from_bits(b as u16).to_f64(),
            ElementType::F32 => f64::from(f32::from_bits(b as u32)),
            ElementType::F64 => f64::from_bits(b as u64),
            t if t.is_signed_integral() => {
                let w = t.bit_width();
                (((b as u64) << (64 - w)) as i64 >> (64 - w)) as f64
            }
            _ => b as f64,
        })
        .collect()
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
