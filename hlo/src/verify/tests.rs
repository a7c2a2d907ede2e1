//! Shape inference on the examples of the operation semantics (seed 003), structural
//! verifier checks on IR built by hand (things the text parser cannot express), and a
//! no-panic sweep over every opcode with malformed operands and attributes.

use super::{infer_shape, verify, verify_all, ShapeError};
use crate::element_type::ElementType::{self, *};
use crate::ir::{
    AttrValue, CompId, Computation, ConvDimensionNumbers, InstId, Instruction, Module, Opcode, PaddingDim, Payload,
    ProgramShape, SliceRange, Window, WindowDim,
};
use crate::layout::Layout;
use crate::shape::{Shape, UNBOUNDED};
use tessera_testkit::Rng;

fn arr(t: ElementType, dims: &[i64]) -> Shape {
    Shape::array(t, dims)
}

fn f32s(dims: &[i64]) -> Shape {
    arr(F32, dims)
}

fn op(opcode: Opcode, declared: Shape) -> Instruction {
    Instruction::new("x", opcode, declared, vec![])
}

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

/// Infers with the given called computations (`CompId(i)` is `comps[i]`).
fn infer_with(inst: &Instruction, operands: &[Shape], comps: &[ProgramShape]) -> Result<Shape, ShapeError> {
    let refs: Vec<&Shape> = operands.iter().collect();
    infer_shape(inst, &refs, &|id: CompId| comps.get(id.index()).cloned())
}

fn infer(inst: &Instruction, operands: &[Shape]) -> Result<Shape, ShapeError> {
    infer_with(inst, operands, &[])
}

fn rule(r: Result<Shape, ShapeError>) -> &'static str {
    match r {
        Ok(s) => panic!("expected an error, inferred {s}"),
        Err(e) => e.rule,
    }
}

fn binary(t: ElementType, result: ElementType) -> ProgramShape {
    ProgramShape { parameters: vec![arr(t, &[]), arr(t, &[])], result: arr(result, &[]) }
}

fn window(dims: &[(i64, i64, i64, i64)]) -> AttrValue {
    AttrValue::Window(Window {
        dims: dims
            .iter()
            .map(|&(size, stride, lo, hi)| WindowDim {
                size,
                stride,
                padding_low: lo,
                padding_high: hi,
                ..WindowDim::default()
            })
            .collect(),
    })
}

#[test]
fn broadcast_examples() {
    // A scalar 2.0 broadcast to f32[2,3].
    let b = op(Opcode::Broadcast, f32s(&[2, 3])).with_attr("dimensions", ints(&[]));
    assert_eq!(infer(&b, &[f32s(&[])]), Ok(f32s(&[2, 3])));
    // A vector mapped to the minor dimension (adding a matrix to a vector).
    let b = op(Opcode::Broadcast, f32s(&[2, 3])).with_attr("dimensions", ints(&[1]));
    assert_eq!(infer(&b, &[f32s(&[3])]), Ok(f32s(&[2, 3])));
    assert_eq!(rule(infer(&b, &[f32s(&[2])])), "broadcast.dimension_size");
    let b = op(Opcode::Broadcast, f32s(&[3, 3])).with_attr("dimensions", ints(&[1, 0]));
    assert_eq!(rule(infer(&b, &[f32s(&[3, 3])])), "broadcast.dimensions_order");
}

#[test]
fn dot_examples() {
    let dot = |lc: &[i64], rc: &[i64], declared: Shape| {
        op(Opcode::Dot, declared)
            .with_attr("lhs_contracting_dims", ints(lc))
            .with_attr("rhs_contracting_dims", ints(rc))
    };
    // vector [n] dot vector [n] -> scalar
    assert_eq!(infer(&dot(&[0], &[0], f32s(&[])), &[f32s(&[5]), f32s(&[5])]), Ok(f32s(&[])));
    // matrix [m x k] dot vector [k] -> vector [m]
    assert_eq!(infer(&dot(&[1], &[0], f32s(&[2])), &[f32s(&[2, 3]), f32s(&[3])]), Ok(f32s(&[2])));
    // matrix [m x k] dot matrix [k x n] -> matrix [m x n]
    assert_eq!(infer(&dot(&[1], &[0], f32s(&[2, 5])), &[f32s(&[2, 3]), f32s(&[3, 5])]), Ok(f32s(&[2, 5])));
    // array [p x q x r] dot array [s x r x t] -> [p x q x s x t]
    let d = dot(&[2], &[1], f32s(&[2, 3, 5, 6]));
    assert_eq!(infer(&d, &[f32s(&[2, 3, 4]), f32s(&[5, 4, 6])]), Ok(f32s(&[2, 3, 5, 6])));
    // Batch dimensions lead the result.
    let d = dot(&[2], &[1], f32s(&[7, 3, 6]))
        .with_attr("lhs_batch_dims", ints(&[0]))
        .with_attr("rhs_batch_dims", ints(&[0]));
    assert_eq!(infer(&d, &[f32s(&[7, 3, 4]), f32s(&[7, 4, 6])]), Ok(f32s(&[7, 3, 6])));
    // Mixed precision: the declared type is the preferred result type.
    let d = dot(&[1], &[0], f32s(&[2, 5]));
    assert_eq!(infer(&d, &[arr(BF16, &[2, 3]), arr(BF16, &[3, 5])]), Ok(f32s(&[2, 5])));
    let e = infer(&dot(&[1], &[0], f32s(&[2, 5])), &[f32s(&[2, 4]), f32s(&[5, 5])]).unwrap_err();
    assert_eq!(e.rule, "dot.contracting_dims_mismatch");
    assert!(e.message.contains("lhs contracting dimension 1 has size 4 but rhs contracting dimension 0 has size 5"));
}

