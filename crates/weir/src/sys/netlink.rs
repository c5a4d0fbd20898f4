//! Routing and generic netlink, as far as XDP needs them: which XDP programs
//! an interface has attached, what its driver offers XDP, and detaching a
//! program only if it is still the one expected.
//!
//! Requests are built and replies walked in place, as `linux/netlink.h` and
//! `linux/rtnetlink.h` lay them out; each call opens a socket of the calling
//! thread's network namespace, so it asks about that namespace's interfaces.
//! Errors are the kernel's, with its extended-ack message when it gave one.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The modes an XDP program can be attached in, each with its own slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum XdpMode {
    /// Generic XDP, on the kernel's socket buffers.
    Skb,
    /// Native XDP, in the driver.
    Drv,
    /// Offloaded to the NIC.
    Hw,
}

impl XdpMode {
    /// The XDP_FLAGS_*_MODE bit.
    fn flag(self) -> u32 {
        match self {
            XdpMode::Skb => 1 << 1,
            XdpMode::Drv => 1 << 2,
            XdpMode::Hw => 1 << 3,
        }
    }
}

impl std::fmt::Display for XdpMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XdpMode::Skb => "generic",
            XdpMode::Drv => "native",
            XdpMode::Hw => "offloaded",
        })
    }
}

/// `struct nlmsghdr`.
#[repr(C)]
struct NlMsgHdr {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
}
const _: () = assert!(size_of::<NlMsgHdr>() == 16);

/// `struct ifinfomsg`.
#[repr(C)]
struct IfInfoMsg {
    family: u8,
    pad: u8,
    kind: u16,
    index: i32,
    flags: u32,
    change: u32,
}
const _: () = assert!(size_of::<IfInfoMsg>() == 16);

const RTM_NEWLINK: u16 = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
/// In an error message: the request was not echoed whole, and extended-ack
/// attributes follow.
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_FLAGS: u16 = 3;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;
const IFLA_XDP_EXPECTED_FD: u16 = 8;
const XDP_FLAGS_REPLACE: u32 = 1 << 4;

/// A request to the kernel's routing netlink, built in place.
struct NlRequest(Vec<u8>);

impl NlRequest {
    fn new(kind: u16, flags: u16, ifindex: u32) -> NlRequest {
        let mut r = NlRequest(Vec::with_capacity(128));
        let hdr = NlMsgHdr { len: 0, kind, flags: NLM_F_REQUEST | flags, seq: 1, pid: 0 };
        r.0.extend_from_slice(&hdr.len.to_ne_bytes());
        r.0.extend_from_slice(&hdr.kind.to_ne_bytes());
        r.0.extend_from_slice(&hdr.flags.to_ne_bytes());
        r.0.extend_from_slice(&hdr.seq.to_ne_bytes());
        r.0.extend_from_slice(&hdr.pid.to_ne_bytes());
        let ifi = IfInfoMsg { family: libc::AF_UNSPEC as u8, pad: 0, kind: 0, index: ifindex as i32, flags: 0, change: 0 };
        r.0.extend_from_slice(&[ifi.family, ifi.pad]);
        r.0.extend_from_slice(&ifi.kind.to_ne_bytes());
        r.0.extend_from_slice(&ifi.index.to_ne_bytes());
        r.0.extend_from_slice(&ifi.flags.to_ne_bytes());
        r.0.extend_from_slice(&ifi.change.to_ne_bytes());
        r
    }

    /// A generic netlink request: command `cmd` of family `family`.
    fn generic(family: u16, cmd: u8) -> NlRequest {
        let mut r = NlRequest(Vec::with_capacity(64));
        let hdr = NlMsgHdr { len: 0, kind: family, flags: NLM_F_REQUEST, seq: 1, pid: 0 };
        r.0.extend_from_slice(&hdr.len.to_ne_bytes());
        r.0.extend_from_slice(&hdr.kind.to_ne_bytes());
        r.0.extend_from_slice(&hdr.flags.to_ne_bytes());
        r.0.extend_from_slice(&hdr.seq.to_ne_bytes());
        r.0.extend_from_slice(&hdr.pid.to_ne_bytes());
        // struct genlmsghdr: cmd, version, reserved.
        r.0.extend_from_slice(&[cmd, 1, 0, 0]);
        r
    }

