//! An XDP traffic generator: Ethernet frames sent from kernel context, with no
//! system call per packet, through the kernel's XDP live-frames test run
//! (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES`, Linux 5.18 and
//! later), as `weir replay --xdp` sends traces.
//!
//! The contract of [`XdpGenerator`]:
//!
//! - [`sendable`] sorts frames out as an AF_PACKET TX ring does: those the
//!   interface cannot carry (longer than the MTU plus 14 bytes, 18 with a VLAN
//!   tag, or shorter than an Ethernet header) are left out and counted, so that
//!   `weir replay --xdp` skips them as `weir replay -o` does.
//! - [`XdpGenerator::open`] checks the interface (it exists, is up, takes
//!   Ethernet frames) and every frame (a whole Ethernet header, at most the MTU
//!   plus 14 bytes, 18 with a VLAN tag, and at most [`MAX_FRAME`] bytes), then
//!   loads `ebpf/weir_gen.c` with the frames in a kernel array of their own.
//!   A frame it cannot send is an error naming the frame; nothing is sent.
//! - [`XdpGenerator::send`] runs the program `n` times, sending at most
//!   `most` frames. The `k`th frame sent (counted from 0 over the generator's
//!   whole life) is frame `k mod frames`, so frames go in order, pass after
//!   pass. It returns how many frames were sent: at top speed every run up to
//!   `most` sends one, so fewer only when a signal cut the call short.
//! - Paced ([`XdpGenOptions::pacing`]: packets or megabits per second), a
//!   run sends only when the next frame is due by the kernel's monotonic clock
//!   and otherwise sends nothing, so frames leave evenly spaced rather than in
//!   bursts, and `send` returns how many were due in its call. A sender that
//!   falls behind (its CPU was busy) sends what fell due meanwhile at once,
//!   up to 32 frames (what a receiver's ring must hold: a veth's takes 256);
//!   further behind, it goes on from then, as it does at the start of each
//!   test run (the kernel's set-up between two takes some 20 ms). The CPU
//!   that sends stays busy either way: it runs the program until frames are
//!   due.
//! - A run is a frame handed to the device's XDP transmit. A device that cannot
//!   take it (a full queue, a veth whose peer has neither an XDP program nor
//!   GRO) drops it, and the kernel tells the sender nothing: only a receiver
//!   knows what arrived.
//! - With [`XdpGenOptions::vary_ports`] N above 0, run `k` adds `k mod N` to
//!   the source port of an untagged IPv4 TCP or UDP frame, with its checksum
//!   kept right; other frames go as they are.
//! - The kernel's own refusal of live frames (an older kernel) is
//!   [`GenError::NoLiveFrames`], worded so.
//! - Everything is done in [`XdpGenOptions::netns`] when given: the test run
//!   redirects within the namespace of the thread that calls it.

use crate::sys::xdp_gen as sys;

use super::{in_netns, longest_frame, sys as tx_sys, TxError, ETH_HLEN};
use crate::privileges::Operation;
use crate::source::live::{chain, io_error};
use crate::source::pacing::Pacing;
use crate::sys::bpf::{test_run, test_run_flags};
use aya::maps::{Array, MapData};
use aya::programs::Xdp;
use aya::{Ebpf, EbpfLoader};
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

pub use sys::MAX_FRAME;

/// Most frames a generator holds: their array takes about 2 KiB of kernel
/// memory each, 128 MiB at this count.
pub const MAX_FRAMES: usize = 65_536;
/// Most frames the kernel transmits at once, its `TEST_XDP_MAX_BATCH`.
const MAX_BATCH: u32 = 256;

const PROGRAM_NAME: &str = "weir_gen";
/// What loading and running the program takes.
const NEEDS: &str = "needs CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN (run as root)";
const FRAMES_MAP: &str = "weir_gen_frames";
const STATE_MAP: &str = "weir_gen_state";

/// The object built by build.rs; aligned because the ELF reader needs it.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/weir_gen.o"));

/// How to open an [`XdpGenerator`].
#[derive(Clone, Debug, PartialEq)]
pub struct XdpGenOptions {
    /// Send inside this network namespace (a name under /var/run/netns, or a
    /// path like /proc/PID/ns/net).
    pub netns: Option<PathBuf>,
    /// Vary the source port of IPv4 TCP and UDP frames over this many values
    /// (0: send the frames as given).
    pub vary_ports: u16,
    /// Frames the kernel builds and transmits per flush, 1 to 256.
    pub batch: u32,
    /// Top speed, or a rate in packets or megabits (of the frames' bytes) per
    /// second; a multiple of the recorded timing is refused (the kernel holds
    /// the frames, not their times).
    pub pacing: Pacing,
}

