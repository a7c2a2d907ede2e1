//! Golden tables and property tests for the layout index math.

use tessera_hlo::layout_index::{
    physical_byte_size, physical_element_count, DimOrigin, IndexExpr, LayoutError, LayoutMap,
};
use tessera_hlo::{ArrayShape, ElementType, Layout, Shape};
use tessera_testkit::Rng;

fn array(text: &str) -> ArrayShape {
    match text.parse::<Shape>() {
        Ok(Shape::Array(a)) => a,
        other => panic!("{text} is not an array shape: {other:?}"),
    }
}

fn map(text: &str) -> LayoutMap {
    LayoutMap::new(&array(text)).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn off(m: &LayoutMap, index: &[i64]) -> i64 {
    m.offset(index).unwrap_or_else(|e| panic!("{index:?}: {e}"))
}

/// All logical indices of `dims` in row-major order.
fn indices(dims: &[i64]) -> Vec<Vec<i64>> {
    let count: i64 = dims.iter().product();
    (0..count)
        .map(|mut linear| {
            let mut index = vec![0; dims.len()];
            for d in (0..dims.len()).rev() {
                index[d] = linear % dims[d];
                linear /= dims[d];
            }
            index
        })
        .collect()
}

#[test]
fn seed_2x3_minor_to_major() {
    // a b c / d e f with {0,1} is laid out a d b e c f; with {1,0} a b c d e f.
    let letters = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]; // a b c d e f
    let col = map("f32[2,3]{0,1}");
    let col_offsets: Vec<i64> = letters.iter().map(|&(r, c)| off(&col, &[r, c])).collect();
    assert_eq!(col_offsets, [0, 2, 4, 1, 3, 5]);
    let row = map("f32[2,3]{1,0}");
    let row_offsets: Vec<i64> = letters.iter().map(|&(r, c)| off(&row, &[r, c])).collect();
    assert_eq!(row_offsets, [0, 1, 2, 3, 4, 5]);
    assert!(row.is_identity());
    assert!(!col.is_identity());
    assert_eq!(col.physical_element_count(), 6);
}

#[test]
fn seed_padded_dimensions() {
    // padded_dimensions [3,5], column-major: a d 0 b e 0 c f 0 0 0 0 0 0 0.
    let mut shape = ArrayShape::new(ElementType::F32, &[2, 3]);
    shape.layout = Some(Layout::new(&[0, 1]).with_padded_dimensions(&[3, 5]));
    let m = LayoutMap::new(&shape).unwrap();
    assert_eq!(m.physical_element_count(), 15);
    let letters = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)];
    let offsets: Vec<i64> = letters.iter().map(|&(r, c)| off(&m, &[r, c])).collect();
    assert_eq!(offsets, [0, 3, 6, 1, 4, 7]);
    let data_slots: Vec<i64> = (0..15).filter(|&o| m.logical_index(o).is_some()).collect();
    assert_eq!(data_slots, [0, 1, 3, 4, 6, 7]);
    assert_eq!(m.logical_index(4), Some(vec![1, 1]));

    let mut bad = shape.clone();
    bad.layout = Some(Layout::new(&[0, 1]).with_padded_dimensions(&[1, 5]));
    assert!(matches!(LayoutMap::new(&bad), Err(LayoutError::Invalid { .. })));
    bad.layout = Some(Layout::new(&[0, 1]).with_padded_dimensions(&[3]));
    assert!(matches!(LayoutMap::new(&bad), Err(LayoutError::Invalid { .. })));
}