#[test]
fn concatenate_example() {
    let c = op(Opcode::Concatenate, f32s(&[4, 2])).with_attr("dimensions", ints(&[0]));
    assert_eq!(infer(&c, &[f32s(&[3, 2]), f32s(&[1, 2])]), Ok(f32s(&[4, 2])));
    let c = op(Opcode::Concatenate, f32s(&[6])).with_attr("dimensions", ints(&[0]));
    assert_eq!(infer(&c, &[f32s(&[2]), f32s(&[2]), f32s(&[2])]), Ok(f32s(&[6])));
    assert_eq!(rule(infer(&c, &[f32s(&[])])), "concatenate.dimension");
}

#[test]
fn reshape_and_collapse_examples() {
    let v = f32s(&[4, 2, 3]);
    for dims in [&[24][..], &[8, 3], &[4, 6], &[2, 6, 2]] {
        assert_eq!(infer(&op(Opcode::Reshape, f32s(dims)), std::slice::from_ref(&v)), Ok(f32s(dims)));
    }
    // A single-element array to a scalar and back.
    assert_eq!(infer(&op(Opcode::Reshape, f32s(&[])), &[f32s(&[1, 1])]), Ok(f32s(&[])));
    assert_eq!(infer(&op(Opcode::Reshape, f32s(&[1, 1])), &[f32s(&[])]), Ok(f32s(&[1, 1])));
    assert_eq!(rule(infer(&op(Opcode::Reshape, f32s(&[25])), std::slice::from_ref(&v))), "reshape.element_count");
    // Negative sizes whose product matches must not slip through the element count check.
    assert_eq!(rule(infer(&op(Opcode::Reshape, f32s(&[-4, -6])), std::slice::from_ref(&v))), "shape.invalid");
    assert_eq!(rule(infer(&op(Opcode::Reshape, f32s(&[24])), &[f32s(&[-4, -6])])), "shape.invalid");
}

#[test]
fn reduce_examples() {
    let add = binary(F32, F32);
    let reduce = |dims: &[i64], declared: Shape| {
        op(Opcode::Reduce, declared)
            .with_attr("dimensions", ints(dims))
            .with_attr("to_apply", AttrValue::Computation(CompId(0)))
    };
    let x = f32s(&[4, 2, 3]);
    let init = f32s(&[]);
    for (dims, out) in [(&[0][..], &[2, 3][..]), (&[2], &[4, 2]), (&[0, 1], &[3]), (&[0, 1, 2], &[])] {
        let r = reduce(dims, f32s(out));
        assert_eq!(infer_with(&r, &[x.clone(), init.clone()], std::slice::from_ref(&add)), Ok(f32s(out)));
    }
    // Variadic: (f32, s32) argmax-style reducer returning a tuple.
    let argmax = ProgramShape {
        parameters: vec![f32s(&[]), arr(S32, &[]), f32s(&[]), arr(S32, &[])],
        result: Shape::Tuple(vec![f32s(&[]), arr(S32, &[])]),
    };
    let r = reduce(&[1], f32s(&[]));
    let out = infer_with(&r, &[f32s(&[4, 5]), arr(S32, &[4, 5]), f32s(&[]), arr(S32, &[])], &[argmax]);
    assert_eq!(out, Ok(Shape::Tuple(vec![f32s(&[4]), arr(S32, &[4])])));
    let r = reduce(&[3], f32s(&[]));
    assert_eq!(rule(infer_with(&r, &[x.clone(), init.clone()], &[add])), "reduce.dimensions");
    let r = reduce(&[0], f32s(&[]));
    assert_eq!(rule(infer_with(&r, &[x, init], &[binary(S32, S32)])), "reduce.computation_signature");
}

