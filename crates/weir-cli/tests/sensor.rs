//! `weir sensor`: one capture feeding every output equals the single-purpose
//! commands run on the packets it recorded; broken configs are refused with
//! the file, line and key, and start nothing; the signals do what the
//! contract says, with every packet accounted for across a reload.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "support/eve.rs"]
mod eve;
#[path = "support/outputs.rs"]
mod outputs;
use outputs::{alerts, flow_events, of_type, tree};

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: &Output) -> String {
    let err = text(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {err}", out.status.code());
    err
}

/// A trace of `packets` packets with payloads the built-in rules match.
fn trace(dir: &Path, packets: u32) -> String {
    trace_at(dir, packets, 1000)
}

/// A trace whose packet time runs at `mbps` (what the flow timeouts count).
fn trace_at(dir: &Path, packets: u32, mbps: u32) -> String {
    let t = dir.join("t.pcap");
    let (packets, mbps) = (packets.to_string(), mbps.to_string());
    ok(&weir(&["synth", "-o", t.to_str().unwrap(), "--packets", &packets, "--flows", "300", "--seed", "7", "--mbps", &mbps]));
    t.to_str().unwrap().to_string()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

#[test]
fn one_sensor_equals_record_flows_streams_and_inspect_run_on_what_it_recorded() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path(), 30_000);
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    let config = format!(
        "[sensor]\nname = \"t1\"\nstatus-interval = 0\n\n[capture]\nsource = \"{t}@0-1\"\n\n[record]\nwrite = \"{}\"\n\n\
         [flows]\nwrite = \"{}\"\n\n[streams]\noutput = \"{}\"\n\n[inspect]\n\n[events]\npath = \"{}\"\n",
        p("rec.pcap"),
        p("flows.ipfix"),
        p("streams"),
        p("eve.json")
    );
    std::fs::write(p("s.toml"), config).unwrap();
    let err = ok(&weir(&["sensor", &p("s.toml")]));
    assert!(err.contains("[events]") && err.contains("0 not written"), "{err}");
    let events = outputs::json_lines(Path::new(&p("eve.json")));
    assert_eq!(eve::check(Path::new(&p("eve.json"))), events.len() as u64);

    // The recording holds every packet.
    let count = |src: &str| -> Value { serde_json::from_slice(&weir(&["count", "--json", src]).stdout).unwrap() };
    let (a, b) = (count(&t), count(&p("rec.pcap")));
    assert_eq!((a["packets"].clone(), a["bytes"].clone()), (b["packets"].clone(), b["bytes"].clone()), "{a} {b}");
    assert!(a["packets"].as_u64().unwrap() == 30_000, "{a}");

    // The same flow records as weir flows, as events.
    let rec = format!("{}@0-1", p("rec.pcap"));
    ok(&weir(&["flows", &rec, "-w", "/dev/null", "--events", &p("flows.json"), "-q"]));
    let (mine, theirs) = flow_events(&events, Path::new(&p("flows.json")));
    assert!(!mine.is_empty());
    assert_eq!(mine, theirs, "flow events differ from weir flows'");

    // The same stream files as weir streams, byte for byte.
    ok(&weir(&["streams", &rec, "-o", &p("streams2"), "-q"]));
    let (s1, s2) = (tree(Path::new(&p("streams"))), tree(Path::new(&p("streams2"))));
    assert!(s1.len() > 100, "{} stream files", s1.len());
    assert!(s1 == s2, "stream files differ: {} and {} files", s1.len(), s2.len());

    // The same alerts as weir inspect --streams.
    ok(&weir(&["inspect", &rec, "--streams", "-o", &p("alerts.json"), "-q"]));
    let (mine, theirs) = alerts(&events, Path::new(&p("alerts.json")));
    assert!(mine.len() > 100, "{} alerts", mine.len());
    assert_eq!(mine, theirs, "alerts differ from weir inspect's");
    // One stream event per stream the layer closed.
    assert!(err.contains(&format!("{} streams in", of_type(&events, "stream").len())), "{err}");
}

