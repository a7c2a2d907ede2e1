//! The host operations of an executable (custom-calls, infeed, outfeed) over its buffer
//! table: plain data, checked once when the executable is built (`Executable::new`), performed
//! when the compiled entry calls `tessera_rt_host`.

use std::collections::BTreeMap;
use std::sync::Arc;

use tessera_hlo::{HostFn, Shape};

/// Host functions by custom-call target name: what a client registers and assembly binds
/// into `HostEntry::CustomCall`.
pub type HostFunctions = BTreeMap<String, Arc<HostFn>>;

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
