//! `weir record`'s outputs as a user meets them: pipes, FIFOs, `/dev/null` and
//! standard output; files rotated under a capture that is killed; link types and
//! record lengths the formats carry or refuse; and an output the capture's user
//! cannot write, refused before capture starts (on the veth test bed, as root);
//! the rolling buffer (`--budget`, `--max-age`) on a trace `weir synth` made.
//! Read back by libpcap, capinfos and tcpdump.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use weir::filter::oracle::Oracle;
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::LinkType;

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

fn run(args: &[&str]) -> Output {
    weir().args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `n` UDP packets of varying sizes.
fn trace(dir: &Path, n: u32) -> PathBuf {
    let path = dir.join("in.pcap");
    let mut w =
        TraceWriter::new(std::fs::File::create(&path).unwrap(), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Micro).unwrap();
    for i in 0..n {
        let f = frame(i, 60 + (i as usize * 53) % 1400);
        w.write_packet(1_600_000_000_000_000_000 + u64::from(i) * 1_000_000, &f, f.len() as u32).unwrap();
    }
    w.finish().unwrap();
    path
}

/// An Ethernet/IPv4/UDP frame of `len` bytes.
fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0];
    let ip_len = (len - 14) as u16;
    f.extend_from_slice(&[0x45, 0, (ip_len >> 8) as u8, ip_len as u8, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[198, 18, 0, (i % 7) as u8, 198, 19, 0, 1, 0x13, 0x88, 0, 53]);
    f.resize(len, i as u8);
    f
}

/// A pcap file header (little-endian, microseconds) with this link-type field.
fn pcap_header(link_field: u32) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&65535u32.to_le_bytes());
    h.extend_from_slice(&link_field.to_le_bytes());
    h
}

/// A pcap record header and its data.
fn pcap_record(sec: u32, data: &[u8], wire_len: u32) -> Vec<u8> {
    let mut r = Vec::new();
    for v in [sec, 0, data.len() as u32, wire_len] {
        r.extend_from_slice(&v.to_le_bytes());
    }
    r.extend_from_slice(data);
    r
}

/// libpcap's view of a file: (captured length, wire length) of each record.
fn libpcap_lengths(path: &Path) -> Vec<(usize, u32)> {
    let mut h = Oracle::system().unwrap().open_offline(path).unwrap();
    let mut out = Vec::new();
    while let Some(p) = h.next_packet().unwrap() {
        out.push((p.data.len(), p.wire_len));
    }
    out
}

fn capinfos_packets(path: &Path) -> Option<u64> {
    let o = Command::new("capinfos").args(["-M", "-c", "-T", "-r"]).arg(path).output().ok()?;
    assert!(o.status.success(), "capinfos {}: {}", path.display(), text(&o.stderr));
    Some(text(&o.stdout).trim().split('\t').nth(1).unwrap().parse().unwrap())
}

