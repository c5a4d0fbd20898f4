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
        let t = Arc::new(Ticket { bucket, to, stage: AtomicU8::new(REQUESTED) });
        self.boxes[from].post(Letter::Export(Arc::clone(&t)));
        t
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
