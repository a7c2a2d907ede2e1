//! Splits a large reduction into two stages, as XLA's `TreeReductionRewriter` does.
//!
//! A reduce of all `N` elements of an array into a scalar becomes a reduce of `N / M` rows of
//! `M` elements each (one kernel whose grid runs over the rows, so the thread pool shares them
//! out, and whose rows reduce in vector lanes), then a reduce of the row results. Without it a
//! full reduction is one kernel with a grid of one index: a single thread walks the whole
//! array.
//!
//! A tall column reduction (the leading dimensions of a row-major array of 32- or 64-bit
//! elements reduced, short rows of the trailing ones kept: batch norm's per-channel statistics
//! of an NHWC activation)
//! becomes a reduce of blocks of rows, one partial result per block, then a reduce of the
//! partials. The column form (`emit::column_reduce`) otherwise splits the threads' work along
//! the short rows, so each grid index reads a cache line or two of every row and skips the
//! rest; over blocks, each reads whole rows, one contiguous stretch of memory.
//!
//! HLO leaves the order in which a reduction combines its elements open, so a split changes
//! no contract; it also keeps f32 sums accurate, since each partial sum stays small against
//! the total.
//!
//! A wide column reduction (long kept rows, many reduced rows: a bias gradient, a column sum
//! of a large matrix) splits its reduced rows into blocks the same way, viewing the leading
//! dimensions as blocks of rows with a reshape where they give no blocks themselves. The
//! column form's chunks of such rows read a stretch of each row and jump to the next, a new
//! page each time, which the prefetchers do not follow (f32[4096,4096] over its rows: 15 ms
//! on one thread, where a sum along the rows took 6); a block's grid index sweeps its rows
//! whole into one row of accumulators.
//!
//! A full reduction's input is viewed as rows with a reshape, which is free only in the
//! row-major order (the reduce reads its input through the reshape's index map), in rows that
//! split no dimension but the first where the range below allows; other layouts
//! are left alone, as are sizes with no row length in the range below (padding with the init
//! value would cost a copy of the whole input). A column reduction's blocks are the index
//! combinations of its input's leading dimensions, so its partials are a reduce of the same
//! input over the other reduced dimensions: no reshape.

use tessera_hlo::ir::{AttrList, AttrValue};
use tessera_hlo::{ArrayShape, CompId, Computation, ElementType, InstId, Instruction, Layout, Module, Opcode, Shape};

use crate::pass::Pass;
use crate::LowerError;

/// Below this many elements one thread finishes before a split pays for itself.
const MIN_ELEMENTS: i64 = 1 << 16;
/// Row lengths tried, from the longest: long rows amortize each row's lane combine; the row
/// count must still leave work for every thread (`MIN_ROWS` when some length allows it, so a
/// many-core pool gets even shares).
const MAX_ROW: i64 = 1 << 14;
const MIN_ROW: i64 = 1 << 10;
const MIN_ROWS: i64 = 64;
/// Column reductions are split when their kept rows are at most this many bytes (the column
/// form's chunks of them would be a line or two of each row) ...
const MAX_COLUMN_ROW_BYTES: i64 = 1 << 10;
/// ... or when they are longer (wide), up to rows whose accumulators fill an L1 (the column
/// form's `MAX_ROW_ACC_BYTES`, in f64 for f32 sums), with at least this many elements (the
/// input then comes from memory, not cache) ...
const MAX_WIDE_ROW: i64 = 4096;
const MIN_WIDE_ELEMENTS: i64 = 1 << 20;
/// ... into at least this many blocks (work for every thread) of at least this many rows (so
/// the partials stay a small fraction of the input), a block per index of the fewest leading
/// dimensions that give that.
const MIN_BLOCKS: i64 = 8;
const MIN_BLOCK_ROWS: i64 = 16;

#[derive(Default)]
pub struct TreeReduction {
    decisions: Vec<String>,
}

