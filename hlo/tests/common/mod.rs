//! What the integration tests share.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The shared folder (corpus, parser suite, seeds): `$TESSERA_SHARED`, else `shared/` beside
/// the checkout. Conformance cannot be judged without it, so a missing folder fails the test
/// instead of letting it pass unchecked.
pub fn shared_dir() -> PathBuf {
    let dir = std::env::var_os("TESSERA_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    assert!(
        dir.join("corpus").is_dir() && dir.join("parser-suite").is_dir(),
        "the shared folder (corpus, parser-suite) is not at {}: put it beside the checkout or set TESSERA_SHARED",
        dir.display()
    );
    dir
}
