//! Reductions (any dimensions, any reducer, variadic) and dots (any dot_general, loops and
//! the runtime GEMM call) through emit_kernel + the kernel interpreter.

mod support;

use support::{check, check_slack};
use tessera_lower::kernel::Stmt;

fn reducer(ty: &str, op: &str) -> String {
    format!("r_{op} {{\n  x = {ty}[] parameter(0)\n  y = {ty}[] parameter(1)\n  ROOT z = {ty}[] {op}(x, y)\n}}\n")
}

#[test]
fn reductions_over_any_dimensions() {
    for ty in ["f32", "f64", "bf16", "f16", "s32", "u8", "s64"] {
        for op in ["add", "maximum", "minimum", "multiply"] {
            for (dims, out, layout) in [
                ("{2}", "[4,6]", "{1,0}"),
                ("{0}", "[6,9]", "{1,0}"),
                ("{1}", "[4,9]", "{0,1}"),
                ("{0,2}", "[6]", "{0}"),
                ("{0,1,2}", "[]", ""),
            ] {
                let text = format!(
                    "HloModule m\n{}ENTRY e {{\n  p = {ty}[4,6,9]{{2,1,0}} parameter(0)\n  z = {ty}[] parameter(1)\n  ROOT r = {ty}{out}{layout} reduce(p, z), dimensions={dims}, to_apply=r_{op}\n}}\n",
                    reducer(ty, op)
                );
                check_slack(&text, 10.0);
            }
        }
    }
}

#[test]
fn reductions_of_fused_inputs_and_tiled_layouts() {
    check(&format!(
        "HloModule m\n{}ENTRY e {{\n  p = f32[20,300]{{1,0:T(8,128)}} parameter(0)\n  e = f32[20,300]{{1,0:T(8,128)}} exponential(p)\n  z = f32[] constant(0)\n  ROOT r = f32[20]{{0}} reduce(e, z), dimensions={{1}}, to_apply=r_add\n}}\n",
        reducer("f32", "add")
    ));
    check(&format!(
        "HloModule m\n{}ENTRY e {{\n  p = f32[20,300]{{0,1}} parameter(0)\n  z = f32[] constant(-inf)\n  ROOT r = f32[300]{{0}} reduce(p, z), dimensions={{0}}, to_apply=r_maximum\n}}\n",
        reducer("f32", "maximum")
    ));
    // A reducer with more than one op, and a reduce feeding an elementwise op.
    check(
        "HloModule m\nr {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  a = f32[] abs(y)\n  ROOT z = f32[] add(x, a)\n}\nENTRY e {\n  p = f32[7,33]{1,0} parameter(0)\n  z = f32[] constant(0)\n  s = f32[7]{0} reduce(p, z), dimensions={1}, to_apply=r\n  ROOT n = f32[7]{0} sqrt(s)\n}\n",
    );
}

#[test]
fn variadic_reduce_argmax() {
    let text = "HloModule m\nr {\n  v0 = f32[] parameter(0)\n  i0 = s32[] parameter(1)\n  v1 = f32[] parameter(2)\n  i1 = s32[] parameter(3)\n  gt = pred[] compare(v0, v1), direction=GT\n  eq = pred[] compare(v0, v1), direction=EQ\n  lt = pred[] compare(i0, i1), direction=LT\n  tie = pred[] and(eq, lt)\n  keep = pred[] or(gt, tie)\n  v = f32[] select(keep, v0, v1)\n  i = s32[] select(keep, i0, i1)\n  ROOT t = (f32[], s32[]) tuple(v, i)\n}\nENTRY e {\n  p = f32[5,17]{1,0} parameter(0)\n  io = s32[5,17]{1,0} iota(), iota_dimension=1\n  ninf = f32[] constant(-inf)\n  zero = s32[] constant(0)\n  ROOT red = (f32[5]{0}, s32[5]{0}) reduce(p, io, ninf, zero), dimensions={1}, to_apply=r\n}\n";
    check(text);
}

