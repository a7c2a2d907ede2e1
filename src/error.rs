//! `tessera::Error`: every way compiling or running a module can fail, wrapping the crates'
//! own errors so a caller matches on one type and every message names what went wrong.

use tessera_codegen::CodegenError;
use tessera_hlo::eval::EvalError;
use tessera_hlo::text::ParseError;
use tessera_hlo::verify::VerifyError;
use tessera_hlo::{LiteralError, NpyError};
use tessera_lower::{CapacityError, LowerError};
use tessera_runtime::RuntimeError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Parse(#[from] ParseError),
    #[error("the module does not verify: {0}")]
    Verify(#[from] VerifyError),
    /// The module uses something the kernel lowering does not handle (the message names the
    /// instruction and the op).
    #[error("the {backend} backend cannot compile this module: {source}")]
    Lower { backend: &'static str, source: LowerError },
    /// A codegen tier refused a kernel (the message names the tier).
    #[error(transparent)]
    Codegen(#[from] CodegenError),
    /// The tiered backend's background LLVM compile failed (runs stay on Cranelift's code).
    #[error("the tiered backend's LLVM compile failed: {0}")]
    PeakTier(String),
    #[error(transparent)]
    Capacity(#[from] CapacityError),
    /// A custom-call target without a host function, or a registration Tessera refuses.
    #[error("custom-call target '{target}': {message}")]
    CustomCall { target: String, message: String },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The reference interpreter failed (an unsupported op names the op).
    #[error("the interp backend: {0}")]
    Eval(#[from] EvalError),
    /// A caller argument does not fit the parameter it is bound to.
    #[error("argument {index}: {message}")]
    Argument { index: usize, message: String },
    /// A caller's result buffer does not fit the result it receives.
    #[error("result {index}: {message}")]
    Result { index: usize, message: String },
    #[error(transparent)]
    Literal(#[from] LiteralError),
    #[error(transparent)]
    Npy(#[from] NpyError),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

impl Error {
    pub(crate) fn argument(index: usize, message: impl Into<String>) -> Error {
        Error::Argument { index, message: message.into() }
    }
}
