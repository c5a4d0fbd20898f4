//! Handing a moving bucket's flow state from its old queue's worker to its
//! new one ([`Handler::export`] and [`Handler::import`]), so that a handler
//! that keeps state per flow (the stream layer) sees each flow whole.
//!
//! The steering of a trace ([`Steering`](super::Steering)) adds one step to a
//! move, between its fence and its hand-over:
//!
//! 1. Once the old queue's fence is passed, its worker has handled every
//!    packet of the bucket it will get. The steering posts an export
//!    [`Ticket`] to that worker's mailbox ([`Handovers::request`]).
//! 2. The worker, between two chunks (or idle), exports the bucket's state
//!    and posts it to the new queue's mailbox, then marks the ticket done.
//! 3. The steering sees the ticket done, and only then pushes the parked
//!    packets into the new queue. Its worker looks at its mailbox after it
//!    takes a chunk and before it hands out any packet of it, so it takes the
//!    state in before the first parked packet: the post came before the
//!    chunk was published.
//!
//! A worker pays one atomic load per chunk for this. A move given up as the
//! capture stops ([`Ticket::cancel`]) either was not served (the old worker
//! keeps the state) or was (the new worker takes it in before it finishes,
//! since the post came before its capture queue closed): a flow's state is
//! never lost or in two places.
//!
//! Live captures (`threaded.rs`) take the same steps, split across threads:
//! the ticket is made with the move ([`Handovers::ticket`]), posted by the
//! old queue's capture thread once its fence is passed ([`Handovers::ask`]),
//! and cancelled by the new queue's capture thread if that thread ends before
//! the parked packets went in. The cancel is what keeps a late post from
//! reaching a mailbox whose worker has already finished: whichever of the
//! two threads comes first, the rule above holds.

use crate::packet::{FlowBucket, Handover};
use crate::ring::WakeHandle;
use crate::Handler;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

const REQUESTED: u8 = 0;
const SERVING: u8 = 1;
const DONE: u8 = 2;
const CANCELLED: u8 = 3;

/// One bucket's export, asked of its old queue's worker.
pub(crate) struct Ticket {
    bucket: FlowBucket,
    /// The old queue's position in the engine.
    from: usize,
    /// The new queue's position in the engine.
    to: usize,
    stage: AtomicU8,
}

impl Ticket {
    /// True once the state is in the new queue's mailbox (or there was none).
    /// Acquire: pairs with the Release in `serve`, so whoever sees it done
    /// sees the post, and anything it publishes after comes after the post.
    pub(crate) fn done(&self) -> bool {
        self.stage.load(Ordering::Acquire) == DONE
    }

    /// Give the export up, as the capture stops: a worker that has not begun
    /// it will not; one that has is waited for, so its post precedes what the
    /// caller does next (closing the capture queues).
    pub(crate) fn cancel(&self) {
        while let Err(SERVING) = self.stage.compare_exchange(REQUESTED, CANCELLED, Ordering::AcqRel, Ordering::Acquire) {
            std::thread::yield_now();
        }
    }
}

/// Ends a ticket whose export panicked as cancelled, so a [`Ticket::cancel`]
/// does not wait for it forever (the panic stops the run).
struct Serving<'t>(&'t Ticket);

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        let _ = self.0.stage.compare_exchange(SERVING, CANCELLED, Ordering::Release, Ordering::Relaxed);
    }
}

enum Letter {
    Export(Arc<Ticket>),
    Import(Handover),
}

/// One worker's mailbox.
struct Mailbox {
    /// Set when a letter waits; the worker's idle wait watches it too.
    attention: Arc<AtomicBool>,
    letters: Mutex<Vec<Letter>>,
    bell: WakeHandle,
}

impl Mailbox {
    fn letters(&self) -> MutexGuard<'_, Vec<Letter>> {
        // A push or a take cannot be left half done by a panic.
        self.letters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn post(&self, letter: Letter) {
        self.letters().push(letter);
        // Release: a worker that sees the flag sees the letter.
        self.attention.store(true, Ordering::Release);
        self.bell.ring();
    }
}

