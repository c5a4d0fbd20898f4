//! Every system call of the AF_PACKET source, and the TPACKET_V3 ring as the
//! kernel lays it out.
//!
//! A [`PacketSocket`] is one AF_PACKET socket; [`Ring`] is its receive ring,
//! mapped once and wrapped in a [`BlockArena`] shared with the kernel, so cells
//! point straight into the kernel's blocks.
//!
//! Who may touch a block. The kernel fills a block while its `block_status` is
//! `TP_STATUS_KERNEL`, then sets `TP_STATUS_USER` after a write barrier and does
//! not touch it again until user space stores `TP_STATUS_KERNEL`. [`Ring`] keeps
//! that protocol and nothing else may: it adopts blocks only in ring order (the
//! order the kernel fills them) and only once the kernel has handed them over;
//! it remembers which blocks were walked, so a walked block is never adopted
//! twice; and it hands a block back only through a [`Walked`] token (so only a
//! block it adopted) and only when [`BlockArena::is_unheld`] says no chunk
//! holds it any more.
//!
//! Nothing in this source calls [`BlockRef::bytes`]: packet headers are read,
//! and VLAN tags written back in front of the packet data, through raw pointers
//! into the part of a block that no cell covers yet, so no Rust reference ever
//! overlaps a write.

#![allow(unsafe_code)]

use crate::filter::BpfInsn;
use crate::pool::{BlockArena, BlockId, BlockRef};
use crate::sys::mem::Region;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

// linux/if_packet.h
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_RESERVE: libc::c_int = 12;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_FANOUT_DATA: libc::c_int = 22;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_MR_PROMISC: u16 = 1;
const TPACKET_V3: libc::c_int = 2;
pub(crate) const PACKET_FANOUT_HASH: u16 = 0;
pub(crate) const PACKET_FANOUT_LB: u16 = 1;
pub(crate) const PACKET_FANOUT_CPU: u16 = 2;
pub(crate) const PACKET_FANOUT_QM: u16 = 5;
pub(crate) const PACKET_FANOUT_EBPF: u16 = 7;
pub(crate) const PACKET_FANOUT_FLAG_ROLLOVER: u16 = 0x1000;
const PACKET_FANOUT_FLAG_UNIQUEID: u16 = 0x2000;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

// linux/if_arp.h
pub(crate) const ARPHRD_ETHER: u16 = 1;
pub(crate) const ARPHRD_RAWIP: u16 = 519;
pub(crate) const ARPHRD_LOOPBACK: u16 = 772;
pub(crate) const ARPHRD_IEEE80211_RADIOTAP: u16 = 803;
pub(crate) const ARPHRD_NONE: u16 = 0xfffe;

/// `struct tpacket_req3`.
#[repr(C)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

/// `struct tpacket_block_desc` with its `tpacket_hdr_v1`: the head of every block.
#[repr(C)]
struct BlockDesc {
    version: u32,
    offset_to_priv: u32,
    block_status: u32,
    num_pkts: u32,
    offset_to_first_pkt: u32,
    blk_len: u32,
    seq_num: u64,
    ts_first_pkt: [u32; 2],
    ts_last_pkt: [u32; 2],
}

/// `struct tpacket3_hdr` with its `tpacket_hdr_variant1`: the head of every packet.
#[repr(C)]
#[derive(Copy, Clone)]
struct Tpacket3Hdr {
    tp_next_offset: u32,
    tp_sec: u32,
    tp_nsec: u32,
    tp_snaplen: u32,
    tp_len: u32,
    tp_status: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_rxhash: u32,
    tp_vlan_tci: u32,
    tp_vlan_tpid: u16,
    tp_padding: u16,
    tp_padding2: [u8; 8],
}

/// `struct tpacket_stats_v3`.
#[repr(C)]
#[derive(Copy, Clone)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

/// `struct packet_mreq`.
#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: u16,
    mr_alen: u16,
    mr_address: [u8; 8],
}

/// `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const BpfInsn,
}

