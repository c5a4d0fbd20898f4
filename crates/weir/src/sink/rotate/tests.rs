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
    let mut files: Vec<PathBuf> = w.kept.iter().map(|k| k.path.clone()).collect();
    files.extend(w.cur.as_ref().map(|c| c.path.clone()));
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

/// A pcap file spec whose largest first packet makes a 24 + 16 + 600 byte file.
fn small_spec() -> FileSpec {
    FileSpec { snaplen: 600, ..spec() }
}

/// The regular files in `dir` and their lengths, by name.
fn listing(dir: &Path) -> std::collections::BTreeMap<String, u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
        .collect()
}

fn set_mtime(path: &Path, secs: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_secs(secs)).unwrap();
}

/// Files that are not the writer's: another name, a compressed copy, a
/// name with letters where the pattern has digits, a symbolic link and a
/// directory named as the pattern would name a file.
fn bystanders(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, len) in [("notes.txt", 5000), ("out.pcap.gz", 7000), ("out.x.pcap", 9000), ("xout.1.pcap", 100), ("out.1.pcapng", 300)] {
        let p = dir.join(name);
        std::fs::write(&p, vec![b'z'; len]).unwrap();
        set_mtime(&p, 1_000);
        out.push((p, vec![b'z'; len]));
    }
    std::os::unix::fs::symlink(dir.join("notes.txt"), dir.join("out.99.pcap")).unwrap();
    std::fs::create_dir(dir.join("out.98.pcap")).unwrap();
    out
}

/// The naive model of the rolling buffer: closed files oldest first, and
/// the open one; a new file deletes the oldest closed until closed + max
/// fits the budget, and then grows by whole records up to max.
struct Model {
    closed: VecDeque<(String, u64)>,
    open: Option<(String, u64, u64)>,
    seq: u64,
    max: u64,
    budget: u64,
    deleted: Vec<(String, u64)>,
}

impl Model {
    fn write(&mut self, rec: u64) {
        let rotate = match &self.open {
            None => true,
            Some((_, size, records)) => *records > 0 && size + rec > self.max,
        };
        if rotate {
            if let Some((name, size, _)) = self.open.take() {
                self.closed.push_back((name, size));
            }
            while self.closed.iter().map(|f| f.1).sum::<u64>() + self.max > self.budget {
                self.deleted.push(self.closed.pop_front().unwrap());
            }
            self.open = Some((format!("out.{}.pcap", self.seq), 24, 0));
            self.seq += 1;
        }
        let open = self.open.as_mut().unwrap();
        open.1 += rec;
        open.2 += 1;
    }
    fn total(&self) -> u64 {
        self.closed.iter().map(|f| f.1).sum::<u64>() + self.open.as_ref().map_or(0, |o| o.1)
    }
}

