//! Checking a parsed config against the machine ([`Plan::check`]: what
//! can be known without capturing: filters, files, rules, memory), then
//! running it: the outputs opened, the capture started with a tee per
//! queue, the signals taken, and at the end each output's accounting.

use super::config::{Config, ConfigError, Problem};
use super::output::{self, Commit, End, Env, Gate, Gated, Output, Queue, Type};
use crate::events::Events;
use crate::flows::FlowOutput;
use crate::inspect::Matcher;
use crate::kafka::Kafka;
use crate::run::{announce, drop_privileges, human_rate};
use anyhow::anyhow;
use serde_json::json;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use weir::filter::Filter;
use weir::output::tee::{BranchCounts, Filters, Tee};
use weir::stream::StreamConfig;
use weir::{LinkType, QueueId};

/// What the checks found and what the run builds from.
pub struct Plan {
    /// The reassembling layer's settings (`[streams]` and `[inspect]` share it).
    pub(super) stream_cfg: Option<StreamConfig>,
    /// The rules' matcher.
    pub(super) matcher: Option<Arc<Matcher>>,
    memory: weir::memory::Plan,
    kernel: KernelPlan,
}

/// The kernel cutoff as the config has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KernelPlan {
    /// `kernel-cutoff = "off"`.
    Off,
    /// On by default, and off because the outputs need what it would drop.
    Unfit(&'static str),
    /// The flow map's entries to ask a live source for (a trace file has
    /// no kernel to cut in: there it does nothing).
    On(u32),
}

