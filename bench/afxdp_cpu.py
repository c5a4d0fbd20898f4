#!/usr/bin/env python3
"""Where weir's CPU goes on afxdp and xdp against afpacket: system calls,
context switches and CPU time per packet received, at the same rate, in one run.

Runs itself inside scripts/testbed (two namespaces joined by a 2-queue veth
pair); the capturing veth end has its address removed (an AF_XDP capture takes
every packet of the interface from the host). For each rate, `weir count` on
2 queues captures trafgen's 64-byte frames (pinned to CPU 0, paced), and
`weir replay --xdp` (the kernel's XDP live-frames test run, unpaced: the top
step) sends a fixed count. The counters are read over the sending only:

- CPU: every thread's schedstat run time (ns), before and after;
- system calls and context switches: `perf stat` attached to the running
  process (the `raw_syscalls:sys_enter` tracepoint and the software
  `context-switches` event; no hardware counters are needed), so the
  capture runs at its own speed, unlike under strace.

Each figure is the median of RUNS runs, over the packets the tool received.
Binaries to compare are given as NAME=PATH (default: the release build), so a
build before a change and after it are measured in the same run:

    bench/afxdp_cpu.py [--runs N] [--rates K,K,...] [NAME=PATH ...]   (needs root)

Results: bench/results/afxdp-cpu.json.
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
from common import ROOT, WEIR, WORK, log, machine, sh, write_result  # noqa: E402
from generator import frame, write_pcap  # noqa: E402

RUNS = 3
# xdp: weir's XDP program copying into one ring buffer; its packets go on to
# the host's stack afterwards, as afpacket's do.
SOURCES = ("afpacket", "afxdp", "xdp")
RATES_KPPS = [100, 400]
SECONDS = 2.0
# Packets `weir replay --xdp` sends at its top speed (about a second's worth).
XDP_PACKETS = 1_000_000
ENV = os.environ

PASS_C = """
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int pass(struct xdp_md *ctx) { return XDP_PASS; }
char LICENSE[] SEC("license") = "GPL";
"""


def ns(which):
    return ["ip", "netns", "exec", ENV[f"TB_{which}_NS"]]


def cpu_ns(pid):
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            pass
    return total


def pass_program(on, obj):
    """A veth delivers XDP-sent frames only to a peer with an XDP program: for
    afpacket an XDP_PASS one; afxdp and xdp bring their own (and refuse a foreign one)."""
    dev = ["ip", "-n", ENV["TB_RX_NS"], "link", "set", "dev", ENV["TB_RX_IF"]]
    sh(dev + (["xdpdrv", "obj", str(obj), "sec", "xdp"] if on else ["xdpdrv", "off"]))


def send_trafgen(kpps, packets, cfg):
    """Returns None: trafgen paces, and its ceiling is bench/generator.py's."""
    sh(["taskset", "-c", "0"] + ns("TX") + ["trafgen", "-o", ENV["TB_TX_IF"], "-i", str(cfg), "-n", str(packets), "-q", "-C", "-P", "1",
                                             "-b", f"{kpps * 1000}pps"])


def send_xdp(weir, packets, pcap):
    """Returns the rate it sent at (packets/s, by its own count and clock)."""
    out = sh(["taskset", "-c", "0", str(weir), "replay", "--json", "--netns", ENV["TB_TX_NS"], "--xdp", ENV["TB_TX_IF"], "--vary-ports", "1024",
        "--loop", "0", "-c", str(packets), str(pcap)]).stdout
    return json.loads(out)["pps"]


