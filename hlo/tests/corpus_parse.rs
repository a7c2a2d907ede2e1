//! Every module of the conformance corpus (`shared/corpus/*/module.hlo` and
//! `xla_optimized.hlo`) parses, and printing is stable: print(parse(print(parse(t)))) ==
//! print(parse(t)) in both print forms.

mod common;

use common::shared_dir;
use std::fs;

use tessera_hlo::text::{parse_module, print_module, PrintOptions};

#[test]
fn corpus_parses_and_prints_stably() {
    let dir = shared_dir().join("corpus");
    let mut cases: Vec<_> = fs::read_dir(&dir).expect("corpus dir").flatten().map(|e| e.path()).collect();
    cases.sort();
    let (mut files, mut parsed, mut stable_count, mut failures) = (0, 0, 0, Vec::new());
    for case in cases.iter().filter(|p| p.is_dir()) {
        for file in ["module.hlo", "xla_optimized.hlo"] {
            let path = case.join(file);
            let Ok(text) = fs::read_to_string(&path) else { continue };
            files += 1;
            let module = match parse_module(&text) {
                Ok(m) => m,
                Err(e) => {
                    failures.push(format!("{}: {e}", path.display()));
                    continue;
                }
            };
            parsed += 1;
            let mut ok = true;
            for options in [PrintOptions::long(), PrintOptions::short()] {
                let printed = print_module(&module, &options);
                match parse_module(&printed) {
                    Ok(again) => {
                        if print_module(&again, &options) != printed {
                            ok = false;
                            failures.push(format!("{}: printing is not stable", path.display()));
                        }
                    }
                    Err(e) => {
                        ok = false;
                        failures.push(format!("{}: printout does not parse: {e}", path.display()));
                    }
                }
            }
            if ok {
                stable_count += 1;
            }
        }
    }
    for f in &failures {
        eprintln!("{f}");
    }
    println!("corpus parsed: {parsed}/{files}");
    println!("corpus print-stable: {stable_count}/{files}");
    assert_eq!(parsed, files);
    assert_eq!(stable_count, files);
}
