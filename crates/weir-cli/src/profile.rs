//! `weir profile`: where the packets' time goes, stage by stage (WinPcap's
//! profiling, done for weir's own path).
//!
//! It runs one of weir's engine commands (`count`, `handle`, `inspect`,
//! `streams`) with stage timing on ([`weir::profile`]), or a libpcap program
//! with `run`, lets it print what it prints, then adds a table: per stage,
//! cycles and nanoseconds per packet and the share of the total. The total is measured apart from the stages:
//! the process's CPU time (user and system, `getrusage`) over the packets
//! the source received. The stages are the sampled estimates of the engine's
//! threads, the exact CPU time of threads not broken down (a trace's
//! read-ahead thread), and the main thread's (start-up, status lines, the
//! report). "unaccounted" is the total less their sum: what no stage covers,
//! and the sampling's error. The kernel's part is shown beside them: the
//! process's system time (already inside the stages that made the calls),
//! its read and write system calls and context switches, and the NET_RX
//! softirqs and softirq time of the whole machine (live sources; for a
//! trace these are other traffic's).
//!
//! With `run`, the program runs in a child process: weir's libpcap in it
//! makes the profile (the engines' threads and the shim's stages on the
//! program's reading thread) and writes it as the program exits
//! (`crate::wrap`). The table is the same; the total is the child's CPU time
//! (`getrusage` of the children, once it has been waited for), the "main"
//! row is the program's thread outside its reads, and the system calls are
//! the child's own (its `/proc/self/io`, read by its libpcap at exit).

use crate::exit::{bad_input, out};
use anyhow::Context;
use clap::Args;
use serde_json::json;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use weir::profile::{Profiler, Stage, ThreadProfile, Ticks, DEFAULT_EVERY, NO_TSC, STAGES};

/// The profiler of this process's run, when `weir profile` runs the command:
/// [`crate::run::SourceArgs::engine_with`] hands it to the engine it builds.
static PROFILER: OnceLock<Arc<Profiler>> = OnceLock::new();

/// The profiler to give the engine, if this run is profiled.
pub fn profiler() -> Option<Arc<Profiler>> {
    PROFILER.get().cloned()
}

#[derive(Args, Debug)]
#[command(
    override_usage = "weir profile [--json] [--every N] -- COMMAND [ARGS...]\n       \
weir profile [--json] [--every N] -- run [RUN-OPTIONS] -- PROGRAM [ARGS...]\n       \
weir profile --compare A.json B.json ... -o OUT.png",
    after_help = "COMMAND is one of weir's engine commands: count, handle, inspect, streams, flows, with its own \
arguments, after `--`; or run, with its options and then, after a second `--`, a libpcap program \
(profiled by weir's libpcap inside it: the engine's stages, and the shim's on the program's thread: \
taking each packet, waiting, a file's filter, delivery, and the program's callback).\n\n\
Examples:\n  weir profile -- count trace.pcap@0-1\n  weir profile -- handle -x 1 trace.pcap@0-1\n  \
weir profile -- run -- tcpdump -n -r trace.pcap -w /dev/null\n  \
weir profile --json -- run --locality 4096 -- tcpdump -n -r trace.pcap -w /dev/null\n  \
weir profile --json -- inspect --json trace.pcap > p.json\n  weir profile -- count afpacket:eth1@0-1 -d 10\n  \
weir profile --json -- count t.pcap | tail -1 > a.json; weir profile --json -- count --locality 4096 t.pcap | tail -1 > b.json\n  \
weir profile --compare a.json b.json -o cmp.png\n\n\
Each stage is timed with the TSC (its rate measured against CLOCK_MONOTONIC) on one window in N: a \
capture thread's window is 256 records, a worker's one chunk (or one locality batch). Cycles \
the thread spent asleep or preempted are taken out with its CPU clock, so the stages are CPU \
time. The total is the process's user+system CPU time over the packets received (with run: \
the program's); `unaccounted` = total - sum of the stages. The kernel's lines are already inside the stages \
that made the calls, except the softirq lines, which are the whole machine's."
)]
pub struct ProfileArgs {
    /// Print the profile as one JSON object (on its own line, after the command's output).
    #[arg(long)]
    pub json: bool,

