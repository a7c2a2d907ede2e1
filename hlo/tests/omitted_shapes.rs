//! Instructions written without a shape get the one the verifier's rules infer, and
//! single-instruction text is wrapped in a module as XLA does.

use tessera_hlo::ir::Module;
use tessera_hlo::text::{parse_module, print_module, PrintOptions};

fn parse(text: &str) -> Module {
    parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The shape of instruction `name` in the module's computations, printed with its layout.
fn shape_of(module: &Module, name: &str) -> String {
    for comp in &module.computations {
        if let Some(inst) = comp.instructions.iter().find(|i| i.name == name) {
            return inst.shape.to_string();
        }
    }
    panic!("no instruction {name}")
}

fn error(text: &str) -> String {
    match parse_module(text) {
        Ok(m) => panic!("accepted:\n{}", print_module(&m, &PrintOptions::long())),
        Err(e) => e.to_string(),
    }
}

#[test]
fn elementwise_compare_tuple_gte() {
    let m = parse(
        "HloModule m\n\nENTRY e {\n  x = f32[2,3]{0,1} parameter(0)\n  y = f32[2,3] parameter(1)\n  \
         add = add(x, y)\n  lt = compare(add, y), direction=LT\n  t = tuple(add, lt)\n  \
         ROOT g = get-tuple-element(t), index=1\n}\n",
    );
    // Inferred shapes take the default layout, whatever the operands' layouts.
    assert_eq!(shape_of(&m, "add"), "f32[2,3]{1,0}");
    assert_eq!(shape_of(&m, "lt"), "pred[2,3]{1,0}");
    assert_eq!(shape_of(&m, "t"), "(f32[2,3]{1,0}, pred[2,3]{1,0})");
    assert_eq!(shape_of(&m, "g"), "pred[2,3]{1,0}");
    tessera_hlo::verify::verify(&m).unwrap();
}

#[test]
fn dot_concatenate_slice_transpose() {
    let m = parse(
        "HloModule m\n\nENTRY e {\n  a = f32[2,3] parameter(0)\n  b = f32[3,4] parameter(1)\n  \
         d = dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
         c = concatenate(d, d), dimensions={0}\n  s = slice(c), slice={[1:3], [0:4:2]}\n  \
         ROOT t = transpose(s), dimensions={1,0}\n}\n",
    );
    assert_eq!(shape_of(&m, "d"), "f32[2,4]{1,0}");
    assert_eq!(shape_of(&m, "c"), "f32[4,4]{1,0}");
    assert_eq!(shape_of(&m, "s"), "f32[2,2]{1,0}");
    assert_eq!(shape_of(&m, "t"), "f32[2,2]{1,0}");
    tessera_hlo::verify::verify(&m).unwrap();
}

#[test]
fn reduce_while_call_with_callees_before() {
    let m = parse(
        "HloModule m\n\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = add(a, b)\n}\n\n\
         cond {\n  p = (s32[], f32[4]) parameter(0)\n  i = get-tuple-element(p), index=0\n  \
         n = s32[] constant(3)\n  ROOT lt = compare(i, n), direction=LT\n}\n\n\
         body {\n  p = (s32[], f32[4]) parameter(0)\n  i = get-tuple-element(p), index=0\n  \
         one = s32[] constant(1)\n  j = add(i, one)\n  v = get-tuple-element(p), index=1\n  ROOT t = tuple(j, v)\n}\n\n\
         ENTRY e {\n  x = f32[4,5] parameter(0)\n  zero = f32[] constant(0)\n  \
         r = reduce(x, zero), dimensions={1}, to_apply=sum\n  i0 = s32[] constant(0)\n  \
         init = tuple(i0, r)\n  w = while(init), condition=cond, body=body\n  \
         ROOT c = call(zero, zero), to_apply=sum\n}\n",
    );
    assert_eq!(shape_of(&m, "s"), "f32[]");
    assert_eq!(shape_of(&m, "r"), "f32[4]{0}");
    assert_eq!(shape_of(&m, "w"), "(s32[], f32[4]{0})");
    assert_eq!(shape_of(&m, "c"), "f32[]");
    tessera_hlo::verify::verify(&m).unwrap();
}

