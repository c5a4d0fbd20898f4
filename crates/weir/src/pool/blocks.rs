//! Blocks: memory a capture unit fills in bulk and cells point into without a copy.
//!
//! A trace reader `read()`s a file straight into a block, or maps the file and
//! takes its blocks where they lie; a TPACKET_V3 ring's blocks play the same part. Each block has a reference count: the
//! capture unit holds one while it fills and walks the block, and every chunk
//! whose cells point into the block holds one until the chunk is recycled. A
//! block can be taken for writing only when its count is zero, so bytes a worker
//! may be reading are never written.
//!
//! Two kinds of arena. One we own ([`BlockArena::new`]): a block at count zero
//! is free and [`BlockArena::acquire`] hands it out for filling. One shared with
//! the kernel (`BlockArena::over_mapping`, a TPACKET_V3 ring): the kernel fills
//! blocks, the capture unit [`adopt`](BlockArena::adopt)s a block the kernel has
//! handed over, and gives it back only once [`is_unheld`](BlockArena::is_unheld)
//! says every chunk holding its packets was recycled. One over a mapped file
//! (`BlockArena::over_file`): weir never writes it (a program may write a
//! packet it was handed, in its private copy-on-write page, after weir is done
//! with those bytes: see `source/file/mapped.rs`); its blocks are windows
//! that overlap, each starting `headroom` bytes before its stride, so a record
//! that straddles two strides lies whole in the second block's window.
//!
//! A count is raised by the capture unit (acquire, adopt, a chunk taking a cell
//! in the block) and dropped on the capture unit's thread when it takes a
//! recycled chunk back; the worker's reads are ordered before that drop by the
//! recycle queue's Release/Acquire pair, and the drop (Release) before whoever
//! next writes the block sees zero (Acquire). The arena outlives the unit: the
//! pools keep it alive for the workers.

#![allow(unsafe_code)]

use crate::sys::mem::Region;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Index of a block in its arena.
pub(crate) type BlockId = u32;

/// A fixed set of equal blocks.
pub(crate) struct BlockArena {
    /// What keeps the memory valid beyond the mapping itself (a mapped file's
    /// watch for truncation). Declared before `mem` so that it is dropped
    /// before the memory is unmapped.
    _lease: Option<Box<dyn Send + Sync>>,
    mem: Region,
    /// Where block 0 starts in `mem`.
    origin: usize,
    /// From one block's start to the next: `block_bytes`, except over a mapped
    /// file, whose windows overlap.
    stride: usize,
    block_bytes: usize,
    refs: Box<[AtomicU32]>,
    /// Someone else fills the blocks (the kernel, the file): only `adopt` may take one.
    shared: bool,
}

// SAFETY: the memory is only written through a `BlockMut`, which exists only while
// the block's count went from 0 to 1 under it (no reader anywhere), and read
// through `BlockRef`s and cells that hold a count. Counts are atomics.
unsafe impl Send for BlockArena {}
// SAFETY: as above.
unsafe impl Sync for BlockArena {}

impl BlockArena {
    /// `count` blocks of `block_bytes` each; an error when the memory cannot be mapped.
    pub(crate) fn new(block_bytes: usize, count: usize) -> std::io::Result<Arc<BlockArena>> {
        assert!(block_bytes > 0 && count > 0 && count <= u32::MAX as usize, "a block arena needs blocks");
        let mem = Region::array(count, block_bytes)?;
        Ok(Arc::new(BlockArena::layout(mem, 0, block_bytes, block_bytes, count, false, None)))
    }

    fn layout(
        mem: Region,
        origin: usize,
        stride: usize,
        block_bytes: usize,
        count: usize,
        shared: bool,
        lease: Option<Box<dyn Send + Sync>>,
    ) -> BlockArena {
        BlockArena { _lease: lease, mem, origin, stride, block_bytes, refs: (0..count).map(|_| AtomicU32::new(0)).collect(), shared }
    }

    /// An arena over a mapping shared with the kernel, `count` blocks of `block_bytes`.
    ///
    /// # Safety
    /// `mem` must hold `block_bytes * count` bytes, and the kernel must write a
    /// block only after the caller gave it back, which the caller must do only
    /// when [`is_unheld`](Self::is_unheld) is true for it.
    pub(crate) unsafe fn over_mapping(mem: Region, block_bytes: usize, count: usize) -> Arc<BlockArena> {
        assert!(block_bytes > 0 && count > 0 && block_bytes * count <= mem.len(), "mapping smaller than its blocks");
        Arc::new(BlockArena::layout(mem, 0, block_bytes, block_bytes, count, true, None))
    }

    /// An arena over a private mapping of a file: block `i` is the
    /// `window` bytes from `origin + i * stride` of `mem`. `lease` is dropped
    /// just before `mem` is unmapped.
    ///
    /// # Safety
    /// Every block's window must lie in `mem` and be readable, and nothing may
    /// write `mem` while the arena lives, except a program writing the bytes
    /// of a packet it was handed, which weir no longer reads.
    pub(crate) unsafe fn over_file(
        mem: Region,
        origin: usize,
        stride: usize,
        window: usize,
        count: usize,
        lease: Box<dyn Send + Sync>,
    ) -> Arc<BlockArena> {
        assert!(stride > 0 && window >= stride && count > 0 && count <= u32::MAX as usize, "a file arena needs blocks");
        assert!(origin + (count - 1) * stride + window <= mem.len(), "mapping smaller than its blocks");
        Arc::new(BlockArena::layout(mem, origin, stride, window, count, true, Some(lease)))
    }

