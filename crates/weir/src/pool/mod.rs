//! The ring-buffer pool of one queue: R chunks of M cells, and the work-queue pair
//! that moves chunks between the capture thread and the worker.
//!
//! A chunk moves through `Free → Attached → Captured → Delivering → Free`:
//!
//! - **Free**: on the capture thread's free list.
//! - **Attached**: the capture thread is filling its cells.
//! - **Captured**: published on the capture queue; nobody touches its cells.
//! - **Delivering**: a worker took it off the capture queue and reads its cells.
//!
//! (`Captured` and `Delivering` together are the design's "Captured": the chunk
//! belongs to the application side.) Only a `Delivering` chunk can be recycled, and
//! only with the generation it was handed out with; the generation advances on
//! every recycle. A recycle that names another pool, a chunk that is not being
//! delivered, or an old generation is refused and counted in `bad_recycles`; it
//! changes nothing, so a double recycle can never put one chunk on the free list
//! twice or hand a chunk to the capture thread while a worker still reads it.
//!
//! Free chunks are reused last-in first-out, so the chunk the capture thread fills
//! next is the one most recently read: its cells and arena are still in cache.
//!
//! A cell's bytes live in one of two places. With [`CaptureSide::push_copy`] they
//! are copied into the chunk's own arena of `chunk_bytes` (the DMA of a real NIC
//! into pool buffers). With [`CaptureSide::push_ref`] the cell points into a
//! block of a [`BlockArena`] that the capture unit filled in bulk, and the chunk
//! holds that block (up to [`BLOCKS_PER_CHUNK`] of them) until it is recycled:
//! no copy at all. A chunk is published when its M cells, its arena or its block
//! list are full, or on a flush. With [`CaptureSide::push_frame`] the cell *is*
//! a frame of a [`FrameArena`] (AF_XDP's UMEM) that the kernel wrote, and the
//! frame comes back through [`CaptureSide::take_frames`] when the chunk does.

#![allow(unsafe_code)]

pub mod blocks;
pub mod buddy;
mod config;
pub mod frames;
pub(crate) mod sys;

pub use blocks::{BlockArena, BlockId, BlockMut, BlockRef};
pub use buddy::{link_buddies, OffloadThreshold, WorkerLoad};
pub use config::{CellsPerChunk, ChunkBytes, ChunkCount, PoolConfig, PoolConfigError, MAX_CAPLEN};
pub use frames::FrameArena;

use crate::ring::{self, Capacity, Consumer, Producer, WakeHandle};
use crate::stats::{QueueCounters, Tally};
use crate::{LinkType, Packet, QueueId};
use buddy::{BuddyIn, Offload};
use std::cell::{Cell as StdCell, RefCell, UnsafeCell};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The state of one chunk, stored with its generation in one atomic word.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ChunkState {
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
fn pack_held(state: ChunkState, gen: u32, holder: u16) -> u64 {
    (u64::from(gen) << 24) | (u64::from(holder) << 8) | state as u64
}

fn pack(state: ChunkState, gen: u32) -> u64 {
    pack_held(state, gen, 0)
}

/// Names one hand-out of one chunk, for callers that cannot hold a borrow (FFI).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ChunkToken {
    pub pool: u32,
    pub index: u32,
    pub generation: u32,
}

/// Why a recycle was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecycleError {
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
struct Cell {
    data: *const u8,
    caplen: u32,
    wire_len: u32,
    ts_ns: u64,
    /// The locality key ([`key_code`]) when the pool computes keys. In the cell,
    /// so the locality stage's in-order pass over the keys brings the cells into
    /// the worker's cache for its out-of-order pass; it fills what would be
    /// padding of a 32-byte cell anyway (two cells per cache line).
    key: u32,
    /// [`Packet::ts_carry`], in the last 4 bytes of the 32.
    ts_carry: u32,
}

const EMPTY_CELL: Cell = Cell { data: std::ptr::null(), caplen: 0, wire_len: 0, ts_ns: 0, key: KEYLESS, ts_carry: 0 };
// Two cells per cache line: the locality stage reads them in order.
const _: () = assert!(std::mem::size_of::<Cell>() == 32);

/// Pool identities, so a token from one engine's pool is never taken for another's.
static NEXT_POOL_UID: AtomicU32 = AtomicU32::new(1);

/// The memory of one pool, shared by its capture side and its worker side.
struct Pool {
    uid: u32,
    queue: QueueId,
    cells_per_chunk: usize,
    chunk_bytes: usize,
    states: Box<[AtomicU64]>,
    /// Packets and wire bytes in each chunk; written while Attached, read while Delivering.
    counts: Box<[AtomicU32]>,
    bytes: Box<[AtomicU64]>,
    cells: Box<[UnsafeCell<Cell>]>,
    /// The link type locality keys are computed for, when they are.
    key_link: Option<LinkType>,
    arena: sys::Region,
    /// The blocks or frames cells point into, kept alive as long as the pool.
    backing: OnceLock<Backing>,
}

