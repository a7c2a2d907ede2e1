//! Control flow and host operations through the facade, on the JIT tiers against the
//! interpreter: nested while loops, conditionals with pred and s32 selectors (out-of-range
//! indices included), loop state in tiled and mixed layouts and updated in place, custom-calls to host functions
//! (registered and not), infeed/outfeed queues (an empty infeed included), and a loop whose
//! temporaries overflow a memory space.

use std::collections::BTreeMap;

use tessera::{Backend, Client, ClientOptions, CompileOptions, Error, Executable};
use tessera_hlo::Literal;

const TIERS: [Backend; 2] = [Backend::Cranelift, Backend::Llvm];
const BACKENDS: [Backend; 4] = [Backend::Interp, Backend::Cranelift, Backend::Llvm, Backend::Tiered];

fn compile(backend: Backend, text: &str) -> Executable {
    match Client::new(backend).unwrap().compile_text(text, &CompileOptions::default()) {
        Ok(exe) => exe,
        Err(e) => panic!("{backend}: {e}"),
    }
}

fn f32s(lit: &Literal) -> Vec<f32> {
    lit.to_vec::<f32>().unwrap()
}

/// Runs `text` on every backend and checks each JIT tier's leaves against the interpreter's,
/// bit for bit (the modules use exactly representable arithmetic); returns the interpreter's.
fn agree(text: &str, args: &[Literal]) -> Vec<Literal> {
    let reference = compile(Backend::Interp, text).run(args).unwrap();
    for tier in TIERS {
        let out = compile(tier, text).run(args).unwrap_or_else(|e| panic!("{tier}: {e}"));
        assert_eq!(out.len(), reference.len(), "{tier}");
        for (i, (got, want)) in out.iter().zip(&reference).enumerate() {
            assert!(got.shape().compatible(want.shape()), "{tier}, result {i}: {} vs {}", got.shape(), want.shape());
            // Bit for bit, in the tier's result layout.
            let want = want.relayout_like(got.shape()).unwrap();
            assert_eq!(got.physical_bytes().unwrap(), want.physical_bytes().unwrap(), "{tier}, result {i}");
        }
    }
    reference
}

/// for i in 0..3 { for j in 0..4 { acc = acc * 0.5 + x } ; acc = acc + i }: loops inside loops,
/// a parameter passed through both, nested tuple state.
const NESTED: &str = "\
HloModule nested

inner_cond {
  s = (s32[], f32[5,3], f32[5,3]) parameter(0)
  j = s32[] get-tuple-element(s), index=0
  four = s32[] constant(4)
  ROOT lt = pred[] compare(j, four), direction=LT
}

inner_body {
  s = (s32[], f32[5,3], f32[5,3]) parameter(0)
  j = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j1 = s32[] add(j, one)
  acc = f32[5,3] get-tuple-element(s), index=1
  x = f32[5,3] get-tuple-element(s), index=2
  half = f32[] constant(0.5)
  h = f32[5,3] broadcast(half), dimensions={}
  m = f32[5,3] multiply(acc, h)
  a = f32[5,3] add(m, x)
  ROOT t = (s32[], f32[5,3], f32[5,3]) tuple(j1, a, x)
}

outer_cond {
  s = (s32[], (f32[5,3], f32[5,3])) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}

outer_body {
  s = (s32[], (f32[5,3], f32[5,3])) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  pair = (f32[5,3], f32[5,3]) get-tuple-element(s), index=1
  acc = f32[5,3] get-tuple-element(pair), index=0
  x = f32[5,3] get-tuple-element(pair), index=1
  zero = s32[] constant(0)
  init = (s32[], f32[5,3], f32[5,3]) tuple(zero, acc, x)
  w = (s32[], f32[5,3], f32[5,3]) while(init), condition=inner_cond, body=inner_body
  acc2 = f32[5,3] get-tuple-element(w), index=1
  fi = f32[] convert(i)
  bi = f32[5,3] broadcast(fi), dimensions={}
  acc3 = f32[5,3] add(acc2, bi)
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  p2 = (f32[5,3], f32[5,3]) tuple(acc3, x)
  ROOT t = (s32[], (f32[5,3], f32[5,3])) tuple(i1, p2)
}

