//! The locality stage on a worker thread: gather a batch of held chunks, index
//! it, deliver it sorted, recycle its chunks (see the module above for the
//! contract).
//!
//! With `double_buffer`, the worker looks at its capture queue every
//! [`POLL_EVERY`] packets while it delivers a batch, and indexes what came into
//! the next batch: chunks then leave the capture queue (and their cells start
//! their way back) while the application runs, instead of after it.

use super::{LocalityConfig, PortIndex};
use crate::pool::{HeldChunk, Next, WorkerSide};
use crate::Handler;
use crate::LinkType;
use std::time::{Duration, Instant};

/// Packets delivered between two looks at the capture queue when double-buffered.
const POLL_EVERY: u32 = 256;

/// How many packets ahead of the one delivered the stage prefetches: far enough
/// for a fetch from memory to land while the application handles the packets
/// between, near enough that what it fetched is still in cache.
const PREFETCH_AHEAD: usize = 2;

/// A batch is delivered early when no chunk has come for this long. The batch's
/// chunks hold what the source captured into (a trace reader's blocks, an
/// AF_PACKET ring's blocks), so a source can stall for want of them while the
/// batch waits for more. Sources say so ([`crate::pool::CaptureSide::mark_starved`])
/// and the batch goes at once; this is the backstop for a source that cannot
/// tell. At any rate worth sorting, chunks come far more often.
pub(crate) const QUIET: Duration = Duration::from_millis(10);

/// One batch: the chunks it holds and the index of their packets.
struct Batch<'w> {
    held: Vec<HeldChunk<'w>>,
    /// (chunk in `held`, cell in that chunk).
    index: PortIndex<(u32, u32)>,
    /// When its first chunk came.
    since: Option<Instant>,
}

impl<'w> Batch<'w> {
    fn new() -> Self {
        Batch { held: Vec::new(), index: PortIndex::new(), since: None }
    }

    fn add(&mut self, chunk: HeldChunk<'w>, link: LinkType) {
        let slot = self.held.len() as u32;
        let index = &mut self.index;
        index.reserve(chunk.len());
        chunk.for_each_sort_key(link, |cell, key| index.push(key, (slot, cell)));
        self.since.get_or_insert_with(Instant::now);
        self.held.push(chunk);
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    /// Deliver in key order, then recycle every chunk. `between` runs every
    /// [`POLL_EVERY`] packets.
    fn deliver(&mut self, handler: &mut impl Handler, mut between: impl FnMut()) {
        let held = &self.held;
        let order = self.index.sort();
        for (n, &(slot, cell)) in order.iter().enumerate() {
            // Delivery jumps around the held chunks, so the packet after next is
            // fetched while this one is handled.
            if let Some(&(s, c)) = order.get(n + PREFETCH_AHEAD) {
                if let Some(chunk) = held.get(s as usize) {
                    chunk.prefetch(c as usize);
                }
            }
            if let Some(p) = held.get(slot as usize).and_then(|c| c.get(cell as usize)) {
                handler.packet(&p);
            }
            if (n as u32 + 1) % POLL_EVERY == 0 {
                between();
            }
        }
        // Dropping a held chunk recycles it: only now is every packet of it delivered.
        self.held.clear();
        self.since = None;
    }
}

/// Run the stage until the capture queue (and every buddy's) is closed and drained.
pub fn run(side: &WorkerSide, handler: &mut impl Handler, cfg: &LocalityConfig, link: LinkType, idle: Duration) {
    let batch = cfg.batch.get();
    let mut cur = Batch::new();
    let mut next = Batch::new();
    loop {
        let closed = gather(side, &mut cur, cfg, link, idle);
        if cfg.double_buffer {
            cur.deliver(handler, || {
                while next.len() < batch {
                    match side.try_next() {
                        Some(c) => next.add(c, link),
                        None => break,
                    }
                }
            });
        } else {
            cur.deliver(handler, || {});
        }
        if closed && next.len() == 0 {
            return;
        }
        std::mem::swap(&mut cur, &mut next);
    }
}

/// Add chunks to `b` until it holds a batch, its oldest packet has waited the
/// timeout, or the capture is over (true then).
fn gather<'w>(side: &'w WorkerSide, b: &mut Batch<'w>, cfg: &LocalityConfig, link: LinkType, idle: Duration) -> bool {
    while b.len() < cfg.batch.get() {
        let wait = match b.since {
            None => idle,
            Some(t) => match cfg.timeout.checked_sub(t.elapsed()) {
                Some(left) if !left.is_zero() => left.min(QUIET),
                _ => return false,
            },
        };
        let next = if b.since.is_some() { side.next_unless_starved(wait) } else { side.next(wait) };
        match next {
            Next::Chunk(c) => {
                if b.since.is_none() {
                    // A mark from before this batch is about memory since recycled;
                    // a source still starved marks again as it waits.
                    side.take_starved();
                }
                b.add(c, link);
            }
            // Quiet for QUIET, the timeout came, or the source waits for memory
            // the batch holds: deliver what is held.
            Next::Idle if b.since.is_some() => {
                side.take_starved();
                return false;
            }
            Next::Idle => {}
            Next::Closed => return true,
        }
    }
    false
}
