//! Every parser-suite and corpus module that lowers runs through the kernel interpreter on
//! seeded random arguments, with fusion on and off, and must agree with the reference
//! interpreter (`hlo::eval`): bit-exact for integers and predicates, within a small tolerance
//! for floats. This checks the passes and program construction on far more shapes of HLO
//! than the corpus cases with stored outputs, including layouts, tuples and aliasing.

mod common;

use std::fs;
use std::path::PathBuf;

use common::{compare, shared_dir, values};
use tessera_hlo::eval::evaluate;
use tessera_hlo::text::parse_module;
use tessera_hlo::{ElementType, Layout, Literal, Shape};
use tessera_lower::kernel::interp::run_program;
use tessera_lower::{lower_module, LowerOptions, Program};
use tessera_testkit::Rng;

/// Cases with buffers larger than this are skipped: both interpreters are slow on them (the
/// corpus bench cases are skipped by name for the same reason).
const MAX_ELEMENTS: i64 = 1 << 18;

/// Files known to disagree for reasons outside the passes and program construction, by file
/// stem (the module's folder for corpus cases). An unlisted disagreement fails the test, and
/// so does a listed file that agrees (delete its line then).
const KNOWN: &[(&str, &str)] = &[];

/// The corpus case folder for `corpus/<case>/module.hlo` (`<case>/xla_optimized` for XLA's
/// optimized dump beside it), else the file stem.
fn case_name(path: &std::path::Path) -> String {
    let stem = path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    let dir = path.parent().and_then(|d| d.file_name()).map(|d| d.to_string_lossy().to_string());
    match (stem.as_str(), dir) {
        ("module", Some(dir)) => dir,
        ("xla_optimized", Some(dir)) => format!("{dir}/xla_optimized"),
        _ => stem,
    }
}

fn hlo_files(dir: PathBuf, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(&dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            hlo_files(p, out);
        } else if p.extension().is_some_and(|x| x == "hlo") {
            out.push(p);
        }
    }
}

/// A random logical array of `shape`, or `None` for element types this test does not make.
fn random_literal(shape: &Shape, rng: &mut Rng) -> Option<Literal> {
    let a = shape.as_array()?;
    let n = usize::try_from(a.element_count()?).ok()?;
    let et = a.element_type;
    let mut bits = Vec::with_capacity(n);
    for _ in 0..n {
        let small = (rng.below(2001) as f64 - 1000.0) / 1000.0;
        let b: u128 = match et {
            ElementType::F32 => u128::from((small as f32).to_bits()),
            ElementType::F64 => u128::from(small.to_bits()),
            ElementType::F16 => u128::from(half::f16::from_f64(small).to_bits()),
            ElementType::BF16 => u128::from(half::bf16::from_f64(small).to_bits()),
            ElementType::Pred => u128::from(rng.below(2) as u8),
            t if t.is_signed_integral() => {
                let v = rng.below(17) as i64 - 8;
                (v as u128) & ((1u128 << t.bit_width()) - 1)
            }
            t if t.is_integral() => u128::from(rng.below(16)),
            _ => return None,
        };
        bits.push(b);
    }
    Literal::from_bits_vec(shape.without_layout(), bits).ok()
}

fn leaves(lit: &Literal, out: &mut Vec<Literal>) {
    match lit.tuple_elements() {
        Some(es) => es.iter().for_each(|e| leaves(e, out)),
        None => out.push(lit.clone()),
    }
}

fn too_large(program: &Program) -> bool {
    program.buffers.iter().any(|b| b.shape.element_count().is_none_or(|n| n > MAX_ELEMENTS))
}

enum Outcome {
    Match,
    Skip,
    Mismatch(String),
}

