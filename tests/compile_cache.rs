//! The persistent compile cache: a second compile of a module loads the first one's program
//! and runs it with the same results; damaged entries are recompiled, never loaded; keys keep
//! backends and options apart; host functions bind to the loading client's; concurrent
//! processes leave one whole entry.

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera::{
    Backend, CacheOutcome, CacheSetting, Client, ClientOptions, CompileOptions, DeviceBuffer, Error, Executable,
};
use tessera_hlo::corpus::Case;
use tessera_hlo::Literal;

mod tier_support;
use tier_support::corpus_case;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera_compile_cache_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn client(backend: Backend, dir: &Path) -> Client {
    let options = ClientOptions { cache: CacheSetting::Directory(dir.to_path_buf()), ..ClientOptions::default() };
    Client::with_options(backend, &options).unwrap()
}

fn case(name: &str) -> (String, Vec<Literal>) {
    let dir = corpus_case(name);
    (std::fs::read_to_string(dir.join("module.hlo")).unwrap(), Case::load(&dir).unwrap().arguments().unwrap())
}

fn run(exe: &Executable, args: &[Literal]) -> Vec<Vec<u8>> {
    let buffers: Vec<DeviceBuffer> =
        args.iter().enumerate().map(|(i, a)| exe.transfer_argument(i, a).unwrap()).collect();
    let refs: Vec<&DeviceBuffer> = buffers.iter().collect();
    exe.execute(&refs).unwrap().iter().map(|r| r.bytes().to_vec()).collect()
}

/// The cache's entries (and any file left beside them), without its ledger of their sizes.
fn files(dir: &Path) -> Vec<PathBuf> {
    let ledger = |p: &PathBuf| p.file_name().is_some_and(|n| n == ".usage");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).filter(|p| !ledger(p)).collect();
    files.sort();
    files
}

