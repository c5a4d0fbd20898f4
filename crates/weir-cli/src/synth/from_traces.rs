//! `--from DIR`: real flows, copied under fresh benchmark addresses.
//!
//! [`Corpus::load`] reads every trace under a directory (sorted, recursively),
//! strips link headers, and groups the IPv4 TCP and UDP packets of each file by
//! bidirectional 5-tuple. The server of a flow is the side that received its first
//! SYN (TCP) or its first packet (UDP, and TCP flows captured without their SYN).
//! Each packet keeps its IP-layer bytes as captured, its wire length, direction and
//! time relative to the flow's start. IPv6, other protocols, IP fragments and packets
//! whose ports were not captured are counted and left out.
//!
//! [`Replayer`] opens copies of those flows for the scheduler, cycling through them.
//! A copy gets a client in 198.18/16 and a server in 198.19/16 that no other copy
//! shares (the pair comes from a bijection of the copy number), a fresh ephemeral
//! client port and the original server port, and a new Ethernet header. Addresses
//! and ports are rewritten with the IPv4 and TCP/UDP checksums adjusted by RFC 1624
//! rather than recomputed, so truncated captures keep valid checksums and wrong
//! checksums stay exactly as wrong. Sizes (captured and wire), payloads, directions
//! and relative timing are kept.

use super::model::host_octets;
use super::packet::{
    mac_for, update_checksum, update_checksum_addr, ETHERTYPE_IPV4, ETH_HEADER_LEN, IPV4_CHECKSUM_AT, PROTO_TCP, PROTO_UDP,
    TCP_CHECKSUM_AT, UDP_CHECKSUM_AT,
};
use super::rng::{mix64, FlowRng};
use super::sched::Opener;
use rand::Rng;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use weir::tracefile::for_each_packet;
use weir::wire::link::{network_layer, Network};

/// One endpoint: address and port.
type Endpoint = ([u8; 4], u16);

/// One packet of a corpus flow.
#[derive(Clone, Debug)]
pub(super) struct Pkt {
    pub(super) rel_ns: u64,
    /// Captured IP-layer bytes in the corpus arena.
    at: usize,
    pub(super) len: u32,
    /// Wire length from the IP header on.
    pub(super) ip_wire_len: u32,
    pub(super) to_server: bool,
}

/// A flow found in the corpus.
#[derive(Clone, Debug)]
pub struct CorpusFlow {
    pub(super) client: Endpoint,
    pub(super) server: Endpoint,
    pub(super) pkts: Vec<Pkt>,
}

/// What loading found, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadStats {
    pub files: u64,
    /// Files (or directories) that could not be read at all: not a trace, unsupported,
    /// compressed, damaged header, no permission.
    pub unreadable: u64,
    /// Files damaged part-way: the packets before the damage are used.
    pub damaged: u64,
    pub packets: u64,
    pub ipv6: u64,
    /// Not IP, not TCP/UDP, fragments, or ports not captured.
    pub other: u64,
    pub flows: u64,
}

impl fmt::Display for LoadStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "read {} trace files ({} unreadable and skipped, {} damaged part-way), {} packets: {} IPv4 TCP/UDP flows; skipped {} IPv6 and {} other packets",
            self.files, self.unreadable, self.damaged, self.packets, self.flows, self.ipv6, self.other
        )
    }
}

/// The flows of a set of traces.
pub struct Corpus {
    pub(super) flows: Vec<CorpusFlow>,
    arena: Vec<u8>,
    pub stats: LoadStats,
}

/// A flow being assembled while its file is read.
struct Building {
    /// First packet's source and destination.
    first: (Endpoint, Endpoint),
    /// Destination of the first SYN without ACK.
    syn_to: Option<Endpoint>,
    first_ns: u64,
    last_rel: u64,
    pkts: Vec<(Pkt, Endpoint)>,
}

impl Corpus {
    /// Read every file under `dir` (or `dir` itself if it is a file).
    pub fn load(dir: &Path) -> anyhow::Result<Corpus> {
        let meta = std::fs::metadata(dir).map_err(|e| anyhow::anyhow!("cannot read --from {}: {e}", dir.display()))?;
        let mut c = Corpus { flows: Vec::new(), arena: Vec::new(), stats: LoadStats::default() };
        let mut files = Vec::new();
        let mut unlistable = 0;
        if meta.is_file() {
            files.push(dir.to_path_buf());
        } else {
            std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("cannot read --from {}: {e}", dir.display()))?;
            collect_files(dir, &mut files, &mut unlistable);
        }
        files.sort();
        c.stats.files = files.len() as u64 + unlistable;
        c.stats.unreadable = unlistable;
        for path in &files {
            let mut building: Vec<Building> = Vec::new();
            let mut index: HashMap<(u8, Endpoint, Endpoint), usize> = HashMap::new();
            let mut read = 0u64;
            let result = for_each_packet(path, |header, record, data| {
                read += 1;
                c.add(&mut building, &mut index, header.link_type, record.ts_ns, record.wire_len, data);
            });
            c.stats.packets += read;
            match result {
                Ok(_) => {}
                Err(_) if read == 0 => c.stats.unreadable += 1,
                Err(_) => c.stats.damaged += 1,
            }
            c.finish_file(building);
        }
        c.stats.flows = c.flows.len() as u64;
        Ok(c)
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The median duration of the flows that last at all: how long a typical copy stays open.
    pub fn typical_duration_ns(&self) -> u64 {
        let mut d: Vec<u64> = self.flows.iter().filter_map(|f| f.pkts.last().map(|p| p.rel_ns)).filter(|&d| d > 0).collect();
        d.sort_unstable();
        d.get(d.len() / 2).copied().unwrap_or(0)
    }

