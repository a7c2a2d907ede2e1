//! reduce-window and select-and-scatter through emit_kernel + the kernel interpreter against
//! `hlo::eval`, on the edges: rank 0, empty operands, windows wider than the padded operand
//! reach, negative padding, dilation holes only, and refusals that name the op.

mod support;

use support::check;

fn add(ty: &str) -> String {
    format!("add {{\n  a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n  ROOT r = {ty}[] add(a, b)\n}}\n")
}

fn ge(ty: &str) -> String {
    format!("ge {{\n  a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n  ROOT r = pred[] compare(a, b), direction=GE\n}}\n")
}

fn reduce_window(x: &str, out: &str, window: &str) -> String {
    let ty = &x[..x.find('[').unwrap()];
    format!(
        "HloModule m\n{}ENTRY e {{\n  x = {x} parameter(0)\n  z = {ty}[] parameter(1)\n  ROOT w = {out} reduce-window(x, z), {window}to_apply=add\n}}\n",
        add(ty)
    )
}

#[test]
fn reduce_window_edges() {
    for (x, out, window) in [
        ("f32[]", "f32[]", ""),
        ("s32[0,4]", "s32[3,4]", "window={size=1x1 pad=2_1x0_0}, "),
        ("f32[3]", "f32[1]", "window={size=9 pad=3_3}, "),
        ("f32[3]", "f32[4]", "window={size=2 stride=3 pad=5_5}, "),
        ("f64[10,4]", "f64[2,4]", "window={size=2x1 stride=3x1 pad=-2_-1x0_0}, "),
        // Every window lands between dilated elements or on one of them.
        ("s64[4]", "s64[8]", "window={size=1 stride=1 pad=0_1 lhs_dilate=2}, "),
        ("f32[3,2]", "f32[2,3]", "window={size=3x2 stride=2x1 pad=1_1x0_1 lhs_dilate=2x3 rhs_dilate=2x2}, "),
    ] {
        check(&reduce_window(x, out, window));
    }
}

#[test]
fn select_and_scatter_edges() {
    for (x, g, window) in [
        ("f32[]", "f32[]", ""),
        ("f32[0,3]", "f32[0,3]", "window={size=1x1}, "),
        ("f32[4]", "f32[2]", "window={size=3 stride=3 pad=1_1}, "),
        ("s32[5,3]", "s32[5,3]", "window={size=3x3 pad=1_1x1_1}, "),
        ("f64[6]", "f64[3]", "window={size=3 stride=2 pad=0_1}, "),
    ] {
        let ty = &x[..x.find('[').unwrap()];
        check(&format!(
            "HloModule m\n{}{}ENTRY e {{\n  x = {x} parameter(0)\n  g = {g} parameter(1)\n  z = {ty}[] parameter(2)\n  ROOT s = {x} select-and-scatter(x, g, z), {window}select=ge, scatter=add\n}}\n",
            ge(ty),
            add(ty)
        ));
    }
}

#[test]
fn complex_windows_reduce_like_the_interpreter() {
    check(&reduce_window("c64[4]", "c64[2]", "window={size=2 stride=2}, "));
    check(&reduce_window("c128[5,3]", "c128[4,2]", "window={size=2x2}, "));
}
