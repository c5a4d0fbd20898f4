//! Where packets of a moving bucket wait: copies in arrival order under one
//! byte limit, shared by every move of one owner.
//!
//! Contract: [`ParkingLot::park`] copies a packet and returns its place, or
//! `None` when the limit would be passed (the caller counts that packet as a
//! drop). The owner keeps each move's places in arrival order and reads them
//! back with [`ParkingLot::bytes`] when the move is handed over. The bytes are
//! freed all at once, by [`ParkingLot::clear`], when the owner has nothing
//! parked: moves last about one backlog's drain time, so the area is small and
//! short-lived, and freeing piecemeal would cost more than it saves.

/// Most bytes one owner parks at once, over all its moves.
const PARK_LIMIT: usize = 64 << 20;

/// One parked packet: where its bytes are, and what the queue needs to take it.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Parked {
    at: usize,
    len: usize,
    pub(crate) wire_len: u32,
    pub(crate) ts_ns: u64,
}

/// The bytes of every packet one owner has parked.
#[derive(Debug)]
pub(crate) struct ParkingLot {
    bytes: Vec<u8>,
    limit: usize,
    peak: usize,
}

impl Default for ParkingLot {
    fn default() -> Self {
        ParkingLot::new(PARK_LIMIT)
    }
}

impl ParkingLot {
    pub(crate) fn new(limit: usize) -> Self {
        ParkingLot { bytes: Vec::new(), limit, peak: 0 }
    }

    /// Copy a packet aside; `None` when the lot is full.
    pub(crate) fn park(&mut self, data: &[u8], wire_len: u32, ts_ns: u64) -> Option<Parked> {
        if self.bytes.len() + data.len() > self.limit {
            return None;
        }
        let at = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.peak = self.peak.max(self.bytes.len());
        Some(Parked { at, len: data.len(), wire_len, ts_ns })
    }

    /// The bytes of a packet parked here since the last [`clear`](Self::clear).
    pub(crate) fn bytes(&self, p: &Parked) -> &[u8] {
        debug_assert!(p.at + p.len <= self.bytes.len(), "a place from before the lot was cleared");
        self.bytes.get(p.at..p.at + p.len).unwrap_or_default()
    }

    /// Forget every packet: call only when no move holds a place any more.
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
    }

    /// Most bytes held at once.
    pub(crate) fn peak(&self) -> usize {
        self.peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_come_back_as_parked_until_the_limit() {
        let mut lot = ParkingLot::new(10);
        let a = lot.park(b"abcd", 60, 1).unwrap();
        let b = lot.park(b"efghij", 70, 2).unwrap();
        assert!(lot.park(b"k", 64, 3).is_none(), "10 bytes are the limit");
        assert_eq!((lot.bytes(&a), a.wire_len, a.ts_ns), (&b"abcd"[..], 60, 1));
        assert_eq!((lot.bytes(&b), b.wire_len, b.ts_ns), (&b"efghij"[..], 70, 2));
        lot.clear();
        assert!(lot.park(b"0123456789", 64, 4).is_some(), "cleared, the whole limit is free again");
        assert_eq!(lot.peak(), 10);
    }
}