/// The mailboxes of an engine's workers, by queue position.
pub(crate) struct Handovers {
    boxes: Vec<Mailbox>,
}

impl Handovers {
    /// One mailbox per worker, each woken through `bells` (in queue order);
    /// returns the flags each worker's idle wait must watch, in that order.
    pub(crate) fn new(bells: Vec<WakeHandle>) -> (Arc<Handovers>, Vec<Arc<AtomicBool>>) {
        let boxes: Vec<Mailbox> = bells
            .into_iter()
            .map(|bell| Mailbox { attention: Arc::new(AtomicBool::new(false)), letters: Mutex::new(Vec::new()), bell })
            .collect();
        let flags = boxes.iter().map(|b| Arc::clone(&b.attention)).collect();
        (Arc::new(Handovers { boxes }), flags)
    }

    /// Ask the worker of queue `from` to export `bucket` for queue `to`.
    pub(crate) fn request(&self, from: usize, to: usize, bucket: FlowBucket) -> Arc<Ticket> {
        let t = Self::ticket(from, to, bucket);
        self.ask(&t);
        t
    }

    /// An export of `bucket` from queue `from` to queue `to`, made but not yet
    /// asked for: it can be cancelled before it is ([`ask`](Self::ask)).
    pub(crate) fn ticket(from: usize, to: usize, bucket: FlowBucket) -> Arc<Ticket> {
        Arc::new(Ticket { bucket, from, to, stage: AtomicU8::new(REQUESTED) })
    }

    /// Post the ticket to its old queue's worker. Call once per ticket; a
    /// ticket cancelled before its worker serves it is passed over.
    pub(crate) fn ask(&self, t: &Arc<Ticket>) {
        self.boxes[t.from].post(Letter::Export(Arc::clone(t)));
    }

    /// The desk of the worker of queue position `me`.
    pub(crate) fn desk(self: &Arc<Self>, me: usize) -> Desk {
        Desk { handovers: Arc::clone(self), me }
    }

    fn serve(&self, me: usize, handler: &mut impl Handler) {
        let b = &self.boxes[me];
        // Acquire: pairs with the Release in `post`.
        if !b.attention.load(Ordering::Acquire) {
            return;
        }
        b.attention.store(false, Ordering::Relaxed);
        let letters = std::mem::take(&mut *b.letters());
        for letter in letters {
            match letter {
                Letter::Import(state) => handler.import(state),
                Letter::Export(t) => {
                    if t.stage.compare_exchange(REQUESTED, SERVING, Ordering::AcqRel, Ordering::Acquire).is_err() {
                        continue;
                    }
                    let serving = Serving(&t);
                    if let Some(state) = handler.export(&t.bucket) {
                        self.boxes[t.to].post(Letter::Import(state));
                    }
                    t.stage.store(DONE, Ordering::Release);
                    drop(serving);
                }
            }
        }
    }
}

/// Where one worker serves its mailbox.
pub(crate) struct Desk {
    handovers: Arc<Handovers>,
    me: usize,
}

