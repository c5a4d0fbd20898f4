//! The XSK rings: the RX ring, where the kernel produces packet descriptors
//! and we consume them, and the fill ring, where we produce free frame
//! addresses and the kernel consumes them (capture uses these two); and, for
//! sending (`weir forward`), the TX ring, where we produce descriptors of
//! frames to transmit, and the completion ring, where the kernel gives back
//! the addresses of frames it has finished transmitting.
//!
//! Each ring is a single-producer single-consumer queue in memory shared with
//! the kernel: a producer index, a consumer index and a power-of-two array of
//! entries, indices running freely and wrapping. The producer writes entries,
//! then publishes them by storing its index with Release; the consumer loads
//! that index with Acquire before reading the entries (and, for the RX ring, the
//! frame bytes the kernel wrote before it). The consumer gives entries back by
//! storing its index with Release once it is done reading them; the producer
//! loads it with Acquire before overwriting them. These pair with the kernel's
//! smp_load_acquire/smp_store_release on the same words.
//!
//! Both rings keep a cached copy of the other side's index and touch the shared
//! one only when the cache says there is nothing (or no room) left, so a batch
//! costs two shared-memory accesses, not two per entry.
//!
//! The RX ring's packets are read from the UMEM, which its owner passes in as
//! the mapping it registered and its frame size: a packet's bytes borrow the
//! ring, so its frame cannot go back to the kernel while they are read.

#![allow(unsafe_code)]

use super::mem::Region;
use super::xsk::{RingOffset, XdpDesc};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// XDP_RING_NEED_WAKEUP in a ring's flags word.
const NEED_WAKEUP: u32 = libc::XDP_RING_NEED_WAKEUP;

/// The shared parts of one mapped ring, checked to lie inside the mapping.
struct Shared<T> {
    /// Keeps the ring mapped as long as the pointers below are used.
    _map: Region,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    entries: NonNull<T>,
    mask: u32,
}

impl<T> Shared<T> {
    fn new(map: Region, off: &RingOffset, size: u32) -> io::Result<Shared<T>> {
        let len = map.len() as u64;
        let bad = |what: &str| io::Error::other(format!("AF_XDP ring {what} lies outside its mapping or is misaligned"));
        let word = |at: u64, what: &str| -> io::Result<NonNull<AtomicU32>> {
            if at.checked_add(4).is_none_or(|end| end > len) || at % 4 != 0 {
                return Err(bad(what));
            }
            // SAFETY: `at + 4 <= len`, so the word is inside the mapping.
            Ok(unsafe { NonNull::new_unchecked(map.as_ptr().add(at as usize)) }.cast())
        };
        let producer = word(off.producer, "producer")?;
        let consumer = word(off.consumer, "consumer")?;
        let flags = word(off.flags, "flags")?;
        let array = u64::from(size) * size_of::<T>() as u64;
        if !size.is_power_of_two() || off.desc.checked_add(array).is_none_or(|end| end > len) || off.desc % align_of::<T>() as u64 != 0 {
            return Err(bad("array"));
        }
        // SAFETY: the array `desc..desc+size*size_of::<T>()` is inside the mapping (checked above).
        let entries = unsafe { NonNull::new_unchecked(map.as_ptr().add(off.desc as usize)) }.cast();
        Ok(Shared { _map: map, producer, consumer, flags, entries, mask: size - 1 })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: inside the mapping, 4-byte aligned (checked in `new`), alive as
        // long as `self.map`; AtomicU32 has the layout of the kernel's u32, and
        // the kernel accesses it atomically too.
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.consumer.as_ref() }
    }

    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.flags.as_ref() }
    }

    fn slot(&self, index: u32) -> *mut T {
        // SAFETY: `index & mask < size`, and the array of `size` entries is inside the mapping.
        unsafe { self.entries.as_ptr().add((index & self.mask) as usize) }
    }

    fn size(&self) -> u32 {
        self.mask + 1
    }
}

// SAFETY: the mapping is owned by this value and moves with it; our side of the
// ring is only ever used through `&mut self` by the one thread that owns it, and
// the other side is the kernel, synchronized through the atomic indices.
unsafe impl<T> Send for Shared<T> {}

/// The RX ring: packet descriptors from the kernel.
pub(crate) struct RxRing {
    ring: Shared<XdpDesc>,
    /// Our consumer index, as last published.
    consumer: u32,
    /// The kernel's producer index, as last loaded.
    producer: u32,
}

impl RxRing {
    /// The ring mapped at `map`, laid out as `off` says, with `size` entries.
    pub(crate) fn new(map: Region, off: &RingOffset, size: u32) -> io::Result<RxRing> {
        let ring = Shared::new(map, off, size)?;
        // Relaxed, then Acquire: nothing is produced before the socket is bound, and
        // the Acquire makes whatever was visible to us from the start.
        let consumer = ring.consumer().load(Ordering::Relaxed);
        let producer = ring.producer().load(Ordering::Acquire);
        Ok(RxRing { ring, consumer, producer })
    }

