//! Writing a capture across several files: rotate by size, by time or by packet
//! count, keep at most N files, at most N bytes or files no older than D, and
//! name them from a pattern; or write one stream the caller opened (standard
//! output), which never rotates.
//!
//! The files are pcap or pcapng ([`FileSpec`]) or any other format that
//! brings its own [`FileKind`]: what a file opens with (a header, the
//! templates of `weir flows`' IPFIX files) and how its records are written.
//! Rotation, naming, the limits and syncing are the same for all; in what
//! follows, a *packet* is whatever record the format holds.
//!
//! Names: the pattern is expanded with strftime conversions (`%Y%m%d-%H%M%S`, UTC)
//! from the time of the first packet that goes into the file, and `{seq}` becomes
//! the file's sequence number in this run (0, 1, ...). When rotation is on and the
//! pattern has neither, weir inserts `.{seq}` before the extension
//! (`out.pcap` → `out.0.pcap`, `out.1.pcap`), and any name that would repeat one
//! already written in this run gets `.{seq}` too, so no file is ever overwritten
//! by its own run.
//!
//! Time rotation follows packet timestamps, aligned to multiples of the period
//! (with `-G 3600` every file starts on the hour), so replaying a trace splits it
//! the same way as capturing it live did. A packet older than the current file's
//! window (timestamps from several queues interleave) stays in the current file.
//!
//! With a file limit, the oldest file of this run is deleted when a new one would
//! exceed it. A capture with no packets still leaves one valid, empty file.
//!
//! # The rolling buffer: a byte budget and an age limit
//!
//! [`RotationPolicy::budget_bytes`] keeps the files within a number of bytes
//! in total, the open file included; [`RotationPolicy::max_age`] deletes
//! the files whose newest packet is older than a duration. Both delete the
//! oldest files first and never the open one. The contract:
//!
//! * **The budget is never exceeded, not even for a moment.** It needs a size
//!   limit ([`RotationPolicy::max_bytes`]), which bounds the open file, and
//!   room for at least two files of that size (one closed, one open): a
//!   smaller budget is refused when the writer is made. Before a new file is
//!   created, the oldest closed files are deleted until the closed files and
//!   a whole new file fit (closed total + `max_bytes` ≤ budget); so the
//!   budget holds while the new file fills, and the oldest data goes first.
//!   For pcap and pcapng, `max_bytes` must also hold a file header and the
//!   largest packet the snapshot length allows, since a file's first packet
//!   goes in whatever its size. Should a larger record come anyway (another
//!   format, or a packet longer than the declared snapshot length), closed
//!   files are deleted to make room for it, and when even that cannot make
//!   room, the write fails with [`RotateError::OverBudget`] rather than
//!   exceed the budget. Sizes are file lengths (what `ls -l` and `du
//!   --apparent-size` show): each file may take up to one file-system block
//!   more on disk.
//! * **Age is packet time**, as time rotation is: a file is old when its
//!   newest packet is more than `max_age` older than the newest packet
//!   written, checked at every packet (one comparison). A replayed trace ages
//!   the same way as the live capture did. With no packets, packet time
//!   stands still; a caller on a live source whose clock must advance through
//!   quiet periods calls [`RotatingWriter::expire`] with the wall clock.
//!   An age limit needs rotation, or the only file would be the open one.
//! * **After a restart** (a service run with `Restart=on-failure`, say), the
//!   files earlier runs left in the pattern's directory count too, as an
//!   operator expects of a rolling buffer: when a budget or an age limit is
//!   set, the first file opened (or [`RotatingWriter::prepare`]) lists the
//!   directory and adopts every regular file whose name the pattern could
//!   have produced: its literal text, with each strftime conversion matching
//!   a run of digits (names and zones a run of letters and signs), `{seq}`
//!   and the `.N` weir inserts before the extension matching a run of
//!   digits. Nothing else is ever deleted: not a file of another name, not a
//!   symbolic link, not a directory. Adopted files are older than this run's
//!   and go first, oldest first by modification time; their age is their
//!   modification time. The sequence numbers of this run continue after the
//!   highest one among them, so a restart never overwrites a file it counts.
//!   A pattern whose directory part has conversions or `{seq}` names many
//!   directories: then only this run's files count.
//! * **Every deletion is reported**: [`RotatingWriter::take_deletions`]
//!   hands over the deletions since it was last called, each with its file,
//!   size, reason and, when the deletion failed, the error;
//!   [`RotatingWriter::deletion_totals`] counts them all. A file that cannot
//!   be deleted stays counted toward the budget (it is still on disk) and is
//!   not tried again; the next oldest goes in its place, and when none is
//!   left the write fails ([`RotateError::OverBudget`]). A file already gone
//!   (removed by hand) counts as deleted.
//!
//! What a kill leaves: a file's header reaches the kernel before the file
//! appears under its name (it is written under a hidden name beside it, then
//! renamed), so no capture file is ever left empty or headerless by a kill; a
//! kill in that instant leaves at most the hidden `.NAME.weir-new`. A file is
//! closed (its buffer handed to the kernel, then `fdatasync`ed with its
//! directory entry) before the next one is opened, so every closed file is
//! complete even after a power loss. The open file holds what [`RotatingWriter::flush`]
//! or a full buffer last handed over; its last packet may be cut short. Only
//! regular files are synced: pipes, FIFOs and devices (`/dev/null`) have nothing
//! to sync and refuse it.
//!
//! [`RotatingWriter::prepare`] opens the first file before capture starts, as
//! tcpdump does, so a name that cannot be written is reported then and not at
//! the first packet.

