//! One HLO instruction: name, opcode, result shape, operands and attributes.

use super::attr::{AttrList, AttrValue, Attribute};
use super::{CompId, InstId, Opcode};
use crate::literal::Literal;
use crate::shape::Shape;

/// What an instruction carries between its parentheses besides operands.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    None,
    /// `parameter(N)`
    Parameter(i64),
    /// `constant(...)`
    Constant(Literal),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Instruction {
    /// The name without XLA's `%` prefix.
    pub name: String,
    pub opcode: Opcode,
    pub shape: Shape,
    pub operands: Vec<InstId>,
    pub payload: Payload,
    pub attrs: Vec<Attribute>,
    pub control_predecessors: Vec<InstId>,
}

impl AttrList for Instruction {
    fn attrs(&self) -> &[Attribute] {
        &self.attrs
    }
}

impl Instruction {
    pub fn new(name: impl Into<String>, opcode: Opcode, shape: Shape, operands: Vec<InstId>) -> Instruction {
        Instruction {
            name: name.into(),
            opcode,
            shape,
            operands,
            payload: Payload::None,
            attrs: Vec::new(),
            control_predecessors: Vec::new(),
        }
    }

    /// Appends an attribute (builder order is print order).
    pub fn with_attr(mut self, name: &str, value: AttrValue) -> Instruction {
        self.set_attr(name, value);
        self
    }

    /// Replaces an attribute's value in place, or appends it.
    pub fn set_attr(&mut self, name: &str, value: AttrValue) {
        match self.attrs.iter_mut().find(|a| a.name == name) {
            Some(a) => a.value = value,
            None => self.attrs.push(Attribute { name: name.to_string(), value }),
        }
    }

    pub fn parameter_number(&self) -> Option<i64> {
        match self.payload {
            Payload::Parameter(n) => Some(n),
            _ => None,
        }
    }

    pub fn literal(&self) -> Option<&Literal> {
        match &self.payload {
            Payload::Constant(l) => Some(l),
            _ => None,
        }
    }

    /// The computations this instruction calls (to_apply, calls, condition, body, branches,
    /// select/scatter, ...), in attribute order.
    pub fn called_computations(&self) -> Vec<CompId> {
        let mut out = Vec::new();
        for a in &self.attrs {
            match &a.value {
                AttrValue::Computation(c) => out.push(*c),
                AttrValue::Computations(cs) => out.extend(cs.iter().copied()),
                _ => {}
            }
        }
        out
    }

    /// The single computation named by an attribute such as `to_apply` or `body`.
    pub fn called(&self, attr: &str) -> Option<CompId> {
        match self.attr(attr)? {
            AttrValue::Computation(c) => Some(*c),
            _ => None,
        }
    }
}
