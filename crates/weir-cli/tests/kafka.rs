//! weir's records in a real Kafka broker: Kafka 4 in KRaft mode on
//! 127.0.0.1 (scripts/kafka, its jars from Maven Central by scripts/setup),
//! started by each test in a folder of its own, and read back by
//! tests/kafka/consume.py (confluent-kafka), which checks every message on
//! the way: JSON against schema/eve.schema.json, protobuf decoded by the
//! code protoc makes from schema/weir.proto, and the key and community_id
//! against the Community ID reference.
//!
//! The records that reach the broker are compared field by field with the
//! IPFIX files `weir flows -w` writes in the same run (read by ipfixDump):
//! every record, once, as the accounting says.

#[path = "support/collector.rs"]
mod collector;
#[path = "support/ipfix.rs"]
mod ipfix;

use collector::text;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).args(args).output().unwrap()
}

/// A broker of this test's own, killed when dropped.
struct Broker {
    dir: tempfile::TempDir,
    port: u16,
}

/// A port whose next one is free too (the controller's).
fn free_ports() -> u16 {
    loop {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = a.local_addr().unwrap().port();
        if port < 65_000 && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

impl Broker {
    fn start() -> Broker {
        let b = Broker { dir: tempfile::tempdir().unwrap(), port: free_ports() };
        b.up();
        b
    }

    fn script(&self, what: &str) -> Output {
        Command::new(root().join("scripts/kafka"))
            .args([what, "--dir", self.dir.path().to_str().unwrap(), "--port", &self.port.to_string()])
            .output()
            .unwrap()
    }

    /// Starts it (again: a restart keeps what it stored).
    fn up(&self) {
        let o = self.script("start");
        assert!(o.status.success(), "scripts/kafka start: {}{}", text(&o.stdout), text(&o.stderr));
    }

    /// Stops it cleanly.
    fn down(&self) {
        let o = self.script("stop");
        assert!(o.status.success(), "scripts/kafka stop: {}", text(&o.stderr));
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.script("kill");
    }
}

/// Every message of `topic`, as consume.py prints them (it must find no
/// fault in any). Stops at `expect` messages, or after `idle` seconds
/// without one.
/// `schema`: also validate each JSON message against the schema (slower).
fn consume(b: &Broker, topic: &str, format: &str, expect: Option<u64>, idle: u32) -> Vec<Value> {
    consume_with(b, topic, format, expect, idle, true)
}

fn consume_with(b: &Broker, topic: &str, format: &str, expect: Option<u64>, idle: u32, schema: bool) -> Vec<Value> {
    let mut c = Command::new("python3");
    c.arg(root().join("tests/kafka/consume.py")).args(["--brokers", &b.addr(), "--topic", topic, "--format", format]);
    if !schema {
        c.arg("--no-check-schema");
    }
    c.args(["--idle", &idle.to_string()]);
    if let Some(n) = expect {
        c.args(["--expect", &n.to_string()]);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "consume.py {topic}: {}", text(&o.stderr));
    text(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn synth(dir: &Path, args: &[&str]) -> PathBuf {
    let trace = dir.join("t.pcap");
    let mut a = vec!["synth", "-o", trace.to_str().unwrap(), "--seed", "43"];
    a.extend_from_slice(args);
    let o = weir(&a);
    assert!(o.status.success(), "{}", text(&o.stderr));
    trace
}

const REASONS: [&str; 5] = ["idle", "active", "end-of-flow", "end-of-input", "evicted"];

/// A flow record in one comparable form: endpoints (ICMP's type and code
/// as IPFIX's icmpTypeCode in the destination port), protocol, counters,
/// times in ms, TCP flags, end reason, and the ingress interface when the
/// encoding has it.
fn ipfix_line(r: &BTreeMap<String, String>, ingress: bool) -> String {
    let f = |name: &str| r.get(name).unwrap_or_else(|| panic!("no {name} in {r:?}")).as_str();
    let n = |name: &str| f(name).parse::<u64>().unwrap_or_else(|_| panic!("{name} `{}` is not a number", f(name)));
    let (src, dst) = match r.get("sourceIPv4Address") {
        Some(_) => (f("sourceIPv4Address"), f("destinationIPv4Address")),
        None => (f("sourceIPv6Address"), f("destinationIPv6Address")),
    };
    let proto = n("protocolIdentifier");
    let (sport, dport) = match proto {
        1 => (0, n("icmpTypeCodeIPv4")),
        58 => (0, n("icmpTypeCodeIPv6")),
        _ => (n("sourceTransportPort"), n("destinationTransportPort")),
    };
    let ms =
        |name: &str| chrono::NaiveDateTime::parse_from_str(f(name), "%Y-%m-%d %H:%M:%S%.3f").unwrap().and_utc().timestamp_millis() as u64;
    let addr = |a: &str| a.parse::<IpAddr>().unwrap().to_string();
    format!(
        "{} {sport} {} {dport} {proto} {} {} {} {} {} {} {}",
        addr(src),
        addr(dst),
        n("packetDeltaCount"),
        n("octetDeltaCount"),
        ms("flowStartMilliseconds"),
        ms("flowEndMilliseconds"),
        n("tcpControlBits"),
        REASONS[n("flowEndReason") as usize - 1],
        if ingress { n("ingressInterface").to_string() } else { "-".into() }
    )
}

/// A flow record consumed from Kafka, in [`ipfix_line`]'s form: the
/// initiator's direction (a uniflow record has nothing to the client).
fn kafka_line(r: &Value) -> String {
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a number: {v} in {r}"));
    let f = &r["flow"];
    assert_eq!((n(&f["pkts_toclient"]), n(&f["bytes_toclient"])), (0, 0), "a uniflow record: {r}");
    let (sport, dport) = match r.get("icmp_type") {
        Some(t) => (0, n(t) << 8 | n(&r["icmp_code"])),
        None => (r.get("src_port").map_or(0, n), r.get("dest_port").map_or(0, n)),
    };
    format!(
        "{} {sport} {} {dport} {} {} {} {} {} {} {} {}",
        r["src_ip"].as_str().unwrap(),
        r["dest_ip"].as_str().unwrap(),
        n(&r["proto"]),
        n(&f["pkts_toserver"]),
        n(&f["bytes_toserver"]),
        n(&f["start_ns"]) / 1_000_000,
        n(&f["end_ns"]) / 1_000_000,
        n(&f["tcp_flags_ts"]),
        f["reason"].as_str().unwrap(),
        f.get("ingress").map_or("-".to_string(), |i| n(i).to_string())
    )
}

/// The records of the IPFIX files of one run, as lines, sorted.
fn ipfix_lines(files: &[PathBuf], ingress: bool) -> Vec<String> {
    let mut v: Vec<String> =
        files.iter().flat_map(|f| ipfix::ipfix_dump(f)).flat_map(|m| m.records).map(|r| ipfix_line(&r, ingress)).collect();
    v.sort();
    v
}

fn sorted(records: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = records.iter().map(kafka_line).collect();
    v.sort();
    v
}

/// Every key is in one partition of the topic, and some keys hold both
/// directions of a connection (the Community ID is the same either way).
fn one_partition_per_key(records: &[Value]) {
    let mut at: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    let mut directions: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in records {
        let key = r["key"].as_str().unwrap_or_else(|| panic!("no key: {r}"));
        at.entry(key).or_default().insert(r["partition"].as_u64().unwrap());
        directions.entry(key).or_default().insert(r["src_ip"].as_str().unwrap());
    }
    assert!(at.values().all(|p| p.len() == 1), "a key in two partitions");
    let partitions: BTreeSet<u64> = at.values().flatten().copied().collect();
    assert!(partitions.len() > 1, "every record in one partition: {partitions:?}");
    assert!(directions.values().filter(|d| d.len() == 2).count() > 10, "too few keys with both directions");
}

fn stats(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn flow_records_in_kafka_equal_the_ipfix_files_of_the_same_run_in_json_and_protobuf() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), &["-n", "60000", "-c", "2000"]);
    for format in ["json", "protobuf"] {
        let ipfix = dir.path().join(format!("{format}.ipfix"));
        let st = dir.path().join(format!("{format}.stats"));
        let o = weir(&[
            "flows",
            &format!("{}@0-1", trace.display()),
            "-q",
            "-w",
            ipfix.to_str().unwrap(),
            "--stats",
            st.to_str().unwrap(),
            "--kafka",
            &broker.addr(),
            "--topic",
            &format!("{format}-{{type}}"),
            "--kafka-format",
            format,
        ]);
        let stderr = text(&o.stderr);
        assert!(o.status.success(), "{format}: {stderr}");
        let k = &stats(&st)["kafka"];
        let made = k["made"]["flow"].as_u64().unwrap();
        assert!(made > 2000, "{format}: {made} records");
        assert_eq!((k["acked"].as_u64(), k["in_flight"].as_u64()), (Some(made), Some(0)), "{format}: {k}");
        assert!(
            stderr.contains(&format!("{made} records made, {made} acknowledged by the broker, 0 dropped, 0 failed, 0 in flight")),
            "{stderr}"
        );
        let records = consume(&broker, &format!("{format}-flow"), format, Some(made), 15);
        assert_eq!(records.len() as u64, made, "{format}");
        // protobuf carries the ingress interface, JSON (EVE's shape) does not.
        let from_files = ipfix_lines(&[ipfix], format == "protobuf");
        assert_eq!(sorted(&records), from_files, "{format}: the records in Kafka are not those of the IPFIX file");
        one_partition_per_key(&records);
    }
}

/// `../shared/corpus/zeek-traces`; a test asked for without it fails and says where it looked.
fn corpus() -> PathBuf {
    let p = root().join("../shared/corpus/zeek-traces");
    assert!(p.is_dir(), "this test needs the corpus, and ../shared/corpus is not there (looked at {})", p.display());
    p
}

/// The corpus's traces, each exported with `-w` and to a topic of its own
/// in both encodings, then all topics read back at once: every record of
/// every trace equals its IPFIX file's, field by field.
#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn corpus_flow_records_in_kafka_equal_the_ipfix_files_in_json_and_protobuf() {
    let corpus = corpus();
    // IPv4 and IPv6, TCP, UDP, ICMP and ICMPv6, GRE and ERSPAN, fragments,
    // VLAN tags, a trace with no record, and traces of many connections.
    let traces = [
        "wikipedia.pcap",
        "communityid/icmp.pcap",
        "communityid/icmp6.pcap",
        "communityid/sctp.pcap",
        "ipv6-fragmented-dns.pcap",
        "ftp/ipv6-retr-samba.pcap",
        "ipv4/fragmented-2.pcap",
        "http-qinq-0.pcap",
        "erspan.pcap",
        "dns-two-responses.pcap",
        "conn-size.pcap",
        "ssh/ssh.pcap",
        "http/bro.org.pcap",
        "irc-dcc-send.pcapng",
    ];
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    for format in ["json", "protobuf"] {
        let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut total = 0;
        for (i, t) in traces.iter().enumerate() {
            let trace = corpus.join(t);
            assert!(trace.is_file(), "{} is not in the corpus", trace.display());
            let topic = format!("corpus-{format}-{i}");
            let ipfix = dir.path().join(format!("{topic}.ipfix"));
            let st = dir.path().join(format!("{topic}.stats"));
            let o = weir(&[
                "flows",
                trace.to_str().unwrap(),
                "-q",
                "-w",
                ipfix.to_str().unwrap(),
                "--stats",
                st.to_str().unwrap(),
                "--kafka",
                &broker.addr(),
                "--topic",
                &topic,
                "--kafka-format",
                format,
            ]);
            assert!(o.status.success(), "{t} {format}: {}", text(&o.stderr));
            let k = &stats(&st)["kafka"];
            let made = k["made"]["flow"].as_u64().unwrap_or(0);
            assert_eq!((k["acked"].as_u64(), k["in_flight"].as_u64()), (Some(made), Some(0)), "{t} {format}: {k}");
            let lines = ipfix_lines(&[ipfix], format == "protobuf");
            assert_eq!(lines.len() as u64, made, "{t} {format}: the IPFIX file and the accounting differ");
            total += made;
            if made > 0 {
                want.insert(topic, lines);
            }
        }
        assert!(total > 150, "{format}: only {total} records from the corpus");
        let topics: Vec<String> = want.keys().cloned().collect();
        let mut c = Command::new("python3");
        c.arg(root().join("tests/kafka/consume.py")).args(["--brokers", &broker.addr(), "--format", format]);
        for t in &topics {
            c.args(["--topic", t]);
        }
        let o = c.args(["--expect", &total.to_string(), "--idle", "15"]).output().unwrap();
        assert!(o.status.success(), "consume.py: {}", text(&o.stderr));
        let mut got: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for l in text(&o.stdout).lines() {
            let r: Value = serde_json::from_str(l).unwrap();
            got.entry(r["topic"].as_str().unwrap().to_string()).or_default().push(r);
        }
        for (topic, lines) in &want {
            let records = got.remove(topic).unwrap_or_default();
            assert_eq!(&sorted(&records), lines, "{format} {topic}: the records in Kafka are not those of the IPFIX file");
        }
        assert!(got.is_empty(), "records in topics no trace wrote: {:?}", got.keys());
    }
}

/// The samples of `GET /metrics` at `addr` whose name starts with `prefix`,
/// as (name and labels, value).
fn scrape(addr: &str, prefix: &str) -> Vec<(String, f64)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').unwrap();
            (series.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// `--metrics` of a command with `--kafka` serves the output's accounting
/// while it runs.
#[test]
fn the_metrics_of_a_command_serve_the_kafka_accounting() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    // 20 Mbit/s: about 10 s of packet time, so the 1 s timeouts make records all along the run.
    let trace = synth(dir.path(), &["-n", "30000", "-c", "500", "--mbps", "20"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["flows", trace.to_str().unwrap(), "-q", "--pps", "6000", "--active-timeout", "1", "--inactive-timeout", "1"])
        .args(["--metrics", "127.0.0.1:0", "--kafka", &broker.addr(), "--topic", "m"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
    let addr = loop {
        let l = lines.next().expect("weir ended before it said where its metrics are").unwrap();
        if let Some(url) = l.strip_prefix("weir: metrics at http://") {
            break url.trim_end_matches("/metrics").to_string();
        }
    };
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
    let mut acked_seen = 0.0;
    let until = Instant::now() + Duration::from_secs(30);
    while acked_seen == 0.0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(300));
        let m = scrape(&addr, "weir_kafka_");
        let get = |series: &str| m.iter().filter(|(s, _)| s.starts_with(series)).map(|(_, v)| v).sum::<f64>();
        // A live reading is a snapshot of counters that move while it is
        // read: the identity is exact only at the end (the other tests
        // check it there). Here: the families are served while it runs.
        assert!(m.iter().any(|(s, _)| s.starts_with("weir_kafka_in_flight")), "{m:?}");
        assert!(m.iter().any(|(s, _)| s.starts_with("weir_kafka_results_total")), "{m:?}");
        acked_seen = get("weir_kafka_results_total{result=\"acked\"");
    }
    assert!(acked_seen > 0.0, "no acknowledged record served within 30 s");
    let m = scrape(&addr, "weir_kafka_records_total");
    assert!(m.iter().any(|(s, n)| s.contains("type=\"flow\"") && *n > 0.0), "{m:?}");
    let status = child.wait().unwrap();
    let stderr = rest.join().unwrap();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_broker_absent_at_start_is_a_clear_error_and_without_waiting_every_record_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), &["-n", "5000", "-c", "200"]);
    let port = free_ports();
    let brokers = format!("127.0.0.1:{port}");
    let t = Instant::now();
    let o = weir(&["flows", trace.to_str().unwrap(), "-q", "--kafka", &brokers, "--kafka-wait", "1"]);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("no Kafka broker at {brokers} answered within 1 s")), "{stderr}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(!stderr.contains("panicked"), "{stderr}");

    // Told not to wait, it runs; nothing can be acknowledged, and the end
    // says so: every record is in flight when the flush gives up.
    let st = dir.path().join("s.json");
    let o = weir(&[
        "flows",
        trace.to_str().unwrap(),
        "-q",
        "--kafka",
        &brokers,
        "--kafka-wait",
        "0",
        "--kafka-flush-timeout",
        "1",
        "--stats",
        st.to_str().unwrap(),
    ]);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let k = &stats(&st)["kafka"];
    let made = k["made"]["flow"].as_u64().unwrap();
    assert!(made > 100, "{k}");
    assert_eq!((k["acked"].as_u64(), k["in_flight"].as_u64()), (Some(0), Some(made)), "{k}");
    assert!(stderr.contains(&format!("{made} records were still in flight after --kafka-flush-timeout and are lost")), "{stderr}");
}

