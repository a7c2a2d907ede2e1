//! Complex numbers and fft on both JIT tiers against the reference interpreter, on shapes and
//! layouts the corpus does not have: c64 and c128, column-major and tiled layouts, fused
//! chains, reductions and dots, IEEE special values, and transforms of sizes 1, prime and
//! powers of two in one to three dimensions, batched, with odd real lengths.

use tessera::{Backend, Client, CompileOptions};
use tessera_hlo::{ElementType, Literal, Shape};
use tessera_testkit::Rng;

/// In [-4, 4), or with `specials` now and then a zero, infinity, NaN or tiny value.
fn float(rng: &mut Rng, specials: bool) -> f64 {
    if specials && rng.below(12) == 0 {
        return *rng.pick(&[0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-30]);
    }
    rng.uniform(-4.0, 4.0)
}

fn random_literal(shape: &Shape, rng: &mut Rng, specials: bool) -> Literal {
    let a = shape.as_array().expect("array parameter");
    let n = a.dims.iter().product::<i64>() as usize;
    let bits = (0..n)
        .map(|_| match a.element_type {
            ElementType::C64 => {
                u128::from((float(rng, specials) as f32).to_bits())
                    | (u128::from((float(rng, specials) as f32).to_bits()) << 32)
            }
            ElementType::C128 => {
                u128::from(float(rng, specials).to_bits()) | (u128::from(float(rng, specials).to_bits()) << 64)
            }
            ElementType::F32 => u128::from((float(rng, specials) as f32).to_bits()),
            ElementType::F64 => u128::from(float(rng, specials).to_bits()),
            ElementType::Pred => u128::from(rng.bool()),
            ElementType::S32 => u128::from(rng.below(9) as u32),
            t => panic!("no generator for {t:?}"),
        })
        .collect();
    Literal::from_bits_vec(shape.clone(), bits).expect("literal")
}

/// The floats of a literal (complex elements as two), or `None` for other types.
fn floats(lit: &Literal) -> Option<Vec<f64>> {
    let n = lit.element_count();
    let bits: Vec<u128> = (0..n).map(|i| lit.get_bits(i).expect("element")).collect();
    Some(match lit.element_type() {
        ElementType::F32 => bits.iter().map(|&b| f64::from(f32::from_bits(b as u32))).collect(),
        ElementType::F64 => bits.iter().map(|&b| f64::from_bits(b as u64)).collect(),
        ElementType::C64 => bits
            .iter()
            .flat_map(|&b| [f64::from(f32::from_bits(b as u32)), f64::from(f32::from_bits((b >> 32) as u32))])
            .collect(),
        ElementType::C128 => {
            bits.iter().flat_map(|&b| [f64::from_bits(b as u64), f64::from_bits((b >> 64) as u64)]).collect()
        }
        _ => return None,
    })
}

/// Compiles `text` on every backend, runs each on the same arguments, and checks both tiers
/// against the interpreter: floats within `rtol` of the larger magnitude plus `atol` times
/// the output's largest finite magnitude; other types bit for bit.
fn check(text: &str, specials: bool, rtol: f64, atol: f64) {
    let opts = CompileOptions::default();
    let compile =
        |b: Backend| Client::new(b).unwrap().compile_text(text, &opts).unwrap_or_else(|e| panic!("{b}: {e}\n{text}"));
    let reference = compile(Backend::Interp);
    let module = tessera_hlo::text::parse_module(text).unwrap();
    let params = module.entry_comp().parameter_shapes();
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let exe = compile(backend);
        for seed in [7u64, 8] {
            let mut rng = Rng::new(seed);
            let args: Vec<Literal> = params.iter().map(|s| random_literal(s, &mut rng, specials)).collect();
            let want = reference.run(&args).unwrap_or_else(|e| panic!("interp: {e}\n{text}"));
            let got = exe.run(&args).unwrap_or_else(|e| panic!("{backend}: {e}\n{text}"));
            assert_eq!(got.len(), want.len());
            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                match (floats(g), floats(w)) {
                    (Some(g), Some(w)) => {
                        let scale = w.iter().filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs()));
                        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                            let ok = (a.is_nan() && b.is_nan())
                                || a == b
                                || (a - b).abs() <= rtol * a.abs().max(b.abs()) + atol * scale;
                            assert!(ok, "{backend}, output {o}, float {i}: got {a}, want {b}\n{text}");
                        }
                    }
                    _ => assert!(g.eq_ignoring_layout(w), "{backend}, output {o}: {g:?} vs {w:?}\n{text}"),
                }
            }
        }
    }
}

