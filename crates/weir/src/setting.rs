//! The settings of an engine and its sources, as errors name them.
//!
//! The library has no command line and no environment: an error about a value
//! the caller chose names the [`Setting`] in the library's own words ("pool",
//! "CPU list") and keeps the problem apart from that name ([`SettingError`]),
//! so that each front end can say it the way its users set it: `weir` as a
//! flag (`--pool`), the libpcap library as its variable (`WEIR_POOL`), a Rust
//! program as the builder method it called. The library's own `Display` reads
//! `pool: <problem>`.

use std::fmt;

/// A setting an error can be about.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Setting {
    /// The pool of each queue: cells per chunk (M) and chunks (R).
    Pool,
    /// The CPUs the capture threads and workers run on.
    Cpus,
    /// The pacing of a trace file: packets/s, Mbit/s or a multiple of its timing.
    Pacing,
    /// How an AF_PACKET fanout group spreads packets over its sockets.
    Fanout,
    /// How an `xdp:` source's capture thread spreads packets over its queues.
    XdpSpread,
    /// Locality buffering: the batch and its timeout.
    Locality,
    /// Offloading between the queues of a buddy group, and rebalancing.
    Balance,
    /// Reading a trace file ahead: its blocks and their size.
    TraceReading,
    /// The queues a trace is split into, or an interface's queues.
    Queues,
    /// A flow table's size and idle timeout.
    FlowTable,
    /// The simulator's model and workload.
    Simulation,
    /// The stream layer: its modes, cutoffs and classes, pieces, timeouts,
    /// table and memory.
    Streams,
}

impl Setting {
    /// Its name in the library's words.
    pub fn name(self) -> &'static str {
        match self {
            Setting::Pool => "pool",
            Setting::Cpus => "CPU list",
            Setting::Pacing => "pacing",
            Setting::Fanout => "fanout",
            Setting::XdpSpread => "xdp spread",
            Setting::Locality => "locality buffering",
            Setting::Balance => "balancing",
            Setting::TraceReading => "trace reading",
            Setting::Queues => "queues",
            Setting::FlowTable => "flow table",
            Setting::Simulation => "simulation",
            Setting::Streams => "stream layer",
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A value given for a setting was refused, or settings contradict each other.
/// The problem is worded without the setting's name, for the front end to put
/// its own name in front.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct SettingError {
    /// What the error is about.
    pub setting: Setting,
    /// What is wrong, without the setting's name ("must be from 1 to 4194304").
    pub problem: String,
}

impl SettingError {
    pub(crate) fn new(setting: Setting, problem: impl Into<String>) -> SettingError {
        SettingError { setting, problem: problem.into() }
    }
}