ENTRY main {
  x = f32[5,3] parameter(0)
  zero = s32[] constant(0)
  z = f32[] constant(0)
  acc = f32[5,3] broadcast(z), dimensions={}
  pair = (f32[5,3], f32[5,3]) tuple(acc, x)
  init = (s32[], (f32[5,3], f32[5,3])) tuple(zero, pair)
  w = (s32[], (f32[5,3], f32[5,3])) while(init), condition=outer_cond, body=outer_body
  n = s32[] get-tuple-element(w), index=0
  p = (f32[5,3], f32[5,3]) get-tuple-element(w), index=1
  r = f32[5,3] get-tuple-element(p), index=0
  ROOT out = (s32[], f32[5,3]) tuple(n, r)
}
";

#[test]
fn nested_loops_agree_with_the_interpreter() {
    let x: Vec<f32> = (0..15).map(|i| i as f32 - 7.0).collect();
    let out = agree(NESTED, &[Literal::from_vec(&[5, 3], x.clone()).unwrap()]);
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![3]);
    let mut acc = vec![0f32; 15];
    for i in 0..3 {
        for _ in 0..4 {
            acc.iter_mut().zip(&x).for_each(|(a, x)| *a = *a * 0.5 + x);
        }
        acc.iter_mut().for_each(|a| *a += i as f32);
    }
    assert_eq!(f32s(&out[1]), acc);
}

/// Runs `exe` once with profiling on: its results, the launches its profile counted and the
/// copies it timed.
fn profiled_run(exe: &Executable, args: &[Literal]) -> (Vec<Literal>, u64, u64) {
    let runtime = exe.runtime().unwrap();
    runtime.set_profiling(true);
    let out = exe.run(args).unwrap();
    let profile = runtime.profile().unwrap();
    runtime.set_profiling(false);
    (out, profile.launches.iter().map(|(n, _)| n).sum(), profile.copies.0)
}

/// The compiled entry holds the step tree twice, a fast copy and a profiled one (every
/// launch through the runtime): both compute the same results and count the same launches,
/// and the profile sees every one of them.
#[test]
fn profiled_and_fast_runs_agree_and_count_every_launch() {
    let x = Literal::from_vec(&[5, 3], (0..15).map(|i| i as f32 * 0.25).collect()).unwrap();
    for tier in TIERS {
        let exe = compile(tier, NESTED);
        let fast = exe.run(std::slice::from_ref(&x)).unwrap();
        let launches = exe.last_run_launches().unwrap();
        let (profiled, counted, copies) = profiled_run(&exe, std::slice::from_ref(&x));
        assert_eq!(fast, profiled, "{tier}");
        assert_eq!(exe.last_run_launches(), Some(launches), "{tier}");
        assert_eq!(counted, launches, "{tier}: the profile's launches");
        // 3 outer and 12 inner iterations, each with its condition, plus the exits' checks.
        assert!(launches >= 3 + 12 + 4 + 1, "{tier}: {launches} launches");
        assert!(copies > 0, "{tier}: loop state copies are timed");
    }
}

/// A scalar `sin` step of a loop: the LLVM tier inlines it into the entry's fast copy and
/// runs Cranelift's copy of its kernel in profiled runs. Both copies compute the same bits as
/// the interpreter, through the moderate reduction and the large arguments' (1e30 + i) alike.
const SCALAR_SIN_LOOP: &str = "\
HloModule scalar_sin_loop

cond {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(40)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  y = f32[] get-tuple-element(s), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  fi = f32[] convert(i)
  t = f32[] add(y, fi)
  sn = f32[] sine(t)
  k = f32[] constant(0.999)
  yk = f32[] multiply(y, k)
  sum = f32[] add(yk, sn)
  ROOT out = (s32[], f32[]) tuple(next, sum)
}

ENTRY main {
  x = f32[] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[]) tuple(zero, x)
  w = (s32[], f32[]) while(init), condition=cond, body=body
  ROOT y = f32[] get-tuple-element(w), index=1
}
";

#[test]
fn a_hot_scalar_step_runs_the_same_profiled_and_fast() {
    for x in [0.3f32, 1e30] {
        let arg = Literal::scalar(x);
        let want = agree(SCALAR_SIN_LOOP, std::slice::from_ref(&arg));
        for tier in TIERS {
            let (profiled, counted, _) = profiled_run(&compile(tier, SCALAR_SIN_LOOP), std::slice::from_ref(&arg));
            assert_eq!(profiled, want, "{tier}, x = {x}: profiled");
            assert!(counted >= 40, "{tier}: a launch per step");
        }
    }
}

