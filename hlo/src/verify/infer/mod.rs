//! Shape inference, one file per op family. Every rule that can fail has a stable id; the
//! helpers here keep the arithmetic checked and the indexing total, because the inputs are
//! whatever a parser or a builder produced.

/// Returns a [`ShapeError`] from the enclosing function.
macro_rules! bail {
    ($rule:expr, $($arg:tt)*) => {
        return Err($crate::verify::ShapeError::new($rule, format!($($arg)*)))
    };
}

mod control_flow;
mod data_movement;
mod dot_conv;
mod elementwise;
mod gather_scatter;
mod other;
mod reduce;

use super::ShapeError;
use crate::element_type::ElementType;
use crate::ir::{AttrList, AttrValue, CompId, Instruction, Opcode, ProgramShape, Window};
use crate::shape::{ArrayShape, Shape, UNBOUNDED};

pub(crate) type Res<T> = Result<T, ShapeError>;

/// The result shape XLA's shape inference gives `inst` (without layouts), from its opcode,
/// attributes and payload, the shapes of its operands in order, and the signatures of the
/// computations it calls. `inst.shape` is the declared shape: ops whose result is not
/// determined by their operands (parameter, constant, reshape and broadcast dimensions,
/// convert's target type, custom-call, ...) take it from there after checking what can be
/// checked.
pub fn infer_shape(
    inst: &Instruction,
    operands: &[&Shape],
    called: &dyn Fn(CompId) -> Option<ProgramShape>,
) -> Result<Shape, ShapeError> {
    // Every rule below may assume sizes are non-negative (or `?`), so malformed shapes stop
    // here, whether declared or coming from operands.
    well_formed(&inst.shape, "the declared shape")?;
    for (i, op) in operands.iter().enumerate() {
        well_formed(op, &format!("operand {i}"))?;
    }
    let cx = Ctx { inst, ops: operands, called };
    use Opcode::*;
    match inst.opcode {
        Abs | Cbrt | Ceil | Clz | Cos | Erf | Exp | Expm1 | Floor | Imag | IsFinite | Log | Log1p | Logistic
        | Negate | Not | PopulationCount | Real | RoundNearestAfz | RoundNearestEven | Rsqrt | Sign | Sin | Sqrt
        | Tan | Tanh => elementwise::unary(&cx),
        Copy => elementwise::copy(&cx),
        ReducePrecision => elementwise::reduce_precision(&cx),
        Convert => elementwise::convert(&cx),
        BitcastConvert => elementwise::bitcast_convert(&cx),
        StochasticConvert => elementwise::stochastic_convert(&cx),
        Add | And | Atan2 | Complex | Divide | Maximum | Minimum | Multiply | Or | Power | Remainder | ShiftLeft
        | ShiftRightArithmetic | ShiftRightLogical | Subtract | Xor => elementwise::binary(&cx),
        Compare => elementwise::compare(&cx),
        Select => elementwise::select(&cx),
        Clamp => elementwise::clamp(&cx),
        Map => elementwise::map(&cx),

        Broadcast => data_movement::broadcast(&cx),
        Reshape => data_movement::reshape(&cx),
        DynamicReshape => data_movement::dynamic_reshape(&cx),
        Bitcast => data_movement::bitcast(&cx),
        Transpose => data_movement::transpose(&cx),
        Slice => data_movement::slice(&cx),
        DynamicSlice => data_movement::dynamic_slice(&cx),
        DynamicUpdateSlice => data_movement::dynamic_update_slice(&cx),
        Concatenate => data_movement::concatenate(&cx),
        Pad => data_movement::pad(&cx),
        Reverse => data_movement::reverse(&cx),
        Iota => data_movement::iota(&cx),
        GetTupleElement => data_movement::get_tuple_element(&cx),
        Tuple => data_movement::tuple(&cx),
        GetDimensionSize => data_movement::get_dimension_size(&cx),
        SetDimensionSize => data_movement::set_dimension_size(&cx),

        Dot => dot_conv::dot(&cx),
        RaggedDot => dot_conv::ragged_dot(&cx),
        ScaledDot => dot_conv::scaled_dot(&cx),
        Convolution => dot_conv::convolution(&cx),
        Fft => dot_conv::fft(&cx),
        Cholesky => dot_conv::cholesky(&cx),
        TriangularSolve => dot_conv::triangular_solve(&cx),

        Reduce => reduce::reduce(&cx),
        ReduceWindow => reduce::reduce_window(&cx),
        SelectAndScatter => reduce::select_and_scatter(&cx),
        Sort => reduce::sort(&cx),
        TopK => reduce::topk(&cx),
        BatchNormTraining => reduce::batch_norm_training(&cx),
        BatchNormInference => reduce::batch_norm_inference(&cx),
        BatchNormGrad => reduce::batch_norm_grad(&cx),

        Gather => gather_scatter::gather(&cx),
        Scatter => gather_scatter::scatter(&cx),

        While => control_flow::while_loop(&cx),
        Conditional => control_flow::conditional(&cx),
        Scan => control_flow::scan(&cx),
        Call => control_flow::call(&cx, "to_apply"),
        Fusion => control_flow::call(&cx, "calls"),
        AsyncStart => control_flow::async_start(&cx),
        AsyncUpdate => control_flow::async_update(&cx),
        AsyncDone => control_flow::async_done(&cx),
        CustomCall => control_flow::custom_call(&cx),

        Parameter => other::parameter(&cx),
        Constant => other::constant(&cx),
        AfterAll => other::after_all(&cx),
        AddDependency => other::add_dependency(&cx),
        OptimizationBarrier | Domain => other::pass_through(&cx),
        PartitionId | ReplicaId => other::id(&cx),
        Rng => other::rng(&cx),
        RngBitGenerator => other::rng_bit_generator(&cx),
        RngGetAndUpdateState => other::rng_get_and_update_state(&cx),
        Infeed => other::infeed(&cx),
        Outfeed => other::outfeed(&cx),
        Send => other::send(&cx),
        SendDone => other::send_done(&cx),
        Recv => other::recv(&cx),
        RecvDone => other::recv_done(&cx),
        CopyStart => other::copy_start(&cx),
        CopyDone => other::copy_done(&cx),
        AllReduce | AllReduceStart => other::all_reduce(&cx),
        AllReduceDone => other::done_same(&cx),
        AllGather => other::all_gather(&cx),
        AllGatherStart => other::all_gather_start(&cx),
        AllGatherDone | CollectivePermuteDone => other::done_element(&cx, 1),
        ReduceScatter => other::reduce_scatter(&cx),
        AllToAll => other::all_to_all(&cx),
        RaggedAllToAll => other::ragged_all_to_all(&cx),
        CollectivePermute => other::collective_permute(&cx),
        CollectivePermuteStart => other::collective_permute_start(&cx),
        CollectiveBroadcast => other::collective_broadcast(&cx),
    }
}

