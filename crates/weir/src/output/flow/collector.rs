//! One collector (`weir flows -n HOST:PORT`): its own connected UDP socket,
//! the token bucket that paces the datagrams sent to it, and what became of
//! them.
//!
//! Contract: a datagram counts as sent once the socket took it
//! ([`CollectorStats::datagrams`]), as not sent when it did not
//! ([`CollectorStats::send_errors`]); what came back port unreachable is
//! counted on top ([`CollectorStats::bounced`], a floor); no collector gets
//! more than [`Pacing::rate`] datagrams a second beyond a burst of
//! [`Pacing::burst`], whichever exporter threads send to it.
//!
//! UDP has no flow control: a burst larger than the collector's socket
//! buffer is dropped by the collector's kernel, and nobody tells the sender.
//! The end of a trace (or a Ctrl-C) closes every open flow at once, so an
//! unpaced exporter sends its largest burst exactly when the run ends. Each
//! collector therefore gets at most [`Pacing::rate`] datagrams a second, in
//! bursts of at most [`Pacing::burst`], which a collector on the same host
//! reads as fast as they come (bench and test figures in docs/src/benchmarks.md,
//! "Flow export pacing"). The
//! bucket of a collector is shared by every exporter thread of the run
//! (one a queue with `weir flows --export per-queue`), so the rate is the
//! collector's, not a lane's.
//!
//! The socket is connected, so the ICMP port unreachable that a closed port
//! answers with comes back: the kernel reports it as ECONNREFUSED on the
//! next send (which then did not leave) or through SO_ERROR. Each such
//! report is one datagram that bounced; the datagram whose send reported it
//! is sent again at once. Bounces are counted per collector, with the
//! records of the datagram they most likely belong to (the one sent last: on
//! loopback the error is back before the send returns). The count is a
//! floor: the kernel sends at most `net.ipv4.icmp_msgs_per_sec` (1000) ICMP
//! errors a second after a burst of 50, and on a real network several errors
//! between two sends fold into one. A collector whose first datagram bounced
//! and which still bounced at the end has nothing listening: the run says so
//! and fails.
//!
//! The send buffer is raised (to [`SEND_BUFFER`], or as far as
//! `net.core.wmem_max` lets an unprivileged socket go) so a paced burst never
//! waits on the local queue of a slow interface.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The send buffer each collector's socket asks for.
pub const SEND_BUFFER: usize = 4 << 20;

/// How fast datagrams may go to one collector.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Pacing {
    /// Datagrams a second; `None`: as fast as the socket takes them.
    pub rate: Option<u32>,
    /// Datagrams that may go at once after a quiet spell. A collector's
    /// socket buffer on Linux holds about 90 full-size datagrams with the
    /// default `net.core.rmem_default` of 208 KB: a burst of 32 leaves room
    /// for two more before it has read any.
    pub burst: u32,
}

impl Pacing {
    /// The default: 10,000 datagrams a second (about 300,000 IPFIX records a
    /// second, 115 Mbit/s), which nfcapd on the same 2-core host stores
    /// without a loss at its default socket buffer (see docs/src/benchmarks.md,
    /// "Flow export pacing", for the measurement).
    pub const DEFAULT_RATE: u32 = 10_000;
    /// The burst: see [`Pacing::burst`].
    pub const BURST: u32 = 32;

    /// At most `rate` datagrams a second (0: no pacing), in bursts of [`Pacing::BURST`].
    pub fn new(rate: u32) -> Pacing {
        Pacing { rate: (rate > 0).then_some(rate), burst: Pacing::BURST }
    }
}

/// A token bucket: one token a datagram.
#[derive(Debug)]
struct Bucket {
    pacing: Pacing,
    tokens: f64,
    at: Instant,
    /// Time spent waiting for a token, all senders together.
    waited: Duration,
}

impl Bucket {
    /// Takes a token, first sleeping until there is one.
    fn take(&mut self) {
        let Some(rate) = self.pacing.rate else { return };
        let rate = f64::from(rate);
        let burst = f64::from(self.pacing.burst.max(1));
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * rate).min(burst);
        self.at = now;
        if self.tokens < 1.0 {
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / rate);
            std::thread::sleep(wait);
            self.waited += wait;
            let now = Instant::now();
            self.tokens += now.duration_since(self.at).as_secs_f64() * rate;
            self.at = now;
        }
        self.tokens -= 1.0;
    }
}

