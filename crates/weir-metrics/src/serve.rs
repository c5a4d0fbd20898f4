//! The HTTP side: `GET /metrics` answered for as long as the process lives.
//!
//! One thread accepts; workers answer, one connection each at a time, one
//! request and then closed (`Connection: close`; a scraper connects again
//! for its next scrape). What connections may hold is bounded, so idle or
//! slow sockets cannot take the process's threads or memory:
//! - at most [`MAX_CONNECTIONS`] are open at once, with as many workers at
//!   most (made as needed, then kept); a new one beyond that closes the
//!   oldest, so a scrape still gets through a crowd of idle sockets;
//! - a connection whose request has not arrived whole within
//!   [`IDLE_TIMEOUT`] of its opening is closed;
//! - a request head is at most [`MAX_HEAD`] bytes (longer: 431).
//!
//! The endpoint has no authentication: whoever reaches the port reads the
//! source names, paths and version it shows. [`crate::listen`] binds `:PORT`
//! to loopback for that reason.
//!
//! Written here rather than with an HTTP crate: tiny_http, used before,
//! spawns a thread for every connection with no cap and no timeout of its
//! own, and bounding them means owning the accept loop; a scrape needs one
//! request line and one response, which is all this reads and writes.

use crate::catalogue as c;
use crate::{process, Families, Listener, Scrape};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The content type of the text exposition format, version 0.0.4.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Most connections open at once: far more than the scrapers of one process.
pub const MAX_CONNECTIONS: usize = 32;

/// How long a connection has to send its request, from its opening.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest request head read (request line and headers).
const MAX_HEAD: usize = 8192;

/// The whole body of one scrape: `what`'s metrics, then the process's.
pub fn render(what: &dyn Scrape) -> String {
    let mut out = Families::default();
    out.gauge(&c::BUILD_INFO, &[("version", env!("CARGO_PKG_VERSION"))], 1.0);
    what.collect(&mut out);
    process::collect(&mut out);
    out.encode()
}

impl Listener {
    /// Answer `GET /metrics` with `what`'s metrics, on threads of their own
    /// that run until the process exits (see the module documentation for
    /// the bounds on connections).
    pub fn serve(self, what: Arc<dyn Scrape>) -> io::Result<()> {
        let socket = self.socket;
        std::thread::Builder::new().name("weir-metrics".into()).spawn(move || accept(&socket, &what))?;
        Ok(())
    }
}

/// The open connections, oldest first (waiting for a worker or being
/// answered), each with a handle to close it by; and the worker threads.
#[derive(Default)]
struct Open {
    next: u64,
    conns: VecDeque<(u64, TcpStream)>,
    workers: usize,
}

/// A connection for a worker: its number among the open, the stream, and
/// when it was accepted (its deadline runs from then).
type Job = (u64, TcpStream, Instant);

fn accept(socket: &TcpListener, what: &Arc<dyn Scrape>) {
    let open = Arc::new(Mutex::new(Open::default()));
    let (jobs, queue) = mpsc::channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    loop {
        let stream = match socket.accept() {
            Ok((s, _)) => s,
            // Out of descriptors, or a connection reset before it was taken:
            // the listener itself is fine; try again shortly.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let Ok(handle) = stream.try_clone() else { continue };
        let mut o = open.lock().unwrap_or_else(PoisonError::into_inner);
        while o.conns.len() >= MAX_CONNECTIONS {
            if let Some((_, oldest)) = o.conns.pop_front() {
                // Its worker's read or write fails at once, and it takes the next.
                let _ = oldest.shutdown(Shutdown::Both);
            }
        }
        let id = o.next;
        o.next += 1;
        o.conns.push_back((id, handle));
        // A worker per open connection, made when first needed and kept.
        if o.workers < o.conns.len() {
            let (what, open, queue) = (Arc::clone(what), Arc::clone(&open), Arc::clone(&queue));
            if std::thread::Builder::new().name("weir-metrics-conn".into()).spawn(move || work(&queue, &open, &*what)).is_ok() {
                o.workers += 1;
            }
        }
        drop(o);
        // The workers never all end (they wait for the next), so this is received.
        let _ = jobs.send((id, stream, Instant::now()));
    }
}

/// Answer connections one after another, for as long as the process lives.
fn work(queue: &Mutex<mpsc::Receiver<Job>>, open: &Mutex<Open>, what: &dyn Scrape) {
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok((id, stream, accepted)) = job else { return };
        answer(stream, accepted + IDLE_TIMEOUT, what);
        open.lock().unwrap_or_else(PoisonError::into_inner).conns.retain(|(i, _)| *i != id);
    }
}

/// Read one request within the deadline, answer it, close.
fn answer(mut stream: TcpStream, deadline: Instant, what: &dyn Scrape) {
    let Some(head) = read_head(&mut stream, deadline) else { return };
    let response = match head {
        Head::TooLong => reply(431, "text/plain; charset=utf-8", "request head too long\n", true),
        Head::Request(line) => {
            let mut words = line.split(' ');
            let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let path = target.split('?').next().unwrap_or("");
            let get = matches!(method, "GET" | "HEAD");
            let body = method != "HEAD";
            match (get, path) {
                (true, "/metrics") => reply(200, CONTENT_TYPE, &render(what), body),
                (true, "/") => reply(200, "text/plain; charset=utf-8", "weir: metrics at /metrics\n", body),
                (false, "/" | "/metrics") => reply(405, "text/plain; charset=utf-8", "only GET and HEAD\n", true),
                _ => reply(404, "text/plain; charset=utf-8", "not found: weir serves /metrics\n", body),
            }
        }
    };
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    // A scraper that went away, or reads too slowly, gets nothing more.
    if stream.set_write_timeout(Some(left)).is_ok() {
        let _ = stream.write_all(&response);
    }
    let _ = stream.shutdown(Shutdown::Both);
}

enum Head {
    /// The request line.
    Request(String),
    TooLong,
}

/// The request line, once the whole head (to its empty line) has arrived;
/// None if the connection closed, failed or ran out of time first.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> Option<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = find(&buf, b"\r\n\r\n").or_else(|| find(&buf, b"\n\n")) {
            let line = String::from_utf8_lossy(&buf[..end]);
            return Some(Head::Request(line.lines().next().unwrap_or("").trim().to_string()));
        }
        if buf.len() >= MAX_HEAD {
            return Some(Head::TooLong);
        }
        let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
        stream.set_read_timeout(Some(left)).ok()?;
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A whole response; the body left out for HEAD (its length still said).
fn reply(status: u16, content_type: &str, body: &str, with_body: bool) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Request Header Fields Too Large",
    };
    let mut r = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if with_body {
        r.extend_from_slice(body.as_bytes());
    }
    r
}