impl Default for XdpGenOptions {
    fn default() -> Self {
        XdpGenOptions { netns: None, vary_ports: 0, batch: 64, pacing: Pacing::TopSpeed }
    }
}

/// Why the generator could not be opened or could not send.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenError {
    /// The interface or namespace: missing, down, not Ethernet, not enterable.
    #[error(transparent)]
    Tx(#[from] TxError),
    /// No frames to send.
    #[error("no packets to send")]
    Empty,
    /// More frames than the generator holds.
    #[error("too many packets ({frames} read): --xdp holds the trace in kernel memory, at most {max} packets (cut it with -c or -f)", max = MAX_FRAMES)]
    TooMany {
        /// Frames offered.
        frames: usize,
    },
    /// A frame the interface or the generator cannot carry.
    #[error("packet {number} ({len} bytes) cannot be sent on {iface}: {why}")]
    Frame {
        /// The interface.
        iface: String,
        /// Its position, from 1.
        number: usize,
        /// Its length.
        len: usize,
        /// Why, worded for the user.
        why: String,
    },
    /// Options out of range.
    #[error("XDP generator options: {0}")]
    Options(String),
    /// Loading the program or filling its maps failed.
    #[error("{iface}: {what}: {detail}")]
    Load {
        /// The interface.
        iface: String,
        /// The step.
        what: &'static str,
        /// The cause, with a missing capability named.
        detail: String,
    },
    /// The kernel refused the live-frames test run itself.
    #[error(
        "{iface}: the kernel refused the XDP live-frames test run (BPF_PROG_TEST_RUN with \
         BPF_F_TEST_XDP_LIVE_FRAMES, Linux 5.18 and later): {error}; send without --xdp"
    )]
    NoLiveFrames {
        /// The interface.
        iface: String,
        /// The kernel's answer.
        error: io::Error,
    },
    /// The test run failed otherwise.
    #[error("sending on {iface}: {error}")]
    Run {
        /// The interface.
        iface: String,
        /// The OS error.
        error: io::Error,
    },
}

impl GenError {
    /// True when the error is in what the user asked for (the interface, the
    /// frames, the options), not in the system; the CLI exits with 2 for these.
    pub fn is_bad_input(&self) -> bool {
        match self {
            GenError::Tx(e) => e.is_bad_input(),
            GenError::Empty | GenError::TooMany { .. } | GenError::Frame { .. } | GenError::Options(_) => true,
            _ => false,
        }
    }
}

/// The frames an interface can carry, and how many it cannot (see [`sendable`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sendable {
    /// The frames kept, in their order.
    pub frames: Vec<Vec<u8>>,
    /// The interface's MTU.
    pub mtu: u32,
    /// Frames left out: longer than the MTU plus their link header.
    pub above_mtu: u64,
    /// Frames left out: shorter than an Ethernet header.
    pub too_short: u64,
}

/// Keep the `frames` that `iface` (in `netns`, when given) can carry, and
/// count the others, as an AF_PACKET TX ring refuses them. Fails as
/// [`XdpGenerator::open`] does on the interface.
pub fn sendable(iface: &str, netns: &Option<PathBuf>, frames: Vec<Vec<u8>>) -> Result<Sendable, GenError> {
    let (_, mtu) = in_netns(netns, || device(iface, netns))?;
    let mut out = Sendable { frames: Vec::with_capacity(frames.len()), mtu, above_mtu: 0, too_short: 0 };
    for f in frames {
        if f.len() < ETH_HLEN {
            out.too_short += 1;
        } else if f.len() > longest_frame(mtu, &f) {
            out.above_mtu += 1;
        } else {
            out.frames.push(f);
        }
    }
    Ok(out)
}

/// weir's generator program, loaded with a trace, ready to send it.
pub struct XdpGenerator {
    ebpf: Ebpf,
    state: Array<MapData, sys::State>,
    /// The first frame: the kernel builds every run's frame from it, and the
    /// program resizes and overwrites it.
    seed: Vec<u8>,
    iface: String,
    mtu: u32,
    netns: Option<PathBuf>,
    batch: u32,
}

