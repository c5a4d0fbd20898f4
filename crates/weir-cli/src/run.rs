//! What every capturing command shares: the source options, building the engine,
//! Ctrl-C, the once-a-second status and the progress bar.

use crate::exit::bad_input;
use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir::engine::{Running, StopHandle};
use weir::pool::PoolConfig;
use weir::source::Pacing;
use weir::stats::{QueueStats, Snapshot};
use weir::{Engine, Handler};

/// Options of every command that captures from a source.
#[derive(Args, Clone, Debug)]
pub struct SourceArgs {
    /// Where packets come from: `trace.pcap`, `trace.pcap@0-3` (split into 4 queues by a
    /// symmetric RSS hash, both directions of a flow on one queue), `trace.pcap@2` (only
    /// queue 2 of 3), `file:PATH[@RANGE]`, or `-` for a trace on standard input.
    #[arg(value_name = "SOURCE")]
    pub source: String,

    /// Keep only packets matching this libpcap filter expression (as in tcpdump), e.g.
    /// 'tcp port 443' or 'udp and not port 53'. Rejected packets are counted as filtered.
    #[arg(short = 'f', long = "filter", value_name = "EXPR")]
    pub filter: Option<String>,

    /// Stop after N packets have passed the filter (all queues together).
    #[arg(short = 'c', long = "count", value_name = "N")]
    pub count: Option<u64>,

    /// Stop after this many seconds.
    #[arg(short = 'd', long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,

    /// Replay at N packets per second instead of top speed. A paced source drops what
    /// finds no free cell (a capture drop), like a NIC; at top speed it waits instead.
    #[arg(long, value_name = "N", group = "pace")]
    pub pps: Option<f64>,

    /// Replay at N Mbit/s of wire bytes.
    #[arg(long, value_name = "N", group = "pace")]
    pub mbps: Option<f64>,

    /// Replay at X times the recorded timing (2 = twice as fast), as tcpreplay does.
    #[arg(long, value_name = "X", group = "pace")]
    pub speed: Option<f64>,

    /// Pool per queue as M,R: R chunks of M cells (default 256,128 = WireCAP-B-(256,128),
    /// which absorbs a burst of 32,768 packets per queue).
    #[arg(long, value_name = "M,R")]
    pub pool: Option<String>,
}

impl SourceArgs {
    pub fn pacing(&self) -> anyhow::Result<Pacing> {
        let p = match (self.pps, self.mbps, self.speed) {
            (Some(v), _, _) => Pacing::Pps(v),
            (_, Some(v), _) => Pacing::Mbps(v),
            (_, _, Some(v)) => Pacing::Speed(v),
            _ => Pacing::TopSpeed,
        };
        p.checked().map_err(|e| bad_input(anyhow::anyhow!(e)))
    }

    pub fn pool_config(&self) -> anyhow::Result<PoolConfig> {
        let Some(s) = &self.pool else { return Ok(PoolConfig::default()) };
        let (m, r) = s
            .split_once(',')
            .and_then(|(m, r)| Some((m.trim().parse().ok()?, r.trim().parse().ok()?)))
            .ok_or_else(|| bad_input(anyhow::anyhow!("--pool {s:?}: expected M,R, e.g. 256,128")))?;
        PoolConfig::new(m, r).map_err(|e| bad_input(anyhow::anyhow!("--pool {s}: {e}")))
    }

    /// Build the engine: parse the source, open it, compile the filter.
    pub fn engine(&self) -> anyhow::Result<Engine> {
        let mut b = Engine::builder()
            .source(&self.source)
            .map_err(|e| bad_input(anyhow::anyhow!("source {:?}: {e}", self.source)))?
            .pool(self.pool_config()?)
            .pacing(self.pacing()?);
        if let Some(f) = &self.filter {
            b = b.filter(f.clone());
        }
        if let Some(n) = self.count {
            b = b.packet_limit(n);
        }
        if let Some(d) = self.duration {
            if !(d.is_finite() && d > 0.0) {
                return Err(bad_input(anyhow::anyhow!("--duration must be a positive number of seconds, not {d}")));
            }
            b = b.time_limit(Duration::from_secs_f64(d));
        }
        b.build().map_err(|e| if e.is_bad_input() { bad_input(e) } else { anyhow::Error::new(e) })
    }
}

