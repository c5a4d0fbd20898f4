//! Flow-bucket steering of an AF_PACKET capture in the kernel: weir's eBPF fanout
//! program (`ebpf/weir_fanout.c`), its bucket table, and [`BucketSteering`], the
//! handle a caller (the rebalancing controller, a test) steers it through.
//!
//! The contract:
//! - In `buckets` fanout mode ([`Fanout::Buckets`]) the group's demux is weir's
//!   program (PACKET_FANOUT_EBPF). For every packet it computes the flow's bucket,
//!   0 to [`BUCKETS`] − 1, counts the packet in that bucket, and hands it to the
//!   queue the bucket table names.
//! - The bucket is the one weir's RSS gives the same frame in a trace
//!   ([`Rss::bucket`](crate::Rss::bucket)): the low bits of the symmetric
//!   Toeplitz hash of the addresses and, when the packet carries them and is no
//!   fragment, the ports. So both directions of a flow share a bucket, a bucket
//!   holds the same flows for every source, and a caller can compute which bucket
//!   a frame is in. Non-IP packets are in bucket 0. (The C file says where the
//!   two parsers can still differ: headers cut by the snaplen, stacks of more
//!   than four VLAN tags.)
//! - A table starts as bucket b → the capture's queue b mod n, n queues, as
//!   [`IndirectionTable::new`](crate::rss::IndirectionTable::new) starts.
//! - A caller who wants to steer makes a [`BucketSteering`] (which loads the
//!   program) and opens the capture with its [`fanout`](BucketSteering::fanout)
//!   mode; `--fanout buckets` makes a table nobody else can reach.
//! - One table steers at most one capture at a time: it is bound when the source
//!   opens, and free again when the last capture unit (or the source, if never
//!   started) is gone. The program and its maps live as long as the handle or any
//!   unit: the units keep the loaded object, as AF_XDP's units keep their program.
//! - A move ([`move_bucket`](BucketSteering::move_bucket)) takes effect from the
//!   next packet the kernel steers. Packets of the bucket already in the old
//!   queue's ring or pool are still delivered by the old queue's worker, so a move
//!   reorders nothing only when the bucket has nothing in flight; choosing that
//!   moment (rebalancing's rule) is the caller's.
//! - Queues are fanout members by position: the sockets join in queue order. If
//!   one member left early (its unit ended on an error) the kernel would move the
//!   last member into its slot and positions would no longer match queues; the
//!   capture is ending then anyway.
//! - Hit counts ([`hits`](BucketSteering::hits)) are kept per CPU by the kernel
//!   and summed here, cumulative since the table was made. Every packet the group
//!   sees counts, also one a socket filter then rejects (on loopback, where
//!   weir's filter drops the outgoing copy of each packet, a packet counts twice).
//!   Reading them costs one system call per bucket: once per controller tick, not
//!   per packet.
//! - Reading and changing the table are bpf(2) calls: a process that dropped root
//!   (`-Z`) can no longer make them unless the kernel allows unprivileged BPF.

use crate::capture::SourceError;
use crate::source::live::{bpf_error, io_error};
use crate::source::Fanout;
use crate::sys::packet::PacketSocket;
use crate::QueueId;
use aya::maps::{Array, Map, MapData, MapError, PerCpuArray};
use aya::programs::SocketFilter;
use aya::Ebpf;
use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

pub use crate::rss::BUCKETS;

/// The program's name in the kernel (its C function).
const PROGRAM_NAME: &str = "weir_fanout";
/// Bucket → fanout member.
const TABLE_MAP: &str = "weir_buckets";
/// Bucket → packets steered, per CPU.
const HITS_MAP: &str = "weir_bucket_hits";
/// What loading needs when the kernel refuses.
const NEEDS: &str = "CAP_BPF (or CAP_SYS_ADMIN)";

/// The object built by build.rs; aligned because the ELF reader needs it.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/weir_fanout.o"));

pub use crate::source::live::SteeringId;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Every table alive, by id, so a capture opened with a [`SteeringId`] finds its
/// table. Weak: a table lives as long as its handles and units, not longer.
static TABLES: Mutex<Vec<(SteeringId, Weak<Table>)>> = Mutex::new(Vec::new());

