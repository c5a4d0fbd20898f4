//! What the application sees of the stream layer: the [`StreamHandler`] it
//! writes, the [`Stream`] record, the [`Piece`]s of data, the [`StreamCtl`]
//! it steers a stream with from a callback, and the [`StreamStats`].

use super::config::Mode;
use super::fragment::FragCounters;
use crate::{Packet, QueueId};
use std::net::IpAddr;

/// Which side of its connection a stream is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Sent by the side that opened the connection (the SYN's sender, or the
    /// sender of the first packet seen).
    Initiator,
    /// Sent by the other side.
    Responder,
}

/// Why a stream was closed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// Its FIN was reached: every byte up to it was delivered or reported as
    /// a gap (or it lies past the cutoff).
    Fin,
    /// A RST ended its connection.
    Rst,
    /// No packet came for the idle timeout (packet time).
    Idle,
    /// The table was full and it was the connection seen least recently.
    Evicted,
    /// The input ended (or the run was stopped) with the stream open.
    EndOfInput,
    /// A new SYN opened another connection on the same addresses and ports.
    Reused,
}

impl CloseReason {
    /// Its name in records: `fin`, `rst`, `idle`, `evicted`, `end-of-input`, `reused`.
    pub fn name(self) -> &'static str {
        match self {
            CloseReason::Fin => "fin",
            CloseReason::Rst => "rst",
            CloseReason::Idle => "idle",
            CloseReason::Evicted => "evicted",
            CloseReason::EndOfInput => "end-of-input",
            CloseReason::Reused => "reused",
        }
    }
}

/// The record of one stream (one direction of a connection), as Scap's
/// `stream_t`. Byte counts are TCP or datagram payload bytes, except
/// `octets`, which counts whole IP packets as flow collectors do.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stream {
    /// Sender's address.
    pub src: IpAddr,
    /// Receiver's address.
    pub dst: IpAddr,
    /// Sender's port (0 for protocols without ports).
    pub sport: u16,
    /// Receiver's port.
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
    /// Which side sent it.
    pub direction: Direction,
    /// The queue whose worker runs it.
    pub queue: QueueId,
    /// Packet time of its first packet (ns since the epoch).
    pub first_ns: u64,
    /// Packet time of its latest packet.
    pub last_ns: u64,
    /// Packets seen (in flows mode, each fragment of a rebuilt datagram).
    pub packets: u64,
    /// Payload bytes captured.
    pub bytes: u64,
    /// IP bytes of its packets as sent, IP headers included (IPv4's total
    /// length, IPv6's header and payload length): NetFlow's and IPFIX's
    /// octets. A datagram rebuilt from fragments counts once, whole, except
    /// in flows mode, where its fragments count as sent, in `packets` too.
    pub octets: u64,
    /// The TCP flags of its packets OR'ed together (0 for other protocols).
    pub tcp_flags: u8,
    /// Bytes handed to the application as data.
    pub delivered: u64,
    /// Offsets never seen, reported as gaps.
    pub gap: u64,
    /// Bytes seen again (retransmitted or overlapping; first copy wins).
    pub duplicate: u64,
    /// Bytes past the cutoff, and every byte of a stream in packets mode
    /// (which rebuilds no payload): counted, never copied.
    pub discarded: u64,
    /// Bytes dropped because the arena was short of memory.
    pub dropped: u64,
    /// Bytes that were not stream data (before the handshake in strict mode,
    /// past the FIN, with or after a RST).
    pub refused: u64,
    /// Its cutoff now (`None`: the whole stream).
    pub cutoff: Option<u64>,
    /// Its priority under memory pressure (0 lowest).
    pub priority: u8,
    /// Its reassembly mode.
    pub mode: Mode,
    /// Why it was closed, once it is.
    pub closed: Option<CloseReason>,
}

/// A run of a stream's data handed to the application.
#[derive(Copy, Clone, Debug)]
pub struct Piece<'a> {
    /// Stream offset of `data[0]` (0 is the first byte after the SYN).
    pub offset: u64,
    /// The bytes; the first `overlap` repeat the end of the previous piece.
    pub data: &'a [u8],
    /// Bytes at the start carried over from the previous piece.
    pub overlap: usize,
}

/// Changes an application asks for from a callback, applied when it returns.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Requests {
    pub(crate) cutoff: Option<Option<u64>>,
    pub(crate) priority: Option<u8>,
    pub(crate) packets: Option<bool>,
}

impl Requests {
    /// Adds later requests: each one asked for again replaces the earlier.
    pub(crate) fn merge(&mut self, later: Requests) {
        self.cutoff = later.cutoff.or(self.cutoff);
        self.priority = later.priority.or(self.priority);
        self.packets = later.packets.or(self.packets);
    }
}

