//! reduce-window and select-and-scatter on both JIT tiers against the interpreter, on what
//! the corpus does not cover: base and window dilation, odd and negative padding, strides
//! wider than windows, tiled and column-major layouts, integer, predicate and half types,
//! variadic reduce-window, reducers of several instructions, overlapping select windows, a row
//! reduction over a windowed sum fused into it.

mod window_support;

use window_support::{check_tiers, Values};

fn reducer(name: &str, ty: &str, op: &str) -> String {
    format!("{name} {{\n  a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n  ROOT r = {ty}[] {op}(a, b)\n}}\n")
}

fn compare_fn(name: &str, ty: &str, dir: &str) -> String {
    format!(
        "{name} {{\n  a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n  ROOT r = pred[] compare(a, b), direction={dir}\n}}\n"
    )
}

fn module(comps: &[String], body: &str) -> String {
    format!("HloModule m\n{}ENTRY e {{\n{body}\n}}\n", comps.concat())
}

const MIXED: Values = Values::Mixed { specials: true };

#[test]
fn reduce_window_dilations_padding_and_strides() {
    let windows = [
        // (operand dims, window, result dims)
        ("[9,7]", "size=3x2 stride=2x1 pad=2_1x0_1 lhs_dilate=2x1", "[9,7]"),
        ("[9,7]", "size=2x3 stride=3x2 pad=1_0x1_1 rhs_dilate=2x2", "[3,3]"),
        ("[5,6]", "size=2x2 stride=1x1 pad=1_1x0_0 lhs_dilate=3x2 rhs_dilate=2x1", "[13,10]"),
        ("[8,5]", "size=2x1 stride=3x1 pad=-1_0x0_0", "[2,5]"),
        ("[4,3,5]", "size=1x3x2 stride=1x2x4 pad=0_0x1_1x1_0", "[4,2,2]"),
        ("[7]", "size=9 stride=1 pad=8_0", "[7]"),
    ];
    for (ty, op, init) in [("f32", "add", "0"), ("f32", "maximum", "-inf"), ("f64", "multiply", "1")] {
        for (dims, window, out) in windows {
            let text = module(
                &[reducer("r", ty, op)],
                &format!(
                    "  x = {ty}{dims} parameter(0)\n  z = {ty}[] constant({init})\n  ROOT w = {ty}{out} reduce-window(x, z), window={{{window}}}, to_apply=r"
                ),
            );
            check_tiers(&text, &[1, 2], MIXED, 1e-5);
        }
    }
}

#[test]
fn reduce_window_every_element_type() {
    for (ty, op, init) in [
        ("s32", "add", "0"),
        ("s8", "minimum", "127"),
        ("u8", "maximum", "0"),
        ("u16", "multiply", "1"),
        ("s64", "add", "0"),
        ("pred", "or", "false"),
        ("pred", "and", "true"),
        ("bf16", "add", "0"),
        ("f16", "maximum", "-inf"),
        ("bf16", "multiply", "1"),
    ] {
        let text = module(
            &[reducer("r", ty, op)],
            &format!(
                "  x = {ty}[6,11]{{1,0}} parameter(0)\n  z = {ty}[] constant({init})\n  ROOT w = {ty}[6,6]{{1,0}} reduce-window(x, z), window={{size=2x3 stride=1x2 pad=0_1x1_1}}, to_apply=r"
            ),
        );
        check_tiers(&text, &[3, 4], MIXED, 1e-6);
    }
}

#[test]
fn reduce_window_tiled_and_column_major_layouts() {
    let cases = [
        ("f32[10,260]{1,0:T(8,128)}", "f32[5,130]{0,1}", "size=2x2 stride=2x2"),
        ("f32[10,260]{0,1}", "f32[10,260]{1,0:T(8,128)}", "size=3x3 pad=1_1x1_1"),
        ("bf16[9,40]{1,0:T(8,128)(2,1)}", "bf16[9,40]{1,0:T(4,16)}", "size=1x5 pad=0_0x4_0"),
        ("s32[3,5,7]{0,2,1}", "s32[3,3,4]{1,0,2}", "size=1x2x3 stride=1x2x2 pad=0_0x0_1x1_1"),
    ];
    for (xin, xout, window) in cases {
        let ty = &xin[..xin.find('[').unwrap()];
        let text = module(
            &[reducer("r", ty, "add")],
            &format!(
                "  x = {xin} parameter(0)\n  z = {ty}[] constant(0)\n  ROOT w = {xout} reduce-window(x, z), window={{{window}}}, to_apply=r"
            ),
        );
        check_tiers(&text, &[5], Values::Mixed { specials: false }, 1e-5);
    }
}

