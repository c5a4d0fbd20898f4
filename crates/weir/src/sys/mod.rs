//! The bottom layer: system calls and the kernel's structures, for the
//! layers above to use through safe functions. It uses nothing of the crate.
//!
//! - [`bpf`]: the classic and eBPF instruction layouts, and the bpf(2) calls
//!   weir makes itself (loading an XDP program, map elements, test runs).
//! - [`cpu`]: the CPUs this process may use, and pinning a thread.
//! - [`mem`]: anonymous mappings (pools, arenas, the flow table's index).
//! - [`netdev`]: network namespaces, and what the kernel says of interfaces.
//! - [`netlink`]: the XDP programs on an interface, and what its driver offers XDP.
//! - [`packet`]: AF_PACKET sockets, and the TPACKET_V3 receive ring's layout.
//! - [`tx_ring`]: the PACKET_TX_RING that `weir replay` sends through.
//! - [`xdp_gen`]: the plain-data values of the XDP generator's maps.
//! - [`xsk`]: the AF_XDP socket and its UMEM.
//! - [`xsk_ring`]: the AF_XDP socket's four rings.
//!
//! What is built over the pool's memory stays above: the TPACKET_V3 ring
//! whose blocks become the pool's (`source/afpacket/ring.rs`) and the UMEM's
//! frames (`pool::FrameArena`) are handed to this layer as a mapping
//! ([`mem::Region`]) and a frame size, never as the pool's types.

pub(crate) mod bpf;
pub(crate) mod cpu;
pub(crate) mod mem;
pub(crate) mod netdev;
pub(crate) mod netlink;
pub(crate) mod packet;
pub(crate) mod tx_ring;
pub(crate) mod xdp_gen;
pub(crate) mod xsk;
pub(crate) mod xsk_ring;
