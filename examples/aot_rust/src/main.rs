//! Runs the MLP that `build.rs` compiled ahead of time, through the generic entry point
//! `int32_t mlp(const void* const* args, void* const* results, void* temp)`.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::c_void;

mod sizes {
    include!(concat!(env!("OUT_DIR"), "/mlp_sizes.rs"));
}

extern "C" {
    fn mlp(args: *const *const c_void, results: *const *mut c_void, temp: *mut c_void) -> i32;
}

/// Memory aligned as the module requires, freed on drop.
struct Buffer {
    ptr: *mut u8,
    layout: Layout,
}

impl Buffer {
    fn new(bytes: usize) -> Buffer {
        let layout = Layout::from_size_align(bytes.max(1), sizes::ALIGNMENT).unwrap();
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Buffer { ptr, layout }
    }

    fn floats(&mut self) -> &mut [f32] {
        // SAFETY: the allocation holds `size / 4` f32s, aligned, initialized (zeroed).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.layout.size() / 4) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

fn main() {
    // The object calls the runtime's GEMM; naming it keeps it in the link.
    std::hint::black_box(tessera_runtime::gemm::tessera_rt_gemm_f32 as *const ());
    let mut args: Vec<Buffer> = sizes::ARG_BYTES.iter().map(|&b| Buffer::new(b)).collect();
    let mut results: Vec<Buffer> = sizes::RESULT_BYTES.iter().map(|&b| Buffer::new(b)).collect();
    let temp = Buffer::new(sizes::TEMP_BYTES);
    let fills: [fn(usize) -> f32; 5] = [
        |i| (i % 7) as f32 * 0.1,
        |i| ((i % 5) as f32 - 2.0) * 0.01,
        |_| 0.1,
        |i| ((i % 3) as f32 - 1.0) * 0.02,
        |i| i as f32,
    ];
    for (buffer, fill) in args.iter_mut().zip(fills) {
        buffer.floats().iter_mut().enumerate().for_each(|(i, x)| *x = fill(i));
    }
    let arg_ptrs: Vec<*const c_void> = args.iter().map(|b| b.ptr as *const c_void).collect();
    let result_ptrs: Vec<*mut c_void> = results.iter().map(|b| b.ptr.cast()).collect();
    let temp_ptr = if sizes::TEMP_BYTES == 0 { std::ptr::null_mut() } else { temp.ptr.cast() };
    // SAFETY: every buffer has the size and alignment the header gives.
    let rc = unsafe { mlp(arg_ptrs.as_ptr(), result_ptrs.as_ptr(), temp_ptr) };
    assert_eq!(rc, 0, "mlp returned error code {rc}");
    let out = results[0].floats();
    let cols = sizes::RESULT0_DIM1;
    println!("mlp from Rust: {} x {cols} logits, row 0:", sizes::RESULT0_DIM0);
    println!("{:?}", &out[..cols]);
}
