//! The tiered backend: Cranelift's code runs while LLVM compiles in the background, then runs
//! switch to LLVM's, with the same results bit for bit (both tiers translate one lowered
//! program exactly) and the same infeed/outfeed queues.

use tessera::{Backend, CacheSetting, Client, ClientOptions, CompileOptions, DeviceBuffer, Executable};
use tessera_hlo::corpus::Case;
use tessera_hlo::Literal;

mod tier_support;
use tier_support::corpus_case;

/// Compiles without the compile cache: these tests watch the background compile.
fn compile(backend: Backend, text: &str) -> Executable {
    let options = ClientOptions { cache: CacheSetting::Off, ..ClientOptions::default() };
    Client::with_options(backend, &options).unwrap().compile_text(text, &CompileOptions::default()).unwrap()
}

fn run_bytes(exe: &Executable, args: &[Literal]) -> (Backend, Vec<Vec<u8>>) {
    let buffers: Vec<DeviceBuffer> =
        args.iter().enumerate().map(|(i, a)| exe.transfer_argument(i, a).unwrap()).collect();
    let refs: Vec<&DeviceBuffer> = buffers.iter().collect();
    let mut results = exe.new_results().unwrap();
    let tier = exe.execute_into_tier(&refs, &mut results).unwrap();
    (tier, results.iter().map(|r| r.bytes().to_vec()).collect())
}

#[test]
fn runs_switch_to_llvm_with_the_same_bits() {
    // Elementwise math (inline exp/tanh), reductions, a loop, a dot, bf16.
    for name in ["model_mlp2", "model_softmax", "model_layernorm", "while_fori_loop", "unary_bf16", "reduce_sum_f32"] {
        let dir = corpus_case(name);
        let text = std::fs::read_to_string(dir.join("module.hlo")).unwrap();
        let args = Case::load(&dir).unwrap().arguments().unwrap();
        let tiered = compile(Backend::Tiered, &text);
        assert_eq!(tiered.backend(), Backend::Tiered);
        let (first_tier, first) = run_bytes(&tiered, &args);
        assert!(matches!(first_tier, Backend::Cranelift | Backend::Llvm), "{name}: ran on {first_tier}");
        tiered.wait_for_peak_tier().unwrap();
        assert_eq!(tiered.active_tier(), Backend::Llvm, "{name}");
        assert!(tiered.peak_compile_time().is_some(), "{name}");
        let (tier, after) = run_bytes(&tiered, &args);
        assert_eq!(tier, Backend::Llvm, "{name}");
        let (_, cranelift) = run_bytes(&compile(Backend::Cranelift, &text), &args);
        assert!(first == after && after == cranelift, "{name}: the tiers' results differ");
    }
}

#[test]
fn other_backends_have_one_tier_and_nothing_to_wait_for() {
    let text = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n";
    for backend in [Backend::Interp, Backend::Cranelift, Backend::Llvm] {
        let exe = compile(backend, text);
        assert_eq!(exe.active_tier(), backend);
        exe.wait_for_peak_tier().unwrap();
        assert_eq!(exe.peak_compile_time(), None);
        let (tier, _) = run_bytes(&exe, &[Literal::from_vec(&[4], vec![1f32, 2.0, 3.0, 4.0]).unwrap()]);
        assert_eq!(tier, backend);
    }
}

/// Reads one value from the infeed and sends its double to the outfeed.
const ECHO: &str = "\
HloModule echo

ENTRY main {
  tok = token[] after-all()
  in = (f32[3], token[]) infeed(tok)
  v = f32[3] get-tuple-element(in), index=0
  tok2 = token[] get-tuple-element(in), index=1
  d = f32[3] add(v, v)
  tok3 = token[] outfeed(d, tok2), outfeed_shape=f32[3]
  ROOT r = f32[3] negate(v)
}
";

#[test]
fn values_queued_before_the_switch_are_read_after_it() {
    let exe = compile(Backend::Tiered, ECHO);
    for v in [1f32, 2.0] {
        exe.push_infeed(Literal::from_vec(&[3], vec![v, v, v]).unwrap());
    }
    let first = exe.run(&[]).unwrap();
    exe.wait_for_peak_tier().unwrap();
    let second = exe.run(&[]).unwrap();
    let f32x3 = |v: f32| Literal::from_vec(&[3], vec![v, v, v]).unwrap();
    assert!(first[0].eq_ignoring_layout(&f32x3(-1.0)), "{:?}", first[0]);
    assert!(second[0].eq_ignoring_layout(&f32x3(-2.0)), "{:?}", second[0]);
    assert_eq!(exe.infeed_len(), 0);
    for v in [2.0, 4.0] {
        let out = exe.pop_outfeed().expect("one outfeed per run");
        assert!(out.eq_ignoring_layout(&f32x3(v)), "{out:?}");
    }
    assert_eq!(exe.pop_outfeed(), None);
}
