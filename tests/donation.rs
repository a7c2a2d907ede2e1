//! Donation (`input_output_alias`): a result the program may write into a parameter's memory
//! comes back in that parameter's buffer from `execute_donated`, with the same values as a
//! run that shares nothing, on every backend; a KV-cache update writes only its window; an
//! optimizer's update `p - lr * g` is written over `p`; an alias the program cannot honor (an
//! element of the parameter is read after the result's element there is written) is left
//! out, and the results stay right.

use tessera::{Argument, Backend, Client, CompileOptions, DeviceBuffer};
use tessera_hlo::Literal;

const BACKENDS: [Backend; 4] = [Backend::Interp, Backend::Cranelift, Backend::Llvm, Backend::Tiered];

/// A decoder step's cache update: row `pos` of the cache becomes `row * 2`, and the step
/// returns the cache and the sum of the updated cache's column 0.
const CACHE_UPDATE: &str = "\
HloModule cache_update, input_output_alias={ {0}: (0, {}, may-alias) }

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY main {
  cache = f32[16,64] parameter(0)
  row = f32[1,64] parameter(1)
  pos = s32[] parameter(2)
  two = f32[] constant(2)
  twos = f32[1,64] broadcast(two), dimensions={}
  doubled = f32[1,64] multiply(row, twos)
  zero = s32[] constant(0)
  updated = f32[16,64] dynamic-update-slice(cache, doubled, pos, zero)
  column = f32[16,1] slice(updated), slice={[0:16], [0:1]}
  init = f32[] constant(0)
  sum = f32[] reduce(column, init), dimensions={0,1}, to_apply=add
  ROOT out = (f32[16,64], f32[]) tuple(updated, sum)
}
";

/// A step of gradient descent with momentum on donated weights and velocity: each update
/// reads its parameter only where it writes its result, so both are honored. The weights are
/// 1 MiB, so the update's grid is split across threads.
const SGD: &str = "\
HloModule sgd, input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {}, may-alias) }

ENTRY main {
  w = f32[512,512] parameter(0)
  v = f32[512,512] parameter(1)
  g = f32[512,512] parameter(2)
  mu = f32[] constant(0.9)
  mus = f32[512,512] broadcast(mu), dimensions={}
  lr = f32[] constant(0.125)
  lrs = f32[512,512] broadcast(lr), dimensions={}
  kept = f32[512,512] multiply(v, mus)
  v2 = f32[512,512] add(kept, g)
  step = f32[512,512] multiply(v2, lrs)
  w2 = f32[512,512] subtract(w, step)
  ROOT out = (f32[512,512], f32[512,512]) tuple(w2, v2)
}
";

/// Aliased results that read their parameter, in the kernel that writes them, at elements
/// other than the one written, so an element may be read after it was written: none is
/// honored. With each, the values a donated run must give, from the parameter `0, 1, 2, ..`.
const NOT_IN_PLACE: [(&str, &str, fn(usize) -> f32); 3] = [
    (
        "transpose",
        "\
HloModule transpose, input_output_alias={ {}: (0, {}, may-alias) }

ENTRY main {
  x = f32[64,64] parameter(0)
  ROOT t = f32[64,64] transpose(x), dimensions={1,0}
}
",
        |i| ((i % 64) * 64 + i / 64) as f32,
    ),
    (
        "reverse",
        "\
HloModule reverse, input_output_alias={ {}: (0, {}, may-alias) }

ENTRY main {
  x = f32[64,64] parameter(0)
  ROOT r = f32[64,64] reverse(x), dimensions={0,1}
}
",
        |i| (64 * 64 - 1 - i) as f32,
    ),
    (
        "shift",
        "\
HloModule shift, input_output_alias={ {}: (0, {}, may-alias) }

ENTRY main {
  x = f32[4096] parameter(0)
  head = f32[1] slice(x), slice={[4095:4096]}
  rest = f32[4095] slice(x), slice={[0:4095]}
  ROOT s = f32[4096] concatenate(head, rest), dimensions={0}
}
",
        |i| ((i + 4095) % 4096) as f32,
    ),
];

fn compile(backend: Backend, text: &str) -> tessera::Executable {
    Client::new(backend).unwrap().compile_text(text, &CompileOptions::default()).unwrap()
}