#[test]
fn a_byte_budget_holds_at_every_packet_against_a_naive_model() {
    use rand::{Rng, SeedableRng};
    for seed in 0..24u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let dir = tempfile::tempdir().unwrap();
        let others = bystanders(dir.path());
        // Files of earlier runs: an unrotated run's, and rotated ones whose
        // ages are not in sequence order (out.5 is the oldest).
        let mut model = Model { closed: VecDeque::new(), open: None, seq: 0, max: 0, budget: 0, deleted: Vec::new() };
        let earlier: Vec<(&str, u64)> =
            if seed % 3 == 0 { vec![] } else { vec![("out.5.pcap", 10), ("out.pcap", 20), ("out.0.pcap", 30), ("out.2.pcap", 40)] };
        for (name, mtime) in &earlier {
            let len = rng.gen_range(24..3000u64);
            std::fs::write(dir.path().join(name), vec![0u8; len as usize]).unwrap();
            set_mtime(&dir.path().join(name), *mtime);
            model.closed.push_back((name.to_string(), len));
        }
        // The symbolic link out.99.pcap among the bystanders sets the numbering.
        model.seq = 100;
        let max = rng.gen_range(640..4000u64);
        let budget = rng.gen_range(2 * max..8 * max);
        (model.max, model.budget) = (max, budget);
        let policy = RotationPolicy { max_bytes: Some(max), budget_bytes: Some(budget), ..Default::default() };
        let pattern = dir.path().join("out.pcap");
        let mut w = RotatingWriter::new(pattern.to_str().unwrap(), small_spec(), policy).unwrap();
        let mut reported = Vec::new();
        for i in 0..rng.gen_range(50..400u64) {
            let caplen = rng.gen_range(1..=600usize);
            w.write_packet(i * S, &vec![i as u8; caplen], caplen as u32).unwrap();
            model.write(16 + caplen as u64);
            w.flush().unwrap();
            // The writer's count and the disk agree with the model, and hold the budget.
            assert!(w.total_bytes() <= budget, "seed {seed} packet {i}: {} > {budget}", w.total_bytes());
            assert_eq!(w.total_bytes(), model.total(), "seed {seed} packet {i}");
            let mut want: std::collections::BTreeMap<String, u64> = model.closed.iter().cloned().collect();
            let open = model.open.as_ref().unwrap();
            want.insert(open.0.clone(), open.1);
            for (p, _) in &others {
                want.insert(p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::metadata(p).unwrap().len());
            }
            assert_eq!(listing(dir.path()), want, "seed {seed} packet {i}");
            reported.extend(w.take_deletions());
        }
        let done = w.finish_with_deletions().unwrap();
        reported.extend(done.deletions);
        let got: Vec<(String, u64)> =
            reported.iter().map(|d| (d.path.file_name().unwrap().to_string_lossy().into_owned(), d.bytes)).collect();
        assert_eq!(got, model.deleted, "seed {seed}: every deletion reported, oldest first");
        assert!(reported.iter().all(|d| d.reason == DeleteReason::Budget && d.error.is_none()));
        let totals = done.totals;
        assert_eq!((totals.files, totals.bytes), (got.len() as u64, got.iter().map(|d| d.1).sum()), "seed {seed}");
        assert_eq!((totals.failed, totals.unlisted), (0, 0));
        // The newest are kept: this run's files are the last ones of the model.
        let ours: Vec<String> = model.closed.iter().map(|f| f.0.clone()).chain([model.open.unwrap().0]).collect();
        let ours: Vec<&String> = ours.iter().filter(|n| !earlier.iter().any(|e| e.0 == n.as_str())).collect();
        assert_eq!(names(&done.files, dir.path()).iter().collect::<Vec<_>>(), ours, "seed {seed}");
        // Nothing else was touched.
        for (p, content) in &others {
            assert_eq!(&std::fs::read(p).unwrap(), content, "{}", p.display());
        }
        assert!(std::fs::symlink_metadata(dir.path().join("out.99.pcap")).unwrap().file_type().is_symlink());
        assert!(dir.path().join("out.98.pcap").is_dir());
    }
}

#[test]
fn a_budget_the_limits_cannot_keep_is_refused_up_front() {
    let refused = |policy: RotationPolicy, says: &str| {
        let e = RotatingWriter::new("never.pcap", small_spec(), policy).err().expect("refused");
        assert!(matches!(e, RotateError::Budget(_)), "{e:?}");
        assert!(e.to_string().contains(says), "{e}");
        assert!(e.is_bad_input());
    };
    let p = RotationPolicy { max_bytes: Some(1000), budget_bytes: Some(1999), ..Default::default() };
    refused(p, "cannot hold two files");
    refused(RotationPolicy { max_bytes: None, max_packets: Some(5), ..p }, "needs a size limit");
    refused(RotationPolicy { max_bytes: Some(600), budget_bytes: Some(10_000), ..p }, "640 bytes in all");
    refused(RotationPolicy { max_age: Some(Duration::from_secs(60)), ..Default::default() }, "needs rotation");
    let zero = RotationPolicy { max_packets: Some(1), max_age: Some(Duration::ZERO), ..Default::default() };
    assert!(matches!(RotatingWriter::new("never.pcap", small_spec(), zero), Err(RotateError::Policy(_))));
    let ok = RotationPolicy { max_bytes: Some(1000), budget_bytes: Some(2000), ..Default::default() };
    assert!(RotatingWriter::new("never.pcap", small_spec(), ok).is_ok());
}

