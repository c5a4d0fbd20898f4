//! The memory budget: everything an engine will allocate, or ask the kernel to
//! allocate for it, summed up front and checked against what this machine (or
//! the cgroup weir runs in) has available, before any of it is allocated.
//!
//! A program that allocates much beside the engine (automata, flow tables)
//! describes it in a [`Plan`] and hands it to
//! [`EngineBuilder::application_memory`](crate::EngineBuilder::application_memory),
//! so that one check covers both; [`Plan::check`] checks a plan on its own.
//!
//! The contract:
//! - Every large allocation of a capture has an item in the [`Plan`]: the
//!   pools (arenas of copied packets, cell tables, work-queue rings), the
//!   locality index and batches, a trace reader's blocks, AF_PACKET rings,
//!   AF_XDP UMEMs and rings. Each item names the setting it comes from, so a
//!   refusal tells the user what to change.
//! - Sizes are the worst case, not what is touched at first: a pool's arena is
//!   mapped lazily, but a burst can fill all of it, and the kernel allocates a
//!   packet ring whole and outside any process memory limit (a ring of 100 GiB
//!   once drove a machine out of memory).
//! - A plan may use at most 80% (`SHARE_PERCENT`) of the memory available: the
//!   smaller of the kernel's `MemAvailable` and the room left under the memory
//!   limit of the cgroup and each of its ancestors (v1 or v2), where the page
//!   cache the cgroup could drop counts as room. Sums saturate, so no
//!   configuration can overflow its way past the check.
//! - The engine builds the engine's part per queue (`Budget`), with what the
//!   application declared it will allocate beside it (automata, flow tables:
//!   [`crate::EngineBuilder::application_memory`]); a source adds its own once
//!   it knows how many queues it opens, and checks the whole, before it creates
//!   a socket, a ring or an arena. One check, so no two parts each take their
//!   share of the same memory.

use std::fmt;
use std::path::{Path, PathBuf};

/// The share of the available memory one capture may plan to use: the rest is
/// left to the application, the page cache and everything else on the machine.
pub(crate) const SHARE_PERCENT: u64 = 80;

/// One allocation, or one kind of allocation across queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Item {
    /// What it is and the setting that sizes it, e.g. `pools: 4 queues x 128
    /// chunks of 512 KiB (pool 256,128)`.
    pub(crate) what: String,
    pub(crate) bytes: u64,
}

/// Everything a capture will allocate, item by item.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    items: Vec<Item>,
}

impl Plan {
    /// A plan of nothing.
    pub fn new() -> Plan {
        Plan::default()
    }

    /// Plan `bytes` bytes, the most this allocation can take. `what` names it
    /// and the setting that sizes it (`flow tables of 1000000 flows
    /// (--max-flows)`): a refusal shows it to the user.
    pub fn add(&mut self, what: impl Into<String>, bytes: u64) {
        self.items.push(Item { what: what.into(), bytes });
    }

    /// Plans everything `other` plans too.
    pub fn extend(&mut self, other: Plan) {
        self.items.extend(other.items);
    }

    pub(crate) fn total(&self) -> u64 {
        self.items.iter().fold(0u64, |t, i| t.saturating_add(i.bytes))
    }

    /// Refuse the plan when it exceeds the share of `available` it may use.
    pub(crate) fn check_against(&self, available: &Available) -> Result<(), MemoryError> {
        let allowed = available.allowed();
        let total = self.total();
        if total <= allowed {
            return Ok(());
        }
        let mut items = self.items.clone();
        items.sort_by_key(|i| std::cmp::Reverse(i.bytes));
        Err(MemoryError { total, allowed, available: available.clone(), items })
    }

    /// Refuse the plan when it exceeds what this machine has available now.
    ///
    /// # Errors
    /// A [`MemoryError`] when the plan's total is more than 80% of the memory
    /// available to this process (see the module's contract).
    pub fn check(&self) -> Result<(), MemoryError> {
        self.check_against(&Available::read())
    }
}