    /// Time one window in N (1 = every window): a smaller N samples more and costs more.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_EVERY, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub every: u32,

    /// The command to profile and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,

    /// Instead of running a command: draw the profiles saved with --json (one
    /// JSON object a file, or a file whose last line is one) as stacked bars of
    /// ns per packet, one bar a file, into the PNG given with -o (matplotlib).
    #[arg(long, value_name = "JSON", num_args = 1.., conflicts_with_all = ["json", "command"], requires = "output")]
    pub compare: Vec<std::path::PathBuf>,

    /// The PNG --compare draws.
    #[arg(short, long, value_name = "PNG", requires = "compare")]
    pub output: Option<std::path::PathBuf>,
}

/// Draws saved profiles as stacked bars: argv is the PNG, then (label, JSON) pairs.
const COMPARE_PY: &str = r#"
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out, pairs = sys.argv[1], sys.argv[2:]
runs = [(pairs[i], json.loads(pairs[i + 1])) for i in range(0, len(pairs), 2)]
stages = []
for _, p in runs:
    for s in p["stages"]:
        if s["stage"] not in stages:
            stages.append(s["stage"])
labels = {s["stage"]: s["label"] for _, p in runs for s in p["stages"]}
fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(runs) + 4), 6))
bottom = [0.0] * len(runs)
cmap = plt.get_cmap("tab20")
for k, st in enumerate(stages):
    h = [next((s["ns_per_packet"] for s in p["stages"] if s["stage"] == st), 0.0) for _, p in runs]
    ax.bar(range(len(runs)), h, bottom=bottom, color=cmap(k % 20), label=labels[st])
    bottom = [b + x for b, x in zip(bottom, h)]
totals = [p["total"]["ns_per_packet"] for _, p in runs]
ax.scatter(range(len(runs)), totals, marker="_", s=900, color="black", zorder=3, label="total (process CPU time)")
ax.set_xticks(range(len(runs)))
ax.set_xticklabels([name + chr(10) + p["command"][:40] for name, p in runs], fontsize=8)
ax.set_ylabel("ns per packet")
ax.set_title("weir profile: where the time goes, stage by stage")
ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
fig.tight_layout()
fig.savefig(out, dpi=110)
"#;

/// `--compare`: read each saved profile, then draw them with matplotlib.
fn compare(files: &[std::path::PathBuf], out: &std::path::Path) -> anyhow::Result<ExitCode> {
    let mut argv = vec![out.as_os_str().to_owned()];
    for f in files {
        let bytes = std::fs::read(f).map_err(|e| bad_input(anyhow::anyhow!("{}: {e}", f.display())))?;
        let text = String::from_utf8_lossy(&bytes);
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        let p: serde_json::Value = serde_json::from_str(last)
            .ok()
            .filter(|p: &serde_json::Value| p["stages"].is_array() && p["total"]["ns_per_packet"].is_number())
            .ok_or_else(|| {
                bad_input(anyhow::anyhow!("{}: not a profile saved with weir profile --json (its last line is not one)", f.display()))
            })?;
        let name = f.file_stem().map_or_else(|| f.display().to_string(), |s| s.to_string_lossy().into_owned());
        argv.push(name.into());
        argv.push(p.to_string().into());
    }
    let status = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(COMPARE_PY)
        .args(argv)
        .status()
        .context("--compare draws with matplotlib: cannot run /usr/bin/python3")?;
    if !status.success() {
        anyhow::bail!("--compare: /usr/bin/python3 with matplotlib could not draw {} ({status})", out.display());
    }
    eprintln!("weir profile: {} profiles drawn in {}", files.len(), out.display());
    Ok(ExitCode::SUCCESS)
}