/// External memory cells of a pool may point into; one kind per pool.
enum Backing {
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
    fn new(queue: QueueId, cfg: &PoolConfig, key_link: Option<LinkType>) -> std::io::Result<Pool> {
        let r = cfg.chunks().get();
        let m = cfg.cells().get();
        let chunk_bytes = cfg.chunk_bytes().get();
        // Lazily backed: chunks never attached cost no resident memory.
        let arena = sys::Region::array(r, chunk_bytes)?;
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

    fn chunks(&self) -> usize {
        self.states.len()
    }

    fn state(&self, idx: u32) -> (ChunkState, u32) {
        let (state, gen, _) = self.state_held(idx);
        (state, gen)
    }

    /// State, generation and holder (0 when no worker holds the chunk).
    fn state_held(&self, idx: u32) -> (ChunkState, u32, u16) {
        // Acquire: pairs with the Release transitions, for callers that then read cells.
        let w = self.states[idx as usize].load(Ordering::Acquire);
        (ChunkState::from_bits(w), (w >> 24) as u32, (w >> 8) as u16)
    }

    /// Move `idx` from `from` to `to` within one generation (or to the next one when
    /// recycling). Returns the state actually found on failure.
    fn transition(&self, idx: u32, gen: u32, from: ChunkState, to: ChunkState, next_gen: u32) -> Result<(), u64> {
        self.swap_word(idx, pack(from, gen), pack(to, next_gen))
    }

    fn swap_word(&self, idx: u32, from: u64, to: u64) -> Result<(), u64> {
        // AcqRel: acquire the previous owner's accesses, release ours to the next.
        self.states[idx as usize].compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire).map(|_| ())
    }

    /// The packet in cell `i` of chunk `idx`.
    ///
    /// # Safety
    /// The chunk must be Delivering and held by the caller, and `i < count`.
    unsafe fn packet(&self, idx: u32, i: usize) -> Packet<'_> {
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
    unsafe fn for_each_sort_key(&self, idx: u32, count: usize, link: LinkType, mut f: impl FnMut(u32, Option<u16>)) {
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

/// Cells a locality key trails its packet by on the capture thread: a push
/// asks for the packet's headers ([`prefetch_headers`]) and computes the key of
/// the packet this many cells before, whose headers have come meanwhile. The
/// capture thread has just read a pcap record or a ring slot's header, but
/// the packet's own headers are usually on the next cache line, and waiting
/// for it cost the capture thread as much again as the rest of its push.
const KEY_LAG: usize = 8;

/// Start fetching the first cache lines of a packet: its link, network and
/// transport headers for the locality key.
#[inline]
fn prefetch_headers(cell: &Cell) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let at = cell.data as *const i8;
        // SAFETY: a prefetch is a hint that never faults, whatever the address;
        // `wrapping_add` computes the address of a packet's byte 63 (its second
        // cache line at most) without claiming it is in bounds.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(at);
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(63));
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = cell;
}

/// A locality key as stored: the port, or [`KEYLESS`].
const KEYLESS: u32 = 1 << 16;

