//! What the engine's threads run: a capture thread's loop over its unit, and
//! a worker's loop that hands each run of packets to the application's
//! handler (through the locality stage when there is one) and recycles the
//! chunks; or, inline, the same delivery run by the capture thread after
//! each chunk it publishes.

use crate::balance;
use crate::capture::{CaptureUnit, Control};
use crate::locality::LocalityConfig;
use crate::packet::Runs;
use crate::pool::{self, HeldChunk, Next, OnPublish, WorkerSide};
use crate::profile::{Probe, Profiler, Stage};
use crate::{Handler, LinkType};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{RunError, StopReason};
use crate::sys::cpu as sys;

/// How long a worker sleeps on an empty capture queue before looking again.
const WORKER_IDLE: Duration = Duration::from_millis(100);

/// Pin the calling thread if a CPU was chosen. A refusal (a CPU taken offline since
/// the plan was made) leaves the thread where the scheduler put it.
pub(super) fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        let _ = sys::pin_current_thread(c);
    }
}

/// Tells the engine a thread ended, however it ends.
pub(super) struct ThreadEnd<'a>(pub(super) &'a Control);

impl Drop for ThreadEnd<'_> {
    fn drop(&mut self) {
        self.0.thread_ended();
    }
}

pub(super) fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

pub(super) fn capture_loop(unit: Box<dyn CaptureUnit>, sides: Vec<pool::CaptureSide>, ctl: &Control) -> Result<(), RunError> {
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

pub(super) fn worker_loop<H: Handler>(
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
                deliver_chunk(chunk, handler, probe);
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

/// Hands a chunk's packets to the handler in runs, then recycles it.
fn deliver_chunk<H: Handler, P: Probe>(chunk: HeldChunk<'_>, handler: &mut H, probe: &mut P) {
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

/// A queue's worker run on its capture thread (an engine built with
/// [`inline`](super::EngineBuilder::inline)): each chunk the capture side
/// publishes is handed to the handler there and then, so capture and
/// delivery take turns on one thread. `None` once the run has taken it back.
pub(super) type Inline<H> = Arc<Mutex<Option<InlineWorker<H>>>>;

pub(super) struct InlineWorker<H> {
    pub(super) side: WorkerSide,
    pub(super) handler: H,
    /// The handler's panic, once it panicked: it is not called again, and the
    /// run is stopped.
    pub(super) panicked: Option<String>,
    pub(super) ctl: Arc<Control>,
}

/// The capture side's hook that runs an [`InlineWorker`].
pub(super) struct InlineHook<H>(pub(super) Inline<H>);

impl<H: Handler> OnPublish for InlineHook<H> {
    fn published(&mut self) {
        // Taken by the capture thread alone until the run ends: uncontended,
        // once a chunk. A panic is caught inside, so the lock is never poisoned
        // by the handler; a poisoned one is still taken.
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(w) = guard.as_mut().filter(|w| w.panicked.is_none()) else { return };
        let InlineWorker { side, handler, .. } = w;
        let delivered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while let Some(chunk) = side.try_next() {
                deliver_chunk(chunk, handler, &mut ());
            }
        }));
        if let Err(p) = delivered {
            w.panicked = Some(panic_message(p));
            // Its chunks are no longer taken: the capture must not wait for them.
            w.ctl.request_stop(StopReason::Failed);
        }
    }
}