/// A loop that runs zero times returns its initial state, and a swap of two state leaves
/// per iteration (a result leaf that is another state leaf) is not clobbered.
#[test]
fn zero_trip_loops_and_swapped_state() {
    let text = "\
HloModule swap

cond {
  s = (s32[], s32[], f32[3], f32[3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] get-tuple-element(s), index=1
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], s32[], f32[3], f32[3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] get-tuple-element(s), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  a = f32[3] get-tuple-element(s), index=2
  b = f32[3] get-tuple-element(s), index=3
  ROOT t = (s32[], s32[], f32[3], f32[3]) tuple(i1, n, b, a)
}

ENTRY main {
  n = s32[] parameter(0)
  a = f32[3] parameter(1)
  b = f32[3] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], s32[], f32[3], f32[3]) tuple(zero, n, a, b)
  w = (s32[], s32[], f32[3], f32[3]) while(init), condition=cond, body=body
  x = f32[3] get-tuple-element(w), index=2
  y = f32[3] get-tuple-element(w), index=3
  ROOT r = (f32[3], f32[3]) tuple(x, y)
}
";
    let a = Literal::from_vec(&[3], vec![1f32, 2.0, 3.0]).unwrap();
    let b = Literal::from_vec(&[3], vec![-1f32, -2.0, -3.0]).unwrap();
    for (n, swapped) in [(0, false), (1, true), (2, false), (7, true), (-3, false)] {
        let out = agree(text, &[Literal::scalar(n), a.clone(), b.clone()]);
        let (first, second) = if swapped { (&b, &a) } else { (&a, &b) };
        assert_eq!(f32s(&out[0]), f32s(first), "n = {n}");
        assert_eq!(f32s(&out[1]), f32s(second), "n = {n}");
    }
}

const CONDITIONALS: &str = "\
HloModule branches

neg {
  x = f32[2,3] parameter(0)
  ROOT n = f32[2,3] negate(x)
}

twice {
  x = f32[2,3] parameter(0)
  ROOT d = f32[2,3] add(x, x)
}

square {
  x = f32[2,3] parameter(0)
  ROOT m = f32[2,3] multiply(x, x)
}

pass {
  t = (f32[2,3], s32[]) parameter(0)
  ROOT x = f32[2,3] get-tuple-element(t), index=0
}

ENTRY main {
  p = pred[] parameter(0)
  i = s32[] parameter(1)
  x = f32[2,3] parameter(2)
  a = f32[2,3] conditional(p, x, x), true_computation=neg, false_computation=twice
  t = (f32[2,3], s32[]) tuple(a, i)
  ROOT b = f32[2,3] conditional(i, a, a, t), branch_computations={neg, square, pass}
}
";

/// A loop whose state is updated in place where a kernel reads it element by element (the
/// counter, `a`) and through a temporary where it does not (`b`, read transposed): every
/// tier agrees with the interpreter bit for bit. The arrays are 256 KiB, so the kernels'
/// grids are split across threads.
const STATE_IN_PLACE: &str = "\
HloModule state_in_place

cond {
  s = (s32[], f32[256,256], f32[256,256]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[256,256], f32[256,256]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[256,256] get-tuple-element(s), index=1
  b = f32[256,256] get-tuple-element(s), index=2
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  h = f32[] constant(0.5)
  hs = f32[256,256] broadcast(h), dimensions={}
  ah = f32[256,256] multiply(a, hs)
  a2 = f32[256,256] add(ah, hs)
  bt = f32[256,256] transpose(b), dimensions={1,0}
  b2 = f32[256,256] add(bt, a)
  ROOT r = (s32[], f32[256,256], f32[256,256]) tuple(i2, a2, b2)
}

ENTRY main {
  a = f32[256,256] parameter(0)
  b = f32[256,256] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[256,256], f32[256,256]) tuple(zero, a, b)
  w = (s32[], f32[256,256], f32[256,256]) while(init), condition=cond, body=body
  wa = f32[256,256] get-tuple-element(w), index=1
  wb = f32[256,256] get-tuple-element(w), index=2
  ROOT out = (f32[256,256], f32[256,256]) tuple(wa, wb)
}
";

