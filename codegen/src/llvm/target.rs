//! The CPU LLVM generates code for, from a [`ResolvedTarget`]: LLVM's target registry is
//! global, so its initialization runs once per process under a `OnceLock`; each compile then
//! makes its own target machine (they are not shareable between threads; that costs
//! microseconds).

use std::sync::OnceLock;

use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple};
use inkwell::OptimizationLevel;

use crate::{CodegenError, ResolvedTarget};

/// What a kernel function must carry so LLVM generates code for the chosen CPU (TOOLCHAIN.md:
/// without the attributes, code generation targets a baseline x86-64).
#[derive(Debug)]
pub struct TargetCpu {
    pub triple: String,
    pub cpu: String,
    pub features: String,
    /// Whether the CPU has 512-bit vectors worth preferring (AVX-512F).
    pub avx512: bool,
    /// Whether f16 <-> f32 conversions are instructions (`ResolvedTarget::has_half_conversions`);
    /// elsewhere kernels run their casts as integer sequences.
    pub half_conversions: bool,
    /// The smallest output a kernel stores around the cache (`streaming.rs`): the host's
    /// last-level cache, or [`DEFAULT_LAST_LEVEL_CACHE_BYTES`] for another CPU; `None` where
    /// the target has no streaming stores Tessera uses (non-x86).
    pub streaming_min_bytes: Option<u64>,
    /// The widest vector register's size in bytes (AVX-512: 64, AVX: 32, else 16): a wider
    /// IR vector is stored as several, each needing only this alignment to stream.
    pub vector_bytes: u32,
}

/// The last-level cache assumed for a CPU that is not the host (and for a host whose cache
/// sysfs does not describe): a Zen 3 CCX's L3, about a server core group's share.
pub const DEFAULT_LAST_LEVEL_CACHE_BYTES: u64 = 32 << 20;

static NATIVE: OnceLock<Result<(), String>> = OnceLock::new();
static CROSS: OnceLock<()> = OnceLock::new();

/// `target` for LLVM, initializing LLVM's native target on first use (and, for another
/// architecture, the targets objects can be made for).
pub fn target_cpu(target: &ResolvedTarget) -> Result<TargetCpu, CodegenError> {
    initialize_native().map_err(|message| CodegenError::Target { tier: "llvm", message })?;
    if !target.is_host {
        CROSS.get_or_init(|| {
            let config = InitializationConfig::default();
            Target::initialize_x86(&config);
            Target::initialize_aarch64(&config);
        });
    }
    Ok(TargetCpu {
        triple: target.triple.clone(),
        cpu: target.cpu.clone(),
        features: target.features.clone(),
        avx512: target.has("avx512f"),
        vector_bytes: if target.has("avx512f") {
            64
        } else if target.has("avx") {
            32
        } else {
            16
        },
        half_conversions: target.has_half_conversions(),
        streaming_min_bytes: target.triple.starts_with("x86_64").then(|| {
            if target.is_host {
                host_last_level_cache_bytes().unwrap_or(DEFAULT_LAST_LEVEL_CACHE_BYTES)
            } else {
                DEFAULT_LAST_LEVEL_CACHE_BYTES
            }
        }),
    })
}

/// The size of the host's largest data or unified cache, from Linux's sysfs (read once).
fn host_last_level_cache_bytes() -> Option<u64> {
    static BYTES: OnceLock<Option<u64>> = OnceLock::new();
    *BYTES.get_or_init(|| {
        let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
        let read = |path: std::path::PathBuf| std::fs::read_to_string(path).ok().map(|s| s.trim().to_string());
        dir.filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
            .filter(|e| read(e.path().join("type")).is_some_and(|t| t != "Instruction"))
            .filter_map(|e| parse_cache_size(&read(e.path().join("size"))?))
            .max()
    })
}

/// sysfs's cache size text (`32768K`, `1M`, `512`) in bytes.
fn parse_cache_size(text: &str) -> Option<u64> {
    let (digits, unit) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 1 << 10),
        b'M' => (&text[..text.len() - 1], 1 << 20),
        b'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// Initializes LLVM's native target once per process (code generation and `crate::loader`
/// need it).
pub fn initialize_native() -> Result<(), String> {
    NATIVE
        .get_or_init(|| {
            Target::initialize_native(&InitializationConfig::default())?;
            limit_unrolling();
            Ok(())
        })
        .clone()
}

/// Keeps LLVM's loop unroller to full unrolling of loops with small constant trip counts (a
/// short dot or window loop, which pays: an attention block's batched 16x16x16 dots ran 1.7x
/// slower with the unroller off) and turns off partial and runtime unrolling, which on the
/// kernel IR's explicitly vectorized loops (already unrolled where it pays, with several
/// accumulators) tripled the code (6.2K lines of IR became 18.5K on a GPT-2 training step)
/// and doubled its compile time, for no measured gain. Full unrolling keeps to its threshold:
/// the unroller may otherwise raise it fourfold for a loop it expects to simplify once
/// unrolled, which took the nests of a small convolution (3x3 taps by 8 channels inside its
/// output loops) whole, 114 -> 31 ms of compile time and 18 -> 4.5 us a run without it. These
/// are LLVM's own command-line options, process-wide, set once before any compile.
fn limit_unrolling() {
    let args: [&[u8]; 4] = [
        b"tessera\0",
        b"-unroll-runtime=false\0",
        b"-unroll-allow-partial=false\0",
        b"-unroll-max-percent-threshold-boost=100\0",
    ];
    let argv: Vec<*const std::ffi::c_char> = args.iter().map(|a| a.as_ptr().cast()).collect();
    // SAFETY: every argument is a NUL-terminated static string, and `argv` outlives the call;
    // LLVM copies what it keeps.
    unsafe { llvm_sys::support::LLVMParseCommandLineOptions(argv.len() as i32, argv.as_ptr(), std::ptr::null()) };
}

impl TargetCpu {
    /// A target machine writing relocatable, position-independent objects (which link into
    /// executables and shared libraries alike, and which `crate::loader` links into memory),
    /// selecting instructions at `level`.
    pub fn object_machine(&self, level: OptimizationLevel) -> Result<TargetMachine, CodegenError> {
        let triple = TargetTriple::create(&self.triple);
        let target =
            Target::from_triple(&triple).map_err(|e| CodegenError::Target { tier: "llvm", message: e.to_string() })?;
        target
            .create_target_machine(&triple, &self.cpu, &self.features, level, RelocMode::PIC, CodeModel::Default)
            .ok_or_else(|| CodegenError::Target {
                tier: "llvm",
                message: format!("LLVM has no target machine for {} ({})", self.triple, self.cpu),
            })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        use super::parse_cache_size;
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        for bad in ["", "K", "12Q", "-1K", "99999999999999999999G"] {
            assert_eq!(parse_cache_size(bad), None, "{bad:?}");
        }
    }
}
