//! The host target, set up once per process: LLVM's target registry is global, so the
//! initialization runs under a `OnceLock` and every later compile (from any thread) only reads
//! the strings it recorded.

use std::sync::OnceLock;

use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple};
use inkwell::OptimizationLevel;

use crate::CodegenError;

/// What a kernel function must carry so MCJIT (which otherwise targets a baseline x86-64)
/// generates code for this CPU (TOOLCHAIN.md).
#[derive(Debug)]
pub struct Host {
    pub triple: String,
    pub cpu: String,
    pub features: String,
    /// Whether the CPU has 512-bit vectors worth preferring (AVX-512F).
    pub avx512: bool,
}

static HOST: OnceLock<Result<Host, String>> = OnceLock::new();

/// The host description, initializing LLVM's native target on first use.
pub fn host() -> Result<&'static Host, CodegenError> {
    let host = HOST.get_or_init(|| {
        Target::initialize_native(&InitializationConfig::default())?;
        let triple = TargetMachine::get_default_triple();
        let triple = triple.as_str().to_string_lossy().into_owned();
        let cpu = TargetMachine::get_host_cpu_name().to_string();
        let features = TargetMachine::get_host_cpu_features().to_string();
        let avx512 = features.split(',').any(|f| f == "+avx512f");
        Ok(Host { triple, cpu, features, avx512 })
    });
    host.as_ref().map_err(|message| CodegenError::Target { tier: "llvm", message: message.clone() })
}

impl Host {
    /// A target machine for this host (optimization passes and data layout). Target machines
    /// are not shareable between threads, so each compile makes its own; that costs
    /// microseconds.
    pub fn machine(&self) -> Result<TargetMachine, CodegenError> {
        let triple = TargetTriple::create(&self.triple);
        let target =
            Target::from_triple(&triple).map_err(|e| CodegenError::Target { tier: "llvm", message: e.to_string() })?;
        target
            .create_target_machine(
                &triple,
                &self.cpu,
                &self.features,
                OptimizationLevel::Aggressive,
                RelocMode::Default,
                CodeModel::JITDefault,
            )
            .ok_or_else(|| CodegenError::Target {
                tier: "llvm",
                message: format!("LLVM has no target machine for {} ({})", self.triple, self.cpu),
            })
    }
}