/// Writes `config` and checks it: the exit status and standard error.
fn check(dir: &Path, config: &str) -> (Option<i32>, String) {
    let f = dir.join("s.toml");
    std::fs::write(&f, config).unwrap();
    let out = weir(&["sensor", "--check", f.to_str().unwrap()]);
    (out.status.code(), text(&out.stderr))
}

#[test]
fn broken_configs_are_refused_with_file_line_and_key_and_start_nothing() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path(), 2_000);
    let dir = d.path().to_str().unwrap();
    let rules = d.path().join("bad.rules");
    std::fs::write(&rules, "1001 80 \"unterminated\n").unwrap();
    let good = format!("[capture]\nsource = \"{t}\"\n\n[flows]\nwrite = \"{dir}/f.ipfix\"\n");
    assert_eq!(check(d.path(), &good).0, Some(0), "{}", check(d.path(), &good).1);
    // (config, line, what the message must say)
    let cases: Vec<(String, usize, &str)> = vec![
        ("[capture\nsource = \"x\"\n".into(), 1, "not valid TOML"),
        (format!("{good}[flows]\nwrite = \"x\"\n"), 6, "not valid TOML"),
        ("[flows]\nwrite = \"/tmp/x.ipfix\"\n".into(), 1, "[capture]"),
        (format!("[capture]\nsource = \"{t}\"\n"), 1, "no output"),
        (format!("{good}[recrod]\nwrite = \"x.pcap\"\n"), 6, "no such table"),
        (format!("{good}extra = 1\n"), 6, "unknown key `extra`"),
        (format!("[capture]\nsource = \"{t}\"\nsnaplen = \"big\"\n[flows]\nwrite = \"{dir}/f\"\n"), 3, "snaplen"),
        (format!("[capture]\nsource = \"{t}\"\nsnaplen = 0\n[flows]\nwrite = \"{dir}/f\"\n"), 3, "snaplen"),
        (format!("[capture]\nsource = \"{t}\"\npool = \"abc\"\n[flows]\nwrite = \"{dir}/f\"\n"), 3, "[capture] pool"),
        (format!("[capture]\nsource = \"{t}\"\nbalance = \"sideways\"\n[flows]\nwrite = \"{dir}/f\"\n"), 3, "[capture] balance"),
        (format!("[capture]\nsource = \"{t}\"\nfilter = \"tcp port\"\n[flows]\nwrite = \"{dir}/f\"\n"), 3, "[capture] filter"),
        (format!("[capture]\nsource = \"{t}\"\nuser = \"no-such-user-here\"\n[flows]\nwrite = \"{dir}/f\"\n"), 3, "no user"),
        (format!("[capture]\nsource = \"afpacket:nosuchif0\"\n[flows]\nwrite = \"{dir}/f\"\n"), 2, "no interface"),
        (format!("[capture]\nsource = \"{t}@9-1\"\n[flows]\nwrite = \"{dir}/f\"\n"), 2, "[capture] source"),
        (format!("[capture]\nsource = \"{t}\"\nlocality = 0\n[flows]\nwrite = \"{dir}/f\"\n"), 3, "locality"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\nwrite = \"{dir}/f\"\nfilter = \"udp and\"\n"), 5, "[flows] filter"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\nformat = \"v5\"\nwrite = \"{dir}/f\"\n"), 3, "[flows]"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\nactive-timeout = 0\n"), 4, "active-timeout"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\ncollector = \"nohost.invalid.:9995\"\n"), 3, "collector"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\n"), 3, "nowhere to export"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\nwrite = \"/nonexistent-dir/f.ipfix\"\n"), 4, "[flows] write"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\nwrite = \"{dir}/f\"\npool = \"64,64\"\n"), 5, "belongs in [capture]"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\nwrite = \"{dir}/f\"\nmetrics = \":9101\"\n"), 5, "[metrics]"),
        (
            format!("[capture]\nsource = \"{t}\"\nkernel-cutoff = \"on\"\n[record]\nwrite = \"{dir}/r.pcap\"\n"),
            3,
            "[capture] kernel-cutoff: cannot be on here: [record] keeps every packet",
        ),
        (format!("[capture]\nsource = \"{t}\"\nkernel-cutoff = \"on\"\n[flows]\nwrite = \"{dir}/f\"\n[streams]\n"), 3, "two stream layers"),
        (format!("[capture]\nsource = \"{t}\"\nkernel-cutoff = \"on\"\n[flows]\nwrite = \"{dir}/f\"\nfilter = \"tcp\"\n"), 3, "a filter"),
        (format!("[capture]\nsource = \"{t}\"\nkernel-cutoff = \"maybe\"\n[flows]\nwrite = \"{dir}/f\"\n"), 3, "kernel-cutoff"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\nwrite = \"{dir}/f\"\nkernel-flows = 10\n"), 5, "belongs in [capture]"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\nwrite = \"{dir}/f\"\nbiflow = \"yes\"\n"), 5, "biflow"),
        (format!("[capture]\nsource = \"{t}\"\n[record]\nfile-size = 10\n"), 3, "write"),
        (format!("[capture]\nsource = \"{t}\"\n[record]\nwrite = \"/nonexistent-dir/r.pcap\"\n"), 4, "[record] write"),
        (format!("[capture]\nsource = \"{t}\"\n[record]\nwrite = \"{dir}/r.pcap\"\nmax-files = 0\n"), 5, "max-files"),
        (format!("[capture]\nsource = \"{t}\"\n[record]\nwrite = \"{dir}/r.pcap\"\nformat = \"pcapx\"\n"), 5, "format"),
        (format!("[capture]\nsource = \"{t}\"\n[streams]\nmode = \"tcp-slow\"\n"), 4, "mode"),
        (format!("[capture]\nsource = \"{t}\"\n[streams]\nclass = [\"tcp;cutoff=x\"]\n"), 4, "class"),
        (format!("[capture]\nsource = \"{t}\"\n[streams]\njson = true\n"), 4, "events"),
        (format!("[capture]\nsource = \"{t}\"\n[streams]\noutput = \"/proc/nope/streams\"\n"), 4, "[streams] output"),
        (
            format!("[capture]\nsource = \"{t}\"\n[inspect]\nrules = \"{}\"\n[events]\npath = \"{dir}/e.json\"\n", rules.display()),
            4,
            "[inspect] rules",
        ),
        (format!("[capture]\nsource = \"{t}\"\n[inspect]\n"), 3, "alerts go to [events]"),
        (format!("[capture]\nsource = \"{t}\"\n[inspect]\nautomaton = \"regex\"\n"), 4, "automaton"),
        (format!("{good}[events]\n"), 6, "missing `path`"),
        (format!("{good}[events]\npath = \"{dir}/e.json\"\ntypes = [\"flow\", \"packet\"]\n"), 8, "not an event type"),
        (format!("{good}[events]\npath = \"{dir}/e.json\"\ntypes = [\"alert\"]\n"), 8, "[inspect]"),
        (format!("{good}[events]\npath = \"{dir}/e.json\"\nstats-interval = 0\n"), 8, "stats-interval"),
        (format!("{good}[events]\npath = \"/nonexistent-dir/e.json\"\n"), 7, "[events] path"),
        (format!("{good}[metrics]\nlisten = \"nonsense\"\n"), 7, "[metrics] listen"),
        (format!("{good}[metrics]\n"), 6, "missing `listen`"),
        (format!("[sensor]\nname = \"a b\"\n{good}"), 2, "[sensor] name"),
        (format!("[sensor]\nstatus-interval = -1\n{good}"), 2, "status-interval"),
        (format!("sensor = 1\n{good}"), 1, "must be a table"),
        (format!("{good}[kafka]\ntopic = \"x\"\n"), 6, "[kafka] brokers"),
        (format!("{good}[kafka]\nbrokers = \"127.0.0.1:1\"\ntopic = \"bad topic {{type}}\"\n"), 8, "not a Kafka topic name"),
        (format!("{good}[kafka]\nbrokers = \"127.0.0.1:1\"\nkafka-format = \"avro\"\n"), 8, "kafka-format"),
        (format!("{good}[kafka]\nbrokers = \"127.0.0.1:1\"\nkafka-buffer = 0\n"), 8, "kafka-buffer"),
        (format!("[capture]\nsource = \"{t}\"\n[flows]\nwrite = \"{dir}/f\"\nkafka = \"127.0.0.1:9092\"\n"), 5, "[kafka] table"),
    ];
    assert!(cases.len() >= 30);
    let mut wrong = Vec::new();
    for (config, line, says) in &cases {
        let (code, err) = check(d.path(), config);
        let at = format!("s.toml:{line}:");
        if code != Some(2) || !err.contains(&at) || !err.contains(says) {
            wrong.push(format!("wanted exit 2, `{at}` and `{says}` for\n{config}\ngot {code:?}: {err}"));
            continue;
        }
        // Run, it starts nothing: exit 2, and no output made.
        let f = d.path().join("s.toml");
        let out = weir(&["sensor", f.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{config}\n{}", text(&out.stderr));
        for made in ["f", "f.ipfix", "r.pcap", "e.json"] {
            assert!(!d.path().join(made).exists(), "{made} was made by\n{config}");
        }
    }
    assert!(wrong.is_empty(), "{} of {} configs:\n{}", wrong.len(), cases.len(), wrong.join("\n---\n"));
}

fn signal(child: &std::process::Child, sig: &str) {
    let s = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap();
    assert!(s.success());
}

/// Waits until `path` holds a line that contains `what`.
fn wait_for(path: &Path, what: &str) -> String {
    let start = Instant::now();
    loop {
        let s = std::fs::read_to_string(path).unwrap_or_default();
        if s.contains(what) {
            return s;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no `{what}` in {}: {s}", path.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn signals_reopen_log_reload_without_a_lost_packet_and_stop_cleanly() {
    let d = tempfile::tempdir().unwrap();
    // Packet time about as long as the paced replay (5 s): flows end by the
    // inactive timeout while it runs, so an IPFIX file holds records by the
    // SIGHUP.
    let t = trace_at(d.path(), 20_000, 25);
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    // The capture's filter and the recording's: TCP is recorded before the
    // reload, UDP after it (the capture keeps only UDP then).
    let config = |capture: &str, record: &str, domain: u32| {
        let filter = |f: &str| if f.is_empty() { String::new() } else { format!("filter = \"{f}\"\n") };
        format!(
            "[sensor]\nstatus-interval = 0\n[capture]\nsource = \"{t}@0-1\"\npps = 4000\n{}\n[record]\nwrite = \"{}\"\n{}\n\
             [flows]\nwrite = \"{}\"\ndomain = {domain}\ninactive-timeout = 1\n\n[inspect]\nrules = \"{}\"\n\n[events]\npath = \"{}\"\nstats-interval = 1\n\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
            filter(capture),
            p("rec.pcap"),
            filter(record),
            p("f.ipfix"),
            p("rules"),
            p("eve.json")
        )
    };
    // The rules before and after the reload: contents the trace's web sessions carry.
    std::fs::write(p("rules"), "9001 any \"HTTP/1.1 200 OK\"\n").unwrap();
    std::fs::write(p("s.toml"), config("", "tcp", 0)).unwrap();
    let log = std::fs::File::create(p("log")).unwrap();
    // systemd's side of Type=notify: a socket the test listens on.
    let notify = std::os::unix::net::UnixDatagram::bind(d.path().join("notify")).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["sensor", &p("s.toml")])
        .env("NOTIFY_SOCKET", d.path().join("notify"))
        .stdin(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("READY=1 within 30 s");
    let ready = text(&buf[..n]);
    assert!(ready.starts_with("READY=1\n") && ready.contains("STATUS=capturing"), "{ready}");
    // Ready means every output is open: the recording's file exists.
    assert!(Path::new(&p("rec.pcap")).exists());
    wait_for(Path::new(&p("log")), "capturing");
    wait_for(Path::new(&p("eve.json")), "\"stats\"");
    // The IPFIX file holds a record (a message after its templates' own),
    // so the SIGHUP has a file to close.
    let start = Instant::now();
    while !std::fs::read(p("f.ipfix")).is_ok_and(|b| b.len() > 4 && b.len() > usize::from(u16::from_be_bytes([b[2], b[3]]))) {
        assert!(start.elapsed() < Duration::from_secs(30), "no flow record written to f.ipfix");
        std::thread::sleep(Duration::from_millis(50));
    }
    // logrotate, with the snippet of dist/ (its paths and its signal made the
    // test's): it renames the file and SIGHUPs the sensor, whose events go
    // on in a new file of the name.
    let snippet = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/weir-sensor.logrotate")).unwrap();
    let conf = snippet
        .replace("/var/log/weir/*.json /var/log/weir/*.log", &p("eve.json"))
        .replace("systemctl kill --signal=HUP weir-sensor.service", &format!("kill -HUP {}", child.id()));
    assert!(conf.contains(&p("eve.json")) && conf.contains("kill -HUP"), "the snippet's path or signal changed: {snippet}");
    std::fs::write(p("logrotate.conf"), conf).unwrap();
    let rotated =
        Command::new("logrotate").args(["-f", "-s", &p("logrotate.state"), &p("logrotate.conf")]).output().expect("logrotate runs");
    assert!(rotated.status.success(), "logrotate: {}", text(&rotated.stderr));
    wait_for(Path::new(&p("log")), "reopened the events file");
    // The same SIGHUP closed the packet and IPFIX files: the next starts at
    // the next packet or message, under the name a rotation gives it.
    wait_for(Path::new(&p("log")), "SIGHUP: [record] the next packet starts a new file");
    wait_for(Path::new(&p("log")), "SIGHUP: [flows] an open IPFIX file that holds a record is closed");
    signal(&child, "USR1");
    wait_for(Path::new(&p("log")), "SIGUSR1: {");
    // A filter that does not compile: the reload is refused, whole.
    std::fs::write(p("s.toml"), config("", "udp and", 0)).unwrap();
    signal(&child, "USR2");
    wait_for(Path::new(&p("log")), "SIGUSR2: reload refused");
    // New filters and new rules are taken; the domain waits for a restart.
    std::fs::write(p("s.toml"), config("udp", "", 7)).unwrap();
    std::fs::write(p("rules"), "9002 any \"Connection: keep-alive\"\n").unwrap();
    signal(&child, "USR2");
    let log = wait_for(Path::new(&p("log")), "SIGUSR2: reloaded");
    assert!(log.contains("[flows] changed beyond the filters and rules"), "{log}");
    // The metrics show each output's counts and the reload.
    let url = log.split("metrics at http://").nth(1).and_then(|r| r.split('/').next()).unwrap_or_else(|| panic!("{log}"));
    let scrape = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(url).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        body
    };
    for want in [
        "weir_sensor_output_packets_total{",
        "output=\"record\"",
        "result=\"filtered\"",
        "weir_sensor_record_packets_written_total{sensor=",
        "weir_sensor_events_total{sensor=",
        "weir_packets_delivered_total{",
    ] {
        assert!(scrape.contains(want), "no {want} in the scrape:\n{scrape}");
    }
    for result in ["done", "refused"] {
        let counted =
            |l: &str| l.starts_with("weir_sensor_reloads_total{") && l.contains(&format!("result=\"{result}\"")) && l.ends_with(" 1");
        assert!(scrape.lines().any(counted), "{result}: {scrape}");
    }
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "TERM");
    let status = child.wait().unwrap();
    // What was said since READY=1: each reload's RELOADING=1 and READY=1, then STOPPING=1.
    notify.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let said: Vec<String> = std::iter::from_fn(|| notify.recv(&mut buf).ok().map(|n| text(&buf[..n]))).collect();
    assert!(said.iter().any(|m| m.starts_with("RELOADING=1\nMONOTONIC_USEC=")), "{said:?}");
    assert!(said.last().is_some_and(|m| m == "STOPPING=1\n"), "{said:?}");
    let log = std::fs::read_to_string(p("log")).unwrap();
    assert!(status.success(), "{log}");
    wait_for(Path::new(&p("eve.json")), "\"stats\"");
    // Every event is in one of the two files: made = written.
    let all: Vec<String> = lines(Path::new(&p("eve.json.1"))).into_iter().chain(lines(Path::new(&p("eve.json")))).collect();
    let made = log.lines().find(|l| l.contains("[events]")).unwrap_or_else(|| panic!("{log}"));
    assert!(made.contains(&format!("{} written, 0 not written", all.len())), "{made}: {} lines", all.len());
    // Across the reload, every packet the record branch saw was written or
    // filtered out, once: the recording holds TCP, then UDP.
    let number_before = |what: &str| -> u64 { log.split(what).next().and_then(|s| s.rsplit(' ').next()).unwrap().parse().unwrap() };
    let (received, delivered, dropped) =
        (number_before(" packets received"), number_before(" delivered,"), number_before(" capture drops"));
    // The capture filter took over at the reload: the TCP packets after it
    // were filtered there, each packet judged once.
    let filtered_by_capture = number_before(" filtered,");
    assert!(filtered_by_capture > 0, "{log}");
    assert_eq!(received, delivered + filtered_by_capture + dropped, "{log}");
    let rec = log.lines().find(|l| l.contains("[record]") && l.contains("written to")).unwrap();
    let nums: Vec<u64> = rec.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    // "[record] P packets (F filtered out): W written ..."
    let (passed, filtered, written) = (nums[0], nums[1], nums[2]);
    assert_eq!(passed + filtered, delivered, "{rec} / {delivered}");
    assert_eq!(passed, written, "{rec}");
    let stats: Value = serde_json::from_str(&all.iter().rev().find(|l| l.contains("\"stats\"")).unwrap().clone()).unwrap();
    assert!(stats["stats"]["outputs"]["record"]["packets"].as_u64().is_some(), "{stats}");
    // Two packet files, the second begun at the SIGHUP; together they hold
    // every packet written.
    assert!(rec.contains("written to 2 file(s)") && rec.ends_with("rec.1.pcap"), "{rec}");
    let count = |file: &str, f: &str| -> u64 {
        let v: Value = serde_json::from_slice(&weir(&["count", "--json", &p(file), "-f", f]).stdout).unwrap();
        v["packets"].as_u64().unwrap()
    };
    let (c, u) = (count("rec.pcap", "tcp") + count("rec.1.pcap", "tcp"), count("rec.pcap", "udp") + count("rec.1.pcap", "udp"));
    assert!(c > 0 && u > 0 && count("rec.1.pcap", "tcp or udp") > 0, "{c} {u}");
    assert_eq!(c + u, written);
    // Two IPFIX files, each opening with a message of templates alone
    // (version 10, then a template set, id 2), so each is read by itself.
    for f in ["f.ipfix", "f.1.ipfix"] {
        let b = std::fs::read(p(f)).unwrap();
        assert!(b.len() > 20 && b[..2] == [0, 10] && b[16..18] == [0, 2], "{f}: {} bytes", b.len());
    }
    let flows = log.lines().find(|l| l.contains("[flows]") && l.contains("\"unwritten\"")).unwrap_or_else(|| panic!("{log}"));
    assert!(flows.contains("\"unwritten\":0"), "{flows}");
    assert!(log.contains("reload 1"), "{log}");
    // The rules switched: alerts of the first set, then of the second, none else.
    let sids: Vec<u64> =
        all.iter().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter_map(|e| e["alert"]["signature_id"].as_u64()).collect();
    assert!(sids.contains(&9001) && sids.contains(&9002), "{} alerts", sids.len());
    assert!(sids.iter().all(|s| [9001, 9002].contains(s)));
}

#[test]
fn an_output_that_fails_is_counted_and_the_others_go_on() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path(), 20_000);
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    // The packet files fill their file system once 256 KiB are written (a
    // file-size limit, its signal ignored, makes writes past it fail with
    // EFBIG, as a full disk fails them); the events go to a device that is
    // always full. The flow records stay well below the limit.
    let config = format!(
        "[sensor]\nstatus-interval = 0\n[capture]\nsource = \"{t}@0-1\"\npps = 20000\n[record]\nwrite = \"{}\"\n\
         [flows]\nwrite = \"{}\"\n[events]\npath = \"/dev/full\"\n",
        p("r.pcap"),
        p("f.ipfix")
    );
    std::fs::write(p("s.toml"), config).unwrap();
    let out = Command::new("bash")
        .args(["-c", "trap '' XFSZ; ulimit -f 256; exec \"$0\" sensor \"$1\"", env!("CARGO_BIN_EXE_weir"), &p("s.toml")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Each failure named and counted: every packet of the record output and
    // every event is written or counted as not.
    let rec = err.lines().find(|l| l.contains("[record] error") && l.contains("packets not written")).unwrap_or_else(|| panic!("{err}"));
    assert!(rec.contains("File too large"), "{rec}");
    // Said when it happened, too.
    assert!(err.contains("the capture and the other outputs go on"), "{err}");
    // The summary: the error itself may come first, when the events were
    // written (and failed) while the capture still ran.
    let ev = err.lines().find(|l| l.contains("[events]") && l.contains("events made")).unwrap_or_else(|| panic!("{err}"));
    assert!(ev.contains("0 written") && ev.contains("/dev/full"), "{ev}");
    // The capture went on to the end, and the flows output with it: the
    // same records as weir flows on the trace.
    assert!(err.contains("20000 packets received") && err.contains("20000 delivered"), "{err}");
    let flows = err.lines().find(|l| l.contains("[flows]") && l.contains("\"lost_to_send_errors\"")).unwrap_or_else(|| panic!("{err}"));
    assert!(flows.contains("\"lost_to_send_errors\":0") && flows.contains("\"unwritten\":0"), "{flows}");
    let alone = text(&weir(&["flows", &format!("{t}@0-1"), "-w", &p("g.ipfix"), "-q"]).stderr);
    let records = |s: &str| s.split(" records (").next().and_then(|x| x.rsplit(' ').next()).map(str::to_string);
    let exported: Value =
        serde_json::from_str(flows.split_once(": ").unwrap().1.split_once(": ").map_or("", |x| x.1)).unwrap_or(Value::Null);
    assert_eq!(Some(exported["exported"].to_string()), records(&alone), "{flows} / {alone}");
}

/// Owner of `path`.
fn owner(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).uid()
}

