//! Per-queue packet accounting.
//!
//! Every packet a queue receives ends in exactly one category:
//!
//! ```text
//! received = delivered + filtered + capture_drops + delivery_drops + unread + in_flight
//! ```
//!
//! The capture thread owns `received`, `filtered`, `capture_drops`,
//! `delivery_drops` and `captured` (packets placed in cells); it publishes them
//! together under a sequence lock, always before the chunk that holds the
//! captured packets is handed to the worker. The worker owns `delivered`,
//! `unread` and the packets it rejected, which it raises when it releases a
//! chunk: `unread` counts packets captured for an application that stopped
//! reading before it took them (a pulling reader closed mid-chunk, as
//! `pcap_close` does); rejected packets are captured ones a filter turned away
//! as they were handed out (a pulling reader's caller judging packets itself,
//! as libpcap's library does with a savefile's filter), reported with the
//! capture thread's `filtered`. A worker that runs to the end delivers
//! everything else. A reader takes `delivered` first and the
//! capture-side group second, so it never sees more delivered than captured, and
//! `in_flight = captured - delivered` is never negative. The identity therefore
//! holds at every read, not just at the end; what the stages count separately
//! (the worker's deliveries against the capture thread's cells) is what a test
//! can check against the application's own count and the pool's chunk states.
//!
//! The locality stage counts the batches it delivers here too ([`BatchSizeCounts`]),
//! once per batch, into buckets of a histogram an exporter reads at any time
//! (`weir --metrics`): a batch is counted whole or not yet, never half.

use crate::QueueId;
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Counters of one queue at one read, in packets unless named bytes. Every
/// counter only grows from read to read, except `in_flight`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// The queue these counters are of (meaningless in a [`Snapshot::total`]).
    pub queue: QueueId,
    /// Packets the source saw on this queue; every one ends in exactly one of
    /// the categories below.
    pub received: u64,
    /// Handed to the application (a [`Handler`](crate::Handler) call, or a
    /// packet a [`Reader`](crate::engine::Reader) returned and the caller kept).
    pub delivered: u64,
    /// Rejected by the filter: in the capture thread, or by a reader's caller
    /// ([`Reader::reject_last`](crate::engine::Reader::reject_last)). An
    /// AF_PACKET source filters in the kernel: what its filter rejects is
    /// never received and counts nowhere.
    pub filtered: u64,
    /// Lost because the queue's pool had no cell for them: a paced trace
    /// packet that found every cell taken (as a NIC drops), AF_XDP packets the
    /// kernel had no free frame for, packets of a moving bucket that found no
    /// room to wait. A trace at top speed waits instead and drops none.
    pub capture_drops: u64,
    /// Lost in the kernel before weir read them, because the ring between
    /// the two was full (AF_PACKET's ring, AF_XDP's RX ring).
    pub delivery_drops: u64,
    /// Captured, then released unread because the application stopped reading.
    pub unread: u64,
    /// Captured into a cell and not yet released by the worker; 0 once a run
    /// has ended cleanly.
    pub in_flight: u64,
    /// Wire bytes of received packets.
    pub received_bytes: u64,
    /// Wire bytes of delivered packets.
    pub delivered_bytes: u64,
    /// Recycles refused because the chunk was not held, not ours, or stale.
    pub bad_recycles: u64,
    /// Captured packets handed to a buddy queue's worker (offloading); they are
    /// still counted here, in the queue that received them, when delivered.
    pub offloaded: u64,
}

impl QueueStats {
    /// Every counter with its name, in the order reports print them: the one
    /// shape of a queue's statistics, for `weir --json` and the libpcap
    /// library's `WEIR_STATS_FILE` alike.
    pub fn fields(&self) -> [(&'static str, u64); 11] {
        [
            ("received", self.received),
            ("delivered", self.delivered),
            ("filtered", self.filtered),
            ("capture_drops", self.capture_drops),
            ("delivery_drops", self.delivery_drops),
            ("unread", self.unread),
            ("in_flight", self.in_flight),
            ("received_bytes", self.received_bytes),
            ("delivered_bytes", self.delivered_bytes),
            ("bad_recycles", self.bad_recycles),
            ("offloaded", self.offloaded),
        ]
    }

    /// True when the accounting identity holds.
    pub fn balanced(&self) -> bool {
        self.received == self.delivered + self.filtered + self.capture_drops + self.delivery_drops + self.unread + self.in_flight
    }

    fn add(&mut self, o: &QueueStats) {
        self.received += o.received;
        self.delivered += o.delivered;
        self.filtered += o.filtered;
        self.capture_drops += o.capture_drops;
        self.delivery_drops += o.delivery_drops;
        self.unread += o.unread;
        self.in_flight += o.in_flight;
        self.received_bytes += o.received_bytes;
        self.delivered_bytes += o.delivered_bytes;
        self.bad_recycles += o.bad_recycles;
        self.offloaded += o.offloaded;
    }
}

/// The counters of every queue of an engine, read one queue after another:
/// each queue's are consistent ([`QueueStats::balanced`] holds at every read),
/// the queues are not read at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// One entry per queue, in queue order.
    pub queues: Vec<QueueStats>,
}

