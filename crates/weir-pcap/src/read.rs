//! Reading a handle: one packet at a time from weir's reader, on the caller's
//! thread, as `pcap_loop`, `pcap_dispatch`, `pcap_next_ex` and `pcap_next` do.
//!
//! The contract:
//! - A read waits for packets where libpcap waits, in poll(2) (here: ppoll on
//!   the handle's ready descriptor), which is a cancellation point. A program
//!   that cancels its capture thread while it waits in a read (ettercap at the
//!   end of a file, iftop at exit) has it cancelled there, as with libpcap; the
//!   unwinding passes through weir's frames and releases what they held, so
//!   the handle can still be closed from another thread ([`crate::cancel`]).
//! - `pcap_breakloop` sets a flag and signals the ready descriptor, so a read
//!   waiting in poll wakes at once; a signal handler that calls it
//!   interrupts the poll anyway.
//! - `pcap_close` called while a read is in progress on the handle (by its
//!   callback, or by a signal handler that interrupted it, as ngrep and
//!   sipgrep do on SIGINT) breaks the read; the handle is closed when the
//!   outermost reading call returns ([`ReadCall`]). libpcap frees the handle
//!   at once and leaves the loop to run on freed memory; weir cannot, since
//!   the read in progress holds the reader.

use crate::cancel::NoCancel;
use crate::handle::{Handle, Kind, Stage, BREAK_CHECK};
use crate::types::*;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use weir::engine::Read;
use weir::profile::{Probe, Stage as Timed};

/// What one read found.
pub enum Got {
    Packet(PcapPkthdr, *const u8),
    /// Nothing within the timeout (live), or nothing now (nonblocking).
    Idle,
    /// The end of a file.
    End,
    Break,
    /// A created handle that was not activated: libpcap's
    /// `PCAP_ERROR_NOT_ACTIVATED`, with its message set.
    NotActivated,
    Error,
}

impl Got {
    /// The return code of `pcap_next_ex` (and, for all but a packet, of the loops).
    pub fn code(&self) -> i32 {
        match self {
            Got::Packet(..) => 1,
            Got::Idle => 0,
            Got::End | Got::Break => PCAP_ERROR_BREAK,
            Got::NotActivated => PCAP_ERROR_NOT_ACTIVATED,
            Got::Error => PCAP_ERROR,
        }
    }
}

/// One call of a reading function on a handle, from its start to its return
/// (or to its thread's cancellation, which drops this on the way out). The
/// outermost call on a handle whose `pcap_close` came during the read closes it.
pub struct ReadCall(*mut Handle);

impl ReadCall {
    /// Enter a reading function on `p` (NULL or a handle of ours).
    pub fn enter<'a>(p: *mut Handle) -> Option<(ReadCall, &'a Handle)> {
        // SAFETY: p is NULL or a handle this library returned; it stays
        // allocated until the last ReadCall on it is dropped (see Drop).
        let h = unsafe { p.as_ref() }?;
        // Relaxed: counted and read by this thread and by signal handlers
        // that interrupt it, which see its own earlier stores.
        h.reading.fetch_add(1, Ordering::Relaxed);
        Some((ReadCall(p), h))
    }
}

impl Drop for ReadCall {
    fn drop(&mut self) {
        // SAFETY: the handle stays allocated while a ReadCall on it lives.
        let h = unsafe { &*self.0 };
        // Relaxed: as in `enter`; a pcap_close deferred by a signal handler
        // of this thread stored `close_pending` before this load.
        let last = h.reading.fetch_sub(1, Ordering::Relaxed) == 1;
        if last && h.close_pending.load(Ordering::Relaxed) {
            // SAFETY: pcap_close was called on this Box-made handle while it
            // was read and left the freeing to the last read, which this is.
            drop(unsafe { Box::from_raw(self.0) });
        }
    }
}

/// `pcap_close`: free the handle now, or, during a read on it, break the read
/// and leave the freeing to it. Returns whether it was left. (From another
/// thread, a close that races with the read's return may find the read still
/// counted and leave the handle to a read that has already looked: it stays
/// allocated. libpcap frees a handle under a running read there.)
///
/// # Safety
/// `p` is a handle this library returned and did not close.
pub unsafe fn close_or_defer(p: *mut Handle) -> bool {
    // SAFETY: as the caller promises.
    let h = unsafe { &*p };
    // Relaxed: see ReadCall.
    if h.reading.load(Ordering::Relaxed) > 0 {
        h.close_pending.store(true, Ordering::Relaxed);
        h.request_break();
        return true;
    }
    false
}