/// The pacing of one collector, shared by the exporter threads that send to it.
#[derive(Clone, Debug)]
pub struct Pacer(Arc<Mutex<Bucket>>);

impl Pacer {
    /// A bucket for one collector, full (a burst may go at once).
    pub fn new(pacing: Pacing) -> Pacer {
        let burst = f64::from(pacing.burst.max(1));
        Pacer(Arc::new(Mutex::new(Bucket { pacing, tokens: burst, at: Instant::now(), waited: Duration::ZERO })))
    }

    /// Waits for this collector's turn. The lock is held while sleeping: the
    /// other threads sending to this collector wait for the same token.
    fn take(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
    }

    /// Time spent waiting for a token, by every sender of this collector.
    pub fn waited(&self) -> Duration {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).waited
    }
}

/// What became of the datagrams sent to one collector (one exporter
/// thread's share; [`CollectorStats::add`] sums the threads).
#[derive(Clone, Debug, Default)]
pub struct CollectorStats {
    /// The collector's address.
    pub addr: Option<SocketAddr>,
    /// Datagrams handed to the socket.
    pub datagrams: u64,
    /// Datagrams that came back port unreachable (ECONNREFUSED), as the
    /// kernel reported them (a floor),
    pub bounced: u64,
    /// and the records they carried.
    pub bounced_records: u64,
    /// Datagrams the socket did not take (any other error),
    pub send_errors: u64,
    /// and the first error.
    pub first_error: Option<String>,
    /// The first datagram bounced and so did one of the last ones: nothing
    /// listens at the collector's port.
    pub nothing_listens: bool,
    /// Time its senders waited on its pacer.
    pub paced: Duration,
}

impl CollectorStats {
    /// Adds another exporter thread's counts of the same collector.
    pub fn add(&mut self, o: &CollectorStats) {
        // Every exporter thread that sent to it found nobody there.
        self.nothing_listens = match (self.datagrams, o.datagrams) {
            (_, 0) => self.nothing_listens,
            (0, _) => o.nothing_listens,
            _ => self.nothing_listens && o.nothing_listens,
        };
        self.addr = self.addr.or(o.addr);
        self.datagrams += o.datagrams;
        self.bounced += o.bounced;
        self.bounced_records += o.bounced_records;
        self.send_errors += o.send_errors;
        // One pacer for all: each thread read the same total.
        self.paced = self.paced.max(o.paced);
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
    }
}

/// A bounce among the last this many datagrams counts as "still bouncing at
/// the end": at 10,000 datagrams a second and 1,000 ICMP errors, one in ten
/// is reported.
const LATE: u64 = 100;

/// One collector, as one exporter thread sends to it.
pub(crate) struct Collector {
    sock: UdpSocket,
    pacer: Pacer,
    /// Records in the last datagram handed over: those of a bounce reported later.
    last_records: u64,
    /// The first datagram bounced; the number of the last one that did.
    first_bounced: bool,
    last_bounce: u64,
    pub(crate) stats: CollectorStats,
}

