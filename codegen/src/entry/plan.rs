//! What a program's entry function does, in terms the tiers emit directly: the step tree with
//! every buffer turned into an address the entry can compute (an argument or result pointer,
//! an offset into a temp arena, a constant), every launch, host operation and check numbered.
//! Both tiers emit the same plan, for the JIT and for objects alike (`crate::entry`), so they
//! agree on the temp layout, the numbering and the error codes.

use tessera_lower::{BufferId, BufferKind, HostOp, Program, SelectorKind, Step};

use crate::image::check_launch;

pub use tessera_runtime::entry::{BAD_ARGUMENT, BAD_DIMENSION_SIZE, BAD_RESULT, BAD_TEMP, HOST_FAILED, OK};

/// Where a buffer's bytes are during a call of the entry function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Addr {
    /// `args[n]`.
    Arg(usize),
    /// `results[n]`.
    Result(usize),
    /// `offset` bytes into the arena of `Program::arenas[arena]`.
    Temp { arena: usize, offset: u64 },
    /// The start of constant buffer [`EntryPlan::constants`]`[n]`.
    Constant(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub enum EntryStep {
    /// Launch number `launch` ([`EntryPlan::launches`]): kernel `kernel` with a table of
    /// `buffers` over the grid `0..extent`; `work_bytes` (what it moves) tells whether
    /// splitting the grid across threads could pay.
    Launch { launch: usize, kernel: usize, buffers: Vec<Addr>, extent: i64, work_bytes: u64 },
    /// Copies `bytes` bytes from `src` to `dst` (never overlapping: buffer assignment gives
    /// live buffers disjoint memory), except that a parameter copied into a result may be the
    /// result's own memory (a donated run, `Program::aliases`): then nothing is copied.
    Copy { src: Addr, dst: Addr, bytes: u64 },
    /// `cond`, then `body` and `cond` again while the pred byte at `pred` is nonzero.
    While { cond: Vec<EntryStep>, pred: Addr, body: Vec<EntryStep> },
    /// A pred selector runs branch 0 when nonzero, else 1; an s32 selector runs its branch,
    /// the last one when out of range (XLA's semantics).
    Conditional { selector: Addr, kind: SelectorKind, branches: Vec<Vec<EntryStep>> },
    /// Check number `check`: fails with [`BAD_DIMENSION_SIZE`] unless the i32 at `value`
    /// equals `equals`.
    Check { check: usize, value: Addr, equals: i64 },
    /// Host operation number `host` ([`EntryPlan::hosts`]) on the leaves of its values
    /// (what it reads, then what it writes).
    Host { host: usize, buffers: Vec<Addr> },
}

/// The text of each nonzero return code of an object's entry, by code.
pub const ERROR_TEXTS: [(i32, &str); 4] = [
    (BAD_ARGUMENT, "an argument pointer is NULL or not aligned to the module's ALIGNMENT"),
    (BAD_RESULT, "a result pointer is NULL or not aligned to the module's ALIGNMENT"),
    (BAD_TEMP, "temp is NULL or not aligned to the module's ALIGNMENT while TEMP_BYTES is not 0"),
    (
        BAD_DIMENSION_SIZE,
        "a set-dimension-size got a size other than the static one (dynamic shapes are not supported)",
    ),
];

#[derive(Clone, Debug, PartialEq)]
pub struct EntryPlan {
    pub steps: Vec<EntryStep>,
    /// The constant buffers, in buffer order (an object holds their bytes; a JIT entry finds
    /// their addresses in its run context).
    pub constants: Vec<BufferId>,
    /// Where each arena starts in an object's single temp block (arena n after n-1, each
    /// aligned).
    pub arena_offsets: Vec<u64>,
    /// Bytes of an object caller's temp block: every arena, back to back.
    pub temp_bytes: u64,
    pub arg_bytes: Vec<u64>,
    pub result_bytes: Vec<u64>,
    /// `launches[j]`: the kernel and buffers of launch number `j`, in step-tree order.
    pub launches: Vec<(usize, Vec<BufferId>)>,
    /// `hosts[h]`: host operation number `h`.
    pub hosts: Vec<HostOp>,
    /// `checks[c]`: the message of check number `c`.
    pub checks: Vec<String>,
}

impl EntryPlan {
    /// The plan of a buffer-assigned program; an inconsistent program (a launch that does not
    /// fit its kernel, a copy between buffers of different sizes or into a read-only one, a
    /// selector that is not a scalar pred or s32) is an error.
    pub fn new(program: &Program) -> Result<EntryPlan, String> {
        // Memory spaces share an object's one temp block: arena n starts where n-1 ends, aligned.
        let mut arena_offsets = Vec::with_capacity(program.arenas.len());
        let mut temp_bytes = 0u64;
        for &(_, bytes) in &program.arenas {
            arena_offsets.push(temp_bytes);
            temp_bytes = temp_bytes
                .checked_add(bytes)
                .and_then(|t| t.checked_next_multiple_of(Program::ALIGNMENT))
                .ok_or("the temp block's size overflows")?;
        }
        let mut constants = Vec::new();
        let mut addrs = Vec::with_capacity(program.buffers.len());
        for (i, b) in program.buffers.iter().enumerate() {
            addrs.push(match &b.kind {
                BufferKind::Parameter(n) => Addr::Arg(*n),
                BufferKind::Result(n) => Addr::Result(*n),
                BufferKind::Temp => {
                    let offset = b.offset.ok_or_else(|| format!("temp '{}' has no offset", b.name))?;
                    let arena =
                        program.arenas.iter().position(|(space, _)| *space == b.memory_space).ok_or_else(|| {
                            format!("temp '{}' is in memory space {} with no arena", b.name, b.memory_space)
                        })?;
                    if offset.checked_add(b.bytes).is_none_or(|end| end > program.arenas[arena].1) {
                        return Err(format!("temp '{}' does not fit its arena", b.name));
                    }
                    Addr::Temp { arena, offset }
                }
                BufferKind::Constant(_) => {
                    constants.push(BufferId(i as u32));
                    Addr::Constant(constants.len() - 1)
                }
            });
        }
        let sizes = |ids: &[BufferId]| -> Result<Vec<u64>, String> {
            ids.iter()
                .map(|id| {
                    program.buffers.get(id.0 as usize).map(|b| b.bytes).ok_or_else(|| format!("no buffer {}", id.0))
                })
                .collect()
        };
        let arg_bytes = sizes(&program.parameters)?;
        let result_bytes = sizes(&program.results)?;
        let mut plan = Planner { program, addrs, launches: Vec::new(), hosts: Vec::new(), checks: Vec::new() };
        let steps = plan.steps(&program.steps)?;
        let Planner { launches, hosts, checks, .. } = plan;
        Ok(EntryPlan { steps, constants, arena_offsets, temp_bytes, arg_bytes, result_bytes, launches, hosts, checks })
    }

    /// The bytes of constant `n` (for objects, which hold them).
    pub fn constant_bytes<'p>(&self, program: &'p Program, n: usize) -> Option<&'p [u8]> {
        let id = self.constants.get(n)?;
        match &program.buffers.get(id.0 as usize)?.kind {
            BufferKind::Constant(bytes) => Some(bytes),
            _ => None,
        }
    }
}

