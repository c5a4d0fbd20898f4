//! The stream layer of one worker: its table, arena and fragment reassembly,
//! turning the packets of its queue into stream events for the application's
//! [`StreamHandler`].
//!
//! [`Streams`] is a [`Handler`]: the engine runs it on the worker of its
//! queue like any packet handler (after locality and the filter), so it needs
//! no lock, and calls [`Handler::finish`] at the end of input to close what
//! is still open.

use super::arena::Arena;
use super::config::{Class, Mode, StreamConfig};
use super::decode::{self, Frame, Transport};
use super::fragment::{Defrag, Outcome, Whole};
use super::reassembly::{self, Cutoff, Flags};
use super::{Board, CloseReason, Direction, Stream, StreamCtl, StreamHandler, StreamStats, StreamsNow};
use crate::filter::Filter;
use crate::flowtable::{End, Flow, FlowTable, TableLimits};
use crate::memory::Plan;
use crate::pool::prefetch;
use crate::rss::Rss;
use crate::source::live::cutoff::KernelCutoff;
use crate::wire::{field, FlowTuple};
use crate::{FlowBucket, Handler, Handover, LinkType, Packet, QueueId, SettingError};
use deliver::{
    advertise, apply, apply_pending, close_reassembly, datagram_payload, delivery, emit, not_reassembled, offered, reassembled, tcp_segment,
};
use dir::{Bits, Dir, Rec, Spare};
use std::sync::Arc;

mod deliver;
mod dir;
mod flush;
mod kernel;

/// Memory the table of `connections` takes with both streams of each,
/// without the application's state: their slots, and where streams deliver
/// data, a [`Delivery`](dir::Delivery) for each direction.
fn table_bytes(cfg: &StreamConfig, connections: usize) -> u64 {
    let table = FlowTable::<FlowTuple, Conn<()>>::memory_for(connections);
    if !delivers(cfg) {
        return table;
    }
    let deliveries = (connections as u64 * 2).saturating_add(dir::SPARE_DELIVERIES).saturating_mul(dir::DELIVERY_BYTES);
    table.saturating_add(deliveries)
}

/// Whether streams of `cfg` deliver data (and so have a [`Delivery`](dir::Delivery)): not
/// for flow statistics, packets mode or a cutoff of 0 with no class to
/// change them. An application that raises a datagram stream's cutoff from
/// 0 makes one for it then.
fn delivers(cfg: &StreamConfig) -> bool {
    !(cfg.flows || (cfg.classes.is_empty() && (cfg.mode == Mode::Packets || cfg.cutoff == Some(0))))
}

// Here, not beside the rest of the configuration: the plan is made of this
// module's sizes (the table's slots, the directions, the flush entries), and
// config.rs stays below the layer it configures.
impl StreamConfig {
    /// What the stream layer may use, for the engine's memory check: the
    /// tables (allocated at the start) and the arenas (a bound, not
    /// allocated up front).
    pub fn memory_plan(&self, queues: usize) -> Plan {
        let (conns, arena) = self.per_queue(queues);
        let mut plan = Plan::new();
        plan.add(format!("stream tables ({} connections)", conns * queues.max(1)), table_bytes(self, conns) * queues.max(1) as u64);
        plan.add("stream reassembly arenas", arena * queues.max(1) as u64);
        if self.flush_timeout_ns.is_some() {
            // An entry per direction with a partial piece, at most.
            let entries = (conns as u64).saturating_mul(2 * queues.max(1) as u64);
            plan.add("stream flush queues", entries.saturating_mul(flush::ENTRY_BYTES));
        }
        plan
    }
}

/// Both directions of a connection, keyed by its canonical tuple: `dirs[0]`
/// is the direction whose packets carry the canonical tuple as sent.
pub(crate) struct Conn<S> {
    /// Inline, so a flow costs its slot and nothing else (`dir.rs`).
    dirs: [Option<Dir<S>>; 2],
    /// The steering's hash of the packet that made it ([`Rss`]'s flow hash):
    /// what rebalancing moves it by (`handover.rs`).
    pub(super) steer: u32,
    /// Both streams closed and were let go of ([`retire`]): the connection
    /// is kept only so that its late packets are not taken for a new one.
    retired: bool,
}

impl<S> Conn<S> {
    /// Arena bytes its directions hold: out-of-order bytes and pieces.
    pub(super) fn arena_bytes(&self) -> u64 {
        self.dirs.iter().flatten().filter_map(|d| d.delivery.as_ref()).map(|x| x.held + x.piece.capacity() as u64).sum()
    }
}

