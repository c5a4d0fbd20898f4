//! An exporter thread: flow records from the workers it serves (every
//! worker, or with `weir flows --export per-queue` one) come in over one
//! channel, a batch at a time (what a worker handed out in a run of
//! packets: a record a time moved the channel's shared state between the
//! two threads' CPUs for every record), are packed into messages by one
//! [`Encoder`] (so the sequence numbers of its observation domain count in
//! order whatever queue a record came from), sent over UDP to every
//! collector, paced, on a connected socket each ([`super::collector`]), and
//! written to the IPFIX files ([`FlowFiles`]), the same bytes to each.
//!
//! A record is *exported* once a collector's socket took its message or a
//! file was written with it: UDP says no more. What came back port
//! unreachable is counted per collector ([`CollectorStats`]).
//!
//! Contract: every record that comes in is shown once to the caller's
//! [`ExportHooks::record`], then counted exactly once in [`ExportStats`]:
//! `records in = exported + not_carried + lost` (exported by reason in
//! [`ExportStats::by_reason`]; with files, each record of a message is
//! either `written` or `unwritten`). The exporter ends when every sender of
//! its channel is gone, after sending what it holds.
//!
//! A file that cannot be written (a full disk, a file size limit) ends the
//! writing of files: the error is kept, naming the file, and every record not
//! written from then on is counted; the collectors still get theirs. The
//! caller hears of it ([`ExportHooks::files_failed`]). Without collectors
//! there is nowhere left to export to, and the run is stopped (its
//! [`StopHandle`]), as `weir record` stops on a write error.
//!
//! A message goes out when it is full, when its oldest record has waited a
//! second of wall time (a quiet live link still reports promptly), and at
//! the end. The templates go at the start of the first message and again at
//! the first message after each template refresh interval (wall time).
//!
//! A message's export time (and v9's and v5's uptime) is packet time: the
//! latest end of its records. Live, that is when the flows were seen ending;
//! from a trace it is the trace's own clock, so a collector dates a trace's
//! flows by its packets, not by the day it was read.

use super::collector::{Collector, CollectorStats, Pacer};
use super::encode::{self, Added, Encoder, EncoderError, EndReason, FlowRecord, Format};
use super::files::FlowFiles;
use crate::capture::control::StopHandle;
use std::error::Error;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What the exporter counted.
#[derive(Clone, Debug, Default)]
pub struct ExportStats {
    /// Records that reached at least one output (a collector or a file).
    pub exported: u64,
    /// Records that reached no output: every send failed, and no file took them.
    pub lost: u64,
    /// Exported records by why they were exported, in [`EndReason::ALL`]'s order.
    pub by_reason: [u64; 5],
    /// Records the format cannot carry (IPv6 in NetFlow v5), not exported.
    pub not_carried: u64,
    /// Records in messages no collector took (every send failed).
    pub lost_to_send_errors: u64,
    /// Records written to files,
    pub written: u64,
    /// records not written because a file could not be written,
    pub unwritten: u64,
    /// and the first such error, naming the file.
    pub file_error: Option<String>,
    /// The files written and kept, oldest first.
    pub files: Vec<PathBuf>,
    /// v5 records whose packets or octets were cut to 32 bits.
    pub v5_saturated: u64,
    /// Messages built.
    pub messages: u64,
    /// Messages that carried the templates.
    pub template_messages: u64,
    /// Each collector's datagrams, in the order of [`Exporter::collectors`].
    pub collectors: Vec<CollectorStats>,
}

impl ExportStats {
    /// Datagrams handed to the sockets (a message to each collector).
    pub fn datagrams(&self) -> u64 {
        self.collectors.iter().map(|c| c.datagrams).sum()
    }

    /// Sends that failed.
    pub fn send_errors(&self) -> u64 {
        self.collectors.iter().map(|c| c.send_errors).sum()
    }

    /// The first send error, naming its collector (the first in
    /// [`Exporter::collectors`]' order that had one).
    pub fn first_send_error(&self) -> Option<String> {
        self.collectors.iter().find_map(|c| Some(format!("{}: {}", c.addr?, c.first_error.as_ref()?)))
    }