fn values(buffer: &DeviceBuffer) -> Vec<f32> {
    buffer.to_literal().unwrap().to_vec::<f32>().unwrap()
}

fn cache() -> Literal {
    Literal::from_vec(&[16, 64], (0..16 * 64).map(|i| i as f32 * 0.25).collect()).unwrap()
}

fn row() -> Literal {
    Literal::from_vec(&[1, 64], (0..64).map(|i| 100.0 + i as f32).collect()).unwrap()
}

#[test]
fn a_donated_cache_is_updated_in_its_own_buffer() {
    let pos = Literal::scalar(5i32);
    let expected = compile(Backend::Interp, CACHE_UPDATE).run(&[cache(), row(), pos.clone()]).unwrap();
    for backend in BACKENDS {
        let exe = compile(backend, CACHE_UPDATE);
        let compiled = backend != Backend::Interp;
        assert_eq!(exe.donated_results(), if compiled { vec![(0, 0)] } else { vec![] }, "{backend}");
        let args: Vec<DeviceBuffer> = [cache(), row(), pos.clone()]
            .iter()
            .enumerate()
            .map(|(i, lit)| exe.transfer_argument(i, lit).unwrap())
            .collect();
        let cache_address = args[0].bytes().as_ptr();
        // Twice: the second run updates the cache the first one returned.
        let first = exe.execute_donated(args).unwrap();
        assert_eq!(first[0].bytes().as_ptr() == cache_address, compiled, "{backend}: the cache's own buffer");
        for (got, want) in first.iter().zip(&expected) {
            assert_eq!(values(got), want.to_vec::<f32>().unwrap(), "{backend}");
        }
        let again = vec![
            first[0].clone(),
            exe.transfer_argument(1, &row()).unwrap(),
            exe.transfer_argument(2, &Literal::scalar(9i32)).unwrap(),
        ];
        let second = exe.execute_donated(again).unwrap();
        let mut want = values(&first[0]);
        for (i, r) in row().to_vec::<f32>().unwrap().iter().enumerate() {
            want[9 * 64 + i] = r * 2.0;
        }
        assert!(values(&second[0]) == want, "{backend}: the second update");
        // A run that shares nothing leaves its arguments alone and computes the same.
        let (c, r, p) = (
            exe.transfer_argument(0, &cache()).unwrap(),
            exe.transfer_argument(1, &row()).unwrap(),
            exe.transfer_argument(2, &pos).unwrap(),
        );
        let shared_nothing = exe.execute(&[&c, &r, &p]).unwrap();
        assert!(values(&c) == cache().to_vec::<f32>().unwrap(), "{backend}: the argument is unchanged");
        for (got, want) in shared_nothing.iter().zip(&expected) {
            assert_eq!(values(got), want.to_vec::<f32>().unwrap(), "{backend}");
        }
    }
}

