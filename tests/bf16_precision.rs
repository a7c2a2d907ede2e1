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
