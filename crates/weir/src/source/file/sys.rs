//! The system calls of opening a trace that is a FIFO, which `open(2)` for
//! reading would block on until a writer opens it, where nothing (a stop, the
//! time limit) could end the wait.
//!
//! Contract: [`open_nonblocking`] opens without waiting (a FIFO's open for
//! reading with `O_NONBLOCK` succeeds at once); [`is_pipe`] tells an anonymous
//! pipe (whose blocking open never waits) from a named FIFO;
//! [`wait_readable`] waits at most one step for something to read, so the
//! caller can look at its stop between steps; [`set_blocking`] clears
//! `O_NONBLOCK` for the reads that follow, which then block as a trace's
//! reads always have.

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::statfs::{fstatfs, FsType};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

/// `PIPEFS_MAGIC` (linux/magic.h): the file system of anonymous pipes.
const PIPEFS_MAGIC: FsType = FsType(0x5049_5045);

/// Open `path` for reading with `O_NONBLOCK`: a FIFO with no writer yet is
/// opened at once (and reads 0 bytes until one has written).
pub(super) fn open_nonblocking(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
}

/// Whether `file` is an anonymous pipe (`cmd | weir count -`), not a named
/// FIFO: reopening one (through /dev/stdin) never waits for a writer.
pub(super) fn is_pipe(file: &File) -> io::Result<bool> {
    Ok(fstatfs(file.as_fd())?.filesystem_type() == PIPEFS_MAGIC)
}

/// What a step of waiting on a FIFO found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Readable {
    /// Bytes to read, or a writer that opened and closed again (a read
    /// gives the end): either way the wait for a writer is over.
    Now,
    /// Nothing yet: no writer has opened the FIFO, or one has and is silent.
    NotYet,
}

/// Wait at most `step` for `file` to have something to read. Linux reports a
/// hang-up on a FIFO only once a writer has come and gone since it was
/// opened, so a FIFO no writer has opened yet waits the whole step.
pub(super) fn wait_readable(file: &File, step: Duration) -> io::Result<Readable> {
    let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLIN)];
    let timeout = PollTimeout::try_from(step).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, timeout) {
        // A signal (Ctrl-C) cut the step short: the caller looks at its stop.
        Err(nix::errno::Errno::EINTR) | Ok(0) => return Ok(Readable::NotYet),
        Err(e) => return Err(e.into()),
        Ok(_) => {}
    }
    let got = fds[0].revents().unwrap_or(PollFlags::empty());
    if got.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) {
        return Err(io::Error::other(format!("poll reported {got:?}")));
    }
    Ok(if got.intersects(PollFlags::POLLIN | PollFlags::POLLHUP) { Readable::Now } else { Readable::NotYet })
}

/// Clear `O_NONBLOCK`: reads wait for the writer again.
pub(super) fn set_blocking(file: &File) -> io::Result<()> {
    let flags = OFlag::from_bits_retain(fcntl(file.as_fd(), FcntlArg::F_GETFL)?);
    fcntl(file.as_fd(), FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK))?;
    Ok(())
}
