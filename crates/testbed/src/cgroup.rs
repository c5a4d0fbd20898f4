//! A memory cgroup of the test's own, with a limit, for running one command
//! inside it: how a test shows that weir reads the limit it runs under and
//! keeps within it. Removed again on drop. Cgroup v1's memory hierarchy and a
//! v2 hierarchy with the memory controller both serve; elsewhere (no root, no
//! memory controller) [`MemoryCgroup::new`] fails the calling test and says why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    /// A new cgroup limited to `limit` bytes; fails the calling test, saying why,
    /// where there is none to make (it needs root and a memory controller).
    pub fn new(limit: u64) -> MemoryCgroup {
        crate::require_root();
        let name = format!("weir-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let v2 = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .into_iter()
            .map(Path::new)
            .find(|p| std::fs::read_to_string(p.join("cgroup.subtree_control")).is_ok_and(|c| c.split_whitespace().any(|w| w == "memory")));
        let (dir, file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), "memory.limit_in_bytes")
        } else if let Some(root) = v2 {
            (root.join(&name), "memory.max")
        } else {
            panic!("no cgroup memory controller to limit a command with (cgroup v1's memory hierarchy, or v2 with memory enabled)");
        };
        if let Err(e) = std::fs::create_dir(&dir) {
            panic!("cannot make the cgroup {}: {e}", dir.display());
        }
        let group = MemoryCgroup { dir };
        if let Err(e) = std::fs::write(group.dir.join(file), limit.to_string()) {
            panic!("cannot limit the cgroup {}: {e}", group.dir.display());
        }
        group
    }

    /// `program args...` run inside the cgroup (a shell moves itself in, then execs it).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("sh");
        let procs = self.dir.join("cgroup.procs");
        c.arg("-c").arg(format!("echo $$ > '{}' && exec \"$0\" \"$@\"", procs.display())).arg(program);
        c
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Its one process has exited by now; an empty cgroup is removed with rmdir.
        let _ = std::fs::remove_dir(&self.dir);
    }
}