#[inline]
fn key_code(key: Option<u16>) -> u32 {
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

impl PoolConfig {
    /// The most memory one queue's pool and work-queue pair can take: the
    /// arena (mapped lazily, but a burst can fill it), the cells, the chunks'
    /// states and block lists, and the two rings of chunk numbers.
    pub fn memory_bytes(&self) -> u64 {
        let per_chunk = self.chunk_bytes().get() as u64
            + (self.cells().get() * size_of::<Cell>()) as u64
            + (size_of::<AtomicU64>() * 2 + size_of::<AtomicU32>() + size_of::<ChunkBlocks>()) as u64
            // Two rings of u32, each rounded up to a power of two, and the free stack.
            + 4 * 2 * 2
            + 4;
        per_chunk.saturating_mul(self.chunks().get() as u64)
    }
}

/// Chunks published before the worker is woken (see `Producer::set_wake_batch`).
const WAKE_BATCH: usize = 4;

/// The capture thread has no cell for the packet: every chunk is in use.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct NoCell;

/// Create the pool of `queue` and its work-queue pair.
///
/// With `sort_keys`, the capture side computes each packet's locality key as it
/// fills the cell, while the packet's first bytes are still in its cache: read
/// later by the worker, they are a cache miss per packet, which cost the
/// locality stage more than the rest of its work (see [`crate::locality`]).
pub fn work_queue_pair(
    queue: QueueId,
    cfg: &PoolConfig,
    counters: Arc<QueueCounters>,
    sort_keys: Option<LinkType>,
) -> std::io::Result<(CaptureSide, WorkerSide)> {
    let pool = Arc::new(Pool::new(queue, cfg, sort_keys)?);
    let r = pool.chunks();
    let (mut cap_tx, cap_rx) = ring::channel::<u32>(Capacity::at_least(r));
    // One wake-up per few chunks: a fast capture thread does not pay a system call
    // per chunk, and `flush` (before every wait, on every stop) wakes the rest.
    cap_tx.set_wake_batch(WAKE_BATCH.min(r / 2));
    let (rec_tx, rec_rx) = ring::channel::<u32>(Capacity::at_least(r));
    // Chunk 0 on top: the stack pops from the end.
    let free = (0..r as u32).rev().collect();
    let load = Arc::new(WorkerLoad::new(r));
    let capture = CaptureSide {
        pool: Arc::clone(&pool),
        counters: Arc::clone(&counters),
        load: Arc::clone(&load),
        offload: None,
        published: 0,
        served: 0,
        free,
        captured: cap_tx,
        recycled: rec_rx,
        cur: None,
        cur_count: 0,
        cur_used: 0,
        cur_bytes: 0,
        chunk_blocks: vec![ChunkBlocks::default(); r],
        returned_frames: Vec::new(),
        tally: Tally::default(),
        also_ring: None,
    };
    let worker = WorkerSide {
        own: Link { pool, counters, recycle: RefCell::new(rec_tx), owner_bell: None },
        captured: RefCell::new(cap_rx),
        load,
        inbox: Vec::new(),
        turn: StdCell::new(0),
    };
    Ok((capture, worker))
}

/// The capture thread's handle on one queue: fills cells, publishes chunks,
/// takes recycled chunks back. `Send`, not `Sync`.
pub struct CaptureSide {
    pool: Arc<Pool>,
    counters: Arc<QueueCounters>,
    /// Chunks waiting for this queue's own worker.
    load: Arc<WorkerLoad>,
    /// Set when the queue is in a buddy group.
    offload: Option<Offload>,
    /// Packets published (to any worker) and packets of chunks taken back.
    published: u64,
    served: u64,
    /// Free chunk indices, most recently recycled on top.
    free: Vec<u32>,
    captured: Producer<u32>,
    recycled: Consumer<u32>,
    /// The attached chunk and how much of it is used.
    cur: Option<u32>,
    cur_count: usize,
    cur_used: usize,
    cur_bytes: u64,
    /// The blocks each chunk's cells point into; only the capture thread reads it.
    chunk_blocks: Vec<ChunkBlocks>,
    /// Frames of chunks taken back, not yet handed to the unit.
    returned_frames: Vec<u64>,
    tally: Tally,
    /// Rung after every publish, starved mark and close, besides the own
    /// worker's bell: a reader that sleeps on one queue for several
    /// ([`wait_any`]).
    also_ring: Option<WakeHandle>,
}

/// Most blocks one chunk may hold: a chunk of a rare queue would otherwise pin a
/// long stretch of blocks for a handful of packets.
pub const BLOCKS_PER_CHUNK: usize = 4;

#[derive(Copy, Clone, Debug, Default)]
struct ChunkBlocks {
    len: u8,
    ids: [BlockId; BLOCKS_PER_CHUNK],
}

impl ChunkBlocks {
    fn contains(&self, id: BlockId) -> bool {
        self.ids[..usize::from(self.len)].contains(&id)
    }

    fn is_full(&self) -> bool {
        usize::from(self.len) == BLOCKS_PER_CHUNK
    }
}

impl CaptureSide {
    pub fn queue(&self) -> QueueId {
        self.pool.queue
    }

    /// Copy a packet into the next cell, attaching a fresh chunk when needed.
    /// Counts it as received and captured; on `NoCell` nothing is counted and the
    /// caller decides between waiting and [`drop_capture`](Self::drop_capture).
    #[inline]
    pub fn push_copy(&mut self, data: &[u8], wire_len: u32, ts_ns: u64) -> Result<(), NoCell> {
        self.push_copy_carried(data, wire_len, ts_ns, 0)
    }

    /// As [`push_copy`](Self::push_copy), for a record whose timestamp fraction
    /// carried `ts_carry` seconds ([`Packet::ts_carry`]).
    pub fn push_copy_carried(&mut self, data: &[u8], wire_len: u32, ts_ns: u64, ts_carry: u32) -> Result<(), NoCell> {
        let data = &data[..data.len().min(MAX_CAPLEN)];
        let len = data.len();
        let idx = match self.cur {
            Some(idx) if self.cur_count < self.pool.cells_per_chunk && self.cur_used + len <= self.pool.chunk_bytes => idx,
            _ => self.next_chunk()?,
        };
        debug_assert!(self.cur_used + len <= self.pool.chunk_bytes);
        let base = idx as usize * self.pool.chunk_bytes + self.cur_used;
        // SAFETY: chunk `idx` is Attached to us, so nobody else reads or writes its
        // arena region [idx*chunk_bytes, (idx+1)*chunk_bytes), which contains
        // [base, base+len) by the check above; source and destination are distinct
        // allocations (the source is the caller's buffer).
        let dst = unsafe {
            let dst = self.pool.arena.as_ptr().add(base);
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst, len);
            dst
        };
        // Keep the next packet 8-byte aligned.
        self.cur_used += (len + 7) & !7;
        self.fill_cell(idx, Cell { data: dst, caplen: len as u32, wire_len, ts_ns, key: KEYLESS, ts_carry });
        Ok(())
    }

    /// Capture a packet without copying: the cell points at `range` of `block`, and
    /// the chunk holds the block until it is recycled. Counts like
    /// [`push_copy`](Self::push_copy). All blocks of one pool must come from one arena.
    #[inline]
    pub fn push_ref(&mut self, block: &BlockRef, range: Range<usize>, wire_len: u32, ts_ns: u64) -> Result<(), NoCell> {
        self.push_ref_carried(block, range, wire_len, ts_ns, 0)
    }

    /// As [`push_ref`](Self::push_ref), for a record whose timestamp fraction
    /// carried `ts_carry` seconds ([`Packet::ts_carry`]).
    pub fn push_ref_carried(
        &mut self,
        block: &BlockRef,
        range: Range<usize>,
        wire_len: u32,
        ts_ns: u64,
        ts_carry: u32,
    ) -> Result<(), NoCell> {
        block.check(&range);
        let len = range.len().min(MAX_CAPLEN);
        let id = block.id();
        let idx = match self.cur {
            Some(idx)
                if self.cur_count < self.pool.cells_per_chunk
                    && (self.chunk_blocks[idx as usize].contains(id) || !self.chunk_blocks[idx as usize].is_full()) =>
            {
                idx
            }
            _ => self.next_chunk()?,
        };
        let backing = match self.pool.backing.get_or_init(|| Backing::Blocks(Arc::clone(block.arena()))) {
            Backing::Blocks(b) if Arc::ptr_eq(b, block.arena()) => b,
            _ => panic!("a pool takes blocks from one arena only"),
        };
        let held = &mut self.chunk_blocks[idx as usize];
        if !held.contains(id) {
            held.ids[usize::from(held.len)] = id;
            held.len += 1;
            backing.hold(id);
        }
        // The pointer is inside the block (checked above), which the chunk now holds.
        let data = backing.ptr(id, range.start);
        self.fill_cell(idx, Cell { data, caplen: len as u32, wire_len, ts_ns, key: KEYLESS, ts_carry });
        Ok(())
    }

    /// Capture a packet the kernel wrote into a frame of `arena` at `addr`: the cell
    /// holds the frame until its chunk is recycled, then [`take_frames`](Self::take_frames)
    /// gives the frame back. All frames of one pool come from one arena.
    #[inline]
    pub fn push_frame(&mut self, arena: &Arc<FrameArena>, addr: u64, len: usize, wire_len: u32, ts_ns: u64) -> Result<(), NoCell> {
        let data = arena.ptr(addr, len);
        match self.pool.backing.get_or_init(|| Backing::Frames(Arc::clone(arena))) {
            Backing::Frames(f) if Arc::ptr_eq(f, arena) => {}
            _ => panic!("a pool takes frames from one arena only"),
        }
        let idx = match self.cur {
            Some(idx) if self.cur_count < self.pool.cells_per_chunk => idx,
            _ => self.next_chunk()?,
        };
        self.fill_cell(idx, Cell { data, caplen: len as u32, wire_len, ts_ns, key: KEYLESS, ts_carry: 0 });
        Ok(())
    }

    /// Move the addresses of frames whose chunks came back into `out`, for the fill ring.
    pub fn take_frames(&mut self, out: &mut Vec<u64>) {
        self.reclaim();
        out.append(&mut self.returned_frames);
    }

    /// Write the next cell of the attached chunk `idx` and count the packet.
    #[inline]
    fn fill_cell(&mut self, idx: u32, cell: Cell) {
        debug_assert_eq!(self.cur, Some(idx));
        debug_assert!(self.cur_count < self.pool.cells_per_chunk);
        let slot = self.pool.cells[idx as usize * self.pool.cells_per_chunk + self.cur_count].get();
        // SAFETY: the chunk is Attached to us, so this cell is ours to write.
        unsafe { *slot = cell };
        if let Some(link) = self.pool.key_link {
            prefetch_headers(&cell);
            if let Some(lagging) = self.cur_count.checked_sub(KEY_LAG) {
                self.set_key(idx, lagging, link);
            }
        }
        self.cur_count += 1;
        self.cur_bytes += u64::from(cell.wire_len);
        self.tally.received += 1;
        self.tally.received_bytes += u64::from(cell.wire_len);
        self.tally.captured += 1;
    }

    /// The packet was received but rejected by the filter.
    #[inline]
    pub fn drop_filtered(&mut self, wire_len: u32) {
        self.tally.received += 1;
        self.tally.received_bytes += u64::from(wire_len);
        self.tally.filtered += 1;
    }

    /// The packet was received but no cell was ready for it.
    #[inline]
    pub fn drop_capture(&mut self, wire_len: u32) {
        self.tally.received += 1;
        self.tally.received_bytes += u64::from(wire_len);
        self.tally.capture_drops += 1;
    }

    /// Packets lost before capture in bulk, as the kernel counts them (an empty
    /// AF_XDP fill ring: the pool had no frame for them).
    pub fn add_capture_drops(&mut self, packets: u64) {
        self.tally.received += packets;
        self.tally.capture_drops += packets;
    }

    /// Packets the kernel received for this queue but lost before we saw them.
    pub fn add_delivery_drops(&mut self, packets: u64) {
        self.tally.received += packets;
        self.tally.delivery_drops += packets;
    }

    /// Publish the attached chunk if it holds packets, and the counters in any case.
    pub fn flush(&mut self) {
        if self.cur_count > 0 {
            self.publish_current();
        } else {
            self.counters.publish(&self.tally);
        }
        // Whatever waits on the capture queue may have been left unwoken by batching.
        self.captured.notify_if_waiting();
    }

    /// Make the counters visible without publishing a chunk.
    pub fn publish_stats(&mut self) {
        self.counters.publish(&self.tally);
    }

    /// True if a packet could be pushed now without waiting.
    pub fn has_cell(&mut self) -> bool {
        (self.cur.is_some() && self.cur_count < self.pool.cells_per_chunk) || {
            self.reclaim();
            !self.free.is_empty()
        }
    }

    /// Sleep until a chunk comes back from the worker, at most `timeout`.
    /// Publishes the partly filled chunk first, since the worker may be waiting for it.
    pub fn wait_for_cell(&mut self, timeout: Duration) -> bool {
        if self.has_cell() {
            return true;
        }
        self.flush();
        self.wait_recycled(timeout);
        self.has_cell()
    }

    /// Sleep until a worker recycles a chunk, at most `timeout`, and take back
    /// what came. True if anything came back.
    /// Waiting marks the side starved (see [`mark_starved`](Self::mark_starved)).
    pub fn wait_recycled(&mut self, timeout: Duration) -> bool {
        let free = self.free.len();
        self.reclaim();
        if self.free.len() == free {
            self.mark_starved();
            let offload = &self.offload;
            self.recycled.wait_or(timeout, || offload.as_ref().is_some_and(Offload::any_returned));
            self.reclaim();
        }
        self.free.len() > free
    }

    /// Tell the workers this side feeds that it waits for memory they hold, and
    /// wake them. A stage that holds chunks on purpose (the locality buffer)
    /// delivers what it holds at once instead of waiting for more that cannot
    /// come. Sources call it whenever they wait for memory: a mark that a
    /// worker clears as it starts a batch is made again on the next wait.
    pub fn mark_starved(&mut self) {
        self.load.mark_starved();
        self.captured.notify();
        if let Some(b) = &self.also_ring {
            b.ring();
        }
        if let Some(o) = &self.offload {
            for b in &o.buddies {
                b.load.mark_starved();
                b.bell.ring();
            }
        }
    }

    /// A handle that wakes this side from [`wait_for_cell`](Self::wait_for_cell).
    pub fn wake_handle(&self) -> WakeHandle {
        self.recycled.wake_handle()
    }

    /// Chunks currently free, after taking back what the worker recycled.
    pub fn free_chunks(&mut self) -> usize {
        self.reclaim();
        self.free.len()
    }

    /// Fill level of the capture queue, in chunks.
    pub fn backlog(&self) -> usize {
        self.captured.len()
    }

    /// Take back what the worker recycled, releasing the blocks those chunks held.
    pub fn reclaim(&mut self) {
        while let Some(idx) = self.recycled.pop() {
            self.take_back(idx);
        }
        let mut i = 0;
        while let Some(idx) = self.offload.as_mut().and_then(|o| o.buddies.get_mut(i)).map(|b| b.back.pop()) {
            match idx {
                Some(idx) => self.take_back(idx),
                None => i += 1,
            }
        }
    }

    /// Packets in the attached chunk, not yet published.
    pub fn attached_packets(&self) -> usize {
        self.cur_count
    }

    /// Cells per chunk (M).
    pub fn cells_per_chunk(&self) -> usize {
        self.pool.cells_per_chunk
    }

    /// Packets in chunks published and not yet taken back: the backlog of this
    /// queue's traffic, wherever it waits (its own worker or a buddy).
    pub fn backlog_packets(&self) -> u64 {
        self.published - self.served
    }

    /// Packets this queue dropped so far (capture and delivery drops).
    pub fn dropped_packets(&self) -> u64 {
        self.tally.capture_drops + self.tally.delivery_drops
    }

    /// Packets of chunks taken back so far: what the workers finished.
    pub fn served_packets(&self) -> u64 {
        self.served
    }

    /// Chunks waiting for this queue's own worker, from any capture side.
    pub fn waiting_chunks(&self) -> usize {
        self.load.waiting()
    }

    /// Publish the attached chunk and remember every chunk of this pool that a
    /// worker has not finished: [`passed`](Self::passed) says when all of them
    /// have been recycled, that is when every packet captured so far is done.
    pub fn fence(&mut self) -> Fence {
        if self.cur_count > 0 {
            self.publish_current();
        }
        let chunks = (0..self.pool.chunks() as u32)
            .filter_map(|idx| match self.pool.state(idx) {
                (ChunkState::Captured | ChunkState::Delivering, gen) => Some((idx, gen)),
                _ => None,
            })
            .collect();
        Fence { pool: self.pool.uid, chunks }
    }

    /// True once every chunk `fence` recorded has been recycled since.
    pub fn passed(&self, fence: &Fence) -> bool {
        debug_assert_eq!(fence.pool, self.pool.uid, "fence of another pool");
        // A recycle advances the generation, and only a recycle does.
        fence.chunks.iter().all(|&(idx, gen)| self.pool.state(idx).1 != gen)
    }

    fn take_back(&mut self, idx: u32) {
        debug_assert_eq!(self.pool.state(idx).0, ChunkState::Free, "recycle queue carried a chunk that is not free");
        // Relaxed: written before the chunk was published; the ring pop ordered it.
        self.served += u64::from(self.pool.counts[idx as usize].load(Ordering::Relaxed));
        match self.pool.backing.get() {
            Some(Backing::Blocks(arena)) => {
                let held = std::mem::take(&mut self.chunk_blocks[idx as usize]);
                for &id in &held.ids[..usize::from(held.len)] {
                    arena.release(id);
                }
            }
            Some(Backing::Frames(arena)) => {
                let count = self.pool.counts[idx as usize].load(Ordering::Relaxed) as usize;
                for i in 0..count {
                    let cell = self.pool.cells[idx as usize * self.pool.cells_per_chunk + i].get();
                    // SAFETY: the chunk is Free and on its way to our free list; only
                    // the capture thread (us) touches it now.
                    let data = unsafe { (*cell).data };
                    if let Some(addr) = arena.addr_of(data) {
                        self.returned_frames.push(addr);
                    }
                }
            }
            None => {}
        }
        self.free.push(idx);
    }

    #[cold]
    fn next_chunk(&mut self) -> Result<u32, NoCell> {
        if let Some(idx) = self.cur {
            if self.cur_count == 0 {
                return Ok(idx);
            }
            self.publish_current();
        }
        // Take back recycled chunks first so the most recently used one, still warm in
        // cache, is the one attached next.
        self.reclaim();
        let idx = self.free.pop().ok_or(NoCell)?;
        let (state, gen) = self.pool.state(idx);
        debug_assert_eq!(state, ChunkState::Free);
        let moved = self.pool.transition(idx, gen, ChunkState::Free, ChunkState::Attached, gen);
        debug_assert!(moved.is_ok(), "free chunk {idx} changed state under the capture thread");
        self.cur = Some(idx);
        self.cur_count = 0;
        self.cur_used = 0;
        self.cur_bytes = 0;
        Ok(idx)
    }

    /// Compute the locality keys of `cells` of the attached chunk `idx`.
    fn set_keys(&mut self, idx: u32, cells: Range<usize>, link: LinkType) {
        for cell in cells {
            self.set_key(idx, cell, link);
        }
    }

    /// Compute the locality key of cell `cell` of the attached chunk `idx`.
    /// Always inlined: it runs once per packet on the capture thread, and as a
    /// call its register saves cost as much as the key itself.
    #[inline(always)]
    fn set_key(&mut self, idx: u32, cell: usize, link: LinkType) {
        debug_assert!(cell <= self.cur_count && cell < self.pool.cells_per_chunk);
        let c = &self.pool.cells[idx as usize * self.pool.cells_per_chunk + cell];
        // SAFETY: the chunk is Attached to us, so its cells are ours to read and
        // write; the cell's bytes are `caplen` bytes the chunk holds (its arena
        // region, a block or a frame it holds), written before the push and not
        // again while the chunk is attached or delivered.
        unsafe {
            let cell = &mut *c.get();
            let frame = std::slice::from_raw_parts(cell.data, cell.caplen as usize);
            cell.key = key_code(crate::wire::sort_key(link, frame));
        }
    }

    fn publish_current(&mut self) {
        let Some(idx) = self.cur.take() else { return };
        debug_assert!(self.cur_count > 0);
        if let Some(link) = self.pool.key_link {
            self.set_keys(idx, self.cur_count.saturating_sub(KEY_LAG)..self.cur_count, link);
        }
        // Relaxed: the Release state transition and ring push below publish these.
        self.pool.counts[idx as usize].store(self.cur_count as u32, Ordering::Relaxed);
        self.pool.bytes[idx as usize].store(self.cur_bytes, Ordering::Relaxed);
        let (_, gen) = self.pool.state(idx);
        let moved = self.pool.transition(idx, gen, ChunkState::Attached, ChunkState::Captured, gen);
        debug_assert!(moved.is_ok(), "attached chunk {idx} changed state under the capture thread");
        self.published += self.cur_count as u64;
        let buddy = self.offload.as_ref().and_then(|o| o.target(&self.load));
        if buddy.is_some() {
            self.tally.offloaded += self.cur_count as u64;
        }
        // Counters first: the worker must never release packets a reader cannot see captured.
        self.counters.publish(&self.tally);
        let pushed = match (buddy, self.offload.as_mut()) {
            (Some(i), Some(o)) => {
                let b = &mut o.buddies[i];
                b.load.add();
                let pushed = b.give.push(idx);
                b.bell.ring();
                pushed
            }
            _ => {
                self.load.add();
                self.captured.push(idx)
            }
        };
        // Each ring to a worker has room for every chunk of this pool.
        debug_assert!(pushed.is_ok(), "a capture or give queue holds every chunk, so it cannot be full");
        if let Some(b) = &self.also_ring {
            b.ring();
        }
        self.cur_count = 0;
        self.cur_used = 0;
        self.cur_bytes = 0;
    }
}

