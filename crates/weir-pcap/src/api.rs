//! The exported functions that open, close and read a handle, set its filter
//! and send on it (its getters and settings are [`crate::getters`]). Return
//! codes and the meaning of each call follow libpcap 1.10's documentation
//! (pcap(3PCAP) and the per-function pages) and, where that is silent,
//! libpcap 1.10.3 itself.

use crate::cancel::NoCancel;
use crate::handle::{Handle, Kind};
use crate::read::{close_or_defer, Got, ReadCall};
use crate::sys;
use crate::types::*;
use libc::{c_char, c_int, c_uint, FILE};
use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use weir::profile::{Probe, Stage as Timed};

/// The handle behind a `pcap_t *`, or `None` for NULL.
///
/// # Safety
/// `p` is NULL or a pointer this library returned and did not close.
pub(crate) unsafe fn handle<'a>(p: *mut Handle) -> Option<&'a Handle> {
    // SAFETY: as the caller promises.
    unsafe { p.as_ref() }
}

/// Copy `msg` into a caller's `PCAP_ERRBUF_SIZE` buffer, if it gave one.
pub(crate) fn put_error(errbuf: *mut c_char, msg: &str) {
    if errbuf.is_null() {
        return;
    }
    let n = msg.len().min(ERRBUF_SIZE - 1);
    // SAFETY: libpcap's contract: errbuf holds at least PCAP_ERRBUF_SIZE bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr().cast::<c_char>(), errbuf, n);
        *errbuf.add(n) = 0;
    }
}

/// A C string argument, or `None` for NULL or bytes that are not UTF-8.
pub(crate) fn text<'a>(s: *const c_char) -> Option<&'a str> {
    // SAFETY: a non-NULL argument is a NUL-terminated string by the API's contract.
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_str().ok()).flatten()
}

fn into_raw(h: Box<Handle>) -> *mut Handle {
    Box::into_raw(h)
}

fn opened(r: Result<Box<Handle>, String>, errbuf: *mut c_char) -> *mut Handle {
    match r {
        Ok(h) => into_raw(h),
        Err(e) => {
            put_error(errbuf, &e);
            std::ptr::null_mut()
        }
    }
}

/// The file to read (`None`: standard input, libpcap's "-"), any bytes a path may hold.
fn offline_path(fname: *const c_char) -> Result<Option<PathBuf>, String> {
    if fname.is_null() {
        return Err("A null pointer was supplied as the file name".into());
    }
    // SAFETY: a non-NULL file name is a NUL-terminated string by the API's contract.
    let bytes = unsafe { CStr::from_ptr(fname) }.to_bytes();
    Ok((bytes != b"-").then(|| PathBuf::from(std::ffi::OsStr::from_bytes(bytes))))
}

fn precision_ok(precision: c_uint) -> Result<u32, String> {
    match precision {
        TSTAMP_PRECISION_MICRO | TSTAMP_PRECISION_NANO => Ok(precision),
        other => Err(format!("unknown time stamp resolution {other}")),
    }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_open_offline_with_tstamp_precision(
    fname: *const c_char,
    precision: c_uint,
    errbuf: *mut c_char,
) -> *mut Handle {
    let _nc = NoCancel::new();
    let r = precision_ok(precision).and_then(|prec| offline_path(fname).and_then(|p| Handle::open_offline(p, prec)));
    opened(r, errbuf)
}

#[no_mangle]
pub extern "C-unwind" fn pcap_open_offline(fname: *const c_char, errbuf: *mut c_char) -> *mut Handle {
    pcap_open_offline_with_tstamp_precision(fname, TSTAMP_PRECISION_MICRO, errbuf)
}

/// Reads the stream behind `fp` through its descriptor.
#[no_mangle]
pub extern "C-unwind" fn pcap_fopen_offline_with_tstamp_precision(fp: *mut FILE, precision: c_uint, errbuf: *mut c_char) -> *mut Handle {
    let _nc = NoCancel::new();
    if fp.is_null() {
        put_error(errbuf, "pcap_fopen_offline: NULL stream");
        return std::ptr::null_mut();
    }
    // SAFETY: a non-NULL FILE* from the caller is an open stream.
    let fd = unsafe { libc::fileno(fp) };
    let r = precision_ok(precision).and_then(|prec| Handle::open_offline(Some(PathBuf::from(format!("/dev/fd/{fd}"))), prec));
    if let Ok(h) = &r {
        h.adopt_stream(fp);
    }
    opened(r, errbuf)
}

#[no_mangle]
pub extern "C-unwind" fn pcap_fopen_offline(fp: *mut FILE, errbuf: *mut c_char) -> *mut Handle {
    pcap_fopen_offline_with_tstamp_precision(fp, TSTAMP_PRECISION_MICRO, errbuf)
}

#[no_mangle]
pub extern "C-unwind" fn pcap_open_dead_with_tstamp_precision(linktype: c_int, snaplen: c_int, precision: c_uint) -> *mut Handle {
    let _nc = NoCancel::new();
    into_raw(Handle::dead(linktype, snaplen, precision))
}

#[no_mangle]
pub extern "C-unwind" fn pcap_open_dead(linktype: c_int, snaplen: c_int) -> *mut Handle {
    pcap_open_dead_with_tstamp_precision(linktype, snaplen, TSTAMP_PRECISION_MICRO)
}

#[no_mangle]
pub extern "C-unwind" fn pcap_create(device: *const c_char, errbuf: *mut c_char) -> *mut Handle {
    let _nc = NoCancel::new();
    let r = match text(device) {
        // libpcap's "any" device has no equivalent in weir's engine.
        None | Some("any") => Err("weir captures from one named interface; give its name (-i)".to_string()),
        Some(d) => Handle::create(d),
    };
    opened(r, errbuf)
}

#[no_mangle]
pub extern "C-unwind" fn pcap_activate(p: *mut Handle) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(PCAP_ERROR, Handle::activate)
}