    /// Entries of the ring.
    pub(crate) fn size(&self) -> u32 {
        self.ring.size()
    }

    /// Descriptors ready to read, at most `max`; they are `packet(0..n)` until released.
    #[inline]
    pub(crate) fn peek(&mut self, max: u32) -> u32 {
        let mut ready = self.producer.wrapping_sub(self.consumer);
        if ready < max {
            // Acquire: the kernel wrote the descriptors, and the packets in the frames
            // they name, before its Release store of this index.
            self.producer = self.ring.producer().load(Ordering::Acquire);
            ready = self.producer.wrapping_sub(self.consumer);
        }
        ready.min(max)
    }

    /// Descriptor `i` of those [`peek`](Self::peek) found.
    #[inline]
    fn desc(&self, i: u32) -> XdpDesc {
        assert!(i < self.producer.wrapping_sub(self.consumer), "RX descriptor {i} was not peeked");
        // SAFETY: the slot is in the mapping (masked index) and the kernel does not
        // write it between its producer store, which we acquired, and our release.
        unsafe { self.ring.slot(self.consumer.wrapping_add(i)).read() }
    }

    /// Descriptor `i` of those peeked, and the first `max_len` bytes of its packet
    /// in `umem`, the UMEM registered with frames of `frame_size` bytes. The
    /// bytes borrow the ring, so they cannot outlive the release that lets the
    /// kernel reuse the frame.
    #[inline]
    pub(crate) fn packet<'a>(&'a self, i: u32, umem: &'a Region, frame_size: usize, max_len: usize) -> (XdpDesc, &'a [u8]) {
        let desc = self.desc(i);
        let len = (desc.len as usize).min(max_len);
        let start = desc.addr as usize;
        debug_assert!(frame_size.is_power_of_two(), "UMEM frames are a power of two in size");
        // A mask, not a division: this runs for every packet.
        let frame_end = (start & !(frame_size - 1)) + frame_size;
        assert!(start.checked_add(len).is_some_and(|end| end <= frame_end && end <= umem.len()), "packet outside its frame");
        // SAFETY: the bytes lie in one frame of `umem` (checked above). The kernel
        // wrote them before publishing the descriptor (acquired in `peek`) and
        // writes that frame again only after it is back on the fill ring, which
        // needs the release this borrow of `self` holds off.
        (desc, unsafe { std::slice::from_raw_parts(umem.as_ptr().add(start), len) })
    }

    /// Give the first `n` peeked descriptors back to the kernel.
    #[inline]
    pub(crate) fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        assert!(n <= self.producer.wrapping_sub(self.consumer), "released more RX descriptors than peeked");
        self.consumer = self.consumer.wrapping_add(n);
        // Release: our reads of these descriptors are done before the kernel may
        // reuse their slots.
        self.ring.consumer().store(self.consumer, Ordering::Release);
    }
}

/// The fill ring: free frames for the kernel to receive into.
pub(crate) struct FillRing {
    ring: Shared<u64>,
    /// Our producer index, as last published.
    producer: u32,
    /// The kernel's consumer index, as last loaded.
    consumer: u32,
}

impl FillRing {
    pub(crate) fn new(map: Region, off: &RingOffset, size: u32) -> io::Result<FillRing> {
        let ring = Shared::new(map, off, size)?;
        // Relaxed: we are the only producer; Acquire on the consumer as in `produce`.
        let producer = ring.producer().load(Ordering::Relaxed);
        let consumer = ring.consumer().load(Ordering::Acquire);
        Ok(FillRing { ring, producer, consumer })
    }

    /// Move as many frames from the end of `free` onto the ring as fit, each
    /// rounded down to its frame start with `frame_mask`. Returns how many.
    #[inline]
    pub(crate) fn produce(&mut self, free: &mut Vec<u64>, frame_mask: u64) -> u32 {
        let want = u32::try_from(free.len()).unwrap_or(u32::MAX);
        if want == 0 {
            return 0;
        }
        let size = self.ring.size();
        let mut room = size - self.producer.wrapping_sub(self.consumer);
        if room < want {
            // Acquire: the kernel has read the entries up to this index before it
            // released them, so we may overwrite them.
            self.consumer = self.ring.consumer().load(Ordering::Acquire);
            room = size - self.producer.wrapping_sub(self.consumer);
        }
        let n = room.min(want);
        for (i, addr) in free.drain(free.len() - n as usize..).enumerate() {
            // SAFETY: the slot is in the mapping (masked index) and free: the kernel
            // released it (consumer index acquired above) and does not read it until
            // our Release store below.
            unsafe { self.ring.slot(self.producer.wrapping_add(i as u32)).write(addr & frame_mask) };
        }
        if n > 0 {
            self.producer = self.producer.wrapping_add(n);
            // Release: the addresses are written before the kernel sees the new index.
            self.ring.producer().store(self.producer, Ordering::Release);
        }
        n
    }

