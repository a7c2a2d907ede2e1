//! Argmax and argmin as JAX writes them (a variadic reduce of values and an iota), which the
//! kernel lowering runs in lanes along a row (`emit::arg_reduce`) and sweeps row by row over
//! columns (`emit::column_reduce`): both JIT tiers against the interpreter bit for bit, and the
//! positions against the definition (the first NaN, else the first of the largest values), on
//! rows with NaNs first, last and twice, rows of -inf, ties of the maximum, zeros of both
//! signs, extreme integers, lengths that leave a scalar tail, bf16 values and s64 positions. A
//! reducer that breaks ties towards the later position is not an argmax: along a row it stays
//! serial, over columns the sweep keeps its order.

use tessera_hlo::{ElementType, Literal, Shape};
use tessera_lower::{lower_module, LowerOptions};

mod tier_support;
use tier_support::agree;

/// JAX's argmax (`GT`) or argmin (`LT`) reducer over values of type `vt` and positions of
/// type `it`; `nan_check` adds its "a NaN wins" clause (floats); `tie` is the position compare
/// that breaks ties (`LT`: the earlier position, as JAX).
fn reducer(vt: &str, it: &str, dir: &str, nan_check: bool, tie: &str) -> String {
    let keep = if nan_check {
        format!("  unordered = pred[] compare(a, a), direction=NE\n  keep = pred[] or(better, unordered)\n")
    } else {
        "  keep = pred[] copy(better)\n".to_string()
    };
    format!(
        "reducer {{\n  a = {vt}[] parameter(0)\n  b = {vt}[] parameter(2)\n  better = pred[] compare(a, b), \
         direction={dir}\n{keep}  v = {vt}[] select(keep, a, b)\n  eq = pred[] compare(a, b), direction=EQ\n  \
         i = {it}[] parameter(1)\n  j = {it}[] parameter(3)\n  earlier = pred[] compare(i, j), direction={tie}\n  \
         tie = pred[] and(eq, earlier)\n  first = pred[] or(keep, tie)\n  p = {it}[] select(first, i, j)\n  \
         ROOT r = ({vt}[], {it}[]) tuple(v, p)\n}}\n"
    )
}

/// A module returning the positions of `reducer` over the rows of a `vt[rows, cols]` argument.
fn module(vt: &str, it: &str, rows: usize, cols: usize, init: &str, reducer: &str) -> String {
    format!(
        "HloModule argmax, entry_computation_layout={{({vt}[{rows},{cols}]{{1,0}})->{it}[{rows}]{{0}}}}\n\n{reducer}\n\
         ENTRY main {{\n  x = {vt}[{rows},{cols}]{{1,0}} parameter(0)\n  io = {it}[{cols}]{{0}} iota(), iota_dimension=0\n  \
         pos = {it}[{rows},{cols}]{{1,0}} broadcast(io), dimensions={{1}}\n  init = {vt}[] constant({init})\n  \
         zero = {it}[] constant(0)\n  r = ({vt}[{rows}]{{0}}, {it}[{rows}]{{0}}) reduce(x, pos, init, zero), \
         dimensions={{1}}, to_apply=reducer\n  ROOT p = {it}[{rows}]{{0}} get-tuple-element(r), index=1\n}}\n"
    )
}

/// Rows of `cols` f32 values: the hard cases first, then mixes of a few values and specials.
fn f32_rows(rows: usize, cols: usize) -> Vec<f32> {
    let mut rng = tessera_testkit::Rng::new(41);
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let mut row: Vec<f32> = (0..cols).map(|_| (rng.below(7) as f32 - 3.0) * 0.5).collect();
        match r {
            0 => row[5] = f32::NAN,
            1 => {
                row[cols - 1] = f32::NAN;
                row[cols / 2] = -f32::NAN;
            }
            2 => row.fill(f32::NEG_INFINITY),
            3 => {
                row.fill(-1.0);
                for &at in &[3, 17, cols - 2] {
                    row[at] = 7.0;
                }
            }
            4 => {
                row.fill(-2.0);
                row[9] = -0.0;
                row[4] = 0.0;
                row[30] = -0.0;
            }
            5 => {
                row.fill(f32::NEG_INFINITY);
                row[cols - 1] = f32::INFINITY;
            }
            6 => row[0] = f32::from_bits(0x7f80_0001),
            _ => {
                if rng.below(3) == 0 {
                    let at = rng.below(cols as u64) as usize;
                    row[at] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0][rng.below(4) as usize];
                }
            }
        }
        out.extend(row);
    }
    out
}