const _: () = {
    assert!(size_of::<TpacketReq3>() == 28);
    assert!(size_of::<BlockDesc>() == 48);
    assert!(std::mem::offset_of!(BlockDesc, block_status) == 8);
    assert!(std::mem::offset_of!(BlockDesc, num_pkts) == 12);
    assert!(size_of::<Tpacket3Hdr>() == 48);
    assert!(size_of::<TpacketStatsV3>() == 12);
    assert!(size_of::<PacketMreq>() == 16);
    assert!(size_of::<SockFprog>() == 16);
    assert!(size_of::<BpfInsn>() == 8);
    assert!(size_of::<libc::sockaddr_ll>() == 20);
};

/// `TPACKET3_HDRLEN`: the packet header and the `sockaddr_ll` after it; the
/// kernel puts the link-layer header no earlier than this.
const TPACKET3_HDRLEN: usize = 48 + size_of::<libc::sockaddr_ll>();
/// Bytes the kernel reserves in front of each packet's link-layer header on top
/// of its own, so a VLAN tag it took out always fits back in (as libpcap does).
pub(crate) const VLAN_TAG_LEN: u32 = 4;
/// The most a block spends besides packet bytes on one packet: the block header
/// (48), the packet headers rounded up (`TPACKET_ALIGN(68 + 16)` = 96), the
/// reserve, and alignment of the next packet (16).
pub(crate) const FRAME_OVERHEAD: usize = 48 + 96 + VLAN_TAG_LEN as usize + 16;
/// Ethernet: destination and source addresses, in front of where a tag goes.
const MAC_ADDRS: usize = 12;

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// One AF_PACKET socket.
pub(crate) struct PacketSocket {
    fd: OwnedFd,
}

