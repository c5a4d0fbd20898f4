//! What a live capture unit does when it sees a stop that keeps what was
//! captured (`Control::keeps_captured`: Ctrl-C, a `StopHandle`, the time
//! limit, a `Reader` being closed).
//!
//! The packets the kernel had already stored in the unit's ring when the unit
//! saw the stop arrived before it, so the unit goes on taking them into the
//! pool, and returns only once it has. Each backend bounds "already stored"
//! its own way: afpacket by the ring's fill point (the block being filled
//! then is waited for until the kernel retires it), afxdp by the RX ring's
//! producer index, xdp by the records' kernel stamps. What arrives after
//! the stop stays in the kernel, as it would without weir.
//!
//! Taking them needs cells, which come back only as workers (or a closing
//! reader) recycle them. A unit that gets none for its patience gives up,
//! and counts what is left of the bound as **delivery drops** of its queue:
//! nothing the kernel stored is lost uncounted. Under rebalancing, where a
//! packet may be handed to a queue whose unit has already returned, the units
//! count what is left at once instead of draining.

use std::time::{Duration, Instant};

/// How long a draining unit waits for a cell before it gives up: long
/// against a worker's handling of one chunk, short against a user waiting
/// for a stopped capture to end.
pub(crate) const PATIENCE: Duration = Duration::from_secs(1);

/// A drain's progress: when it last took a packet.
pub(crate) struct Drain {
    moved: Instant,
    patience: Duration,
}

impl Drain {
    /// A drain that gives up after `patience` without taking anything.
    pub(crate) fn new(patience: Duration) -> Drain {
        Drain { moved: Instant::now(), patience }
    }

    /// `n` packets (or any count of progress) were taken just now.
    #[inline]
    pub(crate) fn took(&mut self, n: u64) {
        if n > 0 {
            self.moved = Instant::now();
        }
    }

    /// Nothing was taken for the whole patience: give up.
    pub(crate) fn stalled(&self) -> bool {
        self.moved.elapsed() >= self.patience
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_stalls_after_its_patience_and_only_progress_restarts_it() {
        assert!(!Drain::new(Duration::from_secs(60)).stalled());
        let mut d = Drain::new(Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(60));
        assert!(d.stalled());
        d.took(0);
        assert!(d.stalled(), "nothing taken is no progress");
        d.took(3);
        assert!(!d.stalled(), "a take restarts the patience");
    }
}
