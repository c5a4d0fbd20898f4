//! `weir flows` against nfdump's own exporter, `nfpcapd -r`, which writes
//! nfcapd files directly: the second trusted exporter of issue 21. weir's
//! records go through nfcapd as in the softflowd comparison; both are read
//! back by nfdump. Flows must agree on the 5-tuple, packets, octets and
//! TCP flags, and a flow both export as one record must start and end within
//! 1 ms in both; every difference is one of [`NfpWhy`], each checked on the
//! records and the packets.
//!
//! Timeouts: nfpcapd takes at most 3600 s for each (`-e 3600,3600`), and
//! applies them in packet time; weir's are made longer than any trace. The
//! traces compared are shorter than an hour (checked), so neither expires
//! a flow before the end of input.

use super::*;

/// Why a flow of nfpcapd's differs from weir's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum NfpWhy {
    /// nfpcapd ends a UDP flow to or from port 53 at every packet ("DNS:
    /// flush immediately", its pcaproc.c), so each DNS packet is a record
    /// of its own; weir keeps one record per direction, as softflowd does.
    /// Checked: the port is 53, every nfpcapd record has one packet, and
    /// they add up to weir's packets and octets.
    DnsPerPacket,
    /// nfpcapd ends an ICMP flow at every packet ("Flush ICMP directly").
    /// Checked as for DNS.
    IcmpPerPacket,
    /// A SYN on ports whose connection ended, or with a new initial
    /// sequence number, starts new records in weir; nfpcapd goes on with the
    /// old flow (as softflowd does: [`Why::NewSyn`]). Checked: more than one
    /// SYN, and weir's records add up to nfpcapd's one.
    NewSyn,
    /// IP fragments. weir rebuilds a datagram to find its ports and counts
    /// each fragment in that flow, and the fragments of a datagram that
    /// never completes are in no record (counted apart). nfpcapd leaves IPv6
    /// fragments unassembled, in a flow of protocol 44 without ports, and
    /// exports an IPv4 datagram that never completed. Checked: the address
    /// pair has fragments (weir's records of it are held to the packets by
    /// the softflowd comparison).
    Fragments,
    /// nfpcapd decapsulates GRE and exports the flows inside (none, for the
    /// ERSPAN frames it cannot decode); weir, like softflowd, exports the
    /// GRE flow itself. Checked: the protocol is GRE and nfpcapd has no
    /// record of it (checked before fragments: erspan.pcap's GRE flow has
    /// fragments too, and nfpcapd has no record of them either).
    Tunnel,
}

/// Compares one trace's flows, exported as IPFIX by weir (through nfcapd)
/// and by `nfpcapd -r`, and returns the differences found, each checked.
pub(super) fn compare_nfpcapd(trace: &Path, queues: Option<&str>) -> Vec<(NfpWhy, Key)> {
    let name = trace.display();
    let truth = read_packets(trace);
    let last_ms = truth.flows.values().map(|t| t.last_ns / 1_000_000).max().unwrap_or(truth.first_ms);
    assert!(last_ms - truth.first_ms < 3_500_000, "{name}: a trace of over an hour: nfpcapd's timeouts would end its flows");
    let w = Collector::start();
    let (source, addr) = (format!("{}{}", trace.display(), queues.unwrap_or("")), w.addr());
    let o = weir(&["flows", &source, "-q", "-n", &addr, "--active-timeout", FOREVER, "--inactive-timeout", FOREVER]);
    assert!(o.status.success(), "weir flows {source}: {}", text(&o.stderr));
    let (weir_rows, _) = w.finish();
    let dir = tempfile::tempdir().unwrap();
    let o = tool("nfpcapd").args(["-r", trace.to_str().unwrap(), "-w", dir.path().to_str().unwrap(), "-e", "3600,3600"]).output().unwrap();
    assert!(o.status.success(), "nfpcapd -r {name}: {}{}", text(&o.stdout), text(&o.stderr));
    let peer_rows = stored_rows(dir.path());

    let (ours, theirs) = (by_key(&weir_rows), by_key(&peer_rows));
    let pair = |a: &str, b: &str| (a.to_string().min(b.to_string()), a.to_string().max(b.to_string()));
    let fragmented = |k: &Key| truth.fragmented.contains(&pair(&k.1, &k.3));
    let mut diffs = Vec::new();
    for k in ours.keys().chain(theirs.keys()).collect::<BTreeSet<_>>() {
        let (a, b) = (ours.get(k).map_or(&[][..], Vec::as_slice), theirs.get(k).map_or(&[][..], Vec::as_slice));
        if counts(a) == counts(b) {
            if let ([x], [y]) = (a, b) {
                assert!(
                    x.start_ms.abs_diff(y.start_ms) <= 1 && x.end_ms.abs_diff(y.end_ms) <= 1,
                    "{name} {k:?}: weir {x:?}, nfpcapd {y:?}: times more than 1 ms apart"
                );
            }
            continue;
        }
        let sum = |rows: &[Row]| rows.iter().fold((0, 0), |(p, o), r| (p + r.packets, o + r.bytes));
        let per_packet = || b.iter().all(|y| y.packets == 1) && sum(a) == sum(b);
        // GRE first: nfpcapd's decapsulation leaves no record of the outer
        // flow, fragmented or not (erspan.pcap's is both).
        let why = if k.0 == "GRE" {
            assert!(b.is_empty(), "{name} {k:?}: nfpcapd {b:?} has the GRE flow");
            NfpWhy::Tunnel
        } else if fragmented(k) {
            NfpWhy::Fragments
        } else if k.0 == "UDP" && (k.2 == "53" || k.4 == "53") {
            assert!(per_packet(), "{name} {k:?}: weir {a:?}, nfpcapd {b:?}: not DNS packet by packet");
            NfpWhy::DnsPerPacket
        } else if k.0.starts_with("ICMP") {
            assert!(per_packet(), "{name} {k:?}: weir {a:?}, nfpcapd {b:?}: not ICMP packet by packet");
            NfpWhy::IcmpPerPacket
        } else if let Some(t) = truth.flows.get(k).filter(|t| {
            let back = truth.flows.get(&(k.0.clone(), k.3.clone(), k.4.clone(), k.1.clone(), k.2.clone()));
            t.syns.max(back.map_or(0, |b| b.syns)) > 1 && a.len() > 1
        }) {
            assert!(matches!(b, [y] if (y.packets, y.bytes) == sum(a) && sum(a).0 == t.packets), "{name} {k:?}: weir {a:?}, nfpcapd {b:?}");
            NfpWhy::NewSyn
        } else {
            panic!("{name} {k:?}: weir {a:?}, nfpcapd {b:?}: a difference with no reason");
        };
        eprintln!("{name} nfpcapd: {why:?} {k:?}: weir {:?}, nfpcapd {:?}", counts(a), counts(b));
        diffs.push((why, k.clone()));
    }
    // The IPv6 fragments nfpcapd left unassembled are in a flow of its own:
    // each such key must be a fragmented pair's (checked above, as Fragments).
    assert!(diffs.iter().filter(|(_, k)| k.0 == "44" || k.0 == "Frag6").all(|(w, _)| *w == NfpWhy::Fragments), "{name}: {diffs:?}");
    diffs
}
