//! The sensor's config file: TOML (the `toml` crate), one table per part.
//!
//! Contract: a table's keys are the long options of the command whose
//! output it configures, with the same values, defaults, checks and
//! `--help` text: `[capture]` takes the source options every capturing
//! command has (`source` is the positional SOURCE), `[record]` those of
//! `weir record`, `[flows]` of `weir flows`, `[streams]` of `weir streams`,
//! `[inspect]` of `weir inspect`, each output table also `filter`, its own
//! libpcap filter on top of the capture's. So nothing an operator can say on
//! the command line is missing from the file, and the two never disagree:
//! the file's values go through the commands' own parsers (clap's).
//! `[events]`, `[metrics]` and `[sensor]` are the sensor's own (see
//! [`EventsConfig`]).
//!
//! Every error names the file, the line and the key (or the table, for a
//! missing key): a TOML syntax error, an unknown table or key (with the
//! table it belongs in, when it is another's), a value of the wrong type, a
//! value the option's parser refuses. All are collected, not just the
//! first, and a config with any error starts nothing.

use clap::{Args, Command, FromArgMatches};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One problem with the config, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: usize,
    /// `[table] key`, or `[table]`, or empty for the file as a whole.
    pub place: String,
    pub message: String,
}

/// Every problem found in a config file.
#[derive(Debug)]
pub struct ConfigError {
    pub file: PathBuf,
    pub problems: Vec<Problem>,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            let place = if p.place.is_empty() { String::new() } else { format!(" {}:", p.place) };
            write!(f, "{}:{}:{place} {}", self.file.display(), p.line, p.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// The `[capture]` table's options: every capturing command's source
/// options, and the kernel cutoff of `weir flows` and `weir streams`.
#[derive(Args, Debug)]
pub struct CaptureTable {
    #[command(flatten)]
    pub src: crate::run::SourceArgs,
    #[command(flatten)]
    pub kernel: crate::run::KernelCutoffArgs,
}

/// The `[kafka]` table's options: those of `--kafka` on the commands, the
/// brokers under the key `brokers` (the commands' `--kafka`).
#[derive(Args, Debug)]
pub struct KafkaTable {
    #[command(flatten)]
    pub kafka: crate::kafka::KafkaArgs,
}

/// `[events]`: the EVE JSON lines (Suricata's eve.json shape).
#[derive(Debug, Clone, PartialEq)]
pub struct EventsConfig {
    /// The file (`-`: standard output).
    pub path: String,
    /// Which events: any of flow, stream, alert, stats.
    pub types: Vec<String>,
    /// Seconds between two `stats` events.
    pub stats_interval: f64,
    /// Whether `types` was given (else every type the outputs make).
    pub explicit_types: bool,
}

/// `[sensor]`: the sensor as a whole.
#[derive(Debug, Clone, PartialEq)]
pub struct SensorTable {
    /// Its name in stats events, metrics and logs.
    pub name: String,
    /// Seconds between two status lines on standard error (0: none).
    pub status_interval: f64,
}

/// A config file, read and parsed: each table as its command's options.
#[derive(Debug)]
pub struct Config {
    pub file: PathBuf,
    pub sensor: SensorTable,
    pub capture: CaptureTable,
    pub record: Option<crate::record::RecordArgs>,
    pub flows: Option<crate::flows::FlowsArgs>,
    pub streams: Option<crate::streams::StreamsArgs>,
    pub inspect: Option<crate::inspect::InspectArgs>,
    pub events: Option<EventsConfig>,
    /// `[kafka]`: the options of `--kafka` (`brokers` for `kafka`).
    pub kafka: Option<crate::kafka::KafkaArgs>,
    /// `[metrics] listen`.
    pub metrics: Option<String>,
    /// The line of each table's header, for later checks to point at.
    pub lines: Lines,
    /// The file's tables as TOML, for a reload to tell what changed.
    pub tables: toml::Table,
}

impl Config {
    /// The tables whose settings differ in `new` beyond what a reload takes
    /// (the capture's and the outputs' filters, and the rules' file
    /// contents): those changes wait for a restart.
    pub fn changed_beyond_filters(&self, new: &Config) -> Vec<String> {
        let strip = |t: &toml::Table, name: &str| -> Option<toml::Table> {
            let mut t = t.get(name)?.as_table()?.clone();
            t.remove("filter");
            Some(t)
        };
        TABLES.iter().filter(|name| strip(&self.tables, name) != strip(&new.tables, name)).map(|name| format!("[{name}]")).collect()
    }
}

/// Where tables and keys are in the file.
#[derive(Debug, Default, Clone)]
pub struct Lines {
    /// (table, key or "", line)
    entries: Vec<(String, String, usize)>,
}

impl Lines {
    /// Finds table headers and `key =` lines. The sensor's file is flat
    /// tables of plain keys; a key not found (written in another TOML
    /// form) is placed at its table's header.
    fn scan(text: &str) -> Lines {
        let mut entries = Vec::new();
        let mut table = String::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if let Some(rest) = line.strip_prefix('[') {
                if let Some(name) = rest.split(']').next() {
                    table = name.trim().to_string();
                    entries.push((table.clone(), String::new(), i + 1));
                }
            } else if let Some((key, _)) = line.split_once('=') {
                let key = key.trim().trim_matches('"').to_string();
                if !key.is_empty() && !key.starts_with('#') {
                    entries.push((table.clone(), key, i + 1));
                }
            }
        }
        Lines { entries }
    }

    /// The line of `key` in `table` ("" for the header), or of the table.
    pub fn of(&self, table: &str, key: &str) -> usize {
        let find = |k: &str| self.entries.iter().find(|(t, kk, _)| t == table && kk == k).map(|e| e.2);
        find(key).or_else(|| find("")).unwrap_or(1)
    }
}

/// The tables the sensor knows, in the order they are read.
const TABLES: [&str; 9] = ["sensor", "capture", "record", "flows", "streams", "inspect", "events", "kafka", "metrics"];

/// Seconds between two `stats` events when `[events]` does not say.
pub const STATS_INTERVAL: f64 = 60.0;

/// Keys of the commands' options that the sensor leaves to another table
/// or does itself, and what to say instead.
fn elsewhere(key: &str) -> Option<&'static str> {
    Some(match key {
        "metrics" => "metrics are served by the [metrics] table (listen = \"ADDR:PORT\")",
        "stats" => "the sensor's totals go to its log at the end and as `stats` events ([events])",
        "kafka" | "brokers" | "topic" => "Kafka is set in the [kafka] table, for every output at once",
        k if k.starts_with("kafka-") => "Kafka is set in the [kafka] table, for every output at once",
        "events" => "events go to the [events] table's file",
        "json" => "records go out as events: add \"stream\" to [events] types",
        "quiet" => "status lines are set in [sensor] (status-interval = 0 for none)",
        "print-rules" => "print the rules with `weir inspect --print-rules`",
        "streams" => "the sensor's [inspect] always matches on the stream layer's data",
        _ => return None,
    })
}

