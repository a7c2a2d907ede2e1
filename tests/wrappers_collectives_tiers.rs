//! The wrapper ops (async start/update/done, copy-start/done, add-dependency, domain, the
//! dimension-size queries), collectives on one device and stochastic-convert on both JIT tiers
//! against the interpreter, bit for bit; and the modules both refuse (groups naming other
//! devices, a dynamic set-dimension-size, stochastic-convert to an unsigned type) refused by
//! the tiers with an error naming the instruction. Sharding annotations (custom-calls JAX
//! emits) are their operand.

use tessera::{Backend, Client, CompileOptions};
use tessera_hlo::text::parse_module;
use tessera_hlo::{ElementType, Literal, Shape};
use tessera_testkit::Rng;

/// Floats spread over many magnitudes (fractions, values past every integer range, specials);
/// integers of any bit pattern.
fn random_literal(shape: &Shape, rng: &mut Rng) -> Literal {
    let a = shape.as_array().expect("array parameter");
    let n = a.dims.iter().product::<i64>() as usize;
    let bits = (0..n)
        .map(|_| {
            let r = rng.next_u64();
            let f = match r % 20 {
                0 => [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 127.5, -128.5, 2147483648.0, -9.3e18]
                    [(r >> 8) as usize % 8],
                _ => ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2f64.powi((r >> 5) as i32 % 24),
            };
            match a.element_type {
                ElementType::F64 => u128::from(f.to_bits()),
                ElementType::F32 => u128::from((f as f32).to_bits()),
                ElementType::F16 => u128::from(half::f16::from_f64(f).to_bits()),
                ElementType::BF16 => u128::from(half::bf16::from_f64(f).to_bits()),
                t => u128::from(rng.next_u64() & (u64::MAX >> (64 - t.bit_width().min(64)))),
            }
        })
        .collect();
    let mut row_major = a.clone();
    row_major.layout = None;
    Literal::from_bits_vec(Shape::Array(row_major), bits).expect("literal").relayout_like(shape).expect("relayout")
}

fn same(et: ElementType, g: u128, w: u128) -> bool {
    match et {
        ElementType::F32 => g == w || (f32::from_bits(g as u32).is_nan() && f32::from_bits(w as u32).is_nan()),
        ElementType::F64 => g == w || (f64::from_bits(g as u64).is_nan() && f64::from_bits(w as u64).is_nan()),
        _ => g == w,
    }
}

fn leaves(lit: &Literal) -> Vec<&Literal> {
    match lit.tuple_elements() {
        Some(es) => es.iter().flat_map(leaves).collect(),
        None => vec![lit],
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
            let (got, want): (Vec<&Literal>, Vec<&Literal>) =
                (got.iter().flat_map(leaves).collect(), want.iter().flat_map(leaves).collect());
            assert_eq!(got.len(), want.len(), "{backend}: result count\n{text}");
            for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.shape(), w.shape(), "{backend}: result {r} shape\n{text}");
                for i in 0..w.element_count() {
                    let (gb, wb) = (g.get_bits(i).unwrap(), w.get_bits(i).unwrap());
                    assert!(
                        same(w.element_type(), gb, wb),
                        "{backend}, seed {seed}: result {r} element {i}: got {gb:#x}, want {wb:#x}\n{text}"
                    );
                }
            }
        }
    }
}

