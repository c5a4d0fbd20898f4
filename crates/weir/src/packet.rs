//! The packet as the application sees it, and the identifiers that travel with it.
//!
//! A [`Handler`] receives each delivered packet. A [`Packet`] borrows its bytes
//! from a chunk that the worker holds; it is valid
//! only for the duration of the handler call that receives it. Timestamps are
//! nanoseconds since the Unix epoch, exactly as the source gave them.

use std::fmt;

/// One receive queue of a source: `eth1@2` is queue 2 of eth1.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct QueueId(pub u16);

impl fmt::Display for QueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A link-layer header type, numbered as in the tcpdump.org LINKTYPE_ registry.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct LinkType(pub u32);

impl LinkType {
    /// BSD loopback: a 4-byte address family in host byte order.
    pub(crate) const NULL: LinkType = LinkType(0);
    /// Ethernet II / 802.3.
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IPv4 or IPv6, version in the first nibble.
    pub const RAW: LinkType = LinkType(101);
    /// OpenBSD loopback: a 4-byte address family in network byte order.
    pub(crate) const LOOP: LinkType = LinkType(108);
    /// Linux "cooked" capture, version 1.
    pub(crate) const LINUX_SLL: LinkType = LinkType(113);
    /// Raw IPv4.
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6.
    pub const IPV6: LinkType = LinkType(229);
    /// Linux "cooked" capture, version 2.
    pub(crate) const LINUX_SLL2: LinkType = LinkType(276);

    /// The `DLT_` number Linux libpcap uses for this link type, as `pcap_open_dead`
    /// takes it and `pcap_datalink` returns it. The two numberings agree except for
    /// the few types whose `DLT_` value differs between operating systems (libpcap's
    /// `linktype_to_dlt`): ATM_RFC1483, RAW, SLIP_BSDOS, PPP_BSDOS and ATM_CLIP.
    pub fn dlt(self) -> u32 {
        match self.0 {
            100 => 11,
            101 => 12,
            102 => 15,
            103 => 16,
            106 => 19,
            other => other,
        }
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            LinkType::NULL => "NULL",
            LinkType::ETHERNET => "EN10MB",
            LinkType::RAW => "RAW",
            LinkType::LOOP => "LOOP",
            LinkType::LINUX_SLL => "LINUX_SLL",
            LinkType::IPV4 => "IPV4",
            LinkType::IPV6 => "IPV6",
            LinkType::LINUX_SLL2 => "LINUX_SLL2",
            _ => return write!(f, "LINKTYPE {}", self.0),
        };
        f.write_str(name)
    }
}

/// A captured packet, borrowed from the chunk that holds it.
#[derive(Copy, Clone, Debug)]
pub struct Packet<'a> {
    data: &'a [u8],
    wire_len: u32,
    ts_ns: u64,
    queue: QueueId,
    ts_carry: u32,
}

impl<'a> Packet<'a> {
    /// A packet view, for code that makes packets itself (tests, a replay);
    /// `wire_len` is the length on the wire, which may exceed `data.len()`.
    pub fn new(data: &'a [u8], wire_len: u32, ts_ns: u64, queue: QueueId) -> Self {
        Packet { data, wire_len, ts_ns, queue, ts_carry: 0 }
    }

    /// As [`new`](Self::new), for a pcap record whose fraction field was out of
    /// range and carried `ts_carry` seconds into `ts_ns`.
    /// A placeholder, for arrays that runs of packets are gathered in.
    pub(crate) const NONE: Packet<'static> = Packet { data: &[], wire_len: 0, ts_ns: 0, queue: QueueId(0), ts_carry: 0 };

    pub(crate) fn with_carry(data: &'a [u8], wire_len: u32, ts_ns: u64, queue: QueueId, ts_carry: u32) -> Self {
        Packet { data, wire_len, ts_ns, queue, ts_carry }
    }

    /// Seconds an out-of-range fraction of the record's pcap timestamp carried
    /// into [`ts_ns`](Self::ts_ns), as the bits of an i32 (0 for any valid
    /// record). With `ts_ns` read as the i64 it wraps to (libpcap's signed
    /// fields), the seconds field as written is `ts_ns.div_euclid(10⁹) -
    /// ts_carry`, and the fraction the rest: what libpcap hands over,
    /// uncarried, for such a record.
    pub fn ts_carry(&self) -> u32 {
        self.ts_carry
    }

    /// The captured bytes (`caplen` of them).
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Bytes captured, at most [`wire_len`](Self::wire_len).
    pub fn caplen(&self) -> u32 {
        self.data.len() as u32
    }

    /// Length of the packet on the wire.
    pub fn wire_len(&self) -> u32 {
        self.wire_len
    }

    /// Capture timestamp in nanoseconds since the Unix epoch.
    pub fn ts_ns(&self) -> u64 {
        self.ts_ns
    }

    /// The queue the packet was captured on.
    pub fn queue(&self) -> QueueId {
        self.queue
    }
}

