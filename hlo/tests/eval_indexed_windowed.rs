//! Interpreter edge cases of gather, scatter, convolution, reduce-window and
//! select-and-scatter that the corpus does not exercise. The expected values are worked out by
//! hand in the comments; each module was also run on XLA:CPU (`shared/tools/xla_run.py`),
//! which gave the same values.

use tessera_hlo::eval::evaluate;
use tessera_hlo::text::parse_module;
use tessera_hlo::Literal;

fn run(text: &str, args: &[Literal]) -> Literal {
    let m = parse_module(text).expect("parse");
    evaluate(&m, args).expect("evaluate")
}

fn lit<T: tessera_hlo::NativeType>(dims: &[i64], v: Vec<T>) -> Literal {
    Literal::from_vec(dims, v).unwrap()
}

fn f32s(l: &Literal) -> Vec<f32> {
    l.to_vec::<f32>().unwrap()
}

fn s32s(l: &Literal) -> Vec<i32> {
    l.to_vec::<i32>().unwrap()
}

#[test]
fn gather_clamps_starts_so_the_slice_fits() {
    let text = "HloModule m\nENTRY e {\n a = s32[5] parameter(0)\n i = s32[4] parameter(1)\n\
        ROOT g = s32[4,2] gather(a, i), offset_dims={1}, collapsed_slice_dims={}, start_index_map={0}, \
        index_vector_dim=1, slice_sizes={2}\n}\n";
    // Starts -2, 1, 4, 9 clamp into [0, 5 - 2] = 0, 1, 3, 3.
    let r = run(text, &[lit(&[5], vec![10i32, 11, 12, 13, 14]), lit(&[4], vec![-2i32, 1, 4, 9])]);
    assert_eq!(s32s(&r), vec![10, 11, 11, 12, 13, 14, 13, 14]);
}

#[test]
fn gather_with_index_vector_first_and_remapped_starts() {
    // Index vectors are the columns of i: (3, 2) and (0, -1). start_index_map={1,0} sends the
    // first component to the column and the second to the row; starts clamp into rows [0, 1]
    // and columns [0, 2].
    let text = "HloModule m\nENTRY e {\n a = s32[3,4] parameter(0)\n i = s32[2,2] parameter(1)\n\
        ROOT g = s32[2,2,2] gather(a, i), offset_dims={0,2}, collapsed_slice_dims={}, start_index_map={1,0}, \
        index_vector_dim=0, slice_sizes={2,2}\n}\n";
    let a = lit(&[3, 4], (0..12).collect::<Vec<i32>>());
    let r = run(text, &[a, lit(&[2, 2], vec![3i32, 0, 2, -1])]);
    // Vector 0: row 2 -> 1, column 3 -> 2: rows 1-2, columns 2-3 = 6 7 / 10 11. Vector 1: row
    // -1 -> 0, column 0: 0 1 / 4 5. The result is [row offset, batch, column offset].
    assert_eq!(s32s(&r), vec![6, 7, 0, 1, 10, 11, 4, 5]);
}

#[test]
fn gather_batching_dims_pick_the_operand_batch() {
    let text = "HloModule m\nENTRY e {\n a = f32[2,3] parameter(0)\n i = s32[2,1] parameter(1)\n\
        ROOT g = f32[2] gather(a, i), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, \
        operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=1, slice_sizes={1,1}\n}\n";
    // Row 0 at column 2, row 1 at column 0.
    let r = run(text, &[lit(&[2, 3], vec![1f32, 2., 3., 4., 5., 6.]), lit(&[2, 1], vec![2i32, 0])]);
    assert_eq!(f32s(&r), vec![3., 4.]);
}

