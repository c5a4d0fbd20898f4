//! The bytes of a trace: a regular file mapped and walked in place (see
//! [`super::mapped`]), or read ahead into blocks on their own thread.
//!
//! Reading a page-cached trace is mostly the kernel copying pages into our
//! memory, and that copy does not depend on parsing. So a read-ahead thread
//! (the trace's "DMA engine") `read()`s the file into free blocks of a
//! [`BlockArena`] and hands them over in file order, while the capture thread
//! walks records in the blocks it has. Each block keeps [`ReadConfig::headroom`]
//! bytes in front of its data: a record that straddles two blocks is stitched by
//! copying its first part into the next block's headroom, so only that one
//! record's head is ever copied. A record longer than the headroom (a 256 KiB
//! packet, a 16 MiB pcapng block) is assembled in a private buffer instead.
//!
//! A mapped file needs none of this: its blocks are windows of the mapping
//! whose headroom already holds the bytes before them, so the reader only
//! moves to the next window, and there is no read-ahead thread.
//!
//! The capture thread sees one window of unconsumed bytes, `unread()`, that is
//! either inside a block (cells may point into it) or inside that private buffer.
//!
//! A regular file is read a full block at a time. A pipe, FIFO, socket or
//! terminal (a *stream*) hands each `read()` over as it returns, so records
//! that arrived are delivered at once, not when a block's worth has come. A
//! stream is read ahead from the start, its header too: its writer may stay
//! silent, and the wait for the header must end on a stop or at a deadline
//! (see [`Input::wait_until`]) where a `read()` would block until it writes; and
//! what a stream delivered but the run did not reach when it stopped (a
//! partial record, blocks read ahead) is counted ([`Input::unreached`]),
//! since unlike a file's rest it cannot be read again.
//!
//! A named FIFO is opened without waiting for a writer (`open(2)` would block
//! until one opens it, deaf to a stop and to the time limit): [`Input::open`]
//! waits for its first bytes (or a writer that came and went) in steps of
//! [`WRITER_STEP`], and gives `None` if a stop, or the deadline, comes first.

use super::mapped::{self, Watch};
use super::sys::{self, Readable};
use crate::capture::{Control, SourceError, StopReason};
use crate::pool::{BlockArena, BlockId, BlockMut, BlockRef, CaptureSide};
use crate::profile::{Profiler, Stage};
use crate::tracefile::MAX_RECORD_BYTES;
use crate::{Setting, SettingError};
use nix::sched::{sched_getaffinity, CpuSet};
use nix::unistd::Pid;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a trace is read; the defaults suit page-cached files on this class of
/// machine. Opening refuses blocks of 0 bytes or fewer than 4 blocks
/// ([`Setting::TraceReading`](crate::Setting::TraceReading)). A record that
/// straddles two blocks has its head copied into the second's headroom, or,
/// longer than the headroom, is copied whole into a buffer of its own.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReadConfig {
    /// File bytes per block: large enough to amortize a read() call, small enough
    /// that the walk finds the block still in L2.
    pub block_bytes: usize,
    /// Room in front of each block for the head of a straddling record.
    pub headroom: usize,
    /// Blocks in the arena: how far reading may run ahead of the slowest worker.
    pub blocks: usize,
    /// Whether a regular file is mapped and walked in place or `read(2)` into
    /// blocks; a mapped file's blocks are `block_bytes` strides of it, each
    /// with `headroom` bytes of the file before it.
    pub access: TraceAccess,
}

