//! The stream layer of one worker: its table, arena and fragment reassembly,
//! turning the packets of its queue into stream events for the application's
//! [`StreamHandler`].
//!
//! [`Streams`] is a [`Handler`]: the engine runs it on the worker of its
//! queue like any packet handler (after locality and the filter), so it needs
//! no lock, and calls [`Handler::finish`] at the end of input to close what
//! is still open.

use super::api::Requests;
use super::arena::Arena;
use super::config::{Class, Mode, StreamConfig};
use super::decode::{self, Frame, Transport};
use super::fragment::{Defrag, Outcome, Whole};
use super::reassembly::{self, Cutoff, EndReason, Flags, Reassembler, Segment, Sink};
use super::{Board, CloseReason, Direction, Piece, Stream, StreamCtl, StreamHandler, StreamStats, StreamsNow};
use crate::filter::Filter;
use crate::flowtable::{End, Flow, FlowTable, TableLimits};
use crate::memory::Plan;
use crate::pool::prefetch;
use crate::rss::Rss;
use crate::source::live::cutoff::KernelCutoff;
use crate::wire::{field, FlowTuple};
use crate::{FlowBucket, Handler, Handover, LinkType, Packet, QueueId, SettingError};
use std::net::IpAddr;
use std::sync::Arc;

mod flush;
mod kernel;

/// Memory the table of `connections` takes with both streams of each,
/// without the application's state.
fn table_bytes(connections: usize) -> u64 {
    let streams = (connections as u64 + SPARE as u64).saturating_mul(2 * std::mem::size_of::<Dir<()>>() as u64);
    FlowTable::<FlowTuple, Conn<()>>::memory_for(connections).saturating_add(streams)
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
        plan.add(format!("stream tables ({} connections)", conns * queues.max(1)), table_bytes(conns) * queues.max(1) as u64);
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
    /// Boxed, so the table's slots stay small (the recency list and the
    /// moves of a slot that leaves touch little memory) and a direction
    /// is never moved once made.
    pub(super) dirs: [Option<Box<Dir<S>>>; 2],
    /// The steering's hash of the packet that made it ([`Rss`]'s flow hash):
    /// what rebalancing moves it by (`handover.rs`).
    pub(super) steer: u32,
    /// Both streams closed and were let go of ([`retire`]): the connection
    /// is kept only so that its late packets are not taken for a new one.
    retired: bool,
}

/// One direction: its record, reassembly and the piece being filled.
pub(super) struct Dir<S> {
    pub(super) rec: Stream,
    /// `None` in packets mode and for datagram streams. Boxed: the
    /// reassembler is taken out for each segment (its sink borrows the rest
    /// of the direction), and a pointer moves where its 150 bytes would.
    reasm: Option<Box<Reassembler>>,
    /// The piece being filled, from stream offset `piece_at`; its first
    /// `carried` bytes repeat the end of the previous piece.
    pub(super) piece: Vec<u8>,
    piece_at: u64,
    carried: usize,
    /// Packet time of the oldest byte waiting in `piece` past the carried ones.
    piece_since_ns: u64,
    /// Held bytes last counted into the arena.
    pub(super) held: u64,
    /// What callbacks asked for while the reassembler was busy.
    pending: Requests,
    /// The application's state; `None` once the direction is closed.
    state: Option<S>,
    packets: bool,
    /// Whether the flush queue has an entry for it.
    flush_queued: bool,
    /// The SYN's sequence number, when one was seen.
    isn: Option<u32>,
    /// The window scale option of that SYN: the shift count of the windows
    /// this direction's sender advertises, if the other SYN has one too.
    window_scale: Option<u8>,
    /// Installed in the kernel cutoff's flow map (`kernel.rs`).
    in_kernel: bool,
    /// Its install was refused (map full): not tried again for this record,
    /// so a full map costs one bpf(2) call per stream, not one per packet.
    kernel_refused: bool,
}

impl<S> Dir<S> {
    /// A direction with no application state yet, its piece empty from `ts`.
    fn new(rec: Stream, reasm: Option<Box<Reassembler>>, ts: u64) -> Dir<S> {
        Dir {
            rec,
            reasm,
            piece: Vec::new(),
            piece_at: 0,
            carried: 0,
            piece_since_ns: ts,
            held: 0,
            pending: Requests::default(),
            state: None,
            packets: false,
            flush_queued: false,
            isn: None,
            window_scale: None,
            in_kernel: false,
            kernel_refused: false,
        }
    }