/// What the process had used at one moment.
#[derive(Clone, Copy, Default)]
struct Usage {
    user_ns: u64,
    system_ns: u64,
    voluntary: u64,
    involuntary: u64,
    /// read and write system calls (`/proc/self/io` syscr + syscw).
    syscalls: Option<u64>,
    /// NET_RX softirqs raised, all CPUs (`/proc/softirqs`).
    net_rx: Option<u64>,
    /// Softirq time of all CPUs, in USER_HZ ticks (`/proc/stat`).
    softirq_ticks: Option<u64>,
}

/// Linux reports `/proc/stat` in USER_HZ, 100 per second on every architecture weir runs on.
const USER_HZ: u64 = 100;

impl Usage {
    /// This process's, now.
    fn now() -> Usage {
        Usage::of(nix::sys::resource::UsageWho::RUSAGE_SELF, proc_io())
    }

    /// The children's this process has waited for (the program `weir run`
    /// ran), now; their system calls are not readable from here (the
    /// program's libpcap reports them: counted from 0).
    fn children() -> Usage {
        Usage::of(nix::sys::resource::UsageWho::RUSAGE_CHILDREN, Some(0))
    }

    fn of(who: nix::sys::resource::UsageWho, syscalls: Option<u64>) -> Usage {
        let ns = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1_000;
        let mut u = Usage { syscalls, net_rx: net_rx(), softirq_ticks: softirq_ticks(), ..Usage::default() };
        if let Ok(r) = nix::sys::resource::getrusage(who) {
            u.user_ns = ns(r.user_time());
            u.system_ns = ns(r.system_time());
            u.voluntary = r.voluntary_context_switches() as u64;
            u.involuntary = r.involuntary_context_switches() as u64;
        }
        u
    }
}

fn proc_io() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/io").ok()?;
    let field = |name: &str| s.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok());
    Some(field("syscr:")? + field("syscw:")?)
}

fn net_rx() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/softirqs").ok()?;
    let line = s.lines().find(|l| l.trim_start().starts_with("NET_RX:"))?;
    Some(line.split_whitespace().skip(1).filter_map(|v| v.parse::<u64>().ok()).sum())
}

fn softirq_ticks() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    // cpu  user nice system idle iowait irq softirq ...
    s.lines().find(|l| l.starts_with("cpu "))?.split_whitespace().nth(7)?.parse().ok()
}

pub fn run(args: ProfileArgs) -> anyhow::Result<ExitCode> {
    if let Some(out) = &args.output {
        return compare(&args.compare, out);
    }
    let Some(name) = args.command.first() else {
        return Err(bad_input(anyhow::anyhow!(
            "weir profile needs the command to profile after `--`, e.g. `weir profile -- count trace.pcap` \
             (one of count, handle, inspect, streams, flows, run)"
        )));
    };
    const PROFILED: [&str; 6] = ["count", "handle", "inspect", "streams", "flows", "run"];
    if !PROFILED.contains(&name.as_str()) {
        return Err(bad_input(anyhow::anyhow!(
            "weir profile runs weir's engine commands: count, handle, inspect, streams or flows, or a libpcap program \
             with run, not {name:?} (e.g. `weir profile -- count trace.pcap`)"
        )));
    }
    let argv = std::iter::once("weir".to_string()).chain(args.command.iter().cloned());
    // The command's own parser: its errors and --help are its own.
    let cli = match <crate::Cli as clap::Parser>::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if let crate::Command::Run(a) = cli.command {
        return profile_run(&args, a);
    }
    let profiler = Arc::new(Profiler::new(args.every));
    PROFILER.set(Arc::clone(&profiler)).map_err(|_| anyhow::anyhow!("weir profile: a profiler was already set"))?;
    let before = Usage::now();
    let code = crate::dispatch(cli.command)?;
    let main_ns = weir::profile::thread_cpu_ns();
    let after = Usage::now();
    let packets = profiler.packets().context("the command ran no capture engine: nothing to profile")?;
    if packets == 0 {
        return Err(bad_input(anyhow::anyhow!("the source delivered no packets: there is nothing to profile per packet")));
    }
    let ticks = profiler.clock();
    let measured = Measured {
        ticks,
        every: profiler.every(),
        threads: profiler.threads().iter().map(|t| ThreadRow::of(t, ticks)).collect(),
        packets,
        main: Row { key: "main", label: "main thread (start-up, status, report)", ticks: main_ns as f64 * ticks.hz() / 1e9 },
        total_ns: after.user_ns + after.system_ns,
    };
    Profile::gather(measured, &args.command, &before, &after).show(args.json);
    Ok(code)
}

