//! sort and topk on both JIT tiers against the reference interpreter, bit for bit, on what the
//! corpus does not cover: row lengths 0, 1, 2, odd and 10,000; NaNs of both signs and payloads,
//! infinities and signed zeros under TOTALORDER and IEEE comparators; descending orders;
//! three operands with a lexicographic comparator that calls another computation; sorting
//! along major and middle dimensions of rank-3 arrays; column-major, tiled and packed layouts;
//! every element type the lowering has. Beyond agreeing with the interpreter, the results
//! are checked to be sorted, stable permutations of the input (a property the interpreter
//! could get wrong too).

use tessera_hlo::{ElementType, Literal, Shape};
use tessera_testkit::Rng;

mod tier_support;
use tier_support::agree;

/// Raw bits of a random element of `et`: mostly a few distinct small values (so ties are
/// common), sometimes a special value of the type (NaNs with sign and payload, infinities,
/// signed zeros, denormals, extreme integers).
fn random_bits(et: ElementType, rng: &mut Rng) -> u128 {
    let special = rng.below(4) == 0;
    let small = rng.below(9) as i64 - 4;
    match et {
        ElementType::F32 => {
            const S: [u32; 9] =
                [0x7fc0_0000, 0xffc0_0000, 0x7fc0_1234, 0x7f80_0000, 0xff80_0000, 0, 0x8000_0000, 1, 0x8000_0001];
            let b = if special { S[rng.below(9) as usize] } else { (small as f32 * 0.5).to_bits() };
            u128::from(b)
        }
        ElementType::F64 => {
            const S: [u64; 7] = [
                0x7ff8_0000_0000_0000,
                0xfff8_0000_0000_0001,
                0x7ff0_0000_0000_0000,
                0xfff0_0000_0000_0000,
                0,
                1 << 63,
                1,
            ];
            let b = if special { S[rng.below(7) as usize] } else { (small as f64 * 0.25).to_bits() };
            u128::from(b)
        }
        ElementType::F16 => {
            const S: [u16; 7] = [0x7e00, 0xfe00, 0x7c00, 0xfc00, 0, 0x8000, 1];
            let b = if special { S[rng.below(7) as usize] } else { half::f16::from_f64(small as f64 * 0.5).to_bits() };
            u128::from(b)
        }
        ElementType::BF16 => {
            const S: [u16; 7] = [0x7fc0, 0xffc0, 0x7f80, 0xff80, 0, 0x8000, 1];
            let b = if special { S[rng.below(7) as usize] } else { half::bf16::from_f64(small as f64 * 0.5).to_bits() };
            u128::from(b)
        }
        ElementType::Pred => u128::from(rng.below(2)),
        t if t.is_integral() => {
            let w = t.bit_width();
            let mask = if w >= 128 { u128::MAX } else { (1u128 << w) - 1 };
            let v: i128 = if special {
                match rng.below(3) {
                    0 if t.is_signed_integral() => -(1i128 << (w - 1)),
                    0 => 0,
                    1 if t.is_signed_integral() => (1i128 << (w - 1)) - 1,
                    _ => (1i128 << w) - 1,
                }
            } else {
                i128::from(small)
            };
            (v as u128) & mask
        }
        t => panic!("no generator for {t:?}"),
    }
}

fn random_literal(shape: &str, rng: &mut Rng) -> Literal {
    let shape: Shape = shape.parse().unwrap();
    let n = shape.as_array().unwrap().element_count().unwrap() as usize;
    let et = shape.element_type();
    let bits = (0..n).map(|_| random_bits(et, rng)).collect();
    Literal::from_bits_vec(shape.without_layout(), bits).unwrap()
}

/// A sort module over operands of the given shapes (with layouts; the results take the
/// `results` shapes) along `dim`, with comparator `cmp` given as the body of a computation
/// named `cmp` (and any helper computations before it).
fn sort_module(operands: &[&str], results: &[&str], dim: usize, comparator: &str) -> String {
    let params: Vec<String> =
        operands.iter().enumerate().map(|(i, s)| format!("  p{i} = {s} parameter({i})")).collect();
    let names: Vec<String> = (0..operands.len()).map(|i| format!("p{i}")).collect();
    let result = if results.len() == 1 { results[0].to_string() } else { format!("({})", results.join(", ")) };
    format!(
        "HloModule sort_test, entry_computation_layout={{({})->{result}}}\n\n{comparator}\n\nENTRY e {{\n{}\n  ROOT s = {result} sort({}), dimensions={{{dim}}}, is_stable=true, to_apply=cmp\n}}\n",
        operands.join(", "),
        params.join("\n"),
        names.join(", ")
    )
}

