//! The stream handler behind the C callbacks, and the `weir_stream_t` a
//! callback is given.
//!
//! Contract: a `weir_stream_t *` is valid during the callback it was given
//! to, on that callback's thread, and nowhere else. A program may keep one
//! past its callback anyway (and call `weir_stream_info` after
//! `weir_streams_run` returned): each worker thread knows the one stream
//! pointer it has handed out and not yet seen returned (`Current`), and
//! the `weir_stream_*` functions use a pointer only when it is that one
//! ([`is_current`]), answering -1 otherwise, as the header promises, never
//! reading the worker's stack frame that is gone. A pointer kept from an
//! earlier callback of the same worker may have the same address as the
//! current one (both are that worker's stack slot); it then names the
//! stream of the current callback, which is valid memory, never a stale one.

use std::cell::Cell;
use std::ffi::c_void;
use weir::stream::{CloseReason, Direction, Mode, Piece, Stream, StreamCtl, StreamHandler};

/// `weir_stream_t`: what C sees of a stream, an opaque type. A pointer to it
/// is really a pointer to a [`StreamRef`] on the calling worker's stack.
#[repr(C)]
pub struct CStream {
    _opaque: [u8; 0],
}

/// A pointer the application gave (a callback's `user`, a stream's user slot).
#[derive(Copy, Clone, Debug)]
pub struct UserPtr(pub *mut c_void);

// SAFETY: weir never reads or writes through the pointer; it only hands it
// back to the application's callbacks, on the worker threads. The header
// (weir_stream.h, "Threading") makes the application responsible for that:
// callbacks and their `user` pointers must be safe to use from several
// threads at once, and a stream's slot is only ever used on its own queue's
// worker, one callback at a time.
unsafe impl Send for UserPtr {}

impl UserPtr {
    pub const NULL: UserPtr = UserPtr(std::ptr::null_mut());
}

/// `weir_created_cb`.
pub type CreatedCb = unsafe extern "C" fn(*mut CStream, *mut c_void);
/// `weir_data_cb`.
pub type DataCb = unsafe extern "C" fn(*mut CStream, *const u8, usize, u64, *mut c_void);
/// `weir_closed_cb`.
pub type ClosedCb = unsafe extern "C" fn(*mut CStream, *mut c_void);

/// The application's callbacks, each with its `user` pointer.
#[derive(Copy, Clone, Default)]
pub struct Callbacks {
    pub created: Option<(CreatedCb, UserPtr)>,
    pub data: Option<(DataCb, UserPtr)>,
    pub closed: Option<(ClosedCb, UserPtr)>,
}

/// A stream during one callback: steerable (created, data) or closed.
pub enum Access<'a, 'b> {
    Ctl(&'a mut StreamCtl<'b>),
    Closed(&'a Stream),
}

/// What a `weir_stream_t *` points to, for the length of one callback.
pub struct StreamRef<'a, 'b> {
    pub access: Access<'a, 'b>,
    /// The stream's user slot (the handler's per-stream state).
    pub user: &'a mut UserPtr,
}

impl<'b> StreamRef<'_, 'b> {
    pub fn stream(&self) -> &Stream {
        match &self.access {
            Access::Ctl(c) => c.stream(),
            Access::Closed(s) => s,
        }
    }

    pub fn ctl(&mut self) -> Option<&mut StreamCtl<'b>> {
        match &mut self.access {
            Access::Ctl(c) => Some(&mut **c),
            Access::Closed(_) => None,
        }
    }
}

thread_local! {
    /// The stream pointer of the callback running on this thread; null outside one.
    static CURRENT: Cell<*mut CStream> = const { Cell::new(std::ptr::null_mut()) };
}

/// Marks `s` as this thread's current stream pointer for as long as it lives
/// (one callback), and puts back what was there (null) when dropped, also
/// when a panic unwinds through it.
struct Current(*mut CStream);