#[test]
fn loop_state_updated_in_place_agrees_with_the_interpreter() {
    let square = |f: fn(i64) -> f32| Literal::from_vec(&[256, 256], (0..256 * 256).map(f).collect()).unwrap();
    let a = square(|i| (i % 64) as f32 * 0.25);
    let b = square(|i| (i / 256) as f32 - (i % 256) as f32 * 0.5);
    let out = agree(STATE_IN_PLACE, &[a, b]);
    // Not symmetric: a kernel reading `b` as it overwrote it would show.
    let wb = f32s(&out[1]);
    assert_ne!(wb[1], wb[256]);
}

#[test]
fn conditionals_with_pred_and_index_selectors() {
    let x: Vec<f32> = (0..6).map(|i| i as f32 - 2.5).collect();
    let xl = Literal::from_vec(&[2, 3], x.clone()).unwrap();
    for p in [true, false] {
        // Out-of-range indices (negative, too large) run the last branch.
        for i in [-5, -1, 0, 1, 2, 3, 100] {
            let out = agree(CONDITIONALS, &[Literal::scalar(p), Literal::scalar(i), xl.clone()]);
            let a: Vec<f32> = x.iter().map(|v| if p { -v } else { v + v }).collect();
            let b: Vec<f32> = match i {
                0 => a.iter().map(|v| -v).collect(),
                1 => a.iter().map(|v| v * v).collect(),
                _ => a.clone(),
            };
            assert_eq!(f32s(&out[0]), b, "p = {p}, i = {i}");
        }
    }
}

/// Loop state in a tiled layout, a body whose parameter states another layout than the
/// while (relaid out on the way in and back), and a conditional inside the loop.
#[test]
fn loop_state_in_tiled_and_mixed_layouts() {
    let text = "\
HloModule tiled, entry_computation_layout={(f32[5,7]{1,0:T(2,4)}, s32[])->(f32[5,7]{0,1}, s32[])}

cond {
  s = (s32[], f32[5,7]{1,0:T(2,4)}, s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] get-tuple-element(s), index=2
  ROOT lt = pred[] compare(i, n), direction=LT
}

up {
  x = f32[5,7]{0,1} parameter(0)
  one = f32[] constant(1)
  b = f32[5,7]{0,1} broadcast(one), dimensions={}
  ROOT a = f32[5,7]{0,1} add(x, b)
}

down {
  x = f32[5,7]{0,1} parameter(0)
  ROOT t = f32[5,7]{0,1} transpose(x), dimensions={0,1}
}

body {
  s = (s32[], f32[5,7]{0,1}, s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[5,7]{0,1} get-tuple-element(s), index=1
  n = s32[] get-tuple-element(s), index=2
  two = s32[] constant(2)
  r = s32[] remainder(i, two)
  zero = s32[] constant(0)
  even = pred[] compare(r, zero), direction=EQ
  y = f32[5,7]{0,1} conditional(even, x, x), true_computation=up, false_computation=down
  h = f32[] constant(0.5)
  hb = f32[5,7]{0,1} broadcast(h), dimensions={}
  z = f32[5,7]{1,0:T(2,4)} multiply(y, hb)
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[5,7]{1,0:T(2,4)}, s32[]) tuple(i1, z, n)
}

ENTRY main {
  x = f32[5,7]{1,0:T(2,4)} parameter(0)
  n = s32[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[5,7]{1,0:T(2,4)}, s32[]) tuple(zero, x, n)
  w = (s32[], f32[5,7]{1,0:T(2,4)}, s32[]) while(init), condition=cond, body=body
  r = f32[5,7]{0,1} get-tuple-element(w), index=1
  c = s32[] get-tuple-element(w), index=0
  ROOT out = (f32[5,7]{0,1}, s32[]) tuple(r, c)
}
";
    let x: Vec<f32> = (0..35).map(|i| i as f32 * 0.25 - 3.0).collect();
    for n in [0, 1, 4, 5] {
        let out = agree(text, &[Literal::from_vec(&[5, 7], x.clone()).unwrap(), Literal::scalar(n)]);
        let mut want = x.clone();
        for i in 0..n {
            want.iter_mut().for_each(|v| *v = if i % 2 == 0 { (*v + 1.0) * 0.5 } else { *v * 0.5 });
        }
        let got = out[0].relayout(&tessera_hlo::Layout::new(&[1, 0])).unwrap();
        assert_eq!(f32s(&got), want, "n = {n}");
        assert_eq!(out[1].to_vec::<i32>().unwrap(), vec![n.max(0)]);
    }
}

