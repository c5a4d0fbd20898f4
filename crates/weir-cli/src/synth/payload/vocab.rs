//! Words, names and strings that make synthetic payloads read like real traffic.
//!
//! Host names are built from two invented words and a TLD rather than taken from
//! real sites, so traces never claim to show someone's real service; everything
//! else (user agents, server banners, MIME types) is what real software sends.
//! A name is a pure function of its number, so the same server keeps its name for
//! a whole trace and across runs with the same seed.

use crate::synth::rng::{mix64, pick, zipf_index, FlowRng};
use rand::Rng;

pub const WORDS: &[&str] = &[
    "amber", "anchor", "apex", "arrow", "atlas", "aurora", "azure", "badger", "beacon", "birch", "blue", "bolt", "bright", "brook",
    "canyon", "cedar", "cinder", "cipher", "citrus", "cloud", "cobalt", "comet", "coral", "crest", "crimson", "delta", "drift", "ember",
    "falcon", "fern", "flint", "forge", "fox", "frost", "garnet", "glacier", "granite", "harbor", "hawk", "hazel", "helix", "heron",
    "indigo", "iris", "jade", "juniper", "kestrel", "lagoon", "lantern", "lark", "lemon", "linden", "lotus", "lumen", "lynx", "maple",
    "marble", "meadow", "mesa", "meteor", "mint", "mosaic", "nebula", "north", "nova", "oak", "onyx", "orbit", "orchid", "otter", "pearl",
    "pine", "pixel", "plaza", "polar", "prairie", "prism", "quartz", "quill", "raven", "reef", "ridge", "river", "robin", "ruby",
    "saffron", "sage", "sierra", "signal", "silver", "slate", "solar", "spruce", "stone", "summit", "swift", "tango", "tidal", "timber",
    "topaz", "trail", "tundra", "umber", "vale", "vector", "velvet", "violet", "vista", "willow", "wren", "zenith", "zephyr",
];

const TLDS: &[(u32, &str)] = &[
    (40, "com"),
    (10, "net"),
    (8, "org"),
    (6, "io"),
    (4, "de"),
    (3, "co.uk"),
    (3, "jp"),
    (2, "fr"),
    (2, "nl"),
    (2, "com.br"),
    (2, "ru"),
    (2, "app"),
    (1, "dev"),
    (1, "info"),
    (1, "cloud"),
];

/// Subdomain labels by what the host does.
pub const WEB_SUBDOMAINS: &[&str] =
    &["www", "api", "cdn", "static", "img", "assets", "m", "login", "auth", "video", "media", "edge", "app", "s3"];
pub const MAIL_SUBDOMAINS: &[&str] = &["mail", "smtp", "mx1", "mx2", "imap", "pop", "outlook", "relay"];

/// A registrable domain (`falconridge.com`) for site number `n`.
pub fn site(n: u64) -> String {
    let h = mix64(n ^ 0x5173);
    let w1 = WORDS[(h % WORDS.len() as u64) as usize];
    let w2 = WORDS[((h >> 16) % WORDS.len() as u64) as usize];
    let mut r = FlowRng::new(h, 1);
    let tld = crate::synth::rng::weighted(&mut r, TLDS);
    if h >> 40 & 3 == 0 {
        format!("{w1}-{w2}.{tld}")
    } else {
        format!("{w1}{w2}.{tld}")
    }
}

/// A fully qualified name under site `n` with a subdomain from `subs`.
pub fn host(rng: &mut impl Rng, n: u64, subs: &[&str]) -> String {
    format!("{}.{}", subs[zipf_index(rng, subs.len())], site(n))
}

/// A plausible URL path with an optional query string.
pub fn url_path(rng: &mut impl Rng) -> String {
    const DIRS: &[&str] = &[
        "",
        "api/v1",
        "api/v2",
        "static/js",
        "static/css",
        "assets/img",
        "images",
        "products",
        "blog",
        "news",
        "search",
        "account",
        "cart",
        "video",
        "docs",
        "wp-content/uploads",
        "cdn-cgi",
        "graphql",
        "media",
    ];
    const EXTS: &[&str] = &["", ".html", ".js", ".css", ".png", ".jpg", ".json", ".svg", ".woff2", ".php", ".mp4"];
    let dir = pick(rng, DIRS);
    let mut p = String::with_capacity(64);
    p.push('/');
    if !dir.is_empty() {
        p.push_str(dir);
        p.push('/');
    }
    p.push_str(pick(rng, WORDS));
    if rng.gen_bool(0.5) {
        p.push('-');
        p.push_str(pick(rng, WORDS));
    }
    if rng.gen_bool(0.3) {
        p.push_str(&format!("-{}", rng.gen_range(1..99_999)));
    }
    p.push_str(pick(rng, EXTS));
    if rng.gen_bool(0.25) {
        p.push_str(&format!("?id={}&ref={}", rng.gen_range(1..10_000_000), pick(rng, WORDS)));
    }
    p
}

pub const USER_AGENTS: &[(u32, &str)] = &[
    (30, "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36"),
    (10, "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4.1 Safari/605.1.15"),
    (10, "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4.1 Mobile/15E148 Safari/604.1"),
    (12, "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.6367.82 Mobile Safari/537.36"),
    (8, "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0"),
    (4, "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0"),
    (5, "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.80"),
    (5, "curl/7.88.1"),
    (3, "Wget/1.21.3"),
    (4, "okhttp/4.12.0"),
    (3, "python-requests/2.31.0"),
    (2, "Go-http-client/1.1"),
    (2, "Debian APT-HTTP/1.3 (2.6.1)"),
    (2, "Microsoft-CryptoAPI/10.0"),
];

pub const HTTP_SERVERS: &[(u32, &str)] = &[
    (30, "nginx"),
    (10, "nginx/1.24.0"),
    (15, "Apache/2.4.57 (Debian)"),
    (15, "cloudflare"),
    (8, "Microsoft-IIS/10.0"),
    (6, "envoy"),
    (5, "gws"),
    (5, "AmazonS3"),
    (3, "LiteSpeed"),
    (3, "openresty"),
];

pub const FIRST_NAMES: &[&str] = &[
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "niaj", "olivia", "peggy", "rupert",
    "sybil", "trent", "victor", "walter", "yuki", "zoe", "omar", "lena", "marco", "priya",
];

/// A mailbox like `carol.ridge@falconridge.com`.
pub fn mailbox(rng: &mut impl Rng, site_n: u64) -> String {
    format!("{}.{}@{}", pick(rng, FIRST_NAMES), pick(rng, WORDS), site(site_n))
}

/// A sentence of lowercase words, for mail bodies and log lines.
pub fn sentence(rng: &mut impl Rng, words: std::ops::Range<usize>) -> String {
    let words = rng.gen_range(words);
    let mut s = String::with_capacity(words * 8);
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(pick(rng, WORDS));
    }
    s
}

/// RFC 7231 IMF-fixdate for a timestamp in ns since the epoch.
pub fn http_date(ts_ns: u64) -> String {
    chrono::DateTime::from_timestamp((ts_ns / 1_000_000_000) as i64, 0).unwrap_or_default().format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// Lower-case hex of `n` random bytes.
pub fn hex_token(rng: &mut impl Rng, n: usize) -> String {
    let mut s = String::with_capacity(n * 2);
    for _ in 0..n {
        s.push_str(&format!("{:02x}", rng.gen::<u8>()));
    }
    s
}
