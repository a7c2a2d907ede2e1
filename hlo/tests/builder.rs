//! The builder API: seed 003's examples (axpy, reductions, while), its broadcasting rules,
//! einsum, deferred errors, and every op family.

use tessera_hlo::builder::{
    Builder, ComparisonDirection, ConvOptions, DotDimensionNumbers, FftType, GatherDimensionNumbers, Padding,
    Precision, ScatterDimensionNumbers, TriangularTranspose, XlaOp,
};
use tessera_hlo::ir::{AttrList, AttrValue, PaddingDim};
use tessera_hlo::text::{parse_module, print_module, PrintOptions};
use tessera_hlo::{verify, ElementType, Module, Opcode, Shape};
use tessera_testkit::Rng;

use ElementType::{Pred, C64, F32, S32, U32, U8};

fn f32s(dims: &[i64]) -> Shape {
    Shape::array(F32, dims)
}

/// `(name, opcode, dims)` of every instruction of the entry computation.
fn entry_summary(m: &Module) -> Vec<(String, Opcode, Vec<i64>)> {
    m.entry_comp().instructions.iter().map(|i| (i.name.clone(), i.opcode, i.shape.dims().to_vec())).collect()
}

fn opcodes(m: &Module) -> Vec<Opcode> {
    m.entry_comp().instructions.iter().map(|i| i.opcode).collect()
}

fn root_dims(m: &Module) -> Vec<i64> {
    m.entry_comp().root_inst().shape.dims().to_vec()
}

fn sum_computation(b: &Builder, ty: ElementType) -> Module {
    let sub = b.create_sub_builder("add");
    let x = sub.parameter(0, &Shape::scalar(ty), "x");
    let y = sub.parameter(1, &Shape::scalar(ty), "y");
    let sum = sub.add(x, y);
    sub.build(sum).expect("add computation")
}

/// Builds and checks the module with the verifier.
fn built(b: &Builder, root: tessera_hlo::builder::XlaOp<'_>) -> Module {
    let m = b.build(root).unwrap_or_else(|e| panic!("build failed: {e}"));
    verify::verify(&m).unwrap_or_else(|e| panic!("built module does not verify: {e}"));
    m
}

/// The short printed form, after checking that the module verifies and survives a round trip
/// through the text format.
fn short_text(m: &Module) -> String {
    verify::verify(m).unwrap_or_else(|e| panic!("built module does not verify: {e}"));
    let text = print_module(m, &PrintOptions::short());
    let parsed = parse_module(&text).unwrap_or_else(|e| panic!("printed module does not parse: {e}\n{text}"));
    verify::verify(&parsed).unwrap_or_else(|e| panic!("reparsed module does not verify: {e}"));
    assert_eq!(print_module(&parsed, &PrintOptions::short()), text);
    text
}

// ---- Printed text --------------------------------------------------------------------------

#[test]
fn axpy_with_parameters_prints_like_xla() {
    let b = Builder::new("axpy");
    let alpha = b.parameter(0, &Shape::scalar(F32), "alpha");
    let x = b.parameter(1, &f32s(&[10]), "x");
    let y = b.parameter(2, &f32s(&[10]), "y");
    let m = built(&b, b.add(b.mul(alpha, x), y));
    let expected = "\
HloModule axpy.7, entry_computation_layout={(f32[], f32[10]{0}, f32[10]{0})->f32[10]{0}}

ENTRY axpy.7 {
  alpha.1 = f32[] parameter(0)
  broadcast.4 = f32[10]{0} broadcast(alpha.1), dimensions={}
  x.2 = f32[10]{0} parameter(1)
  multiply.5 = f32[10]{0} multiply(broadcast.4, x.2)
  y.3 = f32[10]{0} parameter(2)
  ROOT add.6 = f32[10]{0} add(multiply.5, y.3)
}
";
    assert_eq!(short_text(&m).trim_end(), expected.trim_end());
}

#[test]
fn axpy_with_constants_prints_like_xla() {
    let b = Builder::new("axpy");
    let axpy = b.constant_r0(3.5f32) * b.constant_r1(&[1f32, 2., 3.]) + b.constant_r1(&[4f32, 5., 6.]);
    let m = built(&b, axpy);
    let expected = "\
HloModule axpy.7, entry_computation_layout={()->f32[3]{0}}

ENTRY axpy.7 {
  constant.1 = f32[] constant(3.5)
  broadcast.3 = f32[3]{0} broadcast(constant.1), dimensions={}
  constant.2 = f32[3]{0} constant({1, 2, 3})
  multiply.4 = f32[3]{0} multiply(broadcast.3, constant.2)
  constant.5 = f32[3]{0} constant({4, 5, 6})
  ROOT add.6 = f32[3]{0} add(multiply.4, constant.5)
}
";
    assert_eq!(short_text(&m).trim_end(), expected.trim_end());
}

#[test]
fn reduce_prints_with_its_computation() {
    let b = Builder::new("reduce");
    let add = b.scalar_computation("add", F32, |s, x, y| s.add(x, y));
    let x = b.parameter(0, &f32s(&[4, 2, 3]), "x");
    let m = built(&b, b.reduce(x, b.zero(F32), &add, &[0, 1]));
    let expected = "\
HloModule reduce.8, entry_computation_layout={(f32[4,2,3]{2,1,0})->f32[3]{0}}

add.4 {
  x.1 = f32[] parameter(0)
  y.2 = f32[] parameter(1)
  ROOT add.3 = f32[] add(x.1, y.2)
}

ENTRY reduce.8 {
  x.5 = f32[4,2,3]{2,1,0} parameter(0)
  constant.6 = f32[] constant(0)
  ROOT reduce.7 = f32[3]{0} reduce(x.5, constant.6), dimensions={0,1}, to_apply=add.4
}
";
    assert_eq!(short_text(&m).trim_end(), expected.trim_end());
}

#[test]
fn degenerate_broadcast_prints_reshape_and_broadcast() {
    let b = Builder::new("outer");
    let s = b.add(b.parameter(0, &f32s(&[2, 1]), "x"), b.parameter(1, &f32s(&[1, 3]), "y"));
    let m = built(&b, s);
    let expected = "\
HloModule outer.8, entry_computation_layout={(f32[2,1]{1,0}, f32[1,3]{1,0})->f32[2,3]{1,0}}

ENTRY outer.8 {
  x.1 = f32[2,1]{1,0} parameter(0)
  reshape.3 = f32[2]{0} reshape(x.1)
  broadcast.4 = f32[2,3]{1,0} broadcast(reshape.3), dimensions={0}
  y.2 = f32[1,3]{1,0} parameter(1)
  reshape.5 = f32[3]{0} reshape(y.2)
  broadcast.6 = f32[2,3]{1,0} broadcast(reshape.5), dimensions={1}
  ROOT add.7 = f32[2,3]{1,0} add(broadcast.4, broadcast.6)
}
";
    assert_eq!(short_text(&m).trim_end(), expected.trim_end());
}

#[test]
fn einsum_and_conv_print_xla_attributes() {
    let b = Builder::new("attrs");
    let x = b.parameter(0, &f32s(&[1, 3, 8, 8]), "x");
    let k = b.parameter(1, &f32s(&[4, 3, 3, 3]), "k");
    let c = b.conv(x, k, &[2, 2], Padding::Same);
    let e = b.einsum("bij,bjk->bki", &[b.parameter(2, &f32s(&[5, 2, 3]), "p"), b.parameter(3, &f32s(&[5, 3, 4]), "q")]);
    let m = built(&b, b.tuple(&[c, e]));
    let text = short_text(&m);
    assert!(
        text.contains(
            "convolution.3 = f32[1,4,4,4]{3,2,1,0} convolution(x.1, k.2), window={size=3x3 stride=2x2 pad=0_1x0_1}, \
             dim_labels=bf01_oi01->bf01"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "dot.6 = f32[5,2,4]{2,1,0} dot(p.4, q.5), lhs_batch_dims={0}, lhs_contracting_dims={2}, \
             rhs_batch_dims={0}, rhs_contracting_dims={1}"
        ),
        "{text}"
    );
    assert!(text.contains("transpose.7 = f32[5,4,2]{2,1,0} transpose(dot.6), dimensions={0,2,1}"), "{text}");
}

