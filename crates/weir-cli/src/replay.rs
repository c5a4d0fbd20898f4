//! `weir replay`: send the packets of a trace out of a network interface, at top
//! speed or paced with tcpreplay's semantics, through an AF_PACKET TX ring.
//!
//! The trace is read by the engine as a one-queue file source at top speed,
//! filtered (`-f`) and counted there; the queue's handler paces the packets
//! (`--pps`, `--mbps`, `--speed`) and writes each frame into the [`TxRing`].
//! Pacing is done where the frames leave, one packet at a time, because the
//! engine hands packets over in chunks: paced at the source, a chunk's packets
//! would leave back to back. `--loop N` runs the engine N times over the file
//! with the same ring.
//!
//! Every packet read ends up in exactly one of: sent; skipped (the interface
//! cannot carry it: longer than MTU + 14, or shorter than an Ethernet header);
//! filtered out; not sent because sending failed; not sent because the replay
//! was stopped (Ctrl-C, -d) before its time; or still queued when sending
//! failed. The summary shows each.
//!
//! With `-Z USER` the process becomes USER as soon as the TX socket is open,
//! before the trace is opened, so the trace is read with USER's rights (as
//! tcpdump writes files after `-Z`).
//!
//! With `--xdp IFACE` the engine only reads the trace (filtered, no further
//! than -c needs) into memory; [`XdpGenerator`] holds it in the kernel and
//! sends it, pass after pass in trace order, in test runs that last about
//! [`XDP_CALL`], between which -d is looked at (-c is the program's to keep,
//! and Ctrl-C interrupts a run). Packets count as
//! sent when handed to the device: the kernel reports no drops behind that
//! (the summary says so), so what arrived is the receiver's to count. Paced
//! (`--pps`, `--mbps`), the program itself sends each frame at its time by
//! the kernel's clock and sends nothing in the runs between, so the frames
//! leave evenly spaced. What it cannot do (recorded timing, -Z,
//! --qdisc-bypass) is refused before anything is sent. A packet the interface
//! cannot carry is left out of what is loaded and counted as skipped, as
//! the AF_PACKET replay skips it; it is counted once, as a packet of the trace,
//! however many passes are sent.

use crate::exit::bad_input;
use crate::exit::out;
use crate::run::{human_rate, SourceArgs};
use anyhow::{anyhow, bail};
use clap::Args;
use serde_json::json;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir::engine::{Running, StopHandle, StopReason};
use weir::privileges::{self, Identity};
use weir::source::pacing::{self, Pacer};
use weir::source::{Pacing, SourceSpec, SpecError};
use weir::tx::xdp::{sendable, GenError, XdpGenOptions, XdpGenerator};
use weir::tx::{TxError, TxKicker, TxOptions, TxRing, TxStats};
use weir::{Handler, LinkType, Packet};

