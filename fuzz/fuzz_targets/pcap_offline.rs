//! Arbitrary file bytes through weir's libpcap, as a C program reads a
//! savefile: `pcap_open_offline`, then `pcap_next_ex` to the end, with
//! `ftell(pcap_file(p))` and `pcap_bufsize` after every packet, then
//! `pcap_close`.
//!
//! Nothing may panic, hang or read out of bounds; and what the calls say must
//! hold together: a refused open or a failed read has a message, every packet
//! holds at most weir's largest caplen and its bytes are readable, the
//! stream's position grows with every packet and stays inside the file.
//!
//! The bytes are a memfd's, opened by its /proc path, so each input is a real
//! regular file to the library (its reader, and `pcap_file`'s second walk).

#![no_main]

use libc::{c_char, c_int, c_void, FILE};
use libfuzzer_sys::fuzz_target;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;
use weir::filter::libpcap::{PcapPkthdr, ERRBUF_SIZE};
use weir::tracefile::MAX_CAPLEN;

// weir's libpcap, linked in, called through its C API as a program calls it.
extern crate pcap as _;

extern "C-unwind" {
    fn pcap_open_offline(fname: *const c_char, errbuf: *mut c_char) -> *mut c_void;
    fn pcap_next_ex(p: *mut c_void, header: *mut *mut PcapPkthdr, data: *mut *const u8) -> c_int;
    fn pcap_file(p: *mut c_void) -> *mut FILE;
    fn pcap_bufsize(p: *mut c_void) -> c_int;
    fn pcap_geterr(p: *mut c_void) -> *mut c_char;
    fn pcap_close(p: *mut c_void);
}

/// Packets read from one input at most: a 1 MiB input holds fewer records
/// than this, so the bound only stops a reader that would never end.
const MAX_PACKETS: usize = 1 << 20;

/// The memfd the inputs are written to, and its path.
fn file() -> &'static (OwnedFd, CString) {
    static FILE: OnceLock<(OwnedFd, CString)> = OnceLock::new();
    FILE.get_or_init(|| {
        // Small pools: an input holds few packets, and each open makes its own.
        std::env::set_var("WEIR_POOL", "64,8");
        // SAFETY: a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"pcap-offline-input".as_ptr(), 0) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        (fd, path)
    })
}

fn write_input(fd: &OwnedFd, bytes: &[u8]) {
    // SAFETY: our memfd; `bytes` is live for the call; results are checked.
    unsafe {
        assert_eq!(libc::ftruncate(fd.as_raw_fd(), 0), 0);
        assert_eq!(libc::pwrite(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), 0), bytes.len() as isize);
    }
}

fn message(text: *const c_char) -> String {
    // SAFETY: the library's NUL-terminated errbuf.
    unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
}

fuzz_target!(|bytes: &[u8]| {
    let (fd, path) = file();
    write_input(fd, bytes);
    let mut errbuf = [0 as c_char; ERRBUF_SIZE];
    // SAFETY: a NUL-terminated path and an errbuf of ERRBUF_SIZE bytes, as the C API takes them.
    let p = unsafe { pcap_open_offline(path.as_ptr(), errbuf.as_mut_ptr()) };
    if p.is_null() {
        assert!(errbuf[0] != 0, "a refused open says why");
        return;
    }
    let mut last = -1i64;
    let mut checksum = 0u8;
    let mut n = 0;
    let end = loop {
        let mut hdr: *mut PcapPkthdr = std::ptr::null_mut();
        let mut data: *const u8 = std::ptr::null();
        // SAFETY: the open handle and out-pointers valid for the call.
        let rc = unsafe { pcap_next_ex(p, &mut hdr, &mut data) };
        if rc != 1 {
            break rc;
        }
        n += 1;
        assert!(n <= MAX_PACKETS, "more packets than the input can hold");
        // SAFETY: pcap_next_ex returned a packet: a header and caplen bytes, valid until the next call.
        let h = unsafe { *hdr };
        assert!(h.caplen as usize <= MAX_CAPLEN, "caplen {}", h.caplen);
        // SAFETY: as above; every byte is read, for the sanitizer to see.
        let packet = unsafe { std::slice::from_raw_parts(data, h.caplen as usize) };
        checksum = packet.iter().fold(checksum, |a, &b| a ^ b);
        // SAFETY: the open handle.
        let fp = unsafe { pcap_file(p) };
        // SAFETY: the open handle.
        let why = || message(unsafe { pcap_geterr(p) });
        assert!(!fp.is_null(), "a savefile has a stream: {}", why());
        // SAFETY: the library's open stream.
        let at = unsafe { libc::ftell(fp) };
        assert!(at > last && at as usize <= bytes.len(), "ftell {at} after {last}, file of {}", bytes.len());
        last = at;
        // SAFETY: the open handle.
        assert!(unsafe { pcap_bufsize(p) } > 0);
    };
    assert!(matches!(end, -1 | -2), "pcap_next_ex on a savefile ends with -1 or -2, not {end}");
    if end == -1 {
        // SAFETY: the open handle.
        assert!(!message(unsafe { pcap_geterr(p) }).is_empty(), "a failed read says why");
    }
    std::hint::black_box(checksum);
    // SAFETY: the open handle, closed once.
    unsafe { pcap_close(p) };
});
