//! Where packets come from.
//!
//! A source is named by a [`SourceSpec`] (`trace.pcap@0-3`), opened by the
//! engine into a `Source` that knows its link type and queues, and then turned
//! into capture units (the `capture` module's contract) once the filter is
//! compiled. What an application sets here is the name and the options
//! ([`LiveOptions`], [`Pacing`], [`file::ReadConfig`]); opening is the engine's.
//!
//! - [`file`](mod@file): pcap and pcapng traces, split into queues by RSS, paced or at top speed.
//! - [`afpacket`]: TPACKET_V3 rings, one socket per queue in a fanout group.
//! - `afxdp`: one AF_XDP socket per RX queue over a UMEM that is the pool.
//! - `xring`: `xdp:` sources, packets copied by an XDP program into one BPF ring buffer.

pub mod afpacket;
pub(crate) mod afxdp;
pub mod file;
pub(crate) mod live;
pub mod pacing;
mod spec;
pub(crate) mod xring;

pub(crate) use live::{ifindex, rx_queues};
pub use live::{AfPacketOptions, AfXdpOptions, Fanout, LiveOptions, XdpOptions, XdpSpread, ZeroCopy};

pub use pacing::Pacing;
pub use spec::{LiveKind, QueueRange, SourceSpec, SpecError};

use crate::capture::{CaptureUnit, Progress, SourceError, SourceInfo};
use crate::filter::FilterSwitch;
use std::sync::Arc;

/// What a source does with the packets it captures.
pub(crate) struct CaptureOptions {
    /// Packets it rejects are counted as filtered and take no cell (live sources
    /// may run it in the kernel instead, where rejected packets are not seen).
    /// It may be replaced while capture runs: kernel filters through
    /// [`FilterSwitch`]'s appliers, user-space ones through a watch per unit.
    pub(crate) filter: FilterSwitch,
    pub(crate) pacing: Pacing,
    /// The shape of each queue's pool: an AF_XDP UMEM has one frame per cell.
    pub(crate) pool: crate::pool::PoolConfig,
    /// Offloading (done by the engine's pools) and rebalancing (done by the
    /// sources: trace files in their thread, afpacket through its kernel bucket
    /// table, afxdp in its capture threads).
    pub(crate) balance: crate::balance::BalanceMode,
    /// Where a rebalancing source reports what it moved.
    pub(crate) balance_counters: Arc<crate::balance::BalanceCounters>,
    /// The workers' mailboxes, by queue position, when a rebalancing source
    /// hands its handlers' flow state over with each bucket it moves (a trace,
    /// or afpacket; see [`Source::handover_refusal`]).
    pub(crate) handovers: Option<Arc<crate::balance::Handovers>>,
    /// Stage timing, when the run is profiled ([`crate::profile`]).
    pub(crate) profiler: Option<Arc<crate::profile::Profiler>>,
}

/// An opened source, before capture starts.
pub(crate) trait Source: Send {
    fn info(&self) -> &SourceInfo;

    /// Progress through a finite input, if it has one.
    fn progress(&self) -> Option<Arc<Progress>>;

    /// Why rebalancing this source cannot hand the workers' flow state over
    /// with a moving bucket, if it cannot: the stream layer then refuses to
    /// rebalance it (its streams would be split).
    fn handover_refusal(&self) -> Option<&'static str> {
        None
    }

    /// The kernel cutoff's flow map, if this source has one (a live source
    /// opened with [`LiveOptions::kernel_flows`] above 0).
    fn kernel_flows(&self) -> Option<&live::cutoff::FlowMap> {
        None
    }

    /// Put `filter` where the source runs it besides user space, before
    /// capture starts (AF_XDP: in its XDP program, so the host keeps what it
    /// rejects); a note for the user on what that means for the host, if any.
    /// Replacements later come through [`CaptureOptions::filter`].
    fn place_filter(&mut self, _filter: Option<&crate::filter::Filter>) -> Result<Option<String>, SourceError> {
        Ok(None)
    }

    /// Become the capture units that will run on their own threads.
    fn into_units(self: Box<Self>, opts: CaptureOptions) -> Result<Vec<Box<dyn CaptureUnit>>, SourceError>;
}

/// Tuning that applies when a source is opened.
#[derive(Clone, Debug, Default)]
pub(crate) struct OpenOptions {
    pub(crate) trace: file::ReadConfig,
    pub(crate) live: LiveOptions,
    /// The engine's memory per queue: a source adds its own and checks the
    /// whole against what is available before it allocates anything.
    pub(crate) budget: crate::memory::Budget,
}

/// Open the source a spec names; a trace's header is waited for as `wait` says.
pub(crate) fn open(spec: &SourceSpec, opts: &OpenOptions, wait: &file::HeaderWait<'_>) -> Result<Box<dyn Source>, SourceError> {
    match spec {
        SourceSpec::File { path, queues } => file::open(path.as_ref(), *queues, spec.to_string(), opts.trace, &opts.budget, wait),
        SourceSpec::Live { kind: LiveKind::AfPacket, iface, queues } => {
            afpacket::open(iface, *queues, &opts.live, spec.to_string(), &opts.budget)
        }
        SourceSpec::Live { kind: LiveKind::AfXdp, iface, queues } => {
            afxdp::open(iface, *queues, &opts.live, spec.to_string(), &opts.budget)
        }
        SourceSpec::Live { kind: LiveKind::Xdp, iface, queues } => xring::open(iface, *queues, &opts.live, spec.to_string(), &opts.budget),
    }
}
