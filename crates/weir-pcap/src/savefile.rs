//! `pcap_file`: the `FILE *` libpcap reads a savefile through, which programs
//! use to show progress and find the end (`ftell`, compared with the file's
//! size, as ettercap does) and to read again from a point they noted
//! (`pos = ftell(pcap_file(p)); pcap_next_ex(p, ..); fseek(pcap_file(p), pos, SEEK_SET)`,
//! as nfpcapd does to learn the first timestamp).
//!
//! weir reads the file on its own capture thread, ahead of the application,
//! so the stream is a view kept in step on request:
//! - Each `pcap_file` call puts the stream where libpcap's would stand after
//!   the records read so far: after the last one's record (pcap) or block
//!   (pcapng, after any blocks before it), and before the first, after the
//!   file header (pcap) or the first interface description block (pcapng).
//!   [`Layout`] finds those offsets by walking the file again with weir's
//!   parser, reading the stream's own descriptor with `pread` (which moves
//!   neither the descriptor's offset nor the stream), as far as the reads went; it also
//!   gives the buffer size libpcap reports by then (`pcap_bufsize`). It
//!   remembers how many records had been read there.
//! - Before each read, a stream moved by the caller to a position it was told
//!   means "read again from there": the handle restarts the file and skips to
//!   that record. Any other position is an error that names the offset.
//! - A stream the caller passed to `pcap_fopen_offline` is closed at
//!   `pcap_close`, as libpcap does; standard input is never closed nor moved.
//!   Input that cannot be read twice (a pipe) has no layout: its stream
//!   cannot be positioned either, so `ftell` fails on it as it does in libpcap.

