//! Dots with f16/bf16 operands through the runtime's mixed GEMM (`tessera_rt_gemm_f32_mixed`:
//! f32 accumulation, a half result rounded once) on both JIT tiers, one thread and two, against
//! the reference interpreter: bf16 and f16 results, an f32 result from bf16 operands (JAX's
//! `preferred_element_type`), mixed bf16 x f32, transposed operands, batched dots (a half
//! result keeps the looped form, an f32 one calls the GEMM per batch index), and the few-row
//! shapes of a decode step (a weight matrix with contiguous rows, tied embeddings with
//! contiguous columns, a product with few columns) with column counts that leave partial
//! tiles.

mod tier_support;

use tier_support::failures_against_interpreter;

const MODULES: &[(&str, &str)] = &[
    (
        "bf16",
        "HloModule m\nENTRY e {\n  a = bf16[96,160]{1,0} parameter(0)\n  b = bf16[160,72]{1,0} parameter(1)\n  \
         ROOT d = bf16[96,72]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
    ),
    (
        "f16",
        "HloModule m\nENTRY e {\n  a = f16[96,160]{1,0} parameter(0)\n  b = f16[160,72]{1,0} parameter(1)\n  \
         ROOT d = f16[96,72]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
    ),
    (
        "bf16_to_f32",
        "HloModule m\nENTRY e {\n  a = bf16[96,160]{1,0} parameter(0)\n  b = bf16[160,72]{1,0} parameter(1)\n  \
         ROOT d = f32[96,72]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
    ),
    (
        "bf16_times_f32",
        "HloModule m\nENTRY e {\n  a = bf16[96,160]{1,0} parameter(0)\n  b = f32[160,72]{1,0} parameter(1)\n  \
         ROOT d = f32[96,72]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
    ),
    (
        "bf16_transposed",
        "HloModule m\nENTRY e {\n  a = bf16[160,96]{1,0} parameter(0)\n  b = bf16[72,160]{1,0} parameter(1)\n  \
         ROOT d = bf16[96,72]{0,1} dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={1}\n}\n",
    ),
    (
        "bf16_batched",
        "HloModule m\nENTRY e {\n  a = bf16[3,40,64]{2,1,0} parameter(0)\n  b = bf16[3,64,48]{2,1,0} parameter(1)\n  \
         ROOT d = bf16[3,40,48]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, \
         rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
    ),
    (
        // Attention's probabilities times values, as JAX writes it: batch dimensions that are
        // not leading, a contracting dimension that is not minor (strided GEMM operands), and
        // a bf16 result rounded block by block per batch.
        "bf16_attention_values",
        "HloModule m\nENTRY e {\n  v = bf16[2,48,4,32]{3,2,1,0} parameter(0)\n  p = bf16[2,4,40,48]{3,2,1,0} parameter(1)\n  \
         ROOT d = bf16[2,4,32,40]{3,2,1,0} dot(v, p), lhs_batch_dims={0,2}, lhs_contracting_dims={1}, \
         rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n}\n",
    ),
    (
        "bf16_batched_to_f32",
        "HloModule m\nENTRY e {\n  a = bf16[3,40,64]{2,1,0} parameter(0)\n  b = bf16[3,64,48]{2,1,0} parameter(1)\n  \
         ROOT d = f32[3,40,48]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, \
         rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
    ),
    (
        "bf16_few_rows",
        "HloModule m\nENTRY e {\n  a = bf16[11,200]{1,0} parameter(0)\n  b = bf16[200,300]{1,0} parameter(1)\n  \
         ROOT d = bf16[11,300]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
    ),
    (
        "f16_few_rows",
        "HloModule m\nENTRY e {\n  a = f16[7,200]{1,0} parameter(0)\n  b = f16[200,300]{1,0} parameter(1)\n  \
         ROOT d = f32[7,300]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
    ),
    (
        "bf16_tied_embedding",
        "HloModule m\nENTRY e {\n  x = bf16[11,200]{1,0} parameter(0)\n  w = bf16[301,200]{1,0} parameter(1)\n  \
         ROOT d = f32[11,301]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n}\n",
    ),
    (
        "bf16_few_columns",
        "HloModule m\nENTRY e {\n  w = bf16[300,200]{1,0} parameter(0)\n  x = bf16[200,5]{1,0} parameter(1)\n  \
         ROOT d = bf16[300,5]{1,0} dot(w, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
    ),
];

#[test]
fn half_dots_on_both_tiers_match_the_interpreter() {
    let failures = failures_against_interpreter(MODULES, 104_729);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
