//! IPFIX files (RFC 5655), as `weir flows -w` writes them: the exporter's
//! messages, the same bytes the collectors get, written into files that
//! rotate as `weir record`'s do (by size, packet time and a file limit, named
//! from the same patterns), through the same [`RotatingWriter`].
//!
//! Contract: a message is in a file whole or not at all; a message counted
//! as written ([`FlowFiles::write`] returned `Ok`) is in the kernel; every
//! file can be read by itself (it opens with the templates); the files read
//! in order carry one unbroken sequence of sequence numbers.
//!
//! RFC 5655 makes an IPFIX file a plain sequence of IPFIX messages (it has no
//! file header), and asks that templates come before the records that use
//! them (8.1, 8.2). Every file opens with a message holding the templates
//! alone, so each file is read by itself: that message carries the sequence
//! number and export time of the message after it (no data record lies
//! between them, RFC 7011 3.1), or, for a file opened before any record, 0
//! and the wall clock. Sequence numbers run on across files: a reader of all
//! the files in order sees one unbroken sequence per observation domain.
//!
//! [`FlowFiles::stdout`] (`-w -`) writes the messages to standard output
//! instead, as one file that never rotates (an IPFIX file is a stream of
//! messages, so a pipe to a collector's reader carries one as well). A write
//! there that fails is first shown to the caller's hook (the CLI ends weir
//! quietly when the reader went away, as `weir record -w -` does), then
//! returned as any failed write.
//!
//! [`FlowFiles::next_file`] hands out a [`NextFile`] by which another thread
//! (the sensor's, on SIGHUP) asks for the open file to be closed at the next
//! message and the next one started, named as a rotation names it.
//!
//! A file's time (its name's strftime conversions, its `-G` window) is the
//! export time of its first message: packet time, as everything exported.
//!
//! Messages are written unbuffered, one `write` each (a message is at most
//! 1452 bytes, and the exporter sends it to the collectors with a system call
//! anyway): a record counted as written is in the kernel, so a kill loses
//! none, and a write that fails (a full disk, a file size limit) fails on
//! the message it was writing, whose records are the ones counted as not
//! written. The file is cut back to the end of the message before, so it
//! ends on a whole message and stays readable.

use super::encode::offsets::ipfix as o;
use crate::sink::rotate::{FileKind, FileWriter, RotateError, RotatingWriter, RotationPolicy};
use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What is called with a failed write to standard output, before it is
/// returned (see the module doc).
pub type StdoutError = fn(&io::Error);

/// What every file opens with: a templates-only message.
struct IpfixFiles {
    templates: Vec<u8>,
    /// Writing to standard output, which is never cut back: the hook.
    stdout: Option<StdoutError>,
}

impl FileKind for IpfixFiles {
    type Writer = MessageFile;

    fn start(&mut self, file: File) -> io::Result<MessageFile> {
        let mut w = MessageFile { out: file, bytes: 0, records: 0, stdout: self.stdout };
        w.write(&self.templates, 0)?;
        Ok(w)
    }
}

/// One open file: counts its bytes and data records (what rotation checks).
struct MessageFile {
    out: File,
    bytes: u64,
    records: u64,
    stdout: Option<StdoutError>,
}

impl MessageFile {
    fn write(&mut self, msg: &[u8], records: u64) -> io::Result<()> {
        if let Err(e) = self.out.write_all(msg) {
            if let Some(hook) = self.stdout {
                // Standard output may be a file opened at any offset (`>>`),
                // so it is never cut: its reader sees the cut message.
                hook(&e);
                return Err(e);
            }
            // Part of the message may be in the file: cut it off. When even
            // that fails the file ends in a cut message, which readers report.
            let _ = self.out.set_len(self.bytes);
            return Err(e);
        }
        self.bytes += msg.len() as u64;
        self.records += records;
        Ok(())
    }
}