/// Frames per hand-over to the kernel at top speed: one system call per batch.
/// Paced replays hand over every frame at once, so none waits for the next.
const TOP_SPEED_BATCH: usize = 64;

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
weir replay t.pcap -o eth1                       as fast as the interface takes them\n  \
weir replay t.pcap -o eth1 --pps 10000           10,000 packets a second\n  \
weir replay t.pcap -o eth1 --mbps 100 --loop 5   100 Mbit/s, five times over\n  \
weir replay t.pcap -o eth1 --speed 2 --loop 0    twice the recorded speed, until Ctrl-C\n  \
weir replay t.pcap -o veth0 --netns lab -f 'udp port 53' --json\n  \
sudo weir replay t.pcap -o eth1 -Z nobody        the socket opened as root, the rest as nobody\n  \
weir replay t.pcap --xdp eth1 --loop 0 -d 10     from kernel context, no system call per packet\n  \
weir replay t.pcap --xdp eth1 --loop 0 --pps 500000 -d 5   paced from kernel context\n\n\
Frames go out exactly as recorded, Ethernet header included: rewrite addresses first \
(tcprewrite, or `weir synth`) if the trace's MACs and IPs do not fit the network. Only \
Ethernet traces can be sent (pcap link type EN10MB). Packets longer than the interface's \
MTU + 14 bytes (18 with a VLAN tag) or shorter than an Ethernet header cannot go out: they \
are skipped and counted. Packets captured with a snap length shorter than their length on \
the wire are sent as captured and counted as truncated.\n\n\
Pacing: with --pps, --mbps or --speed each packet is sent at its own time (tcpreplay's \
semantics), timed by the sending thread while the trace is read ahead; a packet that cannot \
go out on time is sent late, never dropped, and the summary says how late. Pacing counts the \
packets sent (after -f). Each pass of --loop starts its own schedule. At top speed weir waits \
for the interface and drops nothing.\n\n\
How it sends: frames are copied into a PACKET_TX_RING shared with the kernel and handed over \
in batches with one send() each; when the ring is full weir waits for the device, and \
reports these waits. -c and -d count across all passes.\n\n\
With --xdp IFACE the trace (at most 65,536 packets, each at most 2048 bytes) is loaded into the \
kernel and sent by weir's XDP program through the kernel's XDP live-frames test run (Linux 5.18+), \
65,536 runs a call, at top speed or paced with --pps or --mbps: the program sends a frame only \
when it is due by the kernel's clock, so frames leave evenly spaced, and the sending CPU stays \
busy running it (a sender held back sends what fell due at once, up to 32 frames); \
--speed, --qdisc-bypass and -Z are refused. \
--vary-ports N moves each IPv4 TCP/UDP source port by the packet's number mod N. Packets count \
as sent when handed to the device: one that cannot take a frame drops it and the kernel does not \
tell the sender, so count at the receiver; a veth transmits XDP frames only when its peer has an \
XDP program or GRO on.\n\n\
Privileges: the packet socket needs CAP_NET_RAW, --netns needs CAP_SYS_ADMIN, -Z needs \
CAP_SETUID and CAP_SETGID. For replay, --netns is where IFACE is opened, and -Z switches to USER \
once the TX socket is open: the trace is then opened as USER, so USER must be able to read it.")]
pub struct ReplayArgs {
    #[command(flatten)]
    pub src: SourceArgs,

    /// The interface to send on (opened inside --netns when given).
    #[arg(
        short = 'o',
        long = "interface",
        value_name = "IFACE",
        help_heading = "Sending",
        required_unless_present = "xdp",
        conflicts_with = "xdp"
    )]
    pub iface: Option<String>,

    /// Send on IFACE from kernel context instead, with no system call per packet:
    /// the kernel's XDP live-frames test run (Linux 5.18+), at top speed or --pps/--mbps.
    #[arg(long, value_name = "IFACE", help_heading = "Sending")]
    pub xdp: Option<String>,

    /// With --xdp: add (packet number mod N) to the source port of every IPv4
    /// TCP and UDP packet, checksums kept right, so receivers see up to N times the flows.
    #[arg(long, value_name = "N", requires = "xdp", value_parser = clap::value_parser!(u16).range(1..), help_heading = "Sending")]
    pub vary_ports: Option<u16>,

    /// Send the trace N times; 0 repeats it until Ctrl-C, -c or -d.
    #[arg(long = "loop", value_name = "N", default_value_t = 1, help_heading = "Sending")]
    pub loops: u64,

    /// Hand frames straight to the driver, past the queueing discipline
    /// (PACKET_QDISC_BYPASS): faster, but captures on the sending host do not see them.
    #[arg(long, help_heading = "Sending")]
    pub qdisc_bypass: bool,

    /// Print one JSON object at the end instead of the summary (no status lines).
    #[arg(long, help_heading = "Sending")]
    pub json: bool,

    /// No status lines while running.
    #[arg(short, long, help_heading = "Sending")]
    pub quiet: bool,
}

/// Longest a paced wait goes without looking for a stop.
const WAIT_SLICE: Duration = Duration::from_millis(50);
/// A paced packet sent this long after it was due counts as late.
const LATE: Duration = Duration::from_millis(1);

/// What the sending handler did with the packets it was given.
#[derive(Copy, Clone, Debug, Default)]
struct Outcome {
    /// Queued in the ring (sent once the ring is flushed).
    queued: u64,
    above_mtu: u64,
    too_short: u64,
    /// Sent with fewer bytes than they had on the wire.
    truncated: u64,
    /// Given to the handler after sending had failed.
    unsent: u64,
    /// Given to the handler after a stop (Ctrl-C, -d): read ahead, not sent.
    halted: u64,
    /// Paced packets sent more than [`LATE`] after they were due.
    late: u64,
    max_lag: Duration,
}

impl Outcome {
    fn skipped(&self) -> u64 {
        self.above_mtu + self.too_short
    }

    fn add(&mut self, o: &Outcome) {
        self.queued += o.queued;
        self.above_mtu += o.above_mtu;
        self.too_short += o.too_short;
        self.truncated += o.truncated;
        self.unsent += o.unsent;
        self.halted += o.halted;
        self.late += o.late;
        self.max_lag = self.max_lag.max(o.max_lag);
    }
}

