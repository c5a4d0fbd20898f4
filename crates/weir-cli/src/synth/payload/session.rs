//! Session protocols over TCP: mail, file transfer, chat, remote access and databases.
//!
//! Text protocols (SMTP, FTP, POP3, IMAP, IRC, Redis, memcached) are written as
//! scripts of lines with placeholders, in one table each, so what a server says is
//! readable here exactly as it appears in the trace. Binary protocols (SSH, SMB2,
//! RDP, MySQL, PostgreSQL) build their real framing and the fields signature
//! matchers key on (banners, algorithm lists, dialects, share paths, cookies,
//! queries); what the real protocol encrypts stays opaque. Values a conversation
//! repeats (user, mailboxes, queue IDs) come from flow-wide streams so they agree.

use super::vocab::{self, mailbox, site, FIRST_NAMES, WORDS};
use super::{put16, put32, put_random, Body, FlowCtx, Side, Tail};
use crate::synth::rng::{pick, FlowRng};
use rand::Rng;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SessionMsg {
    /// Step `step` of part `part` (0 prologue, 1 repeated transaction, 2 epilogue) of a line script.
    Line {
        proto: LineProto,
        part: u8,
        step: u8,
    },
    SshBanner,
    SshKexInit,
    SshEcdhInit,
    SshEcdhReply,
    SmbNegotiate,
    SmbSessionSetup,
    SmbTreeConnect,
    /// An SMB2 READ or WRITE carrying `size` bytes of file data.
    SmbIo,
    RdpConnect,
    MysqlGreeting,
    MysqlLogin,
    MysqlOk,
    MysqlQuery,
    MysqlResult,
    PgStartup,
    PgReady,
    PgQuery,
    PgResult,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LineProto {
    Smtp,
    /// SMTP up to STARTTLS; TLS follows.
    SmtpStartTls,
    Ftp,
    Pop3,
    Imap,
    Irc,
    Redis,
    Memcached,
}

/// A line script: who says what, with `{placeholders}` filled per flow.
pub struct Script {
    pub prologue: &'static [(Side, &'static str)],
    pub txn: &'static [(Side, &'static str)],
    pub epilogue: &'static [(Side, &'static str)],
}

use Side::{Client as C, Server as S};

const SMTP_EHLO: &[(Side, &str)] = &[
    (S, "220 {host} ESMTP Postfix (Debian/GNU)\r\n"),
    (C, "EHLO {client}\r\n"),
    (S, "250-{host}\r\n250-PIPELINING\r\n250-SIZE 52428800\r\n250-VRFY\r\n250-ETRN\r\n250-STARTTLS\r\n250-ENHANCEDSTATUSCODES\r\n250-8BITMIME\r\n250-DSN\r\n250-SMTPUTF8\r\n250 CHUNKING\r\n"),
];

const SMTP_STARTTLS: &[(Side, &str)] =
    &[SMTP_EHLO[0], SMTP_EHLO[1], SMTP_EHLO[2], (C, "STARTTLS\r\n"), (S, "220 2.0.0 Ready to start TLS\r\n")];

