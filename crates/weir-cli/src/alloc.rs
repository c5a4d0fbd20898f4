//! The process's memory allocator: mimalloc, on 2 MiB pages, giving freed
//! memory back to the system only after it stayed free for a second.
//!
//! Why not the C library's: `weir streams` holds hundreds of MiB of partial
//! pieces at 10^5 concurrent streams, all allocated on a worker thread. glibc
//! grows a thread's heap a page at a time (an `mprotect` each: 151,000 on the
//! 2-million-packet benchmark trace) and every 4 KiB page is faulted in and
//! cleared on its own, which made the worker spend more time in the kernel
//! than in reassembly (a quarter of its samples in `clear_page`). mimalloc
//! takes memory from the system in large segments and, with large pages
//! allowed, asks for transparent huge pages on them (this kernel's THP mode is
//! `madvise`): one fault per 2 MiB (about 1,400 faults on that trace instead
//! of 190,000). The purge delay is raised from mimalloc's 10 ms to a second,
//! so the pages of closed streams stay for the streams that follow and a long
//! capture still shrinks after a burst of streams; the first timings favoured
//! it, but the fault counts were the same either way, so it is a precaution
//! more than a measured gain.
//!
//! Setting `MIMALLOC_ALLOW_LARGE_OS_PAGES` or `MIMALLOC_PURGE_DELAY` in the
//! environment keeps the user's value.
#![allow(unsafe_code, reason = "FFI: setting mimalloc's options")]

use libmimalloc_sys::{mi_option_set, mi_option_t};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_allow_large_os_pages` (`mimalloc.h` of the v3 sources
/// the pinned libmimalloc-sys builds; the crate's own constant for it,
/// `mi_option_large_os_pages`, has the same value).
const ALLOW_LARGE_OS_PAGES: mi_option_t = libmimalloc_sys::mi_option_large_os_pages;
/// mimalloc's `mi_option_purge_delay`, which libmimalloc-sys does not name:
/// its place in `mi_option_e` of the pinned v3 sources. The test below checks
/// it against the environment variable of that name.
const PURGE_DELAY: mi_option_t = 15;
/// Milliseconds freed memory stays with the process before it is purged.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// Applies weir's settings, before any thread but the main one runs.
pub fn tune() {
    let unset = |name: &str| std::env::var_os(name).is_none();
    if unset("MIMALLOC_ALLOW_LARGE_OS_PAGES") && unset("MIMALLOC_LARGE_OS_PAGES") {
        // SAFETY: mi_option_set writes one entry of mimalloc's option table
        // (an index below _mi_option_last); no other thread is running yet.
        unsafe { mi_option_set(ALLOW_LARGE_OS_PAGES, 1) };
    }
    if unset("MIMALLOC_PURGE_DELAY") {
        // SAFETY: as above.
        unsafe { mi_option_set(PURGE_DELAY, PURGE_DELAY_MS) };
    }
}

/// The value of mimalloc's option `option`.
#[cfg(test)]
fn option(option: mi_option_t) -> std::ffi::c_long {
    // SAFETY: mi_option_get reads one entry of the option table (an index
    // below _mi_option_last), initialized when the process started.
    unsafe { libmimalloc_sys::mi_option_get(option) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// mimalloc reads its options from the environment when the process
    /// starts, so the checks run in a child: this test binary again, running
    /// only this test, with the variables set.
    #[test]
    fn option_numbers_name_the_options_meant() {
        if std::env::var_os("WEIR_ALLOC_CHILD").is_none() {
            let out = Command::new(std::env::current_exe().expect("the test binary"))
                .args(["--exact", "alloc::tests::option_numbers_name_the_options_meant", "--nocapture"])
                .env("WEIR_ALLOC_CHILD", "1")
                .env("MIMALLOC_PURGE_DELAY", "1234")
                .env("MIMALLOC_ALLOW_LARGE_OS_PAGES", "1")
                .output()
                .expect("the child runs");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && text.contains("1 passed"), "child: {text}{}", String::from_utf8_lossy(&out.stderr));
            return;
        }
        assert_eq!(option(PURGE_DELAY), 1234, "option {PURGE_DELAY} is not the purge delay");
        assert_eq!(option(ALLOW_LARGE_OS_PAGES), 1, "option {ALLOW_LARGE_OS_PAGES} is not large pages");
        // The user's values are kept.
        tune();
        assert_eq!(option(PURGE_DELAY), 1234);
        std::env::remove_var("MIMALLOC_PURGE_DELAY");
        tune();
        assert_eq!(option(PURGE_DELAY), PURGE_DELAY_MS);
    }
}