/// `cmp(a, b) = a <dir> b` on operand `key` of `types.len()` operands.
fn simple_cmp(types: &[&str], key: usize, dir: &str, total: bool) -> String {
    let params: Vec<String> = types
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            [format!("  a{i} = {t}[] parameter({})", 2 * i), format!("  b{i} = {t}[] parameter({})", 2 * i + 1)]
        })
        .collect();
    let ty = if total { ", type=TOTALORDER" } else { "" };
    format!("cmp {{\n{}\n  ROOT c = pred[] compare(a{key}, b{key}), direction={dir}{ty}\n}}", params.join("\n"))
}

/// JAX's comparator: NaNs made one NaN and -0 made +0, then a TOTALORDER less-than.
fn jax_cmp(t: &str) -> String {
    format!(
        "cmp {{
  a = {t}[] parameter(0)
  a_nan = pred[] compare(a, a), direction=NE
  qnan = {t}[] constant(nan)
  zero = {t}[] constant(0)
  a_zero = pred[] compare(a, zero), direction=EQ
  a1 = {t}[] select(a_zero, zero, a)
  a2 = {t}[] select(a_nan, qnan, a1)
  b = {t}[] parameter(1)
  b_nan = pred[] compare(b, b), direction=NE
  b_zero = pred[] compare(b, zero), direction=EQ
  b1 = {t}[] select(b_zero, zero, b)
  b2 = {t}[] select(b_nan, qnan, b1)
  ROOT lt = pred[] compare(a2, b2), direction=LT, type=TOTALORDER
}}"
    )
}

/// Checks that `sorted` is a stable sort of `input` along the last dimension of a 2-D
/// row-major view (`rows` x `n`), ordered by `key` (an order on raw bits), with `payload`
/// the permutation the sort applied (the sorted iota).
fn check_stable_rows(
    input: &[u128],
    sorted: &[u128],
    payload: &[u128],
    rows: usize,
    n: usize,
    key: impl Fn(u128) -> i128,
) {
    for r in 0..rows {
        let row = &sorted[r * n..(r + 1) * n];
        let perm: Vec<usize> = payload[r * n..(r + 1) * n].iter().map(|&p| p as usize).collect();
        let mut seen = vec![false; n];
        for (i, &p) in perm.iter().enumerate() {
            assert!(p < n && !seen[p], "row {r}: not a permutation");
            seen[p] = true;
            assert_eq!(row[i], input[r * n + p], "row {r}: value does not travel with its index");
        }
        for i in 1..n {
            let (a, b) = (key(row[i - 1]), key(row[i]));
            assert!(a <= b, "row {r}: not sorted at {i}");
            if a == b {
                assert!(perm[i - 1] < perm[i], "row {r}: equal keys out of input order at {i}");
            }
        }
    }
}

/// IEEE totalOrder of f32 bits as an integer key.
fn f32_total(bits: u128) -> i128 {
    let b = bits as u32 as i32;
    i128::from(b ^ (((b >> 31) as u32) >> 1) as i32)
}

#[test]
fn f32_total_order_lengths_from_empty_to_ten_thousand() {
    let mut rng = Rng::new(0x5eed_0001);
    for n in [0i64, 1, 2, 3, 7, 33, 64, 100, 10_000] {
        let s = format!("f32[{n}]{{0}}");
        let iota_s = format!("s32[{n}]{{0}}");
        let text = sort_module(&[&s, &iota_s], &[&s, &iota_s], 0, &simple_cmp(&["f32", "s32"], 0, "LT", true));
        let x = random_literal(&s, &mut rng);
        let iota = Literal::from_vec(&[n], (0..n as i32).collect::<Vec<i32>>()).unwrap();
        let out = agree(&text, &[x.clone(), iota]);
        let n = n as usize;
        check_stable_rows(
            &x.to_bits_vec().unwrap(),
            &out[0].to_bits_vec().unwrap(),
            &out[1].to_bits_vec().unwrap(),
            1,
            n,
            f32_total,
        );
    }
}

