//! BPF as the kernel takes it: the two instruction layouts (classic BPF's,
//! which socket filters and libpcap use, and eBPF's), the bpf(2) calls weir
//! makes itself (loading an XDP program, a map's elements, test runs), and the
//! plain-data values of weir's own programs' maps that are not the XDP
//! generator's ([`super::xdp_gen`]).
//!
//! The programs built from C (`ebpf/`) are loaded by aya; what is here is what
//! needs no object file: programs weir assembles at run time, and map
//! operations on a descriptor, whoever made the map. Errors are the kernel's,
//! but a refused load carries the tail of the verifier's log.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// One classic BPF instruction, laid out as `struct bpf_insn` (the kernel's
/// `struct sock_filter`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct BpfInsn {
    /// The opcode: class, size, mode or operation, and source (`BPF_*` bits).
    pub code: u16,
    /// Instructions to skip when a conditional jump is taken.
    pub jt: u8,
    /// Instructions to skip when it is not.
    pub jf: u8,
    /// The constant operand: an immediate, a packet offset, a scratch memory
    /// index, or `ja`'s distance.
    pub k: u32,
}

/// One eBPF instruction, as `struct bpf_insn` (linux/bpf.h).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct EbpfInsn {
    pub(crate) code: u8,
    /// dst in the low nibble, src in the high one.
    pub(crate) regs: u8,
    pub(crate) off: i16,
    pub(crate) imm: i32,
}

const _: () = assert!(size_of::<BpfInsn>() == 8 && size_of::<EbpfInsn>() == 8);

/// `struct weir_filtered` of `ebpf/weir_xdp.c`: what the kernel filter passed
/// to the stack from one queue, on one CPU.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Filtered {
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
}
// SAFETY: two u64 fields and no padding: any bytes the kernel copies in are a valid value.
unsafe impl aya::Pod for Filtered {}

/// bpf(2)'s attribute for one map element (`union bpf_attr`'s map_elem part).
#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// A bpf(2) command on one map element.
#[derive(Copy, Clone, Debug)]
pub(crate) enum MapElem {
    /// BPF_MAP_LOOKUP_ELEM: copies the value out.
    Lookup,
    /// BPF_MAP_UPDATE_ELEM with BPF_NOEXIST: adds the element, never replaces one.
    Add,
    /// BPF_MAP_LOOKUP_AND_DELETE_ELEM (kernel 5.14 for hash maps): copies the
    /// value out and deletes the element in one call, so no update the
    /// kernel makes between a read and a delete is lost.
    Take,
}

/// Runs `op` on the element `key` of map `map`, with `value` (read from for
/// `Add`, written to otherwise). `Ok(false)` when the map has no such key
/// (for `Add`, never).
pub(crate) fn map_elem(op: MapElem, map: std::os::fd::BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    const BPF_NOEXIST: u64 = 1;
    let (cmd, flags): (libc::c_long, u64) = match op {
        MapElem::Lookup => (1, 0),
        MapElem::Add => (2, BPF_NOEXIST),
        MapElem::Take => (21, 0),
    };
    let attr = MapElemAttr { map_fd: map.as_raw_fd() as u32, _pad: 0, key: key.as_ptr() as u64, value: value.as_mut_ptr() as u64, flags };
    // SAFETY: `attr` is a valid map_elem attribute of the size passed; `key`
    // and `value` are live buffers of the map's key and value sizes (the
    // caller's types mirror the map's), and the kernel reads or writes at
    // most those sizes.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, &attr as *const MapElemAttr, std::mem::size_of::<MapElemAttr>()) };
    match rc {
        0 => Ok(true),
        _ => match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::ENOENT) && !matches!(op, MapElem::Add) => Ok(false),
            e => Err(e),
        },
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of the kernel programs'
/// bpf_ktime_get_ns.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// The `test` member of `union bpf_attr` (linux/bpf.h), to `batch_size`,
/// padded to 8 bytes.
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
const _: () = assert!(size_of::<TestRunAttr>() == 80);

/// BPF_PROG_TEST_RUN's flags.
pub(crate) mod test_run_flags {
    /// XDP live frames: what the program redirects is transmitted.
    pub(crate) const XDP_LIVE_FRAMES: u32 = 1 << 1;
}

