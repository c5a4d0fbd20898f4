//! A test bed for live capture: two network namespaces joined by a veth pair with
//! several queues, on addresses of the benchmark range 198.18.0.0/15, removed
//! again when the [`TestBed`] is dropped (also when the test fails).
//!
//! ```text
//!  namespace <tx>            namespace <rx>
//!  <tx_if> 198.18.X.1/24 ═══ <rx_if> 198.18.X.2/24
//! ```
//!
//! Nothing is routed anywhere else: each namespace has only its loopback and its
//! end of the pair. Making one needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and
//! iproute2. Tests that use it are `#[ignore = "needs root: ..."]`: `cargo test`
//! lists them as ignored, and `make test` runs them as root in a step of their
//! own (`cargo test -- --ignored`). Run without what they need, they fail and
//! say why ([`TestBed::new`], [`require_root`], [`require_tools`]): a test that
//! was asked for never passes without having checked anything.

mod cgroup;

pub use cgroup::MemoryCgroup;

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct TestBed {
    pub tx_ns: String,
    pub rx_ns: String,
    pub tx_if: String,
    pub rx_if: String,
    pub tx_ip: String,
    pub rx_ip: String,
    pub queues: u16,
}

fn run(args: &[&str]) -> Result<Output, String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Why live tests cannot run here, if they cannot.
pub fn unavailable() -> Option<String> {
    // /proc/self/status says whether we hold CAP_NET_ADMIN (bit 12) and CAP_SYS_ADMIN (21).
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(str::trim).unwrap_or("0");
    let caps = u64::from_str_radix(eff, 16).unwrap_or(0);
    if caps & (1 << 12) == 0 || caps & (1 << 21) == 0 {
        return Some("live tests need root (CAP_NET_ADMIN and CAP_SYS_ADMIN to make namespaces and veth pairs)".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("live tests need iproute2's `ip` command".into());
    }
    None
}

/// The index and hardware address of `iface` in `ns`, from `ip -j link show`;
/// panics (the test fails) if `ip` cannot say.
pub fn link_of(ns: &str, iface: &str) -> (u32, [u8; 6]) {
    let out = run(&["-n", ns, "-j", "link", "show", iface]).unwrap_or_else(|e| panic!("{e}"));
    let json = String::from_utf8_lossy(&out.stdout);
    let value = |key: &str| {
        let at = json.find(&format!("\"{key}\":")).unwrap_or_else(|| panic!("no {key} in ip -j link show {iface}: {json}"));
        json[at + key.len() + 3..].split([',', '}']).next().unwrap_or_default().trim_matches('"').to_string()
    };
    let ifindex = value("ifindex").parse().unwrap_or_else(|e| panic!("ifindex of {iface}: {e}: {json}"));
    let mut address = [0u8; 6];
    let hex = value("address");
    let bytes: Vec<&str> = hex.split(':').collect();
    assert_eq!(bytes.len(), 6, "address of {iface}: {hex}");
    for (b, h) in address.iter_mut().zip(bytes) {
        *b = u8::from_str_radix(h, 16).unwrap_or_else(|e| panic!("address of {iface}: {hex}: {e}"));
    }
    (ifindex, address)
}

/// Fail the calling test, saying why, where live tests cannot run (no root, no iproute2).
pub fn require_root() {
    if let Some(why) = unavailable() {
        panic!("{why}: this test is #[ignore]d for that reason; run it as root (make test, or cargo test -- --ignored)");
    }
}

/// Fail the calling test, saying which, when one of `tools` is not installed.
pub fn require_tools(tools: &[&str]) {
    for t in tools {
        let found = Command::new(t).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
        assert!(found, "this test needs {t}, which is not installed (scripts/setup installs it)");
    }
}

impl TestBed {
    /// A fresh test bed with `queues` RX and TX queues on each end. Fails the
    /// calling test, saying why, where live tests cannot run ([`require_root`]).
    pub fn new(queues: u16) -> TestBed {
        require_root();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{}", std::process::id() % 100_000, n);
        let subnet = 1 + (std::process::id() + n) % 250;
        let tb = TestBed {
            tx_ns: format!("weir-tx-{id}"),
            rx_ns: format!("weir-rx-{id}"),
            tx_if: format!("wt{id}"),
            rx_if: format!("wr{id}"),
            tx_ip: format!("198.18.{subnet}.1"),
            rx_ip: format!("198.18.{subnet}.2"),
            queues,
        };
        match tb.build() {
            Ok(()) => tb,
            Err(e) => panic!("cannot build the test bed: {e}"),
        }
    }

    fn build(&self) -> Result<(), String> {
        let q = self.queues.to_string();
        run(&["netns", "add", &self.tx_ns])?;
        run(&["netns", "add", &self.rx_ns])?;
        run(&[
            "link",
            "add",
            &self.tx_if,
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &self.rx_if,
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
        ])?;
        run(&["link", "set", &self.tx_if, "netns", &self.tx_ns])?;
        run(&["link", "set", &self.rx_if, "netns", &self.rx_ns])?;
        for (ns, ifc, ip) in [(&self.tx_ns, &self.tx_if, &self.tx_ip), (&self.rx_ns, &self.rx_if, &self.rx_ip)] {
            // No IPv6: its neighbour discovery would put packets on the wire that no test sent.
            let sysctl = Command::new("ip").args(["netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]).status();
            sysctl.map_err(|e| format!("sysctl in {ns}: {e}"))?;
            run(&["-n", ns, "addr", "add", &format!("{ip}/24"), "dev", ifc])?;
            run(&["-n", ns, "link", "set", ifc, "up"])?;
            run(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// `cmd` run inside the sending namespace.
    pub fn in_tx(&self, cmd: &str) -> Command {
        self.in_ns(&self.tx_ns, cmd)
    }

    /// `cmd` run inside the capturing namespace.
    pub fn in_rx(&self, cmd: &str) -> Command {
        self.in_ns(&self.rx_ns, cmd)
    }

    fn in_ns(&self, ns: &str, cmd: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, cmd]);
        c
    }

    /// Make the sending end transmit every packet on its TX queue 0 (XPS: every
    /// CPU maps to queue 0), so the capturing end receives them all on RX queue
    /// 0 (with an XDP program there, veth keeps the queue number).
    pub fn all_on_queue_zero(&self) -> Result<(), String> {
        let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").map_err(|e| format!("reading the CPUs: {e}"))?;
        let last: u32 = possible.trim().rsplit(['-', ',']).next().and_then(|c| c.parse().ok()).ok_or("no CPU list")?;
        let mask = (0..=last).fold(0u128, |m, c| m | 1 << c);
        let dir = format!("/sys/class/net/{}/queues", self.tx_if);
        let others: String = (1..self.queues).map(|q| format!(" && echo 0 > {dir}/tx-{q}/xps_cpus")).collect();
        let script = format!("echo {mask:x} > {dir}/tx-0/xps_cpus{others}");
        match self.in_tx("sh").args(["-c", &script]).status() {
            Ok(st) if st.success() => Ok(()),
            other => Err(format!("setting XPS ({script}): {other:?}")),
        }
    }

    /// The capturing end's index and hardware address, as [`link_of`] gives them.
    pub fn rx_link(&self) -> (u32, [u8; 6]) {
        link_of(&self.rx_ns, &self.rx_if)
    }

    /// A device counter of the capturing end, e.g. "rx_packets" (from `ip -s -j`).
    pub fn rx_link_packets(&self) -> u64 {
        let out = run(&["-n", &self.rx_ns, "-s", "link", "show", &self.rx_if]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        out.ok()
            .and_then(|s| {
                let mut lines = s.lines().skip_while(|l| !l.trim_start().starts_with("RX:"));
                lines.next()?;
                lines.next()?.split_whitespace().nth(1)?.parse().ok()
            })
            .unwrap_or(0)
    }
}

impl Drop for TestBed {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth end in it, and with it the pair.
        let _ = run(&["netns", "del", &self.tx_ns]);
        let _ = run(&["netns", "del", &self.rx_ns]);
    }
}

/// A helper process of a live test (a server or client in a namespace),
/// killed if the test ends before it did: a failed assertion must not leave
/// it running, holding the test bed's namespace.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Reads the next line a helper printed and checks that it starts with
/// `word` (helpers print a word when they reach a point the test waits
/// for); returns the line, trimmed.
pub fn wait_for(out: &mut impl std::io::BufRead, word: &str) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("reads the helper's output");
    assert!(line.trim().starts_with(word), "the helper said `{line}`, not `{word}`");
    line.trim().to_string()
}

/// Takes the piped stderr of a weir capture just started and reads it until
/// weir says it is listening (at most 20 s between lines); returns the rest of
/// its lines, for the caller to keep or drain (a full pipe would block weir).
/// Panics, with what it said, if it exits first; `what` names it.
pub fn wait_listening(child: &mut std::process::Child, what: &str) -> std::io::Lines<std::io::BufReader<std::process::ChildStderr>> {
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stderr.take().expect("the child's stderr is piped")).lines();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut said = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("listening on") => return lines,
            Some(Ok(l)) => said.push(l),
            _ => {
                let _ = child.wait();
                panic!("{what} never started listening; it said: {}", said.join("\n"));
            }
        }
        assert!(std::time::Instant::now() < deadline, "{what} took too long to start");
    }
}

/// A directory under `dir` holding this build's libpcap shim (weir-pcap's
/// cdylib, which cargo builds beside the tests of a crate that has weir-pcap
/// as a dev-dependency) as `libpcap.so.0.8`, for `weir run --lib`.
pub fn pcap_shim(dir: &std::path::Path) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let so = [deps.join("libpcap.so"), deps.parent().unwrap().join("libpcap.so")]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no libpcap.so (weir-pcap's) in {} or beside it", deps.display()));
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let _ = std::os::unix::fs::symlink(so, lib.join("libpcap.so.0.8"));
    lib
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "needs root: builds a veth test bed in two network namespaces"]
    fn builds_pings_and_cleans_up() {
        let tb = TestBed::new(2);
        let ok = tb.in_tx("ping").args(["-c", "1", "-W", "2", &tb.rx_ip]).output().unwrap();
        assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stdout));
        let rx_ns = tb.rx_ns.clone();
        drop(tb);
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        assert!(!String::from_utf8_lossy(&list.stdout).contains(&rx_ns), "namespace left behind");
    }
}
