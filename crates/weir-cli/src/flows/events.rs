//! `weir flows --events OUT`: every record the exporters are handed, also
//! written as an EVE `flow` event ([`weir::output::eve`]), to a file or to
//! standard output (`-`). One writer for all exporter threads: each takes
//! the lock for one event, which costs far less than the event's writing.
//!
//! Records made = events written + events not written: a write that fails
//! (a full disk) ends the writing of events, the first error kept, every
//! later record counted; a reader of standard output that went away ends
//! weir quietly, as every command's output does.

use super::encode::FlowRecord;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use weir::output::eve::{EveWriter, FlowEvent};

/// What the events output counted.
#[derive(Clone, Debug, Default)]
pub struct EventStats {
    /// Events whose bytes were written.
    pub written: u64,
    /// Events not written, after a write failed (the first error).
    pub unwritten: u64,
    pub error: Option<String>,
}

struct Out {
    writer: EveWriter<Box<dyn Write + Send>>,
    name: String,
    stats: EventStats,
}

/// The events output, shared by the exporter threads.
#[derive(Clone)]
pub struct Events(Arc<Mutex<Out>>);

impl Events {
    /// Opens OUT (`-`: standard output) before the run, so a name that
    /// cannot be written is refused first.
    pub fn create(out: &str) -> io::Result<Events> {
        let (sink, name): (Box<dyn Write + Send>, String) = match out {
            "-" => (Box::new(io::stdout()), "standard output".into()),
            path => (Box::new(File::create(Path::new(path))?), path.into()),
        };
        Ok(Events(Arc::new(Mutex::new(Out { writer: EveWriter::new(sink), name, stats: EventStats::default() }))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Out> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `r` as a flow event: the record's direction to the server,
    /// with `--biflow` the reverse direction's counters to the client.
    pub fn record(&self, r: &FlowRecord) {
        let mut o = self.lock();
        if o.stats.error.is_some() {
            o.stats.unwritten += 1;
            return;
        }
        let rev = r.reverse.unwrap_or_default();
        let e = FlowEvent {
            src: r.src,
            dst: r.dst,
            sport: r.sport,
            dport: r.dport,
            proto: r.proto,
            start_ns: r.start_ms * 1_000_000,
            end_ns: r.end_ms * 1_000_000,
            pkts_toserver: r.packets,
            bytes_toserver: r.octets,
            pkts_toclient: rev.packets,
            bytes_toclient: rev.octets,
            tcp_flags_ts: r.tcp_flags,
            tcp_flags_tc: rev.tcp_flags,
            reason: r.end.name(),
        };
        if let Err(e) = o.writer.flow(&e) {
            fail(&mut o, &e);
        }
    }

    /// Writes what waits and returns the counts.
    pub fn finish(&self) -> EventStats {
        let mut o = self.lock();
        if o.stats.error.is_none() {
            if let Err(e) = o.writer.flush() {
                fail(&mut o, &e);
            }
        }
        let mut st = o.stats.clone();
        st.written = o.writer.written();
        st.unwritten += o.writer.unwritten() + o.writer.pending();
        st
    }
}

/// The writer refused a block: no more events are written (those of the
/// block and every later one are counted as not written).
fn fail(o: &mut Out, e: &io::Error) {
    crate::exit::end_if_reader_gone(e);
    o.stats.error = Some(format!("{}: {e}", o.name));
}