#[test]
fn every_example_module_verifies_and_round_trips() {
    let b = Builder::new("everything");
    let state = Shape::Tuple(vec![Shape::scalar(S32), f32s(&[10])]);
    let cond = b.create_sub_builder("condition");
    let p = cond.parameter(0, &state, "p");
    let cond = built(&cond, cond.lt(cond.get_tuple_element(p, 0), cond.constant_r0(1000i32)));
    let body = b.create_sub_builder("body");
    let p = body.parameter(0, &state, "p");
    let next = body.tuple(&[
        body.add(body.get_tuple_element(p, 0), body.constant_r0(1i32)),
        body.add(body.get_tuple_element(p, 1), body.constant_r1_splat(10, 0.125f32)),
    ]);
    let body = built(&body, next);
    let looped = b.while_loop(&cond, &body, b.tuple(&[b.constant_r0(0i32), b.constant_r1_splat(10, 0f32)]));

    let max = b.scalar_computation("max", F32, |s, x, y| s.max(x, y));
    let ge = b.scalar_computation("ge", F32, |s, x, y| s.ge(x, y));
    let add = b.scalar_computation("add", F32, |s, x, y| s.add(x, y));
    let x = b.parameter(0, &f32s(&[4, 6]), "x");
    let pooled = b.reduce_window(x, b.constant_r0(f32::MIN), &max, &[2, 3], &[2, 3], Padding::Valid);
    let src = b.parameter(1, &f32s(&[2, 2]), "src");
    let sas = b.select_and_scatter(x, &ge, &[2, 3], &[2, 3], Padding::Valid, src, b.zero(F32), &add);
    let sorted = b.sort_ascending(x, 1);
    let mapped = b.map(&[x, x], &add);
    let v = b.parameter(2, &f32s(&[6]), "v");
    let bcast = b.add_broadcast(x, v, &[1]);
    let sliced = b.slice(x, &[1, 0], &[3, 6], &[1, 2]);
    let padded = b.pad(x, b.zero(F32), &[PaddingDim { low: 1, high: -1, interior: 1 }, PaddingDim::default()]);
    let clamped = b.clamp(b.zero(F32), x, b.one(F32));
    let summed = b.einsum("ij->j", &[x]);
    let root = b.tuple(&[looped, pooled, sas, sorted, mapped, bcast, sliced, padded, clamped, summed]);
    let m = built(&b, root);
    let text = short_text(&m);
    assert!(text.contains("slice={[1:3:1], [0:6:2]}"), "{text}");
    assert!(text.contains("padding=1_-1_1x0_0_0"), "{text}");
    assert!(text.contains("condition=condition."), "{text}");
}

// ---- Seed 003: axpy ----------------------------------------------------------------------

#[test]
fn axpy_with_parameters() {
    let b = Builder::new("axpy");
    let alpha = b.parameter(0, &Shape::scalar(F32), "alpha");
    let x = b.parameter(1, &f32s(&[10]), "x");
    let y = b.parameter(2, &f32s(&[10]), "y");
    let axpy = b.add(b.mul(alpha, x), y);
    let m = built(&b, axpy);

    assert_eq!(m.name, "axpy.7");
    assert_eq!(m.entry_comp().name, "axpy.7");
    assert_eq!(m.computations.len(), 1);
    let names = entry_summary(&m);
    assert_eq!(
        names,
        vec![
            ("alpha.1".to_string(), Opcode::Parameter, vec![]),
            ("x.2".to_string(), Opcode::Parameter, vec![10]),
            ("y.3".to_string(), Opcode::Parameter, vec![10]),
            ("broadcast.4".to_string(), Opcode::Broadcast, vec![10]),
            ("multiply.5".to_string(), Opcode::Multiply, vec![10]),
            ("add.6".to_string(), Opcode::Add, vec![10]),
        ]
    );
    let bcast = &m.entry_comp().instructions[3];
    assert_eq!(bcast.attr_ints("dimensions"), Some(&[][..]));
    assert_eq!(m.entry_comp().root_inst().name, "add.6");
    let layout = m.entry_computation_layout().unwrap();
    assert_eq!(layout.parameters.len(), 3);
    assert_eq!(layout.result.to_string(), "f32[10]{0}");
    assert_eq!(layout.parameters[0].to_string(), "f32[]");
}

#[test]
fn axpy_with_constants() {
    let b = Builder::new("axpy");
    let alpha = b.constant_r0(3.5f32);
    let x = b.constant_r1(&[1.0f32, 2.0, 3.0, 4.0]);
    let y = b.constant_r1(&[5.0f32, 6.0, 7.0, 8.0]);
    let axpy = alpha * x + y; // operators go through the op's builder
    let m = built(&b, axpy);
    assert_eq!(
        opcodes(&m),
        vec![Opcode::Constant, Opcode::Constant, Opcode::Constant, Opcode::Broadcast, Opcode::Multiply, Opcode::Add]
    );
    assert_eq!(root_dims(&m), vec![4]);
    let x_lit = m.entry_comp().instructions[1].literal().unwrap();
    assert_eq!(x_lit.get_bits(1), Some(2.0f32.to_bits() as u128));
    assert!(m.entry_computation_layout().unwrap().parameters.is_empty());
}

// ---- Seed 003: reductions ----------------------------------------------------------------

#[test]
fn reduce_2d_over_each_dimension() {
    for (dims, expect) in [(vec![0], vec![3]), (vec![1], vec![2]), (vec![0, 1], vec![])] {
        let b = Builder::new("reduce_2d");
        let add = sum_computation(&b, F32);
        let x = b.parameter(0, &f32s(&[2, 3]), "x");
        let zero = b.constant_r0(0f32);
        let r = b.reduce(x, zero, &add, &dims);
        let m = built(&b, r);
        assert_eq!(root_dims(&m), expect, "dims {dims:?}");
        assert_eq!(m.computations.len(), 2);
        let root = m.entry_comp().root_inst();
        assert_eq!(root.opcode, Opcode::Reduce);
        assert_eq!(root.attr_ints("dimensions"), Some(&dims[..]));
        let callee = root.called("to_apply").unwrap();
        assert_eq!(m.comp(callee).name, "add.4");
        assert_eq!(m.comp(callee).root_inst().name, "add.3");
    }
}

#[test]
fn reduce_3d_examples() {
    let cases: [(&[i64], &[i64]); 4] = [(&[0], &[2, 3]), (&[2], &[4, 2]), (&[0, 1], &[3]), (&[0, 1, 2], &[])];
    for (dims, expect) in cases {
        let b = Builder::new("reduce_3d");
        let add = sum_computation(&b, F32);
        let x = b.parameter(0, &f32s(&[4, 2, 3]), "x");
        let r = b.reduce(x, b.constant_r0(0f32), &add, dims);
        assert_eq!(r.shape().unwrap().dims(), expect);
    }
    let b = Builder::new("reduce_all");
    let add = b.scalar_computation("add", F32, |s, x, y| s.add(x, y));
    let x = b.parameter(0, &f32s(&[4, 2, 3]), "x");
    let r = b.reduce_all(x, b.zero(F32), &add);
    assert_eq!(r.shape().unwrap().to_string(), "f32[]");
}