/// How a regular trace file's bytes reach the capture thread.
///
/// Measured on a 1.2 GB, 2M-packet trace in the page cache (bench/main_job.py):
/// reading copies every byte with `read(2)` on a read-ahead thread, and the
/// walk finds them in the cache the copy left; mapping has no copy, and its
/// cost is the page tables (filled ahead with MADV_POPULATE_READ, on a thread
/// of its own where there is a second CPU, with 2 MiB folios mapped whole) and
/// the walk's misses on bytes that come from memory. At first mapping lost on
/// two CPUs (1.15-1.3x the wall time of reading: the page faults were the walk's
/// own); once the page tables were filled ahead (on the other CPU where there
/// is one) and whole folios mapped, it took 0.62-0.69x the wall time of
/// reading on two CPUs and 0.50-0.87x on one (large folios - single pages),
/// so mapping is the default everywhere.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum TraceAccess {
    /// Map a regular file; read anything else (a pipe, a device), and a file
    /// the system will not map.
    #[default]
    Auto,
    /// Map it (or read it, where mapping is refused), and walk its records on
    /// the capture thread.
    Map,
    /// Map it, and walk its records on a thread of their own ahead of the
    /// capture thread, whatever the CPUs and the page cache (`auto` does so
    /// where there is a second CPU and the cache holds the file in large
    /// folios; see `prewalk.rs`).
    Walk,
    /// Read it ahead into blocks on a thread of its own.
    Read,
}

impl TraceAccess {
    /// Whether to try mapping a regular file.
    fn maps(self) -> bool {
        match self {
            TraceAccess::Auto | TraceAccess::Map | TraceAccess::Walk => true,
            TraceAccess::Read => false,
        }
    }
}

impl std::str::FromStr for TraceAccess {
    type Err = SettingError;

    fn from_str(s: &str) -> Result<Self, SettingError> {
        match s {
            "auto" => Ok(TraceAccess::Auto),
            "map" => Ok(TraceAccess::Map),
            "walk" => Ok(TraceAccess::Walk),
            "read" => Ok(TraceAccess::Read),
            _ => Err(SettingError::new(Setting::TraceReading, format!("{s:?}: expected auto, map, walk or read"))),
        }
    }
}

impl std::fmt::Display for TraceAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TraceAccess::Auto => "auto",
            TraceAccess::Map => "map",
            TraceAccess::Walk => "walk",
            TraceAccess::Read => "read",
        })
    }
}

impl Default for ReadConfig {
    fn default() -> Self {
        ReadConfig { block_bytes: 256 * 1024, headroom: 64 * 1024 + 64, blocks: 64, access: TraceAccess::Auto }
    }
}

impl ReadConfig {
    pub(crate) fn check(&self) -> Result<(), SettingError> {
        if self.block_bytes == 0 || self.blocks < 4 {
            return Err(SettingError::new(
                Setting::TraceReading,
                format!("needs blocks of at least 1 byte and at least 4 of them, not {self:?}"),
            ));
        }
        Ok(())
    }

    /// The reader's arena: every block with its headroom (mapped lazily; the
    /// lowest free block is taken, but a slow worker can hold them all).
    pub(crate) fn memory_bytes(&self) -> u64 {
        (self.headroom as u64).saturating_add(self.block_bytes as u64).saturating_mul(self.blocks as u64)
    }
}

/// Longest a wait for a FIFO's writer goes without looking at the stop and the deadline.
const WRITER_STEP: Duration = Duration::from_millis(50);
/// Blocks handed over ahead of the capture thread: look-ahead beyond the one it walks.
const AHEAD: usize = 4;
/// How long the capture thread waits for the next block before it publishes
/// partial chunks and takes back recycled ones (which may be what frees blocks).
const BLOCK_WAIT: Duration = Duration::from_millis(1);
/// How long the read-ahead thread sleeps when every block is in use.
const FREE_WAIT: Duration = Duration::from_micros(100);
/// The low-water mark: once fewer than 1/LOW_WATER of the blocks are free as a
/// block arrives, the capture sides are marked starved before reading has to
/// stop. A locality batch larger than the blocks can hold (B = 32,000 of
/// 600-byte packets is 19 MB, the arena 16 MiB) is then delivered while the
/// read-ahead still has a quarter of the arena to fill, instead of after it
/// stalled: reading and delivery overlap rather than take turns. Batches that
/// fit are not cut, since a quarter of the blocks stay free for them.
const LOW_WATER: usize = 4;

