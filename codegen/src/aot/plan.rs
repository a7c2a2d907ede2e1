//! What an object's entry function does, in terms the tiers emit directly: the program's step
//! tree with every buffer turned into an address the entry can compute (an argument or result
//! pointer, an offset into the caller's temp block, a constant in the object's read-only
//! data). Both tiers emit the same plan, so they agree on the temp layout and the error codes.

use tessera_lower::{BufferId, BufferKind, Program, SelectorKind, Step};

use crate::assemble::check_launch;

/// Where a buffer's bytes are during a call of the entry function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addr {
    /// `args[n]`.
    Arg(usize),
    /// `results[n]`.
    Result(usize),
    /// `temp + offset`.
    Temp(u64),
    /// The start of [`EntryPlan::constants`]`[n]`.
    Constant(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub enum EntryStep {
    /// Calls kernel `kernel` with a table of `buffers` over the grid `0..extent`; `work_bytes`
    /// (what its buffers span) tells a parallel launch whether splitting the grid pays.
    Launch { kernel: usize, buffers: Vec<Addr>, extent: i64, work_bytes: u64 },
    /// Copies `bytes` bytes from `src` to `dst` (never overlapping: buffer assignment gives
    /// live buffers disjoint memory).
    Copy { src: Addr, dst: Addr, bytes: u64 },
    /// `cond`, then `body` and `cond` again while the pred byte at `pred` is nonzero.
    While { cond: Vec<EntryStep>, pred: Addr, body: Vec<EntryStep> },
    /// A pred selector runs branch 0 when nonzero, else 1; an s32 selector runs its branch,
    /// the last one when out of range (XLA's semantics).
    Conditional { selector: Addr, kind: SelectorKind, branches: Vec<Vec<EntryStep>> },
    /// Returns [`BAD_DIMENSION_SIZE`] unless the i32 at `value` equals `equals`.
    Check { value: Addr, equals: i64 },
}

/// Return codes of the entry function (the header's `SYMBOL_error_string` spells them out).
pub const OK: i32 = 0;
pub const BAD_ARGUMENT: i32 = 1;
pub const BAD_RESULT: i32 = 2;
pub const BAD_TEMP: i32 = 3;
pub const BAD_DIMENSION_SIZE: i32 = 4;

/// The text of each nonzero return code, by code.
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
    /// Each constant buffer's bytes, aligned to [`Program::ALIGNMENT`] in the object.
    pub constants: Vec<Vec<u8>>,
    /// Bytes of the caller's temp block: every memory space's arena, back to back, each
    /// starting aligned.
    pub temp_bytes: u64,
    pub arg_bytes: Vec<u64>,
    pub result_bytes: Vec<u64>,
}

