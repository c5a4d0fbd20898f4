//! Buddy groups: the queues read by one application, whose capture sides may
//! hand captured chunks to each other's workers (WireCAP's advanced mode).
//!
//! Every ordered pair (q, b) of a group gets two SPSC rings: `give`, on which
//! the capture side of q publishes a chunk of q's pool to b's worker, and `back`,
//! on which b's worker recycles it to q. A chunk therefore never leaves its
//! pool: it is filled by q, read by b in place (no packet is copied, on any
//! backend: cells keep pointing into q's arena, blocks or UMEM frames) and comes
//! back to q's free list, where q releases what it holds. Packets stay counted in
//! q's statistics; `offloaded` says how many took the detour.
//!
//! The decision is WireCAP's: when the chunks waiting for q's own worker fill
//! more than T percent of its capture queue, the chunk goes to the buddy whose
//! queue is least full, if that one is less full than q's. The fill levels are
//! read without synchronization ([`WorkerLoad`]), which is enough for a choice
//! that only balances load: a stale level sends one chunk to a worse buddy,
//! never loses or duplicates one.
//!
//! This file holds what both sides of a group read: the load of each worker
//! and the capture side's offloading state. [`super::link_buddies`] joins the
//! sides; the worker's end of a link is `BuddyIn`, with the worker side.

use crate::ring::{Consumer, Producer, WakeHandle};
use crate::{Setting, SettingError};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// T: how full (in percent) a queue's capture queue must be before its capture
/// side offloads chunks, in the modes of [`BalanceMode`](crate::BalanceMode) that offload.
/// From 1 to 99: 0 would offload everything, 100 nothing.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OffloadThreshold(u8);

impl OffloadThreshold {
    /// T = `percent`.
    ///
    /// # Errors
    /// A [`SettingError`] of [`Setting::Balance`] unless `percent` is from 1 to 99.
    pub fn new(percent: u8) -> Result<Self, SettingError> {
        if (1..=99).contains(&percent) {
            Ok(OffloadThreshold(percent))
        } else {
            Err(SettingError::new(Setting::Balance, format!("offload threshold {percent}%: must be from 1 to 99")))
        }
    }

    pub(crate) fn percent(self) -> u8 {
        self.0
    }
}

/// Chunks waiting for one worker (on its own capture queue and from buddies),
/// against the size of its own capture queue.
#[derive(Debug)]
pub(crate) struct WorkerLoad {
    waiting: AtomicUsize,
    capacity: usize,
    /// Set by a capture side that waits for memory this worker holds; see
    /// [`super::WorkerSide::take_starved`].
    starved: AtomicBool,
}

impl WorkerLoad {
    pub(super) fn new(capacity: usize) -> Self {
        debug_assert!(capacity > 0);
        WorkerLoad { waiting: AtomicUsize::new(0), capacity, starved: AtomicBool::new(false) }
    }

    /// A chunk was published to this worker.
    pub(super) fn add(&self) {
        // Relaxed: a load estimate; the chunk itself travels through a ring.
        self.waiting.fetch_add(1, Ordering::Relaxed);
    }

    /// The worker took a chunk.
    pub(super) fn take(&self) {
        // Relaxed, as in `add`. The publisher always adds before it pushes, so the
        // count never goes below zero.
        let before = self.waiting.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "worker took more chunks than were published to it");
    }

    /// Chunks waiting, as of now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// A capture side feeding this worker waits for memory.
    pub(super) fn mark_starved(&self) {
        // Release: pairs with the Acquire in `take_starved`, which the worker runs
        // after the bell rung next wakes it, so the wake cannot miss the mark.
        self.starved.store(true, Ordering::Release);
    }

    pub(super) fn is_starved(&self) -> bool {
        // Acquire: pairs with `mark_starved`.
        self.starved.load(Ordering::Acquire)
    }

    pub(super) fn take_starved(&self) -> bool {
        // AcqRel: reads the mark (as `is_starved`) and clears it in one step, so
        // a mark made between a load and a store is not lost.
        self.starved.swap(false, Ordering::AcqRel)
    }

    /// Fill level in per-mille of the worker's own capture queue (can pass 1000
    /// when buddies add to it).
    fn permille(&self) -> usize {
        self.waiting() * 1000 / self.capacity
    }
}

/// The buddy that should take a chunk, as an index into `buddies`, or `None` to
/// keep it. `own` and `buddies` are fill levels in per-mille.
pub(crate) fn choose_buddy(own: usize, buddies: impl IntoIterator<Item = usize>, threshold: OffloadThreshold) -> Option<usize> {
    if own <= usize::from(threshold.percent()) * 10 {
        return None;
    }
    let (i, least) = buddies.into_iter().enumerate().min_by_key(|&(i, fill)| (fill, i))?;
    (least < own).then_some(i)
}

/// The capture side's end of one buddy link.
pub(super) struct BuddyOut {
    pub(super) give: Producer<u32>,
    pub(super) back: Consumer<u32>,
    pub(super) load: Arc<WorkerLoad>,
    /// Rings the buddy worker's bell after a push onto `give`.
    pub(super) bell: WakeHandle,
}

/// The offloading state of one capture side.
pub(super) struct Offload {
    pub(super) threshold: OffloadThreshold,
    pub(super) buddies: Vec<BuddyOut>,
}

impl Offload {
    /// Which buddy gets the next chunk, given the own worker's load.
    pub(super) fn target(&self, own: &WorkerLoad) -> Option<usize> {
        choose_buddy(own.permille(), self.buddies.iter().map(|b| b.load.permille()), self.threshold)
    }

    pub(super) fn any_returned(&self) -> bool {
        self.buddies.iter().any(|b| !b.back.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(p: u8) -> OffloadThreshold {
        OffloadThreshold::new(p).unwrap()
    }

    #[test]
    fn threshold_range() {
        assert!(OffloadThreshold::new(0).is_err());
        assert!(OffloadThreshold::new(100).is_err());
        assert_eq!(t(50).percent(), 50);
    }

    #[test]
    fn keeps_below_threshold_and_picks_least_loaded() {
        assert_eq!(choose_buddy(500, [0, 0], t(50)), None, "at T exactly: keep");
        assert_eq!(choose_buddy(510, [300, 100, 100], t(50)), Some(1), "least loaded, lowest index on ties");
        assert_eq!(choose_buddy(900, [900, 950], t(50)), None, "nobody less loaded");
        assert_eq!(choose_buddy(900, [], t(50)), None, "no buddies");
    }
}
