//! The exported functions that open, configure and read a handle. Return codes
//! and the meaning of each call follow libpcap 1.10's documentation
//! (pcap(3PCAP) and the per-function pages).

use crate::handle::{Got, Handle};
use crate::sys;
use crate::types::*;
use libc::{c_char, c_int, c_uint, FILE};
use std::ffi::CStr;
use std::path::PathBuf;

/// The handle behind a `pcap_t *`, or `None` for NULL.
///
/// # Safety
/// `p` is NULL or a pointer this library returned and did not close.
unsafe fn handle<'a>(p: *mut Handle) -> Option<&'a Handle> {
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

fn offline_path(fname: *const c_char) -> Result<Option<PathBuf>, String> {
    match text(fname) {
        None => Err("no file name given (NULL or not UTF-8)".into()),
        Some("-") => Ok(None),
        Some(f) => Ok(Some(PathBuf::from(f))),
    }
}

fn precision_ok(precision: c_uint) -> Result<u32, String> {
    match precision {
        TSTAMP_PRECISION_MICRO | TSTAMP_PRECISION_NANO => Ok(precision),
        other => Err(format!("unknown time stamp precision {other}")),
    }
}

#[no_mangle]
pub extern "C" fn pcap_open_offline_with_tstamp_precision(fname: *const c_char, precision: c_uint, errbuf: *mut c_char) -> *mut Handle {
    let r = precision_ok(precision).and_then(|prec| offline_path(fname).and_then(|p| Handle::open_offline(p, prec)));
    opened(r, errbuf)
}

#[no_mangle]
pub extern "C" fn pcap_open_offline(fname: *const c_char, errbuf: *mut c_char) -> *mut Handle {
    pcap_open_offline_with_tstamp_precision(fname, TSTAMP_PRECISION_MICRO, errbuf)
}

/// Reads the stream behind `fp` through its descriptor.
#[no_mangle]
pub extern "C" fn pcap_fopen_offline_with_tstamp_precision(fp: *mut FILE, precision: c_uint, errbuf: *mut c_char) -> *mut Handle {
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
pub extern "C" fn pcap_fopen_offline(fp: *mut FILE, errbuf: *mut c_char) -> *mut Handle {
    pcap_fopen_offline_with_tstamp_precision(fp, TSTAMP_PRECISION_MICRO, errbuf)
}

#[no_mangle]
pub extern "C" fn pcap_open_dead_with_tstamp_precision(linktype: c_int, snaplen: c_int, precision: c_uint) -> *mut Handle {
    into_raw(Handle::dead(linktype, snaplen, precision))
}

#[no_mangle]
pub extern "C" fn pcap_open_dead(linktype: c_int, snaplen: c_int) -> *mut Handle {
    pcap_open_dead_with_tstamp_precision(linktype, snaplen, TSTAMP_PRECISION_MICRO)
}

#[no_mangle]
pub extern "C" fn pcap_create(device: *const c_char, errbuf: *mut c_char) -> *mut Handle {
    let r = match text(device) {
        // libpcap's "any" device has no equivalent in weir's engine.
        None | Some("any") => Err("weir captures from one named interface; give its name (-i)".to_string()),
        Some(d) => Handle::create(d),
    };
    opened(r, errbuf)
}

#[no_mangle]
pub extern "C" fn pcap_activate(p: *mut Handle) -> c_int {
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(PCAP_ERROR, Handle::activate)
}

#[no_mangle]
pub extern "C" fn pcap_open_live(device: *const c_char, snaplen: c_int, promisc: c_int, to_ms: c_int, errbuf: *mut c_char) -> *mut Handle {
    let p = pcap_create(device, errbuf);
    // SAFETY: p is NULL or the handle just made.
    let Some(h) = (unsafe { handle(p) }) else { return p };
    h.configure(|c| {
        c.snaplen = snaplen;
        c.promisc = promisc != 0;
        c.timeout_ms = to_ms;
    });
    h.snaplen.set(snaplen);
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
pub extern "C" fn pcap_close(p: *mut Handle) {
    if !p.is_null() {
        // SAFETY: p came from Box::into_raw here and is closed once, as libpcap requires.
        drop(unsafe { Box::from_raw(p) });
    }
}

macro_rules! setter {
    ($name:ident($arg:ident: $t:ty) => |$c:ident| $body:expr) => {
        #[no_mangle]
        pub extern "C" fn $name(p: *mut Handle, $arg: $t) -> c_int {
            // SAFETY: p is a handle of ours.
            unsafe { handle(p) }.map_or(PCAP_ERROR, |h| h.configure(|$c| $body))
        }
    };
}

setter!(pcap_set_promisc(on: c_int) => |c| c.promisc = on != 0);
setter!(pcap_set_rfmon(on: c_int) => |c| c.rfmon = on != 0);
setter!(pcap_set_timeout(ms: c_int) => |c| c.timeout_ms = ms);
setter!(pcap_set_buffer_size(bytes: c_int) => |c| c.buffer_size = bytes);
setter!(pcap_set_immediate_mode(on: c_int) => |c| c.immediate = on != 0);

#[no_mangle]
pub extern "C" fn pcap_set_snaplen(p: *mut Handle, snaplen: c_int) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    let rc = h.configure(|c| c.snaplen = snaplen);
    if rc == 0 {
        h.snaplen.set(if snaplen <= 0 || snaplen > 262_144 { 262_144 } else { snaplen });
    }
    rc
}

#[no_mangle]
pub extern "C" fn pcap_can_set_rfmon(p: *mut Handle) -> c_int {
    // SAFETY: p is a handle of ours.
    match unsafe { handle(p) } {
        Some(h) if h.is_activated() => PCAP_ERROR_ACTIVATED,
        Some(_) => 0,
        None => PCAP_ERROR,
    }
}

#[no_mangle]
pub extern "C" fn pcap_set_tstamp_type(p: *mut Handle, kind: c_int) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if h.is_activated() {
        return PCAP_ERROR_ACTIVATED;
    }
    // The kernel's time stamp is the only one weir offers.
    if kind == TSTAMP_HOST {
        0
    } else {
        PCAP_WARNING_TSTAMP_TYPE_NOTSUP
    }
}

#[no_mangle]
pub extern "C" fn pcap_set_tstamp_precision(p: *mut Handle, precision: c_int) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if h.is_activated() {
        return PCAP_ERROR_ACTIVATED;
    }
    match precision_ok(precision as c_uint) {
        Ok(v) => {
            h.precision.set(v);
            0
        }
        Err(_) => PCAP_ERROR_TSTAMP_PRECISION_NOTSUP,
    }
}