#[test]
fn tiled_2x2_golden() {
    let m = map("f32[3,5]{1,0:T(2,2)}");
    assert_eq!(off(&m, &[2, 3]), 17);
    // Tile grid 2x3 of 2x2 tiles: 24 slots, 9 of them padding.
    assert_eq!(m.physical_element_count(), 24);
    let extents: Vec<i64> = m.physical_dims().iter().map(|p| p.extent).collect();
    assert_eq!(extents, [2, 3, 2, 2]);
    let strides: Vec<i64> = m.physical_dims().iter().map(|p| p.stride).collect();
    assert_eq!(strides, [12, 4, 2, 1]);
    let origins: Vec<DimOrigin> = m.physical_dims().iter().map(|p| p.origin).collect();
    assert_eq!(
        origins,
        [
            DimOrigin::TileCount { tile: 0 },
            DimOrigin::TileCount { tile: 0 },
            DimOrigin::InTile { tile: 0 },
            DimOrigin::InTile { tile: 0 }
        ]
    );
    let exprs: Vec<String> = m.physical_dims().iter().map(|p| p.index.to_string()).collect();
    assert_eq!(exprs, ["(i0/2)", "(i1/2)", "(i0%2)", "(i1%2)"]);
    assert_eq!(m.logical_index(17), Some(vec![2, 3]));
    // Row 2 lives in the lower tiles' first rows; their second rows are padding.
    assert_eq!(m.logical_index(14), None);
}

#[test]
fn repeated_tiles_bf16_golden() {
    let m = map("bf16[4,8]{1,0:T(2,4)(2,1)}");
    let row0: Vec<i64> = (0..8).map(|c| off(&m, &[0, c])).collect();
    let row1: Vec<i64> = (0..8).map(|c| off(&m, &[1, c])).collect();
    assert_eq!(row0, [0, 2, 4, 6, 8, 10, 12, 14]);
    assert_eq!(row1, [1, 3, 5, 7, 9, 11, 13, 15]);
    assert_eq!(m.physical_element_count(), 32);
    assert_eq!(m.physical_byte_size(), 64);
}

#[test]
fn combined_dims_match_merged_shape() {
    let combined = map("f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}");
    let merged = map("f32[112,110]{1,0:T(2,3)}");
    assert_eq!(combined.physical_element_count(), merged.physical_element_count());
    assert_eq!(combined.physical_element_count(), 112 * 111);
    let all: Vec<i64> = combined.offsets().collect();
    assert_eq!(all.len(), 2 * 7 * 8 * 11 * 10);
    for (idx, &o) in indices(&[2, 7, 8, 11, 10]).iter().zip(&all) {
        let row = idx[0] * 56 + idx[1] * 8 + idx[2];
        let col = idx[3] * 10 + idx[4];
        assert_eq!(o, off(&merged, &[row, col]), "{idx:?}");
        assert_eq!(o, off(&combined, idx));
    }
}

#[test]
fn alternative_bf16_packing_doc_example() {
    // XLA's tiled-layout doc: in an 8x8 array tiled (2,4)(2,1,1,1), element (6,5) is at 51.
    let m = map("f32[8,8]{1,0:T(2,4)(2,1,1,1)}");
    assert_eq!(off(&m, &[6, 5]), 51);
    assert_eq!(m.physical_element_count(), 64);
}

#[test]
fn tpu_8x128() {
    // Tiles of 8x128 row-major, each tile row-major inside: for f32[16,256],
    // (9,130) is in tile (1,1) -> tile number 1*2+1 = 3 -> 3*1024, in-tile (1,2) -> 128+2.
    let m = map("f32[16,256]{1,0:T(8,128)}");
    assert_eq!(off(&m, &[9, 130]), 3 * 1024 + 128 + 2);
    assert_eq!(m.physical_element_count(), 4096);
    // f32[3,200] pads to one 8-row band of two tiles: 2048 slots; (2,130) in tile 1, in-tile (2,2).
    let m = map("f32[3,200]{1,0:T(8,128)}");
    assert_eq!(m.physical_element_count(), 2048);
    assert_eq!(m.physical_byte_size(), 8192);
    assert_eq!(off(&m, &[2, 130]), 1024 + 2 * 128 + 2);
}

#[test]
fn tpu_small_tiles() {
    // 2x128: f32[2,300] -> 3 tiles of 256; (1,129) is in tile 1 at in-tile (1,1).
    let m = map("f32[2,300]{1,0:T(2,128)}");
    assert_eq!(m.physical_element_count(), 768);
    assert_eq!(off(&m, &[1, 129]), 256 + 128 + 1);
    // 4x128: f32[3,130] -> 2 tiles of 512; (2,129) is in tile 1 at in-tile (2,1).
    let m = map("f32[3,130]{1,0:T(4,128)}");
    assert_eq!(m.physical_element_count(), 1024);
    assert_eq!(off(&m, &[2, 129]), 512 + 2 * 128 + 1);
    assert_eq!(m.logical_index(512 + 3 * 128), None);
}

