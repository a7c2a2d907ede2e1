//! Accuracy tests for the branch-free math in `emit::math`: every function is compared with the
//! f64 C libm result (exact enough to stand in for the true value) and must stay within 2 ulp;
//! special values (NaN, +-inf, +-0, domain edges) must match C99 exactly.

use tessera_lower::emit::math::{
    atan2, cbrt, cos, cos_wide, cosh, erf, exp, expm1, log, log1p, logistic, pow, sin, sin_wide, sinh, tan, tanh, Eval,
};
use tessera_testkit::Rng;

extern "C" {
    // The system libm's double erf; std has no erf.
    #[link_name = "erf"]
    fn libm_erf(x: f64) -> f64;
}

fn c_erf(x: f64) -> f64 {
    // SAFETY: pure libm function on a plain double.
    unsafe { libm_erf(x) }
}

type Unary = fn(&mut Eval, f32) -> f32;
type Binary = fn(&mut Eval, f32, f32) -> f32;

struct Fun1 {
    name: &'static str,
    f: Unary,
    r: fn(f64) -> f64,
}

fn unary() -> Vec<Fun1> {
    vec![
        Fun1 { name: "exp", f: |m, x| exp(m, x), r: f64::exp },
        Fun1 { name: "log", f: |m, x| log(m, x), r: f64::ln },
        Fun1 { name: "tanh", f: |m, x| tanh(m, x), r: f64::tanh },
        Fun1 { name: "logistic", f: |m, x| logistic(m, x), r: |x| 1.0 / (1.0 + (-x).exp()) },
        Fun1 { name: "expm1", f: |m, x| expm1(m, x), r: f64::exp_m1 },
        Fun1 { name: "log1p", f: |m, x| log1p(m, x), r: f64::ln_1p },
        Fun1 { name: "erf", f: |m, x| erf(m, x), r: c_erf },
        Fun1 { name: "cbrt", f: |m, x| cbrt(m, x), r: f64::cbrt },
        Fun1 { name: "sin", f: |m, x| sin(m, x), r: f64::sin },
        Fun1 { name: "cos", f: |m, x| cos(m, x), r: f64::cos },
        Fun1 { name: "tan", f: |m, x| tan(m, x), r: f64::tan },
        Fun1 { name: "sin_wide", f: |m, x| sin_wide(m, x), r: f64::sin },
        Fun1 { name: "cos_wide", f: |m, x| cos_wide(m, x), r: f64::cos },
        Fun1 { name: "sinh", f: |m, x| sinh(m, x), r: f64::sinh },
        Fun1 { name: "cosh", f: |m, x| cosh(m, x), r: f64::cosh },
    ]
}

