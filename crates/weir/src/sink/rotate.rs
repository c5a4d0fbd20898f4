//! Writing a capture across several files: rotate by size, by time or by packet
//! count, keep at most N files, and name them from a pattern; or write one
//! stream the caller opened (standard output), which never rotates.
//!
//! The files are pcap or pcapng ([`FileSpec`]) or any other format that
//! brings its own [`FileKind`]: what a file opens with (a header, the
//! templates of `weir flows`' IPFIX files) and how its records are written.
//! Rotation, naming, the file limit and syncing are the same for all; in what
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
//! What a kill leaves: a file's header reaches the kernel when the file is
//! opened, so no file is ever left empty by a kill after that. A file is
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

use super::{check_link_type, FileFormat, LinkTypeError, TraceWriter, TsPrecision};
use crate::LinkType;
use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, Utc};
use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// When to start a new file.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Start a new file before one would grow past this many bytes.
    pub max_bytes: Option<u64>,
    /// Start a new file at each multiple of this many seconds of packet time.
    pub max_seconds: Option<u64>,
    /// Start a new file after this many packets.
    pub max_packets: Option<u64>,
    /// Keep at most this many files, deleting the oldest.
    pub max_files: Option<usize>,
}

impl RotateError {
    /// True when what the user named is at fault (no such directory, no
    /// permission, a read-only file system, a bad pattern or link type), not
    /// the system (a full disk, an I/O error): exit 2 rather than 1 in the CLI.
    pub fn is_bad_input(&self) -> bool {
        use io::ErrorKind::{IsADirectory, NotADirectory, NotFound, PermissionDenied, ReadOnlyFilesystem};
        match self {
            RotateError::Io { source, .. } => {
                matches!(source.kind(), NotFound | PermissionDenied | ReadOnlyFilesystem | IsADirectory | NotADirectory)
            }
            _ => true,
        }
    }
}