/// Reads and parses `path`: every problem, or the config.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let fail = |problems| ConfigError { file: path.to_path_buf(), problems };
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail(vec![Problem { line: 0, place: String::new(), message: format!("cannot read the config: {e}") }]))?;
    parse(&text, path)
}

/// Parses a config's text (named `file` in errors).
pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
    let fail = |problems| ConfigError { file: file.to_path_buf(), problems };
    let doc: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            let e: toml::de::Error = e;
            let line = e.span().map_or(1, |s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            return Err(fail(vec![Problem { line, place: String::new(), message: format!("not valid TOML: {}", e.message()) }]));
        }
    };
    let lines = Lines::scan(text);
    let mut problems = Vec::new();
    for (name, value) in &doc {
        if !TABLES.contains(&name.as_str()) {
            let line = lines.of(name, "");
            problems.push(Problem {
                line,
                place: format!("[{name}]"),
                message: format!("no such table (the sensor's tables: {})", TABLES.map(|t| format!("[{t}]")).join(", ")),
            });
        } else if !value.is_table() {
            problems.push(Problem {
                line: lines.of("", name),
                place: name.clone(),
                message: format!("`{name}` must be a table, [{name}]"),
            });
        }
    }
    let empty = toml::Table::new();
    let table = |name: &str| doc.get(name).and_then(toml::Value::as_table);
    let mut p = Parser { lines: &lines, problems: &mut problems };

    let capture_t = table("capture");
    if capture_t.is_none() {
        p.problems.push(Problem {
            line: 1,
            place: "[capture]".into(),
            message: "missing: the sensor needs a [capture] table with a source".into(),
        });
    }
    let capture = p.command::<CaptureTable>("capture", capture_t.unwrap_or(&empty), None, &[]);
    let source_ids = source_option_names();
    let record = table("record").and_then(|t| p.command::<crate::record::RecordArgs>("record", t, Some("-"), &source_ids));
    let flows = table("flows").and_then(|t| p.command::<crate::flows::FlowsArgs>("flows", t, Some("-"), &source_ids));
    let streams = table("streams").and_then(|t| p.command::<crate::streams::StreamsArgs>("streams", t, Some("-"), &source_ids));
    let inspect = table("inspect").and_then(|t| p.command::<crate::inspect::InspectArgs>("inspect", t, Some("-"), &source_ids));
    let events = table("events").and_then(|t| p.events(t));
    let kafka = table("kafka").and_then(|t| p.command::<KafkaTable>("kafka", t, None, &source_ids)).map(|k| k.kafka);
    let metrics = table("metrics").and_then(|t| p.metrics(t));
    let sensor = p.sensor(table("sensor").unwrap_or(&empty));
    if problems.is_empty() {
        if let (Some(capture), Some(sensor)) = (capture, sensor) {
            return Ok(Config {
                file: file.to_path_buf(),
                sensor,
                capture,
                record,
                flows,
                streams,
                inspect,
                events,
                kafka,
                metrics,
                lines,
                tables: doc,
            });
        }
    }
    problems.sort_by_key(|p| p.line);
    Err(fail(problems))
}

