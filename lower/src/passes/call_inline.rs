//! Inlines every `call` into its caller, so that later passes and the kernel lowering never
//! see `call`: the callee's instructions are cloned into the caller (parameters become the
//! call's operands) and the call's uses move to the cloned root. The callee stays in the
//! module until dead-code elimination drops it (another caller may still use it).

use std::collections::HashMap;

use tessera_hlo::ir::UniqueNames;
use tessera_hlo::{CompId, InstId, Module, Opcode};

use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct CallInline;

impl Pass for CallInline {
    fn name(&self) -> &'static str {
        "call_inline"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        let mut changed = false;
        // Inlining a callee that itself calls brings new calls in; the verified call graph is
        // acyclic, so this ends after at most call-depth rounds.
        loop {
            let mut round = false;
            for comp in module.comp_ids().collect::<Vec<_>>() {
                if inline_calls(module, comp)? {
                    // Cloned instructions were appended; a scheduled module prints in stored
                    // order, so they must come before their users.
                    module.comp_mut(comp).order_operands_first();
                    round = true;
                }
            }
            if !round {
                break;
            }
            changed = true;
        }
        Ok(changed)
    }
}

/// Inlines the calls `comp` holds now (not those its callees bring in) in one sweep: each
/// callee's instructions are appended, then every use of a call moves to its callee's root
/// and the calls go, together, so a computation with many calls costs one pass over it, not
/// one per call.
fn inline_calls(module: &mut Module, comp: CompId) -> Result<bool, LowerError> {
    let calls: Vec<InstId> = {
        let c = module.comp(comp);
        c.ids().filter(|&id| c.inst(id).opcode == Opcode::Call && c.inst(id).called("to_apply").is_some()).collect()
    };
    if calls.is_empty() {
        return Ok(false);
    }
    let mut names = UniqueNames::of_instructions(module.comp(comp));
    // What each call's uses become: its callee's cloned root, or the operand it returns.
    let mut replaced: HashMap<InstId, InstId> = HashMap::new();
    for &call in &calls {
        let root = inline_call(module, comp, call, &mut names)?;
        replaced.insert(call, root);
    }
    // A call may return another call's result (through a parameter), so follow the chain.
    let resolve = |mut id: InstId| {
        while let Some(&r) = replaced.get(&id) {
            id = r;
        }
        id
    };
    let caller = module.comp_mut(comp);
    for inst in caller.instructions.iter_mut() {
        for o in inst.operands.iter_mut().chain(inst.control_predecessors.iter_mut()) {
            *o = resolve(*o);
        }
    }
    caller.root = resolve(caller.root);
    let mut keep = vec![true; caller.instructions.len()];
    for call in calls {
        keep[call.index()] = false;
    }
    caller.retain_instructions(&keep);
    Ok(true)
}

/// Appends the instructions of `call`'s callee to `comp` (parameters become the call's
/// operands) and returns what stands for the call's result; the call itself stays.
fn inline_call(module: &mut Module, comp: CompId, call: InstId, names: &mut UniqueNames) -> Result<InstId, LowerError> {
    let call_inst = module.comp(comp).inst(call).clone();
    let callee_id =
        call_inst.called("to_apply").ok_or_else(|| LowerError::invalid(&call_inst.name, "call without to_apply"))?;
    if callee_id == comp {
        return Err(LowerError::invalid(&call_inst.name, "call of its own computation"));
    }
    let callee = module.comp(callee_id).clone();
    let caller = module.comp_mut(comp);
    let mut map: HashMap<InstId, InstId> = HashMap::new();
    for id in callee.post_order() {
        let inst = callee.inst(id);
        if inst.opcode == Opcode::Parameter {
            let n = inst.parameter_number().unwrap_or(-1);
            let arg = usize::try_from(n).ok().and_then(|n| call_inst.operands.get(n)).copied().ok_or_else(|| {
                LowerError::invalid(&call_inst.name, format!("the callee's parameter {n} has no operand"))
            })?;
            map.insert(id, arg);
            continue;
        }
        let mut clone = inst.clone();
        clone.name = names.fresh(&format!("{}.{}", inst.name, call_inst.name));
        clone.operands = inst.operands.iter().map(|o| map[o]).collect();
        clone.control_predecessors = inst.control_predecessors.iter().filter_map(|p| map.get(p).copied()).collect();
        let new = caller.add(clone);
        map.insert(id, new);
    }
    let root = map[&callee.root];
    // The call's control predecessors must still run before what replaces it (nothing to do
    // when the callee just returns one of its parameters).
    if !call_inst.operands.contains(&root) {
        for p in &call_inst.control_predecessors {
            let preds = &mut caller.inst_mut(root).control_predecessors;
            if !preds.contains(p) {
                preds.push(*p);
            }
        }
    }
    Ok(root)
}
