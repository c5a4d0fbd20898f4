//! `--biflow` (RFC 5103): the two directions of a connection in one record,
//! the responder's as reverse information elements of the initiator's.
//!
//! The stream layer hands out one record per direction; a queue's [`Pairer`]
//! joins them on the worker, where both directions of a connection are
//! (symmetric RSS): no lock, and no record waits on another queue. A
//! connection is paired from the moment its second direction appears (the
//! layer says so when it creates that stream): a record of one direction
//! waits for the next record of the other, and the two go out as one
//! biflow. The table closes both directions of a connection together, so at
//! the close the last records of both pair up; active-timeout records pair
//! with the other direction's next record. A record that finds no partner
//! goes out alone, its reverse counters 0: one of a connection seen in one
//! direction only, one handed out before the other direction appeared, or
//! one whose direction had a second record before the other had any.
//!
//! So every uniflow record is in exactly one biflow, as its forward or its
//! reverse part: a biflow run holds the same counts as a uniflow run, fewer
//! records. A biflow's first and last packet times are those of both
//! records (see `encode.rs` for why), and its end reason that of the record
//! that completed it (the later one handed out).

use super::encode::{EndReason, FlowRecord, Reverse};
use std::collections::HashMap;
use std::net::IpAddr;
use weir::stream::{Direction, Stream};

/// A connection's key, the same for both directions: protocol, then the
/// two ends in order.
type ConnKey = (u8, (IpAddr, u16), (IpAddr, u16));

fn key(proto: u8, a: (IpAddr, u16), b: (IpAddr, u16)) -> ConnKey {
    if a <= b {
        (proto, a, b)
    } else {
        (proto, b, a)
    }
}

/// A connection with both directions, being paired.
struct Conn {
    /// Its directions not yet closed.
    open: u8,
    /// A record waiting for one of the other direction.
    waiting: Option<(FlowRecord, Direction)>,
}

/// Joins one queue's records into biflows.
#[derive(Default)]
pub struct Pairer {
    conns: HashMap<ConnKey, Conn>,
}

/// What a record gave: up to two records to send now, and whether one of
/// them took another record as its reverse (which is then not sent alone).
#[derive(Default)]
pub struct Out {
    pub send: [Option<FlowRecord>; 2],
    pub folded: bool,
}

impl Pairer {
    /// `s` is the second direction of its connection: pair from now on.
    pub fn both_directions(&mut self, s: &Stream) {
        self.conns.insert(key(s.proto, (s.src, s.sport), (s.dst, s.dport)), Conn { open: 2, waiting: None });
    }

    /// A record of direction `dir` handed out; `last` when its direction
    /// closed with it.
    pub fn record(&mut self, r: FlowRecord, dir: Direction, last: bool) -> Out {
        let k = key(r.proto, (r.src, r.sport), (r.dst, r.dport));
        let mut out = Out::default();
        let Some(conn) = self.conns.get_mut(&k) else {
            out.send[0] = Some(r);
            return out;
        };
        match conn.waiting.take() {
            None => conn.waiting = Some((r, dir)),
            Some((w, wdir)) if wdir != dir => {
                out.send[0] = Some(if dir == Direction::Initiator { join(&r, &w, r.end) } else { join(&w, &r, r.end) });
                out.folded = true;
            }
            Some((w, _)) => {
                out.send[0] = Some(w);
                conn.waiting = Some((r, dir));
            }
        }
        if last {
            conn.open -= 1;
            if conn.open == 0 {
                out.send[1] = conn.waiting.take().map(|(w, _)| w);
                self.conns.remove(&k);
            }
        }
        out
    }

    /// The records still waiting (a connection the layer moved to another
    /// queue's worker, which rebalancing does, closes there): sent alone.
    pub fn drain(&mut self) -> impl Iterator<Item = FlowRecord> + '_ {
        self.conns.drain().filter_map(|(_, c)| c.waiting.map(|(w, _)| w))
    }
}

