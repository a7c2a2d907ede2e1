//! A lowered module: the buffers it touches and the kernels it launches, in order. It is what
//! the lowering hands to codegen and what codegen turns into a runtime executable; nothing
//! downstream looks at HLO again.

use tessera_hlo::ArrayShape;

use crate::kernel::Kernel;

/// Index into [`Program::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

#[derive(Clone, Debug, PartialEq)]
pub enum BufferKind {
    /// Entry parameter `n` (tuple parameters are flattened depth-first): caller-owned,
    /// read-only.
    Parameter(usize),
    /// Entry result `n` (tuple results flattened depth-first): caller-owned. Every result is a
    /// distinct buffer that aliases nothing else, so a caller can hand in any memory.
    Result(usize),
    /// Lives in its memory space's arena at `offset` (see [`Buffer::offset`]) for the duration
    /// of its live range.
    Temp,
    /// Read-only data baked into the executable: the physical bytes in the buffer's layout.
    Constant(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// The HLO instruction it holds (for diagnostics and the text form).
    pub name: String,
    /// Shape with its layout: the physical truth of the bytes.
    pub shape: ArrayShape,
    /// Physical size in bytes (tile and tail padding included).
    pub bytes: u64,
    /// The memory space (`S(n)`; 0 is host memory).
    pub memory_space: i64,
    pub kind: BufferKind,
    /// For `Temp` buffers after buffer assignment: the byte offset inside the arena of
    /// `memory_space`. Assigned offsets respect [`Program::ALIGNMENT`].
    pub offset: Option<u64>,
}

/// One kernel launch: `args[i]` is bound to the kernel's buffer `i`.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub kernel: usize,
    pub args: Vec<BufferId>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub buffers: Vec<Buffer>,
    pub kernels: Vec<Kernel>,
    /// Executed in order; a launch reads only what earlier launches (or the caller) wrote.
    pub launches: Vec<Launch>,
    /// Entry parameters, flattened depth-first.
    pub parameters: Vec<BufferId>,
    /// Entry results, flattened depth-first.
    pub results: Vec<BufferId>,
    /// Arena size in bytes per memory space (after buffer assignment), ascending by space.
    pub arenas: Vec<(i64, u64)>,
}

impl Program {
    /// Alignment of every buffer: arguments, results, temps and constants (a cache line and a
    /// 512-bit vector).
    pub const ALIGNMENT: u64 = 64;
}
