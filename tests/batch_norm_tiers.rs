//! batch-norm-training, -inference and -grad (expanded into reduces and elementwise ops by
//! the lowering) on both JIT tiers against the interpreter: every feature_index, non-default
//! layouts, and the half and f64 types.

mod window_support;

use window_support::{check_tiers, Values};

fn all_three(ty: &str, dims: &str, layout: &str, feature: usize, features: i64) -> String {
    let x = format!("{ty}{dims}{layout}");
    let f = format!("{ty}[{features}]{{0}}");
    format!(
        "HloModule m\nENTRY e {{\n  x = {x} parameter(0)\n  scale = {f} parameter(1)\n  offset = {f} parameter(2)\n  mean = {f} parameter(3)\n  var = {f} parameter(4)\n  dy = {x} parameter(5)\n  bni = {x} batch-norm-inference(x, scale, offset, mean, var), epsilon=0.001, feature_index={feature}\n  tr = ({x}, {f}, {f}) batch-norm-training(x, scale, offset), epsilon=0.01, feature_index={feature}\n  y = {x} get-tuple-element(tr), index=0\n  bm = {f} get-tuple-element(tr), index=1\n  bv = {f} get-tuple-element(tr), index=2\n  gr = ({x}, {f}, {f}) batch-norm-grad(x, scale, bm, bv, dy), epsilon=0.001, feature_index={feature}\n  gx = {x} get-tuple-element(gr), index=0\n  gs = {f} get-tuple-element(gr), index=1\n  go = {f} get-tuple-element(gr), index=2\n  ROOT t = ({x}, {x}, {f}, {f}, {x}, {f}, {f}) tuple(bni, y, bm, bv, gx, gs, go)\n}}\n"
    )
}

#[test]
fn batch_norm_every_feature_index_and_layout() {
    let dims = [3i64, 5, 4, 6];
    for feature in 0..4 {
        for layout in ["{3,2,1,0}", "{0,1,2,3}", "{1,3,0,2}"] {
            let text = all_three("f32", "[3,5,4,6]", layout, feature, dims[feature]);
            check_tiers(&text, &[1, 2], Values::Positive, 2e-5);
        }
    }
}

#[test]
fn batch_norm_tiled_half_and_double() {
    check_tiers(&all_three("f32", "[9,130]", "{1,0:T(8,128)}", 1, 130), &[3], Values::Positive, 2e-5);
    check_tiers(&all_three("f64", "[4,7,3]", "{2,1,0}", 2, 3), &[4], Values::Positive, 1e-12);
    check_tiers(&all_three("bf16", "[4,7,3]", "{2,1,0}", 1, 7), &[5], Values::Positive, 2e-2);
    check_tiers(&all_three("f16", "[2,3,33]", "{0,1,2}", 0, 2), &[6], Values::Positive, 2e-3);
}

#[test]
fn batch_norm_of_mixed_signs_and_a_single_element_per_feature() {
    // One element per feature: a zero variance, so y is the offset and grad_x is zero.
    check_tiers(&all_three("f32", "[1,4]", "{1,0}", 1, 4), &[7], Values::Positive, 2e-5);
    check_tiers(&all_three("f32", "[16,3]", "{1,0}", 1, 3), &[8], Values::Mixed { specials: false }, 2e-4);
}
