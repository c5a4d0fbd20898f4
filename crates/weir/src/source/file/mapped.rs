//! A regular trace file mapped into memory and walked in place.
//!
//! Reading a page-cached file with `read(2)` is the kernel copying every byte
//! into our blocks; mapping it costs only the page-table work, which is done
//! ahead of the walk (see [`Ahead`]): on a thread of its own where there is a
//! second CPU, with the file placed on a 2 MiB boundary so that the page
//! cache's 2 MiB folios are mapped whole, one PMD each (see
//! [`TraceAccess`](super::TraceAccess) for the figures).
//! A mapped file is mapped private and writable (copy-on-write), and its blocks (see
//! [`BlockArena::over_file`]) are windows of the mapping: block `i` starts
//! `headroom` bytes before byte `i * stride` of the file, so a record that
//! straddles two strides lies whole in the next window and nothing is copied.
//! A record longer than the headroom is still assembled in a buffer of its
//! own by the reader. Anonymous read-only zero pages sit before the file (block
//! 0's headroom) and after it (the last window's tail), so every window is
//! readable memory.
//!
//! Writable, because programs write into the packets they are handed, as
//! libpcap allows (its savefile packets are in its own buffer): arpwatch puts
//! an ethertype at offset 12, pmacctd copies a port header into IP fragments.
//! A write to a private mapping copies the page for this mapping alone: the
//! file, the page cache and any other handle's mapping of the same trace never
//! see it. weir itself never writes the mapping, and never reads a packet's
//! bytes again once it has handed them out: the filter, steering and the
//! walk all look at a record before it is delivered, and the walk (on the
//! capture thread or a walking thread, `prewalk.rs`) reads only records
//! ahead of the ones delivered. A program that writes past a packet's
//! captured length may change the next record before it is walked, as it
//! would corrupt libpcap's buffer; that is its own doing.
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

