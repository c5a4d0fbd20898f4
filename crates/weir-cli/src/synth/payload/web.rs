//! Web payloads: HTTP/1.1, TLS 1.3 and QUIC, plus the text pool that bodies are cut from.
//!
//! HTTP requests and responses carry full header blocks (varied hosts, paths, user
//! agents, servers, content types, dates) and bodies whose first bytes match their
//! content type (HTML, JSON, JPEG/PNG/MP4/ZIP magic, gzip). TLS flows open with a
//! complete ClientHello (SNI, ALPN, GREASE, key share, in the orders Chrome and
//! Firefox/OpenSSL use) and a TLS 1.3 ServerHello, then only opaque application-data
//! records, as on the wire. QUIC flows open with a long-header Initial padded to
//! 1250 bytes and continue in short-header packets. A request and its response are
//! built from the same transaction stream, so the response fits the request.

use super::vocab::{self, host, http_date, url_path, HTTP_SERVERS, USER_AGENTS, WORDS};
use super::{patch_len16, patch_len24, put16, put_random, Body, FlowCtx, Side, Tail};
use crate::synth::rng::{pick, weighted, FlowRng};
use rand::Rng;

/// Messages of the web protocols. `download` marks a transaction whose response is
/// large, so the request asks for a file rather than a page.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WebMsg {
    HttpRequest {
        download: bool,
    },
    HttpResponse {
        download: bool,
    },
    TlsClientHello,
    /// ServerHello, ChangeCipherSpec, then `size` bytes of encrypted handshake.
    TlsServerHello,
    TlsClientFinished,
    TlsData,
    QuicClientInitial,
    QuicServerInitial,
    QuicServerHandshake,
    QuicClientHandshake,
    QuicData,
}

/// Stream numbers that both sides of a flow derive, so their bytes agree.
const SESSION_STREAM: u64 = 1 << 40;
const TXN_STREAM: u64 = 2 << 40;
const CID_STREAM: u64 = 3 << 40;

/// Bytes of UDP payload per QUIC datagram after the handshake: what browsers use on a 1500-byte path.
pub const QUIC_DATAGRAM: u16 = 1252;

pub fn build(m: WebMsg, ctx: &FlowCtx, txn: u32, size: u32, side: Side, rng: &mut FlowRng) -> Body {
    let size = u64::from(size);
    match m {
        WebMsg::HttpRequest { download } => http_request(ctx, txn, download, size, rng),
        WebMsg::HttpResponse { download } => http_response(ctx, txn, download, size, rng),
        WebMsg::TlsClientHello => Body::bytes(client_hello(ctx, rng)),
        WebMsg::TlsServerHello => Body::tls_records(server_hello(ctx, rng), size, rng),
        WebMsg::TlsClientFinished => {
            let mut v = vec![0x14, 0x03, 0x03, 0x00, 0x01, 0x01, 0x17, 0x03, 0x03, 0x00, 0x35];
            put_random(&mut v, rng, 0x35);
            Body::bytes(v)
        }
        WebMsg::TlsData => Body::tls_records(Vec::new(), size.max(1), rng),
        WebMsg::QuicClientInitial => Body::bytes(quic_long(ctx, 0xc0, Side::Client, 1250, rng)),
        WebMsg::QuicServerInitial => Body::bytes(quic_long(ctx, 0xc0, Side::Server, 1200, rng)),
        WebMsg::QuicServerHandshake => Body::bytes(quic_long(ctx, 0xe0, Side::Server, size.clamp(200, 1200) as usize, rng)),
        WebMsg::QuicClientHandshake => Body::bytes(quic_long(ctx, 0xe0, Side::Client, size.clamp(60, 400) as usize, rng)),
        WebMsg::QuicData => {
            let dcid = quic_cid(ctx, side.other());
            // A last datagram too short for a short header plus an AEAD tag would be malformed.
            let dgram = u64::from(QUIC_DATAGRAM);
            let len = size.max(40);
            let len = if len % dgram != 0 && len % dgram < 40 { len + 40 } else { len };
            Body::with_tail(Vec::new(), Tail::QuicShort { size: QUIC_DATAGRAM, dcid }, len, rng)
        }
    }
}