mod names;
use super::{check_link_type, FileFormat, LinkTypeError, TraceWriter, TsPrecision};
use crate::LinkType;
use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, Utc};
use names::NameMatcher;
use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

/// When to start a new file, and which files to keep.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Start a new file before one would grow past this many bytes.
    pub max_bytes: Option<u64>,
    /// Start a new file at each multiple of this many seconds of packet time.
    pub max_seconds: Option<u64>,
    /// Start a new file after this many packets.
    pub max_packets: Option<u64>,
    /// Keep at most this many files of this run, deleting the oldest.
    pub max_files: Option<usize>,
    /// Keep every file, the open one and those of earlier runs included,
    /// within this many bytes in total, deleting the oldest (see the module
    /// documentation). Needs `max_bytes`, and at least twice it.
    pub budget_bytes: Option<u64>,
    /// Delete the files whose newest packet is older than this, in packet
    /// time; files of earlier runs by their modification time. Needs rotation.
    pub max_age: Option<Duration>,
}

impl RotateError {
    /// True when what the user named is at fault (no such directory, no
    /// permission, a read-only file system, a bad pattern, limit or link
    /// type), not the system (a full disk, an I/O error, a budget that
    /// undeletable files fill): exit 2 rather than 1 in the CLI.
    pub fn is_bad_input(&self) -> bool {
        use io::ErrorKind::{IsADirectory, NotADirectory, NotFound, PermissionDenied, ReadOnlyFilesystem};
        match self {
            RotateError::Io { source, .. } => {
                matches!(source.kind(), NotFound | PermissionDenied | ReadOnlyFilesystem | IsADirectory | NotADirectory)
            }
            RotateError::OverBudget { .. } => false,
            _ => true,
        }
    }
}

impl RotationPolicy {
    /// Whether any limit starts new files; a file limit alone does not.
    pub fn rotates(&self) -> bool {
        self.max_bytes.is_some() || self.max_seconds.is_some() || self.max_packets.is_some()
    }

    /// Whether files of earlier runs count (a budget or an age limit is set).
    fn rolls(&self) -> bool {
        self.budget_bytes.is_some() || self.max_age.is_some()
    }

    /// The checks that need nothing but the policy.
    fn check(&self) -> Result<(), RotateError> {
        if self.max_bytes == Some(0) || self.max_packets == Some(0) || self.max_seconds == Some(0) {
            return Err(RotateError::Policy("size, time and packet limits start at 1"));
        }
        if self.max_files == Some(0) {
            return Err(RotateError::Policy("the file limit starts at 1"));
        }
        if self.max_age == Some(Duration::ZERO) {
            return Err(RotateError::Policy("the age limit must be longer than 0"));
        }
        if self.max_age.is_some() && !self.rotates() {
            return Err(RotateError::Budget(
                "an age limit needs rotation by size, time or packet count: without it the only file is the open one, \
                 which is never deleted"
                    .into(),
            ));
        }
        if let Some(budget) = self.budget_bytes {
            let Some(max) = self.max_bytes else {
                return Err(RotateError::Budget(
                    "a byte budget needs a size limit on each file, which bounds the open file: without one the open file \
                     could outgrow the budget"
                        .into(),
                ));
            };
            if budget < max.saturating_mul(2) {
                return Err(RotateError::Budget(format!(
                    "a byte budget of {budget} bytes cannot hold two files of the size limit ({max} bytes each): the oldest \
                     closed file goes before a new one opens, so the budget must hold at least one closed file and the open one"
                )));
            }
        }
        Ok(())
    }
}

/// What the files of a rotation are: how each one starts. [`FileSpec`]
/// makes pcap and pcapng files; another format brings its own.
pub trait FileKind {
    /// Writes the contents of one file.
    type Writer: FileWriter;
    /// Starts a file on `file`: writes what every file opens with (a header,
    /// templates), so that the file is valid from the moment it is opened.
    fn start(&mut self, file: File) -> io::Result<Self::Writer>;
}

/// Writes the contents of one file of a rotation.
pub trait FileWriter {
    /// Bytes written so far, what the file opened with included.
    fn bytes_written(&self) -> u64;
    /// Records written so far: what [`RotationPolicy::max_packets`] counts.
    fn records_written(&self) -> u64;
    /// Hands everything buffered to the kernel.
    fn flush(&mut self) -> io::Result<()>;
    /// Writes out what is buffered and hands back the file.
    fn finish(self) -> io::Result<File>;
}

impl FileKind for FileSpec {
    type Writer = TraceWriter<File>;
    fn start(&mut self, file: File) -> io::Result<TraceWriter<File>> {
        TraceWriter::new(file, self.format, self.link, self.snaplen, self.precision)
    }
}

impl FileWriter for TraceWriter<File> {
    fn bytes_written(&self) -> u64 {
        TraceWriter::bytes_written(self)
    }
    fn records_written(&self) -> u64 {
        self.packets_written()
    }
    fn flush(&mut self) -> io::Result<()> {
        TraceWriter::flush(self)
    }
    fn finish(self) -> io::Result<File> {
        TraceWriter::finish(self)
    }
}