#[no_mangle]
pub extern "C-unwind" fn pcap_open_live(
    device: *const c_char,
    snaplen: c_int,
    promisc: c_int,
    to_ms: c_int,
    errbuf: *mut c_char,
) -> *mut Handle {
    let _nc = NoCancel::new();
    let p = pcap_create(device, errbuf);
    // SAFETY: p is NULL or the handle just made.
    let Some(h) = (unsafe { handle(p) }) else { return p };
    h.configure(|c| {
        c.snaplen = snaplen;
        c.promisc = promisc != 0;
        c.timeout_ms = to_ms;
    });
    let rc = h.activate();
    if rc < 0 {
        // SAFETY: the errbuf is the handle's own, NUL-terminated.
        let msg = unsafe { CStr::from_ptr(h.errbuf()) }.to_string_lossy().into_owned();
        put_error(errbuf, &msg);
        pcap_close(p);
        return std::ptr::null_mut();
    }
    p
}

#[no_mangle]
pub extern "C-unwind" fn pcap_close(p: *mut Handle) {
    let _nc = NoCancel::new();
    // SAFETY: p is NULL or a handle of ours, closed once by the caller, as libpcap requires.
    if p.is_null() || unsafe { close_or_defer(p) } {
        return;
    }
    // SAFETY: p came from Box::into_raw here, and no read is using it.
    drop(unsafe { Box::from_raw(p) });
}

/// The version string, naming both weir and the libpcap it delegates to.
#[no_mangle]
pub extern "C-unwind" fn pcap_lib_version() -> *const c_char {
    static VERSION: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    VERSION
        .get_or_init(|| {
            let under = weir::filter::libpcap::Libpcap::system().map(|l| l.version()).unwrap_or_else(|_| "no system libpcap".into());
            std::ffi::CString::new(format!("weir {} (libpcap API; filters compiled by {under})", env!("CARGO_PKG_VERSION")))
                .unwrap_or_default()
        })
        .as_ptr()
}

#[no_mangle]
pub extern "C-unwind" fn pcap_init(_opts: c_uint, _errbuf: *mut c_char) -> c_int {
    0
}

// ---- reading ----

/// Run a reading function's body with the calling thread's stage timer when
/// the process is profiled ([`crate::profile`]), untimed otherwise. A body
/// that reached the end of the handle's packets ends the thread's reads.
macro_rules! timed {
    ($h:expr, |$probe:ident| $body:expr) => {
        match crate::profile::with_timer(|$probe| $body) {
            Some(rc) => {
                if $h.is_ended() {
                    crate::profile::end_reads();
                }
                rc
            }
            None => {
                let $probe = &mut ();
                $body
            }
        }
    };
}

#[no_mangle]
pub extern "C-unwind" fn pcap_loop(p: *mut Handle, cnt: c_int, callback: Callback, user: *mut u8) -> c_int {
    let nc = NoCancel::new();
    let Some((_call, h)) = ReadCall::enter(p) else { return PCAP_ERROR };
    let Some(cb) = callback else {
        h.set_error("pcap_loop: NULL callback");
        return PCAP_ERROR;
    };
    timed!(h, |probe| loop_on(h, cnt, cb, user, &nc, probe))
}