pub fn script(p: LineProto) -> Script {
    match p {
        LineProto::Smtp => Script {
            prologue: SMTP_EHLO,
            txn: &[
                (C, "MAIL FROM:<{from}> SIZE={size}\r\n"),
                (S, "250 2.1.0 Ok\r\n"),
                (C, "RCPT TO:<{to}>\r\n"),
                (S, "250 2.1.5 Ok\r\n"),
                (C, "DATA\r\n"),
                (S, "354 End data with <CR><LF>.<CR><LF>\r\n"),
                (C, "{mail}"),
                (S, "250 2.0.0 Ok: queued as {qid}\r\n"),
            ],
            epilogue: &[(C, "QUIT\r\n"), (S, "221 2.0.0 Bye\r\n")],
        },
        LineProto::SmtpStartTls => Script { prologue: SMTP_STARTTLS, txn: &[], epilogue: &[] },
        LineProto::Ftp => Script {
            prologue: &[
                (S, "220 ProFTPD Server ({site}) [{server_ip}]\r\n"),
                (C, "USER {user}\r\n"),
                (S, "331 Password required for {user}\r\n"),
                (C, "PASS {password}\r\n"),
                (S, "230 User {user} logged in\r\n"),
                (C, "SYST\r\n"),
                (S, "215 UNIX Type: L8\r\n"),
                (C, "PWD\r\n"),
                (S, "257 \"/home/{user}\" is the current directory\r\n"),
                (C, "TYPE I\r\n"),
                (S, "200 Type set to I\r\n"),
            ],
            txn: &[
                (C, "PASV\r\n"),
                (S, "227 Entering Passive Mode ({server_ip_commas},{pasv_port}).\r\n"),
                (C, "RETR {word}-{n}.tar.gz\r\n"),
                (S, "150 Opening BINARY mode data connection for {word}-{n}.tar.gz ({size} bytes)\r\n"),
                (S, "226 Transfer complete\r\n"),
            ],
            epilogue: &[(C, "QUIT\r\n"), (S, "221 Goodbye.\r\n")],
        },
        LineProto::Pop3 => Script {
            prologue: &[
                (S, "+OK Dovecot (Debian) ready.\r\n"),
                (C, "USER {user}\r\n"),
                (S, "+OK\r\n"),
                (C, "PASS {password}\r\n"),
                (S, "+OK Logged in.\r\n"),
                (C, "STAT\r\n"),
                (S, "+OK {n} {size}\r\n"),
            ],
            txn: &[(C, "RETR {n}\r\n"), (S, "+OK {size} octets\r\n{mail}"), (C, "DELE {n}\r\n"), (S, "+OK Marked to be deleted.\r\n")],
            epilogue: &[(C, "QUIT\r\n"), (S, "+OK Logging out, messages deleted.\r\n")],
        },
        LineProto::Imap => Script {
            prologue: &[
                (S, "* OK [CAPABILITY IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE LITERAL+ STARTTLS AUTH=PLAIN] Dovecot (Debian) ready.\r\n"),
                (C, "a001 LOGIN {user} {password}\r\n"),
                (S, "a001 OK [CAPABILITY IMAP4rev1 SASL-IR ID ENABLE IDLE SORT THREAD=REFERENCES MULTIAPPEND UIDPLUS CONDSTORE QRESYNC MOVE] Logged in\r\n"),
                (C, "a002 SELECT INBOX\r\n"),
                (S, "* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)\r\n* {n} EXISTS\r\n* 0 RECENT\r\n* OK [UIDVALIDITY 1700000000] UIDs valid\r\na002 OK [READ-WRITE] Select completed.\r\n"),
            ],
            txn: &[
                (C, "a{n} UID FETCH {n} (BODY.PEEK[])\r\n"),
                (S, "* {n} FETCH (UID {n} BODY[] {{size}}\r\n{mail})\r\n"),
                (S, "a{n} OK Fetch completed.\r\n"),
            ],
            epilogue: &[(C, "a999 LOGOUT\r\n"), (S, "* BYE Logging out\r\na999 OK Logout completed.\r\n")],
        },
        LineProto::Irc => Script {
            prologue: &[
                (C, "CAP LS 302\r\nNICK {user}{n}\r\nUSER {user} 0 * :{user}\r\n"),
                (S, ":irc.{site} 001 {user}{n} :Welcome to the {site} Internet Relay Chat Network {user}{n}\r\n:irc.{site} 002 {user}{n} :Your host is irc.{site}, running version InspIRCd-3\r\n"),
                (C, "JOIN #{word}\r\n"),
                (S, ":{user}{n}!~{user}@{client_ip} JOIN :#{word}\r\n:irc.{site} 353 {user}{n} = #{word} :@{word}bot {user}{n}\r\n"),
            ],
            txn: &[(C, "PRIVMSG #{word} :{sentence}\r\n"), (S, "PING :irc.{site}\r\n"), (C, "PONG :irc.{site}\r\n")],
            epilogue: &[(C, "QUIT :Leaving\r\n"), (S, "ERROR :Closing link: ({user}@{client_ip}) [Quit: Leaving]\r\n")],
        },
        LineProto::Redis => Script {
            prologue: &[(C, "*2\r\n$4\r\nAUTH\r\n$16\r\n{hex8}\r\n"), (S, "+OK\r\n")],
            txn: &[(C, "{resp_command}"), (S, "{resp_reply}")],
            epilogue: &[(C, "*1\r\n$4\r\nQUIT\r\n"), (S, "+OK\r\n")],
        },
        LineProto::Memcached => Script {
            prologue: &[],
            txn: &[(C, "get {word}:{n}\r\n"), (S, "VALUE {word}:{n} 0 {size}\r\n{value}\r\nEND\r\n")],
            epilogue: &[],
        },
    }
}

/// Streams of values a flow repeats.
const FLOW_STREAM: u64 = 5 << 40;
const TXN_STREAM: u64 = 6 << 40;

