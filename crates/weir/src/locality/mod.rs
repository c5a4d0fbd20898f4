//! Locality buffering (Papadogiannakis et al.): a worker-side stage that
//! gathers a batch of captured packets and delivers it sorted by the smaller of
//! each packet's two ports, so an application runs the same code on the same
//! data many times in a row instead of jumping between services.
//!
//! The contract:
//! - A batch is gathered until it holds at least [`BatchSize`] packets (whole
//!   chunks, so up to M−1 more), its oldest packet has waited
//!   [`LocalityConfig::timeout`], no chunk has come for 10 ms (the source may be
//!   waiting for memory the batch holds), or the capture ends.
//! - Packets are never copied: the batch holds its chunks, and the index points
//!   at their cells. Chunks are recycled only after every packet of the batch
//!   has been delivered.
//! - Delivery is in ascending min(src port, dst port) of TCP and UDP packets,
//!   then every other packet (non-IP, other protocols, fragments without ports)
//!   from a list of its own. Within one key, packets keep their arrival order,
//!   so the packets of one flow (both directions share the key) keep their
//!   relative order. Timestamps are never altered: they are no longer
//!   monotonic across flows, which is the price of the stage. An application
//!   that needs strict order leaves it off (the default).
//! - The index is reset at the cost of what the batch touched, not of its
//!   65,536 lists ([`PortIndex`]).
//!
//! The heart of weir, so written here: a sort would cost O(B log B) and a copy,
//! where this index costs O(B) and no copy.

mod stage;

pub use stage::run;

use crate::wire::{ip_proto, FlowTuple};
use crate::LinkType;
use std::time::Duration;

/// Most packets one batch may gather.
pub const MAX_BATCH: u32 = 1 << 22;

/// Packets a locality batch gathers before it is delivered: 1 to [`MAX_BATCH`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchSize(u32);

impl BatchSize {
    pub fn new(n: u32) -> Result<Self, String> {
        if n == 0 || n > MAX_BATCH {
            return Err(format!("locality batch of {n} packets: must be from 1 to {MAX_BATCH}"));
        }
        Ok(BatchSize(n))
    }

    pub fn get(self) -> usize {
        self.0 as usize
    }
}

/// How the locality stage runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LocalityConfig {
    pub batch: BatchSize,
    /// Longest a packet waits for its batch to fill.
    pub timeout: Duration,
    /// While a batch is delivered, gather the next one (the paper's
    /// double-buffered variant): chunks then leave the capture queue sooner.
    pub double_buffer: bool,
}

impl LocalityConfig {
    /// Default timeout: long against a batch's fill time at monitoring rates,
    /// short against what an analyst notices.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

    pub fn new(batch: BatchSize) -> Self {
        LocalityConfig { batch, timeout: Self::DEFAULT_TIMEOUT, double_buffer: false }
    }
}

/// The key a packet is delivered by: min(src port, dst port) of a TCP or UDP
/// packet, `None` for every other packet.
#[inline]
pub fn sort_key(link: LinkType, frame: &[u8]) -> Option<u16> {
    let t = FlowTuple::parse(link, frame)?;
    match t.protocol() {
        ip_proto::TCP | ip_proto::UDP => t.ports().map(|p| p.min_port()),
        _ => None,
    }
}

/// No entry.
const NIL: u32 = u32::MAX;
/// Lists: one per port, and one for packets without a key.
const LISTS: usize = 1 << 16;
const OTHER: usize = LISTS;

/// The index of one batch: per key a list of entries in arrival order, and a
/// bitmap of the keys in use so delivery walks them in order and reset clears
/// only them. An entry is whatever `T` the caller needs to find the packet
/// again (a chunk and a cell).
pub struct PortIndex<T> {
    head: Box<[u32]>,
    tail: Box<[u32]>,
    next: Vec<u32>,
    entries: Vec<T>,
    /// Bit k set when list k is in use.
    used: Box<[u64]>,
    other_used: bool,
}

impl<T: Copy> Default for PortIndex<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> PortIndex<T> {
    pub fn new() -> Self {
        PortIndex {
            head: vec![NIL; LISTS + 1].into_boxed_slice(),
            tail: vec![NIL; LISTS + 1].into_boxed_slice(),
            next: Vec::new(),
            entries: Vec::new(),
            used: vec![0; LISTS / 64].into_boxed_slice(),
            other_used: false,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Append an entry at the tail of its key's list.
    #[inline]
    pub fn push(&mut self, key: Option<u16>, entry: T) {
        let list = key.map_or(OTHER, usize::from);
        let i = self.entries.len() as u32;
        debug_assert!(i != NIL, "an index holds fewer than 2^32 - 1 entries");
        self.entries.push(entry);
        self.next.push(NIL);
        let in_use = match key {
            Some(k) => {
                let (w, bit) = (usize::from(k) / 64, 1u64 << (k % 64));
                let was = self.used[w] & bit != 0;
                self.used[w] |= bit;
                was
            }
            None => std::mem::replace(&mut self.other_used, true),
        };
        if in_use {
            let t = self.tail[list] as usize;
            self.next[t] = i;
        } else {
            self.head[list] = i;
        }
        self.tail[list] = i;
    }

    /// Call `f` on every entry in delivery order (ascending key, arrival order
    /// within a key, then the entries without a key) and empty the index.
    pub fn drain(&mut self, mut f: impl FnMut(T)) {
        for w in 0..self.used.len() {
            let mut bits = std::mem::take(&mut self.used[w]);
            while bits != 0 {
                let list = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                self.walk(list, &mut f);
            }
        }
        if std::mem::take(&mut self.other_used) {
            self.walk(OTHER, &mut f);
        }
        self.entries.clear();
        self.next.clear();
    }

    #[inline]
    fn walk(&mut self, list: usize, f: &mut impl FnMut(T)) {
        let mut i = std::mem::replace(&mut self.head[list], NIL);
        while i != NIL {
            f(self.entries[i as usize]);
            i = self.next[i as usize];
        }
    }
}

#[cfg(test)]
mod tests;
