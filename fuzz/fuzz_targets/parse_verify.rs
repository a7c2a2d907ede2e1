//! Coverage-guided fuzzing of the parser, printer and verifier (cargo-fuzz, nightly):
//! `cargo +nightly fuzz run parse_verify fuzz/seeds`. Same properties as
//! hlo/tests/mutation_fuzz.rs: no panic, and a module that verifies prints to text that
//! parses back and prints identically.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_hlo::text::{parse_module, print_module, PrintOptions};
use tessera_hlo::verify::verify;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(module) = parse_module(text) else { return };
    let verified = verify(&module).is_ok();
    let long = print_module(&module, &PrintOptions::long());
    let _ = print_module(&module, &PrintOptions::short());
    if verified {
        let again = parse_module(&long).expect("a verified module's printout parses");
        assert_eq!(print_module(&again, &PrintOptions::long()), long, "printing is stable");
    }
});
