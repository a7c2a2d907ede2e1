//! Elementwise ops on every type through emit_kernel + the kernel interpreter, against the
//! reference interpreter.

mod support;

use support::check;

const FLOATS: [&str; 4] = ["f16", "bf16", "f32", "f64"];
const INTS: [&str; 8] = ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"];

fn unary(op: &str, ty: &str, out: &str) -> String {
    format!(
        "HloModule m\nENTRY e {{\n  p = {ty}[3,37]{{1,0}} parameter(0)\n  ROOT r = {out}[3,37]{{1,0}} {op}(p)\n}}\n"
    )
}

fn binary(op: &str, ty: &str) -> String {
    format!(
        "HloModule m\nENTRY e {{\n  a = {ty}[5,33]{{1,0}} parameter(0)\n  b = {ty}[5,33]{{1,0}} parameter(1)\n  ROOT r = {ty}[5,33]{{1,0}} {op}(a, b)\n}}\n"
    )
}

#[test]
fn float_unary_ops() {
    let ops = [
        "abs",
        "negate",
        "sign",
        "sqrt",
        "rsqrt",
        "cbrt",
        "exponential",
        "exponential-minus-one",
        "log",
        "log-plus-one",
        "logistic",
        "sine",
        "cosine",
        "tan",
        "tanh",
        "erf",
        "floor",
        "ceil",
        "round-nearest-afz",
        "round-nearest-even",
    ];
    for ty in FLOATS {
        for op in ops {
            check(&unary(op, ty, ty));
        }
        check(&unary("is-finite", ty, "pred"));
    }
}

#[test]
fn int_unary_ops() {
    for ty in INTS {
        for op in ["abs", "negate", "sign", "not", "popcnt", "count-leading-zeros"] {
            if (op == "abs" || op == "sign") && ty.starts_with('u') {
                continue;
            }
            check(&unary(op, ty, ty));
        }
    }
    check(&unary("not", "pred", "pred"));
}

#[test]
fn float_binary_ops() {
    for ty in FLOATS {
        for op in ["add", "subtract", "multiply", "divide", "remainder", "power", "atan2", "maximum", "minimum"] {
            check(&binary(op, ty));
        }
    }
}

#[test]
fn int_binary_ops() {
    for ty in INTS {
        for op in [
            "add",
            "subtract",
            "multiply",
            "divide",
            "remainder",
            "power",
            "maximum",
            "minimum",
            "and",
            "or",
            "xor",
            "shift-left",
            "shift-right-logical",
            "shift-right-arithmetic",
        ] {
            check(&binary(op, ty));
        }
    }
    for op in ["and", "or", "xor", "add", "multiply", "maximum", "minimum"] {
        check(&binary(op, "pred"));
    }
}

#[test]
fn compares() {
    for ty in FLOATS.iter().chain(INTS.iter()).chain(["pred"].iter()) {
        for dir in ["EQ", "NE", "LT", "LE", "GT", "GE"] {
            let kinds: &[&str] =
                if ty.starts_with('f') || ty.starts_with('b') { &["", ", type=TOTALORDER"] } else { &[""] };
            for kind in kinds {
                check(&format!(
                    "HloModule m\nENTRY e {{\n  a = {ty}[4,19]{{1,0}} parameter(0)\n  b = {ty}[4,19]{{1,0}} parameter(1)\n  ROOT r = pred[4,19]{{1,0}} compare(a, b), direction={dir}{kind}\n}}\n"
                ));
            }
        }
    }
}

#[test]
fn select_and_clamp() {
    for ty in FLOATS.iter().chain(INTS.iter()) {
        check(&format!(
            "HloModule m\nENTRY e {{\n  p = pred[6,7]{{1,0}} parameter(0)\n  a = {ty}[6,7]{{1,0}} parameter(1)\n  b = {ty}[6,7]{{1,0}} parameter(2)\n  ROOT r = {ty}[6,7]{{1,0}} select(p, a, b)\n}}\n"
        ));
        check(&format!(
            "HloModule m\nENTRY e {{\n  lo = {ty}[6,7]{{1,0}} parameter(0)\n  x = {ty}[6,7]{{1,0}} parameter(1)\n  hi = {ty}[6,7]{{1,0}} parameter(2)\n  ROOT r = {ty}[6,7]{{1,0}} clamp(lo, x, hi)\n}}\n"
        ));
        check(&format!(
            "HloModule m\nENTRY e {{\n  lo = {ty}[] parameter(0)\n  x = {ty}[6,7]{{1,0}} parameter(1)\n  hi = {ty}[] parameter(2)\n  ROOT r = {ty}[6,7]{{1,0}} clamp(lo, x, hi)\n}}\n"
        ));
    }
}

