//! afpacket lanes: a TPACKET_V3 RX ring on the receiving interface, a
//! PACKET_TX_RING ([`crate::tx::TxRing`]) on the sending one.
//!
//! One lane per direction (AF_PACKET sees the interface, not its queues). The
//! lane walks the RX ring's blocks in the kernel's order; each packet the
//! filter and the judge pass is copied into a TX slot (the one copy), and a
//! block goes back to the kernel once walked. VLAN tags the kernel took out of
//! a received frame are put back first, so the frame leaves as it came. The RX
//! socket ignores outgoing packets (what this or the other lane sends).
//!
//! Counting: the TX ring's `sent` is `forwarded`, its `queued` is `in_flight`;
//! a frame the TX ring refuses (longer than OUT's MTU, shorter than an
//! Ethernet header) is `tx_failed`. The RX socket's PACKET_STATISTICS drops
//! (its ring was full) are `kernel_drops`.

use super::{
    check_interface, Control, Counters, Direction, ForwardOptions, Judge, LaneStats, LaneWork, Opened, Verdict, BATCH, DRAIN, IDLE_WAIT,
};
use crate::capture::SourceError;
use crate::filter::Filter;
use crate::memory::{Bytes, Plan};
use crate::source::afpacket::ring::{BadFrame, Ring};
use crate::source::live::denied;
use crate::sys::packet::{PacketSocket, VLAN_TAG_LEN};
use crate::tx::{TxError, TxKicker, TxOptions, TxRing};
use crate::{Packet, QueueId};
use std::time::{Duration, Instant};

/// Bytes per RX block.
const BLOCK_BYTES: u32 = 256 << 10;
/// The kernel hands a block over at the latest this long after its first packet.
const BLOCK_TIMEOUT_MS: u32 = 1;
/// Most bytes of a frame: a VLAN-tagged frame of the largest MTU a 4 KiB TX slot holds.
const SNAPLEN: u32 = 65_535;

fn io(what: String, error: std::io::Error) -> SourceError {
    SourceError::Io { what, error }
}

fn tx_error(e: TxError) -> SourceError {
    if e.is_bad_input() {
        SourceError::Invalid(e.to_string())
    } else {
        SourceError::Invalid(format!("{e}"))
    }
}

/// Open the lanes for `opts`, in the calling thread's namespace.
pub(super) fn open(opts: &ForwardOptions) -> Result<Opened, SourceError> {
    // The TX ring sizes its slots for the MTU; the RX ring takes any size.
    let (in_index, _) = check_interface(&opts.input, usize::MAX, "")?;
    let (out_index, _) = check_interface(&opts.output, usize::MAX, "")?;
    let blocks = (opts.frames * 2048).div_ceil(BLOCK_BYTES as usize).max(4) as u32;
    let lanes = if opts.bidirectional { 2 } else { 1 };
    let mut plan = Plan::new();
    plan.add(
        format!("AF_PACKET RX ring: {blocks} blocks of {} per lane, x {lanes} lanes", Bytes(u64::from(BLOCK_BYTES))),
        u64::from(blocks) * u64::from(BLOCK_BYTES) * lanes,
    );
    plan.add(
        format!("AF_PACKET TX ring: {} slots of up to 16 KiB per lane (--frames), x {lanes}", opts.frames),
        (opts.frames * 16384) as u64 * lanes,
    );
    plan.check()?;
    let mut out: Vec<(Direction, u16, Box<dyn LaneWork>)> = Vec::new();
    let mut pairs = vec![(Direction::InToOut, &opts.input, in_index, &opts.output)];
    if opts.bidirectional {
        pairs.push((Direction::OutToIn, &opts.output, out_index, &opts.input));
    }
    for (dir, from, index, to) in pairs {
        let at = |what: &str| format!("{from}: {what}");
        let rx = PacketSocket::new().map_err(|e| denied(at("opening a packet socket"), e, "CAP_NET_RAW"))?;
        rx.use_tpacket_v3().map_err(|e| io(at("TPACKET_V3"), e))?;
        rx.ignore_outgoing().map_err(|e| io(at("ignoring outgoing packets (PACKET_IGNORE_OUTGOING, Linux 4.20)"), e))?;
        rx.reserve(VLAN_TAG_LEN).map_err(|e| io(at("reserving room for VLAN tags"), e))?;
        let ring = Ring::map(&rx, BLOCK_BYTES, blocks, BLOCK_TIMEOUT_MS, SNAPLEN, true).map_err(|e| io(at("mapping the RX ring"), e))?;
        if opts.promisc {
            rx.add_promisc(index).map_err(|e| io(at("promiscuous mode"), e))?;
        }
        let tx_opts = TxOptions {
            netns: None,
            qdisc_bypass: true,
            frames: opts.frames,
            frame_size: None,
            batch: BATCH as usize,
            stall_timeout: Duration::from_secs(5),
        };
        let tx = TxRing::open(to, &tx_opts).map_err(tx_error)?;
        // Bound last: nothing arrives before the TX side is ready.
        rx.bind(index).map_err(|e| io(at("binding to the interface"), e))?;
        let kicker = tx.kicker();
        let lane = Lane { name: format!("{from} -> {to}"), rx, ring, tx, kicker };
        out.push((dir, 0, Box::new(lane)));
    }
    Ok((out, Vec::new()))
}

