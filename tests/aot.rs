//! Ahead-of-time compilation end to end: corpus cases compiled into objects on both tiers,
//! linked by gcc with a C driver generated per case and `libtessera_rt.a`, run as separate
//! processes on the physical argument bytes, and judged by the case's own tolerances; an
//! AArch64 object checked by its ELF header; and the CLI's errors, which leave no files.
//!
//! Needs `gcc` and the runtime library built for this profile (`./x test` builds it first:
//! `cargo build --profile ci -p tessera-rt`).

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera::aot::{self, Tier};
use tessera::conformance::{physical_with_garbage, Case};
use tessera::table::Table;
use tessera::{Backend, Client, CpuTarget, LowerOptions};
use tessera_codegen::aot::AotOptions;
use tessera_hlo::corpus::tolerance;
use tessera_hlo::{Literal, Shape};

/// Cases across the categories: tuple results, non-default and tiled layouts, while loops and
/// conditionals, dots and convolutions (runtime GEMM and convolution calls), sort, gather and
/// scatter, reductions, random numbers, complex numbers and FFT, 16-bit floats.
const CASES: [&str; 34] = [
    "matmul",
    "model_mlp2",
    "model_lenet",
    "model_softmax",
    "model_layernorm",
    "model_mha_forward",
    "conv2d_nhwc_same_stride2",
    "conv1d",
    "dot_contract_nondefault",
    "dot_mixed_precision",
    "call_tuple_outputs",
    "hand_layout_2d",
    "hand_layout_3d",
    "hand_tiled_transpose",
    "hand_tiled_relayout_copy",
    "hand_tiled_bf16_packed",
    "hand_tiled_small_tile_s8",
    "hand_tiled_combine_reduce",
    "while_fori_loop",
    "scan_cumulative",
    "cond_switch",
    "sort_1d_2d",
    "top_k",
    "gather_take",
    "scatter_add",
    "reduce_argmax",
    "reduce_sum_f32",
    "maxpool2d",
    "random_normal_uniform",
    "complex_basic",
    "hand_cholesky_triangular_solve",
    "binary_f16",
    "convert_f64_s64",
    "transpose_2d_3d",
];

/// Cases also compiled with `--parallel` and run on two threads: grids split, GEMM and
/// convolution on the pool, loops and branches.
const PARALLEL_CASES: [&str; 6] =
    ["model_mlp2", "model_lenet", "hand_tiled_transpose", "while_fori_loop", "cond_switch", "reduce_sum_f32"];

fn shared_dir() -> PathBuf {
    match std::env::var_os("TESSERA_SHARED") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    }
}

/// `libtessera_rt.a` of the profile this test was built with (target/<profile>/).
fn runtime_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let lib = profile_dir.join("libtessera_rt.a");
    assert!(
        lib.is_file(),
        "{} is missing: build it first with `cargo build --profile {} -p tessera-rt` (./x test does)",
        lib.display(),
        profile_dir.file_name().and_then(|n| n.to_str()).unwrap_or("ci")
    );
    lib
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-aot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A C program that runs `symbol` on `DIR/arg<i>.bin` and writes `DIR/result<i>.bin`, on
/// `threads` threads of the runtime library when that is above 1.
fn driver(symbol: &str, header: &str, threads: u32) -> String {
    // Declared by the header only when the object needs the runtime library.
    let threading = if threads > 1 {
        format!("  if (tessera_rt_set_threads({threads}) != 0) {{ fprintf(stderr, \"no threads\\n\"); return 2; }}\n")
    } else {
        String::new()
    };
    format!(
        r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "{header}"

static void* buffer(uint64_t bytes) {{
  /* aligned_alloc wants a multiple of the alignment (and something to return for 0). */
  uint64_t n = (bytes + {symbol}_ALIGNMENT - 1) / {symbol}_ALIGNMENT * {symbol}_ALIGNMENT;
  void* p = aligned_alloc({symbol}_ALIGNMENT, n ? n : {symbol}_ALIGNMENT);
  if (!p) {{ perror("aligned_alloc"); exit(2); }}
  memset(p, 0x5A, n);
  return p;
}}

static void path(char* out, const char* dir, const char* what, int i) {{
  snprintf(out, 4096, "%s/%s%d.bin", dir, what, i);
}}

int main(int argc, char** argv) {{
  if (argc != 2) {{ fprintf(stderr, "usage: %s DIR\n", argv[0]); return 2; }}
  char name[4096];
{threading}  const void* args[{symbol}_NUM_ARGS + 1];
  void* results[{symbol}_NUM_RESULTS + 1];
  for (int i = 0; i < {symbol}_NUM_ARGS; i++) {{
    void* p = buffer({symbol}_ARG_BYTES[i]);
    path(name, argv[1], "arg", i);
    FILE* f = fopen(name, "rb");
    if (!f || fread(p, 1, {symbol}_ARG_BYTES[i], f) != {symbol}_ARG_BYTES[i]) {{ perror(name); return 2; }}
    fclose(f);
    args[i] = p;
  }}
  for (int i = 0; i < {symbol}_NUM_RESULTS; i++) results[i] = buffer({symbol}_RESULT_BYTES[i]);
  void* temp = {symbol}_TEMP_BYTES ? buffer({symbol}_TEMP_BYTES) : NULL;
  int32_t rc = {symbol}(args, results, temp);
  if (rc != 0) {{ fprintf(stderr, "{symbol}: %s\n", {symbol}_error_string(rc)); return 3; }}
  for (int i = 0; i < {symbol}_NUM_RESULTS; i++) {{
    path(name, argv[1], "result", i);
    FILE* f = fopen(name, "wb");
    if (!f || fwrite(results[i], 1, {symbol}_RESULT_BYTES[i], f) != {symbol}_RESULT_BYTES[i]) {{ perror(name); return 2; }}
    fclose(f);
  }}
  return 0;
}}
"#
    )
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr)))
    }
}

