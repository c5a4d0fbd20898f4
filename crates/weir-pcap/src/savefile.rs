//! `pcap_file`: the `FILE *` libpcap reads a savefile through, which programs
//! use to show progress (`ftell`) and to read again from a point they noted
//! (`pos = ftell(pcap_file(p)); pcap_next_ex(p, ..); fseek(pcap_file(p), pos, SEEK_SET)`,
//! as nfpcapd does to learn the first timestamp).
//!
//! weir reads the file on its own capture thread, ahead of the application,
//! so the stream is a view kept in step on request:
//! - Each `pcap_file` call puts the stream at the handle's logical position,
//!   where the next record starts, and remembers how many packets had been
//!   records had been read there (the handle filters a file's records itself,
//!   so it sees each one). For a pcap file the position is the exact byte
//!   offset; for pcapng it is an estimate, still strictly increasing.
//! - Before each read, a stream moved by the caller to a position it was told
//!   means "read again from there": the handle restarts the file and skips to
//!   that packet. Any other position is an error that names the offset.
//! - A stream the caller passed to `pcap_fopen_offline` is closed at
//!   `pcap_close`, as libpcap does; standard input is never closed nor moved.

use libc::FILE;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Bytes of a classic pcap file header, where its first record starts.
pub const PCAP_HEADER: i64 = 24;
/// Bytes of a classic pcap record header.
pub const RECORD_HEADER: i64 = 16;

extern "C" {
    static stdin: *mut FILE;
}

pub struct Savefile {
    fp: *mut FILE,
    /// Whether `pcap_close` closes `fp`.
    close: bool,
    /// Where this view last put `fp`; `None` for a stream that cannot seek.
    set_at: Cell<Option<i64>>,
    /// Positions handed to the caller → records read before them.
    told: RefCell<HashMap<i64, u64>>,
}

/// What the caller did with the stream since the last look.
pub enum Moved {
    Not,
    /// Back (or on) to the point where `packets` records had been read.
    To {
        packets: u64,
        at: i64,
    },
    /// Somewhere this view never reported.
    Unknown(i64),
}

impl Savefile {
    fn new(fp: *mut FILE, close: bool) -> Savefile {
        Savefile { fp, close, set_at: Cell::new(None), told: RefCell::new(HashMap::new()) }
    }

    /// The caller's stream from `pcap_fopen_offline`.
    pub fn adopt(fp: *mut FILE) -> Savefile {
        // SAFETY: fp is the open stream the caller passed in; reading its stdin-ness only.
        let is_stdin = unsafe { libc::fileno(fp) } == 0;
        Savefile::new(fp, !is_stdin)
    }

    /// A stream of our own on `path` (`None`: standard input).
    pub fn open(path: Option<&Path>) -> Result<Savefile, String> {
        let Some(path) = path else {
            // SAFETY: C's stdin is initialised before main and never reassigned by us.
            let fp = unsafe { stdin };
            return Ok(Savefile::new(fp, false));
        };
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("{}: a NUL in the path", path.display()))?;
        // SAFETY: both arguments are NUL-terminated strings that outlive the call.
        let fp = unsafe { libc::fopen(c.as_ptr(), c"rb".as_ptr()) };
        if fp.is_null() {
            return Err(format!("{}: {}", path.display(), std::io::Error::last_os_error()));
        }
        Ok(Savefile::new(fp, true))
    }

    /// Put the stream at `at`, where `packets` records have been read, and hand it over.
    pub fn show(&self, at: i64, packets: u64) -> *mut FILE {
        // SAFETY: fp is open for the life of this view.
        if unsafe { libc::fseek(self.fp, at as libc::c_long, libc::SEEK_SET) } == 0 {
            self.set_at.set(Some(at));
            self.told.borrow_mut().insert(at, packets);
        } else {
            self.set_at.set(None);
        }
        self.fp
    }

    /// Whether the caller moved the stream since [`show`](Self::show).
    pub fn moved(&self) -> Moved {
        let Some(set) = self.set_at.get() else { return Moved::Not };
        // SAFETY: fp is open for the life of this view.
        let now: i64 = unsafe { libc::ftell(self.fp) };
        if now == set || now < 0 {
            return Moved::Not;
        }
        match self.told.borrow().get(&now) {
            Some(&packets) => Moved::To { packets, at: now },
            None => Moved::Unknown(now),
        }
    }

    /// The read restarted at `at`: the stream is there now.
    pub fn settled(&self, at: i64) {
        self.set_at.set(Some(at));
    }
}

impl Drop for Savefile {
    fn drop(&mut self) {
        if self.close {
            // SAFETY: our stream (or the caller's, given to us as libpcap takes it), closed once.
            unsafe { libc::fclose(self.fp) };
        }
    }
}