#[test]
fn tpu_bf16_packing() {
    // (8,128) makes [2,1,8,128]; (2,1) retiles the in-tile [8,128] into [4,128,2,1], so
    // (r,c) -> (r/8)*1024 + ((r%8)/2)*256 + (c%128)*2 + r%2: rows pair up column by column.
    let m = map("bf16[16,128]{1,0:T(8,128)(2,1)}");
    assert_eq!(off(&m, &[0, 0]), 0);
    assert_eq!(off(&m, &[1, 0]), 1);
    assert_eq!(off(&m, &[0, 1]), 2);
    assert_eq!(off(&m, &[2, 0]), 256);
    assert_eq!(off(&m, &[9, 5]), 1024 + 10 + 1);
    assert_eq!(m.physical_element_count(), 2048);
    assert_eq!(m.physical_byte_size(), 4096);
}

#[test]
fn tpu_8bit_packing() {
    // (8,128) makes [1,2,8,128]; (4,1) retiles [8,128] into [2,128,4,1]:
    // (r,c) -> (c/128)*1024 + (r/4)*512 + (c%128)*4 + r%4.
    let m = map("s8[8,256]{1,0:T(8,128)(4,1)}");
    assert_eq!(off(&m, &[5, 130]), 1024 + 512 + 2 * 4 + 1);
    assert_eq!(off(&m, &[3, 0]), 3);
    assert_eq!(m.physical_byte_size(), 2048);
}

#[test]
fn tpu_pred_1bit() {
    // (32,128) then (32,1): [1,1,1,128,32,1], so (r,c) -> c*32 + r; 4096 one-bit slots.
    let m = map("pred[32,128]{1,0:T(32,128)(32,1)E(1)}");
    assert_eq!(off(&m, &[5, 3]), 3 * 32 + 5);
    assert_eq!(m.physical_element_count(), 4096);
    assert_eq!(m.element_size_bits(), 1);
    assert_eq!(m.physical_byte_size(), 512);
    // pred[40,130]: [2,2,32,128] -> [2,2,1,128,32,1]; (33,129) -> tile (1,1) = 3*4096, then
    // in-tile (1,1) -> 1*32 + 1. XLA's ArraySize agrees on 64*256 bits = 2048 bytes.
    let m = map("pred[40,130]{1,0:T(32,128)(32,1)E(1)}");
    assert_eq!(m.physical_element_count(), 16384);
    assert_eq!(m.physical_byte_size(), 2048);
    assert_eq!(off(&m, &[33, 129]), 3 * 4096 + 33);
}

#[test]
fn tile_wider_than_rank_adds_leading_dims() {
    // As XLA's ArraySize: missing major dimensions count as size 1 (rounded up to 2).
    let m = map("f32[5]{0:T(2,128)}");
    assert_eq!(m.physical_element_count(), 256);
    assert_eq!(off(&m, &[3]), 3);
    // The implicit dimension is itself tiled; its index is always 0.
    assert_eq!(m.physical_dims()[0].index, IndexExpr::Zero);
    assert_eq!(m.physical_dims()[0].origin, DimOrigin::TileCount { tile: 0 });
    let m = map("f32[]{:T(4)}");
    assert_eq!(m.physical_element_count(), 4);
    assert_eq!(off(&m, &[]), 0);
}

#[test]
fn tail_padding() {
    assert_eq!(map("f32[3,5]{1,0:L(8)}").physical_element_count(), 16);
    assert_eq!(map("f32[3,5]{1,0:T(2,2)L(10)}").physical_element_count(), 30);
    assert_eq!(map("f32[4,4]{1,0:L(16)}").physical_element_count(), 16);
    assert_eq!(map("f32[0,5]{1,0:L(8)}").physical_element_count(), 0);
    let m = map("f32[3,5]{1,0:L(8)}");
    assert!(m.is_identity());
    assert_eq!(m.logical_index(14), Some(vec![2, 4]));
    assert_eq!(m.logical_index(15), None);
}