impl Pass for TreeReduction {
    fn name(&self) -> &'static str {
        "tree_reduction"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.decisions.clear();
        let mut changed = false;
        for c in module.comp_ids() {
            let ids: Vec<_> = module.comp(c).ids().collect();
            let mut touched = false;
            for id in ids {
                let comp = module.comp(c);
                let inst = comp.inst(id);
                if let Some(split) = plan_columns(module, comp, inst) {
                    let inst = inst.clone();
                    split_columns(module.comp_mut(c), id, &inst, &split);
                    self.decisions.push(format!(
                        "{}: {} rows of {} as {} blocks of {} rows (a grid over the blocks), then the {} block results",
                        inst.name,
                        split.rows,
                        split.row,
                        split.blocks,
                        split.rows / split.blocks,
                        split.blocks
                    ));
                    touched = true;
                    continue;
                }
                let Some(split) = plan(module, comp, inst) else { continue };
                let inst = inst.clone();
                let comp = module.comp_mut(c);
                let (input, init) = (inst.operands[0], inst.operands[1]);
                let et = split.element_type;
                let rows_shape = array(et, &[split.rows, split.row]);
                let name = |comp: &Computation, s: &str| comp.unique_name(&format!("{}.{s}", inst.name));
                let mut reshape = Instruction::new("", Opcode::Reshape, rows_shape, vec![input]);
                reshape.name = name(comp, "rows");
                let reshape = comp.add(reshape);
                let mut partial = Instruction::new("", Opcode::Reduce, array(et, &[split.rows]), vec![reshape, init])
                    .with_attr("dimensions", AttrValue::Ints(vec![1]))
                    .with_attr("to_apply", AttrValue::Computation(split.reducer));
                partial.name = name(comp, "row_partials");
                let partial = comp.add(partial);
                let whole = comp.inst_mut(id);
                whole.operands = vec![partial, init];
                whole.set_attr("dimensions", AttrValue::Ints(vec![0]));
                self.decisions.push(format!(
                    "{}: {} elements as {} rows of {} (a grid over the rows), then the {} row results",
                    inst.name, split.elements, split.rows, split.row, split.rows
                ));
                touched = true;
            }
            if touched {
                module.comp_mut(c).order_operands_first();
                changed = true;
            }
        }
        Ok(changed)
    }

    fn report(&self) -> Vec<String> {
        self.decisions.clone()
    }
}

struct Split {
    element_type: ElementType,
    elements: i64,
    rows: i64,
    row: i64,
    reducer: CompId,
}

/// The result shape, reducer and input shape of `inst` when it is a single-input reduce of a
/// static row-major array (what both splits view through their blocks of rows).
fn row_major_reduce<'a>(
    module: &Module,
    comp: &'a Computation,
    inst: &'a Instruction,
) -> Option<(&'a ArrayShape, CompId, &'a ArrayShape)> {
    if inst.opcode != Opcode::Reduce || inst.operands.len() != 2 {
        return None;
    }
    let result = inst.shape.as_array()?;
    let reducer = inst.called("to_apply")?;
    module.get(reducer)?;
    let input_shape = comp.get(inst.operands[0])?.shape.as_array()?;
    let row_major = *input_shape.layout.as_ref()? == Layout::row_major(input_shape.dims.len());
    (input_shape.is_static() && row_major).then_some((result, reducer, input_shape))
}

/// The split of `inst`, when it is a single-input reduce of every dimension of a large,
/// row-major array.
fn plan(module: &Module, comp: &Computation, inst: &Instruction) -> Option<Split> {
    let (result, reducer, input_shape) = row_major_reduce(module, comp, inst)?;
    if !result.dims.is_empty() {
        return None;
    }
    let elements: i64 = input_shape.dims.iter().product();
    if elements < MIN_ELEMENTS {
        return None;
    }
    let divides = |m: &i64| elements % m == 0;
    let enough = |m: &i64| divides(m) && elements / m >= MIN_ROWS;
    // A row should split no dimension but the first: whole slices of the first dimension, or
    // whole trailing dimensions. Its index is then one stride-1 run; a row splitting an inner
    // dimension reads its elements at div/mod offsets, which the Cranelift tier does not
    // vectorize (an f32[8,32,32,64] in rows of 8192, which split its second dimension: 1.7 ms
    // there against 0.2 ms on LLVM; in rows of its last two dimensions, 0.14 ms).
    let dims = &input_shape.dims;
    let slice: i64 = dims.iter().skip(1).product();
    let trailing = (1..dims.len()).map(|k| dims[k..].iter().product::<i64>());
    let row = (MIN_ROW..=MAX_ROW)
        .rev()
        .find(|m| m % slice == 0 && enough(m))
        .or_else(|| trailing.filter(|m| (MIN_ROW..=MAX_ROW).contains(m) && enough(m)).max())
        .or_else(|| (MIN_ROW..=MAX_ROW).rev().find(enough))
        .or_else(|| (MIN_ROW..=MAX_ROW).rev().find(divides))?;
    Some(Split { element_type: result.element_type, elements, rows: elements / row, row, reducer })
}

