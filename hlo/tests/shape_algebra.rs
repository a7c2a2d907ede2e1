//! The shape algebra against the examples of its two specifications: MLIR's `shape` dialect
//! (sizes, abstract shapes, shape functions) and the TensorWrapper shape design (slices and
//! chips, iteration with an origin, index-string compositions).

use tessera_hlo::algebra::{
    add, broadcast, broadcast_with_error, contraction, create_shape, elementwise, join, join_size,
    join_size_with_error, join_with_error, mul, num_elements, permutation, permute, plan_einsum, product, reduce,
    shape_of, Dim, Extents, IndexSpace, IndexSpaceError, IndexString, IndexStringError, IndexedShape, Operand,
    ParseError, Reduction, Size, ValueShape,
};
use tessera_hlo::shape::UNBOUNDED;
use tessera_hlo::{ArrayShape, ElementType, Shape};

fn shape(text: &str) -> Extents {
    text.parse().unwrap_or_else(|e| panic!("test shape {text:?}: {e}"))
}

fn size(text: &str) -> Size {
    text.parse().unwrap_or_else(|e| panic!("test size {text:?}: {e}"))
}

fn indexed(spec: &str, extents: &[u64]) -> IndexedShape {
    IndexedShape::new(spec, extents).unwrap_or_else(|e| panic!("test shape {spec:?}: {e}"))
}

fn space(extents: &[u64]) -> IndexSpace {
    IndexSpace::new(extents.to_vec())
}

fn collect(iter: impl Iterator<Item = Vec<u64>>) -> Vec<Vec<u64>> {
    iter.collect()
}

// ---------------------------------------------------------------------------------------------
// Printing and parsing (shape.constant)
// ---------------------------------------------------------------------------------------------

#[test]
fn prints_like_the_dialect() {
    assert_eq!(Extents::Unranked.to_string(), "[*]");
    assert_eq!(Extents::Ranked(vec![Dim::Unknown, Dim::Known(2)]).to_string(), "[?, 2]");
    assert_eq!(Extents::known(&[3, 4]).to_string(), "[3, 4]");
    assert_eq!(Extents::scalar().to_string(), "[]");
    assert_eq!(Extents::known(&[1]).to_string(), "[1]");
    assert_eq!(Extents::invalid("why").to_string(), "[invalid]");
    assert_eq!(Size::Known(10).to_string(), "10");
    assert_eq!(Size::Unknown.to_string(), "?");
    assert_eq!(Size::invalid("why").to_string(), "invalid");
}

#[test]
fn parses_constants_and_round_trips() {
    for text in ["[*]", "[?, 2]", "[3, 4]", "[]", "[1]", "[0, ?, 7]"] {
        assert_eq!(shape(text).to_string(), text);
    }
    assert_eq!(shape(" [ 3 ,? ] "), Extents::Ranked(vec![Dim::Known(3), Dim::Unknown]));
    assert_eq!(size("10"), Size::Known(10));
    assert_eq!(size("?"), Size::Unknown);
}

#[test]
fn rejects_malformed_constants() {
    assert_eq!("3, 4".parse::<Extents>(), Err(ParseError::MissingBrackets("3, 4".into())));
    assert_eq!("[3, -1]".parse::<Extents>(), Err(ParseError::BadExtent("-1".into())));
    assert_eq!("[3,]".parse::<Extents>(), Err(ParseError::BadExtent("".into())));
    assert_eq!("[+3]".parse::<Extents>(), Err(ParseError::BadExtent("+3".into())));
    assert_eq!("[invalid]".parse::<Extents>(), Err(ParseError::BadExtent("invalid".into())));
    assert_eq!("[99999999999999999999]".parse::<Extents>(), Err(ParseError::BadExtent("99999999999999999999".into())));
    assert!("[*, 2]".parse::<Extents>().is_err());
    assert!("x".parse::<Size>().is_err());
}

#[test]
fn rank_is_a_size() {
    assert_eq!(shape("[?, 2]").rank(), Size::Known(2));
    assert_eq!(shape("[]").rank(), Size::Known(0));
    assert_eq!(shape("[*]").rank(), Size::Unknown);
    assert_eq!(Extents::invalid("r").rank(), Size::invalid("r"));
}

#[test]
fn from_sizes_turns_an_invalid_extent_into_an_invalid_shape() {
    assert_eq!(Extents::from_sizes([Size::Known(2), Size::Unknown]), shape("[2, ?]"));
    assert_eq!(
        Extents::from_sizes([Size::Known(2), Size::invalid("first"), Size::invalid("second")]),
        Extents::invalid("first")
    );
}

// ---------------------------------------------------------------------------------------------
// shape.add, shape.mul
// ---------------------------------------------------------------------------------------------