#[test]
fn reduce_window_and_select_and_scatter_examples() {
    // Max-pooling a [4x6] matrix with a 2x3 window and 2x3 strides gives [2x2].
    let max = binary(F32, F32);
    let rw = op(Opcode::ReduceWindow, f32s(&[2, 2]))
        .with_attr("window", window(&[(2, 2, 0, 0), (3, 3, 0, 0)]))
        .with_attr("to_apply", AttrValue::Computation(CompId(0)));
    assert_eq!(infer_with(&rw, &[f32s(&[4, 6]), f32s(&[])], std::slice::from_ref(&max)), Ok(f32s(&[2, 2])));
    // Stride 1 overlaps the windows.
    let rw = rw.with_attr("window", window(&[(2, 1, 0, 0), (3, 1, 0, 0)]));
    assert_eq!(infer_with(&rw, &[f32s(&[4, 6]), f32s(&[])], std::slice::from_ref(&max)), Ok(f32s(&[3, 4])));

    let ge = binary(F32, Pred);
    let sas = op(Opcode::SelectAndScatter, f32s(&[4, 6]))
        .with_attr("window", window(&[(2, 2, 0, 0), (3, 3, 0, 0)]))
        .with_attr("select", AttrValue::Computation(CompId(0)))
        .with_attr("scatter", AttrValue::Computation(CompId(1)));
    let comps = [ge, max.clone()];
    assert_eq!(infer_with(&sas, &[f32s(&[4, 6]), f32s(&[2, 2]), f32s(&[])], &comps), Ok(f32s(&[4, 6])));
    assert_eq!(
        rule(infer_with(&sas, &[f32s(&[4, 6]), f32s(&[3, 2]), f32s(&[])], &comps)),
        "select_and_scatter.source_shape"
    );
    let comps = [max.clone(), max];
    assert_eq!(
        rule(infer_with(&sas, &[f32s(&[4, 6]), f32s(&[2, 2]), f32s(&[])], &comps)),
        "select_and_scatter.select_signature"
    );
}

#[test]
fn slice_examples() {
    let s = op(Opcode::Slice, f32s(&[2]))
        .with_attr("slice", AttrValue::Slice(vec![SliceRange { start: 2, limit: 4, stride: 1 }]));
    assert_eq!(infer(&s, &[f32s(&[5])]), Ok(f32s(&[2])));
    let s = op(Opcode::Slice, f32s(&[2, 2])).with_attr(
        "slice",
        AttrValue::Slice(vec![
            SliceRange { start: 2, limit: 4, stride: 1 },
            SliceRange { start: 1, limit: 3, stride: 1 },
        ]),
    );
    assert_eq!(infer(&s, &[f32s(&[4, 3])]), Ok(f32s(&[2, 2])));
    let s = op(Opcode::Slice, f32s(&[3]))
        .with_attr("slice", AttrValue::Slice(vec![SliceRange { start: 0, limit: 5, stride: 2 }]));
    assert_eq!(infer(&s, &[f32s(&[5])]), Ok(f32s(&[3])));
}

#[test]
fn select_examples() {
    let s = op(Opcode::Select, arr(S32, &[4]));
    assert_eq!(infer(&s, &[arr(Pred, &[4]), arr(S32, &[4]), arr(S32, &[4])]), Ok(arr(S32, &[4])));
    // A scalar predicate selects a whole array.
    assert_eq!(infer(&s, &[arr(Pred, &[]), arr(S32, &[4]), arr(S32, &[4])]), Ok(arr(S32, &[4])));
    // Tuples are selected whole, with a scalar predicate only.
    let t = Shape::Tuple(vec![f32s(&[2]), arr(S32, &[])]);
    assert_eq!(infer(&s, &[arr(Pred, &[]), t.clone(), t.clone()]), Ok(t.clone()));
    assert_eq!(rule(infer(&s, &[arr(Pred, &[2]), t.clone(), t])), "select.pred_dims");
}

#[test]
fn convolution_example() {
    // Input (batch, z, y, x) = [1, 2, 5, 5], kernel (output-z, input-z, y, x) = [3, 2, 3, 3],
    // stride 2 and padding (1, 1): one value per valid window placement, [1, 3, 3, 3].
    let dn = ConvDimensionNumbers {
        input_batch: 0,
        input_feature: 1,
        input_spatial: vec![2, 3],
        kernel_output_feature: 0,
        kernel_input_feature: 1,
        kernel_spatial: vec![2, 3],
        output_batch: 0,
        output_feature: 1,
        output_spatial: vec![2, 3],
    };
    let conv = op(Opcode::Convolution, f32s(&[1, 3, 3, 3]))
        .with_attr("window", window(&[(3, 2, 1, 1), (3, 2, 1, 1)]))
        .with_attr("dim_labels", AttrValue::ConvDims(dn));
    assert_eq!(infer(&conv, &[f32s(&[1, 2, 5, 5]), f32s(&[3, 2, 3, 3])]), Ok(f32s(&[1, 3, 3, 3])));
    assert_eq!(rule(infer(&conv, &[f32s(&[1, 4, 5, 5]), f32s(&[3, 2, 3, 3])])), "convolution.feature_mismatch");
    // Depthwise: feature_group_count equal to the input features.
    let conv = conv.with_attr("feature_group_count", AttrValue::Int(2));
    assert_eq!(infer(&conv, &[f32s(&[1, 2, 5, 5]), f32s(&[4, 1, 3, 3])]), Ok(f32s(&[1, 4, 3, 3])));
}

