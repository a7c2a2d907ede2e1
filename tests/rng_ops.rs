//! Random numbers on both JIT tiers against the interpreter, through the facade:
//! rng-bit-generator bit for bit (each algorithm, integer types, shapes, non-default and
//! tiled layouts), `rng` draws (uniform, normal) within float rounding, the seed option, and
//! the generator state starting afresh on every run.

use tessera::{Backend, Client, CompileOptions, LowerOptions};
use tessera_hlo::{Layout, Literal};

const TIERS: [Backend; 2] = [Backend::Cranelift, Backend::Llvm];

fn options(seed: u64) -> CompileOptions {
    CompileOptions { lower: LowerOptions { rng_seed: seed, ..LowerOptions::default() }, ..CompileOptions::default() }
}

fn run(backend: Backend, text: &str, args: &[Literal], seed: u64) -> Vec<Literal> {
    let exe = Client::new(backend)
        .unwrap()
        .compile_text(text, &options(seed))
        .unwrap_or_else(|e| panic!("{backend}: {e}\n{text}"));
    let out = exe.run(args).unwrap_or_else(|e| panic!("{backend}: {e}"));
    // A second run starts from the same generator state.
    assert_eq!(exe.run(args).unwrap(), out, "{backend}: a second run drew differently\n{text}");
    out
}

fn row_major(l: &Literal) -> Literal {
    let rank = l.array_shape().unwrap().rank();
    l.relayout(&Layout::row_major(rank)).unwrap()
}

fn same_bits(text: &str, args: &[Literal]) {
    let want = run(Backend::Interp, text, args, 0);
    for tier in TIERS {
        let got = run(tier, text, args, 0);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(row_major(g).to_bits_vec().unwrap(), row_major(w).to_bits_vec().unwrap(), "{tier}\n{text}");
        }
    }
}

fn close(text: &str, args: &[Literal], seed: u64) {
    let want = run(Backend::Interp, text, args, seed);
    for tier in TIERS {
        let got = run(tier, text, args, seed);
        for (g, w) in got.iter().zip(&want) {
            let g = tessera_hlo::corpus::tolerance::values(&row_major(g)).unwrap();
            let w = tessera_hlo::corpus::tolerance::values(&row_major(w)).unwrap();
            assert_eq!(g.len(), w.len());
            for (j, (a, b)) in g.iter().zip(&w).enumerate() {
                assert!((a - b).abs() <= 1e-6 + 1e-6 * b.abs(), "{tier} seed {seed} [{j}]: {a} vs {b}\n{text}");
            }
        }
    }
}

#[test]
fn bit_generator_on_both_tiers_matches_the_interpreter() {
    let outs =
        ["u32[7]{0}", "u32[5,3]{0,1}", "u32[4,6]{1,0:T(2,4)}", "u64[3,4]{0,1}", "s8[5,6]{1,0}", "u16[3,5,7]{0,2,1}"];
    for algorithm in ["rng_default", "rng_philox", "rng_three_fry"] {
        for (state_len, state) in [(2, vec![0xdead_beef_u64, u64::MAX - 3]), (3, vec![1, u64::MAX, 7])] {
            for out in outs {
                let text = format!(
                    "HloModule rbg\n\nENTRY e {{\n  s = u64[{state_len}]{{0}} parameter(0)\n  \
                     ROOT r = (u64[{state_len}]{{0}}, {out}) rng-bit-generator(s), algorithm={algorithm}\n}}\n"
                );
                same_bits(&text, &[Literal::from_vec(&[state_len], state.clone()).unwrap()]);
            }
        }
    }
}

#[test]
fn rng_draws_on_both_tiers_match_the_interpreter() {
    let text = "HloModule draws\n\nENTRY e {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  \
                x = f32[33,5]{0,1} rng(a, b), distribution=rng_uniform\n  \
                y = f32[3,7]{1,0} rng(a, b), distribution=rng_normal\n  \
                lo = s32[] constant(-50)\n  hi = s32[] constant(50)\n  \
                z = s32[17]{0} rng(lo, hi), distribution=rng_uniform\n  \
                st = u64[2]{0} rng-get-and-update-state(), delta=3\n  \
                m = f64[] constant(2)\n  sd = f64[] constant(0.5)\n  \
                w = f64[4,3]{0,1} rng(m, sd), distribution=rng_normal\n  \
                h0 = f16[] constant(-1)\n  h1 = f16[] constant(1)\n  \
                v = f16[9]{0} rng(h0, h1), distribution=rng_uniform\n  \
                ROOT t = (f32[33,5]{0,1}, f32[3,7]{1,0}, s32[17]{0}, u64[2]{0}, f64[4,3]{0,1}, f16[9]{0}) \
                tuple(x, y, z, st, w, v)\n}\n";
    let args = [Literal::scalar(-1.5f32), Literal::scalar(4.0f32)];
    for seed in [0, 7, u64::MAX] {
        close(text, &args, seed);
    }
}

