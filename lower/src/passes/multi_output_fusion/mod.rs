//! Sibling multi-output fusion, after XLA's multi-output fusion of siblings: kernels of one
//! computation that read a common operand and are of one kind become one kernel with a tuple
//! of results, which reads the shared operand once for all of them where separate kernels
//! each streamed it from memory, and compiles and launches once instead of several times.
//! Two kinds merge:
//! - *loop kernels* writing arrays of one shape (layout included): `x + y`, `x - y`, `x * y`
//!   of the same `x` and `y` make one pass over `x` and `y`. A loop kernel is a `kLoop`
//!   fusion whose fused computation holds only loop-fusible ops (no reduction, whose rows the
//!   emitter handles per kernel, and nothing staged), or a lone elementwise op.
//! - *column reductions* of one input shape over the same dimensions whose accumulators have
//!   one register type (`column_reduce::accumulator_type`: long f32 sums add in f64, other f32
//!   reductions in f32, and one sweep holds one kind of lane): batch norm's sums of `x`,
//!   `x * x` and `dy * x` per channel, or a sum and a maximum per column, make one sweep down
//!   the columns. A column reduction is a `kInput` fusion whose root is a single-input reduce
//!   keeping its input's contiguous dimension, over elementwise ops and data movement
//!   (`column_reduce::is_input_op`); the merged fusion is `kInput` too.
//!
//! Then, in each computation, producers merge into the column reductions that read them
//! (`producer`, XLA's producer-consumer multi-output fusion).
//!
//! Runs after [`super::Fusion`], on the same computations. A candidate writes one array of
//! more than one element in an untiled layout, of a type that is neither complex nor narrower
//! than a byte, is not its computation's root and has no control dependencies. Only
//! instructions the root reads count (fusion leaves the producers it inlined behind, dead).
//! Siblings merge when neither reaches the other, nor through the other groups merged beside
//! them (`closes_cycle`: so no cycle forms), and one reads an array operand the other reads,
//! up to [`MAX_OUTPUTS`] per kernel and at most one of them running a math sequence
//! (`runs_math`), first come first served in post order. The merged fusion is
//! named after its first member plus `.siblings`; each member becomes a `get-tuple-element`
//! of it under its own name, so its users are unchanged.

use std::collections::{HashMap, HashSet};

use tessera_hlo::ir::{AttrList, AttrValue, Payload, UniqueNames};
use tessera_hlo::{ArrayShape, CompId, Computation, InstId, Instruction, Module, Opcode, Shape, TypeClass};

use super::fusion::{elements, is_loop_fusible, sequenced_computations};
use super::FusionDecision;
use crate::emit::column_reduce;
use crate::emit::reduce::is_plain_add;
use crate::kernel::Ty;
use crate::pass::Pass;
use crate::LowerError;

mod producer;

pub(crate) use producer::merge_pair;

/// The most results one merged kernel writes: each is a store stream of the loop, and the
/// kernel's body grows with every member.
pub(crate) const MAX_OUTPUTS: usize = 8;

#[derive(Default)]
pub struct MultiOutputFusion {
    pub decisions: Vec<FusionDecision>,
}

impl Pass for MultiOutputFusion {
    fn name(&self) -> &'static str {
        "multi_output_fusion"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.decisions.clear();
        let mut changed = false;
        let mut names = UniqueNames::of_computations(module);
        for comp_id in sequenced_computations(module) {
            let groups = sibling_groups(module, module.comp(comp_id));
            let merged_siblings = !groups.is_empty();
            for (group, kind) in groups {
                let merged = merge(module, &mut names, comp_id, &group, kind);
                for &m in &group {
                    self.decisions.push(FusionDecision {
                        producer: module.comp(comp_id).inst(m).name.clone(),
                        consumer: merged.clone(),
                        fused: true,
                        reason: kind.reason(),
                    });
                }
            }
            if merged_siblings {
                module.comp_mut(comp_id).order_operands_first();
                changed = true;
            }
            changed |= producer::merge_producers(module, &mut names, comp_id, &mut self.decisions);
        }
        Ok(changed)
    }

    fn report(&self) -> Vec<String> {
        self.decisions
            .iter()
            .map(|d| format!("multi_output_fusion: %{} -> %{}: fused ({})", d.producer, d.consumer, d.reason))
            .collect()
    }
}

