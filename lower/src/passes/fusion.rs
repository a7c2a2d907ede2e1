//! Loop and input fusion, after XLA's instruction fusion, of every computation that runs as a
//! sequence of kernels: the entry and the computations control flow runs (while conditions
//! and bodies, conditional branches, calls), found from the entry. Fused computations and
//! the computations ops apply per element (reducers, comparators) are not fused themselves.
//!
//! Every instruction that computes an array is either *materialized* (it gets its own kernel
//! and buffer) or *inlined* into each of its users' kernels. A producer is inlined when it is
//! a loop-fusible op (elementwise ops, broadcast, reshape, transpose, slice, reverse, pad,
//! concatenate, iota, scalar constants, convert, bitcast-convert, copy) and every user can
//! absorb it: a loop-fusible user absorbs any such producer, a `reduce` absorbs elementwise
//! producers and scalar constants (its init values). With one user it is always inlined; with
//! several only when it is cheap (scalar constants, iota, and cheap elementwise ops or
//! broadcasts of small fused depth; small integer arrays, gather and dynamic-slice indices,
//! through reshapes and slices too and to a deeper depth), because inlining then duplicates
//! its work per user; or when all its users end in one kernel through elementwise ops over
//! its dimensions (`use_kernels`), which then computes it once per element, or in sibling
//! loop kernels of one shape, which the pass then merges into one multi-output kernel that
//! computes it once per element.
//! For the same reason a broadcast that repeats elements does not absorb a producer that
//! contains an expensive op (exp, divide, tanh, ...): that op would run once per copy.
//! A single-output `reduce-window` is elemental: it is inlined into a loop-fusible user (it
//! counts as expensive, so never duplicated), and absorbs scalar constants and cheap
//! elementwise producers only, since it reads each operand element once per window covering it.
//! `dot` keeps plain operands (they are computed by their own kernels), and every other op is
//! never fused, with one exception: row reductions.
//!
//! A reduce over the trailing dimensions of a row-major array (a *row reduction*: softmax's max
//! and sum, layer norm's mean and variance) is inlined into the ops that carry its result on
//! its rows (elementwise ops, unit-dimension reshapes and broadcasts, all one element per row:
//! duplicated into every user, since they cost one element per row) and into the broadcast
//! that expands it over its rows again; an expanded value is inlined into row-major
//! elementwise ops and into further row reductions that read it. The emitter evaluates such a
//! row value once per row, before the loop over the row's elements (`emit::rows`), so softmax
//! or layer norm becomes one or two kernels that read each row from memory once and then from
//! cache, instead of a kernel per reduction streaming the whole array each time. Any other
//! consumer of a row value (a transpose, a tuple, a non-row reduce) keeps the reduce in a
//! kernel of its own, as for every other reduce.
//!
//! A row kernel's expansion that only a gather, slice or dynamic slice reads, and only a small
//! part of it (`sparse_expansions`: `take_along_axis` of a `log_softmax`, a layer norm's last
//! position), is not written whole: the row values it expands are materialized instead, one
//! element per row, and the expansion becomes elementwise work over them that the reader
//! computes at the elements it reads. Row values of one such expansion that were one row
//! kernel stay one: the kernel of the later writes the earlier as one more result
//! (`merge_row_values`), so the rows are still read from memory once.
//!
//! A value with several users that is too costly to duplicate (expensive, or deeper than
//! `MAX_DUPLICATED_DEPTH`), some row reductions reading it and the others elementwise ops over
//! its dimensions (softmax's `exp(x - max)`, summed and divided by the sum; a masked
//! softmax's scaled, biased and masked scores, read by its max and by that `exp`), is
//! *staged* rather than materialized when it would end in one kernel with those reductions and
//! a root of its exact shape over more than one row (`staged_kernel`): the kernel stores it in
//! its output as the reduction computes it and reads it back in the loop over the row
//! (`emit::staging`), so softmax is one kernel that makes one pass over memory. Where it would
//! not, it is decided again as materialized.
//!
//! A materialized instruction with inlined operands becomes a `fusion` (kind=kLoop, or kInput
//! for a reduce root) calling a fused computation that holds it and its inlined producers;
//! parameters of the fused computation are the operands that stay outside, in first-use
//! order. The fusion keeps the root's name, so kernels and buffers stay traceable to the HLO.
//! Inlined producers become dead in the entry; DCE removes them.

use std::collections::{HashMap, HashSet};

use tessera_hlo::ir::{AttrList, AttrValue, Payload, UniqueNames};
use tessera_hlo::{CompId, Computation, InstId, Instruction, Module, Opcode, Shape};

use super::multi_output_fusion;
use crate::pass::Pass;
use crate::LowerError;

/// One producer-consumer pair the pass looked at, with what it decided and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusionDecision {
    pub producer: String,
    pub consumer: String,
    pub fused: bool,
    pub reason: &'static str,
}

#[derive(Default)]
pub struct Fusion {
    pub decisions: Vec<FusionDecision>,
}

/// A producer used by several consumers is duplicated into each only up to this fused depth
/// (the longest chain of inlined ops ending in it, itself included, scalar constants and their
/// broadcasts not counted: `lo + (hi - lo) / 2`, a binary search's midpoint, is three deep).
const MAX_DUPLICATED_DEPTH: usize = 3;

/// Small integer arrays (gather and dynamic-slice indices, which JAX wraps with
/// `where(i < 0, i + n, i)` and reshapes) are duplicated up to this deeper fused depth, data
/// movement included: their users read an index once per slice they move, and a kernel of
/// their own costs a launch and a trip through memory for a handful of elements.
const SMALL_INDEX_ELEMENTS: i64 = 4096;
const MAX_INDEX_DEPTH: usize = 6;

/// The decision of a costly producer whose users all end in one kernel, or in sibling
/// kernels that one loop computes.
const SHARED_REASON: &str =
    "several users, all in one kernel (or sibling kernels merged into one) at its own index: computed once there";