impl std::os::fd::AsFd for PacketSocket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl PacketSocket {
    /// A raw packet socket that receives nothing yet: protocol 0 keeps it out of
    /// the receive path until [`bind`](Self::bind) names the protocol, so no packet
    /// arrives before its filter and its fanout group are in place.
    pub(crate) fn new() -> io::Result<PacketSocket> {
        // SAFETY: plain socket(2) call; the result is checked.
        let fd = check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(PacketSocket { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    fn set<T>(&self, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: `value` points to a live `T` of exactly the length passed, read by
        // the kernel during the call only.
        let rc =
            unsafe { libc::setsockopt(self.fd.as_raw_fd(), level, name, (value as *const T).cast(), size_of::<T>() as libc::socklen_t) };
        check(rc).map(drop)
    }

    /// Read a socket option the kernel fills completely (all of ours are plain
    /// integers or structs of them, for which any bytes are a valid value).
    fn get<T: Copy>(&self, level: libc::c_int, name: libc::c_int) -> io::Result<T> {
        let mut value = MaybeUninit::<T>::zeroed();
        let mut len = size_of::<T>() as libc::socklen_t;
        // SAFETY: `value` has room for `len` bytes, and the kernel writes at most `len`.
        let rc = unsafe { libc::getsockopt(self.fd.as_raw_fd(), level, name, value.as_mut_ptr().cast(), &mut len) };
        check(rc)?;
        // SAFETY: zero-initialised and then (partly) written by the kernel; every
        // `T` used here is plain integers, valid for any bytes.
        Ok(unsafe { value.assume_init() })
    }

    /// TPACKET_V3: variable-sized packets packed into blocks.
    pub(crate) fn use_tpacket_v3(&self) -> io::Result<()> {
        self.set(libc::SOL_PACKET, PACKET_VERSION, &TPACKET_V3)
    }

    /// Leave out the packets the host sends on the interface (PACKET_IGNORE_OUTGOING,
    /// Linux 4.20): a forwarder must not receive what it sends.
    pub(crate) fn ignore_outgoing(&self) -> io::Result<()> {
        self.set(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &1 as &libc::c_int)
    }

    /// Room the kernel leaves in front of each packet (for VLAN tags put back).
    pub(crate) fn reserve(&self, bytes: u32) -> io::Result<()> {
        self.set(libc::SOL_PACKET, PACKET_RESERVE, &bytes)
    }

    /// The ARPHRD_ hardware type of `iface` (SIOCGIFHWADDR), in this socket's namespace.
    pub(crate) fn hardware_type(&self, iface: &str) -> io::Result<u16> {
        // SAFETY: ifreq is plain old data; all zeroes is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        if iface.len() >= req.ifr_name.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{iface:?} is not a valid interface name")));
        }
        for (d, &s) in req.ifr_name.iter_mut().zip(iface.as_bytes()) {
            *d = s as libc::c_char;
        }
        // SAFETY: SIOCGIFHWADDR reads ifr_name and writes ifr_hwaddr of `req`.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) })?;
        // SAFETY: the kernel filled the hwaddr member of the union.
        Ok(unsafe { req.ifr_ifru.ifru_hwaddr.sa_family })
    }

    /// Put the interface in promiscuous mode for as long as this socket lives.
    pub(crate) fn add_promisc(&self, ifindex: u32) -> io::Result<()> {
        let mreq = PacketMreq { mr_ifindex: ifindex as libc::c_int, mr_type: PACKET_MR_PROMISC, mr_alen: 0, mr_address: [0; 8] };
        self.set(libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)
    }

    /// Replace the socket's filter (SO_ATTACH_FILTER swaps it atomically).
    pub(crate) fn attach_filter(&self, program: &[BpfInsn]) -> io::Result<()> {
        let len = u16::try_from(program.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter program too long"))?;
        let prog = SockFprog { len, filter: program.as_ptr() };
        // The kernel copies the instructions during the call; `program` outlives it.
        self.set(libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
    }

    /// Receive every protocol on `ifindex`, from now on.
    pub(crate) fn bind(&self, ifindex: u32) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = ifindex as libc::c_int;
        // SAFETY: `addr` is a valid sockaddr_ll of the length passed.
        let rc = unsafe {
            libc::bind(self.fd.as_raw_fd(), (&addr as *const libc::sockaddr_ll).cast(), size_of::<libc::sockaddr_ll>() as libc::socklen_t)
        };
        check(rc).map(drop)
    }

    /// Found a fanout group with an id the kernel picks, unused in this namespace;
    /// returns the id for the other members.
    pub(crate) fn found_fanout(&self, mode_flags: u16) -> io::Result<u16> {
        self.join_fanout(0, mode_flags | PACKET_FANOUT_FLAG_UNIQUEID)?;
        let arg: u32 = self.get(libc::SOL_PACKET, PACKET_FANOUT)?;
        Ok(arg as u16)
    }

    /// Join fanout group `id` (mode and flags as its founder gave them).
    pub(crate) fn join_fanout(&self, id: u16, mode_flags: u16) -> io::Result<()> {
        let arg = u32::from(id) | (u32::from(mode_flags) << 16);
        self.set(libc::SOL_PACKET, PACKET_FANOUT, &arg)
    }

    /// Make `program`, a loaded BPF_PROG_TYPE_SOCKET_FILTER program, the demux of
    /// the PACKET_FANOUT_EBPF group this socket is in. The group takes its own
    /// reference to the program, held until the group is gone.
    pub(crate) fn set_fanout_program(&self, program: BorrowedFd<'_>) -> io::Result<()> {
        let fd = program.as_raw_fd() as u32;
        self.set(libc::SOL_PACKET, PACKET_FANOUT_DATA, &fd)
    }

    /// Packets the kernel dropped for this socket's full ring since the last call
    /// (reading resets the kernel's counters).
    pub(crate) fn take_drops(&self) -> io::Result<u32> {
        let st: TpacketStatsV3 = self.get(libc::SOL_PACKET, PACKET_STATISTICS)?;
        Ok(st.tp_drops)
    }

    /// Sleep until the kernel hands over a block or `timeout` passes. An error the
    /// socket reports (the interface went down or away) comes back as `Err`.
    pub(crate) fn wait_readable(&self, timeout: Duration) -> io::Result<()> {
        let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN | libc::POLLERR, revents: 0 };
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd, count 1.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(()) } else { Err(e) };
        }
        if pfd.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            let err: libc::c_int = self.get(libc::SOL_SOCKET, libc::SO_ERROR)?;
            if err != 0 {
                return Err(io::Error::from_raw_os_error(err));
            }
        }
        Ok(())
    }

    /// Set up the receive ring of `block_count` blocks of `block_bytes`, handed over
    /// after `timeout_ms` at the latest, and map it.
    pub(crate) fn map_ring(&self, block_bytes: u32, block_count: u32, timeout_ms: u32, snaplen: u32, vlan: bool) -> io::Result<Ring> {
        let req = TpacketReq3 {
            tp_block_size: block_bytes,
            tp_block_nr: block_count,
            // TPACKET_V3 packs packets of any size; the frame fields only have to be
            // consistent (one "frame" per block).
            tp_frame_size: block_bytes,
            tp_frame_nr: block_count,
            tp_retire_blk_tov: timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        self.set(libc::SOL_PACKET, PACKET_RX_RING, &req)?;
        let len = block_bytes as usize * block_count as usize;
        // SAFETY: mapping the socket's ring, whose size is exactly `len`, shared
        // with the kernel; no address hint. The result is checked.
        let p =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, self.fd.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).expect("mmap does not return NULL on success");
        // The mapping holds its own descriptor of the socket: workers may read the
        // ring after this `PacketSocket` is gone, and the kernel must not free it.
        let owner = match self.fd.try_clone() {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: unmapping the mapping just made, which nothing else knows of.
                unsafe { libc::munmap(p, len) };
                return Err(e);
            }
        };
        // SAFETY: `ptr..ptr+len` is the mapping just made, and only the region will unmap it.
        let region = unsafe { Region::from_mapping(ptr, len, Some(owner)) };
        // SAFETY: the region holds `block_count` blocks of `block_bytes`; the kernel
        // writes a block only while it is TP_STATUS_KERNEL, and `Ring::give_back`
        // stores that only for a block `is_unheld` reports free (see the module doc).
        let arena = unsafe { BlockArena::over_mapping(region, block_bytes as usize, block_count as usize) };
        let timeout = Duration::from_millis(u64::from(timeout_ms));
        Ok(Ring { walked: vec![false; arena.count()].into(), arena, next: 0, adopted: 0, snaplen, vlan, timeout })
    }
}

