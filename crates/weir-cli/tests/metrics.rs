//! `--metrics ADDR:PORT` and `WEIR_METRICS`: Prometheus metrics of a running
//! capture, scraped over real HTTP. The format is checked by promtool (the
//! Prometheus package's own checker); the counters a scrape serves once the
//! input is in are the ones weir reports at exit; scraping as fast as a
//! client can does not stall a paced capture; bad values are refused before
//! capture starts; the examples name only metrics weir serves. As root, on the
//! veth test bed, a real Prometheus server scrapes `weir count` and `weir run
//! -- tcpdump`, and its query API returns the counters weir printed at exit.

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A trace of `packets` packets of many flows, made by `weir synth`.
fn synth(dir: &Path, packets: u32) -> PathBuf {
    let path = dir.join("t.pcap");
    let flows = (packets / 10).clamp(10, 2000).to_string();
    let out = weir()
        .args(["synth", "-o", path.to_str().unwrap(), "--packets", &packets.to_string(), "--flows", &flows, "--seed", "7"])
        .output()
        .unwrap();
    assert!(out.status.success(), "synth: {}", text(&out.stderr));
    path
}

/// One HTTP/1.0 request: the status code and the body.
fn http(addr: &str, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_string())
}

fn scrape(addr: &str) -> String {
    let (status, body) = http(addr, "GET", "/metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// The samples of a text-format body: (name, labels) -> value. Comments skipped.
type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

fn samples(body: &str) -> Samples {
    let mut out = Samples::new();
    for line in body.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels: {line}"))),
            None => (series, ""),
        };
        let labels = labels
            .split("\",")
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once("=\"").unwrap_or_else(|| panic!("bad label {p:?} in {line}"));
                (k.to_string(), v.trim_end_matches('"').to_string())
            })
            .collect();
        let value: f64 = if value == "+Inf" { f64::INFINITY } else { value.parse().unwrap_or_else(|_| panic!("bad value: {line}")) };
        out.insert((name.to_string(), labels), value);
    }
    out
}

/// The value of `name` with every label of `want` (and any others).
fn value(s: &Samples, name: &str, want: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = s
        .iter()
        .filter(|((n, l), _)| n == name && want.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(found.len(), 1, "{name} {want:?}: {} samples", found.len());
    found[0]
}

/// `promtool check metrics` on `body`: the Prometheus package's own checker.
fn promtool_check(body: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool, from Debian's prometheus package (scripts/setup installs it)");
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "promtool check metrics: {}{}\n{body}", text(&out.stdout), text(&out.stderr));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "promtool has remarks: {}{}", text(&out.stdout), text(&out.stderr));
}

/// A weir command serving metrics: the address it said, the lines it wrote to
/// standard error (kept by a thread that drains them).
struct Served {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<Vec<String>>>,
    drain: std::thread::JoinHandle<()>,
}

impl Served {
    /// Start `cmd` (stderr piped) and wait until it says where its metrics are.
    fn start(cmd: Command) -> Served {
        Served::start_fed(cmd, None).0
    }

    /// [`start`](Self::start), with `trace` fed to its standard input (see
    /// [`feed`]): weir reads the trace's header before it serves.
    fn start_fed(mut cmd: Command, trace: Option<&Path>) -> (Served, Option<std::thread::JoinHandle<ChildStdin>>) {
        if trace.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.stderr(Stdio::piped()).spawn().expect("weir starts");
        let fed = trace.map(|t| feed(child.stdin.take().unwrap(), t));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut said = Vec::new();
        let addr = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(url) = l.strip_prefix("weir: metrics at http://") {
                        break url.trim_end_matches("/metrics").to_string();
                    }
                    said.push(l);
                }
                _ => panic!("weir never said where its metrics are: {}", said.join("\n")),
            }
        };
        let stderr = Arc::new(Mutex::new(said));
        let keep = Arc::clone(&stderr);
        let drain = std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| keep.lock().unwrap().push(l)));
        (Served { child, addr, stderr, drain }, fed)
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Wait for the end: its output, and everything it wrote to standard error.
    fn wait(self) -> (Output, String) {
        let out = self.child.wait_with_output().unwrap();
        self.drain.join().unwrap();
        let err = self.stderr.lock().unwrap().join("\n");
        (out, err)
    }
}

