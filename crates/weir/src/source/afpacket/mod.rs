//! Being written: see the afpacket helper's brief.

use crate::engine::SourceError;
use crate::source::{LiveOptions, QueueRange, Source};

/// Open `iface` (queues `queues`, or every RX queue) for capture.
pub fn open(iface: &str, queues: Option<QueueRange>, opts: &LiveOptions, name: String) -> Result<Box<dyn Source>, SourceError> {
    let _ = (iface, queues, opts, name);
    Err(SourceError::Invalid("afpacket capture is being built".into()))
}
