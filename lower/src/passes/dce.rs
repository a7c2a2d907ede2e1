//! Dead-code elimination: instructions nothing needs (not reachable from the root through
//! operands and control predecessors, and without side effects) and computations nothing
//! calls (not reachable from the entry) are removed. Parameters always stay: they are the
//! computation's signature.

use tessera_hlo::{Computation, Module, Opcode};

use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        let mut changed = false;
        for comp in &mut module.computations {
            let live = live_instructions(comp);
            if live.iter().any(|&l| !l) {
                comp.retain_instructions(&live);
                changed = true;
            }
        }
        let mut live = vec![false; module.computations.len()];
        let mut stack = vec![module.entry];
        while let Some(c) = stack.pop() {
            if std::mem::replace(&mut live[c.index()], true) {
                continue;
            }
            for inst in &module.comp(c).instructions {
                stack.extend(inst.called_computations().into_iter().filter(|d| d.index() < live.len()));
            }
        }
        if live.iter().any(|&l| !l) {
            module.retain_computations(&live);
            changed = true;
        }
        Ok(changed)
    }
}

/// XLA keeps these even when unused: removing them would change what the program does.
pub(crate) fn has_side_effect(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        Parameter
            | Infeed
            | Outfeed
            | Send
            | SendDone
            | Recv
            | RecvDone
            | CustomCall
            | Rng
            | RngGetAndUpdateState
            | AllReduce
            | AllReduceStart
            | AllReduceDone
            | AllGather
            | AllGatherStart
            | AllGatherDone
            | AllToAll
            | CollectivePermute
            | CollectivePermuteStart
            | CollectivePermuteDone
            | CollectiveBroadcast
            | ReduceScatter
            | RaggedAllToAll
            | AsyncStart
            | AsyncUpdate
            | AsyncDone
            | CopyStart
            | CopyDone
    )
}

pub(crate) fn live_instructions(comp: &Computation) -> Vec<bool> {
    let n = comp.instructions.len();
    let mut live = vec![false; n];
    let mut stack: Vec<usize> =
        comp.ids().filter(|&id| has_side_effect(comp.inst(id).opcode)).map(|id| id.index()).collect();
    stack.push(comp.root.index());
    while let Some(i) = stack.pop() {
        if i >= n || std::mem::replace(&mut live[i], true) {
            continue;
        }
        let inst = &comp.instructions[i];
        stack.extend(inst.operands.iter().chain(&inst.control_predecessors).map(|o| o.index()));
    }
    live
}