/// What a request asked for; drawn identically when building the request and its response.
struct Txn {
    path: String,
    kind: &'static ContentKind,
    status: u16,
    agent: &'static str,
    cookie: Option<String>,
    language: &'static str,
}

struct ContentKind {
    mime: &'static str,
    ext: &'static str,
    /// First bytes of the body (file magic) and the kind of bytes after it.
    magic: &'static [u8],
    tail: Tail,
    /// Body ends with this, for markup that closes.
    foot: &'static [u8],
}

const PAGE_KINDS: &[(u32, ContentKind)] = &[
    (
        30,
        ContentKind {
            mime: "text/html; charset=utf-8",
            ext: "",
            magic: b"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
            tail: Tail::Text,
            foot: b"</body></html>\n",
        },
    ),
    (14, ContentKind { mime: "application/javascript", ext: ".js", magic: b"\"use strict\";", tail: Tail::Text, foot: b"\n" }),
    (8, ContentKind { mime: "text/css", ext: ".css", magic: b"@charset \"UTF-8\";\n", tail: Tail::Text, foot: b"\n" }),
    (14, ContentKind { mime: "application/json", ext: ".json", magic: b"{\"data\":[", tail: Tail::Text, foot: b"\"]}" }),
    (
        14,
        ContentKind {
            mime: "image/jpeg",
            ext: ".jpg",
            magic: b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00",
            tail: Tail::Opaque,
            foot: b"\xff\xd9",
        },
    ),
    (
        10,
        ContentKind {
            mime: "image/png",
            ext: ".png",
            magic: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
            tail: Tail::Opaque,
            foot: b"\x00\x00\x00\x00IEND\xaeB`\x82",
        },
    ),
    (3, ContentKind { mime: "image/gif", ext: ".gif", magic: b"GIF89a", tail: Tail::Opaque, foot: b"\x3b" }),
    (4, ContentKind { mime: "font/woff2", ext: ".woff2", magic: b"wOF2\x00\x01\x00\x00", tail: Tail::Opaque, foot: b"" }),
    (
        3,
        ContentKind {
            mime: "image/svg+xml",
            ext: ".svg",
            magic: b"<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 24 24\">",
            tail: Tail::Text,
            foot: b"</svg>\n",
        },
    ),
];

const DOWNLOAD_KINDS: &[(u32, ContentKind)] = &[
    (
        40,
        ContentKind {
            mime: "video/mp4",
            ext: ".mp4",
            magic: b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00isomiso2avc1mp41",
            tail: Tail::Opaque,
            foot: b"",
        },
    ),
    (15, ContentKind { mime: "application/zip", ext: ".zip", magic: b"PK\x03\x04\x14\x00\x08\x00\x08\x00", tail: Tail::Opaque, foot: b"" }),
    (15, ContentKind { mime: "application/octet-stream", ext: ".bin", magic: b"\x7fELF\x02\x01\x01\x00", tail: Tail::Opaque, foot: b"" }),
    (
        10,
        ContentKind {
            mime: "application/x-debian-package",
            ext: ".deb",
            magic: b"!<arch>\ndebian-binary   ",
            tail: Tail::Opaque,
            foot: b"",
        },
    ),
    (
        10,
        ContentKind {
            mime: "application/gzip",
            ext: ".tar.gz",
            magic: b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
            tail: Tail::Opaque,
            foot: b"",
        },
    ),
    (
        10,
        ContentKind {
            mime: "application/pdf",
            ext: ".pdf",
            magic: b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n",
            tail: Tail::Opaque,
            foot: b"\n%%EOF\n",
        },
    ),
];

const STATUSES: &[(u32, (u16, &str))] = &[
    (900, (200, "OK")),
    (35, (404, "Not Found")),
    (20, (302, "Found")),
    (12, (301, "Moved Permanently")),
    (10, (206, "Partial Content")),
    (8, (500, "Internal Server Error")),
    (5, (503, "Service Unavailable")),
    (10, (403, "Forbidden")),
];