#[test]
fn reduce_reuses_an_imported_computation() {
    let b = Builder::new("two_sums");
    let add = sum_computation(&b, F32);
    let x = b.parameter(0, &f32s(&[2, 3]), "x");
    let zero = b.constant_r0(0f32);
    let r0 = b.reduce(x, zero, &add, &[0]);
    let r1 = b.reduce(x, zero, &add, &[1]);
    let m = built(&b, b.tuple(&[r0, r1]));
    assert_eq!(m.computations.len(), 2);
}

#[test]
fn multi_operand_reduce() {
    let b = Builder::new("argmax");
    let sub = b.create_sub_builder("argmax_step");
    let (v0, i0) = (sub.parameter(0, &Shape::scalar(F32), "v0"), sub.parameter(1, &Shape::scalar(S32), "i0"));
    let (v1, i1) = (sub.parameter(2, &Shape::scalar(F32), "v1"), sub.parameter(3, &Shape::scalar(S32), "i1"));
    let take_first = sub.ge(v0, v1);
    let step = sub.tuple(&[sub.select(take_first, v0, v1), sub.select(take_first, i0, i1)]);
    let step = built(&sub, step);

    let x = b.parameter(0, &f32s(&[5, 7]), "x");
    let idx = b.iota(&Shape::array(S32, &[5, 7]), 1);
    let r = b.reduce_multi(&[x, idx], &[b.constant_r0(f32::NEG_INFINITY), b.constant_r0(0i32)], &step, &[1]);
    assert_eq!(r.shape().unwrap().to_string(), "(f32[5]{0}, s32[5]{0})");
}

// ---- Seed 003: while ---------------------------------------------------------------------

#[test]
fn while_loop_example() {
    let b = Builder::new("while_example");
    let state = Shape::Tuple(vec![Shape::scalar(S32), f32s(&[10])]);

    let cond = b.create_sub_builder("condition");
    let p = cond.parameter(0, &state, "p");
    let lt = cond.lt(cond.get_tuple_element(p, 0), cond.constant_r0(1000i32));
    let cond = built(&cond, lt);

    let body = b.create_sub_builder("body");
    let p = body.parameter(0, &state, "p");
    let iteration = body.add(body.get_tuple_element(p, 0), body.constant_r0(1i32));
    let vector = body.add(body.get_tuple_element(p, 1), body.constant_r1_splat(10, 0.125f32));
    let next = body.tuple(&[iteration, vector]);
    let body = built(&body, next);

    let init = b.tuple(&[b.constant_r0(0i32), b.constant_r1_splat(10, 0f32)]);
    let result = b.while_loop(&cond, &body, init);
    let m = built(&b, result);

    assert_eq!(m.computations.len(), 3);
    let root = m.entry_comp().root_inst();
    assert_eq!(root.opcode, Opcode::While);
    assert_eq!(root.shape.to_string(), "(s32[], f32[10]{0})");
    assert_eq!(m.comp(root.called("condition").unwrap()).root_inst().opcode, Opcode::Compare);
    assert_eq!(m.comp(root.called("body").unwrap()).root_inst().opcode, Opcode::Tuple);
    let cmp = m.comp(root.called("condition").unwrap()).root_inst();
    assert_eq!(cmp.attr_word("direction"), Some("LT"));
    // Every name in the module is distinct.
    let mut names: Vec<&str> =
        m.computations.iter().flat_map(|c| c.instructions.iter().map(|i| i.name.as_str())).collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n);
}

// ---- Broadcasting semantics --------------------------------------------------------------

#[test]
fn scalar_plus_array() {
    let b = Builder::new("s");
    let m = b.parameter(0, &f32s(&[2, 3]), "m");
    let s = b.add(m, b.constant_r0(7f32));
    let module = built(&b, s);
    assert_eq!(root_dims(&module), vec![2, 3]);
    assert_eq!(opcodes(&module), vec![Opcode::Parameter, Opcode::Constant, Opcode::Broadcast, Opcode::Add]);
}

#[test]
fn vector_onto_matrix_with_broadcast_dimensions() {
    let b = Builder::new("in_dim");
    let m = b.parameter(0, &f32s(&[2, 3]), "m");
    let v = b.parameter(1, &f32s(&[3]), "v");
    let s = b.add_broadcast(m, v, &[1]);
    let module = built(&b, s);
    let insts = &module.entry_comp().instructions;
    assert_eq!(insts[2].opcode, Opcode::Broadcast);
    assert_eq!(insts[2].shape.dims(), &[2, 3]);
    assert_eq!(insts[2].attr_ints("dimensions"), Some(&[1][..]));
    assert_eq!(insts[2].operands, vec![insts[1..2].first().map(|_| tessera_hlo::InstId(1)).unwrap()]);
    assert_eq!(root_dims(&module), vec![2, 3]);

    // A 3-vector onto a 3x3 matrix either way.
    let b = Builder::new("either_way");
    let m = b.parameter(0, &f32s(&[3, 3]), "m");
    let v = b.parameter(1, &f32s(&[3]), "v");
    let rows = b.add_broadcast(m, v, &[1]);
    let cols = b.add_broadcast(v, m, &[0]);
    assert_eq!(rows.shape().unwrap().dims(), &[3, 3]);
    assert_eq!(cols.shape().unwrap().dims(), &[3, 3]);
}

#[test]
fn matrix_onto_cuboid() {
    let b = Builder::new("cuboid");
    let c = b.parameter(0, &f32s(&[2, 3, 4]), "c");
    let m = b.parameter(1, &f32s(&[3, 4]), "m");
    let s = b.mul_broadcast(c, m, &[1, 2]);
    assert_eq!(s.shape().unwrap().dims(), &[2, 3, 4]);
}

#[test]
fn broadcast_dimension_errors() {
    type Case<'a> = (&'a [i64], &'a [i64], &'a [i64], &'a str);
    let cases: [Case; 6] = [
        (&[2, 3], &[3], &[0], "does not match"),
        (&[2, 3], &[3], &[], "different ranks"),
        (&[2, 3, 4], &[3, 4], &[2, 1], "strictly increasing"),
        (&[2, 3], &[3], &[5], "out of range"),
        (&[2, 3], &[3], &[0, 1], "entries"),
        (&[7, 2, 5], &[7, 2, 6], &[], "incompatible"),
    ];
    for (l, r, dims, msg) in cases {
        let b = Builder::new("bad");
        let x = b.parameter(0, &f32s(l), "x");
        let y = b.parameter(1, &f32s(r), "y");
        let s = b.add_broadcast(x, y, dims);
        assert!(!s.is_valid());
        let e = b.build(s).unwrap_err();
        assert_eq!(e.op, "add");
        assert!(e.reason.contains(msg), "{l:?} + {r:?} with {dims:?}: {e}");
    }
}

#[test]
fn degenerate_dimensions() {
    // (2,1) + (1,3) -> (2,3): an outer operation.
    let b = Builder::new("outer");
    let x = b.parameter(0, &f32s(&[2, 1]), "x");
    let y = b.parameter(1, &f32s(&[1, 3]), "y");
    let s = b.add(x, y);
    let m = built(&b, s);
    assert_eq!(root_dims(&m), vec![2, 3]);
    let summary = entry_summary(&m);
    let ops: Vec<(Opcode, Vec<i64>)> = summary.into_iter().map(|(_, o, d)| (o, d)).collect();
    assert_eq!(
        ops,
        vec![
            (Opcode::Parameter, vec![2, 1]),
            (Opcode::Parameter, vec![1, 3]),
            (Opcode::Reshape, vec![2]),
            (Opcode::Broadcast, vec![2, 3]),
            (Opcode::Reshape, vec![3]),
            (Opcode::Broadcast, vec![2, 3]),
            (Opcode::Add, vec![2, 3]),
        ]
    );
    assert_eq!(m.entry_comp().instructions[3].attr_ints("dimensions"), Some(&[0][..]));
    assert_eq!(m.entry_comp().instructions[5].attr_ints("dimensions"), Some(&[1][..]));

    for (l, r, out) in [
        (&[2i64, 1][..], &[2i64, 3][..], &[2i64, 3][..]),
        (&[1, 2, 5], &[7, 2, 5], &[7, 2, 5]),
        (&[7, 2, 5], &[7, 1, 5], &[7, 2, 5]),
    ] {
        let b = Builder::new("degenerate");
        let s = b.sub(b.parameter(0, &f32s(l), "x"), b.parameter(1, &f32s(r), "y"));
        assert_eq!(s.shape().unwrap().dims(), out);
    }
}

