//! Ops that call computations: reductions, windows, map, sort, while, conditionals, calls,
//! gather and scatter.

use super::types::*;
use super::{Builder, OpResult, Spec, XlaOp};
use crate::ir::{AttrValue, CompId, Module, Opcode, Window};

impl Builder {
    // ---- Computations: reductions, control flow, calls --------------------------------------

    /// Reduces `dimensions` of `operand` with `computation` (`T, T -> T`) from `init`.
    pub fn reduce<'b>(
        &'b self,
        operand: XlaOp<'b>,
        init: XlaOp<'b>,
        computation: &Module,
        dimensions: &[i64],
    ) -> XlaOp<'b> {
        self.reduce_multi(&[operand], &[init], computation, dimensions)
    }

    /// Reduces several operands together (e.g. value and index for an argmax); the
    /// computation takes and returns tuples of their element types, and so does the result.
    pub fn reduce_multi<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        inits: &[XlaOp<'b>],
        computation: &Module,
        dimensions: &[i64],
    ) -> XlaOp<'b> {
        self.op("reduce", || self.reduce_inner(operands, inits, computation, dimensions))
    }

    pub(super) fn reduce_inner<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        inits: &[XlaOp<'b>],
        computation: &Module,
        dimensions: &[i64],
    ) -> OpResult<XlaOp<'b>> {
        if operands.len() != inits.len() {
            return Err(format!("{} operands but {} init values", operands.len(), inits.len()));
        }
        let comp = self.import(computation)?;
        let spec = Spec::new(Opcode::Reduce)
            .attr("dimensions", ints(dimensions))
            .attr("to_apply", AttrValue::Computation(comp));
        let all: Vec<XlaOp<'b>> = operands.iter().chain(inits).copied().collect();
        self.emit(spec, &all)
    }

    /// Reduces every dimension.
    pub fn reduce_all<'b>(&'b self, operand: XlaOp<'b>, init: XlaOp<'b>, computation: &Module) -> XlaOp<'b> {
        self.op("reduce", || {
            let rank = self.array(operand, "the operand")?.rank();
            self.reduce_inner(&[operand], &[init], computation, &iota_dims(rank))
        })
    }

    /// Reduces each window of `window_dimensions` elements, moved by `window_strides`.
    pub fn reduce_window<'b>(
        &'b self,
        operand: XlaOp<'b>,
        init: XlaOp<'b>,
        computation: &Module,
        window_dimensions: &[i64],
        window_strides: &[i64],
        padding: Padding,
    ) -> XlaOp<'b> {
        self.op("reduce-window", || {
            let shape = self.array(operand, "the operand")?;
            let pads = padding.low_high(&shape.dims, window_dimensions, window_strides);
            let window = make_window(window_dimensions, window_strides, &pads, &[], &[]);
            self.reduce_window_inner(&[operand], &[init], computation, window)
        })
    }

    /// Reduce-window over several operands with explicit padding and dilations (empty
    /// dilations mean 1).
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_window_general<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        inits: &[XlaOp<'b>],
        computation: &Module,
        window_dimensions: &[i64],
        window_strides: &[i64],
        base_dilations: &[i64],
        window_dilations: &[i64],
        padding: &[(i64, i64)],
    ) -> XlaOp<'b> {
        self.op("reduce-window", || {
            let window = make_window(window_dimensions, window_strides, padding, base_dilations, window_dilations);
            self.reduce_window_inner(operands, inits, computation, window)
        })
    }

    fn reduce_window_inner<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        inits: &[XlaOp<'b>],
        computation: &Module,
        window: Window,
    ) -> OpResult<XlaOp<'b>> {
        if operands.len() != inits.len() {
            return Err(format!("{} operands but {} init values", operands.len(), inits.len()));
        }
        let comp = self.import(computation)?;
        let spec = Spec::new(Opcode::ReduceWindow)
            .attr("window", AttrValue::Window(window))
            .attr("to_apply", AttrValue::Computation(comp));
        let all: Vec<XlaOp<'b>> = operands.iter().chain(inits).copied().collect();
        self.emit(spec, &all)
    }

    /// Selects one element per window of `operand` with `select` (`T, T -> pred`) and
    /// scatters the matching `source` element there with `scatter`, from `init`.
    #[allow(clippy::too_many_arguments)]
    pub fn select_and_scatter<'b>(
        &'b self,
        operand: XlaOp<'b>,
        select: &Module,
        window_dimensions: &[i64],
        window_strides: &[i64],
        padding: Padding,
        source: XlaOp<'b>,
        init: XlaOp<'b>,
        scatter: &Module,
    ) -> XlaOp<'b> {
        self.op("select-and-scatter", || {
            let shape = self.array(operand, "the operand")?;
            let pads = padding.low_high(&shape.dims, window_dimensions, window_strides);
            self.select_and_scatter_inner(
                operand,
                select,
                window_dimensions,
                window_strides,
                &pads,
                source,
                init,
                scatter,
            )
        })
    }

    /// [`Builder::select_and_scatter`] with explicit (low, high) padding.
    #[allow(clippy::too_many_arguments)]
    pub fn select_and_scatter_with_general_padding<'b>(
        &'b self,
        operand: XlaOp<'b>,
        select: &Module,
        window_dimensions: &[i64],
        window_strides: &[i64],
        padding: &[(i64, i64)],
        source: XlaOp<'b>,
        init: XlaOp<'b>,
        scatter: &Module,
    ) -> XlaOp<'b> {
        self.op("select-and-scatter", || {
            self.select_and_scatter_inner(
                operand,
                select,
                window_dimensions,
                window_strides,
                padding,
                source,
                init,
                scatter,
            )
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn select_and_scatter_inner<'b>(
        &'b self,
        operand: XlaOp<'b>,
        select: &Module,
        window_dimensions: &[i64],
        window_strides: &[i64],
        padding: &[(i64, i64)],
        source: XlaOp<'b>,
        init: XlaOp<'b>,
        scatter: &Module,
    ) -> OpResult<XlaOp<'b>> {
        let window = make_window(window_dimensions, window_strides, padding, &[], &[]);
        let select = self.import(select)?;
        let scatter = self.import(scatter)?;
        let spec = Spec::new(Opcode::SelectAndScatter)
            .attr("window", AttrValue::Window(window))
            .attr("select", AttrValue::Computation(select))
            .attr("scatter", AttrValue::Computation(scatter));
        self.emit(spec, &[operand, source, init])
    }

    /// Applies a scalar computation element-wise across operands of equal dimensions. Seed
    /// 003's extra "static operands" have no HLO form; build them into the computation as
    /// constants instead.
    pub fn map<'b>(&'b self, operands: &[XlaOp<'b>], computation: &Module) -> XlaOp<'b> {
        self.op("map", || {
            let first = operands.first().ok_or_else(|| "map needs at least one operand".to_string())?;
            let rank = self.array(*first, "the first operand")?.rank();
            let comp = self.import(computation)?;
            let spec = Spec::new(Opcode::Map)
                .attr("dimensions", ints(&iota_dims(rank)))
                .attr("to_apply", AttrValue::Computation(comp));
            self.emit(spec, operands)
        })
    }

    /// Sorts operands of equal dimensions together along `dimension`; `comparator` takes two
    /// scalars per operand (`lhs_0, rhs_0, lhs_1, rhs_1, ...`) and says whether lhs goes first.
    /// Several operands give a tuple.
    pub fn sort<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        comparator: &Module,
        dimension: i64,
        is_stable: bool,
    ) -> XlaOp<'b> {
        self.op("sort", || self.sort_inner(operands, comparator, dimension, is_stable))
    }

    fn sort_inner<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        comparator: &Module,
        dimension: i64,
        is_stable: bool,
    ) -> OpResult<XlaOp<'b>> {
        let comp = self.import(comparator)?;
        let mut spec = Spec::new(Opcode::Sort).attr("dimensions", ints(&[dimension]));
        if is_stable {
            spec = spec.attr("is_stable", AttrValue::Bool(true));
        }
        self.emit(spec.attr("to_apply", AttrValue::Computation(comp)), operands)
    }

    /// Sorts one operand in increasing order along `dimension` (seed 003's `Sort`), with a
    /// `lt` comparator built here.
    pub fn sort_ascending<'b>(&'b self, operand: XlaOp<'b>, dimension: i64) -> XlaOp<'b> {
        self.op("sort", || {
            let ty = self.array(operand, "the operand")?.element_type;
            let comparator = self.scalar_computation("compare", ty, |s, x, y| s.lt(x, y));
            self.sort_inner(&[operand], &comparator, dimension, false)
        })
    }

    /// Runs `body` (`T -> T`) from `init` while `condition` (`T -> pred`) holds.
    pub fn while_loop<'b>(&'b self, condition: &Module, body: &Module, init: XlaOp<'b>) -> XlaOp<'b> {
        self.op("while", || {
            let condition = self.import(condition)?;
            let body = self.import(body)?;
            let spec = Spec::new(Opcode::While)
                .attr("condition", AttrValue::Computation(condition))
                .attr("body", AttrValue::Computation(body));
            self.emit(spec, &[init])
        })
    }

    /// `true_computation(true_operand)` if `pred`, else `false_computation(false_operand)`.
    pub fn conditional<'b>(
        &'b self,
        pred: XlaOp<'b>,
        true_operand: XlaOp<'b>,
        true_computation: &Module,
        false_operand: XlaOp<'b>,
        false_computation: &Module,
    ) -> XlaOp<'b> {
        self.op("conditional", || {
            let t = self.import(true_computation)?;
            let f = self.import(false_computation)?;
            let spec = Spec::new(Opcode::Conditional)
                .attr("true_computation", AttrValue::Computation(t))
                .attr("false_computation", AttrValue::Computation(f));
            self.emit(spec, &[pred, true_operand, false_operand])
        })
    }

    /// `branches[index](operands[index])`; an out-of-range index runs the last branch.
    pub fn conditional_indexed<'b>(
        &'b self,
        index: XlaOp<'b>,
        branches: &[&Module],
        operands: &[XlaOp<'b>],
    ) -> XlaOp<'b> {
        self.op("conditional", || {
            if branches.len() != operands.len() {
                return Err(format!("{} branches but {} branch operands", branches.len(), operands.len()));
            }
            let comps = branches.iter().map(|m| self.import(m)).collect::<OpResult<Vec<CompId>>>()?;
            let spec = Spec::new(Opcode::Conditional).attr("branch_computations", AttrValue::Computations(comps));
            let all: Vec<XlaOp<'b>> = std::iter::once(index).chain(operands.iter().copied()).collect();
            self.emit(spec, &all)
        })
    }

    /// Calls `computation` with `operands`.
    pub fn call<'b>(&'b self, computation: &Module, operands: &[XlaOp<'b>]) -> XlaOp<'b> {
        self.op("call", || {
            let comp = self.import(computation)?;
            self.emit(Spec::new(Opcode::Call).attr("to_apply", AttrValue::Computation(comp)), operands)
        })
    }

    /// Gathers slices of `slice_sizes` from `operand` at the indices in `start_indices`.
    pub fn gather<'b>(
        &'b self,
        operand: XlaOp<'b>,
        start_indices: XlaOp<'b>,
        dnums: &GatherDimensionNumbers,
        slice_sizes: &[i64],
        indices_are_sorted: bool,
    ) -> XlaOp<'b> {
        self.op("gather", || {
            let mut spec = Spec::new(Opcode::Gather)
                .attr("offset_dims", ints(&dnums.offset_dims))
                .attr("collapsed_slice_dims", ints(&dnums.collapsed_slice_dims))
                .attr("start_index_map", ints(&dnums.start_index_map));
            if !dnums.operand_batching_dims.is_empty() {
                spec = spec.attr("operand_batching_dims", ints(&dnums.operand_batching_dims));
            }
            if !dnums.start_indices_batching_dims.is_empty() {
                spec = spec.attr("start_indices_batching_dims", ints(&dnums.start_indices_batching_dims));
            }
            spec = spec
                .attr("index_vector_dim", AttrValue::Int(dnums.index_vector_dim))
                .attr("slice_sizes", ints(slice_sizes));
            if indices_are_sorted {
                spec = spec.attr("indices_are_sorted", AttrValue::Bool(true));
            }
            self.emit(spec, &[operand, start_indices])
        })
    }

    /// Combines `updates` into `operands` at the indices in `scatter_indices` with
    /// `computation`. Several operands give a tuple.
    #[allow(clippy::too_many_arguments)]
    pub fn scatter<'b>(
        &'b self,
        operands: &[XlaOp<'b>],
        scatter_indices: XlaOp<'b>,
        updates: &[XlaOp<'b>],
        computation: &Module,
        dnums: &ScatterDimensionNumbers,
        indices_are_sorted: bool,
        unique_indices: bool,
    ) -> XlaOp<'b> {
        self.op("scatter", || {
            let comp = self.import(computation)?;
            let mut spec = Spec::new(Opcode::Scatter)
                .attr("update_window_dims", ints(&dnums.update_window_dims))
                .attr("inserted_window_dims", ints(&dnums.inserted_window_dims))
                .attr("scatter_dims_to_operand_dims", ints(&dnums.scatter_dims_to_operand_dims));
            if !dnums.input_batching_dims.is_empty() {
                spec = spec.attr("input_batching_dims", ints(&dnums.input_batching_dims));
            }
            if !dnums.scatter_indices_batching_dims.is_empty() {
                spec = spec.attr("scatter_indices_batching_dims", ints(&dnums.scatter_indices_batching_dims));
            }
            spec = spec.attr("index_vector_dim", AttrValue::Int(dnums.index_vector_dim));
            if indices_are_sorted {
                spec = spec.attr("indices_are_sorted", AttrValue::Bool(true));
            }
            if unique_indices {
                spec = spec.attr("unique_indices", AttrValue::Bool(true));
            }
            spec = spec.attr("to_apply", AttrValue::Computation(comp));
            let all: Vec<XlaOp<'b>> = operands
                .iter()
                .copied()
                .chain(std::iter::once(scatter_indices))
                .chain(updates.iter().copied())
                .collect();
            self.emit(spec, &all)
        })
    }
}