    /// Adds the counts of another exporter (one a queue).
    pub fn add(&mut self, o: ExportStats) {
        self.exported += o.exported;
        for (sum, n) in self.by_reason.iter_mut().zip(o.by_reason) {
            *sum += n;
        }
        self.lost += o.lost;
        self.not_carried += o.not_carried;
        self.lost_to_send_errors += o.lost_to_send_errors;
        self.written += o.written;
        self.unwritten += o.unwritten;
        self.v5_saturated += o.v5_saturated;
        self.messages += o.messages;
        self.template_messages += o.template_messages;
        self.file_error = self.file_error.take().or(o.file_error);
        self.files.extend(o.files);
        self.collectors.resize_with(self.collectors.len().max(o.collectors.len()), CollectorStats::default);
        for (sum, c) in self.collectors.iter_mut().zip(&o.collectors) {
            sum.add(c);
        }
    }
}

/// The exporter's settings.
pub struct Exporter {
    /// The format of its messages.
    pub format: Format,
    /// Its observation domain (see [`Encoder::new`]).
    pub domain: u32,
    /// Biflow records (RFC 5103, IPFIX only).
    pub biflow: bool,
    /// The collectors, each with its pacer (shared by every exporter of the run).
    pub collectors: Vec<(SocketAddr, Pacer)>,
    /// How often (wall time) the templates go again (IPFIX and v9), for a
    /// collector started later.
    pub template_refresh: Duration,
}

/// Why [`Exporter::open`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The format refused the settings.
    #[error(transparent)]
    Encoder(#[from] EncoderError),
    /// A collector's socket could not be opened.
    #[error("cannot open a UDP socket to export to {addr}")]
    Socket {
        /// The collector.
        addr: SocketAddr,
        /// What the system said.
        source: io::Error,
    },
}

/// What an exporter thread tells its caller as it goes, for the caller's
/// own outputs (the CLI writes each record as an EVE event, and its
/// messages). Every method does nothing unless written; `()` is the hook of
/// a caller that wants nothing.
pub trait ExportHooks: Send {
    /// Each record that comes in, once, before it is encoded (whatever then
    /// becomes of it).
    fn record(&mut self, _record: &FlowRecord) {}

    /// A file could not be written: `error` names it and says why; no more
    /// files are written. With `stopping` there is no collector either, and
    /// the exporter stops the run when this returns.
    fn files_failed(&mut self, _error: &str, _stopping: bool) {}
}

impl ExportHooks for () {}

/// How long the last datagram's ICMP error, if any, is waited for at the end.
const SETTLE: Duration = Duration::from_millis(50);

/// An exporter with its sockets open and its encoder made, ready to run.
pub struct Ready {
    encoder: Encoder,
    collectors: Vec<Collector>,
    format: Format,
    refresh: Duration,
}

/// Where messages go: the collectors and the files.
struct Outputs<'a, H> {
    collectors: &'a mut [Collector],
    /// The caller's: sees every record handed over.
    hooks: H,
    /// `None` without `-w`.
    files: Option<FlowFiles>,
    /// A file could not be written: none is written any more.
    failed: bool,
    stop: StopHandle,
}

impl Exporter {
    /// Opens the sockets and checks the domain against the format, before
    /// the run starts, so a failure stops it early.
    pub fn open(&self) -> Result<Ready, OpenError> {
        let encoder = Encoder::new(self.format, self.domain, self.biflow)?;
        let collectors = self
            .collectors
            .iter()
            .map(|(addr, pacer)| Collector::open(*addr, pacer.clone()).map_err(|source| OpenError::Socket { addr: *addr, source }))
            .collect::<Result<_, _>>()?;
        Ok(Ready { encoder, collectors, format: self.format, refresh: self.template_refresh })
    }
}

impl Ready {
    /// The templates-only message every IPFIX file opens with.
    pub fn templates_message(&self) -> Vec<u8> {
        self.encoder.templates_message()
    }

    /// Exports the batches of records that come over `rx` until every
    /// sender is gone, to the collectors and into `files`, showing each
    /// record to `hooks`; `stop` stops the run when no output is left.
    pub fn run<H: ExportHooks>(
        mut self,
        rx: &Receiver<Vec<FlowRecord>>,
        files: Option<FlowFiles>,
        hooks: H,
        stop: StopHandle,
    ) -> ExportStats {
        let mut out = Outputs { collectors: &mut self.collectors, hooks, files, failed: false, stop };
        let mut st = run(&mut self.encoder, self.format, &mut out, self.refresh, rx);
        for c in out.collectors.iter_mut() {
            c.finish(SETTLE);
            st.collectors.push(c.stats.clone());
        }
        if let Some(files) = out.files.take() {
            match files.finish() {
                Ok(kept) => st.files = kept,
                // Closing syncs the last file: its records were written (to
                // the kernel) but may not be on disk. After a failed write
                // this may fail again: the first error is the one kept.
                Err(e) => {
                    st.file_error.get_or_insert_with(|| with_causes(&e));
                }
            }
        }
        st
    }
}