/// The first NaN's position, else the first largest (smallest) value's.
fn definition(row: &[f64], max: bool) -> i64 {
    if let Some(at) = row.iter().position(|v| v.is_nan()) {
        return at as i64;
    }
    let better = |a: f64, b: f64| if max { a > b } else { a < b };
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if better(v, row[best]) {
            best = i;
        }
    }
    best as i64
}

fn positions(out: &Literal) -> Vec<i64> {
    match out.element_type() {
        ElementType::S32 => out.to_vec::<i32>().unwrap().into_iter().map(i64::from).collect(),
        _ => out.to_vec::<i64>().unwrap(),
    }
}

/// Whether the lowering runs the reduce in lanes (its kernel has the positions' `smin` lanes).
fn in_lanes(text: &str) -> bool {
    let module = tessera_hlo::text::parse_module(text).unwrap();
    lower_module(&module, &LowerOptions::default()).unwrap().to_string().contains("reduce(smin")
}

#[test]
fn f32_argmax_and_argmin_in_lanes_match_the_interpreter_and_the_definition() {
    for cols in [64, 77, 1000] {
        let rows = 24;
        let values = f32_rows(rows, cols);
        let arg = Literal::from_vec(&[rows as i64, cols as i64], values.clone()).unwrap();
        for (dir, init, max) in [("GT", "-inf", true), ("LT", "inf", false)] {
            for it in ["s32", "s64"] {
                let text = module("f32", it, rows, cols, init, &reducer("f32", it, dir, true, "LT"));
                assert!(in_lanes(&text), "{dir} {it} {cols}: not in lanes");
                let out = agree(&text, std::slice::from_ref(&arg));
                let got = positions(&out[0]);
                for r in 0..rows {
                    let row: Vec<f64> = values[r * cols..(r + 1) * cols].iter().map(|&v| f64::from(v)).collect();
                    assert_eq!(got[r], definition(&row, max), "{dir} {it} {cols} columns, row {r}: {row:?}");
                }
            }
        }
    }
}

#[test]
fn integer_and_bf16_values_in_lanes() {
    let (rows, cols) = (6, 70);
    let mut rng = tessera_testkit::Rng::new(5);
    let ints: Vec<i32> = (0..rows * cols)
        .map(|k| match k % 97 {
            0 => i32::MIN,
            1 => i32::MAX,
            _ => rng.below(9) as i32 - 4,
        })
        .collect();
    let arg = Literal::from_vec(&[rows as i64, cols as i64], ints.clone()).unwrap();
    for (dir, init, max) in [("GT", "-2147483648", true), ("LT", "2147483647", false)] {
        let text = module("s32", "s32", rows, cols, init, &reducer("s32", "s32", dir, false, "LT"));
        assert!(in_lanes(&text), "s32 {dir}: not in lanes");
        let got = positions(&agree(&text, std::slice::from_ref(&arg))[0]);
        for r in 0..rows {
            let row: Vec<f64> = ints[r * cols..(r + 1) * cols].iter().map(|&v| f64::from(v)).collect();
            assert_eq!(got[r], definition(&row, max), "s32 {dir} row {r}");
        }
    }
    let halves: Vec<u128> =
        f32_rows(rows, cols).iter().map(|&v| u128::from(half::bf16::from_f32(v).to_bits())).collect();
    let shape = Shape::array(ElementType::BF16, &[rows as i64, cols as i64]);
    let arg = Literal::from_bits_vec(shape, halves.clone()).unwrap();
    let text = module("bf16", "s32", rows, cols, "-inf", &reducer("bf16", "s32", "GT", true, "LT"));
    assert!(in_lanes(&text), "bf16: not in lanes");
    let got = positions(&agree(&text, std::slice::from_ref(&arg))[0]);
    for r in 0..rows {
        let row: Vec<f64> =
            halves[r * cols..(r + 1) * cols].iter().map(|&b| half::bf16::from_bits(b as u16).to_f64()).collect();
        assert_eq!(got[r], definition(&row, true), "bf16 row {r}");
    }
}

#[test]
fn reducers_that_are_not_an_argmax_stay_serial() {
    let (rows, cols) = (24, 64);
    let arg = Literal::from_vec(&[rows as i64, cols as i64], f32_rows(rows, cols)).unwrap();
    // Ties to the later position; and a max that lets a NaN lose: both depend on the order.
    for red in [reducer("f32", "s32", "GT", true, "GT"), reducer("f32", "s32", "GT", false, "LT")] {
        let text = module("f32", "s32", rows, cols, "-inf", &red);
        assert!(!in_lanes(&text), "taken for an argmax:\n{red}");
        agree(&text, std::slice::from_ref(&arg));
    }
}

