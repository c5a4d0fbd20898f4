//! Running a checked config ([`Plan`]): the outputs opened, the capture
//! started with a tee per queue, the signals taken, and at the end each
//! output's accounting.

use super::config::Config;
use super::output::{self, Commit, End, Env, Gate, Gated, Output, Queue, Type};
use super::plan::{kernel_plan, KernelPlan, Plan};
use crate::events::Events;
use crate::kafka::Kafka;
use crate::run::{announce, drop_privileges, human_rate};
use anyhow::anyhow;
use serde_json::json;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use weir::filter::Filter;
use weir::output::tee::{BranchCounts, Filters, Tee};
use weir::LinkType;

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
    let env =
        Env { info: &info, events: events.as_ref(), wants: &wants, stream_cfg: plan.stream_cfg.as_ref(), matcher: plan.matcher.as_ref() };
    let types = output::present(&cfg);
    let mut outputs = types.iter().map(|t| (t.open)(&cfg, &env)).collect::<anyhow::Result<Vec<_>>>()?;
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