const LANGUAGES: &[&str] =
    &["en-US,en;q=0.9", "en-GB,en;q=0.8", "de-DE,de;q=0.9,en;q=0.8", "fr-FR,fr;q=0.9", "ja,en-US;q=0.9", "es-ES,es;q=0.9"];

fn txn(ctx: &FlowCtx, txn: u32, download: bool) -> Txn {
    let mut r = ctx.rng(TXN_STREAM + u64::from(txn));
    let kind = if download { weighted(&mut r, DOWNLOAD_KINDS) } else { weighted(&mut r, PAGE_KINDS) };
    let mut path = url_path(&mut r);
    if let Some(q) = path.find(['.', '?']) {
        path.truncate(q);
    }
    if download {
        path =
            format!("/downloads/{}-{}.{}.{}{}", pick(&mut r, WORDS), r.gen_range(1..12), r.gen_range(0..40), r.gen_range(0..9), kind.ext);
    } else {
        path.push_str(kind.ext);
    }
    let status = weighted(&mut r, STATUSES).0;
    let agent = *weighted(&mut vocab_rng(ctx), USER_AGENTS);
    let cookie = r.gen_bool(0.4).then(|| {
        format!(
            "sid={}; _ga=GA1.2.{}.{}",
            vocab::hex_token(&mut r, 16),
            r.gen_range(100_000_000..999_999_999u32),
            r.gen_range(1_600_000_000..1_720_000_000u32)
        )
    });
    let language = pick(&mut vocab_rng(ctx), LANGUAGES);
    Txn { path, kind, status, agent, cookie, language }
}

/// The client's browser does not change within a flow.
fn vocab_rng(ctx: &FlowCtx) -> FlowRng {
    ctx.rng(SESSION_STREAM + 7)
}

fn http_request(ctx: &FlowCtx, n: u32, download: bool, upload: u64, rng: &mut FlowRng) -> Body {
    let t = txn(ctx, n, download);
    let method = if upload > 0 { "POST" } else { "GET" };
    let mut h = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {}\r\nAccept: {}\r\nAccept-Language: {}\r\nAccept-Encoding: gzip, deflate, br\r\n",
        t.path,
        ctx.server_name,
        t.agent,
        if t.kind.mime.starts_with("text/html") { "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8" } else { "*/*" },
        t.language,
    );
    if rng.gen_bool(0.3) {
        h.push_str(&format!("Referer: https://{}/\r\n", ctx.server_name));
    }
    if let Some(c) = &t.cookie {
        h.push_str(&format!("Cookie: {c}\r\n"));
    }
    if upload > 0 {
        h.push_str(&format!("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {upload}\r\n"));
    }
    h.push_str("Connection: keep-alive\r\n\r\n");
    if upload > 0 {
        let form = format!("user={}&q={}&token=", pick(rng, vocab::FIRST_NAMES), pick(rng, WORDS));
        let n = (form.len() as u64).min(upload) as usize;
        h.push_str(&form[..n]);
        return Body::with_tail(h.into_bytes(), Tail::Base64, upload - n as u64, rng);
    }
    Body::bytes(h.into_bytes())
}