#[test]
fn files_older_than_the_age_limit_go_oldest_first_by_packet_time() {
    let dir = tempfile::tempdir().unwrap();
    let others = bystanders(dir.path());
    // An earlier run's file, last written at 1,000 s: older than any packet.
    std::fs::write(dir.path().join("a.7.pcap"), [0u8; 100]).unwrap();
    set_mtime(&dir.path().join("a.7.pcap"), 1_000);
    // One written "later" than the packets (a trace replayed after it): it is young.
    std::fs::write(dir.path().join("a.3.pcap"), [0u8; 50]).unwrap();
    set_mtime(&dir.path().join("a.3.pcap"), 2_000_000_000);
    let pattern = dir.path().join("a.pcap");
    let policy = RotationPolicy { max_packets: Some(3), max_age: Some(Duration::from_secs(10)), ..Default::default() };
    let mut w = RotatingWriter::new(pattern.to_str().unwrap(), spec(), policy).unwrap();
    w.prepare().unwrap();
    assert_eq!(w.earlier_run(), (2, 150));
    let base = 1_700_000_000 * S;
    let mut deleted = Vec::new();
    for t in 0..30u64 {
        w.write_packet(base + t * S, &[0; 60], 60).unwrap();
        for d in w.take_deletions() {
            assert_eq!(d.reason, DeleteReason::Age);
            deleted.push((t, d.path.file_name().unwrap().to_string_lossy().into_owned()));
        }
    }
    // a.8 opened by prepare holds packets 0-2 (newest 2 s), a.9 3-5, ...: a
    // file goes at the first packet more than 10 s after its newest.
    let want: Vec<(u64, String)> =
        std::iter::once((0, "a.7.pcap".to_string())).chain((0..6u64).map(|k| (3 * k + 2 + 11, format!("a.{}.pcap", 8 + k)))).collect();
    assert_eq!(deleted, want);
    let files = w.finish().unwrap();
    assert_eq!(names(&files, dir.path()), ["a.14.pcap", "a.15.pcap", "a.16.pcap", "a.17.pcap"]);
    assert!(dir.path().join("a.3.pcap").exists(), "a file whose time is ahead of the packets is young");
    for (p, content) in &others {
        assert_eq!(&std::fs::read(p).unwrap(), content);
    }
}

#[test]
fn the_wall_clock_ages_files_while_no_packet_comes() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("q.pcap");
    let policy = RotationPolicy { max_packets: Some(1), max_age: Some(Duration::from_secs(60)), ..Default::default() };
    let mut w = RotatingWriter::new(pattern.to_str().unwrap(), spec(), policy).unwrap();
    for t in 0..3u64 {
        w.write_packet(t * S, &[0; 60], 60).unwrap();
    }
    w.expire(60 * S);
    assert!(w.take_deletions().is_empty(), "a packet at 0 s is 60 s old, not older");
    w.expire(62 * S);
    let gone: Vec<String> = w.take_deletions().into_iter().map(|d| d.path.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(gone, ["q.0.pcap", "q.1.pcap"], "the open file stays");
    assert_eq!(names(&w.finish().unwrap(), dir.path()), ["q.2.pcap"]);
}

