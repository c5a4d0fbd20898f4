//! The per-link-type rules libpcap 1.10.3 applies while reading a trace on Linux.
//!
//! libpcap checks lengths against the DLT_ value of a file's link type, not the
//! LINKTYPE_ value written in it, and the two differ for a handful of old types.
//! The numbers here are Linux's, as Debian's libpcap is built with them.

/// libpcap's `MAXIMUM_SNAPLEN`: the largest packet most link types may carry.
pub(super) const MAXIMUM_SNAPLEN: u32 = 262_144;

/// `DLT_DBUS`, whose messages may be up to 128 MiB.
const DLT_DBUS: u32 = 231;
/// `DLT_USBPCAP`, whose transfers may be up to 1 MiB.
const DLT_USBPCAP: u32 = 249;
/// `DLT_EBHSCR`, whose frames may be up to 8 MiB.
const DLT_EBHSCR: u32 = 279;

/// The DLT_ value libpcap uses internally for a LINKTYPE_ value.
pub(super) fn dlt_of(linktype: u32) -> u32 {
    crate::LinkType(linktype).dlt()
}

/// The largest captured length libpcap accepts for a DLT_ value.
pub(super) fn max_snaplen(dlt: u32) -> u32 {
    match dlt {
        DLT_DBUS => 128 * 1024 * 1024,
        DLT_EBHSCR => 8 * 1024 * 1024,
        DLT_USBPCAP => 1024 * 1024,
        _ => MAXIMUM_SNAPLEN,
    }
}

/// The snapshot length libpcap reads a file with: the declared one, unless it
/// is 0 or does not fit in a C `int`, when the link type's maximum stands in.
pub(super) fn effective_snapshot(dlt: u32, snaplen: u32) -> u32 {
    if snaplen == 0 || snaplen > i32::MAX as u32 {
        max_snaplen(dlt)
    } else {
        snaplen
    }
}