fn http_response(ctx: &FlowCtx, n: u32, download: bool, size: u64, rng: &mut FlowRng) -> Body {
    let t = txn(ctx, n, download);
    let reason = STATUSES.iter().find(|(_, (c, _))| *c == t.status).map_or("OK", |(_, (_, r))| r);
    let (mime, magic, tail, foot) = if t.status >= 300 && t.status != 206 {
        ("text/html; charset=utf-8", &b"<html><head><title>"[..], Tail::Text, &b"</title></head></html>\n"[..])
    } else {
        (t.kind.mime, t.kind.magic, t.kind.tail, t.kind.foot)
    };
    let gzip = matches!(tail, Tail::Text) && rng.gen_bool(0.35);
    let body_len = size.max((magic.len() + foot.len()) as u64);
    let mut h = format!(
        "HTTP/1.1 {} {reason}\r\nDate: {}\r\nServer: {}\r\nContent-Type: {mime}\r\nContent-Length: {body_len}\r\n",
        t.status,
        http_date(ctx.start_ns),
        weighted(rng, HTTP_SERVERS),
    );
    if gzip {
        h.push_str("Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n");
    }
    match t.status {
        301 | 302 => h.push_str(&format!("Location: https://{}{}\r\n", ctx.server_name, url_path(rng))),
        200 => h.push_str(&format!(
            "Cache-Control: {}\r\nETag: \"{}\"\r\nLast-Modified: {}\r\n",
            pick(rng, &["max-age=3600", "public, max-age=31536000, immutable", "no-cache", "private, max-age=0"]),
            vocab::hex_token(rng, 8),
            http_date(ctx.start_ns.saturating_sub(rng.gen_range(0..86_400 * 400) * 1_000_000_000)),
        )),
        206 => h.push_str(&format!("Accept-Ranges: bytes\r\nContent-Range: bytes 0-{}/{}\r\n", body_len - 1, body_len * 4)),
        _ => {}
    }
    if rng.gen_bool(0.3) {
        h.push_str(&format!("Set-Cookie: session={}; Path=/; Secure; HttpOnly\r\n", vocab::hex_token(rng, 12)));
    }
    h.push_str("Connection: keep-alive\r\n\r\n");
    let mut head = h.into_bytes();
    let (tail, foot): (Tail, &'static [u8]) = if gzip {
        head.extend_from_slice(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03");
        (Tail::Opaque, b"")
    } else {
        head.extend_from_slice(magic);
        (tail, foot)
    };
    let prefix = if gzip { 10 } else { magic.len() as u64 };
    let tail_len = body_len.saturating_sub(prefix + foot.len() as u64);
    let foot = if prefix + foot.len() as u64 <= body_len { foot } else { b"" };
    let mut body = Body::with_tail(head, tail, tail_len, rng);
    body.foot = foot;
    body
}

/// TLS cipher suites and extension orders of two common client stacks.
const CHROME_SUITES: &[u16] =
    &[0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035];
const FIREFOX_SUITES: &[u16] = &[
    0x1301, 0x1303, 0x1302, 0xc02b, 0xc02f, 0xcca9, 0xcca8, 0xc02c, 0xc030, 0xc00a, 0xc009, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035,
];
const SIG_ALGS: &[u16] = &[0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601];

fn grease(rng: &mut impl Rng) -> u16 {
    let n = rng.gen_range(0..16u16);
    (n << 12) | 0x0a00 | (n << 4) | 0x0a
}

fn ext(v: &mut Vec<u8>, ty: u16, body: &[u8]) {
    put16(v, ty);
    put16(v, body.len() as u16);
    v.extend_from_slice(body);
}

fn alpn_for(port: u16) -> Option<&'static [&'static str]> {
    match port {
        443 | 8443 => Some(&["h2", "http/1.1"]),
        853 => Some(&["dot"]),
        _ => None,
    }
}