/// Flags and counters shared by the sending thread and the main thread for the
/// whole replay. Every access is Relaxed: each is a flag or a display counter
/// on its own, and nothing else is published through them.
#[derive(Default)]
struct Shared {
    /// Stop sending (Ctrl-C, or -d has passed): packets still arriving are not sent.
    halt: AtomicBool,
    /// Sending failed; the main thread stops the engine.
    failed: AtomicBool,
    /// Packets and bytes queued so far, for the status lines.
    packets: AtomicU64,
    bytes: AtomicU64,
}

/// The queue's handler: paces each packet and writes it into the TX ring.
struct Sender {
    ring: TxRing,
    pacer: Pacer,
    deadline: Option<Instant>,
    shared: Arc<Shared>,
    outcome: Outcome,
    error: Option<TxError>,
}

impl Sender {
    fn halted(&self) -> bool {
        self.shared.halt.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Wait until `due`; false if a stop came first.
    fn wait(&self, due: Instant) -> bool {
        loop {
            if self.halted() {
                return false;
            }
            if pacing::until(due) <= WAIT_SLICE {
                pacing::wait_until(due);
                return true;
            }
            std::thread::sleep(WAIT_SLICE);
        }
    }

    /// A frame the interface cannot carry is counted and skipped; anything else
    /// ends sending.
    fn refused(&mut self, e: TxError) {
        match e {
            TxError::AboveMtu { .. } => self.outcome.above_mtu += 1,
            TxError::TooShort { .. } => self.outcome.too_short += 1,
            e => {
                self.outcome.unsent += 1;
                self.error = Some(e);
                self.shared.failed.store(true, Ordering::Relaxed);
            }
        }
    }
}

impl Handler for Sender {
    fn packet(&mut self, p: &Packet<'_>) {
        if self.error.is_some() {
            self.outcome.unsent += 1;
            return;
        }
        if self.halted() {
            self.outcome.halted += 1;
            return;
        }
        let frame = p.data();
        // Checked before pacing, so a skipped packet takes no place in the schedule.
        if let Err(e) = self.ring.fits(frame) {
            return self.refused(e);
        }
        if let Some(due) = self.pacer.due(p.ts_ns(), p.wire_len()) {
            if !self.wait(due) {
                self.outcome.halted += 1;
                return;
            }
            let lag = Instant::now().saturating_duration_since(due);
            self.outcome.late += u64::from(lag > LATE);
            self.outcome.max_lag = self.outcome.max_lag.max(lag);
        }
        match self.ring.send(frame) {
            Ok(()) => {
                self.outcome.queued += 1;
                self.outcome.truncated += u64::from(p.caplen() < p.wire_len());
                self.shared.packets.fetch_add(1, Ordering::Relaxed);
                self.shared.bytes.fetch_add(frame.len() as u64, Ordering::Relaxed);
            }
            Err(e) => self.refused(e),
        }
    }
}

/// Ctrl-C across passes: the first halts sending and stops the running pass,
/// a second exits at once.
struct Interrupt {
    shared: Arc<Shared>,
    requested: AtomicBool,
    current: Mutex<Option<StopHandle>>,
}

impl Interrupt {
    fn install(shared: Arc<Shared>) -> anyhow::Result<Arc<Interrupt>> {
        let me = Arc::new(Interrupt { shared, requested: AtomicBool::new(false), current: Mutex::new(None) });
        let handler_side = Arc::clone(&me);
        crate::run::on_signal(move || {
            handler_side.shared.halt.store(true, Ordering::Relaxed);
            // SeqCst with `follow`: the flag is set before the lock is taken, so
            // either this sees the pass's handle or `follow` sees the flag.
            handler_side.requested.store(true, Ordering::SeqCst);
            if let Some(h) = handler_side.current.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                h.stop();
            }
        })?;
        Ok(me)
    }

    /// Stop this pass on Ctrl-C (at once if it already came).
    fn follow(&self, h: Option<StopHandle>) {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = &h {
            // SeqCst: see the handler.
            if self.requested.load(Ordering::SeqCst) {
                h.stop();
            }
        }
        *cur = h;
    }

    fn requested(&self) -> bool {
        // SeqCst: see the handler.
        self.requested.load(Ordering::SeqCst)
    }
}

/// Totals over all passes.
#[derive(Default)]
struct Totals {
    passes: u64,
    received: u64,
    delivered: u64,
    filtered: u64,
    outcome: Outcome,
}

/// Once a second, a status line with what was sent over every pass so far.
struct Status {
    quiet: bool,
    started: Instant,
    last_at: Instant,
    last: (u64, u64),
}

