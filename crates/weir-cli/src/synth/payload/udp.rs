//! Datagram payloads: DNS, NTP, SNMP, syslog and SIP, in their real wire formats.
//!
//! A query and its answer are drawn from the same transaction stream, so the answer
//! echoes the query's ID, name and type. Addresses inside payloads (DNS answers,
//! NTP reference IDs, SIP contacts) stay in the benchmark ranges like the headers:
//! 198.19.0.0/16 for IPv4 and 2001:2::/48 (RFC 5180) for IPv6.

use super::vocab::{self, host, site, WEB_SUBDOMAINS, WORDS};
use super::{patch_len16, put16, put32, put_random, Body, FlowCtx, Side};
use crate::synth::rng::{pick, weighted, zipf_index, FlowRng};
use rand::Rng;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UdpMsg {
    DnsQuery,
    DnsResponse,
    NtpRequest,
    NtpResponse,
    SnmpGet,
    SnmpResponse,
    Syslog,
    SipRequest,
    SipResponse,
}

const TXN_STREAM: u64 = 2 << 40;

/// How many distinct sites DNS clients ask about; popularity is Zipf over them.
pub const DNS_SITES: usize = 20_000;

pub fn build(m: UdpMsg, ctx: &FlowCtx, txn: u32, _size: u32, _side: Side, rng: &mut FlowRng) -> Body {
    let mut t = ctx.rng(TXN_STREAM + u64::from(txn));
    Body::bytes(match m {
        UdpMsg::DnsQuery => dns(&DnsTxn::draw(&mut t), None),
        UdpMsg::DnsResponse => dns(&DnsTxn::draw(&mut t), Some(rng)),
        UdpMsg::NtpRequest => ntp(ctx, false, &mut t),
        UdpMsg::NtpResponse => ntp(ctx, true, &mut t),
        UdpMsg::SnmpGet => snmp(ctx, false, &mut t),
        UdpMsg::SnmpResponse => snmp(ctx, true, &mut t),
        UdpMsg::Syslog => syslog(ctx, rng),
        UdpMsg::SipRequest => sip(ctx, false, &mut t),
        UdpMsg::SipResponse => sip(ctx, true, &mut t),
    })
}

/// One DNS exchange: what was asked and how it turns out.
struct DnsTxn {
    id: u16,
    name: String,
    qtype: u16,
    edns: bool,
    rcode: u8,
    cname: Option<String>,
    answers: usize,
    addr_seed: u64,
}

const QTYPES: &[(u32, u16)] = &[(560, 1), (250, 28), (60, 65), (40, 12), (30, 16), (25, 15), (20, 33), (15, 5)];

impl DnsTxn {
    fn draw(r: &mut FlowRng) -> DnsTxn {
        let qtype = *weighted(r, QTYPES);
        let site_n = zipf_index(r, DNS_SITES) as u64;
        let name = match qtype {
            12 => format!("{}.{}.19.198.in-addr.arpa", r.gen_range(1..255), r.gen_range(0..256)),
            15 => site(site_n),
            16 => format!("{}{}", if r.gen_bool(0.5) { "_dmarc." } else { "" }, site(site_n)),
            33 => format!("_{}._tcp.{}", pick(r, &["ldap", "kerberos", "sip", "xmpp-client", "imaps"]), site(site_n)),
            _ => host(r, site_n, WEB_SUBDOMAINS),
        };
        let rcode = *weighted(r, &[(930, 0u8), (60, 3), (10, 2)]);
        let cname = (matches!(qtype, 1 | 28) && r.gen_bool(0.3)).then(|| {
            format!("{}.{}.{}", pick(r, WORDS), pick(r, &["edgekey", "cdn", "lb", "global"]), site(zipf_index(r, 50) as u64 + 900_000))
        });
        let answers = if qtype == 12 || qtype == 5 { 1 } else { *weighted(r, &[(50, 1usize), (25, 2), (15, 4), (10, 8)]) };
        DnsTxn { id: r.gen(), name, qtype, edns: r.gen_bool(0.7), rcode, cname, answers, addr_seed: r.gen() }
    }
}

/// Append `name` as DNS labels.
fn put_name(v: &mut Vec<u8>, name: &str) {
    for label in name.split('.').filter(|l| !l.is_empty()) {
        v.push(label.len() as u8);
        v.extend_from_slice(label.as_bytes());
    }
    v.push(0);
}

