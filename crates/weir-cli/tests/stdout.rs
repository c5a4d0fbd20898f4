//! Every command that writes data or a report to standard output, against a
//! reader that went away (`weir streams t.pcap --json | head -1`) and a full
//! device (`> /dev/full`): the first ends weir quietly with 141, the code a
//! shell gives a death by SIGPIPE, as `yes | head -1` ends; the second is an
//! error that says the device is full, exit 1. Neither panics.
//!
//! The pipe's read end is closed before weir starts, so its first write fails
//! however little it writes. `weir replay` and `weir forward` need network
//! interfaces (tests/replay.rs, tests/forward.rs); they write their reports
//! through the same `out!` as `count`.

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A trace of TCP and UDP flows, enough for streams, alerts and flow records.
fn trace(dir: &Path) -> String {
    let path = dir.join("t.pcap");
    let out = weir().args(["synth", "-o"]).arg(&path).args(["--packets", "3000", "--flows", "60"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    path.to_str().unwrap().to_string()
}

/// Every command's way of writing to standard output, `{}` for a scratch directory.
fn commands(t: &str) -> Vec<Vec<String>> {
    let cases: [&[&str]; 18] = [
        &["count", "--json", t],
        &["count", t],
        &["streams", "--json", t],
        &["inspect", "--group-rules", "4", t],
        &["inspect", "--group-rules", "4", "--json", "-o", "{}/records.jsonl", t],
        &["inspect", "--group-rules", "4", "--streams", t],
        &["inspect", "--print-rules"],
        &["record", t, "-w", "-"],
        &["flows", t, "-w", "-"],
        &["flows", t, "-w", "{}/f.ipfix", "--events", "-"],
        &["queues", t, "-o", "{}/q"],
        &["handle", "-x", "1", t],
        &["handle", "-x", "1", "--json", t],
        &["profile", "--json", "--", "count", t],
        &["profile", "--", "count", t],
        &["sim", "run", "--engine", "B-256,100", "--burst", "1000", "--json"],
        &["synth", "-o", "/dev/stdout", "--packets", "1000", "--flows", "10"],
        &["synth", "-o", "-", "--packets", "1000", "--flows", "10"],
    ];
    cases.iter().map(|c| c.iter().map(|s| (*s).to_string()).collect()).collect()
}

fn run_with(args: &[String], dir: &Path, stdout: Stdio) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.replace("{}", dir.to_str().unwrap())).collect();
    weir().args(&args).stdin(Stdio::null()).stdout(stdout).stderr(Stdio::piped()).output().unwrap()
}

#[test]
fn a_reader_that_went_away_ends_every_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let mut wrong = Vec::new();
    for args in commands(&t) {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = run_with(&args, dir.path(), writer.into());
        let err = text(&out.stderr);
        if out.status.code() != Some(141) || err.contains("panicked") || err.contains("Broken pipe") || err.contains("os error 32") {
            wrong.push(format!("weir {}: {:?}: {err}", args.join(" "), out.status.code()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_full_device_is_an_error_that_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let mut wrong = Vec::new();
    for args in commands(&t) {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let out = run_with(&args, dir.path(), full.into());
        let err = text(&out.stderr);
        if out.status.code() != Some(1) || !err.contains("No space left on device") || err.contains("panicked") {
            wrong.push(format!("weir {}: {:?}: {err}", args.join(" "), out.status.code()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
