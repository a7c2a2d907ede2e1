//! `tessera run` as scripts use it (DESIGN.md section 8): the built binary on corpus cases for
//! every backend, with logical and `--physical` files, the `--time` JSON line, and the exit
//! codes (0 success, 1 compile/run error, 2 usage error).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tessera::{Backend, Client, CompileOptions};
use tessera_hlo::npy::{read_npy, read_npy_physical, write_npy_physical};
use tessera_hlo::{ArrayShape, ElementType, Literal, Shape};
use tessera_testkit::TempDir;

const BACKENDS: [&str; 3] = ["interp", "cranelift", "llvm"];

/// Cases the kernel lowering handles today, chosen to cover: plain f32, bf16 as raw bits,
/// pred and integer results, tuple results, non-default and tiled entry layouts (packed bf16,
/// s8 tiles), dots, and a model.
const CASES: [&str; 9] = [
    "binary_arith_f32",
    "unary_bf16",
    "compare_s32",
    "convert_int_int",
    "hand_layout_2d",
    "hand_tiled_bf16_packed",
    "hand_tiled_small_tile_s8",
    "matmul",
    "model_mlp2",
];

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus")
}

fn case_dir(case: &str) -> PathBuf {
    let in_tree = corpus().join(case);
    if in_tree.is_dir() {
        in_tree
    } else {
        PathBuf::from("/work/shared/corpus").join(case)
    }
}

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("the binary runs")
}

fn temp_dir(name: &str) -> TempDir {
    TempDir::new("tessera_cli_run", name)
}

fn text(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Parameter and result leaves of a module with their layouts.
fn signature(module: &Path) -> (Vec<ArrayShape>, Vec<ArrayShape>) {
    let exe = Client::new(Backend::Interp)
        .unwrap()
        .compile_text(&std::fs::read_to_string(module).unwrap(), &CompileOptions::default())
        .unwrap();
    (exe.parameter_leaves().cloned().collect(), exe.result_leaves().cloned().collect())
}

/// Every element as f64 (floats) or exact bits (everything else).
enum Values {
    Float(Vec<f64>),
    Bits(Vec<u128>),
}

fn values(lit: &Literal) -> Values {
    match lit.element_type() {
        ElementType::F32 => Values::Float(lit.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect()),
        ElementType::F64 => Values::Float(lit.to_vec::<f64>().unwrap()),
        ElementType::F16 => Values::Float(lit.to_vec::<half::f16>().unwrap().into_iter().map(f64::from).collect()),
        ElementType::BF16 => Values::Float(lit.to_vec::<half::bf16>().unwrap().into_iter().map(f64::from).collect()),
        _ => Values::Bits(lit.to_bits_vec().unwrap()),
    }
}

/// Checks `got` against the case's expected output `i` with the corpus tolerance rule.
fn check_output(case: &str, i: usize, got: &Literal, meta: &serde_json::Value) {
    let shape = Shape::Array(got.array_shape().unwrap().clone());
    let expected = read_npy(case_dir(case).join(format!("expected/{i}.npy")), &shape).unwrap();
    let output = &meta["outputs"][i];
    let rtol = output["rtol"].as_f64().or(meta["rtol"].as_f64()).unwrap();
    let atol = output["atol"].as_f64().or(meta["atol"].as_f64()).unwrap();
    match (values(got), values(&expected)) {
        (Values::Float(g), Values::Float(e)) => {
            for (k, (a, b)) in g.iter().zip(&e).enumerate() {
                let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
                assert!(ok, "{case} output {i} element {k}: {a} vs expected {b}");
            }
            assert_eq!(g.len(), e.len());
        }
        (Values::Bits(g), Values::Bits(e)) => assert_eq!(g, e, "{case} output {i}"),
        _ => panic!("{case} output {i}: element type {}", got.element_type()),
    }
}

fn metadata(case: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(case_dir(case).join("case.json")).unwrap()).unwrap()
}

