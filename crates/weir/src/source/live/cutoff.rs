//! The kernel cutoff's flow map, as user space sees it: the map that weir's
//! kernel programs (the XDP program of afxdp, the socket filter of afpacket;
//! `ebpf/weir_cutoff.h`) consult for every packet, and the handle each
//! worker's stream layer installs and takes out entries through.
//!
//! The contract:
//! - An entry is one direction of a stream, keyed as its packets carry it
//!   ([`FlowKey`]: addresses, ports, protocol). While it is in the map the
//!   kernel drops that direction's packets before weir's pool, except TCP
//!   segments with SYN, FIN or RST, and counts them in the entry
//!   ([`Counters`]).
//! - [`KernelCutoff::take`] reads an entry and deletes it in one bpf(2) call:
//!   every packet the kernel dropped is in exactly one take, or (once the
//!   entry is gone) reaches weir as any packet does. So a record that adds
//!   what it took to what it saw is exact.
//! - The map is a plain hash map of a fixed size, never an LRU one: an LRU
//!   map evicts on its own when full and the evicted entry's counters would
//!   be lost. Here an install into a full map fails and is counted; the
//!   stream then stays with the user-space cutoff, exact as before.
//! - Only TCP and UDP over IPv4 or IPv6 are installed (what the kernel side
//!   keys); everything else stays with user space.

use crate::capture::SourceError;
use crate::sys::bpf::{self, MapElem};
use aya::maps::{Map, MapData};
use aya::Ebpf;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::time::SystemTime;

/// The map's name in both kernel objects.
pub(crate) const MAP_NAME: &str = "weir_flows";

/// Bytes of a key and of a value: `struct weir_flow_key` and `struct
/// weir_flow_counters` in `ebpf/weir_cutoff.h`.
const KEY_LEN: usize = 40;
const VALUE_LEN: usize = 40;

/// Kernel memory per map entry, for the memory check before the map is made:
/// the key and value, and the hash table's element header and bucket (about
/// 64 bytes on 64-bit kernels), rounded up.
pub(crate) const ENTRY_BYTES: u64 = 160;

/// Add a flow map of `entries` to a source's memory plan, if there is one.
pub(crate) fn plan_map(plan: &mut crate::memory::Plan, entries: u32) {
    if entries > 0 {
        plan.add(format!("kernel cutoff flow map: {entries} entries"), u64::from(entries).saturating_mul(ENTRY_BYTES));
    }
}

/// One direction of a stream as the kernel keys it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct FlowKey([u8; KEY_LEN]);

impl FlowKey {
    /// The key of packets sent from `src`:`sport` to `dst`:`dport` with IP
    /// protocol `proto`; `None` for what the kernel does not key (not TCP or
    /// UDP, or addresses of two families).
    pub(crate) fn new(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, proto: u8) -> Option<FlowKey> {
        if proto != 6 && proto != 17 {
            return None;
        }
        let mut k = [0u8; KEY_LEN];
        let family = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                k[0..4].copy_from_slice(&s.octets());
                k[16..20].copy_from_slice(&d.octets());
                4
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                k[0..16].copy_from_slice(&s.octets());
                k[16..32].copy_from_slice(&d.octets());
                6
            }
            _ => return None,
        };
        k[32..34].copy_from_slice(&sport.to_be_bytes());
        k[34..36].copy_from_slice(&dport.to_be_bytes());
        k[36] = proto;
        k[37] = family;
        Some(FlowKey(k))
    }
}

/// What the kernel counted of one direction's dropped packets.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Packets dropped.
    pub packets: u64,
    /// Their IP bytes (headers included), as a record's octets count.
    pub octets: u64,
    /// Their transport payload bytes, as a record's bytes count.
    pub payload: u64,
    /// The last one's time, in ns since the Unix epoch (0: none).
    pub last_ns: u64,
    /// Their TCP flags, OR'ed.
    pub tcp_flags: u8,
    /// The kernel saw a SYN, FIN or RST of the connection while the entry
    /// was in the map, and stopped counting from there.
    pub stopped: bool,
}