impl Status {
    /// Run until the pass ends, calling `tick` four times a second and at the deadline.
    fn watch(&mut self, running: &Running<Sender>, pass: u64, shared: &Shared, deadline: Option<Instant>, mut tick: impl FnMut()) {
        let step = |now: Instant| {
            let to_deadline = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
            Duration::from_millis(250).min(to_deadline).max(Duration::from_millis(1))
        };
        while !running.wait_for(step(Instant::now())) {
            tick();
            if self.quiet || self.last_at.elapsed() < Duration::from_secs(1) {
                continue;
            }
            let now = (shared.packets.load(Ordering::Relaxed), shared.bytes.load(Ordering::Relaxed));
            let dt = self.last_at.elapsed().as_secs_f64();
            eprintln!(
                "[{:>6.1}s] pass {pass}: {}pps {}bit/s, {} packets",
                self.started.elapsed().as_secs_f64(),
                human_rate((now.0 - self.last.0) as f64 / dt),
                human_rate((now.1 - self.last.1) as f64 * 8.0 / dt),
                now.0
            );
            self.last = now;
            self.last_at = Instant::now();
        }
    }
}

fn tx_error(e: TxError) -> anyhow::Error {
    if e.is_bad_input() {
        bad_input(e)
    } else {
        anyhow::Error::new(e)
    }
}

/// Check what can be checked before anything is opened.
fn check_args(args: &ReplayArgs) -> anyhow::Result<()> {
    let spec: SourceSpec = args.src.source.parse().map_err(|e: SpecError| crate::run::spec_error(&args.src.source, e))?;
    match spec {
        SourceSpec::Live { .. } => {
            Err(bad_input(anyhow!("source {:?} is a network interface: weir replay sends trace files (pcap or pcapng)", args.src.source)))
        }
        SourceSpec::File { path: None, .. } if args.loops != 1 && args.xdp.is_none() => {
            Err(bad_input(anyhow!("--loop {} needs a trace file: standard input can be read only once", args.loops)))
        }
        SourceSpec::File { queues, .. } if queues.len() != 1 => Err(bad_input(anyhow!(
            "source {:?} names {} queues: weir replay sends one (give the trace without @RANGE, or one queue such as @2)",
            args.src.source,
            queues.len()
        ))),
        SourceSpec::File { .. } => Ok(()),
    }
}

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    check_args(&args)?;
    let pacing = args.src.pacing()?;
    let iface = match (&args.iface, &args.xdp) {
        (_, Some(xdp)) => return run_xdp(&args, xdp, pacing),
        (Some(iface), None) => iface.clone(),
        (None, None) => return Err(bad_input(anyhow!("give the interface to send on: -o IFACE or --xdp IFACE"))),
    };
    let opts = TxOptions {
        netns: args.src.live.netns.clone(),
        qdisc_bypass: args.qdisc_bypass,
        // Paced frames are handed over one by one, at their time.
        batch: if pacing.is_paced() { 1 } else { TOP_SPEED_BATCH },
        ..TxOptions::default()
    };
    let mut ring = TxRing::open(&iface, &opts).map_err(tx_error)?;
    if let Some(user) = &args.src.live.user {
        privileges::drop_to(user).map_err(|e| if e.is_bad_input() { bad_input(e) } else { anyhow::Error::new(e) })?;
    }
    let shared = Arc::new(Shared::default());
    let interrupt = Interrupt::install(Arc::clone(&shared))?;
    let kicker = ring.kicker();
    let started = Instant::now();
    let deadline = args.src.duration.map(|d| started + d);
    let past_deadline = || deadline.is_some_and(|d| Instant::now() >= d);
    let mut status = Status { quiet: args.quiet || args.json, started, last_at: started, last: (0, 0) };
    let mut totals = Totals::default();
    let mut source_name = args.src.source.clone();
    let mut stop = StopReason::EndOfInput;
    let mut failure: Option<anyhow::Error> = None;
    let mut send_error: Option<TxError> = None;

    while (args.loops == 0 || totals.passes < args.loops) && !interrupt.requested() && !past_deadline() {
        let Some(src) = engine_args(&args.src, &totals) else { break };
        let engine = src.engine().map_err(|e| match &args.src.live.user {
            Some(u) => e.context(format!("reading the trace as user {u} (-Z)")),
            None => e,
        })?;
        let info = engine.info().clone();
        if info.link_type != LinkType::ETHERNET {
            return Err(bad_input(anyhow!(
                "{} has link type {}: only Ethernet (EN10MB) traces can be sent on {}",
                info.name,
                info.link_type,
                iface
            )));
        }
        if info.queues.len() != 1 {
            return Err(bad_input(anyhow!("{} opened {} queues: weir replay sends one", info.name, info.queues.len())));
        }
        source_name = info.name;
        totals.passes += 1;

        let mut sender = Some(Sender {
            ring,
            pacer: Pacer::new(pacing),
            deadline,
            shared: Arc::clone(&shared),
            outcome: Outcome::default(),
            error: None,
        });
        // One queue (checked above), so `make` runs once and takes the sender.
        let running = engine.start(move |_q| sender.take().expect("one queue, one sender"))?;
        interrupt.follow(Some(running.stop_handle()));
        let stopper = running.stop_handle();
        status.watch(&running, totals.passes, &shared, deadline, || tick(&kicker, &shared, deadline, &stopper));
        let report = running.join();
        interrupt.follow(None);

        let t = report.stats.total();
        totals.received += t.received;
        totals.delivered += t.delivered;
        totals.filtered += t.filtered;
        let run_error = report.errors.first().map(|e| (e.to_string(), report.failed_on_bad_input()));
        let Some((_, sender)) = report.handlers.into_iter().next() else {
            // The worker panicked and took the ring with it.
            bail!("{}", run_error.map_or_else(|| "the sending thread failed".into(), |(e, _)| e));
        };
        ring = sender.ring;
        totals.outcome.add(&sender.outcome);
        stop = report.stop;
        if let Some(e) = sender.error {
            send_error = Some(e);
            break;
        }
        if let Some((e, bad)) = run_error {
            failure = Some(if bad { bad_input(anyhow!(e)) } else { anyhow!(e) });
            break;
        }
        // A limit, a stop request, or a trace with nothing in it ends the loop.
        if stop != StopReason::EndOfInput || t.received == 0 {
            break;
        }
    }
    if send_error.is_some() || failure.is_some() {
        stop = StopReason::Failed;
    } else if interrupt.requested() {
        stop = StopReason::Requested;
    } else if past_deadline() {
        stop = StopReason::TimeLimit;
    }
    if send_error.is_none() {
        send_error = ring.flush().err();
    }
    let tx = ring.stats();
    // Every packet the engine delivered was handled once, and every frame queued
    // is either sent or still in the ring: a miscount on either side is caught.
    let o = &totals.outcome;
    if tx.sent + tx.queued != o.queued || o.queued + o.skipped() + o.unsent + o.halted != totals.delivered {
        bail!("internal accounting error: engine delivered {}, sender {o:?}, ring {tx:?}", totals.delivered);
    }
    let summary = Summary {
        source: &source_name,
        iface: &iface,
        mtu: ring.mtu(),
        shape: ring.shape(),
        pacing,
        elapsed: started.elapsed(),
        totals: &totals,
        tx: &tx,
        identity: privileges::current(),
        stop,
        error: send_error.as_ref().map(|e| e.to_string()).or_else(|| failure.as_ref().map(|e| format!("{e:#}"))),
    };
    if args.json {
        summary.print_json();
    } else {
        summary.print();
    }
    match (send_error, failure) {
        (Some(e), _) => Err(tx_error(e)),
        (None, Some(e)) => Err(e),
        (None, None) => Ok(ExitCode::SUCCESS),
    }
}