type Fun2 = (&'static str, Binary, fn(f64, f64) -> f64);

fn binary() -> Vec<Fun2> {
    vec![("pow", |m, x, y| pow(m, x, y), f64::powf), ("atan2", |m, y, x| atan2(m, y, x), f64::atan2)]
}

/// Error of `got` against the exact value `want`, in units of the last place of the correctly
/// rounded result (2^-149 for subnormal results). Infinite if NaN-ness disagrees.
fn ulp_err(got: f32, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    let rounded = want as f32;
    if got == rounded {
        return 0.0;
    }
    let ulp = |v: f32| -> f64 {
        let a = v.abs();
        if a < f32::MIN_POSITIVE {
            2f64.powi(-149)
        } else if a.is_infinite() {
            2f64.powi(104)
        } else {
            2f64.powi(((a.to_bits() >> 23) as i32) - 127 - 23)
        }
    };
    // An infinity stands for the first value past f32::MAX so overflow errors are counted in ulps.
    let as_f64 = |v: f32| -> f64 {
        if v.is_infinite() {
            2f64.powi(128).copysign(v as f64)
        } else {
            v as f64
        }
    };
    let w = if want.is_infinite() { as_f64(rounded) } else { want };
    (as_f64(got) - w).abs() / ulp(rounded)
}

#[derive(Clone, Copy)]
struct Stat {
    n: u64,
    max: f64,
    worst: (f32, f32),
    over1: u64,
}

impl Stat {
    fn new() -> Stat {
        Stat { n: 0, max: 0.0, worst: (f32::NAN, f32::NAN), over1: 0 }
    }
    fn add(&mut self, e: f64, x: f32, y: f32) {
        self.n += 1;
        if e > 1.0 {
            self.over1 += 1;
        }
        if e > self.max || (e.is_nan() && !self.max.is_nan()) {
            self.max = e;
            self.worst = (x, y);
        }
    }
    fn merge(&mut self, o: &Stat) {
        self.n += o.n;
        self.over1 += o.over1;
        if o.max > self.max {
            self.max = o.max;
            self.worst = o.worst;
        }
    }
}

/// Edge inputs: zeros, subnormal ends, unit, infinities, NaNs, and a few ulps either side of
/// each function's overflow/underflow thresholds and branch splits.
fn edges() -> Vec<f32> {
    let mut v = vec![0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN];
    v.push(f32::from_bits(0x7f80_0001)); // signalling-pattern NaN
    v.push(f32::from_bits(0xffc0_1234));
    let centers: [f32; 37] = [
        f32::from_bits(1),
        f32::from_bits(0x007f_ffff),
        f32::MIN_POSITIVE,
        f32::MAX,
        1.0,
        2.0,
        0.5,
        88.722_84,
        88.376_26,
        -87.336_55,
        -103.972_08,
        -103.278_93,
        16.635_532,
        -17.328_68,
        0.921_875,
        0.625,
        3.92,
        4.0,
        1e-30,
        1e30,
        5.960_464_5e-8,
        0.546_302_5,
        std::f32::consts::LN_2,
        std::f32::consts::LN_2 / 2.0,
        // trig: near pi/4, pi/2 and the hardest f32 reductions (x close to a multiple of pi/2)
        std::f32::consts::FRAC_PI_4,
        std::f32::consts::FRAC_PI_2,
        7.729_179e28, // 16367173 * 2^72
        8.526_679e21,
        3.141_592_7e20,
        105414350.0,
        // the f32s below 2^16 (the Cody-Waite range) closest to multiples of pi/2
        252.898_21,
        52_516.434,
        56_993.203,
        2_238.384_8,
        35_814.156,
        89.415_99, // sinh/cosh overflow
        1.0,
    ];
    for c in centers {
        for s in [c, -c] {
            let b = s.to_bits() as i64;
            for d in -8i64..=8 {
                let nb = b + d;
                if (0..=u32::MAX as i64).contains(&nb) {
                    v.push(f32::from_bits(nb as u32));
                }
            }
        }
    }
    v
}

fn sweep1(f: &Fun1, stride: u64, extra: &[f32], eval: Eval) -> Stat {
    sweep1_range(f, 0..1 << 32, stride, extra, eval)
}

/// [`sweep1`] over the bit patterns in `bits`.
fn sweep1_range(f: &Fun1, bits: std::ops::Range<u64>, stride: u64, extra: &[f32], eval: Eval) -> Stat {
    let threads = 2u64;
    let total = bits.end;
    let mut st = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let start = bits.start;
                s.spawn(move || {
                    let mut st = Stat::new();
                    let mut m = eval;
                    let mut b = start + t * stride;
                    while b < total {
                        let x = f32::from_bits(b as u32);
                        let got = (f.f)(&mut m, x);
                        st.add(ulp_err(got, (f.r)(x as f64)), x, f32::NAN);
                        b += stride * threads;
                    }
                    st
                })
            })
            .collect();
        let mut st = Stat::new();
        for h in hs {
            st.merge(&h.join().unwrap());
        }
        st
    });
    let mut m = eval;
    for &x in extra {
        let got = (f.f)(&mut m, x);
        st.add(ulp_err(got, (f.r)(x as f64)), x, f32::NAN);
    }
    st
}

fn print_row(name: &str, st: &Stat) {
    let w = if st.worst.1.is_nan() {
        format!("{:e} ({:#010x})", st.worst.0, st.worst.0.to_bits())
    } else {
        format!("({:e}, {:e})", st.worst.0, st.worst.1)
    };
    println!("{:<9} | {:>11} | {:>7.3} | {:<36} | {}", name, st.n, st.max, w, st.over1);
}

fn header() {
    println!("{:<9} | {:>11} | {:>7} | {:<36} | >1ulp", "function", "checked", "max ulp", "worst input");
}