/// What every file of the rotation holds.
#[derive(Copy, Clone, Debug)]
pub struct FileSpec {
    /// The file format.
    pub format: FileFormat,
    /// The link type every file declares; the format must hold it.
    pub link: LinkType,
    /// The snapshot length every file declares, in bytes; packets are not cut to it.
    pub snaplen: u32,
    /// The timestamp resolution.
    pub precision: TsPrecision,
}

impl FileSpec {
    /// The largest file a first packet can make: the header and one packet
    /// of the snapshot length.
    fn largest_first_packet_file(&self) -> io::Result<u64> {
        let w = TraceWriter::new(io::sink(), self.format, self.link, self.snaplen, self.precision)?;
        Ok(w.bytes_written() + w.record_len(self.snaplen as usize))
    }
}

/// Why a [`RotatingWriter`] was refused or could not write.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RotateError {
    /// The name pattern is empty or has an invalid strftime conversion.
    #[error("output name pattern {pattern:?}: {reason}")]
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Creating, writing, syncing or deleting a file, or probing or listing
    /// its directory, failed. Shown as the path; the I/O error follows as its source.
    #[error("{}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A limit of the [`RotationPolicy`] is 0; the text says which.
    #[error("rotation limits must be positive: {0}")]
    Policy(&'static str),
    /// The byte budget or the age limit cannot work with the other limits;
    /// the text says why, with the numbers.
    #[error("{0}")]
    Budget(String),
    /// Writing on would exceed the byte budget: the files that could make
    /// room could not be deleted, or one record is larger than the budget.
    #[error("the byte budget of {budget} bytes would be exceeded: {reason}")]
    OverBudget {
        /// The budget.
        budget: u64,
        /// Why no room could be made, naming the files.
        reason: String,
    },
    /// The file format cannot hold the link type.
    #[error(transparent)]
    LinkType(#[from] LinkTypeError),
}

/// Why a file was deleted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// To keep [`RotationPolicy::budget_bytes`].
    Budget,
    /// Older than [`RotationPolicy::max_age`].
    Age,
    /// One more than [`RotationPolicy::max_files`].
    FileLimit,
}

impl std::fmt::Display for DeleteReason {
    /// The word a log line starts with: `budget`, `max-age`, `max-files`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeleteReason::Budget => "budget",
            DeleteReason::Age => "max-age",
            DeleteReason::FileLimit => "max-files",
        })
    }
}

/// A file the writer deleted, or tried to.
#[derive(Debug)]
pub struct Deletion {
    /// The file, as the pattern names it.
    pub path: PathBuf,
    /// Its length when it was closed (or found, for a file of an earlier run).
    pub bytes: u64,
    /// Why it was deleted.
    pub reason: DeleteReason,
    /// Left by an earlier run, found in the directory when this one started.
    pub earlier_run: bool,
    /// Why the deletion failed, if it did: the file is still on disk, still
    /// counts toward the budget, and is not tried again.
    pub error: Option<io::Error>,
}

/// Every deletion of a writer since it was made.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DeletionTotals {
    /// Files deleted.
    pub files: u64,
    /// Bytes they held.
    pub bytes: u64,
    /// Deletions that failed.
    pub failed: u64,
    /// Bytes of the files that could not be deleted, still on disk.
    pub failed_bytes: u64,
    /// Deletions counted here but not listed by
    /// [`RotatingWriter::take_deletions`]: more than [`PENDING_DELETIONS`]
    /// waited for it.
    pub unlisted: u64,
}

/// The most deletions [`RotatingWriter::take_deletions`] holds for its
/// caller; those beyond are only counted ([`DeletionTotals::unlisted`]), so a
/// caller that never asks does not make the writer grow without end.
pub const PENDING_DELETIONS: usize = 4096;

/// The outcome of [`RotatingWriter::finish_with_deletions`].
#[derive(Debug)]
pub struct Finished {
    /// The files this run wrote and kept, oldest first (for a stream, its name).
    pub files: Vec<PathBuf>,
    /// The deletions not yet taken with [`RotatingWriter::take_deletions`].
    pub deletions: Vec<Deletion>,
    /// Every deletion since the writer was made.
    pub totals: DeletionTotals,
}

struct Current<W> {
    writer: W,
    path: PathBuf,
    /// End of this file's time window, in ns, when rotating by time; set by
    /// the file's first packet (a file opened before any packet has none yet).
    window_end: Option<u64>,
    /// A regular file, which can be synced (pipes, FIFOs and devices cannot).
    regular: bool,
    /// The newest packet time written into it, in ns (0 before any).
    newest_ns: u64,
}

/// A closed file the writer accounts for.
struct Kept {
    path: PathBuf,
    /// Its length: what it counts toward the budget.
    bytes: u64,
    /// Its newest packet time, or for a file of an earlier run its
    /// modification time, in ns: what its age is measured from.
    newest_ns: u64,
    /// Left by an earlier run.
    earlier: bool,
}

/// Where the files go.
enum Target {
    /// Files named from a pattern, created as they are needed.
    Pattern { pattern: String, has_conversion: bool, has_seq: bool },
    /// One stream the caller opened (standard output), under a name for messages.
    Stream { file: Option<File>, name: PathBuf },
}