/// Feed `trace` to `stdin` on a thread; the pipe stays open until the
/// returned handle is dropped, so the run goes on until the test says.
fn feed(mut stdin: ChildStdin, trace: &Path) -> std::thread::JoinHandle<ChildStdin> {
    let data = std::fs::read(trace).unwrap();
    std::thread::spawn(move || {
        stdin.write_all(&data).unwrap();
        stdin
    })
}

/// Scrape until `done` holds of a scrape (at most 30 s); returns that body.
fn scrape_until(s: &Served, what: &str, done: impl Fn(&Samples) -> bool) -> String {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let body = scrape(&s.addr);
        if done(&samples(&body)) {
            return body;
        }
        assert!(Instant::now() < until, "never {what}; last scrape:\n{body}\nweir said:\n{}", s.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn total(s: &Samples, name: &str) -> f64 {
    s.iter().filter(|((n, _), _)| n == name).map(|(_, v)| v).sum()
}

/// The counters of `weir count --json`'s report, by queue, as metrics name them.
const REPORTED: [(&str, &str, Option<&str>); 11] = [
    ("received", "weir_packets_received_total", None),
    ("delivered", "weir_packets_delivered_total", None),
    ("filtered", "weir_packets_filtered_total", None),
    ("capture_drops", "weir_packets_dropped_total", Some("capture")),
    ("delivery_drops", "weir_packets_dropped_total", Some("delivery")),
    ("unread", "weir_packets_unread_total", None),
    ("in_flight", "weir_packets_in_flight", None),
    ("received_bytes", "weir_received_bytes_total", None),
    ("delivered_bytes", "weir_delivered_bytes_total", None),
    ("bad_recycles", "weir_bad_recycles_total", None),
    ("offloaded", "weir_packets_offloaded_total", None),
];

/// The whole input in and through (every packet received ended somewhere but in flight).
fn all_in(s: &Samples, packets: f64) -> bool {
    total(s, "weir_packets_received_total") == packets && total(s, "weir_packets_in_flight") == 0.0
}

#[test]
fn a_scrape_is_well_formed_and_its_counters_are_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let t = synth(dir.path(), 30_000);
    let mut cmd = weir();
    cmd.args(["count", "--json", "-f", "tcp", "--locality", "300", "--metrics", "127.0.0.1:0", "file:-@0-1"]).stdout(Stdio::piped());
    let (s, fed) = Served::start_fed(cmd, Some(&t));
    let fed = fed.unwrap();
    let body = scrape_until(&s, "saw the whole trace", |m| all_in(m, 30_000.0));
    promtool_check(&body);
    let m = samples(&body);
    // Close the input: the run ends and reports.
    drop(fed.join().unwrap());
    let (out, err) = s.wait();
    assert!(out.status.success(), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let queues = report["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 2);
    for q in queues {
        let queue = q["queue"].to_string();
        for (field, name, category) in REPORTED {
            let mut want = vec![("queue", queue.as_str()), ("source", "file:-@0-1")];
            want.extend(category.map(|c| ("category", c)));
            assert_eq!(value(&m, name, &want), q[field].as_f64().unwrap(), "queue {queue} {field}");
        }
        let delivered = q["delivered"].as_f64().unwrap();
        assert!(delivered > 0.0 && q["filtered"].as_f64().unwrap() > 0.0, "a filter that passes some: {q}");
        // Every delivered packet went out in one locality batch, and every batch held
        // at least the 300 asked for but perhaps the last.
        let on = [("queue", queue.as_str())];
        assert_eq!(value(&m, "weir_locality_batch_packets_sum", &on), delivered, "queue {queue}");
        let batches = value(&m, "weir_locality_batch_packets_count", &on);
        let small = value(&m, "weir_locality_batch_packets_bucket", &[("queue", queue.as_str()), ("le", "256")]);
        assert!(batches >= 1.0 && small <= 1.0, "queue {queue}: {batches} batches, {small} of 256 packets or fewer");
        assert_eq!(value(&m, "weir_pool_chunks", &on), 128.0);
        assert_eq!(value(&m, "weir_pool_cells_per_chunk", &on), 256.0);
    }
    assert_eq!(value(&m, "weir_build_info", &[]), 1.0);
    assert!(value(&m, "process_cpu_seconds_total", &[]) > 0.0);
    assert!(value(&m, "weir_thread_cpu_seconds_total", &[("thread", "weir-worker-0")]) >= 0.0);
}

#[test]
fn the_stream_layer_is_served_by_streams() {
    let dir = tempfile::tempdir().unwrap();
    let t = synth(dir.path(), 20_000);
    let stats = dir.path().join("stats.json");
    let mut cmd = weir();
    cmd.args(["streams", "-q", "--stats", stats.to_str().unwrap(), "--metrics", "127.0.0.1:0", "file:-@0-1"]).stdout(Stdio::null());
    let (s, fed) = Served::start_fed(cmd, Some(&t));
    let fed = fed.unwrap();
    // The workers publish their counters when a scrape asks, between runs of packets.
    let body = scrape_until(&s, "saw the whole trace in the stream layer", |m| {
        all_in(m, 20_000.0) && total(m, "weir_stream_packets_total") == 20_000.0
    });
    promtool_check(&body);
    let m = samples(&body);
    drop(fed.join().unwrap());
    let (out, err) = s.wait();
    assert!(out.status.success(), "{err}");
    let st: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    // What packets and streams the layers had seen is final once the input is in;
    // streams close (and their bytes are counted) only at the end.
    for (category, field) in [("stream", "to_stream"), ("not_ip", "not_ip"), ("untracked", "untracked"), ("fragment", "fragments")] {
        let served: f64 =
            m.iter().filter(|((n, l), _)| n == "weir_stream_packets_total" && l["category"] == category).map(|(_, v)| v).sum();
        assert_eq!(served, st[field].as_f64().unwrap(), "{category}");
    }
    assert_eq!(total(&m, "weir_streams_created_total"), st["streams"].as_f64().unwrap());
    assert_eq!(total(&m, "weir_stream_connections_total"), st["connections"].as_f64().unwrap());
    assert!(total(&m, "weir_stream_connections_open") > 0.0, "connections still open before the end");
}

#[test]
fn scraping_as_fast_as_possible_does_not_stall_a_paced_capture() {
    let dir = tempfile::tempdir().unwrap();
    let t = synth(dir.path(), 40_000);
    // 2 s at 20,000 packets/s. A paced source drops what finds no free cell:
    // a worker stalled for 1.6 s (the default pool's 32,768 cells) would lose packets.
    let mut cmd = weir();
    cmd.args(["count", "--json", "--pps", "20000", "--metrics", "127.0.0.1:0"]).arg(format!("{}@0-1", t.display())).stdout(Stdio::piped());
    let s = Served::start(cmd);
    let stop = Arc::new(AtomicBool::new(false));
    let hammer = {
        let (addr, stop) = (s.addr.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut c) = TcpStream::connect(&addr) else { break };
                let _ = write!(c, "GET /metrics HTTP/1.0\r\n\r\n");
                let mut raw = String::new();
                let body = match c.read_to_string(&mut raw).map(|_| raw.split_once("\r\n\r\n")) {
                    Ok(Some((head, body))) if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") => body,
                    // weir exited while this request was on its way.
                    _ => break,
                };
                // The process's metrics come last: a body cut short as weir exits has none.
                if !body.contains("process_cpu_seconds_total") {
                    break;
                }
                seen.push(total(&samples(body), "weir_packets_received_total"));
            }
            seen
        })
    };
    let (out, _) = s.wait();
    stop.store(true, Ordering::Relaxed);
    let seen = hammer.join().unwrap();
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["received"], 40_000);
    assert_eq!(report["capture_drops"], 0, "the capture stalled while scraped: {report}");
    let elapsed = report["elapsed_s"].as_f64().unwrap();
    assert!(elapsed < 3.0, "2 s of paced input took {elapsed} s while scraped");
    assert!(seen.len() >= 20, "only {} scrapes in {elapsed} s", seen.len());
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "a counter went back: {seen:?}");
    assert!(seen.iter().any(|&n| n > 0.0 && n < 40_000.0), "no scrape saw the run under way: {seen:?}");
}

