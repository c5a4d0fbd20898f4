//! The Kafka output (`--kafka` of `weir flows`, `weir streams` and `weir
//! inspect`, the sensor's `[kafka]`): every record as one message, keyed by
//! its Community ID, through librdkafka (the `rdkafka` crate), the client
//! pmacct, nProbe and the Zeek plugin publish with.
//!
//! Contract:
//! - The capture never waits for the broker. A record is handed to
//!   librdkafka's queue without blocking; its queue is the output's bounded
//!   buffer (`--kafka-buffer` bytes). A record that finds it full is
//!   counted as dropped (`buffer-full`) and goes no further.
//! - Records made = acknowledged by the broker + dropped (by reason) +
//!   failed (a permanent error, by librdkafka's error name) + in flight
//!   (librdkafka's queue and requests, `rd_kafka_outq_len`). At the end
//!   the output waits up to `--kafka-flush-timeout` for the last
//!   acknowledgements; what is still in flight then is reported as lost.
//! - The producer is idempotent with `acks=all` by default, so a broker
//!   that goes away and comes back (within librdkafka's
//!   `message.timeout.ms`, 5 minutes by default) gets every record once.
//!   Any librdkafka property can be set (`--kafka-property`,
//!   `--kafka-config FILE`), as pmacct's `kafka_config_file` allows.
//! - At start the output asks the brokers for their metadata, waiting up
//!   to `--kafka-wait` seconds: no answer is a clear error (exit 2) before
//!   any capture starts, not a run that silently buffers into nothing.
//!   With `--kafka-wait 0` it starts anyway and librdkafka retries.

pub mod proto;

use clap::Args;
use prost::Message as _;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use weir::output::eve::EveEncoder;
use weir::output::flow::FlowRecord;
use weir::stream::community_id::CommunityId;
use weir::stream::Stream;

/// The kinds of record, in the order counts are kept (as the events').
pub const TYPES: [&str; 4] = crate::event_types::TYPES;

/// The options of the Kafka output, the same on every command that has it
/// and as the keys of the sensor's `[kafka]` table.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Kafka")]
pub struct KafkaArgs {
    /// Publish every record to the Kafka brokers BROKERS (HOST:PORT, comma-separated: librdkafka's
    /// bootstrap.servers), one message each, keyed by its Community ID, so every record of one flow lands in
    /// one partition whatever the direction or the sensor.
    #[arg(long = "kafka", value_name = "BROKERS")]
    pub brokers: Option<String>,

    /// The topic, or a pattern of topics: `{type}` becomes the record's type (flow, stream, alert, stats),
    /// `{sensor}` the sensor's name (the host name for a command). A plain name is one topic for everything.
    #[arg(id = "kafka_topic", long = "topic", value_name = "PATTERN", default_value = "weir-{type}")]
    pub topic: String,

    /// json: the objects of the EVE events (schema/eve.schema.json), one per message. protobuf: the
    /// Record of schema/weir.proto, preceded by its length as a varint (as goflow2 writes, and ClickHouse's
    /// `Protobuf` format reads), about a third of the bytes.
    #[arg(id = "kafka_format", long = "kafka-format", value_enum, default_value = "json", value_name = "FORMAT")]
    pub format: KafkaFormat,

    /// The bounded buffer, in MiB: records wait here while the broker is slow or gone (librdkafka's
    /// queue.buffering.max.kbytes). A record that finds it full is dropped and counted. Checked against
    /// the memory available.
    #[arg(id = "kafka_buffer", long = "kafka-buffer", value_name = "MIB", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub buffer_mib: u64,

    /// A librdkafka property, KEY=VALUE (repeatable), over the defaults (enable.idempotence=true,
    /// acks=all, linger.ms=50, compression.codec=lz4) and over --kafka-config.
    #[arg(id = "kafka_property", long = "kafka-property", value_name = "KEY=VALUE")]
    pub properties: Vec<String>,

    /// A file of librdkafka properties, one KEY=VALUE a line (`#` starts a comment), as pmacct's
    /// kafka_config_file.
    #[arg(id = "kafka_config", long = "kafka-config", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Seconds to wait at start for a broker to answer; none answering is an error (exit 2) before the
    /// capture starts. 0: start without asking (records wait in the buffer, librdkafka retries).
    #[arg(id = "kafka_wait", long = "kafka-wait", value_name = "SECONDS", default_value_t = 10.0, value_parser = crate::args::float_in(0.0, 3600.0))]
    pub wait: f64,