/// Writes a capture to files named from a pattern, rotating them by the
/// [`RotationPolicy`], or to one stream; see the module documentation.
pub struct RotatingWriter<K: FileKind = FileSpec> {
    target: Target,
    kind: K,
    policy: RotationPolicy,
    cur: Option<Current<K::Writer>>,
    /// A file of this run was opened (and the first file is not to be made
    /// by [`finish`](Self::finish)).
    started: bool,
    seq: u64,
    /// The closed files on disk that the limits apply to, oldest first:
    /// those of earlier runs (the first `earlier_left`), then this run's.
    kept: VecDeque<Kept>,
    earlier_left: usize,
    /// Bytes of the closed files, kept and undeletable: what the budget
    /// holds besides the open file.
    closed_bytes: u64,
    /// Every name this run used, and those of earlier runs it adopted.
    used: HashSet<PathBuf>,
    /// Earlier runs' files were looked for (once, before the first file).
    scanned: bool,
    /// [`start_next_file`](RotatingWriter::start_next_file) was called: the
    /// next packet goes into a new file.
    next_file_asked: bool,
    /// Files and bytes of earlier runs adopted.
    adopted: (usize, u64),
    /// The largest header a file of this run opened with: the room a new
    /// file needs at once, when it exceeds the size limit.
    header_bytes: u64,
    /// The newest packet time written, in ns: the age limit's "now".
    now_ns: u64,
    /// The earliest packet time at which some kept file becomes too old.
    expire_at: u64,
    pending: Vec<Deletion>,
    totals: DeletionTotals,
    /// The first file that could not be deleted, with its error: named when
    /// the budget cannot be kept.
    undeletable: Option<(PathBuf, String)>,
}

const SEQ: &str = "{seq}";

impl RotatingWriter<FileSpec> {
    /// Files named from `pattern` (see the module documentation) in the shape
    /// of `spec`, started anew as `policy` says. Nothing is created until
    /// [`prepare`](Self::prepare) or the first packet.
    ///
    /// # Errors
    ///
    /// [`RotateError::Policy`] for a limit of 0, [`RotateError::Budget`] for
    /// a budget or age limit the other limits cannot keep (a budget also
    /// needs `max_bytes` to hold a file header and a packet of `spec`'s
    /// snapshot length), [`RotateError::Pattern`] for an empty pattern or an
    /// invalid conversion, [`RotateError::LinkType`] for a link type the
    /// format cannot hold.
    pub fn new(pattern: &str, spec: FileSpec, policy: RotationPolicy) -> Result<Self, RotateError> {
        check_link_type(spec.format, spec.link)?;
        policy.check()?;
        if let (Some(_), Some(max)) = (policy.budget_bytes, policy.max_bytes) {
            let need = spec.largest_first_packet_file().map_err(|source| RotateError::Io { path: pattern.into(), source })?;
            if max < need {
                return Err(RotateError::Budget(format!(
                    "with a byte budget, the size limit ({max} bytes) must hold a file's header and its first packet, \
                     which may be as long as the snapshot length ({} bytes): {need} bytes in all; raise the size limit \
                     or lower the snapshot length",
                    spec.snaplen
                )));
            }
        }
        Self::files(pattern, spec, policy)
    }

    /// Write everything to `file`, an open stream such as standard output, called
    /// `name` in messages. It is never rotated.
    ///
    /// # Errors
    ///
    /// [`RotateError::LinkType`] for a link type the format cannot hold.
    pub fn stream(file: File, name: &str, spec: FileSpec) -> Result<Self, RotateError> {
        check_link_type(spec.format, spec.link)?;
        Ok(Self::stream_of(file, name, spec))
    }

    /// Write one packet, as [`TraceWriter::write_packet`] takes it, into the
    /// current file, or first into a new one when a limit says so. A file's
    /// first packet always goes into it, whatever its size.
    ///
    /// # Errors
    ///
    /// [`RotateError::Io`] from closing, creating, deleting or writing a file;
    /// [`RotateError::OverBudget`] when the budget cannot hold the packet.
    pub fn write_packet(&mut self, ts_ns: u64, data: &[u8], wire_len: u32) -> Result<(), RotateError> {
        // The record's length is the format's; without an open file one is
        // opened first (a file's first packet goes in whatever its length).
        if self.cur.is_none() {
            self.open_next(Some(ts_ns))?;
        }
        let len = self.cur.as_ref().map_or(0, |c| c.writer.record_len(data.len()));
        self.write_record(ts_ns, len, |w| w.write_packet(ts_ns, data, wire_len))
    }
}

impl<K: FileKind> RotatingWriter<K> {
    /// Files of `kind` named from `pattern` (see the module documentation),
    /// started anew as `policy` says. Nothing is created until
    /// [`prepare`](Self::prepare) or the first record.
    ///
    /// # Errors
    ///
    /// [`RotateError::Policy`] for a limit of 0, [`RotateError::Budget`] for
    /// a budget or age limit the other limits cannot keep,
    /// [`RotateError::Pattern`] for an empty pattern or an invalid conversion.
    pub fn files(pattern: &str, kind: K, policy: RotationPolicy) -> Result<Self, RotateError> {
        policy.check()?;
        if pattern.is_empty() {
            return Err(RotateError::Pattern { pattern: pattern.into(), reason: "empty".into() });
        }
        let has_conversion = has_conversion(pattern)?;
        let target = Target::Pattern { pattern: pattern.to_string(), has_conversion, has_seq: pattern.contains(SEQ) };
        Ok(Self::with_target(target, kind, policy))
    }

