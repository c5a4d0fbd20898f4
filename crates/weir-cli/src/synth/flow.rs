//! Playing one synthetic flow packet by packet, as a tap next to the clients sees it.
//!
//! A [`Flow`] turns a [`Plan`] into frames in time order, lazily, so an open flow
//! costs a few hundred bytes however many packets it will send. TCP flows do the
//! three-way handshake with random ISNs and per-OS SYN options, send each message
//! in MSS-sized segments with correct sequence and acknowledgement numbers, are
//! acknowledged by the receiver every second segment or after the 40 ms delayed-ACK
//! timer, and end with FIN/ACK, a RST, or a refused SYN. QUIC flows acknowledge the
//! same way with small short-header datagrams; other UDP flows are requests and
//! answers. Because the capture point is at the client, whatever the server sends in
//! answer to a client packet appears one round trip later.
//!
//! Time beyond the network's comes from the flow's share of the aggregate rate. Each
//! slot keeps a fair clock that every packet it sends advances by `wire bytes × C × 8
//! / rate` (divided by a per-slot log-normal rate factor of mean 1). Bulk segments
//! wait for the fair clock (and never exceed the flow's top rate), and pauses between
//! transactions and before the close last until the fair clock has caught up, so every
//! slot, and so the trace, runs at the requested rate on average. The clock passes
//! from a flow to its successor in the slot, so flows that cannot pause (a DNS
//! exchange) leave their time to the next one.

use super::model::{self, Close, Gap, Os, Plan, Stack, Transport, Turn};
use super::packet::{build_tcp, build_udp, mac_for, tcp_flags, Ipv4Fields, TcpFields};
use super::payload::web::WebMsg;
use super::payload::{self, Body, FlowCtx, Msg, Pools, Side};
use super::rng::{lognormal, FlowRng};
use super::sched::Opener;
use rand::{Rng, RngCore};
use std::collections::{HashSet, VecDeque};

/// Linux's minimum delayed-ACK timeout.
const DELAYED_ACK_NS: u64 = 40_000_000;
/// Bytes of a QUIC acknowledgement datagram's payload.
const QUIC_ACK_LEN: u32 = 40;

fn ix(s: Side) -> usize {
    match s {
        Side::Client => 0,
        Side::Server => 1,
    }
}

/// `a` is at or before `b` in sequence space.
fn seq_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) as i32 >= 0
}

/// A control segment waiting for its time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Ctl {
    Syn,
    SynAck,
    HandshakeAck,
    /// `first`: the closer's FIN; otherwise the peer's answering FIN.
    Fin {
        first: bool,
    },
    LastAck,
    Rst,
    /// The server's RST|ACK to a SYN nobody listens for.
    Refuse,
}

#[derive(Copy, Clone, Debug)]
struct Pending {
    ts: u64,
    from: Side,
    ctl: Ctl,
}

/// The header fields of one TCP segment.
#[derive(Copy, Clone, Debug)]
struct Hdr {
    from: Side,
    ts: u64,
    flags: u8,
    seq: u32,
    ack: u32,
}

/// The message being sent.
#[derive(Debug)]
struct Sending {
    from: Side,
    body: Body,
    off: u64,
    next_ts: u64,
}

/// One of the C places a flow can be open in, and its share of the rate.
#[derive(Copy, Clone, Debug)]
pub struct Slot {
    /// Slot time each wire byte is entitled to: C × 8 / rate, divided by the slot's
    /// rate factor. The factor is the slot's, not each flow's, so that the mean rate
    /// of the slots is the requested rate whether the trace is made of many short
    /// flows per slot or of long transfers still under way.
    pub ns_per_byte: f64,
    /// The slot's fair clock.
    pub fair_at: f64,
    /// Whether the slot has opened a flow yet (its clock starts with the first).
    started: bool,
}