impl Snapshot {
    /// All queues added together (the `queue` field is meaningless there).
    pub fn total(&self) -> QueueStats {
        let mut t = QueueStats::default();
        for q in &self.queues {
            t.add(q);
        }
        t
    }
}

/// The capture thread's private tally, published with [`QueueCounters::publish`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) received: u64,
    pub(crate) received_bytes: u64,
    pub(crate) filtered: u64,
    pub(crate) capture_drops: u64,
    pub(crate) delivery_drops: u64,
    pub(crate) captured: u64,
    pub(crate) offloaded: u64,
}

/// The shared counters of one queue, written by its capture thread and its
/// worker; an application reads them through a [`Snapshot`] or a [`StatsReader`].
#[derive(Debug)]
pub(crate) struct QueueCounters {
    queue: QueueId,
    seq: AtomicU64,
    received: AtomicU64,
    received_bytes: AtomicU64,
    filtered: AtomicU64,
    capture_drops: AtomicU64,
    delivery_drops: AtomicU64,
    captured: AtomicU64,
    offloaded: AtomicU64,
    delivered: AtomicU64,
    delivered_bytes: AtomicU64,
    unread: AtomicU64,
    /// Captured, then turned away by a filter as they were handed out.
    rejected: AtomicU64,
    bad_recycles: AtomicU64,
    /// The locality batches this queue's worker delivered.
    batches: BatchSizes,
}

impl QueueCounters {
    pub(crate) fn new(queue: QueueId) -> Self {
        let z = || AtomicU64::new(0);
        QueueCounters {
            queue,
            seq: z(),
            received: z(),
            received_bytes: z(),
            filtered: z(),
            capture_drops: z(),
            delivery_drops: z(),
            captured: z(),
            offloaded: z(),
            delivered: z(),
            delivered_bytes: z(),
            unread: z(),
            rejected: z(),
            bad_recycles: z(),
            batches: BatchSizes::default(),
        }
    }

    /// Publish the capture thread's tally. Only the capture thread of this queue calls it.
    pub(crate) fn publish(&self, t: &Tally) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s % 2 == 0, "two writers on one queue's capture counters");
        self.seq.store(s + 1, Ordering::Relaxed);
        // Release fence: the odd sequence number is visible before any counter store.
        fence(Ordering::Release);
        self.received.store(t.received, Ordering::Relaxed);
        self.received_bytes.store(t.received_bytes, Ordering::Relaxed);
        self.filtered.store(t.filtered, Ordering::Relaxed);
        self.capture_drops.store(t.capture_drops, Ordering::Relaxed);
        self.delivery_drops.store(t.delivery_drops, Ordering::Relaxed);
        self.captured.store(t.captured, Ordering::Relaxed);
        self.offloaded.store(t.offloaded, Ordering::Relaxed);
        // Release: the counter stores are visible to a reader that sees the even number.
        self.seq.store(s + 2, Ordering::Release);
    }

    /// Record packets released by a worker: this queue's own, or a buddy's that
    /// took an offloaded chunk of this queue.
    pub(crate) fn add_delivered(&self, packets: u64, bytes: u64) {
        self.delivered_bytes.fetch_add(bytes, Ordering::Relaxed);
        // Release orders it after the chunk's capture-side publication, which the
        // worker synchronized with through the ring.
        self.delivered.fetch_add(packets, Ordering::Release);
    }

    /// Record packets a worker released without handing them to the application.
    pub(crate) fn add_unread(&self, packets: u64) {
        // Release, as in `add_delivered`.
        self.unread.fetch_add(packets, Ordering::Release);
    }

    /// Record packets a worker released because a filter turned them away as
    /// they were handed out: filtered, not delivered.
    pub(crate) fn add_rejected(&self, packets: u64) {
        // Release, as in `add_delivered`.
        self.rejected.fetch_add(packets, Ordering::Release);
    }

    pub(crate) fn add_bad_recycle(&self) {
        self.bad_recycles.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn queue(&self) -> QueueId {
        self.queue
    }

    /// Count a locality batch of `packets` this queue's worker delivered.
    pub(crate) fn add_batch(&self, packets: usize) {
        self.batches.record(packets);
    }

    /// The locality batches this queue's worker delivered so far.
    pub(crate) fn batches(&self) -> BatchSizeCounts {
        self.batches.read()
    }

    /// A consistent view of this queue's counters.
    pub(crate) fn read(&self) -> QueueStats {
        // Acquire: everything the capture thread published before the worker's
        // delivery we see is visible to the seqlock read below.
        let delivered = self.delivered.load(Ordering::Acquire);
        let delivered_bytes = self.delivered_bytes.load(Ordering::Relaxed);
        // Acquire, as for `delivered`: both are released packets, read before the
        // capture side's group.
        let unread = self.unread.load(Ordering::Acquire);
        // Acquire, as for `unread`.
        let rejected = self.rejected.load(Ordering::Acquire);
        let t = loop {
            // Acquire pairs with the final Release store in `publish`.
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let t = Tally {
                received: self.received.load(Ordering::Relaxed),
                received_bytes: self.received_bytes.load(Ordering::Relaxed),
                filtered: self.filtered.load(Ordering::Relaxed),
                capture_drops: self.capture_drops.load(Ordering::Relaxed),
                delivery_drops: self.delivery_drops.load(Ordering::Relaxed),
                captured: self.captured.load(Ordering::Relaxed),
                offloaded: self.offloaded.load(Ordering::Relaxed),
            };
            // Acquire fence: the counter loads complete before the re-check of seq.
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                break t;
            }
        };
        let released = delivered + unread + rejected;
        debug_assert!(released <= t.captured, "worker released more than was captured");
        QueueStats {
            queue: self.queue,
            received: t.received,
            delivered,
            filtered: t.filtered + rejected,
            capture_drops: t.capture_drops,
            delivery_drops: t.delivery_drops,
            unread,
            in_flight: t.captured.saturating_sub(released),
            received_bytes: t.received_bytes,
            delivered_bytes,
            bad_recycles: self.bad_recycles.load(Ordering::Relaxed),
            offloaded: t.offloaded,
        }
    }
}

