//! The module verifier: structure first (names, references, parameters, roots, cycles, the
//! call graph), then every instruction's declared shape against the inferred one, then the
//! entry signature.
//!
//! Findings are collected rather than stopping at the first, so a tool can show them all;
//! an instruction whose operands do not exist is not shape-checked (there is nothing to
//! infer from), but everything else still is.

use std::collections::HashSet;

use super::{infer_shape, ShapeError, VerifyError};
use crate::ir::{AttrList, AttrValue, CompId, Computation, Module, Opcode, ProgramShape};
use crate::shape::{Shape, UNBOUNDED};

/// Verifies a module, returning the first finding.
pub fn verify(module: &Module) -> Result<(), VerifyError> {
    match verify_all(module).into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Every finding, in a stable order: module structure, then computations in module order.
pub fn verify_all(module: &Module) -> Vec<VerifyError> {
    let mut v = Verifier { module, errors: Vec::new() };
    v.run();
    v.errors
}

struct Verifier<'m> {
    module: &'m Module,
    errors: Vec<VerifyError>,
}

impl<'m> Verifier<'m> {
    fn report(&mut self, comp: Option<&Computation>, inst: Option<&str>, rule: &'static str, message: String) {
        self.errors.push(VerifyError {
            computation: comp.map(|c| c.name.clone()),
            instruction: inst.map(str::to_string),
            rule,
            message,
        });
    }

    fn run(&mut self) {
        let m = self.module;
        if m.computations.is_empty() {
            self.report(None, None, "module.no_computations", "module has no computations".into());
            return;
        }
        if m.get(m.entry).is_none() {
            let msg =
                format!("entry computation #{} does not exist ({} computations)", m.entry.0, m.computations.len());
            self.report(None, None, "module.entry_missing", msg);
        }
        self.check_names();
        for comp in &m.computations {
            self.check_structure(comp);
        }
        self.check_call_graph();
        for comp in &m.computations {
            self.check_shapes(comp);
        }
        self.check_entry_layout();
        self.check_io_aliases();
    }

    /// `input_output_alias`, as XLA's `HloInputOutputAliasConfig::Verify`: each entry pairs
    /// an array of the entry's result with an array parameter (or an array inside a tuple
    /// parameter) of the same dimensions and element type; no output and no parameter array
    /// is named twice.
    fn check_io_aliases(&mut self) {
        let m = self.module;
        let (Some(AttrValue::IoAliases(aliases)), Some(entry)) = (m.attr("input_output_alias"), m.get(m.entry)) else {
            return;
        };
        let params = entry.parameters();
        let Some(root) = entry.get(entry.root) else { return };
        let mut outputs = HashSet::new();
        let mut inputs = HashSet::new();
        for a in aliases {
            let what = format!(
                "input_output_alias {{{}}}: ({}, {{{}}})",
                join(&a.output_index),
                a.parameter,
                join(&a.parameter_index)
            );
            let param = usize::try_from(a.parameter).ok().and_then(|p| params.get(p)).and_then(|&id| entry.get(id));
            let Some(param) = param else {
                let msg = format!("{what}: the entry computation has {} parameters", params.len());
                self.report(Some(entry), None, "module.io_alias_invalid", msg);
                continue;
            };
            let (Some(out), Some(input)) =
                (root.shape.subshape(&a.output_index), param.shape.subshape(&a.parameter_index))
            else {
                let msg =
                    format!("{what}: no such array in the result {} or the parameter {}", root.shape, param.shape);
                self.report(Some(entry), None, "module.io_alias_invalid", msg);
                continue;
            };
            if !(out.is_array() && input.is_array() && out.without_layout() == input.without_layout()) {
                let msg = format!("{what}: the output {out} and the parameter {input} are not arrays of one shape");
                self.report(Some(entry), None, "module.io_alias_invalid", msg);
            }
            if !outputs.insert(a.output_index.clone()) || !inputs.insert((a.parameter, a.parameter_index.clone())) {
                let msg = format!("{what}: an output or a parameter is aliased twice");
                self.report(Some(entry), None, "module.io_alias_invalid", msg);
            }
        }
    }

    /// Computation names are unique, and instruction names are unique within their
    /// computation. (XLA's parser scopes names per computation and uniquifies them module-wide
    /// afterwards, so hand-written modules may reuse a name in another computation.)
    fn check_names(&mut self) {
        let m = self.module;
        let mut comps = HashSet::new();
        for comp in &m.computations {
            if !comps.insert(comp.name.as_str()) {
                let msg = format!("computation name {} is used more than once", comp.name);
                self.report(Some(comp), None, "module.duplicate_computation_name", msg);
            }
            let mut insts = HashSet::new();
            for inst in &comp.instructions {
                if !insts.insert(inst.name.as_str()) {
                    let msg = format!("instruction name %{} is used more than once", inst.name);
                    self.report(Some(comp), Some(&inst.name), "instruction.duplicate_name", msg);
                }
            }
        }
    }