#[test]
fn callees_written_after_their_callers() {
    // The entry comes first and calls computations defined below it, one of which calls
    // another defined after it: each waits for what it calls.
    let m = parse(
        "HloModule m\n\nENTRY e {\n  x = f32[4,5] parameter(0)\n  zero = f32[] constant(0)\n  \
         r = reduce(x, zero), dimensions={1}, to_apply=outer\n  ROOT c = call(r), to_apply=wrap\n}\n\n\
         wrap {\n  p = f32[4] parameter(0)\n  ROOT n = negate(p)\n}\n\n\
         outer {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT k = call(a, b), to_apply=inner\n}\n\n\
         inner {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = maximum(a, b)\n}\n",
    );
    assert_eq!(shape_of(&m, "k"), "f32[]");
    assert_eq!(shape_of(&m, "r"), "f32[4]{0}");
    assert_eq!(shape_of(&m, "c"), "f32[4]{0}");
    assert_eq!(m.comp(m.entry).name, "e");
    let names: Vec<&str> = m.computations.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["e", "wrap", "outer", "inner"], "computations keep their written order");
    tessera_hlo::verify::verify(&m).unwrap();
    // Printing states every shape, and the printout parses to the same text.
    let printed = print_module(&m, &PrintOptions::long());
    assert_eq!(print_module(&parse(&printed), &PrintOptions::long()), printed);
}

#[test]
fn un_inferable_opcode_is_an_error_at_the_instruction() {
    let e = error("HloModule m\n\nENTRY e {\n  x = f32[6] parameter(0)\n  ROOT r = reshape(x)\n}\n");
    assert!(e.starts_with("5:12: "), "{e}");
    assert!(e.contains("cannot infer the shape of `reshape`; write it"), "{e}");
    for (op, line) in [
        ("broadcast", "  ROOT r = broadcast(x), dimensions={0}"),
        ("convert", "  ROOT r = convert(x)"),
        ("custom-call", "  ROOT r = custom-call(x), custom_call_target=\"t\""),
    ] {
        let e = error(&format!("HloModule m\n\nENTRY e {{\n  x = f32[6] parameter(0)\n{line}\n}}\n"));
        assert!(e.contains(&format!("cannot infer the shape of `{op}`; write it")), "{e}");
    }
}

#[test]
fn failed_inference_carries_position_and_rule() {
    let e = error(
        "HloModule m\n\nENTRY e {\n  a = f32[2,3] parameter(0)\n  b = f32[4,4] parameter(1)\n  \
         ROOT d = dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
    );
    assert!(e.starts_with("6:12: cannot infer the shape of `dot`: dot."), "{e}");
    let e = error(
        "HloModule m\n\nENTRY e {\n  a = f32[2] parameter(0)\n  b = s32[2] parameter(1)\n  ROOT s = add(a, b)\n}\n",
    );
    assert!(e.starts_with("6:12: cannot infer the shape of `add`: "), "{e}");
    let e =
        error("HloModule m\n\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT t = transpose(a), dimensions={1,0}\n}\n");
    assert!(e.starts_with("5:12: cannot infer the shape of `transpose`: transpose."), "{e}");
}

#[test]
fn unresolvable_callees() {
    let e = error("HloModule m\n\nENTRY e {\n  a = f32[] parameter(0)\n  ROOT c = call(a), to_apply=nowhere\n}\n");
    assert!(e.contains("computation does not exist: nowhere"), "{e}");
    // A computation whose own root waits for its caller's shape.
    let e = error(
        "HloModule m\n\nf {\n  p = f32[] parameter(0)\n  ROOT c = call(p), to_apply=g\n}\n\n\
         g {\n  p = f32[] parameter(0)\n  ROOT c = call(p), to_apply=f\n}\n\n\
         ENTRY e {\n  a = f32[] parameter(0)\n  ROOT c = f32[] call(a), to_apply=f\n}\n",
    );
    assert!(e.starts_with("5:12: cannot infer the shape of `call`"), "{e}");
}

#[test]
fn single_instruction_text() {
    let m = parse("%multiply = f32[2,4]{1,0} multiply(f32[2,4]{1,0} %broadcast, f32[2,4]{1,0} %x)");
    let entry = m.comp(m.entry);
    assert_eq!(entry.instructions.len(), 3);
    assert_eq!(entry.root_inst().name, "multiply");
    assert_eq!(entry.parameter_shapes().len(), 2);
    tessera_hlo::verify::verify(&m).unwrap();

    // No name and anonymous operands: parameters `_0`, `_1`.
    let m = parse("f32[2,4]{1,0} multiply(f32[2,4]{1,0}, f32[2,4]{1,0})");
    let entry = m.comp(m.entry);
    assert_eq!(entry.instructions[0].name, "_0");
    assert_eq!(entry.instructions[1].name, "_1");

    // Inline computations, with an inferred shape.
    let m = parse(
        "r = reduce(f32[10] x, f32[] z), dimensions={0}, to_apply=\n{\n  a = f32[] parameter(0)\n  \
         b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}",
    );
    assert_eq!(m.computations.len(), 2);
    assert_eq!(shape_of(&m, "r"), "f32[]");
    tessera_hlo::verify::verify(&m).unwrap();
    let printed = print_module(&m, &PrintOptions::long());
    assert_eq!(print_module(&parse(&printed), &PrintOptions::long()), printed);

    let e = error("a = f32[] parameter(0)\nb = f32[] parameter(1)");
    assert!(e.contains("Expected eof after parsing single instruction"), "{e}");
}