#[no_mangle]
pub extern "C" fn pcap_get_tstamp_precision(p: *mut Handle) -> c_int {
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(PCAP_ERROR, |h| h.precision.get() as c_int)
}

/// A one-element array from `malloc`, freed by the matching `pcap_free_*`.
fn malloc_one(value: c_int, out: *mut *mut c_int) -> c_int {
    if out.is_null() {
        return PCAP_ERROR;
    }
    // SAFETY: malloc of one int; checked for NULL before use; out is the caller's.
    unsafe {
        let a = libc::malloc(std::mem::size_of::<c_int>()).cast::<c_int>();
        if a.is_null() {
            return PCAP_ERROR;
        }
        *a = value;
        *out = a;
    }
    1
}

#[no_mangle]
pub extern "C" fn pcap_list_tstamp_types(p: *mut Handle, out: *mut *mut c_int) -> c_int {
    // SAFETY: p is a handle of ours.
    if unsafe { handle(p) }.is_none() {
        return PCAP_ERROR;
    }
    malloc_one(TSTAMP_HOST, out)
}

#[no_mangle]
pub extern "C" fn pcap_free_tstamp_types(list: *mut c_int) {
    // SAFETY: the list came from malloc in pcap_list_tstamp_types (or is NULL).
    unsafe { libc::free(list.cast()) }
}

/// `f` of an activated handle; libpcap's answers before activation or for NULL.
fn activated(p: *mut Handle, f: impl FnOnce(&Handle) -> c_int) -> c_int {
    // SAFETY: p is a handle of ours.
    match unsafe { handle(p) } {
        Some(h) if !h.is_activated() => PCAP_ERROR_NOT_ACTIVATED,
        Some(h) => f(h),
        None => PCAP_ERROR,
    }
}

#[no_mangle]
pub extern "C" fn pcap_list_datalinks(p: *mut Handle, out: *mut *mut c_int) -> c_int {
    activated(p, |h| malloc_one(h.dlt.get(), out))
}

#[no_mangle]
pub extern "C" fn pcap_free_datalinks(list: *mut c_int) {
    // SAFETY: the list came from malloc in pcap_list_datalinks (or is NULL).
    unsafe { libc::free(list.cast()) }
}

