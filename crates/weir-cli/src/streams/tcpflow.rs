//! tcpflow's names for the files of `weir streams -o DIR`, so that a directory
//! written by weir can be compared file by file with one written by
//! `tcpflow -r TRACE -o DIR` (tcpflow 1.6.1, its default template
//! `%A.%a-%B.%b%V%v%C%c`).
//!
//! What tcpflow 1.6.1 does, as seen by running it over ../shared/corpus:
//! - One file per direction that carried payload, named after the sender
//!   first: `SRC.SPORT-DST.DPORT`. A direction without payload (a SYN, bare
//!   ACKs, a FIN) gets no file.
//! - IPv4 addresses are four decimal octets each zero-padded to 3 digits
//!   (`010.000.014.004`); ports are zero-padded to 5 digits (`00080`).
//! - IPv6 addresses are written as the C library's `inet_ntop` writes them
//!   (RFC 5952 compression of the first longest run of two or more zero
//!   groups, lowercase, `::a.b.c.d` for IPv4-compatible and
//!   `::ffff:a.b.c.d` for IPv4-mapped addresses), not padded; the port is
//!   padded as for IPv4: `2001:6a8:a40::21.00021`.
//! - VLAN: when the frame's outer EtherType is 0x8100, `--` and the whole
//!   16-bit tag control information (priority and DEI bits included, not
//!   only the VLAN id) in decimal: a tag with PCP 5, DEI 1, VID 0 gives
//!   `--45056`, PCP 6 VID 14 gives `--49166`. Only the outer tag counts
//!   (vlan-qinqinq.pcap, tags 30/20/10, gives `--30`); an outer 0x88a8 or
//!   0x9100 tag, and any link type other than Ethernet, give no VLAN part.
//!   The VLAN is not part of tcpflow's flow key: it is taken from the first
//!   packet of the direction.
//! - A later connection whose name is already taken gets `c1`, `c2`, ...
//!   after everything else (`...00080--4093c1`, `...59764c7`). tcpflow finds
//!   the number by trying to create the file (O_EXCL) with 0, 1, 2... until a
//!   name is free, so the number counts earlier files of the same name (same
//!   direction, same VLAN part), not connections of the 4-tuple; and a
//!   directory that already holds files shifts the numbers.
//! - tcpflow also writes `report.xml` (its DFXML run report) into the
//!   directory, which weir does not.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};

/// The name tcpflow gives the file of one direction of a TCP connection.
///
/// `vlan` is the raw tag control information of the outer 802.1Q (0x8100)
/// tag of the direction's first packet, as tcpflow prints it (see the module
/// documentation), or `None`. `connection` is 0 for the first file of this
/// name, 1 for the second (`c1`), and so on.
pub fn file_name(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, vlan: Option<u16>, connection: u32) -> String {
    let mut s = String::with_capacity(48);
    push_addr(&mut s, src);
    let _ = write!(s, ".{sport:05}-");
    push_addr(&mut s, dst);
    let _ = write!(s, ".{dport:05}");
    if let Some(tci) = vlan {
        let _ = write!(s, "--{tci}");
    }
    if connection > 0 {
        let _ = write!(s, "c{connection}");
    }
    s
}

fn push_addr(s: &mut String, addr: IpAddr) {
    match addr {
        IpAddr::V4(a) => {
            let [a, b, c, d] = a.octets();
            let _ = write!(s, "{a:03}.{b:03}.{c:03}.{d:03}");
        }
        IpAddr::V6(a) => push_ipv6(s, a),
    }
}

