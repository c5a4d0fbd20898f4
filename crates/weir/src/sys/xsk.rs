//! The AF_XDP socket as `linux/if_xdp.h` lays it out: the XSK socket, its
//! UMEM registration, the sizes, offsets and mappings of its rings, binding to
//! a queue, statistics, and the empty calls that wake the kernel up. The rings
//! themselves are walked in [`super::xsk_ring`].
//!
//! Each function is a thin, checked wrapper that returns the kernel's error as
//! is; what a call means for capture or forwarding, and what an error should
//! say to the user, is decided by the callers. Kernel structures have their
//! sizes asserted at compile time.

#![allow(unsafe_code)]

use super::mem::Region;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::time::Duration;

/// `struct xdp_umem_reg`.
#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}
const _: () = assert!(size_of::<UmemReg>() == 32);

/// `struct xdp_ring_offset`: where a ring's parts are in its mapping.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct RingOffset {
    pub(crate) producer: u64,
    pub(crate) consumer: u64,
    pub(crate) desc: u64,
    pub(crate) flags: u64,
}
const _: () = assert!(size_of::<RingOffset>() == 32);

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct MmapOffsets {
    pub(crate) rx: RingOffset,
    pub(crate) tx: RingOffset,
    pub(crate) fr: RingOffset,
    pub(crate) cr: RingOffset,
}
const _: () = assert!(size_of::<MmapOffsets>() == 128);

/// `struct xdp_desc`: one packet on the RX ring.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct XdpDesc {
    /// UMEM offset of the packet's first byte (past the frame's headroom).
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) options: u32,
}
const _: () = assert!(size_of::<XdpDesc>() == 16);

/// `struct sockaddr_xdp`.
#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}
const _: () = assert!(size_of::<SockaddrXdp>() == 16);

/// `struct xdp_statistics`: one socket's counters since it was created.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct XdpStatistics {
    pub(crate) rx_dropped: u64,
    pub(crate) rx_invalid_descs: u64,
    pub(crate) tx_invalid_descs: u64,
    pub(crate) rx_ring_full: u64,
    pub(crate) rx_fill_ring_empty_descs: u64,
    pub(crate) tx_ring_empty_descs: u64,
}
const _: () = assert!(size_of::<XdpStatistics>() == 48);

/// `struct xdp_options`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct XdpOptions {
    flags: u32,
}
const _: () = assert!(size_of::<XdpOptions>() == 4);

/// Kernel structures made of integers only: all-zero and any bytes the kernel
/// writes into them are valid values, so `getsockopt` may fill them.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs whose fields are all plain integers.
unsafe trait Plain: Default + Copy {}
// SAFETY: integer fields only.
unsafe impl Plain for MmapOffsets {}
// SAFETY: integer fields only.
unsafe impl Plain for XdpStatistics {}
// SAFETY: integer fields only.
unsafe impl Plain for XdpOptions {}

/// Bytes the kernel keeps in front of each packet in a frame (XDP_PACKET_HEADROOM).
pub(crate) const XDP_PACKET_HEADROOM: usize = 256;

/// `bind` flags (`sxdp_flags`).
pub(crate) const BIND_COPY: u16 = libc::XDP_COPY;
pub(crate) const BIND_ZEROCOPY: u16 = libc::XDP_ZEROCOPY;
pub(crate) const BIND_NEED_WAKEUP: u16 = libc::XDP_USE_NEED_WAKEUP;

/// Which ring a `setsockopt` sizes.
#[derive(Copy, Clone, Debug)]
pub(crate) enum RingKind {
    Rx,
    Fill,
    Completion,
    Tx,
}

/// An AF_XDP socket.
pub(crate) struct XskFd(OwnedFd);

