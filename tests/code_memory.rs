//! Compiled code is freed with its executable: compiling and dropping programs for a long time
//! (a server compiling what its clients send) keeps memory flat on both tiers, the JIT linker's
//! libraries included (`codegen::loader` reuses them).

use tessera::{Backend, CacheSetting, Client, ClientOptions, CompileOptions};

/// The process's resident memory in KiB (Linux), if known.
fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn compiling_and_dropping_programs_keeps_memory_flat() {
    let text = "HloModule m\nENTRY e {\n  p = f32[64] parameter(0)\n  e = f32[64] exponential(p)\n  \
                ROOT n = f32[64] negate(e)\n}\n";
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let options = ClientOptions { cache: CacheSetting::Off, ..ClientOptions::default() };
        let client = Client::with_options(backend, &options).unwrap();
        let compile_many = |n: usize| {
            for _ in 0..n {
                drop(client.compile_text(text, &CompileOptions::default()).unwrap());
            }
        };
        // Warm up (allocator pools, LLVM's and the linker's one-time state).
        compile_many(50);
        let Some(before) = resident_kib() else { return };
        compile_many(200);
        let after = resident_kib().unwrap();
        eprintln!("{backend}: {before} KiB -> {after} KiB after 200 more compiles");
        // Leaking even 5 KiB per program would add 1,000 KiB.
        assert!(after < before + 600, "{backend}: {before} KiB -> {after} KiB");
    }
}
