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

/// bpf(2)'s attribute for one map element (`union bpf_attr`'s map_elem part).
#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// A bpf(2) command on one map element.
#[derive(Copy, Clone, Debug)]
pub(crate) enum MapElem {
    /// BPF_MAP_LOOKUP_ELEM: copies the value out.
    Lookup,
    /// BPF_MAP_UPDATE_ELEM with BPF_NOEXIST: adds the element, never replaces one.
    Add,
    /// BPF_MAP_LOOKUP_AND_DELETE_ELEM (kernel 5.14 for hash maps): copies the
    /// value out and deletes the element in one call, so no update the
    /// kernel makes between a read and a delete is lost.
    Take,
}

/// Runs `op` on the element `key` of map `map`, with `value` (read from for
/// `Add`, written to otherwise). `Ok(false)` when the map has no such key
/// (for `Add`, never).
pub(crate) fn map_elem(op: MapElem, map: std::os::fd::BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    const BPF_NOEXIST: u64 = 1;
    let (cmd, flags): (libc::c_long, u64) = match op {
        MapElem::Lookup => (1, 0),
        MapElem::Add => (2, BPF_NOEXIST),
        MapElem::Take => (21, 0),
    };
    let attr = MapElemAttr { map_fd: map.as_raw_fd() as u32, _pad: 0, key: key.as_ptr() as u64, value: value.as_mut_ptr() as u64, flags };
    // SAFETY: `attr` is a valid map_elem attribute of the size passed; `key`
    // and `value` are live buffers of the map's key and value sizes (the
    // caller's types mirror the map's), and the kernel reads or writes at
    // most those sizes.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, &attr as *const MapElemAttr, std::mem::size_of::<MapElemAttr>()) };
    match rc {
        0 => Ok(true),
        _ => match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::ENOENT) && !matches!(op, MapElem::Add) => Ok(false),
            e => Err(e),
        },
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of the kernel programs'
/// bpf_ktime_get_ns.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}
