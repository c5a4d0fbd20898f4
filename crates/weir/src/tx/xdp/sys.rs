//! The system calls of the XDP generator: `bpf(BPF_PROG_TEST_RUN)` in live-frames
//! mode, which aya does not offer, and the plain-data types its maps hold.

// The test-run call and the Pod promises for the map values are unsafe; each
// is commented.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Longest frame the program holds; `WEIR_GEN_MAX_FRAME` in ebpf/weir_gen.c.
pub const MAX_FRAME: usize = 2048;

/// One frame of the trace, as `struct weir_gen_frame`.
#[repr(C)]
#[derive(Copy, Clone)]
pub(super) struct Frame {
    pub(super) len: u32,
    pub(super) data: [u8; MAX_FRAME],
}

// SAFETY: plain old data with no padding (a u32 and bytes, 4-aligned), any bit
// pattern valid, as aya's Pod requires.
unsafe impl aya::Pod for Frame {}

/// The program's state, as `struct weir_gen_state`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub(super) struct State {
    /// Runs so far: the next run's number.
    pub(super) next: u64,
    pub(super) ifindex: u32,
    pub(super) frames: u32,
    pub(super) vary_ports: u32,
    pub(super) pad: u32,
}

// SAFETY: plain old data, no implicit padding (8 + 4 * 4 bytes), any bit pattern valid.
unsafe impl aya::Pod for State {}

const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// The `test` member of `union bpf_attr` (linux/bpf.h), to `batch_size`.
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    pad: u32,
}

/// Run XDP program `prog` `repeat` times in live-frames mode, each run on a
/// fresh frame built from `data`, transmitting what it redirects, flushed every
/// `batch` frames. A signal ends it early with `EINTR`.
pub(super) fn test_run_live(prog: BorrowedFd<'_>, data: &[u8], repeat: u32, batch: u32) -> io::Result<()> {
    let fd = u32::try_from(prog.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    let attr = TestRunAttr {
        prog_fd: fd,
        data_size_in: u32::try_from(data.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        data_in: data.as_ptr() as u64,
        repeat,
        flags: BPF_F_TEST_XDP_LIVE_FRAMES,
        batch_size: batch,
        ..TestRunAttr::default()
    };
    // SAFETY: `attr` is a valid bpf_attr prefix of the size passed; the kernel
    // only reads `data` (data_out and ctx_out are 0) for the call's duration, and
    // both outlive it.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_TEST_RUN, &attr as *const TestRunAttr, std::mem::size_of::<TestRunAttr>() as libc::c_uint)
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