/// `weir profile -- run ... -- PROGRAM`: the program's libpcap (weir's)
/// profiles it and writes the profile as it exits; the total is the
/// program's CPU time, read when it has been waited for.
fn profile_run(args: &ProfileArgs, a: crate::wrap::WrapArgs) -> anyhow::Result<ExitCode> {
    let program = a.program().to_string();
    let before = Usage::children();
    let (code, saved) = crate::wrap::run_profiled(a, args.every)?;
    let mut after = Usage::children();
    let Some(line) = saved.lines().rev().find(|l| !l.trim().is_empty()) else {
        return Err(bad_input(anyhow::anyhow!(
            "{program} opened no capture through weir's libpcap, so there is nothing to profile: weir profile -- run \
             profiles a libpcap program (linked against libpcap.so.0.8) that reads packets"
        )));
    };
    let v: serde_json::Value = serde_json::from_str(line).context("the profile weir's libpcap wrote is not JSON")?;
    let ticks = match (v["clock"]["source"].as_str(), v["clock"]["hz"].as_u64()) {
        (Some("tsc"), Some(hz)) => Ticks::Tsc { hz },
        _ => Ticks::Instant { why: NO_TSC },
    };
    let threads: Option<Vec<ThreadRow>> = v["threads"].as_array().and_then(|ts| ts.iter().map(ThreadRow::parse).collect());
    let (Some(threads), Some(packets), Some(every), Some(outside_ns)) =
        (threads, v["packets"].as_u64(), v["every"].as_u64(), v["outside_ns"].as_u64())
    else {
        anyhow::bail!("the profile weir's libpcap wrote is not one weir profile reads (threads, packets, every, outside_ns): {line}");
    };
    if packets == 0 {
        return Err(bad_input(anyhow::anyhow!(
            "{program} read no packets through weir's libpcap (counted when a handle's packets end or it is closed): \
             there is nothing to profile per packet"
        )));
    }
    after.syscalls = v["syscalls"].as_u64();
    let measured = Measured {
        ticks,
        every: u32::try_from(every).unwrap_or(u32::MAX),
        threads,
        packets,
        main: Row { key: "main", label: "program thread outside reads (start, exit)", ticks: outside_ns as f64 * ticks.hz() / 1e9 },
        total_ns: after.user_ns + after.system_ns,
    };
    Profile::gather(measured, &args.command, &before, &after).show(args.json);
    Ok(code)
}

/// One row of the table: a stage's ticks over the whole run.
struct Row {
    key: &'static str,
    label: &'static str,
    ticks: f64,
}

struct Profile {
    command: String,
    packets: u64,
    ticks: Ticks,
    every: u32,
    rows: Vec<Row>,
    total_ticks: f64,
    threads: Vec<serde_json::Value>,
    before: Usage,
    after: Usage,
}

/// One thread of the run: what its timer counted, and its estimate by stage.
struct ThreadRow {
    name: String,
    counts: Vec<(String, u64)>,
    mark_ticks: f64,
    est: [f64; STAGES],
}

impl ThreadRow {
    fn of(t: &ThreadProfile, ticks: Ticks) -> ThreadRow {
        ThreadRow {
            name: t.name.clone(),
            counts: t.counts().iter().map(|&(k, v)| (k.to_string(), v)).collect(),
            mark_ticks: t.mark_ticks(),
            est: t.estimate(ticks),
        }
    }