#[test]
fn a_file_that_cannot_be_deleted_is_reported_counted_and_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    for (name, mtime) in [("u.0.pcap", 10), ("u.1.pcap", 20)] {
        std::fs::write(dir.path().join(name), [0u8; 1000]).unwrap();
        set_mtime(&dir.path().join(name), mtime);
    }
    let pattern = dir.path().join("u.pcap");
    let policy = RotationPolicy { max_bytes: Some(1000), budget_bytes: Some(2500), ..Default::default() };
    let mut w = RotatingWriter::new(pattern.to_str().unwrap(), small_spec(), policy).unwrap();
    w.prepare().unwrap();
    assert_eq!(w.earlier_run(), (2, 2000));
    assert_eq!(w.take_deletions().len(), 1, "u.0 made room for the first file");
    assert_eq!(w.total_bytes(), 1000 + 24, "u.1 and the open file's header");

    // The oldest becomes a directory after it was adopted: unlink(2) refuses it.
    let undeletable = |dir: &Path, sizes: &[usize]| {
        for (i, len) in sizes.iter().enumerate() {
            let name = dir.join(format!("u.{i}.pcap"));
            std::fs::write(&name, vec![0u8; *len]).unwrap();
            set_mtime(&name, 10 * (i as u64 + 1));
        }
    };
    let dir2 = tempfile::tempdir().unwrap();
    undeletable(dir2.path(), &[1100, 900, 900]);
    let pattern = dir2.path().join("u.pcap");
    let policy = RotationPolicy { max_bytes: Some(1000), budget_bytes: Some(2800), ..Default::default() };
    let mut w = RotatingWriter::new(pattern.to_str().unwrap(), small_spec(), policy).unwrap();
    w.adopt_earlier().unwrap();
    let stuck = dir2.path().join("u.0.pcap");
    std::fs::remove_file(&stuck).unwrap();
    std::fs::create_dir(&stuck).unwrap();
    std::fs::write(stuck.join("x"), b"x").unwrap();
    // 2900 closed + 1000 > 2800: u.0 cannot go, so u.1 and u.2 do.
    w.prepare().unwrap();
    let d = w.take_deletions();
    let summary: Vec<(String, bool)> =
        d.iter().map(|d| (d.path.file_name().unwrap().to_string_lossy().into_owned(), d.error.is_some())).collect();
    assert_eq!(summary, [("u.0.pcap".to_string(), true), ("u.1.pcap".to_string(), false), ("u.2.pcap".to_string(), false)]);
    let t = w.deletion_totals();
    assert_eq!((t.files, t.bytes, t.failed, t.failed_bytes), (2, 1800, 1, 1100));
    assert_eq!(w.total_bytes(), 1100 + 24, "the undeletable file still counts");
    for i in 0..40u64 {
        w.write_packet(i * S, &[0; 400], 400).unwrap();
        assert!(w.total_bytes() <= 2800);
    }
    assert_eq!(w.deletion_totals().failed, 1, "not tried again");

    // Where the undeletable file leaves no room for a whole file, nothing is written.
    let dir3 = tempfile::tempdir().unwrap();
    undeletable(dir3.path(), &[1100, 500]);
    let pattern = dir3.path().join("u.pcap");
    let policy = RotationPolicy { max_bytes: Some(1000), budget_bytes: Some(2000), ..Default::default() };
    let mut w = RotatingWriter::new(pattern.to_str().unwrap(), small_spec(), policy).unwrap();
    w.adopt_earlier().unwrap();
    let stuck = dir3.path().join("u.0.pcap");
    std::fs::remove_file(&stuck).unwrap();
    std::fs::create_dir(&stuck).unwrap();
    std::fs::write(stuck.join("x"), b"x").unwrap();
    let e = w.prepare().expect_err("over budget");
    assert!(matches!(e, RotateError::OverBudget { budget: 2000, .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("u.0.pcap") && text.contains("1100 bytes"), "{text}");
    assert!(!e.is_bad_input());
    assert_eq!(w.take_deletions().len(), 2, "u.0 tried, u.1 deleted");
    assert_eq!(listing(dir3.path()).len(), 0, "no file was created");
}

#[test]
fn a_restart_counts_the_files_of_earlier_runs_and_never_overwrites_them() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("r.pcap");
    let policy = RotationPolicy { max_bytes: Some(1000), budget_bytes: Some(4000), ..Default::default() };
    let run = |from: u64| {
        let mut w = RotatingWriter::new(pattern.to_str().unwrap(), small_spec(), policy).unwrap();
        w.prepare().unwrap();
        for i in from..from + 20 {
            w.write_packet(i * S, &[i as u8; 300], 300).unwrap();
            assert!(w.total_bytes() <= 4000);
        }
        w.finish_with_deletions().unwrap()
    };
    let first = run(0);
    assert_eq!(names(&first.files, dir.path()), ["r.3.pcap", "r.4.pcap", "r.5.pcap", "r.6.pcap"]);
    let second = run(100);
    // Numbering goes on after r.6; the first run's files went first.
    assert_eq!(names(&second.files, dir.path()), ["r.10.pcap", "r.11.pcap", "r.12.pcap", "r.13.pcap"]);
    let gone: Vec<(String, bool)> =
        second.deletions.iter().map(|d| (d.path.file_name().unwrap().to_string_lossy().into_owned(), d.earlier_run)).collect();
    assert_eq!(&gone[..4], [("r.3.pcap".into(), true), ("r.4.pcap".into(), true), ("r.5.pcap".into(), true), ("r.6.pcap".into(), true)]);
    assert!(listing(dir.path()).values().sum::<u64>() <= 4000);
}

