//! Buffer assignment (DESIGN.md section 7): every `Temp` buffer of a [`Program`] gets an offset
//! in its memory space's arena, and buffers whose live ranges do not overlap share space.
//!
//! Steps are numbered in the order they appear in the step tree (depth-first, a while's
//! condition before its body, a conditional's branches one after another). A temp's live range
//! runs from the first step that touches it (normally the one writing it: a kernel buffer is
//! written iff `KernelBuffer::writable`) to the last step that touches it (normally its last
//! reader), both inclusive, so a step's inputs never share bytes with its outputs. A buffer
//! touched anywhere inside a while loop is live across the whole loop, condition and body:
//! the next iteration may read it again (loop state), and a value made before the loop and read
//! inside it must survive every iteration. Placement is greedy best-fit, largest buffers first: each buffer goes into the
//! smallest gap, among buffers already placed whose ranges overlap its own, that holds it.
//! Offsets are multiples of [`Program::ALIGNMENT`].

use std::collections::BTreeMap;

use crate::program::{walk_steps, BufferId, BufferKind, Program, Step};

/// A memory space that cannot hold the temporaries live at once.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("memory space S({space}) needs {needed} bytes for temporaries but its capacity is {capacity} ({over} bytes over)", over = needed - capacity)]
pub struct CapacityError {
    pub space: i64,
    pub capacity: u64,
    pub needed: u64,
}

/// Inclusive range of step numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Live {
    first: usize,
    last: usize,
}

impl Live {
    fn overlaps(self, other: Live) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// Assigns every temp an offset and fills `program.arenas`. `capacities` bounds the arena of
/// each space it names; other spaces are unbounded.
pub fn assign_buffers(program: &mut Program, capacities: &BTreeMap<i64, u64>) -> Result<(), CapacityError> {
    let live = live_ranges(program);
    let align = Program::ALIGNMENT;
    let mut by_space: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, b) in program.buffers.iter().enumerate() {
        if b.kind == BufferKind::Temp {
            by_space.entry(b.memory_space).or_default().push(i);
        }
    }

    let mut arenas = Vec::new();
    for (space, mut temps) in by_space {
        // Largest first (ties: earliest live, then table order) keeps the result deterministic
        // and packs big buffers before small ones fragment the arena.
        temps.sort_by_key(|&i| (std::cmp::Reverse(program.buffers[i].bytes), live[i].map(|l| l.first), i));
        // (buffer, offset, footprint) of every placed buffer of this space.
        let mut placed: Vec<(usize, u64, u64)> = Vec::with_capacity(temps.len());
        let mut arena = 0u64;
        for i in temps {
            let bytes = program.buffers[i].bytes;
            let footprint = bytes.div_ceil(align).saturating_mul(align);
            let offset = match live[i] {
                // A temp no step touches needs no space of its own.
                None => 0,
                Some(range) => {
                    let mut busy: Vec<(u64, u64)> = placed
                        .iter()
                        .filter(|&&(j, _, _)| live[j].is_some_and(|l| l.overlaps(range)))
                        .map(|&(_, off, size)| (off, off.saturating_add(size)))
                        .collect();
                    busy.sort_unstable();
                    best_fit(&busy, footprint)
                }
            };
            program.buffers[i].offset = Some(offset);
            placed.push((i, offset, footprint));
            arena = arena.max(offset.saturating_add(bytes));
        }
        if let Some(&capacity) = capacities.get(&space) {
            if arena > capacity {
                return Err(CapacityError { space, capacity, needed: arena });
            }
        }
        arenas.push((space, arena));
    }
    program.arenas = arenas;
    Ok(())
}

/// The lowest offset of the smallest free gap between `busy` intervals (sorted by start, ends
/// exclusive, all aligned) that holds `size` bytes; past the last interval when none does.
fn best_fit(busy: &[(u64, u64)], size: u64) -> u64 {
    let mut best: Option<(u64, u64)> = None; // (gap size, offset)
    let mut cursor = 0u64;
    for &(start, end) in busy {
        if start > cursor {
            let gap = start - cursor;
            if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, cursor));
            }
        }
        cursor = cursor.max(end);
    }
    best.map_or(cursor, |(_, offset)| offset)
}

/// The live range of every buffer (only temps matter), `None` for buffers no step touches.
fn live_ranges(program: &Program) -> Vec<Option<Live>> {
    let mut live: Vec<Option<Live>> = vec![None; program.buffers.len()];
    let mut position = 0;
    number_steps(&program.steps, &mut position, &mut live);
    live
}