impl Drop for CaptureSide {
    fn drop(&mut self) {
        self.flush();
        // Closing the capture queue lets the worker drain it and stop.
        self.captured.close();
        if let Some(b) = &self.also_ring {
            b.ring();
        }
    }
}

/// Make every capture side in `captures` also ring `bell` (after each publish,
/// starved mark and its close), so that one thread reading every queue can
/// sleep on that bell alone ([`wait_any`]).
pub fn share_bell(captures: &mut [CaptureSide], bell: &WakeHandle) {
    for c in captures {
        c.also_ring = Some(bell.clone());
    }
}

/// Sleep until a chunk waits on any of `workers`, every one is closed, or
/// `timeout` passes; with `watch_starved`, also until a capture side feeding
/// one is starved. The capture sides must ring the first worker's bell
/// ([`share_bell`] with its [`WorkerSide::wake_handle`]) when there are several.
pub fn wait_any(workers: &[WorkerSide], timeout: Duration, watch_starved: bool) {
    let Some(first) = workers.first() else { return };
    let ready = || any_ready(workers, watch_starved);
    if ready() {
        return;
    }
    first.captured.borrow().wait_or(timeout, ready);
}

/// What [`wait_any`] waits for: a chunk waits on one of `workers`, every one
/// is closed, or (with `watch_starved`) a capture side feeding one is starved.
pub fn any_ready(workers: &[WorkerSide], watch_starved: bool) -> bool {
    workers.iter().any(|w| w.backlog() > 0 || (watch_starved && w.load.is_starved())) || workers.iter().all(WorkerSide::is_closed)
}

