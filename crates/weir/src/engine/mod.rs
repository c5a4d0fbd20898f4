//! The engine: one pool and work-queue pair per queue, capture threads that fill
//! them, one worker thread per queue that hands packets to the application, and
//! a clean stop.
//!
//! ```text
//! capture unit ──push──► pool of queue q ──capture queue──► worker q ──► Handler::packet
//!      ▲                                                        │
//!      └──────────── recycle queue (validated) ◄────────────────┘
//! ```
//!
//! Basic mode (WireCAP-B-(M,R)): each queue's chunks stay with that queue. The
//! run ends when every capture unit has returned (end of input, a stop request,
//! the packet limit, the time limit, or an error) and every worker has drained
//! its capture queue; at that point nothing is in flight and the stats identity
//! `received = delivered + filtered + capture_drops + delivery_drops` holds with
//! `in_flight = 0`.

mod affinity;
mod builder;
mod launch;
mod reader;
mod watch;
mod worker;

pub use crate::capture::control::{StopHandle, StopReason};
pub use crate::capture::unit::{SourceError, SourceErrorKind, SourceInfo};
pub use affinity::{CpuPlan, Placement};
pub use builder::{BuildError, EngineBuilder};
pub(crate) use launch::Launched;
use launch::Takers;
pub use reader::{Read, Reader, ReaderReport};
pub use watch::Watch;
use worker::{panic_message, pin, worker_loop, Inline, InlineHook, InlineWorker, ThreadEnd};

use crate::balance;
use crate::capture::{Control, Progress};
use crate::filter::{Filter, FilterError, FilterSwitch};
use crate::locality::LocalityConfig;
use crate::pool::{OnPublish, PoolConfig, PoolGauge, WorkerSide};
use crate::profile::Profiler;
use crate::source::{self, Pacing};
use crate::stats::{QueueCounters, Snapshot};
use crate::{Handler, QueueId, Setting, SettingError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Something went wrong while running. Returned by the start methods when the
/// run cannot begin ([`Spawn`](Self::Spawn), [`Memory`](Self::Memory), a
/// source that cannot start); collected in [`Report::errors`] and
/// [`Reader::error`] for what fails later, after which the run stops with
/// [`StopReason::Failed`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A capture unit failed; what it captured before is still delivered.
    #[error("{unit}: {error}")]
    Source {
        /// The capture unit (a queue, or the whole trace).
        unit: String,
        /// Why it failed.
        error: SourceError,
    },
    /// A capture thread panicked (a bug in weir).
    #[error("capture thread {unit} panicked: {message}")]
    CapturePanicked {
        /// The capture unit whose thread it was.
        unit: String,
        /// The panic's message, when it had one.
        message: String,
    },
    /// The application's handler panicked; its queue is no longer drained and
    /// its handler is lost.
    #[error("handler on queue {queue} panicked: {message}")]
    HandlerPanicked {
        /// The queue whose worker ran the handler.
        queue: QueueId,
        /// The panic's message, when it had one.
        message: String,
    },
    /// The system refused a thread.
    #[error("cannot start thread: {0}")]
    Spawn(std::io::Error),
    /// A setting of the run was refused before it started (the stream
    /// layer's, or one that contradicts the engine's).
    #[error(transparent)]
    Setting(SettingError),
    /// A queue's pool could not be mapped.
    #[error("cannot allocate the pool of queue {queue}: {error}")]
    Memory {
        /// The queue whose pool it was.
        queue: QueueId,
        /// The mapping's OS error.
        error: std::io::Error,
    },
}

/// A configured engine: its source is open (and any privilege it needed was
/// used), its filter compiled, nothing runs yet. Start it once, in one of
/// three ways: [`run`](Self::run) or [`start`](Self::start) (a worker thread
/// per queue calls the application's [`Handler`]), or
/// [`start_reader`](Self::start_reader) or [`start_readers`](Self::start_readers)
/// (the caller pulls packets, every queue on one thread or each on its own).
pub struct Engine {
    source: Box<dyn source::Source>,
    info: SourceInfo,
    placements: Vec<Placement>,
    pool: PoolConfig,
    filter: Option<Filter>,
    time_limit: Option<Duration>,
    pacing: Pacing,
    balance: balance::BalanceMode,
    locality: Option<LocalityConfig>,
    profiler: Option<Arc<Profiler>>,
    /// Handlers run on the capture threads ([`EngineBuilder::inline`]).
    inline: bool,
    /// The stop flag and packet limit, the builder's (see [`EngineBuilder::stop_handle`]).
    ctl: Arc<Control>,
}

