//! The worker side of a work-queue pair: takes captured chunks (its own
//! queue's and, in a buddy group, those its buddies offload to it), hands out
//! their packets, and recycles each chunk to the pool it came from.
//!
//! Invariants: only this side moves a chunk `Captured → Delivering → Free`,
//! and a chunk it holds carries its mark in the state word. A packet borrows
//! what holds its chunk (a [`HeldChunk`], or the side itself for a
//! [`RawChunk`]), so no packet outlives its chunk's recycle. A recycle by
//! token is checked (pool, index, state, holder, generation) against the
//! state word; a refused one is counted and changes nothing.

#![allow(unsafe_code)]

use super::buddy::WorkerLoad;
use super::chunk::{pack, pack_held, ChunkState, ChunkToken, Pool, RecycleError};
use crate::ring::{Consumer, Producer, WakeHandle};
use crate::stats::QueueCounters;
use crate::{LinkType, Packet, QueueId};
use std::cell::{Cell as StdCell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Sleep until a chunk waits on any of `workers`, every one is closed, or
/// `timeout` passes; with `watch_starved`, also until a capture side feeding
/// one is starved. The capture sides must ring the first worker's bell
/// ([`share_bell`](super::share_bell) with its [`WorkerSide::wake_handle`]) when there are several.
pub(crate) fn wait_any(workers: &[WorkerSide], timeout: Duration, watch_starved: bool) {
    let Some(first) = workers.first() else { return };
    let ready = || any_ready(workers, watch_starved);
    if ready() {
        return;
    }
    workers.iter().for_each(WorkerSide::wake_refill);
    first.captured.borrow().wait_or(timeout, ready);
}

/// What [`wait_any`] waits for: a chunk waits on one of `workers`, every one
/// is closed, or (with `watch_starved`) a capture side feeding one is starved.
pub(crate) fn any_ready(workers: &[WorkerSide], watch_starved: bool) -> bool {
    workers.iter().any(|w| w.backlog() > 0 || (watch_starved && w.load.is_starved())) || workers.iter().all(WorkerSide::is_closed)
}

/// What [`WorkerSide::next`] found.
pub(crate) enum Next<'w> {
    Chunk(HeldChunk<'w>),
    /// Nothing arrived within the timeout.
    Idle,
    /// The capture side is gone and every chunk it published was taken.
    Closed,
}

/// A pool as a worker reaches it: its memory, counters, and the ring that
/// recycles its chunks to its capture side.
pub(super) struct Link {
    pub(super) pool: Arc<Pool>,
    pub(super) counters: Arc<QueueCounters>,
    pub(super) recycle: RefCell<Producer<u32>>,
    /// For a buddy's pool: wakes its capture side, which sleeps on its own
    /// recycle queue, after a recycle onto this link.
    pub(super) owner_bell: Option<WakeHandle>,
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
    fn release(&self, idx: u32, gen: u32, count: usize, me: u16, kept: Kept) {
        debug_assert!(kept.unread.0 + kept.rejected.0 <= count);
        let unread = (kept.unread.0.min(count), kept.unread.1);
        let rejected = (kept.rejected.0.min(count - unread.0), kept.rejected.1);
        // Relaxed: written before the chunk was published, which we acquired.
        let bytes = self.pool.bytes[idx as usize].load(Ordering::Relaxed);
        if self.pool.swap_word(idx, pack_held(ChunkState::Delivering, gen, me), pack(ChunkState::Free, gen.wrapping_add(1))).is_err() {
            // Cannot happen through the borrow-checked API; refuse rather than corrupt.
            self.counters.add_bad_recycle();
            return;
        }
        self.counters.add_delivered((count - unread.0 - rejected.0) as u64, bytes.saturating_sub(unread.1 + rejected.1));
        if unread.0 > 0 {
            self.counters.add_unread(unread.0 as u64);
        }
        if rejected.0 > 0 {
            self.counters.add_rejected(rejected.0 as u64);
        }
        let pushed = self.recycle.borrow_mut().push(idx);
        debug_assert!(pushed.is_ok(), "recycle queue holds every chunk, so it cannot be full");
        if let Some(bell) = &self.owner_bell {
            bell.ring();
        }
    }
}

/// The worker's end of one buddy link: chunks of the buddy's pool.
pub(super) struct BuddyIn {
    pub(super) link: Link,
    pub(super) take: RefCell<Consumer<u32>>,
}

/// The worker's handle on one queue: takes captured chunks (its own queue's, and
/// in a buddy group those its buddies offload to it) and recycles each to the pool
/// it came from. `Send`, not `Sync`; chunks it hands out borrow it and recycle on drop.
///
/// The engine makes one per queue and runs it in the queue's worker (or the
/// [`Reader`](crate::engine::Reader)); only the crate can use one.
pub(crate) struct WorkerSide {
    pub(super) own: Link,
    pub(super) captured: RefCell<Consumer<u32>>,
    /// Chunks waiting for this worker, shared with every capture side feeding it.
    pub(super) load: Arc<WorkerLoad>,
    /// Chunks offloaded by buddies, one link per buddy.
    pub(super) inbox: Vec<BuddyIn>,
    /// Where the next look for a chunk starts (0 = own queue, i+1 = inbox i), so
    /// that no source of chunks waits behind a busy other.
    pub(super) turn: StdCell<usize>,
    /// Set by another thread that wants this worker's attention between
    /// chunks (a flow-state hand-over): ends an idle wait early.
    pub(super) attention: Option<Arc<AtomicBool>>,
}

impl WorkerSide {
    pub(crate) fn queue(&self) -> QueueId {
        self.own.pool.queue
    }

    /// Count a locality batch of `packets` this worker delivered, in its queue's counters.
    pub(crate) fn count_batch(&self, packets: usize) {
        self.own.counters.add_batch(packets);
    }

    /// This worker's mark in the state words of the chunks it holds.
    fn me(&self) -> u16 {
        self.own.pool.queue.0.wrapping_add(1)
    }

    /// End idle waits early whenever `flag` is set (the worker clears it).
    pub(crate) fn watch(&mut self, flag: Arc<AtomicBool>) {
        self.attention = Some(flag);
    }

    /// Take the next captured chunk, sleeping up to `timeout` for one, or
    /// less when the [`watch`](Self::watch)ed flag is set.
    pub(crate) fn next(&self, timeout: Duration) -> Next<'_> {
        self.wait_next(timeout, false)
    }

    /// As [`next`](Self::next), but returns `Idle` at once when a capture side
    /// feeding this worker is starved ([`CaptureSide::mark_starved`](super::CaptureSide::mark_starved)).
    pub(crate) fn next_unless_starved(&self, timeout: Duration) -> Next<'_> {
        self.wait_next(timeout, true)
    }

    fn wait_next(&self, timeout: Duration, watch_starved: bool) -> Next<'_> {
        if let Some(c) = self.try_next() {
            return Next::Chunk(c);
        }
        self.wake_refill();
        {
            let own = self.captured.borrow();
            own.wait_or(timeout, || {
                (watch_starved && self.load.is_starved())
                    || self.inbox.iter().any(|b| !b.take.borrow().is_empty())
                    || self.all_closed(&own)
                    // Relaxed: a hint to stop waiting; the reader of what it announces acquires.
                    || self.attention.as_ref().is_some_and(|a| a.load(Ordering::Relaxed))
            });
        }
        match self.try_next() {
            Some(c) => Next::Chunk(c),
            None if self.all_closed(&self.captured.borrow()) => Next::Closed,
            None => Next::Idle,
        }
    }

    /// Wake the capture side for the chunks this worker handed back that
    /// wait below its wake-up batch
    /// ([`CaptureSide::refill_in_batches_of`](super::CaptureSide::refill_in_batches_of)):
    /// owed before every sleep, or both sides sleep until a timeout. A
    /// buddy's chunks ring their owner as each goes back.
    fn wake_refill(&self) {
        self.own.recycle.borrow().notify_if_waiting();
    }

    /// True when every capture side feeding this worker is gone and every chunk
    /// it published was taken.
    pub(crate) fn is_closed(&self) -> bool {
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
    pub(crate) fn take_starved(&self) -> bool {
        self.load.take_starved()
    }

    /// Take the next captured chunk if one is waiting.
    pub(crate) fn try_next(&self) -> Option<HeldChunk<'_>> {
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
    pub(crate) fn backlog(&self) -> usize {
        self.captured.borrow().len() + self.inbox.iter().map(|b| b.take.borrow().len()).sum::<usize>()
    }

    /// A handle that wakes this worker from [`next`](Self::next).
    pub(crate) fn wake_handle(&self) -> WakeHandle {
        self.captured.borrow().wake_handle()
    }

    /// Take the next chunk as a bare token, for callers that cannot hold a borrow.
    /// It must come back through [`recycle_raw`](Self::recycle_raw).
    pub(crate) fn take_raw(&self) -> Option<ChunkToken> {
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
    pub(crate) fn raw_chunk(&self, token: ChunkToken) -> Result<RawChunk<'_>, RecycleError> {
        let link = self.link_of(token)?;
        let count = link.check_held(token, self.me())?;
        Ok(RawChunk { pool: &link.pool, index: token.index, count })
    }

    /// Give back a chunk by token. Refused (and counted) unless the token names a chunk
    /// of a pool this worker reads that is being delivered, at its current generation.
    /// `&mut self` guarantees no packet of any chunk is borrowed meanwhile.
    pub(crate) fn recycle_raw(&mut self, token: ChunkToken) -> Result<(), RecycleError> {
        self.recycle_raw_kept(token, Kept::default())
    }

    /// As [`recycle_raw`](Self::recycle_raw), when some of the chunk's packets
    /// did not reach the application ([`Kept`]): they are counted as unread or
    /// filtered, not delivered.
    pub(crate) fn recycle_raw_kept(&mut self, token: ChunkToken, kept: Kept) -> Result<(), RecycleError> {
        let me = self.me();
        let checked = self.link_of(token).and_then(|l| l.check_held(token, me).map(|c| (l, c)));
        match checked {
            Ok((link, count)) => {
                link.release(token.index, token.generation, count, me, kept);
                Ok(())
            }
            Err(e) => {
                self.own.counters.add_bad_recycle();
                Err(e)
            }
        }
    }
}

