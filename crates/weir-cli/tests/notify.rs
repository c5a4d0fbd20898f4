//! systemd's readiness protocol as a `Type=notify` unit meets it, with the
//! test in systemd's place: it binds the datagram socket `$NOTIFY_SOCKET`
//! names (a path in a temporary directory, or an abstract name), runs weir
//! with the variable set, and reads what arrives: `READY=1` while the capture
//! runs and its output is open, `STOPPING=1` when SIGTERM asks it to stop.
//! A socket no one listens on must not fail the run.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A trace of `packets` packets from `weir synth`.
fn trace(dir: &Path, packets: &str) -> PathBuf {
    let t = dir.join("t.pcap");
    let o = weir().args(["synth", "-o", t.to_str().unwrap(), "-n", packets, "-c", "50", "--seed", "3"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    t
}

/// The next datagram on `rx`, or None after `wait`.
fn next(rx: &UnixDatagram, wait: Duration) -> Option<String> {
    rx.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 4096];
    match rx.recv(&mut buf) {
        Ok(n) => Some(text(&buf[..n])),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => None,
        Err(e) => panic!("recv: {e}"),
    }
}

/// Wait for `child` to exit, at most a minute.
fn wait(mut child: Child) -> Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("weir did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn record_says_ready_while_it_runs_with_its_file_open_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    // 20,000 packets at 1,000 a second: twenty seconds, stopped long before.
    let t = trace(dir.path(), "20000");
    let sock = dir.path().join("notify.sock");
    let rx = UnixDatagram::bind(&sock).unwrap();
    let out = dir.path().join("out.pcap");
    let child = weir()
        .args(["record", "-q", "--pps", "1000", t.to_str().unwrap(), "-w", out.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &sock)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = child;
    let ready = next(&rx, Duration::from_secs(30)).expect("READY=1 within 30 s");
    assert!(child.try_wait().unwrap().is_none(), "READY=1 came while weir runs, not as it exits");
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    assert!(ready.contains("STATUS=weir record: capturing from file:"), "{ready:?}");
    assert!(std::fs::metadata(&out).unwrap().len() >= 24, "the output is open, its header written, before READY=1");

    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let stopping = next(&rx, Duration::from_secs(30)).expect("STOPPING=1 after SIGTERM");
    assert_eq!(stopping, "STOPPING=1\n");
    let o = wait(child);
    assert!(o.status.success(), "SIGTERM ends the run cleanly: {}", text(&o.stderr));
    assert_eq!(next(&rx, Duration::from_millis(200)), None, "STOPPING=1 once, nothing after");
}

#[test]
fn every_capture_command_notifies_an_abstract_socket_and_says_stopping_at_the_end_of_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), "2000");
    let t = t.to_str().unwrap();
    let name = format!("weir-notify-test-{}", std::process::id());
    let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    let (ipfix, streams) = (dir.path().join("f.ipfix"), dir.path().join("streams"));
    for args in [
        vec!["count", "-q", t],
        vec!["flows", "-q", t, "-w", ipfix.to_str().unwrap()],
        vec!["streams", "-q", t, "-o", streams.to_str().unwrap()],
        vec!["inspect", "-q", t, "--group-rules", "4", "-o", "/dev/null"],
    ] {
        let o = weir().args(&args).env("NOTIFY_SOCKET", format!("@{name}")).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        let ready = next(&rx, Duration::from_secs(5)).unwrap_or_else(|| panic!("{args:?}: no READY=1"));
        assert!(ready.starts_with(&format!("READY=1\nSTATUS=weir {}: capturing from ", args[0])), "{ready:?}");
        assert_eq!(next(&rx, Duration::from_secs(5)).as_deref(), Some("STOPPING=1\n"), "{args:?}");
        assert!(!text(&o.stderr).contains("notify"), "{args:?}: nothing said: {}", text(&o.stderr));
    }
}

#[test]
fn a_socket_that_cannot_be_reached_is_said_once_and_fails_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), "2000");
    for socket in [dir.path().join("nobody-listens.sock").display().to_string(), "relative.sock".to_string()] {
        let out = dir.path().join("r.pcap");
        let o =
            weir().args(["record", "-q", t.to_str().unwrap(), "-w", out.to_str().unwrap()]).env("NOTIFY_SOCKET", &socket).output().unwrap();
        let err = text(&o.stderr);
        assert!(o.status.success(), "{socket}: {err}");
        assert_eq!(err.matches("cannot notify systemd").count(), 1, "said once: {err}");
        assert!(err.contains(&format!("NOTIFY_SOCKET={socket}")), "{err}");
    }
    // Unset or empty: nothing sent, nothing said.
    for env in [None, Some("")] {
        let mut c = weir();
        c.args(["count", "-q", t.to_str().unwrap()]);
        match env {
            None => c.env_remove("NOTIFY_SOCKET"),
            Some(v) => c.env("NOTIFY_SOCKET", v),
        };
        let o = c.output().unwrap();
        assert!(o.status.success() && !text(&o.stderr).contains("notify"), "{}", text(&o.stderr));
    }
}