impl XdpGenerator {
    /// Check `iface` and `frames` and load the program with them, as the
    /// module says. Needs CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN), and
    /// CAP_SYS_ADMIN for another namespace.
    pub fn open(iface: &str, frames: &[Vec<u8>], opts: &XdpGenOptions) -> Result<XdpGenerator, GenError> {
        if !(1..=MAX_BATCH).contains(&opts.batch) {
            return Err(GenError::Options(format!("batch {} is not 1 to {MAX_BATCH}", opts.batch)));
        }
        let (gap_ps, bps) = pace(opts.pacing)?;
        if frames.is_empty() {
            return Err(GenError::Empty);
        }
        if frames.len() > MAX_FRAMES {
            return Err(GenError::TooMany { frames: frames.len() });
        }
        let (index, mtu) = in_netns(&opts.netns, || device(iface, &opts.netns))?;
        let frame_error = |number: usize, len: usize, why: String| GenError::Frame { iface: iface.into(), number, len, why };
        for (i, f) in frames.iter().enumerate() {
            if f.len() < ETH_HLEN {
                return Err(frame_error(i + 1, f.len(), "shorter than an Ethernet header (14 bytes)".into()));
            }
            let limit = longest_frame(mtu, f);
            if f.len() > limit {
                return Err(frame_error(i + 1, f.len(), format!("longer than the MTU {mtu} plus its link header ({limit} bytes)")));
            }
            if f.len() > MAX_FRAME {
                return Err(frame_error(i + 1, f.len(), format!("--xdp sends frames of at most {MAX_FRAME} bytes")));
            }
        }
        let load_error = |what: &'static str, e: &(dyn std::error::Error + 'static)| {
            let error = io_error(e);
            // EACCES is also the verifier's refusal, which no capability cures.
            let detail = if error.raw_os_error() == Some(libc::EPERM) { format!("{}: {NEEDS}", chain(e)) } else { chain(e) };
            GenError::Load { iface: iface.into(), what, detail }
        };
        // Frames fit u32 by the checks above.
        let count = frames.len() as u32;
        let mut ebpf = EbpfLoader::new()
            .set_max_entries(FRAMES_MAP, count)
            .load(OBJECT)
            .map_err(|e| load_error("creating the generator's maps", &e))?;
        let mut table: Array<MapData, sys::Frame> = ebpf
            .take_map(FRAMES_MAP)
            .ok_or_else(|| missing(iface, FRAMES_MAP))?
            .try_into()
            .map_err(|e| load_error("opening the frame map", &e))?;
        let mut slot = sys::Frame { len: 0, data: [0; MAX_FRAME] };
        for (i, f) in frames.iter().enumerate() {
            slot.data[..f.len()].copy_from_slice(f);
            slot.len = f.len() as u32;
            table.set(i as u32, slot, 0).map_err(|e| load_error("filling the frame map", &e))?;
        }
        let mut state: Array<MapData, sys::State> = ebpf
            .take_map(STATE_MAP)
            .ok_or_else(|| missing(iface, STATE_MAP))?
            .try_into()
            .map_err(|e| load_error("opening the state map", &e))?;
        let initial = sys::State {
            next: 0,
            ifindex: index,
            frames: count,
            vary_ports: u32::from(opts.vary_ports),
            pad: 0,
            gap_ps,
            bps,
            due_ns: 0,
            rem_ps: 0,
            stop_at: u64::MAX,
        };
        state.set(0, initial, 0).map_err(|e| load_error("setting the generator's state", &e))?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| missing(iface, PROGRAM_NAME))?
            .try_into()
            .map_err(|e| load_error("weir's generator program", &e))?;
        prog.load().map_err(|e| load_error("loading weir's generator program", &e))?;
        Ok(XdpGenerator { ebpf, state, seed: frames[0].clone(), iface: iface.into(), mtu, netns: opts.netns.clone(), batch: opts.batch })
    }

    /// The interface's MTU in bytes when the generator was opened.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Frames sent so far, over every [`send`](Self::send).
    pub fn runs(&self) -> Result<u64, GenError> {
        self.state
            .get(&0, 0)
            .map(|s| s.next)
            .map_err(|e| GenError::Run { iface: self.iface.clone(), error: io::Error::other(e.to_string()) })
    }

    /// Run the program `n` times, sending at most `most` frames, as the module
    /// says; how many frames were sent.
    pub fn send(&mut self, n: u32, most: u64) -> Result<u64, GenError> {
        let run_error = |e: aya::maps::MapError| GenError::Run { iface: self.iface.clone(), error: io::Error::other(e.to_string()) };
        let mut state = self.state.get(&0, 0).map_err(run_error)?;
        let before = state.next;
        state.stop_at = before.saturating_add(most);
        // A paced schedule starts again with the run: the frames due while the
        // last run ended and this one was set up (some 20 ms here) are not
        // sent in a burst at its start, which a receiver's ring would not hold.
        state.due_ns = 0;
        self.state.set(0, state, 0).map_err(run_error)?;
        let prog: &Xdp = self.ebpf.program(PROGRAM_NAME).ok_or_else(|| missing(&self.iface, PROGRAM_NAME))?.try_into().map_err(
            |e: aya::programs::ProgramError| GenError::Run { iface: self.iface.clone(), error: io::Error::other(e.to_string()) },
        )?;
        let fd = prog.fd().map_err(|e| GenError::Run { iface: self.iface.clone(), error: io::Error::other(e.to_string()) })?;
        let (seed, batch) = (&self.seed, self.batch);
        let result =
            in_netns(&self.netns, || Ok::<_, GenError>(test_run(fd.as_fd(), seed, n, test_run_flags::XDP_LIVE_FRAMES, batch).map(drop)))?;
        match result {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            // ENOTSUPP (524) is the kernel's own "not supported", as EOPNOTSUPP.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(524)) => {
                return Err(GenError::NoLiveFrames { iface: self.iface.clone(), error: e })
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                return Err(GenError::Load { iface: self.iface.clone(), what: "running the generator", detail: format!("{e}: {NEEDS}") })
            }
            Err(error) => return Err(GenError::Run { iface: self.iface.clone(), error }),
        }
        Ok(self.runs()? - before)
    }
}