/// What the read-ahead thread sends.
enum Filled {
    /// A block with `len` file bytes after its headroom.
    Block(BlockMut, usize),
    End,
    Failed(std::io::Error, u64),
}

/// Where the unconsumed bytes are.
enum Buf {
    Empty,
    Block(BlockRef),
    /// Assembled from several blocks: a record longer than the headroom.
    Big(Vec<u8>),
}

impl Buf {
    fn bytes(&self) -> &[u8] {
        match self {
            Buf::Empty => &[],
            Buf::Block(b) => b.bytes(),
            Buf::Big(v) => v,
        }
    }
}

/// The input, and whether a block waits to be filled from it (see [`fill`]).
struct Source {
    file: File,
    regular: bool,
}

/// A regular file read before the capture thread starts (its header), then
/// with read-ahead (a stream's from the start); or a mapped file, walked
/// window after window.
enum Reader {
    Direct(Source),
    Ahead { rx: Receiver<Filled>, stop: Arc<AtomicBool> },
    Mapped(Mapped),
    Done,
}

/// A mapped file: the next block to take, and what tells of a truncation.
struct Mapped {
    next: BlockId,
    blocks: BlockId,
    /// The file's size when it was mapped.
    size: u64,
    watch: Arc<Watch>,
    /// Kept to compare the file's size at the end.
    file: File,
}

/// The next bytes of the input, after the headroom of a block.
enum Arrived {
    /// A block we filled: the carried bytes must be copied into its headroom.
    Filled(BlockMut, usize),
    /// A mapped file's window: its headroom already holds the carried bytes.
    InPlace(BlockRef, usize),
}

pub(super) struct Input {
    /// What to call the trace in messages.
    pub(crate) label: String,
    cfg: ReadConfig,
    arena: Arc<BlockArena>,
    reader: Reader,
    buf: Buf,
    /// Unconsumed bytes are `buf[pos..len]`; `buf[pos]` is at file offset `offset`.
    pub(crate) pos: usize,
    len: usize,
    offset_at_pos: u64,
    /// File offset of the next byte the reader will produce.
    read_offset: u64,
    pub(crate) eof: bool,
    /// Not a regular file: every read is handed over as it returns.
    stream: bool,
    /// Bytes read from the input so far, by whichever thread reads.
    read_total: Arc<AtomicU64>,
    /// A mapped file's lines asked for ahead of the walk; `None` when the file is read.
    ahead: Option<mapped::Ahead>,
    /// The CPUs the thread that opened the trace may use: the read-ahead thread
    /// takes them, not the capture thread's, which may be pinned to one CPU
    /// (`--cpus`) that it would then have to share with its own read-ahead.
    cpus: Option<CpuSet>,
    /// When waiting for the next block ends with a stop for the time limit
    /// (the wait for a stream's header, before the run enforces its limit).
    deadline: Option<Instant>,
}

/// A trace that cannot be opened for what the user named (no such file, no
/// permission, not a file) is bad input; anything else is the system's failure.
fn opening(label: String, error: std::io::Error) -> SourceError {
    use std::io::ErrorKind::{IsADirectory, NotADirectory, NotFound, PermissionDenied};
    match error.kind() {
        NotFound | PermissionDenied | IsADirectory | NotADirectory => SourceError::Invalid(format!("{label}: {error}")),
        _ => SourceError::Io { what: label, error },
    }
}