/// Starts `weir flows` on `trace` paced, publishing to `topic` with a
/// buffer of `buffer_mib`, stops the broker for 20 s while it runs, starts
/// it again, and returns the run's output, its stats and its IPFIX file.
fn export_through_an_outage(broker: &Broker, dir: &Path, trace: &Path, topic: &str, buffer_mib: &str) -> (Output, Value, PathBuf) {
    let ipfix = dir.join(format!("{topic}.ipfix"));
    let st = dir.join(format!("{topic}.stats"));
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "flows",
            trace.to_str().unwrap(),
            "-q",
            "--pps",
            "4000",
            "--active-timeout",
            "1",
            "--inactive-timeout",
            "1",
            "-w",
            ipfix.to_str().unwrap(),
            "--stats",
            st.to_str().unwrap(),
            "--kafka",
            &broker.addr(),
            "--topic",
            &format!("{topic}-{{type}}"),
            "--kafka-buffer",
            buffer_mib,
            "--kafka-flush-timeout",
            "120",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(6));
    broker.down();
    std::thread::sleep(Duration::from_secs(20));
    broker.up();
    let o = child.wait_with_output().unwrap();
    (o, stats(&st), ipfix)
}

#[test]
fn a_broker_outage_loses_nothing_within_the_buffer_and_exactly_the_drops_past_it() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    // 160,000 packets paced at 4,000 a second: 40 s, the outage in the
    // middle; 1,000 flows open, each a record a second of packet time.
    let trace = synth(dir.path(), &["-n", "160000", "-c", "1000", "--mbps", "20"]);

    // A buffer that holds the outage: every record once (the producer is
    // idempotent, so a retried request is not stored twice).
    let (o, st, ipfix) = export_through_an_outage(&broker, dir.path(), &trace, "held", "256");
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let k = &st["kafka"];
    let made = k["made"]["flow"].as_u64().unwrap();
    assert_eq!(
        (k["acked"].as_u64(), k["in_flight"].as_u64(), k["dropped"].as_object().map(|d| d.len())),
        (Some(made), Some(0), Some(0)),
        "{k}"
    );
    let records = consume_with(&broker, "held-flow", "json", None, 15, false);
    assert_eq!(records.len() as u64, made, "{k}");
    assert_eq!(sorted(&records), ipfix_lines(&[ipfix], false), "the records in Kafka are not those of the IPFIX file");

    // A buffer of 1 MiB, far less than 20 s of records: the drops are
    // exactly what the consumer is missing, and nothing arrives twice.
    let (o, st, ipfix) = export_through_an_outage(&broker, dir.path(), &trace, "small", "1");
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let k = &st["kafka"];
    let made = k["made"]["flow"].as_u64().unwrap();
    let dropped = k["dropped"]["buffer-full"].as_u64().unwrap_or(0);
    assert!(dropped > 1000, "{k}");
    assert_eq!(k["acked"].as_u64().unwrap() + dropped, made, "{k}");
    let got = sorted(&consume_with(&broker, "small-flow", "json", None, 15, false));
    let all = ipfix_lines(&[ipfix], false);
    assert_eq!(all.len() as u64, made);
    assert_eq!(got.len() as u64, made - dropped, "{k}");
    // Every record consumed is one of the file's, and none twice: a multiset difference.
    let mut left: BTreeMap<&str, u64> = BTreeMap::new();
    for l in &all {
        *left.entry(l.as_str()).or_default() += 1;
    }
    for g in &got {
        let n = left.get_mut(g.as_str()).unwrap_or_else(|| panic!("consumed a record weir never made, or twice: {g}"));
        assert!(*n > 0, "consumed twice: {g}");
        *n -= 1;
    }
    assert_eq!(left.values().sum::<u64>(), dropped);
}

