//! weir behind the libpcap 1.10 API: a `libpcap.so.0.8` that unmodified
//! programs load in front of the system's (`LD_LIBRARY_PATH`, or `weir run`).
//!
//! - Reading goes through weir: files through its trace reader, interfaces
//!   through its engine (AF_PACKET by default, AF_XDP with
//!   `WEIR_SOURCE=afxdp`), several queues read by the program's one thread,
//!   locality buffering with `WEIR_LOCALITY` (see [`env`]).
//! - Filters are compiled by the system libpcap and run by weir's interpreter.
//!   The compiler's neighbours (`bpf_dump`, name tables, the savefile writer,
//!   interface lists) are the system library's own ([`delegate`]).
//!
//! The whole crate is the C API, so it may use `unsafe`; every block says why
//! it holds.

#![allow(unsafe_code)]

mod api;
mod delegate;
pub mod env;
mod handle;
mod savefile;
mod sys;
mod types;