#[test]
fn jax_comparator_canonicalizes_nans_and_zeros() {
    let mut rng = Rng::new(0x5eed_0002);
    for (t, n) in [("f32", 513i64), ("f64", 77), ("f16", 130), ("bf16", 129)] {
        let s = format!("{t}[3,{n}]{{1,0}}");
        let text = sort_module(&[&s], &[&s], 1, &jax_cmp(t));
        agree(&text, &[random_literal(&s, &mut rng)]);
    }
}

#[test]
fn ieee_comparators_ascending_and_descending_on_every_element_type() {
    let mut rng = Rng::new(0x5eed_0003);
    let types = ["pred", "s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64", "f16", "bf16", "f32", "f64"];
    for t in types {
        for dir in ["LT", "GT"] {
            for total in [false, true] {
                if total && !matches!(t, "f16" | "bf16" | "f32" | "f64") {
                    continue;
                }
                let s = format!("{t}[5,41]{{1,0}}");
                let text = sort_module(&[&s], &[&s], 1, &simple_cmp(&[t], 0, dir, total));
                agree(&text, &[random_literal(&s, &mut rng)]);
            }
        }
    }
}

#[test]
fn three_operands_with_a_lexicographic_comparator_that_calls_a_computation() {
    let mut rng = Rng::new(0x5eed_0004);
    // Ordered by operand 2 (u8, descending), ties by operand 0 (f32, total order); operand 1
    // only travels along. The tie-break lives in a called computation.
    let comparator = "tie {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT lt = pred[] compare(x, y), direction=LT, type=TOTALORDER
}

cmp {
  a0 = f32[] parameter(0)
  b0 = f32[] parameter(1)
  a1 = s64[] parameter(2)
  b1 = s64[] parameter(3)
  a2 = u8[] parameter(4)
  b2 = u8[] parameter(5)
  gt = pred[] compare(a2, b2), direction=GT
  eq = pred[] compare(a2, b2), direction=EQ
  lt0 = pred[] call(a0, b0), to_apply=tie
  both = pred[] and(eq, lt0)
  ROOT r = pred[] or(gt, both)
}";
    for (dims, dim) in [("17", 0usize), ("6,45", 1), ("6,45", 0), ("4,9,11", 1)] {
        let shapes: Vec<String> = ["f32", "s64", "u8"]
            .iter()
            .map(|t| {
                let rank = dims.split(',').count();
                let layout: Vec<String> = (0..rank).rev().map(|d| d.to_string()).collect();
                format!("{t}[{dims}]{{{}}}", layout.join(","))
            })
            .collect();
        let s: Vec<&str> = shapes.iter().map(String::as_str).collect();
        let text = sort_module(&s, &s, dim, comparator);
        let args: Vec<Literal> = s.iter().map(|s| random_literal(s, &mut rng)).collect();
        agree(&text, &args);
    }
}

#[test]
fn non_minor_dimensions_and_non_default_layouts() {
    let mut rng = Rng::new(0x5eed_0005);
    let cases: [(&str, &str, usize); 7] = [
        ("f32[4,37,5]{2,1,0}", "f32[4,37,5]{2,1,0}", 1),
        ("f32[4,37,5]{2,1,0}", "f32[4,37,5]{0,1,2}", 0),
        ("f32[4,37,5]{0,2,1}", "f32[4,37,5]{1,0,2}", 2),
        ("f32[37,6]{0,1}", "f32[37,6]{1,0}", 0),
        ("f32[19,37]{1,0:T(8,128)}", "f32[19,37]{0,1:T(4,8)}", 1),
        ("bf16[10,300]{1,0:T(8,128)(2,1)}", "bf16[10,300]{1,0:T(8,128)(2,1)}", 1),
        ("s32[9,13]{0,1:T(2,4)}", "s32[9,13]{1,0:T(8,8)}", 0),
    ];
    for (operand, result, dim) in cases {
        let t = &operand[..operand.find('[').unwrap()];
        let total = matches!(t, "f32" | "bf16");
        let text = sort_module(&[operand], &[result], dim, &simple_cmp(&[t], 0, "LT", total));
        agree(&text, &[random_literal(operand, &mut rng)]);
    }
}

