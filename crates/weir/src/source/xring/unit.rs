//! The capture loop of an `xdp:` source: one thread reads the ring buffer
//! that weir's XDP program fills for every captured queue, and puts each
//! record's packet in a cell of its queue's pool.
//!
//! - A record goes to the side of the queue it names, so each queue's worker
//!   sees its queue's packets in the order the kernel stored them.
//! - The packet is copied into the cell. Ring buffer space is given back
//!   strictly in order (the consumer position), so a record a worker held
//!   would hold every record after it: copying frees the ring as fast as the
//!   unit reads, and the ring alone is what covers a stalled reader. (What
//!   the copy costs is in docs/src/benchmarks.md, "Live backends
//!   compared"; the packets are in the cache
//!   already, the kernel having just written them.)
//! - When a queue's pool has no cell, the record stays in the ring (not
//!   consumed), the unit waits for the worker to recycle a chunk and resumes
//!   there. If the ring fills meanwhile the program counts what it could not
//!   store, per queue, and the unit adds that to the queue's delivery drops,
//!   as afpacket's unit does with its ring's overflow.
//! - The user-space filter runs again on every record (a filter replaced
//!   meanwhile judges what waits in the ring); what it rejects is counted as
//!   filtered, as is what the kernel's filter passed to the host.
//! - Wake-ups: while records flow the unit sleeps between reads for as long
//!   as a quarter of the ring takes to fill at the rate it saw (the
//!   `live::gather` rule afxdp's unit follows), so a read takes many records
//!   whatever the rate. Only when a read after such a sleep finds the ring empty does
//!   it publish the partly filled chunks and wait in poll(2): the ring
//!   wakes it when the kernel stores a record into a ring the unit has
//!   emptied.
//! - At a stop that keeps what was captured, the unit first takes the
//!   records stamped before it saw the stop (see `live::drain`).
//! - Timestamps: the program stamps CLOCK_TAI; the unit subtracts the
//!   TAI - REALTIME offset, read again every [`STATS_EVERY`], so a stamp is
//!   wall-clock time even across a step of the clock.

use super::program::{XringProgram, RECORD_HEAD};
use crate::balance::{BalanceCounters, Route, Steering, STEER_TICK};
use crate::capture::{CaptureUnit, Control, SourceError, StopReason};
use crate::filter::FilterWatch;
use crate::pool::CaptureSide;
use crate::profile::{Probe, Profiler, Stage};
use crate::rss::Rss;
use crate::source::afxdp::kfilter::KernelFilter;
use crate::source::live::drain::{Drain, PATIENCE};
use crate::source::live::gather::Gather;
use crate::sys::bpf::Filtered;
use crate::sys::netdev::{poll_readable, LinkWatch};
use crate::sys::packet::Promiscuous;
use crate::QueueId;
use aya::maps::{MapData, RingBuf};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records read between looks at the stop flag and the filter.
const BATCH: u32 = 256;
/// A partly filled chunk is published once it waited this long.
const PUBLISH_DELAY: Duration = Duration::from_millis(1);
/// The longest wait in poll(2), so a stop request is seen within it.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// The longest wait for a cell.
const CELL_WAIT: Duration = Duration::from_millis(50);
/// How often the program's counts and the clock offset are read.
const STATS_EVERY: Duration = Duration::from_millis(100);

/// Where the unit puts each record's packet (`XdpSpread`).
pub(super) enum Routing {
    /// In the side of the RX queue the record names.
    Queue,
    /// In the side weir's symmetric RSS hash gives, over the capture's queues.
    Hash(Rss),
    /// By the hash's bucket, through the rebalancing's table.
    Steered(Box<Steered>),
}

/// Rebalancing's state in the unit: the hash, the table and its moves, where
/// its counts go, and when the controller looks next.
pub(super) struct Steered {
    rss: Rss,
    steering: Steering,
    counters: Arc<BalanceCounters>,
    next_tick: Instant,
}