impl RotationPolicy {
    /// Whether any limit starts new files; a file limit alone does not.
    pub fn rotates(&self) -> bool {
        self.max_bytes.is_some() || self.max_seconds.is_some() || self.max_packets.is_some()
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

/// Why a [`RotatingWriter`] was refused or could not write.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    /// The name pattern is empty or has an invalid strftime conversion.
    #[error("output name pattern {pattern:?}: {reason}")]
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Creating, writing, syncing or deleting a file, or probing its
    /// directory, failed. Shown as the path; the I/O error follows as its source.
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
    /// The file format cannot hold the link type.
    #[error(transparent)]
    LinkType(#[from] LinkTypeError),
}

struct Current<W> {
    writer: W,
    path: PathBuf,
    /// End of this file's time window, in ns, when rotating by time; set by
    /// the file's first packet (a file opened before any packet has none yet).
    window_end: Option<u64>,
    /// A regular file, which can be synced (pipes, FIFOs and devices cannot).
    regular: bool,
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
    seq: u64,
    kept: VecDeque<PathBuf>,
    used: HashSet<PathBuf>,
}

const SEQ: &str = "{seq}";

impl RotatingWriter<FileSpec> {
    /// Files named from `pattern` (see the module documentation) in the shape
    /// of `spec`, started anew as `policy` says. Nothing is created until
    /// [`prepare`](Self::prepare) or the first packet.
    ///
    /// # Errors
    ///
    /// [`RotateError::Policy`] for a limit of 0, [`RotateError::Pattern`] for
    /// an empty pattern or an invalid conversion, [`RotateError::LinkType`]
    /// for a link type the format cannot hold.
    pub fn new(pattern: &str, spec: FileSpec, policy: RotationPolicy) -> Result<Self, RotateError> {
        check_link_type(spec.format, spec.link)?;
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
    /// [`RotateError::Io`] from closing, creating, deleting or writing a file.
    pub fn write_packet(&mut self, ts_ns: u64, data: &[u8], wire_len: u32) -> Result<(), RotateError> {
        // Without an open file a new one is started whatever the length.
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
    /// [`RotateError::Policy`] for a limit of 0, [`RotateError::Pattern`] for
    /// an empty pattern or an invalid conversion.
    pub fn files(pattern: &str, kind: K, policy: RotationPolicy) -> Result<Self, RotateError> {
        if policy.max_bytes == Some(0) || policy.max_packets == Some(0) || policy.max_seconds == Some(0) {
            return Err(RotateError::Policy("size, time and packet limits start at 1"));
        }
        if policy.max_files == Some(0) {
            return Err(RotateError::Policy("the file limit starts at 1"));
        }
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
        RotatingWriter { target, kind, policy, cur: None, seq: 0, kept: VecDeque::new(), used: HashSet::new() }
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
    /// directory's own name has conversions, nothing can be checked).
    pub fn prepare(&mut self) -> Result<(), RotateError> {
        if self.cur.is_some() || !self.kept.is_empty() {
            return Ok(());
        }
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
    /// [`RotateError::Io`] from closing, creating, deleting or writing a file.
    pub fn write_record(&mut self, ts_ns: u64, len: u64, write: impl FnOnce(&mut K::Writer) -> io::Result<()>) -> Result<(), RotateError> {
        if self.needs_new_file(ts_ns, len) {
            self.open_next(Some(ts_ns))?;
        }
        let max_seconds = self.policy.max_seconds;
        let cur = self.cur.as_mut().expect("a file is open after open_next");
        if cur.window_end.is_none() {
            cur.window_end = Some(window_end(max_seconds, ts_ns));
        }
        write(&mut cur.writer).map_err(|source| RotateError::Io { path: cur.path.clone(), source })
    }

    /// Hand the open file's buffer to the kernel, so a kill from here on loses
    /// none of the packets written so far.
    pub fn flush(&mut self) -> Result<(), RotateError> {
        match &mut self.cur {
            Some(cur) => cur.writer.flush().map_err(|source| RotateError::Io { path: cur.path.clone(), source }),
            None => Ok(()),
        }
    }

    fn needs_new_file(&self, ts_ns: u64, len: u64) -> bool {
        let Some(cur) = &self.cur else { return true };
        let w = &cur.writer;
        let first_in_file = w.records_written() == 0;
        let by_size = self.policy.max_bytes.is_some_and(|max| w.bytes_written() + len > max);
        let by_count = self.policy.max_packets.is_some_and(|max| w.records_written() >= max);
        let by_time = cur.window_end.is_some_and(|end| ts_ns >= end);
        !first_in_file && (by_size || by_count || by_time)
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
    /// packet that goes into it) or, before any packet, from the clock.
    fn open_next(&mut self, ts_ns: Option<u64>) -> Result<(), RotateError> {
        self.close_current()?;
        let (file, path) = match &mut self.target {
            Target::Pattern { pattern, has_conversion, has_seq } => {
                let (pattern, has_conversion, has_seq) = (pattern.clone(), *has_conversion, *has_seq);
                let path = self.name_for(&pattern, has_conversion, has_seq, ts_ns.unwrap_or_else(now_ns));
                let file = File::create(&path).map_err(|source| RotateError::Io { path: path.clone(), source })?;
                (file, path)
            }
            Target::Stream { file, name } => {
                let path = name.clone();
                let file = file.take().ok_or_else(|| RotateError::Io {
                    path: path.clone(),
                    source: io::Error::new(io::ErrorKind::Unsupported, "a stream is one file: it cannot be rotated"),
                })?;
                (file, path)
            }
        };
        let io_err = |source| RotateError::Io { path: path.clone(), source };
        let regular = file.metadata().map_err(io_err)?.file_type().is_file();
        let mut writer = self.kind.start(file).map_err(io_err)?;
        writer.flush().map_err(io_err)?;
        self.used.insert(path.clone());
        self.kept.push_back(path.clone());
        self.seq += 1;
        if let Some(max) = self.policy.max_files {
            while self.kept.len() > max {
                let old = self.kept.pop_front().expect("more than max >= 1 files kept");
                std::fs::remove_file(&old).map_err(|source| RotateError::Io { path: old, source })?;
            }
        }
        let window_end = ts_ns.map(|ts| window_end(self.policy.max_seconds, ts));
        self.cur = Some(Current { writer, path, window_end, regular });
        Ok(())
    }

    /// Hand the file's last bytes to the kernel and, for a regular file, sync its
    /// data and then its directory, which holds the file's name.
    fn close_current(&mut self) -> Result<(), RotateError> {
        let Some(cur) = self.cur.take() else { return Ok(()) };
        let path = cur.path;
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
    /// stream, its name).
    ///
    /// # Errors
    ///
    /// [`RotateError::Io`] from writing out, syncing or creating a file.
    pub fn finish(mut self) -> Result<Vec<PathBuf>, RotateError> {
        if self.cur.is_none() && self.kept.is_empty() {
            self.open_next(Some(now_ns()))?;
        }
        self.close_current()?;
        Ok(self.kept.into_iter().collect())
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
mod tests {
    use super::*;

    fn spec() -> FileSpec {
        FileSpec { format: FileFormat::Pcap, link: LinkType::ETHERNET, snaplen: 65535, precision: TsPrecision::Nano }
    }

    fn names(files: &[PathBuf], dir: &std::path::Path) -> Vec<String> {
        files.iter().map(|p| p.strip_prefix(dir).unwrap().display().to_string()).collect()
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn rotates_by_count_and_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("out.pcap");
        let policy = RotationPolicy { max_packets: Some(3), max_files: Some(2), ..Default::default() };
        let mut w = RotatingWriter::new(pattern.to_str().unwrap(), spec(), policy).unwrap();
        for i in 0..10u64 {
            w.write_packet(i * S, &[i as u8; 60], 60).unwrap();
        }
        let files = w.finish().unwrap();
        assert_eq!(names(&files, dir.path()), ["out.2.pcap", "out.3.pcap"]);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "older files deleted");
        // 3 packets in file 2, 1 in file 3.
        assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 24 + 3 * (16 + 60));
        assert_eq!(std::fs::metadata(&files[1]).unwrap().len(), 24 + 16 + 60);
    }

    #[test]
    fn rotates_by_size_without_exceeding_it() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("cap-{seq}.pcap");
        let max = 24 + 2 * (16 + 100) + 10;
        let policy = RotationPolicy { max_bytes: Some(max), ..Default::default() };
        let mut w = RotatingWriter::new(pattern.to_str().unwrap(), spec(), policy).unwrap();
        for i in 0..5u64 {
            w.write_packet(i, &[0; 100], 100).unwrap();
        }
        let files = w.finish().unwrap();
        assert_eq!(names(&files, dir.path()), ["cap-0.pcap", "cap-1.pcap", "cap-2.pcap"]);
        assert!(files.iter().all(|f| std::fs::metadata(f).unwrap().len() <= max));
    }

    #[test]
    fn rotates_by_aligned_time_windows_with_strftime_names() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("t-%Y%m%d-%H%M%S.pcapng");
        let policy = RotationPolicy { max_seconds: Some(60), ..Default::default() };
        let s = FileSpec { format: FileFormat::PcapNg, ..spec() };
        let mut w = RotatingWriter::new(pattern.to_str().unwrap(), s, policy).unwrap();
        // 2024-01-01 00:00:30, :59, 00:01:00 (new window), a late :59 packet stays, 00:02:05.
        let base = 1_704_067_200 * S;
        for t in [30, 59, 60, 59, 125] {
            w.write_packet(base + t * S, &[1; 64], 64).unwrap();
        }
        let files = w.finish().unwrap();
        assert_eq!(names(&files, dir.path()), ["t-20240101-000030.pcapng", "t-20240101-000100.pcapng", "t-20240101-000205.pcapng"]);
    }

    #[test]
    fn empty_capture_leaves_one_valid_file() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("empty.pcap");
        let w = RotatingWriter::new(pattern.to_str().unwrap(), spec(), RotationPolicy::default()).unwrap();
        let files = w.finish().unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 24);
    }

    #[test]
    fn bad_patterns_and_limits_are_refused() {
        let p = RotationPolicy::default();
        assert!(matches!(RotatingWriter::new("x-%Q.pcap", spec(), p), Err(RotateError::Pattern { .. })));
        assert!(matches!(RotatingWriter::new("", spec(), p), Err(RotateError::Pattern { .. })));
        let zero = RotationPolicy { max_files: Some(0), ..p };
        assert!(matches!(RotatingWriter::new("a.pcap", spec(), zero), Err(RotateError::Policy(_))));
    }

    #[test]
    fn files_that_cannot_be_synced_are_written_without_syncing() {
        // /dev/null refuses fdatasync (EINVAL), as pipes and FIFOs do.
        let mut w = RotatingWriter::new("/dev/null", spec(), RotationPolicy::default()).unwrap();
        w.prepare().unwrap();
        w.write_packet(S, &[0; 60], 60).unwrap();
        assert_eq!(w.finish().unwrap(), [PathBuf::from("/dev/null")]);
    }

    #[test]
    fn a_stream_is_one_file_and_a_regular_one_is_synced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stream.pcap");
        let mut w = RotatingWriter::stream(File::create(&path).unwrap(), "standard output", spec()).unwrap();
        w.prepare().unwrap();
        w.write_packet(S, &[7; 60], 60).unwrap();
        assert_eq!(w.finish().unwrap(), [PathBuf::from("standard output")]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 24 + 16 + 60);
    }

    #[test]
    fn the_first_file_is_opened_before_any_packet_with_its_header_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("first.pcap");
        let mut w = RotatingWriter::new(pattern.to_str().unwrap(), spec(), RotationPolicy::default()).unwrap();
        w.prepare().unwrap();
        assert_eq!(std::fs::metadata(&pattern).unwrap().len(), 24, "the header reached the kernel before any packet");
        w.write_packet(S, &[1; 60], 60).unwrap();
        assert_eq!(w.finish().unwrap(), [pattern]);
    }

    #[test]
    fn a_pattern_with_conversions_has_its_directory_checked() {
        let missing = std::env::temp_dir().join("weir-no-such-dir-for-rotate-test").join("x-%H.pcap");
        let mut w = RotatingWriter::new(missing.to_str().unwrap(), spec(), RotationPolicy::default()).unwrap();
        assert!(matches!(w.prepare(), Err(RotateError::Io { .. })));
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("x-%H.pcap");
        let mut w = RotatingWriter::new(ok.to_str().unwrap(), spec(), RotationPolicy::default()).unwrap();
        w.prepare().unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the probe file is gone");
    }

    #[test]
    fn every_opened_file_has_its_header_and_every_flushed_packet_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("r.pcap");
        let policy = RotationPolicy { max_packets: Some(2), ..Default::default() };
        let mut w = RotatingWriter::new(pattern.to_str().unwrap(), spec(), policy).unwrap();
        for i in 0..3u64 {
            w.write_packet(i * S, &[i as u8; 60], 60).unwrap();
        }
        let files: Vec<PathBuf> = w.kept.iter().cloned().collect();
        assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 24 + 2 * (16 + 60), "a closed file is complete");
        assert_eq!(std::fs::metadata(&files[1]).unwrap().len(), 24, "the open file's header is on disk at once");
        w.flush().unwrap();
        assert_eq!(std::fs::metadata(&files[1]).unwrap().len(), 24 + 16 + 60, "flush hands the packets over");
        w.finish().unwrap();
    }