/// True for opcodes whose result [`infer_shape`] takes from the declared shape (checking
/// only what it can): their text must state the shape, since nothing else determines it.
/// Kept beside the dispatch so that a rule changing from "declared" to "computed" changes
/// this answer in the same place.
pub fn result_is_declared(opcode: Opcode) -> bool {
    use Opcode::*;
    matches!(
        opcode,
        Parameter
            | Constant
            | Broadcast
            | Reshape
            | DynamicReshape
            | Bitcast
            | Iota
            | Convert
            | BitcastConvert
            | StochasticConvert
            | RaggedDot
            | ScaledDot
            | CustomCall
            | AsyncStart
            | Rng
            | RngBitGenerator
            | RngGetAndUpdateState
            | Infeed
            | Recv
            | AllGather
            | AllGatherStart
            | ReduceScatter
            | CollectivePermuteStart
    )
}

/// What one inference call looks at.
pub(crate) struct Ctx<'a> {
    pub inst: &'a Instruction,
    pub ops: &'a [&'a Shape],
    pub called: &'a dyn Fn(CompId) -> Option<ProgramShape>,
}

impl<'a> Ctx<'a> {
    pub fn opcode(&self) -> Opcode {
        self.inst.opcode
    }

    pub fn expect_count(&self, n: usize) -> Res<()> {
        if self.ops.len() != n {
            bail!(
                "operands.count",
                "{} takes {} operand{} but has {}",
                self.opcode(),
                n,
                if n == 1 { "" } else { "s" },
                self.ops.len()
            );
        }
        Ok(())
    }

