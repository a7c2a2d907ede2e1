//! Owned byte buffers aligned to 64 bytes (a cache line and a 512-bit vector), the alignment
//! every buffer a kernel sees has (`Program::ALIGNMENT`). Zeroed when allocated, freed on drop.
//!
//! The allocation asks for the allocator's own alignment and aligns the address itself: asking
//! for 64 makes `alloc_zeroed` a `posix_memalign` plus a `memset` of every byte, which costs a
//! large arena tens of milliseconds at compile time, where `calloc` maps zero pages lazily.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use crate::error::RuntimeError;

/// Alignment of every runtime buffer, in bytes.
pub const ALIGNMENT: usize = 64;

/// A zero-initialized, 64-byte-aligned heap buffer of a fixed length.
pub struct AlignedBuffer {
    /// `base` rounded up to [`ALIGNMENT`].
    ptr: NonNull<u8>,
    len: usize,
    /// What the allocator returned, for `dealloc`.
    base: NonNull<u8>,
}

/// The alignment the allocation itself asks for: what `malloc`/`calloc` give anyway.
const ALLOC_ALIGN: usize = 16;

// The buffer owns its memory exclusively, like a `Vec<u8>`; shared access only reads.
unsafe impl Send for AlignedBuffer {}
unsafe impl Sync for AlignedBuffer {}

impl AlignedBuffer {
    /// A zeroed buffer of `len` bytes. Zero-length buffers allocate one aligned byte so that
    /// every buffer has a real, aligned address to hand to a kernel.
    pub fn zeroed(len: usize) -> Result<AlignedBuffer, RuntimeError> {
        // SAFETY: the layout has a nonzero size.
        Self::allocate(len, |layout| unsafe { alloc::alloc_zeroed(layout) })
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<AlignedBuffer, RuntimeError> {
        // SAFETY: the layout has a nonzero size; every byte is written below before any read.
        let buffer = Self::allocate(bytes.len(), |layout| unsafe { alloc::alloc(layout) })?;
        // SAFETY: `ptr` has room for `len` bytes; the source is a distinct allocation.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.ptr.as_ptr(), bytes.len()) };
        Ok(buffer)
    }

    fn allocate(len: usize, raw_alloc: impl FnOnce(Layout) -> *mut u8) -> Result<AlignedBuffer, RuntimeError> {
        let layout = Self::layout(len)?;
        let base = NonNull::new(raw_alloc(layout)).ok_or(RuntimeError::OutOfMemory { bytes: len as u64 })?;
        let pad = base.as_ptr().align_offset(ALIGNMENT);
        // SAFETY: the allocation has `ALIGNMENT - ALLOC_ALIGN` spare bytes, at least `pad`.
        let ptr = unsafe { NonNull::new_unchecked(base.as_ptr().add(pad)) };
        Ok(AlignedBuffer { ptr, len, base })
    }

    /// `len` bytes (at least one, so every buffer has a real address to hand to a kernel)
    /// plus the slack to align the start.
    fn layout(len: usize) -> Result<Layout, RuntimeError> {
        len.max(1)
            .checked_add(ALIGNMENT - ALLOC_ALIGN)
            .and_then(|size| Layout::from_size_align(size, ALLOC_ALIGN).ok())
            .ok_or(RuntimeError::OutOfMemory { bytes: len as u64 })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` initialized (zeroed at allocation) bytes we own.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        if let Ok(layout) = Self::layout(self.len) {
            // SAFETY: `base` was allocated in `allocate` with this same layout.
            unsafe { alloc::dealloc(self.base.as_ptr(), layout) }
        }
    }
}

impl Clone for AlignedBuffer {
    fn clone(&self) -> AlignedBuffer {
        match AlignedBuffer::from_bytes(self.as_slice()) {
            Ok(b) => b,
            Err(_) => alloc::handle_alloc_error(Self::layout(self.len).unwrap_or(Layout::new::<u8>())),
        }
    }
}

impl std::fmt::Debug for AlignedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuffer({} bytes at {:p})", self.len, self.ptr)
    }
}

/// True when `ptr` is aligned as kernels expect.
pub fn is_aligned(ptr: *const u8) -> bool {
    (ptr as usize).is_multiple_of(ALIGNMENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        for len in [0, 1, 3, 63, 64, 65, 4096, 100_003] {
            let b = AlignedBuffer::zeroed(len).unwrap();
            assert_eq!(b.len(), len);
            assert!(is_aligned(b.as_ptr()), "{len}: {:p}", b.as_ptr());
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn from_bytes_copies_and_clone_is_deep() {
        let data: Vec<u8> = (0..200u8).collect();
        let mut a = AlignedBuffer::from_bytes(&data).unwrap();
        let b = a.clone();
        a.as_mut_slice()[0] = 99;
        assert_eq!(b.as_slice(), &data[..]);
        assert_eq!(a.as_slice()[0], 99);
        assert_ne!(a.as_ptr(), b.as_ptr());
        assert!(is_aligned(b.as_ptr()));
    }

    #[test]
    fn impossible_sizes_are_errors() {
        let err = AlignedBuffer::zeroed(usize::MAX - 10).unwrap_err();
        assert!(matches!(err, RuntimeError::OutOfMemory { .. }), "{err}");
    }
}
