//! A trace file as a multi-queue source.
//!
//! One capture unit reads the file sequentially and plays the NIC: a symmetric
//! Toeplitz RSS hash picks each packet's queue, the filter runs, and the packet
//! goes into a cell of that queue's pool. Queues outside the opened range are
//! not received, as when only some of a NIC's queues are opened.
//!
//! The file is `read()` straight into blocks of a [`BlockArena`] (read(), not
//! mmap: measured here, mapping a multi-GiB page-cached file costs more in
//! page-table work than the kernel's copy). At top speed cells point into those
//! blocks, so the kernel's copy is the only one; a block is reused once every
//! chunk holding its packets is recycled, and the reader waits for that rather
//! than drop. Paced, the reader behaves like a NIC: packets are copied into the
//! queue's own cells, so a stalled queue can never hold memory another queue
//! needs, and a packet that finds no free cell when it is due is a capture drop.
//!
//! A malformed record ends the run with an error naming the file and byte
//! offset, after every packet before it was captured.

use super::format::{Step, TraceHeader, Walker, MAX_RECORD_BYTES};
use crate::engine::{CaptureUnit, Control, Progress, SourceError, SourceInfo, StopReason};
use crate::filter::Filter;
use crate::pool::{BlockArena, BlockRef, CaptureSide, NoCell};
use crate::rss::Rss;
use crate::source::pacing::{self, Pacer};
use crate::source::{CaptureOptions, QueueRange, Source};
use crate::QueueId;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Block size: large enough to amortize the read() call, small enough to stay in L2.
const BLOCK_BYTES: usize = 256 * 1024;
/// Blocks per trace: how far the reader may run ahead of the slowest worker.
const BLOCKS: usize = 64;
/// Longest a waiting reader goes without checking for a stop request.
const WAIT_SLICE: Duration = Duration::from_millis(50);
/// How long to wait on one queue's recycle queue before looking at the next.
const BLOCK_WAIT: Duration = Duration::from_millis(1);
/// A paced wait longer than this publishes partly filled chunks first, so the
/// worker is not left waiting for packets that already arrived.
const FLUSH_BEFORE_WAIT: Duration = Duration::from_millis(1);

/// Where the unconsumed bytes are.
enum Buf {
    /// Nothing read yet.
    Empty,
    Block(BlockRef),
    /// A record larger than a block (a huge pcapng block): read aside, copied out.
    Big(Vec<u8>),
}

impl Buf {
    fn bytes(&self) -> &[u8] {
        match self {
            Buf::Empty => &[],
            Buf::Block(b) => b.bytes(),
            Buf::Big(v) => v,
        }
    }
}

/// The bytes of a trace, from a file or standard input.
struct Input {
    file: File,
    /// What to call it in messages.
    label: String,
    arena: Arc<BlockArena>,
    buf: Buf,
    /// Unconsumed bytes are `buf[pos..len]`; `buf[0]` is at file offset `base`.
    pos: usize,
    len: usize,
    base: u64,
    eof: bool,
}

impl Input {
    fn open(path: Option<&Path>) -> Result<(Input, Option<u64>), SourceError> {
        let (label, file) = match path {
            Some(p) => {
                let f = File::open(p).map_err(|source| SourceError::Io { what: p.display().to_string(), source })?;
                (p.display().to_string(), f)
            }
            None => {
                let f = File::open("/dev/stdin").map_err(|source| SourceError::Io { what: "stdin".into(), source })?;
                ("stdin".to_string(), f)
            }
        };
        let meta = file.metadata().map_err(|source| SourceError::Io { what: label.clone(), source })?;
        if meta.is_dir() {
            return Err(SourceError::Invalid(format!("{label}: is a directory, not a trace file")));
        }
        let size = meta.is_file().then_some(meta.len());
        let arena = BlockArena::new(BLOCK_BYTES, BLOCKS);
        let input = Input { file, label, arena, buf: Buf::Empty, pos: 0, len: 0, base: 0, eof: false };
        Ok((input, size))
    }

