//! Complex numbers (c64, c128) and fft through emit_kernel + the kernel interpreter, against
//! the reference interpreter: every complex op the interpreter has, data movement in
//! non-default and tiled layouts, reductions and dots, IEEE special values, and transforms
//! of sizes 1, prime, power of two, in one to three dimensions, batched.

mod support;

use support::{check, check_module_slack, check_slack, Rng};
use tessera_hlo::{ElementType, Literal, Module, Shape};

fn module(params: &[(&str, &str)], body: &str) -> String {
    let mut s = String::from("HloModule m\nENTRY e {\n");
    for (i, (name, shape)) in params.iter().enumerate() {
        s += &format!("  {name} = {shape} parameter({i})\n");
    }
    s + body + "\n}\n"
}

#[test]
fn elementwise_arithmetic_and_functions() {
    for c in ["c64", "c128"] {
        let ps = [("a", format!("{c}[3,5]{{1,0}}")), ("b", format!("{c}[3,5]{{0,1}}"))];
        let ps: Vec<(&str, &str)> = ps.iter().map(|(n, s)| (*n, s.as_str())).collect();
        for op in ["add", "subtract", "multiply", "divide", "power"] {
            check(&module(&ps, &format!("  ROOT r = {c}[3,5]{{1,0}} {op}(a, b)")));
        }
        for op in [
            "negate",
            "exponential",
            "log",
            "sqrt",
            "rsqrt",
            "exponential-minus-one",
            "log-plus-one",
            "sign",
            "sine",
            "cosine",
            "tanh",
        ] {
            check(&module(&ps[..1], &format!("  ROOT r = {c}[3,5]{{0,1}} {op}(a)")));
        }
    }
}

#[test]
fn parts_abs_compare_and_conversions() {
    let f = |c: &str| if c == "c64" { "f32" } else { "f64" };
    for c in ["c64", "c128"] {
        let r = f(c);
        let ps = [("a", format!("{c}[4,3]{{1,0}}")), ("b", format!("{c}[4,3]{{1,0}}"))];
        let ps: Vec<(&str, &str)> = ps.iter().map(|(n, s)| (*n, s.as_str())).collect();
        for op in ["real", "imag", "abs"] {
            check(&module(&ps[..1], &format!("  ROOT r = {r}[4,3]{{0,1}} {op}(a)")));
        }
        for dir in ["EQ", "NE"] {
            check(&module(&ps, &format!("  ROOT r = pred[4,3]{{1,0}} compare(a, b), direction={dir}")));
        }
        // Equal and NaN parts: compare a with itself and with a copy whose imaginary part is NaN.
        check(&module(
            &ps[..1],
            &format!(
                "  re = {r}[4,3]{{1,0}} real(a)\n  qnan = {r}[] constant(nan)\n  n = {r}[4,3]{{1,0}} broadcast(qnan), dimensions={{}}\n  z = {c}[4,3]{{1,0}} complex(re, n)\n  e1 = pred[4,3]{{1,0}} compare(a, a), direction=EQ\n  e2 = pred[4,3]{{1,0}} compare(a, z), direction=NE\n  ROOT t = (pred[4,3]{{1,0}}, pred[4,3]{{1,0}}) tuple(e1, e2)"
            ),
        ));
        check(&module(
            &[("x", &format!("{r}[6]{{0}}")), ("y", &format!("{r}[6]{{0}}"))],
            &format!("  ROOT z = {c}[6]{{0}} complex(x, y)"),
        ));
        for from in ["f32", "f64", "s32", "u8", "pred", "bf16", "s64", "c64", "c128"] {
            check(&module(&[("x", &format!("{from}[7]{{0}}"))], &format!("  ROOT z = {c}[7]{{0}} convert(x)")));
        }
        // Complex to real is refused by the verifier (as by XLA): real/imag say which part.
        let text = module(&ps[..1], "  ROOT z = f32[4,3]{1,0} convert(a)");
        let m = tessera_hlo::text::parse_module(&text).unwrap();
        assert!(tessera_hlo::verify::verify(&m).is_err());
    }
}

