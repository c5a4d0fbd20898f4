//! The TPACKET_V3 receive ring of an AF_PACKET socket, walked in the kernel's
//! order: [`Ring`] is the ring `sys::packet` maps, wrapped in a [`BlockArena`]
//! shared with the kernel, so cells point straight into the kernel's blocks.
//!
//! Who may touch a block. The kernel fills a block while its `block_status` is
//! `TP_STATUS_KERNEL`, then sets `TP_STATUS_USER` after a write barrier and does
//! not touch it again until user space stores `TP_STATUS_KERNEL`. [`Ring`] keeps
//! that protocol and nothing else may: it adopts blocks only in ring order (the
//! order the kernel fills them) and only once the kernel has handed them over;
//! it remembers which blocks were walked, so a walked block is never adopted
//! twice; and it hands a block back only through a [`Walked`] token (so only a
//! block it adopted) and only when [`BlockArena::is_unheld`] says no chunk
//! holds it any more.
//!
//! Nothing in this source calls [`BlockRef::bytes`]: packet headers are read,
//! and VLAN tags written back in front of the packet data, through raw pointers
//! into the part of a block that no cell covers yet, so no Rust reference ever
//! overlaps a write.

#![allow(unsafe_code)]

use crate::pool::{BlockArena, BlockId, BlockRef};
use crate::sys::packet::{
    BlockDesc, PacketSocket, Tpacket3Hdr, TPACKET3_HDRLEN, TP_STATUS_KERNEL, TP_STATUS_USER, TP_STATUS_VLAN_TPID_VALID,
    TP_STATUS_VLAN_VALID, VLAN_TAG_LEN,
};
use std::io;
use std::mem::size_of;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Ethernet: destination and source addresses, in front of where a tag goes.
const MAC_ADDRS: usize = 12;

/// A socket's TPACKET_V3 receive ring, walked in the kernel's order.
pub(crate) struct Ring {
    arena: Arc<BlockArena>,
    /// The block the kernel fills after the last one adopted.
    next: BlockId,
    /// Blocks adopted since the ring was mapped: the sequence number of the next one.
    adopted: u64,
    /// Blocks adopted and not yet given back: the kernel still shows them as
    /// TP_STATUS_USER, but their packets were taken.
    walked: Box<[bool]>,
    snaplen: u32,
    /// Put VLAN tags the kernel took out back in front of the EtherType.
    vlan: bool,
    /// The block timeout: the kernel hands a block with packets over this
    /// long after it opened it at the latest.
    timeout: Duration,
}

/// A block the kernel handed over, adopted for reading; only [`Ring::next_block`] makes one.
pub(crate) struct ReadyBlock {
    block: BlockRef,
    packets: u32,
    first: usize,
}

impl ReadyBlock {
    /// The hold that lets cells point into the block.
    pub(crate) fn block(&self) -> &BlockRef {
        &self.block
    }

    /// Packets the kernel put in the block.
    pub(crate) fn packets(&self) -> u32 {
        self.packets
    }

    /// Offset of the first packet's header in the block.
    pub(crate) fn first(&self) -> usize {
        self.first
    }
}

/// A block whose packets were all taken; it goes back to the kernel through
/// [`Ring::give_back`] once no chunk holds it. Not `Clone`: given back once.
pub(crate) struct Walked {
    id: BlockId,
    /// The address of the arena the block belongs to: an identity, so a token is
    /// only ever given back to its own ring.
    arena: usize,
}

/// One packet of a block.
pub(crate) struct Frame {
    /// Where its captured bytes are in the block.
    pub(crate) data: Range<usize>,
    pub(crate) wire_len: u32,
    pub(crate) ts_ns: u64,
    /// Offset of the next packet's header, relative to this one's.
    pub(crate) next: usize,
}

/// The kernel wrote a packet header that does not fit its block.
#[derive(Debug)]
pub(crate) struct BadFrame(pub(crate) String);