/// A packet's connection key (its tuple in canonical order), which side of
/// the connection sent it, and the table's hash of the key: worked out once
/// per packet, when a run is warmed.
#[derive(Copy, Clone)]
struct Keyed {
    key: FlowTuple,
    side: usize,
    hash: u64,
}

impl Keyed {
    fn new<V>(tuple: &FlowTuple, table: &FlowTable<FlowTuple, V>) -> Keyed {
        let key = tuple.canonical();
        Keyed { key, side: usize::from(key != *tuple), hash: table.hash(&key) }
    }
}

/// The stream layer of one queue, running the application's `H`.
pub struct Streams<H: StreamHandler> {
    handler: H,
    link: LinkType,
    pub(super) queue: QueueId,
    cfg: StreamConfig,
    classes: Vec<(Filter, Class)>,
    pub(super) table: FlowTable<FlowTuple, Conn<H::State>>,
    defrag: Defrag,
    pub(super) arena: Arena,
    pub(super) stats: StreamStats,
    /// The steering's flow hash, for [`Conn::steer`].
    rss: Rss,
    /// A datagram rebuilt from fragments, copied out of the fragment
    /// reassembler so both can be borrowed while it is handled.
    whole: Vec<u8>,
    /// Connections the table let go of while a packet was handled, closed
    /// once it was; kept to reuse its allocation.
    closing: Vec<Closing<H::State>>,
    /// Directions with a partial piece, for the flush timeout.
    waiting: flush::Waiting,
    /// Packet time when the worker is idle.
    idle: flush::IdleClock,
    /// Boxes of closed directions' deliveries, for the next streams.
    spare: Spare,
    /// The kernel cutoff's flow map, when the source has one.
    kernel: Option<KernelCutoff>,
    /// Connections the table found idle with a direction in the kernel's
    /// map, to be kept if the kernel saw them (`kernel::revive`).
    revive: Vec<Flow<FlowTuple, Conn<H::State>>>,
    /// Where readers on other threads ask for the counters (`board.rs`).
    board: Arc<Board>,
    /// The last request answered on the board.
    served: u64,
}

/// The [`Env`] of the layer `$s` at packet time `$now`, with no connection's
/// key yet. A macro, not a method: it borrows the fields it names, so the
/// table stays free to be borrowed beside it.
macro_rules! env {
    ($s:expr, $now:expr) => {
        Env {
            handler: &mut $s.handler,
            spare: &mut $s.spare,
            arena: &mut $s.arena,
            stats: &mut $s.stats,
            kernel: $s.kernel.as_mut(),
            piece: $s.cfg.piece,
            overlap: $s.cfg.piece_overlap,
            now: $now,
            key: NO_KEY,
            queue: $s.queue,
        }
    };
}
pub(super) use env;

/// A connection the table let go of, with its key and why.
pub(super) type Closing<S> = (FlowTuple, Conn<S>, CloseReason);

/// What the per-direction work needs besides the direction itself.
pub(super) struct Env<'a, H: StreamHandler> {
    handler: &'a mut H,
    spare: &'a mut Spare,
    arena: &'a mut Arena,
    stats: &'a mut StreamStats,
    kernel: Option<&'a mut KernelCutoff>,
    piece: usize,
    overlap: usize,
    now: u64,
    /// The key of the connection being worked on: with `queue`, what makes a
    /// direction's counts a [`Stream`] record ([`Dir::stream`]).
    key: FlowTuple,
    queue: QueueId,
}

impl<H: StreamHandler> Env<'_, H> {
    /// The records of a direction and its opposite, for a callback.
    fn records(&self, d: &Dir<H::State>, opposite: Option<&Dir<H::State>>) -> (Stream, Option<Stream>) {
        (d.stream(&self.key, self.queue), opposite.map(|o| o.stream(&self.key, self.queue)))
    }

    /// Counts the record of a direction that is handed out for good.
    fn record_closed(&mut self, d: &Dir<H::State>) {
        self.stats.record_closed(&d.byte_counts(), d.rec.closed);
    }
}

