//! Why the runtime refused to build or run an executable. Every caller mistake (argument
//! count, sizes) and every resource limit (memory space capacity) is one of these, never a
//! panic or undefined behaviour.

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    #[error("the executable takes {expected} {what} but {found} were given")]
    Count { what: &'static str, expected: usize, found: usize },
    /// A parameter or result buffer of the wrong size.
    #[error("{what} {index} ('{name}') needs {expected} bytes but the buffer has {found}")]
    Size { what: &'static str, index: usize, name: String, expected: u64, found: u64 },
    #[error("memory space S({space}) needs {needed} bytes but its capacity is {capacity} ({over} bytes over)", over = needed - capacity)]
    SpaceOverflow { space: i64, capacity: u64, needed: u64 },
    #[error("could not allocate {bytes} bytes")]
    OutOfMemory { bytes: u64 },
    /// The executable's description contradicts itself (a bug in whatever assembled it).
    #[error("invalid executable: {0}")]
    Invalid(String),
    /// A host operation failed: an infeed with nothing queued, a custom-call whose function
    /// failed or returned another shape.
    #[error("{op} '{name}': {message}")]
    Host { op: &'static str, name: String, message: String },
    /// A value the program checks at run time is not what it must be (a dimension size set
    /// at run time that differs from the static size).
    #[error("{0}")]
    Check(String),
    #[error("could not start the thread pool: {0}")]
    ThreadPool(String),
}