/// `e` and its causes, joined by ": " (as the CLI's anyhow shows an error with `{:#}`).
fn with_causes(e: &(dyn Error + 'static)) -> String {
    std::iter::successors(Some(e), |e| (*e).source()).map(ToString::to_string).collect::<Vec<_>>().join(": ")
}

fn run<H: ExportHooks>(
    enc: &mut Encoder,
    format: Format,
    out: &mut Outputs<'_, H>,
    refresh: Duration,
    rx: &Receiver<Vec<FlowRecord>>,
) -> ExportStats {
    let mut st = ExportStats::default();
    let mut templates_at: Option<Instant> = None;
    let mut oldest: Option<Instant> = None;
    // Reasons of the records in the message being built.
    let mut reasons = [0u64; 5];
    loop {
        let batch = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(b) => b,
            Err(RecvTimeoutError::Timeout) => Vec::new(),
            Err(RecvTimeoutError::Disconnected) => break,
        };
        for r in batch {
            out.hooks.record(&r);
            if enc.is_empty() {
                templates_if_due(enc, format, &mut templates_at, refresh, &mut st);
            }
            let mut added = enc.add(&r);
            if added == Added::Full {
                send(enc, out, &mut reasons, &mut st);
                templates_if_due(enc, format, &mut templates_at, refresh, &mut st);
                added = enc.add(&r);
            }
            match added {
                Added::Yes => {
                    reasons[reason_index(r.end)] += 1;
                    if format == Format::V5 && encode::v5_saturates(&r) {
                        st.v5_saturated += 1;
                    }
                    oldest.get_or_insert_with(Instant::now);
                }
                Added::NotCarried => st.not_carried += 1,
                Added::Full => unreachable!("a record always fits an empty message"),
            }
        }
        if oldest.is_some_and(|t| t.elapsed() >= Duration::from_secs(1)) {
            send(enc, out, &mut reasons, &mut st);
            oldest = None;
        }
    }
    if !enc.is_empty() {
        send(enc, out, &mut reasons, &mut st);
    }
    st
}

/// A file could not be written: no more are, and the error is kept.
fn file_failed<H: ExportHooks>(out: &mut Outputs<'_, H>, e: crate::sink::rotate::RotateError, st: &mut ExportStats) {
    let text = with_causes(&e);
    let stopping = out.collectors.is_empty();
    out.hooks.files_failed(&text, stopping);
    st.file_error.get_or_insert(text);
    out.failed = true;
    if stopping {
        out.stop.stop();
    }
}

/// Puts the templates at the start of the (empty) message when none were
/// sent yet or the refresh interval has passed since; v5 has none.
fn templates_if_due(enc: &mut Encoder, format: Format, at: &mut Option<Instant>, refresh: Duration, st: &mut ExportStats) {
    if format != Format::V5 && at.is_none_or(|t| t.elapsed() >= refresh) {
        enc.add_templates();
        *at = Some(Instant::now());
        st.template_messages += 1;
    }
}

fn reason_index(r: EndReason) -> usize {
    EndReason::ALL.iter().position(|&x| x == r).expect("every reason is listed")
}

/// Sends the message to every collector, writes it to the files, and
/// counts it.
fn send<H: ExportHooks>(enc: &mut Encoder, out: &mut Outputs<'_, H>, reasons: &mut [u64; 5], st: &mut ExportStats) {
    let records = enc.records() as u64;
    let msg = enc.finish();
    st.messages += 1;
    let mut sent = false;
    for c in out.collectors.iter_mut() {
        sent |= c.send(msg, records);
    }
    if !out.collectors.is_empty() && !sent {
        st.lost_to_send_errors += records;
    }
    let mut written = false;
    if let Some(files) = out.files.as_mut().filter(|_| !out.failed) {
        match files.write(msg, records as usize) {
            Ok(()) => written = true,
            Err(e) => file_failed(out, e, st),
        }
    }
    if written {
        st.written += records;
    } else if out.files.is_some() {
        st.unwritten += records;
    }
    if sent || written {
        st.exported += records;
        for (sum, n) in st.by_reason.iter_mut().zip(reasons.iter()) {
            *sum += n;
        }
    } else {
        st.lost += records;
    }
    *reasons = [0; 5];
    enc.reset();
}