def one(weir, source, sender):
    """Capture with `weir count` while `sender()` runs; returns the counters."""
    proc = subprocess.Popen(ns("RX") + [str(weir), "count", "--json", f"{source}:{ENV['TB_RX_IF']}@0-1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    if proc.poll() is not None:
        raise RuntimeError(f"weir count exited at start: {proc.stderr.read()}")
    # `ip netns exec` execs the tool in place: the child is weir itself.
    pid = proc.pid
    perf_out = WORK / "afxdp-cpu.perf"
    perf = subprocess.Popen(["perf", "stat", "-x", ",", "-o", str(perf_out), "-e", "raw_syscalls:sys_enter,context-switches", "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    c0 = cpu_ns(pid)
    t0 = time.perf_counter()
    sent_pps = sender()
    time.sleep(0.3)
    c1 = cpu_ns(pid)
    wall = time.perf_counter() - t0
    perf.send_signal(signal.SIGINT)
    perf.wait(timeout=10)
    counts = {}
    for line in perf_out.read_text().splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].strip().isdigit():
            counts[parts[2]] = int(parts[0])
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    v = json.loads(out)
    received = max(v["received"], 1)
    return {
        "received": v["received"],
        "lost": v["capture_drops"] + v["delivery_drops"],
        "cpu_ns_per_packet": (c1 - c0) / received,
        "syscalls_per_packet": counts.get("raw_syscalls:sys_enter", 0) / received,
        "context_switches_per_packet": counts.get("context-switches", 0) / received,
        "cpu_share": (c1 - c0) / 1e9 / wall,
        "sender_pps": sent_pps or 0,
    }


def inner(runs, rates, binaries):
    WORK.mkdir(parents=True, exist_ok=True)
    sh(["ip", "-n", ENV["TB_RX_NS"], "addr", "flush", "dev", ENV["TB_RX_IF"]])
    src, obj = WORK / "xdp_pass.c", WORK / "xdp_pass.o"
    src.write_text(PASS_C)
    sh(["clang", "-O2", "-target", "bpf", "-I", f"/usr/include/{os.uname().machine}-linux-gnu", "-c", str(src), "-o", str(obj)])
    cfg, pcap = WORK / "afxdp-cpu.cfg", WORK / "afxdp-cpu.pcap"
    fr = frame(64, 0)
    cfg.write_text("{ " + ", ".join(f"0x{b:02x}" for b in fr) + " }\n")
    write_pcap(pcap, [fr])
    steps = [(f"{k} kpps (trafgen)", lambda k=k: send_trafgen(k, int(k * 1000 * SECONDS), cfg)) for k in rates]
    # The first binary sends, the same for every capture.
    sender = next(iter(binaries.values()))
    steps.append(("top speed (weir replay --xdp)", lambda: send_xdp(sender, XDP_PACKETS, pcap)))
    results = {}
    for step, send in steps:
        for name, weir in binaries.items():
            for source in SOURCES:
                pass_program(source == "afpacket", obj)
                rs = [one(weir, source, send) for _ in range(runs)]
                med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                results.setdefault(step, {})[f"{name} {source}"] = {"median": med, "runs": rs}
                log(f"{step:30} {name:8} {source:8}: {med['received']:9.0f} received, {med['lost']:7.0f} lost, "
                    f"{med['cpu_ns_per_packet']:6.0f} ns CPU, {med['syscalls_per_packet']:.4f} syscalls, "
                    f"{med['context_switches_per_packet']:.4f} switches per packet")
        pass_program(False, obj)
        for name in binaries:
            a = results[step][f"{name} afpacket"]["median"]
            for source in SOURCES[1:]:
                x = results[step][f"{name} {source}"]["median"]
                results[step][f"{name} {source}/afpacket cpu"] = x["cpu_ns_per_packet"] / a["cpu_ns_per_packet"] if a["cpu_ns_per_packet"] else None
    write_result("afxdp-cpu", {"machine": machine(), "runs": runs, "seconds_per_step": SECONDS, "binaries": {k: str(v) for k, v in binaries.items()},
                               "results": results})


def main():
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        sys.exit(__doc__)
    runs, rates = RUNS, RATES_KPPS
    if args[:1] == ["--runs"]:
        runs, args = int(args[1]), args[2:]
    if args[:1] == ["--rates"]:
        rates, args = [int(r) for r in args[1].split(",")], args[2:]
    inner_mode = args[:1] == ["--inner"]
    args = args[1:] if inner_mode else args
    binaries = dict(a.split("=", 1) for a in args) if args else {"weir": str(WEIR)}
    if inner_mode:
        return inner(runs, rates, {k: Path(v) for k, v in binaries.items()})
    if os.geteuid() != 0:
        sys.exit("bench/afxdp_cpu.py needs root (it builds network namespaces)")
    argv = [sys.executable, __file__, "--runs", str(runs), "--rates", ",".join(map(str, rates)), "--inner", *[f"{k}={v}" for k, v in binaries.items()]]
    return subprocess.run([str(ROOT / "scripts" / "testbed"), "--queues", "2", "--", *argv]).returncode


if __name__ == "__main__":
    sys.exit(main())
