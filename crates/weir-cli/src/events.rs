//! The EVE events output ([`weir::output::eve`]): `weir flows --events OUT`
//! and the sensor's `[events]`. One writer for every thread that makes
//! events (exporter threads for `flow`, workers for `stream` and `alert`,
//! the sensor's main thread for `stats`): each takes the lock for one
//! event, which costs far less than the event's writing.
//!
//! Events made = written + not written + pending (in the writer's block,
//! until the next flush), per type. A write that fails (a full disk) ends
//! the writing until the file is reopened: the first error is kept and
//! every event meanwhile counted as not written. [`Events::reopen`] (the
//! sensor's SIGHUP, after logrotate moved the file away) writes out what
//! waits, then opens the name again and resumes. A reader of standard
//! output that went away ends weir quietly, as every command's output does.

use crate::event_types::flow_event;
use crate::kafka::Kafka;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};
use weir::output::eve::EveWriter;
use weir::output::flow::FlowRecord;
use weir::stream::Stream;

pub use crate::event_types::TYPES;

/// What the events output counted.
#[derive(Clone, Debug, Default)]
pub struct EventStats {
    /// Events whose bytes were written.
    pub written: u64,
    /// Events not written, after a write failed (the first error).
    pub unwritten: u64,
    /// Events made, by type ([`TYPES`]'s order).
    pub made: [u64; 4],
    /// Times the file was opened again (SIGHUP).
    pub reopened: u64,
    pub error: Option<String>,
}

struct Out {
    writer: EveWriter<Box<dyn Write + Send>>,
    name: String,
    /// The file's path: `None` for standard output, which is never reopened.
    path: Option<String>,
    /// Written and unwritten by writers closed by a reopen.
    closed_written: u64,
    closed_unwritten: u64,
    /// Events refused while the output was failed.
    refused: u64,
    stats: EventStats,
}

/// The events outputs, shared by the threads that make events: the file
/// (with the types it takes, [`TYPES`]' order) and Kafka.
#[derive(Clone)]
pub struct Events {
    file: Option<(Arc<Mutex<Out>>, [bool; 4])>,
    kafka: Option<Kafka>,
}

fn open(path: &str, append: bool) -> io::Result<File> {
    OpenOptions::new().create(true).write(true).append(append).truncate(!append).open(path)
}

impl Events {
    /// Opens OUT (`-`: standard output) before the run, so a name that
    /// cannot be written is refused first; a file is truncated (`weir flows`)
    /// or, with `append`, added to (a sensor restarted on the same log).
    pub fn create(out: &str, append: bool) -> io::Result<Events> {
        let (sink, name, path): (Box<dyn Write + Send>, String, Option<String>) = match out {
            "-" => (Box::new(io::stdout()), "standard output".into(), None),
            path => (Box::new(open(path, append)?), path.into(), Some(path.into())),
        };
        let out = Out {
            writer: EveWriter::new(sink),
            name,
            path,
            closed_written: 0,
            closed_unwritten: 0,
            refused: 0,
            stats: EventStats::default(),
        };
        Ok(Events { file: Some((Arc::new(Mutex::new(out)), [true; 4])), kafka: None })
    }

    /// Events that go to Kafka alone.
    pub fn kafka_only(kafka: Kafka) -> Events {
        Events { file: None, kafka: Some(kafka) }
    }

    /// The same events to Kafka too.
    pub fn with_kafka(mut self, kafka: Option<Kafka>) -> Events {
        self.kafka = kafka;
        self
    }

    /// The file takes only the events of these types.
    pub fn file_types(mut self, types: &[String]) -> Events {
        if let Some((_, wants)) = &mut self.file {
            *wants = TYPES.map(|t| types.iter().any(|x| x == t));
        }
        self
    }

    /// Whether there is a file (else the events go to Kafka alone).
    pub fn has_file(&self) -> bool {
        self.file.is_some()
    }

    /// Whether the file takes events of type `t`.
    pub fn file_takes(&self, t: &str) -> bool {
        self.file.as_ref().is_some_and(|(_, wants)| TYPES.iter().position(|x| *x == t).is_some_and(|i| wants[i]))
    }