/// What [`WorkerSide::next`] found.
pub enum Next<'w> {
    Chunk(HeldChunk<'w>),
    /// Nothing arrived within the timeout.
    Idle,
    /// The capture side is gone and every chunk it published was taken.
    Closed,
}

/// A pool as a worker reaches it: its memory, counters, and the ring that
/// recycles its chunks to its capture side.
pub(crate) struct Link {
    pool: Arc<Pool>,
    counters: Arc<QueueCounters>,
    recycle: RefCell<Producer<u32>>,
    /// For a buddy's pool: wakes its capture side, which sleeps on its own
    /// recycle queue, after a recycle onto this link.
    owner_bell: Option<WakeHandle>,
}

impl Link {
    fn hold(&self, idx: u32, me: u16) -> (u32, usize) {
        let (state, gen) = self.pool.state(idx);
        debug_assert_eq!(state, ChunkState::Captured);
        let moved = self.pool.swap_word(idx, pack(ChunkState::Captured, gen), pack_held(ChunkState::Delivering, gen, me));
        debug_assert!(moved.is_ok(), "captured chunk {idx} changed state on the capture queue");
        // Relaxed: the Acquire pop and state load above ordered the capture side's store.
        let count = self.pool.counts[idx as usize].load(Ordering::Relaxed) as usize;
        debug_assert!(count > 0 && count <= self.pool.cells_per_chunk);
        (gen, count)
    }