/// Every queue's counters of one engine, to read from any thread.
#[derive(Clone)]
pub struct StatsReader(pub(crate) Vec<std::sync::Arc<QueueCounters>>);

impl StatsReader {
    /// Read every queue's counters now.
    pub fn read(&self) -> Snapshot {
        Snapshot { queues: self.0.iter().map(|c| c.read()).collect() }
    }
}

/// Upper bounds (inclusive) of the buckets of the locality batch-size
/// histogram, in packets: powers of four up to
/// [`MAX_BATCH`](crate::locality::MAX_BATCH). A batch gathers whole chunks,
/// so it can pass its size by up to M − 1 packets: the last bucket,
/// [`BatchSizeCounts::counts`]`[BATCH_SIZE_BOUNDS.len()]`, has no bound.
pub const BATCH_SIZE_BOUNDS: [u64; 12] = [1, 4, 16, 64, 256, 1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22];

/// The sizes of the locality batches one worker (or one reader) delivered:
/// one bucket per bound of [`BATCH_SIZE_BOUNDS`] and one above them all.
/// Written once per batch, by the one thread that delivers them; read by anyone.
#[derive(Debug, Default)]
pub(crate) struct BatchSizes {
    counts: [AtomicU64; BATCH_SIZE_BOUNDS.len() + 1],
    packets: AtomicU64,
}

impl BatchSizes {
    /// Count a batch of `packets` (an empty one, as a stage ends, is no batch).
    pub(crate) fn record(&self, packets: usize) {
        if packets == 0 {
            return;
        }
        // Bucket i holds sizes up to 4^i: the ceiling of log2, halved up.
        let log2 = usize::BITS - (packets - 1).leading_zeros();
        let i = (log2.div_ceil(2) as usize).min(BATCH_SIZE_BOUNDS.len());
        // Relaxed: counts on their own; nothing else is published through them.
        self.packets.fetch_add(packets as u64, Ordering::Relaxed);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> BatchSizeCounts {
        // Relaxed, as in `record`.
        BatchSizeCounts {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            packets: self.packets.load(Ordering::Relaxed),
        }
    }
}

/// How many locality batches were delivered, by size (see [`BATCH_SIZE_BOUNDS`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchSizeCounts {
    /// Batches of each bucket: `counts[i]` holds those larger than bound
    /// i − 1 and at most bound i; the last, those larger than every bound.
    pub counts: [u64; BATCH_SIZE_BOUNDS.len() + 1],
    /// Packets of every batch counted, together (read apart from `counts`:
    /// while batches are delivered, it may already hold the latest's packets).
    pub packets: u64,
}

impl BatchSizeCounts {
    /// Batches counted.
    pub fn batches(&self) -> u64 {
        self.counts.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_batch_lands_in_the_first_bucket_that_holds_it() {
        let sizes = BatchSizes::default();
        let cases = [0usize, 1, 2, 4, 5, 16, 17, 1 << 22, (1 << 22) + 255];
        for n in cases {
            sizes.record(n);
        }
        let c = sizes.read();
        assert_eq!(c.batches(), cases.len() as u64 - 1, "an empty batch is not counted");
        assert_eq!(c.packets, cases.iter().map(|&n| n as u64).sum::<u64>());
        let mut want = [0u64; BATCH_SIZE_BOUNDS.len() + 1];
        for n in cases.into_iter().filter(|&n| n > 0) {
            let i = BATCH_SIZE_BOUNDS.iter().position(|&b| n as u64 <= b).unwrap_or(BATCH_SIZE_BOUNDS.len());
            want[i] += 1;
        }
        assert_eq!(c.counts, want);
        assert_eq!(&c.counts[..4], &[1, 2, 2, 1]);
        assert_eq!(c.counts[BATCH_SIZE_BOUNDS.len()], 1, "past the largest bound");
    }
}
