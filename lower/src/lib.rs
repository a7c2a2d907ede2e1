//! HLO-to-HLO passes (simplification, fusion, layout and buffer assignment), the pass
//! pipeline, and the kernel IR: loop nests over physical buffers whose index arithmetic is
//! specialized to the buffers' layouts.

pub mod emit;
pub mod error;
pub mod kernel;
pub mod pass;
pub mod passes;
pub mod pipeline;
pub mod program;
mod program_text;

pub use emit::emit_kernel;
pub use error::LowerError;
pub use pass::Pass;
pub use pipeline::Pipeline;
pub use program::{Buffer, BufferId, BufferKind, Launch, Program};
