//! The built-in traffic model: which services flows go to, how big they are, and
//! what each side says in what order.
//!
//! [`SERVICES`] is the one table of the mix. [`plan_service`] draws a flow: its service,
//! client and server hosts, host stack profiles, round-trip time, and a [`Plan`]
//! of turns (who speaks, what, how much) ending in a FIN, RST or refused
//! connection. Sizes are heavy-tailed: response bodies are log-normal for most
//! transactions with a Pareto tail (tail index 1.1) for a few percent, so most flows
//! are a handful of packets and a few are elephants of thousands. Timing beyond
//! the network's (idle time between transactions, pacing of bulk data) is not
//! decided here: [`super::flow`] spreads the flow's share of the aggregate rate over it.

use super::payload::session::{script, LineProto, SessionMsg};
use super::payload::udp::UdpMsg;
use super::payload::web::WebMsg;
use super::payload::{vocab, Msg, Side};
use super::rng::{lognormal, pareto, weighted, zipf_index, FlowRng};
use rand::Rng;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    /// `max_payload` bytes per datagram; `acks`: the receiver answers every second
    /// datagram (QUIC), otherwise datagrams are only requests and answers.
    Udp {
        max_payload: u16,
        acks: bool,
    },
}

/// The conversation pattern of a service.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum App {
    Https,
    Http,
    Quic,
    Dns,
    Ntp,
    Ssh,
    /// SMTP on port 25: plain for most sessions, STARTTLS for some.
    Smtp,
    /// SMTP submission: always STARTTLS.
    Submission,
    /// TLS from the first byte (IMAPS, LDAPS, DoT, ...): handshake, then a few records.
    Tls,
    Lines(LineProto),
    Smb,
    Rdp,
    Mysql,
    Postgres,
    Snmp,
    Syslog,
    Sip,
    Opaque,
}

pub struct Service {
    pub name: &'static str,
    pub transport: Transport,
    /// Server port; 0 draws a random unregistered high port per flow.
    pub port: u16,
    /// Share of flows, in basis points (the column sums to 10,000).
    pub weight: u32,
    pub app: App,
    /// How many distinct server hosts offer it; flows pick among them by popularity (Zipf).
    pub servers: u16,
}

const TCP: Transport = Transport::Tcp;
const UDP: Transport = Transport::Udp { max_payload: 1472, acks: false };
const QUIC: Transport = Transport::Udp { max_payload: super::payload::web::QUIC_DATAGRAM, acks: true };

macro_rules! svc {
    ($name:literal, $t:expr, $port:literal, $w:literal, $app:expr, $servers:literal) => {
        Service { name: $name, transport: $t, port: $port, weight: $w, app: $app, servers: $servers }
    };
}

