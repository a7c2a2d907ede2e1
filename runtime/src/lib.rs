//! The runtime: one arena per memory space, buffers, the executable (buffer table plus kernel
//! launches), the thread pool, and the library that compiled kernels call (math functions,
//! GEMM and convolution micro-kernels, infeed/outfeed queues, custom-call registry).

pub mod abi;

pub use abi::KernelFn;
