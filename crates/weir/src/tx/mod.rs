//! Transmit: Ethernet frames out of a network interface through an AF_PACKET
//! TX ring (PACKET_TX_RING, TPACKET_V2), as `weir replay` sends traces.
//!
//! The contract of [`TxRing`]:
//!
//! - [`TxRing::send`] copies one frame into the next free slot of a ring shared
//!   with the kernel and marks it for sending; every `batch` frames it hands the
//!   queued ones to the kernel with one non-blocking `send()`. Frames leave the
//!   interface in the order they were given.
//! - When every slot is still in the kernel's hands, `send` waits (briefly
//!   yielding, then sleeping) until the device gives slots back. It never drops
//!   a frame: if nothing comes back for `stall_timeout` it fails with
//!   [`TxError::Stalled`].
//! - A frame the interface cannot carry is refused before it reaches the ring,
//!   with nothing queued: [`TxError::AboveMtu`] (longer than MTU plus the 14-byte
//!   Ethernet header, 18 with an 802.1Q tag) and [`TxError::TooShort`] (no whole
//!   Ethernet header) are the caller's to count and skip;
//!   [`TxError::FrameTooLarge`] means the ring's slots are smaller than the frame.
//! - A frame the kernel cannot take for a moment (the send buffer is full of
//!   frames in flight, or the device or its peer refused it with an error) stays
//!   in the ring and goes at the next hand-over; these hand-overs are counted in
//!   [`TxStats::device_busy`]. (A queueing discipline that drops a frame while
//!   reporting only congestion is not seen here; `tc -s qdisc` counts those.)
//! - [`TxRing::flush`] hands over what is queued and waits until the device has
//!   taken every frame; after it, [`TxStats::sent`] is exact.
//! - A frame is queued exactly when `send` returns `Ok`. A hand-over that fails
//!   after the frame was queued (the interface went down, say) is reported by
//!   the next `send` or `flush`, as a buffered writer reports a failed write;
//!   the frames still in the ring are counted in [`TxStats::queued`].
//!
//! The socket is opened with protocol 0, so it receives nothing: sending costs
//! no copy of our own frames back to us.

use crate::sys::tx_ring as sys;
pub mod xdp;

use crate::capture::SourceError;
use crate::privileges::{self, Operation};
use crate::source::LiveOptions;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ethernet header bytes the kernel allows on top of the MTU.
const ETH_HLEN: usize = 14;
/// An 802.1Q or 802.1ad tag: the kernel allows these 4 bytes more when the frame carries one.
const VLAN_HLEN: usize = 4;
/// The longest `frame` a device of this MTU sends: the MTU and the Ethernet
/// header, and a tag's 4 bytes more on a frame that carries one (what the
/// kernel forwards, `is_skb_forwardable`). Every sender checks frames against
/// it, so the backends skip or count the same frames: AF_PACKET (its TX ring
/// refuses longer ones), AF_XDP (whose copy mode would hand them on) and the
/// XDP generator; the in-kernel forwarder checks against [`longest_frames`].
/// `frame` holds at least an Ethernet header.
pub(crate) fn longest_frame(mtu: u32, frame: &[u8]) -> usize {
    let tagged = matches!(u16::from_be_bytes([frame[12], frame[13]]), 0x8100 | 0x88a8);
    let (untagged, with_tag) = longest_frames(mtu);
    if tagged {
        with_tag
    } else {
        untagged
    }
}

/// [`longest_frame`] for an untagged frame and for a tagged one, for a
/// checker that cannot call it per frame (an XDP program's limits).
pub(crate) fn longest_frames(mtu: u32) -> (usize, usize) {
    let untagged = mtu as usize + ETH_HLEN;
    (untagged, untagged + VLAN_HLEN)
}

/// Blocks of the ring: big enough to hold many frames each, small enough to
/// allocate without trouble.
const BLOCK_BYTES: usize = 64 << 10;
/// Slot size when the MTU asks for less: a standard 1500-byte MTU frame fits.
const MIN_FRAME_SIZE: usize = 2048;