impl FileWriter for MessageFile {
    fn bytes_written(&self) -> u64 {
        self.bytes
    }

    fn records_written(&self) -> u64 {
        self.records
    }

    /// Nothing is buffered.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn finish(self) -> io::Result<File> {
        Ok(self.out)
    }
}

/// The rotating IPFIX files of a run.
pub struct FlowFiles {
    writer: RotatingWriter<IpfixFiles>,
    next: NextFile,
    /// The requests of `next` acted on.
    seen: u64,
}

/// Asks the [`FlowFiles`] it came from, on whatever thread they are
/// written, to start their next file at their next message.
#[derive(Clone, Default)]
pub struct NextFile(Arc<AtomicU64>);

impl NextFile {
    /// Asks for the next file: acted on at the next message written.
    pub fn ask(&self) {
        // Relaxed: a count of requests, compared by the writer at its next
        // message; no data rides on it.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl FlowFiles {
    /// Files named from `pattern`, rotated by `policy`; `templates` is the
    /// encoder's templates-only message. Nothing is created yet.
    pub fn new(pattern: &str, policy: RotationPolicy, templates: Vec<u8>) -> Result<FlowFiles, RotateError> {
        Ok(FlowFiles::of(RotatingWriter::files(pattern, IpfixFiles { templates, stdout: None }, policy)?))
    }

    /// The messages to standard output (`-w -`), never rotated; `on_error`
    /// sees every write there that fails, before it is returned.
    pub fn stdout(templates: Vec<u8>, on_error: StdoutError) -> io::Result<FlowFiles> {
        // A duplicate of descriptor 1 the writer owns, as `weir record -w -`'s.
        let fd = std::os::fd::AsFd::as_fd(&io::stdout()).try_clone_to_owned()?;
        let kind = IpfixFiles { templates, stdout: Some(on_error) };
        Ok(FlowFiles::of(RotatingWriter::stream_of(File::from(fd), "standard output", kind)))
    }

    fn of(writer: RotatingWriter<IpfixFiles>) -> FlowFiles {
        FlowFiles { writer, next: NextFile::default(), seen: 0 }
    }

    /// A handle by which another thread asks for the next file (see the
    /// module's doc). Standard output and devices have none to start: the
    /// request is then let go.
    pub fn next_file(&self) -> NextFile {
        self.next.clone()
    }

    /// Opens the first file (a pattern with strftime conversions: checks its
    /// directory), before the run, so a name that cannot be written is an
    /// error before anything is exported. Its templates are dated now.
    pub fn prepare(&mut self) -> Result<(), RotateError> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let t = &mut self.writer.kind_mut().templates;
        t[o::EXPORT_TIME..o::EXPORT_TIME + 4].copy_from_slice(&(now as u32).to_be_bytes());
        self.writer.prepare()
    }

    /// Writes one finished message of `records` data records, into a new
    /// file first when the rotation says so.
    pub fn write(&mut self, msg: &[u8], records: usize) -> Result<(), RotateError> {
        // Relaxed: see NextFile::ask.
        let asked = self.next.0.load(Ordering::Relaxed);
        if asked != self.seen {
            self.seen = asked;
            self.writer.start_next_file();
        }
        // A file this message opens starts with the templates under the
        // message's own export time and sequence number (and domain).
        self.writer.kind_mut().templates[o::EXPORT_TIME..o::HEADER_LEN].copy_from_slice(&msg[o::EXPORT_TIME..o::HEADER_LEN]);
        let secs = u32::from_be_bytes(msg[o::EXPORT_TIME..o::EXPORT_TIME + 4].try_into().expect("4 bytes"));
        self.writer.write_record(u64::from(secs) * 1_000_000_000, msg.len() as u64, |w| w.write(msg, records as u64))
    }

    /// Closes the last file; returns the files written and kept, oldest first.
    pub fn finish(self) -> Result<Vec<PathBuf>, RotateError> {
        self.writer.finish()
    }
}
