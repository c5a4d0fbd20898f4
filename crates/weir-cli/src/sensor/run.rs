//! Checking a parsed config against the machine ([`Plan::check`]: what
//! can be known without capturing: filters, files, rules, memory), then
//! running it: the outputs opened, the capture started with a tee per
//! queue, the signals taken, and at the end each output's accounting.

use super::config::{Config, ConfigError, Problem};
use crate::events::Events;
use crate::flows::{FlowOutput, ToExporter};
use crate::inspect::Matcher;
use crate::kafka::Kafka;
use crate::record::{Recorder, Shared};
use crate::run::{announce, drop_privileges, human_rate};
use crate::streams::{packet_line, Writer};
use anyhow::anyhow;
use serde_json::json;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use weir::filter::Filter;
use weir::output::tee::{Branch, BranchCounts, Filters, Tee};
use weir::stream::{Piece, Stream, StreamConfig, StreamCtl, StreamHandler, StreamStats, Streams};
use weir::{LinkType, QueueId};

/// What the checks found and what the run builds from.
pub struct Plan {
    /// The reassembling layer's settings (`[streams]` and `[inspect]` share it).
    stream_cfg: Option<StreamConfig>,
    /// The rules' matcher.
    matcher: Option<Arc<Matcher>>,
    memory: weir::memory::Plan,
}

fn problem(cfg: &Config, table: &str, key: &str, message: impl Into<String>) -> Problem {
    let place = if key.is_empty() { format!("[{table}]") } else { format!("[{table}] {key}") };
    Problem { line: cfg.lines.of(table, key), place, message: message.into() }
}

/// Whether a file can be made at `path` (its directory exists and can be
/// written); a name with strftime conversions in its directory is not
/// checked.
fn writable_dir_of(path: &str) -> Result<(), String> {
    let dir = Path::new(path).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if dir.to_string_lossy().contains('%') || dir.to_string_lossy().contains('{') {
        return Ok(());
    }
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(format!("{} is not a directory", dir.display())),
        Ok(_) => nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).map_err(|e| format!("cannot write in {}: {e}", dir.display())),
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}

