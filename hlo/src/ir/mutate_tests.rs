//! Tests of the mutation helpers passes use (users, use replacement, removal with renumbering).

use crate::ir::{AttrValue, CompId, Computation, InstId, Instruction, Module, Opcode};
use crate::shape::Shape;
use crate::ElementType;

fn scalar() -> Shape {
    Shape::scalar(ElementType::F32)
}

fn chain() -> Computation {
    // p0, p1, a = add(p0, p1), n = negate(a), m = multiply(a, a); root n
    let mut c = Computation::new("c");
    let mut p0 = Instruction::new("p0", Opcode::Parameter, scalar(), vec![]);
    p0.payload = crate::ir::Payload::Parameter(0);
    let mut p1 = Instruction::new("p1", Opcode::Parameter, scalar(), vec![]);
    p1.payload = crate::ir::Payload::Parameter(1);
    let p0 = c.add(p0);
    let p1 = c.add(p1);
    let a = c.add(Instruction::new("a", Opcode::Add, scalar(), vec![p0, p1]));
    let n = c.add(Instruction::new("n", Opcode::Negate, scalar(), vec![a]));
    c.add(Instruction::new("m", Opcode::Multiply, scalar(), vec![a, a]));
    c.root = n;
    c
}

#[test]
fn users_are_listed_once_per_user() {
    let c = chain();
    let users = c.users();
    assert_eq!(users[2], vec![InstId(3), InstId(4)]);
    assert_eq!(users[0], vec![InstId(2)]);
    assert!(users[3].is_empty());
}

#[test]
fn replace_all_uses_skips_the_replacement_itself_and_moves_the_root() {
    let mut c = chain();
    let n2 = c.add(Instruction::new("n2", Opcode::Negate, scalar(), vec![InstId(3)]));
    c.replace_all_uses(InstId(3), n2);
    assert_eq!(c.root, n2);
    assert_eq!(c.inst(n2).operands, vec![InstId(3)]);
    c.replace_all_uses(InstId(2), InstId(0));
    assert_eq!(c.inst(InstId(4)).operands, vec![InstId(0), InstId(0)]);
}

#[test]
fn retain_instructions_renumbers_operands_and_root() {
    let mut c = chain();
    c.inst_mut(InstId(3)).control_predecessors.push(InstId(4));
    let remap = c.retain_instructions(&[true, true, true, true, false]);
    assert_eq!(remap[4], None);
    assert_eq!(c.instructions.len(), 4);
    assert!(c.inst(InstId(3)).control_predecessors.is_empty());
    let mut c = chain();
    let remap = c.retain_instructions(&[true, false, false, false, false]);
    assert_eq!(remap[0], Some(InstId(0)));
    assert_eq!(c.instructions.len(), 1);
    let mut c = chain();
    c.root = InstId(4);
    c.retain_instructions(&[true, true, true, false, true]);
    assert_eq!(c.root, InstId(3));
    assert_eq!(c.root_inst().name, "m");
    assert_eq!(c.root_inst().operands, vec![InstId(2), InstId(2)]);
}

#[test]
fn unique_names_count_up() {
    let c = chain();
    assert_eq!(c.unique_name("x"), "x");
    assert_eq!(c.unique_name("a"), "a.1");
}

#[test]
fn retain_computations_remaps_calls_and_entry() {
    let mut m = Module::new("m");
    m.add_computation(Computation::new("dead"));
    let callee = m.add_computation(chain());
    let mut entry = chain();
    entry
        .inst_mut(InstId(3))
        .attrs
        .push(crate::ir::Attribute { name: "to_apply".into(), value: AttrValue::Computation(callee) });
    m.entry = m.add_computation(entry);
    let remap = m.retain_computations(&[false, true, true]);
    assert_eq!(remap[0], None);
    assert_eq!(m.entry, CompId(1));
    assert_eq!(m.entry_comp().inst(InstId(3)).called("to_apply"), Some(CompId(0)));
    assert_eq!(m.unique_computation_name("c"), "c.1");
    assert_eq!(m.unique_computation_name("d"), "d");
}

#[test]
fn order_operands_first_moves_only_what_must_move() {
    let mut c = chain();
    assert!(!c.order_operands_first(), "an already ordered computation stays as it is");
    // An appended instruction used by an earlier one moves before its user.
    let late = c.add(Instruction::new("late", Opcode::Abs, scalar(), vec![InstId(0)]));
    c.inst_mut(InstId(3)).operands = vec![late];
    assert!(c.order_operands_first());
    let names: Vec<&str> = c.instructions.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, vec!["p0", "p1", "a", "late", "n", "m"]);
    assert_eq!(c.root_inst().name, "n");
    assert_eq!(c.root_inst().operands, vec![InstId(3)]);
    assert_eq!(c.inst(InstId(5)).operands, vec![InstId(2), InstId(2)]);
    // A cycle cannot be ordered: nothing changes.
    c.inst_mut(InstId(0)).operands = vec![InstId(4)];
    let before = c.clone();
    assert!(!c.order_operands_first());
    assert_eq!(c, before);
}

#[test]
fn unique_names_hands_out_what_unique_name_would() {
    let mut c = chain();
    let mut names = crate::ir::UniqueNames::of_instructions(&c);
    // `a` is taken; so is `a.2` once added: each fresh name is the first free one.
    c.add(Instruction::new("a.2", Opcode::Abs, scalar(), vec![InstId(0)]));
    let mut names_with_a2 = crate::ir::UniqueNames::of_instructions(&c);
    for _ in 0..3 {
        let expected = c.unique_name("a");
        assert_eq!(names_with_a2.fresh("a"), expected);
        c.add(Instruction::new(expected, Opcode::Abs, scalar(), vec![InstId(0)]));
    }
    assert_eq!(c.instructions.iter().filter(|i| i.name.starts_with("a.")).count(), 4);
    assert_eq!(names.fresh("x"), "x");
    assert_eq!(names.fresh("x"), "x.1");
    assert_eq!(names.fresh("a"), "a.1");
    assert_eq!(names.fresh("a"), "a.2");
}