#[test]
fn converts_between_all_types() {
    let all: Vec<&str> = ["pred"].iter().chain(INTS.iter()).chain(FLOATS.iter()).copied().collect();
    for from in &all {
        for to in &all {
            check(&unary("convert", from, to).replace(&format!("p = {to}"), &format!("p = {from}")));
        }
    }
}

#[test]
fn bitcast_converts_same_width() {
    let pairs = [
        ("f32", "s32"),
        ("s32", "f32"),
        ("u32", "f32"),
        ("f64", "s64"),
        ("s64", "f64"),
        ("u64", "f64"),
        ("f16", "s16"),
        ("s16", "f16"),
        ("bf16", "u16"),
        ("u16", "bf16"),
        ("f16", "bf16"),
        ("s8", "u8"),
    ];
    for (from, to) in pairs {
        check(&format!(
            "HloModule m\nENTRY e {{\n  p = {from}[3,37]{{1,0}} parameter(0)\n  ROOT r = {to}[3,37]{{1,0}} bitcast-convert(p)\n}}\n"
        ));
    }
}

#[test]
fn fused_chain_with_scalar_constants_and_iota() {
    for ty in ["f32", "bf16", "f16", "s32", "f64"] {
        check(&format!(
            "HloModule m\nENTRY e {{\n  a = {ty}[8,40]{{1,0}} parameter(0)\n  b = {ty}[8,40]{{1,0}} parameter(1)\n  c = {ty}[] constant(3)\n  cb = {ty}[8,40]{{1,0}} broadcast(c), dimensions={{}}\n  i = {ty}[8,40]{{1,0}} iota(), iota_dimension=1\n  m = {ty}[8,40]{{1,0}} multiply(a, cb)\n  s = {ty}[8,40]{{1,0}} add(m, i)\n  ROOT r = {ty}[8,40]{{1,0}} maximum(s, b)\n}}\n"
        ));
    }
}

#[test]
fn the_harness_catches_a_wrong_element() {
    let want = tessera_hlo::Literal::from_vec(&[3], vec![1.0f32, 2.0, 3.0]).unwrap();
    let got = tessera_hlo::Literal::from_vec(&[3], vec![1.0f32, 2.5, 3.0]).unwrap();
    assert!(support::compare(&got, &want, "x").is_err());
    assert!(support::compare(&want, &want, "x").is_ok());
}

#[test]
fn map_inlines_its_computation() {
    check(
        "HloModule m\nf {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  s = f32[] multiply(x, y)\n  ROOT r = f32[] add(s, x)\n}\nENTRY e {\n  a = f32[4,9]{1,0} parameter(0)\n  b = f32[4,9]{0,1} parameter(1)\n  ROOT m = f32[4,9]{1,0} map(a, b), dimensions={0,1}, to_apply=f\n}\n",
    );
}

#[test]
fn unsupported_ops_and_types_are_errors_naming_them() {
    let cases = [
        ("HloModule m\nENTRY e {\n  p = c64[4]{0} parameter(0)\n  ROOT r = c64[4]{0} tan(p)\n}\n", "tan on complex"),
        ("HloModule m\nENTRY e {\n  p = f32[8]{0} parameter(0)\n  ROOT r = s32[] get-dimension-size(p), dimensions={0}\n}\n", "get-dimension-size"),
        ("HloModule m\nENTRY e {\n  p = f32[3,4]{1,0} parameter(0)\n  c = f32[3,4]{1,0} constant({{1,2,3,4},{5,6,7,8},{9,10,11,12}})\n  ROOT r = f32[3,4]{1,0} add(p, c)\n}\n", "array constant"),
    ];
    for (text, what) in cases {
        let module = tessera_hlo::text::parse_module(text).expect("parses");
        match tessera_lower::emit_kernel(&module, module.entry_comp(), "k") {
            Err(tessera_lower::LowerError::Unsupported { what: w, .. }) => assert!(w.contains(what), "{w}"),
            other => panic!("expected an unsupported error naming {what}, got {other:?}"),
        }
    }
}

