//! Readiness for systemd (`Type=notify`): the sd_notify protocol, one
//! datagram of `KEY=VALUE` lines to the unix socket `$NOTIFY_SOCKET` names
//! (a path, or an abstract name when it starts with `@`). Nothing happens
//! when the variable is unset (not run by systemd); a send that fails is
//! said once on standard error and never fails the run.
//!
//! Written by hand: the protocol is a few stable lines (sd_notify(3)), and
//! std's `UnixDatagram` speaks it without unsafe code or libsystemd.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};

static FAILED: AtomicBool = AtomicBool::new(false);

/// Sends `message` to the notify socket, if there is one.
fn send(message: &str) {
    let Some(name) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let name = name.to_string_lossy().into_owned();
    let sent = (|| -> std::io::Result<()> {
        let addr = match name.strip_prefix('@') {
            Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name.as_bytes())?,
            None => SocketAddr::from_pathname(&name)?,
        };
        UnixDatagram::unbound()?.send_to_addr(message.as_bytes(), &addr).map(|_| ())
    })();
    // Relaxed: only whether it was said, by whichever thread.
    if let Err(e) = sent {
        if !FAILED.swap(true, Ordering::Relaxed) {
            eprintln!("weir: cannot tell systemd at NOTIFY_SOCKET={name}: {e}");
        }
    }
}

/// Every output is open and the capture runs; `status` for `systemctl status`.
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={status}\n"));
}

/// A reload (SIGUSR2) begins; [`ready`] ends it. MONOTONIC_USEC is what
/// `Type=notify-reload` (systemd 253 and later) asks for, ignored before.
pub fn reloading() {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000);
    send(&format!("RELOADING=1\nMONOTONIC_USEC={now}\n"));
}

/// The sensor is stopping: flushing its records.
pub fn stopping() {
    send("STOPPING=1\n");
}
