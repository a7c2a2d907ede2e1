//! The f8 and f4 float formats and the sub-byte integers (s4/u4/s2/u2/s1/u1) on both JIT tiers
//! against the interpreter, bit for bit: arguments are random bit patterns (NaNs, infinities,
//! subnormals and every edge value included), in default, column-major, tiled and packed
//! (`E(4)`, `E(2)`) layouts, through fused elementwise chains, conversions to and from the
//! wide types, reductions, dots and constants.

use tessera::{Backend, Client, CompileOptions};
use tessera_hlo::text::parse_module;
use tessera_hlo::{ElementType, Literal, Shape};
use tessera_testkit::Rng;

fn random_literal(shape: &Shape, rng: &mut Rng) -> Literal {
    let a = shape.as_array().expect("array parameter");
    let n = a.dims.iter().product::<i64>() as usize;
    let bits = (0..n)
        .map(|_| match a.element_type {
            // Wide floats in a range the narrow formats round into, with some specials.
            ElementType::F32 | ElementType::F64 => {
                let r = rng.next_u64();
                let x = match r % 16 {
                    0 => [f64::NAN, f64::INFINITY, -0.0, 1e30, -1e-30, 448.0, 464.0, 57344.0][(r >> 8) as usize % 8],
                    _ => ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2f64.powi((r >> 4) as i32 % 40 - 20),
                };
                if a.element_type == ElementType::F32 {
                    u128::from((x as f32).to_bits())
                } else {
                    u128::from(x.to_bits())
                }
            }
            ElementType::S32 => u128::from(((rng.next_u64() % 41) as i32 - 20) as u32),
            t => u128::from(rng.next_u64() & ((1u64 << t.bit_width()) - 1)),
        })
        .collect();
    let mut row_major = a.clone();
    row_major.layout = None;
    let lit = Literal::from_bits_vec(Shape::Array(row_major), bits).expect("literal");
    lit.relayout_like(shape).expect("relayout")
}

/// Bits equal, or both NaN for the wide floats (whose NaN payloads the narrow formats never
/// keep anyway).
fn same(et: ElementType, g: u128, w: u128) -> bool {
    match et {
        ElementType::F32 => g == w || (f32::from_bits(g as u32).is_nan() && f32::from_bits(w as u32).is_nan()),
        ElementType::F64 => g == w || (f64::from_bits(g as u64).is_nan() && f64::from_bits(w as u64).is_nan()),
        _ => g == w,
    }
}

fn check(text: &str, seeds: std::ops::Range<u64>) {
    let module = parse_module(text).unwrap_or_else(|e| panic!("parse: {e}\n{text}"));
    let interp = Client::new(Backend::Interp).unwrap().compile(&module, &CompileOptions::default()).unwrap();
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let exe = Client::new(backend)
            .unwrap()
            .compile(&module, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{backend}: compile: {e}\n{text}"));
        for seed in seeds.clone() {
            let mut rng = Rng::new(seed);
            let args: Vec<Literal> =
                module.entry_comp().parameter_shapes().iter().map(|s| random_literal(s, &mut rng)).collect();
            let want = interp.run(&args).unwrap_or_else(|e| panic!("interp: {e}\n{text}"));
            let got = exe.run(&args).unwrap_or_else(|e| panic!("{backend}: run: {e}\n{text}"));
            assert_eq!(got.len(), want.len(), "{backend}: result count\n{text}");
            for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.shape(), w.shape(), "{backend}: result {r} shape\n{text}");
                let et = w.element_type();
                for i in 0..w.element_count() {
                    let (gb, wb) = (g.get_bits(i).unwrap(), w.get_bits(i).unwrap());
                    assert!(
                        same(et, gb, wb),
                        "{backend}, seed {seed}: result {r} element {i}: got {gb:#x}, want {wb:#x}\n{text}"
                    );
                }
            }
        }
    }
}

const FLOATS: [&str; 9] =
    ["f8e5m2", "f8e4m3", "f8e3m4", "f8e4m3fn", "f8e4m3fnuz", "f8e4m3b11fnuz", "f8e5m2fnuz", "f4e2m1fn", "f8e8m0fnu"];

