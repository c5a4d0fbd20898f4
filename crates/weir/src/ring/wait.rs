//! Sleeping on a ring without losing a wake-up.
//!
//! The sleeper announces itself by setting `sleeping`, then re-checks its
//! condition, then parks. The other side publishes its index, then checks
//! `sleeping` and unparks. Both sides put a SeqCst fence between their store and
//! their load, so at least one of them sees the other's store (the classic
//! store-buffer pattern): either the sleeper sees the new index and does not
//! park, or the waker sees `sleeping` and unparks. Parking has token semantics,
//! so an unpark that lands before the park is not lost either.

use super::eventfd::EventFd;
use crossbeam_utils::sync::{Parker, Unparker};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Spins before yielding: the other side usually answers within a microsecond under load.
const SPINS: u32 = 64;
/// How long to keep yielding before parking. Parking costs a futex wake on the other
/// side's critical path (a system call and a context switch, several microseconds);
/// a short yield phase catches the answers that come just after the spin. Producers
/// that push often batch their wake-ups instead (`Producer::set_wake_batch`), so
/// this stays short and an idle side costs little CPU.
const YIELD_FOR: Duration = Duration::from_micros(10);

/// The shared half: whether the sleeper is parked, and how to wake it.
pub(crate) struct Bell {
    sleeping: AtomicBool,
    unparker: Unparker,
    /// Set by [`super::ReadyFd::rearm`]: the next ring also signals `fd`.
    pub(crate) armed: AtomicBool,
    pub(crate) fd: OnceLock<EventFd>,
}

impl Bell {
    /// Call after publishing the state change the sleeper may be waiting for.
    #[inline]
    pub(crate) fn ring(&self) {
        // SeqCst fence: orders our earlier index store before the load of `sleeping`
        // (see the module comment).
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.unparker.unpark();
        }
        // Relaxed load and swap: the fence above orders them as `sleeping`'s
        // load; the swap makes one ringer of many pay for the system call.
        if self.armed.load(Ordering::Relaxed) && self.armed.swap(false, Ordering::Relaxed) {
            if let Some(fd) = self.fd.get() {
                fd.signal();
            }
        }
    }
}

/// The owned half, kept by the side that sleeps.
pub(crate) struct Sleeper {
    parker: Parker,
    bell: Arc<Bell>,
}

impl Sleeper {
    pub(crate) fn new() -> Self {
        let parker = Parker::new();
        let bell = Arc::new(Bell {
            sleeping: AtomicBool::new(false),
            unparker: parker.unparker().clone(),
            armed: AtomicBool::new(false),
            fd: OnceLock::new(),
        });
        Sleeper { parker, bell }
    }

    pub(crate) fn bell(&self) -> Arc<Bell> {
        Arc::clone(&self.bell)
    }

    /// Wait until `ready()` is true or `timeout` passes; returns `ready()`.
    ///
    /// A park can return early (an unpark token left from a ring that raced with an
    /// earlier re-check, or a spurious wake-up), so this loops until the deadline.
    pub(crate) fn wait_until(&self, timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
        for _ in 0..SPINS {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        let start = Instant::now();
        let deadline = start + timeout;
        let stop_yielding = start + YIELD_FOR.min(timeout);
        while Instant::now() < stop_yielding {
            std::thread::yield_now();
            if ready() {
                return true;
            }
        }
        loop {
            self.bell.sleeping.store(true, Ordering::Relaxed);
            // SeqCst fence: the store of `sleeping` is ordered before the re-check's loads.
            fence(Ordering::SeqCst);
            if ready() {
                self.bell.sleeping.store(false, Ordering::Relaxed);
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                self.bell.sleeping.store(false, Ordering::Relaxed);
                return false;
            }
            self.parker.park_timeout(deadline - now);
            self.bell.sleeping.store(false, Ordering::Relaxed);
            if ready() {
                return true;
            }
        }
    }
}

/// Wakes a sleeping ring side from any thread, e.g. to tell it that a stop was requested.
#[derive(Clone)]
pub(crate) struct WakeHandle(pub(crate) Arc<Bell>);

impl WakeHandle {
    pub(crate) fn wake(&self) {
        self.0.unparker.unpark();
    }

    /// Wake the side only if it sleeps: the cheap signal after a push into a ring
    /// it watches with [`Consumer::wait_or`](super::Consumer::wait_or).
    pub(crate) fn ring(&self) {
        self.0.ring();
    }
}
