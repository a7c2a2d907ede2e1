//! The Cranelift tier's object files (`crate::aot`): made by the same path as a JIT program's
//! object ([`super::compile_object_with`]: distinct kernels translated once and compiled side by
//! side, the entry from `entry.rs`), with the kernels local to the object, the constants as
//! its read-only data and the entry exported under the caller's symbol.

use tessera_lower::Program;

use super::{compile_object_with, EntryKind, KernelCode, TIER};
use crate::aot::AotOptions;
use crate::entry::EntryPlan;
use crate::{CodegenError, ResolvedTarget};

/// The object's bytes.
pub(crate) fn object(
    program: &Program,
    plan: &EntryPlan,
    target: &ResolvedTarget,
    options: &AotOptions,
) -> Result<Vec<u8>, CodegenError> {
    let symbol = options.symbol.as_str();
    let constants = (0..plan.constants.len())
        .map(|i| {
            plan.constant_bytes(program, i).ok_or_else(|| CodegenError::Backend {
                tier: TIER,
                kernel: symbol.into(),
                message: format!("constant {i} has no bytes"),
            })
        })
        .collect::<Result<Vec<&[u8]>, _>>()?;
    let entry = EntryKind::Object { symbol, parallel: options.parallel, constants: &constants };
    let dump = options.dump_dir.as_deref();
    let (mut code, _) = compile_object_with(&program.kernels, KernelCode::Here, Some((plan, entry)), target, dump)?;
    Ok(code.objects.pop().unwrap_or_default())
}
