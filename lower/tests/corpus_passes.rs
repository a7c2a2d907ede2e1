//! The standard pass pipeline on every corpus module (bench cases included: passes are
//! cheap): it must succeed, the pipeline re-verifies after every changing pass, and the
//! result must print, parse back and verify. Also checks the pipeline's invariants that
//! the kernel lowering relies on: no `call` is left and every array has a layout.

mod common;

use std::fs;

use common::shared_dir;
use tessera_hlo::text::{parse_module, print_module, PrintOptions};
use tessera_hlo::verify::verify;
use tessera_hlo::{Opcode, Shape};
use tessera_lower::passes::standard_pipeline;

fn all_laid_out(shape: &Shape) -> bool {
    match shape {
        Shape::Array(a) => a.layout.is_some(),
        Shape::Tuple(elems) => elems.iter().all(all_laid_out),
        _ => true,
    }
}

#[test]
fn standard_pipeline_keeps_every_corpus_module_valid() {
    let dir = shared_dir().join("corpus");
    let mut cases: Vec<_> = fs::read_dir(&dir).expect("corpus dir").flatten().map(|e| e.path()).collect();
    cases.sort();
    let mut failures = Vec::new();
    let (mut ran, mut fusions) = (0, 0);
    // XLA's optimized dumps are scheduled and already fused: the passes must keep them valid
    // too (a scheduled module prints in stored order).
    let files = cases.iter().flat_map(|c| ["module.hlo", "xla_optimized.hlo"].map(|f| c.join(f)));
    for file in files {
        let Ok(text) = fs::read_to_string(&file) else { continue };
        let name = file.strip_prefix(&dir).unwrap_or(&file).display().to_string();
        let mut module = parse_module(&text).expect("corpus modules parse");
        let mut pipeline = standard_pipeline(true, true);
        if let Err(e) = pipeline.run(&mut module) {
            failures.push(format!("{name}: {e}"));
            continue;
        }
        ran += 1;
        let printed = print_module(&module, &PrintOptions::long());
        match parse_module(&printed) {
            Ok(again) => {
                if let Err(e) = verify(&again) {
                    failures.push(format!("{name}: printed output does not verify: {e}"));
                }
            }
            Err(e) => failures.push(format!("{name}: printed output does not parse: {e}")),
        }
        for comp in &module.computations {
            for inst in &comp.instructions {
                if inst.opcode == Opcode::Call {
                    failures.push(format!("{name}: call %{} survived call_inline", inst.name));
                }
                if !all_laid_out(&inst.shape) {
                    failures.push(format!("{name}: %{} has no layout", inst.name));
                }
                fusions += usize::from(inst.opcode == Opcode::Fusion);
            }
        }
    }
    println!("{ran} modules through the pipeline, {fusions} fusions formed");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran > 0);
}