    fn unread(&self) -> &[u8] {
        &self.buf.bytes()[self.pos..self.len]
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// The block the unconsumed bytes are in, if they are in one.
    fn block(&self) -> Option<&BlockRef> {
        match &self.buf {
            Buf::Block(b) => Some(b),
            _ => None,
        }
    }

    /// Make at least `need` unconsumed bytes available, or reach the end of input.
    /// The unconsumed tail moves to a fresh block (or, past a block's size, to a
    /// private buffer); `sides` are flushed and drained while waiting for a block.
    /// Returns false if a stop was requested while waiting.
    fn refill(&mut self, need: usize, sides: &mut [CaptureSide], ctl: &Control) -> Result<bool, SourceError> {
        debug_assert!(need <= MAX_RECORD_BYTES);
        let carry = self.len - self.pos;
        let next = if need <= BLOCK_BYTES {
            let Some(mut block) = self.free_block(sides, ctl) else { return Ok(false) };
            let dst = block.bytes();
            dst[..carry].copy_from_slice(self.unread());
            let len = self.fill(dst, carry, need)?;
            (Buf::Block(block.freeze()), len)
        } else {
            let mut big = vec![0; need.next_power_of_two().min(MAX_RECORD_BYTES)];
            big[..carry].copy_from_slice(self.unread());
            let len = self.fill(&mut big, carry, need)?;
            (Buf::Big(big), len)
        };
        // The old buffer (and the block it held) goes; its consumed bytes advance the offset.
        self.base += self.pos as u64;
        (self.buf, self.len, self.pos) = (next.0, next.1, 0);
        Ok(true)
    }

    /// read() into `dst` after its first `carry` bytes until `need` bytes are
    /// there or the input ends. Returns how many bytes `dst` now holds.
    fn fill(&mut self, dst: &mut [u8], carry: usize, need: usize) -> Result<usize, SourceError> {
        let mut len = carry;
        while len < need.max(1) && !self.eof {
            match self.file.read(&mut dst[len..]) {
                Ok(0) => self.eof = true,
                Ok(n) => len += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    let at = self.base + (self.pos + len) as u64;
                    return Err(SourceError::Io { what: format!("{} at byte offset {at}", self.label), source });
                }
            }
        }
        Ok(len)
    }

    /// A block to read into: free ones first; otherwise publish what the queues
    /// hold and wait for their workers to recycle. `None` if a stop came first.
    fn free_block(&self, sides: &mut [CaptureSide], ctl: &Control) -> Option<crate::pool::BlockMut> {
        if let Some(b) = self.arena.acquire() {
            return Some(b);
        }
        sides.iter_mut().for_each(CaptureSide::flush);
        loop {
            for s in sides.iter_mut() {
                s.reclaim();
                if let Some(b) = self.arena.acquire() {
                    return Some(b);
                }
                if ctl.stop_requested() {
                    return None;
                }
                s.wait_recycled(BLOCK_WAIT);
            }
        }
    }
}

fn malformed(label: &str, e: impl std::fmt::Display) -> SourceError {
    SourceError::Malformed { what: format!("{label}: {e}") }
}

/// A trace opened and its header read, not yet capturing.
pub struct TraceSource {
    input: Input,
    walker: Walker,
    info: SourceInfo,
    queues: QueueRange,
    progress: Arc<Progress>,
}

impl TraceSource {
    /// Open a trace (`None` = standard input) and read its header.
    pub fn open(path: Option<&Path>, queues: QueueRange, name: String) -> Result<TraceSource, SourceError> {
        let (mut input, size) = Input::open(path)?;
        let mut walker = Walker::new();
        let no_stop = Control::new(None);
        let header: TraceHeader = loop {
            match walker.next(input.unread(), input.offset(), input.eof).map_err(|e| malformed(&input.label, e))? {
                Step::Header { consumed } => {
                    input.pos += consumed;
                    break walker.header().cloned().ok_or_else(|| malformed(&input.label, "the header could not be read"))?;
                }
                Step::Need { need } => {
                    input.refill(need, &mut [], &no_stop)?;
                }
                Step::Skip { consumed } => input.pos += consumed,
                Step::Packet(_) | Step::End => {
                    return Err(malformed(&input.label, "no file header before the first packet or the end"))
                }
            }
        };
        let info = SourceInfo {
            name,
            link_type: header.link_type,
            snaplen: header.snaplen,
            queues: queues.iter().map(QueueId).collect(),
        };
        Ok(TraceSource { input, walker, info, queues, progress: Progress::new(size) })
    }
}

impl Source for TraceSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    fn progress(&self) -> Option<Arc<Progress>> {
        Some(Arc::clone(&self.progress))
    }

    fn into_units(self: Box<Self>, opts: CaptureOptions) -> Result<Vec<Box<dyn CaptureUnit>>, SourceError> {
        let total = self.queues.total();
        let rss = (total > 1).then(|| Rss::new(self.info.link_type, total));
        let unit = TraceUnit {
            input: self.input,
            walker: self.walker,
            queues: self.queues,
            rss,
            filter: opts.filter,
            pacer: Pacer::new(opts.pacing),
            progress: self.progress,
        };
        Ok(vec![Box::new(unit)])
    }
}

/// The capture unit of a trace: reads it once and fills every opened queue.
struct TraceUnit {
    input: Input,
    walker: Walker,
    queues: QueueRange,
    rss: Option<Rss>,
    filter: Option<Filter>,
    pacer: Pacer,
    progress: Arc<Progress>,
}

/// What became of one packet.
enum Fate {
    Done,
    Stop,
}

impl CaptureUnit for TraceUnit {
    fn queues(&self) -> Vec<QueueId> {
        self.queues.iter().map(QueueId).collect()
    }

    fn name(&self) -> String {
        "trace".into()
    }