impl Routing {
    /// Rebalancing over `queues` queues with the controller `cfg`, its
    /// counts published to `counters`.
    pub(super) fn steered(
        queues: u16,
        cfg: crate::balance::ControllerConfig,
        handovers: Option<Arc<crate::balance::Handovers>>,
        counters: Arc<BalanceCounters>,
    ) -> Routing {
        let rss = Rss::new(crate::LinkType::ETHERNET, queues);
        let steering = Steering::new(rss.table().clone(), usize::from(queues), cfg).with_handovers(handovers);
        Routing::Steered(Box::new(Steered { rss, steering, counters, next_tick: Instant::now() + STEER_TICK }))
    }
}

/// Where one record's packet goes: a side, and, when steered, its bucket and
/// whether it is parked (its bucket is moving; the side is then where it goes).
struct Dest {
    side: usize,
    bucket: Option<usize>,
    park: bool,
}

/// What a unit keeps alive while it runs: the program (and its ring), the
/// filter in it, the promiscuous membership.
pub(super) struct Attachment {
    pub(super) program: XringProgram,
    /// The interface, asked whether it is still up when the ring stays empty.
    pub(super) link: LinkWatch,
    pub(super) filter: Option<Arc<KernelFilter>>,
    pub(super) _promiscuous: Option<Promiscuous>,
}

/// The capture of every queue of an `xdp:` source.
pub(super) struct XringUnit {
    label: String,
    queues: Vec<QueueId>,
    /// Queue number → position in `queues` (and in the sides).
    position: Vec<Option<usize>>,
    ring: RingBuf<MapData>,
    /// A descriptor of the ring's map, to wait on.
    ring_fd: OwnedFd,
    ring_bytes: u64,
    attachment: Arc<Attachment>,
    filter: FilterWatch,
    /// Per queue position: the kernel counts already accounted.
    seen_filtered: Vec<Filtered>,
    seen_lost: Vec<Filtered>,
    /// CLOCK_TAI - CLOCK_REALTIME, in ns.
    tai_offset: u64,
    routing: Routing,
    profiler: Option<Arc<Profiler>>,
}

impl XringUnit {
    pub(super) fn new(
        label: String,
        queues: Vec<QueueId>,
        (ring, ring_fd): (RingBuf<MapData>, OwnedFd),
        ring_bytes: u64,
        attachment: Arc<Attachment>,
        filter: FilterWatch,
        profiler: Option<Arc<Profiler>>,
    ) -> XringUnit {
        debug_assert!(queues.is_sorted(), "positions follow queue order, as the steering's and the hash's do");
        let top = queues.iter().map(|q| usize::from(q.0) + 1).max().unwrap_or(0);
        let mut position = vec![None; top];
        for (i, q) in queues.iter().enumerate() {
            position[usize::from(q.0)] = Some(i);
        }
        let n = queues.len();
        XringUnit {
            label,
            queues,
            position,
            ring,
            ring_fd,
            ring_bytes,
            attachment,
            filter,
            seen_filtered: vec![Filtered::default(); n],
            seen_lost: vec![Filtered::default(); n],
            tai_offset: tai_offset(),
            routing: Routing::Queue,
            profiler,
        }
    }

    /// Spread records by `routing` rather than by RX queue.
    pub(super) fn routed(mut self, routing: Routing) -> XringUnit {
        self.routing = routing;
        self
    }

    /// Add what the kernel counted since the last look to each queue's side.
    fn account(&mut self, sides: &mut [CaptureSide]) -> Result<(), SourceError> {
        for (i, side) in sides.iter_mut().enumerate() {
            let q = self.queues[i].0;
            let mut changed = false;
            if let Some(c) = self.attachment.filter.as_ref().map(|f| f.counts()) {
                let now = c.read(q).map_err(|e| io("reading the kernel filter's counts", e))?;
                let seen = &mut self.seen_filtered[i];
                let (p, b) = (now.packets.saturating_sub(seen.packets), now.bytes.saturating_sub(seen.bytes));
                if p > 0 {
                    side.add_filtered(p, b);
                    changed = true;
                }
                *seen = now;
            }
            let now = self.attachment.program.lost(q).map_err(|e| io("reading the ring's loss counts", e))?;
            let lost = now.packets.saturating_sub(self.seen_lost[i].packets);
            if lost > 0 {
                side.add_delivery_drops(lost);
                changed = true;
            }
            self.seen_lost[i] = now;
            if changed {
                side.publish_stats();
            }
        }
        self.tai_offset = tai_offset();
        Ok(())
    }

