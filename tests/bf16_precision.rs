//! bf16 excess precision as XLA:CPU computes it, on every backend: an explicit f32 convert
//! of a bf16 op reads the unrounded f32 result, while a bf16 op feeding another bf16 op
//! rounds; `excess_precision: false` rounds everywhere. The expected values are what
//! `../shared/tools/xla_run.py` printed for these modules (jax 0.10): with x = 1 + 2^-7 and
//! z = 1 + 2^-6, x*x = 1 + 2^-6 + 2^-14 needs 15 significant bits, so rounding it to bf16
//! (8 bits) loses the 2^-14 that `x*x - z` exposes.

use half::bf16;
use tessera::{Backend, Client, CompileOptions};
use tessera_hlo::Literal;

const BACKENDS: [Backend; 3] = [Backend::Interp, Backend::Cranelift, Backend::Llvm];

/// The product read as f32 through an explicit convert.
const CONVERTED: &str = r#"HloModule converted
ENTRY e {
  x = bf16[4] parameter(0)
  z = bf16[4] parameter(1)
  m = bf16[4] multiply(x, x)
  c = f32[4] convert(m)
  cz = f32[4] convert(z)
  ROOT s = f32[4] subtract(c, cz)
}
"#;

/// The product feeding another bf16 op.
const CHAINED: &str = r#"HloModule chained
ENTRY e {
  x = bf16[4] parameter(0)
  z = bf16[4] parameter(1)
  m = bf16[4] multiply(x, x)
  s = bf16[4] subtract(m, z)
  ROOT f = f32[4] convert(s)
}
"#;

/// A dot whose result is read both as f32 (unrounded) and as bf16 (rounded): the two
/// outputs differ by exactly the rounding.
const DOT: &str = r#"HloModule dot
ENTRY e {
  x = bf16[1,2] parameter(0)
  z = bf16[2,1] parameter(1)
  d = bf16[1,1] dot(x, z), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  f = f32[1,1] convert(d)
  ROOT t = (f32[1,1], bf16[1,1]) tuple(f, d)
}
"#;

fn args(n: usize, dims: [&[i64]; 2]) -> Vec<Literal> {
    let x = bf16::from_f32(1.0 + 2f32.powi(-7));
    let z = bf16::from_f32(1.0 + 2f32.powi(-6));
    vec![Literal::from_vec(dims[0], vec![x; n]).unwrap(), Literal::from_vec(dims[1], vec![z; n]).unwrap()]
}

fn run(backend: Backend, text: &str, args: &[Literal], excess_precision: bool) -> Vec<Literal> {
    let options = CompileOptions::with_excess_precision(excess_precision);
    let exe = Client::new(backend).unwrap().compile_text(text, &options).unwrap_or_else(|e| panic!("{backend}: {e}"));
    exe.run(args).unwrap_or_else(|e| panic!("{backend}: {e}"))
}

#[test]
fn an_f32_convert_reads_the_unrounded_product_unless_strict() {
    let a = args(4, [&[4], &[4]]);
    for backend in BACKENDS {
        let out = run(backend, CONVERTED, &a, true)[0].to_vec::<f32>().unwrap();
        assert_eq!(out, vec![2f32.powi(-14); 4], "{backend}, XLA:CPU's default");
        let out = run(backend, CONVERTED, &a, false)[0].to_vec::<f32>().unwrap();
        assert_eq!(out, vec![0.0; 4], "{backend}, strict");
    }
}

#[test]
fn a_bf16_op_feeding_a_bf16_op_rounds() {
    let a = args(4, [&[4], &[4]]);
    for backend in BACKENDS {
        for excess in [true, false] {
            let out = run(backend, CHAINED, &a, excess)[0].to_vec::<f32>().unwrap();
            assert_eq!(out, vec![0.0; 4], "{backend}, excess precision {excess}");
        }
    }
}

#[test]
fn a_dot_read_as_f32_is_unrounded_and_as_bf16_rounded() {
    // (1 + 2^-7)(1 + 2^-6) * 2 = 2 + 3*2^-6 + 2^-12: the f32 result keeps 2^-12.
    let a = args(2, [&[1, 2], &[2, 1]]);
    let exact = 2.0 + 3.0 * 2f32.powi(-6) + 2f32.powi(-12);
    for backend in BACKENDS {
        let out = run(backend, DOT, &a, true);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![exact], "{backend}");
        assert_eq!(out[1].to_vec::<bf16>().unwrap(), vec![bf16::from_f32(exact)], "{backend}");
        let strict = run(backend, DOT, &a, false);
        assert_eq!(strict[0].to_vec::<f32>().unwrap(), vec![bf16::from_f32(exact).to_f32()], "{backend}, strict");
    }
}

