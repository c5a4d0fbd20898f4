//! Telling systemd how the run goes: the `sd_notify` protocol, for services
//! of `Type=notify` (and `Type=notify-reload`).
//!
//! The protocol is one datagram of newline-separated `KEY=VALUE` assignments
//! sent to the unix socket that `$NOTIFY_SOCKET` names: a file-system path, or
//! an abstract socket when the name starts with `@`. It is stable (systemd
//! documents it in sd_notify(3) as an interface others may implement) and is
//! a few lines with std's [`UnixDatagram`], so it is written here by hand,
//! with no `unsafe` and no library to link.
//!
//! Contract:
//! * With `$NOTIFY_SOCKET` unset or empty, nothing is sent and nothing fails:
//!   weir run by hand, or by a unit of another type, behaves as before.
//! * Nothing here fails the run. [`send`] returns its error to a caller who
//!   wants it; [`ready`], [`reloading`], [`stopping`] and [`status`] say the
//!   first failure on standard error, once per process, and go on.
//! * `READY=1` goes once the capture runs, root is dropped and every output
//!   is open (files, collectors, the metrics endpoint): from then on a
//!   `Type=notify` unit is "active". After a reload, `READY=1` again.
//! * `RELOADING=1` carries `MONOTONIC_USEC=` (CLOCK_MONOTONIC, µs), which
//!   systemd 253 and later want for `Type=notify-reload`; older ones ignore it.
//! * `STOPPING=1` goes once per process, when the run begins to stop: on the
//!   first SIGINT or SIGTERM, or when the capture ends on its own.
//! * `STATUS=` is one line: newlines in the text become spaces, since a
//!   newline would begin another assignment.
//!
//! Only the datagram is sent: systemd learns the sender from the socket's
//! credentials, so no `MAINPID=` is needed for weir itself.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// The environment variable systemd sets for a service that may notify.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Where notifications go.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// A socket in the file system.
    Path(PathBuf),
    /// An abstract socket: the name after the `@`.
    Abstract(Vec<u8>),
}

/// A notification that could not be sent, with the socket it was for.
#[derive(Debug)]
pub struct NotifyError {
    /// `$NOTIFY_SOCKET` as it was set.
    pub socket: String,
    /// What went wrong.
    pub source: io::Error,
}

impl std::fmt::Display for NotifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot notify systemd at {NOTIFY_SOCKET}={}: {}", self.socket, self.source)
    }
}

impl std::error::Error for NotifyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Where `$NOTIFY_SOCKET`'s value points: `None` for an empty value (as
/// unset), an error for what systemd's own client would not send to either
/// (a relative path; `vsock:` addresses, which weir does not speak).
pub fn target(value: &OsStr) -> io::Result<Option<Target>> {
    let bytes = value.as_bytes();
    match bytes.first() {
        None => Ok(None),
        Some(b'@') => Ok(Some(Target::Abstract(bytes[1..].to_vec()))),
        Some(b'/') => Ok(Some(Target::Path(PathBuf::from(value)))),
        Some(_) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an absolute path or an abstract socket name (@NAME): weir speaks to no other kind of address",
        )),
    }
}

/// Send `message` (assignments, one a line) as one datagram to
/// `$NOTIFY_SOCKET`. `Ok(false)` when the variable is unset or empty.
///
/// # Errors
///
/// A value that names no socket weir can reach, or the socket's refusal
/// (no one listening, no permission).
pub fn send(message: &str) -> Result<bool, NotifyError> {
    let Some(value) = std::env::var_os(NOTIFY_SOCKET) else { return Ok(false) };
    let error = |source| NotifyError { socket: value.to_string_lossy().into_owned(), source };
    let Some(to) = target(&value).map_err(error)? else { return Ok(false) };
    send_to(&to, message).map_err(error)?;
    Ok(true)
}

/// Send `message` as one datagram to `to`.
pub fn send_to(to: &Target, message: &str) -> io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    let sent = match to {
        Target::Path(path) => socket.send_to(message.as_bytes(), path)?,
        Target::Abstract(name) => socket.send_to_addr(message.as_bytes(), &SocketAddr::from_abstract_name(name)?)?,
    };
    if sent != message.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, format!("sent {sent} of {} bytes", message.len())));
    }
    Ok(())
}

/// `READY=1`, with a status line when `status` is not empty.
pub fn ready_message(status: &str) -> String {
    let mut m = String::from("READY=1\n");
    if !status.is_empty() {
        m += &status_message(status);
    }
    m
}