pub fn build(m: SessionMsg, ctx: &FlowCtx, txn: u32, size: u32, side: Side, rng: &mut FlowRng) -> Body {
    let size = u64::from(size);
    match m {
        SessionMsg::Line { proto, part, step } => {
            let s = script(proto);
            let steps = match part {
                0 => s.prologue,
                1 => s.txn,
                _ => s.epilogue,
            };
            render(steps[usize::from(step)].1, ctx, txn, size, rng)
        }
        SessionMsg::SshBanner => Body::bytes(ssh_banner(ctx, side)),
        SessionMsg::SshKexInit => Body::bytes(ssh_kexinit(side, rng)),
        SessionMsg::SshEcdhInit => {
            let mut p = vec![30, 0, 0, 0, 32];
            put_random(&mut p, rng, 32);
            Body::bytes(ssh_packet(&p, rng))
        }
        SessionMsg::SshEcdhReply => {
            let mut p = vec![31];
            let mut key = Vec::new();
            ssh_string(&mut key, b"ssh-ed25519");
            let mut k = vec![0; 32];
            rng.fill(&mut k[..]);
            ssh_string(&mut key, &k);
            ssh_string(&mut p, &key);
            let mut f = vec![0; 32];
            rng.fill(&mut f[..]);
            ssh_string(&mut p, &f);
            let mut sig = Vec::new();
            ssh_string(&mut sig, b"ssh-ed25519");
            let mut s = vec![0; 64];
            rng.fill(&mut s[..]);
            ssh_string(&mut sig, &s);
            ssh_string(&mut p, &sig);
            let mut v = ssh_packet(&p, rng);
            v.extend_from_slice(&ssh_packet(&[21], rng));
            Body::bytes(v)
        }
        SessionMsg::SmbNegotiate => Body::bytes(smb_negotiate(ctx, side, rng)),
        SessionMsg::SmbSessionSetup => Body::bytes(smb_session_setup(ctx, side, rng)),
        SessionMsg::SmbTreeConnect => Body::bytes(smb_tree_connect(ctx, txn, side)),
        SessionMsg::SmbIo => smb_io(txn, side, size, rng),
        SessionMsg::RdpConnect => Body::bytes(rdp_connect(ctx, side)),
        SessionMsg::MysqlGreeting => Body::bytes(mysql_greeting(rng)),
        SessionMsg::MysqlLogin => Body::bytes(mysql_login(ctx, rng)),
        SessionMsg::MysqlOk => Body::bytes(vec![7, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0]),
        SessionMsg::MysqlQuery => Body::bytes(mysql_query(ctx, txn)),
        SessionMsg::MysqlResult => mysql_result(size, rng),
        SessionMsg::PgStartup => Body::bytes(pg_startup(ctx)),
        SessionMsg::PgReady => Body::bytes(pg_ready(rng)),
        SessionMsg::PgQuery => {
            let q = sql(ctx, txn);
            let mut v = vec![b'Q'];
            put32(&mut v, (q.len() + 5) as u32);
            v.extend_from_slice(q.as_bytes());
            v.push(0);
            Body::bytes(v)
        }
        SessionMsg::PgResult => pg_result(size, rng),
    }
}

/// Fill a script line's placeholders. `{mail}` and `{value}` end the head and start a body of `size` bytes.
fn render(line: &str, ctx: &FlowCtx, txn: u32, size: u64, rng: &mut FlowRng) -> Body {
    let mut flow = ctx.rng(FLOW_STREAM);
    let user = pick(&mut flow, FIRST_NAMES);
    let word = pick(&mut flow, WORDS);
    let password = vocab::hex_token(&mut flow, 6);
    let mut t = ctx.rng(TXN_STREAM + u64::from(txn));
    let n = t.gen_range(1..3000u32);
    let mut out = String::with_capacity(line.len() + 64);
    let mut rest = line;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}').map(|c| open + c) else { break };
        // `{{size}}` is a literal brace around a placeholder (IMAP literals).
        if rest[open + 1..].starts_with('{') {
            out.push_str(&rest[..open + 1]);
            rest = &rest[open + 1..];
            continue;
        }
        out.push_str(&rest[..open]);
        let key = &rest[open + 1..close];
        rest = &rest[close + 1..];
        let s = ctx.server_ip;
        let c = ctx.client_ip;
        match key {
            "host" => out.push_str(&ctx.server_name),
            "site" => out.push_str(&site(ctx.site)),
            "client" => out.push_str(&format!("{word}-{}.{}", pick(&mut flow, &["pc", "laptop", "srv", "gw"]), site(ctx.site + 7))),
            "client_ip" => out.push_str(&format!("{}.{}.{}.{}", c[0], c[1], c[2], c[3])),
            "server_ip" => out.push_str(&format!("{}.{}.{}.{}", s[0], s[1], s[2], s[3])),
            "server_ip_commas" => out.push_str(&format!("{},{},{},{}", s[0], s[1], s[2], s[3])),
            "pasv_port" => {
                let p = t.gen_range(40_000..50_000u16);
                out.push_str(&format!("{},{}", p >> 8, p & 0xff));
            }
            "user" => out.push_str(user),
            "password" => out.push_str(&password),
            "word" => out.push_str(word),
            "n" => out.push_str(&n.to_string()),
            "size" => out.push_str(&size.to_string()),
            "hex8" => out.push_str(&vocab::hex_token(&mut flow, 8)),
            "from" => out.push_str(&mailbox(&mut t, ctx.site + 11)),
            "to" => {
                mailbox(&mut t, ctx.site + 11);
                out.push_str(&mailbox(&mut t, ctx.site));
            }
            "qid" => out.push_str(&vocab::hex_token(rng, 5).to_uppercase()),
            "sentence" => out.push_str(&vocab::sentence(rng, 3..14)),
            "resp_command" => out.push_str(&resp_command(word, n, &mut t)),
            "resp_reply" => return resp_reply(out, &mut t, size, rng),
            "mail" => return mail(out, ctx, txn, size, rest, rng),
            "value" => {
                let mut b = Body::with_tail(out.into_bytes(), Tail::Text, size, rng);
                b.foot = b"\r\nEND\r\n";
                return b;
            }
            other => out.push_str(other),
        }
    }
    out.push_str(rest);
    Body::bytes(out.into_bytes())
}

