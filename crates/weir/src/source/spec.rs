//! Source names, parsed and checked before anything is opened.
//!
//! - `trace.pcap`: a trace file, one queue.
//! - `trace.pcap@0-3`: the trace split into 4 queues by RSS, all opened.
//! - `trace.pcap@2`: queue 2 of the trace split into 3 (queues are numbered from
//!   0, so the last queue named sets how many there are, as on a NIC).
//! - `file:PATH[@RANGE]`: the same, for paths that look like something else.
//! - `-`: a trace on standard input.
//! - `afpacket:eth1@0-3`: four AF_PACKET sockets on eth1 in one fanout group.
//! - `afxdp:eth1@0-3`: one AF_XDP socket on each of eth1's RX queues 0 to 3.
//! - `xdp:eth1`: every RX queue of eth1, copied by weir's XDP program into one ring buffer.
//! - `eth1`, `eth1@2`: a bare interface name means afpacket.
//! - An interface without a range means one queue per RX queue of the device.
//!
//! A path that exists is taken whole even if it contains `@`; a name that is
//! both an existing file and an interface is the file (write `afpacket:` to
//! mean the interface).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Most queues a source may be split into.
const MAX_QUEUES: u16 = 1024;

/// An inclusive range of queue numbers, parsed from `2` or `0-3`. Queues are
/// numbered from 0 and at most 1024; the last one named sets how many queues
/// a trace is split into (`@2` is queue 2 of 3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QueueRange {
    first: u16,
    last: u16,
}

impl QueueRange {
    pub(crate) fn new(first: u16, last: u16) -> Result<QueueRange, SpecError> {
        if first > last {
            return Err(SpecError::Range(format!("{first}-{last}: the first queue is after the last")));
        }
        if last >= MAX_QUEUES {
            return Err(SpecError::Range(format!("queue {last}: at most {MAX_QUEUES} queues")));
        }
        Ok(QueueRange { first, last })
    }

    /// Queue 0 only: a trace as one queue.
    pub fn single() -> QueueRange {
        QueueRange { first: 0, last: 0 }
    }

    pub(crate) fn first(&self) -> u16 {
        self.first
    }

    pub(crate) fn last(&self) -> u16 {
        self.last
    }

    /// Queues the source is split into: every queue up to the last named.
    pub(crate) fn total(&self) -> u16 {
        self.last + 1
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = u16> {
        self.first..=self.last
    }

    /// Queues in the range (not the split's total).
    pub fn len(&self) -> usize {
        usize::from(self.last - self.first) + 1
    }

    /// Always false: a range holds at least one queue.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl fmt::Display for QueueRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

impl FromStr for QueueRange {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let num = |t: &str| t.parse::<u16>().map_err(|_| SpecError::Range(format!("{s:?}: queue numbers are 0 to {}", MAX_QUEUES - 1)));
        match s.split_once('-') {
            Some((a, b)) => QueueRange::new(num(a)?, num(b)?),
            None => {
                let q = num(s)?;
                QueueRange::new(q, q)
            }
        }
    }
}

/// A parsed source name (see the module doc for the forms it takes). Parsing
/// looks at the file system and at the interfaces of this network namespace to
/// tell a file from an interface; its `Display` is the explicit form
/// (`file:trace.pcap@0-3`, `afpacket:eth1`), which parses back to the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceSpec {
    /// A pcap or pcapng trace (`None` path = standard input).
    File {
        /// The trace; `None` is standard input.
        path: Option<PathBuf>,
        /// The queues opened, of a split into `queues.last() + 1`.
        queues: QueueRange,
    },
    /// A live interface.
    Live {
        /// How it is captured.
        kind: LiveKind,
        /// The interface's name (checked for form only: whether it exists is
        /// asked when it is opened, in the namespace it is opened in).
        iface: String,
        /// The queues opened; `None` means every RX queue of the device.
        queues: Option<QueueRange>,
    },
}