#[test]
fn variadic_reduce_window_argmax() {
    // The first maximum of each window and its column; ties keep the lower index.
    let argmax = "argmax {\n  v0 = f32[] parameter(0)\n  i0 = s32[] parameter(1)\n  v1 = f32[] parameter(2)\n  i1 = s32[] parameter(3)\n  gt = pred[] compare(v0, v1), direction=GT\n  eq = pred[] compare(v0, v1), direction=EQ\n  lt = pred[] compare(i0, i1), direction=LT\n  tie = pred[] and(eq, lt)\n  keep = pred[] or(gt, tie)\n  v = f32[] select(keep, v0, v1)\n  i = s32[] select(keep, i0, i1)\n  ROOT t = (f32[], s32[]) tuple(v, i)\n}\n".to_string();
    let text = module(
        &[argmax],
        "  x = f32[6,13]{1,0} parameter(0)\n  io = s32[6,13]{1,0} iota(), iota_dimension=1\n  ninf = f32[] constant(-inf)\n  big = s32[] constant(2147483647)\n  w = (f32[6,7]{1,0}, s32[6,7]{0,1}) reduce-window(x, io, ninf, big), window={size=2x3 stride=1x2 pad=0_1x1_1}, to_apply=argmax\n  v = f32[6,7]{1,0} get-tuple-element(w), index=0\n  i = s32[6,7]{0,1} get-tuple-element(w), index=1\n  n = f32[6,7]{1,0} negate(v)\n  ROOT t = (f32[6,7]{1,0}, s32[6,7]{0,1}) tuple(n, i)",
    );
    check_tiers(&text, &[6, 7], Values::Mixed { specials: false }, 0.0);
}

/// A row reduction over a windowed sum along the row, fused through a multiply (a scaled
/// cumulative sum's maximum, as `jnp.max(0.5 * jnp.cumsum(x, 1), 1)` lowers): each lane of
/// the reduction loop runs the window's own loop, whose index reads that lane's position.
/// Rows of 64 (the lane copies alone) and of 37 (a scalar tail after them).
#[test]
fn row_reduction_of_a_windowed_sum_along_the_row() {
    for cols in [64, 37] {
        let text = module(
            &[reducer("add", "f32", "add"), reducer("mx", "f32", "maximum")],
            &format!(
                "  x = f32[6,{cols}]{{1,0}} parameter(0)\n  z = f32[] constant(0)\n  cs = f32[6,{cols}]{{1,0}} reduce-window(x, z), window={{size=1x{cols} pad=0_0x{pad}_0}}, to_apply=add\n  h = f32[] constant(0.5)\n  hb = f32[6,{cols}]{{1,0}} broadcast(h), dimensions={{}}\n  y = f32[6,{cols}]{{1,0}} multiply(cs, hb)\n  ninf = f32[] constant(-inf)\n  ROOT m = f32[6]{{0}} reduce(y, ninf), dimensions={{1}}, to_apply=mx",
                pad = cols - 1
            ),
        );
        check_tiers(&text, &[3, 4], Values::Mixed { specials: false }, 1e-5);
    }
}

#[test]
fn reduce_window_with_a_reducer_of_several_instructions_and_fused_neighbours() {
    // Sum of absolute values (not a plain add: folded in window order, in f32).
    let r =
        "r {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  m = f32[] abs(b)\n  ROOT s = f32[] add(a, m)\n}\n"
            .to_string();
    let text = module(
        &[r],
        "  x = f32[12,10]{1,0} parameter(0)\n  e = f32[12,10]{1,0} exponential(x)\n  z = f32[] constant(0)\n  w = f32[6,10]{1,0} reduce-window(e, z), window={size=3x2 stride=2x1 pad=1_0x0_1}, to_apply=r\n  c = f32[] constant(0.25)\n  cb = f32[6,10]{1,0} broadcast(c), dimensions={}\n  ROOT m = f32[6,10]{1,0} multiply(w, cb)",
    );
    check_tiers(&text, &[8], Values::Mixed { specials: false }, 1e-5);
}

#[test]
fn select_and_scatter_windows_and_types() {
    let windows = [
        // (operand, source, window)
        ("[6,5]", "[3,2]", "size=3x3 stride=2x2 pad=0_1x0_0"),
        ("[7,7]", "[6,6]", "size=2x2 stride=1x1"),
        ("[8,9]", "[3,3]", "size=2x2 stride=3x3 pad=1_0x0_0"),
        ("[2,9,9,3]", "[2,5,5,3]", "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0"),
        ("[5]", "[5]", "size=3 pad=1_1"),
    ];
    for (ty, select, scatter, init) in [
        ("f32", "GE", "add", "0"),
        ("f32", "LE", "add", "1"),
        ("f64", "GT", "maximum", "-inf"),
        ("s32", "GE", "add", "0"),
        ("u8", "LT", "maximum", "0"),
        ("bf16", "GE", "add", "0"),
        ("f16", "LE", "multiply", "1"),
    ] {
        for (operand, source, window) in windows {
            let text = module(
                &[compare_fn("sel", ty, select), reducer("sc", ty, scatter)],
                &format!(
                    "  x = {ty}{operand} parameter(0)\n  g = {ty}{source} parameter(1)\n  z = {ty}[] constant({init})\n  ROOT s = {ty}{operand} select-and-scatter(x, g, z), window={{{window}}}, select=sel, scatter=sc"
                ),
            );
            check_tiers(&text, &[9, 10], MIXED, 1e-5);
        }
    }
}

