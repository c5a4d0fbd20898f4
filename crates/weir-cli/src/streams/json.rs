//! `weir streams --json`: one JSON object a line per closed stream, its keys
//! in alphabetical order (the order the lines have always had), written by
//! hand into a buffer each queue's writer reuses, with numbers by `itoa`.
//!
//! Why not serde_json: building a document per stream (a map of 22 owned
//! keys and values, then its text) and writing it a line at a time through
//! standard output's line buffer cost about 7 µs a stream on the demo trace,
//! more than everything else the stream layer does for it. Here a line costs
//! its Community ID's SHA-1 and a few hundred bytes of copying, and lines go
//! out in blocks of whole lines, so the queues' lines never interleave.
//!
//! Every string written is weir's own (addresses, names, base64): none needs
//! escaping. The test checks each line against serde_json's rendering of
//! the same object, byte for byte.

use std::net::IpAddr;
use weir::stream::community_id::CommunityId;
use weir::stream::{Direction, Stream};

/// Appends `s`'s line, newline included, to `b`.
pub(crate) fn line(b: &mut Vec<u8>, s: &Stream) {
    b.extend_from_slice(b"{\"bytes\":");
    number(b, s.bytes);
    b.extend_from_slice(b",\"close\":");
    match s.closed {
        Some(c) => string(b, c.name()),
        None => b.extend_from_slice(b"null"),
    }
    b.extend_from_slice(b",\"community_id\":");
    // Streams mode keys ICMP by its addresses only: no ID (null) for it.
    let l4 = weir::stream::community_id::L4::of_key(s.proto, s.sport, s.dport, false);
    match l4.and_then(|l4| CommunityId::default().digest(s.src, s.dst, s.proto, l4)) {
        Some(d) => {
            b.push(b'"');
            CommunityId::render_into(&d, b);
            b.push(b'"');
        }
        None => b.extend_from_slice(b"null"),
    }
    b.extend_from_slice(b",\"cutoff\":");
    match s.cutoff {
        Some(c) => number(b, c),
        None => b.extend_from_slice(b"null"),
    }
    b.extend_from_slice(b",\"delivered\":");
    number(b, s.delivered);
    b.extend_from_slice(match s.direction {
        Direction::Initiator => b",\"direction\":\"initiator\"",
        Direction::Responder => b",\"direction\":\"responder\"",
    });
    b.extend_from_slice(b",\"discarded\":");
    number(b, s.discarded);
    b.extend_from_slice(b",\"dport\":");
    number(b, u64::from(s.dport));
    b.extend_from_slice(b",\"dropped\":");
    number(b, s.dropped);
    b.extend_from_slice(b",\"dst\":");
    address(b, s.dst);
    b.extend_from_slice(b",\"duplicate\":");
    number(b, s.duplicate);
    b.extend_from_slice(b",\"first_ns\":");
    number(b, s.first_ns);
    b.extend_from_slice(b",\"gap\":");
    number(b, s.gap);
    b.extend_from_slice(b",\"last_ns\":");
    number(b, s.last_ns);
    b.extend_from_slice(b",\"mode\":");
    string(b, s.mode.name());
    b.extend_from_slice(b",\"packets\":");
    number(b, s.packets);
    b.extend_from_slice(b",\"priority\":");
    number(b, u64::from(s.priority));
    b.extend_from_slice(b",\"proto\":");
    number(b, u64::from(s.proto));
    b.extend_from_slice(b",\"queue\":");
    number(b, u64::from(s.queue.0));
    b.extend_from_slice(b",\"refused\":");
    number(b, s.refused);
    b.extend_from_slice(b",\"sport\":");
    number(b, u64::from(s.sport));
    b.extend_from_slice(b",\"src\":");
    address(b, s.src);
    b.extend_from_slice(b"}\n");
}