/// The kind of a merged fusion: loop kernels make a loop fusion, column reductions an input
/// fusion (XLA's kind for a fusion rooted in reductions).
#[derive(Clone, Copy)]
enum FusionKind {
    Loop,
    Input,
}

impl FusionKind {
    fn name(self) -> &'static str {
        match self {
            FusionKind::Loop => "kLoop",
            FusionKind::Input => "kInput",
        }
    }

    fn reason(self) -> &'static str {
        match self {
            FusionKind::Loop => "sibling: reads an operand another member reads, one loop writes all its results",
            FusionKind::Input => {
                "sibling reduction: reads an operand another member reads, one sweep down the columns updates all their accumulators"
            }
        }
    }
}

/// What a candidate kernel is; members of one merged kernel are of one kind.
#[derive(Clone, Copy, PartialEq)]
enum Kind<'a> {
    /// A loop kernel writing arrays of this shape.
    Loop(&'a ArrayShape),
    /// A column reduction writing this shape, of an input of the second shape over the
    /// reduced dimensions given, its accumulators of the register type given (one sweep's
    /// vector loop holds one kind of lane).
    Columns(&'a ArrayShape, &'a ArrayShape, &'a [i64], Ty),
}

/// The kind of `inst` when it is a loop kernel or a column reduction (module doc).
fn kernel_kind<'a>(module: &'a Module, comp: &Computation, inst: &'a Instruction) -> Option<Kind<'a>> {
    let Shape::Array(shape) = &inst.shape else { return None };
    let et = shape.element_type;
    let plain_type = et.class() != TypeClass::Complex && et.bit_width() >= 8;
    let plain_layout = shape.layout.as_ref().is_none_or(|l| {
        l.tiles.is_empty()
            && l.element_size_bits == 0
            && l.memory_space == 0
            && l.tail_padding_alignment <= 1
            && l.physical_shape.is_none()
            && l.padded_dimensions.is_empty()
            && l.dynamic_metadata_prefix_bytes == 0
    });
    let many = shape.is_static() && is_shared_array(inst);
    if !plain_type || !plain_layout || !many {
        return None;
    }
    if inst.opcode != Opcode::Fusion {
        let elementwise = inst.opcode.is_elementwise() && inst.operands.iter().all(|&o| comp.inst(o).shape.is_array());
        return elementwise.then_some(Kind::Loop(shape));
    }
    let fused = inst.called("calls").and_then(|c| module.get(c))?;
    // `merge` reads each parameter's operand of the fusion by its number.
    let operand_of = |i: &Instruction| match i.payload {
        Payload::Parameter(n) => usize::try_from(n).is_ok_and(|n| n < inst.operands.len()),
        _ => false,
    };
    let params_ok = fused.instructions.iter().filter(|i| i.opcode == Opcode::Parameter).all(operand_of);
    let root = fused.root_inst();
    match inst.attr("kind") {
        Some(AttrValue::Enum(k)) if k == "kLoop" => {
            let loop_only = fused.instructions.iter().all(|i| i.opcode == Opcode::Parameter || is_loop_fusible(i));
            (params_ok && loop_only).then_some(Kind::Loop(shape))
        }
        Some(AttrValue::Enum(k)) if k == "kInput" && root.opcode == Opcode::Reduce => {
            let c = column_kernel(module, inst)?;
            let acc = column_reduce::accumulator_type(et, c.input, c.dims, c.plain_add)?;
            Some(Kind::Columns(shape, c.input.as_array()?, c.dims, acc))
        }
        _ => None,
    }
}

/// A column reduction kernel: its reduced input's shape, the dimensions it reduces, whether
/// its reducer is a plain add, and its number of results.
struct ColumnKernel<'a> {
    input: &'a Shape,
    dims: &'a [i64],
    plain_add: bool,
    results: usize,
}

