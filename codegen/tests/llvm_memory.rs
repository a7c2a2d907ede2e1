//! Loads and stores of every memory type: predicates as bytes, packed sub-byte elements
//! (read-modify-write stores that keep neighbours), and grids split across calls.

#[path = "llvm_common/mod.rs"]
mod common;

use tessera_lower::kernel::*;
use tessera_testkit::Rng;

/// Bytes that exercise every bit position.
fn garbage(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| (rng.next_u64() >> 56) as u8).collect()
}

/// Element `i` of a packed buffer.
fn packed_get(buf: &[u8], bits: u8, i: usize) -> u8 {
    let per = 8 / bits as usize;
    (buf[i / per] >> ((i % per) * bits as usize)) & ((1u16 << bits) - 1) as u8
}

fn packed_set(buf: &mut [u8], bits: u8, i: usize, v: u8) {
    let per = 8 / bits as usize;
    let shift = (i % per) * bits as usize;
    let mask = (((1u16 << bits) - 1) as u8) << shift;
    buf[i / per] = (buf[i / per] & !mask) | ((v << shift) & mask);
}

#[test]
fn predicate_bytes_load_as_nonzero_and_store_as_zero_or_one() {
    let input = vec![0u8, 1, 2, 0x80, 0xff, 0, 7, 0];
    let mut b = KernelBuilder::new("pbytes", 1);
    let src = b.buffer("raw", MemType::Pred, 8, false);
    let dst = b.buffer("out", MemType::Pred, 8, true);
    let i = b.begin_loop(0, 8);
    let p = b.load(src, IndexExpr::var(i, 1));
    let q = b.unary(UnOp::Not, Ty::Pred, p);
    b.store(dst, IndexExpr::var(i, 1), q);
    b.end_loop();
    let mut bufs = vec![input.clone(), vec![0x55; 8]];
    common::run(&b.finish(), &mut bufs);
    let want: Vec<u8> = input.iter().map(|&x| u8::from(x == 0)).collect();
    assert_eq!(bufs[1], want);
}

#[test]
fn packed_loads() {
    for bits in [1u8, 2, 4] {
        for pred in [false, true] {
            let n = 200usize;
            let bytes = n * bits as usize / 8;
            let input = garbage(bytes, u64::from(bits) * 2 + u64::from(pred));
            let mut b = KernelBuilder::new("unpack", 1);
            let src = b.buffer("packed", MemType::Packed { bits, pred }, n as i64, false);
            let dst = b.buffer("out", MemType::Scalar(Ty::I8), n as i64, true);
            let i = b.begin_loop(0, n as i64);
            let v = b.load(src, IndexExpr::var(i, 1));
            let v = if pred { b.cast(CastOp::ZExt, Ty::Pred, Ty::I8, v) } else { v };
            b.store(dst, IndexExpr::var(i, 1), v);
            b.end_loop_vectorized(16, Tail::Peel);
            let mut bufs = vec![input.clone(), vec![0xEE; n]];
            common::run(&b.finish(), &mut bufs);
            let want: Vec<u8> = (0..n)
                .map(|i| {
                    let e = packed_get(&input, bits, i);
                    if pred {
                        u8::from(e != 0)
                    } else {
                        e
                    }
                })
                .collect();
            assert_eq!(bufs[1], want, "bits {bits} pred {pred}");
        }
    }
}

#[test]
fn packed_stores_replace_only_their_bits() {
    for bits in [1u8, 2, 4] {
        for pred in [false, true] {
            let n = 240usize;
            let bytes = n * bits as usize / 8;
            let values = garbage(n, 99 + u64::from(bits));
            let before = garbage(bytes, 7 + u64::from(bits));
            // Stores every third element, so each byte keeps some of its old bits.
            let mut b = KernelBuilder::new("pack", 1);
            let src = b.buffer("values", MemType::Scalar(Ty::I8), n as i64, false);
            let dst = b.buffer("packed", MemType::Packed { bits, pred }, n as i64, true);
            let i = b.begin_loop(0, (n / 3) as i64);
            let v = b.load(src, IndexExpr::var(i, 3));
            let v = if pred {
                // Bit 0 of the value, as the predicate to store.
                b.cast(CastOp::Trunc, Ty::I8, Ty::Pred, v)
            } else {
                v
            };
            b.store(dst, IndexExpr::var(i, 3), v);
            b.end_loop();
            let mut bufs = vec![values.clone(), before.clone()];
            common::run(&b.finish(), &mut bufs);
            let mut want = before.clone();
            for k in 0..n / 3 {
                let v = values[3 * k];
                // Values wider than the element keep only their low bits.
                packed_set(&mut want, bits, 3 * k, if pred { v & 1 } else { v });
            }
            assert_eq!(bufs[1], want, "bits {bits} pred {pred}");
        }
    }
}

