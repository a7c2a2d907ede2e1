//! HLO-to-HLO passes (simplification to a fixed point, bf16 normalization, layout assignment
//! and normalization, fusion), the pass pipeline, buffer assignment, and the kernel IR: loop
//! nests over physical buffers whose index arithmetic is specialized to the buffers' layouts.

pub mod buffer_assign;
mod build_program;
pub mod emit;
pub mod error;
pub mod kernel;
mod kernel_memo;
pub mod pass;
pub mod passes;
pub mod pipeline;
pub mod program;
mod program_text;
pub mod timings;

pub use buffer_assign::{assign_buffers, CapacityError};
pub use emit::emit_kernel;
pub use error::LowerError;
pub use pass::Pass;
pub use pipeline::Pipeline;
pub use program::{walk_steps, Buffer, BufferId, BufferKind, HostOp, HostValue, Launch, Program, SelectorKind, Step};
pub use timings::Timings;

use std::path::PathBuf;

use tessera_hlo::Module;

/// How [`lower_module`] lowers.
#[derive(Clone, Debug)]
pub struct LowerOptions {
    /// Run fusion (off: one kernel per computing instruction, which is slower but makes
    /// each op's kernel easy to inspect).
    pub fusion: bool,
    /// Write the module after every pass into this folder (see [`Pipeline::dump_to`]), with
    /// the fusion decisions and their reasons (`fusion.txt`).
    pub dump_dir: Option<PathBuf>,
    /// Seeds the generator the `rng` op draws from (the default matches
    /// `tessera_hlo::eval::EvalOptions`, so compiled code and the interpreter draw alike).
    pub rng_seed: u64,
    /// bf16 as XLA:CPU computes it by default (`xla_allow_excess_precision`): an explicit
    /// f32 convert of a bf16 op reads the op's unrounded f32 result
    /// ([`passes::Bf16Normalization`]). Off: every bf16 op rounds its result.
    pub excess_precision: bool,
    /// Re-verify the module after every pass that changed it, naming a pass that breaks it
    /// (a debugging aid: it costs a verification per pass). Off, the module is verified once
    /// after the pipeline. Default: [`pipeline::verify_each_by_default`].
    pub verify_passes: bool,
    /// The math sequences (exp, tanh, ...) fuse products into sums ([`kernel::Op::Fma`]): for
    /// targets with fused multiply-add instructions, where it saves operations. The facade sets
    /// it from the target it compiles for. Off (the default), kernels hold no `Fma`.
    pub fma: bool,
}

impl Default for LowerOptions {
    /// Fusion on; dumps when `TESSERA_DUMP_PASSES` names a folder.
    fn default() -> LowerOptions {
        LowerOptions {
            fusion: true,
            dump_dir: std::env::var_os("TESSERA_DUMP_PASSES").map(PathBuf::from),
            rng_seed: tessera_hlo::eval::EvalOptions::default().rng_seed,
            excess_precision: true,
            verify_passes: pipeline::verify_each_by_default(),
            fma: false,
        }
    }
}

/// Custom-call targets the lowering implements itself (as kernels); every other target is a
/// host operation calling a function the host registers.
pub const NATIVE_CUSTOM_CALLS: &[&str] = &["TopK"];

/// Whether Tessera implements custom-calls to `target` itself: as kernels
/// ([`NATIVE_CUSTOM_CALLS`]) or, for sharding annotations, as the identity they are on one
/// device (the `unwrap` pass). No host function is needed or accepted for them.
pub fn implemented_custom_call(target: &str) -> bool {
    NATIVE_CUSTOM_CALLS.contains(&target) || tessera_hlo::ir::SHARDING_ANNOTATIONS.contains(&target)
}

/// Lowers a module to a [`Program`]: verifies it, runs the standard pass pipeline on a copy,
/// then makes one kernel per fusion or remaining instruction, with while loops and
/// conditionals as nested steps (see `build_program` for buffers, aliasing and results).
/// Buffer assignment (arenas, offsets) is left to the caller.
pub fn lower_module(module: &Module, options: &LowerOptions) -> Result<Program, LowerError> {
    lower_module_timed(module, options).map(|(program, _)| program)
}

/// [`lower_module`], saying where its time went: verification, each pass, and the kernels'
/// lowering (`lower kernels`).
pub fn lower_module_timed(module: &Module, options: &LowerOptions) -> Result<(Program, Timings), LowerError> {
    let mut timings = Timings::new();
    timings.time("verify", || tessera_hlo::verify::verify(module))?;
    let (program, lowering) = lower_verified_module_timed(module, options)?;
    timings.extend(&lowering);
    Ok((program, timings))
}

/// [`lower_module_timed`] of a module the caller has just verified (the facade verifies
/// every module it compiles, whatever the backend), which is not verified again: on a large
/// module a verification costs as much as several passes.
pub fn lower_verified_module_timed(module: &Module, options: &LowerOptions) -> Result<(Program, Timings), LowerError> {
    let mut timings = Timings::new();
    let mut module = module.clone();
    let mut pipeline =
        passes::standard_pipeline_verifying(options.fusion, options.excess_precision, options.verify_passes);
    pipeline.dump_to(options.dump_dir.clone());
    pipeline.run(&mut module)?;
    timings.extend(pipeline.timings());
    if let Some(dir) = &options.dump_dir {
        let fusion: Vec<String> =
            pipeline.reports().into_iter().filter(|(name, _)| *name == "fusion").flat_map(|(_, lines)| lines).collect();
        write_dump(dir, "fusion.txt", &(fusion.join("\n") + "\n"));
    }
    let program =
        timings.time("lower kernels", || build_program::build_program(&module, options.rng_seed, options.fma))?;
    Ok((program, timings))
}

/// Writes `program` (its buffers with their arena offsets once assigned, kernels in kernel IR,
/// and the step tree) to `dir/program.txt`.
pub fn dump_program(program: &Program, dir: &std::path::Path) {
    write_dump(dir, "program.txt", &program.to_string());
}

/// Dumps are a debugging aid: one that cannot be written is reported, never fatal.
fn write_dump(dir: &std::path::Path, file: &str, text: &str) {
    let path = dir.join(file);
    if let Err(e) = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, text)) {
        eprintln!("tessera: dump {}: {e}", path.display());
    }
}
