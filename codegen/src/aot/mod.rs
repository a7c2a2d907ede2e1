//! Ahead-of-time compilation (DESIGN.md section 6): a buffer-assigned [`Program`] becomes a
//! relocatable object and a C header. The object holds the kernels (local symbols, so several
//! objects link into one program), the constants, and one exported entry function,
//!
//! ```c
//! int32_t SYMBOL(const void* const* args, void* const* results, void* temp);
//! ```
//!
//! which walks the program's step tree ([`EntryPlan`], emitted by the same code as the JIT's
//! entry: `crate::entry`) on caller-owned memory: it
//! checks the pointers, fills each launch's buffer table on its stack and calls the kernel
//! over its whole grid on the calling thread (or, compiled with [`AotOptions::parallel`],
//! through `tessera_rt_launch`, which splits the grid across the runtime library's threads). Kernels call libm and, for GEMMs, convolutions
//! and FFTs, `tessera_rt_*` functions of the runtime's static library; an object whose
//! kernels call none links without that library.

pub mod header;

use std::time::{Duration, Instant};

use tessera_lower::kernel::Stmt;
use tessera_lower::Program;

use crate::{CodegenError, CpuTarget, Tier};

pub use crate::entry::plan::{Addr, EntryPlan, EntryStep};
pub use header::is_c_identifier;

/// What to compile an object for.
#[derive(Clone, Debug)]
pub struct AotOptions {
    pub tier: Tier,
    /// The entry function's name (a C identifier), also the prefix of the header's names.
    pub symbol: String,
    /// The target triple; `None`: the host's.
    pub triple: Option<String>,
    /// The CPU and feature toggles; the host CPU by default on the host's architecture,
    /// `generic` on another.
    pub cpu: CpuTarget,
    /// Named in the header's opening comment (e.g. the module's file).
    pub source: String,
    /// The object's file name, for the link line the header gives.
    pub object_name: String,
    /// Launch kernels through `tessera_rt_launch`, which splits their grids across the threads
    /// `tessera_rt_set_threads` starts (the object then always needs `libtessera_rt.a`);
    /// otherwise the entry calls every kernel directly on the calling thread.
    pub parallel: bool,
    /// Write the tier's code into this folder: `llvm.ll`, `llvm-opt.ll` and `llvm.s`, or
    /// `cranelift.clif` (IR and machine code).
    pub dump_dir: Option<std::path::PathBuf>,
}

/// An object file's bytes and its header's text.
pub struct AotArtifacts {
    pub object: Vec<u8>,
    pub header: String,
    /// The triple and CPU the object was made for.
    pub triple: String,
    pub cpu: String,
    /// Whether the object calls into the runtime's static library.
    pub needs_runtime: bool,
    pub compile_time: Duration,
}

/// Compiles `program` (after buffer assignment) into an object and its header.
pub fn compile(program: &Program, options: &AotOptions) -> Result<AotArtifacts, CodegenError> {
    let start = Instant::now();
    let tier = options.tier.name();
    if !is_c_identifier(&options.symbol) {
        return Err(CodegenError::Target {
            tier,
            message: format!("'{}' is not a valid C identifier for the entry symbol", options.symbol),
        });
    }
    if options.symbol.starts_with("tessera_rt_")
        || tessera_runtime::abi::symbols().iter().any(|(name, _)| *name == options.symbol)
    {
        return Err(CodegenError::Target {
            tier,
            message: format!("the entry symbol '{}' is a C library or runtime function's name", options.symbol),
        });
    }
    if let Some(k) = program.kernels.iter().find(|k| k.name == options.symbol) {
        return Err(CodegenError::Target {
            tier,
            message: format!("the entry symbol '{}' is also a kernel's name; choose another --name", k.name),
        });
    }
    let target = options.cpu.resolve_for_object(tier, options.triple.as_deref())?;
    let unsupported = |what: String| CodegenError::Unsupported { tier, kernel: options.symbol.clone(), what };
    let plan = EntryPlan::new(program).map_err(unsupported)?;
    if let Some(op) = plan.hosts.first() {
        return Err(unsupported(crate::entry::plan::host_refusal(op)));
    }
    let object = match options.tier {
        Tier::Llvm => crate::llvm::aot::object(program, &plan, &target, options)?,
        Tier::Cranelift => crate::cranelift::aot::object(program, &plan, &target, options)?,
    };
    let needs_runtime = options.parallel || calls_runtime(program);
    let info = header::HeaderInfo {
        symbol: &options.symbol,
        source: &options.source,
        object_name: &options.object_name,
        tier,
        triple: &target.triple,
        cpu: &target.cpu,
        needs_runtime,
        parallel: options.parallel,
    };
    let header = header::header(program, &plan, &info);
    Ok(AotArtifacts {
        object,
        header,
        triple: target.triple.clone(),
        cpu: target.cpu.clone(),
        needs_runtime,
        compile_time: start.elapsed(),
    })
}

/// Whether any kernel calls a `tessera_rt_*` function.
fn calls_runtime(program: &Program) -> bool {
    fn any(body: &[Stmt]) -> bool {
        body.iter().any(|s| match s {
            Stmt::Call { func, .. } => func.starts_with("tessera_rt_"),
            Stmt::Loop(l) => any(&l.body),
            Stmt::If { then_body, else_body, .. } => any(then_body) || any(else_body),
            _ => false,
        })
    }
    program.kernels.iter().any(|k| any(&k.body))
}
