//! The calls that ask a handle about itself or change one of its settings,
//! answered as libpcap 1.10.3 answers each on each kind of handle ([`Kind`]):
//! a dead one (`pcap_open_dead`), a savefile, a live one not yet activated
//! (`pcap_create`) and an activated one. Return codes and `pcap_geterr`'s
//! text follow libpcap's, including its quirks (a dead handle's descriptor is
//! 0, `pcap_sendpacket` passes a not-activated handle); the
//! `tests/pcap-compat/getters.c` check holds weir to them call by call.
//!
//! Where weir answers otherwise, on purpose:
//! - `pcap_fileno` and `pcap_get_selectable_fd` of an activated live handle are
//!   weir's ready eventfd, not libpcap's AF_PACKET socket: weir's own threads
//!   read the interface, so only that descriptor says when a read finds
//!   packets. (A savefile's selectable descriptor is the file's, as in libpcap.)
//! - `pcap_setdirection` to one direction only is refused (see docs/src/libpcap.md).
//! - `pcap_bufsize` of a live handle in immediate mode is its snapshot length:
//!   libpcap's TPACKET_V2 frame size there depends on the interface's MTU and
//!   offloads, which weir does not size a ring by.

use crate::api::{handle, put_error, text};
use crate::cancel::NoCancel;
use crate::handle::{Handle, Kind, MAXIMUM_SNAPLEN};
use crate::types::*;
use libc::{c_char, c_int, FILE};

macro_rules! setter {
    ($name:ident($arg:ident: $t:ty) => |$c:ident| $body:expr) => {
        #[no_mangle]
        pub extern "C-unwind" fn $name(p: *mut Handle, $arg: $t) -> c_int {
            let _nc = NoCancel::new();
            // SAFETY: p is a handle of ours.
            unsafe { handle(p) }.map_or(PCAP_ERROR, |h| h.configure(|$c| $body))
        }
    };
}

setter!(pcap_set_promisc(on: c_int) => |c| c.promisc = on != 0);
setter!(pcap_set_rfmon(on: c_int) => |c| c.rfmon = on != 0);
setter!(pcap_set_timeout(ms: c_int) => |c| c.timeout_ms = ms);
// libpcap ignores a size of 0 or less.
setter!(pcap_set_buffer_size(bytes: c_int) => |c| if bytes > 0 { c.buffer_size = bytes });
setter!(pcap_set_immediate_mode(on: c_int) => |c| c.immediate = on != 0);
setter!(pcap_set_protocol_linux(protocol: c_int) => |c| c.protocol = protocol);
setter!(pcap_set_snaplen(snaplen: c_int) => |c| c.snaplen = snaplen);

#[no_mangle]
pub extern "C-unwind" fn pcap_can_set_rfmon(p: *mut Handle) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if h.kind == Kind::Dead {
        h.set_error("Rfmon mode doesn't apply on a pcap_open_dead pcap_t");
        return PCAP_ERROR;
    }
    // Neither a savefile nor, in weir, an interface can be put in monitor mode.
    0
}

#[no_mangle]
pub extern "C-unwind" fn pcap_set_tstamp_type(p: *mut Handle, kind: c_int) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if h.refuse_if_activated() {
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
pub extern "C-unwind" fn pcap_set_tstamp_precision(p: *mut Handle, precision: c_int) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if h.refuse_if_activated() {
        return PCAP_ERROR_ACTIVATED;
    }
    match u32::try_from(precision) {
        Ok(v @ (TSTAMP_PRECISION_MICRO | TSTAMP_PRECISION_NANO)) => {
            h.precision.set(v);
            0
        }
        _ => PCAP_ERROR_TSTAMP_PRECISION_NOTSUP,
    }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_get_tstamp_precision(p: *mut Handle) -> c_int {
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(PCAP_ERROR, |h| h.precision.get() as c_int)
}

/// An array from `malloc`, freed by the matching `pcap_free_*`; its length.
fn malloc_list(h: &Handle, values: &[c_int], out: *mut *mut c_int) -> c_int {
    if out.is_null() {
        h.set_error("NULL list pointer");
        return PCAP_ERROR;
    }
    // SAFETY: malloc of the list's ints, checked for NULL before use; out is the caller's.
    unsafe {
        let a = libc::malloc(std::mem::size_of_val(values)).cast::<c_int>();
        if a.is_null() {
            h.set_error("malloc: Cannot allocate memory");
            return PCAP_ERROR;
        }
        std::ptr::copy_nonoverlapping(values.as_ptr(), a, values.len());
        *out = a;
    }
    values.len() as c_int
}

#[no_mangle]
pub extern "C-unwind" fn pcap_list_tstamp_types(p: *mut Handle, out: *mut *mut c_int) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(PCAP_ERROR, |h| malloc_list(h, &[TSTAMP_HOST], out))
}