/// What that decision becomes when the sibling kernels stay apart (more of them than one
/// loop writes, a cycle through other merged kernels, or kernels fusion made other than loops
/// of one shape): each computes the producer.
const SPLIT_REASON: &str = "several users, in sibling kernels that stay apart: computed in each";

impl Pass for Fusion {
    fn name(&self) -> &'static str {
        "fusion"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.decisions.clear();
        let mut changed = false;
        let mut names = UniqueNames::of_computations(module);
        for comp_id in sequenced_computations(module) {
            changed |= self.split_mixed_row_reductions(module.comp_mut(comp_id));
            let first_decision = self.decisions.len();
            let (inlined, roots, groups, shared_kernels, sparse) = {
                let module: &Module = module;
                let comp = module.comp(comp_id);
                // A staged producer must end in one kernel with its row reductions and a root
                // of its own shape (`staged_kernel`); where it would not, it is decided again
                // as materialized, which may change what else is fused.
                // Likewise a producer inlined because all its users share one kernel, or sibling
                // kernels merged into one (`use_kernels`), is decided again as materialized
                // where they no longer do.
                let users = comp.users();
                let position: HashMap<InstId, usize> =
                    comp.post_order().into_iter().enumerate().map(|(i, id)| (id, i)).collect();
                let kernels = |p: InstId, inlined: &[bool]| use_kernels(comp, &users, &position, p, inlined);
                let mut unstaged: HashSet<InstId> = HashSet::new();
                let (mut shared, mut unshared): (HashSet<InstId>, HashSet<InstId>) = Default::default();
                // Expansions read sparsely (`sparse_expansions`), with the row values they
                // expand, and those that stayed materialized all the same.
                let mut sparse: HashMap<InstId, Vec<InstId>> = HashMap::new();
                let mut unsparse: HashSet<InstId> = HashSet::new();
                let inlined = loop {
                    let before = self.decisions.len();
                    let row_values: HashSet<InstId> = sparse.values().flatten().copied().collect();
                    let (inlined, staged, costs) =
                        self.decide(comp, comp_id == module.entry, &unstaged, &shared, &row_values);
                    let failed: Vec<InstId> =
                        staged.into_iter().filter(|&p| !staged_kernel(module, comp, &users, p, &inlined)).collect();
                    let split: Vec<InstId> =
                        shared.iter().copied().filter(|&p| kernels(p, &inlined).is_none()).collect();
                    let joining: Vec<InstId> = comp
                        .post_order()
                        .into_iter()
                        .filter(|&p| {
                            !inlined[p.index()]
                                && p != comp.root
                                && computes(comp.inst(p))
                                && users[p.index()].len() > 1
                                && !shared.contains(&p)
                                && !unshared.contains(&p)
                                && kernels(p, &inlined).is_some()
                        })
                        .collect();
                    let undone: Vec<InstId> = sparse.keys().copied().filter(|p| !inlined[p.index()]).collect();
                    let found: Vec<(InstId, Vec<InstId>)> = sparse_expansions(comp, &users, &inlined, &costs)
                        .into_iter()
                        .filter(|(p, _)| !unsparse.contains(p) && !sparse.contains_key(p))
                        .collect();
                    if failed.is_empty()
                        && split.is_empty()
                        && joining.is_empty()
                        && undone.is_empty()
                        && found.is_empty()
                    {
                        break inlined;
                    }
                    self.decisions.truncate(before);
                    unstaged.extend(failed);
                    for p in undone {
                        sparse.remove(&p);
                        unsparse.insert(p);
                    }
                    sparse.extend(found);
                    // Joining first: a shared producer makes the cheap ops over it costly, so
                    // those with several users are materialized and split its users, until
                    // they join that kernel too (`exp(x) == inf` read by two selects).
                    if joining.is_empty() {
                        for p in split {
                            shared.remove(&p);
                            unshared.insert(p);
                        }
                    }
                    shared.extend(joining);
                };
                let roots: Vec<InstId> = comp
                    .post_order()
                    .into_iter()
                    .filter(|&id| !inlined[id.index()] && computes(comp.inst(id)))
                    .collect();
                let mut by_position: Vec<InstId> = shared.iter().copied().collect();
                by_position.sort_by_key(|p| position[p]);
                // Each shared producer's kernels, when there are several.
                let shared_kernels: Vec<(String, Vec<InstId>)> = by_position
                    .iter()
                    .filter_map(|&p| Some((comp.inst(p).name.clone(), kernels(p, &inlined)?)))
                    .collect();
                let groups = sibling_groups(comp, &position, shared_kernels.iter().map(|(_, k)| k.clone()));
                let shared_kernels = shared_kernels.into_iter().filter(|(_, k)| k.len() > 1).collect::<Vec<_>>();
                (inlined, roots, groups, shared_kernels, sparse)
            };
            for root in roots {
                changed |= fuse_into(module, &mut names, comp_id, root, &inlined);
            }
            let rows_merged = self.merge_row_values(module, &mut names, comp_id, &sparse);
            changed |= rows_merged;
            let mut merged_groups: Vec<&Vec<InstId>> = Vec::new();
            for group in &groups {
                // Members that fusion made other than loop kernels of one shape (rare: the
                // check before fusing looked at their roots alone) stay apart, each
                // computing the shared producers itself.
                if !multi_output_fusion::loop_siblings(module, module.comp(comp_id), group) {
                    continue;
                }
                merged_groups.push(group);
                let merged = multi_output_fusion::merge_loops(module, &mut names, comp_id, group);
                for &m in group {
                    self.decisions.push(FusionDecision {
                        producer: module.comp(comp_id).inst(m).name.clone(),
                        consumer: merged.clone(),
                        fused: true,
                        reason: "sibling of kernels sharing a costly producer: one loop computes it once and writes all their results",
                    });
                }
            }
            // A shared producer whose kernels stayed apart is computed in each: its decision
            // says so.
            for (name, kernels) in &shared_kernels {
                if !merged_groups.iter().any(|g| kernels.iter().all(|k| g.contains(k))) {
                    let mine = |d: &&mut FusionDecision| d.producer == *name && d.reason == SHARED_REASON;
                    for d in self.decisions[first_decision..].iter_mut().filter(mine) {
                        d.reason = SPLIT_REASON;
                    }
                }
            }
            if !groups.is_empty() || rows_merged {
                module.comp_mut(comp_id).order_operands_first();
            }
        }
        Ok(changed)
    }

    fn report(&self) -> Vec<String> {
        self.decisions
            .iter()
            .map(|d| {
                let verdict = if d.fused { "fused" } else { "not fused" };
                format!("fusion: %{} -> %{}: {verdict} ({})", d.producer, d.consumer, d.reason)
            })
            .collect()
    }
}

