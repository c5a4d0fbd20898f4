//! weir behind the libpcap 1.10 API: a `libpcap.so.0.8` that unmodified
//! programs load in front of the system's (`LD_LIBRARY_PATH`, or `weir run`).
//!
//! - Reading goes through weir: files through its trace reader, interfaces
//!   through its engine (AF_PACKET by default, AF_XDP with
//!   `WEIR_SOURCE=afxdp`), several queues read by the program's one thread,
//!   locality buffering with `WEIR_LOCALITY` (see `env.rs`).
//! - Filters are compiled by the system libpcap and run by weir's interpreter.
//!   The compiler's neighbours (`bpf_dump`, name tables, the savefile writer,
//!   interface lists) are the system library's own (`delegate.rs`).
//!
//! Every exported function is `extern "C-unwind"`, and so is the packet
//! callback's type: glibc cancels a thread (`pthread_cancel`) by unwinding its
//! stack, and a program may cancel its capture thread while it is in weir's
//! wait or in its own callback, or in the system library's code weir calls for
//! it (writing a dump file). Unwinding must pass through weir's frames,
//! dropping what they hold, as it passes through libpcap's C frames; an
//! `extern "C"` function would abort the process instead. Where weir may be
//! cancelled at all is `cancel.rs`'s business.
//!
//! - With `WEIR_PROFILE_FILE` (what `weir profile -- run` sets), the
//!   program is profiled: the engines' stages and the shim's own, written at
//!   exit (`profile.rs`).
//! - With `WEIR_METRICS=ADDR:PORT` (what `weir run --metrics` sets), the
//!   handles' counters are served as Prometheus metrics (`metrics.rs`).
//!
//! The whole crate is the C API, so it may use `unsafe`; every block says why
//! it holds.

#![allow(unsafe_code)]

mod api;
mod cancel;
mod data;
mod delegate;
pub mod env;
mod errors;
mod getters;
mod handle;
mod metrics;
mod profile;
mod read;
mod savefile;
mod sys;
mod types;