/// Open `path` for reading. A named FIFO is opened without waiting for a
/// writer, then waited on in steps until it has something to read; `None`
/// if `ctl` is asked to stop first, or `deadline` passes (which asks for a
/// stop with [`StopReason::TimeLimit`]).
fn open_file(path: &Path, label: &str, ctl: &Control, deadline: Option<Instant>) -> Result<Option<File>, SourceError> {
    use std::os::unix::fs::FileTypeExt;
    if !std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo()) {
        return File::open(path).map(Some).map_err(|e| opening(label.to_string(), e));
    }
    let file = sys::open_nonblocking(path).map_err(|e| opening(label.to_string(), e))?;
    let io = |what: &str, error| SourceError::Io { what: format!("{label}: {what}"), error };
    // An anonymous pipe (standard input from `cmd |`) is open already: its
    // writer's silence is the read-ahead's to wait out (see the module's doc).
    if !sys::is_pipe(&file).map_err(|e| io("asking its file system", e))? {
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                ctl.request_stop(StopReason::TimeLimit);
            }
            if ctl.stop_requested() {
                return Ok(None);
            }
            if sys::wait_readable(&file, WRITER_STEP).map_err(|e| io("waiting for a writer to open the FIFO", e))? == Readable::Now {
                break;
            }
        }
    }
    sys::set_blocking(&file).map_err(|e| io("making its reads blocking", e))?;
    Ok(Some(file))
}

impl Input {
    /// Open a trace (`None`: standard input). `None` when a stop (or
    /// `deadline`, see [`open_file`]) came before a FIFO's writer sent anything.
    pub(crate) fn open(
        path: Option<&Path>,
        cfg: ReadConfig,
        ctl: &Control,
        deadline: Option<Instant>,
    ) -> Result<Option<(Input, Option<u64>)>, SourceError> {
        cfg.check()?;
        let (label, path) = match path {
            Some(p) => (p.display().to_string(), p),
            None => ("stdin".to_string(), Path::new("/dev/stdin")),
        };
        let Some(file) = open_file(path, &label, ctl, deadline)? else { return Ok(None) };
        let meta = file.metadata().map_err(|source| SourceError::Io { what: label.clone(), error: source })?;
        if meta.is_dir() {
            return Err(SourceError::Invalid(format!("{label}: is a directory, not a trace file")));
        }
        let size = meta.is_file().then_some(meta.len());
        let stream = !meta.is_file();
        let map = if meta.is_file() && cfg.access.maps() { mapped::map(&file, meta.len(), cfg.block_bytes, cfg.headroom) } else { None };
        let mut ahead = None;
        let (arena, reader) = match map {
            Some(m) => {
                let size = meta.len();
                ahead = Some(mapped::Ahead::new(&m, size));
                (m.arena, Reader::Mapped(Mapped { next: 0, blocks: m.blocks, size, watch: m.watch, file }))
            }
            None => {
                let arena = BlockArena::new(cfg.headroom + cfg.block_bytes, cfg.blocks).map_err(|error| SourceError::Io {
                    what: format!("{label}: mapping {} for reading", crate::memory::Bytes(cfg.memory_bytes())),
                    error,
                })?;
                (arena, Reader::Direct(Source { file, regular: meta.is_file() }))
            }
        };
        let input = Input {
            label,
            cfg,
            arena,
            reader,
            buf: Buf::Empty,
            pos: 0,
            len: 0,
            offset_at_pos: 0,
            read_offset: 0,
            eof: false,
            stream,
            read_total: Arc::new(AtomicU64::new(0)),
            ahead,
            cpus: sched_getaffinity(Pid::from_raw(0)).ok(),
            deadline: None,
        };
        Ok(Some((input, size)))
    }

    /// Whether the input is a stream (not a regular file).
    pub(crate) fn is_stream(&self) -> bool {
        self.stream
    }