impl Desk {
    /// Serve what waits: call it after taking a chunk and before handing out
    /// any of its packets, and when idle. Cheap when nothing waits (one load).
    #[inline]
    pub(crate) fn serve(&self, handler: &mut impl Handler) {
        self.handovers.serve(self.me, handler);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{work_queue_pair, CaptureSide, PoolConfig, WorkerSide};
    use crate::stats::QueueCounters;
    use crate::{Packet, QueueId};

    /// A handler that keeps flow hashes, as the stream layer keeps connections.
    #[derive(Default)]
    struct Keeps(Vec<u32>);

    impl Handler for Keeps {
        fn packet(&mut self, _: &Packet<'_>) {}

        fn export(&mut self, bucket: &FlowBucket) -> Option<Handover> {
            let (out, keep): (Vec<u32>, Vec<u32>) = self.0.iter().partition(|&&h| bucket.holds(h));
            self.0 = keep;
            (!out.is_empty()).then(|| Box::new(out) as Handover)
        }

        fn import(&mut self, state: Handover) {
            self.0.extend(*state.downcast::<Vec<u32>>().expect("a Keeps exported it"));
        }
    }

    /// Two queues' work-queue pairs (kept, so their bells stay valid) and
    /// their workers' mailboxes.
    fn two_workers() -> (Arc<Handovers>, Vec<(CaptureSide, WorkerSide)>) {
        let pairs: Vec<_> = (0..2)
            .map(|q| {
                let counters = Arc::new(QueueCounters::new(QueueId(q)));
                work_queue_pair(QueueId(q), &PoolConfig::new(4, 2).unwrap(), counters, None).unwrap()
            })
            .collect();
        let (h, _flags) = Handovers::new(pairs.iter().map(|(_, w)| w.wake_handle()).collect());
        (h, pairs)
    }

    /// Bucket 0x10 of 512 holds hashes 0x10 and 0x210, not 0x11.
    fn bucket() -> FlowBucket {
        FlowBucket::new(0x10, 512)
    }

    #[test]
    fn an_asked_export_moves_exactly_the_buckets_flows_before_the_ticket_is_done() {
        let (h, _pairs) = two_workers();
        let (mut old, mut new) = (Keeps(vec![0x10, 0x11, 0x210]), Keeps::default());
        let t = Handovers::ticket(0, 1, bucket());
        h.desk(0).serve(&mut old);
        assert!(!t.done() && old.0.len() == 3, "a ticket not asked for is not served");
        h.ask(&t);
        assert!(!t.done(), "asked, not yet served");
        h.desk(0).serve(&mut old);
        assert!(t.done());
        assert_eq!(old.0, [0x11]);
        h.desk(1).serve(&mut new);
        assert_eq!(new.0, [0x10, 0x210]);
    }

    #[test]
    fn a_ticket_cancelled_before_it_is_served_leaves_the_flows_on_the_old_worker() {
        let (h, _pairs) = two_workers();
        for asked_first in [false, true] {
            let (mut old, mut new) = (Keeps(vec![0x10, 0x11]), Keeps::default());
            let t = Handovers::ticket(0, 1, bucket());
            if asked_first {
                h.ask(&t);
            }
            t.cancel();
            if !asked_first {
                h.ask(&t);
            }
            h.desk(0).serve(&mut old);
            h.desk(1).serve(&mut new);
            assert!(!t.done(), "asked first: {asked_first}");
            assert_eq!((old.0.as_slice(), new.0.as_slice()), (&[0x10, 0x11][..], &[][..]), "asked first: {asked_first}");
        }
    }

    /// The new queue's capture thread cancels while the old worker serves, in
    /// every interleaving the two threads happen to take: the bucket's flows
    /// end on exactly one worker, and if they left the old one, the new one
    /// finds them in its mailbox once the cancel has returned.
    #[test]
    fn a_cancel_racing_the_export_leaves_each_flow_in_exactly_one_place() {
        let (h, _pairs) = two_workers();
        for _ in 0..500 {
            let t = Handovers::ticket(0, 1, bucket());
            h.ask(&t);
            let desk = h.desk(0);
            let worker = std::thread::spawn(move || {
                let mut old = Keeps(vec![0x10, 0x11]);
                desk.serve(&mut old);
                old
            });
            t.cancel();
            let mut new = Keeps::default();
            h.desk(1).serve(&mut new);
            let old = worker.join().unwrap();
            if t.done() {
                assert_eq!((old.0.as_slice(), new.0.as_slice()), (&[0x11][..], &[0x10][..]));
            } else {
                assert_eq!((old.0.as_slice(), new.0.as_slice()), (&[0x10, 0x11][..], &[][..]));
            }
        }
    }
}