    /// Seconds to wait at the end for the broker to acknowledge what is in flight; what is still in
    /// flight then is reported as lost (exit 1).
    #[arg(id = "kafka_flush_timeout", long = "kafka-flush-timeout", value_name = "SECONDS", default_value_t = 30.0,
          value_parser = crate::args::float_in(0.0, 3600.0))]
    pub flush_timeout: f64,

    /// Which record types to publish (comma-separated: flow, stream, alert, stats); by default every
    /// type the command or sensor makes.
    #[arg(id = "kafka_types", long = "kafka-types", value_name = "TYPES", value_delimiter = ',', value_parser = ["flow", "stream", "alert", "stats"])]
    pub types: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KafkaFormat {
    Json,
    Protobuf,
}

/// What the output counted, with the identity's parts.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct KafkaStats {
    /// Records made, by type.
    pub made: BTreeMap<String, u64>,
    /// Acknowledged by the broker.
    pub acked: u64,
    /// Dropped before librdkafka took them, by reason.
    pub dropped: BTreeMap<String, u64>,
    /// Failed for good, by librdkafka's error name.
    pub failed: BTreeMap<String, u64>,
    /// In librdkafka's queue or in a request.
    pub in_flight: u64,
    /// Bytes of the messages librdkafka took.
    pub bytes: u64,
    /// The last error librdkafka reported about the brokers (not about a
    /// record), such as all of them being down.
    pub broker_error: Option<String>,
}

impl KafkaStats {
    pub fn made_total(&self) -> u64 {
        self.made.values().sum()
    }
    pub fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }
    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum()
    }
    /// Whether made = acknowledged + dropped + failed + in flight.
    pub fn adds_up(&self) -> bool {
        self.made_total() == self.acked + self.dropped_total() + self.failed_total() + self.in_flight
    }

    /// One line for the end of a run and the sensor's status.
    pub fn line(&self) -> String {
        let by = |m: &BTreeMap<String, u64>| {
            if m.is_empty() {
                String::new()
            } else {
                format!(" ({})", m.iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", "))
            }
        };
        format!(
            "{} records made, {} acknowledged by the broker, {} dropped{}, {} failed{}, {} in flight",
            self.made_total(),
            self.acked,
            self.dropped_total(),
            by(&self.dropped),
            self.failed_total(),
            by(&self.failed),
            self.in_flight
        )
    }
}

/// Counts the delivery reports and the brokers' errors (librdkafka's
/// polling thread calls these).
#[derive(Default)]
struct Counts {
    made: [AtomicU64; 4],
    acked: AtomicU64,
    bytes: AtomicU64,
    dropped: Mutex<BTreeMap<String, u64>>,
    failed: Mutex<BTreeMap<String, u64>>,
    broker_error: Mutex<Option<String>>,
}

impl Counts {
    fn add(map: &Mutex<BTreeMap<String, u64>>, key: String) {
        *map.lock().unwrap_or_else(PoisonError::into_inner).entry(key).or_default() += 1;
    }
}

struct Context(Arc<Counts>);

impl ClientContext for Context {
    // librdkafka's log lines would go to the `log` crate, which weir does
    // not set up; its errors about the brokers are kept for the status.
    fn log(&self, _level: rdkafka::config::RDKafkaLogLevel, _fac: &str, _message: &str) {}

    fn error(&self, error: KafkaError, reason: &str) {
        *self.0.broker_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(format!("{error}: {reason}"));
    }
}

impl ProducerContext for Context {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            // Relaxed: a count read for reports, ordered with nothing else.
            Ok(_) => {
                self.0.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => Counts::add(&self.0.failed, error_name(e)),
        }
    }
}

/// librdkafka's name of an error (`MessageTimedOut`, `MessageSizeTooLarge`).
fn error_name(e: &KafkaError) -> String {
    match e.rdkafka_error_code() {
        Some(code) => format!("{code:?}"),
        None => e.to_string(),
    }
}