#[test]
fn add_and_mul_of_known_sizes() {
    assert_eq!(add(&Size::Known(2), &Size::Known(3)), Size::Known(5));
    assert_eq!(mul(&Size::Known(2), &Size::Known(3)), Size::Known(6));
    assert_eq!(mul(&Size::Known(0), &Size::Known(7)), Size::Known(0));
}

#[test]
fn unknown_stays_unknown() {
    for known in [0, 1, 5] {
        let k = Size::Known(known);
        assert_eq!(add(&Size::Unknown, &k), Size::Unknown);
        assert_eq!(add(&k, &Size::Unknown), Size::Unknown);
        assert_eq!(mul(&Size::Unknown, &k), Size::Unknown);
        assert_eq!(mul(&k, &Size::Unknown), Size::Unknown);
    }
    assert_eq!(add(&Size::Unknown, &Size::Unknown), Size::Unknown);
}

#[test]
fn invalid_sizes_propagate_the_first_reason() {
    let a = Size::invalid("a");
    let b = Size::invalid("b");
    assert_eq!(add(&a, &Size::Known(1)), a);
    assert_eq!(add(&Size::Unknown, &b), b);
    assert_eq!(mul(&a, &b), a);
    assert_eq!(mul(&b, &a), b);
}

#[test]
fn overflow_is_invalid_not_wrapped() {
    let sum = add(&Size::Known(u64::MAX), &Size::Known(1));
    assert_eq!(sum.reason(), Some(format!("size overflow: {} + 1", u64::MAX).as_str()));
    let product = mul(&Size::Known(1 << 32), &Size::Known(1 << 32));
    assert!(product.is_invalid());
}

// ---------------------------------------------------------------------------------------------
// shape.join
// ---------------------------------------------------------------------------------------------

#[test]
fn join_table_from_the_dialect() {
    let cases = [
        ("[*]", "[*]", "[*]"),
        ("[*]", "[1, ?]", "[1, ?]"),
        ("[1, 2]", "[1, ?]", "[1, 2]"),
        ("[*]", "[1, 2]", "[1, 2]"),
        ("[]", "[]", "[]"),
        ("[]", "[*]", "[]"),
        ("[]", "[?, ?]", "[invalid]"),
        ("[1, ?]", "[2, ?, ?]", "[invalid]"),
    ];
    for (lhs, rhs, expected) in cases {
        let joined = join(&shape(lhs), &shape(rhs));
        assert_eq!(joined.to_string(), expected, "join({lhs}, {rhs})");
        if expected != "[invalid]" {
            assert_eq!(joined, shape(expected));
        }
    }
}

#[test]
fn join_is_symmetric_on_the_table() {
    for (lhs, rhs) in [("[1, ?]", "[*]"), ("[1, ?]", "[1, 2]"), ("[*]", "[]")] {
        assert_eq!(join(&shape(lhs), &shape(rhs)), join(&shape(rhs), &shape(lhs)));
    }
}

#[test]
fn join_reasons() {
    assert_eq!(
        join(&shape("[]"), &shape("[?, ?]")).reason(),
        Some("join: ranks differ: [] has rank 0, [?, ?] has rank 2")
    );
    assert_eq!(
        join(&shape("[1, 3]"), &shape("[1, 4]")).reason(),
        Some("join: extents 3 and 4 differ at dimension 1 of [1, 3] and [1, 4]")
    );
    assert_eq!(join_with_error(&shape("[1, ?]"), &shape("[2, ?, ?]"), "<reason>"), Extents::invalid("<reason>"));
    // The error attribute only applies to a new contradiction, not to a propagated one.
    assert_eq!(join_with_error(&Extents::invalid("earlier"), &shape("[1]"), "<reason>"), Extents::invalid("earlier"));
}

#[test]
fn join_propagates_invalid_operands() {
    let a = Extents::invalid("a");
    let b = Extents::invalid("b");
    assert_eq!(join(&a, &shape("[*]")), a);
    assert_eq!(join(&shape("[*]"), &b), b);
    assert_eq!(join(&a, &b), a);
}

#[test]
fn join_of_sizes() {
    assert_eq!(join_size(&Size::Known(3), &Size::Unknown), Size::Known(3));
    assert_eq!(join_size(&Size::Unknown, &Size::Known(3)), Size::Known(3));
    assert_eq!(join_size(&Size::Unknown, &Size::Unknown), Size::Unknown);
    assert_eq!(join_size(&Size::Known(3), &Size::Known(3)), Size::Known(3));
    assert_eq!(join_size(&Size::Known(3), &Size::Known(4)), Size::invalid("join: sizes 3 and 4 differ"));
    assert_eq!(join_size_with_error(&Size::Known(3), &Size::Known(4), "bad"), Size::invalid("bad"));
    assert_eq!(join_size(&Size::invalid("x"), &Size::Known(4)), Size::invalid("x"));
}