/// A bucket table in the kernel and weir's fanout program that reads it.
/// Cloning gives another handle to the same table.
///
/// An afpacket capture opened with [`fanout`](Self::fanout) puts each packet
/// in one of [`BUCKETS`] buckets by weir's symmetric RSS hash (the bucket
/// [`Rss::bucket`](crate::Rss::bucket) gives the same frame; both
/// directions of a flow share one) and hands it to the queue the table names,
/// initially bucket b → queue b mod n. The table steers one capture at a
/// time, from its opening until its last capture thread is gone. A move takes
/// effect from the next packet the kernel steers: packets of the bucket
/// already captured are still delivered by the old queue, so a move reorders
/// nothing only when the bucket has nothing in flight. Reading and changing
/// the table are bpf(2) calls, which a process that dropped root may no
/// longer make.
#[derive(Clone)]
pub struct BucketSteering {
    table: Arc<Table>,
}

struct Table {
    id: SteeringId,
    kernel: Mutex<Kernel>,
}

struct Kernel {
    /// Bucket → fanout member (the queue's position in the capture).
    table: Array<MapData, u32>,
    hits: PerCpuArray<MapData, u64>,
    /// The capture the table steers now.
    capture: Option<Capture>,
    /// Holds the program loaded (the maps were taken out of it).
    ebpf: Ebpf,
}

struct Capture {
    name: String,
    /// In fanout member order.
    queues: Vec<QueueId>,
}

/// What a [`BucketSteering`] call could not do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SteerError {
    /// The bucket is not below [`BUCKETS`].
    #[error("bucket {bucket} does not exist: the table has buckets 0 to {}", BUCKETS - 1)]
    NoSuchBucket {
        /// The bucket asked for.
        bucket: usize,
    },
    /// The queue is not one of the capture the table steers.
    #[error("queue {queue} is not a queue of {capture} (its queues: {queues})")]
    NoSuchQueue {
        /// The queue asked for.
        queue: QueueId,
        /// The capture the table steers, by name.
        capture: String,
        /// Its queues, listed for the message.
        queues: String,
    },
    /// The table steers no capture now: none was opened with it yet, or it has ended.
    #[error("the bucket table steers no capture: open an afpacket source in its fanout mode first (or that capture has ended)")]
    NoCapture,
    /// The OS error is shown in the message, not chained as a source.
    #[error("{what}: {error}")]
    Kernel {
        /// What was being done.
        what: String,
        /// The bpf(2) call's error.
        error: io::Error,
    },
}