#[test]
fn scatter_skips_windows_that_do_not_fit() {
    let text = "HloModule m\nadd {\n x = s32[] parameter(0)\n y = s32[] parameter(1)\n ROOT s = s32[] add(x, y)\n}\n\
        ENTRY e {\n a = s32[6] parameter(0)\n i = s32[4,1] parameter(1)\n u = s32[4,2] parameter(2)\n\
        ROOT s = s32[6] scatter(a, i, u), update_window_dims={1}, inserted_window_dims={}, \
        scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n";
    // Windows of 2 at 1 (fits), 5 (5 > 6 - 2: skipped whole, not clipped), -1 (skipped), 4 (fits).
    let r = run(
        text,
        &[lit(&[6], vec![0i32; 6]), lit(&[4, 1], vec![1i32, 5, -1, 4]), lit(&[4, 2], vec![1i32, 2, 3, 4, 5, 6, 7, 8])],
    );
    assert_eq!(s32s(&r), vec![0, 1, 2, 0, 7, 8]);
}

#[test]
fn variadic_scatter_applies_its_computation_in_index_order() {
    let text = "HloModule m\nf {\n a0 = f32[] parameter(0)\n a1 = s32[] parameter(1)\n q0 = f32[] parameter(2)\n\
        q1 = s32[] parameter(3)\n s = f32[] add(a0, q0)\n m = s32[] maximum(a1, q1)\n\
        ROOT t = (f32[], s32[]) tuple(s, m)\n}\n\
        ENTRY e {\n a = f32[3] parameter(0)\n b = s32[3] parameter(1)\n i = s32[4] parameter(2)\n\
        u = f32[4] parameter(3)\n v = s32[4] parameter(4)\n\
        ROOT s = (f32[3], s32[3]) scatter(a, b, i, u, v), update_window_dims={}, inserted_window_dims={0}, \
        scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=f\n}\n";
    // Index 0 twice (sum 1+10+30, max(5,1,7)), index 2 once, index 7 skipped.
    let r = run(
        text,
        &[
            lit(&[3], vec![1f32, 2., 3.]),
            lit(&[3], vec![5i32, 5, 5]),
            lit(&[4], vec![0i32, 2, 0, 7]),
            lit(&[4], vec![10f32, 20., 30., 40.]),
            lit(&[4], vec![1i32, 9, 7, 100]),
        ],
    );
    let parts = r.tuple_elements().expect("tuple");
    assert_eq!(f32s(&parts[0]), vec![41., 2., 23.]);
    assert_eq!(s32s(&parts[1]), vec![7, 5, 9]);
}

#[test]
fn scatter_batching_dims_and_overwrite() {
    let text = "HloModule m\nset {\n x = f32[] parameter(0)\n ROOT y = f32[] parameter(1)\n}\n\
        ENTRY e {\n a = f32[2,3] parameter(0)\n i = s32[2,1] parameter(1)\n u = f32[2] parameter(2)\n\
        ROOT s = f32[2,3] scatter(a, i, u), update_window_dims={}, inserted_window_dims={1}, \
        input_batching_dims={0}, scatter_indices_batching_dims={0}, scatter_dims_to_operand_dims={1}, \
        index_vector_dim=1, to_apply=set\n}\n";
    // Row 0 column 2 = 7, row 1 column 1 = 8.
    let r = run(text, &[lit(&[2, 3], vec![0f32; 6]), lit(&[2, 1], vec![2i32, 1]), lit(&[2], vec![7f32, 8.])]);
    assert_eq!(f32s(&r), vec![0., 0., 7., 0., 8., 0.]);
}

#[test]
fn convolution_feature_groups_pair_input_and_output_groups() {
    let text = "HloModule m\nENTRY e {\n x = f32[1,3,2] parameter(0)\n k = f32[2,1,4] parameter(1)\n\
        ROOT c = f32[1,2,4] convolution(x, k), window={size=2}, dim_labels=b0f_0io->b0f, feature_group_count=2\n}\n";
    // x[w] = (1,2), (3,4), (5,6); k[0] = 10 20 30 40, k[1] = 1 2 3 4. Outputs 0-1 read feature
    // 0, outputs 2-3 feature 1: at w=0, 1*10+3*1, 1*20+3*2, 2*30+4*3, 2*40+4*4.
    let r = run(
        text,
        &[lit(&[1, 3, 2], vec![1f32, 2., 3., 4., 5., 6.]), lit(&[2, 1, 4], vec![10f32, 20., 30., 40., 1., 2., 3., 4.])],
    );
    assert_eq!(f32s(&r), vec![13., 26., 72., 96., 35., 70., 138., 184.]);
}