impl XskFd {
    /// A new, unbound socket in the calling thread's network namespace, which is
    /// the one whose interfaces it can bind to.
    pub(crate) fn new() -> io::Result<XskFd> {
        // SAFETY: socket(2) has no memory preconditions; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(XskFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    fn setsockopt<T>(&self, name: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: `value` is a live `T` of `size_of::<T>()` bytes, which the kernel only reads.
        let rc = unsafe {
            libc::setsockopt(self.0.as_raw_fd(), libc::SOL_XDP, name, (value as *const T).cast(), size_of::<T>() as libc::socklen_t)
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Read a socket option; fails if the kernel's structure is shorter than ours
    /// (an older kernel without the fields weir relies on).
    fn getsockopt<T: Plain>(&self, name: libc::c_int) -> io::Result<T> {
        let mut value = T::default();
        let mut len = size_of::<T>() as libc::socklen_t;
        // SAFETY: `value` is a `T` of `len` bytes the kernel may write; `T: Plain`
        // makes any bytes it writes a valid `T`.
        let rc = unsafe { libc::getsockopt(self.0.as_raw_fd(), libc::SOL_XDP, name, (&mut value as *mut T).cast(), &mut len) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        if (len as usize) < size_of::<T>() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "the kernel's AF_XDP is older than Linux 5.9"));
        }
        Ok(value)
    }

