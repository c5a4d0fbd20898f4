#!/usr/bin/env python3
"""The generator's ceiling: packets per second received in the peer namespace
of the veth test bed, for `weir replay --xdp` (the kernel's XDP live-frames
test run), `weir replay` (PACKET_TX_RING) and trafgen (netsniff-ng).

Runs itself inside scripts/testbed (two namespaces joined by a 2-queue veth
pair). The receiving end has an XDP program that drops every frame, so the
receiver costs the same for every sender and a veth frame sent by XDP has a
NAPI queue to land in (without one the veth drops it). What counts is the
receiving interface's rx_packets (all it took, the dropped ones included),
read over a window of steady sending that leaves out start-up; what the
sender claims is kept beside it only as context. Each sender runs pinned to
CPU 0, where the veth's receive processing runs too.

Two mixes: 64-byte UDP frames, and a mixed-size trace (4 of 64 bytes, 2 of
576, 4 of 1500, the shape bench/live.py uses). The frames are the same bytes
for the three senders. Median of RUNS runs per sender and mix; results in
bench/results/generator.json.

    bench/generator.py [--runs N]     (needs root)
"""
import json
import os
import signal
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, WEIR, WORK, log, machine, sh, write_result  # noqa: E402

RUNS = 3
# Seconds of sending before the window opens, and the window.
SETTLE = 1.0
WINDOW = 3.0
MIXES = {"64B": [64], "mixed": [64] * 4 + [576] * 2 + [1500] * 4}
# Frames in the trace the AF_PACKET sender loops over: each pass restarts
# weir's engine, so a pass must be long.
TX_RING_TRACE = 100_000
ENV = os.environ

DROP_C = """
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int drop(struct xdp_md *ctx) { return XDP_DROP; }
char LICENSE[] SEC("license") = "GPL";
"""


def frame(size, i):
    """Ethernet/IPv4/UDP of `size` bytes to a MAC and address nobody has."""
    ip_len, payload = size - 14, size - 42
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, i & 0xFFFF, 0x4000, 64, 17, 0, bytes([198, 18, 0, 1]), bytes([198, 18, 0, 99]))
    s = sum(struct.unpack("!10H", ip))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    ip = ip[:10] + struct.pack("!H", ~s & 0xFFFF) + ip[12:]
    udp = struct.pack("!HHHH", 1024 + i % 50000, 53, payload + 8, 0)
    return bytes([2, 0, 0, 0, 0, 0x63, 2, 0, 0, 0, 0, 1, 8, 0]) + ip + udp + b"A" * payload


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", i // 1_000_000, i % 1_000_000, len(fr), len(fr)))
            f.write(fr)


def trafgen_cfg(path, sizes):
    lines = []
    for i, size in enumerate(sizes):
        lines.append("{ " + ", ".join(f"0x{b:02x}" for b in frame(size, i)) + " }")
    path.write_text("\n".join(lines) + "\n")


def ns(which):
    return ["ip", "netns", "exec", ENV[f"TB_{which}_NS"]]


def rx_counters():
    p = sh(ns("RX") + ["cat", f"/sys/class/net/{ENV['TB_RX_IF']}/statistics/rx_packets", f"/sys/class/net/{ENV['TB_RX_IF']}/statistics/rx_dropped"])
    return [int(x) for x in p.stdout.split()]


def measure(argv):
    """Start a sender, count what the receiver takes over the window, stop it."""
    # A session of its own: `ip netns exec` may run the sender as a child, and
    # the stop must reach it.
    p = subprocess.Popen(["taskset", "-c", "0"] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(SETTLE)
    (rx0, drop0), t0 = rx_counters(), time.perf_counter()
    time.sleep(WINDOW)
    (rx1, drop1), t1 = rx_counters(), time.perf_counter()
    os.killpg(p.pid, signal.SIGINT)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        raise
    if p.returncode not in (0, 130, -2):
        raise RuntimeError(f"{argv} failed ({p.returncode}): {err.strip()}")
    claimed = None
    if out.strip().startswith("{"):
        claimed = json.loads(out)["pps"]
    return {"rx_pps": (rx1 - rx0) / (t1 - t0), "rx_dropped_per_s": (drop1 - drop0) / (t1 - t0), "sender_claims_pps": claimed}


def inner(runs):
    WORK.mkdir(parents=True, exist_ok=True)
    src = WORK / "xdp_drop.c"
    src.write_text(DROP_C)
    obj = WORK / "xdp_drop.o"
    arch = os.uname().machine
    sh(["clang", "-O2", "-target", "bpf", "-I", f"/usr/include/{arch}-linux-gnu", "-c", str(src), "-o", str(obj)])
    sh(["ip", "-n", ENV["TB_RX_NS"], "link", "set", "dev", ENV["TB_RX_IF"], "xdpdrv", "obj", str(obj), "sec", "xdp"])
    tx = ["--netns", ENV["TB_TX_NS"]]
    results = {}
    for mix, sizes in MIXES.items():
        frames = [frame(s, i) for i, s in enumerate(sizes)]
        small, big, cfg = WORK / f"gen-{mix}.pcap", WORK / f"gen-{mix}-long.pcap", WORK / f"gen-{mix}.cfg"
        write_pcap(small, frames)
        write_pcap(big, [frames[i % len(frames)] for i in range(TX_RING_TRACE)])
        trafgen_cfg(cfg, sizes)
        senders = {
            "weir replay --xdp": [str(WEIR), "replay", "--json", *tx, "--xdp", ENV["TB_TX_IF"], "--loop", "0", str(small)],
            "weir replay --xdp --vary-ports 1024": [
                str(WEIR), "replay", "--json", *tx, "--xdp", ENV["TB_TX_IF"], "--vary-ports", "1024", "--loop", "0", str(small)],
            "weir replay (PACKET_TX_RING)": [str(WEIR), "replay", "--json", "-q", *tx, "-o", ENV["TB_TX_IF"], "--loop", "0", str(big)],
            "trafgen": ns("TX") + ["trafgen", "-o", ENV["TB_TX_IF"], "-i", str(cfg), "-q", "-C", "-P", "1"],
        }
        results[mix] = {}
        for name, argv in senders.items():
            runs_out = [measure(argv) for _ in range(runs)]
            med = statistics.median(r["rx_pps"] for r in runs_out)
            results[mix][name] = {"rx_pps_median": med, "runs": runs_out}
            log(f"{mix:6} {name:38} {med / 1e3:8.1f} kpps received (median of {runs})")
        base = results[mix]["trafgen"]["rx_pps_median"]
        for name in senders:
            results[mix][name]["vs_trafgen"] = results[mix][name]["rx_pps_median"] / base if base else None
    write_result("generator", {"machine": machine(), "runs": runs, "settle_s": SETTLE, "window_s": WINDOW, "results": results})


def main():
    args = sys.argv[1:]
    runs = RUNS
    if args[:1] in (["-h"], ["--help"]):
        sys.exit(__doc__)
    if args[:1] == ["--runs"]:
        runs, args = int(args[1]), args[2:]
    if args[:1] == ["--inner"]:
        return inner(runs)
    if os.geteuid() != 0:
        sys.exit("bench/generator.py needs root (it builds network namespaces)")
    if not WEIR.exists():
        sys.exit(f"no release build at {WEIR}: cargo build --release -p weir-cli")
    return subprocess.run([str(ROOT / "scripts" / "testbed"), "--queues", "2", "--", sys.executable, __file__, "--runs", str(runs), "--inner"]).returncode


if __name__ == "__main__":
    sys.exit(main())