#[test]
fn broadcast_composition() {
    // |1 2 3 4| + [5 6] with broadcast_dimensions (0): 4 and 1x2 -> 4x2.
    let b = Builder::new("composition");
    let v = b.constant_r1(&[1f32, 2., 3., 4.]);
    let m = b.constant_r2(&[[5f32, 6.]]);
    let s = b.add_broadcast(v, m, &[0]);
    assert_eq!(s.shape().unwrap().dims(), &[4, 2]);

    // 1x2 onto 4x3x1 with (1, 2): 4x3x2.
    let b = Builder::new("composition3");
    let m = b.parameter(0, &f32s(&[1, 2]), "m");
    let c = b.parameter(1, &f32s(&[4, 3, 1]), "c");
    let s = b.add_broadcast(m, c, &[1, 2]);
    assert_eq!(s.shape().unwrap().dims(), &[4, 3, 2]);
}

#[test]
fn compare_and_select_broadcast() {
    let b = Builder::new("cmp");
    let x = b.parameter(0, &f32s(&[4]), "x");
    let pos = b.gt(x, b.zero(F32));
    let relu = b.select(pos, x, b.zero(F32));
    let m = built(&b, relu);
    assert_eq!(root_dims(&m), vec![4]);
    let cmp = m.entry_comp().instructions.iter().find(|i| i.opcode == Opcode::Compare).unwrap();
    assert_eq!(cmp.attr("direction"), Some(&AttrValue::Enum("GT".into())));
    assert_eq!(cmp.shape.element_type(), Pred);

    // A scalar predicate is broadcast for select.
    let b = Builder::new("scalar_pred");
    let p = b.parameter(0, &Shape::scalar(Pred), "p");
    let s = b.select(p, b.constant_r1(&[1i32, 2, 3, 4]), b.constant_r1(&[100i32, 200, 300, 400]));
    assert_eq!(s.shape().unwrap().to_string(), "s32[4]{0}");

    // Explicit TOTALORDER is kept; the default for floats is not printed.
    let b = Builder::new("total");
    let x = b.parameter(0, &f32s(&[2]), "x");
    let c = b.compare_full(x, x, &[], ComparisonDirection::Lt, Some(tessera_hlo::builder::ComparisonType::TotalOrder));
    let c2 = b.compare_full(x, x, &[], ComparisonDirection::Lt, Some(tessera_hlo::builder::ComparisonType::Float));
    let m = built(&b, b.tuple(&[c, c2]));
    let insts = &m.entry_comp().instructions;
    assert_eq!(insts[1].attr_word("type"), Some("TOTALORDER"));
    assert_eq!(insts[2].attr("type"), None);
}

// ---- Shape manipulation ------------------------------------------------------------------

#[test]
fn broadcast_reshape_collapse_transpose() {
    let b = Builder::new("shapes");
    let s = b.constant_r0(2f32);
    let bc = b.broadcast(s, &[2, 3]);
    assert_eq!(bc.shape().unwrap().dims(), &[2, 3]);
    let v = b.parameter(0, &f32s(&[4, 2, 3]), "v");
    assert_eq!(b.broadcast(v, &[5]).shape().unwrap().dims(), &[5, 4, 2, 3]);
    assert_eq!(b.collapse(v, &[0, 1, 2]).shape().unwrap().dims(), &[24]);
    assert_eq!(b.collapse(v, &[0, 1]).shape().unwrap().dims(), &[8, 3]);
    assert_eq!(b.collapse(v, &[1, 2]).shape().unwrap().dims(), &[4, 6]);
    assert_eq!(b.reshape(v, &[2, 6, 2]).shape().unwrap().dims(), &[2, 6, 2]);
    let r = b.reshape_with_order(v, &[1, 2, 0], &[8, 3]);
    assert_eq!(r.shape().unwrap().dims(), &[8, 3]);
    let m = b.parameter(1, &f32s(&[2, 5]), "m");
    assert_eq!(b.trans(m).shape().unwrap().dims(), &[5, 2]);
    assert_eq!(b.transpose(v, &[2, 0, 1]).shape().unwrap().dims(), &[3, 4, 2]);
    let bid = b.broadcast_in_dim(m, &[2, 7, 5], &[0, 2]);
    assert_eq!(bid.shape().unwrap().dims(), &[2, 7, 5]);
    let one = b.parameter(2, &f32s(&[1, 5]), "one");
    let expanded = b.broadcast_in_dim(one, &[3, 5], &[0, 1]);
    assert_eq!(expanded.shape().unwrap().dims(), &[3, 5]);
    let mdl = built(&b, expanded);
    let insts = &mdl.entry_comp().instructions;
    let n = insts.len();
    assert_eq!(insts[n - 2].opcode, Opcode::Reshape);
    assert_eq!(insts[n - 1].attr_ints("dimensions"), Some(&[1][..]));
}

#[test]
fn shape_manipulation_errors() {
    let b = Builder::new("bad_collapse");
    let v = b.parameter(0, &f32s(&[4, 2, 3]), "v");
    let e = b.build(b.collapse(v, &[0, 2])).unwrap_err();
    assert_eq!(e.op, "collapse");

    let b = Builder::new("bad_trans");
    let v = b.parameter(0, &f32s(&[4, 2, 3]), "v");
    assert_eq!(b.build(b.trans(v)).unwrap_err().op, "transpose");

    let b = Builder::new("bad_reshape");
    let v = b.parameter(0, &f32s(&[4, 2, 3]), "v");
    assert_eq!(b.build(b.reshape(v, &[5, 5])).unwrap_err().op, "reshape");

    let b = Builder::new("bad_bid");
    let v = b.parameter(0, &f32s(&[4]), "v");
    let e = b.build(b.broadcast_in_dim(v, &[3, 5], &[1])).unwrap_err();
    assert!(e.reason.contains("size 4"), "{e}");
}