/// The service mix, by share of flows.
///
/// The shape follows published port/protocol breakdowns of enterprise and backbone
/// links (the MAWI WIDE transit samples, CAIDA's passive-monitor summaries, and
/// campus measurement studies of the early 2020s): TCP/443 carries close to half of
/// all flows, cleartext HTTP has shrunk to about a tenth, QUIC on UDP/443 is the
/// fastest-growing share, DNS is the largest UDP service by flow count, and mail,
/// remote access, file sharing and databases each hold a percent or two. The
/// numbers are rounded for a benchmark mix, not fitted to one trace.
pub const SERVICES: &[Service] = &[
    svc!("https", TCP, 443, 4500, App::Https, 16_000),
    svc!("http", TCP, 80, 1200, App::Http, 8_000),
    svc!("quic", QUIC, 443, 800, App::Quic, 4_000),
    svc!("dns", UDP, 53, 1000, App::Dns, 64),
    svc!("ntp", UDP, 123, 160, App::Ntp, 32),
    svc!("ssh", TCP, 22, 180, App::Ssh, 1_500),
    svc!("smtp", TCP, 25, 150, App::Smtp, 1_200),
    svc!("submission", TCP, 587, 60, App::Submission, 300),
    svc!("smtps", TCP, 465, 25, App::Tls, 200),
    svc!("imaps", TCP, 993, 150, App::Tls, 400),
    svc!("pop3s", TCP, 995, 20, App::Tls, 150),
    svc!("imap", TCP, 143, 15, App::Lines(LineProto::Imap), 100),
    svc!("pop3", TCP, 110, 10, App::Lines(LineProto::Pop3), 100),
    svc!("ftp", TCP, 21, 15, App::Lines(LineProto::Ftp), 200),
    svc!("microsoft-ds", TCP, 445, 100, App::Smb, 400),
    svc!("ms-wbt-server", TCP, 3389, 60, App::Rdp, 500),
    svc!("mysql", TCP, 3306, 50, App::Mysql, 200),
    svc!("postgresql", TCP, 5432, 30, App::Postgres, 150),
    svc!("ldaps", TCP, 636, 15, App::Tls, 50),
    svc!("ldap", TCP, 389, 15, App::Opaque, 50),
    svc!("domain-s", TCP, 853, 10, App::Tls, 16),
    svc!("ircd", TCP, 6667, 5, App::Lines(LineProto::Irc), 20),
    svc!("redis", TCP, 6379, 20, App::Lines(LineProto::Redis), 100),
    svc!("memcache", TCP, 11211, 10, App::Lines(LineProto::Memcached), 50),
    svc!("kerberos", TCP, 88, 10, App::Opaque, 20),
    svc!("kubernetes-api", TCP, 6443, 20, App::Tls, 50),
    svc!("secure-mqtt", TCP, 8883, 10, App::Tls, 50),
    svc!("mqtt", TCP, 1883, 10, App::Opaque, 50),
    svc!("xmpp-client-tls", TCP, 5223, 10, App::Tls, 50),
    svc!("http-alt", TCP, 8080, 60, App::Http, 800),
    svc!("https-alt", TCP, 8443, 50, App::Https, 600),
    svc!("http-proxy", TCP, 3128, 10, App::Http, 30),
    svc!("elasticsearch", TCP, 9200, 15, App::Http, 60),
    svc!("prometheus-node", TCP, 9100, 20, App::Http, 400),
    svc!("docker-tls", TCP, 2376, 5, App::Tls, 30),
    svc!("git", TCP, 9418, 5, App::Opaque, 20),
    svc!("rsync", TCP, 873, 5, App::Opaque, 20),
    svc!("vnc", TCP, 5900, 10, App::Opaque, 100),
    svc!("telnet", TCP, 23, 10, App::Opaque, 200),
    svc!("bgp", TCP, 179, 5, App::Opaque, 10),
    svc!("ms-sql-s", TCP, 1433, 15, App::Opaque, 80),
    svc!("oracle", TCP, 1521, 5, App::Opaque, 30),
    svc!("mongodb", TCP, 27017, 10, App::Opaque, 60),
    svc!("amqp", TCP, 5672, 10, App::Opaque, 40),
    svc!("kafka", TCP, 9092, 10, App::Opaque, 40),
    svc!("nfs", TCP, 2049, 10, App::Opaque, 40),
    svc!("high-tcp", TCP, 0, 560, App::Opaque, 6_000),
    svc!("snmp", UDP, 161, 30, App::Snmp, 400),
    svc!("syslog", UDP, 514, 30, App::Syslog, 20),
    svc!("sip", UDP, 5060, 20, App::Sip, 60),
    svc!("stun", UDP, 3478, 20, App::Opaque, 60),
    svc!("openvpn", UDP, 1194, 15, App::Opaque, 60),
    svc!("ipsec-nat-t", UDP, 4500, 20, App::Opaque, 60),
    svc!("isakmp", UDP, 500, 10, App::Opaque, 60),
    svc!("wireguard", UDP, 51820, 10, App::Opaque, 60),
    svc!("netbios-ns", UDP, 137, 10, App::Opaque, 40),
    svc!("kerberos-udp", UDP, 88, 10, App::Opaque, 20),
    svc!("high-udp", UDP, 0, 350, App::Opaque, 3_000),
];

