//! Timeouts that fire without a packet of their own stream.
//!
//! The flush timeout of a partial piece is checked, in packet time, at the
//! packets of its direction; a direction that goes quiet would keep its
//! piece until the stream closes. So every direction with bytes waiting in
//! a piece has an entry in a queue ordered by the packet time its piece
//! started ([`Waiting`]), and the layer pops the entries that are due at
//! each packet of any stream of the queue (a peek when none is), and when
//! the worker finds its queue empty ([`Handler::idle`](crate::Handler::idle)).
//! No tick scans the table: the queue holds at most one entry per waiting
//! direction (one more for a connection whose key a new one took), and an
//! entry whose piece was delivered meanwhile is dropped or re-queued when it
//! comes due.
//!
//! On an idle worker, packet time stands still; [`IdleClock`] moves it on by
//! the wall-clock time since the worker first found the queue empty after
//! its last packet (so a timeout fires up to one idle wait, about 0.1 s,
//! late). The same time closes the streams idle past the idle timeout. A
//! trace read at full speed leaves its worker idle only before the first
//! packet, when there is nothing to do; a live source, a paced replay or a
//! slow pipe get their timeouts on a quiet link.

use super::{apply_pending, emit, env, Dir, Env, Streams, NO_KEY};
use crate::stream::StreamHandler;
use crate::wire::FlowTuple;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Directions with bytes waiting in a piece: (packet time their piece
/// started, the connection's key, the direction's side), earliest first.
#[derive(Default)]
pub(super) struct Waiting {
    heap: BinaryHeap<Reverse<(u64, FlowTuple, u8)>>,
}

impl Waiting {
    fn push(&mut self, since_ns: u64, key: FlowTuple, side: usize) {
        self.heap.push(Reverse((since_ns, key, side as u8)));
    }

    /// The earliest entry if it is due at `now_ns` under `flush_ns`.
    fn pop_due(&mut self, now_ns: u64, flush_ns: u64) -> Option<(FlowTuple, usize)> {
        let &Reverse((since, ..)) = self.heap.peek()?;
        if now_ns.saturating_sub(since) < flush_ns {
            return None;
        }
        self.heap.pop().map(|Reverse((_, key, side))| (key, usize::from(side)))
    }
}

/// Bytes one entry of [`Waiting`] takes, for the memory plan.
pub(crate) const ENTRY_BYTES: u64 = std::mem::size_of::<Reverse<(u64, FlowTuple, u8)>>() as u64;

/// Packet time for an idle worker: the latest packet's, plus the wall-clock
/// time since the worker first found its queue empty after it.
#[derive(Default)]
pub(super) struct IdleClock {
    last_ns: u64,
    quiet_since: Option<Instant>,
}

impl IdleClock {
    pub(super) fn packet(&mut self, ts_ns: u64) {
        self.last_ns = self.last_ns.max(ts_ns);
        self.quiet_since = None;
    }

    /// Packet time now, on an idle tick; `None` before the first packet.
    fn idle_now(&mut self) -> Option<u64> {
        if self.last_ns == 0 {
            return None;
        }
        let since = *self.quiet_since.get_or_insert_with(Instant::now);
        Some(self.last_ns.saturating_add(u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)))
    }
}

/// Queues `d` (side `side` of the connection `key`) if a piece of it waits
/// and it is not queued yet.
pub(super) fn queue<S>(waiting: &mut Waiting, d: &mut Dir<S>, key: FlowTuple, side: usize) {
    let open = d.state.is_some();
    let Some(x) = d.delivery.as_mut() else { return };
    if !x.flush_queued && open && x.waiting() {
        x.flush_queued = true;
        waiting.push(x.piece_since_ns, key, side);
    }
}

impl<H: StreamHandler> Streams<H> {
    /// Entries in the flush queue.
    #[cfg(test)]
    pub(in crate::stream) fn flush_queue_len(&self) -> usize {
        self.waiting.heap.len()
    }

    /// Delivers the partial pieces whose flush timeout passed at packet time
    /// `now_ns`.
    pub(super) fn flush_due(&mut self, now_ns: u64) {
        let Some(flush) = self.cfg.flush_timeout_ns else { return };
        let mut env = env!(self, now_ns);
        while let Some((key, side)) = self.waiting.pop_due(now_ns, flush) {
            let Some(conn) = self.table.get_mut(&key) else { continue };
            env.key = key;
            let [d0, d1] = &mut conn.dirs;
            let (this, other) = if side == 0 { (d0, d1) } else { (d1, d0) };
            let Some(this) = this.as_mut() else { continue };
            let opposite = other.as_ref();
            // The entry may be of a piece delivered since: the current one is
            // due by its own start.
            let due = this.delivery.as_ref().is_some_and(|x| x.waiting() && now_ns.saturating_sub(x.piece_since_ns) >= flush);
            if this.state.is_some() && due {
                emit(this, opposite, &mut env);
                apply_pending(this, opposite, &mut env);
            }
            if let Some(x) = this.delivery.as_mut() {
                x.flush_queued = false;
            }
            queue(&mut self.waiting, this, key, side);
        }
    }

    /// The worker is idle: the flush and idle timeouts fire as a packet at
    /// the idle clock's time would make them.
    pub(super) fn idle_tick(&mut self) {
        let Some(now) = self.idle.idle_now() else { return };
        self.flush_due(now);
        let mut closing = std::mem::take(&mut self.closing);
        let mut revived = std::mem::take(&mut self.revive);
        self.table.advance(now, |flow, why| super::kernel::leaving(flow, why, &mut closing, &mut revived));
        if !revived.is_empty() {
            let mut env = env!(self, now);
            super::kernel::revive(
                &mut self.table,
                &mut env,
                &mut revived,
                &mut closing,
                self.cfg.idle_timeout_ns,
                self.cfg.active_timeout_ns,
            );
        }
        self.close(closing.drain(..), now);
        (self.closing, self.revive) = (closing, revived);
    }
}