impl Plan {
    /// Every check that needs no capture: filters compile, outputs can be
    /// written where they are named, the rules parse, collectors resolve,
    /// the stream layers' memory fits, and the tables agree with each other.
    pub fn check(cfg: &Config) -> Result<Plan, ConfigError> {
        let mut problems = Vec::new();
        let mut p = |table: &str, key: &str, m: String| problems.push(problem(cfg, table, key, m));
        if cfg.record.is_none() && cfg.flows.is_none() && cfg.streams.is_none() && cfg.inspect.is_none() {
            p("capture", "", "no output: add at least one of [record], [flows], [streams] and [inspect]".into());
        }
        let src = &cfg.capture.src;
        let spec = match src.source.parse::<weir::source::SourceSpec>() {
            Ok(s) => Some(s),
            Err(e) => {
                p("capture", "source", format!("`{}`: {e}", src.source));
                None
            }
        };
        if let Some(weir::source::SourceSpec::Live { iface, .. }) = &spec {
            if src.live.netns.is_none() && !Path::new("/sys/class/net").join(iface).exists() {
                p("capture", "source", format!("no interface named {iface} here"));
            }
        }
        if let Err(e) = src.pool_config() {
            p("capture", "pool", format!("{e:#}"));
        }
        if let Err(e) = src.balance.parse::<weir::balance::Mode>() {
            p("capture", "balance", format!("`{}`: {e}", src.balance));
        }
        if let Some(Err(e)) = src.cpus.as_ref().map(|c| c.parse::<weir::engine::CpuPlan>()) {
            p("capture", "cpus", format!("{e}"));
        }
        if let Err(e) = src.pacing() {
            p("capture", "", format!("{e:#}"));
        }
        if let Err(e) = src.live.options() {
            p("capture", "", format!("{e:#}"));
        }
        if let Some(user) = &src.live.user {
            if !matches!(nix::unistd::User::from_name(user), Ok(Some(_))) {
                p("capture", "user", format!("no user named {user}"));
            }
        }
        // Filters are compiled for Ethernet here; the run compiles them
        // again for the source's own link type.
        let compile = |expr: &Option<String>| expr.as_ref().map(|e| Filter::compile(e, LinkType::ETHERNET, 262_144).map(|_| ()));
        for (table, expr) in [
            ("capture", &src.filter),
            ("record", &cfg.record.as_ref().and_then(|r| r.src.filter.clone())),
            ("flows", &cfg.flows.as_ref().and_then(|r| r.src.filter.clone())),
            ("streams", &cfg.streams.as_ref().and_then(|r| r.src.filter.clone())),
            ("inspect", &cfg.inspect.as_ref().and_then(|r| r.src.filter.clone())),
        ] {
            if let Some(Err(e)) = compile(expr) {
                p(table, "filter", format!("`{}` does not compile: {e}", expr.as_deref().unwrap_or("")));
            }
        }
        let events_path = cfg.events.as_ref().map(|e| e.path.as_str());
        if let Some(r) = &cfg.record {
            if r.out == "-" && events_path == Some("-") {
                p("record", "write", "[record] and [events] would both write to standard output: send one to a file".into());
            } else if r.out != "-" {
                if let Err(e) = writable_dir_of(&r.out) {
                    p("record", "write", e);
                }
            }
            let policy = r.rotation.policy(r.file_packets);
            if r.out == "-" && (policy.rotates() || policy.max_files.is_some()) {
                p(
                    "record",
                    "write",
                    "standard output cannot be rotated: leave out file-size, rotate-seconds, file-packets and max-files".into(),
                );
            }
        }
        let mut memory = weir::memory::Plan::new();
        if let Some(f) = &cfg.flows {
            match FlowOutput::open(f, &[QueueId(0)]) {
                Ok(out) => memory.extend(out.cfg.memory_plan(1)),
                Err(e) => p("flows", "", format!("{e:#}")),
            }
            if f.write.as_deref() == Some("-") && events_path == Some("-") {
                p("flows", "write", "[flows] and [events] would both write to standard output: send one to a file".into());
            }
            if let Some(w) = f.write.as_deref().filter(|w| *w != "-") {
                if let Err(e) = writable_dir_of(w) {
                    p("flows", "write", e);
                }
            }
        }
        let streams_cfg = match cfg.streams.as_ref().map(crate::streams::config) {
            Some(Err(e)) => {
                p("streams", "", format!("{e:#}"));
                None
            }
            Some(Ok(c)) => Some(c),
            None => None,
        };
        if let Some(dir) = cfg.streams.as_ref().and_then(|s| s.output.as_ref()) {
            let probe = dir.join("x");
            if !dir.is_dir() {
                if let Err(e) = writable_dir_of(&dir.to_string_lossy()) {
                    p("streams", "output", format!("cannot make the directory {}: {e}", dir.display()));
                }
            } else if let Err(e) = writable_dir_of(&probe.to_string_lossy()) {
                p("streams", "output", e);
            }
        }
        let (mut matcher, mut inspect_cfg) = (None, None);
        if let Some(i) = &cfg.inspect {
            if i.output != "-" {
                p("inspect", "output", "the sensor's alerts go to [events] (as `alert` events)".into());
            }
            match crate::inspect::stream_matcher(i) {
                Ok((m, c, bound)) => {
                    memory.add(
                        format!("the rules' automata ({})", i.rules.as_ref().map_or("built-in".into(), |r| r.display().to_string())),
                        bound,
                    );
                    matcher = Some(m);
                    inspect_cfg = Some(c);
                }
                Err(e) => p("inspect", if i.rules.is_some() { "rules" } else { "" }, format!("{e:#}")),
            }
        }
        // `[streams]` and `[inspect]` share one layer: its settings are
        // [streams']; `[inspect]` only adds the overlap its rules need.
        let stream_cfg = match (streams_cfg, inspect_cfg) {
            (Some(s), Some(i)) => {
                let same = StreamConfig { piece_overlap: s.piece_overlap, ..i.clone() } == s;
                if !same {
                    p("inspect", "", "[streams] and [inspect] share one stream layer: give the stream options (cutoff, mode, class, memory, ...) in [streams] only".into());
                }
                Some(StreamConfig { piece_overlap: s.piece_overlap.max(i.piece_overlap), ..s })
            }
            (s, i) => s.or(i),
        };
        if let Some(c) = &stream_cfg {
            if c.piece_overlap >= c.piece {
                p("streams", "piece", format!("pieces of {} bytes cannot repeat {} bytes of the one before", c.piece, c.piece_overlap));
            }
            memory.extend(c.memory_plan(1));
        }
        if let Some(ev) = &cfg.events {
            if ev.path != "-" {
                if let Err(e) = writable_dir_of(&ev.path) {
                    p("events", "path", e);
                }
            }
            for (t, has, table) in [
                ("flow", cfg.flows.is_some(), "[flows]"),
                ("stream", cfg.streams.is_some(), "[streams]"),
                ("alert", cfg.inspect.is_some(), "[inspect]"),
            ] {
                if ev.types.iter().any(|x| x == t) && !has && ev.explicit_types {
                    p("events", "types", format!("`{t}` events come from {table}, which this config does not have"));
                }
            }
        }
        let kafka_alerts = cfg.kafka.as_ref().is_some_and(|k| k.types.is_empty() || k.types.iter().any(|t| t == "alert"));
        if cfg.inspect.is_some() && !kafka_alerts && !cfg.events.as_ref().is_some_and(|e| e.types.iter().any(|t| t == "alert")) {
            p("inspect", "", "alerts go to [events] or [kafka]: add an [events] table (with \"alert\" among its types) or [kafka]".into());
        }
        let kafka_flows = cfg.kafka.as_ref().is_some_and(|k| k.types.is_empty() || k.types.iter().any(|t| t == "flow"));
        let event_flows = cfg.events.as_ref().is_some_and(|e| e.types.iter().any(|t| t == "flow"));
        if let Some(f) = &cfg.flows {
            if f.collectors.is_empty() && f.write.is_none() && !kafka_flows && !event_flows {
                p("flows", "", "nowhere to export the records to: give `collector` or `write`, or add [kafka] or [events] (with \"flow\" among its types)".into());
            }
        }
        if let Some(k) = &cfg.kafka {
            if k.brokers.is_none() {
                p("kafka", "brokers", "missing: the brokers to publish to, \"HOST:PORT,...\"".into());
            }
            if let Err(e) = crate::kafka::topics(&k.topic, &cfg.sensor.name) {
                p("kafka", "topic", e);
            }
        }
        if let Some(m) = &cfg.metrics {
            if let Err(e) = weir_metrics::listen(m) {
                p("metrics", "listen", e.to_string());
            }
        }
        if let Err(e) = memory.check() {
            p("capture", "", format!("{e}"));
        }
        if problems.is_empty() {
            Ok(Plan { stream_cfg, matcher, memory })
        } else {
            problems.sort_by_key(|p| p.line);
            Err(ConfigError { file: cfg.file.clone(), problems })
        }
    }