impl EntryPlan {
    /// The plan of a buffer-assigned program; a step the entry cannot perform (a host
    /// operation: an object has no host callbacks) or an inconsistent program is an error.
    pub fn new(program: &Program) -> Result<EntryPlan, String> {
        // Memory spaces share the one temp block: arena n starts where n-1 ends, aligned.
        let mut arena_base = Vec::with_capacity(program.arenas.len());
        let mut temp_bytes = 0u64;
        for &(space, bytes) in &program.arenas {
            arena_base.push((space, temp_bytes));
            temp_bytes = temp_bytes
                .checked_add(bytes)
                .and_then(|t| t.checked_next_multiple_of(Program::ALIGNMENT))
                .ok_or("the temp block's size overflows")?;
        }
        let mut constants = Vec::new();
        let mut addrs = Vec::with_capacity(program.buffers.len());
        for b in &program.buffers {
            addrs.push(match &b.kind {
                BufferKind::Parameter(n) => Addr::Arg(*n),
                BufferKind::Result(n) => Addr::Result(*n),
                BufferKind::Temp => {
                    let offset = b.offset.ok_or_else(|| format!("temp '{}' has no offset", b.name))?;
                    let base = arena_base
                        .iter()
                        .find(|(space, _)| *space == b.memory_space)
                        .map(|&(_, base)| base)
                        .ok_or_else(|| {
                            format!("temp '{}' is in memory space {} with no arena", b.name, b.memory_space)
                        })?;
                    Addr::Temp(base + offset)
                }
                BufferKind::Constant(bytes) => {
                    constants.push(bytes.clone());
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
        let mut plan = Planner { program, addrs };
        let steps = plan.steps(&program.steps)?;
        Ok(EntryPlan { steps, constants, temp_bytes, arg_bytes, result_bytes })
    }
}

/// The most buffers any launch binds.
pub fn max_arity(steps: &[EntryStep]) -> usize {
    steps
        .iter()
        .map(|s| match s {
            EntryStep::Launch { buffers, .. } => buffers.len(),
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

    fn step(&mut self, step: &Step) -> Result<EntryStep, String> {
        Ok(match step {
            Step::Launch(launch) => {
                let kernel = check_launch(self.program, launch)?;
                let buffers = launch.args.iter().map(|&a| self.addr(a)).collect::<Result<_, _>>()?;
                let spanned = launch.args.iter().map(|&a| self.bytes(a)).fold(0u64, u64::saturating_add);
                // What the kernel moves, when the IR shows it (as the JIT's runtime measures).
                let work_bytes = kernel.traffic_bytes().map_or(spanned, |t| t.min(spanned));
                EntryStep::Launch { kernel: launch.kernel, buffers, extent: kernel.grid.extent, work_bytes }
            }
            Step::Copy { src, dst } => {
                let bytes = self.bytes(*src);
                if bytes != self.bytes(*dst) {
                    return Err(format!("a copy between buffers {} and {} of different sizes", src.0, dst.0));
                }
                EntryStep::Copy { src: self.addr(*src)?, dst: self.addr(*dst)?, bytes }
            }
            Step::While { cond, pred, body } => {
                EntryStep::While { cond: self.steps(cond)?, pred: self.addr(*pred)?, body: self.steps(body)? }
            }
            Step::Conditional { selector, branches } => {
                let kind = self
                    .program
                    .buffers
                    .get(selector.0 as usize)
                    .and_then(|b| SelectorKind::of(&b.shape))
                    .ok_or("a conditional's selector is not a scalar pred or s32")?;
                if branches.is_empty() {
                    return Err("a conditional without branches".into());
                }
                let branches = branches.iter().map(|b| self.steps(b)).collect::<Result<_, _>>()?;
                EntryStep::Conditional { selector: self.addr(*selector)?, kind, branches }
            }
            Step::Check { value, equals, .. } => EntryStep::Check { value: self.addr(*value)?, equals: *equals },
            Step::Host(op) => {
                let kind = match op {
                    tessera_lower::HostOp::CustomCall { target, .. } => format!("custom-call to '{target}'"),
                    tessera_lower::HostOp::Infeed { .. } => "infeed".into(),
                    tessera_lower::HostOp::Outfeed { .. } => "outfeed".into(),
                };
                return Err(format!(
                    "'{}' ({kind}) needs the host at run time; an ahead-of-time object has no host callbacks",
                    op.name()
                ));
            }
        })
    }
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
        assert_eq!((plan.arg_bytes.clone(), plan.result_bytes.clone()), (vec![8], vec![8]));
        assert_eq!(plan.constants, vec![vec![1, 2, 3, 4]]);
        assert_eq!(
            plan.steps,
            vec![
                EntryStep::Copy { src: Addr::Arg(0), dst: Addr::Result(0), bytes: 8 },
                EntryStep::Copy { src: Addr::Temp(128), dst: Addr::Temp(192), bytes: 20 },
            ]
        );
    }

    #[test]
    fn host_operations_are_refused_by_name() {
        let value =
            HostValue { shape: Shape::Array(ArrayShape::new(ElementType::U8, &[8])), buffers: vec![BufferId(0)] };
        let program = Program {
            buffers: vec![buffer("p", 8, 0, BufferKind::Parameter(0), None)],
            steps: vec![Step::Host(HostOp::Outfeed { name: "out1".into(), operand: value })],
            parameters: vec![BufferId(0)],
            ..Program::default()
        };
        let err = EntryPlan::new(&program).unwrap_err();
        assert!(err.contains("'out1' (outfeed) needs the host"), "{err}");
    }
}