/// `inst` as a column reduction kernel, if it is one: a `kInput` fusion whose root is a
/// reduce, or a tuple of reduces (and of values over their input's dimensions, which
/// `producer` merges in), each reduce of one input that keeps its contiguous dimension, all
/// of one input shape over the same dimensions, the rest elementwise ops and data movement
/// (`column_reduce::is_input_op`).
fn column_kernel<'a>(module: &'a Module, inst: &Instruction) -> Option<ColumnKernel<'a>> {
    if inst.opcode != Opcode::Fusion || !matches!(inst.attr("kind"), Some(AttrValue::Enum(k)) if k == "kInput") {
        return None;
    }
    let fused = module.get(inst.called("calls")?)?;
    let root = fused.root_inst();
    let results: Vec<InstId> = match root.opcode {
        Opcode::Reduce => vec![fused.root],
        Opcode::Tuple => root.operands.clone(),
        _ => return None,
    };
    let reduces: Vec<&Instruction> =
        results.iter().map(|&r| fused.inst(r)).filter(|r| r.opcode == Opcode::Reduce).collect();
    let first = reduces.first()?;
    let &[input, _] = first.operands.as_slice() else { return None };
    let input = &fused.inst(input).shape;
    // The input's contiguous dimension is kept: the reduction runs down columns.
    let map = crate::emit::layout_map(input, &first.name).ok()?;
    let (minor, _) = column_reduce::contiguous_dim(&map)?;
    let dims = first.attr_ints("dimensions")?;
    if dims.contains(&(minor as i64)) {
        return None;
    }
    let alike = reduces.iter().all(|r| {
        matches!(r.operands.as_slice(), &[i, _] if fused.inst(i).shape == *input)
            && r.attr_ints("dimensions") == Some(dims)
    });
    let values_fit = results.iter().map(|&r| fused.inst(r)).all(|r| {
        r.opcode == Opcode::Reduce || r.shape.as_array().zip(input.as_array()).is_some_and(|(a, b)| a.dims == b.dims)
    });
    let is_result = |i: usize| results.iter().any(|r| r.index() == i);
    let ops_fit = fused.instructions.iter().enumerate().all(|(i, x)| {
        is_result(i) || i == fused.root.index() || x.opcode == Opcode::Parameter || column_reduce::is_input_op(x.opcode)
    });
    // Merging reads each parameter's operand of the fusion by its number.
    let params_ok = fused.instructions.iter().all(|i| match i.payload {
        Payload::Parameter(n) => usize::try_from(n).is_ok_and(|n| n < inst.operands.len()),
        _ => true,
    });
    let plain_add = first.called("to_apply").is_some_and(|r| is_plain_add(module, r));
    (alike && values_fit && ops_fit && params_ok).then_some(ColumnKernel {
        input,
        dims,
        plain_add,
        results: results.len(),
    })
}

/// Groups of at least two loop kernels of `comp` to merge, each in post order.
fn sibling_groups(module: &Module, comp: &Computation) -> Vec<(Vec<InstId>, FusionKind)> {
    let order = comp.post_order();
    let position: HashMap<InstId, usize> = order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let movable = movable(comp);
    let mut groups: Vec<Vec<InstId>> = Vec::new();
    // Per group: its kind, and whether a member already runs a math sequence.
    let mut kinds: Vec<(Kind, bool)> = Vec::new();
    // The groups whose members read an operand, so a candidate looks only at the groups it
    // could join.
    let mut readers: HashMap<InstId, Vec<usize>> = HashMap::new();
    let mut group_of: HashMap<InstId, usize> = HashMap::new();
    for &id in &order {
        let inst = comp.inst(id);
        if !movable(id) {
            continue;
        }
        let Some(kind) = kernel_kind(module, comp, inst) else { continue };
        let math = runs_math(module, inst);
        let shared: Vec<InstId> = inst.operands.iter().copied().filter(|&o| is_shared_array(comp.inst(o))).collect();
        let fits = |k: usize| {
            let (other, has_math) = kinds[k];
            other == kind
                && groups[k].len() < MAX_OUTPUTS
                && !(math && has_math)
                && !closes_cycle(comp, &position, &groups, &group_of, Some(k), &[id])
        };
        let joined = shared.iter().flat_map(|o| readers.get(o).into_iter().flatten()).copied().find(|&k| fits(k));
        let k = match joined {
            Some(k) => {
                groups[k].push(id);
                kinds[k].1 |= math;
                k
            }
            None => {
                groups.push(vec![id]);
                kinds.push((kind, math));
                groups.len() - 1
            }
        };
        group_of.insert(id, k);
        for o in shared {
            let list = readers.entry(o).or_default();
            if !list.contains(&k) {
                list.push(k);
            }
        }
    }
    let fusion_kind = |k: &(Kind, bool)| match k.0 {
        Kind::Loop(_) => FusionKind::Loop,
        Kind::Columns(..) => FusionKind::Input,
    };
    groups.into_iter().zip(kinds.iter().map(fusion_kind)).filter(|(g, _)| g.len() > 1).collect()
}

