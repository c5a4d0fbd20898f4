//! Fixed-position fields of file headers, record headers and blocks.
//!
//! A header is checked for length once, when [`Fixed::new`] takes it as a
//! `&[u8; N]`; every field read after that names its position as a constant
//! that is checked against `N` at compile time, so no accessor can go out of
//! bounds or panic. Reads honour the byte order of the file or section.

/// Byte order of a pcap file or of a pcapng section.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    /// This machine's order: a file in the other one is "swapped" to libpcap.
    pub(super) fn is_native(self) -> bool {
        (self == ByteOrder::Little) == cfg!(target_endian = "little")
    }

    #[inline(always)]
    pub(super) fn u16(self, b: [u8; 2]) -> u16 {
        match self {
            ByteOrder::Little => u16::from_le_bytes(b),
            ByteOrder::Big => u16::from_be_bytes(b),
        }
    }

    #[inline(always)]
    pub(super) fn u32(self, b: [u8; 4]) -> u32 {
        match self {
            ByteOrder::Little => u32::from_le_bytes(b),
            ByteOrder::Big => u32::from_be_bytes(b),
        }
    }

    #[inline(always)]
    pub(super) fn u64(self, b: [u8; 8]) -> u64 {
        match self {
            ByteOrder::Little => u64::from_le_bytes(b),
            ByteOrder::Big => u64::from_be_bytes(b),
        }
    }
}

/// The first `N` bytes of a buffer, known to be present, read in one byte order.
#[derive(Copy, Clone)]
pub(super) struct Fixed<'a, const N: usize> {
    bytes: &'a [u8; N],
    order: ByteOrder,
}

impl<'a, const N: usize> Fixed<'a, N> {
    /// `None` when `buf` is shorter than `N`: the one length check.
    #[inline(always)]
    pub(super) fn new(buf: &'a [u8], order: ByteOrder) -> Option<Self> {
        buf.first_chunk::<N>().map(|bytes| Fixed { bytes, order })
    }

    #[inline(always)]
    pub(super) fn u16<const AT: usize>(self) -> u16 {
        const { assert!(AT + 2 <= N, "field lies beyond the fixed part") };
        self.order.u16([self.bytes[AT], self.bytes[AT + 1]])
    }

    #[inline(always)]
    pub(super) fn u32<const AT: usize>(self) -> u32 {
        const { assert!(AT + 4 <= N, "field lies beyond the fixed part") };
        let b = self.bytes;
        self.order.u32([b[AT], b[AT + 1], b[AT + 2], b[AT + 3]])
    }
}