struct Lane {
    name: String,
    ring: Ring,
    rx: PacketSocket,
    tx: TxRing,
    kicker: TxKicker,
}

impl LaneWork for Lane {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn run(
        mut self: Box<Self>,
        judge: &mut dyn Judge,
        filter: Option<&Filter>,
        ctl: &Control,
        counters: &Counters,
    ) -> Result<LaneStats, SourceError> {
        let mut s = LaneStats { lane: self.name.clone(), ..LaneStats::default() };
        let result = self.forward(judge, filter, ctl, counters, &mut s);
        // What is queued goes out (or is counted in flight).
        let until = Instant::now() + DRAIN;
        loop {
            self.kicker.kick();
            self.settle(&mut s);
            if s.in_flight == 0 || Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if let Ok(d) = self.rx.take_drops() {
            s.kernel_drops += u64::from(d);
        }
        debug_assert!(s.balanced(), "{}: counts do not add up: {s:?}", self.name);
        counters.publish(&s);
        result.map(|()| s)
    }
}

impl Lane {
    fn settle(&mut self, s: &mut LaneStats) {
        let t = self.tx.stats();
        s.forwarded = t.sent;
        s.forwarded_bytes = t.bytes;
        s.in_flight = t.queued;
    }

    fn forward(
        &mut self,
        judge: &mut dyn Judge,
        filter: Option<&Filter>,
        ctl: &Control,
        counters: &Counters,
        s: &mut LaneStats,
    ) -> Result<(), SourceError> {
        let q = QueueId(0);
        let name = self.name.clone();
        let bad = |e: BadFrame| SourceError::Invalid(format!("{name}: {}", e.0));
        let mut stats_at = Instant::now();
        loop {
            if ctl.stopping() {
                return Ok(());
            }
            let Some(ready) = self.ring.next_block().map_err(bad)? else {
                self.kicker.kick();
                self.settle(s);
                if let Ok(d) = self.rx.take_drops() {
                    s.kernel_drops += u64::from(d);
                }
                counters.publish(s);
                self.rx.wait_readable(IDLE_WAIT).map_err(|e| io(format!("{}: the interface went down or away", self.name), e))?;
                continue;
            };
            let mut at = ready.first();
            let packets = ready.packets();
            // The budget is taken per block: a limit may end the run inside one.
            let allowed = ctl.take(packets);
            for _ in 0..allowed {
                let f = self.ring.frame(&ready, at).map_err(bad)?;
                let data = self.ring.packet_bytes(&ready, &f);
                s.received += 1;
                s.received_bytes += u64::from(f.wire_len);
                let pass = match filter {
                    Some(flt) if !flt.matches(data, f.wire_len) => {
                        s.filtered += 1;
                        false
                    }
                    _ => match judge.verdict(&Packet::new(data, f.wire_len, f.ts_ns, q)) {
                        Verdict::Pass => true,
                        Verdict::Drop => {
                            s.dropped += 1;
                            false
                        }
                    },
                };
                if pass {
                    match self.tx.send(data) {
                        Ok(()) => {}
                        Err(TxError::AboveMtu { .. } | TxError::TooShort { .. } | TxError::FrameTooLarge { .. }) => s.tx_failed += 1,
                        Err(e) => return Err(SourceError::Invalid(format!("{}: {e}", self.name))),
                    }
                }
                at += f.next;
            }
            let walked = self.ring.done(ready);
            if self.ring.give_back(walked).is_err() {
                return Err(SourceError::Invalid(format!("{}: an RX block is still held after its walk (a bug in weir)", self.name)));
            }
            self.kicker.kick();
            if stats_at.elapsed() >= Duration::from_millis(10) {
                self.settle(s);
                counters.publish(s);
                stats_at = Instant::now();
            }
            if allowed < packets {
                // The limit was reached inside the block: the rest is not received.
                return Ok(());
            }
        }
    }
}