#[test]
fn convolution_batch_groups_read_their_batch_group() {
    let text = "HloModule m\nENTRY e {\n x = f32[4,2,1] parameter(0)\n k = f32[1,1,4] parameter(1)\n\
        ROOT c = f32[2,2,4] convolution(x, k), window={size=1}, dim_labels=b0f_0io->b0f, batch_group_count=2\n}\n";
    // Batches 0-1 form group 0 (outputs 0-1), batches 2-3 group 1 (outputs 2-3): output batch b
    // reads batch b for outputs 0-1 and batch b+2 for outputs 2-3.
    let x = lit(&[4, 2, 1], (1..=8).map(|v| v as f32).collect());
    let r = run(text, &[x, lit(&[1, 1, 4], vec![10f32, 100., 1000., 10000.])]);
    assert_eq!(
        f32s(&r),
        vec![10., 100., 5000., 50000., 20., 200., 6000., 60000., 30., 300., 7000., 70000., 40., 400., 8000., 80000.]
    );
}

#[test]
fn integer_convolution_wraps() {
    let text = "HloModule m\nENTRY e {\n x = s8[1,3,1] parameter(0)\n k = s8[2,1,1] parameter(1)\n\
        ROOT c = s8[1,2,1] convolution(x, k), window={size=2}, dim_labels=b0f_0io->b0f\n}\n";
    // 100*2 + 100 = 300 wraps to 44; 100*2 - 128 = 72.
    let r = run(text, &[lit(&[1, 3, 1], vec![100i8, 100, -128]), lit(&[2, 1, 1], vec![2i8, 1])]);
    assert_eq!(r.to_vec::<i8>().unwrap(), vec![44, 72]);
}

#[test]
fn three_d_convolution_with_every_window_feature() {
    // Permuted labels, stride, padding, base and window dilation and reversal together. Small
    // integer inputs keep every sum exact; the expected values are XLA:CPU's.
    let text = "HloModule m\nENTRY e {\n x = f32[2,3,4,3,5] parameter(0)\n k = f32[2,2,3,2,2] parameter(1)\n\
        ROOT c = f32[2,3,5,2,4] convolution(x, k), window={size=2x3x2 stride=2x1x1 pad=1_1x0_1x1_0 \
        lhs_dilate=1x2x1 rhs_dilate=2x1x1 rhs_reversal=1x0x1}, dim_labels=fb012_o01i2->0b2f1\n}\n";
    let x = lit(&[2, 3, 4, 3, 5], (0..360).map(|i| (i * 5 % 7 - 3) as f32).collect());
    let k = lit(&[2, 2, 3, 2, 2], (0..48).map(|i| (i * 3 % 5 - 2) as f32).collect());
    let want: Vec<f32> = [
        -11, 3, 5, 0, 0, -8, 0, 6, -2, 0, 16, -8, -11, -5, 5, 6, 3, 4, -14, 3, -5, 7, 11, -10, 1, -6, -2, 0, 8, 5, -11,
        -5, -8, 5, 3, 4, 0, -11, -5, 7, -8, 2, 8, -1, 0, -8, 0, 6, 4, 2, 1, -6, -8, 8, 8, 5, 16, -8, -8, 5, 5, 6, 0,
        -11, -14, 3, 4, 2, 11, -10, -8, 8, -2, 0, 16, -8, -11, -5, 5, 6, -5, 1, 11, -2, 0, -8, 0, 6, 3, 4, -14, 3, -5,
        7, 11, -10, 1, -6, -2, 0, 8, 5, -11, -5, -8, 5, 3, 4, 0, -11, -5, 7, 4, 2, 1, -6, -8, 8, 8, 5, 5, 4, -16, 6, 3,
        5, 5, -14, 17, -6, -4, -6, 0, 15, -19, -2, -4, 8, -11, 8, 6, -15, 1, 3, -4, -6, 17, -6, -9, 11, 0, 15, 17, -6,
        -4, 8, 4, 2, 6, -15, 12, 0, -9, 2, -1, 8, 1, -11, -11, 8, -4, -6, 17, -14, -9, 11, -4, -6, 17, -6, -19, -2, 4,
        2, -11, 8, -11, 8, 1, 3, 17, -14, 17, -6, -4, -6, 0, 15, -19, -2, 5, -4, -2, -2, -5, 11, -3, -8, -4, 8, -11, 8,
        6, -15, 1, 3, -4, -6, 17, -6, -9, 11, 0, 15, 17, -6, -4, 8, 4, 2, 6, -15, -11, 8, -4, -6, 17, -14, -9, 11,
    ]
    .iter()
    .map(|&v| v as f32)
    .collect();
    assert_eq!(f32s(&run(text, &[x, k])), want);
}