#[no_mangle]
pub extern "C-unwind" fn pcap_free_tstamp_types(list: *mut c_int) {
    // SAFETY: the list came from malloc in pcap_list_tstamp_types (or is NULL).
    unsafe { libc::free(list.cast()) }
}

/// `f` of an activated handle; libpcap's answers before activation (with no
/// message, as libpcap sets none for these) or for NULL.
fn activated(p: *mut Handle, f: impl FnOnce(&Handle) -> c_int) -> c_int {
    // SAFETY: p is a handle of ours.
    match unsafe { handle(p) } {
        Some(h) if !h.is_activated() => PCAP_ERROR_NOT_ACTIVATED,
        Some(h) => f(h),
        None => PCAP_ERROR,
    }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_list_datalinks(p: *mut Handle, out: *mut *mut c_int) -> c_int {
    let _nc = NoCancel::new();
    activated(p, |h| malloc_list(h, &h.datalinks(), out))
}

#[no_mangle]
pub extern "C-unwind" fn pcap_free_datalinks(list: *mut c_int) {
    // SAFETY: the list came from malloc in pcap_list_datalinks (or is NULL).
    unsafe { libc::free(list.cast()) }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_set_datalink(p: *mut Handle, dlt: c_int) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    // Before activation libpcap knows no list: only its zeroed link type matches.
    let offered = if h.is_activated() { h.datalinks() } else { vec![h.dlt.get()] };
    if dlt >= 0 && offered.contains(&dlt) {
        return match h.switch_datalink(dlt) {
            Ok(()) => 0,
            Err(e) => {
                h.set_error(&e);
                PCAP_ERROR
            }
        };
    }
    let msg = match text(crate::delegate::pcap_datalink_val_to_name(dlt)) {
        Some(name) => format!("{name} is not one of the DLTs supported by this device"),
        None => format!("DLT {dlt} is not one of the DLTs supported by this device"),
    };
    h.set_error(&msg);
    PCAP_ERROR
}

#[no_mangle]
pub extern "C-unwind" fn pcap_setdirection(p: *mut Handle, direction: c_int) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if !(PCAP_D_INOUT..=PCAP_D_OUT).contains(&direction) {
        h.set_error("Invalid direction");
        return PCAP_ERROR;
    }
    let refusal = match h.kind {
        Kind::Dead => "The packet direction cannot be set on a pcap_open_dead pcap_t",
        Kind::Savefile => "Setting direction is not supported on savefiles",
        Kind::Live if !h.is_activated() => return h.not_activated(),
        Kind::Live if direction == PCAP_D_INOUT => return 0,
        Kind::Live => "capturing only one direction is not supported by weir; capture both and filter with 'inbound'/'outbound'",
    };
    h.set_error(refusal);
    PCAP_ERROR
}

#[no_mangle]
pub extern "C-unwind" fn pcap_datalink(p: *mut Handle) -> c_int {
    activated(p, |h| h.dlt.get())
}

#[no_mangle]
pub extern "C-unwind" fn pcap_datalink_ext(p: *mut Handle) -> c_int {
    activated(p, |h| h.trace.as_ref().map_or(0, |t| t.link_type_ext as c_int))
}

#[no_mangle]
pub extern "C-unwind" fn pcap_snapshot(p: *mut Handle) -> c_int {
    activated(p, |h| h.snaplen.get())
}

#[no_mangle]
pub extern "C-unwind" fn pcap_bufsize(p: *mut Handle) -> c_int {
    let _nc = NoCancel::new();
    activated(p, |h| match h.kind {
        Kind::Dead => 0,
        Kind::Savefile => h.savefile_bufsize(),
        Kind::Live if h.immediate.get() => h.snaplen.get(),
        Kind::Live => MAXIMUM_SNAPLEN,
    })
}

/// Whether the savefile is in the other byte order; weir hands packets over
/// in host order all the same, as libpcap does.
#[no_mangle]
pub extern "C-unwind" fn pcap_is_swapped(p: *mut Handle) -> c_int {
    activated(p, |h| h.trace.as_ref().map_or(0, |t| c_int::from(t.swapped)))
}

#[no_mangle]
pub extern "C-unwind" fn pcap_major_version(p: *mut Handle) -> c_int {
    activated(p, |h| h.trace.as_ref().map_or(0, |t| c_int::from(t.version.0)))
}

#[no_mangle]
pub extern "C-unwind" fn pcap_minor_version(p: *mut Handle) -> c_int {
    activated(p, |h| h.trace.as_ref().map_or(0, |t| c_int::from(t.version.1)))
}

/// The savefile's stream (see [`crate::savefile`]); NULL for other handles.
#[no_mangle]
pub extern "C-unwind" fn pcap_file(p: *mut Handle) -> *mut FILE {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(std::ptr::null_mut(), Handle::file)
}