fn flatten(lit: &Literal, out: &mut Vec<Literal>) {
    match lit.tuple_elements() {
        Some(es) => es.iter().for_each(|e| flatten(e, out)),
        None => out.push(lit.clone()),
    }
}

/// Compiles, links and runs one case on one tier (kernel grids split across two threads when
/// `parallel`); the object's and header's sizes on success.
fn aot_case(case: &Case, tier: Tier, parallel: bool, dir: &Path, lib: &Path) -> Result<(usize, usize), String> {
    let symbol = format!("{}_{}{}", case.name, tier.name(), if parallel { "_parallel" } else { "" });
    let options = AotOptions {
        tier,
        symbol: symbol.clone(),
        triple: None,
        cpu: CpuTarget::host(),
        source: format!("{}/module.hlo", case.name),
        parallel,
        dump_dir: None,
        object_name: format!("{symbol}.o"),
    };
    let artifacts = aot::compile(&case.module, &LowerOptions::default(), &options).map_err(|e| e.to_string())?;
    let (object, header) = (dir.join(format!("{symbol}.o")), dir.join(format!("{symbol}.h")));
    aot::write(&artifacts, &object, &header).map_err(|e| e.to_string())?;
    // The header alone compiles as strict C99 and as C++.
    let include = dir.join(format!("{symbol}_include.c"));
    std::fs::write(&include, format!("#include \"{symbol}.h\"\n")).unwrap();
    run(Command::new("gcc")
        .args(["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"])
        .arg(&include))?;
    run(Command::new("g++")
        .args(["-std=c++11", "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", "c++"])
        .arg(&include))?;
    let source = dir.join(format!("{symbol}_driver.c"));
    std::fs::write(&source, driver(&symbol, &format!("{symbol}.h"), if parallel { 2 } else { 1 })).unwrap();
    let binary = dir.join(&symbol);
    // The link line the header documents.
    run(Command::new("gcc")
        .args(["-std=c11", "-O1", "-Wall", "-Werror"])
        .arg(&source)
        .arg(&object)
        .arg("-Wl,--start-group")
        .arg(lib)
        .arg("-Wl,--end-group")
        .args(["-lm", "-lpthread", "-ldl", "-lrt", "-lutil", "-lgcc_s", "-o"])
        .arg(&binary))?;

    // Physical arguments (padding filled with garbage) in the entry layouts.
    let interp = Client::new(Backend::Interp).unwrap().compile(&case.module, &Default::default()).unwrap();
    let mut leaves = Vec::new();
    for a in case.arguments()? {
        flatten(&a, &mut leaves);
    }
    let io = dir.join(format!("{symbol}_io"));
    std::fs::create_dir_all(&io).unwrap();
    for (i, (lit, shape)) in leaves.iter().zip(interp.parameter_leaves()).enumerate() {
        let bytes = physical_with_garbage(lit, shape).map_err(|e| e.to_string())?;
        std::fs::write(io.join(format!("arg{i}.bin")), bytes).unwrap();
    }
    run(Command::new(&binary).arg(&io))?;
    let outputs = case.outputs()?;
    for (i, (shape, want)) in interp.result_leaves().zip(&outputs).enumerate() {
        let bytes = std::fs::read(io.join(format!("result{i}.bin"))).map_err(|e| e.to_string())?;
        let got = Literal::from_physical_bytes(Shape::Array(shape.clone()), bytes).map_err(|e| e.to_string())?;
        tolerance::check(&got, want).map_err(|m| format!("output {i}: {m}"))?;
    }
    Ok((artifacts.object.len(), artifacts.header.len()))
}

