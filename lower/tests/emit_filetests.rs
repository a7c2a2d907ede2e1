//! Filetests: HLO in (`tests/filetests/emit/NAME.hlo`), kernel IR out (`NAME.kir`, the entry
//! computation lowered by `emit_kernel`). `TESSERA_BLESS=1 cargo test --test emit_filetests` rewrites
//! the expected files.

use std::path::Path;

#[test]
fn emitted_kernels_match_their_golden_ir() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests/emit");
    let bless = std::env::var_os("TESSERA_BLESS").is_some();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("filetest folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "hlo"))
        .collect();
    names.sort();
    assert!(!names.is_empty());
    let mut failures = Vec::new();
    for hlo in names {
        let text = std::fs::read_to_string(&hlo).expect("readable");
        let module = tessera_hlo::text::parse_module(&text).expect("parses");
        let stem = hlo.file_stem().unwrap_or_default().to_string_lossy().to_string();
        let kernel = tessera_lower::emit_kernel(&module, module.entry_comp(), &stem).expect("lowers");
        let got = format!("{kernel}\n");
        let kir = hlo.with_extension("kir");
        if bless {
            std::fs::write(&kir, &got).expect("writable");
            continue;
        }
        let want = std::fs::read_to_string(&kir).unwrap_or_default();
        if got != want {
            failures.push(format!("{}:\n--- want\n{want}\n--- got\n{got}", kir.display()));
        }
    }
    assert!(failures.is_empty(), "{}\n(TESSERA_BLESS=1 rewrites the expected files)", failures.join("\n"));
}
