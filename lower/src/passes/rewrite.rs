//! In-place rewrites of instructions that passes share: forwarding an instruction's uses to
//! another (then dropping it), and turning an instruction into another op or a constant while
//! it keeps its name and control edges.

use std::collections::HashMap;

use tessera_hlo::ir::{AttrValue, Payload};
use tessera_hlo::{CompId, Computation, ElementType, InstId, Instruction, Literal, Module, Opcode, Shape};

use crate::LowerError;

/// Runs `rewrite` on every instruction of every computation, operands first; it returns
/// whether it changed the instruction and records in [`Forwards`] the instructions whose uses
/// it moved, which are then removed. Whether anything changed.
pub(crate) fn rewrite_each(
    module: &mut Module,
    mut rewrite: impl FnMut(&mut Computation, InstId, &mut Forwards) -> Result<bool, LowerError>,
) -> Result<bool, LowerError> {
    let mut changed = false;
    let comps: Vec<_> = module.comp_ids().collect();
    for c in comps {
        let comp = module.comp_mut(c);
        let mut touched = false;
        let mut forwards = Forwards::default();
        for id in comp.post_order() {
            forwards.update_operands(comp, id);
            touched |= rewrite(comp, id, &mut forwards)?;
        }
        if touched {
            forwards.finish(comp);
            comp.order_operands_first();
            changed = true;
        }
    }
    Ok(changed)
}

/// Uses moved from one instruction to another, applied lazily: moving them at once would
/// scan the whole computation per move, quadratic in a large module. A pass visiting
/// instructions operands first calls [`Forwards::update_operands`] before it looks at each,
/// so every instruction it reads sees its operands' final targets, as if the uses had moved
/// already; [`Forwards::finish`] moves the rest and removes the forwarded instructions.
#[derive(Default)]
pub(crate) struct Forwards {
    to: HashMap<InstId, InstId>,
    order: Vec<InstId>,
}

impl Forwards {
    fn target(&self, mut id: InstId) -> InstId {
        while let Some(&t) = self.to.get(&id) {
            id = t;
        }
        id
    }

    /// Points instruction `id`'s operands and control predecessors at their targets.
    pub(crate) fn update_operands(&self, comp: &mut Computation, id: InstId) {
        if self.to.is_empty() {
            return;
        }
        let inst = comp.inst_mut(id);
        for o in inst.operands.iter_mut().chain(inst.control_predecessors.iter_mut()) {
            *o = self.target(*o);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Moves every remaining use to its target and removes the forwarded instructions.
    pub(crate) fn finish(self, comp: &mut Computation) {
        if self.order.is_empty() {
            return;
        }
        for id in comp.ids().collect::<Vec<_>>() {
            self.update_operands(comp, id);
        }
        comp.root = self.target(comp.root);
        drop_forwarded(comp, &self.order);
    }
}

/// Moves every use of `id` to `to` (which must not itself use `id`), through `forwards`. The
/// instruction itself is removed afterwards rather than left to DCE, which keeps collectives
/// and async ops even when unused.
pub(crate) fn forward(comp: &mut Computation, id: InstId, to: InstId, forwards: &mut Forwards) {
    // The root moves at once: rules ask whether an instruction is the root.
    if comp.root == id {
        comp.root = to;
    }
    forwards.to.insert(id, to);
    forwards.order.push(id);
}

pub(crate) fn drop_forwarded(comp: &mut Computation, forwarded: &[InstId]) {
    if forwarded.is_empty() {
        return;
    }
    let mut keep = vec![true; comp.instructions.len()];
    for id in forwarded {
        keep[id.index()] = false;
    }
    comp.retain_instructions(&keep);
}

/// `shape` (an array) with element type `et`, its dimensions and layout kept.
pub(crate) fn with_type(shape: &Shape, et: ElementType) -> Shape {
    let mut s = shape.clone();
    if let Some(a) = s.as_array_mut() {
        a.element_type = et;
    }
    s
}

/// Turns instruction `id` into `op(operands)`, keeping its name, shape and control edges.
pub(crate) fn become_op(comp: &mut Computation, id: InstId, op: Opcode, operands: Vec<InstId>) {
    let inst = comp.inst_mut(id);
    inst.opcode = op;
    inst.operands = operands;
    inst.attrs.clear();
    inst.payload = Payload::None;
}

/// Turns instruction `id` into `broadcast(operand), dimensions=dims`, keeping its shape.
pub(crate) fn become_broadcast(comp: &mut Computation, id: InstId, operand: InstId, dims: Vec<i64>) {
    become_op(comp, id, Opcode::Broadcast, vec![operand]);
    comp.inst_mut(id).set_attr("dimensions", AttrValue::Ints(dims));
}

/// Adds `name = constant(lit)` to `comp` (a unique name built from `name`).
pub(crate) fn add_constant(comp: &mut Computation, name: &str, lit: Literal) -> InstId {
    let mut inst = Instruction::new(comp.unique_name(name), Opcode::Constant, lit.shape().clone(), vec![]);
    inst.payload = Payload::Constant(lit);
    comp.add(inst)
}

/// Adds the scalar constant `lit` as `{name}.{what}` and, for an array `shape`, its
/// broadcast `{name}.{what}s` to that shape (the form fusion folds into each kernel); the
/// instruction of `shape` either way.
pub(crate) fn add_splat(comp: &mut Computation, name: &str, what: &str, lit: Literal, shape: Shape) -> InstId {
    let c = add_constant(comp, &format!("{name}.{what}"), lit);
    if shape.rank() == 0 {
        return c;
    }
    let b = Instruction::new(comp.unique_name(&format!("{name}.{what}s")), Opcode::Broadcast, shape, vec![c])
        .with_attr("dimensions", AttrValue::Ints(vec![]));
    comp.add(b)
}

pub(crate) fn become_constant(comp: &mut Computation, id: InstId, lit: Literal) {
    become_op(comp, id, Opcode::Constant, vec![]);
    let inst = comp.inst_mut(id);
    inst.shape = lit.shape().clone();
    inst.payload = Payload::Constant(lit);
}

/// Adds `add(p0, p1)` on scalars of `et` to `module` as a computation named after `name`: a
/// sum's reducer, for passes that make sums.
pub(crate) fn add_computation(module: &mut Module, name: &str, et: ElementType) -> CompId {
    let mut comp = Computation::new(module.unique_computation_name(name));
    let scalar = Shape::scalar(et);
    let mut params = Vec::new();
    for n in 0..2 {
        let mut p = Instruction::new(format!("p{n}"), Opcode::Parameter, scalar.clone(), vec![]);
        p.payload = Payload::Parameter(n);
        params.push(comp.add(p));
    }
    comp.root = comp.add(Instruction::new("sum", Opcode::Add, scalar, params));
    module.add_computation(comp)
}