    /// A thread as weir's libpcap wrote it (`crates/weir-pcap/src/profile.rs`).
    fn parse(v: &serde_json::Value) -> Option<ThreadRow> {
        let mut est = [0.0; STAGES];
        for (key, t) in v["stages"].as_object()? {
            let stage = Stage::from_key(key)?;
            est[Stage::ALL.iter().position(|s| *s == stage)?] = t.as_f64()?;
        }
        let counts = v.as_object()?.iter().filter_map(|(k, n)| Some((k.clone(), n.as_u64()?))).collect();
        Some(ThreadRow { name: v["thread"].as_str()?.to_string(), counts, mark_ticks: v["mark_ticks"].as_f64()?, est })
    }

    fn json(&self, hz: f64) -> serde_json::Value {
        let mut o = serde_json::Map::new();
        o.insert("thread".into(), json!(self.name));
        for (k, v) in &self.counts {
            o.insert(k.clone(), json!(v));
        }
        o.insert("mark_ticks".into(), json!(self.mark_ticks));
        let cpu_ns = self.counts.iter().find(|(k, _)| k == "cpu_ns").map_or(0, |c| c.1);
        o.insert("cpu_ms".into(), json!(cpu_ns as f64 / 1e6));
        o.insert("stages_ms".into(), json!(self.est.iter().sum::<f64>() / hz * 1e3));
        serde_json::Value::Object(o)
    }
}

/// What a run measured, in this process or in the program `weir run` ran.
struct Measured {
    ticks: Ticks,
    every: u32,
    threads: Vec<ThreadRow>,
    packets: u64,
    /// The time of the thread that ran no stage: `weir`'s main thread, or the
    /// program's outside its reads.
    main: Row,
    /// CPU time of the process, user and system.
    total_ns: u64,
}

impl Profile {
    fn gather(m: Measured, command: &[String], before: &Usage, after: &Usage) -> Profile {
        let hz = m.ticks.hz();
        let mut by_stage = [0.0f64; STAGES];
        for t in &m.threads {
            for (acc, e) in by_stage.iter_mut().zip(t.est) {
                *acc += e;
            }
        }
        let mut rows: Vec<Row> = Stage::ALL
            .iter()
            .zip(by_stage)
            .filter(|(_, t)| *t > 0.0)
            .map(|(s, t)| Row { key: s.key(), label: s.label(), ticks: t })
            .collect();
        rows.push(m.main);
        Profile {
            command: command.join(" "),
            packets: m.packets,
            ticks: m.ticks,
            every: m.every,
            rows,
            total_ticks: m.total_ns as f64 * hz / 1e9,
            threads: m.threads.iter().map(|t| t.json(hz)).collect(),
            before: *before,
            after: *after,
        }
    }

    fn hz(&self) -> f64 {
        self.ticks.hz()
    }

    /// Cycles per packet, where the spans are TSC cycles.
    fn cycles(&self, ticks: f64) -> Option<f64> {
        matches!(self.ticks, Ticks::Tsc { .. }).then(|| ticks / self.packets as f64)
    }

    fn ns(&self, ticks: f64) -> f64 {
        ticks / self.hz() * 1e9 / self.packets as f64
    }

    fn sum(&self) -> f64 {
        self.rows.iter().map(|r| r.ticks).sum()
    }

    fn clock_line(&self) -> String {
        match self.ticks {
            Ticks::Tsc { hz } => format!("TSC at {:.3} GHz (invariant; rate measured against CLOCK_MONOTONIC)", hz as f64 / 1e9),
            Ticks::Instant { why } => why.to_string(),
        }
    }