    /// Whether the driver asked to be woken for new entries (XDP_USE_NEED_WAKEUP).
    #[inline]
    pub(crate) fn needs_wakeup(&self) -> bool {
        // Relaxed: a hint. A flag set just after we looked is seen at the next look,
        // and the idle poll(2) wakes the driver in any case.
        self.ring.flags().load(Ordering::Relaxed) & NEED_WAKEUP != 0
    }
}

/// The TX ring: descriptors of frames for the kernel to transmit.
pub(crate) struct TxRing {
    ring: Shared<XdpDesc>,
    /// Our producer index, as last published.
    producer: u32,
    /// The kernel's consumer index, as last loaded.
    consumer: u32,
}

impl TxRing {
    pub(crate) fn new(map: Region, off: &RingOffset, size: u32) -> io::Result<TxRing> {
        let ring = Shared::new(map, off, size)?;
        // Relaxed: we are the only producer; Acquire on the consumer as in `room`.
        let producer = ring.producer().load(Ordering::Relaxed);
        let consumer = ring.consumer().load(Ordering::Acquire);
        Ok(TxRing { ring, producer, consumer })
    }

    /// Free slots, at least `want` if there are that many (the kernel's index is
    /// loaded only when the cached one says fewer).
    #[inline]
    pub(crate) fn room(&mut self, want: u32) -> u32 {
        let size = self.ring.size();
        let mut room = size - self.producer.wrapping_sub(self.consumer);
        if room < want {
            // Acquire: the kernel has read the descriptors up to this index (and
            // copied or mapped their frames) before it released the slots.
            self.consumer = self.ring.consumer().load(Ordering::Acquire);
            room = size - self.producer.wrapping_sub(self.consumer);
        }
        room
    }

    /// Write `desc` into the `i`th free slot, unpublished; `i` must be below
    /// what [`room`](Self::room) returned since the last [`submit`](Self::submit).
    #[inline]
    pub(crate) fn write(&mut self, i: u32, desc: XdpDesc) {
        assert!(i < self.ring.size() - self.producer.wrapping_sub(self.consumer), "TX slot {i} is not free");
        // SAFETY: the slot is in the mapping (masked index) and free: the kernel
        // released it (consumer index acquired in `room`) and does not read it
        // until our Release store in `submit`.
        unsafe { self.ring.slot(self.producer.wrapping_add(i)).write(desc) };
    }

    /// Publish the first `n` written slots to the kernel.
    #[inline]
    pub(crate) fn submit(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.producer = self.producer.wrapping_add(n);
        // Release: the descriptors are written before the kernel sees the new index.
        self.ring.producer().store(self.producer, Ordering::Release);
    }

    /// Descriptors published and not yet taken by the kernel (a hint: loads its index).
    pub(crate) fn pending(&mut self) -> u32 {
        // Acquire: as in `room`.
        self.consumer = self.ring.consumer().load(Ordering::Acquire);
        self.producer.wrapping_sub(self.consumer)
    }

    /// Whether the kernel asked to be woken (sendto) to transmit (XDP_USE_NEED_WAKEUP).
    #[inline]
    pub(crate) fn needs_wakeup(&self) -> bool {
        // Relaxed: a hint, as for the fill ring; a missed one is caught by the
        // next batch or the idle loop's kick.
        self.ring.flags().load(Ordering::Relaxed) & NEED_WAKEUP != 0
    }
}

/// The completion ring: addresses of frames the kernel has transmitted (or
/// given up on), ours again.
pub(crate) struct CompletionRing {
    ring: Shared<u64>,
    /// Our consumer index, as last published.
    consumer: u32,
    /// The kernel's producer index, as last loaded.
    producer: u32,
}

impl CompletionRing {
    pub(crate) fn new(map: Region, off: &RingOffset, size: u32) -> io::Result<CompletionRing> {
        let ring = Shared::new(map, off, size)?;
        // As for the RX ring.
        let consumer = ring.consumer().load(Ordering::Relaxed);
        let producer = ring.producer().load(Ordering::Acquire);
        Ok(CompletionRing { ring, consumer, producer })
    }

    /// Take every completed address (at most `max`) into `out`; returns how many.
    #[inline]
    pub(crate) fn take(&mut self, out: &mut Vec<u64>, max: u32) -> u32 {
        let mut ready = self.producer.wrapping_sub(self.consumer);
        if ready < max {
            // Acquire: the kernel is done with these frames before its Release
            // store of this index, so we may give them to the fill ring.
            self.producer = self.ring.producer().load(Ordering::Acquire);
            ready = self.producer.wrapping_sub(self.consumer);
        }
        let n = ready.min(max);
        for i in 0..n {
            // SAFETY: the slot is in the mapping (masked index), published by the
            // kernel (producer acquired above), and not rewritten before our release.
            out.push(unsafe { self.ring.slot(self.consumer.wrapping_add(i)).read() });
        }
        if n > 0 {
            self.consumer = self.consumer.wrapping_add(n);
            // Release: our reads of the entries are done before the kernel reuses the slots.
            self.ring.consumer().store(self.consumer, Ordering::Release);
        }
        n
    }
}
