//! Gives every array value a layout. Layouts are the physical truth (DESIGN.md section 3), so
//! a layout the module states (or `layout_assignment` chose) is kept; a missing one becomes
//! the default row-major layout.
//! The entry's parameters and root then take the layouts of `entry_computation_layout`: a
//! parameter's bytes arrive in that layout, so a parameter that states another one gets the
//! entry layout and a `copy` into the stated layout for its users; a root whose layout
//! differs gets a `copy` into the entry layout as the new root.
//!
//! Invariant afterwards: every array shape in the module (instructions, tuple elements,
//! `entry_computation_layout`) has a layout, and the entry's parameters and root carry
//! exactly the entry layouts.

use tessera_hlo::ir::{AttrList, AttrValue, ProgramShape};
use tessera_hlo::{Computation, InstId, Instruction, Layout, Module, Opcode, Shape};

use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct LayoutNormalize;

impl Pass for LayoutNormalize {
    fn name(&self) -> &'static str {
        "layout_normalize"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        let mut changed = false;
        for comp in &mut module.computations {
            for inst in &mut comp.instructions {
                changed |= fill_layouts(&mut inst.shape);
            }
        }
        for comp in &mut module.computations {
            changed |= conform_tuple_values(comp);
        }
        let entry = module.entry;
        let stated = module.entry_computation_layout().cloned();
        let mut program = match stated {
            Some(p) => p,
            None => {
                let comp = module.comp(entry);
                ProgramShape { parameters: comp.parameter_shapes(), result: comp.root_inst().shape.clone() }
            }
        };
        for s in program.parameters.iter_mut().chain(std::iter::once(&mut program.result)) {
            changed |= fill_layouts(s);
        }
        let comp = module.comp_mut(entry);
        for (id, want) in comp.parameters().into_iter().zip(&program.parameters) {
            changed |= conform_parameter(comp, id, want);
        }
        let root = comp.root;
        let new_root = conform(comp, root, &program.result);
        if new_root != root {
            comp.root = new_root;
            changed = true;
        }
        // Copies were appended; keep stored order a valid schedule.
        comp.order_operands_first();
        if module.entry_computation_layout() != Some(&program) {
            module.set_attr("entry_computation_layout", AttrValue::ProgramShape(program));
            changed = true;
        }
        Ok(changed)
    }
}

/// Sets the default layout on every array leaf without one; says whether any was missing.
fn fill_layouts(shape: &mut Shape) -> bool {
    match shape {
        Shape::Array(a) if a.layout.is_none() => {
            a.layout = Some(Layout::row_major(a.rank()));
            true
        }
        Shape::Tuple(elems) => elems.iter_mut().fold(false, |acc, e| fill_layouts(e) | acc),
        _ => false,
    }
}

/// Layouts equal at every array leaf (shapes are already known compatible).
fn same_layouts(a: &Shape, b: &Shape) -> bool {
    match (a, b) {
        (Shape::Array(x), Shape::Array(y)) => x.layout == y.layout,
        (Shape::Tuple(x), Shape::Tuple(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_layouts(p, q)),
        _ => true,
    }
}

/// The lowering treats a tuple and a get-tuple-element as aliases of the values they hold,
/// so their stated layouts must be those values' layouts. Where they are not (the parser
/// gives every shape without a layout the default one, whatever its operand's is), copies
/// make them so: a tuple's operand is copied into the tuple's element layout, and a
/// get-tuple-element takes its element's layout and its users read a copy into the stated
/// one.
fn conform_tuple_values(comp: &mut Computation) -> bool {
    let mut changed = false;
    for i in 0..comp.instructions.len() {
        let id = InstId(i as u32);
        match comp.inst(id).opcode {
            Opcode::Tuple => {
                let Shape::Tuple(elems) = comp.inst(id).shape.clone() else { continue };
                let operands = comp.inst(id).operands.clone();
                if operands.len() != elems.len() {
                    continue;
                }
                for (k, (&o, want)) in operands.iter().zip(&elems).enumerate() {
                    let fixed = conform(comp, o, want);
                    if fixed != o {
                        comp.inst_mut(id).operands[k] = fixed;
                        changed = true;
                    }
                }
            }
            Opcode::GetTupleElement => {
                let inst = comp.inst(id);
                let index = inst.attr_int("index").and_then(|i| usize::try_from(i).ok());
                let elem = inst.operands.first().and_then(|&o| {
                    let elems: &[Shape] = comp.inst(o).shape.tuple_elements()?;
                    elems.get(index?).cloned()
                });
                if let Some(elem) = elem {
                    changed |= conform_parameter(comp, id, &elem);
                }
            }
            _ => {}
        }
    }
    changed
}

/// Gives instruction `id` (a parameter, or a get-tuple-element) the layouts of `want`, the
/// layouts its value really has, and redirects its users to copies into the layouts it
/// stated.
fn conform_parameter(comp: &mut Computation, id: InstId, want: &Shape) -> bool {
    let have = comp.inst(id).shape.clone();
    if same_layouts(&have, want) {
        return false;
    }
    comp.inst_mut(id).shape = want.clone();
    // The instruction's existing users still expect the stated layout: they read a
    // conversion. Only instructions that exist now are redirected, not the conversion chain
    // itself.
    let existing = comp.instructions.len();
    let fixed = conform(comp, id, &have);
    for inst in &mut comp.instructions[..existing] {
        for o in inst.operands.iter_mut().chain(inst.control_predecessors.iter_mut()) {
            if *o == id {
                *o = fixed;
            }
        }
    }
    if comp.root == id {
        comp.root = fixed;
    }
    true
}

/// A value with `want`'s layouts computed from `value`: `value` itself when they agree, else
/// copies (per tuple element, through get-tuple-element and tuple).
fn conform(comp: &mut Computation, value: InstId, want: &Shape) -> InstId {
    let have = comp.inst(value).shape.clone();
    if same_layouts(&have, want) {
        return value;
    }
    match want {
        Shape::Array(_) => {
            let name = comp.unique_name(&format!("{}.relayout", comp.inst(value).name));
            comp.add(Instruction::new(name, Opcode::Copy, want.clone(), vec![value]))
        }
        Shape::Tuple(elems) => {
            let is_tuple = comp.inst(value).opcode == Opcode::Tuple;
            let mut parts = Vec::with_capacity(elems.len());
            for (i, w) in elems.iter().enumerate() {
                let elem = if is_tuple {
                    comp.inst(value).operands[i]
                } else {
                    let name = comp.unique_name(&format!("{}.{i}", comp.inst(value).name));
                    let shape = have.tuple_elements().and_then(|e| e.get(i)).cloned().unwrap_or_else(|| w.clone());
                    let gte = Instruction::new(name, Opcode::GetTupleElement, shape, vec![value])
                        .with_attr("index", AttrValue::Int(i as i64));
                    comp.add(gte)
                };
                parts.push(conform(comp, elem, w));
            }
            let name = comp.unique_name(&format!("{}.relayout", comp.inst(value).name));
            comp.add(Instruction::new(name, Opcode::Tuple, want.clone(), parts))
        }
        _ => value,
    }
}