#[test]
fn pad_transpose_and_tuple_examples() {
    let p = op(Opcode::Pad, f32s(&[6, 3])).with_attr(
        "padding",
        AttrValue::Padding(vec![PaddingDim { low: 1, high: 2, interior: 1 }, PaddingDim::default()]),
    );
    assert_eq!(infer(&p, &[f32s(&[2, 3]), f32s(&[])]), Ok(f32s(&[6, 3])));
    // Negative edge padding crops.
    let p = op(Opcode::Pad, f32s(&[1]))
        .with_attr("padding", AttrValue::Padding(vec![PaddingDim { low: -1, high: -1, interior: 0 }]));
    assert_eq!(infer(&p, &[f32s(&[3]), f32s(&[])]), Ok(f32s(&[1])));

    let t = op(Opcode::Transpose, f32s(&[3, 2])).with_attr("dimensions", ints(&[1, 0]));
    assert_eq!(infer(&t, &[f32s(&[2, 3])]), Ok(f32s(&[3, 2])));

    let tuple = Shape::Tuple(vec![f32s(&[10]), arr(S32, &[])]);
    assert_eq!(infer(&op(Opcode::Tuple, tuple.clone()), &[f32s(&[10]), arr(S32, &[])]), Ok(tuple.clone()));
    let gte = op(Opcode::GetTupleElement, arr(S32, &[])).with_attr("index", AttrValue::Int(1));
    assert_eq!(infer(&gte, std::slice::from_ref(&tuple)), Ok(arr(S32, &[])));
    let gte = gte.with_attr("index", AttrValue::Int(2));
    assert_eq!(rule(infer(&gte, &[tuple])), "get_tuple_element.index");
}

#[test]
fn map_and_while_examples() {
    let m = op(Opcode::Map, f32s(&[4])).with_attr("to_apply", AttrValue::Computation(CompId(0)));
    let f = ProgramShape { parameters: vec![f32s(&[]), f32s(&[]), arr(S32, &[])], result: arr(Pred, &[]) };
    assert_eq!(infer_with(&m, &[f32s(&[4]), f32s(&[4]), arr(S32, &[4])], &[f]), Ok(arr(Pred, &[4])));

    let state = Shape::Tuple(vec![arr(S32, &[]), f32s(&[10])]);
    let cond = ProgramShape { parameters: vec![state.clone()], result: arr(Pred, &[]) };
    let body = ProgramShape { parameters: vec![state.clone()], result: state.clone() };
    let w = op(Opcode::While, state.clone())
        .with_attr("condition", AttrValue::Computation(CompId(0)))
        .with_attr("body", AttrValue::Computation(CompId(1)));
    assert_eq!(infer_with(&w, std::slice::from_ref(&state), &[cond.clone(), body.clone()]), Ok(state.clone()));
    assert_eq!(rule(infer_with(&w, &[f32s(&[10])], &[cond.clone(), body])), "while.init_mismatch");
    assert_eq!(rule(infer_with(&w, std::slice::from_ref(&state), &[cond.clone(), cond])), "while.body_signature");
    let missing = infer_with(&w, &[state], &[]);
    assert_eq!(rule(missing), "call.missing_computation");
}

#[test]
fn gather_scatter_examples() {
    // Gathering rows 0 and 2 of a [3,3] matrix.
    let g = op(Opcode::Gather, f32s(&[2, 3]))
        .with_attr("offset_dims", ints(&[1]))
        .with_attr("collapsed_slice_dims", ints(&[0]))
        .with_attr("start_index_map", ints(&[0]))
        .with_attr("index_vector_dim", AttrValue::Int(1))
        .with_attr("slice_sizes", ints(&[1, 3]));
    assert_eq!(infer(&g, &[f32s(&[3, 3]), arr(S32, &[2])]), Ok(f32s(&[2, 3])));
    // Batching dimensions: per-batch take along axis 1.
    let g = op(Opcode::Gather, f32s(&[20, 5]))
        .with_attr("offset_dims", ints(&[]))
        .with_attr("collapsed_slice_dims", ints(&[1]))
        .with_attr("start_index_map", ints(&[1]))
        .with_attr("operand_batching_dims", ints(&[0]))
        .with_attr("start_indices_batching_dims", ints(&[0]))
        .with_attr("index_vector_dim", AttrValue::Int(2))
        .with_attr("slice_sizes", ints(&[1, 1]));
    assert_eq!(infer(&g, &[f32s(&[20, 7]), arr(S32, &[20, 5, 1])]), Ok(f32s(&[20, 5])));

    let s = op(Opcode::Scatter, f32s(&[10, 4]))
        .with_attr("update_window_dims", ints(&[1]))
        .with_attr("inserted_window_dims", ints(&[0]))
        .with_attr("scatter_dims_to_operand_dims", ints(&[0]))
        .with_attr("index_vector_dim", AttrValue::Int(1))
        .with_attr("to_apply", AttrValue::Computation(CompId(0)));
    let add = [binary(F32, F32)];
    assert_eq!(infer_with(&s, &[f32s(&[10, 4]), arr(S32, &[3, 1]), f32s(&[3, 4])], &add), Ok(f32s(&[10, 4])));
    assert_eq!(
        rule(infer_with(&s, &[f32s(&[10, 4]), arr(S32, &[3, 1]), f32s(&[3, 5])], &add)),
        "scatter.window_bounds"
    );
}

