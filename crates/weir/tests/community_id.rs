//! weir's Community ID against the reference implementation, the
//! `communityid` package on PyPI (scripts/setup installs it): random flows
//! of every kind the spec names (TCP, UDP, SCTP, ICMP and ICMPv6 with every
//! type, other protocols without ports, IPv4 and IPv6, equal addresses,
//! both directions, seeds), each hashed by both, every ID equal.

use rand::{Rng, SeedableRng};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Command, Stdio};
use weir::stream::community_id::{CommunityId, L4};

/// Reads `seed proto src dst sport dport` lines (ports `-` for none) and
/// prints the reference's ID of each.
const REFERENCE: &str = r#"
import sys
import communityid
for line in sys.stdin:
    seed, proto, src, dst, sport, dport = line.split()
    proto = int(proto)
    c = communityid.CommunityID(seed=int(seed))
    if sport == "-":
        t = communityid.FlowTuple(proto, src, dst)
    else:
        t = communityid.FlowTuple(proto, src, dst, int(sport), int(dport))
    print(c.calc(t))
"#;

struct Case {
    seed: u16,
    proto: u8,
    src: IpAddr,
    dst: IpAddr,
    l4: L4,
}

fn addr(rng: &mut impl Rng, v6: bool) -> IpAddr {
    // A small pool of addresses, so that equal and near addresses are common.
    if v6 {
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, rng.gen_range(0..3), rng.gen_range(0..4)))
    } else {
        IpAddr::V4(Ipv4Addr::new(198, 18 + rng.gen_range(0..2), 0, rng.gen_range(0..4)))
    }
}

fn case(rng: &mut impl Rng) -> Case {
    let v6 = rng.gen_bool(0.5);
    let (src, dst) = (addr(rng, v6), addr(rng, v6));
    let seed = if rng.gen_bool(0.7) { 0 } else { rng.gen() };
    let small = |rng: &mut dyn rand::RngCore| if rng.gen_bool(0.5) { rng.gen_range(0..4u16) } else { rng.gen::<u16>() };
    let (proto, l4) = match rng.gen_range(0..6) {
        0 => (6, L4::Ports(small(rng), small(rng))),
        1 => (17, L4::Ports(small(rng), small(rng))),
        2 => (132, L4::Ports(small(rng), small(rng))),
        3 if !v6 => (1, L4::Icmp { kind: rng.gen_range(0..20), code: rng.gen_range(0..4) }),
        3 => (58, L4::Icmp { kind: rng.gen_range(125..150), code: rng.gen_range(0..4) }),
        4 => ([47u8, 50, 89, 103][rng.gen_range(0..4)], L4::None),
        _ => (rng.gen_range(0..=255u8), L4::None),
    };
    // The reference requires ports for the protocols that have them.
    let l4 = match (proto, l4) {
        (1 | 58, L4::None) => L4::Icmp { kind: 8, code: 0 },
        (6 | 17 | 132, L4::None) => L4::Ports(1, 2),
        _ => l4,
    };
    Case { seed, proto, src, dst, l4 }
}

#[test]
fn random_flows_get_the_reference_implementations_id() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let cases: Vec<Case> = (0..20_000).map(|_| case(&mut rng)).collect();
    let mut input = String::new();
    for c in &cases {
        let (sport, dport) = match c.l4 {
            L4::Ports(a, b) => (a.to_string(), b.to_string()),
            L4::Icmp { kind, code } => (kind.to_string(), code.to_string()),
            L4::None => ("-".into(), "-".into()),
        };
        input.push_str(&format!("{} {} {} {} {sport} {dport}\n", c.seed, c.proto, c.src, c.dst));
    }
    let mut py = Command::new("python3")
        .args(["-c", REFERENCE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut stdin = py.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = py.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the reference (python3 -m pip install communityid==1.5.0; scripts/setup installs it) failed: {err}");
    let reference: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(reference.len(), cases.len(), "{err}");
    let mut kinds = std::collections::BTreeSet::new();
    for (c, want) in cases.iter().zip(reference) {
        let got = CommunityId::new(c.seed).id(c.src, c.dst, c.proto, c.l4).unwrap();
        assert_eq!(got, want, "seed {} proto {} {} -> {} {:?}", c.seed, c.proto, c.src, c.dst, c.l4);
        kinds.insert(c.proto);
    }
    assert!(kinds.len() > 50, "the cases cover many protocols: {kinds:?}");
}
