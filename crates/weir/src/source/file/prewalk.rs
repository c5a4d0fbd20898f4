//! A mapped trace's records parsed ahead of the capture thread, on a thread
//! of its own.
//!
//! Walking a trace is reading each record's header, a cache line of memory
//! the walk cannot know before it has read the one before: the lines are
//! asked for ahead, every one of them (the header may be in any), and on the
//! main job that was half of the capture thread's time on two CPUs, the
//! thread every packet waits for. Here a second thread walks the whole
//! mapping with a [`Walker`] cloned from the capture thread's, asks for the
//! lines ahead of itself, and sends the steps in batches. The capture thread
//! takes them in file order instead of parsing: it no longer reads the file
//! at all unless something (steering, a filter) looks at a packet's bytes.
//!
//! Contract:
//! - The steps are exactly the ones the capture thread's walker would have
//!   given for the same bytes: the same walker state, the same bytes, and a
//!   record's ranges are relative to its own start. What differs is where a
//!   buffer ends: the walking thread sees the file whole (`eof`), the capture
//!   thread one window of the mapping at a time. So [`PreWalk::next`] answers
//!   [`Step::Need`] where the next record does not fit what the capture
//!   thread holds (or its input has not yet seen its end), and gives the
//!   record once it does: the capture thread's walk of windows, records and
//!   refills stays as it was.
//! - An error ends the walk and is handed over in its place, after every step
//!   before it; so is the end.
//! - Dropping the [`PreWalk`] stops the thread and joins it.

use super::mapped::{FileBytes, LINE, PREFETCH_AHEAD};
use crate::pool::prefetch;
use crate::profile::{Profiler, Stage};
use crate::tracefile::{FormatError, Record, Step, Walker};
use nix::sched::CpuSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

/// What the walker gives for one record or block.
type Item = Result<Step, FormatError>;
/// Records sent at once: one channel message per batch, not per record.
const BATCH: usize = 4096;
/// Batches on their way: how far the walking thread may run ahead (about
/// 32,000 records, some 20 MiB of a trace of 600-byte packets).
const IN_FLIGHT: usize = 8;

/// Records in file order, then what ended the batch early when something
/// else came (a block without a packet, the end, an error).
struct Batch {
    records: Vec<Record>,
    then: Option<Item>,
}

