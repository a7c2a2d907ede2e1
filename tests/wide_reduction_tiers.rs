//! Column reductions over long rows, which `tree_reduction` splits into blocks of whole rows
//! (viewed through a reshape) and the column form sweeps a block per grid index: both JIT tiers
//! bit for bit against each other, and every backend's results against sums computed here
//! (exactly for integers, which wrap; within a few f32 roundings of the f64 sum for floats,
//! since the compiled tiers round each block's partial sum, where the interpreter, which runs
//! no such pass, rounds each column's sum once).

use tessera::{Backend, Client, CompileOptions};
use tessera_hlo::{Literal, Shape};

mod tier_support;
use tier_support::args;

fn module(et: &str, dims: &[usize], reduced: &[usize], op: &str, init: &str) -> String {
    let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let kept: Vec<usize> = (0..dims.len()).filter(|d| !reduced.contains(d)).map(|d| dims[d]).collect();
    let layout = |n: usize| (0..n).rev().map(|d| d.to_string()).collect::<Vec<_>>().join(",");
    let (i, o) = (
        format!("{et}[{}]{{{}}}", list(dims), layout(dims.len())),
        format!("{et}[{}]{{{}}}", list(&kept), layout(kept.len())),
    );
    format!(
        "HloModule wide, entry_computation_layout={{({i})->{o}}}\n\nr {{\n  a = {et}[] parameter(0)\n  \
         b = {et}[] parameter(1)\n  ROOT c = {et}[] {op}(a, b)\n}}\n\nENTRY main {{\n  x = {i} parameter(0)\n  \
         z = {et}[] constant({init})\n  ROOT s = {o} reduce(x, z), dimensions={{{}}}, to_apply=r\n}}\n",
        list(reduced)
    )
}

/// Runs `text` with a seeded argument of `shape` on the interpreter and both JIT tiers, which
/// must agree bit for bit; returns the argument's bits and each backend's result bits.
fn run(text: &str, shape: &str) -> (Vec<u128>, Vec<Vec<u128>>) {
    let shape: Shape = shape.parse().unwrap();
    let x: Literal = args(&[shape], 5).remove(0);
    let outs: Vec<Vec<u128>> = [Backend::Interp, Backend::Cranelift, Backend::Llvm]
        .into_iter()
        .map(|b| {
            let exe = Client::new(b).unwrap().compile_text(text, &CompileOptions::default()).unwrap();
            exe.run(std::slice::from_ref(&x)).unwrap().remove(0).to_bits_vec().unwrap()
        })
        .collect();
    assert_eq!(outs[1], outs[2], "Cranelift and LLVM differ\n{text}");
    (x.to_bits_vec().unwrap(), outs)
}

#[test]
fn f32_column_sums_over_blocks_of_rows() {
    for (dims, reduced) in [(vec![2048, 1024], vec![0]), (vec![16, 256, 516], vec![0, 1])] {
        let text = module("f32", &dims, &reduced, "add", "0");
        let (x, outs) =
            run(&text, &format!("f32[{}]", dims.iter().map(usize::to_string).collect::<Vec<_>>().join(",")));
        let row = *dims.last().unwrap();
        let rows = x.len() / row;
        for (j, &got) in outs.iter().flatten().enumerate() {
            let j = j % row;
            let exact: f64 = (0..rows).map(|r| f64::from(f32::from_bits(x[r * row + j] as u32))).sum();
            let abs: f64 = (0..rows).map(|r| f64::from(f32::from_bits(x[r * row + j] as u32)).abs()).sum();
            let got = f64::from(f32::from_bits(got as u32));
            // Each block's partial rounds once to f32, then the partials' sum once more.
            assert!((got - exact).abs() <= abs * 2f64.powi(-22), "column {j}: {got} against {exact}\n{text}");
        }
    }
}

#[test]
fn integer_sums_and_maxima_over_blocks_of_rows() {
    let dims = [4096, 512];
    let text = module("s32", &dims, &[0], "add", "0");
    let (x, outs) = run(&text, "s32[4096,512]");
    for (j, &got) in outs.iter().flatten().enumerate() {
        let j = j % 512;
        let sum = (0..4096).fold(0u32, |s, r| s.wrapping_add(x[r * 512 + j] as u32));
        assert_eq!(got as u32, sum, "column {j}");
    }
    let text = module("s32", &dims, &[0], "maximum", "-2147483648");
    let (x, outs) = run(&text, "s32[4096,512]");
    for (j, &got) in outs.iter().flatten().enumerate() {
        let j = j % 512;
        let max = (0..4096).map(|r| x[r * 512 + j] as u32 as i32).max().unwrap();
        assert_eq!(got as u32 as i32, max, "column {j}");
    }
}
