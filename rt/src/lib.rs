//! `libtessera_rt.a`: the static library ahead-of-time objects link (DESIGN.md section 6).
//! It is the runtime crate packaged for C linkers: what an object calls are the runtime's
//! `#[no_mangle]` functions (`tessera_rt_gemm_f32`/`_f64`/`_f32_mixed`/`_int`, `tessera_rt_conv_f32`/`_f64`,
//! `tessera_rt_fft`/`_f32`, and `tessera_rt_launch` from `--parallel` entry functions) and what its host
//! calls is `tessera_rt_set_threads`; a static library
//! keeps every such symbol of its dependencies (`tests/aot.rs` links against them).

pub use tessera_runtime;
