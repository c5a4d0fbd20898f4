//! A regular trace file mapped into memory and walked in place.
//!
//! Reading a page-cached file with `read(2)` is the kernel copying every byte
//! into our blocks; mapping it costs only the page-table work (one fault maps
//! a whole run of cached pages: fault-around, large folios). Where the copy
//! cannot run on a CPU of its own, mapping wins (see
//! [`TraceAccess`](super::TraceAccess) for when it is used and the figures).
//! A mapped file is mapped read-only and private, and its blocks (see
//! [`BlockArena::over_file`]) are windows of the mapping: block `i` starts
//! `headroom` bytes before byte `i * stride` of the file, so a record that
//! straddles two strides lies whole in the next window and nothing is copied.
//! A record longer than the headroom is still assembled in a buffer of its
//! own by the reader. Anonymous read-only zero pages sit before the file (block
//! 0's headroom) and after it (the last window's tail), so every window is
//! readable memory.
//!
//! Contract:
//! - [`map`] gives `None` where mapping cannot work (an empty file, a file
//!   system that refuses `mmap`, more than [`WATCHED`] traces mapped at
//!   once); the reader then uses `read(2)`, as for a pipe.
//! - A file truncated while mapped would make the next access past its new
//!   end a SIGBUS. A process-wide handler, installed once and chained to the
//!   one it replaced, puts a zero page where such an access landed and
//!   records the lowest file offset lost; [`Watch::lost`] tells the reader,
//!   which ends the run with an error naming the file and that offset (it
//!   looks before each record it delivers, at each block, at the end and
//!   before calling a record malformed). Bytes cut inside the new last page
//!   read as zeros without a fault, which is why the reader also compares the
//!   file's size at the end. A packet whose record header lay before the cut
//!   may reach its worker with zeros where its bytes were cut, as may the
//!   last packets of a file cut after the capture thread's last look.
//! - The mapping covers the file's size when it was opened: a trace still
//!   being written is read up to that point, as `read(2)` reads one up to
//!   wherever its writer was when the reader got there.

#![allow(unsafe_code)]

use crate::pool::sys::Region;
use crate::pool::{prefetch, BlockArena};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// How many mappings the SIGBUS handler can watch at once; a trace opened
/// beyond that is read with `read(2)`.
pub(super) const WATCHED: usize = 64;

/// One mapping the handler watches: file bytes at `[start, end)` of memory.
struct Slot {
    /// Claimed by a mapping; the address fields are valid once `start` is not 0.
    taken: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
    /// The lowest file offset a zero page replaced; `usize::MAX` when none.
    lost: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot =
    Slot { taken: AtomicBool::new(false), start: AtomicUsize::new(0), end: AtomicUsize::new(0), lost: AtomicUsize::new(usize::MAX) };
static SLOTS: [Slot; WATCHED] = [FREE; WATCHED];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// The SIGBUS disposition we replaced, to pass on faults that are not ours;
/// `None` when installing failed (then nothing is mapped).
static PREVIOUS: OnceLock<Option<libc::sigaction>> = OnceLock::new();

/// A watched mapping: frees its slot when dropped (before the unmapping, see
/// [`BlockArena`]'s lease).
pub(super) struct Watch {
    slot: usize,
}

impl Watch {
    /// The lowest file offset whose page vanished under us, if one did.
    pub(super) fn lost(&self) -> Option<u64> {
        // Relaxed: the handler ran on the faulting thread; a capture thread
        // that looks later learns of it at its next look, which is all the
        // contract promises for other threads' faults.
        match SLOTS[self.slot].lost.load(Ordering::Relaxed) {
            usize::MAX => None,
            at => Some(at as u64),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let s = &SLOTS[self.slot];
        // Release on `start`: the handler stops matching this range before the
        // slot can be claimed again and given another range.
        s.start.store(0, Ordering::Release);
        s.end.store(0, Ordering::Relaxed);
        s.lost.store(usize::MAX, Ordering::Relaxed);
        // Release: the clearing above happens before another claim sees it free.
        s.taken.store(false, Ordering::Release);
    }
}

/// A trace mapped for reading in place.
pub(super) struct Mapping {
    pub(super) arena: Arc<BlockArena>,
    /// Blocks in the arena: the file's strides.
    pub(super) blocks: u32,
    pub(super) watch: Arc<Watch>,
    /// The address of the file's first byte, for prefetch hints.
    pub(super) start: usize,
}

fn page_round(n: usize, page: usize) -> Option<usize> {
    n.checked_add(page - 1).map(|v| v & !(page - 1))
}

/// Map `size` bytes of `file` as blocks of `stride` file bytes with `headroom`
/// in front of each; `None` where it cannot be done (see the module doc).
pub(super) fn map(file: &File, size: u64, stride: usize, headroom: usize) -> Option<Mapping> {
    let size = usize::try_from(size).ok().filter(|&s| s > 0)?;
    let blocks = u32::try_from(size.div_ceil(stride)).ok()?;
    install()?;
    let page = PAGE.load(Ordering::Relaxed);
    let front = page_round(headroom, page)?;
    let file_len = page_round(size, page)?;
    let total = front.checked_add(file_len)?.checked_add(page_round(stride, page)?)?;
    // SAFETY: an anonymous read-only reservation with no address hint has no
    // preconditions; the result is checked.
    let base = unsafe {
        libc::mmap(std::ptr::null_mut(), total, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: `base..base+total` is the reservation just made, and only this Region unmaps it.
    let region = unsafe { Region::from_mapping(NonNull::new(base.cast())?, total, None) };
    // SAFETY: the fixed address lies inside our own reservation (front + file_len
    // <= total), so MAP_FIXED replaces only pages we own; the file is open.
    let at = unsafe {
        libc::mmap(region.as_ptr().add(front).cast(), size, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_FIXED, file.as_raw_fd(), 0)
    };
    if at == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the range is the file mapping just made; the advice is a hint
    // (read ahead further on a cold file), and its failure changes nothing.
    unsafe { libc::madvise(at, size, libc::MADV_SEQUENTIAL) };
    let watch = Arc::new(watch(at as usize, at as usize + file_len)?);
    let lease: Box<dyn Send + Sync> = Box::new(Arc::clone(&watch));
    // SAFETY: block i's window is the stride + headroom bytes from
    // front - headroom + i*stride of the region: it starts at 0 or later, and the
    // last one ends at front + blocks*stride <= front + size + stride, inside
    // total (the tail holds a whole stride past the file's last page). Every
    // page is mapped readable, and nothing writes a read-only mapping.
    let arena = unsafe { BlockArena::over_file(region, front - headroom, stride, stride + headroom, blocks as usize, lease) };
    Some(Mapping { arena, blocks, watch, start: at as usize })
}

/// Claim a slot for the file bytes at `[start, end)`.
fn watch(start: usize, end: usize) -> Option<Watch> {
    let slot = SLOTS.iter().position(|s| {
        // Acquire: pairs with the Release of the Watch that freed it.
        s.taken.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
    })?;
    let s = &SLOTS[slot];
    s.lost.store(usize::MAX, Ordering::Relaxed);
    s.end.store(end, Ordering::Relaxed);
    // Release: `end` and `lost` are written before the handler can match `start`.
    s.start.store(start, Ordering::Release);
    Some(Watch { slot })
}

/// Install the SIGBUS handler once; false (None) if the system refused.
fn install() -> Option<()> {
    let previous = PREVIOUS.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: a zeroed sigaction is a valid value to fill in; the handler
        // has the three-argument shape SA_SIGINFO asks for; `old` receives the
        // disposition we replace.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_sigbus as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&mut act.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            (libc::sigaction(libc::SIGBUS, &act, &mut old) == 0).then_some(old)
        }
    });
    previous.map(|_| ())
}

/// The SIGBUS handler: a fault in a watched file's bytes gets a zero page in
/// place and is recorded; any other goes to the disposition we replaced.
/// Only async-signal-safe work here: atomics, mmap, sigaction.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for s in &SLOTS {
        // Acquire: pairs with the Release in `watch`, so `end` is this range's.
        let start = s.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= s.end.load(Ordering::Relaxed) {
            continue;
        }
        let at = addr & !(page - 1);
        // SAFETY: the page is inside a mapping we own (a watched file's bytes,
        // which stay mapped while the slot is claimed); replacing it with an
        // anonymous read-only page is what lets the faulting read go on.
        let p = unsafe {
            libc::mmap(at as *mut libc::c_void, page, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED, -1, 0)
        };
        if p != libc::MAP_FAILED {
            // Relaxed: see `Watch::lost`.
            s.lost.fetch_min(at - start, Ordering::Relaxed);
            return;
        }
    }
    pass_on(sig, info, ctx);
}