/// Deliver each packet read to the program's callback, marking its part: the
/// callback is the program's; calling it and coming back is the shim's.
fn deliver(nc: &NoCancel, probe: &mut impl Probe, call: impl FnOnce()) {
    nc.callback(|| {
        probe.mark(Timed::Program);
        call();
        probe.mark(Timed::PcapDeliver);
    });
}

fn loop_on(h: &Handle, cnt: c_int, cb: CallbackFn, user: *mut u8, nc: &NoCancel, probe: &mut impl Probe) -> c_int {
    let mut n = 0;
    loop {
        match h.read(true, nc, probe) {
            Got::Packet(hdr, data) => {
                // SAFETY: the caller's callback, with a header and data valid for the call.
                deliver(nc, probe, || unsafe { cb(user, &hdr, data) });
                n += 1;
                if cnt > 0 && n >= cnt {
                    return 0;
                }
            }
            Got::Idle => {}
            Got::End => return 0,
            other => return other.code(),
        }
    }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_dispatch(p: *mut Handle, cnt: c_int, callback: Callback, user: *mut u8) -> c_int {
    let nc = NoCancel::new();
    let Some((_call, h)) = ReadCall::enter(p) else { return PCAP_ERROR };
    let Some(cb) = callback else {
        h.set_error("pcap_dispatch: NULL callback");
        return PCAP_ERROR;
    };
    timed!(h, |probe| dispatch_on(h, cnt, cb, user, &nc, probe))
}

fn dispatch_on(h: &Handle, cnt: c_int, cb: CallbackFn, user: *mut u8, nc: &NoCancel, probe: &mut impl Probe) -> c_int {
    let mut n = 0;
    loop {
        match h.read(n == 0, nc, probe) {
            Got::Packet(hdr, data) => {
                // SAFETY: as in pcap_loop.
                deliver(nc, probe, || unsafe { cb(user, &hdr, data) });
                n += 1;
                if cnt > 0 && n >= cnt {
                    return n;
                }
            }
            Got::Idle | Got::End => return n,
            Got::Break if n > 0 => return n,
            other => return other.code(),
        }
    }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_next_ex(p: *mut Handle, header: *mut *mut PcapPkthdr, data: *mut *const u8) -> c_int {
    let nc = NoCancel::new();
    let Some((_call, h)) = ReadCall::enter(p) else { return PCAP_ERROR };
    if header.is_null() || data.is_null() {
        h.set_error("pcap_next_ex: NULL header or data pointer");
        return PCAP_ERROR;
    }
    timed!(h, |probe| next_on(h, header, data, &nc, probe))
}

/// `pcap_next_ex`'s read: from its return to the next read is the program's own time.
fn next_on(h: &Handle, header: *mut *mut PcapPkthdr, data: *mut *const u8, nc: &NoCancel, probe: &mut impl Probe) -> c_int {
    match h.read(true, nc, probe) {
        Got::Packet(hdr, bytes) => {
            let kept = h.keep_header(hdr);
            // SAFETY: both out-pointers were checked non-NULL; they are the caller's.
            unsafe {
                *header = kept;
                *data = bytes;
            }
            probe.mark(Timed::Program);
            1
        }
        other => other.code(),
    }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_next(p: *mut Handle, header: *mut PcapPkthdr) -> *const u8 {
    // Entered here too: a close during the read must not free the kept
    // header before it is copied out.
    let _nc = NoCancel::new();
    let Some((_call, _)) = ReadCall::enter(p) else { return std::ptr::null() };
    let mut hdr: *mut PcapPkthdr = std::ptr::null_mut();
    let mut data: *const u8 = std::ptr::null();
    if pcap_next_ex(p, &mut hdr, &mut data) != 1 || header.is_null() {
        return std::ptr::null();
    }
    // SAFETY: hdr points at the handle's kept header; header is the caller's.
    unsafe { *header = *hdr };
    data
}

/// Only a flag and a descriptor write, so it may be called from a signal
/// handler or another thread (see [`crate::read`]).
#[no_mangle]
pub extern "C-unwind" fn pcap_breakloop(p: *mut Handle) {
    // SAFETY: p is a handle of ours.
    if let Some(h) = unsafe { handle(p) } {
        h.request_break();
    }
}

// ---- filters ----

#[no_mangle]
pub extern "C-unwind" fn pcap_compile(p: *mut Handle, prog: *mut BpfProgram, expr: *const c_char, optimize: c_int, netmask: u32) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if !h.is_activated() {
        h.set_error("not-yet-activated pcap_t passed to pcap_compile");
        return PCAP_ERROR;
    }
    let sys = match sys::system() {
        Ok(s) => s,
        Err(e) => {
            h.set_error(&e);
            return PCAP_ERROR;
        }
    };
    let r = h.with_dead(|dead| {
        // SAFETY: the system pcap_compile with its own dead handle and the caller's arguments.
        let rc = unsafe { (sys.compile)(dead.p, prog, expr, optimize, netmask) };
        if rc < 0 {
            Err(dead.error())
        } else {
            Ok(rc)
        }
    });
    match r {
        Ok(Ok(rc)) => rc,
        Ok(Err(e)) | Err(e) => {
            h.set_error(&e);
            PCAP_ERROR
        }
    }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_compile_nopcap(
    snaplen: c_int,
    linktype: c_int,
    prog: *mut BpfProgram,
    expr: *const c_char,
    optimize: c_int,
    netmask: u32,
) -> c_int {
    let p = pcap_open_dead(linktype, snaplen);
    let rc = pcap_compile(p, prog, expr, optimize, netmask);
    pcap_close(p);
    rc
}

#[no_mangle]
pub extern "C-unwind" fn pcap_setfilter(p: *mut Handle, prog: *mut BpfProgram) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    match h.kind {
        Kind::Dead => {
            h.set_error("A filter cannot be set on a pcap_open_dead pcap_t");
            return PCAP_ERROR;
        }
        Kind::Live if !h.is_activated() => return h.not_activated(),
        _ => {}
    }
    // SAFETY: a non-NULL program is the caller's `struct bpf_program`.
    let insns = match unsafe { prog.as_ref() } {
        Some(prog) if !prog.bf_insns.is_null() => {
            // SAFETY: pcap_compile filled bf_insns with bf_len instructions, checked non-NULL.
            unsafe { std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize) }
        }
        _ => {
            h.set_error("setfilter: no filter program");
            return PCAP_ERROR;
        }
    };
    h.set_filter(insns)
}

// ---- sending ----

/// Send a frame out of a live handle's interface through a raw AF_PACKET socket.
fn send(h: &Handle, buf: *const u8, size: usize) -> Result<usize, String> {
    let Some(dev) = &h.device else { return Err("sending needs a live capture handle".into()) };
    if buf.is_null() {
        return Err("NULL packet".into());
    }
    let name = std::ffi::CString::new(dev.as_str()).map_err(|_| "bad device name".to_string())?;
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(format!("{dev}: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a new socket, closed below on every path.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: all-zero is a valid sockaddr_ll, filled below.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: fd is ours; buf holds size bytes by the caller's contract; addr is a valid sockaddr_ll.
    let sent = unsafe {
        libc::sendto(
            fd,
            buf.cast(),
            size,
            0,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: fd is ours, closed once.
    unsafe { libc::close(fd) };
    if sent < 0 {
        return Err(format!("send: {err}"));
    }
    Ok(sent as usize)
}

/// libpcap's answer to sending on a handle that cannot send, if `h` is one.
fn cannot_send(h: &Handle) -> Option<c_int> {
    let msg = match h.kind {
        Kind::Dead => "Packets can't be sent on a pcap_open_dead pcap_t",
        Kind::Savefile => "Sending packets isn't supported on savefiles",
        Kind::Live if !h.is_activated() => return Some(h.not_activated()),
        Kind::Live => return None,
    };
    h.set_error(msg);
    Some(PCAP_ERROR)
}

#[no_mangle]
pub extern "C-unwind" fn pcap_inject(p: *mut Handle, buf: *const libc::c_void, size: usize) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if size == 0 || size > c_int::MAX as usize {
        h.set_error(&format!("The number of bytes to be injected must be between 1 and {}", c_int::MAX));
        return PCAP_ERROR;
    }
    if let Some(rc) = cannot_send(h) {
        return rc;
    }
    match send(h, buf.cast(), size) {
        Ok(n) => n as c_int,
        Err(e) => {
            h.set_error(&e);
            PCAP_ERROR
        }
    }
}

/// 0 unless sending fails with PCAP_ERROR: libpcap lets its other codes (a
/// handle not activated) through as success, and so does weir.
#[no_mangle]
pub extern "C-unwind" fn pcap_sendpacket(p: *mut Handle, buf: *const u8, size: c_int) -> c_int {
    let _nc = NoCancel::new();
    if size <= 0 {
        // SAFETY: p is a handle of ours.
        if let Some(h) = unsafe { handle(p) } {
            h.set_error("The number of bytes to be sent must be positive");
        }
        return PCAP_ERROR;
    }
    match pcap_inject(p, buf.cast(), size as usize) {
        PCAP_ERROR => PCAP_ERROR,
        _ => 0,
    }
}