/// Index of service `i`'s first server among the 65,534 usable hosts of 198.19.0.0/16.
pub fn server_base(i: usize) -> u32 {
    SERVICES[..i].iter().map(|s| u32::from(s.servers)).sum()
}

/// Host number `n` (0-based) of a /16 as its last two octets, skipping .0.0 and .255.255.
pub fn host_octets(n: u32) -> [u8; 2] {
    let h = (n % 65_534) + 1;
    [(h >> 8) as u8, h as u8]
}

/// How a TCP flow ends.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Close {
    Fin(Side),
    Rst(Side),
    /// The server answered the SYN with a RST.
    Refused,
    /// UDP: the flow simply stops.
    Silent,
}

/// How long to wait before a turn, beyond the network's round trip.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Gap {
    /// The speaker answers what it just received: processing time only.
    Reply,
    /// The same side goes on at once.
    Next,
    /// A pause between transactions: gets a share of the flow's idle time.
    Think,
}

/// One message of the conversation.
#[derive(Copy, Clone, Debug)]
pub struct Turn {
    pub from: Side,
    pub gap: Gap,
    pub msg: Msg,
    /// Bytes of the body (its tail, for messages with fixed headers).
    pub size: u32,
    /// Number of the request/response exchange this turn belongs to.
    pub txn: u32,
}

/// A host's TCP/IP stack as it shows in headers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    pub ttl: u8,
    pub syn_window: u16,
    pub window_scale: u8,
    pub timestamps: bool,
    pub mss: u16,
    /// SYN option layout.
    pub os: Os,
    /// First and last ephemeral port.
    pub ephemeral: (u16, u16),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Os {
    Linux,
    Windows,
    Apple,
}

const CLIENT_STACKS: &[(u32, Stack)] = &[
    (
        45,
        Stack { ttl: 128, syn_window: 64_240, window_scale: 8, timestamps: false, mss: 1460, os: Os::Windows, ephemeral: (49_152, 65_535) },
    ),
    (25, Stack { ttl: 64, syn_window: 65_535, window_scale: 6, timestamps: true, mss: 1460, os: Os::Apple, ephemeral: (49_152, 65_535) }),
    (30, Stack { ttl: 64, syn_window: 64_240, window_scale: 7, timestamps: true, mss: 1460, os: Os::Linux, ephemeral: (32_768, 60_999) }),
];

/// Everything the flow engine needs to play one synthetic flow.
#[derive(Clone, Debug)]
pub struct Plan {
    pub service: usize,
    pub client_host: u32,
    pub server_host: u32,
    pub client_port: u16,
    pub server_port: u16,
    pub client: Stack,
    pub server: Stack,
    /// Hops between the capture point (next to the clients) and the server.
    pub server_hops: u8,
    pub rtt_ns: u64,
    pub turns: Vec<Turn>,
    pub close: Close,
    pub server_name: String,
}

