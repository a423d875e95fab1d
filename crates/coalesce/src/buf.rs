//! Page-aligned, pre-faulted private buffers: the cache's way storage and the aggregator's
//! batch slots, and the line copy every path uses.
//!
//! Why not a `Vec<u8>`: glibc places large allocations 16 bytes past a page boundary, and
//! its fresh pages are first touched on the hot path. On the machines accio is measured on
//! (`MACHINE_NOTES.md`, traits 1 and 2) that means a 4 KiB-aliased copy into every
//! page-aligned peer window and a first write at a fraction of memory speed. An anonymous
//! mapping populated up front has neither problem.

use accio_core::{copy_bytes, Region};

/// Copies one line of `n` bytes; the common line sizes get fixed-size copies the compiler
/// inlines, instead of a call to `memcpy` that costs as much as the copy itself.
///
/// # Safety
/// `src` must be valid for `n` reads, `dst` for `n` writes, and the ranges must not
/// overlap.
#[inline(always)]
pub(crate) unsafe fn copy_line(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: forwarded caller contract; each arm copies exactly `n` bytes.
    unsafe {
        match n {
            8 => std::ptr::copy_nonoverlapping(src, dst, 8),
            16 => std::ptr::copy_nonoverlapping(src, dst, 16),
            32 => std::ptr::copy_nonoverlapping(src, dst, 32),
            64 => std::ptr::copy_nonoverlapping(src, dst, 64),
            128 => std::ptr::copy_nonoverlapping(src, dst, 128),
            _ => copy_bytes(dst, src, n),
        }
    }
}

/// An owned, zeroed, page-aligned buffer whose pages are present from the start.
#[derive(Debug)]
pub(crate) struct PageBuf {
    region: Region,
}

impl PageBuf {
    /// Maps `len` bytes (rounded up to at least one byte) of private memory, pre-faulted.
    pub(crate) fn new(len: usize) -> accio_core::Result<PageBuf> {
        Ok(PageBuf {
            region: Region::anonymous(len)?,
        })
    }

    /// The whole buffer.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the region is a private anonymous mapping of `len` bytes owned by this
        // buffer alone: it is never registered, shared with a peer or handed out, so the
        // only access is through `self`, and `&self` excludes writers.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr(), self.region.len()) }
    }

    /// The whole buffer, mutably.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only live reference.
        unsafe { std::slice::from_raw_parts_mut(self.region.as_ptr(), self.region.len()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_page_aligned_zeroed_and_writable() {
        let mut b = PageBuf::new(3 * 4096 + 5).unwrap();
        assert_eq!(b.as_slice().as_ptr() as usize % 4096, 0);
        assert_eq!(b.as_slice().len(), 3 * 4096 + 5);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[4096] = 7;
        assert_eq!(b.as_slice()[4096], 7);
    }
}