/// An IPv6 address as glibc's `inet_ntop` writes it. Rust's `Display` differs
/// for IPv4-compatible addresses (`::1.2.3.4`), hence our own.
fn push_ipv6(s: &mut String, addr: Ipv6Addr) {
    let w = addr.segments();
    // The first longest run of zero groups, if it is at least two long.
    let (mut best, mut cur): ((usize, usize), Option<usize>) = ((0, 0), None);
    // A nonzero sentinel after the last group ends a run that reaches it.
    for (i, &group) in w.iter().chain(std::iter::once(&1)).enumerate() {
        match (group == 0, cur) {
            (true, None) => cur = Some(i),
            (false, Some(start)) => {
                if i - start > best.1 {
                    best = (start, i - start);
                }
                cur = None;
            }
            _ => {}
        }
    }
    let run = if best.1 >= 2 { Some(best) } else { None };
    let (mut i, mut after_run) = (0, false);
    while i < 8 {
        if let Some((start, len)) = run {
            if i == start {
                s.push_str("::");
                i += len;
                after_run = true;
                continue;
            }
        }
        if i > 0 && !after_run {
            s.push(':');
        }
        after_run = false;
        // An IPv4-compatible (::a.b.c.d) or IPv4-mapped (::ffff:a.b.c.d) tail.
        if i == 6 && run.is_some_and(|(start, len)| start == 0 && (len == 6 || (len == 5 && w[5] == 0xffff))) {
            let [.., a, b, c, d] = addr.octets();
            let _ = write!(s, "{a}.{b}.{c}.{d}");
            return;
        }
        let _ = write!(s, "{:x}", w[i]);
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Names written by tcpflow 1.6.1 on traces of ../shared/corpus.
    #[test]
    fn names_from_tcpflow_runs() {
        // zeek-traces/http/get-gzip.pcap
        assert_eq!(file_name(ip("54.243.118.187"), 80, ip("141.142.228.5"), 50153, None, 0), "054.243.118.187.00080-141.142.228.005.50153");
        assert_eq!(file_name(ip("141.142.228.5"), 50153, ip("54.243.118.187"), 80, None, 0), "141.142.228.005.50153-054.243.118.187.00080");
        // tcpdump-4.99.3/bgp-encap.pcap: vlan 14, priority 6 (TCI 0xc00e)
        assert_eq!(
            file_name(ip("10.0.14.4"), 179, ip("10.0.14.1"), 63656, Some(0xc00e), 0),
            "010.000.014.004.00179-010.000.014.001.63656--49166"
        );
        // zeek-traces/http-vlan-0.pcap: vlan 0, priority 5, DEI (TCI 0xb000)
        assert_eq!(
            file_name(ip("141.142.228.5"), 59856, ip("192.150.187.43"), 80, Some(0xb000), 0),
            "141.142.228.005.59856-192.150.187.043.00080--45056"
        );
        // zeek-traces/vlan-qinqinq.pcap: tags 30, 20, 10; the outer one counts
        assert_eq!(
            file_name(ip("192.150.187.43"), 80, ip("141.142.228.5"), 59856, Some(30), 0),
            "192.150.187.043.00080-141.142.228.005.59856--30"
        );
        // zeek-traces/mixed-vlan-mpls.pcap: a second file of the same name
        assert_eq!(
            file_name(ip("10.0.0.15"), 80, ip("10.20.80.1"), 50343, Some(4093), 1),
            "010.000.000.015.00080-010.020.080.001.50343--4093c1"
        );
        // zeek-traces/ftp/bigtransfer.pcap: the eighth
        assert_eq!(
            file_name(ip("192.168.56.101"), 37150, ip("192.168.56.1"), 59764, None, 7),
            "192.168.056.101.37150-192.168.056.001.59764c7"
        );
        // zeek-traces/ssh/ssh.pcap
        assert_eq!(
            file_name(ip("192.168.2.158"), 2200, ip("192.168.2.1"), 55179, None, 1),
            "192.168.002.158.02200-192.168.002.001.55179c1"
        );
        // zeek-traces/ftp/ipv6-retr-samba.pcap
        assert_eq!(
            file_name(ip("2001:470:1f05:17a6:213:72ff:fe0d:a566"), 16730, ip("2001:6f8:200:1::5:33"), 21, None, 0),
            "2001:470:1f05:17a6:213:72ff:fe0d:a566.16730-2001:6f8:200:1::5:33.00021"
        );
        // zeek-traces/ftp/ipv6.pcap
        assert_eq!(
            file_name(ip("2001:470:4867:99::21"), 21, ip("2001:470:1f11:81f:c999:d94:aa7c:2e3e"), 49185, None, 0),
            "2001:470:4867:99::21.00021-2001:470:1f11:81f:c999:d94:aa7c:2e3e.49185"
        );
        // zeek-traces/dns-edns-ecs.pcap
        assert_eq!(
            file_name(ip("2001:500:d937::30"), 53, ip("2003:de:2016:120::a08:53"), 39950, None, 0),
            "2001:500:d937::30.00053-2003:de:2016:120::a08:53.39950"
        );
        // zeek-traces/http/1000-requests-one-dropped-response.pcap.gz
        assert_eq!(file_name(ip("::1"), 44730, ip("::1"), 80, None, 0), "::1.44730-::1.00080");
    }

    /// Edge cases of the IPv6 form, checked against glibc's inet_ntop
    /// (Python's socket.inet_ntop on Debian 12).
    #[test]
    fn ipv6_as_glibc_writes_it() {
        let cases = [
            ("::1.2.3.4", "::1.2.3.4"),
            ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
            ("::", "::"),
            ("::1", "::1"),
            ("::0.0.1.2", "::102"),
            ("::0.1.0.0", "::0.1.0.0"),
            ("1:0:2::3", "1:0:2::3"),
            ("1:0:0:2:0:0:3:4", "1::2:0:0:3:4"),
            ("1::", "1::"),
            ("0:0:0:0:0:1:0:0", "::1:0:0"),
            ("1:2:3:4:5:6:7:0", "1:2:3:4:5:6:7:0"),
            ("::ffff:0:1.2.3.4", "::ffff:0:102:304"),
            ("::ffff:0.0.0.0", "::ffff:0.0.0.0"),
            ("64:ff9b::1.2.3.4", "64:ff9b::102:304"),
            ("fe80::1:0:0:1", "fe80::1:0:0:1"),
            ("0:0:1:0:0:0:0:1", "0:0:1::1"),
            ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),
        ];
        for (addr, text) in cases {
            let mut s = String::new();
            push_ipv6(&mut s, addr.parse().unwrap());
            assert_eq!(s, text, "{addr}");
        }
    }

    #[test]
    fn ports_and_octets_are_padded() {
        assert_eq!(file_name(ip("1.2.3.4"), 0, ip("255.255.255.255"), 65535, None, 0), "001.002.003.004.00000-255.255.255.255.65535");
        assert_eq!(file_name(ip("1.2.3.4"), 5, ip("5.6.7.8"), 6, Some(0), 12), "001.002.003.004.00005-005.006.007.008.00006--0c12");
    }
}