// ---------------------------------------------------------------------------------------------
// shape.broadcast
// ---------------------------------------------------------------------------------------------

#[test]
fn broadcast_rules_in_order() {
    let cases = [
        // lhs == rhs
        ("[3, 4]", "[3, 4]", "[3, 4]"),
        // rhs unknown: lhs
        ("[3]", "[?]", "[3]"),
        ("[?]", "[?]", "[?]"),
        // lhs unknown: rhs
        ("[?]", "[5]", "[5]"),
        // rhs == 1: lhs
        ("[5]", "[1]", "[5]"),
        // lhs == 1: rhs
        ("[1]", "[5]", "[5]"),
        // 1 against ?: the dialect's order would give 1, which is wrong when ? is 5 at run
        // time; the 1 rules come first, so the result stays unknown.
        ("[1]", "[?]", "[?]"),
        ("[?]", "[1]", "[?]"),
        // 1s are prepended to the shorter shape
        ("[2, 3]", "[3]", "[2, 3]"),
        ("[3]", "[4, 1]", "[4, 3]"),
        ("[]", "[?, 2]", "[?, 2]"),
        ("[7, 1, 5]", "[?, 5]", "[7, ?, 5]"),
        ("[]", "[]", "[]"),
    ];
    for (lhs, rhs, expected) in cases {
        assert_eq!(broadcast(&shape(lhs), &shape(rhs)), shape(expected), "broadcast({lhs}, {rhs})");
    }
}

#[test]
fn broadcast_with_unranked_is_unranked() {
    assert_eq!(broadcast(&shape("[*]"), &shape("[2, 3]")), Extents::Unranked);
    assert_eq!(broadcast(&shape("[2, 3]"), &shape("[*]")), Extents::Unranked);
    assert_eq!(broadcast(&shape("[*]"), &shape("[*]")), Extents::Unranked);
}

#[test]
fn broadcast_errors() {
    let bad = broadcast(&shape("[2, 3]"), &shape("[4, 3]"));
    assert_eq!(
        bad.reason(),
        Some("broadcast: extents 2 and 4 are incompatible at output dimension 0 of [2, 3] and [4, 3]")
    );
    assert_eq!(bad.to_string(), "[invalid]");
    assert!(broadcast(&shape("[3]"), &shape("[2, 4]")).is_invalid());
    assert_eq!(
        broadcast_with_error(&shape("[2]"), &shape("[3]"), "operands do not broadcast"),
        Extents::invalid("operands do not broadcast")
    );
    // Compatible operands ignore the error attribute.
    assert_eq!(broadcast_with_error(&shape("[2]"), &shape("[1]"), "unused"), shape("[2]"));
}

#[test]
fn broadcast_propagates_invalid_before_unranked() {
    let a = Extents::invalid("a");
    assert_eq!(broadcast(&a, &shape("[*]")), a);
    assert_eq!(broadcast(&shape("[*]"), &a), a);
    assert_eq!(broadcast(&a, &Extents::invalid("b")), a);
    // An invalid result feeds the next function without a second error.
    let first = broadcast(&shape("[2]"), &shape("[3]"));
    let chained = join(&broadcast(&first, &shape("[5]")), &shape("[9]"));
    assert_eq!(chained, first);
}

// ---------------------------------------------------------------------------------------------
// shape.reduce, num_elements, create_shape, shape_of
// ---------------------------------------------------------------------------------------------

#[test]
fn reduce_visits_extents_in_order() {
    let visited = reduce(&shape("[2, ?, 5]"), Vec::new(), |i, dim, mut acc| {
        acc.push((i, dim));
        acc
    });
    assert_eq!(visited, Reduction::Value(vec![(0, Dim::Known(2)), (1, Dim::Unknown), (2, Dim::Known(5))]));
    assert_eq!(reduce(&shape("[]"), 42, |_, _, acc| acc + 1), Reduction::Value(42));
    assert_eq!(reduce(&shape("[*]"), 0, |_, _, acc| acc + 1), Reduction::Unranked);
    assert_eq!(reduce(&Extents::invalid("r"), 0, |_, _, acc| acc + 1), Reduction::Invalid("r".into()));
}

#[test]
fn num_elements_is_the_dialects_reduce_example() {
    assert_eq!(num_elements(&shape("[3, 4]")), Size::Known(12));
    assert_eq!(num_elements(&shape("[]")), Size::Known(1));
    assert_eq!(num_elements(&shape("[1]")), Size::Known(1));
    assert_eq!(num_elements(&shape("[2, 0, 5]")), Size::Known(0));
    assert_eq!(num_elements(&shape("[?, 2]")), Size::Unknown);
    assert_eq!(num_elements(&shape("[*]")), Size::Unknown);
    assert_eq!(num_elements(&Extents::invalid("r")), Size::invalid("r"));
    assert!(num_elements(&Extents::known(&[u64::MAX, 2])).is_invalid());
}

