//! Frames: memory the kernel writes one packet at a time into, at addresses we
//! give it. AF_XDP's UMEM is such an arena.
//!
//! A frame is in exactly one place: free with the capture unit, on the kernel's
//! fill ring, on the RX ring, or held by a cell of a chunk. A cell that points
//! into a frame holds it until its chunk is recycled; the capture side then hands
//! the frame's address back ([`super::CaptureSide::take_frames`]) so the unit can
//! put it on the fill ring again. This is WireCAP's ring-buffer pool on stock
//! Linux: R×M frames, of which the fill ring only ever holds the free ones.

#![allow(unsafe_code)]

use crate::sys::mem::Region;
use std::sync::Arc;

/// A region divided into equal frames, addressed by byte offset as AF_XDP does.
pub(crate) struct FrameArena {
    mem: Region,
    frame_size: usize,
}

impl FrameArena {
    /// `frames` frames of `frame_size` bytes (a power of two, 2048 or 4096 for
    /// AF_XDP); an error when the memory cannot be mapped.
    pub(crate) fn new(frames: usize, frame_size: usize) -> std::io::Result<Arc<FrameArena>> {
        assert!(frames > 0 && frame_size.is_power_of_two(), "frames must be a power of two in size");
        Ok(Arc::new(FrameArena { mem: Region::array(frames, frame_size)?, frame_size }))
    }

    pub(crate) fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// The memory, for registering it with the kernel (XDP_UMEM_REG) and for
    /// reading what the kernel received into it.
    pub(crate) fn region(&self) -> &Region {
        &self.mem
    }

    /// Bytes in the region.
    pub(crate) fn len(&self) -> usize {
        self.mem.len()
    }

    /// The frame address (offset of the frame's first byte) that `addr` lies in.
    pub(crate) fn frame_of(&self, addr: u64) -> u64 {
        addr & !(self.frame_size as u64 - 1)
    }

    /// Pointer to byte `addr`, after checking `addr..addr+len` lies in one frame.
    pub(crate) fn ptr(&self, addr: u64, len: usize) -> *const u8 {
        let start = addr as usize;
        let frame_end = self.frame_of(addr) as usize + self.frame_size;
        assert!(start.checked_add(len).is_some_and(|end| end <= frame_end && end <= self.mem.len()), "packet outside its frame");
        // SAFETY: in bounds of the region, checked above.
        unsafe { self.mem.as_ptr().add(start) }
    }

    /// The address of a pointer into this arena.
    pub(crate) fn addr_of(&self, p: *const u8) -> Option<u64> {
        let base = self.mem.as_ptr() as usize;
        let p = p as usize;
        (p >= base && p < base + self.mem.len()).then(|| (p - base) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let a = FrameArena::new(4, 2048).unwrap();
        assert_eq!(a.len(), 8192);
        assert_eq!(a.frame_of(2048 + 300), 2048);
        let p = a.ptr(2048 + 256, 1000);
        assert_eq!(a.addr_of(p), Some(2048 + 256));
        assert_eq!(a.addr_of(std::ptr::null()), None);
    }

    #[test]
    #[should_panic(expected = "outside its frame")]
    fn a_packet_cannot_cross_a_frame() {
        FrameArena::new(4, 2048).unwrap().ptr(2048 + 1500, 1000);
    }
}
