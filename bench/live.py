"""Live capture on the veth test bed: loss-free rate, CPU per packet and bursts.

Runs itself inside scripts/testbed (two namespaces joined by a 2-queue veth
pair). Frames go to a MAC and an IP nobody owns, so the capturing side never
answers and sees exactly what was sent. The capturing veth end has no address
(an AF_XDP capture takes the interface's traffic from the host; softflowd
exports to the namespace's loopback).

Generators, pinned to CPU 0 in the sending namespace (`--generator`):
- `trafgen` (netsniff-ng's PACKET_TX_RING sender), paced per packet: every
  step of the ladder. Its ceiling here is about 430 kpps, which every tool
  reached without loss, so alone it says nothing of the capture side.
- `xdp` (the default): every step sent by `weir replay --xdp --pps R` (the
  kernel's XDP live-frames test run, the program sending each frame when it
  is due), then a top step at its own top speed, which the capture has to
  keep up with. A step's rate is the one asked for when the sender reached
  80% of it (over a 2 s step it sends at about 92% here: each test run's
  set-up sends nothing, and the first run is short), else the rate it
  reached, and the ladder stops there: past that the generator, not the
  capture, is the limit. The generator keeps CPU 0 busy running its program
  until frames are due, so with it every capture tool runs on CPU 1: one CPU
  sends, the other captures, the same for every tool. A veth hands XDP-sent
  frames only to a peer with an XDP program: for every tool but weir on
  afxdp (which brings its own) the capturing end gets one that passes every
  frame to the stack. The capturing veth's receive work (its NAPI: that
  program, then the stack up to the packet sockets, or the copy into an
  AF_XDP UMEM) runs in kernel threads pinned to CPU 1, beside the tool, so
  each tool pays for its own receive path as it would on a NIC (see
  napi_beside_capture). Left in the softirq of the sending CPU, as a veth
  does by default, it cost the tools nothing and the generator its rate:
  tcpdump then took 1.46 Mpps of 64-byte frames without a loss.

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
import generator  # noqa: E402
from common import RESULTS, ROOT, WEIR, WORK, log, machine, sh, write_result  # noqa: E402

# weir's libpcap.so.0.8 (make pcap-lib), beside the release build bench/ uses.
PCAP_LIB = WEIR.parent.parent / "weir-pcap"
PASS_OBJ = WORK / "live-xdp-pass.o"

RUNS = 3
SECONDS_PER_STEP = 2.0
RATES_KPPS = [100, 200, 300, 400, 500, 600, 800, 1000, 1200]
# --quick: one mix, a few paced steps, the main tools, paused bursts of weir only.
QUICK_RATES_KPPS = [200, 400, 600]
QUICK_SECONDS_PER_STEP = 2.0
QUICK_BURSTS = ["weir-afpacket", "weir-xdp", "weir-afxdp"]
# The top step of `--generator xdp`: `weir replay --xdp` at its top speed.
TOP = "top"
QUICK_TOOLS = ["tcpdump", "tcpdump -B 131072", "netsniff-ng", "weir-afpacket", "weir-afxdp"]
# Under a CPU quota the interesting rates are lower.
QUOTA_RATES_KPPS = [10, 25, 50, 100, 150, 200, 250, 300, 400, 500]
# Stolen time (ms, /proc/stat's steal over a run) above which a lossy run is
# run again, and how many such runs a step may set aside.
STEAL_MS = 20
STEAL_RERUNS = 3
# A ladder stops after this many lossy steps in a row.
LOSSY_STEPS_TO_STOP = 2
# Up to past what 128 MiB holds of 64-byte frames in an xdp: ring (88 bytes each: 1.5 million).
# Bursts are sent at this rate by `weir replay --xdp` (with the XDP generator):
# about trafgen's top speed, which they used to be sent at, but trafgen at its
# top speed now and then gives up (EAGAIN on a full veth queue) mid-burst.
BURST_KPPS = 400
BURSTS = [5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 400_000, 800_000, 1_200_000, 1_600_000]

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
# Named per run: another engineer's benchmark may run at the same time.
CGROUP = Path(f"/sys/fs/cgroup/cpu/weir-bench-{os.getpid()}")
# Set by inner(): None, or the percent of CPU 1 every capture tool gets; the
# generator; the seconds per step.
QUOTA = {"pct": None}
GEN = {"kind": "xdp", "seconds": SECONDS_PER_STEP}

PASS_C = """
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int pass(struct xdp_md *ctx) { return XDP_PASS; }
char LICENSE[] SEC("license") = "GPL";
"""


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


def remove_cgroup():
    if CGROUP.exists():
        move_to_cgroup([int(p) for p in (CGROUP / "cgroup.procs").read_text().split()], CGROUP.parent)
        CGROUP.rmdir()


def napi_beside_capture():
    """Run the capturing veth's receive work (its NAPI: the XDP program, then the
    copy into an AF_XDP socket's UMEM or the stack up to the packet sockets) in
    kernel threads pinned to CPU 1, beside the capture tool, as a NIC's
    interrupts would run on the capturing core. A veth's NAPI otherwise runs
    in the softirq of the CPU that sent the frame, the generator's, where it
    costs the capture tool nothing and the generator its rate. Its NAPI
    instances exist only while an XDP program is attached, so this runs once
    the tool's (or the passing) program is on, and again for each tool."""
    rx = ENV["TB_RX_IF"]
    napi_in_threads(True)
    threads = subprocess.run(["ps", "-eo", "pid=,comm="], check=True, capture_output=True, text=True).stdout.splitlines()
    pids = [line.split()[0] for line in threads if line.split()[1].startswith(f"napi/{rx}-")]
    if not pids:
        raise RuntimeError(f"no NAPI threads of {rx} to pin: is an XDP program attached?")
    for pid in pids:
        subprocess.run(["taskset", "-pc", "1", pid], check=True, capture_output=True)
        # Real-time, as a NIC's interrupt and its softirq preempt the tool.
        subprocess.run(["chrt", "-f", "-p", "50", pid], check=True, capture_output=True)