#[test]
fn create_shape_from_i32_values() {
    assert_eq!(create_shape(&[3, 4]), shape("[3, 4]"));
    assert_eq!(create_shape(&[]), shape("[]"));
    assert_eq!(create_shape(&[3, -1, -2]), Extents::invalid("create_shape: extent -1 at dimension 1 is negative"));
}

#[test]
fn shape_of_value_shapes_and_shaped_things() {
    let known = ValueShape { value: Some(vec![1.0f32, 2.0, 3.0]), shape: shape("[3]") };
    assert_eq!(shape_of(&known), shape("[3]"));
    let nothing_known: ValueShape<f32> = ValueShape { value: None, shape: Extents::Unranked };
    assert_eq!(shape_of(&nothing_known), shape("[*]"));
    assert_eq!(shape_of(&space(&[2, 3])), shape("[2, 3]"));
    assert_eq!(shape_of(&indexed("i,j", &[4, 5])), shape("[4, 5]"));
    assert_eq!(shape_of(&Extents::invalid("r")), Extents::invalid("r"));
}

#[test]
fn shape_of_hlo_shapes() {
    assert_eq!(shape_of(&Shape::array(ElementType::F32, &[3, 4])), shape("[3, 4]"));
    assert_eq!(shape_of(&Shape::scalar(ElementType::S32)), shape("[]"));
    // f32[<=8, 5] and f32[?, 5]: both dynamic dimensions are unknown.
    let mut bounded = ArrayShape::new(ElementType::F32, &[8, 5]);
    bounded.dynamic[0] = true;
    assert_eq!(shape_of(&bounded), shape("[?, 5]"));
    let mut unbounded = ArrayShape::new(ElementType::F32, &[UNBOUNDED, 5]);
    unbounded.dynamic[0] = true;
    assert_eq!(shape_of(&Shape::Array(unbounded)), shape("[?, 5]"));
    assert_eq!(shape_of(&Shape::Tuple(vec![])), Extents::invalid("shape_of: a tuple has no array shape"));
    assert!(shape_of(&Shape::Token).is_invalid());
    let mut malformed = ArrayShape::new(ElementType::F32, &[2]);
    malformed.dynamic.clear();
    assert!(shape_of(&malformed).is_invalid());
    assert_eq!(
        shape_of(&ArrayShape::new(ElementType::F32, &[2, -3])),
        Extents::invalid("shape_of: static dimension 1 has negative extent -3")
    );
}

// ---------------------------------------------------------------------------------------------
// Slices and chips
// ---------------------------------------------------------------------------------------------

#[test]
fn slices_keep_the_rank() {
    let s = space(&[10, 20]);
    // Row 0 as a matrix.
    assert_eq!(s.slice_pinned(&[0]), Ok(space(&[1, 20])));
    // Column 0 as a matrix.
    assert_eq!(s.slice(&[0, 0], &[10, 1]), Ok(space(&[10, 1])));
    // The first five columns of the first five rows.
    assert_eq!(s.slice(&[0, 0], &[5, 5]), Ok(space(&[5, 5])));
    // Still rank 2 although the first mode has one element.
    assert_eq!(s.slice(&[0, 0], &[1, 5]), Ok(space(&[1, 5])));
    // Pinning every mode keeps the rank as well.
    assert_eq!(s.slice_pinned(&[3, 4]).map(|x| x.rank()), Ok(2));
}

#[test]
fn chips_drop_the_rank() {
    let s = space(&[10, 20]);
    // Row 2 as a vector.
    assert_eq!(s.chip_pinned(&[2]).map(|c| c.extents().to_vec()), Ok(vec![20]));
    // Column 2 as a vector.
    assert_eq!(s.chip(&[0, 2], &[10, 3]).map(|c| c.extents().to_vec()), Ok(vec![10]));
    // Pinning everything leaves a scalar.
    let scalar = s.chip_pinned(&[1, 2]);
    assert_eq!(scalar.as_ref().map(|c| c.rank()), Ok(0));
    assert_eq!(scalar.map(|c| collect(c.indices())), Ok(vec![Vec::<u64>::new()]));
}

#[test]
fn sub_shapes_have_their_first_element_as_origin() {
    let s = space(&[10, 20]);
    let row2 = s.chip_pinned(&[2]);
    assert_eq!(row2, IndexSpace::with_origin(vec![20], vec![0]));
    let col2 = s.chip(&[0, 2], &[10, 3]);
    assert_eq!(col2, IndexSpace::with_origin(vec![10], vec![0]));
    let col3 = s.chip(&[4, 3], &[9, 4]);
    assert_eq!(col3, IndexSpace::with_origin(vec![5], vec![4]));
    let block = s.slice(&[2, 5], &[4, 8]);
    assert_eq!(block, IndexSpace::with_origin(vec![2, 3], vec![2, 5]));
    // Slicing a slice keeps naming indices of the original shape.
    let inner = block.and_then(|b| b.slice(&[1, 1], &[2, 3]));
    assert_eq!(inner, IndexSpace::with_origin(vec![1, 2], vec![3, 6]));
}

