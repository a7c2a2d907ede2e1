//! Prints a [`Module`] as XLA prints HLO text, in its default ("long") form or its
//! `ShortParsable` ("short") form. Computations come in XLA's post order (callees first) and
//! instructions in XLA's post order too, unless the module is scheduled, when the stored
//! order is the schedule.

use std::collections::HashSet;

use super::attr_parser::attr_value_to_string;
use super::literal_text::literal_to_string;
use crate::ir::{AttrList, AttrValue, Attribute, CompId, Computation, InstId, Instruction, Module, Opcode, Payload};
use crate::shape::Shape;

/// Which of XLA's print forms to produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrintOptions {
    /// `%` before instruction and computation names.
    pub print_percent: bool,
    /// `f32[2]{0} %x` instead of `x` for operands.
    pub print_operand_shape: bool,
    /// `%name (p: f32[]) -> f32[] {` instead of `name {`.
    pub print_program_shape: bool,
    pub print_metadata: bool,
    pub print_backend_config: bool,
    pub print_control_dependencies: bool,
    /// `/*index=N*/` before every N-th operand (0: never).
    pub operand_index_interval: usize,
}

impl PrintOptions {
    /// XLA's default form with operand shapes and large constants.
    pub fn long() -> PrintOptions {
        PrintOptions {
            print_percent: true,
            print_operand_shape: true,
            print_program_shape: true,
            print_metadata: true,
            print_backend_config: true,
            print_control_dependencies: true,
            operand_index_interval: 5,
        }
    }

    /// XLA's `HloPrintOptions::ShortParsable()`.
    pub fn short() -> PrintOptions {
        PrintOptions {
            print_percent: false,
            print_operand_shape: false,
            print_program_shape: false,
            print_metadata: false,
            print_backend_config: false,
            print_control_dependencies: false,
            operand_index_interval: 0,
        }
    }
}

impl Default for PrintOptions {
    fn default() -> PrintOptions {
        PrintOptions::long()
    }
}

/// Attributes XLA prints after `control-predecessors`.
const AFTER_CONTROL_DEPS: &[&str] = &["statistics", "origin", "original_value", "metadata", "backend_config"];

/// Prints a module in the given form.
pub fn print_module(module: &Module, options: &PrintOptions) -> String {
    Printer { module, options, sugar: async_sugar_computations(module) }.module()
}

/// Prints one computation (as it appears inside a module).
pub fn print_computation(module: &Module, comp: CompId, options: &PrintOptions) -> String {
    let p = Printer { module, options, sugar: async_sugar_computations(module) };
    let mut out = String::new();
    p.computation(comp, &mut out);
    out
}

struct Printer<'a> {
    module: &'a Module,
    options: &'a PrintOptions,
    /// Async-wrapped computations printed as `X-start`/`X-update`/`X-done` sugar.
    sugar: HashSet<CompId>,
}

/// Computations called by async ops whose body is a single instruction over parameters: XLA
/// prints their async ops as `X-start` etc. and leaves the computations out.
fn async_sugar_computations(module: &Module) -> HashSet<CompId> {
    let mut out = HashSet::new();
    for comp in &module.computations {
        for inst in &comp.instructions {
            if inst.opcode == Opcode::AsyncStart {
                if let Some(c) = inst.called("calls") {
                    if module.get(c).is_some_and(single_instruction) {
                        out.insert(c);
                    }
                }
            }
        }
    }
    out
}

fn single_instruction(comp: &Computation) -> bool {
    comp.ids().all(|id| id == comp.root || comp.inst(id).opcode == Opcode::Parameter)
}