/// A stream as a callback sees it, with what the callback may change.
pub struct StreamCtl<'a> {
    stream: &'a Stream,
    opposite: Option<&'a Stream>,
    req: Requests,
}

impl<'a> StreamCtl<'a> {
    pub(crate) fn new(stream: &'a Stream, opposite: Option<&'a Stream>) -> StreamCtl<'a> {
        StreamCtl { stream, opposite, req: Requests::default() }
    }

    pub(crate) fn requests(&self) -> Requests {
        self.req
    }

    /// The stream's record.
    pub fn stream(&self) -> &Stream {
        self.stream
    }

    /// The other direction of its connection, once a packet of it was seen.
    pub fn opposite(&self) -> Option<&Stream> {
        self.opposite
    }

    /// Sets the stream's cutoff (`None`: no cutoff). Offsets already
    /// delivered stay delivered; a lower cutoff takes effect from the next
    /// packet. A TCP stream whose cutoff was 0 when it was created keeps
    /// no reassembly state (statistics only), so raising it changes nothing.
    pub fn set_cutoff(&mut self, cutoff: Option<u64>) {
        self.req.cutoff = Some(cutoff);
    }

    /// Discards the rest of the stream: counted, no more data.
    pub fn discard(&mut self) {
        self.req.cutoff = Some(Some(0));
    }

    /// Sets its priority under memory pressure (0 to [`PRIORITIES`](super::PRIORITIES) − 1; higher values are taken as the highest).
    pub fn set_priority(&mut self, priority: u8) {
        self.req.priority = Some(priority.min(super::PRIORITIES - 1));
    }

    /// Asks for (or stops) the stream's packets, through [`StreamHandler::packet`].
    pub fn want_packets(&mut self, yes: bool) {
        self.req.packets = Some(yes);
    }
}

/// The application of the stream layer, one per queue, called on that
/// queue's worker. `State` is the application's own per-stream state: made
/// at `created`, handed back at `closed`.
pub trait StreamHandler: Send + 'static {
    /// What the application keeps per stream.
    type State: Send + 'static;

    /// A new stream: its first packet arrived.
    fn created(&mut self, stream: &mut StreamCtl<'_>) -> Self::State;

    /// A piece of the stream's data, in stream order.
    fn data(&mut self, stream: &mut StreamCtl<'_>, state: &mut Self::State, piece: &Piece<'_>);

    /// Offsets `offset..offset + len` were never seen and will not be: the
    /// next piece starts after them.
    fn gap(&mut self, stream: &mut StreamCtl<'_>, state: &mut Self::State, offset: u64, len: u64) {
        let _ = (stream, state, offset, len);
    }

    /// One of the stream's packets, for a stream that asked for them
    /// ([`StreamCtl::want_packets`]), while it is within its cutoff; the
    /// pool's cell, not a copy.
    fn packet(&mut self, stream: &mut StreamCtl<'_>, state: &mut Self::State, packet: &Packet<'_>) {
        let _ = (stream, state, packet);
    }

    /// With [`StreamConfig::flows`](super::StreamConfig::flows) and an
    /// active timeout: the stream has been open that long since its record
    /// (re)started, and a packet came. `stream` is the record up to, not
    /// including, that packet; once this returns the record starts again
    /// from the packet (counts at 0, `first_ns` its time), and the stream
    /// goes on with the same state.
    fn active(&mut self, stream: &Stream, state: &mut Self::State) {
        let _ = (stream, state);
    }

    /// The stream is closed ([`Stream::closed`] says why); its state is
    /// handed back. Nothing follows.
    fn closed(&mut self, stream: &Stream, state: Self::State);

    /// The layer is done with a run of packets, an idle tick or the end of
    /// the capture: where to hand on what was buffered since the last call,
    /// so that nothing waits longer than a run.
    fn run_done(&mut self) {}
}

/// A record's byte counts, as [`StreamStats`] adds them up: what a
/// [`Stream`] says of its bytes, without the rest of the record, which a
/// direction that closes need not build twice (the layer's `Dir::stream`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ByteCounts {
    pub(crate) bytes: u64,
    pub(crate) delivered: u64,
    pub(crate) gap: u64,
    pub(crate) duplicate: u64,
    pub(crate) discarded: u64,
    pub(crate) dropped: u64,
    pub(crate) refused: u64,
}