#[test]
fn data_movement_in_any_layout() {
    for c in ["c64", "c128"] {
        let cases = [
            format!("  p = {c}[4,6]{{0,1}} parameter(0)\n  ROOT r = {c}[6,4]{{1,0}} transpose(p), dimensions={{1,0}}"),
            format!("  p = {c}[4,6]{{1,0:T(2,2)}} parameter(0)\n  ROOT r = {c}[3,8]{{0,1}} reshape(p)"),
            format!("  p = {c}[6]{{0}} parameter(0)\n  ROOT r = {c}[5,6]{{0,1}} broadcast(p), dimensions={{1}}"),
            format!("  p = {c}[7,9]{{0,1}} parameter(0)\n  ROOT r = {c}[3,4]{{1,0}} slice(p), slice={{[1:7:2], [0:8:2]}}"),
            format!("  p = {c}[3,5]{{1,0}} parameter(0)\n  q = {c}[3,2]{{0,1}} parameter(1)\n  ROOT r = {c}[3,7]{{1,0:T(2,2)}} concatenate(p, q), dimensions={{1}}"),
            format!("  p = {c}[3,4]{{0,1}} parameter(0)\n  v = {c}[] parameter(1)\n  ROOT r = {c}[8,8]{{1,0}} pad(p, v), padding=1_2_1x0_1_1"),
            format!("  p = {c}[5,3]{{1,0}} parameter(0)\n  ROOT r = {c}[5,3]{{0,1}} reverse(p), dimensions={{0,1}}"),
            format!("  p = {c}[6,5]{{1,0}} parameter(0)\n  i = s32[] parameter(1)\n  j = s32[] parameter(2)\n  ROOT r = {c}[2,3]{{1,0}} dynamic-slice(p, i, j), dynamic_slice_sizes={{2,3}}"),
            format!("  p = {c}[6,5]{{0,1}} parameter(0)\n  u = {c}[2,2]{{1,0}} parameter(1)\n  i = s32[] parameter(2)\n  j = s32[] parameter(3)\n  ROOT r = {c}[6,5]{{0,1}} dynamic-update-slice(p, u, i, j)"),
            format!("  s = pred[4,5]{{1,0}} parameter(0)\n  a = {c}[4,5]{{0,1}} parameter(1)\n  b = {c}[4,5]{{1,0}} parameter(2)\n  ROOT r = {c}[4,5]{{1,0}} select(s, a, b)"),
            format!("  p = {c}[4,5]{{1,0}} parameter(0)\n  k = {c}[] constant((1.5, -2))\n  b = {c}[4,5]{{1,0}} broadcast(k), dimensions={{}}\n  ROOT r = {c}[4,5]{{0,1}} multiply(p, b)"),
            format!("  ROOT r = {c}[3,4]{{0,1}} iota(), iota_dimension=1"),
        ];
        for body in cases {
            check(&format!("HloModule m\nENTRY e {{\n{body}\n}}\n"));
        }
    }
}

#[test]
fn fused_chains_of_complex_ops() {
    // complex_basic's shape: parts built from real inputs, arithmetic, parts taken back.
    check(&module(
        &[("x", "f32[16,16]{1,0}"), ("y", "f32[16,16]{0,1}")],
        "  c = c64[16,16]{1,0} complex(x, y)\n  m = c64[16,16]{1,0} multiply(c, c)\n  n = f32[16,16]{1,0} negate(y)\n  d = c64[16,16]{1,0} complex(x, n)\n  k = c64[] constant((3, 0))\n  b = c64[16,16]{1,0} broadcast(k), dimensions={}\n  s = c64[16,16]{1,0} add(c, b)\n  q = c64[16,16]{1,0} divide(d, s)\n  a = c64[16,16]{1,0} add(m, q)\n  re = f32[16,16]{1,0} real(a)\n  im = f32[16,16]{1,0} imag(a)\n  ab = f32[16,16]{1,0} abs(c)\n  ROOT t = (f32[16,16]{1,0}, f32[16,16]{1,0}, f32[16,16]{1,0}, c64[16,16]{0,1}) tuple(re, im, ab, a)",
    ));
}

fn reducer(c: &str, op: &str) -> String {
    format!("r_{op} {{\n  x = {c}[] parameter(0)\n  y = {c}[] parameter(1)\n  ROOT z = {c}[] {op}(x, y)\n}}\n")
}