    /// Per-packet kernel figures: (key, label, value, unit).
    fn kernel(&self) -> Vec<(&'static str, &'static str, Option<f64>, &'static str)> {
        let (b, a, n) = (&self.before, &self.after, self.packets as f64);
        let per = |x: Option<u64>, y: Option<u64>| Some(y?.saturating_sub(x?) as f64 / n);
        vec![
            ("system_ns", "system time of the process", Some(a.system_ns as f64 / n), "ns/pkt"),
            ("syscalls", "read/write system calls (syscr+syscw)", per(b.syscalls, a.syscalls), "per pkt"),
            ("voluntary_switches", "voluntary context switches (sleeps)", Some(a.voluntary as f64 / n), "per pkt"),
            ("involuntary_switches", "involuntary context switches (preempted)", Some(a.involuntary as f64 / n), "per pkt"),
            ("net_rx_softirqs", "NET_RX softirqs, all CPUs", per(b.net_rx, a.net_rx), "per pkt"),
            (
                "softirq_ns",
                "softirq time, all CPUs (USER_HZ ticks)",
                per(b.softirq_ticks, a.softirq_ticks).map(|t| t * 1e9 / USER_HZ as f64),
                "ns/pkt",
            ),
        ]
    }

    fn show(&self, json: bool) {
        if json {
            out!("{}", self.json());
        } else {
            self.print();
        }
    }

    fn print(&self) {
        out!(
            "weir profile: {}: {} packets; {}; one window in {} timed (half of them marked)",
            self.command,
            self.packets,
            self.clock_line(),
            self.every
        );
        let cyc = |t: f64| self.cycles(t).map_or_else(|| "-".to_string(), |c| format!("{c:.1}"));
        let share = |t: f64| format!("{:.1}%", 100.0 * t / self.total_ticks);
        out!("{:<44} {:>11} {:>9} {:>7}", "stage", "cycles/pkt", "ns/pkt", "share");
        for r in &self.rows {
            out!("{:<44} {:>11} {:>9.1} {:>7}", r.label, cyc(r.ticks), self.ns(r.ticks), share(r.ticks));
        }
        let sum = self.sum();
        out!("{:<44} {:>11} {:>9.1} {:>7}", "sum of the stages", cyc(sum), self.ns(sum), share(sum));
        out!(
            "{:<44} {:>11} {:>9.1} {:>7}",
            "total (process CPU time, user+system)",
            cyc(self.total_ticks),
            self.ns(self.total_ticks),
            "100.0%"
        );
        let un = self.total_ticks - sum;
        out!("{:<44} {:>11} {:>9.1} {:>7}", "unaccounted (total - sum)", cyc(un), self.ns(un), share(un));
        out!("kernel (inside the figures above, but the softirq lines):");
        for (_, label, v, unit) in self.kernel() {
            match v {
                Some(v) => out!("  {label:<42} {v:>10.4} {unit}"),
                None => out!("  {label:<42} {:>10} (not readable here)", "-"),
            }
        }
    }

    fn json(&self) -> serde_json::Value {
        let stage = |key: &str, label: &str, t: f64| {
            json!({
                "stage": key,
                "label": label,
                "cycles_per_packet": self.cycles(t),
                "ns_per_packet": self.ns(t),
                "share": t / self.total_ticks,
            })
        };
        let sum = self.sum();
        let (clock, note) = match self.ticks {
            Ticks::Tsc { .. } => ("tsc", None),
            Ticks::Instant { why } => ("instant", Some(why)),
        };
        let kernel: serde_json::Map<String, serde_json::Value> =
            self.kernel().into_iter().map(|(k, _, v, _)| (k.to_string(), json!(v))).collect();
        json!({
            "command": self.command,
            "packets": self.packets,
            "clock": { "source": clock, "hz": self.hz(), "invariant": note.is_none(), "note": note},
            "every": self.every,
            "stages": self.rows.iter().map(|r| stage(r.key, r.label, r.ticks)).collect::<Vec<_>>(),
            "sum": stage("sum", "sum of the stages", sum),
            "total": stage("total", "process CPU time, user+system", self.total_ticks),
            "unaccounted": stage("unaccounted", "total - sum", self.total_ticks - sum),
            "kernel": kernel,
            "threads": self.threads,
        })
    }
}