struct ColumnSplit {
    element_type: ElementType,
    /// Rows (the reduced elements of each column) and the elements of each row.
    rows: i64,
    row: i64,
    /// The leading dimensions the partials keep: the blocks are their index combinations.
    kept: usize,
    blocks: i64,
    reducer: CompId,
    /// The reduced leading dimensions give no blocks: they are viewed as `blocks` blocks of
    /// rows by a reshape (a wide reduction), and the partials keep that one dimension.
    reshaped: bool,
}

/// The split of `inst`, when it is a single-input reduce of the leading dimensions of a large,
/// row-major array whose kept rows are short.
fn plan_columns(module: &Module, comp: &Computation, inst: &Instruction) -> Option<ColumnSplit> {
    let (result, reducer, input_shape) = row_major_reduce(module, comp, inst)?;
    let (dims, rank) = (&input_shape.dims, input_shape.dims.len());
    let mut reduced: Vec<i64> = inst.attr_ints("dimensions")?.to_vec();
    reduced.sort_unstable();
    let k = reduced.len();
    if k == 0 || k >= rank || reduced.iter().enumerate().any(|(i, &d)| d != i as i64) {
        return None;
    }
    let product = |ds: &[i64]| ds.iter().try_fold(1i64, |n, &d| n.checked_mul(d));
    let (rows, row) = (product(&dims[..k])?, product(&dims[k..])?);
    // Partials are rounded to the result type: a 16-bit float would round each block's sum
    // to 8 or 11 bits where the column form rounds the whole sum once.
    let bits = i64::from(result.element_type.bit_width());
    let elements = rows.checked_mul(row)?;
    if bits < 32 || elements < MIN_ELEMENTS {
        return None;
    }
    let split = |kept: usize, blocks: i64, reshaped: bool| {
        let element_type = result.element_type;
        Some(ColumnSplit { element_type, rows, row, kept, blocks, reducer, reshaped })
    };
    if row.checked_mul(bits / 8)? <= MAX_COLUMN_ROW_BYTES {
        // The fewest leading dimensions that make enough blocks of enough rows.
        let kept = (1..k).find(|&p| {
            let blocks: i64 = dims[..p].iter().product();
            blocks >= MIN_BLOCKS && rows / blocks >= MIN_BLOCK_ROWS
        })?;
        return split(kept, dims[..kept].iter().product(), false);
    }
    // A wide one: one kept dimension (so the rows are one run of the input), blocks of rows
    // by a reshape of the leading ones: the most blocks, up to 64, that divide them.
    if rank - k != 1 || row > MAX_WIDE_ROW || elements < MIN_WIDE_ELEMENTS {
        return None;
    }
    let blocks = (MIN_BLOCKS..=rows / MIN_BLOCK_ROWS).rev().find(|b| rows % b == 0 && *b <= 8 * MIN_BLOCKS)?;
    split(1, blocks, true)
}

/// Rewrites column reduction `id` (`inst`) as `split` says: a reduce of the rows of each
/// block into partials that keep the leading `split.kept` dimensions, then the instruction
/// reduces those.
fn split_columns(comp: &mut Computation, id: InstId, inst: &Instruction, split: &ColumnSplit) {
    let (mut input, init) = (inst.operands[0], inst.operands[1]);
    if split.reshaped {
        // [rows..., row] as [blocks, rows / blocks, row]: free in the row-major order.
        let et = comp.inst(input).shape.element_type();
        let view = [split.blocks, split.rows / split.blocks, split.row];
        let mut reshape = Instruction::new("", Opcode::Reshape, array(et, &view), vec![input]);
        reshape.name = comp.unique_name(&format!("{}.blocks", inst.name));
        input = comp.add(reshape);
    }
    let dims = comp.inst(input).shape.dims().to_vec();
    let reduced = dims.len() - inst.shape.rank();
    let partial_dims: Vec<i64> = dims[..split.kept].iter().chain(&dims[reduced..]).copied().collect();
    let mut partial = Instruction::new("", Opcode::Reduce, array(split.element_type, &partial_dims), vec![input, init])
        .with_attr("dimensions", AttrValue::Ints((split.kept as i64..reduced as i64).collect()))
        .with_attr("to_apply", AttrValue::Computation(split.reducer));
    partial.name = comp.unique_name(&format!("{}.block_partials", inst.name));
    let partial = comp.add(partial);
    let whole = comp.inst_mut(id);
    whole.operands = vec![partial, init];
    whole.set_attr("dimensions", AttrValue::Ints((0..split.kept as i64).collect()));
}

fn array(et: ElementType, dims: &[i64]) -> Shape {
    let mut a = ArrayShape::new(et, dims);
    a.layout = Some(Layout::row_major(dims.len()));
    Shape::Array(a)
}