/// While a pass runs: hand queued frames to the kernel (a partial batch of a
/// slow source would otherwise wait), and stop the engine on a send error or
/// at the deadline.
fn tick(kicker: &TxKicker, shared: &Shared, deadline: Option<Instant>, stop: &StopHandle) {
    kicker.kick();
    if deadline.is_some_and(|d| Instant::now() >= d) {
        shared.halt.store(true, Ordering::Relaxed);
        stop.stop();
    }
    if shared.failed.load(Ordering::Relaxed) {
        stop.stop();
    }
}

/// The engine's options for the next pass: the trace at top speed (the sender
/// paces), -c counted across passes, -d kept by the sender. `None` when -c is
/// used up.
fn engine_args(src: &SourceArgs, totals: &Totals) -> Option<SourceArgs> {
    let mut next = src.clone();
    (next.pps, next.mbps, next.speed, next.duration) = (None, None, None, None);
    if let Some(n) = src.count {
        next.count = Some(n.checked_sub(totals.delivered).filter(|&left| left > 0)?);
    }
    Some(next)
}

struct Summary<'a> {
    source: &'a str,
    iface: &'a str,
    mtu: u32,
    shape: (usize, usize),
    pacing: Pacing,
    elapsed: Duration,
    totals: &'a Totals,
    tx: &'a TxStats,
    identity: Identity,
    stop: StopReason,
    error: Option<String>,
}