/// Every backend refuses `text`; the tiers' errors name `inst` and contain `why`.
fn refused(text: &str, inst: &str, why: &str) {
    let module = parse_module(text).unwrap_or_else(|e| panic!("parse: {e}\n{text}"));
    let interp = Client::new(Backend::Interp).unwrap().compile(&module, &CompileOptions::default()).unwrap();
    let shapes = module.entry_comp().parameter_shapes();
    let mut rng = Rng::new(7);
    let args: Vec<Literal> = shapes.iter().map(|s| random_literal(s, &mut rng)).collect();
    assert!(interp.run(&args).is_err(), "the interpreter ran\n{text}");
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let err = match Client::new(backend).unwrap().compile(&module, &CompileOptions::default()) {
            Ok(_) => panic!("{backend} compiled\n{text}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(&format!("'{inst}'")) && err.contains(why), "{backend}: {err}\n{text}");
    }
}

#[test]
fn wrappers_become_ordinary_ops() {
    check(
        "HloModule m\nwrapped {\n  p = f32[4,6] parameter(0)\n  q = f32[4,6] parameter(1)\n  z = f32[] constant(0)\n  \
         m = f32[4,6] multiply(p, q)\n  ROOT s = f32[4] reduce(m, z), dimensions={1}, to_apply=add\n}\n\
         add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\
         ENTRY e {\n  x = f32[4,6]{0,1} parameter(0)\n  y = f32[4,6] parameter(1)\n  t = token[] after-all()\n  \
         a = f32[4,6]{0,1} add-dependency(x, t)\n  \
         d = f32[4,6]{0,1} domain(a), domain={kind=\"sharding\", entry={maximal device=0}, exit={maximal device=0}}\n  \
         s = ((f32[4,6]{0,1}, f32[4,6]), f32[4], s32[]) async-start(d, y), calls=wrapped\n  \
         u = ((f32[4,6]{0,1}, f32[4,6]), f32[4], s32[]) async-update(s)\n  r = f32[4] async-done(u)\n  \
         c = (f32[4,6]{0,1:T(2,2)}, f32[4,6], u32[]) copy-start(y)\n  cd = f32[4,6]{0,1:T(2,2)} copy-done(c)\n  \
         six = s32[] constant(6)\n  sd = f32[4,6]{0,1:T(2,2)} set-dimension-size(cd, six), dimensions={1}\n  \
         g = s32[] get-dimension-size(sd), dimensions={0}\n  gf = f32[] convert(g)\n  gb = f32[4,6] broadcast(gf), dimensions={}\n  \
         sum = f32[4,6] add(sd, gb)\n  ROOT o = (f32[4], f32[4,6], f32[4,6]{0,1}) tuple(r, sum, d)\n}\n",
        0..3,
    );
}

/// JAX writes these into single-device modules (`with_sharding_constraint`, `shard_map`);
/// on one device each is its operand, across a layout change too.
#[test]
fn sharding_annotations_are_their_operand() {
    check(
        "HloModule m\nENTRY e {\n  p = f32[4,6]{1,0} parameter(0)\n  \
         s = f32[4,6]{1,0} custom-call(p), custom_call_target=\"Sharding\", sharding={replicated}\n  \
         f = f32[4,6]{0,1} custom-call(s), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n  \
         n = f32[4,6]{0,1} negate(f)\n  \
         ROOT r = f32[4,6]{1,0} custom-call(n), custom_call_target=\"SPMDShardToFullShape\", sharding={replicated}\n}\n",
        0..2,
    );
    // The facade needs no host function for them, and refuses one.
    let mut client = Client::new(Backend::Llvm).unwrap();
    assert!(client.register_custom_call("Sharding", |_| Err("unused".into())).is_err());
}

#[test]
fn a_sharding_annotation_that_changes_the_shape_is_refused() {
    refused(
        "HloModule m\nENTRY e {\n  p = f32[4,6] parameter(0)\n  \
         ROOT s = f32[2,6] custom-call(p), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n}\n",
        "s",
        "sharding annotation",
    );
}

#[test]
fn collectives_among_one_device() {
    check(
        "HloModule m\nsum {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT s = s32[] add(a, b)\n}\n\
         ENTRY e {\n  x = s32[4,6] parameter(0)\n  y = s32[3]{0} parameter(1)\n  r = u32[] replica-id()\n  p = u32[] partition-id()\n  \
         rp = u32[] add(r, p)\n  ri = s32[] convert(rp)\n  rb = s32[4,6] broadcast(ri), dimensions={}\n  \
         ar = s32[4,6]{0,1} all-reduce(x), replica_groups={{0}}, to_apply=sum\n  \
         ar2 = (s32[4,6], s32[3]) all-reduce(x, y), replica_groups={}, to_apply=sum\n  a2 = s32[3] get-tuple-element(ar2), index=1\n  \
         ag = s32[4,6] all-gather(ar), replica_groups={{0}}, dimensions={0}\n  \
         rs = s32[4,6] reduce-scatter(ag), replica_groups={{0}}, dimensions={1}, to_apply=sum\n  \
         aa = s32[4,6] all-to-all(rs), replica_groups={{0}}, dimensions={0}\n  cb = s32[4,6] collective-broadcast(aa), replica_groups={{0}}\n  \
         cp = s32[4,6] collective-permute(cb), source_target_pairs={{0,0}}\n  \
         ars = s32[4,6] all-reduce-start(cp), replica_groups={{0}}, to_apply=sum\n  ard = s32[4,6] all-reduce-done(ars)\n  \
         o = s32[4,6] add(ard, rb)\n  ROOT t = (s32[4,6], s32[3]) tuple(o, a2)\n}\n",
        0..3,
    );
}

#[test]
fn collectives_naming_other_devices_are_refused() {
    let sum = "HloModule m\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n";
    for body in [
        "ROOT c = f32[4] all-reduce(x), replica_groups={{0,1}}, to_apply=sum",
        "ROOT c = f32[4] all-gather(x), replica_groups={{0},{1}}, dimensions={0}",
        "ROOT c = f32[4] collective-permute(x), source_target_pairs={{0,1}}",
        "ROOT c = f32[4] collective-broadcast(x), replica_groups={{1}}",
        // No groups means every replica; a result four times the operand means four of them.
        "ROOT c = f32[16] all-gather(x), replica_groups={}, dimensions={0}",
    ] {
        let text = format!("{sum}ENTRY e {{\n  x = f32[4] parameter(0)\n  {body}\n}}\n");
        refused(&text, "c", "several devices");
    }
}

#[test]
fn set_dimension_size_below_the_bound_is_refused() {
    refused(
        "HloModule m\nENTRY e {\n  x = f32[4,6] parameter(0)\n  n = s32[] constant(5)\n  \
         ROOT c = f32[4,6] set-dimension-size(x, n), dimensions={1}\n}\n",
        "c",
        "set-dimension-size",
    );
}

/// A size known only at run time: at the static size every backend runs on, in bounded
/// dynamic shapes too (values are at their bounds); any other size fails the run on every
/// backend, naming the instruction on the tiers. (The results are compared bit for bit, so
/// the fused op is exact: transcendental functions may differ from libm by an ulp.)
#[test]
fn set_dimension_size_at_run_time_is_checked() {
    let text =
        "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\
                ENTRY e {\n  x = f32[5,6]{0,1:T(2,2)} parameter(0)\n  n = s32[] parameter(1)\n  \
                d = f32[5,<=6]{0,1:T(2,2)} set-dimension-size(x, n), dimensions={1}\n  \
                e = f32[5,<=6] multiply(d, d)\n  z = f32[] constant(0)\n  \
                r = f32[<=6] reduce(e, z), dimensions={0}, to_apply=add\n  \
                g = s32[] get-dimension-size(d), dimensions={1}\n  \
                ROOT t = (f32[5,<=6], f32[<=6], s32[]) tuple(e, r, g)\n}\n";
    let module = parse_module(text).unwrap();
    let x = random_literal(&module.entry_comp().parameter_shapes()[0], &mut Rng::new(3));
    let clients: Vec<_> = [Backend::Interp, Backend::Cranelift, Backend::Llvm]
        .into_iter()
        .map(|b| (b, Client::new(b).unwrap().compile(&module, &CompileOptions::default()).unwrap()))
        .collect();
    let want = clients[0].1.run(&[x.clone(), Literal::scalar(6i32)]).unwrap();
    for (backend, exe) in &clients {
        let got = exe.run(&[x.clone(), Literal::scalar(6i32)]).unwrap_or_else(|e| panic!("{backend}: {e}"));
        for (g, w) in got.iter().flat_map(leaves).zip(want.iter().flat_map(leaves)) {
            assert!(g.eq_ignoring_layout(w), "{backend}: {g:?} vs {w:?}");
        }
        for size in [5, 0, -1, 7] {
            let err = exe.run(&[x.clone(), Literal::scalar(size)]).expect_err("a size off the static one ran");
            assert!(err.to_string().contains("set-dimension-size"), "{backend}, size {size}: {err}");
            if *backend != Backend::Interp {
                assert!(err.to_string().contains("'d'"), "{backend}: {err}");
            }
        }
    }
}

#[test]
fn stochastic_convert_every_float_random_and_result_type() {
    for x in ["f16", "bf16", "f32", "f64"] {
        for r in ["u8", "u16", "u32", "u64"] {
            let bits = |t: &str| t.trim_start_matches(|c: char| !c.is_ascii_digit()).parse::<u32>().unwrap();
            if bits(r) != bits(x) {
                // XLA pairs each operand with random bits of its own width.
                continue;
            }
            for out in ["s4", "s8", "s16", "s32", "s64"] {
                let text = format!(
                    "HloModule m\nENTRY e {{\n  x = {x}[7,9]{{0,1}} parameter(0)\n  r = {r}[7,9] parameter(1)\n  \
                     ROOT s = {out}[7,9] stochastic-convert(x, r)\n}}\n"
                );
                check(&text, 0..3);
            }
        }
    }
}

#[test]
fn stochastic_convert_to_unsigned_is_refused() {
    refused(
        "HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  r = u32[4] parameter(1)\n  ROOT c = u8[4] stochastic-convert(x, r)\n}\n",
        "c",
        "stochastic-convert to u8",
    );
}
