//! The interpreter against every corpus case (bench cases included, their large arguments
//! regenerated and their outputs checked against `expected_stats`): modules with ops it does
//! not support are counted as such (by op); every other case must match XLA:CPU's outputs
//! within the case's tolerances.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::shared_dir;
use tessera_hlo::corpus::{tolerance, Case};
use tessera_hlo::eval::{evaluate, EvalError};
use tessera_hlo::npy::read_npy;
use tessera_hlo::{ElementType, Literal, Shape};

/// Raise this when the interpreter learns more ops; a drop means a regression.
const EXPECTED_PASSING: usize = 97;

enum Outcome {
    Pass(Duration),
    Unsupported(String),
    Mismatch(String),
}

fn flatten(lit: Literal, out: &mut Vec<Literal>) {
    match lit.tuple_elements() {
        Some(es) => es.iter().cloned().for_each(|e| flatten(e, out)),
        None => out.push(lit),
    }
}

fn run_case(case: &Case) -> Outcome {
    let args = case.arguments().expect("corpus arguments");
    let start = Instant::now();
    let evaluated = evaluate(&case.module, &args);
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
    flatten(result, &mut got);
    let outputs = case.outputs().expect("corpus outputs");
    if got.len() != outputs.len() {
        return Outcome::Mismatch(format!("{} outputs, expected {}", got.len(), outputs.len()));
    }
    for (i, (g, want)) in got.iter().zip(&outputs).enumerate() {
        if let Err(m) = tolerance::check(g, want) {
            return Outcome::Mismatch(format!("output {i}: {m}"));
        }
    }
    Outcome::Pass(elapsed)
}

#[test]
fn interpreter_matches_xla_on_the_corpus() {
    let dirs = Case::list(&shared_dir().join("corpus")).expect("corpus dir");
    let (mut pass, mut mismatches) = (0, Vec::new());
    let mut unsupported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for dir in &dirs {
        let case = Case::load(dir).expect("corpus case loads");
        let shown = match run_case(&case) {
            Outcome::Pass(t) => {
                pass += 1;
                if case.is_bench {
                    format!("pass ({:.2} s)", t.as_secs_f64())
                } else {
                    "pass".to_string()
                }
            }
            Outcome::Unsupported(op) => {
                unsupported.entry(op.clone()).or_default().push(case.name.clone());
                format!("unsupported ({op})")
            }
            Outcome::Mismatch(m) => {
                mismatches.push(format!("{}: {m}", case.name));
                format!("MISMATCH {m}")
            }
        };
        println!("{:40} {shown}", case.name);
    }
    let n_unsupported: usize = unsupported.values().map(Vec::len).sum();
    println!("\npass {pass}, unsupported {n_unsupported}, mismatch {}", mismatches.len());
    for (op, cases) in &unsupported {
        println!("  unsupported {op}: {}", cases.join(", "));
    }
    assert!(mismatches.is_empty(), "mismatches:\n{}", mismatches.join("\n"));
    assert!(pass >= EXPECTED_PASSING, "{pass} cases pass, fewer than the {EXPECTED_PASSING} that passed before");
}

/// The generator must reproduce, bit for bit, the arguments that bench cases do store.
#[test]
fn generated_arguments_match_the_stored_ones() {
    let mut compared = 0;
    for dir in Case::list(&shared_dir().join("corpus")).expect("corpus dir") {
        let case = Case::load(&dir).expect("corpus case loads");
        for (i, generated) in case.generated_arguments().expect("arg_gen entries") {
            let path = dir.join(format!("args/{i}.npy"));
            if !path.exists() {
                continue;
            }
            let shape: Shape = generated.shape().without_layout();
            let stored = read_npy(&path, &shape).expect("stored argument");
            assert!(matches!(shape.element_type(), ElementType::F32 | ElementType::F64 | ElementType::S32));
            assert_eq!(generated.to_bits_vec().unwrap(), stored.to_bits_vec().unwrap(), "{}", path.display());
            compared += 1;
        }
    }
    assert!(compared > 0, "no stored argument has an arg_gen entry to compare with");
}