use crate::pool::{prefetch, BlockArena};
use crate::profile::{Profiler, Stage};
use crate::sys::mem::Region;
use nix::sched::CpuSet;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// A PMD's span on x86-64 and aarch64 with 4 KiB pages: where the file
/// starts in memory, so 2 MiB folios of the page cache can be mapped whole.
const PMD: usize = 2 * 1024 * 1024;
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
    let file_len = page_round(size, page)?;
    // Room to put the file's first byte on a PMD boundary past the headroom.
    let total = page_round(headroom, page)?.checked_add(PMD)?.checked_add(file_len)?.checked_add(page_round(stride, page)?)?;
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
    // The file's first byte on the first PMD boundary past the headroom: the
    // kernel maps a 2 MiB folio whole only where the address and the file
    // offset agree modulo 2 MiB. `base` is page aligned, so front is at most
    // headroom (rounded) + PMD - page.
    let front = ((base as usize + page_round(headroom, page)?).next_multiple_of(PMD)) - base as usize;
    debug_assert!(front >= headroom && front + file_len + page_round(stride, page)? <= total);
    // SAFETY: the fixed address lies inside our own reservation (front + file_len
    // <= total, as asserted), so MAP_FIXED replaces only pages we own; the file is open.
    // Writable but private (see the module doc): a write copies the page for
    // this mapping and never reaches the file, which is only open for reading.
    let at = unsafe {
        libc::mmap(
            region.as_ptr().add(front).cast(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_FIXED,
            file.as_raw_fd(),
            0,
        )
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
    // page is mapped readable; weir never writes it, and the program writes
    // only packets it was handed, which weir no longer reads (module doc).
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
        // anonymous zero page, writable like the file's (a program may write
        // the packet it was handed), is what lets the faulting access go on.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
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
pub(super) const PREFETCH_AHEAD: u64 = 8 * 1024;
/// Bytes of a cache line.
pub(super) const LINE: u64 = 64;
/// A prefetch of a page not yet in the page tables is dropped, and one fault
/// maps this much around it (the kernel's fault-around), so the first byte of
/// each such stretch is read for real before its lines are asked for.
const FAULT_AROUND: u64 = 64 * 1024;

/// The steps in which page tables are filled ahead of the walk (see
/// [`Ahead`]): one `madvise` call maps a PMD's worth.
const POPULATE_STEP: u64 = PMD as u64;
/// The steps in which the walk fills the page tables itself, on one CPU:
/// smaller than a thread's, so that in a file cached in single pages (where a
/// 2 MiB step is some 130 µs of work) a profile's sampled windows meet the
/// cost evenly rather than in rare large bursts. A step inside a 2 MiB folio
/// still maps all of it, so the folio's other steps find it mapped.
const INLINE_STEP: u64 = 256 * 1024;
/// How far a populating thread may run ahead of the walk: enough to stay
/// ahead of a walk at memory speed between its wake-ups, little enough that a
/// cold trace larger than memory is not read in faster than it is walked
/// (each step ahead of the walk is a read of the file when it is not cached).
const POPULATE_LEAD: u64 = 64 * 1024 * 1024;
/// `madvise`'s MADV_POPULATE_READ (Linux 5.14): fill the page tables for a
/// range as a read would, without the faults. Not in every libc's headers yet.
const MADV_POPULATE_READ: libc::c_int = 22;

/// Fill the page tables of file bytes `[from, end)` of the mapping at
/// `start`. False when the kernel does not know the advice (before 5.14):
/// faults then map the pages as the walk reaches them. A truncated file's
/// missing pages make the call fail without a signal, mapping nothing past
/// them: the walk's own access then faults, and the SIGBUS handler takes over.
fn populate(start: usize, from: u64, end: u64) -> bool {
    let page = PAGE.load(Ordering::Relaxed) as u64;
    let from = from & !(page - 1);
    debug_assert!(from < end);
    // SAFETY: callers keep [from, end) inside a file mapping whose arena they
    // hold (end <= the file's size; `start` is page aligned, and so is
    // `start + from`); the advice only fills page tables with the file's own
    // pages, as reads of them would, and changes no memory.
    let r = unsafe { libc::madvise((start as u64 + from) as *mut libc::c_void, (end - from) as usize, MADV_POPULATE_READ) };
    !(r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL))
}

/// How far behind the walk a mapped trace's page tables are emptied again
/// (see [`Behind`]): well past what packets in flight still point at, whose
/// pages, were they touched after all, would only be faulted in again.
const UNMAP_BEHIND: u64 = 2 * POPULATE_LEAD;
/// How much is unmapped in one call (see [`Behind::follow`]).
const UNMAP_AT_ONCE: u64 = POPULATE_LEAD / 2;

/// Empties a mapped trace's page tables behind its walk, [`UNMAP_AT_ONCE`]
/// or more at a time, with MADV_DONTNEED: a private file mapping then reads the page
/// cache again at its next access, so nothing of the file is lost. A page a
/// program wrote is dropped with its write; by then the packets on it were
/// handed out long before (more than [`UNMAP_BEHIND`] of file ago), and a
/// program may use a packet's bytes only until its next read. The process's share of
/// the file (RssFile) stays under [`UNMAP_BEHIND`] + [`POPULATE_LEAD`] for a
/// trace of any size, and the work of unmapping is done as the walk goes, by
/// whoever fills the tables (a profile's stage), rather than all at once when
/// the mapping goes away: 40 ms for a 1.2 GB trace in single pages.
struct Behind {
    /// The file offset up to which the tables were emptied.
    done: u64,
}

impl Behind {
    /// Empty the tables up to [`UNMAP_BEHIND`] behind `walk`, once that is
    /// [`UNMAP_AT_ONCE`] or more: one call each time, since each call costs
    /// the walking thread's CPU an interrupt (the TLB shootdown) when the
    /// caller is another thread.
    fn follow(&mut self, start: usize, walk: u64) {
        let until = walk.saturating_sub(UNMAP_BEHIND) & !(POPULATE_STEP - 1);
        if until < self.done + UNMAP_AT_ONCE {
            return;
        }
        // SAFETY: [done, until) lies before the walk, inside the file mapping
        // the caller's arena keeps (start, done and until are page aligned).
        // Dropping a private mapping's pages changes no file data: the next
        // access maps the page cache's page again (see the type's doc for a
        // page a program wrote).
        unsafe { libc::madvise((start as u64 + self.done) as *mut libc::c_void, (until - self.done) as usize, libc::MADV_DONTNEED) };
        self.done = until;
    }
}

/// Who fills a mapped trace's page tables ahead of its walk.
///
/// Without it each fault maps only the 64 KiB around it (the kernel's
/// fault-around): some 18,700 faults for a 1.2 GB trace, each on the walking
/// thread. With the mapping on a PMD boundary, a call maps each 2 MiB folio
/// of the page cache with one PMD instead of 512 PTEs (and fewer TLB misses
/// follow). Figures on the 2M-packet benchmark trace: see [`TraceAccess`](super::TraceAccess).
enum Populate {
    /// The walking thread itself, a step ahead of where it is (one CPU: a
    /// thread of its own would only take turns with the walk). The offset up
    /// to which it asked; `None` once the kernel refused.
    Inline(Option<u64>),
    /// A thread of its own, up to [`POPULATE_LEAD`] ahead, told where the walk
    /// is each time it has gone half that further (a wake-up is a futex call
    /// on the walking thread: once per 2 MiB step they were 3% of its time);
    /// the walk then takes no page-table work at all.
    Thread { shared: Arc<Told>, thread: std::thread::JoinHandle<()>, told: u64 },
}

/// What the walk tells the populating thread.
struct Told {
    /// The walk's file offset, as of its last step.
    walk: AtomicU64,
    /// The walk is over: the thread ends at its next look.
    stop: AtomicBool,
}

/// The walk's look-ahead over a mapped file: page tables filled ahead (see
/// [`Populate`]), prefetch hints, and a real read where a hint alone would
/// find no page (when the kernel does not populate).
pub(super) struct Ahead {
    start: usize,
    size: u64,
    /// The file offset of the next line to ask for.
    next: u64,
    populate: Populate,
    /// Where the walk itself fills the tables, it empties them behind it too.
    behind: Behind,
    /// Whether the opener could use more than one CPU (see [`Ahead::new`]).
    parallel: bool,
    /// Keeps the mapping alive for the reads.
    arena: Arc<BlockArena>,
    /// Whether [`walked`](Self::walked) asks for lines ahead: not while a
    /// walking thread reads the records (it asks for them itself).
    prefetch: bool,
}

/// The bytes of a mapped file, whole, for a thread that walks its records
/// ahead of the capture thread (`prewalk.rs`). Holds the mapping.
pub(super) struct FileBytes {
    start: usize,
    len: usize,
    _arena: Arc<BlockArena>,
}

impl FileBytes {
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: `start..start + len` is the file's mapping, readable
        // (private) for as long as the arena held here lives. weir never
        // writes it; a program writes only packets already delivered, which
        // lie behind every record the walk still reads (module doc). A page
        // the file lost by a truncation reads as zeros through the SIGBUS
        // handler (see the module doc).
        unsafe { std::slice::from_raw_parts(self.start as *const u8, self.len) }
    }
}

