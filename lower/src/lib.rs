//! HLO-to-HLO passes (simplification, fusion, layout and buffer assignment), the pass
//! pipeline, and the kernel IR: loop nests over physical buffers whose index arithmetic is
//! specialized to the buffers' layouts.

pub mod emit;
pub mod error;
pub mod kernel;
pub mod program;
mod program_text;

pub use emit::emit_kernel;
pub use error::LowerError;
pub use program::{Buffer, BufferId, BufferKind, Launch, Program};