#[test]
fn the_server_answers_metrics_only() {
    let dir = tempfile::tempdir().unwrap();
    let t = synth(dir.path(), 2_000);
    let mut cmd = weir();
    cmd.args(["count", "-q", "--pps", "1000", "--metrics", "localhost:0"]).arg(&t).stdout(Stdio::null());
    let mut s = Served::start(cmd);
    assert!(s.addr.starts_with("127.0.0.1:"), "{}", s.addr);
    assert_eq!(http(&s.addr, "GET", "/").0, 200);
    assert_eq!(http(&s.addr, "GET", "/metrics?x=1").0, 200);
    assert_eq!(http(&s.addr, "GET", "/favicon.ico").0, 404);
    assert_eq!(http(&s.addr, "POST", "/metrics").0, 405);
    let (status, body) = http(&s.addr, "HEAD", "/metrics");
    assert!(status == 200 && body.is_empty(), "{status} {body:?}");
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

#[test]
fn bad_metrics_values_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let t = synth(dir.path(), 1_000);
    let t = t.to_str().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap().to_string();
    let check = |out: Output, says: &str| {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--metrics") && err.contains(says), "{err}");
    };
    check(weir().args(["count", "--metrics", "nonsense", t]).output().unwrap(), "\"nonsense\": no port");
    check(weir().args(["count", "--metrics", "127.0.0.1:99999", t]).output().unwrap(), "from 0 to 65535");
    check(weir().args(["streams", "--metrics", "example.org:9101", t]).output().unwrap(), "names are not looked up");
    // Refused before the output is opened: nothing is written.
    let rec = dir.path().join("out.pcap");
    check(weir().args(["record", "--metrics", &busy, t, "-w", rec.to_str().unwrap()]).output().unwrap(), "in use");
    assert!(!rec.exists(), "record wrote before refusing its --metrics");
    // Refused before the interfaces are looked at.
    check(weir().args(["forward", "--metrics", &busy, "no-such-if0", "no-such-if1"]).output().unwrap(), "in use");
    // weir run: before the program starts.
    let lib = testbed::pcap_shim(dir.path());
    let touched = dir.path().join("started");
    let out = weir()
        .args(["run", "--lib", lib.to_str().unwrap(), "--metrics", &busy, "--", "touch", touched.to_str().unwrap()])
        .output()
        .unwrap();
    check(out, "in use");
    assert!(!touched.exists(), "weir run started the program");
    let out =
        weir().args(["run", "--lib", lib.to_str().unwrap(), "--metrics", ":x", "--", "touch", touched.to_str().unwrap()]).output().unwrap();
    check(out, "port \"x\"");
    // Without weir run, the library refuses the open, naming the variable.
    let out = Command::new("tcpdump")
        .args(["-n", "-r", t, "-w", "/dev/null"])
        .env("LD_LIBRARY_PATH", &lib)
        .env("WEIR_METRICS", &busy)
        .output()
        .expect("tcpdump (scripts/setup installs it)");
    assert!(!out.status.success() && text(&out.stderr).contains(&format!("WEIR_METRICS={busy}: ")), "{}", text(&out.stderr));
}

