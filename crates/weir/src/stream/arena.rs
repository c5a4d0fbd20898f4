//! The reassembly memory of one worker: every byte held out of order and
//! every byte waiting in a partial piece is counted here against the
//! queue's share of the configured memory, and new held bytes are admitted
//! by Scap's policy of prioritized loss.
//!
//! Below the base threshold everything is admitted. Between the base and
//! the overload threshold, the range is cut into one watermark per priority:
//! a stream of priority p is admitted while use is below watermark p, so low
//! priorities lose data first. Above the overload threshold, a stream is
//! admitted only for offsets within its first `overload_keep` bytes. Nothing
//! is admitted that would pass the limit itself.
//!
//! It is an accounting arena, not an allocator: the buffers are ordinary
//! vectors, and the arena bounds what they may hold. In-order bytes never
//! need it (they go to the application at once, or into the piece, which is
//! delivered early rather than grown past the base threshold), so what loses
//! data under pressure is only what would be held out of order.

use super::config::{StreamConfig, PRIORITIES};

#[derive(Debug)]
pub(crate) struct Arena {
    limit: u64,
    base: u64,
    overload: u64,
    keep: u64,
    used: u64,
    peak: u64,
}

impl Arena {
    pub(crate) fn new(limit: u64, cfg: &StreamConfig) -> Arena {
        let at = |pct: u8| limit / 100 * u64::from(pct);
        Arena { limit, base: at(cfg.base_percent), overload: at(cfg.overload_percent), keep: cfg.overload_keep, used: 0, peak: 0 }
    }

    /// Whether `need` more bytes at stream offset `offset` of a stream of
    /// `priority` may be held.
    pub(crate) fn admit(&self, priority: u8, offset: u64, need: u64) -> bool {
        let after = self.used.saturating_add(need);
        if after > self.limit {
            return false;
        }
        if after <= self.base {
            return true;
        }
        if after > self.overload {
            return offset < self.keep;
        }
        let step = (self.overload - self.base) / u64::from(PRIORITIES);
        after <= self.base + step * (u64::from(priority.min(PRIORITIES - 1)) + 1)
    }

    /// Whether use is above the base threshold (partial pieces are then
    /// delivered rather than kept).
    pub(crate) fn pressed(&self) -> bool {
        self.used > self.base
    }

    pub(crate) fn take(&mut self, n: u64) {
        self.used += n;
        self.peak = self.peak.max(self.used);
    }

    pub(crate) fn release(&mut self, n: u64) {
        debug_assert!(n <= self.used, "released more than was taken");
        self.used -= n;
    }

    pub(crate) fn peak(&self) -> u64 {
        self.peak
    }

    pub(crate) fn used(&self) -> u64 {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_priorities_lose_first_and_overload_keeps_only_the_start() {
        let cfg = StreamConfig { base_percent: 50, overload_percent: 90, overload_keep: 100, ..StreamConfig::default() };
        let mut a = Arena::new(1000, &cfg);
        assert!(a.admit(0, 5000, 500));
        a.take(500);
        // 500..900 is split in four: priority p is admitted up to 600 + 100p.
        assert!(a.admit(0, 5000, 100) && !a.admit(0, 5000, 101));
        assert!(a.admit(3, 5000, 400) && !a.admit(2, 5000, 301));
        a.take(395);
        assert!(!a.admit(3, 5000, 10) && a.admit(3, 99, 10), "above overload only the first bytes");
        assert!(!a.admit(3, 0, 106), "never past the limit");
        a.release(895);
        assert_eq!((a.used(), a.peak()), (0, 895));
    }
}
