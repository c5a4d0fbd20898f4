//! Replaying recorded packets at a chosen speed, with tcpreplay's semantics.
//!
//! - top speed (default): as fast as the engine takes them; the source waits for
//!   free cells instead of dropping.
//! - `Pps(r)`: packet i is due at i / r seconds.
//! - `Mbps(r)`: a packet is due when the wire bytes before it took r Mbit/s.
//! - `Speed(x)`: recorded timing divided by x (2.0 = twice as fast).
//!
//! A paced source behaves like a NIC: a packet that finds no free cell when it is
//! due is a capture drop. A source that falls behind schedule sends what is due at
//! once and does not try to catch up by dropping.

use crate::{Setting, SettingError};
use std::time::{Duration, Instant};

/// Sleeping is only precise to tens of microseconds; the rest is spun.
const SPIN_BELOW: Duration = Duration::from_micros(200);

/// How fast recorded packets are replayed. A rate is valid only within its
/// range: take a user's value through [`checked`](Self::checked), since
/// neither the engine nor [`Pacer`] checks it again.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub enum Pacing {
    /// As fast as free cells allow; nothing is dropped.
    #[default]
    TopSpeed,
    /// Packets per second (0.001 to 10⁹): packet i is due i / r seconds after the first.
    Pps(f64),
    /// Megabits per second of wire length (0.001 to 10⁷).
    Mbps(f64),
    /// A multiple of the recorded timing (10⁻⁶ to 10⁶; 2.0 is twice as fast).
    Speed(f64),
}

/// The rates a pacing may have. Slower than the lowest, a packet would be due
/// so far off that no run could reach it; faster than the highest is top speed.
const PPS_RANGE: (f64, f64) = (0.001, 1e9);
const MBPS_RANGE: (f64, f64) = (0.001, 1e7);
const SPEED_RANGE: (f64, f64) = (1e-6, 1e6);

/// No packet is scheduled further than this from the start (about 31,700
/// years): a trace's timestamps can be anything, and what a slow pacing
/// makes of them must stay a time the clock can hold.
const FARTHEST_SECS: f64 = 1e12;

impl Pacing {
    /// The pacing itself, or an error naming [`Setting::Pacing`] for a rate
    /// outside its range (zero, negative and not finite among them).
    pub fn checked(self) -> Result<Pacing, SettingError> {
        let check = |what: &str, v: f64, (lo, hi): (f64, f64)| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(self)
            } else {
                Err(SettingError::new(Setting::Pacing, format!("{v} {what} is out of range: must be from {lo} to {hi}")))
            }
        };
        match self {
            Pacing::TopSpeed => Ok(self),
            Pacing::Pps(v) => check("packets per second", v, PPS_RANGE),
            Pacing::Mbps(v) => check("Mbit/s", v, MBPS_RANGE),
            Pacing::Speed(v) => check("times the recorded speed", v, SPEED_RANGE),
        }
    }

    /// True for every pacing but top speed.
    pub fn is_paced(&self) -> bool {
        !matches!(self, Pacing::TopSpeed)
    }
}

/// When each packet of one replay is due: the first is due when it is first
/// asked about, each later one by the pacing's rule. One per replay, fed every
/// packet in order.
pub struct Pacer {
    pacing: Pacing,
    start: Option<Instant>,
    first_ts: u64,
    packets: u64,
    bits: f64,
}

impl Pacer {
    /// A schedule for `pacing`, which should be [`checked`](Pacing::checked).
    pub fn new(pacing: Pacing) -> Pacer {
        Pacer { pacing, start: None, first_ts: 0, packets: 0, bits: 0.0 }
    }

    pub(crate) fn is_paced(&self) -> bool {
        self.pacing.is_paced()
    }

    /// The instant this packet is due, or `None` at top speed. Call once per
    /// packet, in order: `ts_ns` is its timestamp (for [`Pacing::Speed`]),
    /// `wire_len` its length on the wire (for [`Pacing::Mbps`]). Timestamps
    /// that go backwards make a packet due at once, never before the start.
    #[inline]
    pub fn due(&mut self, ts_ns: u64, wire_len: u32) -> Option<Instant> {
        if !self.is_paced() {
            return None;
        }
        let start = *self.start.get_or_insert_with(|| {
            self.first_ts = ts_ns;
            Instant::now()
        });
        let secs = match self.pacing {
            Pacing::TopSpeed => 0.0,
            Pacing::Pps(r) => self.packets as f64 / r,
            Pacing::Mbps(r) => {
                let s = self.bits / (r * 1e6);
                self.bits += f64::from(wire_len) * 8.0;
                s
            }
            Pacing::Speed(x) => ts_ns.saturating_sub(self.first_ts) as f64 / 1e9 / x,
        };
        self.packets += 1;
        Some(start + Duration::from_secs_f64(secs.clamp(0.0, FARTHEST_SECS)))
    }
}

/// How long until `due`, or zero if it has passed.
pub fn until(due: Instant) -> Duration {
    due.saturating_duration_since(Instant::now())
}

/// Wait until `due`: sleep most of the way, spin the rest.
pub fn wait_until(due: Instant) {
    loop {
        let left = until(due);
        if left.is_zero() {
            return;
        }
        if left > SPIN_BELOW {
            std::thread::sleep(left - SPIN_BELOW / 2);
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(p: Pacing, pkts: &[(u64, u32)]) -> Vec<f64> {
        let mut pacer = Pacer::new(p);
        let first = pacer.due(pkts[0].0, pkts[0].1).unwrap();
        std::iter::once(0.0).chain(pkts[1..].iter().map(|&(t, l)| (pacer.due(t, l).unwrap() - first).as_secs_f64())).collect()
    }

    #[test]
    fn schedules() {
        let pkts = [(1_000_000_000, 1000), (1_500_000_000, 500), (3_000_000_000, 125)];
        assert_eq!(offsets(Pacing::Pps(2.0), &pkts), [0.0, 0.5, 1.0]);
        // 8000 bits at 0.008 Mbit/s = 1 s; then 4000 more bits = 1.5 s.
        assert_eq!(offsets(Pacing::Mbps(0.008), &pkts), [0.0, 1.0, 1.5]);
        assert_eq!(offsets(Pacing::Speed(2.0), &pkts), [0.0, 0.25, 1.0]);
        // Timestamps that go backwards are due at once, not in the past before the start.
        assert_eq!(offsets(Pacing::Speed(1.0), &[(5, 1), (3, 1)]), [0.0, 0.0]);
        assert!(Pacer::new(Pacing::TopSpeed).due(1, 1).is_none());
    }

    #[test]
    fn rejects_bad_rates() {
        for p in [
            Pacing::Pps(0.0),
            Pacing::Mbps(-1.0),
            Pacing::Speed(f64::NAN),
            Pacing::Pps(f64::INFINITY),
            Pacing::Speed(1e-300),
            Pacing::Mbps(1e-300),
            Pacing::Pps(1e300),
        ] {
            assert!(p.checked().is_err(), "{p:?}");
        }
        assert!(Pacing::Speed(0.5).checked().is_ok());
    }

    /// The slowest pacing on the most distant timestamps still gives a time.
    #[test]
    fn far_timestamps_stay_representable() {
        let mut p = Pacer::new(Pacing::Speed(SPEED_RANGE.0));
        let first = p.due(0, 60).unwrap();
        let last = p.due(u64::MAX, 60).unwrap();
        assert!(last > first);
    }

    #[test]
    fn waits_until_due() {
        let due = Instant::now() + Duration::from_millis(3);
        wait_until(due);
        assert!(Instant::now() >= due);
    }
}