pub struct Flow {
    /// Index into [`model::SERVICES`].
    service: usize,
    ctx: FlowCtx,
    transport: Transport,
    ports: [u16; 2],
    macs: [[u8; 6]; 2],
    ttl: [u8; 2],
    stacks: [Stack; 2],
    timestamps: bool,
    window: [u16; 2],
    ts_base: [u32; 2],
    ts_last: [u32; 2],
    /// Next sequence number each side sends (TCP), or bytes sent so far (UDP).
    seq: [u32; 2],
    ip_id: [u16; 2],
    unacked: [u8; 2],
    ack_latency: [u64; 2],
    rtt: u64,
    /// How long the peer's application takes to close after reading the end of stream.
    close_delay: u64,
    seg: u32,
    /// Bulk segments are never closer than this: the flow's own top rate.
    min_pace_ps_per_byte: f64,
    /// Slot time each wire byte is entitled to (the slot's [`Slot::ns_per_byte`]).
    fair_ns_per_byte: f64,
    /// The slot's fair clock: when the slot will have used no more than its share of the
    /// rate. Pauses between transactions and before the close last until then.
    fair_at: f64,
    /// A message or the handshake ended at this time; the next turn is due.
    finished: Option<u64>,
    turns: Vec<Turn>,
    /// Wait before each turn, and last before the close.
    gaps: Vec<u64>,
    next_turn: usize,
    close: Close,
    sending: Option<Sending>,
    ctl: VecDeque<Pending>,
    /// Pure ACKs each side owes, in time order, with the number each acknowledges.
    acks: [VecDeque<(u64, u32)>; 2],
    acks_sent: u32,
    key: FlowKey,
}

/// Identifies an open flow so no two open flows share a 5-tuple.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    client_host: u32,
    client_port: u16,
    server_host: u32,
    server_port: u16,
    udp: bool,
}

impl FlowKey {
    fn of(p: &Plan) -> FlowKey {
        FlowKey {
            client_host: p.client_host,
            client_port: p.client_port,
            server_host: p.server_host,
            server_port: p.server_port,
            udp: model::SERVICES[p.service].transport != Transport::Tcp,
        }
    }
}

/// Processing time of `side` before it answers: servers take longer and vary more.
fn think(rng: &mut FlowRng, side: Side) -> u64 {
    match side {
        Side::Server => lognormal(rng, 800e3, 1.3).clamp(30e3, 300e6) as u64,
        Side::Client => lognormal(rng, 200e3, 1.0).clamp(20e3, 50e6) as u64,
    }
}

/// The natural wait before a turn by `from` that follows a message of `prev`.
fn natural_gap(rng: &mut FlowRng, prev: Option<Side>, from: Side, gap: Gap, rtt: u64) -> u64 {
    match prev {
        None => 0,
        Some(p) if p == from => match gap {
            Gap::Next => rng.gen_range(5_000..60_000),
            Gap::Reply | Gap::Think => think(rng, from),
        },
        // What the server sends in answer reaches the tap a round trip after the client's message.
        Some(_) => match from {
            Side::Server => rtt + think(rng, Side::Server),
            Side::Client => think(rng, Side::Client),
        },
    }
}

