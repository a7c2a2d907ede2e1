//! A computation: a list of instructions, one of them the root.

use std::collections::HashMap;

use super::{InstId, Instruction, Opcode};
use crate::shape::Shape;

#[derive(Clone, Debug, PartialEq)]
pub struct Computation {
    /// The name without XLA's `%` prefix.
    pub name: String,
    /// In text order; every operand of an instruction is another instruction of this list.
    pub instructions: Vec<Instruction>,
    pub root: InstId,
    /// `execution_thread="..."` when the text gives one.
    pub execution_thread: Option<String>,
}

impl Computation {
    pub fn new(name: impl Into<String>) -> Computation {
        Computation { name: name.into(), instructions: Vec::new(), root: InstId(0), execution_thread: None }
    }

    /// Appends an instruction and returns its id.
    pub fn add(&mut self, inst: Instruction) -> InstId {
        self.instructions.push(inst);
        InstId(self.instructions.len() as u32 - 1)
    }

    pub fn inst(&self, id: InstId) -> &Instruction {
        &self.instructions[id.index()]
    }

    pub fn inst_mut(&mut self, id: InstId) -> &mut Instruction {
        &mut self.instructions[id.index()]
    }

    pub fn get(&self, id: InstId) -> Option<&Instruction> {
        self.instructions.get(id.index())
    }

    pub fn root_inst(&self) -> &Instruction {
        self.inst(self.root)
    }

    pub fn ids(&self) -> impl Iterator<Item = InstId> {
        (0..self.instructions.len() as u32).map(InstId)
    }

    /// Parameter instructions ordered by parameter number.
    pub fn parameters(&self) -> Vec<InstId> {
        let mut params: Vec<(i64, InstId)> = self
            .ids()
            .filter_map(|id| {
                let i = self.inst(id);
                (i.opcode == Opcode::Parameter).then(|| (i.parameter_number().unwrap_or(-1), id))
            })
            .collect();
        params.sort();
        params.into_iter().map(|(_, id)| id).collect()
    }

    pub fn parameter_shapes(&self) -> Vec<Shape> {
        self.parameters().into_iter().map(|id| self.inst(id).shape.clone()).collect()
    }

    /// Finds an instruction by name (`%` prefix optional).
    pub fn find(&self, name: &str) -> Option<InstId> {
        let name = name.strip_prefix('%').unwrap_or(name);
        self.ids().find(|&id| self.inst(id).name == name)
    }

    /// A name-to-id index, for passes that look up many names.
    pub fn name_index(&self) -> HashMap<&str, InstId> {
        self.ids().map(|id| (self.inst(id).name.as_str(), id)).collect()
    }

    /// Instructions in an order where every operand (and control predecessor) comes before
    /// its users; instructions unreachable from the root are included too. Cycles are
    /// broken arbitrarily (the verifier reports them).
    pub fn post_order(&self) -> Vec<InstId> {
        let n = self.instructions.len();
        let mut state = vec![0u8; n]; // 0 = new, 1 = on stack, 2 = done
        let mut order = Vec::with_capacity(n);
        let mut roots: Vec<InstId> = self.ids().collect();
        // Visit the root last so it ends the order when everything is reachable.
        roots.retain(|&id| id != self.root);
        roots.push(self.root);
        for start in roots {
            if start.index() >= n || state[start.index()] != 0 {
                continue;
            }
            // Iterative DFS: deep graphs must not overflow the stack.
            let mut stack = vec![(start, 0usize)];
            state[start.index()] = 1;
            while let Some(&mut (id, ref mut next)) = stack.last_mut() {
                let inst = self.inst(id);
                let deps: Vec<InstId> = inst.operands.iter().chain(&inst.control_predecessors).copied().collect();
                if let Some(&dep) = deps.get(*next) {
                    *next += 1;
                    if dep.index() < n && state[dep.index()] == 0 {
                        state[dep.index()] = 1;
                        stack.push((dep, 0));
                    }
                } else {
                    state[id.index()] = 2;
                    order.push(id);
                    stack.pop();
                }
            }
        }
        order
    }
}
