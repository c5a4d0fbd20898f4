//! A locality batch, written once for both deliveries: the chunks it holds,
//! the index of their packets, and when it is due.
//!
//! The push workers ([`super::stage`]) hold their chunks as
//! [`HeldChunk`](crate::pool::HeldChunk)s of one queue, recycled when the
//! batch lets them go; the pull reader (`engine/reader.rs`) holds chunk
//! tokens of every queue and recycles them itself. Both gather by the same
//! rule, said here once:
//! - a batch is due when it holds [`BatchSize`](super::BatchSize) packets or
//!   its oldest packet has waited [`LocalityConfig::timeout`];
//! - before that, it waits for another chunk at most [`QUIET`] (a source may
//!   stall for want of the memory the batch holds; sources that can tell say
//!   so, and the caller hands the batch out at once);
//! - its chunks go back only after every packet of it was delivered.
//!
//! The stream layer will sit on the same batches: a stream handler is handed
//! packets in this order, by the worker that owns the queue.

use super::{LocalityConfig, PortIndex};
use std::time::{Duration, Instant};

/// A batch is delivered early when no chunk has come for this long. The batch's
/// chunks hold what the source captured into (a trace reader's blocks, an
/// AF_PACKET ring's blocks), so a source can stall for want of them while the
/// batch waits for more. Sources say so ([`crate::pool::CaptureSide::mark_starved`])
/// and the batch goes at once; this is the backstop for a source that cannot
/// tell. At any rate worth sorting, chunks come far more often.
pub(crate) const QUIET: Duration = Duration::from_millis(10);

/// The chunks of one batch (`C`: however the caller holds a chunk) and the
/// index of their packets by (chunk in the batch, cell in that chunk).
pub(crate) struct Batch<C> {
    held: Vec<C>,
    index: PortIndex<(u32, u32)>,
    /// When its first chunk came; `None` while empty or being delivered.
    since: Option<Instant>,
    /// When its latest chunk came.
    last: Option<Instant>,
}

impl<C> Batch<C> {
    pub(crate) fn new() -> Self {
        Batch { held: Vec::new(), index: PortIndex::new(), since: None, last: None }
    }

    /// Add a chunk of `len` packets. `keys` indexes them: it pushes each
    /// packet's sort key with (the `slot` it is given, the packet's cell).
    #[inline]
    pub(crate) fn add(&mut self, chunk: C, len: usize, keys: impl FnOnce(&C, &mut PortIndex<(u32, u32)>, u32)) {
        let slot = self.held.len() as u32;
        self.index.reserve(len);
        keys(&chunk, &mut self.index, slot);
        let now = Instant::now();
        self.since.get_or_insert(now);
        self.last = Some(now);
        self.held.push(chunk);
    }

    /// Packets held.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// True from its first chunk until it is handed out.
    pub(crate) fn is_gathering(&self) -> bool {
        self.since.is_some()
    }

    /// Full, or its oldest packet has waited the timeout.
    pub(crate) fn is_due(&self, cfg: &LocalityConfig) -> bool {
        self.len() >= cfg.batch.get() || self.since.is_some_and(|t| t.elapsed() >= cfg.timeout)
    }

    /// How long a gathering batch may still wait for its next chunk: what is
    /// left of its timeout, at most [`QUIET`]; zero once it is due by age.
    pub(crate) fn wait_left(&self, cfg: &LocalityConfig) -> Duration {
        self.since.map_or(Duration::ZERO, |t| cfg.timeout.saturating_sub(t.elapsed()).min(QUIET))
    }

    /// No chunk has come for [`QUIET`].
    pub(crate) fn is_quiet(&self) -> bool {
        self.last.is_some_and(|t| t.elapsed() >= QUIET)
    }

    /// Stop gathering and sort: the delivery order, as (chunk in
    /// [`held`](Self::held), cell).
    pub(crate) fn hand_out(&mut self) -> &[(u32, u32)] {
        self.since = None;
        self.last = None;
        self.index.sort()
    }

    /// The delivery order [`hand_out`](Self::hand_out) made, and the chunks it points into.
    pub(crate) fn order(&self) -> (&[(u32, u32)], &[C]) {
        (self.index.sorted(), &self.held)
    }

    /// Every packet was delivered (or given up): the chunks, for the caller
    /// to recycle (a [`HeldChunk`](crate::pool::HeldChunk) recycles itself when dropped).
    /// A batch released while gathering keeps its index: it is given up whole
    /// and dropped (a reader that closes).
    pub(crate) fn release(&mut self) -> std::vec::Drain<'_, C> {
        self.since = None;
        self.last = None;
        self.held.drain(..)
    }
}