    #[test]
    fn link_types_the_formats_cannot_hold_are_refused() {
        for format in [FileFormat::Pcap, FileFormat::PcapNg] {
            let s = FileSpec { format, link: LinkType(67_108_863), ..spec() };
            let e = RotatingWriter::new("never.pcap", s, RotationPolicy::default()).err().expect("refused");
            let text = e.to_string();
            assert!(text.contains("67108863") && text.contains("0 to 65535"), "{text}");
            let highest = FileSpec { format, link: LinkType(65_535), ..spec() };
            assert!(RotatingWriter::new("never.pcap", highest, RotationPolicy::default()).is_ok());
        }
    }

    /// A format of its own: every file opens with `HDR`, records are lines.
    struct Lines;
    struct LineFile {
        file: File,
        bytes: u64,
        records: u64,
    }
    const HDR: &[u8] = b"HDR\n";

    impl FileKind for Lines {
        type Writer = LineFile;
        fn start(&mut self, mut file: File) -> io::Result<LineFile> {
            use std::io::Write;
            file.write_all(HDR)?;
            Ok(LineFile { file, bytes: HDR.len() as u64, records: 0 })
        }
    }

    impl FileWriter for LineFile {
        fn bytes_written(&self) -> u64 {
            self.bytes
        }
        fn records_written(&self) -> u64 {
            self.records
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn finish(self) -> io::Result<File> {
            Ok(self.file)
        }
    }