    fn check_held(&self, token: ChunkToken, me: u16) -> Result<usize, RecycleError> {
        if token.index as usize >= self.pool.chunks() {
            return Err(RecycleError::OutOfRange(token.index));
        }
        let (state, gen, holder) = self.pool.state_held(token.index);
        if state != ChunkState::Delivering {
            return Err(RecycleError::NotHeld(state));
        }
        if holder != me {
            return Err(RecycleError::OtherWorker);
        }
        if gen != token.generation {
            return Err(RecycleError::Stale { token: token.generation, current: gen });
        }
        Ok(self.pool.counts[token.index as usize].load(Ordering::Relaxed) as usize)
    }

    /// Free a held chunk; `unread` of its `count` packets (of `unread_bytes`
    /// wire bytes) were never handed to the application.
    fn release(&self, idx: u32, gen: u32, count: usize, me: u16, unread: (usize, u64)) {
        debug_assert!(unread.0 <= count);
        let unread = (unread.0.min(count), unread.1);
        // Relaxed: written before the chunk was published, which we acquired.
        let bytes = self.pool.bytes[idx as usize].load(Ordering::Relaxed);
        if self.pool.swap_word(idx, pack_held(ChunkState::Delivering, gen, me), pack(ChunkState::Free, gen.wrapping_add(1))).is_err() {
            // Cannot happen through the borrow-checked API; refuse rather than corrupt.
            self.counters.add_bad_recycle();
            return;
        }
        self.counters.add_delivered((count - unread.0) as u64, bytes.saturating_sub(unread.1));
        if unread.0 > 0 {
            self.counters.add_unread(unread.0 as u64);
        }
        let pushed = self.recycle.borrow_mut().push(idx);
        debug_assert!(pushed.is_ok(), "recycle queue holds every chunk, so it cannot be full");
        if let Some(bell) = &self.owner_bell {
            bell.ring();
        }
    }
}