    /// A box's contents while it waits in [`Spare`]: as a closed direction.
    fn closed(rec: Stream) -> Dir<S> {
        Dir::new(rec, None, 0)
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

/// Bytes a piece's buffer grows by at least, up to the piece size.
const PIECE_STEP: usize = 2048;

/// Directions (and reassemblers) kept for reuse by [`Spare`], at most.
const SPARE: usize = 1024;

/// The boxes of closed directions and their reassemblers, kept for the
/// streams that come next: at 10^5 short streams, a malloc and a free for
/// each direction were a tenth of the layer's instructions (cachegrind).
pub(super) struct Spare<S> {
    pub(super) dirs: Vec<Box<Dir<S>>>,
    /// Directions kept at most: [`SPARE`], or the preallocated number if larger.
    room: usize,
    #[expect(clippy::vec_box, reason = "the boxes are what is kept: a direction holds its reassembler boxed")]
    reasms: Vec<Box<Reassembler>>,
}

impl<S> Spare<S> {
    /// Boxes for `n` directions, made and written now (the memory faulted in
    /// before the first packet, as libnids links its whole stream pool at
    /// start): a direction's first touch of fresh memory was a third of a
    /// live worker's time at 10^5 new connections (clear_page).
    fn preallocated(n: usize) -> Spare<S> {
        let blank = new_record(&FlowTuple::V4 { src: [0; 4], dst: [0; 4], proto: 0, ports: None }, QueueId(0), 0, Direction::Initiator);
        let dirs = (0..n).map(|_| Box::new(Dir::closed(blank))).collect();
        Spare { dirs, room: n.max(SPARE), reasms: Vec::new() }
    }

    fn dir(&mut self, dir: Dir<S>) -> Box<Dir<S>> {
        match self.dirs.pop() {
            Some(mut b) => {
                *b = dir;
                b
            }
            None => Box::new(dir),
        }
    }

    fn reassembler(&mut self, config: reassembly::Config) -> Box<Reassembler> {
        match self.reasms.pop() {
            Some(mut b) => {
                *b = Reassembler::new(config);
                b
            }
            None => Box::new(Reassembler::new(config)),
        }
    }

    /// Keeps a closed direction's boxes, unless enough are kept already.
    fn keep(&mut self, mut d: Box<Dir<S>>) {
        debug_assert!(d.state.is_none() && d.piece.capacity() == 0, "only closed directions are kept");
        if let Some(r) = d.reasm.take().filter(|_| self.reasms.len() < SPARE) {
            self.reasms.push(r);
        }
        if self.dirs.len() < self.room {
            self.dirs.push(d);
        }
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
    closing: Vec<(Conn<H::State>, CloseReason)>,
    /// Directions with a partial piece, for the flush timeout.
    waiting: flush::Waiting,
    /// Packet time when the worker is idle.
    idle: flush::IdleClock,
    /// Boxes of closed directions, for the next streams.
    pub(super) spare: Spare<H::State>,
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

/// What the per-direction work needs besides the direction itself.
struct Env<'a, H: StreamHandler> {
    handler: &'a mut H,
    spare: &'a mut Spare<H::State>,
    arena: &'a mut Arena,
    stats: &'a mut StreamStats,
    kernel: Option<&'a mut KernelCutoff>,
    piece: usize,
    overlap: usize,
    now: u64,
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
            spare: Spare::preallocated(cfg.prealloc_connections.div_ceil(queues.max(1)).min(conns) * 2),
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
        self.take_frame(p, self.decode(p.data()), None);
    }

    /// Handles `p`, decoded as `frame`; `keyed` is its connection's key, side
    /// and hash when [`warm`](Self::warm) computed them.
    fn take_frame(&mut self, p: &Packet<'_>, frame: Frame<'_>, keyed: Option<Keyed>) {
        self.stats.packets += 1;
        self.idle.packet(p.ts_ns());
        match frame {
            Frame::NotIp => self.stats.not_ip += 1,
            Frame::Malformed => self.stats.malformed += 1,
            Frame::Datagram(d) => self.datagram(&d, p, keyed, None),
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
        let mut env = Env { handler, spare, arena, stats, kernel: kernel.as_mut(), piece: cfg.piece, overlap: cfg.piece_overlap, now: ts };
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
                        .is_some_and(|dir| dir.isn.is_some_and(|isn| isn != seq) || dir.state.is_none() || dir.rec.closed.is_some())
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
                let rec = Stream { cutoff, priority, mode, first_ns, ..new_record(&d.tuple, *queue, ts, direction) };
                // A stream whose cutoff is 0 from the start (flow statistics)
                // keeps no reassembly state at all: its bytes are counted as
                // discarded and its FIN or RST closes it, as in packets mode.
                let reasm = (mode != Mode::Packets && tcp.is_some() && cutoff != Some(0)).then(|| {
                    env.spare.reassembler(reassembly::Config {
                        mode: if mode == Mode::TcpStrict { reassembly::Mode::TcpStrict } else { reassembly::Mode::TcpFast },
                        overlap: cfg.overlap,
                        hold_limit: cfg.hold_limit,
                        cutoff: cutoff.map_or(Cutoff::NONE, Cutoff::after),
                        midstream: cfg.midstream,
                        receive_window: cfg.receive_window,
                    })
                });
                let mut dir = Dir::new(rec, reasm, ts);
                env.stats.streams += 1;
                env.stats.connections += u64::from(fresh);
                let opposite = conn.dirs[1 - side].as_ref().map(|o| &o.rec);
                let mut ctl = StreamCtl::new(&dir.rec, opposite);
                dir.state = Some(env.handler.created(&mut ctl));
                let req = ctl.requests();
                apply(&mut dir, opposite, req, &mut env);
                conn.dirs[side] = Some(env.spare.dir(dir));
            }
            let [d0, d1] = &mut conn.dirs;
            let (this, other) = if side == 0 { (d0, d1) } else { (d1, d0) };
            let this = this.as_mut().expect("made above");
            if let (Some((_, flags)), Some((ack, win, _)), Some(o)) = (tcp, window, other.as_mut()) {
                advertise(this, o, flags, ack, win);
            }
            let opposite = other.as_ref().map(|o| &o.rec);
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
            let (dropped_before, discarded_before) = (this.rec.dropped, this.rec.discarded);
            // Bytes counted as discarded only because packets mode keeps no payload.
            let mut unkept = 0;
            if this.state.is_none() {
                // Closed: a late copy, or data after a RST, is not stream data.
                this.rec.refused += payload.len() as u64;
            } else {
                if this.packets && this.rec.cutoff.is_none_or(|c| offered(this) < c) {
                    let mut ctl = StreamCtl::new(&this.rec, opposite);
                    env.handler.packet(&mut ctl, this.state.as_mut().expect("open"), p);
                    let req = ctl.requests();
                    apply(this, opposite, req, &mut env);
                }
                // A SYN's sequence number and window scale, noted once, before
                // the segment is handled, in every mode.
                if let Some((seq, _)) = tcp.filter(|&(_, f)| f & field::tcp::SYN != 0 && this.isn.is_none()) {
                    this.isn = Some(seq);
                    this.window_scale = window.and_then(|(_, _, scale)| scale);
                }
                match tcp {
                    Some((seq, flags)) if this.reasm.is_some() => {
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
                    if this.piece.len() > this.carried && ts.saturating_sub(this.piece_since_ns) >= flush {
                        emit(this, opposite, &mut env);
                    }
                }
                apply_pending(this, opposite, &mut env);
                if let Some(k) = env.kernel.as_deref_mut() {
                    if kernel::install(this, other.as_deref(), cfg.kernel_install_after, k, &mut env.stats.kernel) {
                        room = Some((key, side));
                    }
                }
            }
            let dropped = this.rec.dropped - dropped_before;
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
                    end_dir(this, opposite, reason, &mut env);
                }
                if rst {
                    // A RST ends both directions.
                    end_dir(this, opposite, CloseReason::Rst, &mut env);
                    if let Some(o) = other.as_mut() {
                        end_dir(o, Some(&this.rec), CloseReason::Rst, &mut env);
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
        for (conn, reason) in closing.drain(..) {
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
                d.flush_queued = false;
                flush::queue(&mut self.waiting, d, key, side);
            }
        }
    }

    /// Decodes a run of packets into `frames` (with each connection's key)
    /// and asks the processor for what handling them will read, in rounds
    /// over the run: the packets' headers; each packet's index bucket; the
    /// slot it names; the packet's direction and its flow's neighbours in the
    /// table's recency order. At 10^5 streams and more each is a cache miss,
    /// and one packet's depend on each other; across the run they overlap.
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
            // Both directions: a TCP segment's ACK reads the opposite one (its
            // window, `advertise`), and that first read was the layer's
            // hottest miss (a third of `datagram`'s samples at --cutoff 0).
            for d in conn.dirs.iter().flatten() {
                prefetch::value(&**d);
            }
            for at in links.into_iter().flatten() {
                prefetch::hint(at);
            }
        }
    }

    /// Closes every stream still open, for `reason`.
    fn close_all(&mut self, reason: CloseReason) {
        let mut conns = Vec::new();
        self.table.drain(|flow| conns.push((flow.value, reason)));
        self.close(conns, 0);
    }

    /// Closes connections that left the table, each for its reason, at
    /// packet time `now` (0 when no packet time applies).
    pub(super) fn close(&mut self, conns: impl IntoIterator<Item = (Conn<H::State>, CloseReason)>, now: u64) {
        let mut env = Env {
            handler: &mut self.handler,
            spare: &mut self.spare,
            arena: &mut self.arena,
            stats: &mut self.stats,
            kernel: self.kernel.as_mut(),
            piece: self.cfg.piece,
            overlap: self.cfg.piece_overlap,
            now,
        };
        for (conn, reason) in conns {
            close_conn(conn, reason, &mut env);
        }
    }
}

impl<H: StreamHandler> Handler for Streams<H> {
    fn packet(&mut self, packet: &Packet<'_>) {
        self.take_packet(packet);
        self.handler.run_done();
        self.answer_board();
    }

