//! A flow table of bounded size, aged in packet time.
//!
//! Contract: a [`FlowTable`] holds at most the `max_flows` of its [`TableLimits`], each
//! a key, the times of its first and last packet, and a value of the caller's.
//! Time is packet time (the timestamps packets carry), never the clock, so a run
//! over a trace ends flows at the same packets every time. A flow leaves the
//! table for one of two reasons, and every flow that leaves is handed to the
//! caller with it ([`End`]), never dropped:
//!
//! - [`End::Idle`]: it had no packet for longer than the idle timeout. The
//!   table's clock is the latest packet time it has seen; on every packet the
//!   flows seen least recently are checked first and those idle past the timeout
//!   leave. A flow whose next packet comes more than the timeout after its last
//!   one (or before its first: delivery may reorder flows) ends there too, and
//!   its key starts a new flow.
//! - [`End::Evicted`]: the table is full and a packet of a new flow arrives: the
//!   flow seen least recently leaves to make room.
//!
//! The caller may also take flows out itself ([`FlowTable::remove`],
//! [`FlowTable::take_where`]) and put them into another table
//! ([`FlowTable::put`]) with their times, as rebalancing moves a bucket's
//! flows between workers.
//!
//! So within one flow, its packet times sorted are never more than the timeout
//! apart. A reader that merges the flows of one key whose times lie within the
//! timeout of each other gets the same flows whatever the table's size and
//! whatever order packets of different flows came in (`weir inspect` does).
//!
//! Memory is bounded when the table is made: slots for `max_flows` flows are
//! reserved (touched as they fill), and the hash index, kept at most half full,
//! starts small and doubles as flows arrive, up to its size for `max_flows`.
//! [`FlowTable::memory_for`] says how much that is at most. An index sized for
//! the maximum from the start would spread a few thousand flows over megabytes
//! (a cache and TLB miss per packet), and its untouched zero pages would be
//! read first and written later: a copy-on-write fault with a TLB shootdown to
//! every other core for each page. The least-recently-seen order is a
//! list threaded through the slots, so finding the flow to end is O(1). The
//! index is a flat array of (hash bits, slot number) pairs probed linearly: a
//! lookup in a table much larger than the caches costs one miss in the index
//! and one in the slot it names, where a general-purpose map with separate
//! control bytes and slot numbers costs three.

use crate::sys::mem::Words;
use crate::{Setting, SettingError};
use foldhash::fast::RandomState;
use std::hash::{BuildHasher, Hash};

/// Slot number meaning "none" in the recency list.
const NIL: u32 = u32::MAX;

/// How big a table may grow and how long a flow may be idle.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TableLimits {
    max_flows: usize,
    idle_timeout_ns: u64,
}

impl TableLimits {
    /// At most `max_flows` flows at once, each ended after `idle_timeout_ns`
    /// nanoseconds of packet time without a packet.
    ///
    /// # Errors
    /// A [`SettingError`] of [`Setting::FlowTable`] unless `max_flows` is from
    /// 1 to 2^32 − 2 (slot numbers are 32 bits, one of them meaning none).
    pub fn new(max_flows: usize, idle_timeout_ns: u64) -> Result<TableLimits, SettingError> {
        if max_flows == 0 || max_flows >= NIL as usize {
            return Err(SettingError::new(Setting::FlowTable, format!("holds 1 to {} flows, not {max_flows}", NIL - 1)));
        }
        Ok(TableLimits { max_flows, idle_timeout_ns })
    }
}

/// Why a flow left the table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// No packet for longer than the idle timeout.
    Idle,
    /// The table was full and a new flow needed its slot.
    Evicted,
}

/// One flow: its key, first and last packet time, and the caller's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow<K, V> {
    /// The key its packets were given to [`FlowTable::entry`] with.
    pub key: K,
    /// Timestamp of its earliest packet, in ns of packet time.
    pub first_ns: u64,
    /// Timestamp of its latest packet, in ns of packet time.
    pub last_ns: u64,
    /// What the caller keeps per flow: made by `entry`'s `init` and updated
    /// through the reference `entry` returns.
    pub value: V,
}

/// What happened in a table so far.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Flows started (a key seen again after its flow ended starts another).
    pub created: u64,
    /// Flows that ended idle ([`End::Idle`]).
    pub timeouts: u64,
    /// Flows that left a full table ([`End::Evicted`]).
    pub evictions: u64,
    /// Most flows held at once.
    pub peak: usize,
}

struct Slot<K, V> {
    flow: Flow<K, V>,
    /// Neighbours in the recency list: seen before and after this flow.
    older: u32,
    newer: u32,
}

/// Slot numbers by the hash of their flow's key: open addressing with linear
/// probing over a power-of-two array kept at most half full. A bucket holds the
/// hash's low 32 bits (whose low bits are its home bucket) above the slot number
/// plus one; 0 is an empty bucket, so a new array is all zeros.
/// Removal shifts the entries after it back, so there are no tombstones and a
/// probe ends at the first empty bucket.
struct Index {
    buckets: Words,
    mask: usize,
    /// The most buckets it may grow to: twice the table's flows, rounded up.
    max_buckets: usize,
}

