//! The C API on a live source: a C program (`tests/c/stream_files.c`, built
//! as the example is) captures on one end of the veth test bed (afpacket,
//! two queues) while real TCP connections run between its namespaces, is
//! stopped by SIGINT (`weir_streams_stop` from its signal handler), and must
//! have written each direction's bytes exactly as they were sent. Root only:
//! ignored by a plain `cargo test`, run by `make test`'s privileged step;
//! without root (or without python3) it fails and says why.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use testbed::{Reaped, TestBed};

mod support;

/// Receives `count` connections one after the other; to each it sends back
/// what it read, reversed, once the client has shut down its side, then
/// closes.
const SERVER: &str = "
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], int(sys.argv[2])))
l.listen(8)
print('ready', flush=True)
for _ in range(int(sys.argv[3])):
    c, _ = l.accept()
    data = b''
    while True:
        d = c.recv(65536)
        if not d:
            break
        data += d
    c.sendall(data[::-1])
    c.close()
";

/// One connection per file named: sends the file, shuts down its side,
/// checks the reply is the file reversed, prints its own port.
const CLIENT: &str = "
import socket, sys
for path in sys.argv[3:]:
    data = open(path, 'rb').read()
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    reply = b''
    while True:
        d = s.recv(65536)
        if not d:
            break
        reply += d
    assert reply == data[::-1], 'the server replied something else'
    print(s.getsockname()[1], flush=True)
    s.close()
";

/// `len` bytes that differ from connection to connection and from offset to offset.
fn payload(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn run_ok(c: &mut Command) -> String {
    let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(o.status.success(), "{c:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
#[ignore = "needs root: the C API capturing live TCP on a veth test bed"]
fn the_c_api_delivers_live_tcp_streams_as_they_were_sent() {
    let tb = TestBed::new(2);
    testbed::require_tools(&["python3"]);
    let dir = tempfile::tempdir().unwrap();
    let bin = support::compile(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/stream_files.c"), dir.path());
    let out = dir.path().join("streams");
    std::fs::create_dir(&out).unwrap();

    let mut capture = Reaped(
        support::command(Path::new("ip"))
            .args(["netns", "exec", &tb.rx_ns])
            .arg(&bin)
            .arg(format!("afpacket:{}@0-1", tb.rx_if))
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("stream_files starts"),
    );
    let (tx, rx) = mpsc::channel();
    let stderr = BufReader::new(capture.0.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // The capture runs once a probe sent from the other side makes a stream.
    let mut running = false;
    for _ in 0..100 {
        run_ok(tb.in_tx("python3").args([
            "-c",
            "import socket, sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'probe', (sys.argv[1], 9))",
            &tb.rx_ip,
        ]));
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.starts_with("created 17 ") => {
                running = true;
                break;
            }
            // An earlier probe's ICMP error, on the other queue, may be
            // reported before the probe itself: the workers run apart.
            Ok(line) if line.starts_with("created ") => {}
            Ok(line) => panic!("stream_files said: {line}"),
            Err(_) => assert!(capture.0.try_wait().unwrap().is_none(), "stream_files ended before capturing"),
        }
    }
    assert!(running, "stream_files never saw the probes");

    let sizes = [7usize, 100_000, 250_000, 1];
    let sent: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| payload(i as u32, n)).collect();
    let files: Vec<String> = sent
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let f = dir.path().join(format!("sent-{i}"));
            std::fs::write(&f, p).unwrap();
            f.to_str().unwrap().to_owned()
        })
        .collect();
    let mut server = Reaped(
        tb.in_rx("python3").args(["-c", SERVER, &tb.rx_ip, "8080", &sizes.len().to_string()]).stdout(Stdio::piped()).spawn().unwrap(),
    );
    let mut ready = String::new();
    BufReader::new(server.0.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    let ports = run_ok(tb.in_tx("python3").args(["-c", CLIENT, &tb.rx_ip, "8080"]).args(&files));
    let ports: Vec<u16> = ports.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(ports.len(), sizes.len());
    assert!(server.0.wait().unwrap().success());

    // Let the last packets reach the workers, then stop the capture.
    std::thread::sleep(Duration::from_millis(500));
    Command::new("kill").args(["-INT", &capture.0.id().to_string()]).status().unwrap();
    let status = capture.0.wait().unwrap();
    let mut totals = String::new();
    BufReader::new(capture.0.stdout.take().unwrap()).read_line(&mut totals).unwrap();
    assert!(status.success(), "stream_files: {totals}, {:?}", rx.try_iter().collect::<Vec<_>>());
    let totals: BTreeMap<&str, u64> = totals
        .split_whitespace()
        .map(|kv| kv.split_once('=').unwrap_or_else(|| panic!("`{kv}`")))
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();

    eprintln!("stream_files: {totals:?}");
    let mut want_bytes = 0u64;
    for ((p, bytes), i) in ports.iter().zip(&sent).zip(0..) {
        let up = std::fs::read(out.join(format!("{p}-8080"))).unwrap_or_else(|e| panic!("connection {i}, client to server: {e}"));
        let down = std::fs::read(out.join(format!("8080-{p}"))).unwrap_or_else(|e| panic!("connection {i}, server to client: {e}"));
        assert!(up == *bytes, "connection {i}: the client's {} bytes came out as {} other bytes", bytes.len(), up.len());
        let reversed: Vec<u8> = bytes.iter().rev().copied().collect();
        assert!(down == reversed, "connection {i}: the server's {} bytes came out as {} other bytes", bytes.len(), down.len());
        want_bytes += 2 * bytes.len() as u64;
    }
    // Every byte delivered is in a file: the TCP streams' above, the probes'
    // and whatever else crossed the link (an ICMP error for a probe).
    let written: u64 = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert!(written > want_bytes, "no probe written");
    assert_eq!(totals["delivered"], written, "{totals:?}");
    // Both streams of each connection closed by FIN, the probes' at the stop.
    assert_eq!((totals["closed_fin"], totals["failures"]), (2 * sizes.len() as u64, 0), "{totals:?}");
}
