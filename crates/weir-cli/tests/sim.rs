//! `weir sim` as a user runs it: one run's report as JSON, the experiments'
//! CSV files, and exit code 2 with a clear message for bad input.

use std::process::{Command, Output, Stdio};

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).arg("sim").args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = sim(args);
    assert!(out.status.success(), "weir sim {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn a_pool_that_holds_the_burst_drops_nothing_and_a_smaller_one_drops_the_rest() {
    let big = json(&["run", "--engine", "B-256,500", "--burst", "100000", "--json"]);
    let small = json(&["run", "--engine", "B-256,100", "--burst", "100000", "--json"]);
    assert_eq!(big["capture_drops"], 0);
    assert_eq!(big["delivered"], 100_000);
    let rate = small["drop_rate"].as_f64().unwrap();
    assert!((0.70..0.76).contains(&rate), "{small}");
    assert_eq!(small["delivered"].as_u64().unwrap() + small["capture_drops"].as_u64().unwrap(), 100_000);
}

#[test]
fn burst_experiment_writes_one_row_per_engine_application_and_size() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("burst");
    let out = sim(&["burst", "-o", prefix.to_str().unwrap(), "--bursts", "1000,6000", "--engines", "ring-only:1024", "B-64,400"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = std::fs::read_to_string(prefix.with_extension("csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "app,cost_ns,engine,burst,dropped,drop_rate");
    assert_eq!(lines.len(), 1 + 2 * 2 * 2, "{csv}");
    // Engine names with commas are quoted, so every row has six fields.
    assert!(lines.iter().any(|l| l.starts_with("heavy,25773,\"B-64,400\",6000,0,")), "{csv}");
    let ring = lines.iter().find(|l| l.starts_with("light,100,\"ring-only:1024\",6000,")).unwrap();
    let rate: f64 = ring.rsplit(',').next().unwrap().parse().unwrap();
    assert!(rate > 0.1, "the ring-only engine overflows at P = 6000: {ring}");
}

#[test]
fn imbalance_experiment_reports_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("imb");
    let out = sim(&["imbalance", "-o", prefix.to_str().unwrap(), "--packets", "200000", "--pool", "64,64"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("offered load per queue"), "{err}");
    let csv = std::fs::read_to_string(prefix.with_extension("csv")).unwrap();
    for mode in ["\"ring-only:1024\"", "\"B-64,64\"", "\"A-64,64,50\"", "\"A-64,64,80\"", "\"rebalance-64,64\"", "\"rebalance-64,64,50\""] {
        assert!(csv.lines().any(|l| l.starts_with(mode)), "{mode} missing from\n{csv}");
    }
    let rebalance = csv.lines().find(|l| l.starts_with("\"rebalance-64,64\"")).unwrap();
    let reorders = rebalance.split(',').nth(13).unwrap();
    assert_eq!(reorders, "0", "rebalancing reordered a flow: {rebalance}");
}

#[test]
fn bad_input_exits_2_with_a_reason() {
    for (args, says) in [
        (vec!["run", "--engine", "B-256", "--burst", "10"], "basic mode is B-M,R"),
        (vec!["run", "--engine", "A-256,100,100", "--burst", "10"], "threshold"),
        (vec!["run", "--engine", "B-256,100", "--burst", "10", "--queues", "0"], "queues"),
        (vec!["run", "--engine", "B-256,100", "--skewed", "10", "--load=0"], "--load"),
    ] {
        let out = sim(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// The cost `--cost-from-handle N` measured, from what it says on stderr.
fn calibrated(out: &Output) -> u64 {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let at = err.find("using --cost-ns ").unwrap_or_else(|| panic!("no calibration reported: {err}"));
    err[at + 16..].split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn the_cost_can_be_calibrated_by_timing_weir_handle_here() {
    let run = |x: &str| sim(&["run", "--engine", "B-256,100", "--burst", "100000", "--cost-from-handle", x, "--json"]);
    let (light, heavy) = (run("0"), run("1000"));
    let (light_ns, heavy_ns) = (calibrated(&light), calibrated(&heavy));
    // A thousand runs of the default filter take far more than weir's delivery alone.
    assert!(heavy_ns > light_ns + 1000 && heavy_ns > 3000, "-x 0: {light_ns} ns, -x 1000: {heavy_ns} ns");
    // And the model uses it: each run drops exactly what the same model drops
    // at that cost given by hand. Whether -x 0 keeps up depends on how fast
    // this build and machine are (a debug build under load measures 140-180
    // ns, past the ~90 ns this burst allows), so that is not asserted; a
    // thousand filter runs cannot keep up anywhere.
    let drops = |o: &Output| serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["capture_drops"].as_u64().unwrap();
    for (out, ns) in [(&light, light_ns), (&heavy, heavy_ns)] {
        let by_hand = sim(&["run", "--engine", "B-256,100", "--burst", "100000", "--cost-ns", &ns.to_string(), "--json"]);
        assert!(by_hand.status.success(), "{}", String::from_utf8_lossy(&by_hand.stderr));
        assert_eq!(drops(out), drops(&by_hand), "--cost-from-handle measured {ns} ns; --cost-ns {ns} must model the same run");
    }
    assert!(drops(&heavy) > 50_000, "-x 1000 at {heavy_ns} ns per packet");
    assert!(drops(&light) < drops(&heavy), "-x 0 at {light_ns} ns drops less than -x 1000 at {heavy_ns} ns");
    let both = sim(&["run", "--engine", "B-256,100", "--burst", "10", "--cost-ns", "5", "--cost-from-handle", "3"]);
    assert_eq!(both.status.code(), Some(2), "--cost-ns and --cost-from-handle together are refused");
}
