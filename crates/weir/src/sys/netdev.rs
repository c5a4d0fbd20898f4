//! Network namespaces and what the kernel says of interfaces: their index,
//! hardware address, RX queues, IP addresses, and whether they are still up;
//! and waiting for a socket to turn readable. Device facts are asked by ioctl
//! of the calling thread's namespace, not read from sysfs, which shows the
//! namespace that mounted it.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Run `f` with the calling thread inside network namespace `ns` (a name under
/// /var/run/netns, or a path such as /proc/PID/ns/net), then come back. Sockets
/// made inside stay bound to that namespace.
pub(crate) fn in_netns<T>(ns: &Path, f: impl FnOnce() -> T) -> io::Result<T> {
    let path = if ns.components().count() == 1 { Path::new("/var/run/netns").join(ns) } else { PathBuf::from(ns) };
    let target = File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("network namespace {}: {e}", path.display())))?;
    let home = File::open("/proc/thread-self/ns/net")?;
    setns(&target)
        .map_err(|e| io::Error::new(e.kind(), format!("entering network namespace {}: {e} (needs CAP_SYS_ADMIN)", path.display())))?;
    let out = f();
    setns(&home).map_err(|e| io::Error::new(e.kind(), format!("returning from network namespace {}: {e}", path.display())))?;
    Ok(out)
}

fn setns(ns: &File) -> io::Result<()> {
    // SAFETY: `ns` is an open namespace file; CLONE_NEWNET restricts it to a network one.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A socket good for interface ioctls, in the calling thread's namespace.
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq(iface: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = iface.as_bytes();
    if name.is_empty() || name.len() >= req.ifr_name.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{iface:?} is not a valid interface name")));
    }
    for (d, &s) in req.ifr_name.iter_mut().zip(name) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

/// The index of `iface` in the calling thread's namespace.
pub(crate) fn ifindex(iface: &str) -> io::Result<u32> {
    let sock = ioctl_socket()?;
    let mut req = ifreq(iface)?;
    // SAFETY: SIOCGIFINDEX reads ifr_name and writes ifr_ifindex of `req`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFINDEX, &mut req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled the ifindex member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_ifindex } as u32)
}

/// The hardware address of `iface` in the calling thread's namespace.
pub(crate) fn hw_address(iface: &str) -> io::Result<[u8; 6]> {
    let sock = ioctl_socket()?;
    let mut req = ifreq(iface)?;
    // SAFETY: SIOCGIFHWADDR reads ifr_name and writes ifr_hwaddr of `req`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled the hwaddr member of the union.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    Ok(std::array::from_fn(|i| data[i] as u8))
}

/// Sleep until `fd` is readable or `timeout` passes; true if readable (false
/// too when a signal cut the wait short).
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // Rounded up: a wait of less than a millisecond must not become a busy loop.
    let ms = libc::c_int::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd, for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
    }
    Ok(rc > 0 && pfd.revents & libc::POLLIN != 0)
}

/// An interface watched from a socket of its namespace, so a thread in any
/// namespace can ask whether it is still there and up.
pub(crate) struct LinkWatch {
    sock: OwnedFd,
    ifindex: u32,
}

impl LinkWatch {
    /// Watch `ifindex` of the calling thread's namespace.
    pub(crate) fn new(ifindex: u32) -> io::Result<LinkWatch> {
        Ok(LinkWatch { sock: ioctl_socket()?, ifindex })
    }

    /// `Err(ENETDOWN)` when the interface is down, `Err(ENXIO)` when it is gone.
    pub(crate) fn check(&self) -> io::Result<()> {
        // SAFETY: ifreq is plain old data; zeroed is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        req.ifr_ifru.ifru_ifindex = self.ifindex as libc::c_int;
        // SAFETY: SIOCGIFNAME reads ifr_ifindex and writes ifr_name of `req`.
        if unsafe { libc::ioctl(self.sock.as_raw_fd(), libc::SIOCGIFNAME, &mut req) } != 0 {
            let e = io::Error::last_os_error();
            // Gone while captured: ENXIO, as an AF_XDP socket says it; ENODEV
            // is what a device missing at open gets.
            return Err(if e.raw_os_error() == Some(libc::ENODEV) { io::Error::from_raw_os_error(libc::ENXIO) } else { e });
        }
        // SAFETY: SIOCGIFFLAGS reads ifr_name and writes ifr_flags of `req`.
        if unsafe { libc::ioctl(self.sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel filled the flags member of the union.
        let flags = unsafe { req.ifr_ifru.ifru_flags };
        if flags & libc::IFF_UP as libc::c_short == 0 {
            return Err(io::Error::from_raw_os_error(libc::ENETDOWN));
        }
        Ok(())
    }
}

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// RX queues of `iface` (ETHTOOL_GCHANNELS: rx plus combined), or 1 when the
/// driver does not say.
pub(crate) fn rx_queue_count(iface: &str) -> io::Result<u16> {
    ifindex(iface)?;
    let sock = ioctl_socket()?;
    let mut req = ifreq(iface)?;
    let mut ch = EthtoolChannels { cmd: ETHTOOL_GCHANNELS, ..Default::default() };
    req.ifr_ifru.ifru_data = (&mut ch as *mut EthtoolChannels).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GCHANNELS writes a `struct ethtool_channels`
    // through ifru_data, which points at `ch` for the duration of the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
    if rc != 0 {
        return Ok(1);
    }
    Ok(u16::try_from((ch.rx_count + ch.combined_count).max(1)).unwrap_or(u16::MAX))
}

/// The IP addresses of `iface` in the calling thread's namespace, but IPv6
/// link-local ones (the kernel gives every interface one; no session uses it).
pub(crate) fn host_addresses(iface: &str) -> io::Result<Vec<std::net::IpAddr>> {
    let mut out = Vec::new();
    for a in nix::ifaddrs::getifaddrs().map_err(io::Error::from)? {
        if a.interface_name != iface {
            continue;
        }
        let Some(addr) = a.address else { continue };
        if let Some(v4) = addr.as_sockaddr_in() {
            out.push(std::net::IpAddr::V4(v4.ip()));
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            let ip = v6.ip();
            if ip.segments()[0] & 0xffc0 != 0xfe80 {
                out.push(std::net::IpAddr::V6(ip));
            }
        }
    }
    Ok(out)
}
