//! The CPU LLVM generates code for, from a [`ResolvedTarget`]: LLVM's target registry is
//! global, so its initialization runs once per process under a `OnceLock`; each compile then
//! makes its own target machine (they are not shareable between threads; that costs
//! microseconds).

use std::sync::OnceLock;

use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple};
use inkwell::OptimizationLevel;

use crate::{CodegenError, ResolvedTarget};

/// What a kernel function must carry so MCJIT (which otherwise targets a baseline x86-64)
/// generates code for the chosen CPU (TOOLCHAIN.md).
#[derive(Debug)]
pub struct TargetCpu {
    pub triple: String,
    pub cpu: String,
    pub features: String,
    /// Whether the CPU has 512-bit vectors worth preferring (AVX-512F).
    pub avx512: bool,
}

static NATIVE: OnceLock<Result<(), String>> = OnceLock::new();
static CROSS: OnceLock<()> = OnceLock::new();

/// `target` for LLVM, initializing LLVM's native target on first use (and, for another
/// architecture, the targets objects can be made for).
pub fn target_cpu(target: &ResolvedTarget) -> Result<TargetCpu, CodegenError> {
    NATIVE
        .get_or_init(|| {
            Target::initialize_native(&InitializationConfig::default())?;
            limit_unrolling();
            Ok(())
        })
        .as_ref()
        .map_err(|message| CodegenError::Target { tier: "llvm", message: message.clone() })?;
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
    })
}

/// Keeps LLVM's loop unroller to full unrolling of loops with small constant trip counts (a
/// short dot or window loop, which pays: an attention block's batched 16x16x16 dots ran 1.7x
/// slower with the unroller off) and turns off partial and runtime unrolling, which on the
/// kernel IR's explicitly vectorized loops (already unrolled where it pays, with several
/// accumulators) tripled the code (6.2K lines of IR became 18.5K on a GPT-2 training step)
/// and doubled its compile time, for no measured gain. These are LLVM's own command-line
/// options, process-wide, set once before any compile.
fn limit_unrolling() {
    let args: [&[u8]; 3] = [b"tessera\0", b"-unroll-runtime=false\0", b"-unroll-allow-partial=false\0"];
    let argv: Vec<*const std::ffi::c_char> = args.iter().map(|a| a.as_ptr().cast()).collect();
    // SAFETY: every argument is a NUL-terminated static string, and `argv` outlives the call;
    // LLVM copies what it keeps.
    unsafe { llvm_sys::support::LLVMParseCommandLineOptions(argv.len() as i32, argv.as_ptr(), std::ptr::null()) };
}

impl TargetCpu {
    /// A target machine for this CPU (optimization passes and data layout) in this process.
    pub fn machine(&self) -> Result<TargetMachine, CodegenError> {
        self.machine_with(RelocMode::Default, CodeModel::JITDefault)
    }

    /// A target machine writing relocatable, position-independent objects (which link into
    /// executables and shared libraries alike).
    pub fn object_machine(&self) -> Result<TargetMachine, CodegenError> {
        self.machine_with(RelocMode::PIC, CodeModel::Default)
    }

    fn machine_with(&self, reloc: RelocMode, model: CodeModel) -> Result<TargetMachine, CodegenError> {
        let triple = TargetTriple::create(&self.triple);
        let target =
            Target::from_triple(&triple).map_err(|e| CodegenError::Target { tier: "llvm", message: e.to_string() })?;
        target
            .create_target_machine(&triple, &self.cpu, &self.features, OptimizationLevel::Aggressive, reloc, model)
            .ok_or_else(|| CodegenError::Target {
                tier: "llvm",
                message: format!("LLVM has no target machine for {} ({})", self.triple, self.cpu),
            })
    }
}