/// What one queue's stream layer counted. Every packet that reached it is
/// in exactly one of `not_ip`, `malformed`, `fragments`, `untracked`,
/// `to_stream`, `discarded_packets` and `dropped_packets`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Packets that reached the layer.
    pub packets: u64,
    /// Not IPv4 or IPv6.
    pub not_ip: u64,
    /// IP with bad or cut headers.
    pub malformed: u64,
    /// IP fragments that did not themselves complete a datagram (held,
    /// merged into one, or failed: see `fragment`).
    pub fragments: u64,
    /// TCP packets without SYN or payload for no open stream (the tail of a
    /// closed connection).
    pub untracked: u64,
    /// Packets taken by their stream (delivered, held, duplicates, no payload).
    pub to_stream: u64,
    /// Packets whose every payload byte was past the cutoff.
    pub discarded_packets: u64,
    /// Packets with bytes dropped for memory.
    pub dropped_packets: u64,
    /// Streams created (each direction counts).
    pub streams: u64,
    /// Connections created.
    pub connections: u64,
    /// Connections taken in from another queue's layer, with their streams,
    /// when rebalancing moved their bucket here (made, and counted in
    /// `connections`, on the queue they came from).
    pub handed_in: u64,
    /// Streams closed, by reason.
    pub closed_fin: u64,
    /// Closed by a RST.
    pub closed_rst: u64,
    /// Closed idle.
    pub closed_idle: u64,
    /// Closed to make room in the table.
    pub evicted: u64,
    /// Closed at the end of input.
    pub closed_end: u64,
    /// Closed because a new connection reused the ports.
    pub closed_reused: u64,
    /// Records handed out by the active timeout of flows mode (the streams
    /// went on).
    pub active_records: u64,
    /// Payload bytes captured.
    pub bytes: u64,
    /// Bytes delivered as data.
    pub delivered: u64,
    /// Offsets reported as gaps.
    pub gap: u64,
    /// Duplicate bytes.
    pub duplicate: u64,
    /// Bytes past the cutoff, or of streams in packets mode.
    pub discarded: u64,
    /// Bytes dropped for memory.
    pub dropped: u64,
    /// Bytes that were not stream data.
    pub refused: u64,
    /// Pieces delivered.
    pub pieces: u64,
    /// Most arena bytes in use at once.
    pub memory_peak: u64,
    /// IP fragment reassembly.
    pub fragment: FragCounters,
    /// The kernel cutoff (all zero without one).
    pub kernel: KernelStats,
}

/// What the kernel cutoff did for one stream layer: the entries it put in
/// and took out of the kernel's flow map, and what the kernel counted in
/// them (packets that never reached weir's pool).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Stream directions installed (each its own entry).
    pub installed: u64,
    /// Installs refused because the map was full: the stream stayed with
    /// the user-space cutoff, exact as without a kernel cutoff.
    pub full: u64,
    /// Installs refused for another reason (counted, same fallback).
    pub failed: u64,
    /// Entries taken out (read and deleted in one call) when their stream
    /// closed or handed out a record.
    pub taken: u64,
    /// Of those, of connections evicted from weir's full table.
    pub evicted: u64,
    /// Of those, of connections that made room in the full map for a
    /// newer stream (their packets reach weir again; counts exact).
    pub displaced: u64,
    /// Installed entries not found when taken, or not readable: their
    /// counts are not in the records (never expected; a sign that something
    /// else changed the map).
    pub lost: u64,
    /// Connections idle to weir that the kernel had seen within the idle
    /// timeout, so they were kept.
    pub refreshed: u64,
    /// Packets the kernel dropped, as taken from the entries.
    pub packets: u64,
    /// Of those, packets that came after their stream's FIN or RST on the
    /// wire, counted because that segment passed the kernel before weir
    /// installed the entry: added to the record after it was handed out, as
    /// weir counts a closed stream's packets without the cutoff.
    pub after_end: u64,
    /// Their IP bytes.
    pub octets: u64,
}

impl KernelStats {
    fn add(&mut self, o: &KernelStats) {
        self.installed += o.installed;
        self.full += o.full;
        self.failed += o.failed;
        self.taken += o.taken;
        self.evicted += o.evicted;
        self.displaced += o.displaced;
        self.lost += o.lost;
        self.refreshed += o.refreshed;
        self.packets += o.packets;
        self.after_end += o.after_end;
        self.octets += o.octets;
    }

    /// Entries installed and not yet taken (or lost).
    pub fn in_map(&self) -> u64 {
        self.installed.saturating_sub(self.taken + self.lost)
    }
}

impl StreamStats {
    /// Adds another queue's counts (peaks add, as the arenas are separate).
    pub fn add(&mut self, o: &StreamStats) {
        macro_rules! sum { ($($f:ident),*) => { $(self.$f += o.$f;)* } }
        sum!(
            packets,
            not_ip,
            malformed,
            fragments,
            untracked,
            to_stream,
            discarded_packets,
            dropped_packets,
            streams,
            connections,
            handed_in,
            closed_fin,
            closed_rst,
            closed_idle,
            evicted,
            closed_end,
            closed_reused,
            active_records,
            bytes,
            delivered,
            gap,
            duplicate,
            discarded,
            dropped,
            refused,
            pieces,
            memory_peak
        );
        self.fragment.add(&o.fragment);
        self.kernel.add(&o.kernel);
    }

