//! Every numeric option of every subcommand, driven with extreme and malformed
//! values: weir must answer each with a clean run (exit 0) or a refusal
//! (exit 2 with a message), never a panic (101), a signal or a hang.
//!
//! The options are read from each subcommand's own `--help`, so an option
//! added later is driven too; the test fails until it is classified below as
//! numeric or not.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

/// Values no numeric option may accept: not numbers, or not finite, or negative.
const NEVER: &[&str] = &["-1", "NaN", "nan", "inf", "-inf", "abc", "", "0x10", "1e309"];
/// Values at the edges: each may be accepted (a run must then end cleanly) or refused.
/// ("1,5" is a list where an option takes several values.)
const EDGES: &[&str] = &["1,5", "0", "1e-300", "1e300", "4294967295", "4294967296", "18446744073709551615", "18446744073709551616"];

/// Longest any one run may take: a valid extreme value must still end.
const HANG: Duration = Duration::from_secs(60);

/// Options that take a value which is not a number (paths, names, modes,
/// expressions); they are covered by the tests of what they name.
const TEXT: &[&str] = &[
    "--filter",
    "--filter-engine",
    "--trace-access",
    "--pool",
    "--cpus",
    "--balance",
    "--netns",
    "--fanout",
    "--zero-copy",
    "--xdp-spread",
    "--timestamps",
    "--user",
    "--write",
    "--format",
    "--interface",
    "--output",
    "--from",
    "--rules",
    "--automaton",
    "--work",
    "--source",
    "--lib",
    "--engine",
    "--engines",
    "--trace",
    "--mode",
    "--cutoff-class",
    "--class",
    "--backend",
    "--metrics",
    "--kafka",
    "--topic",
    "--kafka-format",
    "--kafka-property",
    "--kafka-config",
    "--kafka-types",
];

struct Case {
    /// The subcommand words.
    cmd: &'static [&'static str],
    /// Arguments that make a short run; an option driven replaces its own here.
    base: Vec<String>,
    /// Options of this subcommand that are numeric.
    numeric: Vec<&'static str>,
    /// Options that are text here though numeric elsewhere (`weir run --queues` is a range).
    text: &'static [&'static str],
}

const SOURCE_NUMERIC: &[&str] = &[
    "--count",
    "--duration",
    "--pps",
    "--mbps",
    "--speed",
    "--locality",
    "--locality-timeout-ms",
    "--snaplen",
    "--block-kib",
    "--blocks",
    "--block-timeout",
    "--frame-size",
    "--ring-size",
    "--xdp-ring",
];

/// The stream layer's numeric options (`weir streams`, `weir inspect --streams`).
const STREAM_NUMERIC: &[&str] = &["--cutoff", "--hold-limit", "--piece", "--flush-timeout", "--max-streams", "--prealloc", "--memory"];

/// The Kafka output's numeric options (driven without a broker: a value is
/// refused, or taken and unused).
const KAFKA_NUMERIC: &[&str] = &["--kafka-buffer", "--kafka-wait", "--kafka-flush-timeout"];

