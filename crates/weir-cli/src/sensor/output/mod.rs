//! The sensor's packet outputs, composed: each is an [`Output`] in its own
//! file, and [`TYPES`] lists them. The run (`super::run`) knows none by
//! name: it opens what the config has, gives each queue's tee one branch
//! of each, polls them, and finishes them. Adding an output type is its
//! config table, its file here and one line in [`TYPES`].
//!
//! The outputs' life, in the run's order:
//! 1. [`Type::open`], as root, before the capture starts: check settings and
//!    make what needs no file (sockets, writers not yet opened, rules).
//! 2. [`Output::branch`], once per queue: the handler the queue's tee runs.
//! 3. [`Output::start`], once root is dropped: open the files, start the
//!    threads. No branch sees a packet before every output has started
//!    ([`Gate`]), so nothing is written as root or before its file is open.
//! 4. [`Output::tick`], every quarter second: flush, age, say failures;
//!    [`Output::reload`] on SIGUSR2.
//! 5. [`Output::finish`], with the branches back from the workers: the
//!    output's accounting, said; false when it lost anything.

mod flows;
mod record;
mod streams;

use super::config::Config;
use crate::events::Events;
use std::any::Any;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use weir::engine::{SourceInfo, StopHandle};
use weir::output::tee::Branch;
use weir::stream::KernelCutoff;
use weir::{FlowBucket, Handler, Handover, Packet, QueueId};
use weir_metrics::Families;

/// An output type: its name and how to find it in a config and open it.
pub struct Type {
    /// Its table in the config, its name in logs, counters and metrics.
    pub name: &'static str,
    /// Whether `cfg` has it.
    pub present: fn(&Config) -> bool,
    /// Its own libpcap filter in `cfg` (read again by a reload).
    pub filter: fn(&Config) -> Option<String>,
    /// Opens it for a run (see the module's first step).
    pub open: fn(&Config, &Env<'_>) -> anyhow::Result<Box<dyn Output>>,
}

/// Every output type, in the order of the tee's branches.
pub const TYPES: [Type; 3] = [record::TYPE, flows::TYPE, streams::TYPE];

/// The types `cfg` has.
pub fn present(cfg: &Config) -> Vec<&'static Type> {
    TYPES.iter().filter(|t| (t.present)(cfg)).collect()
}

/// What opening an output may need from the run.
pub struct Env<'a> {
    pub info: &'a SourceInfo,
    /// Where events go (`[events]`'s file and `[kafka]`), if anywhere.
    pub events: Option<&'a Events>,
    /// Whether an event type goes anywhere.
    pub wants: &'a dyn Fn(&str) -> bool,
    /// The reassembling layer's settings the check made, for `[streams]`
    /// and `[inspect]`.
    pub stream_cfg: Option<&'a weir::stream::StreamConfig>,
    /// The rules' matcher the check built, for `[inspect]`.
    pub matcher: Option<&'a std::sync::Arc<crate::inspect::Matcher>>,
}

/// What puts a compiled reload in force.
pub type Commit = Box<dyn FnOnce()>;

/// The queue a branch is made for.
pub struct Queue<'a> {
    pub id: QueueId,
    /// How many queues the capture has.
    pub of: usize,
    pub info: &'a SourceInfo,
    /// The kernel cutoff's handle on this queue, for the one stream layer
    /// that cuts (the check lets one output have a stream layer when the
    /// cutoff is on): that output takes it.
    pub kernel: Option<KernelCutoff>,
}

/// What ending the run gives each output.
pub struct End<'a> {
    pub cfg: &'a Config,
    pub elapsed: std::time::Duration,
    /// Packets its branches passed and filtered out, over every queue.
    pub passed: u64,
    pub filtered: u64,
    pub events: Option<&'a Events>,
    pub say: &'a dyn Fn(String),
}

/// One running output (see the module's doc for the order of the calls).
pub trait Output: Send {
    /// Its branch on `queue`.
    fn branch(&self, queue: &mut Queue<'_>) -> anyhow::Result<Box<dyn Branch>>;

    /// Opens its files and starts its threads, as the user the sensor now is.
    fn start(&mut self, _stop: &StopHandle, _env: &Env<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    /// Compiles what a reload changes in it (`new` is the config file as
    /// it is now), and returns how to put that in force: called for every
    /// output before any commits, so a reload is taken whole or not at all.
    fn reload(&self, _new: &Config) -> anyhow::Result<Commit> {
        Ok(Box::new(|| ()))
    }

    /// SIGHUP: close its open files and start the next ones, as logrotate
    /// expects; what it did, for the log (`None`: it writes no such file).
    fn next_file(&mut self) -> Option<String> {
        None
    }

    /// A quarter second passed: flush and age what it writes, say a failure once.
    fn tick(&mut self, _say: &dyn Fn(String)) {}

    /// What it adds to its `{"packets", "filtered"}` in the counters (stats
    /// events, SIGUSR1).
    fn counters(&self, _o: &mut serde_json::Map<String, serde_json::Value>) {}

    /// Its own metric families, for a scrape.
    fn collect(&self, _sensor: &str, _out: &mut Families) {}

    /// Takes its branches back (one per queue, as [`Output::branch`] made
    /// them), finishes, says its accounting; false when anything was lost.
    fn finish(self: Box<Self>, branches: Vec<Box<dyn Any + Send>>, end: &End<'_>) -> anyhow::Result<bool>;
}

/// Holds every queue's packets until the outputs have started: a worker
/// waits at its first call, which comes as soon as packets do.
#[derive(Default)]
pub struct Gate {
    state: Mutex<Opening>,
    changed: Condvar,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Opening {
    #[default]
    Waiting,
    Open,
    /// An output could not start: the run is ending with that error, and
    /// the branches are given nothing more.
    Failed,
}

impl Gate {
    pub fn open(&self) {
        self.set(Opening::Open);
    }

    pub fn fail(&self) {
        self.set(Opening::Failed);
    }

    fn set(&self, to: Opening) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = to;
        self.changed.notify_all();
    }

    fn wait(&self) -> Opening {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while *state == Opening::Waiting {
            state = self.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        *state
    }
}

/// A queue's handler behind the [`Gate`].
pub struct Gated<H> {
    inner: H,
    gate: Option<Arc<Gate>>,
    failed: bool,
}

impl<H> Gated<H> {
    pub fn new(inner: H, gate: Arc<Gate>) -> Gated<H> {
        Gated { inner, gate: Some(gate), failed: false }
    }

    pub fn into_inner(self) -> H {
        self.inner
    }

    /// Whether the outputs take packets (waiting for them to start).
    fn pass(&mut self) -> bool {
        if let Some(g) = self.gate.take() {
            self.failed = g.wait() == Opening::Failed;
        }
        !self.failed
    }
}

impl<H: Handler> Handler for Gated<H> {
    fn packet(&mut self, p: &Packet<'_>) {
        if self.pass() {
            self.inner.packet(p);
        }
    }

    fn packets(&mut self, run: &[Packet<'_>]) {
        if self.pass() {
            self.inner.packets(run);
        }
    }

    fn idle(&mut self) {
        if self.pass() {
            self.inner.idle();
        }
    }

    /// After a failed start the outputs are not finished: they never
    /// opened, and the run ends with the start's error.
    fn finish(&mut self) {
        if self.pass() {
            self.inner.finish();
        }
    }

    fn export(&mut self, bucket: &FlowBucket) -> Option<Handover> {
        self.inner.export(bucket)
    }

    fn import(&mut self, state: Handover) {
        if self.pass() {
            self.inner.import(state);
        }
    }
}