    fn attr(&mut self, kind: u16, payload: &[u8]) {
        self.0.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(payload);
        self.0.resize(align4(self.0.len()), 0);
    }

    /// Start a nested attribute; returns where its header is, for `end_nest`.
    fn begin_nest(&mut self, kind: u16) -> usize {
        let at = self.0.len();
        self.attr(kind | NLA_F_NESTED, &[]);
        at
    }

    fn end_nest(&mut self, at: usize) {
        let len = (self.0.len() - at) as u16;
        self.0[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }

    fn finish(mut self) -> Vec<u8> {
        let len = self.0.len() as u32;
        self.0[..4].copy_from_slice(&len.to_ne_bytes());
        self.0
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The netlink messages in a datagram: (type, flags, payload).
fn messages(mut buf: &[u8]) -> impl Iterator<Item = (u16, u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = u32_at(buf, 0)? as usize;
        if len < size_of::<NlMsgHdr>() || len > buf.len() {
            return None;
        }
        let msg = (u16_at(buf, 4)?, u16_at(buf, 6)?, &buf[size_of::<NlMsgHdr>()..len]);
        buf = buf.get(align4(len)..).unwrap_or(&[]);
        Some(msg)
    })
}

/// The attributes in `buf`: (type without flags, payload).
fn attributes(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(buf, 0)?);
        if len < 4 || len > buf.len() {
            return None;
        }
        let attr = (u16_at(buf, 2)? & NLA_TYPE_MASK, &buf[4..len]);
        buf = buf.get(align4(len)..).unwrap_or(&[]);
        Some(attr)
    })
}

/// Send one request on a fresh routing netlink socket of the calling thread's
/// namespace and return the reply datagram.
fn netlink_call(request: &[u8]) -> io::Result<Vec<u8>> {
    netlink_call_on(libc::NETLINK_ROUTE, request)
}

/// [`netlink_call`] on a socket of netlink `protocol`.
fn netlink_call_on(protocol: libc::c_int, request: &[u8]) -> io::Result<Vec<u8>> {
    // SAFETY: socket(2) has no memory preconditions; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // Extended acks carry the kernel's reason ("Can't replace active BPF XDP link");
    // a kernel without them still answers, so the result is not needed.
    // SAFETY: an int option, read by the kernel only.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_NETLINK,
            libc::NETLINK_EXT_ACK,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    // SAFETY: `request` is a live buffer of the length passed; an unconnected
    // netlink socket sends to the kernel.
    let sent = unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut reply = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: `reply` is a writable buffer of the length passed.
        let got = unsafe { libc::recv(fd.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        reply.truncate(got as usize);
        return Ok(reply);
    }
}

/// The error an NLMSG_ERROR payload reports (`None` for an ack), with the
/// kernel's extended-ack message when it gave one.
fn netlink_error(flags: u16, payload: &[u8]) -> Option<io::Error> {
    let errno = -(u32_at(payload, 0)? as i32);
    if errno == 0 {
        return None;
    }
    let e = io::Error::from_raw_os_error(errno);
    if flags & NLM_F_ACK_TLVS == 0 {
        return Some(e);
    }
    // After the error code comes the request's header, and its payload too unless capped.
    let echoed = if flags & NLM_F_CAPPED != 0 { size_of::<NlMsgHdr>() } else { u32_at(payload, 4).map_or(0, |l| l as usize) };
    let tlvs = payload.get(align4(4 + echoed)..).unwrap_or(&[]);
    let msg =
        attributes(tlvs).find(|(t, _)| *t == NLMSGERR_ATTR_MSG).map(|(_, m)| String::from_utf8_lossy(m).trim_end_matches('\0').to_string());
    Some(match msg {
        Some(m) if !m.is_empty() => io::Error::new(e.kind(), format!("{e}: {m}")),
        _ => e,
    })
}

/// The XDP programs attached to interface `ifindex` (of the calling thread's
/// namespace): (mode, program id) for each occupied slot.
pub(crate) fn xdp_programs(ifindex: u32) -> io::Result<Vec<(XdpMode, u32)>> {
    let reply = netlink_call(&NlRequest::new(libc::RTM_GETLINK, 0, ifindex).finish())?;
    for (kind, flags, payload) in messages(&reply) {
        match kind {
            NLMSG_ERROR => return Err(netlink_error(flags, payload).unwrap_or_else(|| io::Error::other("no link in the reply"))),
            RTM_NEWLINK => {
                let attrs = payload.get(size_of::<IfInfoMsg>()..).unwrap_or(&[]);
                let mut found = Vec::new();
                for (_, xdp) in attributes(attrs).filter(|(t, _)| *t == IFLA_XDP) {
                    for (t, v) in attributes(xdp) {
                        let mode = match t {
                            IFLA_XDP_SKB_PROG_ID => XdpMode::Skb,
                            IFLA_XDP_DRV_PROG_ID => XdpMode::Drv,
                            IFLA_XDP_HW_PROG_ID => XdpMode::Hw,
                            _ => continue,
                        };
                        match u32_at(v, 0) {
                            Some(id) if id != 0 => found.push((mode, id)),
                            _ => {}
                        }
                    }
                }
                return Ok(found);
            }
            _ => {}
        }
    }
    Err(io::Error::other("no link in the netlink reply"))
}

/// `struct genlmsghdr`'s size, in front of a generic netlink message's attributes.
const GENL_HDRLEN: usize = 4;
/// The generic netlink controller, which names families' ids.
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// The netdev family (kernel 6.3): `NETDEV_CMD_DEV_GET` and its attributes.
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
/// `enum netdev_xdp_act`'s bits.
const NETDEV_XDP_ACT_BASIC: u64 = 1;
const NETDEV_XDP_ACT_XSK_ZEROCOPY: u64 = 8;

/// What a driver says it offers XDP, as the netdev family reports it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct XdpFeatures {
    /// Native XDP (XDP_PASS, XDP_DROP, XDP_TX, XDP_ABORTED in the driver).
    pub(crate) native: bool,
    /// AF_XDP zero-copy: the UMEM can be the NIC's receive memory.
    pub(crate) zero_copy: bool,
}

