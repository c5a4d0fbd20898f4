"""Flow export (issue 21), offline: `weir flows` against softflowd, nfpcapd and
the libnids flow-statistics program, on one synthesized trace, in one run.

The trace is stream benchmark's (`weir synth --packets 2000000 --flows 100000
--seed 1`: about 98,000 flows open at the peak, 154,000 connections in all).
Every configuration runs once per round, RUNS rounds, each round starting one
configuration later; a figure is the median of its runs. The trace is read
before every run so that it sits in the page cache (here it is reclaimed
within minutes). Times are whole processes
(start-up included), CPU time is the kernel's accounting of the finished child
(user + system, all threads), as bench/streams.py measures them (its runner is
used here).

The configurations:
- `weir-1q`, `weir-2q`: `weir flows TRACE[@0-1] -q -n SINK --export-rate 0`
  (IPFIX, unpaced as the peers send).
- `softflowd`: `softflowd -r TRACE -v 10 -n SINK -m 262144`, its flow table
  raised to hold every flow of the trace, as weir's (1,000,000) does: the
  same work. This is the peer of the target (3 times softflowd's rate).
- `softflowd-8192`: the same with softflowd's default table of 8,192 flows,
  for reference: past it softflowd exports its oldest flows early (the
  trace's flows then last 0.02 s on average instead of 5.9 s), so it does
  less work per flow and its records are split.
- `nfpcapd`: `nfpcapd -r TRACE -w DIR` (nfdump's exporter, writing its own
  files; its defaults are weir's timeouts).
- `libnids`: `nids_streams stats TRACE` (bench/peers/nids_streams.c), libnids
  following every TCP connection without its data: the flow statistics of
  bench/streams.py's part 1, for scale (TCP only, no records).

SINK is a UDP socket of this script's that counts the IPFIX records it
receives (from the templates, so every tool's record count is checked); nfpcapd's
records are counted with nfdump afterwards. Results go to
bench/results/flows.json and a table is printed.

WEIR_BIN picks the weir binary, NIDS_STREAMS a prebuilt libnids peer.
"""
import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import streams  # noqa: E402
from common import WORK, log, machine, median, write_result  # noqa: E402

WEIR = streams.WEIR
SOFTFLOWD_TABLE = 262_144


