"""The Python package against the Python tools analysts use, on one
synthesized trace of 1,000,000 packets (`weir synth --packets 1000000 --flows
100000 --seed 1`), in one run:

1. Flows to a pandas DataFrame: `weir.flows(TRACE).to_pandas()` (one queue,
   and two: `queues=2`) against nfstream 6.6.0's
   `NFStreamer(source=TRACE, statistical_analysis=False).to_pandas()` and the
   same with `statistical_analysis=True` (its other settings at their
   defaults, nDPI included). Target: weir at least 10 times nfstream.
2. Packet iteration with a length sum in Python: `for p in
   weir.packets(TRACE): total += len(p)` against dpkt (`for ts, buf in
   dpkt.pcap.Reader(f): total += len(buf)`) and scapy (`for p in
   PcapReader(TRACE): total += len(p)`). Every loop sums the captured
   lengths, and the sums must agree. scapy takes tens of microseconds a
   packet: it runs on the trace's first SCAPY_PACKETS packets and its time is
   scaled to the whole trace (said in the results). Target: weir at least 10
   times dpkt.

Every measurement runs in a fresh process of the benchmark's own virtual
environment (bench/work/python-venv: nfstream, dpkt, scapy, pandas from PyPI,
and weir built from this checkout with pip; made on first use, about two
minutes), which times only the work: after `import`, before exit. The trace
is read once before every run, so that it is in the page cache. Each part's
configurations run once per round, each round starting one configuration
later: the flows part FLOW_ROUNDS rounds (nfstream takes half a minute a run),
the iteration part ITER_ROUNDS (its runs take seconds); a figure is the median
of its runs, a ratio the ratio of medians. CPU time is the child's (user +
system, all threads and processes, its start and imports included); for the
loops, also the CPU of the loop alone (all threads of the process, weir's
capture thread included), per packet. The load
average before each run is kept with it: these machines are shared, and a
two-thread pipeline (weir's capture thread and the Python thread) suffers
more than a single thread when another job takes a core.

Results: bench/results/python.json and a table. `--rounds N` sets
FLOW_ROUNDS (default 5) and ITER_ROUNDS to three times it; `--quick` runs 2
and 4 rounds without the statistical nfstream.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, WEIR, WORK, disk_free, gib, log, machine, median, mem_available, sh, warm, write_result  # noqa: E402

WEIR_BIN = Path(os.environ.get("WEIR_BIN", WEIR))
VENV = WORK / "python-venv"
TRACE = WORK / "python-1m.pcap"
PACKETS = 1_000_000
SCAPY_PACKETS = 20_000
PEERS = ["nfstream==6.6.0", "dpkt", "scapy", "pandas", "pyarrow"]

# One measurement, run in the venv's Python: prints JSON {seconds, ...}.
CHILD = r"""
import json, sys, time
kind, trace, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
if kind.startswith("weir"):
    import weir
if kind.startswith("weir-flows"):
    import pandas  # noqa: F401  (imported before the clock starts, as nfstream imports it)
if kind.startswith("nfstream"):
    from nfstream import NFStreamer
if kind == "dpkt":
    import dpkt
if kind == "scapy":
    from scapy.utils import PcapReader
out = {}

def weir_flows(queues):
    df = weir.flows(trace, queues=queues).to_pandas()
    return {"rows": len(df), "packets": int(df.bidirectional_packets.sum())}

def nfstream(stats):
    df = NFStreamer(source=trace, statistical_analysis=stats).to_pandas()
    return {"rows": len(df), "packets": int(df.bidirectional_packets.sum())}

# The loops as the issue gives them: a length sum, nothing else per packet.
def weir_packets():
    total = 0
    it = weir.packets(trace)
    for p in it:
        total += len(p)
    return {"total": total, "packets": it.stats().packets}

def dpkt_packets():
    total = 0
    with open(trace, "rb") as f:
        for ts, buf in dpkt.pcap.Reader(f):
            total += len(buf)
    return {"total": total, "packets": None}

def scapy_packets():
    total = n = 0
    for p in PcapReader(trace):
        total += len(p)
        n += 1
        if n == limit:
            break
    return {"total": total, "packets": n}

work = {
    "weir-flows-1q": lambda: weir_flows(None),
    "weir-flows-2q": lambda: weir_flows(2),
    "nfstream": lambda: nfstream(False),
    "nfstream-stats": lambda: nfstream(True),
    "weir-packets": weir_packets,
    "dpkt": dpkt_packets,
    "scapy": scapy_packets,
}[kind]
t, c = time.perf_counter(), time.process_time()
out = work()
out["seconds"] = time.perf_counter() - t
out["work_cpu_s"] = time.process_time() - c
print(json.dumps(out))
"""

FLOWS = ["weir-flows-1q", "weir-flows-2q", "nfstream", "nfstream-stats"]
ITERATION = ["weir-packets", "dpkt", "scapy"]


def venv_python():
    """The benchmark's venv, made (and weir installed into it from this checkout) if missing."""
    py = VENV / "bin" / "python"
    if not py.exists():
        log(f"making {VENV.relative_to(ROOT)}: {', '.join(PEERS)} from PyPI, weir from crates/weir-py")
        sh([sys.executable, "-m", "venv", str(VENV)])
        sh([str(py), "-m", "pip", "install", "--quiet", *PEERS])
    # weir as this checkout builds it now (pip rebuilds only what changed).
    log("installing weir from crates/weir-py into the venv")
    sh([str(py), "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", str(ROOT / "crates" / "weir-py")])
    return py