#[test]
fn slicing_and_data_movement() {
    let b = Builder::new("moves");
    let a = b.constant_r1(&[0f32, 1., 2., 3., 4.]);
    assert_eq!(b.slice(a, &[2], &[4], &[]).shape().unwrap().dims(), &[2]);
    let m = b.parameter(0, &f32s(&[4, 3]), "m");
    assert_eq!(b.slice(m, &[2, 1], &[4, 3], &[]).shape().unwrap().dims(), &[2, 2]);
    assert_eq!(b.slice_in_dim(m, 0, 4, 2, 0).shape().unwrap().dims(), &[2, 3]);
    let i = b.constant_r0(1i32);
    assert_eq!(b.dynamic_slice(m, &[i, i], &[2, 2]).shape().unwrap().dims(), &[2, 2]);
    let upd = b.parameter(1, &f32s(&[1, 3]), "u");
    assert_eq!(b.dynamic_update_slice(m, upd, &[i, i]).shape().unwrap().dims(), &[4, 3]);
    assert_eq!(b.concat_in_dim(&[m, upd], 0).shape().unwrap().dims(), &[5, 3]);
    let zero = b.zero(F32);
    let cfg = [PaddingDim { low: 1, high: 2, interior: 1 }, PaddingDim::default()];
    assert_eq!(b.pad(m, zero, &cfg).shape().unwrap().dims(), &[10, 3]);
    assert_eq!(b.pad_in_dim(m, zero, 1, 0, 1).shape().unwrap().dims(), &[4, 4]);
    assert_eq!(b.rev(m, &[0, 1]).shape().unwrap().dims(), &[4, 3]);
    assert_eq!(b.iota_1d(S32, 6).shape().unwrap().to_string(), "s32[6]{0}");
    let t = b.tuple(&[m, i]);
    assert!(b.get_tuple_element(t, 1).shape().unwrap().compatible(&Shape::scalar(S32)));
    let mdl = built(&b, t);
    let slice = &mdl.entry_comp().instructions[1];
    assert_eq!(slice.opcode, Opcode::Slice);
    assert!(matches!(slice.attr("slice"), Some(AttrValue::Slice(r)) if r[0].start == 2 && r[0].limit == 4));
}

#[test]
fn conversions_and_unary_ops() {
    let b = Builder::new("convert");
    let x = b.parameter(0, &Shape::array(S32, &[3]), "x");
    assert_eq!(b.convert_element_type(x, F32).shape().unwrap().to_string(), "f32[3]{0}");
    assert_eq!(b.bitcast_convert_type(x, F32).shape().unwrap().to_string(), "f32[3]{0}");
    assert_eq!(b.bitcast_convert_type(x, U8).shape().unwrap().to_string(), "u8[3,4]{1,0}");
    let f = b.parameter(1, &f32s(&[3]), "f");
    for op in [b.exp(f), b.log(f), b.neg(f), b.floor(f), b.ceil(f), b.tanh(f), b.abs(f), b.sqrt(f), -f] {
        assert_eq!(op.shape().unwrap().dims(), &[3]);
    }
    assert_eq!(b.is_finite(f).shape().unwrap().element_type(), Pred);
    assert_eq!(b.constant_r0((1f32, 2f32)).shape().unwrap().to_string(), "c64[]");
    assert_eq!(b.reciprocal(f).shape().unwrap().dims(), &[3]);
    assert_eq!(b.square(f).shape().unwrap().dims(), &[3]);
    assert_eq!(b.reduce_precision(f, 5, 10).shape().unwrap().dims(), &[3]);
    let lo = b.constant_r0(0f32);
    let hi = b.constant_r0(1f32);
    assert_eq!(b.clamp(lo, f, hi).shape().unwrap().dims(), &[3]);
    assert!(b.first_error().is_none(), "{:?}", b.first_error());
}

// ---- Linear algebra ----------------------------------------------------------------------

#[test]
fn dot_follows_the_seed_table() {
    let cases: [(&[i64], &[i64], &[i64]); 5] = [
        (&[], &[], &[]),
        (&[5], &[5], &[]),
        (&[2, 5], &[5], &[2]),
        (&[2, 5], &[5, 3], &[2, 3]),
        (&[2, 3, 4], &[5, 4, 6], &[2, 3, 5, 6]),
    ];
    for (l, r, out) in cases {
        let b = Builder::new("dot");
        let d = b.dot(b.parameter(0, &f32s(l), "l"), b.parameter(1, &f32s(r), "r"));
        assert_eq!(d.shape().map(|s| s.dims().to_vec()), Some(out.to_vec()), "{l:?} . {r:?}: {:?}", b.first_error());
    }
    let b = Builder::new("dot_attrs");
    let d = b.dot(b.parameter(0, &f32s(&[2, 5]), "l"), b.parameter(1, &f32s(&[5, 3]), "r"));
    let m = built(&b, d);
    let attrs: Vec<&str> = m.entry_comp().root_inst().attrs.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(attrs, ["lhs_contracting_dims", "rhs_contracting_dims"]);
}

#[test]
fn dot_general_with_batch_precision_and_type() {
    let b = Builder::new("bmm");
    let l = b.parameter(0, &Shape::array(ElementType::BF16, &[8, 2, 5]), "l");
    let r = b.parameter(1, &Shape::array(ElementType::BF16, &[8, 5, 3]), "r");
    let dnums = DotDimensionNumbers {
        lhs_batch_dims: vec![0],
        rhs_batch_dims: vec![0],
        lhs_contracting_dims: vec![2],
        rhs_contracting_dims: vec![1],
    };
    let d = b.dot_general_with(l, r, &dnums, Some([Precision::Highest, Precision::Highest]), Some(F32));
    let m = built(&b, d);
    let root = m.entry_comp().root_inst();
    assert_eq!(root.shape.to_string(), "f32[8,2,3]{2,1,0}");
    let attrs: Vec<&str> = root.attrs.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        attrs,
        ["lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims", "operand_precision"]
    );
}

#[test]
fn convolution() {
    let b = Builder::new("conv");
    let x = b.parameter(0, &f32s(&[1, 3, 8, 8]), "x");
    let k = b.parameter(1, &f32s(&[4, 3, 3, 3]), "k");
    let same = b.conv(x, k, &[1, 1], Padding::Same);
    assert_eq!(same.shape().unwrap().dims(), &[1, 4, 8, 8]);
    let valid = b.conv(x, k, &[2, 2], Padding::Valid);
    assert_eq!(valid.shape().unwrap().dims(), &[1, 4, 3, 3]);
    let general = b.conv_with_general_padding(x, k, &[1, 1], &[(1, 1), (0, 0)]);
    assert_eq!(general.shape().unwrap().dims(), &[1, 4, 8, 6]);
    let dilated = b.conv_general_dilated(x, k, &ConvOptions { rhs_dilation: vec![2, 2], ..ConvOptions::default() });
    assert_eq!(dilated.shape().unwrap().dims(), &[1, 4, 4, 4]);
    let m = built(&b, same);
    let root = m.entry_comp().root_inst();
    let attrs: Vec<&str> = root.attrs.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(attrs, ["window", "dim_labels"]);
    match root.attr("window") {
        Some(AttrValue::Window(w)) => assert_eq!((w.dims[0].padding_low, w.dims[0].padding_high), (1, 1)),
        other => panic!("window attribute: {other:?}"),
    }
}

#[test]
fn linalg_and_misc_ops() {
    let b = Builder::new("linalg");
    let a = b.parameter(0, &f32s(&[4, 4]), "a");
    let rhs = b.parameter(1, &f32s(&[4, 2]), "rhs");
    assert_eq!(b.cholesky(a, true).shape().unwrap().dims(), &[4, 4]);
    let x = b.triangular_solve(a, rhs, true, true, false, TriangularTranspose::NoTranspose);
    assert_eq!(x.shape().unwrap().dims(), &[4, 2]);
    let c = b.parameter(2, &Shape::array(C64, &[16]), "c");
    assert_eq!(b.fft(c, FftType::Fft, &[16]).shape().unwrap().to_string(), "c64[16]{0}");
    let t = b.top_k(a, 2, true);
    assert_eq!(t.shape().unwrap().to_string(), "(f32[4,2]{1,0}, s32[4,2]{1,0})");
    let img = b.parameter(3, &f32s(&[2, 5, 5, 3]), "img");
    let scale = b.constant_r1(&[1f32, 1., 1.]);
    let offset = b.constant_r1(&[0f32, 0., 0.]);
    let bn = b.batch_norm_training(img, scale, offset, 0.001, 3);
    assert_eq!(bn.shape().unwrap().to_string(), "(f32[2,5,5,3]{3,2,1,0}, f32[3]{0}, f32[3]{0})");
    let inf = b.batch_norm_inference(img, scale, offset, scale, scale, 0.001, 3);
    assert_eq!(inf.shape().unwrap().dims(), &[2, 5, 5, 3]);
    let grad = b.batch_norm_grad(img, scale, scale, scale, img, 0.001, 3);
    assert!(grad.shape().unwrap().is_tuple());
    assert!(b.first_error().is_none(), "{:?}", b.first_error());
}

