//! Biflows (RFC 5103): the two directions of a connection in one record, as
//! flow exporters (`weir flows --biflow`) and analysts' tables (the Python
//! package's `weir.flows`, nfstream's rows) give them.
//!
//! The stream layer hands out one record per direction; a queue's [`Pairer`]
//! joins them on the worker, where both directions of a connection are
//! (symmetric RSS): no lock, and no record waits on another queue. A
//! connection is paired from the moment its second direction appears (the
//! layer says so when it creates that stream: call
//! [`Pairer::both_directions`] from [`StreamHandler::created`] when
//! [`StreamCtl::opposite`] is set): a record of one direction waits for the
//! next record of the other, and the two go out as one [`Biflow::Pair`]. The
//! table closes both directions of a connection together, so at the close
//! the last records of both pair up; active-timeout records pair with the
//! other direction's next record. A record that finds no partner goes out
//! [`Biflow::Alone`]: one of a connection seen in one direction only, one
//! handed out before the other direction appeared, or one whose direction
//! had a second record before the other had any.
//!
//! So every record handed in comes out exactly once, alone or in one pair:
//! a biflow run holds the same counts as a uniflow run, in fewer records.
//! The record type `R` is the caller's (an export record, a row of
//! columns); the pairer only moves it.
//!
//! [`StreamHandler::created`]: super::StreamHandler::created
//! [`StreamCtl::opposite`]: super::StreamCtl::opposite

use super::api::{Direction, Stream};
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::net::IpAddr;

/// A connection's key, the same for both directions: protocol, then the
/// two ends in order.
type ConnKey = (u8, (IpAddr, u16), (IpAddr, u16));

fn key(s: &Stream) -> ConnKey {
    let (a, b) = ((s.src, s.sport), (s.dst, s.dport));
    if a <= b {
        (s.proto, a, b)
    } else {
        (s.proto, b, a)
    }
}

/// A connection with both directions, being paired.
struct Conn<R> {
    /// Its directions not yet closed.
    open: u8,
    /// A record waiting for one of the other direction.
    waiting: Option<(R, Direction)>,
}

/// What goes out: one direction's record alone, or both directions' joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Biflow<R> {
    /// A record with no partner.
    Alone(R),
    /// The two directions of a connection.
    Pair {
        /// The record of the initiator's direction.
        initiator: R,
        /// The record of the responder's direction.
        responder: R,
        /// The direction whose record completed the pair (handed in later):
        /// its end is the pair's end.
        last: Direction,
    },
}

/// Joins one queue's records into biflows.
pub struct Pairer<R> {
    conns: HashMap<ConnKey, Conn<R>, RandomState>,
}

impl<R> Default for Pairer<R> {
    fn default() -> Self {
        Pairer { conns: HashMap::default() }
    }
}

impl<R> Pairer<R> {
    /// `s` is the second direction of its connection: pair from now on.
    pub fn both_directions(&mut self, s: &Stream) {
        self.conns.insert(key(s), Conn { open: 2, waiting: None });
    }

    /// A record `r` of stream `s` was handed out; `last` when the stream
    /// closed with it. Returns what goes out now: up to two biflows, in
    /// order (a pair or a record displaced by a newer one of its direction,
    /// then, at the connection's close, the record still waiting).
    pub fn record(&mut self, s: &Stream, r: R, last: bool) -> [Option<Biflow<R>>; 2] {
        let k = key(s);
        let dir = s.direction;
        let mut out = [None, None];
        let Some(conn) = self.conns.get_mut(&k) else {
            out[0] = Some(Biflow::Alone(r));
            return out;
        };
        match conn.waiting.take() {
            None => conn.waiting = Some((r, dir)),
            Some((w, wdir)) if wdir != dir => {
                let (initiator, responder) = if dir == Direction::Initiator { (r, w) } else { (w, r) };
                out[0] = Some(Biflow::Pair { initiator, responder, last: dir });
            }
            Some((w, _)) => {
                out[0] = Some(Biflow::Alone(w));
                conn.waiting = Some((r, dir));
            }
        }
        if last {
            conn.open -= 1;
            if conn.open == 0 {
                out[1] = conn.waiting.take().map(|(w, _)| Biflow::Alone(w));
                self.conns.remove(&k);
            }
        }
        out
    }

    /// The records still waiting (a connection the layer moved to another
    /// queue's worker, which rebalancing does, closes there): they go out alone.
    pub fn drain(&mut self) -> impl Iterator<Item = R> + '_ {
        self.conns.drain().filter_map(|(_, c)| c.waiting.map(|(w, _)| w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::QueueId;
    use std::net::Ipv4Addr;

    const CLIENT: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 40000);
    const SERVER: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)), 443);
    const I: Direction = Direction::Initiator;
    const R: Direction = Direction::Responder;

    /// The stream of direction `dir` of the test connection.
    fn stream(dir: Direction) -> Stream {
        let ((src, sport), (dst, dport)) = if dir == I { (CLIENT, SERVER) } else { (SERVER, CLIENT) };
        Stream {
            src,
            dst,
            sport,
            dport,
            proto: 6,
            direction: dir,
            queue: QueueId(0),
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
            mode: crate::stream::Mode::Packets,
            closed: None,
        }
    }

    /// A record: its direction and a tag to tell records apart.
    type Rec = (Direction, u32);

    fn sent(out: [Option<Biflow<Rec>>; 2]) -> Vec<Biflow<Rec>> {
        out.into_iter().flatten().collect()
    }

    fn paired() -> Pairer<Rec> {
        let mut p = Pairer::default();
        p.both_directions(&stream(R));
        p
    }

    #[test]
    fn the_two_closing_directions_join_whichever_closes_first() {
        for first in [I, R] {
            let mut p = paired();
            let second = if first == I { R } else { I };
            assert!(sent(p.record(&stream(first), (first, 1), true)).is_empty(), "the first waits for its partner");
            let joined = sent(p.record(&stream(second), (second, 2), true));
            let tag = |d| if d == first { 1 } else { 2 };
            assert_eq!(joined, [Biflow::Pair { initiator: (I, tag(I)), responder: (R, tag(R)), last: second }]);
            assert_eq!(p.drain().count(), 0, "the connection is gone");
        }
    }

    #[test]
    fn a_record_without_a_partner_goes_alone_and_none_is_lost() {
        // A connection seen one way: no pairing at all.
        let mut p = Pairer::default();
        assert_eq!(sent(p.record(&stream(I), (I, 1), true)), [Biflow::Alone((I, 1))]);
        // Two active records of the initiator before any of the responder:
        // the first goes alone, the second joins the responder's close, and
        // the initiator's close, last of all, goes alone.
        let mut p = paired();
        assert!(sent(p.record(&stream(I), (I, 1), false)).is_empty());
        assert_eq!(sent(p.record(&stream(I), (I, 2), false)), [Biflow::Alone((I, 1))]);
        assert_eq!(sent(p.record(&stream(R), (R, 3), true)), [Biflow::Pair { initiator: (I, 2), responder: (R, 3), last: R }]);
        assert_eq!(sent(p.record(&stream(I), (I, 4), true)), [Biflow::Alone((I, 4))], "the last record waits for nothing");
        // A connection the layer moved away: what waits comes out at the end.
        let mut p = paired();
        assert!(sent(p.record(&stream(I), (I, 1), false)).is_empty());
        assert_eq!(p.drain().collect::<Vec<_>>(), [(I, 1)]);
    }
}
