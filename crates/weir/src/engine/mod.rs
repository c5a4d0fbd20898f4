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
mod reader;
mod sys;
mod watch;

pub use crate::capture::control::{StopHandle, StopReason};
pub use crate::capture::unit::{SourceError, SourceErrorKind, SourceInfo};
pub use affinity::{CpuPlan, Placement};
pub use reader::{Read, Reader, ReaderReport};
pub use watch::Watch;

use crate::balance;
use crate::capture::{CaptureUnit, Control, Progress};
use crate::filter::{Filter, FilterEngine, FilterError, FilterSwitch};
use crate::locality::LocalityConfig;
use crate::memory::{Budget, Bytes, Plan};
use crate::packet::Runs;
use crate::pool::{self, ChunkCount, Next, PoolConfig, PoolGauge, WorkerSide};
use crate::profile::{Probe, Profiler, Stage};
use crate::source::{self, Fanout, LiveKind, Pacing, SourceSpec, SpecError, XdpSpread};
use crate::stats::{QueueCounters, Snapshot};
use crate::{Handler, LinkType, QueueId, Setting, SettingError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker sleeps on an empty capture queue before looking again.
const WORKER_IDLE: Duration = Duration::from_millis(100);

/// Why an engine could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Neither [`EngineBuilder::source`] nor [`EngineBuilder::source_spec`] was called.
    #[error("no source given")]
    NoSource,
    /// The source name does not parse.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The source could not be opened (a missing file, a refused privilege,
    /// an option it cannot take, more memory than may be used).
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Its message names the expression, so it needs no prefix.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// A setting refused, or settings that contradict each other: the front
    /// end names the setting its own way (see [`crate::setting`]).
    #[error(transparent)]
    Setting(#[from] SettingError),
}

impl BuildError {
    /// True when the user's input was wrong (exit code 2 in the CLI).
    pub fn is_bad_input(&self) -> bool {
        match self {
            BuildError::NoSource | BuildError::Spec(_) => true,
            BuildError::Source(e) => e.is_bad_input(),
            BuildError::Filter(e) => !matches!(e, FilterError::Library(_)),
            BuildError::Setting(_) => true,
        }
    }

    /// The setting the error is about, if it is about one (here or in the source).
    pub fn setting_error(&self) -> Option<&SettingError> {
        match self {
            BuildError::Setting(e) | BuildError::Source(SourceError::Setting(e)) => Some(e),
            _ => None,
        }
    }
}

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

/// Configures an [`Engine`]; values are checked against each other in [`build`](Self::build).
#[derive(Default)]
pub struct EngineBuilder {
    spec: Option<SourceSpec>,
    pool: PoolConfig,
    filter: Option<String>,
    filter_engine: FilterEngine,
    packet_limit: Option<u64>,
    time_limit: Option<Duration>,
    pacing: Pacing,
    open: source::OpenOptions,
    cpus: CpuPlan,
    balance: balance::Mode,
    locality: Option<LocalityConfig>,
    /// The pool was given by the caller, who then gets exactly that.
    pool_set: bool,
    /// Trace reading was configured by the caller, who then gets exactly that.
    trace_reading_set: bool,
    /// What the application allocates beside the engine (see [`Self::application_memory`]).
    application_memory: Plan,
    /// Stage timing, when the run is profiled.
    profiler: Option<Arc<Profiler>>,
    /// The run's stop flag, from the builder on: a stop may end [`build`](Self::build)'s
    /// wait for a pipe's header (see [`stop_handle`](Self::stop_handle)).
    ctl: Arc<Control>,
}

impl EngineBuilder {
    /// The source, by name: `trace.pcap`, `trace.pcap@0-3`, `file:PATH@2`, `-`,
    /// `eth1`, `afxdp:eth1@0-3` (see [`SourceSpec`]). Fails only when the name
    /// does not parse; whether the source opens is learned in [`build`](Self::build).
    pub fn source(mut self, name: &str) -> Result<Self, SpecError> {
        self.spec = Some(name.parse()?);
        Ok(self)
    }

    /// The source, already parsed (or built by the caller, as libpcap's
    /// library builds one from `pcap_open_offline`'s path).
    pub fn source_spec(mut self, spec: SourceSpec) -> Self {
        self.spec = Some(spec);
        self
    }

    /// Pool shape per queue; default WireCAP-B-(256,128). Without this, locality
    /// buffering raises the default's chunks to hold two batches and a chunk,
    /// so capture fills the next batch while one is delivered; with it, `cfg`
    /// is used as given (and a pool too small for two batches is reported in
    /// [`SourceInfo::notes`]).
    pub fn pool(mut self, cfg: PoolConfig) -> Self {
        self.pool = cfg;
        self.pool_set = true;
        self
    }

    /// How queues share load: basic (own pools only), advanced (chunk offloading
    /// within the group of all queues), or flow-consistent rebalancing.
    pub fn balance(mut self, mode: balance::Mode) -> Self {
        self.balance = mode;
        self
    }

    /// Deliver each worker's packets in batches sorted by port (see
    /// [`locality`](crate::locality)); off (`None`) by default, for strict order.
    pub fn locality(mut self, cfg: Option<LocalityConfig>) -> Self {
        self.locality = cfg;
        self
    }

    /// A libpcap filter expression, compiled in [`build`](Self::build) for the
    /// source's link type and snaplen; packets it rejects are counted as
    /// filtered (or, on AF_PACKET, never received).
    pub fn filter(mut self, expr: impl Into<String>) -> Self {
        self.filter = Some(expr.into());
        self
    }

    /// What runs the filter where weir runs it in user space (trace and afxdp
    /// sources): the JIT by default, or the interpreter. Asking for the JIT
    /// where it cannot be had gives the interpreter, with a note saying why
    /// in [`SourceInfo::notes`].
    pub fn filter_engine(mut self, engine: FilterEngine) -> Self {
        self.filter_engine = engine;
        self
    }

    /// Stop after this many packets have passed the filter (all queues together).
    pub fn packet_limit(mut self, n: u64) -> Self {
        self.packet_limit = Some(n);
        self
    }

    /// Stop this long after the start. Enforced while [`Running::join`] or
    /// [`Running::wait_for`] runs, and, for a trace read from a pipe, FIFO or
    /// terminal, while [`build`](Self::build) waits for its header: the limit
    /// then counts from the start of that wait, and ends it (see [`build`](Self::build)).
    pub fn time_limit(mut self, d: Duration) -> Self {
        self.time_limit = Some(d);
        self
    }

    /// How fast a trace is replayed; top speed by default. Give a
    /// [`checked`](Pacing::checked) pacing; a live source refuses any other than top speed.
    pub fn pacing(mut self, p: Pacing) -> Self {
        self.pacing = p;
        self
    }

    /// How trace files are read: block size, headroom, blocks. The defaults suit
    /// page-cached files; tests use tiny blocks to exercise records that straddle them.
    /// Without this, locality buffering raises the default's blocks so that each
    /// queue holds two batches of full-size Ethernet frames; with it, `cfg` is
    /// used as given.
    pub fn trace_reading(mut self, cfg: source::file::ReadConfig) -> Self {
        self.open.trace = cfg;
        self.trace_reading_set = true;
        self
    }

    /// How a trace file's bytes are read (mapped or copied ahead), keeping the
    /// rest of the reading configuration as it is.
    pub fn trace_access(mut self, access: source::file::TraceAccess) -> Self {
        self.open.trace.access = access;
        self
    }

    /// Options of live capture (snaplen, promiscuous mode, ring sizes, fanout, ...).
    pub fn live(mut self, opts: source::LiveOptions) -> Self {
        self.open.live = opts;
        self
    }

    /// Memory the application will allocate beside the engine (its automata, its
    /// flow tables), checked with the engine's own before anything is
    /// allocated (see [`crate::memory`]), so the two never each take the share
    /// of the memory available that only one of them may.
    pub fn application_memory(mut self, plan: Plan) -> Self {
        self.application_memory = plan;
        self
    }

    /// Time the stages of the packet path on sampled batches and hand them to
    /// `p` as each thread ends (see [`crate::profile`]); off by default, and
    /// then the loops carry no timing code at all.
    pub fn profile(mut self, p: Arc<Profiler>) -> Self {
        self.profiler = Some(p);
        self
    }

    /// A handle that stops the engine this builder makes, usable at once:
    /// while [`build`](Self::build) waits for the header of a trace from a pipe,
    /// and then for the whole run (it is the run's [`Running::stop_handle`]).
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.ctl))
    }

    /// Pin each queue's capture thread and worker (see [`CpuPlan`]); unpinned by default.
    pub fn cpus(mut self, plan: CpuPlan) -> Self {
        self.cpus = plan;
        self
    }

    /// Check the settings against each other, open the source (within the
    /// memory budget) and compile the filter for its link type. Fails on a
    /// missing source, settings that cannot work together (a locality batch
    /// the pool cannot hold, rebalancing without every queue of a split, a CPU
    /// this process may not use), a source that does not open, or a filter that
    /// does not compile.
    ///
    /// A trace read from a pipe, FIFO or terminal is waited for until its
    /// header arrives, or until the time limit passes or a stop is asked for
    /// (see [`stop_handle`](Self::stop_handle)). Stopped first, the engine is
    /// built all the same, with nothing to read: its run ends at once with no
    /// packet and the stop's reason, its link type is a stand-in (Ethernet),
    /// and a note in [`SourceInfo::notes`] says so.
    pub fn build(mut self) -> Result<Engine, BuildError> {
        let spec = self.spec.take().ok_or(BuildError::NoSource)?;
        if let Some(n) = self.packet_limit {
            self.ctl.set_packet_limit(n);
        }
        // What the user should hear about the pool, said with the source's notes.
        let mut pool_note = None;
        let mut raised = String::new();
        if let Some(l) = &self.locality {
            let m = self.pool.cells().get();
            let two = l.pool_chunks(m);
            if !self.pool_set && two > self.pool.chunks().get() {
                raised = format!(", raised to hold two locality batches of {}", l.batch.get());
            }
            if !self.pool_set {
                self.pool = ChunkCount::new(two.max(self.pool.chunks().get()))
                    .and_then(|r| PoolConfig::with_bytes(self.pool.cells(), r, self.pool.chunk_bytes()))
                    .map_err(|e| {
                        SettingError::new(Setting::Locality, format!("a batch of {} packets: no pool holds two: {e}", l.batch.get()))
                    })?;
            }
            let r = self.pool.chunks().get();
            if r < two {
                pool_note = Some(format!(
                    "the pool ({m},{r}) holds fewer than two locality batches of {} packets, so capture waits while a batch \
                     is delivered; a pool of {m},{two} (or the default pool) lets it go on",
                    l.batch.get()
                ));
            }
            // A batch holds its chunks until delivered: the capture side must keep at
            // least one chunk to fill meanwhile, or capture and worker wait on each other
            // until the timeout every batch.
            if l.batch.get() > (r - 1) * m {
                return Err(SettingError::new(
                    Setting::Locality,
                    format!(
                        "a batch of {} packets needs more than the pool's {r} chunks of {m} cells less one; \
                         a pool of {m},{} or a smaller batch fits",
                        l.batch.get(),
                        l.batch.get().div_ceil(m) + 1
                    ),
                )
                .into());
            }
            if let (SourceSpec::File { queues, .. }, false) = (&spec, self.trace_reading_set) {
                self.open.trace.blocks = self.open.trace.blocks.max(l.trace_blocks(self.open.trace.block_bytes, queues.len()));
            }
        }
        if self.balance.controller().is_some() {
            match &spec {
                SourceSpec::File { queues, .. } if queues.len() != usize::from(queues.total()) => {
                    return Err(SettingError::new(
                        Setting::Balance,
                        format!(
                            "rebalancing moves buckets between every queue of the split, so it needs all of them opened (@0-{})",
                            queues.total() - 1
                        ),
                    )
                    .into())
                }
                SourceSpec::File { .. } => {}
                SourceSpec::Live { kind: LiveKind::AfPacket, .. } => {
                    // The kernel's bucket table is what moves; hash, the default, is what
                    // buckets replaces (both are symmetric flow hashes).
                    let fanout = &mut self.open.live.afpacket.fanout;
                    match *fanout {
                        Fanout::Buckets(_) => {}
                        Fanout::Hash => *fanout = Fanout::Buckets(None),
                        other => {
                            return Err(SettingError::new(
                                Setting::Fanout,
                                format!(
                                    "rebalancing moves afpacket's buckets through weir's bucket table (buckets fanout), \
                                     and {other} fanout has none"
                                ),
                            )
                            .into())
                        }
                    }
                }
                // The capture threads steer buckets themselves.
                SourceSpec::Live { kind: LiveKind::AfXdp, .. } => {}
                // The capture thread steers buckets of weir's hash, as a trace's does.
                SourceSpec::Live { kind: LiveKind::Xdp, .. } if self.open.live.xdp.spread == XdpSpread::Hash => {}
                SourceSpec::Live { kind: LiveKind::Xdp, .. } => {
                    return Err(SettingError::new(
                        Setting::Balance,
                        "rebalancing moves buckets of weir's hash between queues, and an xdp: source spread by RX \
                         queue (--xdp-spread queue) has none: spread by hash (the default), or use offloading"
                            .to_string(),
                    )
                    .into())
                }
            }
        }
        let allowed = sys::allowed_cpus();
        if let CpuPlan::List(list) = &self.cpus {
            if let Some(&cpu) = list.iter().find(|c| !allowed.contains(c)) {
                return Err(
                    SettingError::new(Setting::Cpus, format!("CPU {cpu} is not available to this process (allowed: {allowed:?})")).into()
                );
            }
        }
        self.open.budget = self.memory(&raised);
        let opened = Instant::now();
        let wait = source::file::HeaderWait { ctl: &self.ctl, limit: self.time_limit, profiler: self.profiler.clone() };
        let mut source = source::open(&spec, &self.open, &wait)?;
        // A trace's time limit counts from the wait for its header (from a pipe,
        // as long as the writer takes); a live source's from the start.
        let time_limit = match spec {
            SourceSpec::File { .. } => self.time_limit.map(|l| l.saturating_sub(opened.elapsed())),
            SourceSpec::Live { .. } => self.time_limit,
        };
        let mut info = source.info().clone();
        info.notes.extend(pool_note);
        let placements = affinity::plan(&self.cpus, info.iface.as_deref(), &info.queues, &allowed);
        let filter = match &self.filter {
            Some(expr) => {
                Some(Filter::compile(expr, info.link_type, info.snaplen)?.with_engine(self.filter_engine).bind_where_known(info.link)?)
            }
            None => None,
        };
        if let Some(why) = filter.as_ref().and_then(Filter::jit_unavailable) {
            info.notes.push(format!("the filter runs on the interpreter: {why}"));
        }
        info.notes.extend(source.place_filter(filter.as_ref())?);
        if !matches!(spec, SourceSpec::Live { kind: LiveKind::AfPacket, .. }) {
            info.notes.extend(filter.as_ref().zip(self.filter.as_deref()).and_then(|(f, e)| f.ancillary_note(e)));
        }
        Ok(Engine {
            source,
            info,
            placements,
            pool: self.pool,
            filter,
            time_limit,
            pacing: self.pacing,
            balance: self.balance,
            locality: self.locality,
            profiler: self.profiler,
            ctl: self.ctl,
        })
    }
}