/// A module of `reducer` over dimension 0 of a `vt[rows, cols]` argument (a column argmax),
/// returning the positions alone or, with `both`, the values and the positions.
fn column_module(vt: &str, rows: usize, cols: usize, init: &str, reducer: &str, both: bool) -> String {
    let (result, root) = if both {
        (
            format!("({vt}[{cols}]{{0}}, s32[{cols}]{{0}})"),
            format!(
                "  v = {vt}[{cols}]{{0}} get-tuple-element(r), index=0\n  p = s32[{cols}]{{0}} get-tuple-element(r), index=1\n  \
                 ROOT t = ({vt}[{cols}]{{0}}, s32[{cols}]{{0}}) tuple(v, p)\n"
            ),
        )
    } else {
        (format!("s32[{cols}]{{0}}"), format!("  ROOT p = s32[{cols}]{{0}} get-tuple-element(r), index=1\n"))
    };
    format!(
        "HloModule column_argmax, entry_computation_layout={{({vt}[{rows},{cols}]{{1,0}})->{result}}}\n\n{reducer}\n\
         ENTRY main {{\n  x = {vt}[{rows},{cols}]{{1,0}} parameter(0)\n  io = s32[{rows}]{{0}} iota(), iota_dimension=0\n  \
         pos = s32[{rows},{cols}]{{1,0}} broadcast(io), dimensions={{0}}\n  init = {vt}[] constant({init})\n  \
         zero = s32[] constant(0)\n  r = ({vt}[{cols}]{{0}}, s32[{cols}]{{0}}) reduce(x, pos, init, zero), \
         dimensions={{0}}, to_apply=reducer\n{root}}}\n"
    )
}

/// Whether the lowering sweeps the reduce as a column reduction (accumulators per input).
fn in_columns(text: &str) -> bool {
    let module = tessera_hlo::text::parse_module(text).unwrap();
    lower_module(&module, &LowerOptions::default()).unwrap().to_string().contains(".acc.1")
}

/// Column argmax and argmin (over dimension 0, the contiguous dimension kept) sweep the rows
/// with one accumulator per input, in the element-at-a-time form's order, so any reducer gives
/// its bits, JAX's and one breaking ties towards the later position alike; the positions read
/// alone or with the values.
#[test]
fn column_argmax_sweeps_rows_in_order_for_any_reducer() {
    let (rows, cols) = (40, 48);
    // The rows of `f32_rows` as columns: each column holds one hard case. Its signaling NaN
    // becomes a quiet one: the values are read too, and the interpreter, which holds floats as
    // f64, quiets a signaling NaN even where an op only moves it (the tiers keep its bits).
    let values: Vec<f32> = f32_rows(cols, rows)
        .into_iter()
        .map(|v| if v.is_nan() { f32::from_bits(v.to_bits() | 0x0040_0000) } else { v })
        .collect();
    let transposed: Vec<f32> = (0..rows * cols).map(|k| values[(k % cols) * rows + k / cols]).collect();
    let arg = Literal::from_vec(&[rows as i64, cols as i64], transposed).unwrap();
    for (dir, init, max) in [("GT", "-inf", true), ("LT", "inf", false)] {
        for both in [false, true] {
            let text = column_module("f32", rows, cols, init, &reducer("f32", "s32", dir, true, "LT"), both);
            assert!(in_columns(&text), "{dir} both={both}: not swept as columns");
            let out = agree(&text, std::slice::from_ref(&arg));
            let got = positions(out.last().unwrap());
            for c in 0..cols {
                let column: Vec<f64> = values[c * rows..(c + 1) * rows].iter().map(|&v| f64::from(v)).collect();
                assert_eq!(got[c], definition(&column, max), "{dir} both={both} column {c}: {column:?}");
            }
        }
        // Ties to the later position: order-dependent, still the interpreter's bits.
        let text = column_module("f32", rows, cols, init, &reducer("f32", "s32", dir, true, "GT"), true);
        assert!(in_columns(&text), "{dir} later ties: not swept as columns");
        agree(&text, std::slice::from_ref(&arg));
    }
    let ints: Vec<i32> = (0..rows * cols).map(|k| (k * 7 % 11) as i32 - 5).collect();
    let arg = Literal::from_vec(&[rows as i64, cols as i64], ints).unwrap();
    let text = column_module("s32", rows, cols, "-2147483648", &reducer("s32", "s32", "GT", false, "LT"), false);
    assert!(in_columns(&text), "s32: not swept as columns");
    agree(&text, std::slice::from_ref(&arg));
}
