//! System calls of the transmit path: the AF_PACKET socket, its TPACKET_V2 TX
//! ring mapped into our memory, the `send` that hands filled frames to the
//! kernel, and the device facts (flags, MTU, hardware type) asked by ioctl.
//!
//! The ring protocol, per frame (`Documentation/networking/packet_mmap.rst`):
//!
//! ```text
//!   AVAILABLE ──we fill it, then publish──► SEND_REQUEST ──send()──► SENDING
//!       ▲                                                               │
//!       └─────────── the skb's destructor, once the device is done ◄────┘
//! ```
//!
//! We touch a frame's bytes only while it is AVAILABLE; the kernel reads them
//! only from SEND_REQUEST until its destructor sets AVAILABLE again. The status
//! word is the hand-off: read with Acquire, published with Release.

#![allow(unsafe_code)]

pub(crate) use super::packet::{ARPHRD_ETHER, ARPHRD_LOOPBACK};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// `struct tpacket2_hdr` (linux/if_packet.h): the header at the start of each frame.
#[repr(C)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

const _: () = assert!(std::mem::size_of::<Tpacket2Hdr>() == 32);

/// `struct tpacket_req` (linux/if_packet.h): the ring's shape for PACKET_TX_RING.
#[repr(C)]
struct TpacketReq {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
}

const _: () = assert!(std::mem::size_of::<TpacketReq>() == 16);

/// `struct sockaddr_ll` (linux/if_packet.h).
#[repr(C)]
struct SockaddrLl {
    sll_family: u16,
    sll_protocol: u16,
    sll_ifindex: i32,
    sll_hatype: u16,
    sll_pkttype: u8,
    sll_halen: u8,
    sll_addr: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<SockaddrLl>() == 20);

/// Where a frame's packet bytes start when PACKET_TX_HAS_OFF is off: the kernel
/// reads at `tp_hdrlen - sizeof(sockaddr_ll)` = TPACKET_ALIGN(sizeof(tpacket2_hdr)).
pub(crate) const DATA_OFFSET: usize = 32;

const _: () = assert!(DATA_OFFSET == std::mem::size_of::<Tpacket2Hdr>().next_multiple_of(16));

/// Frame sizes must be multiples of TPACKET_ALIGNMENT.
pub(crate) const FRAME_ALIGN: usize = 16;

/// Frame status values (linux/if_packet.h).
pub(crate) const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
pub(crate) const TP_STATUS_WRONG_FORMAT: u32 = 4;

const TPACKET_V2: libc::c_int = 1;

/// The shape of a TX ring: frames of `frame_size` bytes, `block_size / frame_size`
/// of them per block; blocks are contiguous in the mapping.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) frame_size: usize,
    pub(crate) block_size: usize,
    pub(crate) frames: usize,
}

impl Geometry {
    pub(crate) fn frames_per_block(&self) -> usize {
        self.block_size / self.frame_size
    }

    pub(crate) fn blocks(&self) -> usize {
        self.frames / self.frames_per_block()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.block_size * self.blocks()
    }

    /// Byte offset of frame `i` in the mapping: frames never straddle blocks.
    fn offset(&self, i: usize) -> usize {
        let fpb = self.frames_per_block();
        (i / fpb) * self.block_size + (i % fpb) * self.frame_size
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// An AF_PACKET raw socket with protocol 0: it sends, and since it registers no
/// receive hook the kernel never copies incoming (or our own outgoing) packets to it.
pub(crate) fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points at a live T of exactly the length passed.
    check(unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (value as *const T).cast(), std::mem::size_of::<T>() as libc::socklen_t) })
}

pub(crate) fn set_tpacket_v2(fd: &OwnedFd) -> io::Result<()> {
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &TPACKET_V2)
}

/// Frames go straight to the driver's transmit function, past the qdisc layer.
pub(crate) fn set_qdisc_bypass(fd: &OwnedFd) -> io::Result<()> {
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &(1 as libc::c_int))
}

/// Let `bytes` of frames be in flight at once: every frame in the kernel's hands
/// is charged to the send buffer, and the default (about 200 KiB) would stop a
/// ring of megabytes long before it is full. SO_SNDBUFFORCE passes
/// net.core.wmem_max where we may (CAP_NET_ADMIN); otherwise SO_SNDBUF gets what
/// the limit allows.
pub(crate) fn set_send_buffer(fd: &OwnedFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &v).or_else(|_| setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &v))
}

pub(crate) fn set_tx_ring(fd: &OwnedFd, g: &Geometry) -> io::Result<()> {
    let field =
        |n: usize| u32::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("TX ring value {n} too large")));
    let req = TpacketReq {
        tp_block_size: field(g.block_size)?,
        tp_block_nr: field(g.blocks())?,
        tp_frame_size: field(g.frame_size)?,
        tp_frame_nr: field(g.frames)?,
    };
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &req)
}