fn has_call(stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Call { func, .. } => func.starts_with("tessera_rt_gemm_"),
        Stmt::Loop(l) => has_call(&l.body),
        Stmt::If { then_body, else_body, .. } => has_call(then_body) || has_call(else_body),
        _ => false,
    })
}

/// Dots GEMM cannot take run as loops: dots of 32-bit integers, and contracting dimensions
/// that do not pair up in order (so they do not collapse into one strided dimension on both
/// sides).
#[test]
fn dots_as_loops() {
    let cases = [
        "a = s32[4,6]{1,0} parameter(0)\n  b = s32[6,5]{1,0} parameter(1)\n  ROOT d = s32[4,5]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "a = s32[2,3,4]{2,1,0} parameter(0)\n  b = s32[2,4,5]{1,2,0} parameter(1)\n  ROOT d = s32[2,3,5]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
        "a = f16[3,4,5]{2,1,0} parameter(0)\n  b = f16[5,4,2]{2,1,0} parameter(1)\n  ROOT d = f32[3,2]{1,0} dot(a, b), lhs_contracting_dims={1,2}, rhs_contracting_dims={1,0}",
    ];
    for body in cases {
        let k = check(&format!("HloModule m\nENTRY e {{\n  {body}\n}}\n"));
        assert!(!has_call(&k.body), "a dot GEMM cannot take calls it:\n{k}");
    }
}

/// Float dots (and narrow integer ones) of strided matrices call the GEMM whatever their size
/// (small ones too: as loops they cost LLVM more compile time than XLA:CPU's whole compile).
#[test]
fn float_dots_call_the_gemm() {
    let small = [
        "a = f32[5,7]{1,0} parameter(0)\n  b = f32[7,3]{1,0} parameter(1)\n  ROOT d = f32[5,3]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "a = f32[7,5]{0,1} parameter(0)\n  b = f32[3,7]{1,0} parameter(1)\n  ROOT d = f32[5,3]{0,1} dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={1}",
        "a = bf16[2,5,7]{2,1,0} parameter(0)\n  b = bf16[2,7,3]{2,1,0} parameter(1)\n  ROOT d = bf16[2,5,3]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
        "a = f64[6]{0} parameter(0)\n  b = f64[6]{0} parameter(1)\n  ROOT d = f64[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}",
        "a = f32[3,7,2]{2,1,0} parameter(0)\n  b = f32[2,7,4]{2,1,0} parameter(1)\n  ROOT d = f32[2,3,4]{2,1,0} dot(a, b), lhs_batch_dims={2}, lhs_contracting_dims={1}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
        // Integers of 8 and 16 bits: exact sums on the float GEMM (`tessera_rt_gemm_int`).
        "a = s8[4,6]{1,0} parameter(0)\n  b = s8[6,5]{1,0} parameter(1)\n  ROOT d = s32[4,5]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "a = u16[2,4,6]{2,1,0} parameter(0)\n  b = s8[2,5,6]{2,1,0} parameter(1)\n  ROOT d = s16[2,4,5]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}",
    ];
    let large = [
        "a = f32[64,48]{1,0} parameter(0)\n  b = f32[48,40]{1,0} parameter(1)\n  ROOT d = f32[64,40]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "a = f32[48,64]{1,0} parameter(0)\n  b = f32[40,48]{0,1} parameter(1)\n  ROOT d = f32[64,40]{0,1} dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={1}",
        "a = f64[3,40,36]{2,1,0} parameter(0)\n  b = f64[3,36,33]{2,1,0} parameter(1)\n  ROOT d = f64[3,40,33]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
        "a = f32[4,8,40]{2,1,0} parameter(0)\n  b = f32[4,8,48]{2,1,0} parameter(1)\n  ROOT d = f32[40,48]{1,0} dot(a, b), lhs_contracting_dims={0,1}, rhs_contracting_dims={0,1}",
    ];
    for body in small.iter().chain(&large) {
        let k = check_slack(&format!("HloModule m\nENTRY e {{\n  {body}\n}}\n"), 20.0);
        assert!(has_call(&k.body), "a strided dot does not call the GEMM:\n{k}");
    }
}
