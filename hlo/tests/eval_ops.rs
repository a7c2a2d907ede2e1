//! The interpreter's sort, topk, complex, fft, linear algebra, batch norm, random numbers,
//! host I/O and narrow types, on hand-computed values (and, for the random bits and the f8
//! conversions, values XLA:CPU produced for the same modules).

use tessera_hlo::eval::{evaluate, evaluate_with, CustomCallRegistry, EvalError, EvalOptions};
use tessera_hlo::text::parse_module;
use tessera_hlo::{ElementType, Literal, Shape};

fn run(text: &str, args: &[Literal]) -> Result<Literal, EvalError> {
    evaluate(&parse_module(text).expect("parse"), args)
}

fn part(l: &Literal, i: usize) -> Literal {
    l.tuple_elements().expect("tuple")[i].clone()
}

fn f32s(l: &Literal) -> Vec<f32> {
    l.to_vec::<f32>().expect("f32")
}

fn s32s(l: &Literal) -> Vec<i32> {
    l.to_vec::<i32>().expect("s32")
}

#[test]
fn multi_operand_sort_is_stable_on_equal_keys() {
    let text = "HloModule m
cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY e {
  k = s32[6] parameter(0)
  v = s32[6] parameter(1)
  ROOT s = (s32[6], s32[6]) sort(k, v), dimensions={0}, is_stable=true, to_apply=cmp
}
";
    let k = Literal::from_vec(&[6], vec![3, 1, 3, 1, 2, 1]).unwrap();
    let v = Literal::from_vec(&[6], vec![0, 1, 2, 3, 4, 5]).unwrap();
    let r = run(text, &[k, v]).unwrap();
    assert_eq!(s32s(&part(&r, 0)), vec![1, 1, 1, 2, 3, 3]);
    assert_eq!(s32s(&part(&r, 1)), vec![1, 3, 5, 4, 0, 2]);
}

#[test]
fn sort_calls_a_general_comparator_along_any_dimension() {
    // Orders by absolute value, descending (compare(|b|, |a|) LT), along dimension 0.
    let text = "HloModule m
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  x = f32[] abs(a)
  y = f32[] abs(b)
  ROOT lt = pred[] compare(y, x), direction=LT
}
ENTRY e {
  k = f32[3,2] parameter(0)
  ROOT s = f32[3,2] sort(k), dimensions={0}, is_stable=true, to_apply=cmp
}
";
    let k = Literal::from_vec(&[3, 2], vec![1.0f32, -5.0, -3.0, 2.0, 2.0, 5.0]).unwrap();
    let r = run(text, &[k]).unwrap();
    // Column 0: |1|, |-3|, |2| -> -3, 2, 1. Column 1: |-5| ties |5|: stable keeps -5 first.
    assert_eq!(f32s(&r), vec![-3.0, -5.0, 2.0, 5.0, 1.0, 2.0]);
}

#[test]
fn sort_with_total_order_places_nans_and_signed_zeros() {
    let text = "HloModule m
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
ENTRY e {
  k = f32[5] parameter(0)
  ROOT s = f32[5] sort(k), dimensions={0}, to_apply=cmp
}
";
    let k = Literal::from_vec(&[5], vec![f32::NAN, 0.0, -0.0, -f32::NAN, -1.0]).unwrap();
    let r = f32s(&run(text, &[k]).unwrap());
    assert!(r[0].is_nan() && r[0].is_sign_negative());
    assert_eq!(r[1], -1.0);
    assert!(r[2] == 0.0 && r[2].is_sign_negative());
    assert!(r[3] == 0.0 && r[3].is_sign_positive());
    assert!(r[4].is_nan() && r[4].is_sign_positive());
}

