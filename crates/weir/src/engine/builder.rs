//! Configuring an engine: the builder, whose [`build`](EngineBuilder::build)
//! checks the settings against each other, opens the source within the
//! memory budget and compiles the filter for its link type, and the errors
//! it returns. Nothing runs until the [`Engine`] is started.

use crate::balance;
use crate::capture::Control;
use crate::filter::{Filter, FilterEngine, FilterError};
use crate::locality::LocalityConfig;
use crate::memory::{Budget, Bytes, Plan};
use crate::pool::{ChunkCount, PoolConfig};
use crate::profile::Profiler;
use crate::source::{self, Fanout, LiveKind, Pacing, SourceSpec, SpecError, XdpSpread};
use crate::{Setting, SettingError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::affinity::{self, CpuPlan};
use super::{Engine, SourceError, StopHandle};
use crate::sys::cpu as sys;

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
    balance: balance::BalanceMode,
    locality: Option<LocalityConfig>,
    /// The pool was given by the caller, who then gets exactly that.
    pool_set: bool,
    /// Trace reading was configured by the caller, who then gets exactly that.
    trace_reading_set: bool,
    /// What the application allocates beside the engine (see [`Self::application_memory`]).
    application_memory: Plan,
    /// Stage timing, when the run is profiled.
    profiler: Option<Arc<Profiler>>,
    /// Each queue's worker runs on its capture thread (see [`inline`](Self::inline)).
    inline: bool,
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
    /// [`SourceInfo::notes`](super::SourceInfo::notes)).
    pub fn pool(mut self, cfg: PoolConfig) -> Self {
        self.pool = cfg;
        self.pool_set = true;
        self
    }

    /// How queues share load: basic (own pools only), advanced (chunk offloading
    /// within the group of all queues), or flow-consistent rebalancing.
    pub fn balance(mut self, mode: balance::BalanceMode) -> Self {
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
    /// in [`SourceInfo::notes`](super::SourceInfo::notes).
    pub fn filter_engine(mut self, engine: FilterEngine) -> Self {
        self.filter_engine = engine;
        self
    }

    /// Stop after this many packets have passed the filter (all queues together).
    pub fn packet_limit(mut self, n: u64) -> Self {
        self.packet_limit = Some(n);
        self
    }

    /// Stop this long after the start. Enforced while [`Running::join`](super::Running::join) or
    /// [`Running::wait_for`](super::Running::wait_for) runs, and, for a trace read from a pipe, FIFO or
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
    /// and then for the whole run (it is the run's [`Running::stop_handle`](super::Running::stop_handle)).
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.ctl))
    }

    /// Pin each queue's capture thread and worker (see [`CpuPlan`]); unpinned by default.
    pub fn cpus(mut self, plan: CpuPlan) -> Self {
        self.cpus = plan;
        self
    }

    /// Runs each queue's handler on the capture thread that fills the
    /// queue, after each chunk it fills, instead of on a worker thread of its
    /// own: capture and delivery take turns on one thread, with no hand-off
    /// between CPUs and no thread woken. A trace of one queue then runs on one
    /// thread (beside the trace reader's helper threads); a trace split into
    /// queues runs them all on its one capture thread. For traces only, with
    /// basic balancing and no locality stage; [`Handler::idle`](crate::Handler::idle)
    /// is never called (a trace's timeouts run on packet time), and
    /// [`Handler::finish`](crate::Handler::finish) runs on the thread that joins the run.
    pub fn inline(mut self, yes: bool) -> Self {
        self.inline = yes;
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
    /// and a note in [`SourceInfo::notes`](super::SourceInfo::notes) says so.
    pub fn build(mut self) -> Result<Engine, BuildError> {
        let spec = self.spec.take().ok_or(BuildError::NoSource)?;
        if let Some(n) = self.packet_limit {
            self.ctl.set_packet_limit(n);
        }
        self.check_inline(&spec)?;
        let (pool_note, raised) = self.fit_pool_to_locality(&spec)?;
        self.fit_source_to_balance(&spec)?;
        let allowed = self.check_cpus()?;
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
            inline: self.inline,
            ctl: self.ctl,
        })
    }
}

impl EngineBuilder {
    /// Sizes the pool for the locality stage, when there is one: two batches
    /// unless the caller set the pool, and a check that a batch leaves the
    /// capture side a chunk to fill. Returns what the user should hear about
    /// the pool (said with the source's notes) and what the memory plan says
    /// of a raised pool.
    fn fit_pool_to_locality(&mut self, spec: &SourceSpec) -> Result<(Option<String>, String), BuildError> {
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
            if let (SourceSpec::File { queues, .. }, false) = (spec, self.trace_reading_set) {
                self.open.trace.blocks = self.open.trace.blocks.max(l.trace_blocks(self.open.trace.block_bytes, queues.len()));
            }
        }
        Ok((pool_note, raised))
    }

    /// Checks that rebalancing can move buckets on this source, and sets the
    /// afpacket fanout it moves them through.
    fn fit_source_to_balance(&mut self, spec: &SourceSpec) -> Result<(), BuildError> {
        if self.balance.controller().is_some() {
            match spec {
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
        Ok(())
    }

    /// Checks that an inline run (see [`inline`](Self::inline)) has what it
    /// needs: a trace, no locality stage, basic balancing.
    fn check_inline(&self, spec: &SourceSpec) -> Result<(), BuildError> {
        if !self.inline {
            return Ok(());
        }
        if let SourceSpec::Live { .. } = spec {
            let why = "handlers run inline, on the capture thread, for traces only: a live source needs worker threads \
                       (a quiet link would leave the handlers without their idle calls)";
            return Err(SettingError::new(Setting::Queues, why.to_string()).into());
        }
        if let Some(l) = &self.locality {
            let why = format!(
                "a locality batch of {} holds packets across chunks, which an inline handler is given one at a time",
                l.batch.get()
            );
            return Err(SettingError::new(Setting::Locality, why).into());
        }
        if self.balance != balance::BalanceMode::Basic {
            let why = "offloading and rebalancing move packets between workers, and inline handlers have none";
            return Err(SettingError::new(Setting::Balance, why.to_string()).into());
        }
        Ok(())
    }

    /// The CPUs this process may use, after checking the plan names only those.
    fn check_cpus(&self) -> Result<Vec<usize>, BuildError> {
        let allowed = sys::allowed_cpus();
        if let CpuPlan::List(list) = &self.cpus {
            if let Some(&cpu) = list.iter().find(|c| !allowed.contains(c)) {
                return Err(
                    SettingError::new(Setting::Cpus, format!("CPU {cpu} is not available to this process (allowed: {allowed:?})")).into()
                );
            }
        }
        Ok(allowed)
    }

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
