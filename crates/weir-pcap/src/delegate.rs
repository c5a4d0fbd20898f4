//! Functions passed to the system libpcap as they are: names and descriptions
//! of link and time stamp types, error strings, interface queries, BPF
//! listings, `bpf_filter` and `bpf_validate`, offline filtering, the name
//! lookups of `<pcap/namedb.h>`, and the savefile writer. A dump file opened on
//! a weir handle is opened by the system library on a dead handle of the same
//! link type, snapshot length and precision, so files are byte for byte what
//! libpcap writes, and `pcap_dumper_t` is the system library's own.

use crate::api::{put_error, text};
use crate::cancel::NoCancel;
use crate::handle::Handle;
use crate::sys::{c_void_dumper, system};
use crate::types::*;
use libc::{c_char, c_int, c_long, c_uint, FILE};
use std::sync::OnceLock;

/// Exported functions that call the system library's function of the same
/// name with the caller's arguments, looked up on first use; `fallback` when
/// the library or the symbol is missing.
macro_rules! forward {
    ($(fn $name:ident($($arg:ident: $t:ty),*) $(-> $ret:ty)?, or $fallback:expr;)*) => {
        $(
            #[no_mangle]
            pub extern "C-unwind" fn $name($($arg: $t),*) $(-> $ret)? {
                type F = unsafe extern "C-unwind" fn($($t),*) $(-> $ret)?;
                static SYMBOL: OnceLock<Option<F>> = OnceLock::new();
                // SAFETY: F is the libpcap 1.10 prototype of the symbol of the same name.
                let f = SYMBOL.get_or_init(|| system().ok().and_then(|s| unsafe { s.symbol::<F>(stringify!($name)) }));
                match f {
                    // SAFETY: the system function of the same name and prototype, with the caller's arguments.
                    Some(f) => unsafe { f($($arg),*) },
                    None => $fallback,
                }
            }
        )*
    };
}

/// `PROTO_UNDEF` of `<pcap/namedb.h>`: the name lookups' "not found".
const PROTO_UNDEF: c_int = -1;

forward! {
    fn pcap_datalink_name_to_val(name: *const c_char) -> c_int, or -1;
    fn pcap_datalink_val_to_name(dlt: c_int) -> *const c_char, or std::ptr::null();
    fn pcap_datalink_val_to_description(dlt: c_int) -> *const c_char, or std::ptr::null();
    fn pcap_datalink_val_to_description_or_dlt(dlt: c_int) -> *const c_char, or std::ptr::null();
    fn pcap_tstamp_type_name_to_val(name: *const c_char) -> c_int, or PCAP_ERROR;
    fn pcap_tstamp_type_val_to_name(v: c_int) -> *const c_char, or std::ptr::null();
    fn pcap_tstamp_type_val_to_description(v: c_int) -> *const c_char, or std::ptr::null();
    fn pcap_statustostr(code: c_int) -> *const c_char, or c"unknown error".as_ptr();
    fn pcap_strerror(code: c_int) -> *const c_char, or c"unknown error".as_ptr();
    fn pcap_lookupnet(dev: *const c_char, net: *mut u32, mask: *mut u32, errbuf: *mut c_char) -> c_int, or {
        put_error(errbuf, "the system libpcap, which looks up networks for weir, could not be loaded");
        PCAP_ERROR
    };
    fn pcap_freealldevs(list: *mut PcapIf), or ();
    fn bpf_image(insn: *const BpfInsn, n: c_int) -> *mut c_char, or std::ptr::null_mut();
    fn bpf_dump(prog: *const BpfProgram, option: c_int), or ();
    fn bpf_filter(insns: *const BpfInsn, data: *const u8, wire_len: c_uint, caplen: c_uint) -> c_uint, or 0;
    fn bpf_validate(insns: *const BpfInsn, len: c_int) -> c_int, or 0;
    fn pcap_offline_filter(prog: *const BpfProgram, h: *const PcapPkthdr, data: *const u8) -> c_int, or 0;
    fn pcap_freecode(prog: *mut BpfProgram), or ();
    fn pcap_nametoaddr(name: *const c_char) -> *mut *mut u32, or std::ptr::null_mut();
    fn pcap_nametoaddrinfo(name: *const c_char) -> *mut libc::addrinfo, or std::ptr::null_mut();
    fn pcap_nametonetaddr(name: *const c_char) -> u32, or 0;
    fn pcap_nametoport(name: *const c_char, port: *mut c_int, proto: *mut c_int) -> c_int, or 0;
    fn pcap_nametoportrange(name: *const c_char, port1: *mut c_int, port2: *mut c_int, proto: *mut c_int) -> c_int, or 0;
    fn pcap_nametoproto(name: *const c_char) -> c_int, or PROTO_UNDEF;
    fn pcap_nametoeproto(name: *const c_char) -> c_int, or PROTO_UNDEF;
    fn pcap_nametollc(name: *const c_char) -> c_int, or PROTO_UNDEF;
    fn pcap_ether_hostton(name: *const c_char) -> *mut u8, or std::ptr::null_mut();
    fn pcap_ether_aton(s: *const c_char) -> *mut u8, or std::ptr::null_mut();
    fn pcap_next_etherent(fp: *mut FILE) -> *mut libc::c_void, or std::ptr::null_mut();
    fn pcap_dump(user: *mut u8, h: *const PcapPkthdr, data: *const u8), or ();
    fn pcap_dump_file(d: *mut c_void_dumper) -> *mut FILE, or std::ptr::null_mut();
    fn pcap_dump_ftell(d: *mut c_void_dumper) -> c_long, or -1;
    fn pcap_dump_ftell64(d: *mut c_void_dumper) -> i64, or -1;
    fn pcap_dump_flush(d: *mut c_void_dumper) -> c_int, or -1;
    fn pcap_dump_close(d: *mut c_void_dumper), or ();
}

