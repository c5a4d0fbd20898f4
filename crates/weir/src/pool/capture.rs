//! The capture side of a work-queue pair: the one thread that fills a queue's
//! cells. It attaches a free chunk, fills its cells (copied into the arena,
//! pointing into a block, or being a frame), publishes the chunk on the capture
//! queue (or to a buddy's worker), and takes chunks back from the recycle queue
//! onto its free list, releasing the blocks or frames they held.
//!
//! Invariants: only this side moves a chunk `Free → Attached → Captured`, and
//! only it touches the free list and the chunks' block lists, so neither needs
//! synchronization; it writes a chunk's cells only while the chunk is Attached
//! to it. Every packet it is told of is counted once in its tally (received,
//! then captured, filtered or a drop), and the tally is published before the
//! chunk holding the packets, so a worker never releases a packet that a
//! reader of the counters cannot see captured.

#![allow(unsafe_code)]

use super::blocks::{BlockId, BlockRef};
use super::buddy::{Offload, WorkerLoad};
use super::chunk::{key_code, Backing, Cell, ChunkState, Pool, KEYLESS};
use super::config::MAX_CAPLEN;
use super::frames::FrameArena;
use super::prefetch;
use crate::ring::{Consumer, Producer, WakeHandle};
use crate::stats::{QueueCounters, Tally};
use crate::{LinkType, QueueId};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Cells a locality key trails its packet by on the capture thread: a push
/// asks for the packet's headers ([`prefetch_headers`]) and computes the key of
/// the packet this many cells before, whose headers have come meanwhile. The
/// capture thread has just read a pcap record or a ring slot's header, but
/// the packet's own headers are usually on the next cache line, and waiting
/// for it cost the capture thread as much again as the rest of its push.
const KEY_LAG: usize = 8;
/// How far ahead of the cell being filled its chunk's cells are asked for,
/// exclusive (four lines of two cells).
const CELLS_AHEAD: usize = 8;

/// Start fetching the first cache lines of a packet: its link, network and
/// transport headers for the locality key.
#[inline]
fn prefetch_headers(cell: &Cell) {
    let at = cell.data;
    // Byte 63 of the packet: its second cache line at most.
    super::prefetch::hint(at);
    super::prefetch::hint(at.wrapping_add(63));
}

/// The capture thread has no cell for the packet: every chunk is in use.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct NoCell;

/// The capture thread's handle on one queue: fills cells, publishes chunks,
/// takes recycled chunks back. `Send`, not `Sync`.
///
/// The engine makes one per queue and hands them to the source's capture
/// unit; only the crate can use one.
pub(crate) struct CaptureSide {
    pub(super) pool: Arc<Pool>,
    pub(super) counters: Arc<QueueCounters>,
    /// Chunks waiting for this queue's own worker.
    pub(super) load: Arc<WorkerLoad>,
    /// Set when the queue is in a buddy group.
    pub(super) offload: Option<Offload>,
    /// Packets published (to any worker) and packets of chunks taken back.
    pub(super) published: u64,
    pub(super) served: u64,
    /// Free chunk indices, most recently recycled on top.
    pub(super) free: Vec<u32>,
    pub(super) captured: Producer<u32>,
    pub(super) recycled: Consumer<u32>,
    /// The attached chunk and how much of it is used.
    pub(super) cur: Option<u32>,
    pub(super) cur_count: usize,
    pub(super) cur_used: usize,
    pub(super) cur_bytes: u64,
    /// The blocks each chunk's cells point into; only the capture thread reads it.
    pub(super) chunk_blocks: Vec<ChunkBlocks>,
    /// Frames of chunks taken back, not yet handed to the unit.
    pub(super) returned_frames: Vec<u64>,
    pub(super) tally: Tally,
    /// Rung after every publish, starved mark and close, besides the own
    /// worker's bell: a reader that sleeps on one queue for several
    /// ([`wait_any`](super::wait_any)).
    pub(super) also_ring: Option<WakeHandle>,
    /// The queue's worker, when it runs on this capture thread
    /// ([`deliver_on_publish`](Self::deliver_on_publish)).
    pub(super) inline: Option<Box<dyn OnPublish>>,
}

/// What runs on the capture thread after each chunk is published, when the
/// queue's worker runs there: an engine that runs capture and delivery on
/// one thread takes the chunk and hands it to the application there and then.
pub(crate) trait OnPublish: Send {
    /// A chunk was just pushed onto the capture queue.
    fn published(&mut self);
}

/// Most blocks one chunk may hold: a chunk of a rare queue would otherwise pin a
/// long stretch of blocks for a handful of packets.
pub(crate) const BLOCKS_PER_CHUNK: usize = 4;