#[test]
fn dev_null_a_fifo_and_standard_output_are_written_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), 2_000);
    let t = t.to_str().unwrap();
    let file = dir.path().join("file.pcap");
    let r = run(&["record", "-q", t, "-w", file.to_str().unwrap()]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let want = std::fs::read(&file).unwrap();

    // fdatasync refuses all three (EINVAL): only regular files are synced.
    let r = run(&["record", "-q", t, "-w", "/dev/null"]);
    assert!(r.status.success(), "/dev/null: {}", text(&r.stderr));
    assert!(text(&r.stderr).contains("2000 packets"), "{}", text(&r.stderr));

    let fifo = dir.path().join("fifo");
    let carried = dir.path().join("carried.pcap");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let mut cat = Command::new("cat").arg(&fifo).stdout(std::fs::File::create(&carried).unwrap()).spawn().unwrap();
    let r = run(&["record", "-q", t, "-w", fifo.to_str().unwrap()]);
    let started = Instant::now();
    while cat.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            cat.kill().unwrap();
            panic!("the FIFO's reader never saw its end: {}", text(&r.stderr));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(r.status.success(), "FIFO: {}", text(&r.stderr));
    assert!(std::fs::read(&carried).unwrap() == want, "the FIFO carried the same bytes as the file");

    for out in ["-", "/dev/stdout"] {
        let r = run(&["record", "-q", t, "-w", out]);
        assert!(r.status.success(), "-w {out}: {}", text(&r.stderr));
        assert!(r.stdout == want, "-w {out}: standard output holds the capture and nothing else");
        assert!(text(&r.stderr).contains("written to 1 file"), "-w {out}: the summary goes to stderr: {}", text(&r.stderr));
    }
    assert!(!Path::new("-").exists(), "-w - is no file named '-'");

    let r = run(&["record", "-q", t, "-w", "-", "--format", "pcapng"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let ng = dir.path().join("from-stdout.pcapng");
    std::fs::write(&ng, &r.stdout).unwrap();
    assert_eq!(&r.stdout[..4], b"\x0a\x0d\x0d\x0a");
    assert_eq!(libpcap_lengths(&ng), libpcap_lengths(&file));
}

#[test]
fn standard_output_cannot_rotate() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), 10);
    for opt in [&["-C", "1"][..], &["-G", "60"], &["--file-packets", "5"], &["-W", "3"]] {
        let mut args = vec!["record", t.to_str().unwrap(), "-w", "-"];
        args.extend_from_slice(opt);
        let r = run(&args);
        assert_eq!(r.status.code(), Some(2), "{opt:?}: {}", text(&r.stderr));
        assert!(text(&r.stderr).contains("standard output, which cannot be rotated"), "{opt:?}: {}", text(&r.stderr));
        assert!(r.stdout.is_empty(), "{opt:?}: nothing written");
    }
}

#[test]
fn a_link_type_the_format_cannot_hold_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("odd-link.pcap");
    let mut bytes = pcap_header(67_108_863);
    bytes.extend(pcap_record(1_700_000_000, &frame(0, 60), 60));
    std::fs::write(&input, bytes).unwrap();
    for name in ["out.pcapng", "out.pcap"] {
        let out = dir.path().join(name);
        let r = run(&["record", input.to_str().unwrap(), "-w", out.to_str().unwrap()]);
        let err = text(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains("link type 67108863") && err.contains("0 to 65535"), "{name}: {err}");
        assert!(!out.exists(), "{name}: no file written");
    }
}