    /// Write everything to `file` as one file of `kind`: an open stream such
    /// as standard output, called `name` in messages. It is never rotated.
    pub fn stream_of(file: File, name: &str, kind: K) -> Self {
        Self::with_target(Target::Stream { file: Some(file), name: PathBuf::from(name) }, kind, RotationPolicy::default())
    }

    fn with_target(target: Target, kind: K, policy: RotationPolicy) -> Self {
        RotatingWriter {
            target,
            kind,
            policy,
            cur: None,
            started: false,
            seq: 0,
            kept: VecDeque::new(),
            earlier_left: 0,
            closed_bytes: 0,
            used: HashSet::new(),
            scanned: false,
            next_file_asked: false,
            adopted: (0, 0),
            header_bytes: 0,
            now_ns: 0,
            expire_at: u64::MAX,
            pending: Vec::new(),
            totals: DeletionTotals::default(),
            undeletable: None,
        }
    }

    /// The file kind, to change what the next file opens with.
    pub fn kind_mut(&mut self) -> &mut K {
        &mut self.kind
    }

    /// Before capture starts: open the first file (and write its header), as
    /// tcpdump opens its output before the first packet, so that an output that
    /// cannot be written is reported at once. A pattern with strftime
    /// conversions names its files from their first packet, so for it only the
    /// directory is checked: a file is created in it and removed (when the
    /// directory's own name has conversions, nothing can be checked). With a
    /// budget or an age limit, the files of earlier runs are adopted first
    /// (see the module documentation); [`earlier_run`](Self::earlier_run)
    /// says how many.
    ///
    /// # Errors
    ///
    /// [`RotateError::Io`] from listing the directory or creating the file;
    /// [`RotateError::OverBudget`] when files of earlier runs fill the budget
    /// and cannot be deleted.
    pub fn prepare(&mut self) -> Result<(), RotateError> {
        if self.started {
            return Ok(());
        }
        self.adopt_earlier()?;
        match &self.target {
            Target::Pattern { pattern, has_conversion: true, .. } => probe_directory(pattern),
            _ => self.open_next(None),
        }
    }

    /// Write one record of `len` bytes, dated `ts_ns`, with `write`, into the
    /// current file, or first into a new one when a limit says so. A file's
    /// first record always goes into it, whatever its size.
    ///
    /// # Errors
    ///
    /// [`RotateError::Io`] from closing, creating, deleting or writing a file;
    /// [`RotateError::OverBudget`] when the budget cannot hold the record.
    pub fn write_record(&mut self, ts_ns: u64, len: u64, write: impl FnOnce(&mut K::Writer) -> io::Result<()>) -> Result<(), RotateError> {
        if self.needs_new_file(ts_ns, len) {
            self.open_next(Some(ts_ns))?;
        }
        if ts_ns > self.now_ns {
            self.now_ns = ts_ns;
            if ts_ns >= self.expire_at {
                self.expire(ts_ns);
            }
        }
        if let (Some(budget), Some(cur)) = (self.policy.budget_bytes, &self.cur) {
            // Within the size limit this always holds (room for a whole file
            // was made when the file was opened): one addition per record.
            let open = cur.writer.bytes_written().saturating_add(len);
            if self.closed_bytes.saturating_add(open) > budget {
                self.make_room(budget, open)?;
            }
        }
        let max_seconds = self.policy.max_seconds;
        let Some(cur) = self.cur.as_mut() else {
            // open_next either opens a file or fails; this is never reached.
            return Err(RotateError::Io { path: PathBuf::new(), source: io::Error::other("no file is open") });
        };
        if cur.window_end.is_none() {
            cur.window_end = Some(window_end(max_seconds, ts_ns));
        }
        cur.newest_ns = cur.newest_ns.max(ts_ns);
        write(&mut cur.writer).map_err(|source| RotateError::Io { path: cur.path.clone(), source })
    }

    /// Close the open file at the next packet and start the next one, named
    /// as a rotation would name it (the sensor's SIGHUP, so that the file is
    /// whole for whoever takes it away). The limits apply as at any rotation.
    /// False when there is nothing to close: no file is open, it has no
    /// packet yet (it stays the current one), or it is not a regular file (a
    /// device, a FIFO, standard output: there is no next file to make of it).
    pub fn start_next_file(&mut self) -> bool {
        let open = self.cur.as_ref().is_some_and(|c| c.regular && c.writer.records_written() > 0);
        let asked = open && matches!(self.target, Target::Pattern { .. });
        self.next_file_asked |= asked;
        asked
    }

    /// Hand the open file's buffer to the kernel, so a kill from here on loses
    /// none of the packets written so far.
    pub fn flush(&mut self) -> Result<(), RotateError> {
        match &mut self.cur {
            Some(cur) => cur.writer.flush().map_err(|source| RotateError::Io { path: cur.path.clone(), source }),
            None => Ok(()),
        }
    }

    /// Delete the closed files whose newest packet is older than
    /// [`RotationPolicy::max_age`] before `now_ns` (ns since the Unix epoch),
    /// oldest first. The writer does it itself with each packet's time; a
    /// caller on a live source calls it with the wall clock too, so files
    /// age while no packet comes. Nothing happens without an age limit. A
    /// deletion that fails is reported ([`take_deletions`](Self::take_deletions)).
    pub fn expire(&mut self, now_ns: u64) {
        let Some(age) = self.policy.max_age else { return };
        let age_ns = u64::try_from(age.as_nanos()).unwrap_or(u64::MAX);
        let mut i = 0;
        while i < self.kept.len() {
            if self.kept[i].newest_ns.saturating_add(age_ns) < now_ns {
                if let Some(k) = self.take_kept(i) {
                    self.delete(k, DeleteReason::Age);
                }
            } else {
                i += 1;
            }
        }
        self.refresh_expiry();
    }