/// How to open a [`TxRing`]. The default: the caller's namespace, through the
/// qdisc, 2048 slots sized for the MTU, batches of 64, a 5 s stall timeout.
#[derive(Clone, Debug, PartialEq)]
pub struct TxOptions {
    /// Open the interface inside this network namespace (a name under
    /// /var/run/netns, or a path like /proc/PID/ns/net).
    pub netns: Option<PathBuf>,
    /// Hand frames straight to the driver, past the qdisc (PACKET_QDISC_BYPASS).
    /// Faster; the frames are then invisible to captures on the sending host.
    pub qdisc_bypass: bool,
    /// Slots in the ring (rounded up to whole blocks).
    pub frames: usize,
    /// Bytes per slot, a multiple of 16; by default the smallest power of two
    /// (at least 2048) that holds a full-MTU frame with a VLAN tag.
    pub frame_size: Option<usize>,
    /// Frames queued before they are handed to the kernel in one system call.
    /// 1 hands over each frame at once (what paced sending needs).
    pub batch: usize,
    /// Give up when the device has taken no frame for this long.
    pub stall_timeout: Duration,
}

impl Default for TxOptions {
    fn default() -> Self {
        TxOptions { netns: None, qdisc_bypass: false, frames: 2048, frame_size: None, batch: 64, stall_timeout: Duration::from_secs(5) }
    }
}

/// What a [`TxRing`] has done.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Frames the device has taken.
    pub sent: u64,
    /// Bytes of those frames (as given, without the Ethernet FCS).
    pub bytes: u64,
    /// Times a frame had to wait for a free slot.
    pub ring_full_waits: u64,
    /// Hand-overs where the kernel or device took only part of the queue and
    /// kept the rest in the ring for the next one (a full send buffer or peer).
    pub device_busy: u64,
    /// Frames queued in the ring and not yet taken by the device.
    pub queued: u64,
}

/// Why a frame could not be sent or the ring not be opened.
///
/// The first seven come from [`TxRing::open`]; the rest from
/// [`TxRing::send`] and [`TxRing::flush`], and the three that refuse a frame
/// (`AboveMtu`, `TooShort`, `FrameTooLarge`) from [`TxRing::fits`] too.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxError {
    /// No interface of that name, in the namespace given or the caller's.
    #[error("no network interface {iface:?}{}", in_namespace(netns))]
    NoSuchInterface {
        /// The interface name asked for.
        iface: String,
        /// The namespace it was looked for in, when not the caller's.
        netns: Option<PathBuf>,
    },
    /// The interface is administratively down.
    #[error("interface {iface} is down (bring it up with: ip link set {iface} up)")]
    Down {
        /// The interface.
        iface: String,
    },
    /// The interface is neither Ethernet nor loopback, so it does not take
    /// Ethernet frames.
    #[error("interface {iface} is not an Ethernet interface (ARPHRD type {hw_type}): weir sends Ethernet frames only")]
    NotEthernet {
        /// The interface.
        iface: String,
        /// Its ARPHRD_* hardware type (linux/if_arp.h).
        hw_type: u16,
    },
    /// The network namespace of [`TxOptions::netns`] could not be entered.
    #[error("{detail}")]
    Netns {
        /// What went wrong, worded for the user.
        detail: String,
        /// True when the namespace does not exist, rather than being refused.
        not_found: bool,
    },
    /// [`TxOptions`] out of range: a frame size that is not a multiple of 16 or
    /// leaves no room for an Ethernet header, or no frames or batch.
    #[error("TX ring options: {0}")]
    Options(String),
    /// A system call that sets up the socket or its ring failed.
    #[error("{what} on {iface}: {error}")]
    Setup {
        /// The interface.
        iface: String,
        /// The step, e.g. "mapping the TX ring".
        what: &'static str,
        /// The OS error.
        error: io::Error,
    },
    /// The kernel refused to set up the socket or ring for want of a capability.
    #[error("{iface}: {hint}")]
    NotPermitted {
        /// The interface.
        iface: String,
        /// Which capability is missing and how to grant it.
        hint: String,
    },
    /// The frame is longer than the interface carries. Nothing was queued.
    #[error("a frame of {len} bytes is longer than {iface}'s MTU {mtu} plus its link header ({limit} bytes at most)")]
    AboveMtu {
        /// The interface.
        iface: String,
        /// Bytes of the frame.
        len: usize,
        /// The interface's MTU in bytes.
        mtu: u32,
        /// The longest frame it takes: the MTU plus 14 bytes, 18 for a tagged frame.
        limit: usize,
    },
    /// The frame is shorter than an Ethernet header. Nothing was queued.
    #[error("a frame of {len} bytes is shorter than an Ethernet header (14 bytes)")]
    TooShort {
        /// Bytes of the frame.
        len: usize,
    },
    /// The frame fits the interface but not the ring's slots (see
    /// [`TxOptions::frame_size`]). Nothing was queued.
    #[error("a frame of {len} bytes does not fit the TX ring's slots of {frame_size} bytes ({max} bytes of packet at most)")]
    FrameTooLarge {
        /// Bytes of the frame.
        len: usize,
        /// Bytes of frame a slot holds: the slot less its 32-byte header.
        max: usize,
        /// Bytes per slot.
        frame_size: usize,
    },
    /// Handing frames to the kernel failed (the interface went down or away,
    /// say). Frames already queued stay in the ring.
    #[error("sending on {iface}: {}{error}", gone(error))]
    Send {
        /// The interface.
        iface: String,
        /// The OS error of `send()`.
        error: io::Error,
    },
    /// The kernel refused a queued frame as malformed; the ring does not move
    /// past it.
    #[error("sending on {iface}: the kernel rejected a frame of {len} bytes as malformed")]
    Rejected {
        /// The interface.
        iface: String,
        /// Bytes of the refused frame.
        len: u32,
    },
    /// The device took no frame for [`TxOptions::stall_timeout`] while frames
    /// waited.
    #[error("sending on {iface}: the device took no frame for {:.1} s with {queued} waiting (is the link down?)", waited.as_secs_f64())]
    Stalled {
        /// The interface.
        iface: String,
        /// How long the device took nothing.
        waited: Duration,
        /// Frames still in the ring.
        queued: u64,
    },
}

