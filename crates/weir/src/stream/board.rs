//! A stream layer's counters for readers on other threads (an exporter's
//! scrape, `weir --metrics`), published by the worker only when asked.
//!
//! The layer's own [`StreamStats`] are plain integers of its worker. Copying
//! them into atomics on every packet would cost the data path for readers
//! that mostly are not there, so a reader asks instead: it raises `asked`,
//! and the worker, which looks at that word once per run of packets and on
//! every idle tick (a load of a line it otherwise has to itself), copies its
//! counters onto the board and answers with the number it served. The reader
//! waits a bounded time for the answer and reads what is on the board either
//! way. At its end the layer publishes once more and says it is done, so a
//! reader after the run gets the final counts without waiting.
//!
//! Each counter is read as one word; the counters of one board are not read
//! at one instant, as with [`Snapshot`](crate::stats::Snapshot)'s queues.

use super::StreamStats;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Every field of [`StreamStats`], once, as the path to it: `publish` and
/// `read` are made from this list, so the two cannot disagree.
macro_rules! stream_fields {
    ($m:ident) => {
        $m!(
            packets,
            not_ip,
            malformed,
            fragments,
            untracked,
            to_stream,
            discarded_packets,
            dropped_packets,
            streams,
            connections,
            handed_in,
            closed_fin,
            closed_rst,
            closed_idle,
            evicted,
            closed_end,
            closed_reused,
            active_records,
            bytes,
            delivered,
            gap,
            duplicate,
            discarded,
            dropped,
            refused,
            pieces,
            memory_peak,
            fragment.fragments,
            fragment.datagrams,
            fragment.datagrams_reassembled,
            fragment.fragments_reassembled,
            fragment.datagrams_held,
            fragment.fragments_held,
            fragment.bytes_held,
            fragment.datagrams_timed_out,
            fragment.fragments_timed_out,
            fragment.datagrams_evicted,
            fragment.fragments_evicted,
            fragment.datagrams_over_memory,
            fragment.fragments_over_memory,
            fragment.datagrams_too_big,
            fragment.fragments_too_big,
            fragment.datagrams_overlapping,
            fragment.fragments_overlapping,
            fragment.malformed,
            fragment.inconsistent,
            fragment.overlap_conflicts,
            kernel.installed,
            kernel.full,
            kernel.failed,
            kernel.taken,
            kernel.evicted,
            kernel.displaced,
            kernel.lost,
            kernel.refreshed,
            kernel.packets,
            kernel.after_end,
            kernel.octets
        )
    };
}

macro_rules! count_fields {
    ($($($f:ident).+),*) => { [$(stringify!($($f).+)),*].len() };
}

/// Words on the board besides the stats: connections in the table, arena bytes in use.
const EXTRA: usize = 2;
const WORDS: usize = stream_fields!(count_fields) + EXTRA;

/// One queue's stream layer as last published.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamsNow {
    /// The layer's counters ([`Streams::stats`](super::Streams::stats)).
    pub stats: StreamStats,
    /// Connections in its table.
    pub connections_open: u64,
    /// Bytes of its arena in use (data held for pieces and out-of-order segments).
    pub memory_bytes: u64,
}

/// What one layer and its readers share.
#[derive(Debug)]
pub(crate) struct Board {
    words: [AtomicU64; WORDS],
    /// Raised by a reader for each request.
    asked: AtomicU64,
    /// The request the words answer.
    answered: AtomicU64,
    /// The layer finished: the words are final.
    done: AtomicBool,
}

impl Default for Board {
    fn default() -> Self {
        Board {
            words: std::array::from_fn(|_| AtomicU64::new(0)),
            asked: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            done: AtomicBool::new(false),
        }
    }
}

impl Board {
    /// The request to answer, if one is waiting that `served` does not answer
    /// yet: the worker's check, one load.
    #[inline]
    pub(crate) fn wanted(&self, served: u64) -> Option<u64> {
        // Relaxed: only a number to compare; the words go out with the Release in `publish`.
        let asked = self.asked.load(Ordering::Relaxed);
        (asked != served).then_some(asked)
    }

    /// Copy `now` onto the board and answer request `answer`.
    pub(crate) fn publish(&self, now: &StreamsNow, answer: u64) {
        let mut i = 0;
        macro_rules! store {
            ($($($f:ident).+),*) => {$(
                // Relaxed: the Release store of `answered` below publishes them.
                self.words[i].store(now.stats.$($f).+, Ordering::Relaxed);
                i += 1;
            )*};
        }
        stream_fields!(store);
        self.words[i].store(now.connections_open, Ordering::Relaxed);
        self.words[i + 1].store(now.memory_bytes, Ordering::Relaxed);
        // Release: a reader that sees the answer sees the words stored before it.
        self.answered.store(answer, Ordering::Release);
    }

