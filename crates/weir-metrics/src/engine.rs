//! The engine's and forward's counters as metrics ([`crate::catalogue`] has
//! every name and help text).

use crate::catalogue as c;
use crate::families::Labels;
use crate::{Families, Scrape, STREAMS_WAIT};
use weir::engine::Watch;
use weir::forward::LaneWatch;
use weir::stats::BATCH_SIZE_BOUNDS;

/// The metrics of one engine: a command's, or one libpcap handle's.
pub struct EngineMetrics {
    watch: Watch,
    /// Labels every sample gets besides `queue` and `source` (a libpcap
    /// handle's number, where a program opens several).
    extra: Vec<(String, String)>,
}

impl EngineMetrics {
    /// The metrics of the engine `watch` reads.
    pub fn new(watch: Watch) -> Self {
        EngineMetrics { watch, extra: Vec::new() }
    }

    /// Give every sample the label `name="value"` as well.
    pub fn with_label(mut self, name: &str, value: &str) -> Self {
        self.extra.push((name.to_string(), value.to_string()));
        self
    }
}

impl Scrape for EngineMetrics {
    fn collect(&self, out: &mut Families) {
        let source = self.watch.source();
        let extra: Vec<(&str, &str)> = self.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        // The labels of queue `q`'s samples, then `more` of a metric's own.
        let labels = |q: &str, more: Labels<'_>| -> Vec<(String, String)> {
            [("queue", q), ("source", source)].iter().chain(&extra).chain(more).map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let stats = self.watch.stats();
        for s in &stats.queues {
            let q = s.queue.0.to_string();
            let l = labels(&q, &[]);
            let l = as_refs(&l);
            out.counter(&c::RECEIVED, &l, s.received as f64);
            out.counter(&c::DELIVERED, &l, s.delivered as f64);
            out.counter(&c::FILTERED, &l, s.filtered as f64);
            for (category, n) in [("capture", s.capture_drops), ("delivery", s.delivery_drops)] {
                let l = labels(&q, &[("category", category)]);
                out.counter(&c::DROPPED, &as_refs(&l), n as f64);
            }
            out.counter(&c::UNREAD, &l, s.unread as f64);
            out.gauge(&c::IN_FLIGHT, &l, s.in_flight as f64);
            out.counter(&c::OFFLOADED, &l, s.offloaded as f64);
            out.counter(&c::RECEIVED_BYTES, &l, s.received_bytes as f64);
            out.counter(&c::DELIVERED_BYTES, &l, s.delivered_bytes as f64);
            out.counter(&c::BAD_RECYCLES, &l, s.bad_recycles as f64);
        }
        for p in self.watch.pools() {
            let l = labels(&p.queue.0.to_string(), &[]);
            let l = as_refs(&l);
            out.gauge(&c::POOL_CHUNKS, &l, p.chunks as f64);
            out.gauge(&c::POOL_CHUNKS_IN_USE, &l, p.chunks_in_use as f64);
            out.gauge(&c::POOL_CELLS_PER_CHUNK, &l, p.cells_per_chunk as f64);
        }
        let bounds = BATCH_SIZE_BOUNDS.map(|b| b as f64);
        for (queue, sizes) in self.watch.locality() {
            let q = queue.map_or_else(|| "all".to_string(), |q| q.0.to_string());
            let l = labels(&q, &[]);
            out.histogram(&c::LOCALITY_BATCH, &as_refs(&l), &bounds, &sizes.counts, sizes.packets as f64);
        }
        if let Some(b) = self.watch.balance() {
            // Rebalancing is the engine's, not a queue's: no queue label.
            let l: Vec<(String, String)> = [("source", source)].iter().chain(&extra).map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let l = as_refs(&l);
            out.counter(&c::REBALANCE_MOVES, &l, b.moves_started as f64);
            out.counter(&c::REBALANCE_BUCKETS, &l, b.buckets_moved as f64);
            out.counter(&c::REBALANCE_PARKED, &l, b.parked as f64);
            for (category, n) in [("park", b.park_drops), ("handover", b.handover_drops)] {
                let mut lc = l.clone();
                lc.push(("category", category));
                out.counter(&c::REBALANCE_DROPPED, &lc, n as f64);
            }
            out.gauge(&c::REBALANCE_PARKED_PEAK, &l, b.parked_bytes_peak as f64);
        }
        for (queue, now) in self.watch.streams(STREAMS_WAIT) {
            let q = queue.0.to_string();
            let s = &now.stats;
            let by = |out: &mut Families, def: &c::Def, label: &str, values: &[(&str, u64)]| {
                for (value, n) in values {
                    let l = labels(&q, &[(label, value)]);
                    out.counter(def, &as_refs(&l), *n as f64);
                }
            };
            by(
                out,
                &c::STREAM_PACKETS,
                "category",
                &[
                    ("stream", s.to_stream),
                    ("not_ip", s.not_ip),
                    ("malformed", s.malformed),
                    ("fragment", s.fragments),
                    ("untracked", s.untracked),
                    ("past_cutoff", s.discarded_packets),
                    ("memory", s.dropped_packets),
                ],
            );
            by(
                out,
                &c::STREAMS_CLOSED,
                "reason",
                &[
                    ("fin", s.closed_fin),
                    ("rst", s.closed_rst),
                    ("idle", s.closed_idle),
                    ("evicted", s.evicted),
                    ("end", s.closed_end),
                    ("reused", s.closed_reused),
                ],
            );
            by(
                out,
                &c::STREAM_BYTES,
                "category",
                &[
                    ("delivered", s.delivered),
                    ("gap", s.gap),
                    ("duplicate", s.duplicate),
                    ("past_cutoff", s.discarded),
                    ("memory", s.dropped),
                    ("refused", s.refused),
                ],
            );
            by(
                out,
                &c::KERNEL_INSTALLS,
                "result",
                &[("installed", s.kernel.installed), ("full", s.kernel.full), ("failed", s.kernel.failed)],
            );
            let l = labels(&q, &[]);
            let l = as_refs(&l);
            out.counter(&c::STREAMS_CREATED, &l, s.streams as f64);
            out.counter(&c::STREAM_CONNECTIONS, &l, s.connections as f64);
            out.counter(&c::STREAM_CONNECTIONS_HANDED_IN, &l, s.handed_in as f64);
            out.gauge(&c::STREAM_CONNECTIONS_OPEN, &l, now.connections_open as f64);
            out.counter(&c::STREAM_CAPTURED_BYTES, &l, s.bytes as f64);
            out.counter(&c::STREAM_PIECES, &l, s.pieces as f64);
            out.counter(&c::STREAM_ACTIVE_RECORDS, &l, s.active_records as f64);
            out.gauge(&c::STREAM_MEMORY, &l, now.memory_bytes as f64);
            out.gauge(&c::STREAM_MEMORY_PEAK, &l, s.memory_peak as f64);
            out.counter(&c::STREAM_DATAGRAMS_REASSEMBLED, &l, s.fragment.datagrams_reassembled as f64);
            out.gauge(&c::KERNEL_ENTRIES, &l, s.kernel.in_map() as f64);
            out.counter(&c::KERNEL_PACKETS, &l, s.kernel.packets as f64);
            out.counter(&c::KERNEL_BYTES, &l, s.kernel.octets as f64);
        }
    }
}

