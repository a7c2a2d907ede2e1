//! Linear algebra: dot, dot_general, convolution, fft, cholesky, triangular solve, batch
//! normalization and top-k.

use super::types::*;
use super::{Builder, OpResult, Spec, XlaOp};
use crate::element_type::ElementType;
use crate::ir::{AttrValue, Opcode};
use crate::shape::Shape;

impl Builder {
    // ---- Linear algebra -------------------------------------------------------------------

    /// Seed 003's `Dot`, like `numpy.dot`: scalars multiply; otherwise the last dimension of
    /// `lhs` is contracted with the only dimension of a vector `rhs`, or with the
    /// second-to-last of a higher-rank one (so `[m,k]·[k,n] -> [m,n]`,
    /// `[p,q,r]·[s,r,t] -> [p,q,s,t]`).
    pub fn dot<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>) -> XlaOp<'b> {
        self.op("dot", || {
            let (l, r) = (self.array(lhs, "lhs")?, self.array(rhs, "rhs")?);
            if l.rank() == 0 || r.rank() == 0 {
                let (lhs, rhs) = self.broadcast_operands(lhs, rhs, &[])?;
                return self.emit(Spec::new(Opcode::Multiply), &[lhs, rhs]);
            }
            let dnums = DotDimensionNumbers {
                lhs_contracting_dims: vec![l.rank() as i64 - 1],
                rhs_contracting_dims: vec![if r.rank() == 1 { 0 } else { r.rank() as i64 - 2 }],
                ..DotDimensionNumbers::default()
            };
            self.dot_general_inner(lhs, rhs, &dnums, None, None)
        })
    }

    /// `dot` with explicit batch and contracting dimensions. The result has the batch
    /// dimensions, then the free dimensions of `lhs`, then those of `rhs`.
    pub fn dot_general<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>, dnums: &DotDimensionNumbers) -> XlaOp<'b> {
        self.dot_general_with(lhs, rhs, dnums, None, None)
    }

    /// [`Builder::dot_general`] with operand precisions and a result element type other than
    /// the operands' (mixed precision).
    pub fn dot_general_with<'b>(
        &'b self,
        lhs: XlaOp<'b>,
        rhs: XlaOp<'b>,
        dnums: &DotDimensionNumbers,
        precision: Option<[Precision; 2]>,
        preferred_element_type: Option<ElementType>,
    ) -> XlaOp<'b> {
        self.op("dot", || self.dot_general_inner(lhs, rhs, dnums, precision, preferred_element_type))
    }

    pub(super) fn dot_general_inner<'b>(
        &'b self,
        lhs: XlaOp<'b>,
        rhs: XlaOp<'b>,
        dnums: &DotDimensionNumbers,
        precision: Option<[Precision; 2]>,
        preferred: Option<ElementType>,
    ) -> OpResult<XlaOp<'b>> {
        let mut spec = Spec::new(Opcode::Dot);
        if !dnums.lhs_batch_dims.is_empty() {
            spec = spec.attr("lhs_batch_dims", ints(&dnums.lhs_batch_dims));
        }
        spec = spec.attr("lhs_contracting_dims", ints(&dnums.lhs_contracting_dims));
        if !dnums.rhs_batch_dims.is_empty() {
            spec = spec.attr("rhs_batch_dims", ints(&dnums.rhs_batch_dims));
        }
        spec = spec.attr("rhs_contracting_dims", ints(&dnums.rhs_contracting_dims));
        spec = precision_attr(spec, precision);
        self.emit_with_preferred_type(spec, &[lhs, rhs], preferred)
    }

    /// Emits an op whose result type may be chosen (dot, convolution): the dimensions come
    /// from the shape inference, the element type from the caller.
    fn emit_with_preferred_type<'b>(
        &'b self,
        mut spec: Spec,
        operands: &[XlaOp<'b>],
        preferred: Option<ElementType>,
    ) -> OpResult<XlaOp<'b>> {
        let Some(ty) = preferred else {
            return self.emit(spec, operands);
        };
        let mut shape = self.infer(&spec, operands)?;
        if let Shape::Array(a) = &mut shape {
            a.element_type = ty;
        }
        spec.declared = shape;
        self.emit(spec, operands)
    }

    /// A convolution with XLA's default dimension numbers (`bf01_oi01->bf01`), unit
    /// dilations and padding chosen by name.
    pub fn conv<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>, window_strides: &[i64], padding: Padding) -> XlaOp<'b> {
        self.conv_with_general_dimensions(lhs, rhs, window_strides, padding, None)
    }

    /// A convolution with explicit (low, high) padding per spatial dimension.
    pub fn conv_with_general_padding<'b>(
        &'b self,
        lhs: XlaOp<'b>,
        rhs: XlaOp<'b>,
        window_strides: &[i64],
        padding: &[(i64, i64)],
    ) -> XlaOp<'b> {
        let options = ConvOptions {
            window_strides: window_strides.to_vec(),
            padding: padding.to_vec(),
            ..ConvOptions::default()
        };
        self.conv_general_dilated(lhs, rhs, &options)
    }

    /// A convolution with explicit dimension numbers (`None`: the default) and padding chosen
    /// by name.
    pub fn conv_with_general_dimensions<'b>(
        &'b self,
        lhs: XlaOp<'b>,
        rhs: XlaOp<'b>,
        window_strides: &[i64],
        padding: Padding,
        dimension_numbers: Option<ConvDimensionNumbers>,
    ) -> XlaOp<'b> {
        self.op("convolution", || {
            let (l, r) = (self.array(lhs, "lhs")?, self.array(rhs, "rhs")?);
            let dnums = dimension_numbers.unwrap_or_else(|| default_conv_dimension_numbers(l.rank().saturating_sub(2)));
            let input = spatial_sizes(&l, &dnums.input_spatial, "input")?;
            let window = spatial_sizes(&r, &dnums.kernel_spatial, "kernel")?;
            let strides = if window_strides.is_empty() { vec![1; window.len()] } else { window_strides.to_vec() };
            let options = ConvOptions {
                padding: padding.low_high(&input, &window, &strides),
                window_strides: strides,
                dimension_numbers: Some(dnums),
                ..ConvOptions::default()
            };
            self.conv_inner(lhs, rhs, &options)
        })
    }

    /// The general convolution: strides, padding, base and window dilation, dimension
    /// numbers, feature and batch groups, precision and result type.
    pub fn conv_general_dilated<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>, options: &ConvOptions) -> XlaOp<'b> {
        self.op("convolution", || self.conv_inner(lhs, rhs, options))
    }

    fn conv_inner<'b>(&'b self, lhs: XlaOp<'b>, rhs: XlaOp<'b>, o: &ConvOptions) -> OpResult<XlaOp<'b>> {
        let (l, r) = (self.array(lhs, "lhs")?, self.array(rhs, "rhs")?);
        let dnums =
            o.dimension_numbers.clone().unwrap_or_else(|| default_conv_dimension_numbers(l.rank().saturating_sub(2)));
        let sizes = spatial_sizes(&r, &dnums.kernel_spatial, "kernel")?;
        let n = sizes.len();
        let per_dim = |v: &[i64], what: &str, default: i64| -> OpResult<Vec<i64>> {
            match v.len() {
                0 => Ok(vec![default; n]),
                len if len == n => Ok(v.to_vec()),
                len => Err(format!("{len} {what} for {n} spatial dimensions")),
            }
        };
        let strides = per_dim(&o.window_strides, "window strides", 1)?;
        let lhs_dilation = per_dim(&o.lhs_dilation, "lhs dilations", 1)?;
        let rhs_dilation = per_dim(&o.rhs_dilation, "rhs dilations", 1)?;
        let padding = match o.padding.len() {
            0 => vec![(0, 0); n],
            len if len == n => o.padding.clone(),
            len => return Err(format!("{len} paddings for {n} spatial dimensions")),
        };
        let window = make_window(&sizes, &strides, &padding, &lhs_dilation, &rhs_dilation);
        let mut spec = Spec::new(Opcode::Convolution)
            .attr("window", AttrValue::Window(window))
            .attr("dim_labels", AttrValue::ConvDims(dnums));
        if o.feature_group_count > 1 {
            spec = spec.attr("feature_group_count", AttrValue::Int(o.feature_group_count));
        }
        if o.batch_group_count > 1 {
            spec = spec.attr("batch_group_count", AttrValue::Int(o.batch_group_count));
        }
        spec = precision_attr(spec, o.precision);
        self.emit_with_preferred_type(spec, &[lhs, rhs], o.preferred_element_type)
    }

    /// A Fourier transform over the last `fft_length.len()` dimensions.
    pub fn fft<'b>(&'b self, operand: XlaOp<'b>, fft_type: FftType, fft_length: &[i64]) -> XlaOp<'b> {
        self.op("fft", || {
            let spec = Spec::new(Opcode::Fft)
                .attr("fft_type", enum_attr(fft_type.name()))
                .attr("fft_length", ints(fft_length));
            self.emit(spec, &[operand])
        })
    }

    /// The Cholesky factor of (a batch of) symmetric positive-definite matrices: lower
    /// (`a = l·lᵀ`) or upper triangular.
    pub fn cholesky<'b>(&'b self, a: XlaOp<'b>, lower: bool) -> XlaOp<'b> {
        self.op("cholesky", || self.emit(Spec::new(Opcode::Cholesky).attr("lower", AttrValue::Bool(lower)), &[a]))
    }

    /// Solves `op(a)·x = b` (`left_side`) or `x·op(a) = b` for a triangular `a`.
    pub fn triangular_solve<'b>(
        &'b self,
        a: XlaOp<'b>,
        b: XlaOp<'b>,
        left_side: bool,
        lower: bool,
        unit_diagonal: bool,
        transpose_a: TriangularTranspose,
    ) -> XlaOp<'b> {
        self.op("triangular-solve", || {
            let spec = Spec::new(Opcode::TriangularSolve)
                .attr("left_side", AttrValue::Bool(left_side))
                .attr("lower", AttrValue::Bool(lower))
                .attr("unit_diagonal", AttrValue::Bool(unit_diagonal))
                .attr("transpose_a", enum_attr(transpose_a.name()));
            self.emit(spec, &[a, b])
        })
    }

    fn batch_norm_spec(opcode: Opcode, epsilon: f32, feature_index: i64) -> Spec {
        Spec::new(opcode)
            .attr("epsilon", AttrValue::Float(f64::from(epsilon)))
            .attr("feature_index", AttrValue::Int(feature_index))
    }

    /// Normalizes over all dimensions but `feature_index`; the result is the tuple
    /// (normalized, batch mean, batch variance).
    pub fn batch_norm_training<'b>(
        &'b self,
        operand: XlaOp<'b>,
        scale: XlaOp<'b>,
        offset: XlaOp<'b>,
        epsilon: f32,
        feature_index: i64,
    ) -> XlaOp<'b> {
        self.op("batch-norm-training", || {
            self.emit(
                Self::batch_norm_spec(Opcode::BatchNormTraining, epsilon, feature_index),
                &[operand, scale, offset],
            )
        })
    }

    /// Normalizes with a given mean and variance.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_inference<'b>(
        &'b self,
        operand: XlaOp<'b>,
        scale: XlaOp<'b>,
        offset: XlaOp<'b>,
        mean: XlaOp<'b>,
        variance: XlaOp<'b>,
        epsilon: f32,
        feature_index: i64,
    ) -> XlaOp<'b> {
        self.op("batch-norm-inference", || {
            let spec = Self::batch_norm_spec(Opcode::BatchNormInference, epsilon, feature_index);
            self.emit(spec, &[operand, scale, offset, mean, variance])
        })
    }

    /// Gradients of batch normalization: the tuple (grad operand, grad scale, grad offset).
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_grad<'b>(
        &'b self,
        operand: XlaOp<'b>,
        scale: XlaOp<'b>,
        mean: XlaOp<'b>,
        variance: XlaOp<'b>,
        grad_output: XlaOp<'b>,
        epsilon: f32,
        feature_index: i64,
    ) -> XlaOp<'b> {
        self.op("batch-norm-grad", || {
            let spec = Self::batch_norm_spec(Opcode::BatchNormGrad, epsilon, feature_index);
            self.emit(spec, &[operand, scale, mean, variance, grad_output])
        })
    }

    /// The `k` largest (or smallest) elements along the last dimension and their indices, as
    /// a tuple (values, s32 indices).
    pub fn top_k<'b>(&'b self, operand: XlaOp<'b>, k: i64, largest: bool) -> XlaOp<'b> {
        self.op("topk", || {
            let spec = Spec::new(Opcode::TopK).attr("k", AttrValue::Int(k)).attr("largest", AttrValue::Bool(largest));
            self.emit(spec, &[operand])
        })
    }
}