#[test]
fn broadcast_scalars_are_loaded_once_per_row() {
    let k = check(
        "HloModule m\nENTRY e {\n  a = f32[8,64]{1,0} parameter(0)\n  s = f32[] parameter(1)\n  b = f32[8,64]{1,0} broadcast(s), dimensions={}\n  ROOT r = f32[8,64]{1,0} multiply(a, b)\n}\n",
    );
    let text = k.to_string();
    let scalar_load = text.lines().position(|l| l.contains("load.f32 b1[0]")).expect("a load of the scalar");
    let inner_loop = text.lines().position(|l| l.contains("vector(")).expect("a vector loop");
    assert!(scalar_load < inner_loop, "the scalar's load stays in the inner loop:\n{text}");
}

#[test]
fn reduce_precision_on_every_float_type() {
    for ty in FLOATS {
        for (e, m) in [(5, 10), (8, 7), (11, 52), (4, 3), (8, 23), (2, 0), (11, 20)] {
            check(&format!(
                "HloModule m\nENTRY e {{\n  p = {ty}[7,9]{{1,0}} parameter(0)\n  ROOT r = {ty}[7,9]{{1,0}} reduce-precision(p), exponent_bits={e}, mantissa_bits={m}\n}}\n"
            ));
        }
    }
}

/// Width-changing bitcast-convert splits an element into little-endian parts along a new minor
/// dimension, or joins them back, in every layout of that dimension.
#[test]
fn bitcast_convert_between_widths() {
    check("HloModule m\nENTRY e {\n  p = f32[8]{0} parameter(0)\n  ROOT r = u8[8,4]{1,0} bitcast-convert(p)\n}\n");
    check("HloModule m\nENTRY e {\n  p = f64[3,5]{0,1} parameter(0)\n  ROOT r = u16[3,5,4]{0,2,1} bitcast-convert(p)\n}\n");
    check("HloModule m\nENTRY e {\n  p = u8[6,4]{1,0} parameter(0)\n  ROOT r = f32[6]{0} bitcast-convert(p)\n}\n");
    check("HloModule m\nENTRY e {\n  p = s16[5,2]{0,1} parameter(0)\n  ROOT r = s32[5]{0} bitcast-convert(p)\n}\n");
}

/// Outside loops (a scalar, a while loop's step) sin and cos take the f64 routines, whose
/// dependent chain is the shorter; in a loop over an array they keep the f32 ones, in lanes.
/// Both agree with the reference either way.
#[test]
fn scalar_sin_and_cos_compute_through_f64() {
    for op in ["sine", "cosine"] {
        let scalar =
            check(&format!("HloModule m\nENTRY e {{\n  p = f32[] parameter(0)\n  ROOT r = f32[] {op}(p)\n}}\n"));
        let array = check(&unary(op, "f32", "f32"));
        assert!(scalar.to_string().contains("fpext.f32.f64"), "{op} of a scalar:\n{scalar}");
        assert!(!array.to_string().contains("fpext.f32.f64"), "{op} of an array:\n{array}");
    }
}

/// A concatenate of two operands' long math routines (`sin`, `cos`: hundreds of statements
/// each) splits into one loop per operand, each holding only its operand's code, instead of
/// one loop that branches per element on which operand it reads.
#[test]
fn a_concatenate_of_long_routines_splits_into_a_loop_per_operand() {
    let k = check(
        "HloModule m\nENTRY e {\n  a = f32[4,256]{1,0} parameter(0)\n  b = f32[4,256]{1,0} parameter(1)\n  s = f32[4,256]{1,0} sine(a)\n  c = f32[4,256]{1,0} cosine(b)\n  ROOT r = f32[4,512]{1,0} concatenate(s, c), dimensions={1}\n}\n",
    );
    let text = k.to_string();
    let loops: Vec<usize> = text.lines().enumerate().filter(|(_, l)| l.contains("vector(")).map(|(i, _)| i).collect();
    assert_eq!(loops.len(), 2, "one loop per operand:\n{text}");
    let lines: Vec<&str> = text.lines().collect();
    let reads = |range: &[&str], buf: &str| range.iter().any(|l| l.contains("load.f32") && l.contains(buf));
    let (first, second) = (&lines[loops[0]..loops[1]], &lines[loops[1]..]);
    assert!(reads(first, "b0[") && !reads(first, "b1["), "the first loop reads only `a`:\n{text}");
    assert!(reads(second, "b1[") && !reads(second, "b0["), "the second loop reads only `b`:\n{text}");
}
