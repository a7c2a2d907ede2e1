//! Why a module could not be lowered to kernels.

use tessera_hlo::LayoutError;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LowerError {
    /// An op (or an op in a form) the kernel lowering does not handle yet.
    #[error("instruction '{instruction}': the kernel lowering does not support {what}")]
    Unsupported { instruction: String, what: String },
    /// The module contradicts itself in a way the verifier does not catch.
    #[error("instruction '{instruction}': {message}")]
    Invalid { instruction: String, message: String },
    #[error("the module does not verify: {0}")]
    Verify(#[from] tessera_hlo::verify::VerifyError),
    #[error("layout: {0}")]
    Layout(#[from] LayoutError),
    /// A pass broke an invariant the pipeline checks between passes (a bug in that pass).
    #[error("after pass '{pass}': {message}")]
    Pipeline { pass: String, message: String },
}

impl LowerError {
    pub fn unsupported(instruction: impl Into<String>, what: impl Into<String>) -> LowerError {
        LowerError::Unsupported { instruction: instruction.into(), what: what.into() }
    }
    pub fn invalid(instruction: impl Into<String>, message: impl Into<String>) -> LowerError {
        LowerError::Invalid { instruction: instruction.into(), message: message.into() }
    }
}