#[test]
fn topk_keeps_the_lower_index_first_on_ties() {
    let text = "HloModule m
ENTRY e {
  x = f32[2,5] parameter(0)
  t = (f32[2,3], s32[2,3]) topk(x), k=3, largest=true
  s = (f32[2,2], s32[2,2]) topk(x), k=2, largest=false
  ROOT r = ((f32[2,3], s32[2,3]), (f32[2,2], s32[2,2])) tuple(t, s)
}
";
    let x = Literal::from_vec(&[2, 5], vec![1.0f32, 3.0, 3.0, 2.0, 3.0, 0.5, f32::NAN, -1.0, -1.0, 4.0]).unwrap();
    let r = run(text, &[x]).unwrap();
    let (t, s) = (part(&r, 0), part(&r, 1));
    let tv = f32s(&part(&t, 0));
    assert_eq!(&tv[..3], &[3.0, 3.0, 3.0]);
    // XLA ranks NaN above everything.
    assert!(tv[3].is_nan() && tv[4] == 4.0 && tv[5] == 0.5);
    assert_eq!(s32s(&part(&t, 1)), vec![1, 2, 4, 1, 4, 0]);
    assert_eq!(f32s(&part(&s, 0)), vec![1.0, 2.0, -1.0, -1.0]);
    assert_eq!(s32s(&part(&s, 1)), vec![0, 3, 2, 3]);
}

#[test]
fn complex_arithmetic() {
    let text = "HloModule m
ENTRY e {
  re = f32[2] parameter(0)
  im = f32[2] parameter(1)
  z = c64[2] complex(re, im)
  p = c64[2] multiply(z, z)
  q = c64[2] divide(p, z)
  a = f32[2] abs(z)
  eq = pred[2] compare(q, z), direction=EQ
  r = f32[2] real(p)
  i = f32[2] imag(p)
  c = c64[2] convert(re)
  cr = f32[2] real(c)
  ci = f32[2] imag(c)
  ROOT t = (f32[2], f32[2], f32[2], pred[2], f32[2], f32[2]) tuple(r, i, a, eq, cr, ci)
}
";
    let re = Literal::from_vec(&[2], vec![3.0f32, 1.0]).unwrap();
    let im = Literal::from_vec(&[2], vec![4.0f32, -1.0]).unwrap();
    let r = run(text, &[re, im]).unwrap();
    // (3+4i)^2 = -7+24i, (1-i)^2 = -2i.
    assert_eq!(f32s(&part(&r, 0)), vec![-7.0, 0.0]);
    assert_eq!(f32s(&part(&r, 1)), vec![24.0, -2.0]);
    assert_eq!(f32s(&part(&r, 2)), vec![5.0, 2f32.sqrt()]);
    assert_eq!(part(&r, 3).to_vec::<bool>().unwrap(), vec![true, true]);
    assert_eq!(f32s(&part(&r, 4)), vec![3.0, 1.0]);
    assert_eq!(f32s(&part(&r, 5)), vec![0.0, 0.0]);
}

#[test]
fn fft_round_trips() {
    let text = "HloModule m
ENTRY e {
  x = f32[2,6] parameter(0)
  f = c64[2,4] fft(x), fft_type=RFFT, fft_length={6}
  b = f32[2,6] fft(f), fft_type=IRFFT, fft_length={6}
  c = c64[2,6] convert(x)
  g = c64[2,6] fft(c), fft_type=FFT, fft_length={2,6}
  h = c64[2,6] fft(g), fft_type=IFFT, fft_length={2,6}
  hr = f32[2,6] real(h)
  f0 = c64[2,1] slice(f), slice={[0:2], [0:1]}
  ROOT t = (f32[2,6], f32[2,6], c64[2,1]) tuple(b, hr, f0)
}
";
    let xs = vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, -1.0, 0.5, 0.25, 8.0, -3.0, 2.0];
    let x = Literal::from_vec(&[2, 6], xs.clone()).unwrap();
    let r = run(text, &[x]).unwrap();
    for i in 0..2 {
        for (a, b) in f32s(&part(&r, i)).iter().zip(&xs) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
    // The zero-frequency term is the row sum.
    let dc = part(&r, 2).to_vec::<(f32, f32)>().unwrap();
    assert_eq!(dc, vec![(21.0, 0.0), (6.75, 0.0)]);
}