/// Which instructions of `comp` may move into a merged kernel: live (fusion leaves the
/// producers it inlined in place, dead; only what the root reads runs), not the root, and
/// neither following nor followed by another through control dependencies (those keep their
/// own place in the sequence).
fn movable(comp: &Computation) -> impl Fn(InstId) -> bool + '_ {
    let mut pinned: HashSet<InstId> = HashSet::new();
    for inst in &comp.instructions {
        pinned.extend(inst.control_predecessors.iter().copied());
    }
    let mut live: HashSet<InstId> = HashSet::new();
    let mut stack = vec![comp.root];
    while let Some(id) = stack.pop() {
        if live.insert(id) {
            stack.extend(comp.inst(id).operands.iter().copied());
        }
    }
    move |id| {
        id != comp.root && live.contains(&id) && !pinned.contains(&id) && comp.inst(id).control_predecessors.is_empty()
    }
}

/// Whether a loop kernel runs one of the math sequences of `emit::math` (exp, tan, ...). Two
/// of them in one loop outgrow the registers (each holds a dozen or more polynomial
/// constants): a merged `tan` and `cbrt` ran 22% slower on the Cranelift tier than the two
/// kernels did, while a compute-bound loop gains little from reading its operand once.
fn runs_math(module: &Module, inst: &Instruction) -> bool {
    let math = |op: Opcode| {
        use Opcode::*;
        matches!(op, Atan2 | Cbrt | Cos | Erf | Exp | Expm1 | Log | Log1p | Logistic | Power | Sin | Tan | Tanh)
    };
    match inst.called("calls").and_then(|c| module.get(c)) {
        Some(body) if inst.opcode == Opcode::Fusion => body.instructions.iter().any(|i| math(i.opcode)),
        _ => math(inst.opcode),
    }
}

/// An operand worth sharing: an array of more than one element (a scalar read by two
/// kernels costs nothing to read twice).
fn is_shared_array(inst: &Instruction) -> bool {
    elements(inst).is_some_and(|n| n > 1)
}

/// The most instructions [`may_reach`] visits before it answers yes to be safe, which keeps
/// the pass linear in the computation's size.
const MAX_WALK: usize = 256;

/// The most instructions [`closes_cycle`] visits before it answers yes to be safe: its walk
/// crosses whole groups, so it is given more room than [`may_reach`]'s.
const MAX_GROUP_WALK: usize = 4096;

/// Whether `to` may depend on `from` through operands. Post order puts every operand before
/// its users, so the walk back from `to` skips instructions placed before `from`.
pub(crate) fn may_reach(comp: &Computation, position: &HashMap<InstId, usize>, from: InstId, to: InstId) -> bool {
    let floor = position[&from];
    let mut stack = vec![to];
    let mut seen: HashSet<InstId> = HashSet::new();
    while let Some(id) = stack.pop() {
        if id == from || seen.len() > MAX_WALK {
            return true;
        }
        if position.get(&id).is_none_or(|&p| p < floor) || !seen.insert(id) {
            continue;
        }
        stack.extend(comp.inst(id).operands.iter().copied());
    }
    false
}