#[test]
fn rng_bit_generator_states_chain_inside_one_run() {
    // The new state of one call seeds the next; both tiers must thread it the same way.
    let text = "HloModule chain\n\nENTRY e {\n  s = u64[3]{0} parameter(0)\n  \
                a = (u64[3]{0}, u64[6]{0}) rng-bit-generator(s), algorithm=rng_philox\n  \
                s1 = u64[3]{0} get-tuple-element(a), index=0\n  \
                b = (u64[3]{0}, u32[2,9]{1,0}) rng-bit-generator(s1), algorithm=rng_philox\n  \
                x = u64[6]{0} get-tuple-element(a), index=1\n  \
                ROOT t = (u64[6]{0}, (u64[3]{0}, u32[2,9]{1,0})) tuple(x, b)\n}\n";
    same_bits(text, &[Literal::from_vec(&[3], vec![3u64, u64::MAX - 1, 0]).unwrap()]);
}

#[test]
fn rng_inside_a_while_loop_advances_every_iteration() {
    // Each trip draws afresh from the one per-run generator, and the state of the last trip
    // is what the next run would start from; a loop nested in a conditional as well.
    let text = "HloModule looped\n\n\
                body {\n  p = (s32[], f32[4,3]{0,1}, u64[2]{0}) parameter(0)\n  \
                i = s32[] get-tuple-element(p), index=0\n  one = s32[] constant(1)\n  \
                n = s32[] add(i, one)\n  acc = f32[4,3]{0,1} get-tuple-element(p), index=1\n  \
                lo = f32[] constant(0)\n  hi = f32[] constant(1)\n  \
                d = f32[4,3]{0,1} rng(lo, hi), distribution=rng_uniform\n  \
                s = f32[4,3]{0,1} add(acc, d)\n  \
                st = u64[2]{0} rng-get-and-update-state(), delta=5\n  \
                ROOT t = (s32[], f32[4,3]{0,1}, u64[2]{0}) tuple(n, s, st)\n}\n\n\
                cond {\n  p = (s32[], f32[4,3]{0,1}, u64[2]{0}) parameter(0)\n  \
                i = s32[] get-tuple-element(p), index=0\n  k = s32[] constant(5)\n  \
                ROOT lt = pred[] compare(i, k), direction=LT\n}\n\n\
                ENTRY e {\n  z = s32[] constant(0)\n  a = f32[4,3]{0,1} parameter(0)\n  \
                s0 = u64[2]{0} constant({0, 0})\n  \
                init = (s32[], f32[4,3]{0,1}, u64[2]{0}) tuple(z, a, s0)\n  \
                w = (s32[], f32[4,3]{0,1}, u64[2]{0}) while(init), condition=cond, body=body\n  \
                sum = f32[4,3]{0,1} get-tuple-element(w), index=1\n  \
                last = u64[2]{0} get-tuple-element(w), index=2\n  \
                lo = f32[] constant(0)\n  hi = f32[] constant(1)\n  \
                after = f32[2]{0} rng(lo, hi), distribution=rng_uniform\n  \
                ROOT t = (f32[4,3]{0,1}, u64[2]{0}, f32[2]{0}) tuple(sum, last, after)\n}\n";
    let args = [Literal::from_vec(&[4, 3], (0..12).map(|i| i as f32).collect()).unwrap()];
    for seed in [0, 42] {
        close(text, &args, seed);
    }
    // Beyond agreeing with the interpreter: five trips of draws in [0, 1) moved the sums off
    // the arguments by less than five, and the loop's state reads saw a started generator.
    let out = run(Backend::Cranelift, text, &args, 1);
    let sum = tessera_hlo::corpus::tolerance::values(&row_major(&out[0])).unwrap();
    let base = tessera_hlo::corpus::tolerance::values(&row_major(&args[0])).unwrap();
    assert!(sum.iter().zip(&base).all(|(s, b)| s - b > 0.0 && s - b < 5.0), "{sum:?}");
    let states: Vec<u64> = row_major(&out[1]).to_bits_vec().unwrap().iter().map(|&b| b as u64).collect();
    assert_ne!(states, vec![0, 0], "the loop never advanced the generator state");
}