#[test]
#[ignore = "needs root: the sensor drops from root to `nobody` before its outputs open"]
fn the_outputs_open_their_files_as_the_user_the_sensor_drops_to() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let t = trace(d.path(), 5_000);
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    let config = format!(
        "[sensor]\nname = \"u\"\nstatus-interval = 0\n\n[capture]\nsource = \"{t}\"\nuser = \"nobody\"\n\n[record]\nwrite = \"{}\"\n\n\
         [flows]\nwrite = \"{}\"\n\n[streams]\noutput = \"{}\"\n",
        p("rec.pcap"),
        p("flows.ipfix"),
        p("streams")
    );
    std::fs::write(p("s.toml"), config).unwrap();
    let err = ok(&weir(&["sensor", &p("s.toml")]));
    assert!(err.contains("[record] 5000 packets"), "{err}");
    let nobody = 65534;
    let streams = d.path().join("streams");
    let files = tree(&streams);
    assert!(!files.is_empty(), "{err}");
    for f in [p("rec.pcap"), p("flows.ipfix"), p("streams")].iter().map(Path::new) {
        assert_eq!(owner(f), nobody, "{} is not nobody's", f.display());
    }
    for name in files.keys() {
        assert_eq!(owner(&streams.join(name)), nobody, "{name}");
    }
}