/// The entry and every computation reached from it through while, conditional and call, in
/// discovery order (each once).
pub(crate) fn sequenced_computations(module: &Module) -> Vec<CompId> {
    let mut order = vec![module.entry];
    let mut seen: HashSet<CompId> = HashSet::from([module.entry]);
    let mut next = 0;
    while next < order.len() {
        let comp = module.comp(order[next]);
        next += 1;
        for inst in &comp.instructions {
            let called: Vec<CompId> = match inst.opcode {
                Opcode::While | Opcode::Conditional | Opcode::Call => inst.called_computations(),
                _ => continue,
            };
            for c in called {
                if c.index() < module.computations.len() && seen.insert(c) {
                    order.push(c);
                }
            }
        }
    }
    order
}

impl Fusion {
    /// A row reduction some of whose users can carry it on their rows while others cannot
    /// (a result tuple, a transpose) is split in two: the original stays for the others and
    /// is materialized, a copy is fused into the kernels of the first. Each reduction then
    /// costs one more pass over its input, but the row kernels (softmax, layer norm) stay one
    /// kernel each, as they were before CSE merged equal reductions of different uses.
    fn split_mixed_row_reductions(&mut self, comp: &mut Computation) -> bool {
        let users = comp.users();
        let mut changed = false;
        for id in comp.post_order() {
            if comp.inst(id).opcode != Opcode::Reduce || !is_row_reduce(comp, comp.inst(id)) || id == comp.root {
                continue;
            }
            let (rows, others): (Vec<InstId>, Vec<InstId>) = users[id.index()]
                .iter()
                .partition(|&&u| row_consumer_accepts(comp, comp.inst(u), id, Rows::Value).is_ok());
            if rows.is_empty() || others.is_empty() {
                continue;
            }
            let mut copy = comp.inst(id).clone();
            copy.name = comp.unique_name(&format!("{}.rows", copy.name));
            copy.control_predecessors.clear();
            let copy_name = copy.name.clone();
            let copy = comp.add(copy);
            for &u in &rows {
                for o in comp.inst_mut(u).operands.iter_mut().filter(|o| **o == id) {
                    *o = copy;
                }
            }
            self.decisions.push(FusionDecision {
                producer: comp.inst(id).name.clone(),
                consumer: copy_name,
                fused: false,
                reason: "split: its row users fuse a copy, the users that cannot read it materialized",
            });
            changed = true;
        }
        if changed {
            comp.order_operands_first();
        }
        changed
    }

    /// The row values materialized for one sparse reader (`sparse_expansions`) were one row
    /// kernel before: where one's kernel reads another's, the reader computes that value too and
    /// writes it as one more result, so the rows are read from memory once for both (a
    /// `log_softmax`'s maximum and log-sum, a layer norm's mean and inverse deviation).
    fn merge_row_values(
        &mut self,
        module: &mut Module,
        names: &mut UniqueNames,
        comp_id: CompId,
        sparse: &HashMap<InstId, Vec<InstId>>,
    ) -> bool {
        let mut changed = false;
        let mut groups: Vec<&Vec<InstId>> = sparse.values().filter(|v| v.len() > 1).collect();
        groups.sort();
        for values in groups {
            for &producer in values {
                let comp = module.comp(comp_id);
                let single = |i: InstId| comp.inst(i).opcode == Opcode::Fusion && !comp.inst(i).shape.is_tuple();
                let users = comp.users();
                let readers: Vec<InstId> =
                    users[producer.index()].iter().copied().filter(|&u| values.contains(&u) && single(u)).collect();
                let ([consumer], true) = (readers.as_slice(), single(producer)) else { continue };
                let consumer = *consumer;
                // The merged kernel must not read what is computed from its own result.
                let position: HashMap<InstId, usize> =
                    comp.post_order().into_iter().enumerate().map(|(i, id)| (id, i)).collect();
                let operands = &comp.inst(consumer).operands;
                if operands
                    .iter()
                    .any(|&o| o != producer && multi_output_fusion::may_reach(comp, &position, producer, o))
                {
                    continue;
                }
                let producer_name = comp.inst(producer).name.clone();
                // The merge keeps every other instruction's id (the caller orders operands
                // first once, after the sibling merges, which hold ids too).
                let merged = multi_output_fusion::merge_pair(module, names, comp_id, consumer, producer);
                self.decisions.push(FusionDecision {
                    producer: producer_name,
                    consumer: merged,
                    fused: true,
                    reason: "row values of one row kernel, materialized for a sparse reader: the kernel computing the later one writes the earlier too",
                });
                changed = true;
            }
        }
        changed
    }