    fn capture(&mut self, sides: &mut [CaptureSide], ctl: &Control, probe: &mut impl Probe) -> Result<(), SourceError> {
        let mut stats_at = Instant::now();
        let mut unpublished_since: Option<Instant> = None;
        // In ring bytes: records of any size fill it.
        let mut gather = Gather::new(self.ring_bytes);
        loop {
            if ctl.stop_requested() {
                return self.stopping(sides, ctl, probe);
            }
            self.filter.changed();
            let (outcome, read, bytes) = self.read(sides, ctl, None, probe)?;
            probe.records(read, Stage::Source);
            gather.took(bytes);
            if read > 0 {
                unpublished_since.get_or_insert_with(Instant::now);
            }
            match outcome {
                Read::Limit => return Ok(()),
                Read::NoCell(i) => {
                    probe.mark(Stage::CaptureWait);
                    sides[i].wait_for_cell(self.at_most(CELL_WAIT));
                    probe.mark(Stage::Source);
                    unpublished_since = None;
                }
                Read::More => {}
                Read::Empty if gather.flowing() => {
                    let now = Instant::now();
                    if unpublished_since.is_some_and(|t| now.duration_since(t) >= PUBLISH_DELAY) {
                        probe.mark(Stage::HandOff);
                        sides.iter_mut().for_each(CaptureSide::flush);
                        probe.mark(Stage::Source);
                        unpublished_since = None;
                    }
                    probe.mark(Stage::CaptureWait);
                    std::thread::sleep(self.at_most(gather.next(now)));
                    probe.mark(Stage::Source);
                }
                Read::Empty => {
                    probe.mark(Stage::HandOff);
                    sides.iter_mut().for_each(CaptureSide::flush);
                    probe.mark(Stage::Source);
                    unpublished_since = None;
                    self.account(sides)?;
                    stats_at = Instant::now();
                    probe.mark(Stage::CaptureWait);
                    if !poll_readable(self.ring_fd.as_fd(), self.at_most(IDLE_WAIT)).map_err(|e| io("waiting on the ring buffer", e))? {
                        // Quiet for a whole wait: is there still an interface?
                        self.attachment.link.check().map_err(|e| io("the interface went down or away", e))?;
                    }
                    probe.mark(Stage::Source);
                    gather.restart();
                }
            }
            if stats_at.elapsed() >= STATS_EVERY {
                self.account(sides)?;
                stats_at = Instant::now();
            }
            self.steer_tick(sides);
        }
    }

    /// A rebalancing controller tick, when steered and one is due.
    fn steer_tick(&mut self, sides: &mut [CaptureSide]) {
        if let Routing::Steered(st) = &mut self.routing {
            let now = Instant::now();
            if now >= st.next_tick {
                st.next_tick = now + STEER_TICK;
                st.steering.tick(sides);
                st.counters.publish(&st.steering.stats());
            }
        }
    }

    /// The longest sleep: `wait`, or a controller tick when steered.
    fn at_most(&self, wait: Duration) -> Duration {
        match self.routing {
            Routing::Steered(_) => wait.min(STEER_TICK),
            _ => wait,
        }
    }

    /// At the end: let the bucket moves in progress finish while the old
    /// queues' workers still run (they do until the unit returns), for at most
    /// the drain's patience; then give up the rest, whose parked packets are
    /// counted as capture drops.
    fn finish_moves(&mut self, sides: &mut [CaptureSide]) {
        let Routing::Steered(st) = &mut self.routing else { return };
        let until = Instant::now() + PATIENCE;
        st.steering.finish(sides, || Instant::now() >= until);
        st.counters.publish(&st.steering.stats());
    }