/// An RFC 5322 message with a text part and a base64 attachment, `size` bytes in all,
/// followed by what the protocol puts after it (`after`: the rest of the script line).
fn mail(mut head: String, ctx: &FlowCtx, txn: u32, size: u64, after: &str, rng: &mut FlowRng) -> Body {
    let mut t = ctx.rng(TXN_STREAM + u64::from(txn));
    t.gen_range(1..3000u32);
    let from = mailbox(&mut t, ctx.site + 11);
    let to = mailbox(&mut t, ctx.site);
    let start = head.len();
    head.push_str(&format!(
        "Received: from {} ([{}.{}.{}.{}])\r\n\tby {} (Postfix) with ESMTPS id {}\r\n\tfor <{to}>; {}\r\n",
        site(ctx.site + 7),
        ctx.client_ip[0],
        ctx.client_ip[1],
        ctx.client_ip[2],
        ctx.client_ip[3],
        ctx.server_name,
        vocab::hex_token(rng, 5).to_uppercase(),
        vocab::http_date(ctx.start_ns),
    ));
    head.push_str(&format!(
        "From: {} <{from}>\r\nTo: <{to}>\r\nSubject: {}\r\nDate: {}\r\nMessage-ID: <{}@{}>\r\nMIME-Version: 1.0\r\n",
        from.split('.').next().unwrap_or("someone"),
        vocab::sentence(rng, 2..7),
        vocab::http_date(ctx.start_ns),
        vocab::hex_token(rng, 12),
        site(ctx.site + 11),
    ));
    head.push_str("Content-Type: multipart/mixed; boundary=\"----=_Part_7319_1523948731.1700000000000\"\r\n\r\n");
    head.push_str("------=_Part_7319_1523948731.1700000000000\r\nContent-Type: text/plain; charset=UTF-8\r\n\r\n");
    head.push_str(&vocab::sentence(rng, 20..120));
    head.push_str(&format!(
        ".\r\n\r\n------=_Part_7319_1523948731.1700000000000\r\nContent-Type: application/pdf; name=\"{}.pdf\"\r\nContent-Transfer-Encoding: base64\r\nContent-Disposition: attachment; filename=\"{}.pdf\"\r\n\r\n",
        pick(rng, WORDS),
        pick(rng, WORDS),
    ));
    // What follows the message on the wire: SMTP and POP3 end it with a dot line, an
    // IMAP literal with the closing parenthesis. Neither counts in the message's size.
    let foot: &'static [u8] = if after.starts_with(')') {
        b"\r\n------=_Part_7319_1523948731.1700000000000--\r\n)\r\n"
    } else {
        b"\r\n------=_Part_7319_1523948731.1700000000000--\r\n.\r\n"
    };
    const SUFFIX_LEN: usize = 3;
    let written = (head.len() - start + foot.len() - SUFFIX_LEN) as u64;
    let mut b = Body::with_tail(head.into_bytes(), Tail::Base64, size.saturating_sub(written), rng);
    b.foot = foot;
    b
}

fn resp_bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

fn resp_command(word: &str, n: u32, t: &mut FlowRng) -> String {
    let key = format!("{word}:{n}");
    match t.gen_range(0..4) {
        0 => format!("*3\r\n$3\r\nSET\r\n{}{}", resp_bulk(&key), resp_bulk(&vocab::hex_token(t, 12))),
        1 => format!("*2\r\n$4\r\nINCR\r\n{}", resp_bulk(&format!("counter:{word}"))),
        _ => format!("*2\r\n$3\r\nGET\r\n{}", resp_bulk(&key)),
    }
}

fn resp_reply(head: String, t: &mut FlowRng, size: u64, rng: &mut FlowRng) -> Body {
    match t.gen_range(0..4) {
        0 => Body::bytes(format!("{head}+OK\r\n").into_bytes()),
        1 => Body::bytes(format!("{head}:{}\r\n", rng.gen_range(1..1_000_000)).into_bytes()),
        _ => {
            let mut b = Body::with_tail(format!("{head}${size}\r\n").into_bytes(), Tail::Text, size, rng);
            b.foot = b"\r\n";
            b
        }
    }
}

fn ssh_banner(ctx: &FlowCtx, side: Side) -> Vec<u8> {
    let mut r = ctx.rng(FLOW_STREAM + 3);
    let s: &str = match side {
        Side::Server => pick(
            &mut r,
            &[
                "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3",
                "SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.6",
                "SSH-2.0-OpenSSH_9.6",
                "SSH-2.0-dropbear_2022.83",
            ],
        ),
        Side::Client => pick(
            &mut r,
            &[
                "SSH-2.0-OpenSSH_9.6",
                "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3",
                "SSH-2.0-PuTTY_Release_0.80",
                "SSH-2.0-paramiko_3.4.0",
                "SSH-2.0-Go",
            ],
        ),
    };
    format!("{s}\r\n").into_bytes()
}