/// What the driver of `ifindex` (in the calling thread's namespace) offers
/// XDP; `None` on a kernel without the netdev family (before 6.3).
pub(crate) fn xdp_features(ifindex: u32) -> io::Result<Option<XdpFeatures>> {
    let mut ask = NlRequest::generic(GENL_ID_CTRL, CTRL_CMD_GETFAMILY);
    ask.attr(CTRL_ATTR_FAMILY_NAME, b"netdev\0");
    let reply = netlink_call_on(libc::NETLINK_GENERIC, &ask.finish())?;
    let mut family = None;
    for (kind, flags, payload) in messages(&reply) {
        match kind {
            NLMSG_ERROR => match netlink_error(flags, payload) {
                Some(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
                Some(e) => return Err(e),
                None => {}
            },
            _ => {
                let attrs = payload.get(GENL_HDRLEN..).unwrap_or(&[]);
                family = attributes(attrs).find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID).and_then(|(_, v)| u16_at(v, 0));
            }
        }
    }
    let Some(family) = family else { return Err(io::Error::other("no netdev family id in the controller's reply")) };
    let mut get = NlRequest::generic(family, NETDEV_CMD_DEV_GET);
    get.attr(NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes());
    let reply = netlink_call_on(libc::NETLINK_GENERIC, &get.finish())?;
    for (kind, flags, payload) in messages(&reply) {
        if kind == NLMSG_ERROR {
            return Err(netlink_error(flags, payload).unwrap_or_else(|| io::Error::other("no device in the netdev reply")));
        }
        let attrs = payload.get(GENL_HDRLEN..).unwrap_or(&[]);
        if let Some((_, v)) = attributes(attrs).find(|(t, _)| *t == NETDEV_A_DEV_XDP_FEATURES) {
            let bits = v.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes).unwrap_or(0);
            return Ok(Some(XdpFeatures { native: bits & NETDEV_XDP_ACT_BASIC != 0, zero_copy: bits & NETDEV_XDP_ACT_XSK_ZEROCOPY != 0 }));
        }
    }
    Err(io::Error::other("no XDP features in the netdev reply"))
}