    /// Hold a block someone else filled (the kernel handed it over, or it is
    /// a mapped file's), to read it and let cells point into it. `None` if it
    /// is already held: the caller adopted it twice.
    pub(crate) fn adopt(self: &Arc<Self>, id: BlockId) -> Option<BlockRef> {
        debug_assert!(self.shared, "adopt is for blocks someone else fills");
        // Acquire: pairs with the release of the last holder of the previous round.
        self.refs.get(id as usize)?.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).ok()?;
        Some(BlockRef(Hold { arena: Arc::clone(self), id }))
    }

    /// True when nobody holds the block: every read of it has happened, so it may
    /// go back to the kernel.
    pub(crate) fn is_unheld(&self, id: BlockId) -> bool {
        // Acquire: every holder's reads happen before our caller hands the block back.
        self.refs[id as usize].load(Ordering::Acquire) == 0
    }

    /// Address of block `id`, for the source that reads the kernel's block headers.
    pub(crate) fn block_ptr(&self, id: BlockId) -> *const u8 {
        self.ptr(id, 0)
    }

    pub(crate) fn block_bytes(&self) -> usize {
        self.block_bytes
    }

    pub(crate) fn count(&self) -> usize {
        self.refs.len()
    }

    /// Take a free block for writing, lowest index first (so a small working set of
    /// blocks is reused and stays in cache).
    pub(crate) fn acquire(self: &Arc<Self>) -> Option<BlockMut> {
        if self.shared {
            return None;
        }
        self.refs.iter().enumerate().find_map(|(i, r)| {
            // AcqRel: acquire the release of the last reader's count; nobody can
            // take the block between our check and our count.
            r.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
                .ok()
                .map(|_| BlockMut(Hold { arena: Arc::clone(self), id: i as BlockId }))
        })
    }

    /// Blocks nobody holds.
    pub(crate) fn free_blocks(&self) -> usize {
        // Relaxed: a statistic.
        self.refs.iter().filter(|r| r.load(Ordering::Relaxed) == 0).count()
    }

    pub(crate) fn hold(&self, id: BlockId) {
        // Relaxed: the holder already holds a count on this block (see module doc).
        let before = self.refs[id as usize].fetch_add(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a chunk took a block nobody held");
    }

    pub(crate) fn release(&self, id: BlockId) {
        // Release: our reads of the block happen before a later acquire sees zero.
        let before = self.refs[id as usize].fetch_sub(1, Ordering::Release);
        debug_assert!(before > 0, "block {id} released more often than held");
    }

    /// Pointer to byte `at` of block `id`.
    pub(crate) fn ptr(&self, id: BlockId, at: usize) -> *const u8 {
        debug_assert!((id as usize) < self.count() && at <= self.block_bytes);
        debug_assert!(self.origin + id as usize * self.stride + at <= self.mem.len());
        // SAFETY: in bounds of the region by the assertion's contract, which the
        // callers check before calling.
        unsafe { self.mem.as_ptr().add(self.origin + id as usize * self.stride + at) }
    }
}

/// One count on one block, given back on drop.
struct Hold {
    arena: Arc<BlockArena>,
    id: BlockId,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.arena.release(self.id);
    }
}

/// A block being filled: the only access to it anywhere.
pub(crate) struct BlockMut(Hold);

impl BlockMut {
    pub(crate) fn bytes(&mut self) -> &mut [u8] {
        let h = &self.0;
        // SAFETY: the count went 0 → 1 when this guard was made and it is not `Clone`,
        // so no cell, chunk or `BlockRef` points into this block.
        unsafe { std::slice::from_raw_parts_mut(h.arena.ptr(h.id, 0) as *mut u8, h.arena.block_bytes) }
    }

    /// Done writing: keep holding the block, now shared.
    pub(crate) fn freeze(self) -> BlockRef {
        BlockRef(self.0)
    }
}

/// A filled block, held for reading; cells may point into it.
pub(crate) struct BlockRef(Hold);

impl BlockRef {
    pub(crate) fn id(&self) -> BlockId {
        self.0.id
    }

    pub(crate) fn arena(&self) -> &Arc<BlockArena> {
        &self.0.arena
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        let h = &self.0;
        // SAFETY: we hold a count, so nobody writes this block while we read it.
        unsafe { std::slice::from_raw_parts(h.arena.ptr(h.id, 0), h.arena.block_bytes) }
    }

    /// Check that `range` lies in the block: cells may only point inside.
    pub(crate) fn check(&self, range: &Range<usize>) {
        assert!(range.start <= range.end && range.end <= self.0.arena.block_bytes, "range {range:?} outside the block");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_written_only_when_nobody_holds_it() {
        let arena = BlockArena::new(64, 2).unwrap();
        let mut a = arena.acquire().unwrap();
        a.bytes()[0] = 7;
        let a = a.freeze();
        let b = arena.acquire().unwrap();
        assert!(arena.acquire().is_none(), "both blocks held");
        arena.hold(a.id());
        let id = a.id();
        drop(a);
        assert!(arena.acquire().is_none(), "a chunk still holds block {id}");
        arena.release(id);
        let again = arena.acquire().unwrap();
        assert_eq!(again.0.id, id);
        drop(b);
        assert_eq!(arena.free_blocks(), 1);
        drop(again);
        assert_eq!(Arc::strong_count(&arena), 1, "guards give their hold on the arena back");
    }
}