/// The engine's part of a plan, per queue, which a source completes once it
/// knows its queues (see the module's contract). The engine makes it and hands
/// it to the source it opens; only the crate can use one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Budget {
    per_queue: Vec<(String, u64)>,
    /// What the application allocates beside the engine, whatever the queues.
    application: Plan,
    /// Cells per queue of the engine's pools: an AF_XDP UMEM has a frame per cell.
    pool_cells: u64,
}

impl Budget {
    pub(crate) fn new(pool_cells: usize) -> Budget {
        Budget { per_queue: Vec::new(), application: Plan::new(), pool_cells: pool_cells as u64 }
    }

    /// What the application will allocate beside the engine.
    pub(crate) fn application(&mut self, plan: Plan) {
        self.application.items.extend(plan.items);
    }

    /// Something every queue has once: `what` is how one queue's is sized.
    pub(crate) fn per_queue(&mut self, what: impl Into<String>, bytes: u64) {
        self.per_queue.push((what.into(), bytes));
    }

    pub(crate) fn pool_cells(&self) -> u64 {
        self.pool_cells
    }

    /// The whole plan for `queues` queues: the engine's items and the source's.
    pub(crate) fn plan(&self, queues: usize, source: Plan) -> Plan {
        let n = queues as u64;
        let mut plan = Plan::new();
        for (what, bytes) in &self.per_queue {
            plan.add(format!("{what}, x {queues} queue{}", if queues == 1 { "" } else { "s" }), bytes.saturating_mul(n));
        }
        plan.items.extend(source.items);
        plan.items.extend(self.application.items.iter().cloned());
        plan
    }

    /// Check the whole plan for `queues` queues against what is available now.
    pub(crate) fn check(&self, queues: usize, source: Plan) -> Result<(), MemoryError> {
        self.plan(queues, source).check()
    }
}

/// Memory a capture may draw on, and where that figure was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Available {
    pub(crate) bytes: u64,
    /// `MemAvailable`, or the cgroup whose limit is the tighter.
    pub(crate) from: String,
}

impl Available {
    pub(crate) fn new(bytes: u64, from: impl Into<String>) -> Available {
        Available { bytes, from: from.into() }
    }

    /// The most a plan may use: [`SHARE_PERCENT`] of it.
    pub(crate) fn allowed(&self) -> u64 {
        (u128::from(self.bytes) * u128::from(SHARE_PERCENT) / 100) as u64
    }

    /// What this process may draw on now: the tighter of the machine's
    /// `MemAvailable` and its cgroups' room. Without /proc (never on Linux as
    /// weir runs), the physical memory.
    pub(crate) fn read() -> Available {
        let machine = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| meminfo_field(&t, "MemAvailable:"))
            .map(|b| Available::new(b, "MemAvailable in /proc/meminfo"))
            .unwrap_or_else(|| Available::new(physical_memory(), "the physical memory"));
        let groups = std::fs::read_to_string("/proc/self/cgroup").map(|t| cgroup_rooms(&t, Path::new("/sys/fs/cgroup")));
        groups.unwrap_or_default().into_iter().fold(machine, |best, a| if a.bytes < best.bytes { a } else { best })
    }
}

/// A plan larger than what may be used. Its message gives the total, the share
/// allowed and where the available figure was read, and names the items of at
/// least 1% of the total, largest first: the settings to lower.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct MemoryError {
    pub(crate) total: u64,
    pub(crate) allowed: u64,
    pub(crate) available: Available,
    /// Largest first.
    pub(crate) items: Vec<Item>,
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "this capture needs {} of memory, more than the {} it may use ({SHARE_PERCENT}% of the {} available, from {}): ",
            Bytes(self.total),
            Bytes(self.allowed),
            Bytes(self.available.bytes),
            self.available.from
        )?;
        // The largest items name the settings to lower; the small ones are noise.
        let shown: Vec<String> = self
            .items
            .iter()
            .take_while(|i| i.bytes.saturating_mul(100) >= self.total)
            .map(|i| format!("{} = {}", i.what, Bytes(i.bytes)))
            .collect();
        write!(f, "{}", shown.join("; "))
    }
}