#[no_mangle]
pub extern "C" fn pcap_set_datalink(p: *mut Handle, dlt: c_int) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if dlt == h.dlt.get() {
        return 0;
    }
    // libpcap's words: a handle offers the one link type its source has.
    let msg = match text(crate::delegate::pcap_datalink_val_to_name(dlt)) {
        Some(name) => format!("{name} is not one of the DLTs supported by this device"),
        None => format!("DLT {dlt} is not one of the DLTs supported by this device"),
    };
    h.set_error(&msg);
    PCAP_ERROR
}

#[no_mangle]
pub extern "C" fn pcap_setdirection(p: *mut Handle, direction: c_int) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if direction == PCAP_D_INOUT {
        return 0;
    }
    h.set_error("capturing only one direction is not supported by weir; capture both and filter with 'inbound'/'outbound'");
    PCAP_ERROR
}

#[no_mangle]
pub extern "C" fn pcap_datalink(p: *mut Handle) -> c_int {
    activated(p, |h| h.dlt.get())
}

#[no_mangle]
pub extern "C" fn pcap_datalink_ext(p: *mut Handle) -> c_int {
    pcap_datalink(p)
}

#[no_mangle]
pub extern "C" fn pcap_snapshot(p: *mut Handle) -> c_int {
    activated(p, |h| h.snaplen.get())
}

#[no_mangle]
pub extern "C" fn pcap_bufsize(p: *mut Handle) -> c_int {
    pcap_snapshot(p)
}

/// weir hands packets over in host order, whatever the file's byte order was.
#[no_mangle]
pub extern "C" fn pcap_is_swapped(_p: *mut Handle) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn pcap_major_version(_p: *mut Handle) -> c_int {
    2
}

#[no_mangle]
pub extern "C" fn pcap_minor_version(_p: *mut Handle) -> c_int {
    4
}

/// weir reads the file itself; there is no stdio stream to hand out.
#[no_mangle]
pub extern "C" fn pcap_file(p: *mut Handle) -> *mut FILE {
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(std::ptr::null_mut(), Handle::file)
}

#[no_mangle]
pub extern "C" fn pcap_geterr(p: *mut Handle) -> *mut c_char {
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(std::ptr::null_mut(), Handle::errbuf)
}

#[no_mangle]
pub extern "C" fn pcap_perror(p: *mut Handle, prefix: *const c_char) {
    let msg = text(pcap_geterr(p)).unwrap_or("");
    match text(prefix) {
        Some(pre) => eprintln!("{pre}: {msg}"),
        None => eprintln!("{msg}"),
    }
}

/// The version string, naming both weir and the libpcap it delegates to.
#[no_mangle]
pub extern "C" fn pcap_lib_version() -> *const c_char {
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
pub extern "C" fn pcap_init(_opts: c_uint, _errbuf: *mut c_char) -> c_int {
    0
}

// ---- reading ----

#[no_mangle]
pub extern "C" fn pcap_loop(p: *mut Handle, cnt: c_int, callback: Callback, user: *mut u8) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    let Some(cb) = callback else {
        h.set_error("pcap_loop: NULL callback");
        return PCAP_ERROR;
    };
    let mut n = 0;
    loop {
        match h.read(true) {
            Got::Packet(hdr, data) => {
                // SAFETY: the caller's callback, with a header and data valid for the call.
                unsafe { cb(user, &hdr, data) };
                n += 1;
                if cnt > 0 && n >= cnt {
                    return 0;
                }
            }
            Got::Idle => {}
            Got::End => return 0,
            Got::Break => return PCAP_ERROR_BREAK,
            Got::Error => return PCAP_ERROR,
        }
    }
}

#[no_mangle]
pub extern "C" fn pcap_dispatch(p: *mut Handle, cnt: c_int, callback: Callback, user: *mut u8) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    let Some(cb) = callback else {
        h.set_error("pcap_dispatch: NULL callback");
        return PCAP_ERROR;
    };
    let mut n = 0;
    loop {
        match h.read(n == 0) {
            Got::Packet(hdr, data) => {
                // SAFETY: as in pcap_loop.
                unsafe { cb(user, &hdr, data) };
                n += 1;
                if cnt > 0 && n >= cnt {
                    return n;
                }
            }
            Got::Idle | Got::End => return n,
            Got::Break => return if n == 0 { PCAP_ERROR_BREAK } else { n },
            Got::Error => return PCAP_ERROR,
        }
    }
}