/// Bind to one interface, with protocol 0 so nothing is received.
pub(crate) fn bind(fd: &OwnedFd, ifindex: u32) -> io::Result<()> {
    let addr = SockaddrLl {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: 0,
        sll_ifindex: i32::try_from(ifindex).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface index out of range"))?,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    };
    // SAFETY: `addr` is a complete sockaddr_ll and its length is passed.
    check(unsafe { libc::bind(fd.as_raw_fd(), (&addr as *const SockaddrLl).cast(), std::mem::size_of::<SockaddrLl>() as libc::socklen_t) })
}

/// Hand every SEND_REQUEST frame to the kernel without waiting: it transmits
/// them in ring order and returns the bytes it took.
pub(crate) fn send_queued(fd: &OwnedFd) -> io::Result<usize> {
    // SAFETY: a zero-length send from a null buffer: with a TX ring the kernel
    // reads the frames from the ring, never from the buffer.
    let n = unsafe { libc::send(fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// What the kernel says about a device.
#[derive(Copy, Clone, Debug)]
pub(crate) struct DeviceFacts {
    pub(crate) up: bool,
    pub(crate) mtu: u32,
    /// ARPHRD_* hardware type.
    pub(crate) hw_type: u16,
}

fn ifreq(iface: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = iface.as_bytes();
    if name.is_empty() || name.len() >= req.ifr_name.len() || name.contains(&0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{iface:?} is not a valid interface name")));
    }
    for (d, &s) in req.ifr_name.iter_mut().zip(name) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

fn ioctl(sock: &OwnedFd, request: libc::c_ulong, req: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: every request passed here (SIOCGIFFLAGS, SIOCGIFMTU, SIOCGIFHWADDR)
    // reads ifr_name and writes only inside `req`.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), request, req as *mut libc::ifreq) })
}

/// Flags, MTU and hardware type of `iface` in the calling thread's namespace.
/// A device that does not exist is `ErrorKind::NotFound`.
pub(crate) fn device(sock: &OwnedFd, iface: &str) -> io::Result<DeviceFacts> {
    let mut req = ifreq(iface)?;
    ioctl(sock, libc::SIOCGIFFLAGS, &mut req).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV) => io::Error::new(io::ErrorKind::NotFound, e),
        _ => e,
    })?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    let mut req = ifreq(iface)?;
    ioctl(sock, libc::SIOCGIFMTU, &mut req)?;
    // SAFETY: SIOCGIFMTU filled the mtu member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    let mut req = ifreq(iface)?;
    ioctl(sock, libc::SIOCGIFHWADDR, &mut req)?;
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member, whose family is the ARPHRD type.
    let hw_type = unsafe { req.ifr_ifru.ifru_hwaddr.sa_family };
    Ok(DeviceFacts { up: flags & libc::IFF_UP as libc::c_short != 0, mtu: u32::try_from(mtu).unwrap_or(0), hw_type })
}

/// The TX ring mapped into our memory. Only this type touches its bytes.
pub(crate) struct RingMap {
    base: NonNull<u8>,
    geometry: Geometry,
}

// SAFETY: the mapping is plain shared memory owned by this value; moving it to
// another thread moves that ownership with it. `&self` methods only do atomic
// loads of status words.
unsafe impl Send for RingMap {}

impl RingMap {
    /// Map the TX ring of `fd` (set up with [`set_tx_ring`] and `geometry`).
    pub(crate) fn map(fd: &OwnedFd, geometry: Geometry) -> io::Result<RingMap> {
        // SAFETY: a fresh shared mapping of the socket's ring; the kernel checks
        // that the length matches the ring it allocated.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), geometry.bytes(), libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(RingMap { base, geometry })
    }

    pub(crate) fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Bytes of packet a frame holds.
    pub(crate) fn capacity(&self) -> usize {
        self.geometry.frame_size - DATA_OFFSET
    }

    fn status_word(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.geometry.frames, "frame {i} out of a ring of {}", self.geometry.frames);
        // SAFETY: frame i is in the mapping (checked above; frames never straddle blocks)
        // and starts with tp_status, 4-aligned (page-aligned mapping, 16-byte frame
        // offsets), which the kernel writes only as one aligned 32-bit store.
        unsafe { &*self.base.as_ptr().add(self.geometry.offset(i)).cast::<AtomicU32>() }
    }

    /// Frame `i`'s status (TP_STATUS_*).
    pub(crate) fn status(&self, i: usize) -> u32 {
        // Acquire: when it reads AVAILABLE, the kernel is done with the frame's
        // bytes, and our writes to them must come after this load.
        self.status_word(i).load(Ordering::Acquire)
    }

    /// Fill frame `i` with `data` and pass it to the kernel (SEND_REQUEST).
    /// Returns false, touching nothing, if the frame is not ours (not AVAILABLE)
    /// or `data` does not fit.
    pub(crate) fn fill(&mut self, i: usize, data: &[u8]) -> bool {
        if data.len() > self.capacity() || self.status(i) != TP_STATUS_AVAILABLE {
            return false;
        }
        let frame = self.geometry.offset(i);
        // SAFETY: the frame is AVAILABLE (Acquire load above), so the kernel does
        // not read or write it until we publish SEND_REQUEST below, and `&mut self`
        // means no other writer in this process. The header and the data
        // (DATA_OFFSET + len <= frame_size, checked above) lie inside frame i.
        unsafe {
            let hdr = self.base.as_ptr().add(frame).cast::<Tpacket2Hdr>();
            std::ptr::addr_of_mut!((*hdr).tp_len).write(data.len() as u32);
            std::ptr::addr_of_mut!((*hdr).tp_snaplen).write(data.len() as u32);
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(frame + DATA_OFFSET), data.len());
        }
        // Release: the length and bytes written above are visible to the kernel
        // before it can see SEND_REQUEST.
        self.status_word(i).store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        true
    }
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; no reference into it
        // outlives `self`. Frames still in flight keep their pages alive in the
        // kernel (the skbs hold page references), so this cannot pull memory
        // from under the device.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.geometry.bytes());
        }
    }
}
