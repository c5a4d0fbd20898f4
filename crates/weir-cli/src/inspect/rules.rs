//! The rule file of `weir inspect`, and the built-in rule set.
//!
//! Format: one rule per line; `#` starts a comment; blank lines are ignored.
//!
//! ```text
//! # id   ports        content
//! 1001   80,8080      "GET /admin"
//! 1002   6000-6010    "|90 90 90|login"
//! 1003   any          "|de ad be ef|"
//! ```
//!
//! - `id`: a number from 1 to 2^32−1, unique in the file.
//! - `ports`: `any`, or a comma-separated list of ports and inclusive ranges.
//!   A rule applies to a packet whose service port, min(src port, dst port) of
//!   TCP or UDP, is in the list; `any` rules apply to every packet with a payload.
//! - `content`: bytes to find anywhere in the transport payload, in double
//!   quotes. Inside, `|..|` holds hex bytes separated by spaces, `\"`, `\|`
//!   and `\\` stand for themselves. Matching is exact and case-sensitive.
//!
//! Rules with the same `ports` text form one *port group*. The ports that share
//! groups are matched by one Aho-Corasick automaton of those groups' rules and
//! the `any` rules (or, split, by one per group).
//!
//! The built-in set ([`builtin`]) is generated deterministically: 49 port groups
//! of well-known services with 80 strings each and an `any` group of 160, 4,080
//! strings in all (`--group-rules N` scales the groups). Each group starts with strings real traffic of its service
//! carries (request lines, headers, protocol banners), so some fire; the rest are
//! pseudo-random tokens of 6 to 24 bytes, as most signatures of a real set
//! never match a given network.

use anyhow::{bail, Context};
use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::path::Path;

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub id: u32,
    /// The `ports` field as written: rules with the same text share a group.
    pub ports_text: String,
    /// Empty for `any`.
    pub ports: Vec<RangeInclusive<u16>>,
    pub content: Vec<u8>,
}

impl Rule {
    pub fn any_port(&self) -> bool {
        self.ports.is_empty()
    }
}

/// Read a rule file as text: a UTF-8 byte order mark at its start is skipped,
/// as most tools skip it; bytes that are not UTF-8 (a binary file, another
/// encoding) are an error naming the file, line and column.
pub fn read(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let body = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
    match std::str::from_utf8(body) {
        Ok(text) => Ok(text.to_string()),
        Err(e) => {
            let good = &body[..e.valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            let column = good.len() - good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
            let at = e.valid_up_to() + (bytes.len() - body.len());
            bail!(
                "{}:{line}:{column}: byte 0x{:02x} (offset {at}) is not UTF-8 text: a rule file is text, one rule a line",
                path.display(),
                body[e.valid_up_to()]
            )
        }
    }
}

/// Parse a rule file; errors name the line.
pub fn parse(text: &str, origin: &str) -> anyhow::Result<Vec<Rule>> {
    let mut rules = Vec::new();
    let mut ids = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let at = || format!("{origin}:{}", n + 1);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (id, rest) = line.split_once(char::is_whitespace).with_context(|| format!("{}: expected `id ports \"content\"`", at()))?;
        let (ports_text, content) =
            rest.trim_start().split_once(char::is_whitespace).with_context(|| format!("{}: expected `id ports \"content\"`", at()))?;
        let id: u32 = id.parse().ok().filter(|&i| i > 0).with_context(|| format!("{}: rule id {id:?} is not a number from 1", at()))?;
        if !ids.insert(id) {
            bail!("{}: rule id {id} is used twice", at());
        }
        let ports = parse_ports(ports_text).with_context(at)?;
        let content = parse_content(content.trim()).with_context(at)?;
        rules.push(Rule { id, ports_text: ports_text.to_string(), ports, content });
    }
    if rules.is_empty() {
        bail!("{origin}: no rules");
    }
    Ok(rules)
}

fn parse_ports(s: &str) -> anyhow::Result<Vec<RangeInclusive<u16>>> {
    if s == "any" {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|p| {
            let port = |x: &str| x.parse::<u16>().with_context(|| format!("port {x:?} is not a number from 0 to 65535"));
            match p.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (port(a)?, port(b)?);
                    if a > b {
                        bail!("port range {p}: its start is past its end");
                    }
                    Ok(a..=b)
                }
                None => port(p).map(|x| x..=x),
            }
        })
        .collect()
}

fn parse_content(s: &str) -> anyhow::Result<Vec<u8>> {
    let inner = s
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .filter(|_| s.len() >= 2)
        .with_context(|| format!("content {s:?} must be in double quotes"))?;
    let mut out = Vec::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '|' | '\\')) => out.push(e as u8),
                other => bail!("content {s:?}: `\\{}` is not an escape (use \\\", \\| or \\\\)", other.map_or(String::new(), String::from)),
            },
            '|' => {
                let hex: String = chars.by_ref().take_while(|&c| c != '|').collect();
                for byte in hex.split_whitespace() {
                    let b = u8::from_str_radix(byte, 16)
                        .ok()
                        .filter(|_| byte.len() == 2)
                        .with_context(|| format!("content {s:?}: {byte:?} is not a hex byte"))?;
                    out.push(b);
                }
            }
            '"' => bail!("content {s:?}: a quote inside must be written \\\""),
            c => {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    if out.is_empty() {
        bail!("content {s:?} is empty");
    }
    Ok(out)
}