#[test]
fn elementwise_type_rules() {
    let unary = |opcode, declared: Shape, operand: Shape| infer(&op(opcode, declared.clone()), &[operand]);
    assert_eq!(unary(Opcode::Abs, f32s(&[3]), arr(C64, &[3])), Ok(f32s(&[3])));
    assert_eq!(unary(Opcode::Real, arr(F64, &[3]), arr(C128, &[3])), Ok(arr(F64, &[3])));
    assert_eq!(unary(Opcode::IsFinite, arr(Pred, &[3]), f32s(&[3])), Ok(arr(Pred, &[3])));
    assert_eq!(unary(Opcode::Not, arr(Pred, &[3]), arr(Pred, &[3])), Ok(arr(Pred, &[3])));
    assert_eq!(rule(unary(Opcode::Not, f32s(&[3]), f32s(&[3]))), "elementwise.operand_type");
    assert_eq!(rule(unary(Opcode::Exp, arr(S32, &[3]), arr(S32, &[3]))), "elementwise.operand_type");
    assert_eq!(unary(Opcode::Convert, arr(S8, &[3]), f32s(&[3])), Ok(arr(S8, &[3])));
    assert_eq!(unary(Opcode::BitcastConvert, arr(U8, &[3, 4]), f32s(&[3])), Ok(arr(U8, &[3, 4])));
    assert_eq!(unary(Opcode::BitcastConvert, f32s(&[3]), arr(U8, &[3, 4])), Ok(f32s(&[3])));

    let two = |opcode, declared: Shape, a: Shape, b: Shape| infer(&op(opcode, declared), &[a, b]);
    assert_eq!(two(Opcode::Complex, arr(C64, &[2]), f32s(&[2]), f32s(&[2])), Ok(arr(C64, &[2])));
    assert_eq!(two(Opcode::And, arr(Pred, &[2]), arr(Pred, &[2]), arr(Pred, &[2])), Ok(arr(Pred, &[2])));
    assert_eq!(rule(two(Opcode::ShiftLeft, f32s(&[2]), f32s(&[2]), f32s(&[2]))), "elementwise.operand_type");
    // No implicit broadcast in HLO, not even of scalars.
    assert_eq!(rule(two(Opcode::Add, f32s(&[2]), f32s(&[2]), f32s(&[]))), "elementwise.dims_mismatch");
    let cmp = op(Opcode::Compare, arr(Pred, &[2])).with_attr("direction", AttrValue::Enum("LT".into()));
    assert_eq!(infer(&cmp, &[f32s(&[2]), f32s(&[2])]), Ok(arr(Pred, &[2])));
    let clamp = op(Opcode::Clamp, f32s(&[2]));
    assert_eq!(infer(&clamp, &[f32s(&[]), f32s(&[2]), f32s(&[])]), Ok(f32s(&[2])));
}

#[test]
fn fft_sort_topk_and_batch_norm() {
    let fft = |ty: &str, len: &[i64], declared: Shape| {
        op(Opcode::Fft, declared).with_attr("fft_type", AttrValue::Enum(ty.into())).with_attr("fft_length", ints(len))
    };
    assert_eq!(infer(&fft("RFFT", &[8], arr(C64, &[4, 5])), &[f32s(&[4, 8])]), Ok(arr(C64, &[4, 5])));
    assert_eq!(infer(&fft("IRFFT", &[8], f32s(&[4, 8])), &[arr(C64, &[4, 5])]), Ok(f32s(&[4, 8])));
    assert_eq!(infer(&fft("FFT", &[4, 8], arr(C64, &[4, 8])), &[arr(C64, &[4, 8])]), Ok(arr(C64, &[4, 8])));

    let cmp =
        ProgramShape { parameters: vec![f32s(&[]), f32s(&[]), arr(S32, &[]), arr(S32, &[])], result: arr(Pred, &[]) };
    let sort = op(Opcode::Sort, f32s(&[]))
        .with_attr("dimensions", ints(&[1]))
        .with_attr("to_apply", AttrValue::Computation(CompId(0)));
    assert_eq!(
        infer_with(&sort, &[f32s(&[2, 5]), arr(S32, &[2, 5])], std::slice::from_ref(&cmp)),
        Ok(Shape::Tuple(vec![f32s(&[2, 5]), arr(S32, &[2, 5])]))
    );
    assert_eq!(rule(infer_with(&sort, &[f32s(&[2, 5])], &[cmp])), "sort.comparator_signature");

    let topk = op(Opcode::TopK, f32s(&[])).with_attr("k", AttrValue::Int(5));
    assert_eq!(infer(&topk, &[f32s(&[16, 20])]), Ok(Shape::Tuple(vec![f32s(&[16, 5]), arr(S32, &[16, 5])])));

    let bn = op(Opcode::BatchNormTraining, f32s(&[]))
        .with_attr("epsilon", AttrValue::Float(0.001))
        .with_attr("feature_index", AttrValue::Int(3));
    assert_eq!(
        infer(&bn, &[f32s(&[4, 5, 5, 3]), f32s(&[3]), f32s(&[3])]),
        Ok(Shape::Tuple(vec![f32s(&[4, 5, 5, 3]), f32s(&[3]), f32s(&[3])]))
    );
}

