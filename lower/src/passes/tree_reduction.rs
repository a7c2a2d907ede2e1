//! Splits a large full reduction into two stages, as XLA's `TreeReductionRewriter` does: a
//! reduce of all `N` elements of an array into a scalar becomes a reduce of `N / M` rows of
//! `M` elements each (one kernel whose grid runs over the rows, so the thread pool shares them
//! out, and whose rows reduce in vector lanes), then a reduce of the row results.
//!
//! Without it a full reduction is one kernel with a grid of one index: a single thread walks
//! the whole array. HLO leaves the order in which a reduction combines its elements open, so
//! the split changes no contract; it also keeps f32 sums accurate, since each row's partial
//! sums stay small against the total.
//!
//! The input is viewed as rows with a reshape, which is free only in the row-major order
//! (the reduce reads its input through the reshape's index map); other layouts are left alone,
//! as are sizes with no divisor `M` in `MIN_ROW..=MAX_ROW` (padding with the init value would
//! cost a copy of the whole input).

use tessera_hlo::ir::AttrValue;
use tessera_hlo::{ArrayShape, CompId, Computation, ElementType, Instruction, Layout, Module, Opcode, Shape};

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

/// The split of `inst`, when it is a single-input reduce of every dimension of a large,
/// row-major array.
fn plan(module: &Module, comp: &Computation, inst: &Instruction) -> Option<Split> {
    if inst.opcode != Opcode::Reduce || inst.operands.len() != 2 {
        return None;
    }
    let result = inst.shape.as_array()?;
    if !result.dims.is_empty() {
        return None;
    }
    let reducer = inst.called("to_apply")?;
    module.get(reducer)?;
    let input_shape = comp.get(inst.operands[0])?.shape.as_array()?;
    if !input_shape.is_static() {
        return None;
    }
    let rank = input_shape.dims.len();
    let layout = input_shape.layout.as_ref()?;
    if *layout != Layout::row_major(rank) {
        return None;
    }
    let elements: i64 = input_shape.dims.iter().product();
    if elements < MIN_ELEMENTS {
        return None;
    }
    let divides = |m: &i64| elements % m == 0;
    let row = (MIN_ROW..=MAX_ROW)
        .rev()
        .find(|m| divides(m) && elements / m >= MIN_ROWS)
        .or_else(|| (MIN_ROW..=MAX_ROW).rev().find(divides))?;
    Some(Split { element_type: result.element_type, elements, rows: elements / row, row, reducer })
}

fn array(et: ElementType, dims: &[i64]) -> Shape {
    let mut a = ArrayShape::new(et, dims);
    a.layout = Some(Layout::row_major(dims.len()));
    Shape::Array(a)
}
