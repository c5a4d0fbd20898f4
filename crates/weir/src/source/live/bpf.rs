//! Errors of the BPF loader (aya) as live sources report them: one line with
//! every cause, the OS error kind kept, and the capability named when the
//! kernel refused. Shared by the AF_XDP program and the AF_PACKET fanout program.

use crate::capture::SourceError;
use std::error::Error;
use std::io;

/// The first OS error code in `e`'s chain of causes.
pub(crate) fn os_error(e: &(dyn Error + 'static)) -> Option<i32> {
    std::iter::successors(Some(e), |e| (*e).source()).find_map(|e| e.downcast_ref::<io::Error>().and_then(io::Error::raw_os_error))
}

/// `e` and its causes, as one line; a cause whose text its parent already
/// includes is left out.
pub(crate) fn chain(e: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    for text in std::iter::successors(Some(e), |e| (*e).source()).map(ToString::to_string) {
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// `e` as an `io::Error` of the kind its OS error has, with every cause in its text.
pub(crate) fn io_error(e: &(dyn Error + 'static)) -> io::Error {
    let kind = os_error(e).map_or(io::ErrorKind::Other, |c| io::Error::from_raw_os_error(c).kind());
    io::Error::new(kind, chain(e))
}

/// An error from the BPF loader, with the capability it needs when it was refused.
pub(crate) fn bpf_error(what: &str, e: &(dyn Error + 'static), needs: &str) -> SourceError {
    denied(what.to_string(), io_error(e), needs)
}

/// An OS error; when it is a refusal (EPERM, EACCES), say which capability is missing.
pub(crate) fn denied(what: String, e: io::Error, needs: &str) -> SourceError {
    if e.kind() == io::ErrorKind::PermissionDenied {
        SourceError::Io { what: format!("{what}: needs {needs} (run as root, or grant it with setcap)"), error: e }
    } else {
        SourceError::Io { what, error: e }
    }
}
