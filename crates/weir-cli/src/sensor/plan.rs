//! Checking a parsed config against the machine ([`Plan::check`]): what can
//! be known without capturing (filters, files, rules, memory, the tables'
//! agreement), and the plan the run builds from.

use super::config::{Config, ConfigError, Problem};
use super::output::{self};
use crate::flows::FlowOutput;
use crate::inspect::Matcher;
use std::path::Path;
use std::sync::Arc;
use weir::filter::Filter;
use weir::stream::StreamConfig;
use weir::{LinkType, QueueId};

/// What the checks found and what the run builds from.
pub struct Plan {
    /// The reassembling layer's settings (`[streams]` and `[inspect]` share it).
    pub(super) stream_cfg: Option<StreamConfig>,
    /// The rules' matcher.
    pub(super) matcher: Option<Arc<Matcher>>,
    pub(super) memory: weir::memory::Plan,
    pub(super) kernel: KernelPlan,
}

/// The kernel cutoff as the config has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KernelPlan {
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
pub(super) fn kernel_plan(cfg: &Config) -> Result<KernelPlan, String> {
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