    /// Whether each instruction of `comp` is inlined into its users, recording a decision for
    /// every producer-consumer pair where the producer computes something; with the producers
    /// inlined as staged (none of them in `unstaged`). Producers in `shared`, whose users all
    /// end in one kernel or in sibling kernels merged into one (`use_kernels`), are inlined there
    /// when those users can fuse them. Also returns the costs it weighed (default for what
    /// computes nothing, which is never inlined).
    fn decide(
        &mut self,
        comp: &Computation,
        is_entry: bool,
        unstaged: &HashSet<InstId>,
        shared: &HashSet<InstId>,
        row_values: &HashSet<InstId>,
    ) -> (Vec<bool>, Vec<InstId>, Vec<Cost>) {
        let mut staged = Vec::new();
        let users = comp.users();
        let mut control: HashSet<InstId> = HashSet::new();
        for inst in &comp.instructions {
            control.extend(inst.control_predecessors.iter().copied());
        }
        let mut inlined = vec![false; comp.instructions.len()];
        let mut costs = vec![Cost::default(); comp.instructions.len()];
        for id in comp.post_order() {
            let p = comp.inst(id);
            if !computes(p) && !is_scalar_constant(p) {
                continue;
            }
            let own_users = &users[id.index()];
            costs[id.index()] = Cost::of(comp, p, &inlined, &costs);
            let Cost { rows: kind, depth: fused_depth, expensive } = costs[id.index()];
            let blocker: Option<&'static str> = if id == comp.root {
                Some(if is_entry {
                    "the entry result is materialized"
                } else {
                    "a computation's result is materialized"
                })
            } else if row_values.contains(&id) {
                Some("a row value whose expansion only a sparse reader uses: materialized, and the expansion fused into the reader")
            } else if let Some(reason) =
                producer_blocker(comp, p).filter(|_| kind != Rows::Value && !is_small_full_reduce(comp, p))
            {
                Some(reason)
            } else if !p.control_predecessors.is_empty() || control.contains(&id) {
                Some("control dependencies pin it")
            } else {
                None
            };
            let mut verdicts: Vec<(InstId, Result<(), &'static str>)> = Vec::new();
            for &u in own_users {
                let verdict = match blocker {
                    Some(reason) => Err(reason),
                    None => match kind {
                        Rows::No => consumer_accepts(comp.inst(u), p, expensive),
                        kind => row_consumer_accepts(comp, comp.inst(u), id, kind),
                    },
                };
                verdicts.push((u, verdict));
            }
            let all_accept = !own_users.is_empty() && verdicts.iter().all(|(_, v)| v.is_ok());
            let (inline, shared_reason) = if !all_accept {
                (false, "another user cannot fuse it: materialized once")
            } else if own_users.len() == 1 && kind == Rows::Value {
                (true, "single user (a row value: evaluated once per row)")
            } else if own_users.len() == 1 {
                (true, "single user")
            } else if kind == Rows::Value {
                (true, "a row value costs one element per row: duplicated into every user")
            } else if !expensive && is_cheap(p, fused_depth) {
                (true, "cheap: duplicated into every user")
            } else if !unstaged.contains(&id) && stages(comp, id, own_users) {
                staged.push(id);
                (true, "staged: its row kernel stores it in the output as its row reduction reads it, and its other users read it back")
            } else if shared.contains(&id) {
                (true, SHARED_REASON)
            } else {
                (false, "several users and not cheap: materialized once")
            };
            inlined[id.index()] = inline;
            for (u, verdict) in verdicts {
                let reason = match verdict {
                    Err(r) => r,
                    Ok(()) => shared_reason,
                };
                self.decisions.push(FusionDecision {
                    producer: p.name.clone(),
                    consumer: comp.inst(u).name.clone(),
                    fused: inline,
                    reason,
                });
            }
        }
        (inlined, staged, costs)
    }
}

/// What fusion weighs about an instruction, given which of its operands are inlined into it:
/// its row kind, its fused depth (the longest chain of inlined ops ending in it, itself
/// included, scalar constants and their broadcasts not counted) and whether it holds an
/// expensive op.
#[derive(Clone, Copy, Default)]
struct Cost {
    rows: Rows,
    depth: usize,
    expensive: bool,
}

impl Cost {
    fn of(comp: &Computation, p: &Instruction, inlined: &[bool], costs: &[Cost]) -> Cost {
        let inlined_operands = || p.operands.iter().filter(|o| inlined[o.index()]).map(|o| costs[o.index()]);
        let operand_rows: Vec<Rows> = inlined_operands().map(|c| c.rows).collect();
        let rows = row_kind(comp, p, &operand_rows);
        // An expanding broadcast evaluates its row value once per row (the emitter hoists it
        // out of the row's loop): what it holds is neither deep nor expensive per element.
        let expands = rows == Rows::Expanded && !operand_rows.contains(&Rows::Expanded);
        // A scalar constant, and a broadcast of one, is a register in the loop, not work per
        // element: it adds no depth (`x + c` is one op deep, as `x + y` is).
        let constant = is_scalar_constant(p)
            || (p.opcode == Opcode::Broadcast
                && p.operands.iter().all(|o| inlined[o.index()] && costs[o.index()].depth == 0));
        let depth = if constant {
            0
        } else if expands {
            1
        } else {
            1 + inlined_operands().map(|c| c.depth).max().unwrap_or(0)
        };
        let expensive = !expands && (is_expensive(p.opcode) || inlined_operands().any(|c| c.expensive));
        Cost { rows, depth, expensive }
    }
}

/// A row kernel's expansion is *read sparsely* when its one user is a gather, slice or dynamic
/// slice that reads at most this fraction of its elements (one class's log-probability per
/// row of a `log_softmax`, the last position of a layer norm's output).
const SPARSE_READ_FRACTION: i64 = 8;

