"""Helpers shared by weir's benchmarks: run commands, time them, take medians.

Every figure is a median of several runs, and every speed claim is a ratio
against a peer measured in the same run on the same input. Absolute numbers on
the shared 2-core machines are context only.
"""
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / "work"
RESULTS = ROOT / "bench" / "results"
# Where cargo put the release build: CARGO_TARGET_DIR when set, as cargo itself reads it.
WEIR = (ROOT / os.environ.get("CARGO_TARGET_DIR", "target")) / "release" / "weir"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    p = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def build_peer(name, src, libs=("-lpcap",)):
    """Compile a C peer from bench/peers into bench/work."""
    WORK.mkdir(parents=True, exist_ok=True)
    out = WORK / name
    src = ROOT / "bench" / "peers" / src
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        sh(["cc", "-O2", "-Wall", "-o", str(out), str(src), *libs])
    return out


def timed(cmd):
    """Run `cmd`; return (wall seconds, CPU seconds of the child, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, text=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({p.returncode}): {p.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.stdout


def warm(path, fresh=False):
    """Pull a file into the page cache. `fresh` drops it from the cache first
    and reads it back in order: the state of a trace just written or read for
    the first time (the kernel's read-ahead puts it in large folios, up to 2 MiB
    each), rather than whatever the cache's reclaim has left of it since."""
    with open(path, "rb") as f:
        if fresh:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while f.read(1 << 24):
            pass


def median(xs):
    return statistics.median(xs)


def write_result(name, data):
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps(data, indent=2) + "\n")
    log(f"wrote {out.relative_to(ROOT)}")
    return out


def machine():
    return {
        "cores": os.cpu_count(),
        "kernel": os.uname().release,
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
        "libpcap": sh(["dpkg-query", "-W", "-f=${Version}", "libpcap0.8"]).stdout if shutil.which("dpkg-query") else "?",
    }


def mem_available():
    """MemAvailable from /proc/meminfo, in bytes."""
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def disk_free(path):
    """Bytes free to an unprivileged writer on the file system holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def gib(n):
    return f"{n / (1 << 30):.1f} GiB"
