//! Rebalancing where every queue has its own capture thread: the controller on
//! a thread of its own, the moves it decides, and what the queues publish for
//! it. Shared by the live backends; each brings its bucket table (a
//! [`BucketTable`]) and its own queue-side part of a move.
//!
//! A move of bucket b from queue q to queue q' goes through four stages, each
//! ended by one thread:
//!
//! 1. **Parking.** The controller publishes the move; q' parks packets of b from
//!    then on. The table is changed to q' ([`BucketTable::switch`]) by the
//!    controller or by the thread that steers b, which ends the stage once no
//!    packet steered by the old entry can still be on its way to q.
//! 2. **Fencing** (q). q takes in every packet of b steered to it before the
//!    change, fences its pool ([`CaptureSide::fence`](crate::pool::CaptureSide::fence)),
//!    and waits until every fenced chunk is recycled: its worker has then
//!    finished every packet of b. Where the workers' handlers hand flow state
//!    over (a push engine, and a table whose entries are flow buckets:
//!    [`BucketTable::flow_bucket`]), q then asks its worker to export b's state
//!    for q' ([`Rebalance::exported`]), and ends the stage only once the worker
//!    has posted it to q''s mailbox.
//! 3. **Fenced** (q'). q' pushes b's parked packets into its pool in arrival
//!    order, ahead of anything of b that comes later, and ends the stage once
//!    they are all in.
//! 4. **Done.** The controller retires the move; the bucket may move again.
//!
//! So the new worker takes b's state in before b's first packet reaches it:
//! q''s worker serves its mailbox after it takes a chunk and before it hands
//! out any of its packets (`handover.rs`), and the chain that leads from the
//! post to the first chunk holding a packet of b is release/acquire at every
//! link: the worker posts (the mailbox's lock and its Release flag), then
//! marks the ticket done (Release); q sees it done (Acquire) and ends stage 2
//! (Release); q' sees stage 3 (Acquire), pushes the parked packets and
//! publishes their chunk (the capture queue's Release); q''s worker takes the
//! chunk (Acquire) and then finds the flag set. No packet of b reaches q''s
//! worker any other way: parking holds every one from the first (stage 1).
//!
//! A capture that stops mid-move: q' cancels the export of every move it
//! still parks for ([`Transit::abandon`]) before it closes its capture queue,
//! and counts the parked packets as capture drops. A cancel that comes first
//! keeps the state on q's worker, which closes it; an export already served
//! was posted before the cancel returned, so q''s worker takes it in before it
//! finishes. Either way each flow's state ends in exactly one place.
//!
//! The controller's inputs each tick ([`TICK`]): packets per bucket from the
//! table's hit counts, and per queue what its worker finished, what waits and
//! what it dropped, published by the queue's capture thread ([`Rebalance::publish`]).

use super::handover::{Handovers, Ticket};
use super::{BalanceCounters, Controller, ControllerConfig, Move, QueueSample, SteeringStats};
use crate::capture::{CaptureUnit, Control, SourceError};
use crate::pool::CaptureSide;
use crate::rss::IndirectionTable;
use crate::{FlowBucket, QueueId};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The controller's tick: the queues' capture threads look for moves at least
/// this often, too.
pub(crate) const TICK: Duration = Duration::from_millis(10);

/// Stages of a move (see the module doc).
pub(crate) const PARKING: u8 = 0;
pub(crate) const FENCING: u8 = 1;
pub(crate) const FENCED: u8 = 2;
pub(crate) const DONE: u8 = 3;

/// One move in progress.
pub(crate) struct Transit {
    /// `from` and `to` are queue positions in the capture, `bucket` an entry of
    /// the table.
    pub(crate) mv: Move,
    stage: AtomicU8,
    /// Where q's fence starts, for tables whose steering thread ends the parking
    /// stage (set before that stage ends, read after).
    cut: AtomicU64,
    /// The old worker's export of the bucket's flow state, when the workers'
    /// handlers hand it over: made with the move, asked for by q, cancelled
    /// by q' if it gives the move up.
    export: Option<Arc<Ticket>>,
}

impl Transit {
    /// Acquire: a stage is advanced (with release) after the work that ends the
    /// previous one, and the next thread builds on that work.
    pub(crate) fn stage(&self) -> u8 {
        self.stage.load(Ordering::Acquire)
    }

    pub(crate) fn advance(&self, to: u8) {
        debug_assert_eq!(self.stage.load(Ordering::Relaxed) + 1, to, "stages advance one at a time");
        self.stage.store(to, Ordering::Release);
    }

    /// Record where the old queue's fence starts. Relaxed: [`advance`](Self::advance)
    /// to [`FENCING`] publishes it.
    pub(crate) fn set_cut(&self, cut: u64) {
        self.cut.store(cut, Ordering::Relaxed);
    }

    /// Relaxed: read after [`stage`](Self::stage) showed [`FENCING`] or later.
    pub(crate) fn cut(&self) -> u64 {
        self.cut.load(Ordering::Relaxed)
    }

