//! Arrivals for the simulator: what packets reach the NIC and when.
//!
//! - [`Burst`]: P back-to-back packets at a fixed rate (WireCAP's burst
//!   experiment: 64-byte frames at 14.88 Mpps, the line rate of 10 Gbit/s).
//! - [`Skewed`]: a steady mix of many flows whose sizes follow a Zipf law, so
//!   that RSS leaves one queue much busier than the others; Poisson arrivals.
//! - [`Trace`]: the packets of a trace file, at a fixed rate or at a multiple of
//!   their recorded timing.
//!
//! Synthetic frames are Ethernet/IPv4/UDP, 64 bytes on the wire without FCS,
//! addressed in 198.18.0.0/15. Everything is a pure function of the arguments
//! and the seed.

use crate::tracefile::{for_each_packet, ReadError};
use crate::{LinkType, Setting, SettingError};
use std::path::Path;

/// One packet reaching the NIC.
#[derive(Copy, Clone, Debug)]
pub struct Arrival<'a> {
    /// Arrival time in ns from the start of the run.
    pub t_ns: u64,
    /// The frame's bytes as captured, link header first.
    pub data: &'a [u8],
    /// The frame's length on the wire in bytes (`data` may be cut short of it).
    pub wire_len: u32,
}

/// A source of arrivals in time order.
pub trait Workload {
    /// The next arrival, no earlier than the previous one; `None` once the
    /// workload is used up.
    fn next(&mut self) -> Option<Arrival<'_>>;
    /// The link type of every frame.
    fn link_type(&self) -> LinkType;
}

/// Line rate of 64-byte frames on 10 Gbit/s Ethernet (with preamble and gap),
/// in packets per second.
pub const LINE_RATE_64B_10G: f64 = 14_880_952.0;

/// Bytes of a synthetic frame.
const FRAME_LEN: usize = 60;

/// A synthetic UDP frame of flow `flow`: client 198.18.x.y:port to server
/// 198.19.x.y:port, every field a function of the flow number.
fn frame(flow: u32) -> [u8; FRAME_LEN] {
    let mut f = [0u8; FRAME_LEN];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((FRAME_LEN - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    let c = flow.to_be_bytes();
    f[26..30].copy_from_slice(&[198, 18, c[2], c[3]]);
    f[30..34].copy_from_slice(&[198, 19, c[1], c[2] ^ c[3]]);
    f[34..36].copy_from_slice(&(1024 + (flow % 60_000) as u16).to_be_bytes());
    f[36..38].copy_from_slice(&[0, 53u8.wrapping_add((flow >> 16) as u8)]);
    f[38..40].copy_from_slice(&((FRAME_LEN - 34) as u16).to_be_bytes());
    f
}

#[cfg(test)]
pub(super) fn test_frame(flow: u32) -> [u8; FRAME_LEN] {
    frame(flow)
}

/// P packets at a fixed rate, spread round-robin over `flows` flows.
pub struct Burst {
    packets: u64,
    gap_ns: f64,
    sent: u64,
    frames: Vec<[u8; FRAME_LEN]>,
}

impl Burst {
    /// `packets` packets, one every 1/`pps` s from time 0, cycling through
    /// `flows` flows (0 counts as 1). Error: a rate that is not finite and above 0.
    pub fn new(packets: u64, pps: f64, flows: u32) -> Result<Self, SettingError> {
        if !(pps > 0.0 && pps.is_finite()) {
            return Err(SettingError::new(Setting::Simulation, format!("burst rate {pps} packets/s: must be above 0")));
        }
        let flows = flows.max(1);
        Ok(Burst { packets, gap_ns: 1e9 / pps, sent: 0, frames: (0..flows).map(frame).collect() })
    }
}

impl Workload for Burst {
    fn next(&mut self) -> Option<Arrival<'_>> {
        if self.sent == self.packets {
            return None;
        }
        let i = self.sent;
        self.sent += 1;
        let data = &self.frames[(i % self.frames.len() as u64) as usize];
        Some(Arrival { t_ns: (i as f64 * self.gap_ns) as u64, data, wire_len: FRAME_LEN as u32 })
    }

    fn link_type(&self) -> LinkType {
        LinkType::ETHERNET
    }
}

/// SplitMix64: a small, fast, well-mixed generator; enough for workloads.
#[derive(Clone, Debug)]
struct SplitMix(u64);

impl SplitMix {
    fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `packets` packets of `flows` flows whose shares follow Zipf(`exponent`),
/// arriving as a Poisson process of `pps` packets per second.
pub struct Skewed {
    packets: u64,
    sent: u64,
    mean_gap_ns: f64,
    t_ns: f64,
    /// Cumulative flow shares, for picking a flow by binary search.
    cumulative: Vec<f64>,
    frames: Vec<[u8; FRAME_LEN]>,
    rng: SplitMix,
}

impl Skewed {
    /// `packets` packets over `flows` flows, the k-th heaviest weighted
    /// 1/k^`exponent`, at a mean of `pps` packets per second; a `seed` always
    /// gives the same arrivals. Errors: no flows, or an exponent that is not
    /// finite and at least 0, or a rate that is not finite and above 0.
    pub fn new(packets: u64, flows: u32, exponent: f64, pps: f64, seed: u64) -> Result<Self, SettingError> {
        let bad = |problem: String| Err(SettingError::new(Setting::Simulation, problem));
        if flows == 0 {
            return bad("a skewed workload needs at least one flow".into());
        }
        if !(exponent >= 0.0 && exponent.is_finite() && pps > 0.0 && pps.is_finite()) {
            return bad(format!("a skewed workload's exponent {exponent} and rate {pps} must be finite, the rate above 0"));
        }
        let weights: Vec<f64> = (1..=flows).map(|k| 1.0 / f64::from(k).powf(exponent)).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        // Flow numbers are scrambled so that the heavy flows are not neighbours.
        let frames = (0..flows).map(|k| frame(k.wrapping_mul(2_654_435_761) >> 8)).collect();
        Ok(Skewed { packets, sent: 0, mean_gap_ns: 1e9 / pps, t_ns: 0.0, cumulative, frames, rng: SplitMix::new(seed) })
    }
}

impl Workload for Skewed {
    fn next(&mut self) -> Option<Arrival<'_>> {
        if self.sent == self.packets {
            return None;
        }
        self.sent += 1;
        // Exponential gaps: 1 - unit() is in (0, 1], so ln() is finite.
        self.t_ns += -self.mean_gap_ns * (1.0 - self.rng.unit()).ln();
        let u = self.rng.unit();
        let k = self.cumulative.partition_point(|&c| c <= u).min(self.frames.len() - 1);
        Some(Arrival { t_ns: self.t_ns as u64, data: &self.frames[k], wire_len: FRAME_LEN as u32 })
    }

    fn link_type(&self) -> LinkType {
        LinkType::ETHERNET
    }
}

/// How a trace's packets are timed.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Timing {
    /// Evenly at this many packets per second.
    Pps(f64),
    /// At the recorded gaps divided by this factor (2.0 = twice as fast).
    Speed(f64),
}