#[test]
fn chip_pinned_keeps_unpinned_modes_of_extent_one() {
    let s = space(&[4, 1, 3]);
    assert_eq!(s.chip_pinned(&[2]).map(|c| c.extents().to_vec()), Ok(vec![1, 3]));
    // The general form drops every mode that selects one element.
    assert_eq!(s.chip(&[2, 0, 0], &[3, 1, 3]).map(|c| c.extents().to_vec()), Ok(vec![3]));
}

#[test]
fn bad_sub_shape_requests_are_errors() {
    let s = space(&[10, 20]);
    assert_eq!(s.slice(&[0], &[1, 1]), Err(IndexSpaceError::RankMismatch { expected: 2, found: 1 }));
    assert_eq!(s.slice(&[0, 5], &[1, 4]), Err(IndexSpaceError::ReversedRange { mode: 1, begin: 5, end: 4 }));
    assert_eq!(s.chip(&[0, 0], &[11, 1]), Err(IndexSpaceError::OutOfBounds { mode: 0, begin: 0, end: 11, extent: 10 }));
    assert_eq!(s.chip_pinned(&[1, 2, 3]), Err(IndexSpaceError::TooManyPins { pins: 3, rank: 2 }));
    assert_eq!(s.slice_pinned(&[10]), Err(IndexSpaceError::OutOfBounds { mode: 0, begin: 10, end: 11, extent: 10 }));
    assert!(s.chip_pinned(&[u64::MAX]).is_err());
    // An empty range is a valid, empty slice.
    assert_eq!(s.slice(&[3, 0], &[3, 20]).map(|x| x.size()), Ok(Some(0)));
}

// ---------------------------------------------------------------------------------------------
// Iteration and origins
// ---------------------------------------------------------------------------------------------

#[test]
fn iterates_in_lexicographic_order() {
    let s = space(&[2, 3]);
    let expected: Vec<Vec<u64>> = vec![vec![0, 0], vec![0, 1], vec![0, 2], vec![1, 0], vec![1, 1], vec![1, 2]];
    assert_eq!(collect(s.indices()), expected);
    assert_eq!(collect((&s).into_iter()), expected);
    assert_eq!(s.size(), Some(6));
}

#[test]
fn a_slice_iterates_over_its_indices_in_the_original() {
    let s = space(&[2, 3]);
    let s01_13 = s.slice(&[0, 1], &[1, 3]).expect("valid slice");
    assert_eq!(collect(s01_13.indices()), vec![vec![0, 1], vec![0, 2]]);
    // The offsets are what the seed calls "{0,0} {0,1}".
    assert_eq!(collect(s01_13.offsets()), vec![vec![0, 0], vec![0, 1]]);
}

#[test]
fn a_moved_origin_moves_every_index() {
    let mut s = space(&[2, 3]);
    assert_eq!(s.set_origin(vec![10, 10]), Ok(()));
    assert_eq!(
        collect(s.indices()),
        vec![vec![10, 10], vec![10, 11], vec![10, 12], vec![11, 10], vec![11, 11], vec![11, 12],]
    );
    assert_eq!(collect(s.offsets())[5], vec![1, 2]);
    let built = IndexSpace::with_origin(vec![2, 3], vec![10, 10]).expect("valid origin");
    assert_eq!(built, s);
}

#[test]
fn degenerate_iterations() {
    assert_eq!(collect(space(&[]).indices()), vec![Vec::<u64>::new()]);
    assert_eq!(collect(space(&[3, 0, 2]).indices()), Vec::<Vec<u64>>::new());
    assert_eq!(collect(space(&[3]).indices()), vec![vec![0], vec![1], vec![2]]);
    let mut it = space(&[1]).indices();
    assert_eq!(it.next(), Some(vec![0]));
    assert_eq!(it.next(), None);
    assert_eq!(it.next(), None);
    let last = IndexSpace::with_origin(vec![1], vec![u64::MAX - 1]).expect("fits");
    assert_eq!(collect(last.indices()), vec![vec![u64::MAX - 1]]);
}

#[test]
fn bad_origins_are_rejected_and_leave_the_shape_alone() {
    let mut s = space(&[2, 3]);
    assert_eq!(s.set_origin(vec![1]), Err(IndexSpaceError::RankMismatch { expected: 2, found: 1 }));
    assert_eq!(
        s.set_origin(vec![0, u64::MAX]),
        Err(IndexSpaceError::OriginOverflow { mode: 1, origin: u64::MAX, extent: 3 })
    );
    assert_eq!(s.origin(), &[0, 0]);
    assert!(IndexSpace::with_origin(vec![2], vec![u64::MAX - 1]).is_err());
    assert_eq!(space(&[u64::MAX, 2]).size(), None);
}