/// Why the output could not start (either is exit 2: nothing was captured).
#[derive(Debug)]
pub enum StartError {
    /// A setting is wrong.
    Setting(String),
    /// No broker answered within --kafka-wait.
    NoBroker { brokers: String, secs: f64, error: String },
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Setting(s) => f.write_str(s),
            StartError::NoBroker { brokers, secs, error } => write!(
                f,
                "no Kafka broker at {brokers} answered within {secs} s ({error}); is it running? \
                 (--kafka-wait 0 starts without one, and librdkafka keeps trying)"
            ),
        }
    }
}

impl std::error::Error for StartError {}

struct Inner {
    producer: ThreadedProducer<Context>,
    counts: Arc<Counts>,
    format: KafkaFormat,
    /// The topic of each type ([`TYPES`]' order).
    topics: [String; 4],
    /// Which types are published.
    wanted: [bool; 4],
    enc: EveEncoder,
    flush_timeout: Duration,
    brokers: String,
}

/// The Kafka output, shared by every thread that makes records.
#[derive(Clone)]
pub struct Kafka(Arc<Inner>);

thread_local! {
    /// Each thread's message and key buffers: librdkafka copies the bytes
    /// it takes, so neither is allocated per record.
    static MESSAGE: RefCell<(Vec<u8>, Vec<u8>)> = RefCell::new((Vec::with_capacity(1024), Vec::with_capacity(64)));
}

/// The topic of each type from a pattern.
pub fn topics(pattern: &str, sensor: &str) -> Result<[String; 4], String> {
    let names = TYPES.map(|t| pattern.replace("{type}", t).replace("{sensor}", sensor));
    for n in &names {
        if n.is_empty() || n.len() > 249 || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
            return Err(format!(
                "--topic {pattern}: `{n}` is not a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, `.`, `_`, `-`; \
                 placeholders {{type}} and {{sensor}})"
            ));
        }
    }
    Ok(names)
}