use libc::FILE;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use weir::tracefile::{Step, TraceHeader, TraceKind, Walker, MAX_RECORD_BYTES};

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

    /// The stream's descriptor: `pcap_get_selectable_fd` of a savefile, as in
    /// libpcap, and what [`Layout`] reads.
    pub fn fd(&self) -> RawFd {
        // SAFETY: fp is open for the life of this view.
        unsafe { libc::fileno(self.fp) }
    }

    /// Put the stream at `at` (if known), where `packets` records have been
    /// read, and hand it over.
    pub fn show(&self, at: Option<i64>, packets: u64) -> *mut FILE {
        // SAFETY: fp is open for the life of this view.
        match at.filter(|&at| unsafe { libc::fseek(self.fp, at as libc::c_long, libc::SEEK_SET) } == 0) {
            Some(at) => {
                self.set_at.set(Some(at));
                self.told.borrow_mut().insert(at, packets);
            }
            None => self.set_at.set(None),
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

/// libpcap's first read buffer for a savefile: its minimum for pcapng, its
/// maximum for pcap (smaller if the snapshot length is).
const FIRST_BUFFER: u32 = 2048;
/// Bytes asked of the file at a time while walking it.
const READ_AHEAD: usize = 64 * 1024;

/// A savefile walked with weir's parser, as far as the handle's reads went:
/// where each record ends, and how large libpcap's read buffer is by then.
pub struct Layout {
    /// The [`Savefile`] stream's descriptor, read with `pread`; the handle
    /// keeps the stream open for as long as it keeps this.
    fd: RawFd,
    /// The file offset the next read starts at.
    read_at: u64,
    header: TraceHeader,
    walker: Walker,
    /// Unconsumed file bytes; `window[0]` is at file offset `at`.
    window: Vec<u8>,
    at: u64,
    eof: bool,
    /// Whether the header step (pcap file header, first pcapng interface) was passed.
    opened: bool,
    packets: u64,
    bufsize: u32,
}

impl Layout {
    /// The layout of the savefile open on `fd` (a [`Savefile`]'s), or `None`
    /// for input that cannot be read a second time.
    pub fn open(fd: RawFd, header: &TraceHeader) -> Option<Layout> {
        // SAFETY: a zeroed stat is a valid buffer for fstat to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is the open stream's descriptor; st is a live buffer.
        // A pipe read again would take the packets: only a regular file has a layout.
        if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return None;
        }
        let mut layout = Layout {
            fd,
            read_at: 0,
            header: header.clone(),
            walker: Walker::new(),
            window: Vec::new(),
            at: 0,
            eof: false,
            opened: false,
            packets: 0,
            bufsize: 0,
        };
        layout.rewind().ok()?;
        Some(layout)
    }

    /// libpcap's buffer size for a savefile whose layout is unknown: what it
    /// starts with.
    pub fn first_bufsize(header: &TraceHeader) -> u32 {
        match header.kind {
            TraceKind::Pcap => header.snapshot.min(FIRST_BUFFER),
            TraceKind::PcapNg => FIRST_BUFFER,
        }
    }

    fn rewind(&mut self) -> std::io::Result<()> {
        self.read_at = 0;
        self.walker = Walker::new();
        self.window.clear();
        self.at = 0;
        self.eof = false;
        self.opened = false;
        self.packets = 0;
        self.bufsize = Layout::first_bufsize(&self.header);
        Ok(())
    }

    /// After `packets` records were read: the offset where libpcap's stream
    /// stands, and the size its buffer has grown to.
    pub fn after(&mut self, packets: u64) -> Result<(i64, u32), String> {
        if packets < self.packets {
            self.rewind().map_err(|e| e.to_string())?;
        }
        let mut pos = 0;
        while !self.opened || self.packets < packets {
            let step = self.walker.next(&self.window[pos..], self.at, self.eof).map_err(|e| e.to_string())?;
            let consumed = match step {
                Step::Need { need } => {
                    self.window.drain(..pos);
                    pos = 0;
                    self.fill(need).map_err(|e| e.to_string())?;
                    continue;
                }
                Step::End => break,
                Step::Header { consumed } => {
                    self.opened = true;
                    consumed
                }
                Step::Skip { consumed } => {
                    if self.at == 0 {
                        self.section_header(consumed);
                    }
                    consumed
                }
                Step::Packet(r) => {
                    self.packets += 1;
                    if self.header.kind == TraceKind::Pcap {
                        self.grow_record(r.data.len() as u32);
                    }
                    r.consumed
                }
            };
            pos += consumed;
            self.at += consumed as u64;
        }
        self.window.drain(..pos);
        Ok((self.at as i64, self.bufsize))
    }

    /// libpcap sizes a pcapng file's buffer to hold the first section
    /// header block at least. It reallocates it for any larger block later
    /// but never updates the size it reports, so that is all it says.
    fn section_header(&mut self, len: usize) {
        self.bufsize = self.bufsize.max(len as u32);
    }

    /// libpcap grows a pcap file's buffer to the next power of two above a
    /// record's captured length, at most the snapshot length.
    fn grow_record(&mut self, caplen: u32) {
        if caplen > self.bufsize {
            self.bufsize = caplen.next_power_of_two().min(self.header.snapshot);
        }
    }

    /// Read until the window holds `need` bytes or the file ends.
    fn fill(&mut self, need: usize) -> std::io::Result<()> {
        let need = need.min(MAX_RECORD_BYTES);
        while self.window.len() < need && !self.eof {
            let have = self.window.len();
            self.window.resize(have + READ_AHEAD.max(need - have), 0);
            let n = loop {
                let buf = &mut self.window[have..];
                // SAFETY: fd is the stream's open descriptor; buf is live and
                // writable for its length. pread leaves the descriptor's offset,
                // which the stream (and the caller's ftell) relies on, alone.
                let n = unsafe { libc::pread(self.fd, buf.as_mut_ptr().cast(), buf.len(), self.read_at as libc::off_t) };
                match usize::try_from(n) {
                    Ok(n) => break Ok(n),
                    Err(_) => match std::io::Error::last_os_error() {
                        e if e.kind() == std::io::ErrorKind::Interrupted => {}
                        e => break Err(e),
                    },
                }
            };
            let n = n.inspect_err(|_| self.window.truncate(have))?;
            self.read_at += n as u64;
            self.window.truncate(have + n);
            self.eof = n == 0;
        }
        Ok(())
    }
}