#[test]
fn packed_pred_results_and_multi_operand_layouts() {
    let mut rng = Rng::new(0x5eed_0006);
    // A packed pred result is written read-modify-write: every row must still land.
    let keys = "s8[7,29]{1,0}";
    let flags = "pred[7,29]{1,0}";
    let flags_packed = "pred[7,29]{1,0:E(1)}";
    let text =
        sort_module(&[keys, flags], &["s8[7,29]{0,1}", flags_packed], 1, &simple_cmp(&["s8", "pred"], 0, "LT", false));
    agree(&text, &[random_literal(keys, &mut rng), random_literal(flags, &mut rng)]);
}

#[test]
fn stability_with_many_equal_keys_in_every_row() {
    let mut rng = Rng::new(0x5eed_0007);
    let (rows, n) = (12usize, 250usize);
    let s = format!("s32[{rows},{n}]{{1,0}}");
    let text = sort_module(&[&s, &s], &[&s, &s], 1, &simple_cmp(&["s32", "s32"], 0, "LT", false));
    let keys: Vec<i32> = (0..rows * n).map(|_| rng.below(3) as i32).collect();
    let payload: Vec<i32> = (0..rows * n).map(|i| (i % n) as i32).collect();
    let keys = Literal::from_vec(&[rows as i64, n as i64], keys).unwrap();
    let payload = Literal::from_vec(&[rows as i64, n as i64], payload).unwrap();
    let out = agree(&text, &[keys.clone(), payload]);
    check_stable_rows(
        &keys.to_bits_vec().unwrap(),
        &out[0].to_bits_vec().unwrap(),
        &out[1].to_bits_vec().unwrap(),
        rows,
        n,
        |b| i128::from(b as u32 as i32),
    );
}

/// A topk module over `operand` with results `values`/`indices` shapes.
fn topk_module(operand: &str, values: &str, indices: &str, k: i64, largest: Option<bool>) -> String {
    let largest = largest.map_or(String::new(), |l| format!(", largest={l}"));
    format!(
        "HloModule topk_test, entry_computation_layout={{({operand})->({values}, {indices})}}\n\nENTRY e {{\n  x = {operand} parameter(0)\n  t = ({values}, {indices}) topk(x), k={k}{largest}\n  v = {values} get-tuple-element(t), index=0\n  i = {indices} get-tuple-element(t), index=1\n  ROOT r = ({values}, {indices}) tuple(v, i)\n}}\n"
    )
}

#[test]
fn topk_largest_and_smallest_with_ties_and_nans() {
    let mut rng = Rng::new(0x5eed_0008);
    for t in ["f32", "f64", "f16", "bf16", "s32", "u8", "s64", "pred"] {
        for (n, k) in [(1i64, 1i64), (2, 1), (9, 0), (9, 9), (100, 5), (1000, 16), (1000, 17)] {
            for largest in [None, Some(false), Some(true)] {
                let x = format!("{t}[3,{n}]{{1,0}}");
                let v = format!("{t}[3,{k}]{{1,0}}");
                let i = format!("s32[3,{k}]{{1,0}}");
                let text = topk_module(&x, &v, &i, k, largest);
                let arg = random_literal(&x, &mut rng);
                let out = agree(&text, &[arg.clone()]);
                // The indices point at the values, and ties keep the lower index first.
                let (xs, vs, is) =
                    (arg.to_bits_vec().unwrap(), out[0].to_bits_vec().unwrap(), out[1].to_bits_vec().unwrap());
                let (n, k) = (n as usize, k as usize);
                for r in 0..3 {
                    for c in 0..k {
                        let p = is[r * k + c] as usize;
                        assert!(p < n, "{text}");
                        assert_eq!(vs[r * k + c], xs[r * n + p], "{text}");
                        if c > 0 && vs[r * k + c] == vs[r * k + c - 1] {
                            assert!(is[r * k + c - 1] < is[r * k + c] as u128, "{text}");
                        }
                    }
                }
            }
        }
    }
}