impl Counters {
    /// Decodes a value; `mono_to_real` is what turns the kernel's
    /// CLOCK_MONOTONIC into CLOCK_REALTIME now.
    fn decode(v: &[u8; VALUE_LEN], mono_to_real: i128) -> Counters {
        let word = |i: usize| u64::from_ne_bytes(v[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let last = word(3);
        Counters {
            packets: word(0),
            octets: word(1),
            payload: word(2),
            last_ns: if last == 0 { 0 } else { u64::try_from(i128::from(last) + mono_to_real).unwrap_or(0) },
            tcp_flags: v[32],
            stopped: u32::from_ne_bytes(v[36..40].try_into().expect("4 bytes")) != 0,
        }
    }
}

/// Why an install did not happen.
#[derive(Debug)]
pub(crate) enum InstallError {
    /// The map holds as many entries as it may.
    Full,
    /// Any other refusal (counted apart, with the same fallback).
    Failed,
}

/// The flow map of one capture, as the source loaded it.
pub(crate) struct FlowMap {
    map: MapData,
}

impl FlowMap {
    /// Takes the flow map out of a loaded kernel object.
    pub(crate) fn take_from(ebpf: &mut Ebpf) -> Result<FlowMap, SourceError> {
        match ebpf.take_map(MAP_NAME) {
            Some(Map::HashMap(map)) => Ok(FlowMap { map }),
            _ => Err(SourceError::Invalid(format!("weir's kernel object has no hash map {MAP_NAME:?}: ebpf/ and the loader disagree"))),
        }
    }

    /// A handle for one worker, on a descriptor of its own.
    pub(crate) fn handle(&self) -> Result<KernelCutoff, SourceError> {
        let fd = self
            .map
            .fd()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| SourceError::Io { what: "duplicating the kernel flow map's descriptor".into(), error: e })?;
        Ok(KernelCutoff { fd })
    }
}

/// One worker's way into the kernel cutoff's flow map: given to one queue's
/// stream layer, which installs the directions past their cutoff and reads
/// back what the kernel counted of them.
#[derive(Debug)]
pub struct KernelCutoff {
    fd: OwnedFd,
}

impl KernelCutoff {
    /// Installs one direction with zeroed counters: from now on the kernel
    /// drops its packets (but SYN, FIN and RST). An entry already there is
    /// another stream's (the same ports reused before it was taken) and is
    /// left as it is: that is a failed install.
    pub(crate) fn install(&mut self, key: &FlowKey) -> Result<(), InstallError> {
        match bpf::map_elem(MapElem::Add, self.fd.as_fd(), &key.0, &mut [0u8; VALUE_LEN]) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::E2BIG) => Err(InstallError::Full),
            Err(_) => Err(InstallError::Failed),
        }
    }

    /// Reads a direction's counters and deletes its entry, in one call:
    /// `None` if it is not in the map.
    pub(crate) fn take(&mut self, key: &FlowKey) -> io::Result<Option<Counters>> {
        let mut v = [0u8; VALUE_LEN];
        let found = bpf::map_elem(MapElem::Take, self.fd.as_fd(), &key.0, &mut v)?;
        Ok(found.then(|| Counters::decode(&v, mono_to_real())))
    }

    /// Reads a direction's counters, leaving the entry in place.
    pub(crate) fn peek(&self, key: &FlowKey) -> io::Result<Option<Counters>> {
        let mut v = [0u8; VALUE_LEN];
        let found = bpf::map_elem(MapElem::Lookup, self.fd.as_fd(), &key.0, &mut v)?;
        Ok(found.then(|| Counters::decode(&v, mono_to_real())))
    }
}

/// CLOCK_REALTIME less CLOCK_MONOTONIC now, in ns.
fn mono_to_real() -> i128 {
    let real = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
    real - i128::from(bpf::monotonic_ns())
}
