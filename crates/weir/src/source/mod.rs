//! Where packets come from.
//!
//! A source is named by a [`SourceSpec`] (`trace.pcap@0-3`), opened into a
//! [`Source`] that knows its link type and queues, and then turned into capture
//! units (see [`crate::engine::CaptureUnit`]) once the filter is compiled.
//!
//! - [`file`]: pcap and pcapng traces, split into queues by RSS, paced or at top speed.

pub mod file;
pub mod pacing;
mod spec;

pub use pacing::Pacing;
pub use spec::{QueueRange, SourceSpec, SpecError, MAX_QUEUES};

use crate::engine::{CaptureUnit, Progress, SourceError, SourceInfo};
use crate::filter::Filter;
use std::sync::Arc;

/// What a source does with the packets it captures.
pub struct CaptureOptions {
    /// Packets it rejects are counted as filtered and take no cell.
    pub filter: Option<Filter>,
    pub pacing: Pacing,
}

/// An opened source, before capture starts.
pub trait Source: Send {
    fn info(&self) -> &SourceInfo;

    /// Progress through a finite input, if it has one.
    fn progress(&self) -> Option<Arc<Progress>>;

    /// Become the capture units that will run on their own threads.
    fn into_units(self: Box<Self>, opts: CaptureOptions) -> Result<Vec<Box<dyn CaptureUnit>>, SourceError>;
}

/// Tuning that applies when a source is opened.
#[derive(Copy, Clone, Debug, Default)]
pub struct OpenOptions {
    pub trace: file::ReadConfig,
}

/// Open the source a spec names.
pub fn open(spec: &SourceSpec, opts: &OpenOptions) -> Result<Box<dyn Source>, SourceError> {
    match spec {
        SourceSpec::File { path, queues } => file::open(path.as_ref(), *queues, spec.to_string(), opts.trace),
    }
}