impl Flow {
    /// Start the flow of `plan` at `start_ns` in `slot`.
    pub fn new(plan: Plan, mut rng: FlowRng, start_ns: u64, slot: &Slot, min_rate_bps: f64) -> Flow {
        let s = &model::SERVICES[plan.service];
        let c = model::host_octets(plan.client_host);
        let h = model::host_octets(plan.server_host);
        let client_ip = [198, 18, c[0], c[1]];
        let server_ip = [198, 19, h[0], h[1]];
        let key = FlowKey::of(&plan);
        let ctx = FlowCtx {
            seed: rng.next_u64(),
            client_ip,
            server_ip,
            server_port: plan.server_port,
            server_name: plan.server_name,
            site: u64::from(plan.server_host),
            start_ns,
        };
        let tcp = s.transport == Transport::Tcp;
        let timestamps = plan.client.timestamps && plan.server.timestamps;
        let seg = match s.transport {
            Transport::Tcp => u32::from(plan.client.mss.min(plan.server.mss)) - if timestamps { 12 } else { 0 },
            Transport::Udp { max_payload, .. } => u32::from(max_payload),
        };
        let rtt = plan.rtt_ns;
        let ack_latency = [rng.gen_range(20_000..150_000), rtt + rng.gen_range(20_000..150_000)];
        let window = [plan.client, plan.server].map(|st| {
            let buf: u32 = rng.gen_range(64 * 1024..3 * 1024 * 1024);
            (buf >> st.window_scale).min(65_535) as u16
        });

        let mut prev = tcp.then_some(Side::Client);
        let mut gaps = Vec::with_capacity(plan.turns.len() + 1);
        for t in &plan.turns {
            gaps.push(natural_gap(&mut rng, prev, t.from, t.gap, rtt));
            prev = Some(t.from);
        }
        let closer = match plan.close {
            Close::Fin(side) | Close::Rst(side) => Some(side),
            Close::Refused | Close::Silent => None,
        };
        gaps.push(closer.map_or(0, |side| natural_gap(&mut rng, prev, side, Gap::Reply, rtt)));
        let max_rate = lognormal(&mut rng, 40e6, 1.0).clamp(2e6, 1e9).max(min_rate_bps);

        let hops = plan.server_hops;
        let mut f = Flow {
            service: plan.service,
            transport: s.transport,
            ports: [plan.client_port, plan.server_port],
            macs: [mac_for(client_ip), mac_for(server_ip)],
            ttl: [plan.client.ttl, plan.server.ttl - hops],
            stacks: [plan.client, plan.server],
            timestamps,
            window,
            ts_base: [rng.gen(), rng.gen()],
            ts_last: [0, 0],
            seq: [rng.gen(), rng.gen()],
            ip_id: [rng.gen(), rng.gen()],
            unacked: [0, 0],
            ack_latency,
            rtt,
            close_delay: rng.gen_range(50_000..2_000_000),
            seg,
            min_pace_ps_per_byte: 8e12 / max_rate,
            fair_ns_per_byte: slot.ns_per_byte,
            fair_at: slot.fair_at,
            finished: None,
            turns: plan.turns,
            gaps,
            next_turn: 0,
            close: plan.close,
            sending: None,
            ctl: VecDeque::new(),
            acks: [VecDeque::new(), VecDeque::new()],
            acks_sent: 0,
            key,
            ctx,
        };
        if tcp {
            f.schedule(Pending { ts: start_ns, from: Side::Client, ctl: Ctl::Syn });
        } else {
            f.advance(start_ns);
        }
        f
    }

    pub fn key(&self) -> FlowKey {
        self.key
    }

    /// The slot's fair clock after this flow's packets so far.
    pub fn fair_at(&self) -> f64 {
        self.fair_at
    }

