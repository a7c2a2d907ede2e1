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
