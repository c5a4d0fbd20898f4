//! The capture layer: what a source must do, below the engine, the sources and
//! rebalancing, so that each of them can use it without reaching up.
//!
//! ```text
//!   engine ──opens──► source ──becomes──► capture units (one thread each)
//!      │                                        │ fill the pools through
//!      └── stops them through Control ◄─────────┘ CaptureSide (crate::pool)
//! ```
//!
//! - `unit`: a `CaptureUnit` fills the pools of its queues and counts every
//!   packet once; [`SourceInfo`] is what the engine learns before capture
//!   starts; [`SourceError`] is how a source fails; `Progress` is how far a
//!   finite input has been read.
//! - `control`: the stop request every unit watches (`Control`), the
//!   application's handle on it ([`StopHandle`](crate::engine::StopHandle))
//!   and why a run ended ([`StopReason`]).
//!
//! A new source implements `CaptureUnit` (and `crate::source::Source` to be
//! opened by name); the engine and the rebalancing controller see it only
//! through this contract. Nothing here is public API: the types an
//! application meets (errors, source facts, the stop handle) are
//! re-exported from [`engine`](crate::engine).

pub(crate) mod control;
pub(crate) mod unit;

pub(crate) use control::{Control, StopReason};
pub(crate) use unit::{CaptureUnit, Progress, SourceError, SourceInfo};