/// How a live interface is captured.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LiveKind {
    /// `afpacket:`: one TPACKET_V3 socket per queue in a fanout group.
    AfPacket,
    /// `afxdp:`: one AF_XDP socket per RX queue, fed by weir's XDP program
    /// (loading it needs CAP_BPF and CAP_NET_ADMIN, the sockets CAP_NET_RAW).
    AfXdp,
    /// `xdp:`: weir's XDP program copies each packet of the captured RX
    /// queues into one BPF ring buffer, packed end to end (CAP_BPF and
    /// CAP_NET_ADMIN); the host keeps its traffic.
    Xdp,
}

impl LiveKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            LiveKind::AfPacket => "afpacket",
            LiveKind::AfXdp => "afxdp",
            LiveKind::Xdp => "xdp",
        }
    }
}

/// Interface names are at most 15 bytes (IFNAMSIZ - 1), without '/' or spaces.
fn valid_iface(name: &str) -> bool {
    !name.is_empty() && name.len() < 16 && !name.contains(['/', ' ', ':', '@']) && name != "." && name != ".."
}

/// Does this network interface exist in our network namespace?
fn iface_exists(name: &str) -> bool {
    valid_iface(name) && Path::new("/sys/class/net").join(name).exists()
}

/// Split `NAME[@RANGE]` for a live source.
fn live(kind: LiveKind, rest: &str) -> Result<SourceSpec, SpecError> {
    let (iface, queues) = match rest.rsplit_once('@') {
        Some((name, range)) => (name, Some(range.parse()?)),
        None => (rest, None),
    };
    // Whether it exists is asked when it is opened, in the namespace it is opened in.
    if !valid_iface(iface) {
        return Err(SpecError::BadInterface(iface.into()));
    }
    Ok(SourceSpec::Live { kind, iface: iface.into(), queues })
}

/// A source name that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The queue range is malformed, backwards or beyond 1023; the text says which.
    #[error("queue range {0}")]
    Range(String),
    /// The name is neither an existing file nor an interface here.
    #[error("{0:?}: no such file or network interface")]
    NotFound(String),
    /// Not an interface name: empty, longer than 15 bytes, or holding `/`, a
    /// space, `:` or `@`.
    #[error("{0:?} is not a valid interface name")]
    BadInterface(String),
    /// The name is empty.
    #[error("empty source name")]
    Empty,
    /// `file:` with no path.
    #[error("{0:?} names no file: give file:PATH, or file:- for standard input")]
    NoPath(String),
}

impl FromStr for SourceSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        if s.is_empty() {
            return Err(SpecError::Empty);
        }
        if let Some(rest) = s.strip_prefix("afpacket:") {
            return live(LiveKind::AfPacket, rest);
        }
        if let Some(rest) = s.strip_prefix("afxdp:") {
            return live(LiveKind::AfXdp, rest);
        }
        if let Some(rest) = s.strip_prefix("xdp:") {
            return live(LiveKind::Xdp, rest);
        }
        let (explicit, rest) = match s.strip_prefix("file:") {
            Some(r) => (true, r),
            None => (false, s),
        };
        if explicit && (rest.is_empty() || rest.starts_with('@')) {
            return Err(SpecError::NoPath(s.into()));
        }
        if rest == "-" {
            return Ok(SourceSpec::File { path: None, queues: QueueRange::single() });
        }
        if Path::new(rest).exists() {
            return Ok(SourceSpec::File { path: Some(PathBuf::from(rest)), queues: QueueRange::single() });
        }
        if let Some((name, range)) = rest.rsplit_once('@') {
            if !range.is_empty() && range.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
                let queues = range.parse()?;
                if name == "-" {
                    return Ok(SourceSpec::File { path: None, queues });
                }
                if Path::new(name).exists() || explicit {
                    return Ok(SourceSpec::File { path: Some(PathBuf::from(name)), queues });
                }
                if iface_exists(name) {
                    return Ok(SourceSpec::Live { kind: LiveKind::AfPacket, iface: name.into(), queues: Some(queues) });
                }
                return Err(SpecError::NotFound(name.into()));
            }
        }
        if explicit {
            return Ok(SourceSpec::File { path: Some(PathBuf::from(rest)), queues: QueueRange::single() });
        }
        if iface_exists(rest) {
            return Ok(SourceSpec::Live { kind: LiveKind::AfPacket, iface: rest.into(), queues: None });
        }
        Err(SpecError::NotFound(rest.into()))
    }
}