/// A byte count in bytes, displayed the way people read them: `512 bytes`,
/// `512 KiB`, `25.5 GiB` (units of 1024, one decimal unless whole).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
        let mut unit = 0;
        let mut v = self.0 as f64;
        while v >= 1024.0 && unit + 1 < UNITS.len() {
            v /= 1024.0;
            unit += 1;
        }
        match unit {
            0 => write!(f, "{} bytes", self.0),
            _ if v.fract() == 0.0 => write!(f, "{v:.0} {}", UNITS[unit]),
            _ => write!(f, "{v:.1} {}", UNITS[unit]),
        }
    }
}

fn physical_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| meminfo_field(&t, "MemTotal:")).unwrap_or(u64::MAX)
}

/// A `kB` field of /proc/meminfo, in bytes.
fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// The room under the memory limit of this process's cgroup and of each of its
/// ancestors that has one, read under `root` (the cgroup mounts). `cgroup` is
/// /proc/self/cgroup: `0::/path` for v2, `N:memory:/path` (among others) for v1.
fn cgroup_rooms(cgroup: &str, root: &Path) -> Vec<Available> {
    let mut out = Vec::new();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let v1 = controllers.split(',').any(|c| c == "memory");
        let (mount, files) = match (controllers.is_empty(), v1) {
            // v2: a unified hierarchy at the root, or beside v1 at unified/.
            (true, _) => {
                let base = if root.join("cgroup.controllers").exists() { root.to_path_buf() } else { root.join("unified") };
                (base, V2)
            }
            (false, true) => (root.join("memory"), V1),
            _ => continue,
        };
        let mut dir: PathBuf = mount.join(path.trim_start_matches('/'));
        while dir.starts_with(&mount) {
            if let Some(room) = room_in(&dir, files) {
                out.push(Available::new(room, format!("the memory limit of cgroup {}", dir.display())));
            }
            if !dir.pop() {
                break;
            }
        }
    }
    out
}

/// The files a cgroup version keeps its limit, usage and page cache in.
#[derive(Copy, Clone)]
struct CgroupFiles {
    limit: &'static str,
    usage: &'static str,
    inactive_file: &'static str,
}

const V1: CgroupFiles =
    CgroupFiles { limit: "memory.limit_in_bytes", usage: "memory.usage_in_bytes", inactive_file: "total_inactive_file" };
const V2: CgroupFiles = CgroupFiles { limit: "memory.max", usage: "memory.current", inactive_file: "inactive_file" };

/// Above this a v1 limit means "none" (the kernel writes PAGE_COUNTER_MAX pages).
const V1_NO_LIMIT: u64 = 1 << 62;

