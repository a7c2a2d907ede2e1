//! Loads and stores of every memory type (scalars, predicates, packed sub-byte elements) at
//! index expressions with offsets, divisions, remainders and data-dependent sources.

mod common;

use common::*;
use tessera_lower::kernel::*;

fn term(src: IndexSrc, div: i64, modulo: Option<i64>, scale: i64) -> Term {
    Term { src, div, modulo, scale }
}

#[test]
fn scalar_copies_of_every_type_with_offsets() {
    for ty in [Ty::I8, Ty::I16, Ty::I32, Ty::I64, Ty::F32, Ty::F64] {
        let n = 10i64;
        let mut k = KernelBuilder::new("copy", n);
        let a = k.buffer("a", MemType::Scalar(ty), n + 3, false);
        let out = k.buffer("out", MemType::Scalar(ty), n + 1, true);
        let g = k.grid_var();
        // out[g + 1] = a[2 + (n - 1 - g)]: an offset and a negative scale.
        let x = k.load(a, IndexExpr { terms: vec![term(IndexSrc::Var(g), 1, None, -1)], offset: 2 + n - 1 });
        k.store(out, IndexExpr { terms: vec![term(IndexSrc::Var(g), 1, None, 1)], offset: 1 }, x);
        let input: Vec<u64> = (0..n as u64 + 3).map(|i| i.wrapping_mul(0x0123_4567_89ab_cdef) ^ 0xfedc).collect();
        let mut bufs = vec![encode(ty, &input), vec![0xab; (n as usize + 1) * bytes(ty)]];
        run(&k.finish(), &mut bufs);
        let got = decode(ty, &bufs[1]);
        assert_eq!(got[0], mask(ty, 0xabab_abab_abab_abab), "{ty:?}: element 0 is not written");
        for g in 0..n as usize {
            assert_eq!(got[g + 1], mask(ty, input[2 + n as usize - 1 - g]), "{ty:?} at {g}");
        }
    }
}

#[test]
fn predicates_read_any_nonzero_byte_as_true_and_store_zero_or_one() {
    let input = [0u8, 1, 2, 0x80, 0xff, 0];
    let n = input.len() as i64;
    let mut k = KernelBuilder::new("pred", n);
    let a = k.buffer("a", MemType::Pred, n, false);
    let out = k.buffer("out", MemType::Pred, n, true);
    let as_int = k.buffer("int", MemType::Scalar(Ty::I32), n, true);
    let g = k.grid_var();
    let p = k.load(a, IndexExpr::var(g, 1));
    k.store(out, IndexExpr::var(g, 1), p);
    let z = k.cast(CastOp::ZExt, Ty::Pred, Ty::I32, p);
    k.store(as_int, IndexExpr::var(g, 1), z);
    let mut bufs = vec![input.to_vec(), vec![7; input.len()], vec![0; input.len() * 4]];
    run(&k.finish(), &mut bufs);
    let expect: Vec<u8> = input.iter().map(|&b| u8::from(b != 0)).collect();
    assert_eq!(bufs[1], expect);
    assert_eq!(decode(Ty::I32, &bufs[2]), expect.iter().map(|&b| u64::from(b)).collect::<Vec<_>>());
}

fn packed_get(data: &[u8], bits: u32, i: usize) -> u8 {
    let per = 8 / bits as usize;
    (data[i / per] >> ((i % per) as u32 * bits)) & ((1u16 << bits) - 1) as u8
}