/// Run program `prog` `repeat` times on `data` (BPF_PROG_TEST_RUN) with
/// `flags`, the live-frames kind flushed every `batch` frames; the last run's
/// return value. A signal ends a long run early with `EINTR`.
pub(crate) fn test_run(prog: BorrowedFd<'_>, data: &[u8], repeat: u32, flags: u32, batch: u32) -> io::Result<u32> {
    const BPF_PROG_TEST_RUN: libc::c_long = 10;
    let fd = u32::try_from(prog.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    let mut attr = TestRunAttr {
        prog_fd: fd,
        data_size_in: u32::try_from(data.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        data_in: data.as_ptr() as u64,
        repeat,
        flags,
        batch_size: batch,
        ..TestRunAttr::default()
    };
    // SAFETY: `attr` is a valid, fully initialized (no implicit padding) prefix
    // of `union bpf_attr` of the size passed; the kernel only reads `data` (live,
    // of the length given; data_out and ctx_out are 0) and writes `attr`'s
    // retval, data_size_out and duration, all for the call's duration.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_TEST_RUN, &mut attr as *mut TestRunAttr, size_of::<TestRunAttr>()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr.retval)
}

/// The `BPF_PROG_LOAD` member of `union bpf_attr`, to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}
const _: () = assert!(size_of::<ProgLoadAttr>() == 72);

/// An XDP program (`BPF_PROG_TYPE_XDP`, attach type `BPF_XDP`) loaded from
/// `insns` under `name`; the verifier's last words are in the error when it
/// refuses.
pub(crate) fn load_xdp(name: &str, insns: &[EbpfInsn]) -> io::Result<OwnedFd> {
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_XDP: u32 = 6;
    const BPF_XDP: u32 = 37;
    /// The tail of the verifier's log that goes into an error.
    const LOG_TAIL: usize = 600;
    /// Loads tried while the kernel answers EAGAIN.
    const LOAD_TRIES: usize = 5;
    let license = c"Dual MIT/GPL";
    let mut prog_name = [0u8; 16];
    for (d, s) in prog_name.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    let load = |log: &mut [u8]| -> io::Result<OwnedFd> {
        let attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: u32::try_from(insns.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: u32::from(!log.is_empty()),
            log_size: u32::try_from(log.len()).unwrap_or(u32::MAX),
            log_buf: if log.is_empty() { 0 } else { log.as_mut_ptr() as u64 },
            prog_name,
            expected_attach_type: BPF_XDP,
            ..ProgLoadAttr::default()
        };
        // SAFETY: `attr` is a valid prefix of `union bpf_attr` of the size
        // passed; the kernel reads `insns` (live, `insn_cnt` instructions of
        // `struct bpf_insn`'s layout) and the NUL-terminated license, and writes
        // at most `log_size` bytes to `log`, all during the call.
        let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, &attr as *const ProgLoadAttr, size_of::<ProgLoadAttr>()) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel returned a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    };
    // The kernel may answer EAGAIN to a load that would pass (the verifier
    // stops when a signal is pending): load again, as libbpf does (5 tries).
    // The clone CI of 397acb1 failed once on it in the random-program test.
    let mut first = load(&mut []);
    for _ in 1..LOAD_TRIES {
        match &first {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => first = load(&mut []),
            _ => break,
        }
    }
    match first {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EINVAL) => {
            // Again with the verifier's log, for the error.
            let mut log = vec![0u8; 1 << 20];
            match load(&mut log) {
                Ok(fd) => Ok(fd),
                Err(again) => {
                    let text = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(log.len())]).into_owned();
                    let tail = text.trim_end();
                    let tail = &tail[tail.len().saturating_sub(LOG_TAIL)..];
                    Err(io::Error::new(again.kind(), format!("{again}; the verifier said: ...{}", tail.replace('\n', " | "))))
                }
            }
        }
        Err(e) => Err(e),
    }
}

/// Put `value` in map `map` at `key` (BPF_MAP_UPDATE_ELEM, BPF_ANY), or with
/// `None` delete the key, not minding that it was not there.
pub(crate) fn map_set(map: BorrowedFd<'_>, key: &[u8], value: Option<&[u8]>) -> io::Result<()> {
    let (cmd, value): (libc::c_long, u64) = match value {
        Some(v) => (2, v.as_ptr() as u64),
        None => (3, 0),
    };
    let attr = MapElemAttr { map_fd: map.as_raw_fd() as u32, _pad: 0, key: key.as_ptr() as u64, value, flags: 0 };
    // SAFETY: `attr` is a valid map_elem attribute of the size passed; `key` and
    // `value` are live buffers of the map's key and value sizes, which the
    // kernel only reads.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, &attr as *const MapElemAttr, size_of::<MapElemAttr>()) };
    match rc {
        0 => Ok(()),
        _ => match io::Error::last_os_error() {
            e if cmd == 3 && e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            e => Err(e),
        },
    }
}