impl Handle {
    /// `pcap_breakloop`: only a flag and a write to the ready descriptor,
    /// so it may be called from a signal handler or another thread.
    pub fn request_break(&self) {
        // Relaxed: a flag the reading thread polls; nothing else is published by it.
        self.break_loop.store(true, Ordering::Relaxed);
        if let Ok(fd) = self.ready_fd() {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to the handle's eventfd.
            // Through syscall(2), which unlike write(2) is no cancellation
            // point: a cancel pending on the caller's thread must not be acted
            // on here, in a frame that cannot be unwound (see crate::cancel).
            unsafe { libc::syscall(libc::SYS_write, fd.as_raw_fd(), (&one as *const u64).cast::<libc::c_void>(), 8usize) };
        }
    }

    /// Whether reading is over: the handle's packets reached their end, or
    /// capture failed for good.
    pub fn is_ended(&self) -> bool {
        self.state.try_borrow().is_ok_and(|st| matches!(st.stage, Stage::Ended))
    }

    /// Whether a break was asked for, clearing the request.
    fn take_break(&self) -> bool {
        // Relaxed, as in `request_break`. A plain load first: the swap is a
        // locked instruction, paid only when a break was asked for.
        self.break_loop.load(Ordering::Relaxed) && self.break_loop.swap(false, Ordering::Relaxed)
    }