impl Ring {
    /// Set up `socket`'s receive ring of `block_count` blocks of `block_bytes`,
    /// handed over after `timeout_ms` at the latest, and map it.
    pub(crate) fn map(
        socket: &PacketSocket,
        block_bytes: u32,
        block_count: u32,
        timeout_ms: u32,
        snaplen: u32,
        vlan: bool,
    ) -> io::Result<Ring> {
        let region = socket.map_rx_ring(block_bytes, block_count, timeout_ms)?;
        // SAFETY: the region holds `block_count` blocks of `block_bytes`; the kernel
        // writes a block only while it is TP_STATUS_KERNEL, and `Ring::give_back`
        // stores that only for a block `is_unheld` reports free (see the module doc).
        let arena = unsafe { BlockArena::over_mapping(region, block_bytes as usize, block_count as usize) };
        let timeout = Duration::from_millis(u64::from(timeout_ms));
        Ok(Ring { walked: vec![false; arena.count()].into(), arena, next: 0, adopted: 0, snaplen, vlan, timeout })
    }

    fn status(&self, id: BlockId) -> &AtomicU32 {
        let at = self.arena.block_ptr(id).wrapping_add(std::mem::offset_of!(BlockDesc, block_status));
        // SAFETY: `at` is the 4-byte aligned (blocks are page aligned, the field is at
        // offset 8) `block_status` word of a block of the mapping, which lives as long
        // as `self.arena`; the kernel and we only ever access it as one 32-bit word.
        unsafe { AtomicU32::from_ptr(at.cast_mut().cast()) }
    }

    /// The `num_pkts` word of a block's descriptor.
    fn packets_in(&self, id: BlockId) -> &AtomicU32 {
        let at = self.arena.block_ptr(id).wrapping_add(std::mem::offset_of!(BlockDesc, num_pkts));
        // SAFETY: as for `status`: the 4-byte aligned `num_pkts` word of a block of
        // the mapping. The kernel writes it while it fills the block, so it is only
        // ever read here as one atomic 32-bit word.
        unsafe { AtomicU32::from_ptr(at.cast_mut().cast()) }
    }

    /// Where the kernel's filling stands, as a block sequence number: every
    /// packet already in the ring is in a block numbered below it. That is every
    /// block handed over and not adopted yet, plus the block the kernel is filling
    /// if it holds a packet. An empty block being filled is not counted: the kernel
    /// never retires an empty block, and whatever lands in it arrives after this
    /// call.
    pub(crate) fn fill_point(&self) -> u64 {
        let (ready, _) = self.scan_ahead(self.arena.count());
        self.adopted + ready as u64 + u64::from(self.filling(ready) > 0)
    }

    /// Packets in the ring not adopted yet: in blocks handed over, and in the
    /// block the kernel is filling (a hint, read while the kernel writes it).
    pub(crate) fn waiting_packets(&self) -> u64 {
        let (ready, packets) = self.scan_ahead(self.arena.count());
        packets + u64::from(self.filling(ready))
    }

    /// Packets not adopted yet in the blocks below `point`, a
    /// [`fill_point`](Self::fill_point) read earlier (the block then being
    /// filled counted as it is now, a hint while the kernel writes it).
    pub(crate) fn packets_before(&self, point: u64) -> u64 {
        let blocks = usize::try_from(point.saturating_sub(self.adopted)).unwrap_or(usize::MAX).min(self.arena.count());
        let (ready, packets) = self.scan_ahead(blocks);
        packets + if ready < blocks { u64::from(self.filling(ready)) } else { 0 }
    }

    /// How long after opening a block the kernel hands it over at the latest.
    pub(crate) fn block_timeout(&self) -> Duration {
        self.timeout
    }

    /// Packets in the block the kernel is filling, `ready` blocks after the next
    /// one to adopt; 0 when every block is handed over or the kernel is stopped
    /// at a block we still hold.
    fn filling(&self, ready: usize) -> u32 {
        let n = self.arena.count();
        let id = ((self.next as usize + ready) % n) as BlockId;
        if ready == n || self.walked[id as usize] {
            return 0;
        }
        // Relaxed: a hint about a block still the kernel's. Callers that need every
        // packet counted ordered this read after those packets were written (see `rebalance`).
        self.packets_in(id).load(Ordering::Relaxed)
    }