fn room_in(dir: &Path, files: CgroupFiles) -> Option<u64> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let limit: u64 = read(files.limit)?.trim().parse().ok()?;
    if limit >= V1_NO_LIMIT {
        return None;
    }
    let usage: u64 = read(files.usage).and_then(|t| t.trim().parse().ok()).unwrap_or(0);
    let cache: u64 = read("memory.stat")
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix(files.inactive_file)?.strip_prefix(' ')?.trim().parse().ok()))
        .unwrap_or(0);
    Some(limit.saturating_sub(usage.saturating_sub(cache)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_within_the_share_passes_and_one_beyond_it_names_its_largest_items() {
        let avail = Available::new(10 << 30, "a test");
        let mut plan = Plan::new();
        plan.add("pools (pool 256,128)", 4 << 30);
        plan.add("rings (blocks 64)", 4 << 30);
        assert_eq!(plan.check_against(&avail), Ok(()));
        plan.add("tiny", 1 << 10);
        plan.add("locality index (locality 32000)", 1 << 30);
        let err = plan.check_against(&avail).unwrap_err();
        assert_eq!(err.total, (9 << 30) + 1024);
        assert_eq!(err.allowed, 8 << 30);
        let text = err.to_string();
        assert!(text.contains("needs 9.0 GiB"), "{text}");
        assert!(text.contains("80% of the 10 GiB available, from a test"), "{text}");
        assert!(text.find("pools").unwrap() < text.find("locality").unwrap(), "largest first: {text}");
        assert!(!text.contains("tiny"), "{text}");
    }

    #[test]
    fn sums_saturate_instead_of_wrapping_past_the_check() {
        let mut plan = Plan::new();
        plan.add("a", u64::MAX);
        plan.add("b", u64::MAX);
        assert_eq!(plan.total(), u64::MAX);
        assert!(plan.check_against(&Available::new(u64::MAX, "all")).is_err());
        let mut b = Budget::new(1);
        b.per_queue("huge", u64::MAX / 2);
        assert_eq!(b.plan(4, Plan::new()).total(), u64::MAX);
    }

    #[test]
    fn a_budget_multiplies_per_queue_items_and_keeps_the_source_items() {
        let mut b = Budget::new(32768);
        b.per_queue("pool 256,128", 100);
        let mut source = Plan::new();
        source.add("ring", 7);
        let plan = b.plan(3, source);
        assert_eq!(plan.total(), 307);
        assert_eq!(plan.items[0].what, "pool 256,128, x 3 queues");
    }

    #[test]
    fn reads_meminfo_and_formats_bytes() {
        let t = "MemTotal:       24576000 kB\nMemFree:  1 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(meminfo_field(t, "MemAvailable:"), Some(2048 * 1024));
        assert_eq!(meminfo_field(t, "Nope:"), None);
        assert_eq!(Bytes(512).to_string(), "512 bytes");
        assert_eq!(Bytes(512 << 10).to_string(), "512 KiB");
        assert_eq!(Bytes(25 << 30 | 1 << 29).to_string(), "25.5 GiB");
        let a = Available::read();
        assert!(a.bytes > 0 && !a.from.is_empty(), "{a:?}");
    }

    /// A cgroup tree written out as the kernel shows it: the tighter of a
    /// limited cgroup and its limited parent is found, page cache counts as room.
    #[test]
    fn finds_the_room_under_cgroup_limits_of_both_versions() {
        let root = tempfile::tempdir().unwrap();
        let w = |p: &str, f: &str, v: &str| {
            let d = root.path().join(p);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(f), v).unwrap();
        };
        w("memory/a", "memory.limit_in_bytes", "1073741824\n");
        w("memory/a", "memory.usage_in_bytes", "536870912\n");
        w("memory/a", "memory.stat", "cache 1\ntotal_inactive_file 268435456\n");
        w("memory/a/b", "memory.limit_in_bytes", "9223372036854771712\n");
        w("memory/a/b", "memory.usage_in_bytes", "1\n");
        let rooms = cgroup_rooms("4:memory:/a/b\n3:cpu:/\n", root.path());
        assert_eq!(rooms.len(), 1, "{rooms:?}");
        assert_eq!(rooms[0].bytes, (1 << 30) - (1 << 29) + (1 << 28));
        assert!(rooms[0].from.ends_with("/memory/a"), "{rooms:?}");

        w("unified/s", "memory.max", "max\n");
        w("unified/s/t", "memory.max", "2147483648\n");
        w("unified/s/t", "memory.current", "1073741824\n");
        w("unified/s/t", "memory.stat", "anon 5\ninactive_file 0\n");
        let rooms = cgroup_rooms("0::/s/t\n", root.path());
        assert_eq!(rooms.iter().map(|r| r.bytes).collect::<Vec<_>>(), [1 << 30]);
    }
}
