"""Flow statistics live on the veth test bed (issue 20, part 1 as Scap measured
it): `weir streams --cutoff 0` against libnids, loss and CPU per packet
against the packet rate.

Scap's flow-statistics figures come from live traffic: its kernel module
drops every byte past the cutoff before it is copied, so with cutoff 0 the
application sees headers only, while libnids gets every packet through
libpcap. weir does the same with its kernel cutoff (an eBPF socket filter on
afpacket, the XDP program on afxdp, over one flow map): this benchmark
measures that path, next to the same weir with the kernel cutoff off, and
libnids (bench/peers/nids_streams.c `stats live:IFACE`, libpcap's ring of
128 MiB, as weir's two rings of 64 MiB).

Runs itself inside scripts/testbed (two namespaces, a 2-queue veth pair). The
traffic is bench/streams.py's trace (`weir synth --packets 2000000 --flows
100000 --seed 1`: complete TCP connections and UDP flows, 198.18.0.0/15 only),
sent by `weir replay --pps RATE` from the sending namespace on CPU 0 (about
470 kpps at top speed here, tcpreplay about 350). A step sends the trace's
first RATE x STEP_S packets (the whole trace at 400 kpps), so every step
holds tens of thousands of concurrent connections.

Each tool runs on CPU 1 in a cgroup limited to `--quota PCT` of it (default
10%) once started, as bench/live.py's second pass does, so that the loss-free
rate is the tool's and not the generator's. What the kernel does for a tool
(receiving, the cutoff's drops, in softirq) is outside the quota for every
tool alike.

A step's loss is the packets sent minus the packets the tool accounted for:
libnids' frames read; weir's packets that reached its stream layer plus those
its kernel cutoff counted and dropped (each is in a flow record). Per step,
the median of RUNS runs of: loss and the tool's CPU per packet sent (all
threads, schedstat). The loss-free rate is the highest step with no loss.

    python3 bench/streams_live.py [--runs N] [--quota PCT] [--rates KPPS,...] [TOOL...]
    (tools: libnids, weir-afpacket-cutoff-on, weir-afpacket-cutoff-off, weir-afxdp-cutoff-on)

Results go to bench/results/streams-live.json and a plot of loss and CPU
against the rate to bench/results/streams-live.png (with Debian's
python3-matplotlib, under /usr/bin/python3).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import live  # noqa: E402
from common import RESULTS, ROOT, WEIR, WORK, build_peer, log, machine, warm, write_result  # noqa: E402

ENV = os.environ
RUNS = 3
STEP_S = 5.0
RATES_KPPS = [25, 50, 100, 200, 300, 400]
LOSSY_STEPS_TO_STOP = 2
DEFAULT_QUOTA = 10.0
TRACE = WORK / "streams-synth-2000000-100000.pcap"
TRACE_PACKETS = 2_000_000
STATS = Path(tempfile.gettempdir()) / "weir-bench-streams-live.json"


def weir_counts(out, err):
    """(packets accounted for, dropped by weir) from weir's --stats file."""
    s = json.loads(STATS.read_text())
    k = s.get("kernel_cutoff") or {}
    return s["packets"] + k.get("packets", 0), 0


def nids_counts(out, err):
    v = json.loads(out.strip().splitlines()[-1])
    return v["packets"], v["kernel_dropped"]


def tools(nids):
    rx = ENV["TB_RX_IF"]
    t = {"libnids": lambda: live.Tool("libnids", [str(nids), "stats", f"live:{rx}", "-n", "266682"], nids_counts)}
    for src, cuts in (("afpacket", ("on", "off")), ("afxdp", ("on",))):
        for cut in cuts:
            name = f"weir-{src}-cutoff-{cut}"
            # --prealloc: the connections libnids' pool holds (3/4 of its -n), which it
            # makes and links at start, before any traffic; weir then makes its own
            # before the first packet too.
            argv = [str(WEIR), "streams", "--cutoff", "0", f"{src}:{rx}@0-1", "--take-host-traffic", "--kernel-cutoff", cut, "--prealloc", "200000",
                    "--stats", str(STATS)]
            t[name] = lambda n=name, a=argv: live.Tool(n, a, weir_counts)
    return t


def send(kpps):
    """Replay the trace's first kpps x STEP_S packets at kpps; the packets sent."""
    n = min(int(kpps * 1000 * STEP_S), TRACE_PACKETS)
    argv = ["taskset", "-c", "0"] + live.ns("TX") + [str(WEIR), "replay", "--interface", ENV["TB_TX_IF"], "--pps", str(kpps * 1000),
                                                      "-c", str(n), str(TRACE)]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"weir replay failed: {p.stderr.strip()[-400:]}")
    line = next(l for l in (p.stdout + p.stderr).splitlines() if l.strip().startswith("sent"))
    return int(line.split()[1])


def step(factory, kpps):
    tool = factory()
    STATS.unlink(missing_ok=True)
    tool.start()
    c0 = sum(live.cpu_seconds(p) for p in tool.pids())
    sent = send(kpps)
    # Time for the last blocks of a libpcap ring to be handed over.
    subprocess.run(["sleep", "1"])
    c1 = sum(live.cpu_seconds(p) for p in tool.pids())
    got, dropped, _ = tool.stop()
    if got is None:
        return {"sent": sent, "seen": 0, "lost": sent, "tool_dropped": None, "cpu_ns_per_packet": (c1 - c0) / sent * 1e9}
    return {"sent": sent, "seen": got, "lost": max(sent - got, 0), "tool_dropped": dropped, "cpu_ns_per_packet": (c1 - c0) / sent * 1e9}