/// The materialized expansions of fused row reductions (`Rows::Expanded`) that are read
/// sparsely, each with the row values it expands; `costs` are `decide`'s for `inlined`. Materialized, such an expansion costs a
/// pass that writes the whole array for a reader that wants a few of its elements; with its
/// row values materialized instead (one element per row) it is plain elementwise work over
/// them, fused into the reader, which computes just the elements it reads. Only expansions
/// whose other inlined ops have one user each or are cheap to duplicate qualify: a staged or
/// shared value among them (softmax's `exp`) would be materialized whole once its row kernel
/// is split.
fn sparse_expansions(
    comp: &Computation,
    users: &[Vec<InstId>],
    inlined: &[bool],
    costs: &[Cost],
) -> Vec<(InstId, Vec<InstId>)> {
    let sparse_reader = |p: InstId| match users[p.index()].as_slice() {
        [u] => {
            let u = comp.inst(*u);
            matches!(u.opcode, Opcode::Gather | Opcode::Slice | Opcode::DynamicSlice)
                && matches!((elements(u), elements(comp.inst(p))), (Some(a), Some(b)) if a.saturating_mul(SPARSE_READ_FRACTION) <= b)
        }
        _ => false,
    };
    let mut found = Vec::new();
    'candidates: for id in comp.post_order() {
        if inlined[id.index()] || id == comp.root || costs[id.index()].rows != Rows::Expanded || !sparse_reader(id) {
            continue;
        }
        let mut values = Vec::new();
        let mut stack = vec![id];
        let mut seen: HashSet<InstId> = HashSet::new();
        while let Some(q) = stack.pop() {
            if !seen.insert(q) {
                continue;
            }
            let c = costs[q.index()];
            if q != id && users[q.index()].len() > 1 && (c.expensive || !is_cheap(comp.inst(q), c.depth)) {
                continue 'candidates;
            }
            for &o in &comp.inst(q).operands {
                if !inlined[o.index()] {
                    continue;
                }
                match costs[o.index()].rows {
                    Rows::Value if !values.contains(&o) => values.push(o),
                    Rows::Value => {}
                    Rows::Expanded | Rows::No => stack.push(o),
                }
            }
        }
        found.push((id, values));
    }
    found
}

/// The instructions of fused computation `comp` (every one inlined into its users) that
/// fusion would not duplicate into several users: expensive, or too deep to be cheap. Where
/// one is read by several users inside the fusion, fusion staged it (`emit::staging`).
pub(crate) fn not_duplicable(comp: &Computation) -> Vec<bool> {
    let all = vec![true; comp.instructions.len()];
    let mut costs = vec![Cost::default(); comp.instructions.len()];
    let mut out = vec![false; comp.instructions.len()];
    for id in comp.post_order() {
        let p = comp.inst(id);
        if !computes(p) && !is_scalar_constant(p) {
            continue;
        }
        let c = Cost::of(comp, p, &all, &costs);
        costs[id.index()] = c;
        out[id.index()] = c.expensive || !is_cheap(p, c.depth);
    }
    out
}

/// Whether `p`, a value with several users that fusion would not duplicate, can be staged
/// (`emit::staging`): some user is a row reduction reading it, and the others are elementwise
/// ops over its own dimensions, which read it at the index they compute.
fn stages(comp: &Computation, p: InstId, users: &[InstId]) -> bool {
    let reduces = |u: InstId| reduces_input(comp.inst(u), p);
    users.iter().any(|&u| reduces(u)) && users.iter().all(|&u| reduces(u) || same_index(comp.inst(p), comp.inst(u)))
}

/// Whether `u` is a reduction whose (first) input is `p`.
pub(crate) fn reduces_input(u: &Instruction, p: InstId) -> bool {
    u.opcode == Opcode::Reduce && u.operands.first() == Some(&p)
}

/// Whether `u` is an elementwise op over `p`'s dimensions (reading its operands at the index
/// it computes).
pub(crate) fn same_index(p: &Instruction, u: &Instruction) -> bool {
    (u.opcode.is_elementwise() || matches!(u.opcode, Opcode::Convert | Opcode::Copy))
        && matches!((p.shape.as_array(), u.shape.as_array()), (Some(a), Some(b)) if a.dims == b.dims)
}

/// What a walk over a value's uses (`walk_index_uses`) does at one of them.
pub(crate) enum Use {
    /// Go on to its users.
    Through,
    /// Stop there.
    Stop,
    /// Fail the walk.
    Refuse,
}

/// Walks the uses of `p` transitively: each user that is a reduction or an elementwise op over
/// `p`'s dimensions (`same_index`) goes to `visit`, which says whether the walk goes on through
/// it; any other user fails the walk. True when nothing failed.
pub(crate) fn walk_index_uses(
    comp: &Computation,
    users: &[Vec<InstId>],
    p: InstId,
    mut visit: impl FnMut(InstId, &Instruction) -> Use,
) -> bool {
    let mut stack = vec![p];
    let mut seen: HashSet<InstId> = HashSet::new();
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        for &u in &users[n.index()] {
            let ui = comp.inst(u);
            if ui.opcode != Opcode::Reduce && !same_index(comp.inst(p), ui) {
                return false;
            }
            match visit(u, ui) {
                Use::Through => stack.push(u),
                Use::Stop => {}
                Use::Refuse => return false,
            }
        }
    }
    true
}

/// The kernels every use of `p` ends in, as `inlined` decides, when every path there is made
/// of elementwise ops over `p`'s dimensions and those kernels are one, or siblings that one
/// multi-output loop kernel can compute (`are_siblings`). Inlined there, `p` is computed once
/// per element, not once per user, since the emitter keeps an element it computed by
/// instruction and index (an `exp(x)` read by a compare and a multiply, as a complex `exp` is
/// written; a ThreeFry round's `x ^ rotate(y)`, which both of a round's results read).
fn use_kernels(
    comp: &Computation,
    users: &[Vec<InstId>],
    position: &HashMap<InstId, usize>,
    p: InstId,
    inlined: &[bool],
) -> Option<Vec<InstId>> {
    let mut roots: Vec<InstId> = Vec::new();
    let fits = walk_index_uses(comp, users, p, |u, ui| {
        if ui.opcode == Opcode::Reduce {
            return Use::Refuse;
        }
        if inlined[u.index()] {
            return Use::Through;
        }
        if !roots.contains(&u) {
            roots.push(u);
        }
        Use::Stop
    });
    let one = roots.len() == 1;
    (fits && !roots.is_empty() && (one || are_siblings(comp, position, &roots))).then_some(roots)
}