def napi_in_threads(on):
    """The capturing veth's NAPI in kernel threads (on) or in softirq (off)."""
    rx = ENV["TB_RX_IF"]
    subprocess.run(ns("RX") + ["sh", "-c", f"echo {int(on)} > /sys/class/net/{rx}/threaded"], check=on, capture_output=True)


def pass_program(on):
    """An XDP program on the capturing end that passes every frame (on), or none."""
    # -force: replace the one a previous run left, rather than fail.
    dev = ["ip", "-force", "-n", ENV["TB_RX_NS"], "link", "set", "dev", ENV["TB_RX_IF"]]
    subprocess.run(dev + (["xdpdrv", "obj", str(PASS_OBJ), "sec", "xdp"] if on else ["xdpdrv", "off"]), check=True, capture_output=True)


def capture_argv(argv):
    """`argv` in the capturing namespace, on CPU 1 when a quota is set (the tool
    joins the quota's cgroup once started: see Tool.start) or the XDP generator
    sends (it keeps CPU 0 busy running its program until frames are due, so a
    tool sharing that CPU would hold it back)."""
    if QUOTA["pct"] is None and GEN["kind"] != "xdp":
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
        if GEN["kind"] == "xdp":
            pass_program(not self.name.startswith(("weir-afxdp", "weir-xdp")))
        self.proc = subprocess.Popen(capture_argv(self.argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited at start: {self.proc.stderr.read()}")
        if GEN["kind"] == "xdp":
            napi_beside_capture()
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
        # weir's XDP program copying into one ring buffer of 128 MiB (its default for 2 queues: afpacket's 2 x 64 MiB).
        # The capturing end has no address and nothing on it needs the traffic (a monitoring port), so what
        # was copied is dropped there rather than passed to a stack that would drop it later, as afxdp takes it.
        "weir-xdp": lambda b=None: Tool("weir-xdp", weir + [f"xdp:{rx}@0-1", "--take-host-traffic"], parse_weir),
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
    argv = ["env", *env, "softflowd", "-d", "-i", ENV["TB_RX_IF"], "-v", "9", "-m", "65536", "-n", "127.0.0.1:9",
            "-c", ctl, "-p", f"/tmp/weir-bench-{name}.pid"]
    return Tool(name, argv, parse_softflowd, control=ctl)


# Each tool's loss-free rate is also given as a ratio to the same program on
# stock libpcap.
PEER = {"softflowd-on-weir": "softflowd", "softflowd-on-weir-locality": "softflowd"}


def send(mix, packets, kpps=None):
    """Send `packets` frames of a mix at `kpps` (None: trafgen's top speed; TOP:
    `weir replay --xdp`'s); returns seconds taken (for the XDP generator its
    own). With the XDP generator every paced step is its too."""
    if kpps == TOP or (kpps and GEN["kind"] == "xdp"):
        return send_xdp(mix, packets, None if kpps == TOP else kpps)
    cfg = WORK / f"live-{os.getpid()}-{mix}.cfg"
    cfg.write_text("\n".join(MIXES[mix]) + "\n")
    argv = ["taskset", "-c", "0"] + ns("TX") + ["trafgen", "-o", ENV["TB_TX_IF"], "-i", str(cfg), "-n", str(packets), "-q", "-C", "-P", "1"]
    if kpps:
        argv += ["-b", f"{kpps * 1000}pps"]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - t0


def send_xdp(mix, packets, kpps=None):
    """`weir replay --xdp` of the mix's frames (the same bytes trafgen sends, by
    bench/generator.py) at `kpps` or its top speed; returns the sender's own
    seconds, from its first packet to its last."""
    pcap = WORK / f"live-{mix}.pcap"
    if not pcap.exists():
        sizes = generator.MIXES[mix]
        generator.write_pcap(pcap, [generator.frame(size, i) for i, size in enumerate(sizes)])
    argv = ["taskset", "-c", "0", str(WEIR), "replay", "--json", "--netns", ENV["TB_TX_NS"], "--xdp", ENV["TB_TX_IF"], "--vary-ports", "1024",
            "--loop", "0", "-c", str(packets), str(pcap)] + (["--pps", str(kpps * 1000)] if kpps else [])
    v = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
    if v["packets"] != packets:
        raise RuntimeError(f"weir replay --xdp sent {v['packets']} of {packets} packets: {v['error']}")
    return v["elapsed_s"]


def steal_ms():
    """Milliseconds the hypervisor ran something else while this VM's CPUs
    wanted to run, both CPUs together (/proc/stat's steal). A veth's ring holds
    256 frames, 1.3 ms at 200 kpps: a run that lost frames while time was
    stolen lost them to the host machine, not to the tool; the JSON keeps it
    per run so a loss can be read against it."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK")


def rx_packets():
    path = f"/sys/class/net/{ENV['TB_RX_IF']}/statistics/rx_packets"
    return int(subprocess.run(ns("RX") + ["cat", path], check=True, capture_output=True, text=True).stdout)


def generator_ceiling(mix, top):
    """(sent, arrived): a generator's top speed in packets/s as it counts them,
    and as the capturing interface counts them with no capture running (with
    the XDP generator, through the XDP_PASS program into the stack, which is on
    for trafgen too then); trafgen's when `top` is None, else weir replay --xdp's."""
    n = 1_000_000 if top else 200_000
    runs = []
    for _ in range(RUNS):
        before = rx_packets()
        secs = send(mix, n, top)
        runs.append((n / secs, (rx_packets() - before) / secs))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def ladder(tool_factory, mix, ceiling):
    steps, lossy = [], 0
    rates = [*GEN["rates"], TOP] if GEN["kind"] == "xdp" and QUOTA["pct"] is None else GEN["rates"]
    for kpps in rates if QUOTA["pct"] is None else QUOTA_RATES_KPPS:
        if lossy >= LOSSY_STEPS_TO_STOP:
            break
        top = ceiling["xdp"] if GEN["kind"] == "xdp" else ceiling["trafgen"]
        if kpps != TOP and kpps * 1000 > top * 1.05:
            continue
        runs, set_aside = [], []
        while len(runs) < RUNS:
            tool = tool_factory()
            tool.start()
            n = int((ceiling["xdp"] if kpps == TOP else kpps * 1000) * GEN["seconds"])
            stolen = steal_ms()
            secs = send(mix, n, kpps)
            time.sleep(0.5)
            stolen = steal_ms() - stolen
            received, dropped, cpu = tool.stop()
            # A failed run counts every packet as lost.
            lost = n if received is None else max(n - received, 0) + dropped
            run = {"sent": n, "sent_kpps": n / secs / 1e3, "received": received, "dropped": dropped, "lost": lost, "cpu_s": cpu,
                   "steal_ms": stolen}
            # A lossy run during which the hypervisor took more than STEAL_MS
            # of this VM's CPU time measured the VM, not the tool: it is run
            # again, at most STEAL_RERUNS times a step, and kept in the
            # result as set aside. Every tool is held to the same rule.
            if lost and stolen > STEAL_MS and len(set_aside) < STEAL_RERUNS:
                set_aside.append(run)
                continue
            runs.append(run)
        lost = statistics.median(r["lost"] for r in runs)
        cpu_ns = statistics.median(r["cpu_s"] / max(r["received"] or 0, 1) * 1e9 for r in runs)
        sent_kpps = statistics.median(r["sent_kpps"] for r in runs)
        steps.append({"kpps": kpps, "sent_kpps": sent_kpps, "median_lost": lost, "loss": lost / n, "cpu_ns_per_packet": cpu_ns, "runs": runs,
                      "set_aside_for_steal": set_aside})
        lossy = lossy + 1 if lost else 0
        short = kpps != TOP and sent_kpps < 0.8 * kpps
        steps[-1]["generator_short"] = short
        log(f"  {tool.name:14} {mix:6} {kpps:>5} kpps (sent at {sent_kpps:.0f}): lost {lost}, {cpu_ns:.0f} ns CPU/packet, "
            f"stolen {'/'.join(str(round(r['steal_ms'])) for r in runs)} ms"
            + (f" ({len(set_aside)} lossy run(s) with more stolen set aside)" if set_aside else "")
            + (" (the generator fell short: the ladder stops)" if short else ""))
        if short:
            break
    # A step's rate is the one asked for, unless the generator fell short of
    # it or it is the top step: then the rate the generator reached.
    rate = lambda s: s["sent_kpps"] if s["kpps"] == TOP or s.get("generator_short") else s["kpps"]
    loss_free = max((rate(s) for s in steps if s["median_lost"] == 0), default=0)
    return {"loss_free_kpps": loss_free, "steps": steps}


def burst(tool_factory, paused, sizes=BURSTS, kpps=None):
    """Largest burst (of `sizes`, sent at `kpps` or the default burst rate)
    received whole, with the tool paused or running; per size the median loss
    and where it happened (never seen by the tool, or dropped by it), and what
    each run kept."""
    if kpps is None:
        kpps = BURST_KPPS if GEN["kind"] == "xdp" else None
    best, rows = 0, []
    for p in sizes:
        lost, unseen, dropped_by = [], [], []
        for _ in range(RUNS):
            tool = tool_factory()
            tool.start()
            if paused:
                tool.signal(signal.SIGSTOP)
            send("64B", p, kpps)
            time.sleep(0.3)
            if paused:
                tool.signal(signal.SIGCONT)
            time.sleep(1.0)
            received, dropped, _ = tool.stop()
            lost.append(p if received is None else max(p - received, 0) + dropped)
            # Where they were lost: never seen by the tool (the receive path
            # before it), or seen and dropped (its buffer was full).
            unseen.append(p if received is None else max(p - received, 0))
            dropped_by.append(0 if received is None else dropped)
        rows.append({"burst": p, "median_lost": statistics.median(lost), "median_not_received": statistics.median(unseen),
                     "median_dropped": statistics.median(dropped_by), "kept": [p - x for x in lost]})
        if statistics.median(lost) == 0:
            best = p
        else:
            break
    return {"largest_lossless_burst": best, "kpps": kpps, "rows": rows}


# The equal-memory burst pass: every tool given the same 8 MiB for the two
# queues, so the bursts it holds are set by how it packs packets, and are
# small enough to pace slowly, below what the veth drops on its own (at 400
# kpps a few hundred frames of a large burst never reached any tool).
EQUAL_MIB = 8
EQUAL_KPPS = 150
EQUAL_BURSTS = [10_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000, 80_000, 90_000, 100_000, 110_000]


def equal_memory_tools():
    rx = ENV["TB_RX_IF"]
    weir = [str(WEIR), "count", "--json"]
    per_queue_mib = EQUAL_MIB // 2
    return {
        # 1 MiB blocks, 4 a queue.
        "weir-afpacket": lambda: Tool("weir-afpacket", weir + [f"afpacket:{rx}@0-1", "--blocks", str(per_queue_mib)], parse_weir),
        # One ring for both queues.
        "weir-xdp": lambda: Tool("weir-xdp", weir + [f"xdp:{rx}@0-1", "--xdp-ring", str(EQUAL_MIB)], parse_weir),
        # 2,048 frames of 2 KiB a queue (a pool of 64 chunks of 32 cells; UMEM frame per cell).
        "weir-afxdp": lambda: Tool("weir-afxdp", weir + [f"afxdp:{rx}@0-1", "--pool", "64,32"], parse_weir),
        # One socket, -B in KiB.
        "tcpdump": lambda: Tool("tcpdump", ["tcpdump", "-i", rx, "-n", "-w", "/dev/null", "-B", str(EQUAL_MIB * 1024)], parse_tcpdump),
    }


def inner(which, quota, passes, gen, quick):
    GEN.update(kind=gen, rates=QUICK_RATES_KPPS if quick else RATES_KPPS, seconds=QUICK_SECONDS_PER_STEP if quick else SECONDS_PER_STEP)
    mixes = ["64B"] if quick else list(MIXES)
    WORK.mkdir(parents=True, exist_ok=True)
    # An AF_XDP capture takes the interface from the host: the capturing end has no address.
    sh(["ip", "-n", ENV["TB_RX_NS"], "addr", "flush", "dev", ENV["TB_RX_IF"]])
    if gen == "xdp":
        src = WORK / "live-xdp-pass.c"
        src.write_text(PASS_C)
        sh(["clang", "-O2", "-target", "bpf", "-I", f"/usr/include/{os.uname().machine}-linux-gnu", "-c", str(src), "-o", str(PASS_OBJ)])
    try:
        run_passes(which, quota, passes, mixes, quick)
    finally:
        remove_cgroup()


def run_passes(which, quota, passes, mixes, quick):
    t = tools()
    result = {"machine": machine(), "queues": 2, "runs_per_step": RUNS, "quota_pct": quota, "generator_kind": GEN["kind"], "quick": quick,
              "seconds_per_step": GEN["seconds"], "generator": {}, "ladder": {}, "ladder_quota": {}, "bursts": {}}
    result["generator_arrived"] = {}
    if GEN["kind"] == "xdp":
        pass_program(True)
    for mix in mixes:
        result["generator"][mix], result["generator_arrived"][mix] = {}, {}
        for gen, top in (("trafgen", None), ("xdp", TOP)) if GEN["kind"] == "xdp" else (("trafgen", None),):
            sent, arrived = generator_ceiling(mix, top)
            result["generator"][mix][gen], result["generator_arrived"][mix][gen] = sent, arrived
            log(f"{gen} ceiling {mix}: {sent / 1e3:.0f} kpps sent, {arrived / 1e3:.0f} kpps arrived at the capturing interface")
    # trafgen gives up when the veth's queue fills (EAGAIN from its TX ring),
    # which it does with the receive work in a thread of the other CPU: the
    # ceilings are measured before that, and the bursts (trafgen's) after it.
    for key, pct in (("ladder", None), ("ladder_quota", quota)):
        if key not in passes:
            continue
        set_quota(pct)
        log(f"ladder{'' if pct is None else f' with capture limited to {pct}% of CPU 1'}:")
        for name in which:
            for mix in mixes:
                result[key].setdefault(name, {})[mix] = ladder(t[name], mix, result["generator"][mix])
            write_result(result_name(passes, which), result)
    set_quota(None)
    napi_in_threads(False)
    # Bursts: defaults, and tcpdump with its buffer raised to weir's 64 MiB per queue x 2 queues.
    configs = {n: t[n] for n in which if not quick or n in QUICK_BURSTS}
    for name, factory in configs.items() if "bursts" in passes else ():
        for paused in (True,) if quick else (True, False):
            key = "paused" if paused else "running"
            result["bursts"].setdefault(name, {})[key] = burst(factory, paused)
            log(f"  burst {name:18} {key:8}: {result['bursts'][name][key]['largest_lossless_burst']}")
            write_result(result_name(passes, which), result)
    if "bursts_equal" in passes:
        if GEN["kind"] != "xdp":
            raise SystemExit("the bursts_equal pass paces its bursts with the XDP generator: use --generator xdp")
        eq = equal_memory_tools()
        result["bursts_equal"] = {}
        for name in which:
            if name in eq:
                result["bursts_equal"][name] = dict(burst(eq[name], True, EQUAL_BURSTS, EQUAL_KPPS), memory_mib=EQUAL_MIB)
                log(f"  burst at {EQUAL_MIB} MiB {name:18}: {result['bursts_equal'][name]['largest_lossless_burst']}")
                write_result(result_name(passes, which), result)
    for key in ("ladder", "ladder_quota"):
        for name, mixes in result[key].items():
            for mix, r in mixes.items():
                for peer in {"tcpdump", PEER.get(name, "tcpdump")}:
                    base = result[key].get(peer, {}).get(mix, {})
                    b = base.get("loss_free_kpps") or None
                    r[f"ratio_to_{peer}"] = r["loss_free_kpps"] / b if b else None
                    r[f"cpu_ratio_to_{peer}"] = cpu_ratio(r, base)
    write_result(result_name(passes, which), result)
    if "ladder" in passes:
        plot(result, RESULTS / f"{result_name(passes, which)}.png")


def plot(result, path):
    """Median loss against the rate sent, one panel per mix, a line per tool."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    mixes = list(result["generator"])
    fig, axes = plt.subplots(1, len(mixes), figsize=(6.5 * len(mixes), 4.5), squeeze=False)
    for ax, mix in zip(axes[0], mixes):
        for name, per_mix in result["ladder"].items():
            steps = per_mix.get(mix, {}).get("steps", [])
            ax.plot([s["sent_kpps"] for s in steps], [100 * s["loss"] for s in steps], marker="o", label=name)
        for (gen, c), style in zip(result["generator"][mix].items(), ("--", ":")):
            ax.axvline(c / 1e3, color="grey", linestyle=style, label=f"{GEN_TITLE[gen]} ceiling {c / 1e3:.0f} kpps")
        ax.set_xlabel(f"sent (kpps, {mix} frames, median of {result['runs_per_step']} runs)")
        ax.set_ylabel("lost (% of sent)")
        ax.set_title(f"2 queues, {mix}: " + ("weir replay --xdp --pps steps and its top speed" if result["generator_kind"] == "xdp" else "trafgen steps"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log(f"plot: {path}")


GEN_TITLE = {"xdp": "weir replay --xdp", "trafgen": "trafgen"}


# "tcpdump -B 131072" is tcpdump given weir's default memory (64 MiB per queue, 2 queues).
ALL = ["tcpdump", "tcpdump -B 131072", "netsniff-ng", "weir-afpacket", "weir-afxdp", "weir-xdp", "tcpdump-on-weir", "tcpdump-on-weir-locality",
       "softflowd", "softflowd-on-weir", "softflowd-on-weir-locality"]
PASSES = ["ladder", "ladder_quota", "bursts", "bursts_equal"]


def cpu_ratio(r, base):
    """CPU per packet against a peer's at the same rate: the highest step both ran
    without loss (CPU per packet falls as the rate rises, so only equal rates
    compare). {"kpps", "ratio"}, or None when they share no loss-free step."""
    # The top step's rate is the XDP generator's, which differs from tool to tool.
    mine = {s["kpps"]: s["cpu_ns_per_packet"] for s in r["steps"] if s["median_lost"] == 0 and s["kpps"] != TOP}
    theirs = {s["kpps"]: s["cpu_ns_per_packet"] for s in base.get("steps", []) if s["median_lost"] == 0 and s["kpps"] != TOP}
    common = sorted(set(mine) & set(theirs))
    if not common or not theirs[common[-1]]:
        return None
    return {"kpps": common[-1], "ratio": mine[common[-1]] / theirs[common[-1]]}


def result_name(passes, which=None):
    """The result file: live-xdp.json for a full run of every tool with the XDP
    generator (live.json with trafgen), -<passes> for some passes, -<tools> for
    some tools, -quick for --quick (a partial run never overwrites the full one)."""
    name = "live" + ("-xdp" if GEN["kind"] == "xdp" else "")
    if sorted(passes) != sorted(PASSES):
        name += "-" + "-".join(passes)
    if which and sorted(which) != sorted(ALL):
        name += "-" + "-".join(w.split()[0] for w in which)
    return name + ("-quick" if GEN.get("quick") else "")


def main():
    args = sys.argv[1:]
    quota, passes, gen, quick = 3, PASSES, "xdp", False
    if args[:1] in (["-h"], ["--help"]):
        sys.exit(f"usage: bench/live.py [--quick] [--generator xdp|trafgen] [--quota PCT] [--passes {','.join(PASSES)}] [TOOL...]\n"
                 f"tools: {' '.join(ALL)}\n--quick (about 8 minutes): {', '.join(QUICK_TOOLS)}; 64-byte frames; steps of "
                 f"{QUICK_SECONDS_PER_STEP:.0f} s at {QUICK_RATES_KPPS} kpps and the top step; no quota pass; paused bursts of {', '.join(QUICK_BURSTS)} only")
    if args[:1] == ["--quick"]:
        quick, passes, args = True, ["ladder", "bursts"], args[1:]
    if args[:1] == ["--generator"]:
        gen, args = args[1], args[2:]
        if gen not in GEN_TITLE:
            sys.exit(f"--generator {gen}: choose xdp or trafgen")
    if args[:1] == ["--quota"]:
        quota, args = float(args[1]), args[2:]
    if args[:1] == ["--passes"]:
        passes, args = args[1].split(","), args[2:]
        if not set(passes) <= set(PASSES):
            sys.exit(f"unknown pass(es) {sorted(set(passes) - set(PASSES))}: choose from {PASSES}")
    GEN.update(kind=gen, quick=quick)
    if args[:1] == ["--inner"]:
        return inner(args[1:] or (QUICK_TOOLS if quick else ALL), quota, passes, gen, quick)
    which = args or (QUICK_TOOLS if quick else ALL)
    unknown = [w for w in which if w not in ALL]
    if unknown:
        sys.exit(f"unknown tool(s) {unknown}: choose from {ALL}")
    if os.geteuid() != 0:
        sys.exit("bench/live.py needs root (it builds network namespaces)")
    inner_argv = [sys.executable, __file__, *(["--quick"] if quick else []), "--generator", gen, "--quota", str(quota), "--passes", ",".join(passes),
                  "--inner", *which]
    return subprocess.run([str(ROOT / "scripts" / "testbed"), "--queues", "2", "--", *inner_argv]).returncode


if __name__ == "__main__":
    sys.exit(main())