/// Arithmetic, transcendental functions, comparisons, conversions both ways and raw-bit
/// reinterpretation of one format, fused into one kernel.
fn float_chain(t: &str, layout: &str) -> String {
    let bits = if t == "f4e2m1fn" { "u4" } else { "u8" };
    format!(
        "HloModule m\nENTRY e {{\n  x = {t}[5,7]{layout} parameter(0)\n  y = {t}[5,7]{layout} parameter(1)\n  \
         w = f32[5,7] parameter(2)\n  d = f64[5,7] parameter(3)\n  i = s32[5,7] parameter(4)\n  \
         add = {t}[5,7] add(x, y)\n  sub = {t}[5,7] subtract(add, y)\n  mul = {t}[5,7] multiply(sub, x)\n  \
         div = {t}[5,7] divide(mul, y)\n  ex = {t}[5,7] exponential(x)\n  sq = {t}[5,7] sqrt(y)\n  \
         ng = {t}[5,7] negate(x)\n  ab = {t}[5,7] abs(ng)\n  fl = {t}[5,7] floor(div)\n  \
         th = {t}[5,7] tanh(y)\n  mx = {t}[5,7] maximum(ex, sq)\n  mn = {t}[5,7] minimum(th, fl)\n  \
         pw = {t}[5,7] power(ab, y)\n  rp = {t}[5,7] reduce-precision(mx), exponent_bits=3, mantissa_bits=1\n  \
         lt = pred[5,7] compare(x, y), direction=LT\n  to = pred[5,7] compare(x, y), direction=LT, type=TOTALORDER\n  \
         sel = {t}[5,7] select(lt, mn, pw)\n  wf = f32[5,7] convert(sel)\n  wd = f64[5,7] convert(rp)\n  \
         fw = {t}[5,7] convert(w)\n  fd = {t}[5,7] convert(d)\n  fi = {t}[5,7] convert(i)\n  \
         xi = s32[5,7] convert(x)\n  xh = f16[5,7] convert(y)\n  bc = {bits}[5,7] bitcast-convert(x)\n  \
         one = {t}[] constant(1)\n  ones = {t}[5,7] broadcast(one), dimensions={{}}\n  \
         io = {t}[5,7] iota(), iota_dimension=1\n  cs = {t}[5,7] add(ones, io)\n  \
         ROOT r = ({t}[5,7]{layout}, f32[5,7], f64[5,7], {t}[5,7], {t}[5,7], {t}[5,7], s32[5,7], f16[5,7], \
         {bits}[5,7], pred[5,7], pred[5,7], {t}[5,7], {t}[5,7]) \
         tuple(add, wf, wd, fw, fd, fi, xi, xh, bc, lt, to, cs, div)\n}}\n"
    )
}

#[test]
fn every_float_format_through_a_fused_chain() {
    for t in FLOATS {
        check(&float_chain(t, "{1,0}"), 0..3);
    }
}

#[test]
fn float_formats_in_column_major_tiled_and_packed_layouts() {
    for t in ["f8e4m3fn", "f8e5m2", "f8e8m0fnu"] {
        check(&float_chain(t, "{0,1}"), 3..5);
        check(&float_chain(t, "{1,0:T(2,4)}"), 5..7);
    }
    check(&float_chain("f4e2m1fn", "{1,0:E(4)}"), 7..10);
    check(&float_chain("f4e2m1fn", "{0,1:E(4)}"), 10..12);
}

/// Sums, products and a dot: the interpreter accumulates in f64 and rounds once.
fn float_reductions(t: &str) -> String {
    format!(
        "HloModule m\nadd {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT s = {t}[] add(a, b)\n}}\n\
         mul {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT s = {t}[] multiply(a, b)\n}}\n\
         ENTRY e {{\n  x = {t}[6,9] parameter(0)\n  y = {t}[9,4]{{0,1}} parameter(1)\n  z = {t}[] constant(0)\n  \
         o = {t}[] constant(1)\n  s = {t}[6] reduce(x, z), dimensions={{1}}, to_apply=add\n  \
         p = {t}[9] reduce(x, o), dimensions={{0}}, to_apply=mul\n  \
         d = {t}[6,4] dot(x, y), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
         ROOT r = ({t}[6], {t}[9], {t}[6,4]) tuple(s, p, d)\n}}\n"
    )
}

#[test]
fn float_formats_reduce_and_dot() {
    for t in FLOATS {
        check(&float_reductions(t), 20..23);
    }
}

const INTS: [&str; 6] = ["s4", "u4", "s2", "u2", "s1", "u1"];