class IpfixSink:
    """A UDP socket on 127.0.0.1 that counts the IPFIX data records sent to it.

    Data sets are counted with the lengths their templates give (variable-length
    fields are not used by the tools measured: a template with one is refused)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # SO_RCVBUF is capped at net.core.rmem_max (208 KiB by default), which
        # an unpaced burst of records overruns; as root SO_RCVBUFFORCE is not.
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 32 << 20)
        except PermissionError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
        got = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        if got < 32 << 20:
            log(f"the sink's socket buffer is {got} bytes (not root): records sent unpaced may be lost, and are counted")
        self.sock.bind(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.lock = threading.Lock()
        self.reset()
        threading.Thread(target=self._serve, daemon=True).start()

    def reset(self):
        with getattr(self, "lock", threading.Lock()):
            self.messages, self.records, self.option_records, self.bad = 0, 0, 0, []
            self.templates = {}

    def _serve(self):
        while True:
            data = self.sock.recv(65535)
            with self.lock:
                self._message(data)

    def _message(self, m):
        if len(m) < 16 or struct.unpack_from("!H", m)[0] != 10:
            self.bad.append(f"not an IPFIX message ({len(m)} bytes)")
            return
        self.messages += 1
        domain = struct.unpack_from("!I", m, 12)[0]
        off = 16
        while off + 4 <= len(m):
            set_id, set_len = struct.unpack_from("!HH", m, off)
            if set_len < 4 or off + set_len > len(m):
                self.bad.append(f"set of length {set_len} at {off}")
                return
            body, end = off + 4, off + set_len
            if set_id in (2, 3):
                self._templates(m, body, end, domain, options=set_id == 3)
            elif set_id >= 256:
                size, options = self.templates.get((domain, set_id), (None, False))
                if size is None:
                    self.bad.append(f"data set {set_id} before its template")
                elif size and options:
                    self.option_records += (end - body) // size
                elif size:
                    self.records += (end - body) // size
            off = end

    def _templates(self, m, off, end, domain, options):
        """A template set (2) or an options template set (3, whose records are
        counted apart: they describe the exporter, not flows)."""
        while off + (6 if options else 4) <= end:
            tid, count = struct.unpack_from("!HH", m, off)
            off += 6 if options else 4
            size = 0
            for _ in range(count):
                ie, length = struct.unpack_from("!HH", m, off)
                off += 8 if ie & 0x8000 else 4
                if length == 0xFFFF:
                    self.bad.append(f"template {tid} has a variable-length field")
                size += length
            self.templates[(domain, tid)] = (size, options)

    def take(self, settle=False):
        """The counts so far, and a fresh start. With `settle`, first wait until
        nothing has arrived for 0.2 s (the last datagrams of a tool that just
        exited may still be in the socket's buffer)."""
        while settle:
            before = self.messages
            time.sleep(0.2)
            settle = self.messages != before
        with self.lock:
            out = {"messages": self.messages, "records": self.records, "problems": self.bad[:5]}
        self.reset()
        return out


def nfdump_records(directory):
    """Flow records nfpcapd wrote, as nfdump counts them."""
    p = subprocess.run(["nfdump", "-R", str(directory), "-q", "-o", "csv"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"nfdump -R {directory}: {p.stderr.strip()}")
    return sum(1 for line in p.stdout.splitlines() if line and line[0].isdigit())


def configs(trace, sink, nids, nfdir):
    c = {}
    for name, src in (("weir-1q", str(trace)), ("weir-2q", f"{trace}@0-1")):
        # Unpaced, as every peer sends: weir's default pacing (--export-rate,
        # 10,000 datagrams/s, for collectors with a default socket buffer)
        # would make this a measure of the pacing. The sink's 32 MiB buffer
        # takes the burst, and its record count checks it did.
        c[name] = [str(WEIR), "flows", src, "-q", "-n", sink.addr, "--export-rate", "0"]
    if shutil.which("softflowd"):
        base = ["softflowd", "-r", str(trace), "-v", "10", "-n", sink.addr]
        c["softflowd"] = base + ["-m", str(SOFTFLOWD_TABLE)]
        c["softflowd-8192"] = base
    if shutil.which("nfpcapd") and shutil.which("nfdump"):
        c["nfpcapd"] = ["nfpcapd", "-r", str(trace), "-w", str(nfdir)]
    if nids:
        c["libnids"] = [str(nids), "stats", str(trace), "-n", str(streams.nids_table(2 * streams.SYNTH_FLOWS))]
    return c


def measure(cmds, n_rounds, sink, nfdir):
    """Every command once per round, rotating the order; each run with the
    records its tool exported."""
    names = list(cmds)
    out = {n: [] for n in names}
    for r in range(n_rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            if name == "nfpcapd":
                shutil.rmtree(nfdir, ignore_errors=True)
                nfdir.mkdir(parents=True)
            # The page cache here is reclaimed within minutes: warm the trace
            # before every run, not once.
            streams.warm(cmds["weir-1q"][2])
            sink.take()
            res = streams.run(cmds[name])
            got = sink.take(settle=True)
            if name == "nfpcapd":
                got = {"records": nfdump_records(nfdir), "problems": []}
            elif name == "libnids":
                got = {"records": res["report"].get("streams"), "problems": []}
            if got["problems"]:
                raise RuntimeError(f"{name}: {got['problems']}")
            res["records"] = got["records"]
            if name.startswith("weir"):
                res["stderr"] = (WORK / "streams-run.err").read_text().strip().splitlines()[-2:]
            out[name].append(res)
            log(f"flows round {r + 1}/{n_rounds} {name:16} {res['wall_s']:7.3f} s  cpu {res['cpu_s']:7.3f} s  "
                f"rss {res['maxrss_bytes'] / 2**20:7.1f} MiB  records {res['records']}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small trace and one run, to check the script")
    ap.add_argument("--runs", type=int, help="rounds (default 5, 1 with --quick)")
    args = ap.parse_args()
    os.nice(10)
    n_rounds = args.runs or (1 if args.quick else 5)
    if not WEIR.exists():
        sys.exit(f"flows: {WEIR} is missing: build it (make build, or set WEIR_BIN)")
    WORK.mkdir(parents=True, exist_ok=True)
    problems = []
    try:
        nids = streams.nids_peer()
    except streams.Missing as e:
        nids, _ = None, problems.append(f"libnids side missing: {e}")
    for tool in ("softflowd", "nfpcapd", "nfdump"):
        if not shutil.which(tool):
            problems.append(f"{tool} is missing (scripts/setup installs it)")
    trace, packets, flows = streams.synth_trace(args.quick)
    why = streams.check_memory(streams.WEIR_FIXED * 2 + flows * 2 * streams.WEIR_PER_STREAM, "weir flows")
    if why:
        sys.exit(f"flows: {why}")
    sink = IpfixSink()
    nfdir = WORK / "flows-nfpcapd"
    cmds = configs(trace, sink, nids, nfdir)
    streams.warm(trace)
    raw = measure(cmds, n_rounds, sink, nfdir)
    shutil.rmtree(nfdir, ignore_errors=True)
    summary = {}
    for name, rs in raw.items():
        wall, cpu = median([r["wall_s"] for r in rs]), median([r["cpu_s"] for r in rs])
        summary[name] = {"median_wall_s": wall, "pps": packets / wall, "cpu_ns_per_packet": cpu / packets * 1e9,
                         "peak_rss_bytes": median([r["maxrss_bytes"] for r in rs]), "records": rs[-1]["records"]}
        if "stderr" in rs[-1]:
            summary[name]["report"] = rs[-1]["stderr"]
    for peer in ("softflowd", "softflowd-8192", "nfpcapd", "libnids"):
        if peer in summary:
            for s in summary.values():
                s[f"x_{peer}"] = s["pps"] / summary[peer]["pps"]
    result = {"machine": machine(), "runs": n_rounds, "quick": args.quick, "weir": str(WEIR), "problems": problems,
              "trace": {"packets": packets, "flows": flows, "seed": 1, "bytes": trace.stat().st_size},
              "commands": cmds, "summary": summary,
              "raw": {k: [{x: r[x] for x in ("wall_s", "cpu_s", "maxrss_bytes", "records")} for r in rs]
                      for k, rs in raw.items()}}
    write_result("flows-quick" if args.quick else "flows", result)
    print(f"\nflow export, {packets} packets, {flows} flows (medians of {n_rounds})")
    print(f"{'config':16} {'Mpps':>6} {'CPU ns/pkt':>10} {'RSS MiB':>8} {'records':>8} {'x softflowd':>11} "
          f"{'x sfd-8192':>10} {'x nfpcapd':>9} {'x libnids':>9}")
    for name, s in summary.items():
        ratios = " ".join(f"{s.get(f'x_{p}', float('nan')):{w}.2f}"
                          for p, w in (("softflowd", 11), ("softflowd-8192", 10), ("nfpcapd", 9), ("libnids", 9)))
        print(f"{name:16} {s['pps'] / 1e6:6.2f} {s['cpu_ns_per_packet']:10.1f} {s['peak_rss_bytes'] / 2**20:8.1f} "
              f"{str(s['records']):>8} {ratios}")
    for p in problems:
        print(f"flows: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
