//! What an executable does, as a tree of steps over its buffer table: kernel launches, byte
//! copies, while loops, conditionals and host operations. Plain data, checked once when the
//! executable is built (`Executable::new`), then walked by every run.

use std::collections::BTreeMap;
use std::sync::Arc;

use tessera_hlo::{HostFn, Shape};

/// Host functions by custom-call target name: what a client registers and assembly binds
/// into `HostEntry::CustomCall`.
pub type HostFunctions = BTreeMap<String, Arc<HostFn>>;

/// One step; the steps of a list run in order.
#[derive(Clone)]
pub enum StepEntry {
    /// Runs `ExecutableParts::launches[i]`.
    Launch(usize),
    /// Copies buffer `src`'s bytes into buffer `dst` (equal sizes).
    Copy {
        src: usize,
        dst: usize,
    },
    /// `cond`, then `body` and `cond` again while the pred byte of buffer `pred` is nonzero.
    While {
        cond: Vec<StepEntry>,
        pred: usize,
        body: Vec<StepEntry>,
    },
    /// Runs the branch that buffer `selector` picks (see [`Selector`]).
    Conditional {
        selector: usize,
        kind: Selector,
        branches: Vec<Vec<StepEntry>>,
    },
    Host(HostEntry),
    /// Fails the run with `message` unless the little-endian i32 in buffer `value` equals
    /// `equals`.
    Check {
        value: usize,
        equals: i64,
        message: String,
    },
}

impl StepEntry {
    /// Launches `0..count` in order: the steps of a program without control flow.
    pub fn in_order(count: usize) -> Vec<StepEntry> {
        (0..count).map(StepEntry::Launch).collect()
    }
}

/// What a conditional's selector buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selector {
    /// One byte: nonzero runs branch 0, zero runs branch 1.
    Pred,
    /// A little-endian i32 index; out of range runs the last branch (XLA's semantics).
    S32,
}

/// A value the host sees as a literal: its shape (arrays with their layouts) and the buffers
/// of its array leaves, depth-first.
#[derive(Clone, Debug)]
pub struct HostValueEntry {
    pub shape: Shape,
    pub buffers: Vec<usize>,
}

/// Operations the host performs between kernels.
#[derive(Clone)]
pub enum HostEntry {
    /// Calls `function` on the operands' literals; its result is laid out into `result`.
    CustomCall {
        name: String,
        target: String,
        function: Arc<HostFn>,
        operands: Vec<HostValueEntry>,
        result: HostValueEntry,
    },
    /// Takes the next literal of the executable's infeed queue into `result`.
    Infeed { name: String, result: HostValueEntry },
    /// Appends the operand's literal to the executable's outfeed queue.
    Outfeed { name: String, operand: HostValueEntry },
}

impl HostEntry {
    pub fn name(&self) -> &str {
        match self {
            HostEntry::CustomCall { name, .. } | HostEntry::Infeed { name, .. } | HostEntry::Outfeed { name, .. } => {
                name
            }
        }
    }

    /// The op's kind as HLO spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            HostEntry::CustomCall { .. } => "custom-call",
            HostEntry::Infeed { .. } => "infeed",
            HostEntry::Outfeed { .. } => "outfeed",
        }
    }

    /// Values the host reads and values it writes.
    pub fn values(&self) -> (Vec<&HostValueEntry>, Vec<&HostValueEntry>) {
        match self {
            HostEntry::CustomCall { operands, result, .. } => (operands.iter().collect(), vec![result]),
            HostEntry::Infeed { result, .. } => (vec![], vec![result]),
            HostEntry::Outfeed { operand, .. } => (vec![operand], vec![]),
        }
    }
}
