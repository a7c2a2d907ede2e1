//! The HLO-to-HLO passes, one per file, and the standard pipeline that runs them before the
//! kernel lowering.

mod algebraic_simplifier;
mod batch_norm_expand;
mod bf16_normalization;
mod call_inline;
mod constant_folding;
mod control_flow_simplifier;
mod conv_normalization;
pub(crate) mod cse;
mod dce;
mod divide_by_constant;
mod dot_layout;
pub(crate) mod fusion;
mod layout_assignment;
mod layout_normalize;
mod multi_output_fusion;
mod narrow_reduce_fusions;
mod opt_barrier_expander;
mod reassociate_constants;
mod reduction_dimension_grouper;
mod rewrite;
mod simplify;
mod single_device_collectives;
mod static_bounds;
mod tree_reduction;
mod tuple_simplify;
mod unwrap;
mod while_dead_state;
mod while_invariant_motion;
mod while_loop_state;

pub use algebraic_simplifier::AlgebraicSimplifier;
pub use batch_norm_expand::BatchNormExpand;
pub use bf16_normalization::Bf16Normalization;
pub use call_inline::CallInline;
pub use constant_folding::ConstantFolding;
pub use control_flow_simplifier::ControlFlowSimplifier;
pub use conv_normalization::ConvNormalization;
pub use cse::Cse;
pub use dce::Dce;
pub use divide_by_constant::DivideByConstant;
pub use dot_layout::DotLayout;
pub use fusion::{Fusion, FusionDecision};
pub use layout_assignment::LayoutAssignment;
pub use layout_normalize::LayoutNormalize;
pub use multi_output_fusion::MultiOutputFusion;
pub use narrow_reduce_fusions::NarrowReduceFusions;
pub use opt_barrier_expander::OptBarrierExpander;
pub use reassociate_constants::ReassociateConstants;
pub use reduction_dimension_grouper::ReductionDimensionGrouper;
pub use simplify::Simplify;
pub use single_device_collectives::SingleDeviceCollectives;
pub use static_bounds::StaticBounds;
pub use tree_reduction::TreeReduction;
pub use tuple_simplify::TupleSimplify;
pub use unwrap::Unwrap;
pub use while_dead_state::WhileDeadState;
pub use while_invariant_motion::WhileInvariantMotion;

use crate::pass::Pass;
use crate::pipeline::Pipeline;

/// Every pass by its name (what filetests and the `passes` directive list).
pub fn by_name(name: &str) -> Option<Box<dyn Pass>> {
    Some(match name {
        "algebraic_simplifier" => Box::new(AlgebraicSimplifier::default()),
        "constant_folding" => Box::new(ConstantFolding::default()),
        "control_flow_simplifier" => Box::new(ControlFlowSimplifier::default()),
        "cse" => Box::new(Cse::default()),
        "simplify" => Box::new(Simplify::default()),
        "batch_norm_expand" => Box::new(BatchNormExpand),
        "bf16_normalization" => Box::new(Bf16Normalization),
        "conv_normalization" => Box::new(ConvNormalization),
        "call_inline" => Box::new(CallInline),
        "tuple_simplify" => Box::new(TupleSimplify),
        "dce" => Box::new(Dce),
        "divide_by_constant" => Box::new(DivideByConstant::default()),
        "dot_layout" => Box::new(DotLayout::default()),
        "layout_assignment" => Box::new(LayoutAssignment::default()),
        "layout_normalize" => Box::new(LayoutNormalize),
        "fusion" => Box::new(Fusion::default()),
        "multi_output_fusion" => Box::new(MultiOutputFusion::default()),
        "narrow_reduce_fusions" => Box::new(NarrowReduceFusions::default()),
        "opt_barrier_expander" => Box::new(OptBarrierExpander::default()),
        "reassociate_constants" => Box::new(ReassociateConstants::default()),
        "reduction_dimension_grouper" => Box::new(ReductionDimensionGrouper::default()),
        "unwrap" => Box::new(Unwrap),
        "single_device_collectives" => Box::new(SingleDeviceCollectives),
        "static_bounds" => Box::new(StaticBounds),
        "tree_reduction" => Box::new(TreeReduction::default()),
        "while_dead_state" => Box::new(WhileDeadState::default()),
        "while_invariant_motion" => Box::new(WhileInvariantMotion::default()),
        _ => return None,
    })
}

