//! Trace files: pcap and pcapng, read sequentially and split into queues.
//!
//! - [`crate::tracefile`] parses the records, accepting what libpcap accepts.
//! - `input`: the bytes of the trace, walked in place in a mapping of the file
//!   or read ahead into blocks on a thread of its own.
//! - `mapped`: mapping a regular file, and surviving its truncation.
//! - `prewalk`: a mapped file's records parsed ahead on a thread of their own.
//! - `sys`: the system calls of opening a FIFO without waiting for a writer.
//! - `trace`: the source and its capture unit.

mod input;
mod mapped;
mod prewalk;
mod sys;
mod trace;

pub use input::{ReadConfig, TraceAccess};
pub(crate) use trace::open;

use crate::capture::Control;
use crate::profile::{Profiler, Stage};
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long opening a trace may wait for its header: a pipe's writer may
/// stay silent, and the run's stop and time limit must end that wait too.
pub(crate) struct HeaderWait<'a> {
    /// The run's control: a stop asked for ends the wait.
    pub(crate) ctl: &'a Control,
    /// The run's time limit, counted from the start of the wait.
    pub(crate) limit: Option<Duration>,
    /// The run's profiler, for a read-ahead thread started to wait.
    pub(crate) profiler: Option<Arc<Profiler>>,
}

/// Start one of a trace's helper threads (read-ahead, populate, walk) named
/// `name`, on `cpus` (the opener's: the capture thread may be pinned to one
/// CPU it would then share), its CPU time handed to `profiler` as `stage`
/// when `body` returns; a thread that cannot start is not waited for.
fn spawn_helper(
    name: &str,
    cpus: Option<CpuSet>,
    profiler: Option<Arc<Profiler>>,
    label: &'static str,
    stage: Stage,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    if let Some(p) = &profiler {
        p.expect_thread();
    }
    let theirs = profiler.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Some(set) = cpus {
                // A refusal (a CPU taken offline since) leaves it where it was made.
                let _ = sched_setaffinity(Pid::from_raw(0), &set);
            }
            body();
            if let Some(p) = theirs {
                p.whole_thread(label, stage);
            }
        })
        .inspect_err(|_| {
            if let Some(p) = &profiler {
                p.thread_not_started();
            }
        })
}