/// What a send error means when the interface was removed or taken down,
/// said as the capture sources say it.
fn gone(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENETDOWN) | Some(libc::ENXIO) | Some(libc::ENODEV) => "the interface went down or away: ",
        _ => "",
    }
}

fn in_namespace(ns: &Option<PathBuf>) -> String {
    ns.as_ref().map(|p| format!(" in network namespace {}", p.display())).unwrap_or_default()
}

impl TxError {
    /// True when the error is in what the user asked for (a missing, down or
    /// non-Ethernet interface, bad options, a namespace that does not exist),
    /// not in the system; the CLI exits with 2 for these.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            TxError::NoSuchInterface { .. }
                | TxError::Down { .. }
                | TxError::NotEthernet { .. }
                | TxError::Options(_)
                | TxError::Netns { not_found: true, .. }
        )
    }

    fn setup(iface: &str, what: &'static str, op: Operation, error: io::Error) -> TxError {
        if privileges::is_permission_error(&error) {
            TxError::NotPermitted { iface: iface.into(), hint: privileges::missing_capability(op) }
        } else {
            TxError::Setup { iface: iface.into(), what, error }
        }
    }
}

/// The ring's shape for a device of this MTU.
fn geometry(mtu: u32, opts: &TxOptions, page: usize) -> Result<sys::Geometry, TxError> {
    let frame_size = match opts.frame_size {
        Some(f) if f % sys::FRAME_ALIGN != 0 || f < sys::DATA_OFFSET + ETH_HLEN => {
            return Err(TxError::Options(format!(
                "frame size {f}: must be a multiple of {} and at least {}",
                sys::FRAME_ALIGN,
                sys::DATA_OFFSET + ETH_HLEN
            )))
        }
        Some(f) => f,
        None => (sys::DATA_OFFSET + mtu as usize + ETH_HLEN + VLAN_HLEN).next_power_of_two().max(MIN_FRAME_SIZE),
    };
    if opts.frames == 0 || opts.batch == 0 {
        return Err(TxError::Options("frames and batch must be at least 1".into()));
    }
    let block_size = frame_size.max(BLOCK_BYTES).next_multiple_of(page);
    let per_block = block_size / frame_size;
    Ok(sys::Geometry { frame_size, block_size, frames: opts.frames.div_ceil(per_block) * per_block })
}