#[test]
fn every_engine_command_documents_the_option_with_an_example() {
    for cmd in ["count", "record", "handle", "inspect", "streams", "flows", "queues", "forward", "run"] {
        let out = weir().args([cmd, "--help"]).output().unwrap();
        let help = text(&out.stdout);
        assert!(help.contains("--metrics <ADDR:PORT>") && help.contains("127.0.0.1:91"), "weir {cmd} --help:\n{help}");
    }
}

#[test]
fn weir_run_serves_the_programs_captures() {
    let dir = tempfile::tempdir().unwrap();
    let t = synth(dir.path(), 10_000);
    let lib = testbed::pcap_shim(dir.path());
    // tcpdump reads the trace from a pipe kept open, so the program (and its
    // server) lives on after the last packet.
    let mut cmd = weir();
    cmd.args(["run", "--lib", lib.to_str().unwrap(), "--metrics", "127.0.0.1:0", "--", "tcpdump", "-n", "-r", "-", "-w", "/dev/null"])
        .stdout(Stdio::null());
    let (s, fed) = Served::start_fed(cmd, Some(&t));
    let fed = fed.unwrap();
    let body = scrape_until(&s, "saw the whole trace", |m| all_in(m, 10_000.0));
    promtool_check(&body);
    let m = samples(&body);
    assert_eq!(value(&m, "weir_packets_delivered_total", &[("queue", "0"), ("source", "file:-"), ("handle", "0")]), 10_000.0);
    drop(fed.join().unwrap());
    let (out, err) = s.wait();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("10000        10000"), "weir run's table: {err}");
}