    /// Blocks handed over and not adopted, counted from the next one in ring
    /// order up to `most`, and the packets in them.
    fn scan_ahead(&self, most: usize) -> (usize, u64) {
        let n = self.arena.count();
        let (mut ready, mut packets) = (0, 0u64);
        while ready < most.min(n) {
            let id = ((self.next as usize + ready) % n) as BlockId;
            // Acquire: as in `next_block`, so the descriptor read below is the kernel's final one.
            if self.walked[id as usize] || self.status(id).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                break;
            }
            packets += u64::from(self.packets_in(id).load(Ordering::Relaxed));
            ready += 1;
        }
        (ready, packets)
    }

    /// Blocks adopted since the ring was mapped.
    pub(crate) fn adopted(&self) -> u64 {
        self.adopted
    }

    /// Adopt the next block in ring order if the kernel has handed it over.
    pub(crate) fn next_block(&mut self) -> Result<Option<ReadyBlock>, BadFrame> {
        let id = self.next;
        // Acquire: pairs with the kernel's write barrier before it set TP_STATUS_USER,
        // so the block's contents are visible before we read them.
        if self.walked[id as usize] || self.status(id).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return Ok(None);
        }
        // Not walked, so given back, and nothing can hold a block we gave back.
        let block = self.arena.adopt(id).ok_or_else(|| BadFrame(format!("block {id} handed over while still held")))?;
        self.walked[id as usize] = true;
        self.next = (id + 1) % self.arena.count() as BlockId;
        self.adopted += 1;
        // SAFETY: the block is ours (TP_STATUS_USER, adopted), lies in the mapping,
        // and starts with a block descriptor; read by value, unaligned-safe.
        let desc = unsafe { std::ptr::read_unaligned(self.arena.block_ptr(id).cast::<BlockDesc>()) };
        let first = desc.offset_to_first_pkt as usize;
        if desc.num_pkts > 0 && (first < size_of::<BlockDesc>() || first >= self.arena.block_bytes()) {
            return Err(BadFrame(format!("block {id}: first packet at offset {first}")));
        }
        Ok(Some(ReadyBlock { block, packets: desc.num_pkts, first }))
    }

    /// The packet whose header is at offset `at` of `block`. With VLAN reinsertion
    /// on, a tag the kernel took out is written back in front of the EtherType
    /// first, and the header rewritten to say so, so a second call (after waiting for
    /// a cell) finds the same packet.
    pub(crate) fn frame(&self, ready: &ReadyBlock, at: usize) -> Result<Frame, BadFrame> {
        let block = &ready.block;
        assert!(Arc::ptr_eq(block.arena(), &self.arena), "a block of another ring");
        let size = self.arena.block_bytes();
        let bad = |what: String| BadFrame(format!("block {}, packet at offset {at}: {what}", block.id()));
        if at + size_of::<Tpacket3Hdr>() > size {
            return Err(bad("header past the end of the block".into()));
        }
        let base = self.arena.block_ptr(block.id()).wrapping_add(at).cast_mut();
        // SAFETY: `base..base+48` lies in the block (checked above), which we hold
        // and the kernel handed over; read by value, unaligned-safe.
        let mut h = unsafe { std::ptr::read_unaligned(base.cast::<Tpacket3Hdr>()) };
        let next = h.tp_next_offset as usize;
        // The packet's area ends where the next one's header starts (or at the end of
        // the block), and that is what the checks below keep every access inside.
        let end = if next == 0 { size - at } else { next };
        if at + end > size || (next != 0 && next < size_of::<Tpacket3Hdr>()) {
            return Err(bad(format!("next packet at +{next}")));
        }
        let (mac, caplen) = (usize::from(h.tp_mac), h.tp_snaplen as usize);
        if mac < TPACKET3_HDRLEN || mac + caplen > end {
            return Err(bad(format!("{caplen} bytes at +{mac}")));
        }
        if self.vlan && h.tp_status & TP_STATUS_VLAN_VALID != 0 && caplen >= MAC_ADDRS {
            let tpid = if h.tp_status & TP_STATUS_VLAN_TPID_VALID != 0 { h.tp_vlan_tpid } else { 0x8100 };
            let tag = [tpid.to_be_bytes(), (h.tp_vlan_tci as u16).to_be_bytes()];
            let tag_len = VLAN_TAG_LEN as usize;
            if mac < TPACKET3_HDRLEN + tag_len {
                return Err(bad("no room in front of the packet for its VLAN tag".into()));
            }
            // SAFETY: the bytes written, [base+mac-4, base+mac+12) and the header at base,
            // are in this packet's area (checked above), past its sockaddr_ll; no cell or
            // reference points into this packet yet, so nobody reads them meanwhile.
            unsafe {
                std::ptr::copy(base.add(mac), base.add(mac - tag_len), MAC_ADDRS);
                std::ptr::copy_nonoverlapping(tag.as_flattened().as_ptr(), base.add(mac - tag_len + MAC_ADDRS), tag_len);
            }
            h.tp_mac -= VLAN_TAG_LEN as u16;
            h.tp_snaplen = (h.tp_snaplen + VLAN_TAG_LEN).min(self.snaplen);
            h.tp_len = h.tp_len.saturating_add(VLAN_TAG_LEN);
            h.tp_status &= !TP_STATUS_VLAN_VALID;
            // SAFETY: the header of this packet, as above.
            unsafe { std::ptr::write_unaligned(base.cast::<Tpacket3Hdr>(), h) };
        }
        let start = at + usize::from(h.tp_mac);
        Ok(Frame {
            data: start..start + h.tp_snaplen as usize,
            wire_len: h.tp_len,
            ts_ns: u64::from(h.tp_sec) * 1_000_000_000 + u64::from(h.tp_nsec),
            next,
        })
    }

    /// The captured bytes of a packet of `ready` that [`frame`](Self::frame)
    /// returned, to read (hash, copy aside) while the block is held.
    pub(crate) fn packet_bytes<'a>(&'a self, ready: &'a ReadyBlock, f: &Frame) -> &'a [u8] {
        assert!(Arc::ptr_eq(ready.block.arena(), &self.arena), "a block of another ring");
        assert!(f.data.start <= f.data.end && f.data.end <= self.arena.block_bytes(), "a frame outside its block");
        let at = self.arena.block_ptr(ready.block.id()).wrapping_add(f.data.start);
        // SAFETY: the range is in an adopted block (checked above); the kernel writes it
        // only after `give_back` (which needs `&mut self`), and `frame` rewrites a packet's
        // bytes once, before returning it, so nothing writes them while this borrow lives.
        unsafe { std::slice::from_raw_parts(at, f.data.len()) }
    }

    /// Every packet of `block` was taken: stop holding it for reading.
    pub(crate) fn done(&self, ready: ReadyBlock) -> Walked {
        assert!(Arc::ptr_eq(ready.block.arena(), &self.arena), "a block of another ring");
        Walked { id: ready.block.id(), arena: Arc::as_ptr(&self.arena) as usize }
    }

    /// Give a walked block back to the kernel if no chunk holds it any more;
    /// otherwise hand the token back.
    pub(crate) fn give_back(&mut self, w: Walked) -> Result<(), Walked> {
        assert_eq!(w.arena, Arc::as_ptr(&self.arena) as usize, "a block of another ring");
        if !self.arena.is_unheld(w.id) {
            return Err(w);
        }
        self.walked[w.id as usize] = false;
        // Release: every read of the block (ours, and the workers', which `is_unheld`
        // acquired) and our VLAN rewrites happen before the kernel sees the block as
        // its own again and overwrites it.
        self.status(w.id).store(TP_STATUS_KERNEL, Ordering::Release);
        Ok(())
    }
}