#[test]
fn reduce_window_skips_padding_and_dilation_holes() {
    let text = "HloModule m\nadd {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y)\n}\n\
        ENTRY e {\n a = f32[3] parameter(0)\n z = f32[] constant(10)\n\
        ROOT r = f32[6] reduce-window(a, z), window={size=2 pad=1_1 lhs_dilate=2}, to_apply=add\n}\n";
    // Dilated and padded: [p, 1, _, 2, _, 3, p]; each window holds one real element plus the
    // initial value once.
    let r = run(text, &[lit(&[3], vec![1f32, 2., 3.])]);
    assert_eq!(f32s(&r), vec![11., 11., 12., 12., 13., 13.]);
}

#[test]
fn reduce_window_window_dilation_in_two_dimensions() {
    let text = "HloModule m\nmx {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] maximum(x, y)\n}\n\
        ENTRY e {\n a = f32[4,5] parameter(0)\n z = f32[] constant(-inf)\n\
        ROOT r = f32[3,2] reduce-window(a, z), window={size=2x2 stride=2x2 pad=1_1x0_1 rhs_dilate=1x2}, to_apply=mx\n}\n";
    // a[r][c] = (7r + 3c) % 10. Rows {pad,0}, {1,2}, {3,pad}; columns {0,2}, {2,4}.
    // Row 0: 0 3 6 9 2; row 1: 7 0 3 6 9; row 2: 4 7 0 3 6; row 3: 1 4 7 0 3.
    let a = lit(&[4, 5], (0..20).map(|i| ((7 * (i / 5) + 3 * (i % 5)) % 10) as f32).collect());
    let r = run(text, &[a]);
    assert_eq!(f32s(&r), vec![6., 6., 7., 9., 7., 7.]);
}

#[test]
fn variadic_reduce_window_keeps_the_first_maximum() {
    let text = "HloModule m\nargmax {\n v0 = f32[] parameter(0)\n i0 = s32[] parameter(1)\n v1 = f32[] parameter(2)\n\
        i1 = s32[] parameter(3)\n gt = pred[] compare(v1, v0), direction=GT\n v = f32[] select(gt, v1, v0)\n\
        i = s32[] select(gt, i1, i0)\n ROOT t = (f32[], s32[]) tuple(v, i)\n}\n\
        ENTRY e {\n a = f32[6] parameter(0)\n b = s32[6] iota(), iota_dimension=0\n z = f32[] constant(-inf)\n\
        m = s32[] constant(-1)\n\
        ROOT r = (f32[3], s32[3]) reduce-window(a, b, z, m), window={size=3 stride=2 pad=1_0}, to_apply=argmax\n}\n";
    // Windows {pad, 3, 1}, {1, 4, 1}, {1, 5, 9}.
    let r = run(text, &[lit(&[6], vec![3f32, 1., 4., 1., 5., 9.])]);
    let parts = r.tuple_elements().expect("tuple");
    assert_eq!(f32s(&parts[0]), vec![3., 4., 9.]);
    assert_eq!(s32s(&parts[1]), vec![0, 2, 5]);
}

