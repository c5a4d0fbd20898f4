"""Flow export live on the veth test bed (issue 21; Scap's Figure 3): loss,
user-space CPU and softirq load against the packet rate, for `weir flows`
on afpacket and afxdp (with the kernel cutoff on and off, where weir has
`--kernel-cutoff`), softflowd and fprobe on stock libpcap.

Runs itself inside scripts/testbed (two namespaces, a 2-queue veth pair), as
bench/live.py does, and uses its generator and tool handling: trafgen in the
sending namespace on CPU 0, frames to a MAC and an address nobody owns.
The traffic is FLOWS UDP flows (source ports 16384 + 0..255, a mix of 64-,
576- and 1500-byte frames), each lasting the whole step: long flows, where a
cutoff below the application pays, as in the traffic Scap measured.

Every tool exports NetFlow v5 to a collector of this script's in the
capturing namespace, which sums the packets of the records it receives. That
sum is what a flow exporter delivers, so a step's loss is the packets sent
minus the packets exported after the tool has flushed (weir and fprobe on
SIGINT/SIGTERM, softflowd through its control socket): drops anywhere (ring,
socket, pool, table) and packets the kernel dropped on purpose but failed to
count all show up there. Per step, the median of RUNS runs of: loss, the
tool's CPU per packet sent (all threads, from schedstat, in ns), its user-space
and system CPU (from /proc/PID/task/*/stat, in 10 ms ticks: coarse at low
rates), and the machine's softirq time (/proc/stat, both
CPUs) per packet sent. The loss-free rate is the highest step with no loss.

`--quota PCT` runs every tool on CPU 1 limited to PCT% of it (as bench/live.py's
second pass), so that the loss-free rate is not the generator's ceiling.

Results go to bench/results/flows-live.json and the plot to
bench/results/flows-live.png (flows-live-quotaPCT.* with a quota) (with matplotlib: Debian's python3-matplotlib,
which scripts/setup installs, under /usr/bin/python3).
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import live  # noqa: E402
from common import RESULTS, ROOT, WEIR, log, machine, write_result  # noqa: E402

ENV = os.environ
RUNS = 3
SECONDS_PER_STEP = 2.0
RATES_KPPS = [25, 50, 100, 200, 300, 400, 500, 600, 800, 1000]
LOSSY_STEPS_TO_STOP = 2
SINK_PORT = 2055
# The result's name: flows-live, or flows-live-quota<PCT> under a CPU quota.
NAME = ["flows-live"]
DRAIN_S = 1.5
TRICKLE_KPPS = 2
MEASURED_PORT = 5000
TICK = os.sysconf("SC_CLK_TCK")

HEADER = """0x02,0x00,0x00,0x00,0x00,0x63, 0x02,0x00,0x00,0x00,0x00,0x01, 0x08,0x00,
  0x45,0x00, const16({iplen}), drnd(2), 0x40,0x00, 0x40,0x11, csumip(14, 33),
  198,18,0,1, 198,18,0,99,
  0x40, dinc(0, 255), 0x13,0x88, const16({udplen}), 0x00,0x00"""


def frame(size, port=MEASURED_PORT):
    payload = size - 42
    header = HEADER.format(iplen=size - 14, udplen=payload + 8).replace("0x13,0x88", f"{port >> 8:#04x},{port & 255:#04x}")
    return "{ " + header + f", fill(0x41, {payload}) }}"


MIX = [frame(64)] * 4 + [frame(576)] * 2 + [frame(1500)] * 4
TRICKLE = [frame(64, MEASURED_PORT + 1)]
FLOWS = 256

SINK = r"""
import signal, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
s.bind((sys.argv[1], int(sys.argv[2])))
port = int(sys.argv[3])
tot = {"records": 0, "packets": 0, "datagrams": 0, "bad": 0}
def done(*_):
    print(tot, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
print("ready", flush=True)
while True:
    d = s.recv(65535)
    tot["datagrams"] += 1
    if len(d) < 24 or struct.unpack_from("!H", d)[0] != 5:
        tot["bad"] += 1
        continue
    n = struct.unpack_from("!H", d, 2)[0]
    for i in range(n):
        at = 24 + 48 * i
        if struct.unpack_from("!H", d, at + 34)[0] == port:
            tot["packets"] += struct.unpack_from("!I", d, at + 16)[0]
            tot["records"] += 1
"""


class Sink:
    """The NetFlow v5 collector in the capturing namespace."""

    def __init__(self):
        self.proc = subprocess.Popen(live.ns("RX") + [sys.executable, "-c", SINK, ENV["TB_RX_IP"], str(SINK_PORT),
                                                      str(MEASURED_PORT)],
                                     stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the collector did not start")

    def finish(self):
        time.sleep(0.5)
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=10)
        return eval(out.strip().splitlines()[-1], {})  # the dict it printed


def cpu_split(pids):
    """(user, system) seconds of every thread of `pids`."""
    user = system = 0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for t in tasks:
            try:
                f = (t / "stat").read_text().rsplit(")", 1)[1].split()
                user, system = user + int(f[11]), system + int(f[12])
            except (OSError, IndexError, ValueError):
                pass
    return user / TICK, system / TICK


def softirq_seconds():
    f = open("/proc/stat").readline().split()
    return int(f[7]) / TICK


def weir_kernel_cutoff():
    return "--kernel-cutoff" in subprocess.run([str(WEIR), "flows", "--help"], capture_output=True, text=True).stdout


class SigtermTool(live.Tool):
    """fprobe emits its flow cache on SIGTERM; SIGINT would kill it first."""

    def signal(self, sig):
        super().signal(signal.SIGTERM if sig == signal.SIGINT else sig)


def tools():
    rx, collector = ENV["TB_RX_IF"], f"{ENV['TB_RX_IP']}:{SINK_PORT}"
    nothing = lambda out, err: (0, 0)  # counted by the collector, not by the tool
    t = {}
    for src in ("afpacket", "afxdp"):
        base = [str(WEIR), "flows", f"{src}:{rx}@0-1", "--take-host-traffic", "-q", "--format", "v5", "-n", collector,
                "--inactive-timeout", "3600", "--active-timeout", "3600"]
        if weir_kernel_cutoff():
            for cut in ("on", "off"):
                name = f"weir-{src}-cutoff-{cut}"
                t[name] = lambda n=name, b=base, c=cut: live.Tool(n, b + ["--kernel-cutoff", c], nothing)
        else:
            t[f"weir-{src}"] = lambda n=f"weir-{src}", b=base: live.Tool(n, b, nothing)
    ctl = "/tmp/weir-bench-flows-softflowd.ctl"
    t["softflowd"] = lambda: live.Tool(
        "softflowd", ["softflowd", "-d", "-i", rx, "-v", "5", "-m", "65536", "-n", collector, "-c", ctl,
                      "-p", "/tmp/weir-bench-flows-softflowd.pid", "-t", "maxlife=3600", "-t", "udp=3600"],
        live.parse_softflowd, control=ctl)
    # fprobe stays in the foreground with -l 2 (log to stdout). With its
    # defaults (libpcap's kernel buffer, a queue of 100 pending packets) it
    # exported 32% of the packets at 50 kpps here; given a 64 MiB buffer,
    # as weir has per queue, and a queue of 10,000, all of them.
    t["fprobe"] = lambda: SigtermTool("fprobe", ["fprobe", "-i", rx, "-l", "2", "-n", "5", "-B", "65536", "-q", "10000",
                                                 "-d", "3600", "-e", "3600", collector], nothing)
    return t


def step(factory, kpps):
    n = int(kpps * 1000 * SECONDS_PER_STEP)
    sink = Sink()
    tool = factory()
    tool.start()
    u0, s0 = cpu_split(tool.pids())
    c0, irq0 = sum(live.cpu_seconds(p) for p in tool.pids()), softirq_seconds()
    live.send("flows", n, kpps)
    # Then a trickle to another port for DRAIN_S, not counted: a tool that
    # reads its ring only as blocks fill (libpcap's TPACKET_V3) gets the
    # measured packets' tail before it is stopped.
    live.send("trickle", int(TRICKLE_KPPS * 1000 * DRAIN_S), TRICKLE_KPPS)
    u1, s1 = cpu_split(tool.pids())
    c1, irq1 = sum(live.cpu_seconds(p) for p in tool.pids()), softirq_seconds()
    received, dropped, _ = tool.stop()
    got = sink.finish()
    return {"sent": n, "exported_packets": got["packets"], "records": got["records"], "bad_datagrams": got["bad"],
            "tool_received": received, "tool_dropped": dropped, "lost": max(n - got["packets"], 0), "over": max(got["packets"] - n, 0),
            "cpu_ns_per_packet": (c1 - c0) / n * 1e9, "user_ns_per_packet": (u1 - u0) / n * 1e9, "system_ns_per_packet": (s1 - s0) / n * 1e9,
            "softirq_ns_per_packet": (irq1 - irq0) / n * 1e9}


def ladder(name, factory, ceiling, runs):
    steps, lossy = [], 0
    for kpps in RATES_KPPS:
        if lossy >= LOSSY_STEPS_TO_STOP or kpps * 1000 > ceiling * 1.05:
            break
        rs = [step(factory, kpps) for _ in range(runs)]
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        steps.append({"kpps": kpps, **{f"median_{k}": v for k, v in med.items()}, "runs": rs})
        lossy = lossy + 1 if med["lost"] else 0
        log(f"  {name:24} {kpps:5} kpps: lost {med['lost']:.0f} of {med['sent']:.0f}, cpu {med['cpu_ns_per_packet']:.0f} ns/pkt, user {med['user_ns_per_packet']:.0f}, "
            f"sys {med['system_ns_per_packet']:.0f}, softirq {med['softirq_ns_per_packet']:.0f}")
    loss_free = max((s["kpps"] for s in steps if s["median_lost"] == 0), default=0)
    return {"loss_free_kpps": loss_free, "steps": steps}


def compare(result, name, peer):
    """CPU per packet against a peer's at the highest rate both held without
    loss: user-space (ticks: 0 when under one tick a step) and all of the
    tool's CPU (schedstat), each as mine / theirs."""
    def loss_free(n, key):
        return {s["kpps"]: s[key] for s in result[n]["steps"] if s["median_lost"] == 0}
    common = sorted(set(loss_free(name, "median_cpu_ns_per_packet")) & set(loss_free(peer, "median_cpu_ns_per_packet")))
    if not common:
        return None
    k = common[-1]
    out = {"kpps": k, "loss_free_ratio": result[name]["loss_free_kpps"] / max(result[peer]["loss_free_kpps"], 1)}
    for key, label in (("median_user_ns_per_packet", "user_cpu_ratio"), ("median_cpu_ns_per_packet", "cpu_ratio")):
        mine, theirs = loss_free(name, key)[k], loss_free(peer, key)[k]
        out[label] = mine / theirs if theirs else None
    return out


PLOT = r"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
r = json.load(open(sys.argv[1]))["ladder"]
fig, ax = plt.subplots(1, 3, figsize=(15, 4.5))
for name, v in r.items():
    k = [s["kpps"] for s in v["steps"]]
    loss = [100 * s["median_lost"] / s["median_sent"] for s in v["steps"]]
    ax[0].plot(k, loss, marker="o", label=name)
    ax[1].plot(k, [s["median_user_ns_per_packet"] for s in v["steps"]], marker="o", label=name)
    ax[2].plot(k, [s["median_softirq_ns_per_packet"] for s in v["steps"]], marker="o", label=name)
for a, t in zip(ax, ["packets lost (%)", "user-space CPU (ns per packet)", "softirq CPU (ns per packet, both cores)"]):
    a.set_xlabel("rate (kpps)"); a.set_title(t); a.grid(alpha=0.3)
ax[0].legend(fontsize=8)
fig.suptitle("weir flows against softflowd and fprobe on the veth test bed (medians)")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
"""


def inner(which, runs, quota):
    live.MIXES["flows"], live.MIXES["trickle"] = MIX, TRICKLE
    # trafgen sends every step: these mixes are trafgen configurations, and
    # bench/live.py's default generator is now its XDP one.
    live.GEN.update(kind="trafgen")
    t = tools()
    which = [w for w in which if w in t] or list(t)
    result = {"machine": machine(), "queues": 2, "runs_per_step": runs, "flows": FLOWS, "quota_pct": quota,
              "generator_kpps": live.generator_ceiling("flows", None)[0] / 1e3, "ladder": {}}
    # With a quota every tool runs on CPU 1 in a cgroup limited to that share
    # of it once started (bench/live.py's second pass): the loss-free rate then
    # shows how many packets a tool sustains per unit of its own CPU. What the
    # kernel does for it (the cutoff's drops, in softirq) is outside the quota,
    # and reported as softirq time.
    live.set_quota(quota)
    log(f"generator ceiling: {result['generator_kpps']:.0f} kpps")
    for name in which:
        result["ladder"][name] = ladder(name, t[name], result["generator_kpps"] * 1e3, runs)
        write_result(NAME[0], result)
    live.set_quota(None)
    result["against"] = {n: {p: compare(result["ladder"], n, p) for p in ("softflowd", "fprobe") if p in result["ladder"]}
                         for n in result["ladder"] if n.startswith("weir")}
    out = write_result(NAME[0], result)
    py = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    p = subprocess.run([py, "-c", PLOT, str(out), str(RESULTS / f"{NAME[0]}.png")], capture_output=True, text=True)
    log("plot: " + (str(RESULTS / f"{NAME[0]}.png") if p.returncode == 0 else f"not drawn: {p.stderr.strip()[-300:]}"))
    for n, peers in result["against"].items():
        log(f"{n:26} loss-free {result['ladder'][n]['loss_free_kpps']} kpps; " + "; ".join(
            f"vs {p}: {v}" for p, v in peers.items()))


def args_pct(q):
    return f"{q:g}"


def main():
    args = sys.argv[1:]
    runs = RUNS
    if args[:1] in (["-h"], ["--help"]):
        sys.exit("usage: bench/flows_live.py [--runs N] [--quota PCT] [--rates KPPS,...] [TOOL...]   (tools: weir-afpacket[-cutoff-on|off], weir-afxdp[...], softflowd, fprobe)")
    if args[:1] == ["--runs"]:
        runs, args = int(args[1]), args[2:]
    quota = None
    if args[:1] == ["--quota"]:
        quota, args = float(args[1]), args[2:]
        NAME[0] = f"flows-live-quota{args_pct(quota)}"
    rates = None
    if args[:1] == ["--rates"]:
        rates, args = args[1], args[2:]
        RATES_KPPS[:] = [int(x) for x in rates.split(",")]
    if args[:1] == ["--inner"]:
        return inner(args[1:], runs, quota)
    if os.geteuid() != 0:
        sys.exit("bench/flows_live.py needs root (it builds network namespaces)")
    if not WEIR.exists():
        sys.exit(f"flows_live: {WEIR} is missing: build it (make build, or set WEIR_BIN)")
    argv = [sys.executable, __file__, "--runs", str(runs), *(["--quota", str(quota)] if quota else []),
            *(["--rates", rates] if rates else []), "--inner", *args]
    return subprocess.run([str(ROOT / "scripts" / "testbed"), "--queues", "2", "--", *argv]).returncode


if __name__ == "__main__":
    sys.exit(main())