impl Collector {
    /// A socket connected to `addr` (a connect on UDP only sets the peer:
    /// nothing is sent), its send buffer raised.
    pub(crate) fn open(addr: SocketAddr, pacer: Pacer) -> io::Result<Collector> {
        let sock = UdpSocket::bind(if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })?;
        sock.connect(addr)?;
        raise_send_buffer(&sock);
        Ok(Collector {
            sock,
            pacer,
            last_records: 0,
            first_bounced: false,
            last_bounce: 0,
            stats: CollectorStats { addr: Some(addr), ..CollectorStats::default() },
        })
    }

    /// Sends one message of `records` records when the pacer allows; false
    /// if the socket did not take it.
    pub(crate) fn send(&mut self, msg: &[u8], records: u64) -> bool {
        self.pacer.take();
        let mut sent = self.sock.send(msg);
        if matches!(&sent, Err(e) if e.kind() == io::ErrorKind::ConnectionRefused) {
            // An earlier datagram bounced; this one has not left yet.
            self.bounced();
            sent = self.sock.send(msg);
        }
        match sent {
            Ok(_) => {
                self.stats.datagrams += 1;
                self.last_records = records;
                true
            }
            Err(e) => {
                self.stats.send_errors += 1;
                if self.stats.first_error.is_none() {
                    self.stats.first_error = Some(e.to_string());
                }
                false
            }
        }
    }

    fn bounced(&mut self) {
        self.stats.bounced += 1;
        self.stats.bounced_records += std::mem::take(&mut self.last_records);
        self.first_bounced |= self.stats.datagrams == 1;
        self.last_bounce = self.stats.datagrams;
    }

    /// After the last send: takes a bounce reported since (SO_ERROR), after
    /// `settle` for the ICMP error to come back.
    pub(crate) fn finish(&mut self, settle: Duration) {
        self.stats.paced = self.pacer.waited();
        if self.stats.datagrams == 0 {
            return;
        }
        std::thread::sleep(settle);
        if let Ok(Some(e)) = self.sock.take_error() {
            if e.kind() == io::ErrorKind::ConnectionRefused {
                self.bounced();
            }
        }
        self.stats.nothing_listens = self.first_bounced && self.stats.datagrams - self.last_bounce < LATE;
    }
}

/// Asks for [`SEND_BUFFER`]: past `net.core.wmem_max` as root
/// (SO_SNDBUFFORCE), else as far as that limit. Only an optimisation: a
/// smaller buffer is kept.
fn raise_send_buffer(sock: &UdpSocket) {
    use nix::sys::socket::{setsockopt, sockopt};
    if setsockopt(sock, sockopt::SndBufForce, &SEND_BUFFER).is_err() {
        let _ = setsockopt(sock, sockopt::SndBuf, &SEND_BUFFER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_lets_a_burst_go_then_holds_the_rate() {
        let pacer = Pacer::new(Pacing { rate: Some(1000), burst: 10 });
        let t = Instant::now();
        for _ in 0..10 {
            pacer.take();
        }
        assert!(t.elapsed() < Duration::from_millis(5), "the burst went at once");
        for _ in 0..50 {
            pacer.take();
        }
        // 50 more at 1000/s: at least 50 ms, as the bucket counted it.
        assert!(t.elapsed() >= Duration::from_millis(49), "{:?}", t.elapsed());
        // A sleep may overshoot, leaving tokens for the next: the waits add
        // up to less than the time, never more.
        assert!(pacer.waited() > Duration::from_millis(10) && pacer.waited() <= t.elapsed(), "{:?}", pacer.waited());
    }

    #[test]
    fn unpaced_never_waits() {
        let pacer = Pacer::new(Pacing::new(0));
        for _ in 0..100_000 {
            pacer.take();
        }
        assert_eq!(pacer.waited(), Duration::ZERO);
    }

    #[test]
    fn a_closed_port_bounces_every_datagram_and_each_is_sent_again() {
        // A port nothing listens on: bound for a moment, then closed.
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let mut c = Collector::open(port, Pacer::new(Pacing::new(0))).unwrap();
        for _ in 0..20 {
            assert!(c.send(b"x", 3), "{:?}", c.stats.first_error);
        }
        c.finish(Duration::from_millis(50));
        assert_eq!(c.stats.datagrams, 20);
        // The kernel's ICMP budget (a burst of 50) may be spent by other
        // tests running beside this one: each bounce it reports is counted.
        assert!(c.stats.bounced >= 1 && c.stats.bounced_records == 3 * c.stats.bounced, "{:?}", c.stats);
        assert!(c.stats.nothing_listens, "{:?}", c.stats);
    }

    #[test]
    fn a_listening_port_bounces_nothing() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut c = Collector::open(rx.local_addr().unwrap(), Pacer::new(Pacing::new(0))).unwrap();
        for _ in 0..20 {
            assert!(c.send(b"x", 3));
        }
        c.finish(Duration::from_millis(20));
        assert_eq!((c.stats.datagrams, c.stats.bounced, c.stats.nothing_listens), (20, 0, false));
        let mut buf = [0u8; 8];
        for _ in 0..20 {
            assert_eq!(rx.recv(&mut buf).unwrap(), 1);
        }
    }
}
