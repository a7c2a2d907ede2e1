//! Sets `TESSERA_BUILD_ID`: a fingerprint of the sources that make compiled code (every
//! workspace crate but the test kit, the lock file, the compiler's version). The compile cache
//! keys its entries by it, so a build that could compile differently (a release, or a working
//! tree edited between two runs) never loads another build's code.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::path::{Path, PathBuf};

const INPUTS: [&str; 8] =
    ["src", "hlo/src", "lower/src", "codegen/src", "runtime/src", "Cargo.lock", "Cargo.toml", "build.rs"];

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for input in INPUTS {
        let path = root.join(input);
        println!("cargo:rerun-if-changed={}", path.display());
        collect(&path, &mut files);
    }
    for manifest in ["hlo", "lower", "codegen", "runtime"] {
        let path = root.join(manifest).join("Cargo.toml");
        println!("cargo:rerun-if-changed={}", path.display());
        files.push(path);
    }
    files.sort();
    let mut hasher = DefaultHasher::new();
    for file in &files {
        hasher.write(file.strip_prefix(&root).unwrap_or(file).to_string_lossy().as_bytes());
        hasher.write(&std::fs::read(file).unwrap_or_default());
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc).arg("-V").output().map(|o| o.stdout).unwrap_or_default();
    hasher.write(&version);
    hasher.write(std::env::var("TARGET").unwrap_or_default().as_bytes());
    println!("cargo:rustc-env=TESSERA_BUILD_ID={:016x}", hasher.finish());
}

fn collect(path: &Path, files: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else { return };
        for entry in entries.flatten() {
            collect(&entry.path(), files);
        }
    } else if path.is_file() {
        files.push(path.to_path_buf());
    }
}