/// `RELOADING=1` with the monotonic clock at `monotonic_usec`.
pub fn reloading_message(monotonic_usec: u64) -> String {
    format!("RELOADING=1\nMONOTONIC_USEC={monotonic_usec}\n")
}

/// `STOPPING=1`.
pub fn stopping_message() -> String {
    "STOPPING=1\n".to_string()
}

/// `STATUS=` and the text on one line.
pub fn status_message(text: &str) -> String {
    let line: String = text.chars().map(|c| if c == '\n' || c == '\r' { ' ' } else { c }).collect();
    format!("STATUS={line}\n")
}

/// CLOCK_MONOTONIC in microseconds, the clock `MONOTONIC_USEC` is on.
fn monotonic_usec() -> io::Result<u64> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_err(io::Error::from)?;
    let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
    Ok(secs.saturating_mul(1_000_000).saturating_add(nanos / 1000))
}

/// The first failure was said.
static SAID: AtomicBool = AtomicBool::new(false);
/// `STOPPING=1` was sent (or tried).
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Send `message`; say the first failure of the process on standard error.
/// True when it was sent.
fn send_or_say(message: &str) -> bool {
    match send(message) {
        Ok(sent) => sent,
        Err(e) => {
            // Relaxed: only whether someone said it already matters.
            if !SAID.swap(true, Ordering::Relaxed) {
                eprintln!("weir: {e} (said once; the run goes on)");
            }
            false
        }
    }
}

/// `READY=1` and `status`: the service is up (again, after a reload).
pub fn ready(status: &str) -> bool {
    send_or_say(&ready_message(status))
}

/// `RELOADING=1` with `MONOTONIC_USEC`: a reload begins (the sensor's
/// SIGUSR2); [`ready`] ends it.
pub fn reloading() -> bool {
    match monotonic_usec() {
        Ok(usec) => send_or_say(&reloading_message(usec)),
        // Without the clock, the plain message older systemds take.
        Err(_) => send_or_say("RELOADING=1\n"),
    }
}

/// `STOPPING=1`, once per process: the run begins to stop.
pub fn stopping() -> bool {
    // Relaxed: a once flag; the datagram itself orders nothing.
    if STOPPING.swap(true, Ordering::Relaxed) {
        return false;
    }
    send_or_say(&stopping_message())
}

/// `STATUS=` and `text`, shown by `systemctl status` (the sensor's status
/// line; the commands send theirs with READY=1).
pub fn status(text: &str) -> bool {
    send_or_say(&status_message(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_assignments_one_a_line() {
        assert_eq!(ready_message(""), "READY=1\n");
        assert_eq!(ready_message("weir record: capturing"), "READY=1\nSTATUS=weir record: capturing\n");
        assert_eq!(reloading_message(1_234_567), "RELOADING=1\nMONOTONIC_USEC=1234567\n");
        assert_eq!(stopping_message(), "STOPPING=1\n");
        assert_eq!(status_message("two\nlines\r\nhere"), "STATUS=two lines  here\n", "no newline can start another assignment");
    }

    #[test]
    fn the_socket_is_a_path_or_an_abstract_name() {
        assert_eq!(target(OsStr::new("")).unwrap(), None);
        assert_eq!(target(OsStr::new("/run/systemd/notify")).unwrap(), Some(Target::Path("/run/systemd/notify".into())));
        assert_eq!(
            target(OsStr::new("@/org/freedesktop/systemd1/notify/42")).unwrap(),
            Some(Target::Abstract(b"/org/freedesktop/systemd1/notify/42".to_vec()))
        );
        for bad in ["run/notify", "vsock:2:1234"] {
            assert_eq!(target(OsStr::new(bad)).unwrap_err().kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn one_datagram_reaches_a_socket_bound_at_a_path_and_at_an_abstract_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.sock");
        let rx = UnixDatagram::bind(&path).unwrap();
        send_to(&Target::Path(path), &reloading_message(7)).unwrap();
        let mut buf = [0u8; 256];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"RELOADING=1\nMONOTONIC_USEC=7\n");

        let name = format!("weir-notify-unit-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        send_to(&Target::Abstract(name.into_bytes()), &ready_message("up")).unwrap();
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=up\n");
    }

    #[test]
    fn the_monotonic_clock_is_read() {
        let a = monotonic_usec().unwrap();
        let b = monotonic_usec().unwrap();
        assert!(a > 0 && b >= a);
    }
}