fn cover(live: &mut [Option<Live>], id: BufferId, range: Live) {
    if let Some(slot) = live.get_mut(id.0 as usize) {
        *slot = Some(match *slot {
            None => range,
            Some(l) => Live { first: l.first.min(range.first), last: l.last.max(range.last) },
        });
    }
}

fn number_steps(steps: &[Step], position: &mut usize, live: &mut [Option<Live>]) {
    for step in steps {
        let start = *position;
        for id in step.own_buffers() {
            cover(live, id, Live { first: start, last: start });
        }
        *position += 1;
        for child in step.children() {
            number_steps(child, position, live);
        }
        if let Step::While { .. } = step {
            let whole = Live { first: start, last: *position - 1 };
            walk_steps(std::slice::from_ref(step), &mut |s| {
                for id in s.own_buffers() {
                    cover(live, id, whole);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Grid, Kernel, KernelBuffer, MemType, Ty, VarId};
    use crate::program::{Buffer, Launch};
    use tessera_hlo::{ArrayShape, ElementType};
    use tessera_testkit::Rng;

    fn buffer(name: &str, bytes: u64, space: i64, kind: BufferKind) -> Buffer {
        Buffer {
            name: name.into(),
            shape: ArrayShape::new(ElementType::U8, &[bytes as i64]),
            bytes,
            memory_space: space,
            kind,
            offset: None,
        }
    }

    /// A kernel reading buffers `0..reads` and writing the rest.
    fn kernel(name: &str, reads: usize, writes: usize) -> Kernel {
        let buf = |i: usize, writable: bool| KernelBuffer {
            name: format!("b{i}"),
            mem: MemType::Scalar(Ty::I8),
            len: 1,
            writable,
        };
        Kernel {
            name: name.into(),
            buffers: (0..reads).map(|i| buf(i, false)).chain((reads..reads + writes).map(|i| buf(i, true))).collect(),
            grid: Grid { var: VarId(0), extent: 1 },
            body: vec![],
        }
    }

    fn launch(kernel: usize, args: &[u32]) -> Step {
        Step::Launch(Launch { kernel, args: args.iter().map(|&a| BufferId(a)).collect() })
    }

    /// p -> t0 -> t1 -> t2 -> r: t0 and t2 are never live together.
    fn chain(bytes: u64) -> Program {
        Program {
            buffers: vec![
                buffer("p", bytes, 0, BufferKind::Parameter(0)),
                buffer("t0", bytes, 0, BufferKind::Temp),
                buffer("t1", bytes, 0, BufferKind::Temp),
                buffer("t2", bytes, 0, BufferKind::Temp),
                buffer("r", bytes, 0, BufferKind::Result(0)),
            ],
            kernels: vec![kernel("step", 1, 1)],
            steps: vec![launch(0, &[0, 1]), launch(0, &[1, 2]), launch(0, &[2, 3]), launch(0, &[3, 4])],
            parameters: vec![BufferId(0)],
            results: vec![BufferId(4)],
            arenas: vec![],
            aliases: vec![],
        }
    }

    #[test]
    fn launches_are_disjoint_unless_a_written_buffer_shares_bytes() {
        let mut p = chain(100);
        assert_eq!(p.disjoint_launches(), vec![false], "temps without offsets may share bytes");
        assign_buffers(&mut p, &BTreeMap::new()).unwrap();
        assert_eq!(p.disjoint_launches(), vec![true], "t0 and t2 share bytes but never a launch");
        // A reader passed twice is fine; a buffer written and passed again is not.
        p.kernels.push(kernel("two_reads", 2, 1));
        p.steps.push(launch(1, &[0, 0, 4]));
        assert_eq!(p.disjoint_launches(), vec![true, true]);
        p.steps.push(launch(1, &[0, 4, 4]));
        assert_eq!(p.disjoint_launches(), vec![true, false]);
        // Temps whose assigned bytes overlap, in one launch.
        let mut p = chain(100);
        assign_buffers(&mut p, &BTreeMap::new()).unwrap();
        p.buffers[2].offset = Some(p.buffers[1].offset.unwrap() + 36);
        assert_eq!(p.disjoint_launches(), vec![false]);
        p.buffers[2].memory_space = 1;
        assert_eq!(p.disjoint_launches(), vec![true], "arenas of two spaces never overlap");
    }

    #[test]
    fn non_overlapping_temps_share_an_offset() {
        let mut p = chain(100);
        assign_buffers(&mut p, &BTreeMap::new()).unwrap();
        let off = |i: usize| p.buffers[i].offset.unwrap();
        assert_eq!(off(1), off(3), "t0 and t2 reuse the same bytes");
        assert_ne!(off(1), off(2));
        assert!(off(1) % 64 == 0 && off(2) % 64 == 0);
        assert_eq!(p.arenas, vec![(0, 128 + 100)]);
        assert_eq!(p.buffers[0].offset, None, "parameters are caller memory");
        assert_eq!(p.buffers[4].offset, None, "results are caller memory");
    }

    #[test]
    fn spaces_get_separate_arenas_and_capacities_are_checked() {
        let mut p = chain(100);
        p.buffers[2].memory_space = 1;
        assign_buffers(&mut p, &BTreeMap::from([(1, 100)])).unwrap();
        assert_eq!(p.arenas, vec![(0, 100), (1, 100)]);
        assert_eq!(p.buffers[1].offset, Some(0));
        assert_eq!(p.buffers[2].offset, Some(0));

        let mut p = chain(100);
        let err = assign_buffers(&mut p, &BTreeMap::from([(0, 200)])).unwrap_err();
        assert_eq!(err, CapacityError { space: 0, capacity: 200, needed: 228 });
        assert_eq!(
            err.to_string(),
            "memory space S(0) needs 228 bytes for temporaries but its capacity is 200 (28 bytes over)"
        );
    }

    #[test]
    fn best_fit_takes_the_smallest_gap() {
        assert_eq!(best_fit(&[], 64), 0);
        assert_eq!(best_fit(&[(0, 64)], 64), 64);
        // Gaps: [64,256) of 192 bytes and [320,448) of 128 bytes.
        let busy = [(0, 64), (256, 320), (448, 512)];
        assert_eq!(best_fit(&busy, 128), 320);
        assert_eq!(best_fit(&busy, 192), 64);
        assert_eq!(best_fit(&busy, 256), 512);
    }

    /// A temp made before a loop and read in it, and temps made and used within one
    /// iteration, all stay live across the loop; after it, their bytes are free again.
    #[test]
    fn buffers_touched_in_a_loop_are_live_across_it() {
        let mut p = chain(100);
        p.buffers.push(buffer("t3", 100, 0, BufferKind::Temp));
        p.buffers.push(buffer("pred", 1, 0, BufferKind::Temp));
        // t0 = f(p); while (pred) { t1 = f(t0); t2 = f(t1) }; t3 = f(t2) ... r = f(t3)
        p.steps = vec![
            launch(0, &[0, 1]),
            Step::While {
                cond: vec![launch(0, &[1, 6])],
                pred: BufferId(6),
                body: vec![launch(0, &[1, 2]), launch(0, &[2, 3])],
            },
            launch(0, &[3, 5]),
            launch(0, &[5, 4]),
        ];
        let live = live_ranges(&p);
        assert_eq!(live[1], Some(Live { first: 0, last: 4 }), "t0 lives through the loop");
        assert_eq!(live[2], Some(Live { first: 1, last: 4 }), "t1 lives through the loop");
        assert_eq!(live[3], Some(Live { first: 1, last: 5 }));
        assert_eq!(live[5], Some(Live { first: 5, last: 6 }));
        assign_buffers(&mut p, &BTreeMap::new()).unwrap();
        let off = |i: usize| p.buffers[i].offset.unwrap();
        let loop_temps = [off(1), off(2), off(3), off(6)];
        for (i, a) in loop_temps.iter().enumerate() {
            for b in &loop_temps[i + 1..] {
                assert_ne!(a, b, "temps of one loop never share bytes");
            }
        }
        assert!(off(5) == off(1) || off(5) == off(2), "after the loop its temps' bytes are reused");
    }

    /// A random step list over `nbuf` buffers: launches, sometimes wrapped in loops and
    /// conditionals (nested up to `depth`).
    fn random_steps(rng: &mut Rng, kernels: &[Kernel], nbuf: usize, depth: u32) -> Vec<Step> {
        let n = 1 + rng.below(5) as usize;
        (0..n)
            .map(|_| match rng.below(if depth == 0 { 1 } else { 6 }) {
                4 => Step::While {
                    cond: random_steps(rng, kernels, nbuf, depth - 1),
                    pred: BufferId(rng.below(nbuf as u64) as u32),
                    body: random_steps(rng, kernels, nbuf, depth - 1),
                },
                5 => Step::Conditional {
                    selector: BufferId(rng.below(nbuf as u64) as u32),
                    branches: (0..2).map(|_| random_steps(rng, kernels, nbuf, depth - 1)).collect(),
                },
                _ => {
                    let k = rng.below(kernels.len() as u64) as usize;
                    let arity = kernels[k].buffers.len();
                    let args: Vec<u32> = (0..arity).map(|_| rng.below(nbuf as u64) as u32).collect();
                    launch(k, &args)
                }
            })
            .collect()
    }

    /// Buffers touched anywhere in each while step (its own pred included).
    fn loop_sets(steps: &[Step], out: &mut Vec<Vec<BufferId>>) {
        for s in steps {
            if let Step::While { .. } = s {
                let mut set = Vec::new();
                walk_steps(std::slice::from_ref(s), &mut |t| set.extend(t.own_buffers()));
                out.push(set);
            }
            for c in s.children() {
                loop_sets(c, out);
            }
        }
    }

    /// Random programs: random temps in two spaces, random steps (launches, loops, branches)
    /// reading and writing them. Whenever two temps of one space are live at the same step, or
    /// are both touched inside one loop (checked independently of the live ranges), their
    /// bytes are disjoint; every temp lies inside its arena at an aligned offset.
    #[test]
    fn live_temps_never_share_bytes() {
        let mut rng = Rng::new(7);
        let mut shared = 0;
        let mut loops = 0;
        for case in 0..300 {
            let ntemps = 1 + rng.below(12) as usize;
            let mut buffers: Vec<Buffer> = (0..ntemps)
                .map(|i| buffer(&format!("t{i}"), rng.below(300), rng.below(2) as i64, BufferKind::Temp))
                .collect();
            buffers.push(buffer("p", 8, 0, BufferKind::Parameter(0)));
            let kernels: Vec<Kernel> = (1..4).map(|w| kernel("k", 3 - w.min(2), w)).collect();
            let nbuf = buffers.len();
            let steps = random_steps(&mut rng, &kernels, nbuf, 2);
            let mut p =
                Program { buffers, kernels, steps, parameters: vec![BufferId(ntemps as u32)], ..Default::default() };
            assign_buffers(&mut p, &BTreeMap::new()).unwrap();
            // What tiers rely on to tell a kernel's buffers apart: after assignment, only a
            // buffer passed twice to one launch (written there) makes a kernel's launches
            // overlap.
            let mut repeats = vec![false; p.kernels.len()];
            for l in p.launches() {
                let writes = |i: usize| p.kernels[l.kernel].buffers[i].writable;
                let n = l.args.len();
                repeats[l.kernel] |=
                    (0..n).any(|i| (i + 1..n).any(|j| l.args[i] == l.args[j] && (writes(i) || writes(j))));
            }
            let disjoint = p.disjoint_launches();
            for k in 0..p.kernels.len() {
                assert_eq!(disjoint[k], !repeats[k], "case {case}: kernel {k}");
            }
            let live = live_ranges(&p);
            let mut sets = Vec::new();
            loop_sets(&p.steps, &mut sets);
            loops += sets.len();
            let arena = |space: i64| p.arenas.iter().find(|a| a.0 == space).map(|a| a.1).unwrap();
            for i in 0..ntemps {
                let (bi, oi) = (&p.buffers[i], p.buffers[i].offset.unwrap());
                assert_eq!(oi % 64, 0);
                assert!(oi + bi.bytes <= arena(bi.memory_space), "case {case}");
                for j in i + 1..ntemps {
                    let (bj, oj) = (&p.buffers[j], p.buffers[j].offset.unwrap());
                    if bi.memory_space != bj.memory_space || bi.bytes == 0 || bj.bytes == 0 {
                        continue;
                    }
                    let disjoint = oi + bi.bytes <= oj || oj + bj.bytes <= oi;
                    let in_one_loop =
                        sets.iter().any(|s| s.contains(&BufferId(i as u32)) && s.contains(&BufferId(j as u32)));
                    assert!(disjoint || !in_one_loop, "case {case}: t{i} and t{j} share bytes inside a loop");
                    match (live[i], live[j]) {
                        (Some(a), Some(b)) if a.overlaps(b) => assert!(disjoint, "case {case}: t{i} and t{j}"),
                        (Some(_), Some(_)) if !disjoint => shared += 1,
                        _ => {}
                    }
                }
            }
        }
        assert!(shared > 0, "random programs exercised reuse");
        assert!(loops > 50, "random programs exercised loops");
    }
}