fn number(b: &mut Vec<u8>, n: u64) {
    b.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn string(b: &mut Vec<u8>, s: &str) {
    b.push(b'"');
    b.extend_from_slice(s.as_bytes());
    b.push(b'"');
}

fn address(b: &mut Vec<u8>, a: IpAddr) {
    use std::io::Write;
    b.push(b'"');
    // Writing into a Vec cannot fail.
    let _ = write!(b, "{a}");
    b.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use serde_json::json;
    use weir::stream::{CloseReason, Mode};
    use weir::QueueId;

    /// The line as serde_json renders the object (what `--json` wrote before).
    fn oracle(s: &Stream) -> String {
        let v = json!({
            "src": s.src.to_string(), "sport": s.sport, "dst": s.dst.to_string(), "dport": s.dport,
            "community_id": CommunityId::default().of_key(s.src, s.dst, s.proto, s.sport, s.dport, false),
            "proto": s.proto, "queue": s.queue.0, "direction": format!("{:?}", s.direction).to_lowercase(),
            "first_ns": s.first_ns, "last_ns": s.last_ns, "packets": s.packets, "bytes": s.bytes,
            "delivered": s.delivered, "gap": s.gap, "duplicate": s.duplicate, "discarded": s.discarded,
            "dropped": s.dropped, "refused": s.refused, "cutoff": s.cutoff, "mode": s.mode.name(), "priority": s.priority,
            "close": s.closed.map(|c| c.name()),
        });
        format!("{v}\n")
    }

    #[test]
    fn every_line_is_serde_jsons_rendering_of_the_same_object() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(44);
        let mut b = Vec::new();
        for i in 0..20_000u32 {
            let v4 = rng.gen_bool(0.5);
            let addr = |rng: &mut rand::rngs::StdRng| -> IpAddr {
                if v4 {
                    IpAddr::from(rng.gen::<[u8; 4]>())
                } else {
                    // Runs of zeros too, which the text form compresses.
                    let mut a = rng.gen::<[u16; 8]>();
                    a.iter_mut().filter(|_| rng.gen_bool(0.4)).for_each(|x| *x = 0);
                    IpAddr::from(a)
                }
            };
            // Big numbers now and then: every digit count.
            let n = |rng: &mut rand::rngs::StdRng| -> u64 { rng.gen::<u64>() >> rng.gen_range(0..64) };
            let s = Stream {
                src: addr(&mut rng),
                dst: addr(&mut rng),
                sport: rng.gen(),
                dport: rng.gen(),
                proto: [1, 6, 17, 58, 132, rng.gen()][rng.gen_range(0..6)],
                direction: if rng.gen_bool(0.5) { Direction::Initiator } else { Direction::Responder },
                queue: QueueId(rng.gen_range(0..64)),
                first_ns: n(&mut rng),
                last_ns: n(&mut rng),
                packets: n(&mut rng),
                bytes: n(&mut rng),
                octets: n(&mut rng),
                tcp_flags: rng.gen(),
                delivered: n(&mut rng),
                gap: n(&mut rng),
                duplicate: n(&mut rng),
                discarded: n(&mut rng),
                dropped: n(&mut rng),
                refused: n(&mut rng),
                cutoff: rng.gen_bool(0.5).then(|| n(&mut rng)),
                priority: rng.gen(),
                mode: [Mode::Packets, Mode::TcpFast, Mode::TcpStrict][rng.gen_range(0..3)],
                closed: [
                    None,
                    Some(CloseReason::Fin),
                    Some(CloseReason::Rst),
                    Some(CloseReason::Idle),
                    Some(CloseReason::Evicted),
                    Some(CloseReason::EndOfInput),
                    Some(CloseReason::Reused),
                ][rng.gen_range(0..7)],
            };
            b.clear();
            line(&mut b, &s);
            assert_eq!(String::from_utf8(b.clone()).unwrap(), oracle(&s), "stream {i}: {s:?}");
        }
    }
}
