//! Traces that arrive through a pipe or a FIFO, as from `tcpdump -w - | weir
//! count -` or a collector: what has arrived is delivered at once, `-d` ends
//! the run while the writer is still there, and bytes read but not reached when
//! the run stops are reported (a pipe cannot be read again). `-d` and Ctrl-C
//! also end the wait for a header that a silent writer never sends, and for a
//! FIFO's first writer, which a blocking open(2) would wait for deaf to both.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

/// A trace of `n` packets as bytes, and where each record ends.
fn trace(dir: &Path, n: u32) -> (Vec<u8>, Vec<usize>) {
    let path = dir.join("t.pcap");
    let out = weir().args(["synth", "-o"]).arg(&path).args(["--packets", &n.to_string(), "--flows", "20"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&path).unwrap();
    let mut ends = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let caplen = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + caplen;
        ends.push(at);
    }
    assert_eq!(ends.len(), n as usize);
    (bytes, ends)
}

/// Wait for the child, at most `limit`; None if it was still running.
fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn json(child: Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// A small trace and a writer that stays: `-d 2` ends the run at 2 s with
/// every packet counted (it waited for a full read block, or the writer's end).
#[test]
fn a_duration_ends_a_pipe_whose_writer_stays_and_what_arrived_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = trace(dir.path(), 300);
    let started = Instant::now();
    let mut child = weir().args(["count", "--json", "-d", "2", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bytes).unwrap();
    let status = wait_for(&mut child, Duration::from_secs(8));
    drop(stdin);
    assert!(status.is_some_and(|s| s.success()), "weir count -d 2 was still reading {:?} later", started.elapsed());
    let v = json(child);
    assert_eq!(v["packets"], ends.len(), "{v}");
    assert_eq!(v["unreached_bytes"], 0, "{v}");
}

/// A burst, then a trickle, from a FIFO: every packet written before the stop
/// is delivered, none kept back waiting for more.
#[test]
fn a_burst_then_a_trickle_through_a_fifo_is_all_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = trace(dir.path(), 5_040);
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let child = weir().args(["count", "--json", "-d", "4"]).arg(&fifo).stdout(Stdio::piped()).spawn().unwrap();
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let burst = ends[4_999];
    w.write_all(&bytes[..burst]).unwrap();
    let mut at = burst;
    for &end in &ends[5_000..] {
        std::thread::sleep(Duration::from_millis(50));
        w.write_all(&bytes[at..end]).unwrap();
        at = end;
    }
    let v = json(child);
    drop(w);
    assert_eq!(v["packets"], ends.len(), "{v}");
    assert_eq!(v["stop"], "time limit reached", "{v}");
}

/// Half a record is on its way when the run stops: its bytes are reported.
#[test]
fn bytes_read_but_not_reached_at_the_stop_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = trace(dir.path(), 100);
    let cut = ends[49] + (ends[50] - ends[49]) / 2;
    let mut child = weir().args(["count", "--json", "-d", "1", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bytes[..cut]).unwrap();
    let status = wait_for(&mut child, Duration::from_secs(8));
    drop(stdin);
    assert!(status.is_some(), "weir did not stop");
    let v = json(child);
    assert_eq!(v["packets"], 50, "{v}");
    assert_eq!(v["unreached_bytes"], (cut - ends[49]) as u64, "{v}");
}

/// `--trace-access map` on a pipe: it cannot be mapped, so it is read, every
/// packet counted, and the user is told why.
#[test]
fn a_pipe_asked_to_be_mapped_is_read_and_the_user_told() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = trace(dir.path(), 500);
    let mut child = weir()
        .args(["count", "--json", "--trace-access", "map", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bytes).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["packets"].as_u64(), Some(ends.len() as u64));
    assert!(err.contains("mapping the trace was asked for, but it is not a regular file"), "{err}");
}

/// Runs `weir count --json` on `args` until it ends (at most 8 s), and
/// returns the JSON, stderr, and how long it took.
fn finished(mut child: Child, started: Instant) -> (serde_json::Value, String, Duration) {
    let status = wait_for(&mut child, Duration::from_secs(8));
    let took = started.elapsed();
    if status.is_none() {
        child.kill().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(status.is_some(), "weir count was still waiting for the header {took:?} later: {err}");
    assert!(out.status.success(), "{:?}: {err}", out.status);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    (v, err, took)
}

/// A writer that sends 10 bytes of the header and then nothing: `-d 1` ends
/// the wait for the rest at 1 s, says why, counts no packet, and reports the
/// 10 bytes read as lost with the pipe.
#[test]
fn a_duration_ends_the_wait_for_a_header_that_never_comes() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = trace(dir.path(), 100);
    let started = Instant::now();
    let mut child = weir()
        .args(["count", "--json", "-d", "1", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bytes[..10]).unwrap();
    let (v, err, took) = finished(child, started);
    drop(stdin);
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert_eq!(v["packets"], 0, "{v}");
    assert_eq!(v["received"], 0, "{v}");
    assert_eq!(v["stop"], "time limit reached", "{v}");
    assert_eq!(v["unreached_bytes"], 10, "{v}");
    assert!(err.contains("stdin: time limit reached before the trace's header arrived: nothing was read"), "{err}");
}

/// A FIFO whose writer opened it and stays silent: SIGINT ends the wait for
/// the header, and the run ends as a stopped one, with no packet.
#[test]
fn ctrl_c_ends_the_wait_for_a_fifo_header() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let started = Instant::now();
    let child = weir().args(["count", "--json"]).arg(&fifo).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // Opening for writing waits for weir to open it for reading.
    let w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let (v, err, took) = finished(child, started);
    drop(w);
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert_eq!(v["packets"], 0, "{v}");
    assert_eq!(v["stop"], "stopped on request", "{v}");
    assert!(err.contains("stopped on request before the trace's header arrived"), "{err}");
}

/// Wait (at most 5 s) until process `pid` holds `path` open.
fn wait_until_open(pid: u32, path: &Path) {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|fds| fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|to| to == path)))
            .unwrap_or(false);
        if open {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A FIFO no writer has opened: open(2) for reading would wait for one, deaf
/// to `-d`. `-d 1` ends the wait at 1 s, says why, and counts no packet.
#[test]
fn a_duration_ends_the_wait_for_a_fifo_no_writer_opened() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let started = Instant::now();
    let child = weir().args(["count", "--json", "-d", "1"]).arg(&fifo).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (v, err, took) = finished(child, started);
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(6), "{took:?}");
    assert_eq!(v["packets"], 0, "{v}");
    assert_eq!(v["stop"], "time limit reached", "{v}");
    let said = format!("{}: time limit reached before the trace's header arrived: no writer opened the FIFO", fifo.display());
    assert!(err.contains(&said), "{err}");
}

/// The same FIFO, no writer: SIGINT ends the wait for one, and the run ends
/// as a stopped one, with no packet.
#[test]
fn ctrl_c_ends_the_wait_for_a_fifo_no_writer_opened() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let started = Instant::now();
    let child = weir().args(["count", "--json"]).arg(&fifo).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // weir waits with the FIFO open (a blocking open would not have returned).
    wait_until_open(child.id(), &fifo);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let (v, err, took) = finished(child, started);
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert_eq!(v["packets"], 0, "{v}");
    assert_eq!(v["stop"], "stopped on request", "{v}");
    assert!(err.contains("stopped on request before the trace's header arrived: no writer opened the FIFO"), "{err}");
}