fn ssh_string(v: &mut Vec<u8>, s: &[u8]) {
    put32(v, s.len() as u32);
    v.extend_from_slice(s);
}

/// An unencrypted SSH binary packet: length, padding length, payload, 4 to 8+ bytes of padding to a multiple of 8.
fn ssh_packet(payload: &[u8], rng: &mut FlowRng) -> Vec<u8> {
    let mut pad = 8 - (payload.len() + 5) % 8;
    if pad < 4 {
        pad += 8;
    }
    let mut v = Vec::with_capacity(payload.len() + pad + 5);
    put32(&mut v, (payload.len() + pad + 1) as u32);
    v.push(pad as u8);
    v.extend_from_slice(payload);
    put_random(&mut v, rng, pad);
    v
}

fn ssh_kexinit(side: Side, rng: &mut FlowRng) -> Vec<u8> {
    let kex = match side {
        Side::Client => "sntrup761x25519-sha512@openssh.com,curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,ecdh-sha2-nistp384,ecdh-sha2-nistp521,diffie-hellman-group-exchange-sha256,diffie-hellman-group16-sha512,diffie-hellman-group18-sha512,diffie-hellman-group14-sha256,ext-info-c,kex-strict-c-v00@openssh.com",
        Side::Server => "sntrup761x25519-sha512@openssh.com,curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,ecdh-sha2-nistp384,ecdh-sha2-nistp521,diffie-hellman-group-exchange-sha256,diffie-hellman-group16-sha512,diffie-hellman-group18-sha512,diffie-hellman-group14-sha256,kex-strict-s-v00@openssh.com",
    };
    let hostkeys = "ssh-ed25519,ecdsa-sha2-nistp256,rsa-sha2-512,rsa-sha2-256";
    let ciphers = "chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr,aes128-gcm@openssh.com,aes256-gcm@openssh.com";
    let macs = "umac-64-etm@openssh.com,umac-128-etm@openssh.com,hmac-sha2-256-etm@openssh.com,hmac-sha2-512-etm@openssh.com,hmac-sha1-etm@openssh.com,umac-64@openssh.com,umac-128@openssh.com,hmac-sha2-256,hmac-sha2-512,hmac-sha1";
    let mut p = vec![20];
    put_random(&mut p, rng, 16);
    for list in [kex, hostkeys, ciphers, ciphers, macs, macs, "none,zlib@openssh.com", "none,zlib@openssh.com", "", ""] {
        ssh_string(&mut p, list.as_bytes());
    }
    p.extend_from_slice(&[0, 0, 0, 0, 0]);
    ssh_packet(&p, rng)
}

/// SPNEGO negTokenInit offering NTLMSSP only: what a standalone Samba or Windows server advertises.
const SPNEGO_INIT: &[u8] =
    b"\x60\x1c\x06\x06\x2b\x06\x01\x05\x05\x02\xa0\x12\x30\x10\xa0\x0e\x30\x0c\x06\x0a\x2b\x06\x01\x04\x01\x82\x37\x02\x02\x0a";

/// Windows FILETIME: 100 ns ticks since 1601.
fn filetime(unix_ns: u64) -> u64 {
    unix_ns / 100 + 116_444_736_000_000_000
}

/// NetBIOS session header plus a 64-byte SMB2 header for `command`.
fn smb2(command: u16, side: Side, message_id: u64, tree: u32, session: u64) -> Vec<u8> {
    let mut v = vec![0, 0, 0, 0, 0xfe, b'S', b'M', b'B', 64, 0, 1, 0];
    put32(&mut v, 0);
    v.extend_from_slice(&command.to_le_bytes());
    v.extend_from_slice(&(if side == Side::Server { 1u16 } else { 31 }).to_le_bytes());
    v.extend_from_slice(&(if side == Side::Server { 1u32 } else { 0 }).to_le_bytes());
    put32(&mut v, 0);
    v.extend_from_slice(&message_id.to_le_bytes());
    v.extend_from_slice(&0xfeffu32.to_le_bytes());
    v.extend_from_slice(&tree.to_le_bytes());
    v.extend_from_slice(&session.to_le_bytes());
    v.extend_from_slice(&[0; 16]);
    v
}

/// Set the NetBIOS length to the bytes after the 4-byte header, plus `more` not yet written.
fn netbios_len(v: &mut [u8], more: u64) {
    let n = (v.len() as u64 - 4 + more) as u32;
    v[1..4].copy_from_slice(&n.to_be_bytes()[1..]);
}

