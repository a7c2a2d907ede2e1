//! Coverage-guided fuzzing of the parser, printer and verifier (cargo-fuzz, nightly):
//! `cargo +nightly fuzz run parse_verify CORPUS_DIR SEED_DIR` (seed it with the `.hlo` files of
//! ../shared). Same properties as hlo/tests/mutation_fuzz.rs: no panic, every parsed module
//! prints to text that parses, and a module that verifies prints back identically.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_hlo::text::{parse_module, print_module, PrintOptions};
use tessera_hlo::verify::verify;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(module) = parse_module(text) else { return };
    let verified = verify(&module).is_ok();
    for options in [PrintOptions::long(), PrintOptions::short()] {
        let printed = print_module(&module, &options);
        let again = parse_module(&printed).expect("a parsed module's printout parses");
        if verified {
            assert_eq!(print_module(&again, &options), printed, "printing is stable");
        }
    }
});
