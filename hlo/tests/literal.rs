//! Literals stored in their layouts: typed construction, element access, relayout, physical
//! bytes.

use half::{bf16, f16};
use tessera_hlo::{ElementType, Layout, Literal, LiteralError, Shape};

fn shape(text: &str) -> Shape {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn layout_of(text: &str) -> Layout {
    shape(text).as_array().and_then(|a| a.layout.clone()).unwrap()
}

#[test]
fn typed_round_trips() {
    fn check<T: tessera_hlo::NativeType + PartialEq + std::fmt::Debug>(values: Vec<T>) {
        let n = values.len() as i64;
        let lit = Literal::from_vec(&[n], values.clone()).unwrap();
        assert_eq!(lit.element_type(), T::ELEMENT_TYPE);
        assert_eq!(lit.to_vec::<T>().unwrap(), values);
        assert_eq!(lit.element_count(), values.len());
    }
    check(vec![true, false, true]);
    check(vec![i8::MIN, -1, 0, i8::MAX]);
    check(vec![i16::MIN, -1, 7]);
    check(vec![i32::MIN, -1, 7]);
    check(vec![i64::MIN, -1, i64::MAX]);
    check(vec![0u8, 255]);
    check(vec![0u16, 65535]);
    check(vec![0u32, u32::MAX]);
    check(vec![0u64, u64::MAX]);
    check(vec![1.5f32, -0.0, f32::INFINITY]);
    check(vec![1.5f64, f64::MIN_POSITIVE]);
    check(vec![f16::from_f32(1.5), f16::NEG_INFINITY]);
    check(vec![bf16::from_f32(-2.25), bf16::MAX]);
    check(vec![(1.0f32, -2.0f32), (0.5, 0.25)]);
    check(vec![(1.0f64, -2.0f64)]);
}

#[test]
fn bit_access_api() {
    let mut lit = Literal::zeros(Shape::array(ElementType::S32, &[2, 3])).unwrap();
    assert!(lit.set_bits(4, (-5i32) as u32 as u128));
    assert_eq!(lit.get_bits(4), Some(0xFFFF_FFFB));
    assert_eq!(lit.get::<i32>(&[1, 1]).unwrap(), -5);
    assert!(!lit.set_bits(6, 1));
    assert_eq!(lit.get_bits(6), None);
    // Bits above the width are dropped.
    assert!(lit.set_bits(0, 0x1_0000_0007));
    assert_eq!(lit.get_bits(0), Some(7));
    let c = Literal::from_vec(&[1], vec![(1.0f32, 2.0f32)]).unwrap();
    assert_eq!(c.get_bits(0), Some(u128::from(1.0f32.to_bits()) | (u128::from(2.0f32.to_bits()) << 32)));
    let t = Literal::tuple(vec![lit.clone(), Literal::scalar(1.0f64)]);
    assert_eq!(t.element_count(), 0);
    assert_eq!(t.get_bits(0), None);
    assert_eq!(t.tuple_elements().unwrap()[1].get::<f64>(&[]).unwrap(), 1.0);
}

#[test]
fn tiled_storage_and_relayout() {
    let values: Vec<f32> = (0..15).map(|v| v as f32 + 1.0).collect();
    let row_major = Literal::from_vec(&[3, 5], values.clone()).unwrap();
    assert!(row_major.is_dense_row_major());
    let tiled = row_major.relayout(&layout_of("f32[3,5]{1,0:T(2,2)}")).unwrap();
    let bytes = tiled.physical_bytes().unwrap();
    assert_eq!(bytes.len(), 24 * 4);
    let slot = |i: usize| f32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
    // (2,3) is logical 13 -> value 14, at physical slot 17.
    assert_eq!(slot(17), 14.0);
    // Row 2 sits in the lower tiles' first rows; their second rows are zeroed padding.
    assert_eq!(slot(14), 0.0);
    assert_eq!(tiled.to_vec::<f32>().unwrap(), values);
    assert_eq!(tiled.get::<f32>(&[2, 3]).unwrap(), 14.0);
    assert_eq!(tiled.get_bits(13), Some(u128::from(14.0f32.to_bits())));
    assert!(tiled.eq_ignoring_layout(&row_major));
    assert_ne!(tiled, row_major);
    let back = tiled.relayout(&Layout::row_major(2)).unwrap();
    assert_eq!(back.physical_bytes().unwrap(), row_major.physical_bytes().unwrap());
    assert!(back.eq_ignoring_layout(&row_major));

    // A chain of layouts keeps every value.
    let mut lit = row_major.clone();
    for text in ["f32[3,5]{0,1}", "f32[3,5]{0,1:T(2)}", "f32[3,5]{1,0:T(4,4)(2,1)L(7)}", "f32[3,5]{1,0}"] {
        lit = lit.relayout(&layout_of(text)).unwrap();
        assert_eq!(lit.to_vec::<f32>().unwrap(), values, "{text}");
    }
    assert_eq!(lit, row_major.relayout(&Layout::row_major(2)).unwrap());
}

#[test]
fn bf16_tpu_layout_bytes() {
    let values: Vec<bf16> = (0..32).map(|v| bf16::from_f32(v as f32)).collect();
    let lit = Literal::from_vec(&[4, 8], values.clone()).unwrap();
    let tiled = lit.relayout(&layout_of("bf16[4,8]{1,0:T(2,4)(2,1)}")).unwrap();
    let bytes = tiled.physical_bytes().unwrap();
    let slot = |i: usize| bf16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32();
    // Row 0 at 0,2,..,14 and row 1 at 1,3,..,15.
    assert_eq!((0..8).map(|c| slot(2 * c)).collect::<Vec<_>>(), (0..8).map(|c| c as f32).collect::<Vec<_>>());
    assert_eq!((0..8).map(|c| slot(2 * c + 1)).collect::<Vec<_>>(), (8..16).map(|c| c as f32).collect::<Vec<_>>());
    assert_eq!(tiled.to_vec::<bf16>().unwrap(), values);
}

#[test]
fn packed_pred_and_s4() {
    let s = shape("pred[32,128]{1,0:T(32,128)(32,1)E(1)}");
    let mut lit = Literal::zeros(s.clone()).unwrap();
    assert_eq!(lit.physical_bytes().unwrap().len(), 512);
    lit.set(&[5, 3], true).unwrap();
    // (5,3) -> slot 3*32+5 = 101 -> byte 12, bit 5.
    let bytes = lit.physical_bytes().unwrap();
    assert_eq!(bytes[12], 1 << 5);
    assert_eq!(bytes.iter().filter(|&&b| b != 0).count(), 1);
    assert!(lit.get::<bool>(&[5, 3]).unwrap());
    assert!(!lit.get::<bool>(&[3, 5]).unwrap());
    // Any nonzero pred bits store as true.
    assert!(lit.set_bits_at(&[0, 0], 0x10));
    assert_eq!(lit.get_bits_at(&[0, 0]), Some(1));
    let unpacked = lit.relayout(&Layout::row_major(2)).unwrap();
    assert_eq!(unpacked.physical_bytes().unwrap()[5 * 128 + 3], 1);
    assert!(unpacked.eq_ignoring_layout(&lit));

    // s4 packed two per byte, low nibble first: [-1, 2, -8, 7, 0] -> 0x2F 0x78 0x00.
    let bits: Vec<u128> = [-1i8, 2, -8, 7, 0].iter().map(|&v| u128::from(v as u8)).collect();
    let packed = Literal::from_bits_vec(shape("s4[5]{0:E(4)}"), bits.clone()).unwrap();
    assert_eq!(packed.physical_bytes().unwrap(), &[0x2F, 0x78, 0x00]);
    assert_eq!(packed.get_bits(0), Some(0xF));
    assert_eq!(packed.get_bits(2), Some(0x8));
    // Unpacked s4 bytes hold the value sign-extended; the bits read back are 4 wide.
    let wide = packed.relayout(&Layout::new(&[0])).unwrap();
    assert_eq!(wide.physical_bytes().unwrap(), &[0xFF, 0x02, 0xF8, 0x07, 0x00]);
    assert_eq!(wide.to_bits_vec().unwrap(), vec![0xF, 0x2, 0x8, 0x7, 0x0]);
    assert!(wide.eq_ignoring_layout(&packed));
}

#[test]
fn physical_bytes_round_trip_ignores_padding() {
    let s = shape("f32[3,5]{1,0:T(2,2)}");
    let lit = Literal::from_vec_with_shape(s.clone(), (0..15).map(|v| v as f32).collect()).unwrap();
    let mut bytes = lit.physical_bytes().unwrap().to_vec();
    // Garbage in a padding slot (14) changes nothing logical.
    bytes[14 * 4..15 * 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let again = Literal::from_physical_bytes(s.clone(), bytes).unwrap();
    assert_eq!(again, lit);
    assert_eq!(again.to_vec::<f32>().unwrap(), lit.to_vec::<f32>().unwrap());
}

#[test]
fn errors() {
    assert!(matches!(
        Literal::from_vec(&[2, 2], vec![1.0f32; 3]),
        Err(LiteralError::CountMismatch { expected: 4, found: 3, .. })
    ));
    assert!(matches!(
        Literal::from_vec_with_shape(shape("f32[2]"), vec![1i32, 2]),
        Err(LiteralError::TypeMismatch { .. })
    ));
    let lit = Literal::from_vec(&[2], vec![1i32, 2]).unwrap();
    assert!(matches!(lit.to_vec::<f32>(), Err(LiteralError::TypeMismatch { .. })));
    assert!(matches!(lit.get::<i32>(&[2]), Err(LiteralError::Layout(_))));
    assert!(matches!(lit.get::<i32>(&[0, 0]), Err(LiteralError::Layout(_))));
    assert!(matches!(
        Literal::from_physical_bytes(shape("f32[3,5]{1,0:T(2,2)}"), vec![0u8; 60]),
        Err(LiteralError::ByteCountMismatch { expected: 96, found: 60, .. })
    ));
    assert!(matches!(Literal::zeros(shape("f32[?]")), Err(LiteralError::NotStatic(_))));
    assert!(matches!(Literal::zeros(shape("f32[4611686018427387904,8]")), Err(LiteralError::TooLarge(_))));
    assert!(matches!(Literal::zeros(Shape::Opaque), Err(LiteralError::Opaque)));
    let t = Literal::tuple(vec![lit.clone()]);
    assert!(matches!(t.physical_bytes(), Err(LiteralError::NotArray(_))));
    assert!(matches!(t.relayout(&Layout::row_major(1)), Err(LiteralError::NotArray(_))));
    assert!(matches!(lit.relayout(&Layout::row_major(2)), Err(LiteralError::Layout(_))));
    assert!(matches!(lit.relayout_like(&shape("f32[2]")), Err(LiteralError::Incompatible { .. })));
}

#[test]
fn tuples_relayout_like() {
    let a = Literal::from_vec(&[2, 3], (0..6).collect::<Vec<i32>>()).unwrap();
    let b = Literal::scalar(true);
    let t = Literal::tuple(vec![a.clone(), Literal::tuple(vec![b.clone()])]);
    let target = shape("(s32[2,3]{0,1}, (pred[]))");
    let moved = t.relayout_like(&target).unwrap();
    assert_eq!(moved.shape(), &target);
    let moved_a = &moved.tuple_elements().unwrap()[0];
    assert_eq!(moved_a.physical_bytes().unwrap()[4..8], 3i32.to_le_bytes());
    assert!(moved.eq_ignoring_layout(&t));
    assert_ne!(moved, t);
}
