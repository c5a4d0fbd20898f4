//! A packet as the filters' batch entry takes it ([`crate::filter::Filter::run_batch`]).
//!
//! Contract: a [`BatchInput`] is the pointer and length of a borrowed
//! `&[u8]` and a wire length, in a fixed (`repr(C)`) layout that the JIT's
//! batch function reads field by field (`jit.rs`: pointer at 0, length at 8,
//! wire length at 16). A slice reference's own layout is not guaranteed, so
//! the parts are kept apart; the lifetime ties them to the borrowed bytes.

#![allow(unsafe_code)]

use std::marker::PhantomData;

/// One packet of a batch for [`Filter::run_batch`](super::Filter::run_batch): its captured bytes and
/// its length on the wire, laid out as the JIT's batch function reads them
/// (pointer, length, wire length; `repr(C)`, so the layout is fixed).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct BatchInput<'a> {
    data: *const u8,
    caplen: usize,
    wire_len: u32,
    bytes: PhantomData<&'a [u8]>,
}

impl<'a> BatchInput<'a> {
    /// The packet `data`, `wire_len` bytes long on the wire.
    #[inline]
    pub fn new(data: &'a [u8], wire_len: u32) -> BatchInput<'a> {
        BatchInput { data: data.as_ptr(), caplen: data.len(), wire_len, bytes: PhantomData }
    }

    /// The captured bytes.
    #[inline]
    pub fn data(&self) -> &'a [u8] {
        // SAFETY: `data` and `caplen` are the pointer and length of the `&'a
        // [u8]` given to `new`, which the lifetime keeps alive and unchanged.
        unsafe { std::slice::from_raw_parts(self.data, self.caplen) }
    }

    /// The length on the wire.
    #[inline]
    pub fn wire_len(&self) -> u32 {
        self.wire_len
    }
}

// The JIT's batch loop reads the fields at these offsets.
#[cfg(target_arch = "x86_64")]
const _: () = assert!(std::mem::offset_of!(BatchInput<'static>, data) == 0);
#[cfg(target_arch = "x86_64")]
const _: () = assert!(std::mem::offset_of!(BatchInput<'static>, caplen) == 8);
#[cfg(target_arch = "x86_64")]
const _: () = assert!(std::mem::offset_of!(BatchInput<'static>, wire_len) == 16);