fn smb_negotiate(ctx: &FlowCtx, side: Side, rng: &mut FlowRng) -> Vec<u8> {
    let mut v = smb2(0, side, 0, 0, 0);
    match side {
        Side::Client => {
            const DIALECTS: [u16; 5] = [0x0202, 0x0210, 0x0300, 0x0302, 0x0311];
            v.extend_from_slice(&36u16.to_le_bytes());
            v.extend_from_slice(&(DIALECTS.len() as u16).to_le_bytes());
            v.extend_from_slice(&[1, 0, 0, 0, 0x7f, 0, 0, 0]);
            put_random(&mut v, rng, 16);
            v.extend_from_slice(&[0; 8]);
            for d in DIALECTS {
                v.extend_from_slice(&d.to_le_bytes());
            }
        }
        Side::Server => {
            v.extend_from_slice(&65u16.to_le_bytes());
            v.extend_from_slice(&[1, 0]);
            v.extend_from_slice(&0x0311u16.to_le_bytes());
            v.extend_from_slice(&[0, 0]);
            put_random(&mut v, rng, 16);
            v.extend_from_slice(&[0x2f, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0x80, 0, 0, 0, 0x80, 0]);
            let now = filetime(ctx.start_ns);
            v.extend_from_slice(&now.to_le_bytes());
            v.extend_from_slice(&(now - rng.gen_range(36_000_000_000..100 * 864_000_000_000u64)).to_le_bytes());
            v.extend_from_slice(&[0x80, 0, SPNEGO_INIT.len() as u8, 0, 0, 0, 0, 0]);
            v.extend_from_slice(SPNEGO_INIT);
        }
    }
    netbios_len(&mut v, 0);
    v
}

fn smb_session_setup(ctx: &FlowCtx, side: Side, rng: &mut FlowRng) -> Vec<u8> {
    let mut v = smb2(1, side, 1, 0, if side == Side::Server { 0x0000_4000_0000_0029 } else { 0 });
    let mut ntlm = b"NTLMSSP\0".to_vec();
    match side {
        Side::Client => {
            ntlm.extend_from_slice(&[1, 0, 0, 0, 0x97, 0x82, 0x08, 0xe2]);
            ntlm.extend_from_slice(&[0; 16]);
            ntlm.extend_from_slice(&[10, 0, 0x63, 0x45, 0, 0, 0, 0x0f]);
        }
        Side::Server => {
            let domain: Vec<u8> =
                ctx.server_name.split('.').nth(1).unwrap_or("WORKGROUP").to_uppercase().encode_utf16().flat_map(u16::to_le_bytes).collect();
            ntlm.extend_from_slice(&[2, 0, 0, 0]);
            ntlm.extend_from_slice(&(domain.len() as u16).to_le_bytes());
            ntlm.extend_from_slice(&(domain.len() as u16).to_le_bytes());
            ntlm.extend_from_slice(&56u32.to_le_bytes());
            ntlm.extend_from_slice(&[0x15, 0x82, 0x8a, 0xe2]);
            put_random(&mut ntlm, rng, 8);
            ntlm.extend_from_slice(&[0; 8]);
            ntlm.extend_from_slice(&[0; 8]);
            ntlm.extend_from_slice(&[10, 0, 0x63, 0x45, 0, 0, 0, 0x0f]);
            ntlm.extend_from_slice(&domain);
        }
    }
    v.extend_from_slice(&(if side == Side::Server { 9u16 } else { 25 }).to_le_bytes());
    v.extend_from_slice(&[0, 1]);
    if side == Side::Client {
        v.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    }
    v.extend_from_slice(&(if side == Side::Server { 72u16 } else { 88 }).to_le_bytes());
    v.extend_from_slice(&(ntlm.len() as u16).to_le_bytes());
    if side == Side::Client {
        v.extend_from_slice(&[0; 8]);
    }
    v.extend_from_slice(&ntlm);
    netbios_len(&mut v, 0);
    v
}

fn smb_tree_connect(ctx: &FlowCtx, txn: u32, side: Side) -> Vec<u8> {
    let mut v = smb2(3, side, 2 + u64::from(txn), 0, 0x0000_4000_0000_0029);
    match side {
        Side::Client => {
            let share = pick(&mut ctx.rng(FLOW_STREAM + 5), &["IPC$", "share", "users", "data", "Public", "backup", "SYSVOL"]);
            let host = ctx.server_name.split('.').next().unwrap_or("FILESRV").to_uppercase();
            let path: Vec<u8> = format!("\\\\{host}\\{share}").encode_utf16().flat_map(u16::to_le_bytes).collect();
            v.extend_from_slice(&[9, 0, 0, 0, 72, 0]);
            v.extend_from_slice(&(path.len() as u16).to_le_bytes());
            v.extend_from_slice(&path);
        }
        Side::Server => v.extend_from_slice(&[16, 0, 1, 0, 0x30, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x01, 0x1f, 0]),
    }
    netbios_len(&mut v, 0);
    v
}

