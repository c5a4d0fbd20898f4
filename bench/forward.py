#!/usr/bin/env python3
"""Forwarding rate and CPU per packet of `weir forward` (afxdp, afpacket, and
xdp: in the kernel, with and without a filter translated to eBPF) against a libpcap forwarder (bench/peers/libpcap_forward.c: pcap_next_ex and
pcap_inject) and the kernel's own XDP redirect (the upper bound: a tiny XDP
program of this script's that redirects IN to OUT, since `xdp-bench` is not
installed here).

The bed: three namespaces, sender S, forwarder F, receiver R, two veth pairs,
no addresses:

    S: s ==== i (IN)  F  (OUT) o ==== r :R

The generator is `weir replay --xdp s` (the kernel's XDP live-frames test run,
the fastest sender here), looping a 64-byte UDP frame with varied source
ports, pinned to CPU 0; the forwarder runs pinned to CPU 1. r has an XDP
program that drops every frame (a constant receiver cost, and a NAPI queue for
frames redirected to o). A frame the generator sends reaches i only if i has
an XDP program (weir's, or the redirect) or GRO: GRO is turned on on i for the
forwarders that attach none. Over a window of steady sending, each run reads:

- offered: i's rx_packets per second (what reached the forwarder: the
  generator's ceiling for that forwarder, stated next to every rate);
- forwarded: r's rx_packets per second (the forwarding rate at full offered load);
- CPU per forwarded packet: the forwarder process's user+system time (where
  it has one; the xdp backend's process only reads counters, its work is
  softirq time), and the whole machine's busy time (generator, softirqs and
  forwarder together) for context.

Median of RUNS runs each. Results in bench/results/forward.json.

    bench/forward.py [--runs N]     (needs root; about 20 s per run and forwarder)
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
from common import WEIR, WORK, build_peer, log, machine, sh, write_result  # noqa: E402
from generator import frame, write_pcap  # noqa: E402

RUNS = 3
# A filter every frame of the generator passes (UDP to port 53), of 13
# cBPF instructions: the cost of judging in the kernel, not of dropping.
FILTER = "udp and not port 80 and not ip6"
SETTLE = 1.5
WINDOW = 4.0
ID = f"{os.getpid() % 100000}"
NS = {"S": f"wbs-{ID}", "F": f"wbf-{ID}", "R": f"wbr-{ID}"}
IF = {"s": f"wbs{ID}", "i": f"wbi{ID}", "o": f"wbo{ID}", "r": f"wbr{ID}"}
TICK = os.sysconf("SC_CLK_TCK")

DROP_C = """
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int drop(struct xdp_md *ctx) { return XDP_DROP; }
char LICENSE[] SEC("license") = "GPL";
"""

REDIRECT_C = """
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int redirect(struct xdp_md *ctx) { return bpf_redirect(OUT_IFINDEX, 0); }
char LICENSE[] SEC("license") = "GPL";
"""


def ip(*args):
    return sh(["ip", *args])


def in_ns(n):
    return ["ip", "netns", "exec", NS[n]]


def build_bed():
    for n in NS.values():
        ip("netns", "add", n)
        sh(["ip", "netns", "exec", n, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
    ip("link", "add", IF["s"], "type", "veth", "peer", "name", IF["i"])
    ip("link", "add", IF["o"], "type", "veth", "peer", "name", IF["r"])
    for iface, n in (("s", "S"), ("i", "F"), ("o", "F"), ("r", "R")):
        ip("link", "set", IF[iface], "netns", NS[n])
        ip("-n", NS[n], "link", "set", IF[iface], "up")


def remove_bed():
    for n in NS.values():
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def bpf_object(name, source, defines=()):
    WORK.mkdir(parents=True, exist_ok=True)
    src, obj = WORK / f"{name}.c", WORK / f"{name}.o"
    src.write_text(source)
    arch = os.uname().machine
    sh(["clang", "-O2", "-target", "bpf", "-I", f"/usr/include/{arch}-linux-gnu", *defines, "-c", str(src), "-o", str(obj)])
    return obj


def counter(n, iface, what="rx_packets"):
    return int(sh(in_ns(n) + ["cat", f"/sys/class/net/{iface}/statistics/{what}"]).stdout)


def proc_cpu(pid):
    """User+system seconds of process `pid` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_busy():
    """Busy seconds of all CPUs (everything but idle and iowait)."""
    v = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(v) - v[3] - v[4]) / TICK


def wait_listening(p):
    for line in p.stderr:
        if "listening on" in line:
            return
    raise RuntimeError(f"{p.args} ended before listening: {p.wait()}")