#[test]
fn names_the_pattern_could_have_produced() {
    let m = |pattern: &str, name: &str| NameMatcher::new(pattern).matches(name);
    assert_eq!(m("out.pcap", "out.pcap"), Some(None));
    assert_eq!(m("out.pcap", "out.0.pcap"), Some(Some(0)));
    assert_eq!(m("out.pcap", "out.123.pcap"), Some(Some(123)));
    for not in ["out.pcap.gz", "out..pcap", "out.1a.pcap", "xout.1.pcap", "out.-1.pcap", "out.pcapng", "out.1.2.pcap", "out.", ""] {
        assert_eq!(m("out.pcap", not), None, "{not}");
    }
    let t = "cap-%Y%m%d-%H%M%S.pcapng";
    assert_eq!(m(t, "cap-20240101-000030.pcapng"), Some(None));
    assert_eq!(m(t, "cap-20240101-000030.3.pcapng"), Some(Some(3)));
    assert_eq!(m(t, "cap-2024-01.pcapng"), None);
    assert_eq!(m(t, "cap-20240101-000030.pcap"), None);
    assert_eq!(m("c-{seq}.pcap", "c-17.pcap"), Some(Some(17)));
    assert_eq!(m("c-{seq}.pcap", "c-17.4.pcap"), Some(Some(17)), "a duplicate's .N too");
    assert_eq!(m("c-{seq}.pcap", "c-.pcap"), None);
    assert_eq!(m("%b-%e.pcap", "Jan- 5.pcap"), Some(None));
    assert_eq!(m("%b-%e.pcap", "Jan/5.pcap"), None);
    assert_eq!(m("t%s%.f.pcap", "t1700000000.123456.pcap"), Some(None));
    assert_eq!(m(".hidden", ".hidden"), Some(None));
    assert_eq!(m(".hidden", ".hidden.4"), Some(Some(4)));
    assert_eq!(m("noext", "noext.9"), Some(Some(9)));
    assert_eq!(m("100%%.pcap", "100%.2.pcap"), Some(Some(2)));
    assert_eq!(m("out.pcap", "out.99999999999999999999999.pcap"), Some(None), "too long for a number, still the pattern's");
}

#[test]
fn extension_insertion() {
    assert_eq!(insert_before_extension("dir.d/out.pcap", ".3"), "dir.d/out.3.pcap");
    assert_eq!(insert_before_extension("dir.d/out", ".3"), "dir.d/out.3");
    assert_eq!(insert_before_extension(".hidden", ".3"), ".hidden.3");
}

#[test]
fn a_next_file_asked_for_starts_at_the_next_packet_and_only_where_there_is_one_to_close() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("rec.pcap");
    let mut w = RotatingWriter::new(pattern.to_str().unwrap(), spec(), RotationPolicy::default()).unwrap();
    assert!(!w.start_next_file(), "no file is open yet");
    w.prepare().unwrap();
    assert!(!w.start_next_file(), "the open file has no packet: it stays the current one");
    w.write_packet(S, &[1; 60], 60).unwrap();
    assert!(w.start_next_file());
    assert!(w.start_next_file(), "asked twice before a packet: still one new file");
    w.write_packet(2 * S, &[2; 60], 60).unwrap();
    w.write_packet(3 * S, &[3; 60], 60).unwrap();
    let files = w.finish().unwrap();
    // The first name is taken: the next one gets its sequence number, so
    // nothing is overwritten.
    assert_eq!(names(&files, dir.path()), ["rec.pcap", "rec.1.pcap"]);
    assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 24 + 16 + 60);
    assert_eq!(std::fs::metadata(&files[1]).unwrap().len(), 24 + 2 * (16 + 60));

    let mut dev = RotatingWriter::new("/dev/null", spec(), RotationPolicy::default()).unwrap();
    dev.write_packet(S, &[0; 60], 60).unwrap();
    assert!(!dev.start_next_file(), "a device has no next file");
    let path = dir.path().join("stream.pcap");
    let mut stream = RotatingWriter::stream(File::create(&path).unwrap(), "standard output", spec()).unwrap();
    stream.write_packet(S, &[0; 60], 60).unwrap();
    assert!(!stream.start_next_file(), "a stream is one file");
}