    /// The deletions since this was last called (or the writer was made),
    /// oldest first, for the caller to log; at most [`PENDING_DELETIONS`].
    pub fn take_deletions(&mut self) -> Vec<Deletion> {
        std::mem::take(&mut self.pending)
    }

    /// Every deletion since the writer was made, those taken included.
    pub fn deletion_totals(&self) -> DeletionTotals {
        self.totals
    }

    /// Bytes the limits count now: the closed files kept (earlier runs'
    /// included), those that could not be deleted, and what was written to
    /// the open file (some of it perhaps still buffered).
    pub fn total_bytes(&self) -> u64 {
        self.closed_bytes + self.cur.as_ref().map_or(0, |c| c.writer.bytes_written())
    }

    /// The files of earlier runs adopted (see the module documentation), and
    /// the bytes they held, when they were found.
    pub fn earlier_run(&self) -> (usize, u64) {
        self.adopted
    }

    fn needs_new_file(&self, ts_ns: u64, len: u64) -> bool {
        let Some(cur) = &self.cur else { return true };
        let w = &cur.writer;
        let first_in_file = w.records_written() == 0;
        let by_size = self.policy.max_bytes.is_some_and(|max| w.bytes_written() + len > max);
        let by_count = self.policy.max_packets.is_some_and(|max| w.records_written() >= max);
        let by_time = cur.window_end.is_some_and(|end| ts_ns >= end);
        !first_in_file && (by_size || by_count || by_time || self.next_file_asked)
    }

    fn name_for(&self, pattern: &str, has_conversion: bool, has_seq: bool, ts_ns: u64) -> PathBuf {
        let when: DateTime<Utc> =
            DateTime::from_timestamp((ts_ns / 1_000_000_000) as i64, (ts_ns % 1_000_000_000) as u32).unwrap_or_default();
        let mut name = when.format(pattern).to_string().replace(SEQ, &self.seq.to_string());
        let needs_seq = self.policy.rotates() && !has_conversion && !has_seq;
        if needs_seq || self.used.contains(&PathBuf::from(&name)) {
            name = insert_before_extension(&name, &format!(".{}", self.seq));
        }
        PathBuf::from(name)
    }

    /// Close the open file and start the next, named from `ts_ns` (the first
    /// packet that goes into it) or, before any packet, from the clock. The
    /// limits make room before the file is created, so that they hold while
    /// it is written.
    fn open_next(&mut self, ts_ns: Option<u64>) -> Result<(), RotateError> {
        self.next_file_asked = false;
        self.close_current()?;
        self.adopt_earlier()?;
        self.make_room_for_new_file()?;
        let (file, path, staged) = match &mut self.target {
            Target::Pattern { pattern, has_conversion, has_seq } => {
                let (pattern, has_conversion, has_seq) = (pattern.clone(), *has_conversion, *has_seq);
                let path = self.name_for(&pattern, has_conversion, has_seq, ts_ns.unwrap_or_else(now_ns));
                // A hidden name that cannot be made (a name at the length limit)
                // falls back to the name itself, which reports its own error.
                let (file, staged) = match staging_name(&path).and_then(|s| Some((File::create(&s).ok()?, s))) {
                    Some((file, s)) => (file, Some(s)),
                    None => (File::create(&path).map_err(|source| RotateError::Io { path: path.clone(), source })?, None),
                };
                (file, path, staged)
            }
            Target::Stream { file, name } => {
                let path = name.clone();
                let file = file.take().ok_or_else(|| RotateError::Io {
                    path: path.clone(),
                    source: io::Error::new(io::ErrorKind::Unsupported, "a stream is one file: it cannot be rotated"),
                })?;
                (file, path, None)
            }
        };
        self.started = true;
        self.used.insert(path.clone());
        self.seq += 1;
        let io_err = |source| RotateError::Io { path: path.clone(), source };
        let regular = file.metadata().map_err(io_err)?.file_type().is_file();
        let mut writer = self.kind.start(file).map_err(io_err)?;
        writer.flush().map_err(io_err)?;
        if let Some(staged) = staged {
            std::fs::rename(&staged, &path).map_err(io_err)?;
        }
        let header = writer.bytes_written();
        self.header_bytes = self.header_bytes.max(header);
        let window_end = ts_ns.map(|ts| window_end(self.policy.max_seconds, ts));
        self.cur = Some(Current { writer, path, window_end, regular, newest_ns: ts_ns.unwrap_or(0) });
        // Only a header larger than the size limit (another format's) gets here.
        if let Some(budget) = self.policy.budget_bytes {
            if self.closed_bytes.saturating_add(header) > budget {
                self.make_room(budget, header)?;
            }
        }
        Ok(())
    }

    /// Before a new file: delete the oldest of this run beyond the file
    /// limit, and the oldest of all until the budget holds the closed files
    /// and a whole new one.
    fn make_room_for_new_file(&mut self) -> Result<(), RotateError> {
        if let Some(max) = self.policy.max_files {
            while self.kept.len() - self.earlier_left >= max {
                match self.take_kept(self.earlier_left) {
                    Some(k) => self.delete(k, DeleteReason::FileLimit),
                    None => break,
                }
            }
        }
        if let (Some(budget), Some(max)) = (self.policy.budget_bytes, self.policy.max_bytes) {
            self.make_room(budget, max.max(self.header_bytes))?;
        }
        self.refresh_expiry();
        Ok(())
    }