/// Whether `new` joining group `joins` of `groups` (or, with `None`, becoming a group of its
/// own), every group made one kernel, would make the computation depend on itself;
/// `group_of` maps each member of `groups` to its group. Two groups that are each free of
/// paths between their own members can still depend on each other: in `b = a + y`,
/// `d = x * c` with groups {a, d} (they read `x`) and {c, b} (they read `y`), the first
/// kernel computes `d` from `c` and the second `b` from `a`. So the walk back from the
/// operands of `new` treats a group as one node: reaching any member reaches the operands of
/// all. Reaching a member of the joined group, or of `new`, closes a cycle. The members the
/// group already has were checked when they joined; a cycle through `new` must leave it.
///
/// Post order puts operands before users, so the walk skips instructions placed before every
/// member, unless a group reaches back over that floor: then the floor moves down to that
/// group's first member, until no group straddles it.
pub(crate) fn closes_cycle(
    comp: &Computation,
    position: &HashMap<InstId, usize>,
    groups: &[Vec<InstId>],
    group_of: &HashMap<InstId, usize>,
    joins: Option<usize>,
    new: &[InstId],
) -> bool {
    let at = |m: &InstId| position.get(m).copied().unwrap_or(0);
    let joined = joins.and_then(|k| groups.get(k)).map_or(&[][..], Vec::as_slice);
    let mut floor = joined.iter().chain(new).map(at).min().unwrap_or(0);
    loop {
        let straddling = groups
            .iter()
            .enumerate()
            .filter(|&(k, _)| Some(k) != joins)
            .filter_map(|(_, g)| Some((g.iter().map(at).min()?, g.iter().map(at).max()?)))
            .filter(|&(lo, hi)| lo < floor && hi >= floor)
            .map(|(lo, _)| lo)
            .min();
        match straddling {
            Some(lo) => floor = lo,
            None => break,
        }
    }
    let mut crossed: HashSet<usize> = HashSet::new();
    let mut seen: HashSet<InstId> = HashSet::new();
    let mut stack: Vec<InstId> = new.iter().flat_map(|&n| comp.inst(n).operands.iter().copied()).collect();
    while let Some(id) = stack.pop() {
        let group = group_of.get(&id).copied();
        if new.contains(&id) || (group.is_some() && group == joins) || seen.len() > MAX_GROUP_WALK {
            return true;
        }
        if position.get(&id).is_none_or(|&p| p < floor) || !seen.insert(id) {
            continue;
        }
        stack.extend(comp.inst(id).operands.iter().copied());
        if let Some(k) = group {
            if crossed.insert(k) {
                stack.extend(groups[k].iter().flat_map(|&m| comp.inst(m).operands.iter().copied()));
            }
        }
    }
    false
}

/// The merged fused computation under construction: the members' operands become its
/// parameters, each once, in first-use order.
struct Merged {
    fused: Computation,
    outside: Vec<InstId>,
    params: HashMap<InstId, InstId>,
    taken: HashSet<String>,
}

impl Merged {
    fn new(name: String) -> Merged {
        Merged { fused: Computation::new(name), outside: Vec::new(), params: HashMap::new(), taken: HashSet::new() }
    }

    fn param(&mut self, o: InstId, shape: &Shape) -> InstId {
        if let Some(&p) = self.params.get(&o) {
            return p;
        }
        let i = self.outside.len();
        self.outside.push(o);
        let name = self.name(&format!("param_{i}"));
        let mut p = Instruction::new(name, Opcode::Parameter, shape.clone(), vec![]);
        p.payload = Payload::Parameter(i as i64);
        let p = self.fused.add(p);
        self.params.insert(o, p);
        p
    }

    /// `name`, or `name.N` when a member already used it.
    fn name(&mut self, name: &str) -> String {
        let mut candidate = name.to_string();
        let mut n = 1;
        while self.taken.contains(&candidate) {
            candidate = format!("{name}.{n}");
            n += 1;
        }
        self.taken.insert(candidate.clone());
        candidate
    }

    fn add(&mut self, mut inst: Instruction, operands: Vec<InstId>) -> InstId {
        inst.operands = operands;
        inst.name = self.name(&inst.name);
        inst.control_predecessors.clear();
        self.fused.add(inst)
    }