/// The metrics of a forwarder's lanes.
pub struct ForwardMetrics {
    watch: LaneWatch,
}

impl ForwardMetrics {
    /// The metrics of the lanes `watch` reads.
    pub fn new(watch: LaneWatch) -> Self {
        ForwardMetrics { watch }
    }
}

impl Scrape for ForwardMetrics {
    fn collect(&self, out: &mut Families) {
        for s in self.watch.stats() {
            let l = [("lane", s.lane.as_str())];
            out.counter(&c::FORWARD_RECEIVED, &l, s.received as f64);
            out.counter(&c::FORWARD_FORWARDED, &l, s.forwarded as f64);
            out.counter(&c::FORWARD_FILTERED, &l, s.filtered as f64);
            out.counter(&c::FORWARD_DROPPED, &l, s.dropped as f64);
            out.counter(&c::FORWARD_TX_FAILED, &l, s.tx_failed as f64);
            out.gauge(&c::FORWARD_IN_FLIGHT, &l, s.in_flight as f64);
            out.counter(&c::FORWARD_KERNEL_DROPS, &l, s.kernel_drops as f64);
            out.counter(&c::FORWARD_RECEIVED_BYTES, &l, s.received_bytes as f64);
            out.counter(&c::FORWARD_FORWARDED_BYTES, &l, s.forwarded_bytes as f64);
        }
    }
}

fn as_refs(l: &[(String, String)]) -> Vec<(&str, &str)> {
    l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}