fn entry(body: &str) -> String {
    format!("HloModule m\nENTRY e {{\n{body}\n}}\n")
}

#[test]
fn elementwise_ops_with_special_values() {
    for (c, r, rtol) in [("c64", "f32", 1e-6), ("c128", "f64", 1e-13)] {
        let mut body = format!("  a = {c}[5,7]{{0,1}} parameter(0)\n  b = {c}[5,7]{{1,0}} parameter(1)\n");
        let mut outs = Vec::new();
        for op in ["add", "subtract", "multiply", "divide", "power"] {
            body += &format!("  {op} = {c}[5,7]{{1,0}} {op}(a, b)\n");
            outs.push((op.to_string(), c));
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
            // Instruction names like `log` would name kernels after libm symbols.
            let name = format!("u_{}", op.replace('-', "_"));
            body += &format!("  {name} = {c}[5,7]{{1,0}} {op}(a)\n");
            outs.push((name, c));
        }
        for op in ["real", "imag", "abs"] {
            body += &format!("  {op} = {r}[5,7]{{1,0}} {op}(a)\n");
            outs.push((op.to_string(), r));
        }
        body += &format!("  eq = pred[5,7]{{1,0}} compare(a, b), direction=EQ\n  ne = pred[5,7]{{1,0}} compare(a, a), direction=NE\n");
        outs.push(("eq".into(), "pred"));
        outs.push(("ne".into(), "pred"));
        let shapes: Vec<String> = outs.iter().map(|(_, t)| format!("{t}[5,7]")).collect();
        let names: Vec<&str> = outs.iter().map(|(n, _)| n.as_str()).collect();
        body += &format!("  ROOT t = ({}) tuple({})", shapes.join(", "), names.join(", "));
        check(&entry(&body), true, rtol, 0.0);
    }
}

#[test]
fn conversions_parts_and_data_movement_in_tiled_layouts() {
    for (c, r, rtol) in [("c64", "f32", 1e-6), ("c128", "f64", 1e-13)] {
        check(
            &entry(&format!(
                "  x = {r}[6,8]{{1,0:T(2,4)}} parameter(0)\n  y = {r}[6,8]{{0,1}} parameter(1)\n  s = s32[6,8]{{1,0}} parameter(2)\n  z = {c}[6,8]{{1,0:T(2,2)}} complex(x, y)\n  w = {c}[6,8]{{1,0}} convert(s)\n  m = {c}[6,8]{{0,1}} multiply(z, w)\n  t = {c}[8,6]{{1,0}} transpose(m), dimensions={{1,0}}\n  k = {c}[] constant((0.5, -1))\n  p = {c}[11,12]{{0,1}} pad(t, k), padding=1_2x0_1_1\n  sl = {c}[5,12]{{1,0}} slice(p), slice={{[0:10:2], [0:12]}}\n  rs = {c}[60]{{0}} reshape(sl)\n  cc = {c}[120]{{0}} concatenate(rs, rs), dimensions={{0}}\n  cv = c128[120]{{0}} convert(cc)\n  tt = {c}[8,6]{{0,1:T(2,2)}} copy(t)\n  ROOT o = (c128[120]{{0}}, {c}[8,6]{{0,1:T(2,2)}}) tuple(cv, tt)"
            )),
            true,
            rtol,
            0.0,
        );
    }
}

#[test]
fn reductions_and_dots() {
    for (c, rtol) in [("c64", 1e-5), ("c128", 1e-12)] {
        for op in ["add", "multiply"] {
            let text = format!(
                "HloModule m\nr {{\n  x = {c}[] parameter(0)\n  y = {c}[] parameter(1)\n  ROOT z = {c}[] {op}(x, y)\n}}\nENTRY e {{\n  p = {c}[6,9]{{0,1}} parameter(0)\n  z = {c}[] constant((1, 0))\n  r1 = {c}[6]{{0}} reduce(p, z), dimensions={{1}}, to_apply=r\n  r0 = {c}[9]{{0}} reduce(p, z), dimensions={{0}}, to_apply=r\n  ROOT t = ({c}[6]{{0}}, {c}[9]{{0}}) tuple(r1, r0)\n}}\n"
            );
            check(&text, false, rtol, rtol);
        }
        check(
            &entry(&format!(
                "  a = {c}[3,5,7]{{2,1,0}} parameter(0)\n  b = {c}[3,7,4]{{1,2,0}} parameter(1)\n  ROOT d = {c}[3,5,4]{{0,1,2}} dot(a, b), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}"
            )),
            false,
            rtol,
            rtol,
        );
        check(
            &entry(&format!(
                "  a = {c}[48,40]{{1,0}} parameter(0)\n  b = {c}[40,36]{{1,0}} parameter(1)\n  ROOT d = {c}[48,36]{{1,0}} dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"
            )),
            false,
            rtol,
            rtol,
        );
    }
}