    /// Copies kernel `member` of `comp` (a fusion's computation, or a lone op) in, its
    /// operands read as parameters but for those `inside` maps to an instruction already
    /// copied; returns the copies of its results (a tuple root's operands, or its root).
    fn copy(
        &mut self,
        module: &Module,
        comp: &Computation,
        member: InstId,
        inside: &HashMap<InstId, InstId>,
    ) -> Vec<InstId> {
        let inst = comp.inst(member);
        let operand = |m: &mut Merged, o: InstId| match inside.get(&o) {
            Some(&copied) => copied,
            None => m.param(o, &comp.inst(o).shape),
        };
        let body = (inst.opcode == Opcode::Fusion).then(|| inst.called("calls").and_then(|c| module.get(c))).flatten();
        let Some(body) = body else {
            let operands = inst.operands.iter().map(|&o| operand(self, o)).collect();
            return vec![self.add(inst.clone(), operands)];
        };
        let mut map: HashMap<InstId, InstId> = HashMap::new();
        let tuple_root = body.root_inst().opcode == Opcode::Tuple;
        for id in body.post_order() {
            if tuple_root && id == body.root {
                continue;
            }
            let i = body.inst(id);
            let new = match (i.opcode, &i.payload) {
                (Opcode::Parameter, Payload::Parameter(n)) => operand(self, inst.operands[*n as usize]),
                _ => {
                    let operands = i.operands.iter().map(|o| map[o]).collect();
                    self.add(i.clone(), operands)
                }
            };
            map.insert(id, new);
        }
        if tuple_root {
            body.root_inst().operands.iter().map(|o| map[o]).collect()
        } else {
            vec![map[&body.root]]
        }
    }
}

/// Whether `group`'s members (in `comp` of `module`) are loop kernels writing one shape, which
/// [`merge_loops`] can make one kernel.
pub(crate) fn loop_siblings(module: &Module, comp: &Computation, group: &[InstId]) -> bool {
    let kinds: Vec<Option<Kind>> = group.iter().map(|&m| kernel_kind(module, comp, comp.inst(m))).collect();
    matches!(kinds.first(), Some(Some(k @ Kind::Loop(_))) if kinds.iter().all(|o| o.as_ref() == Some(k)))
}

/// [`merge`] of loop kernels (`loop_siblings`): `fusion` merges the kernels that a costly
/// producer it inlined into each of them ends in.
pub(crate) fn merge_loops(module: &mut Module, names: &mut UniqueNames, comp_id: CompId, group: &[InstId]) -> String {
    merge(module, names, comp_id, group, FusionKind::Loop)
}

/// Replaces `group`'s members by one fusion returning a tuple of their results and a
/// `get-tuple-element` per member under the member's name; returns the fusion's name.
fn merge(module: &mut Module, names: &mut UniqueNames, comp_id: CompId, group: &[InstId], kind: FusionKind) -> String {
    let comp = module.comp(comp_id);
    let mut m = Merged::new(names.fresh("fused_computation"));
    let mut roots = Vec::with_capacity(group.len());
    for &member in group {
        roots.extend(m.copy(module, comp, member, &HashMap::new()));
    }
    let shapes: Vec<Shape> = roots.iter().map(|&r| m.fused.inst(r).shape.clone()).collect();
    let tuple = Instruction::new(m.name("tuple"), Opcode::Tuple, Shape::Tuple(shapes.clone()), roots);
    m.fused.root = m.fused.add(tuple);
    // Members that inlined one cheap producer each hold a copy of it; one loop needs one.
    super::cse::cse(&mut m.fused, &super::cse::Classes::new(), &mut Vec::new());
    let fused_id = module.add_computation(m.fused);
    let comp = module.comp_mut(comp_id);
    let name = comp.unique_name(&format!("{}.siblings", comp.inst(group[0]).name));
    let fusion = Instruction::new(name.clone(), Opcode::Fusion, Shape::Tuple(shapes.clone()), m.outside)
        .with_attr("kind", AttrValue::Enum(kind.name().to_string()))
        .with_attr("calls", AttrValue::Computation(fused_id));
    let fusion = comp.add(fusion);
    for (k, &member) in group.iter().enumerate() {
        let gte =
            Instruction::new(comp.inst(member).name.clone(), Opcode::GetTupleElement, shapes[k].clone(), vec![fusion])
                .with_attr("index", AttrValue::Int(k as i64));
        *comp.inst_mut(member) = gte;
    }
    name
}