#[test]
fn packed_loads_and_read_modify_write_stores() {
    for bits in [1u8, 2, 4] {
        for pred in [false, true] {
            let per = 8 / bits as i64;
            let n = 3 * per + 1; // a partial last byte
            let nbytes = ((n + per - 1) / per) as usize;
            let mem = MemType::Packed { bits, pred };
            let mut k = KernelBuilder::new("packed", n);
            let a = k.buffer("a", mem, n, false);
            let out = k.buffer("out", mem, n, true);
            let wide = k.buffer("wide", MemType::Scalar(Ty::I8), n, true);
            let g = k.grid_var();
            // out[g] = a[n - 1 - g] (reversed, so elements move between bytes and bit positions).
            let x = k.load(a, IndexExpr { terms: vec![term(IndexSrc::Var(g), 1, None, -1)], offset: n - 1 });
            let store_v = if pred {
                k.store(out, IndexExpr::var(g, 1), x);
                k.cast(CastOp::ZExt, Ty::Pred, Ty::I8, x)
            } else {
                // Stores keep only the element's bits, whatever the register holds above them.
                let junk = k.constant(Const::Int { ty: Ty::I8, bits: 0xf0u8 as i8 as i64 & !((1 << bits) - 1) });
                let dirty = k.binary(BinOp::Or, Ty::I8, x, junk);
                k.store(out, IndexExpr::var(g, 1), dirty);
                x
            };
            k.store(wide, IndexExpr::var(g, 1), store_v);
            let kernel = k.finish();
            let input: Vec<u8> = (0..nbytes).map(|i| (i as u8).wrapping_mul(0x9d) ^ 0x5b).collect();
            // The output's bits past element n-1 must survive the read-modify-write stores.
            let mut bufs = vec![input.clone(), vec![0xa5; nbytes], vec![0; n as usize]];
            run(&kernel, &mut bufs);
            for g in 0..n as usize {
                let e = packed_get(&input, u32::from(bits), n as usize - 1 - g);
                let e = if pred { u8::from(e != 0) } else { e };
                assert_eq!(bufs[2][g], e, "bits {bits} pred {pred}: loaded element {g}");
                let stored = packed_get(&bufs[1], u32::from(bits), g);
                assert_eq!(stored != 0, e != 0, "bits {bits} pred {pred}: stored element {g}");
                if !pred {
                    assert_eq!(stored, e, "bits {bits}: stored element {g}");
                }
            }
            for i in n as usize..nbytes * per as usize {
                assert_eq!(
                    packed_get(&bufs[1], u32::from(bits), i),
                    packed_get(&[0xa5; 8], u32::from(bits), i % per as usize)
                );
            }
        }
    }
}

#[test]
fn division_and_remainder_terms_powers_of_two_and_others() {
    // out[g] = a[((g / d) % m) * s + (g % m2)] for several d, m.
    for (d, m, s, m2) in
        [(1, Some(4), 3, 2), (2, Some(3), 5, 4), (3, None, 2, 3), (4, Some(8), 1, 5), (6, Some(5), 7, 1)]
    {
        let n = 97i64;
        let mut k = KernelBuilder::new("divmod", n);
        let a = k.buffer("a", MemType::Scalar(Ty::I32), 1000, false);
        let out = k.buffer("out", MemType::Scalar(Ty::I32), n, true);
        let idx = k.buffer("idx", MemType::Scalar(Ty::I64), n, true);
        let g = k.grid_var();
        let e = IndexExpr {
            terms: vec![term(IndexSrc::Var(g), d, m, s), term(IndexSrc::Var(g), 1, Some(m2), 1)],
            offset: 3,
        };
        let x = k.load(a, e.clone());
        k.store(out, IndexExpr::var(g, 1), x);
        let i = k.let_(Op::Index(e));
        k.store(idx, IndexExpr::var(g, 1), i);
        let input: Vec<u64> = (0..1000).map(|i| i * 7 + 1).collect();
        let mut bufs = vec![encode(Ty::I32, &input), vec![0; n as usize * 4], vec![0; n as usize * 8]];
        run(&k.finish(), &mut bufs);
        let got = decode(Ty::I32, &bufs[1]);
        let got_idx = decode(Ty::I64, &bufs[2]);
        for g in 0..n {
            let q = g / d;
            let q = m.map_or(q, |m| q % m);
            let at = (q * s + g % m2 + 3) as usize;
            assert_eq!(got_idx[g as usize], at as u64, "d {d} m {m:?} s {s} m2 {m2} at {g}");
            assert_eq!(got[g as usize], input[at], "d {d} m {m:?} s {s} m2 {m2} at {g}");
        }
    }
}