impl Ahead {
    /// The look-ahead of a walk of `m`, from its start; called on the thread
    /// that opens the trace, whose affinity and cgroup quota say whether a
    /// populating thread would have a CPU of its own.
    pub(super) fn new(m: &Mapping, size: u64) -> Ahead {
        let parallel = std::thread::available_parallelism().map_or(1, |n| n.get()) > 1;
        Ahead {
            start: m.start,
            size,
            next: 0,
            populate: Populate::Inline(Some(0)),
            behind: Behind { done: 0 },
            parallel,
            arena: Arc::clone(&m.arena),
            prefetch: true,
        }
    }

    /// The whole file, for a thread that walks its records ahead: when
    /// `force`d, or where the opener has a second CPU for it and the file is
    /// in large folios; from then on the walk asks for no lines (the walking
    /// thread does, and it reads them first).
    pub(super) fn hand_to_a_walker(&mut self, force: bool) -> Option<FileBytes> {
        let len = usize::try_from(self.size).ok()?;
        if !force && (!self.parallel || !self.in_large_folios()) {
            return None;
        }
        self.prefetch = false;
        Some(FileBytes { start: self.start, len, _arena: Arc::clone(&self.arena) })
    }

    /// Whether the page cache holds the file in large folios, judged from a
    /// few 2 MiB stretches of it whose page tables are filled now (as they
    /// would be later): one PMD each takes microseconds, 512 single pages a
    /// hundred or more. A walking thread pays off only then: in single pages
    /// the page tables cost as much as the walk, and the walking thread
    /// would take that work to the CPU that also fills them.
    fn in_large_folios(&self) -> bool {
        /// Longest a 2 MiB stretch may take to map to count as one folio.
        const ONE_FOLIO: std::time::Duration = std::time::Duration::from_micros(40);
        let pmd = PMD as u64;
        if self.size < 8 * pmd {
            return false;
        }
        [1, 2, 3].iter().all(|quarter| {
            let from = (self.size / 4 * quarter) & !(pmd - 1);
            let t = std::time::Instant::now();
            populate(self.start, from, from + pmd) && t.elapsed() < ONE_FOLIO
        })
    }