    /// Publish the final counts: readers stop asking.
    pub(crate) fn publish_final(&self, now: &StreamsNow) {
        let asked = self.asked.load(Ordering::Relaxed);
        self.publish(now, asked);
        // Release: the final words are visible to a reader that sees `done`.
        self.done.store(true, Ordering::Release);
    }

    /// Ask the worker to publish.
    pub(crate) fn ask(&self) -> u64 {
        // Relaxed: the request is a number; the answer's Release/Acquire carries the words.
        self.asked.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether request `n` (or a later one) is answered, or the layer is done.
    pub(crate) fn answered(&self, n: u64) -> bool {
        // Acquire: pairs with the Release stores in `publish` and `publish_final`.
        self.done.load(Ordering::Acquire) || self.answered.load(Ordering::Acquire) >= n
    }

    /// What is on the board now.
    pub(crate) fn read(&self) -> StreamsNow {
        // Acquire: at least what the last answer published.
        self.answered.load(Ordering::Acquire);
        let mut s = StreamStats::default();
        let mut i = 0;
        macro_rules! load {
            ($($($f:ident).+),*) => {$(
                // Relaxed: ordered by the Acquire load above.
                s.$($f).+ = self.words[i].load(Ordering::Relaxed);
                i += 1;
            )*};
        }
        stream_fields!(load);
        StreamsNow {
            stats: s,
            connections_open: self.words[i].load(Ordering::Relaxed),
            memory_bytes: self.words[i + 1].load(Ordering::Relaxed),
        }
    }
}

/// Ask every board, wait up to `wait` for the answers (a worker answers
/// between runs of packets, or within its idle tick when the queue is quiet),
/// and read them all, answered or not.
pub(crate) fn read_all(boards: &[std::sync::Arc<Board>], wait: Duration) -> Vec<StreamsNow> {
    let asked: Vec<u64> = boards.iter().map(|b| b.ask()).collect();
    let until = Instant::now() + wait;
    while !boards.iter().zip(&asked).all(|(b, &n)| b.answered(n)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
    boards.iter().map(|b| b.read()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{fragment::FragCounters, KernelStats};

    /// Every field set, by name, so a field added to the stats and not to
    /// `stream_fields!` fails to compile here first, then to round-trip.
    fn numbered() -> StreamStats {
        let mut n = 0u64;
        let mut next = || {
            n += 1;
            n
        };
        StreamStats {
            packets: next(),
            not_ip: next(),
            malformed: next(),
            fragments: next(),
            untracked: next(),
            to_stream: next(),
            discarded_packets: next(),
            dropped_packets: next(),
            streams: next(),
            connections: next(),
            handed_in: next(),
            closed_fin: next(),
            closed_rst: next(),
            closed_idle: next(),
            evicted: next(),
            closed_end: next(),
            closed_reused: next(),
            active_records: next(),
            bytes: next(),
            delivered: next(),
            gap: next(),
            duplicate: next(),
            discarded: next(),
            dropped: next(),
            refused: next(),
            pieces: next(),
            memory_peak: next(),
            fragment: FragCounters {
                fragments: next(),
                datagrams: next(),
                datagrams_reassembled: next(),
                fragments_reassembled: next(),
                datagrams_held: next(),
                fragments_held: next(),
                bytes_held: next(),
                datagrams_timed_out: next(),
                fragments_timed_out: next(),
                datagrams_evicted: next(),
                fragments_evicted: next(),
                datagrams_over_memory: next(),
                fragments_over_memory: next(),
                datagrams_too_big: next(),
                fragments_too_big: next(),
                datagrams_overlapping: next(),
                fragments_overlapping: next(),
                malformed: next(),
                inconsistent: next(),
                overlap_conflicts: next(),
            },
            kernel: KernelStats {
                installed: next(),
                full: next(),
                failed: next(),
                taken: next(),
                evicted: next(),
                displaced: next(),
                lost: next(),
                refreshed: next(),
                packets: next(),
                after_end: next(),
                octets: next(),
            },
        }
    }

    #[test]
    fn every_counter_round_trips() {
        let b = Board::default();
        let now = StreamsNow { stats: numbered(), connections_open: 1000, memory_bytes: 2000 };
        let n = b.ask();
        assert!(!b.answered(n));
        assert_eq!(b.wanted(0), Some(n));
        b.publish(&now, n);
        assert!(b.answered(n));
        assert_eq!(b.wanted(n), None, "answered: nothing more is wanted");
        assert_eq!(b.read(), now);
    }

    #[test]
    fn a_finished_layer_answers_every_request() {
        let b = std::sync::Arc::new(Board::default());
        let now = StreamsNow { stats: numbered(), connections_open: 0, memory_bytes: 0 };
        b.publish_final(&now);
        let t = Instant::now();
        let read = read_all(&[std::sync::Arc::clone(&b)], Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(1), "no wait for a layer that is done");
        assert_eq!(read, vec![now]);
    }
}