/// `membarrier(2)` command that waits for an RCU grace period on every CPU.
const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
/// How long to wait where the kernel refuses MEMBARRIER_CMD_GLOBAL (nohz_full
/// kernels): far longer than the softirq that steers and writes one packet runs.
const GRACE_FALLBACK: Duration = Duration::from_millis(50);

/// Return once every packet the kernel steered before the call is written into
/// its socket's ring. A fanout demux reads the bucket table and the chosen
/// socket's `tpacket_rcv` writes the packet within one RCU read-side section
/// (the receive softirq, or `dev_queue_xmit_nit` for outgoing packets), and
/// MEMBARRIER_CMD_GLOBAL waits for every such section in progress to end
/// (`synchronize_rcu`). So after a table change and this call, no packet steered
/// by the old entry is still on its way.
pub(crate) fn wait_for_steered_packets() {
    // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0 as libc::c_long, 0 as libc::c_long) };
    if rc != 0 {
        std::thread::sleep(GRACE_FALLBACK);
    }
}

/// A socket's TPACKET_V3 receive ring, walked in the kernel's order.
pub(crate) struct Ring {
    arena: Arc<BlockArena>,
    /// The block the kernel fills after the last one adopted.
    next: BlockId,
    /// Blocks adopted since the ring was mapped: the sequence number of the next one.
    adopted: u64,
    /// Blocks adopted and not yet given back: the kernel still shows them as
    /// TP_STATUS_USER, but their packets were taken.
    walked: Box<[bool]>,
    snaplen: u32,
    /// Put VLAN tags the kernel took out back in front of the EtherType.
    vlan: bool,
    /// The block timeout: the kernel hands a block with packets over this
    /// long after it opened it at the latest.
    timeout: Duration,
}

/// A block the kernel handed over, adopted for reading; only [`Ring::next_block`] makes one.
pub(crate) struct ReadyBlock {
    block: BlockRef,
    packets: u32,
    first: usize,
}