/// `out[g] = in[g] * 3 + g` per grid index, run in pieces.
#[test]
fn grid_ranges_split_the_work() {
    let n = 37i64;
    let mut b = KernelBuilder::new("grid", n);
    let g = b.grid_var();
    let src = b.buffer("in", MemType::Scalar(Ty::I32), n, false);
    let dst = b.buffer("out", MemType::Scalar(Ty::I32), n, true);
    let x = b.load(src, IndexExpr::var(g, 1));
    let three = b.constant(Const::Int { ty: Ty::I32, bits: 3 });
    let y = b.binary(BinOp::Mul, Ty::I32, x, three);
    let gi = b.let_(Op::Index(IndexExpr::var(g, 1)));
    let g32 = b.cast(CastOp::Trunc, Ty::I64, Ty::I32, gi);
    let z = b.binary(BinOp::Add, Ty::I32, y, g32);
    b.store(dst, IndexExpr::var(g, 1), z);
    let kernel = b.finish();
    let input: Vec<u8> = (0..n as i32).flat_map(|i| (i * 1000 - 7).to_le_bytes()).collect();
    let want: Vec<u8> = (0..n as i32).flat_map(|i| ((i * 1000 - 7) * 3 + i).to_le_bytes()).collect();
    let compiled = common::compile(&[kernel]);
    for ranges in [vec![(0, n)], vec![(0, 5), (5, 6), (6, 30), (30, n)], vec![(20, n), (0, 20)]] {
        let mut bufs = vec![input.clone(), vec![0; 4 * n as usize]];
        common::call(compiled.functions[0], &mut bufs, &ranges);
        assert_eq!(bufs[1], want, "ranges {ranges:?}");
    }
    // An empty range runs nothing.
    let mut bufs = vec![input.clone(), vec![0; 4 * n as usize]];
    common::call(compiled.functions[0], &mut bufs, &[(3, 3), (9, 2)]);
    assert!(bufs[1].iter().all(|&b| b == 0));
}

/// Each grid index owns whole bytes of a packed output: the split the lowering guarantees.
#[test]
fn packed_stores_under_a_split_grid() {
    let bits = 2u8;
    let per = 4i64;
    let bytes = 16i64;
    let n = bytes * per;
    let mut b = KernelBuilder::new("gpack", bytes);
    let g = b.grid_var();
    let src = b.buffer("in", MemType::Scalar(Ty::I8), n, false);
    let dst = b.buffer("out", MemType::Packed { bits, pred: false }, n, true);
    let i = b.begin_loop(0, per);
    let idx = IndexExpr {
        terms: IndexExpr::var(g, per).terms.into_iter().chain(IndexExpr::var(i, 1).terms).collect(),
        offset: 0,
    };
    let v = b.load(src, idx.clone());
    b.store(dst, idx, v);
    b.end_loop();
    let compiled = common::compile(&[b.finish()]);
    let input = garbage(n as usize, 5);
    let mut bufs = vec![input.clone(), vec![0xFF; bytes as usize]];
    common::call(compiled.functions[0], &mut bufs, &[(0, 7), (7, bytes)]);
    let mut want = vec![0xFF; bytes as usize];
    for (k, v) in input.iter().enumerate() {
        packed_set(&mut want, bits, k, *v);
    }
    assert_eq!(bufs[1], want);
}

#[test]
fn scalar_loads_and_stores_of_every_width() {
    for ty in [Ty::I8, Ty::I16, Ty::I32, Ty::I64, Ty::F32, Ty::F64] {
        let w = common::values::bytes(ty);
        let n = 33usize;
        let input = garbage(n * w, w as u64);
        // Reversed copy: out[i] = in[n - 1 - i].
        let mut b = KernelBuilder::new("rev", 1);
        let src = b.buffer("in", MemType::Scalar(ty), n as i64, false);
        let dst = b.buffer("out", MemType::Scalar(ty), n as i64, true);
        let i = b.begin_loop(0, n as i64);
        let v = b.load(src, IndexExpr { terms: IndexExpr::var(i, -1).terms, offset: n as i64 - 1 });
        b.store(dst, IndexExpr::var(i, 1), v);
        b.end_loop_vectorized(8, Tail::Peel);
        let mut bufs = vec![input.clone(), vec![0; n * w]];
        common::run(&b.finish(), &mut bufs);
        let want: Vec<u8> = input.chunks(w).rev().flatten().copied().collect();
        // Bytes, so float NaN payloads must survive a load and a store.
        assert_eq!(bufs[1], want, "{ty:?}");
    }
}