    /// At a stop: the records in the ring stamped before the unit saw it came
    /// before it. Take them when the stop keeps what was captured (see
    /// `live::drain`), counting as delivery drops of their queues those no
    /// cell could be had for.
    fn stopping(&mut self, sides: &mut [CaptureSide], ctl: &Control, probe: &mut impl Probe) -> Result<(), SourceError> {
        if !ctl.keeps_captured() {
            return Ok(());
        }
        let until = tai_now();
        let mut drain = Drain::new(PATIENCE);
        loop {
            let (outcome, read, _) = self.read(sides, ctl, Some(until), probe)?;
            probe.records(read, Stage::Source);
            drain.took(u64::from(read));
            match outcome {
                Read::More => {}
                Read::Empty | Read::Limit => return Ok(()),
                Read::NoCell(i) if !drain.stalled() => {
                    sides[i].wait_for_cell(CELL_WAIT);
                }
                Read::NoCell(_) => break,
            }
        }
        let mut left = vec![0u64; sides.len()];
        while let Some(item) = self.ring.next() {
            let (tai_ns, _, queue, _) = parse(&self.label, &item)?;
            if tai_ns > until {
                std::mem::forget(item);
                break;
            }
            left[side_of(&self.label, &self.position, queue)?] += 1;
        }
        for (side, n) in sides.iter_mut().zip(left).filter(|(_, n)| *n > 0) {
            side.add_delivery_drops(n);
            side.publish_stats();
        }
        Ok(())
    }

    /// Read up to [`BATCH`] records into the pools, up to one stamped after
    /// `until` (TAI ns) if given: how it ended, records and ring bytes read.
    #[inline]
    fn read(
        &mut self,
        sides: &mut [CaptureSide],
        ctl: &Control,
        until: Option<u64>,
        probe: &mut impl Probe,
    ) -> Result<(Read, u32, u64), SourceError> {
        let mut read = 0;
        let mut bytes = 0u64;
        while read < BATCH {
            let Some(item) = self.ring.next() else { return Ok((Read::Empty, read, bytes)) };
            let (tai_ns, wire_len, queue, data) = parse(&self.label, &item)?;
            if until.is_some_and(|t| tai_ns > t) {
                // After the stop: left to the kernel.
                std::mem::forget(item);
                return Ok((Read::Empty, read, bytes));
            }
            probe.mark(Stage::Steer);
            let dest = match &mut self.routing {
                Routing::Queue => Dest { side: side_of(&self.label, &self.position, queue)?, bucket: None, park: false },
                Routing::Hash(rss) => Dest { side: usize::from(rss.queue(data).0), bucket: None, park: false },
                Routing::Steered(st) => {
                    let b = st.rss.bucket(data);
                    match st.steering.route(b) {
                        Route::Queue(q) => Dest { side: q, bucket: Some(b), park: false },
                        // Counted, if filtered, where the bucket is going.
                        Route::Park => Dest { side: st.steering.destination(b).unwrap_or(0), bucket: Some(b), park: true },
                    }
                }
            };
            probe.mark(Stage::Source);
            let i = dest.side;
            let ring_len = (item.len() + 8).next_multiple_of(8) as u64;
            if let Some(f) = self.filter.get() {
                probe.mark(Stage::Filter);
                let pass = f.matches(data, wire_len);
                probe.mark(Stage::Source);
                if !pass {
                    sides[i].drop_filtered(wire_len);
                    read += 1;
                    bytes += ring_len;
                    continue;
                }
            }
            if !dest.park && !sides[i].has_cell() {
                if let (Some(b), Routing::Steered(st)) = (dest.bucket, &mut self.routing) {
                    st.steering.unroute(b, i);
                }
                // Left in the ring: read again (and routed again) once a cell is free.
                std::mem::forget(item);
                return Ok((Read::NoCell(i), read, bytes));
            }
            if !ctl.take_budget() {
                std::mem::forget(item);
                ctl.request_stop(StopReason::PacketLimit);
                return Ok((Read::Limit, read, bytes));
            }
            probe.mark(Stage::HandOff);
            let ts_ns = tai_ns.wrapping_sub(self.tai_offset);
            match (&mut self.routing, dest.bucket) {
                // Its bucket is moving: kept (copied) until the hand-over.
                (Routing::Steered(st), Some(b)) if dest.park => st.steering.park(b, data, wire_len, ts_ns, sides),
                _ => {
                    let pushed = sides[i].push_copy(data, wire_len, ts_ns);
                    debug_assert!(pushed.is_ok(), "has_cell said a cell is free");
                }
            }
            probe.mark(Stage::Source);
            drop(item);
            read += 1;
            bytes += ring_len;
            if ctl.budget_spent() {
                ctl.request_stop(StopReason::PacketLimit);
                return Ok((Read::Limit, read, bytes));
            }
        }
        Ok((Read::More, read, bytes))
    }
}