/// `fwd` with `rev` as its reverse direction, over the time of both,
/// ended for `end`.
fn join(fwd: &FlowRecord, rev: &FlowRecord, end: EndReason) -> FlowRecord {
    let reverse = Reverse { tcp_flags: rev.tcp_flags, packets: rev.packets, octets: rev.octets };
    FlowRecord { start_ms: fwd.start_ms.min(rev.start_ms), end_ms: fwd.end_ms.max(rev.end_ms), end, reverse: Some(reverse), ..*fwd }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const CLIENT: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 40000);
    const SERVER: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)), 443);
    const I: Direction = Direction::Initiator;
    const R: Direction = Direction::Responder;

    fn rec(dir: Direction, packets: u64, t: u64, end: EndReason) -> FlowRecord {
        let ((src, sport), (dst, dport)) = if dir == I { (CLIENT, SERVER) } else { (SERVER, CLIENT) };
        let tcp_flags = if dir == I { 0x02 } else { 0x12 };
        let (octets, start_ms, end_ms) = (packets * 100, t, t + 10);
        FlowRecord { src, dst, sport, dport, proto: 6, tcp_flags, packets, octets, start_ms, end_ms, ingress: 1, end, reverse: None }
    }

    fn sent(out: &Out) -> Vec<FlowRecord> {
        out.send.iter().flatten().copied().collect()
    }

    fn paired() -> Pairer {
        let mut p = Pairer::default();
        p.both_directions(&server_stream());
        p
    }

    /// The responder's stream, as the layer creates it second.
    fn server_stream() -> Stream {
        let r = rec(R, 0, 0, EndReason::Idle);
        Stream {
            src: r.src,
            dst: r.dst,
            sport: r.sport,
            dport: r.dport,
            proto: 6,
            direction: R,
            queue: weir::QueueId(0),
            first_ns: 0,
            last_ns: 0,
            packets: 0,
            bytes: 0,
            octets: 0,
            tcp_flags: 0,
            delivered: 0,
            gap: 0,
            duplicate: 0,
            discarded: 0,
            dropped: 0,
            refused: 0,
            cutoff: None,
            priority: 0,
            mode: weir::stream::Mode::Packets,
            closed: None,
        }
    }

    #[test]
    fn the_two_closing_directions_join_with_the_initiator_forward_over_both_times() {
        for first in [I, R] {
            let mut p = paired();
            let second = if first == I { R } else { I };
            let (a, b) = (rec(first, 3, 100, EndReason::Idle), rec(second, 5, 200, EndReason::Idle));
            assert!(sent(&p.record(a, first, true)).is_empty(), "the first waits for its partner");
            let out = p.record(b, second, true);
            assert!(out.folded);
            let joined = sent(&out);
            let (fwd, rev) = if first == I { (a, b) } else { (b, a) };
            let reverse = Reverse { tcp_flags: rev.tcp_flags, packets: rev.packets, octets: rev.octets };
            let want = FlowRecord { start_ms: 100, end_ms: 210, reverse: Some(reverse), ..fwd };
            assert_eq!(joined, [want]);
            assert_eq!(p.drain().count(), 0, "the connection is gone");
        }
    }

    #[test]
    fn a_record_without_a_partner_goes_alone_and_none_is_lost() {
        // A connection seen one way: no pairing at all.
        let mut p = Pairer::default();
        let lone = rec(I, 1, 0, EndReason::Idle);
        assert_eq!(sent(&p.record(lone, I, true)), [lone]);
        // Two active records of the initiator before any of the responder:
        // the first goes alone, the second joins the responder's close, and
        // the initiator's close, last of all, goes alone.
        let mut p = paired();
        let (a1, a2) = (rec(I, 1, 0, EndReason::Active), rec(I, 2, 300, EndReason::Active));
        assert!(sent(&p.record(a1, I, false)).is_empty());
        assert_eq!(sent(&p.record(a2, I, false)), [a1]);
        let out = p.record(rec(R, 4, 310, EndReason::Idle), R, true);
        assert!(out.folded && sent(&out)[0].reverse.is_some_and(|r| r.packets == 4) && sent(&out)[0].packets == 2);
        let last = rec(I, 7, 400, EndReason::Idle);
        let out = p.record(last, I, true);
        assert!(!out.folded);
        assert_eq!(sent(&out), [last], "the last record of the connection waits for nothing");
        // A connection the layer moved away: what waits comes out at the end.
        let mut p = paired();
        assert!(sent(&p.record(a1, I, false)).is_empty());
        assert_eq!(p.drain().collect::<Vec<_>>(), [a1]);
    }
}