    fn run(mut self: Box<Self>, mut sides: Vec<CaptureSide>, ctl: &Control) -> Result<(), SourceError> {
        // slot[q] = index in `sides` of queue q, for every queue of the split.
        let mut slot = vec![None; usize::from(self.queues.total())];
        for (i, s) in sides.iter().enumerate() {
            slot[usize::from(s.queue().0)] = Some(i);
        }
        let result = self.capture(&mut sides, &slot, ctl);
        for s in &mut sides {
            s.flush();
        }
        self.progress.set_done(self.input.offset());
        result
    }
}

impl TraceUnit {
    fn capture(&mut self, sides: &mut [CaptureSide], slot: &[Option<usize>], ctl: &Control) -> Result<(), SourceError> {
        let paced = self.pacer.is_paced();
        loop {
            if ctl.stop_requested() {
                return Ok(());
            }
            let step = self
                .walker
                .next(self.input.unread(), self.input.offset(), self.input.eof)
                .map_err(|e| malformed(&self.input.label, e))?;
            match step {
                Step::Packet(rec) => {
                    let start = self.input.pos;
                    self.input.pos += rec.consumed;
                    let range = start + rec.data.start..start + rec.data.end;
                    let data = &self.input.buf.bytes()[range.clone()];
                    // Every packet of the trace advances the schedule, ours or not.
                    let due = self.pacer.due(rec.ts_ns, rec.wire_len);
                    let queue = match &self.rss {
                        Some(rss) => usize::from(rss.queue(data).0),
                        None => usize::from(self.queues.first()),
                    };
                    let Some(i) = slot[queue] else { continue };
                    if let Some(due) = due {
                        if pacing::until(due) > FLUSH_BEFORE_WAIT {
                            sides.iter_mut().for_each(CaptureSide::flush);
                        }
                        if !wait_or_stop(due, ctl) {
                            return Ok(());
                        }
                    }
                    let pkt = Pkt { data, range, wire_len: rec.wire_len, ts_ns: rec.ts_ns, paced };
                    let block = if paced { None } else { self.input.block() };
                    if let Fate::Stop = capture_one(&mut sides[i], &pkt, block, self.filter.as_ref(), ctl) {
                        return Ok(());
                    }
                }
                Step::Skip { consumed } | Step::Header { consumed } => self.input.pos += consumed,
                Step::Need { need } => {
                    for s in sides.iter_mut() {
                        s.publish_stats();
                    }
                    self.progress.set_done(self.input.offset());
                    if !self.input.refill(need, sides, ctl)? {
                        return Ok(());
                    }
                }
                Step::End => return Ok(()),
            }
        }
    }
}

/// Wait until `due`, waking every [`WAIT_SLICE`] to see a stop request.
/// Returns false if a stop was requested.
fn wait_or_stop(due: std::time::Instant, ctl: &Control) -> bool {
    loop {
        if ctl.stop_requested() {
            return false;
        }
        let left = pacing::until(due);
        if left <= WAIT_SLICE {
            pacing::wait_until(due);
            return true;
        }
        std::thread::sleep(WAIT_SLICE);
    }
}

/// One packet: its bytes, where they are in the input buffer, and whether it
/// arrived on a schedule (then it is dropped, not waited for, without a cell).
struct Pkt<'a> {
    data: &'a [u8],
    range: std::ops::Range<usize>,
    wire_len: u32,
    ts_ns: u64,
    paced: bool,
}

/// Filter, take from the packet budget and capture one packet into `side`:
/// by reference into `block` when given, by copy otherwise.
#[inline]
fn capture_one(side: &mut CaptureSide, p: &Pkt<'_>, block: Option<&BlockRef>, filter: Option<&Filter>, ctl: &Control) -> Fate {
    if let Some(f) = filter {
        if !f.matches(p.data, p.wire_len) {
            side.drop_filtered(p.wire_len);
            return Fate::Done;
        }
    }
    if !ctl.take_budget() {
        ctl.request_stop(StopReason::PacketLimit);
        return Fate::Stop;
    }
    loop {
        let pushed = match block {
            Some(b) => side.push_ref(b, p.range.clone(), p.wire_len, p.ts_ns),
            None => side.push_copy(p.data, p.wire_len, p.ts_ns),
        };
        match pushed {
            Ok(()) => return Fate::Done,
            Err(NoCell) if p.paced => {
                side.drop_capture(p.wire_len);
                return Fate::Done;
            }
            Err(NoCell) => {
                if ctl.stop_requested() {
                    return Fate::Stop;
                }
                side.wait_for_cell(WAIT_SLICE);
            }
        }
    }
}

/// Open a trace source by path (`None` = stdin).
pub fn open(path: Option<&PathBuf>, queues: QueueRange, name: String) -> Result<Box<dyn Source>, SourceError> {
    Ok(Box::new(TraceSource::open(path.map(PathBuf::as_path), queues, name)?))
}