/// 2-D sample: a bit-pattern grid, random pairs, pairs whose result lands in the finite range
/// (where the error is hard to control: y*log2|x| up to +-150), small integer exponents, and all
/// combinations of special values.
fn pairs(scale: u32) -> Vec<(f32, f32)> {
    let mut v = Vec::new();
    let g = 1u32 << (6 + scale);
    let step = (u32::MAX / g) | 1;
    for i in 0..g {
        for j in 0..g {
            v.push((f32::from_bits(i.wrapping_mul(step)), f32::from_bits(j.wrapping_mul(step).wrapping_add(12345))));
        }
    }
    let mut r = Rng::new(0x9e37_79b9);
    let n = 1usize << (12 + 2 * scale);
    for _ in 0..n {
        v.push((f32::from_bits(r.next_u32()), f32::from_bits(r.next_u32())));
    }
    for _ in 0..4 * n {
        let x = f32::from_bits(r.next_u32() & 0x7fff_ffff);
        let l = (x as f64).log2();
        let target = r.uniform(-155.0, 155.0);
        let y = (target / l) as f32;
        let sx = if r.next_u32() & 1 == 1 { -x } else { x };
        v.push((sx, y));
        // near-1 bases with huge exponents stress the relative accuracy of log2 near 0
        let x1 = f32::from_bits(0x3f80_0000u32.wrapping_add((r.next_u32() % 4096).wrapping_sub(2048)));
        let l1 = (x1 as f64).log2();
        if l1 != 0.0 {
            v.push((x1, (target / l1) as f32));
        }
        let yi = ((r.next_u32() % 64) as i32 - 32) as f32;
        v.push((sx, yi));
    }
    let sp = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        3.0,
        -3.0,
        2.5,
        -2.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(1),
        16777216.0,
        16777217.0,
        -16777215.0,
        1e10,
        -1e10,
        0.999_999_94,
        1.000_000_1,
    ];
    for &a in &sp {
        for &b in &sp {
            v.push((a, b));
        }
    }
    v
}

fn sweep2(f: Binary, r: fn(f64, f64) -> f64, ps: &[(f32, f32)], eval: Eval) -> Stat {
    std::thread::scope(|s| {
        let hs: Vec<_> = ps
            .chunks(ps.len() / 2 + 1)
            .map(|c| {
                s.spawn(move || {
                    let mut st = Stat::new();
                    let mut m = eval;
                    for &(a, b) in c {
                        st.add(ulp_err(f(&mut m, a, b), r(a as f64, b as f64)), a, b);
                    }
                    st
                })
            })
            .collect();
        let mut st = Stat::new();
        for h in hs {
            st.merge(&h.join().unwrap());
        }
        st
    })
}