/// Rows in order and reversed: a topk of the largest inserts every element of an ascending
/// row (every block of the selection's filter finds one that enters) and only the first 16 of
/// a descending one (every later block is skipped whole); a row that turns halfway does both.
#[test]
fn topk_of_rows_in_order_reversed_and_turning() {
    let (rows, n, k) = (3usize, 1000usize, 16i64);
    let mut values = Vec::with_capacity(rows * n);
    for i in 0..n {
        values.push(i as f32 * 0.5);
    }
    for i in 0..n {
        values.push((n - i) as f32 * 0.25 - 7.0);
    }
    for i in 0..n {
        values.push(if i < n / 2 { -(i as f32) } else { i as f32 });
    }
    let x = Literal::from_vec(&[rows as i64, n as i64], values.clone()).unwrap();
    for largest in [true, false] {
        let text = topk_module("f32[3,1000]{1,0}", "f32[3,16]{1,0}", "s32[3,16]{1,0}", k, Some(largest));
        let out = agree(&text, &[x.clone()]);
        let is = out[1].to_bits_vec().unwrap();
        for r in 0..rows {
            let mut want: Vec<usize> = (0..n).collect();
            want.sort_by(|&a, &b| {
                let (va, vb) = (values[r * n + a], values[r * n + b]);
                let o = va.total_cmp(&vb);
                (if largest { o.reverse() } else { o }).then(a.cmp(&b))
            });
            let got: Vec<usize> = (0..k as usize).map(|c| is[r * k as usize + c] as usize).collect();
            assert_eq!(got, want[..k as usize], "row {r}, largest {largest}");
        }
    }
}

#[test]
fn topk_on_rank_three_and_non_default_layouts() {
    let mut rng = Rng::new(0x5eed_0009);
    let cases = [
        ("f32[2,3,50]{2,1,0}", "f32[2,3,4]{2,1,0}", "s32[2,3,4]{2,1,0}", 4),
        ("f32[2,3,50]{0,1,2}", "f32[2,3,7]{1,2,0}", "s32[2,3,7]{0,2,1}", 7),
        ("bf16[9,300]{1,0:T(8,128)(2,1)}", "bf16[9,5]{0,1}", "s32[9,5]{1,0:T(2,4)}", 5),
        ("s16[31,7]{0,1}", "s16[31,7]{0,1}", "s32[31,7]{1,0}", 7),
    ];
    for (x, v, i, k) in cases {
        let text = topk_module(x, v, i, k, None);
        agree(&text, &[random_literal(x, &mut rng)]);
    }
}

/// XLA:CPU's `TopK` custom-call with the comparator it emits (a total order spelled with
/// scalar bitcasts), or one that also reads the indices (ties broken toward the higher index).
#[test]
fn topk_custom_call_with_value_and_index_comparators() {
    let mut rng = Rng::new(0x5eed_000a);
    let by_value = "cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ia = s32[] parameter(2)
  ib = s32[] parameter(3)
  zero = s32[] constant(0)
  max = s32[] constant(2147483647)
  ba = s32[] bitcast(a)
  bb = s32[] bitcast(b)
  xa = s32[] xor(max, ba)
  na = pred[] compare(ba, zero), direction=LT
  xb = s32[] xor(max, bb)
  nb = pred[] compare(bb, zero), direction=LT
  ka = s32[] select(na, xa, ba)
  kb = s32[] select(nb, xb, bb)
  ROOT gt = pred[] compare(ka, kb), direction=GT
}";
    let by_index = "cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ia = s32[] parameter(2)
  ib = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  later = pred[] compare(ia, ib), direction=GT
  tie = pred[] and(eq, later)
  ROOT r = pred[] or(gt, tie)
}";
    let values_only = "cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT, type=TOTALORDER
}";
    for (comparator, n, k) in [(by_value, 100i64, 5i64), (by_index, 57, 57), (values_only, 33, 8), (by_value, 1, 1)] {
        let text = format!(
            "HloModule topk_cc, entry_computation_layout={{(f32[4,{n}]{{1,0}})->(f32[4,{k}]{{1,0}}, s32[4,{k}]{{1,0}})}}\n\n{comparator}\n\nENTRY e {{\n  x = f32[4,{n}]{{1,0}} parameter(0)\n  ROOT t = (f32[4,{k}]{{1,0}}, s32[4,{k}]{{1,0}}) custom-call(x), custom_call_target=\"TopK\", called_computations={{cmp}}\n}}\n"
        );
        agree(&text, &[random_literal(&format!("f32[4,{n}]{{1,0}}"), &mut rng)]);
    }
}
