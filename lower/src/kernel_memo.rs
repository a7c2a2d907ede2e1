//! Kernels already lowered, found again by the structure of the computation they came from.
//! A model's layers fuse into the same computations over different buffers (a 26-layer
//! decoder: 784 kernels of a few dozen distinct ones), and a kernel is a function of its
//! computation's instructions, shapes, layouts and attributes, never of their names. So the
//! lowering emits and verifies each distinct computation once; the others get a copy under
//! their own names. Codegen's `partition::representatives` then compiles the copies once too.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use tessera_hlo::{CompId, Computation, Module};

use crate::kernel::Kernel;
use crate::passes::cse::{computation_classes, same_instructions, Classes};

pub(crate) struct KernelMemo {
    /// Called computations (reducers, comparators) by what they compute.
    classes: Classes,
    /// Entries by a hash of what `same_instructions` compares, so only likely matches are
    /// compared in full.
    buckets: HashMap<u64, Vec<Entry>>,
}

struct Entry {
    comp: Computation,
    kind: KernelKind,
    kernel: Kernel,
}

/// Which emitter made the kernel: the same computation lowers differently in place.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum KernelKind {
    Fresh,
    InPlace,
}

impl KernelMemo {
    pub(crate) fn new(module: &Module) -> KernelMemo {
        KernelMemo { classes: computation_classes(module), buckets: HashMap::new() }
    }

    /// A copy of the kernel lowered from a computation like `comp`, named `name`, with its
    /// buffers labeled by `comp`'s names.
    pub(crate) fn get(&self, comp: &Computation, kind: KernelKind, name: &str) -> Option<Kernel> {
        let entries = self.buckets.get(&key(comp, kind))?;
        let class = |c: CompId| self.classes.get(&c).copied().unwrap_or(c);
        let entry = entries
            .iter()
            .find(|e| e.kind == kind && same_instructions(&e.comp, comp, &mut |p, q| class(p) == class(q)))?;
        let mut kernel = entry.kernel.clone();
        kernel.name = name.to_string();
        relabel(&mut kernel, &entry.comp, comp);
        Some(kernel)
    }

    pub(crate) fn insert(&mut self, comp: &Computation, kind: KernelKind, kernel: &Kernel) {
        let entry = Entry { comp: comp.clone(), kind, kernel: kernel.clone() };
        self.buckets.entry(key(comp, kind)).or_default().push(entry);
    }
}

fn key(comp: &Computation, kind: KernelKind) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    kind.hash(&mut h);
    comp.root.hash(&mut h);
    for inst in &comp.instructions {
        inst.opcode.hash(&mut h);
        inst.shape.hash(&mut h);
        inst.operands.hash(&mut h);
    }
    h.finish()
}

/// Buffer labels name the instructions of the computation a kernel was emitted from
/// (`param_0`, the root, `dot.3.out_f32`): each label naming `from`'s instruction at some
/// position (the whole label, or its part before a dot) names `to`'s at that position instead.
fn relabel(kernel: &mut Kernel, from: &Computation, to: &Computation) {
    let position: HashMap<&str, usize> =
        from.instructions.iter().enumerate().map(|(i, inst)| (inst.name.as_str(), i)).collect();
    for buffer in &mut kernel.buffers {
        let label = &buffer.name;
        // The longest prefix ending before a dot (or the whole label) that is a name.
        let cut = std::iter::once(label.len())
            .chain(label.match_indices('.').map(|(i, _)| i).rev())
            .find(|&end| position.contains_key(&label[..end]));
        if let Some(end) = cut {
            let new = format!("{}{}", to.instructions[position[&label[..end]]].name, &label[end..]);
            buffer.name = new;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::text::parse_module;

    const TEXT: &str = "HloModule m
ENTRY main {
  x = f32[2,4] parameter(0)
  a = f32[2,4] multiply(x, x)
  b = f32[2,4] multiply(a, a)
  t = f32[2,4]{0,1} parameter(1)
  c = f32[2,4]{0,1} multiply(t, t)
  ROOT r = (f32[2,4], f32[2,4]{0,1}) tuple(b, c)
}";

    /// The single-op computation of instruction `name`, as the lowering wraps it.
    fn wrapped(module: &Module, name: &str) -> Computation {
        let entry = module.entry_comp();
        let id = entry.find(name).unwrap();
        crate::build_program::wrap_single_op(entry, id).0
    }

    #[test]
    fn a_computation_like_one_lowered_gets_its_kernel_under_its_own_names() {
        let module = parse_module(TEXT).unwrap();
        let mut memo = KernelMemo::new(&module);
        let (a, b, c) = (wrapped(&module, "a"), wrapped(&module, "b"), wrapped(&module, "c"));
        let kernel = crate::emit::emit_kernel_with(&module, &a, "a", false).unwrap();
        assert_eq!(kernel.buffers.last().unwrap().name, "a");
        memo.insert(&a, KernelKind::Fresh, &kernel);

        let copy = memo.get(&b, KernelKind::Fresh, "b").expect("same instructions, other names");
        let fresh = crate::emit::emit_kernel_with(&module, &b, "b", false).unwrap();
        assert_eq!(copy, fresh);
        assert_eq!(copy.name, "b");
        assert_eq!(copy.buffers.last().unwrap().name, "b");

        assert!(memo.get(&b, KernelKind::InPlace, "b").is_none(), "another emitter");
        assert!(memo.get(&c, KernelKind::Fresh, "c").is_none(), "another layout");
    }
}