#[no_mangle]
pub extern "C" fn pcap_next_ex(p: *mut Handle, header: *mut *mut PcapPkthdr, data: *mut *const u8) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if header.is_null() || data.is_null() {
        h.set_error("pcap_next_ex: NULL header or data pointer");
        return PCAP_ERROR;
    }
    match h.read(true) {
        Got::Packet(hdr, bytes) => {
            let kept = h.keep_header(hdr);
            // SAFETY: both out-pointers were checked non-NULL; they are the caller's.
            unsafe {
                *header = kept;
                *data = bytes;
            }
            1
        }
        Got::Idle => 0,
        Got::End | Got::Break => PCAP_ERROR_BREAK,
        Got::Error => PCAP_ERROR,
    }
}

#[no_mangle]
pub extern "C" fn pcap_next(p: *mut Handle, header: *mut PcapPkthdr) -> *const u8 {
    let mut hdr: *mut PcapPkthdr = std::ptr::null_mut();
    let mut data: *const u8 = std::ptr::null();
    if pcap_next_ex(p, &mut hdr, &mut data) != 1 || header.is_null() {
        return std::ptr::null();
    }
    // SAFETY: hdr points at the handle's kept header; header is the caller's.
    unsafe { *header = *hdr };
    data
}

/// Only sets a flag, so it may be called from a signal handler; a read
/// waiting for packets looks at it at least every 50 ms.
#[no_mangle]
pub extern "C" fn pcap_breakloop(p: *mut Handle) {
    // SAFETY: p is a handle of ours.
    if let Some(h) = unsafe { handle(p) } {
        h.request_break();
    }
}

#[no_mangle]
pub extern "C" fn pcap_setnonblock(p: *mut Handle, on: c_int, errbuf: *mut c_char) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    let rc = h.set_nonblock(on != 0);
    if rc < 0 {
        put_error(errbuf, text(h.errbuf()).unwrap_or(""));
    }
    rc
}

#[no_mangle]
pub extern "C" fn pcap_getnonblock(p: *mut Handle, _errbuf: *mut c_char) -> c_int {
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(PCAP_ERROR, |h| c_int::from(h.nonblock()))
}

/// An eventfd that turns readable when a read may find something (see
/// `Handle::selectable_fd`).
#[no_mangle]
pub extern "C" fn pcap_get_selectable_fd(p: *mut Handle) -> c_int {
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(PCAP_ERROR, Handle::selectable_fd)
}

#[no_mangle]
pub extern "C" fn pcap_fileno(p: *mut Handle) -> c_int {
    pcap_get_selectable_fd(p)
}

#[no_mangle]
pub extern "C" fn pcap_get_required_select_timeout(p: *mut Handle) -> *const libc::timeval {
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.and_then(Handle::select_timeout).map_or(std::ptr::null(), |tv| tv as *const libc::timeval)
}

#[no_mangle]
pub extern "C" fn pcap_stats(p: *mut Handle, ps: *mut PcapStat) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if h.offline {
        h.set_error("Statistics aren't available from savefiles");
        return PCAP_ERROR;
    }
    if ps.is_null() {
        h.set_error("pcap_stats: NULL pcap_stat");
        return PCAP_ERROR;
    }
    // ps_recv: packets that passed the filter, whether read or dropped (as
    // Linux libpcap counts); ps_drop: every packet weir lost, in the ring or
    // for want of a cell.
    let (recv, drop) = h.stats().map_or((0, 0), |t| (t.received - t.filtered, t.capture_drops + t.delivery_drops));
    // SAFETY: ps was checked non-NULL; it is the caller's.
    unsafe {
        (*ps).ps_recv = recv as c_uint;
        (*ps).ps_drop = drop as c_uint;
        (*ps).ps_ifdrop = 0;
    }
    0
}

// ---- filters ----

#[no_mangle]
pub extern "C" fn pcap_compile(p: *mut Handle, prog: *mut BpfProgram, expr: *const c_char, optimize: c_int, netmask: u32) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
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
pub extern "C" fn pcap_compile_nopcap(
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
pub extern "C" fn pcap_setfilter(p: *mut Handle, prog: *mut BpfProgram) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
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

#[no_mangle]
pub extern "C" fn pcap_inject(p: *mut Handle, buf: *const libc::c_void, size: usize) -> c_int {
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    match send(h, buf.cast(), size) {
        Ok(n) => n as c_int,
        Err(e) => {
            h.set_error(&e);
            PCAP_ERROR
        }
    }
}

#[no_mangle]
pub extern "C" fn pcap_sendpacket(p: *mut Handle, buf: *const u8, size: c_int) -> c_int {
    if size < 0 {
        return PCAP_ERROR;
    }
    match pcap_inject(p, buf.cast(), size as usize) {
        n if n == size => 0,
        _ => PCAP_ERROR,
    }
}