/// Whether `roots` (two or more) can be one multi-output loop kernel: at most
/// `multi_output_fusion::MAX_OUTPUTS` elementwise ops of one array shape (layout included),
/// none the computation's result or pinned by control dependencies, and none reading
/// another, directly or not.
fn are_siblings(comp: &Computation, position: &HashMap<InstId, usize>, roots: &[InstId]) -> bool {
    let Some(&first) = roots.first() else { return false };
    let shape = &comp.inst(first).shape;
    let fits = |&r: &InstId| {
        let i = comp.inst(r);
        r != comp.root
            && i.shape == *shape
            && is_loop_fusible(i)
            && i.control_predecessors.is_empty()
            && elements(i).is_some_and(|n| n > 1)
    };
    roots.len() <= multi_output_fusion::MAX_OUTPUTS
        && roots.iter().all(fits)
        && roots.iter().all(|&a| roots.iter().all(|&b| a == b || !multi_output_fusion::may_reach(comp, position, a, b)))
}

/// The groups of sibling kernels (`are_siblings`) that shared producers end in, from each
/// producer's kernels: groups that share a kernel are one group where the union still is
/// siblings and does not depend on itself through the other groups
/// (`multi_output_fusion::closes_cycle`); a producer whose kernels would join groups that
/// cannot be one stays duplicated in them, as its decision allows.
fn sibling_groups(
    comp: &Computation,
    position: &HashMap<InstId, usize>,
    kernels: impl Iterator<Item = Vec<InstId>>,
) -> Vec<Vec<InstId>> {
    let mut groups: Vec<Vec<InstId>> = Vec::new();
    for roots in kernels.filter(|r| r.len() > 1) {
        let (joined, rest): (Vec<Vec<InstId>>, Vec<Vec<InstId>>) =
            groups.into_iter().partition(|g| g.iter().any(|m| roots.contains(m)));
        let mut union: Vec<InstId> = joined.iter().flatten().copied().chain(roots.iter().copied()).collect();
        union.sort_by_key(|m| position[m]);
        union.dedup();
        groups = rest;
        let group_of: HashMap<InstId, usize> =
            groups.iter().enumerate().flat_map(|(k, g)| g.iter().map(move |&m| (m, k))).collect();
        // Each group becomes one kernel: the union must not depend on itself through another.
        if are_siblings(comp, position, &union)
            && !multi_output_fusion::closes_cycle(comp, position, &groups, &group_of, None, &union)
        {
            groups.push(union);
        } else {
            groups.extend(joined);
        }
    }
    groups
}

/// Whether staged `p` ends, as `inlined` decides, in one kernel with what staging needs
/// (`emit::staging::candidate` checks the same on the fused computation): every row reduction
/// reading it inlined there, keeping more than one row and running in the lane form (a vector
/// loop along the row, which computes the staged value a vector at a time: rows of 16 reduce
/// serially, and an exp staged there ran 6x slower than in a vector kernel of its own); and
/// every path to the kernel's root made of elementwise ops over its dimensions, ending at a
/// root of exactly its shape (element type and layout included), whose output buffer holds
/// the staged values.
fn staged_kernel(module: &Module, comp: &Computation, users: &[Vec<InstId>], p: InstId, inlined: &[bool]) -> bool {
    let mut root: Option<InstId> = None;
    let uses_fit = walk_index_uses(comp, users, p, |u, ui| {
        if ui.opcode == Opcode::Reduce {
            // One row in all: the output nest would split it across its grid (strips), and
            // each grid index would reduce the whole row again.
            let fits = inlined[u.index()]
                && is_row_reduce(comp, ui)
                && elements(ui).is_some_and(|n| n >= 2)
                && crate::emit::has_lane_form(module, comp, ui);
            return if fits { Use::Stop } else { Use::Refuse };
        }
        if inlined[u.index()] {
            return Use::Through;
        }
        if ui.shape != comp.inst(p).shape || root.is_some_and(|r| r != u) {
            return Use::Refuse;
        }
        root = Some(u);
        Use::Stop
    });
    uses_fit && root.is_some()
}

/// Instructions that need a kernel of their own unless inlined: everything except
/// parameters, constants and pure aliasing (tuples, opt-barriers).
fn computes(inst: &Instruction) -> bool {
    !matches!(
        inst.opcode,
        Opcode::Parameter | Opcode::Constant | Opcode::Tuple | Opcode::GetTupleElement | Opcode::OptimizationBarrier
    )
}

fn is_scalar_constant(inst: &Instruction) -> bool {
    inst.opcode == Opcode::Constant && matches!(&inst.shape, Shape::Array(a) if a.rank() == 0)
}

fn is_array(inst: &Instruction) -> bool {
    matches!(&inst.shape, Shape::Array(a) if a.is_static())
}

/// Ops a loop kernel computes at any output index from its operands' elements.
pub(crate) fn is_loop_fusible(inst: &Instruction) -> bool {
    use Opcode::*;
    if !is_array(inst) {
        return false;
    }
    inst.opcode.is_elementwise()
        || is_scalar_constant(inst)
        || matches!(
            inst.opcode,
            Broadcast
                | Reshape
                | Transpose
                | Slice
                | Reverse
                | Pad
                | Concatenate
                | Iota
                | Convert
                | BitcastConvert
                | Copy
                | Gather
                | DynamicSlice
        )
}

/// Why a producer can never be inlined, if it cannot.
fn producer_blocker(comp: &Computation, p: &Instruction) -> Option<&'static str> {
    match p.opcode {
        _ if is_loop_fusible(p) => None,
        Opcode::Reduce => Some("a reduce is the root of its own kernel (kInput)"),
        // Inlined, each element would fold its whole window: O(n^2) along the row (a cumsum
        // of f32[64,32000] read by a compare took 21 s), O(n) as the root's running fold.
        Opcode::ReduceWindow if crate::emit::window_scan::scan_dim(comp, p).is_some() => {
            Some("a scan (a window over every earlier or later element) runs as a fold at its kernel's root")
        }
        Opcode::ReduceWindow if is_array(p) => None,
        Opcode::Dot => Some("a dot keeps its own kernel"),
        _ => Some("op is never fused"),
    }
}

