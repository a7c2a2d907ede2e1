//! The host API on every backend: literals in any layout, tuple results, resident buffers,
//! raw buffers, and the errors a caller gets for mistakes, unsupported ops and full memory
//! spaces.

use std::collections::BTreeMap;

use tessera::{Backend, Client, ClientOptions, CompileOptions, DeviceBuffer, Error, LowerOptions};
use tessera_hlo::builder::Builder;
use tessera_hlo::{ElementType, Layout, Literal, Shape};

const BACKENDS: [Backend; 3] = [Backend::Interp, Backend::Cranelift, Backend::Llvm];

/// `(a + b, a * b)` on f32[3,4], with a column-major result and a column-major `b`.
const TUPLE_MODULE: &str = "\
HloModule pair, entry_computation_layout={(f32[3,4]{1,0}, f32[3,4]{0,1})->(f32[3,4]{0,1}, f32[3,4]{1,0})}

ENTRY e {
  a = f32[3,4]{1,0} parameter(0)
  b = f32[3,4]{0,1} parameter(1)
  s = f32[3,4]{0,1} add(a, b)
  p = f32[3,4]{1,0} multiply(a, b)
  ROOT t = (f32[3,4]{0,1}, f32[3,4]{1,0}) tuple(s, p)
}
";

fn compile(backend: Backend, text: &str) -> tessera::Executable {
    Client::new(backend).unwrap().compile_text(text, &CompileOptions::default()).unwrap()
}

fn a_values() -> Vec<f32> {
    (0..12).map(|i| i as f32).collect()
}

fn b_values() -> Vec<f32> {
    (0..12).map(|i| 0.5 * i as f32 - 2.0).collect()
}

#[test]
fn literals_in_any_layout_give_flattened_results_in_the_module_layouts() {
    let a = Literal::from_vec(&[3, 4], a_values()).unwrap();
    // Row-major although the parameter is column-major: the run relays it out.
    let b = Literal::from_vec(&[3, 4], b_values()).unwrap();
    let b_col = b.relayout(&Layout::new(&[0, 1])).unwrap();
    for backend in BACKENDS {
        let exe = compile(backend, TUPLE_MODULE);
        for b in [&b, &b_col] {
            let out = exe.run(&[a.clone(), b.clone()]).unwrap();
            assert_eq!(out.len(), 2, "{backend}");
            assert_eq!(out[0].array_shape().unwrap().layout, Some(Layout::new(&[0, 1])), "{backend}");
            assert_eq!(out[1].array_shape().unwrap().layout, Some(Layout::new(&[1, 0])), "{backend}");
            let sum: Vec<f32> = a_values().iter().zip(b_values()).map(|(x, y)| x + y).collect();
            let product: Vec<f32> = a_values().iter().zip(b_values()).map(|(x, y)| x * y).collect();
            assert_eq!(out[0].to_vec::<f32>().unwrap(), sum, "{backend}");
            assert_eq!(out[1].to_vec::<f32>().unwrap(), product, "{backend}");
        }
    }
}

#[test]
fn resident_buffers_are_laid_out_once_and_reused() {
    let a = Literal::from_vec(&[3, 4], a_values()).unwrap();
    let b = Literal::from_vec(&[3, 4], b_values()).unwrap();
    for backend in BACKENDS {
        let exe = compile(backend, TUPLE_MODULE);
        let da = exe.transfer_argument(0, &a).unwrap();
        let db = exe.transfer_argument(1, &b).unwrap();
        // Parameter 1 is column-major: the resident bytes are too.
        assert_eq!(db.bytes(), b.relayout(&Layout::new(&[0, 1])).unwrap().physical_bytes().unwrap());
        assert_eq!(db.memory_space(), 0);
        let first = exe.execute(&[&da, &db]).unwrap();
        let mut results = exe.new_results().unwrap();
        for _ in 0..3 {
            exe.execute_into(&[&da, &db], &mut results).unwrap();
        }
        for (x, y) in first.iter().zip(&results) {
            assert_eq!(x.bytes(), y.bytes(), "{backend}");
        }
        let product: Vec<f32> = a_values().iter().zip(b_values()).map(|(x, y)| x * y).collect();
        assert_eq!(results[1].to_literal().unwrap().to_vec::<f32>().unwrap(), product);

        // A buffer laid out for another parameter is refused, naming the argument.
        let wrong = DeviceBuffer::from_literal(&b).unwrap();
        let err = exe.execute(&[&da, &wrong]).unwrap_err();
        assert!(matches!(err, Error::Argument { index: 1, .. }), "{backend}: {err}");
        assert!(err.to_string().contains("f32[3,4]{0,1}"), "{err}");
    }
}

