//! A module: computations, the entry, and module-level attributes.

use super::attr::{AttrList, AttrValue, Attribute, IoAlias, ProgramShape};
use super::{CompId, Computation};

#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    pub name: String,
    /// Header attributes after the name (`is_scheduled`, `entry_computation_layout`,
    /// `input_output_alias`, ...), in text order.
    pub attrs: Vec<Attribute>,
    /// In text order: callees usually before callers, the entry usually last.
    pub computations: Vec<Computation>,
    pub entry: CompId,
    /// The `FileNames`/`FunctionNames`/`FileLocations`/`StackFrames` tables of an optimized
    /// dump, kept verbatim: metadata refers to them, no stage reads them.
    pub stack_frame_tables: Option<String>,
}

impl AttrList for Module {
    fn attrs(&self) -> &[Attribute] {
        &self.attrs
    }
}

impl Module {
    pub fn new(name: impl Into<String>) -> Module {
        Module {
            name: name.into(),
            attrs: Vec::new(),
            computations: Vec::new(),
            entry: CompId(0),
            stack_frame_tables: None,
        }
    }

    /// Appends a computation and returns its id.
    pub fn add_computation(&mut self, comp: Computation) -> CompId {
        self.computations.push(comp);
        CompId(self.computations.len() as u32 - 1)
    }

    pub fn comp(&self, id: CompId) -> &Computation {
        &self.computations[id.index()]
    }

    pub fn comp_mut(&mut self, id: CompId) -> &mut Computation {
        &mut self.computations[id.index()]
    }

    pub fn get(&self, id: CompId) -> Option<&Computation> {
        self.computations.get(id.index())
    }

    pub fn entry_comp(&self) -> &Computation {
        self.comp(self.entry)
    }

    pub fn comp_ids(&self) -> impl Iterator<Item = CompId> {
        (0..self.computations.len() as u32).map(CompId)
    }

    /// Finds a computation by name (`%` prefix optional).
    pub fn find(&self, name: &str) -> Option<CompId> {
        let name = name.strip_prefix('%').unwrap_or(name);
        self.comp_ids().find(|&id| self.comp(id).name == name)
    }

    /// `entry_computation_layout`, when the module states one.
    pub fn entry_computation_layout(&self) -> Option<&ProgramShape> {
        match self.attr("entry_computation_layout")? {
            AttrValue::ProgramShape(p) => Some(p),
            _ => None,
        }
    }

    /// `input_output_alias` entries (empty when none).
    pub fn io_aliases(&self) -> &[IoAlias] {
        match self.attr("input_output_alias") {
            Some(AttrValue::IoAliases(a)) => a,
            _ => &[],
        }
    }

    pub fn set_attr(&mut self, name: &str, value: AttrValue) {
        match self.attrs.iter_mut().find(|a| a.name == name) {
            Some(a) => a.value = value,
            None => self.attrs.push(Attribute { name: name.to_string(), value }),
        }
    }
}

/// Mutation helpers for passes.
impl Module {
    /// Keeps the computations whose `keep` flag is set, renumbering ids in order and updating
    /// every computation reference (attributes and the entry). The entry must be kept, and no
    /// kept computation may call a removed one.
    pub fn retain_computations(&mut self, keep: &[bool]) -> Vec<Option<CompId>> {
        let mut remap = vec![None; self.computations.len()];
        let mut next = 0u32;
        for (i, slot) in remap.iter_mut().enumerate() {
            if keep.get(i).copied().unwrap_or(false) {
                *slot = Some(CompId(next));
                next += 1;
            }
        }
        let old = std::mem::take(&mut self.computations);
        self.computations = old.into_iter().enumerate().filter(|(i, _)| remap[*i].is_some()).map(|(_, c)| c).collect();
        let map = |c: &mut CompId| *c = remap.get(c.index()).copied().flatten().unwrap_or(*c);
        for comp in &mut self.computations {
            for inst in &mut comp.instructions {
                for a in &mut inst.attrs {
                    match &mut a.value {
                        AttrValue::Computation(c) => map(c),
                        AttrValue::Computations(cs) => cs.iter_mut().for_each(map),
                        _ => {}
                    }
                }
            }
        }
        map(&mut self.entry);
        remap
    }

    /// `base` if no computation has that name, else `base.1`, `base.2`, ...
    pub fn unique_computation_name(&self, base: &str) -> String {
        if self.find(base).is_none() {
            return base.to_string();
        }
        (1..).map(|k| format!("{base}.{k}")).find(|n| self.find(n).is_none()).unwrap_or_default()
    }
}