/// The engine's numeric options, which every subcommand that captures has, and `extra`.
fn with_source(extra: &[&'static str]) -> Vec<&'static str> {
    SOURCE_NUMERIC.iter().chain(extra).copied().collect()
}

fn cases(dir: &Path, trace: &str, lib: &Path) -> Vec<Case> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let out = |name: &str| dir.join(name).display().to_string();
    let engine = |extra: &[&str]| {
        let mut v = s(&[trace, "--duration", "5"]);
        v.extend(s(extra));
        v
    };
    vec![
        Case { cmd: &["count"], base: engine(&["-q"]), numeric: with_source(&[]), text: &[] },
        Case {
            cmd: &["record"],
            base: engine(&["-w", &out("r.pcap")]),
            numeric: with_source(&["--file-size", "--rotate-seconds", "--file-packets", "--max-files", "--budget", "--max-age"]),
            text: &[],
        },
        Case {
            cmd: &["replay"],
            base: engine(&["-o", "weirnosuchif0"]),
            numeric: with_source(&["--loop", "--vary-ports"]),
            text: &["--xdp"],
        },
        Case {
            cmd: &["forward"],
            base: s(&["weirnosuchif0", "weirnosuchif1", "-q", "--duration", "5"]),
            numeric: vec!["--count", "--duration", "--frame-size", "--frames"],
            text: &[],
        },
        Case {
            cmd: &["synth"],
            base: s(&["-o", &out("s.pcap"), "--packets", "300", "--flows", "20"]),
            numeric: vec!["--packets", "--flows", "--seed", "--mbps", "--snaplen"],
            text: &[],
        },
        Case { cmd: &["handle"], base: engine(&["-q"]), numeric: with_source(&["--times", "--wait-us"]), text: &[] },
        Case {
            cmd: &["inspect"],
            base: engine(&["-q", "--group-rules", "4", "-o", "/dev/null"]),
            numeric: with_source(
                &[&["--group-rules", "--max-flows", "--idle-timeout", "--kernel-flows", "--kernel-install-after"][..], KAFKA_NUMERIC]
                    .concat(),
            ),
            // Refused without --streams; driven in the case below.
            text: &["--cutoff", "--hold-limit", "--piece", "--flush-timeout", "--max-streams", "--prealloc", "--memory", "--kernel-cutoff"],
        },
        Case {
            cmd: &["inspect"],
            base: engine(&["-q", "--group-rules", "4", "-o", "/dev/null", "--streams"]),
            numeric: with_source(
                &[&["--group-rules", "--idle-timeout", "--kernel-flows", "--kernel-install-after"][..], STREAM_NUMERIC, KAFKA_NUMERIC]
                    .concat(),
            ),
            // Refused with --streams; driven in the case above.
            text: &["--max-flows", "--kernel-cutoff"],
        },
        Case { cmd: &["queues"], base: engine(&["-q", "-o", &out("q")]), numeric: with_source(&["--bin-ms"]), text: &[] },
        Case {
            cmd: &["run"],
            base: s(&["-q", "--lib", &lib.display().to_string(), "--", "true"]),
            numeric: vec!["--locality", "--locality-timeout-ms"],
            text: &["--queues"],
        },
        Case {
            cmd: &["sim", "run"],
            base: s(&["--engine", "B-256,100", "--burst", "2000"]),
            numeric: vec!["--queues", "--cost-ns", "--cost-from-handle", "--burst", "--skewed", "--load", "--seed"],
            text: &[],
        },
        Case {
            cmd: &["sim", "burst"],
            base: s(&["-o", &out("b"), "--bursts", "1000", "--engines", "B-256,100"]),
            numeric: vec!["--bursts", "--light-ns", "--heavy-ns"],
            text: &[],
        },
        Case {
            cmd: &["sim", "imbalance"],
            base: s(&["-o", &out("i"), "--packets", "20000", "--flows", "200", "--queues", "2"]),
            numeric: vec!["--queues", "--cost-ns", "--cost-from-handle", "--packets", "--flows", "--zipf", "--load", "--seed"],
            text: &[],
        },
    ]
}

/// The long options that take a value, as `--help` lists them.
fn value_options(cmd: &[&str]) -> BTreeSet<String> {
    let out = weir().args(cmd).arg("--help").output().unwrap();
    assert!(out.status.success(), "weir {cmd:?} --help");
    let mut set = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let t = line.trim_start();
        let t = if t.starts_with('-') && !t.starts_with("--") { t.get(4..).unwrap_or("") } else { t };
        let Some(rest) = t.strip_prefix("--") else { continue };
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
        if rest[name.len()..].starts_with(" <") || rest[name.len()..].starts_with("=<") {
            set.insert(format!("--{name}"));
        }
    }
    set
}

/// The base arguments with `opt` set to `value` (replacing its own value there).
fn with(base: &[String], opt: &str, value: &str) -> Vec<String> {
    let mut args = base.to_vec();
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    match args[..end].iter().position(|a| a == opt) {
        Some(i) => args[i + 1] = value.to_string(),
        None => args.splice(end..end, [opt.to_string(), value.to_string()]).for_each(drop),
    }
    args
}

/// Exit code (None for a signal), stderr, and whether it had to be killed.
fn run(cmd: &[&str], args: &[String]) -> (Option<i32>, String, bool) {
    let err = tempfile::NamedTempFile::new().unwrap();
    let mut child = weir().args(cmd).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(err.reopen().unwrap()).spawn().unwrap();
    let until = Instant::now() + HANG;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let text = std::fs::read_to_string(err.path()).unwrap_or_default();
    match status {
        Some(s) => (s.code(), text, false),
        None => (None, text, true),
    }
}

#[test]
fn every_numeric_option_refuses_or_survives_extreme_values() {
    extreme_values(|cmd| cmd != ["replay"] && cmd != ["forward"]);
}