    pub fn next_ts(&self) -> Option<u64> {
        [
            self.ctl.front().map(|p| p.ts),
            self.acks[0].front().map(|a| a.0),
            self.acks[1].front().map(|a| a.0),
            self.sending.as_ref().map(|s| s.next_ts),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn schedule(&mut self, p: Pending) {
        let at = self.ctl.partition_point(|q| q.ts <= p.ts);
        self.ctl.insert(at, p);
    }

    /// Owe a pure ACK of `ack` from `side` at `ts`; it replaces any later one it covers.
    fn owe_ack(&mut self, side: Side, ts: u64, ack: u32) {
        let q = &mut self.acks[ix(side)];
        while q.back().is_some_and(|b| b.0 >= ts) {
            q.pop_back();
        }
        q.push_back((ts, ack));
    }

    /// `side` just acknowledged up to `ack` in a packet of its own: pure ACKs it owed up to there are moot.
    fn covered(&mut self, side: Side, ack: u32) {
        let q = &mut self.acks[ix(side)];
        while q.front().is_some_and(|a| seq_le(a.1, ack)) {
            q.pop_front();
        }
    }

    /// When a pause of natural length `gap` after `ts` ends. An idle point also waits for
    /// the fair clock, less `then`: the natural time still to come before the next idle
    /// point, which would otherwise put the slot behind for good.
    fn after(&self, ts: u64, gap: u64, idle: bool, then: u64) -> u64 {
        let natural = ts + gap;
        if idle {
            natural.max((self.fair_at as u64).saturating_sub(then))
        } else {
            natural
        }
    }

    /// Start the next turn after the last message ended at `ts`, or the close.
    fn advance(&mut self, ts: u64) {
        while self.next_turn < self.turns.len() {
            let i = self.next_turn;
            self.next_turn += 1;
            let t = self.turns[i];
            let body = payload::build(t.msg, &self.ctx, i as u32, t.txn, t.size, t.from);
            if body.len() > 0 {
                let next_ts = self.after(ts, self.gaps[i], t.gap == Gap::Think, 0);
                self.sending = Some(Sending { from: t.from, body, off: 0, next_ts });
                return;
            }
        }
        let teardown = match self.close {
            Close::Fin(_) => self.rtt + self.close_delay,
            _ => 0,
        };
        let at = self.after(ts, self.gaps[self.turns.len()], true, teardown);
        match self.close {
            Close::Fin(side) => self.schedule(Pending { ts: at, from: side, ctl: Ctl::Fin { first: true } }),
            Close::Rst(side) => self.schedule(Pending { ts: at, from: side, ctl: Ctl::Rst }),
            Close::Refused | Close::Silent => {}
        }
    }

    /// Write the next packet into `out`; returns its time and wire length.
    pub fn emit(&mut self, pools: &Pools, out: &mut Vec<u8>) -> (u64, u32) {
        let ctl = self.ctl.front().map(|p| p.ts);
        let ack = [0, 1].map(|i| self.acks[i].front().map(|a| a.0));
        let data = self.sending.as_ref().map(|s| s.next_ts);
        let best = [ctl, ack[0], ack[1], data].into_iter().flatten().min().expect("emit on a finished flow");
        let ts = if ctl == Some(best) {
            let p = self.ctl.pop_front().expect("front exists");
            self.emit_ctl(p, pools, out);
            p.ts
        } else if ack[0] == Some(best) || ack[1] == Some(best) {
            let side = if ack[0] == Some(best) { Side::Client } else { Side::Server };
            let (ts, n) = self.acks[ix(side)].pop_front().expect("front exists");
            self.emit_ack(side, ts, n, pools, out);
            ts
        } else {
            self.emit_data(pools, out)
        };
        let wire = out.len() as u32;
        self.fair_at += f64::from(wire) * self.fair_ns_per_byte;
        if let Some(end) = self.finished.take() {
            self.advance(end);
        }
        (ts, wire)
    }

    fn ip(&mut self, from: Side) -> Ipv4Fields {
        let i = ix(from);
        self.ip_id[i] = self.ip_id[i].wrapping_add(1);
        let (src, dst) =
            if from == Side::Client { (self.ctx.client_ip, self.ctx.server_ip) } else { (self.ctx.server_ip, self.ctx.client_ip) };
        let df = match self.transport {
            Transport::Tcp => true,
            Transport::Udp { acks, .. } => acks,
        };
        Ipv4Fields { src, dst, ttl: self.ttl[i], id: self.ip_id[i], dont_fragment: df, dscp: 0 }
    }

    fn macs(&self, from: Side) -> ([u8; 6], [u8; 6]) {
        (self.macs[ix(from)], self.macs[ix(from.other())])
    }

    fn tsval(&mut self, from: Side, ts: u64) -> u32 {
        let v = self.ts_base[ix(from)].wrapping_add((ts / 1_000_000) as u32);
        self.ts_last[ix(from)] = v;
        v
    }

    /// Options of a segment after the handshake: the timestamp pair, if both sides use them.
    fn data_options(&mut self, from: Side, ts: u64) -> ([u8; 12], usize) {
        if !self.timestamps {
            return ([0; 12], 0);
        }
        let echo = self.ts_last[ix(from.other())];
        let v = self.tsval(from, ts);
        let mut o = [1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0];
        o[4..8].copy_from_slice(&v.to_be_bytes());
        o[8..12].copy_from_slice(&echo.to_be_bytes());
        (o, 12)
    }

    /// SYN or SYN-ACK options in the order `from`'s stack writes them.
    fn syn_options(&mut self, from: Side, ts: u64) -> ([u8; 24], usize) {
        let st = self.stacks[ix(from)];
        let mss = st.mss.to_be_bytes();
        let use_ts = if from == Side::Client { st.timestamps } else { self.timestamps };
        let tsval = if use_ts { self.tsval(from, ts).to_be_bytes() } else { [0; 4] };
        let echo = if from == Side::Server { self.ts_last[0].to_be_bytes() } else { [0; 4] };
        let mut o = [0u8; 24];
        let mut n = 0;
        let mut put = |bytes: &[u8]| {
            o[n..n + bytes.len()].copy_from_slice(bytes);
            n += bytes.len();
        };
        let ts_opt = [8, 10, tsval[0], tsval[1], tsval[2], tsval[3], echo[0], echo[1], echo[2], echo[3]];
        put(&[2, 4, mss[0], mss[1]]);
        match st.os {
            Os::Linux if use_ts => {
                put(&[4, 2]);
                put(&ts_opt);
                put(&[1, 3, 3, st.window_scale]);
            }
            Os::Linux => put(&[1, 1, 4, 2, 1, 3, 3, st.window_scale]),
            Os::Windows => put(&[1, 3, 3, st.window_scale, 1, 1, 4, 2]),
            Os::Apple => {
                put(&[1, 3, 3, st.window_scale, 1, 1]);
                put(&ts_opt);
                put(&[4, 2, 0, 0]);
            }
        }
        (o, n)
    }

    /// Build the TCP segment `h`, carrying bytes `off..off + len` of `data` if given.
    fn tcp(&mut self, out: &mut Vec<u8>, pools: &Pools, h: Hdr, data: Option<(&Body, u64, usize)>) {
        let Hdr { from, ts, flags, seq, ack } = h;
        let syn = flags & tcp_flags::SYN != 0;
        let (opts, n) = if syn {
            self.syn_options(from, ts)
        } else {
            let (o, n) = self.data_options(from, ts);
            let mut wide = [0u8; 24];
            wide[..12].copy_from_slice(&o);
            (wide, n)
        };
        let window = if syn {
            self.stacks[ix(from)].syn_window
        } else if flags & tcp_flags::RST != 0 {
            0
        } else {
            self.window[ix(from)]
        };
        let ip = self.ip(from);
        let fields = TcpFields {
            src_port: self.ports[ix(from)],
            dst_port: self.ports[ix(from.other())],
            seq,
            ack,
            flags,
            window,
            options: &opts[..n],
        };
        let len = data.map_or(0, |d| d.2);
        build_tcp(out, self.macs(from), &ip, &fields, len, |buf| {
            if let Some((body, off, _)) = data {
                body.fill(pools, off, buf);
            }
        });
    }

    fn emit_ctl(&mut self, p: Pending, pools: &Pools, out: &mut Vec<u8>) {
        let (from, ts) = (p.from, p.ts);
        let other = from.other();
        let (me, peer) = (self.seq[ix(from)], self.seq[ix(other)]);
        use tcp_flags::{ACK, FIN, RST, SYN};
        match p.ctl {
            Ctl::Syn => {
                self.tcp(out, pools, Hdr { from, ts, flags: SYN, seq: me, ack: 0 }, None);
                self.seq[0] = self.seq[0].wrapping_add(1);
                let ctl = if self.close == Close::Refused { Ctl::Refuse } else { Ctl::SynAck };
                self.schedule(Pending { ts: ts + self.rtt, from: Side::Server, ctl });
            }
            Ctl::SynAck => {
                self.tcp(out, pools, Hdr { from, ts, flags: SYN | ACK, seq: me, ack: peer }, None);
                self.seq[1] = self.seq[1].wrapping_add(1);
                self.schedule(Pending { ts: ts + self.ack_latency[0], from: Side::Client, ctl: Ctl::HandshakeAck });
            }
            Ctl::HandshakeAck => {
                self.tcp(out, pools, Hdr { from, ts, flags: ACK, seq: me, ack: peer }, None);
                self.finished = Some(ts);
            }
            Ctl::Fin { first } => {
                self.tcp(out, pools, Hdr { from, ts, flags: FIN | ACK, seq: me, ack: peer }, None);
                self.covered(from, peer);
                self.seq[ix(from)] = me.wrapping_add(1);
                let next = if first {
                    // The peer's application closes too once it reads the end of stream.
                    let at =
                        if other == Side::Server { ts + self.rtt + self.close_delay } else { ts + self.ack_latency[0] + self.close_delay };
                    Pending { ts: at, from: other, ctl: Ctl::Fin { first: false } }
                } else {
                    let at = if other == Side::Client { ts + self.ack_latency[0] } else { ts + self.rtt };
                    Pending { ts: at, from: other, ctl: Ctl::LastAck }
                };
                self.schedule(next);
            }
            Ctl::LastAck => {
                self.tcp(out, pools, Hdr { from, ts, flags: ACK, seq: me, ack: peer }, None);
                self.covered(from, peer);
            }
            Ctl::Rst => {
                self.tcp(out, pools, Hdr { from, ts, flags: RST | ACK, seq: me, ack: peer }, None);
                self.acks[ix(from)].clear();
                // The peer stops acknowledging once the RST reaches it; the server's ACKs
                // already on their way still arrive.
                let reaches = if other == Side::Server { ts + self.rtt } else { ts };
                self.acks[ix(other)].retain(|a| a.0 <= reaches);
            }
            Ctl::Refuse => self.tcp(out, pools, Hdr { from, ts, flags: RST | ACK, seq: 0, ack: peer }, None),
        }
    }

    fn emit_ack(&mut self, from: Side, ts: u64, ack: u32, pools: &Pools, out: &mut Vec<u8>) {
        match self.transport {
            Transport::Tcp => {
                let me = self.seq[ix(from)];
                self.tcp(out, pools, Hdr { from, ts, flags: tcp_flags::ACK, seq: me, ack }, None);
            }
            Transport::Udp { .. } => {
                self.acks_sent += 1;
                let body = payload::build(Msg::Web(WebMsg::QuicData), &self.ctx, u32::MAX - self.acks_sent, 0, QUIC_ACK_LEN, from);
                let ip = self.ip(from);
                let len = body.len() as usize;
                build_udp(out, self.macs(from), &ip, (self.ports[ix(from)], self.ports[ix(from.other())]), len, |buf| {
                    body.fill(pools, 0, buf)
                });
            }
        }
    }

    fn emit_data(&mut self, pools: &Pools, out: &mut Vec<u8>) -> u64 {
        let s = self.sending.take().expect("data is due");
        let from = s.from;
        let ts = s.next_ts;
        let len = (s.body.len() - s.off).min(u64::from(self.seg)) as usize;
        let last = s.off + len as u64 == s.body.len();
        let other = from.other();
        let (me, peer) = (self.seq[ix(from)], self.seq[ix(other)]);
        match self.transport {
            Transport::Tcp => {
                let flags = tcp_flags::ACK | if last { tcp_flags::PSH } else { 0 };
                self.tcp(out, pools, Hdr { from, ts, flags, seq: me, ack: peer }, Some((&s.body, s.off, len)));
            }
            Transport::Udp { .. } => {
                let ip = self.ip(from);
                build_udp(out, self.macs(from), &ip, (self.ports[ix(from)], self.ports[ix(other)]), len, |buf| {
                    s.body.fill(pools, s.off, buf)
                });
            }
        }
        self.covered(from, peer);
        let sent = me.wrapping_add(len as u32);
        self.seq[ix(from)] = sent;
        let acks = match self.transport {
            Transport::Tcp => true,
            Transport::Udp { acks, .. } => acks,
        };
        if acks {
            let r = ix(other);
            self.unacked[r] += 1;
            if self.unacked[r] >= 2 {
                self.owe_ack(other, ts + self.ack_latency[r], sent);
                self.unacked[r] = 0;
            } else if last {
                self.owe_ack(other, ts + self.ack_latency[r] + DELAYED_ACK_NS, sent);
                self.unacked[r] = 0;
            }
        }
        if last {
            self.finished = Some(ts);
        } else {
            // Paced by the fair clock (this segment included), so a slot that fell behind
            // catches up at the flow's top rate and one that is ahead waits.
            let wire = out.len() as f64;
            let fastest = ts as f64 + wire * self.min_pace_ps_per_byte / 1e3;
            let fair = self.fair_at + wire * self.fair_ns_per_byte;
            self.sending = Some(Sending { off: s.off + len as u64, next_ts: fastest.max(fair).ceil() as u64, ..s });
        }
        ts
    }
}

/// Opens synthetic flows for the scheduler and keeps each slot's time account.
pub struct Generator {
    seed: u64,
    pools: Pools,
    services: Vec<(u32, usize)>,
    slots: Vec<Slot>,
    /// A flow may always send at least this fast, so bulk data never lags its share.
    min_rate_bps: f64,
    open: HashSet<FlowKey>,
    opened: u64,
    per_service: Vec<u64>,
}

impl Generator {
    pub fn new(seed: u64, concurrency: usize, rate_bps: f64) -> Generator {
        let c = concurrency as f64;
        Generator {
            seed,
            pools: Pools::new(seed),
            services: model::SERVICES.iter().enumerate().map(|(i, s)| (s.weight, i)).collect(),
            slots: (0..concurrency)
                .map(|i| {
                    // Log-normal with mean 1: exp(σN − σ²/2).
                    let factor = lognormal(&mut FlowRng::new(seed, u64::MAX - i as u64), (-0.125f64).exp(), 0.5);
                    Slot { ns_per_byte: c * 8e9 / rate_bps / factor, fair_at: 0.0, started: false }
                })
                .collect(),
            min_rate_bps: 4.0 * rate_bps / c,
            open: HashSet::with_capacity(concurrency),
            opened: 0,
            per_service: vec![0; model::SERVICES.len()],
        }
    }

    /// Open a flow of service `service` (an index into [`model::SERVICES`]) in `slot`.
    pub fn open_service(&mut self, slot: usize, at_ns: u64, service: usize) -> Flow {
        let mut rng = FlowRng::new(self.seed, self.opened);
        // The first draw chose the service.
        rng.next_u64();
        self.opened += 1;
        self.per_service[service] += 1;
        let mut plan = model::plan_service(&mut rng, self.seed, service);
        let stack = plan.client;
        while self.open.contains(&FlowKey::of(&plan)) {
            plan.client_port = rng.gen_range(stack.ephemeral.0..=stack.ephemeral.1);
        }
        self.open.insert(FlowKey::of(&plan));
        let s = &mut self.slots[slot];
        if !s.started {
            s.started = true;
            s.fair_at = at_ns as f64;
        }
        Flow::new(plan, rng, at_ns, s, self.min_rate_bps)
    }

    /// Flows per service, in [`model::SERVICES`] order: opened, less those the
    /// scheduler reported unused (after a run, the flows in the trace).
    pub fn per_service(&self) -> &[u64] {
        &self.per_service
    }
}

impl Opener for Generator {
    type Flow = Flow;

    fn open(&mut self, slot: usize, at_ns: u64) -> Flow {
        let service = *super::rng::weighted(&mut FlowRng::new(self.seed, self.opened), &self.services);
        self.open_service(slot, at_ns, service)
    }

    fn next_ts(flow: &Flow) -> Option<u64> {
        flow.next_ts()
    }

    fn emit(&mut self, flow: &mut Flow, out: &mut Vec<u8>) -> (u64, u32) {
        flow.emit(&self.pools, out)
    }

    fn closed(&mut self, slot: usize, flow: &Flow) {
        self.open.remove(&flow.key());
        self.slots[slot].fair_at = flow.fair_at();
    }

    fn unused(&mut self, flow: &Flow) {
        self.per_service[flow.service] -= 1;
    }
}
