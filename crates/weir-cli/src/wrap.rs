//! `weir run`: start an unmodified libpcap program on weir's libpcap, with
//! weir's options set through the environment, and report weir's own
//! per-queue counters when it exits. Profiled (`weir profile -- run`), it
//! also asks weir's libpcap for the program's profile, which the library
//! writes to a file this module gives it as the program exits.

use anyhow::{bail, Context};
use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  weir run -- tcpdump -n -i eth1 -w /tmp/eth1.pcap\n  \
weir run --locality 8000 -- softflowd -r trace.pcap -n 127.0.0.1:9995\n  \
weir run --source afxdp --queues 0-3 -- tcpdump -i eth1 -c 1000000 -w /dev/null\n  \
weir run --metrics 127.0.0.1:9102 -- tcpdump -n -i eth1 -w /tmp/eth1.pcap\n\n\
The program finds weir's libpcap.so.0.8 first on LD_LIBRARY_PATH. Its filters are compiled by the \
system libpcap and run by weir; interfaces and files are read by weir's engine.")]
pub struct WrapArgs {
    /// Deliver packets in batches of B sorted by port (locality buffering; 1 to 4194304); off by default.
    #[arg(long, value_name = "B", value_parser = clap::value_parser!(u32).range(1..=i64::from(weir::locality::MAX_BATCH)))]
    locality: Option<u32>,

    /// Longest a packet waits for its locality batch, in milliseconds (1 to 3,600,000).
    #[arg(long, value_name = "MS", requires = "locality", value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    locality_timeout_ms: Option<u64>,

    /// How live interfaces are captured: afpacket, afxdp, or xdp (weir's XDP program copying into one packed
    /// ring buffer, sized by the program's pcap_set_buffer_size, e.g. tcpdump -B; the host keeps its traffic).
    #[arg(long, value_name = "KIND", default_value = "afpacket", value_parser = ["afpacket", "afxdp", "xdp"])]
    source: String,

    /// RX queues of a live interface to open, e.g. `0-3`; all by default.
    #[arg(long, value_name = "RANGE")]
    queues: Option<String>,

    /// Pool per queue: R chunks of M cells, e.g. `256,128`.
    #[arg(long, value_name = "M,R")]
    pool: Option<String>,

    /// Directory holding weir's libpcap.so.0.8 (default: `weir-pcap` beside the
    /// directory of this binary, where `make pcap-lib` puts it, else `lib/weir`
    /// of the prefix it is installed under, where `make install` puts it).
    #[arg(long, value_name = "DIR")]
    lib: Option<PathBuf>,

    /// Do not print weir's counters when the program exits.
    #[arg(short, long)]
    quiet: bool,

    /// Serve weir's counters of the program's captures as Prometheus metrics at http://ADDR:PORT/metrics,
    /// as `weir count --metrics` does (the user guide's Metrics chapter), from inside the program: weir's libpcap serves
    /// them, told by WEIR_METRICS=ADDR:PORT, from its first capture until the program exits, each handle's
    /// samples labelled handle="N". The address is checked here first: a value that does not parse, a port
    /// in use or one that needs a privilege is an error before the program starts. E.g. `weir run --metrics
    /// 127.0.0.1:9102 -- tcpdump -i eth1 -w /tmp/eth1.pcap`. A program that daemonizes (forks after opening
    /// its capture) leaves the server behind: run it in the foreground (softflowd -d).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<String>,

    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    program: Vec<String>,
}

impl WrapArgs {
    /// The program's name, as given.
    pub fn program(&self) -> &str {
        &self.program[0]
    }
}

/// Where weir's libpcap is without --lib: `weir-pcap` beside the binary's
/// directory in a build tree (`make pcap-lib`), else `lib/weir` of the
/// prefix it was installed under (`make install`), out of the loader's path
/// so that it shadows the system's libpcap only for the programs run here.
fn default_lib() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let prefix = exe.parent()?.parent()?;
    let built = prefix.join("weir-pcap");
    Some(if built.join("libpcap.so.0.8").is_file() { built } else { prefix.join("lib").join("weir") })
}

pub fn run(a: WrapArgs) -> anyhow::Result<ExitCode> {
    start(a, None).map(|(code, _)| code)
}

/// Run the program profiled, one window in `every` timed: its exit code, and
/// the profile its libpcap wrote at exit (empty if it opened no capture
/// through weir's libpcap).
pub fn run_profiled(a: WrapArgs, every: u32) -> anyhow::Result<(ExitCode, String)> {
    let (code, profile) = start(a, Some(every))?;
    Ok((code, profile.unwrap_or_default()))
}