#[test]
fn fft_kinds_sizes_and_layouts() {
    for (c, r, tol) in [("c64", "f32", 1e-5), ("c128", "f64", 1e-12)] {
        for (dims, layout, len) in [
            ("[1]", "{0}", "{1}"),
            ("[3,7]", "{0,1}", "{7}"),
            ("[2,16]", "{1,0}", "{16}"),
            ("[6,10]", "{1,0:T(2,4)}", "{6,10}"),
            ("[2,3,4,5]", "{3,2,1,0}", "{3,4,5}"),
            ("[4,8,8]", "{0,1,2}", "{4,8,8}"),
        ] {
            for kind in ["FFT", "IFFT"] {
                check(
                    &entry(&format!(
                        "  p = {c}{dims}{layout} parameter(0)\n  ROOT f = {c}{dims}{layout} fft(p), fft_type={kind}, fft_length={len}"
                    )),
                    false,
                    tol,
                    tol,
                );
            }
        }
        for (inp, out, len) in [
            ("[3,5]", "[3,3]", "{5}"),
            ("[8]", "[5]", "{8}"),
            ("[1]", "[1]", "{1}"),
            ("[4,7]", "[4,4]", "{4,7}"),
            ("[2,3,2,9]", "[2,3,2,5]", "{3,2,9}"),
        ] {
            check(
                &entry(&format!(
                    "  p = {r}{inp}{{0{}}} parameter(0)\n  ROOT f = {c}{out} fft(p), fft_type=RFFT, fft_length={len}",
                    (1..inp.matches(',').count() + 1).map(|d| format!(",{d}")).collect::<String>()
                )),
                false,
                tol,
                tol,
            );
            check(
                &entry(&format!(
                    "  p = {c}{out} parameter(0)\n  ROOT f = {r}{inp} fft(p), fft_type=IRFFT, fft_length={len}"
                )),
                false,
                tol,
                tol,
            );
        }
    }
}

#[test]
fn gather_sort_payloads_and_windows() {
    for (c, r, rtol) in [("c64", "f32", 1e-5), ("c128", "f64", 1e-12)] {
        // Gather rows of a tiled complex operand (indices out of range are clamped).
        check(
            &entry(&format!(
                "  p = {c}[7,6]{{1,0:T(2,4)}} parameter(0)\n  i = s32[4,1]{{0,1}} parameter(1)\n  ROOT g = {c}[4,6]{{0,1}} gather(p, i), offset_dims={{1}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,6}}"
            )),
            true,
            0.0,
            0.0,
        );
        // Sort by real keys with a complex payload, along both dimensions.
        for d in [0, 1] {
            check(
                &format!(
                    "HloModule m\ncmp {{\n  a = {r}[] parameter(0)\n  b = {r}[] parameter(1)\n  x = {c}[] parameter(2)\n  y = {c}[] parameter(3)\n  ROOT lt = pred[] compare(a, b), direction=LT\n}}\nENTRY e {{\n  k = {r}[5,9]{{0,1}} parameter(0)\n  v = {c}[5,9]{{1,0}} parameter(1)\n  ROOT s = ({r}[5,9]{{1,0}}, {c}[5,9]{{0,1}}) sort(k, v), dimensions={{{d}}}, is_stable=true, to_apply=cmp\n}}\n"
                ),
                false,
                0.0,
                0.0,
            );
        }
        // Sorting complex keys (by real part, ties by imaginary part) with a real payload, and
        // a comparator that is not an order at all (NE), which must still give the
        // interpreter's permutation.
        check(
            &format!(
                "HloModule m\ncmp {{\n  a = {c}[] parameter(0)\n  b = {c}[] parameter(1)\n  x = {r}[] parameter(2)\n  y = {r}[] parameter(3)\n  ra = {r}[] real(a)\n  rb = {r}[] real(b)\n  ia = {r}[] imag(a)\n  ib = {r}[] imag(b)\n  lt = pred[] compare(ra, rb), direction=LT\n  eq = pred[] compare(ra, rb), direction=EQ\n  ilt = pred[] compare(ia, ib), direction=LT\n  tie = pred[] and(eq, ilt)\n  ROOT o = pred[] or(lt, tie)\n}}\nENTRY e {{\n  k = {c}[4,7]{{0,1:T(2,2)}} parameter(0)\n  v = {r}[4,7]{{1,0}} parameter(1)\n  ROOT s = ({c}[4,7]{{1,0}}, {r}[4,7]{{0,1}}) sort(k, v), dimensions={{1}}, is_stable=true, to_apply=cmp\n}}\n"
            ),
            false,
            0.0,
            0.0,
        );
        check(
            &format!(
                "HloModule m\ncmp {{\n  a = {c}[] parameter(0)\n  b = {c}[] parameter(1)\n  ROOT ne = pred[] compare(a, b), direction=NE\n}}\nENTRY e {{\n  v = {c}[9]{{0}} parameter(0)\n  ROOT s = {c}[9]{{0}} sort(v), dimensions={{0}}, to_apply=cmp\n}}\n"
            ),
            true,
            0.0,
            0.0,
        );
        // A complex windowed sum with strides, padding and dilation, in tiled layouts.
        check(
            &format!(
                "HloModule m\nadd {{\n  a = {c}[] parameter(0)\n  b = {c}[] parameter(1)\n  ROOT s = {c}[] add(a, b)\n}}\nENTRY e {{\n  p = {c}[9,8]{{0,1:T(2,2)}} parameter(0)\n  z = {c}[] constant((0.5, -1))\n  ROOT r = {c}[5,4]{{1,0}} reduce-window(p, z), window={{size=3x2 stride=2x2 pad=1_1x0_1 lhs_dilate=1x1 rhs_dilate=1x2}}, to_apply=add\n}}\n"
            ),
            false,
            rtol,
            rtol,
        );
    }
}