impl<H: StreamHandler> Streams<H> {
    /// The stream layer of `queue` among `queues`, for packets of link type
    /// `link`, handing events to `handler`. The table and arena are this
    /// queue's share of the configuration's.
    pub fn new(cfg: &StreamConfig, link: LinkType, queue: QueueId, queues: usize, handler: H) -> Result<Streams<H>, SettingError> {
        cfg.check()?;
        let classes = cfg.compile_classes(link)?;
        let (conns, arena) = cfg.per_queue(queues);
        let limits = TableLimits::new(conns, cfg.idle_timeout_ns)?;
        Ok(Streams {
            handler,
            link,
            queue,
            cfg: cfg.clone(),
            classes,
            table: FlowTable::new(limits),
            defrag: Defrag::new(cfg.fragments),
            arena: Arena::new(arena, cfg),
            stats: StreamStats::default(),
            whole: Vec::new(),
            closing: Vec::new(),
            waiting: flush::Waiting::default(),
            idle: flush::IdleClock::default(),
            rss: Rss::new(link, 1),
            spare: Spare::preallocated(if delivers(cfg) { cfg.prealloc_connections.div_ceil(queues.max(1)).min(conns) * 2 } else { 0 }),
            kernel: None,
            revive: Vec::new(),
            board: Arc::default(),
            served: 0,
        })
    }

    /// Enforces the cutoff in the kernel too, through the source's flow map
    /// (`kernel.rs` says how), with a handle from
    /// [`Engine::kernel_cutoff`](crate::engine::Engine::kernel_cutoff).
    /// [`Engine::start_streams`](crate::engine::Engine::start_streams) does it itself.
    pub fn set_kernel_cutoff(&mut self, kernel: KernelCutoff) {
        self.kernel = Some(kernel);
    }

    /// What the layer counted so far. Byte counts are added as streams
    /// close; after the run, every stream is closed.
    pub fn stats(&self) -> StreamStats {
        let mut s = self.stats;
        s.memory_peak = self.arena.peak();
        s.fragment = self.defrag.counters();
        s
    }

    /// Where another thread reads this layer's counters while it runs.
    pub(crate) fn board(&self) -> Arc<Board> {
        Arc::clone(&self.board)
    }

    fn now(&self) -> StreamsNow {
        StreamsNow { stats: self.stats(), connections_open: self.table.len() as u64, memory_bytes: self.arena.used() }
    }

    /// Publish the counters if a reader asked since the last time.
    #[inline]
    fn answer_board(&mut self) {
        if let Some(n) = self.board.wanted(self.served) {
            self.board.publish(&self.now(), n);
            self.served = n;
        }
    }

    /// The application's handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// The application's handler, taken back.
    pub fn into_handler(self) -> H {
        self.handler
    }