#[test]
fn reductions_and_dots() {
    for c in ["c64", "c128"] {
        for op in ["add", "multiply"] {
            for (dims, out) in [("{1}", "[4]{0}"), ("{0}", "[9]{0}"), ("{0,1}", "[]")] {
                check_slack(
                    &format!(
                        "HloModule m\n{}ENTRY e {{\n  p = {c}[4,9]{{0,1}} parameter(0)\n  z = {c}[] parameter(1)\n  ROOT r = {c}{out} reduce(p, z), dimensions={dims}, to_apply=r_{op}\n}}\n",
                        reducer(c, op)
                    ),
                    100.0,
                );
            }
        }
        let dots = [
            format!("  a = {c}[5,7]{{1,0}} parameter(0)\n  b = {c}[7,3]{{0,1}} parameter(1)\n  ROOT d = {c}[5,3]{{1,0}} dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"),
            format!("  a = {c}[2,5,7]{{2,1,0}} parameter(0)\n  b = {c}[2,7,3]{{2,1,0}} parameter(1)\n  ROOT d = {c}[2,5,3]{{0,1,2}} dot(a, b), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}"),
            format!("  a = {c}[64,40]{{1,0}} parameter(0)\n  b = {c}[40,48]{{1,0}} parameter(1)\n  ROOT d = {c}[64,48]{{1,0}} dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"),
        ];
        for body in dots {
            check_slack(&format!("HloModule m\nENTRY e {{\n{body}\n}}\n"), 1000.0);
        }
    }
}

/// Literals of complex (or float) parameters with chosen parts.
fn args_of(module: &Module, values: &[(f64, f64)]) -> Vec<Literal> {
    module
        .entry_comp()
        .parameter_shapes()
        .iter()
        .map(|s| {
            let a = s.as_array().expect("array");
            let n = a.dims.iter().product::<i64>() as usize;
            let bits: Vec<u128> = (0..n)
                .map(|i| {
                    let (re, im) = values[i % values.len()];
                    match a.element_type {
                        ElementType::C64 => {
                            u128::from((re as f32).to_bits()) | (u128::from((im as f32).to_bits()) << 32)
                        }
                        _ => u128::from(re.to_bits()) | (u128::from(im.to_bits()) << 64),
                    }
                })
                .collect();
            Literal::from_bits_vec(s.clone(), bits).expect("literal")
        })
        .collect()
}

#[test]
fn division_and_functions_at_zero_infinity_and_nan() {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    let specials = [0.0, -0.0, 1.0, -2.5, inf, -inf, nan, 1e-30, 3e30];
    let values: Vec<(f64, f64)> = specials.iter().flat_map(|&a| specials.iter().map(move |&b| (a, b))).collect();
    for c in ["c64", "c128"] {
        let n = values.len();
        // Every special over every special: a along rows, b along columns.
        let pairs = |op: &str| {
            module(
                &[("a", &format!("{c}[{n}]{{0}}")), ("b", &format!("{c}[{n}]{{0}}"))],
                &format!("  ba = {c}[{n},{n}]{{1,0}} broadcast(a), dimensions={{0}}\n  bb = {c}[{n},{n}]{{1,0}} broadcast(b), dimensions={{1}}\n  ROOT r = {c}[{n},{n}]{{1,0}} {op}(ba, bb)"),
            )
        };
        for op in ["divide", "power", "multiply"] {
            let m = tessera_hlo::text::parse_module(&pairs(op)).unwrap();
            check_module_slack(&m, &args_of(&m, &values), 1.0).unwrap_or_else(|e| panic!("{op}: {e}"));
        }
        for op in ["exponential", "log", "sqrt", "sign", "tanh", "sine", "rsqrt"] {
            let text = module(&[("a", &format!("{c}[{n}]{{0}}"))], &format!("  ROOT r = {c}[{n}]{{0}} {op}(a)"));
            let m = tessera_hlo::text::parse_module(&text).unwrap();
            check_module_slack(&m, &args_of(&m, &values), 1.0).unwrap_or_else(|e| panic!("{op}: {e}"));
        }
    }
}

