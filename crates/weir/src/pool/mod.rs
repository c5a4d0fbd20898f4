//! The ring-buffer pool of one queue: R chunks of M cells, and the work-queue pair
//! that moves chunks between the capture thread and the worker.
//!
//! What a user of the library chooses here is the shape of every queue's pool
//! ([`PoolConfig`]: `--pool M,R`) and, for buddy groups, the offload threshold
//! ([`OffloadThreshold`]). A queue holds at most M × R packets between capture
//! and delivery; past that, packets wait in the source or are dropped there
//! (counted in [`crate::stats`]); [`PoolUsage`] says how many of its chunks are
//! in use while it runs. Everything else is the engine's: it makes each
//! queue's `CaptureSide` and `WorkerSide` and hands them to the capture unit
//! and the worker.
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
//! A cell's bytes live in one of three places. With `CaptureSide::push_copy` they
//! are copied into the chunk's own arena of `chunk_bytes` (the DMA of a real NIC
//! into pool buffers). With `CaptureSide::push_ref` the cell points into a
//! block of a `BlockArena` that the capture unit filled in bulk, and the chunk
//! holds that block (up to `BLOCKS_PER_CHUNK` of them) until it is recycled:
//! no copy at all. A chunk is published when its M cells, its arena or its block
//! list are full, or on a flush. With `CaptureSide::push_frame` the cell *is*
//! a frame of a `FrameArena` (AF_XDP's UMEM) that the kernel wrote, and the
//! frame comes back through `CaptureSide::take_frames` when the chunk does.
//!
//! The pool's files follow its roles: `chunk.rs` holds the chunks' memory and
//! state words, which both sides share; `capture.rs` the capture side,
//! `worker.rs` the worker side, `buddy.rs` the load and offload state of a
//! buddy group. This file makes one queue's pair (`work_queue_pair`) and
//! joins pairs into a buddy group (`link_buddies`).

#![allow(unsafe_code)]

mod blocks;
mod buddy;
mod capture;
mod chunk;
mod config;
mod frames;
pub(crate) mod prefetch;
mod worker;

pub(crate) use blocks::{BlockArena, BlockId, BlockMut, BlockRef};
pub use buddy::OffloadThreshold;
pub(crate) use buddy::WorkerLoad;
pub(crate) use capture::CaptureSide;
pub(crate) use capture::{share_bell, Fence, NoCell, OnPublish};
pub(crate) use chunk::ChunkToken;
pub use config::{ChunkCount, PoolConfig, PoolConfigError, MAX_CAPLEN};
pub(crate) use frames::FrameArena;
pub(crate) use worker::WorkerSide;
pub(crate) use worker::{any_ready, wait_any, HeldChunk, Kept, Next};

use crate::ring::{self, Capacity};
use crate::stats::{QueueCounters, Tally};
use crate::{LinkType, QueueId};
use buddy::{BuddyOut, Offload};
use capture::ChunkBlocks;
use chunk::{Cell, Pool};
use std::cell::{Cell as StdCell, RefCell};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;
use worker::{BuddyIn, Link};
// Named by the tests (`use super::*`), which this file no longer uses itself.
/// How full one queue's pool is, in chunks, read at one moment (by a
/// [`Watch`](crate::engine::Watch)).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PoolUsage {
    /// The queue whose pool it is.
    pub queue: QueueId,
    /// R: chunks of the pool.
    pub chunks: u64,
    /// Chunks not free: being filled, waiting for the worker, or being delivered.
    pub chunks_in_use: u64,
    /// M: cells of each chunk.
    pub cells_per_chunk: u64,
}

/// Reads a pool's occupancy from any thread, without touching what the
/// capture thread and the worker use but the chunks' state words (one load
/// each). It does not keep the pool alive: once the engine has let go of it,
/// every chunk reads as free.
#[derive(Clone, Debug)]
pub(crate) struct PoolGauge {
    pool: std::sync::Weak<Pool>,
    queue: QueueId,
    chunks: usize,
    cells_per_chunk: usize,
}

