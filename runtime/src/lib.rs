//! The runtime: one arena per memory space, buffers, the executable (buffer table, the
//! program's compiled entry and the launches and host operations it calls back for), the
//! thread pool, and the library that compiled kernels call (math functions, GEMM and
//! convolution micro-kernels, infeed/outfeed queues, custom-call registry).

/// `f::<R>(args)` for the run-time row count `rows`: `R` the listed constant it equals, and
/// otherwise one. How the GEMM kernels reach their register tiles' const-generic row counts
/// (the tail of a product has fewer rows than a full tile).
macro_rules! with_rows {
    ($rows:expr, [$($r:literal),*], $module:ident::$f:ident $args:tt) => {
        match $rows {
            $($r => $module::$f::<$r> $args,)*
            _ => $module::$f::<1> $args,
        }
    };
}

pub mod abi;
pub mod aot;
mod bf16_dot;
pub mod buffer;
pub mod conv;
pub mod entry;
pub mod error;
pub mod executable;
pub mod gemm;
mod host_io;
mod int8_vnni;
pub mod int_gemm;
pub mod memory_space;
mod skinny_gemm;
pub mod step;
pub mod thread_pool;

pub use abi::KernelFn;
pub use buffer::AlignedBuffer;
pub use entry::{entry_symbols, EntryFn, RunContext};
pub use error::RuntimeError;
pub use executable::{
    BufferEntry, BufferRole, Executable, ExecutableParts, LaunchEntry, Parameter, Profile, SharedQueues,
};
pub use memory_space::{MemorySpace, MemorySpaces};
pub use step::{HostEntry, HostFunctions, HostValueEntry};
pub use thread_pool::ThreadPool;