impl Engine {
    /// A builder with every default: basic balancing, no filter, no limit,
    /// top speed, unpinned threads.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// What the opened source is: its name, link type, snaplen and queues,
    /// and notes for the user about how it was opened.
    pub fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// A handle on the kernel cutoff's flow map, for one queue's stream
    /// layer ([`Streams::set_kernel_cutoff`](crate::stream::Streams::set_kernel_cutoff)):
    /// `None` when the source has no map (a trace file, or a live source
    /// opened with no `kernel_flows`), or when the engine has a filter,
    /// which may tell apart packets of one stream where the kernel's counts
    /// could not.
    ///
    /// # Errors
    ///
    /// [`RunError::Source`] when the map's descriptor cannot be duplicated.
    pub fn kernel_cutoff(&self) -> Result<Option<crate::stream::KernelCutoff>, RunError> {
        let Some(flows) = self.source.kernel_flows().filter(|_| self.filter.is_none()) else { return Ok(None) };
        flows.handle().map(Some).map_err(|error| RunError::Source { unit: self.info.name.clone(), error })
    }

    /// The pool every queue gets (the default raised for locality buffering,
    /// unless [`EngineBuilder::pool`] gave one).
    pub fn pool_config(&self) -> &PoolConfig {
        &self.pool
    }

    /// Where each queue's threads will run.
    pub fn placements(&self) -> &[Placement] {
        &self.placements
    }

    /// Replace the filter before the start, for callers that learn it after the
    /// source is open (libpcap's `pcap_setfilter`). It must be compiled for
    /// this source's link type.
    ///
    /// # Errors
    ///
    /// [`FilterError::Invalid`] if the source's interface is known
    /// ([`SourceInfo::link`]) and the filter cannot be [bound](Filter::bind) to it.
    pub fn set_filter(&mut self, filter: Option<Filter>) -> Result<(), FilterError> {
        self.filter = filter.map(|f| f.bind_where_known(self.info.link)).transpose()?;
        Ok(())
    }

    /// Run to the end and report: [`start`](Self::start), then
    /// [`Running::join`]. `make` is called once per queue, on this thread, to
    /// create that queue's handler.
    pub fn run<H: Handler>(self, make: impl FnMut(QueueId) -> H) -> Result<Report<H>, RunError> {
        Ok(self.start(make)?.join())
    }

    /// Run the stream layer ([`crate::stream`]) on every queue's worker, each
    /// with the handler `make` returns for it, to the end, and report; the
    /// report's handlers are the [`Streams`](crate::stream::Streams) layers,
    /// with their statistics. [`start_streams`](Self::start_streams), then
    /// [`Running::join`].
    pub fn run_streams<H: crate::stream::StreamHandler>(
        self,
        cfg: &crate::stream::StreamConfig,
        make: impl FnMut(QueueId) -> H,
    ) -> Result<Report<crate::stream::Streams<H>>, RunError> {
        Ok(self.start_streams(cfg, make)?.join())
    }

    /// Start the stream layer on every queue's worker and return at once.
    ///
    /// Streams keep their state on the worker of their queue. Rebalancing a
    /// trace or an afpacket capture moves a bucket's streams with it: the old
    /// worker hands them to the new one before the bucket's next packet (see
    /// [`Handler::export`]), so no stream is split. Refused: offloading
    /// (`offload:T`, `rebalance:T`), where a buddy worker would handle packets of streams
    /// whose state lives on another worker at the same time, and rebalancing
    /// an afxdp capture, whose moving entries are not sets of flows a worker
    /// can pick out of its table (the error says why).
    pub fn start_streams<H: crate::stream::StreamHandler>(
        self,
        cfg: &crate::stream::StreamConfig,
        mut make: impl FnMut(QueueId) -> H,
    ) -> Result<Running<crate::stream::Streams<H>>, RunError> {
        if self.balance.offload().is_some() {
            return Err(RunError::Setting(SettingError::new(
                Setting::Balance,
                "offloading hands a queue's chunks to another worker while the queue's own worker runs, so packets of \
                 one stream would be handled on two workers at once, away from its state: the stream layer refuses it; \
                 use basic or rebalance (without :T), which moves whole buckets with their streams",
            )));
        }
        if let Some(why) = self.balance.controller().and(self.source.handover_refusal()) {
            return Err(RunError::Setting(SettingError::new(
                Setting::Balance,
                format!(
                    "rebalancing moves a bucket's streams from the old worker to the new one, and here it cannot: {why}; \
                     the streams would be split, so the stream layer refuses it: use basic, or afpacket"
                ),
            )));
        }
        let (link, queues) = (self.info.link_type, self.info.queues.len());
        let mut layers = Vec::new();
        for &q in &self.info.queues {
            let mut layer = crate::stream::Streams::new(cfg, link, q, queues, make(q)).map_err(RunError::Setting)?;
            // The kernel cutoff: each worker its own handle on the source's flow map.
            if let Some(k) = self.kernel_cutoff()? {
                layer.set_kernel_cutoff(k);
            }
            layers.push(Some(layer));
        }
        let boards = self.info.queues.iter().copied().zip(layers.iter().flatten().map(|l| l.board())).collect();
        let mut next = layers.into_iter();
        let mut running = self.start(move |_| next.next().flatten().expect("one stream layer per queue, in queue order"))?;
        running.streams = boards;
        Ok(running)
    }