impl EngineBuilder {
    /// What each queue of the engine will take: its pool and work-queue pair,
    /// and its locality stage; the source adds its own (see [`crate::memory`]).
    fn memory(&self, raised: &str) -> Budget {
        let (m, r) = (self.pool.cells().get(), self.pool.chunks().get());
        let mut budget = Budget::new(self.pool.capacity());
        budget.application(self.application_memory.clone());
        budget.per_queue(
            format!("pools: {r} chunks of {} each (pool {m},{r}{raised})", Bytes(self.pool.chunk_bytes().get() as u64)),
            self.pool.memory_bytes(),
        );
        if let Some(l) = &self.locality {
            let double = if l.double_buffer { ", double-buffered" } else { "" };
            budget.per_queue(format!("locality index (locality batch {}{double})", l.batch.get()), l.memory_bytes(m));
        }
        budget
    }
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
    balance: balance::Mode,
    locality: Option<LocalityConfig>,
    profiler: Option<Arc<Profiler>>,
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
    /// [`balance`]), so no stream is split. Refused: offloading (`offload:T`,
    /// `rebalance:T`), where a buddy worker would handle packets of streams
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
        let mut l = self.launch(Takers::Workers)?;
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
        Ok(Running {
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
        })
    }

    /// Start the capture threads and hand every queue's packets to the caller's
    /// thread, which pulls them one at a time (see [`Reader`]).
    pub fn start_reader(self) -> Result<Reader, RunError> {
        Ok(Reader::new(self.launch(Takers::OneReader)?))
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
        Ok(Reader::per_queue(self.launch(Takers::ReaderPerQueue)?))
    }

    /// What every way of running shares: the pools and work-queue pairs, and
    /// the capture threads, started. The worker sides are left to the caller;
    /// for one thread reading them all, every capture side also rings the
    /// first worker side's bell.
    fn launch(self, takers: Takers) -> Result<Launched, RunError> {
        let pull = takers != Takers::Workers;
        let ctl = self.ctl;
        let progress = self.source.progress();
        let balance = Arc::new(balance::BalanceCounters::default());
        let filter = FilterSwitch::new(self.filter, self.info.link);
        let rebalancing = self.balance.controller().is_some();
        let mut counters = Vec::new();
        let mut pools = Vec::new();
        let mut caps = Vec::new();
        let mut works = Vec::new();
        for &q in &self.info.queues {
            let c = Arc::new(QueueCounters::new(q));
            let (cap, work) = pool::work_queue_pair(q, &self.pool, Arc::clone(&c), self.locality.map(|_| self.info.link_type))
                .map_err(|error| RunError::Memory { queue: q, error })?;
            ctl.register(cap.wake_handle());
            ctl.register(work.wake_handle());
            counters.push(c);
            pools.push(cap.gauge());
            caps.push(cap);
            works.push(work);
        }
        // Workers that run handlers hand flow state over with each bucket moved;
        // one thread reading every queue keeps all of it anyway, and readers
        // of a queue each hold no state of the engine's to hand over.
        let handovers = (rebalancing && !pull).then(|| {
            let (h, flags) = balance::Handovers::new(works.iter().map(WorkerSide::wake_handle).collect());
            works.iter_mut().zip(flags).for_each(|(w, f)| w.watch(f));
            h
        });
        let units = self
            .source
            .into_units(source::CaptureOptions {
                filter: filter.clone(),
                pacing: self.pacing,
                pool: self.pool,
                balance: self.balance,
                balance_counters: Arc::clone(&balance),
                handovers: handovers.clone(),
                profiler: self.profiler.clone(),
            })
            .map_err(|error| RunError::Source { unit: self.info.name.clone(), error })?;
        // The buddy group is every queue of the engine: the queues one application reads.
        if let Some(t) = self.balance.offload().filter(|_| caps.len() > 1) {
            pool::link_buddies(&mut caps, &mut works, t);
        }
        if let Some(first) = works.first().filter(|_| takers == Takers::OneReader) {
            pool::share_bell(&mut caps, &first.wake_handle());
        }
        let mut capture_sides: Vec<_> = caps.into_iter().map(Some).collect();
        let worker_sides: Vec<_> = self.info.queues.iter().copied().zip(works).collect();

        let placement_of = |q: QueueId| self.placements.iter().find(|p| p.queue == q).cloned();
        let mut captures = Vec::new();
        for unit in units {
            let name = unit.name();
            let cpu = unit.queues().first().and_then(|&q| placement_of(q)).and_then(|p| p.capture_cpu);
            let sides = unit
                .queues()
                .iter()
                .filter_map(|q| self.info.queues.iter().position(|x| x == q))
                .filter_map(|i| capture_sides[i].take())
                .collect();
            let thread_ctl = Arc::clone(&ctl);
            let thread_name = format!("weir-capture-{name}");
            let thread_label = format!("capture-{name}");
            // A unit that times its own stages hands its timer in itself; any
            // other capture thread is profiled whole.
            let whole = self.profiler.clone().filter(|_| !unit.profiled());
            if let Some(p) = &whole {
                p.expect_thread();
            }
            ctl.thread_started();
            let h = std::thread::Builder::new()
                .name(thread_name.chars().take(15).collect())
                .spawn(move || {
                    let _end = ThreadEnd(&thread_ctl);
                    pin(cpu);
                    let r = capture_loop(unit, sides, &thread_ctl);
                    if let Some(p) = whole {
                        p.whole_thread(&thread_label, Stage::CaptureThread);
                    }
                    r
                })
                .map_err(|e| {
                    ctl.thread_ended();
                    ctl.request_stop(StopReason::Failed);
                    RunError::Spawn(e)
                })?;
            captures.push((name, h));
        }
        // Queues no unit serves: closing their capture queues lets their workers end.
        drop(capture_sides);

        Ok(Launched {
            ctl,
            placements: self.placements,
            counters,
            captures,
            worker_sides,
            started: Instant::now(),
            time_limit: self.time_limit,
            progress,
            balance: rebalancing.then_some(balance),
            info: self.info,
            locality: self.locality,
            filter,
            handovers,
            profiler: self.profiler,
            pools,
        })
    }
}

