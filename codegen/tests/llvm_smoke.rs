#[path = "llvm_common/mod.rs"]
mod common;

use tessera_lower::kernel::*;

#[test]
fn fma_shape_kernel_computes() {
    let n = 4096;
    let mut b = KernelBuilder::new("muladd", 1);
    let f32m = MemType::Scalar(Ty::F32);
    let (a, bb, c, out) = (
        b.buffer("a", f32m, n, false),
        b.buffer("b", f32m, n, false),
        b.buffer("c", f32m, n, false),
        b.buffer("out", f32m, n, true),
    );
    let i = b.begin_loop(0, n);
    let x = b.load(a, IndexExpr::var(i, 1));
    let y = b.load(bb, IndexExpr::var(i, 1));
    let z = b.load(c, IndexExpr::var(i, 1));
    let m = b.binary(BinOp::Mul, Ty::F32, x, y);
    let s = b.binary(BinOp::Add, Ty::F32, m, z);
    b.store(out, IndexExpr::var(i, 1), s);
    b.end_loop_vectorized(16, Tail::None);
    let k = b.finish();
    let vals = |f: fn(usize) -> f32| (0..n as usize).flat_map(|i| f(i).to_le_bytes()).collect::<Vec<u8>>();
    let mut bufs =
        vec![vals(|i| i as f32 * 0.5), vals(|i| 3.0 - i as f32), vals(|i| (i % 7) as f32), vec![0; 4 * n as usize]];
    common::run(&k, &mut bufs);
    for i in 0..n as usize {
        let got = f32::from_le_bytes(bufs[3][4 * i..4 * i + 4].try_into().unwrap());
        let want = (i as f32 * 0.5) * (3.0 - i as f32) + (i % 7) as f32;
        assert_eq!(got.to_bits(), want.to_bits(), "element {i}");
    }
}
