//! Pool sizes, checked when they are made and against each other.
//!
//! Defaults are WireCAP-B-(256,128): 256 cells per chunk, 128 chunks per queue,
//! so each queue absorbs a burst of 32,768 packets before it drops. Each chunk owns
//! an arena for the bytes of its packets, by default 2 KiB per cell (a full-size
//! frame per cell, as WireCAP's cells) and never less than one largest packet.

use std::fmt;

/// Largest packet a cell can hold, in bytes: libpcap's MAXIMUM_SNAPLEN. A
/// longer packet is captured cut to this length (its wire length is kept).
pub const MAX_CAPLEN: usize = 262_144;

/// Default arena per cell: one full-size Ethernet frame, rounded up.
const DEFAULT_BYTES_PER_CELL: usize = 2048;

/// Most cells a chunk can have.
const MAX_CELLS: usize = 1 << 16;
/// Most chunks a pool can have. How much memory a pool may take is not fixed
/// here: it is checked against what is available when an engine is built
/// (see [`crate::memory`]).
const MAX_CHUNKS: usize = 1 << 20;

/// A configuration value out of range, with what was asked and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolConfigError {
    /// M, the cells per chunk asked for, is not from 1 to 65,536.
    #[error("cells per chunk (M) is {0}: must be from 1 to {MAX_CELLS}")]
    Cells(usize),
    /// R, the chunks asked for, is not from 2 to 2^20 (one chunk fills while
    /// another is read).
    #[error("chunks per queue (R) is {0}: must be from 2 to {MAX_CHUNKS}")]
    Chunks(usize),
    /// The arenas of all chunks together overflow `usize`.
    #[error("pool of {chunks} chunks x {chunk_bytes} bytes is more bytes than the address space holds")]
    TooLarge {
        /// R.
        chunks: usize,
        /// Arena bytes per chunk.
        chunk_bytes: usize,
    },
    /// Text that is not `M,R`.
    #[error("expected M,R (cells per chunk, chunks), e.g. 256,128")]
    Syntax,
}

/// M: cells per chunk.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct CellsPerChunk(usize);

impl CellsPerChunk {
    pub(crate) fn new(m: usize) -> Result<Self, PoolConfigError> {
        if (1..=MAX_CELLS).contains(&m) {
            Ok(CellsPerChunk(m))
        } else {
            Err(PoolConfigError::Cells(m))
        }
    }

    pub(crate) fn get(self) -> usize {
        self.0
    }
}

/// R: chunks per queue, from 2 to 2^20.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ChunkCount(usize);

impl ChunkCount {
    pub(crate) fn new(r: usize) -> Result<Self, PoolConfigError> {
        if (2..=MAX_CHUNKS).contains(&r) {
            Ok(ChunkCount(r))
        } else {
            Err(PoolConfigError::Chunks(r))
        }
    }

    /// R as a number.
    pub fn get(self) -> usize {
        self.0
    }
}

/// Arena bytes per chunk.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChunkBytes(usize);

impl ChunkBytes {
    /// The default for `m` cells: 2 KiB per cell, at least one largest packet.
    pub(crate) fn default_for(m: CellsPerChunk) -> Self {
        ChunkBytes((m.get() * DEFAULT_BYTES_PER_CELL).max(MAX_CAPLEN))
    }

    pub(crate) fn get(self) -> usize {
        self.0
    }
}

/// The shape of one queue's pool: M cells per chunk, R chunks, and each chunk's
/// arena for the bytes of its packets (2 KiB per cell, and at least
/// [`MAX_CAPLEN`]). The default is WireCAP's B-(256,128). Whether the memory
/// is there is checked when an engine is built, not here.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    cells: CellsPerChunk,
    chunks: ChunkCount,
    chunk_bytes: ChunkBytes,
}

impl Default for PoolConfig {
    fn default() -> Self {
        let cells = CellsPerChunk(256);
        PoolConfig { cells, chunks: ChunkCount(128), chunk_bytes: ChunkBytes::default_for(cells) }
    }
}

/// `M,R`, as the CLI's `--pool` and the libpcap library's `WEIR_POOL` take it.
impl std::str::FromStr for PoolConfig {
    type Err = PoolConfigError;