#[test]
fn logical_files_match_the_corpus_on_every_backend() {
    for case in CASES {
        let dir = case_dir(case);
        let module = dir.join("module.hlo");
        let (_, results) = signature(&module);
        let meta = metadata(case);
        for backend in BACKENDS {
            let out = temp_dir(&format!("{case}_{backend}"));
            let run = tessera(&[
                "run",
                text(&module),
                "--args",
                text(&dir.join("args")),
                "--out",
                text(&out),
                "--backend",
                backend,
            ]);
            assert!(run.status.success(), "{case} on {backend}: {}", String::from_utf8_lossy(&run.stderr));
            assert!(run.stdout.is_empty(), "stdout stays clean without --time");
            for (i, leaf) in results.iter().enumerate() {
                // Logical files hold values in C order whatever the result's layout.
                let logical = Shape::array(leaf.element_type, &leaf.dims);
                let got = read_npy(out.join(format!("{i}.npy")), &logical).unwrap();
                check_output(case, i, &got, &meta);
            }
            assert!(!out.join(format!("{}.npy", results.len())).exists());
        }
    }
}

/// The physical buffer of `lit` with every padding byte set to 0xA5 (padding holds
/// arbitrary values; a kernel that reads it as data shows up as a wrong result).
fn with_garbage_padding(lit: &Literal) -> Literal {
    let map = lit.layout_map().unwrap();
    let bits = map.element_size_bits() as usize;
    let mut bytes = vec![0xA5u8; lit.physical_bytes().unwrap().len()];
    let data = lit.physical_bytes().unwrap();
    if bits.is_multiple_of(8) {
        let size = bits / 8;
        for slot in map.offsets() {
            let at = slot as usize * size;
            bytes[at..at + size].copy_from_slice(&data[at..at + size]);
        }
    } else {
        bytes.copy_from_slice(data);
    }
    Literal::from_physical_bytes(lit.shape().clone(), bytes).unwrap()
}

#[test]
fn physical_files_follow_the_declared_layouts() {
    for case in ["hand_layout_2d", "hand_tiled_bf16_packed", "hand_tiled_small_tile_s8", "binary_arith_f32"] {
        let dir = case_dir(case);
        let module = dir.join("module.hlo");
        let (params, results) = signature(&module);
        let meta = metadata(case);
        let args = temp_dir(&format!("{case}_physical_args"));
        for (i, leaf) in params.iter().enumerate() {
            let logical =
                read_npy(dir.join(format!("args/{i}.npy")), &Shape::array(leaf.element_type, &leaf.dims)).unwrap();
            let physical = logical.relayout(leaf.layout.as_ref().unwrap()).unwrap();
            write_npy_physical(&with_garbage_padding(&physical), args.join(format!("{i}.npy"))).unwrap();
        }
        for backend in BACKENDS {
            let out = temp_dir(&format!("{case}_{backend}_physical_out"));
            let run = tessera(&[
                "run",
                text(&module),
                "--args",
                text(&args),
                "--out",
                text(&out),
                "--backend",
                backend,
                "--physical",
            ]);
            assert!(run.status.success(), "{case} on {backend}: {}", String::from_utf8_lossy(&run.stderr));
            for (i, leaf) in results.iter().enumerate() {
                let got = read_npy_physical(out.join(format!("{i}.npy")), &Shape::Array(leaf.clone())).unwrap();
                check_output(case, i, &got, &meta);
            }
        }
    }
}