/// libpcap reports a record whose captured length exceeds its wire length as it is
/// in the file, and `tcpdump -w` (pcap_dump) writes it so: weir record keeps both
/// lengths too, and writes the wire bytes weir count sums.
#[test]
fn captured_length_over_wire_length_is_kept_as_libpcap_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("caplen.pcap");
    let lengths = [(100, 60), (60, 60), (80, 70)];
    let mut bytes = pcap_header(1);
    for (i, &(cap, wire)) in lengths.iter().enumerate() {
        bytes.extend(pcap_record(1_700_000_000 + i as u32, &frame(i as u32, cap), wire));
    }
    std::fs::write(&input, bytes).unwrap();
    let want: Vec<(usize, u32)> = lengths.iter().map(|&(c, w)| (c, w)).collect();
    assert_eq!(libpcap_lengths(&input), want, "what pcap_next_ex reports");

    let out = dir.path().join("out.pcap");
    let r = run(&["record", "-q", input.to_str().unwrap(), "-w", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert_eq!(libpcap_lengths(&out), want, "weir record keeps both lengths");
    let ng = dir.path().join("out.pcapng");
    let r = run(&["record", "-q", input.to_str().unwrap(), "-w", ng.to_str().unwrap()]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert_eq!(libpcap_lengths(&ng), want, "and so does its pcapng");
    if let Ok(o) = Command::new("tcpdump").arg("-r").arg(&input).arg("-w").arg(dir.path().join("tcpdump.pcap")).output() {
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(std::fs::read(dir.path().join("tcpdump.pcap")).unwrap() == std::fs::read(&out).unwrap(), "the same bytes as tcpdump -w");
    }

    let bytes_counted = |path: &Path| -> u64 {
        let o = run(&["count", "--json", path.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["bytes"].as_u64().unwrap()
    };
    assert_eq!(bytes_counted(&input), 190, "count sums the wire lengths");
    assert_eq!(bytes_counted(&out), 190, "and finds the same in what record wrote");
}

/// A pcap stream on `w`, packets of 1,000 bytes, until the reader goes away.
fn feed(mut w: impl Write) {
    let mut chunk = Vec::new();
    if w.write_all(&pcap_header(1)).is_err() {
        return;
    }
    for i in 0u32.. {
        chunk.extend(pcap_record(1_700_000_000 + i / 1000, &frame(i, 1000), 1000));
        if i % 64 == 63 {
            if w.write_all(&chunk).and_then(|()| w.flush()).is_err() {
                return;
            }
            chunk.clear();
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Files named `base.N.ext` in `dir`, by N.
fn rotated(dir: &Path, base: &str) -> Vec<PathBuf> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let n = name.strip_prefix(base)?.strip_prefix('.')?.split('.').next()?.parse().ok()?;
            Some((n, p))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

#[test]
fn a_capture_killed_while_rotating_leaves_every_closed_file_complete() {
    for ext in ["pcap", "pcapng"] {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join(format!("k.{ext}"));
        let mut child = weir()
            .args(["record", "-q", "-", "-w", pattern.to_str().unwrap(), "-C", "1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || feed(stdin));
        let started = Instant::now();
        while rotated(dir.path(), "k").len() < 6 {
            assert!(started.elapsed() < Duration::from_secs(60), "{ext}: weir record did not rotate");
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        feeder.join().unwrap();

        let files = rotated(dir.path(), "k");
        let (open, closed) = files.split_last().unwrap();
        for f in closed {
            assert!(std::fs::metadata(f).unwrap().len() <= 1_000_000, "{}: -C 1 holds", f.display());
            let n = libpcap_lengths(f).len();
            assert_eq!(n, libpcap_lengths(&closed[0]).len(), "{}: every closed file holds as many packets", f.display());
            assert!(n >= 900, "{}: a closed file is complete ({n} packets)", f.display());
            if let Some(c) = capinfos_packets(f) {
                assert_eq!(c, n as u64, "{}: capinfos agrees", f.display());
            }
        }
        // The open file: its header is there; its last packet may be cut short.
        let size = std::fs::metadata(open).unwrap().len();
        assert!(size >= 24, "{}: the open file has its header ({size} bytes)", open.display());
        let mut h = Oracle::system().unwrap().open_offline(open).unwrap_or_else(|e| panic!("{}: {e}", open.display()));
        while let Ok(Some(_)) = h.next_packet() {}
    }
}

#[test]
#[ignore = "needs root: a live capture on a veth test bed, dropping to nobody"]
fn an_output_the_user_cannot_write_is_refused_before_capture() {
    // A live interface that delivers nothing (the filter passes no packet there):
    // the check cannot wait for a first packet.
    let tb = testbed::TestBed::new(1);
    let dir = tempfile::tempdir().unwrap();
    // Root's 0700 temporary directory: nobody cannot create files in it.
    let out = dir.path().join("x.pcap");
    let source = format!("afpacket:{}", tb.rx_if);
    for (name, says) in [(out.clone(), out.display().to_string()), (dir.path().join("x-%H%M.pcap"), dir.path().display().to_string())] {
        let mut child = tb
            .in_rx(env!("CARGO_BIN_EXE_weir"))
            .args(["record", "-q", "-f", "udp port 9", &source, "-Z", "nobody", "-w", name.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if started.elapsed() > Duration::from_secs(10) {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("{}: weir record waited for a packet instead of checking its output", name.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(err.contains("as user nobody") && err.contains(&says) && err.contains("Permission denied"), "{err}");
        assert!(!out.exists());
    }

    // Where nobody may write, the file is created as nobody.
    let open = tempfile::tempdir().unwrap();
    assert!(Command::new("chmod").arg("1777").arg(open.path()).status().unwrap().success());
    let t = trace(open.path(), 100);
    let out = open.path().join("ok.pcap");
    let r = run(&["record", "-q", t.to_str().unwrap(), "-Z", "nobody", "-w", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&out).unwrap());
    let nobody = Command::new("id").args(["-u", "nobody"]).output().unwrap();
    assert_eq!(owner.to_string(), text(&nobody.stdout).trim(), "created by the user the capture runs as");
    assert_eq!(libpcap_lengths(&out).len(), 100);
}

#[test]
fn help_says_what_survives_a_kill_and_how_to_write_to_standard_output() {
    let r = run(&["record", "--help"]);
    let help = text(&r.stdout);
    for s in ["-w -", "SIGKILL", "power loss", "four times a second", "before capture starts", "/dev/null"] {
        assert!(help.contains(s), "record --help mentions {s:?}: {help}");
    }
}

/// Every packet of a file, as libpcap reads it: (timestamp, data).
fn libpcap_packets(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let mut h = Oracle::system().unwrap().open_offline(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    while let Some(p) = h.next_packet().unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
        out.push((p.ts_ns, p.data));
    }
    out
}

/// A trace from `weir synth`: `packets` packets at `mbps` on average.
fn synth(dir: &Path, packets: &str, mbps: &str) -> PathBuf {
    let t = dir.join("synth.pcap");
    let r = run(&["synth", "-o", t.to_str().unwrap(), "-n", packets, "-c", "300", "--mbps", mbps, "--seed", "9"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    t
}

/// The files `b.N.pcap` in `dir`, by N, and their lengths.
fn budget_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    rotated(dir, "b")
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().split('.').collect::<Vec<_>>().len() == 3 && p.extension().unwrap() == "pcap")
        .map(|p| (p.clone(), std::fs::metadata(&p).unwrap().len()))
        .collect()
}

/// The deletion lines of a run's standard error: (reason, file, bytes, from an earlier run).
fn deletions(stderr: &str) -> Vec<(String, PathBuf, u64, bool)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("weir record: ")?;
            let (reason, rest) = rest.split_once(": deleted ")?;
            let (file, bytes) = rest.rsplit_once(" (")?;
            let earlier = bytes.contains("from an earlier run");
            let n = bytes.split(' ').next()?.parse().ok()?;
            Some((reason.to_string(), PathBuf::from(file), n, earlier))
        })
        .collect()
}

#[test]
fn a_disk_budget_keeps_the_newest_files_within_it_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let t = synth(dir.path(), "20000", "1000");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // Files the pattern could not have produced, which must stay as they are.
    let bystanders = [("notes.txt", 3_000_000), ("b.pcap.gz", 2_000_000), ("b.x.pcap", 1_000_000), ("b.1.pcapng", 500)];
    for (name, len) in bystanders {
        std::fs::write(out.join(name), vec![7u8; len]).unwrap();
    }
    let pattern = out.join("b.pcap");
    let budget = 1_000_000u64;
    let mut seen_files = 0;
    for round in 0..2 {
        let r = run(&["record", "-q", t.to_str().unwrap(), "-w", pattern.to_str().unwrap(), "-C", "0.3", "--budget", "1"]);
        let err = text(&r.stderr);
        assert!(r.status.success(), "{err}");
        let kept = budget_files(&out);
        let total: u64 = kept.iter().map(|f| f.1).sum();
        assert!(total <= budget, "round {round}: {total} bytes kept > {budget}: {kept:?}");
        assert!(kept.iter().all(|f| f.1 <= 300_000), "-C 0.3 holds: {kept:?}");

        // Every deletion said, and the summary's totals are theirs.
        let gone = deletions(&err);
        assert!(gone.len() > 10, "round {round}: {err}");
        for (reason, file, _, _) in &gone {
            assert_eq!(reason, "budget");
            assert!(!file.exists(), "{} said deleted", file.display());
        }
        let sum: u64 = gone.iter().map(|d| d.2).sum();
        assert!(err.contains(&format!("deleted {} files ({sum} bytes)", gone.len())), "{err}");

        // The newest are kept, whole: read in order, they end the trace.
        let all = libpcap_packets(&t);
        let tail: Vec<_> = kept.iter().flat_map(|f| libpcap_packets(&f.0)).collect();
        assert!(tail.len() > 100);
        assert!(all.ends_with(&tail), "round {round}: the kept files hold the last {} packets of the trace", tail.len());

        if round == 0 {
            seen_files = gone.len() + kept.len();
            assert!(gone.iter().all(|d| !d.3));
        } else {
            // The first run's files were counted and went first; numbering went on after them.
            assert!(err.contains("left by earlier runs"), "{err}");
            let earlier: Vec<_> = gone.iter().take_while(|d| d.3).collect();
            assert!(!earlier.is_empty(), "{err}");
            let first_new = kept[0].0.file_name().unwrap().to_string_lossy().into_owned();
            let n: usize = first_new.split('.').nth(1).unwrap().parse().unwrap();
            assert!(n >= seen_files, "numbering goes on: {first_new} after {seen_files} files");
        }
        for (name, len) in bystanders {
            assert_eq!(std::fs::read(out.join(name)).unwrap(), vec![7u8; len], "{name} untouched");
        }
    }
}

#[test]
fn files_older_than_max_age_in_packet_time_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    // About two minutes of packet time.
    let t = synth(dir.path(), "20000", "1");
    let all = libpcap_packets(&t);
    let last = all.iter().map(|p| p.0).max().unwrap();
    assert!(last - all[0].0 > 90_000_000_000, "the trace spans over 90 s");
    let pattern = dir.path().join("b.pcap");
    let r = run(&["record", "-q", t.to_str().unwrap(), "-w", pattern.to_str().unwrap(), "--file-packets", "500", "--max-age", "30s"]);
    let err = text(&r.stderr);
    assert!(r.status.success(), "{err}");
    let gone = deletions(&err);
    assert!(!gone.is_empty() && gone.iter().all(|d| d.0 == "max-age"), "{err}");
    let kept = budget_files(dir.path());
    for (i, (f, _)) in kept.iter().enumerate() {
        let packets = libpcap_packets(f);
        let newest = packets.iter().map(|p| p.0).max().unwrap();
        // A closed file kept holds a packet within 30 s of the newest written
        // (when it was last looked at); the open file holds the newest.
        assert!(newest + 30_000_000_000 >= last || i + 1 == kept.len(), "{} is older than 30 s", f.display());
    }
    assert_eq!(gone.len() + kept.len(), 40, "20,000 packets, 500 a file");
}

#[test]
fn budget_and_age_options_that_cannot_work_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), 100);
    let t = t.to_str().unwrap();
    let out = dir.path().join("x.pcap");
    let out = out.to_str().unwrap();
    for (args, says) in [
        (&["-w", out, "--budget", "1"][..], "needs -C"),
        (&["-w", out, "--budget", "1", "-C", "0.6"], "at least two files"),
        (&["-w", out, "--budget", "1", "-C", "0.05"], "snapshot length (65535 bytes)"),
        (&["-w", out, "--max-age", "7d"], "needs rotation"),
        (&["-w", out, "-G", "60", "--max-age", "7w"], "unit must be s, m, h or d"),
        (&["-w", out, "-G", "60", "--max-age", "0s"], "from 1 second"),
        (&["-w", "-", "--budget", "1", "-C", "0.3"], "cannot be rotated"),
    ] {
        let r = run(&[&["record", "-q", t][..], args].concat());
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", text(&r.stderr));
        assert!(text(&r.stderr).contains(says), "{args:?}: {}", text(&r.stderr));
    }
    assert!(!Path::new(out).exists(), "nothing was recorded");
    let help = text(&run(&["record", "--help"]).stdout);
    for s in ["--budget", "--max-age", "never exceeded", "earlier runs", "budget: deleted FILE"] {
        assert!(help.contains(s), "record --help mentions {s:?}");
    }
}