    /// Delete the oldest closed files until they and `open` bytes more fit
    /// in `budget`.
    fn make_room(&mut self, budget: u64, open: u64) -> Result<(), RotateError> {
        while self.closed_bytes.saturating_add(open) > budget {
            let Some(k) = self.take_kept(0) else {
                let reason = match &self.undeletable {
                    Some((path, e)) if self.totals.failed_bytes > 0 => format!(
                        "{} bytes are in files that could not be deleted (the first: {}: {e}), and {open} more are needed",
                        self.totals.failed_bytes,
                        path.display()
                    ),
                    _ => format!("one file needs {open} bytes on its own"),
                };
                self.refresh_expiry();
                return Err(RotateError::OverBudget { budget, reason });
            };
            self.delete(k, DeleteReason::Budget);
        }
        self.refresh_expiry();
        Ok(())
    }

    /// Take the kept file at `i` out of the list (its bytes still counted
    /// until [`delete`](Self::delete) frees them).
    fn take_kept(&mut self, i: usize) -> Option<Kept> {
        let k = self.kept.remove(i)?;
        if k.earlier {
            self.earlier_left -= 1;
        }
        Some(k)
    }

    /// Delete a file taken out of the list, count it and report it. One that
    /// cannot be deleted stays counted toward the budget, as it is still on disk.
    fn delete(&mut self, k: Kept, reason: DeleteReason) {
        let error = match std::fs::remove_file(&k.path) {
            Ok(()) => None,
            // Removed by someone else: the bytes are free all the same.
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => Some(e),
        };
        match &error {
            None => {
                self.closed_bytes -= k.bytes;
                self.totals.files += 1;
                self.totals.bytes += k.bytes;
            }
            Some(e) => {
                self.totals.failed += 1;
                self.totals.failed_bytes += k.bytes;
                if self.undeletable.is_none() {
                    self.undeletable = Some((k.path.clone(), e.to_string()));
                }
            }
        }
        if self.pending.len() < PENDING_DELETIONS {
            self.pending.push(Deletion { path: k.path, bytes: k.bytes, reason, earlier_run: k.earlier, error });
        } else {
            self.totals.unlisted += 1;
        }
    }

    /// When the next kept file becomes too old, in packet time.
    fn refresh_expiry(&mut self) {
        self.expire_at = match self.policy.max_age {
            Some(age) => {
                let age_ns = u64::try_from(age.as_nanos()).unwrap_or(u64::MAX);
                self.kept.iter().map(|k| k.newest_ns.saturating_add(age_ns).saturating_add(1)).min().unwrap_or(u64::MAX)
            }
            None => u64::MAX,
        };
    }

    /// With a budget or an age limit, once: adopt the files of earlier runs in
    /// the pattern's directory whose names the pattern could have produced.
    fn adopt_earlier(&mut self) -> Result<(), RotateError> {
        if self.scanned || !self.policy.rolls() {
            return Ok(());
        }
        self.scanned = true;
        let Target::Pattern { pattern, .. } = &self.target else { return Ok(()) };
        let (prefix, name) = match pattern.rfind('/') {
            Some(i) => pattern.split_at(i + 1),
            None => ("", pattern.as_str()),
        };
        // A directory part that changes with time or sequence is many
        // directories; only this run's files are known then.
        if name.is_empty() || has_conversion(prefix)? || prefix.contains(SEQ) {
            return Ok(());
        }
        let matcher = NameMatcher::new(name);
        let dir = if prefix.is_empty() { Path::new(".") } else { Path::new(prefix) };
        let list_err = |source| RotateError::Io { path: dir.to_path_buf(), source };
        let mut found = Vec::new();
        let mut top_seq: Option<u64> = None;
        for entry in std::fs::read_dir(dir).map_err(list_err)? {
            let entry = entry.map_err(list_err)?;
            let Some(file_name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let Some(seq) = matcher.matches(&file_name) else { continue };
            let path = PathBuf::from(format!("{prefix}{file_name}"));
            // Whatever holds a name this run could make (a symbolic link, a
            // directory) is never created over: it sets the numbering, and a
            // name from the clock that repeats it gets `.N`.
            if let Some(s) = seq {
                top_seq = Some(top_seq.map_or(s, |t| t.max(s)));
            }
            self.used.insert(path.clone());
            // Not followed: a symbolic link is never ours to delete.
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_file() => m,
                Ok(_) => continue,
                // Gone since the listing.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(source) => return Err(RotateError::Io { path, source }),
            };
            let mtime_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            found.push((mtime_ns, path, meta.len()));
        }
        found.sort();
        if let Some(top) = top_seq {
            self.seq = self.seq.max(top.saturating_add(1));
        }
        self.adopted = (found.len(), found.iter().map(|f| f.2).sum());
        // This run's files (none yet: this runs before the first) go after.
        for (mtime_ns, path, bytes) in found.into_iter().rev() {
            self.closed_bytes += bytes;
            self.kept.push_front(Kept { path, bytes, newest_ns: mtime_ns, earlier: true });
            self.earlier_left += 1;
        }
        self.refresh_expiry();
        Ok(())
    }