    /// The outputs the config runs, for the --check line.
    pub fn describe(&self, cfg: &Config) -> String {
        let mut parts = vec![format!("capture {}", cfg.capture.src.source)];
        for (name, on) in [
            ("record", cfg.record.is_some()),
            ("flows", cfg.flows.is_some()),
            ("streams", cfg.streams.is_some()),
            ("inspect", cfg.inspect.is_some()),
            ("events", cfg.events.is_some()),
            ("kafka", cfg.kafka.is_some()),
            ("metrics", cfg.metrics.is_some()),
        ] {
            if on {
                parts.push(name.to_string());
            }
        }
        parts.join(", ")
    }
}

/// The reassembling layer's consumers: files, the rules, events.
type StreamBranch = (Option<Writer>, (Option<AlertMatcher>, Option<StreamEvents>));

/// The rules currently in force, replaced by a reload.
struct Rules {
    matcher: Mutex<Arc<Matcher>>,
    generation: AtomicU64,
}

/// One queue's matcher of stream data: each match is an `alert` event.
struct AlertMatcher {
    rules: Arc<Rules>,
    matcher: Arc<Matcher>,
    generation: u64,
    events: Events,
    alerts: u64,
}

impl StreamHandler for AlertMatcher {
    /// The service port whose rules the stream is matched with; `None`: not TCP or UDP.
    type State = Option<u16>;

    fn created(&mut self, ctl: &mut StreamCtl<'_>) -> Option<u16> {
        let s = ctl.stream();
        matches!(s.proto, 6 | 17).then(|| s.sport.min(s.dport))
    }

    fn data(&mut self, ctl: &mut StreamCtl<'_>, port: &mut Option<u16>, piece: &Piece<'_>) {
        let Some(port) = *port else { return };
        // Acquire: pairs with the reload's Release, after the matcher was stored.
        let g = self.rules.generation.load(Ordering::Acquire);
        if g != self.generation {
            self.matcher = self.rules.matcher.lock().unwrap_or_else(PoisonError::into_inner).clone();
            self.generation = g;
        }
        let s = ctl.stream();
        let (events, alerts) = (&self.events, &mut self.alerts);
        self.matcher.each_match(port, piece.data, |rule, m| {
            // Ends in the bytes repeated from the previous piece: reported with it.
            if m.end() <= piece.overlap {
                return;
            }
            *alerts += 1;
            events.alert(s, rule, piece.offset + m.start() as u64);
        });
    }

    fn closed(&mut self, _: &Stream, _: Option<u16>) {}
}

/// Closed streams as `stream` events.
struct StreamEvents(Events);

impl StreamHandler for StreamEvents {
    type State = ();
    fn created(&mut self, _: &mut StreamCtl<'_>) {}
    fn data(&mut self, _: &mut StreamCtl<'_>, _: &mut (), _: &Piece<'_>) {}
    fn closed(&mut self, s: &Stream, _: ()) {
        self.0.stream(s);
    }
}

/// The outputs' branch of each kind, in the tee's order.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Kind {
    Record,
    Flows,
    Streams,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Record => "record",
            Kind::Flows => "flows",
            Kind::Streams => "streams",
        }
    }
}