#[no_mangle]
pub extern "C-unwind" fn pcap_geterr(p: *mut Handle) -> *mut c_char {
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.map_or(std::ptr::null_mut(), Handle::errbuf)
}

#[no_mangle]
pub extern "C-unwind" fn pcap_perror(p: *mut Handle, prefix: *const c_char) {
    let _nc = NoCancel::new();
    let msg = text(pcap_geterr(p)).unwrap_or("");
    // libpcap prints `"%s: %s\n"` whatever the prefix: glibc's printf shows
    // a NULL one as "(null)".
    let pre = if prefix.is_null() {
        "(null)".into()
    } else {
        // SAFETY: a non-NULL prefix is a NUL-terminated string by the API's contract.
        unsafe { std::ffi::CStr::from_ptr(prefix) }.to_string_lossy()
    };
    eprintln!("{pre}: {msg}");
}

/// libpcap's refusal of non-blocking mode on a kind of handle that has none.
fn no_nonblock(h: &Handle) -> Option<&'static str> {
    match h.kind {
        Kind::Dead => Some("A pcap_open_dead pcap_t does not have a non-blocking mode setting"),
        Kind::Savefile | Kind::Live => None,
    }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_setnonblock(p: *mut Handle, on: c_int, errbuf: *mut c_char) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    let refusal = match h.kind {
        Kind::Savefile => Some("Savefiles cannot be put into non-blocking mode"),
        _ => no_nonblock(h),
    };
    // libpcap sets the handle's message and copies it to errbuf.
    if let Some(msg) = refusal {
        h.set_error(msg);
        put_error(errbuf, msg);
        return PCAP_ERROR;
    }
    let rc = h.set_nonblock(on != 0);
    if rc < 0 {
        put_error(errbuf, text(h.errbuf()).unwrap_or(""));
    }
    rc
}

#[no_mangle]
pub extern "C-unwind" fn pcap_getnonblock(p: *mut Handle, errbuf: *mut c_char) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    if let Some(msg) = no_nonblock(h) {
        h.set_error(msg);
        put_error(errbuf, msg);
        return PCAP_ERROR;
    }
    match h.kind {
        // A savefile is never in non-blocking mode.
        Kind::Savefile => 0,
        // Not copied to errbuf: libpcap copies only for PCAP_ERROR.
        Kind::Live if !h.is_activated() => h.not_activated(),
        _ => c_int::from(h.nonblock()),
    }
}

/// The descriptor libpcap's handles of `kind` have before weir's answer
/// applies: a dead handle's is 0 (libpcap zeroes it), a live handle's -1 until
/// activation.
fn preset_fd(h: &Handle) -> Option<c_int> {
    match h.kind {
        Kind::Dead => Some(0),
        Kind::Live if !h.is_activated() => Some(-1),
        Kind::Live | Kind::Savefile => None,
    }
}

/// A savefile's descriptor, as in libpcap; a live handle's ready eventfd
/// (see the module's documentation).
#[no_mangle]
pub extern "C-unwind" fn pcap_get_selectable_fd(p: *mut Handle) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    match (preset_fd(h), h.kind) {
        (Some(fd), _) => fd,
        (None, Kind::Savefile) => h.savefile_fd(),
        (None, _) => h.selectable_fd(),
    }
}

/// -1 for a savefile, as in libpcap: a descriptor there would be taken for an
/// interface's (argus probes it with interface ioctls and gives the file up).
#[no_mangle]
pub extern "C-unwind" fn pcap_fileno(p: *mut Handle) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    match (preset_fd(h), h.kind) {
        (Some(fd), _) => fd,
        (None, Kind::Savefile) => -1,
        // The selectable descriptor: readable before capture starts, so that
        // a program polling it (softflowd) makes the first read.
        (None, _) => h.selectable_fd(),
    }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_get_required_select_timeout(p: *mut Handle) -> *const libc::timeval {
    // SAFETY: p is a handle of ours.
    unsafe { handle(p) }.and_then(Handle::select_timeout).map_or(std::ptr::null(), |tv| tv as *const libc::timeval)
}

#[no_mangle]
pub extern "C-unwind" fn pcap_stats(p: *mut Handle, ps: *mut PcapStat) -> c_int {
    let _nc = NoCancel::new();
    // SAFETY: p is a handle of ours.
    let Some(h) = (unsafe { handle(p) }) else { return PCAP_ERROR };
    match h.kind {
        Kind::Dead => {
            h.set_error("Statistics aren't available from a pcap_open_dead pcap_t");
            return PCAP_ERROR;
        }
        Kind::Savefile => {
            h.set_error("Statistics aren't available from savefiles");
            return PCAP_ERROR;
        }
        Kind::Live if !h.is_activated() => return h.not_activated(),
        Kind::Live => {}
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
        (*ps).ps_recv = recv as libc::c_uint;
        (*ps).ps_drop = drop as libc::c_uint;
        (*ps).ps_ifdrop = 0;
    }
    0
}
