//! weir: a packet capture and delivery engine for passive network monitoring.
//!
//! weir reads packets from a trace file (pcap, pcapng) or a network interface
//! (AF_PACKET, AF_XDP), spreads them over queues, and hands each queue's
//! packets to the application's [`Handler`] on a worker thread of its own, or
//! to a [`Reader`] the application pulls from. Each queue has a pool of
//! chunks that absorbs bursts, and every packet is counted once: delivered,
//! filtered, or dropped, and where.
//!
//! ```text
//!  source queue ─► capture thread: attach a free chunk, fill its cells ─► capture queue (SPSC)
//!                                                                              │
//!  free ◄── recycle (validated) ◄── recycle queue (SPSC) ◄── worker: deliver to the application
//! ```
//!
//! # Example
//!
//! Count the bytes of TCP packets in a trace split into two queues:
//!
//! ```no_run
//! use weir::{Engine, Handler, Packet};
//!
//! #[derive(Default)]
//! struct Bytes(u64);
//!
//! impl Handler for Bytes {
//!     fn packet(&mut self, p: &Packet<'_>) {
//!         self.0 += u64::from(p.wire_len());
//!     }
//! }
//!
//! let engine = Engine::builder().source("trace.pcap@0-1")?.filter("tcp").build()?;
//! let report = engine.run(|_queue| Bytes::default())?;
//! let bytes: u64 = report.handlers.iter().map(|(_, h)| h.0).sum();
//! let total = report.stats.total();
//! println!("{} packets, {bytes} bytes, {} filtered out", total.delivered, total.filtered);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Where to start
//!
//! - [`Engine`], built by an [`EngineBuilder`] from a source's name
//!   ([`SourceSpec`]: `trace.pcap@0-3`, `afpacket:eth0@0-3`,
//!   `afxdp:eth0@0-3`) and its settings: the [`PoolConfig`] of each queue,
//!   a [`BalanceMode`] for imbalance between queues, a filter.
//! - [`Handler`], run per queue ([`Engine::run`], [`Engine::start`]), or a
//!   [`Reader`] to pull from ([`Engine::start_reader`]); both see [`Packet`]s.
//! - [`Report`] at the end of a run, and [`Snapshot`] / [`QueueStats`]
//!   during and after it.
//! - The errors: [`BuildError`], [`RunError`](engine::RunError),
//!   [`SourceError`] with its [`SourceErrorKind`], and [`SettingError`]
//!   naming the [`Setting`] a refused value was for.
//!
//! # Modules
//!
//! - [`engine`]: the engine, its builder, running handlers, readers, watching a run.
//! - [`source`]: sources' names and options: trace files and live interfaces.
//! - [`stream`]: TCP and UDP streams rebuilt from packets, with cutoffs and classes.
//! - [`filter`]: libpcap filter expressions, compiled by libpcap, run by weir.
//! - [`output`]: EVE JSON events, the flow exporter (IPFIX, NetFlow), the tee.
//! - [`sink`] and [`tracefile`]: writing and reading pcap and pcapng.
//! - [`wire`]: zero-copy views over packet headers; [`flowtable`]: a bounded
//!   flow table aged in packet time.
//! - [`forward`] (inline forwarding) and [`tx`] (sending through a TX ring).
//! - [`sim`]: a virtual-time model of a multi-queue NIC driving weir's own
//!   pools and steering, for what-if experiments (`weir sim`).
//! - [`locality`], [`memory`], [`stats`], [`setting`], [`profile`],
//!   [`clock`], [`privileges`]: settings and services of the above.
//!
//! How the modules are layered and how a packet travels through them is in
//! the repository's design chapter, `docs/src/design.md`. The pool, the rings,
//! the steering and the RSS hash are crate-private; what an application
//! needs of them is re-exported here. The libpcap oracle the tests judge weir
//! against (`filter::oracle`) is compiled only with the `oracle` feature.
//!
//! # Unsafe code
//!
//! `unsafe` is denied crate-wide and allowed, each file at its top, only in:
//! the bottom layer of system calls (`sys/bpf.rs`, `sys/cpu.rs`, `sys/mem.rs`,
//! `sys/netdev.rs`, `sys/netlink.rs`, `sys/packet.rs`, `sys/tx_ring.rs`,
//! `sys/xdp_gen.rs`, `sys/xsk.rs`, `sys/xsk_ring.rs`); the rings
//! (`ring/spsc.rs`, `ring/eventfd.rs`); the pool (`pool/mod.rs`, which covers
//! its submodules, and each of `pool/blocks.rs`, `pool/capture.rs`,
//! `pool/chunk.rs`, `pool/frames.rs`, `pool/prefetch.rs`, `pool/worker.rs`);
//! the mapped sources: the TPACKET_V3 ring whose blocks become the pool's
//! (`source/afpacket/ring.rs`) and the mapped trace
//! (`source/file/mapped.rs`); the filter (`filter/libpcap.rs`,
//! `filter/jit.rs`, `filter/batch.rs`, and `filter/oracle.rs` with the
//! `oracle` feature); the TSC (`clock.rs`); and dropping root
//! (`privileges.rs`). Every block carries a `// SAFETY:` comment.
//! `scripts/module-graph --check` holds this list to the files that allow it.

#![warn(missing_docs)]

pub(crate) mod balance;
pub(crate) mod capture;
pub mod clock;
pub mod engine;
pub mod filter;
pub mod flowtable;
pub mod forward;
pub mod locality;
pub mod memory;
pub mod output;
pub mod packet;
pub(crate) mod pool;
pub mod privileges;
pub mod profile;
pub(crate) mod ring;
pub(crate) mod rss;
pub mod setting;
// Public, unlike the pool, rings and steering it drives: the simulator is a
// tool beside the engine with a vocabulary of its own (engine kinds,
// workloads, reports), used whole by `weir sim` and by tests that generate
// skewed traffic, and its names (`Trace`, `Burst`, `Timing`) would be
// ambiguous at the root.
pub mod sim;
pub mod sink;
pub mod source;
pub mod stats;
pub mod stream;
pub(crate) mod sys;
pub mod tracefile;
pub mod tx;
pub mod wire;

pub use balance::{BalanceMode, ControllerConfig, SteeringStats};
pub use engine::{BuildError, Engine, EngineBuilder, Read, Reader, Report, SourceError, SourceErrorKind, StopHandle, StopReason};
pub use packet::{FlowBucket, Handler, Handover, LinkType, Packet, QueueId, PACKETS_PER_RUN};
pub use pool::{ChunkCount, OffloadThreshold, PoolConfig, PoolConfigError, PoolUsage, MAX_CAPLEN};
pub use ring::EventFd;
pub use rss::Rss;
pub use setting::{Setting, SettingError};
pub use source::SourceSpec;
pub use stats::{QueueStats, Snapshot};