    /// From now on, a wait for the next block that reaches `deadline` asks
    /// for a stop with [`StopReason::TimeLimit`] and ends as a stop does
    /// (`None`: no deadline). Only a read-ahead input waits: a stream's.
    pub(crate) fn wait_until(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    pub(crate) fn unread(&self) -> &[u8] {
        &self.buf.bytes()[self.pos..self.len]
    }

    /// The whole current buffer, for turning a record's range into bytes.
    pub(crate) fn buffer(&self) -> &[u8] {
        self.buf.bytes()
    }

    /// Consume `n` bytes.
    pub(crate) fn advance(&mut self, n: usize) {
        debug_assert!(self.pos + n <= self.len);
        self.pos += n;
        self.offset_at_pos += n as u64;
        if let Some(a) = &mut self.ahead {
            a.walked(self.offset_at_pos);
        }
    }

    /// A mapped file's bytes, whole, for a thread of its own to walk its
    /// records ahead of the capture thread, and the CPUs it may use; `None`
    /// for a file that is read, for `map`, and for `auto` where the walk
    /// would not gain (see [`TraceAccess::Walk`]).
    pub(super) fn hand_to_a_walker(&mut self) -> Option<(mapped::FileBytes, Option<CpuSet>)> {
        let force = match self.cfg.access {
            TraceAccess::Auto => false,
            TraceAccess::Walk => true,
            TraceAccess::Map | TraceAccess::Read => return None,
        };
        Some((self.ahead.as_mut()?.hand_to_a_walker(force)?, self.cpus))
    }

    /// The walking thread did not start: the walk is the capture thread's again.
    pub(super) fn walk_here(&mut self) {
        if let Some(a) = &mut self.ahead {
            a.walk_here();
        }
    }

    /// File offset of the first unconsumed byte.
    pub(crate) fn offset(&self) -> u64 {
        self.offset_at_pos
    }

    /// The block the unconsumed bytes are in, if they are in one.
    pub(crate) fn block(&self) -> Option<&BlockRef> {
        match &self.buf {
            Buf::Block(b) => Some(b),
            _ => None,
        }
    }

    /// Start reading ahead on a thread of its own, from where the header ended
    /// (a mapped file: filling its page tables ahead, where there is a CPU for
    /// it); a profiled run gets the thread's CPU time as it ends.
    pub(crate) fn start_read_ahead(&mut self, profiler: Option<Arc<Profiler>>) -> Result<(), SourceError> {
        if let Some(a) = &mut self.ahead {
            return a
                .populate_on_a_thread(self.cpus, profiler)
                .map_err(|source| SourceError::Io { what: "starting the thread that maps the trace ahead".into(), error: source });
        }
        if !matches!(self.reader, Reader::Direct(_)) {
            return Ok(());
        }
        let Reader::Direct(source) = std::mem::replace(&mut self.reader, Reader::Done) else { return Ok(()) };
        if self.eof {
            return Ok(());
        }
        let (tx, rx) = sync_channel(AHEAD);
        let stop = Arc::new(AtomicBool::new(false));
        let ahead = ReadAhead {
            source,
            arena: Arc::clone(&self.arena),
            cfg: self.cfg,
            tx,
            stop: Arc::clone(&stop),
            offset: self.read_offset,
            read_total: Arc::clone(&self.read_total),
        };
        super::spawn_helper("weir-readahead", self.cpus, profiler, "read-ahead", Stage::ReadAhead, move || ahead.run())
            .map_err(|source| SourceError::Io { what: "starting the read-ahead thread".into(), error: source })?;
        self.reader = Reader::Ahead { rx, stop };
        Ok(())
    }

    /// Make at least `need` unconsumed bytes available, or reach the end of input.
    /// While waiting for a block, `sides` are flushed and drained, since their
    /// chunks may hold the blocks reading needs. Returns false if a stop came first.
    pub(crate) fn refill(&mut self, need: usize, sides: &mut [CaptureSide], ctl: &Control) -> Result<bool, SourceError> {
        debug_assert!(need <= MAX_RECORD_BYTES && need > self.len - self.pos);
        while self.len - self.pos < need && !self.eof {
            let Some(next) = self.next_filled(sides, ctl)? else { return Ok(false) };
            let Some(arrived) = next else {
                self.eof = true;
                break;
            };
            let carry = self.len - self.pos;
            let h = self.cfg.headroom;
            let (in_place, filled) = match &arrived {
                Arrived::Filled(_, n) => (false, *n),
                Arrived::InPlace(_, n) => (true, *n),
            };
            // A read block's carry goes to a private buffer once one is in use;
            // a window's is in its headroom wherever it was held.
            if (!in_place && matches!(self.buf, Buf::Big(_))) || carry > h || carry + filled < need {
                // Assemble in a private buffer: the record does not fit one block.
                let mut big = match std::mem::replace(&mut self.buf, Buf::Empty) {
                    Buf::Big(mut v) => {
                        v.drain(..self.pos);
                        v
                    }
                    other => other.bytes()[self.pos..self.len].to_vec(),
                };
                match arrived {
                    Arrived::Filled(mut b, _) => big.extend_from_slice(&b.bytes()[h..h + filled]),
                    Arrived::InPlace(b, _) => big.extend_from_slice(&b.bytes()[h..h + filled]),
                }
                self.len = big.len();
                self.pos = 0;
                self.buf = Buf::Big(big);
            } else {
                let start = h - carry;
                let block = match arrived {
                    Arrived::Filled(mut block, _) => {
                        block.bytes()[start..h].copy_from_slice(self.unread());
                        block.freeze()
                    }
                    Arrived::InPlace(block, _) => {
                        debug_assert_eq!(&block.bytes()[start..h], self.unread(), "a window's headroom is the file before it");
                        block
                    }
                };
                self.buf = Buf::Block(block);
                self.pos = start;
                self.len = h + filled;
            }
        }
        Ok(true)
    }

    /// What to tell the user when mapping was asked for and not done.
    pub(crate) fn note(&self) -> Option<String> {
        if !matches!(self.cfg.access, TraceAccess::Map | TraceAccess::Walk) || matches!(self.reader, Reader::Mapped(_)) {
            return None;
        }
        let why = if self.stream { "it is not a regular file" } else { "the system refused to map it" };
        Some(format!("{}: mapping the trace was asked for, but {why}: it is read instead", self.label))
    }

    /// True if a mapped file's page vanished under us at a file offset below
    /// `end`: bytes before the cut are still the file's, so a record that
    /// ends by then may be delivered even after a later page was found gone.
    #[inline]
    pub(crate) fn cut_before(&self, end: u64) -> bool {
        matches!(&self.reader, Reader::Mapped(m) if m.watch.lost().is_some_and(|at| at < end))
    }

    /// The error to end the run with if a mapped file was truncated under us;
    /// `at_end` also compares its size with the size it had when mapped (a cut
    /// inside its last page shows as zeros, without a fault).
    pub(crate) fn changed(&self, at_end: bool) -> Option<SourceError> {
        self.changed_before(at_end, u64::MAX)
    }

    /// As [`changed`](Self::changed), for a cut below file offset `before`
    /// only: a thread walking ahead (`prewalk.rs`) may find a cut long before
    /// the capture thread gets there, and what lies before it is still the file's.
    fn changed_before(&self, at_end: bool, before: u64) -> Option<SourceError> {
        let Reader::Mapped(m) = &self.reader else { return None };
        let now = if at_end { m.file.metadata().ok().map(|md| md.len()) } else { None };
        let lost = match (m.watch.lost(), now) {
            (Some(at), _) if at < before => at,
            (None, Some(len)) if len < m.size => len,
            _ => return None,
        };
        Some(SourceError::Io {
            what: self.label.clone(),
            error: std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the file was truncated while it was being read: it had {} bytes when opened, and the bytes from offset {lost} on are gone; \
                     the packets before that were delivered, what a packet read after the cut holds is not the file's",
                    m.size
                ),
            ),
        })
    }

    /// The next filled block, `Some(None)` at the end of input, `None` on a stop.
    fn next_filled(&mut self, sides: &mut [CaptureSide], ctl: &Control) -> Result<Option<Option<Arrived>>, SourceError> {
        if matches!(self.reader, Reader::Mapped(_)) {
            return self.next_window().map(Some);
        }
        let mut ended = false;
        let filled = match &mut self.reader {
            Reader::Done | Reader::Mapped(_) => return Ok(Some(None)),
            Reader::Direct(source) => {
                let filled = read_block(source, &self.arena, self.cfg, self.read_offset, &self.label)?;
                if let Filled::Block(_, n) = &filled {
                    // Relaxed: a count read after the run, once the threads are done with it.
                    self.read_total.fetch_add(*n as u64, Ordering::Relaxed);
                }
                // A regular file's read() comes back short only at its end: a
                // small file is then read whole with its header, and no thread
                // is started to read ahead what is not there.
                ended = source.regular && matches!(filled, Filled::Block(_, n) if n < self.cfg.block_bytes);
                filled
            }
            Reader::Ahead { rx, .. } => {
                let mut flushed = false;
                loop {
                    match rx.recv_timeout(BLOCK_WAIT) {
                        Ok(f) => {
                            self.check_low_water(sides);
                            break f;
                        }
                        Err(RecvTimeoutError::Disconnected) => break Filled::End,
                        Err(RecvTimeoutError::Timeout) => {
                            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                                ctl.request_stop(StopReason::TimeLimit);
                            }
                            if ctl.stop_requested() {
                                return Ok(None);
                            }
                            if !flushed {
                                sides.iter_mut().for_each(CaptureSide::flush);
                                flushed = true;
                            }
                            sides.iter_mut().for_each(CaptureSide::reclaim);
                            // No free block: the read-ahead thread waits for what the
                            // workers hold, not for the disk.
                            if self.arena.free_blocks() == 0 {
                                sides.iter_mut().for_each(CaptureSide::mark_starved);
                            }
                        }
                    }
                }
            }
        };
        if ended {
            self.reader = Reader::Done;
        }
        match filled {
            Filled::Block(b, n) => {
                self.read_offset += n as u64;
                Ok(Some(Some(Arrived::Filled(b, n))))
            }
            Filled::End => {
                self.reader = Reader::Done;
                Ok(Some(None))
            }
            Filled::Failed(source, at) => Err(SourceError::Io { what: format!("{} at byte offset {at}", self.label), error: source }),
        }
    }

    /// A mapped file's next window, `None` at its end; an error if the file
    /// was truncated under us.
    fn next_window(&mut self) -> Result<Option<Arrived>, SourceError> {
        let Reader::Mapped(m) = &self.reader else { return Ok(None) };
        let (id, at_end) = (m.next, m.next == m.blocks);
        // A cut inside this window or later is found record by record (`cut_before`).
        if let Some(e) = self.changed_before(at_end, u64::from(id) * self.cfg.block_bytes as u64) {
            return Err(e);
        }
        let Reader::Mapped(m) = &mut self.reader else { return Ok(None) };
        if at_end {
            return Ok(None);
        }
        m.next += 1;
        let from = u64::from(id) * self.cfg.block_bytes as u64;
        // A window is at most a stride of the file, so this fits a usize.
        let n = (m.size - from).min(self.cfg.block_bytes as u64) as usize;
        let block =
            self.arena.adopt(id).ok_or_else(|| SourceError::Invalid(format!("{}: block {id} of the mapping taken twice", self.label)))?;
        self.read_offset += n as u64;
        // Relaxed: a count read after the run, once the threads are done with it.
        self.read_total.fetch_add(n as u64, Ordering::Relaxed);
        Ok(Some(Arrived::InPlace(block, n)))
    }

    /// Bytes a stream delivered that the run did not reach: read ahead, or
    /// part of a record. Zero for a regular file, whose rest is still there.
    pub(crate) fn unreached(&self) -> u64 {
        if !self.stream {
            return 0;
        }
        // Relaxed: blocks sent but not received were counted before they were
        // sent. A read the read-ahead thread was blocked in when the run stopped
        // may still return after this: those bytes are not in the count.
        self.read_total.load(Ordering::Relaxed).saturating_sub(self.offset_at_pos)
    }

    /// Mark `sides` starved if few blocks are free even after taking back what
    /// the workers recycled (see [`LOW_WATER`]).
    fn check_low_water(&self, sides: &mut [CaptureSide]) {
        let low = self.cfg.blocks / LOW_WATER;
        if self.arena.free_blocks() >= low {
            return;
        }
        // Chunks recycled but not yet taken back still hold their blocks.
        sides.iter_mut().for_each(CaptureSide::reclaim);
        if self.arena.free_blocks() < low {
            sides.iter_mut().for_each(CaptureSide::mark_starved);
        }
    }
}

