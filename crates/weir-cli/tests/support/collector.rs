//! An nfcapd collector for the tests that export flows (`flows.rs`,
//! `kernel_cutoff_live.rs`): started on a free port of 127.0.0.1, stopped
//! once it has read every datagram sent (none dropped by its socket), its
//! files read back with nfdump. nfcapd and nfdump come from scripts/setup.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `name` from PATH (or /sbin), with dates in UTC; a test that finds it
/// missing fails and says which package brings it.
pub fn tool(name: &str) -> Command {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).chain([PathBuf::from("/usr/sbin")]).any(|d| d.join(name).is_file()));
    assert!(found, "this test needs {name} (Debian's nfdump and softflowd packages; scripts/setup installs them)");
    let mut c = Command::new(name);
    c.env("TZ", "UTC").stdin(Stdio::null());
    c
}

/// An nfcapd on 127.0.0.1, writing to its own directory.
pub struct Collector {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Collector {
    pub fn start() -> Collector {
        let dir = tempfile::tempdir().unwrap();
        // A port the system had free a moment ago.
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // A receive buffer of 4 MB (the system's rmem_max here), not the
        // default 208 KB: several exporters (per-queue, a fleet) send their
        // last records in one burst at the end of a trace, and on a busy
        // machine nfcapd drains its socket slower than they fill it.
        let child = tool("nfcapd")
            .args(["-l", dir.path().to_str().unwrap(), "-b", "127.0.0.1", "-p", &port.to_string(), "-B", "4194304"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nfcapd starts");
        // Ready once its socket is bound (a datagram sent before is lost).
        let t = Instant::now();
        while socket(port).is_none() {
            assert!(t.elapsed() < Duration::from_secs(10), "nfcapd did not bind 127.0.0.1:{port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Collector { child, dir, port }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops nfcapd (it writes its file on SIGTERM) and returns the flows
    /// it stored as nfdump prints them in `format` (`-o`), one line each,
    /// and its closing report (flows and sequence errors).
    pub fn finish_as(self, format: &str) -> (Vec<String>, String) {
        let (dir, report) = self.stop();
        (stored_lines(dir.path(), format), report)
    }

    /// Stops nfcapd once it has stored every datagram sent: its directory
    /// and its closing report.
    pub fn stop(self) -> (tempfile::TempDir, String) {
        // Loopback datagrams are queued at once: wait until nfcapd has read
        // them all (none lost to a full socket buffer), and a moment more
        // for it to store the last.
        let t = Instant::now();
        loop {
            let (queued, drops) = socket(self.port).expect("nfcapd's socket is open");
            assert_eq!(drops, 0, "nfcapd's socket dropped datagrams");
            if queued == 0 {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "nfcapd does not read its socket ({queued} bytes queued)");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
        let out = self.child.wait_with_output().unwrap();
        (self.dir, text(&out.stderr))
    }
}

/// The files an nfcapd (or nfpcapd) wrote.
pub fn nfcapd_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect()
}

/// The flows of every nfcapd file in `dir`, as nfdump prints them in
/// `format` (`-o`), one line each.
pub fn stored_lines(dir: &Path, format: &str) -> Vec<String> {
    let mut rows = Vec::new();
    for path in nfcapd_files(dir) {
        let o = tool("nfdump").args(["-q", "-6", "-r", path.to_str().unwrap(), "-o", format]).output().unwrap();
        assert!(o.status.success(), "nfdump -r {}: {}", path.display(), text(&o.stderr));
        // An empty file prints "No matching flows".
        rows.extend(text(&o.stdout).lines().filter(|l| l.contains('|')).map(str::to_string));
    }
    rows
}

/// The UDP socket bound to 127.0.0.1:`port`, if there is one: the bytes
/// waiting in its receive queue and the datagrams it dropped (/proc/net/udp).
pub fn socket(port: u16) -> Option<(u64, u64)> {
    let local = format!("0100007F:{port:04X}");
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let line = table.lines().find(|l| l.split_whitespace().nth(1) == Some(&local))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let rx = f[4].split(':').nth(1).expect("tx_queue:rx_queue");
    Some((u64::from_str_radix(rx, 16).unwrap(), f[f.len() - 1].parse().unwrap()))
}
