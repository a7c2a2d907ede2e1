//! Shape inference and the module verifier.
//!
//! [`infer_shape`] computes the result shape XLA's shape inference gives an instruction from
//! its opcode, attributes and operand shapes (and the signatures of the computations it
//! calls), or says which rule is broken. [`verify`] checks a whole module: structure (names,
//! operands, parameters, roots, cycles, the call graph), shapes and layouts, and that every
//! declared shape agrees with the inferred one.
//!
//! Errors carry a short stable rule id (`dot.contracting_dims_mismatch`) so that tests and
//! tools can match on the rule without depending on the wording of the message.

mod infer;
mod module_check;

use std::fmt;

pub use infer::{infer_shape, result_is_declared};
pub use module_check::{verify, verify_all};

/// Why an instruction's shape cannot be inferred: a broken rule and what broke it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeError {
    /// A short stable id, `family.what` (`dot.contracting_dims_mismatch`).
    pub rule: &'static str,
    /// Names the shapes, dimensions or attributes involved.
    pub message: String,
}

impl ShapeError {
    pub fn new(rule: &'static str, message: impl Into<String>) -> ShapeError {
        ShapeError { rule, message: message.into() }
    }
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule, self.message)
    }
}

impl std::error::Error for ShapeError {}

/// A verifier finding: where (computation and instruction, when there is one), which rule,
/// and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// The computation's name; `None` for module-level findings (no computations, ...).
    pub computation: Option<String>,
    /// The instruction's name (without `%`), when the finding is about one instruction.
    pub instruction: Option<String>,
    pub rule: &'static str,
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.computation, &self.instruction) {
            (Some(c), Some(i)) => write!(f, "computation {c}, instruction %{i}: ")?,
            (Some(c), None) => write!(f, "computation {c}: ")?,
            (None, Some(i)) => write!(f, "instruction %{i}: ")?,
            (None, None) => write!(f, "module: ")?,
        }
        write!(f, "{}: {}", self.rule, self.message)
    }
}

impl std::error::Error for VerifyError {}

#[cfg(test)]
mod tests;