/// Where an instruction stands towards row reductions fused into the kernels of their
/// consumers (softmax, layer norm): a reduce over the trailing dimensions of a row-major array
/// may be inlined into the ops that carry its result, one element per row (`Value`), up to
/// the broadcast that expands it over its rows again (`Expanded`), and from there into
/// elementwise ops and further row reductions. The emitter evaluates a row value once per row,
/// before the loop over the row's elements (`emit::rows`), so such a kernel reads each row from
/// memory once and from cache after that.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Rows {
    #[default]
    No,
    Value,
    Expanded,
}

/// `p`'s row kind, from the kinds of its inlined operands.
fn row_kind(comp: &Computation, p: &Instruction, operands: &[Rows]) -> Rows {
    if p.opcode == Opcode::Reduce {
        return if is_row_reduce(comp, p) { Rows::Value } else { Rows::No };
    }
    if operands.contains(&Rows::Expanded) {
        return Rows::Expanded;
    }
    if operands.contains(&Rows::Value) {
        return if p.opcode == Opcode::Broadcast && elements(p) != max_operand_elements(comp, p) {
            Rows::Expanded
        } else {
            Rows::Value
        };
    }
    Rows::No
}

pub(crate) fn elements(i: &Instruction) -> Option<i64> {
    i.shape.as_array().and_then(|a| a.element_count())
}

fn max_operand_elements(comp: &Computation, p: &Instruction) -> Option<i64> {
    p.operands.iter().filter_map(|&o| elements(comp.inst(o))).max()
}

fn is_row_major(i: &Instruction) -> bool {
    i.shape.as_array().and_then(|a| a.layout.as_ref().map(|l| *l == tessera_hlo::Layout::row_major(a.dims.len())))
        == Some(true)
}

/// A reduce of one row-major array over its trailing dimensions, keeping at least one: its
/// result element `i` reads the contiguous row `i`.
fn is_row_reduce(comp: &Computation, r: &Instruction) -> bool {
    let [input, _init] = r.operands.as_slice() else { return false };
    let input = comp.inst(*input);
    let (Some(rank), Some(dims)) = (input.shape.as_array().map(|a| a.rank()), r.attr_ints("dimensions")) else {
        return false;
    };
    let kept = rank.saturating_sub(dims.len());
    kept > 0
        && is_array(r)
        && is_row_major(input)
        && is_row_major(r)
        && dims.iter().enumerate().all(|(i, &d)| usize::try_from(d) == Ok(kept + i))
}

/// Whether `u` can absorb `p`, which holds a fused row reduction (`kind`).
fn row_consumer_accepts(comp: &Computation, u: &Instruction, p_id: InstId, kind: Rows) -> Result<(), &'static str> {
    let p = comp.inst(p_id);
    let elementwise = |u: &Instruction| {
        (u.opcode.is_elementwise() || matches!(u.opcode, Opcode::Convert | Opcode::Copy)) && is_array(u)
    };
    match kind {
        Rows::Value
            if elements(u) == elements(p)
                && (elementwise(u) || (u.opcode == Opcode::Reshape && is_row_major_reshape(u))) =>
        {
            Ok(())
        }
        Rows::Value if u.opcode == Opcode::Broadcast && elements(u) == elements(p) => Ok(()),
        Rows::Value if u.opcode == Opcode::Broadcast && expands_rows(u, p) => Ok(()),
        Rows::Value => Err("a row value fuses only into ops on its rows and the broadcast that expands them"),
        Rows::Expanded if elementwise(u) && is_row_major(u) => Ok(()),
        Rows::Expanded if u.opcode == Opcode::Reduce && is_row_reduce(comp, u) && u.operands[0] == p_id => Ok(()),
        Rows::Expanded => {
            Err("a fused row reduction's expansion fuses only into row-major elementwise ops and row reductions")
        }
        Rows::No => Err("not a row value"),
    }
}

/// Whether broadcast `u` expands `p` over rows: `p`'s dimensions become `u`'s leading ones, in
/// order, and `u` is row-major, so the loops over `u`'s trailing dimensions are a row's.
fn expands_rows(u: &Instruction, p: &Instruction) -> bool {
    let (Some(ua), Some(pa), Some(dims)) = (u.shape.as_array(), p.shape.as_array(), u.attr_ints("dimensions")) else {
        return false;
    };
    !dims.is_empty()
        && dims.len() < ua.rank()
        && dims.iter().enumerate().all(|(i, &d)| usize::try_from(d) == Ok(i) && ua.dims.get(i) == pa.dims.get(i))
        && is_row_major(u)
        && is_row_major(p)
}

/// Largest input a full reduction may have to be fused into its scalar consumers (beyond it,
/// the reduction keeps its own kernel, which `tree_reduction` may have split across threads).
const MAX_FUSED_FULL_REDUCE_ELEMENTS: i64 = 1 << 14;

/// A reduce to a scalar of a small input: fused into scalar consumers it runs once, as XLA's
/// reduction epilogue fusion (`compare(reduce(x), c)` as one kernel).
fn is_small_full_reduce(comp: &Computation, p: &Instruction) -> bool {
    p.opcode == Opcode::Reduce
        && is_array(p)
        && p.shape.rank() == 0
        && max_operand_elements(comp, p).is_some_and(|n| n <= MAX_FUSED_FULL_REDUCE_ELEMENTS)
}