/// An AF_PACKET socket bound to one interface, with a TX ring mapped in; the
/// module documentation gives its contract. One owner sends; other threads
/// may only hand queued frames over, through a [`TxKicker`].
pub struct TxRing {
    fd: Arc<OwnedFd>,
    ring: sys::RingMap,
    iface: String,
    mtu: u32,
    /// Length of the frame in each slot, for counting bytes once it is sent.
    lens: Vec<u32>,
    /// Frames ever put in the ring; slot `filled % frames` is the next to fill.
    filled: u64,
    /// Frames ever confirmed taken by the device; `filled - done` are in the ring.
    done: u64,
    /// Frames filled since the last hand-over.
    unkicked: usize,
    /// A hand-over that failed after its frame was queued, for the next call.
    deferred: Option<TxError>,
    batch: usize,
    stall_timeout: Duration,
    stats: TxStats,
}

impl TxRing {
    /// Open `iface` (in `opts.netns` when set) for sending. Needs CAP_NET_RAW,
    /// and CAP_SYS_ADMIN for another namespace; the errors are [`TxError`]'s
    /// first seven.
    pub fn open(iface: &str, opts: &TxOptions) -> Result<TxRing, TxError> {
        in_netns(&opts.netns, || open_here(iface, opts))
    }

    /// The interface's MTU in bytes when the ring was opened (without the
    /// Ethernet header).
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Bytes of the largest untagged frame the interface takes (MTU plus the
    /// Ethernet header) or the ring holds, whichever is less.
    #[cfg(test)]
    fn max_frame(&self) -> usize {
        (self.mtu as usize + ETH_HLEN).min(self.ring.capacity())
    }

    /// Slots in the ring (after rounding up to whole blocks) and bytes per slot.
    pub fn shape(&self) -> (usize, usize) {
        let g = self.ring.geometry();
        (g.frames, g.frame_size)
    }

    /// A handle that other threads may use to hand queued frames to the kernel.
    pub fn kicker(&self) -> TxKicker {
        TxKicker { fd: Arc::clone(&self.fd) }
    }

    /// Counters, with frames the device has finished with since the last call
    /// accounted. (A frame the kernel rejected stays in the ring and is reported
    /// by the next `send` or `flush`.)
    pub fn stats(&mut self) -> TxStats {
        let _ = self.reclaim();
        TxStats { queued: self.filled - self.done, ..self.stats }
    }

    fn slots(&self) -> u64 {
        self.ring.geometry().frames as u64
    }

    /// Whether `frame` can be sent here: the errors [`send`](Self::send) would
    /// refuse it with before queueing anything (too short, above the MTU, larger
    /// than a slot).
    pub fn fits(&self, frame: &[u8]) -> Result<(), TxError> {
        let len = frame.len();
        if len < ETH_HLEN {
            return Err(TxError::TooShort { len });
        }
        let limit = longest_frame(self.mtu, frame);
        if len > limit {
            return Err(TxError::AboveMtu { iface: self.iface.clone(), len, mtu: self.mtu, limit });
        }
        if len > self.ring.capacity() {
            return Err(TxError::FrameTooLarge { len, max: self.ring.capacity(), frame_size: self.ring.geometry().frame_size });
        }
        Ok(())
    }

    /// Queue one Ethernet frame (with its header, without FCS) for sending.
    /// Waits while the ring is full; see the module documentation for errors.
    pub fn send(&mut self, frame: &[u8]) -> Result<(), TxError> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        self.fits(frame)?;
        // Slots are reclaimed lazily, when the ring looks full; only a ring still
        // full after that is a wait.
        let full = self.slots();
        if self.filled - self.done == full {
            self.reclaim()?;
            if self.filled - self.done == full {
                self.stats.ring_full_waits += 1;
                self.wait_until(self.stall_timeout, |r| r.filled - r.done < full)?;
            }
        }
        let slot = (self.filled % self.slots()) as usize;
        // The slot's previous frame was confirmed taken (done advanced past it
        // only on seeing AVAILABLE) and the length was checked, so `fill` does not
        // refuse; if it ever did, the frame must not vanish unreported.
        if !self.ring.fill(slot, frame) {
            let error = io::Error::other(format!("TX ring slot {slot} is unexpectedly still in the kernel's hands"));
            return Err(TxError::Send { iface: self.iface.clone(), error });
        }
        self.lens[slot] = frame.len() as u32;
        self.filled += 1;
        self.unkicked += 1;
        if self.unkicked >= self.batch {
            // The frame is queued whatever the hand-over does: report a failure next time.
            self.deferred = self.kick().err();
        }
        Ok(())
    }