    pub fn expect_at_least(&self, n: usize) -> Res<()> {
        if self.ops.len() < n {
            bail!("operands.count", "{} takes at least {} operands but has {}", self.opcode(), n, self.ops.len());
        }
        Ok(())
    }

    pub fn op(&self, i: usize) -> Res<&'a Shape> {
        match self.ops.get(i) {
            Some(s) => Ok(s),
            None => {
                bail!("operands.count", "{} needs operand {} but has {} operands", self.opcode(), i, self.ops.len())
            }
        }
    }

    /// Operand `i`, which must be an array.
    pub fn arr(&self, i: usize) -> Res<&'a ArrayShape> {
        match self.op(i)? {
            Shape::Array(a) => Ok(a),
            other => {
                bail!("operand.not_array", "operand {} of {} must be an array but is {}", i, self.opcode(), sh(other))
            }
        }
    }

    pub fn attr(&self, name: &str) -> Option<&'a AttrValue> {
        self.inst.attr(name)
    }

    /// A required `{a,b,..}` attribute.
    pub fn ints(&self, name: &str) -> Res<&'a [i64]> {
        match self.attr(name) {
            Some(AttrValue::Ints(v)) => Ok(v),
            Some(_) => bail!("attr.kind", "{} attribute {} must be a list of integers", self.opcode(), name),
            None => bail!("attr.missing", "{} needs a {} attribute", self.opcode(), name),
        }
    }

    /// An optional `{a,b,..}` attribute; absent means empty.
    pub fn ints_or_empty(&self, name: &str) -> Res<&'a [i64]> {
        match self.attr(name) {
            Some(AttrValue::Ints(v)) => Ok(v),
            Some(_) => bail!("attr.kind", "{} attribute {} must be a list of integers", self.opcode(), name),
            None => Ok(&[]),
        }
    }

    pub fn int(&self, name: &str) -> Res<i64> {
        match self.attr(name) {
            Some(AttrValue::Int(v)) => Ok(*v),
            Some(_) => bail!("attr.kind", "{} attribute {} must be an integer", self.opcode(), name),
            None => bail!("attr.missing", "{} needs a {} attribute", self.opcode(), name),
        }
    }

    pub fn int_or(&self, name: &str, default: i64) -> Res<i64> {
        match self.attr(name) {
            None => Ok(default),
            Some(_) => self.int(name),
        }
    }

    pub fn bool_or(&self, name: &str, default: bool) -> Res<bool> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Bool(b)) => Ok(*b),
            Some(_) => bail!("attr.kind", "{} attribute {} must be true or false", self.opcode(), name),
        }
    }

    /// A required bare-word attribute parsed by `parse` (one of the `ir::enums`).
    pub fn word<T>(&self, name: &str, parse: fn(&str) -> Option<T>) -> Res<T> {
        match self.inst.attr_word(name) {
            Some(w) => match parse(w) {
                Some(v) => Ok(v),
                None => bail!("attr.invalid_enum", "{} attribute {}={} is not a known value", self.opcode(), name, w),
            },
            None if self.attr(name).is_some() => {
                bail!("attr.kind", "{} attribute {} must be a word", self.opcode(), name)
            }
            None => bail!("attr.missing", "{} needs a {} attribute", self.opcode(), name),
        }
    }

    /// An optional window; absent means a window of no dimensions.
    pub fn window(&self) -> Res<Window> {
        match self.attr("window") {
            Some(AttrValue::Window(w)) => Ok(w.clone()),
            Some(_) => bail!("attr.kind", "{} attribute window is not a window", self.opcode()),
            None => Ok(Window::default()),
        }
    }

    /// The signature of the computation an attribute such as `to_apply` names.
    pub fn comp(&self, attr: &str) -> Res<ProgramShape> {
        match self.attr(attr) {
            Some(AttrValue::Computation(c)) => self.comp_by_id(*c, attr),
            Some(_) => bail!("attr.kind", "{} attribute {} must name one computation", self.opcode(), attr),
            None => bail!("attr.missing", "{} needs a {} computation", self.opcode(), attr),
        }
    }

    pub fn comp_by_id(&self, id: CompId, what: &str) -> Res<ProgramShape> {
        match (self.called)(id) {
            Some(p) => Ok(p),
            None => {
                bail!("call.missing_computation", "{} {} computation #{} does not exist", self.opcode(), what, id.0)
            }
        }
    }

    /// The declared shape without layouts: the result of ops that take it as given.
    pub fn declared(&self) -> Shape {
        self.inst.shape.without_layout()
    }

    pub fn declared_array(&self) -> Res<&'a ArrayShape> {
        match &self.inst.shape {
            Shape::Array(a) => Ok(a),
            other => bail!("shape.not_array", "{} must produce an array but is declared {}", self.opcode(), sh(other)),
        }
    }
}