fn run(module_text: &str, seed: u64, fusion: bool) -> Outcome {
    let Ok(module) = parse_module(module_text) else { return Outcome::Skip };
    let Ok(program) = lower_module(&module, &LowerOptions { fusion, dump_dir: None, ..LowerOptions::default() }) else {
        return Outcome::Skip;
    };
    if too_large(&program) {
        return Outcome::Skip;
    }
    let params = module.entry_comp().parameter_shapes();
    if params.iter().any(Shape::is_tuple) {
        return Outcome::Skip;
    }
    let mut rng = Rng::new(seed);
    let mut args = Vec::new();
    for p in &params {
        match random_literal(p, &mut rng) {
            Some(l) => args.push(l),
            None => return Outcome::Skip,
        }
    }
    let Ok(reference) = evaluate(&module, &args) else { return Outcome::Skip };
    let mut physical = Vec::new();
    for (lit, &buf) in args.iter().zip(&program.parameters) {
        let layout = program.buffers[buf.0 as usize].shape.layout_or_default();
        physical.push(lit.relayout(&layout).and_then(|l| l.physical_bytes().map(<[u8]>::to_vec)).expect("argument"));
    }
    let refs: Vec<&[u8]> = physical.iter().map(Vec::as_slice).collect();
    let outputs = match run_program(&program, &refs) {
        Ok(o) => o,
        Err(e) => return Outcome::Mismatch(format!("kernel interpreter: {e}")),
    };
    let mut expected = Vec::new();
    leaves(&reference, &mut expected);
    if expected.len() != outputs.len() {
        return Outcome::Mismatch(format!("{} results, the reference has {}", outputs.len(), expected.len()));
    }
    for (i, ((bytes, &buf), want)) in outputs.iter().zip(&program.results).zip(&expected).enumerate() {
        let shape = program.buffers[buf.0 as usize].shape.clone();
        let rank = shape.rank();
        let got = Literal::from_physical_bytes(Shape::Array(shape), bytes.clone())
            .and_then(|l| l.relayout(&Layout::row_major(rank)))
            .expect("decode result");
        let (rtol, atol) = match want.element_type() {
            ElementType::F16 | ElementType::BF16 => (1e-2, 1e-2),
            // Dots and reductions sum in another order than the reference; inputs are
            // in magnitude up to 1 and contractions up to 1024 long.
            ElementType::F32 | ElementType::C64 => (1e-4, 1e-3),
            ElementType::F64 | ElementType::C128 => (1e-12, 1e-12),
            _ => (0.0, 0.0),
        };
        if let Err(m) = compare(&values(&got), &values(want), rtol, atol) {
            return Outcome::Mismatch(format!("result {i} {m}"));
        }
    }
    Outcome::Match
}

#[test]
fn lowered_programs_agree_with_the_reference_interpreter() {
    let shared = shared_dir();
    let mut files = Vec::new();
    hlo_files(shared.join("parser-suite"), &mut files);
    hlo_files(shared.join("corpus"), &mut files);
    files.sort();
    let (mut matched, mut skipped, mut mismatches) = (0, 0, Vec::new());
    let (mut unexpected, mut known_seen) = (Vec::new(), Vec::new());
    for (k, f) in files.iter().enumerate() {
        let name = case_name(f);
        let Ok(text) = fs::read_to_string(f) else { continue };
        if name.starts_with("bench_") {
            skipped += 1;
            continue;
        }
        let outcome = match run(&text, 0x5eed + k as u64, true) {
            Outcome::Match => run(&text, 0x5eed + k as u64, false),
            other => other,
        };
        match outcome {
            Outcome::Match => matched += 1,
            Outcome::Skip => skipped += 1,
            Outcome::Mismatch(m) => {
                let line = format!("{}: {m}", f.display());
                if KNOWN.iter().any(|(n, _)| *n == name) {
                    known_seen.push(name);
                } else {
                    unexpected.push(line.clone());
                }
                mismatches.push(line);
            }
        }
    }
    println!("{} files: {matched} agree, {skipped} skipped, {} disagree", files.len(), mismatches.len());
    for m in &mismatches {
        println!("  {m}");
    }
    let stale: Vec<&str> = KNOWN.iter().map(|(n, _)| *n).filter(|n| !known_seen.iter().any(|s| s == n)).collect();
    assert!(matched > 0);
    assert!(unexpected.is_empty(), "unexpected disagreements:\n{}", unexpected.join("\n"));
    assert!(stale.is_empty(), "known disagreements that now agree (remove them from KNOWN): {stale:?}");
}
