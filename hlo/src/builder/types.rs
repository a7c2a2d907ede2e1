//! The argument types of the builder's ops and the helpers they share.

use super::{OpResult, Spec};
use crate::element_type::ElementType;
use crate::ir::{AttrValue, Window, WindowDim};
use crate::shape::ArrayShape;

pub use crate::ir::{
    ComparisonDirection, ComparisonType, ConvDimensionNumbers, FftType, RandomDistribution, TriangularTranspose,
};

/// The comparison type a comparison of `ty` gets when none is given; XLA prints `type=` only
/// for others.
pub(super) fn default_comparison_type(ty: ElementType) -> ComparisonType {
    if ty.is_floating_or_complex() {
        ComparisonType::Float
    } else if ty.is_signed_integral() {
        ComparisonType::Signed
    } else {
        ComparisonType::Unsigned
    }
}

/// Per-operand precision of a dot or convolution (`operand_precision={..}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    #[default]
    Default,
    High,
    Highest,
}

impl Precision {
    fn name(self) -> &'static str {
        match self {
            Precision::Default => "default",
            Precision::High => "high",
            Precision::Highest => "highest",
        }
    }
}

/// The dimension numbers of `dot_general`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DotDimensionNumbers {
    pub lhs_batch_dims: Vec<i64>,
    pub rhs_batch_dims: Vec<i64>,
    pub lhs_contracting_dims: Vec<i64>,
    pub rhs_contracting_dims: Vec<i64>,
}

/// Window padding chosen by name, as XLA's `Padding::kSame`/`kValid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Padding {
    /// No padding: only windows that fit entirely.
    Valid,
    /// Pads so that the output has `ceil(input / stride)` elements, the extra half (rounded
    /// down) at the low end.
    Same,
}

impl Padding {
    /// (low, high) padding per dimension for windows of `window` elements moving by
    /// `strides` over `input` (XLA's `MakePadding`).
    pub fn low_high(self, input: &[i64], window: &[i64], strides: &[i64]) -> Vec<(i64, i64)> {
        match self {
            Padding::Valid => vec![(0, 0); input.len()],
            Padding::Same => input
                .iter()
                .zip(window)
                .zip(strides)
                .map(|((&n, &w), &s)| {
                    // Saturating: a dynamic (negative) size must not overflow.
                    let s = s.max(1);
                    let out = n.saturating_add(s - 1) / s;
                    let total = out.saturating_sub(1).saturating_mul(s).saturating_add(w).saturating_sub(n).max(0);
                    (total / 2, total - total / 2)
                })
                .collect(),
        }
    }
}

/// The dimension numbers of `gather`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GatherDimensionNumbers {
    pub offset_dims: Vec<i64>,
    pub collapsed_slice_dims: Vec<i64>,
    pub start_index_map: Vec<i64>,
    pub operand_batching_dims: Vec<i64>,
    pub start_indices_batching_dims: Vec<i64>,
    pub index_vector_dim: i64,
}

/// The dimension numbers of `scatter`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScatterDimensionNumbers {
    pub update_window_dims: Vec<i64>,
    pub inserted_window_dims: Vec<i64>,
    pub scatter_dims_to_operand_dims: Vec<i64>,
    pub input_batching_dims: Vec<i64>,
    pub scatter_indices_batching_dims: Vec<i64>,
    pub index_vector_dim: i64,
}

/// Everything a general convolution takes besides its operands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvOptions {
    /// One per spatial dimension; empty means all 1.
    pub window_strides: Vec<i64>,
    /// (low, high) per spatial dimension; empty means none.
    pub padding: Vec<(i64, i64)>,
    /// Base (input) dilation per spatial dimension; empty means all 1.
    pub lhs_dilation: Vec<i64>,
    /// Window (kernel) dilation per spatial dimension; empty means all 1.
    pub rhs_dilation: Vec<i64>,
    /// `None`: XLA's default, batch and feature first then the spatial dimensions, for the
    /// input, kernel (`o`, `i`, spatial) and output alike.
    pub dimension_numbers: Option<ConvDimensionNumbers>,
    /// 0 or 1 mean none.
    pub feature_group_count: i64,
    /// 0 or 1 mean none.
    pub batch_group_count: i64,
    pub precision: Option<[Precision; 2]>,
    pub preferred_element_type: Option<ElementType>,
}

/// XLA's default convolution dimension numbers for `spatial` spatial dimensions:
/// `bf01.._oi01..->bf01..`.
pub fn default_conv_dimension_numbers(spatial: usize) -> ConvDimensionNumbers {
    let spatial: Vec<i64> = (2..2 + spatial as i64).collect();
    ConvDimensionNumbers {
        input_batch: 0,
        input_feature: 1,
        input_spatial: spatial.clone(),
        kernel_output_feature: 0,
        kernel_input_feature: 1,
        kernel_spatial: spatial.clone(),
        output_batch: 0,
        output_feature: 1,
        output_spatial: spatial,
    }
}

pub(super) fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

pub(super) fn enum_attr(s: &str) -> AttrValue {
    AttrValue::Enum(s.to_string())
}

pub(super) fn precision_attr(spec: Spec, precision: Option<[Precision; 2]>) -> Spec {
    match precision {
        Some(p) if p.iter().any(|&p| p != Precision::Default) => {
            spec.attr("operand_precision", AttrValue::Enums(p.iter().map(|p| p.name().to_string()).collect()))
        }
        _ => spec,
    }
}

/// Dimensions `0..n` as `i64`s.
pub(super) fn iota_dims(n: usize) -> Vec<i64> {
    (0..n as i64).collect()
}

/// Validates a list of dimension numbers against a rank: each in range, none twice.
pub(super) fn check_dims(dims: &[i64], rank: usize, what: &str) -> OpResult<()> {
    let mut seen = vec![false; rank];
    for &d in dims {
        let slot = usize::try_from(d).ok().and_then(|d| seen.get_mut(d));
        match slot {
            None => return Err(format!("{what} {d} is out of range for rank {rank}")),
            Some(s) if *s => return Err(format!("{what} {d} appears twice")),
            Some(s) => *s = true,
        }
    }
    Ok(())
}

/// The sizes of the spatial dimensions `dims` of `shape`.
pub(super) fn spatial_sizes(shape: &ArrayShape, dims: &[i64], what: &str) -> OpResult<Vec<i64>> {
    dims.iter()
        .map(|&d| {
            usize::try_from(d)
                .ok()
                .and_then(|d| shape.dims.get(d).copied())
                .ok_or_else(|| format!("{what} spatial dimension {d} is out of range for rank {}", shape.rank()))
        })
        .collect()
}

/// A window from per-dimension lists; missing entries take the defaults (stride and
/// dilations 1, no padding).
pub(super) fn make_window(
    sizes: &[i64],
    strides: &[i64],
    padding: &[(i64, i64)],
    base_dilations: &[i64],
    window_dilations: &[i64],
) -> Window {
    let dims = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let (padding_low, padding_high) = padding.get(i).copied().unwrap_or((0, 0));
            WindowDim {
                size,
                stride: strides.get(i).copied().unwrap_or(1),
                padding_low,
                padding_high,
                window_dilation: window_dilations.get(i).copied().unwrap_or(1),
                base_dilation: base_dilations.get(i).copied().unwrap_or(1),
                window_reversal: false,
            }
        })
        .collect();
    Window { dims }
}