/// Buckets of a new index (16 KiB): a table that stays small never grows.
const FIRST_BUCKETS: usize = 2048;

impl Index {
    fn new(max_flows: usize) -> Index {
        let max_buckets = Index::buckets_for(max_flows);
        let n = FIRST_BUCKETS.min(max_buckets);
        Index { buckets: Index::zeroed(n), mask: n - 1, max_buckets }
    }

    fn buckets_for(max_flows: usize) -> usize {
        max_flows.saturating_mul(2).next_power_of_two().max(2)
    }

    /// `n` empty buckets, written here rather than left as fresh zero pages:
    /// lookups read buckets before inserts write them, and a zero page read
    /// then written costs a copy-on-write fault and a TLB shootdown. In a
    /// mapping of their own ([`Words`]), so the arrays the index outgrows go
    /// back to the kernel. A refused mapping ends the process as a failed
    /// allocation does (the engine's memory check passed the table's size).
    fn zeroed(n: usize) -> Words {
        Words::zeroed(n).unwrap_or_else(|_| {
            std::alloc::handle_alloc_error(std::alloc::Layout::array::<u64>(n).unwrap_or(std::alloc::Layout::new::<u64>()))
        })
    }

    /// Doubles the index when `flows` would make it more than half full.
    fn reserve(&mut self, flows: usize) {
        let n = self.buckets.len();
        if flows <= n / 2 || n >= self.max_buckets {
            return;
        }
        let old = std::mem::replace(&mut self.buckets, Index::zeroed(n * 2));
        self.mask = n * 2 - 1;
        for e in old.iter().copied().filter(|&e| e != 0) {
            let mut b = self.home((e >> 32) as u32);
            while self.buckets[b] != 0 {
                b = (b + 1) & self.mask;
            }
            self.buckets[b] = e;
        }
    }

    fn home(&self, bits: u32) -> usize {
        bits as usize & self.mask
    }

    /// The bucket and slot of the entry with this hash for which `is` holds.
    fn find(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<(usize, u32)> {
        let bits = hash as u32;
        let mut b = self.home(bits);
        loop {
            let e = self.buckets[b];
            if e == 0 {
                return None;
            }
            let slot = (e as u32).wrapping_sub(1);
            if (e >> 32) as u32 == bits && is(slot) {
                return Some((b, slot));
            }
            b = (b + 1) & self.mask;
        }
    }

    fn insert(&mut self, hash: u64, slot: u32) {
        let bits = hash as u32;
        let mut b = self.home(bits);
        while self.buckets[b] != 0 {
            b = (b + 1) & self.mask;
        }
        self.set(b, bits, slot);
    }

    fn set(&mut self, b: usize, bits: u32, slot: u32) {
        self.buckets[b] = u64::from(bits) << 32 | u64::from(slot + 1);
    }

    fn set_slot(&mut self, b: usize, slot: u32) {
        let bits = (self.buckets[b] >> 32) as u32;
        self.set(b, bits, slot);
    }

    /// Empty bucket `hole`, moving back every entry after it that could not be
    /// found across the hole otherwise.
    fn remove_at(&mut self, mut hole: usize) {
        let mut b = hole;
        loop {
            b = (b + 1) & self.mask;
            let e = self.buckets[b];
            if e == 0 {
                break;
            }
            // It may fill the hole unless its home lies after the hole (cyclically, up to b).
            let from_home = b.wrapping_sub(self.home((e >> 32) as u32)) & self.mask;
            let from_hole = b.wrapping_sub(hole) & self.mask;
            if from_home >= from_hole {
                self.buckets[hole] = e;
                hole = b;
            }
        }
        self.buckets[hole] = 0;
    }

    fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets)
    }
}

/// A flow table of bounded size, aged in packet time (see the module's
/// contract): flows keyed by `K` (e.g. [`FlowTuple::canonical`](crate::wire::FlowTuple::canonical),
/// both directions as one flow), each with a `V` of the caller's.
pub struct FlowTable<K, V> {
    index: Index,
    hasher: RandomState,
    slots: Vec<Slot<K, V>>,
    /// Ends of the recency list: the flow seen least recently, and most recently.
    oldest: u32,
    newest: u32,
    limits: TableLimits,
    /// The latest packet time seen.
    now_ns: u64,
    stats: TableStats,
}

impl<K: Hash + Eq, V> FlowTable<K, V> {
    /// The most memory a table of at most `max_flows` flows takes, before it is
    /// made: what [`memory_bytes`](Self::memory_bytes) says of it once its index
    /// has grown for them all.
    pub fn memory_for(max_flows: usize) -> u64 {
        let index = max_flows.saturating_mul(2).checked_next_power_of_two().unwrap_or(usize::MAX).max(2);
        (max_flows as u64)
            .saturating_mul(std::mem::size_of::<Slot<K, V>>() as u64)
            .saturating_add((index as u64).saturating_mul(std::mem::size_of::<u64>() as u64))
    }

    /// An empty table within `limits`. Its slots are reserved here; its index
    /// starts small and grows with the flows held, so the table never holds
    /// more than [`memory_for`](Self::memory_for) bytes (its values may).
    pub fn new(limits: TableLimits) -> FlowTable<K, V> {
        FlowTable {
            index: Index::new(limits.max_flows),
            hasher: RandomState::default(),
            slots: Vec::with_capacity(limits.max_flows),
            oldest: NIL,
            newest: NIL,
            limits,
            now_ns: 0,
            stats: TableStats::default(),
        }
    }