// ---- Computations ------------------------------------------------------------------------

#[test]
fn windows_sort_map_call_conditional() {
    let b = Builder::new("windows");
    let max = b.scalar_computation("max", F32, |s, x, y| s.max(x, y));
    let ge = b.scalar_computation("ge", F32, |s, x, y| s.ge(x, y));
    let add = b.scalar_computation("add", F32, |s, x, y| s.add(x, y));
    let x = b.parameter(0, &f32s(&[4, 6]), "x");
    let min = b.constant_r0(f32::MIN);
    let pooled = b.reduce_window(x, min, &max, &[2, 3], &[2, 3], Padding::Valid);
    assert_eq!(pooled.shape().unwrap().dims(), &[2, 2]);
    let same = b.reduce_window_general(&[x], &[min], &max, &[3, 3], &[1, 1], &[], &[], &[(1, 1), (1, 1)]);
    assert_eq!(same.shape().unwrap().dims(), &[4, 6]);
    let src = b.parameter(1, &f32s(&[2, 2]), "src");
    let sas = b.select_and_scatter(x, &ge, &[2, 3], &[2, 3], Padding::Valid, src, b.zero(F32), &add);
    assert_eq!(sas.shape().unwrap().dims(), &[4, 6]);

    let sorted = b.sort_ascending(x, 1);
    assert_eq!(sorted.shape().unwrap().dims(), &[4, 6]);
    let mapped = b.map(&[x, x], &add);
    assert_eq!(mapped.shape().unwrap().dims(), &[4, 6]);
    let called = b.call(&add, &[min, min]);
    assert!(called.shape().unwrap().compatible(&Shape::scalar(F32)));

    let neg = {
        let s = b.create_sub_builder("negate_branch");
        let p = s.parameter(0, &f32s(&[4, 6]), "p");
        built(&s, s.neg(p))
    };
    let ident = {
        let s = b.create_sub_builder("identity_branch");
        let p = s.parameter(0, &f32s(&[4, 6]), "p");
        built(&s, p)
    };
    let pred = b.parameter(2, &Shape::scalar(Pred), "pred");
    let cond = b.conditional(pred, x, &neg, x, &ident);
    assert_eq!(cond.shape().unwrap().dims(), &[4, 6]);
    let idx = b.parameter(3, &Shape::scalar(S32), "idx");
    let switch = b.conditional_indexed(idx, &[&neg, &ident, &neg], &[x, x, x]);
    assert_eq!(switch.shape().unwrap().dims(), &[4, 6]);
    let m = built(&b, b.tuple(&[pooled, same, sas, sorted, mapped, called, cond, switch]));
    let switch_inst = m.entry_comp().instructions.iter().rev().nth(1).unwrap();
    assert!(matches!(switch_inst.attr("branch_computations"), Some(AttrValue::Computations(c)) if c.len() == 3));
    assert!(b.first_error().is_none());
}

#[test]
fn gather_and_scatter() {
    let b = Builder::new("gs");
    let operand = b.parameter(0, &f32s(&[5, 3]), "operand");
    let indices = b.parameter(1, &Shape::array(S32, &[4, 1]), "indices");
    let dnums = GatherDimensionNumbers {
        offset_dims: vec![1],
        collapsed_slice_dims: vec![0],
        start_index_map: vec![0],
        index_vector_dim: 1,
        ..GatherDimensionNumbers::default()
    };
    let g = b.gather(operand, indices, &dnums, &[1, 3], false);
    assert_eq!(g.shape().unwrap().dims(), &[4, 3]);

    let add = b.scalar_computation("add", F32, |s, x, y| s.add(x, y));
    let updates = b.parameter(2, &f32s(&[4, 3]), "updates");
    let sd = ScatterDimensionNumbers {
        update_window_dims: vec![1],
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: 1,
        ..ScatterDimensionNumbers::default()
    };
    let s = b.scatter(&[operand], indices, &[updates], &add, &sd, false, true);
    assert_eq!(s.shape().unwrap().dims(), &[5, 3]);
    let m = built(&b, s);
    let attrs: Vec<&str> = m.entry_comp().root_inst().attrs.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        attrs,
        [
            "update_window_dims",
            "inserted_window_dims",
            "scatter_dims_to_operand_dims",
            "index_vector_dim",
            "unique_indices",
            "to_apply"
        ]
    );
}

#[test]
fn rng_feeds_and_custom_calls() {
    let b = Builder::new("effects");
    let u = b.rng_uniform(b.zero(F32), b.one(F32), &f32s(&[3, 2]));
    assert_eq!(u.shape().unwrap().dims(), &[3, 2]);
    let n = b.rng_normal(b.zero(F32), b.one(F32), &f32s(&[7]));
    assert_eq!(n.shape().unwrap().dims(), &[7]);
    let bern = b.rng_bernoulli(b.constant_r0(0.25f32), &Shape::array(U32, &[5]));
    assert_eq!(bern.shape().unwrap().to_string(), "u32[5]{0}");
    let fed = b.infeed(&f32s(&[4]), "");
    assert_eq!(fed.shape().unwrap().to_string(), "f32[4]{0}");
    let tok = b.outfeed(fed, "");
    assert_eq!(tok.shape().unwrap(), Shape::Token);
    let cc = b.custom_call("my_target", &[fed], &f32s(&[2]));
    assert_eq!(cc.shape().unwrap().dims(), &[2]);
    let m = built(&b, b.tuple(&[u, n, bern, cc]));
    let custom = m.entry_comp().instructions.iter().find(|i| i.opcode == Opcode::CustomCall).unwrap();
    assert_eq!(custom.attr_word("custom_call_target"), Some("my_target"));
    assert!(b.first_error().is_none());
}

// ---- Deferred errors, identity, names ----------------------------------------------------

#[test]
fn errors_surface_from_build_with_the_op_named() {
    let b = Builder::new("bad_add");
    let x = b.parameter(0, &f32s(&[3]), "x");
    let y = b.parameter(1, &f32s(&[4]), "y");
    let bad = b.add(x, y);
    assert!(!bad.is_valid());
    // Later ops are no-ops and keep the first error.
    let later = b.mul(bad, x);
    let also = b.reshape(x, &[7]);
    assert!(!later.is_valid() && !also.is_valid());
    let e = b.build(x).unwrap_err();
    assert_eq!(e.op, "add");
    assert_eq!(e.computation, "bad_add");
    assert!(e.to_string().contains("add"), "{e}");
}

#[test]
fn mixing_builders_is_an_error() {
    let b1 = Builder::new("one");
    let b2 = Builder::new("two");
    let x = b1.parameter(0, &f32s(&[3]), "x");
    let y = b2.parameter(0, &f32s(&[3]), "y");
    let s = b1.add(x, y);
    assert!(!s.is_valid());
    let e = b1.build(x).unwrap_err();
    assert!(e.reason.contains("builder `two`"), "{e}");
    // Building with another builder's root is an error too, not a panic.
    let b3 = Builder::new("three");
    b3.parameter(0, &f32s(&[1]), "z");
    assert!(b3.build(y).is_err());
}

#[test]
fn parameter_errors() {
    let b = Builder::new("dup");
    b.parameter(0, &f32s(&[1]), "a");
    let again = b.parameter(0, &f32s(&[1]), "b");
    assert!(!again.is_valid());
    assert!(b.first_error().unwrap().reason.contains("already registered"));

    let b = Builder::new("gap");
    let p = b.parameter(1, &f32s(&[1]), "a");
    let e = b.build(p).unwrap_err();
    assert!(e.reason.contains("not contiguous"), "{e}");
}