    /// Decodes a captured frame, as [`keyed_for_mode`](Self::keyed_for_mode) keys it.
    fn decode<'p>(&self, data: &'p [u8]) -> Frame<'p> {
        self.keyed_for_mode(decode::frame(self.link, data))
    }

    /// A decoded frame as this layer keys it: in flows mode ICMP by type and
    /// code. Captured frames and datagrams rebuilt from fragments alike.
    fn keyed_for_mode<'p>(&self, frame: Frame<'p>) -> Frame<'p> {
        if self.cfg.flows {
            decode::icmp_as_ports(frame)
        } else {
            frame
        }
    }

    fn take_packet(&mut self, p: &Packet<'_>) {
        self.take_frame(p, &self.decode(p.data()), None);
    }

    /// Handles `p`, decoded as `frame`; `keyed` is its connection's key, side
    /// and hash when [`warm`](Self::warm) computed them.
    fn take_frame(&mut self, p: &Packet<'_>, frame: &Frame<'_>, keyed: Option<Keyed>) {
        self.stats.packets += 1;
        self.idle.packet(p.ts_ns());
        match frame {
            Frame::NotIp => self.stats.not_ip += 1,
            Frame::Malformed => self.stats.malformed += 1,
            Frame::Datagram(d) => self.datagram(d, p, keyed, None),
            Frame::Fragment(ip) => match self.defrag.push(p.ts_ns(), ip) {
                Outcome::Complete(whole) => {
                    let mut buf = std::mem::take(&mut self.whole);
                    buf.clear();
                    buf.extend_from_slice(whole);
                    let fragments = self.defrag.whole();
                    match self.keyed_for_mode(decode::ip(&buf)) {
                        Frame::Datagram(d) => self.datagram(&d, p, None, Some(fragments)),
                        _ => self.stats.malformed += 1,
                    }
                    self.whole = buf;
                }
                // The decoder saw a fragment where the reassembler sees none:
                // a header too damaged for either to read.
                Outcome::NotFragment => self.stats.malformed += 1,
                Outcome::Held | Outcome::Failed(_) => self.stats.fragments += 1,
            },
        }
        if self.cfg.flush_timeout_ns.is_some() {
            self.flush_due(p.ts_ns());
        }
    }

    /// Handles a whole datagram; `fragments` says what it was rebuilt from,
    /// if it was.
    fn datagram(&mut self, d: &decode::Datagram<'_>, p: &Packet<'_>, keyed: Option<Keyed>, fragments: Option<Whole>) {
        let ts = p.ts_ns();
        // What the record counts of it: in flows mode, a rebuilt datagram
        // counts its fragments as they were on the wire (packets, IP bytes,
        // the first one's time), as a flow exporter counts packets;
        // otherwise it is one packet, whole, at its completion.
        let (wire_packets, octets, first_ns) = match fragments.filter(|_| self.cfg.flows) {
            Some(w) => (w.fragments, w.ip_bytes, w.first_ns.min(ts)),
            None => (1, u64::from(d.ip_len), ts),
        };
        let Keyed { key, side, hash } = keyed.unwrap_or_else(|| Keyed::new(&d.tuple, &self.table));
        let (tcp, payload, missing) = match &d.transport {
            Transport::Tcp(s) => (Some((s.seq, s.flags)), s.payload, s.missing),
            Transport::Datagram { payload, missing } => (None, *payload, *missing),
        };
        let window = match &d.transport {
            Transport::Tcp(s) => Some((s.ack, s.window, s.window_scale)),
            Transport::Datagram { .. } => None,
        };
        let syn_only = |f: u8| f & (field::tcp::SYN | field::tcp::ACK) == field::tcp::SYN;
        let Streams {
            handler, queue, cfg, classes, table, arena, stats, closing: closing_buf, waiting, rss, spare, kernel, revive, ..
        } = self;
        let mut env = Env {
            handler,
            spare,
            arena,
            stats,
            kernel: kernel.as_mut(),
            piece: cfg.piece,
            overlap: cfg.piece_overlap,
            now: ts,
            key,
            queue: *queue,
        };
        let mut closing = std::mem::take(closing_buf);
        // Borrowed, not taken: a take and a put back cost every packet a
        // Vec's drop, for a list that is almost always empty.
        let revived = revive;
        if env.kernel.is_some() {
            // A packet of a connection the kernel cutoff hides from weir: it
            // is alive, whatever the table last saw of it.
            table.refresh_hashed(hash, &key, ts, kernel::installed);
        }
        let mut gone = |flow: Flow<FlowTuple, Conn<H::State>>, why: End| kernel::leaving(flow, why, &mut closing, revived);
        // A direction the full kernel map had no room for.
        let mut room = None;
        // A TCP packet that neither opens a connection nor carries data (an
        // ACK, FIN or RST after the end) starts nothing: it is counted apart.
        // A flow record counts every packet, so in flows mode it does.
        let opens = cfg.flows || tcp.is_none_or(|(_, f)| f & field::tcp::SYN != 0 || !payload.is_empty());
        // A SYN (without ACK) on a direction that already had another SYN, or
        // was closed, starts a new connection on the same ports.
        if let Some((seq, _)) = tcp.filter(|&(_, f)| syn_only(f)) {
            let reused = table.get(&key).is_some_and(|c| {
                c.retired
                    || c.dirs[side]
                        .as_ref()
                        .is_some_and(|dir| dir.isn().is_some_and(|isn| isn != seq) || dir.state.is_none() || dir.rec.closed.is_some())
            });
            if reused {
                if let Some(flow) = table.remove(&key) {
                    close_conn(flow.value, CloseReason::Reused, &mut env);
                }
            }
        }
        // Every way out of the packet's handling (untracked, a retired
        // connection, handled) passes the one tail below, which closes what
        // the table let go of meanwhile.
        'packet: {
            let conn = if opens {
                table.entry_hashed(
                    hash,
                    key,
                    ts,
                    || Conn { dirs: [None, None], steer: rss.flow_hash(p.data()).unwrap_or(0), retired: false },
                    &mut gone,
                )
            } else {
                match table.touch_hashed(hash, &key, ts, &mut gone) {
                    Some(conn) => conn,
                    None => {
                        env.stats.untracked += 1;
                        break 'packet;
                    }
                }
            };
            if conn.retired {
                // A late copy, or data after a RST, once both streams closed:
                // not stream data, as on a closed stream.
                env.stats.to_stream += 1;
                env.stats.bytes += payload.len() as u64;
                env.stats.refused += payload.len() as u64;
                break 'packet;
            }
            let fresh = conn.dirs.iter().all(Option::is_none);
            if conn.dirs[side].is_none() {
                let initiator = if fresh {
                    // The first packet's sender opened it, unless that is a SYN-ACK.
                    tcp.is_none_or(|(_, f)| f & (field::tcp::SYN | field::tcp::ACK) != field::tcp::SYN | field::tcp::ACK)
                } else {
                    conn.dirs[1 - side].as_ref().is_some_and(|o| o.rec.direction == Direction::Responder)
                };
                let direction = if initiator { Direction::Initiator } else { Direction::Responder };
                let (mode, cutoff, priority) = classify(cfg, classes, p);
                let mut rec = Rec::new(ts, direction, mode, priority);
                rec.first_ns = first_ns;
                // A stream whose cutoff is 0 from the start (flow statistics)
                // keeps no reassembly state at all: its bytes are counted as
                // discarded and its FIN or RST closes it, as in packets mode.
                let delivery = (mode != Mode::Packets && tcp.is_some() && cutoff != Some(0)).then(|| {
                    let mut x = env.spare.delivery();
                    x.reasm = Some(env.spare.reassembler(reassembly::Config {
                        mode: if mode == Mode::TcpStrict { reassembly::Mode::TcpStrict } else { reassembly::Mode::TcpFast },
                        overlap: cfg.overlap,
                        hold_limit: cfg.hold_limit,
                        cutoff: cutoff.map_or(Cutoff::NONE, Cutoff::after),
                        midstream: cfg.midstream,
                        receive_window: cfg.receive_window,
                    }));
                    x.piece_since_ns = ts;
                    x
                });
                let mut dir = Dir::new(rec, side == 1, delivery);
                dir.set_cutoff(cutoff, env.spare);
                env.stats.streams += 1;
                env.stats.connections += u64::from(fresh);
                let opposite = conn.dirs[1 - side].as_ref();
                let (stream, other) = env.records(&dir, opposite);
                let mut ctl = StreamCtl::new(&stream, other.as_ref());
                dir.state = Some(env.handler.created(&mut ctl));
                let req = ctl.requests();
                apply(&mut dir, opposite, req, &mut env);
                conn.dirs[side] = Some(dir);
            }
            let [d0, d1] = &mut conn.dirs;
            let (this, other) = if side == 0 { (d0, d1) } else { (d1, d0) };
            let this = this.as_mut().expect("made above");
            if let (Some((_, flags)), Some((ack, win, _)), Some(o)) = (tcp, window, other.as_mut()) {
                advertise(this, o, flags, ack, win);
            }
            if let Some(active) = cfg.active_timeout_ns {
                if ts.saturating_sub(this.rec.first_ns) >= active {
                    active_record(this, ts, &mut env);
                }
            }
            this.rec.packets += wire_packets;
            this.rec.last_ns = this.rec.last_ns.max(ts);
            this.rec.bytes += payload.len() as u64;
            this.rec.octets += octets;
            if let Some((_, flags)) = tcp {
                // The flow record's cumulative flags: one OR per packet.
                this.rec.tcp_flags |= flags;
            }
            let dropped_before = this.delivery.as_ref().map_or(0, |x| x.dropped);
            let discarded_before = this.rec.discarded;
            // Bytes counted as discarded only because packets mode keeps no payload.
            let mut unkept = 0;
            if this.state.is_none() {
                // Closed: a late copy, or data after a RST, is not stream data.
                if !payload.is_empty() {
                    delivery(this, &mut env).refused += payload.len() as u64;
                }
            } else {
                let opposite = other.as_ref();
                if this.bits.has(Bits::PACKETS) && this.cutoff().is_none_or(|c| offered(this) < c) {
                    let (stream, other) = env.records(this, opposite);
                    let mut ctl = StreamCtl::new(&stream, other.as_ref());
                    env.handler.packet(&mut ctl, this.state.as_mut().expect("open"), p);
                    let req = ctl.requests();
                    apply(this, opposite, req, &mut env);
                }
                // A SYN's sequence number and window scale, noted once, before
                // the segment is handled, in every mode.
                if let Some((seq, _)) = tcp.filter(|&(_, f)| f & field::tcp::SYN != 0 && this.isn().is_none()) {
                    this.saw_syn(seq, window.and_then(|(_, _, scale)| scale));
                }
                match tcp {
                    Some((seq, flags)) if reassembled(this) => {
                        // A FIN in a segment cut by the snapshot length would end
                        // the stream before the bytes not captured: left out.
                        let f = Flags {
                            syn: flags & field::tcp::SYN != 0,
                            fin: flags & field::tcp::FIN != 0 && missing == 0,
                            rst: flags & field::tcp::RST != 0,
                        };
                        tcp_segment(this, opposite, seq, f, payload, &mut env);
                    }
                    Some((_, flags)) => {
                        unkept = not_reassembled(this, payload.len() as u64);
                        if flags & field::tcp::FIN != 0 && this.rec.closed.is_none() {
                            this.rec.closed = Some(CloseReason::Fin);
                        }
                    }
                    None if this.rec.mode == Mode::Packets => unkept = not_reassembled(this, payload.len() as u64),
                    None => datagram_payload(this, opposite, payload, &mut env),
                }
                if let Some(flush) = cfg.flush_timeout_ns {
                    if this.delivery.as_ref().is_some_and(|x| x.waiting() && ts.saturating_sub(x.piece_since_ns) >= flush) {
                        emit(this, opposite, &mut env);
                    }
                }
                apply_pending(this, opposite, &mut env);
                if let Some(k) = env.kernel.as_deref_mut() {
                    if kernel::install(this, other.as_ref(), &key, cfg.kernel_install_after, k, &mut env.stats.kernel) {
                        room = Some((key, side));
                    }
                }
            }
            let dropped = this.delivery.as_ref().map_or(0, |x| x.dropped) - dropped_before;
            let discarded = this.rec.discarded - discarded_before - unkept;
            if dropped > 0 {
                env.stats.dropped_packets += 1;
            } else if !payload.is_empty() && discarded == payload.len() as u64 {
                env.stats.discarded_packets += 1;
            } else {
                env.stats.to_stream += 1;
            }
            let rst = tcp.is_some_and(|(_, f)| f & field::tcp::RST != 0);
            if cfg.flows {
                // A flow record stays open past its FIN or RST, for the packets
                // that close the connection; the table closes it (see `flows`).
                if rst {
                    this.rec.closed.get_or_insert(CloseReason::Rst);
                    if let Some(o) = other.as_mut() {
                        o.rec.closed.get_or_insert(CloseReason::Rst);
                    }
                }
            } else {
                if let Some(reason) = this.rec.closed {
                    end_dir(this, other.as_ref(), reason, &mut env);
                }
                if rst {
                    // A RST ends both directions.
                    end_dir(this, other.as_ref(), CloseReason::Rst, &mut env);
                    if let Some(o) = other.as_mut() {
                        end_dir(o, Some(this), CloseReason::Rst, &mut env);
                    }
                }
            }
            if cfg.flush_timeout_ns.is_some() {
                flush::queue(waiting, this, key, side);
            }
            // A connection whose streams both closed stays in the table (as TCP's
            // TIME-WAIT does) until it is idle or evicted: a retransmitted FIN
            // with data, or data after a RST, is then counted as refused
            // instead of starting a connection of its own. A new SYN starts one.
            // Its streams are let go of at once, though: the table keeps only
            // the connection's slot.
            if this.state.is_none() && other.as_ref().is_some_and(|o| o.state.is_none()) {
                retire(conn, &mut env);
            }
        }
        if let Some((key, side)) = room {
            kernel::make_room(table, &mut env, key, side);
        }
        kernel::revive(table, &mut env, revived, &mut closing, cfg.idle_timeout_ns, cfg.active_timeout_ns);
        for (key, conn, reason) in closing.drain(..) {
            env.key = key;
            close_conn(conn, reason, &mut env);
        }
        *closing_buf = closing;
    }

    /// Connections in the table, and the streams they hold.
    #[cfg(test)]
    pub(in crate::stream) fn held(&self) -> (usize, usize) {
        let streams = self.table.values().map(|c| c.dirs.iter().flatten().count()).sum();
        (self.table.len(), streams)
    }

    /// Queues for the flush timeout the waiting pieces of a connection handed
    /// in from another queue: their entries stayed in the old queue's flush
    /// queue, which drops them when they come due.
    pub(super) fn queue_handed_in(&mut self, key: FlowTuple, conn: &mut Conn<H::State>) {
        if self.cfg.flush_timeout_ns.is_none() {
            return;
        }
        for (side, d) in conn.dirs.iter_mut().enumerate() {
            if let Some(d) = d {
                if let Some(x) = d.delivery.as_mut() {
                    x.flush_queued = false;
                }
                flush::queue(&mut self.waiting, d, key, side);
            }
        }
    }

    /// Decodes a run of packets into `frames` (with each connection's key)
    /// and asks the processor for what handling them will read, in rounds
    /// over the run: the packets' headers; each packet's index bucket; the
    /// slot it names (both directions are in it); the reassembly state of
    /// its directions, and its flow's neighbours in the table's recency
    /// order. At 10^5 streams and more each is a cache miss, and one
    /// packet's depend on each other; across the run they overlap.
    fn warm<'p>(&self, packets: &[Packet<'p>], frames: &mut [Option<(Frame<'p>, Option<Keyed>)>; crate::PACKETS_PER_RUN]) {
        for p in packets {
            prefetch::lines(p.data(), 2);
        }
        for (f, p) in frames.iter_mut().zip(packets) {
            let frame = self.decode(p.data());
            let keyed = match &frame {
                Frame::Datagram(d) => {
                    let k = Keyed::new(&d.tuple, &self.table);
                    if let Some((at, len)) = self.table.lookup_memory(k.hash, false) {
                        prefetch::span(at, len);
                    }
                    Some(k)
                }
                _ => None,
            };
            *f = Some((frame, keyed));
        }
        let keyed = || frames.iter().flatten().filter_map(|(_, k)| k.as_ref());
        for k in keyed() {
            if let Some((at, len)) = self.table.lookup_memory(k.hash, true) {
                prefetch::span(at, len);
            }
        }
        for k in keyed() {
            let Some((conn, links)) = self.table.hint_hashed(k.hash) else { continue };
            // Both directions: a TCP segment's ACK reads the opposite one's
            // reassembler (its window, `advertise`), and that first read was
            // the layer's hottest miss (a third of `datagram`'s samples at
            // --cutoff 0, when directions were boxed).
            for x in conn.dirs.iter().flatten().filter_map(|d| d.delivery.as_deref()) {
                prefetch::value(x);
            }
            for at in links.into_iter().flatten() {
                prefetch::hint(at);
            }
        }
    }

    /// Closes every stream still open, for `reason`, each as the table lets
    /// go of it: collected first, the connections of a full table were
    /// copied into a list as large as the table (at 10^6 flows, a third of
    /// `weir flows`' peak memory).
    fn close_all(&mut self, reason: CloseReason) {
        let mut env = env!(self, 0);
        self.table.drain(|flow| {
            env.key = flow.key;
            close_conn(flow.value, reason, &mut env);
        });
    }

    /// Closes connections that left the table, each for its reason, at
    /// packet time `now` (0 when no packet time applies).
    pub(super) fn close(&mut self, conns: impl IntoIterator<Item = Closing<H::State>>, now: u64) {
        let mut env = env!(self, now);
        for (key, conn, reason) in conns {
            env.key = key;
            close_conn(conn, reason, &mut env);
        }
    }
}