/// XLA's `MakeComputationPostOrder`: callees before callers, roots in module order.
pub fn computation_post_order(module: &Module) -> Vec<CompId> {
    let mut called = HashSet::new();
    for comp in &module.computations {
        for inst in &comp.instructions {
            called.extend(inst.called_computations());
        }
    }
    let mut added = HashSet::new();
    let mut order = Vec::new();
    fn visit(module: &Module, c: CompId, added: &mut HashSet<CompId>, order: &mut Vec<CompId>, depth: usize) {
        if depth > 1_000 || module.get(c).is_none() || !added.insert(c) {
            return;
        }
        let comp = module.comp(c);
        for id in comp.post_order() {
            for callee in callees_in_xla_order(comp.inst(id)) {
                visit(module, callee, added, order, depth + 1);
            }
        }
        order.push(c);
    }
    for c in module.comp_ids() {
        if !called.contains(&c) {
            visit(module, c, &mut added, &mut order, 0);
        }
    }
    for c in module.comp_ids() {
        if !added.contains(&c) {
            visit(module, c, &mut added, &mut order, 0);
        }
    }
    order
}

/// Called computations in the order XLA keeps them: a while loop stores its body before
/// its condition, whatever order the text names them in.
fn callees_in_xla_order(inst: &Instruction) -> Vec<CompId> {
    if inst.opcode == Opcode::While {
        if let (Some(body), Some(cond)) = (inst.called("body"), inst.called("condition")) {
            return vec![body, cond];
        }
    }
    inst.called_computations()
}

/// A shape with or without layouts (signatures print none).
fn shape_text(shape: &Shape, with_layout: bool) -> String {
    if with_layout {
        shape.to_string()
    } else {
        shape.to_string_without_layout()
    }
}