#[test]
fn an_update_in_place_is_written_over_its_donated_parameters() {
    let square = |seed: f32| {
        Literal::from_vec(&[512, 512], (0..512 * 512).map(|i| ((i % 97) as f32 - 48.0) * seed).collect()).unwrap()
    };
    let (w, v, g) = (square(0.01), square(0.002), square(0.03));
    let expected = compile(Backend::Interp, SGD).run(&[w.clone(), v.clone(), g.clone()]).unwrap();
    for backend in BACKENDS {
        let exe = compile(backend, SGD);
        let compiled = backend != Backend::Interp;
        assert_eq!(exe.donated_results(), if compiled { vec![(0, 0), (1, 1)] } else { vec![] }, "{backend}");
        let args: Vec<DeviceBuffer> =
            [&w, &v, &g].iter().enumerate().map(|(i, lit)| exe.transfer_argument(i, lit).unwrap()).collect();
        let addresses = [args[0].bytes().as_ptr(), args[1].bytes().as_ptr()];
        let out = exe.execute_donated(args).unwrap();
        for (i, (got, want)) in out.iter().zip(&expected).enumerate() {
            assert_eq!(got.bytes().as_ptr() == addresses[i], compiled, "{backend}: result {i}'s buffer");
            assert!(values(got) == want.to_vec::<f32>().unwrap(), "{backend}: result {i}");
        }
        // Donating the weights alone, lending the velocity and the gradient: only the weights
        // come back in their buffer, and what was lent is unchanged.
        let (wb, vb, gb) = (
            exe.transfer_argument(0, &w).unwrap(),
            exe.transfer_argument(1, &v).unwrap(),
            exe.transfer_argument(2, &g).unwrap(),
        );
        let w_address = wb.bytes().as_ptr();
        let out = exe.execute_donating(vec![Argument::Donated(wb), Argument::Lent(&vb), Argument::Lent(&gb)]).unwrap();
        assert_eq!(out[0].bytes().as_ptr() == w_address, compiled, "{backend}: the weights' buffer");
        assert!(out[1].bytes().as_ptr() != vb.bytes().as_ptr(), "{backend}: a lent buffer is never written");
        for (i, (got, want)) in out.iter().zip(&expected).enumerate() {
            assert!(values(got) == want.to_vec::<f32>().unwrap(), "{backend}: result {i}, weights donated");
        }
        assert!(values(&vb) == v.to_vec::<f32>().unwrap(), "{backend}: the lent velocity is unchanged");
        assert!(values(&gb) == g.to_vec::<f32>().unwrap(), "{backend}: the lent gradient is unchanged");
    }
}

/// A training step JAX wrote: every update is elementwise over its parameter (the gradients
/// come from GEMMs and reductions into temporaries first), so every declared pair is honored,
/// and the donated run gives the interpreter's values.
#[test]
fn a_jax_training_step_updates_every_donated_parameter_in_place() {
    let text = include_str!("donation/mlp_momentum_step.hlo");
    let interp = compile(Backend::Interp, text);
    let args: Vec<Literal> = interp
        .parameter_shapes()
        .iter()
        .enumerate()
        .map(|(i, shape)| {
            let n: i64 = shape.dims().iter().product();
            let values = (0..n).map(|j| ((j * 7 + i as i64 * 13) % 23) as f32 / 23.0 - 0.5).collect();
            Literal::from_vec_with_shape(shape.clone(), values).unwrap()
        })
        .collect();
    let expected = interp.run(&args).unwrap();
    for backend in [Backend::Cranelift, Backend::Llvm, Backend::Tiered] {
        let exe = compile(backend, text);
        assert_eq!(exe.donated_results(), (0..8).map(|i| (i, i)).collect::<Vec<_>>(), "{backend}");
        let mut donated: Vec<DeviceBuffer> =
            args.iter().enumerate().map(|(i, a)| exe.transfer_argument(i, a).unwrap()).collect();
        let lent = donated.split_off(8);
        let addresses: Vec<*const u8> = donated.iter().map(|b| b.bytes().as_ptr()).collect();
        let mut step: Vec<Argument> = donated.into_iter().map(Argument::Donated).collect();
        step.extend(lent.iter().map(Argument::Lent));
        let out = exe.execute_donating(step).unwrap();
        assert_eq!(out.len(), expected.len());
        for (i, (got, want)) in out.iter().zip(&expected).enumerate() {
            assert_eq!(got.bytes().as_ptr(), addresses[i], "{backend}: result {i} in its parameter's buffer");
            let (got, want) = (values(got), want.to_vec::<f32>().unwrap());
            let close = got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-5 + 1e-4 * w.abs());
            assert!(close, "{backend}: result {i}");
        }
    }
}

#[test]
fn an_alias_the_program_cannot_honor_is_left_out() {
    for (name, text, expected) in NOT_IN_PLACE {
        let want: Vec<f32> = (0..64 * 64).map(expected).collect();
        for backend in BACKENDS {
            let exe = compile(backend, text);
            let values_in = (0..64 * 64).map(|i| i as f32).collect();
            let x = Literal::from_vec_with_shape(exe.parameter_shapes()[0].clone(), values_in).unwrap();
            let arg = exe.transfer_argument(0, &x).unwrap();
            let out = exe.execute_donated(vec![arg]).unwrap();
            assert!(values(&out[0]) == want, "{name} on {backend}");
            assert_eq!(exe.donated_results(), vec![], "{name} on {backend}");
        }
    }
}