/// Detach the program attached by netlink in `mode` on `ifindex`, only if it is
/// still the one `expected` names (XDP_FLAGS_REPLACE), so a program attached by
/// someone else meanwhile is never removed. A program held by a bpf_link cannot
/// be detached this way: the kernel answers EBUSY.
pub(crate) fn detach_xdp(ifindex: u32, mode: XdpMode, expected: BorrowedFd<'_>) -> io::Result<()> {
    let mut req = NlRequest::new(libc::RTM_SETLINK, NLM_F_ACK, ifindex);
    let nest = req.begin_nest(IFLA_XDP);
    req.attr(IFLA_XDP_FD, &(-1i32).to_ne_bytes());
    req.attr(IFLA_XDP_FLAGS, &(mode.flag() | XDP_FLAGS_REPLACE).to_ne_bytes());
    req.attr(IFLA_XDP_EXPECTED_FD, &expected.as_raw_fd().to_ne_bytes());
    req.end_nest(nest);
    let reply = netlink_call(&req.finish())?;
    let ack = messages(&reply).find(|(kind, _, _)| *kind == NLMSG_ERROR).map(|(_, flags, payload)| netlink_error(flags, payload));
    match ack {
        Some(None) => Ok(()),
        Some(Some(e)) => Err(e),
        None => Err(io::Error::other("no acknowledgement in the netlink reply")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_well_formed_netlink() {
        let mut req = NlRequest::new(libc::RTM_SETLINK, NLM_F_ACK, 7);
        let nest = req.begin_nest(IFLA_XDP);
        req.attr(IFLA_XDP_FD, &(-1i32).to_ne_bytes());
        req.attr(IFLA_XDP_FLAGS, &5u32.to_ne_bytes());
        req.end_nest(nest);
        let msg = req.finish();
        let parsed: Vec<_> = messages(&msg).collect();
        assert_eq!(parsed.len(), 1);
        let (kind, flags, payload) = parsed[0];
        assert_eq!((kind, flags), (libc::RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK));
        assert_eq!(u32_at(payload, 4), Some(7), "ifi_index");
        let attrs: Vec<_> = attributes(&payload[size_of::<IfInfoMsg>()..]).collect();
        assert_eq!(attrs.len(), 1);
        assert_eq!(attrs[0].0, IFLA_XDP);
        let inner: Vec<_> = attributes(attrs[0].1).map(|(t, v)| (t, u32_at(v, 0))).collect();
        assert_eq!(inner, vec![(IFLA_XDP_FD, Some(u32::MAX)), (IFLA_XDP_FLAGS, Some(5))]);
    }

    /// veth has native XDP and no zero-copy; loopback has neither.
    #[test]
    #[ignore = "needs root: asks the netdev netlink family about a veth test bed"]
    fn the_netdev_family_says_what_a_driver_offers() {
        let tb = testbed::TestBed::new(1);
        let features = crate::sys::netdev::in_netns(std::path::Path::new(&tb.rx_ns), || {
            let veth = xdp_features(crate::sys::netdev::ifindex(&tb.rx_if).unwrap()).unwrap();
            let lo = xdp_features(crate::sys::netdev::ifindex("lo").unwrap()).unwrap();
            (veth, lo)
        })
        .unwrap();
        assert_eq!(features.0, Some(XdpFeatures { native: true, zero_copy: false }));
        assert_eq!(features.1, Some(XdpFeatures { native: false, zero_copy: false }));
    }

    #[test]
    fn truncated_replies_end_the_walk() {
        let msg = NlRequest::new(libc::RTM_GETLINK, 0, 1).finish();
        assert_eq!(messages(&msg[..msg.len() - 1]).count(), 0);
        assert_eq!(attributes(&[8, 0, 1, 0, 1]).count(), 0);
    }

    #[test]
    fn error_acks_carry_the_kernels_message() {
        // error -16 (EBUSY), the capped request header, then NLMSGERR_ATTR_MSG.
        let mut p = (-16i32).to_ne_bytes().to_vec();
        p.extend_from_slice(&[0u8; 16]);
        let text = b"Can't replace active BPF XDP link\0";
        p.extend_from_slice(&((4 + text.len()) as u16).to_ne_bytes());
        p.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        p.extend_from_slice(text);
        let e = netlink_error(NLM_F_CAPPED | NLM_F_ACK_TLVS, &p).unwrap();
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy);
        assert!(e.to_string().contains("Can't replace active BPF XDP link"), "{e}");
        assert!(netlink_error(0, &0i32.to_ne_bytes()).is_none());
        assert_eq!(netlink_error(0, &(-16i32).to_ne_bytes()).unwrap().raw_os_error(), Some(libc::EBUSY));
    }
}