/// File I/O: with data, a WRITE request (client) or READ response (server) carrying
/// `size` bytes; without, a READ request (client) or WRITE response (server).
fn smb_io(txn: u32, side: Side, size: u64, rng: &mut FlowRng) -> Body {
    const READ: u16 = 8;
    const WRITE: u16 = 9;
    let size = size.min(8 << 20);
    let message_id = 3 + u64::from(txn);
    let session = 0x0000_4000_0000_0029;
    let offset = u64::from(txn) * 65_536;
    let mut v;
    match (side, size > 0) {
        (Side::Client, true) => {
            v = smb2(WRITE, side, message_id, 1, session);
            v.extend_from_slice(&[49, 0, 64 + 48, 0]);
            v.extend_from_slice(&(size as u32).to_le_bytes());
            v.extend_from_slice(&offset.to_le_bytes());
            put_random(&mut v, rng, 16);
            v.extend_from_slice(&[0; 16]);
        }
        (Side::Client, false) => {
            v = smb2(READ, side, message_id, 1, session);
            v.extend_from_slice(&[49, 0, 0x50, 0]);
            v.extend_from_slice(&65_536u32.to_le_bytes());
            v.extend_from_slice(&offset.to_le_bytes());
            put_random(&mut v, rng, 16);
            v.extend_from_slice(&[0; 17]);
        }
        (Side::Server, true) => {
            v = smb2(READ, side, message_id, 1, session);
            v.extend_from_slice(&[17, 0, 64 + 16, 0]);
            v.extend_from_slice(&(size as u32).to_le_bytes());
            v.extend_from_slice(&[0; 8]);
        }
        (Side::Server, false) => {
            v = smb2(WRITE, side, message_id, 1, session);
            v.extend_from_slice(&[17, 0, 0, 0]);
            v.extend_from_slice(&65_536u32.to_le_bytes());
            v.extend_from_slice(&[0; 8]);
        }
    }
    netbios_len(&mut v, size);
    Body::with_tail(v, Tail::Opaque, size, rng)
}

fn rdp_connect(ctx: &FlowCtx, side: Side) -> Vec<u8> {
    match side {
        Side::Client => {
            let user = pick(&mut ctx.rng(FLOW_STREAM), FIRST_NAMES);
            let cookie = format!("Cookie: mstshash={user}\r\n");
            let mut v = vec![3, 0, 0, 0, 0, 0xe0, 0, 0, 0, 0, 0];
            v.extend_from_slice(cookie.as_bytes());
            v.extend_from_slice(&[1, 0, 8, 0, 0x0b, 0, 0, 0]);
            v[4] = (v.len() - 5) as u8;
            let total = v.len() as u16;
            v[2..4].copy_from_slice(&total.to_be_bytes());
            v
        }
        Side::Server => vec![3, 0, 0, 19, 14, 0xd0, 0, 0, 0x12, 0x34, 0, 2, 0x1f, 8, 0, 2, 0, 0, 0],
    }
}

fn mysql_packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    v.push(seq);
    v.extend_from_slice(payload);
    v
}

fn mysql_greeting(rng: &mut FlowRng) -> Vec<u8> {
    let mut p = vec![10];
    p.extend_from_slice(pick(rng, &[&b"8.0.36-0ubuntu0.22.04.1"[..], b"8.0.35", b"5.7.44-log", b"10.11.6-MariaDB-0+deb12u1"]));
    p.push(0);
    p.extend_from_slice(&rng.gen_range(10u32..500_000).to_le_bytes());
    for _ in 0..8 {
        p.push(rng.gen_range(0x21..0x7f));
    }
    p.extend_from_slice(&[0, 0xff, 0xff, 0xff, 0x02, 0, 0xff, 0xdf, 21]);
    p.extend_from_slice(&[0; 10]);
    for _ in 0..12 {
        p.push(rng.gen_range(0x21..0x7f));
    }
    p.push(0);
    p.extend_from_slice(b"caching_sha2_password\0");
    mysql_packet(0, &p)
}

fn mysql_login(ctx: &FlowCtx, rng: &mut FlowRng) -> Vec<u8> {
    let mut p = vec![0x8d, 0xa6, 0x0f, 0x20, 0, 0, 0, 0x01, 0xff];
    p.extend_from_slice(&[0; 23]);
    p.extend_from_slice(pick(&mut ctx.rng(FLOW_STREAM), &[&b"app"[..], b"web", b"reporting", b"wordpress"]));
    p.push(0);
    p.push(32);
    put_random(&mut p, rng, 32);
    p.extend_from_slice(pick(&mut ctx.rng(FLOW_STREAM + 1), &[&b"shop"[..], b"analytics", b"wp", b"crm"]));
    p.push(0);
    p.extend_from_slice(b"caching_sha2_password\0");
    mysql_packet(1, &p)
}

