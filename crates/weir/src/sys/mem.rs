//! Pool memory straight from the kernel: anonymous private mappings, or mappings
//! a source made of memory it shares with the kernel (a TPACKET_V3 ring).
//!
//! Pools and block arenas are large (64 MiB per queue by default) and mostly
//! untouched at first. An anonymous mapping is zero-filled lazily and given back
//! whole on drop, whereas the allocator may serve a large zeroed request from its
//! heap once its mmap threshold has grown, and then has to clear every byte.
//! Transparent huge pages are asked for where the kernel allows them, so a pool
//! costs fewer TLB entries when the capture thread and worker sweep through it.

#![allow(unsafe_code)]

use std::os::fd::OwnedFd;
use std::ptr::NonNull;

/// The size of a page, which mappings are made of and aligned to.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects; the result is checked.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// A region of mapped memory, page aligned, unmapped on drop.
pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
    /// The socket a shared mapping came from: kept open until the mapping is gone,
    /// so the kernel never frees the ring under it.
    _owner: Option<OwnedFd>,
}

// SAFETY: the region is plain memory; who may touch which bytes is decided by the
// owners (pool chunk states, block counts), not by the region.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// Map `len` bytes (rounded up to a page). A refusal (the address space
    /// limit, the kernel's overcommit check) is an error for the caller to report.
    pub(crate) fn new(len: usize) -> std::io::Result<Region> {
        let len = len.max(1);
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked below.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        #[cfg(not(miri))]
        // SAFETY: `p..p+len` is the mapping just made; the advice is only a hint and
        // its failure (THP disabled) changes nothing. Miri does not model it.
        unsafe {
            libc::madvise(p, len, libc::MADV_HUGEPAGE)
        };
        Ok(Region { ptr: NonNull::new(p.cast()).expect("mmap does not return NULL on success"), len, _owner: None })
    }

    /// Map `count` items of `size` bytes; a product past the address space is
    /// refused like any other mapping the kernel would not make.
    pub(crate) fn array(count: usize, size: usize) -> std::io::Result<Region> {
        let len = count.checked_mul(size).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        Region::new(len)
    }

    /// Take over a mapping made elsewhere (a packet ring mapped from `owner`, a
    /// socket); it is unmapped on drop, and the socket closed after that.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be a mapping returned by `mmap` that nothing else unmaps.
    pub(crate) unsafe fn from_mapping(ptr: NonNull<u8>, len: usize, owner: Option<OwnedFd>) -> Region {
        Region { ptr, len, _owner: owner }
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`, once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `u64` words in a mapping of their own, written with zeros when made. For
/// a large table that grows by doubling (the flow table's index): an
/// outgrown array goes back to the kernel when it is dropped, where the
/// allocator kept the outgrown arrays for reuse (at 10^7 connections,
/// mimalloc held 7 bytes a stream direction of a stream table's outgrown
/// indexes, about 5% of the table).
pub(crate) struct Words {
    region: Region,
    len: usize,
}

impl Words {
    /// `len` words of 0, each page written (not left as fresh zero pages,
    /// which a read then a write would fault twice). A refused mapping is
    /// the error.
    pub(crate) fn zeroed(len: usize) -> std::io::Result<Words> {
        let region = Region::array(len, std::mem::size_of::<u64>())?;
        let mut words = Words { region, len };
        words.fill(0);
        Ok(words)
    }
}

impl std::ops::Deref for Words {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        // SAFETY: the region holds at least `len` words (`Region::array`),
        // is page aligned (so aligned for u64), holds no invalid u64 (zero
        // pages, then what was written through `deref_mut`), and is owned
        // by `self`, which the borrow ties the slice to.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr().cast::<u64>(), self.len) }
    }
}

impl std::ops::DerefMut for Words {
    fn deref_mut(&mut self) -> &mut [u64] {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference
        // into the region while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.region.as_ptr().cast::<u64>(), self.len) }
    }
}