// ---------------------------------------------------------------------------------------------
// Index strings
// ---------------------------------------------------------------------------------------------

#[test]
fn parses_index_strings() {
    let parsed: IndexString = "i, j ,k".parse().expect("valid");
    assert_eq!(parsed.labels(), ["i", "j", "k"]);
    assert_eq!(parsed.to_string(), "i,j,k");
    assert_eq!("".parse::<IndexString>().map(|s| s.rank()), Ok(0));
    assert_eq!(
        "batch_0,x1".parse::<IndexString>().map(|s| s.labels().to_vec()),
        Ok(vec!["batch_0".to_owned(), "x1".to_owned()])
    );
}

#[test]
fn malformed_index_strings_are_errors() {
    assert_eq!("i,,k".parse::<IndexString>(), Err(IndexStringError::EmptyLabel { spec: "i,,k".into(), position: 1 }));
    assert_eq!("i,j,".parse::<IndexString>(), Err(IndexStringError::EmptyLabel { spec: "i,j,".into(), position: 2 }));
    assert_eq!(
        "i,1j".parse::<IndexString>(),
        Err(IndexStringError::MalformedLabel { spec: "i,1j".into(), label: "1j".into() })
    );
    assert_eq!(
        "i j".parse::<IndexString>(),
        Err(IndexStringError::MalformedLabel { spec: "i j".into(), label: "i j".into() })
    );
    assert_eq!(
        "i,j,i".parse::<IndexString>(),
        Err(IndexStringError::RepeatedLabel { spec: "i,j,i".into(), label: "i".into() })
    );
    assert_eq!(
        IndexedShape::new("i,j", &[10, 20, 30]),
        Err(IndexStringError::RankMismatch { spec: "i,j".into(), labels: 2, rank: 3 })
    );
}

#[test]
fn index_string_errors_read_well() {
    let err = "i,1j".parse::<IndexString>().expect_err("malformed");
    assert_eq!(
        err.to_string(),
        "index string \"i,1j\": label \"1j\" is malformed (expected letters, digits and '_', \
         not starting with a digit)"
    );
    let err = product(&indexed("i,j", &[2, 3]), &indexed("j,k", &[4, 5]), "i,k").expect_err("mismatch");
    assert_eq!(err.to_string(), "label \"j\" has extent 3 in the left operand but 4 in the right");
}

// ---------------------------------------------------------------------------------------------
// Compositions: the seed's examples with s0 = {10, 20, 30}
// ---------------------------------------------------------------------------------------------

fn s0(spec: &str) -> IndexedShape {
    indexed(spec, &[10, 20, 30])
}

#[test]
fn elementwise_copies_the_shape() {
    // s1("i,j,k") = s0("i,j,k") + s0("i,j,k"); s1 == s0
    assert_eq!(elementwise(&s0("i,j,k"), &s0("i,j,k"), "i,j,k"), Ok(vec![10, 20, 30]));
}

#[test]
fn elementwise_permutes_modes() {
    // s1("j,i,k") = s0("i,j,k") + s0("i,j,k"); s1 == {20, 10, 30}
    assert_eq!(elementwise(&s0("i,j,k"), &s0("i,j,k"), "j,i,k"), Ok(vec![20, 10, 30]));
    // Operands may list their shared labels in different orders.
    let t = indexed("k,i,j", &[30, 10, 20]);
    assert_eq!(elementwise(&s0("i,j,k"), &t, "k,j,i"), Ok(vec![30, 20, 10]));
}

#[test]
fn elementwise_errors() {
    assert_eq!(
        elementwise(&s0("i,j,k"), &s0("j,i,k"), "i,j,k"),
        Err(IndexStringError::ExtentMismatch { label: "i".into(), lhs: 10, rhs: 20 })
    );
    assert_eq!(
        elementwise(&s0("i,j,k"), &s0("i,j,l"), "i,j,k"),
        Err(IndexStringError::LabelSetMismatch { label: "k".into(), present: Operand::Lhs })
    );
    assert_eq!(
        elementwise(&indexed("i", &[3]), &indexed("i,j", &[3, 4]), "i,j"),
        Err(IndexStringError::LabelSetMismatch { label: "j".into(), present: Operand::Rhs })
    );
    assert_eq!(
        elementwise(&s0("i,j,k"), &s0("i,j,k"), "i,j"),
        Err(IndexStringError::MissingOutputLabel { label: "k".into(), operand: Operand::Lhs })
    );
    assert_eq!(
        elementwise(&s0("i,j,k"), &s0("i,j,k"), "i,j,k,l"),
        Err(IndexStringError::UnknownOutputLabel { label: "l".into() })
    );
}