    /// The value of the flow of `key` for a packet at `ts_ns`, made by `init` when
    /// the flow is new. First, flows idle past the timeout leave, the flow of `key`
    /// too if this packet is more than the timeout away from it, and the flow seen
    /// least recently if the table is full and needs room: each goes to `gone`.
    pub fn entry(&mut self, key: K, ts_ns: u64, init: impl FnOnce() -> V, gone: impl FnMut(Flow<K, V>, End)) -> &mut V {
        let hash = self.hasher.hash_one(&key);
        self.entry_hashed(hash, key, ts_ns, init, gone)
    }

    /// As [`entry`](Self::entry), with the key's [`hash`](Self::hash)
    /// already known.
    pub(crate) fn entry_hashed(
        &mut self,
        hash: u64,
        key: K,
        ts_ns: u64,
        init: impl FnOnce() -> V,
        mut gone: impl FnMut(Flow<K, V>, End),
    ) -> &mut V {
        debug_assert_eq!(hash, self.hasher.hash_one(&key));
        self.now_ns = self.now_ns.max(ts_ns);
        self.expire(&mut gone);
        let slots = &self.slots;
        let found = self.index.find(hash, |i| slots[i as usize].flow.key == key).map(|(_, i)| i);
        let i = match found {
            Some(i) if self.within_timeout(i, ts_ns) => {
                self.make_newest(i);
                i
            }
            Some(i) => {
                self.leave(i, End::Idle, &mut gone);
                self.insert(hash, key, ts_ns, init, &mut gone)
            }
            None => self.insert(hash, key, ts_ns, init, &mut gone),
        };
        let flow = &mut self.slots[i as usize].flow;
        flow.first_ns = flow.first_ns.min(ts_ns);
        flow.last_ns = flow.last_ns.max(ts_ns);
        &mut flow.value
    }