    /// Hand everything queued to the kernel and wait until the device has taken it.
    pub fn flush(&mut self) -> Result<(), TxError> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        self.kick()?;
        self.wait_until(self.stall_timeout, |r| r.filled == r.done)
    }

    /// One non-blocking `send()`: the kernel transmits every frame marked for
    /// sending, in ring order, until it meets one that is not.
    fn kick(&mut self) -> Result<(), TxError> {
        self.unkicked = 0;
        match sys::send_queued(&self.fd) {
            Ok(_) => Ok(()),
            // EAGAIN: the send buffer is full of frames in flight. ENOBUFS: the
            // device dropped one, and the kernel put it back in the ring. Either
            // way the rest stay queued for the next hand-over.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR)) => {
                self.stats.device_busy += 1;
                Ok(())
            }
            Err(error) => Err(TxError::Send { iface: self.iface.clone(), error }),
        }
    }

    /// Account every frame the device has finished with, oldest first.
    fn reclaim(&mut self) -> Result<(), TxError> {
        while self.done < self.filled {
            let slot = (self.done % self.slots()) as usize;
            match self.ring.status(slot) {
                sys::TP_STATUS_AVAILABLE => {
                    self.stats.sent += 1;
                    self.stats.bytes += u64::from(self.lens[slot]);
                    self.done += 1;
                }
                sys::TP_STATUS_WRONG_FORMAT => return Err(TxError::Rejected { iface: self.iface.clone(), len: self.lens[slot] }),
                _ => break,
            }
        }
        Ok(())
    }

    /// Hand over, account and back off until `ready`, or fail once the device
    /// has taken nothing for `stall`.
    fn wait_until(&mut self, stall: Duration, ready: impl Fn(&TxRing) -> bool) -> Result<(), TxError> {
        let mut backoff = Backoff::default();
        let mut last = (self.done, Instant::now());
        loop {
            self.reclaim()?;
            if ready(self) {
                return Ok(());
            }
            if self.done != last.0 {
                last = (self.done, Instant::now());
                backoff = Backoff::default();
            } else if last.1.elapsed() >= stall {
                return Err(TxError::Stalled { iface: self.iface.clone(), waited: last.1.elapsed(), queued: self.filled - self.done });
            }
            self.kick()?;
            backoff.wait();
        }
    }
}

impl Drop for TxRing {
    /// Frames still queued are handed over and given a moment to leave, so that
    /// dropping a ring without `flush` does not lose its last partial batch.
    fn drop(&mut self) {
        if self.filled != self.done {
            let _ = self.kick();
            let _ = self.wait_until(Duration::from_secs(1), |r| r.filled == r.done);
        }
    }
}

/// Hands a ring's queued frames to the kernel from another thread: frames that
/// wait for a batch to fill (a slow source at top speed) go out at the next kick.
/// Safe alongside the owner: the kernel serializes hand-overs and only takes
/// frames the owner has finished filling.
#[derive(Clone)]
pub struct TxKicker {
    fd: Arc<OwnedFd>,
}

impl TxKicker {
    /// Hand the ring's queued frames to the kernel now, without waiting.
    pub fn kick(&self) {
        // Errors recur at the owner's next send or flush, which reports them.
        let _ = sys::send_queued(&self.fd);
    }
}

/// Yield a few times (the device often finishes within microseconds), then
/// sleep, doubling up to a millisecond.
#[derive(Default)]
struct Backoff {
    round: u32,
}

impl Backoff {
    const YIELDS: u32 = 4;
    const FIRST_SLEEP: Duration = Duration::from_micros(20);
    const MAX_SLEEP: Duration = Duration::from_millis(1);