#[test]
fn raw_buffers_may_be_unaligned() {
    let a = Literal::from_vec(&[3, 4], a_values()).unwrap();
    let b = Literal::from_vec(&[3, 4], b_values()).unwrap().relayout(&Layout::new(&[0, 1])).unwrap();
    for backend in BACKENDS {
        let exe = compile(backend, TUPLE_MODULE);
        let mut storage = [0u8; 4 * 48 + 3];
        let (ins, outs) = storage.split_at_mut(2 * 48 + 1);
        ins[1..49].copy_from_slice(a.physical_bytes().unwrap());
        ins[49..97].copy_from_slice(b.physical_bytes().unwrap());
        let (o1, o2) = outs.split_at_mut(49);
        exe.run_raw(&[&ins[1..49], &ins[49..97]], &mut [&mut o1[1..49], &mut o2[..48]]).unwrap();
        let product: Vec<f32> = a_values().iter().zip(b_values()).map(|(x, y)| x * y).collect();
        let got: Vec<f32> = o2[..48].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, product, "{backend}");

        let err = exe.run_raw(&[&ins[1..49], &ins[49..96]], &mut [&mut o1[1..49], &mut o2[..48]]).unwrap_err();
        assert_eq!(err.to_string(), "argument 1: f32[3,4]{0,1} needs 48 bytes but the buffer has 47");
        let err = exe.run_raw(&[&ins[1..49], &ins[49..97]], &mut [&mut o1[1..49]]).unwrap_err();
        assert_eq!(err.to_string(), "the executable takes 2 results but 1 were given");
    }
}

#[test]
fn argument_mistakes_name_the_argument() {
    for backend in BACKENDS {
        let exe = compile(backend, TUPLE_MODULE);
        let a = Literal::from_vec(&[3, 4], a_values()).unwrap();
        let err = exe.run(std::slice::from_ref(&a)).unwrap_err();
        assert_eq!(err.to_string(), "the executable takes 2 arguments but 1 were given");
        let wrong_dims = Literal::from_vec(&[4, 3], a_values()).unwrap();
        let err = exe.run(&[a.clone(), wrong_dims]).unwrap_err();
        assert_eq!(err.to_string(), "argument 1: expected f32[3,4], got f32[4,3]");
        let wrong_type = Literal::from_vec(&[3, 4], vec![1i32; 12]).unwrap();
        let err = exe.run(&[wrong_type.clone(), a.clone()]).unwrap_err();
        assert!(matches!(err, Error::Argument { index: 0, .. }), "{err}");
        let err = exe.transfer_argument(2, &a).unwrap_err();
        assert!(err.to_string().starts_with("argument 2: the executable takes 2 parameters"), "{err}");
        let err = exe.transfer_argument(0, &wrong_type).unwrap_err();
        assert!(matches!(err, Error::Argument { index: 0, .. }), "{err}");
    }
}

#[test]
fn builder_modules_compile_on_every_backend() {
    let b = Builder::new("dense");
    let x = b.parameter(0, &Shape::array(ElementType::F32, &[2, 3]), "x");
    let w = b.parameter(1, &Shape::array(ElementType::F32, &[3, 2]), "w");
    let bias = b.parameter(2, &Shape::array(ElementType::F32, &[2]), "b");
    let y = b.max(b.add_broadcast(b.dot(x, w), bias, &[1]), b.broadcast(b.zero(ElementType::F32), &[2, 2]));
    let module = b.build(y).unwrap();
    let args = [
        Literal::from_vec(&[2, 3], vec![1f32, 2.0, 3.0, -1.0, -2.0, -3.0]).unwrap(),
        Literal::from_vec(&[3, 2], vec![1f32, 0.0, 0.0, 1.0, 1.0, 1.0]).unwrap(),
        Literal::from_vec(&[2], vec![0.5f32, -10.0]).unwrap(),
    ];
    for backend in BACKENDS {
        let exe = Client::new(backend).unwrap().compile(&module, &CompileOptions::default()).unwrap();
        assert_eq!(exe.backend(), backend);
        let out = exe.run(&args).unwrap();
        // x·w = [[4, 5], [-4, -5]]; + b = [[4.5, -5], [-3.5, -15]]; relu.
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![4.5, 0.0, 0.0, 0.0], "{backend}");
    }
}

