//! Every corpus module whose entry computation the kernel lowering handles: emit the entry
//! computation as one kernel, run it on random arguments with the kernel interpreter and
//! compare with the reference interpreter. Modules using ops outside the lowering's set are
//! counted, not failed; a wrong answer or a panic fails.

mod support;

use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = here.join("../../shared/corpus");
    let dir = if dir.is_dir() { dir } else { PathBuf::from("/work/shared/corpus") };
    assert!(dir.is_dir(), "the corpus folder ../shared/corpus is missing");
    dir
}

#[test]
fn corpus_entry_computations() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("corpus readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("module.hlo").is_file())
        .collect();
    cases.sort();
    let (mut pass, mut unsupported, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap_or_default().to_string_lossy().to_string();
        if name.starts_with("bench_") {
            skipped.push(name);
            continue;
        }
        let text = std::fs::read_to_string(case.join("module.hlo")).expect("module readable");
        let Ok(module) = tessera_hlo::text::parse_module(&text) else {
            failures.push(format!("{name}: does not parse"));
            continue;
        };
        // The kernel interpreter is slow; big modules are the end-to-end tiers' business.
        let elements: i64 = module
            .entry_comp()
            .instructions
            .iter()
            .filter_map(|i| i.shape.as_array().map(|a| a.dims.iter().product::<i64>()))
            .max()
            .unwrap_or(0);
        if elements > 1 << 18 {
            skipped.push(format!("{name} (an array of {elements} elements)"));
            continue;
        }
        eprintln!("case {name}");
        let start = std::time::Instant::now();
        let args = support::random_args(&module, 7);
        let want = match tessera_hlo::eval::evaluate(&module, &args) {
            Ok(w) => w,
            Err(e) => {
                skipped.push(format!("{name} (eval: {e})"));
                continue;
            }
        };
        let ran = support::run_emitted(&module, &args);
        eprintln!("  {:?}", start.elapsed());
        match ran {
            Err(e) if e.starts_with("emit: ") => unsupported.push(format!("{name}: {e}")),
            Err(e) if e.starts_with("skip: ") => skipped.push(format!("{name} ({e})")),
            Err(e) => failures.push(format!("{name}: {e}")),
            Ok((_, got)) => {
                let wants = match want.tuple_elements() {
                    Some(e) => e.to_vec(),
                    None => vec![want],
                };
                let r = got
                    .iter()
                    .zip(&wants)
                    .enumerate()
                    .try_for_each(|(i, (g, w))| support::compare(g, w, &format!("output {i}")));
                match r {
                    Ok(()) if got.len() == wants.len() => pass.push(name),
                    Ok(()) => failures.push(format!("{name}: output count")),
                    Err(e) => failures.push(format!("{name}: {e}")),
                }
            }
        }
    }
    println!(
        "emit corpus: {} pass, {} unsupported, {} skipped, {} fail",
        pass.len(),
        unsupported.len(),
        skipped.len(),
        failures.len()
    );
    println!("pass: {}", pass.join(" "));
    for u in &unsupported {
        println!("unsupported: {}", u.lines().next().unwrap_or(""));
    }
    for s in &skipped {
        println!("skipped: {s}");
    }
    for f in &failures {
        println!("FAIL: {}", f.lines().take(3).collect::<Vec<_>>().join(" | "));
    }
    assert!(failures.is_empty(), "{} corpus modules lowered to wrong kernels", failures.len());
}