impl PoolGauge {
    pub(crate) fn read(&self) -> PoolUsage {
        let in_use = self.pool.upgrade().map_or(0, |p| p.chunks_in_use());
        PoolUsage {
            queue: self.queue,
            chunks: self.chunks as u64,
            chunks_in_use: in_use as u64,
            cells_per_chunk: self.cells_per_chunk as u64,
        }
    }
}

impl CaptureSide {
    /// A gauge of this side's pool.
    pub(crate) fn gauge(&self) -> PoolGauge {
        PoolGauge {
            pool: Arc::downgrade(&self.pool),
            queue: self.pool.queue,
            chunks: self.pool.chunks(),
            cells_per_chunk: self.pool.cells_per_chunk,
        }
    }
}

#[cfg(test)]
use {
    crate::Packet,
    chunk::{ChunkState, RecycleError},
    std::time::Duration,
};

impl PoolConfig {
    /// The most memory one queue's pool and work-queue pair can take: the
    /// arena (mapped lazily, but a burst can fill it), the cells, the chunks'
    /// states and block lists, and the two rings of chunk numbers.
    pub(crate) fn memory_bytes(&self) -> u64 {
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

/// Create the pool of `queue` and its work-queue pair.
///
/// With `sort_keys`, the capture side computes each packet's locality key as it
/// fills the cell, while the packet's first bytes are still in its cache: read
/// later by the worker, they are a cache miss per packet, which cost the
/// locality stage more than the rest of its work (see [`crate::locality`]).
pub(crate) fn work_queue_pair(
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
        inline: None,
    };
    let worker = WorkerSide {
        own: Link { pool, counters, recycle: RefCell::new(rec_tx), owner_bell: None },
        captured: RefCell::new(cap_rx),
        load,
        inbox: Vec::new(),
        turn: StdCell::new(0),
        attention: None,
    };
    Ok((capture, worker))
}

/// Join the queues of `captures` and `workers` (the same queues in the same
/// order) into one buddy group offloading above `threshold`.
///
/// # Panics
/// If the two lists differ in length or order, or a side is already in a group:
/// both are programming errors of the engine, not conditions of the input.
pub(crate) fn link_buddies(captures: &mut [CaptureSide], workers: &mut [WorkerSide], threshold: OffloadThreshold) {
    assert_eq!(captures.len(), workers.len(), "a buddy group needs the capture side and worker of every queue");
    for (c, w) in captures.iter().zip(workers.iter()) {
        assert_eq!(c.queue(), w.queue(), "capture sides and workers must be in the same order");
        assert!(c.offload.is_none() && w.inbox.is_empty(), "queue {} is already in a buddy group", c.queue().0);
    }
    let n = captures.len();
    for (q, capture) in captures.iter_mut().enumerate() {
        let pool: Arc<Pool> = Arc::clone(&capture.pool);
        let counters: Arc<QueueCounters> = Arc::clone(&capture.counters);
        let owner_bell = capture.recycled.wake_handle();
        let r = pool.chunks();
        let mut outs = Vec::with_capacity(n.saturating_sub(1));
        for (b, worker) in workers.iter_mut().enumerate() {
            if b == q {
                continue;
            }
            let (give, take) = ring::channel::<u32>(Capacity::at_least(r));
            let (back_tx, back) = ring::channel::<u32>(Capacity::at_least(r));
            outs.push(BuddyOut { give, back, load: Arc::clone(&worker.load), bell: worker.wake_handle() });
            worker.inbox.push(BuddyIn {
                link: Link {
                    pool: Arc::clone(&pool),
                    counters: Arc::clone(&counters),
                    recycle: RefCell::new(back_tx),
                    owner_bell: Some(owner_bell.clone()),
                },
                take: RefCell::new(take),
            });
        }
        capture.offload = Some(Offload { threshold, buddies: outs });
    }
}

#[cfg(test)]
mod tests;
