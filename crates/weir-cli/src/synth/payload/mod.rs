//! Application payloads: what each side of a synthetic flow says, byte for byte.
//!
//! A message is a [`Body`]: a small materialized `head` (protocol headers, commands,
//! handshakes: the bytes signature matchers look for), then a lazily generated
//! `tail` of any length (encrypted records, file contents, HTML), then an optional
//! static `foot`. Tails are read out of per-run byte [`Pools`] at an offset chosen
//! per message, so a 20 MB download costs no memory and the same seed always gives
//! the same bytes. [`build`] turns a [`Msg`] from a flow's plan into a `Body` only
//! when the flow starts sending it, which keeps per-flow state small.

pub mod session;
pub mod udp;
pub mod vocab;
pub mod web;

use super::rng::FlowRng;
use rand::{Rng, RngCore, SeedableRng};

/// Which end of a conversation speaks.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }
}

/// Everything about a flow that message builders may need, fixed when the flow starts.
#[derive(Clone, Debug)]
pub struct FlowCtx {
    /// Seeds every message of the flow: builders derive their own streams from it.
    pub seed: u64,
    pub client_ip: [u8; 4],
    pub server_ip: [u8; 4],
    pub server_port: u16,
    /// The name clients use for the server (SNI, Host, EHLO, queries).
    pub server_name: String,
    /// Number of the site the server belongs to: mail addresses and DNS answers use it.
    pub site: u64,
    /// Capture time of the flow's first packet, for dates and NTP timestamps.
    pub start_ns: u64,
}

impl FlowCtx {
    /// A generator private to message `turn` of this flow, or to the transaction
    /// `txn` both sides of an exchange share (so a response matches its request).
    pub fn rng(&self, stream: u64) -> FlowRng {
        FlowRng::new(self.seed, stream)
    }
}

/// Length of the random byte pool; tails wrap around inside it.
const OPAQUE_POOL_LEN: usize = 1 << 20;
/// Length of the text pool: enough that repeats are far apart within one body.
const TEXT_POOL_LEN: usize = 1 << 18;
/// Extra bytes after each pool so a run up to this length never wraps mid-copy.
const POOL_MARGIN: usize = 1 << 16;

/// The byte pools tails are cut from, built once per run from the seed.
pub struct Pools {
    opaque: Vec<u8>,
    text: Vec<u8>,
}

impl Pools {
    pub fn new(seed: u64) -> Pools {
        let mut opaque = vec![0u8; OPAQUE_POOL_LEN + POOL_MARGIN];
        rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut opaque);
        let mut text = web::text_pool(&mut FlowRng::new(seed, 0x7e57), TEXT_POOL_LEN);
        text.extend_from_within(..POOL_MARGIN);
        Pools { opaque, text }
    }

    fn copy(pool: &[u8], modulus: usize, start: u64, out: &mut [u8]) {
        let mut at = (start % modulus as u64) as usize;
        for chunk in out.chunks_mut(POOL_MARGIN) {
            chunk.copy_from_slice(&pool[at..at + chunk.len()]);
            at = (at + chunk.len()) % modulus;
        }
    }

    fn opaque(&self, start: u64, out: &mut [u8]) {
        Self::copy(&self.opaque, OPAQUE_POOL_LEN, start, out)
    }

    fn text(&self, start: u64, out: &mut [u8]) {
        Self::copy(&self.text, TEXT_POOL_LEN, start, out)
    }

    fn opaque_byte(&self, at: u64) -> u8 {
        self.opaque[(at % OPAQUE_POOL_LEN as u64) as usize]
    }
}

/// How the lazily generated part of a body looks.
#[derive(Copy, Clone, Debug)]
pub enum Tail {
    /// Random bytes: encrypted or compressed data.
    Opaque,
    /// HTML, script and prose from the text pool.
    Text,
    /// MIME base64 lines of 76 characters.
    Base64,
    /// TLS application-data records of at most `max` payload bytes each.
    TlsRecords { max: u16 },
    /// QUIC short-header packets of `size` bytes, each one datagram, to connection `dcid`.
    QuicShort { size: u16, dcid: [u8; 8] },
}

/// One message: `head`, then `tail_len` bytes of `tail` starting at pool offset `start`, then `foot`.
#[derive(Clone, Debug)]
pub struct Body {
    pub head: Vec<u8>,
    pub tail: Tail,
    pub tail_len: u64,
    pub start: u64,
    pub foot: &'static [u8],
}

const TLS_RECORD_HEADER_LEN: u64 = 5;
const QUIC_SHORT_HEADER_LEN: usize = 9;
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

impl Body {
    /// A body that is all head.
    pub fn bytes(head: Vec<u8>) -> Body {
        Body { head, tail: Tail::Opaque, tail_len: 0, start: 0, foot: b"" }
    }

    /// A head followed by `len` bytes of `tail` at a pool offset drawn from `rng`.
    pub fn with_tail(head: Vec<u8>, tail: Tail, len: u64, rng: &mut impl Rng) -> Body {
        Body { head, tail, tail_len: len, start: rng.gen(), foot: b"" }
    }

    /// TLS records carrying `app_bytes` of encrypted data, after `head`.
    pub fn tls_records(head: Vec<u8>, app_bytes: u64, rng: &mut impl Rng) -> Body {
        const MAX: u64 = 16_384 + 17;
        let records = app_bytes.div_ceil(MAX);
        Body::with_tail(head, Tail::TlsRecords { max: MAX as u16 }, app_bytes + records * TLS_RECORD_HEADER_LEN, rng)
    }