/// Finite arguments in [-4, 4]: transforms mix every input into every output, so one
/// infinity makes NaNs whose placement depends on the algorithm.
fn finite_args(module: &Module, seed: u64) -> Vec<Literal> {
    let mut rng = Rng::new(seed);
    module
        .entry_comp()
        .parameter_shapes()
        .iter()
        .map(|s: &Shape| {
            let a = s.as_array().expect("array");
            let n = a.dims.iter().product::<i64>() as usize;
            let mut f = || rng.uniform(-4.0, 4.0);
            let bits: Vec<u128> = (0..n)
                .map(|_| match a.element_type {
                    ElementType::C64 => u128::from((f() as f32).to_bits()) | (u128::from((f() as f32).to_bits()) << 32),
                    ElementType::C128 => u128::from(f().to_bits()) | (u128::from(f().to_bits()) << 64),
                    ElementType::F32 => u128::from((f() as f32).to_bits()),
                    _ => u128::from(f().to_bits()),
                })
                .collect();
            Literal::from_bits_vec(s.clone(), bits).expect("literal")
        })
        .collect()
}

pub fn fft_cases() -> Vec<String> {
    let mut out = Vec::new();
    for (c, r) in [("c64", "f32"), ("c128", "f64")] {
        for (dims, len) in [
            ("[1]", "{1}"),
            ("[7]", "{7}"),
            ("[3,8]", "{8}"),
            ("[2,13]", "{13}"),
            ("[4,6]", "{4,6}"),
            ("[2,3,5]", "{3,5}"),
            ("[2,3,4,5]", "{3,4,5}"),
            ("[2,2,4,4]", "{2,4,4}"),
        ] {
            for kind in ["FFT", "IFFT"] {
                out.push(format!("  p = {c}{dims}{{{}}} parameter(0)\n  ROOT f = {c}{dims} fft(p), fft_type={kind}, fft_length={len}", layout_rev(dims)));
            }
        }
        // Real transforms: even and odd last lengths, one to three dimensions, batched.
        for (batch, lens) in [
            ("", vec![1i64]),
            ("3,", vec![5]),
            ("2,", vec![8]),
            ("", vec![4, 7]),
            ("2,", vec![3, 2, 5]),
            ("", vec![6, 6]),
        ] {
            let last = *lens.last().unwrap();
            let full: Vec<String> = lens.iter().map(|l| l.to_string()).collect();
            let mut half = full.clone();
            *half.last_mut().unwrap() = (last / 2 + 1).to_string();
            let (full, half) = (full.join(","), half.join(","));
            let len = format!("{{{full}}}");
            out.push(format!("  p = {r}[{batch}{full}] parameter(0)\n  ROOT f = {c}[{batch}{half}] fft(p), fft_type=RFFT, fft_length={len}"));
            out.push(format!("  p = {c}[{batch}{half}] parameter(0)\n  ROOT f = {r}[{batch}{full}] fft(p), fft_type=IRFFT, fft_length={len}"));
        }
    }
    out
}

/// The column-major layout of a shape's dims text, so operands are not all row-major.
fn layout_rev(dims: &str) -> String {
    let rank = dims.matches(',').count() + 1;
    (0..rank).map(|d| d.to_string()).collect::<Vec<_>>().join(",")
}

#[test]
fn fft_every_kind_and_size() {
    for body in fft_cases() {
        let text = format!("HloModule m\nENTRY e {{\n{body}\n}}\n");
        let m = tessera_hlo::text::parse_module(&text).unwrap_or_else(|e| panic!("parse: {e}\n{text}"));
        for seed in [1, 2] {
            check_module_slack(&m, &finite_args(&m, seed), 1000.0).unwrap_or_else(|e| panic!("{e}\n{text}"));
        }
    }
}

#[test]
fn fft_in_a_tiled_layout_and_unsupported_forms() {
    let text = "HloModule m\nENTRY e {\n  p = c64[5,8]{1,0:T(2,4)} parameter(0)\n  ROOT f = c64[5,8]{0,1} fft(p), fft_type=FFT, fft_length={8}\n}\n";
    let m = tessera_hlo::text::parse_module(text).unwrap();
    check_module_slack(&m, &finite_args(&m, 3), 1000.0).unwrap_or_else(|e| panic!("{e}"));
    // A complex op the interpreter has no semantics for is a clear error naming the op.
    let text = "HloModule m\nENTRY e {\n  p = c64[4]{0} parameter(0)\n  ROOT t = c64[4]{0} tan(p)\n}\n";
    let m = tessera_hlo::text::parse_module(text).unwrap();
    let err = tessera_lower::emit_kernel(&m, m.entry_comp(), "k").unwrap_err().to_string();
    assert!(err.contains("tan") && err.contains("complex"), "{err}");
}