#[test]
fn select_and_scatter_layouts_and_fused_operands() {
    let sel = compare_fn("sel", "f32", "GE");
    let sc = reducer("sc", "f32", "add");
    // A tiled operand and result, a column-major source; the maximum-pooling gradient's pad.
    let text = module(
        &[sel.clone(), sc.clone()],
        "  x = f32[10,140]{1,0:T(8,128)} parameter(0)\n  g = f32[5,70]{0,1} parameter(1)\n  z = f32[] constant(0)\n  ROOT s = f32[10,140]{1,0:T(8,128)} select-and-scatter(x, g, z), window={size=3x3 stride=2x2 pad=0_1x0_1}, select=sel, scatter=sc",
    );
    check_tiers(&text, &[11], Values::Mixed { specials: false }, 1e-5);
    let text = module(
        &[sel, sc],
        "  x = f32[2,12,12,3]{3,2,1,0} parameter(0)\n  ninf = f32[] constant(-inf)\n  p = f32[2,13,13,3]{3,2,1,0} pad(x, ninf), padding=0_0x0_1x0_1x0_0\n  g = f32[2,6,6,3]{0,1,2,3} parameter(1)\n  z = f32[] constant(0)\n  s = f32[2,13,13,3]{1,2,3,0} select-and-scatter(p, g, z), window={size=1x3x3x1 stride=1x2x2x1}, select=sel, scatter=sc\n  ROOT r = f32[2,12,12,3]{3,2,1,0} slice(s), slice={[0:2], [0:12], [0:12], [0:3]}",
    );
    check_tiers(&text, &[12], Values::Mixed { specials: false }, 1e-5);
}

/// Windows that reach back over every earlier element along one dimension (cumsum, cumprod,
/// cummax) run as running folds, and so do sums reaching forward over every later element
/// (from the row's end); other reducers reaching forward, and windows one element short of
/// the whole prefix, stay windows. Both tiers against the interpreter, on every dimension
/// position, column-major and tiled layouts, a fused operand and several types.
#[test]
fn cumulative_windows_as_running_folds() {
    let cases = [
        // (type, op, init, operand, window)
        ("f32", "add", "0", "[8,64]{1,0}", "size=1x64 pad=0_0x63_0"),
        ("s32", "add", "0", "[8,64]{1,0}", "size=8x1 pad=7_0x0_0"),
        ("f32", "maximum", "-inf", "[4,5,33]{0,1,2}", "size=1x5x1 pad=0_0x4_0x0_0"),
        ("f64", "multiply", "1", "[3,17]{0,1}", "size=1x20 pad=0_0x19_0"),
        ("bf16", "add", "0", "[3,40]{1,0:T(2,128)(2,1)}", "size=1x40 pad=0_0x39_0"),
        ("f16", "minimum", "inf", "[40,3]{1,0}", "size=40x1 pad=39_0x0_0"),
        ("s8", "add", "0", "[2,9]{1,0}", "size=1x9 pad=0_0x8_0"),
        // Reaching forward: folds from the end.
        ("f32", "add", "0", "[8,64]{1,0}", "size=1x64 pad=0_0x0_63"),
        ("s64", "maximum", "-9223372036854775808", "[6,7]{0,1}", "size=6x1 pad=0_5x0_0"),
        // Still windows: a maximum of floats reaching forward, a window one short of the
        // prefix.
        ("f32", "maximum", "-inf", "[8,64]{1,0}", "size=1x64 pad=0_0x0_63"),
        ("f32", "add", "0", "[8,64]{1,0}", "size=1x63 pad=0_0x62_0"),
    ];
    for (ty, op, init, operand, window) in cases {
        let dims = &operand[..operand.find(']').map_or(operand.len(), |e| e + 1)];
        let text = module(
            &[reducer("r", ty, op)],
            &format!(
                "  x = {ty}{operand} parameter(0)\n  a = {ty}{operand} abs(x)\n  z = {ty}[] constant({init})\n  ROOT w = {ty}{dims} reduce-window(a, z), window={{{window}}}, to_apply=r"
            ),
        );
        check_tiers(&text, &[5, 6], MIXED, 1e-5);
    }
}