fn sensor_config(dir: &Path, name: &str, source: &Path, broker: &Broker, topic: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[sensor]\nname = \"{name}\"\n[capture]\nsource = \"{}\"\n[flows]\ninactive-timeout = 31536000\n\
             [kafka]\nbrokers = \"{}\"\ntopic = \"{topic}\"\nkafka-types = [\"flow\"]\n",
            source.display(),
            broker.addr()
        ),
    )
    .unwrap();
    path
}

fn top_talkers(broker: &Broker, topic: &str) -> Value {
    let o = Command::new("python3")
        .arg(root().join("examples/fleet_top_talkers.py"))
        .args(["--brokers", &broker.addr(), "--topic", topic, "--json", "--idle", "3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn a_fleet_of_two_sensors_publishes_into_one_topic_what_one_sensor_makes_of_the_whole() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), &["-n", "40000", "-c", "1500"]);
    // A packet broker's split: by a symmetric hash of the addresses.
    let halves = dir.path().join("half");
    let o = Command::new("python3")
        .arg(root().join("tests/kafka/split.py"))
        .args([trace.to_str().unwrap(), halves.to_str().unwrap(), "2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let counts: Vec<u64> = text(&o.stdout).split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert!(counts.iter().all(|&c| c > 10_000), "{counts:?}");
    for (name, source, topic) in
        [("a", dir.path().join("half0.pcap"), "fleet"), ("b", dir.path().join("half1.pcap"), "fleet"), ("whole", trace.clone(), "whole")]
    {
        let o = weir(&["sensor", sensor_config(dir.path(), name, &source, &broker, topic).to_str().unwrap()]);
        assert!(o.status.success(), "{name}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("0 dropped, 0 failed, 0 in flight"), "{}", text(&o.stderr));
    }
    let fleet = consume(&broker, "fleet", "json", None, 8);
    let whole = consume(&broker, "whole", "json", None, 8);
    assert!(whole.len() > 1000, "{} records", whole.len());
    assert_eq!(sorted(&fleet), sorted(&whole), "the two sensors' records are not the one sensor's");
    one_partition_per_key(&fleet);
    let (f, w) = (top_talkers(&broker, "fleet"), top_talkers(&broker, "whole"));
    assert_eq!(f, w);
    assert_eq!(f["records"].as_u64(), Some(whole.len() as u64));
}

/// A flow record without its times and ingress, which a live capture
/// stamps with its own clock: the endpoints, the counters, the TCP flags
/// and why it ended.
fn untimed(records: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = records
        .iter()
        .map(kafka_line)
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            format!("{} {} {} {} {} {} {} {} {}", f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[9], f[10])
        })
        .collect();
    v.sort();
    v
}

#[test]
#[ignore = "needs root: two sensors on two veth test beds, each replaying half a trace with tcpreplay"]
fn a_live_fleet_of_two_sensors_publishes_what_one_sensor_makes_of_the_whole() {
    use testbed::{Reaped, TestBed};
    testbed::require_tools(&["tcpreplay"]);
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), &["-n", "20000", "-c", "300", "--mbps", "20"]);
    let halves = dir.path().join("half");
    let o = Command::new("python3")
        .arg(root().join("tests/kafka/split.py"))
        .args([trace.to_str().unwrap(), halves.to_str().unwrap(), "2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let beds = [TestBed::new(1), TestBed::new(1)];
    // Each sensor captures its own bed (the capture in the bed's namespace,
    // the sensor itself beside the broker), as two machines behind a packet broker.
    let mut sensors = Vec::new();
    for (i, tb) in beds.iter().enumerate() {
        let path = dir.path().join(format!("live{i}.toml"));
        std::fs::write(
            &path,
            format!(
                "[sensor]\nname = \"live{i}\"\nstatus-interval = 0\n[capture]\nsource = \"afpacket:{}\"\nnetns = \"{}\"\n\
                 [flows]\ninactive-timeout = 31536000\n[kafka]\nbrokers = \"{}\"\ntopic = \"live\"\nkafka-types = [\"flow\"]\n",
                tb.rx_if,
                tb.rx_ns,
                broker.addr()
            ),
        )
        .unwrap();
        let mut child = Reaped(
            Command::new(env!("CARGO_BIN_EXE_weir"))
                .args(["sensor", path.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let lines = testbed::wait_listening(&mut child.0, "weir sensor");
        let err = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
        sensors.push((child, err));
    }
    // Both halves at once, one from each bed's sending namespace.
    let replays: Vec<_> = beds
        .iter()
        .enumerate()
        .map(|(i, tb)| {
            tb.in_tx("tcpreplay")
                .args(["-q", "-i", &tb.tx_if, "--pps", "5000", dir.path().join(format!("half{i}.pcap")).to_str().unwrap()])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut r in replays {
        assert!(r.wait().unwrap().success(), "tcpreplay failed");
    }
    std::thread::sleep(Duration::from_millis(1000));
    for (child, err) in sensors {
        let mut child = child;
        Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap();
        let status = child.0.wait().unwrap();
        let err = err.join().unwrap();
        assert!(status.success(), "{err}");
        assert!(err.contains(" 0 capture drops, 0 delivery drops") && err.contains("0 dropped, 0 failed, 0 in flight"), "{err}");
    }
    // One sensor on the whole trace, from the file.
    let o = weir(&["sensor", sensor_config(dir.path(), "whole", &trace, &broker, "whole").to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (live, whole) = (consume(&broker, "live", "json", None, 8), consume(&broker, "whole", "json", None, 8));
    assert!(whole.len() > 300, "{} records", whole.len());
    assert_eq!(untimed(&live), untimed(&whole), "the live fleet's records are not the one sensor's");
    one_partition_per_key(&live);
}