impl BucketSteering {
    /// Load weir's fanout program and a table for it (needs CAP_BPF or root). It
    /// steers nothing until an afpacket source opens with [`fanout`](Self::fanout).
    pub fn new() -> Result<BucketSteering, SourceError> {
        let mut ebpf = Ebpf::load(OBJECT).map_err(|e| bpf_error("creating the maps of weir's fanout program", &e, NEEDS))?;
        let program: &mut SocketFilter = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| missing(PROGRAM_NAME))?
            .try_into()
            .map_err(|e| bpf_error("weir's fanout program", &e, NEEDS))?;
        program.load().map_err(|e| bpf_error("loading weir's fanout program", &e, NEEDS))?;
        let table: Array<MapData, u32> = take_map(&mut ebpf, TABLE_MAP)?;
        let hits: PerCpuArray<MapData, u64> = take_map(&mut ebpf, HITS_MAP)?;
        if table.len() as usize != BUCKETS || hits.len() as usize != BUCKETS {
            return Err(SourceError::Invalid(format!(
                "weir's fanout object has {} buckets and {} hit counters, weir expects {BUCKETS}: ebpf/weir_fanout.c and the loader disagree",
                table.len(),
                hits.len()
            )));
        }
        let id = SteeringId(NEXT_ID.fetch_add(1, Ordering::Relaxed));
        let table = Arc::new(Table { id, kernel: Mutex::new(Kernel { table, hits, capture: None, ebpf }) });
        let mut all = lock(&TABLES);
        all.retain(|(_, t)| t.strong_count() > 0);
        all.push((id, Arc::downgrade(&table)));
        Ok(BucketSteering { table })
    }

    /// The table of a live handle, for a capture opened with its id.
    pub(super) fn find(id: SteeringId) -> Result<BucketSteering, SourceError> {
        let all = lock(&TABLES);
        let table = all.iter().find(|(i, _)| *i == id).and_then(|(_, t)| t.upgrade());
        table.map(|table| BucketSteering { table }).ok_or_else(|| {
            SourceError::Invalid(format!(
                "buckets fanout: bucket table {} is gone (every BucketSteering handle to it was dropped before the capture opened)",
                id.0
            ))
        })
    }

    /// The fanout mode that makes an afpacket capture use this table.
    pub fn fanout(&self) -> Fanout {
        Fanout::Buckets(Some(self.table.id))
    }

    /// The queues of the capture the table steers, in fanout member order; empty
    /// when it steers none.
    pub fn queues(&self) -> Vec<QueueId> {
        self.kernel().capture.as_ref().map(|c| c.queues.clone()).unwrap_or_default()
    }

    /// The queue `bucket` goes to.
    pub fn queue_of(&self, bucket: usize) -> Result<QueueId, SteerError> {
        check_bucket(bucket)?;
        let k = self.kernel();
        let capture = k.capture.as_ref().ok_or(SteerError::NoCapture)?;
        capture.queue_of(bucket, &k.table)
    }

    /// The queue of every bucket, bucket 0 first.
    pub fn table(&self) -> Result<Vec<QueueId>, SteerError> {
        let k = self.kernel();
        let capture = k.capture.as_ref().ok_or(SteerError::NoCapture)?;
        (0..BUCKETS).map(|b| capture.queue_of(b, &k.table)).collect()
    }

    /// Send `bucket`'s packets to `queue` from the next one on (see the module
    /// doc for what a move does to packets already captured).
    pub fn move_bucket(&self, bucket: usize, queue: QueueId) -> Result<(), SteerError> {
        check_bucket(bucket)?;
        let mut k = self.kernel();
        let capture = k.capture.as_ref().ok_or(SteerError::NoCapture)?;
        let member = capture.queues.iter().position(|&q| q == queue).ok_or_else(|| SteerError::NoSuchQueue {
            queue,
            capture: capture.name.clone(),
            queues: capture.queues.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        })?;
        k.table.set(bucket as u32, member as u32, 0).map_err(|e| kernel_error(format!("moving bucket {bucket} to queue {queue}"), &e))
    }

    /// Packets steered through each bucket since the table was made, all CPUs
    /// together, bucket 0 first. Readable also when the table steers no capture.
    pub fn hits(&self) -> Result<Vec<u64>, SteerError> {
        let k = self.kernel();
        (0..BUCKETS as u32)
            .map(|b| {
                let per_cpu = k.hits.get(&b, 0).map_err(|e| kernel_error(format!("reading the hits of bucket {b}"), &e))?;
                let total: u64 = per_cpu.iter().sum();
                Ok(total)
            })
            .collect()
    }

    /// Steer the capture `name`, whose queues are `queues` in fanout member order,
    /// starting from bucket b → queue b mod n. The table is the capture's until
    /// the returned binding is dropped.
    pub(super) fn bind(&self, name: &str, queues: &[QueueId]) -> Result<Binding, SourceError> {
        let mut k = self.kernel();
        if let Some(other) = &k.capture {
            return Err(SourceError::Invalid(format!(
                "{name}: bucket table {} already steers {}, and a table steers one capture at a time",
                self.table.id.0, other.name
            )));
        }
        let n = u32::try_from(queues.len()).ok().filter(|&n| n > 0).expect("a capture has one queue or more");
        for b in 0..BUCKETS as u32 {
            k.table.set(b, b % n, 0).map_err(|e| bpf_error(&format!("{name}: filling the bucket table"), &e, NEEDS))?;
        }
        k.capture = Some(Capture { name: name.to_string(), queues: queues.to_vec() });
        Ok(Binding { steering: self.clone() })
    }

    fn kernel(&self) -> MutexGuard<'_, Kernel> {
        lock(&self.table.kernel)
    }
}