/// Each branch's filter expression (its own, or none).
fn branch_filters(cfg: &Config, kinds: &[Kind]) -> Vec<Option<String>> {
    kinds
        .iter()
        .map(|k| match k {
            Kind::Record => cfg.record.as_ref().and_then(|r| r.src.filter.clone()),
            Kind::Flows => cfg.flows.as_ref().and_then(|r| r.src.filter.clone()),
            Kind::Streams => {
                cfg.streams.as_ref().and_then(|r| r.src.filter.clone()).or_else(|| cfg.inspect.as_ref().and_then(|r| r.src.filter.clone()))
            }
        })
        .collect()
}

fn compile_all(exprs: &[Option<String>], link: LinkType, engine: weir::filter::FilterEngine) -> anyhow::Result<Vec<Option<Filter>>> {
    exprs
        .iter()
        .map(|e| {
            e.as_ref()
                .map(|e| Filter::compile(e, link, 262_144).map(|f| f.with_engine(engine)).map_err(|err| anyhow!("filter `{e}`: {err}")))
                .transpose()
        })
        .collect()
}

/// What the signal thread saw, for the main loop.
#[derive(Default)]
struct Signals {
    hup: AtomicU64,
    usr1: AtomicU64,
    usr2: AtomicU64,
}

pub fn run(cfg: Config, plan: Plan) -> anyhow::Result<ExitCode> {
    let name = cfg.sensor.name.clone();
    let say = |m: String| eprintln!("weir sensor {name}: {m}");
    crate::run::own_signals();
    let metrics = cfg.metrics.as_ref().map(|m| weir_metrics::listen(m)).transpose().map_err(|e| bad(anyhow!("[metrics] listen: {e}")))?;
    let engine = cfg.capture.src.engine_with(plan.memory.clone(), 0)?;
    let info = engine.info().clone();
    let queues = info.queues.clone();
    let kafka = match &cfg.kafka {
        Some(k) => Some(Kafka::start(k, &name, &made_types(&cfg)).map_err(|e| bad(anyhow!("[kafka] {e}")))?),
        None => None,
    };
    let events = match &cfg.events {
        Some(e) => Some(
            Events::create(&e.path, true)
                .map_err(|err| bad(anyhow!("[events] path {}: {err}", e.path)))?
                .file_types(&e.types)
                .with_kafka(kafka.clone()),
        ),
        None => kafka.clone().map(Events::kafka_only),
    };
    let wants = |t: &str| cfg.events.as_ref().is_some_and(|e| e.types.iter().any(|x| x == t)) || kafka.as_ref().is_some_and(|k| k.wants(t));
    let mut kinds = Vec::new();
    let record = match &cfg.record {
        Some(r) => {
            kinds.push(Kind::Record);
            Some(Arc::new(Mutex::new(Shared { writer: Some(crate::record::writer(r, &info)?), error: None, packets: 0 })))
        }
        None => None,
    };
    let flows = match &cfg.flows {
        Some(f) => {
            kinds.push(Kind::Flows);
            Some(FlowOutput::open(f, &queues)?)
        }
        None => None,
    };
    let flow_cfg = flows.as_ref().map(|f| f.cfg.clone());
    let rules = plan.matcher.clone().map(|m| Arc::new(Rules { matcher: Mutex::new(m), generation: AtomicU64::new(0) }));
    if let Some(c) = &plan.stream_cfg {
        kinds.push(Kind::Streams);
        if let Some(dir) = cfg.streams.as_ref().and_then(|s| s.output.as_ref()) {
            std::fs::create_dir_all(dir).map_err(|e| bad(anyhow!("[streams] output {}: cannot make the directory: {e}", dir.display())))?;
        }
        c.check().map_err(|e| crate::exit::setting_error(&e))?;
    }
    let filter_engine = cfg.capture.src.filter_engine;
    let filters = Filters::new(compile_all(&branch_filters(&cfg, &kinds), info.link_type, filter_engine).map_err(bad)?);
    let counts: Vec<Vec<Arc<BranchCounts>>> =
        queues.iter().map(|_| kinds.iter().map(|_| Arc::new(BranchCounts::default())).collect()).collect();
    let ethernet = info.link_type == LinkType::ETHERNET;
    let dir = cfg.streams.as_ref().and_then(|s| s.output.clone()).map(Arc::new);
    let make = |qi: usize, q: QueueId| -> anyhow::Result<Tee> {
        let mut branches: Vec<(Box<dyn Branch>, Arc<BranchCounts>)> = Vec::new();
        for (i, k) in kinds.iter().enumerate() {
            let handler: Box<dyn Branch> = match k {
                Kind::Record => Box::new(Recorder { shared: Arc::clone(record.as_ref().expect("a record branch has a writer")) }),
                Kind::Flows => {
                    let h = flows.as_ref().expect("a flows branch has an output").handler(q);
                    let layer = Streams::new(flow_cfg.as_ref().expect("flows"), info.link_type, q, queues.len(), h)
                        .map_err(|e| crate::exit::setting_error(&e))?;
                    Box::new(layer)
                }
                Kind::Streams => {
                    let c = plan.stream_cfg.as_ref().expect("a streams branch has its settings");
                    let writer = cfg
                        .streams
                        .as_ref()
                        .map(|s| Writer::new(if s.output.is_some() { dir.clone() } else { None }, ethernet, false, None));
                    let alerts = rules.as_ref().zip(events.as_ref()).map(|(r, ev)| AlertMatcher {
                        rules: Arc::clone(r),
                        matcher: r.matcher.lock().unwrap_or_else(PoisonError::into_inner).clone(),
                        generation: r.generation.load(Ordering::Acquire),
                        events: ev.clone(),
                        alerts: 0,
                    });
                    let stream_events = events.as_ref().filter(|_| wants("stream")).map(|ev| StreamEvents(ev.clone()));
                    let h: StreamBranch = (writer, (alerts, stream_events));
                    let layer = Streams::new(c, info.link_type, q, queues.len(), h).map_err(|e| crate::exit::setting_error(&e))?;
                    Box::new(layer)
                }
            };
            branches.push((handler, Arc::clone(&counts[qi][i])));
        }
        Ok(Tee::new(branches, Arc::clone(&filters)))
    };
    let mut tees = Vec::new();
    for (qi, &q) in queues.iter().enumerate() {
        tees.push(make(qi, q)?);
    }
    // The workers wait on the recorder's lock until its file is open, so
    // nothing is written before root is dropped.
    let gate = record.as_ref().map(|r| r.lock().unwrap_or_else(PoisonError::into_inner));
    let mut tees = tees.into_iter();
    let running = engine.start(move |_| tees.next().expect("a tee per queue"))?;
    let stop = running.stop_handle();
    let opened = (|| -> anyhow::Result<Option<crate::flows::Exporting>> {
        drop_privileges(&cfg.capture.src.live)?;
        let mut gate = gate;
        if let Some(g) = gate.as_mut() {
            g.writer.as_mut().expect("the writer is only taken at the end").prepare().map_err(|e| anyhow!("[record] write: {e}"))?;
        }
        drop(gate);
        flows.map(|f| f.start(&stop, events.as_ref().filter(|_| wants("flow")))).transpose()
    })();
    let exporting = match opened {
        Ok(x) => x,
        Err(e) => {
            stop.stop();
            if running.wait_for(Duration::from_secs(1)) {
                running.join();
            }
            return Err(e);
        }
    };
    let signals = Arc::new(Signals::default());
    take_signals(Arc::clone(&signals), stop.clone())?;
    announce("sensor", &running);
    let reloads = Arc::new(super::metrics::Reloads::default());
    let scrape = super::metrics::SensorMetrics {
        engine: weir_metrics::EngineMetrics::new(running.watch()),
        sensor: name.clone(),
        branches: queues
            .iter()
            .zip(&counts)
            .map(|(&q, per)| (q, kinds.iter().map(|k| k.name()).zip(per.iter().cloned()).collect()))
            .collect(),
        record: record.clone(),
        events: events.clone(),
        reloads: Arc::clone(&reloads),
    };
    crate::metrics::serve(metrics, scrape)?;
    crate::notify::ready(&format!("capturing {} on {} queue(s)", info.name, queues.len()));
    say(format!("capturing {} on {} queue(s): {}", info.name, queues.len(), plan.describe(&cfg)));

    // On a live source packet time is the clock's: it ages the files on
    // through quiet periods (as weir record does).
    let wall_clock_ages = cfg.record.as_ref().is_some_and(|r| r.max_age.is_some()) && info.iface.is_some();
    let (mut record_failure_said, mut events_failure_said) = (false, false);
    let (mut seen, mut last_stats, mut last_status) = ((0u64, 0u64, 0u64), Instant::now(), Instant::now());
    let stats_every =
        wants("stats").then(|| Duration::from_secs_f64(cfg.events.as_ref().map_or(super::config::STATS_INTERVAL, |e| e.stats_interval)));
    let status_every = (cfg.sensor.status_interval > 0.0).then(|| Duration::from_secs_f64(cfg.sensor.status_interval));
    let counters = |running: &weir::engine::Running<Tee>| -> serde_json::Value {
        let total = running.stats().total();
        let mut outputs = serde_json::Map::new();
        for (i, k) in kinds.iter().enumerate() {
            let (passed, filtered) = counts.iter().fold((0, 0), |(a, b), q| {
                let (p, f) = q[i].get();
                (a + p, b + f)
            });
            outputs.insert(k.name().into(), json!({"packets": passed, "filtered": filtered}));
        }
        if let Some(r) = &record {
            let s = r.lock().unwrap_or_else(PoisonError::into_inner);
            outputs["record"]["written"] = json!(s.packets);
        }
        let ev = events.as_ref().filter(|e| e.has_file()).map(|e| {
            let (st, pending) = e.counts();
            json!({"made": crate::events::TYPES.iter().zip(st.made).map(|(t, n)| (t.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
                   "written": st.written, "unwritten": st.unwritten, "pending": pending, "reopened": st.reopened, "error": st.error})
        });
        json!({"sensor": name, "uptime_s": running.elapsed().as_secs_f64(),
               "capture": {"received": total.received, "delivered": total.delivered, "filtered": total.filtered,
                           "capture_drops": total.capture_drops, "delivery_drops": total.delivery_drops, "in_flight": total.in_flight},
               "outputs": outputs,
               "events": ev,
               "kafka": kafka.as_ref().map(Kafka::counts)})
    };
    while !running.wait_for(Duration::from_millis(250)) {
        if let Some(r) = &record {
            let mut s = r.lock().unwrap_or_else(PoisonError::into_inner);
            if s.error.is_none() {
                if let Some(Err(e)) = s.writer.as_mut().map(weir::sink::rotate::RotatingWriter::flush) {
                    s.error = Some(anyhow!(e));
                }
            }
            // A failed output is said when it fails, not months later.
            if let (Some(e), false) = (&s.error, record_failure_said) {
                say(format!("[record] error: {e:#}: no more packets are written; the capture and the other outputs go on"));
                record_failure_said = true;
            }
            // The rolling buffer's deletions, said outside the lock the workers wait on.
            let deletions = match s.writer.as_mut() {
                Some(w) => {
                    if wall_clock_ages {
                        w.expire(crate::record::wall_clock_ns());
                    }
                    w.take_deletions()
                }
                None => Vec::new(),
            };
            drop(s);
            crate::record::log_deletions(&deletions);
        }
        let now = (signals.hup.load(Ordering::Relaxed), signals.usr1.load(Ordering::Relaxed), signals.usr2.load(Ordering::Relaxed));
        if now.0 != seen.0 {
            if let Some(ev) = &events {
                match ev.reopen() {
                    Ok(()) => say("SIGHUP: reopened the events file".into()),
                    Err(e) => say(format!("SIGHUP: cannot reopen the events file: {e}")),
                }
            }
        }
        if now.1 != seen.1 {
            say(format!("SIGUSR1: {}", counters(&running)));
        }
        if now.2 != seen.2 {
            crate::notify::reloading();
            match reload(&cfg, &kinds, info.link_type, filter_engine) {
                Ok(((set, matcher), waiting)) => {
                    if !waiting.is_empty() {
                        say(format!(
                            "SIGUSR2: {} changed beyond the filters and rules: those settings take effect at the next start",
                            waiting.join(", ")
                        ));
                    }
                    filters.replace(set);
                    if let (Some(r), Some(m)) = (&rules, matcher) {
                        *r.matcher.lock().unwrap_or_else(PoisonError::into_inner) = m;
                        // Release: the workers that see the new generation find the new matcher.
                        r.generation.fetch_add(1, Ordering::Release);
                    }
                    // Relaxed: a counter for scrapes.
                    reloads.done.fetch_add(1, Ordering::Relaxed);
                    say(format!("SIGUSR2: reloaded the filters and rules of {} (reload {})", cfg.file.display(), filters.generation()));
                }
                Err(e) => {
                    reloads.refused.fetch_add(1, Ordering::Relaxed);
                    say(format!("SIGUSR2: reload refused, the running filters and rules stay: {e:#}"));
                }
            }
            crate::notify::ready("reloaded");
        }
        seen = now;
        if let Some(ev) = &events {
            let error = ev.counts().0.error;
            if error.is_some() != events_failure_said {
                events_failure_said = error.is_some();
                if let Some(e) = error {
                    say(format!("[events] error: {e}: events are counted as not written until the file is reopened (SIGHUP)"));
                }
            }
        }
        if let (Some(every), Some(ev)) = (stats_every, &events) {
            if last_stats.elapsed() >= every {
                ev.stats(now_ns(), &counters(&running));
                last_stats = Instant::now();
            }
        }
        if let Some(every) = status_every {
            if last_status.elapsed() >= every {
                let t = running.stats().total();
                let line = format!(
                    "{} packets received, {} delivered ({} filtered, {}+{} dropped)",
                    t.received, t.delivered, t.filtered, t.capture_drops, t.delivery_drops
                );
                crate::notify::status(&line);
                say(line);
                last_status = Instant::now();
            }
        }
    }
    crate::notify::stopping();
    let final_counters = counters(&running);
    let mut report = running.join();
    finish(&cfg, &kinds, &mut report, record, exporting, events, final_counters, stats_every.is_some(), &say)
}

/// The record types the config's outputs make: what `[kafka]` publishes
/// unless its `kafka-types` says otherwise.
fn made_types(cfg: &Config) -> Vec<&'static str> {
    let mut t = vec!["stats"];
    if cfg.flows.is_some() {
        t.push("flow");
    }
    if cfg.streams.is_some() {
        t.push("stream");
    }
    if cfg.inspect.is_some() {
        t.push("alert");
    }
    t
}

/// What a reload takes: each branch's filter, and the rules (with `[inspect]`).
type Reloaded = (Vec<Option<Filter>>, Option<Arc<Matcher>>);

/// The filters and rules the config file says now, and the tables whose
/// other settings changed (they wait for a restart). Refused, with nothing
/// taken, when the file does not parse, a filter or the rules do not
/// compile, or the outputs are not the running ones.
fn reload(running: &Config, kinds: &[Kind], link: LinkType, engine: weir::filter::FilterEngine) -> anyhow::Result<(Reloaded, Vec<String>)> {
    let cfg = super::config::load(&running.file).map_err(|e| anyhow!("{e}"))?;
    let shape = |c: &Config| [c.record.is_some(), c.flows.is_some(), c.streams.is_some(), c.inspect.is_some()];
    if shape(&cfg) != shape(running) {
        anyhow::bail!("the file adds or removes outputs ([record], [flows], [streams], [inspect]): that takes a restart");
    }
    let set = compile_all(&branch_filters(&cfg, kinds), link, engine)?;
    let matcher = cfg.inspect.as_ref().map(crate::inspect::stream_matcher).transpose()?.map(|(m, _, _)| m);
    Ok(((set, matcher), running.changed_beyond_filters(&cfg)))
}

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn bad(e: anyhow::Error) -> anyhow::Error {
    crate::exit::bad_input(e)
}

/// A thread that takes the signals: TERM and INT stop the capture (a
/// second one exits at once), HUP, USR1 and USR2 are counted for the main
/// loop, which acts on them between two of its ticks.
fn take_signals(signals: Arc<Signals>, stop: weir::engine::StopHandle) -> anyhow::Result<()> {
    let mut it = signal_hook::iterator::Signals::new([SIGHUP, SIGUSR1, SIGUSR2, SIGTERM, SIGINT])?;
    std::thread::Builder::new().name("weir-signals".into()).spawn(move || {
        let mut stopping = false;
        for s in it.forever() {
            // Relaxed: counters the main loop polls; no data rides on them.
            match s {
                SIGHUP => signals.hup.fetch_add(1, Ordering::Relaxed),
                SIGUSR1 => signals.usr1.fetch_add(1, Ordering::Relaxed),
                SIGUSR2 => signals.usr2.fetch_add(1, Ordering::Relaxed),
                _ if stopping => std::process::exit(130),
                _ => {
                    stopping = true;
                    eprintln!("weir sensor: stopping: flushing every record (send the signal again to quit at once)");
                    stop.stop();
                    0
                }
            };
        }
    })?;
    Ok(())
}

/// Takes the branches back, finishes every output, and prints each one's
/// accounting.
#[allow(clippy::too_many_arguments)]
fn finish(
    cfg: &Config,
    kinds: &[Kind],
    report: &mut weir::engine::Report<Tee>,
    record: Option<Arc<Mutex<Shared>>>,
    exporting: Option<crate::flows::Exporting>,
    events: Option<Events>,
    counters: serde_json::Value,
    stats_events: bool,
    say: &dyn Fn(String),
) -> anyhow::Result<ExitCode> {
    let total = report.stats.total();
    let elapsed = report.elapsed;
    let mut ok = report.errors.is_empty();
    for e in &report.errors {
        say(format!("error: {e}"));
    }
    say(format!(
        "{} packets received in {:.2} s ({}pps): {} delivered, {} filtered, {} capture drops, {} delivery drops",
        total.received,
        elapsed.as_secs_f64(),
        human_rate(total.delivered as f64 / elapsed.as_secs_f64().max(1e-9)),
        total.delivered,
        total.filtered,
        total.capture_drops,
        total.delivery_drops
    ));
    let mut by_kind: Vec<Vec<Box<dyn std::any::Any + Send>>> = kinds.iter().map(|_| Vec::new()).collect();
    for (_, tee) in std::mem::take(&mut report.handlers) {
        for (i, b) in tee.into_branches().into_iter().enumerate() {
            by_kind[i].push(b);
        }
    }
    let outputs = &counters["outputs"];
    let mut exporting = exporting;
    for (k, handlers) in kinds.iter().zip(by_kind) {
        let o = &outputs[k.name()];
        match k {
            Kind::Record => {
                let r = record.as_ref().expect("record");
                let mut s = r.lock().unwrap_or_else(PoisonError::into_inner);
                let passed = o["packets"].as_u64().unwrap_or(0);
                let done = s.writer.take().map(|mut w| {
                    crate::record::log_deletions(&w.take_deletions());
                    w.finish_with_deletions()
                });
                let files = match (s.error.take(), done) {
                    (None, Some(Ok(done))) => {
                        crate::record::log_deletions(&done.deletions);
                        let r = cfg.record.as_ref().expect("record");
                        if r.budget.is_some() || r.max_age.is_some() || r.rotation.max_files.is_some() {
                            say(format!("[record] {}", crate::record::deletion_summary(&done.totals)));
                        }
                        done.files
                    }
                    (e, f) => {
                        ok = false;
                        let e = e.map(|e| format!("{e:#}")).or_else(|| f.and_then(Result::err).map(|e| e.to_string())).unwrap_or_default();
                        say(format!("[record] error: {e}: {} packets not written", passed.saturating_sub(s.packets)));
                        Vec::new()
                    }
                };
                say(format!(
                    "[record] {} packets ({} filtered out): {} written to {} file(s){}",
                    passed,
                    o["filtered"],
                    s.packets,
                    files.len(),
                    files.last().map_or(String::new(), |f| format!(", the last {}", f.display()))
                ));
            }
            Kind::Flows => {
                let mut layer = StreamStats::default();
                let mut hs = Vec::new();
                for h in handlers {
                    let l = h.downcast::<Streams<ToExporter>>().map_err(|_| anyhow!("the flows branch is a flows layer"))?;
                    layer.add(&l.stats());
                    hs.push(l.into_handler());
                }
                let flows = cfg.flows.as_ref().expect("flows");
                if let Some(x) = exporting.take() {
                    let s = x.finish(flows, hs, &layer, elapsed, events.as_ref())?;
                    ok &= s.lost == 0 && !s.bounced && !s.file_error && s.adds_up;
                    say(format!("[flows] {} packets ({} filtered out): {}", o["packets"], o["filtered"], s.json));
                }
            }
            Kind::Streams => {
                let mut layer = StreamStats::default();
                let (mut files, mut write_errors, mut first_error, mut alerts) = (0, 0, None, 0);
                for h in handlers {
                    let l = h.downcast::<Streams<StreamBranch>>().map_err(|_| anyhow!("the streams branch is a stream layer"))?;
                    layer.add(&l.stats());
                    let (w, (a, _)) = l.into_handler();
                    if let Some(w) = w {
                        files += w.files;
                        write_errors += w.write_errors;
                        first_error = first_error.or(w.first_error);
                    }
                    alerts += a.map_or(0, |a| a.alerts);
                }
                say(format!(
                    "[streams] {} packets ({} filtered out): {} streams in {} connections, {} bytes delivered, {} files, {} alerts",
                    o["packets"], o["filtered"], layer.streams, layer.connections, layer.delivered, files, alerts
                ));
                say(format!("[streams] {}", packet_line(&layer)));
                if let Some(e) = first_error {
                    ok = false;
                    say(format!("[streams] {write_errors} write error(s), the first: {e}"));
                }
            }
        }
    }
    if let (Some(ev), true) = (&events, stats_events) {
        ev.stats(now_ns(), &counters);
    }
    if let Some(ev) = events.as_ref().filter(|e| e.has_file()) {
        let st = ev.finish();
        let made: u64 = st.made.iter().sum();
        say(format!(
            "[events] {made} events made ({}): {} written, {} not written{}",
            crate::events::TYPES.iter().zip(st.made).map(|(t, n)| format!("{n} {t}")).collect::<Vec<_>>().join(", "),
            st.written,
            st.unwritten,
            st.error.as_ref().map_or(String::new(), |e| format!(" (the first error: {e})"))
        ));
        if st.written + st.unwritten != made {
            ok = false;
            say(format!("internal accounting error: {made} events made, {} written or not", st.written + st.unwritten));
        }
        ok &= st.error.is_none();
    }
    if let Some(k) = events.as_ref().and_then(Events::kafka) {
        let st = k.finish();
        say(format!("[kafka] {} ({}): {}", k.brokers(), k.topic_pattern(), st.line()));
        if st.in_flight > 0 {
            say(format!(
                "[kafka] {} records were still in flight after kafka-flush-timeout and are lost{}",
                st.in_flight,
                st.broker_error.as_ref().map(|e| format!(" (the brokers: {e})")).unwrap_or_default()
            ));
        }
        if !st.adds_up() {
            say(format!("internal accounting error: [kafka] {}", st.line()));
        }
        ok &= st.adds_up() && st.dropped_total() + st.failed_total() + st.in_flight == 0;
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