    fn wait(&mut self) {
        if self.round < Self::YIELDS {
            std::thread::yield_now();
        } else {
            let doublings = (self.round - Self::YIELDS).min(10);
            std::thread::sleep((Self::FIRST_SLEEP * (1 << doublings)).min(Self::MAX_SLEEP));
        }
        self.round += 1;
    }
}

/// Run `f` in network namespace `ns` (the caller's when `None`), with the
/// errors of entering it as [`TxError::Netns`].
fn in_netns<T, E: From<TxError>>(ns: &Option<PathBuf>, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let Some(ns) = ns else { return f() };
    let live = LiveOptions { netns: Some(ns.clone()), ..LiveOptions::default() };
    live.in_netns(|| Ok(f()))
        .map_err(|e| match e {
            SourceError::Io { error: source, .. } if source.kind() == io::ErrorKind::PermissionDenied => TxError::Netns {
                detail: format!("network namespace {}: {}", ns.display(), privileges::missing_capability(Operation::EnterNetns)),
                not_found: false,
            },
            SourceError::Io { error: source, .. } => {
                TxError::Netns { not_found: source.kind() == io::ErrorKind::NotFound, detail: source.to_string() }
            }
            other => TxError::Netns { detail: other.to_string(), not_found: false },
        })
        .map_err(E::from)?
}

/// Flags, MTU and hardware type of `iface` in the calling thread's namespace
/// (`ErrorKind::NotFound` when there is none), for `weir forward`'s checks.
pub(crate) fn device_facts(iface: &str) -> io::Result<sys::DeviceFacts> {
    let fd = sys::packet_socket()?;
    sys::device(&fd, iface)
}

fn open_here(iface: &str, opts: &TxOptions) -> Result<TxRing, TxError> {
    let fd = sys::packet_socket().map_err(|e| TxError::setup(iface, "opening a packet socket", Operation::PacketSocket, e))?;
    let dev = sys::device(&fd, iface).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::InvalidInput => {
            TxError::NoSuchInterface { iface: iface.into(), netns: opts.netns.clone() }
        }
        _ => TxError::Setup { iface: iface.into(), what: "asking the device's flags and MTU", error: e },
    })?;
    if !matches!(dev.hw_type, sys::ARPHRD_ETHER | sys::ARPHRD_LOOPBACK) {
        return Err(TxError::NotEthernet { iface: iface.into(), hw_type: dev.hw_type });
    }
    if !dev.up {
        return Err(TxError::Down { iface: iface.into() });
    }
    let index = crate::source::ifindex(iface).map_err(|_| TxError::NoSuchInterface { iface: iface.into(), netns: opts.netns.clone() })?;
    let g = geometry(dev.mtu, opts, crate::sys::mem::page_size())?;
    sys::set_tpacket_v2(&fd).map_err(|e| TxError::setup(iface, "selecting TPACKET_V2", Operation::PacketSocket, e))?;
    if opts.qdisc_bypass {
        sys::set_qdisc_bypass(&fd).map_err(|e| TxError::setup(iface, "setting PACKET_QDISC_BYPASS", Operation::PacketSocket, e))?;
    }
    sys::set_tx_ring(&fd, &g).map_err(|e| TxError::setup(iface, "creating the TX ring", Operation::PacketSocket, e))?;
    let ring = sys::RingMap::map(&fd, g).map_err(|e| TxError::setup(iface, "mapping the TX ring", Operation::PacketSocket, e))?;
    sys::set_send_buffer(&fd, g.bytes()).map_err(|e| TxError::setup(iface, "sizing the send buffer", Operation::PacketSocket, e))?;
    sys::bind(&fd, index).map_err(|e| TxError::setup(iface, "binding the packet socket", Operation::PacketSocket, e))?;
    Ok(TxRing {
        fd: Arc::new(fd),
        ring,
        iface: iface.into(),
        mtu: dev.mtu,
        lens: vec![0; g.frames],
        filled: 0,
        done: 0,
        unkicked: 0,
        deferred: None,
        batch: opts.batch,
        stall_timeout: opts.stall_timeout,
        stats: TxStats::default(),
    })
}

#[cfg(test)]
mod tests;
