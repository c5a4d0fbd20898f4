//! Streams that follow their bucket when rebalancing moves it to another
//! queue ([`Handler::export`](crate::Handler::export) and
//! [`Handler::import`](crate::Handler::import) of the stream layer).
//!
//! The contract: when the engine asks the old queue's layer to export a
//! bucket, that worker has handled every packet of the bucket it will get,
//! and the new queue's layer imports what it gave before it handles any
//! later one (see `balance::handover`). The layer gives up every connection
//! whose [`Conn::steer`] (the steering's hash of the packet that made it)
//! falls in the bucket, both streams with their records, reassembly, partial
//! pieces and the application's state, untouched. So a stream is never split,
//! duplicated or reordered by a move: it goes on, on the new worker, where it
//! stopped on the old one. Its record's `queue` becomes the new queue (the
//! worker that runs it, and closes it).
//!
//! Accounting moves with the state: the arena bytes the connections hold are
//! released on the old queue's arena and taken on the new one's, and the
//! connections are counted in the new queue's `handed_in`. A stream's bytes
//! are counted where it closes, its packets where they were handled, so the
//! packet identity holds per queue and the byte totals over all queues.
//!
//! IP fragments held for reassembly are not moved: fragments of one datagram
//! straddling a move (rare: the move waits for the old queue to drain) are
//! reassembled on neither queue and counted as failed there.

use super::layer::Conn;
use super::{CloseReason, StreamHandler, Streams};
use crate::flowtable::{End, Flow};
use crate::wire::FlowTuple;
use crate::{FlowBucket, Handover};

/// The connections of one bucket on their way to another queue's layer.
struct Moving<S> {
    flows: Vec<Flow<FlowTuple, Conn<S>>>,
    /// Arena bytes they hold: released by the old queue, taken by the new.
    bytes: u64,
}

impl<H: StreamHandler> Streams<H> {
    /// Gives up the connections of `bucket`, if any.
    pub(super) fn export_bucket(&mut self, bucket: &FlowBucket) -> Option<Handover> {
        let mut flows = Vec::new();
        self.table.take_where(|f| bucket.holds(f.value.steer), |f| flows.push(f));
        if flows.is_empty() {
            return None;
        }
        let bytes = flows.iter().map(|f| f.value.arena_bytes()).sum();
        self.arena.release(bytes);
        Some(Box::new(Moving { flows, bytes }))
    }

    /// Takes in connections another queue's layer gave up. A connection the
    /// table cannot hold (a full table evicts the least recently seen; a key
    /// it holds already, which the steering never makes) is closed and
    /// counted as evicted, as a full table does.
    pub(super) fn import_bucket(&mut self, state: Handover) {
        let Ok(moving) = state.downcast::<Moving<H::State>>() else {
            // Every queue of an engine runs the same handler type, so the
            // state is always one this layer made.
            debug_assert!(false, "a hand-over from another kind of handler");
            return;
        };
        let Moving { flows, bytes } = *moving;
        self.arena.take(bytes);
        let mut closing = Vec::new();
        for mut flow in flows {
            self.stats.handed_in += 1;
            self.queue_handed_in(flow.key, &mut flow.value);
            let gone = |f: Flow<FlowTuple, Conn<H::State>>, why: End| {
                closing.push((f.key, f.value, if why == End::Idle { CloseReason::Idle } else { CloseReason::Evicted }));
            };
            if let Err(back) = self.table.put(flow, gone) {
                closing.push((back.key, back.value, CloseReason::Evicted));
            }
        }
        if !closing.is_empty() {
            self.close(closing, 0);
        }
    }
}

#[cfg(test)]
mod tests;