/// XLA:CPU's own fusions (the `fusion` instructions' computations in each case's
/// `xla_optimized.hlo`): each is lowered as one kernel and run against the reference
/// interpreter evaluating that computation alone.
#[test]
fn xla_fused_computations() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("corpus readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("xla_optimized.hlo").is_file())
        .collect();
    cases.sort();
    let (mut pass, mut unsupported, mut skipped) = (0, Vec::new(), 0);
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap_or_default().to_string_lossy().to_string();
        let text = std::fs::read_to_string(case.join("xla_optimized.hlo")).expect("readable");
        let module = match tessera_hlo::text::parse_module(&text) {
            Ok(m) => m,
            Err(e) => {
                println!("skipped {name}: {e}");
                skipped += 1;
                continue;
            }
        };
        let mut fused = Vec::new();
        for c in &module.computations {
            for inst in &c.instructions {
                if inst.opcode == tessera_hlo::Opcode::Fusion {
                    fused.extend(inst.called_computations());
                }
            }
        }
        fused.sort_by_key(|c| c.index());
        fused.dedup();
        for id in fused {
            let m = alone(&module, id);
            let big = m.comp(id).instructions.iter().any(|i| {
                let mut n = 0i64;
                for (_, leaf) in i.shape.leaves() {
                    n = n.max(leaf.dims().iter().product::<i64>());
                }
                n > 1 << 16
            });
            if name.starts_with("bench_") || big {
                skipped += 1;
                continue;
            }
            let cname = format!("{name}/{}", m.comp(id).name);
            let args = support::random_args(&m, 11);
            let want = match tessera_hlo::eval::evaluate(&m, &args) {
                Ok(w) => w,
                Err(e) => {
                    if skipped < 3 {
                        println!("skipped {cname}: {e}");
                    }
                    skipped += 1;
                    continue;
                }
            };
            match support::run_emitted(&m, &args) {
                Err(e) if e.starts_with("emit: ") => unsupported.push(format!("{cname}: {e}")),
                Err(e) if e.starts_with("skip: ") => skipped += 1,
                Err(e) => failures.push(format!("{cname}: {e}")),
                Ok((_, got)) => {
                    let wants = match want.tuple_elements() {
                        Some(e) => e.to_vec(),
                        None => vec![want],
                    };
                    let r = got
                        .iter()
                        .zip(&wants)
                        .enumerate()
                        .try_for_each(|(i, (g, w))| support::compare_slack(g, w, &format!("output {i}"), 10.0));
                    match r {
                        Ok(()) => pass += 1,
                        Err(e) => failures.push(format!("{cname}: {e}")),
                    }
                }
            }
        }
    }
    println!("xla fusions: {pass} pass, {} unsupported, {skipped} skipped, {} fail", unsupported.len(), failures.len());
    for u in &unsupported {
        println!("unsupported: {}", u.lines().next().unwrap_or(""));
    }
    for f in &failures {
        println!("FAIL: {}", f.lines().take(3).collect::<Vec<_>>().join(" | "));
    }
    assert!(failures.is_empty(), "{} XLA fusions lowered to wrong kernels", failures.len());
}

/// `module` with `id` as its entry computation: every computation `id` does not (transitively)
/// call is replaced by a trivial one, so nothing calls the new entry.
fn alone(module: &tessera_hlo::Module, id: tessera_hlo::CompId) -> tessera_hlo::Module {
    let mut m = module.clone();
    let mut keep = vec![id];
    let mut i = 0;
    while i < keep.len() {
        for inst in &m.comp(keep[i]).instructions {
            for c in inst.called_computations() {
                if !keep.contains(&c) {
                    keep.push(c);
                }
            }
        }
        i += 1;
    }
    let ids: Vec<_> = m.comp_ids().collect();
    for c in ids {
        if keep.contains(&c) {
            continue;
        }
        let name = m.comp(c).name.clone();
        let mut trivial = tessera_hlo::Computation::new(name);
        let mut p = tessera_hlo::Instruction::new(
            "p",
            tessera_hlo::Opcode::Parameter,
            tessera_hlo::Shape::scalar(tessera_hlo::ElementType::F32),
            vec![],
        );
        p.payload = tessera_hlo::ir::Payload::Parameter(0);
        let root = trivial.add(p);
        trivial.root = root;
        *m.comp_mut(c) = trivial;
    }
    m.entry = id;
    m.attrs.retain(|a| a.name != "entry_computation_layout");
    m
}