/// Whether the kernel cutoff can be on. It drops a stream direction's
/// packets in the kernel once the stream layer is past its cutoff, and only
/// counts them: exact for that one layer's records, wrong for any output
/// that needs the packets themselves or cuts elsewhere.
fn kernel_plan(cfg: &Config) -> Result<KernelPlan, String> {
    let k = &cfg.capture.kernel;
    if !k.kernel_cutoff {
        return Ok(KernelPlan::Off);
    }
    let layers = usize::from(cfg.flows.is_some()) + usize::from(cfg.streams.is_some() || cfg.inspect.is_some());
    let filtered = cfg.capture.src.filter.is_some() || output::present(cfg).iter().any(|t| (t.filter)(cfg).is_some());
    let unfit = if cfg.record.is_some() {
        Some("[record] keeps every packet, and the kernel cutoff drops a stream's packets once it is past its cutoff")
    } else if layers > 1 {
        Some("[flows] and [streams]/[inspect] run two stream layers, which cut a stream at different points, and the one flow map would cut for both")
    } else if filtered {
        Some("a filter (in [capture] or an output) may tell apart packets of one stream, which the kernel's counts could not")
    } else {
        None
    };
    let explicit = cfg.tables.get("capture").and_then(toml::Value::as_table).is_some_and(|t| t.contains_key("kernel-cutoff"));
    match unfit {
        Some(why) if explicit => Err(format!("cannot be on here: {why} (leave it out or say \"off\")")),
        Some(why) => Ok(KernelPlan::Unfit(why)),
        None => Ok(KernelPlan::On(k.kernel_flows)),
    }
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
        if let Err(e) = src.balance.parse::<weir::BalanceMode>() {
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
        let kernel = kernel_plan(cfg).unwrap_or_else(|e| {
            p("capture", "kernel-cutoff", e);
            KernelPlan::Off
        });
        // The cutoff's installs wait as long in whichever layer cuts.
        let stream_cfg = stream_cfg.map(|c| StreamConfig { kernel_install_after: cfg.capture.kernel.kernel_install_after, ..c });
        if let Err(e) = memory.check() {
            p("capture", "", format!("{e}"));
        }
        if problems.is_empty() {
            Ok(Plan { stream_cfg, matcher, memory, kernel })
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
        let live =
            cfg.capture.src.source.parse::<weir::source::SourceSpec>().is_ok_and(|s| matches!(s, weir::source::SourceSpec::Live { .. }));
        match self.kernel {
            KernelPlan::On(_) if live => parts.push("the kernel cutoff".into()),
            KernelPlan::Unfit(why) if live => parts.push(format!("no kernel cutoff ({why})")),
            _ => {}
        }
        parts.join(", ")
    }
}

/// Each output's filter expression (its own, or none), in `outputs`' order.
fn branch_filters(cfg: &Config, outputs: &[&Type]) -> Vec<Option<String>> {
    outputs.iter().map(|t| (t.filter)(cfg)).collect()
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
    let kernel_flows = match plan.kernel {
        KernelPlan::On(entries) => entries,
        KernelPlan::Off | KernelPlan::Unfit(_) => 0,
    };
    let engine = cfg.capture.src.engine_with(plan.memory.clone(), kernel_flows)?;
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
    let env = Env { info: &info, events: events.as_ref(), wants: &wants };
    let types = output::present(&cfg);
    let mut outputs = types.iter().map(|t| (t.open)(&cfg, &plan, &env)).collect::<anyhow::Result<Vec<_>>>()?;
    let filter_engine = cfg.capture.src.filter_engine;
    let filters = Filters::new(compile_all(&branch_filters(&cfg, &types), info.link_type, filter_engine).map_err(bad)?);
    let counts: Vec<Vec<Arc<BranchCounts>>> =
        queues.iter().map(|_| types.iter().map(|_| Arc::new(BranchCounts::default())).collect()).collect();
    let gate = Arc::new(Gate::default());
    let mut tees = Vec::new();
    for (qi, &q) in queues.iter().enumerate() {
        let mut queue = Queue { id: q, of: queues.len(), info: &info, kernel: engine.kernel_cutoff()? };
        let branches =
            outputs.iter().zip(&counts[qi]).map(|(o, c)| Ok((o.branch(&mut queue)?, Arc::clone(c)))).collect::<anyhow::Result<Vec<_>>>()?;
        tees.push(Gated::new(Tee::new(branches, Arc::clone(&filters)), Arc::clone(&gate)));
    }
    let mut tees = tees.into_iter();
    let running = engine.start(move |_| tees.next().expect("a tee per queue"))?;
    let stop = running.stop_handle();
    let started = (|| -> anyhow::Result<()> {
        drop_privileges(&cfg.capture.src.live)?;
        outputs.iter_mut().try_for_each(|o| o.start(&stop, &env))
    })();
    if let Err(e) = started {
        gate.fail();
        stop.stop();
        if running.wait_for(Duration::from_secs(1)) {
            running.join();
        }
        return Err(e);
    }
    gate.open();
    let signals = Arc::new(Signals::default());
    take_signals(Arc::clone(&signals), stop.clone())?;
    announce("sensor", &running);
    let outputs = Arc::new(Mutex::new(outputs));
    let reloads = Arc::new(super::metrics::Reloads::default());
    let scrape = super::metrics::SensorMetrics {
        engine: weir_metrics::EngineMetrics::new(running.watch()),
        sensor: name.clone(),
        branches: queues
            .iter()
            .zip(&counts)
            .map(|(&q, per)| (q, types.iter().map(|t| t.name).zip(per.iter().cloned()).collect()))
            .collect(),
        outputs: Arc::clone(&outputs),
        events: events.clone(),
        reloads: Arc::clone(&reloads),
    };
    crate::metrics::serve(metrics, scrape)?;
    crate::notify::ready(&format!("capturing {} on {} queue(s)", info.name, queues.len()));
    say(format!("capturing {} on {} queue(s): {}", info.name, queues.len(), plan.describe(&cfg)));

    let lock = || outputs.lock().unwrap_or_else(PoisonError::into_inner);
    let mut events_failure_said = false;
    let (mut seen, mut last_stats, mut last_status) = ((0u64, 0u64, 0u64), Instant::now(), Instant::now());
    let stats_every =
        wants("stats").then(|| Duration::from_secs_f64(cfg.events.as_ref().map_or(super::config::STATS_INTERVAL, |e| e.stats_interval)));
    let status_every = (cfg.sensor.status_interval > 0.0).then(|| Duration::from_secs_f64(cfg.sensor.status_interval));
    let counters = |running: &weir::engine::Running<Gated<Tee>>| -> serde_json::Value {
        let total = running.stats().total();
        let mut by_name = serde_json::Map::new();
        for (i, (t, o)) in types.iter().zip(lock().iter()).enumerate() {
            let (passed, filtered) = counts.iter().fold((0, 0), |(a, b), q| {
                let (p, f) = q[i].get();
                (a + p, b + f)
            });
            let mut c = serde_json::Map::new();
            c.insert("packets".into(), passed.into());
            c.insert("filtered".into(), filtered.into());
            o.counters(&mut c);
            by_name.insert(t.name.into(), c.into());
        }
        let ev = events.as_ref().filter(|e| e.has_file()).map(|e| {
            let (st, pending) = e.counts();
            json!({"made": crate::events::TYPES.iter().zip(st.made).map(|(t, n)| (t.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
                   "written": st.written, "unwritten": st.unwritten, "pending": pending, "reopened": st.reopened, "error": st.error})
        });
        json!({"sensor": name, "uptime_s": running.elapsed().as_secs_f64(),
               "capture": {"received": total.received, "delivered": total.delivered, "filtered": total.filtered,
                           "capture_drops": total.capture_drops, "delivery_drops": total.delivery_drops, "in_flight": total.in_flight},
               "outputs": by_name,
               "events": ev,
               "kafka": kafka.as_ref().map(Kafka::counts)})
    };
    while !running.wait_for(Duration::from_millis(250)) {
        lock().iter_mut().for_each(|o| o.tick(&say));
        let now = (signals.hup.load(Ordering::Relaxed), signals.usr1.load(Ordering::Relaxed), signals.usr2.load(Ordering::Relaxed));
        if now.0 != seen.0 {
            if let Some(ev) = &events {
                match ev.reopen() {
                    Ok(()) => say("SIGHUP: reopened the events file".into()),
                    Err(e) => say(format!("SIGHUP: cannot reopen the events file: {e}")),
                }
            }
            for (t, o) in types.iter().zip(lock().iter_mut()) {
                if let Some(done) = o.next_file() {
                    say(format!("SIGHUP: [{}] {done}", t.name));
                }
            }
        }
        if now.1 != seen.1 {
            say(format!("SIGUSR1: {}", counters(&running)));
        }
        if now.2 != seen.2 {
            crate::notify::reloading();
            let taken = reload(&cfg, plan.kernel, &types, &lock(), info.link_type, filter_engine).and_then(|r| {
                // The capture filter first: the kernel may refuse it, and then
                // nothing else changes.
                running.replace_filter(r.capture.clone()).map_err(|e| anyhow!("the capture filter could not be put in place: {e}"))?;
                Ok(r)
            });
            match taken {
                Ok(Reloaded { capture: _, outputs: set, commits, waiting }) => {
                    if !waiting.is_empty() {
                        say(format!(
                            "SIGUSR2: {} changed beyond the filters and rules: those settings take effect at the next start",
                            waiting.join(", ")
                        ));
                    }
                    filters.replace(set);
                    commits.into_iter().for_each(|c| c());
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
    let outputs = std::mem::take(&mut *lock());
    finish(&cfg, &types, outputs, &mut report, events, final_counters, stats_every.is_some(), &say)
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

/// What a reload puts in force, compiled.
struct Reloaded {
    /// The capture filter.
    capture: Option<Filter>,
    /// Each output's filter, in the tee's order.
    outputs: Vec<Option<Filter>>,
    /// Each output's own part (its rules).
    commits: Vec<Commit>,
    /// The tables whose other settings changed: they wait for a restart.
    waiting: Vec<String>,
}

/// The filters and rules the config file says now. Refused, with nothing
/// taken, when the file does not parse, a filter or the rules do not
/// compile, the outputs are not the running ones, or the new filters would
/// turn the running kernel cutoff off.
fn reload(
    running: &Config,
    kernel: KernelPlan,
    types: &[&Type],
    outputs: &[Box<dyn Output>],
    link: LinkType,
    engine: weir::filter::FilterEngine,
) -> anyhow::Result<Reloaded> {
    let cfg = super::config::load(&running.file).map_err(|e| anyhow!("{e}"))?;
    let names = |c: &Config| output::present(c).iter().map(|t| t.name).collect::<Vec<_>>();
    if names(&cfg) != names(running)
        || cfg.streams.is_some() != running.streams.is_some()
        || cfg.inspect.is_some() != running.inspect.is_some()
    {
        anyhow::bail!("the file adds or removes outputs ([record], [flows], [streams], [inspect]): that takes a restart");
    }
    if matches!(kernel, KernelPlan::On(_)) && kernel_plan(&cfg) != Ok(kernel) {
        anyhow::bail!("the kernel cutoff is on, and a filter would turn it off: that takes a restart");
    }
    let mut set = compile_all(std::slice::from_ref(&cfg.capture.src.filter), link, engine)?;
    let capture = set.pop().flatten();
    let outputs_set = compile_all(&branch_filters(&cfg, types), link, engine)?;
    let commits = outputs.iter().map(|o| o.reload(&cfg)).collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Reloaded { capture, outputs: outputs_set, commits, waiting: running.changed_beyond_filters(&cfg) })
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
    types: &[&Type],
    outputs: Vec<Box<dyn Output>>,
    report: &mut weir::engine::Report<Gated<Tee>>,
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
    let mut by_output: Vec<Vec<Box<dyn std::any::Any + Send>>> = outputs.iter().map(|_| Vec::new()).collect();
    for (_, tee) in std::mem::take(&mut report.handlers) {
        for (i, b) in tee.into_inner().into_branches().into_iter().enumerate() {
            by_output[i].push(b);
        }
    }
    for ((t, o), branches) in types.iter().zip(outputs).zip(by_output) {
        let c = &counters["outputs"][t.name];
        let count = |k: &str| c[k].as_u64().unwrap_or(0);
        let end = End { cfg, elapsed, passed: count("packets"), filtered: count("filtered"), events: events.as_ref(), say };
        ok &= o.finish(branches, &end)?;
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
