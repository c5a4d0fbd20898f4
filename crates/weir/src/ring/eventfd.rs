//! The eventfd a ring side signals when it has work: the one system object
//! the rings use, below both the waiting ([`super::wait`]) and the readiness
//! descriptor ([`super::ready_fd`]) built on it.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// An eventfd, nonblocking and closed on exec: the descriptor a
/// [`Reader`](crate::engine::Reader) makes readable when packets wait
/// ([`attach_ready_fd`](crate::engine::Reader::attach_ready_fd)). The type
/// stands for the kind of descriptor, so a caller that wants to keep its own
/// (one valid before a reader exists and after it is gone) makes it here and
/// hands a [`share`](Self::share) over: the same descriptor, closed when its
/// last holder drops it, so the caller's stays valid whatever the reader's
/// threads do and costs no second descriptor (libpcap's handle holds one).
pub struct EventFd(Arc<OwnedFd>);

impl EventFd {
    /// A new eventfd, not readable.
    ///
    /// # Errors
    /// What `eventfd(2)` returns, e.g. when the process is out of descriptors.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(EventFd(Arc::new(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// A second descriptor for the same eventfd.
    ///
    /// # Errors
    /// What duplicating the descriptor returns, e.g. when the process is out of descriptors.
    pub fn try_clone(&self) -> io::Result<EventFd> {
        self.0.try_clone().map(|fd| EventFd(Arc::new(fd)))
    }

    /// Another holder of this very descriptor (no new one is made): it stays
    /// open until every holder is dropped.
    pub fn share(&self) -> EventFd {
        EventFd(Arc::clone(&self.0))
    }

    /// Make the descriptor readable. Cannot block: the counter only overflows
    /// after 2^64 − 2 signals without a drain.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Make it unreadable again (nonblocking: nothing to drain is fine).
    /// True when it was readable.
    pub(super) fn drain(&self) -> bool {
        let mut count: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64 from our own eventfd.
        let n = unsafe { libc::read(self.0.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        n == 8 && count > 0
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
