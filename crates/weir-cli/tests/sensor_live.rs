//! `weir sensor` on the veth test bed: one sensor with record, flows,
//! streams, inspect, events and metrics captures a replay on `afxdp:` with
//! 2 queues; `weir flows`, `weir streams` and `weir inspect` run on the pcap
//! it recorded give the same flow records (as events), the same stream
//! files byte for byte and the same alerts. Root only: ignored by a plain
//! `cargo test`, run by `make test`'s privileged step.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use testbed::{Reaped, TestBed};

#[path = "support/outputs.rs"]
mod outputs;
use outputs::{alerts, flow_events, json_lines, tree};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn weir(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).args(args).stdin(Stdio::null()).output().expect("weir runs")
}

#[test]
#[ignore = "needs root: weir sensor on afxdp with 2 queues on a veth test bed, tcpreplay sending"]
fn a_sensor_on_afxdp_equals_the_commands_on_what_it_recorded() {
    let tb = TestBed::new(2);
    testbed::require_tools(&["tcpreplay"]);
    // Every packet on RX queue 0: veth puts a flow on the queue of the CPU
    // tcpreplay happens to run on, and a flow split over two queues would be
    // split over two workers' stream layers. Queue 1 is captured all the same.
    tb.all_on_queue_zero().unwrap();
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    let t = p("t.pcap");
    let o = weir(&["synth", "-o", &t, "-n", "20000", "-c", "100", "--mbps", "50", "-s", "3"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let config = format!(
        "[sensor]\nname = \"live\"\nstatus-interval = 0\n\n[capture]\nsource = \"afxdp:{}@0-1\"\nnetns = \"{}\"\ntake-host-traffic = true\n\n\
         [record]\nwrite = \"{}\"\n\n[flows]\nwrite = \"{}\"\n\n[streams]\noutput = \"{}\"\n\n[inspect]\n\n\
         [events]\npath = \"{}\"\n\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
        tb.rx_if,
        tb.rx_ns,
        p("rec.pcap"),
        p("f.ipfix"),
        p("streams"),
        p("eve.json")
    );
    std::fs::write(p("s.toml"), config).unwrap();
    let check = weir(&["sensor", "--check", &p("s.toml")]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    let mut child = Reaped(
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["sensor", &p("s.toml")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let lines_left = testbed::wait_listening(&mut child.0, "weir sensor");
    let err = std::thread::spawn(move || lines_left.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
    let replay = tb.in_tx("tcpreplay").args(["-q", "-i", &tb.tx_if, "--pps", "10000", &t]).output().expect("tcpreplay runs");
    assert!(replay.status.success(), "tcpreplay: {}", text(&replay.stderr));
    std::thread::sleep(Duration::from_millis(1000));
    Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap();
    let status = child.0.wait().unwrap();
    let err = err.join().unwrap();
    println!("{err}");
    assert!(status.success(), "{err}");
    assert!(err.contains("20000 packets received") && err.contains(" 0 capture drops, 0 delivery drops"), "{err}");

    let rec = format!("{}@0-1", p("rec.pcap"));
    let count: Value = serde_json::from_slice(&weir(&["count", "--json", &p("rec.pcap")]).stdout).unwrap();
    assert_eq!(count["packets"].as_u64(), Some(20000), "{count}");
    let events = json_lines(Path::new(&p("eve.json")));

    // Flow records.
    let o = weir(&["flows", &rec, "-w", "/dev/null", "--events", &p("flows.json"), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (mine, theirs) = flow_events(&events, Path::new(&p("flows.json")));
    assert!(mine.len() > 100, "{} flow events", mine.len());
    assert_eq!(mine, theirs, "flow records differ from weir flows' on the recording");

    // Stream files.
    let o = weir(&["streams", &rec, "-o", &p("streams2"), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (a, b) = (tree(Path::new(&p("streams"))), tree(Path::new(&p("streams2"))));
    assert!(a.len() > 50 && a == b, "stream files: {} and {}", a.len(), b.len());

    // Alerts.
    let o = weir(&["inspect", &rec, "--streams", "-o", &p("alerts.json"), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (mine, theirs) = alerts(&events, Path::new(&p("alerts.json")));
    assert!(mine.len() > 50, "{} alerts", mine.len());
    assert_eq!(mine, theirs, "alerts differ from weir inspect's on the recording");
}