    /// File one captured frame under its flow.
    fn add(
        &mut self,
        building: &mut Vec<Building>,
        index: &mut HashMap<(u8, Endpoint, Endpoint), usize>,
        link: weir::LinkType,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
    ) {
        let ip = match network_layer(link, data) {
            Some(Network::Ipv4(ip)) => ip,
            Some(Network::Ipv6(_)) => {
                self.stats.ipv6 += 1;
                return;
            }
            None => {
                self.stats.other += 1;
                return;
            }
        };
        let Some((proto, src, dst, syn)) = parse_ipv4(ip) else {
            self.stats.other += 1;
            return;
        };
        let link_len = (data.len() - ip.len()) as u32;
        let key = if src <= dst { (proto, src, dst) } else { (proto, dst, src) };
        let i = *index.entry(key).or_insert_with(|| {
            building.push(Building { first: (src, dst), syn_to: None, first_ns: ts_ns, last_rel: 0, pkts: Vec::new() });
            building.len() - 1
        });
        let b = &mut building[i];
        if syn && b.syn_to.is_none() {
            b.syn_to = Some(dst);
        }
        // Keep time non-decreasing within a flow even where the capture reordered it.
        let rel = ts_ns.saturating_sub(b.first_ns).max(b.last_rel);
        b.last_rel = rel;
        let at = self.arena.len();
        self.arena.extend_from_slice(ip);
        let pkt = Pkt { rel_ns: rel, at, len: ip.len() as u32, ip_wire_len: wire_len.max(data.len() as u32) - link_len, to_server: false };
        b.pkts.push((pkt, src));
    }

    fn finish_file(&mut self, building: Vec<Building>) {
        for b in building {
            let server = b.syn_to.unwrap_or(b.first.1);
            let client = if server == b.first.1 { b.first.0 } else { b.first.1 };
            let pkts = b.pkts.into_iter().map(|(p, src)| Pkt { to_server: src != server || client == server, ..p }).collect();
            self.flows.push(CorpusFlow { client, server, pkts });
        }
    }

    pub(super) fn ip_bytes(&self, p: &Pkt) -> &[u8] {
        &self.arena[p.at..p.at + p.len as usize]
    }
}