/// The packets of a trace file, held in memory, from time 0 on.
pub struct Trace {
    link: LinkType,
    ts_ns: Vec<u64>,
    wire: Vec<u32>,
    spans: Vec<(usize, usize)>,
    bytes: Vec<u8>,
    timing: Timing,
    at: usize,
    last_t: u64,
}

impl Trace {
    /// Read every packet of the pcap or pcapng file at `path`, to be timed by
    /// `timing`. Errors: the file cannot be read or is not a valid trace.
    pub fn load(path: &Path, timing: Timing) -> Result<Self, ReadError> {
        let (mut ts_ns, mut wire, mut spans, mut bytes) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (header, _) = for_each_packet(path, |_, rec, data| {
            ts_ns.push(rec.ts_ns);
            wire.push(rec.wire_len);
            spans.push((bytes.len(), data.len()));
            bytes.extend_from_slice(data);
        })?;
        Ok(Trace { link: header.link_type, ts_ns, wire, spans, bytes, timing, at: 0, last_t: 0 })
    }

    /// True when the trace holds no packet.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Packets per second of the recorded timing (0 for fewer than two packets).
    pub fn recorded_pps(&self) -> f64 {
        match (self.ts_ns.first(), self.ts_ns.last()) {
            (Some(a), Some(b)) if b > a => (self.ts_ns.len() - 1) as f64 * 1e9 / (b - a) as f64,
            _ => 0.0,
        }
    }

    /// Time the packets from now on by `timing` (e.g. scaled once the recorded
    /// rate is known, without reading the file again).
    pub fn set_timing(&mut self, timing: Timing) {
        self.timing = timing;
    }
}

impl Workload for Trace {
    fn next(&mut self) -> Option<Arrival<'_>> {
        let i = self.at;
        let &(start, len) = self.spans.get(i)?;
        self.at += 1;
        let t_ns = match self.timing {
            Timing::Pps(pps) => (i as f64 * 1e9 / pps) as u64,
            Timing::Speed(s) => (self.ts_ns[i].saturating_sub(self.ts_ns[0]) as f64 / s) as u64,
        };
        // Recorded time can step back (merged captures): never before the previous packet.
        let t_ns = t_ns.max(self.last_t);
        self.last_t = t_ns;
        Some(Arrival { t_ns, data: &self.bytes[start..start + len], wire_len: self.wire[i] })
    }

    fn link_type(&self) -> LinkType {
        self.link
    }
}
