#[path = "llvm_common/mod.rs"]
mod common;

#[test]
fn fma_shape_kernel_computes() {
    let n = 4096;
    let k = common::muladd(n);
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