    /// Start the threads and return at once. `make` is called once per queue,
    /// on this thread, before its worker starts. On an error, whatever had
    /// started is asked to stop.
    pub fn start<H: Handler>(self, mut make: impl FnMut(QueueId) -> H) -> Result<Running<H>, RunError> {
        if self.inline {
            return self.start_inline(make);
        }
        let mut l = self.launch(Takers::Workers, None)?;
        let mut workers = Vec::new();
        let locality = l.locality.map(|cfg| (cfg, l.info.link_type));
        for (i, (q, side)) in std::mem::take(&mut l.worker_sides).into_iter().enumerate() {
            let handler = make(q);
            let desk = l.handovers.as_ref().map(|h| h.desk(i));
            let cpu = l.placements.iter().find(|p| p.queue == q).and_then(|p| p.worker_cpu);
            let thread_ctl = Arc::clone(&l.ctl);
            let profiler = l.profiler.clone();
            l.ctl.thread_started();
            let h = std::thread::Builder::new()
                .name(format!("weir-worker-{q}"))
                .spawn(move || {
                    let _end = ThreadEnd(&thread_ctl);
                    pin(cpu);
                    worker_loop(side, handler, &thread_ctl, locality, desk, profiler.as_deref())
                })
                .map_err(|e| {
                    l.ctl.thread_ended();
                    // The capture threads run already: without workers they would wait forever.
                    l.ctl.request_stop(StopReason::Failed);
                    RunError::Spawn(e)
                })?;
            workers.push((q, h));
        }
        Ok(Running::new(l, workers, Vec::new()))
    }

    /// [`start`](Self::start) with each queue's handler on its capture thread
    /// ([`EngineBuilder::inline`]).
    fn start_inline<H: Handler>(self, mut make: impl FnMut(QueueId) -> H) -> Result<Running<H>, RunError> {
        let ctl = Arc::clone(&self.ctl);
        let mut inline = Vec::new();
        let mut hook = |q: QueueId, side: WorkerSide| -> Box<dyn OnPublish> {
            let w: Inline<H> = Arc::new(Mutex::new(Some(InlineWorker { side, handler: make(q), panicked: None, ctl: Arc::clone(&ctl) })));
            inline.push((q, Box::new(finish_inline(q, Arc::clone(&w))) as InlineEnd<H>));
            Box::new(InlineHook(w))
        };
        let l = self.launch(Takers::Workers, Some(&mut hook))?;
        Ok(Running::new(l, Vec::new(), inline))
    }

    /// Start the capture threads and hand every queue's packets to the caller's
    /// thread, which pulls them one at a time (see [`Reader`]).
    pub fn start_reader(self) -> Result<Reader, RunError> {
        Ok(Reader::new(self.launch(Takers::OneReader, None)?))
    }