impl ReadyBlock {
    /// The hold that lets cells point into the block.
    pub(crate) fn block(&self) -> &BlockRef {
        &self.block
    }

    /// Packets the kernel put in the block.
    pub(crate) fn packets(&self) -> u32 {
        self.packets
    }

    /// Offset of the first packet's header in the block.
    pub(crate) fn first(&self) -> usize {
        self.first
    }
}

/// A block whose packets were all taken; it goes back to the kernel through
/// [`Ring::give_back`] once no chunk holds it. Not `Clone`: given back once.
pub(crate) struct Walked {
    id: BlockId,
    /// The address of the arena the block belongs to: an identity, so a token is
    /// only ever given back to its own ring.
    arena: usize,
}

/// One packet of a block.
pub(crate) struct Frame {
    /// Where its captured bytes are in the block.
    pub(crate) data: Range<usize>,
    pub(crate) wire_len: u32,
    pub(crate) ts_ns: u64,
    /// Offset of the next packet's header, relative to this one's.
    pub(crate) next: usize,
}

/// The kernel wrote a packet header that does not fit its block.
#[derive(Debug)]
pub(crate) struct BadFrame(pub(crate) String);

impl Ring {
    fn status(&self, id: BlockId) -> &AtomicU32 {
        let at = self.arena.block_ptr(id).wrapping_add(std::mem::offset_of!(BlockDesc, block_status));
        // SAFETY: `at` is the 4-byte aligned (blocks are page aligned, the field is at
        // offset 8) `block_status` word of a block of the mapping, which lives as long
        // as `self.arena`; the kernel and we only ever access it as one 32-bit word.
        unsafe { AtomicU32::from_ptr(at.cast_mut().cast()) }
    }

    /// The `num_pkts` word of a block's descriptor.
    fn packets_in(&self, id: BlockId) -> &AtomicU32 {
        let at = self.arena.block_ptr(id).wrapping_add(std::mem::offset_of!(BlockDesc, num_pkts));
        // SAFETY: as for `status`: the 4-byte aligned `num_pkts` word of a block of
        // the mapping. The kernel writes it while it fills the block, so it is only
        // ever read here as one atomic 32-bit word.
        unsafe { AtomicU32::from_ptr(at.cast_mut().cast()) }
    }

    /// Where the kernel's filling stands, as a block sequence number: every
    /// packet already in the ring is in a block numbered below it. That is every
    /// block handed over and not adopted yet, plus the block the kernel is filling
    /// if it holds a packet. An empty block being filled is not counted: the kernel
    /// never retires an empty block, and whatever lands in it arrives after this
    /// call.
    pub(crate) fn fill_point(&self) -> u64 {
        let (ready, _) = self.scan_ahead(self.arena.count());
        self.adopted + ready as u64 + u64::from(self.filling(ready) > 0)
    }

    /// Packets in the ring not adopted yet: in blocks handed over, and in the
    /// block the kernel is filling (a hint, read while the kernel writes it).
    pub(crate) fn waiting_packets(&self) -> u64 {
        let (ready, packets) = self.scan_ahead(self.arena.count());
        packets + u64::from(self.filling(ready))
    }

    /// Packets not adopted yet in the blocks below `point`, a
    /// [`fill_point`](Self::fill_point) read earlier (the block then being
    /// filled counted as it is now, a hint while the kernel writes it).
    pub(crate) fn packets_before(&self, point: u64) -> u64 {
        let blocks = usize::try_from(point.saturating_sub(self.adopted)).unwrap_or(usize::MAX).min(self.arena.count());
        let (ready, packets) = self.scan_ahead(blocks);
        packets + if ready < blocks { u64::from(self.filling(ready)) } else { 0 }
    }

    /// How long after opening a block the kernel hands it over at the latest.
    pub(crate) fn block_timeout(&self) -> Duration {
        self.timeout
    }