impl Summary<'_> {
    fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    fn print(&self) {
        let (t, o, tx) = (self.totals, &self.totals.outcome, self.tx);
        let passes = if t.passes == 1 { "1 pass".to_string() } else { format!("{} passes", t.passes) };
        out!("weir replay: {} -> {} (MTU {}), {passes}", self.source, self.iface, self.mtu);
        out!(
            "  sent      {} packets, {} bytes in {:.3} s: {}pps, {}bit/s",
            tx.sent,
            tx.bytes,
            self.secs(),
            human_rate(tx.sent as f64 / self.secs()),
            human_rate(tx.bytes as f64 * 8.0 / self.secs())
        );
        if self.pacing.is_paced() {
            out!("  paced     {} packets more than 1 ms late, the latest by {:.3} ms", o.late, o.max_lag.as_secs_f64() * 1e3);
        }
        out!(
            "  skipped   {} ({} longer than MTU + 14, {} shorter than an Ethernet header); {} sent truncated to their captured length",
            o.skipped(),
            o.above_mtu,
            o.too_short,
            o.truncated
        );
        out!(
            "  not sent  {} filtered out, {} read ahead when stopped, {} after an error, {} still queued",
            t.filtered,
            o.halted,
            o.unsent,
            tx.queued
        );
        out!(
            "  ring      {} slots of {} bytes: {} waits for a free slot, {} busy hand-overs",
            self.shape.0,
            self.shape.1,
            tx.ring_full_waits,
            tx.device_busy
        );
        out!("  running as uid {} gid {}; {}", self.identity.uid[1], self.identity.gid[1], self.stop);
    }

    fn print_json(&self) {
        let (t, o, tx) = (self.totals, &self.totals.outcome, self.tx);
        let v = json!({
            "source": self.source,
            "interface": self.iface,
            "mtu": self.mtu,
            "passes": t.passes,
            "packets": tx.sent,
            "bytes": tx.bytes,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "pps": tx.sent as f64 / self.secs(),
            "bits_per_s": tx.bytes as f64 * 8.0 / self.secs(),
            "read": t.received,
            "filtered": t.filtered,
            "skipped": o.skipped(),
            "skipped_above_mtu": o.above_mtu,
            "skipped_too_short": o.too_short,
            "truncated": o.truncated,
            "halted": o.halted,
            "unsent": o.unsent,
            "queued": tx.queued,
            "late": o.late,
            "max_lag_s": o.max_lag.as_secs_f64(),
            "ring_full_waits": tx.ring_full_waits,
            "device_busy": tx.device_busy,
            "ring_slots": self.shape.0,
            "ring_slot_bytes": self.shape.1,
            "uid": self.identity.uid,
            "gid": self.identity.gid,
            "groups": self.identity.groups,
            "stop": self.stop.to_string(),
            "error": self.error,
        });
        out!("{v}");
    }
}

/// Runs per XDP test run at first: about 20 ms at the generator's top speed here.
const XDP_CHUNK: u32 = 1 << 16;
/// Runs per test run at most.
const XDP_CHUNK_MAX: u32 = 1 << 24;
/// What a test run should last: each costs the kernel some 20 ms of set-up
/// here, in which nothing is sent (its XDP dispatcher is changed for the run
/// and back), so runs are made this long once the generator's speed is known,
/// and no longer than -d has left; -c is exact whatever the length (the
/// program stops at the count), and Ctrl-C interrupts a run at once.
const XDP_CALL: Duration = Duration::from_secs(1);

/// The queue's handler for `--xdp`: keeps a copy of every frame, to be loaded
/// into the kernel whole.
#[derive(Default)]
struct Collector {
    frames: Vec<Vec<u8>>,
    truncated: u64,
}

impl Handler for Collector {
    fn packet(&mut self, p: &Packet<'_>) {
        self.truncated += u64::from(p.caplen() < p.wire_len());
        self.frames.push(p.data().to_vec());
    }
}

