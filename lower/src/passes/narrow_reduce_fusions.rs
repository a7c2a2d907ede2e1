//! A fusion rooted in a variadic reduce computes and stores every output of the reduce, though
//! its users often read one: JAX's `argmax` reads the positions and drops the values. When
//! every user of such a fusion is a `get-tuple-element` of one index, the fused computation's
//! root becomes that element and the users read the fusion itself. Its kernel then computes
//! and stores that output alone, in one pass over the input where it made one per output
//! (an f32[64,65536] argmax: two serial passes, the values' into a buffer nothing read), and
//! the emitter sees a reduce whose positions alone are read, which it runs in lanes when it
//! is an argmax or argmin (`emit::arg_reduce`).
//!
//! It runs after fusion, which made the fusions, and removes the `get-tuple-element`s it
//! bypasses (they would read a tuple element of an array).

use tessera_hlo::ir::{AttrList, AttrValue};
use tessera_hlo::{Instruction, Module, Opcode, Shape};

use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct NarrowReduceFusions {
    decisions: Vec<String>,
}

impl Pass for NarrowReduceFusions {
    fn name(&self) -> &'static str {
        "narrow_reduce_fusions"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.decisions.clear();
        for c in module.comp_ids().collect::<Vec<_>>() {
            let users = module.comp(c).users();
            let mut keep = vec![true; users.len()];
            for id in module.comp(c).ids().collect::<Vec<_>>() {
                let comp = module.comp(c);
                let fusion = comp.inst(id);
                let Some(callee) = fusion.called("calls").filter(|_| fusion.opcode == Opcode::Fusion) else { continue };
                let root = module.comp(callee).root_inst();
                let Shape::Tuple(outputs) = &root.shape else { continue };
                if root.opcode != Opcode::Reduce || !matches!(&fusion.shape, Shape::Tuple(_)) {
                    continue;
                }
                // A root's tuple is the computation's result, whoever else reads it.
                if comp.root == id {
                    continue;
                }
                let readers = &users[id.index()];
                let index = |u: &tessera_hlo::InstId| {
                    let user = comp.inst(*u);
                    (user.opcode == Opcode::GetTupleElement).then(|| user.attr_int("index")).flatten()
                };
                let Some(Some(kept)) = readers.first().map(index) else { continue };
                let Some(shape) = usize::try_from(kept).ok().and_then(|k| outputs.get(k)).cloned() else { continue };
                if !readers.iter().all(|u| index(u) == Some(kept)) {
                    continue;
                }
                let (fusion_name, readers) = (fusion.name.clone(), readers.clone());
                let body = module.comp_mut(callee);
                let old_root = body.root;
                let name = body.unique_name(&format!("{}.{kept}", body.inst(old_root).name));
                let element = Instruction::new(name, Opcode::GetTupleElement, shape.clone(), vec![old_root])
                    .with_attr("index", AttrValue::Int(kept));
                body.root = body.add(element);
                let comp = module.comp_mut(c);
                comp.inst_mut(id).shape = shape;
                for reader in readers {
                    comp.replace_all_uses(reader, id);
                    keep[reader.index()] = false;
                }
                self.decisions.push(format!(
                    "narrow_reduce_fusions: %{fusion_name}: computes output {kept} alone (its users read no other)"
                ));
            }
            if keep.contains(&false) {
                module.comp_mut(c).retain_instructions(&keep);
            }
        }
        Ok(!self.decisions.is_empty())
    }

    fn report(&self) -> Vec<String> {
        self.decisions.clone()
    }
}