#[test]
fn permutation_of_one_operand() {
    assert_eq!(permute(&s0("i,j,k"), "k,i,j"), Ok(vec![30, 10, 20]));
    assert_eq!(permutation(&s0("i,j,k"), "k,i,j"), Ok(vec![2, 0, 1]));
    assert_eq!(permutation(&s0("i,j,k"), "i,j,k"), Ok(vec![0, 1, 2]));
    assert_eq!(
        permute(&s0("i,j,k"), "k,k,i"),
        Err(IndexStringError::RepeatedLabel { spec: "k,k,i".into(), label: "k".into() })
    );
}

#[test]
fn contraction_over_a_shared_label() {
    // s1("i,k") = s0("i,j,k") * s0("i,j,k"); s1 == {10, 30}
    assert_eq!(product(&s0("i,j,k"), &s0("i,j,k"), "i,k"), Ok(vec![10, 30]));
    let plan = contraction(&s0("i,j,k"), &s0("i,j,k"), "i,k").expect("valid");
    let batch: Vec<&str> = plan.batch.iter().map(|b| b.label.as_str()).collect();
    let contracted: Vec<&str> = plan.contracting.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(batch, ["i", "k"]);
    assert_eq!(contracted, ["j"]);
    assert!(plan.lhs_free.is_empty() && plan.rhs_free.is_empty());
}

#[test]
fn contraction_with_mismatched_extents_is_an_error() {
    // s1("i,k") = s0("j,i,k") * s0("i,j,k") throws: j is 10 on the left, 20 on the right.
    assert_eq!(
        product(&s0("j,i,k"), &s0("i,j,k"), "i,k"),
        Err(IndexStringError::ExtentMismatch { label: "j".into(), lhs: 10, rhs: 20 })
    );
}

#[test]
fn direct_product() {
    // s1("i,j,k,l") = s0("i,j,k") * s0("i,j,l"); s1 == {10, 20, 30, 30}
    assert_eq!(product(&s0("i,j,k"), &s0("i,j,l"), "i,j,k,l"), Ok(vec![10, 20, 30, 30]));
    let plan = contraction(&s0("i,j,k"), &s0("i,j,l"), "i,j,k,l").expect("valid");
    assert!(plan.contracting.is_empty());
    assert_eq!(plan.lhs_free.len(), 1);
    assert_eq!((plan.lhs_free[0].label.as_str(), plan.lhs_free[0].operand), ("k", 2));
    assert_eq!((plan.rhs_free[0].label.as_str(), plan.rhs_free[0].output), ("l", 3));
    // A pure outer product of vectors.
    assert_eq!(product(&indexed("i", &[3]), &indexed("j", &[4]), "i,j"), Ok(vec![3, 4]));
}

// The seed's jagged examples use js0 = {Shape{10}, Shape{20}}, two rows of different lengths.
// With static extents a row length is one number, so these use the smooth analogue: two rows
// of 10 (extents {2, 10}).

#[test]
fn smooth_analogue_of_jagged_contraction() {
    // js1("i,k") = js0("i,j") * js0("k,j"); a 2 by 2 result.
    let js0 = |spec: &str| indexed(spec, &[2, 10]);
    assert_eq!(product(&js0("i,j"), &js0("k,j"), "i,k"), Ok(vec![2, 2]));
    // js1("i,k") = js0("i,j") * js0("j,k") throws: j is 10 on the left, 2 on the right.
    assert_eq!(
        product(&js0("i,j"), &js0("j,k"), "i,k"),
        Err(IndexStringError::ExtentMismatch { label: "j".into(), lhs: 10, rhs: 2 })
    );
}

#[test]
fn smooth_analogue_of_jagged_direct_product_and_permutation() {
    let js0 = |spec: &str| indexed(spec, &[2, 10]);
    // js1("i,j,k") = js0("i,j") * js0("i,k")
    assert_eq!(product(&js0("i,j"), &js0("i,k"), "i,j,k"), Ok(vec![2, 10, 10]));
    // js1("j,i") = js0("i,j") + js0("i,j")
    assert_eq!(elementwise(&js0("i,j"), &js0("i,j"), "j,i"), Ok(vec![10, 2]));
}

#[test]
fn product_errors() {
    assert_eq!(
        product(&s0("i,j,k"), &s0("i,j,k"), "i,m"),
        Err(IndexStringError::UnknownOutputLabel { label: "m".into() })
    );
    assert_eq!(
        product(&s0("i,j,k"), &s0("i,j,l"), "i,j,l"),
        Err(IndexStringError::MissingOutputLabel { label: "k".into(), operand: Operand::Lhs })
    );
    assert_eq!(
        product(&s0("i,j,k"), &s0("i,j,l"), "i,j,k"),
        Err(IndexStringError::MissingOutputLabel { label: "l".into(), operand: Operand::Rhs })
    );
    assert_eq!(
        product(&s0("i,j,k"), &s0("i,j,k"), "i,k,i"),
        Err(IndexStringError::RepeatedLabel { spec: "i,k,i".into(), label: "i".into() })
    );
}

