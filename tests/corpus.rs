//! Every public corpus case on every backend (DESIGN.md section 9), logical and physical I/O,
//! printed as one table. Every backend must pass every case: a refusal fails the test as a
//! wrong answer does. The `ops` column marks the cases built only from the core ops.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tessera::conformance::{run_case, uses_only_core_ops, Case, Mode, Outcome};
use tessera::table::Table;
use tessera::{Backend, Client};

/// Every case passes on every backend; the counts also catch a corpus that silently shrank.
const EXPECTED_PASSING: [(Backend, usize); 3] = [(Backend::Interp, 97), (Backend::Cranelift, 97), (Backend::Llvm, 97)];

fn shared_dir() -> PathBuf {
    let dir = match std::env::var_os("TESSERA_SHARED") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    assert!(dir.join("corpus").is_dir(), "the shared corpus is missing at {} (set TESSERA_SHARED)", dir.display());
    dir
}

/// Every backend, or those `TESSERA_BACKENDS` names (comma-separated: the valgrind run checks
/// one JIT tier per process, without the interpreter's slow work).
fn selected_backends() -> Vec<Backend> {
    let all = vec![Backend::Interp, Backend::Cranelift, Backend::Llvm];
    let Ok(names) = std::env::var("TESSERA_BACKENDS") else { return all };
    let chosen: Vec<Backend> = names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| Backend::from_name(n).unwrap_or_else(|| panic!("TESSERA_BACKENDS: unknown backend '{n}'")))
        .collect();
    assert!(!chosen.is_empty(), "TESSERA_BACKENDS names no backend");
    chosen
}

#[test]
fn corpus_on_every_backend() {
    let backends = selected_backends();
    let clients: Vec<Client> = backends.iter().map(|&b| Client::new(b).expect("client")).collect();
    let (dirs, selected) = Case::list_selected(&shared_dir().join("corpus")).expect("corpus");
    let mut columns = Vec::new();
    for &b in &backends {
        columns.push((b, Mode::Logical));
    }
    for &b in &backends {
        columns.push((b, Mode::Physical));
    }

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut passes: BTreeMap<(&str, Mode), usize> = BTreeMap::new();
    let mut ran: BTreeMap<(&str, Mode), usize> = BTreeMap::new();
    let mut refusals: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for dir in &dirs {
        let case = Case::load(dir).expect("corpus case loads");
        let core = uses_only_core_ops(&case);
        let mut cells = vec![case.name.clone(), if core { "core".into() } else { String::new() }];
        for &(backend, mode) in &columns {
            let client = &clients[backends.iter().position(|&b| b == backend).unwrap()];
            // Physical I/O of the big bench arrays only repeats what logical I/O checked.
            if mode == Mode::Physical && case.is_bench {
                cells.push("-".into());
                continue;
            }
            *ran.entry((backend.name(), mode)).or_default() += 1;
            let outcome = run_case(&case, client, mode);
            let cell = match &outcome {
                Outcome::Pass { run, .. } => {
                    *passes.entry((backend.name(), mode)).or_default() += 1;
                    if case.is_bench {
                        format!("pass {:.0}ms", run.as_secs_f64() * 1e3)
                    } else {
                        "pass".into()
                    }
                }
                Outcome::Unsupported(why) => {
                    failures.push(format!("{} on {backend} ({mode:?}): refused: {why}", case.name));
                    if mode == Mode::Logical {
                        refusals
                            .entry(format!("{backend}: {}", short_reason(why)))
                            .or_default()
                            .push(case.name.clone());
                    }
                    "unsupported".into()
                }
                Outcome::Mismatch(m) => {
                    failures.push(format!("{} on {backend} ({mode:?}): MISMATCH {m}", case.name));
                    "MISMATCH".into()
                }
                Outcome::Failed(m) => {
                    failures.push(format!("{} on {backend} ({mode:?}): FAILED {m}", case.name));
                    "FAILED".into()
                }
            };
            cells.push(cell);
        }
        rows.push(cells);
    }

    let mut header = vec!["case".to_string(), "ops".to_string()];
    for (b, m) in &columns {
        header.push(format!("{}{}", b.name(), if *m == Mode::Physical { " phys" } else { "" }));
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&header);
    rows.into_iter().for_each(|r| table.row(r));
    print!("{}", table.render());
    println!();
    for (b, m) in &columns {
        println!(
            "{:>10} {:8?}: {} of {} pass",
            b.name(),
            m,
            passes.get(&(b.name(), *m)).copied().unwrap_or(0),
            ran.get(&(b.name(), *m)).copied().unwrap_or(0)
        );
    }
    println!("\nrefused (logical I/O), by reason:");
    for (reason, cases) in &refusals {
        println!("  {reason} [{}]: {}", cases.len(), cases.join(", "));
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    for (b, n) in EXPECTED_PASSING {
        if !backends.contains(&b) {
            continue;
        }
        if selected {
            println!("TESSERA_CASES selects {} cases: pass counts not checked", dirs.len());
            break;
        }
        let got = passes.get(&(b.name(), Mode::Logical)).copied().unwrap_or(0);
        assert!(got >= n, "{got} cases pass on {b}, fewer than the {n} that passed before");
    }
}

/// The part of a refusal that names what is missing, so refusals group by cause.
fn short_reason(why: &str) -> String {
    let tail = why.rsplit(": ").next().unwrap_or(why);
    tail.chars().take(80).collect()
}
