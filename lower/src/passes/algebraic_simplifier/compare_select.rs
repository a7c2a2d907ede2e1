//! Canonical forms of compares and selects, as XLA's simplifier makes them:
//! - a constant compared with a non-constant moves to the right, the direction mirrored
//!   (`compare(2, x), direction=LT` is `compare(x, 2), direction=GT`), so later rules and CSE
//!   see one form;
//! - an integer compared with itself is a constant (floats are not: NaN is unequal to
//!   itself);
//! - a pred compared with true for equality, or with false for inequality, is itself;
//! - a select on a negated predicate swaps its branches instead.

use tessera_hlo::ir::{AttrList, AttrValue, ComparisonDirection as Dir};
use tessera_hlo::{Computation, ElementType, InstId, Literal, Opcode, Shape};

use super::splat;
use crate::passes::rewrite::{add_constant, become_broadcast};

/// The operand compare `id` equals, when it is one; the rule's name.
pub(super) fn identity(comp: &Computation, id: InstId) -> Option<(InstId, &'static str)> {
    let inst = comp.inst(id);
    let &[a, b] = inst.operands.as_slice() else { return None };
    if inst.opcode != Opcode::Compare || comp.inst(a).shape.element_type() != ElementType::Pred {
        return None;
    }
    match (direction(comp, id)?, splat(comp, b)?) {
        (Dir::Eq, v) if v != 0.0 => Some((a, "pred == true is itself")),
        (Dir::Ne, 0.0) => Some((a, "pred != false is itself")),
        _ => None,
    }
}

pub(super) fn canonical(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    match comp.inst(id).opcode {
        Opcode::Compare => compare(comp, id),
        Opcode::Select => select_of_not(comp, id),
        _ => None,
    }
}

fn direction(comp: &Computation, id: InstId) -> Option<Dir> {
    comp.inst(id).attr_word("direction").and_then(Dir::parse)
}

fn compare(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let &[a, b] = comp.inst(id).operands.as_slice() else { return None };
    let dir = direction(comp, id)?;
    let et = comp.inst(a).shape.element_type();
    if a == b && (et.is_integral() || et == ElementType::Pred) {
        let value = matches!(dir, Dir::Eq | Dir::Ge | Dir::Le);
        let lit = Literal::from_bits_vec(Shape::scalar(ElementType::Pred), vec![u128::from(value)]).ok()?;
        let c = add_constant(comp, &format!("{}.value", comp.inst(id).name), lit);
        become_broadcast(comp, id, c, vec![]);
        return Some("an integer compared with itself: a constant");
    }
    if splat(comp, a).is_none() || splat(comp, b).is_some() {
        return None;
    }
    let mirrored = match dir {
        Dir::Lt => Dir::Gt,
        Dir::Gt => Dir::Lt,
        Dir::Le => Dir::Ge,
        Dir::Ge => Dir::Le,
        d => d,
    };
    let inst = comp.inst_mut(id);
    inst.operands = vec![b, a];
    inst.set_attr("direction", AttrValue::Enum(mirrored.name().to_string()));
    Some("a constant compared with a value: the constant on the right")
}

fn select_of_not(comp: &mut Computation, id: InstId) -> Option<&'static str> {
    let &[p, a, b] = comp.inst(id).operands.as_slice() else { return None };
    let not = comp.inst(p);
    if not.opcode != Opcode::Not || not.shape.element_type() != ElementType::Pred {
        return None;
    }
    let q = not.operands[0];
    comp.inst_mut(id).operands = vec![q, b, a];
    Some("select on a negated predicate: the branches swapped")
}
