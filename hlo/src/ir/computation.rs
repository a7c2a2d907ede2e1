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

    /// Instructions with every operand and control predecessor before its users, in XLA's
    /// `MakeInstructionPostOrder` order (a depth-first walk from each instruction without users,
    /// in instruction order), so printing matches XLA's. Instructions on a cycle come last.
    pub fn post_order(&self) -> Vec<InstId> {
        let n = self.instructions.len();
        let mut has_users = vec![false; n];
        for inst in &self.instructions {
            for &o in &inst.operands {
                if let Some(slot) = has_users.get_mut(o.index()) {
                    *slot = true;
                }
            }
        }
        let mut state = vec![0u8; n];
        let mut order = Vec::with_capacity(n);
        let mut stack = Vec::new();
        for start in self.ids() {
            if has_users[start.index()] {
                continue;
            }
            stack.push(start);
            while let Some(&cur) = stack.last() {
                let i = cur.index();
                match state[i] {
                    1 => {
                        stack.pop();
                        state[i] = 2;
                        order.push(cur);
                    }
                    2 => {
                        stack.pop();
                    }
                    _ => {
                        state[i] = 1;
                        let inst = self.inst(cur);
                        for &o in inst.operands.iter().rev() {
                            if o.index() < n && state[o.index()] != 2 {
                                stack.push(o);
                            }
                        }
                        for &p in &inst.control_predecessors {
                            if p.index() < n && state[p.index()] != 2 {
                                stack.push(p);
                            }
                        }
                    }
                }
            }
        }
        // Instructions on a cycle of uses are never users-free; keep them printable.
        for id in self.ids() {
            if state[id.index()] != 2 {
                order.push(id);
            }
        }
        order
    }

    /// An instruction on a dependency cycle (operands and control predecessors), if any.
    pub fn find_cycle(&self) -> Option<InstId> {
        let n = self.instructions.len();
        let mut state = vec![0u8; n];
        for start in 0..n {
            if state[start] != 0 {
                continue;
            }
            let mut stack = vec![(start, 0usize)];
            state[start] = 1;
            while let Some(&mut (i, ref mut next)) = stack.last_mut() {
                let inst = &self.instructions[i];
                let dep = match inst.operands.get(*next) {
                    Some(d) => Some(d),
                    None => inst.control_predecessors.get(*next - inst.operands.len()),
                };
                match dep {
                    Some(d) => {
                        *next += 1;
                        let d = d.index();
                        match state.get(d) {
                            Some(0) => {
                                state[d] = 1;
                                stack.push((d, 0));
                            }
                            Some(1) => return Some(InstId(d as u32)),
                            _ => {}
                        }
                    }
                    None => {
                        state[i] = 2;
                        stack.pop();
                    }
                }
            }
        }
        None
    }
}

/// Mutation helpers for passes: they keep ids dense and every reference (operands, control
/// predecessors, the root) consistent.
impl Computation {
    /// Each instruction's users (instructions with it as an operand, once per user, in
    /// instruction order).
    pub fn users(&self) -> Vec<Vec<InstId>> {
        let mut users = vec![Vec::new(); self.instructions.len()];
        for id in self.ids() {
            let mut ops = self.inst(id).operands.clone();
            ops.sort();
            ops.dedup();
            for o in ops {
                if let Some(u) = users.get_mut(o.index()) {
                    u.push(id);
                }
            }
        }
        users
    }

    /// Makes every use of `old` (as an operand, a control predecessor or the root) a use of
    /// `new`, except in `new` itself so that `new` may be built on top of `old`.
    pub fn replace_all_uses(&mut self, old: InstId, new: InstId) {
        for (i, inst) in self.instructions.iter_mut().enumerate() {
            if i == new.index() {
                continue;
            }
            for o in inst.operands.iter_mut().chain(inst.control_predecessors.iter_mut()) {
                if *o == old {
                    *o = new;
                }
            }
        }
        if self.root == old {
            self.root = new;
        }
    }

    /// Keeps the instructions whose `keep` flag is set, renumbering ids in order. Returns
    /// each old id's new id. References to removed instructions are dropped from control
    /// predecessors; the caller must not remove an operand of a kept instruction or the root.
    pub fn retain_instructions(&mut self, keep: &[bool]) -> Vec<Option<InstId>> {
        let mut remap = vec![None; self.instructions.len()];
        let mut next = 0u32;
        for (i, slot) in remap.iter_mut().enumerate() {
            if keep.get(i).copied().unwrap_or(false) {
                *slot = Some(InstId(next));
                next += 1;
            }
        }
        let old = std::mem::take(&mut self.instructions);
        for (i, mut inst) in old.into_iter().enumerate() {
            if remap[i].is_none() {
                continue;
            }
            for o in &mut inst.operands {
                *o = remap.get(o.index()).copied().flatten().unwrap_or(*o);
            }
            inst.control_predecessors =
                inst.control_predecessors.iter().filter_map(|p| remap.get(p.index()).copied().flatten()).collect();
            self.instructions.push(inst);
        }
        self.root = remap.get(self.root.index()).copied().flatten().unwrap_or(self.root);
        remap
    }

    /// Reorders the instructions so that every operand and control predecessor comes before
    /// its users, keeping the stored order otherwise: an instruction that must move is pulled
    /// in just before its first user. Passes that append instructions call it so that a
    /// scheduled module, which prints in stored order, stays printable. Returns whether
    /// anything moved; a computation with a dependency cycle is left as it is.
    pub fn order_operands_first(&mut self) -> bool {
        if self.find_cycle().is_some() {
            return false;
        }
        let n = self.instructions.len();
        let mut placed = vec![false; n];
        let mut order: Vec<usize> = Vec::with_capacity(n);
        for start in 0..n {
            // Depth-first: dependencies in operand order, then the instruction itself.
            let mut stack = vec![(start, false)];
            while let Some((i, expanded)) = stack.pop() {
                if placed[i] {
                    continue;
                }
                if expanded {
                    placed[i] = true;
                    order.push(i);
                    continue;
                }
                stack.push((i, true));
                let inst = &self.instructions[i];
                let deps = inst.operands.iter().chain(&inst.control_predecessors).map(|d| d.index());
                let deps: Vec<usize> = deps.filter(|&d| d < n && !placed[d]).collect();
                stack.extend(deps.into_iter().rev().map(|d| (d, false)));
            }
        }
        if order.iter().enumerate().all(|(k, &i)| k == i) {
            return false;
        }
        let mut new_id = vec![InstId(0); n];
        for (k, &i) in order.iter().enumerate() {
            new_id[i] = InstId(k as u32);
        }
        let mut old: Vec<Option<Instruction>> = std::mem::take(&mut self.instructions).into_iter().map(Some).collect();
        for &i in &order {
            let mut inst = old[i].take().expect("each instruction is placed once");
            for o in inst.operands.iter_mut().chain(inst.control_predecessors.iter_mut()) {
                *o = new_id[o.index()];
            }
            self.instructions.push(inst);
        }
        self.root = new_id.get(self.root.index()).copied().unwrap_or(self.root);
        true
    }

    /// `base` if no instruction has that name, else `base.1`, `base.2`, ...
    pub fn unique_name(&self, base: &str) -> String {
        if self.find(base).is_none() {
            return base.to_string();
        }
        (1..).map(|k| format!("{base}.{k}")).find(|n| self.find(n).is_none()).unwrap_or_default()
    }
}
