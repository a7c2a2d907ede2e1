//! The interpreter against every corpus case: modules with ops it does not support are
//! counted as such (by op); every other case must match XLA:CPU's outputs within the case's
//! tolerances.

mod common;

use common::{bench_bytes, shared_dir, BenchDist};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use tessera_hlo::eval::{evaluate, EvalError};
use tessera_hlo::npy::read_npy;
use tessera_hlo::text::parse_module;
use tessera_hlo::{ElementType, Literal, Shape};

/// Raise this when the interpreter learns more ops; a drop means a regression.
const EXPECTED_PASSING: usize = 97;

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
    fn str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }
    fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(v) => v,
            _ => &[],
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
    Pass(Duration),
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
        if path.exists() {
            args.push(read_npy(&path, &shape.without_layout()).expect("argument npy"));
            continue;
        }
        let file = format!("args/{i}.npy");
        let spec = meta
            .get("arg_gen")
            .map(Json::arr)
            .unwrap_or(&[])
            .iter()
            .find(|a| a.get("file").and_then(Json::str) == Some(&file));
        match spec {
            Some(spec) => args.push(generated_arg(spec, shape)),
            None => return Outcome::Skipped("arguments not stored".into()),
        }
    }
    let start = Instant::now();
    let evaluated = evaluate(&module, &args);
    let elapsed = start.elapsed();
    drop(args);
    let result = match evaluated {
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
        let o = outputs.get(i);
        let tol = |k: &str| o.and_then(|o| o.get(k)).and_then(Json::num).or_else(|| meta.get(k).and_then(Json::num));
        let (rtol, atol) = (tol("rtol").unwrap_or(0.0), tol("atol").unwrap_or(0.0));
        let close = |a: f64, e: f64| {
            if e.is_nan() {
                a.is_nan()
            } else if e.is_infinite() {
                a == e
            } else {
                (a - e).abs() <= atol + rtol * e.abs()
            }
        };
        let path = case.join(format!("expected/{i}.npy"));
        let a = values(g);
        if !path.exists() {
            let stats = meta
                .get("expected_stats")
                .map(Json::arr)
                .unwrap_or(&[])
                .iter()
                .find(|s| s.get("index").and_then(Json::num) == Some(i as f64));
            if let Some(stats) = stats {
                if let Err(m) = check_stats(&a, stats, rtol, atol, close) {
                    return Outcome::Mismatch(format!("output {i}: {m}"));
                }
                checked += 1;
            }
            continue;
        }
        let expected = read_npy(&path, shape).expect("expected npy");
        let e = values(&expected);
        if a.len() != e.len() {
            return Outcome::Mismatch(format!("output {i}: {} elements, expected {}", a.len(), e.len()));
        }
        for (j, (&a, &e)) in a.iter().zip(&e).enumerate() {
            if !close(a, e) {
                return Outcome::Mismatch(format!("output {i}[{j}]: got {a}, expected {e} (rtol {rtol}, atol {atol})"));
            }
        }
        checked += 1;
    }
    if checked == 0 {
        return Outcome::Skipped("no stored outputs".into());
    }
    Outcome::Pass(elapsed)
}

/// A benchmark argument that is not stored, regenerated from its `arg_gen` entry.
fn generated_arg(spec: &Json, shape: &Shape) -> Literal {
    let field = |k: &str| spec.get(k).unwrap_or_else(|| panic!("arg_gen entry without {k}"));
    let num = |k: &str| field(k).num().unwrap_or_else(|| panic!("arg_gen {k} is not a number"));
    let dtype = field("dtype").str().expect("arg_gen dtype");
    let n: usize = field("shape").arr().iter().map(|d| d.num().expect("arg_gen dimension") as usize).product();
    let dist = match spec.get("dist").and_then(Json::str).unwrap_or("uniform") {
        "uniform" => BenchDist::Uniform { lo: num("lo"), hi: num("hi") },
        "randint" => BenchDist::RandInt { lo: num("lo") as i64, hi: num("hi") as i64 },
        other => panic!("arg_gen distribution {other} is not known"),
    };
    let bytes = bench_bytes(dtype, n, num("seed") as u64, dist).expect("generated argument");
    Literal::from_physical_bytes(shape.without_layout(), bytes).expect("generated argument literal")
}