/// Services of the built-in set: (ports, strings their traffic carries).
const SERVICES: &[(&str, &[&str])] = &[
    (
        "80,8080,8000",
        &[
            "GET /",
            "POST /",
            "HTTP/1.1 200 OK",
            "HTTP/1.1 404",
            "Host: ",
            "User-Agent: ",
            "Content-Type: text/html",
            "Accept-Encoding: gzip",
        ],
    ),
    ("443", &["\u{16}\u{3}\u{1}", "\u{16}\u{3}\u{3}"]),
    ("53", &["|00 01 00 00 00 00|", "|c0 0c 00 01 00 01|", "|00 00 29|"]),
    ("25,587", &["EHLO ", "MAIL FROM:", "RCPT TO:", "220 "]),
    ("21", &["USER ", "PASS ", "220 ", "RETR "]),
    ("22", &["SSH-2.0-", "diffie-hellman"]),
    ("110", &["+OK", "RETR "]),
    ("143", &["a001 LOGIN", "* OK"]),
    ("123", &["|1b 00 04 fa|"]),
    ("445,139", &["|ff|SMB", "|fe|SMB"]),
    ("3306", &["mysql_native_password"]),
    ("5432", &["SCRAM-SHA-256"]),
    ("6379", &["*1\r\n$4\r\nPING"]),
    ("11211", &["stats\r\n"]),
    ("5060", &["SIP/2.0", "INVITE sip:"]),
    ("1883", &["MQTT"]),
    ("389", &["|30 84|"]),
    ("161,162", &["public"]),
    ("3389", &["Cookie: mstshash="]),
    ("23", &["login: "]),
];

/// Further services of the built-in set, with only generated strings.
const MORE_PORTS: &[&str] = &[
    "69",
    "88",
    "111",
    "135",
    "137",
    "194",
    "465",
    "500",
    "514",
    "631",
    "636",
    "853",
    "873",
    "993",
    "995",
    "1080",
    "1194",
    "1433",
    "1521",
    "1723",
    "2049",
    "2375",
    "3128",
    "4444",
    "5000",
    "5222",
    "5900",
    "6000-6010",
    "8443",
];

/// Strings per port group of the built-in set by default.
pub const PER_GROUP: usize = 80;

/// The built-in rule set as a rule file (see the module doc), with `per_group`
/// strings in each port group and twice that in the `any` group.
pub fn builtin(per_group: usize) -> String {
    let any = 2 * per_group;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut token = |seen: &mut HashSet<String>| loop {
        let len = 6 + (next() % 19) as usize;
        let t: String = (0..len)
            .map(|_| {
                let r = next();
                // Printable, with no character the format treats specially.
                let c = (b'!' + (r % 94) as u8) as char;
                if matches!(c, '"' | '|' | '\\') {
                    'x'
                } else {
                    c
                }
            })
            .collect();
        if seen.insert(t.clone()) {
            break t;
        }
    };
    let mut out = String::from("# weir inspect: the built-in rule set (generated; see `weir inspect --help`)\n# id ports content\n");
    let mut id = 1000u32;
    let mut seen = HashSet::new();
    let mut group = |out: &mut String, ports: &str, real: &[&str], n: usize, seen: &mut HashSet<String>| {
        for i in 0..n {
            id += 1;
            let content = match real.get(i) {
                Some(r) if r.starts_with('|') => r.to_string(),
                Some(r) => r
                    .chars()
                    .map(|c| {
                        if (' '..='~').contains(&c) && !matches!(c, '"' | '|' | '\\') {
                            c.to_string()
                        } else {
                            format!("|{:02x}|", c as u32)
                        }
                    })
                    .collect(),
                None => token(seen),
            };
            out.push_str(&format!("{id} {ports} \"{content}\"\n"));
        }
    };
    for (ports, real) in SERVICES {
        group(&mut out, ports, real, per_group, &mut seen);
    }
    for ports in MORE_PORTS {
        group(&mut out, ports, &[], per_group, &mut seen);
    }
    group(&mut out, "any", &[], any, &mut seen);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_reads_ports_hex_and_escapes() {
        let r = parse("# c\n\n7 80,6000-6010 \"GET |0d 0a|\\\"x\\|\\\\\"\n8 any \"a\"\n", "t").unwrap();
        assert_eq!(r[0].content, b"GET \r\n\"x|\\".to_vec());
        assert_eq!(r[0].ports, vec![80..=80, 6000..=6010]);
        assert!(r[1].any_port());
    }

    #[test]
    fn errors_name_the_line_and_what_is_wrong() {
        for (text, want) in [
            ("1 80 \"a\"\n1 81 \"b\"", "t:2: rule id 1 is used twice"),
            ("1 80-70 \"a\"", "t:1"),
            ("x 80 \"a\"", "rule id \"x\""),
            ("1 80 a", "double quotes"),
            ("1 80 \"|zz|\"", "not a hex byte"),
            ("1 99999 \"a\"", "99999"),
            ("# nothing", "no rules"),
        ] {
            let e = format!("{:#}", parse(text, "t").unwrap_err());
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_builtin_set_has_thousands_of_strings_in_dozens_of_groups() {
        let rules = parse(&builtin(PER_GROUP), "builtin").unwrap();
        let groups: HashSet<&str> = rules.iter().map(|r| r.ports_text.as_str()).collect();
        assert_eq!(rules.len(), (SERVICES.len() + MORE_PORTS.len()) * 80 + 160);
        assert!(rules.len() >= 4000 && groups.len() >= 48, "{} rules in {} groups", rules.len(), groups.len());
        assert_eq!(builtin(PER_GROUP), builtin(PER_GROUP), "deterministic");
        assert_eq!(parse(&builtin(500), "builtin").unwrap().len(), (SERVICES.len() + MORE_PORTS.len()) * 500 + 1000);
        assert!(rules.iter().any(|r| r.content == b"GET /"));
    }
}