#[test]
fn unsupported_ops_name_the_op_and_the_backend() {
    // ragged-dot is the one op here that neither the interpreter nor the kernel lowering runs.
    let ragged = "\
HloModule r

ENTRY e {
  a = f32[11,5] parameter(0)
  b = f32[3,5,7] parameter(1)
  g = s64[3] parameter(2)
  ROOT r = f32[11,7] ragged-dot(a, b, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
}
";
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let err = Client::new(backend).unwrap().compile_text(ragged, &CompileOptions::default()).err().unwrap();
        let text = err.to_string();
        assert!(matches!(err, Error::Lower { .. }), "{text}");
        assert!(text.contains(backend.name()) && text.contains("'r'") && text.contains("ragged-dot"), "{text}");
    }
    let custom = "\
HloModule c

ENTRY e {
  p = f32[2,2] parameter(0)
  ROOT c = f32[2,2] custom-call(p), custom_call_target=\"my_op\"
}
";
    for backend in BACKENDS {
        let err = Client::new(backend).unwrap().compile_text(custom, &CompileOptions::default()).err().unwrap();
        assert!(matches!(err, Error::CustomCall { .. }), "{backend}: {err}");
        assert!(err.to_string().contains("'my_op'") && err.to_string().contains("'c'"), "{err}");
    }
}

#[test]
fn memory_space_capacities_are_compile_errors() {
    let module = "\
HloModule spaces, entry_computation_layout={(f32[1024]{0})->f32[1024]{0}}

ENTRY e {
  p = f32[1024]{0} parameter(0)
  t = f32[1024]{0:S(1)} negate(p)
  ROOT r = f32[1024]{0} exponential(t)
}
";
    let options = CompileOptions {
        lower: LowerOptions { fusion: false, dump_dir: None, ..LowerOptions::default() },
        ..CompileOptions::default()
    };
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let small = ClientOptions { memory_spaces: BTreeMap::from([(1, 1000)]), ..ClientOptions::default() };
        let err = Client::with_options(backend, &small).unwrap().compile_text(module, &options).err().unwrap();
        assert_eq!(
            err.to_string(),
            "memory space S(1) needs 4096 bytes for temporaries but its capacity is 1000 (3096 bytes over)"
        );
        let mut client = Client::with_options(backend, &small).unwrap();
        client.register_memory_space(1, 4096);
        let exe = client.compile_text(module, &options).unwrap();
        assert_eq!(exe.runtime().unwrap().arenas(), &[(1, 4096)]);
        let out = exe.run(&[Literal::from_vec(&[1024], vec![0f32; 1024]).unwrap()]).unwrap();
        assert!(out[0].to_vec::<f32>().unwrap().iter().all(|&v| v == 1.0));
    }
}

#[test]
fn thread_counts_are_options() {
    let options = ClientOptions { threads: Some(3), ..ClientOptions::default() };
    let client = Client::with_options(Backend::Cranelift, &options).unwrap();
    assert_eq!(client.threads(), 3);
    let exe = client.compile_text(TUPLE_MODULE, &CompileOptions::default()).unwrap();
    assert_eq!(exe.runtime().unwrap().threads(), 3);
    let zero = ClientOptions { threads: Some(0), ..ClientOptions::default() };
    assert!(Client::with_options(Backend::Llvm, &zero).is_err());
}

#[test]
fn executables_run_from_several_threads_at_once() {
    fn shareable<T: Send + Sync>() {}
    shareable::<tessera::Executable>();
    shareable::<Client>();
    shareable::<DeviceBuffer>();
    let a = Literal::from_vec(&[3, 4], a_values()).unwrap();
    let b = Literal::from_vec(&[3, 4], b_values()).unwrap();
    let sum: Vec<f32> = a_values().iter().zip(b_values()).map(|(x, y)| x + y).collect();
    for backend in BACKENDS {
        let exe = compile(backend, TUPLE_MODULE);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let out = exe.run(&[a.clone(), b.clone()]).unwrap();
                        assert_eq!(out[0].to_vec::<f32>().unwrap(), sum);
                    }
                });
            }
        });
    }
}

