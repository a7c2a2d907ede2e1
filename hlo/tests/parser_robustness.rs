//! The parser never panics or overflows its stack, whatever the input: deep nesting gives an
//! error, and truncated or corrupted versions of real modules give errors or modules.

use tessera_hlo::text::parse_module;

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

/// Words XLA's lexer reads as keywords or numbers name no instruction, bare or with `%`; as
/// values (`constant(nan)`, `constant(true)`) they still parse.
#[test]
fn keywords_are_not_instruction_names() {
    for word in ["nan", "inf", "true", "manual", "ENTRY", "ROOT"] {
        for spelled in [word.to_string(), format!("%{word}")] {
            let text = format!(
                "HloModule m\nENTRY e {{\n  {spelled} = f32[] parameter(0)\n  ROOT r = f32[] negate({spelled})\n}}\n"
            );
            let err = tessera_hlo::text::parse_module(&text).expect_err(&text).to_string();
            // A bare `ROOT` starts a root instruction, whose name is then missing.
            let named = err.contains(&format!("'{word}' is a keyword")) || err.contains("expects name");
            assert!(named && err.starts_with("3:"), "{text}: {err}");
        }
    }
    let text = "HloModule m\nENTRY e {\n  n = f32[] constant(nan)\n  t = pred[] constant(true)\n  ROOT r = (f32[], pred[]) tuple(n, t)\n}\n";
    tessera_hlo::text::parse_module(text).unwrap();
}