/// What a [`CaptureSide::fence`] recorded: chunks and the generation each was at.
#[derive(Clone, Debug)]
pub struct Fence {
    pool: u32,
    chunks: Vec<(u32, u32)>,
}

impl Fence {
    /// Chunks the fence waits for.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

/// The worker's handle on one queue: takes captured chunks (its own queue's, and
/// in a buddy group those its buddies offload to it) and recycles each to the pool
/// it came from. `Send`, not `Sync`; chunks it hands out borrow it and recycle on drop.
pub struct WorkerSide {
    own: Link,
    captured: RefCell<Consumer<u32>>,
    /// Chunks waiting for this worker, shared with every capture side feeding it.
    load: Arc<WorkerLoad>,
    /// Chunks offloaded by buddies, one link per buddy.
    inbox: Vec<BuddyIn>,
    /// Where the next look for a chunk starts (0 = own queue, i+1 = inbox i), so
    /// that no source of chunks waits behind a busy other.
    turn: StdCell<usize>,
}

impl WorkerSide {
    pub fn queue(&self) -> QueueId {
        self.own.pool.queue
    }

    /// This worker's mark in the state words of the chunks it holds.
    fn me(&self) -> u16 {
        self.own.pool.queue.0.wrapping_add(1)
    }

    /// Take the next captured chunk, sleeping up to `timeout` for one.
    pub fn next(&self, timeout: Duration) -> Next<'_> {
        self.wait_next(timeout, false)
    }

    /// As [`next`](Self::next), but returns `Idle` at once when a capture side
    /// feeding this worker is starved ([`CaptureSide::mark_starved`]).
    pub fn next_unless_starved(&self, timeout: Duration) -> Next<'_> {
        self.wait_next(timeout, true)
    }

    fn wait_next(&self, timeout: Duration, watch_starved: bool) -> Next<'_> {
        if let Some(c) = self.try_next() {
            return Next::Chunk(c);
        }
        {
            let own = self.captured.borrow();
            own.wait_or(timeout, || {
                (watch_starved && self.load.is_starved()) || self.inbox.iter().any(|b| !b.take.borrow().is_empty()) || self.all_closed(&own)
            });
        }
        match self.try_next() {
            Some(c) => Next::Chunk(c),
            None if self.all_closed(&self.captured.borrow()) => Next::Closed,
            None => Next::Idle,
        }
    }

    /// True when every capture side feeding this worker is gone and every chunk
    /// it published was taken.
    pub fn is_closed(&self) -> bool {
        self.all_closed(&self.captured.borrow())
    }

    /// True when every capture side feeding this worker is gone and nothing waits.
    fn all_closed(&self, own: &Consumer<u32>) -> bool {
        own.is_closed()
            && own.is_empty()
            && self.inbox.iter().all(|b| {
                let t = b.take.borrow();
                t.is_closed() && t.is_empty()
            })
    }

    /// Whether a capture side feeding this worker waited for memory since the
    /// last call; clears the mark.
    pub fn take_starved(&self) -> bool {
        self.load.take_starved()
    }

    /// Take the next captured chunk if one is waiting.
    pub fn try_next(&self) -> Option<HeldChunk<'_>> {
        let (link, idx) = self.pop()?;
        let me = self.me();
        let (generation, count) = link.hold(idx, me);
        Some(HeldChunk { link, me, index: idx, generation, count, released: false })
    }

    /// Pop a chunk index from the own queue or an inbox, taking turns.
    fn pop(&self) -> Option<(&Link, u32)> {
        let sources = 1 + self.inbox.len();
        let start = self.turn.get();
        for k in 0..sources {
            let at = (start + k) % sources;
            let popped = match at {
                0 => self.captured.borrow_mut().pop().map(|i| (&self.own, i)),
                _ => {
                    let b = &self.inbox[at - 1];
                    b.take.borrow_mut().pop().map(|i| (&b.link, i))
                }
            };
            if let Some(found) = popped {
                self.load.take();
                self.turn.set((at + 1) % sources);
                return Some(found);
            }
        }
        None
    }

    /// Chunks waiting for this worker (own queue and offloaded).
    pub fn backlog(&self) -> usize {
        self.captured.borrow().len() + self.inbox.iter().map(|b| b.take.borrow().len()).sum::<usize>()
    }

    /// A handle that wakes this worker from [`next`](Self::next).
    pub fn wake_handle(&self) -> WakeHandle {
        self.captured.borrow().wake_handle()
    }

    /// Take the next chunk as a bare token, for callers that cannot hold a borrow.
    /// It must come back through [`recycle_raw`](Self::recycle_raw).
    pub fn take_raw(&self) -> Option<ChunkToken> {
        self.try_next().map(HeldChunk::into_token)
    }

    /// The link of the pool a token names: the own pool or a buddy's.
    fn link_of(&self, token: ChunkToken) -> Result<&Link, RecycleError> {
        if token.pool == self.own.pool.uid {
            return Ok(&self.own);
        }
        self.inbox.iter().map(|b| &b.link).find(|l| l.pool.uid == token.pool).ok_or(RecycleError::Foreign)
    }

    /// The packets of a chunk taken with [`take_raw`](Self::take_raw), if the token
    /// still names a chunk this worker holds.
    pub fn raw_chunk(&self, token: ChunkToken) -> Result<RawChunk<'_>, RecycleError> {
        let link = self.link_of(token)?;
        let count = link.check_held(token, self.me())?;
        Ok(RawChunk { pool: &link.pool, index: token.index, count })
    }

    /// Give back a chunk by token. Refused (and counted) unless the token names a chunk
    /// of a pool this worker reads that is being delivered, at its current generation.
    /// `&mut self` guarantees no packet of any chunk is borrowed meanwhile.
    pub fn recycle_raw(&mut self, token: ChunkToken) -> Result<(), RecycleError> {
        self.recycle_raw_unread(token, 0, 0)
    }

    /// As [`recycle_raw`](Self::recycle_raw), when `unread` of the chunk's packets
    /// (`unread_bytes` wire bytes) were never handed to the application: they are
    /// counted as unread, not delivered.
    pub fn recycle_raw_unread(&mut self, token: ChunkToken, unread: usize, unread_bytes: u64) -> Result<(), RecycleError> {
        let unread = (unread, unread_bytes);
        let me = self.me();
        let checked = self.link_of(token).and_then(|l| l.check_held(token, me).map(|c| (l, c)));
        match checked {
            Ok((link, count)) => {
                link.release(token.index, token.generation, count, me, unread);
                Ok(())
            }
            Err(e) => {
                self.own.counters.add_bad_recycle();
                Err(e)
            }
        }
    }
}