    /// Hand the file's last bytes to the kernel and, for a regular file, sync its
    /// data and then its directory, which holds the file's name. The file is
    /// counted as kept (and toward the budget) even when this fails: it is on disk.
    fn close_current(&mut self) -> Result<(), RotateError> {
        let Some(cur) = self.cur.take() else { return Ok(()) };
        let path = cur.path;
        // Everything written, buffered or not: the file's length once written out,
        // and at most that if writing out fails.
        let bytes = cur.writer.bytes_written();
        self.kept.push_back(Kept { path: path.clone(), bytes, newest_ns: cur.newest_ns, earlier: false });
        self.closed_bytes += bytes;
        self.refresh_expiry();
        let io_err = |source| RotateError::Io { path: path.clone(), source };
        let file = cur.writer.finish().map_err(io_err)?;
        if cur.regular {
            syncable(file.sync_data()).map_err(io_err)?;
            if matches!(self.target, Target::Pattern { .. }) {
                let dir = directory_of(&path);
                syncable(File::open(dir).and_then(|d| d.sync_all()))
                    .map_err(|source| RotateError::Io { path: dir.to_path_buf(), source })?;
            }
        }
        Ok(())
    }

    /// Close the last file; if nothing was written at all, write one empty
    /// file. Returns the files written and still kept, oldest first (for a
    /// stream, its name). Deletions not yet taken are dropped: see
    /// [`finish_with_deletions`](Self::finish_with_deletions).
    ///
    /// # Errors
    ///
    /// [`RotateError::Io`] from writing out, syncing or creating a file.
    pub fn finish(self) -> Result<Vec<PathBuf>, RotateError> {
        self.finish_with_deletions().map(|f| f.files)
    }

    /// [`finish`](Self::finish), with the deletions not yet taken (making
    /// the one empty file may delete some for the budget) and the totals.
    ///
    /// # Errors
    ///
    /// As [`finish`](Self::finish).
    pub fn finish_with_deletions(mut self) -> Result<Finished, RotateError> {
        if !self.started {
            self.open_next(Some(now_ns()))?;
        }
        self.close_current()?;
        let files = self.kept.into_iter().filter(|k| !k.earlier).map(|k| k.path).collect();
        Ok(Finished { files, deletions: self.pending, totals: self.totals })
    }
}

/// A sync's result, where EINVAL (fdatasync(2): a file "which does not support
/// synchronization", as some file systems' directories are) is nothing to do.
fn syncable(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Ok(()),
        r => r,
    }
}

fn has_conversion(pattern: &str) -> Result<bool, RotateError> {
    let mut found = false;
    for item in StrftimeItems::new(pattern) {
        match item {
            Item::Error => {
                return Err(RotateError::Pattern {
                    pattern: pattern.into(),
                    reason: "contains an invalid strftime conversion (use %% for a literal %)".into(),
                })
            }
            Item::Numeric(..) | Item::Fixed(..) => found = true,
            _ => {}
        }
    }
    Ok(found)
}

/// The time window a file whose first packet is at `ts_ns` covers: up to the
/// next multiple of the period, or for ever without time rotation.
fn window_end(max_seconds: Option<u64>, ts_ns: u64) -> u64 {
    match max_seconds {
        Some(g) => {
            let period = g.saturating_mul(1_000_000_000);
            (ts_ns / period).saturating_add(1).saturating_mul(period)
        }
        None => u64::MAX,
    }
}

fn now_ns() -> u64 {
    let now = Utc::now();
    now.timestamp().max(0) as u64 * 1_000_000_000 + u64::from(now.timestamp_subsec_nanos())
}

/// Where a new file is written until its header is flushed: a hidden name
/// beside it, renamed to `path` then, so that no reader (and no kill) ever
/// finds the file under its name without its header. None when `path` is
/// there and is not a regular file (a FIFO, `/dev/null`): that is opened
/// as it is, never replaced.
fn staging_name(path: &Path) -> Option<PathBuf> {
    match std::fs::metadata(path) {
        Ok(m) if !m.file_type().is_file() => None,
        _ => {
            let name = path.file_name()?.to_string_lossy();
            Some(path.with_file_name(format!(".{name}.weir-new")))
        }
    }
}

/// The directory a file name is in (`.` for a bare name).
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// That files can be created in the directory of `pattern` (unless the
/// directory's own name has conversions): create one there and remove it.
fn probe_directory(pattern: &str) -> Result<(), RotateError> {
    let dir = directory_of(Path::new(pattern));
    if has_conversion(&dir.to_string_lossy())? || dir.to_string_lossy().contains(SEQ) {
        return Ok(());
    }
    let probe = dir.join(format!(".weir-record-probe-{}", std::process::id()));
    let io_err = |source| RotateError::Io { path: dir.to_path_buf(), source };
    std::fs::OpenOptions::new().write(true).create_new(true).open(&probe).map_err(io_err)?;
    std::fs::remove_file(&probe).map_err(io_err)
}

fn insert_before_extension(name: &str, infix: &str) -> String {
    let file_start = name.rfind('/').map_or(0, |i| i + 1);
    match name[file_start..].rfind('.') {
        Some(dot) if dot > 0 => {
            let at = file_start + dot;
            format!("{}{}{}", &name[..at], infix, &name[at..])
        }
        _ => format!("{name}{infix}"),
    }
}

#[cfg(test)]
mod tests;