/// Packets of a released chunk that did not reach the application, as
/// (packets, wire bytes): the rest of the chunk counts as delivered.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Kept {
    /// Never handed out: the reader stopped before them.
    pub(crate) unread: (usize, u64),
    /// Handed out and turned away by the caller's filter ([`crate::stats`]).
    pub(crate) rejected: (usize, u64),
}

/// A chunk the worker holds. Its packets borrow it; dropping it recycles it.
pub(crate) struct HeldChunk<'w> {
    link: &'w Link,
    me: u16,
    index: u32,
    generation: u32,
    count: usize,
    released: bool,
}

impl<'w> HeldChunk<'w> {
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The queue that captured the chunk (a buddy's, if it was offloaded).
    #[cfg(test)]
    pub(crate) fn queue(&self) -> QueueId {
        self.link.pool.queue
    }

    /// Packet `i`, or `None` past the end.
    pub(crate) fn get(&self, i: usize) -> Option<Packet<'_>> {
        // SAFETY: we hold the chunk (Delivering) for as long as `self` lives, and the
        // returned packet borrows `self`; `i < count` is checked.
        (i < self.count).then(|| unsafe { self.link.pool.packet(self.index, i) })
    }

    /// Ask the processor to bring the first bytes of packet `i` (its headers and
    /// the start of its payload) into cache; nothing past the end. The locality
    /// stage knows the order it delivers in ahead of time, where the hardware
    /// prefetchers, which follow addresses, cannot guess it.
    #[inline]
    pub(crate) fn prefetch(&self, i: usize) {
        /// Cache lines fetched: a 64-byte line holds Ethernet, IP and TCP
        /// headers; the following ones the payload the application reads next,
        /// after which the processor's own stream prefetcher follows the reads.
        const LINES: usize = 4;
        if let Some(p) = self.get(i) {
            super::prefetch::lines(p.data(), LINES);
        }
    }