/// The examples: promtool accepts the scrape configuration, the dashboard is
/// JSON Grafana imports, and every metric either names is one weir serves
/// (found in a real scrape of `weir count`).
#[test]
fn the_examples_name_only_metrics_weir_serves() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let config = examples.join("prometheus.yml");
    let out = Command::new("promtool").args(["check", "config", "--syntax-only"]).arg(&config).output().expect("promtool");
    assert!(out.status.success(), "promtool check config: {}{}", text(&out.stdout), text(&out.stderr));

    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(examples.join("grafana-dashboard.json")).unwrap()).unwrap();
    let mut exprs = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => o.iter().for_each(|(k, v)| match v {
                Value::String(s) if k == "expr" || k == "query" => out.push(s.clone()),
                _ => walk(v, out),
            }),
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&dashboard, &mut exprs);
    assert!(exprs.len() >= 4, "the dashboard's panels have queries: {exprs:?}");
    for title in ["Packet rate", "Drops", "Pool", "CPU"] {
        assert!(dashboard.to_string().contains(title), "no panel titled {title}");
    }
    let config_text = std::fs::read_to_string(&config).unwrap();
    let mut names: Vec<String> = exprs
        .iter()
        .chain(std::iter::once(&config_text))
        .flat_map(|e| e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map(str::to_string).collect::<Vec<_>>())
        .filter(|w| w.starts_with("weir_") || w.starts_with("process_"))
        .collect();
    names.sort();
    names.dedup();
    assert!(!names.is_empty());

    let dir = tempfile::tempdir().unwrap();
    let t = synth(dir.path(), 2_000);
    let mut cmd = weir();
    cmd.args(["count", "--json", "--metrics", "127.0.0.1:0", "file:-@0-1"]).stdout(Stdio::null());
    let (s, fed) = Served::start_fed(cmd, Some(&t));
    let fed = fed.unwrap();
    let served = samples(&scrape_until(&s, "saw the whole trace", |m| all_in(m, 2_000.0)));
    drop(fed.join().unwrap());
    s.wait();
    let catalogue: Vec<&str> = weir_metrics::catalogue::ALL.iter().map(|d| d.name).collect();
    for n in &names {
        assert!(served.keys().any(|(name, _)| name == n), "the examples name {n}, which weir count does not serve");
        let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| n.strip_suffix(s)).unwrap_or(n);
        assert!(catalogue.contains(&family) || catalogue.contains(&n.as_str()), "{n} is not in weir-metrics' catalogue");
    }
}

