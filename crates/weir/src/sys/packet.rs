//! AF_PACKET sockets as `linux/if_packet.h` lays them out: the socket and its
//! options (TPACKET_V3, fanout groups, filters, promiscuous membership,
//! statistics), the TPACKET_V3 receive ring's request and mapping, and the
//! headers the kernel writes into the ring's blocks. Walking the ring is the
//! AF_PACKET source's (`source/afpacket/ring.rs`): its blocks become the
//! pool's, which this layer knows nothing of.
//!
//! Each call is a thin, checked wrapper that returns the kernel's error as is.

#![allow(unsafe_code)]

use super::bpf::BpfInsn;
use super::mem::Region;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
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
pub(crate) const TP_STATUS_KERNEL: u32 = 0;
pub(crate) const TP_STATUS_USER: u32 = 1;
pub(crate) const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
pub(crate) const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

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
pub(crate) struct BlockDesc {
    version: u32,
    offset_to_priv: u32,
    pub(crate) block_status: u32,
    pub(crate) num_pkts: u32,
    pub(crate) offset_to_first_pkt: u32,
    blk_len: u32,
    seq_num: u64,
    ts_first_pkt: [u32; 2],
    ts_last_pkt: [u32; 2],
}

/// `struct tpacket3_hdr` with its `tpacket_hdr_variant1`: the head of every packet.
#[repr(C)]
#[derive(Copy, Clone)]
pub(crate) struct Tpacket3Hdr {
    pub(crate) tp_next_offset: u32,
    pub(crate) tp_sec: u32,
    pub(crate) tp_nsec: u32,
    pub(crate) tp_snaplen: u32,
    pub(crate) tp_len: u32,
    pub(crate) tp_status: u32,
    pub(crate) tp_mac: u16,
    tp_net: u16,
    tp_rxhash: u32,
    pub(crate) tp_vlan_tci: u32,
    pub(crate) tp_vlan_tpid: u16,
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
    assert!(size_of::<libc::sockaddr_ll>() == 20);
};

/// `TPACKET3_HDRLEN`: the packet header and the `sockaddr_ll` after it; the
/// kernel puts the link-layer header no earlier than this.
pub(crate) const TPACKET3_HDRLEN: usize = 48 + size_of::<libc::sockaddr_ll>();
/// Bytes the kernel reserves in front of each packet's link-layer header on top
/// of its own, so a VLAN tag it took out always fits back in (as libpcap does).
pub(crate) const VLAN_TAG_LEN: u32 = 4;
/// The most a block spends besides packet bytes on one packet: the block header
/// (48), the packet headers rounded up (`TPACKET_ALIGN(68 + 16)` = 96), the
/// reserve, and alignment of the next packet (16).
pub(crate) const FRAME_OVERHEAD: usize = 48 + 96 + VLAN_TAG_LEN as usize + 16;

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
    /// after `timeout_ms` at the latest, and map it. The mapping holds its own
    /// descriptor of the socket: the ring may be read after this `PacketSocket`
    /// is gone, and the kernel must not free it meanwhile.
    pub(crate) fn map_rx_ring(&self, block_bytes: u32, block_count: u32, timeout_ms: u32) -> io::Result<Region> {
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
        let owner = match self.fd.try_clone() {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: unmapping the mapping just made, which nothing else knows of.
                unsafe { libc::munmap(p, len) };
                return Err(e);
            }
        };
        // SAFETY: `ptr..ptr+len` is the mapping just made, and only the region will unmap it.
        Ok(unsafe { Region::from_mapping(ptr, len, Some(owner)) })
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

/// An AF_PACKET socket that receives nothing (protocol 0) and exists only to hold
/// the interface promiscuous: the kernel drops the membership when the socket
/// closes, however the process ends, so a crash never leaves the interface
/// promiscuous.
pub(crate) struct Promiscuous {
    _membership: PacketSocket,
}

/// Put interface `ifindex` in promiscuous mode for as long as the result lives.
pub(crate) fn promiscuous(ifindex: u32) -> io::Result<Promiscuous> {
    let socket = PacketSocket::new()?;
    socket.add_promisc(ifindex)?;
    Ok(Promiscuous { _membership: socket })
}
