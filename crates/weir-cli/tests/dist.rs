//! What `dist/` ships, checked by the tools that will read it:
//! `systemd-analyze verify` on the sensor's unit, `logrotate -d` on its
//! logrotate snippet. Both must pass without a warning.
//!
//! `systemd-analyze verify` checks that every command the unit runs exists,
//! so it reads a copy whose `/usr/local/bin/weir` is the weir built here
//! (whether it has `weir sensor` yet does not matter: verify runs nothing).
//! Each check is first shown to catch a mistake planted in a copy, so a
//! tool that accepted everything would fail the test. Both tools come from
//! scripts/setup (packages systemd and logrotate).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn dist(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist").join(name)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run `program`, or fail saying how to get it.
fn tool(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/setup installs it: packages systemd and logrotate)"))
}

/// The unit, with weir's path made the built binary's, in `dir`.
fn unit_copy(dir: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    let unit = std::fs::read_to_string(dist("weir-sensor.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/weir sensor /etc/weir/sensor.toml"), "the unit runs weir sensor in the foreground");
    let copy = dir.join("weir-sensor.service");
    std::fs::write(&copy, edit(unit.replace("/usr/local/bin/weir", env!("CARGO_BIN_EXE_weir")))).unwrap();
    copy
}

fn verify(unit: &Path) -> (bool, String) {
    let o = tool("systemd-analyze", &["verify", unit.to_str().unwrap()]);
    (o.status.success(), text(&o.stderr) + &text(&o.stdout))
}

#[test]
fn the_sensor_unit_passes_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, said) = verify(&unit_copy(dir.path(), |u| u));
    assert!(ok && said.trim().is_empty(), "systemd-analyze verify dist/weir-sensor.service:\n{said}");

    // The checks bite: a misspelt key is warned about, a missing binary refused.
    let (_, said) = verify(&unit_copy(dir.path(), |u| u.replace("NoNewPrivileges=", "NoNewPrivilege=")));
    assert!(said.contains("NoNewPrivilege"), "verify warns of an unknown key: {said}");
    let (ok, _) = verify(&unit_copy(dir.path(), |u| u.replace(env!("CARGO_BIN_EXE_weir"), "/nonexistent/weir")));
    assert!(!ok, "verify refuses a command that does not exist");
}

#[test]
fn the_sensor_unit_says_what_the_service_needs() {
    let unit = std::fs::read_to_string(dist("weir-sensor.service")).unwrap();
    let settings: Vec<&str> = unit.lines().filter(|l| !l.starts_with('#')).collect();
    for want in [
        "Type=notify",
        "Restart=on-failure",
        "ExecReload=/bin/kill -USR2 $MAINPID",
        "CapabilityBoundingSet=CAP_NET_RAW CAP_NET_ADMIN CAP_BPF CAP_PERFMON",
        "AmbientCapabilities=CAP_NET_RAW CAP_NET_ADMIN CAP_BPF CAP_PERFMON",
        "LimitMEMLOCK=infinity",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/weir /var/log/weir",
        "ProtectHome=yes",
        "NoNewPrivileges=yes",
    ] {
        assert!(settings.contains(&want), "dist/weir-sensor.service sets {want}");
    }
    // Every capability granted is explained in a comment.
    for cap in ["CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_BPF", "CAP_PERFMON"] {
        assert!(unit.lines().any(|l| l.starts_with(&format!("# {cap}:"))), "{cap} has its reason");
    }
    // The JIT needs executable memory.
    assert!(!settings.iter().any(|l| l.starts_with("MemoryDenyWriteExecute=")), "MemoryDenyWriteExecute would stop the filter JIT");
}

fn logrotate_debug(conf: &Path, state: &Path) -> (bool, String) {
    let o = tool("logrotate", &["-d", "-s", state.to_str().unwrap(), conf.to_str().unwrap()]);
    (o.status.success(), text(&o.stderr) + &text(&o.stdout))
}

#[test]
fn the_logrotate_snippet_parses() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("logrotate.state");
    let snippet = std::fs::read_to_string(dist("weir-sensor.logrotate")).unwrap();
    for want in ["missingok", "notifempty", "compress", "delaycompress", "systemctl kill --signal=HUP weir-sensor.service"] {
        assert!(snippet.contains(want), "dist/weir-sensor.logrotate has {want}");
    }
    let (ok, said) = logrotate_debug(&dist("weir-sensor.logrotate"), &state);
    assert!(ok && !said.contains("error"), "logrotate -d dist/weir-sensor.logrotate:\n{said}");
    assert!(said.contains("rotating pattern: /var/log/weir/*.json"), "{said}");

    // The check bites: an unknown directive is said as an error (logrotate
    // still exits 0 for it, so the output is what is checked).
    let bad = dir.path().join("bad.logrotate");
    std::fs::write(&bad, snippet.replace("notifempty", "notifempti")).unwrap();
    let (_, said) = logrotate_debug(&bad, &state);
    assert!(said.contains("error") && said.contains("notifempti"), "logrotate -d says an unknown directive is an error: {said}");
}

/// `weir man DIR` writes weir.1 and a page for every command `weir --help`
/// lists; each page names every long option its command's `--help` shows,
/// and groff reads every page without a warning.
#[test]
fn the_man_pages_have_every_command_and_option_and_groff_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let weir = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_weir")).args(args).output().unwrap();
    let out = weir(&["man", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let help = text(&weir(&["--help"]).stdout);
    // The commands: the indented lines between "Commands:" and "Options:".
    let commands: Vec<String> = help
        .split("Commands:")
        .nth(1)
        .and_then(|r| r.split("Options:").next())
        .unwrap()
        .lines()
        // A command's line; a wrapped description's lines are indented further.
        .filter_map(|l| l.strip_prefix("  ").filter(|l| !l.starts_with(' ')).and_then(|l| l.split_whitespace().next()))
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect();
    assert!(commands.len() >= 14 && commands.iter().any(|c| c == "sensor"), "{commands:?}");
    let mut pages = vec![("weir".to_string(), help)];
    pages.extend(commands.iter().map(|c| (format!("weir-{c}"), text(&weir(&[c, "--help"]).stdout))));
    for (name, help) in &pages {
        let path = dir.path().join(format!("{name}.1"));
        let page = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(page.contains(&format!(".TH {name} 1")), "{name}: {page}");
        let longs: std::collections::BTreeSet<&str> = help
            .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
            .filter(|w| w.starts_with("--") && w.len() > 2 && w[2..].chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .collect();
        assert!(!longs.is_empty() || name == "weir", "{name}: no options in its --help");
        for long in longs {
            assert!(page.contains(&long.replace('-', "\\-")), "{name}.1 lacks {long}");
        }
        // -k: the pages are UTF-8 (help texts say ×, µs), read through preconv as man-db does.
        let read = tool("groff", &["-k", "-man", "-Tutf8", "-ww", "-z", path.to_str().unwrap()]);
        assert!(read.status.success() && read.stderr.is_empty(), "groff on {name}.1: {}", text(&read.stderr));
    }
    // No page for anything --help does not list.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), pages.len());
}