fn client_hello(ctx: &FlowCtx, rng: &mut FlowRng) -> Vec<u8> {
    let chrome = vocab_rng(ctx).gen_bool(0.65);
    let mut session = ctx.rng(SESSION_STREAM);
    let mut b = Vec::with_capacity(600);
    b.extend_from_slice(&[0x16, 0x03, 0x01, 0, 0, 0x01, 0, 0, 0]);
    b.extend_from_slice(&[0x03, 0x03]);
    put_random(&mut b, rng, 32);
    b.push(32);
    put_random(&mut b, &mut session, 32);
    let suites = if chrome { CHROME_SUITES } else { FIREFOX_SUITES };
    let g = grease(rng);
    put16(&mut b, (2 * (suites.len() + usize::from(chrome))) as u16);
    if chrome {
        put16(&mut b, g);
    }
    for s in suites {
        put16(&mut b, *s);
    }
    b.extend_from_slice(&[1, 0]);
    let ext_len_at = b.len();
    put16(&mut b, 0);
    let name = ctx.server_name.as_bytes();
    let mut sni = Vec::with_capacity(name.len() + 5);
    put16(&mut sni, (name.len() + 3) as u16);
    sni.push(0);
    put16(&mut sni, name.len() as u16);
    sni.extend_from_slice(name);
    let mut groups = Vec::new();
    let group_list: &[u16] = if chrome { &[g, 0x001d, 0x0017, 0x0018] } else { &[0x001d, 0x0017, 0x0018, 0x0019, 0x0100, 0x0101] };
    put16(&mut groups, (group_list.len() * 2) as u16);
    for x in group_list {
        put16(&mut groups, *x);
    }
    let mut sigs = Vec::new();
    put16(&mut sigs, (SIG_ALGS.len() * 2) as u16);
    for s in SIG_ALGS {
        put16(&mut sigs, *s);
    }
    let mut key_share = Vec::new();
    put16(&mut key_share, if chrome { 36 + 5 } else { 36 });
    if chrome {
        put16(&mut key_share, g);
        key_share.extend_from_slice(&[0, 1, 0]);
    }
    key_share.extend_from_slice(&[0x00, 0x1d, 0x00, 0x20]);
    put_random(&mut key_share, rng, 32);
    let versions: &[u8] = if chrome { &[6, 0x0a, 0x0a, 0x03, 0x04, 0x03, 0x03] } else { &[4, 0x03, 0x04, 0x03, 0x03] };
    let alpn = alpn_for(ctx.server_port).map(|protos| {
        let mut a = vec![0, 0];
        for p in protos {
            a.push(p.len() as u8);
            a.extend_from_slice(p.as_bytes());
        }
        patch_len16(&mut a, 0);
        a
    });
    if chrome {
        ext(&mut b, grease(rng), &[]);
    }
    ext(&mut b, 0x0000, &sni);
    ext(&mut b, 0x0017, &[]);
    ext(&mut b, 0xff01, &[0]);
    ext(&mut b, 0x000a, &groups);
    ext(&mut b, 0x000b, &[1, 0]);
    ext(&mut b, 0x0023, &[]);
    if let Some(a) = &alpn {
        ext(&mut b, 0x0010, a);
    }
    ext(&mut b, 0x0005, &[1, 0, 0, 0, 0]);
    ext(&mut b, 0x000d, &sigs);
    if chrome {
        ext(&mut b, 0x0012, &[]);
    }
    ext(&mut b, 0x0033, &key_share);
    ext(&mut b, 0x002d, &[1, 1]);
    let mut sv = versions.to_vec();
    if chrome {
        let gv = grease(rng).to_be_bytes();
        sv[1] = gv[0];
        sv[2] = gv[1];
    }
    ext(&mut b, 0x002b, &sv);
    if chrome {
        ext(&mut b, 0x001b, &[2, 0, 2]);
        ext(&mut b, grease(rng), &[0]);
        // Chrome pads the ClientHello to 512 bytes (RFC 7685) so it dodges a middlebox bug.
        let pad = 512usize.saturating_sub(b.len() + 4 - 5).max(1);
        ext(&mut b, 0x0015, &vec![0; pad]);
    }
    patch_len16(&mut b, ext_len_at);
    patch_len24(&mut b, 6);
    patch_len16(&mut b, 3);
    b
}