fn well_formed(shape: &Shape, what: &str) -> Res<()> {
    for (_, leaf) in shape.leaves() {
        if let Shape::Array(a) = leaf {
            if a.dynamic.len() != a.dims.len() {
                bail!("shape.invalid", "{what} {} has {} dynamic flags for rank {}", ash(a), a.dynamic.len(), a.rank());
            }
            for (&d, &dynamic) in a.dims.iter().zip(&a.dynamic) {
                if d < 0 && !(d == UNBOUNDED && dynamic) {
                    bail!("shape.invalid", "{what} {} has a negative dimension size {d}", ash(a));
                }
            }
        }
    }
    Ok(())
}

/// A shape as XLA prints it in messages (no layout).
pub(crate) fn sh(s: &Shape) -> String {
    s.to_string_without_layout()
}

pub(crate) fn ash(a: &ArrayShape) -> String {
    a.dims_text()
}

/// `{1,2,3}`
pub(crate) fn list(v: &[i64]) -> String {
    let parts: Vec<String> = v.iter().map(i64::to_string).collect();
    format!("{{{}}}", parts.join(","))
}

/// An array shape without layout from dims and per-dim dynamic flags.
pub(crate) fn array(et: ElementType, dims: Vec<i64>, dynamic: Vec<bool>) -> Shape {
    Shape::Array(ArrayShape { element_type: et, dims, dynamic, layout: None })
}

/// The same array with another element type (and no layout).
pub(crate) fn with_type(a: &ArrayShape, et: ElementType) -> Shape {
    array(et, a.dims.clone(), a.dynamic.clone())
}

pub(crate) fn plain(a: &ArrayShape) -> Shape {
    with_type(a, a.element_type)
}

/// Whether dimension `i` is dynamic (out of range counts as static).
pub(crate) fn is_dyn(a: &ArrayShape, i: usize) -> bool {
    a.dynamic.get(i).copied().unwrap_or(false)
}

/// Sizes agree, an unbounded `?` agreeing with anything.
pub(crate) fn size_eq(a: i64, b: i64) -> bool {
    a == b || a == UNBOUNDED || b == UNBOUNDED
}

pub(crate) fn dims_eq(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| size_eq(x, y))
}

/// A dimension number checked against a rank.
pub(crate) fn dim_index(d: i64, rank: usize, rule: &'static str, what: &str) -> Res<usize> {
    match usize::try_from(d) {
        Ok(i) if i < rank => Ok(i),
        _ => bail!(rule, "{what} dimension {d} is out of range for rank {rank}"),
    }
}

/// Dimension numbers that must each be in range and appear at most once.
pub(crate) fn unique_dims(dims: &[i64], rank: usize, rule: &'static str, what: &str) -> Res<Vec<usize>> {
    let mut seen = vec![false; rank];
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let i = dim_index(d, rank, rule, what)?;
        if seen[i] {
            bail!(rule, "{what} dimension {d} appears more than once in {}", list(dims));
        }
        seen[i] = true;
        out.push(i);
    }
    Ok(out)
}

/// Like [`unique_dims`], and the list must be sorted ascending.
pub(crate) fn sorted_dims(dims: &[i64], rank: usize, rule: &'static str, what: &str) -> Res<Vec<usize>> {
    let out = unique_dims(dims, rank, rule, what)?;
    if out.windows(2).any(|w| w[0] > w[1]) {
        bail!(rule, "{what} dimensions {} must be sorted", list(dims));
    }
    Ok(out)
}

pub(crate) fn checked_add(a: i64, b: i64) -> Res<i64> {
    match a.checked_add(b) {
        Some(v) => Ok(v),
        None => bail!("shape.overflow", "dimension arithmetic overflows ({a} + {b})"),
    }
}

