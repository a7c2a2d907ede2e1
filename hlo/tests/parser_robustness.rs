//! The parser never panics or overflows its stack, whatever the input: deep nesting gives an
//! error, and truncated or corrupted versions of real modules give errors or modules.

mod common;

use common::shared_dir;
use std::fs;

use tessera_hlo::text::{parse_module, print_module, PrintOptions};

#[test]
fn deep_operand_nesting_is_an_error() {
    let depth = 20_000;
    let text = format!(
        "HloModule m\nENTRY e {{\n  ROOT r = {}f32[] parameter(0){}\n}}\n",
        "negate(".repeat(depth),
        ")".repeat(depth)
    );
    let err = parse_module(&text).expect_err("nesting this deep is rejected");
    assert!(err.message.contains("deeper"), "{err}");
}

#[test]
fn deep_inline_computations_are_an_error() {
    // Each level is an inline `to_apply={...}` whose root nests the next; they share the
    // operand nesting budget, so the stack stays bounded.
    let depth = 5_000;
    let level = "ROOT r = f32[] call(), to_apply={ ";
    let text = format!("{}ROOT x = f32[] parameter(0){}", level.repeat(depth), " }".repeat(depth));
    // Run on a test thread's default stack (2 MiB): no overflow.
    let err = parse_module(&text).expect_err("nesting this deep is rejected");
    assert!(err.message.contains("deeper"), "{err}");
    // The most inline levels allowed, with deep operands inside the innermost.
    for operands in [100, 20_000] {
        let text = format!(
            "{}ROOT x = {}f32[] parameter(0){}{}",
            level.repeat(15),
            "negate(".repeat(operands),
            ")".repeat(operands),
            " }".repeat(15)
        );
        let _ = parse_module(&text);
    }
}

#[test]
fn moderate_operand_nesting_parses() {
    let depth = 100;
    let text = format!(
        "HloModule m\nENTRY e {{\n  ROOT r = {}f32[] parameter(0){}\n}}\n",
        "negate(".repeat(depth),
        ")".repeat(depth)
    );
    let module = parse_module(&text).expect("parses");
    assert_eq!(module.entry_comp().instructions.len(), depth + 1);
}

#[test]
fn deep_tuple_shapes_are_an_error() {
    let depth = 50_000;
    let text = format!(
        "HloModule m\nENTRY e {{\n  ROOT p = {}f32[]{} parameter(0)\n}}\n",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    assert!(parse_module(&text).is_err());
}

#[test]
fn huge_constants_are_errors_not_allocations() {
    for text in [
        "HloModule m\nENTRY e {\n  ROOT c = f32[100000000000000] constant({...})\n}\n",
        "HloModule m\nENTRY e {\n  ROOT c = f32[100000000000000] constant({1})\n}\n",
        "HloModule m\nENTRY e {\n  ROOT c = f32[9223372036854775807,2] constant({1})\n}\n",
    ] {
        assert!(parse_module(text).is_err(), "{text}");
    }
}

/// A tiny deterministic generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn corrupted_suite_files_never_panic() {
    let dir = shared_dir().join("parser-suite");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    const NOISE: &[&str] = &[
        "{",
        "}",
        "(",
        ")",
        ",",
        "=",
        "%",
        "#",
        "-",
        "[",
        "]",
        "/*",
        "\"",
        "x",
        "0",
        "999999999999999999999",
        "nan(0x",
        "ROOT",
        "ENTRY",
        "\n",
    ];
    let mut checked = 0;
    for sub in ["roundtrip", "nonroundtrip", "errors"] {
        let Ok(entries) = fs::read_dir(dir.join(sub)) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("hlo") {
                continue;
            }
            let text = fs::read_to_string(&path).unwrap_or_default();
            let len = text.len();
            for _ in 0..25 {
                let mut t = text.clone();
                let at = (rng.next() as usize) % (len + 1);
                match rng.next() % 3 {
                    0 => t.truncate(at),
                    1 => {
                        let end = (at + 1 + (rng.next() as usize) % 8).min(len);
                        t.replace_range(at..end, "");
                    }
                    _ => t.insert_str(at, NOISE[(rng.next() as usize) % NOISE.len()]),
                }
                if let Ok(module) = parse_module(&t) {
                    // Whatever parses must print and re-parse.
                    let printed = print_module(&module, &PrintOptions::long());
                    parse_module(&printed)
                        .unwrap_or_else(|e| panic!("{}: printout does not parse: {e}\n{printed}", path.display()));
                }
                checked += 1;
            }
        }
    }
    println!("corrupted inputs checked: {checked}");
}