/// The capture thread's end of the walk.
pub(super) struct PreWalk {
    rx: Option<Receiver<Batch>>,
    records: std::vec::IntoIter<Record>,
    then: Option<Item>,
    /// A step taken off a batch that did not fit the capture thread's buffer yet.
    peeked: Option<Item>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PreWalk {
    /// Walk `file` from `offset`, where `walker` stands, on a thread that may
    /// run on `cpus`; a profiled run gets its CPU time as it ends.
    pub(super) fn start(
        walker: Walker,
        file: FileBytes,
        offset: u64,
        cpus: Option<CpuSet>,
        profiler: Option<Arc<Profiler>>,
    ) -> std::io::Result<PreWalk> {
        let (tx, rx) = sync_channel::<Batch>(IN_FLIGHT);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = super::spawn_helper("weir-walk", cpus, profiler, "walk", Stage::PreWalk, move || {
            walk(walker, file.bytes(), offset, &stopped, |batch| tx.send(batch).is_ok());
        })?;
        Ok(PreWalk::over(rx, stop, Some(thread)))
    }

    fn over(rx: Receiver<Batch>, stop: Arc<AtomicBool>, thread: Option<JoinHandle<()>>) -> PreWalk {
        PreWalk { rx: Some(rx), records: Vec::new().into_iter(), then: None, peeked: None, stop, thread }
    }

    /// The next step for the capture thread, which holds `held` bytes from
    /// where it stands, and has seen its input's end when `eof`.
    #[inline]
    pub(super) fn next(&mut self, held: usize, eof: bool) -> Item {
        let item = match self.peeked.take() {
            Some(item) => item,
            None => self.take(),
        };
        let need = match &item {
            Ok(Step::Packet(r)) if r.consumed > held => Some(r.consumed),
            Ok(Step::Skip { consumed } | Step::Header { consumed }) if *consumed > held => Some(*consumed),
            // The input reaches its own end (and checks the file's size there) first.
            Ok(Step::End) if !eof || held > 0 => Some(held + 1),
            _ => None,
        };
        match need {
            Some(need) => {
                self.peeked = Some(item);
                Ok(Step::Need { need })
            }
            None => item,
        }
    }

    #[inline]
    fn take(&mut self) -> Item {
        loop {
            if let Some(r) = self.records.next() {
                return Ok(Step::Packet(r));
            }
            if let Some(then) = self.then.take() {
                return then;
            }
            // The thread ends only after sending an error or the end (the
            // walker never panics; see its contract). Were it gone without
            // either, ending here would deliver part of the trace as if it
            // were whole: the capture thread's panic is reported as an error.
            let Some(b) = self.rx.as_ref().and_then(|rx| rx.recv().ok()) else {
                panic!("the thread walking the trace ended before its end or an error")
            };
            self.records = b.records.into_iter();
            self.then = b.then;
        }
    }
}

impl Drop for PreWalk {
    fn drop(&mut self) {
        // Relaxed: a flag the thread polls between records; the channel's
        // closing (below) wakes it if it waits to send.
        self.stop.store(true, Ordering::Relaxed);
        self.rx = None;
        if let Some(t) = self.thread.take() {
            // A panic there would be a bug of its own; the run is over either way.
            let _ = t.join();
        }
    }
}

/// The walking thread's loop: every step from `offset` to the end or the
/// first error, in batches handed to `send` (false: nobody takes them).
fn walk(mut walker: Walker, bytes: &[u8], offset: u64, stop: &AtomicBool, mut send: impl FnMut(Batch) -> bool) {
    let Ok(mut at) = usize::try_from(offset) else { return };
    let mut asked = at;
    let mut records = Vec::with_capacity(BATCH);
    // Relaxed: see Drop.
    while !stop.load(Ordering::Relaxed) {
        // Every line: the next header may be in any of them.
        let until = at.saturating_add(PREFETCH_AHEAD as usize).min(bytes.len());
        while asked < until {
            if let Some(line) = bytes.get(asked..) {
                prefetch::hint(line.as_ptr());
            }
            asked += LINE as usize;
        }
        let rest = bytes.get(at..).unwrap_or(&[]);
        let (then, last) = match walker.next(rest, at as u64, true) {
            Ok(Step::Packet(r)) => {
                at += r.consumed;
                records.push(r);
                if records.len() < BATCH {
                    continue;
                }
                (None, false)
            }
            Ok(step @ (Step::Skip { consumed } | Step::Header { consumed })) => {
                at += consumed;
                (Some(Ok(step)), false)
            }
            // With the whole file at hand the walker never needs more: the
            // end, rather than a spin.
            Ok(Step::Need { .. }) => (Some(Ok(Step::End)), true),
            end @ (Ok(Step::End) | Err(_)) => (Some(end), true),
        };
        let full = std::mem::replace(&mut records, Vec::with_capacity(BATCH));
        if !send(Batch { records: full, then }) || last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The steps a capture thread takes from `next`, walking `bytes` in
    /// windows of `window` bytes as the input does (a refill where a step
    /// asks for more), each with the offset it was taken at.
    fn capture_like(bytes: &[u8], window: usize, mut next: impl FnMut(&[u8], u64, bool) -> Item) -> Vec<(u64, Item)> {
        let (mut at, mut end, mut out) = (0usize, window.min(bytes.len()), Vec::new());
        for _ in 0..1_000_000 {
            let eof = end == bytes.len();
            let step = next(&bytes[at..end], at as u64, eof);
            match &step {
                Ok(Step::Need { need }) => {
                    assert!(!eof, "asked for more at the end");
                    assert!(*need > end - at, "asked for no more than it held");
                    end = (at + need).max(end + window).min(bytes.len());
                    continue;
                }
                Ok(Step::Packet(r)) => at += r.consumed,
                Ok(Step::Skip { consumed } | Step::Header { consumed }) => at += consumed,
                _ => {}
            }
            let last = matches!(step, Ok(Step::End) | Err(_));
            out.push((at as u64, step));
            if last {
                return out;
            }
        }
        panic!("no end");
    }

    /// The same, with the header read by a walker and every later step taken
    /// from a walk of the whole of `bytes` done beforehand in batches.
    fn with_prewalk(bytes: &[u8], window: usize) -> Vec<(u64, Item)> {
        let mut walker = Walker::new();
        let mut pre: Option<PreWalk> = None;
        capture_like(bytes, window, |buf, offset, eof| {
            if let Some(p) = &mut pre {
                return p.next(buf.len(), eof);
            }
            if walker.header().is_some() {
                let (tx, rx) = std::sync::mpsc::channel();
                walk(walker.clone(), bytes, offset, &AtomicBool::new(false), |b| tx.send(b).is_ok());
                let p = pre.insert(PreWalk::over(rx, Arc::new(AtomicBool::new(false)), None));
                return p.next(buf.len(), eof);
            }
            walker.next(buf, offset, eof)
        })
    }

    /// A pcap file of records of the captured lengths given (`u32::MAX`
    /// marks a record whose length field is past any limit), cut `cut` bytes
    /// before its end.
    fn pcap(caplens: &[u32], cut: usize) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        f.extend_from_slice(&2u16.to_le_bytes());
        f.extend_from_slice(&4u16.to_le_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        for (i, &c) in caplens.iter().enumerate() {
            f.extend_from_slice(&(i as u32).to_le_bytes());
            f.extend_from_slice(&(i as u32 * 7 % 1_000_000).to_le_bytes());
            f.extend_from_slice(&c.to_le_bytes());
            f.extend_from_slice(&c.saturating_add(4).to_le_bytes());
            if c != u32::MAX {
                f.extend((0..c).map(|b| (b as u8) ^ (i as u8)));
            }
        }
        f.truncate(f.len().saturating_sub(cut));
        f
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Whatever the windows, the records, ends and errors the capture
        /// thread takes are the walker's own, in the same order.
        #[test]
        fn the_steps_taken_are_the_walkers(
            caplens in prop::collection::vec(prop_oneof![8 => 0u32..1600, 1 => 1600u32..9000, 1 => Just(u32::MAX)], 0..400),
            cut in prop_oneof![3 => Just(0usize), 1 => 0usize..40],
            window in prop_oneof![Just(4096usize), 64usize..3000],
        ) {
            let bytes = pcap(&caplens, cut);
            let want = capture_like(&bytes, window, {
                let mut w = Walker::new();
                move |buf, offset, eof| w.next(buf, offset, eof)
            });
            prop_assert_eq!(with_prewalk(&bytes, window), want);
        }
    }

    /// The corpus's pcapng traces too (sections, interfaces, options).
    #[test]
    #[ignore = "needs the corpus in ../shared/corpus"]
    fn pcapng_steps_are_the_walkers() {
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
        let mut seen = 0;
        for entry in walkdir(&corpus) {
            let Ok(bytes) = std::fs::read(&entry) else { continue };
            if bytes.len() > 4 << 20 || !bytes.starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]) {
                continue;
            }
            seen += 1;
            for window in [256, 4096] {
                let want = capture_like(&bytes, window, {
                    let mut w = Walker::new();
                    move |buf, offset, eof| w.next(buf, offset, eof)
                });
                assert_eq!(with_prewalk(&bytes, window), want, "{}", entry.display());
            }
        }
        assert!(seen > 0, "no pcapng trace under {}", corpus.display());
    }

    fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walkdir(&p));
            } else {
                out.push(p);
            }
        }
        out
    }
}