    /// XDP_UMEM_REG: give the kernel `umem`, cut into frames of `frame_size`
    /// bytes, with no headroom of our own (the kernel keeps XDP_PACKET_HEADROOM
    /// in front of each packet). The kernel pins the pages and writes only into
    /// frames we put on the fill ring.
    pub(crate) fn register_umem(&self, umem: &Region, frame_size: usize) -> io::Result<()> {
        let chunk_size = u32::try_from(frame_size).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "UMEM frame size too large"))?;
        let reg = UmemReg { addr: umem.as_ptr() as u64, len: umem.len() as u64, chunk_size, headroom: 0, flags: 0, tx_metadata_len: 0 };
        self.setsockopt(libc::XDP_UMEM_REG, &reg)
    }

    pub(crate) fn set_ring_size(&self, ring: RingKind, entries: u32) -> io::Result<()> {
        let name = match ring {
            RingKind::Rx => libc::XDP_RX_RING,
            RingKind::Fill => libc::XDP_UMEM_FILL_RING,
            RingKind::Completion => libc::XDP_UMEM_COMPLETION_RING,
            RingKind::Tx => libc::XDP_TX_RING,
        };
        self.setsockopt(name, &entries)
    }

    pub(crate) fn mmap_offsets(&self) -> io::Result<MmapOffsets> {
        self.getsockopt(libc::XDP_MMAP_OFFSETS)
    }

    /// Map `len` bytes of a ring (`ring` says which page offset). The mapping keeps
    /// the ring's memory alive by itself, whatever happens to the socket.
    pub(crate) fn map_ring(&self, ring: RingKind, len: usize) -> io::Result<Region> {
        let pgoff = match ring {
            RingKind::Rx => libc::XDP_PGOFF_RX_RING as u64,
            RingKind::Fill => libc::XDP_UMEM_PGOFF_FILL_RING,
            RingKind::Completion => libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            RingKind::Tx => libc::XDP_PGOFF_TX_RING as u64,
        };
        // SAFETY: a shared mapping of the socket's ring at the offset the kernel
        // defines for it, with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                self.0.as_raw_fd(),
                pgoff as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        // SAFETY: `ptr..ptr+len` is the mapping just made, and only the Region unmaps it.
        Ok(unsafe { Region::from_mapping(ptr, len, None) })
    }

    pub(crate) fn bind(&self, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
        self.bind_to(&SockaddrXdp { family: libc::AF_XDP as u16, flags, ifindex, queue_id: queue, shared_umem_fd: 0 })
    }

    /// Bind to a queue with the UMEM `umem_owner` registered (XDP_SHARED_UMEM):
    /// this socket must have its own fill and completion rings sized already.
    pub(crate) fn bind_shared(&self, ifindex: u32, queue: u32, umem_owner: BorrowedFd<'_>) -> io::Result<()> {
        self.bind_to(&SockaddrXdp {
            family: libc::AF_XDP as u16,
            flags: libc::XDP_SHARED_UMEM,
            ifindex,
            queue_id: queue,
            shared_umem_fd: umem_owner.as_raw_fd() as u32,
        })
    }

    fn bind_to(&self, addr: &SockaddrXdp) -> io::Result<()> {
        let len = size_of::<SockaddrXdp>() as libc::socklen_t;
        // SAFETY: `addr` is a `sockaddr_xdp` of the size passed, read by the kernel only.
        let rc = unsafe { libc::bind(self.0.as_raw_fd(), (addr as *const SockaddrXdp).cast(), len) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// XDP_STATISTICS: cumulative since the socket was created.
    pub(crate) fn statistics(&self) -> io::Result<XdpStatistics> {
        self.getsockopt(libc::XDP_STATISTICS)
    }

    /// Whether the bound socket runs zero-copy (XDP_OPTIONS).
    pub(crate) fn is_zero_copy(&self) -> io::Result<bool> {
        let o: XdpOptions = self.getsockopt(libc::XDP_OPTIONS)?;
        Ok(o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
    }

    /// Sleep until the RX ring has packets or `timeout` passes; true if readable.
    /// In zero-copy mode poll(2) also wakes the driver when it asked for it.
    pub(crate) fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        super::netdev::poll_readable(self.0.as_fd(), timeout)
    }

    /// Whether the socket can still receive: an error when its interface was
    /// removed (the kernel unbinds the socket: ENXIO) or is down (ENETDOWN).
    /// poll(2) says neither: an unbound socket just never turns readable.
    pub(crate) fn check_bound(&self) -> io::Result<()> {
        // SAFETY: a zero-length, non-blocking recvfrom with no buffer or address:
        // the kernel reads and writes no memory of ours.
        let rc = unsafe {
            libc::recvfrom(self.0.as_raw_fd(), std::ptr::null_mut(), 0, libc::MSG_DONTWAIT, std::ptr::null_mut(), std::ptr::null_mut())
        };
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENXIO) | Some(libc::ENETDOWN) if rc < 0 => Err(e),
            _ => Ok(()),
        }
    }

    /// Tell the driver there are new fill ring entries (it asked with
    /// XDP_RING_NEED_WAKEUP). A wake-up is a hint: when it fails (EAGAIN while the
    /// driver is busy, ENETDOWN) the next one, or the next poll, wakes the driver.
    pub(crate) fn wake_rx(&self) {
        // SAFETY: a zero-length, non-blocking recvfrom with no buffer or address:
        // the kernel reads and writes no memory of ours.
        unsafe {
            libc::recvfrom(self.0.as_raw_fd(), std::ptr::null_mut(), 0, libc::MSG_DONTWAIT, std::ptr::null_mut(), std::ptr::null_mut())
        };
    }
}

impl XskFd {
    /// Ask the kernel to transmit what the TX ring holds (a non-blocking,
    /// empty sendto). In copy mode each call sends a bounded batch (32 frames
    /// in Linux 6.x): `Ok(true)` when it may have left some for another call
    /// (EAGAIN: the batch limit, a busy device or a full completion ring),
    /// `Err(EBUSY)` when the device dropped one frame (its address still comes
    /// back on the completion ring), other errors as the kernel gives them
    /// (ENETDOWN, ENXIO: the interface went down or away).
    pub(crate) fn kick_tx(&self) -> io::Result<bool> {
        // SAFETY: a zero-length, non-blocking sendto with no buffer or address:
        // the kernel reads and writes no memory of ours.
        let rc = unsafe { libc::sendto(self.0.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
        if rc >= 0 {
            return Ok(false);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(true),
            _ => Err(e),
        }
    }
}