/// Every file under directory `dir`. Directories that cannot be listed count as
/// unreadable; symbolic links to directories are not followed, so links cannot loop.
fn collect_files(dir: &Path, out: &mut Vec<PathBuf>, unreadable: &mut u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        *unreadable += 1;
        return;
    };
    for entry in entries {
        let Ok(entry) = entry else {
            *unreadable += 1;
            continue;
        };
        let p = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_files(&p, out, unreadable);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

/// Protocol, source, destination and "is a SYN without ACK" of an unfragmented IPv4
/// TCP or UDP packet whose header and ports were captured.
fn parse_ipv4(ip: &[u8]) -> Option<(u8, Endpoint, Endpoint, bool)> {
    let ihl = usize::from(*ip.first()? & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip.len() < ihl + 4 {
        return None;
    }
    let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
    let proto = ip[9];
    if frag != 0 || (proto != PROTO_TCP && proto != PROTO_UDP) {
        return None;
    }
    let l4 = &ip[ihl..];
    let src = ([ip[12], ip[13], ip[14], ip[15]], u16::from_be_bytes([l4[0], l4[1]]));
    let dst = ([ip[16], ip[17], ip[18], ip[19]], u16::from_be_bytes([l4[2], l4[3]]));
    let syn = proto == PROTO_TCP && l4.get(13).is_some_and(|f| f & 0x12 == 0x02);
    Some((proto, src, dst, syn))
}

/// Rewrite the IPv4 packet `ip` (as captured) from `old` to `new` endpoints, adjusting
/// whichever checksums were captured. Ports are rewritten only where captured.
pub fn readdress(ip: &mut [u8], old: (Endpoint, Endpoint), new: (Endpoint, Endpoint)) {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let proto = ip[9];
    let mut ip_sum = u16::from_be_bytes([ip[IPV4_CHECKSUM_AT], ip[IPV4_CHECKSUM_AT + 1]]);
    ip_sum = update_checksum_addr(ip_sum, old.0 .0, new.0 .0);
    ip_sum = update_checksum_addr(ip_sum, old.1 .0, new.1 .0);
    ip[IPV4_CHECKSUM_AT..IPV4_CHECKSUM_AT + 2].copy_from_slice(&ip_sum.to_be_bytes());
    ip[12..16].copy_from_slice(&new.0 .0);
    ip[16..20].copy_from_slice(&new.1 .0);
    let l4 = &mut ip[ihl..];
    let at = if proto == PROTO_TCP { TCP_CHECKSUM_AT } else { UDP_CHECKSUM_AT };
    if l4.len() >= at + 2 {
        let stored = u16::from_be_bytes([l4[at], l4[at + 1]]);
        // UDP checksum zero means "none": it stays none.
        if !(proto == PROTO_UDP && stored == 0) {
            let mut sum = update_checksum_addr(stored, old.0 .0, new.0 .0);
            sum = update_checksum_addr(sum, old.1 .0, new.1 .0);
            sum = update_checksum(sum, old.0 .1, new.0 .1);
            sum = update_checksum(sum, old.1 .1, new.1 .1);
            if proto == PROTO_UDP && sum == 0 {
                sum = 0xffff;
            }
            l4[at..at + 2].copy_from_slice(&sum.to_be_bytes());
        }
    }
    if l4.len() >= 2 {
        l4[0..2].copy_from_slice(&new.0 .1.to_be_bytes());
    }
    if l4.len() >= 4 {
        l4[2..4].copy_from_slice(&new.1 .1.to_be_bytes());
    }
}

/// One copy of a corpus flow being replayed.
pub struct Copy {
    flow: usize,
    next: usize,
    start_ns: u64,
    client: Endpoint,
    server: Endpoint,
    next_ts: Option<u64>,
}

/// Opens copies of corpus flows for the scheduler.
pub struct Replayer<'c> {
    corpus: &'c Corpus,
    rng: FlowRng,
    /// Key of the bijection from copy numbers to address pairs.
    key: u32,
    copies: u32,
    cycle: usize,
}

/// lowbias32 (Wellons): a bijection on u32 that scatters consecutive inputs.
fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

impl<'c> Replayer<'c> {
    /// Replay copies of `corpus`'s flows, starting the cycle at a flow chosen by `seed`.
    pub fn new(corpus: &'c Corpus, seed: u64) -> Replayer<'c> {
        let mut rng = FlowRng::new(seed, 0xf07);
        let cycle = rng.gen_range(0..corpus.flows.len());
        Replayer { corpus, key: (mix64(seed) >> 32) as u32, copies: 0, cycle, rng }
    }

    /// The next unused (client host, server host) pair.
    fn hosts(&mut self) -> (u32, u32) {
        loop {
            let v = mix32(self.copies ^ self.key);
            self.copies = self.copies.wrapping_add(1);
            let (c, s) = (v >> 16, v & 0xffff);
            if c < 65_534 && s < 65_534 {
                return (c, s);
            }
        }
    }

    fn ts(c: &Copy, p: &Pkt) -> u64 {
        c.start_ns.saturating_add(p.rel_ns)
    }
}

impl Opener for Replayer<'_> {
    type Flow = Copy;

    fn open(&mut self, _slot: usize, at_ns: u64) -> Copy {
        let flow = self.cycle;
        self.cycle = (self.cycle + 1) % self.corpus.flows.len();
        let (c, s) = self.hosts();
        let ch = host_octets(c);
        let sh = host_octets(s);
        let port = self.rng.gen_range(32_768..61_000);
        let mut copy = Copy {
            flow,
            next: 0,
            start_ns: at_ns,
            client: ([198, 18, ch[0], ch[1]], port),
            server: ([198, 19, sh[0], sh[1]], self.corpus.flows[flow].server.1),
            next_ts: None,
        };
        copy.next_ts = Some(Self::ts(&copy, &self.corpus.flows[flow].pkts[0]));
        copy
    }

    fn next_ts(copy: &Copy) -> Option<u64> {
        copy.next_ts
    }

    fn emit(&mut self, copy: &mut Copy, out: &mut Vec<u8>) -> (u64, u32) {
        let f = &self.corpus.flows[copy.flow];
        let p = &f.pkts[copy.next];
        let ts = Self::ts(copy, p);
        let (src, dst) = if p.to_server { (copy.client, copy.server) } else { (copy.server, copy.client) };
        let old = if p.to_server { (f.client, f.server) } else { (f.server, f.client) };
        out.clear();
        out.extend_from_slice(&mac_for(dst.0));
        out.extend_from_slice(&mac_for(src.0));
        out.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        out.extend_from_slice(self.corpus.ip_bytes(p));
        readdress(&mut out[ETH_HEADER_LEN..], old, (src, dst));
        copy.next += 1;
        copy.next_ts = f.pkts.get(copy.next).map(|q| Self::ts(copy, q));
        (ts, p.ip_wire_len + ETH_HEADER_LEN as u32)
    }

    fn closed(&mut self, _slot: usize, _copy: &Copy) {}

    fn unused(&mut self, _copy: &Copy) {}
}