    /// The new queue gives the move up (its capture is ending): the old
    /// worker's export, if not begun, will not be; if begun, it is waited for,
    /// so its post precedes the close of the new queue's capture queue.
    pub(crate) fn abandon(&self) {
        if let Some(t) = &self.export {
            t.cancel();
        }
    }
}

/// A move into a queue: its bucket's packets parked meanwhile, oldest first.
pub(crate) struct Incoming<P> {
    pub(crate) transit: Arc<Transit>,
    pub(crate) parked: VecDeque<P>,
}

/// Stage 3 for every move into a queue whose old queue is done with it: push
/// its parked packets in order (`push` is false when one finds no cell), then
/// stop parking its bucket and end the stage. A move whose packets do not all
/// find a cell keeps parking, so nothing of its bucket overtakes them, and goes
/// on at the next call. Returns the packets pushed.
pub(crate) fn hand_over<P>(incoming: &mut Vec<Incoming<P>>, parking: &mut [bool], mut push: impl FnMut(&P) -> bool) -> usize {
    let mut pushed = 0;
    let mut k = 0;
    while k < incoming.len() {
        let inc = &mut incoming[k];
        if inc.transit.stage() != FENCED {
            k += 1;
            continue;
        }
        while let Some(p) = inc.parked.front() {
            if !push(p) {
                break;
            }
            inc.parked.pop_front();
            pushed += 1;
        }
        if !inc.parked.is_empty() {
            k += 1;
            continue;
        }
        let inc = incoming.swap_remove(k);
        parking[inc.transit.mv.bucket] = false;
        inc.transit.advance(DONE);
    }
    pushed
}

/// Where the buckets are steered: the kernel's table or the capture threads'.
pub(crate) trait BucketTable: Send + Sync + 'static {
    /// Packets each bucket got so far, counted from the start of the capture.
    fn hits(&self) -> Result<Vec<u64>, SourceError>;

    /// The table as the capture starts, over `queues` queues.
    fn initial(&self, queues: u16) -> IndirectionTable;

    /// Make the moves' new entries take effect. Called once the moves are
    /// published; ends their parking stage unless the steering threads do.
    fn switch(&self, moves: &[Arc<Transit>]) -> Result<(), SourceError>;

    /// The flows of table entry `entry`, as a handler sees them, if an entry
    /// is a set of flows it can tell from their packets. `None`: the workers'
    /// handlers get no flow state handed over when the entry moves.
    fn flow_bucket(&self, entry: usize) -> Option<FlowBucket>;
}

/// One queue's figures for the controller, written by its capture thread.
/// Relaxed: each is a count read on its own; a tick that reads one a little
/// stale only sees the next tick's value early or late.
#[derive(Default)]
struct Published {
    served: AtomicU64,
    backlog: AtomicU64,
    dropped: AtomicU64,
}

/// What the controller and the queues' capture threads share.
pub(crate) struct Rebalance<T> {
    table: T,
    queues: usize,
    cfg: ControllerConfig,
    moves: Mutex<Vec<Arc<Transit>>>,
    /// Moves in `moves`, so a capture thread looks at the list only when there are any.
    active: AtomicUsize,
    published: Vec<Published>,
    /// Queue units alive: the controller ends with the last of them.
    units: AtomicUsize,
    counters: Arc<BalanceCounters>,
    /// The workers' mailboxes, when their handlers hand flow state over.
    handovers: Option<Arc<Handovers>>,
}

impl<T: BucketTable> Rebalance<T> {
    /// `handovers`: the workers' mailboxes, by queue position, when the
    /// workers' handlers hand each moving bucket's flow state over.
    pub(crate) fn new(
        table: T,
        queues: usize,
        cfg: ControllerConfig,
        counters: Arc<BalanceCounters>,
        handovers: Option<Arc<Handovers>>,
    ) -> Arc<Self> {
        let published = (0..queues).map(|_| Published::default()).collect();
        Arc::new(Rebalance {
            table,
            queues,
            cfg,
            moves: Mutex::new(Vec::new()),
            active: AtomicUsize::new(0),
            published,
            units: AtomicUsize::new(0),
            counters,
            handovers,
        })
    }

    pub(crate) fn table(&self) -> &T {
        &self.table
    }

    /// A queue unit starts taking part; the controller runs while any does.
    pub(crate) fn join(&self) {
        self.units.fetch_add(1, Ordering::AcqRel);
    }

    /// A queue unit is done (call once per [`join`](Self::join)).
    pub(crate) fn leave(&self) {
        self.units.fetch_sub(1, Ordering::AcqRel);
    }

    /// True if some move is in progress; then [`moves`](Self::moves) is worth a look.
    #[inline]
    pub(crate) fn any_moves(&self) -> bool {
        // Acquire: pairs with the Release increment in `start`, so a thread that
        // sees the count sees the moves pushed before it.
        self.active.load(Ordering::Acquire) > 0
    }

