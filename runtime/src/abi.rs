//! The binary interface between compiled kernels and the runtime: the kernel function type and
//! the symbols kernels may call. Both JIT tiers register exactly [`symbols`], so a kernel that
//! links in one tier links in the other (and in AOT against the runtime library).

/// A compiled kernel (see `tessera_lower::kernel`'s calling convention): `buffers[i]` is the
/// base of the kernel's buffer `i`; the body runs for grid indices `grid_lo..grid_hi`.
pub type KernelFn = unsafe extern "C" fn(buffers: *const *mut u8, grid_lo: i64, grid_hi: i64);

// libm, which Rust's std already links on every target we build for.
extern "C" {
    fn expf(x: f32) -> f32;
    fn exp(x: f64) -> f64;
    fn expm1f(x: f32) -> f32;
    fn expm1(x: f64) -> f64;
    fn logf(x: f32) -> f32;
    fn log(x: f64) -> f64;
    fn log1pf(x: f32) -> f32;
    fn log1p(x: f64) -> f64;
    fn sinf(x: f32) -> f32;
    fn sin(x: f64) -> f64;
    fn cosf(x: f32) -> f32;
    fn cos(x: f64) -> f64;
    fn tanf(x: f32) -> f32;
    fn tan(x: f64) -> f64;
    fn tanhf(x: f32) -> f32;
    fn tanh(x: f64) -> f64;
    fn atan2f(y: f32, x: f32) -> f32;
    fn atan2(y: f64, x: f64) -> f64;
    fn powf(x: f32, y: f32) -> f32;
    fn pow(x: f64, y: f64) -> f64;
    fn cbrtf(x: f32) -> f32;
    fn cbrt(x: f64) -> f64;
    fn erff(x: f32) -> f32;
    fn erf(x: f64) -> f64;
    fn roundf(x: f32) -> f32;
    fn round(x: f64) -> f64;
    fn fmodf(x: f32, y: f32) -> f32;
    fn fmod(x: f64, y: f64) -> f64;
    fn hypotf(x: f32, y: f32) -> f32;
    fn hypot(x: f64, y: f64) -> f64;
    fn sinhf(x: f32) -> f32;
    fn sinh(x: f64) -> f64;
    fn coshf(x: f32) -> f32;
    fn cosh(x: f64) -> f64;
}

use crate::conv::{tessera_rt_conv_f32, tessera_rt_conv_f64};
use crate::gemm::{
    tessera_rt_gemm_c128, tessera_rt_gemm_c64, tessera_rt_gemm_f32, tessera_rt_gemm_f32_mixed, tessera_rt_gemm_f64,
};
use crate::int_gemm::tessera_rt_gemm_int;
use tessera_fft::{tessera_rt_fft, tessera_rt_fft_f32};

/// Every symbol a kernel may call, with its address.
pub fn symbols() -> Vec<(&'static str, *const u8)> {
    macro_rules! table {
        ($($f:ident),* $(,)?) => { vec![$((stringify!($f), $f as *const u8)),*] };
    }
    let mut symbols = table![
        expf, exp, expm1f, expm1, logf, log, log1pf, log1p, sinf, sin, cosf, cos, tanf, tan, tanhf, tanh, atan2f,
        atan2, powf, pow, cbrtf, cbrt, erff, erf, roundf, round, fmodf, fmod, hypotf, hypot, sinhf, sinh, coshf, cosh,
    ];
    symbols.extend(table![
        tessera_rt_gemm_f32,
        tessera_rt_gemm_f32_mixed,
        tessera_rt_gemm_f64,
        tessera_rt_gemm_c64,
        tessera_rt_gemm_c128,
        tessera_rt_gemm_int,
        tessera_rt_conv_f32,
        tessera_rt_conv_f64,
        tessera_rt_fft,
        tessera_rt_fft_f32
    ]);
    symbols
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_are_unique_and_resolved() {
        let table = symbols();
        let mut names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), table.len());
        assert!(table.iter().all(|(_, p)| !p.is_null()));
        assert!(names.contains(&"tessera_rt_gemm_f32") && names.contains(&"tessera_rt_gemm_f64"));
    }
}
