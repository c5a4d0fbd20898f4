//! Locality buffering (Papadogiannakis et al.): a worker-side stage that
//! gathers a batch of captured packets and delivers it sorted by the smaller of
//! each packet's two ports, so an application runs the same code on the same
//! data many times in a row instead of jumping between services.
//!
//! The contract:
//! - A batch is gathered until it holds at least [`BatchSize`] packets (whole
//!   chunks, so up to M−1 more), its oldest packet has waited
//!   [`LocalityConfig::timeout`], the source says it waits for memory the
//!   batch holds, no chunk has come for 10 ms (the backstop for a source that
//!   cannot say so), or the capture ends.
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
//!   65,536 lists (`PortIndex`).
//! - The key of each packet is computed by the capture thread as it fills the
//!   packet's cell (the engine makes its pools with `sort_keys`), where the
//!   headers are in cache; the stage reads it from the cell.
//!
//! The heart of weir, so written here: a sort would cost O(B log B) and a copy,
//! where this index costs O(B) and no copy.

mod batch;
mod stage;

pub(crate) use batch::{Batch, QUIET};
pub(crate) use stage::run;

use crate::{Setting, SettingError};
use std::time::Duration;

/// Most packets one batch may gather (4,194,304); the index of a batch that
/// size takes about 80 MiB per worker (twice that double-buffered).
pub const MAX_BATCH: u32 = 1 << 22;

/// Packets a locality batch gathers before it is delivered: 1 to [`MAX_BATCH`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchSize(u32);

impl BatchSize {
    /// `n` packets; refused (naming [`Setting::Locality`]) outside 1 to [`MAX_BATCH`].
    pub fn new(n: u32) -> Result<Self, SettingError> {
        if n == 0 || n > MAX_BATCH {
            return Err(SettingError::new(Setting::Locality, format!("a batch of {n} packets: must be from 1 to {MAX_BATCH}")));
        }
        Ok(BatchSize(n))
    }

    pub(crate) fn get(self) -> usize {
        self.0 as usize
    }
}

/// How the locality stage runs; [`new`](Self::new) gives the defaults for a
/// batch size. Given to [`EngineBuilder::locality`](crate::engine::EngineBuilder::locality).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LocalityConfig {
    /// Packets a batch gathers before it is delivered (whole chunks, so up to
    /// M − 1 more).
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
    const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

    /// Batches of `batch` packets, a 50 ms timeout, not double-buffered.
    pub fn new(batch: BatchSize) -> Self {
        LocalityConfig { batch, timeout: Self::DEFAULT_TIMEOUT, double_buffer: false }
    }

    /// How long a gathering batch may wait for its next chunk before it is
    /// handed out anyway: the timeout, or sooner once the source goes quiet.
    /// A caller that polls a reader's descriptor must call `next` at least
    /// this often (what [`Reader::select_timeout`](crate::engine::Reader::select_timeout) returns).
    pub fn quiet_after(&self) -> Duration {
        self.timeout.min(QUIET)
    }

    /// Chunks of `cells` cells a pool needs for this batch: two batches and a
    /// chunk, so the capture side fills the next batch while one is delivered.
    /// A pool that holds only one batch makes capture and delivery take turns
    /// (at B = 32,000 on `weir inspect` that cost 10% of its speed). The engine
    /// raises a pool the caller did not give to this.
    pub(crate) fn pool_chunks(&self, cells: usize) -> usize {
        2 * self.batch.get().div_ceil(cells.max(1)) + 1
    }

    /// The most memory one worker's stage takes with pools of `cells` cells per
    /// chunk: per batch (two when double-buffered) an index of up to B + M − 1
    /// entries, their delivery order, and the index's lists. The packets
    /// themselves stay in the pool's chunks.
    pub(crate) fn memory_bytes(&self, cells: usize) -> u64 {
        let entries = (self.batch.get() + cells) as u64;
        let per_entry = (size_of::<(u32, (u32, u32))>() + size_of::<(u32, u32)>()) as u64;
        let lists = ((LISTS + 1) * size_of::<u32>() + USED_WORDS * size_of::<u64>()) as u64;
        let batches = if self.double_buffer { 2 } else { 1 };
        (entries * per_entry + lists) * batches
    }

    /// Read blocks of `block_bytes` a trace needs so that each of `queues`
    /// workers can hold a whole batch of full-size Ethernet frames while the
    /// next one is read: two batches each. The trace reader's arena is raised to
    /// this (never lowered). It is an anonymous mapping from which the lowest
    /// free block is taken, so blocks never in use at once are never touched
    /// and cost address space only. Larger frames still work: the reader marks
    /// its sides starved at a low-water mark and the batch goes early.
    pub(crate) fn trace_blocks(&self, block_bytes: usize, queues: usize) -> usize {
        const FRAME: usize = 1518;
        (2 * self.batch.get()).saturating_mul(FRAME).saturating_mul(queues.max(1)).div_ceil(block_bytes.max(1)).saturating_add(8)
    }
}