#[test]
fn physical_files_of_a_tiled_layout_are_one_dimensional_with_padding() {
    let dir = case_dir("hand_tiled_small_tile_s8");
    let module = dir.join("module.hlo");
    let (params, _) = signature(&module);
    // f32[2,1000]{1,0:T(2,128)}: 1000 columns pad to 1024.
    assert_eq!(params[0].dims, vec![2, 1000]);
    let out = temp_dir("tiled_physical_shape");
    let args = temp_dir("tiled_physical_shape_args");
    for (i, leaf) in params.iter().enumerate() {
        let logical =
            read_npy(dir.join(format!("args/{i}.npy")), &Shape::array(leaf.element_type, &leaf.dims)).unwrap();
        write_npy_physical(&logical.relayout(leaf.layout.as_ref().unwrap()).unwrap(), args.join(format!("{i}.npy")))
            .unwrap();
    }
    let run = tessera(&["run", text(&module), "--args", text(&args), "--out", text(&out), "--physical"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let raw = tessera_hlo::npy::read_npy_any(out.join("0.npy")).unwrap();
    assert_eq!(raw.shape().dims(), &[2048]);
    assert_eq!(raw.element_type(), ElementType::F32);
}

#[test]
fn time_prints_one_json_line() {
    let dir = case_dir("binary_arith_f32");
    for backend in BACKENDS.into_iter().chain(["tiered"]) {
        let run = tessera(&[
            "run",
            text(&dir.join("module.hlo")),
            "--args",
            text(&dir.join("args")),
            "--time",
            "5",
            "--threads",
            "1",
            "--backend",
            backend,
        ]);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let stdout = String::from_utf8(run.stdout).unwrap();
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
        let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(json["backend"], backend);
        assert_eq!(json["runs"], 5);
        let (median, min) = (json["median_us"].as_f64().unwrap(), json["min_us"].as_f64().unwrap());
        assert!(min > 0.0 && min <= median, "{json}");
        assert!(json["compile_us"].as_f64().unwrap() > 0.0);
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        // What the compile cache did (the interpreter compiles nothing to cache).
        let cache = json["cache"].as_str().unwrap();
        assert!(["off", "hit", "miss", "rejected"].contains(&cache), "{json}");
        if backend == "interp" {
            assert_eq!(cache, "off", "{json}");
        }
        if backend == "tiered" {
            // Which tier ran the timed runs, as spans that add up to all of them.
            assert_eq!(keys.len(), 10, "{json}");
            let spans = json["tiers"].as_array().unwrap();
            let runs: u64 = spans.iter().map(|s| s[1].as_u64().unwrap()).sum();
            assert_eq!(runs, 5, "{json}");
            assert!(spans.iter().all(|s| s[0] == "cranelift" || s[0] == "llvm"), "{json}");
        } else {
            assert_eq!(keys.len(), 8, "{json}");
        }
        // One kernel for the module's one fused computation, launched once; the interpreter
        // runs no kernels.
        if backend == "interp" {
            assert!(json["kernels"].is_null() && json["launches"].is_null(), "{json}");
        } else {
            assert!(json["kernels"].as_u64().unwrap() >= 1, "{json}");
            assert_eq!(json["launches"], json["kernels"], "{json}");
        }
    }
}

#[test]
fn profile_prints_where_the_time_went() {
    let dir = case_dir("model_softmax");
    for backend in ["cranelift", "llvm"] {
        let run = tessera(&[
            "run",
            text(&dir.join("module.hlo")),
            "--args",
            text(&dir.join("args")),
            "--time",
            "3",
            "--profile",
            "--backend",
            backend,
        ]);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        // stdout keeps only the --time line; the tables go to stderr.
        assert_eq!(String::from_utf8(run.stdout).unwrap().lines().count(), 1);
        let stderr = String::from_utf8(run.stderr).unwrap();
        let phases = stderr.lines().skip_while(|l| !l.starts_with("compile time by phase")).collect::<Vec<_>>();
        assert!(phases.iter().any(|l| l.starts_with("parse ")), "{stderr}");
        assert!(phases.iter().any(|l| l.starts_with(&format!("{backend}: "))), "{stderr}");
        let kinds = stderr.lines().skip_while(|l| !l.starts_with("kind ")).collect::<Vec<_>>();
        assert!(kinds.len() > 2, "{stderr}");
        // Each kernel ran once per profiled run; the shares add up to the whole.
        let mut share = 0.0;
        for row in kinds[2..].iter().take_while(|l| !l.is_empty()) {
            let cells: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cells[1].parse::<u64>().unwrap() % 3, 0, "{row}");
            share += cells[4].trim_end_matches('%').parse::<f64>().unwrap();
        }
        assert!((share - 100.0).abs() < 1.0, "{stderr}");
        assert!(stderr.lines().any(|l| l.starts_with("kernel ")), "{stderr}");
    }
    let run = tessera(&[
        "run",
        text(&dir.join("module.hlo")),
        "--args",
        text(&dir.join("args")),
        "--profile",
        "--backend",
        "interp",
    ]);
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("--profile needs a compiled backend"), "{run:?}");
}

