//! Stopping a running engine, from any thread, for any reason.
//!
//! A stop is a request: capture units see it at their next packet or wait,
//! publish what they hold and return. Workers do not stop on the request; they
//! stop when their capture queue is closed and drained, so every packet captured
//! before the stop is delivered and nothing is left in flight. The first reason
//! given wins and is reported.
//!
//! On a stop that [keeps what was captured](Control::keeps_captured) (asked
//! for, or the time limit) a live unit first takes what the kernel had
//! already stored in its ring when it saw the stop, and counts as delivery
//! drops whatever of that it could not take (see `source::live::drain`). A
//! packet limit or a failure ends the capture at once.

use crate::ring::WakeHandle;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Why a run ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The source has no more packets (end of a trace).
    EndOfInput,
    /// The packet limit was reached.
    PacketLimit,
    /// The time limit passed.
    TimeLimit,
    /// Someone called [`StopHandle::stop`] (Ctrl-C in the CLI).
    Requested,
    /// A capture unit or a worker failed; see the report's errors.
    Failed,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::EndOfInput => "end of input",
            StopReason::PacketLimit => "packet limit reached",
            StopReason::TimeLimit => "time limit reached",
            StopReason::Requested => "stopped on request",
            StopReason::Failed => "failed",
        })
    }
}

/// Shared run state: the stop flag, its reason, and the packet budget.
pub(crate) struct Control {
    stop: AtomicBool,
    reason: Mutex<Option<StopReason>>,
    /// Packets still allowed through the filter, when a limit is set (once:
    /// an engine's control exists from its builder on, before the limit is known).
    budget: OnceLock<AtomicU64>,
    wakers: Mutex<Vec<WakeHandle>>,
    /// Engine threads still running, and a condition signalled as each ends.
    running: Mutex<usize>,
    ended: Condvar,
}

impl Control {
    pub(crate) fn new(packet_limit: Option<u64>) -> Control {
        Control {
            stop: AtomicBool::new(false),
            reason: Mutex::new(None),
            budget: packet_limit.map(AtomicU64::new).map_or_else(OnceLock::new, OnceLock::from),
            wakers: Mutex::new(Vec::new()),
            running: Mutex::new(0),
            ended: Condvar::new(),
        }
    }

    /// Set the packet limit of a control made without one (an engine
    /// builder's), before the run starts; a limit already set is kept.
    pub(crate) fn set_packet_limit(&self, n: u64) {
        // Err: already set, by the only caller, a builder's single build.
        let _ = self.budget.set(AtomicU64::new(n));
    }

    /// A thread of the engine starts; it must call [`thread_ended`](Self::thread_ended).
    pub(crate) fn thread_started(&self) {
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }

    pub(crate) fn thread_ended(&self) {
        let mut n = self.running.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        self.ended.notify_all();
    }

    /// Wait until every engine thread has ended or `until`; true if they have.
    pub(crate) fn wait_threads(&self, until: Instant) -> bool {
        let mut n = self.running.lock().unwrap_or_else(|e| e.into_inner());
        while *n > 0 {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            n = self.ended.wait_timeout(n, (until - now).min(Duration::from_secs(1))).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }

    /// Has a stop been requested? Capture units poll this.
    #[inline]
    pub(crate) fn stop_requested(&self) -> bool {
        // Relaxed: a flag with no data attached; the reason is read under its mutex.
        self.stop.load(Ordering::Relaxed)
    }

    /// Request a stop; the first reason is kept. Wakes every registered sleeper.
    pub(crate) fn request_stop(&self, reason: StopReason) {
        {
            let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
            r.get_or_insert(reason);
        }
        // Relaxed: sleepers are woken explicitly below and re-check after waking.
        self.stop.store(true, Ordering::Relaxed);
        for w in self.wakers.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            w.wake();
        }
    }

    /// Whether the stop asked for keeps the packets the kernel already
    /// captured: a stop on request or at the time limit does (they arrived
    /// before it); a packet limit (the rest is not wanted) or a failure does
    /// not.
    pub(crate) fn keeps_captured(&self) -> bool {
        matches!(self.reason(), Some(StopReason::Requested | StopReason::TimeLimit))
    }

    pub(crate) fn reason(&self) -> Option<StopReason> {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claim one packet from the limit. `false` means the limit is reached:
    /// the packet must not be captured and the unit should stop.
    #[inline]
    pub(crate) fn take_budget(&self) -> bool {
        match self.budget.get() {
            None => true,
            // Relaxed: a counter; no other memory is published through it.
            Some(b) => b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok(),
        }
    }

    /// True once a packet limit was set and all of it taken. A live unit looks
    /// after each packet it captured and stops then: the next packet, the one
    /// `take_budget` would refuse, may never come.
    #[inline]
    pub(crate) fn budget_spent(&self) -> bool {
        // Relaxed: as in take_budget.
        self.budget.get().is_some_and(|b| b.load(Ordering::Relaxed) == 0)
    }

    /// Wake `w` when a stop is requested.
    pub(crate) fn register(&self, w: WakeHandle) {
        self.wakers.lock().unwrap_or_else(|e| e.into_inner()).push(w);
    }
}

impl Default for Control {
    /// No packet limit, no stop.
    fn default() -> Control {
        Control::new(None)
    }
}

/// Stops a running engine from any thread (a signal handler's thread, a
/// timer), or one being built (see `EngineBuilder::stop_handle`). Cheap to
/// clone; every clone stops the same run.
#[derive(Clone)]
pub struct StopHandle(pub(crate) std::sync::Arc<Control>);

impl StopHandle {
    /// Ask the run to stop, with [`StopReason::Requested`] unless another reason
    /// came first. Returns at once: capture ends within about 50 ms, once a live
    /// source has taken what its kernel ring held at the stop, and what was
    /// captured before is still delivered (see [`Running::join`](crate::engine::Running::join)).
    pub fn stop(&self) {
        self.0.request_stop(StopReason::Requested);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_counts_down_to_zero_exactly() {
        let c = Control::new(Some(3));
        assert_eq!((0..5).filter(|_| c.take_budget()).count(), 3);
        assert!(Control::new(None).take_budget());
    }

    #[test]
    fn first_reason_wins() {
        let c = Control::new(None);
        assert!(!c.stop_requested());
        c.request_stop(StopReason::TimeLimit);
        c.request_stop(StopReason::Requested);
        assert!(c.stop_requested());
        assert_eq!(c.reason(), Some(StopReason::TimeLimit));
    }
}