/// How a read ended.
enum Read {
    /// The ring is empty.
    Empty,
    /// A batch was read; there may be more.
    More,
    /// The queue at this position has no free cell.
    NoCell(usize),
    /// The packet limit was reached.
    Limit,
}

impl CaptureUnit for XringUnit {
    fn queues(&self) -> Vec<QueueId> {
        self.queues.clone()
    }

    fn name(&self) -> String {
        self.label.clone()
    }

    fn profiled(&self) -> bool {
        self.profiler.is_some()
    }

    fn run(mut self: Box<Self>, mut sides: Vec<CaptureSide>, ctl: &Control) -> Result<(), SourceError> {
        if sides.len() != self.queues.len() {
            return Err(SourceError::Invalid(format!("{}: {} queues but {} sides", self.label, self.queues.len(), sides.len())));
        }
        // Positions are queue order (the hash's and the steering's numbering).
        sides.sort_by_key(|s| s.queue().0);
        let result = match self.profiler.clone() {
            Some(p) => {
                let mut timer = p.timer(&format!("capture-{}", self.label), Stage::Source);
                let r = self.capture(&mut sides, ctl, &mut timer);
                timer.finish(&p);
                r
            }
            None => self.capture(&mut sides, ctl, &mut ()),
        };
        self.finish_moves(&mut sides);
        // What the kernel counted up to now belongs to this run, even after a failure.
        let last = self.account(&mut sides);
        sides.iter_mut().for_each(CaptureSide::flush);
        result.and(last)
    }
}

/// A record's head and packet, or why weir cannot read it.
#[inline]
fn parse<'a>(label: &str, item: &'a [u8]) -> Result<(u64, u32, u32, &'a [u8]), SourceError> {
    record(item).ok_or_else(|| {
        SourceError::Invalid(format!("{label}: a record of {} bytes in the ring buffer: ebpf/weir_xring.c and weir disagree", item.len()))
    })
}

/// The position among the sides of a record's queue.
#[inline]
fn side_of(label: &str, position: &[Option<usize>], queue: u32) -> Result<usize, SourceError> {
    position.get(queue as usize).copied().flatten().ok_or_else(|| {
        SourceError::Invalid(format!("{label}: the XDP program stored a packet of queue {queue}, which weir does not capture"))
    })
}

/// A record's head and packet bytes: (TAI ns, wire length, queue, bytes).
#[inline]
fn record(r: &[u8]) -> Option<(u64, u32, u32, &[u8])> {
    let (head, data) = r.split_first_chunk::<RECORD_HEAD>()?;
    let tai = u64::from_ne_bytes(head[0..8].try_into().ok()?);
    let wire = u32::from_ne_bytes(head[8..12].try_into().ok()?);
    let queue = u32::from_ne_bytes(head[12..16].try_into().ok()?);
    Some((tai, wire, queue, data))
}

/// CLOCK_TAI now, in ns: what the program stamps records with.
fn tai_now() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_TAI).map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// CLOCK_TAI - CLOCK_REALTIME in ns (37 s since 2017, 0 where the kernel's
/// TAI offset was never set).
fn tai_offset() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    let ns = |c| clock_gettime(c).map(|t| t.tv_sec() as i128 * 1_000_000_000 + i128::from(t.tv_nsec())).unwrap_or(0);
    let tai = ns(ClockId::CLOCK_TAI);
    let real = ns(ClockId::CLOCK_REALTIME);
    u64::try_from(tai - real).unwrap_or(0)
}

fn io(what: &str, error: std::io::Error) -> SourceError {
    SourceError::Io { what: what.into(), error }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_its_head_and_the_packet() {
        let mut r = Vec::new();
        r.extend(7u64.to_ne_bytes());
        r.extend(60u32.to_ne_bytes());
        r.extend(3u32.to_ne_bytes());
        r.extend([1, 2, 3]);
        assert_eq!(record(&r), Some((7, 60, 3, &[1u8, 2, 3][..])));
        assert_eq!(record(&r[..15]), None, "shorter than the head");
    }
}
