//! The sleep of a capture thread between looks at a ring the kernel fills
//! (afxdp's RX ring, xdp's ring buffer) while packets flow: long enough for
//! many packets to gather, so each look takes a batch whatever the rate and
//! the wake-ups per packet fall as the rate rises; short enough that a
//! quarter of the ring cannot fill meanwhile.

use std::time::{Duration, Instant};

/// Longest sleep between looks at the ring while packets flow: the latency
/// a packet may gain before the capture thread takes it (then at most the
/// unit's publish delay more in a partly filled chunk; afpacket's block
/// timeout lets a packet wait up to 100 ms). Measured at 200 kpps per queue: 1 ms
/// left afxdp about twice afpacket's CPU per packet, mostly wake-ups; at 50
/// and 200 kpps per queue 4 ms left it 1.2-1.7 times, 10 ms 1.1-1.25 times,
/// with half the system calls per packet (bench/afxdp_cpu.py).
pub(crate) const GATHER_MAX: Duration = Duration::from_millis(10);
/// Shortest such sleep: at rates where a quarter of the ring fills faster,
/// the unit looks this often (a sleep much shorter costs as much as it saves).
pub(crate) const GATHER_MIN: Duration = Duration::from_micros(20);
/// The sleep between looks at a ring while packets flow: from the rate since
/// the last look, the time a quarter of the ring takes to fill, within
/// [`GATHER_MIN`]..[`GATHER_MAX`]. A quarter leaves room for the rate to
/// quadruple during a sleep without an overflow (and a burst beyond that is
/// what the rest of the ring is for).
pub(crate) struct Gather {
    /// A quarter of the ring, in the unit `took` counts in.
    room: f64,
    /// When the unit last looked at the ring (woke up).
    since: Instant,
    /// What was taken since then (packets, or bytes).
    taken: u64,
    /// Whether `since` was a look after a sleep, so `taken` over the time since
    /// is a rate; after an idle wait it is not (the first packets came at once).
    measured: bool,
}

impl Gather {
    /// A ring of `capacity`: entries (afxdp's RX ring) or bytes (xdp's ring
    /// buffer), counted in the same unit as [`took`](Self::took).
    pub(crate) fn new(capacity: u64) -> Gather {
        Gather { room: (capacity / 4) as f64, since: Instant::now(), taken: 0, measured: false }
    }

    /// The unit woke from an idle wait: the packets to come arrive from now on,
    /// and what came before the wait says nothing about their rate.
    pub(crate) fn restart(&mut self) {
        self.since = Instant::now();
        self.taken = 0;
        self.measured = false;
    }

    pub(crate) fn took(&mut self, n: u64) {
        self.taken += n;
    }

    /// Whether packets were taken since the last look.
    pub(crate) fn flowing(&self) -> bool {
        self.taken > 0
    }

    /// How long to sleep, at `now`, after the ring was emptied. Right after an
    /// idle wait the rate is unknown and may be high: the shortest sleep, which
    /// measures it.
    pub(crate) fn next(&mut self, now: Instant) -> Duration {
        let elapsed = now.duration_since(self.since);
        let fill = match self.measured {
            true => elapsed.mul_f64(self.room / self.taken.max(1) as f64),
            false => GATHER_MIN,
        };
        self.since = now;
        self.taken = 0;
        self.measured = true;
        fill.clamp(GATHER_MIN, GATHER_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `taken` packets over `elapsed` after a sleep, then the sleep asked for.
    fn sleep_after(rx_entries: u64, taken: u64, elapsed: Duration) -> Duration {
        let mut g = Gather::new(rx_entries);
        let start = g.since;
        assert_eq!(g.next(start), GATHER_MIN, "the first sleep, at an unknown rate");
        g.took(taken);
        g.next(start + elapsed)
    }

    #[test]
    fn the_gather_sleep_lets_a_quarter_of_the_ring_fill_within_its_bounds() {
        // 65,536 entries: a quarter is 16,384 packets. 100 packets in 100 µs
        // (1 Mpps) fill it in 16 ms: the longest sleep.
        assert_eq!(sleep_after(65536, 100, Duration::from_micros(100)), GATHER_MAX);
        // 512 entries at 1 Mpps: 128 packets take 128 µs.
        let d = sleep_after(512, 100, Duration::from_micros(100));
        assert!(d > Duration::from_micros(127) && d < Duration::from_micros(129), "{d:?}");
        // A tiny ring at a high rate: never shorter than the shortest sleep.
        assert_eq!(sleep_after(64, 10_000, Duration::from_micros(100)), GATHER_MIN);
        // After an idle wait the rate is unknown: a few packets at once say
        // nothing of it, so the shortest sleep, then a measured one.
        let mut g = Gather::new(4096);
        g.restart();
        g.took(3);
        assert!(g.flowing());
        let at = g.since + Duration::from_micros(50);
        assert_eq!(g.next(at), GATHER_MIN);
        assert!(!g.flowing(), "a look starts a new count");
        g.took(1024);
        assert_eq!(g.next(at + Duration::from_micros(500)), Duration::from_micros(500));
    }
}