#[test]
fn sub_builder_errors_reach_the_parent() {
    let b = Builder::new("parent");
    let sub = b.create_sub_builder("broken");
    let x = sub.parameter(0, &Shape::scalar(F32), "x");
    let y = sub.parameter(1, &Shape::scalar(S32), "y");
    let bad = sub.add(x, y);
    let comp = sub.build_and_note_error(bad);
    let p = b.parameter(0, &f32s(&[3]), "p");
    let r = b.reduce(p, b.zero(F32), &comp, &[0]);
    assert!(!r.is_valid());
    let e = b.build(p).unwrap_err();
    assert_eq!(e.computation, "broken");
    assert_eq!(e.op, "add");
}

#[test]
fn separately_built_computations_get_unique_names() {
    let add = {
        let s = Builder::new("add");
        let x = s.parameter(0, &Shape::scalar(F32), "x");
        let y = s.parameter(1, &Shape::scalar(F32), "y");
        built(&s, s.add(x, y))
    };
    let b = Builder::new("main");
    let x = b.parameter(0, &f32s(&[3]), "x");
    let r = b.reduce(x, b.zero(F32), &add, &[0]);
    let m = built(&b, r);
    let mut names: Vec<&str> =
        m.computations.iter().flat_map(|c| c.instructions.iter().map(|i| i.name.as_str())).collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n, "{names:?}");
    // The entry keeps its own names; the callee's clashing `x.1` is renamed.
    assert_eq!(m.entry_comp().instructions[0].name, "x.1");
    let callee = &m.computations[0];
    assert_ne!(callee.instructions[0].name, "x.1");
    assert_ne!(callee.name, m.entry_comp().name);
}

#[test]
fn parameter_layouts_are_kept() {
    let b = Builder::new("layouts");
    let shape = Shape::array_with_layout(F32, &[2, 3], tessera_hlo::Layout::new(&[0, 1]));
    let x = b.parameter(0, &shape, "x");
    let y = b.neg(x);
    let m = built(&b, y);
    let layout = m.entry_computation_layout().unwrap();
    assert_eq!(layout.parameters[0].to_string(), "f32[2,3]{0,1}");
    assert_eq!(layout.result.to_string(), "f32[2,3]{1,0}");
}