def versions(py):
    code = (
        "import importlib.metadata as m, json, sys; "
        "print(json.dumps({n: m.version(n) for n in ['weir', 'nfstream', 'dpkt', 'scapy', 'pandas', 'numpy', 'pyarrow']} | {'python': sys.version.split()[0]}))"
    )
    return json.loads(sh([str(py), "-c", code]).stdout)


def make_trace():
    if TRACE.exists():
        return
    if disk_free(WORK) < 2 << 30:
        sys.exit(f"python.py: {gib(disk_free(WORK))} free in {WORK}: the trace takes about 0.5 GiB, nfstream's temporary files more")
    log(f"synthesizing {TRACE.relative_to(ROOT)}")
    sh([str(WEIR_BIN), "synth", "-o", str(TRACE), "--packets", str(PACKETS), "--flows", "100000", "--seed", "1"])


def run(py, kind):
    """One measurement in a fresh process: its JSON, with the child's CPU time."""
    warm(TRACE)
    load = float(open("/proc/loadavg").read().split()[0])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([str(py), "-c", CHILD, kind, str(TRACE), str(SCAPY_PACKETS)], capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{kind} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    r["load"] = load
    return r


def rounds(py, configs, n, runs):
    """`n` rounds of `configs`, each round starting one configuration later."""
    for r in range(n):
        order = configs[r % len(configs) :] + configs[: r % len(configs)]
        for c in order:
            res = run(py, c)
            runs[c].append(res)
            log(f"round {r + 1}/{n} {c}: {res['seconds']:.3f} s (load {res['load']:.2f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 rounds, no statistical nfstream")
    args = ap.parse_args()
    flow_rounds = 2 if args.quick else args.rounds
    iter_rounds = 2 * flow_rounds if args.quick else 3 * flow_rounds
    if not WEIR_BIN.exists():
        sys.exit(f"python.py: no weir binary at {WEIR_BIN}: cargo build --release -p weir-cli, or set WEIR_BIN")
    if mem_available() < 6 << 30:
        sys.exit(f"python.py: {gib(mem_available())} available: nfstream and pandas on 128,000 flows want a few GiB")
    WORK.mkdir(parents=True, exist_ok=True)
    make_trace()
    py = venv_python()
    flows = [c for c in FLOWS if not (args.quick and c == "nfstream-stats")]
    configs = flows + ITERATION
    runs = {c: [] for c in configs}
    rounds(py, ITERATION, iter_rounds, runs)
    rounds(py, flows, flow_rounds, runs)
    # The same work, or the figures mean nothing.
    flows_rows = {c: {(x["rows"], x["packets"]) for x in runs[c]} for c in configs if c in FLOWS}
    sums = {c: {x["total"] for x in runs[c]} for c in ("weir-packets", "dpkt")}
    if len(set().union(*sums.values())) != 1:
        sys.exit(f"python.py: the loops summed different lengths: {sums}")
    packets = runs["weir-packets"][0]["packets"]
    med = {c: median([x["seconds"] for x in runs[c]]) for c in configs}
    scale = packets / SCAPY_PACKETS
    med["scapy"] *= scale
    summary = {
        c: {
            "median_s": med[c],
            "cpu_s": median([x["cpu_s"] for x in runs[c]]) * (scale if c == "scapy" else 1),
            "runs_s": [x["seconds"] for x in runs[c]],
            "load": [x["load"] for x in runs[c]],
        }
        for c in configs
    }
    for c in ITERATION:
        summary[c]["ns_per_packet"] = med[c] / packets * 1e9
        # CPU of the loop alone, every thread of the process (weir's capture thread too).
        summary[c]["cpu_ns_per_packet"] = median([x["work_cpu_s"] / (x["packets"] or packets) for x in runs[c]]) * 1e9
    for c in FLOWS:
        if c in summary:
            summary[c]["rows_packets"] = sorted(flows_rows[c])
    ratios = {
        "flows_1q_vs_nfstream": med["nfstream"] / med["weir-flows-1q"],
        "flows_2q_vs_nfstream": med["nfstream"] / med["weir-flows-2q"],
        "packets_vs_dpkt": med["dpkt"] / med["weir-packets"],
        "packets_vs_scapy": med["scapy"] / med["weir-packets"],
        "packets_cpu_vs_dpkt": summary["dpkt"]["cpu_ns_per_packet"] / summary["weir-packets"]["cpu_ns_per_packet"],
    }
    if "nfstream-stats" in med:
        ratios["flows_1q_vs_nfstream_stats"] = med["nfstream-stats"] / med["weir-flows-1q"]
        ratios["flows_2q_vs_nfstream_stats"] = med["nfstream-stats"] / med["weir-flows-2q"]
    result = {
        "trace": {"path": str(TRACE.relative_to(ROOT)), "packets": packets, "synth": "--packets 1000000 --flows 100000 --seed 1"},
        "rounds": {"flows": flow_rounds, "iteration": iter_rounds},
        "scapy": f"run on the first {SCAPY_PACKETS} packets, time scaled by {scale:g} to the whole trace",
        "versions": versions(py),
        "machine": machine(),
        "configs": summary,
        "ratios": ratios,
        "targets": {"flows_vs_nfstream": 10, "packets_vs_dpkt": 10},
    }
    write_result("python", result)
    print(f"{'configuration':<16} {'median s':>9} {'CPU s':>8} {'ns/packet':>10}")
    for c in configs:
        s = summary[c]
        print(f"{c:<16} {s['median_s']:>9.3f} {s['cpu_s']:>8.3f} {s.get('ns_per_packet', med[c] / packets * 1e9):>10.0f}")
    for k, v in ratios.items():
        print(f"{k}: {v:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