/// Who takes the captured chunks off the queues an engine launches.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Takers {
    /// A worker thread per queue, calling the application's handler.
    Workers,
    /// One [`Reader`] for every queue, on the caller's thread.
    OneReader,
    /// A [`Reader`] per queue, each on a thread of the caller's.
    ReaderPerQueue,
}

/// An engine whose capture threads run, before its worker sides have a home.
pub(crate) struct Launched {
    pub(crate) ctl: Arc<Control>,
    pub(crate) placements: Vec<Placement>,
    pub(crate) counters: Vec<Arc<QueueCounters>>,
    pub(crate) captures: Vec<(String, JoinHandle<Result<(), RunError>>)>,
    pub(crate) worker_sides: Vec<(QueueId, WorkerSide)>,
    pub(crate) started: Instant,
    pub(crate) time_limit: Option<Duration>,
    pub(crate) progress: Option<Arc<Progress>>,
    pub(crate) balance: Option<Arc<balance::BalanceCounters>>,
    pub(crate) info: SourceInfo,
    pub(crate) locality: Option<LocalityConfig>,
    /// Replaces the capture units' filter while they run (a reader's `replace_filter`).
    pub(crate) filter: FilterSwitch,
    /// The workers' mailboxes, when they hand flow state over (see [`balance`]).
    pub(crate) handovers: Option<Arc<balance::Handovers>>,
    /// Stage timing, when the run is profiled.
    pub(crate) profiler: Option<Arc<Profiler>>,
    /// Each queue's pool, for a [`Watch`].
    pub(crate) pools: Vec<PoolGauge>,
}