#[no_mangle]
pub extern "C-unwind" fn pcap_findalldevs(out: *mut *mut PcapIf, errbuf: *mut c_char) -> c_int {
    let _nc = NoCancel::new();
    match system() {
        // SAFETY: the caller's out-pointer and errbuf, as the system function takes them.
        Ok(s) => unsafe { (s.findalldevs)(out, errbuf) },
        Err(e) => {
            put_error(errbuf, &e);
            PCAP_ERROR
        }
    }
}

/// `pcap_lookupdev`, deprecated: the first device `pcap_findalldevs` lists.
#[no_mangle]
pub extern "C-unwind" fn pcap_lookupdev(errbuf: *mut c_char) -> *mut c_char {
    let _nc = NoCancel::new();
    static NAME: std::sync::Mutex<Option<std::ffi::CString>> = std::sync::Mutex::new(None);
    let mut list: *mut PcapIf = std::ptr::null_mut();
    if pcap_findalldevs(&mut list, errbuf) < 0 || list.is_null() {
        put_error(errbuf, "no suitable device found");
        return std::ptr::null_mut();
    }
    // SAFETY: a non-empty list from pcap_findalldevs; its first name is a C string.
    let name = text(unsafe { (*list).name }).unwrap_or("").to_string();
    pcap_freealldevs(list);
    let mut slot = NAME.lock().unwrap_or_else(|e| e.into_inner());
    *slot = std::ffi::CString::new(name).ok();
    slot.as_ref().map_or(std::ptr::null_mut(), |c| c.as_ptr().cast_mut())
}

/// Open a dump file through the system library, on a dead twin of `p`.
fn dump_with(p: *mut Handle, open: impl FnOnce(&'static crate::sys::System, *mut RawPcap) -> *mut c_void_dumper) -> *mut c_void_dumper {
    // SAFETY: p is NULL or a handle of ours.
    let Some(h) = (unsafe { p.as_ref() }) else { return std::ptr::null_mut() };
    let sys = match system() {
        Ok(s) => s,
        Err(e) => {
            h.set_error(&e);
            return std::ptr::null_mut();
        }
    };
    match h.with_dead(|dead| {
        let d = open(sys, dead.p);
        if d.is_null() {
            Err(dead.error())
        } else {
            Ok(d)
        }
    }) {
        Ok(Ok(d)) => d,
        Ok(Err(e)) | Err(e) => {
            h.set_error(&e);
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub extern "C-unwind" fn pcap_dump_open(p: *mut Handle, fname: *const c_char) -> *mut c_void_dumper {
    let _nc = NoCancel::new();
    // SAFETY: the system function on its own dead handle, with the caller's file name.
    dump_with(p, |s, dead| unsafe { (s.dump_open)(dead, fname) })
}

#[no_mangle]
pub extern "C-unwind" fn pcap_dump_open_append(p: *mut Handle, fname: *const c_char) -> *mut c_void_dumper {
    let _nc = NoCancel::new();
    // SAFETY: as in pcap_dump_open.
    dump_with(p, |s, dead| unsafe { (s.dump_open_append)(dead, fname) })
}

#[no_mangle]
pub extern "C-unwind" fn pcap_dump_fopen(p: *mut Handle, fp: *mut FILE) -> *mut c_void_dumper {
    let _nc = NoCancel::new();
    // SAFETY: as in pcap_dump_open, with the caller's stream.
    dump_with(p, |s, dead| unsafe { (s.dump_fopen)(dead, fp) })
}