def ladder(name, factory, runs):
    steps, lossy = [], 0
    for kpps in RATES_KPPS:
        if lossy >= LOSSY_STEPS_TO_STOP:
            break
        rs = [step(factory, kpps) for _ in range(runs)]
        med = {k: statistics.median(r[k] for r in rs) for k in ("sent", "seen", "lost", "cpu_ns_per_packet")}
        steps.append({"kpps": kpps, **{f"median_{k}": v for k, v in med.items()}, "runs": rs})
        lossy = lossy + 1 if med["lost"] else 0
        log(f"  {name:26} {kpps:4} kpps: lost {med['lost']:.0f} of {med['sent']:.0f}, cpu {med['cpu_ns_per_packet']:.0f} ns/pkt")
    return {"loss_free_kpps": max((s["kpps"] for s in steps if s["median_lost"] == 0), default=0), "steps": steps}


def against(result, name, peer="libnids"):
    """Loss-free rate as mine / libnids', and CPU per packet as libnids' / mine at
    the highest rate both held without loss."""
    mine, theirs = result[name], result.get(peer)
    if not theirs:
        return None
    cpu = lambda r: {s["kpps"]: s["median_cpu_ns_per_packet"] for s in r["steps"] if s["median_lost"] == 0}
    common = sorted(set(cpu(mine)) & set(cpu(theirs)))
    out = {"loss_free_ratio": mine["loss_free_kpps"] / max(theirs["loss_free_kpps"], 1),
           "loss_free_kpps": mine["loss_free_kpps"], "peer_loss_free_kpps": theirs["loss_free_kpps"]}
    if common:
        k = common[-1]
        out.update({"cpu_at_kpps": k, "peer_cpu_over_mine": cpu(theirs)[k] / max(cpu(mine)[k], 1e-9)})
    return out


PLOT = r"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
r = json.load(open(sys.argv[1]))
fig, ax = plt.subplots(1, 2, figsize=(11, 4.5))
for name, v in r["ladder"].items():
    k = [s["kpps"] for s in v["steps"]]
    ax[0].plot(k, [100 * s["median_lost"] / max(s["median_sent"], 1) for s in v["steps"]], marker="o", label=name)
    ax[1].plot(k, [s["median_cpu_ns_per_packet"] for s in v["steps"]], marker="o", label=name)
for a, t in zip(ax, ["packets lost (%)", "tool CPU (ns per packet sent)"]):
    a.set_xlabel("rate (kpps)"); a.set_title(t); a.grid(alpha=0.3)
ax[0].legend(fontsize=8)
fig.suptitle(f"flow statistics (cutoff 0), weir streams against libnids, {r['quota_pct']:g}% of one CPU (medians)")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
"""


def inner(which, runs, quota):
    nids = build_peer("nids_streams", "nids_streams.c", libs=("-lnids", "-lpcap"))
    warm(TRACE)
    t = tools(nids)
    which = [w for w in which if w in t] or list(t)
    result = {"machine": machine(), "queues": 2, "runs_per_step": runs, "quota_pct": quota, "step_s": STEP_S,
              "trace": str(TRACE.relative_to(ROOT)), "ladder": {}}
    live.set_quota(quota)
    for name in which:
        warm(TRACE)
        result["ladder"][name] = ladder(name, t[name], runs)
        write_result("streams-live", result)
    live.set_quota(None)
    result["against_libnids"] = {n: against(result["ladder"], n) for n in result["ladder"] if n.startswith("weir")}
    out = write_result("streams-live", result)
    py = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    p = subprocess.run([py, "-c", PLOT, str(out), str(RESULTS / "streams-live.png")], capture_output=True, text=True)
    log("plot: " + (str(RESULTS / "streams-live.png") if p.returncode == 0 else f"not drawn: {p.stderr.strip()[-300:]}"))
    for n, v in result["against_libnids"].items():
        log(f"{n:26} loss-free {result['ladder'][n]['loss_free_kpps']} kpps; against libnids: {v}")


def main():
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        sys.exit(__doc__)
    runs, quota, rates = RUNS, DEFAULT_QUOTA, None
    while args[:1] in (["--runs"], ["--quota"], ["--rates"]):
        if args[0] == "--runs":
            runs = int(args[1])
        elif args[0] == "--quota":
            quota = float(args[1])
        else:
            rates = args[1]
            RATES_KPPS[:] = [int(x) for x in rates.split(",")]
        args = args[2:]
    if args[:1] == ["--inner"]:
        return inner(args[1:], runs, quota)
    if os.geteuid() != 0:
        sys.exit("bench/streams_live.py needs root (it builds network namespaces)")
    if not WEIR.exists():
        sys.exit(f"streams_live: {WEIR} is missing: build it (make build)")
    if not TRACE.exists():
        sys.exit(f"streams_live: {TRACE} is missing: run bench/streams.py once (it synthesizes it), or "
                 f"{WEIR} synth -o {TRACE} --packets 2000000 --flows 100000 --seed 1")
    argv = [sys.executable, __file__, "--runs", str(runs), "--quota", str(quota), *(["--rates", rates] if rates else []), "--inner", *args]
    return subprocess.run([str(ROOT / "scripts" / "testbed"), "--queues", "2", "--", *argv]).returncode


if __name__ == "__main__":
    sys.exit(main())