    pub fn len(&self) -> u64 {
        self.head.len() as u64 + self.tail_len + self.foot.len() as u64
    }

    /// Write bytes `offset..offset + out.len()` of the message into `out`.
    pub fn fill(&self, pools: &Pools, offset: u64, out: &mut [u8]) {
        let head_len = self.head.len() as u64;
        let mut off = offset;
        let mut out = out;
        if off < head_len {
            let n = out.len().min((head_len - off) as usize);
            out[..n].copy_from_slice(&self.head[off as usize..off as usize + n]);
            out = &mut out[n..];
            off += n as u64;
        }
        let tail_end = head_len + self.tail_len;
        if !out.is_empty() && off < tail_end {
            let n = out.len().min((tail_end - off) as usize);
            self.fill_tail(pools, off - head_len, &mut out[..n]);
            out = &mut out[n..];
            off += n as u64;
        }
        if !out.is_empty() {
            let at = (off - tail_end) as usize;
            out.copy_from_slice(&self.foot[at..at + out.len()]);
        }
    }

    fn fill_tail(&self, pools: &Pools, off: u64, out: &mut [u8]) {
        match self.tail {
            Tail::Opaque => pools.opaque(self.start.wrapping_add(off), out),
            Tail::Text => pools.text(self.start.wrapping_add(off), out),
            Tail::Base64 => {
                for (i, b) in out.iter_mut().enumerate() {
                    let at = off + i as u64;
                    *b = match at % 78 {
                        76 => b'\r',
                        77 => b'\n',
                        _ => BASE64[usize::from(pools.opaque_byte(self.start.wrapping_add(at)) & 63)],
                    };
                }
            }
            Tail::TlsRecords { max } => self.fill_records(pools, off, out, u64::from(max)),
            Tail::QuicShort { size, dcid } => {
                let size = u64::from(size);
                let mut at = off;
                let mut rest = out;
                while !rest.is_empty() {
                    let within = (at % size) as usize;
                    let n = rest.len().min(size as usize - within);
                    let (now, later) = rest.split_at_mut(n);
                    pools.opaque(self.start.wrapping_add(at), now);
                    if within == 0 {
                        now[0] = 0x40 | (now[0] & 0x3f);
                    }
                    for (k, b) in (within.max(1)..QUIC_SHORT_HEADER_LEN).zip(now.iter_mut().skip(within.max(1) - within)) {
                        *b = dcid[k - 1];
                    }
                    at += n as u64;
                    rest = later;
                }
            }
        }
    }

    fn fill_records(&self, pools: &Pools, off: u64, out: &mut [u8], max: u64) {
        let stride = max + TLS_RECORD_HEADER_LEN;
        let mut at = off;
        let mut rest = out;
        while !rest.is_empty() {
            let record_start = at / stride * stride;
            let within = at - record_start;
            let record_len = max.min(self.tail_len - record_start - TLS_RECORD_HEADER_LEN);
            let n = rest.len().min((TLS_RECORD_HEADER_LEN + record_len - within) as usize);
            let (now, later) = rest.split_at_mut(n);
            let header = [0x17, 0x03, 0x03, (record_len >> 8) as u8, record_len as u8];
            let in_header = (TLS_RECORD_HEADER_LEN.saturating_sub(within) as usize).min(n);
            if in_header > 0 {
                now[..in_header].copy_from_slice(&header[within as usize..within as usize + in_header]);
            }
            pools.opaque(self.start.wrapping_add(at + in_header as u64), &mut now[in_header..]);
            at += n as u64;
            rest = later;
        }
    }
}

/// One message of a flow's plan, small enough to keep a whole conversation's plan per open flow.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Web(web::WebMsg),
    Udp(udp::UdpMsg),
    Session(session::SessionMsg),
    /// Bytes with no structure: unknown protocols, and encrypted sessions after their handshake.
    Opaque,
}

/// Materialize message `msg` of turn `turn`, exchange `txn`, sized by `size`.
pub fn build(msg: Msg, ctx: &FlowCtx, turn: u32, txn: u32, size: u32, side: Side) -> Body {
    let mut rng = ctx.rng(u64::from(turn) + 1);
    match msg {
        Msg::Web(m) => web::build(m, ctx, txn, size, side, &mut rng),
        Msg::Udp(m) => udp::build(m, ctx, txn, size, side, &mut rng),
        Msg::Session(m) => session::build(m, ctx, txn, size, side, &mut rng),
        Msg::Opaque => Body::with_tail(Vec::new(), Tail::Opaque, u64::from(size), &mut rng),
    }
}

/// Append a big-endian u16.
pub(crate) fn put16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_be_bytes());
}

/// Append a big-endian u32.
pub(crate) fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_be_bytes());
}

/// Append `n` random bytes.
pub(crate) fn put_random(v: &mut Vec<u8>, rng: &mut impl Rng, n: usize) {
    let at = v.len();
    v.resize(at + n, 0);
    rng.fill_bytes(&mut v[at..]);
}

/// Overwrite the big-endian u16 at `at` with the number of bytes after it.
pub(crate) fn patch_len16(v: &mut [u8], at: usize) {
    let n = (v.len() - at - 2) as u16;
    v[at..at + 2].copy_from_slice(&n.to_be_bytes());
}

/// Overwrite the big-endian u24 at `at` with the number of bytes after it.
pub(crate) fn patch_len24(v: &mut [u8], at: usize) {
    let n = (v.len() - at - 3) as u32;
    v[at..at + 3].copy_from_slice(&n.to_be_bytes()[1..]);
}