fn select_and_scatter(direction: &str, window: &str, operand: Vec<f32>, source: Vec<f32>) -> Vec<f32> {
    let (n, s) = (operand.len(), source.len());
    let text = format!(
        "HloModule m\nsel {{\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n\
         ROOT c = pred[] compare(x, y), direction={direction}\n}}\n\
         add {{\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y)\n}}\n\
         ENTRY e {{\n a = f32[{n}] parameter(0)\n s = f32[{s}] parameter(1)\n z = f32[] constant(0)\n\
         ROOT r = f32[{n}] select-and-scatter(a, s, z), window={{{window}}}, select=sel, scatter=add\n}}\n"
    );
    f32s(&run(&text, &[lit(&[n as i64], operand), lit(&[s as i64], source)]))
}

#[test]
fn select_and_scatter_ties_go_to_the_first_element_the_select_keeps() {
    // Windows {1,5}, {5,5}, {5,2}. With GE the tie keeps the earlier 5 (index 1); with GT the
    // later one (index 2) replaces it.
    assert_eq!(
        select_and_scatter("GE", "size=2 stride=1", vec![1., 5., 5., 2.], vec![10., 20., 30.]),
        vec![0., 30., 30., 0.]
    );
    assert_eq!(
        select_and_scatter("GT", "size=2 stride=1", vec![1., 5., 5., 2.], vec![10., 20., 30.]),
        vec![0., 10., 50., 0.]
    );
}

#[test]
fn select_and_scatter_never_selects_padding() {
    // Windows {pad, -1} and {-1, -2}: both select element 0, though padding would compare as 0.
    assert_eq!(select_and_scatter("GE", "size=2 stride=1 pad=1_0", vec![-1., -2.], vec![1., 2.]), vec![3., 0.]);
}

#[test]
fn computed_select_and_scatter_functions_match_the_shortcuts() {
    // -x <= -y is x >= y, and x - (-y) is x + y, but neither is recognised as one instruction,
    // so both run through the evaluator element by element.
    let text = "HloModule m\nsel {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n nx = f32[] negate(x)\n\
        ny = f32[] negate(y)\n ROOT c = pred[] compare(nx, ny), direction=LE\n}\n\
        add {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ny = f32[] negate(y)\n ROOT s = f32[] subtract(x, ny)\n}\n\
        ENTRY e {\n a = f32[4] parameter(0)\n s = f32[3] parameter(1)\n z = f32[] constant(0)\n\
        ROOT r = f32[4] select-and-scatter(a, s, z), window={size=2 stride=1}, select=sel, scatter=add\n}\n";
    let r = run(text, &[lit(&[4], vec![1f32, 5., 5., 2.]), lit(&[3], vec![10f32, 20., 30.])]);
    assert_eq!(f32s(&r), vec![0., 30., 30., 0.]);
    let text = "HloModule m\nadd {\n x = s32[] parameter(0)\n y = s32[] parameter(1)\n ny = s32[] negate(y)\n\
        ROOT s = s32[] subtract(x, ny)\n}\n\
        ENTRY e {\n a = s32[6] parameter(0)\n i = s32[4,1] parameter(1)\n u = s32[4,2] parameter(2)\n\
        ROOT s = s32[6] scatter(a, i, u), update_window_dims={1}, inserted_window_dims={}, \
        scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n";
    let r = run(
        text,
        &[lit(&[6], vec![0i32; 6]), lit(&[4, 1], vec![1i32, 5, -1, 4]), lit(&[4, 2], vec![1i32, 2, 3, 4, 5, 6, 7, 8])],
    );
    assert_eq!(s32s(&r), vec![0, 1, 2, 0, 7, 8]);
    let text = "HloModule m\nadd {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ny = f32[] negate(y)\n\
        ROOT s = f32[] subtract(x, ny)\n}\n\
        ENTRY e {\n a = f32[3] parameter(0)\n z = f32[] constant(10)\n\
        ROOT r = f32[6] reduce-window(a, z), window={size=2 pad=1_1 lhs_dilate=2}, to_apply=add\n}\n";
    assert_eq!(f32s(&run(text, &[lit(&[3], vec![1f32, 2., 3.])])), vec![11., 11., 12., 12., 13., 13.]);
}

