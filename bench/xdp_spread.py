#!/usr/bin/env python3
"""When the NIC piles every flow on one RX queue: `xdp:` spread by RX queue
(`--xdp-spread queue`, what afxdp's per-queue sockets get) against spread by
weir's symmetric hash (`--xdp-spread hash`, the default), in one run.

Runs itself inside scripts/testbed (two namespaces joined by a 2-queue veth
pair). `weir replay --xdp` pinned to CPU 0 sends 64-byte UDP frames of 1,024
flows (`--vary-ports`); a veth hands every frame it is sent through XDP to
the RX queue of the sending CPU, so all of them arrive on one RX queue, as
on a NIC whose RSS puts a few heavy flows on one queue. `weir handle
--wait-us W xdp:IF@0-1` captures them on 2 queues, each worker spending W
microseconds per packet to a schedule (an application blocked on I/O: slow
without taking a CPU, so the 2 cores here are not what limits it). Offered
load: OFFERED times one worker's capacity, so one worker cannot keep up and
two can. The ring buffer is small (RING_MIB) so that a lasting overload
shows as delivery drops within a few seconds rather than as a backlog.

For each spread and run: the packets sent, delivered per queue and the
delivery drops (the ring full), from weir's own counters; median of RUNS.

    bench/xdp_spread.py [--runs N]   (needs root and a release build)

Results: bench/results/xdp-spread.json.
"""
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, WEIR, WORK, log, machine, write_result  # noqa: E402
from generator import frame, write_pcap  # noqa: E402

RUNS = 3
WAIT_US = 20
# One worker's capacity at WAIT_US per packet, in packets/s.
WORKER_PPS = 1_000_000 // WAIT_US
OFFERED = 1.4
SECONDS = 4.0
RING_MIB = 2
ENV = os.environ


def ns(which):
    return ["ip", "netns", "exec", ENV[f"TB_{which}_NS"]]


def one(spread, pcap):
    """One run: weir handle on both queues, the send, Ctrl-C; weir's JSON report."""
    argv = ns("RX") + [str(WEIR), "handle", "--json", "-x", "0", "--wait-us", str(WAIT_US), f"xdp:{ENV['TB_RX_IF']}@0-1",
                       "--xdp-spread", spread, "--xdp-ring", str(RING_MIB), "--take-host-traffic"]
    weir = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    if weir.poll() is not None:
        raise RuntimeError(f"weir handle exited at start: {weir.stderr.read()}")
    pps = int(OFFERED * WORKER_PPS)
    n = int(pps * SECONDS)
    send = ["taskset", "-c", "0", str(WEIR), "replay", "--json", "--netns", ENV["TB_TX_NS"], "--xdp", ENV["TB_TX_IF"], "--vary-ports", "1024",
            "--loop", "0", "-c", str(n), "--pps", str(pps), str(pcap)]
    sent = json.loads(subprocess.run(send, check=True, capture_output=True, text=True).stdout)
    # Let what the ring holds be worked off before the stop (the stop takes it too).
    time.sleep(1.0)
    weir.send_signal(2)
    out, err = weir.communicate(timeout=60)
    if weir.returncode != 0:
        raise RuntimeError(f"weir handle failed ({weir.returncode}): {err}")
    v = json.loads(out)
    queues = v["queues"]
    return {
        "sent": sent["packets"],
        "sent_kpps": sent["packets"] / sent["elapsed_s"] / 1e3,
        "received": v["received"],
        "delivered_per_queue": [q["delivered"] for q in queues],
        "delivery_drops": sum(q["delivery_drops"] for q in queues),
        "capture_drops": sum(q["capture_drops"] for q in queues),
    }


def inner(runs):
    WORK.mkdir(parents=True, exist_ok=True)
    subprocess.run(ns("RX") + ["ip", "addr", "flush", "dev", ENV["TB_RX_IF"]], check=True)
    pcap = WORK / "xdp-spread-64B.pcap"
    write_pcap(pcap, [frame(64, 0)])
    results = {}
    # Interleaved: each run of one spread beside one of the other.
    for r in range(runs):
        for spread in ("queue", "hash"):
            res = one(spread, pcap)
            results.setdefault(spread, {"runs": []})["runs"].append(res)
            log(f"run {r + 1} {spread:5}: sent {res['sent']} at {res['sent_kpps']:.0f} kpps, delivered {res['delivered_per_queue']}, "
                f"delivery drops {res['delivery_drops']}")
    for spread, r in results.items():
        runs_ = r["runs"]
        r["median_delivery_drops"] = statistics.median(x["delivery_drops"] for x in runs_)
        r["median_lost_share"] = statistics.median((x["sent"] - sum(x["delivered_per_queue"])) / x["sent"] for x in runs_)
    write_result("xdp-spread", {"machine": machine(), "runs": runs, "wait_us": WAIT_US, "worker_pps": WORKER_PPS, "offered": OFFERED,
                                "seconds": SECONDS, "ring_mib": RING_MIB, "results": results})


def main():
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        sys.exit(__doc__)
    runs = RUNS
    if args[:1] == ["--runs"]:
        runs, args = int(args[1]), args[2:]
    if args[:1] == ["--inner"]:
        return inner(runs)
    if os.geteuid() != 0:
        sys.exit("bench/xdp_spread.py needs root (it builds network namespaces)")
    if not WEIR.exists():
        sys.exit(f"no {WEIR}: cargo build --release -p weir-cli")
    argv = [sys.executable, __file__, "--runs", str(runs), "--inner"]
    return subprocess.run([str(ROOT / "scripts" / "testbed"), "--queues", "2", "--", *argv]).returncode


if __name__ == "__main__":
    sys.exit(main())