const HOST_CALL: &str = "\
HloModule host

cond {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}

body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4] get-tuple-element(s), index=1
  c = (f32[4], s32[]) custom-call(x, i), custom_call_target=\"scale_and_count\"
  y = f32[4] get-tuple-element(c), index=0
  i1 = s32[] get-tuple-element(c), index=1
  ROOT t = (s32[], f32[4]) tuple(i1, y)
}

ENTRY main {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT r = f32[4] get-tuple-element(w), index=1
}
";

fn host_client(backend: Backend) -> Client {
    let mut client = Client::new(backend).unwrap();
    client
        .register_custom_call("scale_and_count", |args: &[Literal]| {
            let x = args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
            let i = args[1].to_vec::<i32>().map_err(|e| e.to_string())?[0];
            let y: Vec<f32> = x.iter().map(|v| v * 3.0 + i as f32).collect();
            Ok(Literal::tuple(vec![Literal::from_vec(&[4], y).map_err(|e| e.to_string())?, Literal::scalar(i + 1)]))
        })
        .unwrap();
    client
}

#[test]
fn custom_calls_run_registered_host_functions_on_every_backend() {
    let x = vec![1f32, -2.0, 0.5, 4.0];
    let mut want = x.clone();
    for i in 0..3 {
        want.iter_mut().for_each(|v| *v = *v * 3.0 + i as f32);
    }
    for backend in BACKENDS {
        let exe = host_client(backend).compile_text(HOST_CALL, &CompileOptions::default()).unwrap();
        let out = exe.run(&[Literal::from_vec(&[4], x.clone()).unwrap()]).unwrap();
        assert_eq!(f32s(&out[0]), want, "{backend}");
    }
}

#[test]
fn custom_call_errors_name_the_target() {
    for backend in BACKENDS {
        let err = Client::new(backend).unwrap().compile_text(HOST_CALL, &CompileOptions::default()).err().unwrap();
        assert!(matches!(err, Error::CustomCall { .. }), "{backend}: {err}");
        assert!(err.to_string().contains("'scale_and_count'") && err.to_string().contains("'c'"), "{err}");

        // A host function that fails, or answers with another shape, fails the run.
        let mut client = Client::new(backend).unwrap();
        client.register_custom_call("scale_and_count", |_: &[Literal]| Err("refused".to_string())).unwrap();
        let exe = client.compile_text(HOST_CALL, &CompileOptions::default()).unwrap();
        let err = exe.run(&[Literal::from_vec(&[4], vec![0f32; 4]).unwrap()]).unwrap_err();
        assert!(err.to_string().contains("refused") && err.to_string().contains("scale_and_count"), "{backend}: {err}");
        let mut client = Client::new(backend).unwrap();
        client.register_custom_call("scale_and_count", |_: &[Literal]| Ok(Literal::scalar(1f32))).unwrap();
        let exe = client.compile_text(HOST_CALL, &CompileOptions::default()).unwrap();
        let err = exe.run(&[Literal::from_vec(&[4], vec![0f32; 4]).unwrap()]).unwrap_err();
        assert!(err.to_string().contains("'c'"), "{backend}: {err}");
    }
    let mut client = Client::new(Backend::Llvm).unwrap();
    let err = client.register_custom_call("TopK", |_: &[Literal]| Ok(Literal::scalar(0f32))).unwrap_err();
    assert!(err.to_string().contains("TopK"), "{err}");
}

/// Each iteration reads a value from the infeed and sends a running sum to the outfeed.
const FEEDS: &str = "\
HloModule feeds