    fn packets(&mut self, packets: &[Packet<'_>]) {
        let mut frames = [const { None }; crate::PACKETS_PER_RUN];
        self.warm(packets, &mut frames);
        for (p, f) in packets.iter().zip(frames) {
            let (frame, keyed) = f.expect("warm decodes every packet of the run");
            self.take_frame(p, frame, keyed);
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

/// Closes whatever is open of a connection that leaves the table, and counts
/// its streams.
fn close_conn<H: StreamHandler>(conn: Conn<H::State>, reason: CloseReason, env: &mut Env<'_, H>) {
    let [mut a, mut b] = conn.dirs;
    if let Some(d) = a.as_mut() {
        end_dir(d, b.as_ref().map(|o| &o.rec), reason, env);
    }
    if let Some(d) = b.as_mut() {
        end_dir(d, a.as_ref().map(|o| &o.rec), reason, env);
    }
    for d in [a, b].into_iter().flatten() {
        env.stats.record_closed(&d.rec);
        env.spare.keep(d);
    }
}

/// Lets go of both streams of a connection once both closed: their records
/// are counted and their boxes kept for the next streams. Closed
/// connections wait out the idle timeout in the table, and with short
/// connections they are most of it: their streams were most of the table's
/// memory (two directions of 248 bytes to a slot of 88). On 200,000
/// connections, 100 open at a time, letting go of them took `--cutoff 0`
/// from 1.20 s and 192 MB to 0.63 s and 66 MB.
fn retire<H: StreamHandler>(conn: &mut Conn<H::State>, env: &mut Env<'_, H>) {
    for d in conn.dirs.iter_mut().filter_map(Option::take) {
        debug_assert!(d.state.is_none(), "only closed streams are retired");
        env.stats.record_closed(&d.rec);
        env.spare.keep(d);
    }
    conn.retired = true;
}

/// Ends one direction for `reason` (unless it ended already): what is held
/// or waiting in the piece is delivered, holes become gaps, and the
/// application gets its state back with `closed`.
fn end_dir<H: StreamHandler>(d: &mut Dir<H::State>, opposite: Option<&Stream>, reason: CloseReason, env: &mut Env<'_, H>) {
    if d.state.is_none() {
        return;
    }
    if d.rec.closed.is_none() {
        d.rec.closed = Some(reason);
    }
    if let Some(mut r) = d.reasm.take() {
        let why = match reason {
            CloseReason::Rst => EndReason::Rst,
            CloseReason::Idle => EndReason::Timeout,
            CloseReason::Evicted | CloseReason::Reused => EndReason::Evicted,
            CloseReason::Fin | CloseReason::EndOfInput => EndReason::EndOfInput,
        };
        r.close(why, &mut PieceSink { d, opposite, env });
        sync(d, &r, env.arena);
        d.reasm = Some(r);
    }
    if d.piece.len() > d.carried {
        emit(d, opposite, env);
    }
    env.arena.release(d.piece.capacity() as u64);
    d.piece = Vec::new();
    d.carried = 0;
    let late = env.kernel.as_deref_mut().and_then(|k| kernel::take(d, k, &mut env.stats.kernel, Some(reason)));
    let state = d.state.take().expect("open");
    env.handler.closed(&d.rec, state);
    if let Some(c) = late {
        kernel::after_close(&mut d.rec, &c);
    }
}

/// Hands out a flows-mode record whose active timeout passed at packet time
/// `now` and starts it again from there (the stream, its state and its
/// close reason, if a FIN was seen, go on).
fn active_record<H: StreamHandler>(d: &mut Dir<H::State>, now: u64, env: &mut Env<'_, H>) {
    if d.state.is_none() {
        return;
    }
    if let Some(k) = env.kernel.as_deref_mut() {
        kernel::take(d, k, &mut env.stats.kernel, None);
    }
    let Some(state) = d.state.as_mut() else { return };
    env.handler.active(&d.rec, state);
    env.stats.record_bytes(&d.rec);
    env.stats.active_records += 1;
    let r = &mut d.rec;
    (r.first_ns, r.last_ns) = (now, now);
    (r.packets, r.bytes, r.octets, r.tcp_flags) = (0, 0, 0, 0);
    (r.delivered, r.gap, r.duplicate, r.discarded, r.dropped, r.refused) = (0, 0, 0, 0, 0, 0);
    if let Some(k) = env.kernel.as_deref_mut() {
        // A full map leaves it to the user-space cutoff until its next record.
        // The record starts again from no packets, but the direction has
        // shown it lasts: no wait for `kernel_install_after` of them.
        d.kernel_refused = false;
        kernel::install(d, None, 0, k, &mut env.stats.kernel);
    }
}

/// The largest window shift count (RFC 7323 2.3: a larger one is taken as 14).
const MAX_WINDOW_SHIFT: u8 = 14;

/// Hands the window that `receiver`'s segment advertises (its ACK number and
/// window field) to the reassembler of the data it receives, `data`'s, when
/// that one checks the window. The window is scaled as RFC 7323 says: never
/// on a SYN, by the receiver's shift count when both SYNs carried the
/// option, not at all when either lacked it. When a SYN was not seen the
/// shift is not known, and the check is made permissive rather than wrong:
/// the largest shift, 14, so only bytes no receiver could have taken are
/// refused.
fn advertise<S>(receiver: &Dir<S>, data: &mut Dir<S>, flags: u8, ack: u32, window: u16) {
    let Some(r) = data.reasm.as_mut().filter(|r| r.checks_window()) else { return };
    if flags & field::tcp::ACK == 0 || flags & field::tcp::RST != 0 {
        // No window without ACK; a RST's ends the stream anyway.
        return;
    }
    let shift = if flags & field::tcp::SYN != 0 {
        0
    } else if receiver.isn.is_none() || data.isn.is_none() {
        MAX_WINDOW_SHIFT
    } else {
        match (receiver.window_scale, data.window_scale) {
            (Some(shift), Some(_)) => shift.min(MAX_WINDOW_SHIFT),
            _ => 0,
        }
    };
    r.advertise(ack, u64::from(window) << shift);
}

/// One TCP segment of a direction that is reassembled.
fn tcp_segment<H: StreamHandler>(
    d: &mut Dir<H::State>,
    opposite: Option<&Stream>,
    seq: u32,
    f: Flags,
    payload: &[u8],
    env: &mut Env<'_, H>,
) {
    let mut r = d.reasm.take().expect("reassembled");
    let len = payload.len() as u64;
    let admitted = len == 0 || !r.would_hold(seq, f.syn) || env.arena.admit(d.rec.priority, r.next_offset(), len);
    if admitted {
        r.segment(Segment { seq, payload, flags: f }, &mut PieceSink { d, opposite, env });
    } else {
        // No memory to hold it: its bytes are dropped (counted), its flags
        // still count, and the holes before it are given up so the stream
        // goes on instead of waiting for bytes it could not keep anyway.
        d.rec.dropped += len;
        let seq = if f.syn { seq } else { seq.wrapping_add(len as u32) };
        let mut sink = PieceSink { d, opposite, env };
        r.segment(Segment { seq, payload: &[], flags: f }, &mut sink);
        r.flush_gap(&mut sink);
    }
    sync(d, &r, env.arena);
    d.reasm = Some(r);
    if env.arena.pressed() && d.piece.len() > d.carried {
        emit(d, opposite, env);
    }
}

/// Copies the reassembler's counts into the record and its held bytes into
/// the arena.
fn sync<S>(d: &mut Dir<S>, r: &Reassembler, arena: &mut Arena) {
    let c = r.counters();
    if c.held > d.held {
        arena.take(c.held - d.held);
    } else {
        arena.release(d.held - c.held);
    }
    d.held = c.held;
    d.rec.delivered = c.delivered;
    d.rec.gap = c.gap;
    d.rec.duplicate = c.duplicate;
    d.rec.discarded = c.discarded_cutoff;
    d.rec.refused = c.refused;
}

/// A datagram's payload, appended to its stream up to the cutoff.
fn datagram_payload<H: StreamHandler>(d: &mut Dir<H::State>, opposite: Option<&Stream>, payload: &[u8], env: &mut Env<'_, H>) {
    let at = d.rec.bytes - payload.len() as u64;
    let keep = count_unbuffered(d, payload.len() as u64);
    if keep > 0 {
        d.rec.delivered += keep;
        PieceSink { d, opposite, env }.data(at, &payload[..keep as usize]);
    }
    if env.arena.pressed() && d.piece.len() > d.carried {
        emit(d, opposite, env);
    }
}

/// The last `len` bytes the record counted, without reassembly: those past
/// the cutoff are counted as discarded; returns how many are within it.
fn count_unbuffered<S>(d: &mut Dir<S>, len: u64) -> u64 {
    let at = d.rec.bytes - len;
    let keep = d.rec.cutoff.map_or(len, |c| c.saturating_sub(at).min(len));
    d.rec.discarded += len - keep;
    keep
}

/// The last `len` bytes of a stream without a reassembler (packets mode, or
/// a TCP cutoff of 0): none becomes data, so all are counted as discarded.
/// Returns those within the cutoff, which only packets mode has.
fn not_reassembled<S>(d: &mut Dir<S>, len: u64) -> u64 {
    let keep = count_unbuffered(d, len);
    d.rec.discarded += keep;
    keep
}

/// The offset the stream's next byte would have: what its cutoff counts.
fn offered<S>(d: &Dir<S>) -> u64 {
    d.reasm.as_ref().map_or(d.rec.bytes, |r| r.next_offset())
}

/// Delivers the bytes waiting in the piece (a full piece, or a partial one
/// flushed early), keeping the overlap for the next.
fn emit<H: StreamHandler>(d: &mut Dir<H::State>, opposite: Option<&Stream>, env: &mut Env<'_, H>) {
    let Some(state) = d.state.as_mut() else { return };
    let mut ctl = StreamCtl::new(&d.rec, opposite);
    env.handler.data(&mut ctl, state, &Piece { offset: d.piece_at, data: &d.piece, overlap: d.carried });
    env.stats.pieces += 1;
    let req = ctl.requests();
    let cap = d.piece.capacity();
    let keep = env.overlap.min(d.piece.len());
    let cut = d.piece.len() - keep;
    d.piece.drain(..cut);
    d.piece_at += cut as u64;
    d.carried = keep;
    if env.arena.pressed() {
        d.piece.shrink_to_fit();
    }
    env.arena.release((cap - d.piece.capacity()) as u64);
    d.pending.merge(req);
}

/// Applies what callbacks asked for while the direction was being worked on.
fn apply_pending<H: StreamHandler>(d: &mut Dir<H::State>, opposite: Option<&Stream>, env: &mut Env<'_, H>) {
    let req = std::mem::take(&mut d.pending);
    if req != Requests::default() {
        apply(d, opposite, req, env);
    }
}

/// Applies what a callback asked for.
fn apply<H: StreamHandler>(d: &mut Dir<H::State>, opposite: Option<&Stream>, req: Requests, env: &mut Env<'_, H>) {
    if let Some(p) = req.priority {
        d.rec.priority = p;
    }
    if let Some(p) = req.packets {
        d.packets = p;
    }
    // A TCP stream made with cutoff 0 has no reassembler to deliver with
    // (see where streams are made): its cutoff stays 0.
    let stateless = d.reasm.is_none() && d.rec.proto == 6 && d.rec.mode != Mode::Packets;
    if let Some(cutoff) = req.cutoff.filter(|_| !stateless) {
        let cutoff = cutoff.map(|c| c.max(offered(d)));
        d.rec.cutoff = cutoff;
        if let Some(mut r) = d.reasm.take() {
            r.set_cutoff(cutoff.map_or(Cutoff::NONE, Cutoff::after), &mut PieceSink { d, opposite, env });
            sync(d, &r, env.arena);
            d.reasm = Some(r);
        }
    }
}

/// Where a reassembler's output goes: into the direction's piece, and from
/// there to the application.
struct PieceSink<'d, 'e, 'h, H: StreamHandler> {
    d: &'d mut Dir<H::State>,
    opposite: Option<&'d Stream>,
    env: &'e mut Env<'h, H>,
}

impl<H: StreamHandler> Sink for PieceSink<'_, '_, '_, H> {
    fn data(&mut self, offset: u64, mut bytes: &[u8]) {
        let d = &mut *self.d;
        let size = self.env.piece;
        if d.piece.len() == d.carried {
            d.piece_at = offset - d.carried as u64;
            d.piece_since_ns = self.env.now;
        }
        // Whole pieces straight from the packet when nothing waits: no copy.
        if d.piece.is_empty() {
            while bytes.len() >= size && self.env.overlap == 0 {
                let Some(state) = d.state.as_mut() else { break };
                let mut ctl = StreamCtl::new(&d.rec, self.opposite);
                self.env.handler.data(&mut ctl, state, &Piece { offset: d.piece_at, data: &bytes[..size], overlap: 0 });
                self.env.stats.pieces += 1;
                let req = ctl.requests();
                d.piece_at += size as u64;
                bytes = &bytes[size..];
                d.pending.merge(req);
            }
        }
        while !bytes.is_empty() {
            let room = size - d.piece.len();
            let n = room.min(bytes.len());
            let cap = d.piece.capacity();
            let want = d.piece.len() + n;
            if want > cap {
                // Grown in steps of at least PIECE_STEP, doubling, never past
                // the piece size: Vec's own doubling from a few bytes made a
                // stream's first piece cost a dozen reallocations and copies.
                let to = want.max(cap * 2).max(PIECE_STEP).min(size);
                d.piece.reserve_exact(to - d.piece.len());
            }
            d.piece.extend_from_slice(&bytes[..n]);
            self.env.arena.take((d.piece.capacity() - cap) as u64);
            bytes = &bytes[n..];
            if d.piece.len() == size {
                emit(d, self.opposite, self.env);
            }
        }
    }

    fn gap(&mut self, offset: u64, len: u64) {
        let d = &mut *self.d;
        if d.piece.len() > d.carried {
            emit(d, self.opposite, self.env);
        }
        // The overlap is not carried across a gap: the bytes are not adjacent.
        d.piece.clear();
        d.carried = 0;
        if let Some(state) = d.state.as_mut() {
            let mut ctl = StreamCtl::new(&d.rec, self.opposite);
            self.env.handler.gap(&mut ctl, state, offset, len);
            d.pending.merge(ctl.requests());
        }
    }

    fn end(&mut self, reason: EndReason) {
        if self.d.rec.closed.is_none() {
            self.d.rec.closed = Some(match reason {
                EndReason::Fin => CloseReason::Fin,
                EndReason::Rst => CloseReason::Rst,
                EndReason::Timeout => CloseReason::Idle,
                EndReason::Evicted => CloseReason::Evicted,
                EndReason::EndOfInput => CloseReason::EndOfInput,
            });
        }
    }
}

fn new_record(t: &FlowTuple, queue: QueueId, ts: u64, direction: Direction) -> Stream {
    let (src, dst, proto) = match *t {
        FlowTuple::V4 { src, dst, proto, .. } => (IpAddr::from(src), IpAddr::from(dst), proto),
        FlowTuple::V6 { src, dst, proto, .. } => (IpAddr::from(src), IpAddr::from(dst), proto),
    };
    let (sport, dport) = t.ports().map_or((0, 0), |p| (p.src, p.dst));
    Stream {
        src,
        dst,
        sport,
        dport,
        proto,
        direction,
        queue,
        first_ns: ts,
        last_ns: ts,
        packets: 0,
        bytes: 0,
        octets: 0,
        tcp_flags: 0,
        delivered: 0,
        gap: 0,
        duplicate: 0,
        discarded: 0,
        dropped: 0,
        refused: 0,
        cutoff: None,
        priority: 0,
        mode: Mode::TcpFast,
        closed: None,
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