#[test]
fn byte_sizes() {
    assert_eq!(physical_byte_size(&array("s4[5]{0:E(4)}")), Ok(3));
    assert_eq!(physical_byte_size(&array("s4[5]{0}")), Ok(5));
    assert_eq!(physical_byte_size(&array("u2[7]{0:E(2)}")), Ok(2));
    assert_eq!(physical_byte_size(&array("pred[10]{0:E(1)}")), Ok(2));
    assert_eq!(physical_byte_size(&array("pred[10]")), Ok(10));
    assert_eq!(physical_byte_size(&array("c128[3]")), Ok(48));
    assert_eq!(physical_byte_size(&array("s4[3,3]{1,0:T(2,2)E(4)}")), Ok(8));
    assert_eq!(physical_element_count(&array("s4[3,3]{1,0:T(2,2)E(4)}")), Ok(16));
}

#[test]
fn errors_not_panics() {
    let err = |text: &str| LayoutMap::new(&array(text)).unwrap_err();
    assert!(matches!(err("f32[4,4]{1,0:T(2,*)}"), LayoutError::Invalid { .. }));
    let with_layout = |minor_to_major: &[i64]| {
        LayoutMap::from_parts(ElementType::F32, &[4, 4], &Layout::new(minor_to_major)).unwrap_err()
    };
    assert!(matches!(with_layout(&[0]), LayoutError::Invalid { .. }));
    assert!(matches!(with_layout(&[1, 1]), LayoutError::Invalid { .. }));
    assert!(matches!(with_layout(&[2, 0]), LayoutError::Invalid { .. }));
    assert!(matches!(
        LayoutMap::from_parts(ElementType::Token, &[], &Layout::default()),
        Err(LayoutError::NotArrayType(ElementType::Token))
    ));
    assert!(matches!(
        LayoutMap::from_parts(ElementType::F32, &[-2], &Layout::new(&[0])),
        Err(LayoutError::NegativeDimension { dim: 0, size: -2 })
    ));
    let zero_tile = Layout::new(&[0]).with_tiles(&[&[0]]);
    assert!(matches!(LayoutMap::from_parts(ElementType::F32, &[4], &zero_tile), Err(LayoutError::Invalid { .. })));
    assert!(matches!(err("f32[4,4]{1,0:E(3)}"), LayoutError::Invalid { .. }));
    assert!(matches!(err("s8[4]{0:E(4)}"), LayoutError::Invalid { .. }));
    assert!(matches!(err("f32[4,<=4]"), LayoutError::DynamicDimension { dim: 1 }));
    assert!(matches!(err("f32[4611686018427387904,4611686018427387904]"), LayoutError::Overflow(_)));
    assert!(matches!(err("f32[4611686018427387904]{0:T(3)}"), LayoutError::Overflow(_)));
    assert!(matches!(err("f32[9223372036854775807]{0:L(2)}"), LayoutError::Overflow(_)));
    assert_eq!(LayoutMap::at_bounds(&array("f32[4,<=4]")).map(|m| m.physical_element_count()), Ok(16));
    assert!(matches!(LayoutMap::at_bounds(&array("f32[4,?]")), Err(LayoutError::UnboundedDimension { dim: 1 })));

    let m = map("f32[3,5]{1,0:T(2,2)}");
    assert!(matches!(m.offset(&[3, 0]), Err(LayoutError::IndexOutOfBounds { dim: 0, .. })));
    assert!(matches!(m.offset(&[-1, 0]), Err(LayoutError::IndexOutOfBounds { .. })));
    assert!(matches!(m.offset(&[1]), Err(LayoutError::IndexRank { got: 1, rank: 2 })));
    assert!(m.offset_of_linear(15).is_err());
    assert_eq!(m.logical_index(-1), None);
    assert_eq!(m.logical_index(24), None);
    assert_eq!(m.logical_index(i64::MAX), None);
}