#[test]
fn empty_or_odd_inputs_do_not_panic() {
    type Case = fn(&Builder, XlaOp<'_>) -> bool;
    // Each case runs on a fresh builder (after an error every op is a no-op) and must fail.
    let cases: &[(&str, Case)] = &[
        ("slice ranks", |b, x| b.slice(x, &[0], &[1, 2], &[]).is_valid()),
        ("transpose repeat", |b, x| b.transpose(x, &[0, 0]).is_valid()),
        ("empty concat", |b, _| b.concat_in_dim(&[], 0).is_valid()),
        ("bid range", |b, x| b.broadcast_in_dim(x, &[2], &[0, 9]).is_valid()),
        ("no indices", |b, x| b.dynamic_slice(x, &[], &[1, 1]).is_valid()),
        ("negative reshape", |b, x| b.reshape(x, &[-1, -6]).is_valid()),
        ("collapse range", |b, x| b.collapse(x, &[5]).is_valid()),
        ("empty map", |b, _| b.map(&[], &Module::new("empty")).is_valid()),
        ("empty callee", |b, x| b.call(&Module::new("empty"), &[x]).is_valid()),
        ("empty einsum", |b, _| b.einsum("", &[]).is_valid()),
        ("ragged r2", |b, _| b.constant_r2::<f32, &[f32]>(&[&[1.0], &[1.0, 2.0]]).is_valid()),
        ("short array", |b, _| b.constant_array(&[2, 2], &[1i32]).is_valid()),
        ("negative constant", |b, _| b.constant_array::<i32>(&[-2], &[]).is_valid()),
        ("gte of array", |b, x| b.get_tuple_element(x, 3).is_valid()),
        ("rev negative", |b, x| b.rev(x, &[-1]).is_valid()),
        ("conv strides", |b, x| b.conv(x, x, &[i64::MAX, 0], Padding::Same).is_valid()),
        ("reduce-window sizes", |b, x| {
            let add = b.scalar_computation("add", F32, |s, x, y| s.add(x, y));
            b.reduce_window(x, b.zero(F32), &add, &[i64::MIN, 3], &[0, -1], Padding::Same).is_valid()
        }),
        ("iota token", |b, _| b.iota(&Shape::Token, 0).is_valid()),
        ("pad dim", |b, x| b.pad_in_dim(x, b.zero(F32), 7, 0, 0).is_valid()),
        ("slice dim", |b, x| b.slice_in_dim(x, 0, 1, 1, -3).is_valid()),
        ("bitcast token", |b, x| b.bitcast_convert_type(x, ElementType::Token).is_valid()),
        ("dot dims", |b, x| {
            let dnums = DotDimensionNumbers { lhs_contracting_dims: vec![9], ..DotDimensionNumbers::default() };
            b.dot_general(x, x, &dnums).is_valid()
        }),
        ("bernoulli mean", |b, x| b.rng_bernoulli(x, &Shape::array(U32, &[2])).is_valid()),
        ("sort dim", |b, x| b.sort_ascending(x, 4).is_valid()),
        ("select shapes", |b, x| b.select(b.constant_r0(true), x, b.zero(S32)).is_valid()),
        ("tuple broadcast", |b, x| b.add_broadcast(b.tuple(&[x]), x, &[0]).is_valid()),
        ("gather dims", |b, x| b.gather(x, x, &GatherDimensionNumbers::default(), &[], false).is_valid()),
    ];
    for (what, case) in cases {
        let b = Builder::new("odd name with spaces");
        let x = b.parameter(0, &f32s(&[2, 3]), "x y");
        assert_eq!(x.name().unwrap(), "x_y.1");
        assert!(!case(&b, x), "{what} should fail");
        let e = b.build(x).unwrap_err();
        assert_eq!(e.computation, "odd_name_with_spaces", "{what}");
    }
}

// ---- einsum ------------------------------------------------------------------------------

#[test]
fn einsum_matmul() {
    let b = Builder::new("mm");
    let x = b.parameter(0, &f32s(&[2, 3]), "x");
    let y = b.parameter(1, &f32s(&[3, 4]), "y");
    let z = b.einsum("ij,jk->ik", &[x, y]);
    let m = built(&b, z);
    assert_eq!(opcodes(&m), vec![Opcode::Parameter, Opcode::Parameter, Opcode::Dot]);
    let root = m.entry_comp().root_inst();
    assert_eq!(root.shape.dims(), &[2, 4]);
    assert_eq!(root.attr_ints("lhs_contracting_dims"), Some(&[1][..]));
    assert_eq!(root.attr_ints("rhs_contracting_dims"), Some(&[0][..]));
    // Implicit output: labels used once, alphabetically.
    let implicit = b.einsum("ij,jk", &[x, y]);
    assert_eq!(implicit.shape().unwrap().dims(), &[2, 4]);
    // Output order other than dot order needs a transpose.
    let t = b.einsum("ij,jk->ki", &[x, y]);
    assert_eq!(t.shape().unwrap().dims(), &[4, 2]);
}

#[test]
fn einsum_batch_matmul() {
    let b = Builder::new("bmm");
    let x = b.parameter(0, &f32s(&[8, 2, 3]), "x");
    let y = b.parameter(1, &f32s(&[8, 3, 4]), "y");
    let z = b.einsum("bij,bjk->bik", &[x, y]);
    let m = built(&b, z);
    let root = m.entry_comp().root_inst();
    assert_eq!(root.opcode, Opcode::Dot);
    assert_eq!(root.shape.dims(), &[8, 2, 4]);
    assert_eq!(root.attr_ints("lhs_batch_dims"), Some(&[0][..]));
    assert_eq!(root.attr_ints("rhs_batch_dims"), Some(&[0][..]));
    // Batch label not first in the output: a transpose after the dot.
    let z2 = b.einsum("bij,bjk->ibk", &[x, y]);
    assert_eq!(z2.shape().unwrap().dims(), &[2, 8, 4]);
}

#[test]
fn einsum_single_operand() {
    let b = Builder::new("unary");
    let x = b.parameter(0, &f32s(&[2, 3]), "x");
    let t = b.einsum("ij->ji", &[x]);
    assert_eq!(t.shape().unwrap().dims(), &[3, 2]);
    let rows = b.einsum("ij->i", &[x]);
    assert_eq!(rows.shape().unwrap().dims(), &[2]);
    let total = b.einsum("ij->", &[x]);
    assert_eq!(total.shape().unwrap().dims(), &[] as &[i64]);
    let same = b.einsum("ij->ij", &[x]);
    assert_eq!(same, x);
    let m = built(&b, t);
    assert_eq!(m.entry_comp().root_inst().opcode, Opcode::Transpose);
    assert_eq!(m.entry_comp().root_inst().attr_ints("dimensions"), Some(&[1, 0][..]));
}

#[test]
fn einsum_outer_product_and_summed_labels() {
    let b = Builder::new("outer");
    let x = b.parameter(0, &f32s(&[2]), "x");
    let y = b.parameter(1, &f32s(&[3]), "y");
    let o = b.einsum("i,j->ij", &[x, y]);
    assert_eq!(o.shape().unwrap().dims(), &[2, 3]);
    let m = built(&b, o);
    assert_eq!(m.entry_comp().root_inst().attr_ints("lhs_contracting_dims"), Some(&[][..]));
    // A label only one operand has and the output drops is summed first.
    let b = Builder::new("summed");
    let x = b.parameter(0, &f32s(&[2, 5]), "x");
    let y = b.parameter(1, &f32s(&[3]), "y");
    let o = b.einsum("ik,j->ij", &[x, y]);
    assert_eq!(o.shape().unwrap().dims(), &[2, 3]);
    let m = built(&b, o);
    assert!(opcodes(&m).contains(&Opcode::Reduce));
}

#[test]
fn einsum_errors() {
    type Case<'a> = (&'a str, &'a [i64], Option<&'a [i64]>, &'a str);
    let cases: [Case; 6] = [
        ("ii->", &[3, 3], None, "more than once"),
        ("ii,ij->j", &[3, 3], Some(&[3, 4]), "more than once"),
        ("ij->k", &[2, 3], None, "appears in no operand"),
        ("ij,jk->ik", &[2, 3], Some(&[4, 5]), "extent"),
        ("ijk->i", &[2, 3], None, "rank"),
        ("...i->i", &[2, 3], None, "ellipses"),
    ];
    for (eq, l, r, msg) in cases {
        let b = Builder::new("e");
        let x = b.parameter(0, &f32s(l), "x");
        let ops = match r {
            Some(r) => vec![x, b.parameter(1, &f32s(r), "y")],
            None => vec![x],
        };
        let z = b.einsum(eq, &ops);
        assert!(!z.is_valid(), "{eq}");
        let e = b.build(x).unwrap_err();
        assert_eq!(e.op, "einsum");
        assert!(e.reason.contains(msg), "{eq}: {e}");
    }
    let b = Builder::new("count");
    let x = b.parameter(0, &f32s(&[2]), "x");
    assert!(!b.einsum("i,i,i->i", &[x, x, x]).is_valid());
    assert!(!Builder::new("n").einsum("i->i", &[x]).is_valid());
}

// ---- Random programs -----------------------------------------------------------------------

/// Up to `len` numbers, each in `lo..=hi`.
fn ints(rng: &mut Rng, len: i64, lo: i64, hi: i64) -> Vec<i64> {
    let n = rng.range(0, len);
    (0..n).map(|_| rng.range(lo, hi)).collect()
}

/// Random op sequences with random (often invalid) arguments: the builder never panics, and
/// whatever it builds without error passes the verifier.
#[test]
fn random_programs_never_panic_and_always_verify() {
    let mut rng = Rng::new(0x5eed);
    let mut built_ok = 0;
    for round in 0..1000 {
        let b = Builder::new("random");
        let add = b.scalar_computation("add", F32, |s, x, y| s.add(x, y));
        let mut ops: Vec<XlaOp<'_>> = Vec::new();
        for p in 0..rng.range(1, 3) {
            let dims = ints(&mut rng, 3, 1, 4);
            ops.push(b.parameter(p, &f32s(&dims), "p"));
        }
        for _ in 0..rng.range(1, 8) {
            let x = ops[rng.range(0, ops.len() as i64 - 1) as usize];
            let y = ops[rng.range(0, ops.len() as i64 - 1) as usize];
            let rank = x.shape().map_or(0, |s| s.rank() as i64);
            let op = match rng.range(0, 17) {
                0 => b.add(x, y),
                1 => b.mul_broadcast(x, y, &ints(&mut rng, 3, -1, 3)),
                2 => b.broadcast(x, &ints(&mut rng, 2, 0, 3)),
                3 => b.broadcast_in_dim(x, &ints(&mut rng, 4, 1, 4), &ints(&mut rng, 3, -1, 3)),
                4 => b.reshape(x, &ints(&mut rng, 3, -1, 6)),
                5 => b.transpose(x, &ints(&mut rng, 3, -1, 3)),
                6 => b.reduce(x, b.zero(F32), &add, &ints(&mut rng, rank, -1, 3)),
                7 => b.slice(x, &ints(&mut rng, 3, -1, 2), &ints(&mut rng, 3, 0, 4), &ints(&mut rng, 3, -1, 2)),
                8 => b.concat_in_dim(&[x, y], rng.range(-1, 3)),
                9 => b.collapse(x, &ints(&mut rng, 3, -1, 3)),
                10 => b.einsum(
                    ["ij,jk->ik", "i->", "ij->ji", "ijk,k->ij", "i,j->ij", "ab,ab->a"][rng.range(0, 5) as usize],
                    &[x, y][..rng.range(1, 2) as usize],
                ),
                11 => b.dot(x, y),
                12 => b.select(b.gt(x, y), x, y),
                13 => b.rev(x, &ints(&mut rng, 3, -1, 3)),
                14 => b.pad_in_dim(x, b.zero(F32), rng.range(-1, 3), rng.range(-2, 2), rng.range(-2, 2)),
                15 => b.reduce_window(
                    x,
                    b.zero(F32),
                    &add,
                    &ints(&mut rng, 3, 0, 3),
                    &ints(&mut rng, 3, 0, 2),
                    Padding::Same,
                ),
                16 => b.conv(x, y, &ints(&mut rng, 2, 0, 2), Padding::Valid),
                _ => b.tuple(&[x, y]),
            };
            if op.is_valid() {
                ops.push(op);
            }
        }
        let root = *ops.last().unwrap();
        if let Ok(m) = b.build(root) {
            built_ok += 1;
            verify::verify(&m).unwrap_or_else(|e| panic!("round {round}: built module does not verify: {e}"));
        }
    }
    // The verifier check means something only if many programs build: 62 to 106 of 1000 did
    // over the 24 seeds measured (12 of this generator, 12 of the LCG it replaced), so the floor
    // sits well below that rather than at a typical count, which a single seed can miss.
    assert!(built_ok >= 40, "only {built_ok} programs built");
}
