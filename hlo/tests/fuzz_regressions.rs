//! Inputs the fuzzers found, kept so the bugs stay fixed. A `.hlo` file must parse and print to
//! text that parses back and prints identically, in both print forms; a `.hlo.err` file must
//! be rejected with an error.

use std::path::Path;

use tessera_hlo::text::{parse_module, print_module, PrintOptions};

#[test]
fn fuzz_findings_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut paths: Vec<_> =
        std::fs::read_dir(&dir).expect("regression folder").filter_map(|e| e.ok()).map(|e| e.path()).collect();
    paths.sort();
    assert!(!paths.is_empty(), "no regression inputs in {}", dir.display());
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("readable regression input");
        if path.to_string_lossy().ends_with(".hlo.err") {
            assert!(parse_module(&text).is_err(), "{}: accepted, but must be rejected", path.display());
            continue;
        }
        let module = parse_module(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for options in [PrintOptions::long(), PrintOptions::short()] {
            let printed = print_module(&module, &options);
            let again = parse_module(&printed)
                .unwrap_or_else(|e| panic!("{}: printout does not parse: {e}\n{printed}", path.display()));
            assert_eq!(print_module(&again, &options), printed, "{}: printing is not stable", path.display());
        }
    }
}