/// Checks an output that is not stored against its `expected_stats`: every sample within the
/// tolerance, sum and sum_abs within `rtol * sum_abs + atol * n`, min and max within the
/// tolerance.
fn check_stats(a: &[f64], stats: &Json, rtol: f64, atol: f64, close: impl Fn(f64, f64) -> bool) -> Result<(), String> {
    let stat = |k: &str| stats.get(k).and_then(Json::num).ok_or_else(|| format!("expected_stats without {k}"));
    let n: usize =
        stats.get("shape").map(Json::arr).unwrap_or(&[]).iter().map(|d| d.num().unwrap_or(0.0) as usize).product();
    if a.len() != n {
        return Err(format!("{} elements, expected {n}", a.len()));
    }
    for s in stats.get("samples").map(Json::arr).unwrap_or(&[]) {
        let (j, e) = match s.arr() {
            [j, e] => (j.num().unwrap_or(-1.0), e.num().unwrap_or(f64::NAN)),
            _ => return Err("malformed sample".into()),
        };
        let got = a.get(j as usize).copied().ok_or_else(|| format!("sample index {j} out of range"))?;
        if j < 0.0 || !close(got, e) {
            return Err(format!("[{j}]: got {got}, expected {e} (rtol {rtol}, atol {atol})"));
        }
    }
    let (sum, sum_abs) = (a.iter().sum::<f64>(), a.iter().map(|x| x.abs()).sum::<f64>());
    let (min, max) = a.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    let bound = rtol * stat("sum_abs")? + atol * n as f64;
    for (what, got, want) in [("sum", sum, stat("sum")?), ("sum_abs", sum_abs, stat("sum_abs")?)] {
        if (got - want).abs() > bound {
            return Err(format!("{what} {got}, expected {want} within {bound}"));
        }
    }
    for (what, got, want) in [("min", min, stat("min")?), ("max", max, stat("max")?)] {
        if !close(got, want) {
            return Err(format!("{what} {got}, expected {want} (rtol {rtol}, atol {atol})"));
        }
    }
    Ok(())
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
            Outcome::Pass(t) if name.starts_with("bench_") => {
                pass += 1;
                format!("pass ({:.2} s)", t.as_secs_f64())
            }
            Outcome::Pass(_) => {
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

/// The generator must reproduce, bit for bit, the arguments that bench cases do store.
#[test]
fn generated_arguments_match_the_stored_ones() {
    let dir = shared_dir().join("corpus");
    let mut compared = 0;
    for case in fs::read_dir(&dir).expect("corpus dir").flatten().map(|e| e.path()) {
        let Ok(meta) = fs::read(case.join("case.json")) else { continue };
        let meta = parse_json(&meta, &mut 0);
        for spec in meta.get("arg_gen").map(Json::arr).unwrap_or(&[]) {
            let Some(file) = spec.get("file").and_then(Json::str) else { continue };
            let path = case.join(file);
            if !path.exists() {
                continue;
            }
            let dims: Vec<i64> =
                spec.get("shape").map(Json::arr).unwrap_or(&[]).iter().map(|d| d.num().unwrap() as i64).collect();
            let ty = match spec.get("dtype").and_then(Json::str) {
                Some("float32") => ElementType::F32,
                Some("float64") => ElementType::F64,
                Some("int32") => ElementType::S32,
                _ => continue,
            };
            let shape = Shape::array(ty, &dims);
            let stored = read_npy(&path, &shape).expect("stored argument");
            let generated = generated_arg(spec, &shape);
            assert_eq!(generated.to_bits_vec().unwrap(), stored.to_bits_vec().unwrap(), "{}", path.display());
            compared += 1;
        }
    }
    assert!(compared > 0, "no stored argument has an arg_gen entry to compare with");
}
