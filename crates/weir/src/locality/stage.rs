//! The locality stage on a worker thread: gather a batch of held chunks, index
//! it, deliver it sorted, recycle its chunks (see the module above for the
//! contract).
//!
//! With `double_buffer`, the worker looks at its capture queue every
//! [`POLL_EVERY`] packets while it delivers a batch, and indexes what came into
//! the next batch: chunks then leave the capture queue (and their cells start
//! their way back) while the application runs, instead of after it.

use super::batch::Batch;
use super::LocalityConfig;
use crate::balance::Desk;
use crate::packet::Runs;
use crate::pool::{HeldChunk, Next, WorkerSide};
use crate::profile::{Probe, Stage};
use crate::Handler;
use crate::LinkType;
use std::time::Duration;

/// Packets delivered between two looks at the capture queue when double-buffered.
const POLL_EVERY: u32 = 256;

/// How many packets ahead of the one delivered the stage prefetches: far enough
/// for a fetch from memory to land while the application handles the packets
/// between, near enough that what it fetched is still in cache.
const PREFETCH_AHEAD: usize = 2;

/// Add a chunk to the batch, indexed by the keys its capture thread computed.
#[inline]
fn add<'w>(b: &mut Batch<HeldChunk<'w>>, chunk: HeldChunk<'w>, link: LinkType) {
    let len = chunk.len();
    b.add(chunk, len, |c, index, slot| c.for_each_sort_key(link, |cell, key| index.push(key, (slot, cell))));
}

/// Deliver in key order, then recycle every chunk. `between` runs every
/// [`POLL_EVERY`] packets. Returns the packets delivered.
fn deliver(b: &mut Batch<HeldChunk<'_>>, handler: &mut impl Handler, probe: &mut impl Probe, mut between: impl FnMut()) -> u64 {
    probe.mark(Stage::Locality);
    b.hand_out();
    probe.mark(Stage::Delivery);
    let (order, held) = b.order();
    let delivered = order.len() as u64;
    let mut runs = Runs::new();
    for (n, &(slot, cell)) in order.iter().enumerate() {
        // Delivery jumps around the held chunks, so the packet after next is
        // fetched while this one is handled.
        if let Some(&(s, c)) = order.get(n + PREFETCH_AHEAD) {
            if let Some(chunk) = held.get(s as usize) {
                chunk.prefetch(c as usize);
            }
        }
        if let Some(p) = held.get(slot as usize).and_then(|c| c.get(cell as usize)) {
            if runs.add(p) {
                probe.mark(Stage::Application);
                runs.flush(handler);
                probe.mark(Stage::Delivery);
            }
        }
        if (n as u32 + 1) % POLL_EVERY == 0 {
            probe.mark(Stage::Application);
            runs.flush(handler);
            probe.mark(Stage::Locality);
            between();
            probe.mark(Stage::Delivery);
        }
    }
    probe.mark(Stage::Application);
    runs.flush(handler);
    probe.mark(Stage::Recycle);
    // Dropping a held chunk recycles it: only now is every packet of it delivered.
    b.release();
    delivered
}

/// Run the stage until the capture queue (and every buddy's) is closed and
/// drained. A `desk` is served before each batch is delivered (flow state
/// handed over for its packets was posted before their chunks) and when idle.
pub(crate) fn run<H: Handler>(
    side: &WorkerSide,
    handler: &mut H,
    cfg: &LocalityConfig,
    link: LinkType,
    idle: Duration,
    desk: Option<&Desk>,
    probe: &mut impl Probe,
) {
    let batch = cfg.batch.get();
    let mut cur = Batch::new();
    let mut next = Batch::new();
    let serve = |h: &mut H| {
        if let Some(d) = desk {
            d.serve(h);
        }
    };
    loop {
        // One window of a profile is one batch: gathered, sorted, delivered, recycled.
        probe.begin(Stage::Locality);
        let closed = gather(side, &mut cur, cfg, link, idle, probe, &mut || {
            serve(handler);
            handler.idle();
        });
        probe.mark(Stage::Application);
        serve(handler);
        let delivered = if cfg.double_buffer {
            deliver(&mut cur, handler, probe, || {
                while next.len() < batch {
                    match side.try_next() {
                        Some(c) => add(&mut next, c, link),
                        None => break,
                    }
                }
            })
        } else {
            deliver(&mut cur, handler, probe, || {})
        };
        side.count_batch(delivered as usize);
        probe.end(delivered);
        if closed && next.len() == 0 {
            return;
        }
        std::mem::swap(&mut cur, &mut next);
    }
}

/// Add chunks to `b` until it is due or the source waits for memory it holds,
/// or the capture is over (true then). `on_idle` runs when the queue stays
/// empty with nothing held.
fn gather<'w>(
    side: &'w WorkerSide,
    b: &mut Batch<HeldChunk<'w>>,
    cfg: &LocalityConfig,
    link: LinkType,
    idle: Duration,
    probe: &mut impl Probe,
    on_idle: &mut impl FnMut(),
) -> bool {
    while !b.is_due(cfg) {
        let gathering = b.is_gathering();
        let wait = if gathering { b.wait_left(cfg) } else { idle };
        if gathering && wait.is_zero() {
            return false;
        }
        // Taking a ready chunk and indexing it is the locality stage; sleeping for one is waiting.
        let next = match side.try_next() {
            Some(c) => Next::Chunk(c),
            None => {
                probe.mark(Stage::WorkerWait);
                let n = if gathering { side.next_unless_starved(wait) } else { side.next(wait) };
                probe.mark(Stage::Locality);
                n
            }
        };
        match next {
            Next::Chunk(c) => {
                if !gathering {
                    // A mark from before this batch is about memory since recycled;
                    // a source still starved marks again as it waits.
                    side.take_starved();
                }
                add(b, c, link);
            }
            // Quiet for QUIET, the timeout came, or the source waits for memory
            // the batch holds: deliver what is held.
            Next::Idle if gathering => {
                side.take_starved();
                return false;
            }
            Next::Idle => {
                probe.mark(Stage::Application);
                on_idle();
                probe.mark(Stage::Locality);
            }
            Next::Closed => return true,
        }
    }
    false
}