cond {
  s = (s32[], f32[2,2]{0,1}, token[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  two = s32[] constant(2)
  ROOT lt = pred[] compare(i, two), direction=LT
}

body {
  s = (s32[], f32[2,2]{0,1}, token[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  acc = f32[2,2]{0,1} get-tuple-element(s), index=1
  tok = token[] get-tuple-element(s), index=2
  in = ((f32[2,2]{0,1}, s32[]), token[]) infeed(tok)
  data = (f32[2,2]{0,1}, s32[]) get-tuple-element(in), index=0
  v = f32[2,2]{0,1} get-tuple-element(data), index=0
  k = s32[] get-tuple-element(data), index=1
  tok2 = token[] get-tuple-element(in), index=1
  sum = f32[2,2]{0,1} add(acc, v)
  tok3 = token[] outfeed(sum, tok2), outfeed_shape=f32[2,2]{0,1}
  i1 = s32[] add(i, k)
  ROOT t = (s32[], f32[2,2]{0,1}, token[]) tuple(i1, sum, tok3)
}

ENTRY main {
  x = f32[2,2] parameter(0)
  zero = s32[] constant(0)
  tok = token[] after-all()
  acc = f32[2,2]{0,1} copy(x)
  init = (s32[], f32[2,2]{0,1}, token[]) tuple(zero, acc, tok)
  w = (s32[], f32[2,2]{0,1}, token[]) while(init), condition=cond, body=body
  ROOT r = f32[2,2]{0,1} get-tuple-element(w), index=1
}
";

#[test]
fn infeed_and_outfeed_queues_on_every_backend() {
    let x = Literal::from_vec(&[2, 2], vec![1f32, 2.0, 3.0, 4.0]).unwrap();
    let feed = |v: f32| {
        Literal::tuple(vec![Literal::from_vec(&[2, 2], vec![v, 2.0 * v, 0.0, -v]).unwrap(), Literal::scalar(1i32)])
    };
    for backend in BACKENDS {
        let exe = compile(backend, FEEDS);
        for v in [10f32, 20.0, 30.0] {
            exe.push_infeed(feed(v));
        }
        let out = exe.run(std::slice::from_ref(&x)).unwrap();
        let row_major = out[0].relayout(&tessera_hlo::Layout::new(&[1, 0])).unwrap();
        assert_eq!(f32s(&row_major), vec![31.0, 62.0, 3.0, -26.0], "{backend}");
        assert_eq!(exe.infeed_len(), 1, "{backend}: the third value stays queued");
        let first = exe.pop_outfeed().unwrap();
        assert_eq!(first.array_shape().unwrap().dims, vec![2, 2], "{backend}");
        assert_eq!(f32s(&first.relayout(&tessera_hlo::Layout::new(&[1, 0])).unwrap()), vec![11.0, 22.0, 3.0, -6.0]);
        assert!(exe.pop_outfeed().is_some() && exe.pop_outfeed().is_none(), "{backend}");

        // One value left for two iterations: the second infeed finds nothing queued.
        let err = exe.run(std::slice::from_ref(&x)).unwrap_err().to_string();
        assert!(err.contains("infeed") && err.contains("'in'") && err.contains("queued"), "{backend}: {err}");
        assert_eq!(exe.infeed_len(), 0, "{backend}");
        // A queued value of the wrong shape is an error, not a wrong answer.
        exe.push_infeed(Literal::from_vec(&[3], vec![1f32, 2.0, 3.0]).unwrap());
        assert!(exe.run(std::slice::from_ref(&x)).is_err(), "{backend}");
    }
}

#[test]
fn loop_temporaries_are_bounded_by_memory_spaces() {
    let text = "\
HloModule spaces

cond {
  s = (s32[], f32[256]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[256]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[256] get-tuple-element(s), index=1
  t = f32[256]{0:S(1)} exponential(x)
  y = f32[256] negate(t)
  ROOT r = (s32[], f32[256]) tuple(i1, y)
}

ENTRY main {
  x = f32[256] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[256]) tuple(zero, x)
  w = (s32[], f32[256]) while(init), condition=cond, body=body
  ROOT r = f32[256] get-tuple-element(w), index=1
}
";
    let options = CompileOptions {
        lower: tessera::LowerOptions { fusion: false, ..Default::default() },
        ..CompileOptions::default()
    };
    for backend in TIERS {
        let small = ClientOptions { memory_spaces: BTreeMap::from([(1, 512)]), ..ClientOptions::default() };
        let err = Client::with_options(backend, &small).unwrap().compile_text(text, &options).err().unwrap();
        assert_eq!(
            err.to_string(),
            "memory space S(1) needs 1024 bytes for temporaries but its capacity is 512 (512 bytes over)",
            "{backend}"
        );
        let roomy = ClientOptions { memory_spaces: BTreeMap::from([(1, 1024)]), ..ClientOptions::default() };
        let exe = Client::with_options(backend, &roomy).unwrap().compile_text(text, &options).unwrap();
        let out = exe.run(&[Literal::from_vec(&[256], vec![0f32; 256]).unwrap()]).unwrap();
        let mut want = 0f32;
        for _ in 0..3 {
            want = -want.exp();
        }
        assert!(f32s(&out[0]).iter().all(|&v| (v - want).abs() <= 1e-6), "{backend}: want {want}");
    }
}

/// Dynamic-update-slices that write into their operand's buffer (a scan's loop state, a
/// kernel result nobody else reads) beside ones that must not (an entry parameter, a value
/// read again, a branch's parameter): `lower/tests/filetests/program_in_place_update.hlo`
/// shows which is which; here every result must still be the interpreter's.
const IN_PLACE: &str = "\
HloModule in_place

body {
  s = (s32[], f32[8,4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  ys = f32[8,4] get-tuple-element(s), index=1
  x = f32[4] get-tuple-element(s), index=2
  fi = f32[] convert(i)
  b = f32[4] broadcast(fi), dimensions={}
  y = f32[4] multiply(x, b)
  row = f32[1,4] reshape(y)
  zero = s32[] constant(0)
  ys2 = f32[8,4] dynamic-update-slice(ys, row, i, zero)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[8,4], f32[4]) tuple(i2, ys2, x)
}

cond {
  s = (s32[], f32[8,4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(8)
  ROOT lt = pred[] compare(i, n), direction=LT
}

branch {
  a = f32[8,4] parameter(0)
  v = f32[1,4] constant({{9, 9, 9, 9}})
  z = s32[] constant(0)
  ROOT d = f32[8,4] dynamic-update-slice(a, v, z, z)
}

other {
  a = f32[8,4] parameter(0)
  ROOT n = f32[8,4] negate(a)
}

ENTRY main {
  p = f32[8,4] parameter(0)
  x = f32[4] parameter(1)
  k = s32[] parameter(2)
  c = pred[] parameter(3)
  zero = s32[] constant(0)
  init = (s32[], f32[8,4], f32[4]) tuple(zero, p, x)
  w = (s32[], f32[8,4], f32[4]) while(init), condition=cond, body=body
  ys = f32[8,4] get-tuple-element(w), index=1
  u = f32[1,4] reshape(x)
  t = f32[8,4] negate(p)
  d = f32[8,4] dynamic-update-slice(t, u, k, zero)
  e = f32[8,4] dynamic-update-slice(p, u, k, zero)
  u2 = f32[8,4] add(p, p)
  f = f32[8,4] dynamic-update-slice(u2, u, k, zero)
  g = f32[8,4] add(f, u2)
  h = f32[8,4] conditional(c, ys, ys), true_computation=branch, false_computation=other
  ROOT r = (f32[8,4], f32[8,4], f32[8,4], f32[8,4], f32[8,4], f32[8,4]) tuple(ys, d, e, g, h, p)
}
";

#[test]
fn dynamic_update_slices_in_place_agree_with_the_interpreter() {
    let p = Literal::from_vec(&[8, 4], (0..32).map(|v| v as f32 * 0.25).collect()).unwrap();
    let x = Literal::from_vec(&[4], vec![1f32, -2.0, 3.5, 0.5]).unwrap();
    // In range, the last row, and out of range (clamped to the last row, and to the first).
    for (k, c) in [(3, true), (7, false), (100, true), (-5, false)] {
        let out = agree(IN_PLACE, &[p.clone(), x.clone(), Literal::scalar(k as i32), Literal::scalar(c)]);
        // The parameter itself is returned untouched: nothing wrote into the caller's buffer.
        assert_eq!(f32s(&out[5]), f32s(&p), "k {k}");
        let row = k.clamp(0, 7) as usize;
        assert_eq!(&f32s(&out[2])[row * 4..row * 4 + 4], &[1.0, -2.0, 3.5, 0.5], "k {k}");
    }
}
