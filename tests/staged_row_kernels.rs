//! Row kernels that stage values in their output (`emit::staging`): a masked softmax stages
//! its scaled, biased (ALiBi), masked scores (read by the max; too deep to compute again) and
//! then their exps (read by the sum) over them, each computed once. Both JIT tiers must agree
//! with each other bit for bit and with the interpreter within f32's tolerance, including
//! where the output reads a value after the buffer stopped holding it (it must compute it
//! again). Masked lanes hold -inf and finite fills far below `exp`'s range, whose 0 `exp`
//! selects without running its edge routine.

use tessera::{Backend, Client, CompileOptions};
use tessera_hlo::text::parse_module;
use tessera_hlo::Literal;
use tessera_lower::{lower_module, LowerOptions};

mod tier_support;
use tier_support::{args, compare};

/// Softmax over the last dimension of `f32[dims]` scores `x / scale` plus an ALiBi bias
/// (`(column - row) * -0.5`), masked to `fill` where the column passes the row (a causal mask;
/// `m` names the masked scores, `out` the softmax), and
/// `root` the entry's root instruction after its `=`.
fn masked_softmax(dims: &str, scale: &str, fill: &str, root: &str) -> String {
    let rank = dims.split(',').count();
    let (row, col) = (rank - 2, rank - 1);
    let keep: Vec<String> = (0..rank - 1).map(|d| d.to_string()).collect();
    format!(
        "HloModule masked_softmax\n\n\
         max_f32 {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(a, b)\n}}\n\n\
         add_f32 {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}}\n\n\
         ENTRY main {{\n  x = f32[{dims}] parameter(0)\n  c = f32[] constant({scale})\n  \
         cs = f32[{dims}] broadcast(c), dimensions={{}}\n  s = f32[{dims}] divide(x, cs)\n  \
         r = s32[{dims}] iota(), iota_dimension={row}\n  k = s32[{dims}] iota(), iota_dimension={col}\n  \
         keep = pred[{dims}] compare(k, r), direction=LE\n  rel = s32[{dims}] subtract(k, r)\n  \
         relf = f32[{dims}] convert(rel)\n  sl = f32[] constant(-0.5)\n  \
         sls = f32[{dims}] broadcast(sl), dimensions={{}}\n  bias = f32[{dims}] multiply(relf, sls)\n  \
         sb = f32[{dims}] add(s, bias)\n  f = f32[] constant({fill})\n  \
         fs = f32[{dims}] broadcast(f), dimensions={{}}\n  m = f32[{dims}] select(keep, sb, fs)\n  \
         ninf = f32[] constant(-inf)\n  mx = f32[{rows}] reduce(m, ninf), dimensions={{{col}}}, to_apply=max_f32\n  \
         mxb = f32[{dims}] broadcast(mx), dimensions={{{keep}}}\n  d = f32[{dims}] subtract(m, mxb)\n  \
         e = f32[{dims}] exponential(d)\n  zero = f32[] constant(0)\n  \
         sum = f32[{rows}] reduce(e, zero), dimensions={{{col}}}, to_apply=add_f32\n  \
         sumb = f32[{dims}] broadcast(sum), dimensions={{{keep}}}\n  out = f32[{dims}] divide(e, sumb)\n  \
         ROOT root = {root}\n}}\n",
        rows = dims.rsplit_once(',').unwrap().0,
        keep = keep.join(","),
    )
}

/// Whether some kernel of `text`'s program stages a chain: a lane reduction that loads its
/// output and stores it (a staged value loaded and the next one stored over it).
fn stages_a_chain(text: &str) -> bool {
    let module = parse_module(text).unwrap();
    let program = lower_module(&module, &LowerOptions::default()).unwrap();
    program.kernels.iter().any(tessera::differential::kernel_kinds::stages_a_chain)
}

/// Runs `text` on the interpreter and both tiers: the tiers bit for bit alike, and within f32's
/// tolerance of the interpreter.
fn check(text: &str, shape: &str) {
    let module = parse_module(text).unwrap();
    let params: Vec<_> = module.entry_comp().parameter_shapes();
    let inputs: Vec<Literal> = args(&params, 11);
    let run = |b: Backend| -> Vec<Literal> {
        let exe = Client::new(b).unwrap().compile_text(text, &CompileOptions::default()).unwrap();
        exe.run(&inputs).unwrap_or_else(|e| panic!("{b}: {e}"))
    };
    let want = run(Backend::Interp);
    let cl = run(Backend::Cranelift);
    let ll = run(Backend::Llvm);
    for (i, w) in want.iter().enumerate() {
        assert_eq!(cl[i].to_bits_vec().unwrap(), ll[i].to_bits_vec().unwrap(), "{shape}: result {i}: the tiers differ");
        compare(&cl[i], w).unwrap_or_else(|e| panic!("{shape}: result {i}: {e}"));
    }
}

#[test]
fn masked_softmax_stages_its_scores_then_their_exps() {
    for (dims, fill) in [("3,40,40", "-inf"), ("2,3,48,48", "-1e+30"), ("5,33,33", "-200")] {
        let text = masked_softmax(dims, "11.3137083", fill, &format!("f32[{dims}] copy(out)"));
        assert!(stages_a_chain(&text), "{dims}: no chain staged\n{text}");
        check(&text, dims);
    }
}

/// The output reads the masked scores after the sum's loop stored the exps over them: they
/// must be computed again, not loaded.
#[test]
fn a_value_the_buffer_no_longer_holds_is_computed_again() {
    let dims = "4,40,40";
    let text = masked_softmax(dims, "3", "-inf", &format!("f32[{dims}] add(out, m)"));
    assert!(stages_a_chain(&text), "no chain staged\n{text}");
    check(&text, dims);
}
