//! weir: a packet capture and delivery engine for passive network monitoring.
//!
//! The data path, in the order packets travel it:
//!
//! ```text
//!  source queue ─► capture thread: attach a free chunk, fill its cells ─► capture queue (SPSC)
//!                                                                              │
//!  free ◄── recycle (validated) ◄── recycle queue (SPSC) ◄── worker: deliver to the application
//! ```
//!
//! - [`source`]: where packets come from: trace files (split into queues by [`rss`]),
//!   AF_PACKET and AF_XDP interfaces.
//! - `capture`: the contract every source keeps with the engine (capture
//!   units, the stop request, source errors), below both.
//! - [`tracefile`]: the pcap and pcapng record parser.
//! - [`sim`]: a virtual-time model of a multi-queue NIC and its cores, driving
//!   the same pools, offloading and rebalancing as the live engine.
//! - [`pool`]: the R chunks of M cells of one queue, and their state machine.
//! - [`ring`]: the lock-free single-producer single-consumer queues between stages.
//! - [`engine`]: capture threads, workers, stats and the clean stop.
//! - [`locality`]: the worker-side stage that delivers each batch sorted by port.
//! - [`filter`]: libpcap filter expressions, compiled by libpcap, run by weir.
//! - [`wire`]: zero-copy views over packet headers.
//! - [`memory`]: the budget every capture is checked against before it allocates.
//! - [`setting`]: the settings errors are about, named for each front end to word.
//! - [`flowtable`]: a flow table of bounded size, aged in packet time.
//! - [`sink`]: pcap and pcapng writers.
//! - [`output`]: where records leave weir: EVE JSON events, the flow exporter
//!   (IPFIX, NetFlow v9 and v5, [`output::flow`]), and the tee of one capture into
//!   several consumers.
//! - [`tx`]: sending frames out of an interface through a TX ring (`weir replay`); [`privileges`] drops root.
//! - [`forward`]: inline forwarding from one interface out of another (`weir forward`), each
//!   packet passed by a filter and the application's [`forward::Verdict`], on AF_XDP (a
//!   received UMEM frame sent by its address) or AF_PACKET (RX ring to TX ring, one copy).
//!
//! # Where a packet goes
//!
//! From a trace: [`source::file`]'s capture unit (`source/file/trace.rs`)
//! reads blocks ahead (`input.rs`), walks their records with [`tracefile`],
//! picks the queue by [`rss`] and puts each packet in a cell of that queue's
//! pool through its `pool::CaptureSide` (`pool/capture.rs`: by reference
//! into the read block, no copy). From an interface, [`source::afpacket`]'s
//! unit (`source/afpacket/unit.rs`) does the same from the kernel's ring
//! blocks, `source::afxdp`'s from UMEM frames. A full chunk goes over the
//! capture queue ([`ring`]) to the queue's worker, which the [`engine`] runs
//! (`engine/mod.rs`, `worker_loop`): it holds the chunk
//! (`pool::WorkerSide`, `pool/worker.rs`), hands each packet to the
//! application's [`Handler`], and recycles the chunk. With locality
//! buffering, the worker gathers a [`locality`] batch first
//! (`locality/batch.rs`) and delivers it sorted by port (`locality/stage.rs`).
//! A caller that pulls packets instead (libpcap, C) reads the same chunks and
//! batches through [`engine::Reader`] (`engine/reader.rs`). Every packet is
//! counted once in [`stats`]: received, then delivered, filtered, dropped
//! (capture or delivery) or unread.
//!
//! # Adding a stage
//!
//! A stage that works on captured packets runs on the worker side, between
//! the chunk and the handler, where the worker owns its queue and needs no
//! lock: write it as the locality stage is written (a module of its own that
//! takes a `pool::WorkerSide` and a [`Handler`], and holds chunks as long as
//! it needs their packets), and call it from `worker_loop` and from the
//! reader. Work that must see every packet before it takes a cell (a filter,
//! a cutoff) belongs in the capture unit, through `capture::CaptureUnit`.
//! `scripts/module-graph` shows which modules a new one may use: only those
//! below it.
//!
//! A monitoring program in a few lines:
//!
//! ```no_run
//! use weir::{Engine, Packet};
//! let engine = Engine::builder().source("trace.pcap@0-1")?.build()?;
//! let report = engine.run(|_queue| {
//!     let mut bytes = 0u64;
//!     move |p: &Packet<'_>| bytes += u64::from(p.wire_len())
//! })?;
//! println!("{} packets delivered", report.stats.total().delivered);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The public API
//!
//! What an application needs is re-exported at the root: the [`Engine`] and
//! its [`EngineBuilder`], the [`Handler`] it runs per queue or the [`Reader`]
//! it pulls from, [`Packet`], the [`Report`] and its statistics
//! ([`Snapshot`], [`QueueStats`]), the errors ([`BuildError`], [`SourceError`]
//! with its [`SourceErrorKind`], [`SettingError`] naming a [`Setting`]) and
//! the names of sources ([`SourceSpec`]). The modules stay public for their
//! configuration types and for the tools beside the engine (trace files,
//! writers, filters, the simulator, the TX ring). What only the engine
//! itself uses (the pool's sides, the rings' handles, the capture units, the
//! bucket tables) is `pub(crate)`, and every public item is documented
//! (`missing_docs`, denied by `make style`). The libpcap oracle the tests judge
//! weir against is compiled only with the `oracle` feature.
//!
//! `unsafe` is denied crate-wide. It is allowed only where the work needs it: the
//! lock-free [`ring`]s, the [`pool`] (cells and memory shared with the kernel),
//! the FFI loader of [`filter`], the `sys` modules of the live sources, of [`tx`]
//! and of the engine (system calls and kernel-shared rings), and [`privileges`].
//! Every block carries a `// SAFETY:` comment.

#![warn(missing_docs)]

pub mod balance;
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
pub mod pool;
pub mod privileges;
pub mod profile;
pub mod ring;
pub mod rss;
pub mod setting;
pub mod sim;
pub mod sink;
pub mod source;
pub mod stats;
pub mod stream;
pub mod tracefile;
pub mod tx;
pub mod wire;

pub use engine::{BuildError, Engine, EngineBuilder, Read, Reader, Report, SourceError, SourceErrorKind, StopHandle, StopReason};
pub use packet::{FlowBucket, Handler, Handover, LinkType, Packet, QueueId, PACKETS_PER_RUN};
pub use pool::PoolConfig;
pub use setting::{Setting, SettingError};
pub use source::SourceSpec;
pub use stats::{QueueStats, Snapshot};