    fn check_structure(&mut self, comp: &Computation) {
        let m = self.module;
        let n = comp.instructions.len();
        if n == 0 {
            self.report(Some(comp), None, "computation.empty", "computation has no instructions".into());
            return;
        }
        if comp.root.index() >= n {
            let msg = format!("root #{} does not exist ({} instructions)", comp.root.0, n);
            self.report(Some(comp), None, "computation.root_missing", msg);
        }
        let mut params: Vec<(i64, &str)> = Vec::new();
        for inst in &comp.instructions {
            let name = Some(inst.name.as_str());
            for (i, op) in inst.operands.iter().enumerate() {
                if op.index() >= n {
                    let msg = format!("operand {i} refers to instruction #{} which does not exist", op.0);
                    self.report(Some(comp), name, "instruction.operand_missing", msg);
                }
            }
            for p in &inst.control_predecessors {
                if p.index() >= n {
                    let msg = format!("control predecessor #{} does not exist", p.0);
                    self.report(Some(comp), name, "instruction.operand_missing", msg);
                }
            }
            for c in inst.called_computations() {
                if m.get(c).is_none() {
                    let msg = format!("called computation #{} does not exist", c.0);
                    self.report(Some(comp), name, "instruction.called_computation_missing", msg);
                }
            }
            if let Err(msg) = check_shape(&inst.shape) {
                let rule = if msg.0 { "shape.invalid_layout" } else { "shape.invalid" };
                self.report(Some(comp), name, rule, format!("declared shape {}: {}", inst.shape, msg.1));
            }
            if inst.opcode == Opcode::Parameter {
                if let Some(k) = inst.parameter_number() {
                    params.push((k, &inst.name));
                }
            }
        }
        params.sort();
        for w in params.windows(2) {
            if w[0].0 == w[1].0 {
                let msg = format!("parameter number {} is used by both %{} and %{}", w[0].0, w[0].1, w[1].1);
                self.report(Some(comp), Some(w[1].1), "parameter.duplicate_number", msg);
            }
        }
        let mut expected = 0i64;
        for &(k, name) in &params {
            if k > expected {
                let msg =
                    format!("parameter numbers must be 0..{} without gaps, but {expected} is missing", params.len());
                self.report(Some(comp), Some(name), "parameter.numbers_not_contiguous", msg);
                break;
            }
            expected = expected.max(k.saturating_add(1));
        }
        if let Some(id) = comp.find_cycle() {
            let name = comp.get(id).map(|i| i.name.as_str());
            let msg = "instruction depends on itself through its operands or control predecessors".to_string();
            self.report(Some(comp), name, "computation.cycle", msg);
        }
    }

    /// The entry is not called, and no computation calls itself, directly or not.
    fn check_call_graph(&mut self) {
        let m = self.module;
        let count = m.computations.len();
        let mut callees: Vec<Vec<usize>> = vec![Vec::new(); count];
        for (ci, comp) in m.computations.iter().enumerate() {
            for inst in &comp.instructions {
                for c in inst.called_computations() {
                    if c.index() >= count {
                        continue;
                    }
                    if c == m.entry {
                        let msg = format!("calls the entry computation {}", m.computations[c.index()].name);
                        self.report(Some(comp), Some(&inst.name), "module.entry_called", msg);
                    }
                    callees[ci].push(c.index());
                }
            }
        }
        // Iterative DFS: 0 new, 1 on the stack, 2 done.
        let mut state = vec![0u8; count];
        for start in 0..count {
            if state[start] != 0 {
                continue;
            }
            let mut stack = vec![(start, 0usize)];
            state[start] = 1;
            while let Some(&mut (c, ref mut next)) = stack.last_mut() {
                if let Some(&callee) = callees[c].get(*next) {
                    *next += 1;
                    match state[callee] {
                        0 => {
                            state[callee] = 1;
                            stack.push((callee, 0));
                        }
                        1 => {
                            let comp = &m.computations[c];
                            let msg =
                                format!("calls {}, which leads back to {}", m.computations[callee].name, comp.name);
                            self.report(Some(comp), None, "module.recursive_call", msg);
                            // One report per cycle is enough; finish this edge list.
                            state[callee] = 2;
                        }
                        _ => {}
                    }
                } else {
                    state[c] = 2;
                    stack.pop();
                }
            }
        }
    }