fn sql(ctx: &FlowCtx, txn: u32) -> String {
    let mut t = ctx.rng(TXN_STREAM + u64::from(txn));
    let table = pick(&mut t, &["users", "orders", "products", "sessions", "events", "wp_posts", "invoices"]);
    match t.gen_range(0..6) {
        0 => format!("SELECT id, name, email, created_at FROM {table} WHERE id = {}", t.gen_range(1..10_000_000)),
        1 => format!(
            "SELECT * FROM {table} WHERE status = '{}' ORDER BY created_at DESC LIMIT {}",
            pick(&mut t, &["active", "pending", "shipped"]),
            t.gen_range(10..500)
        ),
        2 => format!("UPDATE {table} SET updated_at = NOW(), hits = hits + 1 WHERE id = {}", t.gen_range(1..10_000_000)),
        3 => format!(
            "INSERT INTO {table} (user_id, kind, payload) VALUES ({}, '{}', '{{\"v\":{}}}')",
            t.gen_range(1..100_000),
            pick(&mut t, WORDS),
            t.gen_range(0..1000)
        ),
        4 => format!("SELECT COUNT(*) FROM {table} WHERE created_at > '2024-0{}-01'", t.gen_range(1..10)),
        _ => format!(
            "SELECT o.id, o.total, u.email FROM orders o JOIN users u ON u.id = o.user_id WHERE o.id IN ({}, {}, {})",
            t.gen_range(1..999_999),
            t.gen_range(1..999_999),
            t.gen_range(1..999_999)
        ),
    }
}

fn mysql_query(ctx: &FlowCtx, txn: u32) -> Vec<u8> {
    let mut p = vec![3];
    p.extend_from_slice(sql(ctx, txn).as_bytes());
    mysql_packet(0, &p)
}

/// A text result set of one column and one row whose value is `size` bytes of text:
/// column count, column definition, the row, then the closing OK packet.
fn mysql_result(size: u64, rng: &mut FlowRng) -> Body {
    const LENENC_3: u8 = 0xfd;
    let mut v = mysql_packet(1, &[1]);
    let mut d = Vec::new();
    for s in [&b"def"[..], b"shop", b"t", b"t", b"payload", b"payload"] {
        d.push(s.len() as u8);
        d.extend_from_slice(s);
    }
    d.extend_from_slice(&[0x0c, 0x2d, 0, 0, 0, 0x01, 0xfc, 0x10, 0, 0, 0, 0, 0]);
    v.extend_from_slice(&mysql_packet(2, &d));
    // One packet holds at most 2^24 − 1 bytes: the value and its 4-byte length prefix.
    let value = size.clamp(1, 0xff_ffff - 4);
    v.extend_from_slice(&((value + 4) as u32).to_le_bytes()[..3]);
    v.push(3);
    v.push(LENENC_3);
    v.extend_from_slice(&(value as u32).to_le_bytes()[..3]);
    let mut b = Body::with_tail(v, Tail::Text, value, rng);
    b.foot = b"\x07\x00\x00\x04\xfe\x00\x00\x22\x00\x00\x00";
    b
}

fn pg_startup(ctx: &FlowCtx) -> Vec<u8> {
    let mut f = ctx.rng(FLOW_STREAM);
    let mut v = vec![0, 0, 0, 0, 0, 3, 0, 0];
    for (k, val) in [
        ("user", pick(&mut f, &["app", "postgres", "grafana", "django"])),
        ("database", pick(&mut f, &["app", "metrics", "inventory"])),
        ("application_name", "psql"),
        ("client_encoding", "UTF8"),
    ] {
        v.extend_from_slice(k.as_bytes());
        v.push(0);
        v.extend_from_slice(val.as_bytes());
        v.push(0);
    }
    v.push(0);
    let n = v.len() as u32;
    v[..4].copy_from_slice(&n.to_be_bytes());
    v
}

fn pg_message(v: &mut Vec<u8>, tag: u8, body: &[u8]) {
    v.push(tag);
    put32(v, (body.len() + 4) as u32);
    v.extend_from_slice(body);
}

fn pg_ready(rng: &mut FlowRng) -> Vec<u8> {
    let mut v = Vec::new();
    pg_message(&mut v, b'R', &[0, 0, 0, 0]);
    for (k, val) in [
        ("server_version", "15.6 (Debian 15.6-0+deb12u1)"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("TimeZone", "Etc/UTC"),
    ] {
        let mut b = k.as_bytes().to_vec();
        b.push(0);
        b.extend_from_slice(val.as_bytes());
        b.push(0);
        pg_message(&mut v, b'S', &b);
    }
    let mut key = Vec::new();
    put32(&mut key, rng.gen_range(1000..4_000_000));
    put32(&mut key, rng.gen());
    pg_message(&mut v, b'K', &key);
    pg_message(&mut v, b'Z', b"I");
    v
}

/// RowDescription and one DataRow whose text column holds `size` bytes, then CommandComplete and ReadyForQuery.
fn pg_result(size: u64, rng: &mut FlowRng) -> Body {
    let size = size.clamp(1, 1 << 30);
    let mut v = Vec::new();
    let mut desc = vec![0, 1];
    desc.extend_from_slice(b"payload\0");
    desc.extend_from_slice(&[0, 0, 0x40, 0x01, 0, 2, 0, 0, 0, 25, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0]);
    pg_message(&mut v, b'T', &desc);
    v.push(b'D');
    put32(&mut v, (size + 10) as u32);
    put16(&mut v, 1);
    put32(&mut v, size as u32);
    let mut b = Body::with_tail(v, Tail::Text, size, rng);
    b.foot = b"C\x00\x00\x00\x0dSELECT 1\x00Z\x00\x00\x00\x05I";
    b
}
