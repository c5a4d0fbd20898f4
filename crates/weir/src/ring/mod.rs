//! Lock-free single-producer single-consumer queues: the two halves of a work-queue pair.
//!
//! Each queue of the engine has a capture queue (capture thread → worker) and a
//! recycle queue (worker → capture thread); both carry chunk indices. They are
//! written here rather than taken from a crate (rtrb, crossbeam's ArrayQueue)
//! because the engine needs three things together that no single crate offers:
//! a bounded SPSC ring of `Copy` items with cached indices, a way for a side to
//! sleep on the ring without a lost wake-up, and an explicit close so the far
//! side learns that nothing more will come.
//!
//! The rings are the crate's own. What a user of the library meets here is
//! [`EventFd`]: the descriptor a [`Reader`](crate::engine::Reader) makes
//! readable when packets wait, for a program that polls it among its own.
//!
//! Contract of the rings:
//! - `Producer` and `Consumer` are `Send` but not `Sync`: one thread per side.
//! - Items are delivered exactly once, in push order.
//! - When the producer is dropped or closes the ring, the consumer still drains
//!   every item pushed before, then sees the ring closed.
//! - A consumer that waits is woken by the producer's push (once a batch of
//!   items waits, when the producer batches its wake-ups) or notify, by a
//!   close, or through its `WakeHandle` from any thread.

mod eventfd;
mod ready_fd;
mod spsc;
mod wait;

pub use eventfd::EventFd;
pub(crate) use ready_fd::ReadyFd;
pub(crate) use spsc::{channel, Capacity, Consumer, Producer};
pub(crate) use wait::WakeHandle;
