//! Functions passed to the system libpcap as they are: names and descriptions
//! of link and time stamp types, error strings, interface queries, BPF
//! listings, offline filtering, and the savefile writer. A dump file opened on
//! a weir handle is opened by the system library on a dead handle of the same
//! link type, snapshot length and precision, so files are byte for byte what
//! libpcap writes, and `pcap_dumper_t` is the system library's own.

use crate::api::{put_error, text};
use crate::handle::Handle;
use crate::sys::{c_void_dumper, system};
use crate::types::*;
use libc::{c_char, c_int, c_long, FILE};

/// Call the system library, or answer `fallback` when it cannot be loaded.
fn with_sys<T>(fallback: T, f: impl FnOnce(&'static crate::sys::System) -> T) -> T {
    match system() {
        Ok(s) => f(s),
        Err(_) => fallback,
    }
}

macro_rules! forward {
    ($(fn $name:ident($($arg:ident: $t:ty),*) -> $ret:ty = $field:ident, or $fallback:expr;)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name($($arg: $t),*) -> $ret {
                // SAFETY: the system function of the same name and prototype, with the caller's arguments.
                with_sys($fallback, |s| unsafe { (s.$field)($($arg),*) })
            }
        )*
    };
}

forward! {
    fn pcap_datalink_name_to_val(name: *const c_char) -> c_int = datalink_name_to_val, or -1;
    fn pcap_datalink_val_to_name(dlt: c_int) -> *const c_char = datalink_val_to_name, or std::ptr::null();
    fn pcap_datalink_val_to_description(dlt: c_int) -> *const c_char = datalink_val_to_description, or std::ptr::null();
    fn pcap_datalink_val_to_description_or_dlt(dlt: c_int) -> *const c_char = datalink_val_to_description_or_dlt, or std::ptr::null();
    fn pcap_tstamp_type_name_to_val(name: *const c_char) -> c_int = tstamp_type_name_to_val, or PCAP_ERROR;
    fn pcap_tstamp_type_val_to_name(v: c_int) -> *const c_char = tstamp_type_val_to_name, or std::ptr::null();
    fn pcap_tstamp_type_val_to_description(v: c_int) -> *const c_char = tstamp_type_val_to_description, or std::ptr::null();
    fn pcap_statustostr(code: c_int) -> *const c_char = statustostr, or c"unknown error".as_ptr();
    fn pcap_strerror(code: c_int) -> *const c_char = strerror, or c"unknown error".as_ptr();
    fn pcap_lookupnet(dev: *const c_char, net: *mut u32, mask: *mut u32, errbuf: *mut c_char) -> c_int = lookupnet, or PCAP_ERROR;
    fn bpf_image(insn: *const BpfInsn, n: c_int) -> *mut c_char = bpf_image, or std::ptr::null_mut();
    fn pcap_offline_filter(prog: *const BpfProgram, h: *const PcapPkthdr, data: *const u8) -> c_int = offline_filter, or 0;
    fn pcap_dump_file(d: *mut c_void_dumper) -> *mut FILE = dump_file, or std::ptr::null_mut();
    fn pcap_dump_ftell(d: *mut c_void_dumper) -> c_long = dump_ftell, or -1;
    fn pcap_dump_ftell64(d: *mut c_void_dumper) -> i64 = dump_ftell64, or -1;
    fn pcap_dump_flush(d: *mut c_void_dumper) -> c_int = dump_flush, or -1;
}

#[no_mangle]
pub extern "C" fn pcap_freecode(prog: *mut BpfProgram) {
    // SAFETY: the program was filled by the system pcap_compile (through ours).
    with_sys((), |s| unsafe { (s.freecode)(prog) })
}

#[no_mangle]
pub extern "C" fn bpf_dump(prog: *const BpfProgram, option: c_int) {
    // SAFETY: the caller's program, as the system bpf_dump takes it.
    with_sys((), |s| unsafe { (s.bpf_dump)(prog, option) })
}

#[no_mangle]
pub extern "C" fn pcap_findalldevs(out: *mut *mut PcapIf, errbuf: *mut c_char) -> c_int {
    match system() {
        // SAFETY: the caller's out-pointer and errbuf, as the system function takes them.
        Ok(s) => unsafe { (s.findalldevs)(out, errbuf) },
        Err(e) => {
            put_error(errbuf, &e);
            PCAP_ERROR
        }
    }
}

#[no_mangle]
pub extern "C" fn pcap_freealldevs(list: *mut PcapIf) {
    // SAFETY: the list came from the system pcap_findalldevs.
    with_sys((), |s| unsafe { (s.freealldevs)(list) })
}

/// `pcap_lookupdev`, deprecated: the first device `pcap_findalldevs` lists.
#[no_mangle]
pub extern "C" fn pcap_lookupdev(errbuf: *mut c_char) -> *mut c_char {
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
pub extern "C" fn pcap_dump_open(p: *mut Handle, fname: *const c_char) -> *mut c_void_dumper {
    // SAFETY: the system function on its own dead handle, with the caller's file name.
    dump_with(p, |s, dead| unsafe { (s.dump_open)(dead, fname) })
}

#[no_mangle]
pub extern "C" fn pcap_dump_open_append(p: *mut Handle, fname: *const c_char) -> *mut c_void_dumper {
    // SAFETY: as in pcap_dump_open.
    dump_with(p, |s, dead| unsafe { (s.dump_open_append)(dead, fname) })
}

#[no_mangle]
pub extern "C" fn pcap_dump_fopen(p: *mut Handle, fp: *mut FILE) -> *mut c_void_dumper {
    // SAFETY: as in pcap_dump_open, with the caller's stream.
    dump_with(p, |s, dead| unsafe { (s.dump_fopen)(dead, fp) })
}

#[no_mangle]
pub extern "C" fn pcap_dump(user: *mut u8, h: *const PcapPkthdr, data: *const u8) {
    // SAFETY: user is a dumper the system library opened; h and data describe one packet.
    with_sys((), |s| unsafe { (s.dump)(user, h, data) })
}

#[no_mangle]
pub extern "C" fn pcap_dump_close(d: *mut c_void_dumper) {
    // SAFETY: a dumper the system library opened, closed once by the caller.
    with_sys((), |s| unsafe { (s.dump_close)(d) })
}