fn same(got: f32, want: f32) -> bool {
    (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits()
}

/// Both forms of the sequences: plain products and sums, and fused multiply-adds (as lowering
/// writes them for FMA targets).
const MODES: [(&str, Eval); 2] = [("plain", Eval { fma: false }), ("fused", Eval { fma: true })];

#[test]
fn special_values() {
    for (_, eval) in MODES {
        special_values_in(eval);
    }
}

fn special_values_in(mut m: Eval) {
    let inf = f32::INFINITY;
    let nan = f32::NAN;
    let mut bad = Vec::new();
    let mut check1 = |name: &str, f: Unary, cases: &[(f32, f32)]| {
        for &(x, w) in cases {
            let g = f(&mut m, x);
            if !same(g, w) {
                bad.push(format!("{name}({x:e}) = {g:e}, want {w:e}"));
            }
        }
    };
    let common_nan = [(nan, nan), (-nan, nan), (f32::from_bits(0x7f80_0001), nan)];
    check1("exp", exp, &[(0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, 0.0), (89.0, inf), (-110.0, 0.0)]);
    check1("log", log, &[(1.0, 0.0), (0.0, -inf), (-0.0, -inf), (inf, inf), (-1.0, nan), (-inf, nan)]);
    check1("tanh", tanh, &[(0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (20.0, 1.0)]);
    check1("logistic", logistic, &[(0.0, 0.5), (inf, 1.0), (-inf, 0.0)]);
    check1("expm1", expm1, &[(0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -1.0), (100.0, inf)]);
    check1("log1p", log1p, &[(0.0, 0.0), (-0.0, -0.0), (-1.0, -inf), (-2.0, nan), (inf, inf), (-inf, nan)]);
    check1("erf", erf, &[(0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (10.0, 1.0)]);
    check1("cbrt", cbrt, &[(0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -inf), (-8.0, -2.0), (27.0, 3.0)]);
    check1("sin", sin, &[(0.0, 0.0), (-0.0, -0.0), (inf, nan), (-inf, nan)]);
    check1("cos", cos, &[(0.0, 1.0), (-0.0, 1.0), (inf, nan), (-inf, nan)]);
    check1("tan", tan, &[(0.0, 0.0), (-0.0, -0.0), (inf, nan), (-inf, nan)]);
    check1("sin_wide", sin_wide, &[(0.0, 0.0), (-0.0, -0.0), (inf, nan), (-inf, nan)]);
    check1("cos_wide", cos_wide, &[(0.0, 1.0), (-0.0, 1.0), (inf, nan), (-inf, nan)]);
    check1("sinh", sinh, &[(0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -inf), (90.0, inf)]);
    check1("cosh", cosh, &[(0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, inf), (-90.0, inf)]);
    let fs: [(&str, Unary); 15] = [
        ("exp", |m, x| exp(m, x)),
        ("log", |m, x| log(m, x)),
        ("tanh", |m, x| tanh(m, x)),
        ("logistic", |m, x| logistic(m, x)),
        ("expm1", |m, x| expm1(m, x)),
        ("log1p", |m, x| log1p(m, x)),
        ("erf", |m, x| erf(m, x)),
        ("cbrt", |m, x| cbrt(m, x)),
        ("sin", |m, x| sin(m, x)),
        ("cos", |m, x| cos(m, x)),
        ("tan", |m, x| tan(m, x)),
        ("sin_wide", |m, x| sin_wide(m, x)),
        ("cos_wide", |m, x| cos_wide(m, x)),
        ("sinh", |m, x| sinh(m, x)),
        ("cosh", |m, x| cosh(m, x)),
    ];
    for (name, f) in fs {
        check1(name, f, &common_nan);
    }
    // pow: the C99 Annex F table.
    let p = |m: &mut Eval, x, y| pow(m, x, y);
    let tiny = f32::from_bits(1);
    let pow_cases: &[(f32, f32, f32)] = &[
        (nan, 0.0, 1.0),
        (nan, -0.0, 1.0),
        (inf, 0.0, 1.0),
        (1.0, nan, 1.0),
        (1.0, inf, 1.0),
        (1.0, -inf, 1.0),
        (-1.0, inf, 1.0),
        (-1.0, -inf, 1.0),
        (nan, 1.0, nan),
        (2.0, nan, nan),
        (0.0, -3.0, inf),
        (-0.0, -3.0, -inf),
        (0.0, -2.0, inf),
        (-0.0, -2.0, inf),
        (-0.0, -0.5, inf),
        (-0.0, -inf, inf),
        (0.0, -inf, inf),
        (0.0, 3.0, 0.0),
        (-0.0, 3.0, -0.0),
        (-0.0, 2.0, 0.0),
        (-0.0, 0.5, 0.0),
        (-0.0, inf, 0.0),
        (0.0, tiny, 0.0),
        (0.0, -tiny, inf),
        (0.5, -inf, inf),
        (-0.5, -inf, inf),
        (2.0, -inf, 0.0),
        (-2.0, -inf, 0.0),
        (0.5, inf, 0.0),
        (-0.5, inf, 0.0),
        (2.0, inf, inf),
        (-2.0, inf, inf),
        (-inf, -3.0, -0.0),
        (-inf, -2.0, 0.0),
        (-inf, -0.5, 0.0),
        (-inf, 3.0, -inf),
        (-inf, 2.0, inf),
        (-inf, 0.5, inf),
        (inf, -1.0, 0.0),
        (inf, 0.5, inf),
        (-2.0, 0.5, nan),
        (-2.0, 3.0, -8.0),
        (-2.0, 2.0, 4.0),
        (-1.0, 16777217.0, 1.0),
        (-1.0, 3.0, -1.0),
        (2.0, 3.0, 8.0),
        (2.0, -149.0, tiny),
        (2.0, -150.0, 0.0),
        (2.0, 128.0, inf),
        (-2.0, 127.0, -1.701_411_8e38),
        (4.0, 0.5, 2.0),
        (f32::MAX, 2.0, inf),
        (-f32::MAX, 3.0, -inf),
    ];
    for &(x, y, w) in pow_cases {
        let g = p(&mut m, x, y);
        if !same(g, w) {
            bad.push(format!("pow({x:e}, {y:e}) = {g:e}, want {w:e}"));
        }
    }
    let pi = std::f32::consts::PI;
    let h = std::f32::consts::FRAC_PI_2;
    let q = std::f32::consts::FRAC_PI_4;
    let q3 = 3.0 * std::f64::consts::FRAC_PI_4;
    let q3 = q3 as f32;
    let atan2_cases: &[(f32, f32, f32)] = &[
        (0.0, 0.0, 0.0),
        (-0.0, 0.0, -0.0),
        (0.0, -0.0, pi),
        (-0.0, -0.0, -pi),
        (0.0, -1.0, pi),
        (-0.0, -1.0, -pi),
        (0.0, 1.0, 0.0),
        (-0.0, 1.0, -0.0),
        (1.0, 0.0, h),
        (1.0, -0.0, h),
        (-1.0, 0.0, -h),
        (-1.0, -0.0, -h),
        (inf, inf, q),
        (-inf, inf, -q),
        (inf, -inf, q3),
        (-inf, -inf, -q3),
        (1.0, inf, 0.0),
        (-1.0, inf, -0.0),
        (1.0, -inf, pi),
        (-1.0, -inf, -pi),
        (inf, 1.0, h),
        (-inf, -1.0, -h),
        (inf, 0.0, h),
        (nan, 1.0, nan),
        (1.0, nan, nan),
        (f32::MAX, f32::MAX, q),
        (-f32::MAX, -f32::MAX, -q3),
        (tiny, tiny, q),
    ];
    for &(y, x, w) in atan2_cases {
        let g = atan2(&mut m, y, x);
        if !same(g, w) {
            bad.push(format!("atan2({y:e}, {x:e}) = {g:e}, want {w:e}"));
        }
    }
    assert!(bad.is_empty(), "special values wrong ({m:?}):\n{}", bad.join("\n"));
}

/// The most ulp a function may be off: 2 (the bound for f32), 1 for the routines
/// that compute through f64.
fn bound(name: &str) -> f64 {
    if name.ends_with("_wide") {
        1.0
    } else {
        2.0
    }
}

fn run_table(stride: u64, scale: u32) {
    let ex = edges();
    let ps = pairs(scale);
    let mut fails = Vec::new();
    // MATH_ULP_ONLY=tanh,exp limits a run to those functions (a full sweep of one takes minutes).
    let only: Option<Vec<String>> =
        std::env::var("MATH_ULP_ONLY").ok().map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let wanted = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|n| n == name));
    for (mode, eval) in MODES {
        println!("{mode} multiply-adds:");
        header();
        for f in unary().into_iter().filter(|f| wanted(f.name)) {
            let st = sweep1(&f, stride, &ex, eval);
            print_row(f.name, &st);
            if st.max.is_nan() || st.max > bound(f.name) {
                fails.push(format!("{} ({mode})", f.name));
            }
        }
        for (name, f, r) in binary().into_iter().filter(|(name, ..)| wanted(name)) {
            let st = sweep2(f, r, &ps, eval);
            print_row(name, &st);
            if st.max.is_nan() || st.max > 2.0 {
                fails.push(format!("{name} ({mode})"));
            }
        }
    }
    assert!(fails.is_empty(), "over the bound: {fails:?}");
}

/// Every 257th bit pattern (a prime stride, so every exponent and mantissa region is visited)
/// plus the edge list, and ~2^20 pow/atan2 pairs, in both modes. About 25 s in release mode on
/// 2 cores.
#[test]
fn dense_sample() {
    run_table(257, 2);
}

/// All 2^32 inputs of each one-argument function and ~2^26 pairs: `cargo test --release -- --ignored`.
#[test]
#[ignore]
fn full_sweep() {
    run_table(1, 5);
}

/// Every input sin, cos and tan reduce by Cody-Waite (|x| < 2^16; the functions are odd or
/// even), in both modes: minutes on 2 cores, where `full_sweep`'s three rows take half an hour.
#[test]
#[ignore]
fn trig_cody_waite_range() {
    let mut fails = Vec::new();
    for (mode, eval) in MODES {
        println!("{mode} multiply-adds, 0 <= x < 2^16:");
        header();
        for f in unary().into_iter().filter(|f| matches!(f.name, "sin" | "cos" | "tan" | "sin_wide" | "cos_wide")) {
            let st = sweep1_range(&f, 0..u64::from(65536f32.to_bits()), 1, &[], eval);
            print_row(f.name, &st);
            if st.max.is_nan() || st.max > bound(f.name) {
                fails.push(format!("{} ({mode})", f.name));
            }
        }
    }
    assert!(fails.is_empty(), "over the bound: {fails:?}");
}