impl Printer<'_> {
    fn pct(&self) -> &'static str {
        if self.options.print_percent {
            "%"
        } else {
            ""
        }
    }

    fn comp_name(&self, id: CompId) -> String {
        match self.module.get(id) {
            Some(c) => format!("{}{}", self.pct(), c.name),
            None => format!("{}<unknown computation {}>", self.pct(), id.0),
        }
    }

    fn module(&self) -> String {
        let m = self.module;
        let mut out = format!("HloModule {}", m.name);
        for a in &m.attrs {
            out.push_str(if a.name == "debug_attributes" { ",\n" } else { ", " });
            out.push_str(&a.name);
            out.push('=');
            out.push_str(&self.value(&a.value));
            if a.name == "origin_recovery_table" {
                out.push('\n');
            }
        }
        out.push_str("\n\n");
        if let Some(tables) = &m.stack_frame_tables {
            out.push_str(tables.trim());
            out.push_str("\n\n\n");
        }
        for c in computation_post_order(m) {
            if self.sugar.contains(&c) {
                continue;
            }
            if c == m.entry {
                out.push_str("ENTRY ");
            }
            self.computation(c, &mut out);
            out.push_str("\n\n");
        }
        out
    }

    fn value(&self, v: &AttrValue) -> String {
        attr_value_to_string(v, &|id| self.comp_name(id))
    }

    fn computation(&self, id: CompId, out: &mut String) {
        let comp = self.module.comp(id);
        out.push_str(self.pct());
        out.push_str(&comp.name);
        if self.options.print_program_shape {
            out.push_str(" (");
            for (i, p) in comp.parameters().into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let inst = comp.inst(p);
                out.push_str(&format!("{}: {}", inst.name, shape_text(&inst.shape, false)));
            }
            out.push_str(") -> ");
            if let Some(root) = comp.get(comp.root) {
                out.push_str(&shape_text(&root.shape, false));
            }
        }
        out.push_str(" {\n");
        let scheduled = matches!(self.module.attr("is_scheduled"), Some(AttrValue::Bool(true)));
        let order: Vec<InstId> = if scheduled { comp.ids().collect() } else { comp.post_order() };
        for id in order {
            out.push_str("  ");
            if id == comp.root {
                out.push_str("ROOT ");
            }
            self.instruction(comp, comp.inst(id), out);
            out.push('\n');
        }
        out.push('}');
        if let Some(thread) = &comp.execution_thread {
            out.push_str(&format!(", execution_thread=\"{}\"", super::attr_parser::escape_string(thread)));
        }
    }

    /// The async-start an update/done belongs to.
    fn async_start<'c>(&self, comp: &'c Computation, inst: &'c Instruction) -> Option<&'c Instruction> {
        let mut cur = inst;
        for _ in 0..comp.instructions.len() + 1 {
            match cur.opcode {
                Opcode::AsyncStart => return Some(cur),
                Opcode::AsyncUpdate | Opcode::AsyncDone => cur = comp.get(*cur.operands.first()?)?,
                _ => return None,
            }
        }
        None
    }

    fn instruction(&self, comp: &Computation, inst: &Instruction, out: &mut String) {
        out.push_str(self.pct());
        out.push_str(&inst.name);
        out.push_str(" = ");
        out.push_str(&shape_text(&inst.shape, true));
        out.push(' ');
        // Async ops wrapping a single instruction print as that instruction's sugar.
        let mut extra_attrs: Vec<&Attribute> = Vec::new();
        let mut sugar = false;
        if matches!(inst.opcode, Opcode::AsyncStart | Opcode::AsyncUpdate | Opcode::AsyncDone) {
            if let Some(start) = self.async_start(comp, inst) {
                if let Some(wrapped) = start.called("calls").filter(|c| self.sugar.contains(c)) {
                    let root = self.module.comp(wrapped).root_inst();
                    let suffix = match inst.opcode {
                        Opcode::AsyncStart => "-start",
                        Opcode::AsyncUpdate => "-update",
                        _ => "-done",
                    };
                    out.push_str(root.opcode.name());
                    out.push_str(suffix);
                    sugar = true;
                    if inst.opcode == Opcode::AsyncStart {
                        extra_attrs.extend(root.attrs.iter());
                    }
                }
            }
        }
        if !sugar {
            out.push_str(inst.opcode.name());
        }
        out.push('(');
        match &inst.payload {
            Payload::Parameter(n) => out.push_str(&n.to_string()),
            Payload::Constant(lit) => out.push_str(&literal_to_string(lit)),
            Payload::None => {
                for (i, &o) in inst.operands.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    let interval = self.options.operand_index_interval;
                    if interval > 0 && i > 0 && i % interval == 0 {
                        out.push_str(&format!("/*index={i}*/"));
                    }
                    match comp.get(o) {
                        Some(op) => {
                            if self.options.print_operand_shape {
                                out.push_str(&shape_text(&op.shape, true));
                                out.push(' ');
                            }
                            out.push_str(self.pct());
                            out.push_str(&op.name);
                        }
                        None => out.push_str("<unknown operand>"),
                    }
                }
            }
        }
        out.push(')');
        let own = inst.attrs.iter().filter(|a| !(sugar && a.name == "calls"));
        let attrs: Vec<&Attribute> = own.chain(extra_attrs).collect();
        let deps_at = attrs.iter().position(|a| AFTER_CONTROL_DEPS.contains(&a.name.as_str())).unwrap_or(attrs.len());
        for (i, a) in attrs.iter().enumerate() {
            if i == deps_at {
                self.control_deps(comp, inst, out);
            }
            if (a.name == "metadata" && !self.options.print_metadata)
                || (a.name == "backend_config" && !self.options.print_backend_config)
            {
                continue;
            }
            out.push_str(", ");
            out.push_str(&a.name);
            out.push('=');
            out.push_str(&self.value(&a.value));
        }
        if deps_at == attrs.len() {
            self.control_deps(comp, inst, out);
        }
    }

    fn control_deps(&self, comp: &Computation, inst: &Instruction, out: &mut String) {
        if !self.options.print_control_dependencies || inst.control_predecessors.is_empty() {
            return;
        }
        let names: Vec<String> = inst
            .control_predecessors
            .iter()
            .map(|&p| format!("{}{}", self.pct(), comp.get(p).map_or("<unknown>", |i| i.name.as_str())))
            .collect();
        out.push_str(&format!(", control-predecessors={{{}}}", names.join(", ")));
    }
}