#[test]
fn data_dependent_indices() {
    // A gather: out[g] = table[ids[g] / 2 + ids[g] % 3] with loaded i32 ids widened to i64.
    let ids = [5u64, 0, 9, 3, 3, 14, 1];
    let n = ids.len() as i64;
    let mut k = KernelBuilder::new("gather", n);
    let table = k.buffer("table", MemType::Scalar(Ty::F64), 16, false);
    let idb = k.buffer("ids", MemType::Scalar(Ty::I32), n, false);
    let out = k.buffer("out", MemType::Scalar(Ty::F64), n, true);
    let g = k.grid_var();
    let id = k.load(idb, IndexExpr::var(g, 1));
    let id = k.cast(CastOp::ZExt, Ty::I32, Ty::I64, id);
    let x = k.load(
        table,
        IndexExpr {
            terms: vec![term(IndexSrc::Value(id), 2, None, 1), term(IndexSrc::Value(id), 1, Some(3), 1)],
            offset: 0,
        },
    );
    k.store(out, IndexExpr::var(g, 1), x);
    let t: Vec<u64> = (0..16).map(|i| (i as f64 * 1.5).to_bits()).collect();
    let mut bufs = vec![encode(Ty::F64, &t), encode(Ty::I32, &ids), vec![0; ids.len() * 8]];
    run(&k.finish(), &mut bufs);
    let got = decode(Ty::F64, &bufs[2]);
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(got[i], t[(id / 2 + id % 3) as usize], "at {i}");
    }
}

#[test]
fn index_sources_must_be_i64_and_defined() {
    let mut k = KernelBuilder::new("bad_src", 1);
    let a = k.buffer("a", MemType::Scalar(Ty::I32), 4, false);
    let v = k.constant(Const::Int { ty: Ty::I32, bits: 1 });
    let x = k.load(a, IndexExpr { terms: vec![term(IndexSrc::Value(v), 1, None, 1)], offset: 0 });
    k.store(a, IndexExpr::constant(0), x);
    let e = compile_err(&k.finish());
    assert!(matches!(&e, tessera_codegen::CodegenError::Backend { message, .. } if message.contains("I64")), "{e}");

    let mut k = KernelBuilder::new("undefined", 1);
    let a = k.buffer("a", MemType::Scalar(Ty::I32), 4, false);
    let x = k.load(a, IndexExpr { terms: vec![term(IndexSrc::Value(ValueId(99)), 1, None, 1)], offset: 0 });
    k.store(a, IndexExpr::constant(0), x);
    let e = compile_err(&k.finish());
    assert!(matches!(&e, tessera_codegen::CodegenError::Backend { message, .. } if message.contains("%99")), "{e}");
}

#[test]
fn bad_packed_widths_and_missing_buffers_are_errors() {
    let mut k = KernelBuilder::new("bits3", 1);
    let a = k.buffer("a", MemType::Packed { bits: 3, pred: false }, 8, false);
    let x = k.load(a, IndexExpr::constant(0));
    k.store(a, IndexExpr::constant(1), x);
    let e = compile_err(&k.finish());
    assert!(matches!(&e, tessera_codegen::CodegenError::Unsupported { what, .. } if what.contains("3 bits")), "{e}");

    let mut k = KernelBuilder::new("nobuf", 1);
    let a = k.buffer("a", MemType::Scalar(Ty::I8), 8, false);
    let x = k.load(a, IndexExpr::constant(0));
    k.push(Stmt::Store { buf: BufId(5), index: IndexExpr::constant(0), mem: MemType::Scalar(Ty::I8), value: x });
    let e = compile_err(&k.finish());
    assert!(
        matches!(&e, tessera_codegen::CodegenError::Backend { message, .. } if message.contains("buffer 5")),
        "{e}"
    );
}