    /// Start the capture threads and give each queue a [`Reader`] of its own,
    /// in queue order ([`SourceInfo::queues`]), for an application that pulls
    /// every queue on a thread of its own: each reader holds only its queue's
    /// packets and counters, and sleeps on its queue alone.
    ///
    /// - Every queue must be read: a queue nobody reads fills its pool, and
    ///   a capture thread that feeds it and other queues (a trace's) then
    ///   waits for it.
    /// - One stop ends capture on every queue. So does closing a reader
    ///   before its queue has ended ([`Read::End`]): its packets would
    ///   otherwise have nowhere to go.
    /// - The first reader holds the capture threads: its [`Reader::error`]
    ///   and [`Reader::finish`] report their failures, and its
    ///   [`Read::End`] comes once every capture thread has ended.
    pub fn start_readers(self) -> Result<Vec<Reader>, RunError> {
        Ok(Reader::per_queue(self.launch(Takers::ReaderPerQueue, None)?))
    }
}

/// A started engine: capture threads and one worker per queue run until the
/// input ends, a limit or a stop request ends them, or one fails. Dropping it
/// leaves them running; [`join`](Self::join) waits for them and reports.
pub struct Running<H> {
    ctl: Arc<Control>,
    counters: Vec<Arc<QueueCounters>>,
    captures: Vec<(String, JoinHandle<Result<(), RunError>>)>,
    workers: Vec<(QueueId, JoinHandle<Result<H, RunError>>)>,
    started: Instant,
    time_limit: Option<Duration>,
    progress: Option<Arc<Progress>>,
    /// What rebalancing moved, when the mode moves buckets.
    balance: Option<Arc<balance::BalanceCounters>>,
    info: SourceInfo,
    profiler: Option<Arc<Profiler>>,
    pools: Vec<PoolGauge>,
    /// Whether the workers run the locality stage (and count its batches).
    locality: bool,
    /// Each queue's stream layer board, when the workers run the stream layer.
    streams: Vec<(QueueId, Arc<crate::stream::Board>)>,
    /// The capture units' filter, replaceable while they run.
    filter: FilterSwitch,
    /// The handlers run on the capture threads, by queue, when the engine
    /// runs them inline (and no worker threads run).
    inline: Vec<(QueueId, InlineEnd<H>)>,
}

/// What ends an inline handler's run once the capture threads have ended:
/// its `finish` is called, and it is handed back (see [`finish_inline`]).
type InlineEnd<H> = Box<dyn FnOnce() -> Result<H, RunError> + Send + Sync>;

/// Ends the inline handler of `queue`, the capture threads and their sides
/// (which held it) gone: a panic it had, or one in its `finish`, is the error.
fn finish_inline<H: Handler>(queue: QueueId, shared: Inline<H>) -> impl FnOnce() -> Result<H, RunError> + Send + Sync {
    move || {
        let taken = shared.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(mut w) = taken else {
            return Err(RunError::HandlerPanicked { queue, message: "its handler was already taken".into() });
        };
        if let Some(message) = w.panicked.take() {
            return Err(RunError::HandlerPanicked { queue, message });
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.handler.finish())) {
            Ok(()) => Ok(w.handler),
            Err(p) => Err(RunError::HandlerPanicked { queue, message: panic_message(p) }),
        }
    }
}

impl<H> Running<H> {
    /// A launched engine whose chunks go to `workers`' threads, or to the
    /// `inline` handlers on the capture threads (an inline engine refuses a
    /// locality stage, so `locality` says the same either way).
    fn new(l: Launched, workers: Vec<(QueueId, JoinHandle<Result<H, RunError>>)>, inline: Vec<(QueueId, InlineEnd<H>)>) -> Running<H> {
        Running {
            ctl: l.ctl,
            counters: l.counters,
            captures: l.captures,
            workers,
            started: l.started,
            time_limit: l.time_limit,
            progress: l.progress,
            balance: l.balance,
            info: l.info,
            profiler: l.profiler,
            pools: l.pools,
            locality: l.locality.is_some(),
            streams: Vec::new(),
            filter: l.filter,
            inline,
        }
    }

    /// What the source is, as [`Engine::info`] said.
    pub fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// A handle that reads this run's counters from any thread (see [`Watch`]).
    pub fn watch(&self) -> Watch {
        Watch {
            source: self.info.name.clone(),
            counters: self.counters.clone(),
            pools: self.pools.clone(),
            batches: if self.locality { watch::Batches::PerQueue } else { watch::Batches::Off },
            balance: self.balance.clone(),
            streams: self.streams.clone(),
        }
    }

    /// Every queue's counters now (see [`Snapshot`]).
    pub fn stats(&self) -> Snapshot {
        Snapshot { queues: self.counters.iter().map(|c| c.read()).collect() }
    }