/// The program's pacing fields for `pacing`: a gap in picoseconds, or a bit rate.
fn pace(pacing: Pacing) -> Result<(u64, u64), GenError> {
    let bad = |what: String| Err(GenError::Options(what));
    match pacing {
        Pacing::TopSpeed => Ok((0, 0)),
        // At most 10^9 packets a second: a gap of at least 1,000 ps.
        Pacing::Pps(r) if r.is_finite() && (0.001..=1e9).contains(&r) => Ok(((1e12 / r).round() as u64, 0)),
        Pacing::Mbps(r) if r.is_finite() && (0.001..=1e7).contains(&r) => Ok((0, (r * 1e6).round() as u64)),
        Pacing::Pps(r) => bad(format!("{r} packets a second is not 0.001 to 10^9")),
        Pacing::Mbps(r) => bad(format!("{r} Mbit/s is not 0.001 to 10^7")),
        Pacing::Speed(_) => {
            bad("--xdp paces at a rate (--pps, --mbps), not at a multiple of the recorded timing (--speed): the kernel holds the \
             frames, not their times"
                .into())
        }
    }
}

fn missing(iface: &str, what: &str) -> GenError {
    GenError::Load {
        iface: iface.into(),
        what: "weir's generator object",
        detail: format!("it has no {what:?}: ebpf/weir_gen.c and the loader disagree"),
    }
}

/// Index and MTU of `iface`, which must be up and take Ethernet frames.
fn device(iface: &str, netns: &Option<PathBuf>) -> Result<(u32, u32), TxError> {
    let fd = tx_sys::packet_socket().map_err(|e| TxError::setup(iface, "opening a packet socket", Operation::PacketSocket, e))?;
    let dev = tx_sys::device(&fd, iface).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::InvalidInput => TxError::NoSuchInterface { iface: iface.into(), netns: netns.clone() },
        _ => TxError::Setup { iface: iface.into(), what: "asking the device's flags and MTU", error: e },
    })?;
    if !matches!(dev.hw_type, tx_sys::ARPHRD_ETHER | tx_sys::ARPHRD_LOOPBACK) {
        return Err(TxError::NotEthernet { iface: iface.into(), hw_type: dev.hw_type });
    }
    if !dev.up {
        return Err(TxError::Down { iface: iface.into() });
    }
    let index = crate::source::ifindex(iface).map_err(|_| TxError::NoSuchInterface { iface: iface.into(), netns: netns.clone() })?;
    Ok((index, dev.mtu))
}

#[cfg(test)]
mod tests;