    /// Packets in the block the kernel is filling, `ready` blocks after the next
    /// one to adopt; 0 when every block is handed over or the kernel is stopped
    /// at a block we still hold.
    fn filling(&self, ready: usize) -> u32 {
        let n = self.arena.count();
        let id = ((self.next as usize + ready) % n) as BlockId;
        if ready == n || self.walked[id as usize] {
            return 0;
        }
        // Relaxed: a hint about a block still the kernel's. Callers that need every
        // packet counted ordered this read after those packets were written (see `rebalance`).
        self.packets_in(id).load(Ordering::Relaxed)
    }

    /// Blocks handed over and not adopted, counted from the next one in ring
    /// order up to `most`, and the packets in them.
    fn scan_ahead(&self, most: usize) -> (usize, u64) {
        let n = self.arena.count();
        let (mut ready, mut packets) = (0, 0u64);
        while ready < most.min(n) {
            let id = ((self.next as usize + ready) % n) as BlockId;
            // Acquire: as in `next_block`, so the descriptor read below is the kernel's final one.
            if self.walked[id as usize] || self.status(id).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                break;
            }
            packets += u64::from(self.packets_in(id).load(Ordering::Relaxed));
            ready += 1;
        }
        (ready, packets)
    }

    /// Blocks adopted since the ring was mapped.
    pub(crate) fn adopted(&self) -> u64 {
        self.adopted
    }

    /// Adopt the next block in ring order if the kernel has handed it over.
    pub(crate) fn next_block(&mut self) -> Result<Option<ReadyBlock>, BadFrame> {
        let id = self.next;
        // Acquire: pairs with the kernel's write barrier before it set TP_STATUS_USER,
        // so the block's contents are visible before we read them.
        if self.walked[id as usize] || self.status(id).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return Ok(None);
        }
        // Not walked, so given back, and nothing can hold a block we gave back.
        let block = self.arena.adopt(id).ok_or_else(|| BadFrame(format!("block {id} handed over while still held")))?;
        self.walked[id as usize] = true;
        self.next = (id + 1) % self.arena.count() as BlockId;
        self.adopted += 1;
        // SAFETY: the block is ours (TP_STATUS_USER, adopted), lies in the mapping,
        // and starts with a block descriptor; read by value, unaligned-safe.
        let desc = unsafe { std::ptr::read_unaligned(self.arena.block_ptr(id).cast::<BlockDesc>()) };
        let first = desc.offset_to_first_pkt as usize;
        if desc.num_pkts > 0 && (first < size_of::<BlockDesc>() || first >= self.arena.block_bytes()) {
            return Err(BadFrame(format!("block {id}: first packet at offset {first}")));
        }
        Ok(Some(ReadyBlock { block, packets: desc.num_pkts, first }))
    }

    /// The packet whose header is at offset `at` of `block`. With VLAN reinsertion
    /// on, a tag the kernel took out is written back in front of the EtherType
    /// first, and the header rewritten to say so, so a second call (after waiting for
    /// a cell) finds the same packet.
    pub(crate) fn frame(&self, ready: &ReadyBlock, at: usize) -> Result<Frame, BadFrame> {
        let block = &ready.block;
        assert!(Arc::ptr_eq(block.arena(), &self.arena), "a block of another ring");
        let size = self.arena.block_bytes();
        let bad = |what: String| BadFrame(format!("block {}, packet at offset {at}: {what}", block.id()));
        if at + size_of::<Tpacket3Hdr>() > size {
            return Err(bad("header past the end of the block".into()));
        }
        let base = self.arena.block_ptr(block.id()).wrapping_add(at).cast_mut();
        // SAFETY: `base..base+48` lies in the block (checked above), which we hold
        // and the kernel handed over; read by value, unaligned-safe.
        let mut h = unsafe { std::ptr::read_unaligned(base.cast::<Tpacket3Hdr>()) };
        let next = h.tp_next_offset as usize;
        // The packet's area ends where the next one's header starts (or at the end of
        // the block), and that is what the checks below keep every access inside.
        let end = if next == 0 { size - at } else { next };
        if at + end > size || (next != 0 && next < size_of::<Tpacket3Hdr>()) {
            return Err(bad(format!("next packet at +{next}")));
        }
        let (mac, caplen) = (usize::from(h.tp_mac), h.tp_snaplen as usize);
        if mac < TPACKET3_HDRLEN || mac + caplen > end {
            return Err(bad(format!("{caplen} bytes at +{mac}")));
        }
        if self.vlan && h.tp_status & TP_STATUS_VLAN_VALID != 0 && caplen >= MAC_ADDRS {
            let tpid = if h.tp_status & TP_STATUS_VLAN_TPID_VALID != 0 { h.tp_vlan_tpid } else { 0x8100 };
            let tag = [tpid.to_be_bytes(), (h.tp_vlan_tci as u16).to_be_bytes()];
            let tag_len = VLAN_TAG_LEN as usize;
            if mac < TPACKET3_HDRLEN + tag_len {
                return Err(bad("no room in front of the packet for its VLAN tag".into()));
            }
            // SAFETY: the bytes written, [base+mac-4, base+mac+12) and the header at base,
            // are in this packet's area (checked above), past its sockaddr_ll; no cell or
            // reference points into this packet yet, so nobody reads them meanwhile.
            unsafe {
                std::ptr::copy(base.add(mac), base.add(mac - tag_len), MAC_ADDRS);
                std::ptr::copy_nonoverlapping(tag.as_flattened().as_ptr(), base.add(mac - tag_len + MAC_ADDRS), tag_len);
            }
            h.tp_mac -= VLAN_TAG_LEN as u16;
            h.tp_snaplen = (h.tp_snaplen + VLAN_TAG_LEN).min(self.snaplen);
            h.tp_len = h.tp_len.saturating_add(VLAN_TAG_LEN);
            h.tp_status &= !TP_STATUS_VLAN_VALID;
            // SAFETY: the header of this packet, as above.
            unsafe { std::ptr::write_unaligned(base.cast::<Tpacket3Hdr>(), h) };
        }
        let start = at + usize::from(h.tp_mac);
        Ok(Frame {
            data: start..start + h.tp_snaplen as usize,
            wire_len: h.tp_len,
            ts_ns: u64::from(h.tp_sec) * 1_000_000_000 + u64::from(h.tp_nsec),
            next,
        })
    }

    /// The captured bytes of a packet of `ready` that [`frame`](Self::frame)
    /// returned, to read (hash, copy aside) while the block is held.
    pub(crate) fn packet_bytes<'a>(&'a self, ready: &'a ReadyBlock, f: &Frame) -> &'a [u8] {
        assert!(Arc::ptr_eq(ready.block.arena(), &self.arena), "a block of another ring");
        assert!(f.data.start <= f.data.end && f.data.end <= self.arena.block_bytes(), "a frame outside its block");
        let at = self.arena.block_ptr(ready.block.id()).wrapping_add(f.data.start);
        // SAFETY: the range is in an adopted block (checked above); the kernel writes it
        // only after `give_back` (which needs `&mut self`), and `frame` rewrites a packet's
        // bytes once, before returning it, so nothing writes them while this borrow lives.
        unsafe { std::slice::from_raw_parts(at, f.data.len()) }
    }

    /// Every packet of `block` was taken: stop holding it for reading.
    pub(crate) fn done(&self, ready: ReadyBlock) -> Walked {
        assert!(Arc::ptr_eq(ready.block.arena(), &self.arena), "a block of another ring");
        Walked { id: ready.block.id(), arena: Arc::as_ptr(&self.arena) as usize }
    }

    /// Give a walked block back to the kernel if no chunk holds it any more;
    /// otherwise hand the token back.
    pub(crate) fn give_back(&mut self, w: Walked) -> Result<(), Walked> {
        assert_eq!(w.arena, Arc::as_ptr(&self.arena) as usize, "a block of another ring");
        if !self.arena.is_unheld(w.id) {
            return Err(w);
        }
        self.walked[w.id as usize] = false;
        // Release: every read of the block (ours, and the workers', which `is_unheld`
        // acquired) and our VLAN rewrites happen before the kernel sees the block as
        // its own again and overwrites it.
        self.status(w.id).store(TP_STATUS_KERNEL, Ordering::Release);
        Ok(())
    }
}