impl Current {
    fn enter(s: *mut CStream) -> Current {
        Current(CURRENT.with(|c| c.replace(s)))
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// Whether `s` is the stream pointer of the callback running on this thread:
/// then it points to a live [`StreamRef`]; otherwise it must not be read.
pub fn is_current(s: *mut CStream) -> bool {
    !s.is_null() && CURRENT.with(|c| c.get()) == s
}

/// Call `f` with the pointer C sees for `r`, marked current for the call.
fn hand_out(r: &mut StreamRef<'_, '_>, f: impl FnOnce(*mut CStream)) {
    let s: *mut CStream = std::ptr::from_mut(r).cast();
    let _current = Current::enter(s);
    f(s);
}

/// One queue's handler: calls the C callbacks.
pub struct CHandler {
    pub cbs: Callbacks,
}

impl StreamHandler for CHandler {
    type State = UserPtr;

    fn created(&mut self, ctl: &mut StreamCtl<'_>) -> UserPtr {
        let mut user = UserPtr::NULL;
        if let Some((cb, u)) = self.cbs.created {
            let mut r = StreamRef { access: Access::Ctl(ctl), user: &mut user };
            // SAFETY: the callback was given as a `weir_created_cb`; the stream
            // pointer is valid for the call and only used while current (see
            // the module doc), and `u` is the application's own pointer, whose
            // use across threads the application answers for (see UserPtr).
            hand_out(&mut r, |s| unsafe { cb(s, u.0) });
        }
        user
    }

    fn data(&mut self, ctl: &mut StreamCtl<'_>, user: &mut UserPtr, piece: &Piece<'_>) {
        if let Some((cb, u)) = self.cbs.data {
            let mut r = StreamRef { access: Access::Ctl(ctl), user };
            // SAFETY: as in `created`; `data` points to `len` bytes that live
            // for the call.
            hand_out(&mut r, |s| unsafe { cb(s, piece.data.as_ptr(), piece.data.len(), piece.offset, u.0) });
        }
    }

    fn closed(&mut self, stream: &Stream, mut user: UserPtr) {
        if let Some((cb, u)) = self.cbs.closed {
            let mut r = StreamRef { access: Access::Closed(stream), user: &mut user };
            // SAFETY: as in `created`.
            hand_out(&mut r, |s| unsafe { cb(s, u.0) });
        }
    }
}

/// `weir_stream_info_t`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct StreamInfo {
    pub family: i32,
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub protocol: u8,
    pub direction: i32,
    pub queue: u32,
    pub first_ns: u64,
    pub last_ns: u64,
    pub packets: u64,
    pub bytes: u64,
    pub delivered: u64,
    pub gap: u64,
    pub duplicate: u64,
    pub discarded: u64,
    pub dropped: u64,
    pub refused: u64,
    pub cutoff: i64,
    pub priority: i32,
    pub mode: i32,
    pub close_reason: i32,
}

fn address(a: std::net::IpAddr) -> (i32, [u8; 16]) {
    let mut out = [0u8; 16];
    match a {
        std::net::IpAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.octets());
            (4, out)
        }
        std::net::IpAddr::V6(v6) => (6, v6.octets()),
    }
}

/// `enum weir_mode`'s value of a mode.
pub fn mode_number(m: Mode) -> i32 {
    match m {
        Mode::Packets => 0,
        Mode::TcpFast => 1,
        Mode::TcpStrict => 2,
    }
}

impl StreamInfo {
    pub fn of(s: &Stream) -> StreamInfo {
        let (family, src) = address(s.src);
        let (_, dst) = address(s.dst);
        StreamInfo {
            family,
            src,
            dst,
            sport: s.sport,
            dport: s.dport,
            protocol: s.proto,
            direction: match s.direction {
                Direction::Initiator => 0,
                Direction::Responder => 1,
            },
            queue: u32::from(s.queue.0),
            first_ns: s.first_ns,
            last_ns: s.last_ns,
            packets: s.packets,
            bytes: s.bytes,
            delivered: s.delivered,
            gap: s.gap,
            duplicate: s.duplicate,
            discarded: s.discarded,
            dropped: s.dropped,
            refused: s.refused,
            cutoff: s.cutoff.map_or(-1, |c| i64::try_from(c).unwrap_or(i64::MAX)),
            priority: i32::from(s.priority),
            mode: mode_number(s.mode),
            close_reason: match s.closed {
                None => 0,
                Some(CloseReason::Fin) => 1,
                Some(CloseReason::Rst) => 2,
                Some(CloseReason::Idle) => 3,
                Some(CloseReason::Evicted) => 4,
                Some(CloseReason::EndOfInput) => 5,
                Some(CloseReason::Reused) => 6,
            },
        }
    }
}
