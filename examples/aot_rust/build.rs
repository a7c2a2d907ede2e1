//! Compiles ../mlp.hlo ahead of time with the `tessera` CLI (from `cargo build --release` at
//! the repository's top, or $TESSERA), archives the object for the linker, and turns the
//! header's sizes into Rust constants (`OUT_DIR/mlp_sizes.rs`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../..");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let tessera = std::env::var_os("TESSERA").map(PathBuf::from).unwrap_or_else(|| root.join("target/release/tessera"));
    let module = root.join("examples/mlp.hlo");
    println!("cargo:rerun-if-changed={}", module.display());
    println!("cargo:rerun-if-env-changed=TESSERA");
    let (object, header) = (out.join("mlp.o"), out.join("mlp.h"));
    let status = Command::new(&tessera)
        .arg("compile")
        .arg(&module)
        .args(["--name", "mlp", "-o"])
        .arg(&object)
        .arg("--header")
        .arg(&header)
        .status()
        .unwrap_or_else(|e| {
            panic!("{}: {e} (run `cargo build --release` at the top, or set TESSERA)", tessera.display())
        });
    assert!(status.success(), "tessera compile failed");
    let status = Command::new("ar").arg("crs").arg(out.join("libmlp_aot.a")).arg(&object).status().expect("ar");
    assert!(status.success(), "ar failed");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=mlp_aot");

    // The header's `#define mlp_X N` and `mlp_X_BYTES[] = {..}` lines as Rust constants.
    let text = std::fs::read_to_string(&header).unwrap();
    let mut rust = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("#define mlp_") {
            if let Some((name, value)) = rest.split_once(' ') {
                if value.parse::<u64>().is_ok() {
                    rust += &format!("pub const {name}: usize = {value};\n");
                }
            }
        } else if let Some(rest) = line.strip_prefix("static const uint64_t mlp_") {
            let name = rest.split('[').next().unwrap();
            let values = rest.split('{').nth(1).and_then(|v| v.split('}').next()).unwrap();
            let count = values.split(',').count();
            rust += &format!("pub const {name}: [usize; {count}] = [{values}];\n");
        }
    }
    std::fs::write(out.join("mlp_sizes.rs"), rust).unwrap();
}
