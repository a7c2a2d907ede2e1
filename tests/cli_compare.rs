//! `tessera compare` as a person runs it: the built binary on the bundled example (every tier
//! agrees with the interpreter) and on a module the JIT tiers refuse (reported, not fatal).

use std::path::PathBuf;
use std::process::{Command, Output};

fn compare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).arg("compare").args(args).output().expect("the binary runs")
}

fn example() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/mlp.hlo").to_string_lossy().into_owned()
}

/// The table's data rows, keyed by tier.
fn rows(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("---"))
        .skip(1)
        .map(|l| {
            let (tier, rest) = l.split_once(' ').unwrap_or((l, ""));
            (tier.to_string(), rest.trim().to_string())
        })
        .collect()
}

#[test]
fn every_tier_agrees_on_the_example() {
    let run = compare(&[&example(), "--runs", "3", "--threads", "1"]);
    let stdout = String::from_utf8(run.stdout).unwrap();
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let header = stdout.lines().nth(1).unwrap();
    for column in ["tier", "compile", "run (median of 3)", "speed-up vs interp", "agrees"] {
        assert!(header.contains(column), "{header}");
    }
    let rows = rows(&stdout);
    let tiers: Vec<&str> = rows.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tiers, ["interp", "cranelift", "llvm"], "{stdout}");
    assert!(rows[0].1.ends_with("reference"), "{stdout}");
    for (_, rest) in &rows[1..] {
        assert!(rest.ends_with("yes"), "{stdout}");
        assert!(rest.contains(" ms") || rest.contains(" us"), "{stdout}");
    }
}

#[test]
fn a_refused_module_is_reported_per_backend() {
    let dir = std::env::temp_dir().join(format!("tessera_cli_compare_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let module = dir.join("ragged.hlo");
    // ragged-dot is the one op here that neither the interpreter nor the kernel lowering runs.
    std::fs::write(
        &module,
        "HloModule r\n\nENTRY e {\n  a = f32[11,5] parameter(0)\n  b = f32[3,5,7] parameter(1)\n  \
         g = s64[3] parameter(2)\n  ROOT r = f32[11,7] ragged-dot(a, b, g), lhs_contracting_dims={1}, \
         rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}\n}\n",
    )
    .unwrap();
    let run = compare(&[module.to_str().unwrap(), "--runs", "2"]);
    let stdout = String::from_utf8(run.stdout).unwrap();
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 3, "{stdout}");
    assert_eq!(rows[0].0, "interp");
    for (backend, rest) in &rows {
        assert!(rest.contains(&format!("refused: the {backend} backend")), "{stdout}");
        assert!(rest.contains("ragged-dot"), "{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_argument_folder_entry_is_an_error() {
    let dir = std::env::temp_dir().join(format!("tessera_cli_compare_args_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = compare(&[&example(), "--args", dir.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("takes 5 arguments but the folder holds 0"));
    let _ = std::fs::remove_dir_all(&dir);
}