/// Hand a fault that is not ours to the disposition before ours. The
/// default (or "ignore", which the kernel does not honour for a fault) is
/// restored, so the faulting access repeats and ends the process as it would
/// have without us.
fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(Some(old)) = PREVIOUS.get() else { return };
    let handler = old.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: resetting a signal's disposition to the default is always valid.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
    } else if old.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this shape.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: without SA_SIGINFO the previous handler takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

/// How far ahead of the walk a mapped file's lines are asked for. The kernel's
/// copy leaves a read block in the cache; a mapping's bytes come from memory,
/// and a record header read there stalls the walk (41% of a count's samples
/// without hints). One line at a time as the walk passes, a few records ahead.
const PREFETCH_AHEAD: u64 = 8 * 1024;
/// Bytes of a cache line.
const LINE: u64 = 64;
/// A prefetch of a page not yet in the page tables is dropped, and one fault
/// maps this much around it (the kernel's fault-around), so the first byte of
/// each such stretch is read for real before its lines are asked for.
const FAULT_AROUND: u64 = 64 * 1024;

/// The walk's look-ahead over a mapped file: prefetch hints, and a real read
/// where a hint alone would find no page.
pub(super) struct Ahead {
    start: usize,
    size: u64,
    /// The file offset of the next line to ask for.
    next: u64,
    /// Keeps the mapping alive for the reads.
    _arena: Arc<BlockArena>,
}

impl Ahead {
    pub(super) fn new(m: &Mapping, size: u64) -> Ahead {
        Ahead { start: m.start, size, next: 0, _arena: Arc::clone(&m.arena) }
    }

    /// The walk has reached file offset `at`: ask for the lines up to
    /// [`PREFETCH_AHEAD`] beyond it.
    #[inline]
    pub(super) fn walked(&mut self, at: u64) {
        let until = (at + PREFETCH_AHEAD).min(self.size);
        while self.next < until {
            let addr = (self.start as u64 + self.next) as usize;
            if self.next % FAULT_AROUND == 0 {
                // SAFETY: next < size, so the byte is the file's, inside the
                // mapping `_arena` keeps; nobody writes it; a truncation's fault
                // is the handler's (a zero page).
                std::hint::black_box(unsafe { std::ptr::read_volatile(addr as *const u8) });
            }
            prefetch::hint(addr as *const u8);
            self.next += LINE;
        }
    }
}
