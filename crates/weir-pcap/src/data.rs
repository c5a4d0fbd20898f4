//! libpcap's exported data: `pcap_version` (the version string) and
//! `eproto_db` (Ethernet protocol names, for `pcap_nametoeproto`'s callers).
//!
//! Contract: both are real data symbols of the same type, size and contents
//! as the system library's, copied from it when weir is built (`build.rs`
//! says why they cannot be looked up at run time). They are `static mut`
//! because libpcap's are writable arrays: a program may hold a copy
//! relocation against either, and nm must show them as data like libpcap's.
//! weir itself never reads or writes them.

use libc::c_char;

/// `struct eproto` of `<pcap/namedb.h>`.
#[repr(C)]
pub struct Eproto {
    pub s: *const c_char,
    pub p: u16,
}

include!(concat!(env!("OUT_DIR"), "/system_data.rs"));