pub(crate) fn checked_mul(a: i64, b: i64) -> Res<i64> {
    match a.checked_mul(b) {
        Some(v) => Ok(v),
        None => bail!("shape.overflow", "dimension arithmetic overflows ({a} * {b})"),
    }
}

/// Same element type, any two floating-point types counting as the same (XLA's
/// `SameElementTypeIgnoringFpPrecision`, used where accumulation may be wider).
pub(crate) fn same_type_ignoring_fp(a: ElementType, b: ElementType) -> bool {
    a == b || (a.is_float() && b.is_float())
}

/// A scalar array of the given shape, or why not.
pub(crate) fn scalar_type(s: &Shape) -> Option<ElementType> {
    match s {
        Shape::Array(a) if a.dims.is_empty() => Some(a.element_type),
        _ => None,
    }
}

/// Output size of one windowed dimension (reduce-window, convolution, select-and-scatter):
/// the base dilated and padded, then the dilated window placed at every stride.
pub(crate) fn window_output_size(input: i64, dim: &crate::ir::WindowDim, what: &str) -> Res<i64> {
    if dim.size <= 0 {
        bail!("window.invalid", "{what}: window size {} must be positive", dim.size);
    }
    if dim.stride <= 0 {
        bail!("window.invalid", "{what}: window stride {} must be positive", dim.stride);
    }
    if dim.window_dilation <= 0 || dim.base_dilation <= 0 {
        bail!(
            "window.invalid",
            "{what}: window dilation {} and base dilation {} must be positive",
            dim.window_dilation,
            dim.base_dilation
        );
    }
    if input == UNBOUNDED {
        return Ok(UNBOUNDED);
    }
    if input < 0 {
        bail!("shape.invalid", "{what}: dimension size {input} is negative");
    }
    let dilated_base = if input == 0 { 0 } else { checked_add(checked_mul(input - 1, dim.base_dilation)?, 1)? };
    let padded = checked_add(checked_add(dilated_base, dim.padding_low)?, dim.padding_high)?;
    let dilated_window = checked_add(checked_mul(dim.size - 1, dim.window_dilation)?, 1)?;
    if padded < 0 {
        bail!(
            "window.invalid",
            "{what}: padding {}_{} leaves a negative base size {padded}",
            dim.padding_low,
            dim.padding_high
        );
    }
    Ok(if dilated_window > padded { 0 } else { (padded - dilated_window) / dim.stride + 1 })
}

/// The array element types of a reducer's operands as XLA's `VerifyReducerShape` checks them:
/// `(T0..Tn-1, T0..Tn-1) -> (T0..Tn-1)` over scalars, each Ti agreeing with `inits[i]` and
/// the inputs' element types agreeing up to floating-point precision. Returns the
/// accumulator types.
pub(crate) fn check_reducer(
    prog: &ProgramShape,
    inits: &[&Shape],
    inputs: &[ElementType],
    rule: &'static str,
    what: &str,
) -> Res<Vec<ElementType>> {
    let n = inits.len();
    if prog.parameters.len() != 2 * n {
        bail!(rule, "{what} computation must take {} parameters but takes {}", 2 * n, prog.parameters.len());
    }
    let accs: Vec<&Shape> = if n == 1 {
        vec![&prog.result]
    } else {
        match &prog.result {
            Shape::Tuple(e) if e.len() == n => e.iter().collect(),
            other => bail!(rule, "{what} computation must return a tuple of {n} scalars but returns {}", sh(other)),
        }
    };
    let mut types = Vec::with_capacity(n);
    for (i, acc) in accs.iter().enumerate() {
        let Some(t) = scalar_type(acc) else {
            bail!(rule, "{what} computation must return scalars but result {i} is {}", sh(acc));
        };
        if !acc.compatible(inits[i]) {
            bail!(rule, "{what} computation result {i} is {} but init value {i} is {}", sh(acc), sh(inits[i]));
        }
        for p in [i, i + n] {
            let param = &prog.parameters[p];
            if !param.compatible(acc) {
                bail!(rule, "{what} computation parameter {p} is {} but must be {}", sh(param), sh(acc));
            }
        }
        if let Some(&input) = inputs.get(i) {
            if !same_type_ignoring_fp(input, t) {
                bail!(rule, "{what} computation accumulates {t} but input {i} has element type {input}");
            }
        }
        types.push(t);
    }
    Ok(types)
}
