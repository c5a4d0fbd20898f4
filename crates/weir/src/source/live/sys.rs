//! System calls shared by live sources: network namespaces and device facts
//! asked of the kernel (not sysfs, which shows the namespace that mounted it).

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

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