/// A chunk the worker holds. Its packets borrow it; dropping it recycles it.
pub struct HeldChunk<'w> {
    link: &'w Link,
    me: u16,
    index: u32,
    generation: u32,
    count: usize,
    released: bool,
}

impl<'w> HeldChunk<'w> {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The queue that captured the chunk (a buddy's, if it was offloaded).
    pub fn queue(&self) -> QueueId {
        self.link.pool.queue
    }

    /// Packet `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<Packet<'_>> {
        // SAFETY: we hold the chunk (Delivering) for as long as `self` lives, and the
        // returned packet borrows `self`; `i < count` is checked.
        (i < self.count).then(|| unsafe { self.link.pool.packet(self.index, i) })
    }

    /// Ask the processor to bring the first bytes of packet `i` (its headers and
    /// the start of its payload) into cache; nothing past the end. The locality
    /// stage knows the order it delivers in ahead of time, where the hardware
    /// prefetchers, which follow addresses, cannot guess it.
    #[inline]
    pub fn prefetch(&self, i: usize) {
        /// Cache lines fetched: a 64-byte line holds Ethernet, IP and TCP
        /// headers; the following ones the payload the application reads next,
        /// after which the processor's own stream prefetcher follows the reads.
        const LINES: usize = 4;
        let Some(p) = self.get(i) else { return };
        #[cfg(target_arch = "x86_64")]
        for line in p.data().chunks(64).take(LINES) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch is a hint with no effect the program can observe
            // and never faults; `sse`, which it needs, is part of every x86_64.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }

    pub fn packets(&self) -> impl Iterator<Item = Packet<'_>> + '_ {
        // SAFETY: as in `get`, with i < count by construction.
        (0..self.count).map(move |i| unsafe { self.link.pool.packet(self.index, i) })
    }

    /// Call `f` with each packet's cell number and locality key
    /// ([`crate::wire::sort_key`]) on `link`, in cell order. The capture
    /// thread computed the keys when the pool was made with `sort_keys`; else
    /// they are computed here.
    #[inline]
    pub fn for_each_sort_key(&self, link: LinkType, f: impl FnMut(u32, Option<u16>)) {
        // SAFETY: we hold the chunk (Delivering) for as long as `self` lives.
        unsafe { self.link.pool.for_each_sort_key(self.index, self.count, link, f) }
    }

    /// The token of this hand-out.
    pub fn token(&self) -> ChunkToken {
        ChunkToken { pool: self.link.pool.uid, index: self.index, generation: self.generation }
    }

    /// Keep the chunk held past this value: it must come back through
    /// [`WorkerSide::recycle_raw`].
    pub fn into_token(self) -> ChunkToken {
        let t = self.token();
        std::mem::forget(self);
        t
    }
}

impl Drop for HeldChunk<'_> {
    fn drop(&mut self) {
        if !self.released {
            self.released = true;
            self.link.release(self.index, self.generation, self.count, self.me, (0, 0));
        }
    }
}

/// The packets of a chunk held by token.
pub struct RawChunk<'w> {
    pool: &'w Pool,
    index: u32,
    count: usize,
}

impl<'w> RawChunk<'w> {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Packet `i`, borrowing the worker side rather than this view: it stays
    /// valid until the chunk is recycled, which needs the side mutably.
    /// As [`HeldChunk::for_each_sort_key`].
    pub fn for_each_sort_key(&self, link: LinkType, f: impl FnMut(u32, Option<u16>)) {
        // SAFETY: the token was checked to name a chunk held by the side this borrows.
        unsafe { self.pool.for_each_sort_key(self.index, self.count, link, f) }
    }

    pub fn get(&self, i: usize) -> Option<Packet<'w>> {
        // SAFETY: the token was checked to name a Delivering chunk of this pool, and
        // `recycle_raw` needs `&mut WorkerSide`, which cannot coexist with the 'w borrow.
        (i < self.count).then(|| unsafe { self.pool.packet(self.index, i) })
    }
}

#[cfg(test)]
mod tests;