impl fmt::Debug for BucketSteering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketSteering").field("id", &self.table.id.0).finish_non_exhaustive()
    }
}

impl Capture {
    fn queue_of(&self, bucket: usize, table: &Array<MapData, u32>) -> Result<QueueId, SteerError> {
        let member = table.get(&(bucket as u32), 0).map_err(|e| kernel_error(format!("reading bucket {bucket}"), &e))?;
        self.queues.get(member as usize).copied().ok_or_else(|| SteerError::Kernel {
            what: format!("bucket {bucket}"),
            error: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the table names fanout member {member}, and {} has {} queues", self.name, self.queues.len()),
            ),
        })
    }
}

/// A table steering one capture; the capture's units hold it, and the last one
/// to go frees the table.
pub(super) struct Binding {
    steering: BucketSteering,
}

impl Binding {
    /// The table this binding holds.
    pub(super) fn steering(&self) -> &BucketSteering {
        &self.steering
    }

    /// Make weir's program the demux of the fanout group `socket` just founded
    /// (PACKET_FANOUT_EBPF); the group holds the program from then on.
    pub(super) fn attach(&self, socket: &PacketSocket) -> io::Result<()> {
        let k = self.steering.kernel();
        let program: &SocketFilter = k
            .ebpf
            .program(PROGRAM_NAME)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| io::Error::other("weir's fanout program is not in its object"))?;
        let fd = program.fd().map_err(|e| io_error(&e))?;
        socket.set_fanout_program(fd.as_fd())
    }
}

impl Drop for Binding {
    fn drop(&mut self) {
        self.steering.kernel().capture = None;
    }
}

fn check_bucket(bucket: usize) -> Result<(), SteerError> {
    if bucket < BUCKETS {
        Ok(())
    } else {
        Err(SteerError::NoSuchBucket { bucket })
    }
}

fn kernel_error(what: String, e: &MapError) -> SteerError {
    let source = io_error(e);
    let what = if source.kind() == io::ErrorKind::PermissionDenied {
        format!("{what}: needs CAP_BPF (a process that dropped root cannot steer unless the kernel allows unprivileged BPF)")
    } else {
        what
    };
    SteerError::Kernel { what, error: source }
}

fn take_map<M: TryFrom<Map, Error = MapError>>(ebpf: &mut Ebpf, name: &str) -> Result<M, SourceError> {
    let map = ebpf.take_map(name).ok_or_else(|| missing(name))?;
    M::try_from(map).map_err(|e| bpf_error(&format!("weir's fanout map {name}"), &e, NEEDS))
}

fn missing(what: &str) -> SourceError {
    SourceError::Invalid(format!("weir's fanout object has no {what:?}: ebpf/weir_fanout.c and the loader disagree"))
}

