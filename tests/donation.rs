//! Donation (`input_output_alias`): a result the program may write into a parameter's memory
//! comes back in that parameter's buffer from `execute_donated`, with the same values as a
//! run that shares nothing, on every backend; a KV-cache update writes only its window; an
//! alias the program cannot honor (the parameter is read where the result is written) is
//! left out, and the results stay right.

use tessera::{Backend, Client, CompileOptions, DeviceBuffer};
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

/// The aliased result reads the parameter in the kernel that writes it: not honored.
const NEGATE: &str = "\
HloModule negate, input_output_alias={ {}: (0, {}, may-alias) }

ENTRY main {
  x = f32[16,64] parameter(0)
  ROOT n = f32[16,64] negate(x)
}
";

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
fn an_alias_the_program_cannot_honor_is_left_out() {
    let x = cache();
    let negated: Vec<f32> = x.to_vec::<f32>().unwrap().iter().map(|v| -v).collect();
    for backend in BACKENDS {
        let exe = compile(backend, NEGATE);
        assert_eq!(exe.donated_results(), vec![], "{backend}");
        let arg = exe.transfer_argument(0, &x).unwrap();
        let out = exe.execute_donated(vec![arg]).unwrap();
        assert!(values(&out[0]) == negated, "{backend}");
    }
}