    /// The Kafka output, if events go there.
    pub fn kafka(&self) -> Option<&Kafka> {
        self.kafka.as_ref()
    }

    fn lock(&self) -> Option<std::sync::MutexGuard<'_, Out>> {
        self.file.as_ref().map(|(f, _)| f.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Writes one event of type `kind` (an index in [`TYPES`]) with `write`,
    /// if the file takes that type.
    fn event(&self, kind: usize, write: impl FnOnce(&mut EveWriter<Box<dyn Write + Send>>) -> io::Result<()>) {
        let Some((file, wants)) = &self.file else { return };
        if !wants[kind] {
            return;
        }
        let mut o = file.lock().unwrap_or_else(PoisonError::into_inner);
        o.stats.made[kind] += 1;
        if o.stats.error.is_some() {
            o.refused += 1;
            return;
        }
        if let Err(e) = write(&mut o.writer) {
            fail(&mut o, &e);
        }
    }

    /// Writes `r` as a flow event: the record's direction to the server,
    /// with `--biflow` the reverse direction's counters to the client.
    pub fn record(&self, r: &FlowRecord) {
        if self.file.is_some() {
            let e = flow_event(r);
            self.event(0, |w| w.flow(&e));
        }
        if let Some(k) = &self.kafka {
            k.record(r);
        }
    }

    /// Writes a closed stream as a `stream` event.
    pub fn stream(&self, s: &Stream) {
        self.event(1, |w| w.stream(s));
        if let Some(k) = &self.kafka {
            k.stream(s);
        }
    }

    /// Writes a rule's match in a stream as an `alert` event.
    pub fn alert(&self, s: &Stream, rule: u32, offset: u64) {
        self.event(2, |w| w.alert(s, rule, offset));
        if let Some(k) = &self.kafka {
            k.alert(s, rule, offset);
        }
    }

    /// Writes the counters as a `stats` event, and hands everything that
    /// waits to the file (once a period, so a reader is never far behind).
    pub fn stats(&self, ts_ns: u64, object: &serde_json::Value) {
        let text = object.to_string();
        self.event(3, |w| w.stats(ts_ns, &text));
        if let Some(k) = &self.kafka {
            k.stats(ts_ns, &text);
        }
        self.flush();
    }

    /// Hands what waits to the file.
    pub fn flush(&self) {
        let Some(mut o) = self.lock() else { return };
        if o.stats.error.is_none() {
            if let Err(e) = o.writer.flush() {
                fail(&mut o, &e);
            }
        }
    }

    /// Writes out what waits and opens the file's name again (appending):
    /// after logrotate renamed it, events go to a new file of that name. A
    /// failed output resumes if the name can be opened. Standard output is
    /// kept as it is.
    pub fn reopen(&self) -> io::Result<()> {
        let Some(mut o) = self.lock() else { return Ok(()) };
        let Some(path) = o.path.clone() else { return Ok(()) };
        if o.stats.error.is_none() {
            if let Err(e) = o.writer.flush() {
                fail(&mut o, &e);
            }
        }
        let file = open(&path, true)?;
        let old = std::mem::replace(&mut o.writer, EveWriter::new(Box::new(file)));
        o.closed_written += old.written();
        o.closed_unwritten += old.unwritten() + old.pending();
        o.stats.error = None;
        o.stats.reopened += 1;
        Ok(())
    }

    /// The file's counts now (pending events count as neither written
    /// nor not); all zero without a file.
    pub fn counts(&self) -> (EventStats, u64) {
        let Some(o) = self.lock() else { return (EventStats::default(), 0) };
        let mut st = o.stats.clone();
        st.written = o.closed_written + o.writer.written();
        st.unwritten = o.closed_unwritten + o.writer.unwritten() + o.refused;
        (st, o.writer.pending())
    }

    /// Writes what waits and returns the counts.
    pub fn finish(&self) -> EventStats {
        self.flush();
        let (mut st, pending) = self.counts();
        st.unwritten += pending;
        st
    }
}

/// The writer refused a block: no more events are written until a reopen
/// (those of the block and every later one are counted as not written).
fn fail(o: &mut Out, e: &io::Error) {
    crate::exit::end_if_reader_gone(e);
    o.stats.error = Some(format!("{}: {e}", o.name));
}