/// Packets a worker hands to [`Handler::packets`] at once, at most: enough
/// lookups to overlap their cache misses, few enough that the run's tables
/// and packet headers stay in the first-level cache.
pub const PACKETS_PER_RUN: usize = 16;

/// A worker's packets gathered into runs for [`Handler::packets`], in order.
pub(crate) struct Runs<'a> {
    run: [Packet<'a>; PACKETS_PER_RUN],
    len: usize,
}

impl<'a> Runs<'a> {
    pub(crate) fn new() -> Runs<'a> {
        Runs { run: [Packet::NONE; PACKETS_PER_RUN], len: 0 }
    }

    /// Adds `p`; true when the run is full and must be [`flush`](Self::flush)ed
    /// before the next: for a caller that marks the hand-over (the profiler).
    #[inline]
    pub(crate) fn add(&mut self, p: Packet<'a>) -> bool {
        self.run[self.len] = p;
        self.len += 1;
        self.len == PACKETS_PER_RUN
    }

    /// Whether the run holds packets.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Hands over what the run holds.
    #[inline]
    pub(crate) fn flush(&mut self, handler: &mut impl Handler) {
        if self.len > 0 {
            handler.packets(&self.run[..self.len]);
            self.len = 0;
        }
    }
}

/// The application: called once per delivered packet, on the worker thread of
/// the packet's queue. One handler per queue, so it needs no locking.
pub trait Handler: Send + 'static {
    /// Handle one packet. Its bytes are only borrowed: copy what must outlive
    /// the call. A panic here ends the run with [`RunError::HandlerPanicked`](crate::engine::RunError::HandlerPanicked).
    fn packet(&mut self, packet: &Packet<'_>);

    /// Handle a run of packets of one chunk, in order: the worker hands
    /// them over [`PACKETS_PER_RUN`] at a time. The default hands each to
    /// [`packet`](Self::packet). A handler that looks every packet up in a
    /// table larger than the caches overrides it to start the lookups of the
    /// whole run before it needs the first (the stream layer does): the cache
    /// misses of several packets then overlap instead of following each other.
    fn packets(&mut self, packets: &[Packet<'_>]) {
        for p in packets {
            self.packet(p);
        }
    }

    /// The worker found no packet on its queue for a while (the engine waits
    /// about 0.1 s), and is called again each such wait while the queue stays
    /// quiet. Handlers that act on timeouts in packet time (the stream
    /// layer's flush and idle timeouts) act here when no packet comes to
    /// move that time on. Keep it cheap.
    fn idle(&mut self) {}

    /// The queue's input ended (or the run stopped): no packet follows.
    /// Handlers that keep state across packets (the stream layer) close it
    /// here, on the worker, before the report takes them back.
    fn finish(&mut self) {}

    /// Rebalancing moves `bucket` off this queue, and this worker has handled
    /// every packet of it that it will get: give up what it keeps about the
    /// bucket's flows, for the handler of the queue the bucket goes to
    /// ([`import`](Self::import)). `None`, the default, hands nothing over.
    /// Called on this worker, between two chunks, for trace and afpacket
    /// sources (whose capture threads hold the bucket's new packets until
    /// the state is posted to the new worker; see
    /// [`BalanceMode::Rebalance`](crate::BalanceMode::Rebalance)); never for
    /// afxdp, whose moves are not flow buckets.
    fn export(&mut self, bucket: &FlowBucket) -> Option<Handover> {
        let _ = bucket;
        None
    }

    /// What another queue's handler gave up in [`export`](Self::export),
    /// taken in before any packet of its bucket is handed to this one. The
    /// default drops it.
    fn import(&mut self, state: Handover) {
        let _ = state;
    }
}

/// Flow state one worker's handler hands to another's when rebalancing moves
/// a bucket (see [`Handler::export`]); the receiving handler downcasts it.
pub type Handover = Box<dyn std::any::Any + Send>;

/// One bucket of the indirection table that rebalancing moves: the flows
/// whose symmetric Toeplitz hash (as [`Rss`](crate::Rss) computes it
/// from a frame) falls in it; [`Rss::in_bucket`](crate::Rss::in_bucket)
/// says whether a frame's flow is one of them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowBucket {
    index: usize,
    mask: u32,
}

impl FlowBucket {
    /// Bucket `index` of a table of `buckets` entries (a power of two).
    pub(crate) fn new(index: usize, buckets: usize) -> FlowBucket {
        debug_assert!(buckets.is_power_of_two() && index < buckets);
        FlowBucket { index, mask: (buckets - 1) as u32 }
    }

    /// Its place in the table.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Whether a flow of hash `hash` ([`Rss`](crate::Rss)'s flow hash, 0
    /// for a frame without a flow) is in this bucket.
    pub(crate) fn holds(&self, hash: u32) -> bool {
        hash & self.mask == self.index as u32
    }
}

impl<F> Handler for F
where
    F: FnMut(&Packet<'_>) + Send + 'static,
{
    #[inline]
    fn packet(&mut self, packet: &Packet<'_>) {
        self(packet)
    }
}