    pub(crate) fn packets(&self) -> impl Iterator<Item = Packet<'_>> + '_ {
        // SAFETY: as in `get`, with i < count by construction.
        (0..self.count).map(move |i| unsafe { self.link.pool.packet(self.index, i) })
    }

    /// Call `f` with each packet's cell number and locality key
    /// ([`crate::wire::sort_key`]) on `link`, in cell order. The capture
    /// thread computed the keys when the pool was made with `sort_keys`; else
    /// they are computed here.
    #[inline]
    pub(crate) fn for_each_sort_key(&self, link: LinkType, f: impl FnMut(u32, Option<u16>)) {
        // SAFETY: we hold the chunk (Delivering) for as long as `self` lives.
        unsafe { self.link.pool.for_each_sort_key(self.index, self.count, link, f) }
    }

    /// The token of this hand-out.
    pub(crate) fn token(&self) -> ChunkToken {
        ChunkToken { pool: self.link.pool.uid, index: self.index, generation: self.generation }
    }

    /// Keep the chunk held past this value: it must come back through
    /// [`WorkerSide::recycle_raw`].
    pub(crate) fn into_token(self) -> ChunkToken {
        let t = self.token();
        std::mem::forget(self);
        t
    }
}

impl Drop for HeldChunk<'_> {
    fn drop(&mut self) {
        if !self.released {
            self.released = true;
            self.link.release(self.index, self.generation, self.count, self.me, Kept::default());
        }
    }
}

/// The packets of a chunk held by token.
pub(crate) struct RawChunk<'w> {
    pool: &'w Pool,
    index: u32,
    count: usize,
}

impl<'w> RawChunk<'w> {
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// As [`HeldChunk::for_each_sort_key`].
    pub(crate) fn for_each_sort_key(&self, link: LinkType, f: impl FnMut(u32, Option<u16>)) {
        // SAFETY: the token was checked to name a chunk held by the side this borrows.
        unsafe { self.pool.for_each_sort_key(self.index, self.count, link, f) }
    }

    /// Packet `i`, or `None` past the end. It borrows the worker side rather
    /// than this view: it stays valid until the chunk is recycled, which needs
    /// the side mutably.
    pub(crate) fn get(&self, i: usize) -> Option<Packet<'w>> {
        // SAFETY: the token was checked to name a Delivering chunk of this pool, and
        // `recycle_raw` needs `&mut WorkerSide`, which cannot coexist with the 'w borrow.
        (i < self.count).then(|| unsafe { self.pool.packet(self.index, i) })
    }
}