/// `--xdp IFACE`: read the trace (filtered, and no further than -c or the
/// generator's limit needs), load it into the kernel, then send runs of
/// test runs (see [`XDP_CALL`]) until the passes, -c, -d or Ctrl-C end it.
fn run_xdp(args: &ReplayArgs, iface: &str, pacing: Pacing) -> anyhow::Result<ExitCode> {
    if args.qdisc_bypass {
        return Err(bad_input(anyhow!("--qdisc-bypass is for -o IFACE: --xdp frames never pass the queueing discipline")));
    }
    if args.src.live.user.is_some() {
        return Err(bad_input(anyhow!("-Z cannot be used with --xdp: every test run is a bpf(2) call that needs root's capabilities")));
    }
    let mut src = engine_args(&args.src, &Totals::default()).unwrap_or_else(|| args.src.clone());
    // One frame more than the generator holds is enough to say the trace is too long.
    let limit = weir::tx::xdp::MAX_FRAMES as u64 + 1;
    src.count = Some(src.count.map_or(limit, |c| c.min(limit)));
    let engine = src.engine()?;
    let info = engine.info().clone();
    if info.link_type != LinkType::ETHERNET {
        return Err(bad_input(anyhow!(
            "{} has link type {}: only Ethernet (EN10MB) traces can be sent on {iface}",
            info.name,
            info.link_type
        )));
    }
    let mut collector = Some(Collector::default());
    let running = engine.start(move |_q| collector.take().unwrap_or_default())?;
    let report = running.join();
    if let Some(e) = report.errors.first() {
        let e = anyhow!("{e}");
        return Err(if report.failed_on_bad_input() { bad_input(e) } else { e });
    }
    let filtered = report.stats.total().filtered;
    let collected = report.handlers.into_iter().map(|(_, c)| c).next().unwrap_or_default();
    // What the interface cannot carry is skipped and counted, as `-o` does.
    let kept = sendable(iface, &args.src.live.netns, collected.frames).map_err(gen_error)?;
    let frames = kept.frames;
    let opts =
        XdpGenOptions { netns: args.src.live.netns.clone(), vary_ports: args.vary_ports.unwrap_or(0), pacing, ..XdpGenOptions::default() };
    // Every frame skipped: nothing to load, nothing sent.
    let mut gen = if frames.is_empty() { None } else { Some(XdpGenerator::open(iface, &frames, &opts).map_err(gen_error)?) };

    let n = frames.len() as u64;
    let lens: Vec<u64> = frames.iter().map(|f| f.len() as u64).collect();
    let pass_bytes: u64 = lens.iter().sum();
    // No frame loaded (all skipped): nothing sent, no bytes.
    let bytes_of = |runs: u64| match (runs.checked_div(n), runs.checked_rem(n)) {
        (Some(passes), Some(rest)) => passes * pass_bytes + lens[..rest as usize].iter().sum::<u64>(),
        _ => 0,
    };
    let per_pass = if args.loops == 0 { None } else { Some(args.loops.saturating_mul(n)) };
    let total = match (per_pass, args.src.count) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    };

    let shared = Arc::new(Shared::default());
    let interrupt = Interrupt::install(Arc::clone(&shared))?;
    let started = Instant::now();
    let deadline = args.src.duration.map(|d| started + d);
    let quiet = args.quiet || args.json;
    let (mut sent, mut last, mut last_at) = (0u64, 0u64, started);
    // The first call makes XDP_CHUNK runs; later ones as many as XDP_CALL takes.
    let mut runs_per_s = f64::from(XDP_CHUNK) / XDP_CALL.as_secs_f64();
    let mut stop = StopReason::EndOfInput;
    let mut error = None;
    loop {
        if interrupt.requested() {
            stop = StopReason::Requested;
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stop = StopReason::TimeLimit;
            break;
        }
        let left = total.map_or(u64::MAX, |t| t - sent);
        if left == 0 {
            if args.src.count.is_some_and(|c| c == sent) {
                stop = StopReason::PacketLimit;
            }
            break;
        }
        // Runs sized from the last call's speed, to last XDP_CALL or what -d has left.
        let mut call = XDP_CALL;
        if let Some(d) = deadline {
            call = call.min(d.saturating_duration_since(Instant::now()));
        }
        let mut runs = (runs_per_s * call.as_secs_f64()).clamp(1.0, f64::from(XDP_CHUNK_MAX)) as u32;
        if !pacing.is_paced() {
            // At top speed every run sends: no more runs than frames wanted.
            runs = runs.min(u32::try_from(left).unwrap_or(u32::MAX));
        }
        let Some(gen) = gen.as_mut() else { break };
        let t0 = Instant::now();
        match gen.send(runs, left) {
            Ok(n) => sent += n,
            Err(e) => {
                error = Some(e);
                stop = StopReason::Failed;
                break;
            }
        }
        runs_per_s = (f64::from(runs) / t0.elapsed().as_secs_f64().max(1e-6)).max(f64::from(XDP_CHUNK) / XDP_CALL.as_secs_f64());
        if !quiet && last_at.elapsed() >= Duration::from_secs(1) {
            let dt = last_at.elapsed().as_secs_f64();
            eprintln!(
                "[{:>6.1}s] {}pps {}bit/s, {} packets",
                started.elapsed().as_secs_f64(),
                human_rate((sent - last) as f64 / dt),
                human_rate((bytes_of(sent) - bytes_of(last)) as f64 * 8.0 / dt),
                sent
            );
            (last, last_at) = (sent, Instant::now());
        }
    }
    let summary = XdpSummary {
        source: &info.name,
        iface,
        mtu: kept.mtu,
        elapsed: started.elapsed(),
        frames: n,
        above_mtu: kept.above_mtu,
        too_short: kept.too_short,
        truncated: collected.truncated,
        filtered,
        vary_ports: args.vary_ports,
        pacing,
        sent,
        bytes: bytes_of(sent),
        stop,
        error: error.as_ref().map(ToString::to_string),
    };
    if args.json {
        summary.print_json();
    } else {
        summary.print();
    }
    match error {
        Some(e) => Err(gen_error(e)),
        None => Ok(ExitCode::SUCCESS),
    }
}