/// The long names of the source options, which only `[capture]` takes
/// (`filter` excepted: every output has its own).
fn source_option_names() -> Vec<String> {
    CaptureTable::augment_args(Command::new("capture"))
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .filter(|l| l != "filter")
        .collect()
}

struct Parser<'a> {
    lines: &'a Lines,
    problems: &'a mut Vec<Problem>,
}

impl Parser<'_> {
    fn problem(&mut self, table: &str, key: &str, message: String) {
        let place = if key.is_empty() { format!("[{table}]") } else { format!("[{table}] {key}") };
        self.problems.push(Problem { line: self.lines.of(table, key), place, message });
    }

    /// Parses `t` as the options of `A`: each key a long option.
    /// `positional`: the value given for a required positional argument
    /// the table does not set (an output table's SOURCE, which is
    /// `[capture]`'s). `refused`: keys that belong in `[capture]`.
    fn command<A: Args + FromArgMatches>(
        &mut self,
        name: &'static str,
        t: &toml::Table,
        positional: Option<&str>,
        refused: &[String],
    ) -> Option<A> {
        let cmd = A::augment_args(Command::new(name)).no_binary_name(true).disable_help_flag(true);
        let mut argv: Vec<String> = Vec::new();
        let mut positionals: Vec<String> = Vec::new();
        let before = self.problems.len();
        for (key, value) in t {
            if refused.contains(key) {
                self.problem(name, key, format!("`{key}` is a capture option: it belongs in [capture] (one capture feeds every output)"));
                continue;
            }
            // [kafka] is the options of --kafka, whose own value is `brokers`.
            let long = if name == "kafka" && key == "brokers" { "kafka" } else { key.as_str() };
            if let Some(why) = elsewhere(key).filter(|_| name != "kafka") {
                self.problem(name, key, format!("not in a sensor's [{name}]: {why}"));
                continue;
            }
            let arg = cmd.get_arguments().find(|a| a.get_long() == Some(long) || (a.get_long().is_none() && a.get_id() == long));
            let Some(arg) = arg else {
                let known: BTreeSet<&str> =
                    cmd.get_arguments().filter_map(|a| a.get_long()).filter(|l| !refused.iter().any(|r| r == l)).collect();
                let near = known.iter().find(|k| k.contains(key.as_str()) || key.contains(*k)).map(|k| format!(" (did you mean `{k}`?)"));
                self.problem(
                    name,
                    key,
                    format!("unknown key `{key}`{}; the keys of [{name}] are the long options of its command", near.unwrap_or_default()),
                );
                continue;
            };
            let takes_value = arg.get_action().takes_values();
            let values: Vec<String> = match value {
                toml::Value::Boolean(b) if !takes_value => {
                    if *b {
                        argv.push(format!("--{key}"));
                    }
                    continue;
                }
                toml::Value::Boolean(b) if arg.get_long().is_some() => vec![if *b { "on" } else { "off" }.to_string()],
                toml::Value::String(s) => vec![s.clone()],
                toml::Value::Integer(n) => vec![n.to_string()],
                toml::Value::Float(x) => vec![x.to_string()],
                toml::Value::Array(items) if takes_value => {
                    let mut v = Vec::new();
                    for item in items {
                        match item {
                            toml::Value::String(s) => v.push(s.clone()),
                            toml::Value::Integer(n) => v.push(n.to_string()),
                            toml::Value::Float(x) => v.push(x.to_string()),
                            other => {
                                self.problem(name, key, format!("`{key}`: a list of strings or numbers, not of {}", other.type_str()));
                            }
                        }
                    }
                    v
                }
                other => {
                    let want = if takes_value { "a string or a number" } else { "true or false" };
                    self.problem(name, key, format!("`{key}` must be {want}, not {}", other.type_str()));
                    continue;
                }
            };
            if !takes_value {
                self.problem(name, key, format!("`{key}` must be true or false"));
                continue;
            }
            match arg.get_long() {
                Some(long) => {
                    for v in values {
                        argv.push(format!("--{long}={v}"));
                    }
                }
                None => positionals.extend(values),
            }
        }
        if self.problems.len() > before {
            return None;
        }
        if positionals.is_empty() {
            positionals.extend(positional.map(str::to_string));
        }
        if name == "inspect" {
            argv.push("--streams".into());
        }
        argv.push("--".into());
        argv.extend(positionals);
        match cmd.try_get_matches_from(&argv).and_then(|m| A::from_arg_matches(&m)) {
            Ok(a) => Some(a),
            Err(e) => {
                let (key, message) = clap_problem(&e);
                self.problem(name, &key, message);
                None
            }
        }
    }

    fn events(&mut self, t: &toml::Table) -> Option<EventsConfig> {
        let mut c = EventsConfig {
            path: String::new(),
            types: crate::events::TYPES.map(str::to_string).to_vec(),
            stats_interval: STATS_INTERVAL,
            explicit_types: false,
        };
        let before = self.problems.len();
        for (key, v) in t {
            match (key.as_str(), v) {
                ("path", toml::Value::String(s)) if !s.is_empty() => c.path = s.clone(),
                ("types", toml::Value::Array(items)) => {
                    c.types.clear();
                    c.explicit_types = true;
                    for i in items {
                        match i.as_str() {
                            Some(s) if crate::events::TYPES.contains(&s) => {
                                if !c.types.iter().any(|t| t == s) {
                                    c.types.push(s.to_string());
                                }
                            }
                            _ => self.problem("events", key, format!("`{i}` is not an event type ({})", crate::events::TYPES.join(", "))),
                        }
                    }
                }
                ("stats-interval", v)
                    if v.as_float().or(v.as_integer().map(|n| n as f64)).is_some_and(|x| (1.0..=86_400.0).contains(&x)) =>
                {
                    c.stats_interval = v.as_float().or(v.as_integer().map(|n| n as f64)).unwrap_or(60.0);
                }
                ("path" | "types" | "stats-interval", v) => {
                    let want = match key.as_str() {
                        "path" => "a file name (or \"-\" for standard output)",
                        "types" => "a list of event types",
                        _ => "seconds from 1 to 86400",
                    };
                    self.problem("events", key, format!("`{key}` must be {want}, not {v}"));
                }
                _ => self.problem("events", key, format!("unknown key `{key}`; [events] takes path, types and stats-interval")),
            }
        }
        if c.path.is_empty() && self.problems.len() == before {
            self.problem("events", "", "missing `path`: the file events are written to (or \"-\")".into());
        }
        (self.problems.len() == before).then_some(c)
    }

    fn metrics(&mut self, t: &toml::Table) -> Option<String> {
        let before = self.problems.len();
        let mut listen = None;
        for (key, v) in t {
            match (key.as_str(), v) {
                ("listen", toml::Value::String(s)) => listen = Some(s.clone()),
                ("listen", v) => self.problem("metrics", key, format!("`listen` must be \"ADDR:PORT\", not {v}")),
                _ => self.problem("metrics", key, format!("unknown key `{key}`; [metrics] takes listen = \"ADDR:PORT\"")),
            }
        }
        if listen.is_none() && self.problems.len() == before {
            self.problem("metrics", "", "missing `listen`: the address to serve metrics at, e.g. \"127.0.0.1:9101\"".into());
        }
        listen
    }

    fn sensor(&mut self, t: &toml::Table) -> Option<SensorTable> {
        let before = self.problems.len();
        let mut s = SensorTable { name: hostname(), status_interval: 10.0 };
        for (key, v) in t {
            match (key.as_str(), v) {
                ("name", toml::Value::String(n)) if valid_name(n) => s.name = n.clone(),
                ("status-interval", v)
                    if v.as_float().or(v.as_integer().map(|n| n as f64)).is_some_and(|x| (0.0..=86_400.0).contains(&x)) =>
                {
                    s.status_interval = v.as_float().or(v.as_integer().map(|n| n as f64)).unwrap_or(10.0);
                }
                ("name", v) => self.problem("sensor", key, format!("`name` must be 1 to 64 letters, digits, `-`, `_` or `.`, not {v}")),
                ("status-interval", v) => {
                    self.problem("sensor", key, format!("`status-interval` must be seconds from 0 to 86400, not {v}"))
                }
                _ => self.problem("sensor", key, format!("unknown key `{key}`; [sensor] takes name and status-interval")),
            }
        }
        (self.problems.len() == before).then_some(s)
    }
}

fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len()) && n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// The host's name, the sensor's by default.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| valid_name(h))
        .unwrap_or_else(|| "weir".into())
}

/// The key a clap error is about, and its message in the config's words.
fn clap_problem(e: &clap::Error) -> (String, String) {
    use clap::error::{ContextKind, ContextValue};
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    let key = arg.as_deref().map(|a| a.trim_start_matches('-').split([' ', '<', '=']).next().unwrap_or("").to_string()).unwrap_or_default();
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
    let message = match e.kind() {
        clap::error::ErrorKind::MissingRequiredArgument => format!("missing `{key}` (the option {})", arg.unwrap_or_default()),
        _ => first.replace("--", "").replace("'<", "'").replace(">'", "'"),
    };
    (key, message)
}

/// The annotated example config (`examples/sensor.toml`, and
/// `weir sensor --example`): every key of every table, from the options'
/// own definitions, with its default and the first sentence of its help.
pub fn example() -> String {
    let mut out = String::from(
        "# weir sensor: an annotated config (made by `weir sensor --example`; a test holds the two equal).\n\
         # Each key is shown with its default, commented out, and a one-line meaning; `weir <command> --help`\n\
         # says more. A table's keys are the long options of its command. Tables left commented are off.\n\
         # Check a config with `weir sensor --check FILE`, run it with `weir sensor FILE`.\n",
    );
    let line = |key: &str, default: &str, help: &str| {
        // The first clause: up to the first sentence's end, `;` or `:`.
        let help = help.replace('\n', " ");
        let end = [". ", "; ", ": ", " (", ", e.g"].iter().filter_map(|s| help.find(s)).filter(|&i| i > 16).min().unwrap_or(help.len());
        let first = help[..end].trim_end_matches('.');
        format!("{:<44} # {first}\n", format!("# {key} = {default}"))
    };
    out += "\n[sensor]\n";
    out += &line("name", "\"<host name>\"", "Its name in stats events, metrics and logs");
    out += &line("status-interval", "10", "Seconds between two status lines on standard error (0: none)");
    let table = |out: &mut String, name: &str, on: bool, cmd: Command, refused: &[String], set: &[(&str, &str)]| {
        *out += &format!("\n{}[{name}]\n", if on { "" } else { "# " });
        for (k, v) in set {
            *out += &format!("{}{k} = {v}\n", if on { "" } else { "# " });
        }
        for a in cmd.get_arguments() {
            let key = a.get_long().map_or_else(|| a.get_id().to_string(), str::to_string);
            let moved = elsewhere(&key).is_some() && name != "kafka";
            if key == "help" || refused.contains(&key) || moved || set.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let defaults: Vec<String> = a.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            let default = match (a.get_action().takes_values(), defaults.first()) {
                (false, _) => "false".to_string(),
                (true, Some(d)) if d.parse::<f64>().is_ok() => d.clone(),
                (true, Some(d)) => format!("\"{d}\""),
                (true, None) => "(none)".to_string(),
            };
            *out += &line(&key, &default, &a.get_help().map(ToString::to_string).unwrap_or_default());
        }
    };
    let none: Vec<String> = Vec::new();
    let source = source_option_names();
    table(&mut out, "capture", true, CaptureTable::augment_args(Command::new("capture")), &none, &[("source", "\"afpacket:eth1\"")]);
    let no_source = |names: &[String]| names.iter().cloned().chain(["source".to_string()]).collect::<Vec<_>>();
    table(
        &mut out,
        "record",
        false,
        crate::record::RecordArgs::augment_args(Command::new("record")),
        &no_source(&source),
        &[("write", "\"/var/lib/weir/pcap/%Y%m%d-%H%M%S.pcap\"")],
    );
    table(
        &mut out,
        "flows",
        true,
        crate::flows::FlowsArgs::augment_args(Command::new("flows")),
        &no_source(&source),
        &[("collector", "[\"127.0.0.1:9995\"]")],
    );
    table(&mut out, "streams", false, crate::streams::StreamsArgs::augment_args(Command::new("streams")), &no_source(&source), &[]);
    let mut inspect = no_source(&source);
    inspect.push("output".into());
    table(&mut out, "inspect", false, crate::inspect::InspectArgs::augment_args(Command::new("inspect")), &inspect, &[]);
    table(
        &mut out,
        "kafka",
        false,
        KafkaTable::augment_args(Command::new("kafka")),
        &["kafka".to_string()],
        &[("brokers", "\"127.0.0.1:9092\"")],
    );
    out += "\n[events]\npath = \"/var/log/weir/eve.json\"  # The file events are written to (\"-\": standard output); appended to, reopened on SIGHUP\n";
    out += &line("types", "[\"flow\", \"stream\", \"alert\", \"stats\"]", "Which events: every type the outputs make by default");
    out += &line("stats-interval", "60", "Seconds between two stats events");
    out += "\n# [metrics]\n# listen = \"127.0.0.1:9101\"           # Serve Prometheus metrics there (no default: off without the table)\n";
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_annotated_example_is_the_options_and_parses() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sensor.toml");
        let file = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(file == super::example(), "examples/sensor.toml is not `weir sensor --example`'s output: run it again into the file");
        let parsed = super::parse(&file, &path);
        assert!(parsed.is_ok(), "{}", parsed.err().map(|e| e.to_string()).unwrap_or_default());
    }
}