/// `--dump DIR` writes what the compiler made of the module: every pass's module, the fusion
/// decisions, the program with its kernels' IR, and the tier's code (for `run`, `compare`,
/// which dumps each tier into its own folder, and `compile`).
#[test]
fn dump_writes_every_stage() {
    let dir = case_dir("model_softmax");
    let module = dir.join("module.hlo");
    let out = temp_dir("dump");
    let has = |d: &Path, file: &str, needle: &str| {
        let t = std::fs::read_to_string(d.join(file)).unwrap_or_else(|e| panic!("{}/{file}: {e}", d.display()));
        assert!(t.contains(needle), "{}/{file} lacks {needle:?}:\n{t}", d.display());
    };
    let common = |d: &Path| {
        has(d, "00-input.hlo", "HloModule");
        let fusion = std::fs::read_dir(d)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .find(|n| n.ends_with("-fusion.hlo"))
            .expect("a dump after fusion");
        has(d, &fusion, "calls=fused_computation");
        has(d, "fusion.txt", "fusion: %");
        has(d, "program.txt", "kernel ");
    };
    for backend in ["cranelift", "llvm"] {
        let d = out.join(backend);
        let run = tessera(&[
            "run",
            text(&module),
            "--args",
            text(&dir.join("args")),
            "--out",
            text(&out.join("results")),
            "--backend",
            backend,
            "--dump",
            text(&d),
        ]);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        common(&d);
        if backend == "llvm" {
            // Kernels compile in a module per effort (full, light) beside the entry's: each
            // module's IR, optimized IR and assembly are there, and so is every kernel.
            let stems: Vec<&str> =
                ["llvm", "llvm-light"].into_iter().filter(|s| d.join(format!("{s}.ll")).exists()).collect();
            assert!(!stems.is_empty(), "no LLVM module in {}", d.display());
            let mut ir = String::new();
            let mut optimized = String::new();
            for stem in &stems {
                has(&d, &format!("{stem}.ll"), "define");
                has(&d, &format!("{stem}-opt.ll"), "define");
                has(&d, &format!("{stem}.s"), "ret");
                ir += &std::fs::read_to_string(d.join(format!("{stem}.ll"))).unwrap();
                optimized += &std::fs::read_to_string(d.join(format!("{stem}-opt.ll"))).unwrap();
            }
            // Every launch passes disjoint buffers, so the kernels know them apart.
            assert!(optimized.contains("!alias.scope"), "no kernel knows its buffers apart");
            // The entry is LLVM's where kernels are inlined into it, else Cranelift's.
            if d.join("llvm-entry.ll").exists() {
                has(&d, "llvm-entry-opt.ll", "define i32 @tessera.entry(");
                ir += &std::fs::read_to_string(d.join("llvm-entry.ll")).unwrap();
            } else {
                has(&d, "cranelift-entry.clif", "; machine code");
            }
            // Every kernel of the program (model_softmax's are all distinct, so each compiles
            // under its own name) is defined in one of the dumped modules, or in the object
            // Cranelift made of the small sequential and scalar kernels.
            ir += &std::fs::read_to_string(d.join("cranelift.clif")).unwrap_or_default();
            let program = std::fs::read_to_string(d.join("program.txt")).unwrap();
            let kernels: Vec<&str> = program
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix("kernel "))
                .filter_map(|l| l.split('(').next())
                .collect();
            assert!(!kernels.is_empty(), "the program has no kernel:\n{program}");
            for name in kernels {
                assert!(
                    ir.contains(&format!("define void @tessera.kernel.{name}("))
                        || ir.contains(&format!("; kernel {name}\n")),
                    "{name} is in no dumped module"
                );
            }
        } else {
            has(&d, "cranelift.clif", "; machine code");
        }
    }
    let compare = tessera(&["compare", text(&module), "--runs", "1", "--dump", text(&out.join("compare"))]);
    assert!(compare.status.success(), "{}", String::from_utf8_lossy(&compare.stderr));
    common(&out.join("compare/llvm"));
    // The interpreter's folder holds the module it evaluated.
    has(&out.join("compare/interp"), "00-input.hlo", "HloModule");
    has(&out.join("compare/cranelift"), "cranelift.clif", "; machine code");
    let aot = out.join("aot");
    let compile = tessera(&[
        "compile",
        text(&module),
        "-o",
        text(&out.join("m.o")),
        "--header",
        text(&out.join("m.h")),
        "--dump",
        text(&aot),
    ]);
    assert!(compile.status.success(), "{}", String::from_utf8_lossy(&compile.stderr));
    common(&aot);
    has(&aot, "llvm.s", "ret");
}

#[test]
fn usage_errors_exit_with_2() {
    let dir = case_dir("binary_arith_f32");
    let module = dir.join("module.hlo");
    let args = dir.join("args");
    let cases: [&[&str]; 6] = [
        &["run", text(&module)],
        &["run", text(&module), "--args", text(&args)],
        &["run", text(&module), "--args", text(&args), "--out", "/tmp/x", "--backend", "tpu"],
        &["run", text(&module), "--args", text(&args), "--time", "0"],
        &["run", text(&module), "--args", text(&args), "--time", "3", "--threads", "zero"],
        &["frobnicate"],
    ];
    for argv in cases {
        let run = tessera(argv);
        assert_eq!(run.status.code(), Some(2), "{argv:?}: {}", String::from_utf8_lossy(&run.stderr));
    }
}