#[test]
fn corpus_cases_run_ahead_of_time_on_both_tiers() {
    let lib = runtime_library();
    let dir = scratch("corpus");
    let corpus = shared_dir().join("corpus");
    let mut table = Table::new(&["case", "tier", "object bytes", "header bytes", "result"]).align_right(&[2, 3]);
    let mut failures = Vec::new();
    let mut passed = 0;
    let runs = CASES.iter().flat_map(|&n| [(n, false)]).chain(PARALLEL_CASES.iter().map(|&n| (n, true)));
    let mut total = 0;
    for (name, parallel) in runs {
        let case = Case::load(&corpus.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        for tier in [Tier::Cranelift, Tier::Llvm] {
            total += 1;
            let label = format!("{}{}", tier.name(), if parallel { " --parallel" } else { "" });
            match aot_case(&case, tier, parallel, &dir, &lib) {
                Ok((o, h)) => {
                    passed += 1;
                    table.row(vec![name.into(), label, o.to_string(), h.to_string(), "pass".into()]);
                }
                Err(e) => {
                    table.row(vec![name.into(), label.clone(), "-".into(), "-".into(), "FAIL".into()]);
                    failures.push(format!("{name} on {label}: {e}"));
                }
            }
        }
    }
    print!("{}", table.render());
    println!("ahead of time: {passed} of {total} case runs pass");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
}

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/mlp.hlo")
}

