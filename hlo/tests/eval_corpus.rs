//! The interpreter against every corpus case: modules with ops it does not support are
//! counted as such (by op); every other case must match XLA:CPU's outputs within the case's
//! tolerances.

mod common;

use common::shared_dir;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use tessera_hlo::eval::{evaluate, EvalError};
use tessera_hlo::npy::read_npy;
use tessera_hlo::text::parse_module;
use tessera_hlo::{ElementType, Literal, Shape};

/// Raise this when the interpreter learns more ops; a drop means a regression.
const EXPECTED_PASSING: usize = 72;

#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool,
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    fn num(&self) -> Option<f64> {
        match self {
            Json::Num(x) => Some(*x),
            _ => None,
        }
    }
}

/// Just enough JSON for case.json (no external crates in this workspace's tests).
fn parse_json(s: &[u8], i: &mut usize) -> Json {
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

fn values(lit: &Literal) -> Vec<f64> {
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

fn flatten(lit: &Literal, out: &mut Vec<Literal>) {
    match lit.tuple_elements() {
        Some(es) => es.iter().for_each(|e| flatten(e, out)),
        None => out.push(lit.clone()),
    }
}

fn flatten_shapes(shape: &Shape, out: &mut Vec<Shape>) {
    match shape.tuple_elements() {
        Some(es) => es.iter().for_each(|e| flatten_shapes(e, out)),
        None => out.push(shape.without_layout()),
    }
}

enum Outcome {
    Pass,
    Skipped(String),
    Unsupported(String),
    Mismatch(String),
}

fn run_case(case: &Path) -> Outcome {
    let meta = fs::read(case.join("case.json")).expect("case.json");
    let meta = parse_json(&meta, &mut 0);
    let Ok(text) = fs::read_to_string(case.join("module.hlo")) else {
        return Outcome::Skipped("no module.hlo".into());
    };
    let module = parse_module(&text).expect("corpus modules parse");
    let params = module.entry_comp().parameter_shapes();
    let mut args = Vec::new();
    for (i, shape) in params.iter().enumerate() {
        let path = case.join(format!("args/{i}.npy"));
        if !path.exists() {
            return Outcome::Skipped("arguments not stored".into());
        }
        args.push(read_npy(&path, &shape.without_layout()).expect("argument npy"));
    }
    let result = match evaluate(&module, &args) {
        Ok(r) => r,
        Err(EvalError::Unsupported { opcode }) => return Outcome::Unsupported(opcode),
        Err(EvalError::UnsupportedType { element_type, .. }) => {
            return Outcome::Unsupported(format!("type {}", element_type.name()))
        }
        Err(e) => return Outcome::Mismatch(format!("error: {e}")),
    };
    let mut got = Vec::new();
    flatten(&result, &mut got);
    let mut shapes = Vec::new();
    flatten_shapes(&module.entry_comp().root_inst().shape, &mut shapes);
    let outputs = match meta.get("outputs") {
        Some(Json::Arr(o)) => o.clone(),
        _ => Vec::new(),
    };
    if got.len() != shapes.len() {
        return Outcome::Mismatch(format!("{} outputs, expected {}", got.len(), shapes.len()));
    }
    let mut checked = 0;
    for (i, (g, shape)) in got.iter().zip(&shapes).enumerate() {
        let path = case.join(format!("expected/{i}.npy"));
        if !path.exists() {
            continue;
        }
        let expected = read_npy(&path, shape).expect("expected npy");
        let o = outputs.get(i);
        let tol = |k: &str| o.and_then(|o| o.get(k)).and_then(Json::num).or_else(|| meta.get(k).and_then(Json::num));
        let (rtol, atol) = (tol("rtol").unwrap_or(0.0), tol("atol").unwrap_or(0.0));
        let (a, e) = (values(g), values(&expected));
        if a.len() != e.len() {
            return Outcome::Mismatch(format!("output {i}: {} elements, expected {}", a.len(), e.len()));
        }
        for (j, (&a, &e)) in a.iter().zip(&e).enumerate() {
            let ok = if e.is_nan() {
                a.is_nan()
            } else if e.is_infinite() {
                a == e
            } else {
                (a - e).abs() <= atol + rtol * e.abs()
            };
            if !ok {
                return Outcome::Mismatch(format!("output {i}[{j}]: got {a}, expected {e} (rtol {rtol}, atol {atol})"));
            }
        }
        checked += 1;
    }
    if checked == 0 {
        return Outcome::Skipped("no stored outputs".into());
    }
    Outcome::Pass
}

#[test]
fn interpreter_matches_xla_on_the_corpus() {
    let dir = shared_dir().join("corpus");
    let mut cases: Vec<_> = fs::read_dir(&dir).expect("corpus dir").flatten().map(|e| e.path()).collect();
    cases.sort();
    let (mut pass, mut skipped, mut mismatches) = (0, 0, Vec::new());
    let mut unsupported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for case in cases.iter().filter(|p| p.join("case.json").exists()) {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let outcome = run_case(case);
        let shown = match &outcome {
            Outcome::Pass => {
                pass += 1;
                "pass".to_string()
            }
            Outcome::Skipped(why) => {
                skipped += 1;
                format!("skipped ({why})")
            }
            Outcome::Unsupported(op) => {
                unsupported.entry(op.clone()).or_default().push(name.clone());
                format!("unsupported ({op})")
            }
            Outcome::Mismatch(m) => {
                mismatches.push(format!("{name}: {m}"));
                format!("MISMATCH {m}")
            }
        };
        println!("{name:40} {shown}");
    }
    let n_unsupported: usize = unsupported.values().map(Vec::len).sum();
    println!("\npass {pass}, unsupported {n_unsupported}, skipped {skipped}, mismatch {}", mismatches.len());
    for (op, cases) in &unsupported {
        println!("  unsupported {op}: {}", cases.join(", "));
    }
    assert!(mismatches.is_empty(), "mismatches:\n{}", mismatches.join("\n"));
    assert!(pass >= EXPECTED_PASSING, "{pass} cases pass, fewer than the {EXPECTED_PASSING} that passed before");
}