#[test]
fn instructions_named_like_c_functions_compile() {
    // Kernels are named after their instructions; these names are also C symbols kernels call.
    let text = "\
HloModule names

ENTRY e {
  p = f32[4] parameter(0)
  log = f32[4] log(p)
  expf = f32[4] exponential(log)
  ROOT tessera_rt_gemm_f32 = f32[4] tanh(expf)
}
";
    let x = Literal::from_vec(&[4], vec![0.5f32, 1.0, 2.0, 3.0]).unwrap();
    let expected = Client::new(Backend::Interp).unwrap().compile_text(text, &CompileOptions::default()).unwrap();
    let expected = expected.run(&[x.clone()]).unwrap()[0].to_vec::<f32>().unwrap();
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let exe = Client::new(backend).unwrap().compile_text(text, &CompileOptions::default()).unwrap();
        let got = exe.run(&[x.clone()]).unwrap()[0].to_vec::<f32>().unwrap();
        assert_eq!(got, expected, "{backend}");
    }
}

#[test]
fn a_target_cpu_the_host_cannot_run_is_an_unsupported_target_feature_error() {
    let text = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n";
    let ask = tessera::CpuTarget::host().with_features(&["+no-such-feature"]);
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let options = CompileOptions { target_cpu: Some(ask.clone()), ..CompileOptions::default() };
        let e = Client::new(backend).unwrap().compile_text(text, &options).err().expect("refused");
        assert!(e.to_string().contains("unsupported target feature 'no-such-feature'"), "{backend}: {e}");
        // A target the host supports compiles and runs.
        let options = CompileOptions { target_cpu: Some(tessera::CpuTarget::host()), ..CompileOptions::default() };
        let exe = Client::new(backend).unwrap().compile_text(text, &options).unwrap();
        let out = exe.run(&[Literal::from_vec(&[4], vec![1f32, -2.0, 0.5, 0.0]).unwrap()]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![-1.0, 2.0, -0.5, -0.0]);
    }
}

#[test]
fn math_fuses_multiply_adds_only_where_the_target_has_them() {
    // Lowering writes the polynomial steps of exp as fused multiply-adds for an FMA target
    // and as products and sums otherwise; both are within 2 ulp of e^x.
    let text = "HloModule m\nENTRY e {\n  p = f32[64] parameter(0)\n  ROOT x = f32[64] exponential(p)\n}\n";
    let xs: Vec<f32> = (0..64).map(|i| i as f32 * 0.37 - 11.0).collect();
    let host_has_fma = tessera::CpuTarget::host().resolve("llvm").unwrap().has_fma();
    for backend in [Backend::Cranelift, Backend::Llvm] {
        for (target, fused) in
            [(tessera::CpuTarget::host(), host_has_fma), (tessera::CpuTarget::host().with_features(&["-fma"]), false)]
        {
            let dir = std::env::temp_dir().join(format!("tessera-fma-{}-{backend}-{fused}", std::process::id()));
            let options =
                CompileOptions { target_cpu: Some(target), dump_dir: Some(dir.clone()), ..CompileOptions::default() };
            let exe = Client::new(backend).unwrap().compile_text(text, &options).unwrap();
            let program = std::fs::read_to_string(dir.join("program.txt")).unwrap();
            std::fs::remove_dir_all(&dir).ok();
            assert_eq!(program.contains(" fma.f32 "), fused, "{backend}, fused {fused}:\n{program}");
            let out = exe.run(&[Literal::from_vec(&[64], xs.clone()).unwrap()]).unwrap()[0].to_vec::<f32>().unwrap();
            for (x, y) in xs.iter().zip(out) {
                let want = f64::from(*x).exp();
                let ulp = f64::from(f32::from_bits((want as f32).to_bits() + 1)) - f64::from(want as f32);
                assert!(
                    (f64::from(y) - want).abs() <= 2.0 * ulp,
                    "{backend}, fused {fused}: exp({x}) = {y}, want {want}"
                );
            }
        }
    }
}
