//! Rewriting a while loop's state tuple in the loop, its condition, its body and the loop's
//! users at once: keeping some of its elements (in order) and appending new ones that the body
//! passes through unchanged. The pass that drops dead elements shrinks a state with it; the
//! pass that hoists loop-invariant code grows one.

use std::collections::HashMap;

use tessera_hlo::ir::{AttrList, AttrValue};
use tessera_hlo::{CompId, Computation, InstId, Instruction, Module, Opcode, Shape};

use super::dce::{has_side_effect, live_instructions};
use crate::LowerError;

/// A while loop whose state can be rewritten: it is the only caller of its condition and body,
/// both read their parameter only through get-tuple-element (so every element's readers are
/// known), and the body's root is a tuple instruction (so every element's new value is one
/// operand).
pub(crate) struct Loop {
    pub cond: CompId,
    pub body: CompId,
    /// Elements of the state.
    pub arity: usize,
}

/// How many instructions call each computation, across the module.
fn caller_counts(module: &Module) -> HashMap<CompId, usize> {
    let mut counts = HashMap::new();
    for comp in &module.computations {
        for inst in &comp.instructions {
            for c in inst.called_computations() {
                *counts.entry(c).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// The loop `w` of computation `c` when its state can be rewritten (see [`Loop`]).
fn rewritable_loop(module: &Module, callers: &HashMap<CompId, usize>, c: CompId, w: InstId) -> Option<Loop> {
    let inst = module.comp(c).inst(w);
    if inst.opcode != Opcode::While || inst.operands.len() != 1 {
        return None;
    }
    let arity = inst.shape.tuple_elements()?.len();
    let (cond, body) = (inst.called("condition")?, inst.called("body")?);
    if cond == body || callers.get(&cond) != Some(&1) || callers.get(&body) != Some(&1) {
        return None;
    }
    let reads_by_element = |comp: &Computation| {
        let params = comp.parameters();
        let &[p] = params.as_slice() else { return false };
        comp.root != p
            && comp.instructions.iter().all(|i| {
                !i.operands.contains(&p) && !i.control_predecessors.contains(&p)
                    || i.opcode == Opcode::GetTupleElement && i.control_predecessors.is_empty()
            })
    };
    let (cond_comp, body_comp) = (module.get(cond)?, module.get(body)?);
    let root = body_comp.root_inst();
    (reads_by_element(cond_comp)
        && reads_by_element(body_comp)
        && root.opcode == Opcode::Tuple
        && root.operands.len() == arity)
        .then_some(Loop { cond, body, arity })
}

/// Calls `rewrite` on every while loop whose state can be rewritten (see [`Loop`]), and
/// collects the report lines it returns for the loops it changed. Loops are found by name,
/// since a rewrite renumbers the computation it is in.
pub(crate) fn rewrite_loops(
    module: &mut Module,
    mut rewrite: impl FnMut(&mut Module, CompId, InstId, &Loop) -> Result<Option<String>, LowerError>,
) -> Result<Vec<String>, LowerError> {
    let callers = caller_counts(module);
    let mut reports = Vec::new();
    for c in module.comp_ids().collect::<Vec<_>>() {
        let loops: Vec<String> =
            module.comp(c).instructions.iter().filter(|i| i.opcode == Opcode::While).map(|i| i.name.clone()).collect();
        for name in loops {
            let Some(w) = module.comp(c).find(&name) else { continue };
            let Some(lp) = rewritable_loop(module, &callers, c, w) else { continue };
            if let Some(line) = rewrite(module, c, w, &lp)? {
                reports.push(format!("{name}: {line}"));
            }
        }
    }
    Ok(reports)
}

/// The state element that get-tuple-element `id` reads from its computation's parameter.
pub(crate) fn element_read(comp: &Computation, id: InstId) -> Option<usize> {
    let inst = comp.inst(id);
    if inst.opcode != Opcode::GetTupleElement || comp.inst(*inst.operands.first()?).opcode != Opcode::Parameter {
        return None;
    }
    usize::try_from(inst.attr_int("index")?).ok()
}

/// Rewrites loop `w` of computation `c` to carry the elements `keep` (old indices, ascending)
/// followed by one new element per `append` entry `(value, replaced)`: `value` (of `c`) is its
/// initial value, the body passes it through, and the body's uses of its instruction
/// `replaced` read it instead. The caller guarantees that neither the condition, nor the
/// body's new root, nor any user of the loop reads a dropped element; a loop user that is
/// not a get-tuple-element (possible only when nothing is dropped) reads the old state
/// rebuilt as a tuple.
pub(crate) fn rewrite_state(
    module: &mut Module,
    c: CompId,
    w: InstId,
    lp: &Loop,
    keep: &[usize],
    append: &[(InstId, InstId)],
) -> Result<(), LowerError> {
    let name = module.comp(c).inst(w).name.clone();
    let broken = |what: &str| LowerError::invalid(&name, format!("rewriting the loop state: {what}"));
    let old_elements = module.comp(c).inst(w).shape.tuple_elements().ok_or_else(|| broken("not a tuple"))?.to_vec();
    let mut new_index: Vec<Option<usize>> = vec![None; lp.arity];
    for (k, &i) in keep.iter().enumerate() {
        *new_index.get_mut(i).ok_or_else(|| broken("a kept element out of range"))? = Some(k);
    }
    let mut elements: Vec<Shape> = keep.iter().map(|&i| old_elements[i].clone()).collect();
    elements.extend(append.iter().map(|&(v, _)| module.comp(c).inst(v).shape.clone()));
    let state = Shape::Tuple(elements);

    // The loop and its users.
    let comp = module.comp_mut(c);
    let init = comp.inst(w).operands[0];
    let mut init_elements: Vec<InstId> = Vec::new();
    for &i in keep {
        init_elements.push(element_of(comp, init, i, &old_elements[i]));
    }
    init_elements.extend(append.iter().map(|&(v, _)| v));
    let init_name = comp.unique_name(&format!("{name}.init"));
    let new_init = comp.add(Instruction::new(init_name, Opcode::Tuple, state.clone(), init_elements));
    let users = comp.users()[w.index()].clone();
    let (mut rebuilt, mut unused) = (None, Vec::new());
    for u in users {
        let user = comp.inst(u);
        if user.opcode == Opcode::GetTupleElement {
            let index = user.attr_int("index").and_then(|i| usize::try_from(i).ok());
            match index.and_then(|i| new_index.get(i).copied().flatten()) {
                Some(k) => comp.inst_mut(u).set_attr("index", AttrValue::Int(k as i64)),
                None => unused.push(u),
            }
            continue;
        }
        if keep.len() != lp.arity {
            return Err(broken("a user reads the whole state while elements are dropped"));
        }
        let whole = *rebuilt.get_or_insert_with(|| {
            let reads: Vec<InstId> = (0..lp.arity)
                .map(|i| {
                    let gte = read_element(comp.unique_name(&format!("{name}.{i}")), w, i, old_elements[i].clone());
                    comp.add(gte)
                })
                .collect();
            let tuple_name = comp.unique_name(&format!("{name}.state"));
            comp.add(Instruction::new(tuple_name, Opcode::Tuple, Shape::Tuple(old_elements.clone()), reads))
        });
        for o in &mut comp.inst_mut(u).operands {
            if *o == w {
                *o = whole;
            }
        }
    }
    if comp.root == w {
        if let Some(whole) = rebuilt {
            comp.root = whole;
        }
    }
    let users = comp.users();
    if unused.iter().any(|&u| !users[u.index()].is_empty() || comp.root == u) {
        return Err(broken("a dropped element is read after the loop"));
    }
    let loop_inst = comp.inst_mut(w);
    loop_inst.operands[0] = new_init;
    loop_inst.shape = state.clone();
    let mut keep_inst = vec![true; comp.instructions.len()];
    for u in unused {
        keep_inst[u.index()] = false;
    }
    comp.retain_instructions(&keep_inst);
    comp.order_operands_first();

    // The body: kept elements renumbered, appended ones passed through.
    let body = module.comp_mut(lp.body);
    let stale = retype_parameter(body, &state, &new_index);
    let param = body.parameters()[0];
    let root = body.root;
    let mut results: Vec<InstId> = keep.iter().map(|&i| body.inst(root).operands[i]).collect();
    for (j, &(v, replaced)) in append.iter().enumerate() {
        let k = keep.len() + j;
        let gte_name = body.unique_name(&format!("{}.hoisted", body.inst(replaced).name));
        let shape = body.inst(replaced).shape.clone();
        debug_assert_eq!(Some(&shape), state.tuple_elements().and_then(|e| e.get(k)), "{v:?}");
        let gte = body.add(read_element(gte_name, param, k, shape));
        body.replace_all_uses(replaced, gte);
        results.push(gte);
    }
    let root = body.root;
    let root_inst = body.inst_mut(root);
    root_inst.operands = results;
    root_inst.shape = state.clone();
    drop_dead(body, &stale).map_err(|e| broken(&format!("the body {e}")))?;

    // The condition: kept elements renumbered.
    let cond = module.comp_mut(lp.cond);
    let stale = retype_parameter(cond, &state, &new_index);
    drop_dead(cond, &stale).map_err(|e| broken(&format!("the condition {e}")))?;
    Ok(())
}

/// Element `i` (of shape `shape`) of the loop's initial state `init` in computation `comp`:
/// the tuple's operand, or a new get-tuple-element of it.
pub(crate) fn element_of(comp: &mut Computation, init: InstId, i: usize, shape: &Shape) -> InstId {
    let inst = comp.inst(init);
    if inst.opcode == Opcode::Tuple {
        return inst.operands[i];
    }
    let gte = read_element(comp.unique_name(&format!("{}.{i}", inst.name)), init, i, shape.clone());
    comp.add(gte)
}

/// `name = get-tuple-element(tuple), index=i`.
fn read_element(name: String, tuple: InstId, i: usize, shape: Shape) -> Instruction {
    Instruction::new(name, Opcode::GetTupleElement, shape, vec![tuple]).with_attr("index", AttrValue::Int(i as i64))
}

/// The instructions of a loop body that must run whatever its results are used for: its side
/// effects (the parameter aside). Walks back from what a body computes start here.
pub(crate) fn side_effects(body: &Computation) -> Vec<InstId> {
    body.ids()
        .filter(|&id| {
            let op = body.inst(id).opcode;
            op != Opcode::Parameter && has_side_effect(op)
        })
        .collect()
}

/// Gives a loop computation's parameter the new state shape and renumbers its readers.
/// Returns the readers of dropped elements, which [`drop_dead`] removes.
fn retype_parameter(comp: &mut Computation, state: &Shape, new_index: &[Option<usize>]) -> Vec<InstId> {
    let param = comp.parameters()[0];
    comp.inst_mut(param).shape = state.clone();
    let mut stale = Vec::new();
    for id in comp.ids().collect::<Vec<_>>() {
        match element_read(comp, id).map(|i| new_index.get(i).copied().flatten()) {
            Some(Some(k)) => comp.inst_mut(id).set_attr("index", AttrValue::Int(k as i64)),
            Some(None) => stale.push(id),
            None => {}
        }
    }
    stale
}

/// Removes what the computation no longer needs, and checks that no reader of a dropped
/// element (`stale`) is still needed.
fn drop_dead(comp: &mut Computation, stale: &[InstId]) -> Result<(), String> {
    let live = live_instructions(comp);
    for &id in stale {
        if live[id.index()] {
            return Err(format!("still reads a dropped element through '{}'", comp.inst(id).name));
        }
    }
    comp.retain_instructions(&live);
    comp.order_operands_first();
    Ok(())
}