/// Pin the calling thread if a CPU was chosen. A refusal (a CPU taken offline since
/// the plan was made) leaves the thread where the scheduler put it.
fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        let _ = sys::pin_current_thread(c);
    }
}

/// Tells the engine a thread ended, however it ends.
struct ThreadEnd<'a>(&'a Control);

impl Drop for ThreadEnd<'_> {
    fn drop(&mut self) {
        self.0.thread_ended();
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn capture_loop(unit: Box<dyn CaptureUnit>, sides: Vec<pool::CaptureSide>, ctl: &Control) -> Result<(), RunError> {
    let name = unit.name();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unit.run(sides, ctl)));
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => {
            ctl.request_stop(StopReason::Failed);
            Err(RunError::Source { unit: name, error })
        }
        Err(p) => {
            ctl.request_stop(StopReason::Failed);
            Err(RunError::CapturePanicked { unit: name, message: panic_message(p) })
        }
    }
}

fn worker_loop<H: Handler>(
    side: WorkerSide,
    mut handler: H,
    ctl: &Control,
    locality: Option<(LocalityConfig, LinkType)>,
    desk: Option<balance::Desk>,
    profiler: Option<&Profiler>,
) -> Result<H, RunError> {
    let queue = side.queue();
    let mut timer = profiler.map(|p| p.timer(&format!("worker-{queue}"), Stage::Delivery));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Chosen once: the untimed loops carry no marks at all.
        match &mut timer {
            Some(t) => deliver_all(&side, &mut handler, &locality, desk.as_ref(), t),
            None => deliver_all(&side, &mut handler, &locality, desk.as_ref(), &mut ()),
        }
        // State handed over as the capture stopped was posted before it closed.
        if let Some(d) = &desk {
            d.serve(&mut handler);
        }
    }))
    .and_then(|()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.finish())));
    if let (Some(t), Some(p)) = (timer, profiler) {
        t.finish(p);
    }
    match result {
        Ok(()) => Ok(handler),
        Err(p) => {
            // Nobody will drain this queue now: stop capture so it does not wait forever.
            ctl.request_stop(StopReason::Failed);
            Err(RunError::HandlerPanicked { queue, message: panic_message(p) })
        }
    }
}