fn server_hello(ctx: &FlowCtx, rng: &mut FlowRng) -> Vec<u8> {
    let mut session = ctx.rng(SESSION_STREAM);
    let mut b = Vec::with_capacity(140);
    b.extend_from_slice(&[0x16, 0x03, 0x03, 0, 0, 0x02, 0, 0, 0, 0x03, 0x03]);
    put_random(&mut b, rng, 32);
    b.push(32);
    put_random(&mut b, &mut session, 32);
    put16(&mut b, pick(rng, &[0x1301u16, 0x1302, 0x1303]));
    b.push(0);
    let ext_at = b.len();
    put16(&mut b, 0);
    ext(&mut b, 0x002b, &[0x03, 0x04]);
    let mut ks = vec![0x00, 0x1d, 0x00, 0x20];
    put_random(&mut ks, rng, 32);
    ext(&mut b, 0x0033, &ks);
    patch_len16(&mut b, ext_at);
    patch_len24(&mut b, 6);
    patch_len16(&mut b, 3);
    b.extend_from_slice(&[0x14, 0x03, 0x03, 0x00, 0x01, 0x01]);
    b
}

/// The 8-byte connection ID `side` chose for itself.
fn quic_cid(ctx: &FlowCtx, side: Side) -> [u8; 8] {
    let mut r = ctx.rng(CID_STREAM + u64::from(side == Side::Server));
    let mut c = [0u8; 8];
    r.fill(&mut c);
    c
}

/// A long-header packet (`first` 0xc0 Initial, 0xe0 Handshake) from `side`, padded to `len` bytes.
fn quic_long(ctx: &FlowCtx, first: u8, side: Side, len: usize, rng: &mut FlowRng) -> Vec<u8> {
    let mut b = Vec::with_capacity(len);
    b.push(first | rng.gen_range(0..4u8));
    b.extend_from_slice(&[0, 0, 0, 1]);
    b.push(8);
    b.extend_from_slice(&quic_cid(ctx, side.other()));
    b.push(8);
    b.extend_from_slice(&quic_cid(ctx, side));
    if first == 0xc0 {
        b.push(0);
    }
    let remaining = len.saturating_sub(b.len() + 2).max(20);
    put16(&mut b, 0x4000 | remaining as u16);
    put_random(&mut b, rng, remaining);
    b
}

/// The text pool: HTML, script, style and JSON fragments of invented words.
pub fn text_pool(rng: &mut FlowRng, len: usize) -> Vec<u8> {
    let mut s = String::with_capacity(len + 512);
    while s.len() < len {
        let w1 = pick(rng, WORDS);
        let w2 = pick(rng, WORDS);
        match rng.gen_range(0..10) {
            0..=3 => s.push_str(&format!(
                "<div class=\"{w1}-{w2}\"><a href=\"/{w1}/{w2}-{}\" title=\"{w2}\">{}</a><p>{}.</p></div>\n",
                rng.gen_range(1..9999),
                vocab::sentence(rng, 3..4),
                vocab::sentence(rng, 8..30),
            )),
            4 => s.push_str(&format!(
                "<script src=\"https://{}/static/js/{w1}.{}.js\" async></script>\n",
                {
                    let site = rng.gen_range(0..500);
                    host(rng, site, vocab::WEB_SUBDOMAINS)
                },
                vocab::hex_token(rng, 4)
            )),
            5 | 6 => s.push_str(&format!(
                "function {w1}{}(e,t){{var n=document.querySelector(\".{w2}\");if(!n)return;n.addEventListener(\"click\",function(){{t.{w1}=e.{w2}||{}}});}}\n",
                w2.to_uppercase(),
                rng.gen_range(0..1000)
            )),
            7 => s.push_str(&format!(
                ".{w1}-{w2}{{margin:{}px;padding:0 {}px;color:#{};font-family:\"Helvetica Neue\",Arial,sans-serif}}\n",
                rng.gen_range(0..32),
                rng.gen_range(0..32),
                vocab::hex_token(rng, 3)
            )),
            _ => s.push_str(&format!(
                "{{\"id\":{},\"name\":\"{w1} {w2}\",\"tags\":[\"{}\",\"{}\"],\"price\":{}.{:02},\"active\":{}}},",
                rng.gen_range(1..1_000_000),
                pick(rng, WORDS),
                pick(rng, WORDS),
                rng.gen_range(1..500),
                rng.gen_range(0..100),
                rng.gen_bool(0.8)
            )),
        }
    }
    let mut v = s.into_bytes();
    v.truncate(len);
    v
}