    fn check_shapes(&mut self, comp: &Computation) {
        let m = self.module;
        let called = |id: CompId| m.get(id).and_then(signature);
        for inst in &comp.instructions {
            let operands: Option<Vec<&Shape>> =
                inst.operands.iter().map(|&id| comp.get(id).map(|o| &o.shape)).collect();
            let Some(operands) = operands else { continue };
            match infer_shape(inst, &operands, &called) {
                Ok(inferred) => {
                    if !same_shape(&inst.shape, &inferred) {
                        let msg = format!(
                            "declared shape {} does not match the inferred shape {}",
                            inst.shape.to_string_without_layout(),
                            inferred.to_string_without_layout()
                        );
                        self.report(Some(comp), Some(&inst.name), "shape.mismatch", msg);
                    }
                }
                Err(ShapeError { rule, message }) => self.report(Some(comp), Some(&inst.name), rule, message),
            }
        }
    }

    /// `entry_computation_layout` states the entry's signature with layouts: it must agree
    /// with the entry's parameters and root, and its layouts must be valid.
    fn check_entry_layout(&mut self) {
        let m = self.module;
        let (Some(layout), Some(entry)) = (m.entry_computation_layout(), m.get(m.entry)) else {
            return;
        };
        let params = entry.parameters();
        if layout.parameters.len() != params.len() {
            let msg = format!(
                "entry_computation_layout has {} parameters but the entry computation has {}",
                layout.parameters.len(),
                params.len()
            );
            self.report(Some(entry), None, "module.entry_layout_mismatch", msg);
        }
        for (i, (want, &id)) in layout.parameters.iter().zip(&params).enumerate() {
            let inst = entry.inst(id);
            self.check_entry_shape(entry, &inst.name, want, &inst.shape, &format!("parameter {i}"));
        }
        if let Some(root) = entry.get(entry.root) {
            self.check_entry_shape(entry, &root.name, &layout.result, &root.shape, "result");
        }
    }

    fn check_entry_shape(&mut self, entry: &Computation, name: &str, want: &Shape, have: &Shape, what: &str) {
        if let Err((_, msg)) = check_shape(want) {
            let msg = format!("entry_computation_layout {what} {want}: {msg}");
            self.report(Some(entry), Some(name), "module.entry_layout_invalid", msg);
        } else if !same_shape(want, have) {
            let msg = format!("entry_computation_layout {what} is {want} but the entry computation has {have}");
            self.report(Some(entry), Some(name), "module.entry_layout_mismatch", msg);
        }
    }
}

fn join(index: &[i64]) -> String {
    index.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// A computation's signature: parameter shapes by parameter number, and the root's shape.
fn signature(comp: &Computation) -> Option<ProgramShape> {
    let root = comp.get(comp.root)?;
    let parameters = comp.parameters().into_iter().filter_map(|id| comp.get(id)).map(|i| i.shape.clone()).collect();
    Some(ProgramShape { parameters, result: root.shape.clone() })
}

/// Equal up to layouts and dynamic-dimension flags (XLA's `ShapeUtil::Compatible`).
fn same_shape(a: &Shape, b: &Shape) -> bool {
    match (a, b) {
        (Shape::Array(x), Shape::Array(y)) => x.element_type == y.element_type && x.dims == y.dims,
        (Shape::Tuple(x), Shape::Tuple(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_shape(p, q)),
        (Shape::Token, Shape::Token) | (Shape::Opaque, Shape::Opaque) => true,
        _ => false,
    }
}

/// Whether a shape is well formed; the error says whether the layout is what is wrong.
fn check_shape(s: &Shape) -> Result<(), (bool, String)> {
    match s {
        Shape::Array(a) => {
            if !a.element_type.is_array_type() {
                return Err((false, format!("{} is not an array element type", a.element_type)));
            }
            if a.dynamic.len() != a.dims.len() {
                return Err((false, format!("{} dimensions but {} dynamic flags", a.dims.len(), a.dynamic.len())));
            }
            for (i, (&d, &dynamic)) in a.dims.iter().zip(&a.dynamic).enumerate() {
                if d < 0 && !(d == UNBOUNDED && dynamic) {
                    return Err((false, format!("dimension {i} has negative size {d}")));
                }
            }
            if let Some(layout) = &a.layout {
                layout.validate_for_rank(a.rank()).map_err(|e| (true, e))?;
            }
            Ok(())
        }
        Shape::Tuple(elems) => elems.iter().try_for_each(check_shape),
        Shape::Token | Shape::Opaque => Ok(()),
    }
}