    pub(crate) fn moves(&self) -> MutexGuard<'_, Vec<Arc<Transit>>> {
        // A panic elsewhere cannot leave the list half-changed: every change is one push or retain.
        self.moves.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queue `q`'s figures as of now: `waiting` is every packet it holds that its
    /// worker has not finished, wherever it waits.
    pub(crate) fn publish(&self, q: usize, side: &CaptureSide, waiting: u64) {
        let p = &self.published[q];
        p.served.store(side.served_packets(), Ordering::Relaxed);
        p.dropped.store(side.dropped_packets(), Ordering::Relaxed);
        p.backlog.store(waiting, Ordering::Relaxed);
    }

    /// Add a queue's share of what rebalancing did.
    pub(crate) fn count(&self, s: &SteeringStats) {
        if *s != SteeringStats::default() {
            self.counters.add(s);
        }
    }

    /// The end of stage 2, for a move out of the calling queue whose fence is
    /// passed: asks the old worker for the bucket's flow state (the first
    /// call; `asked` remembers it) and says whether the stage may end, which
    /// is once the worker has posted the state to the new queue's mailbox (at
    /// once when nothing is handed over).
    pub(crate) fn exported(&self, t: &Transit, asked: &mut bool) -> bool {
        let (Some(ticket), Some(h)) = (&t.export, &self.handovers) else {
            return true;
        };
        if !*asked {
            h.ask(ticket);
            *asked = true;
        }
        ticket.done()
    }

    /// Stage 1 of every move of a tick.
    fn start(&self, moves: &[Move]) -> Result<(), SourceError> {
        if moves.is_empty() {
            return Ok(());
        }
        let export = |mv: Move| {
            let bucket = self.handovers.as_ref().and_then(|_| self.table.flow_bucket(mv.bucket))?;
            Some(Handovers::ticket(usize::from(mv.from), usize::from(mv.to), bucket))
        };
        let transits: Vec<Arc<Transit>> = moves
            .iter()
            .map(|&mv| Arc::new(Transit { mv, stage: AtomicU8::new(PARKING), cut: AtomicU64::new(0), export: export(mv) }))
            .collect();
        self.moves().extend(transits.iter().cloned());
        // Release: see `any_moves`.
        self.active.fetch_add(transits.len(), Ordering::Release);
        self.table.switch(&transits)
    }
}

/// The controller's thread, a capture unit that fills no queue.
pub(crate) struct ControllerUnit<T> {
    shared: Arc<Rebalance<T>>,
    name: String,
}

impl<T: BucketTable> ControllerUnit<T> {
    pub(crate) fn new(shared: Arc<Rebalance<T>>, name: String) -> Self {
        ControllerUnit { shared, name }
    }
}

impl<T: BucketTable> CaptureUnit for ControllerUnit<T> {
    fn queues(&self) -> Vec<QueueId> {
        Vec::new()
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn run(self: Box<Self>, _sides: Vec<CaptureSide>, ctl: &Control) -> Result<(), SourceError> {
        let s = &self.shared;
        let n = s.queues;
        let mut controller = Controller::new(n, s.cfg);
        let mut table = s.table.initial(n as u16);
        let mut in_transit = vec![false; table.len()];
        let mut last_hits = s.table.hits()?;
        let mut last = vec![(0u64, 0u64); n];
        let mut next = Instant::now() + TICK;
        while !ctl.stop_requested() && s.units.load(Ordering::Acquire) > 0 {
            let now = Instant::now();
            if now < next {
                std::thread::sleep(next - now);
                continue;
            }
            next = (next + TICK).max(now);
            let mut moved = 0;
            s.moves().retain(|t| {
                let done = t.stage() == DONE;
                if done {
                    in_transit[t.mv.bucket] = false;
                    moved += 1;
                }
                !done
            });
            s.active.fetch_sub(moved as usize, Ordering::Relaxed);
            let hits = s.table.hits()?;
            let per_bucket: Vec<u32> =
                hits.iter().zip(&last_hits).map(|(h, l)| u32::try_from(h.saturating_sub(*l)).unwrap_or(u32::MAX)).collect();
            last_hits = hits;
            let mut samples = vec![QueueSample::default(); n];
            for (b, &c) in per_bucket.iter().enumerate() {
                samples[usize::from(table.queue_of_bucket(b))].arrivals += u64::from(c);
            }
            for (q, p) in s.published.iter().enumerate() {
                let (served, dropped) = (p.served.load(Ordering::Relaxed), p.dropped.load(Ordering::Relaxed));
                samples[q].served = served.saturating_sub(last[q].0);
                samples[q].dropped = dropped.saturating_sub(last[q].1);
                samples[q].backlog = p.backlog.load(Ordering::Relaxed);
                last[q] = (served, dropped);
            }
            let moves = controller.tick(&samples, &per_bucket, &table, |b| !in_transit[b]);
            for m in &moves {
                in_transit[m.bucket] = true;
                table.assign(m.bucket, m.to);
            }
            s.start(&moves)?;
            s.counters.add(&SteeringStats { moves_started: moves.len() as u64, buckets_moved: moved, ..SteeringStats::default() });
        }
        Ok(())
    }
}