/// Lists: one per port, and one for packets without a key.
const LISTS: usize = 1 << 16;
/// The keyless list comes after every port's, so delivery in list order puts
/// it last and one bitmap covers it.
const OTHER: usize = LISTS;
/// Words of the bitmap of lists in use (the keyless list's bit included).
const USED_WORDS: usize = (LISTS + 1).div_ceil(64);

/// The index of one batch: a table of 65,536 lists (one per key, plus one for
/// the keyless) in which each entry is appended at its list's tail, and a
/// bitmap of the lists in use so delivery visits them in key order and the
/// reset clears only them. An entry is whatever `T` the caller needs to find
/// the packet again (a chunk and a cell).
///
/// The lists are laid out as ranges of one array rather than linked: a push
/// counts its entry into its list, and delivery turns the counts into where
/// each list starts (over the lists in use only), places every entry at its
/// list's next free place in arrival order, and reads the array in order.
/// Walking linked lists made every step wait for the load before it; here the
/// entries the application is handed are known in advance, so the processor
/// fetches their packets' cells ahead. It is a counting sort, stable as the
/// tail-appended lists were, and O(B + lists in use).
///
/// Cost matters here: on an application with nothing to gain (`weir count`)
/// every instruction of a push, a placement and the walk is overhead, so a
/// push is one bit set, one increment and one append of (list, entry).
pub(crate) struct PortIndex<T> {
    /// Per list: its length while pushing; while placing, its next free place.
    count: Box<[u32]>,
    /// (list, entry) in arrival order.
    entries: Vec<(u32, T)>,
    /// Entries in delivery order (reused across batches).
    placed: Vec<T>,
    /// Bit k set when list k is in use.
    used: Box<[u64]>,
}

impl<T: Copy> Default for PortIndex<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> PortIndex<T> {
    pub(crate) fn new() -> Self {
        PortIndex {
            count: vec![0; LISTS + 1].into_boxed_slice(),
            entries: Vec::new(),
            placed: Vec::new(),
            used: vec![0; USED_WORDS].into_boxed_slice(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Room for `n` more entries without reallocating.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
    }

    /// Append an entry at the tail of its key's list.
    #[inline]
    pub(crate) fn push(&mut self, key: Option<u16>, entry: T) {
        let list = key.map_or(OTHER, usize::from);
        debug_assert!(self.entries.len() < u32::MAX as usize, "an index holds fewer than 2^32 entries");
        self.used[list / 64] |= 1u64 << (list % 64);
        self.count[list] += 1;
        self.entries.push((list as u32, entry));
    }

    /// Empty the index into its entries in delivery order (ascending key,
    /// arrival order within a key, then the entries without a key), which stay
    /// readable until the next push.
    pub(crate) fn sort(&mut self) -> &[T] {
        let Some(&(_, first)) = self.entries.first() else {
            self.placed.clear();
            return &self.placed;
        };
        // Where each list in use starts, in delivery order.
        let mut at = 0u32;
        self.for_each_list_in_use(|count, list| {
            let n = std::mem::replace(&mut count[list], at);
            at += n;
        });
        debug_assert_eq!(at as usize, self.entries.len());
        self.placed.clear();
        self.placed.resize(self.entries.len(), first);
        for &(list, e) in &self.entries {
            let next = &mut self.count[list as usize];
            self.placed[*next as usize] = e;
            *next += 1;
        }
        // Reset the counts this batch touched, and nothing else (and the 8 KiB bitmap).
        self.for_each_list_in_use(|count, list| count[list] = 0);
        self.used.iter_mut().for_each(|w| *w = 0);
        self.entries.clear();
        &self.placed
    }

    /// What the last [`sort`](Self::sort) returned.
    pub(crate) fn sorted(&self) -> &[T] {
        &self.placed
    }

    /// Call `f` on the lists in use, in delivery order.
    fn for_each_list_in_use(&mut self, mut f: impl FnMut(&mut [u32], usize)) {
        for (w, &word) in self.used.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                f(&mut self.count, w * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