/// [`Env::key`] before a connection is worked on.
pub(super) const NO_KEY: FlowTuple = FlowTuple::V4 { src: [0; 4], dst: [0; 4], proto: 0, ports: None };

impl<H: StreamHandler> Handler for Streams<H> {
    fn packet(&mut self, packet: &Packet<'_>) {
        self.take_packet(packet);
        self.handler.run_done();
        self.answer_board();
    }

    fn packets(&mut self, packets: &[Packet<'_>]) {
        let mut frames = [const { None }; crate::PACKETS_PER_RUN];
        self.warm(packets, &mut frames);
        // By reference: the run's frames moved into the loop were a copy
        // of the whole array (about 3 KiB) a run and a move of each frame.
        for (p, f) in packets.iter().zip(&frames) {
            let (frame, keyed) = f.as_ref().expect("warm decodes every packet of the run");
            self.take_frame(p, frame, *keyed);
        }
        self.handler.run_done();
        self.answer_board();
    }

    fn idle(&mut self) {
        self.idle_tick();
        self.handler.run_done();
        self.answer_board();
    }

    fn export(&mut self, bucket: &FlowBucket) -> Option<Handover> {
        let h = self.export_bucket(bucket);
        self.handler.run_done();
        h
    }

    fn import(&mut self, state: Handover) {
        self.import_bucket(state);
        self.handler.run_done();
    }

    fn finish(&mut self) {
        self.close_all(CloseReason::EndOfInput);
        self.defrag.expire(u64::MAX);
        self.handler.run_done();
        debug_assert!(self.stats.packets_add_up(), "a packet in no category: {:?}", self.stats);
        debug_assert_eq!(self.arena.used(), 0, "arena bytes left after every stream closed");
        self.board.publish_final(&self.now());
    }
}

/// Closes whatever is open of a connection that leaves the table (the one
/// of `env.key`), and counts its streams.
fn close_conn<H: StreamHandler>(conn: Conn<H::State>, reason: CloseReason, env: &mut Env<'_, H>) {
    let [mut a, mut b] = conn.dirs;
    if let Some(d) = a.as_mut() {
        end_dir(d, b.as_ref(), reason, env);
    }
    if let Some(d) = b.as_mut() {
        end_dir(d, a.as_ref(), reason, env);
    }
    for d in [a, b].into_iter().flatten() {
        env.record_closed(&d);
        env.spare.keep(d);
    }
}

/// Lets go of both streams of a connection once both closed: their records
/// are counted and their deliveries kept for the next streams. Closed
/// connections wait out the idle timeout in the table, and with short
/// connections they are most of it: when directions were boxed, their
/// streams were most of the table's memory (two directions of 248 bytes to
/// a slot of 88). On 200,000 connections, 100 open at a time, letting go of
/// them took `--cutoff 0` from 1.20 s and 192 MB to 0.63 s and 66 MB.
fn retire<H: StreamHandler>(conn: &mut Conn<H::State>, env: &mut Env<'_, H>) {
    for d in conn.dirs.iter_mut().filter_map(Option::take) {
        debug_assert!(d.state.is_none(), "only closed streams are retired");
        env.record_closed(&d);
        env.spare.keep(d);
    }
    conn.retired = true;
}

/// Ends one direction of `env.key`'s connection for `reason` (unless it
/// ended already): what is held or waiting in the piece is delivered, holes
/// become gaps, and the application gets its state back with `closed`.
fn end_dir<H: StreamHandler>(d: &mut Dir<H::State>, opposite: Option<&Dir<H::State>>, reason: CloseReason, env: &mut Env<'_, H>) {
    if d.state.is_none() {
        return;
    }
    if d.rec.closed.is_none() {
        d.rec.closed = Some(reason);
    }
    close_reassembly(d, opposite, reason, env);
    if d.waiting() {
        emit(d, opposite, env);
    }
    if let Some(x) = d.delivery.as_mut() {
        env.arena.release(x.piece.capacity() as u64);
        x.piece = Vec::new();
        x.carried = 0;
    }
    let key = env.key;
    let late = env.kernel.as_deref_mut().and_then(|k| kernel::take(d, &key, k, &mut env.stats.kernel, Some(reason)));
    let state = d.state.take().expect("open");
    env.handler.closed(&d.stream(&env.key, env.queue), state);
    if let Some(c) = late {
        kernel::after_close(d, &c, env.spare);
    }
}

/// Hands out a flows-mode record of `env.key`'s connection whose active
/// timeout passed at packet time `now` and starts it again from there (the
/// stream, its state and its close reason, if a FIN was seen, go on).
fn active_record<H: StreamHandler>(d: &mut Dir<H::State>, now: u64, env: &mut Env<'_, H>) {
    if d.state.is_none() {
        return;
    }
    let key = env.key;
    if let Some(k) = env.kernel.as_deref_mut() {
        kernel::take(d, &key, k, &mut env.stats.kernel, None);
    }
    let stream = d.stream(&key, env.queue);
    let Some(state) = d.state.as_mut() else { return };
    env.handler.active(&stream, state);
    env.stats.record_bytes(&d.byte_counts());
    env.stats.active_records += 1;
    let r = &mut d.rec;
    (r.first_ns, r.last_ns) = (now, now);
    (r.packets, r.bytes, r.octets, r.tcp_flags, r.discarded) = (0, 0, 0, 0, 0);
    if let Some(x) = d.delivery.as_mut() {
        (x.delivered, x.gap, x.duplicate, x.dropped, x.refused) = (0, 0, 0, 0, 0);
    }
    if let Some(k) = env.kernel.as_deref_mut() {
        // A full map leaves it to the user-space cutoff until its next record.
        // The record starts again from no packets, but the direction has
        // shown it lasts: no wait for `kernel_install_after` of them.
        d.bits.set(Bits::KERNEL_REFUSED, false);
        kernel::install(d, None, &key, 0, k, &mut env.stats.kernel);
    }
}

/// The mode, cutoff and priority of a stream whose first packet is `p`: the
/// first class that matches, else the engine's.
fn classify(cfg: &StreamConfig, classes: &[(Filter, Class)], p: &Packet<'_>) -> (Mode, Option<u64>, u8) {
    let class = classes.iter().find(|(f, _)| f.matches(p.data(), p.wire_len())).map(|(_, c)| c);
    let mode = class.and_then(|c| c.mode).unwrap_or(cfg.mode);
    let cutoff = class.and_then(|c| c.cutoff).unwrap_or(cfg.cutoff);
    let priority = class.and_then(|c| c.priority).unwrap_or(0);
    (mode, cutoff, priority)
}

#[cfg(test)]
pub(super) mod tests;