    /// Counts a stream that left the table: its bytes and why it closed.
    pub(crate) fn record_closed(&mut self, c: &ByteCounts, closed: Option<CloseReason>) {
        self.record_bytes(c);
        match closed {
            Some(CloseReason::Fin) => self.closed_fin += 1,
            Some(CloseReason::Rst) => self.closed_rst += 1,
            Some(CloseReason::Idle) => self.closed_idle += 1,
            Some(CloseReason::Evicted) => self.evicted += 1,
            Some(CloseReason::EndOfInput) | None => self.closed_end += 1,
            Some(CloseReason::Reused) => self.closed_reused += 1,
        }
    }

    /// Counts the bytes of a record that is handed out: at its close, or
    /// at an active timeout, after which its counts start again.
    pub(crate) fn record_bytes(&mut self, c: &ByteCounts) {
        self.bytes += c.bytes;
        self.delivered += c.delivered;
        self.gap += c.gap;
        self.duplicate += c.duplicate;
        self.discarded += c.discarded;
        self.dropped += c.dropped;
        self.refused += c.refused;
    }

    /// Whether every packet is in exactly one category.
    pub fn packets_add_up(&self) -> bool {
        self.packets
            == self.not_ip
                + self.malformed
                + self.fragments
                + self.untracked
                + self.to_stream
                + self.discarded_packets
                + self.dropped_packets
    }
}

/// Two applications on one stream layer: each callback goes to the first,
/// then the second, each with its own state. What they ask of a stream
/// through the [`StreamCtl`] is merged, the second's word last (so a
/// consumer that wants a stream's bytes should not share a layer with one
/// that discards them: the sensor gives such consumers layers of their own).
impl<A: StreamHandler, B: StreamHandler> StreamHandler for (A, B) {
    type State = (A::State, B::State);

    fn created(&mut self, stream: &mut StreamCtl<'_>) -> Self::State {
        (self.0.created(stream), self.1.created(stream))
    }

    fn data(&mut self, stream: &mut StreamCtl<'_>, state: &mut Self::State, piece: &Piece<'_>) {
        self.0.data(stream, &mut state.0, piece);
        self.1.data(stream, &mut state.1, piece);
    }

    fn gap(&mut self, stream: &mut StreamCtl<'_>, state: &mut Self::State, offset: u64, len: u64) {
        self.0.gap(stream, &mut state.0, offset, len);
        self.1.gap(stream, &mut state.1, offset, len);
    }

    fn packet(&mut self, stream: &mut StreamCtl<'_>, state: &mut Self::State, packet: &Packet<'_>) {
        self.0.packet(stream, &mut state.0, packet);
        self.1.packet(stream, &mut state.1, packet);
    }

    fn active(&mut self, stream: &Stream, state: &mut Self::State) {
        self.0.active(stream, &mut state.0);
        self.1.active(stream, &mut state.1);
    }

    fn closed(&mut self, stream: &Stream, state: Self::State) {
        self.0.closed(stream, state.0);
        self.1.closed(stream, state.1);
    }
}

/// An application that may be absent: a configuration that leaves a
/// consumer out composes without a type of its own for each combination.
impl<H: StreamHandler> StreamHandler for Option<H> {
    type State = Option<H::State>;

    fn created(&mut self, stream: &mut StreamCtl<'_>) -> Self::State {
        self.as_mut().map(|h| h.created(stream))
    }

    fn data(&mut self, stream: &mut StreamCtl<'_>, state: &mut Self::State, piece: &Piece<'_>) {
        if let (Some(h), Some(s)) = (self.as_mut(), state.as_mut()) {
            h.data(stream, s, piece);
        }
    }

    fn gap(&mut self, stream: &mut StreamCtl<'_>, state: &mut Self::State, offset: u64, len: u64) {
        if let (Some(h), Some(s)) = (self.as_mut(), state.as_mut()) {
            h.gap(stream, s, offset, len);
        }
    }

    fn packet(&mut self, stream: &mut StreamCtl<'_>, state: &mut Self::State, packet: &Packet<'_>) {
        if let (Some(h), Some(s)) = (self.as_mut(), state.as_mut()) {
            h.packet(stream, s, packet);
        }
    }

    fn active(&mut self, stream: &Stream, state: &mut Self::State) {
        if let (Some(h), Some(s)) = (self.as_mut(), state.as_mut()) {
            h.active(stream, s);
        }
    }

    fn closed(&mut self, stream: &Stream, state: Self::State) {
        if let (Some(h), Some(s)) = (self.as_mut(), state) {
            h.closed(stream, s);
        }
    }
}