/// `weir replay` and `weir forward` open a packet socket before they look for the
/// interface: without CAP_NET_RAW every value ends in exit 1 for want of it, so
/// this part needs root.
#[test]
#[ignore = "needs root: weir replay and forward open a packet socket (CAP_NET_RAW) before they find no interface"]
fn every_numeric_replay_option_refuses_or_survives_extreme_values() {
    testbed::require_root();
    extreme_values(|cmd| cmd == ["replay"] || cmd == ["forward"]);
}

/// Every numeric option of the subcommands `which` picks, with every value of
/// NEVER and EDGES.
fn extreme_values(which: impl Fn(&[&str]) -> bool) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pcap");
    let made = weir().args(["synth", "-o"]).arg(&trace).args(["--packets", "400", "--flows", "30"]).output().unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    // `weir run` needs a directory holding a libpcap.so.0.8; the program it runs
    // (`true`) never loads it, so the system's serves.
    let lib = dir.path().join("lib");
    std::fs::create_dir(&lib).unwrap();
    let system =
        ["/usr/lib/x86_64-linux-gnu/libpcap.so.0.8", "/usr/lib/libpcap.so.0.8"].into_iter().map(PathBuf::from).find(|p| p.exists());
    std::os::unix::fs::symlink(system.unwrap_or_else(|| trace.clone()), lib.join("libpcap.so.0.8")).unwrap();

    let cases: Vec<Case> = cases(dir.path(), trace.to_str().unwrap(), &lib).into_iter().filter(|c| which(c.cmd)).collect();
    assert!(!cases.is_empty(), "no subcommand picked");
    let mut jobs = Vec::new();
    let mut unclassified = Vec::new();
    for (ci, c) in cases.iter().enumerate() {
        let opts = value_options(c.cmd);
        for o in &opts {
            if c.numeric.contains(&o.as_str()) {
                for v in NEVER.iter().chain(EDGES) {
                    jobs.push((ci, o.clone(), v.to_string()));
                }
            } else if !TEXT.contains(&o.as_str()) && !c.text.contains(&o.as_str()) {
                unclassified.push(format!("weir {} {o}", c.cmd.join(" ")));
            }
        }
        for o in &c.numeric {
            assert!(opts.contains(*o), "weir {} has no option {o} any more: update this test", c.cmd.join(" "));
        }
    }
    assert!(unclassified.is_empty(), "options to classify as numeric or text in this test: {unclassified:?}");

    let failures = Mutex::new(Vec::new());
    let next = Mutex::new(jobs.into_iter());
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| loop {
                let Some((ci, opt, value)) = next.lock().unwrap().next() else { break };
                let c = &cases[ci];
                let args = with(&c.base, &opt, &value);
                let (code, stderr, hung) = run(c.cmd, &args);
                let what = format!("weir {} {}", c.cmd.join(" "), args.join(" "));
                let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
                let verdict = if hung {
                    Some("did not end within a minute".to_string())
                } else {
                    match code {
                        None => Some("was killed by a signal".to_string()),
                        Some(101) => Some(format!("panicked: {last}")),
                        Some(2) if stderr.trim().is_empty() => Some("exited 2 without a message".to_string()),
                        Some(2) => None,
                        Some(0) if NEVER.contains(&value.as_str()) => Some("accepted a value that is not a valid number".to_string()),
                        Some(0) => None,
                        Some(c) => Some(format!("exited {c}: {last}")),
                    }
                };
                if let Some(v) = verdict {
                    failures.lock().unwrap().push(format!("{what}: {v}"));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The values the issue named, each refused with exit 2 by every command that
/// takes them, and the message names the option.
#[test]
fn the_reported_values_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pcap");
    assert!(weir().args(["synth", "-o"]).arg(&trace).args(["--packets", "50", "--flows", "5"]).status().unwrap().success());
    let t = trace.to_str().unwrap();
    let out = dir.path().join("o.pcap");
    let o = out.to_str().unwrap();
    for cmd in [&["count", t][..], &["record", t, "-w", o], &["inspect", t, "--group-rules", "4"], &["handle", t], &["queues", t, "-o", o]]
    {
        for (opt, v) in [("-d", "18446744073709551615"), ("-d", "1e19"), ("--speed", "1e-300"), ("--mbps", "1e-300"), ("--pps", "1e-300")] {
            let r = weir().args(cmd).args([opt, v]).stdin(Stdio::null()).output().unwrap();
            let err = String::from_utf8_lossy(&r.stderr);
            assert_eq!(r.status.code(), Some(2), "weir {} {opt} {v}: {err}", cmd.join(" "));
            let long = match opt {
                "-d" => "--duration",
                o => o,
            };
            assert!(err.contains(long), "weir {} {opt} {v} should name {long}: {err}", cmd.join(" "));
        }
    }
}
