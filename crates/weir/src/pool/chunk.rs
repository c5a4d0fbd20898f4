//! The chunks of one pool and the state they share: the memory (cells, the
//! arena, the blocks or frames cells point into) and each chunk's state word.
//! The capture side and the worker side both hold the [`Pool`]; nothing else does.
//!
//! Invariants: a chunk's cells and bytes are written only while it is
//! `Attached` (by the capture thread) and read only while it is `Delivering`
//! (by the worker that holds it). Every change of state is one
//! compare-and-swap of the chunk's word (state, holder, generation), so a move
//! from a state the chunk is not in, by a worker that does not hold it, or with
//! an old generation fails and changes nothing. The sides make the moves
//! (`capture.rs`: Free → Attached → Captured; `worker.rs`: Captured →
//! Delivering → Free); this file owns the word, the memory, and the argument
//! that sharing the `Pool` between the two threads is sound.

#![allow(unsafe_code)]

use super::blocks::BlockArena;
use super::config::PoolConfig;
use super::frames::FrameArena;
use crate::{LinkType, Packet, QueueId};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The state of one chunk, stored with its generation in one atomic word.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum ChunkState {
    Free = 0,
    Attached = 1,
    Captured = 2,
    Delivering = 3,
}

impl ChunkState {
    fn from_bits(b: u64) -> ChunkState {
        match b & 0xff {
            0 => ChunkState::Free,
            1 => ChunkState::Attached,
            2 => ChunkState::Captured,
            _ => ChunkState::Delivering,
        }
    }
}

/// The state word: state in bits 0-7, the holding worker (its queue + 1, 0 for
/// none) in bits 8-23, the generation in bits 24-55. The holder is part of the
/// word so that a recycle by a worker that does not hold the chunk (possible in
/// a buddy group, where several workers read one pool) fails the same
/// compare-and-swap that moves the chunk.
pub(super) fn pack_held(state: ChunkState, gen: u32, holder: u16) -> u64 {
    (u64::from(gen) << 24) | (u64::from(holder) << 8) | state as u64
}

pub(super) fn pack(state: ChunkState, gen: u32) -> u64 {
    pack_held(state, gen, 0)
}

/// Names one hand-out of one chunk, for callers that cannot hold a borrow (FFI).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ChunkToken {
    pub(crate) pool: u32,
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// Why a recycle was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RecycleError {
    #[error("chunk belongs to another pool")]
    Foreign,
    #[error("chunk index {0} is out of range")]
    OutOfRange(u32),
    #[error("chunk is not being delivered (state {0:?}): double or early recycle")]
    NotHeld(ChunkState),
    #[error("stale token: generation {token} but the chunk is at {current}")]
    Stale { token: u32, current: u32 },
    #[error("chunk is held by another worker of the buddy group")]
    OtherWorker,
}

/// One packet slot; 32-byte aligned so no cell straddles two cache lines.
#[derive(Copy, Clone)]
#[repr(C, align(32))]
pub(super) struct Cell {
    pub(super) data: *const u8,
    pub(super) caplen: u32,
    pub(super) wire_len: u32,
    pub(super) ts_ns: u64,
    /// The locality key ([`key_code`]) when the pool computes keys. In the cell,
    /// so the locality stage's in-order pass over the keys brings the cells into
    /// the worker's cache for its out-of-order pass; it fills what would be
    /// padding of a 32-byte cell anyway (two cells per cache line).
    pub(super) key: u32,
    /// [`Packet::ts_carry`], in the last 4 bytes of the 32.
    pub(super) ts_carry: u32,
}

const EMPTY_CELL: Cell = Cell { data: std::ptr::null(), caplen: 0, wire_len: 0, ts_ns: 0, key: KEYLESS, ts_carry: 0 };
// Two cells per cache line: the locality stage reads them in order.
const _: () = assert!(std::mem::size_of::<Cell>() == 32);

/// Pool identities, so a token from one engine's pool is never taken for another's.
static NEXT_POOL_UID: AtomicU32 = AtomicU32::new(1);

/// The memory of one pool, shared by its capture side and its worker side.
pub(super) struct Pool {
    pub(super) uid: u32,
    pub(super) queue: QueueId,
    pub(super) cells_per_chunk: usize,
    pub(super) chunk_bytes: usize,
    states: Box<[AtomicU64]>,
    /// Packets and wire bytes in each chunk; written while Attached, read while Delivering.
    pub(super) counts: Box<[AtomicU32]>,
    pub(super) bytes: Box<[AtomicU64]>,
    pub(super) cells: Box<[UnsafeCell<Cell>]>,
    /// The link type locality keys are computed for, when they are.
    pub(super) key_link: Option<LinkType>,
    pub(super) arena: crate::sys::mem::Region,
    /// The blocks or frames cells point into, kept alive as long as the pool.
    pub(super) backing: OnceLock<Backing>,
}

/// External memory cells of a pool may point into; one kind per pool.
pub(super) enum Backing {
    Blocks(Arc<BlockArena>),
    Frames(Arc<FrameArena>),
}

// SAFETY: cells and arena bytes of a chunk are written only by the capture thread
// while the chunk is Attached and read only by the worker while it is Delivering.
// The state word moves between those with Release/Acquire transitions and the ring
// pushes/pops between them are Release/Acquire too, so every access to a chunk's
// memory is ordered after the previous owner's last access. The raw pointers in
// cells point into `arena` or into a block of `backing` that the chunk holds; both
// live as long as the `Pool`.
unsafe impl Send for Pool {}
// SAFETY: as above: shared access never touches a chunk's memory outside its state.
unsafe impl Sync for Pool {}