fn start(a: WrapArgs, profile_every: Option<u32>) -> anyhow::Result<(ExitCode, Option<String>)> {
    let lib = a.lib.clone().or_else(default_lib).context("cannot tell where weir's libpcap is; give --lib DIR")?;
    if !lib.join("libpcap.so.0.8").is_file() {
        bail!("no libpcap.so.0.8 in {}: build it with `make pcap-lib`, or give --lib DIR", lib.display());
    }
    let lib = lib.canonicalize().with_context(|| lib.display().to_string())?;
    if let Some(spec) = &a.metrics {
        // Bound and let go: the program binds it again as it opens its capture.
        crate::metrics::MetricsArgs { metrics: Some(spec.clone()) }.bind()?;
    }
    let stats = tempfile::NamedTempFile::new().context("a file for weir's counters")?;
    let mut cmd = Command::new(&a.program[0]);
    cmd.args(&a.program[1..]);
    let path = match std::env::var_os("LD_LIBRARY_PATH") {
        Some(old) if !old.is_empty() => {
            let mut p = lib.clone().into_os_string();
            p.push(":");
            p.push(old);
            p
        }
        _ => lib.clone().into_os_string(),
    };
    cmd.env("LD_LIBRARY_PATH", path).env("WEIR_SOURCE", &a.source).env("WEIR_STATS_FILE", stats.path());
    let profile = profile_every.map(|_| tempfile::NamedTempFile::new().context("a file for the program's profile")).transpose()?;
    if let (Some(f), Some(every)) = (&profile, profile_every) {
        cmd.env("WEIR_PROFILE_FILE", f.path()).env("WEIR_PROFILE_EVERY", every.to_string());
    }
    if let Some(b) = a.locality {
        cmd.env("WEIR_LOCALITY", b.to_string());
    }
    if let Some(spec) = &a.metrics {
        cmd.env("WEIR_METRICS", spec);
    }
    if let Some(t) = a.locality_timeout_ms {
        cmd.env("WEIR_LOCALITY_TIMEOUT_MS", t.to_string());
    }
    if let Some(q) = &a.queues {
        cmd.env("WEIR_QUEUES", q);
    }
    if let Some(p) = &a.pool {
        // Checked here as --pool is everywhere else; the library checks its memory.
        p.parse::<weir::PoolConfig>().map_err(|e| crate::exit::bad_input(anyhow::anyhow!("--pool {p:?}: {e}")))?;
        cmd.env("WEIR_POOL", p);
    }
    // weir run must outlive the program to print weir's counters. Ctrl-C
    // reaches the whole foreground group, so the program has it already and
    // weir run only waits. SIGTERM and SIGHUP usually come to weir run alone
    // (kill, a service manager): they are passed on, and the program stops as
    // it chooses (tcpdump prints its counts).
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP]).context("handling signals")?;
    let signal_handle = signals.handle();
    let mut child = cmd.spawn().with_context(|| format!("starting {}", a.program[0]))?;
    let pid = Pid::from_raw(i32::try_from(child.id()).context("child pid")?);
    let forwarder = std::thread::spawn(move || {
        for sig in signals.forever() {
            let pass = match sig {
                SIGTERM => Signal::SIGTERM,
                SIGHUP => Signal::SIGHUP,
                _ => continue,
            };
            // The program may have exited just now: nothing to pass it to then.
            let _ = kill(pid, pass);
        }
    });
    let status = child.wait().with_context(|| format!("waiting for {}", a.program[0]));
    // Stop forwarding before the pid can be reused.
    signal_handle.close();
    let _ = forwarder.join();
    let status = status?;
    if !a.quiet {
        report(stats.path());
    }
    let profile = match profile {
        Some(f) => Some(std::fs::read_to_string(f.path()).context("reading the program's profile")?),
        None => None,
    };
    let code = match status.code() {
        Some(c) => ExitCode::from(c.clamp(0, 255) as u8),
        // Killed by a signal: the shell's convention.
        None => ExitCode::from(128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0).clamp(0, 127) as u8),
    };
    Ok((code, profile))
}

/// Print the counters each handle wrote at close, one table row per queue.
fn report(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    if text.is_empty() {
        eprintln!("weir: the program opened no capture through weir");
        return;
    }
    eprintln!(
        "weir: {:>6} {:>12} {:>12} {:>10} {:>13} {:>14} {:>8}",
        "queue", "received", "delivered", "filtered", "capture_drops", "delivery_drops", "unread"
    );
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let queue = match &v["queue"] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        eprintln!(
            "weir: {:>6} {:>12} {:>12} {:>10} {:>13} {:>14} {:>8}",
            queue,
            n("received"),
            n("delivered"),
            n("filtered"),
            n("capture_drops"),
            n("delivery_drops"),
            n("unread")
        );
    }
}
