//! The server against 5,000 idle connections: its threads stay under the cap,
//! a scrape still gets through while they are open, and those left open are
//! closed once the idle timeout has passed (and not long before). Alone in its test binary, so the
//! threads counted are the server's and this test's.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_metrics::{listen, Families, Scrape};

/// No metrics of its own: the body is the build and process metrics.
struct Nothing;

impl Scrape for Nothing {
    fn collect(&self, _: &mut Families) {}
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Room for `n` more descriptors, raising the soft limit if need be.
fn room_for(n: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < n {
        assert!(hard >= n, "this test needs {n} descriptors; the hard limit is {hard}");
        setrlimit(Resource::RLIMIT_NOFILE, n, hard).unwrap();
    }
}

fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw
}

/// True once the server has closed `s` (end of file, or a reset).
fn closed(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => panic!("an idle connection was sent data"),
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

#[test]
fn five_thousand_idle_connections_take_no_more_threads_than_the_cap() {
    const IDLE: usize = 5_000;
    room_for(IDLE as u64 + 1_000);
    let l = listen("127.0.0.1:0").unwrap();
    let addr = l.local_addr().to_string();
    l.serve(Arc::new(Nothing)).unwrap();
    let before = threads();
    let opened = Instant::now();
    let mut idle: Vec<TcpStream> = (0..IDLE).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    // Let the server take every connection it is going to.
    std::thread::sleep(Duration::from_millis(500));
    let during = threads();
    assert!(
        during <= before + weir_metrics::MAX_CONNECTIONS,
        "{during} threads with {IDLE} idle connections open, {before} before (cap {})",
        weir_metrics::MAX_CONNECTIONS
    );
    let body = scrape(&addr);
    assert!(body.starts_with("HTTP/1.1 200 OK\r\n") && body.contains("weir_build_info"), "{body}");

    // All but the newest are closed at once (the cap); the newest when their time is up.
    let open_now = idle.iter_mut().map(closed).filter(|c| !c).count();
    assert!(open_now <= weir_metrics::MAX_CONNECTIONS, "{open_now} idle connections still open");
    assert!(opened.elapsed() < weir_metrics::IDLE_TIMEOUT, "the test is too slow to see the timeout apart");
    let late = TcpStream::connect(&addr).unwrap();
    let mut late = [late];
    std::thread::sleep(weir_metrics::IDLE_TIMEOUT / 2);
    assert!(!closed(&mut late[0]), "an idle connection was closed long before its timeout");
    let until = Instant::now() + weir_metrics::IDLE_TIMEOUT;
    while idle.iter_mut().chain(late.iter_mut()).any(|s| !closed(s)) {
        assert!(Instant::now() < until, "idle connections still open past the timeout");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The workers are kept for the next connections, no more of them.
    assert!(threads() <= before + weir_metrics::MAX_CONNECTIONS, "{} threads, {before} before", threads());
    let body = scrape(&addr);
    assert!(body.starts_with("HTTP/1.1 200 OK\r\n"), "{body}");
}