    fn from_str(s: &str) -> Result<Self, PoolConfigError> {
        let (m, r) =
            s.split_once(',').and_then(|(m, r)| Some((m.trim().parse().ok()?, r.trim().parse().ok()?))).ok_or(PoolConfigError::Syntax)?;
        PoolConfig::new(m, r)
    }
}

impl PoolConfig {
    /// M cells per chunk and R chunks, with the default arena for M.
    ///
    /// # Errors
    /// [`PoolConfigError::Cells`] or [`PoolConfigError::Chunks`] for M or R out
    /// of range; [`PoolConfigError::TooLarge`] only where `usize` has 32 bits.
    pub fn new(m: usize, r: usize) -> Result<Self, PoolConfigError> {
        let cells = CellsPerChunk::new(m)?;
        Self::with_bytes(cells, ChunkCount::new(r)?, ChunkBytes::default_for(cells))
    }

    /// Every size given; checks that the whole pool stays within bounds.
    pub(crate) fn with_bytes(cells: CellsPerChunk, chunks: ChunkCount, chunk_bytes: ChunkBytes) -> Result<Self, PoolConfigError> {
        if chunks.get().checked_mul(chunk_bytes.get()).is_none() {
            return Err(PoolConfigError::TooLarge { chunks: chunks.get(), chunk_bytes: chunk_bytes.get() });
        }
        Ok(PoolConfig { cells, chunks, chunk_bytes })
    }

    pub(crate) fn cells(&self) -> CellsPerChunk {
        self.cells
    }

    /// R: chunks per queue.
    pub fn chunks(&self) -> ChunkCount {
        self.chunks
    }

    pub(crate) fn chunk_bytes(&self) -> ChunkBytes {
        self.chunk_bytes
    }

    /// Packets one queue can hold before it drops.
    pub(crate) fn capacity(&self) -> usize {
        self.cells.get() * self.chunks.get()
    }
}

impl fmt::Display for PoolConfig {
    /// WireCAP's notation: B-(M,R).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "B-({},{})", self.cells.get(), self.chunks.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_m_comma_r() {
        let ok = |s: &str| s.parse::<PoolConfig>().map(|c| (c.cells().get(), c.chunks().get()));
        assert_eq!(ok("256,128"), Ok((256, 128)));
        assert_eq!(ok(" 64 , 4 "), Ok((64, 4)));
        for bad in ["256", "a,b", "256,", ",128", "256;128"] {
            assert_eq!(ok(bad), Err(PoolConfigError::Syntax), "{bad}");
        }
        assert_eq!(ok("0,4"), Err(PoolConfigError::Cells(0)));
    }

    #[test]
    fn table_of_configurations() {
        let cases: &[(usize, usize, Result<(), PoolConfigError>)] = &[
            (256, 128, Ok(())),
            (1, 2, Ok(())),
            (65536, 2, Ok(())),
            (0, 128, Err(PoolConfigError::Cells(0))),
            (65537, 128, Err(PoolConfigError::Cells(65537))),
            (256, 1, Err(PoolConfigError::Chunks(1))),
            (256, (1 << 20) + 1, Err(PoolConfigError::Chunks((1 << 20) + 1))),
        ];
        for (m, r, want) in cases {
            assert_eq!(PoolConfig::new(*m, *r).map(|_| ()), *want, "M={m} R={r}");
        }
    }

    #[test]
    fn arena_is_never_smaller_than_a_packet() {
        assert_eq!(ChunkBytes::default_for(CellsPerChunk(1)).get(), MAX_CAPLEN);
        assert_eq!(ChunkBytes::default_for(CellsPerChunk(256)).get(), 512 * 1024);
        let err = PoolConfig::with_bytes(CellsPerChunk(256), ChunkCount(1 << 20), ChunkBytes(usize::MAX / 2)).unwrap_err();
        assert!(matches!(err, PoolConfigError::TooLarge { .. }));
        assert!(PoolConfig::with_bytes(CellsPerChunk(256), ChunkCount(1 << 20), ChunkBytes(1 << 20)).is_ok());
    }

    #[test]
    fn displays_in_wirecap_notation() {
        assert_eq!(PoolConfig::new(256, 500).unwrap().to_string(), "B-(256,500)");
        assert_eq!(PoolConfig::default().capacity(), 32768);
    }
}