    /// The walking thread could not start: the walk asks for lines again.
    pub(super) fn walk_here(&mut self) {
        self.prefetch = true;
    }

    /// Hand the page tables to a thread of their own, on `cpus` (the
    /// opener's), when the opener could use more than one CPU.
    pub(super) fn populate_on_a_thread(&mut self, cpus: Option<CpuSet>, profiler: Option<Arc<Profiler>>) -> std::io::Result<()> {
        let Populate::Inline(Some(from)) = self.populate else { return Ok(()) };
        if from >= self.size || !self.parallel {
            return Ok(());
        }
        let shared = Arc::new(Told { walk: AtomicU64::new(0), stop: AtomicBool::new(false) });
        let (start, size, arena, told) = (self.start, self.size, Arc::clone(&self.arena), Arc::clone(&shared));
        let thread = super::spawn_helper("weir-populate", cpus, profiler, "populate", Stage::Populate, move || {
            let _mapping = arena;
            let mut done = from;
            let mut behind = Behind { done: 0 };
            // Relaxed throughout: the offset is a hint of how far to go, and
            // `stop` only ends the thread sooner; park/unpark order the rest.
            while !told.stop.load(Ordering::Relaxed) {
                let walk = told.walk.load(Ordering::Relaxed);
                behind.follow(start, walk);
                let until = (walk + POPULATE_LEAD).min(size);
                if done >= until {
                    if walk >= size {
                        break;
                    }
                    std::thread::park();
                    continue;
                }
                // A walk that overtook the thread mapped its pages itself.
                done = done.max(walk & !(POPULATE_STEP - 1));
                let end = (done + POPULATE_STEP).min(size);
                if !populate(start, done, end) {
                    // The kernel cannot: faults map the pages, and nothing here unmaps them.
                    break;
                }
                done = end;
            }
        })?;
        self.populate = Populate::Thread { shared, thread, told: 0 };
        Ok(())
    }

    /// The walk has reached file offset `at`: keep the page tables filled
    /// ahead, and ask for the lines up to [`PREFETCH_AHEAD`] beyond it.
    #[inline]
    pub(super) fn walked(&mut self, at: u64) {
        let until = (at + PREFETCH_AHEAD).min(self.size);
        match &mut self.populate {
            Populate::Inline(Some(done)) if *done < self.size && *done < until + INLINE_STEP => {
                let end = (*done + INLINE_STEP).min(self.size);
                self.populate = Populate::Inline(populate(self.start, *done, end).then_some(end));
                self.behind.follow(self.start, at);
            }
            Populate::Thread { shared, thread, told } if at >= *told + POPULATE_LEAD / 2 => {
                *told = at;
                shared.walk.store(at, Ordering::Relaxed);
                thread.thread().unpark();
            }
            _ => {}
        }
        if !self.prefetch {
            return;
        }
        // Only when nothing fills the page tables ahead: otherwise the read
        // would wait for memory once per stretch, for a page already mapped.
        let touch = matches!(self.populate, Populate::Inline(None));
        while self.next < until {
            let addr = (self.start as u64 + self.next) as usize;
            if touch && self.next % FAULT_AROUND == 0 {
                // SAFETY: next < size, so the byte is the file's, inside the
                // mapping `arena` keeps; it lies ahead of every packet handed
                // out, so nobody writes it yet; a truncation's fault
                // is the handler's (a zero page).
                std::hint::black_box(unsafe { std::ptr::read_volatile(addr as *const u8) });
            }
            prefetch::hint(addr as *const u8);
            self.next += LINE;
        }
    }
}

impl Drop for Ahead {
    /// The populating thread ends at its next look (within one step) and is
    /// joined, so no thread outlives the trace.
    fn drop(&mut self) {
        if let Populate::Thread { shared, thread, .. } = std::mem::replace(&mut self.populate, Populate::Inline(None)) {
            shared.stop.store(true, Ordering::Relaxed);
            thread.thread().unpark();
            // A panic there would be a bug of its own; the walk is over either way.
            let _ = thread.join();
        }
    }
}