/// The librdkafka properties: weir's defaults, then the file, then each
/// --kafka-property.
fn properties(args: &KafkaArgs, brokers: &str) -> Result<Vec<(String, String)>, String> {
    let mut props: Vec<(String, String)> = [
        ("bootstrap.servers", brokers.to_string()),
        ("enable.idempotence", "true".into()),
        ("acks", "all".into()),
        ("linger.ms", "50".into()),
        ("compression.codec", "lz4".into()),
        ("queue.buffering.max.kbytes", (args.buffer_mib * 1024).to_string()),
        // The byte bound is the buffer's size; the message bound is set past reach.
        ("queue.buffering.max.messages", "2147483647".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut set = |k: &str, v: &str, place: &str| -> Result<(), String> {
        if k.is_empty() {
            return Err(format!("{place}: a property is KEY=VALUE"));
        }
        props.retain(|(key, _)| key != k);
        props.push((k.to_string(), v.to_string()));
        Ok(())
    };
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path).map_err(|e| format!("--kafka-config {}: {e}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let place = format!("--kafka-config {}:{}", path.display(), i + 1);
            let (k, v) = line.split_once('=').ok_or_else(|| format!("{place}: `{line}` is not KEY=VALUE"))?;
            set(k.trim(), v.trim(), &place)?;
        }
    }
    for p in &args.properties {
        let (k, v) = p.split_once('=').ok_or_else(|| format!("--kafka-property {p}: not KEY=VALUE"))?;
        set(k.trim(), v.trim(), "--kafka-property")?;
    }
    Ok(props)
}

/// `weir_kafka_*`: the accounting, as the end of a run prints it.
impl weir_metrics::Scrape for Kafka {
    fn collect(&self, out: &mut weir_metrics::Families) {
        use weir_metrics::catalogue as c;
        let st = self.counts();
        for (t, n) in &st.made {
            out.counter(&c::KAFKA_RECORDS, &[("type", t)], *n as f64);
        }
        out.counter(&c::KAFKA_RESULTS, &[("result", "acked"), ("reason", "")], st.acked as f64);
        for (result, map) in [("dropped", &st.dropped), ("failed", &st.failed)] {
            for (reason, n) in map {
                out.counter(&c::KAFKA_RESULTS, &[("result", result), ("reason", reason)], *n as f64);
            }
        }
        out.gauge(&c::KAFKA_IN_FLIGHT, &[], st.in_flight as f64);
    }
}

impl Kafka {
    /// Checks the settings, the buffer's memory and (unless --kafka-wait 0)
    /// that a broker answers, then starts the producer. `sensor`: the name
    /// `{sensor}` stands for. `made`: the types this command or sensor
    /// makes (the default of --kafka-types).
    pub fn start(args: &KafkaArgs, sensor: &str, made: &[&str]) -> Result<Kafka, StartError> {
        let brokers = args.brokers.clone().ok_or_else(|| StartError::Setting("--kafka: the brokers (HOST:PORT,...) are missing".into()))?;
        let topics = topics(&args.topic, sensor).map_err(StartError::Setting)?;
        let wanted = TYPES.map(|t| if args.types.is_empty() { made.contains(&t) } else { args.types.iter().any(|x| x == t) });
        let mut plan = weir::memory::Plan::new();
        plan.add("the Kafka output's buffer (--kafka-buffer)", args.buffer_mib << 20);
        plan.check().map_err(|e| StartError::Setting(format!("--kafka-buffer {}: {e}", args.buffer_mib)))?;
        let mut cfg = ClientConfig::new();
        for (k, v) in properties(args, &brokers).map_err(StartError::Setting)? {
            cfg.set(k, v);
        }
        let counts = Arc::new(Counts::default());
        let producer: ThreadedProducer<Context> = cfg
            .create_with_context(Context(counts.clone()))
            .map_err(|e| StartError::Setting(format!("--kafka: librdkafka refused the settings: {e}")))?;
        if args.wait > 0.0 {
            if let Err(e) = producer.client().fetch_metadata(None, Duration::from_secs_f64(args.wait)) {
                return Err(StartError::NoBroker { brokers, secs: args.wait, error: e.to_string() });
            }
        }
        let k = Kafka(Arc::new(Inner {
            producer,
            counts,
            format: args.format,
            topics,
            wanted,
            enc: EveEncoder::default(),
            flush_timeout: Duration::from_secs_f64(args.flush_timeout),
            brokers,
        }));
        crate::metrics::also_serve(k.clone());
        Ok(k)
    }

    /// Whether records of `kind` are published.
    pub fn wants(&self, kind: &str) -> bool {
        TYPES.iter().position(|t| *t == kind).is_some_and(|i| self.0.wanted[i])
    }

    /// The brokers, as given.
    pub fn brokers(&self) -> &str {
        &self.0.brokers
    }

    /// The topics, as one line: the one topic, or the first and `...`.
    pub fn topic_pattern(&self) -> String {
        let t = &self.0.topics;
        if t.iter().all(|x| *x == t[0]) {
            format!("topic {}", t[0])
        } else {
            format!("topics {}", t.join(", "))
        }
    }

    /// Encodes one record of type `kind` (an index in [`TYPES`]) and hands
    /// it to librdkafka without waiting: `json` appends the EVE object and
    /// returns the key's digest, `pb` makes the protobuf record.
    fn publish(&self, kind: usize, json: impl FnOnce(&EveEncoder, &mut Vec<u8>) -> Option<[u8; 20]>, pb: impl FnOnce() -> proto::Record) {
        let k = &self.0;
        if !k.wanted[kind] {
            return;
        }
        // Relaxed: counts read for reports only.
        k.counts.made[kind].fetch_add(1, Ordering::Relaxed);
        MESSAGE.with_borrow_mut(|(buf, key)| {
            buf.clear();
            key.clear();
            match k.format {
                KafkaFormat::Json => {
                    if let Some(d) = json(&k.enc, buf) {
                        CommunityId::render_into(&d, key);
                    }
                }
                KafkaFormat::Protobuf => {
                    let r = pb();
                    // Encoding into a Vec cannot run out of room.
                    let _ = r.encode_length_delimited(buf);
                    key.extend_from_slice(r.community_id.as_bytes());
                }
            }
            let mut rec = BaseRecord::<[u8], [u8]>::to(&k.topics[kind]).payload(&buf[..]);
            if !key.is_empty() {
                rec = rec.key(&key[..]);
            }
            match k.producer.send(rec) {
                Ok(()) => {
                    k.counts.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
                }
                Err((e, _)) => {
                    let map = match e.rdkafka_error_code() {
                        Some(RDKafkaErrorCode::QueueFull) => {
                            Counts::add(&k.counts.dropped, "buffer-full".into());
                            return;
                        }
                        _ => &k.counts.failed,
                    };
                    Counts::add(map, error_name(&e));
                }
            }
        });
    }

    /// A flow record (with --biflow, both directions in one).
    pub fn record(&self, r: &FlowRecord) {
        let e = crate::event_types::flow_event(r);
        self.publish(0, |enc, b| enc.flow(b, &e), || proto::flow(&e, r.ingress));
    }

    /// A closed stream.
    pub fn stream(&self, s: &Stream) {
        self.publish(1, |enc, b| enc.stream(b, s), || proto::stream(s));
    }

    /// A rule's match in a stream's data.
    pub fn alert(&self, s: &Stream, rule: u32, offset: u64) {
        self.publish(2, |enc, b| enc.alert(b, s, rule, offset), || proto::alert(s, rule, offset));
    }

    /// The counters as a `stats` record (no key: any partition).
    pub fn stats(&self, ts_ns: u64, object: &str) {
        self.publish(
            3,
            |enc, b| {
                enc.stats(b, ts_ns, object);
                None
            },
            || proto::stats(ts_ns, object),
        );
    }

    /// The counts now.
    pub fn counts(&self) -> KafkaStats {
        let c = &self.0.counts;
        // Read in flight first: a record acknowledged in between is then
        // counted twice rather than not at all, and only in a live reading.
        let in_flight = u64::try_from(self.0.producer.in_flight_count()).unwrap_or(0);
        let lock = |m: &Mutex<BTreeMap<String, u64>>| m.lock().unwrap_or_else(PoisonError::into_inner).clone();
        KafkaStats {
            made: TYPES
                .iter()
                .zip(&c.made)
                .filter(|(_, n)| n.load(Ordering::Relaxed) > 0)
                .map(|(t, n)| (t.to_string(), n.load(Ordering::Relaxed)))
                .collect(),
            acked: c.acked.load(Ordering::Relaxed),
            dropped: lock(&c.dropped),
            failed: lock(&c.failed),
            in_flight,
            bytes: c.bytes.load(Ordering::Relaxed),
            broker_error: c.broker_error.lock().unwrap_or_else(PoisonError::into_inner).clone(),
        }
    }

    /// Waits up to --kafka-flush-timeout for what is in flight, then
    /// returns the final counts (whatever is still in flight is lost).
    pub fn finish(&self) -> KafkaStats {
        let _ = self.0.producer.flush(self.0.flush_timeout);
        // The delivery reports of the last requests are served by the
        // polling thread; flush returns once librdkafka's queue is empty.
        self.0.producer.poll(Duration::ZERO);
        self.counts()
    }
}

/// A command's Kafka output, if `--kafka` was given: started (or exit 2,
/// before the capture) for a command that makes records of types `made`.
pub fn start_for(args: &KafkaArgs, made: &[&str]) -> anyhow::Result<Option<Kafka>> {
    if args.brokers.is_none() {
        return Ok(None);
    }
    Kafka::start(args, &host_name(), made).map(Some).map_err(|e| crate::exit::bad_input(anyhow::anyhow!(e)))
}

/// Waits for the last acknowledgements and says what became of the
/// records: the counts, and whether every record reached the broker (none
/// dropped, failed or still in flight) and the counts add up.
pub fn finish_and_report(command: &str, k: &Kafka) -> (KafkaStats, bool) {
    let st = k.finish();
    eprintln!("weir {command}: Kafka ({}): {}", k.brokers(), st.line());
    let lost = st.dropped_total() + st.failed_total() + st.in_flight;
    if st.in_flight > 0 {
        eprintln!(
            "weir {command}: Kafka: {} records were still in flight after --kafka-flush-timeout and are lost{}",
            st.in_flight,
            st.broker_error.as_ref().map(|e| format!(" (the brokers: {e})")).unwrap_or_default()
        );
    }
    if !st.adds_up() {
        eprintln!("weir {command}: Kafka: internal accounting error: {}", st.line());
    }
    (st.clone(), lost == 0 && st.adds_up())
}

/// The host's name, for `{sensor}` in a command's topic.
pub fn host_name() -> String {
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "weir".into())
}