/// The live part: a real Prometheus server (Debian's package) scrapes, every
/// second, `weir count` capturing on the veth test bed and `weir run --
/// tcpdump` capturing there too, while `weir replay` sends from the other
/// namespace. Once the traffic has stopped and a few scrapes have passed,
/// Prometheus' query API must give, per queue, the counters weir printed
/// as it exited. Everything runs inside the capturing namespace (its own
/// loopback), where Prometheus reaches both.
#[test]
#[ignore = "needs root: a Prometheus server scraping weir on a veth test bed"]
fn prometheus_scrapes_the_counters_weir_reports() {
    let tb = testbed::TestBed::new(2);
    testbed::require_tools(&["prometheus", "curl", "tcpdump"]);
    let dir = tempfile::tempdir().unwrap();
    let lib = testbed::pcap_shim(dir.path());
    let trace = udp_trace(dir.path(), &tb, 3_000);
    let (count_at, run_at, prom_at) = ("127.0.0.1:9101", "127.0.0.1:9102", "127.0.0.1:9090");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: count\n    static_configs:\n      \
             - targets: ['{count_at}']\n  - job_name: run\n    static_configs:\n      - targets: ['{run_at}']\n"
        ),
    )
    .unwrap();
    let data = dir.path().join("tsdb");
    let prometheus = testbed::Reaped(
        tb.in_rx("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={prom_at}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );
    let api = |path: &str| -> Value {
        let out = tb.in_rx("curl").args(["-s", "--max-time", "5", &format!("http://{prom_at}{path}")]).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    };
    let until = Instant::now() + Duration::from_secs(20);
    while tb.in_rx("curl").args(["-sf", &format!("http://{prom_at}/-/ready")]).output().map(|o| !o.status.success()).unwrap_or(true) {
        assert!(Instant::now() < until, "prometheus did not get ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    let send = || {
        let out = weir()
            .args(["replay", trace.to_str().unwrap(), "-o", &tb.tx_if, "--netns", &tb.tx_ns, "--pps", "20000", "-q"])
            .output()
            .unwrap();
        assert!(out.status.success(), "weir replay: {}", text(&out.stderr));
    };
    // Wait until Prometheus scraped the target up, then send; let a few scrapes
    // pass after the traffic; note the time; stop weir with `signal` (weir run
    // passes SIGTERM on to its program).
    let run_and_query = |job: &str, child: Child, signal: &str| -> (BTreeMap<String, f64>, Output) {
        let until = Instant::now() + Duration::from_secs(20);
        while api(&format!("/api/v1/query?query=up%7Bjob%3D%22{job}%22%7D"))["data"]["result"][0]["value"][1] != "1" {
            assert!(Instant::now() < until, "{job}: prometheus never scraped it up");
            std::thread::sleep(Duration::from_millis(200));
        }
        send();
        std::thread::sleep(Duration::from_secs(4));
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
        let out = child.wait_with_output().unwrap();
        let v = api(&format!("/api/v1/query?query=weir_packets_received_total&time={at:.3}"));
        assert_eq!(v["status"], "success", "{v}");
        let by_queue = v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["metric"]["job"] == job)
            .map(|r| (r["metric"]["queue"].as_str().unwrap().to_string(), r["value"][1].as_str().unwrap().parse::<f64>().unwrap()))
            .collect();
        (by_queue, out)
    };

    let count = tb
        .in_rx(env!("CARGO_BIN_EXE_weir"))
        .args(["count", "--json", "-f", "udp", "--metrics", count_at, &format!("afpacket:{}@0-1", tb.rx_if)])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (scraped, out) = run_and_query("count", count, "-INT");
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["received"], 3_000, "{report}");
    let printed: BTreeMap<String, f64> =
        report["queues"].as_array().unwrap().iter().map(|q| (q["queue"].to_string(), q["received"].as_f64().unwrap())).collect();
    assert_eq!(scraped, printed, "prometheus has, weir count printed");

    let mut tcpdump = tb.in_rx(env!("CARGO_BIN_EXE_weir"));
    tcpdump
        .args(["run", "--lib", lib.to_str().unwrap(), "--metrics", run_at, "--"])
        .args(["tcpdump", "-Z", "root", "-n", "-i", &tb.rx_if, "-w", "/dev/null", "udp"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = tcpdump.spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("listening on") {
        assert!(err.read_line(&mut said).unwrap() > 0, "tcpdump under weir run never listened: {said}");
    }
    let keep = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    let (scraped, out) = run_and_query("run", child, "-TERM");
    let table = keep.join().unwrap();
    assert!(out.status.success(), "{said}{table}");
    // weir run's table: "weir:  queue  received  delivered ..." rows.
    let printed: BTreeMap<String, f64> = table
        .lines()
        .filter_map(|l| l.strip_prefix("weir:"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() >= 2 && w[0].parse::<u16>().is_ok())
        .map(|w| (w[0].to_string(), w[1].parse().unwrap()))
        .collect();
    assert_eq!(printed.values().sum::<f64>(), 3_000.0, "{table}");
    assert_eq!(scraped, printed, "prometheus has, weir run printed");
    drop(prometheus);
}

/// `n` UDP frames of many flows between addresses of the test bed's subnet
/// that no host owns (nothing answers them).
fn udp_trace(dir: &Path, tb: &testbed::TestBed, n: u32) -> PathBuf {
    use weir::sink::{FileFormat, TraceWriter, TsPrecision};
    let net: Vec<u8> = tb.tx_ip.split('.').take(3).map(|o| o.parse().unwrap()).collect();
    let path = dir.join("udp.pcap");
    let mut w =
        TraceWriter::new(std::fs::File::create(&path).unwrap(), FileFormat::Pcap, weir::LinkType::ETHERNET, 65535, TsPrecision::Micro)
            .unwrap();
    for i in 0..n {
        let flow = (i % 61) as u8;
        let mut f = vec![0x02, 0, 0, 0, 0, 0x63, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
        let len = 60 + (i as usize * 7) % 500;
        let ip_len = (len - 14) as u16;
        f.extend_from_slice(&[0x45, 0, (ip_len >> 8) as u8, ip_len as u8, 0, 0, 0x40, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[net[0], net[1], net[2], 100 + flow % 40]);
        f.extend_from_slice(&[net[0], net[1], net[2], 200 + flow % 9]);
        f.extend_from_slice(&(2000 + u16::from(flow)).to_be_bytes());
        f.extend_from_slice(&53u16.to_be_bytes());
        f.extend_from_slice(&(ip_len - 20).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.resize(len, (i % 251) as u8);
        w.write_packet(u64::from(i) * 1000, &f, len as u32).unwrap();
    }
    w.finish().unwrap();
    path
}

/// `weir forward --metrics`: its lanes' counters, scraped once the traffic has
/// passed, are the ones it reports at exit (afpacket, back out of the
/// interface the packets came in on).
#[test]
#[ignore = "needs root: weir forward on a veth test bed"]
fn forward_serves_its_lanes() {
    let tb = testbed::TestBed::new(1);
    let dir = tempfile::tempdir().unwrap();
    let trace = udp_trace(dir.path(), &tb, 500);
    let mut cmd = weir();
    cmd.args(["forward", "--backend", "afpacket", "--json", "-f", "udp", "--netns", &tb.rx_ns, "--metrics", "127.0.0.1:0"])
        .args([&tb.rx_if, &tb.rx_if])
        .stdout(Stdio::piped());
    let s = Served::start(cmd);
    let out =
        weir().args(["replay", trace.to_str().unwrap(), "-o", &tb.tx_if, "--netns", &tb.tx_ns, "--pps", "20000", "-q"]).output().unwrap();
    assert!(out.status.success(), "weir replay: {}", text(&out.stderr));
    let body = scrape_until(&s, "saw the traffic forwarded", |m| {
        total(m, "weir_forward_packets_received_total") == 500.0 && total(m, "weir_forward_packets_in_flight") == 0.0
    });
    promtool_check(&body);
    let m = samples(&body);
    Command::new("kill").args(["-INT", &s.child.id().to_string()]).status().unwrap();
    let (out, err) = s.wait();
    assert!(out.status.success(), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lane = &report["lanes"][0];
    let on = [("lane", lane["lane"].as_str().unwrap())];
    for (field, name) in [
        ("received", "weir_forward_packets_received_total"),
        ("forwarded", "weir_forward_packets_forwarded_total"),
        ("filtered", "weir_forward_packets_filtered_total"),
        ("dropped", "weir_forward_packets_dropped_total"),
        ("tx_failed", "weir_forward_packets_tx_failed_total"),
        ("kernel_drops", "weir_forward_kernel_drops_total"),
        ("received_bytes", "weir_forward_received_bytes_total"),
        ("forwarded_bytes", "weir_forward_forwarded_bytes_total"),
    ] {
        assert_eq!(value(&m, name, &on), lane[field].as_f64().unwrap(), "{field}: {report}");
    }
    assert_eq!(lane["forwarded"], 500, "{report}");
}
