//! A descriptor that poll/select/epoll see readable when a ring side has work,
//! for applications that multiplex weir with their own descriptors (libpcap's
//! `pcap_get_selectable_fd`).
//!
//! Contract:
//! - The descriptor is an eventfd tied to one [`Bell`]. It turns readable at
//!   the first ring after [`ReadyFd::rearm`], or at once if `rearm`'s own check
//!   finds work, and stays readable until the next `rearm`.
//! - Only an armed bell pays for the descriptor: rings between a signal and
//!   the next `rearm` cost one relaxed load, no system call.
//! - Arming follows the store-buffer pattern of [`super::wait`]: the waiter
//!   stores `armed`, fences, then re-checks its condition; the ringer publishes,
//!   fences, then loads `armed`. One of them sees the other's store, so no
//!   publish is missed between the check and the poll.

use super::eventfd::EventFd;
use super::wait::{Bell, WakeHandle};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// The sleeping side's view of its bell's descriptor.
pub(crate) struct ReadyFd {
    bell: Arc<Bell>,
}

impl ReadyFd {
    /// Tie an eventfd to the bell `handle` rings: `fd` (the caller may keep a
    /// duplicate to poll after the bell is gone), or a new one. Once per
    /// bell: later calls share the first.
    pub(crate) fn new(handle: &WakeHandle, fd: Option<EventFd>) -> io::Result<ReadyFd> {
        let bell = Arc::clone(&handle.0);
        if bell.fd.get().is_none() {
            let fd = match fd {
                Some(fd) => fd,
                None => EventFd::new()?,
            };
            // A race with another caller leaves one eventfd; the loser's closes.
            let _ = bell.fd.set(fd);
        }
        Ok(ReadyFd { bell })
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.bell.fd.get().map_or(-1, |f| f.as_raw_fd())
    }

    /// Nothing was found: clear the descriptor and have the next ring set it,
    /// unless `ready()` already holds, in which case it is set now. True when
    /// the descriptor was readable: whoever polled it was woken for nothing
    /// (a ring comes after its chunk is published, so it can come after the
    /// chunk was already taken).
    pub(crate) fn rearm(&self, ready: impl FnOnce() -> bool) -> bool {
        let Some(fd) = self.bell.fd.get() else { return false };
        let was_readable = fd.drain();
        self.bell.armed.store(true, Ordering::Relaxed);
        // SeqCst fence: the store of `armed` is ordered before the re-check's
        // loads (the module comment's pattern).
        fence(Ordering::SeqCst);
        if ready() && self.bell.armed.swap(false, Ordering::Relaxed) {
            fd.signal();
        }
        was_readable
    }

    /// Set the descriptor for good reason outside a ring (the end of capture).
    pub(crate) fn signal(&self) {
        if let Some(fd) = self.bell.fd.get() {
            self.bell.armed.store(false, Ordering::Relaxed);
            fd.signal();
        }
    }
}