/// A 3x3 matrix whose lower and upper triangles are both well conditioned.
const A: [f32; 9] = [2.0, 7.0, -3.0, 1.0, 3.0, 5.0, 4.0, -2.0, 6.0];

fn triangle(lower: bool, unit: bool) -> Vec<f64> {
    let mut t = vec![0.0; 9];
    for i in 0..3 {
        for j in 0..3 {
            if (lower && j <= i) || (!lower && j >= i) {
                t[i * 3 + j] = if i == j && unit { 1.0 } else { f64::from(A[i * 3 + j]) };
            }
        }
    }
    t
}

#[test]
fn triangular_solve_every_variant() {
    let b: Vec<f32> = vec![1.0, -2.0, 3.0, 0.5, 4.0, -1.0];
    for left in [true, false] {
        for lower in [true, false] {
            for unit in [true, false] {
                for transpose in ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"] {
                    let bshape = if left { "f32[3,2]" } else { "f32[2,3]" };
                    let text = format!(
                        "HloModule m
ENTRY e {{
  a = f32[3,3] parameter(0)
  b = {bshape} parameter(1)
  ROOT x = {bshape} triangular-solve(a, b), left_side={left}, lower={lower}, unit_diagonal={unit}, transpose_a={transpose}
}}
"
                    );
                    let bdims: &[i64] = if left { &[3, 2] } else { &[2, 3] };
                    let args =
                        [Literal::from_vec(&[3, 3], A.to_vec()).unwrap(), Literal::from_vec(bdims, b.clone()).unwrap()];
                    let x: Vec<f64> = f32s(&run(&text, &args).unwrap()).into_iter().map(f64::from).collect();
                    let mut t = triangle(lower, unit);
                    if transpose != "NO_TRANSPOSE" {
                        let mut tt = vec![0.0; 9];
                        for i in 0..3 {
                            for j in 0..3 {
                                tt[j * 3 + i] = t[i * 3 + j];
                            }
                        }
                        t = tt;
                    }
                    // Check op(A) X = B or X op(A) = B.
                    let (rows, cols) = (bdims[0] as usize, bdims[1] as usize);
                    for i in 0..rows {
                        for j in 0..cols {
                            let got: f64 = if left {
                                (0..3).map(|k| t[i * 3 + k] * x[k * cols + j]).sum()
                            } else {
                                (0..3).map(|k| x[i * cols + k] * t[k * 3 + j]).sum()
                            };
                            let want = f64::from(b[i * cols + j]);
                            assert!(
                                (got - want).abs() < 1e-4,
                                "left={left} lower={lower} unit={unit} {transpose}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn cholesky_factors_and_does_not_fail_on_indefinite_input() {
    let text = "HloModule m
ENTRY e {
  a = f32[2,2,2] parameter(0)
  ROOT l = f32[2,2,2] cholesky(a), lower=true
}
";
    let a = Literal::from_vec(&[2, 2, 2], vec![4.0f32, 99.0, 2.0, 3.0, 1.0, 0.0, 2.0, 1.0]).unwrap();
    let l = f32s(&run(text, &[a]).unwrap());
    assert_eq!(&l[..3], &[2.0, 0.0, 1.0]);
    assert!((l[3] - 2f32.sqrt()).abs() < 1e-6);
    // 1 - 2^2 < 0: the last pivot is NaN, as XLA computes it.
    assert_eq!(&l[4..7], &[1.0, 0.0, 2.0]);
    assert!(l[7].is_nan());
    let upper = "HloModule m
ENTRY e {
  a = f32[2,2] parameter(0)
  ROOT u = f32[2,2] cholesky(a), lower=false
}
";
    let a = Literal::from_vec(&[2, 2], vec![4.0f32, 2.0, 99.0, 3.0]).unwrap();
    let u = f32s(&run(upper, &[a]).unwrap());
    assert_eq!(&u[..3], &[2.0, 1.0, 0.0]);
}

#[test]
fn batch_norm_training_and_grad() {
    let text = "HloModule m
ENTRY e {
  x = f32[2,2] parameter(0)
  s = f32[2] parameter(1)
  o = f32[2] parameter(2)
  dy = f32[2,2] parameter(3)
  t = (f32[2,2], f32[2], f32[2]) batch-norm-training(x, s, o), epsilon=0, feature_index=1
  m = f32[2] get-tuple-element(t), index=1
  v = f32[2] get-tuple-element(t), index=2
  g = (f32[2,2], f32[2], f32[2]) batch-norm-grad(x, s, m, v, dy), epsilon=0, feature_index=1
  i = f32[2,2] batch-norm-inference(x, s, o, m, v), epsilon=0, feature_index=1
  ROOT r = ((f32[2,2], f32[2], f32[2]), (f32[2,2], f32[2], f32[2]), f32[2,2]) tuple(t, g, i)
}
";
    let x = Literal::from_vec(&[2, 2], vec![1.0f32, 10.0, 3.0, 30.0]).unwrap();
    let s = Literal::from_vec(&[2], vec![2.0f32, 1.0]).unwrap();
    let o = Literal::from_vec(&[2], vec![0.5f32, -1.0]).unwrap();
    let dy = Literal::from_vec(&[2, 2], vec![1.0f32, 0.0, 3.0, 2.0]).unwrap();
    let r = run(text, &[x, s, o, dy]).unwrap();
    let (t, g) = (part(&r, 0), part(&r, 1));
    // Feature 0: {1, 3}, mean 2, variance 1; feature 1: {10, 30}, mean 20, variance 100.
    assert_eq!(f32s(&part(&t, 0)), vec![-1.5, -2.0, 2.5, 0.0]);
    assert_eq!(f32s(&part(&t, 1)), vec![2.0, 20.0]);
    assert_eq!(f32s(&part(&t, 2)), vec![1.0, 100.0]);
    assert_eq!(f32s(&part(&r, 2)), vec![-1.5, -2.0, 2.5, 0.0]);
    // grad_offset = sum(dy) = {4, 2}; grad_scale = sum(dy * xhat) = {-1 + 3, 0 + 2} = {2, 2}.
    assert_eq!(f32s(&part(&g, 2)), vec![4.0, 2.0]);
    assert_eq!(f32s(&part(&g, 1)), vec![2.0, 2.0]);
    // grad_x = s / sqrt(v) / N * (N dy - sum dy - xhat * grad_scale):
    // feature 0: 2/2 * (2 - 4 + 2, 6 - 4 - 2) = (0, 0); feature 1: 0.1/2 * (0 - 2 + 2, 4 - 2 - 2).
    assert_eq!(f32s(&part(&g, 0)), vec![0.0, 0.0, 0.0, 0.0]);
}

#[test]
fn rng_bit_generator_matches_xla() {
    // XLA:CPU's outputs for these modules and state.
    let text = "HloModule m
ENTRY e {
  s = u64[2] parameter(0)
  a = (u64[2], u32[5]) rng-bit-generator(s), algorithm=rng_three_fry
  d = (u64[2], u32[5]) rng-bit-generator(s), algorithm=rng_philox
  ROOT r = ((u64[2], u32[5]), (u64[2], u32[5])) tuple(a, d)
}
";
    let s = Literal::from_vec(&[2], vec![0x1234_5678_9abc_def0u64, 0xffff_ffff_ffff_fffe]).unwrap();
    let r = run(text, &[s]).unwrap();
    let (a, d) = (part(&r, 0), part(&r, 1));
    assert_eq!(part(&a, 0).to_vec::<u64>().unwrap(), vec![1311768467463790320, 1]);
    assert_eq!(part(&a, 1).to_vec::<u32>().unwrap(), vec![1010520186, 1888741164, 2754706343, 569486026, 1593802813]);
    assert_eq!(part(&d, 0).to_vec::<u64>().unwrap(), vec![1311768467463790320, 0]);
    assert_eq!(part(&d, 1).to_vec::<u32>().unwrap(), vec![3151517439, 3080049825, 2645875639, 2972309415, 1480449822]);
}

#[test]
fn rng_is_seeded_and_in_range() {
    let text = "HloModule m
ENTRY e {
  a = f32[] constant(-2)
  b = f32[] constant(3)
  u = f32[1000] rng(a, b), distribution=rng_uniform
  z = f32[] constant(0)
  one = f32[] constant(1)
  n = f32[1000] rng(z, one), distribution=rng_normal
  lo = s32[] constant(5)
  hi = s32[] constant(9)
  i = s32[1000] rng(lo, hi), distribution=rng_uniform
  ROOT r = (f32[1000], f32[1000], s32[1000]) tuple(u, n, i)
}
";
    let m = parse_module(text).unwrap();
    let r1 = evaluate_with(&m, &[], &EvalOptions::new().with_rng_seed(7)).unwrap();
    let r2 = evaluate_with(&m, &[], &EvalOptions::new().with_rng_seed(7)).unwrap();
    let r3 = evaluate_with(&m, &[], &EvalOptions::new().with_rng_seed(8)).unwrap();
    assert_eq!(r1, r2);
    assert_ne!(r1, r3);
    let u = f32s(&part(&r1, 0));
    assert!(u.iter().all(|&x| (-2.0..3.0).contains(&x)));
    let mean = u.iter().sum::<f32>() / 1000.0;
    assert!((mean - 0.5).abs() < 0.2, "{mean}");
    let n = f32s(&part(&r1, 1));
    let nm = n.iter().sum::<f32>() / 1000.0;
    let nv = n.iter().map(|x| (x - nm) * (x - nm)).sum::<f32>() / 1000.0;
    assert!(nm.abs() < 0.15 && (nv - 1.0).abs() < 0.2, "{nm} {nv}");
    let i = s32s(&part(&r1, 2));
    assert!(i.iter().all(|&x| (5..9).contains(&x)));
    assert!((5..9).all(|v| i.contains(&v)));
}

#[test]
fn infeed_outfeed_and_tokens() {
    let text = "HloModule m
ENTRY e {
  t0 = token[] after-all()
  in = (f32[2], token[]) infeed(t0)
  d = f32[2] get-tuple-element(in), index=0
  t1 = token[] get-tuple-element(in), index=1
  twice = f32[2] add(d, d)
  t2 = token[] outfeed(twice, t1), outfeed_shape=f32[2]
  in2 = (f32[2], token[]) infeed(t2)
  ROOT d2 = f32[2] get-tuple-element(in2), index=0
}
";
    let m = parse_module(text).unwrap();
    let opts = EvalOptions::new().with_infeed([
        Literal::from_vec(&[2], vec![1.0f32, 2.0]).unwrap(),
        Literal::from_vec(&[2], vec![7.0f32, 8.0]).unwrap(),
    ]);
    let r = evaluate_with(&m, &[], &opts).unwrap();
    assert_eq!(f32s(&r), vec![7.0, 8.0]);
    let out = opts.take_outfeed();
    assert_eq!(out.len(), 1);
    assert_eq!(f32s(&out[0]), vec![2.0, 4.0]);
    assert_eq!(opts.infeed_len(), 0);
    // Nothing queued: a clear error, not a panic.
    let empty = EvalOptions::new().with_infeed([Literal::from_vec(&[2], vec![1.0f32, 2.0]).unwrap()]);
    match evaluate_with(&m, &[], &empty) {
        Err(EvalError::Invalid { message, .. }) => {
            assert!(message.contains("infeed found nothing queued"), "{message}")
        }
        other => panic!("expected an infeed error, got {other:?}"),
    }
}

#[test]
fn custom_calls_run_registered_host_functions() {
    let text = "HloModule m
ENTRY e {
  x = f32[3] parameter(0)
  ROOT y = f32[3] custom-call(x), custom_call_target=\"twice\"
}
";
    let m = parse_module(text).unwrap();
    let x = Literal::from_vec(&[3], vec![1.0f32, -2.0, 0.5]).unwrap();
    match evaluate(&m, std::slice::from_ref(&x)) {
        Err(EvalError::Unsupported { opcode }) => assert!(opcode.contains("'twice'"), "{opcode}"),
        other => panic!("expected an unregistered-target error, got {other:?}"),
    }
    let mut reg = CustomCallRegistry::new();
    reg.register("twice", |args: &[Literal]| {
        let v = args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
        Literal::from_vec(&[v.len() as i64], v.iter().map(|x| 2.0 * x).collect()).map_err(|e| e.to_string())
    });
    let opts = EvalOptions::new().with_custom_calls(reg);
    assert_eq!(f32s(&evaluate_with(&m, std::slice::from_ref(&x), &opts).unwrap()), vec![2.0, -4.0, 1.0]);
    let mut bad = CustomCallRegistry::new();
    bad.register("twice", |_: &[Literal]| Err("no".to_string()));
    assert!(evaluate_with(&m, &[x], &EvalOptions::new().with_custom_calls(bad)).is_err());
}

#[test]
fn f8_conversions_round_like_xla() {
    // XLA:CPU's results for these conversions (checked with xla_run.py).
    let text = "HloModule m
ENTRY e {
  x = f32[10] parameter(0)
  a = f8e4m3fn[10] convert(x)
  b = f8e5m2[10] convert(x)
  c = f8e4m3fnuz[10] convert(x)
  d = f4e2m1fn[10] convert(x)
  fa = f32[10] convert(a)
  fb = f32[10] convert(b)
  fc = f32[10] convert(c)
  fd = f32[10] convert(d)
  ROOT r = (f32[10], f32[10], f32[10], f32[10]) tuple(fa, fb, fc, fd)
}
";
    let x = Literal::from_vec(&[10], vec![1.0625f32, 1.1875, 464.0, 465.0, 61440.0, 1e9, -0.0, 2.5, 0.26, f32::NAN])
        .unwrap();
    let r = run(text, &[x]).unwrap();
    let same = |got: Vec<f32>, want: &[f32]| {
        for (g, w) in got.iter().zip(want) {
            assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{got:?} vs {want:?}");
        }
    };
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    same(f32s(&part(&r, 0)), &[1.0, 1.25, 448.0, nan, nan, nan, -0.0, 2.5, 0.25, nan]);
    same(f32s(&part(&r, 1)), &[1.0, 1.25, 448.0, 448.0, inf, inf, -0.0, 2.5, 0.25, nan]);
    same(f32s(&part(&r, 2)), &[1.0, 1.25, nan, nan, nan, nan, 0.0, 2.5, 0.25, nan]);
    same(f32s(&part(&r, 3)), &[1.0, 1.0, 6.0, 6.0, 6.0, 6.0, -0.0, 2.0, 0.5, -0.0]);
}

#[test]
fn sub_byte_integers_wrap_and_saturate() {
    let text = "HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  s = s4[4] convert(x)
  t = s4[4] add(s, s)
  u = u4[4] convert(x)
  v = u4[4] add(u, u)
  ss = s32[4] convert(s)
  tt = s32[4] convert(t)
  uu = s32[4] convert(u)
  vv = s32[4] convert(v)
  ROOT r = (s32[4], s32[4], s32[4], s32[4]) tuple(ss, tt, uu, vv)
}
";
    let x = Literal::from_vec(&[4], vec![100.0f32, -100.0, 3.0, 5.5]).unwrap();
    let r = run(text, &[x]).unwrap();
    assert_eq!(s32s(&part(&r, 0)), vec![7, -8, 3, 5]);
    assert_eq!(s32s(&part(&r, 1)), vec![-2, 0, 6, -6]);
    assert_eq!(s32s(&part(&r, 2)), vec![15, 0, 3, 5]);
    assert_eq!(s32s(&part(&r, 3)), vec![14, 0, 6, 10]);
    // s4 arguments and results go through literals too.
    let text = "HloModule m
ENTRY e {
  a = s4[3] parameter(0)
  ROOT b = s4[3] negate(a)
}
";
    let a = Literal::from_bits_vec(Shape::array(ElementType::S4, &[3]), vec![0x8, 0x7, 0x1]).unwrap();
    let r = run(text, &[a]).unwrap();
    assert_eq!(r.to_bits_vec().unwrap(), vec![0x8, 0x9, 0xF]);
}

#[test]
fn single_device_collectives_and_ids() {
    let text = "HloModule m
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[2] parameter(0)
  ar = f32[2] all-reduce(x), replica_groups={}, to_apply=sum
  id = u32[] replica-id()
  ROOT t = (f32[2], u32[]) tuple(ar, id)
}
";
    let x = Literal::from_vec(&[2], vec![1.5f32, -2.0]).unwrap();
    let r = run(text, &[x]).unwrap();
    assert_eq!(f32s(&part(&r, 0)), vec![1.5, -2.0]);
    assert_eq!(part(&r, 1).to_vec::<u32>().unwrap(), vec![0]);
}

#[test]
fn complex_values_move_like_any_other() {
    let text = "HloModule m
sum {
  a = c64[] parameter(0)
  b = c64[] parameter(1)
  ROOT c = c64[] add(a, b)
}
ENTRY e {
  re = f32[3] parameter(0)
  zero = c64[] constant((0, 0))
  z = c64[3] complex(re, re)
  i = c64[3] iota(), iota_dimension=0
  p = c64[5] pad(z, zero), padding=1_1
  c = c64[6] concatenate(z, i), dimensions={0}
  s = c64[] reduce(c, zero), dimensions={0}, to_apply=sum
  k = s32[] constant(1)
  u = c64[5] dynamic-update-slice(p, i, k)
  r = c64[5] reverse(u), dimensions={0}
  ROOT t = (c64[5], c64[], c64[5]) tuple(p, s, r)
}
";
    let re = Literal::from_vec(&[3], vec![1.0f32, 2.0, 3.0]).unwrap();
    let r = run(text, &[re]).unwrap();
    let c = |l: Literal| l.to_vec::<(f32, f32)>().unwrap();
    assert_eq!(c(part(&r, 0)), vec![(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (0.0, 0.0)]);
    assert_eq!(c(part(&r, 1)), vec![(9.0, 6.0)]);
    assert_eq!(c(part(&r, 2)), vec![(0.0, 0.0), (2.0, 0.0), (1.0, 0.0), (0.0, 0.0), (0.0, 0.0)]);
}

#[test]
fn complex_dot() {
    let text = "HloModule m
ENTRY e {
  a = c64[2,2] parameter(0)
  b = c64[2] parameter(1)
  ROOT d = c64[2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
";
    let a = Literal::from_vec(&[2, 2], vec![(1.0f32, 1.0f32), (0.0, 2.0), (3.0, 0.0), (1.0, -1.0)]).unwrap();
    let b = Literal::from_vec(&[2], vec![(2.0f32, 0.0f32), (0.0, 1.0)]).unwrap();
    // Row 0: (1+i)2 + (2i)(i) = 2 + 2i - 2 = 2i; row 1: 3*2 + (1-i)i = 6 + i + 1 = 7 + i.
    let r = run(text, &[a, b]).unwrap();
    assert_eq!(r.to_vec::<(f32, f32)>().unwrap(), vec![(0.0, 2.0), (7.0, 1.0)]);
}

#[test]
fn malformed_uses_are_errors_not_panics() {
    // Modules the verifier lets through but the interpreter cannot give a meaning to.
    let cases = [
        "HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] custom-call(x), custom_call_target=\"nothing\"\n}\n",
        "HloModule m\nENTRY e {\n  t = token[] after-all()\n  in = (f32[4], token[]) infeed(t)\n  ROOT d = f32[4] get-tuple-element(in), index=0\n}\n",
        "HloModule m\nENTRY e {\n  s = u64[2] parameter(0)\n  ROOT r = (u64[2], pred[4]) rng-bit-generator(s), algorithm=rng_philox\n}\n",
    ];
    for text in cases {
        let Ok(m) = parse_module(text) else { continue };
        let args: Vec<Literal> =
            m.entry_comp().parameter_shapes().iter().map(|s| Literal::zeros(s.without_layout()).unwrap()).collect();
        assert!(evaluate(&m, &args).is_err(), "{text}");
    }
}

#[test]
fn lexicographic_comparators_run_as_computations() {
    let text = "HloModule m
cmp {
  a0 = s32[] parameter(0)
  b0 = s32[] parameter(1)
  a1 = f32[] parameter(2)
  b1 = f32[] parameter(3)
  lt0 = pred[] compare(a0, b0), direction=LT
  eq0 = pred[] compare(a0, b0), direction=EQ
  gt1 = pred[] compare(a1, b1), direction=GT
  tie = pred[] and(eq0, gt1)
  ROOT r = pred[] or(lt0, tie)
}
ENTRY e {
  k = s32[5] parameter(0)
  v = f32[5] parameter(1)
  ROOT s = (s32[5], f32[5]) sort(k, v), dimensions={0}, to_apply=cmp
}
";
    let k = Literal::from_vec(&[5], vec![2, 1, 2, 1, 0]).unwrap();
    let v = Literal::from_vec(&[5], vec![0.5f32, 1.0, 3.0, 2.0, -1.0]).unwrap();
    let r = run(text, &[k, v]).unwrap();
    assert_eq!(s32s(&part(&r, 0)), vec![0, 1, 1, 2, 2]);
    assert_eq!(f32s(&part(&r, 1)), vec![-1.0, 2.0, 1.0, 3.0, 0.5]);
}

#[test]
fn complex_power_of_zero_follows_xla() {
    let text = "HloModule m
ENTRY e {
  a = c64[4] parameter(0)
  b = c64[4] parameter(1)
  ROOT p = c64[4] power(a, b)
}
";
    let a = Literal::from_vec(&[4], vec![(0.0f32, 0.0f32); 4]).unwrap();
    let b = Literal::from_vec(&[4], vec![(0.0f32, 0.0f32), (1.0, 0.0), (-1.0, 0.0), (1.0, 1.0)]).unwrap();
    let r = run(text, &[a, b]).unwrap().to_vec::<(f32, f32)>().unwrap();
    assert_eq!(r[..2], [(1.0, 0.0), (0.0, 0.0)]);
    assert!(r[2].0.is_nan() && r[3].1.is_nan());
}

#[test]
fn stochastic_convert_matches_xla() {
    let text = "HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  r = u32[8] parameter(1)
  ROOT c = s32[8] stochastic-convert(x, r)
}
";
    let x = Literal::from_vec(&[8], vec![1.25f32, 1.25, -2.75, -2.75, 3e9, -3e9, f32::NAN, 0.5]).unwrap();
    let q = 1u32 << 30;
    let r = Literal::from_vec(&[8], vec![q - 1, q + 1, 3 * q - 1, 3 * q + 1, 0, 0, 5, 2 * q]).unwrap();
    // XLA:CPU's result for the same inputs.
    assert_eq!(s32s(&run(text, &[x, r]).unwrap()), vec![2, 1, -3, -2, i32::MAX, i32::MIN, 0, 0]);
}
