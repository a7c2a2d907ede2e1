//! `.npy` I/O against the XLA:CPU corpus files and round trips, logical and physical.

mod common;

use common::shared_dir;
use std::path::PathBuf;

use half::{bf16, f16};
use tessera_hlo::npy::{
    read_npy, read_npy_any, read_npy_any_from, read_npy_from, read_npy_physical, read_npy_physical_from, write_npy,
    write_npy_physical, write_npy_physical_to, write_npy_to,
};
use tessera_hlo::{Layout, Literal, NpyError, Shape};

fn corpus() -> PathBuf {
    shared_dir().join("corpus")
}

fn shape(text: &str) -> Shape {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn read(case_file: &str, shape_text: &str) -> Literal {
    read_npy(corpus().join(case_file), &shape(shape_text)).unwrap_or_else(|e| panic!("{case_file}: {e}"))
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-npy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn corpus_bf16_raw_bits() {
    let x = read("unary_bf16/args/0.npy", "bf16[32,64]").to_vec::<bf16>().unwrap();
    let floor = read("unary_bf16/expected/2.npy", "bf16[32,64]").to_vec::<bf16>().unwrap();
    assert_eq!(x.len(), 32 * 64);
    for (a, f) in x.iter().zip(&floor) {
        assert_eq!(bf16::from_f32(a.to_f32().floor()), *f, "floor({a})");
    }
    // The same file without an expected shape is plain u16 bits.
    let bits = read_npy_any(corpus().join("unary_bf16/args/0.npy")).unwrap();
    assert_eq!(bits.shape(), &shape("u16[32,64]"));
    let raw: Vec<u16> = bits.to_vec().unwrap();
    assert_eq!(raw, x.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    // f16 output files too.
    let h = read("convert_int_to_float/expected/4.npy", "f16[64]").to_vec::<f16>().unwrap();
    let from = read("convert_int_to_float/args/0.npy", "s32[64]").to_vec::<i32>().unwrap();
    for (v, i) in h.iter().zip(&from) {
        assert_eq!(*v, f16::from_f32(*i as f32), "{i}");
    }
}

#[test]
fn corpus_pred() {
    let x = read("compare_f32_special/args/0.npy", "f32[16,16]").to_vec::<f32>().unwrap();
    let y = read("compare_f32_special/args/1.npy", "f32[16,16]").to_vec::<f32>().unwrap();
    let eq = read("compare_f32_special/expected/0.npy", "pred[16,16]").to_vec::<bool>().unwrap();
    let lt = read("compare_f32_special/expected/2.npy", "pred[16,16]").to_vec::<bool>().unwrap();
    for i in 0..x.len() {
        assert_eq!(eq[i], x[i] == y[i], "{} == {}", x[i], y[i]);
        assert_eq!(lt[i], x[i] < y[i], "{} < {}", x[i], y[i]);
    }
    assert!(eq.iter().any(|&b| b) && lt.iter().any(|&b| b));
}

#[test]
fn corpus_complex() {
    let re = read("complex_basic/expected/0.npy", "f32[16,16]").to_vec::<f32>().unwrap();
    let im = read("complex_basic/expected/1.npy", "f32[16,16]").to_vec::<f32>().unwrap();
    let c = read("complex_basic/expected/3.npy", "c64[16,16]").to_vec::<(f32, f32)>().unwrap();
    for i in 0..c.len() {
        assert_eq!(c[i], (re[i], im[i]));
    }
    let any = read_npy_any(corpus().join("complex_basic/expected/3.npy")).unwrap();
    assert_eq!(any.shape(), &shape("c64[16,16]"));
}

#[test]
fn corpus_bitcast_bytes() {
    let x = read("bitcast_convert/args/0.npy", "f32[16,8]").to_vec::<f32>().unwrap();
    let bytes = read("bitcast_convert/expected/3.npy", "u8[16,8,4]").to_vec::<u8>().unwrap();
    let as_s32 = read("bitcast_convert/expected/0.npy", "s32[16,8]").to_vec::<i32>().unwrap();
    let expected: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(bytes, expected);
    assert_eq!(as_s32, x.iter().map(|v| v.to_bits() as i32).collect::<Vec<_>>());
    // Reading into a column-major parameter stores the same values in that layout.
    let col = read("bitcast_convert/args/0.npy", "f32[16,8]{0,1}");
    assert_eq!(col.to_vec::<f32>().unwrap(), x);
    assert_eq!(col.get::<f32>(&[1, 0]).unwrap().to_le_bytes(), col.physical_bytes().unwrap()[4..8]);
}

#[test]
fn mismatches_say_what_differs() {
    let path = corpus().join("unary_bf16/args/0.npy");
    let err = read_npy(&path, &shape("f32[32,64]")).unwrap_err().to_string();
    assert!(err.contains("<u2") && err.contains("f32") && err.contains("<f4"), "{err}");
    assert!(err.contains("unary_bf16"), "{err}");
    let err = read_npy(&path, &shape("bf16[64,32]")).unwrap_err().to_string();
    assert!(err.contains("(32, 64)") && err.contains("(64, 32)"), "{err}");
    let err = read_npy(&path, &shape("(bf16[32,64])")).unwrap_err().to_string();
    assert!(err.contains("not an array"), "{err}");
    let err = read_npy(temp("missing.npy"), &shape("f32[1]")).unwrap_err();
    assert!(matches!(err, NpyError::File { .. }));
}

#[test]
fn logical_round_trips() {
    let cases: Vec<Literal> = vec![
        Literal::from_vec(&[2, 3], vec![1.5f32, -2.0, 0.0, f32::INFINITY, 7.0, -0.0]).unwrap(),
        Literal::from_vec(&[3], vec![true, false, true]).unwrap(),
        Literal::from_vec(&[2, 2], vec![bf16::from_f32(1.0), bf16::MIN, bf16::NAN, bf16::ZERO]).unwrap(),
        Literal::from_vec(&[2], vec![f16::from_f32(0.5), f16::MAX]).unwrap(),
        Literal::from_vec(&[2], vec![(1.0f64, 2.0f64), (-3.0, 0.5)]).unwrap(),
        Literal::from_vec(&[2], vec![(1.0f32, 2.0f32), (-3.0, 0.5)]).unwrap(),
        Literal::from_vec(&[4], vec![i64::MIN, -1, 0, i64::MAX]).unwrap(),
        Literal::from_vec(&[2, 0, 3], Vec::<u16>::new()).unwrap(),
        Literal::scalar(42u32),
        Literal::from_bits_vec(shape("s4[4]"), vec![0xF, 0x7, 0x8, 0x1]).unwrap(),
        Literal::from_bits_vec(shape("u4[3]{0:E(4)}"), vec![0xF, 0x7, 0x8]).unwrap(),
        Literal::from_bits_vec(shape("f8e4m3fn[2]"), vec![0x38, 0xC0]).unwrap(),
        // Stored tiled; the file holds logical C-order values all the same.
        Literal::from_vec(&[3, 5], (0..15).collect::<Vec<i32>>())
            .unwrap()
            .relayout(&Layout::new(&[1, 0]).with_tiles(&[&[2, 2]]))
            .unwrap(),
    ];
    for (i, lit) in cases.iter().enumerate() {
        let mut buf = Vec::new();
        write_npy_to(lit, &mut buf).unwrap();
        let back = read_npy_from(buf.as_slice(), lit.shape()).unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert_eq!(&back, lit, "case {i}");
        let path = temp(&format!("case{i}.npy"));
        write_npy(lit, &path).unwrap();
        assert_eq!(&read_npy(&path, lit.shape()).unwrap(), lit, "case {i} via file");
    }
    // Sub-byte signed values are written sign-extended into |i1.
    let mut buf = Vec::new();
    write_npy_to(&cases[9], &mut buf).unwrap();
    let as_i8 = read_npy_any_from(buf.as_slice()).unwrap();
    assert_eq!(as_i8.to_vec::<i8>().unwrap(), vec![-1, 7, -8, 1]);
    // An f16 may also arrive as <f2.
    let mut buf = Vec::new();
    write_npy_to(&Literal::from_vec(&[2], vec![7u16, 9]).unwrap(), &mut buf).unwrap();
    let h = read_npy_from(buf.as_slice(), &shape("f16[2]")).unwrap();
    assert_eq!(h.get_bits(1), Some(9));
}

#[test]
fn physical_round_trips() {
    for text in
        ["bf16[16,256]{1,0:T(8,128)(2,1)}", "pred[40,130]{1,0:T(32,128)(32,1)E(1)}", "s4[3,5]{0,1:T(2)E(4)L(8)}"]
    {
        let s = shape(text);
        let a = s.as_array().unwrap();
        let n = a.element_count().unwrap() as usize;
        let bits: Vec<u128> = (0..n as u128).map(|i| (i * 2_654_435_761) & 0x7FFF).collect();
        let lit = Literal::from_bits_vec(s.clone(), bits).unwrap();
        let path = temp("physical.npy");
        write_npy_physical(&lit, &path).unwrap();
        let back = read_npy_physical(&path, &s).unwrap();
        assert_eq!(back, lit, "{text}");
        assert_eq!(back.physical_bytes().unwrap(), lit.physical_bytes().unwrap());
        // Read logically, the file is a 1-D array of the physical length.
        let raw = read_npy_any(&path).unwrap();
        let map = lit.layout_map().unwrap();
        let want = if map.element_size_bits() >= 8 { map.physical_element_count() } else { map.physical_byte_size() };
        assert_eq!(raw.shape().dims(), &[want], "{text}");
    }
    // The bf16 file is <u2 and the pred one |u1, as DESIGN.md section 8 says.
    let bf = Literal::zeros(shape("bf16[16,256]{1,0:T(8,128)(2,1)}")).unwrap();
    let mut buf = Vec::new();
    write_npy_physical_to(&bf, &mut buf).unwrap();
    assert_eq!(read_npy_any_from(buf.as_slice()).unwrap().shape(), &shape("u16[4096]"));
    let p = Literal::zeros(shape("pred[40,130]{1,0:T(32,128)(32,1)E(1)}")).unwrap();
    let mut buf = Vec::new();
    write_npy_physical_to(&p, &mut buf).unwrap();
    assert_eq!(read_npy_any_from(buf.as_slice()).unwrap().shape(), &shape("u8[2048]"));
}

#[test]
fn physical_padding_is_ignored_and_lengths_checked() {
    let s = shape("f32[3,5]{1,0:T(2,2)}");
    let values: Vec<f32> = (0..15).map(|v| v as f32).collect();
    let lit = Literal::from_vec_with_shape(s.clone(), values.clone()).unwrap();
    let mut bytes = lit.physical_bytes().unwrap().to_vec();
    for slot in 0..24 {
        if lit.layout_map().unwrap().logical_index(slot).is_none() {
            bytes[slot as usize * 4..slot as usize * 4 + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        }
    }
    let noisy = Literal::from_physical_bytes(s.clone(), bytes).unwrap();
    let mut buf = Vec::new();
    write_npy_physical_to(&noisy, &mut buf).unwrap();
    let back = read_npy_physical_from(buf.as_slice(), &s).unwrap();
    assert_eq!(back.to_vec::<f32>().unwrap(), values);
    // A logical file is not a physical one: the length says so.
    let mut logical = Vec::new();
    write_npy_to(&lit, &mut logical).unwrap();
    let err = read_npy_physical_from(logical.as_slice(), &s).unwrap_err().to_string();
    assert!(err.contains("(24,)"), "{err}");
}

/// An npy v1.0 file with a hand-written header.
fn handmade(descr: &str, fortran: bool, dims: &str, data: &[u8]) -> Vec<u8> {
    let mut dict = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {dims}, }}",
        if fortran { "True" } else { "False" }
    );
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((dict.len() as u16).to_le_bytes());
    out.extend(dict.as_bytes());
    out.extend(data);
    out
}

#[test]
fn fortran_order_and_big_endian() {
    // [[1,2,3],[4,5,6]] in Fortran order is 1 4 2 5 3 6; big-endian i4.
    let data: Vec<u8> = [1i32, 4, 2, 5, 3, 6].iter().flat_map(|v| v.to_be_bytes()).collect();
    let file = handmade(">i4", true, "(2, 3)", &data);
    let lit = read_npy_any_from(file.as_slice()).unwrap();
    assert_eq!(lit.shape(), &shape("s32[2,3]"));
    assert_eq!(lit.to_vec::<i32>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    let tiled = read_npy_from(file.as_slice(), &shape("s32[2,3]{1,0:T(2,2)}")).unwrap();
    assert_eq!(tiled.to_vec::<i32>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    // Big-endian complex swaps each part.
    let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_be_bytes()).collect();
    let c = read_npy_any_from(handmade(">c8", false, "(1,)", &data).as_slice()).unwrap();
    assert_eq!(c.to_vec::<(f32, f32)>().unwrap(), vec![(1.0, 2.0)]);
}

#[test]
fn bad_files_are_errors() {
    assert!(matches!(read_npy_any_from(&b"not an npy file at all"[..]), Err(NpyError::Format(_))));
    assert!(matches!(read_npy_any_from(&b""[..]), Err(NpyError::Format(_))));
    let short = handmade("<f4", false, "(4,)", &[0; 8]);
    assert!(matches!(read_npy_any_from(short.as_slice()), Err(NpyError::Format(_))));
    let huge = handmade("<f4", false, "(4611686018427387904, 4)", &[]);
    assert!(read_npy_any_from(huge.as_slice()).is_err());
    assert!(read_npy_from(huge.as_slice(), &shape("f32[2]")).is_err());
    let text = handmade("<U3", false, "(1,)", &[0; 12]);
    assert!(matches!(read_npy_any_from(text.as_slice()), Err(NpyError::Unsupported(_))));
    let record = handmade("[('a', '<i4')]", false, "(1,)", &[0; 4]);
    assert!(read_npy_any_from(record.as_slice()).is_err());
    let tuple = Literal::tuple(vec![]);
    assert!(matches!(write_npy_to(&tuple, Vec::new()), Err(NpyError::Unsupported(_))));
    assert_eq!(
        read_npy_from(handmade("|b1", false, "(2,)", &[0, 3]).as_slice(), &shape("pred[2]")).unwrap().get_bits(1),
        Some(1)
    );
}