/// Whether consumer `u` can absorb producer `p` (already known loop-fusible, or a small full
/// reduction).
fn consumer_accepts(u: &Instruction, p: &Instruction, p_expensive: bool) -> Result<(), &'static str> {
    if p.opcode == Opcode::Reduce && elements(u) != Some(1) {
        return Err("a full reduction fuses only into scalar consumers, which evaluate it once");
    }
    match u.opcode {
        Opcode::Broadcast if p_expensive && repeats_elements(u, p) => {
            Err("a broadcast would recompute an expensive producer for every repeated element")
        }
        Opcode::Tuple | Opcode::GetTupleElement => Err("consumed by a tuple: the value is materialized"),
        Opcode::OptimizationBarrier => Err("an opt-barrier passes on materialized values"),
        Opcode::Dot => Err("a dot keeps plain parameters"),
        Opcode::Reduce if p.opcode.is_elementwise() || is_scalar_constant(p) || p.opcode == Opcode::Iota => Ok(()),
        // An argmax's index operand: a broadcast iota.
        Opcode::Reduce if p.opcode == Opcode::Broadcast && !p_expensive => Ok(()),
        // A row-major reshape keeps the reduce's reads contiguous (tree_reduction's rows).
        Opcode::Reduce if p.opcode == Opcode::Reshape && is_row_major_reshape(p) => Ok(()),
        Opcode::Reduce => Err("a reduce absorbs only elementwise producers, cheap broadcasts and row-major reshapes"),
        Opcode::ReduceWindow if !is_array(u) => Err("a variadic reduce-window is not fused"),
        Opcode::ReduceWindow if is_scalar_constant(p) || (p.opcode.is_elementwise() && !p_expensive) => Ok(()),
        Opcode::ReduceWindow => {
            Err("a reduce-window reads each operand element once per window: only cheap elementwise producers")
        }
        // A gather or dynamic slice may read one operand element for many of its own.
        Opcode::Gather | Opcode::DynamicSlice if p_expensive && repeats_elements(u, p) => {
            Err("an indexed read would recompute an expensive producer for every repeated element")
        }
        _ if is_loop_fusible(u) && !is_scalar_constant(u) => Ok(()),
        _ => Err("the consumer's op is never fused"),
    }
}

/// Whether reshape `p` keeps the row-major order on both sides (its operand's layout is not
/// visible here, so the result's must be row-major and untiled; `layout_normalize` gave the
/// operand one, and the emitter composes whatever it is).
fn is_row_major_reshape(p: &Instruction) -> bool {
    p.shape.as_array().and_then(|a| a.layout.as_ref().map(|l| *l == tessera_hlo::Layout::row_major(a.dims.len())))
        == Some(true)
}

/// Whether `u` has more elements than its operand `p`, so that fused into `u`, `p` would be
/// evaluated several times per element of its own (XLA's `ReusesOperandElements`).
fn repeats_elements(u: &Instruction, p: &Instruction) -> bool {
    let count = |i: &Instruction| i.shape.as_array().and_then(|a| a.element_count());
    match (count(u), count(p)) {
        (Some(a), Some(b)) => a > b,
        _ => true,
    }
}

pub(crate) fn is_expensive(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        ReduceWindow
            | Atan2
            | Cbrt
            | Cos
            | Divide
            | Erf
            | Exp
            | Expm1
            | Log
            | Log1p
            | Logistic
            | Power
            | Remainder
            | Rsqrt
            | Sin
            | Sqrt
            | Tan
            | Tanh
    )
}

fn is_cheap(p: &Instruction, fused_depth: usize) -> bool {
    if is_scalar_constant(p) || p.opcode == Opcode::Iota {
        return true;
    }
    let cheap_op = p.opcode == Opcode::Broadcast || (p.opcode.is_elementwise() && !is_expensive(p.opcode));
    let small_index = p
        .shape
        .as_array()
        .is_some_and(|a| a.element_type.is_integral() && a.element_count().is_some_and(|n| n <= SMALL_INDEX_ELEMENTS));
    let index_op = cheap_op || matches!(p.opcode, Opcode::Reshape | Opcode::Bitcast | Opcode::Slice);
    (cheap_op && fused_depth <= MAX_DUPLICATED_DEPTH) || (small_index && index_op && fused_depth <= MAX_INDEX_DEPTH)
}

/// Replaces `root` in `comp_id` by a fusion of it and its inlined producers, when it has any.
fn fuse_into(module: &mut Module, names: &mut UniqueNames, comp_id: CompId, root: InstId, inlined: &[bool]) -> bool {
    let comp = module.comp(comp_id);
    // The fused sub-DAG in post order, and the outside operands in first-use order.
    let mut members: Vec<InstId> = Vec::new();
    let mut outside: Vec<InstId> = Vec::new();
    let mut seen: HashSet<InstId> = HashSet::new();
    let mut stack: Vec<(InstId, bool)> = vec![(root, false)];
    while let Some((id, expanded)) = stack.pop() {
        if expanded {
            members.push(id);
            continue;
        }
        if !seen.insert(id) {
            continue;
        }
        if id != root && !inlined[id.index()] {
            outside.push(id);
            continue;
        }
        stack.push((id, true));
        for &o in comp.inst(id).operands.iter().rev() {
            if !seen.contains(&o) {
                stack.push((o, false));
            }
        }
    }
    if members.len() == 1 {
        return false;
    }
    let root_inst = comp.inst(root).clone();
    let kind = if root_inst.opcode == Opcode::Reduce { "kInput" } else { "kLoop" };
    let mut fused = Computation::new(names.fresh("fused_computation"));
    let taken: HashSet<&str> = members.iter().map(|&m| comp.inst(m).name.as_str()).collect();
    let mut map: HashMap<InstId, InstId> = HashMap::new();
    let mut next_param = 0usize;
    for (i, &o) in outside.iter().enumerate() {
        let mut name = format!("param_{i}");
        while taken.contains(name.as_str()) {
            next_param += 1;
            name = format!("param_{i}.{next_param}");
        }
        let mut param = Instruction::new(name, Opcode::Parameter, comp.inst(o).shape.clone(), vec![]);
        param.payload = Payload::Parameter(i as i64);
        map.insert(o, fused.add(param));
    }
    for &m in &members {
        let mut inst = comp.inst(m).clone();
        inst.operands = inst.operands.iter().map(|o| map[o]).collect();
        inst.control_predecessors.clear();
        map.insert(m, fused.add(inst));
    }
    fused.root = map[&root];
    let fused_id = module.add_computation(fused);
    let mut fusion = Instruction::new(root_inst.name.clone(), Opcode::Fusion, root_inst.shape.clone(), outside)
        .with_attr("kind", AttrValue::Enum(kind.to_string()))
        .with_attr("calls", AttrValue::Computation(fused_id));
    fusion.control_predecessors = root_inst.control_predecessors;
    *module.comp_mut(comp_id).inst_mut(root) = fusion;
    true
}