/// A worker's loop until its capture queue is closed and drained, with stage
/// marks on `probe` (see [`crate::profile`]).
fn deliver_all<H: Handler, P: Probe>(
    side: &WorkerSide,
    handler: &mut H,
    locality: &Option<(LocalityConfig, LinkType)>,
    desk: Option<&balance::Desk>,
    probe: &mut P,
) {
    let serve = |handler: &mut H| {
        if let Some(d) = desk {
            d.serve(handler);
        }
    };
    if let Some((cfg, link)) = locality {
        return crate::locality::run(side, handler, cfg, *link, WORKER_IDLE, desk, probe);
    }
    loop {
        probe.begin(Stage::Delivery);
        // Taking a ready chunk is delivery; sleeping for one is waiting.
        let next = match side.try_next() {
            Some(c) => Next::Chunk(c),
            None => {
                probe.mark(Stage::WorkerWait);
                let n = side.next(WORKER_IDLE);
                probe.mark(Stage::Delivery);
                n
            }
        };
        match next {
            Next::Chunk(chunk) => {
                // State handed over for this chunk's packets was posted before it.
                probe.mark(Stage::Application);
                serve(handler);
                probe.mark(Stage::Delivery);
                let n = chunk.len();
                let mut runs = Runs::new();
                for p in chunk.packets() {
                    if runs.add(p) {
                        probe.mark(Stage::Application);
                        runs.flush(handler);
                        probe.mark(Stage::Delivery);
                    }
                }
                if !runs.is_empty() {
                    probe.mark(Stage::Application);
                    runs.flush(handler);
                }
                probe.mark(Stage::Recycle);
                drop(chunk);
                probe.end(n as u64);
            }
            Next::Idle => {
                probe.mark(Stage::Application);
                serve(handler);
                handler.idle();
                probe.end(0);
            }
            Next::Closed => {
                probe.end(0);
                break;
            }
        }
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
}

impl<H> Running<H> {
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