#[test]
fn zero_sized_collapsed_gather_slices_are_errors() {
    // The slice is empty but the result still has elements: XLA leaves their values undefined.
    let text = "HloModule m\nENTRY e {\n a = s32[5] parameter(0)\n i = s32[2] parameter(1)\n\
        ROOT g = s32[2] gather(a, i), offset_dims={}, collapsed_slice_dims={0}, start_index_map={0}, \
        index_vector_dim=1, slice_sizes={0}\n}\n";
    let m = parse_module(text).expect("parse");
    let args = [lit(&[5], vec![0i32, 1, 2, 3, 4]), lit(&[2], vec![5i32, 9])];
    assert!(evaluate(&m, &args).is_err());
}

/// Cumulative reductions (a window over every earlier element along one dimension) along each
/// dimension, typed and through a general reducer (a variadic one: a running maximum with its
/// position), including a window longer than the dimension; and one of 4M elements, whose
/// window form (quadratic in the row length) did not finish.
#[test]
fn cumulative_windows_fold_along_rows() {
    let add = "add {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] add(a, b)\n}\n";
    let x = lit(&[2, 3], vec![1i32, 2, 3, 4, 5, 6]);
    let scan = |window: &str| {
        format!("HloModule m\n{add}ENTRY e {{\n x = s32[2,3] parameter(0)\n z = s32[] constant(10)\n ROOT w = s32[2,3] reduce-window(x, z), window={{{window}}}, to_apply=add\n}}\n")
    };
    // Along the rows: 10 + 1, 10 + 1 + 2, ...; along the columns: 10 + 1, 10 + 1 + 4, ...
    assert_eq!(s32s(&run(&scan("size=1x3 pad=0_0x2_0"), std::slice::from_ref(&x))), vec![11, 13, 16, 14, 19, 25]);
    assert_eq!(s32s(&run(&scan("size=2x1 pad=1_0x0_0"), std::slice::from_ref(&x))), vec![11, 12, 13, 15, 17, 19]);
    assert_eq!(s32s(&run(&scan("size=1x5 pad=0_0x4_0"), std::slice::from_ref(&x))), vec![11, 13, 16, 14, 19, 25]);
    // A running maximum with the position of its first occurrence.
    let text = "HloModule m\nmax {\n a = f32[] parameter(0)\n i = s32[] parameter(1)\n b = f32[] parameter(2)\n j = s32[] parameter(3)\n\
        gt = pred[] compare(b, a), direction=GT\n v = f32[] select(gt, b, a)\n k = s32[] select(gt, j, i)\n ROOT r = (f32[], s32[]) tuple(v, k)\n}\n\
        ENTRY e {\n x = f32[5] parameter(0)\n p = s32[5] iota(), iota_dimension=0\n lo = f32[] constant(-inf)\n m = s32[] constant(-1)\n\
        ROOT w = (f32[5], s32[5]) reduce-window(x, p, lo, m), window={size=5 pad=4_0}, to_apply=max\n}\n";
    let m = parse_module(text).expect("parse");
    let r = evaluate(&m, &[lit(&[5], vec![1.0f32, 3.0, 2.0, 3.0, 7.0])]).expect("evaluate");
    let parts = r.tuple_elements().expect("a tuple");
    assert_eq!(f32s(&parts[0]), vec![1.0, 3.0, 3.0, 3.0, 7.0]);
    assert_eq!(s32s(&parts[1]), vec![0, 1, 1, 1, 4]);
    // 4M elements of 1: the running sum counts them (exact in f32 up to 2^24).
    let n = 1 << 22;
    let text = format!("HloModule m\nadd {{\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b)\n}}\nENTRY e {{\n x = f32[{n}] parameter(0)\n z = f32[] constant(0)\n ROOT w = f32[{n}] reduce-window(x, z), window={{size={n} pad={}_0}}, to_apply=add\n}}\n", n - 1);
    let sums = f32s(&run(&text, &[lit(&[n], vec![1.0f32; n as usize])]));
    assert!(sums.iter().enumerate().all(|(i, &s)| s == (i + 1) as f32), "a running count");
}