/// The most buffers any launch or host operation binds (the size of the entry's table).
pub fn max_arity(steps: &[EntryStep]) -> usize {
    steps
        .iter()
        .map(|s| match s {
            EntryStep::Launch { buffers, .. } | EntryStep::Host { buffers, .. } => buffers.len(),
            EntryStep::Copy { .. } | EntryStep::Check { .. } => 0,
            EntryStep::While { cond, body, .. } => max_arity(cond).max(max_arity(body)),
            EntryStep::Conditional { branches, .. } => branches.iter().map(|b| max_arity(b)).max().unwrap_or(0),
        })
        .max()
        .unwrap_or(0)
}

struct Planner<'a> {
    program: &'a Program,
    addrs: Vec<Addr>,
    launches: Vec<(usize, Vec<BufferId>)>,
    hosts: Vec<HostOp>,
    checks: Vec<String>,
}

impl Planner<'_> {
    fn steps(&mut self, steps: &[Step]) -> Result<Vec<EntryStep>, String> {
        steps.iter().map(|s| self.step(s)).collect()
    }

    fn addr(&self, id: BufferId) -> Result<Addr, String> {
        self.addrs
            .get(id.0 as usize)
            .copied()
            .ok_or_else(|| format!("a step names buffer {} of {}", id.0, self.addrs.len()))
    }

    fn bytes(&self, id: BufferId) -> u64 {
        self.program.buffers.get(id.0 as usize).map_or(0, |b| b.bytes)
    }

    /// At least `bytes` bytes in buffer `id`, or an error about `what`.
    fn holds(&self, id: BufferId, bytes: u64, what: &str) -> Result<Addr, String> {
        let addr = self.addr(id)?;
        if self.bytes(id) < bytes {
            return Err(format!(
                "{what} '{}' holds fewer than {bytes} bytes",
                self.program.buffers[id.0 as usize].name
            ));
        }
        Ok(addr)
    }

    fn step(&mut self, step: &Step) -> Result<EntryStep, String> {
        Ok(match step {
            Step::Launch(launch) => {
                let kernel = check_launch(self.program, launch)?;
                let buffers = launch.args.iter().map(|&a| self.addr(a)).collect::<Result<_, _>>()?;
                let spanned = launch.args.iter().map(|&a| self.bytes(a)).fold(0u64, u64::saturating_add);
                // What the kernel moves, when the IR shows it (as the runtime measures it).
                let work_bytes = kernel.traffic_bytes().map_or(spanned, |t| t.min(spanned));
                self.launches.push((launch.kernel, launch.args.clone()));
                EntryStep::Launch {
                    launch: self.launches.len() - 1,
                    kernel: launch.kernel,
                    buffers,
                    extent: kernel.grid.extent,
                    work_bytes,
                }
            }
            Step::Copy { src, dst } => {
                let (src_addr, dst_addr) = (self.addr(*src)?, self.addr(*dst)?);
                let bytes = self.bytes(*src);
                if bytes != self.bytes(*dst) {
                    return Err(format!("a copy between buffers {} and {} of different sizes", src.0, dst.0));
                }
                if matches!(dst_addr, Addr::Arg(_) | Addr::Constant(_)) {
                    return Err(format!("a copy into read-only buffer {}", dst.0));
                }
                EntryStep::Copy { src: src_addr, dst: dst_addr, bytes }
            }
            Step::While { cond, pred, body } => EntryStep::While {
                cond: self.steps(cond)?,
                pred: self.holds(*pred, 1, "while predicate")?,
                body: self.steps(body)?,
            },
            Step::Conditional { selector, branches } => {
                let kind = self
                    .program
                    .buffers
                    .get(selector.0 as usize)
                    .and_then(|b| SelectorKind::of(&b.shape))
                    .ok_or("a conditional's selector is not a scalar pred or s32")?;
                let need = match kind {
                    SelectorKind::Pred => 1,
                    SelectorKind::S32 => 4,
                };
                if branches.is_empty() || (kind == SelectorKind::Pred && branches.len() != 2) {
                    return Err(format!("a conditional with {} branches", branches.len()));
                }
                let branches = branches.iter().map(|b| self.steps(b)).collect::<Result<_, _>>()?;
                EntryStep::Conditional {
                    selector: self.holds(*selector, need, "conditional selector")?,
                    kind,
                    branches,
                }
            }
            Step::Check { value, equals, message } => {
                self.checks.push(message.clone());
                EntryStep::Check {
                    check: self.checks.len() - 1,
                    value: self.holds(*value, 4, "checked size")?,
                    equals: *equals,
                }
            }
            Step::Host(op) => {
                let (reads, writes) = op.reads_writes();
                let buffers = reads.iter().chain(&writes).map(|&b| self.addr(b)).collect::<Result<_, _>>()?;
                if let Some(&b) = writes.iter().find(|&&b| matches!(self.addr(b), Ok(Addr::Arg(_) | Addr::Constant(_))))
                {
                    return Err(format!("'{}' writes read-only buffer {}", op.name(), b.0));
                }
                self.hosts.push(op.clone());
                EntryStep::Host { host: self.hosts.len() - 1, buffers }
            }
        })
    }
}

