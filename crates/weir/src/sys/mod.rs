//! The bottom layer: system calls and the kernel's structures, for the
//! layers above to use through safe functions. It uses nothing of the crate.
//!
//! - [`cpu`]: the CPUs this process may use, and pinning a thread.
//! - [`mem`]: anonymous mappings (pools, arenas, the flow table's index).
//! - [`tx_ring`]: the PACKET_TX_RING that `weir replay` sends through.
//! - [`xdp_gen`]: the plain-data values of the XDP generator's maps.
//!
//! The live sources' bindings (`source/afpacket/sys.rs`, `source/afxdp/sys.rs`
//! and `ring.rs`, `source/live/sys.rs` and `bpf.rs`) are not here yet: they
//! build on the pool's block and frame arenas, the filter's instruction types
//! and the capture errors, which sit above this layer. Moving them means
//! putting the kernel's types and raw calls here and leaving the rings over
//! the arenas in the sources.

pub(crate) mod cpu;
pub(crate) mod mem;
pub(crate) mod tx_ring;
pub(crate) mod xdp_gen;
