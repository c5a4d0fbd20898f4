//! Starting an engine: a pool and work-queue pair per queue, the source's
//! capture units on their threads, and the worker sides handed back for the
//! caller to give a home (a worker thread per queue, or one pulling reader).

use crate::balance;
use crate::capture::{Control, Progress};
use crate::filter::FilterSwitch;
use crate::locality::LocalityConfig;
use crate::pool::{self, OnPublish, PoolGauge, WorkerSide};
use crate::profile::{Profiler, Stage};
use crate::source::{self};
use crate::stats::QueueCounters;
use crate::QueueId;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::worker::{capture_loop, pin, ThreadEnd};
use super::{Engine, Placement, RunError, SourceInfo, StopReason};

impl Engine {
    /// What every way of running shares: the pools and work-queue pairs, and
    /// the capture threads, started. The worker sides are left to the caller;
    /// for one thread reading them all, every capture side also rings the
    /// first worker side's bell.
    /// With `inline`, each queue's worker side is handed to it instead, with
    /// the queue, and the hook it returns runs on the capture thread after
    /// each chunk (see [`EngineBuilder::inline`](super::EngineBuilder::inline)).
    pub(super) fn launch(
        self,
        takers: Takers,
        inline: Option<&mut dyn FnMut(QueueId, WorkerSide) -> Box<dyn OnPublish>>,
    ) -> Result<Launched, RunError> {
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
        let mut worker_sides: Vec<_> = self.info.queues.iter().copied().zip(works).collect();
        if let Some(make) = inline {
            for (cap, (q, work)) in caps.iter_mut().zip(worker_sides.drain(..)) {
                cap.deliver_on_publish(make(q, work));
            }
        }
        let mut capture_sides: Vec<_> = caps.into_iter().map(Some).collect();

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
pub(super) enum Takers {
    /// A worker thread per queue, calling the application's handler (or,
    /// inline, the capture thread itself).
    Workers,
    /// One [`Reader`](super::Reader) for every queue, on the caller's thread.
    OneReader,
    /// A [`Reader`](super::Reader) per queue, each on a thread of the caller's.
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