    #[test]
    fn a_file_kind_of_its_own_rotates_the_same_and_opens_every_file_with_its_header() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("l.txt");
        // At most 12 bytes a file: the header and two 4-byte records.
        let policy = RotationPolicy { max_bytes: Some(12), max_files: Some(2), ..Default::default() };
        let mut w = RotatingWriter::files(pattern.to_str().unwrap(), Lines, policy).unwrap();
        for i in 0..5u64 {
            w.write_record(i * S, 4, |f| {
                f.file.write_all(format!("r{i}\n\n").as_bytes()[..4].as_ref())?;
                (f.bytes, f.records) = (f.bytes + 4, f.records + 1);
                Ok(())
            })
            .unwrap();
        }
        let files = w.finish().unwrap();
        assert_eq!(names(&files, dir.path()), ["l.1.txt", "l.2.txt"], "the oldest deleted");
        assert_eq!(std::fs::read_to_string(&files[0]).unwrap(), "HDR\nr2\n\nr3\n\n");
        assert_eq!(std::fs::read_to_string(&files[1]).unwrap(), "HDR\nr4\n\n");
    }

    #[test]
    fn extension_insertion() {
        assert_eq!(insert_before_extension("dir.d/out.pcap", ".3"), "dir.d/out.3.pcap");
        assert_eq!(insert_before_extension("dir.d/out", ".3"), "dir.d/out.3");
        assert_eq!(insert_before_extension(".hidden", ".3"), ".hidden.3");
    }
}