    /// A handle that stops this run from any thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.ctl))
    }

    /// Bytes of input consumed and in total (total 0 when unknown), for finite sources.
    pub fn progress(&self) -> Option<(u64, u64)> {
        self.progress.as_ref().map(|p| p.get())
    }

    /// Replaces the capture filter while the capture runs, as
    /// [`Reader::replace_filter`] does: a kernel filter (afpacket) is swapped
    /// before this returns, a capture thread that filters in user space takes
    /// it before its next batch. Each packet is judged by one filter, the old
    /// or the new, and counted once, filtered or delivered. `filter` is
    /// compiled for the source's link type.
    ///
    /// # Errors
    ///
    /// The kernel's refusal of the new program; the capture threads take it
    /// all the same.
    pub fn replace_filter(&self, filter: Option<Filter>) -> std::io::Result<()> {
        self.filter.replace(filter)
    }

    /// Time since the threads started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Wait up to `d` for the run to finish, enforcing the time limit meanwhile.
    /// Returns true when it has finished.
    pub fn wait_for(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        loop {
            let deadline = self.time_limit.map(|l| self.started + l).filter(|_| !self.ctl.stop_requested());
            let wake = deadline.map_or(until, |t| t.min(until));
            if self.ctl.wait_threads(wake) {
                return true;
            }
            if deadline.is_some_and(|t| Instant::now() >= t) {
                self.ctl.request_stop(StopReason::TimeLimit);
            }
            if Instant::now() >= until {
                return false;
            }
        }
    }

    /// Wait for the end (enforcing the time limit) and report. It does not ask
    /// for a stop: on a live source, call [`StopHandle::stop`] first.
    pub fn join(self) -> Report<H> {
        while !self.wait_for(Duration::from_secs(1)) {}
        let elapsed = self.started.elapsed();
        let mut errors = Vec::new();
        for (unit, h) in self.captures {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(p) => errors.push(RunError::CapturePanicked { unit, message: panic_message(p) }),
            }
        }
        let mut handlers = Vec::new();
        for (queue, h) in self.workers {
            match h.join() {
                Ok(Ok(handler)) => handlers.push((queue, handler)),
                Ok(Err(e)) => errors.push(e),
                Err(p) => errors.push(RunError::HandlerPanicked { queue, message: panic_message(p) }),
            }
        }
        // The capture threads have ended, and their sides with them: each
        // inline handler is back here alone.
        for (queue, end) in self.inline {
            match end() {
                Ok(handler) => handlers.push((queue, handler)),
                Err(e) => errors.push(e),
            }
        }
        let stats = Snapshot { queues: self.counters.iter().map(|c| c.read()).collect() };
        if let Some(p) = &self.profiler {
            p.set_packets(stats.total().received);
        }
        let stop = self.ctl.reason().unwrap_or(StopReason::EndOfInput);
        let balance = self.balance.as_ref().map(|b| b.read());
        let unreached_bytes = self.progress.as_ref().map_or(0, |p| p.unreached());
        Report { stats, handlers, elapsed, stop, errors, balance, unreached_bytes }
    }
}

/// The outcome of a run.
pub struct Report<H> {
    /// Final counters; `in_flight` is 0 after a clean run.
    pub stats: Snapshot,
    /// Each queue's handler, in queue order, for reading what it gathered; a
    /// queue whose handler panicked is missing.
    pub handlers: Vec<(QueueId, H)>,
    /// Time from the start to the last thread's end.
    pub elapsed: Duration,
    /// Why the run ended: the first reason given wins.
    pub stop: StopReason,
    /// Everything that went wrong; a malformed trace shows up here, after the
    /// packets before the damage were delivered.
    pub errors: Vec<RunError>,
    /// What rebalancing moved, when the mode moves buckets.
    pub balance: Option<balance::SteeringStats>,
    /// Bytes of a stream input (a pipe, a socket) read but not reached when the
    /// run stopped: a partial record, or data read ahead. A file's rest is
    /// still in the file and is not counted.
    pub unreached_bytes: u64,
}

impl<H> Report<H> {
    /// The first error, if any.
    pub fn error(&self) -> Option<&RunError> {
        self.errors.first()
    }

    /// True when the first error is in the user's input (a malformed trace).
    pub fn failed_on_bad_input(&self) -> bool {
        matches!(self.errors.first(), Some(RunError::Source { error, .. }) if error.is_bad_input())
    }
}
