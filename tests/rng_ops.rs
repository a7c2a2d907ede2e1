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