impl fmt::Display for SourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceSpec::File { path, queues } => {
                let p = path.as_deref().map_or("-".into(), |p| p.display().to_string());
                if queues.total() == 1 {
                    write!(f, "file:{p}")
                } else {
                    write!(f, "file:{p}@{queues}")
                }
            }
            SourceSpec::Live { kind, iface, queues: Some(q) } => write!(f, "{}:{iface}@{q}", kind.name()),
            SourceSpec::Live { kind, iface, queues: None } => write!(f, "{}:{iface}", kind.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_table() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t.pcap");
        let at = dir.path().join("odd@1.pcap");
        std::fs::write(&t, b"").unwrap();
        std::fs::write(&at, b"").unwrap();
        let t_s = t.to_str().unwrap();
        let file = |p: &Path, a: u16, b: u16| SourceSpec::File { path: Some(p.into()), queues: QueueRange::new(a, b).unwrap() };
        let cases: Vec<(String, Result<SourceSpec, SpecError>)> = vec![
            (t_s.into(), Ok(file(&t, 0, 0))),
            (format!("{t_s}@0-3"), Ok(file(&t, 0, 3))),
            (format!("{t_s}@2"), Ok(file(&t, 2, 2))),
            (format!("file:{t_s}@1-1"), Ok(file(&t, 1, 1))),
            (at.to_str().unwrap().into(), Ok(file(&at, 0, 0))),
            ("-".into(), Ok(SourceSpec::File { path: None, queues: QueueRange::single() })),
            ("-@0-1".into(), Ok(SourceSpec::File { path: None, queues: QueueRange::new(0, 1).unwrap() })),
            (format!("{t_s}@3-1"), Err(SpecError::Range("3-1: the first queue is after the last".into()))),
            (format!("{t_s}@0-5000"), Err(SpecError::Range("queue 5000: at most 1024 queues".into()))),
            ("/nonexistent/x.pcap".into(), Err(SpecError::NotFound("/nonexistent/x.pcap".into()))),
            ("nosuchif0@0-3".into(), Err(SpecError::NotFound("nosuchif0".into()))),
            ("lo".into(), Ok(SourceSpec::Live { kind: LiveKind::AfPacket, iface: "lo".into(), queues: None })),
            ("lo@0".into(), Ok(SourceSpec::Live { kind: LiveKind::AfPacket, iface: "lo".into(), queues: Some(QueueRange::single()) })),
            (
                "afxdp:lo@0-1".into(),
                Ok(SourceSpec::Live { kind: LiveKind::AfXdp, iface: "lo".into(), queues: Some(QueueRange::new(0, 1).unwrap()) }),
            ),
            ("xdp:lo".into(), Ok(SourceSpec::Live { kind: LiveKind::Xdp, iface: "lo".into(), queues: None })),
            ("afpacket:inanotherns0".into(), Ok(SourceSpec::Live { kind: LiveKind::AfPacket, iface: "inanotherns0".into(), queues: None })),
            ("afpacket:a/b".into(), Err(SpecError::BadInterface("a/b".into()))),
            ("afpacket:waytoolonginterfacename".into(), Err(SpecError::BadInterface("waytoolonginterfacename".into()))),
            ("".into(), Err(SpecError::Empty)),
        ];
        for (name, want) in cases {
            assert_eq!(name.parse::<SourceSpec>(), want, "{name}");
        }
    }

    #[test]
    fn range_counts() {
        let r: QueueRange = "2-5".parse().unwrap();
        assert_eq!((r.first(), r.last(), r.total(), r.len()), (2, 5, 6, 4));
        assert_eq!(r.iter().collect::<Vec<_>>(), [2, 3, 4, 5]);
        assert_eq!(r.to_string(), "2-5");
    }
}
