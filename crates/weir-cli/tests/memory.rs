//! The memory budget as a user meets it: a configuration that would need more
//! memory than this machine (or the cgroup weir runs in) has is refused with
//! exit 2 and a message naming the setting, the total and what is available,
//! before anything is allocated: the process's peak RSS stays small. Before the
//! budget, these aborted (SIGABRT) or, for the kernel's rings, took the memory
//! from everything else on the machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use testbed::{MemoryCgroup, TestBed};

fn weir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weir"))
}

fn mem_available() -> u64 {
    let t = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = t.lines().find(|l| l.starts_with("MemAvailable:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn trace(dir: &Path) -> PathBuf {
    let t = dir.join("t.pcap");
    let out = Command::new(weir()).args(["synth", "-o"]).arg(&t).args(["--packets", "200", "--flows", "10"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    t
}

/// Run under GNU time: the output, and the peak RSS in KiB.
fn run_measured(args: &[&str]) -> (Output, u64) {
    let rss = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("/usr/bin/time")
        .arg("-o")
        .arg(rss.path())
        .args(["-f", "%M"])
        .arg(weir())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("GNU time (/usr/bin/time) runs weir");
    let kib = std::fs::read_to_string(rss.path()).unwrap().lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or(u64::MAX);
    (out, kib)
}

fn refused_small(args: &[&str], names: &[&str]) {
    let (out, kib) = run_measured(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "weir {}: {err}", args.join(" "));
    for n in ["needs", "available"].iter().chain(names) {
        assert!(err.contains(n), "weir {}: the message should say {n:?}: {err}", args.join(" "));
    }
    assert!(kib < 64 * 1024, "weir {}: peak RSS {kib} KiB: memory was allocated before the refusal", args.join(" "));
}

#[test]
fn a_pool_beyond_the_available_memory_is_refused_before_it_is_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    // Chunks of 128 MiB (65,536 cells of 2 KiB), one more than what is available holds.
    let r = (mem_available() / (128 << 20) + 2).min(1 << 20);
    let pool = format!("65536,{r}");
    refused_small(&["count", "--pool", &pool, t.to_str().unwrap()], &[&format!("pool {pool}")]);
}

#[test]
fn a_locality_batch_that_raises_the_pool_past_memory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let t = format!("{}@0-3", trace(dir.path()).display());
    refused_small(&["count", "--locality", "4194304", &t], &["locality batches of 4194304", "trace reading"]);
}

#[test]
fn the_simulator_checks_its_real_pools_too() {
    refused_small(&["sim", "run", "--engine", "B-65536,1048576", "--burst", "10"], &["pool 65536,1048576"]);
}

/// The kernel's AF_PACKET rings: inside a cgroup limited to 256 MiB, rings of
/// 512 MiB are refused, naming the cgroup's limit. Without the budget the kernel
/// would allocate them (outside the cgroup's accounting) and the run would go on.
#[test]
#[ignore = "needs root: a veth test bed and a memory cgroup"]
fn afpacket_rings_must_fit_the_cgroup_limit() {
    let tb = TestBed::new(1);
    let group = MemoryCgroup::new(256 << 20);
    let out = group
        .command(weir().to_str().unwrap())
        .args(["count", "-q", "-d", "1", "--netns", &tb.rx_ns, "--blocks", "512", "--block-kib", "1024"])
        .arg(format!("afpacket:{}", tb.rx_if))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for n in ["afpacket rings: 512 blocks of 1 MiB", "cgroup"] {
        assert!(err.contains(n), "the message should say {n:?}: {err}");
    }
    // The same rings within the limit's reach run.
    let ok = group
        .command(weir().to_str().unwrap())
        .args(["count", "-q", "-d", "0.3", "--netns", &tb.rx_ns, "--blocks", "8", "--block-kib", "1024", "--pool", "256,16"])
        .arg(format!("afpacket:{}", tb.rx_if))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
}

/// 5,000 port groups and 5,000 `any` rules: merged, every group's automaton
/// holds a copy of the `any` rules. The estimate is made from the groups,
/// before a single copy (the 50,000 of each in the issue took 3.58 GB before
/// being OOM-killed), refused with --split-any named as the way out; split,
/// the same rules run.
#[test]
fn any_rules_copied_into_every_group_are_estimated_before_they_are_copied() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let rules = dir.path().join("many.rules");
    let mut text = String::new();
    for i in 0..5_000u32 {
        text.push_str(&format!("{} {} \"port-{i:06}\"\n", i + 1, i + 1));
        text.push_str(&format!("{} any \"any-{i:06}x\"\n", i + 100_001));
    }
    std::fs::write(&rules, text).unwrap();
    let (r, t) = (rules.to_str().unwrap(), t.to_str().unwrap());
    refused_small(&["inspect", "-q", "--rules", r, t, "-o", "/dev/null"], &["automata of 10000 rules", "--split-any"]);
    let (out, _) = run_measured(&["inspect", "-q", "--split-any", "--max-flows", "1000", "--rules", r, t, "-o", "/dev/null"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