#[test]
fn conditional_and_call() {
    let f = ProgramShape { parameters: vec![f32s(&[])], result: f32s(&[2]) };
    let g = ProgramShape { parameters: vec![arr(S32, &[])], result: f32s(&[2]) };
    let c = op(Opcode::Conditional, f32s(&[2]))
        .with_attr("branch_computations", AttrValue::Computations(vec![CompId(0), CompId(1)]));
    assert_eq!(infer_with(&c, &[arr(S32, &[]), f32s(&[]), arr(S32, &[])], &[f.clone(), g]), Ok(f32s(&[2])));
    assert_eq!(
        rule(infer_with(&c, &[f32s(&[]), f32s(&[]), arr(S32, &[])], &[f.clone(), f.clone()])),
        "conditional.selector"
    );
    let call = op(Opcode::Call, f32s(&[2])).with_attr("to_apply", AttrValue::Computation(CompId(0)));
    assert_eq!(infer_with(&call, &[f32s(&[])], std::slice::from_ref(&f)), Ok(f32s(&[2])));
    assert_eq!(rule(infer_with(&call, &[f32s(&[1])], &[f])), "call.signature_mismatch");
}

// ---- the verifier on hand-built modules ----

fn param(name: &str, n: i64, shape: Shape) -> Instruction {
    let mut i = Instruction::new(name, Opcode::Parameter, shape, vec![]);
    i.payload = Payload::Parameter(n);
    i
}

/// `main(a: f32[2], b: f32[2]) = add(a, b)`.
fn small_module() -> Module {
    let mut comp = Computation::new("main");
    let a = comp.add(param("a", 0, f32s(&[2])));
    let b = comp.add(param("b", 1, f32s(&[2])));
    comp.root = comp.add(Instruction::new("sum", Opcode::Add, f32s(&[2]), vec![a, b]));
    let mut m = Module::new("m");
    m.entry = m.add_computation(comp);
    m
}

fn first_rule(m: &Module) -> (&'static str, Option<String>) {
    let e = verify(m).expect_err("module should be rejected");
    (e.rule, e.instruction)
}

#[test]
fn verifier_accepts_a_valid_module() {
    assert_eq!(verify(&small_module()), Ok(()));
}

#[test]
fn verifier_structure() {
    assert_eq!(first_rule(&Module::new("empty")).0, "module.no_computations");

    let mut m = small_module();
    m.entry = CompId(7);
    assert_eq!(first_rule(&m).0, "module.entry_missing");

    let mut m = small_module();
    m.computations[0].instructions[2].operands[1] = InstId(99);
    assert_eq!(first_rule(&m), ("instruction.operand_missing", Some("sum".into())));

    let mut m = small_module();
    m.computations[0].root = InstId(3);
    assert_eq!(first_rule(&m).0, "computation.root_missing");

    let mut m = small_module();
    m.computations[0].instructions[1].name = "a".into();
    assert_eq!(first_rule(&m), ("instruction.duplicate_name", Some("a".into())));

    let mut m = small_module();
    m.computations[0].instructions[1].payload = Payload::Parameter(0);
    assert_eq!(first_rule(&m), ("parameter.duplicate_number", Some("b".into())));

    let mut m = small_module();
    m.computations[0].instructions[1].payload = Payload::Parameter(5);
    assert_eq!(first_rule(&m), ("parameter.numbers_not_contiguous", Some("b".into())));

    let mut m = small_module();
    m.computations[0].instructions[0].payload = Payload::None;
    assert!(verify_all(&m).iter().any(|e| e.rule == "parameter.number"));

    // sum depends on itself through a control edge.
    let mut m = small_module();
    m.computations[0].instructions[2].control_predecessors.push(InstId(2));
    assert_eq!(first_rule(&m).0, "computation.cycle");

    let mut m = small_module();
    m.computations[0].instructions[2] =
        m.computations[0].instructions[2].clone().with_attr("to_apply", AttrValue::Computation(CompId(4)));
    assert_eq!(first_rule(&m), ("instruction.called_computation_missing", Some("sum".into())));

    let mut m = small_module();
    m.add_computation(Computation::new("main"));
    assert_eq!(first_rule(&m).0, "module.duplicate_computation_name");
}