/// Start a resource record owned by the name at `ptr` (a compression pointer) and
/// leave its RDLENGTH to be patched; returns where RDLENGTH is.
fn rr_start(v: &mut Vec<u8>, ptr: u16, ty: u16, ttl: u32) -> usize {
    put16(v, 0xc000 | ptr);
    put16(v, ty);
    put16(v, 1);
    put32(v, ttl);
    let at = v.len();
    put16(v, 0);
    at
}

/// A query, or with `answer_rng` its response.
fn dns(t: &DnsTxn, answer_rng: Option<&mut FlowRng>) -> Vec<u8> {
    let mut v = Vec::with_capacity(128);
    put16(&mut v, t.id);
    let answering = answer_rng.is_some();
    let flags: u16 = if answering { 0x8180 | u16::from(t.rcode) } else { 0x0100 };
    put16(&mut v, flags);
    put16(&mut v, 1);
    let ancount_at = v.len();
    put16(&mut v, 0);
    let nscount_at = v.len();
    put16(&mut v, 0);
    put16(&mut v, u16::from(t.edns));
    const QNAME_AT: u16 = 12;
    put_name(&mut v, &t.name);
    put16(&mut v, t.qtype);
    put16(&mut v, 1);
    if let Some(r) = answer_rng {
        let mut addr = FlowRng::new(t.addr_seed, 0);
        if t.rcode == 0 {
            let mut owner = QNAME_AT;
            let mut count = 0u16;
            if let Some(c) = &t.cname {
                let len_at = rr_start(&mut v, owner, 5, r.gen_range(60..3600));
                owner = v.len() as u16;
                put_name(&mut v, c);
                patch_len16(&mut v, len_at);
                count += 1;
            }
            for _ in 0..t.answers {
                let ttl = pick(r, &[20u32, 60, 300, 300, 3600, 86_400]);
                let len_at = rr_start(&mut v, owner, t.qtype, ttl);
                match t.qtype {
                    1 => v.extend_from_slice(&[198, 19, addr.gen(), addr.gen_range(1..255)]),
                    28 => {
                        v.extend_from_slice(&[0x20, 0x01, 0x00, 0x02, 0x00, 0x00]);
                        put_random(&mut v, &mut addr, 10);
                    }
                    65 => {
                        put16(&mut v, 1);
                        v.push(0);
                        v.extend_from_slice(&[0, 1, 0, 6, 2, b'h', b'3', 2, b'h', b'2']);
                    }
                    12 => put_name(&mut v, &host(r, addr.gen_range(0..DNS_SITES as u64), WEB_SUBDOMAINS)),
                    15 => {
                        put16(&mut v, 10 * (count + 1));
                        put_name(&mut v, &format!("mx{}.{}", count + 1, site(addr.gen_range(0..DNS_SITES as u64))));
                    }
                    16 => {
                        let txt = if t.name.starts_with("_dmarc") {
                            format!(
                                "v=DMARC1; p={}; rua=mailto:dmarc@{}",
                                pick(r, &["none", "quarantine", "reject"]),
                                site(addr.gen_range(0..DNS_SITES as u64))
                            )
                        } else {
                            format!("v=spf1 include:_spf.{} ~all", site(addr.gen_range(0..DNS_SITES as u64)))
                        };
                        v.push(txt.len() as u8);
                        v.extend_from_slice(txt.as_bytes());
                    }
                    33 => {
                        put16(&mut v, 0);
                        put16(&mut v, 100);
                        put16(&mut v, pick(r, &[389u16, 88, 5060, 5222, 993]));
                        put_name(&mut v, &format!("srv{}.{}", count + 1, site(addr.gen_range(0..DNS_SITES as u64))));
                    }
                    _ => put_name(&mut v, &host(r, addr.gen_range(0..DNS_SITES as u64), WEB_SUBDOMAINS)),
                }
                patch_len16(&mut v, len_at);
                count += 1;
            }
            v[ancount_at..ancount_at + 2].copy_from_slice(&count.to_be_bytes());
        } else if t.rcode == 3 {
            // The SOA is owned by the parent zone: point past the query's first label.
            let (first, zone) = t.name.split_once('.').unwrap_or(("", t.name.as_str()));
            let zone_at = if first.is_empty() { QNAME_AT } else { QNAME_AT + 1 + first.len() as u16 };
            let len_at = rr_start(&mut v, zone_at, 6, 900);
            put_name(&mut v, &format!("ns1.{zone}"));
            put_name(&mut v, &format!("hostmaster.{zone}"));
            put32(&mut v, 2_024_000_000 + r.gen_range(0..9_999_999));
            for x in [7200u32, 3600, 1_209_600, 300] {
                put32(&mut v, x);
            }
            patch_len16(&mut v, len_at);
            v[nscount_at..nscount_at + 2].copy_from_slice(&1u16.to_be_bytes());
        }
    }
    if t.edns {
        v.extend_from_slice(&[0, 0x00, 0x29, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    }
    v
}

/// Seconds between the NTP era (1900) and the Unix epoch.
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

fn ntp_ts(ns: u64) -> [u8; 8] {
    let secs = ns / 1_000_000_000 + NTP_UNIX_OFFSET;
    let frac = ((ns % 1_000_000_000) << 32) / 1_000_000_000;
    (((secs & 0xffff_ffff) << 32) | frac).to_be_bytes()
}

fn ntp(ctx: &FlowCtx, reply: bool, t: &mut FlowRng) -> Vec<u8> {
    let client_tx = ctx.start_ns + t.gen_range(0..1_000_000);
    let poll = t.gen_range(6..11u8);
    let mut v = Vec::with_capacity(48);
    if !reply {
        v.extend_from_slice(&[0x23, 0, poll, 0xe9]);
        v.resize(40, 0);
        v.extend_from_slice(&ntp_ts(client_tx));
        return v;
    }
    let stratum = if t.gen_bool(0.2) { 1 } else { 2 };
    v.extend_from_slice(&[0x24, stratum, poll, 0xe7]);
    put32(&mut v, t.gen_range(0..0x0800));
    put32(&mut v, t.gen_range(0..0x1000));
    if stratum == 1 {
        v.extend_from_slice(pick(t, &[b"GPS\0", b"PPS\0", b"DCF\0"]));
    } else {
        v.extend_from_slice(&[198, 19, t.gen(), t.gen_range(1..255)]);
    }
    let rx = client_tx + t.gen_range(1_000_000..80_000_000);
    v.extend_from_slice(&ntp_ts(rx - t.gen_range(1_000_000_000..600_000_000_000)));
    v.extend_from_slice(&ntp_ts(client_tx));
    v.extend_from_slice(&ntp_ts(rx));
    v.extend_from_slice(&ntp_ts(rx + t.gen_range(5_000..60_000)));
    v
}

/// BER: tag, definite length, contents.
fn ber(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    match body.len() {
        n @ 0..=127 => v.push(n as u8),
        n @ 128..=255 => v.extend_from_slice(&[0x81, n as u8]),
        n => v.extend_from_slice(&[0x82, (n >> 8) as u8, n as u8]),
    }
    v.extend_from_slice(body);
    v
}

fn ber_int(x: u32) -> Vec<u8> {
    let b = x.to_be_bytes();
    let skip = b.iter().take(3).take_while(|&&c| c == 0).count();
    let mut body = b[skip..].to_vec();
    if body[0] & 0x80 != 0 {
        body.insert(0, 0);
    }
    ber(0x02, &body)
}

/// OIDs of SNMPv2-MIB system and IF-MIB counters that pollers ask for.
const SNMP_OIDS: &[&[u8]] = &[
    &[0x2b, 6, 1, 2, 1, 1, 1, 0],
    &[0x2b, 6, 1, 2, 1, 1, 3, 0],
    &[0x2b, 6, 1, 2, 1, 1, 5, 0],
    &[0x2b, 6, 1, 2, 1, 2, 2, 1, 10, 1],
    &[0x2b, 6, 1, 2, 1, 2, 2, 1, 16, 1],
    &[0x2b, 6, 1, 2, 1, 31, 1, 1, 1, 6, 2],
];

fn snmp(ctx: &FlowCtx, reply: bool, t: &mut FlowRng) -> Vec<u8> {
    let request_id: u32 = t.gen_range(1..0x7fff_ffff);
    let n = t.gen_range(1..4);
    let first = t.gen_range(0..SNMP_OIDS.len());
    let mut binds = Vec::new();
    for i in 0..n {
        let oid = SNMP_OIDS[(first + i) % SNMP_OIDS.len()];
        let value = if !reply {
            vec![0x05, 0x00]
        } else {
            match oid[6] {
                1 if oid[7] == 1 => {
                    ber(0x04, format!("Linux {} 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 x86_64", ctx.server_name).as_bytes())
                }
                1 if oid[7] == 5 => ber(0x04, ctx.server_name.as_bytes()),
                1 => ber(0x43, &t.gen_range(1_000u32..400_000_000).to_be_bytes()),
                _ => ber(0x41, &t.gen::<u32>().to_be_bytes()),
            }
        };
        let mut vb = ber(0x06, oid);
        vb.extend_from_slice(&value);
        binds.extend_from_slice(&ber(0x30, &vb));
    }
    let mut pdu = ber_int(request_id);
    pdu.extend_from_slice(&ber_int(0));
    pdu.extend_from_slice(&ber_int(0));
    pdu.extend_from_slice(&ber(0x30, &binds));
    let mut msg = ber_int(1);
    msg.extend_from_slice(&ber(0x04, pick(t, &[&b"public"[..], b"monitor", b"n3tw0rk"])));
    msg.extend_from_slice(&ber(if reply { 0xa2 } else { 0xa0 }, &pdu));
    ber(0x30, &msg)
}

fn syslog(ctx: &FlowCtx, rng: &mut FlowRng) -> Vec<u8> {
    const APPS: &[(&str, &str)] = &[
        ("sshd", "Accepted publickey for {user} from 198.18.{a}.{b} port {p} ssh2: ED25519 SHA256:{h}"),
        ("sshd", "Failed password for invalid user {user} from 198.18.{a}.{b} port {p} ssh2"),
        ("CRON", "({user}) CMD (/usr/local/bin/backup --incremental)"),
        ("kernel", "[UFW BLOCK] IN=eth0 OUT= SRC=198.18.{a}.{b} DST=198.19.0.1 LEN=60 PROTO=TCP SPT={p} DPT=23"),
        ("systemd", "Started session {p} of user {user}."),
        ("nginx", "198.18.{a}.{b} - - \"GET /{h} HTTP/1.1\" 404 153"),
        ("postfix/smtpd", "connect from unknown[198.18.{a}.{b}]"),
    ];
    let (app, msg) = pick(rng, APPS);
    let msg = msg
        .replace("{user}", pick(rng, vocab::FIRST_NAMES))
        .replace("{a}", &rng.gen::<u8>().to_string())
        .replace("{b}", &rng.gen_range(1..255u8).to_string())
        .replace("{p}", &rng.gen_range(1024..65535u16).to_string())
        .replace("{h}", &vocab::hex_token(rng, 8));
    let date = chrono::DateTime::from_timestamp((ctx.start_ns / 1_000_000_000) as i64, 0).unwrap_or_default();
    let prio = pick(rng, &[13u8, 30, 38, 86, 134, 164]);
    format!("<{prio}>{} {} {app}[{}]: {msg}", date.format("%b %e %H:%M:%S"), pick(rng, WORDS), rng.gen_range(100..65_000)).into_bytes()
}

fn sip(ctx: &FlowCtx, reply: bool, t: &mut FlowRng) -> Vec<u8> {
    let method = pick(t, &["OPTIONS", "REGISTER", "REGISTER", "INVITE", "SUBSCRIBE"]);
    let user = pick(t, vocab::FIRST_NAMES);
    let domain = site(t.gen_range(0..200));
    let branch = vocab::hex_token(t, 10);
    let tag = vocab::hex_token(t, 4);
    let call_id = format!("{}@{}", vocab::hex_token(t, 12), domain);
    let cseq = t.gen_range(1..5000);
    let c = ctx.client_ip;
    let via = format!("SIP/2.0/UDP {}.{}.{}.{}:5060;branch=z9hG4bK{branch};rport", c[0], c[1], c[2], c[3]);
    let mut s = if reply {
        format!("SIP/2.0 {}\r\nVia: {via}\r\n", if method == "INVITE" { "100 Trying" } else { "200 OK" })
    } else {
        format!("{method} sip:{domain} SIP/2.0\r\nVia: {via}\r\nMax-Forwards: 70\r\n")
    };
    s.push_str(&format!(
        "From: <sip:{user}@{domain}>;tag={tag}\r\nTo: <sip:{user}@{domain}>\r\nCall-ID: {call_id}\r\nCSeq: {cseq} {method}\r\n"
    ));
    s.push_str(&format!("Contact: <sip:{user}@{}.{}.{}.{}:5060>\r\n", c[0], c[1], c[2], c[3]));
    s.push_str(if reply { "Server: Asterisk PBX 20.5.0\r\n" } else { "User-Agent: Linphone/5.2.0 (belle-sip/5.2.0)\r\n" });
    if method == "REGISTER" {
        s.push_str("Expires: 3600\r\n");
    }
    s.push_str("Content-Length: 0\r\n\r\n");
    s.into_bytes()
}
