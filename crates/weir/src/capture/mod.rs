//! The capture layer: what a source must do, below the engine, the sources and
//! rebalancing, so that each of them can use it without reaching up.
//!
//! ```text
//!   engine ──opens──► source ──becomes──► capture units (one thread each)
//!      │                                        │ fill the pools through
//!      └── stops them through Control ◄─────────┘ CaptureSide (crate::pool)
//! ```
//!
//! - [`unit`](mod@unit): a [`CaptureUnit`] fills the pools of its queues and counts every
//!   packet once; [`SourceInfo`] is what the engine learns before capture
//!   starts; [`SourceError`] is how a source fails; [`Progress`] is how far a
//!   finite input has been read.
//! - [`control`](mod@control): the stop request every unit watches ([`Control`]), the
//!   application's handle on it ([`StopHandle`]) and why a run ended
//!   ([`StopReason`]).
//!
//! A new source implements [`CaptureUnit`] (and `crate::source::Source` to be
//! opened by name); the engine and the rebalancing controller see it only
//! through this contract.

pub mod control;
pub mod unit;

pub use control::{Control, StopHandle, StopReason};
pub use unit::{CaptureUnit, Progress, SourceError, SourceErrorKind, SourceInfo};