// ---------------------------------------------------------------------------------------------
// Einsum planning
// ---------------------------------------------------------------------------------------------

#[test]
fn einsum_matmul() {
    let plan = plan_einsum("i,j", &[2, 3], "j,k", &[3, 4], "i,k").expect("valid");
    assert!(plan.batch.is_empty());
    assert_eq!(plan.lhs_contracting_dims(), [1]);
    assert_eq!(plan.rhs_contracting_dims(), [0]);
    assert_eq!(plan.lhs_free[0].label, "i");
    assert_eq!(plan.rhs_free[0].label, "k");
    assert_eq!(plan.output_extents, [2, 4]);
    assert_eq!(plan.dot_extents(), [2, 4]);
    assert_eq!(plan.dot_to_output_permutation(), [0, 1]);
}

#[test]
fn einsum_transposed_output_needs_a_transpose() {
    let plan = plan_einsum("i,j", &[2, 3], "j,k", &[3, 4], "k,i").expect("valid");
    assert_eq!(plan.output_labels, ["k", "i"]);
    assert_eq!(plan.output_extents, [4, 2]);
    assert_eq!(plan.dot_extents(), [2, 4]);
    assert_eq!(plan.dot_to_output_permutation(), [1, 0]);
}

#[test]
fn einsum_batched_with_permuted_operands() {
    // out[b,m,n] = sum_k lhs[k,b,m] * rhs[n,k,b]
    let plan = plan_einsum("k,b,m", &[5, 8, 2], "n,k,b", &[3, 5, 8], "n,b,m").expect("valid");
    assert_eq!(plan.lhs_batch_dims(), [1]);
    assert_eq!(plan.rhs_batch_dims(), [2]);
    assert_eq!(plan.lhs_contracting_dims(), [0]);
    assert_eq!(plan.rhs_contracting_dims(), [1]);
    assert_eq!(plan.batch[0].output, 1);
    assert_eq!(plan.batch[0].extent, 8);
    assert_eq!(plan.contracting[0].extent, 5);
    // dot_general result: [b, m, n] = [8, 2, 3]
    assert_eq!(plan.dot_extents(), [8, 2, 3]);
    assert_eq!(plan.output_extents, [3, 8, 2]);
    assert_eq!(plan.dot_to_output_permutation(), [2, 0, 1]);
    // The permutation applied to the dot extents gives the output extents.
    let dot = plan.dot_extents();
    let permuted: Vec<u64> = plan.dot_to_output_permutation().iter().map(|&d| dot[d]).collect();
    assert_eq!(permuted, plan.output_extents);
}

#[test]
fn einsum_scalar_output_and_scalar_operand() {
    // A dot product of vectors.
    let plan = plan_einsum("i", &[7], "i", &[7], "").expect("valid");
    assert_eq!(plan.output_extents, Vec::<u64>::new());
    assert_eq!(plan.lhs_contracting_dims(), [0]);
    // Scaling by a rank-0 operand.
    let plan = plan_einsum("i,j", &[2, 3], "", &[], "i,j").expect("valid");
    assert_eq!(plan.output_extents, [2, 3]);
    assert!(plan.contracting.is_empty() && plan.rhs_free.is_empty());
}

#[test]
fn einsum_errors() {
    assert_eq!(
        plan_einsum("i,i", &[3, 3], "i", &[3], "i"),
        Err(IndexStringError::RepeatedLabel { spec: "i,i".into(), label: "i".into() })
    );
    assert_eq!(
        plan_einsum("i,j", &[2, 3], "j,k", &[3, 4], "i,z"),
        Err(IndexStringError::UnknownOutputLabel { label: "z".into() })
    );
    assert_eq!(
        plan_einsum("i,j", &[2, 3], "j,k", &[5, 4], "i,k"),
        Err(IndexStringError::ExtentMismatch { label: "j".into(), lhs: 3, rhs: 5 })
    );
    assert_eq!(
        plan_einsum("i,j", &[2, 3], "j,k", &[3], "i,k"),
        Err(IndexStringError::RankMismatch { spec: "j,k".into(), labels: 2, rank: 1 })
    );
    assert_eq!(
        plan_einsum("i,j", &[2, 3], "j,k", &[3, 4], "i"),
        Err(IndexStringError::MissingOutputLabel { label: "k".into(), operand: Operand::Rhs })
    );
    assert_eq!(
        plan_einsum("i,j-", &[2, 3], "j,k", &[3, 4], "i,k"),
        Err(IndexStringError::MalformedLabel { spec: "i,j-".into(), label: "j-".into() })
    );
}