#[test]
fn verifier_shapes_and_layouts() {
    let mut m = small_module();
    m.computations[0].instructions[0].shape = f32s(&[-2]);
    assert_eq!(first_rule(&m), ("shape.invalid", Some("a".into())));

    // An unbounded dimension must be marked dynamic.
    let mut m = small_module();
    m.computations[0].instructions[0].shape = f32s(&[UNBOUNDED]);
    assert_eq!(first_rule(&m).0, "shape.invalid");

    let mut m = small_module();
    m.computations[0].instructions[0].shape = Shape::array_with_layout(F32, &[2], Layout::new(&[1]));
    assert_eq!(first_rule(&m), ("shape.invalid_layout", Some("a".into())));

    let mut m = small_module();
    m.computations[0].instructions[2].shape = f32s(&[3]);
    let e = verify(&m).unwrap_err();
    assert_eq!(e.rule, "shape.mismatch");
    assert_eq!(
        e.to_string(),
        "computation main, instruction %sum: shape.mismatch: declared shape f32[3] does not match the inferred shape f32[2]"
    );

    // Layouts do not take part in the comparison.
    let mut m = small_module();
    m.computations[0].instructions[2].shape = Shape::array_with_layout(F32, &[2], Layout::new(&[0]));
    assert_eq!(verify(&m), Ok(()));

    let mut m = small_module();
    let sig = ProgramShape { parameters: vec![f32s(&[2])], result: f32s(&[2]) };
    m.set_attr("entry_computation_layout", AttrValue::ProgramShape(sig));
    assert_eq!(first_rule(&m).0, "module.entry_layout_mismatch");

    let mut m = small_module();
    let sig = ProgramShape { parameters: vec![f32s(&[2]), f32s(&[2])], result: arr(S32, &[2]) };
    m.set_attr("entry_computation_layout", AttrValue::ProgramShape(sig));
    assert_eq!(first_rule(&m), ("module.entry_layout_mismatch", Some("sum".into())));
}

#[test]
fn verifier_call_graph() {
    // A helper that calls the entry, and the entry calling the helper: both the entry call
    // and the recursion are reported.
    let mut m = small_module();
    let mut helper = Computation::new("helper");
    let p = helper.add(param("p", 0, f32s(&[2])));
    let q = helper.add(param("q", 1, f32s(&[2])));
    helper.root = helper.add(
        Instruction::new("c", Opcode::Call, f32s(&[2]), vec![p, q])
            .with_attr("to_apply", AttrValue::Computation(CompId(0))),
    );
    m.add_computation(helper);
    let entry = &mut m.computations[0];
    entry.instructions[2] = Instruction::new("sum", Opcode::Call, f32s(&[2]), vec![InstId(0), InstId(1)])
        .with_attr("to_apply", AttrValue::Computation(CompId(1)));
    let rules: Vec<&str> = verify_all(&m).iter().map(|e| e.rule).collect();
    assert!(rules.contains(&"module.entry_called"), "{rules:?}");
    assert!(rules.contains(&"module.recursive_call"), "{rules:?}");
}

// ---- no panics on malformed input ----

/// Malformed integers, shapes and attributes, drawn from a seeded generator so the sweep is
/// reproducible.
trait Junk {
    fn int(&mut self) -> i64;
    fn ints(&mut self) -> Vec<i64>;
    fn shape(&mut self, depth: u32) -> Shape;
    fn attr(&mut self) -> AttrValue;
}

impl Junk for Rng {
    fn int(&mut self) -> i64 {
        *self.pick(&[0, 1, 2, 3, -1, -2, 5, 64, i64::MAX, i64::MIN, UNBOUNDED + 1, 1 << 40])
    }

    fn ints(&mut self) -> Vec<i64> {
        let n = self.below(5);
        (0..n).map(|_| self.int()).collect()
    }

    fn shape(&mut self, depth: u32) -> Shape {
        match self.below(8) {
            0 if depth > 0 => Shape::Tuple((0..self.below(3)).map(|_| self.shape(depth - 1)).collect()),
            1 => Shape::Token,
            _ => {
                let t = *self.pick(&[F32, S32, Pred, C64, U8, BF16, F64, S4]);
                let rank = self.below(4);
                let dims: Vec<i64> = (0..rank).map(|_| *self.pick(&[0, 1, 2, 3, 4, -1, UNBOUNDED, i64::MAX])).collect();
                let mut a = crate::shape::ArrayShape::new(t, &dims);
                if self.below(4) == 0 {
                    a.dynamic.pop();
                }
                Shape::Array(a)
            }
        }
    }