/// First Ctrl-C (or SIGTERM) stops the engine cleanly; a second one exits at once.
pub fn stop_on_signal(stop: StopHandle) -> anyhow::Result<()> {
    let hits = Arc::new(AtomicU32::new(0));
    ctrlc::set_handler(move || {
        // Relaxed: a counter only this handler touches.
        if hits.fetch_add(1, Ordering::Relaxed) == 0 {
            eprintln!("\nweir: stopping (press Ctrl-C again to quit at once)");
            stop.stop();
        } else {
            std::process::exit(130);
        }
    })
    .context("cannot install the Ctrl-C handler")
}

/// Once a second, a status line per queue and for the total; with a progress bar
/// for finite inputs when stderr is a terminal.
pub struct Monitor {
    bar: Option<ProgressBar>,
    last: Snapshot,
    last_at: Instant,
    quiet: bool,
}

const INTERVAL: Duration = Duration::from_secs(1);

impl Monitor {
    pub fn new<H: Handler>(running: &Running<H>, quiet: bool) -> Monitor {
        let tty = std::io::stderr().is_terminal();
        let bar = match running.progress() {
            Some((_, total)) if total > 0 && tty && !quiet => {
                let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(4));
                b.set_style(
                    ProgressStyle::with_template("{bar:40.cyan/blue} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                Some(b)
            }
            _ => None,
        };
        Monitor { bar, last: running.stats(), last_at: Instant::now(), quiet }
    }

    /// Run until the engine finishes, printing status each second and calling
    /// `tick` four times a second (to stop on an application error, say).
    pub fn watch<H: Handler>(&mut self, running: &Running<H>, mut tick: impl FnMut()) {
        while !running.wait_for(Duration::from_millis(250)) {
            tick();
            if let (Some(bar), Some((done, _))) = (&self.bar, running.progress()) {
                bar.set_position(done);
            }
            if self.last_at.elapsed() >= INTERVAL {
                let now = running.stats();
                let dt = self.last_at.elapsed().as_secs_f64();
                if !self.quiet {
                    let line = status_line(running.elapsed(), &self.last, &now, dt);
                    match &self.bar {
                        Some(bar) => bar.println(line),
                        None => eprintln!("{line}"),
                    }
                }
                self.last = now;
                self.last_at = Instant::now();
            }
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

fn rate(n: f64) -> String {
    match n {
        n if n >= 1e9 => format!("{:.2}G", n / 1e9),
        n if n >= 1e6 => format!("{:.2}M", n / 1e6),
        n if n >= 1e3 => format!("{:.1}k", n / 1e3),
        n => format!("{n:.0}"),
    }
}

fn queue_status(name: &str, a: &QueueStats, b: &QueueStats, dt: f64) -> String {
    let pps = (b.delivered - a.delivered) as f64 / dt;
    let bps = (b.delivered_bytes - a.delivered_bytes) as f64 * 8.0 / dt;
    format!(
        "{name}: {}pps {}bit/s drops {}+{}",
        rate(pps),
        rate(bps),
        b.capture_drops,
        b.delivery_drops
    )
}

fn status_line(elapsed: Duration, a: &Snapshot, b: &Snapshot, dt: f64) -> String {
    let mut parts: Vec<String> = Vec::new();
    if b.queues.len() > 1 {
        for (qa, qb) in a.queues.iter().zip(&b.queues) {
            parts.push(queue_status(&format!("q{}", qb.queue), qa, qb, dt));
        }
    }
    parts.push(queue_status("total", &a.total(), &b.total(), dt));
    format!("[{:>6.1}s] {}", elapsed.as_secs_f64(), parts.join(" | "))
}

/// Human rate formatting for summaries.
pub fn human_rate(n: f64) -> String {
    rate(n)
}