impl Pool {
    /// An error when its memory cannot be had (see [`PoolConfig::memory_bytes`]
    /// for what the engine checks beforehand).
    pub(super) fn new(queue: QueueId, cfg: &PoolConfig, key_link: Option<LinkType>) -> std::io::Result<Pool> {
        let r = cfg.chunks().get();
        let m = cfg.cells().get();
        let chunk_bytes = cfg.chunk_bytes().get();
        // Lazily backed: chunks never attached cost no resident memory.
        let arena = crate::sys::mem::Region::array(r, chunk_bytes)?;
        Ok(Pool {
            uid: NEXT_POOL_UID.fetch_add(1, Ordering::Relaxed),
            queue,
            cells_per_chunk: m,
            chunk_bytes,
            states: try_boxed(r, || AtomicU64::new(pack(ChunkState::Free, 0)))?,
            counts: try_boxed(r, || AtomicU32::new(0))?,
            bytes: try_boxed(r, || AtomicU64::new(0))?,
            cells: try_boxed(r.saturating_mul(m), || UnsafeCell::new(EMPTY_CELL))?,
            key_link,
            arena,
            backing: OnceLock::new(),
        })
    }

    pub(super) fn chunks(&self) -> usize {
        self.states.len()
    }

    /// Chunks not Free now: attached, captured or being delivered. Read one
    /// word after another, so a chunk that changes state meanwhile may be
    /// counted in either.
    pub(super) fn chunks_in_use(&self) -> usize {
        // Relaxed: a count for display; no chunk memory is read after it.
        self.states.iter().filter(|w| ChunkState::from_bits(w.load(Ordering::Relaxed)) != ChunkState::Free).count()
    }

    pub(super) fn state(&self, idx: u32) -> (ChunkState, u32) {
        let (state, gen, _) = self.state_held(idx);
        (state, gen)
    }

    /// State, generation and holder (0 when no worker holds the chunk).
    pub(super) fn state_held(&self, idx: u32) -> (ChunkState, u32, u16) {
        // Acquire: pairs with the Release transitions, for callers that then read cells.
        let w = self.states[idx as usize].load(Ordering::Acquire);
        (ChunkState::from_bits(w), (w >> 24) as u32, (w >> 8) as u16)
    }

    /// Move `idx` from `from` to `to` within one generation (or to the next one when
    /// recycling). Returns the state actually found on failure.
    pub(super) fn transition(&self, idx: u32, gen: u32, from: ChunkState, to: ChunkState, next_gen: u32) -> Result<(), u64> {
        self.swap_word(idx, pack(from, gen), pack(to, next_gen))
    }

    pub(super) fn swap_word(&self, idx: u32, from: u64, to: u64) -> Result<(), u64> {
        // AcqRel: acquire the previous owner's accesses, release ours to the next.
        self.states[idx as usize].compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire).map(|_| ())
    }

    /// The packet in cell `i` of chunk `idx`.
    ///
    /// # Safety
    /// The chunk must be Delivering and held by the caller, and `i < count`.
    pub(super) unsafe fn packet(&self, idx: u32, i: usize) -> Packet<'_> {
        debug_assert!(i < self.cells_per_chunk);
        let cell = self.cells[idx as usize * self.cells_per_chunk + i].get();
        // SAFETY: the caller holds the chunk in Delivering, so the capture thread does
        // not write this cell; the cell was written (with a pointer into this chunk's
        // arena slice or a block it holds, and its length) before it was published.
        let c = unsafe { *cell };
        // SAFETY: `data..data+caplen` lies in this chunk's arena region or in a block
        // the chunk holds; both live as long as the pool and neither is written
        // while the chunk is held.
        let data = unsafe { std::slice::from_raw_parts(c.data, c.caplen as usize) };
        Packet::with_carry(data, c.wire_len, c.ts_ns, self.queue, c.ts_carry)
    }

    /// Call `f` with the cell number and locality key of each of the first
    /// `count` packets of chunk `idx`, read from the cells when the capture
    /// side computed them (`sort_keys`), computed here otherwise.
    ///
    /// # Safety
    /// As [`packet`](Self::packet), for every cell below `count`.
    pub(super) unsafe fn for_each_sort_key(&self, idx: u32, count: usize, link: LinkType, mut f: impl FnMut(u32, Option<u16>)) {
        debug_assert!(self.key_link.is_none_or(|l| l == link), "keys were computed for another link type");
        let base = idx as usize * self.cells_per_chunk;
        if self.key_link.is_some() {
            for (i, c) in self.cells[base..base + count].iter().enumerate() {
                // SAFETY: the caller holds the chunk (Delivering): its cells were
                // written before it was published and are not written again until
                // it is recycled.
                f(i as u32, key_of_code(unsafe { (*c.get()).key }));
            }
        } else {
            for i in 0..count {
                // SAFETY: as the caller promises, i < count.
                let p = unsafe { self.packet(idx, i) };
                f(i as u32, crate::wire::sort_key(link, p.data()));
            }
        }
    }
}

/// A locality key as stored: the port, or [`KEYLESS`].
pub(super) const KEYLESS: u32 = 1 << 16;

#[inline]
pub(super) fn key_code(key: Option<u16>) -> u32 {
    key.map_or(KEYLESS, u32::from)
}

#[inline]
fn key_of_code(code: u32) -> Option<u16> {
    u16::try_from(code).ok()
}

/// `n` values made by `f`, or an error where `collect` would abort for want of memory.
fn try_boxed<T>(n: usize, f: impl FnMut() -> T) -> std::io::Result<Box<[T]>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
    v.extend(std::iter::repeat_with(f).take(n));
    Ok(v.into_boxed_slice())
}