    fn attr(&mut self) -> AttrValue {
        match self.below(9) {
            0 => AttrValue::Int(self.int()),
            1 => AttrValue::Ints(self.ints()),
            2 => AttrValue::Computation(CompId(*self.pick(&[0, 1, 2, u32::MAX]))),
            3 => AttrValue::Computations(vec![CompId(0), CompId(9)]),
            4 => AttrValue::Window(Window {
                dims: (0..self.below(4))
                    .map(|_| WindowDim {
                        size: self.int(),
                        stride: self.int(),
                        padding_low: self.int(),
                        padding_high: self.int(),
                        window_dilation: self.int(),
                        base_dilation: self.int(),
                        window_reversal: false,
                    })
                    .collect(),
            }),
            5 => AttrValue::Slice(
                (0..self.below(4))
                    .map(|_| SliceRange { start: self.int(), limit: self.int(), stride: self.int() })
                    .collect(),
            ),
            6 => AttrValue::Padding(
                (0..self.below(4))
                    .map(|_| PaddingDim { low: self.int(), high: self.int(), interior: self.int() })
                    .collect(),
            ),
            7 => AttrValue::Enum(self.pick(&["LT", "FFT", "RFFT", "IRFFT", "rng_normal", "bogus"]).to_string()),
            _ => AttrValue::ConvDims(ConvDimensionNumbers {
                input_batch: self.int(),
                input_feature: self.int(),
                input_spatial: self.ints(),
                kernel_input_feature: self.int(),
                kernel_output_feature: self.int(),
                kernel_spatial: self.ints(),
                output_batch: self.int(),
                output_feature: self.int(),
                output_spatial: self.ints(),
            }),
        }
    }
}

const ATTR_NAMES: &[&str] = &[
    "dimensions",
    "to_apply",
    "calls",
    "condition",
    "body",
    "select",
    "scatter",
    "branch_computations",
    "window",
    "dim_labels",
    "slice",
    "padding",
    "index",
    "iota_dimension",
    "lhs_contracting_dims",
    "rhs_contracting_dims",
    "lhs_batch_dims",
    "rhs_batch_dims",
    "dynamic_slice_sizes",
    "offset_dims",
    "collapsed_slice_dims",
    "start_index_map",
    "index_vector_dim",
    "slice_sizes",
    "operand_batching_dims",
    "start_indices_batching_dims",
    "update_window_dims",
    "inserted_window_dims",
    "scatter_dims_to_operand_dims",
    "input_batching_dims",
    "scatter_indices_batching_dims",
    "fft_type",
    "fft_length",
    "feature_group_count",
    "batch_group_count",
    "feature_index",
    "k",
    "direction",
    "distribution",
    "num_carries",
    "exponent_bits",
    "mantissa_bits",
];

#[test]
fn no_panics_on_malformed_instructions() {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let comps: Vec<ProgramShape> = (0..3)
        .map(|_| ProgramShape { parameters: (0..rng.below(5)).map(|_| rng.shape(1)).collect(), result: rng.shape(1) })
        .collect();
    for &opcode in Opcode::ALL {
        for _ in 0..300 {
            let mut inst = op(opcode, rng.shape(2));
            for _ in 0..rng.below(8) {
                let name = *rng.pick(ATTR_NAMES);
                inst.set_attr(name, rng.attr());
            }
            if rng.below(2) == 0 {
                inst.payload = Payload::Parameter(rng.int());
            }
            let operands: Vec<Shape> = (0..rng.below(7)).map(|_| rng.shape(2)).collect();
            let _ = infer_with(&inst, &operands, &comps);
        }
    }
}

#[test]
fn no_panics_on_malformed_modules() {
    let mut rng = Rng::new(0x2545_F491_4F6C_DD1D);
    for _ in 0..300 {
        let mut m = Module::new("m");
        for c in 0..1 + rng.below(3) {
            let mut comp = Computation::new(format!("c{c}"));
            for i in 0..rng.below(6) {
                let opcode = *rng.pick(Opcode::ALL);
                let operands = (0..rng.below(4)).map(|_| InstId(rng.below(8) as u32)).collect();
                let mut inst = Instruction::new(format!("i{i}"), opcode, rng.shape(1), operands);
                if opcode == Opcode::Parameter {
                    inst.payload = Payload::Parameter(rng.int());
                }
                if rng.below(3) == 0 {
                    inst.control_predecessors.push(InstId(rng.below(8) as u32));
                }
                for _ in 0..rng.below(4) {
                    inst.set_attr(*rng.pick(ATTR_NAMES), rng.attr());
                }
                comp.add(inst);
            }
            comp.root = InstId(rng.below(7) as u32);
            m.add_computation(comp);
        }
        m.entry = CompId(rng.below(4) as u32);
        let _ = verify_all(&m);
    }
}