/// Draw a flow of service `service`.
pub fn plan_service(rng: &mut FlowRng, seed: u64, service: usize) -> Plan {
    let s = &SERVICES[service];
    let server_rank = zipf_index(rng, usize::from(s.servers)) as u32;
    let server_host = server_base(service) + server_rank;
    let client_host = rng.gen_range(0..65_534);
    // A host keeps its stack, distance and name for the whole trace.
    let client = *weighted(&mut FlowRng::new(seed, u64::from(client_host) | 1 << 32), CLIENT_STACKS);
    let mut per_server = FlowRng::new(seed, u64::from(server_host) | 2 << 32);
    let server = server_stack(&mut per_server);
    let server_hops = per_server.gen_range(4..24);
    let base_rtt = lognormal(&mut per_server, 22e6, 0.8).clamp(2e6, 220e6);
    let rtt_ns = (base_rtt * rng.gen_range(0.95..1.15)) as u64;
    let server_port = if s.port == 0 { rng.gen_range(1024..65_535) } else { s.port };
    let client_port = rng.gen_range(client.ephemeral.0..=client.ephemeral.1);
    let subs: &[&str] = match s.app {
        App::Smtp | App::Submission | App::Lines(LineProto::Imap | LineProto::Pop3) => vocab::MAIL_SUBDOMAINS,
        App::Tls if matches!(s.port, 993 | 995 | 465) => vocab::MAIL_SUBDOMAINS,
        App::Dns => &["resolver1", "resolver2", "ns1", "dns"],
        App::Ntp => &["time", "ntp1", "ntp2", "pool"],
        App::Ssh | App::Rdp | App::Smb | App::Mysql | App::Postgres => &["srv", "db", "files", "build", "jump", "dc01"],
        _ => vocab::WEB_SUBDOMAINS,
    };
    let server_name = vocab::host(rng, u64::from(server_host), subs);
    let (turns, close) = conversation(rng, s);
    Plan { service, client_host, server_host, client_port, server_port, client, server, server_hops, rtt_ns, turns, close, server_name }
}

fn server_stack(r: &mut FlowRng) -> Stack {
    let mss = *weighted(r, &[(80, 1460u16), (8, 1440), (6, 1400), (4, 1380), (2, 1360)]);
    if r.gen_bool(0.85) {
        Stack { ttl: 64, syn_window: 65_160, window_scale: 7, timestamps: true, mss, os: Os::Linux, ephemeral: (32_768, 60_999) }
    } else {
        Stack { ttl: 128, syn_window: 65_535, window_scale: 8, timestamps: false, mss, os: Os::Windows, ephemeral: (49_152, 65_535) }
    }
}

/// Bytes of one response body: log-normal around 6 KB, with a Pareto tail for 4 % of
/// transactions, capped at 64 MB.
pub fn response_size(rng: &mut impl Rng) -> u32 {
    let x = if rng.gen_bool(0.04) { pareto(rng, 150_000.0, 1.1) } else { lognormal(rng, 6_000.0, 1.5) };
    x.clamp(32.0, 64e6) as u32
}

/// Bytes of a small client request or command.
fn request_size(rng: &mut impl Rng) -> u32 {
    lognormal(rng, 350.0, 0.7).clamp(20.0, 16_000.0) as u32
}

/// How many request/response exchanges a connection carries: mostly one or two, a few long-lived.
fn transactions(rng: &mut impl Rng, median: f64) -> u32 {
    (lognormal(rng, median, 1.0).round() as u32).clamp(1, 200)
}

/// A conversation being written down: its turns so far and the number of the current exchange.
struct Conv {
    turns: Vec<Turn>,
    txn: u32,
}

impl Conv {
    fn say(&mut self, from: Side, gap: Gap, msg: Msg, size: u32) {
        self.turns.push(Turn { from, gap, msg, size, txn: self.txn });
    }

    fn tls_handshake(&mut self, first_gap: Gap, rng: &mut FlowRng) {
        self.say(Side::Client, first_gap, Msg::Web(WebMsg::TlsClientHello), 0);
        self.say(Side::Server, Gap::Reply, Msg::Web(WebMsg::TlsServerHello), lognormal(rng, 3_200.0, 0.35) as u32);
        self.say(Side::Client, Gap::Reply, Msg::Web(WebMsg::TlsClientFinished), 0);
    }

    /// Database queries and their result sets.
    fn queries(&mut self, rng: &mut FlowRng, query: SessionMsg, result: SessionMsg) {
        for i in 0..transactions(rng, 6.0) {
            self.txn = i;
            self.say(Side::Client, Gap::Think, Msg::Session(query), 0);
            self.say(Side::Server, Gap::Reply, Msg::Session(result), lognormal(rng, 800.0, 1.8).clamp(8.0, 8e6) as u32);
        }
    }

