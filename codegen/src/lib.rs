//! Kernel IR to machine code: the Cranelift tier (fast compile), the LLVM tier (inkwell,
//! LLVM 22; peak speed) and ahead-of-time emission of an object file plus a C header.
//! Nothing here yet: the end-to-end issue fills it.
