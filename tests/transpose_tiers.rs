//! Transposes and relayouts large enough that the lowering walks them in blocks
//! (`emit::transposed`), whose 32-bit rows the LLVM tier moves through registers
//! (`llvm/transpose.rs`): both JIT tiers against the interpreter bit for bit, and the
//! interpreter against the permutation itself. The shapes leave partial blocks at every edge
//! (1000 = 62 x 16 + 8 lanes, 67 rows: eight blocks of 8 and 3 more), read permuted operands
//! through elementwise ops and broadcasts, and cover s32, f64, bf16 and s8 elements,
//! three-dimensional permutations, a column-major parameter read in row order, and a tiled
//! layout.

use tessera_hlo::{Literal, Shape};

mod tier_support;
use tier_support::{agree, args};

/// The logical index of element `k` of `dims` (row-major order), per dimension.
fn unflatten(mut k: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        idx[d] = k % dims[d];
        k /= dims[d];
    }
    idx
}

fn flatten(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &n)| acc * n + i)
}

/// Runs a module whose one result is `transpose(x, perm)` on every tier and checks it against
/// the permutation of `x`'s bits.
fn check_transpose(text: &str, x_shape: &str, perm: &[usize]) {
    let shape: Shape = x_shape.parse().unwrap();
    let x = args(&[shape], 7).remove(0);
    let out = agree(text, std::slice::from_ref(&x)).remove(0);
    let in_dims: Vec<usize> = x.shape().as_array().unwrap().dims.iter().map(|&d| d as usize).collect();
    let out_dims: Vec<usize> = perm.iter().map(|&p| in_dims[p]).collect();
    let (xb, ob) = (x.to_bits_vec().unwrap(), out.to_bits_vec().unwrap());
    assert_eq!(ob.len(), xb.len());
    for (k, &got) in ob.iter().enumerate() {
        let o = unflatten(k, &out_dims);
        let mut i = vec![0; in_dims.len()];
        for (d, &p) in perm.iter().enumerate() {
            i[p] = o[d];
        }
        assert_eq!(got, xb[flatten(&i, &in_dims)], "element {o:?} of\n{text}");
    }
}

fn transpose_module(et: &str, in_dims: &[usize], in_layout: &str, perm: &[usize], out_layout: &str) -> String {
    let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let out_dims: Vec<usize> = perm.iter().map(|&p| in_dims[p]).collect();
    let (i, o) = (format!("{et}[{}]{in_layout}", list(in_dims)), format!("{et}[{}]{out_layout}", list(&out_dims)));
    format!(
        "HloModule t, entry_computation_layout={{({i})->{o}}}\n\nENTRY main {{\n  x = {i} parameter(0)\n  \
         ROOT t = {o} transpose(x), dimensions={{{}}}\n}}\n",
        list(perm)
    )
}

#[test]
fn two_dimensional_transposes_with_partial_blocks() {
    for et in ["f32", "s32", "f64", "bf16", "s8"] {
        let text = transpose_module(et, &[1000, 67], "{1,0}", &[1, 0], "{1,0}");
        check_transpose(&text, &format!("{et}[1000,67]{{1,0}}"), &[1, 0]);
        let text = transpose_module(et, &[67, 1000], "{1,0}", &[1, 0], "{1,0}");
        check_transpose(&text, &format!("{et}[67,1000]{{1,0}}"), &[1, 0]);
    }
}

#[test]
fn three_dimensional_permutations() {
    for perm in [[0, 2, 1], [2, 1, 0], [1, 2, 0], [2, 0, 1]] {
        let text = transpose_module("f32", &[5, 130, 70], "{2,1,0}", &perm, "{2,1,0}");
        check_transpose(&text, "f32[5,130,70]{2,1,0}", &perm);
    }
}

#[test]
fn tiled_and_column_major_layouts() {
    let text = transpose_module("f32", &[200, 300], "{1,0:T(8,128)}", &[1, 0], "{1,0:T(8,128)}");
    check_transpose(&text, "f32[200,300]{1,0:T(8,128)}", &[1, 0]);
    // A relayout: the same logical array, column-major in, row-major out.
    let text = "HloModule c, entry_computation_layout={(f32[300,90]{0,1})->f32[300,90]{1,0}}\n\nENTRY main {\n  \
                x = f32[300,90]{0,1} parameter(0)\n  ROOT c = f32[300,90]{1,0} copy(x)\n}\n";
    check_transpose(text, "f32[300,90]{0,1}", &[0, 1]);
}

#[test]
fn transposed_reads_inside_elementwise_fusions() {
    // A transposed operand beside a row-major one and a broadcast row: every output element
    // is the sum of the three, read in blocks.
    let text = "HloModule f, entry_computation_layout={(f32[90,1000]{1,0}, f32[1000,90]{1,0}, f32[90]{0})->f32[1000,90]{1,0}}\n\n\
                ENTRY main {\n  x = f32[90,1000]{1,0} parameter(0)\n  y = f32[1000,90]{1,0} parameter(1)\n  \
                b = f32[90]{0} parameter(2)\n  t = f32[1000,90]{1,0} transpose(x), dimensions={1,0}\n  \
                bb = f32[1000,90]{1,0} broadcast(b), dimensions={1}\n  s = f32[1000,90]{1,0} add(t, y)\n  \
                ROOT r = f32[1000,90]{1,0} multiply(s, bb)\n}\n";
    let shapes: Vec<Shape> =
        ["f32[90,1000]{1,0}", "f32[1000,90]{1,0}", "f32[90]{0}"].iter().map(|s| s.parse().unwrap()).collect();
    let a: Vec<Literal> = args(&shapes, 11);
    let out = agree(text, &a).remove(0);
    let [x, y, b] = [0, 1, 2].map(|i| a[i].to_bits_vec().unwrap());
    let f = |v: u128| f32::from_bits(v as u32);
    for (k, &got) in out.to_bits_vec().unwrap().iter().enumerate() {
        let (i, j) = (k / 90, k % 90);
        let want = (f(x[j * 1000 + i]) + f(y[k])) * f(b[j]);
        assert_eq!(f(got).to_bits(), want.to_bits(), "element ({i}, {j})");
    }
}