#[test]
fn cross_compiles_aarch64_objects_on_both_tiers() {
    let dir = scratch("cross");
    for tier in ["llvm", "cranelift"] {
        let (object, header) = (dir.join(format!("mlp_{tier}.o")), dir.join(format!("mlp_{tier}.h")));
        let out = cli()
            .arg("compile")
            .arg(example())
            .args(["--backend", tier, "--target", "aarch64-unknown-linux-gnu", "--cpu", "neoverse-n1", "--name", "mlp"])
            .arg("-o")
            .arg(&object)
            .arg("--header")
            .arg(&header)
            .output()
            .unwrap();
        assert!(out.status.success(), "{tier}: {}", String::from_utf8_lossy(&out.stderr));
        let elf = std::fs::read(&object).unwrap();
        // ELF64, little-endian, relocatable (ET_REL = 1), machine AArch64 (EM_AARCH64 = 183).
        assert_eq!(&elf[..4], b"\x7fELF", "{tier}");
        assert_eq!((elf[4], elf[5]), (2, 1), "{tier}: ELF64 little-endian");
        assert_eq!(u16::from_le_bytes([elf[16], elf[17]]), 1, "{tier}: relocatable");
        assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 183, "{tier}: AArch64");
        // The entry is a defined global symbol (readelf, where binutils are installed).
        if let Ok(syms) = Command::new("readelf").arg("-sW").arg(&object).output() {
            let syms = String::from_utf8_lossy(&syms.stdout);
            assert!(
                syms.lines().any(|l| l.contains("GLOBAL") && l.trim_end().ends_with(" mlp") && !l.contains("UND")),
                "{tier}: {syms}"
            );
        }
        let text = std::fs::read_to_string(&header).unwrap();
        assert!(text.contains(&format!("Tier {tier}, target aarch64-unknown-linux-gnu, CPU neoverse-n1")), "{text}");
        assert!(text.contains("int32_t mlp(const void* const* args, void* const* results, void* temp);"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_targets_paths_and_symbols_are_errors_that_leave_no_files() {
    let dir = scratch("errors");
    let cases: [(&[&str], &str, &str); 6] = [
        (&["--target", "sparc-sun-solaris"], "m.o", "unknown target triple 'sparc-sun-solaris'"),
        (&["--cpu", "pentium-9000"], "m.o", "unknown target CPU 'pentium-9000'"),
        (&["--target", "aarch64-unknown-linux-gnu", "--cpu", "x86-64-v3"], "m.o", "unknown target CPU 'x86-64-v3'"),
        (&["--name", "my-model"], "m.o", "'my-model' is not a valid C identifier"),
        (&[], "my-model.o", "pass --name SYMBOL"),
        (&["--name", "expf"], "m.o", "a C library or runtime function's name"),
    ];
    for (flags, object, message) in cases {
        let out = cli()
            .arg("compile")
            .arg(example())
            .args(flags)
            .arg("-o")
            .arg(dir.join(object))
            .arg("--header")
            .arg(dir.join("m.h"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {stderr}");
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
    }
    // An unwritable destination: neither file appears, and no temporary is left behind.
    let out = cli()
        .arg("compile")
        .arg(example())
        .arg("-o")
        .arg(dir.join("m.o"))
        .arg("--header")
        .arg(dir.join("missing-dir/m.h"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing-dir/m.h"));
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `examples/aot_c` as its README line runs it (`make`), with this build's binaries.
#[test]
fn the_c_example_builds_and_runs() {
    let dir = scratch("example");
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/aot_c");
    for file in ["main.c", "Makefile"] {
        std::fs::copy(source.join(file), dir.join(file)).unwrap();
    }
    let out = Command::new("make")
        .arg("-C")
        .arg(&dir)
        .arg(format!("TESSERA={}", env!("CARGO_BIN_EXE_tessera")))
        .arg(format!("RT={}", runtime_library().display()))
        .arg(format!("MODULE={}", example().display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // x[i] = (i % 7) / 10, w1, b1, w2, b2 as main.c fills them: logits near 0, 1, ..., 9.
    assert!(stdout.contains("mlp: 32 x 10 logits"), "{stdout}");
    assert!(stdout.contains("  -0.0023   1.0022   2.0001"), "{stdout}");
    assert!(stdout.contains("misaligned x: code 1"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tiled argument's header entry spells out where each element goes (golden text).
#[test]
fn headers_spell_out_tiled_offsets() {
    let text = "HloModule m\nENTRY e {\n  a = f32[2,1000]{1,0:T(2,128)} parameter(0)\n  ROOT n = f32[2,1000]{1,0} negate(a)\n}\n";
    let module = tessera_hlo::text::parse_module(text).unwrap();
    let options = AotOptions {
        tier: Tier::Cranelift,
        symbol: "neg".into(),
        triple: None,
        cpu: CpuTarget::host(),
        source: "inline".into(),
        parallel: false,
        dump_dir: None,
        object_name: "neg.o".into(),
    };
    let header = aot::compile(&module, &LowerOptions::default(), &options).unwrap().header;
    let want = "/* Argument 0 `a` (HLO `a`):\n \
                *   shape f32[2,1000]{1,0:T(2,128)} (2000 elements), 8192 bytes\n \
                *   layout: element (i0, i1, ...) is at element offset (i1/128)*256 + i0*128 + (i1%128) (2048 slots with padding;\n \
                *   / is floor division, % the remainder, padding slots are ignored on input and undefined on output)\n \
                */\n\
                #define neg_ARG0_RANK 2\n#define neg_ARG0_DIM0 2\n#define neg_ARG0_DIM1 1000\n";
    assert!(header.contains(want), "{header}");
    assert!(header.contains("*   layout: row-major (C order), no padding"), "{header}");
    // A negation calls nothing in the runtime library: the link line says so.
    assert!(header.contains("gcc main.c neg.o -lm\n"), "{header}");
    assert!(!header.contains("tessera_rt_set_threads"), "{header}");
}

/// A dimension size known only at run time: the entry returns code 4 unless it is the static
/// size. The object calls nothing in the runtime library, so it links with `-lm` alone.
/// A host object of `text` compiled on `tier` as `symbol`, linked with the C `main` a
/// program gets from `main(symbol)`, and run: its standard output and the header's text.
/// The object must link without the runtime library.
fn run_c_program(tier: Tier, symbol: &str, text: &str, main: &str, dir: &Path) -> (String, String) {
    let module = tessera_hlo::text::parse_module(text).unwrap();
    let options = AotOptions {
        tier,
        symbol: symbol.to_string(),
        triple: None,
        cpu: CpuTarget::host(),
        source: "inline".into(),
        parallel: false,
        dump_dir: None,
        object_name: format!("{symbol}.o"),
    };
    let artifacts = aot::compile(&module, &LowerOptions::default(), &options).unwrap();
    assert!(!artifacts.needs_runtime, "{symbol}: links without the runtime library");
    let (object, header) = (dir.join(format!("{symbol}.o")), dir.join(format!("{symbol}.h")));
    aot::write(&artifacts, &object, &header).unwrap();
    let source = dir.join(format!("{symbol}.c"));
    std::fs::write(&source, format!("#include <stdio.h>\n#include \"{symbol}.h\"\n{main}")).unwrap();
    let binary = dir.join(symbol);
    run(Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Werror"])
        .arg(&source)
        .arg(&object)
        .arg("-lm")
        .arg("-o")
        .arg(&binary))
    .unwrap();
    let out = Command::new(&binary).output().unwrap();
    (String::from_utf8_lossy(&out.stdout).trim().to_string(), std::fs::read_to_string(&header).unwrap())
}

#[test]
fn run_time_dimension_sizes_are_checked_and_runtime_free_objects_link_alone() {
    let dir = scratch("sizes");
    let text = "HloModule m\nENTRY e {\n  p = f32[4,3] parameter(0)\n  n = s32[] parameter(1)\n  \
                d = f32[<=4,3] set-dimension-size(p, n), dimensions={0}\n  ROOT r = f32[<=4,3] negate(d)\n}\n";
    for tier in [Tier::Cranelift, Tier::Llvm] {
        let symbol = format!("sizes_{}", tier.name());
        let main = format!(
            r#"static _Alignas(64) float p[12], r[12];
static _Alignas(64) int32_t n;
int main(void) {{
  for (int i = 0; i < 12; i++) p[i] = (float)i;
  n = 4;
  int32_t ok = {symbol}_run(p, &n, r, 0);
  n = 3;
  int32_t bad = {symbol}_run(p, &n, r, 0);
  printf("%d %g %d %s\n", ok, r[11], bad, {symbol}_error_string(bad));
  return 0;
}}
"#
        );
        let (stdout, _) = run_c_program(tier, &symbol, text, &main, &dir);
        assert_eq!(
            stdout,
            "0 -11 4 a set-dimension-size got a size other than the static one (dynamic shapes are not supported)",
            "{tier:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_donated_argument_may_be_updated_in_place() {
    let dir = scratch("donation_in_place");
    // `p - g * 0.5`, read and written element by element: the program honors the alias.
    let text = "HloModule m, input_output_alias={ {}: (0, {}, may-alias) }\nENTRY e {\n  \
                p = f32[64,64] parameter(0)\n  g = f32[64,64] parameter(1)\n  \
                h = f32[] constant(0.5)\n  hs = f32[64,64] broadcast(h), dimensions={}\n  \
                s = f32[64,64] multiply(g, hs)\n  ROOT u = f32[64,64] subtract(p, s)\n}\n";
    for tier in [Tier::Cranelift, Tier::Llvm] {
        let symbol = format!("in_place_{}", tier.name());
        let main = format!(
            r#"static _Alignas(64) float p[4096], g[4096];
int main(void) {{
  for (int i = 0; i < 4096; i++) {{ p[i] = (float)i; g[i] = (float)(2 * i); }}
  int32_t a = {symbol}_run(p, g, p, 0);
  int wrong = 0;
  for (int i = 0; i < 4096; i++) wrong += p[i] != 0.0f;
  printf("%d %d\n", a, wrong);
  return 0;
}}
"#
        );
        let (stdout, header) = run_c_program(tier, &symbol, text, &main, &dir);
        assert!(header.contains("result 0 and argument 0 may be one buffer"), "{tier:?}: {header}");
        assert_eq!(stdout, "0 0", "{tier:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_donated_argument_may_be_its_result_buffer() {
    let dir = scratch("donation");
    let text = "HloModule m, input_output_alias={ {}: (0, {}, may-alias) }\nENTRY e {\n  \
                cache = f32[8,4] parameter(0)\n  row = f32[1,4] parameter(1)\n  pos = s32[] parameter(2)\n  \
                zero = s32[] constant(0)\n  ROOT u = f32[8,4] dynamic-update-slice(cache, row, pos, zero)\n}\n";
    for tier in [Tier::Cranelift, Tier::Llvm] {
        let symbol = format!("donation_{}", tier.name());
        // The cache is both the argument and the result; then a second call into a separate
        // result leaves the (updated) argument alone.
        let main = format!(
            r#"static _Alignas(64) float cache[32], row[4], other[32];
static _Alignas(64) int32_t pos;
int main(void) {{
  for (int i = 0; i < 32; i++) cache[i] = (float)i;
  for (int i = 0; i < 4; i++) row[i] = 100.0f + i;
  pos = 2;
  int32_t a = {symbol}_run(cache, row, &pos, cache, 0);
  pos = 5;
  int32_t b = {symbol}_run(cache, row, &pos, other, 0);
  printf("%d %d %g %g %g %g %g %g\n", a, b, cache[7], cache[8], cache[11], cache[20], other[8], other[20]);
  return 0;
}}
"#
        );
        let (stdout, header) = run_c_program(tier, &symbol, text, &main, &dir);
        assert!(header.contains("result 0 and argument 0 may be one buffer"), "{tier:?}: {header}");
        assert_eq!(stdout, "0 0 7 100 103 20 100 100", "{tier:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
