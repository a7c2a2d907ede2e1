//! Owned byte buffers aligned to 64 bytes (a cache line and a 512-bit vector), the alignment
//! every buffer a kernel sees has (`Program::ALIGNMENT`). Zeroed when allocated, freed on drop.
//!
//! The allocation asks for the allocator's own alignment and aligns the address itself: asking
//! for 64 makes `alloc_zeroed` a `posix_memalign` plus a `memset` of every byte, which costs a
//! large arena tens of milliseconds at compile time, where `calloc` maps zero pages lazily.
//!
//! Large buffers (at least [`HUGE_MIN`]) on Linux are mapped directly, aligned to 2 MiB and
//! advised as transparent huge pages: kernels stream them, and with 4 KiB pages a 256 MiB
//! read walks 64Ki pages through a TLB of a few thousand entries. Machines whose THP setting
//! is `madvise` (the common default) give huge pages only to memory that asks, as numpy's
//! allocator does for large arrays.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use crate::error::RuntimeError;

/// Alignment of every runtime buffer, in bytes.
pub const ALIGNMENT: usize = 64;

/// A zero-initialized, 64-byte-aligned heap buffer of a fixed length.
pub struct AlignedBuffer {
    /// `base` rounded up to [`ALIGNMENT`] (to [`HUGE_PAGE`] for a mapping).
    ptr: NonNull<u8>,
    len: usize,
    /// What the allocator or `mmap` returned, for freeing it.
    base: NonNull<u8>,
    /// The length of the mapping when the buffer was mapped, not allocated.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    mapped: Option<usize>,
}

/// The transparent huge page size on x86-64 and (with 4 KiB base pages) AArch64 Linux.
const HUGE_PAGE: usize = 2 << 20;

/// Buffers this large are mapped with huge pages; below it the rounding to 2 MiB would cost
/// more memory than the TLB misses it saves.
const HUGE_MIN: usize = 2 * HUGE_PAGE;

/// The alignment the allocation itself asks for: what `malloc`/`calloc` give anyway.
const ALLOC_ALIGN: usize = 16;

// The buffer owns its memory exclusively, like a `Vec<u8>`; shared access only reads.
unsafe impl Send for AlignedBuffer {}
unsafe impl Sync for AlignedBuffer {}

impl AlignedBuffer {
    /// A zeroed buffer of `len` bytes. Zero-length buffers allocate one aligned byte so that
    /// every buffer has a real, aligned address to hand to a kernel.
    pub fn zeroed(len: usize) -> Result<AlignedBuffer, RuntimeError> {
        if let Some(buffer) = Self::map_huge(len) {
            return Ok(buffer);
        }
        // SAFETY: the layout has a nonzero size.
        Self::allocate(len, |layout| unsafe { alloc::alloc_zeroed(layout) })
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<AlignedBuffer, RuntimeError> {
        let buffer = match Self::map_huge(bytes.len()) {
            Some(buffer) => buffer,
            // SAFETY: the layout has a nonzero size; every byte is written below before any read.
            None => Self::allocate(bytes.len(), |layout| unsafe { alloc::alloc(layout) })?,
        };
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
        Ok(AlignedBuffer { ptr, len, base, mapped: None })
    }

    /// A zeroed mapping of at least `len` bytes starting on a huge page, advised as huge pages;
    /// `None` for small buffers, on other systems, or when the system refuses (the caller then
    /// allocates as usual).
    #[cfg(target_os = "linux")]
    fn map_huge(len: usize) -> Option<AlignedBuffer> {
        if len < HUGE_MIN {
            return None;
        }
        // One spare huge page lets the start be rounded up to a huge page boundary.
        let map_len = len.div_ceil(HUGE_PAGE).checked_add(1)?.checked_mul(HUGE_PAGE)?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choice touches no
        // existing memory.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let base = NonNull::new(base.cast::<u8>())?;
        let pad = base.as_ptr().align_offset(HUGE_PAGE);
        // SAFETY: `pad < HUGE_PAGE`, so `ptr + len` stays inside the mapping.
        let ptr = unsafe { NonNull::new_unchecked(base.as_ptr().add(pad)) };
        // Advice only: a kernel without THP leaves ordinary pages, which are still correct.
        // SAFETY: the range lies inside the mapping made above.
        unsafe { libc::madvise(ptr.as_ptr().cast(), len.next_multiple_of(HUGE_PAGE), libc::MADV_HUGEPAGE) };
        Some(AlignedBuffer { ptr, len, base, mapped: Some(map_len) })
    }

    #[cfg(not(target_os = "linux"))]
    fn map_huge(_len: usize) -> Option<AlignedBuffer> {
        None
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
        #[cfg(target_os = "linux")]
        if let Some(map_len) = self.mapped {
            // SAFETY: `base` and `map_len` are the mapping `map_huge` made; nothing else owns it.
            unsafe { libc::munmap(self.base.as_ptr().cast(), map_len) };
            return;
        }
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
    fn large_buffers_are_mapped_on_huge_page_boundaries() {
        let len = HUGE_MIN + 3;
        let z = AlignedBuffer::zeroed(len).unwrap();
        assert_eq!(z.len(), len);
        assert!(z.as_slice().iter().all(|&x| x == 0));
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let a = AlignedBuffer::from_bytes(&data).unwrap();
        let b = a.clone();
        assert_eq!(b.as_slice(), &data[..]);
        for buffer in [&z, &a, &b] {
            assert!(is_aligned(buffer.as_ptr()));
            if cfg!(target_os = "linux") {
                assert!(buffer.mapped.is_some());
                assert_eq!(buffer.as_ptr() as usize % HUGE_PAGE, 0, "{buffer:?}");
            }
        }
        // Just below the threshold stays on the heap.
        assert!(AlignedBuffer::zeroed(HUGE_MIN - 1).unwrap().mapped.is_none());
    }

    #[test]
    fn impossible_sizes_are_errors() {
        let err = AlignedBuffer::zeroed(usize::MAX - 10).unwrap_err();
        assert!(matches!(err, RuntimeError::OutOfMemory { .. }), "{err}");
    }
}