#[test]
fn compile_and_run_errors_exit_with_1_and_say_why() {
    let dir = case_dir("binary_arith_f32");
    let out = temp_dir("errors_out");
    let expect_error = |argv: &[&str], needle: &str| {
        let run = tessera(argv);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{argv:?}: {stderr}");
        assert!(stderr.contains(needle), "{argv:?}: {stderr}");
    };
    // A module that does not exist.
    expect_error(&["run", "/nonexistent/m.hlo", "--args", text(&dir.join("args")), "--out", text(&out)], "nonexistent");
    // ragged-dot is the one op here that neither the interpreter nor the kernel lowering runs.
    let ragged = temp_dir("errors_ragged");
    std::fs::write(
        ragged.join("module.hlo"),
        "HloModule r\n\nENTRY e {\n  a = f32[11,5] parameter(0)\n  b = f32[3,5,7] parameter(1)\n  \
         g = s64[3] parameter(2)\n  ROOT r = f32[11,7] ragged-dot(a, b, g), lhs_contracting_dims={1}, \
         rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}\n}\n",
    )
    .unwrap();
    std::fs::create_dir_all(ragged.join("args")).unwrap();
    let arg_shapes = [(ElementType::F32, vec![11, 5]), (ElementType::F32, vec![3, 5, 7]), (ElementType::S64, vec![3])];
    for (i, (et, dims)) in arg_shapes.iter().enumerate() {
        let zeros = Literal::zeros(Shape::array(*et, dims)).unwrap();
        tessera_hlo::npy::write_npy(&zeros, ragged.join("args").join(format!("{i}.npy"))).unwrap();
    }
    for backend in ["cranelift", "llvm"] {
        // An op the kernel lowering does not handle: the message names it and the backend.
        expect_error(
            &[
                "run",
                text(&ragged.join("module.hlo")),
                "--args",
                text(&ragged.join("args")),
                "--out",
                text(&out),
                "--backend",
                backend,
            ],
            &format!("the {backend} backend cannot compile this module"),
        );
    }
    // Arguments of the wrong element type.
    let s32 = case_dir("compare_s32");
    expect_error(
        &["run", text(&s32.join("module.hlo")), "--args", text(&dir.join("args")), "--out", text(&out)],
        "argument 0",
    );
    // The wrong number of arguments.
    let one_arg = temp_dir("one_arg");
    std::fs::copy(dir.join("args/0.npy"), one_arg.join("0.npy")).unwrap();
    expect_error(
        &["run", text(&dir.join("module.hlo")), "--args", text(&one_arg), "--out", text(&out)],
        "takes 2 arguments but the folder holds 1",
    );
    // A module that does not parse.
    let bad_dir = temp_dir("bad_module");
    let bad = bad_dir.join("m.hlo");
    std::fs::write(&bad, "HloModule m\nENTRY e {\n  ROOT x = f32[] bogus()\n}\n").unwrap();
    expect_error(&["run", text(&bad), "--args", text(&one_arg), "--out", text(&out)], "m.hlo");
}

/// A process may exit right after its work, while LLVM still runs on a thread of the client's
/// (the JIT linker it makes at start) or of a tiered executable (the background compile):
/// exiting then ran LLVM's static destructors under that thread, which crashed about one run
/// in thirty (a segfault, or "pure virtual method called") once nothing else delayed the
/// exit. Quick runs and quick failures must all exit with their own status.
#[test]
fn runs_and_failures_exit_cleanly_while_llvm_threads_are_busy() {
    let dir = case_dir("binary_arith_f32");
    let module = dir.join("module.hlo");
    let args = dir.join("args");
    for i in 0..40 {
        let run = tessera(&["run", text(&module), "--args", text(&args), "--time", "1", "--backend", "tiered"]);
        assert_eq!(
            run.status.code(),
            Some(0),
            "tiered run {i}: {:?} {}",
            run.status,
            String::from_utf8_lossy(&run.stderr)
        );
        // The module takes two arguments: the client is made, then the run fails at once.
        let missing = temp_dir("exit_missing_args");
        let failed =
            tessera(&["run", text(&module), "--args", text(&missing), "--time", "1", "--backend", "cranelift"]);
        assert_eq!(
            failed.status.code(),
            Some(1),
            "failed run {i}: {:?} {}",
            failed.status,
            String::from_utf8_lossy(&failed.stderr)
        );
    }
}
