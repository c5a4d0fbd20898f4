//! Writing a capture across several files: rotate by size, by time or by packet
//! count, keep at most N files, and name them from a pattern.
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

use super::{FileFormat, TraceWriter, TsPrecision};
use crate::LinkType;
use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, Utc};
use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::io;
use std::path::PathBuf;

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

impl RotationPolicy {
    pub fn rotates(&self) -> bool {
        self.max_bytes.is_some() || self.max_seconds.is_some() || self.max_packets.is_some()
    }
}

/// What every file of the rotation holds.
#[derive(Copy, Clone, Debug)]
pub struct FileSpec {
    pub format: FileFormat,
    pub link: LinkType,
    pub snaplen: u32,
    pub precision: TsPrecision,
}

#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("output name pattern {pattern:?}: {reason}")]
    Pattern { pattern: String, reason: String },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("rotation limits must be positive: {0}")]
    Policy(&'static str),
}

struct Current {
    writer: TraceWriter<File>,
    path: PathBuf,
    /// End of this file's time window, in ns, when rotating by time.
    window_end: u64,
}

pub struct RotatingWriter {
    pattern: String,
    has_conversion: bool,
    has_seq: bool,
    spec: FileSpec,
    policy: RotationPolicy,
    cur: Option<Current>,
    seq: u64,
    kept: VecDeque<PathBuf>,
    used: HashSet<PathBuf>,
}

const SEQ: &str = "{seq}";

impl RotatingWriter {
    pub fn new(pattern: &str, spec: FileSpec, policy: RotationPolicy) -> Result<Self, RotateError> {
        if policy.max_bytes == Some(0) || policy.max_packets == Some(0) || policy.max_seconds == Some(0) {
            return Err(RotateError::Policy("size, time and packet limits start at 1"));
        }
        if policy.max_files == Some(0) {
            return Err(RotateError::Policy("the file limit starts at 1"));
        }
        if pattern.is_empty() {
            return Err(RotateError::Pattern { pattern: pattern.into(), reason: "empty".into() });
        }
        let mut has_conversion = false;
        for item in StrftimeItems::new(pattern) {
            match item {
                Item::Error => {
                    return Err(RotateError::Pattern {
                        pattern: pattern.into(),
                        reason: "contains an invalid strftime conversion (use %% for a literal %)".into(),
                    })
                }
                Item::Numeric(..) | Item::Fixed(..) => has_conversion = true,
                _ => {}
            }
        }
        Ok(RotatingWriter {
            pattern: pattern.to_string(),
            has_conversion,
            has_seq: pattern.contains(SEQ),
            spec,
            policy,
            cur: None,
            seq: 0,
            kept: VecDeque::new(),
            used: HashSet::new(),
        })
    }

    pub fn write_packet(&mut self, ts_ns: u64, data: &[u8], wire_len: u32) -> Result<(), RotateError> {
        if self.needs_new_file(ts_ns, data.len()) {
            self.open_next(ts_ns)?;
        }
        let cur = self.cur.as_mut().expect("a file is open after open_next");
        cur.writer.write_packet(ts_ns, data, wire_len).map_err(|source| RotateError::Io { path: cur.path.clone(), source })
    }

    fn needs_new_file(&self, ts_ns: u64, caplen: usize) -> bool {
        let Some(cur) = &self.cur else { return true };
        let w = &cur.writer;
        let first_in_file = w.packets_written() == 0;
        let by_size = self.policy.max_bytes.is_some_and(|max| w.bytes_written() + w.record_len(caplen) > max);
        let by_count = self.policy.max_packets.is_some_and(|max| w.packets_written() >= max);
        let by_time = self.policy.max_seconds.is_some() && ts_ns >= cur.window_end;
        !first_in_file && (by_size || by_count || by_time)
    }

    fn name_for(&self, ts_ns: u64) -> PathBuf {
        let when: DateTime<Utc> = DateTime::from_timestamp((ts_ns / 1_000_000_000) as i64, (ts_ns % 1_000_000_000) as u32)
            .unwrap_or_default();
        let mut name = when.format(&self.pattern).to_string().replace(SEQ, &self.seq.to_string());
        let needs_seq = self.policy.rotates() && !self.has_conversion && !self.has_seq;
        if needs_seq || self.used.contains(&PathBuf::from(&name)) {
            name = insert_before_extension(&name, &format!(".{}", self.seq));
        }
        PathBuf::from(name)
    }

    fn open_next(&mut self, ts_ns: u64) -> Result<(), RotateError> {
        self.close_current()?;
        let path = self.name_for(ts_ns);
        let file = File::create(&path).map_err(|source| RotateError::Io { path: path.clone(), source })?;
        let s = self.spec;
        let writer = TraceWriter::new(file, s.format, s.link, s.snaplen, s.precision)
            .map_err(|source| RotateError::Io { path: path.clone(), source })?;
        let window_end = match self.policy.max_seconds {
            Some(g) => {
                let period = g.saturating_mul(1_000_000_000);
                (ts_ns / period).saturating_add(1).saturating_mul(period)
            }
            None => u64::MAX,
        };
        self.used.insert(path.clone());
        self.kept.push_back(path.clone());
        self.seq += 1;
        if let Some(max) = self.policy.max_files {
            while self.kept.len() > max {
                let old = self.kept.pop_front().expect("more than max >= 1 files kept");
                std::fs::remove_file(&old).map_err(|source| RotateError::Io { path: old, source })?;
            }
        }
        self.cur = Some(Current { writer, path, window_end });
        Ok(())
    }

    fn close_current(&mut self) -> Result<(), RotateError> {
        if let Some(cur) = self.cur.take() {
            let path = cur.path;
            let file = cur.writer.finish().map_err(|source| RotateError::Io { path: path.clone(), source })?;
            file.sync_data().map_err(|source| RotateError::Io { path, source })?;
        }
        Ok(())
    }

    /// Files written and still kept, oldest first.
    pub fn files(&self) -> impl Iterator<Item = &PathBuf> {
        self.kept.iter()
    }

    /// Close the last file; if nothing was written at all, write one empty file.
    pub fn finish(mut self) -> Result<Vec<PathBuf>, RotateError> {
        if self.cur.is_none() && self.kept.is_empty() {
            let now = Utc::now();
            let ts = now.timestamp().max(0) as u64 * 1_000_000_000 + u64::from(now.timestamp_subsec_nanos());
            self.open_next(ts)?;
        }
        self.close_current()?;
        Ok(self.kept.into_iter().collect())
    }
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
        assert_eq!(
            names(&files, dir.path()),
            ["t-20240101-000030.pcapng", "t-20240101-000100.pcapng", "t-20240101-000205.pcapng"]
        );
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
    fn extension_insertion() {
        assert_eq!(insert_before_extension("dir.d/out.pcap", ".3"), "dir.d/out.3.pcap");
        assert_eq!(insert_before_extension("dir.d/out", ".3"), "dir.d/out.3");
        assert_eq!(insert_before_extension(".hidden", ".3"), ".hidden.3");
    }
}
