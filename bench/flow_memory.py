"""Memory per tracked connection in flows mode (issue 44): the resident set
of `weir flows` while it holds N connections open at once.

bench/peers/gen_concurrent.c writes N TCP connections (handshakes, one
64-byte segment each way, then the FIN exchanges; every connection stays in
the table until the end of input, as flows mode keeps a record open past its
FIN) into a pipe, and the pipe is then held open: weir has read every packet
and waits for more, holding all N connections. Its VmRSS is read from
/proc then, so the figure is the table's steady state, not the close of a
million records at the end of input. Bytes a direction =
(RSS(N) - RSS(1,000)) / 2N: above the pool, the trace reader and the
exporter, which do not grow with N.

Each N is checked against MemAvailable first (about 700 bytes a connection
and a 2 GiB margin, so the old layout would fit too); an N that does not fit
is skipped and said. Results: bench/results/flow_memory.json.

usage: bench/flow_memory.py [--sizes 1000,1000000,10000000] [--weir PATH]
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import WEIR, build_peer, gib, log, machine, mem_available, write_result  # noqa: E402

BASE = 1000
BYTES_PER_CONNECTION_BOUND = 700
MARGIN = 2 << 30


def rss_holding(weir, gen, n):
    """VmRSS in bytes of `weir flows` once it has read N connections and
    waits on the open pipe, and the records it then exported."""
    g = subprocess.Popen([str(gen), "-n", str(n), "-s", "1", "-p", "64", "-o", "-"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    w = subprocess.Popen([str(weir), "flows", "-", "-w", "/dev/null", "-q", "--max-flows", str(n)],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # The generator's output is copied into weir's stdin here, so the pipe
    # into weir stays open after the generator ends.
    while True:
        block = g.stdout.read(1 << 20)
        if not block:
            break
        w.stdin.write(block)
    w.stdin.flush()
    g.wait()
    # What is still in the pipe is at most its buffer: a few ms of reading.
    time.sleep(2)
    rss = None
    for line in open(f"/proc/{w.pid}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    w.stdin.close()
    err = w.stderr.read().decode()
    if w.wait() != 0:
        raise RuntimeError(f"weir flows failed on {n} connections: {err.strip()}")
    return rss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--weir", default=str(WEIR))
    args = ap.parse_args()
    weir = Path(args.weir)
    if not weir.exists():
        sys.exit(f"bench/flow_memory.py: {weir} is missing: build it (make build, or set CARGO_TARGET_DIR)")
    gen = build_peer("gen_concurrent", "gen_concurrent.c", libs=())
    base = rss_holding(weir, gen, BASE)
    log(f"{BASE} connections: RSS {base / 1e6:.1f} MB (the base)")
    sizes = {}
    for n in [int(x) for x in args.sizes.split(",")]:
        need, avail = n * BYTES_PER_CONNECTION_BOUND, mem_available()
        if avail < need + MARGIN:
            log(f"{n} connections: skipped, needs about {gib(need)} and MemAvailable is {gib(avail)} (margin {gib(MARGIN)})")
            sizes[n] = {"skipped": f"needs about {need} bytes, MemAvailable {avail}"}
            continue
        rss = rss_holding(weir, gen, n)
        per = (rss - base) / (2 * n)
        sizes[n] = {"rss_bytes": rss, "bytes_per_direction": per}
        log(f"{n} connections: RSS {rss / 1e6:.1f} MB, {per:.1f} bytes a direction above the base")
    write_result("flow_memory", {"machine": machine(), "weir": str(weir), "base_connections": BASE, "base_rss_bytes": base,
                                 "sizes": sizes})


if __name__ == "__main__":
    main()