/// A chain of bf16 arithmetic whose roundings skip their NaN tests (every operand is a bf16
/// value, so a NaN result is quiet with a zero lower half), and f32 arithmetic rounded to
/// bf16, whose NaNs may have any lower half, so its rounding must test for them.
const CHAIN_WITH_NANS: &str = r#"HloModule chain_with_nans
ENTRY e {
  x = bf16[917504] parameter(0)
  y = bf16[917504] parameter(1)
  z = f32[4096] parameter(2)
  s = bf16[917504] subtract(x, y)
  m = bf16[917504] multiply(s, y)
  d = bf16[917504] divide(m, x)
  a = bf16[917504] add(d, s)
  zz = f32[4096] add(z, z)
  c = bf16[4096] convert(zz)
  ROOT t = (bf16[917504], bf16[4096]) tuple(a, c)
}
"#;

#[test]
fn bf16_arithmetic_agrees_bit_for_bit_on_nans_and_every_value() {
    // Every bf16 value against NaNs (quiet, signaling, all payload bits set), infinities,
    // zeros, a subnormal and ordinary values: the tiers' vector and scalar loops give the
    // interpreter's bits, NaN payloads included.
    let specials: [u16; 14] =
        [0, 0x8000, 0x0001, 0x3f80, 0xbf80, 0x4049, 0x7f7f, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0xffff, 0x7fbf];
    let x: Vec<bf16> = specials.iter().flat_map(|_| (0..=u16::MAX).map(bf16::from_bits)).collect();
    let y: Vec<bf16> = specials.iter().flat_map(|&s| std::iter::repeat_n(bf16::from_bits(s), 65536)).collect();
    // f32 NaNs with nonzero lower halves (quiet, signaling, all ones), cycled with ordinary
    // values and halfway cases.
    let f32s =
        [0x7f80_0001u32, 0x7fff_ffff, 0xffc0_8000, 0x7fc0_7fff, 0x7fbf_ffff, 0x3f80_8000, 0x3f81_8000, 0x7f7f_ffff];
    let z: Vec<f32> = (0..4096).map(|i| f32::from_bits(f32s[i % f32s.len()])).collect();
    let n = x.len() as i64;
    let a = [
        Literal::from_vec(&[n], x.clone()).unwrap(),
        Literal::from_vec(&[n], y.clone()).unwrap(),
        Literal::from_vec(&[4096], z.clone()).unwrap(),
    ];
    let bits = |backend| -> (Vec<u16>, Vec<u16>) {
        let out = run(backend, CHAIN_WITH_NANS, &a, true);
        let bits = |l: &Literal| l.to_vec::<bf16>().unwrap().iter().map(|v| v.to_bits()).collect();
        (bits(&out[0]), bits(&out[1]))
    };
    let (want, want_c) = bits(Backend::Interp);
    for (i, (&v, &got)) in z.iter().zip(&want_c).enumerate() {
        assert_eq!(got, bf16::from_f32(v + v).to_bits(), "interp: f32 {:#010x} + itself, element {i}", v.to_bits());
    }
    // The reference itself, from the half crate's rounding after every op.
    let r = |v: f32| bf16::from_f32(v).to_f32();
    for (i, (&p, &q)) in x.iter().zip(&y).enumerate().step_by(7) {
        let (p, q) = (p.to_f32(), q.to_f32());
        let s = r(p - q);
        let expect = bf16::from_f32(r(r(s * q) / p) + s).to_bits();
        assert_eq!(want[i], expect, "interp: {:#06x} and {:#06x}", x[i].to_bits(), y[i].to_bits());
    }
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let (got, got_c) = bits(backend);
        assert_eq!(got_c, want_c, "{backend}: f32 sums rounded to bf16");
        if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "{backend}: bf16 {:#06x} and {:#06x} gave {:#06x}, the interpreter {:#06x}",
                x[i].to_bits(),
                y[i].to_bits(),
                got[i],
                want[i]
            );
        }
    }
}
