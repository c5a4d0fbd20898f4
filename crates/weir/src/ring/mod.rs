//! Lock-free single-producer single-consumer queues: the two halves of a work-queue pair.
//!
//! Each queue of the engine has a capture queue (capture thread → worker) and a
//! recycle queue (worker → capture thread); both carry chunk indices. They are
//! written here rather than taken from a crate (rtrb, crossbeam's ArrayQueue)
//! because the engine needs three things together that no single crate offers:
//! a bounded SPSC ring of `Copy` items with cached indices, a way for the consumer
//! to sleep on an empty ring and the producer on a full one without a lost wake-up,
//! and an explicit close so the far side learns that nothing more will come.
//!
//! Contract:
//! - [`Producer`] and [`Consumer`] are `Send` but not `Sync`: one thread per side.
//! - Items are delivered exactly once, in push order.
//! - When the producer is dropped or [`Producer::close`]s, the consumer still drains
//!   every item pushed before, then sees [`Consumer::is_closed`] as true.
//! - A side that waits is woken by the other side's next push/pop, by a close, or
//!   by [`Consumer::wake_handle`]/[`Producer::wake_handle`] from any thread.

mod eventfd;
mod ready_fd;
mod spsc;
mod wait;

pub use eventfd::EventFd;
pub use ready_fd::ReadyFd;
pub use spsc::{channel, Capacity, Consumer, Producer};
pub use wait::WakeHandle;
