//! Thread cancellation (`pthread_cancel`) while a program's thread is in weir.
//!
//! glibc cancels a thread by unwinding its stack from where the cancel is
//! acted on: at a cancellation point (poll, read, write, ...), or anywhere at
//! all if the thread asked for asynchronous cancellation (ettercap's threads
//! do). libpcap's C frames have no cleanups, so an unwind may start anywhere
//! in them. Rust frames that own something can be unwound only from a call
//! that is declared able to unwind; an unwind from any other instruction, or
//! from a C function weir calls as one that cannot unwind (every libc call,
//! and std's own), aborts the process.
//!
//! The contract:
//! - While weir's code runs on a program's thread, cancellation is disabled
//!   ([`NoCancel`]); a cancel that comes meanwhile waits.
//! - It is acted on where libpcap would act on it: in a read's wait, which
//!   is ppoll with the caller's cancellation enabled, deferred
//!   ([`NoCancel::wait`]), and in the program's own callback, which runs with
//!   the caller's own state and type ([`NoCancel::callback`]). Both calls are
//!   declared `C-unwind`, so the unwind passes through weir's frames and
//!   drops what they hold (a read's borrow of its handle, for one).
//! - A program that disabled cancellation keeps it disabled throughout.

use std::cell::Cell;
use std::os::fd::RawFd;
use std::time::Duration;

// Declared here rather than taken from the libc crate, which declares them
// as functions that cannot unwind: cancellation unwinds out of these three.
extern "C-unwind" {
    fn pthread_setcancelstate(state: libc::c_int, oldstate: *mut libc::c_int) -> libc::c_int;
    fn pthread_setcanceltype(kind: libc::c_int, oldtype: *mut libc::c_int) -> libc::c_int;
    fn ppoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: *const libc::timespec, sigmask: *const libc::sigset_t) -> libc::c_int;
}

// <pthread.h>'s values (the libc crate lacks them).
const PTHREAD_CANCEL_ENABLE: libc::c_int = 0;
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;
const PTHREAD_CANCEL_DEFERRED: libc::c_int = 0;

thread_local! {
    /// The program's cancellation state when its thread entered weir (the
    /// outermost call; a callback may call weir again).
    static CALLER: Cell<Option<libc::c_int>> = const { Cell::new(None) };
}

/// Cancellation disabled from here to the drop, which restores the state it found.
pub struct NoCancel {
    old: libc::c_int,
    outermost: bool,
}

impl NoCancel {
    pub fn new() -> NoCancel {
        let mut old = PTHREAD_CANCEL_DISABLE;
        // SAFETY: a valid out-pointer; disabling never acts on a cancel, so this does not unwind.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
        let outermost = CALLER.get().is_none();
        if outermost {
            CALLER.set(Some(old));
        }
        NoCancel { old, outermost }
    }

    /// The program's state, as it entered weir.
    fn caller() -> libc::c_int {
        CALLER.get().unwrap_or(PTHREAD_CANCEL_DISABLE)
    }

    /// Run the program's callback with the program's cancellation state.
    pub fn callback<T>(&self, f: impl FnOnce() -> T) -> T {
        // SAFETY: restoring the caller's state may act on a pending asynchronous
        // cancel, which unwinds from this call (declared C-unwind) as it would
        // have from the callback's first instruction.
        unsafe { pthread_setcancelstate(NoCancel::caller(), std::ptr::null_mut()) };
        let r = f();
        // SAFETY: as in `new`.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, std::ptr::null_mut()) };
        r
    }

    /// Sleep until `fd` is readable, a signal arrives or `timeout` passes: a
    /// cancellation point if the program's cancellation is enabled.
    pub fn wait(&self, fd: RawFd, timeout: Duration) {
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
        if NoCancel::caller() != PTHREAD_CANCEL_ENABLE {
            // SAFETY: one valid pollfd and a valid timespec; no signal mask.
            unsafe { ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
            return;
        }
        let mut kind = PTHREAD_CANCEL_DEFERRED;
        // SAFETY: valid out-pointers. Deferred first, so that enabling does not
        // act on a pending cancel inside pthread_setcancelstate; ppoll acts on it.
        unsafe {
            pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &mut kind);
            pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, std::ptr::null_mut());
            ppoll(&mut pfd, 1, &ts, std::ptr::null());
            pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, std::ptr::null_mut());
            pthread_setcanceltype(kind, std::ptr::null_mut());
        }
    }
}

impl Drop for NoCancel {
    fn drop(&mut self) {
        if self.outermost {
            CALLER.set(None);
        }
        // SAFETY: as in `callback`: restoring an enabled asynchronous state
        // acts on a pending cancel here, on the way out of weir. During a
        // cancellation's own unwinding glibc acts on no further cancel.
        unsafe { pthread_setcancelstate(self.old, std::ptr::null_mut()) };
    }
}
