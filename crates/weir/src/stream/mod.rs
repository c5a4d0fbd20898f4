//! The stream layer: one direction of a TCP connection rebuilt from its
//! segments, for applications that want bytes rather than packets (Scap's
//! stream capture, issue 20).
//!
//! This first part is the per-direction reassembler ([`reassembly`]), with
//! the IPv4 and IPv6 fragment reassembly that comes before it
//! ([`fragment`]); the stream table, the events to the application, pieces, the memory arena and
//! the engine wiring build on it.
//!
//! # The contract
//!
//! A [`reassembly::Reassembler`] takes the segments of one direction in
//! arrival order: a 32-bit sequence number, the payload, and the SYN, FIN and
//! RST flags. It hands a [`reassembly::Sink`] the stream as the receiving
//! TCP would see it, in stream order and each offset once:
//!
//! - **data**: a run of bytes at a stream offset (offset 0 is the byte after
//!   the SYN, or the first byte seen when the stream is picked up midstream);
//! - **gap**: a run of offsets whose bytes were never seen by the time the
//!   reassembler gave up waiting for them (the bytes held out of order passed
//!   their limit, or the caller flushed), with its exact length. A gap is
//!   never glued over: the data after it is reported at its true offset. A
//!   flush reports gaps up to the furthest byte (or FIN) seen, never past
//!   it;
//! - **end**: the stream is over (FIN reached, RST, or the caller closed it)
//!   and why; nothing follows it.
//!
//! Data and gaps together cover the offsets from 0 without a hole or an
//! overlap, up to the cutoff. Every payload byte handed in is counted in
//! exactly one of:
//!
//! - **delivered**: handed to the sink as data, once;
//! - **duplicate**: its offset was already delivered, given up as a gap, or is
//!   held (overlaps are resolved first-copy-wins, so a second copy is never
//!   delivered, whatever its bytes);
//! - **discarded past the cutoff**: its offset is at or beyond the stream's
//!   cutoff; it is counted, not copied, and keeps no state;
//! - **refused**: not stream data at all: before the SYN in strict mode,
//!   before offset 0, beyond the FIN, on or after a RST, or after the end;
//! - **held**: waiting out of order for a hole before it to be filled; held
//!   bytes leave this category only for delivered (or refused, if a FIN
//!   later ends the stream before them).
//!
//! So `received = delivered + duplicate + discarded + refused + held` at all
//! times, and the next offset to deliver is `delivered + gap` bytes. Bytes
//! **dropped for memory** are the fifth category of the design; they belong
//! to the per-worker arena (`arena.rs`) that shares memory out among streams
//! by priority, and are counted in the stream's record, never handed to the
//! reassembler. A single reassembler never drops seen data for memory: when its held bytes pass their limit it gives up on the hole
//! instead, which turns unseen offsets (not seen bytes) into a gap.

mod api;
mod arena;
pub mod biflow;
mod board;
pub mod community_id;
mod config;
mod decode;
pub mod fragment;
mod handover;
mod layer;
pub mod reassembly;

pub use crate::source::live::cutoff::KernelCutoff;
pub use api::{CloseReason, Direction, KernelStats, Piece, Stream, StreamCtl, StreamHandler, StreamStats};
pub use board::StreamsNow;
pub(crate) use board::{read_all as read_boards, Board};
pub use config::{
    Class, Mode, ParseClassError, ParseCutoffClassError, ParseModeError, StreamConfig, KERNEL_INSTALL_AFTER, MAX_PIECE,
    PREALLOC_CONNECTIONS, PRIORITIES,
};
pub use layer::Streams;

#[cfg(test)]
mod fragment_tests;
#[cfg(test)]
mod tests;