fn gen_error(e: GenError) -> anyhow::Error {
    if e.is_bad_input() {
        bad_input(e)
    } else {
        anyhow::Error::new(e)
    }
}

struct XdpSummary<'a> {
    source: &'a str,
    iface: &'a str,
    mtu: u32,
    elapsed: Duration,
    /// Frames of the trace held in the kernel: one pass.
    frames: u64,
    /// Packets of the trace skipped (once each, whatever the passes).
    above_mtu: u64,
    too_short: u64,
    truncated: u64,
    filtered: u64,
    vary_ports: Option<u16>,
    pacing: Pacing,
    sent: u64,
    bytes: u64,
    stop: StopReason,
    error: Option<String>,
}

impl XdpSummary<'_> {
    /// The rate asked for, in words; `None` at top speed.
    fn paced(&self) -> Option<String> {
        match self.pacing {
            Pacing::Pps(r) => Some(format!("{}pps", human_rate(r))),
            Pacing::Mbps(r) => Some(format!("{}bit/s", human_rate(r * 1e6))),
            Pacing::TopSpeed | Pacing::Speed(_) => None,
        }
    }

    fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    fn passes(&self) -> u64 {
        self.sent.div_ceil(self.frames.max(1))
    }

    fn print(&self) {
        let passes = if self.passes() == 1 { "1 pass".to_string() } else { format!("{} passes", self.passes()) };
        out!("weir replay: {} -> {} (MTU {}), XDP live frames, {passes}", self.source, self.iface, self.mtu);
        out!(
            "  sent      {} packets, {} bytes in {:.3} s: {}pps, {}bit/s",
            self.sent,
            self.bytes,
            self.secs(),
            human_rate(self.sent as f64 / self.secs()),
            human_rate(self.bytes as f64 * 8.0 / self.secs())
        );
        out!(
            "  trace     {} packets held in the kernel ({} filtered out, {} truncated to their captured length)",
            self.frames,
            self.filtered,
            self.truncated
        );
        if self.above_mtu + self.too_short > 0 {
            out!(
                "  skipped   {} ({} longer than MTU + 14, {} shorter than an Ethernet header): not loaded, so not sent in any pass",
                self.above_mtu + self.too_short,
                self.above_mtu,
                self.too_short
            );
        }
        if let Some(v) = self.vary_ports {
            out!("  ports     source ports of IPv4 TCP and UDP packets varied over {v} values");
        }
        if let Some(rate) = self.paced() {
            out!("  paced     at {rate} by the kernel's clock, each frame sent when due");
        }
        out!(
            "  handed to {} by its XDP transmit; a device that cannot take a frame drops it unreported \
             (a veth does unless its peer has an XDP program or GRO on): count at the receiver",
            self.iface
        );
        out!("  {}", self.stop);
    }

    fn print_json(&self) {
        let v = json!({
            "source": self.source,
            "interface": self.iface,
            "mtu": self.mtu,
            "mode": "xdp",
            "passes": self.passes(),
            "packets": self.sent,
            "bytes": self.bytes,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "pps": self.sent as f64 / self.secs(),
            "bits_per_s": self.bytes as f64 * 8.0 / self.secs(),
            "trace_packets": self.frames,
            "filtered": self.filtered,
            "skipped": self.above_mtu + self.too_short,
            "skipped_above_mtu": self.above_mtu,
            "skipped_too_short": self.too_short,
            "truncated": self.truncated,
            "vary_ports": self.vary_ports,
            "paced": self.paced(),
            "stop": self.stop.to_string(),
            "error": self.error,
        });
        out!("{v}");
    }
}
