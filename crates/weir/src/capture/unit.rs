//! The contract between the engine and a source: capture units.
//!
//! A source is opened in two steps. [`SourceInfo`] comes first (link type,
//! snaplen, queues), because the filter must be compiled for the link type
//! before capture starts. Then the source turns into one or more capture units.
//! Each unit runs on its own thread and fills the pools of the queues it serves
//! through their [`CaptureSide`]s: a live NIC queue is one unit per queue; a
//! trace file is one unit for all its queues, because a trace is one sequential
//! stream that has to be read once and split by RSS (reading it once per queue
//! would multiply the work by the number of queues).
//!
//! A unit must: count every packet of its queues in exactly one of
//! `push_copy` (captured), `drop_filtered` or `drop_capture`; never block
//! without a timeout so it sees a stop request within ~50 ms; return on a stop
//! request or the end of its input; and on failure return the error after
//! everything read before it was captured. Dropping the sides flushes them and
//! closes the capture queues, which is how the workers learn the unit is done.

use super::Control;
use crate::pool::CaptureSide;
use crate::{LinkType, QueueId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the engine needs to know about a source before it starts.
#[derive(Clone, Debug)]
pub struct SourceInfo {
    /// Human-readable name, e.g. `file:trace.pcap@0-3`.
    pub name: String,
    /// The link-layer header every packet starts with.
    pub link_type: LinkType,
    /// Most bytes kept of a packet: the trace header's, or the live options'.
    pub snaplen: u32,
    /// The queues opened, in order.
    pub queues: Vec<QueueId>,
    /// The network interface, for live sources.
    pub iface: Option<String>,
    /// The file's header, for trace sources (its format and precision matter to
    /// callers that must hand timestamps over as libpcap does).
    pub trace: Option<crate::tracefile::TraceHeader>,
    /// What the user should know about how it was opened (a stale XDP program
    /// replaced, say); the library never prints, the caller shows these.
    pub notes: Vec<String>,
    /// The interface every packet arrives on, where no kernel socket filter
    /// runs the filter (afxdp, xdp): the engine [binds](crate::filter::Filter::bind)
    /// filters to it, so `inbound` and `ifindex` work there. `None` for
    /// traces, which do not say, and afpacket, whose socket filter knows.
    pub link: Option<crate::filter::LinkMeta>,
}

/// A capture thread's work.
pub(crate) trait CaptureUnit: Send + 'static {
    /// The queues this unit fills; `run` receives their sides in this order.
    fn queues(&self) -> Vec<QueueId>;

    /// A short name for the thread and for error messages.
    fn name(&self) -> String;

    /// Whether the unit times its own stages for a profiled run (see
    /// [`crate::profile`]); the engine profiles the thread of any other whole.
    fn profiled(&self) -> bool {
        false
    }

    /// Capture until the input ends or a stop is requested.
    fn run(self: Box<Self>, sides: Vec<CaptureSide>, ctl: &Control) -> Result<(), SourceError>;
}

/// A source failed while capturing, or could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// Bad input: a malformed or truncated trace (`file` names it), with
    /// where it went wrong.
    #[error("{file}: {error}")]
    Malformed {
        /// The trace, as its source names it.
        file: String,
        /// What is wrong, and where.
        error: crate::tracefile::FormatError,
    },
    /// The OS error is shown in the message, not chained as a source, so
    /// printing the chain does not repeat it.
    #[error("{what}: {error}")]
    Io {
        /// What was being done, and the privilege it needs when refused.
        what: String,
        /// The OS error; its kind decides [`SourceError::kind`].
        error: std::io::Error,
    },
    /// Something the source cannot work with (a bad option, an unsupported
    /// device), said in full.
    #[error("{0}")]
    Invalid(String),
    /// The configuration would need more memory than may be used (see [`crate::memory`]).
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryError),
    /// A setting the source cannot take (pacing a live interface, say).
    #[error(transparent)]
    Setting(#[from] crate::SettingError),
    /// The network interface is not in this network namespace.
    #[error("no network interface {iface:?} here")]
    NoSuchDevice {
        /// The interface name as given.
        iface: String,
    },
}

/// What kind of failure a [`SourceError`] is, for callers that act on it
/// rather than print it (libpcap's library answers `PCAP_ERROR_PERM_DENIED`
/// or `PCAP_ERROR_NO_SUCH_DEVICE`; a supervisor may retry what is busy).
#[non_exhaustive]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SourceErrorKind {
    /// The system refused a privilege (a capability, a file's permissions).
    Permission,
    /// No such interface.
    NoSuchDevice,
    /// Something else holds what the source needs (an XDP program, a queue).
    Busy,
    /// The caller's input: a malformed trace, a bad name, a refused setting.
    BadInput,
    /// More memory than may be used.
    Memory,
    /// Any other failure of the system.
    Other,
}

impl SourceError {
    /// True when the error is in what the user gave us (exit code 2 in the CLI).
    pub(crate) fn is_bad_input(&self) -> bool {
        matches!(self.kind(), SourceErrorKind::BadInput | SourceErrorKind::NoSuchDevice | SourceErrorKind::Memory)
    }

    /// What kind of failure this is; an I/O error is classified by its OS error.
    pub fn kind(&self) -> SourceErrorKind {
        match self {
            SourceError::Malformed { .. } | SourceError::Invalid(_) | SourceError::Setting(_) => SourceErrorKind::BadInput,
            SourceError::Memory(_) => SourceErrorKind::Memory,
            SourceError::NoSuchDevice { .. } => SourceErrorKind::NoSuchDevice,
            SourceError::Io { error, .. } => match error.kind() {
                std::io::ErrorKind::PermissionDenied => SourceErrorKind::Permission,
                std::io::ErrorKind::ResourceBusy => SourceErrorKind::Busy,
                _ if error.raw_os_error() == Some(libc::ENODEV) => SourceErrorKind::NoSuchDevice,
                _ => SourceErrorKind::Other,
            },
        }
    }
}

/// Progress through a finite input (bytes of a trace file), readable from any thread.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    done: AtomicU64,
    total: AtomicU64,
    unreached: AtomicU64,
}

impl Progress {
    pub(crate) fn new(total: Option<u64>) -> Arc<Progress> {
        Arc::new(Progress { total: AtomicU64::new(total.unwrap_or(0)), ..Progress::default() })
    }

    pub(crate) fn set_done(&self, n: u64) {
        // Relaxed: a display value.
        self.done.store(n, Ordering::Relaxed);
    }

    /// (done, total); total is 0 when unknown (a pipe).
    pub(crate) fn get(&self) -> (u64, u64) {
        // Relaxed: display values.
        (self.done.load(Ordering::Relaxed), self.total.load(Ordering::Relaxed))
    }

    /// Bytes of a stream (a pipe, a socket) that were read but not reached when
    /// the run stopped: lost with it, since a stream cannot be read again.
    pub(crate) fn set_unreached(&self, n: u64) {
        // Relaxed: written by the capture thread before it ends, read after the join.
        self.unreached.store(n, Ordering::Relaxed);
    }

    pub(crate) fn unreached(&self) -> u64 {
        // Relaxed: as above.
        self.unreached.load(Ordering::Relaxed)
    }
}
