//! Records that must come out sorted at the end of a run, kept in bounded memory.
//!
//! Contract: a [`Spill`] keeps up to `capacity` records in memory; when that is
//! full they are sorted and written to an anonymous temporary file (deleted when
//! the process ends) as one sorted run, and memory is reused. [`merge`] reads
//! the runs of any number of spills back with the records still in memory, in
//! one sorted stream, holding a small buffer per run. So memory stays bounded
//! however long the run, and what is written at the end is the same as sorting
//! everything in memory would give. Records have a fixed size on disk
//! ([`Fixed`]); a failed write is returned, never dropped.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

/// A record of fixed size on disk, in its own total order.
pub trait Fixed: Ord + Sized {
    const SIZE: usize;
    fn put(&self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
}

/// One sorted run in the file: where it starts and how many records it holds.
#[derive(Copy, Clone, Debug)]
struct Run {
    offset: u64,
    records: u64,
}

pub struct Spill<T> {
    buf: Vec<T>,
    capacity: usize,
    file: Option<File>,
    runs: Vec<Run>,
    end: u64,
    scratch: Vec<u8>,
}

/// Records read per run at a time while merging.
const READ_RECORDS: usize = 1024;

impl<T: Fixed> Spill<T> {
    pub fn new(capacity: usize) -> Spill<T> {
        Spill { buf: Vec::with_capacity(capacity), capacity: capacity.max(1), file: None, runs: Vec::new(), end: 0, scratch: Vec::new() }
    }

    /// Bytes of memory the spill holds at most.
    pub fn memory_bytes(&self) -> usize {
        self.capacity * (std::mem::size_of::<T>() + T::SIZE)
    }

    pub fn push(&mut self, r: T) -> io::Result<()> {
        self.buf.push(r);
        if self.buf.len() >= self.capacity {
            self.write_run()?;
        }
        Ok(())
    }

    /// Records written to disk so far.
    pub fn spilled(&self) -> u64 {
        self.runs.iter().map(|r| r.records).sum()
    }

    fn write_run(&mut self) -> io::Result<()> {
        self.buf.sort_unstable();
        self.scratch.clear();
        for r in &self.buf {
            r.put(&mut self.scratch);
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(tempfile::tempfile()?),
        };
        file.write_all(&self.scratch)?;
        self.runs.push(Run { offset: self.end, records: self.buf.len() as u64 });
        self.end += self.scratch.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

/// Where merged records come from: a run on disk, or what a spill still held.
enum Source<T> {
    Disk { file: File, next: u64, left: u64, block: Vec<u8>, at: usize },
    Memory(std::vec::IntoIter<T>),
}

impl<T: Fixed> Source<T> {
    fn next(&mut self) -> io::Result<Option<T>> {
        match self {
            Source::Memory(it) => Ok(it.next()),
            Source::Disk { file, next, left, block, at } => {
                if *at == block.len() {
                    if *left == 0 {
                        return Ok(None);
                    }
                    let n = (*left).min(READ_RECORDS as u64) as usize;
                    block.resize(n * T::SIZE, 0);
                    file.read_exact_at(block, *next)?;
                    *next += block.len() as u64;
                    *left -= n as u64;
                    *at = 0;
                }
                let r = T::get(&block[*at..*at + T::SIZE]);
                *at += T::SIZE;
                Ok(Some(r))
            }
        }
    }
}

/// Every record pushed into `spills`, in order.
pub struct Merged<T> {
    sources: Vec<Source<T>>,
    heap: BinaryHeap<Reverse<(T, usize)>>,
}

pub fn merge<T: Fixed>(spills: Vec<Spill<T>>) -> io::Result<Merged<T>> {
    let mut sources = Vec::new();
    for mut s in spills {
        if let Some(file) = &s.file {
            for run in &s.runs {
                let file = file.try_clone()?;
                sources.push(Source::Disk { file, next: run.offset, left: run.records, block: Vec::new(), at: 0 });
            }
        }
        s.buf.sort_unstable();
        sources.push(Source::Memory(std::mem::take(&mut s.buf).into_iter()));
    }
    let mut heap = BinaryHeap::with_capacity(sources.len());
    for (i, src) in sources.iter_mut().enumerate() {
        if let Some(r) = src.next()? {
            heap.push(Reverse((r, i)));
        }
    }
    Ok(Merged { sources, heap })
}

impl<T: Fixed> Iterator for Merged<T> {
    type Item = io::Result<T>;

    fn next(&mut self) -> Option<io::Result<T>> {
        let Reverse((r, i)) = self.heap.pop()?;
        match self.sources[i].next() {
            Ok(Some(n)) => self.heap.push(Reverse((n, i))),
            Ok(None) => {}
            Err(e) => return Some(Err(e)),
        }
        Some(Ok(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Fixed for u64 {
        const SIZE: usize = 8;
        fn put(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.to_le_bytes());
        }
        fn get(b: &[u8]) -> u64 {
            u64::from_le_bytes(b.try_into().unwrap())
        }
    }

    #[test]
    fn spilled_runs_and_memory_merge_into_one_sorted_stream() {
        let mut spills = Vec::new();
        let mut all = Vec::new();
        for s in 0..3u64 {
            let mut sp = Spill::new(1000);
            // Enough for several runs and a partial buffer, and more than one read block per run.
            for i in 0..4_321u64 {
                let v = (i * 7_919 + s * 104_729) % 10_007;
                sp.push(v).unwrap();
                all.push(v);
            }
            assert_eq!(sp.spilled(), 4_000);
            spills.push(sp);
        }
        all.sort_unstable();
        let got: Vec<u64> = merge(spills).unwrap().map(Result::unwrap).collect();
        assert_eq!(got, all);
    }
}