    /// Flows held now.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when no flow is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// What happened in the table since it was made.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    /// Bytes allocated now for the slots and the index.
    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot<K, V>>() + self.index.bytes()
    }

    /// As [`entry`](Self::entry) for a packet that may not start a flow: the
    /// value of `key`'s flow, seen at `ts_ns`, or `None` (and nothing
    /// inserted) when the table has none.
    pub fn touch(&mut self, key: &K, ts_ns: u64, gone: impl FnMut(Flow<K, V>, End)) -> Option<&mut V> {
        self.touch_hashed(self.hasher.hash_one(key), key, ts_ns, gone)
    }

    /// As [`touch`](Self::touch), with the key's [`hash`](Self::hash)
    /// already known.
    pub(crate) fn touch_hashed(&mut self, hash: u64, key: &K, ts_ns: u64, mut gone: impl FnMut(Flow<K, V>, End)) -> Option<&mut V> {
        debug_assert_eq!(hash, self.hasher.hash_one(key));
        self.now_ns = self.now_ns.max(ts_ns);
        self.expire(&mut gone);
        let slots = &self.slots;
        let (_, i) = self.index.find(hash, |i| slots[i as usize].flow.key == *key)?;
        if !self.within_timeout(i, ts_ns) {
            self.leave(i, End::Idle, &mut gone);
            return None;
        }
        self.make_newest(i);
        let flow = &mut self.slots[i as usize].flow;
        flow.first_ns = flow.first_ns.min(ts_ns);
        flow.last_ns = flow.last_ns.max(ts_ns);
        Some(&mut flow.value)
    }

    /// Marks `key`'s flow seen at `ts_ns` without expiring anything, if
    /// `which` picks its value: for a flow whose packets someone else saw
    /// meanwhile (the kernel cutoff's), so the packet that shows it is alive
    /// does not find it idle. False when the table has no such flow or
    /// `which` passed it over.
    pub(crate) fn refresh_hashed(&mut self, hash: u64, key: &K, ts_ns: u64, which: impl FnOnce(&V) -> bool) -> bool {
        debug_assert_eq!(hash, self.hasher.hash_one(key));
        let slots = &self.slots;
        let Some((_, i)) = self.index.find(hash, |i| slots[i as usize].flow.key == *key) else { return false };
        if !which(&self.slots[i as usize].flow.value) {
            return false;
        }
        self.make_newest(i);
        let flow = &mut self.slots[i as usize].flow;
        flow.last_ns = flow.last_ns.max(ts_ns);
        true
    }

    /// The keys of the `n` flows seen least recently, oldest first, for a
    /// caller that picks one of them to let go of (the kernel cutoff's full
    /// map).
    pub(crate) fn oldest_keys(&self, n: usize) -> Vec<K>
    where
        K: Clone,
    {
        let mut keys = Vec::with_capacity(n);
        let mut i = self.oldest;
        while i != NIL && keys.len() < n {
            keys.push(self.slots[i as usize].flow.key.clone());
            i = self.slots[i as usize].newer;
        }
        keys
    }

    /// The hash the table looks `key` up by: computed once per packet when a
    /// run of packets is warmed (prefetched) ahead of its lookups.
    pub fn hash(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The memory a lookup of `hash` reads, for prefetch hints that let the
    /// lookups of several packets overlap their cache misses: its index
    /// bucket (nothing is read to find it), or with `slot`, the flow that
    /// bucket names first (the bucket is read: hint it first) and how many
    /// bytes that flow's slot spans. The flow may be another key's with the
    /// same hash bits: it is a hint, not a lookup.
    pub(crate) fn lookup_memory(&self, hash: u64, slot: bool) -> Option<(*const u8, usize)> {
        let bucket = &self.index.buckets[self.index.home(hash as u32)];
        if !slot {
            return Some(((bucket as *const u64).cast(), std::mem::size_of::<u64>()));
        }
        let s = self.home_slot(hash)?;
        Some(((s as *const Slot<K, V>).cast(), std::mem::size_of::<Slot<K, V>>()))
    }

    /// The slot the home bucket of `hash` names, if the bucket's hash bits
    /// are those of `hash`: no key compared, no further bucket probed (a
    /// hint, not a lookup).
    fn home_slot(&self, hash: u64) -> Option<&Slot<K, V>> {
        let e = self.index.buckets[self.index.home(hash as u32)];
        if e == 0 || (e >> 32) as u32 != hash as u32 {
            return None;
        }
        self.slots.get((e as u32).wrapping_sub(1) as usize)
    }

    /// For prefetch hints: the value of the flow the index bucket of `hash`
    /// names first, if its hash bits are those of `hash`, and where the links
    /// of that flow's two neighbours in the recency order lie (the next packet
    /// of the flow rewrites them when it moves the flow to the front). No key
    /// is compared and no further bucket probed: at most half full, the index
    /// names a flow in its home bucket nearly always, and a flow of another
    /// key with the same 32 hash bits only makes a hint useless. Cheaper than
    /// a lookup by a hundred instructions a packet, and it reads only memory
    /// the lookup that follows reads too.
    pub(crate) fn hint_hashed(&self, hash: u64) -> Option<(&V, [Option<*const u8>; 2])> {
        let s = self.home_slot(hash)?;
        let links = [s.older, s.newer].map(|n| self.slots.get(n as usize).map(|o| (&o.older as *const u32).cast::<u8>()));
        Some((&s.flow.value, links))
    }

    /// The value of `key`'s flow, without touching its place in the recency
    /// order or the clock.
    pub fn get(&self, key: &K) -> Option<&V> {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        self.index.find(hash, |i| slots[i as usize].flow.key == *key).map(|(_, i)| &self.slots[i as usize].flow.value)
    }

    /// As [`get`](Self::get), for changing the value.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        let (_, i) = self.index.find(hash, |i| slots[i as usize].flow.key == *key)?;
        Some(&mut self.slots[i as usize].flow.value)
    }

    /// Takes the flow of `key` out of the table (its owner ended it), or
    /// `None` if the table does not hold it. No [`End`] is given: the caller
    /// knows why.
    pub fn remove(&mut self, key: &K) -> Option<Flow<K, V>> {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        let (_, i) = self.index.find(hash, |i| slots[i as usize].flow.key == *key)?;
        Some(self.take(i))
    }

    /// Moves the table's clock to packet time `now_ns` (if later) and ends the
    /// flows idle past the timeout, as a packet at that time would.
    pub fn advance(&mut self, now_ns: u64, mut gone: impl FnMut(Flow<K, V>, End)) {
        self.now_ns = self.now_ns.max(now_ns);
        self.expire(&mut gone);
    }

    /// Takes every flow out, least recently seen first, handing each to
    /// `gone` (the caller knows why: the input ended).
    ///
    /// The index is emptied at once, not entry by entry as `take` does:
    /// that hashes two keys and finds two entries a flow (each a cache miss
    /// in a large table) to keep whole an index about to be empty. At the
    /// end of the `make demo` trace, with 150,000 flows held, `take` was 5%
    /// of `weir flows`' samples.
    pub fn drain(&mut self, mut gone: impl FnMut(Flow<K, V>)) {
        self.index = Index::new(self.limits.max_flows);
        while self.oldest != NIL {
            let i = self.oldest;
            self.unlink(i);
            self.fill_gap(i);
            gone(self.slots.swap_remove(i as usize).flow);
        }
    }

    /// Takes out every flow `pick` chooses, handing each to `out` (the
    /// caller knows why: it moves them to another table). Costs a look at
    /// every flow held.
    pub fn take_where(&mut self, mut pick: impl FnMut(&Flow<K, V>) -> bool, mut out: impl FnMut(Flow<K, V>)) {
        // Downwards: `take` moves the last slot, already looked at, into the gap.
        for i in (0..self.slots.len()).rev() {
            if pick(&self.slots[i].flow) {
                out(self.take(i as u32));
            }
        }
    }

    /// Puts in a flow taken out of another table ([`take_where`](Self::take_where)),
    /// with its times, as the one seen most recently; the flow seen least
    /// recently leaves to `gone` if the table is full. A flow whose key the
    /// table holds already is handed back.
    pub fn put(&mut self, flow: Flow<K, V>, mut gone: impl FnMut(Flow<K, V>, End)) -> Result<(), Flow<K, V>> {
        let hash = self.hasher.hash_one(&flow.key);
        let slots = &self.slots;
        if self.index.find(hash, |i| slots[i as usize].flow.key == flow.key).is_some() {
            return Err(flow);
        }
        if self.slots.len() == self.limits.max_flows {
            self.leave(self.oldest, End::Evicted, &mut gone);
        }
        self.now_ns = self.now_ns.max(flow.last_ns);
        let i = self.slots.len() as u32;
        self.slots.push(Slot { flow, older: NIL, newer: NIL });
        self.link_newest(i);
        self.index.insert(hash, i);
        self.stats.peak = self.stats.peak.max(self.slots.len());
        Ok(())
    }

    /// The values of the flows held, in no particular order.
    #[cfg(test)]
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().map(|s| &s.flow.value)
    }

    /// The flows still held, in no particular order: the end of a run.
    pub fn into_flows(self) -> impl Iterator<Item = Flow<K, V>> {
        self.slots.into_iter().map(|s| s.flow)
    }

    fn within_timeout(&self, i: u32, ts_ns: u64) -> bool {
        let f = &self.slots[i as usize].flow;
        let t = self.limits.idle_timeout_ns;
        ts_ns <= f.last_ns.saturating_add(t) && ts_ns.saturating_add(t) >= f.first_ns
    }

    /// End the flows seen least recently while they are idle past the timeout.
    fn expire(&mut self, gone: &mut impl FnMut(Flow<K, V>, End)) {
        while self.oldest != NIL {
            let f = &self.slots[self.oldest as usize].flow;
            if f.last_ns.saturating_add(self.limits.idle_timeout_ns) >= self.now_ns {
                break;
            }
            self.leave(self.oldest, End::Idle, gone);
        }
    }

    fn insert(&mut self, hash: u64, key: K, ts_ns: u64, init: impl FnOnce() -> V, gone: &mut impl FnMut(Flow<K, V>, End)) -> u32 {
        if self.slots.len() == self.limits.max_flows {
            self.leave(self.oldest, End::Evicted, gone);
        }
        let i = self.slots.len() as u32;
        self.index.reserve(self.slots.len() + 1);
        self.slots.push(Slot { flow: Flow { key, first_ns: ts_ns, last_ns: ts_ns, value: init() }, older: NIL, newer: NIL });
        self.link_newest(i);
        self.index.insert(hash, i);
        self.stats.created += 1;
        self.stats.peak = self.stats.peak.max(self.slots.len());
        i
    }

    /// Take slot `i`'s flow out of the table and hand it to `gone`. The last slot
    /// moves into `i`, so its index entry and neighbours are pointed there.
    fn leave(&mut self, i: u32, why: End, gone: &mut impl FnMut(Flow<K, V>, End)) {
        let flow = self.take(i);
        match why {
            End::Idle => self.stats.timeouts += 1,
            End::Evicted => self.stats.evictions += 1,
        }
        gone(flow, why);
    }

    /// Takes slot `i` out of the recency list, the index and the slots.
    fn take(&mut self, i: u32) -> Flow<K, V> {
        self.unlink(i);
        let hash = self.hasher.hash_one(&self.slots[i as usize].flow.key);
        let (b, _) = self.index.find(hash, |j| j == i).expect("every slot is indexed");
        self.index.remove_at(b);
        let last = (self.slots.len() - 1) as u32;
        if i != last {
            let hash = self.hasher.hash_one(&self.slots[last as usize].flow.key);
            let (b, _) = self.index.find(hash, |j| j == last).expect("every slot is indexed");
            self.index.set_slot(b, i);
        }
        self.fill_gap(i);
        self.slots.swap_remove(i as usize).flow
    }

    /// Points the recency neighbours of the last slot at slot `i`, which
    /// the last slot is about to move into (`swap_remove`); `i` is already
    /// unlinked.
    fn fill_gap(&mut self, i: u32) {
        let last = (self.slots.len() - 1) as u32;
        if i == last {
            return;
        }
        let Slot { older, newer, .. } = self.slots[last as usize];
        self.point_neighbours(older, newer, i, i);
    }

    fn make_newest(&mut self, i: u32) {
        if self.newest != i {
            self.unlink(i);
            self.link_newest(i);
        }
    }

    fn unlink(&mut self, i: u32) {
        let Slot { older, newer, .. } = self.slots[i as usize];
        self.point_neighbours(older, newer, newer, older);
    }

    /// Points the slot `older` (or the list's newest end, when it is NIL)
    /// forward at `after`, and the slot `newer` (or the oldest end) back
    /// at `before`.
    fn point_neighbours(&mut self, older: u32, newer: u32, after: u32, before: u32) {
        match older {
            NIL => self.oldest = after,
            o => self.slots[o as usize].newer = after,
        }
        match newer {
            NIL => self.newest = before,
            n => self.slots[n as usize].older = before,
        }
    }

    fn link_newest(&mut self, i: u32) {
        let s = &mut self.slots[i as usize];
        s.older = self.newest;
        s.newer = NIL;
        match self.newest {
            NIL => self.oldest = i,
            n => self.slots[n as usize].newer = i,
        }
        self.newest = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1_000_000_000;

    type Left = Vec<(Flow<u32, u64>, End)>;

    /// The memory check before a table is made sees what the table holds
    /// once full, and the index grows to that as flows come, no further.
    #[test]
    fn memory_for_is_what_a_full_table_takes() {
        for n in [1, 2, 3, 1000, FIRST_BUCKETS / 2, FIRST_BUCKETS / 2 + 1, 100_000] {
            let mut t: FlowTable<u32, u64> = FlowTable::new(TableLimits::new(n, S).unwrap());
            let empty = t.memory_bytes();
            for k in 0..2 * n as u32 {
                t.entry(k, u64::from(k), || 0, |_, _| {});
                assert!(t.memory_bytes() as u64 <= FlowTable::<u32, u64>::memory_for(n), "{n} flows");
                assert!(t.index.buckets.len() >= 2 * t.len(), "an index more than half full");
            }
            assert_eq!(FlowTable::<u32, u64>::memory_for(n), t.memory_bytes() as u64, "{n} flows");
            assert_eq!(empty < t.memory_bytes(), n > FIRST_BUCKETS / 2, "the index grows only past its first size");
        }
    }

    /// Feed (key, ts) packets; count each in its flow's value; return the flows that
    /// left (with why) and the table.
    fn feed(limits: TableLimits, packets: &[(u32, u64)]) -> (Left, FlowTable<u32, u64>) {
        let mut t = FlowTable::new(limits);
        let mut gone = Vec::new();
        for &(k, ts) in packets {
            *t.entry(k, ts, || 0, |f, why| gone.push((f, why))) += 1;
            assert!(t.len() <= limits.max_flows);
        }
        (gone, t)
    }

    #[test]
    fn a_full_table_evicts_the_flow_seen_least_recently() {
        let limits = TableLimits::new(2, 3600 * S).unwrap();
        let (gone, t) = feed(limits, &[(1, S), (2, 2 * S), (1, 3 * S), (3, 4 * S)]);
        assert_eq!(gone, [(Flow { key: 2, first_ns: 2 * S, last_ns: 2 * S, value: 1 }, End::Evicted)]);
        let mut held: Vec<_> = t.into_flows().map(|f| (f.key, f.value)).collect();
        held.sort();
        assert_eq!(held, [(1, 2), (3, 1)]);
    }

    #[test]
    fn flows_taken_out_go_into_another_table_whole() {
        let limits = TableLimits::new(3, 3600 * S).unwrap();
        let (_, mut from) = feed(limits, &[(1, S), (2, 2 * S), (3, 3 * S), (2, 4 * S), (4, 5 * S)]);
        let mut moving = Vec::new();
        from.take_where(|f| f.key % 2 == 0, |f| moving.push(f));
        moving.sort_by_key(|f| f.key);
        assert_eq!(
            moving,
            [Flow { key: 2, first_ns: 2 * S, last_ns: 4 * S, value: 2 }, Flow { key: 4, first_ns: 5 * S, last_ns: 5 * S, value: 1 }]
        );
        assert_eq!(from.into_flows().map(|f| f.key).collect::<Vec<_>>(), [3], "flow 1 was evicted for 4, 2 and 4 left");
        // The other table holds two flows: 9 is older than what comes, so it
        // is evicted for the second; a key it holds already is handed back.
        let (_, mut to) = feed(TableLimits::new(2, 3600 * S).unwrap(), &[(9, S), (2, 6 * S)]);
        let mut gone = Vec::new();
        let [two, four] = <[Flow<u32, u64>; 2]>::try_from(moving).unwrap();
        assert_eq!(to.put(two.clone(), |f, why| gone.push((f, why))), Err(two));
        assert_eq!(to.put(four.clone(), |f, why| gone.push((f, why))), Ok(()));
        assert_eq!(gone, [(Flow { key: 9, first_ns: S, last_ns: S, value: 1 }, End::Evicted)]);
        *to.entry(4, 7 * S, || 0, |_, _| panic!("nothing leaves")) += 1;
        let mut held: Vec<_> = to.into_flows().map(|f| (f.key, f.first_ns, f.value)).collect();
        held.sort();
        assert_eq!(held, [(2, 6 * S, 1), (4, 5 * S, 2)], "4 kept its first time and count");
    }

    #[test]
    fn idle_flows_leave_in_packet_time() {
        let limits = TableLimits::new(100, 10 * S).unwrap();
        // Flow 1 is idle from 1 s; at 12 s (more than 10 s later) it leaves.
        let (gone, t) = feed(limits, &[(1, S), (2, 5 * S), (2, 12 * S)]);
        assert_eq!(gone, [(Flow { key: 1, first_ns: S, last_ns: S, value: 1 }, End::Idle)]);
        assert_eq!(t.stats(), TableStats { created: 2, timeouts: 1, evictions: 0, peak: 2 });
        // Exactly the timeout later is not yet idle.
        let (gone, _) = feed(limits, &[(1, S), (2, 11 * S)]);
        assert!(gone.is_empty());
    }

    #[test]
    fn a_key_seen_after_its_timeout_starts_a_new_flow() {
        let limits = TableLimits::new(100, 10 * S).unwrap();
        let (gone, t) = feed(limits, &[(7, S), (7, 2 * S), (7, 30 * S), (7, 31 * S)]);
        assert_eq!(gone, [(Flow { key: 7, first_ns: S, last_ns: 2 * S, value: 2 }, End::Idle)]);
        let held: Vec<_> = t.into_flows().collect();
        assert_eq!(held, [Flow { key: 7, first_ns: 30 * S, last_ns: 31 * S, value: 2 }]);
        // A packet from long before the flow's first one (reordered delivery) too.
        let (gone, _) = feed(limits, &[(7, 50 * S), (7, 20 * S)]);
        assert_eq!(gone.len(), 1);
    }

    #[test]
    fn slots_are_reserved_up_front() {
        let mut t: FlowTable<u64, [u64; 4]> = FlowTable::new(TableLimits::new(10_000, S).unwrap());
        let slots = t.slots.capacity();
        assert!(slots >= 10_000, "{slots}");
        for k in 0..20_000u64 {
            t.entry(k, k, || [0; 4], |_, _| {});
        }
        assert_eq!(t.slots.capacity(), slots);
        assert_eq!(t.len(), 10_000);
        assert!(TableLimits::new(0, S).is_err());
    }

    proptest! {
        /// Every packet lands in exactly one flow; a flow's packet times, sorted, are
        /// never more than the timeout apart; the table never exceeds its size; and
        /// merging the flows of a key that lie within the timeout of each other gives
        /// the key's packet times split where they are more than the timeout apart,
        /// whatever the size and the order of delivery.
        #[test]
        fn flows_merge_back_to_the_same_clusters_whatever_the_size(
            max in 1usize..12,
            timeout in 0u64..40,
            packets in proptest::collection::vec((0u32..20, 0u64..200), 0..300),
        ) {
            let mut t: FlowTable<u32, Vec<u64>> = FlowTable::new(TableLimits::new(max, timeout).unwrap());
            let mut flows = Vec::new();
            for &(k, ts) in &packets {
                t.entry(k, ts, Vec::new, |f, _| flows.push(f)).push(ts);
                prop_assert!(t.len() <= max);
            }
            let stats = t.stats();
            prop_assert!(stats.peak <= max);
            flows.extend(t.into_flows());
            prop_assert_eq!(flows.len() as u64, stats.created);
            prop_assert_eq!(flows.iter().map(|f| f.value.len()).sum::<usize>(), packets.len());
            for f in &flows {
                let mut ts = f.value.clone();
                ts.sort_unstable();
                prop_assert_eq!((ts[0], ts[ts.len() - 1]), (f.first_ns, f.last_ns));
                prop_assert!(ts.windows(2).all(|w| w[1] - w[0] <= timeout), "{:?}", ts);
            }
            for k in 0..20u32 {
                let mut mine: Vec<&Flow<u32, Vec<u64>>> = flows.iter().filter(|f| f.key == k).collect();
                mine.sort_by_key(|f| f.first_ns);
                let mut merged: Vec<(u64, Vec<u64>)> = Vec::new();
                for f in mine {
                    match merged.last_mut() {
                        Some((last, ts)) if f.first_ns <= last.saturating_add(timeout) => {
                            *last = (*last).max(f.last_ns);
                            ts.extend(&f.value);
                        }
                        _ => merged.push((f.last_ns, f.value.clone())),
                    }
                }
                let mut got: Vec<Vec<u64>> = merged.into_iter().map(|(_, mut ts)| { ts.sort_unstable(); ts }).collect();
                got.sort();
                let mut all: Vec<u64> = packets.iter().filter(|p| p.0 == k).map(|p| p.1).collect();
                all.sort_unstable();
                let mut want: Vec<Vec<u64>> = Vec::new();
                for ts in all {
                    match want.last_mut() {
                        Some(c) if ts - c[c.len() - 1] <= timeout => c.push(ts),
                        _ => want.push(vec![ts]),
                    }
                }
                prop_assert_eq!(got, want);
            }
        }
    }

    /// A flow of the naive table: its value is (id, packets).
    type NFlow = Flow<u32, (u64, u64)>;
    /// Flows that left, with why (`None`: taken out by the caller).
    type Gone = Vec<(NFlow, Option<End>)>;

    /// A naive flow table: the contract written out plainly, a vector in
    /// recency order (least recently seen first) searched from end to end.
    struct Naive {
        flows: Vec<NFlow>,
        max: usize,
        timeout: u64,
        now: u64,
        next_id: u64,
    }

    impl Naive {
        fn expire(&mut self, gone: &mut Gone) {
            while self.flows.first().is_some_and(|f| f.last_ns.saturating_add(self.timeout) < self.now) {
                gone.push((self.flows.remove(0), Some(End::Idle)));
            }
        }

        fn within(&self, f: &NFlow, ts: u64) -> bool {
            ts <= f.last_ns.saturating_add(self.timeout) && ts.saturating_add(self.timeout) >= f.first_ns
        }

        fn find(&self, k: u32) -> Option<usize> {
            self.flows.iter().position(|f| f.key == k)
        }

        /// A packet of `k` at `ts`; `start`: it may start a flow (entry), else touch.
        fn packet(&mut self, k: u32, ts: u64, start: bool, gone: &mut Gone) -> Option<u64> {
            self.now = self.now.max(ts);
            self.expire(gone);
            let mut f = match self.find(k) {
                Some(i) if self.within(&self.flows[i], ts) => self.flows.remove(i),
                Some(i) => {
                    gone.push((self.flows.remove(i), Some(End::Idle)));
                    if !start {
                        return None;
                    }
                    self.new_flow(k, ts, gone)
                }
                None if start => self.new_flow(k, ts, gone),
                None => return None,
            };
            f.first_ns = f.first_ns.min(ts);
            f.last_ns = f.last_ns.max(ts);
            f.value.1 += 1;
            let id = f.value.0;
            self.flows.push(f);
            Some(id)
        }

        fn new_flow(&mut self, k: u32, ts: u64, gone: &mut Gone) -> NFlow {
            if self.flows.len() == self.max {
                gone.push((self.flows.remove(0), Some(End::Evicted)));
            }
            self.next_id += 1;
            Flow { key: k, first_ns: ts, last_ns: ts, value: (self.next_id, 0) }
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Entry(u32, u64),
        Touch(u32, u64),
        Remove(u32),
        Advance(u64),
        /// Take out the flows whose id is `r` mod `m` and put them back, by id.
        Move(u64, u64),
        /// Take every flow out; the table goes on empty.
        Drain,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u32..16, 0u64..300).prop_map(|(k, t)| Op::Entry(k, t)),
            2 => (0u32..16, 0u64..300).prop_map(|(k, t)| Op::Touch(k, t)),
            1 => (0u32..16).prop_map(Op::Remove),
            1 => (0u64..400).prop_map(Op::Advance),
            1 => (2u64..4, 0u64..2).prop_map(|(m, r)| Op::Move(m, r)),
            1 => Just(Op::Drain),
        ]
    }

    proptest! {
        /// Random packets, removals, clock moves, moves out and back in, and
        /// drains that empty the table mid-run, against the naive table: the
        /// same flows leave, for the same reason, with the same times and
        /// packet counts, in the same order, and the flows left at the end
        /// drain in the same order. So no flow
        /// is lost or handed out twice, and no packet is counted in a wrong
        /// flow or twice.
        #[test]
        fn every_flow_leaves_once_as_the_naive_table_says(
            max in 1usize..10,
            timeout in 0u64..50,
            ops in proptest::collection::vec(op(), 0..400),
        ) {
            let mut t: FlowTable<u32, (u64, u64)> = FlowTable::new(TableLimits::new(max, timeout).unwrap());
            let mut n = Naive { flows: Vec::new(), max, timeout, now: 0, next_id: 0 };
            let mut next_id = 0u64;
            for (step, o) in ops.iter().enumerate() {
                let mut got: Gone = Vec::new();
                let mut want = Vec::new();
                match *o {
                    Op::Entry(k, ts) => {
                        let v = t.entry(k, ts, || { next_id += 1; (next_id, 0) }, |f, e| got.push((f, Some(e))));
                        v.1 += 1;
                        let id = v.0;
                        prop_assert_eq!(Some(id), n.packet(k, ts, true, &mut want), "step {}", step);
                    }
                    Op::Touch(k, ts) => {
                        let id = t.touch(&k, ts, |f, e| got.push((f, Some(e)))).map(|v| { v.1 += 1; v.0 });
                        prop_assert_eq!(id, n.packet(k, ts, false, &mut want), "step {}", step);
                    }
                    Op::Remove(k) => {
                        got.extend(t.remove(&k).map(|f| (f, None)));
                        want.extend(n.find(k).map(|i| (n.flows.remove(i), None)));
                    }
                    Op::Advance(now) => {
                        t.advance(now, |f, e| got.push((f, Some(e))));
                        n.now = n.now.max(now);
                        n.expire(&mut want);
                    }
                    Op::Move(m, r) => {
                        let mut out = Vec::new();
                        t.take_where(|f| f.value.0 % m == r, |f| out.push(f));
                        out.sort_by_key(|f| f.value.0);
                        for f in out {
                            prop_assert!(t.put(f, |f, e| got.push((f, Some(e)))).is_ok());
                        }
                        let (mut picked, kept): (Vec<_>, Vec<_>) = n.flows.drain(..).partition(|f| f.value.0 % m == r);
                        n.flows = kept;
                        picked.sort_by_key(|f| f.value.0);
                        for f in picked {
                            if n.flows.len() == n.max {
                                want.push((n.flows.remove(0), Some(End::Evicted)));
                            }
                            n.now = n.now.max(f.last_ns);
                            n.flows.push(f);
                        }
                    }
                    Op::Drain => {
                        t.drain(|f| got.push((f, None)));
                        want.extend(n.flows.drain(..).map(|f| (f, None)));
                    }
                }
                prop_assert_eq!(got, want, "step {}: {:?}", step, o);
                prop_assert_eq!(t.len(), n.flows.len(), "step {}", step);
            }
            let mut left = Vec::new();
            t.drain(|f| left.push(f));
            prop_assert_eq!(left, n.flows);
        }
    }
}