    fn lines(&mut self, proto: LineProto, part: u8, first_gap: Gap, size: u32) {
        let s = script(proto);
        let steps = match part {
            0 => s.prologue,
            1 => s.txn,
            _ => s.epilogue,
        };
        let mut prev: Option<Side> = None;
        for (i, (side, _)) in steps.iter().enumerate() {
            let gap = match prev {
                None => first_gap,
                Some(p) if p == *side => Gap::Next,
                Some(_) => Gap::Reply,
            };
            self.say(*side, gap, Msg::Session(SessionMsg::Line { proto, part, step: i as u8 }), size);
            prev = Some(*side);
        }
    }
}

fn mail_size(rng: &mut FlowRng) -> u32 {
    (lognormal(rng, 14_000.0, 1.4) as u32).clamp(4_096, 30_000_000)
}

fn conversation(rng: &mut FlowRng, s: &Service) -> (Vec<Turn>, Close) {
    let mut c = Conv { turns: Vec::with_capacity(8), txn: 0 };
    use Side::{Client as Cl, Server as Sv};
    let gap_for = |i: u32| if i == 0 { Gap::Next } else { Gap::Think };
    match s.app {
        App::Https | App::Tls => {
            c.tls_handshake(Gap::Next, rng);
            let web = s.app == App::Https;
            let k = transactions(rng, if web { 1.6 } else { 3.0 });
            for i in 0..k {
                c.txn = i;
                let req = request_size(rng);
                let resp = if web { response_size(rng) } else { lognormal(rng, 900.0, 1.6).clamp(40.0, 20e6) as u32 };
                c.say(Cl, gap_for(i), Msg::Web(WebMsg::TlsData), req);
                c.say(Sv, Gap::Reply, Msg::Web(WebMsg::TlsData), resp);
            }
        }
        App::Http => {
            for i in 0..transactions(rng, 1.5) {
                c.txn = i;
                let resp = response_size(rng);
                let download = resp > 512 * 1024;
                let upload = if rng.gen_bool(0.08) { request_size(rng) * 3 } else { 0 };
                c.say(Cl, gap_for(i), Msg::Web(WebMsg::HttpRequest { download }), upload);
                c.say(Sv, Gap::Reply, Msg::Web(WebMsg::HttpResponse { download }), resp);
            }
        }
        App::Quic => {
            c.say(Cl, Gap::Next, Msg::Web(WebMsg::QuicClientInitial), 0);
            c.say(Sv, Gap::Reply, Msg::Web(WebMsg::QuicServerInitial), 0);
            for _ in 0..rng.gen_range(1..4) {
                c.say(Sv, Gap::Next, Msg::Web(WebMsg::QuicServerHandshake), rng.gen_range(600..1200));
            }
            c.say(Cl, Gap::Reply, Msg::Web(WebMsg::QuicClientHandshake), rng.gen_range(80..300));
            for i in 0..transactions(rng, 2.0) {
                c.txn = i;
                c.say(Cl, gap_for(i), Msg::Web(WebMsg::QuicData), request_size(rng).min(1200));
                c.say(Sv, Gap::Reply, Msg::Web(WebMsg::QuicData), response_size(rng));
            }
        }
        App::Dns => {
            let k = *weighted(rng, &[(85, 1u32), (12, 2), (3, 4)]);
            for i in 0..k {
                c.txn = i;
                c.say(Cl, if i == 0 { Gap::Next } else { Gap::Reply }, Msg::Udp(UdpMsg::DnsQuery), 0);
                c.say(Sv, Gap::Reply, Msg::Udp(UdpMsg::DnsResponse), 0);
            }
        }
        App::Ntp | App::Snmp | App::Sip => {
            let (q, a, k) = match s.app {
                App::Ntp => (UdpMsg::NtpRequest, UdpMsg::NtpResponse, *weighted(rng, &[(90, 1u32), (10, 4)])),
                App::Snmp => (UdpMsg::SnmpGet, UdpMsg::SnmpResponse, rng.gen_range(1..4)),
                _ => (UdpMsg::SipRequest, UdpMsg::SipResponse, rng.gen_range(1..3)),
            };
            for i in 0..k {
                c.txn = i;
                c.say(Cl, gap_for(i), Msg::Udp(q), 0);
                c.say(Sv, Gap::Reply, Msg::Udp(a), 0);
            }
        }
        App::Syslog => {
            for i in 0..transactions(rng, 3.0) {
                c.txn = i;
                c.say(Cl, gap_for(i), Msg::Udp(UdpMsg::Syslog), 0);
            }
        }
        App::Ssh => {
            c.say(Sv, Gap::Reply, Msg::Session(SessionMsg::SshBanner), 0);
            c.say(Cl, Gap::Reply, Msg::Session(SessionMsg::SshBanner), 0);
            c.say(Cl, Gap::Next, Msg::Session(SessionMsg::SshKexInit), 0);
            c.say(Sv, Gap::Reply, Msg::Session(SessionMsg::SshKexInit), 0);
            c.say(Cl, Gap::Reply, Msg::Session(SessionMsg::SshEcdhInit), 0);
            c.say(Sv, Gap::Reply, Msg::Session(SessionMsg::SshEcdhReply), 0);
            c.say(Cl, Gap::Reply, Msg::Opaque, 16 + 52 + 68);
            c.say(Sv, Gap::Reply, Msg::Opaque, 52);
            if rng.gen_bool(0.7) {
                // Interactive: keystrokes echoed, now and then a screenful of output.
                for i in 0..transactions(rng, 40.0) {
                    c.txn = i;
                    c.say(Cl, Gap::Think, Msg::Opaque, 36);
                    let out = if rng.gen_bool(0.1) { lognormal(rng, 2_000.0, 1.2) as u32 } else { 36 };
                    c.say(Sv, Gap::Reply, Msg::Opaque, out.max(36));
                }
            } else {
                let bulk = response_size(rng).max(50_000);
                let up = rng.gen_bool(0.4);
                c.say(Cl, Gap::Next, Msg::Opaque, if up { bulk } else { 100 });
                c.say(Sv, Gap::Reply, Msg::Opaque, if up { 52 } else { bulk });
            }
        }
        App::Smtp | App::Submission => {
            if s.app == App::Smtp && rng.gen_bool(0.7) {
                c.lines(LineProto::Smtp, 0, Gap::Reply, 0);
                for i in 0..*weighted(rng, &[(85, 1u32), (10, 2), (5, 5)]) {
                    c.txn = i;
                    c.lines(LineProto::Smtp, 1, Gap::Reply, mail_size(rng));
                }
                c.lines(LineProto::Smtp, 2, Gap::Reply, 0);
            } else {
                c.lines(LineProto::SmtpStartTls, 0, Gap::Reply, 0);
                c.tls_handshake(Gap::Reply, rng);
                c.txn = 1;
                for _ in 0..4 {
                    c.say(Cl, Gap::Reply, Msg::Web(WebMsg::TlsData), request_size(rng).min(200));
                    c.say(Sv, Gap::Reply, Msg::Web(WebMsg::TlsData), rng.gen_range(20..200));
                }
                c.say(Cl, Gap::Reply, Msg::Web(WebMsg::TlsData), mail_size(rng));
                c.say(Sv, Gap::Reply, Msg::Web(WebMsg::TlsData), 60);
            }
        }
        App::Lines(p) => {
            c.lines(p, 0, if script(p).prologue.first().is_some_and(|(s, _)| *s == Cl) { Gap::Next } else { Gap::Reply }, 0);
            let k = transactions(rng, 2.0);
            for i in 0..k {
                c.txn = i;
                let size = match p {
                    LineProto::Pop3 | LineProto::Imap => mail_size(rng),
                    LineProto::Ftp => response_size(rng),
                    _ => lognormal(rng, 300.0, 1.2).clamp(1.0, 1e6) as u32,
                };
                c.lines(p, 1, if i == 0 { Gap::Reply } else { Gap::Think }, size);
            }
            c.lines(p, 2, Gap::Think, 0);
        }
        App::Smb => {
            use SessionMsg::*;
            for m in [SmbNegotiate, SmbSessionSetup, SmbTreeConnect] {
                c.say(Cl, if m == SmbNegotiate { Gap::Next } else { Gap::Reply }, Msg::Session(m), 0);
                c.say(Sv, Gap::Reply, Msg::Session(m), 0);
            }
            for i in 0..transactions(rng, 4.0) {
                c.txn = i;
                let size = response_size(rng);
                let write = rng.gen_bool(0.3);
                c.say(Cl, Gap::Think, Msg::Session(SmbIo), if write { size } else { 0 });
                c.say(Sv, Gap::Reply, Msg::Session(SmbIo), if write { 0 } else { size });
            }
        }
        App::Rdp => {
            c.say(Cl, Gap::Next, Msg::Session(SessionMsg::RdpConnect), 0);
            c.say(Sv, Gap::Reply, Msg::Session(SessionMsg::RdpConnect), 0);
            c.tls_handshake(Gap::Reply, rng);
            for i in 0..transactions(rng, 60.0) {
                c.txn = i;
                c.say(Cl, Gap::Think, Msg::Web(WebMsg::TlsData), rng.gen_range(20..120));
                c.say(Sv, Gap::Reply, Msg::Web(WebMsg::TlsData), lognormal(rng, 1_500.0, 1.3).clamp(40.0, 2e6) as u32);
            }
        }
        App::Mysql => {
            use SessionMsg::*;
            c.say(Sv, Gap::Reply, Msg::Session(MysqlGreeting), 0);
            c.say(Cl, Gap::Reply, Msg::Session(MysqlLogin), 0);
            c.say(Sv, Gap::Reply, Msg::Session(MysqlOk), 0);
            c.queries(rng, MysqlQuery, MysqlResult);
        }
        App::Postgres => {
            use SessionMsg::*;
            c.say(Cl, Gap::Next, Msg::Session(PgStartup), 0);
            c.say(Sv, Gap::Reply, Msg::Session(PgReady), 0);
            c.queries(rng, PgQuery, PgResult);
        }
        App::Opaque => {
            let server_first = s.transport == Transport::Tcp && rng.gen_bool(0.2);
            if server_first {
                c.say(Sv, Gap::Reply, Msg::Opaque, request_size(rng));
            }
            let udp = s.transport != Transport::Tcp;
            for i in 0..transactions(rng, 2.0) {
                c.txn = i;
                let (q, a) = if udp { (rng.gen_range(40..1200), rng.gen_range(40..1400)) } else { (request_size(rng), response_size(rng)) };
                let first = if i == 0 && !server_first {
                    Gap::Next
                } else if i == 0 {
                    Gap::Reply
                } else {
                    Gap::Think
                };
                c.say(Cl, first, Msg::Opaque, q);
                c.say(Sv, Gap::Reply, Msg::Opaque, a);
            }
        }
    }
    let close = if s.transport != Transport::Tcp {
        Close::Silent
    } else {
        *weighted(
            rng,
            &[
                (52, Close::Fin(Side::Client)),
                (34, Close::Fin(Side::Server)),
                (8, Close::Rst(Side::Client)),
                (3, Close::Rst(Side::Server)),
                (3, Close::Refused),
            ],
        )
    };
    let turns = if close == Close::Refused { Vec::new() } else { c.turns };
    (turns, close)
}