/// A random array shape with a random tiled layout.
fn random_shape(rng: &mut Rng) -> ArrayShape {
    let rank = rng.below(6) as usize;
    let dims: Vec<i64> = (0..rank)
        .map(|_| match rng.below(10) {
            0 => 0,
            1 | 2 => 1,
            _ => 1 + rng.below(5) as i64,
        })
        .collect();
    let element_type = *[ElementType::F32, ElementType::BF16, ElementType::Pred, ElementType::S4, ElementType::U8]
        .get(rng.below(5) as usize)
        .unwrap();
    let mut minor_to_major: Vec<i64> = (0..rank as i64).collect();
    for i in (1..rank).rev() {
        minor_to_major.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut layout = Layout::new(&minor_to_major);
    let mut current_rank = rank;
    for _ in 0..rng.below(3) {
        let len = 1 + rng.below(current_rank.clamp(1, 3) as u64 + 1) as usize;
        let mut tile: Vec<i64> =
            (0..len).map(|j| if j + 1 < len && rng.chance(20) { i64::MIN } else { 1 + rng.below(4) as i64 }).collect();
        if rng.chance(15) {
            tile[len - 1] = 1;
        }
        let combined = tile.iter().filter(|&&t| t == i64::MIN).count();
        current_rank = current_rank.max(len) - combined + (len - combined);
        layout.tiles.push(tessera_hlo::Tile { dims: tile });
    }
    if rng.chance(30) {
        layout.tail_padding_alignment = 1 + rng.below(7) as i64;
    }
    if rng.chance(20) {
        layout.padded_dimensions = dims.iter().map(|&d| d + rng.below(3) as i64).collect();
    }
    if element_type == ElementType::Pred && rng.chance(50) {
        layout.element_size_bits = 1;
    }
    if element_type == ElementType::S4 && rng.chance(50) {
        layout.element_size_bits = 4;
    }
    let mut shape = ArrayShape::new(element_type, &dims);
    shape.layout = Some(layout);
    shape
}

#[test]
fn random_layouts_are_bijections_onto_data_slots() {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let mut checked = 0;
    for case in 0..3000 {
        let shape = random_shape(&mut rng);
        let text = Shape::Array(shape.clone()).to_string();
        let m = LayoutMap::new(&shape).unwrap_or_else(|e| panic!("case {case} {text}: {e}"));
        let count = m.physical_element_count();
        assert!(count >= m.tiled_element_count(), "{text}");
        assert_eq!(count % shape.layout.as_ref().unwrap().tail_padding_alignment, 0, "{text}");
        let mut hit = vec![false; count as usize];
        let streamed: Vec<i64> = m.offsets().collect();
        assert_eq!(streamed.len() as i64, m.element_count(), "{text}");
        for (linear, (index, &o)) in indices(&shape.dims).iter().zip(&streamed).enumerate() {
            assert_eq!(off(&m, index), o, "{text} {index:?}");
            assert_eq!(m.offset_of_linear(linear as i64), Ok(o), "{text} {index:?}");
            let from_exprs: i64 = m.physical_dims().iter().map(|p| p.index.eval(index) * p.stride).sum();
            assert_eq!(from_exprs, o, "{text} {index:?}");
            assert!((0..count).contains(&o), "{text} {index:?} -> {o} of {count}");
            assert!(!hit[o as usize], "{text}: two elements at {o}");
            hit[o as usize] = true;
            assert_eq!(m.logical_index(o).as_deref(), Some(index.as_slice()), "{text} {o}");
        }
        for (slot, &h) in hit.iter().enumerate() {
            if !h {
                assert_eq!(m.logical_index(slot as i64), None, "{text}: slot {slot} should be padding");
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 3000);
}

#[test]
fn huge_combined_dims_fall_back_to_expressions() {
    // The merged dimension has 1.1M positions, above the lookup-table limit.
    let combined = map("f32[1100,1000,2]{2,1,0:T(*,8,2)}");
    let merged = map("f32[1100000,2]{1,0:T(8,2)}");
    assert_eq!(combined.physical_element_count(), merged.physical_element_count());
    for (i, o) in combined.offsets().take(5000).enumerate() {
        let (row, col) = (i as i64 / 2, i as i64 % 2);
        assert_eq!(o, off(&merged, &[row, col]));
    }
    assert_eq!(off(&combined, &[1099, 999, 1]), off(&merged, &[1_099_999, 1]));
    assert_eq!(combined.logical_index(off(&merged, &[123_456, 1])), Some(vec![123, 456, 1]));
}