/// What no backend runs yet is refused with the op's name, never computed wrong.
#[test]
fn complex_convolutions_are_refused_by_name() {
    let cases = [
        (
            "HloModule m\nENTRY e {\n  x = c64[1,5,2] parameter(0)\n  w = c64[3,2,2] parameter(1)\n  ROOT c = c64[1,3,2] convolution(x, w), window={size=3}, dim_labels=b0f_0io->b0f\n}\n",
            "convolution",
        ),
    ];
    for (text, op) in cases {
        for backend in [Backend::Cranelift, Backend::Llvm] {
            let err = Client::new(backend).unwrap().compile_text(text, &CompileOptions::default()).err();
            let msg = err.map(|e| e.to_string()).unwrap_or_default();
            assert!(msg.contains(op) && msg.contains("complex"), "{backend}: {msg:?}\n{text}");
        }
    }
}

/// The magnitude of c64 values at the edges, bit for bit against the interpreter (which takes
/// `hypot` in f64): an infinite part beside a NaN (infinite), NaN beside a finite part, parts
/// whose squares overflow or underflow f32 (the tiers square in f64), a magnitude past f32's
/// largest, subnormal parts, signed zeros and an exact 3-4-5 triangle.
#[test]
fn magnitudes_at_the_edges() {
    let parts: [(f32, f32); 10] = [
        (f32::INFINITY, f32::NAN),
        (f32::NAN, f32::NEG_INFINITY),
        (f32::NAN, 1.0),
        (3e38, 3e38),
        (1e-45, 1e-45),
        (-0.0, 0.0),
        (3.0, -4.0),
        (1e-30, 1e30),
        (2e-20, -3e-20),
        (f32::MAX, 1.0),
    ];
    let text = entry("  z = c64[10]{0} parameter(0)\n  ROOT m = f32[10]{0} abs(z)");
    let shape = Shape::array(ElementType::C64, &[10]);
    let bits = parts.iter().map(|&(re, im)| u128::from(re.to_bits()) | (u128::from(im.to_bits()) << 32)).collect();
    let args = [Literal::from_bits_vec(shape, bits).unwrap()];
    let opts = CompileOptions::default();
    let run = |b: Backend| Client::new(b).unwrap().compile_text(&text, &opts).unwrap().run(&args).unwrap();
    let want = run(Backend::Interp);
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let got = run(backend);
        for (i, (re, im)) in parts.iter().enumerate() {
            let (g, w) = (got[0].get_bits(i).unwrap(), want[0].get_bits(i).unwrap());
            assert_eq!(
                g,
                w,
                "{backend}: |({re}, {im})| is {}, want {}",
                f32::from_bits(g as u32),
                f32::from_bits(w as u32)
            );
        }
    }
}