    /// Read one packet. `wait` false: a live handle returns `Idle` at once when
    /// nothing is there (for `pcap_dispatch` after its first packet).
    pub fn read(&self, wait: bool, nc: &NoCancel, probe: &mut impl Probe) -> Got {
        probe.mark(Timed::PcapTake);
        let Ok(mut st) = self.state.try_borrow_mut() else {
            self.busy();
            return Got::Error;
        };
        if matches!(st.stage, Stage::Opened(_)) {
            let Stage::Opened(engine) = std::mem::replace(&mut st.stage, Stage::Ended) else { unreachable!() };
            match self.start_reading(*engine, &st) {
                Ok(r) => {
                    if self.stats.set(r.stats_reader()).is_ok() {
                        crate::metrics::serve(r.watch());
                    }
                    st.stage = Stage::Reading(Box::new(r));
                }
                Err(e) => {
                    self.set_error(&e);
                    return Got::Error;
                }
            }
        }
        if let Err(e) = self.follow_stream(&mut st) {
            self.set_error(&e);
            return Got::Error;
        }
        let st = &mut *st;
        let reader = match &mut st.stage {
            Stage::Reading(r) => r,
            Stage::Ended => return Got::End,
            Stage::Dead => {
                self.set_error("Packets aren't available from a pcap_open_dead pcap_t");
                return Got::Error;
            }
            Stage::Created(_) => {
                self.not_activated();
                return Got::NotActivated;
            }
            Stage::Opened(_) => unreachable!("started above"),
        };
        let fd = match self.ready_fd() {
            Ok(fd) => fd,
            Err(e) => {
                self.set_error(&format!("the descriptor reads wait on: {e}"));
                return Got::Error;
            }
        };
        // A file never times out: its reader waits for the next block as long as it takes.
        let limit = if self.kind == Kind::Savefile {
            None
        } else if !wait || st.nonblock {
            Some(Duration::ZERO)
        } else {
            st.timeout
        };
        // The clock is read only once a look found nothing: a packet that is
        // already there costs no clock read (as in weir's reader).
        let mut until: Option<Instant> = None;
        let mut first_look = true;
        loop {
            if self.take_break() {
                return Got::Break;
            }
            match reader.next(Duration::ZERO) {
                Read::Packet(p) => {
                    self.records.set(self.records.get() + 1);
                    if let Some(f) = &st.here {
                        probe.mark(Timed::PcapFilter);
                        if !f.matches(p.data(), p.wire_len()) {
                            // The engine counts it filtered, in the queue that captured it.
                            reader.reject_last();
                            probe.mark(Timed::PcapTake);
                            probe.record(Timed::PcapTake);
                            continue;
                        }
                    }
                    probe.mark(Timed::PcapDeliver);
                    let (sec, frac) = self.timeval(p.ts_ns(), p.ts_carry());
                    let hdr = PcapPkthdr {
                        tv_sec: sec as libc::time_t,
                        tv_usec: frac as libc::suseconds_t,
                        caplen: p.caplen(),
                        len: p.wire_len(),
                    };
                    probe.record(Timed::PcapDeliver);
                    return Got::Packet(hdr, p.data().as_ptr());
                }
                Read::Idle => {
                    // The reader re-armed the descriptor before it said Idle,
                    // draining it: a break signalled before then is seen here.
                    if self.take_break() {
                        return Got::Break;
                    }
                    // A program that polls the descriptor and then reads
                    // (softflowd: poll, then a blocking pcap_dispatch with no
                    // timeout) was told "readable" by a ring that came after
                    // its packets were taken. libpcap's descriptor is never
                    // readable for nothing, so such a program would wait for
                    // the next packet, perhaps forever: say nothing was read,
                    // as libpcap does when its timeout passes. Only for a
                    // program that has the descriptor: the reader's start
                    // leaves it readable (a poller's first read starts
                    // capture), so to one that never polled, such as
                    // urlsnarf (to_ms 0, reading while pcap_next_ex says 1),
                    // the first read would return 0 at once, where libpcap's waits.
                    if std::mem::take(&mut first_look) && self.kind == Kind::Live && self.fd_given.get() && reader.woken_for_nothing() {
                        return Got::Idle;
                    }
                    let mut sleep = BREAK_CHECK;
                    if let Some(l) = limit {
                        let u = *until.get_or_insert_with(|| Instant::now() + l);
                        let left = u.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Got::Idle;
                        }
                        sleep = sleep.min(left);
                    }
                    // A locality batch waiting for more is handed out by a look, not by a ring.
                    if let Some(t) = reader.select_timeout() {
                        sleep = sleep.min(t);
                    }
                    probe.mark(Timed::PcapWait);
                    nc.wait(fd.as_raw_fd(), sleep);
                    probe.mark(Timed::PcapTake);
                }
                Read::End => {
                    // Every capture thread has ended and been joined, and every
                    // packet was handed out: the counters are final and the
                    // first error is known. The reader itself (its pools, a
                    // mapped file) is torn down at pcap_close, not here: that
                    // takes unmapping tens of megabytes, and libpcap returns
                    // from the read that meets the end at once. ettercap
                    // cancels its reading thread, asynchronously, as soon as
                    // its callback has seen the last packet; a read that came
                    // back later than libpcap's let the cancel land in its
                    // own printing after pcap_loop, under its UI lock, and it
                    // hung at exit (see teardown_check.py).
                    let Stage::Reading(r) = std::mem::replace(&mut st.stage, Stage::Ended) else { unreachable!("reading") };
                    self.settings.report(&r.stats_reader().read());
                    let error = r.error().map(|e| crate::errors::read_error(e, self.trace.as_ref()));
                    st.retired = Some(r);
                    return match error {
                        Some(e) => {
                            self.set_error(&e);
                            Got::Error
                        }
                        None => Got::End,
                    };
                }
            }
        }
    }

    /// The timestamp as libpcap would hand it over: the seconds and fraction as
    /// the record wrote them (uncarried, signed for a pcap file), in the
    /// handle's precision.
    fn timeval(&self, ns: u64, carry: u32) -> (i64, i64) {
        const NS: u64 = 1_000_000_000;
        let want_nano = self.precision.get() == TSTAMP_PRECISION_NANO;
        match self.pcap_file_nano() {
            Some(file_nano) => {
                // The reader's sum wraps as libpcap's signed fields do: as an i64 it is exact.
                let ts = ns as i64;
                let sec = ts.div_euclid(NS as i64) - i64::from(carry as i32);
                let frac_ns = ts.wrapping_sub(sec.wrapping_mul(NS as i64));
                let raw = if file_nano { frac_ns } else { frac_ns / 1000 };
                // The fields are 32 bits in the file and signed in libpcap.
                let (sec, raw) = (i64::from(sec as u32 as i32), i64::from(raw as u32 as i32));
                let frac = match (file_nano, want_nano) {
                    (false, true) => raw * 1000,
                    (true, false) => raw / 1000,
                    _ => raw,
                };
                (sec, frac)
            }
            None => {
                let (sec, frac_ns) = (ns / NS, ns % NS);
                (sec as i64, if want_nano { frac_ns as i64 } else { (frac_ns / 1000) as i64 })
            }
        }
    }

    /// Keep the header of the packet `pcap_next_ex` hands out until the next read.
    pub fn keep_header(&self, hdr: PcapPkthdr) -> *mut PcapPkthdr {
        let slot = self.hdr.get();
        // SAFETY: only the reading thread writes the slot, between reads; the
        // caller holds the previous pointer only until this read, as libpcap says.
        unsafe { *slot = hdr };
        slot
    }
}