#[test]
fn a_second_compile_loads_the_first_ones_program() {
    // Dots (the runtime's GEMM), a while loop, bf16, constants, a tuple result.
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let dir = temp_dir(&format!("second_{backend}"));
        for name in ["model_mlp2", "while_fori_loop", "unary_bf16", "model_layernorm"] {
            let (text, args) = case(name);
            let first = client(backend, &dir).compile_text(&text, &CompileOptions::default()).unwrap();
            assert_eq!(first.cache_outcome(), &CacheOutcome::Miss { stored: Ok(()) }, "{name} on {backend}");
            let second = client(backend, &dir).compile_text(&text, &CompileOptions::default()).unwrap();
            assert_eq!(second.cache_outcome(), &CacheOutcome::Hit, "{name} on {backend}");
            assert_eq!(second.active_tier(), backend);
            assert_eq!(second.kernel_count(), first.kernel_count(), "{name}");
            assert_eq!(second.parameter_shapes(), first.parameter_shapes(), "{name}");
            assert_eq!(second.result_shape(), first.result_shape(), "{name}");
            assert!(second.compile_timings().to_string().contains("cache: read"), "{name}");
            assert_eq!(run(&second, &args), run(&first, &args), "{name} on {backend}: cached code differs");
            assert_eq!(second.last_run_launches(), first.last_run_launches(), "{name}");
        }
        assert_eq!(files(&dir).len(), 4, "{backend}: {:?}", files(&dir));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn damaged_entries_are_recompiled_never_loaded() {
    let dir = temp_dir("damaged");
    let (text, args) = case("model_mlp2");
    let compile = || client(Backend::Cranelift, &dir).compile_text(&text, &CompileOptions::default()).unwrap();
    let want = run(&compile(), &args);
    let [entry] = files(&dir).try_into().unwrap();
    let whole = std::fs::read(&entry).unwrap();
    let mut flipped = whole.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 1;
    for (what, bytes) in [("truncated", &whole[..whole.len() / 3]), ("empty", &[][..]), ("flipped", &flipped[..])] {
        std::fs::write(&entry, bytes).unwrap();
        let exe = compile();
        match exe.cache_outcome() {
            CacheOutcome::Rejected { stored: Ok(()), .. } => {}
            other => panic!("{what} entry: {other:?}"),
        }
        assert_eq!(run(&exe, &args), want, "{what}");
        // The recompile stored a whole entry again.
        assert_eq!(std::fs::read(&entry).unwrap(), whole, "{what}");
        assert_eq!(compile().cache_outcome(), &CacheOutcome::Hit, "{what}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn keys_keep_backends_and_options_apart() {
    let dir = temp_dir("keys");
    let (text, _) = case("unary_bf16");
    let strict = CompileOptions::with_excess_precision(false);
    for (backend, options) in [
        (Backend::Llvm, CompileOptions::default()),
        (Backend::Cranelift, CompileOptions::default()),
        (Backend::Llvm, strict.clone()),
    ] {
        let exe = client(backend, &dir).compile_text(&text, &options).unwrap();
        assert!(matches!(exe.cache_outcome(), CacheOutcome::Miss { .. }), "{backend}: {:?}", exe.cache_outcome());
    }
    // A module built rather than parsed is keyed by its printed text.
    let module = tessera_hlo::text::parse_module(&text).unwrap();
    let exe = client(Backend::Llvm, &dir).compile(&module, &strict).unwrap();
    assert!(matches!(exe.cache_outcome(), CacheOutcome::Miss { .. }), "{:?}", exe.cache_outcome());
    assert_eq!(client(Backend::Llvm, &dir).compile(&module, &strict).unwrap().cache_outcome(), &CacheOutcome::Hit);
    // A compile that dumps what it does compiles.
    let dump = temp_dir("keys_dump");
    let options = CompileOptions { dump_dir: Some(dump.clone()), ..CompileOptions::default() };
    std::fs::create_dir_all(&dump).unwrap();
    assert_eq!(client(Backend::Llvm, &dir).compile_text(&text, &options).unwrap().cache_outcome(), &CacheOutcome::Off);
    // So does a client with the cache off, and the interpreter.
    let off = ClientOptions { cache: CacheSetting::Off, ..ClientOptions::default() };
    let exe = Client::with_options(Backend::Llvm, &off).unwrap().compile_text(&text, &CompileOptions::default());
    assert_eq!(exe.unwrap().cache_outcome(), &CacheOutcome::Off);
    let exe = client(Backend::Interp, &dir).compile_text(&text, &CompileOptions::default()).unwrap();
    assert_eq!(exe.cache_outcome(), &CacheOutcome::Off);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dump);
}

const CUSTOM_CALL: &str = r#"HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  c = f32[4] custom-call(p), custom_call_target="scale"
  ROOT r = f32[4] add(c, p)
}
"#;

fn scaling_client(dir: &Path, factor: f32) -> Client {
    let mut client = client(Backend::Llvm, dir);
    client
        .register_custom_call("scale", move |args: &[Literal]| {
            let x = args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
            Literal::from_vec(&[4], x.iter().map(|v| v * factor).collect::<Vec<f32>>()).map_err(|e| e.to_string())
        })
        .unwrap();
    client
}

#[test]
fn cached_custom_calls_bind_to_the_loading_clients_host_functions() {
    let dir = temp_dir("custom_call");
    let x = Literal::from_vec(&[4], vec![1f32, 2.0, 3.0, 4.0]).unwrap();
    let out = |exe: &Executable| exe.run(std::slice::from_ref(&x)).unwrap()[0].to_vec::<f32>().unwrap();
    let first = scaling_client(&dir, 2.0).compile_text(CUSTOM_CALL, &CompileOptions::default()).unwrap();
    assert!(matches!(first.cache_outcome(), CacheOutcome::Miss { .. }));
    assert_eq!(out(&first), vec![3.0, 6.0, 9.0, 12.0]);
    let second = scaling_client(&dir, 10.0).compile_text(CUSTOM_CALL, &CompileOptions::default()).unwrap();
    assert_eq!(second.cache_outcome(), &CacheOutcome::Hit);
    assert_eq!(out(&second), vec![11.0, 22.0, 33.0, 44.0]);
    // Without the host function, the cached program fails to compile as the module would.
    let err = client(Backend::Llvm, &dir).compile_text(CUSTOM_CALL, &CompileOptions::default()).err().unwrap();
    assert!(matches!(&err, Error::CustomCall { target, .. } if target == "scale"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_tiered_backend_caches_llvm_code() {
    let dir = temp_dir("tiered");
    let (text, args) = case("model_softmax");
    let first = client(Backend::Tiered, &dir).compile_text(&text, &CompileOptions::default()).unwrap();
    first.wait_for_peak_tier().unwrap();
    let want = run(&first, &args);
    let second = client(Backend::Tiered, &dir).compile_text(&text, &CompileOptions::default()).unwrap();
    assert_eq!(second.cache_outcome(), &CacheOutcome::Hit);
    assert_eq!(second.active_tier(), Backend::Llvm);
    assert_eq!(run(&second, &args), want);
    // The LLVM backend finds the same entry.
    let llvm = client(Backend::Llvm, &dir).compile_text(&text, &CompileOptions::default()).unwrap();
    assert_eq!(llvm.cache_outcome(), &CacheOutcome::Hit);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tessera run --time 1` on `case` with the cache in `dir` (or off); its JSON line.
fn cli_run(case: &Path, dir: Option<&Path>) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    command
        .args(["run", "--backend", "cranelift", "--time", "1", "--args"])
        .arg(case.join("args"))
        .arg(case.join("module.hlo"))
        .env_remove("TESSERA_CACHE");
    match dir {
        Some(dir) => command.env("TESSERA_CACHE_DIR", dir),
        None => command.env("TESSERA_CACHE", "off"),
    };
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn concurrent_processes_leave_one_whole_entry() {
    let dir = temp_dir("processes");
    // A case folder as `tessera run` reads it.
    let work = temp_dir("processes_case");
    let (text, args) = case("model_mlp2");
    std::fs::create_dir_all(work.join("args")).unwrap();
    std::fs::write(work.join("module.hlo"), &text).unwrap();
    for (i, a) in args.iter().enumerate() {
        tessera_hlo::npy::write_npy(a, work.join("args").join(format!("{i}.npy"))).unwrap();
    }
    let lines: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(|| cli_run(&work, Some(&dir)))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for line in &lines {
        assert!(line.contains(r#""cache":"miss""#) || line.contains(r#""cache":"hit""#), "{line}");
    }
    let entries = files(&dir);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(cli_run(&work, Some(&dir)).contains(r#""cache":"hit""#));
    assert!(cli_run(&work, None).contains(r#""cache":"off""#));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&work);
}
