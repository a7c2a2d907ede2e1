//! The summary `tessera parse` prints: computations, an op histogram, and the entry's buffers
//! with their physical sizes (tile and tail padding included, sub-byte elements packed).

use std::collections::BTreeMap;
use std::fmt::Write;

use tessera_hlo::ir::{Module, Opcode};
use tessera_hlo::layout_index::LayoutMap;
use tessera_hlo::Shape;

use tessera::table::Table;

pub fn summarize(module: &Module) -> String {
    let mut out = String::new();
    let instructions: usize = module.computations.iter().map(|c| c.instructions.len()).sum();
    let _ = writeln!(
        out,
        "module {}: {} computations, {} instructions, entry {}\n",
        module.name,
        module.computations.len(),
        instructions,
        module.entry_comp().name
    );

    let mut comps = Table::new(&["computation", "role", "params", "instructions", "result"]).align_right(&[2, 3]);
    for id in module.comp_ids() {
        let comp = module.comp(id);
        let role = if id == module.entry { "entry" } else { "called" };
        comps.row(vec![
            comp.name.clone(),
            role.to_string(),
            comp.parameters().len().to_string(),
            comp.instructions.len().to_string(),
            comp.root_inst().shape.to_string(),
        ]);
    }
    out.push_str(&comps.render());
    out.push('\n');

    let mut histogram: BTreeMap<&str, usize> = BTreeMap::new();
    for comp in &module.computations {
        for inst in &comp.instructions {
            *histogram.entry(inst.opcode.name()).or_default() += 1;
        }
    }
    let mut ops = Table::new(&["op", "count"]).align_right(&[1]);
    for (op, count) in histogram {
        ops.row(vec![op.to_string(), count.to_string()]);
    }
    out.push_str(&ops.render());
    out.push('\n');

    let entry = module.entry_comp();
    let mut buffers = Table::new(&["entry buffer", "shape", "bytes"]).align_right(&[2]);
    let mut total = 0u64;
    for (i, id) in entry.parameters().into_iter().enumerate() {
        let inst = entry.inst(id);
        let bytes = shape_bytes(&inst.shape);
        total += bytes.unwrap_or(0);
        buffers.row(vec![format!("parameter {i} ({})", inst.name), inst.shape.to_string(), bytes_text(bytes)]);
    }
    let root = entry.root_inst();
    let result_bytes = shape_bytes(&root.shape);
    total += result_bytes.unwrap_or(0);
    buffers.row(vec![format!("result ({})", root.name), root.shape.to_string(), bytes_text(result_bytes)]);
    // Before fusion and buffer assignment every other array value is a candidate temporary;
    // their sum bounds what the executable could need beyond arguments and results.
    let (mut temp_count, mut temp_bytes) = (0usize, 0u64);
    for id in entry.ids() {
        let inst = entry.inst(id);
        if id != entry.root && inst.opcode != Opcode::Parameter {
            if let Some(b) = shape_bytes(&inst.shape) {
                temp_count += 1;
                temp_bytes += b;
            }
        }
    }
    buffers.row(vec![
        format!("other values ({temp_count})"),
        "(upper bound, before fusion)".into(),
        temp_bytes.to_string(),
    ]);
    buffers.row(vec!["total".into(), String::new(), (total + temp_bytes).to_string()]);
    out.push_str(&buffers.render());
    out
}

fn bytes_text(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "dynamic".to_string(), |b| b.to_string())
}

/// Physical bytes of every array leaf of a shape, bounded dimensions at their bound; `None`
/// when a leaf has an unbounded dimension.
fn shape_bytes(shape: &Shape) -> Option<u64> {
    shape.leaves().into_iter().try_fold(0u64, |acc, (_, leaf)| match leaf {
        Shape::Array(a) => {
            let bytes = LayoutMap::at_bounds(a).ok()?.physical_byte_size();
            acc.checked_add(u64::try_from(bytes).ok()?)
        }
        _ => Some(acc),
    })
}