impl Drop for Input {
    /// Tell the read-ahead thread to stop and let it go without joining: on a pipe
    /// it may sit in read() until the writer sends more, and a stop must not wait
    /// for that. It owns only its arena handle and the block it fills.
    fn drop(&mut self) {
        if let Reader::Ahead { stop, .. } = &self.reader {
            // Relaxed: a flag; the thread also sees the channel close when `rx` drops.
            stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Read one block from `source` on the calling thread. A block with no bytes means the end.
fn read_block(source: &mut Source, arena: &Arc<BlockArena>, cfg: ReadConfig, offset: u64, label: &str) -> Result<Filled, SourceError> {
    // Before read-ahead starts the arena is untouched, so a block is always free.
    let mut block = arena.acquire().ok_or_else(|| SourceError::Invalid(format!("{label}: no free read block")))?;
    match fill(source, &mut block.bytes()[cfg.headroom..]) {
        Ok(0) => Ok(Filled::End),
        Ok(n) => Ok(Filled::Block(block, n)),
        Err(e) => Err(SourceError::Io { what: format!("{label} at byte offset {offset}"), error: e }),
    }
}

/// read() into `dst`; returns the bytes read, 0 only at the end of input. A
/// regular file is read until `dst` is full, to amortize the calls. Any other
/// input (a pipe, a socket, a terminal) hands over what its first read()
/// returned: its writer may pause, as a capture writing to a pipe does between
/// packets, and the records already read must reach the application then, as
/// libpcap delivers each record it has read, not once a block's worth came.
fn fill(source: &mut Source, dst: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < dst.len() && (source.regular || n == 0) {
        match source.file.read(&mut dst[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The read-ahead thread's state.
struct ReadAhead {
    source: Source,
    arena: Arc<BlockArena>,
    cfg: ReadConfig,
    tx: SyncSender<Filled>,
    stop: Arc<AtomicBool>,
    offset: u64,
    read_total: Arc<AtomicU64>,
}

impl ReadAhead {
    fn run(mut self) {
        loop {
            let mut block = loop {
                // Relaxed: a flag.
                if self.stop.load(Ordering::Relaxed) {
                    return;
                }
                match self.arena.acquire() {
                    Some(b) => break b,
                    None => std::thread::sleep(FREE_WAIT),
                }
            };
            let msg = match fill(&mut self.source, &mut block.bytes()[self.cfg.headroom..]) {
                Ok(0) => Filled::End,
                Ok(n) => {
                    self.offset += n as u64;
                    // Relaxed: see `Input::unreached`.
                    self.read_total.fetch_add(n as u64, Ordering::Relaxed);
                    Filled::Block(block, n)
                }
                Err(e) => Filled::Failed(e, self.offset),
            };
            let last = !matches!(msg, Filled::Block(..));
            if self.tx.send(msg).is_err() || last {
                return;
            }
        }
    }
}