/// The lock, also after a panic elsewhere: the kernel's maps stay consistent
/// whatever a panicking holder was doing.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rss::{BucketCount, Rss, Toeplitz};
    use crate::LinkType;
    use proptest::prelude::*;

    /// The program's hash as its C code computes it: XOR the input's 32-bit words
    /// as they lie in memory, fold to 16 bits, and XOR the key rotated by the
    /// position of each set bit.
    fn folded_toeplitz(input: &[u8]) -> u32 {
        let words = input.chunks(4).fold(0u32, |w, c| w ^ u32::from_ne_bytes(c.try_into().unwrap()));
        let v = u32::from_be(words);
        let fold = (v >> 16) ^ (v & 0xffff);
        let (mut window, mut hash) = (0x6d5a_6d5au32, 0u32);
        for bit in 0..16 {
            if fold & (0x8000 >> bit) != 0 {
                hash ^= window;
            }
            window = window.rotate_left(1);
        }
        hash
    }

    proptest! {
        /// Inputs of the shapes weir hashes: IPv4 addresses with and without
        /// ports (8, 12 bytes), IPv6 (32, 36).
        #[test]
        fn folded_toeplitz_is_weirs_toeplitz(input in prop_oneof![
            proptest::collection::vec(any::<u8>(), 8),
            proptest::collection::vec(any::<u8>(), 12),
            proptest::collection::vec(any::<u8>(), 32),
            proptest::collection::vec(any::<u8>(), 36),
        ]) {
            prop_assert_eq!(folded_toeplitz(&input), Toeplitz::symmetric().hash(&input));
        }
    }

    #[test]
    fn the_table_is_as_large_as_weirs_indirection_table() {
        assert_eq!(BUCKETS, BucketCount::DEFAULT.get());
    }

    #[test]
    fn unknown_ids_and_buckets_are_refused_clearly() {
        let err = BucketSteering::find(SteeringId(u64::MAX)).unwrap_err().to_string();
        assert!(err.contains("is gone"), "{err}");
        assert_eq!(check_bucket(511).ok(), Some(()));
        assert_eq!(check_bucket(512).unwrap_err().to_string(), "bucket 512 does not exist: the table has buckets 0 to 511");
    }

    // Frames for the kernel program: Ethernet with any tags, IPv4 and IPv6 with
    // options, extension headers and fragments, and things that are not IP.

    fn ether(tpids: &[u16], ty: u16, l3: &[u8]) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, b'w', b'e', b'i', b'r', 0x02];
        for (i, tpid) in tpids.iter().enumerate() {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&(0x2000 | (i as u16 + 7)).to_be_bytes());
        }
        f.extend_from_slice(&ty.to_be_bytes());
        f.extend_from_slice(l3);
        f
    }

    fn ipv4(proto: u8, frag: u16, option_words: u8, src: [u8; 4], dst: [u8; 4], l4: &[u8]) -> Vec<u8> {
        let len = 20 + 4 * usize::from(option_words) + l4.len();
        let mut h = vec![0x45 + option_words, 0, (len >> 8) as u8, len as u8, 0, 1];
        h.extend_from_slice(&frag.to_be_bytes());
        h.extend_from_slice(&[64, proto, 0, 0]);
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        h.resize(h.len() + 4 * usize::from(option_words), 1);
        h.extend_from_slice(l4);
        h
    }

    fn ipv6(next: u8, src: [u8; 16], dst: [u8; 16], rest: &[u8]) -> Vec<u8> {
        let mut h = vec![0x60, 0, 0, 0];
        h.extend_from_slice(&(rest.len() as u16).to_be_bytes());
        h.extend_from_slice(&[next, 64]);
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        h.extend_from_slice(rest);
        h
    }

    /// An IPv6 extension header of `units` 8-byte units after the first (AH: 4-byte units after the first two).
    fn ext(next: u8, units: u8, ah: bool) -> Vec<u8> {
        let len = if ah { (usize::from(units) + 2) * 4 } else { (usize::from(units) + 1) * 8 };
        let mut e = vec![next, units];
        e.resize(len, 0);
        e
    }

    fn ports(sport: u16, dport: u16) -> Vec<u8> {
        let mut p = sport.to_be_bytes().to_vec();
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&[0, 20, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd]);
        p
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn frames() -> Vec<(String, Vec<u8>)> {
        let (a4, b4) = ([198, 18, 0, 1], [198, 19, 7, 200]);
        let (a6, b6) =
            ([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], [0x20, 1, 0xd, 0xb8, 0, 9, 0, 0, 0, 0, 0, 0, 0xab, 0, 0, 2]);
        let p = ports(40000, 443);
        let v4 = |proto, frag, opts, l4: &[u8]| ether(&[], 0x0800, &ipv4(proto, frag, opts, a4, b4, l4));
        let v6 = |next, rest: &[u8]| ether(&[], 0x86dd, &ipv6(next, a6, b6, rest));
        let mut out: Vec<(String, Vec<u8>)> = vec![
            ("ipv4 udp".into(), v4(17, 0, 0, &p)),
            ("ipv4 tcp, don't fragment".into(), v4(6, 0x4000, 0, &p)),
            ("ipv4 sctp".into(), v4(132, 0, 0, &p)),
            ("ipv4 dccp".into(), v4(33, 0, 0, &p)),
            ("ipv4 udp-lite".into(), v4(136, 0, 0, &p)),
            ("ipv4 icmp".into(), v4(1, 0, 0, &p)),
            ("ipv4 gre".into(), v4(47, 0, 0, &p)),
            ("ipv4 udp, 1 option word".into(), v4(17, 0, 1, &p)),
            ("ipv4 udp, 10 option words".into(), v4(17, 0, 10, &p)),
            ("ipv4 first fragment".into(), v4(17, 0x2000, 0, &p)),
            ("ipv4 later fragment".into(), v4(17, 0x0010, 0, &p)),
            ("ipv4 last fragment".into(), v4(6, 0x0100, 0, &p)),
            ("ipv4 ports cut".into(), v4(17, 0, 0, &p[..3])),
            ("ipv4 no l4".into(), v4(17, 0, 0, &[])),
            ("ipv4 options cut".into(), ether(&[], 0x0800, &ipv4(17, 0, 5, a4, b4, &[])[..30])),
            ("ipv4 header cut".into(), ether(&[], 0x0800, &ipv4(17, 0, 0, a4, b4, &p)[..19])),
            ("ipv4 bad version".into(), {
                let mut f = v4(17, 0, 0, &p);
                f[14] = 0x65;
                f
            }),
            ("ipv4 ihl 4".into(), {
                let mut f = v4(17, 0, 0, &p);
                f[14] = 0x44;
                f
            }),
            ("ipv6 udp".into(), v6(17, &p)),
            ("ipv6 tcp".into(), v6(6, &p)),
            ("ipv6 icmpv6".into(), v6(58, &p)),
            ("ipv6 no next header".into(), v6(59, &p)),
            ("ipv6 hop-by-hop, dst options, udp".into(), v6(0, &[ext(60, 0, false), ext(17, 2, false), p.clone()].concat())),
            ("ipv6 routing, tcp".into(), v6(43, &[ext(6, 1, false), p.clone()].concat())),
            ("ipv6 ah, tcp".into(), v6(51, &[ext(6, 4, true), p.clone()].concat())),
            ("ipv6 fragment header".into(), v6(44, &[vec![17, 0, 0, 1, 0, 0, 0, 9], p.clone()].concat())),
            ("ipv6 dst options, fragment".into(), v6(60, &[ext(44, 0, false), vec![17, 0, 0, 0, 0, 0, 0, 9], p.clone()].concat())),
            // weir walks at most 8: ports after 7, none after 8.
            ("ipv6 7 extension headers, udp".into(), v6(60, &[vec![ext(60, 0, false); 6].concat(), ext(17, 0, false), p.clone()].concat())),
            ("ipv6 8 extension headers, udp".into(), v6(60, &[vec![ext(60, 0, false); 7].concat(), ext(17, 0, false), p.clone()].concat())),
            ("ipv6 extension cut".into(), v6(0, &[1])),
            ("ipv6 header cut".into(), ether(&[], 0x86dd, &ipv6(17, a6, b6, &p)[..39])),
            ("ipv6 ports cut".into(), v6(17, &p[..2])),
            ("vlan ipv4 udp".into(), ether(&[0x8100], 0x0800, &ipv4(17, 0, 0, a4, b4, &p))),
            ("qinq ipv6 tcp".into(), ether(&[0x88a8, 0x8100], 0x86dd, &ipv6(6, a6, b6, &p))),
            ("old qinq ipv4 tcp".into(), ether(&[0x9100, 0x8100], 0x0800, &ipv4(6, 0, 0, a4, b4, &p))),
            ("4 tags".into(), ether(&[0x88a8, 0x8100, 0x8100, 0x8100], 0x0800, &ipv4(17, 0, 0, a4, b4, &p))),
            ("5 tags".into(), ether(&[0x88a8, 0x8100, 0x8100, 0x8100, 0x8100], 0x0800, &ipv4(17, 0, 0, a4, b4, &p))),
            ("tag cut".into(), ether(&[0x8100], 0x0800, &[])[..16].to_vec()),
            ("arp".into(), ether(&[], 0x0806, &[0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 198, 18, 0, 1])),
            ("802.3 length".into(), ether(&[], 0x0040, &[0xaa; 64])),
            ("ethernet header only".into(), ether(&[], 0x0800, &[])),
        ];
        // Many flows, both directions, some tagged.
        let mut rng = Rng(0x5eed);
        for i in 0..400 {
            let r = rng.next();
            let (sp, dp) = ((r >> 16) as u16, (r >> 32) as u16);
            let (fwd, rev) = (ports(sp, dp), ports(dp, sp));
            let proto = if r & 1 == 0 { 17 } else { 6 };
            let tags: &[u16] = if r & 2 == 0 { &[] } else { &[0x8100] };
            let (f, b) = if r & 4 == 0 {
                let (x, y) = ((r as u32).to_be_bytes(), ((r >> 24) as u32).to_be_bytes());
                (ether(tags, 0x0800, &ipv4(proto, 0, 0, x, y, &fwd)), ether(tags, 0x0800, &ipv4(proto, 0, 0, y, x, &rev)))
            } else {
                let x: [u8; 16] = std::array::from_fn(|_| (rng.next() >> 8) as u8);
                let y: [u8; 16] = std::array::from_fn(|_| (rng.next() >> 8) as u8);
                (ether(tags, 0x86dd, &ipv6(proto, x, y, &fwd)), ether(tags, 0x86dd, &ipv6(proto, y, x, &rev)))
            };
            out.push((format!("flow {i} forward"), f));
            out.push((format!("flow {i} reverse"), b));
        }
        out
    }

    /// The C program, run by the kernel on frames as if received, puts each in the
    /// bucket weir's RSS puts it in, and counts it there. Root only.
    #[test]
    #[ignore = "needs root: loads weir's eBPF fanout program into the kernel"]
    fn the_kernel_program_buckets_frames_as_weirs_rss_does() {
        testbed::require_root();
        let steering = BucketSteering::new().expect("loading weir's fanout program as root");
        {
            // The identity table: the program then returns the bucket itself.
            let mut k = steering.kernel();
            for b in 0..BUCKETS as u32 {
                k.table.set(b, b, 0).unwrap();
            }
        }
        let rss = Rss::new(LinkType::ETHERNET, 1);
        let mut expected = vec![0u64; BUCKETS];
        let mut wrong = Vec::new();
        let mut refused = Vec::new();
        let frames = frames();
        for (what, frame) in &frames {
            let want = rss.bucket(frame);
            let run = {
                let k = steering.kernel();
                let program: &SocketFilter = k.ebpf.program(PROGRAM_NAME).unwrap().try_into().unwrap();
                crate::sys::bpf::test_run(program.fd().unwrap().as_fd(), frame, 1, 0, 0)
            };
            let got = match run {
                Ok(got) => got,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    refused.push(what.as_str());
                    continue;
                }
                Err(e) => panic!("{what}: {e}"),
            };
            if got as usize != want {
                wrong.push(format!("{what}: kernel bucket {got}, weir's {want}"));
            }
            expected[want] += 1;
        }
        assert!(wrong.is_empty(), "{} of {} frames differ: {wrong:#?}", wrong.len(), frames.len());
        // The kernel's test harness refuses an IP frame shorter than its IP header
        // (EINVAL), so those few cases are left to the code's reading (bucket 0).
        assert_eq!(refused, ["ipv4 header cut", "ipv6 header cut", "ethernet header only"], "frames the harness refused");
        // Not all in one bucket: the test would prove little.
        assert!(expected.iter().filter(|&&n| n > 0).count() > 100);
        assert!(expected[0] > 0, "non-IP frames are in bucket 0");
        assert_eq!(steering.hits().unwrap(), expected, "hits per bucket");
        // Unbound: the handle says so instead of guessing queues.
        assert!(matches!(steering.move_bucket(3, QueueId(0)), Err(SteerError::NoCapture)));
        assert!(steering.queues().is_empty());
    }
}