/// The passes `lower_module` runs: calls are inlined and tuples forwarded first so that
/// fusion sees plain dataflow; layouts are settled before fusion so fused parameters carry
/// the physical layouts of the buffers they read; sibling loop kernels and column reductions
/// merge after fusion decided them, and a reduce fusion whose users read one of its outputs
/// computes that one alone; the final DCE drops what fusion inlined.
/// Wrappers and one-device collectives become ordinary ops before the calls they leave are
/// inlined; bounded dynamic dimensions become static at their bounds before anything else.
/// Large full reductions split in two stages once layouts are known (the split needs the
/// row-major order) and before fusion, which fuses the first stage's reshape into it; then
/// adjacent reduced dimensions merge into one (after the column split, which blocks by them).
/// bf16 excess precision follows call inlining, as in XLA:CPU, so an op and its converts in
/// different computations are treated as one computation would be; it precedes the
/// simplifiers so that the interpreter, which runs it too, still checks their rewrites. So
/// does XLA's division by a constant as a multiply by its reciprocal, which changes values
/// as it does on XLA:CPU (`divide_by_constant`), and XLA's folding of the constants of an
/// add or multiply chain (`reassociate_constants`), and XLA:CPU's f32 computation of half-precision
/// convolutions (`conv_normalization`, after the excess precision that may widen their
/// results). Batch norms expand after them, so their means
/// and variances divide by the element count: the interpreter evaluates batch norm in f64,
/// and the reciprocal's extra rounding of the mean, amplified by the cancellation in
/// `sum(dy * (x - mean))`, took a batch-norm gradient 1.6e-4 (relative) from it.
/// Intermediate layouts are chosen before the simplifiers, whose layout-preserving rules
/// (a transpose of a dot, a copy that changes nothing) then see the chosen ones.
/// Opt-barriers go after the simplifiers (whose CSE they fence) and before fusion, as in
/// XLA:CPU; the tuples they passed on are then forwarded, and dropped.
/// It re-verifies the module after every pass, as tests want.
pub fn standard_pipeline(fusion: bool, excess_precision: bool) -> Pipeline {
    standard_pipeline_verifying(fusion, excess_precision, true)
}

/// [`standard_pipeline`], re-verifying after every pass (`verify_each`) or once at the end.
pub fn standard_pipeline_verifying(fusion: bool, excess_precision: bool, verify_each: bool) -> Pipeline {
    let mut p = Pipeline::new();
    p.verify_each(verify_each);
    p.add(StaticBounds).add(Unwrap).add(SingleDeviceCollectives);
    p.add(CallInline);
    if excess_precision {
        p.add(Bf16Normalization);
    }
    p.add(ConvNormalization);
    p.add(DivideByConstant::default()).add(ReassociateConstants::default()).add(BatchNormExpand);
    p.add(LayoutAssignment::default())
        .add(Simplify::new(verify_each))
        .add(OptBarrierExpander::default())
        .add(TupleSimplify)
        .add(Dce)
        .add(LayoutNormalize)
        .add(DotLayout::default())
        .add(TreeReduction::default())
        .add(ReductionDimensionGrouper::default());
    if fusion {
        p.add(Fusion::default()).add(MultiOutputFusion::default()).add(NarrowReduceFusions::default()).add(Dce);
    }
    p
}

/// What the interpreter runs before evaluating a module so that it computes what the
/// compiled tiers do under the same option: the passes of [`standard_pipeline`] that change
/// values (the others only restate the module for the kernel lowering), after the call
/// inlining that precedes them there, so that they meet the same instructions.
pub fn numerics_pipeline(excess_precision: bool) -> Pipeline {
    let mut p = Pipeline::new();
    p.add(CallInline);
    if excess_precision {
        p.add(Bf16Normalization);
    }
    p.add(ConvNormalization);
    p.add(DivideByConstant::default()).add(ReassociateConstants::default()).add(Dce);
    p
}
