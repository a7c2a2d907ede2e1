//! Dots that run as GEMM calls through a conversion on both JIT tiers, one thread and two,
//! against the reference interpreter, exactly for integers: 8- and 16-bit integer operands
//! (`tessera_rt_gemm_int`: exact sums in blocks on the float GEMM, the result type's low bits)
//! with contractions of one f32 block and of several (`u8 x u8` blocks hold 258 terms; 1,100
//! of them sum past 2^24, where f32 loses integers), 16-bit operands on f64, results that
//! wrap (s8, and s32 sums of 16-bit products), signed with unsigned, few rows (the skinny
//! path) and a batch; and dots whose operands or result GEMM cannot view as matrices, read or
//! written through copies (`dot_layout`): an image contracted along its middle dimension, as
//! `jax.image.resize` does, and a result laid out with its free dimensions split apart; and
//! complex dots (`tessera_rt_gemm_c64`/`_c128`: interleaved pairs, strides in pairs), plain,
//! batched, with a transposed operand and with few rows.

mod tier_support;

use tier_support::failures_against_interpreter;

fn dot(lhs: &str, rhs: &str, out: &str, dims: &str) -> String {
    format!(
        "HloModule m\nENTRY e {{\n  a = {lhs} parameter(0)\n  b = {rhs} parameter(1)\n  ROOT d = {out} dot(a, b), {dims}\n}}\n"
    )
}

#[test]
fn converted_gemm_dots_on_both_tiers_match_the_interpreter() {
    let plain = "lhs_contracting_dims={1}, rhs_contracting_dims={0}";
    let modules = [
        ("s8", dot("s8[64,300]{1,0}", "s8[300,40]{1,0}", "s32[64,40]{1,0}", plain)),
        ("u8_blocks", dot("u8[24,1100]{1,0}", "u8[1100,36]{1,0}", "s32[24,36]{1,0}", plain)),
        ("s8_u8_blocks", dot("s8[20,1100]{1,0}", "u8[1100,24]{1,0}", "u32[20,24]{1,0}", plain)),
        ("s16_wraps", dot("s16[20,50]{1,0}", "s16[50,30]{1,0}", "s32[20,30]{1,0}", plain)),
        ("s8_to_s8", dot("s8[16,64]{1,0}", "s8[64,16]{1,0}", "s8[16,16]{1,0}", plain)),
        ("u16_s8_to_s64", dot("u16[12,80]{1,0}", "s8[80,20]{1,0}", "s64[12,20]{1,0}", plain)),
        ("s8_few_rows", dot("s8[3,500]{1,0}", "s8[500,70]{1,0}", "s32[3,70]{1,0}", plain)),
        (
            "s8_batched_middle",
            dot(
                "s8[4,32,6]{2,1,0}",
                "s8[4,5,32]{2,1,0}",
                "s32[4,6,5]{2,1,0}",
                "lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, rhs_contracting_dims={2}",
            ),
        ),
        (
            "f32_resize_rows",
            dot(
                "f32[48,96]{1,0}",
                "f32[2,48,40,3]{3,2,1,0}",
                "f32[96,2,40,3]{3,2,1,0}",
                "lhs_contracting_dims={0}, rhs_contracting_dims={1}",
            ),
        ),
        (
            "f32_split_result",
            dot(
                "f32[6,40,5]{2,1,0}",
                "f32[40,7]{1,0}",
                "f32[6,5,7]{0,2,1}",
                "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
            ),
        ),
        ("c64", dot("c64[40,70]{1,0}", "c64[70,30]{1,0}", "c64[40,30]{1,0}", plain)),
        (
            "c64_batched_transposed",
            dot(
                "c64[3,24,50]{2,1,0}",
                "c64[3,36,50]{2,1,0}",
                "c64[3,24,36]{2,1,0}",
                "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}",
            ),
        ),
        ("c64_few_rows", dot("c64[2,300]{1,0}", "c64[300,20]{1,0}", "c64[2,20]{1,0}", plain)),
        ("c128_column_major", dot("c128[33,45]{0,1}", "c128[45,17]{1,0}", "c128[33,17]{0,1}", plain)),
    ];
    let failures = failures_against_interpreter(&modules, 7_919);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