def measure(fwd_argv, gen_argv):
    """One run: start the forwarder (None: the kernel's redirect, already
    attached), then the generator; read the counters over the window."""
    fwd = None
    if fwd_argv:
        fwd = subprocess.Popen(["taskset", "-c", "1"] + fwd_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        wait_listening(fwd)
    gen = subprocess.Popen(["taskset", "-c", "0"] + gen_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    time.sleep(SETTLE)
    read = lambda: (counter("F", IF["i"]), counter("R", IF["r"]), proc_cpu(fwd.pid) if fwd else 0.0, machine_busy(),  # noqa: E731
                    time.perf_counter())
    a = read()
    time.sleep(WINDOW)
    b = read()
    os.killpg(gen.pid, signal.SIGINT)
    gen.communicate(timeout=30)
    out = ""
    if fwd:
        os.killpg(fwd.pid, signal.SIGINT)
        out, _ = fwd.communicate(timeout=30)
    dt = b[4] - a[4]
    forwarded = b[1] - a[1]
    res = {
        "offered_pps": (b[0] - a[0]) / dt,
        "forwarded_pps": forwarded / dt,
        "process_cpu_ns_per_packet": (b[2] - a[2]) * 1e9 / forwarded if fwd and forwarded else None,
        "machine_cpu_ns_per_packet": (b[3] - a[3]) * 1e9 / forwarded if forwarded else None,
    }
    if out.strip().startswith("{"):
        res["forwarder_says"] = json.loads(out.strip().splitlines()[-1])
    return res


def main():
    args = sys.argv[1:]
    runs = RUNS
    if args[:1] in (["-h"], ["--help"]):
        sys.exit(__doc__)
    if args[:1] == ["--runs"]:
        runs = int(args[1])
    if os.geteuid() != 0:
        sys.exit("bench/forward.py needs root (it builds network namespaces)")
    if not WEIR.exists():
        sys.exit(f"no release build at {WEIR}: cargo build --release -p weir-cli")
    lpf = build_peer("libpcap_forward", "libpcap_forward.c")
    xdp_bench = subprocess.run(["which", "xdp-bench"], capture_output=True).returncode == 0
    trace = WORK / "forward-64B.pcap"
    WORK.mkdir(parents=True, exist_ok=True)
    write_pcap(trace, [frame(64, i) for i in range(64)])
    drop = bpf_object("xdp_drop", DROP_C)
    gen = [str(WEIR), "replay", "-q", "--netns", NS["S"], "--xdp", IF["s"], "--vary-ports", "1024", "--loop", "0", str(trace)]
    results = {}
    try:
        build_bed()
        ip("-n", NS["R"], "link", "set", "dev", IF["r"], "xdpdrv", "obj", str(drop), "sec", "xdp")
        out_index = int(sh(in_ns("F") + ["cat", f"/sys/class/net/{IF['o']}/ifindex"]).stdout)
        redirect = bpf_object("xdp_redirect", REDIRECT_C, [f"-DOUT_IFINDEX={out_index}"])
        fwd = [str(WEIR), "forward", "-q", "--json", "--netns", NS["F"], IF["i"], IF["o"]]
        peers = {
            "weir forward afxdp": (fwd + ["--backend", "afxdp"], False),
            "weir forward afpacket": (fwd + ["--backend", "afpacket"], True),
            "weir forward xdp": (fwd + ["--backend", "xdp"], False),
            "weir forward xdp, filter": (fwd + ["--backend", "xdp", "-f", FILTER], False),
            "libpcap forwarder": (in_ns("F") + [str(lpf), IF["i"], IF["o"]], True),
            "kernel XDP redirect": (None, False),
        }
        for name, (argv, gro) in peers.items():
            sh(in_ns("F") + ["ethtool", "-K", IF["i"], "gro", "on" if gro else "off"])
            if argv is None:
                ip("-n", NS["F"], "link", "set", "dev", IF["i"], "xdpdrv", "obj", str(redirect), "sec", "xdp")
            out = [measure(argv, gen) for _ in range(runs)]
            if argv is None:
                ip("-n", NS["F"], "link", "set", "dev", IF["i"], "xdpdrv", "off")
            med = {k: statistics.median(r[k] for r in out) if all(r[k] is not None for r in out) else None
                   for k in ("offered_pps", "forwarded_pps", "process_cpu_ns_per_packet", "machine_cpu_ns_per_packet")}
            results[name] = {"median": med, "runs": out}
            cpu = med["process_cpu_ns_per_packet"]
            log(f"{name:24} forwarded {med['forwarded_pps'] / 1e3:8.1f} kpps of {med['offered_pps'] / 1e3:8.1f} kpps offered; "
                f"process CPU {cpu and round(cpu)} ns/pkt, machine {round(med['machine_cpu_ns_per_packet'] or 0)} ns/pkt")
    finally:
        remove_bed()
    base = results["libpcap forwarder"]["median"]
    for r in results.values():
        m = r["median"]
        r["rate_vs_libpcap"] = m["forwarded_pps"] / base["forwarded_pps"] if base["forwarded_pps"] else None
        pc, bc = m["process_cpu_ns_per_packet"], base["process_cpu_ns_per_packet"]
        r["process_cpu_vs_libpcap"] = pc / bc if pc and bc else None
    write_result("forward", {
        "machine": machine(), "runs": runs, "settle_s": SETTLE, "window_s": WINDOW, "frame_bytes": 64,
        "generator": "weir replay --xdp --vary-ports 1024, CPU 0; forwarder on CPU 1",
        "upper_bound": "xdp-bench redirect" if xdp_bench else "xdp-bench is not installed: a tiny XDP program of this script's, "
                       "bpf_redirect(OUT) on IN",
        "results": results,
    })


if __name__ == "__main__":
    sys.exit(main())
