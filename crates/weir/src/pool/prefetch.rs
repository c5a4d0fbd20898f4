//! Cache prefetch hints: memory asked for a little before it is read, so the
//! cache misses of several packets overlap instead of following each other.
//!
//! A hint has no effect the program can observe and never faults, whatever
//! the address, so these functions are safe for any address (a pointer one
//! past a value, a cell's bytes). Outside x86_64, and under Miri, they do
//! nothing.

#![allow(unsafe_code)]

/// Bytes of a cache line on every x86_64 processor.
const LINE: usize = 64;

/// Asks for the cache line holding the byte at `at`.
#[inline(always)]
pub(crate) fn hint(at: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint that never faults and whose only effect
        // is on caches; `sse`, which it needs, is part of every x86_64.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast()) };
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = at;
}

/// Asks for the cache line holding the byte at `at`, to be written: the line
/// comes exclusive, so the store that follows need not take it from another
/// core's cache first.
#[inline(always)]
pub(crate) fn hint_write(at: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: PREFETCHW is a hint that never faults and only moves a cache
    // line; processors without it (PRFCHW) execute its opcode as a NOP. It
    // touches no register but its operand's, no flags and no stack.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) at, options(nostack, preserves_flags, readonly));
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = at;
}

/// Asks for the first `lines` cache lines of `bytes`.
#[inline(always)]
pub(crate) fn lines(bytes: &[u8], lines: usize) {
    for line in bytes.chunks(LINE).take(lines) {
        hint(line.as_ptr());
    }
}

/// Asks for every cache line `value` lies in.
#[inline(always)]
pub(crate) fn value<T>(value: &T) {
    span((value as *const T).cast(), std::mem::size_of::<T>());
}

/// Asks for every cache line of the `len` bytes at `start`.
#[inline(always)]
pub(crate) fn span(start: *const u8, len: usize) {
    let offset = start as usize % LINE;
    let mut at = 0;
    while at < offset + len {
        hint(start.wrapping_sub(offset).wrapping_add(at));
        at += LINE;
    }
}