/// Every integer op (each wraps to the type's width), comparisons and conversions.
fn int_chain(t: &str, layout: &str) -> String {
    // abs, negate and sign take signed operands only.
    let (ab, ng, sg) = if t.starts_with('s') {
        (format!("abs(x)"), format!("negate(y)"), format!("sign(x)"))
    } else {
        (format!("not(x)"), format!("subtract(x, y)"), format!("minimum(x, y)"))
    };
    let one = if t == "s1" { "-1" } else { "1" };
    format!(
        "HloModule m\nENTRY e {{\n  x = {t}[6,5]{layout} parameter(0)\n  y = {t}[6,5]{layout} parameter(1)\n  \
         w = f32[6,5] parameter(2)\n  i = s32[6,5] parameter(3)\n  \
         add = {t}[6,5] add(x, y)\n  sub = {t}[6,5] subtract(x, y)\n  mul = {t}[6,5] multiply(add, sub)\n  \
         div = {t}[6,5] divide(mul, y)\n  rem = {t}[6,5] remainder(mul, y)\n  shl = {t}[6,5] shift-left(x, y)\n  \
         shr = {t}[6,5] shift-right-logical(x, y)\n  sra = {t}[6,5] shift-right-arithmetic(x, y)\n  \
         an = {t}[6,5] and(shl, shr)\n  orr = {t}[6,5] or(an, sra)\n  xo = {t}[6,5] xor(orr, div)\n  \
         nt = {t}[6,5] not(xo)\n  pc = {t}[6,5] popcnt(x)\n  cz = {t}[6,5] count-leading-zeros(y)\n  \
         ab = {t}[6,5] {ab}\n  ng = {t}[6,5] {ng}\n  sg = {t}[6,5] {sg}\n  mx = {t}[6,5] maximum(ab, ng)\n  \
         mn = {t}[6,5] minimum(sg, rem)\n  pw = {t}[6,5] power(x, y)\n  lt = pred[6,5] compare(x, y), direction=LT\n  \
         fw = {t}[6,5] convert(w)\n  fi = {t}[6,5] convert(i)\n  xi = s32[6,5] convert(x)\n  xf = f32[6,5] convert(y)\n  \
         xp = pred[6,5] convert(x)\n  pt = {t}[6,5] convert(lt)\n  io = {t}[6,5] iota(), iota_dimension=0\n  \
         c = {t}[] constant({one})\n  cb = {t}[6,5] broadcast(c), dimensions={{}}\n  ci = {t}[6,5] add(io, cb)\n  \
         ROOT r = ({t}[6,5]{layout}, {t}[6,5], {t}[6,5], {t}[6,5], {t}[6,5], {t}[6,5], {t}[6,5], {t}[6,5], \
         {t}[6,5], s32[6,5], f32[6,5], pred[6,5], {t}[6,5], {t}[6,5], {t}[6,5]) \
         tuple(nt, pc, cz, mx, mn, pw, fw, fi, xo, xi, xf, xp, pt, ci, add)\n}}\n"
    )
}

#[test]
fn every_sub_byte_integer_through_a_fused_chain() {
    for t in INTS {
        check(&int_chain(t, "{1,0}"), 30..33);
    }
}

#[test]
fn sub_byte_integers_packed_and_reordered() {
    for t in INTS {
        let bits = if t.ends_with('4') { 4 } else { 2 };
        check(&int_chain(t, &format!("{{1,0:E({bits})}}")), 40..42);
        check(&int_chain(t, &format!("{{0,1:E({bits})}}")), 42..44);
    }
    check(&int_chain("s4", "{0,1}"), 44..46);
}

/// A sum (wrapping at the type's width) and a dot of sub-byte integers.
#[test]
fn sub_byte_integers_reduce_and_dot() {
    for t in INTS {
        let text = format!(
            "HloModule m\nadd {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT s = {t}[] add(a, b)\n}}\n\
             ENTRY e {{\n  x = {t}[7,5]{{1,0:E(4)}} parameter(0)\n  y = {t}[5,3] parameter(1)\n  z = {t}[] constant(0)\n  \
             s = {t}[7] reduce(x, z), dimensions={{1}}, to_apply=add\n  \
             d = {t}[7,3] dot(x, y), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
             ROOT r = ({t}[7], {t}[7,3]) tuple(s, d)\n}}\n"
        );
        check(&text, 50..53);
    }
}
