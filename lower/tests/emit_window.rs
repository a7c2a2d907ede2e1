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

/// Scans (`cumsum`, `cummax`, `cumprod` and their reversed forms: a window over every earlier
/// or later element along one dimension) along each dimension of arrays in two layouts, on
/// every accumulator type. A scan along a dimension other than the contiguous one, with at
/// least 8 columns, takes the column form (accumulators in a scratch buffer, one row of a
/// block of columns per step); the others fold along each row.
#[test]
fn scans_along_every_dimension_fold_like_the_interpreter() {
    let reducers = [("f32", "add"), ("f32", "maximum"), ("f64", "add"), ("s32", "multiply"), ("s64", "add")];
    let mut column_forms = 0;
    for (ty, op) in reducers {
        for (dims, layout) in [([5, 12, 16], "{2,1,0}"), ([9, 3, 10], "{0,2,1}"), ([6, 40, 2], "{2,1,0}")] {
            for d in 0..3 {
                for reverse in [false, true] {
                    let n = dims[d];
                    let size: Vec<String> = (0..3).map(|k| if k == d { n.to_string() } else { "1".into() }).collect();
                    let pad: Vec<String> = (0..3)
                        .map(|k| match (k == d, reverse) {
                            (false, _) => "0_0".to_string(),
                            (true, false) => format!("{}_0", n - 1),
                            (true, true) => format!("0_{}", n - 1),
                        })
                        .collect();
                    let shape = format!("{ty}[{},{},{}]{layout}", dims[0], dims[1], dims[2]);
                    let text = format!(
                        "HloModule m\nf {{\n  a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n  ROOT r = {ty}[] {op}(a, b)\n}}\nENTRY e {{\n  x = {shape} parameter(0)\n  z = {ty}[] parameter(1)\n  ROOT w = {shape} reduce-window(x, z), window={{size={} pad={}}}, to_apply=f\n}}\n",
                        size.join("x"),
                        pad.join("x")
                    );
                    let k = check(&text);
                    if k.to_string().contains(".acc\"") {
                        column_forms += 1;
                    }
                }
            }
        }
    }
    // Per reducer: the first shape's dimensions 0 and 1 and the second's 1 and 2 (dimension 0
    // is its contiguous one), in both directions, except that only reducers exact in any order
    // fold from the end (not f32 max, not f64 add: their reversed windows stay windows); the
    // third shape's contiguous dimension has 2 columns, too few.
    assert_eq!(column_forms, 3 * 8 + 2 * 4, "scans taking the column form");
}
