//! `ADDR:PORT`, parsed and bound. Binding happens when the option is read,
//! before the engine opens anything, so every reason it cannot be served is
//! said first, naming the value.
//!
//! `:PORT` is loopback (127.0.0.1): the endpoint has no authentication and
//! shows source names, paths and the version, so serving every interface
//! takes an address that says so, `0.0.0.0:PORT` (or `[::]:PORT`).

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};

/// Why `ADDR:PORT` cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Not an address and port.
    #[error("{spec:?}: {why}; expected ADDR:PORT, e.g. 127.0.0.1:9101 (or :9101), [::1]:9101, or 0.0.0.0:9101 for every interface")]
    Parse {
        /// The value as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// Another socket has the port.
    #[error("{addr}: the port is in use; choose another (port 0 takes a free one and says which)")]
    InUse {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The port needs a privilege this process lacks.
    #[error("{addr}: permission denied (a port below 1024 needs root or CAP_NET_BIND_SERVICE)")]
    Permission {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The address is none of this host's.
    #[error("{addr}: {ip} is not an address of this host")]
    NotLocal {
        /// The address asked for.
        addr: SocketAddr,
        /// Its IP.
        ip: IpAddr,
    },
    /// Anything else the system refused.
    #[error("{addr}: {error}")]
    Io {
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        error: io::Error,
    },
}

impl ListenError {
    /// True for what the user chose (the value, the port, the address), false
    /// for a failure of the system.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, ListenError::Io { .. })
    }
}

/// A bound socket for `/metrics`, not answering yet.
#[derive(Debug)]
pub struct Listener {
    pub(crate) socket: TcpListener,
    addr: SocketAddr,
}

impl Listener {
    /// The address bound: with port 0, the port the system chose.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where a scraper finds the metrics.
    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }
}

/// Parse `spec` and bind it.
pub fn listen(spec: &str) -> Result<Listener, ListenError> {
    let addr = parse(spec)?;
    let socket = TcpListener::bind(addr).map_err(|error| match error.kind() {
        io::ErrorKind::AddrInUse => ListenError::InUse { addr },
        io::ErrorKind::PermissionDenied => ListenError::Permission { addr },
        io::ErrorKind::AddrNotAvailable => ListenError::NotLocal { addr, ip: addr.ip() },
        _ => ListenError::Io { addr, error },
    })?;
    // std listens with an accept queue of 128: a burst of connections (a
    // crowd of idle ones, while the accepting thread waits for a CPU) would
    // overflow it, and each connection refused there waits a second for the
    // client's SYN to be sent again. The system's largest queue instead.
    nix::sys::socket::listen(&socket, nix::sys::socket::Backlog::MAXCONN)
        .map_err(|e| ListenError::Io { addr, error: io::Error::from(e) })?;
    let addr = socket.local_addr().map_err(|error| ListenError::Io { addr, error })?;
    Ok(Listener { socket, addr })
}

/// `IP:PORT`, `[IPv6]:PORT`, `localhost:PORT` or `:PORT` (both 127.0.0.1;
/// Prometheus' exporters read `:PORT` as every interface, which weir serves
/// only when asked by address, `0.0.0.0:PORT`). No name is looked up: an
/// exporter's address should not depend on DNS.
pub fn parse(spec: &str) -> Result<SocketAddr, ListenError> {
    let bad = |why: String| ListenError::Parse { spec: spec.to_string(), why };
    let s = spec.trim();
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(bad("no port".into()));
    };
    let port: u16 = port.parse().map_err(|_| bad(format!("port {port:?} is not a number from 0 to 65535")))?;
    let ip = match host {
        "" | "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h => match h.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) => v6.parse().map_err(|_| bad(format!("{v6:?} is not an IPv6 address")))?,
            None if h.contains(':') => return Err(bad("an IPv6 address goes in brackets, as [::1]:9101".into())),
            None => h.parse().map_err(|_| bad(format!("{h:?} is not an IP address (names are not looked up)")))?,
        },
    };
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_as_exporters_write_them() {
        assert_eq!(parse("127.0.0.1:9101").unwrap(), "127.0.0.1:9101".parse().unwrap());
        assert_eq!(parse(" [::1]:0 ").unwrap(), "[::1]:0".parse().unwrap());
        assert_eq!(parse(":9101").unwrap(), "127.0.0.1:9101".parse().unwrap());
        assert_eq!(parse("0.0.0.0:9101").unwrap(), "0.0.0.0:9101".parse().unwrap());
        assert_eq!(parse("localhost:80").unwrap(), "127.0.0.1:80".parse().unwrap());
    }

    #[test]
    fn bad_values_name_what_is_wrong() {
        for (spec, says) in [
            ("9101", "no port"),
            ("127.0.0.1:", "port \"\""),
            ("127.0.0.1:65536", "from 0 to 65535"),
            ("127.0.0.1:http", "port \"http\""),
            ("example.org:9101", "not an IP address"),
            ("::1:9101", "in brackets"),
            ("[::g]:1", "not an IPv6 address"),
        ] {
            let e = parse(spec).unwrap_err();
            assert!(e.is_bad_input());
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("{spec:?}: ")) && msg.contains(says), "{spec}: {msg}");
        }
    }

    #[test]
    fn a_port_in_use_is_refused_by_name() {
        let first = listen("127.0.0.1:0").unwrap();
        let taken = first.local_addr().to_string();
        let e = listen(&taken).unwrap_err();
        assert!(matches!(e, ListenError::InUse { .. }) && e.is_bad_input(), "{e}");
        assert!(e.to_string().contains(&taken) && e.to_string().contains("in use"), "{e}");
    }

    #[test]
    fn an_address_of_another_host_is_refused() {
        // TEST-NET-1 (RFC 5737) is never assigned to a host.
        let e = listen("192.0.2.1:9101").unwrap_err();
        assert!(matches!(e, ListenError::NotLocal { .. }), "{e}");
    }
}
