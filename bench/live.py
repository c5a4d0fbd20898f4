"""Live capture on the veth test bed: loss-free rate, CPU per packet and bursts.

Runs itself inside scripts/testbed (two namespaces joined by a 2-queue veth
pair). The generator is trafgen (netsniff-ng's PACKET_TX_RING sender) in the
sending namespace; frames go to a MAC and an IP nobody owns, so the capturing
side never answers and sees exactly what was sent.

For each capture tool and each traffic mix it sends at a ladder of rates, three
runs per step, and reports the highest step at which the median loss is zero
(the loss-free rate), as a ratio to tcpdump's and, for a program on weir's
libpcap (tcpdump-on-weir*, softflowd-on-weir*), to the same program on stock
libpcap. CPU per packet is the capture
process's CPU time (all threads, from schedstat) while the traffic flows, over
the packets it received: start-up and shutdown are left out. It is compared
with a peer's at the highest rate both ran without loss, since it falls as the
rate rises. softflowd reports libpcap's counters (ps_recv, ps_drop) through its
control socket, which is read before it is told to shut down. The generator's own
ceiling is measured first and stated: where every tool reaches it, the generator
is the limit, not the capture side.

On a 2-core machine the generator and the capture share the cores (and the
kernel's receive path runs on the sender's core), so a second pass makes the
capture side the bottleneck on purpose: the generator is pinned to CPU 0 and
each capture tool runs on CPU 1 inside a cgroup limited to `--quota` percent of
it, the same for every tool, once it has started (start-up is not measured). The loss-free rate then measures how many packets
a tool sustains per unit of CPU, with its buffers absorbing the jitter.

Bursts: the capturing process is stopped (SIGSTOP), a burst of P packets is
sent at full speed, and the process is continued: the largest P received
without loss is how much the tool's buffers hold. Then the same with the process
running, which is what a burst costs a live capture.
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
from common import ROOT, WEIR, log, machine, write_result  # noqa: E402

# weir's libpcap.so.0.8 (make pcap-lib), beside the release build bench/ uses.
PCAP_LIB = WEIR.parent.parent / "weir-pcap"

RUNS = 3
SECONDS_PER_STEP = 2.0
RATES_KPPS = [100, 200, 300, 400, 500, 600, 800, 1000, 1200]
# Under a CPU quota the interesting rates are lower.
QUOTA_RATES_KPPS = [10, 25, 50, 100, 150, 200, 250, 300, 400, 500]
# A ladder stops after this many lossy steps in a row.
LOSSY_STEPS_TO_STOP = 2
BURSTS = [5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 400_000, 800_000]

# Ethernet/IPv4/UDP to a MAC and address nobody on the test bed has.
HEADER = """0x02,0x00,0x00,0x00,0x00,0x63, 0x02,0x00,0x00,0x00,0x00,0x01, 0x08,0x00,
  0x45,0x00, const16({iplen}), drnd(2), 0x40,0x00, 0x40,0x11, csumip(14, 33),
  198,18,0,1, 198,18,0,99,
  drnd(2), 0x00,0x35, const16({udplen}), 0x00,0x00"""


def frame(size):
    """A trafgen packet of `size` bytes on the wire (without FCS), random ports."""
    payload = size - 42
    return "{ " + HEADER.format(iplen=size - 14, udplen=payload + 8) + f", fill(0x41, {payload}) }}"


MIXES = {
    "64B": [frame(64)],
    # Roughly the shape of Internet traffic: many small, some medium, many full size.
    "mixed": [frame(64)] * 4 + [frame(576)] * 2 + [frame(1500)] * 4,
}

ENV = os.environ
CGROUP = Path("/sys/fs/cgroup/cpu/weir-bench")
# Set by inner(): None, or the percent of CPU 1 every capture tool gets.
QUOTA = {"pct": None}


def ns(which):
    return ["ip", "netns", "exec", ENV[f"TB_{which}_NS"]]


def set_quota(pct):
    """Make (or clear) the cgroup the capture tools run in: pct% of one CPU."""
    QUOTA["pct"] = pct
    if pct is None:
        return
    CGROUP.mkdir(exist_ok=True)
    (CGROUP / "cpu.cfs_period_us").write_text("100000")
    (CGROUP / "cpu.cfs_quota_us").write_text(str(int(pct * 1000)))


def capture_argv(argv):
    """`argv` in the capturing namespace, on CPU 1 when a quota is set (the tool
    joins the quota's cgroup once started: see Tool.start)."""
    if QUOTA["pct"] is None:
        return ns("RX") + argv
    return ["taskset", "-c", "1"] + ns("RX") + argv


def move_to_cgroup(pids, cgroup):
    for p in pids:
        try:
            (cgroup / "cgroup.procs").write_text(str(p))
        except OSError:
            pass


def cpu_seconds(pid):
    """CPU time of every thread of `pid`, from schedstat (nanoseconds; /proc/PID/stat counts 10 ms ticks)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        pass
    return total / 1e9


def descendants(pid):
    """The process and every process below it (ip netns exec forks the tool)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    kids = [int(p) for p in out]
    return [pid] + [d for k in kids for d in descendants(k)]


class Tool:
    """A capture tool in the capturing namespace; `stop()` returns (received, dropped, cpu_s)."""

    def __init__(self, name, argv, parse, control=None):
        """`control`, if given, is a softflowd control socket: its counters are
        read before the tool is told to shut down through it (softflowd prints
        none of its own on exit)."""
        self.name, self.argv, self.parse, self.control = name, argv, parse, control
        self.proc = None

    def start(self):
        """Start the tool and let it set up unconstrained (loading an XDP program or
        mapping a ring is not what is measured); then put it under the quota, if
        any, and note its CPU time so far."""
        self.proc = subprocess.Popen(capture_argv(self.argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited at start: {self.proc.stderr.read()}")
        if QUOTA["pct"] is not None:
            move_to_cgroup(self.pids(), CGROUP)
            time.sleep(0.2)
        self.cpu_at_start = sum(cpu_seconds(p) for p in self.pids())

    def pids(self):
        return descendants(self.proc.pid)

    def signal(self, sig):
        for p in self.pids():
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass

    def stop(self):
        """(received, dropped, cpu_s); received is None when the tool did not stop
        within 30 s of SIGINT (a polling tool under a tight CPU quota) or printed
        no counts."""
        cpu = sum(cpu_seconds(p) for p in self.pids()) - self.cpu_at_start
        if QUOTA["pct"] is not None:
            # Shutting down is not measured either.
            move_to_cgroup(self.pids(), CGROUP.parent)
        stats = ""
        if self.control:
            ctl = lambda cmd: subprocess.run(ns("RX") + ["softflowctl", "-c", self.control, cmd], capture_output=True, text=True).stdout
            stats = ctl("statistics")
            ctl("shutdown")
        else:
            self.signal(signal.SIGINT)
        try:
            out, err = self.proc.communicate(timeout=30)
            out += stats
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.communicate()
            log(f"  {self.name} did not exit within 30 s of SIGINT: killed, run counted as failed")
            return None, None, cpu
        try:
            received, dropped = self.parse(out, err)
        except (StopIteration, ValueError, KeyError):
            log(f"  {self.name} printed no counts: {err.strip()[-300:]}")
            return None, None, cpu
        return received, dropped, cpu


def parse_tcpdump(out, err):
    num = lambda key: int(next(l for l in err.splitlines() if key in l).split()[0])
    return num("received by filter"), num("dropped by kernel")


def parse_netsniff(out, err):
    text = out + err
    incoming = int(next(l for l in text.splitlines() if "packets incoming" in l).split()[0])
    dropped = sum(int(l.split()[0]) for l in text.splitlines() if "failed filter" in l)
    return incoming, dropped


def parse_softflowd(out, err):
    """libpcap's counters as softflowd reports them (the same ps_recv and ps_drop
    tcpdump prints), from its control socket's statistics."""
    num = lambda key: int(next(l for l in out.splitlines() if l.startswith(key)).split(":")[1])
    return num("Packets received by libpcap"), num("Packets dropped by libpcap") + num("Packets dropped by interface")


def parse_weir(out, err):
    v = json.loads(out)
    return v["received"], v["capture_drops"] + v["delivery_drops"]


def tools():
    rx = ENV["TB_RX_IF"]
    weir = [str(WEIR), "count", "--json"]
    return {
        "tcpdump": lambda b=None: Tool("tcpdump", ["tcpdump", "-i", rx, "-n", "-w", "/dev/null"] + (["-B", str(b)] if b else []), parse_tcpdump),
        "netsniff-ng": lambda b=None: Tool("netsniff-ng", ["netsniff-ng", "--in", rx, "--out", "/dev/null", "--silent"], parse_netsniff),
        "tcpdump -B 131072": lambda b=None: Tool("tcpdump -B 131072", ["tcpdump", "-i", rx, "-n", "-w", "/dev/null", "-B", "131072"], parse_tcpdump),
        "weir-afpacket": lambda b=None: Tool("weir-afpacket", weir + [f"afpacket:{rx}@0-1"], parse_weir),
        "weir-afxdp": lambda b=None: Tool("weir-afxdp", weir + [f"afxdp:{rx}@0-1"], parse_weir),
        # Unmodified tcpdump on weir's libpcap (make pcap-lib), in order and with locality buffering.
        "tcpdump-on-weir": lambda b=None: Tool("tcpdump-on-weir", ["env", f"LD_LIBRARY_PATH={PCAP_LIB}", "tcpdump", "-i", rx, "-n", "-w", "/dev/null"],
                                               parse_tcpdump),
        "tcpdump-on-weir-locality": lambda b=None: Tool(
            "tcpdump-on-weir-locality",
            ["env", f"LD_LIBRARY_PATH={PCAP_LIB}", "WEIR_LOCALITY=8000", "tcpdump", "-i", rx, "-n", "-w", "/dev/null"], parse_tcpdump),
        # A flow exporter: softflowd, stock and on weir with and without locality buffering.
        "softflowd": lambda b=None: softflowd("softflowd", []),
        "softflowd-on-weir": lambda b=None: softflowd("softflowd-on-weir", [f"LD_LIBRARY_PATH={PCAP_LIB}"]),
        "softflowd-on-weir-locality": lambda b=None: softflowd("softflowd-on-weir-locality", [f"LD_LIBRARY_PATH={PCAP_LIB}", "WEIR_LOCALITY=8000"]),
    }


def softflowd(name, env):
    """softflowd exporting NetFlow v9 to a port nobody listens on in the capturing
    namespace (the export is not what is measured; its datagrams stay there)."""
    ctl = f"/tmp/weir-bench-{name}.ctl"
    argv = ["env", *env, "softflowd", "-d", "-i", ENV["TB_RX_IF"], "-v", "9", "-m", "65536", "-n", f"{ENV['TB_RX_IP']}:9",
            "-c", ctl, "-p", f"/tmp/weir-bench-{name}.pid"]
    return Tool(name, argv, parse_softflowd, control=ctl)


# Each tool's loss-free rate is also given as a ratio to the same program on
# stock libpcap.
PEER = {"softflowd-on-weir": "softflowd", "softflowd-on-weir-locality": "softflowd"}


def send(mix, packets, kpps=None):
    """Send `packets` frames of a mix; returns seconds taken."""
    cfg = Path(f"/tmp/weir-bench-{mix}.cfg")
    cfg.write_text("\n".join(MIXES[mix]) + "\n")
    argv = ["taskset", "-c", "0"] + ns("TX") + ["trafgen", "-o", ENV["TB_TX_IF"], "-i", str(cfg), "-n", str(packets), "-q", "-C", "-P", "1"]
    if kpps:
        argv += ["-b", f"{kpps * 1000}pps"]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - t0


def generator_ceiling(mix):
    return statistics.median(200_000 / send(mix, 200_000) for _ in range(RUNS))


def ladder(tool_factory, mix, ceiling):
    steps, lossy = [], 0
    for kpps in RATES_KPPS if QUOTA["pct"] is None else QUOTA_RATES_KPPS:
        if lossy >= LOSSY_STEPS_TO_STOP:
            break
        if kpps * 1000 > ceiling * 1.05:
            break
        runs = []
        for _ in range(RUNS):
            tool = tool_factory()
            tool.start()
            n = int(kpps * 1000 * SECONDS_PER_STEP)
            send(mix, n, kpps)
            time.sleep(0.5)
            received, dropped, cpu = tool.stop()
            # A failed run counts every packet as lost.
            lost = n if received is None else max(n - received, 0) + dropped
            runs.append({"sent": n, "received": received, "dropped": dropped, "lost": lost, "cpu_s": cpu})
        lost = statistics.median(r["lost"] for r in runs)
        cpu_ns = statistics.median(r["cpu_s"] / max(r["received"] or 0, 1) * 1e9 for r in runs)
        steps.append({"kpps": kpps, "median_lost": lost, "cpu_ns_per_packet": cpu_ns, "runs": runs})
        lossy = lossy + 1 if lost else 0
        log(f"  {tool.name:14} {mix:6} {kpps:5} kpps: lost {lost}, {cpu_ns:.0f} ns CPU/packet")
    loss_free = max((s["kpps"] for s in steps if s["median_lost"] == 0), default=0)
    return {"loss_free_kpps": loss_free, "steps": steps}


def burst(tool_factory, paused):
    """Largest burst (of BURSTS) received whole, with the tool paused or running."""
    best, rows = 0, []
    for p in BURSTS:
        lost = []
        for _ in range(RUNS):
            tool = tool_factory()
            tool.start()
            if paused:
                tool.signal(signal.SIGSTOP)
            send("64B", p)
            time.sleep(0.3)
            if paused:
                tool.signal(signal.SIGCONT)
            time.sleep(1.0)
            received, dropped, _ = tool.stop()
            lost.append(p if received is None else max(p - received, 0) + dropped)
        rows.append({"burst": p, "median_lost": statistics.median(lost)})
        if statistics.median(lost) == 0:
            best = p
        else:
            break
    return {"largest_lossless_burst": best, "rows": rows}


def inner(which, quota, passes):
    t = tools()
    result = {"machine": machine(), "queues": 2, "runs_per_step": RUNS, "quota_pct": quota, "generator": {}, "ladder": {}, "ladder_quota": {}, "bursts": {}}
    for mix in MIXES:
        result["generator"][mix] = generator_ceiling(mix)
        log(f"generator ceiling {mix}: {result['generator'][mix] / 1e3:.0f} kpps")
    for key, pct in (("ladder", None), ("ladder_quota", quota)):
        if key not in passes:
            continue
        set_quota(pct)
        log(f"ladder{'' if pct is None else f' with capture limited to {pct}% of CPU 1'}:")
        for name in which:
            for mix in MIXES:
                result[key].setdefault(name, {})[mix] = ladder(t[name], mix, result["generator"][mix])
            write_result(passes_name(passes, which), result)
    set_quota(None)
    # Bursts: defaults, and tcpdump with its buffer raised to weir's 64 MiB per queue x 2 queues.
    configs = {n: t[n] for n in which}
    for name, factory in configs.items() if "bursts" in passes else ():
        for paused in (True, False):
            key = "paused" if paused else "running"
            result["bursts"].setdefault(name, {})[key] = burst(factory, paused)
            log(f"  burst {name:18} {key:8}: {result['bursts'][name][key]['largest_lossless_burst']}")
            write_result(passes_name(passes, which), result)
    for key in ("ladder", "ladder_quota"):
        for name, mixes in result[key].items():
            for mix, r in mixes.items():
                for peer in {"tcpdump", PEER.get(name, "tcpdump")}:
                    base = result[key].get(peer, {}).get(mix, {})
                    b = base.get("loss_free_kpps") or None
                    r[f"ratio_to_{peer}"] = r["loss_free_kpps"] / b if b else None
                    r[f"cpu_ratio_to_{peer}"] = cpu_ratio(r, base)
    write_result(passes_name(passes, which), result)


# "tcpdump -B 131072" is tcpdump given weir's default memory (64 MiB per queue, 2 queues).
ALL = ["tcpdump", "tcpdump -B 131072", "netsniff-ng", "weir-afpacket", "weir-afxdp", "tcpdump-on-weir", "tcpdump-on-weir-locality",
       "softflowd", "softflowd-on-weir", "softflowd-on-weir-locality"]
PASSES = ["ladder", "ladder_quota", "bursts"]


def cpu_ratio(r, base):
    """CPU per packet against a peer's at the same rate: the highest step both ran
    without loss (CPU per packet falls as the rate rises, so only equal rates
    compare). {"kpps", "ratio"}, or None when they share no loss-free step."""
    mine = {s["kpps"]: s["cpu_ns_per_packet"] for s in r["steps"] if s["median_lost"] == 0}
    theirs = {s["kpps"]: s["cpu_ns_per_packet"] for s in base.get("steps", []) if s["median_lost"] == 0}
    common = sorted(set(mine) & set(theirs))
    if not common or not theirs[common[-1]]:
        return None
    return {"kpps": common[-1], "ratio": mine[common[-1]] / theirs[common[-1]]}


def passes_name(passes, which=None):
    """The result file: live.json for a full run of every tool, live-<passes>.json
    for some passes, live-<tools>.json for some tools (a partial run never
    overwrites the full one)."""
    name = "live" if sorted(passes) == sorted(PASSES) else "live-" + "-".join(passes)
    if which and sorted(which) != sorted(ALL):
        name += "-" + "-".join(w.split()[0] for w in which)
    return name


def main():
    args = sys.argv[1:]
    quota, passes = 3, PASSES
    if args[:1] in (["-h"], ["--help"]):
        sys.exit(f"usage: bench/live.py [--quota PCT] [--passes {','.join(PASSES)}] [TOOL...]\ntools: {' '.join(ALL)}")
    if args[:1] == ["--quota"]:
        quota, args = float(args[1]), args[2:]
    if args[:1] == ["--passes"]:
        passes, args = args[1].split(","), args[2:]
        if not set(passes) <= set(PASSES):
            sys.exit(f"unknown pass(es) {sorted(set(passes) - set(PASSES))}: choose from {PASSES}")
    if args[:1] == ["--inner"]:
        return inner(args[1:] or ALL, quota, passes)
    which = args or ALL
    unknown = [w for w in which if w not in ALL]
    if unknown:
        sys.exit(f"unknown tool(s) {unknown}: choose from {ALL}")
    if os.geteuid() != 0:
        sys.exit("bench/live.py needs root (it builds network namespaces)")
    inner_argv = [sys.executable, __file__, "--quota", str(quota), "--passes", ",".join(passes), "--inner", *which]
    return subprocess.run([str(ROOT / "scripts" / "testbed"), "--queues", "2", "--", *inner_argv]).returncode


if __name__ == "__main__":
    sys.exit(main())