#[derive(Copy, Clone, Debug, Default)]
pub(super) struct ChunkBlocks {
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
    pub(crate) fn queue(&self) -> QueueId {
        self.pool.queue
    }

    /// Copy a packet into the next cell, attaching a fresh chunk when needed.
    /// Counts it as received and captured; on `NoCell` nothing is counted and the
    /// caller decides between waiting and [`drop_capture`](Self::drop_capture).
    #[inline]
    pub(crate) fn push_copy(&mut self, data: &[u8], wire_len: u32, ts_ns: u64) -> Result<(), NoCell> {
        self.push_copy_carried(data, wire_len, ts_ns, 0)
    }

    /// As [`push_copy`](Self::push_copy), for a record whose timestamp fraction
    /// carried `ts_carry` seconds ([`Packet::ts_carry`](crate::Packet::ts_carry)).
    pub(crate) fn push_copy_carried(&mut self, data: &[u8], wire_len: u32, ts_ns: u64, ts_carry: u32) -> Result<(), NoCell> {
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
    pub(crate) fn push_ref(&mut self, block: &BlockRef, range: Range<usize>, wire_len: u32, ts_ns: u64) -> Result<(), NoCell> {
        self.push_ref_carried(block, range, wire_len, ts_ns, 0)
    }

    /// Wake a sleeping worker only once `chunks` chunks wait for it (at most
    /// half the pool), instead of the engine's few: for a source whose packets
    /// are all there already (a trace), where the wake-ups' system calls on
    /// the capture thread cost more than a worker that starts later. `flush`
    /// (before every wait, and at the end) still wakes it for what waits.
    pub(crate) fn wake_in_batches_of(&mut self, chunks: usize) {
        self.captured.set_wake_batch(chunks.min(self.pool.chunks() / 2).max(1));
    }

    /// When it waits for memory, sleep until `chunks` chunks came back (at
    /// most a quarter of the pool), not until the first: for a source whose
    /// packets wait for it anyway (a trace read as fast as it goes). A worker
    /// slower than the capture thread otherwise hands back one chunk at a
    /// time, and each costs a futex wake-up on the worker and a sleep on this
    /// thread. The worker still wakes it for what came back before it idles
    /// ([`WorkerSide`](super::WorkerSide)'s waits), and a wait still ends at
    /// its timeout.
    pub(crate) fn refill_in_batches_of(&mut self, chunks: usize) {
        self.recycled.wake_after(chunks.min(self.pool.chunks() / 4).max(1));
    }

    /// As [`push_ref`](Self::push_ref), for a record whose timestamp fraction
    /// carried `ts_carry` seconds ([`Packet::ts_carry`](crate::Packet::ts_carry)).
    pub(crate) fn push_ref_carried(
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
    pub(crate) fn push_frame(&mut self, arena: &Arc<FrameArena>, addr: u64, len: usize, wire_len: u32, ts_ns: u64) -> Result<(), NoCell> {
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
    pub(crate) fn take_frames(&mut self, out: &mut Vec<u64>) {
        self.reclaim();
        out.append(&mut self.returned_frames);
    }

    /// Write the next cell of the attached chunk `idx` and count the packet.
    /// See [`CELLS_AHEAD`]. Always inlined: called, it read the cell its
    /// caller had just written field by field with two 16-byte loads, which
    /// waited on the stores (the hottest instruction of the function in a
    /// `perf` profile of the main job; 3-4% of its time).
    #[inline(always)]
    fn fill_cell(&mut self, idx: u32, cell: Cell) {
        debug_assert_eq!(self.cur, Some(idx));
        debug_assert!(self.cur_count < self.pool.cells_per_chunk);
        let at = idx as usize * self.pool.cells_per_chunk + self.cur_count;
        let slot = self.pool.cells[at].get();
        // SAFETY: the chunk is Attached to us, so this cell is ours to write.
        unsafe { *slot = cell };
        // A recycled chunk's cells were last read by its worker, on another
        // core: ask for them exclusive a few lines ahead of the writes.
        if self.cur_count + CELLS_AHEAD < self.pool.cells_per_chunk {
            prefetch::hint_write(self.pool.cells[at + CELLS_AHEAD].get().cast_const().cast());
        }
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
    pub(crate) fn drop_filtered(&mut self, wire_len: u32) {
        self.tally.received += 1;
        self.tally.received_bytes += u64::from(wire_len);
        self.tally.filtered += 1;
    }

    /// Packets (and their bytes on the wire) received and rejected by a filter
    /// in the kernel, in bulk as it counts them.
    pub(crate) fn add_filtered(&mut self, packets: u64, bytes: u64) {
        self.tally.received += packets;
        self.tally.received_bytes += bytes;
        self.tally.filtered += packets;
    }

    /// The packet was received but no cell was ready for it.
    #[inline]
    pub(crate) fn drop_capture(&mut self, wire_len: u32) {
        self.tally.received += 1;
        self.tally.received_bytes += u64::from(wire_len);
        self.tally.capture_drops += 1;
    }

    /// Packets lost before capture in bulk, as the kernel counts them (an empty
    /// AF_XDP fill ring: the pool had no frame for them).
    pub(crate) fn add_capture_drops(&mut self, packets: u64) {
        self.tally.received += packets;
        self.tally.capture_drops += packets;
    }

    /// Packets the kernel received for this queue but lost before we saw them.
    pub(crate) fn add_delivery_drops(&mut self, packets: u64) {
        self.tally.received += packets;
        self.tally.delivery_drops += packets;
    }

    /// Publish the attached chunk if it holds packets, and the counters in any case.
    pub(crate) fn flush(&mut self) {
        if self.cur_count > 0 {
            self.publish_current();
        } else {
            self.counters.publish(&self.tally);
        }
        // Whatever waits on the capture queue may have been left unwoken by batching.
        self.captured.notify_if_waiting();
    }

    /// Make the counters visible without publishing a chunk.
    pub(crate) fn publish_stats(&mut self) {
        self.counters.publish(&self.tally);
    }

    /// True if a packet could be pushed now without waiting.
    pub(crate) fn has_cell(&mut self) -> bool {
        (self.cur.is_some() && self.cur_count < self.pool.cells_per_chunk) || {
            self.reclaim();
            !self.free.is_empty()
        }
    }

    /// Sleep until a chunk comes back from the worker, at most `timeout`.
    /// Publishes the partly filled chunk first, since the worker may be waiting for it.
    pub(crate) fn wait_for_cell(&mut self, timeout: Duration) -> bool {
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
    pub(crate) fn wait_recycled(&mut self, timeout: Duration) -> bool {
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
    pub(crate) fn mark_starved(&mut self) {
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
    pub(crate) fn wake_handle(&self) -> WakeHandle {
        self.recycled.wake_handle()
    }

    /// Chunks currently free, after taking back what the worker recycled.
    #[cfg(test)]
    pub(crate) fn free_chunks(&mut self) -> usize {
        self.reclaim();
        self.free.len()
    }

    /// Take back what the worker recycled, releasing the blocks those chunks held.
    pub(crate) fn reclaim(&mut self) {
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
    pub(crate) fn attached_packets(&self) -> usize {
        self.cur_count
    }

    /// Packets in chunks published and not yet taken back: the backlog of this
    /// queue's traffic, wherever it waits (its own worker or a buddy).
    pub(crate) fn backlog_packets(&self) -> u64 {
        self.published - self.served
    }

    /// Packets this queue dropped so far (capture and delivery drops).
    pub(crate) fn dropped_packets(&self) -> u64 {
        self.tally.capture_drops + self.tally.delivery_drops
    }

    /// Packets of chunks taken back so far: what the workers finished.
    pub(crate) fn served_packets(&self) -> u64 {
        self.served
    }

    /// Chunks waiting for this queue's own worker, from any capture side.
    pub(crate) fn waiting_chunks(&self) -> usize {
        self.load.waiting()
    }

    /// Publish the attached chunk and remember every chunk of this pool that a
    /// worker has not finished: [`passed`](Self::passed) says when all of them
    /// have been recycled, that is when every packet captured so far is done.
    pub(crate) fn fence(&mut self) -> Fence {
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
    pub(crate) fn passed(&self, fence: &Fence) -> bool {
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
        if let Some(i) = self.inline.as_mut() {
            i.published();
        }
    }

    /// Runs `hook` after each chunk this side publishes, on this (the
    /// capture) thread: the queue's worker side is the hook's, and no worker
    /// thread runs. The chunks it takes come back before the next packet
    /// needs a cell, so the capture never waits for one.
    pub(crate) fn deliver_on_publish(&mut self, hook: Box<dyn OnPublish>) {
        self.inline = Some(hook);
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
/// sleep on that bell alone ([`wait_any`](super::wait_any)).
pub(crate) fn share_bell(captures: &mut [CaptureSide], bell: &WakeHandle) {
    for c in captures {
        c.also_ring = Some(bell.clone());
    }
}

/// What a [`CaptureSide::fence`] recorded: chunks and the generation each was at.
#[derive(Clone, Debug)]
pub(crate) struct Fence {
    pool: u32,
    chunks: Vec<(u32, u32)>,
}

impl Fence {
    /// Chunks the fence waits for.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.chunks.len()
    }
}