/// Why an object cannot hold a program with host operations, naming the first.
pub fn host_refusal(op: &HostOp) -> String {
    let kind = match op {
        HostOp::CustomCall { target, .. } => format!("custom-call to '{target}'"),
        HostOp::Infeed { .. } => "infeed".into(),
        HostOp::Outfeed { .. } => "outfeed".into(),
    };
    format!("'{}' ({kind}) needs the host at run time; an ahead-of-time object has no host callbacks", op.name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::{ArrayShape, ElementType, Shape};
    use tessera_lower::{Buffer, HostOp, HostValue};

    fn buffer(name: &str, bytes: u64, space: i64, kind: BufferKind, offset: Option<u64>) -> Buffer {
        let shape = ArrayShape::new(ElementType::U8, &[bytes as i64]);
        Buffer { name: name.into(), shape, bytes, memory_space: space, kind, offset }
    }

    /// Arguments, results, constants and temps of two memory spaces: each arena starts
    /// aligned after the one before it in the caller's single temp block.
    #[test]
    fn addresses_and_the_temp_block() {
        let program = Program {
            buffers: vec![
                buffer("p", 8, 0, BufferKind::Parameter(0), None),
                buffer("c", 4, 0, BufferKind::Constant(vec![1, 2, 3, 4]), None),
                buffer("t0", 100, 0, BufferKind::Temp, Some(0)),
                buffer("t1", 20, 1, BufferKind::Temp, Some(0)),
                buffer("t2", 20, 1, BufferKind::Temp, Some(64)),
                buffer("r", 8, 0, BufferKind::Result(0), None),
            ],
            steps: vec![
                Step::Copy { src: BufferId(0), dst: BufferId(5) },
                Step::Copy { src: BufferId(3), dst: BufferId(4) },
            ],
            parameters: vec![BufferId(0)],
            results: vec![BufferId(5)],
            arenas: vec![(0, 100), (1, 84)],
            ..Program::default()
        };
        let plan = EntryPlan::new(&program).unwrap();
        assert_eq!(plan.temp_bytes, 128 + 128);
        assert_eq!(plan.arena_offsets, vec![0, 128]);
        assert_eq!((plan.arg_bytes.clone(), plan.result_bytes.clone()), (vec![8], vec![8]));
        assert_eq!(plan.constants, vec![BufferId(1)]);
        assert_eq!(plan.constant_bytes(&program, 0), Some(&[1u8, 2, 3, 4][..]));
        assert_eq!(
            plan.steps,
            vec![
                EntryStep::Copy { src: Addr::Arg(0), dst: Addr::Result(0), bytes: 8 },
                EntryStep::Copy {
                    src: Addr::Temp { arena: 1, offset: 0 },
                    dst: Addr::Temp { arena: 1, offset: 64 },
                    bytes: 20
                },
            ]
        );
    }

    /// Host operations, checks and launches are numbered in step-tree order; a host
    /// operation's table holds what it reads, then what it writes.
    #[test]
    fn host_operations_and_checks_are_numbered() {
        let value = |b: u32| HostValue {
            shape: Shape::Array(ArrayShape::new(ElementType::U8, &[8])),
            buffers: vec![BufferId(b)],
        };
        let program = Program {
            buffers: vec![
                buffer("p", 8, 0, BufferKind::Parameter(0), None),
                buffer("r", 8, 0, BufferKind::Result(0), None),
                buffer("s", 4, 0, BufferKind::Temp, Some(0)),
            ],
            steps: vec![
                Step::Host(HostOp::Outfeed { name: "out1".into(), operand: value(0) }),
                Step::Check { value: BufferId(2), equals: 3, message: "size".into() },
                Step::Host(HostOp::CustomCall {
                    name: "cc".into(),
                    target: "f".into(),
                    operands: vec![value(0)],
                    result: value(1),
                }),
            ],
            parameters: vec![BufferId(0)],
            results: vec![BufferId(1)],
            arenas: vec![(0, 64)],
            ..Program::default()
        };
        let plan = EntryPlan::new(&program).unwrap();
        assert_eq!(
            plan.steps,
            vec![
                EntryStep::Host { host: 0, buffers: vec![Addr::Arg(0)] },
                EntryStep::Check { check: 0, value: Addr::Temp { arena: 0, offset: 0 }, equals: 3 },
                EntryStep::Host { host: 1, buffers: vec![Addr::Arg(0), Addr::Result(0)] },
            ]
        );
        assert_eq!((plan.hosts.len(), plan.checks.clone()), (2, vec!["size".to_string()]));
        let err = host_refusal(&plan.hosts[0]);
        assert!(err.contains("'out1' (outfeed) needs the host"), "{err}");
    }

    #[test]
    fn inconsistent_steps_are_refused() {
        let make = |steps: Vec<Step>| Program {
            buffers: vec![
                buffer("p", 4, 0, BufferKind::Parameter(0), None),
                buffer("r", 8, 0, BufferKind::Result(0), None),
                buffer("q", 4, 0, BufferKind::Result(1), None),
            ],
            steps,
            parameters: vec![BufferId(0)],
            results: vec![BufferId(1), BufferId(2)],
            ..Program::default()
        };
        for (steps, text) in [
            (vec![Step::Copy { src: BufferId(1), dst: BufferId(0) }], "different sizes"),
            (vec![Step::Copy { src: BufferId(2), dst: BufferId(0) }], "read-only"),
            (vec![Step::Copy { src: BufferId(0), dst: BufferId(7) }], "names buffer 7"),
            (vec![Step::Conditional { selector: BufferId(1), branches: vec![] }], "selector"),
        ] {
            let err = EntryPlan::new(&make(steps)).unwrap_err();
            assert!(err.contains(text), "{err}");
        }
    }
}
