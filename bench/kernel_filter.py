#!/usr/bin/env python3
"""What the afxdp filter in the XDP program saves: weir's CPU per packet on
the wire when the filter runs in the kernel (what it rejects never takes a
UMEM frame or a trip to user space, and goes on to the host's stack) against
the same filter run in user space only.

The same build, the same run: `-f udp` runs in the kernel; `-f 'udp or ip6
protochain 250'` keeps exactly the same packets of this IPv4 trace, but
protochain's backward jump cannot run in the kernel, so weir takes every
packet and filters it in user space (its start notes say so; the script
checks). The trace is 64-byte frames, one UDP in ten (the others IPv4 with
protocol 6), sent by `weir replay --xdp --loop 0` on CPU 0 at its top speed;
`weir count` captures on CPU 1 from the veth end, which has no address. CPU is
the capture process's utime+stime over the run, per packet it received
(captured plus filtered). Runs alternate between the two filters; medians of
RUNS. Results in bench/results/kernel-filter.json.

    bench/kernel_filter.py [--runs N]     (needs root; about 1 minute with 5 runs)
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

RUNS = 5
SECONDS = 4.0
FILTERS = {"kernel": "udp", "user space only": "udp or ip6 protochain 250"}
ENV = os.environ
TICKS = os.sysconf("SC_CLK_TCK")


def frame(i):
    """64 bytes: Ethernet/IPv4 with a UDP-shaped header; protocol 17 for one in ten, else 6."""
    proto = 17 if i % 10 == 0 else 6
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 50, i & 0xFFFF, 0x4000, 64, proto, 0, bytes([198, 18, 0, 1]), bytes([198, 18, 0, 99]))
    s = sum(struct.unpack("!10H", ip))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    ip = ip[:10] + struct.pack("!H", ~s & 0xFFFF) + ip[12:]
    l4 = struct.pack("!HHHH", 1024 + i, 53, 30, 0) + b"A" * 22
    return bytes([2, 0, 0, 0, 0, 0x63, 2, 0, 0, 0, 0, 1, 8, 0]) + ip + l4


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", 0, i, len(fr), len(fr)))
            f.write(fr)


def cpu_ticks(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def run(expr, trace):
    cap = subprocess.Popen(
        ["taskset", "-c", "1", str(WEIR), "count", "--json", "--netns", ENV["TB_RX_NS"], "-f", expr, f"afxdp:{ENV['TB_RX_IF']}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    notes = []
    for line in cap.stderr:
        if "listening on" in line:
            break
        notes.append(line.strip())
    else:
        raise RuntimeError(f"weir count never listened: {' | '.join(notes)}")
    gen = subprocess.Popen(["taskset", "-c", "0", str(WEIR), "replay", "--json", "--netns", ENV["TB_TX_NS"], "--xdp", ENV["TB_TX_IF"],
                            "--loop", "0", str(trace)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(SECONDS)
    os.killpg(gen.pid, signal.SIGINT)
    gen.communicate(timeout=30)
    time.sleep(0.3)
    ticks = cpu_ticks(cap.pid)
    cap.send_signal(signal.SIGINT)
    out, err = cap.communicate(timeout=30)
    v = json.loads(out)
    got = v["received"]
    return {
        "received": got, "captured": v["packets"], "filtered": v["filtered"],
        "capture_drops": v["capture_drops"], "delivery_drops": v["delivery_drops"],
        "cpu_ns_per_packet": ticks / TICKS * 1e9 / got if got else None,
        "in_kernel": any("what it rejects goes on to the host" in n for n in notes),
        "notes": notes,
    }


def inner(runs):
    WORK.mkdir(parents=True, exist_ok=True)
    sh(["ip", "-n", ENV["TB_RX_NS"], "addr", "flush", "dev", ENV["TB_RX_IF"]])
    trace = WORK / "kernel-filter.pcap"
    write_pcap(trace, [frame(i) for i in range(1000)])
    out = {name: [] for name in FILTERS}
    for r in range(runs):
        for name, expr in FILTERS.items():
            res = run(expr, trace)
            if res["in_kernel"] != (name == "kernel"):
                raise RuntimeError(f"{expr!r}: expected the filter {'in' if name == 'kernel' else 'out of'} the kernel; notes: {res['notes']}")
            out[name].append(res)
            log(f"run {r + 1}: {name:16} {res['cpu_ns_per_packet']:7.1f} ns/packet, {res['received']} received, "
                f"{res['captured']} captured, {res['filtered']} filtered, drops {res['capture_drops']}+{res['delivery_drops']}")
    med = {name: statistics.median(x["cpu_ns_per_packet"] for x in rs) for name, rs in out.items()}
    ratios = [u["cpu_ns_per_packet"] / k["cpu_ns_per_packet"] for k, u in zip(out["kernel"], out["user space only"])]
    log(f"median CPU per packet: kernel {med['kernel']:.1f} ns, user space only {med['user space only']:.1f} ns; "
        f"user/kernel {statistics.median(ratios):.2f} (median of paired runs)")
    write_result("kernel-filter", {"machine": machine(), "runs": runs, "seconds": SECONDS, "filters": FILTERS,
                                   "median_cpu_ns_per_packet": med, "user_over_kernel_median": statistics.median(ratios), "results": out})


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
        sys.exit("bench/kernel_filter.py needs root (it builds network namespaces)")
    if not WEIR.exists():
        sys.exit(f"no release build at {WEIR}: cargo build --release -p weir-cli")
    return subprocess.run([str(ROOT / "scripts" / "testbed"), "--queues", "1", "--", sys.executable, __file__, "--runs", str(runs), "--inner"]).returncode


if __name__ == "__main__":
    sys.exit(main())
